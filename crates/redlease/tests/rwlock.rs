//! Read-write locks through the facade, against a real Redis: readers through
//! `Locker::shared`, the writer the plain lock of the same key.
//!
//! - readers share; the plain lock (the writer) is excluded by readers and excludes them; one
//!   fence counter orders readers and writers;
//! - writer preference: with a stream of overlapping readers (each process its own locker), a
//!   waiting writer gets in within a bound, and no reader holds while it does (as the
//!   holders themselves see it);
//! - release notices: the last reader's release wakes a waiting writer at once, and a
//!   writer's release wakes every waiting reader at once (far before their retry delays);
//! - a crashed reader's hold (never released, never renewed) expires with its TTL;
//! - truthful outcomes: a reader's obtain whose reply is lost is "unknown", was applied, and
//!   its cleanup ends the hold;
//! - auto-renewed readers leave in the renewal task's batches: 130 readers renewed once per
//!   interval each in `ceil(130 / 128) = 2` script calls per interval, not one per reader;
//!   a reader whose hold lapsed at the store is reported lost by its batch, not renewed.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::locks::{linear, ms, proxied};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::{LockError, LockOptions, Locker};

/// Every await of these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {BOUND:?}"))
}

type Backend = redlease::redis::RedisBackend<redlease::redis::HealingConnection>;

/// A locker of its own (a separate "process"), with release notices.
async fn locker(server: &lease_testkit::redis::RedisServer) -> Locker<Backend> {
    Locker::new(
        redlease::redis::connect(&server.url())
            .await
            .expect("connect"),
    )
}

fn fenced(key: &str) -> LockOptions {
    LockOptions::new().fence_key(format!("{key}:fence"))
}

#[tokio::test]
async fn readers_share_and_the_plain_lock_is_the_writer() {
    let server = common::redis().await;
    let (a, b) = (locker(&server).await, locker(&server).await);
    let ttl = ms(10_000);
    let r1 = bounded(
        "r1",
        a.shared("doc")
            .expect("readers")
            .acquire(ttl, fenced("doc")),
    )
    .await
    .expect("r1");
    let r2 = bounded(
        "r2",
        b.shared("doc")
            .expect("readers")
            .acquire(ttl, fenced("doc")),
    )
    .await
    .expect("readers share");
    let once = || fenced("doc").wait(Duration::ZERO);
    let err = bounded("writer", a.obtain("doc", ttl, once()))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "readers exclude the writer: {err:?}");
    let (t1, t2) = (r1.fence_token(), r2.fence_token());
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = bounded("writer", b.obtain("doc", ttl, once()))
        .await
        .expect("the writer once the readers left");
    assert!(
        t1.is_some() && t2 > t1 && w.fence_token() > t2,
        "one counter"
    );
    let err = bounded(
        "reader",
        a.shared("doc").expect("readers").acquire(ttl, once()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, LockError::NotObtained { ref holder } if holder.is_some()),
        "the writer excludes readers, and is named: {err:?}"
    );
    w.release().await.expect("release");
}

/// Four readers keep the key read-held at every instant (each holds 40 ms and comes back at
/// once); a writer that starts among them gets in within a bound, and while it holds no
/// reader holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_readers_cannot_starve_a_waiting_writer() {
    let server = common::redis().await;
    let readers_in = Arc::new(AtomicUsize::new(0));
    let holds = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let readers = locker(&server).await.shared("{stream}").expect("readers");
        let (readers_in, holds, stop) = (
            Arc::clone(&readers_in),
            Arc::clone(&holds),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            // Staggered, so the holds overlap.
            tokio::time::sleep(ms(10 * i)).await;
            while !stop.load(Ordering::SeqCst) {
                let opts = LockOptions::new().retry(linear(10)).wait(ms(20_000));
                let hold = match readers.acquire(ms(5_000), opts).await {
                    Ok(h) => h,
                    Err(e) => panic!("reader {i}: {e}"),
                };
                readers_in.fetch_add(1, Ordering::SeqCst);
                holds.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(ms(40)).await;
                readers_in.fetch_sub(1, Ordering::SeqCst);
                hold.release().await.expect("release");
            }
        }));
    }
    // Let the stream run: twenty holds, and readers are in.
    bounded("readers in", async {
        while holds.load(Ordering::SeqCst) < 20 || readers_in.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let writer = locker(&server).await;
    let asked = Instant::now();
    let w = bounded(
        "writer",
        writer.obtain(
            "{stream}",
            ms(2_000),
            LockOptions::new().retry(linear(20)).wait(ms(10_000)),
        ),
    )
    .await
    .expect("the writer gets in among the readers");
    let waited = asked.elapsed();
    // Each reader's hold is 40 ms: once the mark stands, the readers in leave within that.
    assert!(waited < ms(2_000), "the writer waited {waited:?}");
    for _ in 0..10 {
        assert_eq!(
            readers_in.load(Ordering::SeqCst),
            0,
            "a reader beside the writer"
        );
        tokio::time::sleep(ms(10)).await;
    }
    w.release().await.expect("release");
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        bounded("a reader", t).await.expect("reader task");
    }
}

