//! One wrapper backend for tests that need a twist on a real backend: count calls, delay a
//! request or a reply, watch errors.
//!
//! [`Wrapped`] forwards every [`LeaseBackend`] method to the backend it wraps and calls its
//! [`Hooks`] around each call: [`Hooks::before`] with the [`Call`] before it is forwarded, and
//! [`Hooks::after`] with the call and its [`Answer`] once the wrapped backend answered (before
//! the answer is returned). Both default to doing nothing, so a test implements only its twist.
//! The synchronous methods (`check_spec`, `validity_margin`, `release_watch`, `notice_mark`,
//! `check_semaphore`), `preflight` and the semaphore's permit methods (`acquire_permit`,
//! `renew_permit`, `renew_permit_many`, `release_permit`, `permit_remaining`,
//! `inspect_semaphore`) and a read-write lock's shared methods (`check_shared`,
//! `acquire_shared`, `renew_shared`, `renew_shared_many`, `release_shared`,
//! `shared_remaining`, `inspect_shared`) are forwarded without hooks: release notices reach a
//! waiter behind the wrapper as they would without it, and a semaphore or a reader works
//! behind it. So are the fair lock's methods (`check_fair`, `acquire_fair`, `release_fair`,
//! `leave_fair`, `inspect_fair`, `fair_watch`).
//!
//! A hand-off within a process ([`LeaseBackend::hand_off`], offered where the wrapped backend
//! offers it: [`LeaseBackend::can_hand_off`] is forwarded) is the releasing lock's release: the
//! hooks see it as a [`Call::Release`] of the releaser, answered as released when the lease was
//! handed off or released, so a hook that delays or watches releases does the same to
//! hand-offs.
//!
//! A batch ([`LeaseBackend::renew_many`]) is forwarded as one batch, so a backend that carries
//! it in one round trip still does; the hooks see each renewal in it as a [`Call::Renew`]:
//! every `before` runs (concurrently) before the batch is sent, so a hook that delays one
//! renewal delays the whole batch, and every `after` runs once the batch is answered.
//!
//! [`Wrapped`] dereferences to its hooks, so the hooks' own methods (a count, a wait on a
//! signal) are called on the wrapper.
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use lease_core::memory::{ManualClock, MemoryBackend};
//! use lease_testkit::wrap::{Answer, Call, Hooks, Wrapped};
//!
//! /// Counts the renewals that failed.
//! #[derive(Default)]
//! struct FailedRenewals(AtomicU32);
//!
//! #[async_trait::async_trait]
//! impl Hooks for FailedRenewals {
//!     async fn after(&self, _call: &Call<'_>, answer: &Answer<'_>) {
//!         if let Answer::Renew(Err(_)) = answer {
//!             self.0.fetch_add(1, Ordering::SeqCst);
//!         }
//!     }
//! }
//!
//! let backend: Wrapped<MemoryBackend, FailedRenewals> =
//!     Wrapped::new(MemoryBackend::new(ManualClock::new()));
//! assert_eq!(backend.0.load(Ordering::SeqCst), 0); // the hooks, through the wrapper
//! ```

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use async_trait::async_trait;
use lease_core::fair::{FairInfo, FairRequest};
use lease_core::notify::{NoticeMark, ReleaseWatch, WatchRole};
use lease_core::preflight::StoreReport;
use lease_core::rwlock::SharedInfo;
use lease_core::semaphore::{PermitRequest, SemaphoreInfo};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, HandOffOutcome, LeaseBackend, LeaseInfo,
    LeaseSpec, Metadata, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Ttl,
};

