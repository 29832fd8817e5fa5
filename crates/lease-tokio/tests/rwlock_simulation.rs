//! Deterministic simulation of the shipped read-write lock: writers (1 or 2, each obtaining
//! the plain lock of the key with [`Locker::obtain`]) and readers (2 or 3, each with
//! [`lease_tokio::ReadLock::acquire`]) over one shared [`MemoryBackend`], on a current-thread
//! tokio runtime with paused (virtual) time, one runtime per seed.
//!
//! Nothing re-implements the driver: the obtain loop, the renewal task and release on drop are
//! the shipped ones. The store sits behind a thin adapter ([`SimBackend`]) on the shared
//! seeded network of `common/sim.rs` (slow requests and replies around the operation timeout,
//! lost replies, while the faults last). Readers and writers take their tokens from one fence
//! key. Each worker obtains, then, while its hold says `held()`, checks it against the store
//! every eighth of a TTL, and releases after a while or drops the hold; a monitor reads the
//! store every sixteenth of a TTL.
//!
//! The checks, for every seed:
//!
//! - **never a writer beside a reader, nor two writers**: the monitor never reads a writer
//!   beside current readers; the belief spans (first to last `held()` of each hold) of a writer
//!   overlap no other hold's;
//! - **no local deadline later than the store's**: whenever a worker observes `held()`, the
//!   store holds its hold with at least the time left that the handle's `valid_until` claims;
//! - **writer preference**: no reader is admitted (but a current reader's takeover) while a
//!   writer's mark stands, and a writer refused for readers is followed by a writer's hold
//!   within the bound of the machine-level simulation (7 TTLs), unless the mark lapsed;
//! - **tokens rise** in the order the store granted the holds.
//!
//! Seeds: 40 by default; `RW_SIM_SEEDS=<n>`, `RW_SIM_SEED=<s>` replays one (its parameters
//! and fault draws; the driver's owners and retry jitter come from the OS, as in production,
//! so the interleaving of a replay may differ).
//!
//! Negative control (`a_reader_beside_a_writer_is_caught`): the adapter keeps the readers at
//! another key, where the writer never sees them; the checkers must report a writer beside a
//! reader.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::sim::{Faults, Net, lock, ms, ms_of};
use lease_core::memory::MemoryBackend;
use lease_core::rng::SplitMix64;
use lease_core::rwlock::SharedInfo;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, Instant, LeaseBackend, LeaseInfo, LeaseSpec,
    Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, RetryStrategy, Token,
};
use lease_tokio::{LockOptions, Locker};

const KEY: &str = "{sim}";
const FENCE: &str = "{sim}:fence";
const SHADOW: &str = "{sim}:shadow";
/// The writer-preference bound of `lease-core/tests/rwlock_simulation.rs`, in TTLs.
const PREFERENCE_BOUND_TTLS: u32 = 7;

/// What the world records and checks.
#[derive(Default)]
struct Record {
    /// (owner, token) → whether a writer's, and the first and last instant `held()` was seen.
    beliefs: BTreeMap<(String, u64), (bool, Duration, Duration)>,
    last_token: u64,
    /// Since when a writer waits for readers (the store's clock).
    waiting_since: Option<Instant>,
    waits: usize,
    longest_wait_ttls: f64,
    peak_readers: usize,
    violations: Vec<String>,
}

struct World {
    writers: usize,
    readers: usize,
    broken: bool,
    net: Net,
    spec: Arc<LeaseSpec>,
    shadow: Arc<LeaseSpec>,
    rec: Mutex<Record>,
}

impl World {
    fn ttl(&self) -> Duration {
        self.net.faults.ttl
    }

    fn violation(&self, v: String) {
        lock(&self.rec).violations.push(v);
    }

    /// The spec a reader's operation goes to: the key, or (broken) the shadow key.
    fn reader_spec(&self, spec: &Arc<LeaseSpec>) -> Arc<LeaseSpec> {
        if self.broken {
            Arc::clone(&self.shadow)
        } else {
            Arc::clone(spec)
        }
    }

    /// The writer and the readers as the store holds them (the broken store's readers at
    /// the shadow key), read now.
    fn store_view(&self) -> SharedInfo {
        self.net.sync();
        let mut info = self
            .net
            .mem
            .inspect_shared_now(&self.spec)
            .expect("inspect");
        if self.broken {
            info.readers = self
                .net
                .mem
                .inspect_shared_now(&self.shadow)
                .expect("inspect")
                .readers;
        }
        info
    }

