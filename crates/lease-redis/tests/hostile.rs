//! Careless and hostile input against a real server (issue 27): fenced Lua bodies cannot move
//! the mark, corrupt fence keys are typed permanent refusals that name the key and change
//! nothing, and the fenced-eval script is one fixed script on the server.

mod common;

use common::*;
use lease_core::{AcquireOutcome, BackendError, FenceOutcome, LeaseBackend, Token};
use lease_redis::{FencedWrite, RedisLeaseError};
use redis::AsyncCommands;

const MARK: &str = "{h}:fence:applied";

fn corrupt_key(e: &BackendError) -> Option<&str> {
    match e {
        BackendError::Corrupt { key, .. } => Some(key.as_str()),
        _ => None,
    }
}

fn lease_corrupt(e: &RedisLeaseError) -> Option<&str> {
    match e {
        RedisLeaseError::Backend(b) => corrupt_key(b),
        _ => None,
    }
}

/// Bodies that assign the guard's names without `local` (careless Lua), or tamper with the
/// fence's own KEYS[1] / ARGV[1], never move the mark: the mark is the token after a body that
/// succeeds, and unmoved after one that fails.
#[tokio::test]
async fn a_fenced_body_cannot_move_the_mark() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(1796)).unwrap();
    assert_eq!(
        f.set("{h}:v", "first").await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("1796"));

    // The finding: a body assigning `token` (no `local`) wrote that value as the mark.
    let careless = [
        "token = '9007199254740000'",
        "token = '9007199254740000'; redis.call('SET', KEYS[2], 'x')",
        "mark = 'not a number'",
        "mark_key = KEYS[2]",
        "KEYS[1] = KEYS[2]; redis.call('SET', KEYS[2], 'x')",
        "ARGV[1] = '9007199254740000'",
        "less = function() return false end",
        "MAX_TOKEN = '1'",
    ];
    for body in careless {
        let r = f.eval(body, ["{h}:w"], Vec::<String>::new()).await;
        let mark = get(&mut raw, MARK).await;
        assert_eq!(
            mark.as_deref(),
            Some("1796"),
            "body {body:?} ({r:?}) moved the mark"
        );
        if let Err(e) = &r {
            assert!(!e.is_transient(), "{body:?}: {e:?}");
            assert!(!e.is_outcome_unknown(), "{body:?}: {e:?}");
        }
    }

    // A body that writes the mark key itself and then fails: the mark is put back.
    let err = f
        .eval(
            "redis.call('SET', KEYS[1], '9007199254740000'); error('then fails')",
            Vec::<String>::new(),
            Vec::<String>::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RedisLeaseError::Backend(BackendError::Refused(m)) if m.contains("then fails")),
        "{err:?}"
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("1796"));
    let err = f
        .eval(
            "redis.call('DEL', KEYS[1]); redis.call('HSET', KEYS[1], 'a', 'b'); \
             return redis.error_reply('ERR nope')",
            Vec::<String>::new(),
            Vec::<String>::new(),
        )
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("1796"));
    // ... and one that writes it and succeeds: the advance sets it to the token.
    assert_eq!(
        f.eval(
            "redis.call('SET', KEYS[1], '9007199254740000')",
            Vec::<String>::new(),
            Vec::<String>::new()
        )
        .await
        .unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("1796"));

    // The next term still writes.
    let next = f.with_token(token(1797));
    assert_eq!(
        next.set("{h}:v", "second").await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("1797"));
}

/// Bodies still see the documented KEYS/ARGV layout, can return values and errors, and a body
/// that does not compile is a typed refusal.
#[tokio::test]
async fn fenced_bodies_keep_their_interface() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(3)).unwrap();
    let body = "assert(KEYS[1] == '{h}:fence:applied' and ARGV[1] == '3'); \
                redis.call('SET', KEYS[2], ARGV[2] .. ARGV[3] .. #ARGV .. #KEYS)";
    assert_eq!(
        f.eval(body, ["{h}:a"], ["x", "y"]).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, "{h}:a").await.as_deref(), Some("xy32"));
    let err = f
        .eval("return (", Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RedisLeaseError::Backend(BackendError::Refused(m)) if m.contains("does not compile")),
        "{err:?}"
    );
    // Precompiled Lua bytecode is refused by the server.
    let err = f
        .eval("\x1bLua", Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("3"));
}

