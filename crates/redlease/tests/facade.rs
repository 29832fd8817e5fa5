//! The facade is complete: a wrapper backend that overrides every [`LeaseBackend`] method (and
//! [`Fencing`]) is written here with `redlease::*` paths only — no `lease-core`, no
//! `lease-redis` — and, on a real Redis, every call reaches the wrapped backend through it,
//! batches stay batches and a lock waiter behind it is woken by the holder's release notice.
//!
//! A method added to [`LeaseBackend`] with a default must be added to [`Forward`] too (and to
//! [`Method::ALL`]): a wrapper that keeps the default silently drops what the wrapped backend
//! does there (release notices, batched renewals), which is the defect this file guards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lease_testkit::redis::RedisServer;
use redlease::core::{
    AcquireOutcome, AcquireRequest, FairRequest, LeaseInfo, LeaseSpec, NoticeMark, Owner,
    PermitCount, PermitRequest, ReleaseOutcome, ReleaseRequest, ReleaseWatch, RenewOutcome,
    RenewRequest, WatchRole, fair_spec, semaphore_spec,
};
use redlease::redis::{HealingConnection, RedisBackend, Topology, notice_channel};
use redlease::{
    BackendError, FairInfo, Fencing, ForceReleaseOutcome, LeaseBackend, LockOptions, Locker,
    RetryStrategy, SemaphoreInfo, SharedInfo, StoreReport, Token, Ttl, async_trait,
};

/// Every bound on a wait in this file: far below the 20 s poll of the waiter.
const BOUND: Duration = Duration::from_secs(5);

/// Each overridable method of [`LeaseBackend`] and [`Fencing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Acquire,
    Renew,
    Release,
    RenewMany,
    Remaining,
    Inspect,
    Observe,
    CheckSpec,
    ValidityMargin,
    Preflight,
    ReleaseWatch,
    NoticeMark,
    CheckSemaphore,
    AcquirePermit,
    RenewPermit,
    RenewPermitMany,
    ReleasePermit,
    PermitRemaining,
    InspectSemaphore,
    CheckFair,
    AcquireFair,
    ReleaseFair,
    LeaveFair,
    FairWatch,
    InspectFair,
    CheckShared,
    AcquireShared,
    RenewShared,
    RenewSharedMany,
    ReleaseShared,
    SharedRemaining,
    InspectShared,
    ForceRelease,
    Fencer,
}

impl Method {
    const ALL: [Method; 34] = [
        Method::Acquire,
        Method::Renew,
        Method::Release,
        Method::RenewMany,
        Method::Remaining,
        Method::Inspect,
        Method::Observe,
        Method::CheckSpec,
        Method::ValidityMargin,
        Method::Preflight,
        Method::ReleaseWatch,
        Method::NoticeMark,
        Method::CheckSemaphore,
        Method::AcquirePermit,
        Method::RenewPermit,
        Method::RenewPermitMany,
        Method::ReleasePermit,
        Method::PermitRemaining,
        Method::InspectSemaphore,
        Method::CheckFair,
        Method::AcquireFair,
        Method::ReleaseFair,
        Method::LeaveFair,
        Method::FairWatch,
        Method::InspectFair,
        Method::CheckShared,
        Method::AcquireShared,
        Method::RenewShared,
        Method::RenewSharedMany,
        Method::ReleaseShared,
        Method::SharedRemaining,
        Method::InspectShared,
        Method::ForceRelease,
        Method::Fencer,
    ];
}

/// Forwards every method to `inner` and counts the calls of each.
#[derive(Clone)]
struct Forward<B> {
    inner: B,
    calls: Arc<[AtomicU32; Method::ALL.len()]>,
}

impl<B> Forward<B> {
    fn new(inner: B) -> Self {
        Forward {
            inner,
            calls: Arc::new(std::array::from_fn(|_| AtomicU32::new(0))),
        }
    }

