//! Parity with the executable specification: random operation sequences run on a real Redis
//! (through `RedisBackend`) and on lease-core's `MemoryBackend` (clock never advanced, TTLs
//! long enough that nothing expires in Redis either) give the same outcomes and leave the same
//! data. `expiry_matches_the_memory_backend` lets time pass on both (the memory clock follows
//! real time while the real Redis TTL runs out) and compares outcomes and remaining TTLs
//! before a renewal, after it, and after expiry. (With the memory clock left still, it fails:
//! memory still holds the lease Redis has expired.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
use lease_core::{AcquireOutcome, BackendError, FenceOutcome, LeaseBackend, LeaseSpec, Token};
use lease_redis::{FencedWrite, RedisBackend};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const OWNERS: [&str; 3] = ["a", "ab", "abc"];
const STRING_KEYS: [&str; 2] = ["s1", "s2"];
const HASH_KEYS: [&str; 2] = ["h1", "h2"];
const FIELDS: [&str; 2] = ["f1", "f2"];

fn specs() -> Vec<Arc<LeaseSpec>> {
    vec![
        election("{e}"),
        lock(&["{l}1", "{l}2"], Some("{l}f")),
        lock(&["{l}2", "{l}3"], None),
        lock(&["{l}1"], Some("{l}g")),
    ]
}

/// Every key the operations can touch, for the final state comparison.
fn universe() -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for s in specs() {
        keys.extend(lease_redis::slot::spec_keys(&s));
    }
    keys.extend(
        STRING_KEYS
            .iter()
            .chain(HASH_KEYS.iter())
            .map(|k| k.to_string()),
    );
    keys.sort();
    keys.dedup();
    keys
}

#[derive(Clone, Debug)]
enum Term {
    None,
    Last,
    Fixed(u64),
}

#[derive(Clone, Debug)]
enum Tok {
    Below,
    AtMark,
    Above,
    Fixed(u64),
}

#[derive(Clone, Debug)]
enum W {
    Set(usize, u8),
    HSet(usize, usize, u8),
    Del(Vec<usize>),
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        spec: usize,
        owner: usize,
        meta: bool,
    },
    Renew {
        spec: usize,
        owner: usize,
    },
    Release {
        spec: usize,
        owner: usize,
        term: Term,
    },
    Remaining {
        spec: usize,
        owner: usize,
    },
    Inspect {
        spec: usize,
    },
    ForceRelease {
        spec: usize,
    },
    Raise {
        spec: usize,
        owner: usize,
        token: u64,
    },
    Fence {
        spec: usize,
        token: Tok,
        writes: Vec<W>,
    },
    LoseKey {
        key: usize,
    },
    PutCounter {
        spec: usize,
        value: u64,
    },
    PutMark {
        spec: usize,
        value: u64,
    },
    PutString {
        key: usize,
    },
}

/// Fenced specs (0, 1, 3) for operations that need a fence.
fn fenced_spec() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(1), Just(3)]
}

fn write() -> impl Strategy<Value = W> {
    // Keys 0..2 are strings, 2..4 hashes (see `key_of`).
    prop_oneof![
        (0..2usize, any::<u8>()).prop_map(|(k, v)| W::Set(k, v)),
        (2..4usize, 0..2usize, any::<u8>()).prop_map(|(k, f, v)| W::HSet(k, f, v)),
        vec(0..4usize, 0..3).prop_map(W::Del),
    ]
}

fn key_of(i: usize) -> &'static str {
    match i {
        0 | 1 => STRING_KEYS[i],
        _ => HASH_KEYS[i - 2],
    }
}

