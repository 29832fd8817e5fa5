//! `redlease run`, `status` and `fence` driven as processes against a real Redis.

mod common;

use common::*;

/// Two `run` processes; the leader is frozen with SIGSTOP; the other takes over and its CMD
/// sees a higher token; the frozen one, resumed, notices it lost and stops its CMD (exit 72).
/// Fenced writes with the old token are refused (exit 3), with the new one applied (exit 0);
/// `status --json` reports the new holder, its token and the mark.
#[tokio::test(flavor = "multi_thread")]
async fn frozen_leader_is_replaced_and_stops_its_cmd_when_it_resumes() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-failover");
    let d = dir.path();
    let job = job_script(d);
    let name = "cli-failover";

    let mut a = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "run",
            "--name",
            name,
            "--ttl",
            "1s",
            "--instance-id",
            "a",
            "--grace",
            "300ms",
            "--",
        ])
        .arg(&job)
        .arg("a");
        c
    });
    a.cleanup_group_from(d.join("a.pid"));
    let token_a: u64 = wait_file(&d.join("a.token")).await.parse().unwrap();
    a.wait_line("elected leader with token").await;

    let mut b = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "run",
            "--name",
            name,
            "--ttl",
            "1s",
            "--instance-id",
            "b",
            "--grace",
            "300ms",
            "--",
        ])
        .arg(&job)
        .arg("b");
        c
    });
    b.cleanup_group_from(d.join("b.pid"));
    b.wait_line("following a").await;
    assert!(
        !d.join("b.token").exists(),
        "b does not run CMD while a leads"
    );

    // Freeze the leader (its CMD keeps running: it is in a process group of its own).
    a.signal("STOP");
    let token_b: u64 = wait_file(&d.join("b.token")).await.parse().unwrap();
    assert!(
        token_b > token_a,
        "the successor's CMD sees a higher token: {token_b} > {token_a}"
    );
    assert!(
        !d.join("a.term").exists(),
        "a is frozen: it has not stopped its CMD yet"
    );

    // status --json: the new holder, its token, a remaining TTL, the mark stamped at election.
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--name", name]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = stdout(&out);
    assert_eq!(json_field(&status, "name").as_deref(), Some(name));
    assert_eq!(json_field(&status, "holder").as_deref(), Some("b"));
    assert_eq!(json_field(&status, "token"), Some(token_b.to_string()));
    assert_eq!(json_field(&status, "mark"), Some(token_b.to_string()));
    let remaining: u64 = json_field(&status, "remaining_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=1000).contains(&remaining),
        "remaining {remaining} ms within the TTL"
    );

    // Fenced writes from the shell: the old token is refused, the new one applied.
    let fence = |token: u64, value: &str| {
        let mut c = redlease(&url, d);
        c.args(["--json", "fence", "set", "--name", name, "--token"])
            .arg(token.to_string())
            .args(["cli-failover:state", value]);
        c
    };
    let stale = output(fence(token_a, "from a")).await;
    assert_eq!(code(&stale), 3, "stale token refused: {}", stderr(&stale));
    assert_eq!(
        json_field(&stdout(&stale), "applied").as_deref(),
        Some("false")
    );
    assert_eq!(
        json_field(&stdout(&stale), "mark"),
        Some(token_b.to_string())
    );
    let fresh = output(fence(token_b, "from b")).await;
    assert_eq!(code(&fresh), 0, "current token applied: {}", stderr(&fresh));
    let mut conn = server.connection().await.unwrap();
    let value: Option<String> = redlease::redis::client::cmd("GET")
        .arg("cli-failover:state")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        value.as_deref(),
        Some("from b"),
        "only the current term's write landed"
    );

    // Resume the frozen leader: it must notice the lost term and kill its CMD at once (the
    // paused-supervisor case no supervisor covers: the fencing above is what protects).
    a.signal("CONT");
    let status_a = a.wait_exit().await;
    assert_eq!(
        status_a.code(),
        Some(72),
        "lost leadership: {:#?}",
        a.lines()
    );
    // Its deadline passed while it was frozen: fail closed, SIGKILL at once (no grace).
    a.wait_line("SIGKILL to CMD's process group").await;
    a.wait_line("CMD stopped after leadership was lost: killed by signal 9")
        .await;
    assert!(
        !d.join("a.term").exists(),
        "no SIGTERM grace past the deadline"
    );
    let pid_a: u32 = wait_file(&d.join("a.pid")).await.parse().unwrap();
    assert!(!job_alive(pid_a), "a's CMD is gone");

    // b still leads; SIGTERM stops its CMD, releases, exits 143.
    assert!(!d.join("b.term").exists());
    b.signal("TERM");
    let status_b = b.wait_exit().await;
    assert_eq!(status_b.code(), Some(143), "{:#?}", b.lines());
    assert_eq!(wait_file(&d.join("b.term")).await, "term");
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--name", name]);
        c
    })
    .await;
    let status = stdout(&out);
    assert_eq!(
        json_field(&status, "holder").as_deref(),
        Some("null"),
        "released: {status}"
    );
    assert_eq!(json_field(&status, "token").as_deref(), Some("null"));
    assert_eq!(json_field(&status, "remaining_ms").as_deref(), Some("null"));
    assert_eq!(json_field(&status, "mark"), Some(token_b.to_string()));
}