    /// A grant or refusal the store just applied at `t` (readers' and writers' alike).
    fn granted(
        &self,
        t: Instant,
        writer: bool,
        owner: &str,
        got: &AcquireOutcome,
        before: &SharedInfo,
    ) {
        let mut rec = lock(&self.rec);
        match got {
            AcquireOutcome::Acquired { token, .. } => {
                let token = token.map_or(0, |t| t.get());
                if token <= rec.last_token {
                    let last = rec.last_token;
                    rec.violations
                        .push(format!("{t:?}: {owner} granted token {token} after {last}"));
                }
                rec.last_token = rec.last_token.max(token);
                let reading = before.readers.iter().any(|r| r.owner == owner);
                if !writer && before.writer_waiting.is_some() && !reading {
                    rec.violations.push(format!(
                        "{t:?}: reader {owner} admitted while a writer waits"
                    ));
                }
            }
            AcquireOutcome::Held { holder: None, .. } if writer => {
                rec.waiting_since.get_or_insert(t);
            }
            _ => {}
        }
    }

    /// The monitor's reading: exclusion at the store, and the writer's wait.
    fn monitor(&self) {
        let info = self.store_view();
        let t = self.net.now();
        let ttl = self.ttl();
        let mut rec = lock(&self.rec);
        rec.peak_readers = rec.peak_readers.max(info.readers.len());
        if let Some(w) = &info.writer
            && !info.readers.is_empty()
        {
            rec.violations.push(format!(
                "{t:?}: the store holds writer {} beside readers {:?}",
                w.owner, info.readers
            ));
        }
        if let Some(since) = rec.waiting_since {
            if info.writer.is_some() {
                let waited = (t - since).as_secs_f64() / ttl.as_secs_f64();
                rec.longest_wait_ttls = rec.longest_wait_ttls.max(waited);
                rec.waits += 1;
                if waited > f64::from(PREFERENCE_BOUND_TTLS) {
                    rec.violations.push(format!(
                        "{t:?}: a writer refused for readers at {since:?} waited {waited:.2} TTLs"
                    ));
                }
                rec.waiting_since = None;
            } else if info.writer_waiting.is_none() {
                rec.waiting_since = None;
            }
        }
    }

    /// A worker observed `held()` with `left` on its local deadline.
    fn observe(&self, writer: bool, owner: &str, token: Token, left: Duration) {
        let info = self.store_view();
        let t = self.net.at();
        let held = if writer {
            info.writer.as_ref().filter(|w| w.owner == owner)
        } else {
            info.readers.iter().find(|r| r.owner == owner)
        };
        let mut rec = lock(&self.rec);
        match held {
            None => rec.violations.push(format!(
                "{t:?}: {owner} observes held(), the store has {:?} and {:?}",
                info.writer, info.readers
            )),
            Some(h) if h.remaining < left => rec.violations.push(format!(
                "{t:?}: {owner}'s local deadline is {left:?} away, the store's {:?}",
                h.remaining
            )),
            Some(_) => {}
        }
        let e = rec
            .beliefs
            .entry((owner.to_owned(), token.get()))
            .or_insert((writer, t, t));
        e.2 = t;
    }
}

/// The memory store, on tokio's clock, with delays; readers at the shadow key when broken.
#[derive(Clone)]
struct SimBackend {
    world: Arc<World>,
}

impl SimBackend {
    async fn call<T>(&self, f: impl AsyncFnOnce(&MemoryBackend) -> T) -> T {
        self.world.net.call(f).await
    }

    /// An acquire, applied with the state before it (for the checks).
    async fn acquire_as(
        &self,
        writer: bool,
        req: &AcquireRequest,
    ) -> Result<AcquireOutcome, BackendError> {
        let world = Arc::clone(&self.world);
        let req = if writer {
            req.clone()
        } else {
            AcquireRequest::new(world.reader_spec(&req.spec), req.owner.clone(), req.ttl)
        };
        self.call(async |m: &MemoryBackend| {
            let before = m.inspect_shared_now(&req.spec)?;
            let got = if writer {
                m.acquire_now(&req)?
            } else {
                m.acquire_shared_now(&req)?
            };
            world.granted(world.net.now(), writer, req.owner.as_str(), &got, &before);
            Ok(got)
        })
        .await
    }
}