fn op() -> impl Strategy<Value = Op> {
    let big = prop_oneof![
        Just(0u64),
        1..12u64,
        Just((1u64 << 53) - 1),
        Just(1u64 << 53),
        Just(1_234_567_890_123_456u64),
    ];
    prop_oneof![
        6 => (0..4usize, 0..3usize, any::<bool>())
            .prop_map(|(spec, owner, meta)| Op::Acquire { spec, owner, meta }),
        3 => (0..4usize, 0..3usize).prop_map(|(spec, owner)| Op::Renew { spec, owner }),
        4 => (
            0..4usize,
            0..3usize,
            prop_oneof![Just(Term::None), Just(Term::Last), (1..6u64).prop_map(Term::Fixed)]
        )
            .prop_map(|(spec, owner, term)| Op::Release { spec, owner, term }),
        2 => (0..4usize, 0..3usize).prop_map(|(spec, owner)| Op::Remaining { spec, owner }),
        2 => (0..4usize).prop_map(|spec| Op::Inspect { spec }),
        2 => (0..4usize).prop_map(|spec| Op::ForceRelease { spec }),
        2 => (fenced_spec(), 0..3usize, 1..20u64)
            .prop_map(|(spec, owner, token)| Op::Raise { spec, owner, token }),
        5 => (
            fenced_spec(),
            prop_oneof![
                Just(Tok::Below),
                Just(Tok::AtMark),
                Just(Tok::Above),
                (1..10u64).prop_map(Tok::Fixed)
            ],
            vec(write(), 0..4)
        )
            .prop_map(|(spec, token, writes)| Op::Fence { spec, token, writes }),
        2 => (0..universe().len()).prop_map(|key| Op::LoseKey { key }),
        1 => (fenced_spec(), big.clone()).prop_map(|(spec, value)| Op::PutCounter { spec, value }),
        1 => (fenced_spec(), big).prop_map(|(spec, value)| Op::PutMark { spec, value }),
        1 => (2..4usize).prop_map(|key| Op::PutString { key }),
    ]
}

fn kind(e: &BackendError) -> &'static str {
    match e {
        BackendError::Unavailable(_) => "unavailable",
        BackendError::Timeout(_) => "timeout",
        BackendError::Invalid(_) => "invalid",
        BackendError::Refused(_) => "server",
        BackendError::Protocol(_) => "protocol",
        BackendError::TokenExhausted(_) => "exhausted",
        _ => "other",
    }
}

/// Outcomes compared modulo remaining TTLs (Redis's clock moves, memory's does not): only
/// their presence is compared, and Redis's must not exceed memory's.
fn norm<T: std::fmt::Debug>(r: &Result<T, BackendError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {}", kind(e)),
    }
}

fn norm_acquire(r: &Result<AcquireOutcome, BackendError>) -> String {
    // Epochs are server times: compare whether one is reported, not its value.
    let epoch = |f: &lease_core::FenceState| f.epoch.is_some();
    match r {
        Ok(AcquireOutcome::Acquired { token, fence }) => {
            format!(
                "acquired {token:?} before={:?} epoch={}",
                fence.counter,
                epoch(fence)
            )
        }
        Ok(AcquireOutcome::Held {
            holder,
            remaining,
            fence,
        }) => {
            format!(
                "held {holder:?} ttl={} counter={:?} epoch={}",
                remaining.is_some(),
                fence.counter,
                epoch(fence)
            )
        }
        other => norm(other),
    }
}

struct Case<'a> {
    redis: &'a RedisBackend<Conn>,
    raw: Conn,
    mem: MemoryBackend,
    specs: Vec<Arc<LeaseSpec>>,
    last: Vec<Option<Token>>,
}

