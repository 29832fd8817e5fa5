//! Release notifications: who is woken when a lease is released.
//!
//! A backend that can tell when a lease is released (Redis publishes from inside its release
//! script) keeps one [`ReleaseHub`] per notification channel and hands out [`ReleaseWatch`]es
//! on it ([`crate::LeaseBackend::release_watch`]). The drivers wait on a watch *and* on their
//! usual poll timer: a notification only makes the next attempt happen sooner; polling stays
//! the fallback for a holder that crashed (its key simply expires, nobody publishes) and for a
//! notification that was lost.
//!
//! This module holds the rules of waking; it does no I/O and starts no task. The backend's
//! subscriber feeds it ([`ReleaseHub::notify`], [`ReleaseHub::set_live`]) and learns through
//! [`HubLink`] when a channel is wanted and when it no longer is.
//!
//! # The rules
//!
//! - **One contender per notice.** Every release notice wakes the *one* contender of this
//!   hub that has waited longest since its last wake (FIFO order within the process), not
//!   all of them: a release in a process with many waiters on one key causes one attempt
//!   from that process, not a storm of failing scripts. A woken contender that stops
//!   contending or is dropped before it took its wake passes the wake on. Across processes
//!   each process wakes one of its own, so locks are not FIFO-fair between processes: the
//!   fastest process to react wins.
//! - **Observers see every notice.** An observer (a process watching who leads, never
//!   contending) is woken on every notice and on every resync.
//! - **No lost wake-up.** A wake is a flag on the contender's slot, not an edge: a notice that
//!   arrives while the contender is busy (its attempt in flight) is kept and ends its next
//!   wait at once. A watch registered before an attempt therefore cannot miss the release of
//!   a holder that attempt found.
//! - **Resync when the channel goes live.** A hub is *live* while its subscription is
//!   confirmed on the server. Notices published while it was not live were lost, so the hub
//!   becoming live (first subscription, or again after the subscriber reconnected) wakes
//!   every contender and observer once: each re-checks the store. While not live, drivers
//!   simply poll.
//! - **Subscribe only when needed.** A contender's watch does not ask for the server-side
//!   subscription until [`ReleaseWatch::activate`] (drivers call it after the first attempt
//!   that found the lease held), so an uncontended lock costs no subscription at all; the
//!   resync on going live covers the window between that attempt and the subscription. An
//!   observer activates its watch at once; a relay (a Redlock backend's watch on each node)
//!   when the watch it feeds is activated.
//!
//! ```
//! use lease_core::notify::{HubLink, ReleaseHub, WatchRole};
//!
//! struct NoServer;
//! impl HubLink for NoServer {
//!     fn activate(&self) {}
//!     fn idle(&self) {}
//! }
//!
//! let hub = ReleaseHub::new(NoServer);
//! let mut a = hub.watch(WatchRole::Contender);
//! let mut b = hub.watch(WatchRole::Contender);
//! hub.set_live(true); // subscribed: everyone re-checks once
//! assert!(a.take_wake() && b.take_wake());
//! hub.notify(); // one release: one contender
//! assert!(a.take_wake());
//! assert!(!b.take_wake());
//! hub.notify(); // the next one goes to the other contender
//! assert!(b.take_wake());
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// How a backend's subscriber learns what a hub needs. Called with no lock held.
pub trait HubLink: Send + Sync + 'static {
    /// A watch asked for notifications: subscribe to the hub's channel (if not yet), then call
    /// [`ReleaseHub::set_live`]`(true)` once the server confirmed it.
    fn activate(&self);
    /// The last watch of an activated hub is gone: the channel may be unsubscribed.
    fn idle(&self);
}

/// What a watch is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchRole {
    /// A follower or lock waiter: woken one per notice (see the [module docs](self)).
    Contender,
    /// A process that only watches: woken on every notice.
    Observer,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    role: WatchRole,
    /// Eligible for a notice's wake (contenders only).
    contending: bool,
    /// A wake delivered and not yet taken (contenders only).
    woken: bool,
    /// The hub generation this observer has seen (observers only).
    seen: u64,
    waker: Option<Waker>,
}

#[derive(Debug, Default)]
struct HubState {
    live: bool,
    activated: bool,
    /// Bumped on every notice and every resync.
    generation: u64,
    notices: u64,
    next_id: u64,
    /// Every watch, contenders in wake order (front: the next to be woken).
    slots: VecDeque<Slot>,
}

