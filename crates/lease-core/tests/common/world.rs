//! A seeded world of lock machines over the in-memory store, in virtual time: the scaffolding
//! the lock-family simulations share (`semaphore_simulation.rs`, `rwlock_simulation.rs`,
//! `fair_simulation.rs`). Each names what its machines obtain and checks what the store and
//! the machines did through a [`Kind`]; the world, the network, the clocks and the faults are
//! this one.
//!
//! Each machine runs the shipped lock machines exactly as a driver does (`Obtain` for each
//! obtain, with retries; `HeldLock` with auto-renewal, its deadline and loss), on a clock of
//! its own that drifts from real time by up to ±0.5 % (the drift margin passed to the machines
//! is the single-server one: 1 % + 2 ms). A network applies each request at `send + leg` and
//! delivers its reply one leg later: fast legs, sometimes slow ones longer than the request's
//! bound, sometimes a dropped reply (the driver feeds `Timeout` at the request's deadline).
//! Machines pause (no events, no timers, up to 2.5 TTLs) and resume; a [`Kind`] that asks for
//! crashes has some of its waiting machines stop for good instead (nothing more is sent, not
//! even a release). A machine holds for up to three TTLs, then releases; one that gave up an
//! obtain sends the [`Kind`]'s give-up request, if any (a fair waiter leaves the queue).
//!
//! A world is drawn from its seed alone, so a failing seed replays.
#![allow(dead_code)] // Each simulation uses its own part.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{HeldLock, LockEvent, Obtain, ObtainPlan};
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::rng::SplitMix64;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, Instant, Owner, ReleaseRequest, RenewOutcome,
    RenewRequest, Token,
};

pub(crate) const START: Instant = Instant::from_origin(Duration::from_secs(100));

pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("fits")
}

/// A world's machines, network and faults, drawn from its seed.
#[derive(Clone, Debug)]
pub(crate) struct Net {
    pub(crate) machines: usize,
    pub(crate) ttl: Duration,
    pub(crate) faults_until: Instant,
    pub(crate) end: Instant,
    pub(crate) fast: Duration,
    pub(crate) slow: Duration,
    pub(crate) slow_permille: u64,
    pub(crate) drop_permille: u64,
    pub(crate) pause_every: Duration,
    pub(crate) pause_max: Duration,
}

