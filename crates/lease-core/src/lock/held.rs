//! [`HeldLock`]: the machine of one held lock (held → refreshing → released or lost), and
//! [`Refresh`]: the retries of one explicit refresh.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome,
};
use crate::config::Ttl;
use crate::lease::{Events, HeldLease, LeaseEvent, LeaseTiming, LossReason, RenewOrder, Timing};
use crate::lock::error::LockError;
use crate::lock::obtain::Obtained;
use crate::lock::options::ObtainPlan;
use crate::retry::RetrySequence;
use crate::time::Instant;
use crate::token::Token;

/// [`HeldLock::coalesce_window`] is the renew interval divided by this.
const COALESCE_DIVISOR: u32 = 8;

/// What a held lock reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum LockEvent {
    /// An auto-renewal succeeded; the lock is valid until `valid_until`.
    Renewed {
        /// The new local deadline.
        valid_until: Instant,
    },
    /// An auto-renewal failed. Transient failures are tolerated until the deadline; a
    /// permanent one is followed by [`LockEvent::Lost`] with [`LossReason::Refused`].
    RenewFailed(BackendError),
    /// The lock is lost.
    Lost {
        /// Why.
        reason: LossReason,
        /// Whether to send one best-effort release with the lock's (generated) token: a
        /// renewal sent before the deadline may still land and extend a key nobody holds;
        /// at the cap ([`LossReason::MaxHoldReached`]), so that a waiter gets the lock at
        /// once rather than when its key lapses.
        release: bool,
    },
}

/// The TTL-changing request in flight: one at a time.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Renew { sent_at: Instant },
    Refresh { told: Instant },
}

/// An explicit refresh attempt to send now: a renewal with the refresh's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshOrder {
    /// When it is sent.
    pub sent_at: Instant,
    /// When to stop waiting for its reply (then feed [`BackendError::Timeout`]).
    pub deadline: Instant,
    /// The local deadline the store is told if it applies: `sent_at + ttl − margin`.
    pub told: Instant,
}

/// The answer of [`HeldLock::begin_refresh`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefreshStart {
    /// Send this attempt now; the slot is the refresh's until its reply is handled.
    Send(RefreshOrder),
    /// A renewal is in flight: wait until its reply was handled, then ask again.
    Busy,
    /// The refresh would tell the store an expiry past the lock's cap
    /// ([`LockOptions::max_hold`](crate::lock::LockOptions::max_hold)): refused before any
    /// round trip, nothing changed (the driver answers [`LockError::MaxHoldReached`]).
    PastCap,
    /// The lock is not held (lost, released, or past its deadline): no round trip.
    NotHeld,
}

/// What a refresh attempt's reply meant.
#[derive(Debug)]
#[non_exhaustive]
pub enum RefreshReply {
    /// Applied: the local deadline is what this refresh told the store.
    Refreshed,
    /// The lock is not held (not ours any more, or the reply came after the deadline).
    NotHeld,
    /// The attempt failed: ask [`Refresh::after_failure`] what next.
    Failed(BackendError),
}

