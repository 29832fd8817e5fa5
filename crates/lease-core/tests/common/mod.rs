//! A reusable test harness that drives an [`Election`] the way the real driver does, and an
//! observer that checks the machine's rules on everything it does.
//!
//! - [`Elector`] wraps one election: it polls every request and event after each input,
//!   delivers replies and timeouts, applies requests to a [`MemoryBackend`] at chosen virtual
//!   times, and hands every step to its [`Observer`];
//! - [`Observer`] checks, step by step, the rules of `lease_core::election` (see
//!   [`Observer::on_request`], [`Observer::on_event`], [`Observer::check_state`]) and returns a
//!   violation as an `Err(String)` instead of panicking, so callers can add context (a seed, a
//!   trace) before failing.
//!
//! Used by `election_props.rs` (random interleavings chosen by proptest) and `simulation.rs`
//! (many electors over one backend with a seeded network).
#![allow(dead_code)] // Each test binary uses its own part of the harness.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use lease_core::backend::{AcquireOutcome, BackendError, ReleaseOutcome, RenewOutcome};
use lease_core::election::{Op, Reply, Request, RequestId, RequestKind};
use lease_core::memory::MemoryBackend;
use lease_core::{Election, ElectionConfig, Event, Instant, Role, StepDownReason, Token};

/// The number of proptest cases: `PROPTEST_CASES` when set, else `default`.
pub(crate) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Result of a check: `Err` carries the violated rule.
pub(crate) type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}
pub(crate) use ensure;

/// A reply computed by applying a request to a backend, kept until it is delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    /// Outcome of an acquire (`Err` holds the error text).
    Acquire(Result<AcquireOutcome, String>),
    /// Outcome of a renew.
    Renew(Result<RenewOutcome, String>),
    /// Outcome of a release.
    Release(Result<ReleaseOutcome, String>),
}

impl Ready {
    /// The reply to hand to the machine.
    pub(crate) fn to_reply(&self) -> Reply {
        let err = |e: &String| BackendError::Unavailable(e.clone().into());
        match self {
            Ready::Acquire(r) => Reply::Acquire(r.clone().map_err(|e| err(&e))),
            Ready::Renew(r) => Reply::Renew(r.clone().map_err(|e| err(&e))),
            Ready::Release(r) => Reply::Release(r.clone().map_err(|e| err(&e))),
        }
    }

    /// An error reply of the request's kind (the effect may or may not have happened).
    pub(crate) fn error_for(kind: &RequestKind, msg: &str) -> Ready {
        match kind.op() {
            Op::Acquire => Ready::Acquire(Err(msg.into())),
            Op::Renew => Ready::Renew(Err(msg.into())),
            _ => Ready::Release(Err(msg.into())),
        }
    }
}

/// Applies `req` to `backend` at the backend clock's current time.
pub(crate) fn apply(backend: &MemoryBackend, req: &Request) -> Ready {
    let s = |e: BackendError| e.to_string();
    match &req.kind {
        RequestKind::Acquire(a) => Ready::Acquire(backend.acquire_now(a).map_err(s)),
        RequestKind::Renew(r) => Ready::Renew(backend.renew_now(r).map_err(s)),
        RequestKind::Release(r) => Ready::Release(backend.release_now(r).map_err(s)),
        _ => unreachable!("no other request kinds exist"),
    }
}

/// What the driver hands to the machine for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The reply (or error) the backend produced.
    Reply(Ready),
    /// No reply by the deadline.
    TimedOut,
}

/// A request the driver has sent and not yet answered.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    /// The request.
    pub(crate) req: Request,
    /// Its outcome once applied to the backend (the reply is "ready").
    pub(crate) ready: Option<Ready>,
    /// Whether it was applied to the backend.
    pub(crate) applied: bool,
    /// Whether its reply is lost (the driver will report a timeout at the deadline).
    pub(crate) dropped: bool,
}

