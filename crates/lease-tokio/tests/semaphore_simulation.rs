//! Deterministic simulation of the shipped semaphore: M workers (N + 1 to N + 3) each obtaining
//! permits of one semaphore of `N` with the real [`lease_tokio::Semaphore`] (its `Locker`, the
//! obtain loop, the renewal task, release on drop), over one shared [`MemoryBackend`], on a
//! current-thread tokio runtime with paused (virtual) time, one runtime per seed.
//!
//! Like `elector_simulation.rs`, nothing re-implements the driver. The store is a
//! `MemoryBackend` behind a thin adapter ([`SimBackend`]) on the network of `common/sim.rs`
//! (shared with the read-write and fair lock simulations) that sets the store's clock to
//! tokio's before each call, and delays calls: a slow request or reply (around the operation
//! timeout, so some calls are applied after the caller gave up), or a lost reply (far beyond
//! every deadline: applied, outcome unknown), while the faults last.
//!
//! Each worker obtains (auto-renewed, with retries and a wait), then, while its permit says
//! `held()`, writes through `Permit::permit_fencer()` every eighth of a TTL; sometimes it
//! pauses between that check and its write (up to two TTLs: a stale holder's write), and it
//! releases after a while, or drops the permit.
//!
//! The checks, for every seed: whenever a worker observes `held()`, the store holds its permit
//! current; the observed belief spans (first to last `held()` of each permit) never overlap
//! more than `N` deep; the spans of accepted writes of each permit never overlap more than `N`
//! deep (the resource's view); the bound is reached (not vacuous).
//!
//! Seeds: 60 by default; `SEM_SIM_SEEDS=<n>`, `SEM_SIM_SEED=<s>` replays one.
//!
//! Negative control (`a_broken_count_is_caught`): the adapter asks the store for `N + 1`
//! permits on every obtain (a store that admits `N + 1`); the checkers must report it.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::sim::{Faults, Net, lock, max_overlap, ms, ms_of};
use lease_core::memory::{MemoryBackend, MemoryPermitFencer, MemoryWrite};
use lease_core::rng::SplitMix64;
use lease_core::semaphore::{
    PermitCount, PermitFencing, PermitRequest, PermitWriteOutcome, SemaphoreInfo, semaphore_spec,
};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseInfo, LeaseSpec, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, RetryStrategy, Token,
};
use lease_tokio::{LockOptions, Locker};

const NAME: &str = "{sim}";

#[derive(Debug)]
struct Params {
    n: u32,
    workers: usize,
    faults: Faults,
}

impl Params {
    fn draw(rng: &mut SplitMix64) -> Params {
        let n = 1 + u32::try_from(rng.below_inclusive(2)).expect("small");
        let ttl = ms(200 + rng.below_inclusive(600));
        let workers = n as usize + 1 + usize::try_from(rng.below_inclusive(2)).expect("small");
        Params {
            n,
            workers,
            faults: Faults::draw(rng, ttl),
        }
    }
}

/// What the world records and checks.
#[derive(Default)]
struct Record {
    /// (owner, token) → first and last instant a worker observed `held()`.
    beliefs: BTreeMap<(String, u64), (Duration, Duration)>,
    /// (owner, token) → first and last accepted write.
    accepted: BTreeMap<(String, u64), (Duration, Duration)>,
    refused: usize,
    violations: Vec<String>,
}

struct World {
    n: u32,
    workers: usize,
    broken: bool,
    net: Net,
    rec: Mutex<Record>,
}

impl World {
    /// A worker observed `held()` for permit (owner, token): the store must hold it current.
    fn observe(&self, owner: &str, token: Token, info: &SemaphoreInfo) {
        let t = self.net.at();
        let mut rec = lock(&self.rec);
        if !info.holders.iter().any(|h| h.owner == owner) {
            rec.violations.push(format!(
                "{t:?}: {owner} observes held(), the store has {:?}",
                info.holders
            ));
        }
        let e = rec
            .beliefs
            .entry((owner.to_owned(), token.get()))
            .or_insert((t, t));
        e.1 = t;
    }
}

/// The memory store, on tokio's clock, with delays.
#[derive(Clone)]
struct SimBackend {
    world: Arc<World>,
}

