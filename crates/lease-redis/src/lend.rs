//! Clones of a backend's connection, kept for its calls ([`Clones`]).
//!
//! A call needs the connection mutably (`ConnectionLike` takes `&mut self`) while the backend
//! is shared, so every call used to clone the connection and drop the clone after. A clone of
//! a `MultiplexedConnection` (and of the crate's healing connections) is a handful of
//! reference counts in memory every task of the process shares: at 64 tasks on two worker
//! threads those counters bounce between the cores on every call. Here a call borrows a clone
//! kept by the thread it runs on and gives it back when it ends, so the shared counters are
//! touched only when a thread's clones are all in use (the first calls, and bursts).
//!
//! The rules:
//!
//! - **A kept clone is as good as a new one.** Clones are kept only for the types known to
//!   keep nothing of a call in a clone ([`kept_as_fresh`]: `MultiplexedConnection`,
//!   `ConnectionManager`, and [`HealingConnection`], refreshed as it is lent again), so a
//!   clone that served a call, even one whose future was dropped mid-request, serves the next
//!   as a new one would. Every other type (the cluster and Sentinel connections, a wrapper of
//!   yours) is cloned for each call, as before.
//! - **Bounded.** At most [`PER_SLOT`] idle clones per slot, [`SLOTS`] slots per backend
//!   (threads share slots beyond that); a clone given back to a full slot is dropped. All go
//!   with the backend.
//! - **Never a dead connection kept.** A [`HealingConnection`] that gives a connection up
//!   drops every idle clone its backends keep ([`Purge`], registered at the backend's
//!   construction), so a connection given up after a stall is closed at once, not when an idle
//!   clone happens to be lent again; a clone given back is refreshed first.
//! - **Never waits.** A slot in use by another thread (it happens only when threads share a
//!   slot) is passed by: the call clones the connection as before.

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, RedisError, RedisFuture, Value};

use crate::HealingConnection;
use crate::replica::AckLane;

/// Slots per backend: threads beyond this many share slots (round robin by first use).
pub(crate) const SLOTS: usize = 16;

/// Idle clones kept per slot at most (the calls a thread has in flight at once, beyond which
/// clones are dropped when given back).
pub(crate) const PER_SLOT: usize = 64;

/// The next thread's slot.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, chosen at its first call (`usize::MAX` until then): a constant
    /// initialiser, so reading it is a plain load.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The calling thread's slot number; `None` while the thread's storage is torn down.
fn slot_index() -> Option<usize> {
    SLOT.try_with(|slot| {
        let mut i = slot.get();
        if i == usize::MAX {
            i = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
            slot.set(i);
        }
        i
    })
    .ok()
}

/// One slot's idle clones, on a cache line of its own (a thread's calls touch only its slot).
#[repr(align(128))]
struct Slot<C>(Mutex<Vec<C>>);

/// A backend's slots.
struct Slots<C>(Box<[Slot<C>]>);

/// What a [`HealingConnection`] calls when it gives a connection up: drop the idle clones
/// kept (they may pin the connection given up). Registered weakly: a backend's slots go with
/// it.
pub(crate) trait Purge: Send + Sync {
    /// Drops every idle clone.
    fn purge(&self);
}

impl<C: Send> Purge for Slots<C> {
    fn purge(&self) {
        for slot in self.0.iter() {
            // Dropped outside the slot's lock.
            let idle = slot
                .0
                .lock()
                .map(|mut v| std::mem::take(&mut *v))
                .unwrap_or_default();
            drop(idle);
        }
    }
}

/// The purge hooks of one [`HealingConnection`] and its clones (weak: dead ones are dropped
/// as new ones register, so the list is bounded by the live backends).
pub(crate) type PurgeHooks = Mutex<Vec<Weak<dyn Purge>>>;

/// Idle clones of a backend's connection, per thread slot. See the [module docs](self).
pub(crate) struct Clones<C> {
    /// Empty when the connection's type is not one known to keep nothing of a call in a clone
    /// ([`kept_as_fresh`]): its calls clone it, as before.
    slots: Arc<Slots<C>>,
    /// Where these slots are registered to be purged (a [`HealingConnection`]'s hooks), and
    /// how (made where `C: Send` is known, so a backend's clone registers its own slots).
    hooks: Option<(Arc<PurgeHooks>, Register<C>)>,
}

/// Registers a backend's slots with a connection's purge hooks.
type Register<C> = fn(&Arc<Slots<C>>, &PurgeHooks);

