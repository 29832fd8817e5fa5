//! Read-write locks on a real Redis: the readers' scripts and the plain lock's scripts (the
//! writer) against their executable specification (the in-memory backend), and what only a
//! server shows.
//!
//! - `rw_scripts_match_the_memory_backend`: random sequences of reader and writer operations
//!   on one key (a reader's obtain, renew, release, remaining; the writer's obtain fenced
//!   through `acquire.lua` and unfenced through the `SET NX PX` fast path, its renew, release
//!   (`release_one.lua` or the native commands), remaining and inspect; inspect of both
//!   sides; a lost key) on a real Redis and on `MemoryBackend` (TTLs long enough that nothing
//!   expires) give the same outcomes — so the plain lock never meets a WRONGTYPE on a
//!   read-held key, and readers never get in beside the writer;
//! - `holds_expire_by_the_server`: a crashed reader's hold expires with its TTL, and a writer
//!   that stopped trying stops blocking readers within one of its TTLs;
//! - `a_lapsed_reader_is_not_inspected`: the inspection leaves out a reader whose hold lapsed
//!   by the server's clock while its entry is still stored (as the specification does);
//! - `a_waiting_writer_is_preferred`: once a writer found readers, new readers are refused,
//!   current ones still renew, and the writer gets in when the last one leaves (whose release
//!   publishes the notice);
//! - the refusals: a key of another type, more than one key, malformed arguments;
//! - `a_batch_of_reader_renewals_is_one_call_and_judged_one_by_one`: readers' renewals as
//!   auto-renewal sends them (`renew_shared_many`): one script call, each reader answered as
//!   `renew_shared` answers it alone and as the specification does — a reader whose hold
//!   lapsed by the server's clock is "not held", never renewed.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::notify::WatchRole;
use lease_core::rwlock::SharedInfo;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseBackend, LeaseSpec, ReleaseOutcome,
    RenewOutcome, RenewRequest, Ttl,
};
use lease_redis::{RedisBackend, ReleaseNotices};
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(10);
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const OWNERS: [&str; 4] = ["a", "b", "c", "d"];
const KEY: &str = "{rw}";

/// The key fenced (readers, and the writer through the script).
fn fenced() -> Arc<LeaseSpec> {
    lock(&[KEY], Some("{rw}:fence"))
}

/// The same key as a plain unfenced lock (the writer's fast path).
fn plain() -> Arc<LeaseSpec> {
    lock(&[KEY], None)
}

fn acquire(spec: &Arc<LeaseSpec>, who: &str, ttl: Ttl) -> AcquireRequest {
    AcquireRequest::new(Arc::clone(spec), owner(who), ttl)
}

#[derive(Clone, Debug)]
enum Op {
    Read { owner: usize },
    Write { owner: usize, fast: bool },
    Renew { owner: usize, write: bool },
    Release { owner: usize, write: bool },
    Remaining { owner: usize, write: bool },
    Inspect,
    LoseKey,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..OWNERS.len()).prop_map(|owner| Op::Read { owner }),
        3 => (0..OWNERS.len(), any::<bool>()).prop_map(|(owner, fast)| Op::Write { owner, fast }),
        2 => (0..OWNERS.len(), any::<bool>()).prop_map(|(owner, write)| Op::Renew { owner, write }),
        3 => (0..OWNERS.len(), any::<bool>()).prop_map(|(owner, write)| Op::Release { owner, write }),
        1 => (0..OWNERS.len(), any::<bool>()).prop_map(|(owner, write)| Op::Remaining { owner, write }),
        1 => Just(Op::Inspect),
        1 => Just(Op::LoseKey),
    ]
}

fn kind(e: &BackendError) -> String {
    match e {
        BackendError::Refused(m) if m.contains("WRONGTYPE") => "wrongtype".into(),
        BackendError::Refused(_) => "refused".into(),
        BackendError::Invalid(_) => "invalid".into(),
        BackendError::Corrupt { key, .. } => format!("corrupt {key}"),
        other => format!("other {other}"),
    }
}

fn norm<T: std::fmt::Debug>(r: &Result<T, BackendError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {}", kind(e)),
    }
}

