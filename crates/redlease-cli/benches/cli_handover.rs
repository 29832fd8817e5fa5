//! The command, end to end: two `redlease run --name N --ttl 5s -- CMD`; when the leader's CMD
//! exits, how long until the follower's CMD starts (process exit, release, notice, acquire,
//! fork and exec included). Measured with release notices and with `--poll-only`,
//! interleaved round by round, on a kit Redis.
//!
//! Each CMD is `sh -c` that appends `start <ns>` to a log as it starts, waits for its own stop
//! file, and appends `exit <ns>` as it exits (`date +%s%N`, one clock: the same machine).
//!
//! `cargo bench -p redlease-cli --bench cli_handover` (also run by `cargo xtask bench`); the
//! report is printed and written to `target/criterion/redlease-cli-handover.md`. Without
//! `--bench` one round of each runs, as a smoke test.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lease_testkit::redis::RedisServer;
use lease_testkit::tempdir::TempDir;

const BOUND: Duration = Duration::from_secs(30);

/// Waits (bounded) until `f` returns something, checking every 2 ms.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The `<ns>` of the first line `<event> <ns>` in `log`.
fn stamp(log: &Path, event: &str) -> Option<u128> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(event)?.trim().parse().ok())
}

struct Member {
    child: Child,
    log: PathBuf,
    stop: PathBuf,
}

fn start(dir: &Path, url: &str, name: &str, label: &str, poll_only: bool) -> Member {
    let log = dir.join(format!("{label}.log"));
    let stop = dir.join(format!("{label}.stop"));
    let script = format!(
        "echo \"start $(date +%s%N)\" >> {log}; while [ ! -e {stop} ]; do sleep 0.002; done; \
         echo \"exit $(date +%s%N)\" >> {log}",
        log = log.display(),
        stop = stop.display()
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlease"));
    cmd.env("REDLEASE_REDIS_URL", url)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .args(["run", "--name", name, "--ttl", "5s", "--instance-id", label]);
    if poll_only {
        cmd.arg("--poll-only");
    }
    cmd.args(["--", "sh", "-c", &script]);
    let child = cmd.spawn().expect("spawn redlease run");
    Member { child, log, stop }
}

fn finish(mut m: Member) {
    let _ = std::fs::write(&m.stop, "");
    let deadline = Instant::now() + BOUND;
    loop {
        if let Ok(Some(_)) = m.child.try_wait() {
            return;
        }
        if Instant::now() > deadline {
            let _ = m.child.kill();
            let _ = m.child.wait();
            panic!("redlease run did not exit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One handover; the follower's CMD start minus the leader's CMD exit.
fn round(dir: &Path, url: &str, n: usize, poll_only: bool) -> Duration {
    let build = if poll_only { "poll" } else { "notices" };
    let name = format!("cli-handover-{n}-{build}");
    let a = start(dir, url, &name, &format!("a{n}-{build}"), poll_only);
    wait_for("the first leader's CMD", || stamp(&a.log, "start"));
    let b = start(dir, url, &name, &format!("b{n}-{build}"), poll_only);
    // The follower has contended once and (with notices) subscribed: its first acquire and
    // subscription take a few milliseconds; give it a generous moment (not a correctness
    // wait: a follower that is not ready yet only makes this round slower).
    std::thread::sleep(Duration::from_millis(300));
    let _ = std::fs::write(&a.stop, "");
    let exited = wait_for("the leader's CMD exit", || stamp(&a.log, "exit"));
    let started = wait_for("the follower's CMD", || stamp(&b.log, "start"));
    finish(a);
    finish(b);
    Duration::from_nanos(started.saturating_sub(exited) as u64)
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    let i = ((v.len().max(1) as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(RedisServer::start()).expect("redis");
    let dir = TempDir::new("cli-handover").expect("temp dir");
    let rounds = if bench_mode { 12 } else { 1 };
    let (mut notices, mut polling) = (Vec::new(), Vec::new());
    for n in 0..rounds {
        notices.push(round(dir.path(), &server.url(), n, false));
        if n % 3 == 0 {
            polling.push(round(dir.path(), &server.url(), n, true));
        }
    }
    let mut s = String::new();
    let _ = writeln!(s, "## The command, end to end\n");
    let _ = writeln!(
        s,
        "Two `redlease run --name N --ttl 5s -- sh -c …`; the leader's CMD exits; until the \
         follower's CMD starts (Redis {} mode, loopback).\n",
        server.mode()
    );
    let _ = writeln!(s, "| build | rounds | median | min | max |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (what, v) in [("notices", &notices), ("--poll-only", &polling)] {
        let _ = writeln!(
            s,
            "| {what} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
            v.len(),
            pct(v, 0.5).as_secs_f64() * 1e3,
            pct(v, 0.0).as_secs_f64() * 1e3,
            pct(v, 1.0).as_secs_f64() * 1e3
        );
    }
    println!("\n{s}");
    if bench_mode {
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion");
        let _ = std::fs::create_dir_all(&out);
        let path = out.join("redlease-cli-handover.md");
        match std::fs::write(&path, &s) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    } else {
        assert!(notices[0] < Duration::from_secs(2), "{notices:?}");
    }
    drop(server);
}
