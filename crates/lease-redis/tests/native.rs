//! Native conditional commands on the plain lock's path (`DELIFEQ` / `DELEX .. IFEQ` to
//! release, `SET .. IFEQ .. PX` to renew), against the server the kit runs: on Valkey 9
//! (`cargo xtask test --server valkey9`) the plain lock runs no script at all; on Redis 7.0
//! and 6.2, which have none of them, the scripts run as before. Either way every outcome is
//! the script's (the in-memory backend's) outcome.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use lease_core::notify::WatchRole;
use lease_core::{BackendError, LeaseBackend, ReleaseOutcome, RenewOutcome};
use lease_redis::{RedisBackend, ReleaseNotices};
use lease_testkit::server::{self, ServerKind};
use tokio::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

/// Calls per command since the last `CONFIG RESETSTAT` (`cmdstat_<name>` → calls).
async fn commandstats(raw: &mut Conn) -> HashMap<String, u64> {
    let info: String = timeout(
        BOUND,
        redis::cmd("INFO").arg("commandstats").query_async(raw),
    )
    .await
    .expect("bounded")
    .expect("INFO commandstats");
    let mut out = HashMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        out.insert(name.to_owned(), calls);
    }
    out
}

async fn reset_stats(raw: &mut Conn) {
    let () = timeout(
        BOUND,
        redis::cmd("CONFIG").arg("RESETSTAT").query_async(raw),
    )
    .await
    .expect("bounded")
    .expect("CONFIG RESETSTAT");
}

/// Whether the server under test offers `DELIFEQ`: fixed for the named servers of the matrix
/// (so the Valkey 9 run proves the native path and the Redis runs the fallback), asked of the
/// server itself for any other binary.
async fn expect_native(raw: &mut Conn) -> bool {
    match server::choice().expect("server choice").kind {
        Some(ServerKind::Valkey9) => true,
        Some(ServerKind::Redis70 | ServerKind::Redis62) => false,
        _ => {
            let v: redis::Value = timeout(
                BOUND,
                redis::cmd("COMMAND")
                    .arg("INFO")
                    .arg("delifeq")
                    .query_async(raw),
            )
            .await
            .expect("bounded")
            .expect("COMMAND INFO");
            matches!(v, redis::Value::Array(ref a) if a.first().is_some_and(|e| *e != redis::Value::Nil))
        }
    }
}

fn calls(stats: &HashMap<String, u64>, cmd: &str) -> u64 {
    stats.get(cmd).copied().unwrap_or(0)
}

fn scripts(stats: &HashMap<String, u64>) -> u64 {
    calls(stats, "evalsha") + calls(stats, "eval")
}

