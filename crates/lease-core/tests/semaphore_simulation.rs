//! Deterministic simulation of a semaphore: M machines (N + 1 to N + 4) contending for the `N`
//! permits of one semaphore over the in-memory store (the executable specification), in
//! virtual time.
//!
//! Each machine runs the shipped lock machines exactly as a driver does (`Obtain` for each
//! obtain, with retries; `HeldLock` with auto-renewal, its deadline and loss), on a clock of
//! its own that drifts from real time by up to ±0.5 % (the drift margin passed to the machines
//! is the single-server one: 1 % + 2 ms). A network applies each request at `send + leg` and
//! delivers its reply one leg later: fast legs, sometimes slow ones longer than the request's
//! bound, sometimes a dropped reply (the driver feeds `Timeout` at the request's deadline).
//! Machines pause (no events, no timers, up to 2.5 TTLs) and resume. While a machine *believes*
//! it holds its permit (`HeldLock::is_held` on its own clock) it writes to the resource every
//! eighth of a TTL through the permit fence (`MemoryBackend::permit_fenced_now`), over the same
//! network: a write sent before a pause or on a slow leg arrives late.
//!
//! The checker asserts, for every seed:
//!
//! - **at most `N` believers**: the real-time intervals in which machines believed they held a
//!   permit never overlap more than `N` deep, and whenever a machine believes, the store holds
//!   its permit current;
//! - **at most `N` at the resource**: for each permit (owner, token) whose writes were accepted,
//!   the span from its first to its last accepted write; those spans never overlap more than
//!   `N` deep (a permit's writes are accepted only while the store holds it current);
//! - the bound is not vacuous: across the seeds, `N` believers at once is reached.
//!
//! Seeds: `SEM_SIM_SEEDS` (default 400) from 0; `SEM_SIM_SEED=<n>` replays one.
//!
//! Negative control (`a_broken_count_is_caught`): the same worlds with a store wrapper that
//! admits `N + 1` (every obtain asks the store for `N + 1` permits, while the checker holds the
//! semaphore to `N`): both checkers must report violations. `a_slow_clock_is_caught`: machines
//! whose clocks run 10 % slow (beyond the drift margin) believe past their permit's expiry,
//! and the belief checker reports it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{HeldLock, LockEvent, LockOptions, Obtain, ObtainPlan};
use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
use lease_core::rng::SplitMix64;
use lease_core::semaphore::{PermitCount, PermitRequest, PermitWriteOutcome, semaphore_spec};
use lease_core::{
    AcquireOutcome, BackendError, Instant, LeaseSpec, Owner, ReleaseRequest, RenewOutcome,
    RenewRequest, RetryStrategy, Token,
};

const START: Instant = Instant::from_origin(Duration::from_secs(100));
const NAME: &str = "{sim}";

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// One simulated world's parameters, drawn from its seed.
#[derive(Clone, Debug)]
struct Params {
    n: u32,
    machines: usize,
    ttl: Duration,
    faults_until: Instant,
    end: Instant,
    fast: Duration,
    slow: Duration,
    slow_permille: u64,
    drop_permille: u64,
    pause_every: Duration,
    pause_max: Duration,
}

impl Params {
    fn draw(rng: &mut SplitMix64) -> Params {
        let n = 1 + u32::try_from(rng.below_inclusive(2)).expect("small");
        let ttl_ms = 200 + rng.below_inclusive(800);
        let ttl = ms(ttl_ms);
        let faults_until = START + ttl * 14;
        let storm = rng.below_inclusive(2) == 0;
        Params {
            n,
            machines: n as usize + 1 + usize::try_from(rng.below_inclusive(3)).expect("small"),
            ttl,
            faults_until,
            end: faults_until + ttl * 6,
            fast: ms(1 + rng.below_inclusive(ttl_ms / 50)),
            slow: ttl * 6 / 10,
            slow_permille: if storm {
                rng.below_inclusive(300)
            } else {
                rng.below_inclusive(50)
            },
            drop_permille: if storm {
                rng.below_inclusive(300)
            } else {
                rng.below_inclusive(50)
            },
            pause_every: ttl * (2 + u32::try_from(rng.below_inclusive(6)).expect("small")),
            pause_max: ttl * 5 / 2,
        }
    }

