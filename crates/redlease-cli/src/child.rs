//! CMD as a child process: started in its own process group under a tiny trampoline that
//! stays its parent (like `tini`), watched by a thread (`waitid` without reaping), signalled as
//! a group through `kill(2)` (rustix's safe wrappers: the workspace forbids `unsafe`, and no
//! external `kill` program is needed, so the supervisor works in distroless and scratch
//! images).
//!
//! - **The trampoline** (`/proc/self/exe __redlease-exec <supervisor pid> -- CMD...`, see
//!   [`trampoline`]): it leads CMD's process group (the group redlease signals; its pid is the
//!   group's id), sets `PR_SET_PDEATHSIG`, checks that its parent is still the supervisor
//!   (else exits: nobody would stop CMD), and starts CMD as its child in that group (through
//!   [`exec_cmd`], which sets CMD's own parent-death signal, SIGKILL, before `exec`). It then
//!   waits for CMD and exits with CMD's status (killed by signal N: it dies by signal N too,
//!   through [`exit_by_signal`]), so redlease sees CMD's status as before.
//! - **Supervisor death**: when the supervisor dies (SIGKILL, the OOM killer, a crash), the
//!   trampoline gets its parent-death signal and SIGKILLs CMD's whole process group at once
//!   (itself included): CMD and every child that stayed in its group. No grace: nobody renews
//!   the lease any more, so nothing may run on (fail closed). Processes that left the group
//!   (`setsid`, `setpgid`, a daemon's double fork) are not covered: run redlease in a cgroup
//!   (a container, a systemd unit) for those.
//! - **Signals**: redlease signals the whole group, so CMD and its children get each signal
//!   directly from the kernel; the trampoline, a member of the group, catches the terminating
//!   signals (HUP, INT, QUIT, TERM, USR1, USR2, ALRM) and does not resend them (CMD has them
//!   already): it survives to report CMD's status. A signal sent to the trampoline's pid alone
//!   reaches only it: signal the group (`kill -s TERM -- -PGID`) or redlease itself.
//! - **Exit is seen before the reap**: a thread per CMD waits for the trampoline's exit with
//!   `waitid(WEXITED | WNOWAIT)`, which does not reap it; it stays a zombie until
//!   [`Child::reap`], so its pid, which is the group's id, cannot be reused while the group is
//!   signalled. Every path that ends CMD signals the whole group (SIGKILL to what is left)
//!   before reaping it: a background child CMD left behind does not outlive it.

use std::ffi::{OsStr, OsString};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use redlease::CancellationToken;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::exit::{CANNOT_EXECUTE, Failure, NOT_FOUND, SOFTWARE};

/// The hidden first argument that turns `redlease` into CMD's trampoline (CMD's parent).
pub(crate) const EXEC_ARG: &str = "__redlease-exec";
/// The hidden first argument of the trampoline's child: sets CMD's parent-death signal and
/// `exec`s CMD.
pub(crate) const EXEC_CMD_ARG: &str = "__redlease-exec-cmd";
/// The hidden first argument that ends the trampoline by the signal that killed CMD.
pub(crate) const EXIT_BY_SIGNAL_ARG: &str = "__redlease-exit-by-signal";

