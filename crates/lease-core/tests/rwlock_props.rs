//! Properties of the read-write lock rule (`lease_core::rwlock`) on its executable
//! specification, the in-memory store: readers through the shared operations, the writer
//! through the plain lock of the same key.
//!
//! proptest chooses a sequence of operations by a handful of owners: obtain as a reader or as
//! the writer, renew, release, and time passing. A model tracks every hold the store may have
//! granted (the writer, the readers, each with the local deadline its holder believes: the
//! instant of the grant or renewal plus the TTL) and the waiting-writer mark. After every step:
//!
//! - **never a writer beside a reader, nor two writers**, among the holds their holders
//!   believe current (judged on the model, which only the store's answers move);
//! - each outcome is the model's: a reader is refused while a writer holds or a writer's mark
//!   stands (unless it already reads), a writer while another writer or any reader holds;
//! - every grant's token (readers' and writers' alike, from one counter) is above every token
//!   granted before;
//! - **no local deadline is later than the store's**: every hold believed current is reported
//!   by the store with at least the time its holder believes it has.
//!
//! `histories_mix_readers_and_writers` shows the histories do share and do exclude (the
//! check is not vacuous); `a_reader_beside_a_writer_is_caught` is the negative control: the
//! same checker over a broken store (readers kept where the writer cannot see them) fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{
    AcquireOutcome, AcquireRequest, Instant, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest, Ttl,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const OWNERS: [&str; 5] = ["a", "b", "c", "d", "e"];

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        owner: usize,
        ttl_ms: u64,
        write: bool,
    },
    Renew {
        owner: usize,
        ttl_ms: u64,
        write: bool,
    },
    Release {
        owner: usize,
        write: bool,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..OWNERS.len(), 1u64..200, prop::bool::weighted(0.3))
            .prop_map(|(owner, ttl_ms, write)| Op::Acquire { owner, ttl_ms, write }),
        2 => (0..OWNERS.len(), 1u64..200, prop::bool::weighted(0.3))
            .prop_map(|(owner, ttl_ms, write)| Op::Renew { owner, ttl_ms, write }),
        2 => (0..OWNERS.len(), prop::bool::weighted(0.3))
            .prop_map(|(owner, write)| Op::Release { owner, write }),
        2 => (0u64..120).prop_map(|ms| Op::Advance { ms }),
    ]
}

struct World {
    clock: ManualClock,
    store: MemoryBackend,
    spec: Arc<LeaseSpec>,
    /// Negative control: readers are sent to another key, where no writer is seen.
    broken: Option<Arc<LeaseSpec>>,
    /// The writer's owner and local deadline.
    writer: Option<(usize, Instant)>,
    /// Each reader's local deadline.
    readers: BTreeMap<usize, Instant>,
    /// When the waiting-writer mark lapses.
    mark: Option<Instant>,
    last_token: u64,
    /// Whether readers were ever shared, and a writer ever held.
    shared: bool,
    wrote: bool,
}

impl World {
    fn new(broken: bool) -> World {
        let clock = ManualClock::new();
        let fenced = |k: &str| {
            Arc::new(LeaseSpec::lock([k], Some("{k}:fence".into())).expect("a valid spec"))
        };
        World {
            store: MemoryBackend::new(clock.clone()),
            clock,
            spec: fenced("{k}"),
            broken: broken.then(|| fenced("{k}:shadow")),
            writer: None,
            readers: BTreeMap::new(),
            mark: None,
            last_token: 0,
            shared: false,
            wrote: false,
        }
    }

    fn owner(i: usize) -> Owner {
        Owner::new(OWNERS[i]).expect("a valid owner")
    }

    fn reader_spec(&self) -> Arc<LeaseSpec> {
        Arc::clone(self.broken.as_ref().unwrap_or(&self.spec))
    }

    fn current_writer(&self, now: Instant) -> Option<usize> {
        self.writer.filter(|(_, e)| *e > now).map(|(o, _)| o)
    }

    fn current_readers(&self, now: Instant) -> Vec<usize> {
        self.readers
            .iter()
            .filter(|(_, e)| **e > now)
            .map(|(o, _)| *o)
            .collect()
    }

