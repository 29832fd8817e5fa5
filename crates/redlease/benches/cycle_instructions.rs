//! Instructions per lock cycle, for `valgrind --tool=callgrind` (instruction counts are
//! repeatable on a noisy machine; wall time is not). One client, `N` serial lock cycles
//! (obtain + release, no retries, one key) on a current-thread runtime, against the Redis at
//! `REDLEASE_BENCH_URL` (default `redis://127.0.0.1:6379`).
//!
//! `scripts/callgrind-cycle.sh` runs it under callgrind at two cycle counts per client and
//! divides the difference of the totals by the difference of the counts, which removes
//! start-up and connection costs. Arguments: `<client> <cycles>`, the client one of
//! `redlease`, `redlease-untimed` (its connection without redis-rs's response timeout),
//! `redlease-connect` (over `redlease::redis::connect`'s backend), `rslock`, `raw` (a lock
//! cycle each), `redlease-renew` (a refresh of one held
//! lock) and `redlease-release` (a raw `SET`, then `RedisBackend::release` of it); `cargo xtask
//! perf` gates the three `redlease*` counts against committed baselines. `redlease-many` and
//! `raw-many` take a number of seconds instead: [`MANY`] auto-renewed locks (TTL 3 s, renewed
//! every 1 s) held that long through one `Locker`, or as many keys kept alive by one raw
//! pipeline of `PEXPIRE`s per second; each prints `renewals <n>` (the `PEXPIRE`s the server ran
//! meanwhile, from `INFO commandstats`), so `scripts/callgrind-many.sh` can divide the
//! instructions of the hold (between two calls of [`hold_mark`]) by the renewals it made;
//! `redlease-many` also prints `rss_per_lock` (the anonymous resident memory each held lock
//! added, once the renewals settled). `group-many` does the same for [`MANY`]
//! elections in one `ElectionGroup` (one member, so it leads them all; TTL 3 s, renewed every
//! 1 s, its roster of 32 slots read every 1.5 s included). Without them
//! (as `cargo test --all-targets` runs it, or `cargo bench`) it runs a few cycles of each
//! client against a kit Redis, as a smoke test.

use std::time::Duration;

use redlease::redis::RedisBackend;
use redlease::{ElectionGroup, LockOptions, Locker};

const TTL: Duration = Duration::from_secs(10);
/// How many locks (or elections) the `*-many` clients hold (`REDLEASE_BENCH_MANY` overrides it).
const MANY: usize = 2_000;
const MANY_TTL: Duration = Duration::from_secs(3);
const MANY_INTERVAL: Duration = Duration::from_secs(1);
const RAW_RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

