//! [`RedlockBackend`]: the quorum rounds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::quorum::{Quorum, Round, Verdict};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ConfigError, Instant, LeaseBackend, LeaseInfo,
    LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};

use crate::node::QuorumNode;
use crate::notify::Fanin;
use crate::round::{Flights, LateRequests, Reads, drive};

/// The default drift factor: 1 % of the TTL (plus 2 ms) is set aside for clock-rate drift.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// The cap of the default operation timeout, which is `min(ttl / 5, 500 ms)`.
pub const DEFAULT_OPERATION_TIMEOUT_CAP: Duration = Duration::from_millis(500);

/// Settings of a [`RedlockBackend`], validated by [`RedlockBackend::new`].
///
/// ```
/// use std::time::Duration;
/// use lease_redlock::RedlockConfig;
/// let c = RedlockConfig::new();
/// assert_eq!(c.drift_factor(), 0.01);
/// assert_eq!(c.operation_timeout_for(Duration::from_secs(1)), Duration::from_millis(200));
/// assert_eq!(c.operation_timeout_for(Duration::from_secs(30)), Duration::from_millis(500));
/// let c = c.with_operation_timeout(Duration::from_millis(50));
/// assert_eq!(c.operation_timeout_for(Duration::from_secs(30)), Duration::from_millis(50));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedlockConfig {
    drift_factor: f64,
    operation_timeout: Option<Duration>,
    late: LateRequests,
}

impl Default for RedlockConfig {
    fn default() -> Self {
        RedlockConfig {
            drift_factor: DEFAULT_DRIFT_FACTOR,
            operation_timeout: None,
            late: LateRequests::Ordered,
        }
    }
}

impl RedlockConfig {
    /// Defaults: drift factor 0.01, operation timeout `min(ttl / 5, 500 ms)` per request.
    pub fn new() -> Self {
        Self::default()
    }

    /// The drift factor, in `[0, 0.5)`: `ceil(ttl × factor) + 2 ms` is subtracted from every
    /// validity.
    pub fn with_drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// A fixed bound on each node's reply in every round (default: `min(ttl / 5, 500 ms)` of
    /// the request's TTL; 500 ms for requests without a TTL).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// **Negative controls for tests only: anything but [`LateRequests::Ordered`] is
    /// unsafe.** See [`LateRequests`].
    #[doc(hidden)]
    pub fn with_late_requests_unsafe(mut self, late: LateRequests) -> Self {
        self.late = late;
        self
    }

    /// The drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// The bound on each node's reply for a request with `ttl`.
    pub fn operation_timeout_for(&self, ttl: Duration) -> Duration {
        self.operation_timeout
            .unwrap_or_else(|| (ttl / 5).min(DEFAULT_OPERATION_TIMEOUT_CAP))
    }

    /// The bound on each node's reply for a request without a TTL (release, remaining,
    /// inspect): the fixed operation timeout, or 500 ms.
    pub fn operation_timeout_without_ttl(&self) -> Duration {
        self.operation_timeout
            .unwrap_or(DEFAULT_OPERATION_TIMEOUT_CAP)
    }
}

