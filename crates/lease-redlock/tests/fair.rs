//! Redlock refuses fair locks, before any round trip and with its reason: independent nodes
//! keep independent queue orders (see `docs/fair-locks.md`).

use std::sync::Arc;
use std::time::Duration;

use lease_core::fair::{FairRequest, fair_spec};
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{AcquireRequest, BackendError, LeaseBackend, Owner, Ttl};
use lease_redlock::{Node, RedlockBackend, RedlockConfig};
use lease_tokio::{LockError, Locker};

#[tokio::test]
async fn redlock_refuses_fair_locks_with_its_reason() {
    let clock = ManualClock::new();
    let stores: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new(clock.clone())).collect();
    let nodes = stores
        .iter()
        .enumerate()
        .map(|(i, s)| Node::new(format!("mem-{i}"), s.clone()))
        .collect();
    let backend = RedlockBackend::new(nodes, RedlockConfig::new()).expect("three nodes");
    let spec = Arc::new(fair_spec("{f}", None).expect("spec"));
    match backend.check_fair(&spec) {
        Err(BackendError::Unsupported(why)) => assert!(why.contains("queue order"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The fair operations keep the refusing defaults: nothing reaches a node.
    let req = FairRequest::new(
        AcquireRequest::new(
            Arc::clone(&spec),
            Owner::new("a").expect("owner"),
            Ttl::new(Duration::from_secs(1)).expect("ttl"),
        ),
        None,
    );
    assert!(matches!(
        backend.acquire_fair(&req).await,
        Err(BackendError::Unsupported(_))
    ));
    assert!(matches!(
        backend.inspect_fair(&spec).await,
        Err(BackendError::Unsupported(_))
    ));
    assert!(stores.iter().all(|s| s.calls() == 0), "no round trip");
    let locker = Locker::new(backend);
    assert!(matches!(
        locker.fair("{f}"),
        Err(LockError::Refused(BackendError::Unsupported(_)))
    ));
}
