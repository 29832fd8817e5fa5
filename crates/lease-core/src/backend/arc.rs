//! `Arc<B>` is a backend wherever `B` is: every method forwarded to the shared backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    AcquireOutcome, AcquireRequest, BackendError, ForceReleaseOutcome, HandOffOutcome,
    LeaseBackend, LeaseInfo, LeaseSpec, Metadata, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use crate::config::Ttl;
use crate::fair::{FairInfo, FairRequest};
use crate::notify::{NoticeMark, ReleaseWatch, WatchRole};
use crate::preflight::StoreReport;
use crate::rwlock::SharedInfo;
use crate::semaphore::{PermitRequest, SemaphoreInfo};

/// The future a backend method returns (what `#[async_trait]` makes of an `async fn`).
type BoxedCall<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

// The lock cycle's three calls hand back the inner backend's future as it is, instead of
// boxing a second future around it (one allocation and one copy fewer per call).
#[async_trait]
impl<B: LeaseBackend + ?Sized> LeaseBackend for Arc<B> {
    fn acquire<'s, 'r, 'f>(
        &'s self,
        req: &'r AcquireRequest,
    ) -> BoxedCall<'f, Result<AcquireOutcome, BackendError>>
    where
        's: 'f,
        'r: 'f,
        Self: 'f,
    {
        (**self).acquire(req)
    }
    fn renew<'s, 'r, 'f>(
        &'s self,
        req: &'r RenewRequest,
    ) -> BoxedCall<'f, Result<RenewOutcome, BackendError>>
    where
        's: 'f,
        'r: 'f,
        Self: 'f,
    {
        (**self).renew(req)
    }
    fn release<'s, 'r, 'f>(
        &'s self,
        req: &'r ReleaseRequest,
    ) -> BoxedCall<'f, Result<ReleaseOutcome, BackendError>>
    where
        's: 'f,
        'r: 'f,
        Self: 'f,
    {
        (**self).release(req)
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
    async fn force_release(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        (**self).force_release(spec).await
    }
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        (**self).observe(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        (**self).check_spec(spec)
    }
    fn can_hand_off(&self, spec: &LeaseSpec) -> bool {
        (**self).can_hand_off(spec)
    }
    async fn hand_off(
        &self,
        from: &ReleaseRequest,
        from_metadata: &Metadata,
        to: &AcquireRequest,
    ) -> Result<HandOffOutcome, BackendError> {
        (**self).hand_off(from, from_metadata, to).await
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
    fn notice_mark(&self, spec: &LeaseSpec) -> Option<NoticeMark> {
        (**self).notice_mark(spec)
    }
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        (**self).check_semaphore(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        (**self).acquire_permit(req).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        (**self).renew_permit(req).await
    }
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        (**self).renew_permit_many(reqs).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        (**self).release_permit(req).await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        (**self).permit_remaining(spec, owner).await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        (**self).inspect_semaphore(spec).await
    }
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        (**self).check_fair(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        (**self).acquire_fair(req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        (**self).release_fair(req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        (**self).leave_fair(spec, owner).await
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        (**self).inspect_fair(spec).await
    }
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        (**self).fair_watch(spec, owner, role)
    }
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        (**self).check_shared(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        (**self).acquire_shared(req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        (**self).renew_shared(req).await
    }
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        (**self).renew_shared_many(reqs).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        (**self).release_shared(req).await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        (**self).shared_remaining(spec, owner).await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        (**self).inspect_shared(spec).await
    }
}
