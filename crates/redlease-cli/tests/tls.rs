//! The command over TLS: `rediss://` with `--tls-ca` (or `SSL_CERT_FILE`), mutual TLS with
//! `--tls-cert`/`--tls-key`, and the failures: an untrusted server exits 69 naming the
//! reason, a half-given client identity exits 64. TLS servers run as processes only.

mod common;

use common::*;
use lease_testkit::RedisServer;
use lease_testkit::tls::{ClientAuth, TestPki, Validity};

async fn tls_server(pki: &TestPki, auth: ClientAuth) -> RedisServer {
    let cert = pki
        .server_cert(&["localhost", "127.0.0.1"], Validity::Current)
        .expect("server certificate");
    let server = RedisServer::builder()
        .tls_with(&cert, auth)
        .start()
        .await
        .expect("start redis with TLS");
    eprintln!(
        "TLS server (process mode: TLS servers are processes only) at {:?}",
        server.tls_addr()
    );
    server
}

/// A `redlease` command on `url` with no TLS variables inherited from the environment.
fn cli(url: &str, dir: &std::path::Path) -> std::process::Command {
    let mut c = redlease(url, dir);
    for var in [
        "REDLEASE_TLS_CA",
        "REDLEASE_TLS_CERT",
        "REDLEASE_TLS_KEY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ] {
        c.env_remove(var);
    }
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_lock_over_tls() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&pki, ClientAuth::None).await;
    let url = server.tls_url().unwrap();
    let dir = workdir("cli-tls");

    let out = output({
        let mut c = cli(&url, dir.path());
        c.arg("--tls-ca").arg(pki.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let out = output({
        let mut c = cli(&url, dir.path());
        c.env("REDLEASE_TLS_CA", pki.ca_file());
        c.args([
            "lock",
            "{j}:lock",
            "--fence",
            "--",
            "sh",
            "-c",
            "test -n \"$REDLEASE_TOKEN\"",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // SSL_CERT_FILE names the trusted bundle, as with OpenSSL-based tools.
    let out = output({
        let mut c = cli(&url, dir.path());
        c.env("SSL_CERT_FILE", pki.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_from_the_command_line() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&pki, ClientAuth::Required).await;
    let url = server.tls_url().unwrap();
    let client = pki.client_cert("cli").unwrap();
    let dir = workdir("cli-mtls");

    let out = output({
        let mut c = cli(&url, dir.path());
        c.arg("--tls-ca").arg(pki.ca_file());
        c.arg("--tls-cert").arg(client.cert_file());
        c.arg("--tls-key").arg(client.key_file());
        c.args(["lock", "{m}:lock", "--", "true"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let out = output({
        let mut c = cli(&url, dir.path());
        c.arg("--tls-ca").arg(pki.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 69, "{line}");
    assert!(line.contains("client certificate"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_failures_exit_with_a_clear_line() {
    let pki = TestPki::new().unwrap();
    let server = tls_server(&pki, ClientAuth::None).await;
    let url = server.tls_url().unwrap();
    let other = TestPki::new().unwrap();
    let client = pki.client_cert("cli").unwrap();
    let dir = workdir("cli-tls-fail");

    // The server's CA is not trusted (only an unrelated CA is): 69, naming the reason.
    let out = output({
        let mut c = cli(&url, dir.path());
        c.env("SSL_CERT_FILE", other.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 69, "{line}");
    assert!(
        line.contains("TLS") && line.contains("trusted CA"),
        "{line}"
    );

    // A plain URL on the TLS port: 69, suggesting rediss://.
    let plain = format!("redis://{}/", server.tls_addr().unwrap());
    let out = output({
        let mut c = cli(&plain, dir.path());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 69, "{line}");
    assert!(line.contains("rediss://"), "{line}");

    // rediss:// on the plain port: 69, saying it is not TLS.
    let tls_to_plain = format!("rediss://{}/", server.addr());
    let out = output({
        let mut c = cli(&tls_to_plain, dir.path());
        c.arg("--tls-ca").arg(pki.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 69, "{line}");
    assert!(line.contains("did not answer with TLS"), "{line}");

    // --tls-cert without --tls-key, and the reverse: 64 before any connection.
    for (flag, file) in [
        ("--tls-cert", client.cert_file()),
        ("--tls-key", client.key_file()),
    ] {
        let out = output({
            let mut c = cli(&url, dir.path());
            c.arg("--tls-ca").arg(pki.ca_file());
            c.arg(flag).arg(file);
            c.args(["status", "--name", "svc"]);
            c
        })
        .await;
        let line = assert_one_line(&out);
        assert_eq!(code(&out), 64, "{line}");
        assert!(
            line.contains("--tls-key") && line.contains("--tls-cert"),
            "{line}"
        );
    }

    // An unreadable CA file: 64, naming it.
    let out = output({
        let mut c = cli(&url, dir.path());
        c.args(["--tls-ca", "/nonexistent/ca.pem", "status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 64, "{line}");
    assert!(line.contains("/nonexistent/ca.pem"), "{line}");

    // TLS options with a plain URL: 64.
    let out = output({
        let mut c = cli(&server.url(), dir.path());
        c.arg("--tls-ca").arg(pki.ca_file());
        c.args(["status", "--name", "svc"]);
        c
    })
    .await;
    let line = assert_one_line(&out);
    assert_eq!(code(&out), 64, "{line}");
}

/// `run --redlock` over three TLS primaries: each node connects with the `--tls-*` options;
/// an untrusted chain (no `--tls-ca`) is refused with exit 69.
#[tokio::test(flavor = "multi_thread")]
async fn run_on_a_redlock_quorum_over_tls() {
    let pki = TestPki::new().unwrap();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(tls_server(&pki, ClientAuth::None).await);
    }
    let urls: Vec<String> = servers.iter().map(|s| s.tls_url().unwrap()).collect();
    let dir = workdir("cli-tls-redlock");
    let d = dir.path();
    let out = output({
        let mut c = cli("redis://127.0.0.1:1/", d);
        c.arg("--tls-ca").arg(pki.ca_file());
        c.args([
            "--redlock",
            &urls.join(","),
            "run",
            "--name",
            "tls-quorum",
            "--",
        ])
        .args(["sh", "-c", "echo \"$REDLEASE_TOKEN\" > token"]);
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token: u64 = wait_file(&d.join("token")).await.parse().unwrap();
    assert!(token > 0);
    let out = output({
        let mut c = cli("redis://127.0.0.1:1/", d);
        c.args([
            "--redlock",
            &urls.join(","),
            "run",
            "--name",
            "tls-quorum",
            "--",
            "true",
        ]);
        c
    })
    .await;
    assert_eq!(code(&out), 69, "untrusted: {}", stderr(&out));
}
