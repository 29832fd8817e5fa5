//! Deterministic simulation of the fenced-quorum token rule (`lease_core::quorum`) over 3 and
//! 5 nodes, each a separate [`MemoryBackend`] on one shared clock.
//!
//! The protocol, as the rule states it (and as a Redlock backend implements it):
//!
//! 1. **acquire round**: send to every node one atomic step that takes the lock if free and
//!    `INCR`s that node's counter (`acquire_now` on a fenced lease: the node's token); wait for
//!    all replies or the operation timeout;
//! 2. with a quorum of grants, the token is the **maximum** over the quorum's replies
//!    ([`fenced_quorum_token`]);
//! 3. **raise round**: send to every node "raise your counter (and mark) to the token if the lock
//!    is still ours" (`raise_counter_now`); wait for all replies or the operation timeout;
//! 4. success only if the raise round also reaches a quorum and the validity
//!    `ttl − elapsed − drift` ([`validity`]) is still positive; otherwise release everywhere.
//!    A successful holder works for a while within its validity, then releases everywhere.
//!
//! Faults: random network delays per request (request applied at `send + delay1`, reply at
//! `apply + delay2`, sometimes slower than the operation timeout), and node pauses (a paused node
//! applies nothing until it resumes, then applies what arrived in order; its keys expire on the
//! shared clock meanwhile). No node loses data.
//!
//! Checked for every seed: the tokens of successful acquisitions are unique and, ordered by
//! success time, strictly increase; and the validity windows of successful acquisitions
//! (from success to the earlier of `start + ttl − drift` and the release) never overlap.
//!
//! The rule assumes nodes keep their counters. `counter_loss_is_caught` runs the same worlds
//! with nodes that restart empty (a restart without persistence) and expects the checker to
//! report violations — showing both that the checker can fail and why the assumption matters.
//!
//! Seeds: `SIM_SEEDS` (default 2000) per node count; `SIM_SEED=<n>` replays one seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::quorum::{drift, fenced_quorum_token, quorum, validity};
use lease_core::rng::SplitMix64;
use lease_core::{
    AcquireOutcome, AcquireRequest, Instant, LeaseSpec, Metadata, Owner, ReleaseRequest, Token, Ttl,
};

const START: Instant = Instant::from_origin(Duration::from_secs(100));
const DRIFT_FACTOR: f64 = 0.01;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[derive(Clone, Debug)]
struct Params {
    nodes: usize,
    clients: usize,
    ttl: Duration,
    op_timeout: Duration,
    fast: Duration,
    slow: Duration,
    slow_permille: u64,
    pause_every: Duration,
    pause_max: Duration,
    retry_max: Duration,
    end: Instant,
    /// Mean time between data losses of one node (`None`: nodes keep their data).
    loss_every: Option<Duration>,
}

