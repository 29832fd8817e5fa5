//! Renew, release, remaining, inspect, and an elector over a quorum.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_quorum_of_exhausted_counters_is_a_permanent_error() {
    let c = Cluster::new(3);
    for s in &c.stores {
        s.put("jobs:fence", &(1u64 << 53).to_string());
    }
    let e = c
        .backend()
        .acquire(&acquire_req(&election(), "a", 1000))
        .await
        .unwrap_err();
    assert!(matches!(e, BackendError::TokenExhausted(_)), "{e:?}");
    assert!(!e.is_transient());
}

#[tokio::test(start_paused = true)]
async fn split_votes_are_lost_races() {
    let c = Cluster::new(3);
    let spec = election();
    c.stores[1]
        .acquire_now(&acquire_req(&spec, "x", 5000))
        .unwrap();
    c.stores[2]
        .acquire_now(&acquire_req(&spec, "y", 5000))
        .unwrap();
    let out = c
        .backend()
        .acquire(&acquire_req(&spec, "a", 1000))
        .await
        .unwrap();
    // Two nodes held by others: the most frequent holder (a tie: the lower node's).
    assert!(
        matches!(&out, AcquireOutcome::Held { holder: Some(h), remaining: None, .. } if h == "x"),
        "{out:?}"
    );
    assert_eq!(
        c.owners("jobs:leader"),
        [None, Some("x".to_owned()), Some("y".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn renew_needs_a_quorum() {
    let c = Cluster::new(3);
    let spec = election();
    let b = c.backend();
    token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    c.clock.advance(MS(500));
    assert_eq!(
        b.renew(&renew_req(&spec, "a", 1000)).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert_eq!(
        b.remaining(&spec, &Owner::new("a").unwrap()).await.unwrap(),
        Some(MS(988))
    );

    // Inconclusive: two nodes unreachable. An error that matches as "lost", and the keys stay
    // (the driver tolerates it until its deadline and releases at the end of the term).
    c.stores[0].set_unavailable(true);
    c.stores[1].set_unavailable(true);
    let e = b.renew(&renew_req(&spec, "a", 1000)).await.unwrap_err();
    let q = quorum_error(&e);
    assert!(q.is_lost() && !q.is_not_acquired());
    // Decided on nodes 0 and 1 (neither a renewed quorum nor a "not ours" quorum can form):
    // node 2's reply was not waited for, so the outcome is unknown.
    assert_eq!((q.op, q.successes), (QuorumOp::Renew, 0));
    assert!(matches!(q.causes[2].cause, NodeCause::Unanswered));
    assert!(matches!(e, BackendError::OutcomeUnknown(_)));
    assert_eq!(c.owners("jobs:leader"), vec![Some("a".to_owned()); 3]);

    // Conclusive: the lease is gone on two nodes; the minority that accepted the extension
    // is cleaned up too.
    c.stores[0].set_unavailable(false);
    c.stores[1].set_unavailable(false);
    c.stores[0].lose_key("jobs:leader");
    c.stores[1].lose_key("jobs:leader");
    assert_eq!(
        b.renew(&renew_req(&spec, "a", 1000)).await.unwrap(),
        RenewOutcome::NotHeld
    );
    assert_eq!(c.owners("jobs:leader"), [None, None, None]);
}

#[tokio::test(start_paused = true)]
async fn renew_with_no_validity_left_is_an_error() {
    let c = Cluster::new(3);
    let spec = election();
    let nodes = slow_nodes(&c, &[0, 0, 0]);
    let delays: Vec<_> = nodes.iter().map(|n| Arc::clone(&n.delay_ms)).collect();
    let b =
        RedlockBackend::new(nodes, RedlockConfig::new().with_operation_timeout(MS(1000))).unwrap();
    token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    stall(&c.stores[0]);
    delays[1].store(995, Ordering::SeqCst);
    delays[2].store(995, Ordering::SeqCst);
    let e = b.renew(&renew_req(&spec, "a", 1000)).await.unwrap_err();
    assert_eq!(
        quorum_error(&e).failure,
        RoundFailure::ValidityExhausted { elapsed: MS(995) }
    );
}

#[tokio::test(start_paused = true)]
async fn release_needs_a_quorum_and_ignores_the_term() {
    let c = Cluster::new(3);
    let spec = election();
    let b = c.backend();
    token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    // Node counters may differ from the term's token: the term is not checked per node.
    assert_eq!(
        b.release(&release_req(&spec, "a", Some(999)))
            .await
            .unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(c.owners("jobs:leader"), [None, None, None]);
    assert_eq!(
        b.release(&release_req(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::NotHeld
    );

    token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    c.stores[1].set_unavailable(true);
    assert_eq!(
        b.release(&release_req(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released,
        "a quorum released"
    );
    c.stores[2].set_unavailable(true);
    let e = b.release(&release_req(&spec, "b", None)).await.unwrap_err();
    assert!(quorum_error(&e).is_lost());
}

#[tokio::test(start_paused = true)]
async fn remaining_is_the_minimum_over_the_best_quorum() {
    let c = Cluster::new(3);
    let spec = Arc::new(LeaseSpec::lock(["k"], None).unwrap());
    let b = c.backend();
    b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap();
    // Node 0 extended to 5 s, node 1 at 1 s, node 2 lost it.
    c.stores[0].renew_now(&renew_req(&spec, "a", 5000)).unwrap();
    c.stores[2].lose_key("k");
    let owner = Owner::new("a").unwrap();
    // The best quorum is {0, 1}: its minimum is 1000 ms, minus the drift allowance
    // ceil(1000 × 0.01) + 2 = 12 ms (the round took no time on the paused clock).
    assert_eq!(b.remaining(&spec, &owner).await.unwrap(), Some(MS(988)));
    c.stores[1].lose_key("k");
    assert_eq!(
        b.remaining(&spec, &owner).await.unwrap(),
        None,
        "a quorum says not ours"
    );
    c.stores[1].set_unavailable(true);
    assert!(b.remaining(&spec, &owner).await.is_err(), "inconclusive");
}

#[tokio::test(start_paused = true)]
async fn inspect_reports_the_majority_holder_and_the_highest_counter() {
    let c = Cluster::new(3);
    let spec = election();
    c.stores[0].put("jobs:fence", "9");
    let b = c.backend();
    let t = token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    c.stores[2].put("jobs:fence", "12"); // a failed attempt elsewhere moved one counter
    let info = b.inspect(&spec).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("a"));
    assert_eq!(info.counter.map(Token::get), Some(12));
    assert_eq!(info.mark.token(), Some(t));
    assert!(info.remaining.is_some());
    // No majority holder: none reported.
    c.stores[0].lose_key("jobs:leader");
    c.stores[1].lose_key("jobs:leader");
    assert_eq!(b.inspect(&spec).await.unwrap().holder, None);
    c.stores[0].set_unavailable(true);
    c.stores[1].set_unavailable(true);
    assert!(b.inspect(&spec).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn an_elector_runs_over_the_quorum() {
    use lease_tokio::{CancellationToken, Elector};
    let c = Cluster::new(3);
    let config = lease_core::ElectionConfig::builder("jobs", "host-1")
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let elector = Elector::new(c.backend(), config);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut tx = Some(tx);
    elector
        .run(shutdown, move |term| {
            let stop = stop.clone();
            let tx = tx.take();
            async move {
                if let Some(tx) = tx {
                    let _ = tx.send(term.token());
                }
                stop.cancel();
                term.cancelled().await;
            }
        })
        .await
        .unwrap();
    assert_eq!(rx.await.unwrap().get(), 1);
    // Shutdown released on every node.
    assert_eq!(c.owners("jobs:leader"), [None, None, None]);
}
