//! Properties of the fair lock rule (`lease_core::fair`) on its executable specification, the
//! in-memory store.
//!
//! proptest chooses a sequence of operations by a handful of owners: fair attempts (each with
//! a place TTL, or none: a try-once attempt that never queues), releases, leaves, and time
//! passing. A model tracks the holder (owner → expiry) and the queue (owner → place expiry,
//! in arrival order). After every step:
//!
//! - **never two holders**: the store's holder is the model's (or none);
//! - **FIFO among live waiters**: an attempt is granted iff the owner holds the lock, or the
//!   lock is free and the owner is first among the live waiters (or none waits); the store's
//!   queue is the model's live waiters, in arrival order, and its inspection
//!   (`inspect_fair`) is the model's holder and live waiters, each with its exact time left;
//! - **an expired place is skipped**: the model drops places at their expiry, so a waiter
//!   behind a crashed one is first as soon as the crashed one's place expired;
//! - **a release wakes exactly the next waiter**: each owner watches its own wake, and after
//!   each step exactly the model's head is woken when the lock is free and the head is new (a
//!   release, a leave, an expiry), and nobody else ever is.
//!
//! `histories_queue_and_hand_over` shows the histories do queue and hand over (the FIFO
//! check is not vacuous); `a_broken_queue_order_is_caught` is the negative control: the
//! same checker over a lock without the queue rule (the plain lock, which lets a late comer
//! take a free lock past the head) fails.
//!
//! `the_queue_is_bounded` (a new waiter past `MAX_WAITERS` refused with `QueueFull`, nothing
//! changed) and `crashed_waiters_are_dropped_a_bounded_batch_per_call` (at most
//! `PRUNE_PER_CALL` entries dropped per operation, the head unknown meanwhile) pin the
//! specification's bounds; `lease-redis/tests/fair.rs` runs both against a real server.

use std::sync::Arc;
use std::time::Duration;

use lease_core::fair::{FairRequest, fair_spec};
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::{
    AcquireOutcome, AcquireRequest, Instant, LeaseBackend, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, Ttl,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const OWNERS: [&str; 5] = ["a", "b", "c", "d", "e"];

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        owner: usize,
        ttl_ms: u64,
        place_ms: Option<u64>,
    },
    Release {
        owner: usize,
    },
    Leave {
        owner: usize,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..OWNERS.len(), 1u64..200, prop::option::weighted(0.9, 1u64..150))
            .prop_map(|(owner, ttl_ms, place_ms)| Op::Acquire { owner, ttl_ms, place_ms }),
        2 => (0..OWNERS.len()).prop_map(|owner| Op::Release { owner }),
        1 => (0..OWNERS.len()).prop_map(|owner| Op::Leave { owner }),
        2 => (0u64..100).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Which rule the store under test follows: the fair one, or (the negative control) the
/// plain lock's, which ignores the queue.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    Fair,
    Barging,
}

struct World {
    clock: ManualClock,
    store: MemoryBackend,
    spec: Arc<LeaseSpec>,
    rule: Rule,
    holder: Option<(usize, Instant)>,
    /// Waiters in arrival order, with their place's expiry.
    queue: Vec<(usize, Instant)>,
    watches: Vec<ReleaseWatch>,
    handovers: usize,
    longest_queue: usize,
}

impl World {
    fn new(rule: Rule) -> World {
        let clock = ManualClock::new();
        let store = MemoryBackend::new(clock.clone());
        let spec = Arc::new(fair_spec("{f}", None).expect("a valid name"));
        let watches = (0..OWNERS.len())
            .map(|i| {
                store
                    .fair_watch(&spec, &World::owner(i), WatchRole::Contender)
                    .expect("the memory backend wakes waiters")
            })
            .collect();
        World {
            store,
            clock,
            spec,
            rule,
            holder: None,
            queue: Vec::new(),
            watches,
            handovers: 0,
            longest_queue: 0,
        }
    }

    fn owner(i: usize) -> Owner {
        Owner::new(OWNERS[i]).expect("a valid owner")
    }

    /// The model at `now`: expired holder and places dropped.
    fn prune(&mut self) {
        let now = self.clock.now();
        self.holder = self.holder.filter(|(_, e)| *e > now);
        self.queue.retain(|(_, e)| *e > now);
    }

