//! The order of late requests at a node, against real Redis servers (issue 16).
//!
//! A round returns as soon as a quorum decided it, so a slow node's request may still be
//! running when the next round of the same lease and owner starts. Such a request may take a
//! second round trip at the node: `EVALSHA` answered `NOSCRIPT` (here: a `SCRIPT FLUSH` on
//! the slow node) is followed by `EVAL`. These tests put one node behind the kit's latency
//! proxy, flush its scripts between rounds, and re-acquire or release with the same owner at
//! once. The shipped rule (turns per node, lease and owner, and every request sent) must
//! keep the node's state right; each test also runs a negative control (`LateRequests`) that
//! reproduces a reverted design and must show the race it had.
//!
//! Nothing here sleeps to synchronise: `RedlockBackend::settled` says when every late request
//! has been answered or abandoned, and a read through the slow node's own connection is
//! answered after everything sent before it on that connection.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::{AcquireOutcome, LeaseBackend, LeaseSpec, ReleaseOutcome};
use lease_redis::RedisBackend;
use lease_redlock::{LateRequests, RedlockBackend, RedlockConfig};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;

const KEY: &str = "ordered";
/// Long enough that no key expires during a test: a key that is gone was deleted.
const TTL_MS: u64 = 30_000;

struct Setup {
    _servers: Vec<RedisServer>,
    proxy: FaultProxy,
    b: RedlockBackend<MNode>,
    /// Node 2's own connection (through the proxy): reads on it come after its requests.
    slow: Conn,
    /// A direct connection to node 2's server, for SCRIPT FLUSH and staging.
    slow_raw: Conn,
    spec: Arc<LeaseSpec>,
}

/// Three servers; nodes 0 and 1 direct, node 2 behind a proxy with `latency` each way.
async fn setup(latency: Duration, timeout: Duration, late: LateRequests) -> Setup {
    let servers = start(3).await;
    let proxy = FaultProxy::start(servers[2].addr()).await.expect("proxy");
    let mut nodes = Vec::new();
    for s in &servers[..2] {
        nodes.push(node(s.addr().to_string(), &s.url()).await);
    }
    nodes.push(node(proxy.addr().to_string(), &servers[2].url_via(proxy.addr())).await);
    let slow = node_conn(&nodes[2]);
    let config = RedlockConfig::new()
        .with_operation_timeout(timeout)
        .with_late_requests_unsafe(late);
    let b = RedlockBackend::new(nodes, config).expect("valid node set");
    let slow_raw = conn(&servers[2].url()).await;
    let spec = fenced_lock(KEY);
    // Load every script on every node, then slow node 2 down.
    let warm = fenced_lock("warm");
    must_complete("warm-up", async {
        b.acquire(&acq(&warm, "w", TTL_MS))
            .await
            .expect("warm acquire");
        b.release(&release(&warm, "w")).await.expect("warm release");
        b.settled().await;
    })
    .await;
    proxy.set_mode(Mode::Latency(latency));
    Setup {
        _servers: servers,
        proxy,
        b,
        slow,
        slow_raw,
        spec,
    }
}

async fn script_flush(conn: &mut Conn) {
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .expect("SCRIPT FLUSH");
}

/// Loads one lease script into node 2's cache by running it once on another key, directly.
enum Load {
    Acquire,
    Release,
}

async fn load(conn: &Conn, which: Load) {
    let direct = RedisBackend::new(conn.clone());
    let other = fenced_lock("loader");
    match which {
        Load::Acquire => {
            direct
                .acquire(&acq(&other, "loader", TTL_MS))
                .await
                .expect("load acquire");
            del(&mut conn.clone(), "loader").await;
        }
        Load::Release => {
            direct
                .release(&release(&other, "loader"))
                .await
                .expect("load release");
        }
    }
}

/// Waits until every late request of `b` is over, then reads `key` through node 2's own
/// connection (answered after every request written on it before).
async fn slow_value(s: &mut Setup, key: &str) -> Option<String> {
    must_complete("late requests settle", s.b.settled()).await;
    must_complete("read through the slow node", get(&mut s.slow, key)).await
}

/// Acquire with owner `a` (returns at the fast quorum; node 2's acquire needs `EVAL` after
/// `NOSCRIPT`), then release at once. Returns node 2's key afterwards and its fence counter.
async fn late_grant_then_release(late: LateRequests) -> (Option<String>, Option<String>) {
    let mut s = setup(Duration::from_millis(150), Duration::from_secs(5), late).await;
    script_flush(&mut s.slow_raw).await;
    load(&s.slow_raw, Load::Release).await;
    let got = must_complete("acquire", s.b.acquire(&acq(&s.spec, "a", TTL_MS)))
        .await
        .expect("acquire at the fast quorum");
    assert!(matches!(
        got,
        AcquireOutcome::Acquired { token: Some(_), .. }
    ));
    let rel = must_complete("release", s.b.release(&release(&s.spec, "a")))
        .await
        .expect("release at the fast quorum");
    assert_eq!(rel, ReleaseOutcome::Released);
    let key = slow_value(&mut s, KEY).await;
    let fence = get(&mut s.slow, &format!("{KEY}:fence")).await;
    drop(s.proxy);
    (key, fence)
}

#[tokio::test]
async fn a_late_grant_after_a_script_flush_is_released() {
    let (key, fence) = late_grant_then_release(LateRequests::Ordered).await;
    assert!(
        fence.is_some(),
        "node 2's late acquire ran (its counter moved)"
    );
    assert_eq!(key, None, "the release ran after the late grant on node 2");
}

