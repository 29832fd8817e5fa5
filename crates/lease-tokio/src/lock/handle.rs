//! [`Lock`]: the handle of a held lock, over a [`HeldLock`] machine behind one mutex.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lease_core::lease::RenewOrder;
use lease_core::lock::{
    HeldLock, LockError, LockEvent, ObtainPlan, Obtained, Refresh, RefreshReply, RefreshStart,
    release_request,
};
use lease_core::{
    BackendError, Fencing, LeaseBackend, LeaseSpec, LossReason, Metadata, Owner, RenewOutcome,
    RenewRequest, RetryStrategy, Token, Ttl,
};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::ids::jitter_seed;
use crate::lock::handoff::Lines;
use crate::lock::renewals::{Renewable, Renewals};
use crate::lock::task::spawn_release;
use crate::observer::LockObserver;
use crate::telemetry;

mod release;

/// What a lock's handle and its background task share.
#[derive(Debug)]
pub(crate) struct Shared<B> {
    pub(crate) backend: Arc<B>,
    /// The renewal auto-renewal sends (the lock's TTL): also the lock's one copy of its spec
    /// and owner.
    pub(crate) renew: RenewRequest,
    pub(crate) clock: Clock,
    /// The rules. Never held across a round trip.
    machine: Mutex<HeldLock>,
    /// Wakes whoever waits on the machine: the deadline moved, or the slot was freed.
    pub(crate) moved: tokio::sync::Notify,
    /// Fires when the lock is no longer held, for any reason.
    pub(crate) lost: LossSignal,
    /// Whether the locker's renewal task watches this lock (auto-renewal, or the deadline
    /// watch `lost()` asks for).
    watching: AtomicBool,
    /// The locker's renewal task.
    renewals: Arc<Renewals<Shared<B>>>,
    /// This lock, for waking the renewal task.
    me: Weak<Shared<B>>,
    /// The generation of this lock's entry in the renewal task's queue (older entries are
    /// stale).
    pub(crate) schedule: AtomicU64,
    /// The lock's span (`lock`, with its keys and fencing token): its events, and its
    /// background task, run inside it.
    pub(crate) span: tracing::Span,
    observer: Option<ObserverSlot>,
}

/// The loss signal of one lock ([`Lock::lost`]). Its [`CancellationToken`] (a heap node of
/// its own) is only made when someone asks for it: most locks are never watched, and a
/// process may hold thousands.
#[derive(Debug, Default)]
pub(crate) struct LossSignal(Mutex<Signal>);

#[derive(Debug, Default)]
struct Signal {
    fired: bool,
    token: Option<CancellationToken>,
}

impl LossSignal {
    fn state(&self) -> std::sync::MutexGuard<'_, Signal> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock is no longer held: cancels the token, if one was handed out, and every one
    /// handed out later.
    pub(crate) fn fire(&self) {
        let token = {
            let mut state = self.state();
            state.fired = true;
            state.token.clone()
        };
        if let Some(token) = token {
            token.cancel();
        }
    }

    /// Whether [`LossSignal::fire`] was called.
    pub(crate) fn fired(&self) -> bool {
        self.state().fired
    }

    /// The lock's token (the same one at every call), cancelled if the signal fired.
    pub(crate) fn token(&self) -> CancellationToken {
        let (token, fired) = {
            let mut state = self.state();
            let token = state
                .token
                .get_or_insert_with(CancellationToken::new)
                .clone();
            (token, state.fired)
        };
        if fired {
            token.cancel();
        }
        token
    }
}

/// The locker's observer, shown as present or not.
struct ObserverSlot(Arc<dyn LockObserver>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockObserver")
    }
}

