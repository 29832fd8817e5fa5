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
//! A second section measures the Redis CPU of each fair script call in isolation, on a server
//! of its own: each phase runs the same operation serially (one call at a time, like
//! `redis-benchmark -c 1`) through `RedisBackend`'s fair methods after `CONFIG RESETSTAT`,
//! and reads `usec_per_call` of `cmdstat_evalsha` (the whole script, its inner commands
//! included) from `INFO commandstats`: a granted attempt (free lock, no waiters), a heartbeat
//! with 1 and with 8 waiters queued, a release with and without a waiter (and its `PUBLISH`),
//! a leave, an inspection; the plain lock's fenced obtain and release alongside, as the
//! reference.
//!
//! A third section measures the fair scripts at scale (issue 54), on a server of its own: one
//! held fair lock with 10, 1,000 and 10,000 waiters; µs of server time per script call for
//! heartbeats along the queue, handovers, leaves and inspections; an unrelated `PING`'s
//! latency from another connection while 4 connections heartbeat as fast as they can; the
//! calls and their cost to skip that many crashed waiters; and the slow log's script calls
//! above 1 ms.
//!
//! `cargo bench -p redlease --bench fair` runs all three; `-- contention`, `-- cpu` or
//! `-- scale` runs one. The
//! report is printed and written to `target/criterion/redlease-fair.md`. Without `--bench`
//! (as `cargo test --all-targets` runs it) each section runs once, briefly, as a smoke test.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_testkit::ServerMode;
use lease_testkit::redis::RedisServer;
use std::sync::Arc;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redlease::core::{
    AcquireOutcome, AcquireRequest, FairRequest, LeaseBackend, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, fair_spec,
};
use redlease::redis::{RedisBackend, ReleaseNotices};
use redlease::{CancellationToken, LockOptions, Locker, RetryStrategy, Ttl};

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

/// Calls per phase of the CPU section in bench mode (a smoke run makes 20).
const CPU_CALLS: usize = 2_000;
/// Repetitions of the CPU section in bench mode, each on fresh keys (for the spread).
const CPU_RUNS: usize = 5;
/// Waiters queued behind the holder in the "8 waiters" phases.
const QUEUED: usize = 8;

type Raw = MultiplexedConnection;

/// One CPU phase's reading: script calls, µs of server time per call (`cmdstat_evalsha`),
/// and `PUBLISH`es per call (run inside the scripts).
#[derive(Clone, Copy)]
struct Usage {
    calls: u64,
    usec_per_call: f64,
    publishes_per_call: f64,
}

async fn reset_stats(raw: &mut Raw) {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(raw)
        .await
        .expect("CONFIG RESETSTAT");
}

/// `calls` and `usec` of `cmdstat_<name>` in `INFO commandstats` (0 when absent).
fn cmdstat(info: &str, name: &str) -> (u64, u64) {
    let Some(line) = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
    else {
        return (0, 0);
    };
    let field = |f: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

/// The phase's usage, and the `INFO commandstats` it was read from.
async fn usage(raw: &mut Raw) -> (Usage, String) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .expect("INFO commandstats");
    // A script the server did not have yet goes as `EVAL` once: both are counted.
    let (sha_calls, sha_usec) = cmdstat(&info, "evalsha");
    let (eval_calls, eval_usec) = cmdstat(&info, "eval");
    let (publishes, _) = cmdstat(&info, "publish");
    let calls = sha_calls + eval_calls;
    let per = |n: u64| n as f64 / calls.max(1) as f64;
    let u = Usage {
        calls,
        usec_per_call: per(sha_usec + eval_usec),
        publishes_per_call: per(publishes),
    };
    (u, info)
}

fn owner(s: &str) -> Owner {
    Owner::new(s).expect("owner")
}

/// `n` owners as the library names them (random tokens).
fn owners(n: usize) -> Vec<Owner> {
    (0..n).map(|_| owner(&redlease::random_owner())).collect()
}

fn long() -> Ttl {
    Ttl::new(Duration::from_secs(600)).expect("ttl")
}