/// Every distinct body runs through one fixed script: the server's script cache does not grow
/// with bodies.
#[tokio::test]
async fn distinct_bodies_do_not_grow_the_server_script_cache() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(1)).unwrap();
    assert!(
        f.eval("return 0", ["{h}:n"], Vec::<String>::new())
            .await
            .unwrap()
            .is_applied()
    );
    let before = used_memory_scripts(&mut raw).await;
    for i in 0..300 {
        let body = format!("redis.call('SET', KEYS[2], '{i}')");
        assert_eq!(
            f.eval(body, ["{h}:n"], Vec::<String>::new()).await.unwrap(),
            FenceOutcome::Applied
        );
    }
    let after = used_memory_scripts(&mut raw).await;
    assert_eq!(
        before, after,
        "300 distinct bodies grew the server's script cache"
    );
    assert_eq!(get(&mut raw, "{h}:n").await.as_deref(), Some("299"));
}

async fn used_memory_scripts(raw: &mut Conn) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(raw)
        .await
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    (
        field("number_of_cached_scripts"),
        field("used_memory_scripts_eval"),
    )
}

/// A corrupt fence epoch, counter or mark: the acquire is refused at once, typed as
/// `Corrupt` naming the key, permanent, not applied: no key is written and nothing is minted.
#[tokio::test]
async fn corrupt_fence_keys_are_typed_permanent_and_change_nothing() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{e}");
    let counter = "{e}:fence";
    let mark = "{e}:fence:applied";
    let epoch = "{e}:fence:epoch";
    let cases: [(&str, &str); 7] = [
        (epoch, "µs? no"),
        (epoch, "-5"),
        (counter, "seven"),
        (counter, "18446744073709551615"),
        (mark, "12.5"),
        (mark, "9007199254740993"),
        (counter, "99999999999999999999999"),
    ];
    for (key, value) in cases {
        for held in [false, true] {
            let _: () = raw
                .del(&["{e}:leader", counter, mark, epoch])
                .await
                .unwrap();
            let _: () = raw.set(counter, "10").await.unwrap();
            let _: () = raw.set(mark, "10").await.unwrap();
            let _: () = raw.set(epoch, "1700000000000000").await.unwrap();
            if held {
                let _: () = raw.set("{e}:leader", "someone-else").await.unwrap();
            }
            let _: () = raw.set(key, value).await.unwrap();
            let err = b.acquire(&acq(&spec, "me")).await.unwrap_err();
            assert_eq!(
                corrupt_key(&err),
                Some(key),
                "{key}={value:?} held={held}: {err:?}"
            );
            assert!(!err.is_transient(), "{err:?}");
            assert_eq!(err.effect(), lease_core::Effect::NotApplied);
            assert!(err.to_string().contains(key), "{err}");
            // Nothing written: the counter and mark as they were, the lock key untouched.
            let c = get(&mut raw, counter).await;
            let m = get(&mut raw, mark).await;
            let e = get(&mut raw, epoch).await;
            let expect = |k: &str, normal: &str| {
                if k == key {
                    value.to_owned()
                } else {
                    normal.to_owned()
                }
            };
            assert_eq!(c, Some(expect(counter, "10")), "{key}={value:?}");
            assert_eq!(m, Some(expect(mark, "10")), "{key}={value:?}");
            assert_eq!(
                e,
                Some(expect(epoch, "1700000000000000")),
                "{key}={value:?}"
            );
            let holder = get(&mut raw, "{e}:leader").await;
            assert_eq!(
                holder.as_deref(),
                held.then_some("someone-else"),
                "{key}={value:?}"
            );
        }
    }
}

/// A corrupt mark: fenced writes are refused as `Corrupt` naming the mark key (not a stale
/// outcome, not a retryable error), nothing written.
#[tokio::test]
async fn a_corrupt_mark_refuses_fenced_writes_by_name() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(5)).unwrap();
    for bad in ["x", "9007199254740993", "-1", " 5"] {
        let _: () = raw.set(MARK, bad).await.unwrap();
        let writes = [
            FencedWrite::set("{h}:v", "v"),
            FencedWrite::hset("{h}:hh", "f", "v"),
            FencedWrite::del(["{h}:v"]),
            FencedWrite::eval(
                "redis.call('SET', KEYS[2], 'v')",
                ["{h}:v"],
                Vec::<String>::new(),
            ),
        ];
        for w in writes {
            let err = f.apply_all(vec![w.clone()]).await.unwrap_err();
            assert_eq!(lease_corrupt(&err), Some(MARK), "{bad:?} {w:?}: {err:?}");
            assert!(!err.is_transient());
            assert!(!err.is_outcome_unknown());
        }
        let err = f
            .apply_all(vec![
                FencedWrite::set("{h}:v", "v"),
                FencedWrite::del(["{h}:w"]),
            ])
            .await
            .unwrap_err();
        assert_eq!(lease_corrupt(&err), Some(MARK), "{err:?}");
        assert!(!exists(&mut raw, "{h}:v").await);
        assert!(!exists(&mut raw, "{h}:hh").await);
        assert_eq!(get(&mut raw, MARK).await.as_deref(), Some(bad));
    }
}

