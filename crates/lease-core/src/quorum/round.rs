//! The Redlock round as a sans-IO machine: [`Quorum`] makes [`Round`]s.
//!
//! Sans-IO in the manner of quinn-proto's `Connection` (and of [`crate::Election`]): the
//! machine decides what to send to which node and what the replies mean; the driver (for
//! example `lease-redlock`'s `RedlockBackend`) does the I/O and reads the clock. One
//! [`Round`] is one backend operation (acquire, renew, release, remaining, inspect) over every
//! node, made of one or more **phases**: an acquire of a fenced lease is the acquire phase,
//! then the raise phase; a failed acquire ends with a cleanup phase on every node.
//!
//! The driver loops:
//!
//! 1. send every request [`Round::poll_request`] returns, concurrently, to the node it names
//!    ([`NodeRequest::node`]), each bounded by its [`NodeRequest::deadline`];
//! 2. feed each request's reply — or [`NodeReply::TimedOut`] at its deadline — to
//!    [`Round::handle_reply`] **as it arrives**, with the current instant; **every** polled
//!    request gets exactly one reply (or [`Round::handle_timeout`] once [`Round::poll_timeout`]
//!    has passed, which times out every request whose deadline it is);
//! 3. when [`Round::poll_verdict`] returns the verdict, the round is over; otherwise go to 1
//!    (a phase may have ended and the next phase's requests be ready).
//!
//! **Early verdict.** A phase is judged as soon as the replies still missing can no longer change
//! its outcome, never earlier: acquire and raise when a quorum succeeded (validity judged at
//! that instant: waiting only shrinks it) or can no longer succeed; renew and release when a
//! quorum succeeded, a quorum said "not ours", or neither can still happen (two quorums of
//! opposite answers cannot both exist). The cleanup, remaining and inspect phases wait for
//! every reply (the cleanup must report each node's effect truthfully; remaining and inspect
//! combine every answer). The verdict is the one waiting for every reply gives.
//!
//! **Late replies.** A request unanswered when its phase is judged stays outstanding
//! ([`Round::outstanding`]); the driver keeps it running (in its turn, see below; bounded once
//! sent, [`NodeRequest::expires_at`]) and may feed
//! its reply at any time, also after the verdict: [`Round::handle_reply`] accepts it. Before the
//! verdict (a failed acquire cleaning up) it replaces the node's [`NodeCause::Unanswered`] with
//! what the node said; after the verdict it changes nothing (a late grant after a granted
//! acquire is ours and goes with the release, which is sent to every node). A cause still
//! [`NodeCause::Unanswered`] at the verdict never counts as "not applied".
//!
//! **Turns.** Because a round may return while a node's request still runs, the next round of
//! the same lease and owner can reach that node first. A driver that returns early must keep
//! the turn rule ([`TurnKey`]): on a node, the requests of one (lease, owner) are sent one
//! after another, a request only once the one before it was answered or abandoned
//! ([`NodeRequest::expires_at`]), and every request the round asked for is sent (or, when its
//! round no longer awaits it and a later request of its turn already waits, skipped — a
//! release only for a later release), so a cleanup or a later release runs at the node after
//! a late acquire, and a late release never after the next acquire. Pipelining on one
//! connection is not enough: a request may take several round trips at the node (`NOSCRIPT`
//! then `EVAL`), and its second step would follow the next round's request.
//!
//! The rules (each tested by property in `tests/round_props.rs`, and the whole protocol by the
//! drifting-clock simulation in `tests/quorum_simulation.rs`):
//!
//! - every phase sends one request to every node, except the raise phase, which asks only the
//!   nodes that granted the acquisition before the acquire phase was judged;
//! - validity is `ttl − elapsed − drift` ([`super::validity`]), with `elapsed` measured from
//!   the round's single start instant (the `now` given when the round was made) to the end of
//!   the phase being judged;
//! - acquire: granted iff at least a quorum of nodes granted it and validity is left; for a
//!   fenced lease, the token is the maximum the granting nodes (judged) minted
//!   ([`super::fenced_quorum_token`]), and the raise phase (those nodes raise their counter
//!   and mark to the token where the lease is still ours) must also reach a quorum with
//!   validity left;
//! - a failed acquire runs a cleanup phase (compare-and-delete) on **every** node, including
//!   those that timed out or failed (their request may have taken effect); then a quorum of
//!   nodes held by others is [`AcquireOutcome::Held`] (the most frequent holder), anything else
//!   a [`QuorumError`];
//! - renew: renewed iff a quorum renewed with validity left; a quorum saying "not ours" is
//!   [`RenewOutcome::NotHeld`] after a cleanup phase on every node; anything else is an
//!   inconclusive [`QuorumError`] and deletes nothing;
//! - release: compare-and-delete on every node with the term ignored (node counters differ);
//!   released or not held by a quorum, else a [`QuorumError`];
//! - remaining, inspect: answers from a quorum; remaining times are the `q`-th largest of the
//!   nodes' values, minus the round's duration and the drift allowance;
//! - a failed round keeps every node's cause; a quorum of permanent refusals stays a
//!   permanent error, anything else is a [`QuorumError`] in [`BackendError::Unavailable`]
//!   when it provably left nothing applied ([`QuorumError::effect`]), else in
//!   [`BackendError::OutcomeUnknown`].
//!
//! No clock is read and nothing is random: time enters as [`Instant`] arguments.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use lease_core::quorum::{NodeReply, NodeRequestKind, Quorum, Verdict};
//! use lease_core::{
//!     AcquireOutcome, AcquireRequest, FenceState, Instant, LeaseSpec, Owner, Token, Ttl,
//! };
//!
//! let quorum = Quorum::new(&["a:6379", "b:6379", "c:6379"], 0.01)?;
//! let req = AcquireRequest::new(
//!     Arc::new(LeaseSpec::election("jobs")),
//!     Owner::new("host-1")?,
//!     Ttl::new(Duration::from_secs(1))?,
//! );
//! let bound = Duration::from_millis(200);
//! let mut round = quorum.acquire(req, bound, Instant::ZERO);
//! let t = Instant::ZERO + Duration::from_millis(10);
//! // Acquire phase: one request per node; nodes 0 and 1 grant with tokens 4 and 7, which
//! // decides the phase: node 2's reply (here a timeout) comes late and changes nothing.
//! let requests: Vec<_> = std::iter::from_fn(|| round.poll_request()).collect();
//! assert_eq!(requests.len(), 3);
//! for r in &requests {
//!     let reply = match r.node {
//!         0 => NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
//!             token: Token::new(4).ok(),
//!             fence: FenceState::new(Token::new(3).ok(), None),
//!         })),
//!         1 => NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
//!             token: Token::new(7).ok(),
//!             fence: FenceState::new(Token::new(6).ok(), None),
//!         })),
//!         _ => NodeReply::TimedOut,
//!     };
//!     round.handle_reply(r.id, reply, t)?;
//! }
//! // Raise phase: the granting nodes raise their counters to the maximum, 7.
//! let raises: Vec<_> = std::iter::from_fn(|| round.poll_request()).collect();
//! assert_eq!(raises.iter().map(|r| r.node).collect::<Vec<_>>(), [0, 1]);
//! assert!(matches!(&raises[0].kind, NodeRequestKind::Raise { token, .. } if token.get() == 7));
//! for r in &raises {
//!     round.handle_reply(r.id, NodeReply::Raise(Ok(true)), t)?;
//! }
//! let verdict = round.poll_verdict().expect("decided");
//! assert!(matches!(
//!     verdict,
//!     Verdict::Acquire(Ok(AcquireOutcome::Acquired { token: Some(t), fence }))
//!         if t.get() == 7 && fence.counter == Token::new(6).ok()
//! ));
//! // Valid until start + ttl − (ceil(1000 × 0.01) + 2) ms.
//! assert_eq!(round.valid_until(), Some(Instant::ZERO + Duration::from_millis(988)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::error::{NodeCause, NodeFailure, QuorumError, QuorumOp, RoundFailure};
use super::{drift, fenced_quorum_token, validate_drift, validate_nodes, validity};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, Effect, LeaseInfo, LeaseSpec, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
use crate::config::ConfigError;
use crate::time::Instant;
use crate::token::{FenceMark, FenceState, Token};