fn norm_acquire(r: &Result<AcquireOutcome, BackendError>) -> String {
    match r {
        Ok(AcquireOutcome::Acquired { token, .. }) => format!("acquired {token:?}"),
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

/// A shared inspection without the durations (the two clocks differ).
fn norm_shared(r: &Result<SharedInfo, BackendError>) -> String {
    match r {
        Ok(i) => format!(
            "ok writer={:?} readers={:?} waiting={} counter={:?} mark={:?}",
            i.writer.as_ref().map(|w| &w.owner),
            i.readers
                .iter()
                .map(|h| &h.owner)
                .collect::<std::collections::BTreeSet<_>>(),
            i.writer_waiting.is_some(),
            i.counter,
            i.mark
        ),
        Err(e) => format!("err {}", kind(e)),
    }
}

struct Case<'a> {
    redis: &'a RedisBackend<Conn>,
    raw: Conn,
    mem: MemoryBackend,
}

impl Case<'_> {
    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let long = ttl_ms(LONG);
        let spec = |write: bool| if write { plain() } else { fenced() };
        match *op {
            Op::Read { owner } => {
                let req = acquire(&fenced(), OWNERS[owner], long);
                let m = self.mem.acquire_shared_now(&req);
                let r = self.redis.acquire_shared(&req).await;
                prop_assert_eq!(norm_acquire(&r), norm_acquire(&m));
            }
            Op::Write { owner, fast } => {
                let req = acquire(&if fast { plain() } else { fenced() }, OWNERS[owner], long);
                let m = self.mem.acquire_now(&req);
                let r = self.redis.acquire(&req).await;
                prop_assert_eq!(norm_acquire(&r), norm_acquire(&m));
            }
            Op::Renew { owner, write } => {
                let req = renew(&spec(write), OWNERS[owner]);
                let (m, r) = if write {
                    (self.mem.renew_now(&req), self.redis.renew(&req).await)
                } else {
                    (
                        self.mem.renew_shared_now(&req),
                        self.redis.renew_shared(&req).await,
                    )
                };
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Release { owner, write } => {
                let req = release(&spec(write), OWNERS[owner], None);
                let (m, r) = if write {
                    (self.mem.release_now(&req), self.redis.release(&req).await)
                } else {
                    (
                        self.mem.release_shared_now(&req),
                        self.redis.release_shared(&req).await,
                    )
                };
                prop_assert_eq!(norm(&r), norm(&m));
            }
            Op::Remaining { owner, write } => {
                let o = common::owner(OWNERS[owner]);
                let s = spec(write);
                let (m, r) = if write {
                    (
                        self.mem.remaining(&s, &o).await,
                        self.redis.remaining(&s, &o).await,
                    )
                } else {
                    (
                        self.mem.shared_remaining(&s, &o).await,
                        self.redis.shared_remaining(&s, &o).await,
                    )
                };
                match (&r, &m) {
                    (Ok(Some(rd)), Ok(Some(md))) => prop_assert!(rd <= md, "{rd:?} > {md:?}"),
                    _ => prop_assert_eq!(norm(&r), norm(&m)),
                }
            }
            Op::Inspect => {
                let m = self.mem.inspect_shared_now(&fenced());
                let r = self.redis.inspect_shared(&fenced()).await;
                prop_assert_eq!(norm_shared(&r), norm_shared(&m));
                // The plain inspect names a holder whenever the key is held (by a reader when
                // read-held: the one whose hold expires first, which may differ by clock).
                let m = self.mem.inspect_now(&fenced());
                let r = self.redis.inspect(&fenced()).await;
                let held = |x: &Result<lease_core::LeaseInfo, BackendError>| match x {
                    Ok(i) => format!("ok {} {:?}", i.holder.is_some(), i.counter),
                    Err(e) => format!("err {}", kind(e)),
                };
                prop_assert_eq!(held(&r), held(&m));
            }
            Op::LoseKey => {
                self.mem.lose_key(KEY);
                del(&mut self.raw, KEY).await;
            }
        }
        Ok(())
    }
}

#[test]
fn rw_scripts_match_the_memory_backend() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
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

/// A crashed reader's hold expires by the server's clock; a writer that found readers and went
/// away stops blocking new readers within one of its TTLs; the key vanishes with its last
/// entry.
#[tokio::test]
async fn holds_expire_by_the_server() {
    let (_server, backend, mut raw) = setup().await;
    let spec = fenced();
    let got = backend
        .acquire_shared(&acquire(&spec, "r1", ttl_ms(300)))
        .await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "{got:?}"
    );
    // A writer tries once (its TTL 400 ms) and is gone.
    let w = backend.acquire(&acquire(&spec, "w", ttl_ms(400))).await;
    let Ok(AcquireOutcome::Held {
        holder: None,
        remaining: Some(r),
        ..
    }) = w
    else {
        panic!("expected held by readers, got {w:?}");
    };
    assert!(
        r <= Duration::from_millis(200),
        "at most half the writer's TTL: {r:?}"
    );
    let refused = backend
        .acquire_shared(&acquire(&spec, "r2", ttl_ms(300)))
        .await;
    assert!(
        matches!(refused, Ok(AcquireOutcome::Held { holder: None, .. })),
        "{refused:?}"
    );
    // r1 crashes: its hold expires; the writer's mark lapses 400 ms after it was set.
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        backend
            .renew_shared(&renew(&spec, "r1"))
            .await
            .expect("renew"),
        RenewOutcome::NotHeld
    );
    assert!(
        !exists(&mut raw, KEY).await,
        "the key expired with its last entry"
    );
    let got = backend
        .acquire_shared(&acquire(&spec, "r2", ttl_ms(300)))
        .await;
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired { .. })),
        "{got:?}"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(!exists(&mut raw, KEY).await);
}

