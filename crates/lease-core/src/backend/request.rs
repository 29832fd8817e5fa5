//! The typed requests of [`LeaseBackend`](super::LeaseBackend) and what each found.

use std::sync::Arc;
use std::time::Duration;

use super::{LeaseSpec, Metadata, Owner};
use crate::config::Ttl;
use crate::token::{Epoch, FenceMark, FenceState, Token};

/// Acquire (or take over, for the same owner) a lease. Built with [`AcquireRequest::new`]
/// (fields may be added: the struct is `#[non_exhaustive]`).
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use lease_core::{AcquireRequest, LeaseSpec, Metadata, Owner, Token, Ttl};
/// let req = AcquireRequest::new(
///     Arc::new(LeaseSpec::election("{jobs}")),
///     Owner::new("host-a-1")?,
///     Ttl::new(Duration::from_secs(5))?,
/// )
/// .with_metadata(Metadata::new("10.0.0.7:8080")?)
/// .with_floor(Some(Token::new(41)?));
/// assert_eq!(req.floor, Some(Token::new(41)?));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lease's keys.
    pub spec: Arc<LeaseSpec>,
    /// Who acquires.
    pub owner: Owner,
    /// The TTL to set.
    pub ttl: Ttl,
    /// Metadata stored with the owner.
    pub metadata: Metadata,
    /// The highest token the acquirer has seen this store mint (its own grants, and holders'
    /// tokens reported by refused acquires), or a durable floor from a fenced resource: the
    /// store mints above it, whatever its counter says. This is how a store that lost its
    /// counter is healed by the first instance that remembers more. `None`: no floor.
    pub floor: Option<Token>,
    /// Others in this process wait for this lease's release (a driver's reading of its
    /// release watch, [`ReleaseWatch::others_wait`](crate::notify::ReleaseWatch::others_wait)):
    /// a store that announces a release only when it knows someone waits (Redis: the waiter
    /// mark, see `docs/handover.md`) records them with the new holder, since they will not
    /// attempt (and so not announce themselves) until woken. `false` by default.
    pub waiters: bool,
    /// How long this acquire, finding a read-write lock's key held by readers, keeps new
    /// readers out: the life of the waiting-writer mark it sets (see [`crate::rwlock`]).
    /// `None`: it sets none (a writer that will not try again must not block anyone). The
    /// TTL by default; a lock's plan sets [`crate::rwlock::writer_mark`].
    pub writer_mark: Option<Duration>,
}

/// Extend a lease this owner holds. Built with [`RenewRequest::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewRequest {
    /// The lease's keys.
    pub spec: Arc<LeaseSpec>,
    /// Who renews.
    pub owner: Owner,
    /// The new TTL.
    pub ttl: Ttl,
}

/// Release a lease this owner holds (compare-and-delete). Built with [`ReleaseRequest::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseRequest {
    /// The lease's keys.
    pub spec: Arc<LeaseSpec>,
    /// Who releases.
    pub owner: Owner,
    /// The token of the term to release, when the release is term-scoped: release only if the fence counter still equals this term's token: a release
    /// that arrives late never deletes a later term of the same owner. Backends that cannot
    /// check it (quorum backends) may ignore it.
    pub term_token: Option<Token>,
}

impl AcquireRequest {
    /// An acquire of `spec` by `owner` for `ttl`, with no metadata and no floor.
    pub fn new(spec: Arc<LeaseSpec>, owner: Owner, ttl: Ttl) -> AcquireRequest {
        AcquireRequest {
            spec,
            owner,
            ttl,
            metadata: Metadata::default(),
            floor: None,
            waiters: false,
            writer_mark: Some(ttl.get()),
        }
    }

    /// With `metadata` stored next to the owner.
    pub fn with_metadata(mut self, metadata: Metadata) -> AcquireRequest {
        self.metadata = metadata;
        self
    }

    /// With a token floor (see [`AcquireRequest::floor`]).
    pub fn with_floor(mut self, floor: Option<Token>) -> AcquireRequest {
        self.floor = floor;
        self
    }

    /// Whether others in this process wait for the release (see
    /// [`AcquireRequest::waiters`]).
    pub fn with_waiters(mut self, waiters: bool) -> AcquireRequest {
        self.waiters = waiters;
        self
    }

    /// With the waiting-writer mark's life (see [`AcquireRequest::writer_mark`]; `None`: no
    /// mark), at most the TTL.
    pub fn with_writer_mark(mut self, mark: Option<Duration>) -> AcquireRequest {
        self.writer_mark = mark.map(|m| m.min(self.ttl.get()));
        self
    }
}

