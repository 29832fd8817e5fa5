//! Replica acknowledgement (`WAIT`) holds up nothing but the operation that asked for it
//! (issue 27), on real processes: a primary and one replica, the replica frozen with SIGSTOP
//! so no write is acknowledged and every `WAIT` lasts its whole timeout.
//!
//! - While acknowledged operations (a renewal, a fenced write) wait for the frozen replica,
//!   plain operations on the same shared connection — a renewal through a backend without
//!   acknowledgement, an inspection through the acknowledging backend itself — answer at once:
//!   the write and its `WAIT` travel on a dedicated connection. The acknowledged ones still
//!   report *outcome unknown* after the timeout, which proves their `WAIT` followed their own
//!   write (a `WAIT` on a connection that wrote nothing is answered at once, as a success).
//! - Negative control: with `with_ack_connections(0)` (`WAIT` on the shared connection, what
//!   every acknowledged operation did before), the same plain renewal is held up until the
//!   `WAIT` returns — Redis answers nothing else on a connection blocked in `WAIT`.
//! - A dedicated connection whose operation was abandoned during its `WAIT` is closed, not
//!   reused: with one dedicated connection, the next acknowledged operation is not queued
//!   behind the stale `WAIT`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use lease_core::{AcquireOutcome, BackendError, Effect, LeaseBackend, RenewOutcome};
use lease_redis::{
    HealingConnection, MAX_ACK_CONNECTIONS, NotAcknowledged, RedisBackend, ReplicaAck,
};
use lease_testkit::{RedisServer, ServerMode};

/// How long each `WAIT` waits for the frozen replica.
const ACK: Duration = Duration::from_millis(1500);
/// The bound of a plain call while a `WAIT` is pending elsewhere (a round trip on loopback
/// takes well under a millisecond; this leaves room for two busy cores).
const FAST: Duration = Duration::from_millis(500);
/// Bound of every other wait.
const CALL: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?}"))
}

/// A primary and one replica replicating from it (link up).
async fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::builder()
        .mode(ServerMode::Process)
        .config("repl-diskless-sync-delay", "0")
        .start()
        .await
        .expect("primary");
    let replica = RedisServer::builder()
        .mode(ServerMode::Process)
        .config("repl-diskless-sync-delay", "0")
        .config("replicaof", format!("127.0.0.1 {}", primary.port()))
        .start()
        .await
        .expect("replica");
    let mut raw = primary.connection().await.expect("primary connection");
    let deadline = Instant::now() + CALL;
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut raw)
            .await
            .expect("INFO replication");
        if info.contains("connected_slaves:1") && info.contains("state=online") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica never came online: {info}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (primary, replica)
}

