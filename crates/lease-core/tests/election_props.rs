//! Properties of the election machine (`lease_core::election`) over random interleavings.
//!
//! proptest chooses a configuration and a sequence of actions: time passing (the driver wakes
//! at every timer on the way), requests applied to an in-memory backend at chosen instants,
//! replies delivered promptly, late (up to the deadline), as errors, or dropped (the driver
//! reports `TimedOut` at the deadline), requests applied after the driver gave up on them, a
//! rival instance taking and releasing the lease, the lease key evicted, the driver pausing
//! (it processes overdue timers late, as after a GC pause), and the commands `resign`,
//! `work_returned`, `pause_contention` and `shutdown`. Every run ends with a shutdown while
//! replies keep being delivered.
//!
//! After every step the harness's [`common::Observer`] checks:
//!
//! - never `Role::Leader` at or after the local deadline (`valid_until`), and `role`, `token`
//!   and the events agree;
//! - at most one request of each kind in flight; request deadlines are the rules' bounds
//!   (acquire `min(acquire interval, TTL − renew)`, renew the remaining budget, release one
//!   renew interval, each capped by the operation timeout);
//! - terms are dated from the acquire's send; tokens of successive terms strictly increase;
//! - no term's first renewal is sent before one renew interval after its acquire's send;
//! - each term (`Elected`) is followed by exactly one `SteppedDown` and exactly one release
//!   request for its token (and a `Released` event); a won acquisition that is not led is
//!   released too; no release is requested that nothing owes;
//! - no acquire is sent while a release is owed or in flight;
//! - after an acquire reply the next acquire is due within `[0.9·b, b]`, where `b` is the
//!   acquire interval doubled per consecutive error after the first, capped at the TTL
//!   (reset by any answer);
//! - `Follower` is reported once per transition (never twice without an `Elected` between);
//! - a step-down for the deadline happens exactly at the deadline (when the driver is not
//!   paused); "not ours" ends the term at once;
//! - `poll_timeout` never makes a driver spin: after `handle_timeout` at the timeout, either a
//!   request is polled or the timeout moves forward;
//! - after `shutdown`, the machine reaches `Stopped` with everything released; a resigned
//!   term always reports `Released`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Command, Delivery, Elector, Ready, ensure};
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{
    AcquireRequest, ElectionConfig, Instant, LeaseSpec, Owner, ReleaseRequest, RenewRequest, Ttl,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Action {
    /// The driver runs for this fraction (‰) of the TTL, waking at every timer.
    Advance(u64),
    /// The driver runs to its next timer.
    Tick,
    /// The backend applies in-flight request `i` now (its reply becomes ready).
    Apply(usize),
    /// Request `i`'s reply arrives now (if ready).
    Deliver(usize),
    /// Request `i` is applied and answered now (a prompt round trip).
    Prompt(usize),
    /// Request `i` fails now with an error; `applied`: the backend applied it first.
    Fail { i: usize, applied: bool },
    /// Request `i`'s reply is lost (the driver times it out at its deadline); `applied`: the
    /// backend applied it.
    Drop { i: usize, applied: bool },
    /// A request the driver already gave up on is applied now (a late delivery on the wire).
    LateApply(usize),
    /// Another instance acts on the lease.
    Rival(RivalOp),
    /// The lease key is evicted.
    Evict,
    /// A command.
    Cmd(Command),
    /// The driver is paused for this fraction (‰) of the TTL, then catches up late.
    Pause(u64),
}

#[derive(Clone, Copy, Debug)]
enum RivalOp {
    Acquire,
    Renew,
    Release,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (0u64..600).prop_map(Action::Advance),
        8 => Just(Action::Tick),
        4 => any::<usize>().prop_map(Action::Apply),
        4 => any::<usize>().prop_map(Action::Deliver),
        14 => any::<usize>().prop_map(Action::Prompt),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(i, applied)| Action::Fail { i, applied }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(i, applied)| Action::Drop { i, applied }),
        1 => any::<usize>().prop_map(Action::LateApply),
        2 => Just(Action::Rival(RivalOp::Acquire)),
        1 => Just(Action::Rival(RivalOp::Renew)),
        2 => Just(Action::Rival(RivalOp::Release)),
        1 => Just(Action::Evict),
        1 => Just(Action::Cmd(Command::Resign)),
        1 => Just(Action::Cmd(Command::WorkReturned)),
        1 => any::<bool>().prop_map(|p| Action::Cmd(Command::PauseContention(p))),
        1 => (0u64..2500).prop_map(Action::Pause),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    ttl_ms: u64,
    renew: Option<Duration>,
    acquire: Option<Duration>,
    op_timeout: Option<Duration>,
    seed: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (100u64..3000).prop_flat_map(|ttl_ms| {
        let ttl_ns = ttl_ms * 1_000_000;
        (
            Just(ttl_ms),
            // Intervals of at least 1 ms (shorter ones are refused: `config_props`), with
            // sub-millisecond parts.
            proptest::option::of(prop_oneof![
                (1u64..=ttl_ms / 2).prop_map(Duration::from_millis),
                (1_000_000u64..=ttl_ns / 2).prop_map(Duration::from_nanos),
            ]),
            proptest::option::of(prop_oneof![
                (1u64..ttl_ms).prop_map(Duration::from_millis),
                (1_000_000u64..ttl_ns).prop_map(Duration::from_nanos),
                (1_000_000u64..1_001_000).prop_map(Duration::from_nanos),
            ]),
            proptest::option::of((1u64..ttl_ms).prop_map(Duration::from_millis)),
            any::<u64>(),
        )
            .prop_map(|(ttl_ms, renew, acquire, op_timeout, seed)| Setup {
                ttl_ms,
                renew,
                acquire,
                op_timeout,
                seed,
            })
    })
}

