//! The fault proxy against a real Redis server.

mod common;

use std::time::Duration;

use common::{ANSWER_WITHIN, NO_ANSWER_WITHIN, connect_and_ping, ping_within};
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn pass_mode_forwards_and_listens_on_loopback() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    assert!(proxy.addr().ip().is_loopback());
    assert_eq!(proxy.upstream(), server.addr());
    assert_eq!(proxy.mode(), Mode::Pass);
    assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    let answer = connect_and_ping(&proxy.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
}

#[tokio::test]
async fn blackhole_times_out_and_pass_works_again_for_new_connections() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut existing = common::connect(&proxy.url()).await.unwrap();
    assert_eq!(
        ping_within(&mut existing, ANSWER_WITHIN)
            .await
            .unwrap()
            .unwrap(),
        "PONG"
    );

    proxy.set_mode(Mode::Blackhole);
    // A new connection is accepted but never answered.
    let answer = connect_and_ping(&proxy.url(), NO_ANSWER_WITHIN).await;
    assert!(
        answer.is_none(),
        "a blackholed new connection answered: {answer:?}"
    );
    // An existing connection gets no answer either.
    let answer = ping_within(&mut existing, NO_ANSWER_WITHIN).await;
    assert!(
        answer.is_none(),
        "a blackholed connection answered: {answer:?}"
    );

    proxy.set_mode(Mode::Pass);
    let answer = connect_and_ping(&proxy.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
    // Documented: held traffic flows again once the partition heals.
    assert_eq!(
        ping_within(&mut existing, ANSWER_WITHIN)
            .await
            .unwrap()
            .unwrap(),
        "PONG"
    );
}

#[tokio::test]
async fn reset_all_drops_live_connections_with_an_rst() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();

    // A raw connection, to observe the RST itself.
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();
    raw.write_all(b"PING\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(ANSWER_WITHIN, raw.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");

    // And a redis-rs connection.
    let mut conn = common::connect(&proxy.url()).await.unwrap();
    assert_eq!(
        ping_within(&mut conn, ANSWER_WITHIN)
            .await
            .unwrap()
            .unwrap(),
        "PONG"
    );
    assert_eq!(proxy.open_connections(), 2);

    proxy.reset_all().await;
    assert_eq!(proxy.open_connections(), 0);

    let read = tokio::time::timeout(ANSWER_WITHIN, raw.read(&mut buf))
        .await
        .unwrap();
    let err = read.expect_err("the proxy must reset, not close gracefully");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");

    let answer = ping_within(&mut conn, ANSWER_WITHIN).await.unwrap();
    assert!(answer.is_err(), "a reset connection answered: {answer:?}");

    // New connections are unaffected.
    let answer = connect_and_ping(&proxy.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
}

#[tokio::test]
async fn latency_mode_still_answers() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    proxy.set_mode(Mode::Latency(Duration::from_millis(50)));
    assert_eq!(proxy.mode(), Mode::Latency(Duration::from_millis(50)));
    let answer = connect_and_ping(&proxy.url(), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
    let mut conn = common::connect(&proxy.url()).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("slow")
        .query_async(&mut conn)
        .await
        .unwrap();
    let value: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "slow");
}

#[tokio::test]
async fn a_proxy_in_front_of_a_password_protected_server() {
    let server = RedisServer::builder()
        .requirepass("pw")
        .start()
        .await
        .unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let answer = connect_and_ping(&server.url_via(proxy.addr()), ANSWER_WITHIN).await;
    assert_eq!(answer.unwrap().unwrap(), "PONG");
}

#[tokio::test]
async fn a_dropped_proxy_stops_listening() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let addr = proxy.addr();
    let mut raw = TcpStream::connect(addr).await.unwrap();
    drop(proxy);
    // The live connection is closed (EOF or reset), never answered.
    raw.write_all(b"PING\r\n").await.ok();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(ANSWER_WITHIN, raw.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Nothing listens any more (the abort completes once the runtime polls it).
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(refused, "the dropped proxy still accepts connections");
}
