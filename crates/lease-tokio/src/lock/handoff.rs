//! Hand-off within a process: the obtains of one [`Locker`](crate::Locker) (and its clones)
//! that find the key held by a lock of the same locker queue behind it here, and that lock's
//! [`release`](crate::Lock::release) passes the key straight to the first of them, in one step
//! at the store ([`LeaseBackend::hand_off`]).
//!
//! The rules:
//!
//! - **Only where one step can do it**: the backend says which leases it can hand off
//!   ([`LeaseBackend::can_hand_off`]: Redis, a plain lock on one unfenced key). Every other
//!   lease contends at the store as before.
//! - **The store decides.** A queued obtain never attempts at the store while a lock of its
//!   locker holds the key and believes it holds it (its local deadline has not passed); the
//!   holder's release asks the store to set the key to the first waiter's value *only if* it
//!   still holds exactly the holder's unmarked value — no attempt at the store found it held,
//!   so nobody outside this locker waits. Otherwise the store releases as a release does
//!   (publishing for the waiters elsewhere) and the first local waiter attempts at the store
//!   at once, like any contender: locks stay FIFO within a locker, and a waiter elsewhere
//!   breaks the chain at the next release.
//! - **No waiter is stranded.** Every way a holder stops holding wakes the first waiter: a
//!   release that did not hand off, and the handle's drop (which every release path ends
//!   in). A holder that is lost without either (its deadline passed) is noticed by the
//!   waiters themselves: each waits at most until the holder's local deadline, then looks
//!   again and goes to the store when it no longer holds.
//! - **Truthful on both sides.** A hand-off the store confirmed is the holder's release and
//!   the waiter's acquisition, dated from when it was sent. One whose reply was lost (or
//!   whose releasing future was dropped) is unknown on both sides: the holder's release
//!   reports [`LockError::OutcomeUnknown`](crate::LockError::OutcomeUnknown) and the waiter's
//!   obtain treats it as an attempt of unknown outcome (its next attempt, with the same
//!   owner, takes the key over if it was applied). A waiter that gave up (its obtain future
//!   dropped) while the key was being handed to it has the key released for it.
//! - **Bounded.** One entry per key a lock of the locker holds, one per queued obtain; both
//!   go with the lock's handle and the obtain's future. The lines are sharded by key
//!   ([`Lines`], [`lines::SHARDS`] shards, made at the first obtain that can be handed off).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lease_core::lock::release_request;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, FenceState, HandOffOutcome, LeaseBackend,
    LeaseSpec,
};

use crate::lock::handle::Shared;
use crate::lock::task::spawn_release;

mod lines;
mod seat;

pub(crate) use lines::Lines;
pub(crate) use seat::WaitSeat;

/// A key of the lines: the lease's spec, compared by its (one) key.
#[derive(Debug, Clone)]
struct LineKey(Arc<LeaseSpec>);

impl LineKey {
    fn key(&self) -> &str {
        first_key(&self.0)
    }
}

/// A lease's (only) key, as the lines know it.
fn first_key(spec: &LeaseSpec) -> &str {
    spec.keys().first().map_or("", String::as_str)
}

impl PartialEq for LineKey {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for LineKey {}

impl Hash for LineKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl std::borrow::Borrow<str> for LineKey {
    fn borrow(&self) -> &str {
        self.key()
    }
}

/// Who has a key's turn, as far as the locker knows.
#[derive(Debug)]
enum Holder<B> {
    /// A lock of this locker holds it.
    Lock(Weak<Shared<B>>),
    /// A hand-off to the obtain with this id (`WaitSeat::id`) is in flight or delivered, its
    /// lock not made yet.
    Handing(u64),
    /// The obtain with this id contends at the store (the locker's one contender for the
    /// key): the others wait behind it, so that its win is not marked for them and a chain
    /// of hand-offs can start.
    Contending(u64),
}

impl<B> Holder<B> {
    /// An obtain's own turn (never a lock: a lock's owner obtaining again takes it over at
    /// the store).
    fn is_turn_of(&self, id: u64) -> bool {
        matches!(self, Holder::Handing(o) | Holder::Contending(o) if *o == id)
    }
}

/// What a queued obtain is told.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// An acquire was sent for it (a hand-off), at `sent_at`; the reply: acquired, or an
    /// error of unknown effect.
    Transfer {
        sent_at: tokio::time::Instant,
        reply: Result<AcquireOutcome, BackendError>,
    },
    /// The holder let the key go without handing it over: attempt at the store now.
    Go,
}

#[derive(Debug)]
enum Seat {
    /// Not in a queue.
    Idle,
    /// In its key's queue.
    Queued,
    /// Taken from the queue by a releasing holder: a hand-off for it is in flight.
    Claimed,
    /// Told something, not yet taken.
    Delivered(Delivery),
    /// Its obtain ended while claimed: the releaser cleans up.
    Abandoned,
}

