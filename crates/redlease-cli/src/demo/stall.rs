//! The stall wrapper: a backend whose calls hang while a flag is set.
//!
//! It overrides every [`LeaseBackend`] method, the defaulted ones too: a batch of renewals
//! (of locks, permits or readers) stays one batch, the wrapped backend's release notices
//! reach the demo's waiters, and a semaphore, a fair lock or a read-write lock works behind
//! it (the defaults would refuse them as `Unsupported`). The methods without I/O (the checks,
//! the margin, the watches) are forwarded ungated.

use std::time::Duration;

use async_trait::async_trait;
use redlease::core::{
    AcquireOutcome, AcquireRequest, FairRequest, LeaseInfo, LeaseSpec, NoticeMark, Owner,
    PermitRequest, ReleaseOutcome, ReleaseRequest, ReleaseWatch, RenewOutcome, RenewRequest,
    WatchRole,
};
use redlease::{BackendError, FairInfo, LeaseBackend, SemaphoreInfo, SharedInfo, StoreReport, Ttl};
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
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        self.gate().await;
        self.inner.renew_many(reqs).await
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
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.gate().await;
        self.inner.observe(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_spec(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.gate().await;
        self.inner.preflight().await
    }
    /// No I/O (the subscription is the wrapped backend's): not gated.
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.release_watch(spec, role)
    }
    fn notice_mark(&self, spec: &LeaseSpec) -> Option<NoticeMark> {
        self.inner.notice_mark(spec)
    }
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_semaphore(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        self.gate().await;
        self.inner.acquire_permit(req).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.gate().await;
        self.inner.renew_permit(req).await
    }
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.gate().await;
        self.inner.renew_permit_many(reqs).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.gate().await;
        self.inner.release_permit(req).await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.gate().await;
        self.inner.permit_remaining(spec, owner).await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.gate().await;
        self.inner.inspect_semaphore(spec).await
    }
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_fair(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        self.gate().await;
        self.inner.acquire_fair(req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.gate().await;
        self.inner.release_fair(req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        self.gate().await;
        self.inner.leave_fair(spec, owner).await
    }
    /// No I/O (the subscription is the wrapped backend's): not gated.
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.fair_watch(spec, owner, role)
    }
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_shared(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.gate().await;
        self.inner.acquire_shared(req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.gate().await;
        self.inner.renew_shared(req).await
    }
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.gate().await;
        self.inner.renew_shared_many(reqs).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.gate().await;
        self.inner.release_shared(req).await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.gate().await;
        self.inner.shared_remaining(spec, owner).await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.gate().await;
        self.inner.inspect_shared(spec).await
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.gate().await;
        self.inner.inspect_fair(spec).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use lease_testkit::redis::RedisServer;
    use redlease::memory::{ManualClock, MemoryBackend};
    use redlease::redis::{Topology, notice_channel};
    use redlease::{LockOptions, Locker, RetryStrategy};

    use super::*;

    /// Every wait here is bounded by this, far below the waiter's 20 s poll.
    const BOUND: Duration = Duration::from_secs(5);

    async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(BOUND, f)
            .await
            .unwrap_or_else(|_| panic!("{what} took longer than {BOUND:?}"))
    }

    #[tokio::test]
    async fn a_waiter_behind_the_stall_wrapper_is_woken_by_the_release_notice() {
        let server = RedisServer::start().await.expect("redis");
        let holder = Locker::new(redlease::redis::connect(&server.url()).await.unwrap());
        let inner = redlease::redis::connect(&server.url()).await.unwrap();
        let notices = inner.release_notices().expect("notices").clone();
        let (_flag, stalled) = watch::channel(false);
        let waiting = Locker::new(Stall { inner, stalled });
        let held = bounded(
            "the first lock",
            holder.obtain("job", Duration::from_secs(30), LockOptions::new()),
        )
        .await
        .unwrap();
        // Polling alone would take 20 s: only the notice wakes the waiter within the bound.
        let slow = LockOptions::new()
            .retry(RetryStrategy::linear(Duration::from_secs(20)).unwrap())
            .wait(Duration::from_secs(60));
        let waiter = tokio::spawn(async move {
            let lock = waiting.obtain("job", Duration::from_secs(30), slow).await;
            (lock.map(drop), Instant::now())
        });
        // The hub's live flag has no signal of its own besides the wake-up this test is
        // about; a bounded check every few milliseconds does not race.
        let channel = notice_channel("job", Topology::Standalone);
        bounded("the waiter's subscription", async {
            while !notices.is_live(&channel) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let released = Instant::now();
        bounded("the release", held.release()).await.unwrap();
        let (lock, at) = bounded("the woken waiter", waiter).await.unwrap();
        lock.expect("obtained");
        assert!(at.duration_since(released) < BOUND);
    }

    /// The fair lock's and the readers' methods are forwarded (the defaults would refuse
    /// them), and gated: while stalled, a fair attempt does not reach the store.
    #[tokio::test]
    async fn a_fair_lock_and_readers_work_behind_the_stall_wrapper() {
        let (flag, stalled) = watch::channel(false);
        let inner = MemoryBackend::new(ManualClock::new());
        let locker = Locker::new(Stall { inner, stalled });
        let ttl = Duration::from_secs(30);
        let fair = locker.fair("{jobs}").expect("check_fair is forwarded");
        let held = bounded("the fair lock", fair.acquire(ttl, LockOptions::new()))
            .await
            .expect("obtained");
        bounded("its release", held.release())
            .await
            .expect("released");
        let doc = locker.shared("doc").expect("check_shared is forwarded");
        let reader = bounded("a reader", doc.acquire(ttl, LockOptions::new()))
            .await
            .expect("obtained");
        bounded("its release", reader.release())
            .await
            .expect("released");
        flag.send_replace(true);
        let once = || LockOptions::new().wait(Duration::ZERO);
        let stuck =
            tokio::time::timeout(Duration::from_millis(50), fair.acquire(ttl, once())).await;
        assert!(stuck.is_err(), "a stalled fair attempt hangs");
        flag.send_replace(false);
        let held = bounded("the fair lock again", fair.acquire(ttl, once()))
            .await
            .expect("obtained once resumed");
        bounded("its release", held.release())
            .await
            .expect("released");
    }
}