    /// The drift allowance the machines get (the single-server one).
    fn margin(&self) -> Duration {
        self.ttl / 100 + ms(2)
    }
}

/// What a request does at the store.
#[derive(Clone, Debug)]
enum Op {
    Acquire(PermitRequest),
    Renew(RenewRequest),
    Release(ReleaseRequest),
    Write { owner: Owner, token: Token },
}

#[derive(Debug)]
enum Reply {
    Acquire(Result<AcquireOutcome, BackendError>),
    Renew(Result<RenewOutcome, BackendError>),
}

#[derive(Debug)]
enum Ev {
    Wake { node: usize, generation: u64 },
    Apply { node: usize, id: u64, op: Op },
    Arrive { node: usize, id: u64, reply: Reply },
    Pause { node: usize },
}

#[allow(clippy::large_enum_variant)] // one per machine, a handful per world
enum State {
    Idle {
        until: Instant,
    },
    Obtaining {
        plan: Box<ObtainPlan>,
        machine: Obtain,
    },
    Holding {
        plan: Box<ObtainPlan>,
        machine: HeldLock,
        since: Instant,
        hold_until: Instant,
        next_write: Instant,
    },
}

struct Node {
    /// Local clock rate, parts per million of real time.
    ppm: u64,
    state: State,
    /// The request in flight (acquire or renewal): its id and local deadline.
    inflight: Option<(u64, Instant)>,
    paused_until: Option<Instant>,
    generation: u64,
    obtains: u64,
}

impl Node {
    fn local(&self, real: Instant) -> Instant {
        let d = real.saturating_duration_since(START);
        let nanos = d.as_nanos() * u128::from(self.ppm) / 1_000_000;
        START + Duration::from_nanos(u64::try_from(nanos).expect("fits"))
    }

    /// The first real instant at which the local clock reads `local` or later.
    fn real(&self, local: Instant) -> Instant {
        let d = local.saturating_duration_since(START);
        let nanos = (d.as_nanos() * 1_000_000).div_ceil(u128::from(self.ppm));
        START + Duration::from_nanos(u64::try_from(nanos).expect("fits"))
    }
}

/// A rule broken on purpose (negative controls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broken {
    Nothing,
    /// The store admits N + 1: every obtain asks for one permit more than the checker's N.
    Count,
    /// Every machine's clock runs 10 % slow, far beyond the drift margin: machines believe
    /// past their permit's expiry at the store.
    SlowClock,
}

/// What the checker found.
#[derive(Debug, Default)]
struct Report {
    violations: Vec<String>,
    /// The most machines that believed at once.
    peak_believers: usize,
    /// The most permits whose accepted-write spans overlapped.
    peak_resource: usize,
    accepted: usize,
    refused: usize,
}

struct Sim {
    p: Params,
    rng: SplitMix64,
    clock: ManualClock,
    store: MemoryBackend,
    spec: Arc<LeaseSpec>,
    /// The count the store is asked for (N, or N + 1 when broken).
    asked: PermitCount,
    nodes: Vec<Node>,
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    next_id: u64,
    /// Real-time intervals of belief.
    beliefs: Vec<(Instant, Instant)>,
    /// (owner, token) → first and last accepted write.
    spans: BTreeMap<(String, u64), (Instant, Instant)>,
    report: Report,
}

impl Sim {
    fn new(seed: u64, broken: Broken) -> Sim {
        let mut rng = SplitMix64::new(seed);
        let p = Params::draw(&mut rng);
        let clock = ManualClock::starting_at(START);
        let asked = PermitCount::new(p.n + u32::from(broken == Broken::Count)).expect("count");
        let nodes = (0..p.machines)
            .map(|_| Node {
                ppm: match broken {
                    Broken::SlowClock => 900_000,
                    _ => 995_000 + rng.below_inclusive(10_000),
                },
                state: State::Idle { until: START },
                inflight: None,
                paused_until: None,
                generation: 0,
                obtains: 0,
            })
            .collect();
        let mut sim = Sim {
            store: MemoryBackend::new(clock.clone()),
            clock,
            spec: Arc::new(semaphore_spec(NAME, None).expect("spec")),
            asked,
            nodes,
            heap: BinaryHeap::new(),
            events: Vec::new(),
            seq: 0,
            next_id: 0,
            beliefs: Vec::new(),
            spans: BTreeMap::new(),
            report: Report::default(),
            p,
            rng,
        };
        for i in 0..sim.nodes.len() {
            let jitter = ms(sim.rng.below_inclusive(50));
            sim.wake(i, START + jitter);
            let first = sim.pause_gap();
            sim.push(START + first, Ev::Pause { node: i });
        }
        sim
    }