/// The variable CMD never inherits (see [`Cmd::spawn`]).
pub(crate) const NESTED_UNSET: &str = "REDLEASE_INSTANCE_ID";

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

    /// Starts CMD (through the trampoline) with `env` added to the environment and
    /// `REDLEASE_INSTANCE_ID` removed from it, stdout and stderr inherited, stdin `/dev/null` unless `stdin`, in a new process group.
    pub(crate) fn spawn(&self, env: &[(&str, String)], stdin: bool) -> Result<Child, Failure> {
        if self.argv.is_empty() {
            return Err(Failure::new(NOT_FOUND, "no command given"));
        }
        let supervisor = rustix::process::getpid();
        let mut cmd = std::process::Command::new("/proc/self/exe");
        cmd.arg(EXEC_ARG)
            .arg(supervisor.as_raw_pid().to_string())
            .arg("--")
            .args(&self.argv)
            .stdin(if stdin {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // A nested `redlease run` must not take its parent's term by accident: with the
        // parent's instance id (and the inherited REDLEASE_NAME) it would re-take the term as
        // its owner, then free it. CMD never inherits REDLEASE_INSTANCE_ID (`run` passes the
        // id as REDLEASE_LEADER_ID); a nested command that is given it explicitly may.
        cmd.env_remove(NESTED_UNSET);
        for (k, v) in env {
            cmd.env(k, v);
        }
        // Registered before the init duty (PID 1) can see it exit: the lock is held across
        // the spawn.
        let mut own = own();
        let mut child = cmd
            .spawn()
            .map_err(|e| Failure::new(CANNOT_EXECUTE, format!("cannot start CMD: {e}")))?;
        let pid = Pid::from_child(&child);
        own.push(pid.as_raw_pid());
        drop(own);
        let exited = CancellationToken::new();
        let seen = exited.clone();
        let watcher = std::thread::Builder::new()
            .name("redlease-cmd-exit".to_owned())
            .spawn(move || {
                // Blocks until CMD exits; WNOWAIT leaves it a zombie for `reap`.
                loop {
                    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
                    match rustix::process::waitid(WaitId::Pid(pid), options) {
                        Err(rustix::io::Errno::INTR) => {}
                        _ => break,
                    }
                }
                seen.cancel();
            });
        match watcher {
            Ok(_) => Ok(Child {
                inner: child,
                pid,
                exited,
                status: None,
            }),
            Err(e) => {
                let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                let _ = child.wait();
                Err(Failure::new(SOFTWARE, format!("cannot watch CMD: {e}")))
            }
        }
    }
}

/// `<parent pid> -- CMD...` from the hidden arguments.
fn parent_and_cmd(args: &[OsString]) -> Option<(i32, &OsString, &[OsString])> {
    let parent = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<i32>().ok())?;
    let cmd = match args.get(1) {
        Some(sep) if sep == OsStr::new("--") => &args[2..],
        _ => &[],
    };
    let (program, rest) = cmd.split_first()?;
    Some((parent, program, rest))
}

/// The signals the trampoline catches: the terminating ones a process group is sent (by
/// redlease, an operator, a terminal). Caught, they do not end it (CMD got them directly, as a
/// member of the same group); each wakes it to check that the supervisor is still alive.
const CAUGHT: [Signal; 7] = [
    Signal::HUP,
    Signal::INT,
    Signal::QUIT,
    Signal::TERM,
    Signal::USR1,
    Signal::USR2,
    Signal::ALARM,
];

/// The trampoline (`redlease __redlease-exec <supervisor pid> -- CMD...`, the leader of CMD's
/// process group): parent-death signal, CMD as its child in its group, CMD's status as its
/// own. On the supervisor's death, SIGKILL to the whole group at once. See the module docs.
pub(crate) fn trampoline(args: &[OsString]) -> ExitCode {
    let Some((supervisor, _, _)) = parent_and_cmd(args) else {
        eprintln!("redlease: {EXEC_ARG} is internal to redlease");
        return ExitCode::from(crate::exit::USAGE);
    };
    // SIGTERM wakes the loop below, which then finds the supervisor gone (before the handler
    // is installed, it simply ends the trampoline: CMD is not started yet).
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::TERM)) {
        eprintln!("redlease: cannot set the trampoline's parent-death signal: {e}");
        return ExitCode::from(SOFTWARE);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redlease: cannot start CMD's trampoline: {e}");
            return ExitCode::from(SOFTWARE);
        }
    };
    // CMD is started from this (the main) thread: a parent-death signal follows the thread
    // that forked, and this one lives as long as the process.
    runtime.block_on(trampoline_main(supervisor, &args[2..]))
}

async fn trampoline_main(supervisor: i32, cmd: &[OsString]) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let (woken_tx, mut woken) = tokio::sync::mpsc::channel::<()>(CAUGHT.len());
    for sig in CAUGHT {
        match signal(SignalKind::from_raw(sig.as_raw())) {
            Ok(mut stream) => {
                let tx = woken_tx.clone();
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        let _ = tx.try_send(());
                    }
                });
            }
            Err(e) => {
                eprintln!("redlease: cannot watch {sig:?} in CMD's trampoline: {e}");
                return ExitCode::from(SOFTWARE);
            }
        }
    }
    drop(woken_tx);
    let orphaned = || rustix::process::getppid().map(Pid::as_raw_pid) != Some(supervisor);
    // The supervisor may have died before the parent-death signal was set: nobody would stop
    // CMD then.
    if orphaned() {
        return ExitCode::from(SOFTWARE);
    }
    let me = rustix::process::getpid();
    let spawned = tokio::process::Command::new("/proc/self/exe")
        .arg(EXEC_CMD_ARG)
        .arg(me.as_raw_pid().to_string())
        .arg("--")
        .args(cmd)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("redlease: cannot start CMD: {e}");
            return ExitCode::from(CANNOT_EXECUTE);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => exit_like(status),
                    Err(e) => {
                        eprintln!("redlease: cannot wait for CMD: {e}");
                        let _ = rustix::process::kill_process_group(me, Signal::KILL);
                        ExitCode::from(SOFTWARE)
                    }
                };
            }
            Some(()) = woken.recv() => {
                if orphaned() {
                    // Fail closed: nobody renews the lease any more. The group includes this
                    // process; CMD and every child left in its group die with it.
                    let _ = rustix::process::kill_process_group(me, Signal::KILL);
                }
            }
        }
    }
}