/// One held lock.
///
/// The local deadline (`sent + ttl − margin` of the last obtain, renewal or refresh the store
/// answered) never exceeds what the store was last told; past it the lock is lost. See the
/// [module documentation](crate::lock) for the driver's contract.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Instant, RenewOutcome, Ttl};
/// use lease_core::lease::LeaseTiming;
/// use lease_core::lock::{HeldLock, RefreshReply, RefreshStart};
/// let s = Duration::from_secs;
/// let timing = LeaseTiming::new(Ttl::new(s(10))?, s(10));
/// let mut lock = HeldLock::new(timing, false, None, true, Instant::ZERO, Instant::ZERO);
/// assert_eq!(lock.valid_until(), Instant::ZERO + s(10));
/// // A refresh to a shorter TTL shortens the deadline before it is sent.
/// let RefreshStart::Send(order) = lock.begin_refresh(Instant::ZERO + s(1), Ttl::new(s(2))?, Duration::ZERO) else { panic!() };
/// assert_eq!(lock.valid_until(), Instant::ZERO + s(3));
/// assert_eq!(lock.begin_refresh(Instant::ZERO + s(1), Ttl::new(s(2))?, Duration::ZERO), RefreshStart::Busy);
/// assert!(matches!(lock.handle_refresh(Instant::ZERO + s(1), Ok(RenewOutcome::Renewed)), RefreshReply::Refreshed));
/// assert!(!lock.is_held(Instant::ZERO + s(3)), "never held at the deadline");
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct HeldLock {
    timing: Timing,
    token: Option<Token>,
    valid_until: Instant,
    /// The auto-renewal machine, when auto-renewing.
    renewal: Option<HeldLease>,
    slot: Option<Slot>,
    lost: Option<LossReason>,
    /// The cap of the hold ([`LockOptions::max_hold`](crate::lock::LockOptions::max_hold)):
    /// no request tells the store an expiry (`sent + ttl`) after it; [`Instant::MAX`] for
    /// none (8 bytes where an `Option` takes 16).
    cap: Instant,
    released: bool,
    private_token: bool,
    events: Events<LockEvent>,
}

impl HeldLock {
    /// A lock won by a request sent at `sent_at`, held from `now`. With `auto_renew`, renewals
    /// are due every `timing.renew_interval`, the first one interval after `sent_at` (no
    /// renewal before one is due). `private_token`: the ownership
    /// token was generated for this lock alone (see [`crate::lock::ObtainPlan::private_token`]).
    pub fn new(
        timing: LeaseTiming,
        auto_renew: bool,
        token: Option<Token>,
        private_token: bool,
        sent_at: Instant,
        now: Instant,
    ) -> Self {
        HeldLock {
            timing: timing.into(),
            token,
            valid_until: timing.valid_until(sent_at),
            renewal: auto_renew.then(|| HeldLease::renewed_when_due(timing, token, sent_at, now)),
            slot: None,
            lost: None,
            cap: Instant::MAX,
            released: false,
            private_token,
            events: Events::new(),
        }
    }

    /// With a cap on the hold: no renewal or refresh tells the store an expiry
    /// (`sent + ttl`) after `cap`. Auto-renewal stops at the last renewal that fits; the lock
    /// then ends at its local deadline (never after `cap`) with
    /// [`LossReason::MaxHoldReached`], and a lock with a generated token is released then
    /// (friendlier to waiters than letting the key lapse). See
    /// [`LockOptions::max_hold`](crate::lock::LockOptions::max_hold).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, LossReason, RenewOutcome, Ttl};
    /// use lease_core::lease::LeaseTiming;
    /// use lease_core::lock::{HeldLock, LockEvent};
    /// let ms = Duration::from_millis;
    /// let timing = LeaseTiming::new(Ttl::new(ms(300))?, ms(100));
    /// let t0 = Instant::ZERO;
    /// let mut lock = HeldLock::new(timing, true, None, true, t0, t0).with_cap(Some(t0 + ms(450)));
    /// // At 100 ms a renewal fits (100 + 300 <= 450); at 200 ms it would not.
    /// assert!(lock.poll_renew(t0 + ms(100)).is_some());
    /// lock.handle_renew(t0 + ms(101), Ok(RenewOutcome::Renewed));
    /// assert!(lock.poll_renew(t0 + ms(200)).is_none(), "renewal stopped at the cap");
    /// assert_eq!(lock.poll_timeout(), Some(t0 + ms(400)));
    /// lock.handle_timeout(t0 + ms(400));
    /// assert_eq!(lock.lost(), Some(LossReason::MaxHoldReached));
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn with_cap(mut self, cap: Option<Instant>) -> Self {
        self.cap = cap.unwrap_or(Instant::MAX);
        self
    }

    /// The cap of the hold, if any: the lock never holds, and the store is never told to keep
    /// it, after this instant.
    pub fn cap(&self) -> Option<Instant> {
        (self.cap != Instant::MAX).then_some(self.cap)
    }

