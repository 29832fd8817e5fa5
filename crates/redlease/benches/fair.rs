//! Fair locks against plain locks under contention, on a real Redis.
//!
//! 8 tasks, each on its own connections and release-notice subscriber (like 8 processes),
//! contend on one key for a fixed time: each obtains, holds ~1 ms and releases, then obtains
//! again. The plain-lock rounds and the fair-lock rounds are interleaved. Reported per build:
//! acquisitions per second (the handoff rate), script calls and subscription changes per
//! acquisition (`INFO commandstats`), the server's CPU per acquisition (`INFO cpu`), and each
//! task's acquisitions: min/max over the tasks of each round (the fairness figure; goal for
//! the fair lock ≥ 0.9).
//!
//! `cargo bench -p redlease --bench fair`; the report is printed and written to
//! `target/criterion/redlease-fair.md`. Without `--bench` (as `cargo test --all-targets` runs
//! it) each build runs once, briefly, as a smoke test.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_testkit::redis::RedisServer;
use redis::aio::ConnectionManager;
use redlease::redis::{RedisBackend, ReleaseNotices};
use redlease::{CancellationToken, LockOptions, Locker, RetryStrategy};

const TASKS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);
/// The plain lock's retry (as in the handover benchmark's lock handoff).
const PLAIN_RETRY: Duration = Duration::from_millis(10);
/// The fair waiters' heartbeat (each retry refreshes the place; the place lives 3 × 50 ms).
const FAIR_RETRY: Duration = Duration::from_millis(50);
const TTL: Duration = Duration::from_secs(10);

static RUN: AtomicU64 = AtomicU64::new(0);

type Backend = RedisBackend<ConnectionManager>;