/// Waits until `n` clients of the primary are blocked in `WAIT` (the signal that the
/// acknowledged operations reached their `WAIT`).
async fn waits_pending(raw: &mut Conn, n: usize) {
    let deadline = Instant::now() + CALL;
    loop {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(raw)
            .await
            .expect("CLIENT LIST");
        if list.lines().filter(|l| l.contains(" cmd=wait ")).count() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "no {n} WAITs pending: {list}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn not_acknowledged(e: &BackendError) -> &NotAcknowledged {
    assert_eq!(e.effect(), Effect::Unknown, "{e:?}");
    let BackendError::OutcomeUnknown(source) = e else {
        panic!("expected OutcomeUnknown, got {e:?}")
    };
    source
        .downcast_ref::<NotAcknowledged>()
        .unwrap_or_else(|| panic!("expected NotAcknowledged, got {source:?}"))
}

async fn healing(server: &RedisServer) -> HealingConnection {
    HealingConnection::connect(server.client().expect("client"))
        .await
        .expect("healing connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_up_nothing_else_on_the_shared_connection() {
    let (primary, replica) = primary_with_replica().await;
    let mut raw = primary.connection().await.expect("raw");
    let conn = healing(&primary).await;
    let ack = ReplicaAck::new(1, ACK).unwrap();
    let acked = RedisBackend::new(conn.clone()).with_replica_ack(ack);
    let plain = RedisBackend::new(conn.clone());

    // The replica is live: acknowledged grants succeed.
    let spec = election("{acked}");
    let granted = bounded("acquire", acked.acquire(&acq(&spec, "a")))
        .await
        .expect("acknowledged by the replica");
    let token = acquired_token(&granted).expect("granted");
    let other = lock(&["plain"], None);
    assert!(matches!(
        bounded("plain acquire", plain.acquire(&acq(&other, "p"))).await,
        Ok(AcquireOutcome::Acquired { .. })
    ));

    // SIGSTOP: the replica acknowledges nothing (the kit kills it, stopped or not, on drop).
    replica.pause().await.expect("SIGSTOP the replica");
    let started = Instant::now();
    let renewal = tokio::spawn({
        let acked = acked.clone();
        let spec = spec.clone();
        async move { acked.renew(&renew(&spec, "a")).await }
    });
    let write = tokio::spawn({
        let fencer = acked.election_fencer("{acked}", token).unwrap();
        async move { fencer.set("{acked}:state", "x").await }
    });
    waits_pending(&mut raw, 2).await;

    // Both WAITs are pending: the shared connection still answers at once.
    let t = Instant::now();
    assert_eq!(
        bounded("plain renew", plain.renew(&renew(&other, "p")))
            .await
            .unwrap(),
        RenewOutcome::Renewed
    );
    let plain_took = t.elapsed();
    let t = Instant::now();
    let info = bounded("inspect", acked.inspect(&other)).await.unwrap();
    let inspect_took = t.elapsed();
    assert!(info.holder.is_some(), "{info:?}");
    eprintln!(
        "while two WAITs were pending: plain renewal {plain_took:?}, inspection {inspect_took:?}"
    );
    assert!(
        plain_took < FAST && inspect_took < FAST,
        "a plain renewal took {plain_took:?}, an inspection {inspect_took:?}, while WAITs were \
         pending on other connections"
    );

    // The acknowledged operations waited their whole timeout and are unknown, not done.
    let e = bounded("acked renew", renewal)
        .await
        .unwrap()
        .expect_err("no replica acknowledged the renewal");
    assert_eq!(not_acknowledged(&e).acknowledged, 0);
    let e = bounded("acked write", write)
        .await
        .unwrap()
        .expect_err("no replica acknowledged the write");
    assert!(e.is_outcome_unknown(), "{e:?}");
    assert!(started.elapsed() >= ACK, "{:?}", started.elapsed());
    assert_eq!(get(&mut raw, "{acked}:state").await.as_deref(), Some("x"));
    replica.resume().await.expect("SIGCONT the replica");
}

/// The negative control: the same scenario with `WAIT` on the shared connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_wait_on_the_shared_connection_holds_up_everything_behind_it() {
    let (primary, replica) = primary_with_replica().await;
    let mut raw = primary.connection().await.expect("raw");
    let conn = healing(&primary).await;
    let ack = ReplicaAck::new(1, ACK).unwrap();
    let shared = RedisBackend::new(conn.clone())
        .with_replica_ack(ack)
        .with_ack_connections(0)
        .unwrap();
    let plain = RedisBackend::new(conn.clone());
    let spec = election("{shared}");
    bounded("acquire", shared.acquire(&acq(&spec, "a")))
        .await
        .expect("acknowledged by the replica");
    let other = lock(&["plain"], None);
    bounded("plain acquire", plain.acquire(&acq(&other, "p")))
        .await
        .unwrap();

    // SIGSTOP: the replica acknowledges nothing (the kit kills it, stopped or not, on drop).
    replica.pause().await.expect("SIGSTOP the replica");
    let renewal = tokio::spawn({
        let shared = shared.clone();
        let spec = spec.clone();
        async move { shared.renew(&renew(&spec, "a")).await }
    });
    waits_pending(&mut raw, 1).await;
    let t = Instant::now();
    assert_eq!(
        bounded("plain renew", plain.renew(&renew(&other, "p")))
            .await
            .unwrap(),
        RenewOutcome::Renewed
    );
    let plain_took = t.elapsed();
    eprintln!("behind a WAIT on the shared connection: plain renewal {plain_took:?}");
    assert!(
        plain_took >= ACK / 2,
        "on the shared connection a plain renewal waits for the WAIT ahead of it \
         (took {plain_took:?})"
    );
    let e = bounded("acked renew", renewal)
        .await
        .unwrap()
        .expect_err("no replica acknowledged");
    not_acknowledged(&e);
    replica.resume().await.expect("SIGCONT the replica");
}

/// An operation abandoned during its `WAIT` does not leave its connection to the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_abandoned_during_wait_is_not_reused() {
    let (primary, replica) = primary_with_replica().await;
    let mut raw = primary.connection().await.expect("raw");
    let conn = healing(&primary).await;
    let one = RedisBackend::new(conn)
        .with_replica_ack(ReplicaAck::new(1, ACK).unwrap())
        .with_ack_connections(1)
        .unwrap();
    let spec = election("{one}");
    bounded("acquire", one.acquire(&acq(&spec, "a")))
        .await
        .expect("acknowledged by the replica");

    // SIGSTOP: the replica acknowledges nothing (the kit kills it, stopped or not, on drop).
    replica.pause().await.expect("SIGSTOP the replica");
    let abandoned = tokio::spawn({
        let one = one.clone();
        let spec = spec.clone();
        async move { one.renew(&renew(&spec, "a")).await }
    });
    waits_pending(&mut raw, 1).await;
    abandoned.abort();
    let _ = abandoned.await;
    // A renewal of a lease not held writes nothing and sends no WAIT: on a fresh dedicated
    // connection it answers at once; on the abandoned one it would queue behind the WAIT.
    let t = Instant::now();
    let outcome = bounded("renew", one.renew(&renew(&election("{one-other}"), "b")))
        .await
        .unwrap();
    let took = t.elapsed();
    eprintln!("after an abandoned WAIT: the next acknowledged-path call took {took:?}");
    assert_eq!(outcome, RenewOutcome::NotHeld);
    assert!(
        took < FAST,
        "queued behind the abandoned WAIT? took {took:?}"
    );
    replica.resume().await.expect("SIGCONT the replica");
}

#[tokio::test]
async fn the_number_of_dedicated_connections_is_bounded() {
    let conn =
        HealingConnection::lazy(redis::Client::open("redis://127.0.0.1:1/").unwrap()).unwrap();
    let b = RedisBackend::new(conn);
    assert_eq!(b.ack_connections(), lease_redis::DEFAULT_ACK_CONNECTIONS);
    assert!(b.clone().with_ack_connections(MAX_ACK_CONNECTIONS).is_ok());
    assert!(b.with_ack_connections(MAX_ACK_CONNECTIONS + 1).is_err());
}