/// A lock cycle of the plain lock (acquire, renew, release) sends native commands only where
/// the server has them, and the scripts otherwise; switched off, always the scripts.
#[tokio::test]
async fn the_plain_lock_runs_no_script_where_the_server_has_native_commands() {
    let (_server, backend, mut raw) = setup().await;
    let native = expect_native(&mut raw).await;
    let spec = lock(&["native:cycle"], None);

    reset_stats(&mut raw).await;
    for _ in 0..3 {
        let got = timeout(BOUND, backend.acquire(&acq(&spec, "a")))
            .await
            .expect("bounded")
            .expect("acquire");
        assert!(matches!(got, lease_core::AcquireOutcome::Acquired { .. }));
        let renewed = timeout(BOUND, backend.renew(&renew(&spec, "a")))
            .await
            .expect("bounded")
            .expect("renew");
        assert_eq!(renewed, RenewOutcome::Renewed);
        assert!(pttl(&mut raw, "native:cycle").await > (LONG as i64) - 5_000);
        let released = timeout(BOUND, backend.release(&release(&spec, "a", None)))
            .await
            .expect("bounded")
            .expect("release");
        assert_eq!(released, ReleaseOutcome::Released);
        assert!(!exists(&mut raw, "native:cycle").await);
    }
    let stats = commandstats(&mut raw).await;
    if native {
        assert_eq!(calls(&stats, "delifeq"), 3, "{stats:?}");
        assert_eq!(
            scripts(&stats),
            0,
            "no script on the plain lock's path: {stats:?}"
        );
        // One probe for the backend: COMMAND INFO once, not per call.
        assert_eq!(calls(&stats, "command|info"), 1, "{stats:?}");
    } else {
        assert_eq!(calls(&stats, "delifeq") + calls(&stats, "delex"), 0);
        // Every renewal and release ran its script (the first of each by EVAL after NOSCRIPT,
        // which this server also counts as an EVALSHA call).
        assert_eq!(
            calls(&stats, "evalsha"),
            6,
            "renew and release by script: {stats:?}"
        );
    }

    // Negative control: the same cycle with native commands off runs the scripts.
    let scripted = RedisBackend::new(server_conn(&_server).await).with_native_commands(false);
    assert!(!scripted.native_commands());
    reset_stats(&mut raw).await;
    timeout(BOUND, scripted.acquire(&acq(&spec, "b")))
        .await
        .expect("bounded")
        .expect("acquire");
    assert_eq!(
        timeout(BOUND, scripted.renew(&renew(&spec, "b")))
            .await
            .expect("bounded")
            .expect("renew"),
        RenewOutcome::Renewed
    );
    assert_eq!(
        timeout(BOUND, scripted.release(&release(&spec, "b", None)))
            .await
            .expect("bounded")
            .expect("release"),
        ReleaseOutcome::Released
    );
    let stats = commandstats(&mut raw).await;
    // (A first EVALSHA answered NOSCRIPT, then EVAL: servers count both.)
    assert!(scripts(&stats) >= 2, "{stats:?}");
    assert_eq!(calls(&stats, "delifeq") + calls(&stats, "command|info"), 0);
}

/// However many operations start at once on a fresh backend, one probe goes out: the others
/// run their scripts meanwhile (no waiting), and every outcome is what it would be either way.
/// Sixty-four tasks on one connection had each sent a probe of their own.
#[tokio::test]
async fn operations_starting_at_once_send_one_probe() {
    const N: usize = 32;
    let (_server, backend, mut raw) = setup().await;
    let keys: Vec<String> = (0..N).map(|i| format!("native:first:{i}")).collect();
    // Held by "a": a free key is taken by `SET NX PX`, which needs no probe.
    for key in &keys {
        let got = timeout(BOUND, backend.acquire(&acq(&lock(&[key], None), "a")))
            .await
            .expect("bounded")
            .expect("acquire");
        assert!(matches!(got, lease_core::AcquireOutcome::Acquired { .. }));
    }
    reset_stats(&mut raw).await;
    let mut set = tokio::task::JoinSet::new();
    for key in keys.clone() {
        let backend = backend.clone();
        set.spawn(async move {
            let spec = lock(&[&key], None);
            timeout(BOUND, backend.release(&release(&spec, "a", None))).await
        });
    }
    while let Some(joined) = timeout(BOUND, set.join_next()).await.expect("bounded") {
        let released = joined.expect("task").expect("bounded").expect("release");
        assert_eq!(released, ReleaseOutcome::Released);
    }
    for key in &keys {
        assert!(!exists(&mut raw, key).await, "{key} released");
    }
    let stats = commandstats(&mut raw).await;
    // Redis 6.2 counts `COMMAND INFO` as `command`, later servers as `command|info`.
    let probes = calls(&stats, "command|info") + calls(&stats, "command");
    assert_eq!(probes, 1, "one probe for {N} operations at once: {stats:?}");
    // The probe's answer is kept: the next release runs natively where the server can.
    let native = expect_native(&mut raw).await;
    let spec = lock(&["native:first:after"], None);
    timeout(BOUND, backend.acquire(&acq(&spec, "a")))
        .await
        .expect("bounded")
        .expect("acquire");
    reset_stats(&mut raw).await;
    let released = timeout(BOUND, backend.release(&release(&spec, "a", None)))
        .await
        .expect("bounded")
        .expect("release");
    assert_eq!(released, ReleaseOutcome::Released);
    let stats = commandstats(&mut raw).await;
    let ran_native = calls(&stats, "delifeq") + calls(&stats, "delex") == 1;
    assert_eq!(ran_native, native, "{stats:?}");
    assert_eq!(calls(&stats, "command|info") + calls(&stats, "command"), 0);
}

