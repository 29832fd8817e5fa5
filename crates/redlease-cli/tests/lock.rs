//! `redlease lock` driven as processes against a real Redis.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `lock` runs CMD and exits with its status; with --fence, CMD gets a token that increases
/// from one lock to the next.
#[tokio::test(flavor = "multi_thread")]
async fn lock_runs_cmd_and_exits_with_its_status() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-status");
    let d = dir.path();
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "nightly", "--", "sh", "-c", "exit 7"]);
        c
    })
    .await;
    assert_eq!(code(&out), 7, "{}", stderr(&out));

    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = output({
            let mut c = redlease(&url, d);
            c.args([
                "lock",
                "nightly",
                "--fence",
                "--",
                "sh",
                "-c",
                "test \"$REDLEASE_LOCK_KEY\" = nightly && echo $REDLEASE_TOKEN",
            ]);
            c
        })
        .await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        tokens.push(stdout(&out).trim().parse::<u64>().expect("a token"));
    }
    assert!(tokens[1] > tokens[0], "fencing tokens increase: {tokens:?}");
    let mut conn = server.connection().await.unwrap();
    let mark: Option<u64> = redlease::redis::client::cmd("GET")
        .arg("nightly:fence:applied")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        mark,
        Some(tokens[1]),
        "the mark is stamped at <KEY>:fence:applied"
    );
    let held: bool = redlease::redis::client::cmd("EXISTS")
        .arg("nightly")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!held, "released after CMD exited");
}

/// A second `lock` on a held key gives up after --wait with the not-obtained code; once the
/// first is stopped (SIGTERM: CMD stopped, lock released), the key is free at once.
#[tokio::test(flavor = "multi_thread")]
async fn second_lock_is_not_obtained_within_its_wait() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-wait");
    let d = dir.path();
    let job = job_script(d);
    let mut first = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "shared", "--"]).arg(&job).arg("first");
        c
    });
    first.cleanup_group_from(d.join("first.pid"));
    wait_file(&d.join("first.token")).await;

    for wait in ["300ms", "0"] {
        let out = output({
            let mut c = redlease(&url, d);
            c.args([
                "lock",
                "shared",
                "--wait",
                wait,
                "--",
                "sh",
                "-c",
                "touch ran",
            ]);
            c
        })
        .await;
        assert_eq!(
            code(&out),
            71,
            "not obtained (--wait {wait}): {}",
            stderr(&out)
        );
        let last = stderr(&out).lines().last().unwrap_or("").to_owned();
        assert!(last.contains("not obtained"), "{last}");
        assert!(!d.join("ran").exists(), "CMD did not run without the lock");
    }

    first.signal("TERM");
    assert_eq!(
        first.wait_exit().await.code(),
        Some(143),
        "{:#?}",
        first.lines()
    );
    assert_eq!(wait_file(&d.join("first.term")).await, "term");
    let out = output({
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "shared",
            "--wait",
            "0",
            "--",
            "sh",
            "-c",
            "touch ran",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "released on SIGTERM: {}", stderr(&out));
    assert!(d.join("ran").exists());
}

/// Someone else takes the key while CMD runs (the lock expired and was taken): the renewal
/// finds it is not ours, CMD is killed at once, and `lock` exits with the lost code.
#[tokio::test(flavor = "multi_thread")]
async fn lock_taken_over_stops_cmd() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-taken");
    let d = dir.path();
    let job = job_script(d);
    let mut p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "taken", "--ttl", "1s", "--grace", "300ms", "--"])
            .arg(&job)
            .arg("t");
        c
    });
    p.cleanup_group_from(d.join("t.pid"));
    wait_file(&d.join("t.token")).await;
    let mut conn = server.connection().await.unwrap();
    let _: () = redlease::redis::client::cmd("SET")
        .arg("taken")
        .arg("another-owner")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(p.wait_exit().await.code(), Some(72), "{:#?}", p.lines());
    // Someone else holds it: CMD is killed at once (fail closed), not given a grace period.
    let pid: u32 = wait_file(&d.join("t.pid")).await.parse().unwrap();
    assert!(!job_alive(pid), "CMD is gone");
    assert!(!d.join("t.term").exists(), "no SIGTERM and grace: SIGKILL");
    assert!(
        p.lines()
            .iter()
            .any(|l| l.contains("SIGKILL to CMD's process group")),
        "{:#?}",
        p.lines()
    );
    let value: Option<String> = redlease::redis::client::cmd("GET")
        .arg("taken")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        value.as_deref(),
        Some("another-owner"),
        "the new owner's lock is untouched"
    );
}