impl<B: LeaseBackend> Shared<B> {
    /// Runs `f` on the machine at the current instant, then acts on the events it produced
    /// (after the mutex is released). `Renewed` events, which need no action, are dropped
    /// without allocating: every auto-renewal produces one.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut HeldLock, lease_core::Instant) -> R) -> R {
        let clock = self.clock;
        self.with_untimed(|m| f(m, clock.now()))
    }

    /// [`Shared::with`] for what needs no time (the clock is not read).
    pub(crate) fn with_untimed<R>(&self, f: impl FnOnce(&mut HeldLock) -> R) -> R {
        let (result, events) = {
            let mut machine = self.machine.lock().unwrap_or_else(|e| e.into_inner());
            let result = f(&mut machine);
            let events: Vec<LockEvent> = std::iter::from_fn(|| machine.poll_event())
                .filter(|e| !matches!(e, LockEvent::Renewed { .. }))
                .collect();
            (result, events)
        };
        for event in events {
            self.act(event);
        }
        result
    }

    fn act(&self, event: LockEvent) {
        let _span = self.span.enter();
        let keys = self.renew.spec.keys();
        match event {
            LockEvent::RenewFailed(e) => {
                telemetry::lock_refresh_failed(self.key());
                if e.is_transient() {
                    tracing::warn!(error = %e, "lock renewal failed (tolerated until the deadline)");
                } else {
                    tracing::error!(error = %e, "lock renewal refused (permanent error); giving the lock up");
                }
                if let Some(ObserverSlot(o)) = &self.observer {
                    o.on_renew_failed(keys, &e);
                }
            }
            LockEvent::Lost { reason, release } => {
                if reason == LossReason::MaxHoldReached {
                    tracing::info!(
                        release,
                        "lock reached its max hold: auto-renewal stopped, the hold ends"
                    );
                } else {
                    tracing::warn!(?reason, "lock lost");
                }
                telemetry::lock_lost(self.key(), reason);
                if let Some(ObserverSlot(o)) = &self.observer {
                    o.on_lost(keys, reason);
                }
                self.lost.fire();
                if release {
                    spawn_release(
                        Arc::clone(&self.backend),
                        release_request(&self.renew.spec, &self.renew.owner),
                        self.release_bound(),
                    );
                }
            }
            _ => {}
        }
    }

    /// The machine's deadline or slot moved: wakes whoever waits on it (a refresh waiting for
    /// the slot) and the renewal task, if it watches this lock.
    pub(crate) fn moved(&self) {
        self.moved.notify_waiters();
        if self.watching.load(Ordering::Acquire)
            && let Some(me) = self.me.upgrade()
        {
            self.renewals.wake(&me);
        }
    }

    /// The first key (the metrics' label source).
    fn key(&self) -> &str {
        self.renew.spec.keys().first().map_or("", String::as_str)
    }

    /// The bound of every release of this lock ([`HeldLock::bound`], the core's
    /// `lock::release_bound`): read from the machine, not kept beside it (a process may hold
    /// thousands of locks).
    fn release_bound(&self) -> Duration {
        self.machine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bound()
    }

    /// The local deadline on tokio's clock.
    pub(crate) fn valid_until(&self) -> tokio::time::Instant {
        self.clock.to_tokio(self.with(|m, _| m.valid_until()))
    }
}

impl<B: LeaseBackend> Renewable for Shared<B> {
    type Backend = B;

    fn poll_renewal(&self) -> (Duration, Option<RenewOrder>, Option<lease_core::Instant>) {
        self.with(|m, now| {
            let window = m.coalesce_window();
            let order = m.poll_renew_within(now, window);
            m.handle_timeout(now);
            (window, order, m.poll_timeout())
        })
    }

    fn cancel(&self) {
        self.lost.fire();
    }

    fn schedule(&self) -> &AtomicU64 {
        &self.schedule
    }

    fn to_tokio(&self, at: lease_core::Instant) -> tokio::time::Instant {
        self.clock.to_tokio(at)
    }

    fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    fn renew_request(&self) -> &RenewRequest {
        &self.renew
    }

    fn handle_renew(&self, reply: Result<RenewOutcome, BackendError>) {
        self.with(|m, now| m.handle_renew(now, reply));
        // The renewal task reads the machine again when the batch comes back to it.
        self.moved.notify_waiters();
    }
}

/// A held lock. Dropping it without [`Lock::release`] releases it best-effort in the
/// background (on the current tokio runtime, if any); call `release` to learn the outcome.
#[derive(Debug)]
#[must_use = "dropping a Lock releases it at once: bind it (`let lock = ...`) for as long as the guarded work runs"]
pub struct Lock<B: LeaseBackend> {
    shared: Arc<Shared<B>>,
    metadata: Metadata,
    fence_token: Option<Token>,
    retry: RetryStrategy,
    /// The locker's lines, when this lock can be handed off to an obtain waiting in them.
    lines: Option<Arc<Lines<B>>>,
}

