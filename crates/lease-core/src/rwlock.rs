//! Read-write locks: shared **readers** beside each other, or one exclusive **writer**, on one
//! key — and the writer is the plain lock of that key, as `flock -s` and `flock -x` share one
//! file. Writer-preferring: a stream of readers cannot starve a waiting writer.
//!
//! # The rule (what every backend's shared operations do)
//!
//! A read-write lock `K` is one key, plus the usual fence keys of its spec:
//!
//! - while a **writer** holds it, `K` is the plain lock's string (the owner value, with the TTL:
//!   a plain `acquire` took it, exactly as today);
//! - while **readers** hold it, `K` is a sorted set: each reader's owner with the instant its
//!   hold expires, **judged by the store's clock** (on Redis owner → expiry in ms of the
//!   server's `TIME`, read inside the script); an entry whose expiry has passed is no hold and
//!   is removed by the next script that writes. The set may also hold the **waiting-writer
//!   mark**, the reserved member [`WRITER_WAITING`] (it starts with a NUL byte, which no
//!   [`Owner`] contains), scored with the instant it lapses. `K` expires with its last entry.
//!
//! A `K` that is absent, or a sorted set with no current reader, is free for a writer.
//!
//! - **acquire shared** ([`LeaseBackend::acquire_shared`]): if a writer holds `K`,
//!   [`AcquireOutcome::Held`] with the writer's owner and remaining TTL. If a current mark says
//!   a writer waits and the owner is not already a current reader, `Held` (holder `None`,
//!   remaining: until the mark lapses). Otherwise a token is minted as for a lock (from the
//!   spec's fence counter, stamping the applied mark), expired entries are removed, the
//!   owner's hold expires one TTL from now (a current reader's own hold is taken over, like a
//!   lock's same-owner takeover), and `K` expires with its last entry.
//! - **acquire** (the plain lock, [`LeaseBackend::acquire`], the writer): on a `K` holding
//!   current readers it is `Held` (holder `None`; remaining: the first reader's remaining
//!   hold, at most half its mark's life, so a waiting writer comes back before its mark
//!   lapses), and it sets the mark to lapse its request's
//!   [`writer_mark`](crate::AcquireRequest::writer_mark) from now (never earlier than it
//!   did), so readers are refused from then on; when the last reader leaves, the next attempt
//!   of any writer takes `K` (the mark goes with the set). A lock's writer marks for
//!   [`writer_mark`]`(retry, wait, ttl)`: none at all when it will not try again (no retries,
//!   or a zero wait), else `min(ttl, wait, 3 × its longest retry delay)` — so a writer that
//!   gives up stops blocking readers within three of its retry delays, not one TTL. Its fast
//!   path is unchanged: a free `K` is taken with one `SET NX PX`, which fails while readers
//!   hold `K`.
//! - **renew shared** ([`LeaseBackend::renew_shared`]): a current reader's hold expires one TTL
//!   from now (a waiting writer does not stop it); otherwise nothing changes ("not held").
//! - **release shared** ([`LeaseBackend::release_shared`]): removes expired entries and the
//!   owner's; when the owner's hold was current it is "released", and when no reader is left
//!   the release notice is sent on `K`'s channel (a waiting writer wakes at once).
//! - The plain lock's **renew**, **release** and **remaining** treat a `K` holding readers as
//!   not held by the caller (never a type error); its **inspect** reports the reader whose hold
//!   expires first as the holder.
//! - **remaining** ([`LeaseBackend::shared_remaining`]) and **inspect**
//!   ([`LeaseBackend::inspect_shared`]) only read.
//!
//! A read-write lock is one key: a spec of more than one key is refused before any round trip
//! ([`check_shared_spec`]). On Redis Cluster its fence keys must share `K`'s slot (give the
//! name a hash tag), as for any fenced lock.
//!
//! # Guarantees
//!
//! The store never holds a writer beside a current reader, nor two writers: `K` is one value,
//! either the writer's string or the readers' set, and every operation judges it atomically.
//! Each holder's local deadline follows the lock rules ([`crate::lock::HeldLock`]: dated from
//! the send, never later than what the store was told), so a holder that believes it holds
//! holds — under the same assumptions as a lock. A crashed reader's hold expires with its TTL.
//! Writer preference: once a writer has tried and found readers, no new reader is admitted
//! while it keeps trying at least once per TTL; the readers already in leave or expire, and
//! the writer gets in.
//!
//! # Tokens
//!
//! Readers and writers mint from the same fence counter, so every token is distinct and they
//! increase in the order holds began: a writer's token is above every reader admitted before
//! it and below every reader admitted after it. Every acquire stamps the applied mark, so a
//! writer whose hold ended before a reader was admitted is fenced out of the resource. A
//! resource orders a read against the writes: a reader whose token is below the token of a
//! write it sees read after that writer was admitted, so its hold had ended.
//!
//! # Driving
//!
//! A reader's hold is obtained, renewed, refreshed and released by exactly the lock machines
//! through [`SharedBackend`], the view of a backend whose acquire, renew, release and
//! remaining are its shared operations; the renewals of auto-renewed readers that fall due
//! together leave as one batch ([`LeaseBackend::renew_shared_many`]: on Redis one script call
//! per [`RENEW_BATCH_CHUNK`](crate::backend::RENEW_BATCH_CHUNK) readers), each judged alone.
//! Its release watch is an observer's, so a release wakes every waiting reader (readers
//! share), where a lock's wakes one contender.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, Fencing, LeaseBackend, LeaseInfo, LeaseSpec,
    Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
