//! Redlock refuses read-write locks, before any round trip and with its reason (see
//! `docs/rwlocks.md`); the writer, a plain lock, is Redlock's own. It refuses a forced release
//! (`Locker::force_release`) the same way.

use std::sync::Arc;
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{AcquireRequest, BackendError, LeaseBackend, LeaseSpec, Owner, Ttl};
use lease_redlock::{Node, RedlockBackend, RedlockConfig};
use lease_tokio::{LockError, Locker};

#[tokio::test]
async fn redlock_refuses_readers_with_its_reason() {
    let clock = ManualClock::new();
    let stores: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new(clock.clone())).collect();
    let nodes = stores
        .iter()
        .enumerate()
        .map(|(i, s)| Node::new(format!("mem-{i}"), s.clone()))
        .collect();
    let backend = RedlockBackend::new(nodes, RedlockConfig::new()).expect("three nodes");
    let spec = Arc::new(LeaseSpec::lock(["doc"], None).expect("spec"));
    match backend.check_shared(&spec) {
        Err(BackendError::Unsupported(why)) => assert!(why.contains("read-write"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The shared operations keep the refusing defaults: nothing reaches a node.
    let req = AcquireRequest::new(
        Arc::clone(&spec),
        Owner::new("a").expect("owner"),
        Ttl::new(Duration::from_secs(1)).expect("ttl"),
    );
    assert!(matches!(
        backend.acquire_shared(&req).await,
        Err(BackendError::Unsupported(_))
    ));
    assert!(matches!(
        backend.inspect_shared(&spec).await,
        Err(BackendError::Unsupported(_))
    ));
    assert!(stores.iter().all(|s| s.calls() == 0), "no round trip");
    let locker = Locker::new(backend);
    assert!(matches!(
        locker.shared("doc"),
        Err(LockError::Refused(BackendError::Unsupported(_)))
    ));
}

/// A forced release is refused with its reason, before any node is asked: the lock on the
/// nodes is left as it was.
#[tokio::test]
async fn redlock_refuses_a_forced_release_with_its_reason() {
    let clock = ManualClock::new();
    let stores: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new(clock.clone())).collect();
    let nodes = stores
        .iter()
        .enumerate()
        .map(|(i, s)| Node::new(format!("mem-{i}"), s.clone()))
        .collect();
    let locker =
        Locker::new(RedlockBackend::new(nodes, RedlockConfig::new()).expect("three nodes"));
    let lock = locker
        .obtain(
            "job",
            Duration::from_secs(10),
            lease_tokio::LockOptions::new(),
        )
        .await
        .expect("obtained");
    match locker.force_release("job", Some("job:fence")).await {
        Err(LockError::Refused(BackendError::Unsupported(why))) => {
            assert!(why.contains("forced release"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    for s in &stores {
        assert!(s.get("job").is_some(), "nothing reached a node");
    }
    lock.release().await.expect("released");
}
