//! [`QuorumError`]: a quorum round that failed, with the cause on every node.
//!
//! Made by the round machine ([`super::round`]) and re-exported by `lease-redlock`, whose
//! backend returns it inside a [`BackendError`].

use std::fmt;
use std::time::Duration;

use crate::backend::{BackendError, Effect};
use crate::token::Token;

/// Which operation a quorum round performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuorumOp {
    /// Acquire (for a fenced lease: the acquire round and the raise round).
    Acquire,
    /// Renew (extend).
    Renew,
    /// Release.
    Release,
    /// The remaining TTL.
    Remaining,
    /// Inspection.
    Inspect,
}

impl fmt::Display for QuorumOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuorumOp::Acquire => "acquire",
            QuorumOp::Renew => "renew",
            QuorumOp::Release => "release",
            QuorumOp::Remaining => "remaining",
            QuorumOp::Inspect => "inspect",
        })
    }
}

/// Why a round failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoundFailure {
    /// Fewer than a quorum of nodes succeeded, and the other replies do not settle the
    /// question (errors and timeouts: the outcome is inconclusive).
    NoQuorum,
    /// A quorum succeeded, but the round took so long that no validity is left:
    /// `ttl − elapsed − drift <= 0`.
    ValidityExhausted {
        /// How long the round took, from its single start instant.
        elapsed: Duration,
    },
    /// Fenced acquire: the acquire round reached a quorum with token `token` (the maximum of
    /// the nodes' tokens), but the raise round did not reach a quorum with positive validity.
    RaiseFailed {
        /// The token the raise round tried to establish.
        token: Token,
        /// How long both rounds took, from the acquire round's start instant.
        elapsed: Duration,
    },
}

/// What one node answered, when it did not count as a success.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeCause {
    /// The node failed, or did not answer within the operation timeout
    /// ([`BackendError::Timeout`]): the request may or may not have taken effect there.
    Error(BackendError),
    /// Acquire: someone else holds the lease on this node.
    Held {
        /// The holder on this node, when reported.
        holder: Option<String>,
    },
    /// Renew, release, raise, remaining: the lease is not (entirely) ours on this node.
    NotOurs,
    /// The round decided without this node's reply (a quorum was reached, or could no longer
    /// be reached, before it came): its request is still in flight, so its effect there is
    /// unknown. Never counted as "not applied".
    Unanswered,
}

impl NodeCause {
    /// Whether this cause says for certain that nothing was applied on the node: a refusal
    /// (held by another, not ours) or an error that provably never took effect. A timeout, an
    /// ambiguous error or a reply not awaited ([`NodeCause::Unanswered`]) is not definite.
    pub fn is_definite(&self) -> bool {
        match self {
            NodeCause::Error(e) => e.effect() == Effect::NotApplied,
            NodeCause::Held { .. } | NodeCause::NotOurs => true,
            NodeCause::Unanswered => false,
        }
    }
}

impl fmt::Display for NodeCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeCause::Error(e) => write!(f, "{e}"),
            NodeCause::Held { holder: Some(h) } => write!(f, "held by {h:?}"),
            NodeCause::Held { holder: None } => f.write_str("held by another owner"),
            NodeCause::NotOurs => f.write_str("not ours"),
            NodeCause::Unanswered => {
                f.write_str("no reply awaited: the round decided before it came")
            }
        }
    }
}

/// One node's cause, with its position in the node list and its address.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node's index in the node list (the order given to the round's [`super::Quorum`]).
    pub index: usize,
    /// The node's identity (its address, as given to [`super::Quorum::new`]).
    pub address: String,
    /// What it answered.
    pub cause: NodeCause,
}

impl NodeFailure {
    /// A node's cause.
    pub fn new(index: usize, address: impl Into<String>, cause: NodeCause) -> Self {
        NodeFailure {
            index,
            address: address.into(),
            cause,
        }
    }

    /// Whether the node did not answer in time.
    pub fn is_timeout(&self) -> bool {
        matches!(self.cause, NodeCause::Error(BackendError::Timeout(_)))
    }
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({}): {}", self.index, self.address, self.cause)
    }
}