    fn count(&self, m: Method) {
        self.calls[m as usize].fetch_add(1, Ordering::SeqCst);
    }

    fn calls(&self, m: Method) -> u32 {
        self.calls[m as usize].load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Forward<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.count(Method::Acquire);
        self.inner.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.count(Method::Renew);
        self.inner.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.count(Method::Release);
        self.inner.release(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        self.count(Method::RenewMany);
        self.inner.renew_many(reqs).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.count(Method::Remaining);
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.count(Method::Inspect);
        self.inner.inspect(spec).await
    }
    async fn force_release(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        self.count(Method::ForceRelease);
        self.inner.force_release(spec).await
    }
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.count(Method::Observe);
        self.inner.observe(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.count(Method::CheckSpec);
        self.inner.check_spec(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.count(Method::ValidityMargin);
        self.inner.validity_margin(ttl)
    }
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        self.count(Method::Preflight);
        self.inner.preflight().await
    }
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        self.count(Method::ReleaseWatch);
        self.inner.release_watch(spec, role)
    }
    fn notice_mark(&self, spec: &LeaseSpec) -> Option<NoticeMark> {
        self.count(Method::NoticeMark);
        self.inner.notice_mark(spec)
    }
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.count(Method::CheckSemaphore);
        self.inner.check_semaphore(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        self.count(Method::AcquirePermit);
        self.inner.acquire_permit(req).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.count(Method::RenewPermit);
        self.inner.renew_permit(req).await
    }
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.count(Method::RenewPermitMany);
        self.inner.renew_permit_many(reqs).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.count(Method::ReleasePermit);
        self.inner.release_permit(req).await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.count(Method::PermitRemaining);
        self.inner.permit_remaining(spec, owner).await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.count(Method::InspectSemaphore);
        self.inner.inspect_semaphore(spec).await
    }
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.count(Method::CheckFair);
        self.inner.check_fair(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        self.count(Method::AcquireFair);
        self.inner.acquire_fair(req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.count(Method::ReleaseFair);
        self.inner.release_fair(req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        self.count(Method::LeaveFair);
        self.inner.leave_fair(spec, owner).await
    }
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        self.count(Method::FairWatch);
        self.inner.fair_watch(spec, owner, role)
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.count(Method::InspectFair);
        self.inner.inspect_fair(spec).await
    }
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.count(Method::CheckShared);
        self.inner.check_shared(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.count(Method::AcquireShared);
        self.inner.acquire_shared(req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.count(Method::RenewShared);
        self.inner.renew_shared(req).await
    }
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        self.count(Method::RenewSharedMany);
        self.inner.renew_shared_many(reqs).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.count(Method::ReleaseShared);
        self.inner.release_shared(req).await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.count(Method::SharedRemaining);
        self.inner.shared_remaining(spec, owner).await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.count(Method::InspectShared);
        self.inner.inspect_shared(spec).await
    }
}

impl<B: Fencing> Fencing for Forward<B> {
    type Fencer = B::Fencer;

    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.count(Method::Fencer);
        self.inner.fencer(mark_key, token)
    }
}

type Backend = RedisBackend<HealingConnection>;

async fn connect(server: &RedisServer) -> Backend {
    redlease::redis::connect(&server.url())
        .await
        .expect("connect")
}

/// Bounds `f` by [`BOUND`].
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {BOUND:?}"))
}