impl<B: LeaseBackend> Lock<B> {
    /// The lock `plan`'s obtain won; `(clock, now)`: the obtain's clock, and its reading as
    /// the obtain ended (the machine starts from it: no second reading).
    pub(crate) fn new(
        backend: Arc<B>,
        plan: ObtainPlan,
        obtained: Obtained,
        (clock, now): (Clock, lease_core::Instant),
        observer: Option<Arc<dyn LockObserver>>,
        renewals: Arc<Renewals<Shared<B>>>,
        lines: Option<Arc<Lines<B>>>,
    ) -> Self {
        let ttl = plan.request.ttl;
        let margin = backend.validity_margin(ttl);
        let machine = HeldLock::for_plan(&plan, obtained, margin, now);
        let auto_renew = plan.auto_renew.is_some();
        let span = tracing::info_span!(
            "lock",
            keys = ?plan.request.spec.keys(),
            fence_token = ?obtained.token
        );
        let shared = Arc::new_cyclic(|me| Shared {
            backend,
            renew: RenewRequest::new(plan.request.spec, plan.request.owner, ttl),
            clock,
            machine: Mutex::new(machine),
            moved: tokio::sync::Notify::new(),
            lost: LossSignal::default(),
            watching: AtomicBool::new(auto_renew),
            renewals,
            me: me.clone(),
            schedule: AtomicU64::new(0),
            span,
            observer: observer.map(ObserverSlot),
        });
        // Without auto-renewal, the deadline watch that fires the loss signal is started
        // lazily, on the first `lost()` call: a lock nobody watches costs nothing.
        if auto_renew && !shared.renewals.wake(&shared) {
            tracing::error!(parent: &shared.span, "no tokio runtime to renew the lock; it expires with its TTL");
        }
        if let Some(lines) = &lines {
            lines.hold(&shared);
        }
        Lock {
            shared,
            metadata: plan.request.metadata,
            fence_token: obtained.token,
            retry: plan.retry,
            lines,
        }
    }

    /// Reports the obtain (a `tracing` event in the lock's span, and the observer).
    pub(crate) fn obtained(&self) {
        let shared = &self.shared;
        let _span = shared.span.enter();
        tracing::debug!("lock obtained");
        if let Some(ObserverSlot(o)) = &shared.observer {
            o.on_obtained(shared.renew.spec.keys(), self.fence_token);
        }
    }

    /// The first key.
    pub fn key(&self) -> &str {
        self.shared
            .renew
            .spec
            .keys()
            .first()
            .map_or("", String::as_str)
    }

    /// The lock's spec, owner and backend (for the semaphore's permit fencer).
    pub(crate) fn parts(&self) -> (&LeaseSpec, &Owner, &Arc<B>) {
        let renew = &self.shared.renew;
        (&renew.spec, &renew.owner, &self.shared.backend)
    }

    /// Every key.
    pub fn keys(&self) -> &[String] {
        self.shared.renew.spec.keys()
    }

    /// The owner stored in the keys (the ownership token a release compares; not a fencing
    /// token: that is [`Lock::fence_token`]).
    pub fn owner(&self) -> &str {
        self.shared.renew.owner.as_str()
    }

    /// The fencing token minted at obtain, when a fence key was given.
    pub fn fence_token(&self) -> Option<Token> {
        self.fence_token
    }

    /// The metadata stored with the lock.
    pub fn metadata(&self) -> &str {
        self.metadata.as_str()
    }

    /// The TTL set at obtain (and by auto-renewal).
    pub fn ttl_setting(&self) -> Duration {
        self.shared.renew.ttl.get()
    }