async fn server_conn(server: &lease_testkit::RedisServer) -> Conn {
    timeout(BOUND, server.connection())
        .await
        .expect("bounded")
        .expect("connection")
}

/// Every outcome is the script's: someone else's lock, a lock with metadata (its stored value
/// is not the owner alone, so the native command changes nothing and the script decides), a
/// key that is gone (a renewal never creates it), a key of another type.
#[tokio::test]
async fn native_outcomes_are_the_scripts_outcomes() {
    let (_server, backend, mut raw) = setup().await;
    let spec = lock(&["native:truth"], None);

    // Someone else's lock: neither renewed nor released, untouched.
    timeout(BOUND, backend.acquire(&acq(&spec, "other")))
        .await
        .expect("bounded")
        .expect("acquire");
    let before = pttl(&mut raw, "native:truth").await;
    assert_eq!(
        backend.renew(&renew(&spec, "me")).await.expect("renew"),
        RenewOutcome::NotHeld
    );
    assert_eq!(
        backend
            .release(&release(&spec, "me", None))
            .await
            .expect("release"),
        ReleaseOutcome::NotHeld
    );
    assert_eq!(
        get(&mut raw, "native:truth").await.as_deref(),
        Some("other")
    );
    assert!(pttl(&mut raw, "native:truth").await <= before);
    del(&mut raw, "native:truth").await;

    // Ours with metadata: renewed and released (by the script, after the native command).
    timeout(BOUND, backend.acquire(&acq_meta(&spec, "me", "host=a")))
        .await
        .expect("bounded")
        .expect("acquire");
    set_pttl(&mut raw, "native:truth", 5_000).await;
    assert_eq!(
        backend.renew(&renew(&spec, "me")).await.expect("renew"),
        RenewOutcome::Renewed
    );
    assert!(pttl(&mut raw, "native:truth").await > 10_000);
    assert_eq!(
        get(&mut raw, "native:truth").await.as_deref(),
        Some("me\0host=a"),
        "the metadata survives a renewal"
    );
    assert_eq!(
        backend
            .release(&release(&spec, "me", None))
            .await
            .expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!exists(&mut raw, "native:truth").await);

    // Gone: not held, and a renewal does not create the key.
    assert_eq!(
        backend.renew(&renew(&spec, "me")).await.expect("renew"),
        RenewOutcome::NotHeld
    );
    assert!(!exists(&mut raw, "native:truth").await);
    assert_eq!(
        backend
            .release(&release(&spec, "me", None))
            .await
            .expect("release"),
        ReleaseOutcome::NotHeld
    );

    // Another type: refused, as the scripts refuse it (WRONGTYPE), nothing changed.
    let () = redis::cmd("HSET")
        .arg("native:truth")
        .arg("f")
        .arg("v")
        .query_async::<i64>(&mut raw)
        .await
        .map(|_| ())
        .expect("HSET");
    for err in [
        backend.renew(&renew(&spec, "me")).await.err(),
        backend.release(&release(&spec, "me", None)).await.err(),
    ] {
        assert!(
            matches!(&err, Some(BackendError::Refused(m)) if m.contains("WRONGTYPE")),
            "{err:?}"
        );
    }
    assert_eq!(
        hget(&mut raw, "native:truth", "f").await.as_deref(),
        Some("v")
    );
}

async fn set_pttl(raw: &mut Conn, key: &str, ms: u64) {
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(key)
        .arg(ms)
        .query_async(raw)
        .await
        .expect("PEXPIRE");
}

/// A watch on `spec` as a lock waiter's, live (its subscription confirmed) and with the
/// resynchronisation's wake taken.
async fn live_watch(
    backend: &RedisBackend<Conn>,
    spec: &std::sync::Arc<lease_core::LeaseSpec>,
) -> lease_core::notify::ReleaseWatch {
    let mut watch = backend
        .release_watch(spec, WatchRole::Contender)
        .expect("a watch");
    watch.set_contending(true);
    watch.activate();
    // Going live wakes the watch once (the resynchronisation); nothing else has.
    timeout(BOUND, watch.notified())
        .await
        .expect("the subscription goes live within the bound");
    assert!(watch.is_live());
    assert!(!watch.take_wake(), "no notice before the release");
    watch
}