fn fair_req(spec: &Arc<LeaseSpec>, who: &Owner) -> FairRequest {
    FairRequest::new(
        AcquireRequest::new(Arc::clone(spec), who.clone(), long()),
        Some(long()),
    )
}

async fn fair_attempt(backend: &RedisBackend<Raw>, spec: &Arc<LeaseSpec>, who: &Owner) -> bool {
    let r = backend.acquire_fair(&fair_req(spec, who)).await;
    match r {
        Ok(AcquireOutcome::Acquired { .. }) => true,
        Ok(AcquireOutcome::Held { .. }) => false,
        other => panic!("a fair attempt: {other:?}"),
    }
}

async fn fair_release(backend: &RedisBackend<Raw>, spec: &Arc<LeaseSpec>, who: &Owner) {
    let r = backend
        .release_fair(&ReleaseRequest::new(Arc::clone(spec), who.clone()))
        .await;
    assert!(matches!(r, Ok(ReleaseOutcome::Released)), "{r:?}");
}

/// The same phase for every spec in `specs`, after `CONFIG RESETSTAT`: what the scripts cost.
async fn phase<F, Fut>(raw: &mut Raw, specs: &[Arc<LeaseSpec>], mut call: F) -> Usage
where
    F: FnMut(Arc<LeaseSpec>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    reset_stats(raw).await;
    for spec in specs {
        call(Arc::clone(spec)).await;
    }
    let (u, info) = usage(raw).await;
    assert_eq!(
        u.calls,
        specs.len() as u64,
        "one script call per operation: {info}"
    );
    u
}

/// The CPU section's phases, by name, in report order.
const PHASES: [&str; 10] = [
    "fair attempt, granted (free lock, no waiters)",
    "fair attempt, not granted: heartbeat, 1 waiter queued",
    "fair attempt, not granted: heartbeat, 8 waiters queued",
    "fair release, no waiter (no `PUBLISH`)",
    "fair release, 1 waiter (one `PUBLISH` to the head)",
    "fair leave (held lock, the only waiter leaves)",
    "fair inspect, holder + 1 waiter",
    "fair inspect, holder + 8 waiters",
    "lock obtain, granted (fenced, free key), for comparison",
    "lock release (fenced, with its `PUBLISH`), for comparison",
];