    /// The local deadline: the send time of the last obtain/renewal/refresh the store
    /// answered, plus its TTL (minus the backend's drift margin). It never exceeds what the
    /// store was last told: a refresh to a shorter TTL shortens it, even when its outcome is
    /// unknown.
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.shared.valid_until()
    }

    /// Whether this handle still holds the lock as far as it knows locally: not released, not
    /// lost, and before the local deadline.
    pub fn held(&self) -> bool {
        self.shared.with(|m, now| m.is_held(now))
    }

    /// The loss signal: a token cancelled when the lock is no longer held — renewal failed for
    /// good, the local deadline passed, or the lock was released — whichever comes first. It
    /// belongs to this acquisition: a later obtain has its own.
    pub fn lost(&self) -> CancellationToken {
        let shared = &self.shared;
        if !shared.lost.fired()
            && !shared.watching.swap(true, Ordering::AcqRel)
            && !shared.renewals.wake(shared)
        {
            shared.watching.store(false, Ordering::Release);
        }
        shared.lost.token()
    }

    /// Why the lock is no longer held, once its machine ended it: renewal refused or "not
    /// ours", the local deadline passed, or [`LossReason::MaxHoldReached`] — the hold reached
    /// its cap ([`LockOptions::max_hold`](lease_core::lock::LockOptions::max_hold)), which is
    /// no loss to anyone. `None` while held, and after a release. Read it once
    /// [`lost`](Self::lost) fired to tell the cap from a lost lock.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.shared.with(|m, now| {
            m.handle_timeout(now);
            m.lost()
        })
    }

    /// Whether auto-renewal has stopped at the cap
    /// ([`LockOptions::max_hold`](lease_core::lock::LockOptions::max_hold)): the lock is
    /// still held, and ends at [`valid_until`](Self::valid_until) with
    /// [`LossReason::MaxHoldReached`]. A supervisor stops its work by then.
    pub fn capped(&self) -> bool {
        self.shared.with_untimed(|m| m.is_capped())
    }

    /// The remaining TTL at the backend: the minimum over the keys, zero when not held.
    pub async fn ttl(&self) -> Result<Duration, LockError> {
        let shared = &self.shared;
        let read = shared
            .backend
            .remaining(&shared.renew.spec, &shared.renew.owner);
        let bound = shared.release_bound();
        match tokio::time::timeout(bound, read).await {
            Ok(Ok(r)) => Ok(r.unwrap_or(Duration::ZERO)),
            // A read changes nothing: its failures are "unavailable" or "refused".
            Ok(Err(e)) => Err(LockError::from_read(e)),
            Err(_) => Err(LockError::from_read(BackendError::Timeout(bound))),
        }
    }

    /// Extends the lock to `ttl` from now. A lost lock is terminal ([`LockError::NotHeld`], at
    /// once, without a round trip) — and a lock past its local deadline is lost, even if the
    /// loss signal has not fired yet; a reply arriving after the deadline does not revive it.
    /// Transient errors are retried per the lock's retry strategy, while the deadline allows.
    ///
    /// A refresh and the auto-renewal never run at once, and the local deadline becomes what
    /// this refresh told the store (it may shorten it). If no attempt was answered and one may
    /// have been applied, the result is [`LockError::OutcomeUnknown`] and the deadline is not
    /// extended — for a shorter `ttl` it is shortened, as if the refresh had applied. A
    /// refresh that would keep the lock past its cap
    /// ([`LockOptions::max_hold`](lease_core::lock::LockOptions::max_hold)) is
    /// [`LockError::MaxHoldReached`], at once and without a round trip; the lock is unchanged.
    ///
    /// **Dropping the future** ends the refresh: the slot goes back to the auto-renewal, and
    /// a request in flight counts as unknown (the deadline is not extended by it).
    pub async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        let result = self.refresh_inner(ttl).await;
        if matches!(&result, Err(e) if !matches!(e, LockError::NotHeld | LockError::Invalid(_) | LockError::MaxHoldReached))
        {
            telemetry::lock_refresh_failed(self.key());
        }
        result
    }

    async fn refresh_inner(&self, ttl: Duration) -> Result<(), LockError> {
        let ttl = Ttl::new(ttl)?;
        let shared = &self.shared;
        let req = RenewRequest::new(
            Arc::clone(&shared.renew.spec),
            shared.renew.owner.clone(),
            ttl,
        );
        let margin = shared.backend.validity_margin(ttl);
        let mut refresh = Refresh::new(ttl, self.retry.jittered_sequence(jitter_seed()));
        loop {
            let order = match self.take_turn(ttl, margin).await {
                Ok(order) => order,
                Err(LockError::NotHeld) => {
                    shared.lost.fire();
                    return Err(LockError::NotHeld);
                }
                Err(e) => return Err(e),
            };
            // Whatever happens to this call from here on, the slot is given back.
            let mut slot = SlotGuard { shared, held: true };
            let sent = shared.backend.renew(&req);
            let reply = crate::bound::within(shared.clock.to_tokio(order.deadline), sent)
                .await
                .unwrap_or(Err(BackendError::Timeout(order.deadline - order.sent_at)));
            slot.held = false;
            let answer = shared.with(|m, now| m.handle_refresh(now, reply));
            shared.moved();
            let error = match answer {
                RefreshReply::Refreshed => return Ok(()),
                RefreshReply::Failed(e) => e,
                _ => {
                    shared.lost.fire();
                    return Err(LockError::NotHeld);
                }
            };
            let until = shared.with(|m, _| m.valid_until());
            let at = refresh.after_failure(shared.clock.now(), until, error)?;
            tokio::time::sleep_until(shared.clock.to_tokio(at)).await;
        }
    }

    /// Waits for the slot (a renewal may be in flight) and takes it for one refresh attempt;
    /// [`LockError::NotHeld`] when the lock is not held, [`LockError::MaxHoldReached`] when
    /// the refresh would pass the lock's cap (nothing sent).
    async fn take_turn(
        &self,
        ttl: Ttl,
        margin: Duration,
    ) -> Result<lease_core::lock::RefreshOrder, LockError> {
        let shared = &self.shared;
        loop {
            let moved = shared.moved.notified();
            tokio::pin!(moved);
            // Registered before the machine is asked: a renewal's reply in between wakes us.
            moved.as_mut().enable();
            match shared.with(|m, now| m.begin_refresh(now, ttl, margin)) {
                RefreshStart::Send(order) => {
                    // The deadline may have moved: whoever sleeps towards it re-reads it.
                    shared.moved();
                    return Ok(order);
                }
                RefreshStart::Busy => moved.await,
                RefreshStart::PastCap => return Err(LockError::MaxHoldReached),
                _ => return Err(LockError::NotHeld),
            }
        }
    }
}

