//! `redlease run|lock --health-addr`: the sidecar endpoint, driven with a real (hand-written)
//! HTTP/1.1 client against `redlease` processes on a real Redis. Each process binds port 0
//! and reports the address it bound on stderr (`health_listening`), so no port is guessed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The bound of one HTTP exchange (the server bounds its own reads and writes by 5 s).
const HTTP_BOUND: Duration = Duration::from_secs(10);

/// One HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// Sends `METHOD PATH HTTP/1.1` and reads the response to the end (the server closes).
async fn http(addr: &str, method: &str, path: &str) -> Reply {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send request");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read response");
        raw
    };
    let raw = tokio::time::timeout(HTTP_BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no response within {HTTP_BOUND:?}"));
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status: u16 = parts.next().expect("status").parse().expect("status code");
    let headers: BTreeMap<String, String> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header line");
            (k.to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    assert_eq!(headers.get("connection").map(String::as_str), Some("close"));
    let length: usize = headers
        .get("content-length")
        .expect("content-length")
        .parse()
        .expect("a length");
    if method == "HEAD" {
        assert!(body.is_empty(), "HEAD has no body: {body:?}");
    } else {
        assert_eq!(body.len(), length, "Content-Length matches the body");
    }
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

async fn get(addr: &str, path: &str) -> Reply {
    http(addr, "GET", path).await
}

/// The address a `--json` process reports it serves on.
async fn health_addr(p: &Proc) -> String {
    let line = p.wait_line("\"event\":\"health_listening\"").await;
    let addr = json_field(&line, "addr").expect("addr field");
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "the bound port is reported: {addr}"
    );
    addr
}

/// `redlease --json run --name NAME --ttl 1s --health-addr 127.0.0.1:0 ... -- CMD TAG`.
fn run_cmd(url: &str, dir: &std::path::Path, name: &str, id: &str, extra: &[&str]) -> Proc {
    let job = job_script(dir);
    let mut c = redlease(url, dir);
    c.args([
        "--json",
        "run",
        "--name",
        name,
        "--ttl",
        "1s",
        "--instance-id",
        id,
        "--grace",
        "300ms",
        "--health-addr",
        "127.0.0.1:0",
    ])
    .args(extra)
    .arg("--")
    .arg(&job)
    .arg(id);
    let mut p = Proc::spawn(c);
    p.cleanup_group_from(dir.join(format!("{id}.pid")));
    p
}

/// Polls `GET /leader` until `pred` holds (bounded); returns the body and when it held.
async fn leader_until(addr: &str, pred: impl Fn(&str) -> bool) -> (String, Instant) {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let r = get(addr, "/leader").await;
        assert_eq!(r.status, 200, "{r:?}");
        if pred(&r.body) {
            return (r.body, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "/leader did not change within {EVENTUALLY:?}: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `GET /healthz` until its status is `status` (bounded); returns the body.
async fn healthz_until(addr: &str, status: u16) -> String {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let r = get(addr, "/healthz").await;
        if r.status == status {
            return r.body;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz did not answer {status} within {EVENTUALLY:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One sample of a Prometheus text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses a Prometheus text exposition (format 0.0.4), failing on any line that is not:
/// empty, `# HELP name text`, `# TYPE name counter|gauge|histogram|summary|untyped` (at most
/// once per family, before its samples), another `#` comment, or a sample
/// `name{label="value",...} value [timestamp]` whose family was typed.
fn parse_exposition(text: &str) -> Vec<Sample> {
    fn is_name(s: &str, colon: bool) -> bool {
        let mut chars = s.chars();
        let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
        chars.next().is_some_and(ok_first) && chars.all(|c| ok_first(c) || c.is_ascii_digit())
    }
    fn value(s: &str) -> Option<f64> {
        match s {
            "+Inf" | "Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            "NaN" => Some(f64::NAN),
            _ => s.parse().ok(),
        }
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.split_whitespace().collect();
            match words.first() {
                Some(&"TYPE") => {
                    assert_eq!(words.len(), 3, "TYPE line: {line:?}");
                    assert!(is_name(words[1], true), "TYPE name: {line:?}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&words[2]),
                        "TYPE kind: {line:?}"
                    );
                    let previous = types.insert(words[1].to_owned(), words[2].to_owned());
                    assert!(previous.is_none(), "one TYPE per family: {line:?}");
                }
                Some(&"HELP") => {
                    assert!(
                        words.len() >= 2 && is_name(words[1], true),
                        "HELP: {line:?}"
                    );
                }
                _ => {}
            }
            continue;
        }
        // name, then optional {labels}, then a value and an optional timestamp.
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => panic!("sample without a value: {line:?}"),
        };
        assert!(is_name(name, true), "metric name: {line:?}");
        let mut labels = BTreeMap::new();
        let rest = if let Some(mut inner) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = inner.strip_prefix('}') {
                    break after;
                }
                let eq = inner.find('=').unwrap_or_else(|| panic!("label: {line:?}"));
                let label = &inner[..eq];
                assert!(is_name(label, false), "label name {label:?}: {line:?}");
                let quoted = inner[eq + 1..]
                    .strip_prefix('"')
                    .unwrap_or_else(|| panic!("label value quoted: {line:?}"));
                let mut val = String::new();
                let mut chars = quoted.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => val.push('\n'),
                            Some((_, c @ ('\\' | '"'))) => val.push(c),
                            other => panic!("escape {other:?}: {line:?}"),
                        },
                        Some((i, '"')) => break i,
                        Some((_, c)) => val.push(c),
                        None => panic!("unterminated label value: {line:?}"),
                    }
                };
                labels.insert(label.to_owned(), val);
                inner = &quoted[end + 1..];
                inner = inner.strip_prefix(',').unwrap_or(inner);
            }
        } else {
            rest
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert!(
            rest.starts_with(' ') && (1..=2).contains(&fields.len()),
            "value [timestamp]: {line:?}"
        );
        let v = value(fields[0]).unwrap_or_else(|| panic!("value: {line:?}"));
        if let Some(ts) = fields.get(1) {
            assert!(ts.parse::<i64>().is_ok(), "timestamp: {line:?}");
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                matches!(
                    types.get(base).map(String::as_str),
                    Some("histogram" | "summary")
                )
                .then_some(base)
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "a sample of a typed family (TYPE before samples): {line:?}"
        );
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value: v,
        });
    }
    samples
}

