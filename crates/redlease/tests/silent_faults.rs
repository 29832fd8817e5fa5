//! Faults that last long and say nothing, and callers that drop futures (issue 26).
//!
//! - A Redis port blackholed in the kernel (iptables DROP both ways, [`Blackhole`]) for
//!   [`blackhole_len`] (15 s by default, long enough for TCP's retransmission backoff to
//!   pass 10 s, which the negative controls show; `REDLEASE_BLACKHOLE_SECS` for the longer
//!   runs of `docs/testing.md`'s recovery table): after the heal an elector is leader again within
//!   TTL + acquire interval + 1 s, and a lock waiter obtains within its retry interval + the
//!   connect timeout (1 s) + 0.5 s for its own round trips.
//!   The negative control runs the same fault on redis-rs's `ConnectionManager` (how
//!   `redis::connect` connected before): no leader within that bound, because the socket sits
//!   in TCP's retransmission backoff.
//! - The same for a Redlock election with two of its three nodes blackholed, and for a Redis
//!   Cluster election whose slot's node is blackholed (with a plain `ClusterConnection` as
//!   the negative control).
//! - Sentinel: the primary blackholed (not killed) and a replica promoted at a new address: a
//!   leader within the same bound after the promotion.
//! - Dropping `Elector::run` while leading ends the term: the work's token is cancelled and
//!   its task stops, watchers see `Stopped`, and the lease is released (another instance is
//!   elected at once, not after the TTL).
//! - With release notices live, a lock obtain gives up on its strategy's schedule, not at the
//!   holder's expiry.
//!
//! The blackhole tests need root (iptables); every rule is removed on drop, also when a test
//! fails, and rules left by a killed test process are removed by the next.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::EVENTUALLY;
use lease_testkit::{Blackhole, RedisCluster, RedisServer};
use redlease::redis::RedisBackend;
use redlease::{
    CancellationToken, ElectionConfig, Elector, LeaseBackend, LockError, LockOptions, Locker,
    RetryStrategy, Role,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How long the blackholes last.
fn blackhole_len() -> Duration {
    let secs = std::env::var("REDLEASE_BLACKHOLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    Duration::from_secs(secs)
}

const TTL: Duration = Duration::from_secs(2);

fn config(name: &str, id: &str) -> ElectionConfig {
    ElectionConfig::builder(name, id)
        .ttl(TTL)
        .build()
        .expect("valid config")
}

/// The recovery bound: TTL + acquire interval + 1 s.
fn election_bound() -> Duration {
    let c = config("x", "x");
    c.ttl().get() + c.acquire_interval() + Duration::from_secs(1)
}

/// Two electors on `backends`, holding until the returned token is cancelled.
fn start_electors<B: LeaseBackend + Clone + 'static>(
    backends: [B; 2],
    name: &str,
) -> (
    Vec<Elector<B>>,
    CancellationToken,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let shutdown = CancellationToken::new();
    let mut electors = Vec::new();
    let mut runs = Vec::new();
    for (i, b) in backends.into_iter().enumerate() {
        let e = Elector::new(b, config(name, &format!("i{i}")));
        let (e2, s) = (e.clone(), shutdown.clone());
        runs.push(tokio::spawn(async move {
            let _ = e2.hold(s).await;
        }));
        electors.push(e);
    }
    (electors, shutdown, runs)
}

fn any_leader<B: LeaseBackend>(electors: &[Elector<B>]) -> bool {
    electors.iter().any(|e| e.token().is_some())
}

/// Waits (bounded by `within`) until some elector leads; how long it took.
async fn until_leader<B: LeaseBackend>(
    electors: &[Elector<B>],
    within: Duration,
) -> Option<Duration> {
    until_electors(electors, within, any_leader).await
}

/// Waits (bounded by `within`) until `pred` holds of the electors, woken by their state
/// changes; how long it took.
async fn until_electors<B: LeaseBackend>(
    electors: &[Elector<B>],
    within: Duration,
    pred: impl Fn(&[Elector<B>]) -> bool,
) -> Option<Duration> {
    let started = Instant::now();
    let mut watches: Vec<_> = electors.iter().map(|e| e.subscribe()).collect();
    let found = tokio::time::timeout(within, async {
        loop {
            if pred(electors) {
                return;
            }
            let changed = watches.iter_mut().map(|w| Box::pin(w.changed()));
            let _ = futures_select_all(changed).await;
        }
    })
    .await;
    found.ok().map(|()| started.elapsed())
}

/// The first of several futures (a tiny `select_all`, to avoid a dependency).
async fn futures_select_all<F: std::future::Future + Unpin>(futs: impl Iterator<Item = F>) {
    let mut futs: Vec<F> = futs.collect();
    std::future::poll_fn(move |cx| {
        for f in &mut futs {
            if std::pin::Pin::new(f).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Blackholes `server`'s port with a leader elected; returns how long after the heal a leader
/// existed again (`None`: not within `wait_after_heal`).
async fn leader_gap_after_blackhole<B: LeaseBackend + Clone + 'static>(
    servers: &[&RedisServer],
    backends: [B; 2],
    name: &str,
    wait_after_heal: Duration,
) -> Option<Duration> {
    let (electors, shutdown, runs) = start_electors(backends, name);
    assert!(
        until_leader(&electors, EVENTUALLY).await.is_some(),
        "{name}: no leader before the fault"
    );
    let holes: Vec<Blackhole> = servers
        .iter()
        .map(|s| Blackhole::port(s.port()).expect("blackhole (needs root and iptables)"))
        .collect();
    // The leader steps down by its own deadline (it cannot renew).
    let stepped_down = tokio::time::timeout(TTL + ms(1_000), async {
        while any_leader(&electors) {
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
    assert!(
        stepped_down.is_ok(),
        "{name}: the leader kept leading through the blackhole"
    );
    tokio::time::sleep(blackhole_len().saturating_sub(TTL)).await;
    assert!(
        !any_leader(&electors),
        "{name}: a leader during the blackhole"
    );
    for hole in &holes {
        hole.heal().expect("heal");
    }
    let gap = until_leader(&electors, wait_after_heal).await;
    shutdown.cancel();
    for r in runs {
        // Bounded: a run whose release cannot be answered gives up at its release timeout.
        let _ = tokio::time::timeout(EVENTUALLY, r).await;
    }
    gap
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_recovers_within_the_lease_bound_after_a_long_blackhole() {
    let server = RedisServer::start().await.expect("redis");
    let a = redlease::redis::connect(&server.url()).await.expect("a");
    let b = redlease::redis::connect(&server.url()).await.expect("b");
    let bound = election_bound();
    let gap = leader_gap_after_blackhole(&[&server], [a.clone(), b], "{bh}", bound * 3).await;
    let gap = gap.expect("no leader within three times the bound after the heal");
    eprintln!(
        "blackhole {:?}: leader {gap:?} after the heal (bound {bound:?}); connections given up: {:?}",
        blackhole_len(),
        a.connection().stats()
    );
    assert!(
        gap <= bound,
        "leader {gap:?} after the heal, bound TTL + acquire interval + 1 s = {bound:?}"
    );
    assert!(
        a.connection().stats().given_up >= 1,
        "{:?}",
        a.connection().stats()
    );
}

/// Negative control: the same fault on redis-rs's `ConnectionManager` without a response
/// timeout (what `redis::connect` built before): the connection is never rebuilt, so no
/// leader within the bound after the heal. Proves the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_connection_manager_waits_for_tcp() {
    let server = RedisServer::start().await.expect("redis");
    let mut backends = Vec::new();
    for _ in 0..2 {
        let manager = redis::aio::ConnectionManager::new_with_config(
            server.client().expect("client"),
            redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(ms(1_000)))
                .set_response_timeout(None)
                .set_number_of_retries(1),
        )
        .await
        .expect("manager");
        backends.push(RedisBackend::new(manager));
    }
    let backends: [_; 2] = backends.try_into().expect("two");
    let bound = election_bound();
    let gap = leader_gap_after_blackhole(&[&server], backends, "{bhc}", bound).await;
    assert_eq!(
        gap, None,
        "the connection manager recovered within {bound:?}: the blackhole test no longer shows the fault"
    );
}

/// The node of `cluster` that serves `key`'s slot (the others answer `MOVED`).
async fn slot_owner<'a>(cluster: &'a RedisCluster, key: &str) -> &'a RedisServer {
    slot_owner_besides(cluster, key, None)
        .await
        .unwrap_or_else(|| panic!("no node serves {key}'s slot"))
}

/// The node of `cluster`, other than `besides`, that serves `key`'s slot, if any.
async fn slot_owner_besides<'a>(
    cluster: &'a RedisCluster,
    key: &str,
    besides: Option<u16>,
) -> Option<&'a RedisServer> {
    for node in cluster.nodes() {
        if Some(node.port()) == besides {
            continue;
        }
        let mut conn = node
            .client()
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("node connection");
        let reply: redis::RedisResult<Option<String>> = tokio::time::timeout(
            EVENTUALLY,
            redis::cmd("GET").arg(key).query_async(&mut conn),
        )
        .await
        .expect("a node answered GET in time");
        if reply.is_ok() {
            return Some(node);
        }
    }
    None
}

/// Redis Cluster: the node serving the election's slot is blackholed (its client port; the
/// cluster bus stays up, so the cluster keeps the slot there): after the heal a leader within
/// the bound, because [`redlease::redis::HealingCluster`] rebuilds the connection from its
/// seeds once the slot went silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_election_recovers_within_the_lease_bound_after_its_node_is_blackholed() {
    let cluster = RedisCluster::start().await.expect("cluster");
    let name = "{bhk}";
    let owner = slot_owner(&cluster, name).await;
    let a = redlease::redis::connect_cluster(&cluster.urls())
        .await
        .expect("a");
    let b = redlease::redis::connect_cluster(&cluster.urls())
        .await
        .expect("b");
    let bound = election_bound();
    let gap = leader_gap_after_blackhole(&[owner], [a.clone(), b], name, bound * 3).await;
    let gap = gap.expect("no leader within three times the bound after the heal");
    eprintln!(
        "Cluster, the slot's node blackholed {:?}: leader {gap:?} after the heal (bound {bound:?}); {:?}",
        blackhole_len(),
        a.connection().stats()
    );
    assert!(
        gap <= bound,
        "leader {gap:?} after the heal, bound TTL + acquire interval + 1 s = {bound:?}"
    );
    assert!(
        a.connection().stats().given_up >= 1,
        "{:?}",
        a.connection().stats()
    );
}

/// Redis Cluster with a replica per primary: the node serving the election's slot vanishes
/// without a reset, as a VM that is gone: its client port blackholed and the process frozen
/// (SIGSTOP, so its outgoing cluster-bus links fall silent too and the cluster fails it over;
/// a blackhole of its bus port alone does not, since it keeps pinging out on its own links).
/// The cluster promotes its replica, at another address. A new term within the bound after
/// the promotion, the old primary still blackholed: the connection rebuilt from the seeds
/// has the new slot map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_election_follows_a_failover_while_the_old_primary_is_blackholed() {
    let cluster = RedisCluster::builder()
        .replicas(1)
        .node_timeout(ms(1_000))
        .start()
        .await
        .expect("cluster with replicas");
    let name = "{bhf}";
    let old = slot_owner(&cluster, name).await;
    let a = redlease::redis::connect_cluster(&cluster.urls())
        .await
        .expect("a");
    let b = redlease::redis::connect_cluster(&cluster.urls())
        .await
        .expect("b");
    let (electors, shutdown, runs) = start_electors([a.clone(), b], name);
    assert!(until_leader(&electors, EVENTUALLY).await.is_some());
    let before: Vec<_> = electors.iter().filter_map(|e| e.token()).collect();
    let hole = Blackhole::port(old.port()).expect("blackhole (needs root and iptables)");
    old.pause().await.expect("SIGSTOP the old primary");
    // The cluster's own failover: poll the other nodes (no signal exists for it).
    let promoted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(node) = slot_owner_besides(&cluster, name, Some(old.port())).await {
                return node.port();
            }
            tokio::time::sleep(ms(100)).await;
        }
    })
    .await
    .expect("the cluster promoted the replica within 30 s");
    let bound = election_bound();
    let new_term = until_electors(&electors, bound * 3, |es| {
        es.iter()
            .filter_map(|e| e.token())
            .any(|t| !before.contains(&t))
    })
    .await;
    eprintln!(
        "Cluster failover: {} blackholed, {promoted} promoted; new term {new_term:?} after (bound {bound:?}); {:?}",
        old.port(),
        a.connection().stats()
    );
    assert!(hole.is_active(), "the old primary stayed blackholed");
    let gap = new_term.expect("no new term within three times the bound after the promotion");
    assert!(
        gap <= bound,
        "new term {gap:?} after the promotion, bound TTL + acquire interval + 1 s = {bound:?}"
    );
    shutdown.cancel();
    for r in runs {
        let _ = tokio::time::timeout(EVENTUALLY, r).await;
    }
}

