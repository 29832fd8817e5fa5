//! Fair locks on a real Redis: the fair scripts against their executable specification (the
//! in-memory backend), the server's clock, the wakes and the refusals.
//!
//! - `fair_scripts_match_the_memory_backend`: random sequences of fair attempts (with a place
//!   or none, with metadata or not), releases (with a term or not), leaves, plain obtains of
//!   the same key (barging), lost keys and the queue read back, on a real Redis and on
//!   `MemoryBackend` (TTLs long enough that nothing expires), give the same outcomes and the
//!   same queue, and the same inspection (holder, waiters in order, counter, mark);
//! - `places_expire_by_the_server`: a waiter that stops heartbeating is skipped once its place
//!   expired by the server's clock; the queue keys vanish with the last place;
//! - `a_lapsed_place_is_not_inspected`: the inspection lists the live waiters in queue order,
//!   each with its place's remaining time by the server's clock, and leaves out a place that
//!   lapsed while still stored (as the specification does);
//! - `a_full_queue_refuses_a_new_waiter`: past `MAX_WAITERS` live places a new waiter is
//!   refused with `QueueFull` (nothing changed), as the specification refuses it;
//! - `mass_expiry_is_dropped_a_bounded_batch_per_call`: more crashed waiters than one call
//!   drops are dropped over several calls, the head unknown meanwhile, as specified;
//! - `a_release_publishes_to_the_next_waiter_only`: a raw subscriber on every waiter's wake
//!   channel sees one message, on the head's;
//! - the typed refusals: a wrong-type key (an attempt and the inspection), a spec of two keys,
//!   and on Redis Cluster a name without a hash tag (before any round trip, the inspection
//!   too); malformed arguments sent raw.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::fair::{
    FairInfo, FairRequest, INSPECT_SHOWN, MAX_WAITERS, PRUNE_PER_CALL, fair_keys, fair_spec,
    wake_key,
};
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseSpec, Ttl};
use lease_redis::{RedisBackend, Topology};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const OWNERS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn spec() -> Arc<LeaseSpec> {
    Arc::new(fair_spec("{fair}", None).expect("spec"))
}

fn fair(spec: &Arc<LeaseSpec>, who: &str, ttl: Ttl, place: Option<Ttl>) -> FairRequest {
    FairRequest::new(
        AcquireRequest::new(Arc::clone(spec), owner(who), ttl),
        place,
    )
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        owner: usize,
        place: bool,
        meta: bool,
    },
    Barge {
        owner: usize,
    },
    Release {
        owner: usize,
        term: bool,
    },
    Leave {
        owner: usize,
    },
    LoseKey {
        which: usize,
    },
    Queue,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..OWNERS.len(), prop::bool::weighted(0.9), prop::bool::weighted(0.2))
            .prop_map(|(owner, place, meta)| Op::Acquire { owner, place, meta }),
        1 => (0..OWNERS.len()).prop_map(|owner| Op::Barge { owner }),
        3 => (0..OWNERS.len(), any::<bool>()).prop_map(|(owner, term)| Op::Release { owner, term }),
        1 => (0..OWNERS.len()).prop_map(|owner| Op::Leave { owner }),
        1 => (0usize..3).prop_map(|which| Op::LoseKey { which }),
        2 => Just(Op::Queue),
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
        }) => format!("held {holder:?} {remaining:?} counter={:?}", fence.counter),
        other => norm(other),
    }
}

/// A fair inspection without the durations (the two clocks differ), each checked to be at
/// most what it was set to.
fn norm_inspect(r: &Result<FairInfo, BackendError>) -> String {
    match r {
        Ok(i) => {
            let within = |h: &lease_core::semaphore::PermitHolder| {
                h.remaining <= Duration::from_millis(LONG)
            };
            format!(
                "ok holder={:?} waiters={:?} waiting={} within={} counter={:?} mark={:?}",
                i.holder.as_ref().map(|h| &h.owner),
                i.waiters.iter().map(|w| &w.owner).collect::<Vec<_>>(),
                i.waiting,
                i.holder.iter().chain(&i.waiters).all(within),
                i.counter,
                i.mark
            )
        }
        Err(e) => format!("err {}", kind(e)),
    }
}