    fn head(&self) -> Option<usize> {
        self.queue.first().map(|(o, _)| *o)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.prune();
        let now = self.clock.now();
        let mut released = false;
        match *op {
            Op::Acquire {
                owner,
                ttl_ms,
                place_ms,
            } => {
                let ttl = Ttl::new(Duration::from_millis(ttl_ms)).expect("a valid ttl");
                let place = place_ms.map(|ms| Ttl::new(Duration::from_millis(ms)).expect("ttl"));
                let acquire = AcquireRequest::new(Arc::clone(&self.spec), World::owner(owner), ttl);
                let got = match self.rule {
                    Rule::Fair => self
                        .store
                        .acquire_fair_now(&FairRequest::new(acquire, place)),
                    Rule::Barging => self.store.acquire_now(&acquire),
                }
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let ours = self.holder.is_some_and(|(o, _)| o == owner);
                let first = self.holder.is_none() && self.head().is_none_or(|h| h == owner);
                let granted = matches!(got, AcquireOutcome::Acquired { .. });
                prop_assert_eq!(
                    granted,
                    ours || first,
                    "{} asked with holder {:?} and queue {:?}",
                    OWNERS[owner],
                    self.holder,
                    self.queue
                );
                if granted {
                    if !ours && !self.queue.is_empty() {
                        self.handovers += 1;
                    }
                    self.holder = Some((owner, now + ttl.get()));
                    self.queue.retain(|(o, _)| *o != owner);
                } else if let Some(place) = place {
                    let expiry = now + place.get();
                    match self.queue.iter_mut().find(|(o, _)| *o == owner) {
                        Some(entry) => entry.1 = expiry,
                        None => self.queue.push((owner, expiry)),
                    }
                }
            }
            Op::Release { owner } => {
                let req = ReleaseRequest::new(Arc::clone(&self.spec), World::owner(owner));
                let got = self
                    .store
                    .release_fair_now(&req)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let held = self.holder.is_some_and(|(o, _)| o == owner);
                prop_assert_eq!(got == ReleaseOutcome::Released, held);
                if held {
                    self.holder = None;
                    released = true;
                }
                self.queue.retain(|(o, _)| *o != owner);
            }
            Op::Leave { owner } => {
                let had = self
                    .store
                    .leave_fair_now(&self.spec, &World::owner(owner))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(had, self.queue.iter().any(|(o, _)| *o == owner));
                self.queue.retain(|(o, _)| *o != owner);
            }
            Op::Advance { ms } => self.clock.advance(Duration::from_millis(ms)),
        }
        if !matches!(op, Op::Advance { .. }) {
            self.check_wakes(released)?;
        }
        self.longest_queue = self.longest_queue.max(self.queue.len());
        self.check()
    }

    /// Exactly the head of a free lock is woken, when it is new or the lock was released;
    /// nobody else. (A head made by expiry alone is woken by the next operation that sees
    /// it, or finds the lock at its next heartbeat.)
    fn check_wakes(&mut self, released: bool) -> Result<(), TestCaseError> {
        self.prune();
        let woken: Vec<usize> = (0..OWNERS.len())
            .filter(|i| self.watches[*i].take_wake())
            .collect();
        prop_assert!(woken.len() <= 1, "a herd: {woken:?}");
        if let Some(w) = woken.first() {
            prop_assert!(self.holder.is_none(), "{} woken while held", OWNERS[*w]);
            prop_assert_eq!(Some(*w), self.head(), "woke someone not first in line");
        }
        if released && let Some(h) = self.head() {
            prop_assert_eq!(woken, vec![h], "a release must wake the next waiter");
        }
        Ok(())
    }