async fn cycles(url: &str, client: &str, n: u64, many: usize) {
    let redis_client = redis::Client::open(url).expect("url");
    let mut conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    match client {
        "redlease" => {
            let locker = Locker::new(RedisBackend::new(conn));
            for _ in 0..n {
                let lock = locker
                    .obtain("bench:ir:redlease", TTL, LockOptions::new())
                    .await
                    .expect("obtain");
                lock.release().await.expect("release");
            }
        }
        "redlease-untimed" => {
            // A plain multiplexed connection without redis-rs's response timeout (the
            // backend bounds every call itself): one timer per round trip instead of two.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let conn = redis_client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("connect");
            let locker = Locker::new(RedisBackend::new(conn));
            for _ in 0..n {
                let lock = locker
                    .obtain("bench:ir:untimed", TTL, LockOptions::new())
                    .await
                    .expect("obtain");
                lock.release().await.expect("release");
            }
        }
        "redlease-connect" => {
            // The recommended connection: `connect`'s self-healing one, whose requests the
            // backend bounds itself (no redis-rs response timer beside the backend's).
            let backend = redlease::redis::connect(url).await.expect("connect");
            let locker = Locker::new(backend);
            for _ in 0..n {
                let lock = locker
                    .obtain("bench:ir:connect", TTL, LockOptions::new())
                    .await
                    .expect("obtain");
                lock.release().await.expect("release");
            }
        }
        "rslock" => {
            let mut manager = rslock::LockManager::from_clients(vec![redis_client.clone()]);
            manager.set_retry(1, Duration::from_millis(1));
            for _ in 0..n {
                let l = manager.lock("bench:ir:rslock", TTL).await.expect("lock");
                manager.unlock(&l).await;
            }
        }
        "raw" => {
            let script = redis::Script::new(RAW_RELEASE);
            for i in 0..n {
                let value = format!("raw-{i}");
                let set: Option<String> = redis::cmd("SET")
                    .arg("bench:ir:raw")
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .expect("SET NX PX");
                assert!(set.is_some(), "the key was free");
                let deleted: i64 = script
                    .key("bench:ir:raw")
                    .arg(&value)
                    .invoke_async(&mut conn)
                    .await
                    .expect("release");
                assert_eq!(deleted, 1);
            }
        }
        "redlease-renew" => {
            let locker = Locker::new(RedisBackend::new(conn));
            let lock = locker
                .obtain("bench:ir:renew", TTL, LockOptions::new())
                .await
                .expect("obtain");
            for _ in 0..n {
                lock.refresh(TTL).await.expect("refresh");
            }
            lock.release().await.expect("release");
        }
        "redlease-release" => {
            let backend = RedisBackend::new(conn.clone());
            let spec = std::sync::Arc::new(
                redlease::core::LeaseSpec::lock(["bench:ir:release"], None).expect("spec"),
            );
            for i in 0..n {
                let owner = format!("owner-{i}");
                let _: () = redis::cmd("SET")
                    .arg("bench:ir:release")
                    .arg(&owner)
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .expect("SET");
                let req = redlease::core::ReleaseRequest::new(
                    std::sync::Arc::clone(&spec),
                    redlease::core::Owner::new(owner).expect("owner"),
                );
                let outcome = redlease::core::LeaseBackend::release(&backend, &req)
                    .await
                    .expect("release");
                assert!(matches!(outcome, redlease::core::ReleaseOutcome::Released));
            }
        }
        "redlease-many" => {
            let locker = Locker::new(RedisBackend::new(conn.clone()));
            let mut held = Vec::with_capacity(many);
            let rss_before = resident_bytes();
            for i in 0..many {
                let lock = locker
                    .obtain(
                        format!("bench:ir:many:{i}"),
                        MANY_TTL,
                        LockOptions::new().auto_renew(MANY_INTERVAL),
                    )
                    .await
                    .expect("obtain a free lock");
                held.push(lock);
            }
            // The renewals that follow the obtains settle into their batches first.
            tokio::time::sleep(MANY_INTERVAL * 2).await;
            // The resident memory each held lock adds, read when the batches have settled (as
            // the benchmarks' many-locks section reads it).
            let rss = resident_bytes().saturating_sub(rss_before);
            let before = pexpires(&mut conn).await;
            tokio::time::sleep(MANY_INTERVAL * n as u32).await;
            println!("renewals {}", pexpires(&mut conn).await - before);
            println!("rss_per_lock {:.0}", rss as f64 / many as f64);
            assert!(held.iter().all(|l| l.held()), "every lock held throughout");
            for lock in held {
                lock.release().await.expect("release");
            }
        }
        "group-many" => {
            let names: Vec<String> = (0..many).map(|i| format!("bench:ir:group:{i}")).collect();
            let group = ElectionGroup::builder(
                RedisBackend::new(conn.clone()),
                "bench-ir-group",
                names,
                "bench",
            )
            .ttl(MANY_TTL)
            .renew_interval(MANY_INTERVAL)
            .start()
            .expect("a valid group");
            let mut owned = group.subscribe();
            tokio::time::timeout(
                Duration::from_secs(300),
                owned.wait_for(|o| o.len() == many),
            )
            .await
            .expect("every election led in time")
            .expect("the group runs");
            // The renewals that follow the acquires settle into their batches first.
            tokio::time::sleep(MANY_INTERVAL * 2).await;
            let before = pexpires(&mut conn).await;
            tokio::time::sleep(MANY_INTERVAL * n as u32).await;
            println!("renewals {}", pexpires(&mut conn).await - before);
            assert_eq!(group.owned().len(), many, "every election led throughout");
            tokio::time::timeout(Duration::from_secs(300), group.shutdown())
                .await
                .expect("shutdown in time");
        }
        "raw-many" => {
            let keys: Vec<String> = (0..many).map(|i| format!("bench:ir:rawmany:{i}")).collect();
            // One pipeline: set one by one under callgrind, the first keys could expire
            // before the last is set.
            let mut set = redis::pipe();
            for k in &keys {
                set.cmd("SET")
                    .arg(k)
                    .arg("raw")
                    .arg("PX")
                    .arg(MANY_TTL.as_millis() as u64)
                    .ignore();
            }
            let () = set.query_async(&mut conn).await.expect("SET the keys");
            let before = pexpires(&mut conn).await;
            let start = tokio::time::Instant::now();
            let mut tick = tokio::time::interval_at(start + MANY_INTERVAL, MANY_INTERVAL);
            for _ in 0..n {
                tick.tick().await;
                let mut pipe = redis::pipe();
                for k in &keys {
                    pipe.cmd("PEXPIRE").arg(k).arg(MANY_TTL.as_millis() as u64);
                }
                let renewed: Vec<i64> =
                    pipe.query_async(&mut conn).await.expect("PEXPIRE pipeline");
                assert!(renewed.iter().all(|&r| r == 1), "every key alive");
            }
            tokio::time::sleep_until(start + MANY_INTERVAL * n as u32 + MANY_INTERVAL / 2).await;
            println!("renewals {}", pexpires(&mut conn).await - before);
            let mut del = redis::pipe();
            for k in &keys {
                del.cmd("DEL").arg(k).ignore();
            }
            let () = del.query_async(&mut conn).await.expect("DEL the keys");
        }
        other => panic!(
            "unknown client {other:?}: expected redlease, redlease-untimed, redlease-connect, rslock, raw, redlease-renew, redlease-release, redlease-many, group-many or raw-many"
        ),
    }
}

