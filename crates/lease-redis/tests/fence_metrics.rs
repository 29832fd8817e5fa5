//! Feature `metrics`: each fenced write is counted by outcome, read back from the `metrics`
//! project's debugging recorder. A real server.

use std::collections::HashMap;
use std::time::Duration;

use lease_core::Token;
use lease_redis::RedisFencer;
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
}
