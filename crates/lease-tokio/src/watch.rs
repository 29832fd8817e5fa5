//! [`LeaderWatch`]: leader changes of an election, for processes that never run for leader.

use std::sync::Arc;
use std::time::Duration;

use lease_core::config::check_interval;
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::{BackendError, ConfigError, ElectionConfig, LeaseBackend, LeaseSpec, Token};

use crate::elector::LeaderInfo;

/// Follows who leads election `name`, without contending (like etcd's `Observe` or
/// client-go's `OnNewLeader`): [`LeaderWatch::changed`] returns each change of holder or
/// token.
///
/// It reads the store ([`LeaseBackend::observe`]: an `inspect` that asks for the holder's
/// release to be announced) when the backend's release notices say the lease was
/// released ([`LeaseBackend::release_watch`], as an observer: every notice), then again after
/// 2, 4, 8… ms until the next leader shows up (an acquire publishes nothing), and otherwise
/// polls once per interval (default: the election's default acquire interval, TTL/2 of the
/// default TTL), which also finds leaders that took over an expired lease. Each read is
/// bounded by the interval.
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_tokio::LeaderWatch;
/// use lease_tokio::lease_core::memory::{ManualClock, MemoryBackend};
///
/// let backend = Arc::new(MemoryBackend::new(ManualClock::new()));
/// let mut watch = LeaderWatch::new(backend, "report-builder")?.every(Duration::from_millis(100))?;
/// // The first call reports the current state: nobody leads yet.
/// assert!(watch.changed().await?.is_none());
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Debug)]
pub struct LeaderWatch<B> {
    backend: Arc<B>,
    spec: LeaseSpec,
    every: Duration,
    /// The last reported (holder, token); `None` before the first report.
    last: Option<Option<(String, Option<Token>)>>,
    /// Release notices, when the backend has them.
    notices: Option<ReleaseWatch>,
    /// After a notice: the next quick re-read, doubling until the interval.
    quick: Option<Duration>,
}

/// The first re-read after a release notice that found nobody leading.
const QUICK_FIRST: Duration = Duration::from_millis(2);

impl<B: LeaseBackend> LeaderWatch<B> {
    /// A watch of election `name` (checked as an elector would check it, and by the backend:
    /// e.g. a hash tag on Redis Cluster).
    pub fn new(backend: Arc<B>, name: &str) -> Result<Self, ConfigError> {
        let config = ElectionConfig::builder(name, "watch").build()?;
        let spec = config.lease_spec();
        backend
            .check_spec(&spec)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let notices = backend.release_watch(&spec, WatchRole::Observer);
        if let Some(n) = &notices {
            n.activate();
        }
        Ok(LeaderWatch {
            backend,
            spec,
            every: config.acquire_interval(),
            last: None,
            notices,
            quick: None,
        })
    }

    /// The watch of an elector's election (its config was checked when it was built).
    pub(crate) fn for_config(backend: Arc<B>, config: &ElectionConfig) -> Self {
        let spec = config.lease_spec();
        let notices = backend.release_watch(&spec, WatchRole::Observer);
        if let Some(n) = &notices {
            n.activate();
        }
        LeaderWatch {
            backend,
            spec,
            every: config.acquire_interval(),
            last: None,
            notices,
            quick: None,
        }
    }

    /// Polls every `every` (at least 1 ms).
    pub fn every(mut self, every: Duration) -> Result<Self, ConfigError> {
        check_interval("watch interval", every)?;
        self.every = every;
        Ok(self)
    }

    /// Waits for the next change of leader and returns it: the new holder (`None`: nobody
    /// leads). The first call returns the current state at once. An error is one failed poll
    /// (transient ones may be retried by calling again); the watch stays usable.
    pub async fn changed(&mut self) -> Result<Option<LeaderInfo>, BackendError> {
        loop {
            let info = tokio::time::timeout(self.every, self.backend.observe(&self.spec))
                .await
                .map_err(|_| BackendError::Timeout(self.every))??;
            let now = info.holder.clone().map(|h| (h, info.counter));
            if now.is_some() {
                self.quick = None;
            }
            let changed = self.last.as_ref() != Some(&now);
            if changed {
                self.last = Some(now);
                return Ok(info.holder.map(|instance_id| LeaderInfo {
                    instance_id,
                    token: info.counter,
                    remaining: info.remaining,
                }));
            }
            self.wait().await;
        }
    }

    /// Waits for the next read: a release notice, the next quick re-read, or the interval.
    async fn wait(&mut self) {
        let delay = match self.quick {
            Some(q) if q < self.every => {
                self.quick = Some(q * 2);
                q
            }
            _ => {
                self.quick = None;
                self.every
            }
        };
        match self.notices.as_mut() {
            Some(notices) => {
                tokio::select! {
                    () = notices.notified() => self.quick = Some(QUICK_FIRST),
                    () = tokio::time::sleep(delay) => {}
                }
            }
            None => tokio::time::sleep(delay).await,
        }
    }
}
