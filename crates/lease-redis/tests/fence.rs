//! Fenced writes against a real Redis server.

mod common;

use common::*;
use lease_core::{
    BackendError, FenceMark, FenceOutcome, FencedResource, Fencing, LeaseBackend, LeaseSpec,
};
use lease_redis::{FencedWrite, RedisFencer, RedisLeaseError, scripts};
use redis::Value;

const MARK: &str = "{f}:fence:applied";

fn stale(n: u64) -> FenceOutcome {
    FenceOutcome::Stale {
        mark: FenceMark::at(token(n)),
    }
}

fn is_wrongtype(e: &RedisLeaseError) -> bool {
    matches!(e, RedisLeaseError::Backend(BackendError::Refused(m)) if m.contains("WRONGTYPE"))
}

#[tokio::test]
async fn guard_accepts_equal_and_higher_tokens_and_refuses_lower() {
    let (_server, b, mut raw) = setup().await;
    let f5 = b.fencer_for(MARK, token(5)).unwrap();
    assert_eq!(
        f5.set("{f}:v", "five").await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("5"));
    // Equal passes: one term writes many times.
    assert_eq!(
        f5.set("{f}:v", "five again").await.unwrap(),
        FenceOutcome::Applied
    );
    let f4 = f5.with_token(token(4));
    assert_eq!(f4.set("{f}:v", "four").await.unwrap(), stale(5));
    assert_eq!(f4.hset("{f}:h", "k", "v").await.unwrap(), stale(5));
    assert_eq!(f4.del(["{f}:v"]).await.unwrap(), stale(5));
    assert_eq!(get(&mut raw, "{f}:v").await.as_deref(), Some("five again"));
    assert!(!exists(&mut raw, "{f}:h").await);
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("5"));
    let f6 = f5.with_token(token(6));
    assert_eq!(f6.del(["{f}:v"]).await.unwrap(), FenceOutcome::Applied);
    assert!(!exists(&mut raw, "{f}:v").await);
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("6"));
    // An empty DEL only advances the mark.
    let f7 = f5.with_token(token(7));
    assert_eq!(
        f7.del(Vec::<String>::new()).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("7"));
}

#[tokio::test]
async fn the_script_refuses_token_zero_and_invalid_tokens() {
    // The Rust API cannot express token 0; the script still refuses it (other clients).
    let (_server, _b, mut raw) = setup().await;
    set(&mut raw, MARK, "3").await;
    for bad in ["0", "-1", "abc", "", "9007199254740993", "1e3"] {
        let v: Value = redis::cmd("EVAL")
            .arg(scripts::FENCE_SET)
            .arg(2)
            .arg(MARK)
            .arg("{f}:t")
            .arg(bad)
            .arg("x")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(
            v,
            Value::Array(vec![Value::Int(0), Value::BulkString(b"3".to_vec())]),
            "token {bad:?}"
        );
    }
    assert!(!exists(&mut raw, "{f}:t").await);
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("3"));
    // With no mark at all, token 0 is still refused.
    del(&mut raw, MARK).await;
    let v: Value = redis::cmd("EVAL")
        .arg(scripts::FENCE_SET)
        .arg(2)
        .arg(MARK)
        .arg("{f}:t")
        .arg("0")
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        v,
        Value::Array(vec![Value::Int(0), Value::BulkString(b"0".to_vec())])
    );
    assert!(!exists(&mut raw, MARK).await);
}

#[tokio::test]
async fn a_failing_write_does_not_advance_the_mark() {
    let (_server, b, mut raw) = setup().await;
    set(&mut raw, MARK, "3").await;
    set(&mut raw, "{f}:str", "plain").await;
    let f = b.fencer_for(MARK, token(4)).unwrap();
    let err = f.hset("{f}:str", "k", "v").await.unwrap_err();
    assert!(is_wrongtype(&err), "{err:?}");
    assert!(
        !err.is_transient(),
        "WRONGTYPE is permanent: retrying the same write cannot help"
    );
    assert_eq!(err.effect(), lease_core::Effect::NotApplied);
    assert!(!err.is_outcome_unknown());
    assert_eq!(
        get(&mut raw, MARK).await.as_deref(),
        Some("3"),
        "mark unmoved"
    );
    assert_eq!(get(&mut raw, "{f}:str").await.as_deref(), Some("plain"));
    // The same token then writes fine elsewhere.
    assert_eq!(
        f.hset("{f}:h", "k", "v").await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(hget(&mut raw, "{f}:h", "k").await.as_deref(), Some("v"));
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("4"));
}

