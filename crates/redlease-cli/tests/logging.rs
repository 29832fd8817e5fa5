//! `-v` / `RUST_LOG`: the libraries' warnings reach stderr (the preflight's store risks on a
//! server without persistence), as human lines or JSON lines, and more with `-v`.

mod common;

use common::*;

fn one_shot(url: &str, dir: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let mut c = redlease(url, dir);
    c.args(extra)
        .args(["run", "--name", "logging", "--", "true"]);
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn library_warnings_are_shown() {
    // The kit's default server has no persistence: the preflight warns the tokens may regress.
    let server = redis().await;
    let url = server.url();
    let dir = workdir("cli-logging");
    let d = dir.path();

    let out = output(one_shot(&url, d, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.contains("WARN") && l.contains("store risk")),
        "the preflight's warning is shown by default: {err}"
    );

    let out = output(one_shot(&url, d, &["--json"])).await;
    let err = stderr(&out);
    let warn = err
        .lines()
        .find(|l| l.contains("\"event\":\"log\"") && l.contains("store risk"))
        .unwrap_or_else(|| panic!("a JSON log line: {err}"));
    assert_eq!(json_field(warn, "level").as_deref(), Some("WARN"), "{warn}");
    for line in err.lines() {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "every line is JSON: {line}"
        );
    }

    // -v adds the libraries' info events ("elected leader"); RUST_LOG replaces the level.
    let out = output(one_shot(&url, d, &["-v"])).await;
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.contains("INFO") && l.contains("elected leader")),
        "{err}"
    );
    let mut quiet = one_shot(&url, d, &[]);
    quiet.env("RUST_LOG", "error");
    let out = output(quiet).await;
    let err = stderr(&out);
    assert!(
        !err.contains("store risk"),
        "RUST_LOG=error hides warnings: {err}"
    );
}

/// `run --require-durable-store` on a server without persistence: refuses to contend, exit
/// 78, CMD never started; the same server is accepted without the flag (above).
#[tokio::test(flavor = "multi_thread")]
async fn require_durable_store_refuses_a_volatile_server() {
    let server = redis().await;
    let dir = workdir("cli-durable");
    let d = dir.path();
    let mut c = redlease(&server.url(), d);
    c.args([
        "run",
        "--name",
        "durable",
        "--require-durable-store",
        "--",
        "touch",
        "ran",
    ]);
    let out = output(c).await;
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--require-durable-store"),
        "{}",
        stderr(&out)
    );
    assert!(!d.join("ran").exists(), "CMD never started");
    // From the environment too.
    let mut c = redlease(&server.url(), d);
    c.env("REDLEASE_REQUIRE_DURABLE_STORE", "true")
        .args(["run", "--name", "durable", "--", "touch", "ran"]);
    assert_eq!(code(&output(c).await), 78);
    assert!(!d.join("ran").exists());
}

/// Completion scripts and the man page come from the clap definitions: they know every
/// subcommand and option (`run --grace`, `--redlock`), and need no Redis.
#[tokio::test(flavor = "multi_thread")]
async fn completions_and_man_page_are_generated() {
    let dir = workdir("cli-generated");
    for shell in ["bash", "zsh", "fish"] {
        let out = output({
            let mut c = redlease("redis://127.0.0.1:1/", dir.path());
            c.args(["completions", shell]);
            c
        })
        .await;
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["run", "lock", "grace", "redlock", "require-durable-store"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = output({
        let mut c = redlease("redis://127.0.0.1:1/", dir.path());
        c.arg("man");
        c
    })
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let page = stdout(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH redlease"),
        "{page}"
    );
    assert!(
        page.contains("redlock") && page.contains("export\\-redis\\-password"),
        "{page}"
    );
}
