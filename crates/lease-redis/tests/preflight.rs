//! The preflight report against real servers: each setting read as the server has it, a
//! refused `CONFIG` or `INFO` is "unknown" (never an error), an unreachable server is an error.

use std::time::Duration;

use lease_core::preflight::{Eviction, Persistence, Replication, Setting, StoreRisk};
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

/// The report names the server and its version, as the server running this test reports
/// them (`REDLEASE_SERVER` picks Redis 7.0, Redis 6.2 or Valkey 9: every one answers the
/// preflight in full, Redis 6.2 one `CONFIG GET` parameter at a time), and the clocks of a
/// server on this host agree.
#[tokio::test]
async fn the_report_names_the_server_and_reads_every_setting() {
    let server = RedisServer::builder()
        .persistence(ServerPersistence::AofAlways)
        .start()
        .await
        .unwrap();
    let report = report_of(&server).await;
    let info = report.server.clone().expect("INFO server read");
    assert!(
        matches!(info.product.as_str(), "redis" | "valkey"),
        "{info:?}"
    );
    let (major, _, _) = info.version_numbers().expect("a numeric version");
    if let Some(expected) = lease_testkit::server::expected_version() {
        assert!(info.version.starts_with(&expected), "{info} vs {expected}");
        assert_eq!(info.product, lease_testkit::server::expected_product());
    }
    assert!(major >= 6, "{info}");
    assert_eq!(report.persistence, Persistence::EveryWrite, "{report:?}");
    assert!(
        matches!(report.eviction, Eviction::Never { .. }),
        "{report:?}"
    );
    assert!(!report.is_partial(), "{report:?}");
    let skew = report.clock_skew.expect("TIME read");
    assert!(skew.offset_ms.abs() < 1_000, "{skew}");
    assert!(report.confirmed_safe(), "{:?}", report.risks());
    assert!(
        report.to_string().starts_with(&info.to_string()),
        "{report}"
    );
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
    // Unknown is never safe: each undisclosed part is a risk of its own.
    assert_eq!(
        report.risks(),
        vec![
            StoreRisk::Unconfirmed(Setting::Persistence),
            StoreRisk::Unconfirmed(Setting::Eviction)
        ]
    );
    assert!(report.fence_keys_at_risk());
    assert!(!report.confirmed_safe());
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
