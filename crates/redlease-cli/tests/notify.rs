//! systemd's readiness protocol: with `NOTIFY_SOCKET` set, `redlease run` sends `READY=1`
//! when it contends, `STATUS=leader ...` / `STATUS=follower ...` on its transitions and
//! `STOPPING=1` on SIGTERM, as datagrams on the socket the test binds (a real server; no
//! systemd needed).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;

use common::*;

/// The socket playing systemd: every receive bounded by [`EVENTUALLY`].
struct Systemd(UnixDatagram);

impl Systemd {
    fn bind(path: &Path) -> Systemd {
        let sock = UnixDatagram::bind(path).expect("bind");
        sock.set_read_timeout(Some(EVENTUALLY)).unwrap();
        Systemd(sock)
    }

    /// Messages until one contains `needle` (bounded); all of them, in order.
    async fn until(&self, needle: &str) -> Vec<String> {
        let sock = self.0.try_clone().unwrap();
        let needle = needle.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = sock.recv(&mut buf).unwrap_or_else(|e| {
                    panic!("no {needle:?} within {EVENTUALLY:?} ({e}); got {seen:#?}")
                });
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = msg.contains(&needle);
                seen.push(msg);
                if done {
                    return seen;
                }
            }
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_tells_systemd_ready_and_each_role() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sdnotify");
    let d = dir.path();
    let leader_sd = Systemd::bind(&d.join("leader.sock"));
    let follower_sd = Systemd::bind(&d.join("follower.sock"));
    let script = job_script(d);

    let mut leader = redlease(&url, d);
    leader
        .env("NOTIFY_SOCKET", d.join("leader.sock"))
        .args(["run", "--name", "sd", "--ttl", "3s", "--"])
        .arg(&script)
        .arg("leader");
    let mut leader = Proc::spawn(leader);
    leader.cleanup_group_from(d.join("leader.pgid"));
    let seen = leader_sd.until("STATUS=leader").await;
    assert!(seen[0].starts_with("READY=1\n"), "READY first: {seen:#?}");
    assert!(seen[0].contains("STATUS=contending for sd"), "{seen:#?}");
    assert!(seen.last().unwrap().contains("token"), "{seen:#?}");

    let mut follower = redlease(&url, d);
    follower
        .env("NOTIFY_SOCKET", d.join("follower.sock"))
        .args(["run", "--name", "sd", "--ttl", "3s", "--"])
        .arg(&script)
        .arg("follower");
    let mut follower = Proc::spawn(follower);
    follower.cleanup_group_from(d.join("follower.pgid"));
    let seen = follower_sd.until("STATUS=follower").await;
    assert!(seen[0].starts_with("READY=1"), "{seen:#?}");
    assert!(
        !seen.iter().any(|m| m.contains("STATUS=leader")),
        "the follower never claimed leadership: {seen:#?}"
    );

    leader.signal("TERM");
    leader_sd.until("STOPPING=1").await;
    leader.wait_exit().await;
    // The follower takes over and says so.
    follower_sd.until("STATUS=leader").await;
    follower.signal("TERM");
    follower.wait_exit().await;
}

/// Without NOTIFY_SOCKET nothing is sent and nothing fails; a socket nobody listens on is no
/// error either (best effort).
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_listener_is_no_error() {
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-sdnotify-none");
    let d = dir.path();
    let out = output({
        let mut c = redlease(&url, d);
        c.env("NOTIFY_SOCKET", d.join("nobody.sock"))
            .args(["run", "--name", "sd2", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
