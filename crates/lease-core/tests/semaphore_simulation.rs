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
//! network: a write sent before a pause or on a slow leg arrives late. The world (machines,
//! clocks, network, pauses) is `common/world.rs`, shared with the read-write and fair lock
//! simulations; this file names the semaphore's operations and checks.
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

#[path = "common/world.rs"]
mod world;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{LockOptions, ObtainPlan};
use lease_core::memory::{MemoryBackend, MemoryWrite};
use lease_core::rng::SplitMix64;
use lease_core::semaphore::{PermitCount, PermitRequest, PermitWriteOutcome, semaphore_spec};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, Instant, LeaseSpec, Owner, ReleaseRequest,
    RenewOutcome, RenewRequest, RetryStrategy, Token,
};
use world::{Believer, Kind, Net, START, World, max_overlap, ms};

const NAME: &str = "{sim}";

/// One simulated world's parameters, drawn from its seed.
#[derive(Clone, Debug)]
struct Params {
    n: u32,
    net: Net,
}

impl Params {
    fn draw(rng: &mut SplitMix64) -> Params {
        let n = 1 + u32::try_from(rng.below_inclusive(2)).expect("small");
        let ttl_ms = 200 + rng.below_inclusive(800);
        let storm = rng.below_inclusive(2) == 0;
        let machines = n as usize + 1 + usize::try_from(rng.below_inclusive(3)).expect("small");
        Params {
            n,
            net: Net::draw(rng, machines, ttl_ms, storm),
        }
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

/// The semaphore's permits, asked of the store and checked.
struct Semaphore {
    n: u32,
    spec: Arc<LeaseSpec>,
    /// The count the store is asked for (N, or N + 1 when broken).
    asked: PermitCount,
    /// (owner, token) → first and last accepted write.
    spans: BTreeMap<(String, u64), (Instant, Instant)>,
    report: Report,
}

impl Kind for Semaphore {
    const WRITES: bool = true;
    const CRASHES: bool = false;

    fn plan(&mut self, _node: usize, ttl: Duration, owner: String) -> ObtainPlan {
        LockOptions::new()
            .auto_renew(ttl / 3)
            .retry(RetryStrategy::linear(ttl / 4).expect("retry"))
            .wait(ttl * 3)
            .operation_timeout(ttl / 5)
            .plan_permit(NAME, ttl, || owner)
            .expect("plan")
    }

    fn acquire(
        &mut self,
        store: &MemoryBackend,
        _t: Instant,
        _node: usize,
        req: &AcquireRequest,
    ) -> Result<AcquireOutcome, BackendError> {
        store.acquire_permit_now(&PermitRequest::new(req.clone(), self.asked))
    }

    fn renew(
        &mut self,
        store: &MemoryBackend,
        _t: Instant,
        _node: usize,
        req: &RenewRequest,
    ) -> Result<RenewOutcome, BackendError> {
        store.renew_permit_now(req)
    }

    fn release(&mut self, store: &MemoryBackend, _t: Instant, _node: usize, req: &ReleaseRequest) {
        let _ = store.release_permit_now(req);
    }

    fn write(
        &mut self,
        store: &MemoryBackend,
        t: Instant,
        owner: &Owner,
        token: Token,
        violations: &mut Vec<String>,
    ) {
        let write = MemoryWrite::Set {
            key: format!("{NAME}:resource"),
            value: format!("{}:{}", owner.as_str(), token.get()),
        };
        let got = store
            .permit_fenced_now(&self.spec, owner, token, &[write])
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
            Err(e) => violations.push(format!("write failed: {e}")),
        }
    }

    /// Whoever believes at `t` has a current permit at the store.
    fn check(
        &mut self,
        t: Instant,
        store: &MemoryBackend,
        believers: &[Believer<'_>],
        violations: &mut Vec<String>,
    ) {
        let info = match store.inspect_semaphore_now(&self.spec) {
            Ok(info) => info,
            Err(e) => {
                violations.push(format!("inspect failed: {e}"));
                return;
            }
        };
        for b in believers {
            if !info.holders.iter().any(|h| h.owner == b.owner) {
                violations.push(format!(
                    "{t:?}: machine {} believes it holds {}'s permit, the store has {:?}",
                    b.node, b.owner, info.holders
                ));
            }
        }
        if believers.len() > self.n as usize {
            violations.push(format!(
                "{t:?}: {} machines believe, N = {}",
                believers.len(),
                self.n
            ));
        }
    }
}

/// Runs world `seed`, then checks the belief intervals and the resource's spans.
fn run(seed: u64, broken: Broken) -> Report {
    let mut rng = SplitMix64::new(seed);
    let p = Params::draw(&mut rng);
    let asked = PermitCount::new(p.n + u32::from(broken == Broken::Count)).expect("count");
    let kind = Semaphore {
        n: p.n,
        spec: Arc::new(semaphore_spec(NAME, None).expect("spec")),
        asked,
        spans: BTreeMap::new(),
        report: Report::default(),
    };
    let slow = |_: &mut SplitMix64| 900_000;
    let ppm: Option<&dyn Fn(&mut SplitMix64) -> u64> = match broken {
        Broken::SlowClock => Some(&slow),
        _ => None,
    };
    let ended = World::new(p.net, rng, kind, ppm).run();
    let mut kind = ended.kind;
    let n = kind.n as usize;
    kind.report.violations = ended.violations;
    let peak = max_overlap(ended.beliefs.iter().map(|b| (b.since, b.until)));
    kind.report.peak_believers = peak;
    if peak > n {
        kind.report
            .violations
            .push(format!("{peak} belief intervals overlap, N = {n}"));
    }
    let peak = max_overlap(kind.spans.values().copied());
    kind.report.peak_resource = peak;
    if peak > n {
        kind.report.violations.push(format!(
            "the resource accepted {peak} permits at once, N = {n}"
        ));
    }
    kind.report
}

fn seeds() -> Vec<u64> {
    world::seeds("SEM_SIM_SEED", 400)
}

#[test]
fn at_most_n_holders_believe_and_write() {
    let mut full_belief = 0;
    let mut full_resource = 0;
    let mut refused = 0;
    let seeds = seeds();
    for &seed in &seeds {
        let report = run(seed, Broken::Nothing);
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
        let report = run(seed, Broken::Count);
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
    assert_eq!(max_overlap(Vec::<(Instant, Instant)>::new()), 0);
    assert_eq!(max_overlap([(t(0), t(5)), (t(5), t(9))]), 2);
    assert_eq!(max_overlap([(t(0), t(4)), (t(5), t(9))]), 1);
    assert_eq!(max_overlap([(t(0), t(9)), (t(1), t(2)), (t(3), t(4))]), 2);
}

/// Negative control: machines whose clocks run slower than the drift margin allows believe
/// they hold permits the store has expired, and the belief checker says so.
#[test]
fn a_slow_clock_is_caught() {
    let total = 40;
    let caught = (0..total)
        .filter(|&seed| {
            let report = run(seed, Broken::SlowClock);
            report
                .violations
                .iter()
                .any(|v| v.contains("the store has"))
        })
        .count();
    eprintln!("slow clocks caught in {caught} of {total}");
    assert!(caught * 2 > total as usize, "caught in {caught} of {total}");
}