#[tokio::test]
async fn the_last_readers_release_wakes_a_waiting_writer_at_once() {
    let server = common::redis().await;
    let ttl = ms(10_000);
    let hold = bounded(
        "reader",
        locker(&server)
            .await
            .shared("{wake}")
            .expect("readers")
            .acquire(ttl, LockOptions::new()),
    )
    .await
    .expect("reader");
    let writer = locker(&server).await;
    // Its retries are 5 s apart: only a notice brings it in sooner.
    let waiting = tokio::spawn(async move {
        let w = writer
            .obtain(
                "{wake}",
                ttl,
                LockOptions::new().retry(linear(5_000)).wait(ms(20_000)),
            )
            .await;
        (w, Instant::now())
    });
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    hold.release().await.expect("release");
    let (w, got) = bounded("writer", waiting).await.expect("task");
    let w = w.expect("the writer");
    let after = got.duration_since(released);
    assert!(after < ms(1_000), "woken {after:?} after the release");
    w.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writers_release_wakes_every_waiting_reader_at_once() {
    let server = common::redis().await;
    let ttl = ms(10_000);
    let w = bounded(
        "writer",
        locker(&server)
            .await
            .obtain("{all}", ttl, LockOptions::new()),
    )
    .await
    .expect("writer");
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let readers = locker(&server).await.shared("{all}").expect("readers");
        waiting.push(tokio::spawn(async move {
            let opts = LockOptions::new().retry(linear(5_000)).wait(ms(20_000));
            let hold = readers.acquire(ttl, opts).await;
            (hold, Instant::now())
        }));
    }
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    w.release().await.expect("release");
    let mut holds = Vec::new();
    for t in waiting {
        let (hold, got) = bounded("reader", t).await.expect("task");
        let after = got.duration_since(released);
        assert!(
            after < ms(1_000),
            "a reader woken {after:?} after the release"
        );
        holds.push(hold.expect("reader"));
    }
    for h in holds {
        h.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_crashed_readers_hold_expires() {
    let server = common::redis().await;
    let readers = locker(&server).await.shared("{crash}").expect("readers");
    let crashed = bounded("reader", readers.acquire(ms(1_000), LockOptions::new()))
        .await
        .expect("reader");
    let obtained_at = Instant::now();
    // The reader dies: no release, no renewal (its handle never runs its drop).
    std::mem::forget(crashed);
    let w = bounded(
        "writer",
        locker(&server).await.obtain(
            "{crash}",
            ms(5_000),
            LockOptions::new().retry(linear(50)).wait(ms(5_000)),
        ),
    )
    .await
    .expect("the crashed hold expires");
    let waited = obtained_at.elapsed();
    assert!(
        waited >= ms(900),
        "the writer got in after {waited:?}, before the reader's TTL"
    );
    assert!(
        waited < ms(3_000),
        "the writer got in only after {waited:?}"
    );
    w.release().await.expect("release");
}

#[tokio::test]
async fn a_readers_obtain_whose_reply_is_lost_is_unknown_applied_and_cleaned_up() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let locker_ = Locker::new(proxied(&server, &proxy).await);
    let readers = locker_.shared("{lost}").expect("readers");
    // Load the scripts while the path is healthy.
    let warm = bounded("warm", readers.acquire(ms(10_000), fenced("{lost}")))
        .await
        .expect("warm");
    warm.release().await.expect("release");

    proxy.set_mode(Mode::DropReplies);
    let err = bounded(
        "obtain",
        readers.acquire(
            ms(10_000),
            fenced("{lost}")
                .operation_timeout(ms(300))
                .wait(Duration::ZERO),
        ),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown(_)), "{err:?}");
    proxy.set_mode(Mode::Pass);
    let other = locker(&server).await.shared("{lost}").expect("readers");
    let info = bounded("inspect", other.inspect(Some("{lost}:fence"), ms(2_000)))
        .await
        .expect("inspect");
    assert_eq!(
        info.counter.map(|t| t.get()),
        Some(2),
        "the lost obtain minted a token"
    );
    bounded("cleanup", async {
        loop {
            let info = other.inspect(None, ms(2_000)).await.expect("inspect");
            if info.readers.is_empty() {
                break;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
}

/// `INFO commandstats` `calls=` of `name`.
async fn calls(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> u64 {
    let info: String = bounded(
        "INFO",
        redis::cmd("INFO").arg("commandstats").query_async(conn),
    )
    .await
    .expect("INFO");
    info.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(&format!("cmdstat_{name}:"))?;
            rest.split("calls=").nth(1)?.split(',').next()?.parse().ok()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewed_readers_are_renewed_in_batches() {
    /// Two script calls per batch: 128 readers, then 2.
    const READERS: usize = 130;
    let server = common::redis().await;
    let doc = locker(&server).await.shared("{batched}").expect("readers");
    let (ttl, interval) = (ms(900), ms(300));
    // Obtained together, so that their renewals fall due together.
    let mut obtains = tokio::task::JoinSet::new();
    for _ in 0..READERS {
        let doc = doc.clone();
        obtains.spawn(async move {
            doc.acquire(ttl, LockOptions::new().auto_renew(interval))
                .await
        });
    }
    let readers: Vec<_> = bounded("the obtains", obtains.join_all())
        .await
        .into_iter()
        .map(|r| r.expect("a reader"))
        .collect();
    let mut raw = common::raw(&server).await;
    let scripts = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move { calls(&mut raw, "evalsha").await + calls(&mut raw, "eval").await }
    };
    let (zadd0, scripts0) = (calls(&mut raw, "zadd").await, scripts(&mut raw).await);
    let start = Instant::now();
    // A real wait: the point is to be held across several TTLs.
    tokio::time::sleep(ttl * 3).await;
    let (zadd1, scripts1) = (calls(&mut raw, "zadd").await, scripts(&mut raw).await);
    let intervals = start.elapsed().as_secs_f64() / interval.as_secs_f64();
    for (i, r) in readers.iter().enumerate() {
        assert!(r.held(), "reader {i} held");
    }
    // One ZADD per reader renewed.
    let renewed = zadd1 - zadd0;
    let per_reader = renewed as f64 / READERS as f64;
    let script_calls = scripts1 - scripts0;
    let per_interval = script_calls as f64 / intervals;
    println!(
        "{per_reader:.1} renewals per reader and {script_calls} script calls in {intervals:.1} \
         intervals ({per_interval:.1} per interval)"
    );
    assert!(
        per_reader >= intervals - 2.0 && per_reader <= intervals * 1.15 + 1.0,
        "{per_reader:.1} renewals per reader in {intervals:.1} intervals"
    );
    // At most 128 readers per call; and about ceil(130 / 128) = 2 calls per interval (one
    // call per reader would be about 130).
    assert!(
        script_calls * 128 >= renewed,
        "{script_calls} script calls for {renewed} renewals"
    );
    assert!(
        per_interval <= 4.0,
        "{script_calls} script calls for {READERS} readers over {intervals:.1} intervals"
    );
    // A reader whose hold lapsed at the store (its entry gone) is lost at its next renewal,
    // and its batch does not write it back; the others stay held.
    let gone = &readers[7];
    let () = bounded(
        "ZREM",
        redis::cmd("ZREM")
            .arg("{batched}")
            .arg(gone.owner())
            .query_async(&mut raw),
    )
    .await
    .expect("ZREM");
    bounded("the lapsed reader's loss", gone.lost().cancelled()).await;
    assert!(!gone.held());
    let score: Option<String> = bounded(
        "ZSCORE",
        redis::cmd("ZSCORE")
            .arg("{batched}")
            .arg(gone.owner())
            .query_async(&mut raw),
    )
    .await
    .expect("ZSCORE");
    assert_eq!(score, None, "a lapsed hold is not renewed");
    for (i, r) in readers.iter().enumerate() {
        assert!(i == 7 || r.held(), "reader {i} held");
    }
    for r in readers {
        let _ = bounded("release", r.release()).await;
    }
}

/// Issue 54: a writer that will not try again sets no waiting mark. With readers holding the
/// key, one obtain without retries (`NotObtained` at once), and one with retries but a zero
/// wait, leave the key as they found it: a new reader gets in on its first attempt. Before,
/// the mark stood for the writer's whole TTL (60 s here).
#[tokio::test]
async fn a_writer_that_will_not_retry_leaves_no_mark() {
    let server = common::redis().await;
    let (a, b) = (locker(&server).await, locker(&server).await);
    let mut raw = server.connection().await.expect("raw");
    let r1 = bounded(
        "r1",
        a.shared("gave-up")
            .expect("readers")
            .acquire(ms(10_000), LockOptions::new()),
    )
    .await
    .expect("r1");
    for (case, options) in [
        ("no retries", LockOptions::new()),
        (
            "a zero wait",
            LockOptions::new().retry(linear(50)).wait(Duration::ZERO),
        ),
    ] {
        let err = bounded("writer", b.obtain("gave-up", ms(60_000), options))
            .await
            .unwrap_err();
        assert!(err.is_not_obtained(), "{case}: {err:?}");
        let mark: Option<f64> = redis::cmd("ZSCORE")
            .arg("gave-up")
            .arg(redlease::core::WRITER_WAITING)
            .query_async(&mut raw)
            .await
            .expect("ZSCORE");
        assert_eq!(mark, None, "{case}: no waiting-writer mark");
        // A reader that tries once gets in.
        let r = bounded(
            "a new reader",
            a.shared("gave-up")
                .expect("readers")
                .acquire(ms(10_000), LockOptions::new()),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: a new reader is admitted at once: {e}"));
        r.release().await.expect("release");
    }
    r1.release().await.expect("release");
}

/// Issue 54: a writer that retries marks for three of its longest retry delays, not its TTL.
/// Once it gives up (two retries 100 ms apart, against readers it cannot outwait), a reader
/// that waited behind its mark gets in within that bound of the writer's last attempt; while
/// the writer still tries, readers stay out (the control: writer preference holds).
#[tokio::test]
async fn a_writer_that_gave_up_stops_blocking_readers_within_three_retry_delays() {
    let server = common::redis().await;
    let (a, b, c) = (
        locker(&server).await,
        locker(&server).await,
        locker(&server).await,
    );
    let r1 = bounded(
        "r1",
        a.shared("gave-up")
            .expect("readers")
            .acquire(ms(30_000), LockOptions::new()),
    )
    .await
    .expect("r1");
    let writer = LockOptions::new().retry(redlease::RetryStrategy::limit(2, linear(100)));
    let err = bounded("writer", b.obtain("gave-up", ms(60_000), writer))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    let gave_up = Instant::now();
    // The control: right after its last attempt the mark still stands (a reader that tries
    // once is refused); a reader that waits gets in once the mark lapses (at most 3 × 125 ms
    // after the writer's last attempt, jitter included), not after the writer's 60 s TTL.
    let refused = bounded(
        "a reader that tries once",
        c.shared("gave-up")
            .expect("readers")
            .acquire(ms(10_000), LockOptions::new()),
    )
    .await
    .unwrap_err();
    assert!(refused.is_not_obtained(), "the mark stands: {refused:?}");
    let r2 = bounded(
        "a reader that waits",
        c.shared("gave-up").expect("readers").acquire(
            ms(10_000),
            LockOptions::new().retry(linear(20)).wait(ms(5_000)),
        ),
    )
    .await
    .expect("a reader gets in once the writer's mark lapsed");
    let waited = gave_up.elapsed();
    assert!(
        waited < ms(1_500),
        "the mark lapsed {waited:?} after the writer gave up"
    );
    r2.release().await.expect("release");
    r1.release().await.expect("release");
}