impl Net {
    /// The rest of a world, once its kind drew the TTL (`ttl_ms`), whether faults storm, and
    /// how many machines run.
    pub(crate) fn draw(rng: &mut SplitMix64, machines: usize, ttl_ms: u64, storm: bool) -> Net {
        let ttl = ms(ttl_ms);
        let faults_until = START + ttl * 14;
        Net {
            machines,
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
    pub(crate) fn margin(&self) -> Duration {
        self.ttl / 100 + ms(2)
    }
}

/// What a simulation's machines obtain, and what it checks. The world calls it at the store
/// (each request as it is applied, in the store's order) and after every event.
pub(crate) trait Kind {
    /// Whether a holder writes to the resource every eighth of a TTL ([`Kind::write`]).
    const WRITES: bool;
    /// Whether some waiting machines crash (stop for good) instead of pausing.
    const CRASHES: bool;
    /// The plan of machine `node`'s next obtain for `ttl`, as `owner`.
    fn plan(&mut self, node: usize, ttl: Duration, owner: String) -> ObtainPlan;
    /// An attempt of `node`, applied at the store at `t`.
    fn acquire(
        &mut self,
        store: &MemoryBackend,
        t: Instant,
        node: usize,
        req: &AcquireRequest,
    ) -> Result<AcquireOutcome, BackendError>;
    /// A renewal of `node`, applied at `t`.
    fn renew(
        &mut self,
        store: &MemoryBackend,
        t: Instant,
        node: usize,
        req: &RenewRequest,
    ) -> Result<RenewOutcome, BackendError>;
    /// A release of `node`, applied at `t` (its reply is not awaited).
    fn release(&mut self, store: &MemoryBackend, t: Instant, node: usize, req: &ReleaseRequest);
    /// Whether an obtain of `node` that ended without the lock sends [`Kind::give_up`].
    fn gives_up(&self) -> bool {
        false
    }
    /// The give-up of `node`'s obtain as `owner`, applied at `t`.
    fn give_up(&mut self, _store: &MemoryBackend, _t: Instant, _node: usize, _owner: &Owner) {}
    /// Machine `node` crashed at `t` (while waiting): it sends nothing more.
    fn crashed(&mut self, _node: usize, _t: Instant) {}
    /// A holder's write to the resource under `token`, applied at `t`.
    fn write(
        &mut self,
        _store: &MemoryBackend,
        _t: Instant,
        _owner: &Owner,
        _token: Token,
        _violations: &mut Vec<String>,
    ) {
    }
    /// After every event at `t`: the machines that believe they hold (by their own clocks).
    fn check(
        &mut self,
        t: Instant,
        store: &MemoryBackend,
        believers: &[Believer<'_>],
        violations: &mut Vec<String>,
    );
}

/// A machine that believes it holds, at the instant of a check.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Believer<'a> {
    pub(crate) node: usize,
    pub(crate) owner: &'a str,
    /// Its local deadline, in real time.
    pub(crate) until: Instant,
}

/// A real-time interval in which machine `node` believed it held (as `owner`).
#[derive(Clone, Debug)]
pub(crate) struct Belief {
    pub(crate) node: usize,
    pub(crate) owner: String,
    pub(crate) since: Instant,
    pub(crate) until: Instant,
}

/// What a request does at the store.
#[derive(Clone, Debug)]
enum Op {
    Acquire(AcquireRequest),
    Renew(RenewRequest),
    Release(ReleaseRequest),
    GiveUp(Owner),
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
    crashed: bool,
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

/// What a world ends with.
pub(crate) struct Ended<K> {
    pub(crate) kind: K,
    pub(crate) violations: Vec<String>,
    /// Every belief interval, in the order they ended.
    pub(crate) beliefs: Vec<Belief>,
}

/// One world: the machines, the network, the store, and the kind that checks them.
pub(crate) struct World<K: Kind> {
    pub(crate) net: Net,
    pub(crate) rng: SplitMix64,
    clock: ManualClock,
    pub(crate) store: MemoryBackend,
    pub(crate) kind: K,
    nodes: Vec<Node>,
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    next_id: u64,
    beliefs: Vec<Belief>,
    violations: Vec<String>,
}

impl<K: Kind> World<K> {
    /// A world of `net.machines` machines; each clock's rate, parts per million of real time,
    /// is `ppm(rng)` (machine by machine), or a drift of up to ±0.5 % when `None`.
    pub(crate) fn new(
        net: Net,
        mut rng: SplitMix64,
        kind: K,
        ppm: Option<&dyn Fn(&mut SplitMix64) -> u64>,
    ) -> World<K> {
        let clock = ManualClock::starting_at(START);
        let nodes = (0..net.machines)
            .map(|_| Node {
                ppm: match ppm {
                    Some(f) => f(&mut rng),
                    None => 995_000 + rng.below_inclusive(10_000),
                },
                state: State::Idle { until: START },
                inflight: None,
                paused_until: None,
                crashed: false,
                generation: 0,
                obtains: 0,
            })
            .collect();
        let mut world = World {
            store: MemoryBackend::new(clock.clone()),
            clock,
            kind,
            nodes,
            heap: BinaryHeap::new(),
            events: Vec::new(),
            seq: 0,
            next_id: 0,
            beliefs: Vec::new(),
            violations: Vec::new(),
            net,
            rng,
        };
        for i in 0..world.nodes.len() {
            let jitter = ms(world.rng.below_inclusive(50));
            world.wake(i, START + jitter);
            let first = world.pause_gap();
            world.push(START + first, Ev::Pause { node: i });
        }
        world
    }

    fn pause_gap(&mut self) -> Duration {
        let every = ms_of(self.net.pause_every);
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
        let fast = ms_of(self.net.fast);
        if now < self.net.faults_until && self.rng.below_inclusive(999) < self.net.slow_permille {
            ms(1 + self.rng.below_inclusive(ms_of(self.net.slow)))
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

    /// Runs the world to its end.
    pub(crate) fn run(mut self) -> Ended<K> {
        while let Some(Reverse((at, _, idx))) = self.heap.pop() {
            if at > self.net.end {
                break;
            }
            let Some(ev) = self.events[idx].take() else {
                continue;
            };
            self.clock.set(at);
            self.handle(at, ev);
            self.check(at);
        }
        let end = self.net.end;
        for i in 0..self.nodes.len() {
            self.end_hold(i, end);
        }
        Ended {
            kind: self.kind,
            violations: self.violations,
            beliefs: self.beliefs,
        }
    }

    fn handle(&mut self, t: Instant, ev: Ev) {
        // A paused machine handles nothing: its events wait for the resume (a crashed one's,
        // past the end, forever).
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
                if t < self.net.faults_until && self.nodes[node].paused_until.is_none() {
                    if K::CRASHES && self.crashes(node) {
                        self.nodes[node].crashed = true;
                        self.nodes[node].paused_until = Some(self.net.end + self.net.ttl);
                        self.kind.crashed(node, t);
                        return;
                    }
                    let max = ms_of(self.net.pause_max);
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

    /// Whether waiting machine `node` crashes at this pause: one in three, while at least two
    /// machines stay up.
    fn crashes(&mut self, node: usize) -> bool {
        let up = self.nodes.iter().filter(|n| !n.crashed).count();
        matches!(self.nodes[node].state, State::Obtaining { .. })
            && up > 2
            && self.rng.below_inclusive(2) == 0
    }

    fn apply(&mut self, t: Instant, node: usize, id: u64, op: Op) {
        let store = &self.store;
        let reply = match op {
            Op::Acquire(req) => Some(Reply::Acquire(self.kind.acquire(store, t, node, &req))),
            Op::Renew(req) => Some(Reply::Renew(self.kind.renew(store, t, node, &req))),
            Op::Release(req) => {
                self.kind.release(store, t, node, &req);
                None
            }
            Op::GiveUp(owner) => {
                self.kind.give_up(store, t, node, &owner);
                None
            }
            Op::Write { owner, token } => {
                self.kind
                    .write(store, t, &owner, token, &mut self.violations);
                None
            }
        };
        if let Some(reply) = reply {
            let dropped =
                t < self.net.faults_until && self.rng.below_inclusive(999) < self.net.drop_permille;
            if !dropped {
                let at = t + self.leg(t);
                self.push(at, Ev::Arrive { node, id, reply });
            }
        }
    }

    fn plan(&mut self, node: usize) -> ObtainPlan {
        self.nodes[node].obtains += 1;
        let owner = format!("m{node}-{}", self.nodes[node].obtains);
        self.kind.plan(node, self.net.ttl, owner)
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
        let timeout = BackendError::Timeout(self.net.ttl / 5);
        let ttl_ms = ms_of(self.net.ttl);
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
                        let held = HeldLock::for_plan(&plan, obtained, self.net.margin(), now);
                        let hold = ms(self.rng.below_inclusive(ttl_ms * 3));
                        let holding = State::Holding {
                            plan,
                            machine: held,
                            since: t,
                            hold_until: t + hold,
                            next_write: if K::WRITES { t } else { t + hold },
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
                        if self.kind.gives_up() {
                            self.send(i, t, Op::GiveUp(plan.request.owner.clone()));
                        }
                        let idle = ms(self.rng.below_inclusive(ttl_ms));
                        (State::Idle { until: t + idle }, true)
                    }
                    None => {
                        if self.nodes[i].inflight.is_none()
                            && let Some(attempt) = machine.poll_request(now)
                        {
                            let id = self.send(i, t, Op::Acquire(plan.request.clone()));
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
                        self.beliefs.push(Belief {
                            node: i,
                            owner: plan.request.owner.as_str().to_owned(),
                            since,
                            until,
                        });
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
                    if K::WRITES && machine.is_held(now) && t >= next_write {
                        let token = machine.token().expect("the simulated holds are fenced");
                        let owner = plan.request.owner.clone();
                        self.send(i, t, Op::Write { owner, token });
                        next_write = t + self.net.ttl / 8;
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
        if let State::Holding {
            machine,
            since,
            plan,
            ..
        } = &self.nodes[i].state
        {
            let until = self.nodes[i].real(machine.valid_until()).min(t);
            if until > *since {
                belief = Some(Belief {
                    node: i,
                    owner: plan.request.owner.as_str().to_owned(),
                    since: *since,
                    until,
                });
            }
        }
        self.beliefs.extend(belief);
    }

    /// The kind's checks at `t`, on the machines that believe they hold.
    fn check(&mut self, t: Instant) {
        let believers: Vec<Believer<'_>> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.state {
                State::Holding { machine, plan, .. } if machine.is_held(n.local(t)) => {
                    Some(Believer {
                        node: i,
                        owner: plan.request.owner.as_str(),
                        until: n.real(machine.valid_until()),
                    })
                }
                _ => None,
            })
            .collect();
        self.kind
            .check(t, &self.store, &believers, &mut self.violations);
    }
}

/// The most closed intervals `[a, b]` that share an instant.
pub(crate) fn max_overlap(intervals: impl IntoIterator<Item = (Instant, Instant)>) -> usize {
    let mut points: Vec<(Instant, i32)> = Vec::new();
    for (a, b) in intervals {
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

/// The seeds to run: `<var>=<n>` replays one; `<var>S=<count>` runs that many from 0, else
/// `default`.
pub(crate) fn seeds(var: &str, default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var(var) {
        return vec![s.parse().expect("the seed is a number")];
    }
    let n = std::env::var(format!("{var}S"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}
