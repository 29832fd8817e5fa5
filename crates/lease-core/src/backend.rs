//! The backend trait adapters implement, and its typed requests and outcomes.
//!
//! A backend stores leases: one or more lock keys holding an owner value with a TTL, and
//! optionally a fence counter (`<fence>`) and an applied mark (`<fence>:applied`). Outcomes
//! (acquired, held by someone else, not ours) are values; failures to get an answer are
//! [`BackendError`]s. Every adapter implements the same semantics as the in-memory backend
//! ([`crate::memory::MemoryBackend`]), which is the executable specification:
//!
//! - **acquire**: if every lock key is absent or holds this owner, mint the next token above
//!   the counter, the applied mark and the request's floor (the mark and the floor heal a counter
//!   that went back), floored by the server's clock under
//!   [`TokenScheme::ClockFloored`](crate::TokenScheme::ClockFloored), store it in counter and mark, create the fence epoch if absent, then
//!   set every key to the owner value with the TTL. Same-owner takeover mints a fresh token.
//!   Otherwise nothing changes and the outcome is [`AcquireOutcome::Held`]. Both outcomes report
//!   the [`FenceState`] seen.
//! - **renew**: if every key holds this owner, set the TTL on each; otherwise nothing changes.
//! - **release**: delete every key that holds this owner (compare-and-delete), unless a `term`
//!   is given and the counter has moved past it (a later term of the same owner).
//! - **fenced write**: guard (`token >= 1`, `token >= mark`), write, then advance the mark.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::config::{ConfigError, MAX_ID_LEN, MAX_NAME_LEN, Ttl, check_text};
use crate::notify::{ReleaseWatch, WatchRole};
use crate::preflight::StoreReport;
use crate::token::{Epoch, FenceMark, FenceState, Token};

/// The most keys one lease may span.
pub const MAX_KEYS: usize = 64;
/// The largest metadata accepted, in bytes.
pub const MAX_METADATA_LEN: usize = 64 * 1024;

/// The keys of one lease: the lock keys and the optional fence counter.
///
/// The applied mark lives at `<fence>:applied`.
///
/// ```
/// use lease_core::LeaseSpec;
/// let e = LeaseSpec::election("{jobs}");
/// assert_eq!(e.keys(), ["{jobs}:leader"]);
/// assert_eq!(e.fence_key(), Some("{jobs}:fence"));
/// assert_eq!(e.mark_key().as_deref(), Some("{jobs}:fence:applied"));
/// let l = LeaseSpec::lock(["a", "b"], None)?;
/// assert_eq!(l.keys().len(), 2);
/// assert!(LeaseSpec::lock(["a", "a"], None).is_err());
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct LeaseSpec {
    keys: Vec<String>,
    fence: Option<String>,
}

impl LeaseSpec {
    /// The lease of election `name`: `<name>:leader`, fenced by `<name>:fence`.
    ///
    /// The name is assumed valid (see [`crate::ElectionConfig`]).
    pub fn election(name: &str) -> LeaseSpec {
        LeaseSpec {
            keys: vec![format!("{name}:leader")],
            fence: Some(format!("{name}:fence")),
        }
    }

    /// A lock over `keys` (all-or-nothing), optionally minting tokens from `fence`.
    pub fn lock<I, S>(keys: I, fence: Option<String>) -> Result<LeaseSpec, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        if keys.is_empty() {
            return Err(ConfigError::Empty { what: "key list" });
        }
        if keys.len() > MAX_KEYS {
            return Err(ConfigError::TooManyKeys {
                len: keys.len(),
                max: MAX_KEYS,
            });
        }
        for (i, k) in keys.iter().enumerate() {
            check_key("lock key", k)?;
            if keys[..i].contains(k) {
                return Err(ConfigError::DuplicateKey(k.clone()));
            }
        }
        if let Some(f) = &fence {
            check_key("fence key", f)?;
            let mark = format!("{f}:applied");
            if let Some(k) = keys.iter().find(|k| *k == f || **k == mark) {
                return Err(ConfigError::DuplicateKey(k.clone()));
            }
        }
        Ok(LeaseSpec { keys, fence })
    }

    /// The lock keys.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The fence counter key, if fenced.
    pub fn fence_key(&self) -> Option<&str> {
        self.fence.as_deref()
    }

    /// The applied-mark key of election `name`: `<name>:fence:applied`.
    pub fn election_mark_key(name: &str) -> String {
        format!("{name}:fence:applied")
    }

    /// The applied-mark key, if fenced: `<fence>:applied`.
    pub fn mark_key(&self) -> Option<String> {
        self.fence.as_deref().map(mark_key_of)
    }

    /// The fence-epoch key, if fenced: `<fence>:epoch` (see [`Epoch`]).
    pub fn epoch_key(&self) -> Option<String> {
        self.fence.as_deref().map(epoch_key_of)
    }
}