impl RenewRequest {
    /// A renewal of `spec` by `owner` to `ttl`.
    pub fn new(spec: Arc<LeaseSpec>, owner: Owner, ttl: Ttl) -> RenewRequest {
        RenewRequest { spec, owner, ttl }
    }
}

impl ReleaseRequest {
    /// A release of `spec` by `owner`, not scoped to a term.
    pub fn new(spec: Arc<LeaseSpec>, owner: Owner) -> ReleaseRequest {
        ReleaseRequest {
            spec,
            owner,
            term_token: None,
        }
    }

    /// Scoped to the term of `token` (see [`ReleaseRequest::term_token`]).
    pub fn with_term_token(mut self, token: Option<Token>) -> ReleaseRequest {
        self.term_token = token;
        self
    }
}

/// What an acquire found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// The lease is ours; `token` is minted when the lease is fenced.
    Acquired {
        /// The fencing token of this acquisition.
        token: Option<Token>,
        /// The fence state the token was minted above ([`FenceState::UNKNOWN`] when unfenced
        /// or not reported).
        fence: FenceState,
    },
    /// Someone else holds (at least one of) the keys; nothing was changed.
    Held {
        /// The holder's owner value, when the backend reports it.
        holder: Option<String>,
        /// The holder's remaining TTL, when the backend reports it.
        remaining: Option<Duration>,
        /// The fence state now (the holder's token, the epoch), when reported.
        fence: FenceState,
    },
}

/// What a renew found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// Extended.
    Renewed,
    /// Not ours any more (expired, or someone else holds it): nothing was changed.
    NotHeld,
}

/// What a [hand-off](crate::LeaseBackend::hand_off) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandOffOutcome {
    /// The lease was ours and nobody outside was known to wait: it now holds the receiver's
    /// value with the receiver's TTL (set when the step ran), and is no longer ours.
    HandedOff,
    /// The lease was ours, but someone else may be waiting for it (or the backend cannot hand
    /// off): it was released exactly as [`LeaseBackend::release`](crate::LeaseBackend::release)
    /// does (waiters notified), and the receiver got nothing.
    Released,
    /// Not ours: nothing changed, and the receiver got nothing.
    NotHeld,
}

impl From<ReleaseOutcome> for HandOffOutcome {
    fn from(outcome: ReleaseOutcome) -> Self {
        match outcome {
            ReleaseOutcome::Released => HandOffOutcome::Released,
            _ => HandOffOutcome::NotHeld,
        }
    }
}

/// What a release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// Every key was ours and is deleted.
    Released,
    /// Not (entirely) ours: only keys still holding our value were deleted, nothing else.
    NotHeld,
}

/// What an administrator's [forced release](crate::LeaseBackend::force_release) did. Either
/// way, a fenced lease's counter and applied mark now hold a fresh token (`fence`), above
/// every token minted before: the broken holder's fenced writes are refused from now on, and
/// the next acquire mints above it, so the next holder's are accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceReleaseOutcome {
    /// The lease was held (on at least one key) and every held key is deleted.
    Released {
        /// The owner of the first held key (its owner part, without metadata).
        holder: String,
        /// The token minted into counter and mark; `None` when the lease is unfenced.
        fence: Option<Token>,
    },
    /// No key was held: nothing was deleted (the fence was still raised, for a holder whose
    /// lease lapsed but who may still write).
    NotHeld {
        /// The token minted into counter and mark; `None` when the lease is unfenced.
        fence: Option<Token>,
    },
}

impl ForceReleaseOutcome {
    /// Whether a holder was removed.
    pub fn was_held(&self) -> bool {
        matches!(self, ForceReleaseOutcome::Released { .. })
    }

    /// The token now in the fence counter and the applied mark (`None`: unfenced).
    pub fn fence(&self) -> Option<Token> {
        match self {
            ForceReleaseOutcome::Released { fence, .. }
            | ForceReleaseOutcome::NotHeld { fence } => *fence,
        }
    }
}

/// What an inspection of a lease found. An adapter builds it from
/// `LeaseInfo::default()` and sets the fields it knows (the struct is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The current holder of the first key, if any.
    pub holder: Option<String>,
    /// Metadata stored with the holder.
    pub metadata: Option<String>,
    /// The holder's remaining TTL.
    pub remaining: Option<Duration>,
    /// The fence counter: the latest token minted (the current holder's, while held).
    pub counter: Option<Token>,
    /// The applied mark.
    pub mark: FenceMark,
    /// The store's fence epoch, when it keeps one (see [`Epoch`]).
    pub epoch: Option<Epoch>,
}
