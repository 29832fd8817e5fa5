//! Deterministic simulation of the shipped election loop: N real [`lease_tokio::Elector`]s
//! (3–5) over one shared [`MemoryBackend`], on a current-thread tokio runtime with paused
//! (virtual) time, one runtime per seed.
//!
//! Unlike `lease-core/tests/simulation.rs`, which drives the sans-IO machines with its own
//! harness, nothing here re-implements the driver: requests, deadlines, timers, term
//! cancellation, work tasks, `token()`/`valid_until()` are those of `lease_tokio`.
//!
//! The world of one seed:
//!
//! - **The store** is a [`MemoryBackend`] behind a thin adapter ([`SimBackend`]) that sets the
//!   store's [`ManualClock`] to tokio's clock before every call and, while a call waits on the
//!   store's delay faults, advances the manual clock to each sleeper's due instant (so the store
//!   and the electors share one clock exactly, with no ticking task).
//! - **Store faults** come from `MemoryBackend`'s own switches, one window at a time, drawn
//!   from the seed: unavailable windows and `fail_next` (not applied); lost replies (a reply
//!   delay far beyond every request deadline: applied, outcome unknown); slow replies and
//!   requests (delays around the deadlines; a request delay applies the call after the caller
//!   gave up).
//! - **Elector faults**: a process pause (the elector's run future is not polled, and its
//!   leader work stops between its leadership check and its next write: on resume it writes
//!   with its old token), `resign()`, and the leader work returning.
//! - **Leader work** writes through `Term::fencer()` (a fencer over the memory fencer, on the
//!   election's mark key) every 20–150 ms, each write bounded by a timeout.
//!
//! What is recorded: after every poll of an elector's run future (the only place its lease
//! state changes), its `token()` and `valid_until()`; from these, each term's *belief window*
//! `[first instant token() = Some(t), min(instant it changed, last local deadline))` exactly,
//! in virtual time. Every fenced write (sender, token, send/completion time, outcome) and the
//! order in which the store applied writes.
//!
//! The checks ([`check`]): belief windows of different terms never overlap; tokens of
//! successive terms strictly increase and no token belongs to two electors; no write with a
//! token below an already applied one is applied (the fence rule); an `Applied` outcome was
//! applied and a `Stale` or failed one was not; once faults stop (and the last delayed request
//! has landed) a leader exists within 2 × TTL + acquire interval; every run returns `Ok` at
//! shutdown.
//!
//! Seeds: 200 by default; `REDLEASE_SIM_SEEDS=<n>` runs more, `REDLEASE_SIM_SEED=<s>` replays
//! one and prints its trace. A failure prints the seed and the replay command.
//!
//! Negative controls: the same worlds and the same checker, with one rule broken on purpose
//! ([`Mode`]); each must be caught in at least 10 of seeds 0..40:
//!
//! - `unfenced_writes_are_caught`: a fencer that skips the mark check (the fence rule);
//! - `trusting_the_term_past_its_deadline_is_caught`: an application that believes it leads
//!   until its `Term` is cancelled, ignoring the local deadline (overlapping leaders, when the
//!   paused loop cancels late);
//! - `fast_store_clock_is_caught`: the store's clock runs 5/4 as fast as the electors'
//!   (overlapping leaders by the real `Elector::token()`).

use std::future::{Future, poll_fn};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use lease_core::memory::{Faults, ManualClock, MemoryBackend, MemoryFencer, MemoryWrite};
use lease_core::rng::SplitMix64;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, ElectionConfig, FenceOutcome, FencedResource,
    Fencing, Instant, LeaseBackend, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest, Token,
};
use lease_tokio::{CancellationToken, Elector, Term};
use tokio::time::Instant as TokioInstant;

/// The election's name.
const NAME: &str = "sim";
/// The hash the fenced writes go to (field = write id, value = token).
const WRITES: &str = "sim:writes";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which rule the world breaks on purpose (negative controls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Nothing broken.
    Correct,
    /// The fencer applies every write without checking (or advancing) the mark.
    UnfencedWrites,
    /// The application trusts its `Term` until the term's cancellation fires, ignoring the
    /// local deadline: the belief windows checked are `[work starts, cancellation seen)`.
    TrustTermUntilCancelled,
    /// The store's clock runs 5/4 as fast as the electors' (drift the memory store's zero
    /// validity margin does not allow for): the store expires leases before the holder's
    /// local deadline.
    FastStoreClock,
}

