//! [`ReadLock`]: the shared side of a key whose exclusive side is the plain lock
//! ([`Locker::obtain`]), as `flock -s` and `flock -x` share one file. Writer-preferring.
//!
//! A reader's hold is a lock in every respect but sharing: it is obtained, auto-renewed,
//! refreshed, released (or dropped) and lost by the same machines and the same driver as a
//! [`Lock`] — a [`Locker`] over [`SharedBackend`], the view of the backend whose lease
//! operations are its shared operations. So the obtain's retries, wait, release-notice
//! wake-ups (a writer's release wakes every waiting reader), truthful outcomes, cancellation
//! cleanup, batched auto-renewal and loss signal are a lock's.

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockError, LockOptions};
use lease_core::rwlock::{SharedBackend, SharedInfo};
use lease_core::{BackendError, LeaseBackend, LeaseSpec};

use crate::ids::random_owner;
use crate::lock::handle::Lock;
use crate::lock::obtain::Locker;

/// A held reader's hold of a [`ReadLock`]: a [`Lock`] over the backend's [`SharedBackend`]
/// view. Its [`fence_token`](Lock::fence_token) (with [`LockOptions::fence_key`]) comes from
/// the same counter as the writers' tokens, so a resource can order reads against writes;
/// [`release`](Lock::release) ends the hold (the last reader's release wakes a waiting
/// writer).
pub type ReadGuard<B> = Lock<SharedBackend<B>>;

/// The readers' side of the lock on one key: any number of readers at once, or one writer —
/// the plain lock of the same key ([`Locker::obtain`]). Writer-preferring: once a writer has
/// tried and found readers, new readers are refused while it keeps trying (at least once per
/// its TTL), so a stream of readers cannot starve it. Each reader's hold is a lease of its own
/// (owner, TTL, auto-renewal), so a crashed reader's hold expires with its TTL. Made by
/// [`Locker::shared`]; cheap to clone. The auto-renewals of its readers (and its clones')
/// that fall due together leave as one batch ([`LeaseBackend::renew_shared_many`]: on Redis
/// one script call per 128 readers). See `docs/rwlocks.md`.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Locker, LockOptions};
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
/// let doc = locker.shared("doc")?;
/// let ttl = Duration::from_secs(30);
/// let fenced = || LockOptions::new().fence_key("doc:fence");
/// let a = doc.acquire(ttl, fenced()).await?;
/// let b = doc.acquire(ttl, fenced()).await?; // readers share
/// // The writer is the plain lock of the same key: excluded while readers hold it.
/// assert!(locker.obtain("doc", ttl, fenced()).await.unwrap_err().is_not_obtained());
/// let read = b.fence_token();
/// a.release().await?;
/// b.release().await?;
/// let w = locker.obtain("doc", ttl, fenced()).await?;
/// assert!(w.fence_token() > read, "one counter for readers and writers");
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct ReadLock<B> {
    locker: Locker<SharedBackend<B>>,
    key: Arc<str>,
    spec: Arc<LeaseSpec>,
}

impl<B> Clone for ReadLock<B> {
    fn clone(&self) -> Self {
        ReadLock {
            locker: self.locker.clone(),
            key: Arc::clone(&self.key),
            spec: Arc::clone(&self.spec),
        }
    }
}

impl<B> std::fmt::Debug for ReadLock<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// The readers' side of the lock on `key` over this locker's backend (whose plain lock of
    /// `key` is the writer), reporting its holds to this locker's observer.
    ///
    /// Refused before any round trip: an empty key ([`LockError::Invalid`]); a backend without
    /// read-write locks (Redlock, your own backend that does not implement the shared
    /// methods) ([`LockError::Refused`]).
    pub fn shared(&self, key: impl Into<String>) -> Result<ReadLock<B>, LockError> {
        let key: String = key.into();
        let spec = Arc::new(LeaseSpec::lock([key.clone()], None)?);
        self.backend()
            .check_shared(&spec)
            .map_err(LockError::Refused)?;
        let view = SharedBackend::new(Arc::clone(self.backend()));
        Ok(ReadLock {
            locker: Locker::with_observer_arc(Arc::new(view), self.observer()),
            key: Arc::from(key),
            spec,
        })
    }
}

impl<B: LeaseBackend> ReadLock<B> {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Obtains a reader's hold for `ttl`, with a lock's options and rules: retries per
    /// [`LockOptions::retry`] within [`LockOptions::wait`] (a writer's release wakes every
    /// waiting reader at once), auto-renewal ([`LockOptions::auto_renew`]), a caller-chosen
    /// owner ([`LockOptions::owner`]: reentrant), a fence key ([`LockOptions::fence_key`]:
    /// give the writers the same one, so readers' and writers' tokens come from one counter)
    /// and a fence floor. Readers store no metadata ([`LockOptions::metadata`] is refused).
    ///
    /// The errors are a lock's: [`LockError::NotObtained`] while a writer holds the key or
    /// waits for it (and no retry is left), [`LockError::OutcomeUnknown`] when an attempt got
    /// no answer (a cleanup release is started with a generated owner),
    /// [`LockError::Refused`] for permanent refusals. Cancellation-safe like
    /// [`Locker::obtain_multi`].
    pub async fn acquire(
        &self,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<ReadGuard<B>, LockError> {
        let plan = options.plan_shared(&self.key, ttl, random_owner)?;
        self.locker.obtain_plan(plan).await
    }

    /// The writer or the readers, whether a writer waits, and the fence counter and mark of
    /// `fence_key` (one read). A read changes nothing: its failures are
    /// [`LockError::Unavailable`] or [`LockError::Refused`].
    pub async fn inspect(
        &self,
        fence_key: Option<&str>,
        timeout: Duration,
    ) -> Result<SharedInfo, LockError> {
        let spec = match fence_key {
            None => Arc::clone(&self.spec),
            Some(f) => Arc::new(LeaseSpec::lock([self.key.to_string()], Some(f.to_owned()))?),
        };
        let read = self.locker.backend().inspect_shared(&spec);
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map_err(LockError::from_read),
            Err(_) => Err(LockError::from_read(BackendError::Timeout(timeout))),
        }
    }
}
