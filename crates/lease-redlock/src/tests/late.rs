//! Slow nodes: late requests in their turn, and the raise round.

use super::*;

/// A node whose every call waits `delay_ms` of tokio time before reaching the store, and
/// signals `applied` after each call (so a test can wait for a late request to land).
pub(super) struct Slow {
    node: Node<MemoryBackend>,
    pub(super) delay_ms: Arc<AtomicU64>,
    applied: Arc<tokio::sync::Notify>,
    releases: Arc<AtomicU64>,
}

impl Slow {
    async fn delay(&self) {
        let ms = self.delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            tokio::time::sleep(MS(ms)).await;
        }
    }
    fn done<T>(&self, r: T) -> T {
        self.applied.notify_waiters();
        r
    }
}

pub(super) fn slow_nodes(c: &Cluster, delays: &[u64]) -> Vec<Slow> {
    c.nodes()
        .into_iter()
        .zip(delays)
        .map(|(node, d)| Slow {
            node,
            delay_ms: Arc::new(AtomicU64::new(*d)),
            applied: Arc::new(tokio::sync::Notify::new()),
            releases: Arc::new(AtomicU64::new(0)),
        })
        .collect()
}

#[async_trait]
impl LeaseBackend for Slow {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.delay().await;
        self.done(self.node.acquire(req).await)
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.delay().await;
        self.done(self.node.renew(req).await)
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.delay().await;
        let r = self.node.release(req).await;
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.done(r)
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.delay().await;
        self.done(self.node.remaining(spec, owner).await)
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.delay().await;
        self.done(self.node.inspect(spec).await)
    }
}

#[async_trait]
impl RaiseCounter for Slow {
    async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        self.delay().await;
        self.done(self.node.raise_counter(spec, owner, token).await)
    }
}

impl QuorumNode for Slow {
    fn id(&self) -> &str {
        self.node.id()
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_node_does_not_slow_the_lock_cycle_and_its_late_grant_is_released() {
    let c = Cluster::new(3);
    let spec = Arc::new(LeaseSpec::lock(["k"], None).unwrap());
    // Nodes 0 and 1 answer in 1 ms, node 2 in 20 ms (within the 200 ms bound).
    let nodes = slow_nodes(&c, &[1, 1, 20]);
    let (slow_applied, slow_releases) = (
        Arc::clone(&nodes[2].applied),
        Arc::clone(&nodes[2].releases),
    );
    let b = c.backend_of(nodes);
    let start = tokio::time::Instant::now();
    let out = b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap();
    assert_eq!(
        out,
        AcquireOutcome::Acquired {
            token: None,
            fence: lease_core::FenceState::UNKNOWN
        }
    );
    assert_eq!(
        start.elapsed(),
        MS(1),
        "returned at the fast nodes' latency"
    );
    assert_eq!(
        c.owners("k"),
        [Some("a".to_owned()), Some("a".to_owned()), None]
    );
    let released = tokio::time::Instant::now();
    assert_eq!(
        b.release(&release_req(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        released.elapsed(),
        MS(1),
        "released at the fast nodes' latency"
    );
    // The slow node's late grant lands (the acquire keeps running after the verdict), then
    // the release that went to every node deletes it.
    let landed = tokio::time::timeout(MS(200), async {
        while slow_releases.load(Ordering::SeqCst) == 0 {
            slow_applied.notified().await;
        }
    })
    .await;
    assert!(
        landed.is_ok(),
        "the slow node's release landed within its bound"
    );
    assert_eq!(
        c.owners("k"),
        [None, None, None],
        "nothing left on the slow node"
    );
}

/// Turns: on a node slower than the round, acquire, renew and release of one owner run in
/// that order; the renew, which no round awaits any more and which the release waits behind,
/// is skipped; the release is sent (also past its own round's deadline) and deletes the late
/// grant. Paused clock: exact.
#[tokio::test(start_paused = true)]
async fn late_requests_run_in_their_turn_and_a_superseded_one_is_skipped() {
    let c = Cluster::new(3);
    let spec = Arc::new(LeaseSpec::lock(["k"], None).unwrap());
    let nodes = slow_nodes(&c, &[0, 0, 300]);
    let slow_releases = Arc::clone(&nodes[2].releases);
    let b =
        RedlockBackend::new(nodes, RedlockConfig::new().with_operation_timeout(MS(400))).unwrap();
    let start = tokio::time::Instant::now();
    b.acquire(&acquire_req(&spec, "a", 10_000)).await.unwrap();
    assert_eq!(
        b.renew(&renew_req(&spec, "a", 10_000)).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert_eq!(
        b.release(&release_req(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        start.elapsed(),
        MS(0),
        "every round returned at the fast quorum"
    );
    assert_eq!(
        b.requests_running(),
        3,
        "node 2's acquire, renew and release"
    );
    assert_eq!(
        c.owners("k"),
        [None, None, None],
        "node 2's acquire has not landed yet"
    );
    tokio::time::timeout(MS(2000), b.settled()).await.unwrap();
    // Acquire applied at 300 ms; the renew's turn came then and was skipped; the release ran
    // from 300 to 600 ms.
    assert_eq!(start.elapsed(), MS(600));
    assert_eq!(slow_releases.load(Ordering::SeqCst), 1);
    assert_eq!(
        c.owners("k"),
        [None, None, None],
        "the late grant was released"
    );
    assert_eq!(b.requests_running(), 0);
}

/// A node whose raise round fails, to test the second round.
struct NoRaise(Node<MemoryBackend>);

#[async_trait]
impl LeaseBackend for NoRaise {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.0.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.0.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.0.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.0.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.0.inspect(spec).await
    }
}

#[async_trait]
impl RaiseCounter for NoRaise {
    async fn raise_counter(
        &self,
        _: &LeaseSpec,
        _: &Owner,
        _: Token,
    ) -> Result<bool, BackendError> {
        Err(BackendError::Unavailable(
            "raise refused by the test".into(),
        ))
    }
}

impl QuorumNode for NoRaise {
    fn id(&self) -> &str {
        self.0.id()
    }
}

#[tokio::test(start_paused = true)]
async fn the_acquisition_fails_when_the_raise_round_misses_the_quorum() {
    let c = Cluster::new(3);
    let spec = election();
    let nodes: Vec<Arc<dyn QuorumNode>> = c
        .nodes()
        .into_iter()
        .enumerate()
        .map(|(i, n)| -> Arc<dyn QuorumNode> {
            if i == 0 {
                Arc::new(n)
            } else {
                Arc::new(NoRaise(n))
            }
        })
        .collect();
    let b = RedlockBackend::new(nodes, RedlockConfig::new()).unwrap();
    let e = b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap_err();
    let q = quorum_error(&e);
    assert!(matches!(q.failure, RoundFailure::RaiseFailed { token, .. } if token.get() == 1));
    assert_eq!(q.successes, 1, "only node 0 raised");
    // The raise went to nodes 0 and 1 (the quorum that granted first); node 2's grant came
    // late and is cleaned up with the rest.
    assert_eq!(q.causes.iter().map(|c| c.index).collect::<Vec<_>>(), [1]);
    assert_eq!(c.owners("jobs:leader"), [None, None, None], "cleaned up");
}
