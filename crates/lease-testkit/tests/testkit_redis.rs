//! The Redis server primitive: start, options, faults and teardown, in whichever
//! mode the environment selects (the CI runs this file in both modes).

mod common;

use common::{ANSWER_WITHIN, NO_ANSWER_WITHIN, connect_and_ping, forced_mode, ping_within};
use lease_testkit::redis::{Persistence, RedisServer, ServerState};
use lease_testkit::{Error, ServerMode};

async fn set(conn: &mut redis::aio::MultiplexedConnection, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap();
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

#[tokio::test]
async fn starts_ready_in_the_selected_mode() {
    let server = RedisServer::start().await.unwrap();
    if let Some(mode) = forced_mode() {
        assert_eq!(server.mode(), mode);
    }
    assert_eq!(server.state(), ServerState::Running);
    assert!(server.addr().ip().is_loopback());
    assert_eq!(server.url(), format!("redis://{}/", server.addr()));
    let mut conn = server.connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    match server.mode() {
        ServerMode::Process => assert!(server.pid().await.is_some()),
        ServerMode::Container => assert!(server.container_id().await.is_some()),
    }
}

#[tokio::test]
async fn a_paused_server_does_not_answer_until_resumed() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connection().await.unwrap();
    assert_eq!(
        ping_within(&mut conn, ANSWER_WITHIN)
            .await
            .unwrap()
            .unwrap(),
        "PONG"
    );

    server.pause().await.unwrap();
    assert_eq!(server.state(), ServerState::Paused);
    let answer = ping_within(&mut conn, NO_ANSWER_WITHIN).await;
    assert!(answer.is_none(), "a paused server answered: {answer:?}");
    let answer = connect_and_ping(&server.url(), NO_ANSWER_WITHIN).await;
    assert!(
        answer.is_none(),
        "a paused server answered a new connection: {answer:?}"
    );

    server.resume().await.unwrap();
    assert_eq!(server.state(), ServerState::Running);
    assert_eq!(
        ping_within(&mut conn, ANSWER_WITHIN)
            .await
            .unwrap()
            .unwrap(),
        "PONG"
    );
    let answer = connect_and_ping(&server.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
}

#[tokio::test]
async fn a_restart_without_persistence_loses_keys() {
    let server = RedisServer::start().await.unwrap();
    assert_eq!(server.persistence(), Persistence::None);
    let port = server.port();
    let mut conn = server.connection().await.unwrap();
    set(&mut conn, "k", "v").await;

    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    let mut conn = server.connection().await.unwrap();
    assert_eq!(get(&mut conn, "k").await, None);
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(size, 0);
}

#[tokio::test]
async fn aof_always_keeps_keys_across_kill_and_restart() {
    let server = RedisServer::builder()
        .persistence(Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let mut conn = server.connection().await.unwrap();
    let appendfsync: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(appendfsync, ["appendfsync", "always"]);
    set(&mut conn, "k", "survives").await;

    server.kill().await.unwrap();
    assert_eq!(server.state(), ServerState::Stopped);
    let answer = connect_and_ping(&server.url(), ANSWER_WITHIN).await;
    assert!(
        !matches!(answer, Some(Ok(_))),
        "a killed server answered: {answer:?}"
    );
    assert!(matches!(server.pause().await, Err(Error::InvalidState(_))));

    server.restart().await.unwrap();
    assert_eq!(server.state(), ServerState::Running);
    let mut conn = server.connection().await.unwrap();
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("survives"));
}

#[tokio::test]
async fn aof_everysec_keeps_keys_across_a_graceful_restart() {
    let server = RedisServer::builder()
        .persistence(Persistence::AofEverySec)
        .start()
        .await
        .unwrap();
    let mut conn = server.connection().await.unwrap();
    set(&mut conn, "k", "kept").await;
    server.stop().await.unwrap();
    server.restart().await.unwrap();
    let mut conn = server.connection().await.unwrap();
    assert_eq!(get(&mut conn, "k").await.as_deref(), Some("kept"));
}

#[tokio::test]
async fn kill_while_paused_then_restart_works() {
    let server = RedisServer::start().await.unwrap();
    server.pause().await.unwrap();
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    let answer = connect_and_ping(&server.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
}

#[tokio::test]
async fn requirepass_and_an_acl_user_work() {
    let server = RedisServer::builder()
        .requirepass("s3cret pass")
        .acl_user("alice", "alice-pw")
        .start()
        .await
        .unwrap();

    // Without credentials: refused.
    let answer = connect_and_ping(&server.url_without_auth(), ANSWER_WITHIN)
        .await
        .expect("the server answers");
    let err = answer.expect_err("PING without AUTH must fail");
    assert!(err.to_string().contains("NOAUTH"), "{err}");

    // The default user with the requirepass password.
    assert!(server.url().contains("s3cret%20pass@"));
    let answer = connect_and_ping(&server.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");

    // The ACL user.
    let client = redis::Client::open(server.acl_user_url().unwrap()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let me: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(me, "alice");

    // A wrong password for the ACL user is refused.
    let answer = connect_and_ping(&server.url_for_user("alice", "wrong"), ANSWER_WITHIN)
        .await
        .expect("the server answers");
    assert!(answer.is_err(), "a wrong password was accepted");
}

#[tokio::test]
async fn maxmemory_policy_and_extra_config_lines_apply() {
    let server = RedisServer::builder()
        .maxmemory("32mb")
        .maxmemory_policy("allkeys-lru")
        .config_line("maxmemory-samples 7")
        .config("hz", "20")
        .start()
        .await
        .unwrap();
    let mut conn = server.connection().await.unwrap();
    for (name, expected) in [
        ("maxmemory-policy", "allkeys-lru"),
        ("maxmemory-samples", "7"),
        ("hz", "20"),
        ("maxmemory", "33554432"),
        ("appendonly", "no"),
        ("save", ""),
    ] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, [name, expected], "CONFIG GET {name}");
    }
}

#[tokio::test]
async fn a_bad_config_line_is_a_typed_error() {
    let result = RedisServer::builder()
        .config_line("maxmemory-policy \"unterminated")
        .start()
        .await;
    assert!(matches!(result, Err(Error::Config(_))), "{result:?}");
}

#[tokio::test]
async fn drop_tears_down_a_paused_server_even_when_the_test_panics() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let server = RedisServer::start().await.unwrap();
        let pid = server.pid().await;
        let container = server.container_id().await;
        let dir = server.data_dir().await;
        server.pause().await.unwrap();
        tx.send((pid, container, dir)).unwrap();
        panic!("deliberate panic while owning a paused server");
    });
    let joined = task.await;
    assert!(joined.unwrap_err().is_panic());
    let (pid, container, dir) = rx.await.unwrap();
    if let Some(pid) = pid {
        assert!(
            !common::redis_process_alive(pid),
            "redis-server {pid} leaked"
        );
    }
    if let Some(dir) = dir {
        assert!(!dir.exists(), "{} leaked", dir.display());
    }
    if let Some(id) = container {
        assert!(!common::container_exists(&id), "container {id} leaked");
    }
}

#[tokio::test]
async fn restart_keeps_the_address_and_waits_for_readiness() {
    let server = RedisServer::builder()
        .persistence(Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let addr = server.addr();
    let mut conn = server.connection().await.unwrap();
    // Enough keys that loading the AOF is not instantaneous.
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.cmd("SET").arg(format!("key:{i}")).arg(i).ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(server.addr(), addr);
    // restart() returned only once PING answers PONG (not LOADING): every key is there.
    let mut conn = server.connection().await.unwrap();
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(size, 2000);
}
