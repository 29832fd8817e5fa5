//! Redis Sentinel and replicas, on real processes (1 primary, 2 replicas, 3 sentinels):
//!
//! - a [`SentinelConnection`] follows `SENTINEL FAILOVER`, a killed primary and a paused one:
//!   the call that meets the old primary fails with its truthful effect, later calls reach the
//!   new primary, and clock-floored tokens keep rising;
//! - [`ReplicaAck`]: with the replication links cut, a grant, a renewal and a fenced write are
//!   reported as *outcome unknown* (applied on the primary, not on enough replicas), never as
//!   success; with the links restored they succeed again; asking for more replicas than exist
//!   is never acknowledged (the negative control of the check itself).

mod common;

use std::time::{Duration, Instant};

use common::*;
use lease_core::{AcquireOutcome, BackendError, Effect, LeaseBackend, RenewOutcome, Token};
use lease_redis::{NotAcknowledged, RedisBackend, ReplicaAck, SentinelConnection};
use lease_testkit::sentinel::SentinelGroup;

/// Bound of every wait for the topology (failover, settle).
const TOPOLOGY: Duration = Duration::from_secs(60);
/// Bound of one backend call in these tests (the driver's role).
const CALL: Duration = Duration::from_secs(5);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?}"))
}

/// Acquires `spec` for `who` until granted (each attempt bounded), as the driver would retry
/// after a failover; returns the token and how many attempts failed first.
async fn acquire_until_granted(
    b: &RedisBackend<SentinelConnection>,
    spec: &std::sync::Arc<lease_core::LeaseSpec>,
    who: &str,
) -> (Token, usize) {
    let deadline = Instant::now() + TOPOLOGY;
    let mut failures = 0;
    let mut last = String::new();
    loop {
        match tokio::time::timeout(CALL, b.acquire(&acq(spec, who))).await {
            Ok(Ok(AcquireOutcome::Acquired { token: Some(t), .. })) => return (t, failures),
            Ok(Ok(other)) => panic!("unexpected {other:?}"),
            Ok(Err(e)) => {
                assert!(e.is_transient(), "a failover error must be transient: {e}");
                failures += 1;
                let now = format!("{e:?}");
                if now != last {
                    eprintln!("acquire failed: {now}");
                    last = now;
                }
            }
            Err(_) => {
                failures += 1;
                last = "no answer within the call bound".to_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no grant within {TOPOLOGY:?} ({failures} failures; last: {last})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn connect(group: &SentinelGroup) -> SentinelConnection {
    bounded(
        "connect through the sentinels",
        SentinelConnection::connect(group.sentinel_urls(), group.name()),
    )
    .await
    .expect("connect through the sentinels")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_forced_failover_and_tokens_keep_rising() {
    let group = SentinelGroup::start("forced")
        .await
        .expect("start the group");
    let conn = connect(&group).await;
    let first = group.primary_index().await.unwrap();
    assert_eq!(
        conn.primary_address(),
        Some(group.server(first).unwrap().addr().to_string())
    );
    let b = RedisBackend::new(conn.clone());
    let spec = election("{sentinel-forced}");
    let (t1, _) = acquire_until_granted(&b, &spec, "a").await;

    group.failover().await.expect("SENTINEL FAILOVER");
    let second = group
        .wait_new_primary(first, TOPOLOGY)
        .await
        .expect("a new primary");
    // Until the sentinels reconfigure it, the old primary still accepts writes from clients
    // connected to it (a write there is lost once it becomes a replica: what replica
    // acknowledgement guards against). Once it is a replica, the first call meets READONLY
    // (not applied) and the next one follows the sentinels.
    assert_eq!(group.wait_settled(TOPOLOGY).await.unwrap(), second);
    // The demoted primary answers READONLY: refused, provably not applied, and transient.
    let first_call = bounded("acquire", b.acquire(&acq(&spec, "a"))).await;
    if let Err(e) = &first_call {
        assert_eq!(e.effect(), Effect::NotApplied, "{e}");
        assert!(e.is_transient(), "{e}");
    }
    let (t2, _) = acquire_until_granted(&b, &spec, "a").await;
    assert!(
        t2 > t1,
        "tokens keep rising across the failover: {t2} after {t1}"
    );
    assert_eq!(
        conn.primary_address(),
        Some(group.server(second).unwrap().addr().to_string()),
        "the connection follows the primary the sentinels name"
    );
    assert!(conn.discoveries() >= 2, "{}", conn.discoveries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_killed_primary_and_a_paused_one() {
    let group = SentinelGroup::start("killed")
        .await
        .expect("start the group");
    let conn = connect(&group).await;
    let b = RedisBackend::new(conn.clone());
    let spec = election("{sentinel-killed}");
    let (t1, _) = acquire_until_granted(&b, &spec, "a").await;

    // kill -9: the sentinels notice after down-after (1 s) and promote a replica.
    let first = group.primary_index().await.unwrap();
    group.server(first).unwrap().kill().await.unwrap();
    let second = group
        .wait_new_primary(first, TOPOLOGY)
        .await
        .expect("a new primary after the kill");
    let (t2, failures) = acquire_until_granted(&b, &spec, "a").await;
    assert!(t2 > t1, "{t2} after {t1}");
    assert!(failures >= 1 || conn.discoveries() >= 2);
    assert_eq!(
        conn.primary_address(),
        Some(group.server(second).unwrap().addr().to_string())
    );

    // SIGSTOP: calls to the paused primary get no reply; the caller's timeout abandons them,
    // which drops the connection, and later calls reach the primary promoted meanwhile.
    group.server(second).unwrap().pause().await.unwrap();
    let abandoned =
        tokio::time::timeout(Duration::from_millis(300), b.acquire(&acq(&spec, "c"))).await;
    assert!(
        abandoned.is_err(),
        "a paused primary cannot answer: {abandoned:?}"
    );
    let third = group
        .wait_new_primary(second, TOPOLOGY)
        .await
        .expect("a new primary after the pause");
    let (t3, _) = acquire_until_granted(&b, &election("{sentinel-paused}"), "c").await;
    assert!(t3 > t2, "{t3} after {t2}");
    assert_eq!(
        conn.primary_address(),
        Some(group.server(third).unwrap().addr().to_string())
    );
    group.server(second).unwrap().resume().await.unwrap();
}

fn not_acknowledged(e: &BackendError) -> &NotAcknowledged {
    let BackendError::OutcomeUnknown(source) = e else {
        panic!("expected an unknown outcome, got {e:?}");
    };
    source
        .downcast_ref::<NotAcknowledged>()
        .unwrap_or_else(|| panic!("expected NotAcknowledged, got {source:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ack_turns_unreplicated_writes_into_unknown_outcomes() {
    let group = SentinelGroup::builder("ack")
        .replication_proxy(true)
        .start()
        .await
        .expect("start the group");
    let conn = connect(&group).await;
    let ack = ReplicaAck::new(2, Duration::from_millis(200)).unwrap();
    let b = RedisBackend::new(conn.clone()).with_replica_ack(ack);
    let mut raw = group.server(0).unwrap().connection().await.unwrap();

    // Both replicas connected: granted, renewed, written.
    let spec = election("{ack}");
    let granted = bounded("acquire", b.acquire(&acq(&spec, "a")))
        .await
        .expect("acknowledged by both replicas");
    let Some(t1) = acquired_token(&granted) else {
        panic!("not granted: {granted:?}")
    };
    assert_eq!(
        bounded("renew", b.renew(&renew(&spec, "a"))).await.unwrap(),
        RenewOutcome::Renewed
    );
    let fencer = b.election_fencer("{ack}", t1).unwrap();
    assert!(
        bounded("write", fencer.set("{ack}:state", "one"))
            .await
            .unwrap()
            .is_applied()
    );

    // The replication links are cut: each write is applied on the primary but not
    // acknowledged, so the caller is told "unknown", never "done".
    group.partition_replication(true).await.unwrap();
    let started = Instant::now();
    let e = bounded("renew", b.renew(&renew(&spec, "a")))
        .await
        .expect_err("a renewal no replica holds is not a success");
    assert_eq!(e.effect(), Effect::Unknown);
    let na = not_acknowledged(&e);
    assert_eq!((na.wanted, na.acknowledged), (2, 0), "{na}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let other = election("{ack-other}");
    let e = bounded("acquire", b.acquire(&acq(&other, "b")))
        .await
        .expect_err("a grant no replica holds is not a success");
    not_acknowledged(&e);
    assert!(
        exists(&mut raw, "{ack-other}:leader").await,
        "applied on the primary: the outcome is unknown, not 'not applied'"
    );
    let e = bounded("write", fencer.set("{ack}:state", "two"))
        .await
        .expect_err("a write no replica holds is not a success");
    assert!(e.is_outcome_unknown(), "{e:?}");
    assert_eq!(get(&mut raw, "{ack}:state").await.as_deref(), Some("two"));

    // Without replica acknowledgement the same backend reports success: the check is what
    // made the difference.
    let plain = RedisBackend::new(conn.clone());
    assert!(
        bounded("renew", plain.renew(&renew(&spec, "a")))
            .await
            .is_ok()
    );

    // Links restored: acknowledged again once the replicas caught up.
    group.partition_replication(false).await.unwrap();
    let deadline = Instant::now() + TOPOLOGY;
    loop {
        match bounded("renew", b.renew(&renew(&spec, "a"))).await {
            Ok(RenewOutcome::Renewed) => break,
            Ok(other) => panic!("{other:?}"),
            Err(e) => {
                not_acknowledged(&e);
                assert!(Instant::now() < deadline, "replicas never caught up");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    // Negative control: more replicas than exist are never acknowledged.
    let three = RedisBackend::new(conn)
        .with_replica_ack(ReplicaAck::new(3, Duration::from_millis(100)).unwrap());
    let e = bounded("renew", three.renew(&renew(&spec, "a")))
        .await
        .expect_err("only two replicas exist");
    assert_eq!(not_acknowledged(&e).acknowledged, 2);
}

#[tokio::test]
async fn a_wrong_service_name_is_refused_at_connect() {
    let group = SentinelGroup::builder("named")
        .replicas(1)
        .start()
        .await
        .expect("start the group");
    let started = Instant::now();
    let e = bounded(
        "connect",
        SentinelConnection::connect(group.sentinel_urls(), "no-such-service"),
    )
    .await
    .expect_err("no such service");
    assert!(started.elapsed() < CALL);
    assert!(e.to_string().contains("no-such-service"), "{e}");
}

/// Credentials given in the sentinel URLs reach the primary too (issue 27): the data servers'
/// default user may not run scripts, an ACL user `app` may, on every server and sentinel. With
/// `redis://app:pw@<sentinel>` URLs the grant works, as `app`; it used to be refused with
/// NOPERM, because only the sentinels' addresses were kept and the primary saw the default
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_url_credentials_reach_the_primary() {
    let group = SentinelGroup::start("creds")
        .await
        .expect("start the group");
    let acl = |user: &str, rules: &[&str]| {
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER").arg(user);
        for r in rules {
            c.arg(*r);
        }
        c
    };
    for server in group.servers() {
        let mut conn = server.connection().await.expect("server connection");
        let _: () = acl("app", &["on", ">pw", "~*", "&*", "+@all"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER app");
        let _: () = acl("default", &["-@scripting"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER default");
    }
    for addr in group.sentinel_addrs() {
        let client = redis::Client::open(format!("redis://{addr}/")).expect("sentinel url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("sentinel connection");
        let _: () = acl("app", &["on", ">pw", "+@all"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER app on the sentinel");
    }
    let urls: Vec<String> = group
        .sentinel_addrs()
        .iter()
        .map(|a| format!("redis://app:pw@{a}/"))
        .collect();
    let conn = bounded(
        "connect through the sentinels",
        SentinelConnection::connect(urls, group.name()),
    )
    .await
    .expect("connect through the sentinels as app");
    let b = RedisBackend::new(conn);
    let spec = election("{cred}");
    let granted = bounded("acquire", b.acquire(&acq(&spec, "a")))
        .await
        .expect("the primary accepts app's script");
    assert!(
        matches!(granted, AcquireOutcome::Acquired { .. }),
        "{granted:?}"
    );
    let who: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut b.connection().clone())
        .await
        .expect("ACL WHOAMI");
    assert_eq!(who, "app");

    // Sentinel URLs that disagree on credentials are refused before any round trip.
    let mut mixed = group.sentinel_urls();
    mixed[0] = format!("redis://app:pw@{}/", group.sentinel_addrs()[0]);
    let Err(err) = SentinelConnection::connect(mixed, group.name()).await else {
        panic!("inconsistent sentinel URLs accepted");
    };
    assert_eq!(err.kind(), redis::ErrorKind::InvalidClientConfig, "{err}");
    assert!(!err.to_string().contains("pw"), "{err}");
}

/// The first `laddr=` of a `CLIENT INFO` reply: the server's port this connection reached.
fn local_port(client_info: &str) -> Option<u16> {
    client_info
        .split_whitespace()
        .find_map(|f| f.strip_prefix("laddr="))
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

/// `ACL WHOAMI` and the server port of the data connection of `b`.
async fn who_and_port(b: &RedisBackend<SentinelConnection>) -> (String, Option<u16>) {
    let mut data = b.connection().clone();
    let who: String = bounded(
        "WHOAMI",
        redis::cmd("ACL").arg("WHOAMI").query_async(&mut data),
    )
    .await
    .expect("ACL WHOAMI");
    let info: String = bounded(
        "CLIENT INFO",
        redis::cmd("CLIENT").arg("INFO").query_async(&mut data),
    )
    .await
    .expect("CLIENT INFO");
    (who, local_port(&info))
}

/// Marker the child process prints when it ran (not merely filtered in and returned).
const CHILD_DONE: &str = "tls sentinel child: done";

/// Sentinel over TLS (issue 27), on a group whose servers and sentinels serve TLS and whose
/// sentinels monitor — so name to clients — the primary's **TLS port**, where plaintext cannot
/// work:
///
/// - `rediss://app:pw@<sentinel>` URLs (`SentinelConnection::connect`, the path that used to
///   keep only the addresses) give TLS and the credentials to the sentinels and to the
///   primary: the grant works (the servers' default user may not run scripts), `ACL WHOAMI`
///   says `app`, and `CLIENT INFO` shows the data connection on the primary's TLS port. A URL
///   can only trust the system's roots, so this part runs in a child process of this test
///   binary with `SSL_CERT_FILE` naming the test CA (setting the variable in this
///   multi-threaded process would race the other tests);
/// - the same through a `SentinelClient` given the test CA (`from_client`), in process;
/// - negative controls: plaintext sentinel URLs name the same TLS port, and plaintext to it
///   fails (what `rediss://` sentinel URLs gave the primary before the fix); sentinel URLs that
///   disagree on TLS are refused with `InvalidClientConfig` before any round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_sentinel_urls_give_tls_and_credentials_to_the_primary() {
    use lease_testkit::tls::{TestPki, Validity};

    if !lease_testkit::server::has_tls() {
        eprintln!(
            "SKIP rediss_sentinel_urls_give_tls_and_credentials_to_the_primary: the server is built without TLS"
        );
        return;
    }
    let pki = TestPki::new().expect("test CA");
    let cert = pki
        .server_cert(&["localhost", "127.0.0.1"], Validity::Current)
        .expect("server certificate");
    let group = SentinelGroup::builder("tls")
        .replicas(1)
        .sentinels(2)
        .tls(&cert)
        .start()
        .await
        .expect("start the TLS group");
    let primary = group.primary().await.expect("primary");
    let tls_port = primary.tls_port().expect("the primary serves TLS");
    // An ACL user `app` on every server and sentinel (set over the kit's plain ports); the
    // servers' default user may not run scripts.
    let acl = |user: &str, rules: &[&str]| {
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER").arg(user);
        for r in rules {
            c.arg(*r);
        }
        c
    };
    for server in group.servers() {
        let mut conn = server.connection().await.expect("server connection");
        let _: () = acl("app", &["on", ">pw", "~*", "&*", "+@all"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER app");
        let _: () = acl("default", &["-@scripting"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER default");
    }
    for addr in group.sentinel_addrs() {
        let client = redis::Client::open(format!("redis://{addr}/")).expect("sentinel url");
        let mut conn = bounded(
            "sentinel connection",
            client.get_multiplexed_async_connection(),
        )
        .await
        .expect("sentinel connection");
        let _: () = acl("app", &["on", ">pw", "+@all"])
            .query_async(&mut conn)
            .await
            .expect("ACL SETUSER app on the sentinel");
    }
    let urls: Vec<String> = group
        .sentinel_tls_urls()
        .iter()
        .map(|u| u.replacen("rediss://", "rediss://app:pw@", 1))
        .collect();
    assert_eq!(urls.len(), 2, "{urls:?}");

    // In process: a SentinelClient that trusts the test CA, for both hops.
    let certificates = || redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pki.ca_pem().as_bytes().to_vec()),
    };
    let addrs: Vec<redis::ConnectionAddr> = group
        .sentinel_tls_urls()
        .iter()
        .map(|u| {
            redis::IntoConnectionInfo::into_connection_info(u.as_str())
                .expect("sentinel url")
                .addr()
                .clone()
        })
        .collect();
    let client = redis::sentinel::SentinelClientBuilder::new(
        addrs,
        group.name(),
        redis::sentinel::SentinelServerType::Master,
    )
    .expect("sentinel builder")
    .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure)
    .set_client_to_sentinel_certificates(certificates())
    .set_client_to_sentinel_username("app")
    .set_client_to_sentinel_password("pw")
    .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
    .set_client_to_redis_certificates(certificates())
    .set_client_to_redis_username("app")
    .set_client_to_redis_password("pw")
    .build()
    .expect("sentinel client");
    let verified = RedisBackend::new(SentinelConnection::from_client(
        client,
        group.name(),
        redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None),
    ));
    let spec = election("{tls}");
    let granted = bounded(
        "acquire over verified TLS",
        verified.acquire(&acq(&spec, "a")),
    )
    .await
    .expect("the primary accepts app's script over TLS");
    assert!(
        matches!(granted, AcquireOutcome::Acquired { .. }),
        "{granted:?}"
    );
    assert_eq!(
        who_and_port(&verified).await,
        ("app".to_owned(), Some(tls_port))
    );

    // The URL path, in a child process that trusts the test CA through SSL_CERT_FILE.
    let exe = std::env::current_exe().expect("test binary");
    let child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "tls_sentinel_urls_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SSL_CERT_FILE", pki.ca_file())
        .env("REDLEASE_CHILD_SENTINELS", urls.join(" "))
        .env("REDLEASE_CHILD_SERVICE", group.name())
        .env("REDLEASE_CHILD_TLS_PORT", tls_port.to_string())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .expect("the child test ends in time")
        .expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains(CHILD_DONE), "{text}");

    // Negative control: plaintext sentinels name the same TLS port; plaintext to it fails.
    let plain = tokio::time::timeout(
        CALL,
        SentinelConnection::connect(group.sentinel_urls(), group.name()),
    )
    .await;
    assert!(
        !matches!(plain, Ok(Ok(_))),
        "a plaintext connection to the primary's TLS port worked"
    );

    // Sentinel URLs that disagree on TLS are refused before any round trip.
    let started = Instant::now();
    let mixed = vec![urls[0].clone(), group.sentinel_urls()[1].clone()];
    let Err(err) = SentinelConnection::connect(mixed, group.name()).await else {
        panic!("sentinel URLs that disagree on TLS accepted");
    };
    assert_eq!(err.kind(), redis::ErrorKind::InvalidClientConfig, "{err}");
    assert!(!err.to_string().contains("pw"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(500));
}

/// The child half of `rediss_sentinel_urls_give_tls_and_credentials_to_the_primary` (does
/// nothing unless that test runs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sentinel_urls_child() {
    let Ok(urls) = std::env::var("REDLEASE_CHILD_SENTINELS") else {
        return;
    };
    let service = std::env::var("REDLEASE_CHILD_SERVICE").expect("service");
    let tls_port: u16 = std::env::var("REDLEASE_CHILD_TLS_PORT")
        .expect("port")
        .parse()
        .expect("port number");
    let conn = bounded(
        "connect through the TLS sentinels",
        SentinelConnection::connect(urls.split(' '), &service),
    )
    .await
    .expect("connect through the TLS sentinels as app");
    assert_eq!(
        conn.primary_address(),
        Some(format!("127.0.0.1:{tls_port}")),
        "the sentinels name the primary's TLS port"
    );
    let b = RedisBackend::new(conn);
    let info = bounded("inspect", b.inspect(&election("{tls}")))
        .await
        .expect("app may read over TLS");
    assert_eq!(info.holder.as_deref(), Some("a"));
    let renewed = bounded("renew", b.renew(&renew(&election("{tls}"), "a")))
        .await
        .expect("app may run scripts over TLS");
    assert_eq!(renewed, RenewOutcome::Renewed);
    assert_eq!(who_and_port(&b).await, ("app".to_owned(), Some(tls_port)));
    println!("{CHILD_DONE}");
}
