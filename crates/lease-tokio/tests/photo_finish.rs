//! "Photo finish": a reply that is ready exactly when its deadline fires counts as the reply.
//! On tokio's paused clock a backend answers after exactly the acquire bound; the elector must
//! be elected from that very reply, with no timeout reported.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::election::Op;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ElectionConfig, LeaseBackend, LeaseInfo,
    LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Role,
};
use lease_tokio::{CancellationToken, Elector, Observer};

/// Answers every acquire after exactly `delay` (tokio time), from an in-memory store.
struct Slow {
    inner: MemoryBackend,
    delay: Duration,
}

#[async_trait]
impl LeaseBackend for Slow {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        tokio::time::sleep(self.delay).await;
        self.inner.acquire_now(req)
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.inner.renew_now(req)
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.inner.release_now(req)
    }
    async fn remaining(&self, s: &LeaseSpec, o: &Owner) -> Result<Option<Duration>, BackendError> {
        self.inner.remaining(s, o).await
    }
    async fn inspect(&self, s: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inner.inspect_now(s)
    }
}

#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<Op>>>);

impl Observer for Errors {
    fn on_error(&self, op: Op, _e: &BackendError) {
        self.0.lock().unwrap().push(op);
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_ready_at_the_deadline_counts_as_the_reply() {
    let config = ElectionConfig::builder("e", "a")
        .ttl(Duration::from_millis(900))
        .build()
        .unwrap();
    // The acquire bound is min(acquire interval, TTL − renew) = 450 ms: answer in exactly that.
    let delay = config.acquire_timeout();
    assert_eq!(delay, Duration::from_millis(450));
    let backend = Slow {
        inner: MemoryBackend::new(ManualClock::new()),
        delay,
    };
    let errors = Errors::default();
    let elector = Elector::builder(backend, config)
        .observer(errors.clone())
        .build();
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let mut rx = elector.subscribe();
    // Virtual time: the bound only turns a regression into a failure instead of a hang.
    tokio::time::timeout(
        Duration::from_secs(60),
        rx.wait_for(|s| matches!(s.role, Role::Leader(_))),
    )
    .await
    .expect("never elected: every photo-finish reply was treated as a timeout")
    .unwrap();
    assert_eq!(
        elector.token().map(|t| t.get()),
        Some(1),
        "elected by the first reply"
    );
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert!(
        !errors.0.lock().unwrap().contains(&Op::Acquire),
        "the photo-finish reply was treated as a timeout"
    );
}
