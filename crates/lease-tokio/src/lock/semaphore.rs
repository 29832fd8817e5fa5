//! [`Semaphore`]: at most `N` holders of one name at once, each holding a [`Permit`].
//!
//! A permit is a lock in every respect but the count: it is obtained, auto-renewed, refreshed,
//! released (or dropped) and lost by the same machines and the same driver as a [`Lock`] —
//! a [`Locker`] over [`PermitBackend`], the view of the backend whose lease operations are its
//! permit operations. So the obtain's retries, wait, release-notice wake-ups, truthful
//! outcomes, cancellation cleanup, batched auto-renewal and loss signal are a lock's.

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockError, LockOptions};
use lease_core::semaphore::{
    PermitBackend, PermitCount, PermitFencing, SemaphoreInfo, semaphore_spec,
};
use lease_core::{BackendError, LeaseBackend, LeaseSpec};

use crate::ids::random_owner;
use crate::lock::handle::Lock;
use crate::lock::obtain::Locker;

/// A held permit of a [`Semaphore`]: a [`Lock`] over the semaphore's [`PermitBackend`]. Its
/// [`fence_token`](Lock::fence_token) is the permit's fencing token, its
/// [`key`](Lock::key) the semaphore's permits key (`<name>:permits`), and
/// [`release`](Lock::release) gives the permit back (waking one waiter).
///
/// Its [`permit_fencer`](Lock::permit_fencer) is the resource-side rule of "at most `N`":
/// each write is applied only while this permit is current at the store (its owner among the
/// semaphore's permits, by the store's clock) and its token is not below the owner's mark,
/// atomically with the write (see `lease_core::semaphore`, "Fenced writes"). Its
/// [`fencer`](Lock::fencer) applies the lock's fence rule instead (`token >= mark` at
/// `<name>:fence:applied`): among permits held at once, a write under an older permit is
/// refused once a newer one has written ("newest holder wins").
pub type Permit<B> = Lock<PermitBackend<B>>;

/// A counting semaphore: at most `permits` holders of `name` at once, each permit a lease of
/// its own (owner, TTL, auto-renewal, fencing token), so a crashed holder's permit expires
/// with its TTL. Made by [`Locker::semaphore`]; cheap to clone.
///
/// Every holder of one semaphore must use the same count: an obtain with another count while
/// permits are held is refused at its first round trip with
/// [`LockError::Refused`]`(`[`BackendError::PermitsMismatch`]`)`. See
/// `docs/semaphores.md` for the guarantees and costs.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lease_tokio::{Locker, LockOptions};
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
/// let deploys = locker.semaphore("{deploys}", 2)?;
/// let ttl = Duration::from_secs(30);
/// let a = deploys.acquire(ttl, LockOptions::new()).await?;
/// let b = deploys.acquire(ttl, LockOptions::new()).await?;
/// assert!(deploys.acquire(ttl, LockOptions::new()).await.unwrap_err().is_not_obtained());
/// assert!(a.fence_token() < b.fence_token(), "each permit has its own fencing token");
/// a.release().await?;
/// let c = deploys.acquire(ttl, LockOptions::new()).await?;
/// # let _ = (b, c);
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct Semaphore<B> {
    locker: Locker<PermitBackend<B>>,
    name: Arc<str>,
    spec: Arc<LeaseSpec>,
}

impl<B> Clone for Semaphore<B> {
    fn clone(&self) -> Self {
        Semaphore {
            locker: self.locker.clone(),
            name: Arc::clone(&self.name),
            spec: Arc::clone(&self.spec),
        }
    }
}

