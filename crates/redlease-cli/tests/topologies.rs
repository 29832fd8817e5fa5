//! Every subcommand on every topology: a Redis Cluster (`--cluster`), a Sentinel group
//! (`--sentinel --service`) and a Redlock quorum (`--redlock`), on the kit's real servers.
//!
//! - `run`: the leader's CMD gets a token and a second contender only follows while the first
//!   leads; `status` names the leader and its token; `fence` applies a write under the token
//!   and refuses a stale one (exit 3) — and is refused on Redlock (exit 64, before connecting).
//! - `lock`: a second `lock --wait 0` is refused (exit 71) while the first holds; a waiter is
//!   woken by the holder's release notice (its subscription is seen on the server), well
//!   before the TTL (Cluster with sharded pub/sub, Sentinel; Redlock waiters poll).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use lease_testkit::redis::RedisServer;
use lease_testkit::{RedisCluster, SentinelGroup};
use redlease::redis::Topology as Kind;
use redlease::redis::notice_channel;

type Conn = redlease::redis::client::aio::MultiplexedConnection;
/// Counts the subscribers of a notice channel on the server(s).
type Subscribed = dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>>;

/// Leads with a long-running CMD (`a`), checks that a second contender (`b`) follows, that
/// `status` names `a` with its token, and that `fence` writes under that token (refuses an
/// older one) when `fence` is supported on the topology (exit 64 when not); then stops both
/// (143).
async fn one_leader(dir: &Path, name: &str, topology: &[&str], url: &str, fence: bool) {
    let job = job_script(dir);
    let start = |id: &str| {
        let mut c = redlease(url, dir);
        c.args(topology)
            .args(["run", "--name", name, "--instance-id", id, "--"])
            .arg(&job)
            .arg(format!("{id}-{}", name.len()));
        c
    };
    let spawn = |c: Command, id: &str| {
        let mut p = Proc::spawn(c);
        p.cleanup_group_from(dir.join(format!("{id}-{}.pid", name.len())));
        p
    };
    let a = spawn(start("a"), "a");
    let token: u64 = wait_file(&dir.join(format!("a-{}.token", name.len())))
        .await
        .parse()
        .unwrap_or_else(|e| panic!("a token: {e}; {:#?}", a.lines()));
    assert!(token > 1);
    let mut b = spawn(start("b"), "b");
    b.wait_line("following a").await;
    assert!(
        !dir.join(format!("b-{}.token", name.len())).exists(),
        "b does not run CMD while a leads"
    );

    // `status` on the same topology: a leads, with its token.
    let out = output({
        let mut c = redlease(url, dir);
        c.args(topology).args(["--json", "status", "--name", name]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "status: {}", stderr(&out));
    let shown = stdout(&out);
    assert_eq!(
        json_field(&shown, "holder").as_deref(),
        Some("a"),
        "{shown}"
    );
    if fence {
        assert_eq!(
            json_field(&shown, "token"),
            Some(token.to_string()),
            "{shown}"
        );
    } else {
        // Redlock: the counter is the highest over the nodes (a follower's attempt may have
        // raised one), not the holder's token: shown as unknown, the counter as last_token.
        assert_eq!(
            json_field(&shown, "token").as_deref(),
            Some("null"),
            "{shown}"
        );
        let last: u64 = json_field(&shown, "last_token")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("last_token: {shown}"));
        assert!(last >= token, "{shown}");
    }

    // `fence` under a's token, then under an older one.
    let key = format!("{name}:state");
    let fence_with = |t: u64| {
        let mut c = redlease(url, dir);
        c.args(topology).args([
            "fence",
            "set",
            "--name",
            name,
            "--token",
            &t.to_string(),
            &key,
            "v",
        ]);
        c
    };
    let out = output(fence_with(token)).await;
    if fence {
        assert_eq!(code(&out), 0, "fenced write: {}", stderr(&out));
        let out = output(fence_with(token - 1)).await;
        assert_eq!(code(&out), 3, "stale token refused: {}", stderr(&out));
    } else {
        assert_eq!(code(&out), 64, "{}", stderr(&out));
        assert!(
            assert_one_line(&out).contains("not supported with --redlock"),
            "{}",
            stderr(&out)
        );
    }

    b.signal("TERM");
    assert_eq!(b.wait_exit().await.code(), Some(143), "{:#?}", b.lines());
    let mut a = a;
    a.signal("TERM");
    assert_eq!(a.wait_exit().await.code(), Some(143), "{:#?}", a.lines());
}

/// `lock` on a topology: the holder (with `--fence`) gets a token; a second `--wait 0` is
/// refused (71); a waiter, once `subscribed` sees its notice subscription (`None`: a topology
/// without notices), gets the lock within `bound` of the holder's release (the TTL is 30 s).
async fn lock_round(
    dir: &Path,
    topology: &[&str],
    url: &str,
    key: &str,
    subscribed: Option<&Subscribed>,
) {
    let holder =
        Proc::spawn({
            let mut c = redlease(url, dir);
            c.args(topology)
            .args(["lock", key, "--ttl", "30s", "--fence", "--wait", "0", "--", "sh", "-c"])
            .arg("echo \"$REDLEASE_TOKEN\" > holder.token; while [ ! -e go ]; do sleep 0.02; done");
            c
        });
    let token = wait_file(&dir.join("holder.token")).await;
    assert!(
        token.parse::<u64>().is_ok_and(|t| t > 0),
        "a fencing token: {token:?}; {:#?}",
        holder.lines()
    );
    let out = output({
        let mut c = redlease(url, dir);
        c.args(topology)
            .args(["lock", key, "--wait", "0", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 71, "held by the first: {}", stderr(&out));

    let mut waiter = Proc::spawn({
        let mut c = redlease(url, dir);
        c.args(topology)
            .args([
                "lock", key, "--ttl", "30s", "--wait", "25s", "--", "sh", "-c",
            ])
            .arg("echo got > waiter.got");
        c
    });
    waiter.wait_line("obtaining lock").await;
    if let Some(subscribed) = subscribed {
        let deadline = Instant::now() + EVENTUALLY;
        while subscribed().await == 0 {
            assert!(
                Instant::now() < deadline,
                "the waiter never subscribed to release notices: {:#?}",
                waiter.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    std::fs::write(dir.join("go"), "").expect("go");
    let released = Instant::now();
    let mut holder = holder;
    assert_eq!(
        holder.wait_exit().await.code(),
        Some(0),
        "{:#?}",
        holder.lines()
    );
    let bound = if subscribed.is_some() {
        Duration::from_secs(2)
    } else {
        EVENTUALLY
    };
    let got = wait_file_within(&dir.join("waiter.got"), bound).await;
    assert_eq!(
        got.as_deref(),
        Some("got"),
        "the waiter did not get the lock within {bound:?} of the release (TTL 30 s): {:#?}",
        waiter.lines()
    );
    eprintln!(
        "{topology:?}: the waiter ran CMD {:?} after the holder's release",
        released.elapsed()
    );
    assert_eq!(
        waiter.wait_exit().await.code(),
        Some(0),
        "{:#?}",
        waiter.lines()
    );
}

async fn count(mut conn: Conn, cmd: &'static str, channel: String) -> usize {
    let reply: Vec<redlease::redis::client::Value> = redlease::redis::client::cmd("PUBSUB")
        .arg(cmd)
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    match reply.get(1) {
        Some(redlease::redis::client::Value::Int(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

/// Whether the server has sharded pub/sub (Redis 7, Valkey; not Redis 6.2, whose cluster
/// waiters poll: the kit may run that build).
async fn has_sharded_pubsub(mut conn: Conn) -> bool {
    let reply: Vec<redlease::redis::client::Value> = redlease::redis::client::cmd("COMMAND")
        .arg("INFO")
        .arg("SSUBSCRIBE")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    matches!(
        reply.first(),
        Some(redlease::redis::client::Value::Array(_))
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await.expect("cluster");
    let seeds = cluster.urls().join(",");
    let dir = workdir("cli-topo-cluster");
    one_leader(dir.path(), "{cli-cluster}", &["--cluster"], &seeds, true).await;

    let key = "{cli-cluster-lock}";
    let channel = notice_channel(key, Kind::Cluster);
    let mut conns = Vec::new();
    for node in cluster.nodes() {
        conns.push(node.connection().await.expect("node"));
    }
    let subscribed = move || -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> {
        let (conns, channel) = (conns.clone(), channel.clone());
        Box::pin(async move {
            let mut n = 0;
            for c in conns {
                n += count(c, "SHARDNUMSUB", channel.clone()).await;
            }
            n
        })
    };
    let sharded = has_sharded_pubsub(cluster.nodes()[0].connection().await.expect("node")).await;
    let subscribed: Option<&Subscribed> = if sharded { Some(&subscribed) } else { None };
    lock_round(dir.path(), &["--cluster"], &seeds, key, subscribed).await;

    // A key without a hash tag: its lease's keys span slots; refused before any write.
    let out = output({
        let mut c = redlease(&seeds, dir.path());
        c.args([
            "--cluster",
            "fence",
            "set",
            "--name",
            "{cli-cluster}",
            "--token",
            "5",
            "other",
            "v",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_through_sentinels() {
    let group = SentinelGroup::start("cli-sentinel")
        .await
        .expect("sentinels");
    let sentinels = group.sentinel_urls().join(",");
    let dir = workdir("cli-topo-sentinel");
    let topology = ["--sentinel", &sentinels, "--service", group.name()];
    one_leader(
        dir.path(),
        "cli-sentinel-run",
        &topology,
        "redis://127.0.0.1:1/",
        true,
    )
    .await;

    let key = "cli-sentinel-lock";
    let channel = notice_channel(key, Kind::Standalone);
    let primary = group.primary().await.expect("primary");
    let conn = primary.connection().await.expect("primary");
    let subscribed = move || -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> {
        Box::pin(count(conn.clone(), "NUMSUB", channel.clone()))
    };
    lock_round(
        dir.path(),
        &topology,
        "redis://127.0.0.1:1/",
        key,
        Some(&subscribed),
    )
    .await;

    // A wrong service name: said so, exit 69 or 70 (the sentinels do not know it).
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1/", dir.path());
        c.args([
            "--sentinel",
            &sentinels,
            "--service",
            "no-such-service",
            "status",
            "--name",
            "x",
        ]);
        c
    })
    .await;
    assert!(matches!(code(&out), 69 | 70), "{}", stderr(&out));
    assert_one_line(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_on_a_redlock_quorum() {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(RedisServer::start().await.expect("redis"));
    }
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = workdir("cli-topo-redlock");
    let quorum = urls.join(",");
    one_leader(
        dir.path(),
        "cli-redlock-run",
        &["--redlock", &quorum],
        "redis://127.0.0.1:1/",
        false,
    )
    .await;
    lock_round(
        dir.path(),
        &["--redlock", &quorum],
        "redis://127.0.0.1:1/",
        "cli-redlock-lock",
        None,
    )
    .await;
    // Two servers are not a quorum worth having: refused before connecting.
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1/", dir.path());
        c.args([
            "--redlock",
            &urls[..2].join(","),
            "run",
            "--name",
            "x",
            "--",
            "true",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    // `fence` is refused before connecting (the quorum's servers need not even be up).
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1/", dir.path());
        c.args([
            "--redlock",
            "redis://127.0.0.1:1/,redis://127.0.0.1:2/,redis://127.0.0.1:3/",
            "fence",
            "del",
            "--name",
            "x",
            "--token",
            "3",
            "k",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(assert_one_line(&out).contains("not supported with --redlock"));
}

/// Over TLS: a cluster whose nodes serve TLS (`tls-cluster yes`), `rediss://` seeds and
/// `--tls-ca`: `run`, `status` and `fence` as on a plain cluster; without the CA the server is
/// not trusted (exit 69, said so).
#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_on_a_tls_cluster() {
    use lease_testkit::tls::{TestPki, Validity};
    let pki = TestPki::new().expect("pki");
    let cert = pki
        .server_cert(&["localhost", "127.0.0.1"], Validity::Current)
        .expect("cert");
    let bus = pki.client_cert("cluster-bus").expect("bus cert");
    let other = TestPki::new().expect("another pki");
    let cluster = RedisCluster::builder()
        .tls(&cert, &bus)
        .start()
        .await
        .expect("TLS cluster");
    let seeds = cluster.tls_urls().join(",");
    assert!(seeds.starts_with("rediss://"), "{seeds}");
    let dir = workdir("cli-topo-cluster-tls");
    let ca = pki.ca_file().to_str().expect("utf-8 path").to_owned();
    one_leader(
        dir.path(),
        "{cli-cluster-tls}",
        &["--cluster", "--tls-ca", &ca],
        &seeds,
        true,
    )
    .await;
    let key = "{cli-cluster-tls-lock}";
    let channel = notice_channel(key, Kind::Cluster);
    let mut conns = Vec::new();
    for node in cluster.nodes() {
        conns.push(node.connection().await.expect("node"));
    }
    let subscribed = move || -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> {
        let (conns, channel) = (conns.clone(), channel.clone());
        Box::pin(async move {
            let mut n = 0;
            for c in conns {
                n += count(c, "SHARDNUMSUB", channel.clone()).await;
            }
            n
        })
    };
    let sharded = has_sharded_pubsub(cluster.nodes()[0].connection().await.expect("node")).await;
    let subscribed: Option<&Subscribed> = if sharded { Some(&subscribed) } else { None };
    lock_round(
        dir.path(),
        &["--cluster", "--tls-ca", &ca],
        &seeds,
        key,
        subscribed,
    )
    .await;
    let out = output({
        let mut c = redlease(&seeds, dir.path());
        // Another CA replaces the system's roots: the cluster's is not trusted.
        c.env("SSL_CERT_FILE", other.ca_file()).args([
            "--cluster",
            "status",
            "--name",
            "{cli-cluster-tls}",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(assert_one_line(&out).contains("TLS"), "{}", stderr(&out));
}

/// Through sentinels over TLS (`rediss://` sentinels, `--tls-ca`; the primary's TLS port, as
/// the sentinels name it): `run`, `status`, `fence` and `lock` (with its release notice, over
/// TLS too); without the CA, the sentinels are not trusted (exit 69).
#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_through_tls_sentinels() {
    use lease_testkit::tls::{TestPki, Validity};
    let pki = TestPki::new().expect("pki");
    let other = TestPki::new().expect("another pki");
    let cert = pki
        .server_cert(&["localhost", "127.0.0.1"], Validity::Current)
        .expect("cert");
    let group = SentinelGroup::builder("cli-sentinel-tls")
        .tls(&cert)
        .start()
        .await
        .expect("TLS sentinels");
    let sentinels = group.sentinel_tls_urls().join(",");
    assert!(sentinels.starts_with("rediss://"), "{sentinels}");
    let dir = workdir("cli-topo-sentinel-tls");
    let ca = pki.ca_file().to_str().expect("utf-8 path").to_owned();
    let topology = [
        "--sentinel",
        &sentinels,
        "--service",
        group.name(),
        "--tls-ca",
        &ca,
    ];
    let nowhere = "redis://127.0.0.1:1/";
    one_leader(dir.path(), "cli-sentinel-tls-run", &topology, nowhere, true).await;

    let key = "cli-sentinel-tls-lock";
    let channel = notice_channel(key, Kind::Standalone);
    let primary = group.primary().await.expect("primary");
    let conn = primary.connection().await.expect("primary");
    let subscribed = move || -> std::pin::Pin<Box<dyn Future<Output = usize> + Send>> {
        Box::pin(count(conn.clone(), "NUMSUB", channel.clone()))
    };
    lock_round(dir.path(), &topology, nowhere, key, Some(&subscribed)).await;

    let out = output({
        let mut c = redlease(nowhere, dir.path());
        c.env("SSL_CERT_FILE", other.ca_file()).args([
            "--sentinel",
            &sentinels,
            "--service",
            group.name(),
            "status",
            "--name",
            "cli-sentinel-tls-run",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_one_line(&out);
}