/// The value of the sample `name` with exactly `labels`.
fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

async fn metrics(addr: &str) -> (Vec<Sample>, String) {
    let r = get(addr, "/metrics").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.headers["content-type"].starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers
    );
    (parse_exposition(&r.body), r.body)
}

fn field(obj: &str, name: &str) -> String {
    json_field(obj, name).unwrap_or_else(|| panic!("no {name:?} in {obj}"))
}

/// Two `run --health-addr` instances on one name: exactly one leader on `/leader`; the
/// leader is killed with SIGKILL and the other's `/leader` says `leader` within TTL +
/// acquire interval + slack; `/healthz` is 200; `/metrics` parses as Prometheus text and
/// carries the election's gauges and counters; unknown paths are 404, other methods 405.
#[tokio::test(flavor = "multi_thread")]
async fn leader_role_flips_on_failover_and_metrics_parse() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar");
    let d = dir.path();
    let name = "sidecar";
    let ttl = Duration::from_secs(1);
    let acquire_interval = ttl / 2;
    let slack = Duration::from_millis(1_500);

    let a = run_cmd(&url, d, name, "a", &[]);
    let addr_a = health_addr(&a).await;
    let token_a: u64 = wait_file(&d.join("a.token")).await.parse().unwrap();
    let b = run_cmd(&url, d, name, "b", &[]);
    let addr_b = health_addr(&b).await;
    b.wait_line("\"event\":\"follower\"").await;

    // Exactly one leader, and both name the same holder and token.
    let la = get(&addr_a, "/leader").await;
    let lb = get(&addr_b, "/leader").await;
    assert_eq!(la.status, 200);
    assert_eq!(la.headers["content-type"], "application/json");
    for (obj, id) in [(&la.body, "a"), (&lb.body, "b")] {
        assert_eq!(field(obj, "name"), name, "{obj}");
        assert_eq!(field(obj, "instance"), id, "{obj}");
        assert_eq!(field(obj, "holder"), "a", "{obj}");
        assert_eq!(field(obj, "token"), token_a.to_string(), "{obj}");
        assert_eq!(field(obj, "error"), "null", "{obj}");
        let remaining: u64 = field(obj, "remaining_ttl_ms").parse().unwrap();
        assert!((1..=1000).contains(&remaining), "{obj}");
    }
    assert_eq!(field(&la.body, "role"), "leader");
    assert_eq!(field(&la.body, "is_leader"), "true");
    assert_eq!(field(&lb.body, "role"), "follower");
    assert_eq!(field(&lb.body, "is_leader"), "false");

    for addr in [&addr_a, &addr_b] {
        let h = get(addr, "/healthz").await;
        assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    }
    let (ma, _) = metrics(&addr_a).await;
    let election = [("election", name)];
    assert_eq!(
        sample(&ma, "redlease_election_is_leader", &election),
        Some(1.0)
    );
    assert_eq!(
        sample(&ma, "redlease_election_token", &election),
        Some(token_a as f64)
    );
    assert_eq!(
        sample(&ma, "redlease_elections_won_total", &election),
        Some(1.0)
    );
    let (mb, _) = metrics(&addr_b).await;
    assert_eq!(
        sample(&mb, "redlease_election_is_leader", &election),
        Some(0.0),
        "a follower reports 0"
    );

    // The leader dies without releasing: the follower takes over once the lease expires.
    a.signal("KILL");
    let killed = Instant::now();
    let (lb, flipped) = leader_until(&addr_b, |body| {
        json_field(body, "role").as_deref() == Some("leader")
    })
    .await;
    let took = flipped - killed;
    eprintln!("/leader flipped {took:?} after the leader was killed");
    let bound = ttl + acquire_interval + slack;
    assert!(
        took <= bound,
        "/leader flipped after {took:?}, beyond TTL + acquire interval + slack = {bound:?}"
    );
    assert_eq!(field(&lb, "is_leader"), "true");
    assert_eq!(field(&lb, "holder"), "b");
    let token_b: u64 = field(&lb, "token").parse().unwrap();
    assert!(token_b > token_a, "{token_b} > {token_a}");
    assert_eq!(
        wait_file(&d.join("b.token")).await,
        token_b.to_string(),
        "CMD got the token /leader shows"
    );
    let h = get(&addr_b, "/healthz").await;
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));

    // Let a renewal happen, so its histogram has samples.
    b.wait_line("\"event\":\"elected\"").await;
    let (mb, text) = metrics(&addr_b).await;
    assert_eq!(
        sample(&mb, "redlease_election_is_leader", &election),
        Some(1.0)
    );
    assert_eq!(
        sample(&mb, "redlease_election_token", &election),
        Some(token_b as f64)
    );
    assert_eq!(
        sample(&mb, "redlease_elections_won_total", &election),
        Some(1.0)
    );
    let names: BTreeSet<&str> = mb.iter().map(|s| s.name.as_str()).collect();
    eprintln!("metric names on /metrics: {names:?}");
    assert!(
        text.contains("# TYPE redlease_election_is_leader gauge"),
        "{text}"
    );
    assert!(
        text.contains("# HELP redlease_election_is_leader "),
        "metrics are described: {text}"
    );

    // HEAD, unknown paths, other methods.
    let head = http(&addr_b, "HEAD", "/metrics").await;
    assert_eq!(head.status, 200);
    assert!(head.headers["content-length"].parse::<usize>().unwrap() > 0);
    assert_eq!(get(&addr_b, "/nope").await.status, 404);
    assert_eq!(get(&addr_b, "/healthz/").await.status, 404);
    let post = http(&addr_b, "POST", "/leader").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.headers["allow"], "GET, HEAD");
    // A malformed request line.
    let bad = http(&addr_b, "GET", "no-slash").await;
    assert_eq!(bad.status, 400);
    drop(b);
}