    /// The store's holder and queue are the model's.
    fn check(&mut self) -> Result<(), TestCaseError> {
        self.prune();
        let info = self
            .store
            .inspect_now(&self.spec)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            info.holder.as_deref(),
            self.holder.map(|(o, _)| OWNERS[o]),
            "one holder, the model's"
        );
        if self.rule == Rule::Fair {
            let queue = self
                .store
                .fair_queue_now(&self.spec)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let model: Vec<&str> = self.queue.iter().map(|(o, _)| OWNERS[*o]).collect();
            prop_assert_eq!(queue, model, "the live waiters in arrival order");
            // The inspection: the model's holder and its time, the live waiters in order,
            // each with its place's time (a lapsed place is not shown).
            let now = self.clock.now();
            let info = self
                .store
                .inspect_fair_now(&self.spec)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let shown = |h: &lease_core::semaphore::PermitHolder| (h.owner.clone(), h.remaining);
            let timed = |(o, e): &(usize, Instant)| (OWNERS[*o].to_owned(), *e - now);
            prop_assert_eq!(
                info.holder.as_ref().map(shown),
                self.holder.as_ref().map(timed)
            );
            prop_assert_eq!(
                info.waiters.iter().map(shown).collect::<Vec<_>>(),
                self.queue.iter().map(timed).collect::<Vec<_>>(),
                "the inspection's waiters"
            );
        }
        Ok(())
    }
}

fn run(rule: Rule, ops: &[Op]) -> Result<World, TestCaseError> {
    let mut world = World::new(rule);
    for op in ops {
        world.step(op)?;
    }
    Ok(world)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fifo_among_live_waiters(ops in prop::collection::vec(op(), 1..150)) {
        run(Rule::Fair, &ops)?;
    }
}

/// The generated histories do queue several waiters and hand the lock over to the head (the
/// FIFO check is not vacuous).
#[test]
fn histories_queue_and_hand_over() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut queued, mut handed) = (0, 0);
    for _ in 0..64 {
        let ops = prop::collection::vec(op(), 80..150)
            .new_tree(&mut runner)
            .expect("a tree")
            .current();
        let world = run(Rule::Fair, &ops).expect("the property holds");
        queued += usize::from(world.longest_queue >= 3);
        handed += usize::from(world.handovers >= 2);
    }
    assert!(
        queued > 16,
        "only {queued} of 64 histories queued 3 waiters"
    );
    assert!(
        handed > 16,
        "only {handed} of 64 histories handed over twice"
    );
}

/// A crashed waiter (it stops heartbeating) is skipped once its place expired: the waiter
/// behind it gets the free lock.
#[test]
fn an_expired_place_is_skipped() {
    let mut world = World::new(Rule::Fair);
    let acquire = |owner, place_ms| Op::Acquire {
        owner,
        ttl_ms: 100,
        place_ms: Some(place_ms),
    };
    for op in [
        acquire(0, 50),           // a holds
        acquire(1, 30),           // b queues first, then crashes
        acquire(2, 60),           // c queues behind it
        Op::Release { owner: 0 }, // b is woken, and never comes
        Op::Advance { ms: 31 },   // b's place expires
        acquire(2, 60),           // c's next heartbeat takes the lock
    ] {
        world.step(&op).expect("the property holds");
    }
    assert_eq!(world.holder.map(|(o, _)| o), Some(2));
}

/// Negative control: the same checker over a lock without the queue rule (the plain lock's
/// acquire on the same key, for attempts on a free lock) fails: a late comer takes the free
/// lock past the head.
#[test]
fn a_broken_queue_order_is_caught() {
    let acquire = |owner| Op::Acquire {
        owner,
        ttl_ms: 100,
        place_ms: Some(50),
    };
    let mut world = World::new(Rule::Fair);
    for op in [acquire(0), acquire(1), Op::Release { owner: 0 }] {
        world.step(&op).expect("a holds, b queues, a releases");
    }
    // c arrives before b comes back: the plain rule grants it.
    world.rule = Rule::Barging;
    let caught = world
        .step(&acquire(2))
        .expect_err("the barging grant went unnoticed");
    assert!(caught.to_string().contains("asked with holder"), "{caught}");

    // And the generated histories find it on their own: attempts on a free lock follow the
    // plain rule, the others queue by the fair rule.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut found = 0;
    for _ in 0..64 {
        let ops = prop::collection::vec(op(), 80..150)
            .new_tree(&mut runner)
            .expect("a tree")
            .current();
        let mut world = World::new(Rule::Fair);
        for op in &ops {
            world.prune();
            world.rule = match op {
                Op::Acquire { .. } if world.holder.is_none() => Rule::Barging,
                _ => Rule::Fair,
            };
            // Caught as a grant past the head, or as a queue the grant left stale.
            if world.step(op).is_err() {
                found += 1;
                break;
            }
        }
    }
    assert!(
        found > 8,
        "only {found} of 64 histories caught a lock that ignores the queue"
    );
}