    fn pause_gap(&mut self) -> Duration {
        let every = u64::try_from(self.p.pause_every.as_millis()).expect("fits");
        ms(1 + self.rng.below_inclusive(2 * every))
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.heap
            .push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    fn wake(&mut self, node: usize, at: Instant) {
        self.nodes[node].generation += 1;
        let generation = self.nodes[node].generation;
        self.push(at, Ev::Wake { node, generation });
    }

    fn leg(&mut self, now: Instant) -> Duration {
        let fast = u64::try_from(self.p.fast.as_millis()).expect("fits");
        if now < self.p.faults_until && self.rng.below_inclusive(999) < self.p.slow_permille {
            let slow = u64::try_from(self.p.slow.as_millis()).expect("fits");
            ms(1 + self.rng.below_inclusive(slow))
        } else {
            ms(self.rng.below_inclusive(fast))
        }
    }

    fn send(&mut self, node: usize, now: Instant, op: Op) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let at = now + self.leg(now);
        self.push(at, Ev::Apply { node, id, op });
        id
    }

    fn run(mut self) -> Report {
        while let Some(Reverse((at, _, idx))) = self.heap.pop() {
            if at > self.p.end {
                break;
            }
            let Some(ev) = self.events[idx].take() else {
                continue;
            };
            self.clock.set(at);
            self.handle(at, ev);
            self.check_believers(at);
        }
        let end = self.p.end;
        for i in 0..self.nodes.len() {
            self.end_hold(i, end);
        }
        self.finish()
    }

    fn handle(&mut self, t: Instant, ev: Ev) {
        // A paused machine handles nothing: its events wait for the resume.
        let node = match &ev {
            Ev::Wake { node, .. } | Ev::Arrive { node, .. } => Some(*node),
            _ => None,
        };
        if let Some(i) = node
            && let Some(until) = self.nodes[i].paused_until
        {
            if t < until {
                self.push(until, ev);
                return;
            }
            self.nodes[i].paused_until = None;
        }
        match ev {
            Ev::Wake { node, generation } => {
                if generation == self.nodes[node].generation {
                    self.drive(node, t);
                }
            }
            Ev::Pause { node } => {
                if t < self.p.faults_until && self.nodes[node].paused_until.is_none() {
                    let max = u64::try_from(self.p.pause_max.as_millis()).expect("fits");
                    let until = t + ms(1 + self.rng.below_inclusive(max));
                    self.nodes[node].paused_until = Some(until);
                    self.wake(node, until);
                }
                let gap = self.pause_gap();
                self.push(t + gap, Ev::Pause { node });
            }
            Ev::Apply { node, id, op } => self.apply(t, node, id, op),
            Ev::Arrive { node, id, reply } => {
                if self.nodes[node].inflight.map(|(i, _)| i) != Some(id) {
                    return; // timed out already: a late reply is dropped
                }
                self.nodes[node].inflight = None;
                let now = self.nodes[node].local(t);
                match (&mut self.nodes[node].state, reply) {
                    (State::Obtaining { machine, .. }, Reply::Acquire(r)) => {
                        machine.handle_reply(now, r);
                    }
                    (State::Holding { machine, .. }, Reply::Renew(r)) => {
                        machine.handle_renew(now, r);
                    }
                    _ => {}
                }
                self.drive(node, t);
            }
        }
    }