fn config(s: &Setup) -> ElectionConfig {
    let mut b = ElectionConfig::builder("{jobs}", "me").ttl(Duration::from_millis(s.ttl_ms));
    if let Some(d) = s.renew {
        b = b.renew_interval(d);
    }
    if let Some(d) = s.acquire {
        b = b.acquire_interval(d);
    }
    if let Some(d) = s.op_timeout {
        b = b.operation_timeout(d);
    }
    b.build().expect("setup() only builds valid configurations")
}

/// The world one elector lives in: virtual time, the backend, a rival.
struct World {
    now: Instant,
    clock: ManualClock,
    backend: MemoryBackend,
    el: Elector,
    ttl: Duration,
    rival: Owner,
    spec: Arc<LeaseSpec>,
}

impl World {
    fn set_now(&mut self, t: Instant) {
        if t > self.now {
            self.now = t;
        }
        self.clock.set(self.now);
    }

    /// The driver loop until `target`: wake at every machine timeout and request deadline on
    /// the way, in time order.
    fn run_until(&mut self, target: Instant) -> common::Check {
        for _ in 0..10_000 {
            let next = [self.el.election.poll_timeout(), self.el.earliest_deadline()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= target => self.wake(t, false)?,
                _ => {
                    self.set_now(target);
                    return Ok(());
                }
            }
        }
        Err("the driver loop did not reach its target: spinning".into())
    }

    /// One wake-up of the driver at `t` (or now, if later): answer due requests, then
    /// `handle_timeout` when the machine's timeout is due.
    fn wake(&mut self, t: Instant, late: bool) -> common::Check {
        self.set_now(t);
        let now = self.now;
        self.el.expire_due(now, late)?;
        if self.el.election.poll_timeout().is_some_and(|d| d <= now) {
            self.el.timeout(now, late)?;
        }
        Ok(())
    }

    fn pick(&self, i: usize) -> Option<usize> {
        (!self.el.in_flight.is_empty()).then(|| i % self.el.in_flight.len())
    }

