//! The stall wrapper: a backend whose calls hang while a flag is set.

use std::time::Duration;

use async_trait::async_trait;
use redlease::core::{
    AcquireOutcome, AcquireRequest, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use redlease::{BackendError, LeaseBackend, Ttl};
use tokio::sync::watch;

/// A backend whose calls hang while `stalled` is set (a paused process cannot reach the
/// store). Calls dropped while waiting (timed out by the elector) never reach the store.
#[derive(Clone)]
pub(super) struct Stall<B> {
    pub(super) inner: B,
    pub(super) stalled: watch::Receiver<bool>,
}

impl<B> Stall<B> {
    async fn gate(&self) {
        let mut rx = self.stalled.clone();
        let _ = rx.wait_for(|stalled| !stalled).await;
    }
}

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Stall<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.gate().await;
        self.inner.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.gate().await;
        self.inner.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.gate().await;
        self.inner.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.gate().await;
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.gate().await;
        self.inner.inspect(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_spec(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
}