/// CMD's exit status is redlease's; the lease is released when CMD exits; a CMD killed by a
/// signal gives 128 + the signal.
#[tokio::test(flavor = "multi_thread")]
async fn cmd_status_passes_through_and_the_lease_is_released() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-run-exit");
    let d = dir.path();

    let out = output({
        let mut c = redlease(&url, d);
        c.args(["run", "--name", "exit5", "--", "sh", "-c", "test -n \"$REDLEASE_TOKEN\" && test \"$REDLEASE_NAME\" = exit5 && test -n \"$REDLEASE_LEADER_ID\" && test -z \"$REDLEASE_INSTANCE_ID\" && test -n \"$REDLEASE_REDIS_URL\" && exit 5"]);
        c
    })
    .await;
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    let status = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--name", "exit5"]);
        c
    })
    .await;
    assert_eq!(
        json_field(&stdout(&status), "holder").as_deref(),
        Some("null"),
        "released when CMD exited"
    );
    // The term's token, clock-floored (the default): at least the server's time in µs.
    let mark: u64 = json_field(&stdout(&status), "mark")
        .and_then(|m| m.parse().ok())
        .expect("a mark");
    assert!(
        mark > 1_600_000_000_000_000,
        "a clock-floored token: {mark}"
    );

    let killed = output({
        let mut c = redlease(&url, d);
        c.args([
            "run",
            "--name",
            "killed",
            "--",
            "sh",
            "-c",
            "kill -s KILL $$",
        ]);
        c
    })
    .await;
    assert_eq!(code(&killed), 128 + 9, "{}", stderr(&killed));
}

/// With --keep-running, redlease contends again after CMD exits: CMD runs again, under a new
/// term with a higher token.
#[tokio::test(flavor = "multi_thread")]
async fn keep_running_contends_again_after_cmd_exits() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-keep-running");
    let d = dir.path();
    let mut p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "run",
            "--name",
            "again",
            "--ttl",
            "500ms",
            "--keep-running",
            "--",
            "sh",
            "-c",
            "echo $REDLEASE_TOKEN >> tokens",
        ]);
        c
    });
    let deadline = std::time::Instant::now() + EVENTUALLY;
    let tokens = loop {
        let t: Vec<u64> = std::fs::read_to_string(d.join("tokens"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if t.len() >= 3 {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "CMD did not run again: {:#?}",
            p.lines()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "a new term each time: {tokens:?}"
    );
    p.signal("INT");
    assert_eq!(p.wait_exit().await.code(), Some(130), "{:#?}", p.lines());
}