/// One run of every CPU phase, `n` calls each, on keys of its own.
async fn cpu_run(server: &RedisServer, run: usize, n: usize) -> Vec<Usage> {
    let conn = server.connection().await.expect("connection");
    let backend = RedisBackend::new(conn);
    let mut raw = server.connection().await.expect("raw");
    let (h, w) = (
        owner(&redlease::random_owner()),
        owner(&redlease::random_owner()),
    );
    let fair_keys: Vec<Arc<LeaseSpec>> = (0..n)
        .map(|i| Arc::new(fair_spec(&format!("{{cpu:{run}:f{i}}}"), None).expect("spec")))
        .collect();
    let plain_keys: Vec<Arc<LeaseSpec>> = (0..n)
        .map(|i| {
            let key = format!("{{cpu:{run}:p{i}}}");
            Arc::new(LeaseSpec::lock([key.clone()], Some(format!("{key}:fence"))).expect("spec"))
        })
        .collect();
    let b = &backend;
    // Warm-up, not measured: every key's fence counter exists (as for any lock used before),
    // and the scripts are loaded (a script's first call is an `EVALSHA` refused, then an
    // `EVAL`).
    for spec in &fair_keys {
        assert!(fair_attempt(b, spec, &h).await);
        fair_release(b, spec, &h).await;
    }
    for spec in &plain_keys {
        let r = b
            .acquire(&AcquireRequest::new(Arc::clone(spec), h.clone(), long()))
            .await;
        assert!(matches!(r, Ok(AcquireOutcome::Acquired { .. })), "{r:?}");
        let r = b
            .release(&ReleaseRequest::new(Arc::clone(spec), h.clone()))
            .await;
        assert!(matches!(r, Ok(ReleaseOutcome::Released)), "{r:?}");
    }
    if let Some(spec) = fair_keys.first() {
        b.inspect_fair(spec).await.expect("inspect");
    }

    let granted = phase(&mut raw, &fair_keys, |spec| {
        let h = h.clone();
        async move { assert!(fair_attempt(b, &spec, &h).await) }
    })
    .await;
    // Each held lock gets a waiter (not measured), who then leaves.
    for spec in &fair_keys {
        assert!(!fair_attempt(b, spec, &w).await);
    }
    let leave = phase(&mut raw, &fair_keys, |spec| {
        let w = w.clone();
        async move {
            let r = b.leave_fair(&spec, &w).await;
            assert!(matches!(r, Ok(true)), "{r:?}");
        }
    })
    .await;
    let release_alone = phase(&mut raw, &fair_keys, |spec| {
        let h = h.clone();
        async move { fair_release(b, &spec, &h).await }
    })
    .await;
    // Held again, with a waiter queued (not measured); the release wakes it.
    for spec in &fair_keys {
        assert!(fair_attempt(b, spec, &h).await);
        assert!(!fair_attempt(b, spec, &w).await);
    }
    let release_waiter = phase(&mut raw, &fair_keys, |spec| {
        let h = h.clone();
        async move { fair_release(b, &spec, &h).await }
    })
    .await;

    // One key held, with 1 and with 8 waiters: their heartbeats (each waiter in turn) and the
    // inspection.
    let mut queued = Vec::new();
    for count in [1, QUEUED] {
        let spec = Arc::new(fair_spec(&format!("{{cpu:{run}:q{count}}}"), None).expect("spec"));
        assert!(fair_attempt(b, &spec, &h).await);
        let waiters = owners(count);
        for who in &waiters {
            assert!(!fair_attempt(b, &spec, who).await);
        }
        let same: Vec<Arc<LeaseSpec>> = (0..n).map(|_| Arc::clone(&spec)).collect();
        let mut turn = 0;
        let heartbeat = phase(&mut raw, &same, |spec| {
            let who = waiters[turn % waiters.len()].clone();
            turn += 1;
            async move { assert!(!fair_attempt(b, &spec, &who).await) }
        })
        .await;
        let inspect = phase(&mut raw, &same, |spec| async move {
            let info = b.inspect_fair(&spec).await.expect("inspect");
            assert_eq!(info.waiters.len(), count);
        })
        .await;
        queued.push((heartbeat, inspect));
    }

    let obtain = phase(&mut raw, &plain_keys, |spec| {
        let h = h.clone();
        async move {
            let r = b.acquire(&AcquireRequest::new(spec, h, long())).await;
            assert!(matches!(r, Ok(AcquireOutcome::Acquired { .. })), "{r:?}");
        }
    })
    .await;
    let release = phase(&mut raw, &plain_keys, |spec| {
        let h = h.clone();
        async move {
            let r = b.release(&ReleaseRequest::new(spec, h)).await;
            assert!(matches!(r, Ok(ReleaseOutcome::Released)), "{r:?}");
        }
    })
    .await;
    let _ = redis::cmd("FLUSHALL").query_async::<()>(&mut raw).await;
    vec![
        granted,
        queued[0].0,
        queued[1].0,
        release_alone,
        release_waiter,
        leave,
        queued[0].1,
        queued[1].1,
        obtain,
        release,
    ]
}

/// Queue lengths of the scale section in bench mode (a smoke run uses 10 and 100).
const SCALE: [usize; 3] = [10, 1_000, 10_000];
/// Load connections driving heartbeats at once in the scale section's load phase.
const LOAD_TASKS: usize = 4;
/// The slow log's threshold in the scale section: a script call above it is logged.
const SLOW_US: u64 = 1_000;

/// One queue length's figures (µs of server time per call: `cmdstat_evalsha`).
struct Scale {
    waiters: usize,
    heartbeat: f64,
    handover: f64,
    leave_rejoin: f64,
    inspect: f64,
    load_calls: u64,
    load_usec_per_call: f64,
    ping: [Duration; 3],
    crashed: usize,
    crash_calls: u64,
    crash_usec_per_call: f64,
    slow: Vec<(String, u64)>,
}

