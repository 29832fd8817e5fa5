//! Semaphores on a real Redis: the permit scripts against their executable specification (the
//! in-memory backend), and their refusals.
//!
//! - `permit_scripts_match_the_memory_backend`: random sequences of permit operations (obtain
//!   with the right count or another, renew, release, remaining, inspect, lost keys, a corrupt
//!   count) on a real Redis and on `MemoryBackend` (TTLs long enough that nothing expires)
//!   give the same outcomes;
//! - `expiry_is_judged_by_the_server`: permits expire by the server's clock (a holder that
//!   stopped renewing frees its permit one TTL later; the keys vanish with the last permit);
//! - the typed refusals: another count, a wrong-type key, a corrupt count, a lock's spec, and
//!   on Redis Cluster a name without a hash tag (before any round trip).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::semaphore::{PermitCount, PermitRequest, semaphore_spec};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseSpec, ReleaseOutcome,
    RenewOutcome, RenewRequest, Ttl,
};
use lease_redis::{RedisBackend, Topology};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const OWNERS: [&str; 5] = ["a", "b", "c", "d", "e"];
const N: u32 = 3;

fn spec() -> Arc<LeaseSpec> {
    Arc::new(semaphore_spec("{sem}", None).expect("spec"))
}

fn permit(spec: &Arc<LeaseSpec>, who: &str, n: u32, ttl: Ttl) -> PermitRequest {
    PermitRequest::new(
        AcquireRequest::new(Arc::clone(spec), owner(who), ttl),
        PermitCount::new(n).expect("count"),
    )
}

#[derive(Clone, Debug)]
enum Op {
    Acquire { owner: usize, count: u32 },
    Renew { owner: usize },
    Release { owner: usize },
    Remaining { owner: usize },
    Inspect,
    LoseKey { size: bool },
    CorruptCount,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..OWNERS.len(), prop_oneof![8 => Just(N), 1 => Just(N + 1), 1 => Just(1u32)])
            .prop_map(|(owner, count)| Op::Acquire { owner, count }),
        2 => (0..OWNERS.len()).prop_map(|owner| Op::Renew { owner }),
        3 => (0..OWNERS.len()).prop_map(|owner| Op::Release { owner }),
        1 => (0..OWNERS.len()).prop_map(|owner| Op::Remaining { owner }),
        1 => Just(Op::Inspect),
        1 => any::<bool>().prop_map(|size| Op::LoseKey { size }),
        1 => Just(Op::CorruptCount),
    ]
}

fn norm_acquire(r: &Result<AcquireOutcome, BackendError>) -> String {
    match r {
        Ok(AcquireOutcome::Acquired { token, fence }) => {
            format!("acquired {token:?} before={:?}", fence.counter)
        }
        Ok(AcquireOutcome::Held {
            holder,
            remaining,
            fence,
        }) => format!(
            "held {holder:?} ttl={} counter={:?}",
            remaining.is_some(),
            fence.counter
        ),
        other => norm(other),
    }
}

struct Case<'a> {
    redis: &'a RedisBackend<Conn>,
    raw: Conn,
    mem: MemoryBackend,
    spec: Arc<LeaseSpec>,
}

