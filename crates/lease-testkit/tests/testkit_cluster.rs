//! The Redis Cluster primitive.

use lease_testkit::cluster::RedisCluster;

const SCRIPT: &str = "redis.call('SET', KEYS[1], ARGV[1]); \
                      redis.call('SET', KEYS[2], ARGV[1]); \
                      return redis.call('MGET', KEYS[1], KEYS[2])";

#[tokio::test]
async fn accepts_hash_tagged_scripts_and_refuses_cross_slot_ones() {
    let cluster = RedisCluster::start().await.unwrap();
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    assert!(urls.iter().all(|u| u.starts_with("redis://127.0.0.1:")));

    let client = redis::cluster::ClusterClient::new(urls).unwrap();
    let mut conn = client.get_async_connection().await.unwrap();

    let values: Vec<String> = redis::cmd("EVAL")
        .arg(SCRIPT)
        .arg(2)
        .arg("{t}a")
        .arg("{t}b")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(values, ["v", "v"]);

    // "a" and "b" hash to different slots.
    let refused: redis::RedisResult<Vec<String>> = redis::cmd("EVAL")
        .arg(SCRIPT)
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("v")
        .query_async(&mut conn)
        .await;
    // redis-rs' cluster router already refuses it client-side, with the server's code.
    let err = refused.expect_err("a cross-slot script must be refused");
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");

    // Sent straight to a node, the server itself refuses it.
    let node = &cluster.nodes()[0];
    let mut node_conn = node.connection().await.unwrap();
    let refused: redis::RedisResult<Vec<String>> = redis::cmd("EVAL")
        .arg(SCRIPT)
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("v")
        .query_async(&mut node_conn)
        .await;
    let err = refused.expect_err("the node must refuse a cross-slot script");
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
}

#[tokio::test]
async fn every_slot_is_served_and_nodes_are_exposed() {
    let cluster = RedisCluster::start().await.unwrap();
    assert_eq!(cluster.nodes().len(), 3);
    let mut conn = cluster.connection().await.unwrap();
    // Keys spread over many slots all work.
    for i in 0..50 {
        let key = format!("key-{i}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
        let got: i64 = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, i);
    }
    // Each node owns a share of the slots.
    for node in cluster.nodes() {
        let mut node_conn = node.connection().await.unwrap();
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut node_conn)
            .await
            .unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(node.cluster_bus_port().is_some());
    }
}
