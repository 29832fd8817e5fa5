//! `redlease lock KEY` without CMD, driven as a process against a real Redis: it prints the
//! token once obtained, holds the lock (renewed past its TTL) until SIGINT/SIGTERM, releases
//! it and exits 0; a lock broken meanwhile (`unlock --force`) makes it exit 72.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The holder process, killed on drop (a failed assertion leaves nothing running).
struct Holder(Child);

impl Holder {
    /// `redlease lock KEY --ttl 1s [extra]` with stdout in `<dir>/out`; returns once the
    /// token is printed.
    async fn start(url: &str, d: &Path, key: &str, extra: &[&str]) -> (Holder, String) {
        let out = std::fs::File::create(d.join("out")).unwrap();
        let mut cmd = redlease(url, d);
        cmd.args(["lock", key, "--ttl", "1s"])
            .args(extra)
            .stdout(out)
            .stderr(Stdio::null());
        let h = Holder(cmd.spawn().expect("spawn"));
        let printed = wait_file(&d.join("out")).await;
        (h, printed)
    }

    /// Waits (bounded) for the exit code.
    async fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s.code();
            }
            assert!(Instant::now() < deadline, "the holder did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run(url: &str, d: &Path, args: &[&str]) -> std::process::Output {
    output({
        let mut c = redlease(url, d);
        c.args(args);
        c
    })
    .await
}

async fn held(url: &str, d: &Path, key: &str) -> bool {
    let out = run(url, d, &["--json", "status", "--lock", key]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    json_field(&stdout(&out), "held").as_deref() == Some("true")
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_without_cmd_holds_until_a_signal_prints_the_token_and_releases() {
    let server = redis().await;
    let url = server.url();
    for (sig, key) in [("TERM", "hold-term"), ("INT", "hold-int")] {
        let dir = workdir("cli-hold");
        let d = dir.path();
        let (mut h, printed) = Holder::start(&url, d, key, &[]).await;
        let token: u64 = printed.parse().expect("the token on stdout");
        let out = run(&url, d, &["--json", "status", "--lock", key]).await;
        assert_eq!(
            json_field(&stdout(&out), "last_token"),
            Some(token.to_string())
        );
        // Still held after more than its TTL: renewed.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(held(&url, d, key).await, "renewed past its 1s TTL");
        let out = run(&url, d, &["lock", key, "--wait", "0", "--", "true"]).await;
        assert_eq!(code(&out), 71, "held by the holder: {}", stderr(&out));

        signal(h.0.id(), sig);
        assert_eq!(h.exit_code().await, Some(0), "released after SIG{sig}");
        assert!(!held(&url, d, key).await, "released on exit");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_without_cmd_exits_72_when_its_lock_is_broken() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-hold-broken");
    let d = dir.path();
    let (mut h, printed) = Holder::start(&url, d, "hold-broken", &["--json"]).await;
    assert!(printed.contains("\"token\":"), "{printed}");
    let owner = json_field(&printed, "owner").expect("owner");
    let out = run(&url, d, &["--json", "status", "--lock", "hold-broken"]).await;
    assert_eq!(json_field(&stdout(&out), "holder"), Some(owner));

    let out = run(&url, d, &["unlock", "hold-broken", "--force"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(h.exit_code().await, Some(72), "lost at its next renewal");
}

/// Issue 56: `lock KEY --max-hold D` without CMD holds (renewed past its TTL) until the cap,
/// then releases and exits 73 (the cap's code, not 72: nothing was lost).
#[tokio::test(flavor = "multi_thread")]
async fn lock_without_cmd_exits_73_at_its_max_hold() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-hold-capped");
    let d = dir.path();
    let started = Instant::now();
    let (mut h, printed) = Holder::start(&url, d, "hold-capped", &["--max-hold", "2500ms"]).await;
    printed.parse::<u64>().expect("the token on stdout");
    assert_eq!(h.exit_code().await, Some(73), "ended at the cap");
    let took = started.elapsed();
    // Renewed past its 1 s TTL (the hold ends within TTL/3 of the 2.5 s cap), and capped.
    assert!(took >= Duration::from_millis(2_000), "cut short: {took:?}");
    assert!(took < Duration::from_secs(10), "not capped: {took:?}");
    assert!(!held(&url, d, "hold-capped").await, "released at the cap");
}