/// The histogram of renewals appears once the leader renews; its buckets, sum and count
/// parse; the exposition names every family it samples.
#[tokio::test(flavor = "multi_thread")]
async fn renewals_show_as_a_histogram() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar-histogram");
    let d = dir.path();
    let a = run_cmd(&url, d, "sidecar-h", "a", &[]);
    let addr = health_addr(&a).await;
    wait_file(&d.join("a.token")).await;
    let election = [("election", "sidecar-h")];
    let deadline = Instant::now() + EVENTUALLY;
    let samples = loop {
        let (samples, text) = metrics(&addr).await;
        if sample(&samples, "redlease_election_renew_seconds_count", &election)
            .is_some_and(|n| n >= 2.0)
        {
            assert!(
                text.contains("# TYPE redlease_election_renew_seconds histogram"),
                "{text}"
            );
            break samples;
        }
        assert!(Instant::now() < deadline, "no renewals recorded: {text}");
        // Renewals happen every TTL/3: poll, there is no signal for them.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let inf = sample(
        &samples,
        "redlease_election_renew_seconds_bucket",
        &[("election", "sidecar-h"), ("le", "+Inf")],
    )
    .expect("+Inf bucket");
    let count = sample(&samples, "redlease_election_renew_seconds_count", &election).unwrap();
    assert!(inf >= count, "{inf} >= {count}");
    let names: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    eprintln!("metric names on /metrics: {names:?}");
}

