//! The lease-holding machine, shared by leader election and auto-renewing locks.
//!
//! Once acquired, a lease is *held*: it renews at once, then every renew interval; it tolerates
//! failed renewals until the local deadline (the send time of the last successful acquire or
//! renew, plus the TTL); it steps down exactly at that deadline; a renewal that answers "not
//! ours" is loss at once.
//!
//! The lease is dated from the instant each request was **sent**: the server's TTL starts
//! before the client hears back, so dating from the reply would overestimate the lease.

use std::collections::VecDeque;
use std::time::Duration;

use crate::backend::{BackendError, RenewOutcome};
use crate::config::Ttl;
use crate::time::{Instant, nanos};
use crate::token::Token;

/// The timing of a held lease. Built with [`LeaseTiming::new`] (the struct is
/// `#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseTiming {
    /// The TTL set by each acquire and renew.
    pub ttl: Ttl,
    /// The interval between renewals.
    pub renew_interval: Duration,
    /// An extra cap on each renewal round trip.
    pub operation_timeout: Option<Duration>,
    /// Subtracted from every validity: the backend's allowance for clock-rate drift between
    /// this process and the store (zero for one Redis; Redlock's `ceil(ttl × drift) + 2 ms`).
    pub margin: Duration,
}

impl LeaseTiming {
    /// `ttl` renewed every `renew_interval`, with no operation timeout and no margin.
    pub fn new(ttl: Ttl, renew_interval: Duration) -> LeaseTiming {
        LeaseTiming {
            ttl,
            renew_interval,
            operation_timeout: None,
            margin: Duration::ZERO,
        }
    }

    /// With an extra cap on each renewal round trip.
    pub fn with_operation_timeout(mut self, timeout: Option<Duration>) -> LeaseTiming {
        self.operation_timeout = timeout;
        self
    }

    /// With a clock-drift margin subtracted from every validity.
    pub fn with_margin(mut self, margin: Duration) -> LeaseTiming {
        self.margin = margin;
        self
    }

    /// The validity of a lease granted by a request sent at `sent_at`: `sent_at + ttl − margin`.
    pub fn valid_until(&self, sent_at: Instant) -> Instant {
        sent_at + self.ttl.get().saturating_sub(self.margin)
    }
}

/// A [`LeaseTiming`] as the machines keep it: 32 bytes instead of 64 (a lock keeps two
/// machines, and a process may hold thousands). Every value round-trips exactly, except an
/// operation timeout past `u64::MAX` nanoseconds (about 584 years), which caps nothing and is
/// kept as none.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// The renew interval, in nanoseconds.
    renew_interval: u64,
    /// The operation timeout in nanoseconds; `u64::MAX` for none.
    operation_timeout: u64,
    /// The margin, in nanoseconds (saturating).
    margin: u64,
    /// The TTL in milliseconds ([`MAX_TTL`](crate::config::MAX_TTL) fits in 32 bits).
    ttl_ms: u32,
}

impl From<LeaseTiming> for Timing {
    fn from(t: LeaseTiming) -> Timing {
        Timing {
            renew_interval: nanos(t.renew_interval),
            operation_timeout: t.operation_timeout.map_or(u64::MAX, nanos),
            margin: nanos(t.margin),
            ttl_ms: u32::try_from(t.ttl.as_millis()).unwrap_or(u32::MAX),
        }
    }
}

impl Timing {
    /// The TTL set by each acquire and renew.
    pub(crate) fn ttl(&self) -> Ttl {
        Ttl::from_valid_millis(self.ttl_ms)
    }

    /// The interval between renewals.
    pub(crate) fn renew_interval(&self) -> Duration {
        Duration::from_nanos(self.renew_interval)
    }

    /// The extra cap on each renewal round trip.
    pub(crate) fn operation_timeout(&self) -> Option<Duration> {
        (self.operation_timeout != u64::MAX).then(|| Duration::from_nanos(self.operation_timeout))
    }

    /// [`LeaseTiming::valid_until`].
    pub(crate) fn valid_until(&self, sent_at: Instant) -> Instant {
        sent_at
            + self
                .ttl()
                .get()
                .saturating_sub(Duration::from_nanos(self.margin))
    }
}

/// Why a held lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal answered that the lease is no longer ours.
    NotOurs,
    /// The local deadline passed without a successful renewal.
    DeadlineExpired,
    /// A renewal was refused with a permanent error (e.g. `NOPERM`, `WRONGTYPE`): no renewal
    /// can succeed, so the lease is given up at once instead of renewing in a loop until the
    /// deadline. The error itself is reported as [`LeaseEvent::RenewFailed`] just before.
    Refused,
    /// Not a loss to anyone: the hold reached the cap its holder set
    /// ([`LockOptions::max_hold`](crate::lock::LockOptions::max_hold)). Auto-renewal stopped
    /// at the last renewal whose expiry at the store (`sent + ttl`) fits within
    /// `obtained + max_hold`, and the lock ended at its local deadline (never after the cap),
    /// released when its token was generated for it. Only locks report it; a
    /// [`HeldLease`] on its own never does.
    MaxHoldReached,
}