impl HubState {
    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id)
    }

    /// Wakes the first eligible contender not already woken; it moves to the back.
    fn wake_one(&mut self, wakers: &mut Vec<Waker>) {
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.role == WatchRole::Contender && s.contending && !s.woken)
        else {
            return;
        };
        if let Some(mut slot) = self.slots.remove(i) {
            slot.woken = true;
            wakers.extend(slot.waker.take());
            self.slots.push_back(slot);
        }
    }

    fn wake_observers(&mut self, wakers: &mut Vec<Waker>) {
        for s in self.slots.iter_mut() {
            if s.role == WatchRole::Observer {
                wakers.extend(s.waker.take());
            }
        }
    }
}

/// What a backend's release notices looked like just before an attempt, for a contender that
/// registers its [`ReleaseWatch`] only once an attempt found the lease held
/// ([`crate::LeaseBackend::notice_mark`]): most attempts win, and a watch registered for
/// nothing costs an uncontended lock cycle more than the rest of its bookkeeping.
///
/// **No lost wake-up** holds as with a watch registered before the attempt: the backend counts
/// every notice it receives and every channel going live (on any channel: it cannot tell
/// whether an unknown channel matters), and a contender whose mark is older than the count
/// once its watch is registered treats the gap as a notice ([`NoticeMark::moved_since`]), so
/// at worst it makes one early attempt.
///
/// ```
/// use lease_core::notify::NoticeMark;
///
/// let before = NoticeMark::new(7, false);
/// assert!(!NoticeMark::new(7, false).moved_since(before));
/// assert!(NoticeMark::new(8, false).moved_since(before)); // a notice came in between
/// assert!(NoticeMark::new(7, true).others_wait());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoticeMark {
    count: u64,
    others_wait: bool,
}

impl NoticeMark {
    /// A mark: `count`, the notices and resynchronisations the backend has received so far;
    /// `others_wait`, whether some watch of this process waits for the lease's release (what
    /// [`ReleaseWatch::others_wait`] says for a watch of its own).
    pub fn new(count: u64, others_wait: bool) -> NoticeMark {
        NoticeMark { count, others_wait }
    }

    /// Whether a notice or a resynchronisation arrived between `earlier` and this mark.
    pub fn moved_since(self, earlier: NoticeMark) -> bool {
        self.count != earlier.count
    }

    /// Whether another watch of this process waited for the lease's release when the mark was
    /// taken: a winning attempt then says so in its request
    /// ([`AcquireRequest::waiters`](crate::AcquireRequest::waiters)).
    pub fn others_wait(self) -> bool {
        self.others_wait
    }
}

/// The wake rules of one notification channel, shared by every watch on it. See the [module
/// docs](self).
pub struct ReleaseHub {
    state: Mutex<HubState>,
    link: Box<dyn HubLink>,
}

impl fmt::Debug for ReleaseHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("ReleaseHub")
            .field("live", &st.live)
            .field("activated", &st.activated)
            .field("notices", &st.notices)
            .field("watches", &st.slots.len())
            .finish_non_exhaustive()
    }
}