/// One queued obtain.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Its obtain's id in the lines.
    id: u64,
    /// The acquire a hand-off sends for it.
    request: AcquireRequest,
    seat: Mutex<Seat>,
    wake: tokio::sync::Notify,
}

impl Waiter {
    /// The acquire a hand-off sends for this waiter.
    pub(crate) fn request(&self) -> &AcquireRequest {
        &self.request
    }

    fn seat(&self) -> MutexGuard<'_, Seat> {
        self.seat.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delivers `delivery`; gives it back when the obtain is gone.
    fn deliver(&self, delivery: Delivery) -> Result<(), Delivery> {
        {
            let mut seat = self.seat();
            if matches!(*seat, Seat::Abandoned) {
                return Err(delivery);
            }
            *seat = Seat::Delivered(delivery);
        }
        self.wake.notify_one();
        Ok(())
    }
}

/// The lines' maps hash with foldhash (seeded per process): three lookups per uncontended
/// lock cycle (turn taken, held, left; a claim looks only while some obtain is queued).
type Map<V> = HashMap<LineKey, V, foldhash::fast::RandomState>;

#[derive(Debug)]
struct State<B> {
    holders: Map<Holder<B>>,
    /// The queued obtains of each key with any, the first to be served first.
    queues: Map<VecDeque<Arc<Waiter>>>,
}

/// One shard of a locker's lines ([`Lines`]): the keys whose hash falls on it. On a cache line
/// of its own. See the [module docs](self) for the rules.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Shard<B> {
    state: Mutex<State<B>>,
    /// Whether any obtain is queued (`State::queues` is not empty), as the last guard of
    /// `state` left it: a release reads it without taking the lock, and claims only when it
    /// is set. A waiter queued just as a release looks is not lost when the release misses
    /// it: the release then goes to the store, and the handle's drop ([`Shard::leave`])
    /// wakes the first waiter under the lock.
    queued: AtomicBool,
    /// The next obtain's id.
    next: AtomicU64,
}

/// The lines' lock held: on drop, records whether any obtain is queued (`Shard::queued`).
struct StateGuard<'a, B> {
    guard: MutexGuard<'a, State<B>>,
    queued: &'a AtomicBool,
}

impl<B> Deref for StateGuard<'_, B> {
    type Target = State<B>;

    fn deref(&self) -> &State<B> {
        &self.guard
    }
}

impl<B> DerefMut for StateGuard<'_, B> {
    fn deref_mut(&mut self) -> &mut State<B> {
        &mut self.guard
    }
}

impl<B> Drop for StateGuard<'_, B> {
    fn drop(&mut self) {
        let queued = !self.guard.queues.is_empty();
        // Written only when it changes: the uncontended cycle leaves the line unwritten.
        if self.queued.load(Ordering::Relaxed) != queued {
            self.queued.store(queued, Ordering::Release);
        }
    }
}

/// What a queued obtain learns of the turn it waits behind.
#[derive(Clone, Copy)]
pub(crate) struct LocalHold {
    /// The holder's local deadline, when it is a lock (not an obtain or a hand-off).
    pub(crate) until: Option<tokio::time::Instant>,
}

impl<B: LeaseBackend> Shard<B> {
    pub(crate) fn new() -> Self {
        Shard {
            state: Mutex::new(State {
                holders: Map::default(),
                queues: Map::default(),
            }),
            queued: AtomicBool::new(false),
            next: AtomicU64::new(0),
        }
    }