impl Case<'_> {
    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let long = ttl_ms(LONG);
        match op {
            Op::Acquire { owner, count } => {
                let req = permit(&self.spec, OWNERS[*owner], *count, long);
                let m = self.mem.acquire_permit_now(&req);
                let r = self.redis.acquire_permit(&req).await;
                prop_assert_eq!(norm_acquire(&r), norm_acquire(&m));
            }
            Op::Renew { owner } => {
                let req = renew(&self.spec, OWNERS[*owner]);
                let m = self.mem.renew_permit_now(&req);
                let r = self.redis.renew_permit(&req).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Release { owner } => {
                let req = release(&self.spec, OWNERS[*owner], None);
                let m = self.mem.release_permit_now(&req);
                let r = self.redis.release_permit(&req).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Remaining { owner } => {
                let o = common::owner(OWNERS[*owner]);
                let m = self.mem.permit_remaining(&self.spec, &o).await;
                let r = self.redis.permit_remaining(&self.spec, &o).await;
                match (&r, &m) {
                    (Ok(Some(rd)), Ok(Some(md))) => prop_assert!(rd <= md, "{rd:?} > {md:?}"),
                    _ => prop_assert_eq!(norm(&r), norm(&m)),
                }
            }
            Op::Inspect => {
                let m = self.mem.inspect_semaphore_now(&self.spec);
                let r = self.redis.inspect_semaphore(&self.spec).await;
                let strip = |x: &Result<lease_core::semaphore::SemaphoreInfo, BackendError>| match x
                {
                    Ok(i) => format!(
                        "ok {:?} {:?} {:?} {:?}",
                        i.permits,
                        // As a set: Redis's clock moves between obtains, memory's does not,
                        // so the order by expiry differs.
                        i.holders
                            .iter()
                            .map(|h| &h.owner)
                            .collect::<std::collections::BTreeSet<_>>(),
                        i.counter,
                        i.mark
                    ),
                    Err(e) => format!("err {}", kind(e)),
                };
                prop_assert_eq!(strip(&r), strip(&m));
            }
            Op::LoseKey { size } => {
                let key = &self.spec.keys()[usize::from(*size)];
                self.mem.lose_key(key);
                del(&mut self.raw, key).await;
            }
            Op::CorruptCount => {
                let key = &self.spec.keys()[1];
                self.mem.put(key, "03");
                set(&mut self.raw, key, "03").await;
            }
        }
        Ok(())
    }
}

#[test]
fn permit_scripts_match_the_memory_backend() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_server, backend, raw) = rt.block_on(setup());
    let mut runner = parity_runner(64);
    runner
        .run(&vec(op(), 1..40), |ops| {
            rt.block_on(async {
                flushall(&raw).await?;
                let mut case = Case {
                    redis: &backend,
                    raw: raw.clone(),
                    mem: MemoryBackend::new(ManualClock::new()),
                    spec: spec(),
                };
                for (i, op) in ops.iter().enumerate() {
                    case.step(op)
                        .await
                        .map_err(|e| TestCaseError::fail(format!("op #{i} {op:?}: {e}")))?;
                }
                Ok(())
            })
        })
        .expect("parity");
}

/// Permits expire by the server's clock: a holder that stops renewing frees its permit one TTL
/// later, without a release; the keys vanish with the last permit.
#[tokio::test]
async fn expiry_is_judged_by_the_server() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let short = ttl_ms(300);
    let long = ttl_ms(LONG);
    for who in ["a", "b"] {
        let got = backend.acquire_permit(&permit(&spec, who, 2, short)).await;
        assert!(
            matches!(got, Ok(AcquireOutcome::Acquired { .. })),
            "{got:?}"
        );
    }
    let full = backend.acquire_permit(&permit(&spec, "c", 2, long)).await;
    let Ok(AcquireOutcome::Held {
        holder: None,
        remaining: Some(r),
        ..
    }) = full
    else {
        panic!("expected held, got {full:?}");
    };
    assert!(r <= Duration::from_millis(300), "{r:?}");
    assert!(
        pttl(&mut raw, &spec.keys()[0]).await > 0,
        "the keys expire with the last permit"
    );
    // "a" keeps renewing, "b" has crashed.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let renewed = backend.renew_permit(&renew_ttl(&spec, "a", short)).await;
    assert_eq!(renewed.expect("renew"), RenewOutcome::Renewed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let renewed = backend.renew_permit(&renew_ttl(&spec, "b", short)).await;
    assert_eq!(
        renewed.expect("renew"),
        RenewOutcome::NotHeld,
        "b's permit expired"
    );
    let got = backend.acquire_permit(&permit(&spec, "c", 2, short)).await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "b's permit is free: {got:?}"
    );
    let info = backend.inspect_semaphore(&spec).await.expect("inspect");
    let owners: Vec<&str> = info.holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners.len(), 2);
    assert!(owners.contains(&"a") && owners.contains(&"c"), "{owners:?}");
    assert_eq!(info.permits, Some(2));
    // Nobody renews: both keys vanish on their own.
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(!exists(&mut raw, &spec.keys()[0]).await);
    assert!(!exists(&mut raw, &spec.keys()[1]).await);
}

