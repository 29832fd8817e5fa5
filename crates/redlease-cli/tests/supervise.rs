//! CMD's supervision, black-box: CMD dies with its supervisor (SIGKILL of `redlease`), the
//! group is signalled without any `kill` program on PATH, a background child CMD leaves behind
//! is stopped before the lease is released, and a blocked stderr does not stop renewals.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// Whether `pid` runs (not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// Polls (bounded) until `pid` is gone.
async fn gone_within(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !alive(pid)
}

/// Kills a pid we recorded, if it still runs our script (cleanup after a failed assertion).
struct KillOnDrop(Vec<PathBuf>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            if let Ok(p) = std::fs::read_to_string(f)
                && let Ok(pid) = p.trim().parse::<u32>()
                && alive(pid)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("sleep"))
            {
                signal(pid, "KILL");
            }
        }
    }
}

/// A script: records its pid in `<tag>.pid`, starts `sleep 600` in the background (its pid in
/// `<tag>.child`), notes SIGTERM in `<tag>.term`, and waits (or exits at once with `exit`).
fn script(dir: &Path, name: &str, body_end: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             tag=\"$1\"\n\
             echo $$ > \"$tag.pid\"\n\
             trap 'echo term > \"$tag.term\"; exit 143' TERM\n\
             sleep 600 &\n\
             echo $! > \"$tag.child\"\n\
             echo \"$REDLEASE_REDIS_URL\" > \"$tag.url\"\n\
             {body_end}\n"
        ),
    )
    .expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn cmd_dies_with_a_sigkilled_supervisor() {
    let server = redis().await;
    let dir = workdir("cli-sup-kill");
    let d = dir.path();
    let job = script(d, "waiting-job.sh", "wait");
    let _cleanup = KillOnDrop(vec![d.join("k.child"), d.join("k.pid")]);
    let mut p = Proc::spawn({
        let mut c = redlease(&server.url(), d);
        c.args(["run", "--name", "sup-kill", "--"])
            .arg(&job)
            .arg("k");
        c
    });
    let pid: u32 = wait_file(&d.join("k.pid")).await.parse().unwrap();
    assert!(alive(pid));
    let child: u32 = wait_file(&d.join("k.child")).await.parse().unwrap();
    p.signal("KILL");
    p.wait_exit().await;
    assert!(
        gone_within(pid, Duration::from_secs(5)).await,
        "CMD (pid {pid}) outlived its SIGKILLed supervisor"
    );
    assert!(
        gone_within(child, Duration::from_secs(1)).await,
        "CMD's background child (pid {child}) outlived its SIGKILLed supervisor"
    );
}

