//! `redlease status --watch`: one line per change of leader on a real Redis, until SIGTERM
//! (exit 0); JSON lines with `--json`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// Reads the child's stdout lines on a thread; `next` waits (bounded) for the next one.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn next(&self) -> String {
        self.0
            .recv_timeout(EVENTUALLY)
            .expect("a line within the bound")
    }
}

/// Sets the holder and the counter in one step (as an acquire does): no half state is seen.
async fn set(
    conn: &mut redlease::redis::client::aio::MultiplexedConnection,
    holder: &str,
    token: &str,
) {
    let _: () = redlease::redis::client::cmd("MSET")
        .arg("svc:leader")
        .arg(holder)
        .arg("svc:fence")
        .arg(token)
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn status_watch_prints_each_change_of_leader() {
    let server = redis().await;
    let dir = workdir("cli-watch");
    for json in [false, true] {
        let mut conn = server.connection().await.unwrap();
        let _: () = redlease::redis::client::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut cmd = redlease(&server.url(), dir.path());
        if json {
            cmd.arg("--json");
        }
        cmd.args(["status", "--name", "svc", "--watch", "--every", "20ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn redlease");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let lines = Lines(rx);
        let expect = |line: String, holder: Option<&str>, token: Option<u64>| {
            if json {
                assert_eq!(
                    json_field(&line, "holder"),
                    Some(holder.map_or("null".to_owned(), str::to_owned)),
                    "{line}"
                );
                assert_eq!(
                    json_field(&line, "token"),
                    Some(token.map_or("null".to_owned(), |t| t.to_string())),
                    "{line}"
                );
            } else {
                let want = match (holder, token) {
                    (Some(h), Some(t)) => format!("leader: {h} (token {t})"),
                    (Some(h), None) => format!("leader: {h}"),
                    (None, _) => "leader: (none)".to_owned(),
                };
                assert_eq!(line, want);
            }
        };
        expect(lines.next(), None, None);
        set(&mut conn, "a", "1").await;
        expect(lines.next(), Some("a"), Some(1));
        set(&mut conn, "b", "2").await;
        expect(lines.next(), Some("b"), Some(2));
        let _: () = redlease::redis::client::cmd("DEL")
            .arg("svc:leader")
            .query_async(&mut conn)
            .await
            .unwrap();
        expect(lines.next(), None, None);
        signal(child.id(), "TERM");
        let deadline = std::time::Instant::now() + EVENTUALLY;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "no exit on SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(status.code(), Some(0));
    }
}
