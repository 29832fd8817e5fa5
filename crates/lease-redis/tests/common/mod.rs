//! Helpers shared by the integration tests (real Redis from lease-testkit).
#![allow(dead_code, unreachable_pub)]

use lease_core::TokenScheme;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseSpec, Metadata, Owner, ReleaseRequest,
    RenewRequest, Token, Ttl,
};
use lease_redis::RedisBackend;
use lease_testkit::redis::RedisServer;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

pub type Conn = MultiplexedConnection;

/// A fresh server, a backend over a multiplexed connection, and a raw connection.
pub async fn setup() -> (RedisServer, RedisBackend<Conn>, Conn) {
    let server = RedisServer::start().await.expect("redis server");
    let conn = server.connection().await.expect("connection");
    let raw = server.connection().await.expect("raw connection");
    (
        server,
        RedisBackend::new(conn).with_token_scheme(TokenScheme::Counter),
        raw,
    )
}

pub fn owner(s: &str) -> Owner {
    Owner::new(s).expect("owner")
}

pub fn ttl_ms(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).expect("ttl")
}

pub const LONG: u64 = 60_000;

pub fn token(n: u64) -> Token {
    Token::new(n).expect("token")
}

pub fn election(name: &str) -> Arc<LeaseSpec> {
    Arc::new(LeaseSpec::election(name))
}

pub fn lock(keys: &[&str], fence: Option<&str>) -> Arc<LeaseSpec> {
    Arc::new(LeaseSpec::lock(keys.iter().copied(), fence.map(str::to_owned)).expect("spec"))
}

pub fn acq(spec: &Arc<LeaseSpec>, who: &str) -> AcquireRequest {
    acq_meta(spec, who, "")
}

pub fn acq_meta(spec: &Arc<LeaseSpec>, who: &str, meta: &str) -> AcquireRequest {
    AcquireRequest::new(spec.clone(), owner(who), ttl_ms(LONG))
        .with_metadata(Metadata::new(meta).expect("metadata"))
}

pub fn renew(spec: &Arc<LeaseSpec>, who: &str) -> RenewRequest {
    RenewRequest::new(spec.clone(), owner(who), ttl_ms(LONG))
}

pub fn release(spec: &Arc<LeaseSpec>, who: &str, term: Option<Token>) -> ReleaseRequest {
    ReleaseRequest::new(spec.clone(), owner(who)).with_term_token(term)
}

pub fn acquired_token(o: &AcquireOutcome) -> Option<Token> {
    match o {
        AcquireOutcome::Acquired { token, .. } => *token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

pub async fn get(conn: &mut Conn, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

pub async fn get_bytes(conn: &mut Conn, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

pub async fn set(conn: &mut Conn, key: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .expect("SET");
}

pub async fn del(conn: &mut Conn, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("DEL");
}

pub async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

pub async fn hget(conn: &mut Conn, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .expect("HGET")
}

pub async fn exists(conn: &mut Conn, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .expect("EXISTS");
    n == 1
}

/// A connection wrapper counting the requests that reach the wire, to prove that a refusal
/// happened before any round trip.
#[derive(Clone)]
pub struct Counting<C> {
    pub inner: C,
    pub calls: Arc<AtomicUsize>,
}

impl<C> Counting<C> {
    pub fn new(inner: C) -> Self {
        Counting {
            inner,
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Counting<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// An error as the parity tests compare it: its kind (and what a refusal names), not its text.
pub fn kind(e: &BackendError) -> String {
    match e {
        BackendError::Refused(_) => "refused".into(),
        BackendError::Invalid(_) => "invalid".into(),
        BackendError::Corrupt { key, .. } => format!("corrupt {key}"),
        BackendError::PermitsMismatch { stored, asked, .. } => {
            format!("mismatch {stored} {asked}")
        }
        BackendError::QueueFull { name, limit } => format!("queue full {name} {limit}"),
        other => format!("other {other}"),
    }
}

/// An outcome as the parity tests compare it ([`kind`] for errors).
pub fn norm<T: std::fmt::Debug>(r: &Result<T, BackendError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {}", kind(e)),
    }
}

/// The runner of a parity property on a real server: `cases` cases, nothing persisted.
pub fn parity_runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}

/// Empties the server before a parity case.
pub async fn flushall(raw: &Conn) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut flush = raw.clone();
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut flush)
        .await
        .map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))
}
