//! Redlock refuses semaphores, before any round trip and with its reason: permits counted on
//! independent nodes do not bound the holders (see `docs/semaphores.md`).

use std::sync::Arc;
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::semaphore::{PermitCount, PermitRequest, semaphore_spec};
use lease_core::{AcquireRequest, BackendError, LeaseBackend, Owner, Ttl};
use lease_redlock::{Node, RedlockBackend, RedlockConfig};
use lease_tokio::{LockError, Locker};

fn redlock() -> (RedlockBackend<Node<MemoryBackend>>, Vec<MemoryBackend>) {
    let clock = ManualClock::new();
    let stores: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new(clock.clone())).collect();
    let nodes = stores
        .iter()
        .enumerate()
        .map(|(i, s)| Node::new(format!("mem-{i}"), s.clone()))
        .collect();
    let backend = RedlockBackend::new(nodes, RedlockConfig::new()).expect("three nodes");
    (backend, stores)
}

#[tokio::test]
async fn redlock_refuses_semaphores_with_its_reason() {
    let (backend, stores) = redlock();
    let spec = Arc::new(semaphore_spec("{s}", None).expect("spec"));
    match backend.check_semaphore(&spec) {
        Err(BackendError::Unsupported(why)) => {
            assert!(why.contains("independent nodes"), "{why}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The permit operations keep the refusing defaults: nothing reaches a node.
    let req = PermitRequest::new(
        AcquireRequest::new(
            Arc::clone(&spec),
            Owner::new("a").expect("owner"),
            Ttl::new(Duration::from_secs(1)).expect("ttl"),
        ),
        PermitCount::new(2).expect("count"),
    );
    assert!(matches!(
        backend.acquire_permit(&req).await,
        Err(BackendError::Unsupported(_))
    ));
    assert!(stores.iter().all(|s| s.calls() == 0), "no round trip");
    // And through the driver.
    let locker = Locker::new(backend);
    assert!(matches!(
        locker.semaphore("{s}", 2),
        Err(LockError::Refused(BackendError::Unsupported(_)))
    ));
}
