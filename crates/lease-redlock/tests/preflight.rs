//! The quorum's preflight report is its least durable node's: real servers, one of them with
//! lagging persistence and one that will not disclose its settings.

mod common;

use common::*;
use lease_core::LeaseBackend;
use lease_core::preflight::{Persistence, Replication, Setting, StoreRisk};
use lease_testkit::redis::{Persistence as ServerPersistence, RedisServer};

#[tokio::test]
async fn the_quorum_reports_its_least_durable_node() {
    let mut servers = Vec::new();
    for persistence in [
        ServerPersistence::AofAlways,
        ServerPersistence::AofAlways,
        ServerPersistence::AofEverySec,
    ] {
        servers.push(
            RedisServer::builder()
                .persistence(persistence)
                .start()
                .await
                .unwrap(),
        );
    }
    let backend = redlock(direct_nodes(&servers).await);
    let report = must_complete("preflight", backend.preflight())
        .await
        .unwrap();
    assert_eq!(report.persistence, Persistence::Periodic, "{report:?}");
    assert_eq!(report.replication, Replication::Primary { replicas: 0 });
    assert_eq!(report.risks(), vec![StoreRisk::RecentTokensLostOnCrash]);

    // A node that refuses CONFIG leaves nothing unsafe unknown when another node already
    // reported the risk; with every node durable but one undisclosed, the part is unknown.
    let mut admin = servers[2].connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("always")
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-config")
        .query_async(&mut admin)
        .await
        .unwrap();
    let report = must_complete("preflight", backend.preflight())
        .await
        .unwrap();
    assert_eq!(report.persistence, Persistence::Unknown, "{report:?}");
    // Unknown is never safe: the node that would not say is a risk of its own.
    assert_eq!(
        report.risks(),
        vec![
            StoreRisk::Unconfirmed(Setting::Persistence),
            StoreRisk::Unconfirmed(Setting::Eviction)
        ],
        "{report:?}"
    );
    assert!(report.fence_keys_at_risk());
    assert!(
        report.notes.iter().any(|n| n.contains("NOPERM")),
        "{:?}",
        report.notes
    );
}