impl Case<'_> {
    fn mark_of(&self, spec: usize) -> u64 {
        self.specs[spec]
            .mark_key()
            .and_then(|k| self.mem.get(&k))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Acquire { spec, owner, meta } => {
                let req = acq_meta(
                    &self.specs[*spec],
                    OWNERS[*owner],
                    if *meta { "m" } else { "" },
                );
                let m = self.mem.acquire_now(&req);
                let r = self.redis.acquire(&req).await;
                prop_assert_eq!(norm_acquire(&r), norm_acquire(&m));
                if let Ok(AcquireOutcome::Acquired { token, .. }) = m {
                    self.last[*spec] = token;
                }
            }
            Op::Renew { spec, owner } => {
                let req = renew(&self.specs[*spec], OWNERS[*owner]);
                let m = self.mem.renew_now(&req);
                let r = self.redis.renew(&req).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Release { spec, owner, term } => {
                let term = match term {
                    Term::None => None,
                    Term::Last => self.last[*spec],
                    Term::Fixed(n) => Token::new(*n).ok(),
                };
                let req = release(&self.specs[*spec], OWNERS[*owner], term);
                let m = self.mem.release_now(&req);
                let r = self.redis.release(&req).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Remaining { spec, owner } => {
                let s = &self.specs[*spec];
                let o = owner_of(*owner);
                let m = self.mem.remaining(s, &o).await;
                let r = self.redis.remaining(s, &o).await;
                match (&r, &m) {
                    (Ok(Some(rd)), Ok(Some(md))) => prop_assert!(rd <= md, "{rd:?} > {md:?}"),
                    _ => prop_assert_eq!(norm(&r), norm(&m)),
                }
            }
            Op::Inspect { spec } => {
                let s = &self.specs[*spec];
                let m = self.mem.inspect_now(s);
                let r = self.redis.inspect(s).await;
                let strip = |x: &Result<lease_core::LeaseInfo, BackendError>| match x {
                    Ok(i) => format!(
                        "ok {:?} {:?} ttl={} {:?} {:?} epoch={}",
                        i.holder,
                        i.metadata,
                        i.remaining.is_some(),
                        i.counter,
                        i.mark,
                        i.epoch.is_some()
                    ),
                    Err(e) => format!("err {}", kind(e)),
                };
                prop_assert_eq!(strip(&r), strip(&m));
            }
            Op::ForceRelease { spec } => {
                let s = &self.specs[*spec];
                let m = self.mem.force_release(s).await;
                let r = self.redis.force_release(s).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Raise { spec, owner, token } => {
                let s = &self.specs[*spec];
                let t = common::token(*token);
                let o = owner_of(*owner);
                let m = self.mem.raise_counter_now(s, &o, t);
                let r = self.redis.raise_counter(s, &o, t).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Fence {
                spec,
                token,
                writes,
            } => {
                let mark = self.mark_of(*spec);
                let raw = match token {
                    Tok::Below => mark.saturating_sub(1),
                    Tok::AtMark => mark,
                    Tok::Above => mark + 1,
                    Tok::Fixed(n) => *n,
                };
                let Ok(t) = Token::new(raw) else {
                    return Ok(());
                };
                // Distinct keys within a batch (see the report on lease-core's memory batch
                // check, which looks at the store before the batch, not at earlier writes).
                let mut used = Vec::new();
                let mut mw = Vec::new();
                let mut rw = Vec::new();
                for w in writes {
                    let keys: Vec<usize> = match w {
                        W::Set(k, _) | W::HSet(k, _, _) => vec![*k],
                        W::Del(ks) => ks.clone(),
                    };
                    if keys.iter().any(|k| used.contains(k)) {
                        continue;
                    }
                    used.extend(keys.iter().copied());
                    match w {
                        W::Set(k, v) => {
                            mw.push(MemoryWrite::Set {
                                key: key_of(*k).into(),
                                value: v.to_string(),
                            });
                            rw.push(FencedWrite::set(key_of(*k), v.to_string()));
                        }
                        W::HSet(k, f, v) => {
                            mw.push(MemoryWrite::HSet {
                                key: key_of(*k).into(),
                                field: FIELDS[*f].into(),
                                value: v.to_string(),
                            });
                            rw.push(FencedWrite::hset(key_of(*k), FIELDS[*f], v.to_string()));
                        }
                        W::Del(ks) => {
                            let names: Vec<String> =
                                ks.iter().map(|k| key_of(*k).to_string()).collect();
                            mw.push(MemoryWrite::Del {
                                keys: names.clone(),
                            });
                            rw.push(FencedWrite::del(names));
                        }
                    }
                }
                let Some(mark_key) = self.specs[*spec].mark_key() else {
                    return Ok(());
                };
                let m = self.mem.fenced_now(&mark_key, t, &mw);
                let fencer = self
                    .redis
                    .fencer_for(mark_key, t)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let r = fencer.apply_all(rw).await.map_err(BackendError::from);
                let n = |x: &Result<FenceOutcome, BackendError>| norm(x);
                prop_assert_eq!(n(&r), n(&m));
            }
            Op::LoseKey { key } => {
                let k = &universe()[*key];
                self.mem.lose_key(k);
                del(&mut self.raw, k).await;
            }
            Op::PutCounter { spec, value } => {
                if let Some(f) = self.specs[*spec].fence_key() {
                    self.mem.put(f, &value.to_string());
                    set(&mut self.raw, f, &value.to_string()).await;
                }
            }
            Op::PutMark { spec, value } => {
                if let Some(k) = self.specs[*spec].mark_key() {
                    self.mem.put(&k, &value.to_string());
                    set(&mut self.raw, &k, &value.to_string()).await;
                }
            }
            Op::PutString { key } => {
                self.mem.put(key_of(*key), "x");
                set(&mut self.raw, key_of(*key), "x").await;
            }
        }
        Ok(())
    }

    /// The same data in both stores.
    async fn compare_state(&mut self) -> Result<(), TestCaseError> {
        for k in universe() {
            let t: String = redis::cmd("TYPE")
                .arg(&k)
                .query_async(&mut self.raw)
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            match t.as_str() {
                // Epochs are each server's time: compare presence only.
                "string" if k.ends_with(":epoch") => {
                    prop_assert!(self.mem.get(&k).is_some(), "epoch {} only on Redis", k);
                }
                "string" => {
                    // The waiter mark is Redis's alone (the memory backend wakes its waiters
                    // itself): compared without it.
                    let v = get(&mut self.raw, &k)
                        .await
                        .map(lease_testkit::redis::without_waiter_mark);
                    prop_assert_eq!(v, self.mem.get(&k), "string {}", k);
                }
                "hash" => {
                    for f in FIELDS {
                        let v = hget(&mut self.raw, &k, f).await;
                        prop_assert_eq!(v, self.mem.hget(&k, f), "hash {} {}", k, f);
                    }
                    prop_assert_eq!(self.mem.get(&k), None);
                }
                "none" => {
                    prop_assert_eq!(self.mem.get(&k), None, "absent {}", k);
                    for f in FIELDS {
                        prop_assert_eq!(self.mem.hget(&k, f), None);
                    }
                }
                other => return Err(TestCaseError::fail(format!("type {other} of {k}"))),
            }
        }
        Ok(())
    }
}

fn owner_of(i: usize) -> lease_core::Owner {
    owner(OWNERS[i])
}

#[test]
fn redis_backend_matches_the_memory_backend() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_server, backend, raw) = rt.block_on(setup());
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&vec(op(), 1..40), |ops| {
            rt.block_on(async {
                let mut flush = raw.clone();
                let () = redis::cmd("FLUSHALL")
                    .query_async(&mut flush)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let mut case = Case {
                    redis: &backend,
                    raw: raw.clone(),
                    mem: MemoryBackend::new(ManualClock::new()),
                    specs: specs(),
                    last: vec![None; specs().len()],
                };
                for (i, op) in ops.iter().enumerate() {
                    case.step(op)
                        .await
                        .map_err(|e| TestCaseError::fail(format!("op #{i} {op:?}: {e}")))?;
                }
                case.compare_state().await
            })
        })
        .unwrap();
}

