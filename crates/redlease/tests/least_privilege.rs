//! The least-privilege ACL of `docs/production.md`, on a real server: a user with exactly
//! those commands and a key pattern runs elections, locks (auto-renewed, refreshed, fenced) and
//! fenced writes; with any one command less, the operation that needs it is refused at once
//! with the server's `NOPERM`, never retried in a loop. Semaphores, read-write and fair locks
//! each run with exactly their line of the table, and are refused at once without it; every
//! command the scripts call is in the table.

mod common;

use std::time::{Duration, Instant};

use common::{EVENTUALLY, backend_at, raw, wait_leader};
use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use redlease::redis::FencedWrite;
use redlease::{
    BackendError, CancellationToken, ElectionConfig, Elector, FenceOutcome, LeaseBackend,
    LockError, LockOptions, Locker,
};

/// The commands redlease runs (directly, or from its scripts), as in `docs/production.md`.
const COMMANDS: [&str; 10] = [
    "+evalsha", "+eval", "+get", "+set", "+pexpire", "+pttl", "+del", "+hset", "+type", "+time",
];

/// What semaphores add to [`COMMANDS`] (`docs/production.md`, the README).
const SEMAPHORE: [&str; 7] = [
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zscore",
    "+zcount",
];

/// What read-write locks add to [`COMMANDS`].
const RWLOCK: [&str; 6] = [
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zscore",
];

/// What fair locks add to [`COMMANDS`].
const FAIR: [&str; 8] = [
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zscore",
    "+zcount",
    "+zcard",
];

/// [`COMMANDS`] and `extra`.
fn with(extra: &[&'static str]) -> Vec<&'static str> {
    COMMANDS.iter().chain(extra).copied().collect()
}

/// "At once": well below any retry schedule or TTL here.
const AT_ONCE: Duration = Duration::from_millis(1_500);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Creates `user` with `commands` on the keys `{app}:*` only, no channels.
async fn acl_user(admin: &mut MultiplexedConnection, user: &str, commands: &[&str]) {
    let mut c = redis::cmd("ACL");
    c.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg("~{app}:*")
        .arg("resetchannels")
        .arg("-@all");
    for command in commands {
        c.arg(*command);
    }
    let _: () = tokio::time::timeout(EVENTUALLY, c.query_async(admin))
        .await
        .expect("ACL SETUSER in time")
        .expect("ACL SETUSER");
}

/// Bounds an await on the server.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(EVENTUALLY, f)
        .await
        .expect("the server answers in time")
}

/// The server's refusal: `NOPERM` for a command sent directly; for a command a script runs,
/// Redis 6.2 and 7.0 say "The user executing the script can't run this command", Valkey
/// "ACL failure in script: User ... has no permissions to run the 'get' command".
fn assert_noperm(what: &str, message: &str) {
    assert!(
        message.contains("NOPERM")
            || message.contains("can't run this command")
            || message.contains("no permissions to run"),
        "{what}: {message}"
    );
    assert!(
        message.contains("refused"),
        "{what}: not a refusal: {message}"
    );
}

#[tokio::test]
async fn the_documented_acl_is_enough() {
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    acl_user(&mut admin, "redlease", &COMMANDS).await;
    let backend = backend_at(&server.url_for_user("redlease", "pw")).await;

    // An election, and fenced writes of every kind under its term.
    let config = ElectionConfig::builder("{app}", "a")
        .ttl(ms(2_000))
        .build()
        .unwrap();
    let elector = Elector::new(backend.clone(), config);
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let token = wait_leader(&elector, EVENTUALLY).await;
    let fencer = elector.fencer_for(token);
    assert_eq!(
        bounded(fencer.set("{app}:state", "v")).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        bounded(fencer.hset("{app}:h", "f", "v")).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        bounded(fencer.apply_all(vec![
            FencedWrite::set("{app}:a", "1"),
            FencedWrite::del(["{app}:h"]),
        ]))
        .await
        .unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        bounded(fencer.del(["{app}:state"])).await.unwrap(),
        FenceOutcome::Applied
    );
    assert!(elector.leader().await.unwrap().is_some());
    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    // Locks: plain (the SET NX fast path), fenced, held by another, refreshed, auto-renewed.
    let locker = Locker::new(backend.clone());
    let plain = locker
        .obtain("{app}:plain", ms(2_000), LockOptions::new())
        .await
        .unwrap();
    let busy = locker
        .obtain("{app}:plain", ms(2_000), LockOptions::new())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "{busy}");
    plain.refresh(ms(3_000)).await.unwrap();
    assert!(plain.ttl().await.unwrap() > ms(2_000));
    plain.release().await.unwrap();
    let fenced = locker
        .obtain(
            "{app}:fenced",
            ms(1_000),
            LockOptions::new()
                .fence_key("{app}:lockfence")
                .auto_renew(ms(200)),
        )
        .await
        .unwrap();
    let fencer = fenced.fencer().expect("fenced");
    assert_eq!(
        bounded(fencer.set("{app}:job", "done")).await.unwrap(),
        FenceOutcome::Applied
    );
    // Seeing and breaking it: the same commands (GET, SET, DEL, TIME, PUBLISH) suffice.
    assert!(bounded(locker.is_locked("{app}:fenced")).await.unwrap());
    let broken = bounded(locker.force_release("{app}:fenced", Some("{app}:lockfence")))
        .await
        .unwrap();
    assert!(broken.was_held(), "{broken:?}");
    assert!(
        !bounded(fencer.set("{app}:job", "late"))
            .await
            .unwrap()
            .is_applied(),
        "fenced out"
    );
    let fenced = locker
        .obtain(
            "{app}:fenced",
            ms(1_000),
            LockOptions::new().fence_key("{app}:lockfence"),
        )
        .await
        .unwrap();
    fenced.release().await.unwrap();

    // The preflight without CONFIG or INFO: unknown, not an error.
    let report = backend.preflight().await.unwrap();
    assert!(report.is_partial(), "{report:?}");
    // ... and unknown is never safe: a strict check fails on it.
    assert!(report.fence_keys_at_risk());
    assert!(!report.confirmed_safe());

    // A key outside the pattern is refused at once.
    let err = locker
        .obtain("other", ms(1_000), LockOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Refused(_)), "{err}");
    assert_noperm("a key outside the pattern", &err.to_string());
}