/// A validated node set and drift factor: the maker of [`Round`]s.
///
/// Cheap to clone (the addresses are shared).
#[derive(Clone, Debug, PartialEq)]
pub struct Quorum {
    addresses: Arc<[String]>,
    quorum: usize,
    drift_factor: f64,
}

impl Quorum {
    /// A quorum over nodes known by `addresses` (an odd number, at least 3, no address twice;
    /// node `i` of every request is `addresses[i]`), with a drift factor in `[0, 0.5)`.
    ///
    /// ```
    /// use lease_core::ConfigError;
    /// use lease_core::quorum::{Quorum, QuorumConfigError};
    /// assert_eq!(Quorum::new(&["a", "b", "c"], 0.01)?.quorum(), 2);
    /// assert_eq!(
    ///     Quorum::new(&["a", "b"], 0.01),
    ///     Err(ConfigError::Quorum(QuorumConfigError::TooFew(2)))
    /// );
    /// assert_eq!(Quorum::new(&["a", "b", "c"], 0.5), Err(ConfigError::DriftFactor(0.5)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new<S: AsRef<str>>(addresses: &[S], drift_factor: f64) -> Result<Self, ConfigError> {
        let quorum = validate_nodes(addresses)?;
        let drift_factor = validate_drift(drift_factor)?;
        Ok(Quorum {
            addresses: addresses.iter().map(|a| a.as_ref().to_owned()).collect(),
            quorum,
            drift_factor,
        })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.addresses.len()
    }

    /// The quorum: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// The address of node `index`, if there is one.
    pub fn address(&self, index: usize) -> Option<&str> {
        self.addresses.get(index).map(String::as_str)
    }

    /// An acquire round for `req` started at `now`, each phase's requests bounded by `bound`
    /// from the phase's start.
    pub fn acquire(&self, req: AcquireRequest, bound: Duration, now: Instant) -> Round {
        let fenced = req.spec.fence_key().is_some();
        let ttl = req.ttl.get();
        let kinds = self.every(|| NodeRequestKind::Acquire(req.clone()));
        let cleanup = Cleanup {
            spec: Arc::clone(&req.spec),
            owner: req.owner.clone(),
        };
        Round::new(
            self,
            Kind::Acquire {
                fenced,
                ttl,
                cleanup,
                held: Vec::new(),
                acquire_elapsed: Duration::ZERO,
            },
            Stage::Acquire,
            kinds,
            bound,
            now,
        )
    }

    /// A renew round for `req` started at `now`.
    pub fn renew(&self, req: RenewRequest, bound: Duration, now: Instant) -> Round {
        let ttl = req.ttl.get();
        let kinds = self.every(|| NodeRequestKind::Renew(req.clone()));
        let cleanup = Cleanup {
            spec: Arc::clone(&req.spec),
            owner: req.owner.clone(),
        };
        Round::new(
            self,
            Kind::Renew { ttl, cleanup },
            Stage::Renew,
            kinds,
            bound,
            now,
        )
    }

    /// A release round for `req` started at `now`; `req.term_token` is ignored (the nodes' counters
    /// differ, so a term cannot be checked per node).
    pub fn release(&self, req: ReleaseRequest, bound: Duration, now: Instant) -> Round {
        let req = ReleaseRequest {
            term_token: None,
            ..req
        };
        let kinds = self.every(|| NodeRequestKind::Release(req.clone()));
        Round::new(self, Kind::Release, Stage::Release, kinds, bound, now)
    }

    /// A round asking every node how long `owner` still holds `spec`, started at `now`.
    pub fn remaining(
        &self,
        spec: Arc<LeaseSpec>,
        owner: Owner,
        bound: Duration,
        now: Instant,
    ) -> Round {
        let kinds = self.every(|| NodeRequestKind::Remaining {
            spec: Arc::clone(&spec),
            owner: owner.clone(),
        });
        Round::new(self, Kind::Remaining, Stage::Remaining, kinds, bound, now)
    }

    /// A round inspecting `spec` on every node, started at `now`.
    pub fn inspect(&self, spec: Arc<LeaseSpec>, bound: Duration, now: Instant) -> Round {
        let kinds = self.every(|| NodeRequestKind::Inspect {
            spec: Arc::clone(&spec),
        });
        Round::new(self, Kind::Inspect, Stage::Inspect, kinds, bound, now)
    }

    fn every(&self, mut kind: impl FnMut() -> NodeRequestKind) -> Vec<(usize, NodeRequestKind)> {
        (0..self.nodes()).map(|i| (i, kind())).collect()
    }
}

/// Identifies a [`NodeRequest`] within its [`Round`], to match its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRequestId(pub u64);