/// A [`LeaseBackend`] call, as a hook sees it.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// [`LeaseBackend::acquire`].
    Acquire(&'a AcquireRequest),
    /// [`LeaseBackend::renew`].
    Renew(&'a RenewRequest),
    /// [`LeaseBackend::release`].
    Release(&'a ReleaseRequest),
    /// [`LeaseBackend::remaining`].
    Remaining(&'a LeaseSpec, &'a Owner),
    /// [`LeaseBackend::inspect`].
    Inspect(&'a LeaseSpec),
}

/// What the wrapped backend answered to a [`Call`] (of the same kind).
#[derive(Clone, Copy, Debug)]
pub enum Answer<'a> {
    /// The answer to [`Call::Acquire`].
    Acquire(&'a Result<AcquireOutcome, BackendError>),
    /// The answer to [`Call::Renew`].
    Renew(&'a Result<RenewOutcome, BackendError>),
    /// The answer to [`Call::Release`].
    Release(&'a Result<ReleaseOutcome, BackendError>),
    /// The answer to [`Call::Remaining`].
    Remaining(&'a Result<Option<Duration>, BackendError>),
    /// The answer to [`Call::Inspect`].
    Inspect(&'a Result<LeaseInfo, BackendError>),
}

impl<'a> Answer<'a> {
    /// The error, when the call failed.
    pub fn error(&self) -> Option<&'a BackendError> {
        match *self {
            Answer::Acquire(r) => r.as_ref().err(),
            Answer::Renew(r) => r.as_ref().err(),
            Answer::Release(r) => r.as_ref().err(),
            Answer::Remaining(r) => r.as_ref().err(),
            Answer::Inspect(r) => r.as_ref().err(),
        }
    }
}

/// What a [`Wrapped`] backend does around each call. Every method does nothing by default.
///
/// A hook that waits (a sleep, a gate) delays the call: `before` delays the request (nothing
/// reaches the wrapped backend until it returns), `after` delays the reply (the wrapped backend
/// has answered; the caller hears it only when the hook returns). A call dropped while a hook
/// waits is dropped there.
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    /// Runs before `call` is forwarded to the wrapped backend.
    async fn before(&self, call: &Call<'_>) {
        let _ = call;
    }

    /// Runs after the wrapped backend answered `call` with `answer`, before it is returned.
    async fn after(&self, call: &Call<'_>, answer: &Answer<'_>) {
        let _ = (call, answer);
    }
}

/// No hooks: a plain forwarding wrapper.
impl Hooks for () {}

/// A [`LeaseBackend`] that forwards every call to `inner` and runs `hooks` around it.
///
/// Clones share what the hooks share (put shared state behind an `Arc`).
#[derive(Clone, Debug, Default)]
pub struct Wrapped<B, H = ()> {
    inner: B,
    hooks: H,
}

impl<B, H: Default> Wrapped<B, H> {
    /// Wraps `inner` with the default hooks.
    pub fn new(inner: B) -> Self {
        Self::with_hooks(inner, H::default())
    }
}

impl<B, H> Wrapped<B, H> {
    /// Wraps `inner` with `hooks`.
    pub fn with_hooks(inner: B, hooks: H) -> Self {
        Wrapped { inner, hooks }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

impl<B, H> Deref for Wrapped<B, H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<B: LeaseBackend, H: Hooks> Wrapped<B, H> {
    /// Makes the call to the wrapped backend (`op`) between the hooks: `op` is called only
    /// once `before` has returned.
    async fn around<T, F: Future<Output = Result<T, BackendError>>>(
        &self,
        call: Call<'_>,
        op: impl FnOnce() -> F,
        answer: for<'r> fn(&'r Result<T, BackendError>) -> Answer<'r>,
    ) -> Result<T, BackendError> {
        self.hooks.before(&call).await;
        let r = op().await;
        self.hooks.after(&call, &answer(&r)).await;
        r
    }
}

#[async_trait]
impl<B: LeaseBackend, H: Hooks> LeaseBackend for Wrapped<B, H> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.around(
            Call::Acquire(req),
            || self.inner.acquire(req),
            |r| Answer::Acquire(r),
        )
        .await
    }

    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.around(
            Call::Renew(req),
            || self.inner.renew(req),
            |r| Answer::Renew(r),
        )
        .await
    }

    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.around(
            Call::Release(req),
            || self.inner.release(req),
            |r| Answer::Release(r),
        )
        .await
    }

    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        let calls: Vec<Call<'_>> = reqs.iter().map(|r| Call::Renew(r)).collect();
        join_all(calls.iter().map(|c| self.hooks.before(c))).await;
        let answers = self.inner.renew_many(reqs).await;
        join_all(
            calls
                .iter()
                .zip(&answers)
                .map(|(c, a)| async move { self.hooks.after(c, &Answer::Renew(a)).await }),
        )
        .await;
        answers
    }

    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.around(
            Call::Remaining(spec, owner),
            || self.inner.remaining(spec, owner),
            |r| Answer::Remaining(r),
        )
        .await
    }

    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.around(
            Call::Inspect(spec),
            || self.inner.inspect(spec),
            |r| Answer::Inspect(r),
        )
        .await
    }

    fn can_hand_off(&self, spec: &LeaseSpec) -> bool {
        self.inner.can_hand_off(spec)
    }

    /// Seen by the hooks as the release of `from` ([`Call::Release`]): a lease handed off or
    /// released answers [`ReleaseOutcome::Released`].
    async fn hand_off(
        &self,
        from: &ReleaseRequest,
        from_metadata: &Metadata,
        to: &AcquireRequest,
    ) -> Result<HandOffOutcome, BackendError> {
        let call = Call::Release(from);
        self.hooks.before(&call).await;
        let (seen, handed) = match self.inner.hand_off(from, from_metadata, to).await {
            Ok(outcome) => {
                let released = match outcome {
                    HandOffOutcome::NotHeld => ReleaseOutcome::NotHeld,
                    _ => ReleaseOutcome::Released,
                };
                (Ok(released), Some(outcome))
            }
            Err(e) => (Err(e), None),
        };
        self.hooks.after(&call, &Answer::Release(&seen)).await;
        seen.map(|released| handed.unwrap_or(HandOffOutcome::from(released)))
    }

    /// Seen by the hooks as an inspection ([`Call::Inspect`]).
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.around(
            Call::Inspect(spec),
            || self.inner.observe(spec),
            |r| Answer::Inspect(r),
        )
        .await
    }

    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_spec(spec)
    }

    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }

    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.inner.preflight().await
    }

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
        self.inner.acquire_permit(req).await
    }

    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_permit(req).await
    }

    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.inner.renew_permit_many(reqs).await
    }

    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_permit(req).await
    }

    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.permit_remaining(spec, owner).await
    }

    async fn force_release(
        &self,
        spec: &LeaseSpec,
    ) -> Result<lease_core::ForceReleaseOutcome, BackendError> {
        self.inner.force_release(spec).await
    }

    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.inner.inspect_semaphore(spec).await
    }

    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_fair(spec)
    }

    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        self.inner.acquire_fair(req).await
    }

    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_fair(req).await
    }

    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        self.inner.leave_fair(spec, owner).await
    }

    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.inner.inspect_fair(spec).await
    }

    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        self.inner.fair_watch(spec, owner, role)
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