/// Per-term record kept by the observer.
#[derive(Clone, Debug)]
pub(crate) struct TermRecord {
    /// The term's token.
    pub(crate) token: Token,
    /// When `Elected` was observed.
    pub(crate) elected_at: Instant,
    /// Latest local deadline seen for it.
    pub(crate) valid_until: Instant,
    /// When and why it ended.
    pub(crate) stepped_down: Option<(Instant, StepDownReason)>,
    /// How many release requests named this token.
    pub(crate) releases_requested: u32,
    /// Whether a `Released` event named this token.
    pub(crate) released: bool,
    /// When the first renewal is due: one renew interval after the acquire's send, or at
    /// the election if its reply came later than that.
    pub(crate) first_renew_due: Instant,
    /// Whether a renewal was polled for it yet.
    pub(crate) renewed: bool,
}

/// Checks the election rules on everything one machine does.
#[derive(Debug)]
pub(crate) struct Observer {
    /// The machine's configuration.
    pub(crate) config: ElectionConfig,
    /// Requests polled and not yet answered.
    pub(crate) in_flight: BTreeMap<RequestId, (Op, Instant, Instant)>,
    /// Every term, in order.
    pub(crate) terms: Vec<TermRecord>,
    /// Releases the machine owes (ended terms, won-but-not-led acquisitions, unanswered
    /// acquires at shutdown), not yet requested.
    pub(crate) owed_releases: Vec<Option<Token>>,
    /// Releases requested and not yet reported as `Released`.
    pub(crate) releases_in_flight: BTreeMap<RequestId, Option<Token>>,
    /// Consecutive acquire errors as the rules count them (the backoff exponent).
    pub(crate) acquire_errors: u32,
    /// Send time of the latest acquire (for dating).
    pub(crate) last_acquire_sent: BTreeMap<RequestId, Instant>,
    /// Whether a `Follower` event was seen since the last `Elected` (or the start).
    pub(crate) follower_announced: bool,
    /// Whether shutdown was requested.
    pub(crate) shutting_down: bool,
    /// Whether `Stopped` was observed.
    pub(crate) stopped: bool,
    /// Tokens whose term was ended by `resign` (returned true): each must see `Released`.
    pub(crate) resigned: Vec<Token>,
    /// Counts, for reports.
    pub(crate) stats: Stats,
    /// In the current step: an acquire reply that granted a token.
    step_acquired: Option<(Token, Instant)>,
    /// In the current step: a renew reply "not ours" was delivered.
    step_not_held: bool,
    /// In the current step: a Held acquire reply was delivered.
    step_held: bool,
    /// In the current step: the token elected.
    step_elected: Option<Token>,
    /// Whether the driver may have skipped timers in this step (a pause).
    step_late: bool,
    /// A short trace of recent steps, for failure reports.
    pub(crate) trace: VecDeque<String>,
    /// Whether to keep the trace (formatting it costs; simulations replay a failing seed with
    /// tracing on).
    pub(crate) tracing: bool,
}

/// Counters of what a run exercised.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stats {
    /// Terms elected.
    pub(crate) terms: u64,
    /// Requests polled.
    pub(crate) requests: u64,
    /// Acquire replies checked against the backoff rule.
    pub(crate) backoff_checks: u64,
    /// Terms ended at their deadline.
    pub(crate) deadline_stepdowns: u64,
    /// Terms lost to "not ours".
    pub(crate) lost_stepdowns: u64,
    /// Timeouts delivered.
    pub(crate) timeouts: u64,
}

impl Observer {
    /// An observer for a machine with `config`.
    pub(crate) fn new(config: ElectionConfig) -> Self {
        Observer {
            config,
            in_flight: BTreeMap::new(),
            terms: Vec::new(),
            owed_releases: Vec::new(),
            releases_in_flight: BTreeMap::new(),
            acquire_errors: 0,
            last_acquire_sent: BTreeMap::new(),
            follower_announced: false,
            shutting_down: false,
            stopped: false,
            resigned: Vec::new(),
            stats: Stats::default(),
            step_acquired: None,
            step_not_held: false,
            step_held: false,
            step_elected: None,
            step_late: false,
            trace: VecDeque::new(),
            tracing: true,
        }
    }