/// Negative control: the same fault on a plain redis-rs `ClusterConnection` (no response
/// timeout, as the library's own connections): its node connection sits in TCP's backoff, so
/// no leader within the bound after the heal. Proves the test above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_a_plain_cluster_connection_waits_for_tcp() {
    let cluster = RedisCluster::start().await.expect("cluster");
    let name = "{bhkc}";
    let owner = slot_owner(&cluster, name).await;
    let mut backends = Vec::new();
    for _ in 0..2 {
        let client = redis::cluster::ClusterClientBuilder::new(cluster.urls())
            .connection_timeout(ms(1_000))
            .build()
            .expect("client");
        let conn = client.get_async_connection().await.expect("cluster");
        backends.push(RedisBackend::cluster(conn));
    }
    let backends: [_; 2] = backends.try_into().expect("two");
    let bound = election_bound();
    let gap = leader_gap_after_blackhole(&[owner], backends, name, bound).await;
    assert_eq!(
        gap, None,
        "a plain cluster connection recovered within {bound:?}: the test no longer shows the fault"
    );
}

/// Redlock over three nodes, two of them blackholed (no quorum) for the whole fault: after the
/// heal a leader within the same bound (each node's `HealingConnection` is dialled again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_election_recovers_within_the_lease_bound_after_blackholed_nodes() {
    use redlease::redlock::{Node, RedlockBackend, RedlockConfig};
    let servers = [
        RedisServer::start().await.expect("redis"),
        RedisServer::start().await.expect("redis"),
        RedisServer::start().await.expect("redis"),
    ];
    let mut backends = Vec::new();
    for _ in 0..2 {
        let mut nodes = Vec::new();
        for s in &servers {
            nodes.push(
                Node::connect(s.client().expect("client"))
                    .await
                    .expect("node"),
            );
        }
        backends.push(RedlockBackend::new(nodes, RedlockConfig::new()).expect("redlock"));
    }
    let backends: [_; 2] = backends.try_into().expect("two");
    let bound = election_bound();
    let gap =
        leader_gap_after_blackhole(&[&servers[0], &servers[1]], backends, "{bhr}", bound * 3).await;
    let gap = gap.expect("no Redlock leader within three times the bound after the heal");
    eprintln!(
        "Redlock, 2 of 3 nodes blackholed {:?}: leader {gap:?} after the heal (bound {bound:?})",
        blackhole_len()
    );
    assert!(
        gap <= bound,
        "leader {gap:?} after the heal, bound TTL + acquire interval + 1 s = {bound:?}"
    );
}

