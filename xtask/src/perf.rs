//! `cargo xtask perf`: the performance gate. Client-side instructions per operation, counted
//! by `valgrind --tool=callgrind` (repeatable on a noisy machine; wall time is not), against
//! the baselines committed in `xtask/perf-baseline.txt`.
//!
//! For each measure (`redlease`: a serial lock cycle, obtain + release, over redis-rs's
//! default connection; `redlease-connect`: the same over `redis::connect`'s self-healing one;
//! `redlease-renew`: a refresh of a held lock; `redlease-release`: a release) the
//! `cycle_instructions` bench runs
//! under callgrind twice, at [`LOW`] and [`HIGH`] operations, against a fresh `redis-server`
//! on loopback; the difference of the totals over the difference of the counts cancels
//! start-up and connection costs. A measure more than [`TOLERANCE_PERCENT`] above its baseline
//! fails the gate; one more than that below it is reported (update the baseline to keep the
//! gain). `--update` writes the measured values as the new baselines: a deliberate change
//! commits its new baseline with it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Ctx;

/// Operations of the short run.
pub(crate) const LOW: u64 = 200;
/// Operations of the long run.
pub(crate) const HIGH: u64 = 1200;
/// How far above its baseline a measure may be before the gate fails.
pub(crate) const TOLERANCE_PERCENT: u64 = 4;
/// The measures, as the bench's client names, and what each counts.
const MEASURES: &[(&str, &str)] = &[
    ("redlease", "serial lock cycle (obtain + release)"),
    (
        "redlease-connect",
        "the same over `redis::connect`'s self-healing connection",
    ),
    ("redlease-renew", "refresh of a held lock"),
    ("redlease-release", "release (after a raw SET)"),
];
/// The committed baselines, relative to the workspace root.
const BASELINE: &str = "xtask/perf-baseline.txt";
/// How long the server may take to answer its first PING.
const SERVER_READY: Duration = Duration::from_secs(10);

/// A `redis-server` on a free loopback port, stopped (killed) when dropped.
struct Server {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Ctx {
    pub(crate) fn perf(&mut self, args: &[std::ffi::OsString]) -> Result<(), String> {
        let update = args.iter().any(|a| a == "--update");
        let bin = self.bench_binary()?;
        let server = start_server()?;
        let url = format!("redis://127.0.0.1:{}", server.port);
        let mut measured = Vec::new();
        for (client, what) in MEASURES {
            let start = Instant::now();
            let low = callgrind(&bin, &url, client, LOW)?;
            let high = callgrind(&bin, &url, client, HIGH)?;
            let per_op = high.saturating_sub(low) / (HIGH - LOW);
            println!("{client:<18} {per_op:>10} instructions per op  ({what})");
            self.note(
                &format!("perf: {client}"),
                &format!("{per_op} Ir/op"),
                start.elapsed(),
            );
            measured.push((client.to_string(), per_op));
        }
        drop(server);
        let path = self.root.join(BASELINE);
        if update {
            write_baseline(&path, &measured)?;
            println!("wrote {}", path.display());
            return Ok(());
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let baseline = parse_baseline(&text)?;
        let verdicts = judge(&baseline, &measured);
        let mut failures = Vec::new();
        for v in &verdicts {
            println!("{v}");
            if let Verdict::Regressed { .. } | Verdict::Missing { .. } = v {
                failures.push(v.to_string());
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "performance gate: {} (a deliberate change runs `cargo xtask perf --update` and commits {BASELINE})",
                failures.join("; ")
            ))
        }
    }

    /// Builds the `cycle_instructions` bench (release profile) and returns its path.
    fn bench_binary(&mut self) -> Result<std::path::PathBuf, String> {
        let mut cmd = self.cargo(&[
            "bench",
            "-p",
            "redlease",
            "--bench",
            "cycle_instructions",
            "--no-run",
            "--message-format=json",
        ]);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stderr(Stdio::inherit());
        let start = Instant::now();
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run cargo bench --no-run: {e}"))?;
        self.note(
            "perf: build the bench",
            if out.status.success() { "ok" } else { "FAILED" },
            start.elapsed(),
        );
        if !out.status.success() {
            return Err(format!("cargo bench --no-run failed: {}", out.status));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        executable_of(&stdout, "cycle_instructions")
            .map(Into::into)
            .ok_or_else(|| "cargo did not name the cycle_instructions executable".to_owned())
    }
}

/// The `"executable"` of the artifact whose path names `target` in cargo's JSON messages.
fn executable_of(messages: &str, target: &str) -> Option<String> {
    messages.lines().rev().find_map(|line| {
        let rest = line.split("\"executable\":\"").nth(1)?;
        let path = rest.split('"').next()?;
        path.contains(target).then(|| path.to_owned())
    })
}

/// Starts `redis-server` (from `PATH`) without persistence on a free loopback port and waits
/// (bounded) until it answers `PING`.
fn start_server() -> Result<Server, String> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let dir = std::env::temp_dir().join(format!("redlease-perf-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = TempDir(dir);
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    let server = Server {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + SERVER_READY;
    while Instant::now() < deadline {
        if ping(port) {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "redis-server on port {port} did not answer PING within {SERVER_READY:?}"
    ))
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Instructions callgrind collected for `ops` operations of `client`.
fn callgrind(bin: &Path, url: &str, client: &str, ops: u64) -> Result<u64, String> {
    let out_file = std::env::temp_dir().join(format!(
        "redlease-perf-{}-{client}-{ops}.out",
        std::process::id()
    ));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(bin)
        .args([client, &ops.to_string()])
        .env("REDLEASE_BENCH_URL", url)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run valgrind (apt-get install valgrind): {e}"))?;
    let _ = std::fs::remove_file(&out_file);
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{client} {ops} under callgrind failed ({}): {}",
            out.status,
            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        ));
    }
    collected(&log).ok_or_else(|| format!("no `Collected :` line from callgrind for {client}"))
}

/// The total of callgrind's `Collected : N` line.
fn collected(log: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
}

/// `measure value` per line; `#` starts a comment.
fn parse_baseline(text: &str) -> Result<Vec<(String, u64)>, String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            match (it.next(), it.next().map(str::parse::<u64>), it.next()) {
                (Some(name), Some(Ok(v)), None) => Ok((name.to_owned(), v)),
                _ => Err(format!("{BASELINE}: cannot read the line `{l}`")),
            }
        })
        .collect()
}

