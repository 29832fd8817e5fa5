//! Project automation for redlease (`cargo xtask <command>`), std only.
//!
//! * `test`  — make sure the test servers are installed, build the local Redis
//!   image when Docker answers (and `REDLEASE_REDIS_IMAGE` is unset), run
//!   `cargo test --workspace` (all targets, then doctests) in the default server
//!   mode, then the test kit's own tests again with `REDLEASE_TEST_SERVERS=process`,
//!   and check that no server process, container or temporary directory leaked.
//! * `ci`    — `test`, then `cargo fmt --all --check`, `cargo clippy --workspace
//!   --all-targets -- -D warnings` and `cargo doc --workspace --no-deps` with
//!   `RUSTDOCFLAGS=-Dwarnings`; prints a timing table.
//! * `bench` — prepare servers and image like `test`, then `cargo bench --workspace`
//!   (extra arguments are passed on).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  test [cargo test args]   install-check servers, build the Redis image if Docker answers,
                           cargo test --workspace (all targets + doctests), then the
                           lease-testkit tests again with REDLEASE_TEST_SERVERS=process
  ci                       test + fmt --check + clippy -D warnings + doc -D warnings
  bench [cargo bench args] prepare servers/image, then cargo bench --workspace
  help                     this text

environment:
  REDLEASE_TEST_SERVERS=container|process   force the Redis server mode
  REDLEASE_REDIS_IMAGE=<image>              Redis image for container mode
  CARGO_BUILD_JOBS                          defaults to 2";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let command = args.next().and_then(|c| c.into_string().ok());
    let rest: Vec<OsString> = args.collect();
    let root = workspace_root();
    if let Err(e) = std::env::set_current_dir(&root) {
        eprintln!("xtask: cannot enter {}: {e}", root.display());
        return ExitCode::FAILURE;
    }
    let mut ctx = Ctx::new(root);
    let result = match command.as_deref() {
        Some("test") => ctx.test(&rest),
        Some("ci") => ctx.ci(),
        Some("bench") => ctx.bench(&rest),
        Some("help" | "-h" | "--help") | None => {
            println!("{USAGE}");
            return if command.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    ctx.print_summary();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir)
}

struct Step {
    name: String,
    status: String,
    took: Duration,
}

struct Ctx {
    root: PathBuf,
    cargo: OsString,
    /// Environment for every child (image, run id, build jobs).
    env: Vec<(String, String)>,
    steps: Vec<Step>,
}

impl Ctx {
    fn new(root: PathBuf) -> Self {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut env = Vec::new();
        if std::env::var_os("CARGO_BUILD_JOBS").is_none() {
            env.push(("CARGO_BUILD_JOBS".to_owned(), "2".to_owned()));
        }
        Ctx {
            root,
            cargo,
            env,
            steps: Vec::new(),
        }
    }

    fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    fn env_value(&self, key: &str) -> Option<String> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(key).ok())
            .filter(|v| !v.is_empty())
    }

    /// Runs a command as a timed step; `Err` if it fails.
    fn step(&mut self, name: &str, mut cmd: Command) -> Result<(), String> {
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let shown = show(&cmd);
        println!("\n=== {name}: {shown}");
        let start = Instant::now();
        let status = cmd.status();
        let took = start.elapsed();
        let (status_text, result) = match status {
            Ok(s) if s.success() => ("ok".to_owned(), Ok(())),
            Ok(s) => (format!("FAILED ({s})"), Err(format!("{name} failed: {s}"))),
            Err(e) => (
                format!("FAILED ({e})"),
                Err(format!("{name}: cannot run `{shown}`: {e}")),
            ),
        };
        println!("=== {name}: {status_text} in {:.1}s", took.as_secs_f64());
        self.steps.push(Step {
            name: name.to_owned(),
            status: status_text,
            took,
        });
        result
    }

    fn note(&mut self, name: &str, status: &str, took: Duration) {
        println!("=== {name}: {status}");
        self.steps.push(Step {
            name: name.to_owned(),
            status: status.to_owned(),
            took,
        });
    }

    fn cargo(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.args(args).current_dir(&self.root);
        cmd
    }

    fn print_summary(&self) {
        if self.steps.is_empty() {
            return;
        }
        println!("\n=== summary");
        println!("{:<38} {:<46} {:>8}", "step", "status", "seconds");
        println!("{:<38} {:<46} {:>8}", "----", "------", "-------");
        let mut total = Duration::ZERO;
        for step in &self.steps {
            total += step.took;
            println!(
                "{:<38} {:<46} {:>8.1}",
                step.name,
                step.status,
                step.took.as_secs_f64()
            );
        }
        println!("{:<38} {:<46} {:>8.1}", "total", "", total.as_secs_f64());
    }

    /// Installs missing servers (as root) or explains what to install.
    fn ensure_servers(&mut self) -> Result<(), String> {
        let script = self.root.join("scripts/install-deps.sh");
        let start = Instant::now();
        let present = Command::new(&script)
            .arg("--check")
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if present {
            self.note(
                "servers installed",
                "ok (redis-server, redis-cli, postgres)",
                start.elapsed(),
            );
            return Ok(());
        }
        if is_root() {
            return self.step("install servers", Command::new(&script));
        }
        let _ = Command::new(&script).arg("--check").status();
        Err(
            "test servers are missing: install redis-server, redis-tools and postgresql \
             (e.g. `sudo scripts/install-deps.sh` or `sudo apt-get install redis-server \
             redis-tools postgresql`)"
                .to_owned(),
        )
    }

    /// Builds the local Redis image when Docker answers and no image was chosen.
    fn prepare_image(&mut self) {
        let start = Instant::now();
        if let Some(image) = self.env_value("REDLEASE_REDIS_IMAGE") {
            self.note(
                "redis image",
                &format!("using REDLEASE_REDIS_IMAGE={image}"),
                start.elapsed(),
            );
            return;
        }
        if self.env_value("REDLEASE_TEST_SERVERS").as_deref() == Some("process") {
            self.note(
                "redis image",
                "skipped (process mode forced)",
                start.elapsed(),
            );
            return;
        }
        let docker = std::env::var("DOCKER").unwrap_or_else(|_| "docker".to_owned());
        let answers = Command::new(&docker)
            .args(["version", "--format", "{{.Server.Version}}"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !answers {
            self.note(
                "redis image",
                "skipped (no Docker engine answers: process mode)",
                start.elapsed(),
            );
            return;
        }
        println!("\n=== redis image: scripts/redis-image.sh");
        let output = Command::new(self.root.join("scripts/redis-image.sh"))
            .stderr(Stdio::inherit())
            .output();
        let took = start.elapsed();
        match output {
            Ok(out) if out.status.success() => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let tag = stdout.lines().last().unwrap_or("").trim().to_owned();
                self.set_env("REDLEASE_REDIS_IMAGE", &tag);
                self.note("redis image", &format!("ok ({tag})"), took);
            }
            Ok(out) => self.note(
                "redis image",
                &format!("FAILED ({}); tests fall back to processes", out.status),
                took,
            ),
            Err(e) => self.note(
                "redis image",
                &format!("FAILED ({e}); tests fall back to processes"),
                took,
            ),
        }
    }

    fn prepare(&mut self) -> Result<(), String> {
        self.ensure_servers()?;
        self.prepare_image();
        if self.env_value("REDLEASE_TESTKIT_RUN_ID").is_none() {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let run = format!("x{}-{:x}", std::process::id(), nanos % 0xffff_ffff);
            self.set_env("REDLEASE_TESTKIT_RUN_ID", &run);
        }
        Ok(())
    }

    fn test(&mut self, extra: &[OsString]) -> Result<(), String> {
        self.prepare()?;
        let mut all_targets =
            self.cargo(&["test", "--workspace", "--all-targets", "--no-fail-fast"]);
        all_targets.args(extra);
        let mut result = self.step("cargo test --workspace --all-targets", all_targets);
        let mut doc = self.cargo(&["test", "--workspace", "--doc", "--no-fail-fast"]);
        doc.args(extra);
        result = result.and(self.step("cargo test --workspace --doc", doc));
        // The kit's integration tests are named `testkit_*`. Selecting them with
        // `--workspace` (not `-p lease-testkit`) keeps the workspace's feature
        // unification, so nothing is rebuilt.
        let mut kit = self.cargo(&[
            "test",
            "--workspace",
            "--no-fail-fast",
            "--test",
            "testkit_*",
        ]);
        kit.env("REDLEASE_TEST_SERVERS", "process");
        result = result.and(self.step("lease-testkit tests (process mode)", kit));
        let leaks = self.check_leaks();
        result.and(leaks)
    }

    fn ci(&mut self) -> Result<(), String> {
        let mut failures = Vec::new();
        if let Err(e) = self.test(&[]) {
            failures.push(e);
        }
        let checks: [(&str, &[&str]); 2] = [
            ("cargo fmt --check", &["fmt", "--all", "--check"]),
            (
                "cargo clippy",
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
            ),
        ];
        for (name, args) in checks {
            let cmd = self.cargo(args);
            if let Err(e) = self.step(name, cmd) {
                failures.push(e);
            }
        }
        let mut doc = self.cargo(&["doc", "--workspace", "--no-deps"]);
        doc.env("RUSTDOCFLAGS", "-Dwarnings");
        if let Err(e) = self.step("cargo doc", doc) {
            failures.push(e);
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    fn bench(&mut self, extra: &[OsString]) -> Result<(), String> {
        self.prepare()?;
        let mut cmd = self.cargo(&["bench", "--workspace"]);
        cmd.args(extra);
        let result = self.step("cargo bench --workspace", cmd);
        result.and(self.check_leaks())
    }

    /// Fails if this run left kit containers, processes or temporary directories
    /// behind (and removes them).
    fn check_leaks(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let Some(run) = self.env_value("REDLEASE_TESTKIT_RUN_ID") else {
            return Ok(());
        };
        let mut leaks = Vec::new();

        let docker = std::env::var("DOCKER").unwrap_or_else(|_| "docker".to_owned());
        let label = format!("label=redlease.testkit.run={run}");
        if let Ok(out) = Command::new(&docker)
            .args(["ps", "-aq", "--filter", &label])
            .stderr(Stdio::null())
            .output()
        {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                leaks.push(format!("container {id}"));
                let _ = Command::new(&docker)
                    .args(["rm", "-f", "-v", id])
                    .stdout(Stdio::null())
                    .status();
            }
        }

        let prefix = format!("redlease-testkit-{run}-");
        let tmp = std::env::var_os("REDLEASE_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        // Processes whose working directory is one of this run's directories.
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for entry in procs.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                else {
                    continue;
                };
                let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
                    continue;
                };
                let in_run_dir = cwd
                    .strip_prefix(&tmp)
                    .ok()
                    .and_then(|p| p.components().next())
                    .and_then(|c| c.as_os_str().to_str())
                    .is_some_and(|name| name.starts_with(&prefix));
                if in_run_dir {
                    leaks.push(format!("process {pid} (cwd {})", cwd.display()));
                    let _ = Command::new("/bin/sh")
                        .args(["-c", "kill -s KILL \"$1\"", "sh", &pid.to_string()])
                        .status();
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    leaks.push(format!("directory {}", entry.path().display()));
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let took = start.elapsed();
        if leaks.is_empty() {
            self.note("leak check", "ok (no processes, containers, dirs)", took);
            Ok(())
        } else {
            self.note(
                "leak check",
                &format!("FAILED ({} leaks)", leaks.len()),
                took,
            );
            Err(format!("leaked (and now removed): {}", leaks.join(", ")))
        }
    }
}

fn show(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            let k = k.to_string_lossy();
            (k.starts_with("REDLEASE_") || k == "RUSTDOCFLAGS")
                .then(|| format!("{k}={}", v.map(|v| v.to_string_lossy()).unwrap_or_default()))
        })
        .collect();
    if envs.is_empty() {
        parts.join(" ")
    } else {
        format!("{} {}", envs.join(" "), parts.join(" "))
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