/// The applied-mark key of a fence counter key.
pub fn mark_key_of(fence_key: &str) -> String {
    format!("{fence_key}:applied")
}

/// The fence-epoch key of a fence counter key: `<fence>:epoch`.
pub fn epoch_key_of(fence_key: &str) -> String {
    format!("{fence_key}:epoch")
}

fn check_key(what: &'static str, k: &str) -> Result<(), ConfigError> {
    if k.is_empty() {
        return Err(ConfigError::Empty { what });
    }
    if k.len() > MAX_NAME_LEN {
        return Err(ConfigError::TooLong {
            what,
            len: k.len(),
            max: MAX_NAME_LEN,
        });
    }
    Ok(())
}

/// The owner of a lease: an election's instance id, or a lock's ownership token.
///
/// Matched exactly (never by prefix). Non-empty, at most 256 bytes, no NUL byte (NUL separates
/// the owner from metadata in the stored value).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// Validates an owner.
    ///
    /// ```
    /// use lease_core::Owner;
    /// assert!(Owner::new("host-a-1").is_ok());
    /// assert!(Owner::new("").is_err());
    /// assert!(Owner::new("a\0b").is_err());
    /// ```
    pub fn new(s: impl AsRef<str>) -> Result<Owner, ConfigError> {
        let s = s.as_ref();
        check_text("owner", s, MAX_ID_LEN)?;
        Ok(Owner(Arc::from(s)))
    }

    /// The owner as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value stored in a lock key: the owner, then NUL and the metadata when there is any.
    pub fn stored_value(&self, metadata: &Metadata) -> String {
        if metadata.is_empty() {
            self.0.to_string()
        } else {
            format!("{}\0{}", self.0, metadata.as_str())
        }
    }

    /// Whether a stored value belongs to this owner (exact match of the owner part).
    pub fn matches(&self, stored: &str) -> bool {
        split_stored(stored).0 == &*self.0
    }
}