/// A gate that stops a future from being polled (a paused process).
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, Vec<Waker>)>,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        let wakers = {
            let mut s = lock(&self.state);
            s.0 = closed;
            if closed {
                Vec::new()
            } else {
                std::mem::take(&mut s.1)
            }
        };
        for w in wakers {
            w.wake();
        }
    }

    fn is_closed(&self) -> bool {
        lock(&self.state).0
    }

    fn poll_open(&self, cx: &mut Context<'_>) -> bool {
        let mut s = lock(&self.state);
        if s.0 {
            s.1.push(cx.waker().clone());
            false
        } else {
            true
        }
    }

    async fn wait_open(&self) {
        poll_fn(|cx| {
            if self.poll_open(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// One belief window of one term.
#[derive(Clone, Copy, Debug)]
struct Window {
    elector: usize,
    token: Token,
    start: Duration,
    /// The last local deadline seen (`valid_until`).
    deadline: Duration,
    /// `min(instant the elector's lease state changed, deadline)`.
    end: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteOutcome {
    Applied,
    Stale,
    /// Refused before reaching the store (unavailable): not applied.
    Failed,
    /// Timed out: may or may not have been applied.
    Unknown,
}

#[derive(Clone, Copy, Debug)]
struct WriteRec {
    id: u64,
    elector: usize,
    token: Token,
    sent: Duration,
    done: Duration,
    outcome: WriteOutcome,
}

#[derive(Default)]
struct Record {
    open: Vec<Option<Window>>,
    windows: Vec<Window>,
    writes: Vec<WriteRec>,
    /// Writes in the order the store applied them: (id, token, instant).
    applied: Vec<(u64, Token, Duration)>,
    trace: Vec<String>,
    /// [`Mode::TrustTermUntilCancelled`]: the windows from the work's start to the
    /// cancellation, open ones first.
    term_open: Vec<Window>,
    term_windows: Vec<Window>,
}

/// Everything the tasks of one seed share.
struct World {
    origin: TokioInstant,
    clock: ManualClock,
    mode: Mode,
    write_timeout: Duration,
    next_id: AtomicU64,
    rec: Mutex<Record>,
    gates: Vec<Gate>,
    /// The token whose work must return (0: none).
    returns: Vec<AtomicU64>,
    rngs: Vec<Mutex<SplitMix64>>,
}

impl World {
    /// Virtual time since the start of the seed.
    fn at(&self) -> Duration {
        TokioInstant::now().saturating_duration_since(self.origin)
    }

    /// Sets the store's clock to tokio's.
    fn sync(&self) {
        let at = match self.mode {
            Mode::FastStoreClock => self.at() * 5 / 4,
            _ => self.at(),
        };
        self.clock.set(Instant::from_origin(at));
    }

    /// The tokio instant at which the store's clock reads `at`.
    fn store_to_tokio(&self, at: Instant) -> TokioInstant {
        match self.mode {
            Mode::FastStoreClock => self.origin + at.since_origin() * 4 / 5,
            _ => self.origin + at.since_origin(),
        }
    }

    fn log(&self, line: impl std::fmt::Display) {
        let at = self.at();
        lock(&self.rec)
            .trace
            .push(format!("{:>10.3}s {line}", at.as_secs_f64()));
    }

    fn draw(&self, i: usize, lo: Duration, hi: Duration) -> Duration {
        between(&mut lock(&self.rngs[i]), lo, hi)
    }

    /// Records elector `i`'s lease state after a poll of its run future.
    fn sample(&self, i: usize, e: &Elector<SimBackend>) {
        let now = self.at();
        let cur = e
            .token()
            .zip(e.valid_until())
            .map(|(t, u)| (t, u.saturating_duration_since(self.origin)));
        let mut rec = lock(&self.rec);
        match (rec.open[i], cur) {
            (Some(mut w), Some((t, d))) if w.token == t => {
                w.deadline = d;
                w.end = d;
                rec.open[i] = Some(w);
            }
            (open, cur) => {
                if let Some(mut w) = open {
                    w.end = now.min(w.deadline);
                    rec.trace.push(format!(
                        "{:>10.3}s e{i} no longer leads {} (believed until {:.3}s)",
                        now.as_secs_f64(),
                        w.token,
                        w.end.as_secs_f64()
                    ));
                    rec.windows.push(w);
                }
                rec.open[i] = cur.map(|(token, deadline)| {
                    rec.trace.push(format!(
                        "{:>10.3}s e{i} leads {token} until {:.3}s",
                        now.as_secs_f64(),
                        deadline.as_secs_f64()
                    ));
                    Window {
                        elector: i,
                        token,
                        start: now,
                        deadline,
                        end: deadline,
                    }
                });
            }
        }
    }

    fn applied(&self, id: u64, token: Token) {
        let at = self.at();
        lock(&self.rec).applied.push((id, token, at));
    }
}

fn between(rng: &mut SplitMix64, lo: Duration, hi: Duration) -> Duration {
    let span = u64::try_from((hi - lo).as_micros()).unwrap_or(u64::MAX);
    lo + Duration::from_micros(rng.below_inclusive(span))
}

/// The memory store, on tokio's clock.
#[derive(Clone)]
struct SimBackend {
    mem: MemoryBackend,
    world: Arc<World>,
}

impl SimBackend {
    /// Runs one store call: the store's clock is tokio's at the call, and follows it while
    /// the call sleeps on the store's delay faults (the manual clock is moved to each
    /// sleeper's due instant when tokio's clock reaches it).
    async fn call<T>(&self, fut: impl Future<Output = T>) -> T {
        self.world.sync();
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                biased;
                r = &mut fut => return r,
                () = self.pump() => self.world.sync(),
            }
        }
    }

    async fn pump(&self) {
        match self.mem.clock().next_wake() {
            Some(at) => tokio::time::sleep_until(self.world.store_to_tokio(at)).await,
            None => std::future::pending().await,
        }
    }
}

#[async_trait]
impl LeaseBackend for SimBackend {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.call(self.mem.acquire(req)).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.call(self.mem.renew(req)).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.call(self.mem.release(req)).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.call(self.mem.remaining(spec, owner)).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.call(self.mem.inspect(spec)).await
    }
}

/// The term's fencer: the memory fencer on the election's mark key, noting the instant the
/// store applies each write (or, in [`Mode::UnfencedWrites`], a fencer without the mark check).
#[derive(Clone)]
struct SimFencer {
    backend: SimBackend,
    inner: MemoryFencer,
}

impl Fencing for SimBackend {
    type Fencer = SimFencer;
    fn fencer(&self, mark_key: &str, token: Token) -> SimFencer {
        SimFencer {
            backend: self.clone(),
            inner: self.mem.fencer(mark_key, token),
        }
    }
}

#[async_trait]
impl FencedResource for SimFencer {
    type Write = u64;
    type Error = BackendError;
    async fn apply(&self, token: Token, id: u64) -> Result<FenceOutcome, BackendError> {
        let world = &self.backend.world;
        let field = id.to_string();
        if world.mode == Mode::UnfencedWrites {
            // Broken on purpose: no mark check.
            self.backend.world.sync();
            self.backend
                .mem
                .put(&format!("{WRITES}:{field}"), &token.to_string());
            world.applied(id, token);
            return Ok(FenceOutcome::Applied);
        }
        let write = MemoryWrite::HSet {
            key: WRITES.into(),
            field: field.clone(),
            value: token.to_string(),
        };
        let mut fut = self.inner.apply(token, write);
        let mut noted = false;
        // The store applies the write inside one poll: look right after each poll.
        let watched = poll_fn(move |cx| {
            let r = fut.as_mut().poll(cx);
            if !noted && self.backend.mem.hget(WRITES, &field).is_some() {
                noted = true;
                world.applied(id, token);
            }
            r
        });
        self.backend.call(watched).await
    }
}

/// The leader work of elector `i` for one term: fenced writes until the term ends (or the
/// work is told to return). A process pause lands between the check of the term and the
/// write, so a paused leader writes once with its old token when it resumes.
async fn lead(world: Arc<World>, i: usize, term: Term<SimBackend>) {
    let fencer = term.fencer();
    let token = term.token();
    if world.mode == Mode::TrustTermUntilCancelled {
        let start = world.at();
        lock(&world.rec).term_open.push(Window {
            elector: i,
            token,
            start,
            deadline: Duration::MAX,
            end: Duration::MAX,
        });
        let (w, t) = (Arc::clone(&world), term.clone());
        tokio::spawn(async move {
            t.cancelled().await;
            let end = w.at();
            let mut rec = lock(&w.rec);
            if let Some(k) = rec.term_open.iter().position(|o| o.token == token) {
                let open = rec.term_open.remove(k);
                rec.term_windows.push(Window { end, ..open });
            }
        });
    }
    loop {
        if term.is_cancelled() {
            return;
        }
        if world.returns[i]
            .compare_exchange(token.get(), 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            world.log(format!("e{i} work returns ({token})"));
            return;
        }
        world.gates[i].wait_open().await;
        let id = world.next_id.fetch_add(1, Ordering::AcqRel);
        let sent = world.at();
        let outcome = match tokio::time::timeout(world.write_timeout, fencer.apply(token, id)).await
        {
            Ok(Ok(FenceOutcome::Applied)) => WriteOutcome::Applied,
            Ok(Ok(FenceOutcome::Stale { .. })) => WriteOutcome::Stale,
            Ok(Err(_)) => WriteOutcome::Failed,
            Err(_) => WriteOutcome::Unknown,
        };
        let done = world.at();
        {
            let mut rec = lock(&world.rec);
            rec.writes.push(WriteRec {
                id,
                elector: i,
                token,
                sent,
                done,
                outcome,
            });
            if outcome != WriteOutcome::Applied {
                rec.trace.push(format!(
                    "{:>10.3}s e{i} write #{id} with {token} (sent {:.3}s): {outcome:?}",
                    done.as_secs_f64(),
                    sent.as_secs_f64()
                ));
            }
        }
        let pause = world.draw(i, Duration::from_millis(20), Duration::from_millis(150));
        tokio::select! {
            biased;
            () = term.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Polls elector `i`'s run future only while its gate is open, and samples its lease state
/// after every poll.
fn gated<F: Future>(
    world: Arc<World>,
    i: usize,
    elector: Elector<SimBackend>,
    fut: F,
) -> impl Future<Output = F::Output> {
    let mut fut = Box::pin(fut);
    poll_fn(move |cx| {
        if !world.gates[i].poll_open(cx) {
            return Poll::Pending;
        }
        let r = fut.as_mut().poll(cx);
        world.sample(i, &elector);
        r
    })
}

/// The parameters of one seed.
#[derive(Clone, Copy, Debug)]
struct Params {
    n: usize,
    ttl: Duration,
    /// Faults stop at this instant.
    fault_end: Duration,
}

impl Params {
    fn of(seed: u64) -> Params {
        let mut rng = SplitMix64::new(seed ^ 0xE1EC_7051_u64);
        let n = 3 + rng.below_inclusive(2) as usize;
        let ttl = Duration::from_millis([600, 1000, 1500][rng.below_inclusive(2) as usize]);
        let fault_end = ttl * (8 + rng.below_inclusive(6) as u32);
        Params { n, ttl, fault_end }
    }

    /// The longest request delay a fault sets: a request sent before the faults stop may be
    /// applied this long after.
    fn max_request_delay(&self) -> Duration {
        self.ttl / 2
    }

    /// By when a leader must exist: once the last delayed request has landed, 2 × TTL +
    /// acquire interval.
    fn leader_by(&self, acquire_interval: Duration) -> Duration {
        self.fault_end + self.max_request_delay() + 2 * self.ttl + acquire_interval
    }
}

/// What one seed produced.
struct Run {
    seed: u64,
    params: Params,
    acquire_interval: Duration,
    windows: Vec<Window>,
    writes: Vec<WriteRec>,
    applied: Vec<(u64, Token, Duration)>,
    trace: Vec<String>,
    /// Problems of the run itself (a run that did not stop, or stopped with an error).
    errors: Vec<String>,
}

/// Totals over seeds, to show the faults really happened.
#[derive(Debug, Default)]
struct Stats {
    terms: usize,
    applied: usize,
    stale: usize,
    unknown: usize,
    failed: usize,
    /// The shortest time between one term's belief window and the next one's.
    min_gap: Option<Duration>,
    /// The longest wait for a leader after the faults (and delayed requests) stopped.
    max_leader_wait: Duration,
}

impl Stats {
    fn add(&mut self, s: &Stats) {
        self.terms += s.terms;
        self.applied += s.applied;
        self.stale += s.stale;
        self.unknown += s.unknown;
        self.failed += s.failed;
        self.min_gap = match (self.min_gap, s.min_gap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max_leader_wait = self.max_leader_wait.max(s.max_leader_wait);
    }
}

async fn store_faults(world: Arc<World>, mem: MemoryBackend, p: Params, seed: u64) {
    let mut rng = SplitMix64::new(seed ^ 0x5107_E000);
    let ms = Duration::from_millis;
    loop {
        let gap = between(&mut rng, Duration::ZERO, p.ttl);
        tokio::time::sleep(gap).await;
        if world.at() >= p.fault_end {
            return;
        }
        let (faults, window, what) = match rng.below_inclusive(4) {
            0 => (
                Faults::default().with_unavailable(true),
                between(&mut rng, ms(100), p.ttl * 3 / 2),
                "store unavailable".to_owned(),
            ),
            1 => {
                let n = 1 + rng.below_inclusive(3) as u32;
                mem.fail_next(n);
                world.log(format!("store fails the next {n} calls"));
                continue;
            }
            2 => (
                Faults::default().with_reply_delay(Some(p.ttl * 3)),
                between(&mut rng, ms(50), p.ttl),
                "replies lost (applied, unknown)".to_owned(),
            ),
            3 => {
                let req = between(&mut rng, Duration::ZERO, p.ttl / 4);
                let rep = between(&mut rng, Duration::ZERO, p.ttl / 4);
                (
                    Faults::default()
                        .with_request_delay(Some(req))
                        .with_reply_delay(Some(rep)),
                    between(&mut rng, ms(100), p.ttl * 2),
                    format!("slow store: request +{req:?}, reply +{rep:?}"),
                )
            }
            _ => {
                let req = between(&mut rng, p.ttl / 4, p.max_request_delay());
                (
                    Faults::default().with_request_delay(Some(req)),
                    between(&mut rng, ms(50), p.ttl),
                    format!("late requests: applied +{req:?}"),
                )
            }
        };
        let window = window.min(p.fault_end.saturating_sub(world.at()));
        world.log(format!("{what} for {window:?}"));
        mem.set_faults(faults);
        tokio::time::sleep(window).await;
        mem.set_faults(Faults::default());
        world.log("store healthy");
    }
}

async fn elector_faults(
    world: Arc<World>,
    electors: Vec<Elector<SimBackend>>,
    p: Params,
    seed: u64,
) {
    let mut rng = SplitMix64::new(seed ^ 0xE1EC_FA17);
    let n = electors.len();
    loop {
        let gap = between(&mut rng, Duration::from_millis(100), p.ttl);
        tokio::time::sleep(gap).await;
        if world.at() >= p.fault_end {
            return;
        }
        // Half of the faults hit the current leader, if any.
        let leader = electors.iter().position(|e| e.token().is_some());
        let i = match leader {
            Some(l) if rng.below_inclusive(1) == 0 => l,
            _ => rng.below_inclusive(n as u64 - 1) as usize,
        };
        match rng.below_inclusive(4) {
            0 | 1 => {
                if world.gates[i].is_closed() {
                    continue;
                }
                let d = between(&mut rng, Duration::from_millis(100), p.ttl * 5 / 2)
                    .min(p.fault_end.saturating_sub(world.at()));
                world.log(format!("e{i} paused for {d:?}"));
                world.gates[i].set_closed(true);
                let w = Arc::clone(&world);
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    w.log(format!("e{i} resumes"));
                    w.gates[i].set_closed(false);
                });
            }
            2 => {
                world.log(format!("e{i} resign()"));
                electors[i].resign();
            }
            _ => {
                if let Some(t) = electors[i].token() {
                    world.log(format!("e{i} work told to return ({t})"));
                    world.returns[i].store(t.get(), Ordering::Release);
                }
            }
        }
    }
}

async fn simulate(seed: u64, mode: Mode) -> Run {
    let p = Params::of(seed);
    let clock = ManualClock::new();
    let world = Arc::new(World {
        origin: TokioInstant::now(),
        clock: clock.clone(),
        mode,
        write_timeout: p.ttl / 4,
        next_id: AtomicU64::new(1),
        rec: Mutex::new(Record {
            open: vec![None; p.n],
            ..Record::default()
        }),
        gates: (0..p.n).map(|_| Gate::default()).collect(),
        returns: (0..p.n).map(|_| AtomicU64::new(0)).collect(),
        rngs: (0..p.n as u64)
            .map(|i| Mutex::new(SplitMix64::new(seed ^ (0xA11CE + i))))
            .collect(),
    });
    let mem = MemoryBackend::new(clock);
    let backend = SimBackend {
        mem: mem.clone(),
        world: Arc::clone(&world),
    };
    world.log(format!("seed {seed}: {p:?}, {mode:?}"));

    let shutdown = CancellationToken::new();
    let mut electors = Vec::new();
    let mut runs = Vec::new();
    let mut acquire_interval = Duration::ZERO;
    for i in 0..p.n {
        let config = ElectionConfig::builder(NAME, format!("e{i}"))
            .ttl(p.ttl)
            .build()
            .expect("valid config");
        acquire_interval = config.acquire_interval();
        let elector = Elector::builder(backend.clone(), config)
            .seed(seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64))
            .build();
        electors.push(elector.clone());
        let run = {
            let e = elector.clone();
            let w = Arc::clone(&world);
            let s = shutdown.clone();
            async move { e.run(s, move |term| lead(Arc::clone(&w), i, term)).await }
        };
        runs.push(tokio::spawn(gated(Arc::clone(&world), i, elector, run)));
    }
    let faults = [
        tokio::spawn(store_faults(Arc::clone(&world), mem.clone(), p, seed)),
        tokio::spawn(elector_faults(
            Arc::clone(&world),
            electors.clone(),
            p,
            seed,
        )),
    ];

    // Faults stop.
    tokio::time::sleep_until(world.origin + p.fault_end).await;
    mem.set_faults(Faults::default());
    for g in &world.gates {
        g.set_closed(false);
    }
    world.log("faults stop");
    let mut errors = Vec::new();
    for f in faults {
        if tokio::time::timeout(p.ttl * 3, f).await.is_err() {
            errors.push("a fault task did not end".to_owned());
        }
    }
    let leader_by = p.leader_by(acquire_interval);
    tokio::time::sleep_until(world.origin + leader_by + p.ttl).await;

    // Shutdown: every run returns Ok, bounded.
    world.log("shutdown");
    shutdown.cancel();
    for (i, r) in runs.into_iter().enumerate() {
        match tokio::time::timeout(p.ttl * 5, r).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.push(format!("e{i} run returned {e}")),
            Ok(Err(e)) => errors.push(format!("e{i} run task failed: {e}")),
            Err(_) => errors.push(format!("e{i} run did not return within 5 TTL of shutdown")),
        }
    }
    let end = world.at();
    let mut rec = std::mem::take(&mut *lock(&world.rec));
    for w in rec.open.iter_mut().filter_map(Option::take) {
        rec.windows.push(Window {
            end: end.min(w.deadline),
            ..w
        });
    }
    if mode == Mode::TrustTermUntilCancelled {
        let open = std::mem::take(&mut rec.term_open);
        rec.windows = std::mem::take(&mut rec.term_windows);
        rec.windows
            .extend(open.into_iter().map(|w| Window { end, ..w }));
    }
    Run {
        seed,
        params: p,
        acquire_interval,
        windows: rec.windows,
        writes: rec.writes,
        applied: rec.applied,
        trace: rec.trace,
        errors,
    }
}

/// Checks one run; `Err` names the first rule broken.
fn check(run: &Run) -> Result<Stats, String> {
    if let Some(e) = run.errors.first() {
        return Err(e.clone());
    }
    // No two terms believed at once (half-open windows on the shared clock).
    let mut windows: Vec<Window> = run
        .windows
        .iter()
        .copied()
        .filter(|w| w.end > w.start)
        .collect();
    windows.sort_by_key(|w| (w.start, w.token));
    let mut latest: Option<Window> = None;
    let mut min_gap: Option<Duration> = None;
    for w in &windows {
        if let Some(prev) = latest {
            if w.start >= prev.end {
                let gap = w.start - prev.end;
                min_gap = Some(min_gap.map_or(gap, |g| g.min(gap)));
            }
            if w.start < prev.end && w.elector != prev.elector {
                return Err(format!(
                    "overlapping leaders: e{} believes {} over [{:?}, {:?}) and e{} believes {} over [{:?}, {:?})",
                    prev.elector,
                    prev.token,
                    prev.start,
                    prev.end,
                    w.elector,
                    w.token,
                    w.start,
                    w.end
                ));
            }
            if w.end > prev.end {
                latest = Some(*w);
            }
        } else {
            latest = Some(*w);
        }
    }
    // Tokens of successive terms strictly increase; one elector per token.
    let mut terms: Vec<(Duration, Token, usize)> = Vec::new();
    for w in &windows {
        match terms.iter().find(|(_, t, _)| *t == w.token) {
            Some((_, _, e)) if *e != w.elector => {
                return Err(format!(
                    "token {} believed by e{e} and e{}",
                    w.token, w.elector
                ));
            }
            Some(_) => {}
            None => terms.push((w.start, w.token, w.elector)),
        }
    }
    for pair in terms.windows(2) {
        if pair[1].1 <= pair[0].1 {
            return Err(format!(
                "token order: e{} elected with {} at {:?} after e{} with {} at {:?}",
                pair[1].2, pair[1].1, pair[1].0, pair[0].2, pair[0].1, pair[0].0
            ));
        }
    }
    // The fence rule, on the order the store applied writes.
    let mut highest: Option<(u64, Token, Duration)> = None;
    for &(id, token, at) in &run.applied {
        if let Some((hid, htoken, hat)) = highest
            && token < htoken
        {
            return Err(format!(
                "fence rule broken: write #{id} with {token} applied at {at:?} after write #{hid} with {htoken} at {hat:?}"
            ));
        }
        if highest.is_none_or(|(_, h, _)| token > h) {
            highest = Some((id, token, at));
        }
    }
    // Outcomes tell the truth.
    let mut stats = Stats {
        terms: terms.len(),
        min_gap,
        ..Stats::default()
    };
    for w in &run.writes {
        let applied = run.applied.iter().any(|a| a.0 == w.id);
        let truthful = match w.outcome {
            WriteOutcome::Applied => {
                stats.applied += 1;
                applied
            }
            WriteOutcome::Stale => {
                stats.stale += 1;
                !applied
            }
            WriteOutcome::Failed => {
                stats.failed += 1;
                !applied
            }
            WriteOutcome::Unknown => {
                stats.unknown += 1;
                true
            }
        };
        if !truthful {
            return Err(format!(
                "write #{} by e{} with {} (sent {:?}, done {:?}) reported {:?} but applied = {applied}",
                w.id, w.elector, w.token, w.sent, w.done, w.outcome
            ));
        }
    }
    // Liveness: a leader by 2 × TTL + acquire interval after the faults (and the last delayed
    // request) stop.
    let by = run.params.leader_by(run.acquire_interval);
    if !windows.iter().any(|w| w.start <= by && w.end > by) {
        return Err(format!(
            "no leader at {by:?} (faults stopped at {:?}; bound 2 x TTL + acquire interval after the last delayed request)",
            run.params.fault_end
        ));
    }
    let quiet = run.params.fault_end + run.params.max_request_delay();
    stats.max_leader_wait = windows
        .iter()
        .filter(|w| w.end > quiet)
        .map(|w| w.start.saturating_sub(quiet))
        .min()
        .unwrap_or(Duration::MAX);
    Ok(stats)
}

fn run_seed(seed: u64, mode: Mode) -> Run {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(simulate(seed, mode))
}

fn report(run: &Run, violation: &str) -> String {
    let tail = run.trace.len().saturating_sub(120);
    format!(
        "seed {} violates: {violation}\nreplay: REDLEASE_SIM_SEED={} cargo test -p lease-tokio --test elector_simulation\n{:?}\ntrace (last {} lines):\n{}",
        run.seed,
        run.seed,
        run.params,
        run.trace.len() - tail,
        run.trace[tail..].join("\n")
    )
}

/// A run and its check.
type Checked = (Run, Result<Stats, String>);

/// Runs `seeds` in `mode` on a separate thread, bounded in wall time; returns each seed's
/// check result and the wall time taken.
fn run_seeds(seeds: Vec<u64>, mode: Mode, limit: Duration) -> (Vec<Checked>, Duration) {
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let (tx, rx) = std::sync::mpsc::channel();
    let started = std::time::Instant::now();
    {
        let current = Arc::clone(&current);
        std::thread::spawn(move || {
            let mut out = Vec::new();
            for seed in seeds {
                current.store(seed, Ordering::Release);
                let run = run_seed(seed, mode);
                let checked = check(&run);
                out.push((run, checked));
            }
            let _ = tx.send(out);
        });
    }
    match rx.recv_timeout(limit) {
        Ok(out) => (out, started.elapsed()),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "the simulation did not finish within {limit:?} (wall time); stuck at seed {s} (replay: REDLEASE_SIM_SEED={s})",
            s = current.load(Ordering::Acquire)
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!(
            "the simulation panicked at seed {s} (replay: REDLEASE_SIM_SEED={s})",
            s = current.load(Ordering::Acquire)
        ),
    }
}

fn seeds_from_env(default: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("REDLEASE_SIM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("REDLEASE_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}

fn print_first_violation(runs: &[Checked]) {
    if let Some((run, Err(v))) = runs.iter().find(|(_, c)| c.is_err()) {
        println!("first violation, seed {}: {v}", run.seed);
    }
}

#[test]
fn elector_loop_simulation_holds_every_property() {
    let seeds = seeds_from_env(200);
    let replay = seeds.len() == 1;
    let limit = Duration::from_secs(60) + Duration::from_secs(2) * seeds.len() as u32;
    let (runs, wall) = run_seeds(seeds, Mode::Correct, limit);
    let mut total = Stats::default();
    for (run, checked) in &runs {
        match checked {
            Ok(s) => {
                total.add(s);
                if replay {
                    println!("{}", run.trace.join("\n"));
                }
            }
            Err(v) => panic!("{}", report(run, v)),
        }
    }
    println!("{} seeds in {wall:?}: {total:?}", runs.len());
    if runs.len() >= 50 {
        // The faults really happened: terms changed hands, stale leaders were fenced out,
        // replies were lost and the store refused.
        assert!(total.terms >= 3 * runs.len(), "{total:?}");
        assert!(total.stale >= runs.len() / 5, "{total:?}");
        assert!(total.unknown >= runs.len() / 5, "{total:?}");
        assert!(total.failed >= runs.len() / 5, "{total:?}");
    }
}

#[test]
fn seeds_replay_exactly() {
    for seed in [3, 17] {
        let a = run_seed(seed, Mode::Correct);
        let b = run_seed(seed, Mode::Correct);
        assert_eq!(
            a.trace, b.trace,
            "seed {seed} did not replay the same trace"
        );
    }
}

#[test]
fn unfenced_writes_are_caught() {
    let seeds: Vec<u64> = (0..40).collect();
    let (runs, _) = run_seeds(seeds, Mode::UnfencedWrites, Duration::from_secs(120));
    let caught: Vec<u64> = runs
        .iter()
        .filter(|(_, c)| {
            c.as_ref()
                .is_err_and(|v| v.starts_with("fence rule broken"))
        })
        .map(|(r, _)| r.seed)
        .collect();
    print_first_violation(&runs);
    println!(
        "fence rule violations caught in {} of 40 seeds: {caught:?}",
        caught.len()
    );
    assert!(
        caught.len() >= 10,
        "a fencer without the mark check must be caught in at least 10 of 40 seeds; caught in {caught:?}"
    );
}

#[test]
fn trusting_the_term_past_its_deadline_is_caught() {
    let seeds: Vec<u64> = (0..40).collect();
    let (runs, _) = run_seeds(
        seeds,
        Mode::TrustTermUntilCancelled,
        Duration::from_secs(120),
    );
    let caught: Vec<u64> = runs
        .iter()
        .filter(|(_, c)| {
            c.as_ref()
                .is_err_and(|v| v.starts_with("overlapping leaders"))
        })
        .map(|(r, _)| r.seed)
        .collect();
    print_first_violation(&runs);
    println!(
        "overlapping leaders caught in {} of 40 seeds: {caught:?}",
        caught.len()
    );
    assert!(
        caught.len() >= 10,
        "trusting a term until its cancellation must be caught in at least 10 of 40 seeds; caught in {caught:?}"
    );
}

#[test]
fn fast_store_clock_is_caught() {
    let seeds: Vec<u64> = (0..40).collect();
    let (runs, _) = run_seeds(seeds, Mode::FastStoreClock, Duration::from_secs(120));
    let caught: Vec<u64> = runs
        .iter()
        .filter(|(_, c)| {
            c.as_ref()
                .is_err_and(|v| v.starts_with("overlapping leaders"))
        })
        .map(|(r, _)| r.seed)
        .collect();
    print_first_violation(&runs);
    println!(
        "overlapping leaders (fast store clock) caught in {} of 40 seeds: {caught:?}",
        caught.len()
    );
    assert!(
        caught.len() >= 10,
        "a store clock running 5/4 as fast must be caught in at least 10 of 40 seeds; caught in {caught:?}"
    );
}