#[async_trait]
impl LeaseBackend for SimBackend {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.acquire_as(true, req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.call(async |m: &MemoryBackend| m.renew(req).await)
            .await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.call(async |m: &MemoryBackend| m.release(req).await)
            .await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.call(async |m: &MemoryBackend| m.remaining(spec, owner).await)
            .await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.call(async |m: &MemoryBackend| m.inspect(spec).await)
            .await
    }
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.world.net.mem.check_shared(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.acquire_as(false, req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let req = RenewRequest::new(
            self.world.reader_spec(&req.spec),
            req.owner.clone(),
            req.ttl,
        );
        self.call(async |m: &MemoryBackend| m.renew_shared(&req).await)
            .await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let req = ReleaseRequest::new(self.world.reader_spec(&req.spec), req.owner.clone());
        self.call(async |m: &MemoryBackend| m.release_shared(&req).await)
            .await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        let spec = self.world.reader_spec(&Arc::new(spec.clone()));
        self.call(async |m: &MemoryBackend| m.shared_remaining(&spec, owner).await)
            .await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.world.net.sync();
        self.world.net.mem.inspect_shared(spec).await
    }
}

/// One worker: obtain (a writer the plain lock, a reader a read hold), check while held,
/// release or drop, again, until the end.
async fn worker(world: Arc<World>, locker: Locker<SimBackend>, writer: bool) {
    let ttl = world.ttl();
    let ttl_ms = ms_of(ttl);
    let read = locker.shared(KEY).expect("a read-write lock");
    while world.net.at() < world.net.faults.run_for {
        let options = LockOptions::new()
            .auto_renew(ttl / 3)
            .retry(RetryStrategy::linear(ttl / 4).expect("retry"))
            .operation_timeout(ttl / 5)
            .fence_key(FENCE);
        let obtain = async {
            if writer {
                let options = options.wait(ttl * (PREFERENCE_BOUND_TTLS + 2));
                locker.obtain(KEY, ttl, options).await.map(Hold::Write)
            } else {
                read.acquire(ttl, options.wait(ttl * 3))
                    .await
                    .map(Hold::Read)
            }
        };
        let hold = match tokio::time::timeout(ttl * 20, obtain).await {
            Ok(Ok(hold)) => hold,
            Ok(Err(_)) => {
                tokio::time::sleep(ms(world.net.draw(ttl_ms))).await;
                continue;
            }
            Err(_) => {
                world.violation("an obtain outlived its bounds".into());
                return;
            }
        };
        let token = hold.token();
        let until = world.net.at() + ttl * u32::try_from(1 + world.net.draw(2)).expect("small");
        while world.net.at() < until && hold.held() {
            let left = hold
                .valid_until()
                .saturating_duration_since(tokio::time::Instant::now());
            world.observe(writer, &hold.owner(), token, left);
            tokio::time::sleep(ttl / 8).await;
        }
        if world.net.draw(1) == 0 {
            let _ = tokio::time::timeout(ttl * 4, hold.release()).await;
        } else {
            drop(hold);
        }
        tokio::time::sleep(ms(world.net.draw(ttl_ms / 2))).await;
    }
}

/// A writer's lock or a reader's hold.
enum Hold {
    Write(lease_tokio::Lock<SimBackend>),
    Read(lease_tokio::ReadGuard<SimBackend>),
}

impl Hold {
    fn token(&self) -> Token {
        match self {
            Hold::Write(l) => l.fence_token(),
            Hold::Read(l) => l.fence_token(),
        }
        .expect("fenced")
    }
    fn held(&self) -> bool {
        match self {
            Hold::Write(l) => l.held(),
            Hold::Read(l) => l.held(),
        }
    }
    fn owner(&self) -> String {
        match self {
            Hold::Write(l) => l.owner().to_owned(),
            Hold::Read(l) => l.owner().to_owned(),
        }
    }
    fn valid_until(&self) -> tokio::time::Instant {
        match self {
            Hold::Write(l) => l.valid_until(),
            Hold::Read(l) => l.valid_until(),
        }
    }
    async fn release(self) {
        let _ = match self {
            Hold::Write(l) => l.release().await,
            Hold::Read(l) => l.release().await,
        };
    }
}

struct Outcome {
    violations: Vec<String>,
    peak_readers: usize,
    waits: usize,
    longest_wait_ttls: f64,
}

fn run(seed: u64, broken: bool) -> Outcome {
    let rt = common::paused_runtime();
    rt.block_on(async move {
        let mut rng = SplitMix64::new(seed);
        let writers = 1 + usize::try_from(rng.below_inclusive(1)).expect("small");
        let readers = 2 + usize::try_from(rng.below_inclusive(1)).expect("small");
        let ttl = ms(200 + rng.below_inclusive(600));
        let faults = Faults::draw(&mut rng, ttl);
        let world = Arc::new(World {
            writers,
            readers,
            broken,
            net: Net::new(faults, rng),
            spec: Arc::new(LeaseSpec::lock([KEY], Some(FENCE.into())).expect("spec")),
            shadow: Arc::new(LeaseSpec::lock([SHADOW], Some(FENCE.into())).expect("spec")),
            rec: Mutex::new(Record::default()),
        });
        let mut tasks = Vec::new();
        for i in 0..world.writers + world.readers {
            // Each worker its own locker: separate processes sharing one store.
            let locker = Locker::new(SimBackend {
                world: Arc::clone(&world),
            });
            let writer = i < world.writers;
            tasks.push(tokio::spawn(worker(Arc::clone(&world), locker, writer)));
        }
        let monitor = tokio::spawn({
            let world = Arc::clone(&world);
            async move {
                loop {
                    world.monitor();
                    tokio::time::sleep(world.ttl() / 16).await;
                }
            }
        });
        let bound = world.net.faults.run_for + ttl * 30;
        for t in tasks {
            match tokio::time::timeout(bound, t).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => world.violation(format!("a worker failed: {e}")),
                Err(_) => world.violation("a worker never ended".into()),
            }
        }
        monitor.abort();
        let mut rec = lock(&world.rec);
        let spans: Vec<_> = rec.beliefs.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (a, (aw, a0, a1)) in &spans {
            for (b, (_, b0, b1)) in &spans {
                if *aw && a != b && a0 <= b1 && b0 <= a1 {
                    rec.violations.push(format!(
                        "writer {a:?} believed over {a0:?}..{a1:?}, {b:?} over {b0:?}..{b1:?}"
                    ));
                }
            }
        }
        Outcome {
            violations: std::mem::take(&mut rec.violations),
            peak_readers: rec.peak_readers,
            waits: rec.waits,
            longest_wait_ttls: rec.longest_wait_ttls,
        }
    })
}