/// A [`LeaseBackend`] over N independent primaries (Redlock), so the election and the locks of
/// `lease-tokio` run over a quorum unchanged.
///
/// Every operation is one round: one request to every node, concurrently, each bounded by the
/// operation timeout; nothing is retried (retries are the driver's). The backend is the I/O
/// driver of `lease-core`'s sans-IO round machine ([`lease_core::quorum::Round`]), which holds
/// every rule below; the backend sends its requests, bounds them, reads tokio's monotonic clock
/// and feeds the replies back. A lease is held when a
/// quorum (`N/2 + 1`) of nodes hold it; an acquisition or a renewal counts only with a quorum
/// **and** positive validity, `ttl − elapsed − (ceil(ttl × drift) + 2 ms)`, measured from one
/// monotonic start instant. A failed acquisition is cleaned up (compare-and-delete) on every
/// node. A fenced lease gets a **fenced quorum token**: the maximum of the tokens the quorum's
/// nodes minted, established on a quorum by a second round. See `docs/redlock.md` for the
/// outcome mapping, the guarantees and the assumptions.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, LeaseSpec, Owner, Ttl};
/// use lease_core::memory::{ManualClock, MemoryBackend};
/// use lease_redlock::{Node, RedlockBackend, RedlockConfig};
///
/// let clock = ManualClock::new();
/// let nodes = ["a", "b", "c"].map(|id| Node::new(id, MemoryBackend::new(clock.clone())));
/// let redlock = RedlockBackend::new(nodes.to_vec(), RedlockConfig::new())?;
/// let req = AcquireRequest::new(
///     Arc::new(LeaseSpec::election("jobs")),
///     Owner::new("host-1")?,
///     Ttl::new(Duration::from_secs(2))?,
/// );
/// let outcome = redlock.acquire(&req).await?;
/// assert!(matches!(outcome, AcquireOutcome::Acquired { token: Some(t), .. } if t.get() == 1));
/// // In production: `Node::connect(redis::Client::open(url)?)` per primary.
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct RedlockBackend<N> {
    nodes: Arc<[N]>,
    machine: Quorum,
    config: RedlockConfig,
    flights: Arc<Flights>,
    /// Release notices relayed from every node (see [`crate::notify`]).
    fanin: Arc<Fanin>,
}

impl<N: QuorumNode> fmt::Debug for RedlockBackend<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| n.id()).collect::<Vec<_>>(),
            )
            .field("quorum", &self.machine.quorum())
            .field("config", &self.config)
            .finish()
    }
}

impl<N: QuorumNode> RedlockBackend<N> {
    /// A backend over `nodes`: an odd number, at least 3, no identity ([`QuorumNode::id`])
    /// twice; the drift factor in `[0, 0.5)`; a fixed operation timeout, if any, positive.
    ///
    /// ```
    /// use lease_core::{ConfigError, memory::{ManualClock, MemoryBackend}, quorum::QuorumConfigError};
    /// use lease_redlock::{Node, RedlockBackend, RedlockConfig};
    /// let node = |id: &str| Node::new(id, MemoryBackend::new(ManualClock::new()));
    /// let err = RedlockBackend::new(vec![node("a"), node("b")], RedlockConfig::new()).unwrap_err();
    /// assert_eq!(err, ConfigError::Quorum(QuorumConfigError::TooFew(2)));
    /// let err = RedlockBackend::new(vec![node("a"), node("b"), node("a")], RedlockConfig::new()).unwrap_err();
    /// assert_eq!(err, ConfigError::Quorum(QuorumConfigError::Duplicate("a".into())));
    /// let err = RedlockBackend::new(vec![node("a"), node("b"), node("c")], RedlockConfig::new().with_drift_factor(0.5)).unwrap_err();
    /// assert_eq!(err, ConfigError::DriftFactor(0.5));
    /// ```
    pub fn new(nodes: Vec<N>, config: RedlockConfig) -> Result<Self, ConfigError> {
        let ids: Vec<&str> = nodes.iter().map(|n| n.id()).collect();
        let machine = Quorum::new(&ids, config.drift_factor)?;
        if config.operation_timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroOperationTimeout);
        }
        Ok(RedlockBackend {
            nodes: nodes.into(),
            machine,
            config,
            flights: Arc::default(),
            fanin: Arc::default(),
        })
    }

    /// The nodes, in the order given.
    pub fn nodes(&self) -> &[N] {
        &self.nodes
    }

    /// The quorum: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.machine.quorum()
    }

    /// The settings.
    pub fn config(&self) -> &RedlockConfig {
        &self.config
    }

    /// How many node requests of this backend (and its clones) are still running: sent and
    /// unanswered, or waiting for their turn behind an earlier request of the same lease and
    /// owner on the same node. A round returns at its verdict, which may come before every
    /// node answered; the rest finish in the background, each bounded by the operation
    /// timeout once sent.
    pub fn requests_running(&self) -> usize {
        self.flights.count()
    }

    /// Waits until no node request of this backend (and its clones) is running (see
    /// [`RedlockBackend::requests_running`]): every late request has been answered or
    /// abandoned. For tests and orderly shutdown; bound the wait with a timeout of your own
    /// (each request is bounded, but new rounds may start meanwhile).
    pub async fn settled(&self) {
        self.flights.settled().await
    }

    /// Runs the round `make` builds (given its start instant) over the nodes.
    async fn drive(&self, make: impl FnOnce(Instant) -> Round) -> Result<Verdict, BackendError> {
        drive(
            &self.nodes,
            &self.flights,
            self.config.late,
            Reads::Inspect,
            make,
        )
        .await
    }
}