#[tokio::test]
async fn every_method_reaches_the_wrapped_backend() {
    let server = RedisServer::start().await.expect("redis");
    let backend = Forward::new(connect(&server).await);
    let ttl = Ttl::new(Duration::from_secs(10)).unwrap();
    let owner = Owner::new("facade").unwrap();
    let spec = Arc::new(LeaseSpec::lock(["f:a"], Some("f:fence".to_owned())).unwrap());
    let other = Arc::new(LeaseSpec::lock(["f:b"], None).unwrap());

    backend.check_spec(&spec).unwrap();
    // The Redis backend's drift allowance (the default would be zero).
    let margin = backend.validity_margin(ttl);
    assert_eq!(margin, backend.inner.validity_margin(ttl));
    assert!(margin > Duration::ZERO);
    let report = bounded("preflight", backend.preflight()).await.unwrap();
    // The real server answered (the default would know nothing, not even the server).
    assert!(report.server.is_some(), "{report:?}");
    let mut watch = backend
        .release_watch(&spec, WatchRole::Observer)
        .expect("the Redis backend's watch came through the wrapper");
    assert_eq!(watch.role(), WatchRole::Observer);
    watch.activate();
    // Going live wakes an activated watch once: the subscription is confirmed.
    bounded("the subscription", watch.notified()).await;
    // The Redis backend counts its notices (the default would give no mark), and sees the
    // observer above waiting.
    let mark = backend
        .notice_mark(&spec)
        .expect("the Redis backend's mark came through the wrapper");
    assert!(mark.others_wait(), "the observer waits");

    let mut token = None;
    for s in [&spec, &other] {
        let got = bounded(
            "acquire",
            backend.acquire(&AcquireRequest::new(s.clone(), owner.clone(), ttl)),
        )
        .await
        .unwrap();
        let AcquireOutcome::Acquired { token: t, .. } = got else {
            panic!("not acquired: {got:?}");
        };
        token = token.or(t);
    }
    let renew = RenewRequest::new(spec.clone(), owner.clone(), ttl);
    let renewed = bounded("renew", backend.renew(&renew)).await.unwrap();
    assert_eq!(renewed, RenewOutcome::Renewed);
    let both = [
        &renew,
        &RenewRequest::new(other.clone(), owner.clone(), ttl),
    ];
    let outcomes = bounded("renew_many", backend.renew_many(&both)).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(RenewOutcome::Renewed))),
        "{outcomes:?}"
    );
    let left = bounded("remaining", backend.remaining(&spec, &owner))
        .await
        .unwrap();
    assert!(left.is_some_and(|d| d <= Duration::from_secs(10)));
    let info = bounded("inspect", backend.inspect(&spec)).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("facade"));
    // The observer's read leaves the waiter mark (the default would only read, and the
    // release below would publish nothing).
    let info = bounded("observe", backend.observe(&spec)).await.unwrap();
    assert_eq!(info.holder.as_deref(), Some("facade"));

    let fencer = backend.fencer(
        spec.mark_key().as_deref().unwrap(),
        token.expect("a fenced lock has a token"),
    );
    assert!(
        bounded("a fenced write", fencer.set("f:value", "v"))
            .await
            .unwrap()
            .is_applied()
    );

    let released = bounded(
        "release",
        backend.release(&ReleaseRequest::new(spec.clone(), owner.clone())),
    )
    .await
    .unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    // The release was announced to the watch that came through the wrapper.
    bounded("the release notice", watch.notified()).await;

    // A semaphore through the wrapper: every permit method reaches the Redis backend, which
    // has permit scripts (the defaults would refuse with `Unsupported`).
    let sem = Arc::new(semaphore_spec("f:sem", None).unwrap());
    backend.check_semaphore(&sem).unwrap();
    let permit = PermitRequest::new(
        AcquireRequest::new(sem.clone(), owner.clone(), ttl),
        PermitCount::new(2).unwrap(),
    );
    let got = bounded("acquire_permit", backend.acquire_permit(&permit))
        .await
        .unwrap();
    assert!(matches!(got, AcquireOutcome::Acquired { .. }), "{got:?}");
    let renewed = bounded(
        "renew_permit",
        backend.renew_permit(&RenewRequest::new(sem.clone(), owner.clone(), ttl)),
    )
    .await
    .unwrap();
    assert_eq!(renewed, RenewOutcome::Renewed);
    let batch = RenewRequest::new(sem.clone(), owner.clone(), ttl);
    let renewed = bounded("renew_permit_many", backend.renew_permit_many(&[&batch])).await;
    assert!(
        matches!(renewed.as_slice(), [Ok(RenewOutcome::Renewed)]),
        "{renewed:?}"
    );
    let left = bounded("permit_remaining", backend.permit_remaining(&sem, &owner))
        .await
        .unwrap();
    assert!(left.is_some());
    let info = bounded("inspect_semaphore", backend.inspect_semaphore(&sem))
        .await
        .unwrap();
    assert_eq!(info.permits, Some(2));
    let released = bounded(
        "release_permit",
        backend.release_permit(&ReleaseRequest::new(sem.clone(), owner.clone())),
    )
    .await
    .unwrap();
    assert_eq!(released, ReleaseOutcome::Released);

    // A fair lock through the wrapper: every fair method reaches the Redis backend.
    let fair = Arc::new(fair_spec("f:fair", None).unwrap());
    backend.check_fair(&fair).unwrap();
    let wake = backend.fair_watch(&fair, &owner, WatchRole::Contender);
    assert!(wake.is_some(), "the Redis backend wakes fair waiters");
    let got = bounded(
        "acquire_fair",
        backend.acquire_fair(&FairRequest::new(
            AcquireRequest::new(fair.clone(), owner.clone(), ttl),
            Some(ttl),
        )),
    )
    .await
    .unwrap();
    assert!(matches!(got, AcquireOutcome::Acquired { .. }), "{got:?}");
    let left = bounded("leave_fair", backend.leave_fair(&fair, &owner))
        .await
        .unwrap();
    assert!(!left, "the holder had no place");
    let info: FairInfo = bounded("inspect_fair", backend.inspect_fair(&fair))
        .await
        .unwrap();
    assert!(info.holder.is_some(), "{info:?}");
    let released = bounded(
        "release_fair",
        backend.release_fair(&ReleaseRequest::new(fair.clone(), owner.clone())),
    )
    .await
    .unwrap();
    assert_eq!(released, ReleaseOutcome::Released);

    // A reader through the wrapper: every shared method reaches the Redis backend, which has
    // the readers' scripts (the defaults would refuse with `Unsupported`).
    let rw = Arc::new(LeaseSpec::lock(["f:rw"], Some("f:rw:fence".into())).unwrap());
    backend.check_shared(&rw).unwrap();
    let got = bounded(
        "acquire_shared",
        backend.acquire_shared(&AcquireRequest::new(rw.clone(), owner.clone(), ttl)),
    )
    .await
    .unwrap();
    assert!(matches!(got, AcquireOutcome::Acquired { .. }), "{got:?}");
    let renewed = bounded(
        "renew_shared",
        backend.renew_shared(&RenewRequest::new(rw.clone(), owner.clone(), ttl)),
    )
    .await
    .unwrap();
    assert_eq!(renewed, RenewOutcome::Renewed);
    let batch = RenewRequest::new(rw.clone(), owner.clone(), ttl);
    let renewed = bounded("renew_shared_many", backend.renew_shared_many(&[&batch])).await;
    assert!(
        matches!(renewed.as_slice(), [Ok(RenewOutcome::Renewed)]),
        "{renewed:?}"
    );
    let left = bounded("shared_remaining", backend.shared_remaining(&rw, &owner))
        .await
        .unwrap();
    assert!(left.is_some());
    let info: SharedInfo = bounded("inspect_shared", backend.inspect_shared(&rw))
        .await
        .unwrap();
    assert_eq!(info.readers.len(), 1);
    let released = bounded(
        "release_shared",
        backend.release_shared(&ReleaseRequest::new(rw.clone(), owner.clone())),
    )
    .await
    .unwrap();
    assert_eq!(released, ReleaseOutcome::Released);
    // An administrator's release, through the facade's Locker: it reaches the wrapped backend
    // (the default would refuse as unsupported) and raises the fence of a free lock.
    let admin = Locker::new(backend.clone());
    let forced: ForceReleaseOutcome =
        bounded("force_release", admin.force_release("f:a", Some("f:fence")))
            .await
            .unwrap();
    assert!(!forced.was_held(), "{forced:?}");
    assert!(forced.fence().is_some(), "{forced:?}");
    let _: Option<redlease::LockHolder> = None;
    let _ = redlease::ADMIN_TIMEOUT;

    for m in Method::ALL {
        let expected = match m {
            // Locker::force_release checks its spec too.
            Method::Acquire | Method::CheckSpec => 2,
            _ => 1,
        };
        assert_eq!(backend.calls(m), expected, "{m:?}");
    }
    // The batch went to the wrapped backend as one batch: no single renewals behind it.
    assert_eq!(backend.calls(Method::Renew), 1);
}