    fn apply(&mut self, t: Instant, node: usize, id: u64, op: Op) {
        let reply = match op {
            Op::Acquire(req) => Some(Reply::Acquire(self.store.acquire_permit_now(&req))),
            Op::Renew(req) => Some(Reply::Renew(self.store.renew_permit_now(&req))),
            Op::Release(req) => {
                let _ = self.store.release_permit_now(&req);
                None
            }
            Op::Write { owner, token } => {
                let write = MemoryWrite::Set {
                    key: format!("{NAME}:resource"),
                    value: format!("{}:{}", owner.as_str(), token.get()),
                };
                let got = self
                    .store
                    .permit_fenced_now(&self.spec, &owner, token, &[write])
                    .expect("a fenced semaphore");
                match got {
                    Ok(PermitWriteOutcome::Applied) => {
                        self.report.accepted += 1;
                        let span = self
                            .spans
                            .entry((owner.as_str().to_owned(), token.get()))
                            .or_insert((t, t));
                        span.1 = t;
                    }
                    Ok(_) => self.report.refused += 1,
                    Err(e) => self.report.violations.push(format!("write failed: {e}")),
                }
                None
            }
        };
        if let Some(reply) = reply {
            let dropped =
                t < self.p.faults_until && self.rng.below_inclusive(999) < self.p.drop_permille;
            if !dropped {
                let at = t + self.leg(t);
                self.push(at, Ev::Arrive { node, id, reply });
            }
        }
    }

    fn plan(&mut self, node: usize) -> ObtainPlan {
        let ttl = self.p.ttl;
        self.nodes[node].obtains += 1;
        let owner = format!("m{node}-{}", self.nodes[node].obtains);
        LockOptions::new()
            .auto_renew(ttl / 3)
            .retry(RetryStrategy::linear(ttl / 4).expect("retry"))
            .wait(ttl * 3)
            .operation_timeout(ttl / 5)
            .plan_permit(NAME, ttl, || owner)
            .expect("plan")
    }

    /// Drives machine `node` at real time `t`, as the driver does: timeouts, requests, events.
    fn drive(&mut self, node: usize, t: Instant) {
        for _ in 0..4 {
            if !self.step(node, t) {
                return;
            }
        }
    }

    /// One turn; whether the state changed (drive again).
    fn step(&mut self, i: usize, t: Instant) -> bool {
        let now = self.nodes[i].local(t);
        let timed_out = self.nodes[i].inflight.is_some_and(|(_, dl)| now >= dl);
        if timed_out {
            self.nodes[i].inflight = None;
        }
        let timeout = BackendError::Timeout(self.p.ttl / 5);
        let ttl_ms = u64::try_from(self.p.ttl.as_millis()).expect("fits");
        let state = std::mem::replace(&mut self.nodes[i].state, State::Idle { until: t });
        let (next, changed) = match state {
            State::Idle { until } if t < until => {
                self.wake(i, until);
                (State::Idle { until }, false)
            }
            State::Idle { .. } => {
                let plan = self.plan(i);
                let machine = Obtain::new(&plan, self.rng.next_u64(), now);
                let plan = Box::new(plan);
                (State::Obtaining { plan, machine }, true)
            }
            State::Obtaining { plan, mut machine } => {
                if timed_out {
                    machine.handle_reply(now, Err(timeout));
                }
                match machine.poll_outcome() {
                    Some(Ok(obtained)) => {
                        let held = HeldLock::for_plan(&plan, obtained, self.p.margin(), now);
                        let hold = ms(self.rng.below_inclusive(ttl_ms * 3));
                        let holding = State::Holding {
                            plan,
                            machine: held,
                            since: t,
                            hold_until: t + hold,
                            next_write: t,
                        };
                        (holding, true)
                    }
                    Some(Err(_)) => {
                        if machine.needs_cleanup() {
                            let req = ReleaseRequest::new(
                                Arc::clone(&plan.request.spec),
                                plan.request.owner.clone(),
                            );
                            self.send(i, t, Op::Release(req));
                        }
                        let idle = ms(self.rng.below_inclusive(ttl_ms));
                        (State::Idle { until: t + idle }, true)
                    }
                    None => {
                        if self.nodes[i].inflight.is_none()
                            && let Some(attempt) = machine.poll_request(now)
                        {
                            let req = PermitRequest::new(plan.request.clone(), self.asked);
                            let id = self.send(i, t, Op::Acquire(req));
                            self.nodes[i].inflight = Some((id, attempt.deadline));
                        }
                        let deadline = self.nodes[i].inflight.map(|(_, dl)| dl);
                        if let Some(at) = [machine.poll_timeout(), deadline]
                            .into_iter()
                            .flatten()
                            .min()
                        {
                            let real = self.nodes[i].real(at).max(t);
                            self.wake(i, real);
                        }
                        (State::Obtaining { plan, machine }, false)
                    }
                }
            }
            State::Holding {
                plan,
                mut machine,
                since,
                hold_until,
                mut next_write,
            } => {
                if timed_out {
                    machine.handle_renew(now, Err(timeout));
                }
                machine.handle_timeout(now);
                let lost = std::iter::from_fn(|| machine.poll_event())
                    .any(|e| matches!(e, LockEvent::Lost { .. }));
                if lost || t >= hold_until {
                    let until = self.nodes[i].real(machine.valid_until()).min(t);
                    if until > since {
                        self.beliefs.push((since, until));
                    }
                    let req = ReleaseRequest::new(
                        Arc::clone(&plan.request.spec),
                        plan.request.owner.clone(),
                    );
                    self.send(i, t, Op::Release(req));
                    self.nodes[i].inflight = None;
                    let idle = ms(self.rng.below_inclusive(ttl_ms));
                    (State::Idle { until: t + idle }, true)
                } else {
                    if self.nodes[i].inflight.is_none()
                        && let Some(order) = machine.poll_renew(now)
                    {
                        let req = RenewRequest::new(
                            Arc::clone(&plan.request.spec),
                            plan.request.owner.clone(),
                            plan.request.ttl,
                        );
                        let id = self.send(i, t, Op::Renew(req));
                        self.nodes[i].inflight = Some((id, order.deadline));
                    }
                    if machine.is_held(now) && t >= next_write {
                        let token = machine.token().expect("permits are fenced");
                        let owner = plan.request.owner.clone();
                        self.send(i, t, Op::Write { owner, token });
                        next_write = t + self.p.ttl / 8;
                    }
                    let deadline = self.nodes[i].inflight.map(|(_, dl)| dl);
                    let mut at = hold_until.min(next_write);
                    if let Some(l) = [machine.poll_timeout(), deadline]
                        .into_iter()
                        .flatten()
                        .min()
                    {
                        at = at.min(self.nodes[i].real(l));
                    }
                    self.wake(i, at.max(t));
                    let holding = State::Holding {
                        plan,
                        machine,
                        since,
                        hold_until,
                        next_write,
                    };
                    (holding, false)
                }
            }
        };
        self.nodes[i].state = next;
        changed
    }

