//! Driving the `redlease` binary as a user would: spawned processes, their stderr lines, the
//! files their commands write, signals. Waits are bounded polls of a condition, never sleeps
//! standing in for synchronisation.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_testkit::redis::RedisServer;
use lease_testkit::tempdir::TempDir;

/// A generous hang guard for "eventually": never a timing assertion.
pub const EVENTUALLY: Duration = Duration::from_secs(30);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_redlease")
}

pub async fn redis() -> RedisServer {
    RedisServer::start().await.expect("start redis")
}

/// A working directory for one test (removed on drop; the kit's leak check sees processes
/// left running in it).
pub fn workdir(label: &str) -> TempDir {
    TempDir::new(label).expect("temp dir")
}

/// A `redlease` command with the URL and the working directory set.
pub fn redlease(url: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env("REDLEASE_REDIS_URL", url)
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

/// Runs a `redlease` command to completion (bounded by [`EVENTUALLY`]).
pub async fn output(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn redlease");
    let pid = child.id();
    let waiter = tokio::task::spawn_blocking(move || child.wait_with_output());
    match tokio::time::timeout(EVENTUALLY, waiter).await {
        Ok(out) => out.expect("join").expect("wait"),
        Err(_) => {
            signal(pid, "KILL");
            panic!("redlease did not finish within {EVENTUALLY:?}");
        }
    }
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Sends a signal (`STOP`, `CONT`, `TERM`, `KILL`, `INT`) to a pid (or `-pgid`).
pub fn signal(pid: impl std::fmt::Display, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, "--", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A `redlease` process running in the background, its stderr collected line by line.
/// Dropping it stops it (and CMD's process group, from the pid file its script wrote).
pub struct Proc {
    child: Option<Child>,
    pid: u32,
    lines: Arc<Mutex<Vec<String>>>,
    pgid_files: Vec<PathBuf>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn redlease");
        let pid = child.id();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Proc {
            child: Some(child),
            pid,
            lines,
            pgid_files: Vec::new(),
            status: None,
        }
    }

    /// A file in which CMD's script writes its pid (= its process group): killed on drop.
    pub fn cleanup_group_from(&mut self, file: PathBuf) {
        self.pgid_files.push(file);
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn signal(&self, sig: &str) {
        signal(self.pid, sig);
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits (bounded) for a stderr line containing `needle`.
    pub async fn wait_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            if let Some(l) = self.lines().into_iter().find(|l| l.contains(needle)) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "no stderr line containing {needle:?} within {EVENTUALLY:?}; lines: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (bounded) for the process to exit.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            let child = self.child.as_mut().expect("child");
            if let Some(s) = child.try_wait().expect("try_wait") {
                self.status = Some(s);
                // Let the reader thread drain the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "redlease (pid {}) did not exit within {EVENTUALLY:?}; lines: {:#?}",
                self.pid,
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && self.status.is_none()
            && matches!(child.try_wait(), Ok(None))
        {
            signal(self.pid, "CONT");
            signal(self.pid, "KILL");
            let _ = child.wait();
        }
        for f in &self.pgid_files {
            let Some(dir) = f.parent() else { continue };
            // CMD's process group: the `.pgid` file its script wrote next to the pid file (CMD
            // runs under redlease's trampoline, which leads the group), else the pid itself.
            let group = std::fs::read_to_string(f.with_extension("pgid"))
                .or_else(|_| std::fs::read_to_string(f))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            if let Some(pgid) = group {
                // Whatever is left in CMD's group and runs in the test's directory (a job
                // whose supervisor was SIGKILLed is killed with its group by the trampoline;
                // this is a safety net).
                for member in group_members_in(pgid, dir) {
                    signal(member.to_string(), "KILL");
                }
            }
        }
    }
}

/// The processes of process group `pgid` whose working directory is `dir` (or below it).
fn group_members_in(pgid: u32, dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let pgrp = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(2))
                .and_then(|p| p.parse::<u32>().ok());
            pgrp == Some(pgid)
                // (A deleted directory reads as "<dir> (deleted)".)
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| {
                    cwd.to_string_lossy()
                        .starts_with(dir.to_string_lossy().as_ref())
                })
        })
        .collect()
}

/// Waits (bounded) until `path` exists and is non-empty; returns its trimmed content.
pub async fn wait_file(path: &Path) -> String {
    wait_file_within(path, EVENTUALLY)
        .await
        .unwrap_or_else(|| panic!("{} did not appear within {EVENTUALLY:?}", path.display()))
}

/// Waits until `path` holds complete lines: its trimmed content, or `None` after `within`.
pub async fn wait_file_within(path: &Path, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return Some(s.trim().to_owned());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The shell lines that write the script's process group (CMD's group, led by redlease's
/// trampoline) in `<tag>.pgid`, for [`Proc`]'s cleanup.
pub const WRITE_PGID: &str = "set -- $(cat /proc/$$/stat); echo \"$5\" > \"$tag.pgid\"\n";

/// Writes an executable script: it records `$$` in `<tag>.pid`, its process group in
/// `<tag>.pgid` and `$REDLEASE_TOKEN` in `<tag>.token`, notes a SIGTERM in `<tag>.term`, and
/// sleeps.
pub fn job_script(dir: &Path) -> PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
         tag=\"$1\"\n\
         echo $$ > \"$tag.pid\"\n\
         {WRITE_PGID}\
         trap 'echo term > \"$tag.term\"; exit 143' TERM\n\
         echo \"${{REDLEASE_TOKEN:-none}}\" > \"$tag.token\"\n\
         sleep 600 &\n\
         wait\n"
        ),
    )
    .expect("write job.sh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// A tiny JSON field reader for the CLI's flat objects (enough for tests: numbers, null,
/// strings without escapes).
pub fn json_field(obj: &str, field: &str) -> Option<String> {
    let key = format!("\"{field}\":");
    let start = obj.find(&key)? + key.len();
    let rest = &obj[start..];
    if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|end| s[..end].to_owned());
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim().to_owned())
}

pub fn assert_one_line(out: &Output) -> String {
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got {lines:#?}");
    assert!(
        lines[0].starts_with("redlease: "),
        "the line names the command: {:?}",
        lines[0]
    );
    assert!(!err.contains("panicked"), "no panic: {err}");
    lines[0].to_owned()
}

/// Writes an executable script that does not stop on SIGTERM: it records `$$` (its process
/// group) in `<tag>.pid`, notes every SIGTERM in `<tag>.term` and carries on, until SIGKILL.
/// Its name contains `job.sh`, so [`Proc`] kills its group on drop.
pub fn stubborn_job_script(dir: &Path) -> PathBuf {
    let path = dir.join("stubborn-job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             tag=\"$1\"\n\
             trap 'echo term >> \"$tag.term\"' TERM\n\
             echo $$ > \"$tag.pid\"\n\
             {WRITE_PGID}\
             while :; do sleep 0.05; done\n"
        ),
    )
    .expect("write stubborn-job.sh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Whether `pid` is alive (not a zombie) and still runs a `job.sh` script (pids are reused).
pub fn job_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    state != "Z" && String::from_utf8_lossy(&cmdline).contains("job.sh")
}

/// Polls until `pid` is gone: when it was first seen gone, or `None` once `within` has
/// passed. Nothing signals the death of a process that is not our child, hence the poll.
pub async fn wait_gone(pid: u32, within: Duration) -> Option<Instant> {
    let deadline = Instant::now() + within;
    loop {
        if !job_alive(pid) {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