/// Redis stops answering (SIGSTOP of the server) for longer than the TTL: renewals fail until
/// the lock's deadline, CMD is stopped, and `lock` exits with the lost code.
#[tokio::test(flavor = "multi_thread")]
async fn lock_lost_when_redis_stops_answering() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-paused");
    let d = dir.path();
    let job = job_script(d);
    let mut p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "paused", "--ttl", "1s", "--grace", "300ms", "--"])
            .arg(&job)
            .arg("p");
        c
    });
    p.cleanup_group_from(d.join("p.pid"));
    wait_file(&d.join("p.token")).await;
    server.pause().await.unwrap();
    let status = p.wait_exit().await;
    server.resume().await.unwrap();
    assert_eq!(status.code(), Some(72), "{:#?}", p.lines());
    assert_eq!(
        wait_file(&d.join("p.term")).await,
        "term",
        "CMD got SIGTERM"
    );
}

/// `lock -n 2` is a semaphore: two holders run at once, each with its own fencing token in
/// REDLEASE_TOKEN (and N in REDLEASE_LOCK_PERMITS); a third is not obtained (71); one asking
/// for another count is refused as invalid (64) without running CMD; when a holder stops,
/// its permit is free at once.
#[tokio::test(flavor = "multi_thread")]
async fn lock_n_is_a_semaphore() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-n");
    let d = dir.path();
    let job = job_script(d);
    let mut holders = Vec::new();
    for tag in ["one", "two"] {
        let mut p = Proc::spawn({
            let mut c = redlease(&url, d);
            c.args(["lock", "-n", "2", "{deploy}", "--"])
                .arg(&job)
                .arg(tag);
            c
        });
        p.cleanup_group_from(d.join(format!("{tag}.pid")));
        holders.push(p);
    }
    let one: u64 = wait_file(&d.join("one.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    let two: u64 = wait_file(&d.join("two.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    assert_ne!(one, two, "each permit has its own fencing token");

    // `status --semaphore` shows both holders, the count, and the time each has left.
    let mut c = redlease(&url, d);
    c.args(["status", "--semaphore", "{deploy}"]);
    let out = output(c).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("permits:    2 held of 2"), "{text}");
    assert_eq!(text.matches("holder:").count(), 2, "{text}");
    assert!(
        text.contains(&format!("last token: {}", one.max(two))),
        "{text}"
    );
    let mut c = redlease(&url, d);
    c.args(["--json", "status", "--semaphore", "{deploy}"]);
    let out = output(c).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out).trim().to_owned();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert_eq!(json_field(&line, "permits").as_deref(), Some("2"), "{line}");
    assert_eq!(json_field(&line, "held").as_deref(), Some("2"), "{line}");
    assert_eq!(line.matches("\"remaining_ms\":").count(), 2, "{line}");

    let third = |n: &str, cmd: &str| {
        let mut c = redlease(&url, d);
        c.args([
            "lock", "-n", n, "{deploy}", "--wait", "0", "--", "sh", "-c", cmd,
        ]);
        c
    };
    let out = output(third("2", "touch ran")).await;
    assert_eq!(
        code(&out),
        71,
        "a third holder of two permits: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("all 2 permits held"),
        "{}",
        stderr(&out)
    );
    let out = output(third("3", "touch ran")).await;
    assert_eq!(code(&out), 64, "another count: {}", stderr(&out));
    assert!(stderr(&out).contains("has 2 permits"), "{}", stderr(&out));
    assert!(!d.join("ran").exists(), "CMD never ran without a permit");

    holders[0].signal("TERM");
    assert_eq!(
        holders[0].wait_exit().await.code(),
        Some(143),
        "{:#?}",
        holders[0].lines()
    );
    let out = output(third(
        "2",
        "test \"$REDLEASE_LOCK_PERMITS\" = 2 && echo $REDLEASE_TOKEN",
    ))
    .await;
    assert_eq!(
        code(&out),
        0,
        "the released permit is free at once: {}",
        stderr(&out)
    );
    let token: u64 = stdout(&out).trim().parse().expect("a token");
    assert!(token > one.max(two), "tokens increase across permits");
    holders[1].signal("TERM");
    assert_eq!(holders[1].wait_exit().await.code(), Some(143));
}

