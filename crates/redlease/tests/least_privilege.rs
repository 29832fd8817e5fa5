//! The least-privilege ACL of `docs/production.md`, on a real server: a user with exactly
//! those commands and a key pattern runs elections, locks (auto-renewed, refreshed, fenced) and
//! fenced writes; with any one command less, the operation that needs it is refused at once
//! with the server's `NOPERM`, never retried in a loop.

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