fn attempt(mem: &MemoryBackend, spec: &Arc<LeaseSpec>, who: &str, place_ms: u64) -> String {
    let req = FairRequest::new(
        AcquireRequest::new(
            Arc::clone(spec),
            Owner::new(who).expect("owner"),
            Ttl::new(Duration::from_secs(600)).expect("ttl"),
        ),
        Some(Ttl::new(Duration::from_millis(place_ms)).expect("place")),
    );
    match mem.acquire_fair_now(&req) {
        Ok(AcquireOutcome::Acquired { .. }) => "acquired".to_owned(),
        Ok(AcquireOutcome::Held { holder, .. }) => format!("held {holder:?}"),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("err {e}"),
    }
}

/// The queue's bound: with `MAX_WAITERS` live places a new waiter is refused with
/// `QueueFull` and nothing changes; a queued waiter still heartbeats; the inspection is
/// bounded and counts every live waiter.
#[test]
fn the_queue_is_bounded() {
    use lease_core::BackendError;
    use lease_core::fair::{INSPECT_SHOWN, MAX_WAITERS};
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = Arc::new(fair_spec("{bound}", None).expect("spec"));
    assert_eq!(attempt(&mem, &spec, "h", 600_000), "acquired");
    for i in 0..MAX_WAITERS {
        assert_eq!(
            attempt(&mem, &spec, &format!("w{i}"), 600_000),
            "held Some(\"h\")"
        );
    }
    let req = FairRequest::new(
        AcquireRequest::new(
            Arc::clone(&spec),
            Owner::new("late").expect("owner"),
            Ttl::new(Duration::from_secs(600)).expect("ttl"),
        ),
        Some(Ttl::new(Duration::from_secs(600)).expect("place")),
    );
    let refused = mem.acquire_fair_now(&req);
    assert!(
        matches!(refused, Err(BackendError::QueueFull { ref name, limit }) if name == "{bound}" && limit == MAX_WAITERS),
        "{refused:?}"
    );
    let queue = mem.fair_queue_now(&spec).expect("queue");
    assert_eq!(queue.len(), MAX_WAITERS, "nothing queued");
    assert!(!queue.iter().any(|o| o == "late"));
    assert_eq!(attempt(&mem, &spec, "w7", 600_000), "held Some(\"h\")");
    let info = mem.inspect_fair_now(&spec).expect("inspect");
    assert_eq!(
        (info.waiting, info.waiters.len()),
        (MAX_WAITERS, INSPECT_SHOWN)
    );
    assert_eq!(info.waiters[0].owner, "w0");
}

/// More waiters crash at once than one operation drops (`PRUNE_PER_CALL`): the first
/// operation after their places lapsed drops that many and, with no live head found within
/// its budget, grants the free lock to nobody; the next drops the rest and the live waiter
/// behind them, now first, is granted. With fewer crashed than the budget, one operation.
#[test]
fn crashed_waiters_are_dropped_a_bounded_batch_per_call() {
    use lease_core::fair::PRUNE_PER_CALL;
    for (crashed, calls) in [(PRUNE_PER_CALL - 1, 1), (PRUNE_PER_CALL + 5, 2)] {
        let clock = ManualClock::new();
        let mem = MemoryBackend::new(clock.clone());
        let spec = Arc::new(fair_spec("{crash}", None).expect("spec"));
        assert_eq!(attempt(&mem, &spec, "h", 600_000), "acquired");
        for i in 0..crashed {
            attempt(&mem, &spec, &format!("c{i:03}"), 100);
        }
        attempt(&mem, &spec, "z", 600_000);
        let h = ReleaseRequest::new(Arc::clone(&spec), Owner::new("h").expect("owner"));
        assert!(matches!(
            mem.release_fair_now(&h),
            Ok(ReleaseOutcome::Released)
        ));
        clock.advance(Duration::from_millis(200));
        for _ in 1..calls {
            assert_eq!(attempt(&mem, &spec, "z", 600_000), "held None", "{crashed}");
        }
        assert_eq!(attempt(&mem, &spec, "z", 600_000), "acquired", "{crashed}");
    }
}