/// A reader whose hold lapsed by the server's clock is not inspected, though its entry is
/// stored until the next script that writes; the specification agrees.
#[tokio::test]
async fn a_lapsed_reader_is_not_inspected() {
    let (_server, backend, mut raw) = setup().await;
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = fenced();
    for (who, ttl) in [("r1", ttl_ms(100)), ("r2", ttl_ms(LONG))] {
        let req = acquire(&spec, who, ttl);
        let r = backend.acquire_shared(&req).await;
        assert_eq!(
            norm_acquire(&r),
            norm_acquire(&mem.acquire_shared_now(&req))
        );
    }
    let info = backend.inspect_shared(&spec).await.expect("inspect");
    assert_eq!(info.readers.len(), 2, "{info:?}");
    tokio::time::sleep(Duration::from_millis(150)).await;
    mem.clock().advance(Duration::from_millis(150));
    let stored: u64 = redis::cmd("ZCARD")
        .arg(KEY)
        .query_async(&mut raw)
        .await
        .expect("zcard");
    assert_eq!(stored, 2, "r1's lapsed entry is still stored");
    let r = backend.inspect_shared(&spec).await;
    assert_eq!(norm_shared(&r), norm_shared(&mem.inspect_shared_now(&spec)));
    let info = r.expect("inspect");
    let readers: Vec<&str> = info.readers.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(readers, ["r2"], "r1 lapsed");
    assert_eq!(info.writer, None);
}

/// Writer preference on the server: after a writer found readers, a new reader is refused,
/// the current reader still renews, and the last reader's release publishes the notice on
/// which the writer then gets in. Tokens of readers and the writer come from one counter.
#[tokio::test]
async fn a_waiting_writer_is_preferred() {
    let (server, backend, mut raw) = setup().await;
    let spec = fenced();
    let long = ttl_ms(LONG);
    let t1 = backend.acquire_shared(&acquire(&spec, "r1", long)).await;
    let t2 = backend.acquire_shared(&acquire(&spec, "r2", long)).await;
    let (Some(t1), Some(t2)) = (
        t1.as_ref().ok().and_then(acquired_token),
        t2.as_ref().ok().and_then(acquired_token),
    ) else {
        panic!("two readers share: {t1:?} {t2:?}");
    };
    assert!(t1 < t2);
    let w = backend.acquire(&acquire(&spec, "w", long)).await;
    assert!(
        matches!(w, Ok(AcquireOutcome::Held { holder: None, .. })),
        "{w:?}"
    );
    let r3 = backend.acquire_shared(&acquire(&spec, "r3", long)).await;
    assert!(
        matches!(r3, Ok(AcquireOutcome::Held { holder: None, .. })),
        "{r3:?}"
    );
    assert_eq!(
        backend
            .renew_shared(&renew(&spec, "r1"))
            .await
            .expect("renew"),
        RenewOutcome::Renewed
    );
    let info = backend.inspect_shared(&spec).await.expect("inspect");
    assert_eq!(info.readers.len(), 2);
    assert!(info.writer_waiting.is_some());
    // The plain lock's other operations see "not held", never a type error.
    assert_eq!(
        backend.renew(&renew(&spec, "w")).await.expect("renew"),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        backend
            .release(&release(&plain(), "r1", None))
            .await
            .expect("release"),
        ReleaseOutcome::NotHeld
    );
    // Only the last reader's release publishes the notice, and a waiter's watch wakes on it.
    let notices = ReleaseNotices::new(server.client().expect("client"));
    let backend = backend.with_release_notices(notices);
    let mut watch = backend
        .release_watch(&spec, WatchRole::Contender)
        .expect("a watch");
    watch.set_contending(true);
    watch.activate();
    timeout(BOUND, watch.notified())
        .await
        .expect("the subscription goes live within the bound");
    assert!(!watch.take_wake());
    let publishes = |raw: Conn| async move {
        let mut raw = raw;
        let info: String = timeout(
            BOUND,
            redis::cmd("INFO").arg("commandstats").query_async(&mut raw),
        )
        .await
        .expect("bounded")
        .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
            .and_then(|c| c.split(',').next())
            .map_or(0, |c| c.parse::<u64>().expect("calls"))
    };
    let before = publishes(raw.clone()).await;
    for (who, published) in [("r1", 0), ("r2", 1)] {
        assert_eq!(
            timeout(BOUND, backend.release_shared(&release(&spec, who, None)))
                .await
                .expect("bounded")
                .expect("release"),
            ReleaseOutcome::Released
        );
        assert_eq!(
            publishes(raw.clone()).await - before,
            published,
            "after {who}"
        );
    }
    timeout(BOUND, watch.notified())
        .await
        .expect("the waiting writer is woken within the bound");
    let w = backend.acquire(&acquire(&spec, "w", long)).await;
    let tw = w.as_ref().ok().and_then(acquired_token);
    assert!(
        tw.is_some_and(|t| t > t2),
        "the writer gets in, its token above: {w:?}"
    );
    assert_eq!(get(&mut raw, KEY).await.as_deref(), Some("w"));
    let r = backend.acquire_shared(&acquire(&spec, "r3", long)).await;
    assert!(
        matches!(r, Ok(AcquireOutcome::Held { holder: Some(ref h), .. }) if h == "w"),
        "{r:?}"
    );
}

