//! `redlease status --lock KEY` and `redlease unlock KEY` driven as processes against a real
//! Redis: the holder shown, an owner-checked release, a forced release that fences the old
//! holder out (its `fence set` refused, exit 3) and admits the next, truthful exit codes.

mod common;

use std::path::Path;

use common::*;

/// A `lock --fence KEY` whose CMD writes its token to `tok` and its group to `job.pgid`, then
/// sleeps; returned once the token is written.
async fn holder(url: &str, d: &Path, key: &str) -> (Proc, u64) {
    let mut cmd = redlease(url, d);
    cmd.args([
        "lock",
        key,
        "--fence",
        "--ttl",
        "3s",
        "--",
        "sh",
        "-c",
        "echo $$ > job.pgid; echo $REDLEASE_TOKEN > tok; exec sleep 60",
    ]);
    let mut p = Proc::spawn(cmd);
    p.cleanup_group_from(d.join("job.pgid"));
    let tok = wait_file(&d.join("tok")).await;
    (p, tok.trim().parse().expect("a token"))
}

async fn run(url: &str, d: &Path, args: &[&str]) -> std::process::Output {
    output({
        let mut c = redlease(url, d);
        c.args(args);
        c
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn status_lock_shows_the_holder_and_unlock_owner_is_checked() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-unlock-owner");
    let d = dir.path();

    let out = run(&url, d, &["--json", "status", "--lock", "job"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json_field(&stdout(&out), "held").as_deref(), Some("false"));
    assert_eq!(json_field(&stdout(&out), "holder").as_deref(), Some("null"));

    let (mut p, token) = holder(&url, d, "job").await;
    let out = run(&url, d, &["--json", "status", "--lock", "job"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let s = stdout(&out);
    assert_eq!(json_field(&s, "held").as_deref(), Some("true"), "{s}");
    let owner = json_field(&s, "holder").expect("holder");
    assert!(
        owner.contains(&p.pid().to_string()),
        "{owner} names the pid"
    );
    let left: u64 = json_field(&s, "remaining_ms").unwrap().parse().unwrap();
    assert!(left > 0 && left <= 3000, "{left}");
    assert_eq!(json_field(&s, "last_token"), Some(token.to_string()));
    assert_eq!(json_field(&s, "mark"), Some(token.to_string()));
    // The text form, as the other status subcommands print it.
    let out = run(&url, d, &["status", "--lock", "job"]).await;
    let s = stdout(&out);
    assert!(s.contains(&format!("holder:     {owner}")), "{s}");
    assert!(s.contains(&format!("last token: {token}")), "{s}");

    // Another owner: not held by it, nothing deleted, exit 1.
    let out = run(&url, d, &["unlock", "job", "--owner", "someone-else"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("not held"), "{}", stdout(&out));
    let out = run(&url, d, &["--json", "status", "--lock", "job"]).await;
    assert_eq!(json_field(&stdout(&out), "held").as_deref(), Some("true"));

    // The holder's own owner: released, and the supervisor learns it lost the lock (72).
    let out = run(&url, d, &["unlock", "job", "--owner", &owner]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("released: job"),
        "{}",
        stdout(&out)
    );
    assert_eq!(p.wait_exit().await.code(), Some(72), "{:#?}", p.lines());
}

#[tokio::test(flavor = "multi_thread")]
async fn unlock_force_fences_out_the_old_holder_and_admits_the_next() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-unlock-force");
    let d = dir.path();
    let (mut p, old) = holder(&url, d, "job").await;
    let tok = old.to_string();
    let out = run(
        &url,
        d,
        &["fence", "set", "--name", "job", "--token", &tok, "out", "a"],
    )
    .await;
    assert_eq!(code(&out), 0, "the holder writes: {}", stderr(&out));

    let out = run(&url, d, &["--json", "unlock", "job", "--force"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let s = stdout(&out);
    assert_eq!(json_field(&s, "released").as_deref(), Some("true"), "{s}");
    let raised: u64 = json_field(&s, "fence").unwrap().parse().unwrap();
    assert!(raised > old, "{old} then {raised}");
    assert!(
        stderr(&out).contains("\"event\":\"forced\""),
        "logged: {}",
        stderr(&out)
    );

    // The broken holder's fenced write is refused (exit 3), and its supervisor stops (72).
    let out = run(
        &url,
        d,
        &["fence", "set", "--name", "job", "--token", &tok, "out", "b"],
    )
    .await;
    assert_eq!(code(&out), 3, "stale: {}", stderr(&out));
    assert_eq!(p.wait_exit().await.code(), Some(72), "{:#?}", p.lines());

    // The next holder's token is above the raised mark and its writes are accepted.
    let out = run(
        &url,
        d,
        &[
            "lock",
            "job",
            "--fence",
            "--",
            "sh",
            "-c",
            "echo $REDLEASE_TOKEN",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > raised, "{raised} then {next}");
    let out = run(
        &url,
        d,
        &[
            "fence",
            "set",
            "--name",
            "job",
            "--token",
            &next.to_string(),
            "out",
            "c",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn unlock_says_truthfully_when_nothing_was_held_or_nothing_is_known() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-unlock-free");
    let d = dir.path();
    let out = run(&url, d, &["unlock", "free", "--force"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("not held: free"),
        "{}",
        stdout(&out)
    );
    let out = run(&url, d, &["unlock", "free", "--owner", "x"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    // Neither --owner nor --force: a usage error; both: too.
    assert_eq!(code(&run(&url, d, &["unlock", "free"]).await), 2);
    assert_eq!(
        code(&run(&url, d, &["unlock", "free", "--force", "--owner", "x"]).await),
        2
    );
    // A bad key or owner: refused before any round trip.
    let out = run(&url, d, &["unlock", "", "--force"]).await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    let out = run(&url, d, &["unlock", "k", "--owner", ""]).await;
    assert_eq!(code(&out), 64, "{}", stderr(&out));

    // No server: unavailable (69), never "not held".
    server.kill().await.unwrap();
    let out = run(&url, d, &["unlock", "free", "--force"]).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let out = run(&url, d, &["status", "--lock", "free"]).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
}