fn write_baseline(path: &Path, measured: &[(String, u64)]) -> Result<(), String> {
    let mut text = format!(
        "# Client-side instructions per operation (callgrind), gated by `cargo xtask perf`\n\
         # (fails above +{TOLERANCE_PERCENT}%). Written by `cargo xtask perf --update`.\n"
    );
    for (name, v) in measured {
        text.push_str(&format!("{name} {v}\n"));
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One measure against its baseline.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Within { name: String, value: u64, base: u64 },
    Regressed { name: String, value: u64, base: u64 },
    Improved { name: String, value: u64, base: u64 },
    Missing { name: String },
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |v: u64, b: u64| (v as f64 / b.max(1) as f64 - 1.0) * 100.0;
        match self {
            Verdict::Within { name, value, base } => {
                write!(
                    f,
                    "{name}: {value} ({:+.1}% of {base}): ok",
                    pct(*value, *base)
                )
            }
            Verdict::Regressed { name, value, base } => write!(
                f,
                "{name}: {value} is {:+.1}% of its baseline {base} (limit +{TOLERANCE_PERCENT}%)",
                pct(*value, *base)
            ),
            Verdict::Improved { name, value, base } => write!(
                f,
                "{name}: {value} ({:+.1}% of {base}): better, update the baseline to keep it",
                pct(*value, *base)
            ),
            Verdict::Missing { name } => write!(f, "{name}: no baseline in {BASELINE}"),
        }
    }
}

/// Each measure against its baseline: above `base × (1 + TOLERANCE_PERCENT%)` regressed,
/// below `base × (1 − TOLERANCE_PERCENT%)` improved; a measure without a baseline fails.
fn judge(baseline: &[(String, u64)], measured: &[(String, u64)]) -> Vec<Verdict> {
    measured
        .iter()
        .map(|(name, value)| {
            let name = name.clone();
            let value = *value;
            match baseline.iter().find(|(n, _)| *n == name).map(|(_, b)| *b) {
                None => Verdict::Missing { name },
                Some(base) if value * 100 > base * (100 + TOLERANCE_PERCENT) => {
                    Verdict::Regressed { name, value, base }
                }
                Some(base) if value * 100 < base * (100 - TOLERANCE_PERCENT) => {
                    Verdict::Improved { name, value, base }
                }
                Some(base) => Verdict::Within { name, value, base },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_fails_above_the_tolerance_only() {
        let base = vec![("a".to_owned(), 1000)];
        let at = |v: u64| judge(&base, &[("a".to_owned(), v)]).remove(0);
        assert!(matches!(at(1040), Verdict::Within { .. }));
        assert!(matches!(at(1041), Verdict::Regressed { .. }));
        assert!(matches!(at(960), Verdict::Within { .. }));
        assert!(matches!(at(959), Verdict::Improved { .. }));
        let missing = judge(&base, &[("b".to_owned(), 1)]);
        assert!(matches!(missing[0], Verdict::Missing { .. }));
    }

    #[test]
    fn baselines_and_callgrind_output_are_read() {
        let text = "# comment\nredlease 123 # trailing\n\nredlease-renew 45\n";
        assert_eq!(
            parse_baseline(text).unwrap(),
            vec![
                ("redlease".to_owned(), 123),
                ("redlease-renew".to_owned(), 45)
            ]
        );
        assert!(parse_baseline("redlease x").is_err());
        assert!(parse_baseline("redlease 1 2").is_err());
        assert_eq!(collected("==1== Collected : 987654\n"), Some(987654));
        assert_eq!(collected("nothing"), None);
        let json = r#"{"reason":"compiler-artifact","executable":"/t/release/deps/cycle_instructions-abc"}"#;
        assert_eq!(
            executable_of(json, "cycle_instructions").as_deref(),
            Some("/t/release/deps/cycle_instructions-abc")
        );
    }

    /// The committed baselines parse and name every measure.
    #[test]
    fn the_committed_baselines_name_every_measure() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("perf-baseline.txt");
        let text = std::fs::read_to_string(path).expect("xtask/perf-baseline.txt");
        let base = parse_baseline(&text).expect("parses");
        for (m, _) in MEASURES {
            assert!(base.iter().any(|(n, _)| n == m), "no baseline for {m}");
        }
    }
}