/// `SLOWLOG GET`: each entry's command name and duration in µs.
async fn slowlog(raw: &mut Raw) -> Vec<(String, u64)> {
    let v: redis::Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1_000)
        .query_async(raw)
        .await
        .expect("SLOWLOG GET");
    let mut out = Vec::new();
    if let redis::Value::Array(entries) = v {
        for e in entries {
            let redis::Value::Array(fields) = e else {
                continue;
            };
            let us = match fields.get(2) {
                Some(redis::Value::Int(us)) => u64::try_from(*us).unwrap_or(0),
                _ => 0,
            };
            let name = match fields.get(3) {
                Some(redis::Value::Array(args)) => match args.first() {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                },
                _ => String::new(),
            };
            out.push((name, us));
        }
    }
    out
}

/// The serial phases' reading: µs of server time per script call.
async fn per_call<F, Fut>(raw: &mut Raw, calls: usize, mut call: F) -> f64
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    reset_stats(raw).await;
    for i in 0..calls {
        call(i).await;
    }
    let (u, info) = usage(raw).await;
    assert_eq!(
        u.calls, calls as u64,
        "one script call per operation: {info}"
    );
    u.usec_per_call
}

/// PING round trips from a connection of their own, one per ms, until `stop`: p50, p99, max.
async fn pings(mut conn: Raw, stop: CancellationToken) -> [Duration; 3] {
    let mut rtts = Vec::new();
    while !stop.is_cancelled() {
        let t = std::time::Instant::now();
        let () = redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
            .expect("PING");
        rtts.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    rtts.sort();
    let at = |q: f64| {
        rtts.get(((rtts.len() as f64 * q) as usize).min(rtts.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    [at(0.5), at(0.99), rtts.last().copied().unwrap_or_default()]
}

/// One queue length: a held fair lock with `n` waiters queued; serial phases (heartbeats of
/// waiters all along the queue; handovers: release, the head's grant, the old holder queued
/// again at the back; a waiter leaving and queuing again; inspections), then `LOAD_TASKS`
/// connections heartbeating as fast as they can for `load` while another connection PINGs
/// every ms; then `n - 1` waiters that crash at once, their places lapsing together, and a live
/// waiter behind them heartbeating until it is granted. The slow log (above `SLOW_US`) covers
/// every phase.
async fn scale_run(server: &RedisServer, n: usize, calls: usize, load: Duration) -> Scale {
    let backend = RedisBackend::new(server.connection().await.expect("connection"));
    let b = &backend;
    let mut raw = server.connection().await.expect("raw");
    let spec = Arc::new(fair_spec(&format!("{{scale:{n}}}"), None).expect("spec"));
    let h = owner(&redlease::random_owner());
    assert!(fair_attempt(b, &spec, &h).await);
    let waiters = owners(n);
    for who in &waiters {
        assert!(!fair_attempt(b, &spec, who).await);
    }
    // Warm-up (scripts loaded), not measured.
    b.inspect_fair(&spec).await.expect("inspect");
    let _ = b.leave_fair(&spec, &waiters[0]).await;
    assert!(!fair_attempt(b, &spec, &waiters[0]).await);
    let mut queue: std::collections::VecDeque<Owner> = waiters[1..].iter().cloned().collect();
    queue.push_back(waiters[0].clone());
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(SLOW_US)
        .query_async(&mut raw)
        .await
        .expect("CONFIG SET");
    let () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut raw)
        .await
        .expect("SLOWLOG RESET");

    // Waiters all along the queue (a stride through it).
    let heartbeat = per_call(&mut raw, calls, |i| {
        let who = waiters[(i * 7_919) % n].clone();
        let spec = Arc::clone(&spec);
        async move { assert!(!fair_attempt(b, &spec, &who).await) }
    })
    .await;
    // Handovers: 3 calls each.
    let mut holder = h.clone();
    let cycles = calls / 3;
    reset_stats(&mut raw).await;
    for _ in 0..cycles {
        fair_release(b, &spec, &holder).await;
        let head = queue.pop_front().expect("a waiter");
        assert!(fair_attempt(b, &spec, &head).await, "the head is granted");
        assert!(!fair_attempt(b, &spec, &holder).await);
        queue.push_back(std::mem::replace(&mut holder, head));
    }
    let (u, _) = usage(&mut raw).await;
    assert_eq!(u.calls, 3 * cycles as u64);
    let handover = u.usec_per_call;
    // A waiter from the middle leaves and queues again (2 calls each).
    reset_stats(&mut raw).await;
    for i in 0..cycles {
        let who = waiters[(i * 7_919 + n / 2) % n].clone();
        if who == holder {
            continue;
        }
        let r = b.leave_fair(&spec, &who).await;
        assert!(matches!(r, Ok(true)), "{r:?}");
        assert!(!fair_attempt(b, &spec, &who).await);
    }
    let (u, _) = usage(&mut raw).await;
    let leave_rejoin = u.usec_per_call;
    let inspect = per_call(&mut raw, calls / 10, |_| {
        let spec = Arc::clone(&spec);
        async move {
            let info = b.inspect_fair(&spec).await.expect("inspect");
            assert_eq!(info.waiting, n);
        }
    })
    .await;

    // Load: heartbeats from LOAD_TASKS connections at once, PINGs from another.
    reset_stats(&mut raw).await;
    let stop = CancellationToken::new();
    let ping = tokio::spawn(pings(
        server.connection().await.expect("ping connection"),
        stop.clone(),
    ));
    let mut tasks = Vec::new();
    for t in 0..LOAD_TASKS {
        let backend = RedisBackend::new(server.connection().await.expect("load connection"));
        let (spec, stop, waiters, holder) = (
            Arc::clone(&spec),
            stop.clone(),
            waiters.clone(),
            holder.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while !stop.is_cancelled() {
                let who = &waiters[(i * 7_919) % n];
                i += LOAD_TASKS;
                if *who == holder {
                    continue;
                }
                assert!(!fair_attempt(&backend, &spec, who).await);
            }
        }));
    }
    tokio::time::sleep(load).await;
    stop.cancel();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("load task ends")
            .expect("load task");
    }
    let ping = tokio::time::timeout(Duration::from_secs(20), ping)
        .await
        .expect("pings end")
        .expect("pings");
    let (u, _) = usage(&mut raw).await;
    let (load_calls, load_usec_per_call) = (u.calls, u.usec_per_call);

    // Crashes: n - 1 waiters whose places lapse together, then a live one behind them (n in
    // all: the queue's bound is MAX_WAITERS).
    let crash = Arc::new(fair_spec(&format!("{{scale:{n}:crash}}"), None).expect("spec"));
    assert!(fair_attempt(b, &crash, &h).await);
    let place = Duration::from_millis(2_000 + n as u64 / 4);
    let started = std::time::Instant::now();
    for who in &waiters[1..] {
        let req = FairRequest::new(
            AcquireRequest::new(Arc::clone(&crash), who.clone(), long()),
            Some(Ttl::new(place).expect("place")),
        );
        let r = b.acquire_fair(&req).await;
        assert!(matches!(r, Ok(AcquireOutcome::Held { .. })), "{r:?}");
    }
    assert!(
        started.elapsed() < place,
        "queued before the first place lapsed"
    );
    let z = owner(&redlease::random_owner());
    assert!(!fair_attempt(b, &crash, &z).await);
    let filled = std::time::Instant::now();
    fair_release(b, &crash, &h).await;
    // Every crashed place set by `filled` has lapsed.
    tokio::time::sleep((place + Duration::from_millis(100)).saturating_sub(filled.elapsed())).await;
    reset_stats(&mut raw).await;
    let mut granted = false;
    for _ in 0..(n / redlease::core::PRUNE_PER_CALL + 2) {
        if fair_attempt(b, &crash, &z).await {
            granted = true;
            break;
        }
    }
    assert!(
        granted,
        "the live waiter is granted once the crashed are dropped"
    );
    let (u, _) = usage(&mut raw).await;
    let slow = slowlog(&mut raw).await;
    let _ = redis::cmd("FLUSHALL").query_async::<()>(&mut raw).await;
    Scale {
        waiters: n,
        heartbeat,
        handover,
        leave_rejoin,
        inspect,
        load_calls,
        load_usec_per_call,
        ping,
        crashed: n - 1,
        crash_calls: u.calls,
        crash_usec_per_call: u.usec_per_call,
        slow,
    }
}