impl SimBackend {
    async fn call<T>(&self, f: impl AsyncFnOnce(&MemoryBackend) -> T) -> T {
        self.world.net.call(f).await
    }
}

fn unsupported() -> BackendError {
    BackendError::Unsupported("the simulation keeps only semaphores".into())
}

#[async_trait]
impl LeaseBackend for SimBackend {
    async fn acquire(&self, _: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        Err(unsupported())
    }
    async fn renew(&self, _: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        Err(unsupported())
    }
    async fn release(&self, _: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        Err(unsupported())
    }
    async fn remaining(&self, _: &LeaseSpec, _: &Owner) -> Result<Option<Duration>, BackendError> {
        Err(unsupported())
    }
    async fn inspect(&self, _: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        Err(unsupported())
    }
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.world.net.mem.check_semaphore(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        let req = if self.world.broken {
            // Broken on purpose: a store that admits one permit more.
            let more = PermitCount::new(req.permits.get() + 1).expect("count");
            PermitRequest::new(req.acquire.clone(), more)
        } else {
            req.clone()
        };
        self.call(async |m: &MemoryBackend| m.acquire_permit(&req).await)
            .await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.call(async |m: &MemoryBackend| m.renew_permit(req).await)
            .await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.call(async |m: &MemoryBackend| m.release_permit(req).await)
            .await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.call(async |m: &MemoryBackend| m.permit_remaining(spec, owner).await)
            .await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.world.net.sync();
        self.world.net.mem.inspect_semaphore(spec).await
    }
}

/// The permit's fencer: the memory permit fencer, on tokio's clock and the same delays,
/// recording every accepted write.
#[derive(Clone)]
struct SimPermitFencer {
    backend: SimBackend,
    inner: MemoryPermitFencer,
    owner: String,
}

impl SimPermitFencer {
    async fn write(&self) -> Result<PermitWriteOutcome, BackendError> {
        let token = self.inner.token();
        let world = Arc::clone(&self.backend.world);
        let owner = self.owner.clone();
        let inner = self.inner.clone();
        self.backend
            .call(async move |_: &MemoryBackend| {
                let write = MemoryWrite::Set {
                    key: format!("{NAME}:resource"),
                    value: format!("{owner}:{}", token.get()),
                };
                let got = inner.apply(write).await;
                let t = world.net.at();
                let mut rec = lock(&world.rec);
                match &got {
                    Ok(PermitWriteOutcome::Applied) => {
                        let e = rec.accepted.entry((owner, token.get())).or_insert((t, t));
                        e.1 = t;
                    }
                    Ok(_) => rec.refused += 1,
                    Err(_) => {}
                }
                got
            })
            .await
    }
}

impl PermitFencing for SimBackend {
    type PermitFencer = SimPermitFencer;
    fn permit_fencer(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<SimPermitFencer> {
        Some(SimPermitFencer {
            backend: self.clone(),
            inner: self.world.net.mem.permit_fencer(spec, owner, token)?,
            owner: owner.as_str().to_owned(),
        })
    }
}

/// One worker: obtain, write while held (sometimes pausing between the check and the write),
/// release or drop, again, until the end.
async fn worker(world: Arc<World>, locker: Locker<SimBackend>) {
    let ttl = world.net.faults.ttl;
    let ttl_ms = ms_of(ttl);
    let sem = locker.semaphore(NAME, world.n).expect("semaphore");
    let spec = semaphore_spec(NAME, None).expect("spec");
    while world.net.at() < world.net.faults.run_for {
        let options = LockOptions::new()
            .auto_renew(ttl / 3)
            .retry(RetryStrategy::linear(ttl / 4).expect("retry"))
            .wait(ttl * 2)
            .operation_timeout(ttl / 5);
        let permit = match tokio::time::timeout(ttl * 10, sem.acquire(ttl, options)).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => {
                tokio::time::sleep(ms(world.net.draw(ttl_ms))).await;
                continue;
            }
            Err(_) => {
                lock(&world.rec)
                    .violations
                    .push("an obtain outlived its bounds".into());
                return;
            }
        };
        let token = permit.fence_token().expect("fenced");
        let fencer = permit.permit_fencer().expect("fenced");
        let hold = ttl * u32::try_from(1 + world.net.draw(3)).expect("small");
        let until = world.net.at() + hold;
        while world.net.at() < until && permit.held() {
            world.net.sync();
            let info = world.net.mem.inspect_semaphore_now(&spec).expect("inspect");
            world.observe(permit.owner(), token, &info);
            if world.net.faulty() && world.net.draw(99) < 5 {
                // A pause between the check and the write: a stale holder's write.
                tokio::time::sleep(ms(world.net.draw(ttl_ms * 2))).await;
            }
            let _ = tokio::time::timeout(ttl * 4, fencer.write()).await;
            tokio::time::sleep(ttl / 8).await;
        }
        if world.net.draw(1) == 0 {
            let _ = tokio::time::timeout(ttl * 4, permit.release()).await;
        } else {
            drop(permit);
        }
        tokio::time::sleep(ms(world.net.draw(ttl_ms / 2))).await;
    }
}