/// Runs `futures` concurrently to completion (their outputs are `()`).
async fn join_all<F: Future<Output = ()>>(futures: impl IntoIterator<Item = F>) {
    let mut set: Vec<_> = futures.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use lease_core::Ttl;
    use lease_core::memory::{ManualClock, MemoryBackend};

    use super::*;

    /// Records the kind of each hook call, in order.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<String>>>);

    #[async_trait]
    impl Hooks for Log {
        async fn before(&self, call: &Call<'_>) {
            let kind = format!("{call:?}");
            let kind = kind.split('(').next().unwrap_or_default().to_owned();
            self.0.lock().unwrap().push(format!("before {kind}"));
        }
        async fn after(&self, _call: &Call<'_>, answer: &Answer<'_>) {
            let kind = format!("{answer:?}");
            let kind = kind.split('(').next().unwrap_or_default().to_owned();
            let failed = answer.error().is_some();
            self.0
                .lock()
                .unwrap()
                .push(format!("after {kind} failed={failed}"));
        }
    }

    #[tokio::test]
    async fn forwards_every_call_between_its_hooks() {
        let memory = MemoryBackend::new(ManualClock::new());
        let log = Log::default();
        let backend = Wrapped::with_hooks(memory.clone(), log.clone());
        let spec = Arc::new(LeaseSpec::election("e"));
        let owner = Owner::new("a").unwrap();
        let ttl = Ttl::new(Duration::from_secs(1)).unwrap();
        let bound = Duration::from_secs(5);
        let acquire = AcquireRequest::new(spec.clone(), owner.clone(), ttl);
        let got = tokio::time::timeout(bound, backend.acquire(&acquire)).await;
        assert!(matches!(
            got.unwrap(),
            Ok(AcquireOutcome::Acquired { token: Some(_), .. })
        ));
        let renew = RenewRequest::new(spec.clone(), owner.clone(), ttl);
        let got = tokio::time::timeout(bound, backend.renew(&renew)).await;
        assert_eq!(got.unwrap().unwrap(), RenewOutcome::Renewed);
        let got = tokio::time::timeout(bound, backend.remaining(&spec, &owner)).await;
        assert_eq!(got.unwrap().unwrap(), Some(Duration::from_secs(1)));
        let got = tokio::time::timeout(bound, backend.inspect(&spec)).await;
        assert_eq!(got.unwrap().unwrap().holder.as_deref(), Some("a"));
        memory.set_unavailable(true);
        let release = ReleaseRequest::new(spec.clone(), owner);
        let got = tokio::time::timeout(bound, backend.release(&release)).await;
        assert!(got.unwrap().is_err());
        assert_eq!(
            memory.calls(),
            5,
            "each call reached the wrapped backend once"
        );
        assert_eq!(
            log.0.lock().unwrap().clone(),
            [
                "before Acquire",
                "after Acquire failed=false",
                "before Renew",
                "after Renew failed=false",
                "before Remaining",
                "after Remaining failed=false",
                "before Inspect",
                "after Inspect failed=false",
                "before Release",
                "after Release failed=true",
            ]
        );
        // Deref reaches the hooks.
        assert_eq!(backend.0.lock().unwrap().len(), 10);
    }

    /// Counts the batches that reach it (and forwards them).
    struct Batches {
        inner: MemoryBackend,
        batches: std::sync::atomic::AtomicU32,
    }

    #[async_trait]
    impl LeaseBackend for Batches {
        async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
            self.inner.acquire(req).await
        }
        async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
            self.inner.renew(req).await
        }
        async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
            self.inner.release(req).await
        }
        async fn renew_many(
            &self,
            reqs: &[&RenewRequest],
        ) -> Vec<Result<RenewOutcome, BackendError>> {
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.renew_many(reqs).await
        }
        async fn remaining(
            &self,
            spec: &LeaseSpec,
            owner: &Owner,
        ) -> Result<Option<Duration>, BackendError> {
            self.inner.remaining(spec, owner).await
        }
        async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
            self.inner.inspect(spec).await
        }
    }

    #[tokio::test]
    async fn a_batch_stays_one_batch_and_its_hooks_see_each_renewal() {
        let log = Log::default();
        let backend = Wrapped::with_hooks(
            Batches {
                inner: MemoryBackend::new(ManualClock::new()),
                batches: std::sync::atomic::AtomicU32::new(0),
            },
            log.clone(),
        );
        let ttl = Ttl::new(Duration::from_secs(1)).unwrap();
        let owner = Owner::new("a").unwrap();
        let (a, b) = (
            Arc::new(LeaseSpec::election("a")),
            Arc::new(LeaseSpec::election("b")),
        );
        let bound = Duration::from_secs(5);
        let acquire = AcquireRequest::new(a.clone(), owner.clone(), ttl);
        let got = tokio::time::timeout(bound, backend.acquire(&acquire)).await;
        assert!(got.unwrap().is_ok());
        let (ra, rb) = (
            RenewRequest::new(a, owner.clone(), ttl),
            RenewRequest::new(b, owner, ttl),
        );
        let got = tokio::time::timeout(bound, backend.renew_many(&[&ra, &rb])).await;
        let outcomes = got.unwrap();
        assert!(matches!(outcomes[0], Ok(RenewOutcome::Renewed)));
        assert!(matches!(outcomes[1], Ok(RenewOutcome::NotHeld)));
        let batches = backend
            .inner()
            .batches
            .load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(batches, 1, "forwarded as one batch");
        assert_eq!(
            log.0.lock().unwrap()[2..],
            [
                "before Renew",
                "before Renew",
                "after Renew failed=false",
                "after Renew failed=false",
            ]
        );
    }
}