#[tokio::test]
async fn control_without_turns_a_late_grant_outlives_the_release() {
    let (key, fence) = late_grant_then_release(LateRequests::UnorderedUnsafe).await;
    assert!(fence.is_some(), "node 2's late acquire ran");
    assert_eq!(
        key.as_deref(),
        Some("a"),
        "the naive early return lets the release overtake the acquire's EVAL"
    );
}

/// Owner `a` holds the lease on every node; release (node 2's release needs `EVAL` after
/// `NOSCRIPT`) and re-acquire with the same owner at once. Returns node 2's key afterwards.
async fn late_release_then_reacquire(late: LateRequests) -> Option<String> {
    let mut s = setup(Duration::from_millis(150), Duration::from_secs(5), late).await;
    must_complete("first acquire", async {
        s.b.acquire(&acq(&s.spec, "a", TTL_MS))
            .await
            .expect("acquire");
        s.b.settled().await;
    })
    .await;
    assert_eq!(
        get(&mut s.slow_raw, KEY).await.as_deref(),
        Some("a"),
        "held on node 2 too"
    );
    script_flush(&mut s.slow_raw).await;
    load(&s.slow_raw, Load::Acquire).await;
    let rel = must_complete("release", s.b.release(&release(&s.spec, "a")))
        .await
        .expect("release at the fast quorum");
    assert_eq!(rel, ReleaseOutcome::Released);
    let got = must_complete("re-acquire", s.b.acquire(&acq(&s.spec, "a", TTL_MS)))
        .await
        .expect("re-acquire at the fast quorum");
    assert!(matches!(
        got,
        AcquireOutcome::Acquired { token: Some(_), .. }
    ));
    slow_value(&mut s, KEY).await
}

#[tokio::test]
async fn a_late_release_after_a_script_flush_never_deletes_the_next_grant() {
    assert_eq!(
        late_release_then_reacquire(LateRequests::Ordered)
            .await
            .as_deref(),
        Some("a"),
        "node 2 holds the new term's key"
    );
}

#[tokio::test]
async fn control_without_turns_a_late_release_deletes_the_next_grant() {
    assert_eq!(
        late_release_then_reacquire(LateRequests::UnorderedUnsafe).await,
        None,
        "the naive early return lets the re-acquire overtake the release's EVAL"
    );
}

/// Node 2 is slower than the operation timeout (300 ms each way, 400 ms timeout). Acquire,
/// renew and release at once: on node 2 the renew waits for the acquire's turn (abandoned
/// at 400 ms). The shipped rule skips the renew then (its round has its verdict and the
/// release waits behind it) and sends the release; the reverted turns sent the renew (until
/// 800 ms) and dropped the release unsent at its round's deadline (about 400 ms).
async fn release_behind_an_abandoned_request(late: LateRequests) -> Option<String> {
    let timeout = Duration::from_millis(400);
    let mut s = setup(Duration::from_millis(300), timeout, late).await;
    let got = must_complete("acquire", s.b.acquire(&acq(&s.spec, "a", TTL_MS)))
        .await
        .expect("acquire at the fast quorum");
    assert!(matches!(got, AcquireOutcome::Acquired { .. }));
    let renewed = must_complete("renew", s.b.renew(&renew(&s.spec, "a", TTL_MS)))
        .await
        .expect("renew at the fast quorum");
    assert_eq!(renewed, lease_core::RenewOutcome::Renewed);
    let rel = must_complete("release", s.b.release(&release(&s.spec, "a")))
        .await
        .expect("release at the fast quorum");
    assert_eq!(rel, ReleaseOutcome::Released);
    slow_value(&mut s, KEY).await
}

#[tokio::test]
async fn a_release_behind_a_slow_turn_is_still_sent() {
    assert_eq!(
        release_behind_an_abandoned_request(LateRequests::Ordered).await,
        None,
        "the release was sent after the abandoned acquire and deleted its key"
    );
}

#[tokio::test]
async fn control_turns_that_drop_at_the_deadline_leave_the_key_behind() {
    assert_eq!(
        release_behind_an_abandoned_request(LateRequests::DroppedAtDeadlineUnsafe)
            .await
            .as_deref(),
        Some("a"),
        "the release was dropped unsent while it waited for its turn"
    );
}

/// Rapid same-owner cycles over a slow node whose scripts are flushed every few cycles:
/// every acquisition is granted with a greater token, every release is a quorum release,
/// and at the end no node holds anything.
#[tokio::test]
async fn rapid_same_owner_cycles_with_script_flushes_leave_nothing_behind() {
    let mut s = setup(
        Duration::from_millis(20),
        Duration::from_secs(2),
        LateRequests::Ordered,
    )
    .await;
    let mut last = None;
    for i in 0..40 {
        if i % 5 == 0 {
            script_flush(&mut s.slow_raw).await;
        }
        let got = must_complete("acquire", s.b.acquire(&acq(&s.spec, "a", TTL_MS)))
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: acquire failed: {e}"));
        let t = token_of(&got);
        assert!(last < Some(t), "cycle {i}: token {t:?} after {last:?}");
        last = Some(t);
        let rel = must_complete("release", s.b.release(&release(&s.spec, "a")))
            .await
            .unwrap_or_else(|e| panic!("cycle {i}: release failed: {e}"));
        assert_eq!(rel, ReleaseOutcome::Released, "cycle {i}");
    }
    assert_eq!(
        slow_value(&mut s, KEY).await,
        None,
        "nothing left on node 2"
    );
    assert!(s.b.requests_running() == 0);
}