    /// Whether auto-renewal stopped at the cap
    /// ([`LockOptions::max_hold`](crate::lock::LockOptions::max_hold)) and the lock is still
    /// to end at its deadline: the renewal machine was ended, and not by a release or a loss
    /// (the only other ways to end it).
    pub fn is_capped(&self) -> bool {
        self.lost.is_none()
            && !self.released
            && self.renewal.as_ref().is_some_and(HeldLease::is_ended)
    }

    /// Whether an expiry of `sent_at + ttl` at the store would pass the cap.
    fn past_cap(&self, sent_at: Instant, ttl: Ttl) -> bool {
        self.cap != Instant::MAX
            && sent_at
                .checked_add(ttl.get())
                .is_none_or(|end| end > self.cap)
    }

    /// The auto-renewal machine while it still renews (not capped, not ended).
    fn renewing(&mut self) -> Option<&mut HeldLease> {
        self.renewal.as_mut().filter(|l| !l.is_ended())
    }

    /// The lock `plan`'s obtain won (`obtained`), held from `now`; `margin` is the backend's
    /// drift allowance for the plan's TTL.
    pub fn for_plan(plan: &ObtainPlan, obtained: Obtained, margin: Duration, now: Instant) -> Self {
        let ttl = plan.request.ttl;
        let timing = LeaseTiming::new(ttl, plan.auto_renew.map_or(ttl.get(), |ar| ar.interval))
            .with_operation_timeout(plan.operation_timeout)
            .with_margin(margin);
        HeldLock::new(
            timing,
            plan.auto_renew.is_some(),
            obtained.token,
            plan.private_token,
            obtained.sent_at,
            now,
        )
        .with_cap(plan.max_hold.and_then(|d| obtained.sent_at.checked_add(d)))
    }

    /// The fencing token minted at obtain, if fenced.
    pub fn token(&self) -> Option<Token> {
        self.token
    }

    /// The TTL set at obtain (and by auto-renewal).
    pub fn ttl(&self) -> Ttl {
        self.timing.ttl()
    }

    /// The local deadline.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether the lock is held at `now`: not released, not lost, before the deadline.
    pub fn is_held(&self, now: Instant) -> bool {
        self.lost.is_none() && !self.released && now < self.valid_until
    }

    /// Why the lock was lost, once it is.
    pub fn lost(&self) -> Option<LossReason> {
        self.lost
    }

    /// Whether the lock was released (or dropped).
    pub fn is_released(&self) -> bool {
        self.released
    }

    /// Whether the ownership token was generated for this lock alone.
    pub fn private_token(&self) -> bool {
        self.private_token
    }

    /// The bound of a round trip that does not change the TTL (release, reading the TTL):
    /// [`release_bound`] of this lock's TTL and operation timeout.
    pub fn bound(&self) -> Duration {
        release_bound(self.timing.ttl(), self.timing.operation_timeout())
    }

    /// The next auto-renewal to send, if one is due at `now` (never while a refresh or another
    /// renewal is in flight).
    pub fn poll_renew(&mut self, now: Instant) -> Option<RenewOrder> {
        self.poll_renew_within(now, Duration::ZERO)
    }

    /// How early a batching driver may send an auto-renewal so that renewals falling due
    /// together share one round trip: an eighth of the renew interval
    /// (see [`HeldLease::poll_renew_within`]). Batches fire at least this far apart, so a
    /// process holding many locks sends at most about nine batches per renew interval,
    /// whatever the number of locks.
    pub fn coalesce_window(&self) -> Duration {
        self.timing.renew_interval() / COALESCE_DIVISOR
    }