#[tokio::test]
async fn bad_keys_specs_and_arguments_are_refused() {
    let (_server, backend, mut raw) = setup().await;
    let long = ttl_ms(LONG);
    // A key of another type: the server's WRONGTYPE, for readers and the writer alike.
    let () = redis::cmd("HSET")
        .arg(KEY)
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .expect("HSET");
    for r in [
        backend.acquire_shared(&acquire(&fenced(), "a", long)).await,
        backend.acquire(&acquire(&plain(), "a", long)).await,
    ] {
        assert!(
            matches!(r, Err(BackendError::Refused(ref m)) if m.contains("WRONGTYPE")),
            "{r:?}"
        );
    }
    assert!(matches!(
        backend.renew(&renew(&plain(), "a")).await,
        Err(BackendError::Refused(ref m)) if m.contains("WRONGTYPE")
    ));
    del(&mut raw, KEY).await;
    // More than one key: refused before any round trip.
    let two = lock(&["{rw}:a", "{rw}:b"], None);
    assert!(matches!(
        backend.check_shared(&two),
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        backend.acquire_shared(&acquire(&two, "a", long)).await,
        Err(BackendError::Invalid(_))
    ));
    // Malformed arguments sent raw: refused before anything is written.
    let script = format!(
        "{}{}{}",
        include_str!("../scripts/prelude.lua"),
        include_str!("../scripts/semaphore.lua"),
        include_str!("../scripts/rw_acquire.lua")
    );
    let keys = [KEY, "{rw}:fence", "{rw}:fence:applied", "{rw}:fence:epoch"];
    for (ttl, floor) in [
        ("0", "counter:0"),
        ("x", "counter:0"),
        ("10", ""),
        ("10", "counter:x"),
    ] {
        let r: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(&script)
            .arg(keys.len())
            .arg(&keys)
            .arg("owner")
            .arg(ttl)
            .arg(floor)
            .query_async(&mut raw)
            .await;
        assert!(r.is_err(), "{ttl:?} {floor:?}: {r:?}");
    }
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert!(left.is_empty(), "nothing written: {left:?}");
}

