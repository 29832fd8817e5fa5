//! Hand-off within a process, on a real server: obtains of one locker that wait behind a lock
//! of the same locker are handed the key by its release, in one step at the store, first come
//! first served; a waiter elsewhere breaks the chain and is woken; a waiter or a release
//! dropped at any point leaves nobody stranded and no key behind.
//!
//! Waiters poll every 20 s here, far beyond every assertion bound: only a hand-off (or a
//! release notice, or the wake a holder owes its waiters) can make these tests pass.

mod common;

use std::time::{Duration, Instant};

use common::locks::{SLACK, counted_locker, ms, wait_gone};
use common::{EVENTUALLY, get, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use redlease::redis::HealingConnection;
use redlease::redis::RedisBackend;
use redlease::{Lock, LockError, LockOptions, Locker, RetryStrategy};
use tokio::sync::mpsc;

type Managed = RedisBackend<HealingConnection>;

/// A backend as `redlease::redis::connect` builds it (release notices included): one per
/// "process".
async fn connect(url: &str) -> Managed {
    redlease::redis::connect(url).await.expect("connect")
}

/// A waiter's bound after a release: far below the 20 s polls.
const PROMPT: Duration = Duration::from_millis(1500);

const TTL: Duration = Duration::from_secs(30);

fn slow_retry() -> LockOptions {
    LockOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(20)).unwrap())
        .wait(Duration::from_secs(60))
}

/// Waits (bounded) until `n` obtains of `locker` wait behind its lock on `key`.
async fn wait_queued<B: redlease::core::LeaseBackend>(locker: &Locker<B>, key: &str, n: usize) {
    let deadline = Instant::now() + EVENTUALLY;
    // The lines have no signal of their own for a test; a bounded check every few
    // milliseconds does not race (the count only says the obtain got there).
    while locker.waiting_behind(key) != n {
        assert!(
            Instant::now() < deadline,
            "{n} waiters never queued on {key} (now {})",
            locker.waiting_behind(key)
        );
        tokio::time::sleep(ms(2)).await;
    }
}

/// `INFO commandstats` calls of `command` so far.
async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("info");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Deletes so far: `DEL` (inside the release script) or the native compare-and-delete.
async fn deletes(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    calls(conn, "del").await + calls(conn, "delifeq").await + calls(conn, "delex").await
}

/// Spawns an obtain of `key` on `locker` that reports its lock on `tx` as `(id, lock)`.
fn spawn_waiter(
    locker: &Locker<Managed>,
    key: &'static str,
    id: usize,
    tx: mpsc::UnboundedSender<(usize, Lock<Managed>)>,
) -> tokio::task::JoinHandle<()> {
    let locker = locker.clone();
    tokio::spawn(async move {
        let lock = locker
            .obtain(key, TTL, slow_retry())
            .await
            .expect("a waiter obtains");
        let _ = tx.send((id, lock));
    })
}

/// A lock of `key` held by `locker`, and one obtain of the same locker queued behind it
/// (polling every 20 s: only a hand-off or a wake gets it the key in time).
async fn held_with_one_waiter<B: redlease::core::LeaseBackend>(
    locker: &Locker<B>,
    key: &'static str,
) -> (Lock<B>, tokio::task::JoinHandle<Result<Lock<B>, LockError>>) {
    let holder = locker.obtain(key, TTL, LockOptions::new()).await.unwrap();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.obtain(key, TTL, slow_retry()).await })
    };
    wait_queued(locker, key, 1).await;
    (holder, waiter)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<(usize, Lock<Managed>)>) -> (usize, Lock<Managed>) {
    tokio::time::timeout(PROMPT + SLACK, rx.recv())
        .await
        .expect("the next waiter is handed the lock in time")
        .expect("a waiter reports")
}