    fn granted(&mut self, token: Option<lease_core::Token>) -> Result<(), TestCaseError> {
        let t = token.map_or(0, |t| t.get());
        prop_assert!(
            t > self.last_token,
            "tokens increase: {t} after {}",
            self.last_token
        );
        self.last_token = t;
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.clock.now();
        let writer = self.current_writer(now);
        let readers = self.current_readers(now);
        let marked = self.mark.is_some_and(|m| m > now);
        match *op {
            Op::Acquire {
                owner,
                ttl_ms,
                write,
            } => {
                let ttl = Ttl::new(Duration::from_millis(ttl_ms)).expect("a valid ttl");
                if write {
                    let req = AcquireRequest::new(Arc::clone(&self.spec), World::owner(owner), ttl);
                    let got = self.store.acquire_now(&req);
                    let free = writer.is_none_or(|w| w == owner) && readers.is_empty();
                    if free || self.broken.is_some() && writer.is_none_or(|w| w == owner) {
                        match got {
                            Ok(AcquireOutcome::Acquired { token, .. }) => self.granted(token)?,
                            other => prop_assert!(false, "expected the writer in, got {other:?}"),
                        }
                        self.writer = Some((owner, now + ttl.get()));
                        self.mark = None;
                        self.wrote = true;
                    } else {
                        prop_assert!(
                            matches!(got, Ok(AcquireOutcome::Held { .. })),
                            "expected held, got {got:?}"
                        );
                        if writer.is_none() {
                            let lapse = now + ttl.get();
                            self.mark = Some(self.mark.map_or(lapse, |m| m.max(lapse)));
                        }
                    }
                } else {
                    let req = AcquireRequest::new(self.reader_spec(), World::owner(owner), ttl);
                    let got = self.store.acquire_shared_now(&req);
                    let mine = readers.contains(&owner);
                    let refused = self.broken.is_none() && (writer.is_some() || marked && !mine);
                    if refused {
                        prop_assert!(
                            matches!(got, Ok(AcquireOutcome::Held { .. })),
                            "expected held, got {got:?}"
                        );
                    } else {
                        match got {
                            Ok(AcquireOutcome::Acquired { token, .. }) => self.granted(token)?,
                            other => prop_assert!(false, "expected a reader in, got {other:?}"),
                        }
                        self.readers.insert(owner, now + ttl.get());
                        if self.current_readers(now).len() > 1 {
                            self.shared = true;
                        }
                    }
                }
            }
            Op::Renew {
                owner,
                ttl_ms,
                write,
            } => {
                let ttl = Ttl::new(Duration::from_millis(ttl_ms)).expect("a valid ttl");
                let spec = if write {
                    Arc::clone(&self.spec)
                } else {
                    self.reader_spec()
                };
                let req = RenewRequest::new(spec, World::owner(owner), ttl);
                let (got, held) = if write {
                    (self.store.renew_now(&req), writer == Some(owner))
                } else {
                    (self.store.renew_shared_now(&req), readers.contains(&owner))
                };
                let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                if held {
                    prop_assert_eq!(got, RenewOutcome::Renewed);
                    if write {
                        self.writer = Some((owner, now + ttl.get()));
                    } else {
                        self.readers.insert(owner, now + ttl.get());
                    }
                } else {
                    prop_assert_eq!(got, RenewOutcome::NotHeld);
                }
            }
            Op::Release { owner, write } => {
                let spec = if write {
                    Arc::clone(&self.spec)
                } else {
                    self.reader_spec()
                };
                let req = ReleaseRequest::new(spec, World::owner(owner));
                let (got, held) = if write {
                    (self.store.release_now(&req), writer == Some(owner))
                } else {
                    (
                        self.store.release_shared_now(&req),
                        readers.contains(&owner),
                    )
                };
                let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    if held {
                        ReleaseOutcome::Released
                    } else {
                        ReleaseOutcome::NotHeld
                    }
                );
                if held && write {
                    self.writer = None;
                } else if held {
                    self.readers.remove(&owner);
                }
            }
            Op::Advance { ms } => self.clock.advance(Duration::from_millis(ms)),
        }
        self.check()
    }

    /// Never a writer beside a reader (one writer at most by construction of the model); every
    /// believed hold is one the store still reports, for at least as long.
    fn check(&mut self) -> Result<(), TestCaseError> {
        let now = self.clock.now();
        let writer = self.current_writer(now);
        let readers = self.current_readers(now);
        prop_assert!(
            writer.is_none() || readers.is_empty(),
            "a writer ({writer:?}) beside readers ({readers:?})"
        );
        let info = self
            .store
            .inspect_shared_now(&self.spec)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Some((w, deadline)) = self.writer.filter(|(_, e)| *e > now) {
            let held = info.writer.as_ref().filter(|h| h.owner == OWNERS[w]);
            prop_assert!(
                held.is_some_and(|h| now + h.remaining >= deadline),
                "the writer's local deadline is later than the store's: {info:?}"
            );
        }
        if self.broken.is_none() {
            for r in &readers {
                let deadline = self.readers[r];
                let held = info.readers.iter().find(|h| h.owner == OWNERS[*r]);
                prop_assert!(
                    held.is_some_and(|h| now + h.remaining >= deadline),
                    "reader {r}'s local deadline is later than the store's: {info:?}"
                );
            }
            prop_assert_eq!(info.readers.len(), readers.len());
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_a_writer_beside_a_reader(ops in prop::collection::vec(op(), 1..120)) {
        let mut world = World::new(false);
        for op in &ops {
            world.step(op)?;
        }
    }
}

/// The generated histories do share (two readers at once) and do write (the exclusion check
/// is not vacuous).
#[test]
fn histories_mix_readers_and_writers() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut shared, mut wrote) = (0, 0);
    for _ in 0..64 {
        let ops = prop::collection::vec(op(), 60..120)
            .new_tree(&mut runner)
            .expect("a tree")
            .current();
        let mut world = World::new(false);
        for op in &ops {
            world.step(op).expect("the property holds");
        }
        shared += usize::from(world.shared);
        wrote += usize::from(world.wrote);
    }
    assert!(shared > 8, "only {shared} of 64 histories shared");
    assert!(wrote > 8, "only {wrote} of 64 histories wrote");
}

/// Negative control: a store whose readers do not see the writer (kept under another key) is
/// caught by the same checker: some history admits a reader beside a writer.
#[test]
fn a_reader_beside_a_writer_is_caught() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut caught = 0;
    for _ in 0..64 {
        let ops = prop::collection::vec(op(), 60..120)
            .new_tree(&mut runner)
            .expect("a tree")
            .current();
        let mut world = World::new(true);
        if ops.iter().any(|op| world.step(op).is_err()) {
            caught += 1;
        }
    }
    assert!(
        caught > 8,
        "the broken store was caught in only {caught} of 64 histories"
    );
}