#[tokio::test]
async fn eval_bodies_run_under_the_fence_and_failures_leave_the_mark() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(2)).unwrap();
    // KEYS[2]/ARGV[2] are the body's first key and argument.
    let body = "redis.call('SET', KEYS[2], ARGV[2]) return 'ignored'";
    assert_eq!(
        f.eval(body, ["{f}:e"], ["hello"]).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, "{f}:e").await.as_deref(), Some("hello"));
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("2"));

    set(&mut raw, "{f}:str", "plain").await;
    let f3 = f.with_token(token(3));
    // A redis.call error aborts the script.
    let err = f3
        .eval(
            "redis.call('HSET', KEYS[2], 'k', 'v')",
            ["{f}:str"],
            Vec::<String>::new(),
        )
        .await
        .unwrap_err();
    assert!(is_wrongtype(&err), "{err:?}");
    // An error reply returned by the body.
    let err = f3
        .eval(
            "return redis.error_reply('ERR refused by body')",
            Vec::<String>::new(),
            Vec::<String>::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RedisLeaseError::Backend(BackendError::Refused(m)) if m.contains("refused by body")),
        "{err:?}"
    );
    // error() raised by the body.
    let err = f3
        .eval("error('boom')", Vec::<String>::new(), Vec::<String>::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RedisLeaseError::Backend(BackendError::Refused(_))),
        "{err:?}"
    );
    assert_eq!(
        get(&mut raw, MARK).await.as_deref(),
        Some("2"),
        "mark unmoved"
    );

    // A stale body does not run.
    let f1 = f.with_token(token(1));
    assert_eq!(f1.eval(body, ["{f}:e"], ["stale"]).await.unwrap(), stale(2));
    assert_eq!(get(&mut raw, "{f}:e").await.as_deref(), Some("hello"));

    // Another fencer of the backend runs the same body (one fixed script for every body).
    let other = b.fencer_for(MARK, token(3)).unwrap();
    assert_eq!(
        other.eval(body, ["{f}:e"], ["again"]).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, "{f}:e").await.as_deref(), Some("again"));
}

#[tokio::test]
async fn eval_survives_script_flush() {
    let (_server, b, mut raw) = setup().await;
    let f = b.fencer_for(MARK, token(1)).unwrap();
    let body = "redis.call('INCR', KEYS[2])";
    assert!(
        f.eval(body, ["{f}:n"], Vec::<String>::new())
            .await
            .unwrap()
            .is_applied()
    );
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        f.eval(body, ["{f}:n"], Vec::<String>::new())
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(f.set("{f}:s", 1).await.unwrap(), FenceOutcome::Applied);
    assert_eq!(get(&mut raw, "{f}:n").await.as_deref(), Some("2"));
}

#[tokio::test]
async fn batches_are_all_or_nothing() {
    let (_server, b, mut raw) = setup().await;
    set(&mut raw, MARK, "3").await;
    set(&mut raw, "{f}:str", "plain").await;
    set(&mut raw, "{f}:gone", "x").await;
    let f = b.fencer_for(MARK, token(4)).unwrap();

    // The third write would fail: nothing is applied, the mark stays.
    let err = f
        .apply_all(vec![
            FencedWrite::set("{f}:a", "1"),
            FencedWrite::del(["{f}:gone"]),
            FencedWrite::hset("{f}:str", "k", "v"),
        ])
        .await
        .unwrap_err();
    assert!(is_wrongtype(&err), "{err:?}");
    assert!(!exists(&mut raw, "{f}:a").await);
    assert!(exists(&mut raw, "{f}:gone").await);
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("3"));

    // Types are tracked through the batch: SET then HSET on one key fails as a whole...
    let err = f
        .apply_all(vec![
            FencedWrite::set("{f}:a", "1"),
            FencedWrite::set("{f}:h", "now a string"),
            FencedWrite::hset("{f}:h", "k", "v"),
        ])
        .await
        .unwrap_err();
    assert!(is_wrongtype(&err), "{err:?}");
    assert!(!exists(&mut raw, "{f}:a").await);
    assert!(!exists(&mut raw, "{f}:h").await);

    // ...while DEL then HSET of a string key is valid.
    assert_eq!(
        f.apply_all(vec![
            FencedWrite::set("{f}:a", "1"),
            FencedWrite::del(["{f}:str", "{f}:gone"]),
            FencedWrite::hset("{f}:str", "k", "v"),
            FencedWrite::hset("{f}:str", "k2", "v2"),
        ])
        .await
        .unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(get(&mut raw, "{f}:a").await.as_deref(), Some("1"));
    assert!(!exists(&mut raw, "{f}:gone").await);
    assert_eq!(hget(&mut raw, "{f}:str", "k2").await.as_deref(), Some("v2"));
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("4"));

    // A stale batch writes nothing.
    let f2 = f.with_token(token(2));
    assert_eq!(
        f2.apply_all(vec![
            FencedWrite::set("{f}:a", "stale"),
            FencedWrite::del(["{f}:str"]),
        ])
        .await
        .unwrap(),
        stale(4)
    );
    assert_eq!(get(&mut raw, "{f}:a").await.as_deref(), Some("1"));
    assert!(exists(&mut raw, "{f}:str").await);

    // An empty batch advances the mark only.
    let f9 = f.with_token(token(9));
    assert_eq!(f9.apply_all(vec![]).await.unwrap(), FenceOutcome::Applied);
    assert_eq!(get(&mut raw, MARK).await.as_deref(), Some("9"));
}

