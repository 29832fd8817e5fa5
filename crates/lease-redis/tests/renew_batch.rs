//! `RedisBackend::renew_many` against a real Redis: a batch of renewals judges every lease
//! alone (held, another owner's, absent, a key of the wrong type, multi-key leases), spans
//! several script calls in one pipeline, survives a flushed script cache (NOSCRIPT → EVAL), and
//! costs one script call per chunk at the server.

mod common;

use std::sync::Arc;

use common::*;
use lease_core::backend::RENEW_BATCH_CHUNK;
use lease_core::{BackendError, LeaseBackend, LeaseSpec, RenewOutcome, RenewRequest};

/// `calls=` of `cmdstat_<name>` in `INFO commandstats`.
async fn calls(conn: &mut Conn, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Sets `key` to `owner` with a 1 s TTL.
async fn hold(conn: &mut Conn, key: &str, owner: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("PX")
        .arg(1_000)
        .query_async(conn)
        .await
        .expect("SET");
}

#[tokio::test]
async fn a_batch_judges_every_lease_alone_across_chunks() {
    let (_server, b, mut raw) = setup().await;
    // Enough leases for three script calls.
    let n = 2 * RENEW_BATCH_CHUNK + 7;
    let mut specs: Vec<Arc<LeaseSpec>> = Vec::new();
    let mut expected: Vec<&str> = Vec::new();
    for i in 0..n {
        let key = format!("k{i}");
        let spec = lock(&[key.as_str()], None);
        match i {
            3 => {
                hold(&mut raw, &key, "b").await; // another owner's
                expected.push("not held");
            }
            40 => expected.push("not held"), // absent
            200 => {
                let _: () = redis::cmd("RPUSH")
                    .arg(&key)
                    .arg("x")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                expected.push("refused");
            }
            _ => {
                hold(&mut raw, &key, "a").await;
                expected.push("renewed");
            }
        }
        specs.push(spec);
    }
    // A multi-key lease held on both keys, and one with a key missing (nothing of it changes).
    hold(&mut raw, "{m}:1", "a").await;
    hold(&mut raw, "{m}:2", "a").await;
    specs.push(lock(&["{m}:1", "{m}:2"], None));
    expected.push("renewed");
    hold(&mut raw, "{p}:1", "a").await;
    specs.push(lock(&["{p}:1", "{p}:2"], None));
    expected.push("not held");

    let reqs: Vec<RenewRequest> = specs.iter().map(|s| renew(s, "a")).collect();
    let refs: Vec<&RenewRequest> = reqs.iter().collect();
    // The first batch finds no script cached: every chunk falls back to EVAL once.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .unwrap();
    let outcomes = b.renew_many(&refs).await;
    assert_eq!(outcomes.len(), refs.len());
    let chunks = refs.len().div_ceil(RENEW_BATCH_CHUNK) as u64;
    assert_eq!(chunks, 3);
    assert_eq!(
        calls(&mut raw, "eval").await,
        chunks,
        "one EVAL per chunk after NOSCRIPT"
    );
    // The renewed keys got the long TTL; the others kept theirs.
    assert!(pttl(&mut raw, "k0").await > 1_000);
    assert!(pttl(&mut raw, "{m}:2").await > 1_000);
    assert!(
        pttl(&mut raw, "k3").await <= 1_000,
        "another owner's key is untouched"
    );
    assert!(
        pttl(&mut raw, "{p}:1").await <= 1_000,
        "a partly held lease is untouched"
    );
    for (i, (got, want)) in outcomes.iter().zip(&expected).enumerate() {
        let seen = match got {
            Ok(RenewOutcome::Renewed) => "renewed",
            Ok(RenewOutcome::NotHeld) => "not held",
            Err(BackendError::Refused(m)) if m.starts_with("WRONGTYPE") => "refused",
            other => panic!("lease {i}: unexpected {other:?}"),
        };
        assert_eq!(seen, *want, "lease {i}");
        // Each answer agrees with a renewal of that lease alone.
        let alone = b.renew(refs[i]).await;
        match (got, &alone) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "lease {i} alone"),
            (Err(a), Err(b)) => assert_eq!(a.effect(), b.effect(), "lease {i} alone"),
            _ => panic!("lease {i}: batch {got:?}, alone {alone:?}"),
        }
    }

    // Cached now: one EVALSHA per chunk, no EVAL, for the whole batch.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .unwrap();
    let again = b.renew_many(&refs).await;
    assert_eq!(again.len(), refs.len());
    assert_eq!(calls(&mut raw, "evalsha").await, chunks);
    assert_eq!(calls(&mut raw, "eval").await, 0);
}

#[tokio::test]
async fn a_batch_on_a_dead_server_is_unavailable_or_unknown_for_every_lease() {
    let (server, b, mut raw) = setup().await;
    let specs: Vec<_> = (0..5).map(|i| lock(&[&format!("d{i}")], None)).collect();
    for i in 0..5 {
        hold(&mut raw, &format!("d{i}"), "a").await;
    }
    let reqs: Vec<RenewRequest> = specs.iter().map(|s| renew(s, "a")).collect();
    let refs: Vec<&RenewRequest> = reqs.iter().collect();
    drop(server);
    let outcomes = tokio::time::timeout(std::time::Duration::from_secs(10), b.renew_many(&refs))
        .await
        .expect("a batch on a dead server answers");
    assert_eq!(outcomes.len(), 5);
    for o in outcomes {
        let e = o.expect_err("no renewal on a dead server");
        assert!(e.is_transient(), "{e}");
    }
}
