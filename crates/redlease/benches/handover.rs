//! Handover benchmarks on a real Redis: what release notices buy, measured beside the polling
//! build in the same run.
//!
//! - **Graceful handover**: one leader and three followers (TTL 5 s), each on its own
//!   connections (and, with notices, its own subscriber: like four processes). The leader
//!   resigns; the time until a follower is elected *and* its first fenced write is applied
//!   (then the resigner leaves and a new member joins, so every handover has three
//!   followers). Percentiles over every handover; the polling build (no subscriber) runs a
//!   few handovers per round for scale, interleaved with the notices build.
//! - **Lock handoff under contention**: 8 tasks of one process on one key, each obtaining
//!   (retry every 10 ms), holding ~1 ms and releasing, for a fixed time; notices and polling
//!   builds interleaved round by round. Acquisitions per second, client commands per
//!   acquisition (`INFO commandstats`: `EVALSHA`, `EVAL`, `SET`, `PING`) and each task's
//!   acquisitions (fairness).
//! - **Idle cost**: the round trips per second of an idle follower and an idle lock waiter
//!   with notices on (`INFO commandstats` over a quiet period on a server of their own).
//!
//! `cargo bench -p redlease --bench handover` (also run by `cargo xtask bench`); the report is
//! printed and written to `target/criterion/redlease-handover.md`. Without `--bench` (as
//! `cargo test --all-targets` runs it) each measurement runs once, briefly, as a smoke test.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease_testkit::redis::RedisServer;
use redis::aio::ConnectionManager;
use redlease::redis::{RedisBackend, ReleaseNotices};
use redlease::{
    CancellationToken, ElectionConfig, Elector, LockOptions, Locker, RetryStrategy, Role, Token,
};
use tokio::sync::mpsc;

const TTL: Duration = Duration::from_secs(5);
const FOLLOWERS: usize = 3;
const TASKS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);
const RETRY: Duration = Duration::from_millis(10);

static RUN: AtomicU64 = AtomicU64::new(0);

type Backend = RedisBackend<ConnectionManager>;

/// A backend on its own connections, like a separate process; with or without a subscriber.
async fn backend(server: &RedisServer, notices: bool) -> Backend {
    let client = server.client().expect("client");
    let conn = client
        .get_connection_manager_with_config(
            redis::aio::ConnectionManagerConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect");
    let b = RedisBackend::new(conn);
    if notices {
        b.with_release_notices(ReleaseNotices::new(client))
    } else {
        b
    }
}

/// Sorted durations and their percentiles.
#[derive(Clone, Debug, Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn pct(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i.min(v.len() - 1)]
    }
}

