//! [`RedlockBackend`]: the quorum rounds.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::quorum::{self, validate_drift, validate_nodes};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ConfigError, FenceMark, LeaseBackend, LeaseInfo,
    LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Token,
};
use tokio::time::Instant;

use crate::error::{NodeCause, NodeFailure, QuorumError, QuorumOp, RoundFailure};
use crate::node::QuorumNode;
use crate::round::on_all;

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
}

impl Default for RedlockConfig {
    fn default() -> Self {
        RedlockConfig {
            drift_factor: DEFAULT_DRIFT_FACTOR,
            operation_timeout: None,
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
/// operation timeout; nothing is retried (retries are the driver's). A lease is held when a
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
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, LeaseSpec, Metadata, Owner, Ttl};
/// use lease_core::memory::{ManualClock, MemoryBackend};
/// use lease_redlock::{Node, RedlockBackend, RedlockConfig};
///
/// let clock = ManualClock::new();
/// let nodes = ["a", "b", "c"].map(|id| Node::new(id, MemoryBackend::new(clock.clone())));
/// let redlock = RedlockBackend::new(nodes.to_vec(), RedlockConfig::new())?;
/// let req = AcquireRequest {
///     spec: Arc::new(LeaseSpec::election("jobs")),
///     owner: Owner::new("host-1")?,
///     ttl: Ttl::new(Duration::from_secs(2))?,
///     metadata: Metadata::default(),
/// };
/// let outcome = redlock.acquire(&req).await?;
/// assert!(matches!(outcome, AcquireOutcome::Acquired { token: Some(t) } if t.get() == 1));
/// // In production: `Node::connect(redis::Client::open(url)?)` per primary.
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct RedlockBackend<N> {
    nodes: Vec<N>,
    quorum: usize,
    config: RedlockConfig,
}

impl<N: QuorumNode> fmt::Debug for RedlockBackend<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| n.id()).collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum)
            .field("config", &self.config)
            .finish()
    }
}