    /// Ends machine `i`'s hold (if any) at `t`: its belief lasted until `t` or its local
    /// deadline, whichever came first.
    fn end_hold(&mut self, i: usize, t: Instant) {
        let mut belief = None;
        if let State::Holding { machine, since, .. } = &self.nodes[i].state {
            let until = self.nodes[i].real(machine.valid_until()).min(t);
            if until > *since {
                belief = Some((*since, until));
            }
        }
        self.beliefs.extend(belief);
    }

    /// Whoever believes at `t` has a current permit at the store.
    fn check_believers(&mut self, t: Instant) {
        let info = match self.store.inspect_semaphore_now(&self.spec) {
            Ok(info) => info,
            Err(e) => {
                self.report.violations.push(format!("inspect failed: {e}"));
                return;
            }
        };
        let mut believers = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if let State::Holding { machine, plan, .. } = &n.state
                && machine.is_held(n.local(t))
            {
                believers += 1;
                let owner = plan.request.owner.as_str();
                if !info.holders.iter().any(|h| h.owner == owner) {
                    self.report.violations.push(format!(
                        "{t:?}: machine {i} believes it holds {owner}'s permit, the store has {:?}",
                        info.holders
                    ));
                }
            }
        }
        if believers > self.p.n as usize {
            self.report.violations.push(format!(
                "{t:?}: {believers} machines believe, N = {}",
                self.p.n
            ));
        }
    }

    fn finish(mut self) -> Report {
        let n = self.p.n as usize;
        let beliefs = std::mem::take(&mut self.beliefs);
        let peak = max_overlap(&beliefs);
        self.report.peak_believers = peak;
        if peak > n {
            self.report
                .violations
                .push(format!("{peak} belief intervals overlap, N = {n}"));
        }
        let spans: Vec<(Instant, Instant)> = self.spans.values().copied().collect();
        let peak = max_overlap(&spans);
        self.report.peak_resource = peak;
        if peak > n {
            self.report.violations.push(format!(
                "the resource accepted {peak} permits at once, N = {n}"
            ));
        }
        self.report
    }
}