/// With any one command of the list removed, the operation that needs it is refused at once
/// with `NOPERM` (a permanent error: no retry loop, no unknown outcome).
#[tokio::test]
async fn one_command_less_is_refused_at_once() {
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    let retrying = LockOptions::new().retry(redlease::RetryStrategy::linear(ms(10)).unwrap());
    for missing in COMMANDS {
        let user = format!("no{}", &missing[1..]);
        let commands: Vec<&str> = COMMANDS.iter().copied().filter(|c| *c != missing).collect();
        acl_user(&mut admin, &user, &commands).await;
        // Scripts are not cached: the first EVALSHA gets NOSCRIPT and falls back to EVAL.
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let backend = backend_at(&server.url_for_user(&user, "pw")).await;
        let locker = Locker::new(backend.clone());
        let key = format!("{{app}}:{user}");
        let started = Instant::now();
        let message = match missing {
            // The fenced obtain runs the acquire script (EVALSHA, then EVAL; GET, SET and TIME
            // inside: the clock floor and the fence epoch).
            "+evalsha" | "+eval" | "+get" | "+time" => locker
                .obtain(
                    &key,
                    ms(5_000),
                    retrying.clone().fence_key(format!("{key}:f")),
                )
                .await
                .map(|_| ())
                .unwrap_err()
                .to_string(),
            // The unfenced obtain of a free key is one plain SET.
            "+set" => locker
                .obtain(&key, ms(5_000), retrying.clone())
                .await
                .map(|_| ())
                .unwrap_err()
                .to_string(),
            // Held by someone else: the acquire script reads the holder's PTTL.
            "+pttl" => {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("someone")
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                locker
                    .obtain(&key, ms(5_000), retrying.clone())
                    .await
                    .map(|_| ())
                    .unwrap_err()
                    .to_string()
            }
            "+pexpire" => {
                let lock = locker
                    .obtain(&key, ms(5_000), LockOptions::new())
                    .await
                    .unwrap();
                lock.refresh(ms(6_000)).await.unwrap_err().to_string()
            }
            "+del" => {
                let lock = locker
                    .obtain(&key, ms(5_000), LockOptions::new())
                    .await
                    .unwrap();
                lock.release().await.unwrap_err().to_string()
            }
            "+hset" | "+type" => {
                let lock = locker
                    .obtain(
                        &key,
                        ms(5_000),
                        LockOptions::new().fence_key(format!("{key}:f")),
                    )
                    .await
                    .unwrap();
                let fencer = lock.fencer().expect("fenced");
                // `apply_all` checks each HSET target's type first (TYPE); a single HSET does
                // not.
                let write = FencedWrite::hset(format!("{key}:h"), "f", "v");
                let result = if missing == "+hset" {
                    fencer.hset(format!("{key}:h"), "f", "v").await
                } else {
                    // (A batch of one is sent as that one write: two make a batch.)
                    fencer
                        .apply_all(vec![write, FencedWrite::set(format!("{key}:s"), "v")])
                        .await
                };
                let err = result.expect_err(missing);
                assert!(
                    matches!(
                        &err,
                        redlease::redis::RedisLeaseError::Backend(BackendError::Refused(_))
                    ),
                    "{missing}: {err:?}"
                );
                err.to_string()
            }
            other => unreachable!("{other}"),
        };
        assert_noperm(missing, &message);
        assert!(
            started.elapsed() < AT_ONCE,
            "{missing}: refused after {:?}, not at once",
            started.elapsed()
        );
    }
}

