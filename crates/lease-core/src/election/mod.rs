//! The election machine: contend, lead one term per token, step down, release.
//!
//! Sans-IO, with the contract of every machine here ([`crate::machine`]). The driver loops:
//!
//! 1. send every request [`Election::poll_request`] returns, each bounded by its `deadline`;
//! 2. feed each request's reply — or [`Reply::TimedOut`] at its deadline — to
//!    [`Election::handle_reply`]; **every** polled request gets exactly one reply;
//! 3. act on [`Election::poll_event`];
//! 4. sleep until [`Election::poll_timeout`], a reply, a release notice
//!    ([`Election::handle_notice`]; keep the watch contending while
//!    [`Election::wants_notices`]), or a command ([`Election::resign`],
//!    [`Election::work_returned`], [`Election::shutdown`]), then call
//!    [`Election::handle_timeout`].
//!
//! The rules (each is tested by property in `tests/election_props.rs`):
//!
//! - contend every acquire interval, shortened by up to 10 % of jitter (never lengthened), so
//!   contenders that start together spread out;
//! - an acquire that errs or times out backs off: acquire interval × 2^(errors−1), capped at the
//!   TTL, jittered the same way; any answer resets it; losing the race never backs off;
//! - one term per token: `Elected(token)`, then the held lease's rules (see [`crate::lease`]);
//! - a term ends on loss, deadline, [`Election::resign`], [`Election::shutdown`], or
//!   [`Election::work_returned`]; every ended term asks for exactly one release, and no acquire
//!   is sent while a release is pending (a late release must not delete our own next term) or
//!   a renewal is in flight (it would hold back the next term's first renewal);
//! - a release notice makes a follower's next acquire due at once (never a leader's, never
//!   right after its own resignation); one that arrives while an acquire is in flight makes
//!   the next acquire immediate if that one found the lease held (no lost wake-up);
//! - `Follower` is reported once per transition into the follower role, not per poll;
//! - every tolerated failure is reported as an `Error` event; a permanent one (an acquire or
//!   renewal refused with an error that retrying cannot fix) is reported as `Failed` and stops
//!   the election (release, then `Stopped`) instead of retrying or renewing in a loop;
//! - after [`Election::shutdown`] the machine releases what it may hold — including the lease
//!   an in-flight or timed-out acquire may have won — and then reports `Stopped`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseSpec, Owner, ReleaseRequest, RenewOutcome,
    RenewRequest,
};
use crate::config::ElectionConfig;
use crate::lease::{HeldLease, LeaseEvent, LeaseTiming, LossReason};
use crate::rng::SplitMix64;
use crate::time::Instant;
use crate::token::{Epoch, FenceState, StoreLoss, Token};

/// Jitter applied to acquire delays: up to this percentage shorter, never longer.
pub const ACQUIRE_JITTER_PERCENT: u32 = 10;

/// [`Election::coalesce_window`] is the renew interval divided by this.
const COALESCE_DIVISOR: u32 = 8;

pub use crate::machine::RequestId;
pub use wire::{Event, Op, Reply, Request, RequestKind, Role, StepDownReason};

mod term;
mod wire;

#[derive(Debug)]
struct Leading {
    token: Token,
    lease: HeldLease,
}

/// Where an election is in its life. Each state carries what only it has: a term only
/// while leading, "a follower was announced" only while contending or stopping.
// One per election, mostly `Leading` for as long as it leads: boxing the term would add an
// allocation per term and save nothing while leading (the lease's inline event slot made it
// cross clippy's 200-byte line).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum State {
    /// Contending. `follower`: the last acquire found the lease held by another (the role
    /// was announced as follower, and a release notice is worth acting on).
    Candidate { follower: bool },
    /// Leading a term.
    Leading(Leading),
    /// Shutting down, or stopped by a permanent refusal: no more acquires; releases still
    /// go out. `follower` as for [`State::Candidate`] (the role stays readable).
    Stopping { follower: bool },
    /// Everything released; no more requests.
    Stopped,
}