/// Splits a stored lock value into owner and metadata.
pub fn split_stored(stored: &str) -> (&str, &str) {
    match stored.split_once('\0') {
        Some((o, m)) => (o, m),
        None => (stored, ""),
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Metadata stored with a lock (at most 64 KiB), returned to anyone who inspects it.
#[derive(Clone, PartialEq, Eq, Hash, Default, Debug)]
pub struct Metadata(Arc<str>);

impl Metadata {
    /// Validates metadata.
    pub fn new(s: impl AsRef<str>) -> Result<Metadata, ConfigError> {
        let s = s.as_ref();
        if s.len() > MAX_METADATA_LEN {
            return Err(ConfigError::MetadataTooLong {
                len: s.len(),
                max: MAX_METADATA_LEN,
            });
        }
        Ok(Metadata(Arc::from(s)))
    }
    /// The metadata as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

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

/// What a release found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// Every key was ours and is deleted.
    Released,
    /// Not (entirely) ours: only keys still holding our value were deleted, nothing else.
    NotHeld,
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

/// A boxed error from an adapter.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a failed request did at the store: the one question a caller must answer before it
/// acts on a failure (retry a non-idempotent write? assume the lock is free?).
///
/// ```
/// use std::time::Duration;
/// use lease_core::{BackendError, Effect};
/// assert_eq!(BackendError::Timeout(Duration::from_secs(1)).effect(), Effect::Unknown);
/// assert_eq!(BackendError::Refused("NOPERM".into()).effect(), Effect::NotApplied);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Effect {
    /// Provably not applied: refused before it was sent, the connection could not be made, or
    /// the store answered with an error before changing anything.
    NotApplied,
    /// May or may not have been applied: the request may have reached the store and no reply
    /// was seen (a timeout after sending, a connection lost or reset mid-request). Only a later
    /// read can tell; a retry of a non-idempotent write may apply it twice.
    Unknown,
    /// Applied: the error reports something about a request that took effect
    /// ([`BackendError::TokenRegression`]: the lease was granted, with a regressed token).
    Applied,
}

/// A failure to get an answer from a backend (as opposed to an answer we did not like).
///
/// Every variant says whether the request may have taken effect ([`BackendError::effect`])
/// and whether retrying can help ([`BackendError::is_transient`]):
///
/// | variant | effect | transient |
/// |---|---|---|
/// | [`Unavailable`](Self::Unavailable) | not applied | yes |
/// | [`OutcomeUnknown`](Self::OutcomeUnknown), [`Timeout`](Self::Timeout) | **unknown** | yes |
/// | [`Refused`](Self::Refused), [`Invalid`](Self::Invalid), [`TokenExhausted`](Self::TokenExhausted), [`Corrupt`](Self::Corrupt) | not applied | no |
/// | [`Protocol`](Self::Protocol) | **unknown** | yes |
/// | [`TokenRegression`](Self::TokenRegression) | applied (a report, not a failure) | no |
/// | [`Other`](Self::Other) | **unknown** | yes |
///
/// Each message includes its cause once: the wrapped error is in the message (and in the
/// variant's field), not repeated by [`std::error::Error::source`], so a reporter that prints
/// the source chain prints it once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store could not serve the request and provably did not apply it: the connection
    /// could not be made, or the store answered that it cannot serve now (Redis `LOADING`,
    /// `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `CLUSTERDOWN`, `MOVED`/`ASK`), or a quorum
    /// round failed and was cleaned up on every node. Transient: retrying can help.
    #[error("backend unavailable (not applied): {0}")]
    Unavailable(BoxError),
    /// The request may have reached the store and no reply was seen (the connection was lost
    /// or reset after sending, the connection's own response timeout fired): it may or may not
    /// have taken effect. Transient.
    #[error("outcome unknown (the request may have been applied): {0}")]
    OutcomeUnknown(BoxError),
    /// The request got no reply within `{0:?}`: it may or may not have taken effect.
    /// Transient.
    #[error("no reply within {0:?}; the outcome is unknown")]
    Timeout(Duration),
    /// The request was refused before any round trip (permanent: retrying cannot help).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store answered with a permanent error (Redis `WRONGTYPE`, a counter that is not an
    /// integer, `NOPERM`, `NOAUTH`/`WRONGPASS`, a failing script): retrying the same
    /// request cannot help, so it is reported at once, never retried. Not applied: every
    /// script of ours performs its checks before its first write (a caller's own fenced Lua
    /// body is the exception: writes it made before failing stay).
    #[error("refused by the server: {0}")]
    Refused(String),
    /// The store's reply had an unexpected shape: it did something, but we cannot tell what.
    #[error("unexpected reply (outcome unknown): {0}")]
    Protocol(String),
    /// The store refuses because a value is out of range (e.g. the counter passed 2^53).
    #[error("fence counter exhausted: {0}")]
    TokenExhausted(String),
    /// A key the fence keeps (the counter, the applied mark or the fence epoch) holds a value
    /// that is not what it must be (not a decimal integer, or above 2^53 for a counter or a
    /// mark): the store refused before writing anything. Permanent: only an operator can
    /// repair the key (delete it, or set it to a valid value); retrying cannot help, so an
    /// election stops contending instead of looping. `key` is the key's name as the store
    /// printed it (bytes outside printable ASCII escaped as `\xNN`).
    #[error("corrupt fence key {key}: {detail}")]
    Corrupt {
        /// The key's name, escaped.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The store minted a token not above one this instance was granted before: its counter
    /// went back (restart without persistence, eviction, failover). Reported, not fatal.
    #[error("fence counter regressed: minted {minted} after {previous} was granted")]
    TokenRegression {
        /// The highest token granted before.
        previous: Token,
        /// The token just minted.
        minted: Token,
    },
    /// An adapter-specific failure whose effect is unknown. Adapters that know a failure was
    /// not applied say so with [`Unavailable`](Self::Unavailable) (with the detailed error in
    /// its message) instead.
    #[error(transparent)]
    Other(BoxError),
}

impl BackendError {
    /// Whether retrying the same request can help: false for permanent refusals (invalid
    /// input, a permanent server error, an exhausted counter). An unexpected reply counts as
    /// transient: one garbled reply must not stop an election.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BackendError::Unavailable(_)
                | BackendError::OutcomeUnknown(_)
                | BackendError::Timeout(_)
                | BackendError::Protocol(_)
                | BackendError::Other(_)
        )
    }

    /// Whether the request may have taken effect at the store (see [`Effect`]).
    pub fn effect(&self) -> Effect {
        match self {
            BackendError::OutcomeUnknown(_)
            | BackendError::Timeout(_)
            | BackendError::Protocol(_)
            | BackendError::Other(_) => Effect::Unknown,
            BackendError::Unavailable(_)
            | BackendError::Invalid(_)
            | BackendError::Refused(_)
            | BackendError::TokenExhausted(_)
            | BackendError::Corrupt { .. } => Effect::NotApplied,
            BackendError::TokenRegression { .. } => Effect::Applied,
        }
    }

    /// Shorthand for `self.effect() == Effect::Unknown`.
    pub fn is_outcome_unknown(&self) -> bool {
        self.effect() == Effect::Unknown
    }

    /// A copy of this error for each request of a batch that one failure ended (a pipeline
    /// whose connection broke, a batch that timed out): the same variant, so the same
    /// [`Effect`] and [`is_transient`](Self::is_transient); a boxed source is kept as its
    /// message.
    ///
    /// ```
    /// use lease_core::BackendError;
    /// let e = BackendError::OutcomeUnknown("connection reset".into());
    /// let copy = e.duplicate();
    /// assert!(copy.is_outcome_unknown() && copy.is_transient());
    /// assert_eq!(copy.to_string(), e.to_string());
    /// ```
    pub fn duplicate(&self) -> BackendError {
        let boxed = |e: &BoxError| -> BoxError { e.to_string().into() };
        match self {
            BackendError::Unavailable(e) => BackendError::Unavailable(boxed(e)),
            BackendError::OutcomeUnknown(e) => BackendError::OutcomeUnknown(boxed(e)),
            BackendError::Timeout(d) => BackendError::Timeout(*d),
            BackendError::Invalid(m) => BackendError::Invalid(m.clone()),
            BackendError::Refused(m) => BackendError::Refused(m.clone()),
            BackendError::Protocol(m) => BackendError::Protocol(m.clone()),
            BackendError::TokenExhausted(m) => BackendError::TokenExhausted(m.clone()),
            BackendError::Corrupt { key, detail } => BackendError::Corrupt {
                key: key.clone(),
                detail: detail.clone(),
            },
            BackendError::TokenRegression { previous, minted } => BackendError::TokenRegression {
                previous: *previous,
                minted: *minted,
            },
            BackendError::Other(e) => BackendError::Other(boxed(e)),
        }
    }
}