use crate::config::Ttl;
use crate::notify::{ReleaseWatch, WatchRole};
use crate::preflight::StoreReport;
use crate::retry::RetryStrategy;
use crate::semaphore::PermitHolder;
use crate::token::{FenceMark, Token};

/// The reserved member of a read-held key that says a writer waits (a NUL byte first: no
/// [`Owner`] contains one, so it never meets a reader's owner).
pub const WRITER_WAITING: &str = "\0writer-waiting";

/// [`BackendError::Invalid`] unless `spec` is one key: a read-write lock is one key.
pub fn check_shared_spec(spec: &LeaseSpec) -> Result<(), BackendError> {
    if spec.keys().len() == 1 {
        Ok(())
    } else {
        Err(BackendError::Invalid(format!(
            "a read-write lock is one key, got {:?}",
            spec.keys()
        )))
    }
}

/// How long a writer blocked by readers may stay away before trying again: the first reader's
/// remaining hold, at most half its mark's life (the mark lapses that long after it is set;
/// `mark` is the writer's [`AcquireRequest::writer_mark`](crate::AcquireRequest::writer_mark),
/// or its TTL when it sets none).
pub fn writer_retry_within(first_reader: Duration, mark: Duration) -> Duration {
    first_reader.min(mark / 2)
}

/// How many of a writer's longest retry delays its waiting mark outlives: a writer that keeps
/// trying renews the mark long before it lapses (a jittered delay is at most 1.25 × the
/// longest), and one that gave up stops blocking readers that much later at most.
pub const WRITER_MARK_RETRIES: u32 = 3;

/// The life of the waiting-writer mark of a writer with `retry`, `wait` and `ttl` (what
/// [`LockOptions::plan`](crate::lock::LockOptions::plan) puts in its acquire request):
/// `None` — no mark — when it will never try again (no retries, or no wait), else
/// `min(ttl, wait, WRITER_MARK_RETRIES × the longest retry delay)`.
///
/// ```
/// use std::time::Duration;
/// use lease_core::RetryStrategy;
/// use lease_core::rwlock::writer_mark;
/// let s = Duration::from_secs;
/// let ms = Duration::from_millis;
/// assert_eq!(writer_mark(&RetryStrategy::none(), s(60), s(60)), None);
/// let linear = RetryStrategy::linear(ms(100))?;
/// assert_eq!(writer_mark(&linear, Duration::ZERO, s(60)), None);
/// assert_eq!(writer_mark(&linear, s(60), s(60)), Some(ms(300)));
/// assert_eq!(writer_mark(&linear, s(60), ms(200)), Some(ms(200)));
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn writer_mark(retry: &RetryStrategy, wait: Duration, ttl: Duration) -> Option<Duration> {
    if wait.is_zero() {
        return None;
    }
    let longest = retry.longest_delay()?;
    Some(
        ttl.min(wait)
            .min(longest.saturating_mul(WRITER_MARK_RETRIES))
            .max(Duration::from_millis(1)),
    )
}

/// What [`LeaseBackend::inspect_shared`] found. An adapter builds it from
/// `SharedInfo::default()` (the struct is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SharedInfo {
    /// The writer (the plain lock's holder), while one holds the key.
    pub writer: Option<PermitHolder>,
    /// The current readers, the one whose hold expires first first (ties by owner).
    pub readers: Vec<PermitHolder>,
    /// How long the waiting-writer mark still stands, while it does.
    pub writer_waiting: Option<Duration>,
    /// The fence counter: the latest token minted.
    pub counter: Option<Token>,
    /// The applied mark.
    pub mark: FenceMark,
}