fn renew_ttl(spec: &Arc<LeaseSpec>, who: &str, ttl: Ttl) -> RenewRequest {
    RenewRequest::new(Arc::clone(spec), owner(who), ttl)
}

#[tokio::test]
async fn another_count_is_refused_typed_and_changes_nothing() {
    let (_server, backend, _raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let first = backend.acquire_permit(&permit(&spec, "a", 3, long)).await;
    assert!(matches!(first, Ok(AcquireOutcome::Acquired { .. })));
    let other = backend.acquire_permit(&permit(&spec, "b", 5, long)).await;
    match other {
        Err(
            ref e @ BackendError::PermitsMismatch {
                ref name,
                stored: 3,
                asked: 5,
            },
        ) => {
            assert_eq!(name, "{sem}");
            assert!(!e.is_transient(), "permanent");
            assert_eq!(e.effect(), lease_core::Effect::NotApplied);
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    let info = backend.inspect_semaphore(&spec).await.expect("inspect");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.counter.map(|t| t.get()), Some(1), "no token minted");
    // Released, the semaphore is empty: another count may define it.
    let released = backend.release_permit(&release(&spec, "a", None)).await;
    assert_eq!(released.expect("release"), ReleaseOutcome::Released);
    let again = backend.acquire_permit(&permit(&spec, "b", 5, long)).await;
    assert!(
        matches!(again, Ok(AcquireOutcome::Acquired { .. })),
        "{again:?}"
    );
}

#[tokio::test]
async fn bad_keys_and_specs_are_refused() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    // A wrong-type permits key: the server's WRONGTYPE, nothing changed.
    set(&mut raw, &spec.keys()[0], "x").await;
    let got = backend.acquire_permit(&permit(&spec, "a", 3, long)).await;
    assert!(
        matches!(got, Err(BackendError::Refused(ref m)) if m.contains("WRONGTYPE")),
        "{got:?}"
    );
    del(&mut raw, &spec.keys()[0]).await;
    // A lock's spec is not a semaphore's: refused before any round trip.
    let lock_spec = lock(&["{sem}:x"], None);
    let req = PermitRequest::new(
        AcquireRequest::new(lock_spec, owner("a"), long),
        PermitCount::new(3).expect("count"),
    );
    assert!(matches!(
        backend.acquire_permit(&req).await,
        Err(BackendError::Invalid(_))
    ));
    // On Redis Cluster, every key of a semaphore must share a slot: no hash tag, refused
    // before any round trip (the topology check needs no cluster).
    let conn = raw.clone();
    let cluster = RedisBackend::with_topology(conn, Topology::Cluster);
    let untagged = semaphore_spec("deploys", None).expect("spec");
    assert!(matches!(
        cluster.check_semaphore(&untagged),
        Err(BackendError::Invalid(_))
    ));
    assert!(
        cluster
            .check_semaphore(&semaphore_spec("{deploys}", None).expect("spec"))
            .is_ok()
    );
    // The in-memory backend keeps semaphores; a backend without permit methods refuses.
    assert!(
        MemoryBackend::new(ManualClock::new())
            .check_semaphore(&spec)
            .is_ok()
    );
}

/// The permit scripts refuse malformed arguments with an error reply, before writing anything
/// (sent raw, as a careless or hostile client could).
#[tokio::test]
async fn malformed_arguments_are_refused_and_change_nothing() {
    let (_server, _backend, mut raw) = setup().await;
    const PRELUDE: &str = include_str!("../scripts/prelude.lua");
    const HELPERS: &str = include_str!("../scripts/semaphore.lua");
    let acquire = format!(
        "{PRELUDE}{HELPERS}{}",
        include_str!("../scripts/permit_acquire.lua")
    );
    let renew = format!(
        "{PRELUDE}{HELPERS}{}",
        include_str!("../scripts/permit_renew.lua")
    );
    let keys = [
        "{m}:permits",
        "{m}:size",
        "{m}:fence",
        "{m}:fence:applied",
        "{m}:fence:epoch",
    ];
    for packed in [
        "",
        "x",
        "0:3:counter:0",
        "10:0:counter:0",
        "10:10001:counter:0",
        "10:03:counter:0",
        "10:3",
        "10:3:counter",
        "10:3:counter:x",
        "-1:3:counter:0",
        "10:-3:counter:0",
    ] {
        let r: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(&acquire)
            .arg(keys.len())
            .arg(&keys)
            .arg("owner")
            .arg(packed)
            .query_async(&mut raw)
            .await;
        assert!(r.is_err(), "{packed:?}: {r:?}");
    }
    for ttl in ["", "0", "-5", "1.5", "x", "9007199254740993"] {
        let r: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(&renew)
            .arg(2)
            .arg(&keys[..2])
            .arg("owner")
            .arg(ttl)
            .query_async(&mut raw)
            .await;
        assert!(r.is_err(), "renew ttl {ttl:?}: {r:?}");
    }
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert!(left.is_empty(), "nothing written: {left:?}");
}

/// A batch of permit renewals (`renew_permit_many`, what auto-renewed permits are sent as):
/// one script call for permits of several semaphores, each answered as `renew_permit` answers
/// it alone (renewed, not held, a wrong-type key refused), a request refused before any round
/// trip answered alone, and the same answers as the specification.
#[tokio::test]
async fn a_batch_of_permit_renewals_is_one_call_and_judged_one_by_one() {
    let (_server, _backend, raw) = setup().await;
    let counting = Counting::new(raw.clone());
    let backend = RedisBackend::new(counting.clone());
    let mem = MemoryBackend::new(ManualClock::new());
    let mut raw = raw;
    let (a, b) = (
        Arc::new(semaphore_spec("{a}", None).expect("spec")),
        Arc::new(semaphore_spec("{b}", None).expect("spec")),
    );
    let short = ttl_ms(10_000);
    for (spec, who) in [(&a, "a1"), (&a, "a2"), (&b, "b1")] {
        let req = permit(spec, who, N, short);
        assert!(matches!(
            backend.acquire_permit(&req).await,
            Ok(AcquireOutcome::Acquired { .. })
        ));
        assert!(matches!(
            mem.acquire_permit_now(&req),
            Ok(AcquireOutcome::Acquired { .. })
        ));
    }
    let wrong = Arc::new(semaphore_spec("{w}", None).expect("spec"));
    set(&mut raw, &wrong.keys()[0], "not a sorted set").await;
    mem.put(&wrong.keys()[0], "not a sorted set");
    let not_a_semaphore = lock(&["{a}:lock"], None);
    let long = ttl_ms(LONG);
    let renew =
        |spec: &Arc<LeaseSpec>, who: &str| RenewRequest::new(Arc::clone(spec), owner(who), long);
    let reqs = [
        renew(&a, "a1"),
        renew(&b, "b1"),
        renew(&a, "nobody"),
        renew(&wrong, "w1"),
        renew(&not_a_semaphore, "a1"),
        renew(&a, "a2"),
    ];
    let refs: Vec<&RenewRequest> = reqs.iter().collect();
    // The first batch also loads the script (NOSCRIPT, then EVAL); the second is one call.
    let batch = || tokio::time::timeout(Duration::from_secs(10), backend.renew_permit_many(&refs));
    let first = batch().await.expect("bounded");
    let before = counting.calls();
    let got = batch().await.expect("bounded");
    assert_eq!(counting.calls() - before, 1, "one pipelined script call");
    assert_eq!(
        first.iter().map(norm).collect::<Vec<_>>(),
        got.iter().map(norm).collect::<Vec<_>>()
    );
    let kinds: Vec<String> = got.iter().map(norm).collect();
    assert_eq!(
        kinds,
        [
            "ok Renewed",
            "ok Renewed",
            "ok NotHeld",
            "err refused",
            "err invalid",
            "ok Renewed"
        ]
    );
    for (req, r) in reqs.iter().zip(&got) {
        let alone = mem.renew_permit_now(req);
        assert_eq!(norm(r), norm(&alone), "{req:?}: the spec answers alike");
    }
    // Renewed to the batch's TTL: well past the obtain's.
    let left = backend
        .permit_remaining(&a, &owner("a2"))
        .await
        .expect("remaining")
        .expect("held");
    assert!(left > Duration::from_secs(30), "{left:?}");
}