/// Sentinel: the primary is blackholed (not killed: its connections go silent) and the
/// sentinels promote a replica at another address; a leader within the bound after the new
/// primary is in place, the old one still blackholed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_election_follows_a_primary_replaced_while_the_old_one_is_blackholed() {
    use lease_testkit::SentinelGroup;
    let group = SentinelGroup::builder("bhs")
        .down_after(ms(1_000))
        .start()
        .await
        .expect("sentinel group");
    let urls = group.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let a = redlease::redis::connect_sentinel(&urls, group.name())
        .await
        .expect("a");
    let b = redlease::redis::connect_sentinel(&urls, group.name())
        .await
        .expect("b");
    let (electors, shutdown, runs) = start_electors([a, b], "{bhs}");
    assert!(until_leader(&electors, EVENTUALLY).await.is_some());
    let old = group.primary_index().await.expect("primary");
    let hole = Blackhole::port(group.server(old).expect("server").port()).expect("blackhole");
    let new = group
        .wait_new_primary(old, Duration::from_secs(30))
        .await
        .expect("the sentinels promoted a replica");
    let promoted = Instant::now();
    let bound = election_bound();
    let gap = until_leader(&electors, bound * 3).await;
    eprintln!(
        "Sentinel: primary {old} blackholed, {new} promoted; leader {gap:?} after (bound {bound:?})"
    );
    let gap = gap.expect("no leader within three times the bound after the promotion");
    assert!(
        gap <= bound,
        "leader {gap:?} after the promotion, bound {bound:?} (measured from {promoted:?})"
    );
    assert!(hole.is_active(), "the old primary stayed blackholed");
    shutdown.cancel();
    for r in runs {
        let _ = tokio::time::timeout(EVENTUALLY, r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_recovers_within_its_retry_interval_after_a_long_blackhole() {
    let server = RedisServer::start().await.expect("redis");
    let locker = Locker::new(
        redlease::redis::connect(&server.url())
            .await
            .expect("connect"),
    );
    // Held by someone else, expiring during the blackhole.
    let mut raw = server.connection().await.expect("raw");
    let _: () = redis::cmd("SET")
        .arg("{bhl}:lock")
        .arg("someone")
        .arg("PX")
        .arg(1_000)
        .query_async(&mut raw)
        .await
        .expect("set");
    let retry = ms(200);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let r = locker
                .obtain(
                    "{bhl}:lock",
                    ms(5_000),
                    LockOptions::new()
                        .retry(RetryStrategy::linear(retry).expect("retry"))
                        .wait(blackhole_len() * 3),
                )
                .await;
            (r, Instant::now())
        })
    };
    tokio::time::sleep(ms(100)).await; // the first attempt finds the key held
    let hole = Blackhole::port(server.port()).expect("blackhole (needs root and iptables)");
    tokio::time::sleep(blackhole_len()).await;
    assert!(
        !waiter.is_finished(),
        "the waiter ended during the blackhole"
    );
    hole.heal().expect("heal");
    let healed = Instant::now();
    let (obtained, at) = tokio::time::timeout(blackhole_len() * 3, waiter)
        .await
        .expect("the waiter never ended")
        .expect("task");
    let lock = obtained.expect("obtained after the heal");
    let gap = at.duration_since(healed);
    eprintln!("lock waiter obtained {gap:?} after the heal");
    // The bound: a dial started just before the heal waits for its SYN's retransmission or
    // the connect timeout (1 s, whichever first), then the next attempt comes at most one
    // retry interval later; its own round trips (connect, HELLO, SET) and a loaded machine's
    // scheduling get 0.5 s.
    let bound = retry + redlease::redis::CONNECT_TIMEOUT + ms(500);
    assert!(
        gap <= bound,
        "obtained {gap:?} after the heal, bound retry interval + connect timeout + 0.5 s = {bound:?}"
    );
    lock.release().await.expect("release");
}

