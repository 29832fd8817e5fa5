//! `run` on every topology: a Redis Cluster (`--cluster`), a Sentinel group (`--sentinel
//! --service`) and a Redlock quorum (`--redlock`), on the kit's real servers. On each, the
//! leader's CMD gets a token and a second contender only follows while the first leads.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use lease_testkit::redis::RedisServer;
use lease_testkit::{RedisCluster, SentinelGroup};

/// Leads with a long-running CMD (`a`), checks that a second contender (`b`) follows, then
/// stops both (143).
async fn one_leader(dir: &Path, name: &str, topology: &[&str], url: &str) {
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
    assert!(token > 0);
    let mut b = spawn(start("b"), "b");
    b.wait_line("following a").await;
    assert!(
        !dir.join(format!("b-{}.token", name.len())).exists(),
        "b does not run CMD while a leads"
    );
    b.signal("TERM");
    assert_eq!(b.wait_exit().await.code(), Some(143), "{:#?}", b.lines());
    let mut a = a;
    a.signal("TERM");
    assert_eq!(a.wait_exit().await.code(), Some(143), "{:#?}", a.lines());
}

#[tokio::test(flavor = "multi_thread")]
async fn run_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await.expect("cluster");
    let seeds = cluster.urls().join(",");
    let dir = workdir("cli-topo-cluster");
    one_leader(dir.path(), "{cli-cluster}", &["--cluster"], &seeds).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_through_sentinels() {
    let group = SentinelGroup::start("cli-sentinel")
        .await
        .expect("sentinels");
    let sentinels = group.sentinel_urls().join(",");
    let dir = workdir("cli-topo-sentinel");
    one_leader(
        dir.path(),
        "cli-sentinel-run",
        &["--sentinel", &sentinels, "--service", group.name()],
        "redis://127.0.0.1:1/",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_on_a_redlock_quorum() {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(RedisServer::start().await.expect("redis"));
    }
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = workdir("cli-topo-redlock");
    one_leader(
        dir.path(),
        "cli-redlock-run",
        &["--redlock", &urls.join(",")],
        "redis://127.0.0.1:1/",
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
    // Only `run` takes a topology (for now): said so, exit 64.
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1/", dir.path());
        c.args(["--redlock", &urls.join(","), "status", "--name", "x"]);
        c
    })
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}