/// The election state machine of one instance. See the [module docs](self).
#[derive(Debug)]
pub struct Election {
    config: ElectionConfig,
    spec: Arc<LeaseSpec>,
    owner: Owner,
    rng: SplitMix64,
    next_id: u64,
    state: State,
    acquire_in_flight: Option<(RequestId, Instant)>,
    renew_in_flight: Option<(RequestId, Token, Instant)>,
    release_in_flight: Option<(RequestId, Option<Token>)>,
    release_queue: VecDeque<Option<Token>>,
    next_acquire: Instant,
    consecutive_errors: u32,
    /// New acquires are held back ([`Election::pause_contention`]): a driver's command,
    /// orthogonal to the state.
    contention_paused: bool,
    margin: Duration,
    highest_token: Option<Token>,
    /// The highest token seen at the store: granted to this instance, reported as a holder's,
    /// or given by [`Election::raise_floor`]. Every acquire asks the store to mint above it.
    highest_seen: Option<Token>,
    /// The store's fence epoch as last seen.
    epoch: Option<Epoch>,
    /// A loss was reported and the store has not caught up since.
    loss_reported: bool,
    /// An acquire got no answer (timed out, or an error of unknown effect) and no later answer
    /// settled it: the lease may be ours at the store.
    maybe_won: bool,
    /// A release notice arrived while an acquire was in flight.
    notice_pending: bool,
    events: VecDeque<Event>,
}

