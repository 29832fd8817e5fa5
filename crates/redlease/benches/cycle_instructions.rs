//! Instructions per lock cycle, for `valgrind --tool=callgrind` (instruction counts are
//! repeatable on a noisy machine; wall time is not). One client, `N` serial lock cycles
//! (obtain + release, no retries, one key) on a current-thread runtime, against the Redis at
//! `REDLEASE_BENCH_URL` (default `redis://127.0.0.1:6379`).
//!
//! `scripts/callgrind-cycle.sh` runs it under callgrind at two cycle counts per client and
//! divides the difference of the totals by the difference of the counts, which removes
//! start-up and connection costs. Arguments: `<client> <cycles>`, the client one of
//! `redlease`, `rslock`, `raw` (a lock cycle each), `redlease-renew` (a refresh of one held
//! lock) and `redlease-release` (a raw `SET`, then `RedisBackend::release` of it); `cargo xtask
//! perf` gates the three `redlease*` counts against committed baselines. Without them
//! (as `cargo test --all-targets` runs it, or `cargo bench`) it runs a few cycles of each
//! client against a kit Redis, as a smoke test.

use std::time::Duration;

use redlease::redis::RedisBackend;
use redlease::{LockOptions, Locker};

const TTL: Duration = Duration::from_secs(10);
const RAW_RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

async fn cycles(url: &str, client: &str, n: u64) {
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
        other => panic!(
            "unknown client {other:?}: expected redlease, rslock, raw, redlease-renew or redlease-release"
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match args.as_slice() {
        [client, n] => {
            let n: u64 = n.parse().expect("a cycle count");
            let url = std::env::var("REDLEASE_BENCH_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            rt.block_on(cycles(&url, client, n));
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
                cycles(&url, client, 3).await;
            }
            println!("smoke: 3 cycles of each client and measure");
        }),
    }
}
