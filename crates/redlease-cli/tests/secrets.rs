//! Secrets never printed, and server text and ids escaped before they reach a terminal.
//!
//! - A password-bearing URL: no line (human or `--json`, progress or error) shows the
//!   password; CMD gets `REDLEASE_REDIS_URL` without it, unless `--export-redis-password`.
//! - An instance id carrying terminal escape sequences (as another instance, hence the
//!   server, reports it) reaches the follower's stderr escaped, never raw.

mod common;

use std::time::Duration;

use common::*;
use lease_testkit::redis::RedisServer;

const PASSWORD: &str = "s3cret-Pa55word";

async fn server_with_password() -> RedisServer {
    RedisServer::builder()
        .requirepass(PASSWORD)
        .start()
        .await
        .expect("redis with a password")
}

fn env_script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("env-job.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\necho \"$REDLEASE_REDIS_URL\" > \"$1.url\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn the_password_is_never_printed_nor_exported_by_default() {
    let server = server_with_password().await;
    let url = server.url();
    assert!(
        url.contains(PASSWORD),
        "the kit's URL carries the password: {url}"
    );
    let dir = workdir("cli-secrets");
    let d = dir.path();
    let job = env_script(d);
    for json in [false, true] {
        let tag = if json { "j" } else { "h" };
        let mut c = redlease(&url, d);
        if json {
            c.arg("--json");
        }
        c.args(["run", "--name", "secret-run", "--"])
            .arg(&job)
            .arg(tag);
        let out = output(c).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("contending"), "{err}");
        assert!(!err.contains(PASSWORD), "the password was printed: {err}");
        let exported = wait_file(&d.join(format!("{tag}.url"))).await;
        assert!(
            !exported.contains(PASSWORD),
            "CMD got the password: {exported}"
        );
        assert!(exported.starts_with("redis://"), "{exported}");
        assert!(exported.contains(&server.port().to_string()), "{exported}");
    }
    // On request, CMD gets it.
    let mut c = redlease(&url, d);
    c.args([
        "--export-redis-password",
        "run",
        "--name",
        "secret-run",
        "--",
    ])
    .arg(&job)
    .arg("x");
    let out = output(c).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(wait_file(&d.join("x.url")).await, url.trim_end());

    // Errors too: a wrong password, a refused connection, a malformed URL with a password.
    let wrong = url.replace(PASSWORD, "Wr0ng-password-42");
    let closed = "redis://:Unreachable-pass-7@127.0.0.1:1/".to_owned();
    for (bad, secret) in [
        (wrong.as_str(), "Wr0ng-password-42"),
        (closed.as_str(), "Unreachable-pass-7"),
    ] {
        for json in [false, true] {
            let mut c = redlease(bad, d);
            if json {
                c.arg("--json");
            }
            c.args(["status", "--name", "secret-run"]);
            let out = output(c).await;
            let all = format!("{}{}", stdout(&out), stderr(&out));
            assert_ne!(code(&out), 0, "{all}");
            assert!(!all.contains(secret), "the password was printed: {all}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn instance_ids_with_escape_sequences_are_escaped() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-escape");
    let d = dir.path();
    let job = job_script(d);
    let evil = "evil\u{1b}]0;owned\u{7}\u{1b}[31m";
    let mut leader = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["run", "--name", "escape", "--instance-id", evil, "--"])
            .arg(&job)
            .arg("e");
        c
    });
    leader.cleanup_group_from(d.join("e.pid"));
    wait_file(&d.join("e.token")).await;
    let mut follower = Proc::spawn({
        let mut c = redlease(&url, d);
        c.args(["run", "--name", "escape", "--instance-id", "plain", "--"])
            .arg(&job)
            .arg("f");
        c
    });
    follower.cleanup_group_from(d.join("f.pid"));
    let line = follower.wait_line("following").await;
    assert!(
        !line.contains('\u{1b}') && !line.contains('\u{7}'),
        "raw control characters reached the terminal: {line:?}"
    );
    assert!(line.contains("evil\\u{1b}]0;owned\\u{7}"), "{line:?}");
    for l in leader.lines().iter().chain(follower.lines().iter()) {
        assert!(!l.contains('\u{1b}'), "raw ESC in {l:?}");
    }
    // `status` prints the holder as the server stores it: escaped too, human and JSON.
    for json in [false, true] {
        let mut c = redlease(&url, d);
        if json {
            c.arg("--json");
        }
        c.args(["status", "--name", "escape"]);
        let out = output(c).await;
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(code(&out), 0, "{all}");
        assert!(all.contains("evil"), "{all}");
        assert!(!all.contains('\u{1b}'), "raw ESC: {all:?}");
    }
    follower.signal("TERM");
    leader.signal("TERM");
    let _ = tokio::time::timeout(Duration::from_secs(30), leader.wait_exit()).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), follower.wait_exit()).await;
}
