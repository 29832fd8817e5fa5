//! Feature `metrics`: each fenced write (lock- and permit-fenced) is counted by outcome, read back from the `metrics`
//! project's debugging recorder. A real server.

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;

use lease_core::semaphore::{
    PermitCount, PermitFencing, PermitRequest, PermitWriteOutcome, semaphore_spec,
};
use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, Owner, ReleaseRequest, Token, Ttl};
use lease_redis::{RedisBackend, RedisFencer};
use lease_testkit::redis::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn fenced_writes_are_counted_by_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let server = RedisServer::start().await.unwrap();
            let conn = server.connection().await.unwrap();
            let t = |n| Token::new(n).unwrap();
            let bound = Duration::from_secs(10);
            let newer = RedisFencer::for_election(conn.clone(), "jobs", t(2));
            let older = newer.with_token(t(1));
            let applied = tokio::time::timeout(bound, newer.set("jobs:x", "2"))
                .await
                .unwrap();
            assert!(applied.unwrap().is_applied());
            let stale = tokio::time::timeout(bound, older.set("jobs:x", "1"))
                .await
                .unwrap();
            assert!(!stale.unwrap().is_applied());
            // A wrong type is refused by the server: not applied.
            let _: () = redis::cmd("LPUSH")
                .arg("jobs:list")
                .arg("v")
                .query_async(&mut server.connection().await.unwrap())
                .await
                .unwrap();
            let refused = tokio::time::timeout(bound, newer.hset("jobs:list", "f", "v"))
                .await
                .unwrap();
            assert!(refused.is_err());

            // Permit-fenced writes, under the semaphore's name: applied, stale (an older
            // token of the same owner), not current (after the release).
            let backend = RedisBackend::new(conn.clone());
            let spec = Arc::new(semaphore_spec("{deploys}", None).unwrap());
            let owner = Owner::new("w1").unwrap();
            let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
            let ask = AcquireRequest::new(Arc::clone(&spec), owner.clone(), ttl);
            let req = PermitRequest::new(ask, PermitCount::new(2).unwrap());
            let token = match tokio::time::timeout(bound, backend.acquire_permit(&req))
                .await
                .unwrap()
                .unwrap()
            {
                AcquireOutcome::Acquired { token: Some(t), .. } => t,
                other => panic!("{other:?}"),
            };
            let fencer = backend.permit_fencer(&spec, &owner, token).unwrap();
            let applied = tokio::time::timeout(bound, fencer.set("{deploys}:x", "1"))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(applied, PermitWriteOutcome::Applied);
            let older = fencer.with_token(Token::new(token.get() - 1).unwrap());
            let stale = tokio::time::timeout(bound, older.set("{deploys}:x", "0"))
                .await
                .unwrap()
                .unwrap();
            assert!(
                matches!(stale, PermitWriteOutcome::Stale { .. }),
                "{stale:?}"
            );
            let released = tokio::time::timeout(
                bound,
                backend.release_permit(&ReleaseRequest::new(Arc::clone(&spec), owner.clone())),
            )
            .await
            .unwrap();
            assert!(released.is_ok(), "{released:?}");
            let gone = tokio::time::timeout(bound, fencer.set("{deploys}:x", "2"))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(gone, PermitWriteOutcome::NotCurrent);
        })
    });
    let counts: HashMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => {
                let key = key.key();
                let mut labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                Some((format!("{}{{{}}}", key.name(), labels.join(",")), n))
            }
            _ => None,
        })
        .collect();
    let get = |outcome: &str| {
        counts
            .get(&format!(
                "redlease_fenced_writes_total{{fence=jobs,outcome={outcome}}}"
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        (get("applied"), get("stale"), get("not_applied")),
        (1, 1, 1),
        "{counts:?}"
    );
    let permit = |outcome: &str| {
        counts
            .get(&format!(
                "redlease_fenced_writes_total{{fence={{deploys}},outcome={outcome}}}"
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        (permit("applied"), permit("stale"), permit("not_current")),
        (1, 1, 1),
        "{counts:?}"
    );
}