    /// Like [`HeldLock::poll_renew`], but a renewal due within `early` of `now` is sent now
    /// (see [`HeldLease::poll_renew_within`]; the deadline rules are those of every renewal).
    pub fn poll_renew_within(&mut self, now: Instant, early: Duration) -> Option<RenewOrder> {
        self.handle_timeout(now);
        if self.slot.is_some() || !self.is_held(now) {
            return None;
        }
        let ttl = self.timing.ttl();
        let cap = self.cap;
        let lease = self.renewing()?;
        let mut order = lease.poll_renew_within(now, early)?;
        let past = cap != Instant::MAX
            && order
                .sent_at
                .checked_add(ttl.get())
                .is_none_or(|end| end > cap);
        if past {
            // This renewal would keep the lock at the store past the cap: auto-renewal stops
            // here, and the lock ends at its deadline (at or before the cap).
            lease.end();
            self.handle_timeout(now);
            return None;
        }
        self.slot = Some(Slot::Renew {
            sent_at: order.sent_at,
        });
        // Like a refresh: from the moment it is sent the store may apply it, so after a refresh
        // to a longer TTL the deadline drops to what this renewal tells.
        let told = self.timing.valid_until(order.sent_at);
        if told < self.valid_until {
            self.set_deadline(now, told);
            order.deadline = order.deadline.min(told);
        }
        Some(order)
    }

    /// Feeds the reply of the renewal in flight (a timeout as [`BackendError::Timeout`]).
    ///
    /// Renewed: the deadline becomes exactly what the store was told now (an earlier refresh
    /// may have set a later one that this renewal replaced). Unknown: the store may have been
    /// told that, so a later deadline shrinks to it.
    pub fn handle_renew(&mut self, now: Instant, reply: Result<RenewOutcome, BackendError>) {
        let Some(Slot::Renew { sent_at }) = self.slot else {
            return;
        };
        self.slot = None;
        let Some(lease) = self.renewal.as_mut() else {
            return;
        };
        let renewed = matches!(reply, Ok(RenewOutcome::Renewed));
        let unknown = matches!(&reply, Err(e) if e.is_outcome_unknown());
        let told = self.timing.valid_until(sent_at);
        lease.handle_renew(now, reply);
        if lease.lost().is_none() && (renewed || (unknown && told < lease.valid_until())) {
            lease.set_valid_until(now, told);
            self.valid_until = lease.valid_until();
        }
        self.collect();
    }

    /// Takes the slot for an explicit refresh attempt to `ttl` at `now`; `margin` is the
    /// backend's drift allowance for `ttl`.
    ///
    /// From the moment it is sent the store may apply it, so the deadline never stays later
    /// than what it tells (`now + ttl − margin`), even if the attempt is abandoned or gets no
    /// answer. Each attempt is bounded by the remaining validity (at least 1 ms), capped by
    /// the operation timeout.
    pub fn begin_refresh(&mut self, now: Instant, ttl: Ttl, margin: Duration) -> RefreshStart {
        if self.slot.is_some() {
            return RefreshStart::Busy;
        }
        // Past the deadline the lock has lapsed, even if nobody noticed yet (a stalled
        // thread): it is never extended, only obtained again.
        self.handle_timeout(now);
        if !self.is_held(now) {
            return RefreshStart::NotHeld;
        }
        if self.past_cap(now, ttl) {
            return RefreshStart::PastCap;
        }
        let told = now + ttl.get().saturating_sub(margin);
        if told < self.valid_until {
            self.set_deadline(now, told);
        }
        let mut bound = (self.valid_until - now).max(crate::config::MIN_INTERVAL);
        if let Some(cap) = self.timing.operation_timeout() {
            bound = bound.min(cap);
        }
        self.slot = Some(Slot::Refresh { told });
        RefreshStart::Send(RefreshOrder {
            sent_at: now,
            deadline: now + bound,
            told,
        })
    }

    /// Feeds the reply of the refresh attempt in flight (a timeout as
    /// [`BackendError::Timeout`]). A reply at or after the deadline is too late: no reply
    /// revives a lapsed lock.
    pub fn handle_refresh(
        &mut self,
        now: Instant,
        reply: Result<RenewOutcome, BackendError>,
    ) -> RefreshReply {
        let Some(Slot::Refresh { told }) = self.slot else {
            return RefreshReply::NotHeld;
        };
        self.slot = None;
        match reply {
            Ok(RenewOutcome::Renewed) => {
                self.handle_timeout(now);
                if !self.is_held(now) {
                    return RefreshReply::NotHeld;
                }
                // An explicit refresh sets the deadline (it may shorten the TTL).
                self.set_deadline(now, told);
                RefreshReply::Refreshed
            }
            Ok(_) => {
                self.lose(LossReason::NotOurs);
                RefreshReply::NotHeld
            }
            Err(e) => RefreshReply::Failed(e),
        }
    }