/// The scale section: the fair scripts' server time per call, an unrelated PING's latency and
/// the slow log, at each queue length of `counts`.
fn scale_section(
    rt: &tokio::runtime::Runtime,
    s: &mut String,
    counts: &[usize],
    calls: usize,
    load: Duration,
) {
    let server = rt
        .block_on(RedisServer::builder().mode(ServerMode::Process).start())
        .expect("redis");
    let (version, load_before) = rt.block_on(conditions(&server));
    let figures: Vec<Scale> = counts
        .iter()
        .map(|&n| rt.block_on(scale_run(&server, n, calls, load)))
        .collect();
    let (_, load_after) = rt.block_on(conditions(&server));
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let _ = writeln!(
        s,
        "## Fair locks at scale: server time per call by queue length\n"
    );
    let _ = writeln!(
        s,
        "Redis {version} ({} mode, loopback); one held fair lock with N waiters (places long \
         enough that none lapses); µs of server time per script call (`usec_per_call` of \
         `cmdstat_evalsha`), serial phases of {calls} calls (handovers: release, the head's \
         grant, the old holder queued again; leave: a waiter from the middle leaves and \
         queues again; inspections: {} calls); then {LOAD_TASKS} connections heartbeating \
         waiters as fast as they can for {:.1} s while another connection PINGs every ms; then \
         N − 1 waiters whose places lapse at once and a live waiter behind them heartbeating \
         until granted (at most {} dropped per call); the slow log (calls above {SLOW_US} µs) \
         over all phases. {cores} cores, load average {load_before} before, {load_after} \
         after.\n",
        server.mode(),
        calls / 10,
        load.as_secs_f64(),
        redlease::core::PRUNE_PER_CALL,
    );
    let _ = writeln!(
        s,
        "| waiters | heartbeat µs | handover µs | leave + rejoin µs | inspect µs | load: calls, µs/call | PING p50 / p99 / max ms | after the crash: calls to the grant, µs/call | slow log: script calls > 1 ms (max µs) |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in &figures {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let scripts: Vec<&(String, u64)> = f
            .slow
            .iter()
            .filter(|(c, _)| c.eq_ignore_ascii_case("evalsha") || c.eq_ignore_ascii_case("eval"))
            .collect();
        let max = scripts.iter().map(|(_, us)| *us).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {}, {:.1} | {:.2} / {:.2} / {:.2} | {} ({} crashed), {:.1} | {} ({max}) |",
            f.waiters,
            f.heartbeat,
            f.handover,
            f.leave_rejoin,
            f.inspect,
            f.load_calls,
            f.load_usec_per_call,
            ms(f.ping[0]),
            ms(f.ping[1]),
            ms(f.ping[2]),
            f.crash_calls,
            f.crashed,
            f.crash_usec_per_call,
            scripts.len(),
        );
    }
    for f in &figures {
        let all: Vec<String> = f.slow.iter().map(|(c, us)| format!("{c} {us}")).collect();
        let _ = writeln!(
            s,
            "\nSlow log at {} waiters (command, µs; every command, not only scripts): {}",
            f.waiters,
            if all.is_empty() {
                "none".to_owned()
            } else {
                all.join(", ")
            }
        );
    }
    if let (Some(first), Some(last)) = (figures.first(), figures.last()) {
        let _ = writeln!(
            s,
            "\nHeartbeat at {} waiters / at {}: {:.2}×; handover {:.2}×.",
            last.waiters,
            first.waiters,
            last.heartbeat / first.heartbeat.max(f64::MIN_POSITIVE),
            last.handover / first.handover.max(f64::MIN_POSITIVE),
        );
    }
    let _ = writeln!(s);
}