/// Sorted descending, the `q`-th value: the largest value that at least `q` of them reach.
fn qth_largest(mut values: Vec<Duration>, q: usize) -> Option<Duration> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(q.checked_sub(1)?).copied()
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
        let quorum = validate_nodes(&ids)?;
        validate_drift(config.drift_factor)?;
        if config.operation_timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroOperationTimeout);
        }
        Ok(RedlockBackend {
            nodes,
            quorum,
            config,
        })
    }

    /// The nodes, in the order given.
    pub fn nodes(&self) -> &[N] {
        &self.nodes
    }

    /// The quorum: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The settings.
    pub fn config(&self) -> &RedlockConfig {
        &self.config
    }

    fn failure(&self, index: usize, cause: NodeCause) -> NodeFailure {
        let address = self.nodes.get(index).map_or("", |n| n.id());
        NodeFailure::new(index, address, cause)
    }

    fn validity(&self, ttl: Duration, start: Instant) -> (Duration, Option<Duration>) {
        let elapsed = start.elapsed();
        (
            elapsed,
            quorum::validity(ttl, elapsed, self.config.drift_factor),
        )
    }

    /// A remaining time reported by nodes during a round that took `elapsed`, made
    /// conservative: minus the round's duration and the drift allowance; `None` if nothing is
    /// left.
    fn conservative(&self, remaining: Duration, elapsed: Duration) -> Option<Duration> {
        let d = quorum::drift(remaining, self.config.drift_factor);
        remaining
            .checked_sub(elapsed)?
            .checked_sub(d)
            .filter(|v| !v.is_zero())
    }

    /// Compare-and-delete on every node (`term` ignored: the nodes' counters differ); returns
    /// the nodes that did not answer.
    async fn cleanup(
        &self,
        spec: &std::sync::Arc<LeaseSpec>,
        owner: &Owner,
        bound: Duration,
    ) -> Vec<NodeFailure> {
        let req = ReleaseRequest {
            spec: std::sync::Arc::clone(spec),
            owner: owner.clone(),
            term: None,
        };
        let replies = on_all(&self.nodes, bound, |n| n.release(&req)).await;
        let failures: Vec<NodeFailure> = replies
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| r.err().map(|e| self.failure(i, NodeCause::Error(e))))
            .collect();
        if failures.is_empty() {
            tracing::debug!(keys = ?spec.keys(), "redlock: cleanup answered by every node");
        } else {
            tracing::warn!(
                keys = ?spec.keys(),
                unanswered = failures.len(),
                "redlock: cleanup not answered by every node; those keys expire with their TTL"
            );
        }
        failures
    }

    /// The error for a failed round: a quorum of permanent refusals stays permanent (retrying
    /// cannot help); anything else is a [`QuorumError`] in [`BackendError::Unavailable`] when
    /// the round provably left nothing applied ([`QuorumError::effect`]), else in
    /// [`BackendError::OutcomeUnknown`].
    fn round_error(&self, e: QuorumError) -> BackendError {
        let permanent = |pred: fn(&BackendError) -> bool| {
            e.causes
                .iter()
                .filter(|c| matches!(&c.cause, NodeCause::Error(b) if pred(b)))
                .count()
                >= self.quorum
        };
        if permanent(|b| matches!(b, BackendError::TokenExhausted(_))) {
            return BackendError::TokenExhausted(e.to_string());
        }
        // Permanent only when nothing may have been applied anywhere (a minority that
        // renewed, deleted or did not answer makes the round's outcome unknown).
        let settled = e.effect() == lease_core::Effect::NotApplied;
        if settled && permanent(|b| matches!(b, BackendError::Invalid(_))) {
            return BackendError::Invalid(e.to_string());
        }
        if settled && permanent(|b| !b.is_transient()) {
            return BackendError::Refused(e.to_string());
        }
        BackendError::from(e)
    }

    async fn acquire_round(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let ttl = req.ttl.get();
        let bound = self.config.operation_timeout_for(ttl);
        let fenced = req.spec.fence_key().is_some();
        let n = self.nodes.len();
        let start = Instant::now();
        let replies = on_all(&self.nodes, bound, |node| node.acquire(req)).await;

        let mut acquired: Vec<(usize, Option<Token>)> = Vec::new();
        let mut held: Vec<(Option<String>, Option<Duration>)> = Vec::new();
        let mut causes = Vec::new();
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(AcquireOutcome::Acquired { token }) if fenced && token.is_none() => {
                    causes.push(self.failure(
                        i,
                        NodeCause::Error(BackendError::Protocol(
                            "a fenced acquire granted no token".into(),
                        )),
                    ));
                }
                Ok(AcquireOutcome::Acquired { token }) => acquired.push((i, token)),
                Ok(AcquireOutcome::Held { holder, remaining }) => {
                    causes.push(self.failure(
                        i,
                        NodeCause::Held {
                            holder: holder.clone(),
                        },
                    ));
                    held.push((holder, remaining));
                }
                Ok(other) => causes.push(self.failure(
                    i,
                    NodeCause::Error(BackendError::Protocol(format!(
                        "unknown acquire outcome {other:?}"
                    ))),
                )),
                Err(e) => causes.push(self.failure(i, NodeCause::Error(e))),
            }
        }
        let (elapsed, validity) = self.validity(ttl, start);
        tracing::debug!(
            keys = ?req.spec.keys(),
            acquired = acquired.len(),
            held = held.len(),
            failed = n - acquired.len() - held.len(),
            quorum = self.quorum,
            ?elapsed,
            ?validity,
            "redlock: acquire round"
        );

        let mut successes = acquired.len();
        let failure = if acquired.len() < self.quorum {
            RoundFailure::NoQuorum
        } else if validity.is_none() {
            RoundFailure::ValidityExhausted { elapsed }
        } else if !fenced {
            return Ok(AcquireOutcome::Acquired { token: None });
        } else {
            // Fenced: the token is the maximum minted by the nodes that granted the lease;
            // a second round raises each of those nodes' counters to it, where the lease is
            // still ours, and must reach a quorum with validity left (same start instant).
            let Some(token) = quorum::fenced_quorum_token(acquired.iter().filter_map(|a| a.1))
            else {
                return Err(BackendError::Protocol(
                    "a fenced quorum without tokens".into(),
                ));
            };
            let targets: Vec<(usize, &N)> = acquired
                .iter()
                .filter_map(|(i, _)| self.nodes.get(*i).map(|node| (*i, node)))
                .collect();
            let raised = on_all(&targets, bound, |(_, node)| {
                node.raise_counter(&req.spec, &req.owner, token)
            })
            .await;
            let mut raised_ok = 0;
            for ((i, _), r) in targets.iter().zip(raised) {
                match r {
                    Ok(true) => raised_ok += 1,
                    Ok(false) => causes.push(self.failure(*i, NodeCause::NotOurs)),
                    Err(e) => causes.push(self.failure(*i, NodeCause::Error(e))),
                }
            }
            causes.sort_by_key(|c| c.index);
            let (elapsed, validity) = self.validity(ttl, start);
            tracing::debug!(
                keys = ?req.spec.keys(),
                %token,
                raised = raised_ok,
                quorum = self.quorum,
                ?elapsed,
                ?validity,
                "redlock: raise round"
            );
            if raised_ok >= self.quorum && validity.is_some() {
                return Ok(AcquireOutcome::Acquired { token: Some(token) });
            }
            successes = raised_ok;
            RoundFailure::RaiseFailed { token, elapsed }
        };

        // Failed: compare-and-delete on every node, including those that did not answer (their
        // request may have taken effect).
        let cleanup_failures = self.cleanup(&req.spec, &req.owner, bound).await;

        if held.len() >= self.quorum {
            // A quorum positively says someone else holds it: a lost race, not an error.
            let (holder, remaining) = self.dominant_holder(held, elapsed);
            return Ok(AcquireOutcome::Held { holder, remaining });
        }
        Err(self.round_error(QuorumError {
            op: QuorumOp::Acquire,
            failure,
            successes,
            quorum: self.quorum,
            nodes: n,
            causes,
            cleanup_failures,
        }))
    }

    /// The most frequent holder among the `Held` replies (ties: the one a lower node reported),
    /// and, when a quorum names it, how long at least a quorum of its keys remain.
    fn dominant_holder(
        &self,
        held: Vec<(Option<String>, Option<Duration>)>,
        elapsed: Duration,
    ) -> (Option<String>, Option<Duration>) {
        let mut counts: HashMap<Option<&str>, (usize, usize)> = HashMap::new();
        for (i, (h, _)) in held.iter().enumerate() {
            let e = counts.entry(h.as_deref()).or_insert((0, i));
            e.0 += 1;
        }
        let best = counts
            .into_iter()
            .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
            .map(|(h, _)| h.map(str::to_owned));
        let Some(holder) = best else {
            return (None, None);
        };
        let remainings: Vec<Duration> = held
            .iter()
            .filter(|(h, _)| *h == holder)
            .filter_map(|(_, r)| *r)
            .collect();
        let remaining =
            qth_largest(remainings, self.quorum).and_then(|r| self.conservative(r, elapsed));
        (holder, remaining)
    }

    async fn renew_round(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let ttl = req.ttl.get();
        let bound = self.config.operation_timeout_for(ttl);
        let start = Instant::now();
        let replies = on_all(&self.nodes, bound, |node| node.renew(req)).await;
        let mut renewed = 0;
        let mut not_ours = 0;
        let mut causes = Vec::new();
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(RenewOutcome::Renewed) => renewed += 1,
                Ok(RenewOutcome::NotHeld) => {
                    not_ours += 1;
                    causes.push(self.failure(i, NodeCause::NotOurs));
                }
                Ok(other) => causes.push(self.failure(
                    i,
                    NodeCause::Error(BackendError::Protocol(format!(
                        "unknown renew outcome {other:?}"
                    ))),
                )),
                Err(e) => causes.push(self.failure(i, NodeCause::Error(e))),
            }
        }
        let (elapsed, validity) = self.validity(ttl, start);
        tracing::debug!(
            keys = ?req.spec.keys(),
            renewed,
            not_ours,
            quorum = self.quorum,
            ?elapsed,
            ?validity,
            "redlock: renew round"
        );
        if renewed >= self.quorum && validity.is_some() {
            return Ok(RenewOutcome::Renewed);
        }
        if not_ours >= self.quorum {
            // Conclusively lost: clean up everywhere, including a minority that accepted the
            // extension, so it does not block the next holder.
            self.cleanup(&req.spec, &req.owner, bound).await;
            return Ok(RenewOutcome::NotHeld);
        }
        // Inconclusive (errors, timeouts, or no validity left): report it and leave the keys.
        // The driver tolerates it until its local deadline, renews again meanwhile, and
        // releases on every node when the term ends; deleting the keys here would let another
        // contender in while the driver still (rightly, by its rules) counts itself the holder.
        let failure = if renewed >= self.quorum {
            RoundFailure::ValidityExhausted { elapsed }
        } else {
            RoundFailure::NoQuorum
        };
        Err(self.round_error(QuorumError {
            op: QuorumOp::Renew,
            failure,
            successes: renewed,
            quorum: self.quorum,
            nodes: self.nodes.len(),
            causes,
            cleanup_failures: Vec::new(),
        }))
    }

    async fn release_round(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        // The term check compares one node's counter with the term's token; in a quorum the
        // nodes' counters differ, so it cannot be checked per node: ignored.
        let req = ReleaseRequest {
            term: None,
            ..req.clone()
        };
        let replies = on_all(&self.nodes, bound, |node| node.release(&req)).await;
        let mut released = 0;
        let mut not_ours = 0;
        let mut causes = Vec::new();
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(ReleaseOutcome::Released) => released += 1,
                Ok(ReleaseOutcome::NotHeld) => {
                    not_ours += 1;
                    causes.push(self.failure(i, NodeCause::NotOurs));
                }
                Ok(other) => causes.push(self.failure(
                    i,
                    NodeCause::Error(BackendError::Protocol(format!(
                        "unknown release outcome {other:?}"
                    ))),
                )),
                Err(e) => causes.push(self.failure(i, NodeCause::Error(e))),
            }
        }
        let errors = causes.len() - not_ours;
        tracing::debug!(
            keys = ?req.spec.keys(),
            released,
            not_ours,
            errors,
            quorum = self.quorum,
            "redlock: release round"
        );
        if errors > 0 {
            for c in causes
                .iter()
                .filter(|c| matches!(c.cause, NodeCause::Error(_)))
            {
                tracing::warn!(keys = ?req.spec.keys(), node = %c, "redlock: release not answered; the key expires with its TTL");
            }
        }
        if released >= self.quorum {
            return Ok(ReleaseOutcome::Released);
        }
        if not_ours >= self.quorum {
            return Ok(ReleaseOutcome::NotHeld);
        }
        Err(self.round_error(QuorumError {
            op: QuorumOp::Release,
            failure: RoundFailure::NoQuorum,
            successes: released,
            quorum: self.quorum,
            nodes: self.nodes.len(),
            causes,
            cleanup_failures: Vec::new(),
        }))
    }

    async fn remaining_round(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        let start = Instant::now();
        let replies = on_all(&self.nodes, bound, |node| node.remaining(spec, owner)).await;
        let elapsed = start.elapsed();
        let mut ours = Vec::new();
        let mut not_ours = 0;
        let mut causes = Vec::new();
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(Some(d)) => ours.push(d),
                Ok(None) => {
                    not_ours += 1;
                    causes.push(self.failure(i, NodeCause::NotOurs));
                }
                Err(e) => causes.push(self.failure(i, NodeCause::Error(e))),
            }
        }
        tracing::debug!(keys = ?spec.keys(), ours = ours.len(), not_ours, quorum = self.quorum, ?elapsed, "redlock: remaining round");
        if ours.len() >= self.quorum {
            return Ok(qth_largest(ours, self.quorum).and_then(|r| self.conservative(r, elapsed)));
        }
        if not_ours >= self.quorum {
            return Ok(None);
        }
        Err(self.round_error(QuorumError {
            op: QuorumOp::Remaining,
            failure: RoundFailure::NoQuorum,
            successes: ours.len(),
            quorum: self.quorum,
            nodes: self.nodes.len(),
            causes,
            cleanup_failures: Vec::new(),
        }))
    }

    async fn inspect_round(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        let bound = self.config.operation_timeout_without_ttl();
        let start = Instant::now();
        let replies = on_all(&self.nodes, bound, |node| node.inspect(spec)).await;
        let elapsed = start.elapsed();
        let mut infos = Vec::new();
        let mut causes = Vec::new();
        for (i, r) in replies.into_iter().enumerate() {
            match r {
                Ok(info) => infos.push(info),
                Err(e) => causes.push(self.failure(i, NodeCause::Error(e))),
            }
        }
        tracing::debug!(keys = ?spec.keys(), answered = infos.len(), quorum = self.quorum, ?elapsed, "redlock: inspect round");
        if infos.len() < self.quorum {
            return Err(self.round_error(QuorumError {
                op: QuorumOp::Inspect,
                failure: RoundFailure::NoQuorum,
                successes: infos.len(),
                quorum: self.quorum,
                nodes: self.nodes.len(),
                causes,
                cleanup_failures: Vec::new(),
            }));
        }
        let mut out = LeaseInfo {
            counter: infos.iter().filter_map(|i| i.counter).max(),
            mark: infos
                .iter()
                .map(|i| i.mark)
                .max()
                .unwrap_or(FenceMark::NONE),
            ..LeaseInfo::default()
        };
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for h in infos.iter().filter_map(|i| i.holder.as_deref()) {
            match votes.iter_mut().find(|(v, _)| *v == h) {
                Some((_, c)) => *c += 1,
                None => votes.push((h, 1)),
            }
        }
        if let Some((holder, _)) = votes.into_iter().find(|(_, c)| *c >= self.quorum) {
            let theirs: Vec<&LeaseInfo> = infos
                .iter()
                .filter(|i| i.holder.as_deref() == Some(holder))
                .collect();
            out.holder = Some(holder.to_owned());
            out.metadata = theirs.first().and_then(|i| i.metadata.clone());
            out.remaining = qth_largest(
                theirs.iter().filter_map(|i| i.remaining).collect(),
                self.quorum,
            )
            .and_then(|r| self.conservative(r, elapsed));
        }
        Ok(out)
    }
}