struct Case<'a> {
    redis: &'a RedisBackend<Conn>,
    raw: Conn,
    mem: MemoryBackend,
    spec: Arc<LeaseSpec>,
    /// The last token each owner was granted (for term-scoped releases).
    terms: [Option<lease_core::Token>; 5],
}

impl Case<'_> {
    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let long = ttl_ms(LONG);
        match *op {
            Op::Acquire { owner, place, meta } => {
                let mut req = fair(&self.spec, OWNERS[owner], long, place.then_some(long));
                if meta {
                    req = FairRequest::new(acq_meta(&self.spec, OWNERS[owner], "m"), req.place_ttl);
                }
                let m = self.mem.acquire_fair_now(&req);
                let r = self.redis.acquire_fair(&req).await;
                prop_assert_eq!(norm_acquire(&r), norm_acquire(&m));
                if let Ok(AcquireOutcome::Acquired { token, .. }) = &r {
                    self.terms[owner] = *token;
                }
            }
            Op::Barge { owner } => {
                let req = acq(&self.spec, OWNERS[owner]);
                let m = self.mem.acquire_now(&req);
                let r = self.redis.acquire(&req).await;
                // The plain lock reports the holder's remaining TTL: Redis's clock moved.
                let coarse = |x: &Result<AcquireOutcome, BackendError>| match x {
                    Ok(AcquireOutcome::Held {
                        holder, remaining, ..
                    }) => format!("held {holder:?} {}", remaining.is_some()),
                    other => norm_acquire(other),
                };
                prop_assert_eq!(coarse(&r), coarse(&m));
                if let Ok(AcquireOutcome::Acquired { token, .. }) = &r {
                    self.terms[owner] = *token;
                }
            }
            Op::Release { owner, term } => {
                let t = if term { self.terms[owner] } else { None };
                let req = release(&self.spec, OWNERS[owner], t);
                let m = self.mem.release_fair_now(&req);
                let r = self.redis.release_fair(&req).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Leave { owner } => {
                let o = common::owner(OWNERS[owner]);
                let m = self.mem.leave_fair_now(&self.spec, &o);
                let r = self.redis.leave_fair(&self.spec, &o).await;
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::LoseKey { which } => {
                let name = self.spec.keys()[0].clone();
                let [queue, places] = fair_keys(&name);
                let key = [name, queue, places][which].clone();
                self.mem.lose_key(&key);
                del(&mut self.raw, &key).await;
            }
            Op::Queue => {
                let m = self.mem.fair_queue_now(&self.spec).expect("memory queue");
                let [queue, _] = fair_keys(&self.spec.keys()[0]);
                let r: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&queue)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut self.raw)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                // Entries without a place behind the head (after a lost places key) stay in
                // the stored queue until they reach the front; the live queue skips them.
                let places: Vec<String> = redis::cmd("ZRANGE")
                    .arg(fair_keys(&self.spec.keys()[0])[1].as_str())
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut self.raw)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let live: Vec<String> = r.into_iter().filter(|o| places.contains(o)).collect();
                prop_assert_eq!(live, m);
                let m = self.mem.inspect_fair_now(&self.spec);
                let r = self.redis.inspect_fair(&self.spec).await;
                prop_assert_eq!(norm_inspect(&r), norm_inspect(&m));
            }
        }
        Ok(())
    }
}