/// `lock --fair` hands KEY over in arrival order across processes: two waiters queued one
/// after the other behind a holder run in that order once it stops, each with its own fencing
/// token in REDLEASE_TOKEN; `status --fair` shows the holder and its token and the waiters in
/// that order; `--fair` with `-n` is refused by the argument parser (exit 2).
#[tokio::test(flavor = "multi_thread")]
async fn lock_fair_hands_over_in_arrival_order() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-fair");
    let d = dir.path();
    let job = job_script(d);
    let mut holder = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "--fair", "{q}", "--"])
            .arg(&job)
            .arg("holder");
        c
    });
    holder.cleanup_group_from(d.join("holder.pid"));
    let first: u64 = wait_file(&d.join("holder.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    let mut raw = server.connection().await.expect("raw");
    let mut waiters = Vec::new();
    for (i, tag) in ["a", "b"].into_iter().enumerate() {
        let cmd = format!("echo {tag} $REDLEASE_TOKEN >> order");
        let mut p = Proc::spawn({
            let mut c = redlease(&url, d);
            c.args([
                "lock", "--fair", "{q}", "--wait", "30s", "--", "sh", "-c", &cmd,
            ]);
            c
        });
        p.cleanup_group_from(d.join(format!("{tag}.pid")));
        waiters.push(p);
        // The next waiter starts once this one is queued.
        tokio::time::timeout(std::time::Duration::from_secs(20), async {
            loop {
                let n: usize = redlease::redis::client::cmd("ZCARD")
                    .arg("{q}:queue")
                    .query_async(&mut raw)
                    .await
                    .expect("ZCARD");
                if n > i {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("queued within 20 s");
    }
    // `status --fair` shows the holder with its token, and both waiters in arrival order
    // (their owners name their processes), each with the time its place has left.
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["status", "--fair", "{q}"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("-{}-", holder.pid())),
        "the holder: {text}"
    );
    assert!(text.contains(&format!("token:      {first}")), "{text}");
    assert!(text.contains("waiting:    2"), "{text}");
    let at = |p: &Proc| text.find(&format!("-{}-", p.pid()));
    let (Some(a), Some(b)) = (at(&waiters[0]), at(&waiters[1])) else {
        panic!("both waiters shown: {text}");
    };
    assert!(a < b, "in arrival order: {text}");
    assert!(text.contains("waiter:     1. "), "{text}");
    let out = output({
        let mut c = redlease(&url, d);
        c.args(["--json", "status", "--fair", "{q}"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out).trim().to_owned();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert_eq!(
        json_field(&line, "token"),
        Some(first.to_string()),
        "{line}"
    );
    assert_eq!(json_field(&line, "waiting").as_deref(), Some("2"), "{line}");
    // The holder's remaining_ms and one per waiter.
    assert_eq!(line.matches("\"remaining_ms\":").count(), 3, "{line}");

    holder.signal("TERM");
    assert_eq!(holder.wait_exit().await.code(), Some(143));
    for w in &mut waiters {
        assert_eq!(w.wait_exit().await.code(), Some(0), "{:#?}", w.lines());
    }
    let order = std::fs::read_to_string(d.join("order")).expect("order");
    let lines: Vec<(&str, u64)> = order
        .lines()
        .map(|l| {
            let (tag, token) = l.split_once(' ').expect("tag and token");
            (tag, token.parse().expect("a token"))
        })
        .collect();
    assert_eq!(
        lines.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        ["a", "b"],
        "arrival order: {order}"
    );
    assert!(
        first < lines[0].1 && lines[0].1 < lines[1].1,
        "tokens increase: {order}"
    );

    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "--fair", "-n", "2", "{q}", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}

/// `lock --shared` is a reader: two readers hold KEY at once (each with its own token), a
/// plain `lock` of KEY (the writer) is not obtained while they do, gets in once they are gone
/// (with a token above theirs), and `--shared` with `-n` is refused by the parser.
/// `status --shared` lists the readers while they hold, the writer's waiting mark once it
/// tried, and the writer while it holds.
#[tokio::test(flavor = "multi_thread")]
async fn lock_shared_is_a_reader_and_plain_lock_the_writer() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-shared");
    let d = dir.path();
    let job = job_script(d);
    let mut readers = Vec::new();
    for tag in ["r1", "r2"] {
        let mut p = Proc::spawn({
            let mut c = redlease(&url, d);
            c.args(["lock", "--shared", "{doc}", "--"])
                .arg(&job)
                .arg(tag);
            c
        });
        p.cleanup_group_from(d.join(format!("{tag}.pid")));
        readers.push(p);
    }
    let r1: u64 = wait_file(&d.join("r1.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    let r2: u64 = wait_file(&d.join("r2.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    assert_ne!(r1, r2, "each reader has its own fencing token");

    // `status --shared` lists both readers (their owners name their processes), each with the
    // time its hold has left; no writer waits yet.
    let status = |json: bool| {
        let mut c = redlease(&url, d);
        if json {
            c.arg("--json");
        }
        c.args(["status", "--shared", "{doc}"]);
        c
    };
    let out = output(status(false)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state:      read-held (2 readers)"), "{text}");
    assert_eq!(text.matches("reader:").count(), 2, "{text}");
    for r in &readers {
        assert!(text.contains(&format!("-{}-", r.pid())), "{text}");
    }
    assert!(text.contains("waiting:    -"), "{text}");
    assert!(
        text.contains(&format!("last token: {}", r1.max(r2))),
        "{text}"
    );

    let writer = |wait: &str| {
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "--fence",
            "{doc}",
            "--wait",
            wait,
            "--",
            "sh",
            "-c",
            "echo $REDLEASE_TOKEN",
        ]);
        c
    };
    let out = output(writer("0")).await;
    assert_eq!(
        code(&out),
        71,
        "the writer beside readers: {}",
        stderr(&out)
    );
    // A writer that tries once leaves no waiting mark: a try-lock blocks nobody (issue 54).
    let out = output(status(false)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("waiting:    -"), "{}", stdout(&out));
    // A writer that waits marks the key, shown beside the readers.
    let w0 = d.join("w0.token");
    let mut waiting = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "--fence",
            "{doc}",
            "--wait",
            "20s",
            "--",
            "sh",
            "-c",
            "echo $REDLEASE_TOKEN > \"$0\"",
        ])
        .arg(&w0);
        c
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = output(status(false)).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        if stdout(&out).contains("waiting:    a writer (its mark lapses in") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no waiting mark shown: {}\n{:#?}",
            stdout(&out),
            waiting.lines()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let out = output(status(true)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out).trim().to_owned();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert_eq!(
        json_field(&line, "state").as_deref(),
        Some("read"),
        "{line}"
    );
    assert_eq!(
        json_field(&line, "writer").as_deref(),
        Some("null"),
        "{line}"
    );
    assert_eq!(
        json_field(&line, "writer_waiting").as_deref(),
        Some("true"),
        "{line}"
    );
    assert_eq!(line.matches("\"remaining_ms\":").count(), 2, "{line}");
    assert!(
        !line.contains("writer-waiting"),
        "the mark is no reader: {line}"
    );
    for r in &mut readers {
        r.signal("TERM");
        assert_eq!(r.wait_exit().await.code(), Some(143), "{:#?}", r.lines());
    }
    // The waiting writer gets in once the readers left.
    let token: u64 = wait_file(&w0).await.trim().parse().expect("a token");
    assert_eq!(
        waiting.wait_exit().await.code(),
        Some(0),
        "{:#?}",
        waiting.lines()
    );
    assert!(token > r1.max(r2), "one counter for readers and writers");

    // While a writer holds KEY, `status --shared` shows it, and no reader.
    let mut w = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["lock", "--fence", "{doc}", "--"])
            .arg(&job)
            .arg("w");
        c
    });
    w.cleanup_group_from(d.join("w.pid"));
    let wt: u64 = wait_file(&d.join("w.token"))
        .await
        .trim()
        .parse()
        .expect("a token");
    let out = output(status(false)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state:      write-held"), "{text}");
    assert!(
        text.contains("writer:     ") && text.contains(&format!("-{}-", w.pid())),
        "{text}"
    );
    assert!(!text.contains("reader:"), "{text}");
    assert!(text.contains(&format!("last token: {wt}")), "{text}");
    let out = output(status(true)).await;
    let line = stdout(&out).trim().to_owned();
    assert_eq!(
        json_field(&line, "state").as_deref(),
        Some("write"),
        "{line}"
    );
    assert!(
        json_field(&line, "writer").is_some_and(|o| o.contains(&format!("-{}-", w.pid()))),
        "{line}"
    );
    w.signal("TERM");
    assert_eq!(w.wait_exit().await.code(), Some(143), "{:#?}", w.lines());

    let out = output({
        let mut c = redlease(&url, d);
        c.args(["lock", "--shared", "-n", "2", "{doc}", "--", "true"]);
        c
    })
    .await;
    assert_eq!(
        code(&out),
        2,
        "--shared with -n is a usage error: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}

/// Issue 56: `--max-hold` caps a hold that renews fine. CMD (still running) gets SIGTERM
/// --grace before the hold ends, as when the lock is lost; the lock is released, and `lock`
/// exits 73 (the cap's own code, not 72: nothing was lost). The hold outlived its TTL (it was
/// renewed), and ended within the cap plus generous scheduling slack.
#[tokio::test(flavor = "multi_thread")]
async fn max_hold_stops_cmd_and_exits_73() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-max-hold");
    let d = dir.path();
    let job = job_script(d);
    let started = Instant::now();
    let mut p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "lock",
            "capped",
            "--ttl",
            "300ms",
            "--grace",
            "100ms",
            "--max-hold",
            "1s",
            "--",
        ])
        .arg(&job)
        .arg("m");
        c
    });
    p.cleanup_group_from(d.join("m.pid"));
    wait_file(&d.join("m.token")).await;
    let status = p.wait_exit().await;
    let took = started.elapsed();
    assert_eq!(status.code(), Some(73), "{:#?}", p.lines());
    assert_eq!(
        wait_file(&d.join("m.term")).await,
        "term",
        "CMD got SIGTERM"
    );
    assert!(took >= Duration::from_millis(600), "cut short: {took:?}");
    assert!(took < Duration::from_secs(6), "not capped: {took:?}");
    let lines = p.lines();
    assert!(lines.iter().any(|l| l.contains("--max-hold")), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("lost")), "{lines:#?}");
    let mut conn = server.connection().await.unwrap();
    let value: Option<String> = redlease::redis::client::cmd("GET")
        .arg("capped")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, None, "released at the cap");
}

