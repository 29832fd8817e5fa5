//! TLS against real `redis-server` processes with certificates generated per test (the kit's
//! `TestPki`): connect, elect and fence over `rediss://`; mutual TLS; and each failure (wrong
//! CA, expired certificate, wrong host name, missing client certificate, plain TCP to the TLS
//! port, TLS to the plain port) is a typed error within a bounded time, never a hang.
//!
//! TLS servers run as processes only, whatever `REDLEASE_TEST_SERVERS` says.

mod common;

use std::time::{Duration, Instant};

use common::{EVENTUALLY, config, wait_leader};
use lease_testkit::RedisServer;
use lease_testkit::tls::{ClientAuth, ServerCert, TestPki, Validity};
use redlease::redis::HealingConnection;
use redlease::redis::{ConnectError, RedisBackend, TlsConfig, TlsFailure, connect, connect_tls};
use redlease::{CancellationToken, Elector, LockOptions, Locker};

/// Every connection attempt fails or succeeds well within this (1 s connect timeout, one
/// retry).
const CONNECT_BOUND: Duration = Duration::from_secs(5);

type Result<T> = std::result::Result<T, ConnectError>;

async fn tls_server(cert: &ServerCert, auth: ClientAuth) -> RedisServer {
    let server = RedisServer::builder()
        .tls_with(cert, auth)
        .start()
        .await
        .expect("start redis with TLS");
    eprintln!(
        "TLS server (process mode: TLS servers are processes only) at {:?}",
        server.tls_addr()
    );
    server
}

fn current(pki: &TestPki) -> ServerCert {
    pki.server_cert(&["localhost", "127.0.0.1"], Validity::Current)
        .expect("server certificate")
}

async fn bounded_tls(url: &str, tls: &TlsConfig) -> Result<RedisBackend<HealingConnection>> {
    let started = Instant::now();
    let outcome = tokio::time::timeout(CONNECT_BOUND, connect_tls(url, tls))
        .await
        .expect("connect_tls must not hang");
    assert!(started.elapsed() < CONNECT_BOUND);
    outcome
}

fn refused(outcome: Result<RedisBackend<HealingConnection>>) -> ConnectError {
    match outcome {
        Ok(_) => panic!("the connection should have been refused"),
        Err(e) => e,
    }
}

fn failure_of(outcome: Result<RedisBackend<HealingConnection>>) -> (TlsFailure, String) {
    match outcome {
        Ok(_) => panic!("the connection should have failed"),
        Err(e) => {
            let message = e.to_string();
            (
                e.tls_failure()
                    .unwrap_or_else(|| panic!("not a TLS failure: {e:?}")),
                message,
            )
        }
    }
}

#[tokio::test]
async fn elect_and_fence_over_tls() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::None).await;
    let url = server.tls_url().unwrap();
    let tls = TlsConfig::new().ca_file(pki.ca_file());

    let backend = bounded_tls(&url, &tls).await.expect("TLS connection");
    let elector = Elector::new(backend, config("{tls}", "a", 2_000));
    let shutdown = CancellationToken::new();
    let hold = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let token = tokio::time::timeout(EVENTUALLY, wait_leader(&elector, EVENTUALLY))
        .await
        .expect("elected over TLS");
    let fencer = elector.fencer_for(token);
    let outcome = tokio::time::timeout(EVENTUALLY, fencer.set("{tls}:state", "written"))
        .await
        .expect("bounded")
        .expect("fenced write over TLS");
    assert!(outcome.is_applied());
    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, hold)
        .await
        .expect("hold returns")
        .expect("join")
        .expect("clean shutdown");

    // A fenced lock over TLS, through a second connection (the CA given as PEM bytes).
    let tls = TlsConfig::new().ca_pem(pki.ca_pem());
    let locker = Locker::new(bounded_tls(&url, &tls).await.expect("TLS connection"));
    let lock = tokio::time::timeout(
        EVENTUALLY,
        locker.obtain(
            "{tls}:lock",
            Duration::from_secs(5),
            LockOptions::new().fence_key("{tls}:fence"),
        ),
    )
    .await
    .expect("bounded")
    .expect("lock obtained over TLS");
    assert!(lock.fence_token().is_some());
    tokio::time::timeout(EVENTUALLY, lock.release())
        .await
        .expect("bounded")
        .expect("released");
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::Required).await;
    let url = server.tls_url().unwrap();
    let client = pki.client_cert("redlease-test-client").unwrap();

    let with_cert = TlsConfig::new()
        .ca_file(pki.ca_file())
        .client_identity_files(client.cert_file(), client.key_file());
    let backend = bounded_tls(&url, &with_cert)
        .await
        .expect("mutual TLS with a client certificate");
    let locker = Locker::new(backend);
    let lock = tokio::time::timeout(
        EVENTUALLY,
        locker.obtain("{m}:lock", Duration::from_secs(5), LockOptions::new()),
    )
    .await
    .expect("bounded")
    .expect("lock over mutual TLS");
    tokio::time::timeout(EVENTUALLY, lock.release())
        .await
        .expect("bounded")
        .expect("released");

    let without = TlsConfig::new().ca_file(pki.ca_file());
    let (failure, message) = failure_of(bounded_tls(&url, &without).await);
    assert_eq!(failure, TlsFailure::ClientCertificateRefused, "{message}");

    // A client certificate from another CA is refused the same way.
    let other = TestPki::new().unwrap();
    let stranger = other.client_cert("stranger").unwrap();
    let foreign = TlsConfig::new()
        .ca_file(pki.ca_file())
        .client_identity_pem(stranger.cert_pem(), stranger.key_pem());
    let (failure, message) = failure_of(bounded_tls(&url, &foreign).await);
    assert_eq!(failure, TlsFailure::ClientCertificateRefused, "{message}");
}