impl<B: LeaseBackend + Fencing> Lock<B> {
    /// A fencer for writes under this lock's fencing token, against `<fence key>:applied`.
    /// `None` when the lock was obtained without a fence key.
    pub fn fencer(&self) -> Option<B::Fencer> {
        let mark = self.shared.renew.spec.mark_key()?;
        Some(self.shared.backend.fencer(&mark, self.fence_token?))
    }
}

impl<B: LeaseBackend> Drop for Lock<B> {
    fn drop(&mut self) {
        let shared = &self.shared;
        let clock = shared.clock;
        // Already released by `Lock::release` (the usual end), which fired the loss signal
        // itself, or its guard did when its future was dropped: nothing to do but leave the
        // lines, and no clock to read.
        let ending = shared.with_untimed(|m| {
            (!m.is_released()).then(|| m.release_on_drop(clock.now()).then(|| m.bound()))
        });
        if let Some(send) = ending {
            if let Some(bound) = send {
                spawn_release(
                    Arc::clone(&shared.backend),
                    release_request(&shared.renew.spec, &shared.renew.owner),
                    bound,
                );
            }
            shared.lost.fire();
        }
        // The first obtain waiting behind this lock (if it was not handed the key) goes to
        // the store.
        if let Some(lines) = &self.lines {
            lines.leave(shared);
        }
    }
}

/// Gives the slot back when a refresh attempt is abandoned (its future dropped) before its
/// reply was handled.
struct SlotGuard<'a, B: LeaseBackend> {
    shared: &'a Shared<B>,
    held: bool,
}

impl<B: LeaseBackend> Drop for SlotGuard<'_, B> {
    fn drop(&mut self) {
        if self.held {
            self.shared.with(|m, _| m.abandon_refresh());
            self.shared.moved();
        }
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use std::mem::size_of;

    use lease_core::lock::HeldLock;
    use lease_core::memory::MemoryBackend;

    /// A process may hold thousands of locks (issue 31's goal: at most 2 KiB of memory per
    /// held lock, everything counted): the per-lock state must not grow by accident. Raise a
    /// limit only with a reason, and update `docs/benchmarks.md`'s figures with it.
    #[test]
    fn a_held_lock_stays_small() {
        assert!(
            size_of::<HeldLock>() <= 264,
            "HeldLock: {} B",
            size_of::<HeldLock>()
        );
        let shared = size_of::<super::Shared<MemoryBackend>>();
        assert!(shared <= 480, "a lock's shared state: {shared} B");
        let handle = size_of::<super::Lock<MemoryBackend>>();
        assert!(handle <= 72, "a lock's handle: {handle} B");
    }
}
