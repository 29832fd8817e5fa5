//! Helpers shared by the real-server tests.
#![allow(dead_code, unreachable_pub)]

use lease_core::TokenScheme;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseSpec, Owner, ReleaseRequest, RenewRequest,
    Token, Ttl,
};
use lease_redis::RedisBackend;
use lease_redlock::{Node, QuorumError, RedlockBackend, RedlockConfig};
use lease_testkit::proxy::FaultProxy;
use lease_testkit::redis::RedisServer;
use redis::aio::MultiplexedConnection;

pub type Conn = MultiplexedConnection;
pub type MNode = Node<RedisBackend<Conn>>;

/// A hang guard for calls that must complete: never a timing assertion, only a way to fail
/// cleanly instead of hanging.
pub const MUST_COMPLETE_WITHIN: Duration = Duration::from_secs(30);

pub async fn must_complete<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(MUST_COMPLETE_WITHIN, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not complete"))
}

/// Scheduling slack on top of the protocol's bounds (a loaded 2-core machine, debug builds).
pub const SLACK: Duration = Duration::from_secs(2);

/// Completes `f` (a quorum call with a faulty node) within three rounds of the default
/// operation timeout for `ttl_ms` (acquire, raise, clean-up) plus [`SLACK`]: a faulty node
/// must not hold the call up for longer than the quorum's own bound.
pub async fn within_rounds<F: Future>(what: &str, ttl_ms: u64, f: F) -> F::Output {
    let round = RedlockConfig::new().operation_timeout_for(Duration::from_millis(ttl_ms));
    let bound = round * 3 + SLACK;
    let start = std::time::Instant::now();
    let out = must_complete(what, f).await;
    let took = start.elapsed();
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
    out
}

/// A multiplexed connection without redis-rs timeouts (the quorum bounds every call).
pub async fn conn(url: &str) -> Conn {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(None);
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

pub async fn start(n: usize) -> Vec<RedisServer> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(RedisServer::start().await.expect("redis server"));
    }
    v
}

/// A node on `url`, named `id`.
pub async fn node(id: impl Into<String>, url: &str) -> MNode {
    Node::new(
        id,
        RedisBackend::new(conn(url).await).with_token_scheme(TokenScheme::Counter),
    )
}

/// One node per server, connected directly.
pub async fn direct_nodes(servers: &[RedisServer]) -> Vec<MNode> {
    let mut v = Vec::new();
    for s in servers {
        v.push(node(s.addr().to_string(), &s.url()).await);
    }
    v
}

/// One fault proxy per server, and one node through each.
pub async fn proxied_nodes(servers: &[RedisServer]) -> (Vec<FaultProxy>, Vec<MNode>) {
    let mut proxies = Vec::new();
    let mut nodes = Vec::new();
    for s in servers {
        let p = FaultProxy::start(s.addr()).await.expect("proxy");
        nodes.push(node(p.addr().to_string(), &s.url_via(p.addr())).await);
        proxies.push(p);
    }
    (proxies, nodes)
}

pub fn redlock<N: lease_redlock::QuorumNode>(nodes: Vec<N>) -> RedlockBackend<N> {
    RedlockBackend::new(nodes, RedlockConfig::new()).expect("valid node set")
}

/// Raw connections to every server (for checks and staging).
pub async fn raws(servers: &[RedisServer]) -> Vec<Conn> {
    let mut v = Vec::new();
    for s in servers {
        v.push(conn(&s.url()).await);
    }
    v
}

pub fn owner(s: &str) -> Owner {
    Owner::new(s).unwrap()
}

pub fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

pub fn fenced_lock(key: &str) -> Arc<LeaseSpec> {
    Arc::new(LeaseSpec::lock([key], Some(format!("{key}:fence"))).unwrap())
}

pub fn acq(spec: &Arc<LeaseSpec>, who: &str, ttl_ms: u64) -> AcquireRequest {
    AcquireRequest::new(spec.clone(), owner(who), ttl(ttl_ms))
}

pub fn renew(spec: &Arc<LeaseSpec>, who: &str, ttl_ms: u64) -> RenewRequest {
    RenewRequest::new(spec.clone(), owner(who), ttl(ttl_ms))
}

pub fn release(spec: &Arc<LeaseSpec>, who: &str) -> ReleaseRequest {
    ReleaseRequest::new(spec.clone(), owner(who))
}

pub fn token_of(o: &AcquireOutcome) -> Token {
    match o {
        AcquireOutcome::Acquired { token: Some(t), .. } => *t,
        other => panic!("expected a fenced acquisition, got {other:?}"),
    }
}

pub fn quorum_error(e: &BackendError) -> &QuorumError {
    QuorumError::find(e).unwrap_or_else(|| panic!("not a quorum error: {e:?}"))
}

/// `GET key`, without lease-redis's waiter mark (a failed attempt marks the holder's value).
pub async fn get(conn: &mut Conn, key: &str) -> Option<String> {
    let v: Option<String> = redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET");
    v.map(lease_testkit::redis::without_waiter_mark)
}

pub async fn set_px(conn: &mut Conn, key: &str, value: &str, px: u64) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(px)
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

/// The value of `key` on every connection, in order.
pub async fn values(conns: &mut [Conn], key: &str) -> Vec<Option<String>> {
    let mut v = Vec::new();
    for c in conns.iter_mut() {
        v.push(get(c, key).await);
    }
    v
}

/// A node's own connection: commands sent on it are answered after every command the node
/// sent before (one pipeline, in order), so reading through it observes everything earlier
/// rounds queued there, even requests whose callers gave up waiting.
pub fn node_conn(node: &MNode) -> Conn {
    node.backend().connection().clone()
}