/// The server's version and the machine's load, for the report's conditions.
async fn conditions(server: &RedisServer) -> (String, String) {
    let mut raw = server.connection().await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut raw)
        .await
        .expect("INFO server");
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    (version, load)
}

/// The CPU section: `runs` runs of `n` calls per phase, on a server of its own.
fn cpu_section(rt: &tokio::runtime::Runtime, s: &mut String, runs: usize, n: usize) {
    // A local process (the `redis-server` the kit picks), whatever the tests' mode: the
    // server's own CPU, with nothing of a container's in between.
    let server = rt
        .block_on(RedisServer::builder().mode(ServerMode::Process).start())
        .expect("redis");
    let (version, load_before) = rt.block_on(conditions(&server));
    let runs: Vec<Vec<Usage>> = (0..runs)
        .map(|run| rt.block_on(cpu_run(&server, run, n)))
        .collect();
    let (_, load_after) = rt.block_on(conditions(&server));
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    let _ = writeln!(s, "## Fair locks: Redis CPU per script call\n");
    let _ = writeln!(
        s,
        "Redis {version} ({} mode, loopback); each phase {n} calls, serially, through \
         `RedisBackend` after `CONFIG RESETSTAT`; `usec_per_call` of `cmdstat_evalsha` (the \
         whole script); {} runs on fresh keys; {cores} cores, load average {load_before} \
         before, {load_after} after.\n",
        server.mode(),
        runs.len()
    );
    let header: Vec<String> = (1..=runs.len()).map(|r| format!("run {r}")).collect();
    let _ = writeln!(
        s,
        "| script call | µs per call: {} | median | min–max | `PUBLISH`es per call |",
        header.join(", ")
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|");
    for (i, name) in PHASES.iter().enumerate() {
        let figures: Vec<f64> = runs.iter().map(|r| r[i].usec_per_call).collect();
        let each: Vec<String> = figures.iter().map(|f| format!("{f:.1}")).collect();
        let mut sorted = figures.clone();
        sorted.sort_by(f64::total_cmp);
        let (min, max) = (sorted.first().copied(), sorted.last().copied());
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {name} | {} | {median:.1} | {:.1}–{:.1} | {:.2} |",
            each.join(", "),
            min.unwrap_or(0.0),
            max.unwrap_or(0.0),
            runs.first().map_or(0.0, |r| r[i].publishes_per_call)
        );
    }
    let _ = writeln!(s);
}