/// What a held lease reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// A renewal succeeded; the lease is valid until `valid_until`.
    Renewed {
        /// The new local deadline.
        valid_until: Instant,
    },
    /// A renewal failed and was tolerated (the deadline has not passed).
    RenewFailed(BackendError),
    /// The lease is lost.
    Lost(LossReason),
}

/// A renewal the machine asks the caller to send now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewOrder {
    /// When it is sent (the `now` it was polled at).
    pub sent_at: Instant,
    /// When to give up waiting for its reply: the local deadline (the remaining budget),
    /// capped by the operation timeout.
    pub deadline: Instant,
}

/// A machine's events, oldest first. The oldest is kept inline and later ones, while it is
/// still there, in a queue allocated only then: a driver polls after every step, and a step
/// mostly makes one event (a renewal's `Renewed`), so a machine held for hours allocates
/// nothing for its events (a `VecDeque` would keep its first buffer for the machine's life:
/// four events' worth per machine, and a lock holds two machines). The queue sits behind a
/// `Box`, so an empty one costs the machine a pointer, not a `VecDeque`'s 32 bytes.
#[derive(Debug)]
pub(crate) struct Events<T> {
    first: Option<T>,
    #[expect(
        clippy::box_collection,
        reason = "an empty queue costs 8 bytes boxed, 32 inline; it is almost never made"
    )]
    rest: Option<Box<VecDeque<T>>>,
}

impl<T> Events<T> {
    /// No events.
    pub(crate) const fn new() -> Events<T> {
        Events {
            first: None,
            rest: None,
        }
    }

    /// Queues `event` after every event queued so far.
    pub(crate) fn push_back(&mut self, event: T) {
        // `first`, when set, is older than everything in `rest`: it is only set while `rest`
        // is empty.
        let rest_empty = self.rest.as_ref().is_none_or(|r| r.is_empty());
        if self.first.is_none() && rest_empty {
            self.first = Some(event);
        } else {
            self.rest.get_or_insert_default().push_back(event);
        }
    }

    /// The oldest event.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        self.first
            .take()
            .or_else(|| self.rest.as_mut().and_then(|r| r.pop_front()))
    }
}

/// [`HeldLease`]'s "no renewal in flight": no renewal is ever sent at the end of time.
const NONE_IN_FLIGHT: Instant = Instant::MAX;

/// A lease that has been acquired and is kept alive by renewals.
#[derive(Debug)]
pub struct HeldLease {
    timing: Timing,
    token: Option<Token>,
    valid_until: Instant,
    next_renew: Instant,
    /// The send instant of the renewal in flight; [`NONE_IN_FLIGHT`] for none (8 bytes where
    /// an `Option` takes 16: a process may hold thousands of leases).
    in_flight: Instant,
    lost: Option<LossReason>,
    ended: bool,
    events: Events<LeaseEvent>,
}

