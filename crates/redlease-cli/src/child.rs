//! CMD as a child process: started in its own process group, stopped with SIGTERM, then
//! SIGKILL after a grace period.
//!
//! Signals are sent with the `kill` program (`kill -s TERM -- -<pgid>`): the workspace forbids
//! `unsafe`, so `libc::kill` is not an option, and no safe signal crate is a workspace
//! dependency. The whole process group is signalled, so a shell script's own children are
//! stopped too.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use redlease::CancellationToken;
use tokio::process::{Child, Command};

use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND};

/// The program to run and its arguments.
#[derive(Clone, Debug)]
pub(crate) struct Cmd {
    pub(crate) argv: Vec<OsString>,
}

impl Cmd {
    pub(crate) fn display(&self) -> String {
        self.argv
            .iter()
            .map(|a| {
                let s = a.to_string_lossy();
                if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '\'') {
                    format!("'{}'", s.replace('\'', "'\\''"))
                } else {
                    s.into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Checks, before anything is contended for, that CMD can be found and executed (the
    /// same lookup `spawn` makes: a path as given, else each `PATH` entry).
    pub(crate) fn check(&self) -> Result<(), Failure> {
        use std::os::unix::fs::PermissionsExt;
        let Some(program) = self.argv.first() else {
            return Err(Failure::new(
                crate::exit::USAGE,
                "no command given after `--`",
            ));
        };
        let name = program.to_string_lossy();
        let executable = |p: &std::path::Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        let path = std::path::Path::new(program);
        if program.as_encoded_bytes().contains(&b'/') {
            if !path.exists() {
                return Err(Failure::new(
                    NOT_FOUND,
                    format!("command not found: {name}"),
                ));
            }
            if !executable(path) {
                return Err(Failure::new(
                    CANNOT_EXECUTE,
                    format!("cannot execute {name}: not an executable file"),
                ));
            }
            return Ok(());
        }
        let search = std::env::var_os("PATH").unwrap_or_default();
        if std::env::split_paths(&search).any(|dir| executable(&dir.join(path))) {
            Ok(())
        } else {
            Err(Failure::new(
                NOT_FOUND,
                format!("command not found: {name}"),
            ))
        }
    }

    /// Starts CMD with `env` added to the environment, stdio inherited, in a new process
    /// group (so it can be signalled as a whole).
    pub(crate) fn spawn(&self, env: &[(&str, String)]) -> Result<Child, Failure> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(Failure::new(NOT_FOUND, "no command given"));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .process_group(0)
            // If redlease itself dies abruptly the child is not killed by this; but an
            // error path that drops the handle must not leave it running.
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().map_err(|e| {
            let name = program.to_string_lossy();
            match e.kind() {
                std::io::ErrorKind::NotFound => {
                    Failure::new(NOT_FOUND, format!("command not found: {name}"))
                }
                _ => Failure::new(CANNOT_EXECUTE, format!("cannot execute {name}: {e}")),
            }
        })
    }
}

/// Sends `signal` (`TERM`, `KILL`) to the process group `pgid`.
async fn signal_group(pgid: Option<u32>, signal: &str) -> bool {
    let Some(pgid) = pgid else {
        return false;
    };
    let status = Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    matches!(status, Ok(s) if s.success())
}

/// Stops the child: SIGTERM to its process group, then SIGKILL after `grace` (or at once
/// when `hurry` is cancelled, e.g. by a second Ctrl-C). Returns its exit status.
pub(crate) async fn terminate(
    child: &mut Child,
    grace: Duration,
    hurry: &CancellationToken,
) -> std::io::Result<ExitStatus> {
    // The child leads its own group: its pid is the group id. Read it before the child is
    // reaped (then `id()` is `None`).
    let pgid = child.id();
    if let Some(status) = child.try_wait()? {
        // Already exited: stop whatever it left in its group.
        let _ = signal_group(pgid, "KILL").await;
        return Ok(status);
    }
    if !signal_group(pgid, "TERM").await {
        // No `kill` program: kill the child itself.
        let _ = child.start_kill();
    }
    let status = tokio::select! {
        status = child.wait() => status?,
        _ = tokio::time::sleep(grace) => {
            let _ = signal_group(pgid, "KILL").await;
            let _ = child.start_kill();
            child.wait().await?
        }
        _ = hurry.cancelled() => {
            let _ = signal_group(pgid, "KILL").await;
            let _ = child.start_kill();
            child.wait().await?
        }
    };
    // Members of the group that ignored SIGTERM must not outlive the leader.
    let _ = signal_group(pgid, "KILL").await;
    Ok(status)
}
