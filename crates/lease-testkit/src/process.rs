//! Child-process plumbing shared by the process-mode servers.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{Error, Result};

/// Looks a program up on `PATH`, then in `extra_dirs`.
pub(crate) fn find_program(name: &str, extra_dirs: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().cloned())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Like [`find_program`] but with a typed error carrying an install hint.
pub(crate) fn require_program(name: &str, extra_dirs: &[PathBuf], hint: &str) -> Result<PathBuf> {
    find_program(name, extra_dirs).ok_or_else(|| Error::ProgramNotFound {
        program: name.to_owned(),
        hint: hint.to_owned(),
    })
}

/// A port that was free on 127.0.0.1 a moment ago (bind to port 0, read it, release).
/// Callers must retry with a new port if the server then fails to bind it.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("reading a free port", e))?
        .port();
    Ok(port)
}

/// `127.0.0.1:port`.
pub(crate) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Sends a signal by name (`STOP`, `CONT`, `TERM`, `QUIT`, `KILL`) to a pid using the
/// shell's `kill` builtin, so the kit needs neither `libc` nor `unsafe`.
pub(crate) fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let output = Command::new("/bin/sh")
        .args([
            "-c",
            "kill -s \"$1\" \"$2\"",
            "sh",
            signal,
            &pid.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("running kill -s {signal} {pid}"), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: format!("kill -s {signal} {pid}"),
            output: describe_output(&output.status, &output.stdout, &output.stderr),
        })
    }
}

/// Formats an exit status and output for error messages.
pub(crate) fn describe_output(status: &ExitStatus, stdout: &[u8], stderr: &[u8]) -> String {
    let mut s = format!("{status}");
    for (name, bytes) in [("stdout", stdout), ("stderr", stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim();
        if !text.is_empty() {
            s.push_str(&format!("; {name}: {}", tail(text, 2000)));
        }
    }
    s
}

/// The last `max` bytes of `s` (on a char boundary).
pub(crate) fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The last few KiB of a log file, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            let _ = f.read_to_string(&mut text);
            tail(&text, 4000).to_owned()
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Opens (appending) a log file and returns two handles for stdout and stderr.
pub(crate) fn log_stdio(path: &Path) -> Result<(Stdio, Stdio)> {
    let file = File::options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let err = file
        .try_clone()
        .map_err(|e| Error::io(format!("duplicating {}", path.display()), e))?;
    Ok((Stdio::from(file), Stdio::from(err)))
}

/// Runs a short helper command to completion, killing it after `timeout`.
pub(crate) fn run_with_timeout(
    mut cmd: Command,
    timeout: Duration,
) -> Result<std::process::Output> {
    let shown = display_command(&cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("running `{shown}`"), e))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(result) => result.map_err(|e| Error::io(format!("waiting for `{shown}`"), e)),
        Err(_) => {
            let _ = send_signal(pid, "KILL");
            let _ = rx.recv_timeout(Duration::from_secs(5));
            Err(Error::Command {
                command: shown,
                output: format!("timed out after {timeout:?}"),
            })
        }
    }
}

/// Async version of [`run_with_timeout`] (runs on the blocking pool).
pub(crate) async fn run_with_timeout_async(
    cmd: Command,
    timeout: Duration,
) -> Result<std::process::Output> {
    tokio::task::spawn_blocking(move || run_with_timeout(cmd, timeout))
        .await
        .map_err(|e| Error::io("joining a helper command", std::io::Error::other(e)))?
}

/// `program arg arg ...` for messages.
pub(crate) fn display_command(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A server child process. Dropping it kills it (SIGCONT first if stopped, then
/// SIGKILL) and reaps it, synchronously.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    pid: u32,
    stopped: bool,
}

impl ServerProcess {
    /// Spawns `cmd` (stdin null; stdout/stderr as configured by the caller).
    pub(crate) fn spawn(mut cmd: Command, what: &str) -> Result<Self> {
        cmd.stdin(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("starting {what} (`{}`)", display_command(&cmd)), e))?;
        let pid = child.id();
        Ok(ServerProcess {
            child: Some(child),
            pid,
            stopped: false,
        })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `Some(status)` once the process has exited.
    pub(crate) fn try_exited(&mut self) -> Option<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten(),
            None => None,
        }
    }

    /// SIGSTOP.
    pub(crate) fn pause(&mut self) -> Result<()> {
        send_signal(self.pid, "STOP")?;
        self.stopped = true;
        Ok(())
    }

    /// SIGCONT.
    pub(crate) fn resume(&mut self) -> Result<()> {
        send_signal(self.pid, "CONT")?;
        self.stopped = false;
        Ok(())
    }

    /// SIGKILL and reap (a SIGKILLed process is reaped at once).
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if self.stopped {
            let _ = send_signal(self.pid, "CONT");
            self.stopped = false;
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// Sends `signal` (e.g. `TERM`) and waits for the exit without blocking the
    /// runtime; after `grace` the process is SIGKILLed.
    pub(crate) async fn terminate(&mut self, signal: &str, grace: Duration) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if self.stopped {
            let _ = send_signal(self.pid, "CONT");
            self.stopped = false;
        }
        if child.try_wait().ok().flatten().is_some() {
            return Ok(());
        }
        send_signal(self.pid, signal)?;
        let pid = self.pid;
        let mut waiter = tokio::task::spawn_blocking(move || {
            let _ = child.wait();
        });
        if tokio::time::timeout(grace, &mut waiter).await.is_err() {
            // The blocking waiter still owns the child and reaps it after this.
            let _ = send_signal(pid, "KILL");
            let _ = waiter.await;
        }
        Ok(())
    }

    /// Synchronous terminate for Drop: `signal`, wait up to `grace`, then SIGKILL.
    pub(crate) fn terminate_blocking(&mut self, signal: &str, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.stopped {
            let _ = send_signal(self.pid, "CONT");
            self.stopped = false;
        }
        if child.try_wait().ok().flatten().is_none() && send_signal(self.pid, signal).is_ok() {
            let (tx, rx) = mpsc::channel();
            let pid = self.pid;
            std::thread::spawn(move || {
                let _ = child.wait();
                let _ = tx.send(());
            });
            if rx.recv_timeout(grace).is_err() {
                let _ = send_signal(pid, "KILL");
                let _ = rx.recv_timeout(Duration::from_secs(10));
            }
        } else {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// uid and gid of a local user, from `/etc/passwd`.
pub(crate) fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

/// Whether the current process runs as root (effective uid 0).
pub(crate) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // The owner of a freshly created file is our effective uid; /proc/self is
    // cheaper and always present on Linux.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}