    fn step(&mut self, a: &Action) -> common::Check {
        let now = self.now;
        match a {
            Action::Advance(permille) => {
                let target = now + self.ttl * (*permille as u32) / 1000;
                self.run_until(target)?;
            }
            Action::Tick => {
                let next = [self.el.election.poll_timeout(), self.el.earliest_deadline()]
                    .into_iter()
                    .flatten()
                    .min();
                if let Some(t) = next {
                    self.wake(t.max(now), false)?;
                }
            }
            Action::Apply(i) => {
                if let Some(i) = self.pick(*i) {
                    self.el.apply(i, &self.backend);
                }
            }
            Action::Deliver(i) => {
                if let Some(i) = self.pick(*i)
                    && !self.el.in_flight[i].dropped
                    && let Some(r) = self.el.in_flight[i].ready.clone()
                {
                    let id = self.el.in_flight[i].req.id;
                    self.el.deliver(now, id, Delivery::Reply(r), false)?;
                }
            }
            Action::Prompt(i) => {
                if let Some(i) = self.pick(*i)
                    && !self.el.in_flight[i].dropped
                {
                    self.el.apply(i, &self.backend);
                    let f = &self.el.in_flight[i];
                    let (id, r) = (f.req.id, f.ready.clone());
                    if let Some(r) = r {
                        self.el.deliver(now, id, Delivery::Reply(r), false)?;
                    }
                }
            }
            Action::Fail { i, applied } => {
                if let Some(i) = self.pick(*i)
                    && !self.el.in_flight[i].dropped
                {
                    if *applied {
                        self.el.apply(i, &self.backend);
                    }
                    let f = &self.el.in_flight[i];
                    let id = f.req.id;
                    let r = Ready::error_for(&f.req.kind, "connection reset");
                    self.el.deliver(now, id, Delivery::Reply(r), false)?;
                }
            }
            Action::Drop { i, applied } => {
                if let Some(i) = self.pick(*i) {
                    if *applied {
                        self.el.apply(i, &self.backend);
                    }
                    self.el.in_flight[i].dropped = true;
                }
            }
            Action::LateApply(i) => {
                let n = self.el.unapplied_answered.len();
                if n > 0 {
                    let req = self.el.unapplied_answered.remove(i % n);
                    let _ = common::apply(&self.backend, &req);
                }
            }
            Action::Rival(op) => {
                let ttl = Ttl::new(self.ttl).map_err(|e| e.to_string())?;
                match op {
                    RivalOp::Acquire => {
                        let _ = self.backend.acquire_now(&AcquireRequest::new(
                            Arc::clone(&self.spec),
                            self.rival.clone(),
                            ttl,
                        ));
                    }
                    RivalOp::Renew => {
                        let _ = self.backend.renew_now(&RenewRequest::new(
                            Arc::clone(&self.spec),
                            self.rival.clone(),
                            ttl,
                        ));
                    }
                    RivalOp::Release => {
                        let _ = self.backend.release_now(&ReleaseRequest::new(
                            Arc::clone(&self.spec),
                            self.rival.clone(),
                        ));
                    }
                }
            }
            Action::Evict => {
                for k in self.spec.keys() {
                    self.backend.lose_key(k);
                }
            }
            Action::Cmd(c) => {
                if !self.el.obs.shutting_down {
                    self.el.command(now, *c)?;
                }
            }
            Action::Pause(permille) => {
                // The driver sleeps through timers, then catches up at once, late.
                let until = now + self.ttl * (*permille as u32) / 1000;
                self.set_now(until);
                self.wake(until, true)?;
            }
        }
        Ok(())
    }

    /// Shutdown, then keep answering promptly until `Stopped`.
    fn finish(&mut self) -> common::Check {
        if !self.el.obs.shutting_down {
            let now = self.now;
            self.el.command(now, Command::Shutdown)?;
        }
        for _ in 0..1000 {
            if self.el.obs.stopped {
                break;
            }
            if self.el.in_flight.is_empty() {
                // Nothing in flight: wake at the next timer (e.g. a paused contention).
                let t = self.el.election.poll_timeout();
                ensure!(
                    t.is_some() || self.el.obs.stopped,
                    "stuck before Stopped: nothing in flight, no timer"
                );
                self.wake(t.unwrap_or(self.now).max(self.now), false)?;
                continue;
            }
            let now = self.now;
            let i = 0;
            if self.el.in_flight[i].dropped {
                let d = self.el.in_flight[i].req.deadline;
                self.run_until(d)?;
            } else {
                self.el.apply(i, &self.backend);
                let f = &self.el.in_flight[i];
                let (id, r) = (f.req.id, f.ready.clone().expect("applied"));
                self.el.deliver(now, id, Delivery::Reply(r), false)?;
            }
        }
        ensure!(
            self.el.election.poll_request(self.now).is_none(),
            "a request after Stopped"
        );
        self.el.obs.check_final()
    }
}

