//! Quorum rounds against real Redis servers: node failures (kill, SIGSTOP, blackhole), cleanup,
//! ownership, extension. Every call with a faulty node is bounded from above by three rounds of
//! its operation timeout plus slack (`within_rounds`): a faulty node must not hold it up.

mod common;

use lease_core::Effect;
use lease_core::TokenScheme;

use common::*;
use lease_core::{AcquireOutcome, BackendError, LeaseBackend, ReleaseOutcome, RenewOutcome};
use lease_redlock::{NodeCause, QuorumOp, RoundFailure};
use lease_testkit::proxy::Mode;
use lease_testkit::redis::ServerState;

const KEY: &str = "job";
const FENCE: &str = "job:fence";

#[tokio::test]
async fn acquires_with_one_node_killed() {
    let servers = start(3).await;
    let b = redlock(direct_nodes(&servers).await);
    let mut raw = raws(&servers).await;
    servers[1].kill().await.unwrap();
    let spec = fenced_lock(KEY);

    let t = token_of(
        &within_rounds("acquire", 2000, b.acquire(&acq(&spec, "a", 2000)))
            .await
            .unwrap(),
    );
    assert_eq!(t.get(), 1);
    assert_eq!(get(&mut raw[0], KEY).await.as_deref(), Some("a"));
    assert_eq!(get(&mut raw[2], KEY).await.as_deref(), Some("a"));
    assert_eq!(
        b.renew(&renew(&spec, "a", 2000)).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert!(b.remaining(&spec, &owner("a")).await.unwrap().is_some());
    assert_eq!(b.inspect(&spec).await.unwrap().holder.as_deref(), Some("a"));
    assert_eq!(
        b.release(&release(&spec, "a")).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(get(&mut raw[0], KEY).await, None);
    assert_eq!(get(&mut raw[2], KEY).await, None);

    // Two killed: no quorum; the survivor is cleaned up.
    servers[2].kill().await.unwrap();
    let e = within_rounds("acquire", 2000, b.acquire(&acq(&spec, "a", 2000)))
        .await
        .unwrap_err();
    let q = quorum_error(&e);
    assert!(q.is_not_acquired());
    assert_eq!((q.successes, q.quorum), (1, 2));
    assert_eq!(q.causes.iter().map(|c| c.index).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(get(&mut raw[0], KEY).await, None);
    assert_eq!(
        get(&mut raw[0], FENCE).await.as_deref(),
        Some("2"),
        "the attempt reached node 0"
    );
}

#[tokio::test]
async fn a_paused_node_does_not_hold_up_the_acquire() {
    let servers = start(3).await;
    let nodes = direct_nodes(&servers).await;
    let n2 = node_conn(&nodes[2]);
    let b = redlock(nodes);
    let mut raw = raws(&servers).await;
    let spec = fenced_lock(KEY);
    // Load the scripts everywhere first, so requests queued at the paused node run on resume.
    let t0 = token_of(&b.acquire(&acq(&spec, "warm", 2000)).await.unwrap());
    b.release(&release(&spec, "warm")).await.unwrap();
    // A round returns at quorum: let the other nodes' warm-up requests finish first.
    must_complete("late requests settle", b.settled()).await;

    servers[2].pause().await.unwrap();
    let got = within_rounds(
        "acquire with a paused node",
        2000,
        b.acquire(&acq(&spec, "a", 2000)),
    )
    .await;
    // It completed while the node is still paused: bounded by the operation timeout.
    assert_eq!(servers[2].state(), ServerState::Paused);
    let t = token_of(&got.unwrap());
    assert!(t > t0);
    assert_eq!(get(&mut raw[0], KEY).await.as_deref(), Some("a"));
    assert_eq!(get(&mut raw[1], KEY).await.as_deref(), Some("a"));
    // Release while still paused: a quorum released.
    assert_eq!(
        within_rounds("release", 60_000, b.release(&release(&spec, "a")))
            .await
            .unwrap(),
        ReleaseOutcome::Released
    );
    servers[2].resume().await.unwrap();
    // The requests queued at node 2 ran in order on resume: acquire, then release. The release
    // is sent in its turn, once the acquire is answered or abandoned, which may be after the
    // release round returned: wait until every late request is over.
    must_complete("late requests settle", b.settled()).await;
    let mut n2 = n2;
    assert_eq!(get(&mut n2, KEY).await, None);
    assert_eq!(
        get(&mut n2, FENCE).await,
        Some(t0.next().unwrap().to_string())
    );
}

#[tokio::test]
async fn a_node_slowed_past_the_operation_timeout_does_not_hold_up_the_acquire() {
    let servers = start(3).await;
    let (proxies, nodes) = proxied_nodes(&servers).await;
    let b = redlock(nodes);
    let spec = fenced_lock(KEY);
    // TTL 2 s: operation timeout 400 ms; node 0 sees the request a minute later.
    proxies[0].set_mode(Mode::Latency(std::time::Duration::from_secs(60)));
    let (got, slow_still_pending) = within_rounds("acquire with a slow node", 2000, async {
        let got = b.acquire(&acq(&spec, "a", 2000)).await;
        // The slow node's reply cannot have arrived: its latency is longer than a TTL.
        let pending = get(&mut conn(&servers[0].url()).await, KEY).await;
        (got, pending)
    })
    .await;
    assert!(token_of(&got.unwrap()).get() >= 1);
    assert_eq!(
        slow_still_pending, None,
        "the acquire returned before the slow node applied it"
    );
}

#[tokio::test]
async fn a_minority_partition_still_acquires() {
    let servers = start(5).await;
    let (proxies, nodes) = proxied_nodes(&servers).await;
    let b = redlock(nodes);
    let spec = fenced_lock(KEY);
    proxies[0].set_mode(Mode::Blackhole);
    proxies[3].set_mode(Mode::Blackhole);
    let got = within_rounds("acquire", 2000, b.acquire(&acq(&spec, "a", 2000))).await;
    assert_eq!(token_of(&got.unwrap()).get(), 1);
    let mut raw = raws(&servers).await;
    assert_eq!(
        values(&mut raw, KEY).await,
        [
            None,
            Some("a".into()),
            Some("a".into()),
            None,
            Some("a".into())
        ]
    );
    for p in &proxies {
        p.set_mode(Mode::Pass);
    }
}

#[tokio::test]
async fn a_majority_partition_does_not_acquire_and_leaves_nothing_behind() {
    let servers = start(5).await;
    let (proxies, nodes) = proxied_nodes(&servers).await;
    let node_conns: Vec<Conn> = nodes.iter().map(node_conn).collect();
    let b = redlock(nodes);
    let spec = fenced_lock(KEY);
    // Load the scripts on every server: requests queued at the partition then run as sent.
    b.acquire(&acq(&spec, "warm", 2000)).await.unwrap();
    b.release(&release(&spec, "warm")).await.unwrap();
    // A round returns at quorum: let the other nodes' warm-up requests finish first.
    must_complete("late requests settle", b.settled()).await;

    for i in [0, 2, 4] {
        proxies[i].set_mode(Mode::Blackhole);
    }
    // A TTL far longer than the test: a key gone means the cleanup deleted it, not expiry.
    let e = within_rounds("acquire", 60_000, b.acquire(&acq(&spec, "a", 60_000)))
        .await
        .unwrap_err();
    let q = quorum_error(&e);
    assert_eq!(q.op, QuorumOp::Acquire);
    assert_eq!(q.failure, RoundFailure::NoQuorum);
    assert_eq!((q.successes, q.quorum, q.nodes), (2, 3, 5));
    assert_eq!(
        q.causes.iter().map(|c| c.index).collect::<Vec<_>>(),
        [0, 2, 4]
    );
    assert!(q.causes.iter().all(|c| c.is_timeout()), "{q}");
    // The partitioned nodes may hold the key (their acquire and cleanup went unanswered):
    // the outcome is unknown, never "not applied".
    assert!(e.is_outcome_unknown(), "{e:?}");
    assert_eq!(q.effect(), Effect::Unknown);
    assert_eq!(
        q.cleanup_failures
            .iter()
            .map(|c| c.index)
            .collect::<Vec<_>>(),
        [0, 2, 4],
        "the cleanup got no answer from the partitioned nodes"
    );
    let mut raw = raws(&servers).await;
    assert_eq!(get(&mut raw[1], KEY).await, None);
    assert_eq!(get(&mut raw[3], KEY).await, None);

    // Heal: the queued acquire and cleanup reach the partitioned nodes, in order.
    for p in &proxies {
        p.set_mode(Mode::Pass);
    }
    let mut node_conns = node_conns;
    for i in [0, 2, 4] {
        assert_eq!(get(&mut node_conns[i], KEY).await, None, "node {i}");
        assert_eq!(
            get(&mut node_conns[i], FENCE).await.as_deref(),
            Some("2"),
            "node {i}: the queued acquire did run there (then the cleanup deleted its key)"
        );
    }
}

#[tokio::test]
async fn a_partial_acquisition_is_cleaned_up_and_others_values_are_kept() {
    let servers = start(3).await;
    let nodes = direct_nodes(&servers).await;
    let n2 = node_conn(&nodes[2]);
    let b = redlock(nodes);
    let mut raw = raws(&servers).await;
    let spec = fenced_lock(KEY);
    b.acquire(&acq(&spec, "warm", 2000)).await.unwrap();
    b.release(&release(&spec, "warm")).await.unwrap();
    // A round returns at quorum: let the other nodes' warm-up requests finish first.
    must_complete("late requests settle", b.settled()).await;

    // Another owner holds node 0, node 2 is paused: only node 1 can be won.
    set_px(&mut raw[0], KEY, "other", 60_000).await;
    servers[2].pause().await.unwrap();
    let e = within_rounds("acquire", 60_000, b.acquire(&acq(&spec, "a", 60_000)))
        .await
        .unwrap_err();
    let q = quorum_error(&e);
    assert_eq!(q.successes, 1);
    assert!(matches!(&q.causes[0].cause, NodeCause::Held { holder: Some(h) } if h == "other"));
    assert!(q.causes[1].is_timeout());
    servers[2].resume().await.unwrap();

    assert_eq!(get(&mut raw[0], KEY).await.as_deref(), Some("other"));
    assert_eq!(get(&mut raw[1], KEY).await, None);
    let mut n2 = n2;
    assert_eq!(
        get(&mut n2, KEY).await,
        None,
        "cleanup ran after the queued acquire"
    );
    assert_eq!(get(&mut n2, FENCE).await.as_deref(), Some("2"));
}

#[tokio::test]
async fn another_owners_value_is_never_deleted() {
    let servers = start(3).await;
    let b = redlock(direct_nodes(&servers).await);
    let mut raw = raws(&servers).await;
    let spec = fenced_lock(KEY);
    set_px(&mut raw[0], KEY, "other", 60_000).await;
    set_px(&mut raw[2], KEY, "other", 60_000).await;

    let got = b.acquire(&acq(&spec, "a", 2000)).await.unwrap();
    assert!(
        matches!(&got, AcquireOutcome::Held { holder: Some(h), remaining: Some(_), .. } if h == "other"),
        "{got:?}"
    );
    assert_eq!(
        b.renew(&renew(&spec, "a", 2000)).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        b.release(&release(&spec, "a")).await.unwrap(),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        values(&mut raw, KEY).await,
        [Some("other".into()), None, Some("other".into())],
        "only our (cleaned-up) attempt on node 1 was removed"
    );
    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("other"));
}

#[tokio::test]
async fn extension_requires_a_quorum() {
    let servers = start(3).await;
    let b = redlock(direct_nodes(&servers).await);
    let mut raw = raws(&servers).await;
    let spec = fenced_lock(KEY);
    token_of(&b.acquire(&acq(&spec, "a", 5000)).await.unwrap());

    // Two nodes paused: inconclusive; an error that matches as "lost", nothing deleted.
    servers[0].pause().await.unwrap();
    servers[1].pause().await.unwrap();
    let e = within_rounds("renew", 5000, b.renew(&renew(&spec, "a", 5000)))
        .await
        .unwrap_err();
    assert!(e.is_transient());
    // One node extended, two did not answer: unknown.
    assert!(e.is_outcome_unknown(), "{e:?}");
    let q = quorum_error(&e);
    assert!(q.is_lost());
    assert_eq!((q.op, q.successes), (QuorumOp::Renew, 1));
    assert!(q.causes.iter().all(|c| c.is_timeout()));
    servers[0].resume().await.unwrap();
    servers[1].resume().await.unwrap();
    assert_eq!(get(&mut raw[2], KEY).await.as_deref(), Some("a"));
    assert_eq!(
        b.renew(&renew(&spec, "a", 5000)).await.unwrap(),
        RenewOutcome::Renewed
    );

    // The lease is gone on two nodes: lost, and the minority that accepted the extension is
    // cleaned up.
    del(&mut raw[0], KEY).await;
    del(&mut raw[1], KEY).await;
    assert_eq!(
        b.renew(&renew(&spec, "a", 5000)).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(values(&mut raw, KEY).await, [None, None, None]);
}

#[tokio::test]
async fn exhausted_counters_are_a_permanent_error() {
    let servers = start(3).await;
    let b = redlock(direct_nodes(&servers).await);
    let mut raw = raws(&servers).await;
    let spec = fenced_lock(KEY);
    for r in raw.iter_mut() {
        set_px(r, FENCE, &(1u64 << 53).to_string(), 60_000).await;
    }
    let e = b.acquire(&acq(&spec, "a", 2000)).await.unwrap_err();
    assert!(matches!(e, BackendError::TokenExhausted(_)), "{e:?}");
    assert_eq!(values(&mut raw, KEY).await, [None, None, None]);
}

/// A failed acquire that provably left nothing anywhere is "not applied" (transient
/// `Unavailable`): one node refuses connections (nothing reached it), one holds another
/// owner's lease, and the one that granted was cleaned up.
#[tokio::test]
async fn a_failed_acquire_that_left_nothing_anywhere_is_not_applied() {
    let servers = start(2).await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let manager = |url: String| async move {
        redis::aio::ConnectionManager::new_lazy_with_config(
            redis::Client::open(url).unwrap(),
            redis::aio::ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_response_timeout(None),
        )
        .unwrap()
    };
    let mut nodes = vec![lease_redlock::Node::new(
        dead.to_string(),
        lease_redis::RedisBackend::new(manager(format!("redis://{dead}/")).await)
            .with_token_scheme(TokenScheme::Counter),
    )];
    for s in &servers {
        nodes.push(lease_redlock::Node::new(
            s.addr().to_string(),
            lease_redis::RedisBackend::new(manager(s.url()).await)
                .with_token_scheme(TokenScheme::Counter),
        ));
    }
    let b = redlock(nodes);
    let mut raw = raws(&servers).await;
    set_px(&mut raw[0], KEY, "other", 60_000).await;
    let spec = fenced_lock(KEY);
    let e = must_complete("acquire", b.acquire(&acq(&spec, "a", 60_000)))
        .await
        .unwrap_err();
    assert!(matches!(e, BackendError::Unavailable(_)), "{e:?}");
    assert_eq!(e.effect(), Effect::NotApplied);
    assert!(e.is_transient());
    let q = quorum_error(&e);
    assert_eq!(q.effect(), Effect::NotApplied, "{q}");
    assert_eq!(get(&mut raw[0], KEY).await.as_deref(), Some("other"));
    assert_eq!(get(&mut raw[1], KEY).await, None, "cleaned up");
}