    /// Adds a line to the trace (kept short), when tracing.
    pub(crate) fn note(&mut self, line: impl FnOnce() -> String) {
        if !self.tracing {
            return;
        }
        let line = line();
        if self.trace.len() >= 60 {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    /// The trace as text.
    pub(crate) fn trace_text(&self) -> String {
        let mut s = String::new();
        for l in &self.trace {
            let _ = writeln!(s, "    {l}");
        }
        s
    }

    /// The current term (elected and not ended).
    pub(crate) fn current(&self) -> Option<&TermRecord> {
        self.terms.last().filter(|t| t.stepped_down.is_none())
    }

    /// The backoff before the next acquire after `errors` consecutive errors, by the rule:
    /// acquire interval · 2^(errors−1), capped at the TTL (computed exactly, independently of
    /// the machine).
    pub(crate) fn expected_backoff(&self, errors: u32) -> Duration {
        let interval = self.config.acquire_interval().as_nanos();
        let ttl = self.config.ttl().get().as_nanos();
        let exp = errors.saturating_sub(1);
        let ns = if exp >= 100 {
            ttl
        } else {
            interval.saturating_mul(1u128 << exp).min(ttl)
        };
        Duration::from_nanos(ns as u64)
    }

    /// Starts a step (one input to the machine) at `now`; `late` when the driver was paused
    /// and may be processing timers after they were due.
    pub(crate) fn begin_step(&mut self, late: bool) {
        self.step_acquired = None;
        self.step_not_held = false;
        self.step_held = false;
        self.step_elected = None;
        self.step_late = late;
    }

    /// A request the machine asked for.
    pub(crate) fn on_request(&mut self, now: Instant, req: &Request) -> Check {
        self.stats.requests += 1;
        let op = req.kind.op();
        self.note(|| {
            format!(
                "{now:?} request {:?} {op:?} deadline {:?}",
                req.id, req.deadline
            )
        });
        ensure!(!self.stopped, "request {req:?} after Stopped");
        ensure!(
            req.sent_at == now,
            "request dated {:?}, polled at {now:?}",
            req.sent_at
        );
        ensure!(
            !self.in_flight.values().any(|(o, _, _)| *o == op),
            "a second {op:?} in flight: {:?}",
            self.in_flight
        );
        ensure!(
            !self.in_flight.contains_key(&req.id),
            "request id {:?} reused",
            req.id
        );
        match &req.kind {
            RequestKind::Acquire(a) => {
                ensure!(!self.shutting_down, "acquire after shutdown");
                ensure!(self.current().is_none(), "acquire while leading");
                ensure!(
                    !self.in_flight.values().any(|(o, _, _)| *o == Op::Release),
                    "acquire while a release is in flight"
                );
                ensure!(
                    self.owed_releases.is_empty(),
                    "acquire while releases are owed: {:?}",
                    self.owed_releases
                );
                ensure!(
                    req.deadline == now + self.config.acquire_timeout(),
                    "acquire deadline {:?}, expected now + {:?}",
                    req.deadline,
                    self.config.acquire_timeout()
                );
                ensure!(a.ttl == self.config.ttl(), "acquire with another ttl");
                ensure!(&a.owner == self.config.owner(), "acquire for another owner");
                self.last_acquire_sent.insert(req.id, now);
            }
            RequestKind::Renew(r) => {
                let Some(term) = self.current() else {
                    return Err(format!("renew at {now:?} outside a term"));
                };
                ensure!(now < term.valid_until, "renew sent at/after the deadline");
                // The remaining budget, and at most one renew interval.
                let mut dl = term.valid_until.min(now + self.config.renew_interval());
                if let Some(c) = self.config.operation_timeout() {
                    dl = dl.min(now + c);
                }
                ensure!(
                    req.deadline == dl,
                    "renew deadline {:?}, expected min(remaining budget, renew interval) {dl:?}",
                    req.deadline
                );
                ensure!(r.ttl == self.config.ttl(), "renew with another ttl");
                if let Some(term) = self.terms.last_mut()
                    && !term.renewed
                {
                    ensure!(
                        now >= term.first_renew_due,
                        "term {}: first renewal at {now:?}, before it was due at {:?}",
                        term.token,
                        term.first_renew_due
                    );
                    term.renewed = true;
                }
            }
            RequestKind::Release(r) => {
                ensure!(
                    req.deadline == now + self.config.release_timeout(),
                    "release deadline {:?}, expected now + {:?}",
                    req.deadline,
                    self.config.release_timeout()
                );
                let Some(pos) = self.owed_releases.iter().position(|t| *t == r.term_token) else {
                    return Err(format!(
                        "release of {:?} that nothing owes (owed: {:?})",
                        r.term_token, self.owed_releases
                    ));
                };
                self.owed_releases.remove(pos);
                if let Some(t) = r.term_token
                    && let Some(rec) = self.terms.iter_mut().find(|x| x.token == t)
                {
                    rec.releases_requested += 1;
                    ensure!(rec.stepped_down.is_some(), "release of a live term {t}");
                    ensure!(rec.releases_requested == 1, "term {t} released twice");
                }
                self.releases_in_flight.insert(req.id, r.term_token);
            }
            _ => return Err("unknown request kind".into()),
        }
        self.in_flight.insert(req.id, (op, now, req.deadline));
        Ok(())
    }

    /// A reply (or timeout) about to be handed to the machine at `now`.
    pub(crate) fn on_reply(&mut self, now: Instant, id: RequestId, d: &Delivery) -> Check {
        self.note(|| format!("{now:?} deliver {id:?} {d:?}"));
        let Some((op, _sent, deadline)) = self.in_flight.remove(&id) else {
            return Err(format!("reply to {id:?}, which is not in flight"));
        };
        if !self.step_late {
            ensure!(
                now <= deadline,
                "{op:?} reply at {now:?} after its deadline {deadline:?}"
            );
        }
        if matches!(d, Delivery::TimedOut) {
            self.stats.timeouts += 1;
            ensure!(
                now >= deadline,
                "timed out at {now:?} before its deadline {deadline:?}"
            );
        }
        let sent = self.last_acquire_sent.remove(&id);
        match (op, d) {
            (
                Op::Acquire,
                Delivery::Reply(Ready::Acquire(Ok(AcquireOutcome::Acquired { token, .. }))),
            ) => match token {
                Some(t) => {
                    self.acquire_errors = 0;
                    self.step_acquired = Some((*t, sent.unwrap_or(now)));
                }
                None => self.acquire_errors = self.acquire_errors.saturating_add(1),
            },
            (Op::Acquire, Delivery::Reply(Ready::Acquire(Ok(AcquireOutcome::Held { .. })))) => {
                self.acquire_errors = 0;
                self.step_held = true;
            }
            (Op::Acquire, Delivery::Reply(Ready::Acquire(Ok(_)))) => {
                return Err("unknown acquire outcome".into());
            }
            (Op::Acquire, Delivery::TimedOut) => {
                self.acquire_errors = self.acquire_errors.saturating_add(1);
                if self.shutting_down {
                    // The unanswered acquire may have won: the machine owes its release.
                    self.owed_releases.push(None);
                }
            }
            (Op::Acquire, _) => self.acquire_errors = self.acquire_errors.saturating_add(1),
            (Op::Renew, Delivery::Reply(Ready::Renew(Ok(RenewOutcome::NotHeld)))) => {
                self.step_not_held = true;
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the acquire backoff right after an acquire reply: the next acquire is due after
    /// the backoff for the errors so far, shortened by at most 10 % of jitter.
    pub(crate) fn check_backoff(&mut self, now: Instant, election: &Election) -> Check {
        let Some(next) = election.poll_timeout() else {
            return Ok(());
        };
        if election.valid_until().is_some() {
            return Ok(()); // Leading: the timeout is the lease's.
        }
        let base = self.expected_backoff(self.acquire_errors);
        ensure!(
            election.consecutive_errors() == self.acquire_errors,
            "machine counts {} consecutive acquire errors, the rules {}",
            election.consecutive_errors(),
            self.acquire_errors
        );
        ensure!(
            election.backoff_base(self.acquire_errors) == base,
            "backoff_base({}) = {:?}, expected {base:?}",
            self.acquire_errors,
            election.backoff_base(self.acquire_errors)
        );
        let d = next - now;
        ensure!(next >= now, "next acquire {next:?} before now {now:?}");
        ensure!(
            d <= base,
            "acquire delay {d:?} longer than its backoff {base:?}"
        );
        ensure!(
            d <= self.config.ttl().get(),
            "acquire delay {d:?} beyond the ttl"
        );
        ensure!(
            d.as_nanos() * 10 >= base.as_nanos() * 9,
            "acquire delay {d:?} jittered below 0.9 × {base:?}"
        );
        self.stats.backoff_checks += 1;
        Ok(())
    }

    /// An event the machine reported at `now`.
    pub(crate) fn on_event(&mut self, now: Instant, ev: &Event) -> Check {
        self.note(|| format!("{now:?} event {ev:?}"));
        ensure!(!self.stopped, "event {ev:?} after Stopped");
        match ev {
            Event::Elected { token, valid_until } => {
                ensure!(self.current().is_none(), "Elected({token}) while leading");
                ensure!(!self.shutting_down, "Elected after shutdown");
                if let Some(last) = self.terms.last() {
                    ensure!(
                        *token > last.token,
                        "token {token} after {} (not increasing)",
                        last.token
                    );
                }
                let Some((t, sent)) = self.step_acquired.take() else {
                    return Err(format!("Elected({token}) without an acquire reply"));
                };
                ensure!(t == *token, "Elected({token}) but the acquire granted {t}");
                ensure!(
                    *valid_until == sent + self.config.ttl().get(),
                    "term dated {valid_until:?}, expected the acquire's send {sent:?} + ttl"
                );
                ensure!(now < *valid_until, "Elected at/after its own deadline");
                self.terms.push(TermRecord {
                    token: *token,
                    elected_at: now,
                    valid_until: *valid_until,
                    stepped_down: None,
                    releases_requested: 0,
                    released: false,
                    first_renew_due: (sent + self.config.renew_interval()).max(now),
                    renewed: false,
                });
                self.follower_announced = false;
                self.step_elected = Some(*token);
                self.stats.terms += 1;
            }
            Event::SteppedDown { token, reason } => {
                let late = self.step_late;
                let not_held = self.step_not_held;
                let Some(term) = self.terms.last_mut().filter(|t| t.stepped_down.is_none()) else {
                    return Err(format!("SteppedDown({token}) outside a term"));
                };
                ensure!(
                    term.token == *token,
                    "SteppedDown({token}) for term {}",
                    term.token
                );
                match reason {
                    StepDownReason::DeadlineExpired => {
                        ensure!(
                            now >= term.valid_until,
                            "stepped down at {now:?} before the deadline {:?}",
                            term.valid_until
                        );
                        if !late {
                            ensure!(
                                now == term.valid_until,
                                "stepped down at {now:?}, not exactly at the deadline {:?}",
                                term.valid_until
                            );
                        }
                        self.stats.deadline_stepdowns += 1;
                    }
                    StepDownReason::Lost => {
                        ensure!(not_held, "Lost without a 'not ours' renew reply");
                        self.stats.lost_stepdowns += 1;
                    }
                    _ => {}
                }
                term.stepped_down = Some((now, *reason));
                self.owed_releases.push(Some(*token));
            }
            Event::Follower { .. } => {
                ensure!(
                    !self.follower_announced,
                    "Follower twice without an Elected between"
                );
                ensure!(self.step_held, "Follower without a 'held' acquire reply");
                self.follower_announced = true;
            }
            Event::Released { token, .. } => {
                let Some((&id, _)) = self.releases_in_flight.iter().find(|(_, t)| *t == token)
                else {
                    return Err(format!("Released({token:?}) without its request"));
                };
                self.releases_in_flight.remove(&id);
                if let Some(t) = token
                    && let Some(rec) = self.terms.iter_mut().find(|x| x.token == *t)
                {
                    rec.released = true;
                }
            }
            Event::Error { op, .. } => {
                ensure!(
                    matches!(op, Op::Acquire | Op::Renew | Op::Release),
                    "error of unknown op"
                );
            }
            Event::Stopped => {
                ensure!(self.shutting_down, "Stopped without shutdown");
                ensure!(self.current().is_none(), "Stopped while leading");
                ensure!(
                    self.owed_releases.is_empty(),
                    "Stopped with releases owed: {:?}",
                    self.owed_releases
                );
                ensure!(
                    !self
                        .in_flight
                        .values()
                        .any(|(o, _, _)| matches!(o, Op::Acquire | Op::Release)),
                    "Stopped with an acquire or release in flight"
                );
                self.stopped = true;
            }
            _ => return Err(format!("unknown event {ev:?}")),
        }
        Ok(())
    }

    /// After the events of a reply: an acquisition that won but was not led (shutting down,
    /// or the reply came after the lease lapsed) is owed a release.
    pub(crate) fn resolve_acquired(&mut self) {
        if let Some((t, _)) = self.step_acquired.take() {
            self.owed_releases.push(Some(t));
        }
    }

    /// Ends a step: a won acquisition that was not led must be given back.
    pub(crate) fn end_step(&mut self) -> Check {
        self.resolve_acquired();
        self.step_elected = None;
        Ok(())
    }

    /// Takes the current term's deadline from the machine (renewals move it; never backward).
    pub(crate) fn sync_deadline(&mut self, election: &Election) -> Check {
        if let Some(until) = election.valid_until()
            && let Some(rec) = self.terms.last_mut().filter(|t| t.stepped_down.is_none())
        {
            ensure!(until >= rec.valid_until, "deadline moved backward");
            rec.valid_until = until;
        }
        Ok(())
    }

    /// State invariants at `now`.
    pub(crate) fn check_state(&mut self, now: Instant, election: &Election) -> Check {
        let role = election.role(now);
        self.sync_deadline(election)?;
        if let Some(until) = election.valid_until() {
            ensure!(
                !matches!(election.role(until), Role::Leader(_)),
                "Leader at its own deadline {until:?}"
            );
        }
        match role {
            Role::Leader(t) => {
                let until = election.valid_until();
                ensure!(
                    until.is_some_and(|u| now < u),
                    "Leader({t}) at {now:?}, deadline {until:?}"
                );
                ensure!(
                    self.current().is_some_and(|c| c.token == t),
                    "Leader({t}) but the events say {:?}",
                    self.current().map(|c| c.token)
                );
                ensure!(
                    election.token(now) == Some(t),
                    "token() disagrees with role()"
                );
            }
            Role::Stopped => ensure!(self.stopped, "Stopped role before the Stopped event"),
            _ => ensure!(election.token(now).is_none(), "token() while not leader"),
        }
        if self.stopped {
            ensure!(election.is_stopped(), "Stopped event but the machine runs");
            ensure!(election.poll_timeout().is_none(), "a timeout after Stopped");
        }
        Ok(())
    }

    /// Final checks once the machine has stopped.
    pub(crate) fn check_final(&self) -> Check {
        ensure!(self.stopped, "never reached Stopped");
        for t in &self.terms {
            ensure!(
                t.stepped_down.is_some(),
                "term {} never stepped down",
                t.token
            );
            ensure!(
                t.releases_requested == 1,
                "term {} released {} times",
                t.token,
                t.releases_requested
            );
            ensure!(t.released, "term {}: no Released event", t.token);
        }
        for t in &self.resigned {
            ensure!(
                self.terms.iter().any(|r| r.token == *t && r.released),
                "resigned term {t} never reported Released"
            );
        }
        ensure!(
            self.owed_releases.is_empty(),
            "releases owed at the end: {:?}",
            self.owed_releases
        );
        Ok(())
    }
}

/// Commands a user (or the driver) gives the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// `resign`.
    Resign,
    /// `work_returned` for the current term (or a stale token when not leading).
    WorkReturned,
    /// `shutdown`.
    Shutdown,
    /// `pause_contention(true/false)`.
    PauseContention(bool),
}

/// One election driven like the real driver: after every input, poll all requests and events.
#[derive(Debug)]
pub(crate) struct Elector {
    /// The machine.
    pub(crate) election: Election,
    /// Its checker.
    pub(crate) obs: Observer,
    /// Requests sent and not yet answered, in send order.
    pub(crate) in_flight: Vec<InFlight>,
    /// Requests answered (by a timeout or an error) before the backend applied them: they may
    /// still be applied late.
    pub(crate) unapplied_answered: Vec<Request>,
    /// Requests polled in the latest step.
    pub(crate) new_requests: Vec<Request>,
    /// Events of the latest step.
    pub(crate) new_events: Vec<Event>,
}

impl Elector {
    /// A machine for `config` with jitter `seed`, started at `now` (its first acquire polled).
    pub(crate) fn new(config: ElectionConfig, seed: u64, now: Instant) -> Result<Self, String> {
        let mut e = Elector {
            election: Election::new(config.clone(), seed, now),
            obs: Observer::new(config),
            in_flight: Vec::new(),
            unapplied_answered: Vec::new(),
            new_requests: Vec::new(),
            new_events: Vec::new(),
        };
        e.obs.begin_step(false);
        e.settle(now)?;
        Ok(e)
    }

    /// Polls every request and event at `now` and checks the state.
    pub(crate) fn settle(&mut self, now: Instant) -> Check {
        self.new_requests.clear();
        self.new_events.clear();
        // The events of the input come first: they settle what the machine owes.
        while let Some(ev) = self.election.poll_event() {
            self.obs.on_event(now, &ev)?;
            self.new_events.push(ev);
        }
        self.obs.resolve_acquired();
        self.obs.sync_deadline(&self.election)?;
        loop {
            let mut progressed = false;
            while let Some(ev) = self.election.poll_event() {
                self.obs.on_event(now, &ev)?;
                self.new_events.push(ev);
                progressed = true;
            }
            while let Some(req) = self.election.poll_request(now) {
                self.obs.on_request(now, &req)?;
                self.in_flight.push(InFlight {
                    req: req.clone(),
                    ready: None,
                    applied: false,
                    dropped: false,
                });
                self.new_requests.push(req);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        self.obs.end_step()?;
        self.obs.check_state(now, &self.election)
    }

    /// Applies in-flight request `idx` to `backend` now; its reply becomes ready.
    pub(crate) fn apply(&mut self, idx: usize, backend: &MemoryBackend) {
        let f = &mut self.in_flight[idx];
        if !f.applied {
            f.applied = true;
            f.ready = Some(apply(backend, &f.req));
        }
    }

    /// Delivers `delivery` for request `id` at `now` (the request leaves the in-flight set).
    pub(crate) fn deliver(
        &mut self,
        now: Instant,
        id: RequestId,
        delivery: Delivery,
        late: bool,
    ) -> Check {
        let Some(pos) = self.in_flight.iter().position(|f| f.req.id == id) else {
            return Err(format!("deliver to unknown request {id:?}"));
        };
        let f = self.in_flight.remove(pos);
        if !f.applied {
            self.unapplied_answered.push(f.req.clone());
        }
        self.obs.begin_step(late);
        self.obs.on_reply(now, id, &delivery)?;
        let is_acquire = f.req.kind.op() == Op::Acquire;
        let reply = match &delivery {
            Delivery::Reply(r) => r.to_reply(),
            Delivery::TimedOut => Reply::TimedOut,
        };
        self.election.handle_reply(now, id, reply);
        if is_acquire && !self.obs.shutting_down {
            self.obs.check_backoff(now, &self.election)?;
        }
        self.settle(now)
    }

    /// Calls `handle_timeout(now)`; when `now` is the machine's own timeout, checks that the
    /// driver cannot spin (a request is polled, or the timeout moves forward).
    pub(crate) fn timeout(&mut self, now: Instant, late: bool) -> Check {
        let due = self.election.poll_timeout();
        self.obs.begin_step(late);
        self.obs
            .note(|| format!("{now:?} handle_timeout (due {due:?})"));
        self.election.handle_timeout(now);
        self.settle(now)?;
        if due.is_some_and(|t| t <= now) && self.new_requests.is_empty() {
            let next = self.election.poll_timeout();
            ensure!(
                next.is_none_or(|t| t > now),
                "spin: handle_timeout({now:?}) at its timeout {due:?} polled nothing and the next timeout is {next:?}"
            );
        }
        Ok(())
    }

    /// Gives a command at `now`.
    pub(crate) fn command(&mut self, now: Instant, cmd: Command) -> Check {
        self.obs.begin_step(false);
        self.obs.note(|| format!("{now:?} command {cmd:?}"));
        match cmd {
            Command::Resign => {
                let leading = self.election.token(now);
                let had = self.election.resign(now);
                if let Some(t) = leading {
                    ensure!(had, "resign while leading returned false");
                    self.obs.resigned.push(t);
                }
            }
            Command::WorkReturned => {
                let t = self.obs.current().map(|c| c.token).or(Token::new(1).ok());
                if let Some(t) = t {
                    let leading = self.election.token(now) == Some(t);
                    let ended = self.election.work_returned(now, t);
                    if leading {
                        ensure!(ended, "work_returned for the current term did not end it");
                    }
                }
            }
            Command::Shutdown => {
                self.obs.shutting_down = true;
                self.election.shutdown(now);
            }
            Command::PauseContention(p) => self.election.pause_contention(p),
        }
        self.settle(now)
    }

    /// The earliest deadline among in-flight requests without a ready reply... or with one: the
    /// driver times out whatever has not been delivered.
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        self.in_flight.iter().map(|f| f.req.deadline).min()
    }

    /// At `now`, answers every in-flight request whose deadline is at or before `now` (oldest
    /// deadline first): with its reply when one is ready and not dropped (a reply ready when the
    /// deadline fires counts as the reply), else with `TimedOut`. `late` when the driver was
    /// paused past those deadlines (it answers them at `now`).
    pub(crate) fn expire_due(&mut self, now: Instant, late: bool) -> Check {
        loop {
            let due = self
                .in_flight
                .iter()
                .filter(|f| f.req.deadline <= now)
                .min_by_key(|f| f.req.deadline)
                .map(|f| {
                    let d = match (&f.ready, f.dropped) {
                        (Some(r), false) => Delivery::Reply(r.clone()),
                        _ => Delivery::TimedOut,
                    };
                    (f.req.id, f.req.deadline, d)
                });
            let Some((id, deadline, d)) = due else {
                return Ok(());
            };
            let at = if late { now } else { deadline };
            self.deliver(at, id, d, late)?;
        }
    }
}