struct Outcome {
    n: usize,
    violations: Vec<String>,
    peak_beliefs: usize,
    peak_resource: usize,
    refused: usize,
}

fn run(seed: u64, broken: bool) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut rng = SplitMix64::new(seed);
        let p = Params::draw(&mut rng);
        let world = Arc::new(World {
            n: p.n,
            workers: p.workers,
            broken,
            net: Net::new(p.faults, rng),
            rec: Mutex::new(Record::default()),
        });
        let mut tasks = Vec::new();
        for _ in 0..world.workers {
            // Each worker its own locker: separate processes sharing one store.
            let locker = Locker::new(SimBackend {
                world: Arc::clone(&world),
            });
            tasks.push(tokio::spawn(worker(Arc::clone(&world), locker)));
        }
        let bound = world.net.faults.run_for + world.net.faults.ttl * 30;
        for t in tasks {
            match tokio::time::timeout(bound, t).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => lock(&world.rec)
                    .violations
                    .push(format!("a worker failed: {e}")),
                Err(_) => lock(&world.rec)
                    .violations
                    .push("a worker never ended".into()),
            }
        }
        let n = world.n as usize;
        let mut rec = lock(&world.rec);
        let peak_beliefs = max_overlap(rec.beliefs.values().copied());
        let peak_resource = max_overlap(rec.accepted.values().copied());
        if peak_beliefs > n {
            rec.violations
                .push(format!("{peak_beliefs} workers believed at once, N = {n}"));
        }
        if peak_resource > n {
            rec.violations.push(format!(
                "the resource accepted {peak_resource} permits at once, N = {n}"
            ));
        }
        Outcome {
            n,
            violations: std::mem::take(&mut rec.violations),
            peak_beliefs,
            peak_resource,
            refused: rec.refused,
        }
    })
}

fn seeds() -> Vec<u64> {
    common::sim::seeds("SEM_SIM_SEED", 60)
}

#[test]
fn the_shipped_semaphore_keeps_at_most_n() {
    let seeds = seeds();
    let (mut full_beliefs, mut full_resource, mut refused) = (0, 0, 0);
    for &seed in &seeds {
        let o = run(seed, false);
        assert!(
            o.violations.is_empty(),
            "seed {seed} (replay: SEM_SIM_SEED={seed}): {:#?}",
            &o.violations[..o.violations.len().min(10)]
        );
        full_beliefs += usize::from(o.peak_beliefs == o.n);
        full_resource += usize::from(o.peak_resource == o.n);
        refused += o.refused;
    }
    eprintln!(
        "{} worlds: N believers at once in {full_beliefs}, N permits writing at once in \
         {full_resource}; {refused} writes refused",
        seeds.len()
    );
    if seeds.len() > 1 {
        assert!(full_beliefs * 2 > seeds.len(), "{full_beliefs}");
        assert!(full_resource * 2 > seeds.len(), "{full_resource}");
        assert!(
            refused > 0,
            "no stale write was refused: the faults are too mild"
        );
    }
}

/// Negative control: a store that admits `N + 1` is caught.
#[test]
fn a_broken_count_is_caught() {
    let total = 20;
    let caught = (0..total)
        .filter(|&seed| {
            let o = run(seed, true);
            o.violations.iter().any(|v| v.contains("at once"))
        })
        .count();
    eprintln!("broken count caught in {caught} of {total}");
    assert!(caught * 2 > total as usize, "caught in {caught} of {total}");
}
