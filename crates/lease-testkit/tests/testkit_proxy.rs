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

/// Latency mode delays the request by `d` on its way to the server and the reply by `d`
/// on its way back: the server's clock (`TIME`) is read at least `d` after the request was
/// sent, the reply arrives at least `d` after that, and the round trip, though at least
/// 2·d, stays well below 4·d (a delay per direction, not per hop or per chunk twice).
#[tokio::test]
async fn latency_mode_delays_each_direction_once() {
    const D: Duration = Duration::from_millis(250);
    // Generous for a loopback round trip on a busy machine, yet below 4·d.
    const SLACK: Duration = Duration::from_millis(450);
    // TIME has microsecond resolution; the clocks are the same kernel clock.
    const CLOCK_RESOLUTION: Duration = Duration::from_millis(1);

    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();

    // Baseline in pass mode (this also connects the proxy upstream).
    let (pass_rtt, _) = timed_time(&mut raw).await;
    assert!(pass_rtt < D, "a pass-mode round trip took {pass_rtt:?}");

    proxy.set_mode(Mode::Latency(D));
    let (rtt, to_server, to_client) = {
        let sent = std::time::SystemTime::now();
        let (rtt, server_time) = timed_time(&mut raw).await;
        let received = std::time::SystemTime::now();
        (
            rtt,
            server_time.duration_since(sent).unwrap_or_default(),
            received.duration_since(server_time).unwrap_or_default(),
        )
    };
    eprintln!("latency {D:?}: round trip {rtt:?} (to Redis {to_server:?}, back {to_client:?})");
    assert!(
        to_server + CLOCK_RESOLUTION >= D,
        "the request reached Redis {to_server:?} after it was sent (latency {D:?})"
    );
    assert!(
        to_client + CLOCK_RESOLUTION >= D,
        "the reply arrived {to_client:?} after Redis read its clock (latency {D:?})"
    );
    assert!(
        rtt >= 2 * D,
        "a round trip took {rtt:?}, less than twice the latency {D:?}"
    );
    assert!(
        rtt < 2 * D + SLACK,
        "a round trip took {rtt:?}, more than 2 x {D:?} + {SLACK:?}"
    );

    // Back to pass: no delay any more on the same connection.
    proxy.set_mode(Mode::Pass);
    let (rtt, _) = timed_time(&mut raw).await;
    assert!(rtt < D, "after Latency -> Pass a round trip took {rtt:?}");
}

/// Sends `TIME` on a raw connection and reads the whole reply (bounded): the round trip
/// and Redis' clock when it executed the command.
async fn timed_time(raw: &mut TcpStream) -> (Duration, std::time::SystemTime) {
    let start = std::time::Instant::now();
    raw.write_all(b"TIME\r\n").await.unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 128];
    // *2 $len secs $len micros: five CRLF-terminated lines.
    while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
        let n = tokio::time::timeout(ANSWER_WITHIN, raw.read(&mut buf))
            .await
            .expect("TIME answered")
            .expect("read");
        assert!(n > 0, "the proxy closed the connection");
        reply.extend_from_slice(&buf[..n]);
    }
    let rtt = start.elapsed();
    let text = String::from_utf8(reply).expect("RESP text");
    let fields: Vec<u64> = text
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with(['*', '$']))
        .map(|l| l.parse().expect("a number"))
        .collect();
    assert_eq!(fields.len(), 2, "TIME reply: {text:?}");
    let at =
        std::time::UNIX_EPOCH + Duration::from_secs(fields[0]) + Duration::from_micros(fields[1]);
    (rtt, at)
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