#[tokio::test]
async fn waiters_are_handed_the_lock_first_come_first_served_in_one_step() {
    let server = RedisServer::start().await.expect("redis");
    let locker = Locker::new(connect(&server.url()).await);
    let mut conn = raw(&server).await;
    let holder = locker
        .obtain("job", TTL, LockOptions::new())
        .await
        .expect("obtain");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for id in 1..=3 {
        tasks.push(spawn_waiter(&locker, "job", id, tx.clone()));
        wait_queued(&locker, "job", id).await;
    }
    // Queued waiters never marked the holder's value: nobody elsewhere waits.
    assert_eq!(get(&mut conn, "job").await.as_deref(), Some(holder.owner()));
    let (dels, publishes) = (deletes(&mut conn).await, calls(&mut conn, "publish").await);

    let released = Instant::now();
    holder.release().await.expect("released by hand-off");
    let mut order = Vec::new();
    for _ in 1..=3 {
        let (id, lock) = next(&mut rx).await;
        order.push(id);
        // The key holds the new holder's owner, unmarked, with the new holder's TTL.
        assert_eq!(get(&mut conn, "job").await.as_deref(), Some(lock.owner()));
        assert!(lock.held());
        assert!(lock.ttl().await.expect("ttl") > TTL - Duration::from_secs(5));
        lock.release().await.expect("released");
    }
    assert!(released.elapsed() < 3 * PROMPT, "{:?}", released.elapsed());
    assert_eq!(order, [1, 2, 3], "first come, first served");
    // Three hand-offs and a last release: one DEL (the last), no notice published.
    assert_eq!(deletes(&mut conn).await - dels, 1);
    assert_eq!(calls(&mut conn, "publish").await - publishes, 0);
    wait_gone(&mut conn, "job").await;
    assert_eq!(locker.waiting_behind("job"), 0);
    for t in tasks {
        tokio::time::timeout(EVENTUALLY, t).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_waiter_elsewhere_breaks_the_chain_and_nobody_is_stranded() {
    let server = RedisServer::start().await.expect("redis");
    let here = Locker::new(connect(&server.url()).await);
    let elsewhere = Locker::new(connect(&server.url()).await);
    let mut conn = raw(&server).await;
    let holder = here.obtain("job", TTL, LockOptions::new()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let local = spawn_waiter(&here, "job", 1, tx.clone());
    wait_queued(&here, "job", 1).await;
    let remote = spawn_waiter(&elsewhere, "job", 2, tx.clone());
    // The remote waiter's attempt marks the holder's value.
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let v: Option<String> = redis::cmd("GET")
            .arg("job")
            .query_async(&mut conn)
            .await
            .unwrap();
        if v.as_deref() != Some(holder.owner()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the remote waiter never marked the value"
        );
        tokio::time::sleep(ms(2)).await;
    }
    // The release cannot hand off (someone elsewhere waits): it releases and publishes, the
    // local waiter goes to the store, the remote one is woken; both obtain in turn.
    holder.release().await.expect("released");
    let (first, lock) = next(&mut rx).await;
    lock.release().await.expect("released");
    let (second, lock) = next(&mut rx).await;
    assert_ne!(first, second);
    lock.release().await.expect("released");
    wait_gone(&mut conn, "job").await;
    for t in [local, remote] {
        tokio::time::timeout(EVENTUALLY, t).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let server = RedisServer::start().await.expect("redis");
    let locker = Locker::new(connect(&server.url()).await);
    let mut conn = raw(&server).await;
    let holder = locker.obtain("job", TTL, LockOptions::new()).await.unwrap();
    // One waiter with a short wait: it gives up behind the holder, without a round trip.
    let short = LockOptions::new()
        .retry(RetryStrategy::linear(ms(50)).unwrap())
        .wait(ms(300));
    let gave_up = locker.obtain("job", TTL, short).await.unwrap_err();
    assert!(
        matches!(&gave_up, LockError::DeadlineExceeded { last } if matches!(**last, LockError::NotObtained { holder: Some(ref h) } if h == holder.owner())),
        "{gave_up:?}"
    );
    // One dropped while queued.
    let dropped = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.obtain("job", TTL, slow_retry()).await })
    };
    wait_queued(&locker, "job", 1).await;
    dropped.abort();
    let _ = dropped.await;
    assert_eq!(locker.waiting_behind("job"), 0);
    // The next waiter is the one handed the lock.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = spawn_waiter(&locker, "job", 3, tx);
    wait_queued(&locker, "job", 1).await;
    holder.release().await.expect("released");
    let (id, lock) = next(&mut rx).await;
    assert_eq!(id, 3);
    assert_eq!(get(&mut conn, "job").await.as_deref(), Some(lock.owner()));
    lock.release().await.unwrap();
    wait_gone(&mut conn, "job").await;
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_dropped_holder_and_a_lost_holder_let_their_waiters_go_to_the_store() {
    let server = RedisServer::start().await.expect("redis");
    let locker = Locker::new(connect(&server.url()).await);
    let (tx, mut rx) = mpsc::unbounded_channel();

    // Dropped without release: its background release, and the first waiter goes to the
    // store at once (the release notice covers the race between the two).
    let holder = locker.obtain("a", TTL, LockOptions::new()).await.unwrap();
    let task = spawn_waiter(&locker, "a", 1, tx.clone());
    wait_queued(&locker, "a", 1).await;
    drop(holder);
    let (_, lock) = next(&mut rx).await;
    lock.release().await.unwrap();
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap()
        .unwrap();

    // Lost (its TTL ran out, the handle kept): the waiter looks again at the holder's local
    // deadline and goes to the store, within the TTL, not at its 20 s poll.
    let ttl = Duration::from_millis(800);
    let holder = locker.obtain("b", ttl, LockOptions::new()).await.unwrap();
    let obtained = Instant::now();
    let task = spawn_waiter(&locker, "b", 2, tx.clone());
    wait_queued(&locker, "b", 1).await;
    let (_, lock) = next(&mut rx).await;
    assert!(
        obtained.elapsed() >= ttl - ms(100),
        "{:?}",
        obtained.elapsed()
    );
    assert!(!holder.held());
    lock.release().await.unwrap();
    drop(holder);
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn behind_the_test_wrapper_a_hand_off_is_the_holders_release() {
    // The kit's `Wrapped` forwards hand-offs (its hooks see the releaser's release), so the
    // fault tests that wrap a backend exercise them too.
    let server = RedisServer::start().await.expect("redis");
    let (locker, counted) = counted_locker(&server).await;
    let mut conn = raw(&server).await;
    let (holder, waiter) = held_with_one_waiter(&locker, "job").await;
    holder.release().await.expect("released by hand-off");
    let lock = tokio::time::timeout(PROMPT, waiter)
        .await
        .expect("handed the key at once")
        .unwrap()
        .expect("the waiter obtains");
    assert_eq!(get(&mut conn, "job").await.as_deref(), Some(lock.owner()));
    let counts = counted.counts();
    assert_eq!(
        counts.acquire_total, 1,
        "the waiter never attempted at the store"
    );
    assert_eq!(
        counts.releases, 1,
        "the hand-off, seen as the holder's release"
    );
    lock.release().await.expect("released");
    wait_gone(&mut conn, "job").await;
}

/// A locker whose data connection goes through `proxy` (its notices come straight).
async fn proxied(server: &RedisServer, proxy: &FaultProxy) -> Locker<Managed> {
    Locker::new(connect(&server.url_via(proxy.addr())).await)
}

#[tokio::test]
async fn a_hand_off_with_a_lost_reply_is_unknown_and_the_waiter_takes_the_key_over() {
    let server = RedisServer::start().await.expect("redis");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let locker = proxied(&server, &proxy).await;
    let mut conn = raw(&server).await;
    let options = LockOptions::new()
        .retry(RetryStrategy::linear(ms(200)).unwrap())
        .operation_timeout(ms(500))
        .wait(Duration::from_secs(30));
    // A cycle first: the release script is loaded (a lost NOSCRIPT reply would keep the
    // hand-off from being applied at all) and the native commands probed.
    let warm = locker
        .obtain("warm", TTL, LockOptions::new())
        .await
        .unwrap();
    warm.release().await.unwrap();
    let holder = locker
        .obtain("job", TTL, options.clone())
        .await
        .expect("obtain");
    let waiter = {
        let locker = locker.clone();
        let options = options.clone();
        tokio::spawn(async move { locker.obtain("job", TTL, options).await })
    };
    wait_queued(&locker, "job", 1).await;
    // The server applies the hand-off; its reply is lost.
    proxy.set_mode(Mode::DropReplies);
    let err = holder.release().await.expect_err("no reply");
    assert!(err.is_outcome_unknown(), "{err:?}");
    proxy.set_mode(Mode::Pass);
    // The waiter treats it as an attempt of unknown outcome; its next attempt, with its
    // owner, takes the key over.
    let lock = tokio::time::timeout(EVENTUALLY, waiter)
        .await
        .expect("the waiter ends")
        .unwrap()
        .expect("the waiter obtains");
    assert_eq!(get(&mut conn, "job").await.as_deref(), Some(lock.owner()));
    lock.release().await.expect("released");
    wait_gone(&mut conn, "job").await;
}

#[tokio::test]
async fn a_waiter_dropped_during_its_hand_off_has_the_key_released_for_it() {
    let server = RedisServer::start().await.expect("redis");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let locker = proxied(&server, &proxy).await;
    let mut conn = raw(&server).await;
    let (holder, waiter) = held_with_one_waiter(&locker, "job").await;
    // Slow replies: the hand-off is in flight while the waiter is dropped.
    proxy.set_mode(Mode::Latency(ms(300)));
    let release = tokio::spawn(holder.release());
    let deadline = Instant::now() + EVENTUALLY;
    while locker.waiting_behind("job") != 0 {
        assert!(
            Instant::now() < deadline,
            "the hand-off never claimed the waiter"
        );
        tokio::time::sleep(ms(2)).await;
    }
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    tokio::time::timeout(EVENTUALLY, release)
        .await
        .unwrap()
        .unwrap()
        .expect("released by hand-off");
    proxy.set_mode(Mode::Pass);
    // The key handed to the dropped waiter is released for it.
    wait_gone(&mut conn, "job").await;
    let again = locker.obtain("job", TTL, LockOptions::new()).await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn only_one_obtain_of_a_locker_contends_at_the_store() {
    let server = RedisServer::start().await.expect("redis");
    let locker = Locker::new(connect(&server.url()).await);
    let mut conn = raw(&server).await;
    // A cycle first: the backend's one probe for native commands is behind it.
    let warm = locker
        .obtain("warm", TTL, LockOptions::new())
        .await
        .unwrap();
    warm.release().await.unwrap();
    let before = calls(&mut conn, "set").await;
    // Eight obtains at once on a free key: one attempts at the store, the rest queue behind
    // it and are handed the key in turn (no attempt of theirs marks a value).
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..8)
        .map(|id| spawn_waiter(&locker, "job", id, tx.clone()))
        .collect();
    let mut seen = Vec::new();
    for _ in 0..8 {
        let (id, lock) = next(&mut rx).await;
        seen.push(id);
        lock.release().await.expect("released");
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    // The first obtain's SET NX, then seven hand-offs (each one SET, inside the script or
    // native): no failed attempt's script ran.
    let sets = calls(&mut conn, "set").await - before;
    assert_eq!(sets, 8, "one store attempt and seven hand-offs");
    assert_eq!(
        calls(&mut conn, "pttl").await,
        0,
        "no attempt found the key held"
    );
    wait_gone(&mut conn, "job").await;
    for t in tasks {
        tokio::time::timeout(EVENTUALLY, t).await.unwrap().unwrap();
    }
}
