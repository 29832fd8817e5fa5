//! Unit tests of the round logic over in-memory nodes, on tokio's paused clock (the nodes'
//! keys live on a `ManualClock` the tests move by hand). Real-server tests are in `tests/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::memory::{Faults, ManualClock, MemoryBackend};
use lease_core::quorum::QuorumConfigError;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ConfigError, LeaseBackend, LeaseInfo, LeaseSpec,
    Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Token, Ttl,
};

use crate::{
    Node, NodeCause, QuorumError, QuorumNode, QuorumOp, RaiseCounter, RedlockBackend,
    RedlockConfig, RoundFailure,
};

const MS: fn(u64) -> Duration = Duration::from_millis;

struct Cluster {
    clock: ManualClock,
    stores: Vec<MemoryBackend>,
}

impl Cluster {
    fn new(n: usize) -> Self {
        let clock = ManualClock::new();
        let stores = (0..n).map(|_| MemoryBackend::new(clock.clone())).collect();
        Cluster { clock, stores }
    }

    fn nodes(&self) -> Vec<Node<MemoryBackend>> {
        self.stores
            .iter()
            .enumerate()
            .map(|(i, s)| Node::new(format!("mem-{i}"), s.clone()))
            .collect()
    }

    fn backend_of<N: QuorumNode>(&self, nodes: Vec<N>) -> RedlockBackend<N> {
        RedlockBackend::new(nodes, RedlockConfig::new()).unwrap()
    }

    fn backend(&self) -> RedlockBackend<Node<MemoryBackend>> {
        RedlockBackend::new(self.nodes(), RedlockConfig::new()).unwrap()
    }

    /// The owner stored at `key` on every node.
    fn owners(&self, key: &str) -> Vec<Option<String>> {
        self.stores
            .iter()
            .map(|s| {
                s.get(key)
                    .map(|v| lease_core::backend::split_stored(&v).0.to_owned())
            })
            .collect()
    }

    fn counters(&self, fence: &str) -> Vec<Option<String>> {
        self.stores.iter().map(|s| s.get(fence)).collect()
    }
}

fn acquire_req(spec: &Arc<LeaseSpec>, owner: &str, ttl_ms: u64) -> AcquireRequest {
    AcquireRequest::new(
        Arc::clone(spec),
        Owner::new(owner).unwrap(),
        Ttl::new(MS(ttl_ms)).unwrap(),
    )
}

fn renew_req(spec: &Arc<LeaseSpec>, owner: &str, ttl_ms: u64) -> RenewRequest {
    RenewRequest::new(
        Arc::clone(spec),
        Owner::new(owner).unwrap(),
        Ttl::new(MS(ttl_ms)).unwrap(),
    )
}

fn release_req(spec: &Arc<LeaseSpec>, owner: &str, term: Option<u64>) -> ReleaseRequest {
    ReleaseRequest::new(Arc::clone(spec), Owner::new(owner).unwrap())
        .with_term_token(term.map(|t| Token::new(t).unwrap()))
}

fn election() -> Arc<LeaseSpec> {
    Arc::new(LeaseSpec::election("jobs"))
}

fn token(outcome: AcquireOutcome) -> Token {
    match outcome {
        AcquireOutcome::Acquired { token: Some(t), .. } => t,
        other => panic!("expected a fenced acquisition, got {other:?}"),
    }
}

fn quorum_error(e: &BackendError) -> &QuorumError {
    QuorumError::find(e).unwrap_or_else(|| panic!("not a quorum error: {e:?}"))
}

/// Never answers (its delay is on a manual clock nobody moves).
fn stall(store: &MemoryBackend) {
    store.set_faults(Faults::default().with_request_delay(Some(Duration::from_secs(3600))));
}