/// How many locks the `*-many` clients hold.
fn many_locks() -> usize {
    std::env::var("REDLEASE_BENCH_MANY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MANY)
}

/// This process's anonymous resident memory (`/proc/self/statm`: resident − shared, 4 KiB
/// pages; the benchmarks' `cpu::resident_bytes` says why the file-backed pages, the program's
/// code, are left out), 0 where unreadable.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut fields = statm
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let resident = fields.next().unwrap_or(0);
    let shared = fields.next().unwrap_or(0);
    resident.saturating_sub(shared) * 4096
}

/// The `PEXPIRE` calls the server has run (inside scripts or not), from `INFO commandstats`.
/// Called at the start and at the end of every `*-many` hold: each call first passes
/// [`hold_mark`].
async fn pexpires(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    hold_mark();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_pexpire:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Marks the start and the end of a `*-many` hold for callgrind: `scripts/callgrind-many.sh`
/// runs with `--dump-before=*hold_mark`, so the counts between the two marks (the hold alone)
/// land in a file of their own, apart from the start-up (obtains, acquires: their number of
/// turns varies from run to run) and the shutdown.
#[inline(never)]
fn hold_mark() {
    std::hint::black_box(());
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // The `*-many` clients run on two worker threads, as the benchmarks' many-locks section
    // does (the renewal task, its batches and the connection then hop between threads).
    let rt = if args.first().is_some_and(|c| c.ends_with("-many")) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("runtime");
    match args.as_slice() {
        [client, n] => {
            let n: u64 = n.parse().expect("a cycle count");
            let url = std::env::var("REDLEASE_BENCH_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            rt.block_on(cycles(&url, client, n, many_locks()));
        }
        _ => rt.block_on(async {
            let server = lease_testkit::redis::RedisServer::start()
                .await
                .expect("a kit Redis");
            let url = server.url();
            for client in [
                "redlease",
                "rslock",
                "raw",
                "redlease-renew",
                "redlease-release",
            ] {
                cycles(&url, client, 3, 0).await;
            }
            for client in ["redlease-many", "group-many", "raw-many"] {
                cycles(&url, client, 1, 20).await;
            }
            println!("smoke: 3 cycles of each client and measure");
        }),
    }
}