#[test]
fn the_shipped_rwlock_never_puts_a_writer_beside_a_reader() {
    let seeds = common::sim::seeds("RW_SIM_SEED", 40);
    let (mut shared, mut waits) = (0, 0);
    let mut longest: f64 = 0.0;
    for &seed in &seeds {
        let o = run(seed, false);
        assert!(
            o.violations.is_empty(),
            "seed {seed} (replay: RW_SIM_SEED={seed}): {:#?}",
            &o.violations[..o.violations.len().min(10)]
        );
        shared += usize::from(o.peak_readers >= 2);
        waits += o.waits;
        longest = longest.max(o.longest_wait_ttls);
    }
    eprintln!(
        "{} worlds: readers shared in {shared}; {waits} writer waits for readers ended with a \
         writer in (the longest {longest:.2} TTLs)",
        seeds.len()
    );
    if seeds.len() > 1 {
        assert!(shared * 2 > seeds.len(), "readers shared in only {shared}");
        assert!(
            waits * 2 > seeds.len(),
            "writers waited for readers only {waits} times"
        );
    }
}

/// Negative control: a store that keeps its readers where the writer cannot see them is
/// caught.
#[test]
fn a_reader_beside_a_writer_is_caught() {
    let total = 20;
    let caught = (0..total)
        .filter(|&seed| {
            let o = run(seed, true);
            o.violations
                .iter()
                .any(|v| v.contains("beside readers") || v.contains("believed over"))
        })
        .count();
    eprintln!("a reader beside a writer caught in {caught} of {total}");
    assert!(
        caught >= total as usize * 9 / 10,
        "caught in {caught} of {total}"
    );
}