/// How many leases the Redis backend renews in one script call of a batch
/// ([`LeaseBackend::renew_many`]); a larger batch is several calls in one pipeline, so no
/// single call holds the server for long.
pub const RENEW_BATCH_CHUNK: usize = 128;

/// Every [`LeaseBackend::renew`] of `reqs` on `backend`, concurrently; the outcomes in order.
/// The default [`LeaseBackend::renew_many`], for overrides that fall back to it.
pub async fn renew_each<B: LeaseBackend + ?Sized>(
    backend: &B,
    reqs: &[&RenewRequest],
) -> Vec<Result<RenewOutcome, BackendError>> {
    join_all(reqs.iter().map(|r| backend.renew(r)).collect()).await
}

/// Runs `futures` concurrently; their outputs in order (no runtime needed).
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Option<std::pin::Pin<Box<F>>>> =
        futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (slot, out) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// A store of leases. Implemented by the Redis, Redlock and in-memory backends.
///
/// Each method is one atomic step at the store (for Redis: one script). Implementations must not
/// retry internally: retries and timeouts are the driver's and the machine's business.
#[async_trait]
pub trait LeaseBackend: Send + Sync + 'static {
    /// Acquires the lease for `req.owner` if free or already theirs.
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError>;
    /// Extends the lease if still ours.
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError>;
    /// Releases the lease if still ours.
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError>;
    /// Extends several leases at once: one outcome per request, in order, each with the
    /// meaning of [`LeaseBackend::renew`] for that request alone (one lease's refusal or
    /// `NotHeld` never affects another's). Drivers that hold many leases call it with the
    /// renewals that fall due together (`lease-tokio`'s locks do).
    ///
    /// The default runs every [`LeaseBackend::renew`] concurrently. Backends that can carry a
    /// batch in fewer round trips override it (the Redis backend: one script call per up to
    /// [`RENEW_BATCH_CHUNK`] leases, all of them in one pipeline).
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        renew_each(self, reqs).await
    }
    /// The minimum remaining TTL over the keys if every key is held by `owner`, else `None`.
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError>;
    /// Who holds the lease now, and the fence counter and mark.
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError>;

    /// Refuses, before any round trip, a lease this backend can never serve (for example
    /// keys in different Redis Cluster slots). Drivers call it before contending.
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        let _ = spec;
        Ok(())
    }

    /// How much shorter than the TTL a lease's local validity must be, to allow for clock-rate
    /// drift between this process and the store (zero by default; Redlock's drift allowance).
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        let _ = ttl;
        Duration::ZERO
    }

    /// Reads what the store discloses about its durability, eviction and replication (see
    /// [`crate::preflight`]). A setting the store does not disclose is unknown, never an
    /// error; an error means the store could not be asked (unreachable). The default reports
    /// nothing known.
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        Ok(StoreReport::unknown(
            "this backend does not report its settings",
        ))
    }

    /// A watch on the release notifications of `spec`'s lease (see [`crate::notify`]), or
    /// `None` when this backend has none (the default): the drivers then only poll.
    ///
    /// Cheap and free of I/O: it registers the watch on the backend's hub for the lease's
    /// channel; the server-side subscription starts at [`ReleaseWatch::activate`].
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let _ = (spec, role);
        None
    }
}