#[test]
fn construction_refuses_bad_node_sets_and_settings() {
    let c = Cluster::new(5);
    let nodes = c.nodes();
    let err = |nodes: Vec<Node<MemoryBackend>>, config| {
        RedlockBackend::new(nodes, config).map(|_| ()).unwrap_err()
    };
    assert_eq!(
        err(nodes[..1].to_vec(), RedlockConfig::new()),
        ConfigError::Quorum(QuorumConfigError::TooFew(1))
    );
    assert_eq!(
        err(nodes[..4].to_vec(), RedlockConfig::new()),
        ConfigError::Quorum(QuorumConfigError::Even(4))
    );
    let dup = vec![nodes[0].clone(), nodes[1].clone(), nodes[0].clone()];
    assert_eq!(
        err(dup, RedlockConfig::new()),
        ConfigError::Quorum(QuorumConfigError::Duplicate("mem-0".into()))
    );
    for bad in [-0.1, 0.5, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            err(
                nodes[..3].to_vec(),
                RedlockConfig::new().with_drift_factor(bad)
            ),
            ConfigError::DriftFactor(_)
        ));
    }
    assert_eq!(
        err(
            nodes[..3].to_vec(),
            RedlockConfig::new().with_operation_timeout(Duration::ZERO)
        ),
        ConfigError::ZeroOperationTimeout
    );
    let ok =
        RedlockBackend::new(nodes.clone(), RedlockConfig::new().with_drift_factor(0.0)).unwrap();
    assert_eq!(ok.quorum(), 3);
    assert_eq!(ok.nodes().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn acquires_on_every_node_with_the_first_token() {
    let c = Cluster::new(3);
    let b = c.backend();
    let spec = election();
    let t = token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    assert_eq!(t.get(), 1);
    assert_eq!(c.owners("jobs:leader"), vec![Some("a".to_owned()); 3]);
    assert_eq!(c.counters("jobs:fence"), vec![Some("1".to_owned()); 3]);
    // Another owner finds it held by a quorum: a lost race, not an error.
    let held = b.acquire(&acquire_req(&spec, "b", 1000)).await.unwrap();
    assert!(
        matches!(&held, AcquireOutcome::Held { holder: Some(h), remaining: Some(_), .. } if h == "a"),
        "{held:?}"
    );
    assert_eq!(c.owners("jobs:leader"), vec![Some("a".to_owned()); 3]);
}

#[tokio::test(start_paused = true)]
async fn unfenced_locks_get_no_token() {
    let c = Cluster::new(3);
    let b = c.backend();
    let spec = Arc::new(LeaseSpec::lock(["k1", "k2"], None).unwrap());
    let out = b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap();
    assert!(matches!(out, AcquireOutcome::Acquired { token: None, .. }));
    assert_eq!(c.owners("k2"), vec![Some("a".to_owned()); 3]);
}

#[tokio::test(start_paused = true)]
async fn a_minority_down_still_acquires() {
    let c = Cluster::new(3);
    c.stores[1].set_unavailable(true);
    let b = c.backend();
    let t = token(
        b.acquire(&acquire_req(&election(), "a", 1000))
            .await
            .unwrap(),
    );
    assert_eq!(t.get(), 1);
    assert_eq!(
        c.owners("jobs:leader"),
        [Some("a".to_owned()), None, Some("a".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_majority_down_fails_with_per_node_causes_and_cleans_up() {
    let c = Cluster::new(3);
    c.stores[0].set_unavailable(true);
    c.stores[2].set_unavailable(true);
    let b = c.backend();
    let e = b
        .acquire(&acquire_req(&election(), "a", 1000))
        .await
        .unwrap_err();
    assert!(e.is_transient());
    let q = quorum_error(&e);
    assert!(q.is_not_acquired() && !q.is_lost());
    assert_eq!(q.op, QuorumOp::Acquire);
    assert_eq!(q.failure, RoundFailure::NoQuorum);
    assert_eq!((q.successes, q.quorum, q.nodes), (1, 2, 3));
    let failed: Vec<(usize, &str)> = q
        .causes
        .iter()
        .map(|c| (c.index, c.address.as_str()))
        .collect();
    assert_eq!(failed, [(0, "mem-0"), (2, "mem-2")]);
    assert!(
        q.causes
            .iter()
            .all(|c| matches!(c.cause, NodeCause::Error(BackendError::Unavailable(_))))
    );
    // The cleanup reached node 1 (and failed on the two others, reported).
    assert_eq!(c.owners("jobs:leader"), [None, None, None]);
    assert_eq!(q.cleanup_failures.len(), 2);
    let text = e.to_string();
    assert!(
        text.contains("1 of 3 nodes succeeded, quorum is 2"),
        "{text}"
    );
    assert!(text.contains("node 2 (mem-2)"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn partial_acquisition_is_cleaned_up_and_others_values_are_kept() {
    let c = Cluster::new(3);
    let spec = election();
    // Another owner holds node 0; node 2 is down: only node 1 can be won.
    c.stores[0]
        .acquire_now(&acquire_req(&spec, "other", 5000))
        .unwrap();
    c.stores[2].set_unavailable(true);
    let b = c.backend();
    let e = b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap_err();
    let q = quorum_error(&e);
    assert_eq!(q.successes, 1);
    assert!(matches!(&q.causes[0].cause, NodeCause::Held { holder: Some(h) } if h == "other"));
    // Nothing of ours remains; the other owner's value is untouched.
    assert_eq!(
        c.owners("jobs:leader"),
        [Some("other".to_owned()), None, None]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stalled_node_costs_nothing_once_a_quorum_answered() {
    let c = Cluster::new(3);
    stall(&c.stores[2]);
    let b = c.backend();
    let start = tokio::time::Instant::now();
    let t = token(
        b.acquire(&acquire_req(&election(), "a", 1000))
            .await
            .unwrap(),
    );
    assert_eq!(t.get(), 1);
    // Paused clock: the round returned when nodes 0 and 1 had granted and raised, without
    // waiting for node 2 (its request finishes in the background, bounded by its deadline).
    assert_eq!(start.elapsed(), MS(0));
    assert_eq!(
        c.owners("jobs:leader"),
        [Some("a".to_owned()), Some("a".to_owned()), None]
    );
}

#[tokio::test(start_paused = true)]
async fn no_validity_left_is_a_failure_even_with_a_quorum() {
    let c = Cluster::new(3);
    stall(&c.stores[2]);
    // Nodes 0 and 1 answer after 995 ms: a quorum, but the validity (1000 − 995 − 12 ms) is
    // gone.
    let nodes = slow_nodes(&c, &[995, 995, 0]);
    let b =
        RedlockBackend::new(nodes, RedlockConfig::new().with_operation_timeout(MS(1000))).unwrap();
    let e = b
        .acquire(&acquire_req(&election(), "a", 1000))
        .await
        .unwrap_err();
    let q = quorum_error(&e);
    assert_eq!(
        q.failure,
        RoundFailure::ValidityExhausted { elapsed: MS(995) }
    );
    assert_eq!(q.successes, 2);
    assert!(
        q.any_timeout(),
        "node 2's late acquire timed out during the cleanup"
    );
    assert_eq!(c.owners("jobs:leader"), [None, None, None], "cleaned up");
}

#[tokio::test(start_paused = true)]
async fn fenced_quorum_token_is_the_maximum_and_is_raised_on_the_quorum() {
    let c = Cluster::new(3);
    let spec = election();
    // Node 0's counter is ahead (an earlier acquisition that reached only it).
    c.stores[0].put("jobs:fence", "5");
    let b = c.backend();
    let t = token(b.acquire(&acquire_req(&spec, "a", 1000)).await.unwrap());
    assert_eq!(t.get(), 6, "max(6, 1): the quorum of nodes 0 and 1 decided");
    // Node 2's grant (token 1) came after the quorum: it is held, not raised. Its counter is
    // below the token, which is safe: any later quorum meets node 0 or 1, raised to 6.
    let some = |v: &[&str]| v.iter().map(|s| Some((*s).to_owned())).collect::<Vec<_>>();
    assert_eq!(c.counters("jobs:fence"), some(&["6", "6", "1"]));
    assert_eq!(
        c.stores
            .iter()
            .map(|s| s.get("jobs:fence:applied"))
            .collect::<Vec<_>>(),
        some(&["6", "6", "1"])
    );
    assert_eq!(c.owners("jobs:leader"), vec![Some("a".to_owned()); 3]);
    assert_eq!(
        b.release(&release_req(&spec, "a", None)).await.unwrap(),
        ReleaseOutcome::Released
    );
    // The next acquisition reaches only nodes 1 and 2: their counters were raised, so its
    // token is still greater.
    c.stores[0].set_unavailable(true);
    let t2 = token(b.acquire(&acquire_req(&spec, "b", 1000)).await.unwrap());
    assert_eq!(t2.get(), 7);
}

/// A node whose every call waits `delay_ms` of tokio time before reaching the store, and
/// signals `applied` after each call (so a test can wait for a late request to land).
struct Slow {
    node: Node<MemoryBackend>,
    delay_ms: Arc<AtomicU64>,
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

fn slow_nodes(c: &Cluster, delays: &[u64]) -> Vec<Slow> {
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