fn register<C: Send + 'static>(slots: &Arc<Slots<C>>, hooks: &PurgeHooks) {
    let purge: Arc<dyn Purge> = slots.clone();
    let mut hooks = hooks.lock().unwrap_or_else(|p| p.into_inner());
    hooks.retain(|h| h.strong_count() > 0);
    hooks.push(Arc::downgrade(&purge));
}

/// Whether a clone of a `C` that served calls serves the next one exactly as a new clone
/// would: redis-rs's multiplexed connection and connection manager (clones share everything),
/// and the crate's [`HealingConnection`], whose kept clones are refreshed as they are lent ([`refresh`]). Any
/// other type (one of yours, or a wrapper) is cloned for every call, as it always was.
fn kept_as_fresh<C: 'static>() -> bool {
    let id = TypeId::of::<C>();
    id == TypeId::of::<MultiplexedConnection>()
        || id == TypeId::of::<ConnectionManager>()
        || id == TypeId::of::<HealingConnection>()
}

/// Makes a kept clone what a new clone is, as it is lent again: a [`HealingConnection`]
/// keeps the connection it pinned only while that is still the one a new clone would get
/// ([`HealingConnection::refresh`]).
fn refresh<C: 'static>(conn: &mut C) {
    if let Some(healing) = (conn as &mut dyn Any).downcast_mut::<HealingConnection>() {
        healing.refresh();
    }
}

impl<C: Send + 'static> Clones<C> {
    /// The slots of a backend over `conn`: none unless its type is kept ([`kept_as_fresh`]);
    /// a [`HealingConnection`]'s are registered to be purged when it gives a connection up.
    pub(crate) fn for_conn(conn: &C) -> Self {
        let n = if kept_as_fresh::<C>() { SLOTS } else { 0 };
        let hooks = (conn as &dyn Any)
            .downcast_ref::<HealingConnection>()
            .map(|h| (h.purge_hooks(), register::<C> as Register<C>));
        Clones::with_slots(n, hooks)
    }
}

impl<C> Clones<C> {
    fn with_slots(n: usize, hooks: Option<(Arc<PurgeHooks>, Register<C>)>) -> Self {
        let slots = Arc::new(Slots(
            (0..n).map(|_| Slot(Mutex::new(Vec::new()))).collect(),
        ));
        if let Some((hooks, register)) = &hooks {
            register(&slots, hooks);
        }
        Clones { slots, hooks }
    }
}

impl<C> Clone for Clones<C> {
    /// A backend's clone keeps clones of its own (registered like the first's).
    fn clone(&self) -> Self {
        Clones::with_slots(
            self.slots.0.len(),
            self.hooks.as_ref().map(|(h, r)| (Arc::clone(h), *r)),
        )
    }
}

impl<C: Clone + 'static> Clones<C> {
    /// A clone of `conn` for one call: one this thread's slot kept, else a new one.
    pub(crate) fn lend<'a>(&'a self, conn: &C) -> Lent<'a, C> {
        let kept = self.slot().and_then(|slot| slot.0.try_lock().ok()?.pop());
        let conn = match kept {
            Some(mut kept) => {
                refresh(&mut kept);
                kept
            }
            None => conn.clone(),
        };
        Lent {
            home: self,
            conn: Some(conn),
        }
    }

    /// The calling thread's slot: `None` when clones are not kept, or while the thread's
    /// storage is torn down.
    fn slot(&self) -> Option<&Slot<C>> {
        let slots = &self.slots.0;
        if slots.is_empty() {
            return None;
        }
        slots.get(slot_index()? % slots.len())
    }

    /// Keeps `conn` in the calling thread's slot if it has room (else drops it), refreshed:
    /// a clone given back after its connection was given up (and its slot purged) does not
    /// keep that connection open.
    fn keep(&self, mut conn: C) {
        let Some(slot) = self.slot() else {
            return;
        };
        refresh(&mut conn);
        let Ok(mut idle) = slot.0.try_lock() else {
            return;
        };
        if idle.len() < PER_SLOT {
            idle.push(conn);
        }
    }

    /// How many idle clones are kept (tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.slots
            .0
            .iter()
            .map(|s| s.0.lock().map_or(0, |v| v.len()))
            .sum()
    }
}

/// A clone of the backend's connection lent to one call ([`Clones::lend`]): given back to
/// the calling thread's slot when dropped.
pub(crate) struct Lent<'a, C: Clone + 'static> {
    home: &'a Clones<C>,
    /// Always there until the drop gives it back.
    conn: Option<C>,
}

impl<C: Clone + 'static> Drop for Lent<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.home.keep(conn);
        }
    }
}

fn given_back() -> RedisError {
    RedisError::from((redis::ErrorKind::Client, "connection already given back"))
}