impl ReleaseHub {
    /// A hub whose subscription needs are reported to `link`. Not live until
    /// [`ReleaseHub::set_live`].
    pub fn new(link: impl HubLink) -> Arc<ReleaseHub> {
        Arc::new(ReleaseHub {
            state: Mutex::new(HubState::default()),
            link: Box::new(link),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding this lock leaves the flags consistent (no invariant spans
        // two fields), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a watch. Nothing is subscribed until some watch calls
    /// [`ReleaseWatch::activate`].
    pub fn watch(self: &Arc<Self>, role: WatchRole) -> ReleaseWatch {
        let (id, generation) = {
            let mut st = self.lock();
            let id = st.next_id;
            st.next_id += 1;
            let generation = st.generation;
            st.slots.push_back(Slot {
                id,
                role,
                contending: true,
                woken: false,
                seen: generation,
                waker: None,
            });
            (id, generation)
        };
        ReleaseWatch {
            hub: Arc::clone(self),
            id,
            role,
            seen: generation,
        }
    }

    /// A release notice arrived: wakes every observer and one contender.
    pub fn notify(&self) {
        let mut wakers = Vec::new();
        {
            let mut st = self.lock();
            st.generation += 1;
            st.notices += 1;
            st.wake_observers(&mut wakers);
            st.wake_one(&mut wakers);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// The subscription is confirmed (`true`) or lost (`false`). Going live wakes every
    /// contender and observer once (notices may have been missed while not live).
    pub fn set_live(&self, live: bool) {
        let mut wakers = Vec::new();
        {
            let mut st = self.lock();
            let was = st.live;
            st.live = live;
            if live && !was {
                st.generation += 1;
                for s in st.slots.iter_mut() {
                    if s.role == WatchRole::Contender && s.contending {
                        s.woken = true;
                    }
                    wakers.extend(s.waker.take());
                }
            }
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Whether the subscription is confirmed.
    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// Whether some watch asked for the subscription and watches remain.
    pub fn is_activated(&self) -> bool {
        self.lock().activated
    }

    /// How many notices this hub has received.
    pub fn notices(&self) -> u64 {
        self.lock().notices
    }

    /// How many watches are registered.
    pub fn watches(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether some watch waits for the lease's release: an observer, or a contender that is
    /// contending (what [`ReleaseWatch::others_wait`] asks, for a caller without a watch).
    pub fn has_waiters(&self) -> bool {
        self.lock()
            .slots
            .iter()
            .any(|s| s.role == WatchRole::Observer || s.contending)
    }
}

/// One watch on a [`ReleaseHub`]: a follower's, a lock waiter's or an observer's. Dropping it
/// unregisters it (and passes an untaken wake on).
pub struct ReleaseWatch {
    hub: Arc<ReleaseHub>,
    id: u64,
    role: WatchRole,
    seen: u64,
}

impl fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseWatch")
            .field("role", &self.role)
            .field("hub", &self.hub)
            .finish_non_exhaustive()
    }
}

impl ReleaseWatch {
    /// What this watch is for.
    pub fn role(&self) -> WatchRole {
        self.role
    }

    /// The hub this watch is registered on.
    pub fn hub(&self) -> &Arc<ReleaseHub> {
        &self.hub
    }

    /// Asks for the server-side subscription (idempotent). Until the hub is live, waits end
    /// only by the driver's own timer; going live wakes this watch once.
    pub fn activate(&self) {
        let first = {
            let mut st = self.hub.lock();
            !std::mem::replace(&mut st.activated, true)
        };
        if first {
            self.hub.link.activate();
        }
    }

    /// Whether another watch of this hub waits for the lease's release: an observer, or a
    /// contender that is contending. A driver whose attempt wins while others wait says so in
    /// its request ([`AcquireRequest::waiters`](crate::AcquireRequest::waiters)): they will
    /// not attempt again until a notice or their poll, so a store that publishes only for
    /// waiters it knows of must learn of them from the winner.
    pub fn others_wait(&self) -> bool {
        let st = self.hub.lock();
        st.slots
            .iter()
            .any(|s| s.id != self.id && (s.role == WatchRole::Observer || s.contending))
    }

    /// Whether notifications are arriving (the subscription is confirmed).
    pub fn is_live(&self) -> bool {
        self.hub.is_live()
    }

    /// Whether this contender may be woken (a leader stops contending while it leads). A wake
    /// it holds when it stops is passed on. No effect on observers.
    pub fn set_contending(&self, contending: bool) {
        let mut wakers = Vec::new();
        {
            let mut st = self.hub.lock();
            let Some(slot) = st.slot(self.id) else {
                return;
            };
            if slot.role != WatchRole::Contender || slot.contending == contending {
                return;
            }
            slot.contending = contending;
            let pass_on = !contending && std::mem::replace(&mut slot.woken, false);
            if pass_on {
                st.wake_one(&mut wakers);
            }
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Takes a pending wake without waiting: whether there was one.
    pub fn take_wake(&mut self) -> bool {
        self.poll_wake(None)
    }

    /// Polls for this watch's next wake (see [`ReleaseWatch::notified`]), registering the
    /// context's waker when there is none yet; for waiting on several watches at once.
    pub fn poll_notified(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.poll_wake(Some(cx.waker())) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Waits for this watch's next wake: a notice given to this contender, any notice for an
    /// observer, or the hub going live. Cancel-safe: a wake is only taken when this returns.
    pub fn notified(&mut self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx: &mut Context<'_>| {
            if self.poll_wake(Some(cx.waker())) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    fn poll_wake(&mut self, waker: Option<&Waker>) -> bool {
        let mut st = self.hub.lock();
        let generation = st.generation;
        let Some(slot) = st.slot(self.id) else {
            return false;
        };
        let ready = match slot.role {
            WatchRole::Contender => std::mem::replace(&mut slot.woken, false),
            WatchRole::Observer => {
                let moved = slot.seen != generation;
                slot.seen = generation;
                self.seen = generation;
                moved
            }
        };
        if !ready && let Some(w) = waker {
            match &mut slot.waker {
                Some(old) if old.will_wake(w) => {}
                other => *other = Some(w.clone()),
            }
        }
        ready
    }
}

impl Drop for ReleaseWatch {
    fn drop(&mut self) {
        let mut wakers = Vec::new();
        let idle = {
            let mut st = self.hub.lock();
            if let Some(i) = st.slots.iter().position(|s| s.id == self.id)
                && let Some(slot) = st.slots.remove(i)
                && slot.woken
                && slot.contending
            {
                st.wake_one(&mut wakers);
            }
            let idle = st.slots.is_empty() && st.activated;
            if idle {
                st.activated = false;
            }
            idle
        };
        wakers.into_iter().for_each(Waker::wake);
        if idle {
            self.hub.link.idle();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counts {
        activate: AtomicUsize,
        idle: AtomicUsize,
    }
    struct Link(Arc<Counts>);
    impl HubLink for Link {
        fn activate(&self) {
            self.0.activate.fetch_add(1, Ordering::SeqCst);
        }
        fn idle(&self) {
            self.0.idle.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn hub() -> (Arc<ReleaseHub>, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        (ReleaseHub::new(Link(Arc::clone(&counts))), counts)
    }

    #[test]
    fn others_wait_counts_other_contending_watches_and_observers() {
        let hub = ReleaseHub::new(Link(Arc::new(Counts::default())));
        let a = hub.watch(WatchRole::Contender);
        assert!(!a.others_wait(), "alone");
        let b = hub.watch(WatchRole::Contender);
        assert!(a.others_wait() && b.others_wait());
        b.set_contending(false);
        assert!(!a.others_wait(), "a leader does not wait");
        assert!(b.others_wait());
        let o = hub.watch(WatchRole::Observer);
        assert!(a.others_wait(), "an observer waits");
        drop(o);
        drop(b);
        assert!(!a.others_wait());
    }

    #[test]
    fn contenders_are_woken_one_per_notice_in_fifo_order() {
        let (hub, _) = hub();
        let mut w: Vec<_> = (0..3).map(|_| hub.watch(WatchRole::Contender)).collect();
        for expected in [0, 1, 2, 0] {
            hub.notify();
            let woken: Vec<usize> = (0..3).filter(|&i| w[i].take_wake()).collect();
            assert_eq!(woken, vec![expected]);
        }
    }

    #[test]
    fn a_notice_during_an_attempt_is_kept_for_the_next_wait() {
        let (hub, _) = hub();
        let mut a = hub.watch(WatchRole::Contender);
        hub.notify(); // arrives while `a` is busy
        assert!(a.take_wake(), "kept, not lost");
        assert!(!a.take_wake(), "taken once");
    }

    #[test]
    fn a_dropped_or_retired_woken_contender_passes_its_wake_on() {
        let (hub, _) = hub();
        let a = hub.watch(WatchRole::Contender);
        let mut b = hub.watch(WatchRole::Contender);
        let mut c = hub.watch(WatchRole::Contender);
        hub.notify();
        drop(a);
        assert!(b.take_wake());
        hub.notify();
        c.set_contending(false);
        assert!(b.take_wake(), "c's wake went to the only contender left");
        hub.notify();
        assert!(!c.take_wake(), "not contending: never woken");
        assert!(b.take_wake());
    }

    #[test]
    fn observers_see_every_notice_and_going_live_wakes_everyone() {
        let (hub, counts) = hub();
        let mut o = hub.watch(WatchRole::Observer);
        assert_eq!(
            counts.activate.load(Ordering::SeqCst),
            0,
            "nothing until activated"
        );
        o.activate();
        assert_eq!(counts.activate.load(Ordering::SeqCst), 1);
        let mut a = hub.watch(WatchRole::Contender);
        let mut b = hub.watch(WatchRole::Contender);
        hub.notify();
        hub.notify();
        assert!(o.take_wake());
        assert!(!o.take_wake(), "one wake covers both notices");
        assert!(a.take_wake() && b.take_wake());
        hub.set_live(true);
        assert!(o.take_wake() && a.take_wake() && b.take_wake());
        hub.set_live(true);
        assert!(!a.take_wake(), "only the transition resyncs");
    }

    #[test]
    fn the_link_hears_activation_once_and_idleness_when_the_last_watch_goes() {
        let (hub, counts) = hub();
        let a = hub.watch(WatchRole::Contender);
        let b = hub.watch(WatchRole::Contender);
        assert_eq!(counts.activate.load(Ordering::SeqCst), 0, "contenders wait");
        a.activate();
        b.activate();
        assert_eq!(counts.activate.load(Ordering::SeqCst), 1);
        drop(a);
        assert_eq!(counts.idle.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(counts.idle.load(Ordering::SeqCst), 1);
        let c = hub.watch(WatchRole::Contender);
        drop(c);
        assert_eq!(
            counts.idle.load(Ordering::SeqCst),
            1,
            "never activated: nothing to undo"
        );
    }

    #[test]
    fn notified_resolves_on_a_wake() {
        let (hub, _) = hub();
        let mut a = hub.watch(WatchRole::Contender);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        {
            let mut f = std::pin::pin!(a.notified());
            assert!(f.as_mut().poll(&mut cx).is_pending());
            hub.notify();
            assert!(f.as_mut().poll(&mut cx).is_ready());
        }
    }
}