async fn held_by(
    backend: &RedisBackend<Conn>,
    spec: &std::sync::Arc<lease_core::LeaseSpec>,
    who: &str,
) {
    let got = timeout(BOUND, backend.acquire(&acq(spec, who)))
        .await
        .expect("bounded")
        .expect("attempt");
    assert!(
        matches!(got, lease_core::AcquireOutcome::Held { .. }),
        "{got:?}"
    );
}

/// A second backend on the same server with its own release-notice subscriber: another
/// process's waiter.
async fn other_process(server: &lease_testkit::RedisServer) -> RedisBackend<Conn> {
    RedisBackend::new(server_conn(server).await)
        .with_release_notices(ReleaseNotices::new(server.client().expect("client")))
}

/// `owner` acquires `spec` (free) through `backend`.
async fn acquired(
    backend: &RedisBackend<Conn>,
    spec: &std::sync::Arc<lease_core::LeaseSpec>,
    owner: &str,
) {
    timeout(BOUND, backend.acquire(&acq(spec, owner)))
        .await
        .expect("bounded")
        .expect("acquire");
}

/// `owner` releases `spec` through `backend`, which it held.
async fn released(
    backend: &RedisBackend<Conn>,
    spec: &std::sync::Arc<lease_core::LeaseSpec>,
    owner: &str,
) {
    assert_eq!(
        timeout(BOUND, backend.release(&release(spec, owner, None)))
            .await
            .expect("bounded")
            .expect("release"),
        ReleaseOutcome::Released
    );
}

/// A contended release still wakes waiters: the contender's failed attempt (another
/// process's) marks the held value, so the release (the native delete refuses the marked
/// value, the script deletes it) publishes, and the contender's watch (the subscriber a lock
/// waiter uses) is woken.
#[tokio::test]
async fn a_contended_release_wakes_a_waiter() {
    let (server, backend, mut raw) = setup().await;
    let native = expect_native(&mut raw).await;
    let waiter = other_process(&server).await;
    let spec = lock(&["native:notice"], None);
    acquired(&backend, &spec, "a").await;
    let mut watch = live_watch(&waiter, &spec).await;
    held_by(&waiter, &spec, "b").await;

    reset_stats(&mut raw).await;
    released(&backend, &spec, "a").await;
    timeout(BOUND, watch.notified())
        .await
        .expect("the waiter is woken within the bound");
    assert!(!exists(&mut raw, "native:notice").await);
    let stats = commandstats(&mut raw).await;
    if native {
        assert_eq!(calls(&stats, "delifeq"), 1, "{stats:?}");
    }
    // The script ran (an `EVALSHA` refused with NOSCRIPT on a fresh server counts too).
    assert!(scripts(&stats) >= 1, "{stats:?}");
    assert_eq!(calls(&stats, "publish"), 1, "{stats:?}");
}

/// A backend that does not publish releases a marked value without a `PUBLISH` (the script
/// gets an explicit empty notice argument; without one it publishes on the standalone
/// channel, as the test above shows).
#[tokio::test]
async fn a_backend_without_notices_releases_a_marked_value_silently() {
    let (server, backend, mut raw) = setup().await;
    let backend = backend.with_publish_releases(false);
    let waiter = other_process(&server).await;
    let spec = lock(&["native:silent"], None);
    acquired(&backend, &spec, "a").await;
    held_by(&waiter, &spec, "b").await;

    reset_stats(&mut raw).await;
    released(&backend, &spec, "a").await;
    assert!(!exists(&mut raw, "native:silent").await);
    let stats = commandstats(&mut raw).await;
    assert!(
        scripts(&stats) >= 1,
        "the marked value went to the script: {stats:?}"
    );
    assert_eq!(calls(&stats, "publish"), 0, "{stats:?}");
}