/// The most closed intervals `[a, b]` that share an instant.
fn max_overlap(intervals: &[(Instant, Instant)]) -> usize {
    let mut points: Vec<(Instant, i32)> = Vec::new();
    for &(a, b) in intervals {
        points.push((a, 1));
        points.push((b, -1));
    }
    // At one instant, starts before ends: closed intervals that touch overlap.
    points.sort_by_key(|&(t, d)| (t, -d));
    let (mut depth, mut peak) = (0i32, 0i32);
    for (_, d) in points {
        depth += d;
        peak = peak.max(depth);
    }
    usize::try_from(peak).unwrap_or(0)
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("SEM_SIM_SEED") {
        return vec![s.parse().expect("SEM_SIM_SEED is a number")];
    }
    let n = std::env::var("SEM_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400u64);
    (0..n).collect()
}

#[test]
fn at_most_n_holders_believe_and_write() {
    let mut full_belief = 0;
    let mut full_resource = 0;
    let mut refused = 0;
    let seeds = seeds();
    for &seed in &seeds {
        let report = Sim::new(seed, Broken::Nothing).run();
        assert!(
            report.violations.is_empty(),
            "seed {seed} (replay: SEM_SIM_SEED={seed}): {:#?}",
            &report.violations[..report.violations.len().min(10)]
        );
        let n = Params::draw(&mut SplitMix64::new(seed)).n as usize;
        full_belief += usize::from(report.peak_believers == n);
        full_resource += usize::from(report.peak_resource == n);
        refused += report.refused;
        assert!(report.accepted > 0, "seed {seed}: no write was accepted");
    }
    eprintln!(
        "{} worlds: N believers at once in {full_belief}, N permits writing at once in \
         {full_resource}; {refused} late writes refused",
        seeds.len()
    );
    if seeds.len() > 1 {
        assert!(
            full_belief * 2 > seeds.len(),
            "N believers at once in only {full_belief} of {} worlds",
            seeds.len()
        );
        assert!(
            full_resource * 2 > seeds.len(),
            "N permits writing at once in only {full_resource} of {} worlds",
            seeds.len()
        );
        assert!(
            refused > 0,
            "no late write was ever refused: the faults are too mild"
        );
    }
}

/// Negative control: a store that admits `N + 1` (every obtain asks for one permit more than
/// the checker's `N`) is caught by both checkers.
#[test]
fn a_broken_count_is_caught() {
    let mut believers = 0;
    let mut resource = 0;
    let total = 60;
    for seed in 0..total {
        let report = Sim::new(seed, Broken::Count).run();
        believers += usize::from(report.violations.iter().any(|v| v.contains("believe")));
        resource += usize::from(report.violations.iter().any(|v| v.contains("resource")));
    }
    eprintln!("broken count caught: belief in {believers}, resource in {resource} of {total}");
    assert!(
        believers * 2 > total as usize,
        "belief caught in {believers} of {total}"
    );
    assert!(
        resource * 2 > total as usize,
        "resource caught in {resource} of {total}"
    );
}

#[test]
fn the_overlap_sweep_counts_touching_intervals() {
    let t = |v: u64| START + ms(v);
    assert_eq!(max_overlap(&[]), 0);
    assert_eq!(max_overlap(&[(t(0), t(5)), (t(5), t(9))]), 2);
    assert_eq!(max_overlap(&[(t(0), t(4)), (t(5), t(9))]), 1);
    assert_eq!(max_overlap(&[(t(0), t(9)), (t(1), t(2)), (t(3), t(4))]), 2);
}

/// Negative control: machines whose clocks run slower than the drift margin allows believe
/// they hold permits the store has expired, and the belief checker says so.
#[test]
fn a_slow_clock_is_caught() {
    let total = 40;
    let caught = (0..total)
        .filter(|&seed| {
            let report = Sim::new(seed, Broken::SlowClock).run();
            report
                .violations
                .iter()
                .any(|v| v.contains("the store has"))
        })
        .count();
    eprintln!("slow clocks caught in {caught} of {total}");
    assert!(caught * 2 > total as usize, "caught in {caught} of {total}");
}