/// `lock --fence --health-addr`: `/leader` shows the key held with the token CMD got;
/// `/healthz` is 200 while held, 503 `shutting down` once a signal is being handled.
#[tokio::test(flavor = "multi_thread")]
async fn lock_sidecar_shows_the_held_lock_and_its_token() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar-lock");
    let d = dir.path();
    let job = stubborn_job_script(d);
    let mut c = redlease(&url, d);
    c.args([
        "--json",
        "lock",
        "side-lock",
        "--fence",
        "--ttl",
        "100s",
        "--grace",
        "30s",
        "--health-addr",
        "127.0.0.1:0",
        "--",
    ])
    .arg(&job)
    .arg("l");
    let mut p = Proc::spawn(c);
    p.cleanup_group_from(d.join("l.pid"));
    let addr = health_addr(&p).await;
    let obtained = p.wait_line("\"event\":\"obtained\"").await;
    let token = field(&obtained, "token");
    assert!(token.parse::<u64>().is_ok(), "{obtained}");
    wait_file(&d.join("l.pid")).await;

    let l = get(&addr, "/leader").await;
    assert_eq!(l.status, 200);
    assert_eq!(field(&l.body, "key"), "side-lock");
    assert_eq!(field(&l.body, "state"), "held");
    assert_eq!(field(&l.body, "held"), "true");
    assert_eq!(field(&l.body, "token"), token);
    let h = get(&addr, "/healthz").await;
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    let (m, _) = metrics(&addr).await;
    let names: BTreeSet<&str> = m.iter().map(|s| s.name.as_str()).collect();
    eprintln!("metric names on /metrics: {names:?}");
    assert_eq!(
        sample(
            &m,
            "redlease_lock_obtain_seconds_count",
            &[("lock", "side-lock")]
        ),
        Some(1.0)
    );

    // SIGTERM: CMD ignores it, so redlease waits out its grace: meanwhile, 503.
    p.signal("TERM");
    let why = healthz_until(&addr, 503).await;
    assert_eq!(why, "unavailable: shutting down\n");
    // A second signal kills CMD at once; the lock is released; exit 143.
    p.signal("TERM");
    let status = p.wait_exit().await;
    assert_eq!(status.code(), Some(143), "{:#?}", p.lines());
}

/// `run`: `/healthz` turns 503 once the store has not answered for longer than the TTL (Redis
/// frozen), with the reason, and 200 again once it answers.
#[tokio::test(flavor = "multi_thread")]
async fn healthz_reports_an_unreachable_store_and_shutdown() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar-health");
    let d = dir.path();
    let a = run_cmd(&url, d, "sidecar-u", "a", &["--keep-running"]);
    let addr = health_addr(&a).await;
    wait_file(&d.join("a.token")).await;
    assert_eq!(get(&addr, "/healthz").await.status, 200);

    server.pause().await.expect("pause redis");
    let why = healthz_until(&addr, 503).await;
    assert!(
        why.starts_with("unavailable: the store has not answered for "),
        "{why}"
    );
    assert!(why.contains("longer than the TTL, 1s"), "{why}");
    let l = get(&addr, "/leader").await;
    assert_eq!(field(&l.body, "is_leader"), "false", "{}", l.body);
    assert_ne!(field(&l.body, "error"), "null", "{}", l.body);

    server.resume().await.expect("resume redis");
    assert_eq!(healthz_until(&addr, 200).await, "ok\n");

    drop(a);
}