/// Negative control for the test above: without `--max-hold` the same CMD is still running,
/// under the same lock, well past the 1 s cap (until SIGTERM to redlease).
#[tokio::test(flavor = "multi_thread")]
async fn without_max_hold_the_same_lock_holds_on() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-lock-no-max-hold");
    let d = dir.path();
    let job = job_script(d);
    let mut p = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args([
            "lock", "uncapped", "--ttl", "300ms", "--grace", "100ms", "--",
        ])
        .arg(&job)
        .arg("u");
        c
    });
    p.cleanup_group_from(d.join("u.pid"));
    wait_file(&d.join("u.token")).await;
    // Still held well past the cap the test above sets (bounded: the exit is the failure).
    assert!(
        tokio::time::timeout(Duration::from_millis(2_000), p.wait_exit())
            .await
            .is_err(),
        "exited without a cap: {:#?}",
        p.lines()
    );
    p.signal("TERM");
    assert_eq!(p.wait_exit().await.code(), Some(143), "{:#?}", p.lines());
}

/// A `--max-hold` shorter than `--ttl` is refused before connecting (exit 64).
#[tokio::test(flavor = "multi_thread")]
async fn max_hold_shorter_than_the_ttl_is_refused() {
    let dir = workdir("cli-lock-max-hold-bad");
    let d = dir.path();
    // Nothing listens there: a refusal before connecting is the only way to get 64.
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1", d);
        c.args(["lock", "k", "--ttl", "2s", "--max-hold", "1s", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("--max-hold"), "{}", stderr(&out));
}