#[async_trait]
impl<N: QuorumNode> LeaseBackend for RedlockBackend<N> {
    /// One acquire round on every node (and, for a fenced lease, the raise round). Success
    /// needs a quorum and positive validity. On failure every node is cleaned up, then: a
    /// quorum of nodes held by others is [`AcquireOutcome::Held`] (the most frequent holder);
    /// anything else is a [`QuorumError`](crate::QuorumError) (see `docs/redlock.md`).
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let bound = self.config.operation_timeout_for(req.ttl.get());
        self.drive(|now| self.machine.acquire(req.clone(), bound, now))
            .await?
            .into_acquire()
    }

    /// Renewed when a quorum renewed with positive validity; [`RenewOutcome::NotHeld`] (after
    /// cleanup on every node) when a quorum says the lease is not ours; otherwise a
    /// [`QuorumError`](crate::QuorumError) (inconclusive; nothing deleted).
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let bound = self.config.operation_timeout_for(req.ttl.get());
        self.drive(|now| self.machine.renew(req.clone(), bound, now))
            .await?
            .into_renew()
    }

    /// Compare-and-delete on every node; `req.term` is ignored. Released when a quorum
    /// released, [`ReleaseOutcome::NotHeld`] when a quorum says not ours, otherwise a
    /// [`QuorumError`](crate::QuorumError).
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        self.drive(|now| self.machine.release(req.clone(), bound, now))
            .await?
            .into_release()
    }

    /// The time a quorum of nodes still hold the lease for `owner`: the `q`-th largest of the
    /// nodes' remaining TTLs (the minimum over the best quorum), minus the round's duration
    /// and the drift allowance; `None` when a quorum says it is not ours (or nothing is left).
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        let spec = Arc::new(spec.clone());
        self.drive(|now| self.machine.remaining(spec, owner.clone(), bound, now))
            .await?
            .into_remaining()
    }

    /// Needs answers from a quorum. The holder is the one a quorum of nodes name (else none),
    /// with its metadata and remaining time as [`LeaseBackend::remaining`] defines it; the
    /// counter and the mark are the maxima over the answers.
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        let spec = Arc::new(spec.clone());
        self.drive(|now| self.machine.inspect(spec, bound, now))
            .await?
            .into_inspect()
    }

    /// The inspect round of [`inspect`](Self::inspect), each node read with its own
    /// [`observe`](LeaseBackend::observe): on Redis nodes a watcher's read also sets the
    /// holder's waiter mark, so that the holder's release publishes on that node and a
    /// watcher with no contender beside it (lease-tokio's `LeaderWatch`) learns of the release
    /// by notice, not at its poll. The verdict is the inspect round's.
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        let spec = Arc::new(spec.clone());
        drive(
            &self.nodes,
            &self.flights,
            self.config.late,
            Reads::Observe,
            |now| self.machine.inspect(spec, bound, now),
        )
        .await?
        .into_inspect()
    }

    /// Every node must accept the lease.
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.nodes().iter().try_for_each(|n| n.check_spec(spec))
    }

    /// Refused: a count of permits over independent nodes bounds nothing (with three nodes
    /// and two permits, three holders can win the majorities {1, 2}, {2, 3} and {1, 3} while
    /// no node holds more than two). The permit operations keep the trait's refusing defaults.
    fn check_semaphore(&self, _spec: &LeaseSpec) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(
            "Redlock offers no semaphores: permits counted on independent nodes do not bound the \
             holders (majorities of different nodes can each stay within the count); use one \
             Redis primary (with replicas and WAIT) for semaphores"
                .into(),
        ))
    }

    /// Refused: a fair queue needs one order of waiters, and independent nodes each keep their
    /// own (a waiter first on one majority need not be first on another), so granting the head
    /// of a quorum would take an agreement round per attempt. The fair operations keep the
    /// trait's refusing defaults.
    fn check_fair(&self, _spec: &LeaseSpec) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(
            "Redlock offers no fair locks: each independent node keeps its own queue order, and              no majority vote makes one order of waiters; use one Redis primary (with replicas              and WAIT) for fair locks"
                .into(),
        ))
    }

    /// Refused: readers are not built for a quorum. Exclusion itself would follow from
    /// intersecting majorities, as a lock's does, but the round's fenced-token raise
    /// (`raise.lua`) and its cleanup are a lock's, judged on a writer's string, and a reader's
    /// hold would need its own; a waiting writer's mark on independent nodes lapses on
    /// independent clocks. The shared operations keep the trait's refusing defaults.
    /// Refused, before any round trip: a forced release must delete the lease and raise the
    /// fence mark in one atomic step, and a quorum of independent nodes has no such step (a
    /// mark raised on a minority is neither raised nor not, and the fenced resource's mark is
    /// not on the nodes anyway).
    async fn force_release(
        &self,
        _spec: &LeaseSpec,
    ) -> Result<lease_core::ForceReleaseOutcome, BackendError> {
        Err(BackendError::Unsupported(
            "Redlock offers no forced release: deleting the lease and raising the fence mark              cannot be one atomic step on a quorum of independent nodes; let the holder's              lease expire, or use one Redis primary"
                .into(),
        ))
    }

    fn check_shared(&self, _spec: &LeaseSpec) -> Result<(), BackendError> {
        Err(BackendError::Unsupported(
            "Redlock offers no read-write locks: the quorum round's token raise and cleanup are \
             a lock's, not a reader's; use one Redis primary (with replicas and WAIT) for \
             read-write locks"
                .into(),
        ))
    }

    /// A watch fed by every node's notices (each node's backend needs its own subscriber, as
    /// [`Node::connect`](crate::Node::connect) gives it); see [`crate::notify`].
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let key = spec.keys().first()?;
        self.fanin.watch(key, role, || {
            self.nodes
                .iter()
                .filter_map(|n| n.release_watch(spec, WatchRole::Observer))
                .collect()
        })
    }

    /// The drift allowance `ceil(ttl × drift) + 2 ms`: the driver's local deadline must not
    /// outlast the validity a quorum round computes.
    fn validity_margin(&self, ttl: lease_core::Ttl) -> Duration {
        lease_core::quorum::drift(ttl.get(), self.machine.drift_factor())
    }

    /// Every node's report (each bounded by the operation timeout), combined by
    /// [`StoreReport::worst`](lease_core::preflight::StoreReport::worst): the quorum's tokens are only as durable as its least durable
    /// node (a node that loses its counter can lower the quorum maximum; `docs/redlock.md`,
    /// assumption A1). A node that cannot be asked is unknown, with its error in the notes.
    async fn preflight(&self) -> Result<lease_core::preflight::StoreReport, BackendError> {
        use lease_core::preflight::StoreReport;
        let bound = self.config.operation_timeout_for(Duration::MAX);
        let mut reports = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            let report = match tokio::time::timeout(bound, node.preflight()).await {
                Ok(Ok(report)) => report,
                Ok(Err(e)) => StoreReport::unknown(format!("could not be asked: {e}")),
                Err(_) => StoreReport::unknown(format!("no answer within {bound:?}")),
            };
            let label = self.machine.address(i).unwrap_or("?").to_owned();
            reports.push((label, report));
        }
        Ok(StoreReport::worst(
            reports.iter().map(|(label, r)| (label.as_str(), r)),
        ))
    }
}
