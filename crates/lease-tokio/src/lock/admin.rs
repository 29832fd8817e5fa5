//! Inspection and administration of plain locks: [`Locker::holder`], [`Locker::is_locked`],
//! [`Locker::remaining`], [`Locker::lock_info`] and [`Locker::force_release`].
//!
//! Every answer is read from the store, and an error is an error: a read that got no answer is
//! never reported as "not locked".

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::LockError;
use lease_core::{BackendError, ForceReleaseOutcome, LeaseBackend, LeaseInfo, LeaseSpec};

use super::Locker;

/// How long each inspection or forced release of [`Locker`] waits for the store's answer.
/// A read that times out is [`LockError::Unavailable`] (a read changes nothing); a forced
/// release that times out is [`LockError::OutcomeUnknown`].
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The holder of a plain lock, as read from the store ([`Locker::holder`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The holder's owner value (its lock's owner token).
    pub owner: String,
    /// The metadata stored with the holder (`None`: none stored, or held by a read-write
    /// lock's readers, whose first reader is then the holder).
    pub metadata: Option<String>,
    /// The time its lease has left at the store ([`Duration::MAX`]: no expiry set; `None`:
    /// not reported).
    pub remaining: Option<Duration>,
}

impl<B: LeaseBackend> Locker<B> {
    /// The lease of lock `key` (fenced by `fence_key` when given), checked before any round
    /// trip: a bad key or fence key is [`LockError::Invalid`], one this backend can never
    /// serve is [`LockError::Refused`].
    fn admin_spec(&self, key: &str, fence_key: Option<&str>) -> Result<Arc<LeaseSpec>, LockError> {
        let spec = LeaseSpec::lock([key.to_owned()], fence_key.map(str::to_owned))?;
        self.backend()
            .check_spec(&spec)
            .map_err(LockError::Refused)?;
        Ok(Arc::new(spec))
    }

    /// Everything the store says about lock `key`: holder, metadata, time left and, when
    /// `fence_key` is given (the [`LockOptions::fence_key`](crate::LockOptions::fence_key)
    /// its holders obtain with), the fence counter, applied mark and epoch. One read, bounded
    /// by [`ADMIN_TIMEOUT`]; its failures are [`LockError::Unavailable`] or
    /// [`LockError::Refused`].
    pub async fn lock_info(
        &self,
        key: &str,
        fence_key: Option<&str>,
    ) -> Result<LeaseInfo, LockError> {
        let spec = self.admin_spec(key, fence_key)?;
        match tokio::time::timeout(ADMIN_TIMEOUT, self.backend().inspect(&spec)).await {
            Ok(r) => r.map_err(LockError::from_read),
            Err(_) => Err(LockError::from_read(BackendError::Timeout(ADMIN_TIMEOUT))),
        }
    }

    /// Who holds lock `key` now (`None`: free), read from the store (see
    /// [`lock_info`](Self::lock_info) for the errors).
    ///
    /// ```
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_tokio::{Locker, LockOptions};
    /// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
    /// assert!(!locker.is_locked("report").await?);
    /// let lock = locker.obtain("report", Duration::from_secs(10), LockOptions::new().owner("me")).await?;
    /// assert_eq!(locker.holder("report").await?.map(|h| h.owner).as_deref(), Some("me"));
    /// assert_eq!(locker.remaining("report").await?, Some(Duration::from_secs(10)));
    /// lock.release().await?;
    /// assert_eq!(locker.holder("report").await?, None);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub async fn holder(&self, key: &str) -> Result<Option<LockHolder>, LockError> {
        let info = self.lock_info(key, None).await?;
        Ok(info.holder.map(|owner| LockHolder {
            owner,
            metadata: info.metadata.filter(|m| !m.is_empty()),
            remaining: info.remaining,
        }))
    }

    /// Whether lock `key` is held now, read from the store (an error is an error, never
    /// `false`).
    pub async fn is_locked(&self, key: &str) -> Result<bool, LockError> {
        Ok(self.holder(key).await?.is_some())
    }

    /// The time lock `key`'s holder has left at the store (`None`: free; [`Duration::MAX`]:
    /// no expiry set), whoever holds it.
    pub async fn remaining(&self, key: &str) -> Result<Option<Duration>, LockError> {
        Ok(self.holder(key).await?.and_then(|h| h.remaining))
    }

    /// An administrator's release of lock `key`, whatever its owner, in one atomic step at the
    /// store ([`LeaseBackend::force_release`]). With `fence_key` (the
    /// [`LockOptions::fence_key`](crate::LockOptions::fence_key) its holders obtain with), a
    /// fresh token is minted into the fence counter and the applied mark, held or not: the
    /// broken holder's fenced writes are refused from then on, and the next holder's token,
    /// minted above it, is accepted. Without `fence_key` nothing is fenced: a holder that does
    /// not know it lost the lock may go on writing.
    ///
    /// The outcome says truthfully whether a holder was removed
    /// ([`ForceReleaseOutcome::Released`], with its owner) or the lock was free
    /// ([`ForceReleaseOutcome::NotHeld`]). Bounded by [`ADMIN_TIMEOUT`]; a timeout or a lost
    /// reply is [`LockError::OutcomeUnknown`]; backends that cannot do it (Redlock) refuse
    /// with [`LockError::Refused`] ([`BackendError::Unsupported`]). The holder's own handle
    /// learns of it at its next renewal (its lock is then lost).
    ///
    /// ```
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_tokio::{Locker, LockOptions};
    /// use lease_tokio::lease_core::ForceReleaseOutcome;
    /// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new(ManualClock::new()));
    /// let opts = || LockOptions::new().fence_key("report:fence");
    /// let stuck = locker.obtain("report", Duration::from_secs(10), opts().owner("stuck")).await?;
    /// let out = locker.force_release("report", Some("report:fence")).await?;
    /// assert!(matches!(&out, ForceReleaseOutcome::Released { holder, .. } if holder == "stuck"));
    /// assert!(out.fence() > stuck.fence_token());
    /// assert!(!locker.force_release("report", None).await?.was_held());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub async fn force_release(
        &self,
        key: &str,
        fence_key: Option<&str>,
    ) -> Result<ForceReleaseOutcome, LockError> {
        let spec = self.admin_spec(key, fence_key)?;
        let outcome =
            match tokio::time::timeout(ADMIN_TIMEOUT, self.backend().force_release(&spec)).await {
                Ok(r) => r.map_err(LockError::from_backend),
                Err(_) => Err(LockError::from_backend(BackendError::Timeout(
                    ADMIN_TIMEOUT,
                ))),
            };
        match &outcome {
            Ok(ForceReleaseOutcome::Released { holder, fence }) => tracing::warn!(
                key,
                holder = %holder,
                fence = ?fence.map(|t| t.get()),
                "lock force-released: its holder was removed"
            ),
            Ok(out) => tracing::info!(
                key,
                fence = ?out.fence().map(|t| t.get()),
                "lock force-released: it was not held"
            ),
            Err(e) => tracing::warn!(key, error = %e, "forced release of a lock failed"),
        }
        outcome
    }
}