/// What to ask one node. Every kind maps to one call of a lease store (a `LeaseBackend`
/// method, or the raise of a fence counter); the reply goes back as the [`NodeReply`] variant
/// of the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRequestKind {
    /// Acquire the lease on this node (reply: [`NodeReply::Acquire`]).
    Acquire(AcquireRequest),
    /// Raise this node's fence counter and applied mark to at least `token` if every lock key
    /// of `spec` still holds `owner`, else change nothing (reply: [`NodeReply::Raise`], `true`
    /// when raised).
    Raise {
        /// The lease (fenced).
        spec: Arc<LeaseSpec>,
        /// The owner that must still hold it.
        owner: Owner,
        /// The fenced quorum token.
        token: Token,
    },
    /// Renew (extend) the lease on this node (reply: [`NodeReply::Renew`]).
    Renew(RenewRequest),
    /// Compare-and-delete on this node (reply: [`NodeReply::Release`]). Also the cleanup
    /// after a failed acquire, or after a renew that found the lease lost.
    Release(ReleaseRequest),
    /// How long `owner` still holds `spec` on this node (reply: [`NodeReply::Remaining`]).
    Remaining {
        /// The lease.
        spec: Arc<LeaseSpec>,
        /// The owner asked about.
        owner: Owner,
    },
    /// Inspect `spec` on this node (reply: [`NodeReply::Inspect`]).
    Inspect {
        /// The lease.
        spec: Arc<LeaseSpec>,
    },
}

/// A request the round asks the driver to send to one node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeRequest {
    /// Its id, to pass back with the reply.
    pub id: NodeRequestId,
    /// The node's index (in the addresses given to [`Quorum::new`]).
    pub node: usize,
    /// What to ask.
    pub kind: NodeRequestKind,
    /// When to stop waiting and report [`NodeReply::TimedOut`]: the same for every request of
    /// a phase. A reply that is ready when the deadline fires counts as the reply.
    pub deadline: Instant,
    /// The round's bound on one node's reply (the phase's deadline is its start plus this):
    /// how long the call may run once it is sent, see [`NodeRequest::expires_at`].
    pub bound: Duration,
}

impl NodeRequest {
    /// The node and the turn this request must take there, if it changes the node's state:
    /// see [`TurnKey`].
    pub fn turn_key(&self) -> Option<TurnKey> {
        let (spec, owner) = match &self.kind {
            NodeRequestKind::Acquire(r) => (&r.spec, &r.owner),
            NodeRequestKind::Raise { spec, owner, .. } => (spec, owner),
            NodeRequestKind::Renew(r) => (&r.spec, &r.owner),
            NodeRequestKind::Release(r) => (&r.spec, &r.owner),
            NodeRequestKind::Remaining { .. } | NodeRequestKind::Inspect { .. } => return None,
        };
        Some(TurnKey {
            node: self.node,
            spec: Arc::clone(spec),
            owner: owner.clone(),
        })
    }

    /// When the driver abandons the call if it was `sent` (written to the node) at that
    /// instant: its [`deadline`](NodeRequest::deadline), or `sent + bound` if it had to wait
    /// for its turn past the phase's start. The round itself stops waiting at the deadline
    /// (the reply is [`NodeReply::TimedOut`] to the round, and the outcome on that node
    /// unknown), but a request that waited for its turn still gets a full bound on the wire:
    /// a release or cleanup is never dropped unsent because an earlier request of the same
    /// turn was slow.
    pub fn expires_at(&self, sent: Instant) -> Instant {
        self.deadline.max(sent + self.bound)
    }
}

/// The ordering key of a request that changes a node's state (acquire, raise, renew, release
/// and cleanup): the node, the lease and the owner. Reads (remaining, inspect) have none.
///
/// **The turn rule**, which a driver that returns before every reply is in must keep: on
/// one node, the requests of one key are executed in the order the rounds asked for them.
/// A request's call may take more than one round trip at the node (lease-redis: `EVALSHA`,
/// then `EVAL` on `NOSCRIPT`; the unfenced fast path's `SET NX`, then the acquire script; a
/// `WAIT`), so pipelining them on one connection is not enough: a request whose round
/// returned without it could send its second step after the next round's request of the same
/// key. The driver therefore sends a request only once every earlier request of its key on
/// that node has finished (answered) or been abandoned (its call dropped at
/// [`NodeRequest::expires_at`]: nothing more is written for it, and what was written is ahead
/// on the connection); and it sends every request it took from a round, also after the
/// round's verdict and if the caller stopped waiting.
///
/// Why the key is (node, lease, owner): only requests of the same owner on the same lease can
/// undo each other (a late compare-and-delete of owner A deletes A's next grant; a late grant
/// of A outlives A's release). Requests of different owners are owner-checked against each
/// other at the node, as they are against other clients: their order is the ordinary
/// concurrency the rules already allow for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TurnKey {
    /// The node's index.
    pub node: usize,
    /// The lease.
    pub spec: Arc<LeaseSpec>,
    /// The owner.
    pub owner: Owner,
}

/// One node's reply to a [`NodeRequest`]: the variant named like the request's kind, or
/// [`NodeReply::TimedOut`].
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeReply {
    /// Reply to [`NodeRequestKind::Acquire`].
    Acquire(Result<AcquireOutcome, BackendError>),
    /// Reply to [`NodeRequestKind::Raise`]: `true` when raised.
    Raise(Result<bool, BackendError>),
    /// Reply to [`NodeRequestKind::Renew`].
    Renew(Result<RenewOutcome, BackendError>),
    /// Reply to [`NodeRequestKind::Release`].
    Release(Result<ReleaseOutcome, BackendError>),
    /// Reply to [`NodeRequestKind::Remaining`].
    Remaining(Result<Option<Duration>, BackendError>),
    /// Reply to [`NodeRequestKind::Inspect`].
    Inspect(Result<LeaseInfo, BackendError>),
    /// No reply by the request's deadline: the outcome on that node is unknown. Counted as
    /// [`BackendError::Timeout`] of the round's bound.
    TimedOut,
}

/// The outcome of a round: the result of the backend operation it performed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Verdict {
    /// An acquire round's result.
    Acquire(Result<AcquireOutcome, BackendError>),
    /// A renew round's result.
    Renew(Result<RenewOutcome, BackendError>),
    /// A release round's result.
    Release(Result<ReleaseOutcome, BackendError>),
    /// A remaining round's result.
    Remaining(Result<Option<Duration>, BackendError>),
    /// An inspect round's result.
    Inspect(Result<LeaseInfo, BackendError>),
}

fn wrong_verdict(want: &str, got: &Verdict) -> BackendError {
    BackendError::Protocol(format!("expected a {want} verdict, got {got:?}"))
}

impl Verdict {
    /// The acquire result ([`BackendError::Protocol`] if this is another operation's verdict).
    pub fn into_acquire(self) -> Result<AcquireOutcome, BackendError> {
        match self {
            Verdict::Acquire(r) => r,
            other => Err(wrong_verdict("acquire", &other)),
        }
    }