/// The supervisor SIGKILLed while CMD (a shell) waits for a background child: the trampoline
/// (CMD's parent, in CMD's process group) gets its parent-death signal and SIGKILLs the whole
/// group at once, so neither CMD nor its child outlives the supervisor (here under `lock`; `run`
/// starts CMD the same way).
#[tokio::test(flavor = "multi_thread")]
async fn cmd_and_its_children_die_with_a_sigkilled_supervisor() {
    let server = redis().await;
    let dir = workdir("cli-sup-kill-tree");
    let d = dir.path();
    let _cleanup = KillOnDrop(vec![d.join("child.pid"), d.join("cmd.pid")]);
    let mut p = Proc::spawn({
        let mut c = redlease(&server.url(), d);
        c.args(["lock", "sup-kill-tree", "--wait", "0", "--", "sh", "-c"])
            .arg("echo $$ > cmd.pid; sleep 300 & echo $! > child.pid; wait");
        c
    });
    let cmd: u32 = wait_file(&d.join("cmd.pid")).await.parse().unwrap();
    let child: u32 = wait_file(&d.join("child.pid")).await.parse().unwrap();
    assert!(alive(cmd) && alive(child));
    p.signal("KILL");
    let killed = Instant::now();
    p.wait_exit().await;
    // Bounded: the parent-death signal is delivered at once, and the trampoline's group kill
    // is one system call.
    let bound = Duration::from_secs(2);
    assert!(
        gone_within(cmd, bound).await,
        "CMD (pid {cmd}) outlived its SIGKILLed supervisor by {bound:?}"
    );
    assert!(
        gone_within(child, bound.saturating_sub(killed.elapsed())).await,
        "CMD's background child (pid {child}) outlived the SIGKILLed supervisor by {bound:?}"
    );
    eprintln!(
        "CMD and its child gone {:?} after the supervisor's SIGKILL",
        killed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_group_is_signalled_without_a_kill_program() {
    let server = redis().await;
    let dir = workdir("cli-sup-nokill");
    let d = dir.path();
    // A PATH with what the script needs and no `kill`.
    let bin_dir = d.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    for tool in ["sh", "sleep"] {
        let found = ["/bin", "/usr/bin"]
            .iter()
            .map(|p| Path::new(p).join(tool))
            .find(|p| p.exists())
            .expect("tool");
        std::os::unix::fs::symlink(found, bin_dir.join(tool)).unwrap();
    }
    let job = script(d, "waiting-job.sh", "wait");
    let _cleanup = KillOnDrop(vec![d.join("n.child"), d.join("n.pid")]);
    let mut p = Proc::spawn({
        let mut c = redlease(&server.url(), d);
        c.env("PATH", &bin_dir)
            .args(["run", "--name", "sup-nokill", "--grace", "1s", "--"])
            .arg("sh")
            .arg(&job)
            .arg("n");
        c
    });
    let pid: u32 = wait_file(&d.join("n.pid")).await.parse().unwrap();
    let child: u32 = wait_file(&d.join("n.child")).await.parse().unwrap();
    p.signal("TERM");
    assert_eq!(p.wait_exit().await.code(), Some(143), "{:#?}", p.lines());
    assert_eq!(
        wait_file(&d.join("n.term")).await,
        "term",
        "CMD got SIGTERM, not an immediate SIGKILL"
    );
    assert!(!alive(pid), "CMD is gone");
    assert!(
        gone_within(child, Duration::from_secs(2)).await,
        "CMD's own child (pid {child}) was signalled with its group"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leftover_background_child_is_stopped_before_the_release() {
    let server = redis().await;
    let dir = workdir("cli-sup-leftover");
    let d = dir.path();
    let job = script(d, "leaving-job.sh", "exit 0");
    let _cleanup = KillOnDrop(vec![d.join("l.child")]);
    let out = output({
        let mut c = redlease(&server.url(), d);
        c.args(["run", "--name", "sup-leftover", "--grace", "1s", "--"])
            .arg(&job)
            .arg("l");
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let child: u32 = wait_file(&d.join("l.child")).await.parse().unwrap();
    assert!(
        !alive(child),
        "the background child (pid {child}) outlived CMD and the lease: {}",
        stderr(&out)
    );
    // Stopped before the release: the release is the last thing before the exit, and the
    // child was already gone when redlease exited.
    let mut conn = server.connection().await.unwrap();
    let holder: Option<String> = redlease::redis::client::cmd("GET")
        .arg("sup-leftover:leader")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holder, None, "the lease was released");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_stderr_does_not_stop_renewals() {
    use std::io::Write as _;
    let server = redis().await;
    let dir = workdir("cli-sup-stderr");
    let d = dir.path();
    let job = script(d, "waiting-job.sh", "wait");
    let _cleanup = KillOnDrop(vec![d.join("s.child"), d.join("s.pid")]);
    // A pipe nobody reads, filled to its capacity (64 KiB): every write to it blocks.
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    writer.write_all(&[b'x'; 65536]).expect("fill the pipe");
    let mut c = redlease(&server.url(), d);
    c.args(["run", "--name", "sup-stderr", "--ttl", "1s", "--"])
        .arg(&job)
        .arg("s")
        .stdout(Stdio::null())
        .stderr(writer.try_clone().expect("clone"));
    let mut child = c.spawn().expect("spawn");
    let redlease_pid = child.id();
    let pid: u32 = wait_file(&d.join("s.pid")).await.parse().unwrap();

    // Five TTLs: the lease is renewed all along (its key never expires) and CMD runs.
    let mut conn = server.connection().await.unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let mut checks = 0;
    while Instant::now() < until {
        let ttl: i64 = redlease::redis::client::cmd("PTTL")
            .arg("sup-stderr:leader")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            ttl > 0,
            "the lease lapsed while stderr was blocked (PTTL {ttl})"
        );
        assert!(alive(pid), "CMD was stopped while stderr was blocked");
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(checks > 10);
    // And it still stops cleanly (the exit waits at most a second for the blocked stderr).
    signal(redlease_pid, "TERM");
    let waited = tokio::task::spawn_blocking(move || child.wait());
    let status = tokio::time::timeout(EVENTUALLY, waited)
        .await
        .expect("redlease exits with stderr blocked")
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(!alive(pid));
    drop(reader);
}

/// As PID 1 (a new PID namespace, as in a container without an init), redlease reaps the
/// orphans reparented to it: CMD leaves a short-lived background child behind its own exited
/// parent, and no zombie stays.
#[tokio::test(flavor = "multi_thread")]
async fn as_pid_1_orphans_are_reaped() {
    let server = redis().await;
    let dir = workdir("cli-sup-pid1");
    let d = dir.path();
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--kill-child", "--mount-proc", bin()])
        .env("REDLEASE_REDIS_URL", server.url())
        .current_dir(d)
        .stdin(Stdio::null())
        .args(["run", "--name", "sup-pid1", "--", "sh", "-c"])
        .arg("sh -c 'sleep 1 & exit 0'; echo started > started; sleep 600");
    let mut p = Proc::spawn(c);
    wait_file(&d.join("started")).await;
    // redlease's pid on the host: the child of `unshare`.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", p.pid()))
        .expect("unshare's children");
    let init: u32 = children
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("redlease under unshare: {:#?}", p.lines()));
    let children_of_init = || -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .collect()
    };
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    // The orphan (`sleep 1`, whose parent exited) is reparented to redlease...
    let deadline = Instant::now() + Duration::from_secs(5);
    let orphan = loop {
        if let Some(o) = children_of_init()
            .into_iter()
            .find(|c| comm(*c).trim() == "sleep")
        {
            break o;
        }
        assert!(
            Instant::now() < deadline,
            "no orphan reparented to redlease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // ...and once it exits, reaped: it does not stay a zombie.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{orphan}")).exists() {
        assert!(
            Instant::now() < deadline,
            "the orphan {orphan} stays a zombie under redlease as PID 1: {:#?}",
            p.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(init, "TERM");
    let status = p.wait_exit().await;
    assert!(
        p.lines()
            .iter()
            .any(|l| l.contains("SIGTERM: stopping CMD")),
        "{status:?} {:#?}",
        p.lines()
    );
}
