//! redlease against another Redis lock client and raw redis-rs: the serial lock cycle, each
//! one interleaved with the others in the same run (A, B, C, A, B, C, ...), on the same server,
//! each over its own multiplexed connection opened with redis-rs's defaults, no retries —
//! and redlease once more over the connection its README opens (`redlease::redis::connect`:
//! no response timeout of redis-rs's own, each call bounded by the lease's rules alone).

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
    /// redlease over `redlease::redis::connect`.
    pub(crate) connect: Duration,
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
    let own = Locker::new(redlease::redis::connect(&url).await.expect("connect"));
    let script = redis::Script::new(RAW_RELEASE);
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
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

        let start = Instant::now();
        let lock = own
            .obtain("bench:cmp:connect", TTL, LockOptions::new())
            .await
            .expect("redlease obtain");
        lock.release().await.expect("redlease release");
        let td = start.elapsed();
        // The first 20 rounds warm up connections and script caches.
        if i >= 20 {
            a.push(ta);
            b.push(tb);
            c.push(tc);
            d.push(td);
        }
    }
    Compare {
        cycles: n,
        redlease: median(a),
        rslock: median(b),
        raw: median(c),
        connect: median(d),
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
         Serial lock cycles on server 0, interleaved (redlease, rslock, raw, redlease over \
         `connect`) {} times, each client on its own multiplexed connection with redis-rs \
         defaults (the last on `redlease::redis::connect`'s), no retries; medians.\n\n\
         | client | lock cycle (median) | vs raw |\n|---|---:|---:|\n\
         | redlease `Locker` obtain + release | {:.1} µs | {:.2}× |\n\
         | the same over `redlease::redis::connect` | {:.1} µs | {:.2}× |\n\
         | rslock 0.10 `lock` + `unlock` (one server, no retry) | {:.1} µs | {:.2}× |\n\
         | raw redis-rs `SET NX PX` + compare-and-delete script | {:.1} µs | 1.00× |\n",
        c.cycles,
        us(c.redlease),
        ratio(c.redlease),
        us(c.connect),
        ratio(c.connect),
        us(c.rslock),
        ratio(c.rslock),
        us(c.raw),
    )
}

/// One client's share of a concurrent round.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Throughput {
    pub(crate) cycles_per_sec: f64,
    /// This process's CPU per cycle.
    pub(crate) client_cpu_us: f64,
    /// The server's CPU per cycle.
    pub(crate) redis_cpu_us: f64,
}

/// Rounds of `tasks` concurrent lock cycles, each task on its own key, each client for
/// `window`, interleaved round by round, each round starting with the next client.
#[derive(Debug, Clone, Default)]
pub(crate) struct Concurrent {
    pub(crate) tasks: usize,
    pub(crate) window: Duration,
    /// Per round: redlease, rslock, raw, redlease with native commands off (the scripts
    /// only; the same as redlease on a server without them), and redlease over
    /// `redlease::redis::connect`, and redlease over a multiplexed connection without
    /// redis-rs's response timeout (as `RedisBackend::new` documents), and raw redis-rs
    /// again: the same client twice in a round, a control that shows how far two runs of
    /// one client differ (a ratio within that spread is not a difference between clients).
    pub(crate) rounds: Vec<[Throughput; 7]>,
}

#[derive(Clone, Copy)]
enum Client {
    Redlease,
    /// redlease with `with_native_commands(false)`: the scripts even where the server has
    /// `DELIFEQ` / `SET IFEQ`.
    RedleaseScripts,
    /// redlease over `redlease::redis::connect` (as its README opens a backend).
    RedleaseConnect,
    /// redlease over a multiplexed connection without redis-rs's response timeout (as
    /// `RedisBackend::new` documents; otherwise redis-rs's defaults, `TCP_NODELAY` off).
    RedleaseUntimed,
    Rslock,
    Raw,
    /// Raw redis-rs a second time in the round (its own keys): the control.
    RawAgain,
}