    /// The renew result ([`BackendError::Protocol`] if this is another operation's verdict).
    pub fn into_renew(self) -> Result<RenewOutcome, BackendError> {
        match self {
            Verdict::Renew(r) => r,
            other => Err(wrong_verdict("renew", &other)),
        }
    }

    /// The release result ([`BackendError::Protocol`] if this is another operation's
    /// verdict).
    pub fn into_release(self) -> Result<ReleaseOutcome, BackendError> {
        match self {
            Verdict::Release(r) => r,
            other => Err(wrong_verdict("release", &other)),
        }
    }

    /// The remaining result ([`BackendError::Protocol`] if this is another operation's
    /// verdict).
    pub fn into_remaining(self) -> Result<Option<Duration>, BackendError> {
        match self {
            Verdict::Remaining(r) => r,
            other => Err(wrong_verdict("remaining", &other)),
        }
    }

    /// The inspect result ([`BackendError::Protocol`] if this is another operation's
    /// verdict).
    pub fn into_inspect(self) -> Result<LeaseInfo, BackendError> {
        match self {
            Verdict::Inspect(r) => r,
            other => Err(wrong_verdict("inspect", &other)),
        }
    }
}

/// A reply the round cannot take (a driver bug): nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RoundInputError {
    /// No outstanding request has this id: unknown, already answered, or already timed out
    /// (a reply after its timeout).
    #[error("no outstanding request {0:?}")]
    UnknownRequest(NodeRequestId),
    /// The reply's variant does not match the request's kind.
    #[error("request {id:?} is a {expected} request, the reply is not")]
    WrongReply {
        /// The request.
        id: NodeRequestId,
        /// The request's kind.
        expected: &'static str,
    },
}

/// Which phase a round is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// The acquire requests.
    Acquire,
    /// The raise requests of a fenced acquisition, to the nodes that granted it.
    Raise,
    /// Compare-and-delete on every node after a failed acquire, or a renew that found the
    /// lease lost.
    Cleanup,
    /// The renew requests.
    Renew,
    /// The release requests.
    Release,
    /// The remaining-time requests.
    Remaining,
    /// The inspect requests.
    Inspect,
    /// Decided: the verdict is (or was) available from [`Round::poll_verdict`].
    Done,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Acquire => "acquire",
            Phase::Raise => "raise",
            Phase::Cleanup => "cleanup",
            Phase::Renew => "renew",
            Phase::Release => "release",
            Phase::Remaining => "remaining",
            Phase::Inspect => "inspect",
            Phase::Done => "done",
        })
    }
}

#[derive(Debug)]
struct Cleanup {
    spec: Arc<LeaseSpec>,
    owner: Owner,
}

#[derive(Debug)]
enum Kind {
    Acquire {
        fenced: bool,
        ttl: Duration,
        cleanup: Cleanup,
        /// The `Held` replies of the acquire phase: holder and remaining time.
        held: Vec<(Option<String>, Option<Duration>)>,
        /// How long the acquire phase took (to make the holder's remaining time conservative).
        acquire_elapsed: Duration,
    },
    Renew {
        ttl: Duration,
        cleanup: Cleanup,
    },
    Release,
    Remaining,
    Inspect,
}

#[derive(Debug)]
enum Stage {
    Acquire,
    Raise {
        token: Token,
    },
    /// Cleanup after a failed acquire (`failure`, with `successes`) or a lost renew
    /// (`failure: None`).
    Cleanup {
        failure: Option<(RoundFailure, usize)>,
    },
    Renew,
    Release,
    Remaining,
    Inspect,
    Done,
}

#[derive(Debug)]
struct Slot {
    id: NodeRequestId,
    node: usize,
    /// `Some` until polled.
    kind: Option<NodeRequestKind>,
    /// The kind's name, to check the reply.
    expects: &'static str,
    reply: Option<NodeReply>,
    /// When it times out.
    deadline: Instant,
}

fn kind_name(kind: &NodeRequestKind) -> &'static str {
    match kind {
        NodeRequestKind::Acquire(_) => "acquire",
        NodeRequestKind::Raise { .. } => "raise",
        NodeRequestKind::Renew(_) => "renew",
        NodeRequestKind::Release(_) => "release",
        NodeRequestKind::Remaining { .. } => "remaining",
        NodeRequestKind::Inspect { .. } => "inspect",
    }
}

fn reply_name(reply: &NodeReply) -> Option<&'static str> {
    Some(match reply {
        NodeReply::Acquire(_) => "acquire",
        NodeReply::Raise(_) => "raise",
        NodeReply::Renew(_) => "renew",
        NodeReply::Release(_) => "release",
        NodeReply::Remaining(_) => "remaining",
        NodeReply::Inspect(_) => "inspect",
        NodeReply::TimedOut => return None,
    })
}

/// One quorum operation over every node. See the [module docs](self) for the contract.
#[derive(Debug)]
pub struct Round {
    quorum: Quorum,
    op: QuorumOp,
    kind: Kind,
    stage: Stage,
    bound: Duration,
    start: Instant,
    next_id: u64,
    slots: Vec<Slot>,
    /// Requests of phases already judged (early) that are still unanswered: their replies are
    /// still accepted (see [`Round::handle_reply`]).
    late: Vec<Slot>,
    deadline: Instant,
    /// Causes of the nodes that did not succeed, over the acquire (and raise) phases, or the
    /// single phase of other operations.
    causes: Vec<NodeFailure>,
    verdict: Option<Verdict>,
    /// For a granted acquire or renew: `(decided at, validity)`.
    granted: Option<(Instant, Duration)>,
    token: Option<Token>,
    /// The highest counter any node reported in the acquire phase (granted: before minting;
    /// refused: the holder's). Per-node epochs are not comparable across nodes: not kept.
    fence_seen: Option<Token>,
    elapsed: Option<Duration>,
}

impl Round {
    fn new(
        quorum: &Quorum,
        kind: Kind,
        stage: Stage,
        kinds: Vec<(usize, NodeRequestKind)>,
        bound: Duration,
        now: Instant,
    ) -> Round {
        let op = match kind {
            Kind::Acquire { .. } => QuorumOp::Acquire,
            Kind::Renew { .. } => QuorumOp::Renew,
            Kind::Release => QuorumOp::Release,
            Kind::Remaining => QuorumOp::Remaining,
            Kind::Inspect => QuorumOp::Inspect,
        };
        let mut round = Round {
            quorum: quorum.clone(),
            op,
            kind,
            stage,
            bound,
            start: now,
            next_id: 0,
            slots: Vec::new(),
            late: Vec::new(),
            deadline: now,
            causes: Vec::new(),
            verdict: None,
            granted: None,
            token: None,
            fence_seen: None,
            elapsed: None,
        };
        round.start_phase(kinds, now);
        round
    }