fn show(d: Duration) -> String {
    if d >= Duration::from_millis(100) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

/// One leader and three followers whose terms report their first applied write on a channel.
struct Group {
    server_url: String,
    name: String,
    notices: bool,
    members: Vec<Member>,
    next_id: usize,
    tx: mpsc::UnboundedSender<(Token, Instant)>,
    writes: mpsc::UnboundedReceiver<(Token, Instant)>,
}

struct Member {
    elector: Elector<Backend>,
    shutdown: CancellationToken,
    run: tokio::task::JoinHandle<()>,
}

impl Group {
    async fn start(server: &RedisServer, notices: bool) -> Group {
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let (tx, writes) = mpsc::unbounded_channel();
        let mut group = Group {
            server_url: server.url(),
            name: format!("bench:handover:{run}"),
            notices,
            members: Vec::new(),
            next_id: 0,
            tx,
            writes,
        };
        for _ in 0..=FOLLOWERS {
            group.join().await;
        }
        // The first term's write.
        group.next_write(Duration::from_secs(20)).await;
        group
    }

    /// A new member (a process joining): it runs, and follows or leads, subscribed.
    async fn join(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let config = ElectionConfig::builder(self.name.clone(), format!("n{id}"))
            .ttl(TTL)
            .build()
            .expect("config");
        let client = redis::Client::open(self.server_url.as_str()).expect("url");
        let conn = client
            .get_connection_manager_with_config(
                redis::aio::ConnectionManagerConfig::new().set_response_timeout(None),
            )
            .await
            .expect("connect");
        let mut backend = RedisBackend::new(conn);
        if self.notices {
            backend = backend.with_release_notices(ReleaseNotices::new(client));
        }
        let elector = Elector::new(backend, config);
        let shutdown = CancellationToken::new();
        let (e, s, tx) = (elector.clone(), shutdown.clone(), self.tx.clone());
        let run = tokio::spawn(async move {
            let _ = e
                .run(s, move |term| {
                    let tx = tx.clone();
                    async move {
                        let fencer = term.fencer();
                        let applied = fencer
                            .set("bench:handover:state", term.token().to_string())
                            .await
                            .is_ok_and(|o| o.is_applied());
                        if applied {
                            let _ = tx.send((term.token(), Instant::now()));
                        }
                        term.cancelled().await;
                    }
                })
                .await;
        });
        let mut rx = elector.subscribe();
        tokio::time::timeout(
            Duration::from_secs(20),
            rx.wait_for(|s| matches!(s.role, Role::Leader(_) | Role::Follower)),
        )
        .await
        .expect("the new member leads or follows")
        .expect("state");
        if let Some(notices) = elector.backend().release_notices() {
            let channel = redlease::redis::notice_channel(
                &format!("{}:leader", self.name),
                redlease::redis::Topology::Standalone,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while !notices.is_live(&channel) {
                assert!(Instant::now() < deadline, "never subscribed");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        self.members.push(Member {
            elector,
            shutdown,
            run,
        });
    }

    async fn next_write(&mut self, within: Duration) -> (Token, Instant) {
        tokio::time::timeout(within, self.writes.recv())
            .await
            .expect("a term wrote in time")
            .expect("writers run")
    }

    /// One graceful handover: the leader resigns; the time until the next term's write. Then
    /// the resigned member leaves and a new one joins, so that every handover has three
    /// followers (a resigner waits longer than an acquire interval before contending again).
    async fn handover(&mut self) -> Duration {
        let i = self
            .members
            .iter()
            .position(|m| m.elector.is_leader())
            .expect("someone leads");
        let before = self.members[i].elector.token().expect("leader token");
        let resigned = Instant::now();
        self.members[i].elector.resign();
        // A polling follower notices within one acquire interval (TTL/2) plus slack.
        let (token, at) = self.next_write(TTL * 2).await;
        assert!(token > before, "the successor's token is higher");
        let took = at.duration_since(resigned);
        let gone = self.members.swap_remove(i);
        gone.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), gone.run).await;
        self.join().await;
        took
    }

    async fn stop(self) {
        for m in &self.members {
            m.shutdown.cancel();
        }
        for m in self.members {
            let _ = tokio::time::timeout(Duration::from_secs(20), m.run).await;
        }
    }
}

/// One lock-handoff round: 8 tasks for `period`; (acquisitions per task, commands).
async fn lock_round(server: &RedisServer, notices: bool, period: Duration) -> (Vec<u64>, u64) {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let key = format!("bench:hot:{run}");
    let locker = Locker::new(backend(server, notices).await);
    let mut raw = server.connection().await.expect("raw");
    let before = total_commands(&mut raw).await;
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (locker, key, stop) = (locker.clone(), key.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let options = || {
                LockOptions::new()
                    .retry(RetryStrategy::linear(RETRY).expect("retry"))
                    .wait(Duration::from_secs(30))
            };
            while !stop.is_cancelled() {
                let obtained = tokio::select! {
                    l = locker.obtain(key.clone(), Duration::from_secs(10), options()) => l,
                    () = stop.cancelled() => break,
                };
                let lock = obtained.expect("obtained within the wait");
                tokio::time::sleep(HOLD).await;
                lock.release().await.expect("released");
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
    let after = total_commands(&mut raw).await;
    (counts, after.saturating_sub(before))
}

/// The commands clients sent (as counted by `INFO commandstats`): `EVALSHA`, `EVAL`, `SET`
/// (the fast path of a free lock) and `PING` (the subscriber's keep-alive). Commands run
/// inside scripts are not round trips and are left out (`SET` is counted whichever way it
/// came; a script sets a lock key only when it takes over an expired one).
async fn total_commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    ["evalsha", "eval", "set", "ping"]
        .iter()
        .map(|name| {
            info.lines()
                .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
                .and_then(|l| l.split("calls=").nth(1))
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

#[derive(Default)]
struct LockFigures {
    acquisitions: u64,
    commands: u64,
    seconds: f64,
    min: u64,
    max: u64,
}

impl LockFigures {
    fn add(&mut self, (counts, commands): (Vec<u64>, u64), period: Duration) {
        let total: u64 = counts.iter().sum();
        let (min, max) = (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        );
        if self.seconds == 0.0 {
            (self.min, self.max) = (min, max);
        } else {
            self.min = self.min.min(min);
            self.max = self.max.max(max);
        }
        self.acquisitions += total;
        self.commands += commands;
        self.seconds += period.as_secs_f64();
    }

    fn per_sec(&self) -> f64 {
        self.acquisitions as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    fn per_acq(&self) -> f64 {
        self.commands as f64 / (self.acquisitions.max(1)) as f64
    }
}

/// Commands per second at the server over `period` while one follower (and, separately, one
/// lock waiter) idles with notices on; each on a server of its own.
async fn idle_cost(period: Duration) -> (f64, f64) {
    // Follower: a leader elsewhere would add its renewals; the follower's own traffic is what
    // we want, so the "leader" is a key held by a raw SET with a long TTL.
    let server = RedisServer::start().await.expect("redis");
    let mut raw = server.connection().await.expect("raw");
    let _: () = redis::cmd("SET")
        .arg("idle:leader")
        .arg("someone")
        .arg("PX")
        .arg(600_000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    let config = ElectionConfig::builder("idle", "follower")
        .ttl(TTL)
        .build()
        .expect("config");
    let follower = Elector::new(backend(&server, true).await, config);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let (f, s) = (follower.clone(), shutdown.clone());
        async move { f.hold(s).await }
    });
    let mut rx = follower.subscribe();
    tokio::time::timeout(
        Duration::from_secs(20),
        rx.wait_for(|s| s.role == Role::Follower),
    )
    .await
    .expect("follows")
    .expect("state");
    let before = total_commands(&mut raw).await;
    tokio::time::sleep(period).await;
    let follower_rate = (total_commands(&mut raw).await - before) as f64 / period.as_secs_f64();
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), run).await;

    // Waiter: a lock held elsewhere (long TTL), one waiter with the default retry.
    let _: () = redis::cmd("SET")
        .arg("idle:lock")
        .arg("someone")
        .arg("PX")
        .arg(600_000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    let locker = Locker::new(backend(&server, true).await);
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new()
            .retry(RetryStrategy::linear(Duration::from_secs(1)).expect("retry"))
            .wait(Duration::from_secs(600));
        let _ = locker
            .obtain("idle:lock", Duration::from_secs(10), options)
            .await;
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = total_commands(&mut raw).await;
    tokio::time::sleep(period).await;
    let waiter_rate = (total_commands(&mut raw).await - before) as f64 / period.as_secs_f64();
    waiter.abort();
    (follower_rate, waiter_rate)
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

    // Interleaved: notices, polling, notices, polling...
    let (rounds, per_round_notices, per_round_polling) =
        if bench_mode { (3, 40, 3) } else { (1, 2, 1) };
    let (mut samples, mut polling) = (Samples::default(), Samples::default());
    for _ in 0..rounds {
        for (notices, n, into) in [
            (true, per_round_notices, &mut samples),
            (false, per_round_polling, &mut polling),
        ] {
            rt.block_on(async {
                let mut group = Group::start(&server, notices).await;
                for _ in 0..n {
                    into.0.push(group.handover().await);
                }
                group.stop().await;
            });
        }
    }
    let period = if bench_mode {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(300)
    };
    let (mut with, mut without) = (LockFigures::default(), LockFigures::default());
    for _ in 0..if bench_mode { 3 } else { 1 } {
        with.add(rt.block_on(lock_round(&server, true, period)), period);
        without.add(rt.block_on(lock_round(&server, false, period)), period);
    }
    let idle = rt.block_on(idle_cost(if bench_mode {
        Duration::from_secs(10)
    } else {
        Duration::from_millis(500)
    }));

    let mut s = String::new();
    let _ = writeln!(s, "## Handover (release notices)\n");
    let _ = writeln!(
        s,
        "Redis {} mode, loopback; TTL {} s; {} followers; each elector on its own connections \
         and subscriber.\n",
        server.mode(),
        TTL.as_secs(),
        FOLLOWERS
    );
    let _ = writeln!(
        s,
        "| graceful handover (resign → successor's first fenced write applied) | n | p50 | p99 | max |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (what, v) in [("notices", &samples), ("polling only", &polling)] {
        let _ = writeln!(
            s,
            "| {what} | {} | {} | {} | {} |",
            v.0.len(),
            show(v.pct(0.5)),
            show(v.pct(0.99)),
            show(v.pct(1.0))
        );
    }
    let _ = writeln!(
        s,
        "\n| lock handoff: {TASKS} tasks, one key, hold {} ms, retry {} ms | acquisitions/s | \
         commands/acquisition | per task min–max |",
        HOLD.as_millis(),
        RETRY.as_millis()
    );
    let _ = writeln!(s, "|---|---:|---:|---|");
    for (what, f) in [("notices", &with), ("polling only", &without)] {
        let _ = writeln!(
            s,
            "| {what} | {:.0} | {:.2} | {}–{} |",
            f.per_sec(),
            f.per_acq(),
            f.min,
            f.max
        );
    }
    let _ = writeln!(
        s,
        "\nRatio notices/polling: {:.1}× acquisitions/s, {:.2}× commands per acquisition.",
        with.per_sec() / without.per_sec().max(f64::MIN_POSITIVE),
        with.per_acq() / without.per_acq().max(f64::MIN_POSITIVE)
    );
    let _ = writeln!(
        s,
        "\nIdle cost with notices on (TTL {} s): follower {:.2} commands/s, lock waiter \
         (retry 1 s) {:.2} commands/s (pings of the subscriber connection included).",
        TTL.as_secs(),
        idle.0,
        idle.1
    );
    println!("\n{s}");
    if bench_mode {
        let path = out_dir.join("redlease-handover.md");
        let _ = std::fs::create_dir_all(&out_dir);
        match std::fs::write(&path, &s) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    } else {
        assert!(samples.0.iter().all(|d| *d < TTL), "{samples:?}");
        assert!(with.acquisitions > 0 && without.acquisitions > 0);
    }
    drop(server);
    rt.shutdown_timeout(Duration::from_secs(2));
}