impl HeldLease {
    /// A lease acquired by a request sent at `sent_at`; polled first at `now`.
    ///
    /// The first renewal is due at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, Ttl};
    /// use lease_core::lease::{HeldLease, LeaseTiming};
    /// let timing = LeaseTiming::new(Ttl::new(Duration::from_secs(3))?, Duration::from_secs(1));
    /// let t0 = Instant::ZERO;
    /// let now = t0 + Duration::from_millis(20);
    /// let mut lease = HeldLease::new(timing, None, t0, now);
    /// assert_eq!(lease.valid_until(), t0 + Duration::from_secs(3), "dated from the send");
    /// assert!(lease.poll_renew(now).is_some(), "renews at once");
    /// assert!(lease.poll_renew(now).is_none(), "one renewal in flight at most");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn new(timing: LeaseTiming, token: Option<Token>, sent_at: Instant, now: Instant) -> Self {
        let mut lease = HeldLease {
            timing: timing.into(),
            token,
            valid_until: timing.valid_until(sent_at),
            next_renew: now,
            in_flight: NONE_IN_FLIGHT,
            lost: None,
            ended: false,
            events: Events::new(),
        };
        lease.handle_timeout(now);
        lease
    }

    /// Like [`HeldLease::new`], but the first renewal is due one renew interval after the
    /// acquiring request was sent (or at `now` if that is already past), not at once: the
    /// acquisition itself set the TTL, so an earlier renewal is a wasted round trip. Locks and
    /// elections use this.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, Ttl};
    /// use lease_core::lease::{HeldLease, LeaseTiming};
    /// let timing = LeaseTiming::new(Ttl::new(Duration::from_secs(3))?, Duration::from_secs(1));
    /// let t0 = Instant::ZERO;
    /// let now = t0 + Duration::from_millis(20);
    /// let mut lease = HeldLease::renewed_when_due(timing, None, t0, now);
    /// assert!(lease.poll_renew(now).is_none(), "no renewal before one is due");
    /// let due = t0 + Duration::from_secs(1);
    /// assert_eq!(lease.poll_timeout(), Some(due));
    /// assert!(lease.poll_renew(due).is_some(), "due one interval after the send");
    /// # Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn renewed_when_due(
        timing: LeaseTiming,
        token: Option<Token>,
        sent_at: Instant,
        now: Instant,
    ) -> Self {
        let mut lease = HeldLease::new(timing, token, sent_at, now);
        if lease.in_flight == NONE_IN_FLIGHT && lease.lost.is_none() {
            lease.next_renew = (sent_at + timing.renew_interval).max(now);
            lease.handle_timeout(now);
        }
        lease
    }

    /// The token of this lease, if fenced.
    pub fn token(&self) -> Option<Token> {
        self.token
    }

    /// The local deadline: after it, the lease must be considered lost.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether the lease is held at `now` (not lost, and before the deadline).
    pub fn is_held(&self, now: Instant) -> bool {
        self.lost.is_none() && !self.ended && now < self.valid_until
    }

    /// Why the lease was lost, once it is.
    pub fn lost(&self) -> Option<LossReason> {
        self.lost
    }

    /// Whether a renewal is in flight.
    pub fn renew_in_flight(&self) -> bool {
        self.in_flight != NONE_IN_FLIGHT
    }

    /// The next renewal to send, if one is due at `now` and none is in flight.
    pub fn poll_renew(&mut self, now: Instant) -> Option<RenewOrder> {
        self.poll_renew_within(now, Duration::ZERO)
    }

    /// Like [`HeldLease::poll_renew`], but a renewal due within `early` of `now` is sent now:
    /// a driver that batches renewals lets the ones falling due together share one round trip.
    ///
    /// Renewing early never weakens the rules: the deadline a renewal grants is dated from its
    /// own send, and the next one is due one renew interval after it. A lease renewed early
    /// stays in step with the batch it joined, so in steady state each lease is still renewed
    /// once per interval.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::{Instant, RenewOutcome, Ttl};
    /// use lease_core::lease::{HeldLease, LeaseTiming};
    /// let ms = Duration::from_millis;
    /// let timing = LeaseTiming::new(Ttl::new(ms(3000))?, ms(1000));
    /// let mut lease = HeldLease::new(timing, None, Instant::ZERO, Instant::ZERO);
    /// let first = lease.poll_renew(Instant::ZERO).expect("due at once");
    /// lease.handle_renew(Instant::ZERO + ms(1), Ok(RenewOutcome::Renewed));
    /// // The next one is due at 1000 ms; at 900 ms it is not due, but within a 125 ms window.
    /// assert!(lease.poll_renew(Instant::ZERO + ms(900)).is_none());
    /// let early = lease.poll_renew_within(Instant::ZERO + ms(900), ms(125)).expect("joins the batch");
    /// assert_eq!(early.sent_at, Instant::ZERO + ms(900));
    /// # let _ = first; Ok::<(), lease_core::ConfigError>(())
    /// ```
    pub fn poll_renew_within(&mut self, now: Instant, early: Duration) -> Option<RenewOrder> {
        self.handle_timeout(now);
        let due = now.checked_add(early).unwrap_or(now) >= self.next_renew;
        if self.lost.is_some() || self.ended || self.in_flight != NONE_IN_FLIGHT || !due {
            return None;
        }
        self.in_flight = now;
        // Bounded by the remaining budget, and by one renew interval: a renewal whose reply is
        // lost must not hold the single in-flight slot until the deadline (one dropped reply
        // would then end the lease); the next tick sends a fresh one.
        let mut deadline = self.valid_until.min(now + self.timing.renew_interval());
        if let Some(cap) = self.timing.operation_timeout() {
            deadline = deadline.min(now + cap);
        }
        Some(RenewOrder {
            sent_at: now,
            deadline,
        })
    }

    /// Feeds the reply (or error, or timeout as [`BackendError::Timeout`]) to the renewal in
    /// flight. A reply with nothing in flight is ignored; a reply at or after the deadline finds
    /// the lease already lost.
    pub fn handle_renew(&mut self, now: Instant, reply: Result<RenewOutcome, BackendError>) {
        let sent_at = std::mem::replace(&mut self.in_flight, NONE_IN_FLIGHT);
        if sent_at == NONE_IN_FLIGHT {
            return;
        }
        // A reply at or after the deadline is too late: the lease has lapsed locally, and no
        // reply may carry it past a deadline that has already passed.
        self.handle_timeout(now);
        if self.lost.is_some() || self.ended {
            return;
        }
        match reply {
            Ok(RenewOutcome::Renewed) => {
                let until = self.timing.valid_until(sent_at);
                if until > self.valid_until {
                    self.valid_until = until;
                }
                self.next_renew = (sent_at + self.timing.renew_interval()).max(now);
                if now < self.valid_until {
                    self.events.push_back(LeaseEvent::Renewed {
                        valid_until: self.valid_until,
                    });
                }
            }
            Ok(RenewOutcome::NotHeld) => self.lose(LossReason::NotOurs),
            Err(e) if !e.is_transient() => {
                self.events.push_back(LeaseEvent::RenewFailed(e));
                self.lose(LossReason::Refused);
            }
            Err(e) => {
                self.next_renew = (sent_at + self.timing.renew_interval()).max(now);
                self.events.push_back(LeaseEvent::RenewFailed(e));
            }
        }
        self.handle_timeout(now);
    }

    /// When the machine next needs [`HeldLease::handle_timeout`] (the deadline, or the next
    /// renewal when none is in flight); `None` once lost.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.lost.is_some() || self.ended {
            return None;
        }
        if self.in_flight != NONE_IN_FLIGHT {
            Some(self.valid_until)
        } else {
            Some(self.valid_until.min(self.next_renew))
        }
    }

    /// Advances time: at or after the deadline the lease is lost.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.lost.is_none() && !self.ended && now >= self.valid_until {
            self.lose(LossReason::DeadlineExpired);
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<LeaseEvent> {
        self.events.pop_front()
    }

    /// Sets the local deadline to exactly `valid_until`, shorter or longer: the store was told
    /// a new expiry by a request outside this machine (an explicit refresh of a lock), or may
    /// have been (a refresh with a shorter TTL whose outcome is unknown: pass the earlier of
    /// the two). The local deadline never exceeds what the store was last told.
    pub fn set_valid_until(&mut self, now: Instant, valid_until: Instant) {
        if self.lost.is_some() || self.ended {
            return;
        }
        self.valid_until = valid_until;
        self.handle_timeout(now);
    }

    /// Ends the lease locally (resign, release): no more renewals, no loss event.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether the lease was ended locally with [`HeldLease::end`].
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn lose(&mut self, reason: LossReason) {
        self.lost = Some(reason);
        self.events.push_back(LeaseEvent::Lost(reason));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Events, LeaseTiming, Timing};
    use crate::config::{MAX_TTL, Ttl};
    use crate::time::Instant;

    #[test]
    fn the_kept_timing_gives_back_what_it_was_given() {
        let ms = Duration::from_millis;
        for ttl in [ms(1), ms(2_000), MAX_TTL] {
            let ttl = Ttl::new(ttl).expect("a valid TTL");
            for timeout in [None, Some(Duration::ZERO), Some(Duration::new(3, 7))] {
                let given = LeaseTiming::new(ttl, Duration::new(1, 1))
                    .with_operation_timeout(timeout)
                    .with_margin(Duration::from_micros(2_500));
                let kept = Timing::from(given);
                assert_eq!(kept.ttl(), given.ttl);
                assert_eq!(kept.renew_interval(), given.renew_interval);
                assert_eq!(kept.operation_timeout(), given.operation_timeout);
                let t = Instant::ZERO + ms(7);
                assert_eq!(kept.valid_until(t), given.valid_until(t));
            }
        }
        // A cap past 584 years caps nothing, as none does.
        let far = LeaseTiming::new(Ttl::new(ms(10)).expect("a valid TTL"), ms(5))
            .with_operation_timeout(Some(Duration::MAX));
        assert_eq!(Timing::from(far).operation_timeout(), None);
        assert_eq!(std::mem::size_of::<Timing>(), 32);
    }

    #[test]
    fn events_come_out_oldest_first_whichever_slot_holds_them() {
        let mut events = Events::new();
        assert_eq!(events.pop_front(), None::<u32>);
        events.push_back(1);
        assert_eq!(events.pop_front(), Some(1));
        events.push_back(2);
        events.push_back(3);
        events.push_back(4);
        assert_eq!(events.pop_front(), Some(2));
        // The inline slot is free but older events wait in the queue: a new one goes after
        // them.
        events.push_back(5);
        assert_eq!(events.pop_front(), Some(3));
        assert_eq!(events.pop_front(), Some(4));
        events.push_back(6);
        assert_eq!(events.pop_front(), Some(5));
        assert_eq!(events.pop_front(), Some(6));
        assert_eq!(events.pop_front(), None);
        events.push_back(7);
        assert_eq!(events.pop_front(), Some(7));
        assert_eq!(events.pop_front(), None);
    }
}