/// With a waiter of its own process on the key (a watch on the releasing backend's
/// subscriber), a native release expects the mark: `DELIFEQ` of the plain value, `DELIFEQ`
/// of the marked one and the `PUBLISH`, in one pipeline, with no script; the waiter is woken.
/// Elsewhere the script runs and publishes as before.
#[tokio::test]
async fn a_release_with_waiters_in_process_needs_one_round_trip() {
    let (server, backend, mut raw) = setup().await;
    let native = expect_native(&mut raw).await;
    let backend =
        backend.with_release_notices(ReleaseNotices::new(server.client().expect("client")));
    let spec = lock(&["native:inproc"], None);
    acquired(&backend, &spec, "a").await;
    let mut watch = live_watch(&backend, &spec).await;
    held_by(&backend, &spec, "b").await;
    reset_stats(&mut raw).await;
    released(&backend, &spec, "a").await;
    timeout(BOUND, watch.notified())
        .await
        .expect("the waiter is woken within the bound");
    assert!(!exists(&mut raw, "native:inproc").await);
    let stats = commandstats(&mut raw).await;
    assert_eq!(calls(&stats, "publish"), 1, "{stats:?}");
    if native {
        assert_eq!(calls(&stats, "delifeq"), 2, "{stats:?}");
        assert_eq!(scripts(&stats), 0, "{stats:?}");
    } else {
        assert!(scripts(&stats) >= 1, "{stats:?}");
    }
}

/// An uncontended release publishes nothing (nobody found the lock held, so nobody waits for
/// it), with or without metadata; on a native server the plain lock's release is one
/// `DELIFEQ` and nothing else.
#[tokio::test]
async fn an_uncontended_release_publishes_nothing() {
    let (_server, backend, mut raw) = setup().await;
    let native = expect_native(&mut raw).await;
    let spec = lock(&["native:quiet"], None);
    reset_stats(&mut raw).await;
    for req in [acq(&spec, "a"), acq_meta(&spec, "a", "m")] {
        timeout(BOUND, backend.acquire(&req))
            .await
            .expect("bounded")
            .expect("acquire");
        assert_eq!(
            timeout(BOUND, backend.release(&release(&spec, "a", None)))
                .await
                .expect("bounded")
                .expect("release"),
            ReleaseOutcome::Released
        );
        assert!(!exists(&mut raw, "native:quiet").await);
    }
    let stats = commandstats(&mut raw).await;
    assert_eq!(calls(&stats, "publish"), 0, "{stats:?}");
    if native {
        // The metadata lock's DELIFEQ misses, and its script runs.
        assert_eq!(calls(&stats, "delifeq"), 2, "{stats:?}");
        assert!(scripts(&stats) >= 1, "{stats:?}");
        assert_eq!(calls(&stats, "del"), 1, "{stats:?}");
    }
}

/// The waiter mark rides with the holder's value: it keeps the TTL, the owner and the
/// metadata; renewals and a same-owner takeover keep it; inspection shows the metadata
/// without it; a reader blocked by the writer marks it too.
#[tokio::test]
async fn the_waiter_mark_rides_with_the_value() {
    let (_server, backend, mut raw) = setup().await;
    let spec = lock(&["native:mark"], None);
    timeout(BOUND, backend.acquire(&acq_meta(&spec, "a", "m")))
        .await
        .expect("bounded")
        .expect("acquire");
    held_by(&backend, &spec, "b").await;
    assert_eq!(
        get(&mut raw, "native:mark").await.as_deref(),
        Some("a\0m\0w")
    );
    assert!(pttl(&mut raw, "native:mark").await > (LONG as i64) - 5_000);
    held_by(&backend, &spec, "c").await;
    assert_eq!(
        get(&mut raw, "native:mark").await.as_deref(),
        Some("a\0m\0w")
    );

    set_pttl(&mut raw, "native:mark", 5_000).await;
    assert_eq!(
        timeout(BOUND, backend.renew(&renew(&spec, "a")))
            .await
            .expect("bounded")
            .expect("renew"),
        RenewOutcome::Renewed
    );
    assert!(pttl(&mut raw, "native:mark").await > (LONG as i64) - 5_000);
    let info = timeout(BOUND, backend.inspect(&spec))
        .await
        .expect("bounded")
        .expect("inspect");
    assert_eq!(info.metadata.as_deref(), Some("m"), "{info:?}");
    timeout(BOUND, backend.acquire(&acq(&spec, "a")))
        .await
        .expect("bounded")
        .expect("takeover");
    assert_eq!(
        get(&mut raw, "native:mark").await.as_deref(),
        Some("a\0\0w")
    );

    let plain = lock(&["native:mark2"], None);
    timeout(BOUND, backend.acquire(&acq(&plain, "w")))
        .await
        .expect("bounded")
        .expect("writer");
    let reader = timeout(BOUND, backend.acquire_shared(&acq(&plain, "r")))
        .await
        .expect("bounded")
        .expect("reader's attempt");
    assert!(
        matches!(reader, lease_core::AcquireOutcome::Held { .. }),
        "{reader:?}"
    );
    assert_eq!(
        get(&mut raw, "native:mark2").await.as_deref(),
        Some("w\0\0w")
    );

    // A winner that says others of its process wait is stored marked, by the fast path and
    // by the script (a same-owner takeover), with and without metadata.
    let fresh = lock(&["native:mark3"], None);
    for (req, want) in [
        (acq(&fresh, "x").with_waiters(true), "x\0\0w"),
        (acq_meta(&fresh, "x", "m").with_waiters(true), "x\0m\0w"),
    ] {
        timeout(BOUND, backend.acquire(&req))
            .await
            .expect("bounded")
            .expect("acquire with waiters");
        assert_eq!(get(&mut raw, "native:mark3").await.as_deref(), Some(want));
    }
}