    /// The refresh attempt in flight was abandoned (the caller gave up waiting): the slot is
    /// free again. Its outcome is unknown; the deadline already allows for it.
    pub fn abandon_refresh(&mut self) {
        if matches!(self.slot, Some(Slot::Refresh { .. })) {
            self.slot = None;
        }
    }

    /// When the machine next needs [`HeldLock::handle_timeout`]; `None` once lost or
    /// released. While a refresh holds the slot, only the deadline: the renewal that is due
    /// waits for the refresh's reply.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.lost.is_some() || self.released {
            return None;
        }
        match (&self.renewal, self.slot) {
            (Some(lease), None) if !lease.is_ended() => lease.poll_timeout(),
            _ => Some(self.valid_until),
        }
    }

    /// Advances time: at or after the deadline the lock is lost.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(lease) = self.renewing() {
            lease.handle_timeout(now);
            self.collect();
        } else if self.lost.is_none() && !self.released && now >= self.valid_until {
            self.lose(if self.is_capped() {
                LossReason::MaxHoldReached
            } else {
                LossReason::DeadlineExpired
            });
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<LockEvent> {
        self.events.pop_front()
    }

    /// Ends the lock for an explicit release: no more renewals; the driver sends the release
    /// (bounded by [`HeldLock::bound`]) and maps its reply with [`release_result`].
    pub fn release(&mut self) {
        self.released = true;
        self.slot = None;
        if let Some(lease) = self.renewal.as_mut() {
            lease.end();
        }
    }

    /// Ends the lock because its handle was dropped; whether to release in the background.
    /// Compare-and-delete is safe whether or not the lock is still ours (it deletes only our
    /// own value), so with a generated token even a lost lock is released: a late renewal
    /// queued before the loss may have extended its key.
    pub fn release_on_drop(&mut self, now: Instant) -> bool {
        if self.released {
            return false;
        }
        let send = self.private_token || self.is_held(now);
        self.release();
        send
    }

    /// Moves the local deadline to exactly `until` (the store was told so, or may have been).
    fn set_deadline(&mut self, now: Instant, until: Instant) {
        self.valid_until = until;
        if let Some(lease) = self.renewing() {
            lease.set_valid_until(now, until);
            self.collect();
        } else {
            self.handle_timeout(now);
        }
    }

    /// Takes the renewal machine's events.
    fn collect(&mut self) {
        let Some(lease) = self.renewal.as_mut() else {
            return;
        };
        let mut lost = None;
        while let Some(event) = lease.poll_event() {
            match event {
                LeaseEvent::Renewed { valid_until } => {
                    self.events.push_back(LockEvent::Renewed { valid_until });
                }
                LeaseEvent::RenewFailed(e) => self.events.push_back(LockEvent::RenewFailed(e)),
                LeaseEvent::Lost(reason) => lost = Some(reason),
            }
        }
        if let Some(reason) = lost {
            self.lose(reason);
        }
    }

    fn lose(&mut self, reason: LossReason) {
        if self.lost.is_some() || self.released {
            return;
        }
        self.lost = Some(reason);
        if let Some(lease) = self.renewal.as_mut() {
            lease.end();
        }
        // After a permanent refusal the release would be refused the same way; after "not
        // ours" there is nothing of ours to delete.
        // At the cap the lock is released for the waiters, when the token is ours alone.
        let release = match reason {
            LossReason::DeadlineExpired => self.renewal.is_some() && self.private_token,
            LossReason::MaxHoldReached => self.private_token,
            _ => false,
        };
        self.events.push_back(LockEvent::Lost { reason, release });
    }
}