/// A quorum round that failed without a conclusive answer: carried in
/// [`BackendError::Unavailable`] or [`BackendError::OutcomeUnknown`] according to
/// [`QuorumError::effect`] (find it with [`QuorumError::find`]).
///
/// It still matches as "not acquired" for an acquire ([`QuorumError::is_not_acquired`]) and as
/// "lost" for a renew or release ([`QuorumError::is_lost`]). Conclusive answers are outcomes,
/// not errors: a quorum that says someone else holds the lease is
/// [`crate::AcquireOutcome::Held`], a quorum that says it is not ours is
/// [`crate::RenewOutcome::NotHeld`] / [`crate::ReleaseOutcome::NotHeld`].
#[derive(Debug)]
#[non_exhaustive]
pub struct QuorumError {
    /// The operation.
    pub op: QuorumOp,
    /// Why the round failed.
    pub failure: RoundFailure,
    /// How many nodes succeeded (for a failed raise round: how many raised).
    pub successes: usize,
    /// How many successes were needed: `nodes / 2 + 1`.
    pub quorum: usize,
    /// The number of nodes.
    pub nodes: usize,
    /// Every node that did not succeed, in node order, with its cause.
    pub causes: Vec<NodeFailure>,
    /// The nodes where the cleanup (compare-and-delete) that followed the failed round did not
    /// get an answer; their keys expire with the TTL. Empty when the cleanup was answered by
    /// every node, or when the operation runs no cleanup.
    pub cleanup_failures: Vec<NodeFailure>,
}

impl QuorumError {
    /// Whether this is a failed acquisition: the lease was **not acquired** (and whatever the
    /// round took was cleaned up).
    pub fn is_not_acquired(&self) -> bool {
        self.op == QuorumOp::Acquire
    }

    /// Whether this is a failed renew or release: the caller must treat the lease as **lost**
    /// unless a later renewal succeeds before its local deadline.
    pub fn is_lost(&self) -> bool {
        matches!(self.op, QuorumOp::Renew | QuorumOp::Release)
    }

    /// Whether any node timed out.
    pub fn any_timeout(&self) -> bool {
        self.causes.iter().any(NodeFailure::is_timeout)
    }

    /// Whether the failed round may have taken effect:
    ///
    /// - acquire: [`Effect::NotApplied`] when the cleanup that follows a failed acquire round
    ///   was answered by every node, or provably never reached the ones that did not answer
    ///   it, nor did the acquire (nothing is held anywhere); else unknown;
    /// - renew, release: [`Effect::NotApplied`] only when no node succeeded and every node's
    ///   failure was itself "not applied" (a minority that extended or deleted, or a node
    ///   without an answer, makes it unknown);
    /// - remaining, inspect: reads, nothing to apply.
    pub fn effect(&self) -> Effect {
        let definite = self.causes.iter().all(|c| c.cause.is_definite());
        let settled = match self.op {
            // Nothing is held where the cleanup was answered, nor where both the acquire and
            // the cleanup provably never got through (a refused connection).
            QuorumOp::Acquire => self.cleanup_failures.iter().all(|f| {
                f.cause.is_definite()
                    && self
                        .causes
                        .iter()
                        .filter(|c| c.index == f.index)
                        .all(|c| c.cause.is_definite())
            }),
            QuorumOp::Renew | QuorumOp::Release => self.successes == 0 && definite,
            QuorumOp::Remaining | QuorumOp::Inspect => true,
        };
        if settled {
            Effect::NotApplied
        } else {
            Effect::Unknown
        }
    }

    /// The quorum error inside a backend error, if it is one.
    ///
    /// ```
    /// use lease_core::BackendError;
    /// use lease_core::quorum::QuorumError;
    /// assert!(QuorumError::find(&BackendError::Timeout(std::time::Duration::ZERO)).is_none());
    /// ```
    pub fn find(error: &BackendError) -> Option<&QuorumError> {
        match error {
            BackendError::Other(e)
            | BackendError::Unavailable(e)
            | BackendError::OutcomeUnknown(e) => e.downcast_ref::<QuorumError>(),
            _ => None,
        }
    }
}

impl fmt::Display for QuorumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "redlock {} failed: {} of {} nodes succeeded, quorum is {}",
            self.op, self.successes, self.nodes, self.quorum
        )?;
        match self.failure {
            RoundFailure::NoQuorum => {}
            RoundFailure::ValidityExhausted { elapsed } => {
                write!(f, "; no validity left after {elapsed:?}")?;
            }
            RoundFailure::RaiseFailed { token, elapsed } => write!(
                f,
                "; the raise round to token {token} did not reach a quorum with validity left \
                 ({elapsed:?} elapsed)"
            )?,
        }
        for c in &self.causes {
            write!(f, "; {c}")?;
        }
        if !self.cleanup_failures.is_empty() {
            f.write_str("; cleanup unanswered on")?;
            for c in &self.cleanup_failures {
                write!(f, " node {} ({}: {})", c.index, c.address, c.cause)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for QuorumError {}

impl From<QuorumError> for BackendError {
    /// [`BackendError::Unavailable`] when the round left nothing applied, else
    /// [`BackendError::OutcomeUnknown`] (see [`QuorumError::effect`]); both are transient.
    fn from(e: QuorumError) -> BackendError {
        match e.effect() {
            Effect::NotApplied => BackendError::Unavailable(Box::new(e)),
            _ => BackendError::OutcomeUnknown(Box::new(e)),
        }
    }
}