/// A `run` whose CMD ignores SIGTERM: `/healthz` is 503 `shutting down` during the grace.
#[tokio::test(flavor = "multi_thread")]
async fn healthz_is_unavailable_while_shutting_down() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar-stop");
    let d = dir.path();
    let job = stubborn_job_script(d);
    let mut c = redlease(&url, d);
    c.args([
        "--json",
        "run",
        "--name",
        "sidecar-s",
        "--ttl",
        "100s",
        "--grace",
        "30s",
        "--health-addr",
        "127.0.0.1:0",
        "--",
    ])
    .arg(&job)
    .arg("s");
    let mut p = Proc::spawn(c);
    p.cleanup_group_from(d.join("s.pid"));
    let addr = health_addr(&p).await;
    wait_file(&d.join("s.pid")).await;
    assert_eq!(healthz_until(&addr, 200).await, "ok\n");
    p.signal("TERM");
    assert_eq!(
        healthz_until(&addr, 503).await,
        "unavailable: shutting down\n"
    );
    p.signal("TERM");
    assert_eq!(p.wait_exit().await.code(), Some(143), "{:#?}", p.lines());
}

/// A malformed address is refused before anything else (exit 64, one line), from the flag or
/// `REDLEASE_HEALTH_ADDR`; an address in use is exit 74, one line naming it. Neither
/// connects to Redis (the URL points nowhere).
#[tokio::test(flavor = "multi_thread")]
async fn bad_or_busy_addresses_are_refused() {
    let dir = workdir("cli-sidecar-addr");
    let d = dir.path();
    let nowhere = "redis://127.0.0.1:1";
    for cmd in ["run", "lock"] {
        let target: &[&str] = if cmd == "run" {
            &["run", "--name", "x"]
        } else {
            &["lock", "x"]
        };
        let out = output({
            let mut c = redlease(nowhere, d);
            c.args(target)
                .args(["--health-addr", "localhost:http", "--", "true"]);
            c
        })
        .await;
        assert_eq!(code(&out), 64, "{cmd}: {}", stderr(&out));
        assert!(assert_one_line(&out).contains("--health-addr"));

        let out = output({
            let mut c = redlease(nowhere, d);
            c.env("REDLEASE_HEALTH_ADDR", "not an address")
                .args(target)
                .args(["--", "true"]);
            c
        })
        .await;
        assert_eq!(code(&out), 64, "{cmd}: {}", stderr(&out));

        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = busy.local_addr().unwrap().to_string();
        let out = output({
            let mut c = redlease(nowhere, d);
            c.args(target).args(["--health-addr", &taken, "--", "true"]);
            c
        })
        .await;
        assert_eq!(code(&out), 74, "{cmd}: {}", stderr(&out));
        let line = assert_one_line(&out);
        assert!(line.contains(&taken), "{line}");
    }
}

/// Idle connections cannot starve a probe: over the connection limit (32 being answered) a
/// connection is accepted and gets a 503 at once; idle ones are dropped after the short head
/// timeout (1 s: 408), after which probes are answered normally again.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_cannot_starve_probes() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sidecar-idle");
    let d = dir.path();
    let a = run_cmd(&url, d, "sidecar-idle", "a", &[]);
    let addr = health_addr(&a).await;
    wait_file(&d.join("a.token")).await;
    // /leader is answered from the last probe: no round trip per request.
    let before = Instant::now();
    for _ in 0..50 {
        assert_eq!(get(&addr, "/leader").await.status, 200);
    }
    eprintln!("50 /leader requests took {:?}", before.elapsed());

    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    let asked = Instant::now();
    let busy = get(&addr, "/healthz").await;
    let took = asked.elapsed();
    assert_eq!(busy.status, 503, "over the limit: {busy:?}");
    assert_eq!(busy.body, "too many connections\n");
    assert!(
        took < Duration::from_secs(1),
        "answered at once, not after {took:?}"
    );
    // The idle ones time out (408) and free their slots.
    assert_eq!(healthz_until(&addr, 200).await, "ok\n");
    drop(idle);
    drop(a);
}
