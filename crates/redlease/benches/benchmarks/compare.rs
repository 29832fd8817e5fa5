//! redlease against another Redis lock client and raw redis-rs: the serial lock cycle, each
//! one interleaved with the others in the same run (A, B, C, A, B, C, ...), on the same server,
//! each over its own multiplexed connection opened with redis-rs's defaults, no retries.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redlease::redis::RedisBackend;
use redlease::{LockOptions, Locker};

use crate::setup::Env;

/// Medians of the three lock cycles.
#[derive(Debug, Clone)]
pub(crate) struct Compare {
    pub(crate) cycles: usize,
    pub(crate) redlease: Duration,
    pub(crate) rslock: Duration,
    pub(crate) raw: Duration,
}

const TTL: Duration = Duration::from_secs(10);

/// The raw cycle: `SET key value NX PX ttl`, then the compare-and-delete script (what a
/// correct release must do; a bare `DEL` could delete someone else's lock).
const RAW_RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

async fn raw_cycle(conn: &mut MultiplexedConnection, script: &redis::Script, key: &str, n: u64) {
    let value = format!("raw-{n}");
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&value)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(conn)
        .await
        .expect("raw SET NX PX");
    assert!(set.is_some(), "raw: the key was free");
    let deleted: i64 = script
        .key(key)
        .arg(&value)
        .invoke_async(conn)
        .await
        .expect("raw release");
    assert_eq!(deleted, 1, "raw: released");
}

/// `n` interleaved rounds of the three cycles on server 0; medians.
pub(crate) async fn interleaved(env: &Env, n: usize) -> Compare {
    let url = env.servers[0].url();
    let client = redis::Client::open(url.as_str()).expect("url");
    let connect = || async {
        client
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    };
    let locker = Locker::new(RedisBackend::new(connect().await));
    let mut rs = rslock::LockManager::from_clients(vec![client.clone()]);
    rs.set_retry(1, Duration::from_millis(1));
    let mut raw = connect().await;
    let script = redis::Script::new(RAW_RELEASE);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n as u64 + 20 {
        let start = Instant::now();
        let lock = locker
            .obtain("bench:cmp:redlease", TTL, LockOptions::new())
            .await
            .expect("redlease obtain");
        lock.release().await.expect("redlease release");
        let ta = start.elapsed();

        let start = Instant::now();
        let l = rs
            .lock("bench:cmp:rslock", TTL)
            .await
            .expect("rslock lock (no retry)");
        rs.unlock(&l).await;
        let tb = start.elapsed();

        let start = Instant::now();
        raw_cycle(&mut raw, &script, "bench:cmp:raw", i).await;
        let tc = start.elapsed();
        // The first 20 rounds warm up connections and script caches.
        if i >= 20 {
            a.push(ta);
            b.push(tb);
            c.push(tc);
        }
    }
    Compare {
        cycles: n,
        redlease: median(a),
        rslock: median(b),
        raw: median(c),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The report's section.
pub(crate) fn render(c: &Compare) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let ratio = |d: Duration| us(d) / us(c.raw).max(f64::MIN_POSITIVE);
    format!(
        "\n## Lock cycle: redlease vs rslock vs raw redis-rs\n\n\
         Serial lock cycles on server 0, interleaved (redlease, rslock, raw) {} times, each \
         client on its own multiplexed connection with redis-rs defaults, no retries; medians.\n\n\
         | client | lock cycle (median) | vs raw |\n|---|---:|---:|\n\
         | redlease `Locker` obtain + release | {:.1} µs | {:.2}× |\n\
         | rslock 0.10 `lock` + `unlock` (one server, no retry) | {:.1} µs | {:.2}× |\n\
         | raw redis-rs `SET NX PX` + compare-and-delete script | {:.1} µs | 1.00× |\n",
        c.cycles,
        us(c.redlease),
        ratio(c.redlease),
        us(c.rslock),
        ratio(c.rslock),
        us(c.raw),
    )
}
