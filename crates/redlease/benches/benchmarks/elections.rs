//! Issue 31: many elections in one process. One `ElectionGroup` of `n` names (TTL 3 s,
//! renewed every 1 s, one member: it leads them all, its roster read every 1.5 s included)
//! held for a while, against the raw loop of `many.rs` (one pipeline of `PEXPIRE`s per second
//! for the same number of keys); the two alternate on the same server.
//!
//! Reported per side as for many locks: client CPU per election-second (this process's CPU
//! over the hold), Redis CPU per election-second, client requests per second, renewals per
//! election-second, Redis commands per second, and for redlease the resident memory each
//! election adds.

use std::time::Duration;

use redlease::ElectionGroup;
use redlease::redis::RedisBackend;

use crate::cpu::{ServerSample, process_cpu, resident_bytes};
use crate::many::{Side, raw_hold, side};
use crate::setup::{Env, connect};

const TTL: Duration = Duration::from_secs(3);
const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default)]
pub(crate) struct Elections {
    pub(crate) elections: usize,
    pub(crate) hold: Duration,
    pub(crate) redlease: Vec<Side>,
    pub(crate) raw: Vec<Side>,
    pub(crate) rss_per_election: Vec<f64>,
}

/// redlease: one group leading `n` elections, held for `hold`.
async fn redlease_hold(env: &Env, n: usize, hold: Duration, round: usize) -> (Side, f64) {
    let server = &env.servers[0];
    let backend = RedisBackend::new(connect(server).await.expect("connect"));
    let mut stats = connect(server).await.expect("connect");
    let rss_before = resident_bytes().unwrap_or(0);
    let names: Vec<String> = (0..n).map(|i| format!("bench:elections:{i}")).collect();
    let group = ElectionGroup::builder(backend, format!("bench-{round}"), names, "bench")
        .ttl(TTL)
        .renew_interval(INTERVAL)
        .start()
        .expect("a valid group");
    let mut owned = group.subscribe();
    tokio::time::timeout(Duration::from_secs(30), owned.wait_for(|o| o.len() == n))
        .await
        .expect("every election led in time")
        .expect("the group runs");
    // Let the first renewals settle into their batches.
    tokio::time::sleep(INTERVAL * 2).await;
    let rss_held = resident_bytes().unwrap_or(0);
    let before = ServerSample::read(&mut stats).await;
    let cpu_before = process_cpu().unwrap_or(0.0);
    tokio::time::sleep(hold).await;
    let cpu = process_cpu().unwrap_or(0.0) - cpu_before;
    let after = ServerSample::read(&mut stats).await;
    assert_eq!(group.owned().len(), n, "every election led throughout");
    tokio::time::timeout(Duration::from_secs(30), group.shutdown())
        .await
        .expect("shutdown in time");
    let rss = rss_held.saturating_sub(rss_before) as f64 / n as f64;
    (
        side(n, hold, cpu, &before, &after, &["evalsha", "eval"]),
        rss,
    )
}

/// `rounds` alternating holds of each side.
pub(crate) async fn measure(env: &Env, n: usize, hold: Duration, rounds: usize) -> Elections {
    let mut e = Elections {
        elections: n,
        hold,
        ..Elections::default()
    };
    for round in 0..rounds {
        let (side, rss) = redlease_hold(env, n, hold, round).await;
        e.redlease.push(side);
        e.rss_per_election.push(rss);
        e.raw.push(raw_hold(env, n, hold).await);
    }
    e
}

/// The report's section.
pub(crate) fn render(m: &Elections) -> String {
    let mut s = format!(
        "\n## Many elections in one process: {} elections (one `ElectionGroup`), TTL {} s, renewed every {} s, held {} s\n\n\
         Alternating holds on server 0 (redlease, raw, ...). Raw: one pipeline of `PEXPIRE`s \
         per second for the same number of keys. RSS: anonymous resident memory added (the \
         program's code pages, which do not grow with the count, left out).\n\n\
         | round | side | client CPU µs per election-second | vs raw | Redis CPU µs per election-second | \
         client requests/s | renewals per election-second | Redis commands/s | RSS per election |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        m.elections,
        TTL.as_secs(),
        INTERVAL.as_secs(),
        m.hold.as_secs()
    );
    for (i, (a, b)) in m.redlease.iter().zip(&m.raw).enumerate() {
        let ratio =
            a.client_cpu_us_per_lock_sec / b.client_cpu_us_per_lock_sec.max(f64::MIN_POSITIVE);
        let rss = m.rss_per_election.get(i).copied().unwrap_or(0.0);
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