impl Election {
    /// A machine for `config`, with jitter drawn from `seed`, starting at `now`.
    ///
    /// The first acquire is due at once.
    pub fn new(config: ElectionConfig, seed: u64, now: Instant) -> Self {
        let spec = Arc::new(config.lease_spec());
        let owner = config.owner().clone();
        Election {
            config,
            spec,
            owner,
            rng: SplitMix64::new(seed),
            next_id: 0,
            state: State::Candidate { follower: false },
            acquire_in_flight: None,
            renew_in_flight: None,
            release_in_flight: None,
            release_queue: VecDeque::new(),
            next_acquire: now,
            consecutive_errors: 0,
            contention_paused: false,
            margin: Duration::ZERO,
            highest_token: None,
            highest_seen: None,
            epoch: None,
            loss_reported: false,
            maybe_won: false,
            notice_pending: false,
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// The lease keys.
    pub fn spec(&self) -> &Arc<LeaseSpec> {
        &self.spec
    }

    /// The owner value (instance id).
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The role at `now`. Never `Leader` at or after the lease's local deadline, even before
    /// [`Election::handle_timeout`] is called.
    pub fn role(&self, now: Instant) -> Role {
        match &self.state {
            State::Stopped => Role::Stopped,
            State::Leading(t) if t.lease.is_held(now) => Role::Leader(t.token),
            State::Candidate { follower: true } | State::Stopping { follower: true } => {
                Role::Follower
            }
            _ => Role::Candidate,
        }
    }

    /// The current term's token, if leader at `now`.
    pub fn token(&self, now: Instant) -> Option<Token> {
        match self.role(now) {
            Role::Leader(t) => Some(t),
            _ => None,
        }
    }

    /// The local deadline of the current term, if leading.
    pub fn valid_until(&self) -> Option<Instant> {
        self.term().map(|t| t.lease.valid_until())
    }

    /// Whether the machine has stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, State::Stopped)
    }

    /// The term being led, if any.
    fn term(&self) -> Option<&Leading> {
        match &self.state {
            State::Leading(t) => Some(t),
            _ => None,
        }
    }

    fn term_mut(&mut self) -> Option<&mut Leading> {
        match &mut self.state {
            State::Leading(t) => Some(t),
            _ => None,
        }
    }

    /// Shutting down or stopped: no more acquires.
    fn is_stopping(&self) -> bool {
        matches!(self.state, State::Stopping { .. } | State::Stopped)
    }

    /// The current backoff exponent (consecutive acquire errors).
    pub fn consecutive_errors(&self) -> u32 {
        self.consecutive_errors
    }

    fn timing(&self) -> LeaseTiming {
        LeaseTiming::new(self.config.ttl(), self.config.renew_interval())
            .with_operation_timeout(self.config.operation_timeout())
            .with_margin(self.margin)
    }

    fn next_request_id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// The delay before the next acquire after `errors` consecutive errors, before jitter:
    /// the acquire interval, doubled per error after the first, capped at the TTL.
    pub fn backoff_base(&self, errors: u32) -> Duration {
        let interval = self.config.acquire_interval();
        let ttl = self.config.ttl().get();
        crate::retry::doubled_capped(interval, ttl, errors.saturating_sub(1))
    }

    fn schedule_acquire(&mut self, now: Instant) {
        let base = self.backoff_base(self.consecutive_errors);
        let d = self.rng.jitter_down(base, ACQUIRE_JITTER_PERCENT);
        self.next_acquire = now + d;
    }

    /// The next request to send at `now`, if any. Call until it returns `None`.
    pub fn poll_request(&mut self, now: Instant) -> Option<Request> {
        self.poll_request_within(now, Duration::ZERO)
    }

    /// How early a driver that batches the renewals of many elections may send one, so that
    /// renewals falling due together share one round trip: an eighth of the renew interval
    /// (the window of auto-renewed locks, [`crate::lock::HeldLock::coalesce_window`]).
    pub fn coalesce_window(&self) -> Duration {
        self.config.renew_interval() / COALESCE_DIVISOR
    }

    /// Like [`Election::poll_request`], but a renewal due within `early` of `now` is asked for
    /// now (see [`HeldLease::poll_renew_within`]: the deadline a renewal grants is dated from
    /// its own send, so renewing early never weakens a rule). Acquires and releases are asked
    /// for exactly when [`Election::poll_request`] would.
    pub fn poll_request_within(&mut self, now: Instant, early: Duration) -> Option<Request> {
        self.handle_timeout(now);
        if self.is_stopped() {
            return None;
        }
        // Releases first: an acquire never overtakes a pending release.
        if self.release_in_flight.is_none()
            && let Some(term) = self.release_queue.pop_front()
        {
            let id = self.next_request_id();
            self.release_in_flight = Some((id, term));
            return Some(Request {
                id,
                kind: RequestKind::Release(
                    ReleaseRequest::new(Arc::clone(&self.spec), self.owner.clone())
                        .with_term_token(term),
                ),
                sent_at: now,
                deadline: now + self.config.release_timeout(),
            });
        }
        if self.renew_in_flight.is_none()
            && let State::Leading(term) = &mut self.state
            && let Some(order) = term.lease.poll_renew_within(now, early)
        {
            let token = term.token;
            let id = self.next_request_id();
            self.renew_in_flight = Some((id, token, order.sent_at));
            return Some(Request {
                id,
                kind: RequestKind::Renew(RenewRequest::new(
                    Arc::clone(&self.spec),
                    self.owner.clone(),
                    self.config.ttl(),
                )),
                sent_at: order.sent_at,
                deadline: order.deadline,
            });
        }
        if self.may_acquire() && now >= self.next_acquire {
            let id = self.next_request_id();
            self.acquire_in_flight = Some((id, now));
            return Some(Request {
                id,
                kind: RequestKind::Acquire(
                    AcquireRequest::new(
                        Arc::clone(&self.spec),
                        self.owner.clone(),
                        self.config.ttl(),
                    )
                    .with_floor(self.highest_seen),
                ),
                sent_at: now,
                deadline: now + self.config.acquire_timeout(),
            });
        }
        None
    }

    fn may_acquire(&self) -> bool {
        matches!(self.state, State::Candidate { .. })
            && !self.contention_paused
            && self.acquire_in_flight.is_none()
            // A renewal of an ended term still out would hold back the next term's first
            // renewal (one renewal in flight at most): wait for its reply or deadline.
            && self.renew_in_flight.is_none()
            && self.release_in_flight.is_none()
            && self.release_queue.is_empty()
    }

    /// Feeds the reply to request `id`. Replies to unknown or stale requests are ignored.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        self.handle_timeout(now);
        if self.acquire_in_flight.is_some_and(|(i, _)| i == id) {
            let sent_at = self.acquire_in_flight.take().map_or(now, |(_, s)| s);
            let result = match reply {
                Reply::Acquire(r) => Some(r),
                Reply::TimedOut => None,
                other => Some(Err(mismatch(&other))),
            };
            self.on_acquire(now, sent_at, result);
        } else if self.renew_in_flight.is_some_and(|(i, _, _)| i == id) {
            let (token, sent_at) = match self.renew_in_flight.take() {
                Some((_, t, s)) => (Some(t), s),
                None => (None, now),
            };
            let result = match reply {
                Reply::Renew(r) => r,
                Reply::TimedOut => Err(BackendError::Timeout(now - sent_at)),
                other => Err(mismatch(&other)),
            };
            self.on_renew(now, token, result);
        } else if self.release_in_flight.is_some_and(|(i, _)| i == id) {
            let token = self.release_in_flight.take().and_then(|(_, t)| t);
            let result = match reply {
                Reply::Release(r) => r,
                Reply::TimedOut => Err(BackendError::Timeout(self.config.release_timeout())),
                other => Err(mismatch(&other)),
            };
            match result {
                Ok(outcome) => self.events.push_back(Event::Released {
                    token,
                    outcome: Some(outcome),
                }),
                Err(error) => {
                    self.events.push_back(Event::Error {
                        op: Op::Release,
                        error,
                    });
                    self.events.push_back(Event::Released {
                        token,
                        outcome: None,
                    });
                }
            }
        }
        self.maybe_stop();
    }

