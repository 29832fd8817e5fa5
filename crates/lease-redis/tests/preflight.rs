//! The preflight report against real servers: each setting read as the server has it, a
//! refused `CONFIG` or `INFO` is "unknown" (never an error), an unreachable server is an error.

use std::time::Duration;

use lease_core::preflight::{Eviction, Persistence, Replication, StoreRisk};
use lease_core::{BackendError, LeaseBackend};
use lease_redis::RedisBackend;
use lease_testkit::redis::{Persistence as ServerPersistence, RedisServer};

/// Bounds every call to a server in these tests.
const BOUND: Duration = Duration::from_secs(10);

async fn report_of(server: &RedisServer) -> lease_core::preflight::StoreReport {
    let conn = server.connection().await.unwrap();
    tokio::time::timeout(BOUND, RedisBackend::new(conn).preflight())
        .await
        .expect("a reply in time")
        .expect("a report")
}

/// The kit's default server persists nothing: the counter is lost on restart.
#[tokio::test]
async fn no_persistence_is_reported_as_a_risk() {
    let server = RedisServer::start().await.unwrap();
    let report = report_of(&server).await;
    assert_eq!(report.persistence, Persistence::None, "{report:?}");
    assert_eq!(report.replication, Replication::Primary { replicas: 0 });
    assert!(
        matches!(report.eviction, Eviction::Never { .. }),
        "{report:?}"
    );
    assert_eq!(report.risks(), vec![StoreRisk::CounterLostOnRestart]);
    assert!(report.fence_keys_at_risk());
    assert!(!report.is_partial());
}

/// AOF with fsync on every write and no eviction: no known risk.
#[tokio::test]
async fn aof_always_without_eviction_is_safe() {
    let server = RedisServer::builder()
        .persistence(ServerPersistence::AofAlways)
        .start()
        .await
        .unwrap();
    let report = report_of(&server).await;
    assert_eq!(report.persistence, Persistence::EveryWrite, "{report:?}");
    assert!(report.risks().is_empty(), "{report:?}");
    assert!(!report.fence_keys_at_risk());
}

/// AOF every second lags the writes; an `allkeys` policy with a memory limit may evict the
/// fence keys (which have no TTL).
#[tokio::test]
async fn lagging_aof_and_allkeys_eviction_are_risks() {
    let server = RedisServer::builder()
        .persistence(ServerPersistence::AofEverySec)
        .maxmemory("64mb")
        .maxmemory_policy("allkeys-lru")
        .start()
        .await
        .unwrap();
    let report = report_of(&server).await;
    assert_eq!(report.persistence, Persistence::Periodic, "{report:?}");
    assert_eq!(
        report.eviction,
        Eviction::Possible {
            policy: "allkeys-lru".into()
        }
    );
    assert_eq!(
        report.risks(),
        vec![
            StoreRisk::RecentTokensLostOnCrash,
            StoreRisk::FenceKeysEvictable
        ]
    );
}

/// A user without `CONFIG` or `INFO` (a managed service's restrictions): those parts are
/// unknown, with the server's own words in the notes; the report is still a report.
#[tokio::test]
async fn refused_commands_leave_their_part_unknown() {
    let server = RedisServer::start().await.unwrap();
    let mut admin = server.connection().await.unwrap();
    for (user, rules) in [
        ("noconfig", ["+@all", "-config"]),
        ("noinfo", ["+@all", "-info"]),
    ] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">pw")
            .arg("~*")
            .arg(rules[0])
            .arg(rules[1])
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    let client = redis::Client::open(server.url_for_user("noconfig", "pw")).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let report = tokio::time::timeout(BOUND, RedisBackend::new(conn).preflight())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.persistence, Persistence::Unknown, "{report:?}");
    assert_eq!(report.eviction, Eviction::Unknown);
    assert_eq!(report.replication, Replication::Primary { replicas: 0 });
    assert!(report.is_partial());
    assert!(!report.fence_keys_at_risk(), "unknown is never a risk");
    assert!(
        report.notes.iter().any(|n| n.contains("NOPERM")),
        "{:?}",
        report.notes
    );

    let client = redis::Client::open(server.url_for_user("noinfo", "pw")).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let report = tokio::time::timeout(BOUND, RedisBackend::new(conn).preflight())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.persistence, Persistence::None, "{report:?}");
    assert_eq!(report.replication, Replication::Unknown);
    assert!(
        report.notes.iter().any(|n| n.contains("INFO")),
        "{:?}",
        report.notes
    );
}

/// A server that cannot be reached is an error (not an "unknown" report): the caller learns
/// nothing was asked.
#[tokio::test]
async fn an_unreachable_server_is_an_error() {
    let server = RedisServer::start().await.unwrap();
    let conn = server.connection().await.unwrap();
    let backend = RedisBackend::new(conn);
    server.stop().await.unwrap();
    let result = tokio::time::timeout(BOUND, backend.preflight())
        .await
        .expect("the dead connection fails in time");
    let err = result.expect_err("no report from a stopped server");
    assert!(err.is_transient(), "{err}");
    assert!(!matches!(err, BackendError::Refused(_)), "{err}");
}