    fn state(&self) -> StateGuard<'_, B> {
        // Every change below leaves both maps consistent before it can panic.
        StateGuard {
            guard: self.state.lock().unwrap_or_else(|e| e.into_inner()),
            queued: &self.queued,
        }
    }

    /// How many obtains wait in `key`'s queue now.
    pub(crate) fn waiting(&self, key: &str) -> usize {
        self.state().queues.get(key).map_or(0, VecDeque::len)
    }

    /// `lock` holds its key now (it was obtained, at the store or by a hand-off).
    pub(crate) fn hold(&self, lock: &Arc<Shared<B>>) {
        let key = first_key(&lock.renew.spec);
        let holder = Holder::Lock(Arc::downgrade(lock));
        let mut st = self.state();
        // The obtain's turn is usually there already: replaced in place.
        match st.holders.get_mut(key) {
            Some(turn) => *turn = holder,
            None => {
                st.holders
                    .insert(LineKey(Arc::clone(&lock.renew.spec)), holder);
            }
        }
    }

    /// `lock`'s handle is gone: if it was the key's holder, the first waiter's turn comes
    /// (it attempts at the store).
    pub(crate) fn leave(&self, lock: &Shared<B>) {
        let key = first_key(&lock.renew.spec);
        let mut st = self.state();
        let Some((line, holder)) = st.holders.remove_entry(key) else {
            return;
        };
        if matches!(&holder, Holder::Lock(w) if std::ptr::eq(w.as_ptr(), lock)) {
            go_first(&mut st, key);
        } else {
            // Someone else's turn (handed over, or a later lock): put back.
            st.holders.insert(line, holder);
        }
    }

    /// For a releasing `lock` that holds its key: the first waiter, now claimed (the key is
    /// being handed to it).
    pub(crate) fn claim(&self, lock: &Shared<B>) -> Option<Arc<Waiter>> {
        let key = lock.renew.spec.keys().first()?;
        // Nobody queued: the lock is not taken (a lock cycle with nobody waiting takes it
        // three times, not four).
        if !self.queued.load(Ordering::Acquire) {
            return None;
        }
        let mut st = self.state();
        if st.queues.is_empty() {
            return None;
        }
        let mine = matches!(st.holders.get(key.as_str()), Some(Holder::Lock(w)) if std::ptr::eq(w.as_ptr(), lock));
        if !mine {
            return None;
        }
        let waiter = pop_first(&mut st, key)?;
        *waiter.seat() = Seat::Claimed;
        if let Some(holder) = st.holders.get_mut(key.as_str()) {
            *holder = Holder::Handing(waiter.id);
        }
        Some(waiter)
    }

    /// Settles the hand-off to `waiter` (claimed by [`Shard::claim`]) sent at `sent_at`:
    /// tells the waiter (without the key, it is the locker's contender at the store now),
    /// or, when its obtain is gone, releases what may have been handed to it and gives the
    /// turn to the next waiter.
    pub(crate) fn settle(
        &self,
        backend: &Arc<B>,
        waiter: &Waiter,
        sent_at: tokio::time::Instant,
        result: &Result<HandOffOutcome, BackendError>,
        bound: Duration,
    ) {
        let key = first_key(&waiter.request.spec);
        let delivery = match result {
            Ok(HandOffOutcome::HandedOff) => Delivery::Transfer {
                sent_at,
                reply: Ok(AcquireOutcome::Acquired {
                    token: None,
                    fence: FenceState::UNKNOWN,
                }),
            },
            Ok(_) => Delivery::Go,
            Err(e) => Delivery::Transfer {
                sent_at,
                reply: Err(e.duplicate()),
            },
        };
        let handed = matches!(result, Ok(HandOffOutcome::HandedOff));
        let owner = &waiter.request.owner;
        let id = waiter.id;
        let mut st = self.state();
        let Err(undelivered) = waiter.deliver(delivery) else {
            if !handed
                && let Some(holder) = st.holders.get_mut(key)
                && holder.is_turn_of(id)
            {
                *holder = Holder::Contending(id);
            }
            return;
        };
        if st.holders.get(key).is_some_and(|h| h.is_turn_of(id)) {
            st.holders.remove(key);
            go_first(&mut st, key);
        }
        drop(st);
        if matches!(undelivered, Delivery::Transfer { .. }) {
            spawn_release(
                Arc::clone(backend),
                release_request(&waiter.request.spec, owner),
                bound,
            );
        }
    }

    /// An obtain's turn: `Some` (and the obtain queued on its key) while another obtain or
    /// lock of this locker has the key's turn — a lock that believes it holds the key, a
    /// hand-off in flight, or an obtain contending at the store — or while a hand-off to
    /// this obtain is under way; `None` when it should attempt at the store (then it has the
    /// key's turn).
    fn local_hold(&self, seat: &mut WaitSeat<'_, B>) -> Option<LocalHold> {
        // A lock found holding is asked outside the lines' lock (its machine has its own);
        // if it turns out not to hold, the lines are looked at again.
        let mut lost: Option<Weak<Shared<B>>> = None;
        loop {
            let found = {
                let mut st = self.state();
                if seat
                    .waiter
                    .as_ref()
                    .is_some_and(|w| matches!(*w.seat(), Seat::Claimed | Seat::Delivered(_)))
                {
                    // Being handed the key: wait for the hand-off's delivery.
                    return Some(LocalHold { until: None });
                }
                let (me, owner) = (seat.id, &seat.request.owner);
                // One lookup: the key's turn is read, and taken when free.
                let found = match st.holders.entry(LineKey(Arc::clone(&seat.request.spec))) {
                    Entry::Vacant(free) => {
                        free.insert(Holder::Contending(me));
                        None
                    }
                    Entry::Occupied(mut turn) => {
                        let found = match turn.get() {
                            Holder::Handing(o) | Holder::Contending(o) => {
                                (*o != me).then_some(Found::Turn)
                            }
                            Holder::Lock(w) => match w.upgrade() {
                                Some(lock)
                                    if lock.renew.owner != *owner
                                        && !lost.as_ref().is_some_and(|l| l.ptr_eq(w)) =>
                                {
                                    Some(Found::Lock(lock))
                                }
                                // Gone (its drop is on the way), not holding, or of our own
                                // owner (a takeover): the store.
                                _ => None,
                            },
                        };
                        if found.is_none() {
                            turn.insert(Holder::Contending(me));
                        }
                        found
                    }
                };
                let Some(found) = found else {
                    unqueue_locked(&mut st, seat);
                    return None;
                };
                // Queued before the holder is asked whether it holds: a release in between
                // finds this waiter (no lost wake-up).
                let waiter = Arc::clone(seat.waiter.get_or_insert_with(|| {
                    Arc::new(Waiter {
                        id: seat.id,
                        request: (*seat.request).clone(),
                        seat: Mutex::new(Seat::Idle),
                        wake: tokio::sync::Notify::new(),
                    })
                }));
                let mut state = waiter.seat();
                if matches!(*state, Seat::Idle) {
                    *state = Seat::Queued;
                    drop(state);
                    st.queues
                        .entry(LineKey(Arc::clone(&seat.request.spec)))
                        .or_default()
                        .push_back(Arc::clone(&waiter));
                }
                found
            };
            match found {
                Found::Turn => return Some(LocalHold { until: None }),
                Found::Lock(lock) => {
                    let until = lock.with(|m, now| m.is_held(now).then(|| m.valid_until()));
                    if let Some(until) = until {
                        return Some(LocalHold {
                            until: Some(lock.clock.to_tokio(until)),
                        });
                    }
                    // It no longer holds (lost, its handle not yet dropped).
                    if lost.is_some() {
                        return None;
                    }
                    lost = Some(Arc::downgrade(&lock));
                }
            }
        }
    }

    /// Takes `seat` out of the lines for good (its obtain ended, won or not, or was
    /// dropped): a hand-off still in flight to it is cleaned up by its releaser; one
    /// delivered and not taken is released here; and the key's turn, if it had it and made
    /// no lock, passes to the next waiter.
    fn abandon(&self, backend: &Arc<B>, seat: &mut WaitSeat<'_, B>, bound: Duration) {
        if seat.won && seat.waiter.is_none() {
            // Never queued, and its lock has the turn: nothing to leave.
            return;
        }
        let key = first_key(&seat.request.spec);
        let mut st = self.state();
        let delivery = unqueue_locked(&mut st, seat);
        if !seat.won && st.holders.get(key).is_some_and(|h| h.is_turn_of(seat.id)) {
            st.holders.remove(key);
            go_first(&mut st, key);
        }
        drop(st);
        if matches!(delivery, Some(Delivery::Transfer { .. })) {
            spawn_release(
                Arc::clone(backend),
                release_request(&seat.request.spec, &seat.request.owner),
                bound,
            );
        }
    }
}