#[test]
fn fair_scripts_match_the_memory_backend() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_server, backend, raw) = rt.block_on(setup());
    let mut runner = parity_runner(64);
    runner
        .run(&vec(op(), 1..50), |ops| {
            rt.block_on(async {
                flushall(&raw).await?;
                let mut case = Case {
                    redis: &backend,
                    raw: raw.clone(),
                    mem: MemoryBackend::new(ManualClock::new()),
                    spec: spec(),
                    terms: [None; 5],
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

/// A waiter that stops heartbeating is skipped once its place expired by the server's clock;
/// the queue and places keys vanish with the last place.
#[tokio::test]
async fn places_expire_by_the_server() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let place = Some(ttl_ms(200));
    let got = backend.acquire_fair(&fair(&spec, "a", long, place)).await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "{got:?}"
    );
    for who in ["b", "c"] {
        let got = backend.acquire_fair(&fair(&spec, who, long, place)).await;
        assert!(matches!(got, Ok(AcquireOutcome::Held { .. })), "{got:?}");
    }
    let [queue, places] = fair_keys(&spec.keys()[0]);
    assert!(pttl(&mut raw, &queue).await > 0, "the queue expires");
    // a releases; b (the head) has crashed; c keeps heartbeating.
    let released = backend.release_fair(&release(&spec, "a", None)).await;
    assert_eq!(
        released.expect("release"),
        lease_core::ReleaseOutcome::Released
    );
    let early = backend.acquire_fair(&fair(&spec, "c", long, place)).await;
    assert!(
        matches!(early, Ok(AcquireOutcome::Held { holder: Some(ref h), .. }) if h == "b"),
        "the free lock is kept for b: {early:?}"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let late = backend.acquire_fair(&fair(&spec, "c", long, place)).await;
    assert!(
        matches!(late, Ok(AcquireOutcome::Acquired { .. })),
        "b's place expired, c is first: {late:?}"
    );
    assert!(!exists(&mut raw, &queue).await, "nobody waits");
    assert!(!exists(&mut raw, &places).await);
}

/// The inspection shows the holder and the live waiters in queue order with their places'
/// time by the server's clock; a place that lapsed is not shown though still stored, on the
/// server as in the specification.
#[tokio::test]
async fn a_lapsed_place_is_not_inspected() {
    let (_server, backend, mut raw) = setup().await;
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = spec();
    let long = ttl_ms(LONG);
    let short = Some(ttl_ms(100));
    // h holds; b queues with a short place and stops; c and d queue with long places.
    let steps = [
        ("h", long, Some(long)),
        ("b", long, short),
        ("c", long, Some(long)),
        ("d", long, Some(long)),
    ];
    for (who, ttl, place) in steps {
        let req = fair(&spec, who, ttl, place);
        let r = backend.acquire_fair(&req).await;
        let m = mem.acquire_fair_now(&req);
        assert_eq!(norm_acquire(&r), norm_acquire(&m));
    }
    let info = backend.inspect_fair(&spec).await.expect("inspect");
    let owners = |i: &FairInfo| {
        i.waiters
            .iter()
            .map(|w| w.owner.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(owners(&info), ["b", "c", "d"], "queue order");
    assert_eq!(info.holder.as_ref().map(|h| h.owner.as_str()), Some("h"));
    assert!(info.waiters[0].remaining <= Duration::from_millis(100));
    assert!(info.waiters[1].remaining > Duration::from_millis(100));
    assert_eq!(info.counter.map(|t| t.get()), Some(1), "h's token");
    tokio::time::sleep(Duration::from_millis(150)).await;
    mem.clock().advance(Duration::from_millis(150));
    let [_, places] = fair_keys(&spec.keys()[0]);
    let stored: u64 = redis::cmd("ZCARD")
        .arg(&places)
        .query_async(&mut raw)
        .await
        .expect("zcard");
    assert_eq!(stored, 3, "b's lapsed place is still stored");
    let info = backend.inspect_fair(&spec).await;
    let m = mem.inspect_fair_now(&spec);
    assert_eq!(norm_inspect(&info), norm_inspect(&m));
    assert_eq!(owners(&info.expect("inspect")), ["c", "d"], "b lapsed");
}

/// The queue's bound: with [`MAX_WAITERS`] live places, a new waiter is refused with
/// `QueueFull` and nothing changes, on the server as in the specification; a queued waiter
/// still heartbeats, and once one leaves a new one is queued. An attempt without a place (it
/// never queues) is not refused.
#[tokio::test]
async fn a_full_queue_refuses_a_new_waiter() {
    let (_server, backend, raw) = setup().await;
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = spec();
    let long = ttl_ms(LONG);
    let both = |who: String| {
        let req = fair(&spec, &who, long, Some(long));
        let m = mem.acquire_fair_now(&req);
        (req, m)
    };
    let (req, m) = both("h".to_owned());
    let r = backend.acquire_fair(&req).await;
    assert!(matches!(r, Ok(AcquireOutcome::Acquired { .. })), "{r:?}");
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    let waiters: Vec<String> = (0..MAX_WAITERS).map(|i| format!("w{i:05}")).collect();
    for who in &waiters {
        let (req, m) = both(who.clone());
        let r = backend.acquire_fair(&req).await;
        assert!(matches!(r, Ok(AcquireOutcome::Held { .. })), "{r:?}");
        assert!(matches!(m, Ok(AcquireOutcome::Held { .. })), "{m:?}");
    }
    let [queue, places] = fair_keys(&spec.keys()[0]);
    let zcard = |key: String| {
        let mut raw = raw.clone();
        async move {
            let n: usize = redis::cmd("ZCARD")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .expect("ZCARD");
            n
        }
    };
    assert_eq!(zcard(queue.clone()).await, MAX_WAITERS);
    let (req, m) = both("late".to_owned());
    let r = backend.acquire_fair(&req).await;
    assert!(
        matches!(r, Err(BackendError::QueueFull { ref name, limit }) if name == "{fair}" && limit == MAX_WAITERS),
        "{r:?}"
    );
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    assert_eq!(zcard(queue.clone()).await, MAX_WAITERS, "nothing queued");
    assert_eq!(zcard(places.clone()).await, MAX_WAITERS, "nothing changed");
    // Without a place: a plain attempt, not refused.
    let req = fair(&spec, "late", long, None);
    let (r, m) = (backend.acquire_fair(&req).await, mem.acquire_fair_now(&req));
    assert!(matches!(r, Ok(AcquireOutcome::Held { .. })), "{r:?}");
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    // A queued waiter heartbeats as before.
    let (req, m) = both(waiters[MAX_WAITERS - 1].clone());
    let r = backend.acquire_fair(&req).await;
    assert!(matches!(r, Ok(AcquireOutcome::Held { .. })), "{r:?}");
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    let info = backend.inspect_fair(&spec).await;
    assert_eq!(
        norm_inspect(&info),
        norm_inspect(&mem.inspect_fair_now(&spec))
    );
    let info = info.expect("inspect");
    assert_eq!(info.waiting, MAX_WAITERS);
    assert_eq!(
        info.waiters.len(),
        INSPECT_SHOWN,
        "the inspection is bounded"
    );
    // One leaves: the next new waiter is queued.
    let w = owner(&waiters[7]);
    let (r, m) = (
        backend.leave_fair(&spec, &w).await,
        mem.leave_fair_now(&spec, &w),
    );
    assert!(matches!(r, Ok(true)), "{r:?}");
    assert_eq!(norm(&r), norm(&m));
    let (req, m) = both("late".to_owned());
    let r = backend.acquire_fair(&req).await;
    assert!(matches!(r, Ok(AcquireOutcome::Held { .. })), "{r:?}");
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    assert_eq!(zcard(queue).await, MAX_WAITERS);
}

/// More waiters crash at once than one call drops ([`PRUNE_PER_CALL`]): a call drops that
/// many and, finding no live head within its budget, grants the free lock to nobody; the next
/// calls drop the rest and the first live waiter gets the lock, on the server (its clock) as
/// in the specification (a manual clock moved as far).
#[tokio::test]
async fn mass_expiry_is_dropped_a_bounded_batch_per_call() {
    let (_server, backend, mut raw) = setup().await;
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = spec();
    let long = ttl_ms(LONG);
    let short = Some(ttl_ms(300));
    let crashed = PRUNE_PER_CALL + PRUNE_PER_CALL / 2;
    let mut steps = vec![("h".to_owned(), Some(long))];
    steps.extend((0..crashed).map(|i| (format!("c{i:04}"), short)));
    steps.push(("z".to_owned(), Some(long)));
    let started = std::time::Instant::now();
    for (who, place) in &steps {
        let req = fair(&spec, who, long, *place);
        let r = backend.acquire_fair(&req).await;
        let m = mem.acquire_fair_now(&req);
        assert_eq!(norm_acquire(&r), norm_acquire(&m), "{who}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "queued before any short place lapsed"
    );
    let released = backend.release_fair(&release(&spec, "h", None)).await;
    let m = mem.release_fair_now(&release(&spec, "h", None));
    assert_eq!(norm(&released), norm(&m));
    tokio::time::sleep(Duration::from_millis(400)).await;
    mem.clock().advance(Duration::from_millis(400));
    let [queue, _] = fair_keys(&spec.keys()[0]);
    let stored = |raw: &mut Conn| {
        let mut raw = raw.clone();
        let queue = queue.clone();
        async move {
            let n: usize = redis::cmd("ZCARD")
                .arg(&queue)
                .query_async(&mut raw)
                .await
                .expect("ZCARD");
            n
        }
    };
    assert_eq!(stored(&mut raw).await, crashed + 1);
    // z's first heartbeat drops PRUNE_PER_CALL crashed entries; the rest still hide the head.
    let req = fair(&spec, "z", long, Some(long));
    let r = backend.acquire_fair(&req).await;
    let m = mem.acquire_fair_now(&req);
    assert!(
        matches!(r, Ok(AcquireOutcome::Held { holder: None, .. })),
        "the head is not known yet: {r:?}"
    );
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    assert_eq!(stored(&mut raw).await, crashed + 1 - PRUNE_PER_CALL);
    let info = backend.inspect_fair(&spec).await;
    assert_eq!(
        norm_inspect(&info),
        norm_inspect(&mem.inspect_fair_now(&spec))
    );
    assert_eq!(info.expect("inspect").waiting, 1, "only z is live");
    // The next drops the rest and finds z first in line.
    let r = backend.acquire_fair(&req).await;
    let m = mem.acquire_fair_now(&req);
    assert!(matches!(r, Ok(AcquireOutcome::Acquired { .. })), "{r:?}");
    assert_eq!(norm_acquire(&r), norm_acquire(&m));
    assert!(!exists(&mut raw, &queue).await, "nobody waits");
}

/// A release publishes one wake, on the next waiter's own channel.
#[tokio::test]
async fn a_release_publishes_to_the_next_waiter_only() {
    let (server, backend, _raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let client = redis::Client::open(server.url()).expect("client");
    let mut sub = client.get_async_pubsub().await.expect("pubsub");
    sub.psubscribe(format!("*{}*", wake_key("{fair}", "")))
        .await
        .expect("psubscribe");
    backend
        .acquire_fair(&fair(&spec, "a", long, Some(long)))
        .await
        .expect("a");
    for who in ["b", "c", "d"] {
        backend
            .acquire_fair(&fair(&spec, who, long, Some(long)))
            .await
            .expect("queued");
    }
    backend
        .release_fair(&release(&spec, "a", None))
        .await
        .expect("release");
    let mut messages = sub.on_message();
    let first = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut messages))
        .await
        .expect("a wake within 5 s")
        .expect("a message");
    assert!(
        first.get_channel_name().ends_with(&wake_key("{fair}", "b")),
        "{}",
        first.get_channel_name()
    );
    // Nobody else: the next wake seen is b's leaving (it hands the head to c), not a herd.
    backend
        .leave_fair(&spec, &owner("b"))
        .await
        .expect("b leaves");
    let second = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut messages))
        .await
        .expect("a wake within 5 s")
        .expect("a message");
    assert!(
        second
            .get_channel_name()
            .ends_with(&wake_key("{fair}", "c")),
        "{}",
        second.get_channel_name()
    );
}

async fn futures_next<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

#[tokio::test]
async fn bad_keys_and_specs_are_refused() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let [queue, _] = fair_keys(&spec.keys()[0]);
    set(&mut raw, &queue, "x").await;
    let got = backend
        .acquire_fair(&fair(&spec, "a", long, Some(long)))
        .await;
    assert!(
        matches!(got, Err(BackendError::Refused(ref m)) if m.contains("WRONGTYPE")),
        "{got:?}"
    );
    assert_eq!(
        get(&mut raw, &spec.keys()[0]).await,
        None,
        "nothing written"
    );
    let read = backend.inspect_fair(&spec).await;
    assert!(
        matches!(read, Err(BackendError::Refused(ref m)) if m.contains("WRONGTYPE")),
        "{read:?}"
    );
    del(&mut raw, &queue).await;
    // A spec of two keys is not a fair lock's: refused before any round trip.
    let two = lock(&["{fair}:x", "{fair}:y"], None);
    let req = FairRequest::new(acq(&two, "a"), None);
    assert!(matches!(
        backend.acquire_fair(&req).await,
        Err(BackendError::Invalid(_))
    ));
    // On Redis Cluster, every key of a fair lock must share a slot.
    let cluster = RedisBackend::with_topology(raw.clone(), Topology::Cluster);
    let untagged = fair_spec("jobs", None).expect("spec");
    assert!(matches!(
        cluster.check_fair(&untagged),
        Err(BackendError::Invalid(_))
    ));
    // The read too, before any round trip (this server, not a cluster, would answer).
    assert!(matches!(
        cluster.inspect_fair(&untagged).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(
        cluster
            .check_fair(&fair_spec("{jobs}", None).expect("spec"))
            .is_ok()
    );
}

/// The fair scripts refuse malformed arguments with an error reply, before writing anything.
#[tokio::test]
async fn malformed_arguments_are_refused_and_change_nothing() {
    let (_server, _backend, mut raw) = setup().await;
    const PRELUDE: &str = include_str!("../scripts/prelude.lua");
    const HELPERS: &str = include_str!("../scripts/semaphore.lua");
    const FAIR: &str = include_str!("../scripts/fair.lua");
    let acquire = format!(
        "{PRELUDE}{HELPERS}{FAIR}{}",
        include_str!("../scripts/fair_acquire.lua")
    );
    let release = format!(
        "{PRELUDE}{HELPERS}{FAIR}{}",
        include_str!("../scripts/fair_release.lua")
    );
    let keys = [
        "{m}",
        "{m}:queue",
        "{m}:places",
        "{m}:fence",
        "{m}:fence:applied",
        "{m}:fence:epoch",
    ];
    for packed in [
        "",
        "x",
        "0:10:counter:0:",
        "10:x:counter:0:",
        "10:10::0:",
        "10:10:counter:x:",
        "-1:10:counter:0:",
        "10:9007199254740993:counter:0:",
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
    for packed in ["", "x", "r", "q::", "r:5:"] {
        let r: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(&release)
            .arg(3)
            .arg(&keys[..3])
            .arg("owner")
            .arg(packed)
            .query_async(&mut raw)
            .await;
        assert!(r.is_err(), "release {packed:?}: {r:?}");
    }
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert!(left.is_empty(), "nothing written: {left:?}");
}
