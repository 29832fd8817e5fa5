//! [`LeaderWatch`]: leader changes of an election, for processes that never run for leader.

use std::sync::Arc;
use std::time::Duration;

use lease_core::config::check_interval;
use lease_core::{BackendError, ConfigError, ElectionConfig, LeaseBackend, LeaseSpec, Token};

use crate::elector::LeaderInfo;

/// Follows who leads election `name`, without contending (like etcd's `Observe` or
/// client-go's `OnNewLeader`): [`LeaderWatch::changed`] returns each change of holder or
/// token.
///
/// It polls the store (one `inspect` per interval; default: the election's default acquire
/// interval, TTL/2 of the default TTL); release notifications will wake it sooner once they
/// exist. Each poll is bounded by the interval.
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
}

impl<B: LeaseBackend> LeaderWatch<B> {
    /// A watch of election `name` (checked as an elector would check it, and by the backend:
    /// e.g. a hash tag on Redis Cluster).
    pub fn new(backend: Arc<B>, name: &str) -> Result<Self, ConfigError> {
        let config = ElectionConfig::builder(name, "watch").build()?;
        let spec = config.lease_spec();
        backend
            .check_spec(&spec)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(LeaderWatch {
            backend,
            spec,
            every: config.acquire_interval(),
            last: None,
        })
    }

    /// The watch of an elector's election (its config was checked when it was built).
    pub(crate) fn for_config(backend: Arc<B>, config: &ElectionConfig) -> Self {
        LeaderWatch {
            backend,
            spec: config.lease_spec(),
            every: config.acquire_interval(),
            last: None,
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
            let info = tokio::time::timeout(self.every, self.backend.inspect(&self.spec))
                .await
                .map_err(|_| BackendError::Timeout(self.every))??;
            let now = info.holder.clone().map(|h| (h, info.counter));
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now);
                return Ok(info.holder.map(|instance_id| LeaderInfo {
                    instance_id,
                    token: info.counter,
                    remaining: info.remaining,
                }));
            }
            tokio::time::sleep(self.every).await;
        }
    }
}