/// Long polls: a lock waiter that only polls would wait 20 s.
fn slow_retry() -> LockOptions {
    LockOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(20)).unwrap())
        .wait(Duration::from_secs(60))
}

#[tokio::test]
async fn a_waiter_behind_the_wrapper_is_woken_by_the_release_notice() {
    let server = RedisServer::start().await.expect("redis");
    let holder = Locker::new(connect(&server).await);
    let inner = connect(&server).await;
    let notices = inner.release_notices().expect("notices").clone();
    let waiting = Locker::new(Forward::new(inner));
    let held = bounded(
        "the first lock",
        holder.obtain("job", Duration::from_secs(30), LockOptions::new()),
    )
    .await
    .unwrap();
    let waiter = tokio::spawn(async move {
        let lock = waiting
            .obtain("job", Duration::from_secs(30), slow_retry())
            .await;
        (lock.map(drop), Instant::now())
    });
    // The waiter subscribes after its first attempt found the lock held. The hub's live flag
    // has no signal of its own besides the waiter's wake-up this test is about; a bounded
    // check every few milliseconds does not race.
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

/// Issue 56's capped hold, with `redlease::*` paths only: `LockOptions::max_hold`, the cap's
/// own reason (`redlease::LossReason::MaxHoldReached`, via `Lock::loss_reason`), and the
/// release at the cap, which goes through the wrapper (a hold left to lapse would send none).
#[tokio::test]
async fn a_capped_hold_ends_with_its_reason_and_releases_through_the_wrapper() {
    let server = RedisServer::start().await.expect("redis");
    let backend = Forward::new(connect(&server).await);
    let locker = Locker::new(backend.clone());
    let ms = Duration::from_millis;
    // Refused before any round trip: a cap shorter than the TTL, or without auto-renewal.
    for bad in [
        LockOptions::new().auto_renew(ms(100)).max_hold(ms(200)),
        LockOptions::new().max_hold(ms(5_000)),
    ] {
        let result = locker.obtain("capped", ms(300), bad).await;
        assert!(
            matches!(result, Err(redlease::LockError::Invalid(_))),
            "refused before any round trip"
        );
    }
    assert_eq!(backend.calls(Method::Acquire), 0);
    let lock = bounded(
        "the capped lock",
        locker.obtain(
            "capped",
            ms(300),
            LockOptions::new().auto_renew(ms(100)).max_hold(ms(500)),
        ),
    )
    .await
    .unwrap();
    bounded("the cap", lock.lost().cancelled()).await;
    assert_eq!(
        lock.loss_reason(),
        Some(redlease::LossReason::MaxHoldReached)
    );
    // The release is sent in the background as the hold ends; no signal of its own, so a
    // bounded check every few milliseconds.
    bounded("the release at the cap", async {
        while backend.calls(Method::Release) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(backend.calls(Method::Release), 1);
    assert!(
        !bounded("is_locked", locker.is_locked("capped"))
            .await
            .unwrap()
    );
}