    fn start_phase(&mut self, kinds: Vec<(usize, NodeRequestKind)>, now: Instant) {
        self.deadline = now + self.bound;
        let deadline = self.deadline;
        self.slots = kinds
            .into_iter()
            .map(|(node, kind)| {
                self.next_id += 1;
                Slot {
                    id: NodeRequestId(self.next_id),
                    node,
                    expects: kind_name(&kind),
                    kind: Some(kind),
                    reply: None,
                    deadline,
                }
            })
            .collect();
    }

    /// The operation.
    pub fn op(&self) -> QuorumOp {
        self.op
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match self.stage {
            Stage::Acquire => Phase::Acquire,
            Stage::Raise { .. } => Phase::Raise,
            Stage::Cleanup { .. } => Phase::Cleanup,
            Stage::Renew => Phase::Renew,
            Stage::Release => Phase::Release,
            Stage::Remaining => Phase::Remaining,
            Stage::Inspect => Phase::Inspect,
            Stage::Done => Phase::Done,
        }
    }

    /// The round's start instant (the `now` it was made at): validity is measured from it.
    pub fn started_at(&self) -> Instant {
        self.start
    }

    /// The bound on each node's reply.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// The next request to send, if any: every request of the current phase once, in node
    /// order. Each must get exactly one reply ([`Round::handle_reply`]) or time out.
    pub fn poll_request(&mut self) -> Option<NodeRequest> {
        let deadline = self.deadline;
        let bound = self.bound;
        self.slots.iter_mut().find_map(|s| {
            s.kind.take().map(|kind| NodeRequest {
                id: s.id,
                node: s.node,
                kind,
                deadline,
                bound,
            })
        })
    }