/// The contention section: `rounds` interleaved rounds of each build, `period` each.
fn contention_section(
    rt: &tokio::runtime::Runtime,
    s: &mut String,
    rounds: usize,
    period: Duration,
) -> (u64, u64) {
    let server = rt.block_on(RedisServer::start()).expect("redis");
    let (mut plain, mut fair) = (Figures::default(), Figures::default());
    for _ in 0..rounds {
        plain.add(rt.block_on(round(&server, false, period)), period);
        fair.add(rt.block_on(round(&server, true, period)), period);
    }

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
    let _ = writeln!(s);
    (plain.acquisitions, fair.acquisitions)
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    // `-- contention`, `-- cpu` or `-- scale`: that section alone.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |section: &str| filters.is_empty() || filters.iter().any(|f| section.contains(f));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("criterion");
    let mut s = String::new();
    if wanted("contention") {
        let (rounds, period) = if bench_mode {
            (3, Duration::from_secs(3))
        } else {
            (1, Duration::from_millis(300))
        };
        let (plain, fair) = contention_section(&rt, &mut s, rounds, period);
        assert!(plain > 0 && fair > 0);
    }
    if wanted("scale") {
        let (counts, calls, load): (&[usize], usize, Duration) = if bench_mode {
            (&SCALE, 3_000, Duration::from_secs(3))
        } else {
            (&[10, 100], 30, Duration::from_millis(200))
        };
        scale_section(&rt, &mut s, counts, calls, load);
    }
    if wanted("cpu") {
        let (runs, calls) = if bench_mode {
            (CPU_RUNS, CPU_CALLS)
        } else {
            (1, 20)
        };
        cpu_section(&rt, &mut s, runs, calls);
    }
    println!("\n{s}");
    if bench_mode {
        let path = out_dir.join("redlease-fair.md");
        let _ = std::fs::create_dir_all(&out_dir);
        match std::fs::write(&path, &s) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    }
    rt.shutdown_timeout(Duration::from_secs(2));
}