#[tokio::test]
async fn eval_cannot_be_batched_and_is_refused_before_any_round_trip() {
    let (_server, _b, raw) = setup().await;
    let conn = Counting::new(raw);
    let f = RedisFencer::new(conn.clone(), MARK, token(1));
    let err = f
        .apply_all(vec![
            FencedWrite::set("{f}:a", "1"),
            FencedWrite::eval("return 1", Vec::<String>::new(), Vec::<String>::new()),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, RedisLeaseError::InvalidWrite(_)), "{err:?}");
    assert!(!err.is_transient());
    assert_eq!(conn.calls(), 0);
}

#[tokio::test]
async fn an_election_fences_out_the_previous_term_at_once() {
    let (_server, b, mut raw) = setup().await;
    let spec = election("{f}");
    let t1 = acquired_token(&b.acquire(&acq(&spec, "a")).await.unwrap()).unwrap();
    let old = b.fencer(&LeaseSpec::election_mark_key("{f}"), t1);
    assert_eq!(old.mark_key(), MARK);
    assert_eq!(
        old.set("{f}:state", "a").await.unwrap(),
        FenceOutcome::Applied
    );
    // a is deposed; b is elected and has not written anything yet.
    del(&mut raw, "{f}:leader").await;
    let t2 = acquired_token(&b.acquire(&acq(&spec, "b")).await.unwrap()).unwrap();
    assert_eq!(
        old.set("{f}:state", "a late").await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t2)
        }
    );
    assert_eq!(get(&mut raw, "{f}:state").await.as_deref(), Some("a"));
    // FencedResource with an explicit token.
    let new = b.fencer(MARK, t2);
    assert_eq!(
        new.apply(t2, FencedWrite::set("{f}:state", "b"))
            .await
            .unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        new.apply(t1, FencedWrite::set("{f}:state", "a"))
            .await
            .unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t2)
        }
    );
    assert_eq!(get(&mut raw, "{f}:state").await.as_deref(), Some("b"));
}

#[tokio::test]
async fn standalone_fencer_for_the_cli_and_exact_16_digit_marks() {
    let (_server, _b, mut raw) = setup().await;
    let f = RedisFencer::for_election(raw.clone(), "{f}", token(1_234_567_890_123_457));
    assert_eq!(f.mark_key(), MARK);
    assert_eq!(
        f.set("{f}:x", b"bytes".as_slice()).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        get(&mut raw, MARK).await.as_deref(),
        Some("1234567890123457")
    );
    assert_eq!(
        get_bytes(&mut raw, "{f}:x").await.as_deref(),
        Some(&b"bytes"[..])
    );
    // One below is refused, exactly (no double rounding at 16 digits).
    let lower = f.with_token(token(1_234_567_890_123_456));
    assert_eq!(
        lower.set("{f}:x", "no").await.unwrap(),
        stale(1_234_567_890_123_457)
    );
}

#[tokio::test]
async fn a_garbage_mark_is_a_corrupt_key_and_nothing_is_written() {
    let (_server, b, mut raw) = setup().await;
    set(&mut raw, MARK, "not-a-number").await;
    let f = b.fencer_for(MARK, token(1)).unwrap();
    let err = f.set("{f}:x", "v").await.unwrap_err();
    assert!(
        matches!(&err, RedisLeaseError::Backend(BackendError::Corrupt { key, .. }) if key == MARK),
        "{err:?}"
    );
    assert!(!exists(&mut raw, "{f}:x").await);
}
