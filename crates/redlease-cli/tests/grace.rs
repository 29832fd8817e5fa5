//! `--grace`: a CMD that ignores SIGTERM is SIGKILLed once the grace period has passed, and
//! not before; redlease then releases and exits with its documented code (143 on SIGTERM).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The grace period under test.
const GRACE: Duration = Duration::from_millis(1500);
/// How late the SIGKILL may come on a busy machine (the kill is a `kill` process spawned by
/// redlease's timer, and the death is observed by a 5 ms poll).
const LATE: Duration = Duration::from_millis(2500);

/// `--grace`'s value for [`GRACE`].
fn grace_arg() -> String {
    format!("{}ms", GRACE.as_millis())
}

/// Sends SIGTERM to redlease while CMD (which traps SIGTERM and carries on) runs, and checks
/// the whole shutdown: CMD got SIGTERM at once, survived it for the grace period, was killed
/// within the slack after it, and redlease exited 143 only after CMD was gone.
async fn term_then_kill_after_grace(mut redlease: Proc, dir: &Path, tag: &str) -> Proc {
    redlease.cleanup_group_from(dir.join(format!("{tag}.pid")));
    let pid: u32 = wait_file(&dir.join(format!("{tag}.pid")))
        .await
        .parse()
        .expect("pid");
    redlease.wait_line("started CMD").await;
    assert!(job_alive(pid), "CMD runs");

    let sent = Instant::now();
    redlease.signal("TERM");
    // CMD was asked first (SIGTERM to its group, well within the grace period), and
    // carried on.
    let term = wait_file_within(&dir.join(format!("{tag}.term")), GRACE).await;
    let asked = sent.elapsed();
    assert_eq!(
        term.as_deref(),
        Some("term"),
        "CMD got no SIGTERM within the grace period; redlease: {:#?}",
        redlease.lines()
    );
    // Bounded by the upper limit itself: a missing SIGKILL fails as soon as it is late.
    let limit = GRACE + LATE;
    let Some(gone) = wait_gone(pid, limit.saturating_sub(sent.elapsed())).await else {
        panic!(
            "CMD was still alive {limit:?} after SIGTERM (grace {GRACE:?}, slack {LATE:?}); \
             redlease: {:#?}",
            redlease.lines()
        );
    };
    let gone = gone.duration_since(sent);
    eprintln!("SIGTERM reached CMD within {asked:?}; CMD gone {gone:?} after it (grace {GRACE:?})");
    // Strict: redlease's grace timer starts after it got the signal we sent at `sent`, and
    // tokio's timers never fire early.
    assert!(
        gone >= GRACE,
        "CMD was killed {gone:?} after SIGTERM, before the grace period ({GRACE:?}) ended"
    );

    let status = redlease.wait_exit().await;
    let exited = sent.elapsed();
    assert_eq!(
        status.code(),
        Some(143),
        "redlease exits 128 + SIGTERM: {:#?}",
        redlease.lines()
    );
    assert!(
        exited >= GRACE,
        "redlease exited {exited:?} after SIGTERM, before CMD's grace period"
    );
    redlease.wait_line("CMD killed by signal 9 (SIGKILL)").await;
    redlease
}

#[tokio::test(flavor = "multi_thread")]
async fn run_kills_a_cmd_ignoring_sigterm_after_the_grace_period() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-run-grace");
    let d = dir.path();
    let job = stubborn_job_script(d);
    let p = Proc::spawn({
        let mut c: Command = redlease(&url, d);
        c.args(["run", "--name", "grace", "--grace", &grace_arg(), "--"])
            .arg(&job)
            .arg("run");
        c
    });
    term_then_kill_after_grace(p, d, "run").await;

    // Released only after CMD was gone: the lease is free now.
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--name", "grace"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        json_field(&stdout(&out), "holder").as_deref(),
        Some("null"),
        "released: {}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_kills_a_cmd_ignoring_sigterm_after_the_grace_period() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-grace");
    let d = dir.path();
    let job = stubborn_job_script(d);
    let p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "grace-lock", "--grace", &grace_arg(), "--"])
            .arg(&job)
            .arg("lock");
        c
    });
    term_then_kill_after_grace(p, d, "lock").await;

    let mut conn = server.connection().await.expect("connect");
    let held: bool = redlease::redis::client::cmd("EXISTS")
        .arg("grace-lock")
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert!(!held, "the lock is released once CMD is gone");
}