/// The memory backend's clock follows real time from `base`: before each memory operation it
/// is set to the time elapsed since `started` (the Redis operation just before ran no later).
struct Follow {
    clock: ManualClock,
    base: lease_core::Instant,
    started: std::time::Instant,
}

impl Follow {
    fn sync(&self) {
        self.clock.set(self.base + self.started.elapsed());
    }
}

/// Remaining TTLs of the two stores agree within `EXPIRY_TOLERANCE` (the memory clock is set
/// after the Redis operation, so memory's is the same or shorter, by the time in between).
fn close(what: &str, redis: Option<Duration>, mem: Option<Duration>) -> Result<(), String> {
    match (redis, mem) {
        (None, None) => Ok(()),
        (Some(r), Some(m)) if r.abs_diff(m) <= EXPIRY_TOLERANCE => Ok(()),
        other => Err(format!(
            "{what}: remaining TTLs differ (redis, memory) = {other:?}"
        )),
    }
}

const EXPIRY_TTL: Duration = Duration::from_secs(2);
const EXPIRY_TOLERANCE: Duration = Duration::from_millis(500);

/// Time advances on both sides: every spec is acquired with a short TTL on Redis and on the
/// memory backend, renewed half-way, then left to expire (the memory backend's `ManualClock`
/// follows real time; the real Redis TTL runs out). Before and after the expiry, outcomes,
/// remaining TTLs (within a tolerance) and the stored data agree: after it, the old holder's
/// renew is not held, nobody holds, and the next holder gets the next token.
#[test]
fn expiry_matches_the_memory_backend() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), expiry_case())
            .await
            .expect("the expiry parity case did not finish in time")
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