/// Ends the trampoline as CMD ended: its exit code, or death by the same signal (through a
/// fresh image without the trampoline's handlers, [`exit_by_signal`]).
fn exit_like(status: ExitStatus) -> ExitCode {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let Some(signo) = status.signal() else {
        return ExitCode::from(1);
    };
    // `exec` keeps the pid (the group's id, the supervisor's child) and resets caught signals
    // to their default action.
    let _ = std::process::Command::new("/proc/self/exe")
        .arg(EXIT_BY_SIGNAL_ARG)
        .arg(signo.to_string())
        .exec();
    ExitCode::from(u8::try_from(128 + signo).unwrap_or(255))
}

/// `redlease __redlease-exit-by-signal N`: dies by signal N (no core dump), or exits 128+N
/// when N cannot end it (an inherited ignored disposition).
pub(crate) fn exit_by_signal(args: &[OsString]) -> ExitCode {
    let signo = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<i32>().ok())
        .unwrap_or(0);
    let code = u8::try_from(128 + signo).unwrap_or(255);
    if let Some(sig) = Signal::from_named_raw(signo) {
        let mut core = rustix::process::getrlimit(rustix::process::Resource::Core);
        core.current = Some(0);
        let _ = rustix::process::setrlimit(rustix::process::Resource::Core, core);
        let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
    }
    ExitCode::from(code)
}

/// The trampoline's child (`redlease __redlease-exec-cmd <trampoline pid> -- CMD...`): sets
/// CMD's parent-death signal (SIGKILL: CMD dies if the trampoline does) and `exec`s CMD.
/// Returns only when that fails (126/127, one line on stderr, as a shell would).
pub(crate) fn exec_cmd(args: &[OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let Some((parent, program, rest)) = parent_and_cmd(args) else {
        eprintln!("redlease: {EXEC_CMD_ARG} is internal to redlease");
        return ExitCode::from(crate::exit::USAGE);
    };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        eprintln!("redlease: cannot set CMD's parent-death signal: {e}");
        return ExitCode::from(SOFTWARE);
    }
    // The trampoline may have died before the signal was set: nobody would stop CMD then.
    if rustix::process::getppid().map(Pid::as_raw_pid) != Some(parent) {
        return ExitCode::from(SOFTWARE);
    }
    let e = std::process::Command::new(program).args(rest).exec();
    let name = crate::output::escape(&program.to_string_lossy());
    if e.kind() == std::io::ErrorKind::NotFound {
        eprintln!("redlease: command not found: {name}");
        ExitCode::from(NOT_FOUND)
    } else {
        eprintln!("redlease: cannot execute {name}: {e}");
        ExitCode::from(CANNOT_EXECUTE)
    }
}

/// A running CMD. Dropping it kills its group (SIGKILL) and reaps it.
#[derive(Debug)]
pub(crate) struct Child {
    inner: std::process::Child,
    /// CMD's pid, which is its process group's id.
    pid: Pid,
    /// Cancelled once CMD has exited (by its watcher thread).
    exited: CancellationToken,
    /// Set once reaped (then the group id is no longer ours to signal).
    status: Option<ExitStatus>,
}

impl Child {
    /// The trampoline's pid: CMD's process group id (progress lines print it as such, and as
    /// `pid` and `pgid` in JSON).
    pub(crate) fn id(&self) -> u32 {
        self.inner.id()
    }

    /// Whether CMD has exited (it may still be a zombie; not reaped by this).
    pub(crate) fn has_exited(&self) -> bool {
        if self.status.is_some() || self.exited.is_cancelled() {
            return true;
        }
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        matches!(
            rustix::process::waitid(WaitId::Pid(self.pid), options),
            Ok(Some(_))
        )
    }

    /// Completes once CMD has exited (without reaping it).
    pub(crate) async fn exited(&self) {
        self.exited.cancelled().await;
    }