#[async_trait]
impl<N: QuorumNode> LeaseBackend for RedlockBackend<N> {
    /// One acquire round on every node (and, for a fenced lease, the raise round). Success
    /// needs a quorum and positive validity. On failure every node is cleaned up, then: a
    /// quorum of nodes held by others is [`AcquireOutcome::Held`] (the most frequent holder);
    /// anything else is a [`QuorumError`] (see `docs/redlock.md`).
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.acquire_round(req).await
    }

    /// Renewed when a quorum renewed with positive validity; [`RenewOutcome::NotHeld`] (after
    /// cleanup on every node) when a quorum says the lease is not ours; otherwise a
    /// [`QuorumError`] (inconclusive; nothing deleted).
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.renew_round(req).await
    }

    /// Compare-and-delete on every node; `req.term` is ignored. Released when a quorum
    /// released, [`ReleaseOutcome::NotHeld`] when a quorum says not ours, otherwise a
    /// [`QuorumError`].
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.release_round(req).await
    }

    /// The time a quorum of nodes still hold the lease for `owner`: the `q`-th largest of the
    /// nodes' remaining TTLs (the minimum over the best quorum), minus the round's duration
    /// and the drift allowance; `None` when a quorum says it is not ours (or nothing is left).
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.remaining_round(spec, owner).await
    }

    /// Needs answers from a quorum. The holder is the one a quorum of nodes name (else none),
    /// with its metadata and remaining time as [`LeaseBackend::remaining`] defines it; the
    /// counter and the mark are the maxima over the answers.
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inspect_round(spec).await
    }

    /// Every node must accept the lease.
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.nodes().iter().try_for_each(|n| n.check_spec(spec))
    }

    /// The drift allowance `ceil(ttl × drift) + 2 ms`: the driver's local deadline must not
    /// outlast the validity a quorum round computes.
    fn validity_margin(&self, ttl: lease_core::Ttl) -> Duration {
        lease_core::quorum::drift(ttl.get(), self.config().drift_factor())
    }
}