#[tokio::test]
async fn a_server_certificate_from_an_unknown_ca_is_refused() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::None).await;
    let other = TestPki::new().unwrap();
    let tls = TlsConfig::new().ca_file(other.ca_file());
    let (failure, message) = failure_of(bounded_tls(&server.tls_url().unwrap(), &tls).await);
    assert_eq!(failure, TlsFailure::UnknownCa, "{message}");
    assert!(message.contains("trusted CA"), "{message}");
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused() {
    let pki = TestPki::new().unwrap();
    let cert = pki
        .server_cert(&["localhost", "127.0.0.1"], Validity::Expired)
        .unwrap();
    let server = tls_server(&cert, ClientAuth::None).await;
    let tls = TlsConfig::new().ca_file(pki.ca_file());
    let (failure, message) = failure_of(bounded_tls(&server.tls_url().unwrap(), &tls).await);
    assert_eq!(failure, TlsFailure::CertificateExpired, "{message}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let pki = TestPki::new().unwrap();
    let cert = pki
        .server_cert(&["redis.example"], Validity::Current)
        .unwrap();
    let server = tls_server(&cert, ClientAuth::None).await;
    let tls = TlsConfig::new().ca_file(pki.ca_file());
    for url in [
        server.tls_url().unwrap(),
        server.tls_url_for_host("localhost").unwrap(),
    ] {
        let (failure, message) = failure_of(bounded_tls(&url, &tls).await);
        assert_eq!(failure, TlsFailure::NameMismatch, "{url}: {message}");
    }
}

#[tokio::test]
async fn plain_tcp_to_the_tls_port_fails_fast_and_says_so() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::None).await;
    let plain_to_tls = format!("redis://{}/", server.tls_addr().unwrap());
    let started = Instant::now();
    let outcome = tokio::time::timeout(CONNECT_BOUND, connect(&plain_to_tls))
        .await
        .expect("a plain client on a TLS port must not hang");
    let (failure, message) = failure_of(outcome);
    assert!(started.elapsed() < CONNECT_BOUND);
    assert!(
        matches!(failure, TlsFailure::PlainTcpToTlsPort | TlsFailure::NotTls),
        "{failure:?}: {message}"
    );
    assert!(message.contains("rediss://"), "{message}");
}

#[tokio::test]
async fn tls_to_the_plain_port_is_not_tls() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::None).await;
    let tls_to_plain = format!("rediss://{}/", server.addr());
    let tls = TlsConfig::new().ca_file(pki.ca_file());
    let (failure, message) = failure_of(bounded_tls(&tls_to_plain, &tls).await);
    assert_eq!(failure, TlsFailure::NotTls, "{message}");
}

#[tokio::test]
async fn bad_configuration_is_refused_before_any_round_trip() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&current(&pki), ClientAuth::None).await;
    let url = server.tls_url().unwrap();
    let missing = TlsConfig::new().ca_file("/nonexistent/ca.pem");
    let e = refused(bounded_tls(&url, &missing).await);
    assert!(matches!(e, ConnectError::TlsConfig(_)), "{e:?}");
    // A key that does not belong to the certificate.
    let a = pki.client_cert("a").unwrap();
    let b = pki.client_cert("b").unwrap();
    let mismatched = TlsConfig::new()
        .ca_file(pki.ca_file())
        .client_identity_pem(a.cert_pem(), b.key_pem());
    let e = refused(bounded_tls(&url, &mismatched).await);
    assert!(matches!(e, ConnectError::TlsConfig(_)), "{e:?}");
    // A plain URL is not a TLS connection.
    let e = refused(bounded_tls(&server.url(), &TlsConfig::new().ca_file(pki.ca_file())).await);
    assert!(matches!(e, ConnectError::InvalidUrl(_)), "{e:?}");
}