    /// When to call [`Election::handle_timeout`] next; `None` when nothing is scheduled.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_stopped() {
            return None;
        }
        if let Some(term) = self.term() {
            return if self.renew_in_flight.is_some() {
                Some(term.lease.valid_until())
            } else {
                term.lease.poll_timeout()
            };
        }
        if self.may_acquire() {
            return Some(self.next_acquire);
        }
        None
    }

    /// Advances time to `now`: steps down at the lease's deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(term) = self.term_mut() {
            term.lease.handle_timeout(now);
        }
        self.drain_lease(now);
    }

    /// A release notice for this election's lease arrived (see [`crate::notify`]): a
    /// follower tries at once instead of at its next poll. Returns whether the next acquire
    /// moved.
    ///
    /// Only a follower acts on it (the last acquire found the lease held by another): not a
    /// leader, not an instance that just resigned (its own release gives the others the first
    /// chance), not while shutting down. A notice that arrives while an acquire is in flight is
    /// kept: if that acquire finds the lease held, the next one is sent at once (the release
    /// may have come after the store judged it).
    pub fn handle_notice(&mut self, now: Instant) -> bool {
        self.handle_timeout(now);
        let State::Candidate { follower } = self.state else {
            return false;
        };
        if self.acquire_in_flight.is_some() {
            self.notice_pending = true;
            return false;
        }
        if follower && self.next_acquire > now {
            self.next_acquire = now;
            return true;
        }
        false
    }

    /// Whether a release notice may be acted on ([`Election::handle_notice`]): a follower, or
    /// an acquire in flight (its reply may make this instance a follower that must not have
    /// missed the notice). Drivers keep their watch contending only while this holds, so that
    /// a notice this instance would ignore wakes another waiter of the same process instead.
    pub fn wants_notices(&self) -> bool {
        match self.state {
            State::Candidate { follower } => follower || self.acquire_in_flight.is_some(),
            _ => false,
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Ends the current term voluntarily and re-contends after one acquire interval. Returns
    /// whether there was a term to end.
    pub fn resign(&mut self, now: Instant) -> bool {
        self.handle_timeout(now);
        let had = self.term().is_some();
        self.end_term(now, StepDownReason::Resigned);
        had
    }

    /// The leader's work for term `token` returned: the term ends (a leader that wants to stay
    /// elected keeps its work running). Ignored for any other term.
    pub fn work_returned(&mut self, now: Instant, token: Token) -> bool {
        self.handle_timeout(now);
        if self.term().is_some_and(|t| t.token == token) {
            self.end_term(now, StepDownReason::WorkReturned);
            true
        } else {
            false
        }
    }

    /// Sets the validity margin the backend asks for ([`crate::LeaseBackend::validity_margin`]):
    /// every lease's local deadline is its send instant plus the TTL minus this margin.
    pub fn set_validity_margin(&mut self, margin: Duration) {
        self.margin = margin;
    }

    /// The highest token this instance has been granted.
    pub fn highest_token(&self) -> Option<Token> {
        self.highest_token
    }

    /// The highest token this instance has seen at the store (its grants, holders' tokens
    /// reported by refused acquires, [`Election::raise_floor`]): the floor of its acquires.
    pub fn highest_seen(&self) -> Option<Token> {
        self.highest_seen
    }

    /// Raises the floor of this instance's acquires to at least `floor`: the store will mint
    /// the next term's token above it, whatever its counter says. Feed it a durable floor,
    /// such as the highest token a fenced resource has accepted, so that a store that lost its
    /// counter cannot hand out a token the resource refuses forever.
    pub fn raise_floor(&mut self, floor: Token) {
        self.highest_seen = self.highest_seen.max(Some(floor));
    }

    /// The store's fence epoch as last seen, if the backend reports one.
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// Holds back (or allows again) new acquire requests, for example while the previous
    /// term's work is still winding down: a process never runs two terms' work at once.
    /// Renewals, releases and timeouts are unaffected.
    pub fn pause_contention(&mut self, paused: bool) {
        self.contention_paused = paused;
    }

    /// Stops: ends the term, releases everything this instance may hold, then `Stopped`.
    pub fn shutdown(&mut self, now: Instant) {
        self.handle_timeout(now);
        if self.is_stopping() {
            return;
        }
        self.end_term(now, StepDownReason::Shutdown);
        self.enter_stopping();
        self.maybe_stop();
    }
}

fn mismatch(reply: &Reply) -> BackendError {
    BackendError::Protocol(format!("reply of the wrong kind: {reply:?}"))
}
