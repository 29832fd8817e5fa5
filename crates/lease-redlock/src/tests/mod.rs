//! Unit tests of the round logic over in-memory nodes, on tokio's paused clock (the nodes'
//! keys live on a `ManualClock` the tests move by hand). Real-server tests are in `tests/`.
//!
//! Here: construction and acquire; `late.rs`: slow nodes, late requests and their turns, the
//! raise round; `ops.rs`: renew, release, remaining, inspect, and an elector over a quorum.

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

mod late;
use late::slow_nodes;
mod ops;
