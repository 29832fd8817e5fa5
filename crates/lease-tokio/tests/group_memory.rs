//! `ElectionGroup`'s task over the in-memory backend, on tokio's paused clock (virtual time):
//! what real Redis cannot be made to do. The group's behaviour against Redis is tested in the
//! `redlease` crate (`tests/election_group.rs`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::bridge;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseInfo, LeaseSpec, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
use lease_tokio::ElectionGroup;

/// The memory backend, except that `renew_many` panics while `panics` is set, and `acquire`
/// and `inspect` while `acquire_panics` is (a backend bug).
#[derive(Clone)]
struct PanickyRenewals {
    inner: MemoryBackend,
    panics: Arc<AtomicBool>,
    acquire_panics: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl LeaseBackend for PanickyRenewals {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        assert!(
            !self.acquire_panics.load(Ordering::SeqCst),
            "acquire panics (on purpose)"
        );
        self.inner.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew(req).await
    }
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        assert!(
            !self.panics.load(Ordering::SeqCst),
            "renew_many panics (on purpose)"
        );
        self.inner.renew_many(reqs).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        assert!(
            !self.acquire_panics.load(Ordering::SeqCst),
            "inspect panics (on purpose)"
        );
        self.inner.inspect(spec).await
    }
}

/// A batch of renewals whose task fails (the backend panics) still answers each of its
/// machines (as timed out): a name whose renewal was in that batch has no timer entry while it
/// is in flight, so without that answer its machine would never be read again (its renewal
/// slot taken for good: never renewed, never stepped down, never won again). Each term ends by
/// its own deadline, and once renewals work again every name is won back.
#[tokio::test(start_paused = true)]
async fn a_batch_whose_task_panics_still_answers_its_renewals() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let panics = Arc::new(AtomicBool::new(false));
    let backend = PanickyRenewals {
        inner: MemoryBackend::new(clock),
        panics: Arc::clone(&panics),
        acquire_panics: Arc::default(),
    };
    let names: Vec<String> = (0..5).map(|i| format!("shard-{i}")).collect();
    let group = ElectionGroup::builder(backend, "g", names, "a")
        .ttl(Duration::from_millis(900))
        .contend_for_all()
        .start()
        .expect("a valid group");
    let mut owned = group.subscribe();
    let bound = Duration::from_secs(10);
    tokio::time::timeout(bound, owned.wait_for(|o| o.len() == 5))
        .await
        .expect("every name won")
        .expect("the group runs");
    let token = group.token("shard-0").expect("shard-0 led");

    panics.store(true, Ordering::SeqCst);
    tokio::time::timeout(bound, owned.wait_for(|o| o.is_empty()))
        .await
        .expect("every term ends by its deadline while renewals fail")
        .expect("the group runs");
    assert_eq!(group.token("shard-0"), None);

    panics.store(false, Ordering::SeqCst);
    tokio::time::timeout(bound, owned.wait_for(|o| o.len() == 5))
        .await
        .expect("every name won back once renewals work")
        .expect("the group runs");
    assert!(
        group.token("shard-0").is_some_and(|t| t > token),
        "a new term, with a higher token"
    );
    assert!(!group.is_finished());
    tokio::time::timeout(bound, group.shutdown())
        .await
        .expect("shutdown in time");
}

/// An acquire whose task fails (the backend panics) is answered as timed out, so its machine
/// tries again at its next interval; and a roster read whose task fails is read again. Before,
/// each such machine waited for an answer that never came: it never contended again.
#[tokio::test(start_paused = true)]
async fn acquires_and_roster_reads_whose_tasks_panic_are_answered() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let acquire_panics = Arc::new(AtomicBool::new(true));
    let backend = PanickyRenewals {
        inner: MemoryBackend::new(clock),
        panics: Arc::default(),
        acquire_panics: Arc::clone(&acquire_panics),
    };
    let names: Vec<String> = (0..3).map(|i| format!("shard-{i}")).collect();
    // The share rule (no `contend_for_all`): the group reads the roster too.
    let group = ElectionGroup::builder(backend, "g", names, "a")
        .ttl(Duration::from_millis(900))
        .start()
        .expect("a valid group");
    let mut owned = group.subscribe();
    // Several acquire intervals of panicking acquires and roster reads.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        owned.borrow().is_empty(),
        "nothing won while acquires panic"
    );
    acquire_panics.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(10), owned.wait_for(|o| o.len() == 3))
        .await
        .expect("every name won once acquires work")
        .expect("the group runs");
    assert!(!group.is_finished());
    tokio::time::timeout(Duration::from_secs(10), group.shutdown())
        .await
        .expect("shutdown in time");
}

/// Issue 54: once the group's task is gone (here its runtime is dropped under it, as a panic
/// of the task would end it), `owned()` no longer reports its last publication as if it were
/// still true: it is empty, and a watch sees the task gone.
#[test]
fn owned_is_empty_once_the_groups_task_is_gone() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let (group, owned) = runtime.block_on(async {
        let clock = ManualClock::new();
        let _b = bridge(clock.clone());
        let names: Vec<String> = (0..3).map(|i| format!("shard-{i}")).collect();
        let group = ElectionGroup::builder(MemoryBackend::new(clock), "g", names, "a")
            .ttl(Duration::from_millis(900))
            .contend_for_all()
            .start()
            .expect("a valid group");
        let mut owned = group.subscribe();
        tokio::time::timeout(Duration::from_secs(10), owned.wait_for(|o| o.len() == 3))
            .await
            .expect("every name won")
            .expect("the group runs");
        (group, owned)
    });
    assert_eq!(group.owned().len(), 3);
    drop(runtime);
    assert!(group.is_finished());
    assert!(group.owned().is_empty(), "a gone task owns nothing");
    assert!(owned.has_changed().is_err(), "watchers see the task gone");
}
