//! Issue 16, item 3: thousands of auto-renewed locks in one process. `n` locks (TTL 3 s,
//! renewed every 1 s) held for a while through one `Locker`, against a raw loop that keeps the
//! same number of keys alive with one pipeline of `PEXPIRE`s per second; the two alternate
//! (redlease, raw, redlease, raw) on the same server and connection settings.
//!
//! Reported per side: client CPU per held lock-second (this process's CPU over the hold,
//! from `/proc/self/task/*/schedstat`), Redis CPU per lock-second, the requests the client
//! sent per second (script calls or `PEXPIRE`s), the renewals per lock per second (`PEXPIRE`
//! calls at the server, inside scripts or not), and, for redlease, the resident memory each
//! held lock adds.

use std::time::Duration;

use redlease::redis::RedisBackend;
use redlease::{LockOptions, Locker};

use crate::cpu::{ServerSample, process_cpu, resident_bytes};
use crate::setup::{Env, connect};

const TTL: Duration = Duration::from_secs(3);
const INTERVAL: Duration = Duration::from_secs(1);

/// One side's hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Side {
    pub(crate) client_cpu_us_per_lock_sec: f64,
    pub(crate) redis_cpu_us_per_lock_sec: f64,
    pub(crate) requests_per_sec: f64,
    pub(crate) renewals_per_lock_sec: f64,
    pub(crate) commands_per_sec: f64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Many {
    pub(crate) locks: usize,
    pub(crate) hold: Duration,
    pub(crate) redlease: Vec<Side>,
    pub(crate) raw: Vec<Side>,
    /// Resident bytes per held lock (RSS with the locks held minus before obtaining them).
    pub(crate) rss_per_lock: Vec<f64>,
}

pub(crate) fn side(
    locks: usize,
    hold: Duration,
    cpu: f64,
    before: &ServerSample,
    after: &ServerSample,
    request_names: &[&str],
) -> Side {
    let lock_secs = locks as f64 * hold.as_secs_f64();
    Side {
        client_cpu_us_per_lock_sec: cpu * 1e6 / lock_secs,
        redis_cpu_us_per_lock_sec: (after.cpu - before.cpu) * 1e6 / lock_secs,
        requests_per_sec: after.calls_since(before, request_names) as f64 / hold.as_secs_f64(),
        renewals_per_lock_sec: after.calls_since(before, &["pexpire"]) as f64 / lock_secs,
        commands_per_sec: after.all_calls_since(before) as f64 / hold.as_secs_f64(),
    }
}

/// redlease: `locks` auto-renewed locks held for `hold`.
async fn redlease_hold(env: &Env, locks: usize, hold: Duration) -> (Side, f64) {
    let server = &env.servers[0];
    let locker = Locker::new(RedisBackend::new(connect(server).await.expect("connect")));
    let mut stats = connect(server).await.expect("connect");
    let rss_before = resident_bytes().unwrap_or(0);
    let mut held = Vec::with_capacity(locks);
    for i in 0..locks {
        let lock = locker
            .obtain(
                format!("bench:many:{i}"),
                TTL,
                LockOptions::new().auto_renew(INTERVAL),
            )
            .await
            .expect("obtain a free lock");
        held.push(lock);
    }
    // Let the renewals that follow the obtains settle into their batches.
    tokio::time::sleep(INTERVAL * 2).await;
    let rss_held = resident_bytes().unwrap_or(0);
    let before = ServerSample::read(&mut stats).await;
    let cpu_before = process_cpu().unwrap_or(0.0);
    tokio::time::sleep(hold).await;
    let cpu = process_cpu().unwrap_or(0.0) - cpu_before;
    let after = ServerSample::read(&mut stats).await;
    assert!(held.iter().all(|l| l.held()), "every lock held throughout");
    for lock in held {
        lock.release().await.expect("release");
    }
    let rss = rss_held.saturating_sub(rss_before) as f64 / locks as f64;
    (
        side(locks, hold, cpu, &before, &after, &["evalsha", "eval"]),
        rss,
    )
}