/// The negative control of the two tests above: a release whose value lost its mark (here
/// rewritten by hand, as a holder of an older version would on takeover) publishes nothing,
/// and the other process's waiter is not woken: the notice comes from the mark.
#[tokio::test]
async fn without_the_mark_a_release_is_silent() {
    let (server, backend, mut raw) = setup().await;
    let waiter = other_process(&server).await;
    let spec = lock(&["native:unmarked"], None);
    timeout(BOUND, backend.acquire(&acq(&spec, "a")))
        .await
        .expect("bounded")
        .expect("acquire");
    let mut watch = live_watch(&waiter, &spec).await;
    held_by(&waiter, &spec, "b").await;
    let () = timeout(
        BOUND,
        redis::cmd("SET")
            .arg("native:unmarked")
            .arg("a")
            .arg("KEEPTTL")
            .query_async(&mut raw),
    )
    .await
    .expect("bounded")
    .expect("SET KEEPTTL");

    reset_stats(&mut raw).await;
    assert_eq!(
        timeout(BOUND, backend.release(&release(&spec, "a", None)))
            .await
            .expect("bounded")
            .expect("release"),
        ReleaseOutcome::Released
    );
    assert!(
        timeout(Duration::from_millis(500), watch.notified())
            .await
            .is_err(),
        "no notice without the mark"
    );
    assert_eq!(calls(&commandstats(&mut raw).await, "publish"), 0);
}

/// A server that refuses the native command after the probe (here an ACL that takes
/// `DELIFEQ` away, as a failover to an older server would) gets the script for that same call,
/// with the script's outcome, and from then on.
#[tokio::test]
async fn a_refused_native_command_falls_back_to_the_script() {
    let (_server, backend, mut raw) = setup().await;
    if !expect_native(&mut raw).await {
        // Nothing to refuse: the fallback is the only path (the test above proves it).
        return;
    }
    let spec = lock(&["native:refused"], None);
    timeout(BOUND, backend.acquire(&acq(&spec, "a")))
        .await
        .expect("bounded")
        .expect("acquire");
    // Probe now, while DELIFEQ is allowed.
    assert_eq!(
        backend.renew(&renew(&spec, "a")).await.expect("renew"),
        RenewOutcome::Renewed
    );
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-delifeq")
        .query_async(&mut raw)
        .await
        .expect("ACL SETUSER");
    reset_stats(&mut raw).await;
    assert_eq!(
        timeout(BOUND, backend.release(&release(&spec, "a", None)))
            .await
            .expect("bounded")
            .expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!exists(&mut raw, "native:refused").await);
    let stats = commandstats(&mut raw).await;
    assert!(scripts(&stats) >= 1, "the script ran: {stats:?}");
    assert_eq!(calls(&stats, "delifeq"), 0, "{stats:?}");
}
