//! "Photo finish": a reply that is ready exactly when its deadline fires counts as the reply.
//! On tokio's paused clock a backend answers after exactly the acquire bound; the elector must
//! be elected from that very reply, with no timeout reported.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::election::Op;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{BackendError, ElectionConfig, Role};
use lease_testkit::wrap::{Call, Hooks, Wrapped};
use lease_tokio::{CancellationToken, Elector, Observer};

/// Answers every acquire after exactly `delay` (tokio time), from an in-memory store.
struct Slow {
    delay: Duration,
}

#[async_trait]
impl Hooks for Slow {
    async fn before(&self, call: &Call<'_>) {
        if let Call::Acquire(_) = call {
            tokio::time::sleep(self.delay).await;
        }
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
    let backend = Wrapped::with_hooks(MemoryBackend::new(ManualClock::new()), Slow { delay });
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