/// What [`Shard::local_hold`] found.
enum Found<B> {
    /// Another obtain has the key's turn.
    Turn,
    /// A lock of the locker, which may hold the key.
    Lock(Arc<Shared<B>>),
}

/// Takes `seat` out of its queue. Returns what was delivered to it and not taken; a seat
/// claimed for a hand-off is marked abandoned (the releaser cleans up).
fn unqueue_locked<B>(st: &mut State<B>, seat: &WaitSeat<'_, B>) -> Option<Delivery> {
    let waiter = seat.waiter.as_ref()?;
    let key = first_key(&waiter.request.spec);
    let mut state = waiter.seat();
    match std::mem::replace(&mut *state, Seat::Idle) {
        Seat::Queued => {
            drop(state);
            if let Some(queue) = st.queues.get_mut(key) {
                queue.retain(|w| !Arc::ptr_eq(w, waiter));
                if queue.is_empty() {
                    st.queues.remove(key);
                }
            }
            None
        }
        Seat::Delivered(d) => Some(d),
        Seat::Claimed | Seat::Abandoned => {
            *state = Seat::Abandoned;
            None
        }
        Seat::Idle => None,
    }
}

/// Takes the first waiter of `key`'s queue.
fn pop_first<B>(st: &mut State<B>, key: &str) -> Option<Arc<Waiter>> {
    let queue = st.queues.get_mut(key)?;
    let first = queue.pop_front();
    if queue.is_empty() {
        st.queues.remove(key);
    }
    first
}

/// The key's turn passes to its first waiter (it attempts at the store); the key has no
/// holder here when this is called.
fn go_first<B>(st: &mut State<B>, key: &str) {
    if st.queues.is_empty() {
        return;
    }
    while let Some(waiter) = pop_first(st, key) {
        if waiter.deliver(Delivery::Go).is_ok() {
            st.holders.insert(
                LineKey(Arc::clone(&waiter.request.spec)),
                Holder::Contending(waiter.id),
            );
            return;
        }
    }
}
