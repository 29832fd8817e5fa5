//! Release notices over a quorum: every node's release script publishes, and a Redlock
//! backend listens on every node.
//!
//! A [`RedlockBackend`](crate::RedlockBackend) keeps one [`ReleaseHub`] per lease (its first
//! key). The hub's watches are the drivers'; what feeds it is one *relay* per node: an
//! observer watch on that node's own hub (each node's backend has its own subscriber, e.g.
//! [`Node::connect`](crate::Node::connect)'s). When the Redlock hub is first activated, the
//! relays are activated (each node subscribes) and a task forwards their wakes:
//!
//! - a notice from **any** node wakes the Redlock hub (a quorum of notices is not needed: the
//!   attempt decides);
//! - one release arrives from every node; the nodes' wakes that are pending together are
//!   forwarded as one, the others each wake one more contender of this process (at most N
//!   attempts per release, and no notice is ever dropped: a time window that absorbed
//!   "duplicates" would also swallow the next release);
//! - the hub is live while some relay is (checked at every forwarded wake).
//!
//! The task ends when the hub is dropped (its last watch is gone), dropping the relays, so
//! every node unsubscribes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::Poll;

use lease_core::notify::{HubLink, ReleaseHub, ReleaseWatch, WatchRole};

/// The Redlock-level hubs, by the lease's first key.
#[derive(Debug, Default)]
pub(crate) struct Fanin {
    hubs: Arc<Mutex<HashMap<String, Weak<ReleaseHub>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Fanin {
    /// A watch on `key`'s hub; `relays` (called only when the hub is created) gives one
    /// observer watch per node. `None` when no node has notices.
    pub(crate) fn watch(
        &self,
        key: &str,
        role: WatchRole,
        relays: impl FnOnce() -> Vec<ReleaseWatch>,
    ) -> Option<ReleaseWatch> {
        let mut hubs = lock(&self.hubs);
        if let Some(hub) = hubs.get(key).and_then(Weak::upgrade) {
            return Some(hub.watch(role));
        }
        let relays = relays();
        if relays.is_empty() {
            return None;
        }
        let state = Arc::new(LinkState {
            hub: OnceLock::new(),
            relays: Mutex::new(Some(relays)),
            task: Mutex::new(None),
        });
        let hub = ReleaseHub::new(Relay {
            state: Arc::clone(&state),
            key: key.to_owned(),
            hubs: Arc::downgrade(&self.hubs),
        });
        let _ = state.hub.set(Arc::downgrade(&hub));
        hubs.insert(key.to_owned(), Arc::downgrade(&hub));
        Some(hub.watch(role))
    }
}

struct LinkState {
    hub: OnceLock<Weak<ReleaseHub>>,
    /// The node watches, until the hub is activated (then the task owns them).
    relays: Mutex<Option<Vec<ReleaseWatch>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for LinkState {
    fn drop(&mut self) {
        // The hub is gone: stop forwarding (the relays drop, the nodes unsubscribe).
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// The Redlock hub's link: activation starts the relays and the forwarding task.
struct Relay {
    state: Arc<LinkState>,
    key: String,
    hubs: Weak<Mutex<HashMap<String, Weak<ReleaseHub>>>>,
}

impl Drop for Relay {
    /// The hub is gone: forget its entry (unless a new hub took the key meanwhile).
    fn drop(&mut self) {
        if let Some(hubs) = self.hubs.upgrade() {
            let mut hubs = lock(&hubs);
            if hubs.get(&self.key).is_some_and(|h| h.strong_count() == 0) {
                hubs.remove(&self.key);
            }
        }
    }
}

impl HubLink for Relay {
    fn activate(&self) {
        let Some(relays) = lock(&self.state.relays).take() else {
            return;
        };
        let Some(hub) = self.state.hub.get().cloned() else {
            return;
        };
        for r in &relays {
            r.activate();
        }
        // Called from a driver on a tokio runtime (the drivers activate their watches).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            *lock(&self.state.task) = Some(rt.spawn(forward(hub, relays)));
        }
    }

    fn idle(&self) {
        // The hub is dropped right after its last watch: `LinkState`'s drop stops the task.
    }
}

async fn forward(hub: Weak<ReleaseHub>, mut relays: Vec<ReleaseWatch>) {
    loop {
        std::future::poll_fn(|cx| {
            let mut woken = false;
            for r in relays.iter_mut() {
                woken |= r.poll_notified(cx).is_ready();
            }
            if woken {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let Some(h) = hub.upgrade() else {
            return;
        };
        h.set_live(relays.iter().any(ReleaseWatch::is_live));
        h.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Nothing;
    impl HubLink for Nothing {
        fn activate(&self) {}
        fn idle(&self) {}
    }

    #[tokio::test]
    async fn a_notice_from_any_node_wakes_once_per_release() {
        let nodes: Vec<_> = (0..3).map(|_| ReleaseHub::new(Nothing)).collect();
        let fanin = Fanin::default();
        let mut w = fanin
            .watch("k", WatchRole::Contender, || {
                nodes.iter().map(|n| n.watch(WatchRole::Observer)).collect()
            })
            .expect("nodes have notices");
        w.activate();
        for n in &nodes {
            n.set_live(true);
        }
        tokio::time::timeout(Duration::from_secs(5), w.notified())
            .await
            .expect("going live resyncs");
        // One release: a notice from each node.
        for n in &nodes {
            n.notify();
        }
        tokio::time::timeout(Duration::from_secs(5), w.notified())
            .await
            .expect("woken");
        assert!(w.is_live());
        // The other nodes' notices of the same release may wake it once more (never lost).
        tokio::task::yield_now().await;
        let _ = w.take_wake();
        // A later release on one node only (the others lost it) still wakes.
        nodes[2].notify();
        tokio::time::timeout(Duration::from_secs(5), w.notified())
            .await
            .expect("woken by one node");
    }

    #[test]
    fn no_node_with_notices_means_no_watch() {
        let fanin = Fanin::default();
        assert!(fanin.watch("k", WatchRole::Contender, Vec::new).is_none());
    }

    #[test]
    fn hubs_of_uncontended_keys_leave_nothing_behind() {
        let node = ReleaseHub::new(Nothing);
        let fanin = Fanin::default();
        for i in 0..50 {
            let w = fanin.watch(&format!("k{i}"), WatchRole::Contender, || {
                vec![node.watch(WatchRole::Observer)]
            });
            drop(w);
        }
        assert!(lock(&fanin.hubs).is_empty());
        assert_eq!(node.watches(), 0, "the relays are gone too");
    }
}
