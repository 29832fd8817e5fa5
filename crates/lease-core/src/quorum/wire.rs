//! What a [`Round`](super::Round) and a driver exchange: the requests to nodes
//! ([`NodeRequest`]), the nodes' replies ([`NodeReply`]), the round's [`Verdict`], and the
//! [`RoundInputError`] a reply the round cannot take is refused with.

use std::sync::Arc;
use std::time::Duration;

use super::turn::TurnKey;
#[cfg(doc)]
use super::{Quorum, Round};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, RenewOutcome, RenewRequest,
};
use crate::time::Instant;
use crate::token::Token;

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

/// What a request asked, named like the [`NodeRequestKind`] variant: a reply must answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asked {
    Acquire,
    Raise,
    Renew,
    Release,
    Remaining,
    Inspect,
}

impl Asked {
    pub(super) fn name(self) -> &'static str {
        match self {
            Asked::Acquire => "acquire",
            Asked::Raise => "raise",
            Asked::Renew => "renew",
            Asked::Release => "release",
            Asked::Remaining => "remaining",
            Asked::Inspect => "inspect",
        }
    }
}

impl NodeRequestKind {
    /// What this request asks.
    pub(super) fn asked(&self) -> Asked {
        match self {
            NodeRequestKind::Acquire(_) => Asked::Acquire,
            NodeRequestKind::Raise { .. } => Asked::Raise,
            NodeRequestKind::Renew(_) => Asked::Renew,
            NodeRequestKind::Release(_) => Asked::Release,
            NodeRequestKind::Remaining { .. } => Asked::Remaining,
            NodeRequestKind::Inspect { .. } => Asked::Inspect,
        }
    }
}

impl NodeReply {
    /// What this reply answers; `None` for a timeout, which answers anything.
    pub(super) fn answers(&self) -> Option<Asked> {
        Some(match self {
            NodeReply::Acquire(_) => Asked::Acquire,
            NodeReply::Raise(_) => Asked::Raise,
            NodeReply::Renew(_) => Asked::Renew,
            NodeReply::Release(_) => Asked::Release,
            NodeReply::Remaining(_) => Asked::Remaining,
            NodeReply::Inspect(_) => Asked::Inspect,
            NodeReply::TimedOut => return None,
        })
    }
}