async fn expiry_case() -> Result<(), String> {
    let (_server, backend, raw) = setup().await;
    let clock = ManualClock::new();
    let follow = Follow {
        base: clock.now(),
        clock: clock.clone(),
        started: std::time::Instant::now(),
    };
    let mut case = Case {
        redis: &backend,
        raw: raw.clone(),
        mem: MemoryBackend::new(clock),
        specs: specs(),
        last: vec![None; specs().len()],
    };
    let ttl = lease_core::Ttl::new(EXPIRY_TTL).unwrap();
    let acquire = |spec: &Arc<LeaseSpec>, who: &str| {
        lease_core::AcquireRequest::new(spec.clone(), owner(who), ttl)
            .with_metadata(lease_core::Metadata::new("").unwrap())
    };
    let renew = |spec: &Arc<LeaseSpec>, who: &str| {
        lease_core::RenewRequest::new(spec.clone(), owner(who), ttl)
    };
    let remaining =
        |x: &Result<lease_core::LeaseInfo, BackendError>| x.as_ref().ok().and_then(|i| i.remaining);
    let specs = case.specs.clone();

    // 1. "a" acquires every spec (overlapping specs are refused alike on both).
    let mut held = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let r = backend.acquire(&acquire(s, "a")).await;
        follow.sync();
        let m = case.mem.acquire_now(&acquire(s, "a"));
        if norm_acquire(&r) != norm_acquire(&m) {
            return Err(format!("acquire spec {i}: redis {r:?}, memory {m:?}"));
        }
        if let Ok(AcquireOutcome::Acquired { token, .. }) = m {
            case.last[i] = token;
            held.push(i);
        }
    }
    if held.len() < 2 {
        return Err(format!("too few specs acquired to compare: {held:?}"));
    }
    for &i in &held {
        let r = backend.inspect(&specs[i]).await;
        follow.sync();
        let m = case.mem.inspect_now(&specs[i]);
        close(
            &format!("spec {i} after acquire"),
            remaining(&r),
            remaining(&m),
        )?;
    }

    // 2. Half-way (real time, as Redis sees it), "a" renews: both extend to a full TTL again.
    let key = lease_redis::slot::spec_keys(&specs[held[0]])[0].clone();
    let mut conn = raw.clone();
    while pttl(&mut conn, &key).await > EXPIRY_TTL.as_millis() as i64 / 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for &i in &held {
        let r = backend.renew(&renew(&specs[i], "a")).await;
        follow.sync();
        let m = case.mem.renew_now(&renew(&specs[i], "a"));
        if norm(&r) != norm(&m) || !matches!(m, Ok(lease_core::RenewOutcome::Renewed)) {
            return Err(format!(
                "renew spec {i} half-way: redis {r:?}, memory {m:?}"
            ));
        }
        let r = backend.inspect(&specs[i]).await;
        follow.sync();
        let m = case.mem.inspect_now(&specs[i]);
        close(
            &format!("spec {i} after renew"),
            remaining(&r),
            remaining(&m),
        )?;
    }

    // 3. Expiry: wait (bounded) until Redis has expired every held lease key; by then the
    //    memory clock, following real time from before the renewals, is past them too.
    //    (Counters and marks have no TTL: `PTTL` -1.)
    let keys: Vec<String> = held
        .iter()
        .flat_map(|&i| lease_redis::slot::spec_keys(&specs[i]))
        .collect();
    for k in &keys {
        while exists(&mut conn, k).await && pttl(&mut conn, k).await != -1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    for &i in &held {
        let s = &specs[i];
        let r = backend.inspect(s).await;
        follow.sync();
        let m = case.mem.inspect_now(s);
        let strip = |x: &Result<lease_core::LeaseInfo, BackendError>| {
            x.as_ref()
                .map(|i| {
                    format!(
                        "{:?} {:?} {:?} {:?}",
                        i.holder, i.remaining, i.counter, i.mark
                    )
                })
                .map_err(|e| kind(e))
        };
        if strip(&r) != strip(&m) {
            return Err(format!("spec {i} after expiry: redis {r:?}, memory {m:?}"));
        }
        if m.as_ref().is_ok_and(|x| x.holder.is_some()) {
            return Err(format!("spec {i} still held after its TTL: {m:?}"));
        }
        let o = owner("a");
        let r = backend.remaining(s, &o).await;
        follow.sync();
        let m = case.mem.remaining(s, &o).await;
        if norm(&r) != norm(&m) {
            return Err(format!(
                "remaining of spec {i} after expiry: redis {r:?}, memory {m:?}"
            ));
        }
        let r = backend.renew(&renew(s, "a")).await;
        follow.sync();
        let m = case.mem.renew_now(&renew(s, "a"));
        if norm(&r) != norm(&m) || !matches!(m, Ok(lease_core::RenewOutcome::NotHeld)) {
            return Err(format!(
                "renew of spec {i} after expiry: redis {r:?}, memory {m:?}"
            ));
        }
    }
    // 4. The next holder: the next token on both, a fresh TTL, and "a" is told who holds.
    for &i in &held {
        let s = &specs[i];
        // The next holder: the next token on both, and a fresh TTL.
        let r = backend.acquire(&acquire(s, "b")).await;
        follow.sync();
        let m = case.mem.acquire_now(&acquire(s, "b"));
        if norm_acquire(&r) != norm_acquire(&m) {
            return Err(format!(
                "acquire by b of spec {i}: redis {r:?}, memory {m:?}"
            ));
        }
        let Ok(AcquireOutcome::Acquired { token, .. }) = m else {
            continue; // An overlapping spec b already holds: refused alike on both.
        };
        if s.fence_key().is_some() && token.is_none_or(|t| Some(t) <= case.last[i]) {
            return Err(format!(
                "spec {i}: b's token {m:?} does not follow {:?}",
                case.last[i]
            ));
        }
        let r = backend.acquire(&acquire(s, "a")).await;
        follow.sync();
        let m = case.mem.acquire_now(&acquire(s, "a"));
        let held_for = |x: &Result<AcquireOutcome, BackendError>| match x {
            Ok(AcquireOutcome::Held { remaining, .. }) => *remaining,
            _ => None,
        };
        if norm_acquire(&r) != norm_acquire(&m) {
            return Err(format!(
                "acquire by a of spec {i} held by b: redis {r:?}, memory {m:?}"
            ));
        }
        close(&format!("spec {i} held by b"), held_for(&r), held_for(&m))?;
    }
    case.compare_state().await.map_err(|e| e.to_string())
}
