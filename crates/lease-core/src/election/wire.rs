//! What an election and its driver exchange: requests ([`Request`], [`RequestKind`]), replies
//! ([`Reply`]), and what the election reports ([`Event`], [`Role`], [`StepDownReason`]).

#[cfg(doc)]
use super::Election;
use super::RequestId;
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, ReleaseOutcome, ReleaseRequest, RenewOutcome,
    RenewRequest,
};
use crate::lease::LossReason;
use crate::time::Instant;
use crate::token::{StoreLoss, Token};

/// Which operation a request or error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Acquire the lease.
    Acquire,
    /// Renew the lease.
    Renew,
    /// Release the lease.
    Release,
}

/// What to send.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// Acquire the lease.
    Acquire(AcquireRequest),
    /// Renew the lease.
    Renew(RenewRequest),
    /// Release the lease.
    Release(ReleaseRequest),
}

impl RequestKind {
    /// The operation.
    pub fn op(&self) -> Op {
        match self {
            RequestKind::Acquire(_) => Op::Acquire,
            RequestKind::Renew(_) => Op::Renew,
            RequestKind::Release(_) => Op::Release,
        }
    }
}

/// A request the machine asks the driver to send.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request {
    /// Its id, to pass back with the reply.
    pub id: RequestId,
    /// What to send.
    pub kind: RequestKind,
    /// When it was sent (the `now` it was polled at): leases are dated from it.
    pub sent_at: Instant,
    /// When to stop waiting and report [`Reply::TimedOut`]. A reply that is ready when the
    /// deadline fires counts as the reply.
    pub deadline: Instant,
}

impl Request {
    /// A request (the machine makes its own; a driver makes one to clean up after it).
    pub fn new(id: RequestId, kind: RequestKind, sent_at: Instant, deadline: Instant) -> Request {
        Request {
            id,
            kind,
            sent_at,
            deadline,
        }
    }
}

/// The reply to a request.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reply {
    /// Reply to an acquire.
    Acquire(Result<AcquireOutcome, BackendError>),
    /// Reply to a renew.
    Renew(Result<RenewOutcome, BackendError>),
    /// Reply to a release.
    Release(Result<ReleaseOutcome, BackendError>),
    /// No reply by the request's deadline: the outcome is unknown.
    TimedOut,
}

/// Why a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepDownReason {
    /// A renewal found the lease held by someone else.
    Lost,
    /// The local deadline passed without a successful renewal.
    DeadlineExpired,
    /// [`Election::resign`] was called.
    Resigned,
    /// [`Election::shutdown`] was called.
    Shutdown,
    /// The leader's work returned ([`Election::work_returned`]).
    WorkReturned,
    /// The store refused a request with a permanent error: the election stops (see
    /// [`Event::Failed`]).
    Refused,
}

impl From<LossReason> for StepDownReason {
    fn from(r: LossReason) -> Self {
        match r {
            LossReason::NotOurs => StepDownReason::Lost,
            LossReason::DeadlineExpired => StepDownReason::DeadlineExpired,
            LossReason::Refused => StepDownReason::Refused,
            // Only a capped lock ends so; an election's lease never does.
            LossReason::MaxHoldReached => StepDownReason::DeadlineExpired,
        }
    }
}

/// What the election reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// This instance leads a new term.
    Elected {
        /// The term's fencing token.
        token: Token,
        /// The local deadline of the lease as first acquired.
        valid_until: Instant,
    },
    /// The term with `token` ended.
    SteppedDown {
        /// The ended term's token.
        token: Token,
        /// Why.
        reason: StepDownReason,
    },
    /// This instance became a follower (once per transition).
    Follower {
        /// The current holder, when the backend reported it.
        holder: Option<String>,
    },
    /// A failure the machine tolerated (retried, backed off, or stepped down from).
    Error {
        /// Which operation failed.
        op: Op,
        /// The failure.
        error: BackendError,
    },
    /// A request was refused with a permanent error ([`BackendError::is_transient`] is false:
    /// `NOPERM`, `WRONGTYPE`, invalid input, ...). Retrying cannot help, so the
    /// election stops: the term (if any) ends with [`StepDownReason::Refused`], what this
    /// instance may hold is released, then [`Event::Stopped`].
    Failed {
        /// Which operation was refused.
        op: Op,
        /// The refusal.
        error: BackendError,
    },
    /// A release completed (or failed: `outcome` is `None`).
    Released {
        /// The released term's token (`None` for the release of a lease an unanswered
        /// acquire may have won).
        token: Option<Token>,
        /// What the backend said.
        outcome: Option<ReleaseOutcome>,
    },
    /// The store lost fence state that this instance had seen (a new epoch, or a counter below
    /// a token it saw minted). Reported once per discovery; the next acquire by this instance
    /// heals it (it carries the highest token seen as its floor). A term in progress is not
    /// ended by it: the lease itself is judged by renewals.
    StoreLost(StoreLoss),
    /// After [`Election::shutdown`]: everything is released; no more requests.
    Stopped,
}

/// The role at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// Contending, role not yet known (starting, or the backend is not answering).
    Candidate,
    /// Someone else holds the lease.
    Follower,
    /// This instance leads the term with this token.
    Leader(Token),
    /// Shut down.
    Stopped,
}