/// The raw loop: `locks` keys set with `PX 3000`, then one pipeline of `PEXPIRE key 3000` for
/// every key each second, for `hold`.
pub(crate) async fn raw_hold(env: &Env, locks: usize, hold: Duration) -> Side {
    let server = &env.servers[0];
    let mut conn = connect(server).await.expect("connect");
    let mut stats = connect(server).await.expect("connect");
    let keys: Vec<String> = (0..locks).map(|i| format!("bench:rawmany:{i}")).collect();
    let mut set = redis::pipe();
    for k in &keys {
        set.cmd("SET")
            .arg(k)
            .arg("raw")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .ignore();
    }
    let () = set.query_async(&mut conn).await.expect("SET the keys");
    let before = ServerSample::read(&mut stats).await;
    let cpu_before = process_cpu().unwrap_or(0.0);
    let start = tokio::time::Instant::now();
    // The first pipeline at once and then one per interval: one renewal per key per interval
    // over the hold, as redlease's (its first tick one interval in ran 0.9 per lock-second,
    // which charged raw's CPU to 10 % fewer renewals).
    let mut tick = tokio::time::interval_at(start, INTERVAL);
    while start.elapsed() < hold {
        tick.tick().await;
        if start.elapsed() > hold {
            break;
        }
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("PEXPIRE").arg(k).arg(TTL.as_millis() as u64);
        }
        let renewed: Vec<i64> = pipe.query_async(&mut conn).await.expect("PEXPIRE pipeline");
        assert!(renewed.iter().all(|&r| r == 1), "every key alive");
    }
    let cpu = process_cpu().unwrap_or(0.0) - cpu_before;
    let after = ServerSample::read(&mut stats).await;
    let mut del = redis::pipe();
    for k in &keys {
        del.cmd("DEL").arg(k).ignore();
    }
    let () = del.query_async(&mut conn).await.expect("DEL the keys");
    side(locks, hold, cpu, &before, &after, &["pexpire"])
}

/// `rounds` alternating holds of each side.
pub(crate) async fn measure(env: &Env, locks: usize, hold: Duration, rounds: usize) -> Many {
    let mut many = Many {
        locks,
        hold,
        ..Many::default()
    };
    for _ in 0..rounds {
        let (side, rss) = redlease_hold(env, locks, hold).await;
        many.redlease.push(side);
        many.rss_per_lock.push(rss);
        many.raw.push(raw_hold(env, locks, hold).await);
    }
    many
}

/// The report's section.
pub(crate) fn render(m: &Many) -> String {
    let mut s = format!(
        "\n## Many auto-renewed locks: {} locks, TTL {} s, renewed every {} s, held {} s\n\n\
         Alternating holds on server 0 (redlease, raw, ...). Raw: one pipeline of `PEXPIRE`s \
         per second for the same number of keys. RSS: anonymous resident memory added (the \
         program's code pages, which do not grow with the count, left out).\n\n\
         | round | side | client CPU µs per lock-second | vs raw | Redis CPU µs per lock-second | \
         client requests/s | renewals per lock-second | Redis commands/s | RSS per held lock |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        m.locks,
        TTL.as_secs(),
        INTERVAL.as_secs(),
        m.hold.as_secs()
    );
    for (i, (a, b)) in m.redlease.iter().zip(&m.raw).enumerate() {
        let ratio =
            a.client_cpu_us_per_lock_sec / b.client_cpu_us_per_lock_sec.max(f64::MIN_POSITIVE);
        let rss = m.rss_per_lock.get(i).copied().unwrap_or(0.0);
        s.push_str(&format!(
            "| {} | redlease | {:.2} | {:.2}× | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} B |\n",
            i + 1,
            a.client_cpu_us_per_lock_sec,
            ratio,
            a.redis_cpu_us_per_lock_sec,
            a.requests_per_sec,
            a.renewals_per_lock_sec,
            a.commands_per_sec,
            rss
        ));
        s.push_str(&format!(
            "| {} | raw `PEXPIRE` pipeline | {:.2} | 1.00× | {:.2} | {:.0} | {:.2} | {:.0} | — |\n",
            i + 1,
            b.client_cpu_us_per_lock_sec,
            b.redis_cpu_us_per_lock_sec,
            b.requests_per_sec,
            b.renewals_per_lock_sec,
            b.commands_per_sec
        ));
    }
    s
}