impl Params {
    fn draw(rng: &mut SplitMix64, nodes: usize, data_loss: bool) -> Params {
        let ttl_ms = 200 + rng.below_inclusive(1800);
        let ttl = ms(ttl_ms);
        Params {
            nodes,
            clients: 2 + rng.below_inclusive(3) as usize,
            ttl,
            op_timeout: ms(ttl_ms / 20 + 1 + rng.below_inclusive(ttl_ms / 5)),
            fast: ms(1 + rng.below_inclusive(ttl_ms / 40)),
            slow: ttl / 3,
            slow_permille: rng.below_inclusive(150),
            pause_every: ttl * (1 + rng.below_inclusive(5) as u32),
            pause_max: ttl * 2,
            retry_max: ttl / 2,
            end: START + ttl * 12,
            loss_every: data_loss.then(|| ttl * (2 + rng.below_inclusive(4) as u32)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Acquire,
    Raise(u64),
    Release,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A request reaches node `node` (applied now, or queued while the node is paused).
    Arrive {
        node: usize,
        client: usize,
        attempt: u64,
        round: u8,
        op: Op,
    },
    /// A reply reaches the client: for acquire `Some(token)` when granted; for raise `Some(1)`
    /// when raised.
    Reply {
        client: usize,
        attempt: u64,
        round: u8,
        node: usize,
        result: Option<u64>,
    },
    /// A paused node resumes.
    Resume { node: usize },
    /// A node pauses.
    Pause { node: usize },
    /// A node restarts without its data.
    Loss { node: usize },
}

#[derive(Clone, Debug)]
enum Phase {
    Idle,
    Round {
        round: u8,
        replies: Vec<Option<Option<u64>>>,
        token: Option<Token>,
    },
    Holding,
}

struct Client {
    attempt: u64,
    owner: Owner,
    start: Instant,
    phase: Phase,
    /// When the client acts next (round deadline, end of idling or holding).
    wake: Instant,
}

/// A successful acquisition.
#[derive(Clone, Debug)]
struct Success {
    client: usize,
    attempt: u64,
    token: Token,
    at: Instant,
    /// End of its validity window: the earlier of `start + ttl − drift` and the release.
    until: Instant,
}

struct Node {
    backend: MemoryBackend,
    paused: bool,
    queue: Vec<(usize, u64, u8, Op)>,
}

struct Sim {
    p: Params,
    rng: SplitMix64,
    now: Instant,
    clock: ManualClock,
    spec: Arc<LeaseSpec>,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    agenda: BinaryHeap<Reverse<(Instant, u64, Ev)>>,
    seq: u64,
    successes: Vec<Success>,
    failures: u64,
    trace: Vec<String>,
    tracing: bool,
}

/// Appends a line to the trace, formatting it only when tracing (a failing seed is replayed
/// with tracing on).
macro_rules! qlog {
    ($sim:expr, $($fmt:tt)+) => {
        if $sim.tracing {
            let line = format!($($fmt)+);
            $sim.trace.push(line);
        }
    };
}

impl Sim {
    fn new(seed: u64, nodes: usize, data_loss: bool, tracing: bool) -> Sim {
        let mut rng = SplitMix64::new(seed ^ 0x0000_F0F0_C0DE);
        let p = Params::draw(&mut rng, nodes, data_loss);
        let clock = ManualClock::starting_at(START);
        let spec = LeaseSpec::lock(["{q}:res"], Some("{q}:fence".into())).expect("valid spec");
        let nodes = (0..p.nodes)
            .map(|_| Node {
                backend: MemoryBackend::new(clock.clone()),
                paused: false,
                queue: Vec::new(),
            })
            .collect();
        let mut sim = Sim {
            p,
            rng,
            now: START,
            clock,
            spec: Arc::new(spec),
            nodes,
            clients: Vec::new(),
            agenda: BinaryHeap::new(),
            seq: 0,
            successes: Vec::new(),
            failures: 0,
            trace: Vec::new(),
            tracing,
        };
        for c in 0..sim.p.clients {
            let wake = START + sim.rand(sim.p.retry_max);
            sim.clients.push(Client {
                attempt: 0,
                owner: Owner::new(format!("c{c}-0")).expect("valid owner"),
                start: START,
                phase: Phase::Idle,
                wake,
            });
        }
        for node in 0..sim.p.nodes {
            let at = START + sim.rand(sim.p.pause_every * 2);
            sim.schedule(at, Ev::Pause { node });
            if let Some(every) = sim.p.loss_every {
                let at = START + sim.rand(every * 2);
                sim.schedule(at, Ev::Loss { node });
            }
        }
        sim
    }

    fn rand(&mut self, max: Duration) -> Duration {
        Duration::from_nanos(self.rng.below_inclusive(max.as_nanos() as u64))
    }

    fn delay(&mut self) -> Duration {
        if self.rng.below_inclusive(999) < self.p.slow_permille {
            self.rand(self.p.slow)
        } else {
            self.rand(self.p.fast)
        }
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.agenda.push(Reverse((at, self.seq, ev)));
    }

    fn send_all(&mut self, client: usize, round: u8, op: Op) {
        let attempt = self.clients[client].attempt;
        for node in 0..self.p.nodes {
            let d = self.delay();
            self.schedule(
                self.now + d,
                Ev::Arrive {
                    node,
                    client,
                    attempt,
                    round,
                    op: op.clone(),
                },
            );
        }
    }

    /// Applies one request at a node now and sends the reply.
    fn apply(&mut self, node: usize, client: usize, attempt: u64, round: u8, op: Op) {
        let owner = Owner::new(format!("c{client}-{attempt}")).expect("valid owner");
        let b = &self.nodes[node].backend;
        let ttl = Ttl::new(self.p.ttl).expect("valid ttl");
        let result = match &op {
            Op::Acquire => match b.acquire_now(&AcquireRequest {
                spec: Arc::clone(&self.spec),
                owner,
                ttl,
                metadata: Metadata::default(),
            }) {
                Ok(AcquireOutcome::Acquired { token }) => token.map(Token::get),
                _ => None,
            },
            Op::Raise(t) => {
                let t = Token::new(*t).expect("valid token");
                match b.raise_counter_now(&self.spec, &owner, t) {
                    Ok(true) => Some(1),
                    _ => None,
                }
            }
            Op::Release => {
                let _ = b.release_now(&ReleaseRequest {
                    spec: Arc::clone(&self.spec),
                    owner,
                    term: None,
                });
                return;
            }
        };
        qlog!(
            self,
            "{:?} node{node} applies c{client}-{attempt} {op:?}: {result:?}",
            self.now
        );
        let d = self.delay();
        self.schedule(
            self.now + d,
            Ev::Reply {
                client,
                attempt,
                round,
                node,
                result,
            },
        );
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                node,
                client,
                attempt,
                round,
                op,
            } => {
                if self.nodes[node].paused {
                    self.nodes[node].queue.push((client, attempt, round, op));
                } else {
                    self.apply(node, client, attempt, round, op);
                }
            }
            Ev::Reply {
                client,
                attempt,
                round,
                node,
                result,
            } => {
                let c = &mut self.clients[client];
                if c.attempt == attempt
                    && let Phase::Round {
                        round: r, replies, ..
                    } = &mut c.phase
                    && *r == round
                {
                    replies[node] = Some(result);
                    if replies.iter().all(Option::is_some) {
                        c.wake = self.now; // Every node answered: no need to wait longer.
                    }
                }
            }
            Ev::Pause { node } => {
                if self.now < self.p.end {
                    self.nodes[node].paused = true;
                    let len = self.rand(self.p.pause_max);
                    qlog!(self, "{:?} node{node} pauses for {len:?}", self.now);
                    self.schedule(self.now + len, Ev::Resume { node });
                }
            }
            Ev::Resume { node } => {
                self.nodes[node].paused = false;
                qlog!(self, "{:?} node{node} resumes", self.now);
                let queue = std::mem::take(&mut self.nodes[node].queue);
                for (client, attempt, round, op) in queue {
                    self.apply(node, client, attempt, round, op);
                }
                let next = self.now + self.rand(self.p.pause_every * 2);
                self.schedule(next, Ev::Pause { node });
            }
            Ev::Loss { node } => {
                qlog!(self, "{:?} node{node} restarts empty", self.now);
                self.nodes[node].backend.lose_data();
                if let Some(every) = self.p.loss_every {
                    let next = self.now + self.rand(every * 2);
                    self.schedule(next, Ev::Loss { node });
                }
            }
        }
    }

    /// Client `c` acts at its wake-up.
    fn client(&mut self, c: usize) {
        let now = self.now;
        let phase = self.clients[c].phase.clone();
        match phase {
            Phase::Idle => {
                if now >= self.p.end {
                    self.clients[c].wake = Instant::from_origin(Duration::MAX);
                    return;
                }
                let cl = &mut self.clients[c];
                cl.attempt += 1;
                cl.owner = Owner::new(format!("c{c}-{}", cl.attempt)).expect("valid owner");
                cl.start = now;
                cl.phase = Phase::Round {
                    round: 1,
                    replies: vec![None; self.p.nodes],
                    token: None,
                };
                cl.wake = now + self.p.op_timeout;
                self.send_all(c, 1, Op::Acquire);
            }
            Phase::Round {
                round: 1, replies, ..
            } => {
                let tokens: Vec<Token> = replies
                    .iter()
                    .filter_map(|r| r.flatten())
                    .filter_map(|t| Token::new(t).ok())
                    .collect();
                let start = self.clients[c].start;
                if tokens.len() >= quorum(self.p.nodes)
                    && validity(self.p.ttl, now - start, DRIFT_FACTOR).is_some()
                    && let Some(token) = fenced_quorum_token(tokens.iter().copied())
                {
                    let cl = &mut self.clients[c];
                    cl.phase = Phase::Round {
                        round: 2,
                        replies: vec![None; self.p.nodes],
                        token: Some(token),
                    };
                    cl.wake = now + self.p.op_timeout;
                    self.send_all(c, 2, Op::Raise(token.get()));
                } else {
                    self.give_up(c);
                }
            }
            Phase::Round {
                round: _,
                replies,
                token,
            } => {
                let raised = replies
                    .iter()
                    .filter(|r| matches!(r, Some(Some(_))))
                    .count();
                let start = self.clients[c].start;
                let v = validity(self.p.ttl, now - start, DRIFT_FACTOR);
                match (token, v) {
                    (Some(token), Some(v)) if raised >= quorum(self.p.nodes) => {
                        // Works within its validity (which ends at start + ttl − drift), then
                        // releases.
                        let hold = self.rand(v);
                        let until = now + hold;
                        assert!(until + drift(self.p.ttl, DRIFT_FACTOR) <= start + self.p.ttl);
                        let attempt = self.clients[c].attempt;
                        qlog!(
                            self,
                            "{now:?} c{c}-{attempt} acquired with token {token} (valid to {until:?})"
                        );
                        self.successes.push(Success {
                            client: c,
                            attempt,
                            token,
                            at: now,
                            until,
                        });
                        let cl = &mut self.clients[c];
                        cl.phase = Phase::Holding;
                        cl.wake = now + hold;
                    }
                    _ => self.give_up(c),
                }
            }
            Phase::Holding => {
                self.send_all(c, 3, Op::Release);
                let retry = self.rand(self.p.retry_max);
                let cl = &mut self.clients[c];
                cl.phase = Phase::Idle;
                cl.wake = now + retry;
            }
        }
    }

    fn give_up(&mut self, c: usize) {
        self.failures += 1;
        self.send_all(c, 3, Op::Release);
        let retry = self.rand(self.p.retry_max);
        let cl = &mut self.clients[c];
        cl.phase = Phase::Idle;
        cl.wake = self.now + retry;
    }

    fn run(&mut self) {
        let stop = self.p.end + self.p.ttl * 4;
        loop {
            let next_agenda = self.agenda.peek().map(|Reverse((t, _, _))| *t);
            let next_client = self.clients.iter().map(|c| c.wake).min();
            let Some(t) = [next_agenda, next_client].into_iter().flatten().min() else {
                break;
            };
            if t > stop {
                break;
            }
            self.now = self.now.max(t);
            self.clock.set(self.now);
            while let Some(Reverse((at, _, _))) = self.agenda.peek() {
                if *at > self.now {
                    break;
                }
                let Some(Reverse((_, _, ev))) = self.agenda.pop() else {
                    break;
                };
                self.event(ev);
            }
            for c in 0..self.clients.len() {
                if self.clients[c].wake <= self.now {
                    self.client(c);
                }
            }
        }
    }

    /// The checker: unique tokens, increasing in success order, disjoint validity windows.
    fn check(&self) -> Result<(), String> {
        let mut by_time = self.successes.clone();
        by_time.sort_by_key(|s| (s.at, s.token));
        for w in by_time.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if b.token <= a.token {
                return Err(format!(
                    "token {} of c{}-{} (succeeded at {:?}) is not above token {} of c{}-{} (succeeded at {:?})",
                    b.token, b.client, b.attempt, b.at, a.token, a.client, a.attempt, a.at
                ));
            }
        }
        let mut tokens: Vec<Token> = self.successes.iter().map(|s| s.token).collect();
        tokens.sort();
        if let Some(w) = tokens.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("token {} granted twice", w[0]));
        }
        for (i, a) in by_time.iter().enumerate() {
            for b in &by_time[i + 1..] {
                if b.at < a.until {
                    return Err(format!(
                        "c{}-{} succeeded at {:?} while c{}-{} was valid until {:?}",
                        b.client, b.attempt, b.at, a.client, a.attempt, a.until
                    ));
                }
            }
        }
        Ok(())
    }
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("SIM_SEED").ok().and_then(|v| v.parse().ok()) {
        return vec![s];
    }
    let n = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000u64);
    (0..n).collect()
}