fn run(s: &Setup, actions: &[Action]) -> Result<common::Stats, String> {
    let cfg = config(s);
    let clock = ManualClock::starting_at(Instant::ZERO + Duration::from_secs(10));
    let backend = MemoryBackend::new(clock.clone());
    let now = clock.now();
    let el = Elector::new(cfg.clone(), s.seed, now)?;
    let mut w = World {
        now,
        clock,
        backend,
        el,
        ttl: cfg.ttl().get(),
        rival: Owner::new("rival").map_err(|e| e.to_string())?,
        spec: Arc::new(cfg.lease_spec()),
    };
    for a in actions {
        w.el.obs.note(|| format!("action {a:?}"));
        w.step(a)
            .map_err(|e| format!("{e}\ntrace:\n{}", w.el.obs.trace_text()))?;
    }
    w.finish()
        .map_err(|e| format!("{e}\ntrace:\n{}", w.el.obs.trace_text()))?;
    Ok(w.el.obs.stats)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: common::cases(1500),
        max_shrink_iters: 20_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn election_rules_hold_over_random_interleavings(s in setup(), actions in proptest::collection::vec(action(), 0..160)) {
        if let Err(e) = run(&s, &actions) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Guards the generator: random runs do reach terms, backoff checks, deadline step-downs,
/// losses and timeouts (otherwise the property above would check little).
#[test]
fn random_runs_exercise_every_path() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut total = common::Stats::default();
    for _ in 0..300 {
        let s = setup().new_tree(&mut runner).unwrap().current();
        let actions = proptest::collection::vec(action(), 0..160)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let st = run(&s, &actions).unwrap();
        total.terms += st.terms;
        total.requests += st.requests;
        total.backoff_checks += st.backoff_checks;
        total.deadline_stepdowns += st.deadline_stepdowns;
        total.lost_stepdowns += st.lost_stepdowns;
        total.timeouts += st.timeouts;
    }
    eprintln!("{total:?}");
    assert!(total.terms >= 300, "{total:?}");
    assert!(total.backoff_checks >= 1000, "{total:?}");
    assert!(total.deadline_stepdowns >= 30, "{total:?}");
    assert!(total.lost_stepdowns >= 30, "{total:?}");
    assert!(total.timeouts >= 300, "{total:?}");
}

/// Backoff doubles per consecutive error after the first, capped at the TTL, for any count of
/// errors and any acquire interval (including sub-microsecond ones).
#[test]
fn backoff_base_doubles_to_the_ttl_for_any_error_count() {
    let ns = Duration::from_nanos;
    for acquire in [
        ns(1_000_000),
        ns(1_000_007),
        Duration::from_micros(1003),
        Duration::from_millis(500),
    ] {
        let cfg = ElectionConfig::builder("e", "i")
            .ttl(Duration::from_secs(3600))
            .acquire_interval(acquire)
            .build()
            .unwrap();
        let e = lease_core::Election::new(cfg.clone(), 1, Instant::ZERO);
        let obs = common::Observer::new(cfg);
        let mut prev = Duration::ZERO;
        for errors in (0..200).chain([u32::MAX - 1, u32::MAX]) {
            let b = e.backoff_base(errors);
            assert_eq!(
                b,
                obs.expected_backoff(errors),
                "acquire {acquire:?}, errors {errors}"
            );
            assert!(b >= prev, "backoff shrank at {errors} errors");
            prev = b;
        }
        assert_eq!(e.backoff_base(u32::MAX), Duration::from_secs(3600));
    }
}