impl<B> std::fmt::Debug for Semaphore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<B: LeaseBackend> Locker<B> {
    /// The semaphore `name` of `permits` permits over this locker's backend, reporting its
    /// permits to this locker's observer.
    ///
    /// Refused before any round trip: a count outside `1..=`[`MAX_PERMITS`] or an empty
    /// name ([`LockError::Invalid`]); a backend without semaphores (Redlock, your own backend
    /// that does not implement the permit methods) or, on Redis Cluster, a name whose keys
    /// (`<name>:permits`, `<name>:size`, `<name>:fence`, ...) are not in one slot — give it a
    /// hash tag, `{deploys}` ([`LockError::Refused`]).
    ///
    /// [`MAX_PERMITS`]: lease_core::semaphore::MAX_PERMITS
    pub fn semaphore(
        &self,
        name: impl Into<String>,
        permits: u32,
    ) -> Result<Semaphore<B>, LockError> {
        let name: String = name.into();
        let count = PermitCount::new(permits)?;
        let spec = Arc::new(semaphore_spec(&name, None)?);
        self.backend()
            .check_semaphore(&spec)
            .map_err(LockError::Refused)?;
        let view = PermitBackend::new(Arc::clone(self.backend()), count);
        Ok(Semaphore {
            locker: Locker::with_observer_arc(Arc::new(view), self.observer()),
            name: Arc::from(name),
            spec,
        })
    }
}

impl<B: LeaseBackend> Semaphore<B> {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its permit count.
    pub fn permits(&self) -> u32 {
        self.locker.backend().permits().get()
    }

    /// Obtains one permit for `ttl`, with a lock's options and rules: retries per
    /// [`LockOptions::retry`] within [`LockOptions::wait`] (a release notice wakes one
    /// waiter at once), auto-renewal ([`LockOptions::auto_renew`]), a caller-chosen owner
    /// ([`LockOptions::owner`]: reentrant, like a lock's), a fence key
    /// ([`LockOptions::fence_key`], default `<name>:fence`: every permit has a fencing token)
    /// and a fence floor. Permits store no metadata ([`LockOptions::metadata`] is refused).
    ///
    /// The errors are a lock's: [`LockError::NotObtained`] when all permits are held (and no
    /// retry is left), [`LockError::OutcomeUnknown`] when an attempt got no answer (a cleanup
    /// release is started with a generated owner), [`LockError::Refused`] for permanent
    /// refusals — among them [`BackendError::PermitsMismatch`], another permit count stored
    /// with the semaphore. Cancellation-safe like [`Locker::obtain_multi`].
    pub async fn acquire(
        &self,
        ttl: Duration,
        options: LockOptions,
    ) -> Result<Permit<B>, LockError> {
        let plan = options.plan_permit(&self.name, ttl, random_owner)?;
        self.locker.obtain_plan(plan).await
    }

    /// The current holders, the stored count and the fence counter and mark (one read;
    /// with the default fence key). A read changes nothing: its failures are
    /// [`LockError::Unavailable`] or [`LockError::Refused`].
    pub async fn inspect(&self, timeout: Duration) -> Result<SemaphoreInfo, LockError> {
        let read = self.locker.backend().inspect_semaphore(&self.spec);
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map_err(LockError::from_read),
            Err(_) => Err(LockError::from_read(BackendError::Timeout(timeout))),
        }
    }
}

impl<B: LeaseBackend + PermitFencing> Lock<PermitBackend<B>> {
    /// A fencer for writes under this permit: each is applied only while the permit is
    /// current at the store and its token is not below the owner's mark, checked atomically
    /// with the write ([`PermitFencing`]; on Redis `lease_redis::RedisPermitFencer`, whose
    /// writes answer applied, not current, stale, or an error whose effect may be unknown).
    /// `None` when the permit was obtained without a fence key.
    ///
    /// ```
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_tokio::{Locker, LockOptions};
    /// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
    ///
    /// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
    /// let permit = locker.semaphore("{deploys}", 2)?.acquire(Duration::from_secs(30), LockOptions::new()).await?;
    /// let fencer = permit.permit_fencer().expect("permits are fenced by default");
    /// let write = MemoryWrite::Set { key: "{deploys}:eu".into(), value: "v2".into() };
    /// assert!(fencer.apply(write).await?.is_applied());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn permit_fencer(&self) -> Option<B::PermitFencer> {
        let (spec, owner, view) = self.parts();
        view.inner().permit_fencer(spec, owner, self.fence_token()?)
    }
}