#[async_trait]
impl<B: LeaseBackend + ?Sized> LeaseBackend for Arc<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        (**self).acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        (**self).renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        (**self).release(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        (**self).renew_many(reqs).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        (**self).remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        (**self).inspect(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        (**self).check_spec(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        (**self).validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        (**self).preflight().await
    }
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        (**self).release_watch(spec, role)
    }
}

/// The result of a fenced write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a stale outcome means this holder was fenced out and must stop writing"]
pub enum FenceOutcome {
    /// The write was applied and the mark advanced to the token.
    Applied,
    /// The token was below the mark: nothing was written.
    Stale {
        /// The mark that refused the write.
        mark: FenceMark,
    },
}

impl FenceOutcome {
    /// Whether the write was applied.
    pub fn is_applied(self) -> bool {
        matches!(self, FenceOutcome::Applied)
    }
}

/// A resource that enforces the fence rule atomically with each write.
///
/// Implemented by the Redis fencer, the Postgres adapter and the in-memory fencer; implement it
/// for your own store: check `token >= mark`, apply the write, and advance the mark, atomically.
#[async_trait]
pub trait FencedResource: Send + Sync {
    /// A write this resource understands.
    type Write: Send;
    /// Why a write failed (not a stale token: that is [`FenceOutcome::Stale`]).
    type Error: std::error::Error + Send + Sync + 'static;
    /// Applies `write` iff `token` passes the fence; a failed write never advances the mark.
    async fn apply(&self, token: Token, write: Self::Write) -> Result<FenceOutcome, Self::Error>;
}

/// A backend whose leases can fence writes in the same store.
pub trait Fencing {
    /// The fencer handed to each term: binds the token to the store.
    type Fencer: Clone + Send + Sync + 'static;
    /// A fencer for writes under `token` against the applied mark stored at `mark_key`
    /// (for a lease, [`LeaseSpec::mark_key`]; for an election `<name>:fence:applied`).
    fn fencer(&self, mark_key: &str, token: Token) -> Self::Fencer;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many times `needle` appears in the messages of `e` and of everything below it
    /// (the chain a reporter prints by walking `source()`).
    fn count_in_chain(e: &(dyn std::error::Error + 'static), needle: &str) -> usize {
        let mut count = 0;
        let mut next = Some(e);
        while let Some(err) = next {
            count += err.to_string().matches(needle).count();
            next = err.source();
        }
        count
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::other("wire cut");
        for e in [
            BackendError::Unavailable(Box::new(io())),
            BackendError::OutcomeUnknown(Box::new(io())),
            BackendError::Other(Box::new(io())),
        ] {
            assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        }
        // A quorum error inside, and a configuration error wrapping another.
        let e = crate::ConfigError::from(crate::quorum::QuorumConfigError::Even(4));
        assert_eq!(count_in_chain(&e, "got 4"), 1, "{e}");
    }
}
