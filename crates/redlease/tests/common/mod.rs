//! Shared helpers for the facade's integration tests (real Redis from the test kit).
#![allow(dead_code, unreachable_pub)]

pub mod locks;

use redlease::TokenScheme;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use redlease::Op;
use redlease::redis::RedisBackend;
use redlease::{BackendError, ElectionConfig, Elector, Observer, Role, StepDownReason, Token};

pub type Backend = RedisBackend<MultiplexedConnection>;

pub async fn redis() -> RedisServer {
    RedisServer::start().await.expect("start redis")
}

pub async fn backend(server: &RedisServer) -> Backend {
    RedisBackend::new(server.connection().await.expect("connect"))
        .with_token_scheme(TokenScheme::Counter)
}

pub async fn backend_at(url: &str) -> Backend {
    let client = redis::Client::open(url).expect("url");
    RedisBackend::new(
        client
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
    )
    .with_token_scheme(TokenScheme::Counter)
}

pub fn config(name: &str, id: &str, ttl_ms: u64) -> ElectionConfig {
    ElectionConfig::builder(name, id)
        .ttl(Duration::from_millis(ttl_ms))
        .build()
        .expect("valid config")
}

/// Records observer calls in order.
#[derive(Default, Clone)]
pub struct Recorder(pub Arc<Mutex<Vec<String>>>);

impl Recorder {
    pub fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Observer for Recorder {
    fn on_elected(&self, token: Token) {
        self.0.lock().unwrap().push(format!("elected {token}"));
    }
    fn on_stepped_down(&self, token: Token, reason: StepDownReason) {
        self.0
            .lock()
            .unwrap()
            .push(format!("stepped_down {token} {reason:?}"));
    }
    fn on_follower(&self, holder: Option<&str>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("follower {}", holder.unwrap_or("?")));
    }
    fn on_error(&self, op: Op, error: &BackendError) {
        let mut v = self.0.lock().unwrap();
        v.push(format!("error {op:?}"));
        if let BackendError::TokenRegression { previous, minted } = error {
            v.push(format!("regression {previous} -> {minted}"));
        }
    }
    fn on_store_lost(&self, loss: &redlease::StoreLoss) {
        let what = match loss {
            redlease::StoreLoss::NewEpoch { .. } => "new epoch",
            _ => "counter behind",
        };
        self.0.lock().unwrap().push(format!("store lost: {what}"));
    }
    fn on_refused(&self, op: Op, error: &BackendError) {
        self.0
            .lock()
            .unwrap()
            .push(format!("refused {op:?} {}", error.is_transient()));
    }
}

/// Waits (bounded) for a role matching `pred`; panics with `what` if it never comes.
pub async fn wait_role<B: redlease::LeaseBackend>(
    e: &Elector<B>,
    within: Duration,
    what: &str,
    pred: impl Fn(&Role) -> bool,
) -> Role {
    let mut rx = e.subscribe();
    match tokio::time::timeout(within, rx.wait_for(|s| pred(&s.role))).await {
        Ok(Ok(s)) => s.role,
        _ => panic!("timed out waiting for: {what} (state {:?})", e.state()),
    }
}

pub async fn wait_leader<B: redlease::LeaseBackend>(e: &Elector<B>, within: Duration) -> Token {
    match wait_role(e, within, "leader", |r| matches!(r, Role::Leader(_))).await {
        Role::Leader(t) => t,
        _ => unreachable!(),
    }
}

/// A generous bound for "eventually" in tests: never a timing assertion, only a hang guard.
pub const EVENTUALLY: Duration = Duration::from_secs(20);

/// A raw connection to `server`, for checking what the server holds.
pub async fn raw(server: &RedisServer) -> MultiplexedConnection {
    server.connection().await.expect("connect")
}

/// `GET key`, without lease-redis's waiter mark (a failed attempt marks the holder's value so
/// that its release publishes; `lease-redis/tests/native.rs` tests the mark itself).
pub async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    let v: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    v.map(lease_testkit::redis::without_waiter_mark)
}

/// `PTTL key` (ms; -2 when absent).
pub async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}
