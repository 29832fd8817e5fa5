//! Bad input: one line on stderr, a distinct exit code, no panic; and the demo.

mod common;

use std::time::Duration;

use common::*;
use lease_testkit::proxy::{FaultProxy, Mode};

/// An address where nothing listens (bound, then released).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

async fn check(url: &str, args: &[&str], want: i32, mention: &str) {
    let dir = workdir("cli-input");
    let out = output({
        let mut c = redlease(url, dir.path());
        c.args(args);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), want, "{args:?}: {line}");
    assert!(
        line.to_lowercase().contains(&mention.to_lowercase()),
        "{args:?}: {line:?} should mention {mention:?}"
    );
    assert!(
        stdout(&out).is_empty(),
        "nothing on stdout: {}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gives_one_line_and_its_exit_code() {
    let server = redis().await;
    let url = server.url();
    let long = "n".repeat(2000);
    // Usage (2): the command line cannot be parsed.
    check(
        &url,
        &["run", "--name", "x", "--ttl", "5x", "--", "true"],
        2,
        "unknown unit",
    )
    .await;
    check(
        &url,
        &["run", "--name", "x", "--ttl", "5", "--", "true"],
        2,
        "no unit",
    )
    .await;
    check(&url, &["run", "--name", "x", "sleep", "1"], 2, "`--`").await;
    check(&url, &["run", "--name", "x", "--"], 2, "CMD").await;
    // (`lock k` without CMD holds the lock: tests/hold.rs.) `unlock` needs --owner or --force.
    check(&url, &["unlock", "k"], 2, "--owner").await;
    check(&url, &["status"], 2, "--name").await;
    check(
        &url,
        &["fence", "set", "--name", "x", "--token", "1", "k"],
        2,
        "VALUE",
    )
    .await;
    check(&url, &["frobnicate"], 2, "frobnicate").await;
    // Invalid values (64): refused before any round trip.
    check(&url, &["run", "--name", "", "--", "true"], 64, "empty").await;
    check(&url, &["status", "--name", &long], 64, "2000 bytes").await;
    // The holds' names too, before connecting (a closed port would answer 69).
    let closed = closed_port_url();
    for what in ["--semaphore", "--shared", "--fair", "--lock"] {
        check(&closed, &["status", what, ""], 64, "empty").await;
    }
    check(
        &url,
        &["run", "--name", "x", "--instance-id", "", "--", "true"],
        64,
        "instance id",
    )
    .await;
    check(
        &url,
        &["run", "--name", "x", "--ttl", "50ms", "--", "true"],
        64,
        "minimum",
    )
    .await;
    check(&url, &["lock", "k", "--ttl", "0s", "--", "true"], 64, "ttl").await;
    check(&url, &["lock", "k", "--ttl", "0s"], 64, "ttl").await;
    check(&closed, &["unlock", "", "--force"], 64, "empty").await;
    // A grace at least the renew slack (TTL minus TTL/3) would stop CMD while renewals are
    // healthy: refused, for run and lock alike.
    check(
        &url,
        &[
            "run", "--name", "x", "--ttl", "3s", "--grace", "2s", "--", "true",
        ],
        64,
        "--grace 2s must be shorter",
    )
    .await;
    check(
        &url,
        &["lock", "k", "--ttl", "3s", "--grace", "10s", "--", "true"],
        64,
        "--grace 10s must be shorter",
    )
    .await;
    check(
        &url,
        &["fence", "set", "--name", "x", "--token", "0", "k", "v"],
        64,
        "token 0",
    )
    .await;
    check(
        &url,
        &["fence", "set", "--name", "x", "--token", "abc", "k", "v"],
        64,
        "decimal",
    )
    .await;
    check(
        &url,
        &[
            "fence",
            "set",
            "--name",
            "x",
            "--token",
            "9007199254740993",
            "k",
            "v",
        ],
        64,
        "2^53",
    )
    .await;
    check("not a url", &["status", "--name", "x"], 64, "URL").await;
    // CMD that cannot run: refused before contending.
    check(
        &url,
        &["run", "--name", "x", "--", "/nonexistent/cmd"],
        127,
        "not found",
    )
    .await;
    check(
        &url,
        &["lock", "k", "--", "no-such-command-redlease"],
        127,
        "not found",
    )
    .await;
    // Nothing was taken by the refused commands.
    let mut conn = server.connection().await.unwrap();
    let keys: Vec<String> = redlease::redis::client::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "no key was written: {keys:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_redis_fails_fast_with_one_line() {
    let refused = closed_port_url();
    check(&refused, &["status", "--name", "x"], 69, "cannot connect").await;
    check(
        &refused,
        &["run", "--name", "x", "--", "true"],
        69,
        "cannot connect",
    )
    .await;
    check(&refused, &["lock", "k", "--", "true"], 69, "cannot connect").await;
    check(
        &refused,
        &["fence", "del", "--name", "x", "--token", "1", "k"],
        69,
        "cannot connect",
    )
    .await;

    // A server that accepts and never answers (a partition): the connection attempt's own
    // timeout (about one second) ends it.
    let server = redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    proxy.set_mode(Mode::Blackhole);
    let started = std::time::Instant::now();
    check(&proxy.url(), &["status", "--name", "x"], 69, "").await;
    // A hang guard, not a timing assertion: well under the test's EVENTUALLY bound.
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// A fenced write that fails at the server (WRONGTYPE) is an error (70), not a refusal, and
/// leaves the mark unmoved.
#[tokio::test(flavor = "multi_thread")]
async fn failed_fenced_write_is_an_error_and_keeps_the_mark() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-fence-err");
    let d = dir.path();
    let mut conn = server.connection().await.unwrap();
    let _: () = redlease::redis::client::cmd("SET")
        .arg("str")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let hset = output({
        let mut c = redlease(&url, d);
        c.args([
            "fence", "hset", "--name", "fe", "--token", "4", "str", "f", "v",
        ]);
        c
    })
    .await;
    let line = assert_one_line(&hset);
    assert_eq!(code(&hset), 70, "{line}");
    assert!(line.contains("WRONGTYPE"), "{line}");
    let mark: Option<String> = redlease::redis::client::cmd("GET")
        .arg("fe:fence:applied")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(mark, None, "the mark did not move");

    let del = output({
        let mut c = redlease(&url, d);
        c.args(["fence", "del", "--name", "fe", "--token", "4", "str"]);
        c
    })
    .await;
    assert_eq!(code(&del), 0, "{}", stderr(&del));
    let mark: Option<String> = redlease::redis::client::cmd("GET")
        .arg("fe:fence:applied")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        mark.as_deref(),
        Some("4"),
        "an applied write advances the mark"
    );
    let older = output({
        let mut c = redlease(&url, d);
        c.args(["fence", "set", "--name", "fe", "--token", "3", "str", "old"]);
        c
    })
    .await;
    assert_eq!(code(&older), 3, "{}", stderr(&older));
}

