//! Issue 54: every connection the library builds sends each request at most once. A request
//! the server ran whose reply was lost with its connection is reported `OutcomeUnknown`,
//! never a confident wrong answer — a release that succeeded read as "not held", a fenced
//! body applied twice.
//!
//! The fault: the kit's proxy forwards the request and holds the reply
//! ([`Mode::DropReplies`]); once the server has applied it, the proxy resets the connection.
//! On Cluster every node sits behind a proxy of its own (the nodes announce the proxies'
//! ports). The negative control is redis-rs's cluster client as redis-rs builds it by default
//! (16 retries): the same fault makes it re-send, and the test sees the damage.

mod common;

use std::time::Duration;

use common::EVENTUALLY;
use lease_testkit::cluster::RedisCluster;
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::RedisServer;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redlease::redis::{HealingCluster, RedisBackend};
use redlease::{LockError, LockOptions, Locker};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits (bounded) until `look` holds on the server.
async fn until<F, Fut>(what: &str, mut look: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    tokio::time::timeout(EVENTUALLY, async {
        while !look().await {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not within {EVENTUALLY:?}"));
}

/// Holds every reply, runs `call` (spawned), waits until `applied` says the server ran it,
/// then resets every connection through the proxies and lets traffic pass again. Returns the
/// call's result.
async fn lose_the_reply<T, C, A, AF>(proxies: &[FaultProxy], call: C, mut applied: A) -> T
where
    T: Send + 'static,
    C: std::future::Future<Output = T> + Send + 'static,
    A: FnMut() -> AF,
    AF: std::future::Future<Output = bool>,
{
    for p in proxies {
        p.set_mode(Mode::DropReplies);
    }
    let call = tokio::spawn(call);
    until("the server applied the request", &mut applied).await;
    for p in proxies {
        p.reset_all().await;
    }
    for p in proxies {
        p.set_mode(Mode::Pass);
    }
    tokio::time::timeout(EVENTUALLY, call)
        .await
        .expect("the call ends")
        .expect("the call's task")
}

/// Direct connections to every node (not through the proxies, whose ports the cluster
/// announces): each key is read on whichever node holds its slot.
#[derive(Clone)]
struct Raw(Vec<MultiplexedConnection>);

impl Raw {
    async fn new(addrs: &[RedisServer]) -> Raw {
        let mut conns = Vec::new();
        for node in addrs {
            conns.push(node.connection().await.expect("a direct connection"));
        }
        Raw(conns)
    }

    /// `cmd key` on every node; the integer of the node that answers (others say MOVED).
    async fn int(&self, cmd: &str, key: &str) -> i64 {
        let mut total = 0;
        for conn in &self.0 {
            let mut conn = conn.clone();
            if let Ok(n) = redis::cmd(cmd).arg(key).query_async::<i64>(&mut conn).await {
                total += n;
            }
        }
        total
    }
}

/// A lock obtained and held over `backend`, then released with its reply lost; and a fenced
/// `RPUSH` under its token with its reply lost. Returns (what the release said, what the
/// write said, how many times the write was applied).
async fn release_and_write<B>(
    backend: RedisBackend<B>,
    proxies: &[FaultProxy],
    raw: &Raw,
    tag: &str,
) -> (Result<(), LockError>, bool, i64)
where
    B: ConnectionLike + Clone + Send + Sync + 'static,
{
    let locker = Locker::new(backend);
    // Warm the scripts on the tag's node (a first call may go EVALSHA, NOSCRIPT, EVAL: its
    // NOSCRIPT reply would be held too).
    let warm = locker
        .obtain(
            format!("{{{tag}}}:warm"),
            ms(30_000),
            LockOptions::new().fence_key(format!("{{{tag}}}:warm-fence")),
        )
        .await
        .expect("warm-up obtain");
    let warmed = warm
        .fencer()
        .expect("a fenced lock")
        .eval(
            "return redis.call('RPUSH', KEYS[2], ARGV[2])",
            [format!("{{{tag}}}:warm-log")],
            ["entry"],
        )
        .await
        .expect("warm-up write");
    assert!(warmed.is_applied(), "warm-up write: {warmed:?}");
    warm.release().await.expect("warm-up release");
    let key = format!("{{{tag}}}:lock");
    let lock = locker
        .obtain(
            key.as_str(),
            ms(30_000),
            LockOptions::new().fence_key(format!("{{{tag}}}:fence")),
        )
        .await
        .expect("obtain");
    let fencer = lock.fencer().expect("a fenced lock");
    let log = format!("{{{tag}}}:log");
    let write = {
        let target = log.clone();
        lose_the_reply(
            proxies,
            async move {
                fencer
                    .eval(
                        "return redis.call('RPUSH', KEYS[2], ARGV[2])",
                        [target],
                        ["entry"],
                    )
                    .await
            },
            {
                let raw = raw.clone();
                let log = log.clone();
                move || {
                    let raw = raw.clone();
                    let log = log.clone();
                    async move { raw.int("LLEN", &log).await >= 1 }
                }
            },
        )
        .await
    };
    let write_unknown = match &write {
        Err(e) => e.is_outcome_unknown(),
        Ok(_) => false,
    };
    // Let any re-send land before counting.
    tokio::time::sleep(ms(300)).await;
    let applied = raw.int("LLEN", &log).await;
    // A round trip that heals the connection the reset broke (a new one is made at its first
    // request, and its handshake's reply must not be held).
    lock.refresh(ms(30_000))
        .await
        .expect("a refresh after the fault");
    let release = lose_the_reply(proxies, lock.release(), {
        let raw = raw.clone();
        let key = key.clone();
        move || {
            let raw = raw.clone();
            let key = key.clone();
            async move { raw.int("EXISTS", &key).await == 0 }
        }
    })
    .await;
    (release, write_unknown, applied)
}

async fn cluster_behind_proxies() -> (RedisCluster, Vec<FaultProxy>) {
    let cluster = RedisCluster::start().await.expect("cluster");
    cluster.wait_ready(EVENTUALLY).await.expect("cluster ready");
    let proxies = cluster.behind_proxies().await.expect("proxies");
    (cluster, proxies)
}

fn proxy_urls(proxies: &[FaultProxy]) -> Vec<String> {
    proxies.iter().map(FaultProxy::url).collect()
}

/// `connect_cluster`: a release and a fenced write whose replies are lost are reported
/// unknown, and the write is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_cluster_sends_each_request_at_most_once() {
    let (cluster, proxies) = cluster_behind_proxies().await;
    let raw = Raw::new(cluster.nodes()).await;
    let backend = redlease::redis::connect_cluster(&proxy_urls(&proxies))
        .await
        .expect("connect_cluster");
    let (release, write_unknown, applied) = release_and_write(backend, &proxies, &raw, "c").await;
    assert!(write_unknown, "the fenced write's lost reply reads unknown");
    assert_eq!(applied, 1, "the fenced write was applied once");
    match release {
        Err(e) if e.is_outcome_unknown() => {}
        other => panic!("the release's lost reply must read unknown, got {other:?}"),
    }
}

/// A `HealingCluster` built from a user's builder (default retries) sends at most once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healing_cluster_from_a_default_builder_sends_at_most_once() {
    let (cluster, proxies) = cluster_behind_proxies().await;
    let raw = Raw::new(cluster.nodes()).await;
    let builder = redis::cluster::ClusterClientBuilder::new(proxy_urls(&proxies));
    let conn = HealingCluster::connect(builder)
        .await
        .expect("healing cluster");
    let backend = RedisBackend::cluster(conn);
    let (release, write_unknown, applied) = release_and_write(backend, &proxies, &raw, "h").await;
    assert!(write_unknown);
    assert_eq!(applied, 1);
    assert!(
        matches!(&release, Err(e) if e.is_outcome_unknown()),
        "{release:?}"
    );
}

/// Negative control: redis-rs's cluster connection with its default retries re-sends after
/// the reset. The same fault then applies the fenced write twice (or reports the release of a
/// lock it released as not held): what the two tests above rule out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_default_cluster_client_re_sends() {
    let (cluster, proxies) = cluster_behind_proxies().await;
    let raw = Raw::new(cluster.nodes()).await;
    let conn = redis::cluster::ClusterClient::new(proxy_urls(&proxies))
        .expect("client")
        .get_async_connection()
        .await
        .expect("default cluster connection");
    let backend = RedisBackend::cluster(conn);
    let (release, write_unknown, applied) = release_and_write(backend, &proxies, &raw, "x").await;
    assert!(
        applied == 2 && !write_unknown && matches!(release, Err(LockError::NotHeld)),
        "the fault must make a default client re-send: applied {applied}, \
         write unknown {write_unknown}, release {release:?}"
    );
}

/// A single server over `connect` (the README's connection): the same fault, the same
/// truthful answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_sends_each_request_at_most_once() {
    let server = common::redis().await;
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let raw = Raw::new(std::slice::from_ref(&server)).await;
    let backend = redlease::redis::connect(&server.url_via(proxy.addr()))
        .await
        .expect("connect");
    let proxies = [proxy];
    let (release, write_unknown, applied) = release_and_write(backend, &proxies, &raw, "s").await;
    assert!(write_unknown);
    assert_eq!(applied, 1);
    assert!(
        matches!(&release, Err(e) if e.is_outcome_unknown()),
        "{release:?}"
    );
}