/// The one bound of every round trip of a lock that does not change its TTL — an explicit
/// release, every background release (on drop, after a loss, after an abandoned obtain) and
/// a read of the TTL: the caller's operation timeout, else one TTL, and never more than one
/// TTL (a release answered later than that is moot: the key has expired).
///
/// ```
/// use std::time::Duration;
/// use lease_core::Ttl;
/// use lease_core::lock::release_bound;
/// let ttl = Ttl::new(Duration::from_secs(2))?;
/// assert_eq!(release_bound(ttl, None), Duration::from_secs(2));
/// assert_eq!(release_bound(ttl, Some(Duration::from_millis(300))), Duration::from_millis(300));
/// assert_eq!(release_bound(ttl, Some(Duration::from_secs(5))), Duration::from_secs(2));
/// # Ok::<(), lease_core::ConfigError>(())
/// ```
pub fn release_bound(ttl: Ttl, operation_timeout: Option<Duration>) -> Duration {
    operation_timeout.map_or(ttl.get(), |t| t.min(ttl.get()))
}

/// A compare-and-delete of `owner`'s value on every key of `spec` (not term-scoped): what a
/// lock's release, and every cleanup, sends.
pub fn release_request(spec: &Arc<LeaseSpec>, owner: &Owner) -> ReleaseRequest {
    ReleaseRequest::new(Arc::clone(spec), owner.clone())
}

/// The result of an explicit release: released, not ours any more, or the failure (a
/// timeout as [`BackendError::Timeout`]: the lock may still be held until its TTL).
pub fn release_result(reply: Result<ReleaseOutcome, BackendError>) -> Result<(), LockError> {
    match reply.map_err(LockError::from_backend)? {
        ReleaseOutcome::Released => Ok(()),
        _ => Err(LockError::NotHeld),
    }
}

/// One explicit refresh call: its retries and its truthful verdict. Owned by the caller; each
/// attempt goes through [`HeldLock::begin_refresh`] and [`HeldLock::handle_refresh`].
#[derive(Debug)]
pub struct Refresh {
    ttl: Ttl,
    sequence: RetrySequence,
    unknown: bool,
}

impl Refresh {
    /// A refresh to `ttl`, retrying transient failures with `sequence`.
    pub fn new(ttl: Ttl, sequence: RetrySequence) -> Self {
        Refresh {
            ttl,
            sequence,
            unknown: false,
        }
    }

    /// The TTL to set.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// After attempt failed with `error` at `now`: when to try again (strictly before the
    /// lock's deadline `valid_until`), or the final error. Permanent errors end it at once; if
    /// any attempt may have applied, the final error is [`LockError::OutcomeUnknown`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{BackendError, Instant, RetryStrategy, Ttl};
    /// use lease_core::lock::{LockError, Refresh};
    /// let ms = Duration::from_millis;
    /// let mut r = Refresh::new(Ttl::new(ms(500))?, RetryStrategy::linear(ms(10))?.sequence());
    /// let deadline = Instant::ZERO + ms(100);
    /// let again = r.after_failure(Instant::ZERO, deadline, BackendError::Timeout(ms(5)));
    /// assert_eq!(again.ok(), Some(Instant::ZERO + ms(10)));
    /// let end = r.after_failure(Instant::ZERO + ms(95), deadline, BackendError::Unavailable("down".into()));
    /// assert!(end.unwrap_err().is_outcome_unknown(), "the first attempt may have applied");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn after_failure(
        &mut self,
        now: Instant,
        valid_until: Instant,
        error: BackendError,
    ) -> Result<Instant, LockError> {
        self.unknown |= error.is_outcome_unknown();
        if !error.is_transient() {
            return Err(if self.unknown {
                // Permanent, but an earlier attempt may have applied.
                LockError::OutcomeUnknown(error)
            } else {
                LockError::from_backend(error)
            });
        }
        match self.sequence.next_delay() {
            Some(d) if now.checked_add(d).is_some_and(|at| at < valid_until) => Ok(now + d),
            _ if self.unknown => Err(if error.is_outcome_unknown() {
                LockError::OutcomeUnknown(error)
            } else {
                LockError::OutcomeUnknown(BackendError::OutcomeUnknown(
                    format!("an earlier attempt got no answer ({error})").into(),
                ))
            }),
            _ => Err(LockError::from_backend(error)),
        }
    }
}