impl<C: ConnectionLike + Clone + Send + 'static> ConnectionLike for Lent<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // The clone's own future, not one more box around it.
        match self.conn.as_mut() {
            Some(conn) => conn.req_packed_command(cmd),
            None => Box::pin(async { Err(given_back()) }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self.conn.as_mut() {
            Some(conn) => conn.req_packed_commands(pipeline, offset, count),
            None => Box::pin(async { Err(given_back()) }),
        }
    }

    fn get_db(&self) -> i64 {
        self.conn.as_ref().map_or(0, ConnectionLike::get_db)
    }
}

/// The connection of an operation that may `WAIT` ([`RedisBackend::lane`](crate::RedisBackend)):
/// a clone of the shared connection, or a dedicated one with a replica ack.
pub(crate) enum Lane<'a, C: Clone + 'static> {
    Shared(Lent<'a, C>),
    Acked(AckLane<C>),
}

impl<C: ConnectionLike + Clone + Send + 'static> ConnectionLike for Lane<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Lane::Shared(conn) => conn.req_packed_command(cmd),
            Lane::Acked(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Lane::Shared(conn) => conn.req_packed_commands(pipeline, offset, count),
            Lane::Acked(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Lane::Shared(conn) => conn.get_db(),
            Lane::Acked(conn) => conn.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Clones of an `Arc` count themselves: a kept one is reused, not cloned again.
    fn kept() -> (Arc<u8>, Clones<Arc<u8>>) {
        (Arc::new(7), Clones::with_slots(SLOTS, None))
    }

    #[test]
    fn a_clone_given_back_serves_the_next_call() {
        let (conn, clones) = kept();
        drop(clones.lend(&conn));
        assert_eq!((Arc::strong_count(&conn), clones.idle()), (2, 1));
        for _ in 0..100 {
            let lent = clones.lend(&conn);
            assert_eq!(clones.idle(), 0);
            drop(lent);
        }
        assert_eq!(Arc::strong_count(&conn), 2, "no clone made after the first");
        drop(clones);
        assert_eq!(
            Arc::strong_count(&conn),
            1,
            "the kept clones go with the backend"
        );
    }

    #[test]
    fn a_thread_keeps_at_most_per_slot_clones() {
        let (conn, clones) = kept();
        let burst: Vec<_> = (0..PER_SLOT + 10).map(|_| clones.lend(&conn)).collect();
        assert_eq!(Arc::strong_count(&conn), PER_SLOT + 11);
        drop(burst);
        assert_eq!(clones.idle(), PER_SLOT);
        assert_eq!(Arc::strong_count(&conn), PER_SLOT + 1);
    }

    #[test]
    fn each_thread_takes_from_its_own_slot() {
        let (conn, clones) = kept();
        drop(clones.lend(&conn));
        std::thread::scope(|s| {
            s.spawn(|| {
                // Another thread finds nothing kept in its slot: it clones.
                let lent = clones.lend(&conn);
                assert_eq!(Arc::strong_count(&conn), 3);
                drop(lent);
            });
        });
        assert_eq!(clones.idle(), 2);
    }

    #[test]
    fn only_connections_known_to_keep_nothing_of_a_call_are_kept() {
        assert!(kept_as_fresh::<MultiplexedConnection>());
        assert!(kept_as_fresh::<ConnectionManager>());
        assert!(kept_as_fresh::<HealingConnection>());
        // Anything else (a wrapper of yours) is cloned for every call, as before.
        let conn = Arc::new(1u8);
        let clones = Clones::for_conn(&conn);
        drop(clones.lend(&conn));
        assert_eq!((Arc::strong_count(&conn), clones.idle()), (1, 0));
    }

    #[test]
    fn a_purge_drops_every_idle_clone_and_a_dead_hook_is_dropped() {
        let hooks: Arc<PurgeHooks> = Arc::default();
        let conn = Arc::new(7u8);
        let clones = Clones::with_slots(SLOTS, Some((Arc::clone(&hooks), register::<Arc<u8>>)));
        let copy = clones.clone();
        drop(clones.lend(&conn));
        drop(copy.lend(&conn));
        assert_eq!(Arc::strong_count(&conn), 3);
        for hook in hooks.lock().unwrap().iter() {
            hook.upgrade().expect("live").purge();
        }
        assert_eq!((Arc::strong_count(&conn), clones.idle()), (1, 0));
        drop(copy);
        // The next registration drops the dead hook: bounded by the live backends.
        let again = Clones::<Arc<u8>>::with_slots(SLOTS, Some((Arc::clone(&hooks), register)));
        assert_eq!(hooks.lock().unwrap().len(), 2);
        drop(again);
    }
}
