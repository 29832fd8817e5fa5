//! Leader election on a 3-primary Redis Cluster: hash-tagged names work end to end; an
//! untagged name and a cross-slot fenced key are refused with a typed error before any round
//! trip.

mod common;

use common::*;
use lease_testkit::cluster::RedisCluster;
use redlease::TokenScheme;
use redlease::redis::{RedisBackend, RedisLeaseError};
use redlease::{BackendError, CancellationToken, Elector, ElectorError, Role};

/// Script calls (EVAL + EVALSHA) served by every node of the cluster so far.
async fn script_calls(cluster: &RedisCluster) -> u64 {
    let mut total = 0;
    for node in cluster.nodes() {
        let mut conn = node.connection().await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        for line in info.lines() {
            if line.starts_with("cmdstat_eval:") || line.starts_with("cmdstat_evalsha:") {
                let calls = line
                    .split([':', ','])
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                total += calls;
            }
        }
    }
    total
}

#[tokio::test]
async fn hash_tagged_election_works_and_bad_keys_are_refused_without_a_round_trip() {
    let cluster = RedisCluster::start().await.unwrap();
    let a = Elector::new(
        RedisBackend::cluster(cluster.connection().await.unwrap())
            .with_token_scheme(TokenScheme::Counter),
        config("{orders}", "a", 1000),
    );
    let b = Elector::new(
        RedisBackend::cluster(cluster.connection().await.unwrap())
            .with_token_scheme(TokenScheme::Counter),
        config("{orders}", "b", 1000),
    );
    let (sa, sb) = (CancellationToken::new(), CancellationToken::new());
    let ra = {
        let (e, s) = (a.clone(), sa.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ta = wait_leader(&a, EVENTUALLY).await;
    let fencer = a.fencer().unwrap();
    assert!(
        fencer
            .set("{orders}:state", "a")
            .await
            .unwrap()
            .is_applied()
    );
    let rb = {
        let (e, s) = (b.clone(), sb.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&b, EVENTUALLY, "b follows", |r| *r == Role::Follower).await;
    assert_eq!(b.leader().await.unwrap().unwrap().instance_id, "a");

    // A fenced key outside the election's slot: refused before any round trip.
    let before = script_calls(&cluster).await;
    let err = fencer.set("elsewhere", "x").await.unwrap_err();
    assert!(matches!(err, RedisLeaseError::Slot(_)), "{err:?}");
    // An election name without a hash tag: run refuses at once, without contending.
    let untagged = Elector::new(
        RedisBackend::cluster(cluster.connection().await.unwrap())
            .with_token_scheme(TokenScheme::Counter),
        config("orders", "c", 1000),
    );
    let err = untagged.hold(CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(err, ElectorError::Backend(BackendError::Invalid(_))),
        "{err:?}"
    );
    assert_eq!(
        script_calls(&cluster).await,
        before,
        "a refused request reached the cluster"
    );

    // Failover on the cluster: the follower takes over with a greater token.
    sa.cancel();
    ra.await.unwrap().unwrap();
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta);
    let stale = fencer.set("{orders}:state", "late a").await.unwrap();
    assert!(
        !stale.is_applied(),
        "the deposed term is fenced out on the cluster too"
    );
    sb.cancel();
    rb.await.unwrap().unwrap();
}