    /// The earliest deadline of the requests awaited (the current phase's, and late requests
    /// of judged phases while the round is undecided): call [`Round::handle_timeout`] then.
    /// `None` when nothing is awaited (in particular once decided).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_done() {
            return None;
        }
        self.slots
            .iter()
            .filter(|s| s.reply.is_none())
            .chain(self.late.iter())
            .map(|s| s.deadline)
            .min()
    }

    /// How many polled requests are still unanswered: those of the current phase and those
    /// of phases judged early (their replies are still accepted, also after the verdict).
    pub fn outstanding(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.kind.is_none() && s.reply.is_none())
            .count()
            + self.late.len()
    }

    /// Feeds the reply to request `id`, received at `now`. When it is the phase's last
    /// awaited reply, the phase is judged at `now`: the next phase's requests, or the verdict,
    /// become available.
    ///
    /// The phase is judged as soon as it is decidable (see the [module docs](self)): a quorum
    /// reached or out of reach, even with requests still unanswered; those become late
    /// requests, whose replies are still accepted here (also after the verdict; see the module
    /// docs for what they change).
    ///
    /// Errors (nothing recorded): a request that is not outstanding (unknown, already
    /// answered, or timed out), or a reply of the wrong kind.
    pub fn handle_reply(
        &mut self,
        id: NodeRequestId,
        reply: NodeReply,
        now: Instant,
    ) -> Result<(), RoundInputError> {
        if let Some(pos) = self.late.iter().position(|s| s.id == id) {
            if let Some(name) = reply_name(&reply)
                && name != self.late[pos].expects
            {
                return Err(RoundInputError::WrongReply {
                    id,
                    expected: self.late[pos].expects,
                });
            }
            let slot = self.late.swap_remove(pos);
            self.absorb_late(&slot, reply);
            return Ok(());
        }
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.id == id && s.reply.is_none())
            .ok_or(RoundInputError::UnknownRequest(id))?;
        if let Some(name) = reply_name(&reply)
            && name != slot.expects
        {
            return Err(RoundInputError::WrongReply {
                id,
                expected: slot.expects,
            });
        }
        slot.kind = None;
        slot.reply = Some(reply);
        self.advance(now);
        Ok(())
    }

    /// At `now`: every outstanding request whose deadline has passed gets
    /// [`NodeReply::TimedOut`] (late requests of judged phases included), and the current phase
    /// is judged if that decides it.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.late.len() {
            if self.late[i].deadline <= now {
                let slot = self.late.swap_remove(i);
                self.absorb_late(&slot, NodeReply::TimedOut);
            } else {
                i += 1;
            }
        }
        if now < self.deadline {
            return;
        }
        let mut any = false;
        for s in self.slots.iter_mut().filter(|s| s.reply.is_none()) {
            s.kind = None;
            s.reply = Some(NodeReply::TimedOut);
            any = true;
        }
        if any {
            self.advance(now);
        }
    }

    /// The verdict, once decided (returned once).
    pub fn poll_verdict(&mut self) -> Option<Verdict> {
        self.verdict.take()
    }

    /// Whether the round is decided.
    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done)
    }

    /// For a granted acquire or renew: the validity left when it was decided.
    pub fn validity(&self) -> Option<Duration> {
        self.granted.map(|(_, v)| v)
    }

    /// For a granted acquire or renew: the end of its validity on the caller's clock,
    /// `start + ttl − drift`.
    pub fn valid_until(&self) -> Option<Instant> {
        self.granted.map(|(at, v)| at + v)
    }

    /// For a fenced acquire that reached a quorum: the fenced quorum token (established only
    /// if the verdict is `Acquired`).
    pub fn token(&self) -> Option<Token> {
        self.token
    }

    /// How long the round had taken when its last judged phase was judged (for an acquire
    /// or renew: the elapsed time its validity was computed from).
    pub fn elapsed(&self) -> Option<Duration> {
        self.elapsed
    }

    fn failure(&self, index: usize, cause: NodeCause) -> NodeFailure {
        NodeFailure::new(index, self.quorum.address(index).unwrap_or(""), cause)
    }

    fn timeout(&self) -> BackendError {
        BackendError::Timeout(self.bound)
    }

    fn decide(&mut self, verdict: Verdict) {
        self.stage = Stage::Done;
        self.slots.clear();
        self.verdict = Some(verdict);
    }

    /// Judges the phase as soon as it is decidable ([`Round::decidable`]); its requests still
    /// unanswered then become late ones (judged as [`NodeCause::Unanswered`]).
    fn advance(&mut self, now: Instant) {
        if self.is_done() || !self.decidable() {
            return;
        }
        let mut replies: Vec<(usize, Option<NodeReply>)> = Vec::new();
        for mut s in std::mem::take(&mut self.slots) {
            match s.reply.take() {
                Some(r) => replies.push((s.node, Some(r))),
                None => {
                    replies.push((s.node, None));
                    // Only a request the driver has taken is in flight.
                    if s.kind.take().is_none() {
                        self.late.push(s);
                    }
                }
            }
        }
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Acquire => self.acquire_phase(replies, now),
            Stage::Raise { token } => self.raise_phase(token, replies, now),
            Stage::Cleanup { failure } => self.cleanup_phase(failure, replies),
            Stage::Renew => self.renew_phase(replies, now),
            Stage::Release => self.release_phase(replies),
            Stage::Remaining => self.remaining_phase(replies, now),
            Stage::Inspect => self.inspect_phase(replies, now),
            Stage::Done => {}
        }
    }

    /// Whether the current phase can be judged now. Every phase is once every request has
    /// its reply; earlier, as soon as the outcome cannot change with the missing replies:
    ///
    /// - acquire: a quorum granted (the validity, judged now, only shrinks by waiting), or
    ///   so few can still grant that a quorum is out of reach;
    /// - raise: likewise with the nodes that raised;
    /// - renew, release: a quorum succeeded, a quorum said "not ours", or neither can still
    ///   happen (a quorum of one answer and a quorum of the other cannot both exist);
    /// - cleanup, remaining, inspect: never early (the cleanup must know every node's answer
    ///   to report its effect truthfully; remaining and inspect combine every answer: the
    ///   `q`-th largest remaining time, the maximum counter and mark).
    fn decidable(&self) -> bool {
        let pending = self.slots.iter().filter(|s| s.reply.is_none()).count();
        if pending == 0 {
            return true;
        }
        let q = self.quorum.quorum;
        let count = |f: &dyn Fn(&NodeReply) -> bool| {
            self.slots
                .iter()
                .filter(|s| s.reply.as_ref().is_some_and(f))
                .count()
        };
        let either =
            |yes: usize, no: usize| yes >= q || no >= q || (yes + pending < q && no + pending < q);
        match (&self.stage, &self.kind) {
            (Stage::Acquire, Kind::Acquire { fenced, .. }) => {
                let granted = count(&|r| {
                    matches!(r, NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, .. }))
                        if !*fenced || token.is_some())
                });
                granted >= q || granted + pending < q
            }
            (Stage::Raise { .. }, _) => {
                let raised = count(&|r| matches!(r, NodeReply::Raise(Ok(true))));
                raised >= q || raised + pending < q
            }
            (Stage::Renew, _) => either(
                count(&|r| matches!(r, NodeReply::Renew(Ok(RenewOutcome::Renewed)))),
                count(&|r| matches!(r, NodeReply::Renew(Ok(RenewOutcome::NotHeld)))),
            ),
            (Stage::Release, _) => either(
                count(&|r| matches!(r, NodeReply::Release(Ok(ReleaseOutcome::Released)))),
                count(&|r| matches!(r, NodeReply::Release(Ok(ReleaseOutcome::NotHeld)))),
            ),
            _ => false,
        }
    }

    /// A reply to a request of a phase judged without it. Before the verdict (a failed
    /// acquire cleaning up) it replaces that node's [`NodeCause::Unanswered`] with what the
    /// node said (a late success removes the cause and counts among the successes of the
    /// phase it belongs to; a late `Held` joins the holders the verdict is drawn from). After
    /// the verdict it changes nothing: a late grant after a granted acquire is simply held by
    /// our owner until the release (which goes to every node) or its TTL.
    fn absorb_late(&mut self, slot: &Slot, reply: NodeReply) {
        if self.is_done() {
            return;
        }
        let Some(pos) = self
            .causes
            .iter()
            .position(|c| c.index == slot.node && matches!(c.cause, NodeCause::Unanswered))
        else {
            return;
        };
        let cause = match reply {
            NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, fence })) => {
                self.fence_seen = self.fence_seen.max(fence.counter);
                let fenced = matches!(self.kind, Kind::Acquire { fenced: true, .. });
                if fenced && token.is_none() {
                    Some(NodeCause::Error(BackendError::Protocol(
                        "a fenced acquire granted no token".into(),
                    )))
                } else {
                    None
                }
            }
            NodeReply::Raise(Ok(true))
            | NodeReply::Renew(Ok(RenewOutcome::Renewed))
            | NodeReply::Release(Ok(ReleaseOutcome::Released))
            | NodeReply::Remaining(Ok(_))
            | NodeReply::Inspect(Ok(_)) => None,
            NodeReply::Acquire(Ok(AcquireOutcome::Held {
                holder,
                remaining,
                fence,
            })) => {
                self.fence_seen = self.fence_seen.max(fence.counter);
                if let Kind::Acquire { held, .. } = &mut self.kind {
                    held.push((holder.clone(), remaining));
                }
                Some(NodeCause::Held { holder })
            }
            NodeReply::Raise(Ok(false))
            | NodeReply::Renew(Ok(RenewOutcome::NotHeld))
            | NodeReply::Release(Ok(ReleaseOutcome::NotHeld)) => Some(NodeCause::NotOurs),
            NodeReply::Acquire(Err(e))
            | NodeReply::Raise(Err(e))
            | NodeReply::Renew(Err(e))
            | NodeReply::Release(Err(e))
            | NodeReply::Remaining(Err(e))
            | NodeReply::Inspect(Err(e)) => Some(NodeCause::Error(e)),
            NodeReply::TimedOut => Some(NodeCause::Error(self.timeout())),
        };
        match cause {
            Some(cause) => self.causes[pos].cause = cause,
            None => {
                self.causes.remove(pos);
                // A late success counts where it belongs: a late grant with a failed acquire
                // phase, a late raise with a failed raise phase.
                if let Stage::Cleanup {
                    failure: Some((failure, successes)),
                } = &mut self.stage
                {
                    let raise = matches!(failure, RoundFailure::RaiseFailed { .. });
                    if raise == (slot.expects == "raise") {
                        *successes += 1;
                    }
                }
            }
        }
    }

    /// `(elapsed, validity)` at `now` for `ttl`.
    fn validity_at(&mut self, ttl: Duration, now: Instant) -> (Duration, Option<Duration>) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        (elapsed, validity(ttl, elapsed, self.quorum.drift_factor))
    }

    /// The error for `reply` when it is not the expected variant (only a timeout reaches here:
    /// [`Round::handle_reply`] refuses other mismatches).
    fn other_reply(&self, reply: NodeReply) -> BackendError {
        match reply {
            NodeReply::TimedOut => self.timeout(),
            other => BackendError::Protocol(format!("unexpected reply {other:?}")),
        }
    }

    fn acquire_phase(&mut self, replies: Vec<(usize, Option<NodeReply>)>, now: Instant) {
        let Kind::Acquire { fenced, ttl, .. } = self.kind else {
            return;
        };
        let mut acquired: Vec<(usize, Option<Token>)> = Vec::new();
        let mut held = Vec::new();
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, fence }))) => {
                    self.fence_seen = self.fence_seen.max(fence.counter);
                    if fenced && token.is_none() {
                        NodeCause::Error(BackendError::Protocol(
                            "a fenced acquire granted no token".into(),
                        ))
                    } else {
                        acquired.push((i, token));
                        continue;
                    }
                }
                Some(NodeReply::Acquire(Ok(AcquireOutcome::Held {
                    holder,
                    remaining,
                    fence,
                }))) => {
                    self.fence_seen = self.fence_seen.max(fence.counter);
                    held.push((holder.clone(), remaining));
                    NodeCause::Held { holder }
                }
                Some(NodeReply::Acquire(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let (elapsed, validity) = self.validity_at(ttl, now);
        if let Kind::Acquire {
            held: h,
            acquire_elapsed,
            ..
        } = &mut self.kind
        {
            *h = held;
            *acquire_elapsed = elapsed;
        }
        let q = self.quorum.quorum;
        let failure = if acquired.len() < q {
            RoundFailure::NoQuorum
        } else if validity.is_none() {
            RoundFailure::ValidityExhausted { elapsed }
        } else if let Some(v) = validity.filter(|_| !fenced) {
            self.granted = Some((now, v));
            return self.decide(Verdict::Acquire(Ok(AcquireOutcome::Acquired {
                token: None,
                fence: FenceState::UNKNOWN,
            })));
        } else {
            // Fenced: the token is the maximum minted by the granting nodes; the raise phase
            // asks each of them to raise its counter to it.
            let Some(token) = fenced_quorum_token(acquired.iter().filter_map(|a| a.1)) else {
                return self.decide(Verdict::Acquire(Err(BackendError::Protocol(
                    "a fenced quorum without tokens".into(),
                ))));
            };
            self.token = Some(token);
            let Kind::Acquire { cleanup, .. } = &self.kind else {
                return;
            };
            let kinds = acquired
                .iter()
                .map(|(i, _)| {
                    (
                        *i,
                        NodeRequestKind::Raise {
                            spec: Arc::clone(&cleanup.spec),
                            owner: cleanup.owner.clone(),
                            token,
                        },
                    )
                })
                .collect();
            self.stage = Stage::Raise { token };
            return self.start_phase(kinds, now);
        };
        self.start_cleanup(Some((failure, acquired.len())), now);
    }

    fn raise_phase(
        &mut self,
        token: Token,
        replies: Vec<(usize, Option<NodeReply>)>,
        now: Instant,
    ) {
        let Kind::Acquire { ttl, .. } = self.kind else {
            return;
        };
        let mut raised = 0;
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Raise(Ok(true))) => {
                    raised += 1;
                    continue;
                }
                Some(NodeReply::Raise(Ok(false))) => NodeCause::NotOurs,
                Some(NodeReply::Raise(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        self.causes.sort_by_key(|c| c.index);
        let (elapsed, validity) = self.validity_at(ttl, now);
        match validity {
            Some(v) if raised >= self.quorum.quorum => {
                self.granted = Some((now, v));
                let fence = FenceState::new(self.fence_seen, None);
                self.decide(Verdict::Acquire(Ok(AcquireOutcome::Acquired {
                    token: Some(token),
                    fence,
                })));
            }
            _ => self.start_cleanup(
                Some((RoundFailure::RaiseFailed { token, elapsed }, raised)),
                now,
            ),
        }
    }

    /// Compare-and-delete on every node: including those that did not answer (their request
    /// may have taken effect); another owner's value is never deleted.
    fn start_cleanup(&mut self, failure: Option<(RoundFailure, usize)>, now: Instant) {
        let cleanup = match &self.kind {
            Kind::Acquire { cleanup, .. } | Kind::Renew { cleanup, .. } => cleanup,
            _ => return,
        };
        let req = ReleaseRequest::new(Arc::clone(&cleanup.spec), cleanup.owner.clone());
        let kinds = self.quorum.every(|| NodeRequestKind::Release(req.clone()));
        self.stage = Stage::Cleanup { failure };
        self.start_phase(kinds, now);
    }

    fn cleanup_phase(
        &mut self,
        failure: Option<(RoundFailure, usize)>,
        replies: Vec<(usize, Option<NodeReply>)>,
    ) {
        let mut cleanup_failures = Vec::new();
        for (i, reply) in replies {
            let error = match reply {
                Some(NodeReply::Release(Ok(_))) => continue,
                Some(NodeReply::Release(Err(e))) => e,
                Some(other) => self.other_reply(other),
                None => self.timeout(),
            };
            cleanup_failures.push(self.failure(i, NodeCause::Error(error)));
        }
        let Some((failure, successes)) = failure else {
            // A renew that a quorum said is not ours.
            return self.decide(Verdict::Renew(Ok(RenewOutcome::NotHeld)));
        };
        let q = self.quorum.quorum;
        if let Kind::Acquire {
            held,
            acquire_elapsed,
            ..
        } = &mut self.kind
            && held.len() >= q
        {
            // A quorum positively says someone else holds it: a lost race, not an error.
            let held = std::mem::take(held);
            let elapsed = *acquire_elapsed;
            let (holder, remaining) = self.dominant_holder(held, elapsed);
            let fence = FenceState::new(self.fence_seen, None);
            return self.decide(Verdict::Acquire(Ok(AcquireOutcome::Held {
                holder,
                remaining,
                fence,
            })));
        }
        let error = self.error(failure, successes, cleanup_failures);
        self.decide(Verdict::Acquire(Err(error)));
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
            qth_largest(remainings, self.quorum.quorum).and_then(|r| self.conservative(r, elapsed));
        (holder, remaining)
    }

    /// A remaining time reported by nodes during a round that took `elapsed`, made
    /// conservative: minus the round's duration and the drift allowance; `None` if nothing is
    /// left.
    fn conservative(&self, remaining: Duration, elapsed: Duration) -> Option<Duration> {
        let d = drift(remaining, self.quorum.drift_factor);
        remaining
            .checked_sub(elapsed)?
            .checked_sub(d)
            .filter(|v| !v.is_zero())
    }

    fn renew_phase(&mut self, replies: Vec<(usize, Option<NodeReply>)>, now: Instant) {
        let Kind::Renew { ttl, .. } = self.kind else {
            return;
        };
        let (mut renewed, mut not_ours) = (0, 0);
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Renew(Ok(RenewOutcome::Renewed))) => {
                    renewed += 1;
                    continue;
                }
                Some(NodeReply::Renew(Ok(RenewOutcome::NotHeld))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Renew(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let (elapsed, validity) = self.validity_at(ttl, now);
        let q = self.quorum.quorum;
        if let Some(v) = validity.filter(|_| renewed >= q) {
            self.granted = Some((now, v));
            return self.decide(Verdict::Renew(Ok(RenewOutcome::Renewed)));
        }
        if not_ours >= q {
            // Conclusively lost: clean up everywhere, including a minority that accepted the
            // extension, so it does not block the next holder.
            return self.start_cleanup(None, now);
        }
        // Inconclusive (errors, timeouts, or no validity left): report it and leave the keys.
        // The driver tolerates it until its local deadline, renews again meanwhile, and
        // releases on every node when the term ends; deleting the keys here would let another
        // contender in while the driver still (rightly, by its rules) counts itself the holder.
        let failure = if renewed >= q {
            RoundFailure::ValidityExhausted { elapsed }
        } else {
            RoundFailure::NoQuorum
        };
        let error = self.error(failure, renewed, Vec::new());
        self.decide(Verdict::Renew(Err(error)));
    }

    fn release_phase(&mut self, replies: Vec<(usize, Option<NodeReply>)>) {
        let (mut released, mut not_ours) = (0, 0);
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Release(Ok(ReleaseOutcome::Released))) => {
                    released += 1;
                    continue;
                }
                Some(NodeReply::Release(Ok(ReleaseOutcome::NotHeld))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Release(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let q = self.quorum.quorum;
        if released >= q {
            return self.decide(Verdict::Release(Ok(ReleaseOutcome::Released)));
        }
        if not_ours >= q {
            return self.decide(Verdict::Release(Ok(ReleaseOutcome::NotHeld)));
        }
        let error = self.error(RoundFailure::NoQuorum, released, Vec::new());
        self.decide(Verdict::Release(Err(error)));
    }

    fn remaining_phase(&mut self, replies: Vec<(usize, Option<NodeReply>)>, now: Instant) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        let mut ours = Vec::new();
        let mut not_ours = 0;
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Remaining(Ok(Some(d)))) => {
                    ours.push(d);
                    continue;
                }
                Some(NodeReply::Remaining(Ok(None))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Remaining(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let q = self.quorum.quorum;
        let verdict = if ours.len() >= q {
            Ok(qth_largest(ours, q).and_then(|r| self.conservative(r, elapsed)))
        } else if not_ours >= q {
            Ok(None)
        } else {
            Err(self.error(RoundFailure::NoQuorum, ours.len(), Vec::new()))
        };
        self.decide(Verdict::Remaining(verdict));
    }

    fn inspect_phase(&mut self, replies: Vec<(usize, Option<NodeReply>)>, now: Instant) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        let mut infos = Vec::new();
        for (i, reply) in replies {
            let error = match reply {
                Some(NodeReply::Inspect(Ok(info))) => {
                    infos.push(info);
                    continue;
                }
                Some(NodeReply::Inspect(Err(e))) => e,
                Some(other) => self.other_reply(other),
                None => self.timeout(),
            };
            self.causes.push(self.failure(i, NodeCause::Error(error)));
        }
        let q = self.quorum.quorum;
        if infos.len() < q {
            let error = self.error(RoundFailure::NoQuorum, infos.len(), Vec::new());
            return self.decide(Verdict::Inspect(Err(error)));
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
        if let Some((holder, _)) = votes.into_iter().find(|(_, c)| *c >= q) {
            let theirs: Vec<&LeaseInfo> = infos
                .iter()
                .filter(|i| i.holder.as_deref() == Some(holder))
                .collect();
            out.holder = Some(holder.to_owned());
            out.metadata = theirs.first().and_then(|i| i.metadata.clone());
            out.remaining = qth_largest(theirs.iter().filter_map(|i| i.remaining).collect(), q)
                .and_then(|r| self.conservative(r, elapsed));
        }
        self.decide(Verdict::Inspect(Ok(out)));
    }

    /// The error for a failed round: a quorum of permanent refusals stays permanent (retrying
    /// cannot help); anything else is a [`QuorumError`] in [`BackendError::Unavailable`] when
    /// the round provably left nothing applied ([`QuorumError::effect`]), else in
    /// [`BackendError::OutcomeUnknown`].
    fn error(
        &mut self,
        failure: RoundFailure,
        successes: usize,
        cleanup_failures: Vec<NodeFailure>,
    ) -> BackendError {
        let e = QuorumError {
            op: self.op,
            failure,
            successes,
            quorum: self.quorum.quorum,
            nodes: self.quorum.nodes(),
            causes: std::mem::take(&mut self.causes),
            cleanup_failures,
        };
        round_error(e)
    }
}

/// Sorted descending, the `q`-th value: the largest value that at least `q` of them reach.
fn qth_largest(mut values: Vec<Duration>, q: usize) -> Option<Duration> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(q.checked_sub(1)?).copied()
}

/// See [`Round::error`].
fn round_error(e: QuorumError) -> BackendError {
    let permanent = |pred: fn(&BackendError) -> bool| {
        e.causes
            .iter()
            .filter(|c| matches!(&c.cause, NodeCause::Error(b) if pred(b)))
            .count()
            >= e.quorum
    };
    if permanent(|b| matches!(b, BackendError::TokenExhausted(_))) {
        return BackendError::TokenExhausted(e.to_string());
    }
    // Permanent only when nothing may have been applied anywhere (a minority that renewed,
    // deleted or did not answer makes the round's outcome unknown).
    let settled = e.effect() == Effect::NotApplied;
    if settled && permanent(|b| matches!(b, BackendError::Invalid(_))) {
        return BackendError::Invalid(e.to_string());
    }
    if settled && permanent(|b| !b.is_transient()) {
        return BackendError::Refused(e.to_string());
    }
    BackendError::from(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qth_largest_picks_the_quorums_minimum() {
        let ms = Duration::from_millis;
        assert_eq!(qth_largest(vec![ms(1), ms(5), ms(3)], 2), Some(ms(3)));
        assert_eq!(qth_largest(vec![ms(1)], 2), None);
        assert_eq!(qth_largest(vec![ms(1)], 0), None);
    }
}