/// A fenced write that reached Redis but got no reply in time exits 75 ("outcome unknown"),
/// never 69 ("unreachable", which would claim it was not applied): here Redis holds the write
/// (`CLIENT PAUSE WRITE`) past the CLI's bound.
#[tokio::test(flavor = "multi_thread")]
async fn an_unanswered_fenced_write_exits_outcome_unknown() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-fence-unknown");
    let d = dir.path();
    let fence = |value: &str| {
        let mut c = redlease(&url, d);
        c.args([
            "fence", "set", "--name", "fu", "--token", "2", "fu:v", value,
        ]);
        c
    };
    // Loads the script, so the held request runs as sent once the pause ends.
    let first = output(fence("first")).await;
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let mut conn = server.connection().await.unwrap();
    let _: () = redlease::redis::client::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let held = output(fence("second")).await;
    let line = assert_one_line(&held);
    assert_eq!(code(&held), 75, "{line}");
    assert!(line.contains("unknown"), "{line}");
    let _: () = redlease::redis::client::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The CLI exited, so Redis dropped its held request: this time it was not applied. Either
    // way is possible, which is why the answer was "unknown" and not "not applied".
    let v: Option<String> = redlease::redis::client::cmd("GET")
        .arg("fu:v")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(v.as_deref(), Some("first" | "second")), "{v:?}");
}