/// A view of `B` whose lease operations are `B`'s shared (reader) operations: `acquire` is
/// [`LeaseBackend::acquire_shared`], `renew` [`LeaseBackend::renew_shared`] (and a batch of
/// renewals, `renew_many`, [`LeaseBackend::renew_shared_many`]), `release`
/// [`LeaseBackend::release_shared`], `remaining` [`LeaseBackend::shared_remaining`], `inspect`
/// reads [`LeaseBackend::inspect_shared`] (the writer, else the reader whose hold expires
/// first), `check_spec` is [`LeaseBackend::check_shared`], and its release watches are
/// observers' (every waiting reader wakes). Drivers run the lock machines over it, so a read
/// hold is obtained, renewed and released with every rule of a lock.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_core::memory::{ManualClock, MemoryBackend};
/// use lease_core::rwlock::SharedBackend;
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseSpec, Owner, Ttl};
///
/// let memory = Arc::new(MemoryBackend::new(ManualClock::new()));
/// let readers = SharedBackend::new(Arc::clone(&memory));
/// let spec = Arc::new(LeaseSpec::lock(["doc"], Some("doc:fence".into()))?);
/// let ttl = Ttl::new(Duration::from_secs(10))?;
/// let ask = |o: &str| AcquireRequest::new(Arc::clone(&spec), Owner::new(o).unwrap(), ttl);
/// # tokio_free(async {
/// use lease_core::LeaseBackend;
/// assert!(matches!(readers.acquire(&ask("r1")).await?, AcquireOutcome::Acquired { .. }));
/// assert!(matches!(readers.acquire(&ask("r2")).await?, AcquireOutcome::Acquired { .. }));
/// // The plain lock of the same key is the writer: held while readers are in.
/// assert!(matches!(memory.acquire(&ask("w")).await?, AcquireOutcome::Held { .. }));
/// // ... and a writer waits now: new readers are refused.
/// assert!(matches!(readers.acquire(&ask("r3")).await?, AcquireOutcome::Held { .. }));
/// # Ok::<(), lease_core::BackendError>(())
/// # })?;
/// # fn tokio_free<F: std::future::Future>(f: F) -> F::Output {
/// #     let waker = std::task::Waker::noop();
/// #     let mut cx = std::task::Context::from_waker(&waker);
/// #     let mut f = std::pin::pin!(f);
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SharedBackend<B: ?Sized> {
    inner: Arc<B>,
}

impl<B: ?Sized> SharedBackend<B> {
    /// The shared operations of `inner`.
    pub fn new(inner: Arc<B>) -> SharedBackend<B> {
        SharedBackend { inner }
    }

    /// The backend underneath (whose plain lock is the writer).
    pub fn inner(&self) -> &Arc<B> {
        &self.inner
    }
}

impl<B: ?Sized> Clone for SharedBackend<B> {
    fn clone(&self) -> Self {
        SharedBackend {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<B: fmt::Debug + ?Sized> fmt::Debug for SharedBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBackend")
            .field("inner", &&*self.inner)
            .finish()
    }
}

#[async_trait]
impl<B: LeaseBackend + ?Sized> LeaseBackend for SharedBackend<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire_shared(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_shared(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_shared_many(reqs).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_shared(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.shared_remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        let shared = self.inner.inspect_shared(spec).await?;
        let mut info = LeaseInfo::default();
        if let Some(first) = shared.writer.as_ref().or(shared.readers.first()) {
            info.holder = Some(first.owner.clone());
            info.remaining = Some(first.remaining);
        }
        info.counter = shared.counter;
        info.mark = shared.mark;
        Ok(info)
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_shared(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.inner.preflight().await
    }
    /// An observer's watch whatever the role asked: a release wakes every waiting reader.
    fn release_watch(&self, spec: &LeaseSpec, _role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.release_watch(spec, WatchRole::Observer)
    }
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_shared(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire_shared(req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_shared(req).await
    }
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_shared_many(reqs).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_shared(req).await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.shared_remaining(spec, owner).await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.inner.inspect_shared(spec).await
    }
}

impl<B: Fencing + ?Sized> Fencing for SharedBackend<B> {
    type Fencer = B::Fencer;
    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.inner.fencer(mark_key, token)
    }
}