/// Release notices under the documented ACL: with the channel and the pub/sub commands a lock
/// waiter is woken by the release; without them the release still succeeds (the script's
/// publish is refused and ignored) and the waiter gets the lock at its next poll.
#[tokio::test]
async fn release_notices_with_and_without_their_acl() {
    use redlease::redis::{RedisBackend, ReleaseNotices};
    use redlease::{Locker, RetryStrategy};
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    let mut with_notices: Vec<&str> = COMMANDS.to_vec();
    with_notices.extend(["+publish", "+subscribe", "+unsubscribe", "+ping"]);
    acl_user(&mut admin, "notified", &with_notices).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("notified")
        .arg("&redlease:released:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    acl_user(&mut admin, "plain", &COMMANDS).await;

    for (user, notified) in [("notified", true), ("plain", false)] {
        let url = server.url_for_user(user, "pw");
        let backend = |url: String| async move {
            let client = redis::Client::open(url).unwrap();
            RedisBackend::new(client.get_multiplexed_async_connection().await.unwrap())
                .with_release_notices(ReleaseNotices::new(client))
        };
        let holder = Locker::new(backend(url.clone()).await);
        let waiter_backend = backend(url.clone()).await;
        let notices = waiter_backend.release_notices().unwrap().clone();
        let waiter = Locker::new(waiter_backend);
        let key = format!("{{app}}:{user}");
        let held = holder
            .obtain(key.clone(), ms(30_000), LockOptions::new())
            .await
            .unwrap();
        // The waiter polls every 3 s: only a notice brings it in earlier.
        let poll = ms(3_000);
        let wait = tokio::spawn(async move {
            let options = LockOptions::new()
                .retry(RetryStrategy::linear(poll).unwrap())
                .wait(ms(30_000));
            let lock = waiter.obtain(key, ms(30_000), options).await;
            (lock.map(drop), Instant::now())
        });
        // Let the waiter fail once and subscribe (or fail to).
        tokio::time::sleep(ms(300)).await;
        held.release().await.expect("the release works either way");
        let released = Instant::now();
        let (lock, at) = tokio::time::timeout(EVENTUALLY, wait)
            .await
            .unwrap()
            .unwrap();
        lock.expect("obtained");
        let took = at.duration_since(released);
        let stats = notices.stats();
        if notified {
            assert!(took < AT_ONCE, "{user}: woken {took:?} after the release");
            assert_eq!(stats.refused, 0, "{stats:?}");
        } else {
            assert!(
                took > ms(1_000),
                "{user}: no notice can reach it, yet {took:?}"
            );
            // Refused once, never retried in a loop; the refused set keeps only channels
            // still waited on.
            assert_eq!((stats.refusals, stats.connections), (1, 1), "{stats:?}");
            assert!(stats.refused <= 1, "{stats:?}");
        }
    }
}

/// Runs `what` and asserts it was refused at once with the server's `NOPERM`.
async fn refused_at_once<T, F>(what: &str, f: F)
where
    F: std::future::Future<Output = Result<T, LockError>>,
{
    let started = Instant::now();
    let err = bounded(f)
        .await
        .err()
        .unwrap_or_else(|| panic!("{what}: obtained"));
    assert!(matches!(err, LockError::Refused(_)), "{what}: {err}");
    assert_noperm(what, &err.to_string());
    assert!(
        started.elapsed() < AT_ONCE,
        "{what}: refused after {:?}, not at once",
        started.elapsed()
    );
}

/// A retry that gives up quickly: the attempt that finds the primitive full, then a few more.
fn brief_wait() -> LockOptions {
    LockOptions::new()
        .retry(redlease::RetryStrategy::linear(ms(20)).unwrap())
        .wait(ms(150))
}

#[tokio::test]
async fn semaphores_run_with_their_documented_acl() {
    use redlease::PermitWriteOutcome;
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    acl_user(&mut admin, "sem", &with(&SEMAPHORE)).await;
    acl_user(&mut admin, "plain", &COMMANDS).await;
    let locker = Locker::new(backend_at(&server.url_for_user("sem", "pw")).await);
    let sem = locker.semaphore("{app}:sem", 2).unwrap();
    let ttl = ms(2_000);

    // Two permits (one auto-renewed), the third refused while both are held.
    let a = bounded(sem.acquire(ttl, LockOptions::new().auto_renew(ms(300))))
        .await
        .unwrap();
    let b = bounded(sem.acquire(ttl, LockOptions::new())).await.unwrap();
    let full = bounded(sem.acquire(ttl, brief_wait())).await.unwrap_err();
    assert!(full.is_not_obtained(), "{full}");
    bounded(b.refresh(ms(3_000))).await.unwrap();
    assert!(bounded(b.ttl()).await.unwrap() > ttl);
    let info = bounded(sem.inspect(EVENTUALLY)).await.unwrap();
    assert_eq!((info.permits, info.holders.len()), (Some(2), 2), "{info:?}");
    // Permit-fenced writes.
    let fencer = a.permit_fencer().expect("fenced by default");
    assert_eq!(
        bounded(fencer.set("{app}:out", "a")).await.unwrap(),
        PermitWriteOutcome::Applied
    );
    assert_eq!(
        bounded(fencer.hset("{app}:h", "f", "a")).await.unwrap(),
        PermitWriteOutcome::Applied
    );
    // Auto-renewal keeps `a` past its TTL (the renewals fail loudly: `lost` fires).
    let lost = a.lost();
    tokio::select! {
        _ = lost.cancelled() => panic!("the auto-renewed permit was lost"),
        _ = tokio::time::sleep(ttl + ms(500)) => {}
    }
    bounded(b.release()).await.unwrap();
    bounded(a.release()).await.unwrap();

    // Without the sorted-set commands: refused at once.
    let plain = Locker::new(backend_at(&server.url_for_user("plain", "pw")).await);
    let sem = plain.semaphore("{app}:sem2", 2).unwrap();
    refused_at_once(
        "a semaphore with the locks' ACL",
        sem.acquire(ttl, LockOptions::new()),
    )
    .await;
}

#[tokio::test]
async fn read_write_locks_run_with_their_documented_acl() {
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    acl_user(&mut admin, "rw", &with(&RWLOCK)).await;
    acl_user(&mut admin, "plain", &COMMANDS).await;
    let locker = Locker::new(backend_at(&server.url_for_user("rw", "pw")).await);
    let key = "{app}:rw";
    let opts = || LockOptions::new().fence_key("{app}:rw:fence");
    let ttl = ms(2_000);
    let readers = locker.shared(key).unwrap();

    // Two readers (one auto-renewed); a writer refused while they hold (its waiting mark set).
    let r1 = bounded(readers.acquire(ttl, opts().auto_renew(ms(300))))
        .await
        .unwrap();
    let r2 = bounded(readers.acquire(ttl, opts())).await.unwrap();
    let writer = bounded(
        locker.obtain(
            key,
            ttl,
            opts()
                .retry(redlease::RetryStrategy::linear(ms(20)).unwrap())
                .wait(ms(150)),
        ),
    )
    .await
    .unwrap_err();
    assert!(writer.is_not_obtained(), "{writer}");
    bounded(r2.refresh(ms(3_000))).await.unwrap();
    assert!(bounded(r2.ttl()).await.unwrap() > ttl);
    let info = bounded(readers.inspect(Some("{app}:rw:fence"), EVENTUALLY))
        .await
        .unwrap();
    assert_eq!(info.readers.len(), 2, "{info:?}");
    // (The newest reader's token: under the lock rule an older one is stale.)
    let fencer = r2.fencer().expect("fenced");
    assert_eq!(
        bounded(fencer.set("{app}:read-out", "r2")).await.unwrap(),
        FenceOutcome::Applied
    );
    let lost = r1.lost();
    tokio::select! {
        _ = lost.cancelled() => panic!("the auto-renewed reader was lost"),
        _ = tokio::time::sleep(ttl + ms(500)) => {}
    }
    bounded(r2.release()).await.unwrap();
    bounded(r1.release()).await.unwrap();

    // The writer, alone now, with a fenced write; a reader refused while it holds.
    let w = bounded(locker.obtain(key, ttl, opts())).await.unwrap();
    let reader = bounded(readers.acquire(ttl, brief_wait().fence_key("{app}:rw:fence")))
        .await
        .unwrap_err();
    assert!(reader.is_not_obtained(), "{reader}");
    let fencer = w.fencer().expect("fenced");
    assert_eq!(
        bounded(fencer.set("{app}:write-out", "w")).await.unwrap(),
        FenceOutcome::Applied
    );
    bounded(w.release()).await.unwrap();

    // Without the sorted-set commands: a reader is refused at once.
    let plain = Locker::new(backend_at(&server.url_for_user("plain", "pw")).await);
    let readers = plain.shared("{app}:rw2").unwrap();
    refused_at_once(
        "a reader with the locks' ACL",
        readers.acquire(ttl, LockOptions::new()),
    )
    .await;
}

#[tokio::test]
async fn fair_locks_run_with_their_documented_acl() {
    let server = RedisServer::start().await.unwrap();
    let mut admin = raw(&server).await;
    acl_user(&mut admin, "fair", &with(&FAIR)).await;
    acl_user(&mut admin, "plain", &COMMANDS).await;
    let locker = Locker::new(backend_at(&server.url_for_user("fair", "pw")).await);
    let fair = locker.fair("{app}:fair").unwrap();
    let ttl = ms(2_000);
    let fenced = || LockOptions::new().fence_key("{app}:fair:fence");

    // A holder (auto-renewed); a waiter that queues and gives up; one that queues and gets it.
    let a = bounded(fair.acquire(ttl, fenced().auto_renew(ms(300))))
        .await
        .unwrap();
    let busy = bounded(fair.acquire(ttl, brief_wait())).await.unwrap_err();
    assert!(busy.is_not_obtained(), "{busy}");
    let waiter = {
        let fair = fair.clone();
        let options = fenced()
            .retry(redlease::RetryStrategy::linear(ms(50)).unwrap())
            .wait(EVENTUALLY);
        tokio::spawn(async move { fair.acquire(ms(2_000), options).await })
    };
    bounded(a.refresh(ms(3_000))).await.unwrap();
    let info = bounded(fair.inspect(EVENTUALLY)).await.unwrap();
    assert!(info.holder.is_some(), "{info:?}");
    let fencer = a.fencer().expect("fenced");
    assert_eq!(
        bounded(fencer.set("{app}:fair-out", "a")).await.unwrap(),
        FenceOutcome::Applied
    );
    let lost = a.lost();
    tokio::select! {
        _ = lost.cancelled() => panic!("the auto-renewed fair lock was lost"),
        _ = tokio::time::sleep(ttl + ms(500)) => {}
    }
    bounded(a.release()).await.unwrap();
    let b = bounded(waiter)
        .await
        .unwrap()
        .expect("the queued waiter's turn");
    let fencer = b.fencer().expect("fenced");
    assert_eq!(
        bounded(fencer.set("{app}:fair-out", "b")).await.unwrap(),
        FenceOutcome::Applied
    );
    bounded(b.release()).await.unwrap();

    // Without the sorted-set commands: refused at once.
    let plain = Locker::new(backend_at(&server.url_for_user("plain", "pw")).await);
    let fair = plain.fair("{app}:fair2").unwrap();
    refused_at_once(
        "a fair lock with the locks' ACL",
        fair.acquire(ttl, LockOptions::new()),
    )
    .await;
}

/// Every command a script of `crates/lease-redis/scripts/` calls is in the documented ACL (or
/// is the notices' `PUBLISH`/`SPUBLISH`, documented with the channels): a script that starts
/// calling a new command fails here until the table says so.
#[test]
fn the_documented_acl_covers_every_script() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lease-redis/scripts");
    let documented: Vec<String> = with(&SEMAPHORE)
        .into_iter()
        .chain(RWLOCK)
        .chain(FAIR)
        .map(|c| c[1..].to_ascii_uppercase())
        .chain(["PUBLISH".to_owned(), "SPUBLISH".to_owned()])
        .collect();
    let mut scripts = 0;
    let mut calls = 0;
    for entry in std::fs::read_dir(&dir).expect("the scripts directory") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "lua") {
            continue;
        }
        scripts += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        // redis.call('NAME', ...) / redis.pcall("NAME", ...); a call through a variable names
        // its command in a literal elsewhere (the notices' verb).
        for (i, _) in text.match_indices("call(") {
            let rest = &text[i + "call(".len()..];
            let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else {
                continue;
            };
            let name: String = rest[1..].chars().take_while(|c| *c != quote).collect();
            calls += 1;
            assert!(
                documented.contains(&name.to_ascii_uppercase()),
                "{}: {name} is not in the documented ACL (docs/production.md, README, this file)",
                path.display()
            );
        }
    }
    assert!(
        scripts > 20 && calls > 50,
        "{scripts} scripts, {calls} calls"
    );
}