/// A batch of reader renewals (`renew_shared_many`, what auto-renewed readers are sent as):
/// one script call for readers of several keys, each answered as `renew_shared` answers it
/// alone (renewed; not held: no such reader, a writer's key, a hold lapsed by the server's
/// clock; a key of another type refused), a request refused before any round trip answered
/// alone, and the same answers as the specification.
#[tokio::test]
async fn a_batch_of_reader_renewals_is_one_call_and_judged_one_by_one() {
    let (_server, _backend, mut raw) = setup().await;
    let counting = Counting::new(raw.clone());
    let backend = RedisBackend::new(counting.clone());
    let mem = MemoryBackend::new(ManualClock::new());
    let (a, b, w) = (fenced(), lock(&["{rb}"], None), lock(&["{rw}:w"], None));
    let long = ttl_ms(LONG);
    let (medium, short) = (ttl_ms(10_000), ttl_ms(40));
    for (spec, who, ttl) in [
        (&a, "r1", long),
        (&a, "r2", long),
        (&b, "r1", medium),
        (&a, "old", short),
    ] {
        let req = acquire(spec, who, ttl);
        let (r, m) = (
            backend.acquire_shared(&req).await,
            mem.acquire_shared_now(&req),
        );
        assert!(matches!(r, Ok(AcquireOutcome::Acquired { .. })), "{r:?}");
        assert!(matches!(m, Ok(AcquireOutcome::Acquired { .. })), "{m:?}");
    }
    let writer = acquire(&w, "w", long);
    assert!(matches!(
        backend.acquire(&writer).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));
    assert!(matches!(
        mem.acquire_now(&writer),
        Ok(AcquireOutcome::Acquired { .. })
    ));
    // "old"'s hold lapses by the server's clock: a real wait, as long as its TTL and more.
    tokio::time::sleep(Duration::from_millis(80)).await;
    mem.clock().advance(Duration::from_millis(80));
    let hash = lock(&["{rw}:h"], None);
    let () = redis::cmd("HSET")
        .arg("{rw}:h")
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .expect("HSET");
    let two = lock(&["{rw}:x", "{rw}:y"], None);
    let renewal =
        |spec: &Arc<LeaseSpec>, who: &str| RenewRequest::new(Arc::clone(spec), owner(who), long);
    let reqs = [
        renewal(&a, "r1"),
        renewal(&b, "r1"),
        renewal(&a, "nobody"),
        renewal(&w, "w"),
        renewal(&a, "old"),
        renewal(&hash, "r1"),
        renewal(&two, "r1"),
        renewal(&a, "r2"),
    ];
    let refs: Vec<&RenewRequest> = reqs.iter().collect();
    // The first batch also loads the script (NOSCRIPT, then EVAL); the second is one call.
    let batch = || timeout(BOUND, backend.renew_shared_many(&refs));
    let first = batch().await.expect("bounded");
    let before = counting.calls();
    let got = batch().await.expect("bounded");
    assert_eq!(counting.calls() - before, 1, "one pipelined script call");
    let kinds: Vec<String> = got.iter().map(norm).collect();
    assert_eq!(first.iter().map(norm).collect::<Vec<_>>(), kinds);
    assert_eq!(
        kinds,
        [
            "ok Renewed",
            "ok Renewed",
            "ok NotHeld",
            "ok NotHeld",
            "ok NotHeld",
            "err wrongtype",
            "err invalid",
            "ok Renewed"
        ]
    );
    for (req, r) in reqs.iter().zip(&got) {
        let alone = timeout(BOUND, backend.renew_shared(req))
            .await
            .expect("bounded");
        assert_eq!(norm(r), norm(&alone), "{req:?}: answered as alone");
        if !Arc::ptr_eq(&req.spec, &hash) {
            let spec = mem.renew_shared_now(req);
            assert_eq!(norm(r), norm(&spec), "{req:?}: the spec answers alike");
        }
    }
    // The lapsed hold was not renewed (nor written back); the renewed ones got the batch's TTL
    // (well past the obtain's).
    let info = backend.inspect_shared(&a).await.expect("inspect");
    let readers: Vec<&str> = info.readers.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(readers.len(), 2, "{readers:?}");
    assert!(!readers.contains(&"old"), "{readers:?}");
    let left = backend
        .shared_remaining(&b, &owner("r1"))
        .await
        .expect("remaining")
        .expect("held");
    assert!(left > Duration::from_secs(30), "{left:?}");
    assert_eq!(
        get(&mut raw, "{rw}:w").await.as_deref(),
        Some("w"),
        "the writer untouched"
    );
    // Malformed batches sent raw: refused before anything is written.
    let script = format!(
        "{}{}{}",
        include_str!("../scripts/prelude.lua"),
        include_str!("../scripts/semaphore.lua"),
        include_str!("../scripts/rw_renew_many.lua")
    );
    let zrange = |raw: Conn| async move {
        let mut raw = raw;
        let cmd = redis::cmd("ZRANGE")
            .arg("{rb}")
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .clone();
        timeout(BOUND, cmd.query_async::<Vec<String>>(&mut raw))
            .await
            .expect("bounded")
            .expect("ZRANGE")
    };
    let before = zrange(raw.clone()).await;
    for args in [&["r1"][..], &["r1", "0"], &["r1", "x"], &["r1", "10", "r2"]] {
        let r: redis::RedisResult<redis::Value> = timeout(
            BOUND,
            redis::cmd("EVAL")
                .arg(&script)
                .arg(1)
                .arg("{rb}")
                .arg(args)
                .query_async(&mut raw),
        )
        .await
        .expect("bounded");
        assert!(r.is_err(), "{args:?}: {r:?}");
    }
    assert_eq!(before, zrange(raw.clone()).await, "nothing written");
}