/// A backend on its own connections and subscriber, like a separate process.
async fn backend(server: &RedisServer) -> Backend {
    let client = server.client().expect("client");
    let conn = client
        .get_connection_manager_with_config(
            redis::aio::ConnectionManagerConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect");
    RedisBackend::new(conn).with_release_notices(ReleaseNotices::new(client))
}

/// Script calls (`EVALSHA`, `EVAL`) and subscription changes (`SUBSCRIBE`, `UNSUBSCRIBE`)
/// so far (`INFO commandstats`), and the server's CPU time in µs (`INFO cpu`, user + system:
/// every script, command, publish and connection of the round).
async fn commandstats(conn: &mut redis::aio::MultiplexedConnection) -> [u64; 3] {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut *conn)
        .await
        .expect("INFO");
    let field = |l: &str, name: &str| {
        l.split(&format!("{name}="))
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let calls = |names: &[&str]| {
        info.lines()
            .filter(|l| {
                names
                    .iter()
                    .any(|n| l.starts_with(&format!("cmdstat_{n}:")))
            })
            .map(|l| field(l, "calls"))
            .sum::<u64>()
    };
    let cpu: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await
        .expect("INFO cpu");
    let secs = |name: &str| {
        cpu.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let usec = (secs("used_cpu_user") + secs("used_cpu_sys")) * 1e6;
    [
        calls(&["evalsha", "eval"]),
        calls(&["subscribe", "unsubscribe"]),
        usec as u64,
    ]
}

/// One round: 8 tasks for `period`; acquisitions per task, and the round's commandstats.
async fn round(server: &RedisServer, fair: bool, period: Duration) -> (Vec<u64>, [u64; 3]) {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let key = format!("{{bench:fair:{run}}}");
    let mut raw = server.connection().await.expect("raw");
    let stop = CancellationToken::new();
    let mut lockers = Vec::new();
    for _ in 0..TASKS {
        lockers.push(Locker::new(backend(server).await));
    }
    let before = commandstats(&mut raw).await;
    let mut tasks = Vec::new();
    for locker in lockers {
        let (key, stop) = (key.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let retry = if fair { FAIR_RETRY } else { PLAIN_RETRY };
            let options = || {
                LockOptions::new()
                    .retry(RetryStrategy::linear(retry).expect("retry"))
                    .wait(Duration::from_secs(30))
            };
            let handle = locker.fair(key.clone()).expect("fair");
            while !stop.is_cancelled() {
                // Each build holds its own lock type; both hold ~1 ms and release explicitly.
                if fair {
                    let lock = tokio::select! {
                        l = handle.acquire(TTL, options()) => l.expect("obtained within the wait"),
                        () = stop.cancelled() => break,
                    };
                    tokio::time::sleep(HOLD).await;
                    lock.release().await.expect("released");
                } else {
                    let lock = tokio::select! {
                        l = locker.obtain(key.clone(), TTL, options()) => l.expect("obtained within the wait"),
                        () = stop.cancelled() => break,
                    };
                    tokio::time::sleep(HOLD).await;
                    lock.release().await.expect("released");
                }
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(period).await;
    stop.cancel();
    let mut counts = Vec::new();
    for t in tasks {
        counts.push(
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("task ends")
                .expect("task"),
        );
    }
    let after = commandstats(&mut raw).await;
    (
        counts,
        [0, 1, 2].map(|i| after[i].saturating_sub(before[i])),
    )
}

#[derive(Default)]
struct Figures {
    acquisitions: u64,
    scripts: u64,
    subscriptions: u64,
    usec: u64,
    seconds: f64,
    /// min/max of each round.
    spreads: Vec<(u64, u64)>,
}

impl Figures {
    fn add(
        &mut self,
        (counts, [scripts, subscriptions, usec]): (Vec<u64>, [u64; 3]),
        period: Duration,
    ) {
        let min = counts.iter().copied().min().unwrap_or(0);
        let max = counts.iter().copied().max().unwrap_or(0);
        self.spreads.push((min, max));
        self.acquisitions += counts.iter().sum::<u64>();
        self.scripts += scripts;
        self.subscriptions += subscriptions;
        self.usec += usec;
        self.seconds += period.as_secs_f64();
    }

    fn ratios(&self) -> Vec<f64> {
        self.spreads
            .iter()
            .map(|(min, max)| *min as f64 / (*max).max(1) as f64)
            .collect()
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let server = rt.block_on(RedisServer::start()).expect("redis");
    let out_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("criterion");
    let (rounds, period) = if bench_mode {
        (3, Duration::from_secs(3))
    } else {
        (1, Duration::from_millis(300))
    };
    let (mut plain, mut fair) = (Figures::default(), Figures::default());
    for _ in 0..rounds {
        plain.add(rt.block_on(round(&server, false, period)), period);
        fair.add(rt.block_on(round(&server, true, period)), period);
    }

    let mut s = String::new();
    let _ = writeln!(s, "## Fair locks under contention\n");
    let _ = writeln!(
        s,
        "Redis {} mode, loopback; {TASKS} tasks on one key, each on its own connections and \
         subscriber; hold {} ms; TTL {} s; {rounds} rounds of {} s per build, interleaved.\n",
        server.mode(),
        HOLD.as_millis(),
        TTL.as_secs(),
        period.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| build | acquisitions/s | script calls/acquisition | (un)subscribes/acquisition | server CPU µs/acquisition | per task min–max per round | min/max per round |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|---|");
    for (what, f) in [
        (
            format!("plain lock (retry {} ms)", PLAIN_RETRY.as_millis()),
            &plain,
        ),
        (
            format!("fair lock (retry {} ms)", FAIR_RETRY.as_millis()),
            &fair,
        ),
    ] {
        let spreads: Vec<String> = f.spreads.iter().map(|(a, b)| format!("{a}–{b}")).collect();
        let ratios: Vec<String> = f.ratios().iter().map(|r| format!("{r:.2}")).collect();
        let _ = writeln!(
            s,
            "| {what} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {} |",
            f.acquisitions as f64 / f.seconds.max(f64::MIN_POSITIVE),
            f.scripts as f64 / f.acquisitions.max(1) as f64,
            f.subscriptions as f64 / f.acquisitions.max(1) as f64,
            f.usec as f64 / f.acquisitions.max(1) as f64,
            spreads.join(", "),
            ratios.join(", ")
        );
    }
    println!("\n{s}");
    if bench_mode {
        let path = out_dir.join("redlease-fair.md");
        let _ = std::fs::create_dir_all(&out_dir);
        match std::fs::write(&path, &s) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    } else {
        assert!(plain.acquisitions > 0 && fair.acquisitions > 0);
    }
    drop(server);
    rt.shutdown_timeout(Duration::from_secs(2));
}