/// The demo tells its story on the in-memory store, without Redis, and checks it.
#[tokio::test(flavor = "multi_thread")]
async fn demo_runs_in_memory() {
    let dir = workdir("cli-demo");
    // The URL points nowhere: the in-memory demo must not use it (only an explicit --redis).
    let out = output({
        let mut c = redlease(&closed_port_url(), dir.path());
        c.arg("demo");
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("in-memory"), "{text}");
    assert!(text.contains("REFUSES"), "{text}");
    assert!(text.starts_with("redlease demo"), "{text}");
    let json = output({
        let mut c = redlease(&closed_port_url(), dir.path());
        c.args(["--json", "demo"]);
        c
    })
    .await;
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let last = stdout(&json).lines().last().unwrap_or("").to_owned();
    assert_eq!(
        json_field(&last, "event").as_deref(),
        Some("result"),
        "{last}"
    );
    assert_eq!(json_field(&last, "ok").as_deref(), Some("true"), "{last}");
    let first: u64 = json_field(&last, "first_token").unwrap().parse().unwrap();
    let next: u64 = json_field(&last, "successor_token")
        .unwrap()
        .parse()
        .unwrap();
    assert!(next > first);
    assert_eq!(json_field(&last, "refused_mark"), Some(next.to_string()));
}

/// The demo on a real Redis (explicit --redis), cleaning up its keys.
#[tokio::test(flavor = "multi_thread")]
async fn demo_runs_on_redis() {
    let server = redis().await;
    let dir = workdir("cli-demo-redis");
    let out = output({
        let mut c = redlease(&closed_port_url(), dir.path());
        c.args(["--redis", &server.url(), "demo"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("on Redis at"));
    let mut conn = server.connection().await.unwrap();
    let keys: Vec<String> = redlease::redis::client::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "the demo removed its keys: {keys:?}");
}

/// `status --check` reports the server's guarantees: the kit's default server persists
/// nothing (exit 78, the risk named); a server with AOF fsynced on every write has no known
/// risk (exit 0). `--json` gives one object.
#[tokio::test(flavor = "multi_thread")]
async fn status_check_reports_the_stores_guarantees() {
    let dir = workdir("cli-status-check");
    let risky = redis().await;
    let out = output({
        let mut c = redlease(&risky.url(), dir.path());
        c.args(["status", "--check"]);
        c
    })
    .await;
    assert_eq!(code(&out), 78, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("persistence: None"), "{text}");
    assert!(text.contains("risk:        no persistence"), "{text}");
    let json = output({
        let mut c = redlease(&risky.url(), dir.path());
        c.args(["--json", "status", "--check", "--name", "svc"]);
        c
    })
    .await;
    assert_eq!(code(&json), 78, "{}", stderr(&json));
    let last = stdout(&json).lines().last().unwrap_or("").to_owned();
    assert_eq!(
        json_field(&last, "fence_keys_at_risk").as_deref(),
        Some("true"),
        "{last}"
    );

    let durable = lease_testkit::redis::RedisServer::builder()
        .persistence(lease_testkit::redis::Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let out = output({
        let mut c = redlease(&durable.url(), dir.path());
        c.args(["status", "--check"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("risks:       none"),
        "{}",
        stdout(&out)
    );
    // The report names the server and its version.
    assert!(
        stdout(&out).contains("server:      redis ")
            || stdout(&out).contains("server:      valkey "),
        "{}",
        stdout(&out)
    );
}

/// A server that will not disclose its persistence (a user without `CONFIG`, as on managed
/// services) fails `status --check`: "cannot confirm persistence", never "no risk".
#[tokio::test(flavor = "multi_thread")]
async fn status_check_fails_when_persistence_cannot_be_confirmed() {
    let dir = workdir("cli-status-unconfirmed");
    let durable = lease_testkit::redis::RedisServer::builder()
        .persistence(lease_testkit::redis::Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let mut admin = durable.connection().await.unwrap();
    let _: () = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        redlease::redis::client::cmd("ACL")
            .arg(&["SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config"])
            .query_async(&mut admin),
    )
    .await
    .unwrap()
    .unwrap();
    let out = output({
        let mut c = redlease(&durable.url_for_user("noconfig", "pw"), dir.path());
        c.args(["status", "--check"]);
        c
    })
    .await;
    assert_eq!(code(&out), 78, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("risk:        cannot confirm persistence"),
        "{text}"
    );
    assert!(
        text.contains("risk:        cannot confirm eviction"),
        "{text}"
    );
    assert!(!text.contains("risks:       none"), "{text}");
}