/// Dropping `run` while leading (a `select!` that took another branch) ends the term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_run_while_leading_ends_the_term_and_releases() {
    let server = RedisServer::start().await.expect("redis");
    let ttl = Duration::from_secs(10);
    let cfg = |id: &str| {
        ElectionConfig::builder("{drop}", id)
            .ttl(ttl)
            .build()
            .expect("config")
    };
    let a = Elector::new(
        redlease::redis::connect(&server.url()).await.expect("a"),
        cfg("a"),
    );
    let b = Elector::new(
        redlease::redis::connect(&server.url()).await.expect("b"),
        cfg("b"),
    );
    let work_cancelled = Arc::new(AtomicBool::new(false));
    let (elected_tx, elected_rx) = tokio::sync::oneshot::channel::<()>();
    let mut elected_tx = Some(elected_tx);
    let mut state = a.subscribe();
    {
        let flag = Arc::clone(&work_cancelled);
        let run = a.run(CancellationToken::new(), move |term| {
            let flag = Arc::clone(&flag);
            if let Some(tx) = elected_tx.take() {
                let _ = tx.send(());
            }
            async move {
                term.cancelled().await;
                flag.store(true, Ordering::SeqCst);
            }
        });
        // The caller races `run` against being elected, then drops it.
        tokio::select! {
            r = run => panic!("run returned: {r:?}"),
            r = tokio::time::timeout(EVENTUALLY, elected_rx) => {
                r.expect("elected in time").expect("sender kept");
            }
        }
    }
    let dropped = Instant::now();
    // Watchers are told at once; the token is gone; the work's token fired.
    assert_eq!(state.borrow_and_update().role, Role::Stopped);
    assert_eq!(a.token(), None);
    let cancelled = tokio::time::timeout(EVENTUALLY, async {
        while !work_cancelled.load(Ordering::SeqCst) {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    assert!(cancelled.is_ok(), "the term's work was not cancelled");
    // The lease was released: B is elected long before A's TTL would have run out.
    let shutdown = CancellationToken::new();
    let run_b = {
        let (b, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { b.hold(s).await })
    };
    let mut b_state = b.subscribe();
    // (The watch's read guard is dropped at once: holding it would block the elector.)
    let elected = tokio::time::timeout(
        ttl / 2,
        b_state.wait_for(|s| matches!(s.role, Role::Leader(_))),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(
        elected,
        "B not elected within {:?} of the drop: the lease was not released",
        ttl / 2
    );
    eprintln!(
        "B elected {:?} after A's run was dropped",
        dropped.elapsed()
    );
    shutdown.cancel();
    let stopped = tokio::time::timeout(EVENTUALLY, run_b).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    // A can run again (its running flag was cleared).
    let again = CancellationToken::new();
    again.cancel();
    let r = tokio::time::timeout(EVENTUALLY, a.hold(again)).await;
    assert!(matches!(r, Ok(Ok(()))), "{r:?}");
}

/// With release notices live, `limit(2, linear(5 ms))` against a holder that keeps the lock
/// gives up after about 10 ms, not at the holder's expiry.
#[tokio::test]
async fn with_notices_live_a_limited_retry_gives_up_on_schedule() {
    let server = RedisServer::start().await.expect("redis");
    let holder = Locker::new(redlease::redis::connect(&server.url()).await.expect("h"));
    let waiter = Locker::new(redlease::redis::connect(&server.url()).await.expect("w"));
    let held = holder
        .obtain("{rb}:lock", ms(10_000), LockOptions::new())
        .await
        .expect("held");
    // Make the waiter's notices live first (a watch is live once subscribed).
    let warm = waiter
        .obtain(
            "{rb}:lock",
            ms(10_000),
            LockOptions::new()
                .retry(RetryStrategy::linear(ms(50)).expect("retry"))
                .wait(ms(300)),
        )
        .await;
    assert!(warm.is_err());
    let started = Instant::now();
    let r = waiter
        .obtain(
            "{rb}:lock",
            ms(10_000),
            LockOptions::new()
                .retry(RetryStrategy::limit(
                    2,
                    RetryStrategy::linear(ms(5)).expect("retry"),
                ))
                .wait(ms(20_000)),
        )
        .await;
    let took = started.elapsed();
    assert!(
        matches!(r, Err(LockError::NotObtained { .. })),
        "{:?}",
        r.map(|_| ())
    );
    assert!(
        took < ms(1_000),
        "gave up after {took:?}: later than the strategy's schedule"
    );
    held.release().await.expect("release");
}