fn run_all(nodes: usize) {
    let seeds = seeds();
    let (mut successes, mut failures) = (0u64, 0u64);
    for &seed in &seeds {
        let mut sim = Sim::new(seed, nodes, false, false);
        sim.run();
        if sim.check().is_err() {
            // Deterministic: replay with tracing to report.
            sim = Sim::new(seed, nodes, false, true);
            sim.run();
        }
        if let Err(e) = sim.check() {
            let tail: Vec<&String> = sim.trace.iter().rev().take(50).collect();
            let mut msg = format!(
                "quorum simulation ({nodes} nodes) seed {seed} failed: {e}\n  replay: SIM_SEED={seed} cargo test -p lease-core --test quorum_simulation\n  params: {:?}\n  last events:\n",
                sim.p
            );
            for l in tail.into_iter().rev() {
                msg.push_str(&format!("    {l}\n"));
            }
            panic!("{msg}");
        }
        successes += sim.successes.len() as u64;
        failures += sim.failures;
    }
    eprintln!(
        "{nodes} nodes, {} seeds: {successes} successful acquisitions, {failures} failed attempts",
        seeds.len()
    );
    if seeds.len() >= 100 {
        assert!(
            successes > seeds.len() as u64 * 5,
            "too few successes to check much"
        );
        assert!(
            failures > seeds.len() as u64,
            "contention and faults should make attempts fail"
        );
    }
}

#[test]
fn fenced_quorum_tokens_increase_over_3_nodes() {
    run_all(3);
}

#[test]
fn fenced_quorum_tokens_increase_over_5_nodes() {
    run_all(5);
}

/// With nodes that restart empty (no persistence), the rule's assumption breaks: a node's
/// counter starts again from zero, and a later acquisition can get a token below an earlier
/// one (and even overlap it). The checker must find this.
#[test]
fn counter_loss_is_caught() {
    let n = seeds().len().min(400) as u64;
    for nodes in [3, 5] {
        let mut violations = 0u64;
        for seed in 0..n {
            let mut sim = Sim::new(seed, nodes, true, false);
            sim.run();
            if sim.check().is_err() {
                violations += 1;
            }
        }
        eprintln!(
            "{nodes} nodes with counter loss: the checker found violations in {violations} of {n} seeds"
        );
        assert!(
            n < 50 || violations > 0,
            "counter loss went unnoticed over {n} seeds"
        );
    }
}