    /// Sends `signal` to CMD's whole process group. Never after the reap (the group id could
    /// then belong to someone else). Returns whether it was sent.
    pub(crate) fn signal_group(&self, signal: Signal) -> bool {
        self.status.is_none() && rustix::process::kill_process_group(self.pid, signal).is_ok()
    }

    /// Whether any process other than CMD (a zombie once exited) is left in its group.
    pub(crate) fn group_has_others(&self) -> bool {
        group_members(self.pid.as_raw_pid())
            .into_iter()
            .any(|p| p != self.pid.as_raw_pid())
    }

    /// Once CMD has exited: SIGKILL to what is left of its group, then reaps CMD.
    pub(crate) fn reap(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
        // Reaped and unlisted under the list's lock: [`forward`] never signals a group id
        // that is no longer ours.
        let mut own = own();
        let status = self.inner.wait()?;
        self.status = Some(status);
        own.retain(|p| *p != self.pid.as_raw_pid());
        Ok(status)
    }

    /// CMD has exited by itself: its leftovers (background children in its group) get
    /// SIGTERM, then SIGKILL once `grace` has passed or `kill_now` completes; then CMD is
    /// reaped.
    pub(crate) async fn finish(
        &mut self,
        grace: Duration,
        kill_now: impl Future<Output = ()>,
    ) -> std::io::Result<ExitStatus> {
        if self.status.is_none() && self.group_has_others() {
            self.signal_group(Signal::TERM);
            let gone = async {
                while self.group_has_others() {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            };
            tokio::select! {
                () = gone => {}
                () = tokio::time::sleep(grace) => {}
                () = kill_now => {}
            }
        }
        self.reap()
    }

    /// Stops CMD: SIGTERM to its group, SIGKILL once `grace` has passed, `hurry` is cancelled
    /// or `kill_now` completes (the lease's deadline); the group is SIGKILLed before the reap.
    pub(crate) async fn stop(
        &mut self,
        grace: Duration,
        hurry: &CancellationToken,
        kill_now: impl Future<Output = ()>,
    ) -> std::io::Result<ExitStatus> {
        if !self.has_exited() {
            self.signal_group(Signal::TERM);
            tokio::select! {
                biased;
                () = self.exited() => {}
                () = hurry.cancelled() => {}
                () = kill_now => {}
                () = tokio::time::sleep(grace) => {}
            }
        }
        self.kill().await
    }

    /// SIGKILL to the group now; waits for CMD to exit and reaps it.
    pub(crate) async fn kill(&mut self) -> std::io::Result<ExitStatus> {
        self.signal_group(Signal::KILL);
        self.exited().await;
        self.reap()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = rustix::process::kill_process_group(self.pid, Signal::KILL);
            let mut own = own();
            let _ = self.inner.wait();
            own.retain(|p| *p != self.pid.as_raw_pid());
        }
    }
}

/// The live (not zombie) members of process group `pgid`, from `/proc`.
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name: state, ppid, pgrp.
        let mut fields = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace())
            .into_iter()
            .flatten();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") {
            members.push(pid);
        }
    }
    members
}

/// The pids of the CMDs this process runs (reaped by their [`Child`]; the init duty below
/// leaves them alone).
static OWN: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn own() -> std::sync::MutexGuard<'static, Vec<i32>> {
    OWN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends `signal` to the process group of every CMD this process runs (each still unreaped,
/// so its group id is still CMD's): a signal redlease forwards. Returns how many groups got it.
pub(crate) fn forward(signal: Signal) -> usize {
    own()
        .iter()
        .filter_map(|&pid| Pid::from_raw(pid))
        .filter(|&pid| rustix::process::kill_process_group(pid, signal).is_ok())
        .count()
}

/// As PID 1 (a container's init), orphans are reparented to redlease: reaps every child that
/// has exited and is not a CMD it runs, on each SIGCHLD (and every few seconds, in case
/// signals merged). Does nothing when not PID 1.
pub(crate) fn reap_orphans_as_init() {
    if rustix::process::getpid().as_raw_pid() != 1 {
        return;
    }
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        return;
    };
    tokio::spawn(async move {
        loop {
            reap_exited_orphans();
            tokio::select! {
                _ = sigchld.recv() => {}
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
    });
}

/// Reaps our exited children that are not CMDs (zombies whose parent is this process).
fn reap_exited_orphans() {
    let me = rustix::process::getpid().as_raw_pid();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let mut fields = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace())
            .into_iter()
            .flatten();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse().ok()));
        if state == Some("Z")
            && ppid == Some(me)
            && !own().contains(&pid)
            && let Some(p) = Pid::from_raw(pid)
        {
            let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG);
        }
    }
}