/// `tasks` tasks cycling their own keys with `client` for `window`.
async fn concurrent_round(env: &Env, client: Client, tasks: usize, window: Duration) -> Throughput {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::cpu::{ServerSample, process_cpu};

    let url = env.servers[0].url();
    let redis_client = redis::Client::open(url.as_str()).expect("url");
    let conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut stats = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let plain = match client {
        Client::RedleaseUntimed => {
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            redis_client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("connect")
        }
        _ => conn.clone(),
    };
    let backend =
        RedisBackend::new(plain).with_native_commands(!matches!(client, Client::RedleaseScripts));
    let locker = Locker::new(backend);
    let own = match client {
        Client::RedleaseConnect => Some(Locker::new(
            redlease::redis::connect(&url).await.expect("connect"),
        )),
        _ => None,
    };
    let mut manager = rslock::LockManager::from_clients(vec![redis_client.clone()]);
    manager.set_retry(1, Duration::from_millis(1));
    let manager = Arc::new(manager);
    let script = redis::Script::new(RAW_RELEASE);
    let cycles = Arc::new(AtomicU64::new(0));
    let warm = Duration::from_millis(200).min(window);
    let start = tokio::time::Instant::now();
    let (measure_from, end) = (start + warm, start + warm + window);
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let (locker, own) = (locker.clone(), own.clone());
        let (manager, script) = (Arc::clone(&manager), script.clone());
        let (cycles, mut conn) = (Arc::clone(&cycles), conn.clone());
        set.spawn(async move {
            let mut n = 0u64;
            loop {
                let now = tokio::time::Instant::now();
                if now >= end {
                    break;
                }
                match client {
                    Client::Redlease | Client::RedleaseScripts | Client::RedleaseUntimed => {
                        let key = format!("bench:c:redlease:{t}");
                        let lock = locker
                            .obtain(key, TTL, LockOptions::new())
                            .await
                            .expect("redlease obtain");
                        lock.release().await.expect("redlease release");
                    }
                    Client::RedleaseConnect => {
                        let key = format!("bench:c:redlease:{t}");
                        let own = own.as_ref().expect("the connect client's locker");
                        let lock = own
                            .obtain(key, TTL, LockOptions::new())
                            .await
                            .expect("redlease obtain");
                        lock.release().await.expect("redlease release");
                    }
                    Client::Rslock => {
                        let key = format!("bench:c:rslock:{t}");
                        let l = manager.lock(key.as_str(), TTL).await.expect("rslock lock");
                        manager.unlock(&l).await;
                    }
                    Client::Raw => {
                        raw_cycle(&mut conn, &script, &format!("bench:c:raw:{t}"), n).await;
                    }
                    Client::RawAgain => {
                        raw_cycle(&mut conn, &script, &format!("bench:c:raw2:{t}"), n).await;
                    }
                }
                n += 1;
                if now >= measure_from {
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    tokio::time::sleep_until(measure_from).await;
    let server_before = ServerSample::read(&mut stats).await;
    let cpu_before = process_cpu().unwrap_or(0.0);
    tokio::time::sleep_until(end).await;
    let cpu = process_cpu().unwrap_or(0.0) - cpu_before;
    let server_after = ServerSample::read(&mut stats).await;
    while let Some(joined) = set.join_next().await {
        joined.expect("a cycling task");
    }
    let n = cycles.load(Ordering::Relaxed).max(1) as f64;
    Throughput {
        cycles_per_sec: n / window.as_secs_f64(),
        client_cpu_us: cpu * 1e6 / n,
        redis_cpu_us: (server_after.cpu - server_before.cpu) * 1e6 / n,
    }
}

/// `rounds` interleaved concurrent rounds.
pub(crate) async fn concurrent(
    env: &Env,
    tasks: usize,
    window: Duration,
    rounds: usize,
) -> Concurrent {
    let mut out = Concurrent {
        tasks,
        window,
        rounds: Vec::new(),
    };
    // The report's column order; each round starts one client further along it, so every
    // client runs in every position of a round as often as the others (in an experiment,
    // raw redis-rs run second in each round did 1.07× the same client run first).
    const ORDER: [Client; 7] = [
        Client::Redlease,
        Client::Rslock,
        Client::Raw,
        Client::RedleaseScripts,
        Client::RedleaseConnect,
        Client::RedleaseUntimed,
        Client::RawAgain,
    ];
    for round in 0..rounds {
        let mut results = [Throughput::default(); 7];
        for step in 0..ORDER.len() {
            let slot = (round + step) % ORDER.len();
            results[slot] = concurrent_round(env, ORDER[slot], tasks, window).await;
        }
        out.rounds.push(results);
    }
    out
}

/// The report's section for the concurrent rounds.
pub(crate) fn render_concurrent(c: &Concurrent) -> String {
    let mut s = format!(
        "\n## {} concurrent tasks: redlease vs rslock vs raw redis-rs\n\n\
         Each task cycles its own key (obtain + release, no retries) on one multiplexed \
         connection per client, {} ms per client per round (after a 200 ms warm-up), clients \
         interleaved round by round, each round starting one client later (every client \
         takes every place in a round in turn). Raw redis-rs runs twice in each round: its \
         second run is a control, the spread between two runs of one client. CPU per cycle: this process (`/proc/self/task/*/schedstat`) \
         and the server (`INFO` `used_cpu_*`).\n\n\
         | round | client | cycles/s | vs raw | vs rslock | client CPU µs/cycle | vs raw | Redis CPU µs/cycle |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        c.tasks,
        c.window.as_millis()
    );
    for (i, [a, b, r, d, e, f, g]) in c.rounds.iter().enumerate() {
        for (name, t) in [
            ("redlease", a),
            ("rslock 0.10", b),
            ("raw redis-rs", r),
            ("redlease, scripts only", d),
            ("redlease over `connect`", e),
            ("redlease, no response timeout", f),
            ("raw redis-rs again (control)", g),
        ] {
            s.push_str(&format!(
                "| {} | {} | {:.0} | {:.2}× | {:.2}× | {:.2} | {:.2}× | {:.2} |\n",
                i + 1,
                name,
                t.cycles_per_sec,
                t.cycles_per_sec / r.cycles_per_sec.max(f64::MIN_POSITIVE),
                t.cycles_per_sec / b.cycles_per_sec.max(f64::MIN_POSITIVE),
                t.client_cpu_us,
                t.client_cpu_us / r.client_cpu_us.max(f64::MIN_POSITIVE),
                t.redis_cpu_us
            ));
        }
    }
    s
}

/// One contended round: `tasks` tasks of this process on **one** key, each looping obtain
/// (waiting, retry every [`CONTENDED_RETRY`]) and release at once, for `window`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Contended {
    pub(crate) acquisitions_per_sec: f64,
    /// The server's CPU per acquisition.
    pub(crate) redis_cpu_us: f64,
    /// The fewest and most acquisitions of one task in the window.
    pub(crate) per_task: (u64, u64),
    /// The server's commands per acquisition (`INFO commandstats`, a script's inner
    /// commands included), the most frequent first.
    pub(crate) commands: Vec<(String, f64)>,
}

/// Both clients retry a held lock after this long (rslock: a random delay below it, its own
/// rule; redlease: its jittered linear strategy, and the release notice before it).
const CONTENDED_RETRY: Duration = Duration::from_millis(10);

async fn contended_round(env: &Env, redlease: bool, tasks: usize, window: Duration) -> Contended {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::cpu::ServerSample;
    use redlease::RetryStrategy;
    use redlease::redis::ReleaseNotices;

    let url = env.servers[0].url();
    let redis_client = redis::Client::open(url.as_str()).expect("url");
    let conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut stats = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // As `redlease::redis::connect` sets a backend up: one release-notice subscriber.
    let backend = RedisBackend::new(conn.clone())
        .with_release_notices(ReleaseNotices::new(redis_client.clone()));
    let locker = Locker::new(backend);
    let options = LockOptions::new()
        .retry(RetryStrategy::linear(CONTENDED_RETRY).expect("retry"))
        .wait(Duration::from_secs(30));
    let mut manager = rslock::LockManager::from_clients(vec![redis_client.clone()]);
    manager.set_retry(3, CONTENDED_RETRY);
    let manager = Arc::new(manager);
    let key = if redlease {
        "bench:contended:redlease"
    } else {
        "bench:contended:rslock"
    };
    let total = Arc::new(AtomicU64::new(0));
    let warm = Duration::from_millis(300).min(window);
    let start = tokio::time::Instant::now();
    let (measure_from, end) = (start + warm, start + warm + window);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (locker, manager, options) = (locker.clone(), Arc::clone(&manager), options.clone());
        let total = Arc::clone(&total);
        set.spawn(async move {
            let mut mine = 0u64;
            loop {
                let now = tokio::time::Instant::now();
                if now >= end {
                    break;
                }
                if redlease {
                    let lock = locker
                        .obtain(key, TTL, options.clone())
                        .await
                        .expect("redlease obtain");
                    lock.release().await.expect("redlease release");
                } else {
                    let l = manager
                        .acquire_no_guard(key, TTL)
                        .await
                        .expect("rslock acquire");
                    manager.unlock(&l).await;
                }
                if now >= measure_from && tokio::time::Instant::now() < end {
                    mine += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                }
            }
            mine
        });
    }
    tokio::time::sleep_until(measure_from).await;
    let server_before = ServerSample::read(&mut stats).await;
    tokio::time::sleep_until(end).await;
    let server_after = ServerSample::read(&mut stats).await;
    let mut per_task = (u64::MAX, 0);
    while let Some(joined) = set.join_next().await {
        let mine = joined.expect("a contending task");
        per_task = (per_task.0.min(mine), per_task.1.max(mine));
    }
    let n = total.load(Ordering::Relaxed).max(1) as f64;
    let mut commands: Vec<(String, f64)> = server_after
        .calls
        .iter()
        .map(|(name, after)| {
            let before = server_before.calls.get(name).copied().unwrap_or(0);
            (name.clone(), after.saturating_sub(before) as f64 / n)
        })
        .filter(|(name, per)| *per >= 0.05 && name != "info")
        .collect();

    commands.sort_by(|a, b| b.1.total_cmp(&a.1));
    Contended {
        acquisitions_per_sec: n / window.as_secs_f64(),
        redis_cpu_us: (server_after.cpu - server_before.cpu) * 1e6 / n,
        per_task,
        commands,
    }
}

/// `rounds` interleaved contended rounds (redlease, rslock, redlease, ...).
pub(crate) async fn contended(
    env: &Env,
    tasks: usize,
    window: Duration,
    rounds: usize,
) -> Vec<[Contended; 2]> {
    let mut out = Vec::new();
    for _ in 0..rounds {
        let a = contended_round(env, true, tasks, window).await;
        let b = contended_round(env, false, tasks, window).await;
        out.push([a, b]);
    }
    out
}

/// The report's section for the contended rounds.
pub(crate) fn render_contended(
    rounds: &[[Contended; 2]],
    tasks: usize,
    window: Duration,
) -> String {
    let mut s = format!(
        "\n## {tasks} tasks contending for one key: redlease vs rslock\n\n\
         One process, one key, one multiplexed connection per client. Each task loops: obtain \
         (waiting; retry after {} ms: redlease's linear strategy with its release notices, \
         rslock's `acquire_no_guard` with `set_retry(3, {} ms)`), release at once. {} ms per \
         client per round after a 300 ms warm-up, clients interleaved. Redis CPU per \
         acquisition from `INFO` `used_cpu_*`.\n\n\
         | round | client | acquisitions/s | vs rslock | Redis CPU µs/acquisition | per task min–max | commands/acquisition |\n\
         |---|---|---:|---:|---:|---|---|\n",
        CONTENDED_RETRY.as_millis(),
        CONTENDED_RETRY.as_millis(),
        window.as_millis()
    );
    for (i, [a, b]) in rounds.iter().enumerate() {
        for (name, t) in [("redlease", a), ("rslock 0.10", b)] {
            let commands: Vec<String> = t
                .commands
                .iter()
                .map(|(name, per)| format!("{name} {per:.2}"))
                .collect();
            s.push_str(&format!(
                "| {} | {} | {:.0} | {:.2}× | {:.1} | {}–{} | {} |\n",
                i + 1,
                name,
                t.acquisitions_per_sec,
                t.acquisitions_per_sec / b.acquisitions_per_sec.max(f64::MIN_POSITIVE),
                t.redis_cpu_us,
                t.per_task.0,
                t.per_task.1,
                commands.join(", ")
            ));
        }
    }
    s
}