/// A corrupt counter also refuses a checked release and a Redlock raise by name (nothing
/// deleted, nothing raised).
#[tokio::test]
async fn a_corrupt_counter_refuses_release_and_raise_by_name() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{r}");
    let t = acquired_token(&b.acquire(&acq(&spec, "me")).await.unwrap()).unwrap();
    let _: () = raw.set("{r}:fence", "garbage").await.unwrap();
    let err = b.release(&release(&spec, "me", Some(t))).await.unwrap_err();
    assert_eq!(corrupt_key(&err), Some("{r}:fence"), "{err:?}");
    assert!(!err.is_transient());
    assert_eq!(get(&mut raw, "{r}:leader").await.as_deref(), Some("me"));
    // raise.lua (the fenced Redlock's second round), called as lease-redlock calls it.
    let v = redis::cmd("EVAL")
        .arg(lease_redis::scripts::RAISE)
        .arg(3)
        .arg("{r}:leader")
        .arg("{r}:fence")
        .arg("{r}:fence:applied")
        .arg("me")
        .arg(Token::MAX.get())
        .arg(1)
        .query_async::<redis::Value>(&mut raw)
        .await
        .unwrap_err();
    let b_err = lease_redis::backend_error(v);
    assert_eq!(corrupt_key(&b_err), Some("{r}:fence"), "{b_err:?}");
    assert_eq!(get(&mut raw, "{r}:fence").await.as_deref(), Some("garbage"));
    assert_eq!(
        get(&mut raw, "{r}:fence:applied").await,
        Some(t.get().to_string())
    );
    // force_release.lua: refused by name before anything changed (the holder keeps it).
    let err = b.force_release(&spec).await.unwrap_err();
    assert_eq!(corrupt_key(&err), Some("{r}:fence"), "{err:?}");
    assert_eq!(get(&mut raw, "{r}:leader").await.as_deref(), Some("me"));
    assert_eq!(get(&mut raw, "{r}:fence").await.as_deref(), Some("garbage"));
}

/// Keys with odd bytes are named readably in the error (control bytes escaped), never raw.
#[tokio::test]
async fn corrupt_key_names_are_escaped() {
    let (_server, b, mut raw) = setup().await;
    let name = "{e\u{1b}[31m}\r\n";
    let spec = election(name);
    let counter = spec.fence_key().unwrap().to_owned();
    let _: () = raw.set(&counter, "nope").await.unwrap();
    let err = b.acquire(&acq(&spec, "me")).await.unwrap_err();
    let key = corrupt_key(&err).expect("corrupt").to_owned();
    assert!(!key.contains('\u{1b}') && !key.contains('\r'), "{key:?}");
    assert!(key.contains("\\x1b"), "{key:?}");
    assert!(!matches!(
        b.acquire(&acq(&spec, "me")).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));
}

/// The subscriber's refused set follows the channels waited on now (issue 27): an ACL user
/// without SUBSCRIBE waits on many distinct keys in turn; each channel is refused once, and
/// none stays in the set once its waiter is gone.
#[tokio::test]
async fn refused_subscriptions_do_not_accumulate() {
    use lease_core::notify::WatchRole;
    use lease_redis::ReleaseNotices;
    use std::time::Duration;

    let (server, _b, mut raw) = setup().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nosub")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-subscribe")
        .query_async(&mut raw)
        .await
        .unwrap();
    let client = redis::Client::open(server.url_for_user("nosub", "pw")).unwrap();
    let notices = ReleaseNotices::new(client);
    let eventually = |what: &'static str, ok: Box<dyn Fn() -> bool>| async move {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}"));
    };
    const KEYS: u64 = 50;
    for i in 0..KEYS {
        let watch = notices.watch(&format!("redlease:released:k{i}"), WatchRole::Contender);
        watch.activate();
        let n = notices.clone();
        eventually("refused", Box::new(move || n.stats().refusals > i)).await;
        drop(watch);
    }
    let n = notices.clone();
    eventually(
        "refused set emptied",
        Box::new(move || n.stats().refused == 0),
    )
    .await;
    let stats = notices.stats();
    assert_eq!(stats.refusals, KEYS, "{stats:?}");
    assert_eq!(stats.connections, 1, "{stats:?}");
}
