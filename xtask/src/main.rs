//! Project automation for redlease (`cargo xtask <command>`), std only.
//!
//! * `test`  — run xtask's own unit tests, make sure the test servers are installed,
//!   build the local Redis image when Docker answers (and `REDLEASE_REDIS_IMAGE` is
//!   unset; a failed build fails the run), run `cargo test --workspace` (all targets,
//!   then doctests) in the default server mode, then the test kit's own tests again
//!   with `REDLEASE_TEST_SERVERS=process` and, when Docker answers, `=container`.
//!   The kit announces its mode once per test binary; xtask reads those lines and
//!   fails if a binary ran in another mode than the run requires ([`plan`],
//!   [`proof`]). Finally it checks that no server process, container or temporary
//!   directory leaked ([`leaks`]).
//!   With `--server <name>` (`redis70`, `valkey9`, `redis62`: [`matrix`]) it runs the
//!   compatibility suite instead, against that server (process mode, the binary installed
//!   by `scripts/install-deps.sh`), with the same mode proof and leak check.
//! * `ci`    — `test`, then `cargo fmt --all --check`, `cargo clippy --workspace
//!   --all-targets -- -D warnings` and `cargo doc --workspace --no-deps` with
//!   `RUSTDOCFLAGS=-Dwarnings`; prints a timing table.
//! * `bench` — prepare servers and image like `test`, then `cargo bench --workspace`
//!   (extra arguments are passed on).
//! * `package` — `cargo package` of every published crate, each compiled from its tarball
//!   ([`publish`]).
//! * `features` — `cargo check` of each published crate with no features, then each alone;
//!   and a `cargo tree` check that the facade compiles redis-rs's cluster code only with its
//!   `cluster` feature.
//! * `docsrs` — docs.rs's build locally (`--cfg docsrs`, all features, `RUSTC_BOOTSTRAP=1`),
//!   and a check that feature-gated items show their feature's badge.
//! * `perf` — the performance gate ([`perf`]): instructions per lock cycle, renewal and
//!   release under callgrind against the committed baselines (`--update` rewrites them).
//! * `jepsen` — build the `lease-jepsen` package and run its harness (`jepsen`) with the
//!   given options (`--time`, `--seed`, `--scenario`, `--nodes`, `--runs`, `--workload`);
//!   needs root.

mod leaks;
// The map check runs as one of xtask's own tests (`cargo xtask test` runs them first).
#[cfg(test)]
mod map;
mod matrix;
mod perf;
mod plan;
mod proof;
mod publish;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::leaks::Leak;
use crate::plan::{Image, Mode, Plan};

/// How long the stderr of an exited step is still read (see [`collect_lines`]).
const STDERR_DRAIN: Duration = Duration::from_secs(10);

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  test --server <name> [cargo test args]
                           the compatibility suite (elections, locks, fencing, semaphores,
                           read-write and fair locks, Redlock, notices, Cluster, Sentinel,
                           TLS, ACL, preflight) on one server of
                           the matrix: redis70 (redis-server on PATH), valkey9, redis62
                           (installed by scripts/install-deps.sh under target/servers)
  test [cargo test args]   xtask's unit tests, install-check servers, build the Redis image
                           if Docker answers (a failed build fails), cargo test --workspace
                           (all targets + doctests), then the lease-testkit tests again with
                           REDLEASE_TEST_SERVERS=process and (Docker) =container; each
                           test binary's announced mode is checked; then a leak check
  ci                       test + fmt --check + clippy -D warnings + doc -D warnings
  bench [cargo bench args] prepare servers/image, then cargo bench --workspace
  jepsen [--time D] [--seed S] [--scenario single-aof|single-nopersist|redlock|control]
         [--nodes N] [--runs K] [--workload election|lock|semaphore|rwlock]
                           build lease-jepsen and run its fault harness (root: network
                           namespaces, iptables); histories, summary.md and timeline.svg
                           go under target/jepsen/; exit 77 when it cannot run (skipped)
  package                  cargo package of every published crate (a dry run), each
                           built from its tarball against the others' (cargo's verify),
                           and a check that each package holds its README and licences
  features                 cargo check of each published crate with no features and with
                           each feature alone; redis-rs's cluster code only with `cluster`
  docsrs                   cargo doc of the published crates as docs.rs builds them (--cfg
                           docsrs, all features) into target/docsrs; checks feature badges
  perf [--update]          the performance gate: client instructions per lock cycle, renewal
                           and release (callgrind, against a fresh redis-server) compared
                           with xtask/perf-baseline.txt; fails above +4%; --update rewrites it
  help                     this text

environment:
  REDLEASE_TEST_SERVERS=container|process   force the Redis server mode
  REDLEASE_REDIS_IMAGE=<image>              Redis image for container mode
  REDLEASE_SERVERS_DIR=<dir>                where the matrix servers are installed
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
        Some("jepsen") => ctx.jepsen(&rest),
        Some("package") => ctx.package(),
        Some("features") => ctx.features(),
        Some("docsrs") => ctx.docsrs(),
        Some("perf") => ctx.perf(&rest),
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
    fn step(&mut self, name: &str, cmd: Command) -> Result<(), String> {
        self.run_step(name, cmd, false).0
    }

    /// Runs a command as a timed step. With `capture`, its stderr is echoed line by
    /// line as it comes and also returned (for the mode proof).
    fn run_step(
        &mut self,
        name: &str,
        mut cmd: Command,
        capture: bool,
    ) -> (Result<(), String>, String) {
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let shown = show(&cmd);
        println!("\n=== {name}: {shown}");
        let start = Instant::now();
        let mut captured = String::new();
        let status = if capture {
            cmd.stderr(Stdio::piped());
            cmd.spawn().and_then(|mut child| {
                let lines = child.stderr.take().map(tee_lines);
                let status = child.wait();
                if let Some(lines) = lines {
                    captured = collect_lines(&lines, name);
                }
                status
            })
        } else {
            cmd.status()
        };
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
        (result, captured)
    }

    /// Checks the modes announced in a run's stderr against `required`; prints each
    /// test binary's mode and records the verdict as a step.
    fn prove_modes(
        &mut self,
        name: &str,
        stderr: &str,
        required: Mode,
        require_some: bool,
    ) -> Result<(), String> {
        let suites = proof::parse_suites(stderr);
        println!("\n=== {name}: the mode each test binary announced (required: {required})");
        for suite in &suites {
            let modes: Vec<String> = suite
                .announced
                .iter()
                .map(|a| match a {
                    proof::Announced::Mode(m) => m.to_string(),
                    proof::Announced::Undecided(line) => line.clone(),
                })
                .collect();
            let modes = if modes.is_empty() {
                "(no Redis server started)".to_owned()
            } else {
                modes.join(", ")
            };
            println!("    {:<58} {modes}", suite.name);
        }
        match proof::check(&suites, required, require_some) {
            Ok(proof) => {
                self.note(name, &format!("ok ({required}: {proof})"), Duration::ZERO);
                Ok(())
            }
            Err(e) => {
                self.note(
                    name,
                    &format!("FAILED (not all {required})"),
                    Duration::ZERO,
                );
                Err(format!("{name}: {e}"))
            }
        }
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

    /// Makes sure an image is present when Docker answers: the one named by
    /// `REDLEASE_REDIS_IMAGE`, else the local one built by `scripts/redis-image.sh`.
    /// A failed build is an error, never a silent fall-back to processes.
    fn prepare_image(&mut self, forced: Option<Mode>) -> Result<Image, String> {
        let start = Instant::now();
        if forced == Some(Mode::Process) {
            self.note(
                "redis image",
                "skipped (process mode forced)",
                start.elapsed(),
            );
            return Ok(Image::NotNeeded);
        }
        let docker = docker_program();
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
            return Ok(Image::NoDocker);
        }
        if let Some(image) = self.env_value("REDLEASE_REDIS_IMAGE") {
            let present = Command::new(&docker)
                .args(["image", "inspect", "--format", "{{.Id}}", &image])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            let status = if present { "present" } else { "NOT present" };
            self.note(
                "redis image",
                &format!("REDLEASE_REDIS_IMAGE={image} ({status})"),
                start.elapsed(),
            );
            return Ok(if present {
                Image::Ready(image)
            } else {
                Image::Absent(image)
            });
        }
        println!("\n=== redis image: scripts/redis-image.sh");
        let output = Command::new(self.root.join("scripts/redis-image.sh"))
            .stderr(Stdio::inherit())
            .output();
        let took = start.elapsed();
        let failure = match output {
            Ok(out) if out.status.success() => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let tag = stdout.lines().last().unwrap_or("").trim().to_owned();
                if !tag.is_empty() {
                    self.set_env("REDLEASE_REDIS_IMAGE", &tag);
                    self.note("redis image", &format!("ok ({tag})"), took);
                    return Ok(Image::Ready(tag));
                }
                "it printed no tag".to_owned()
            }
            Ok(out) => out.status.to_string(),
            Err(e) => e.to_string(),
        };
        self.note("redis image", &format!("FAILED ({failure})"), took);
        Err(format!(
            "Docker answers but scripts/redis-image.sh failed ({failure}): container mode \
             cannot run (set REDLEASE_TEST_SERVERS=process to test without containers)"
        ))
    }

    fn prepare(&mut self) -> Result<Plan, String> {
        let forced = plan::forced_mode(self.env_value("REDLEASE_TEST_SERVERS").as_deref())?;
        self.ensure_servers()?;
        let image = self.prepare_image(forced)?;
        let plan = plan::plan(forced, &image)?;
        let reruns: Vec<String> = plan.kit_reruns.iter().map(Mode::to_string).collect();
        self.note(
            "server modes",
            &format!(
                "workspace {}; kit again: {}",
                plan.workspace,
                if reruns.is_empty() {
                    "-".to_owned()
                } else {
                    reruns.join(", ")
                }
            ),
            Duration::ZERO,
        );
        if self.env_value("REDLEASE_TESTKIT_RUN_ID").is_none() {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let run = format!("x{}-{:x}", std::process::id(), nanos % 0xffff_ffff);
            self.set_env("REDLEASE_TESTKIT_RUN_ID", &run);
        }
        Ok(plan)
    }

    fn test(&mut self, extra: &[OsString]) -> Result<(), String> {
        let args: Vec<String> = extra
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let (server, rest) = matrix::take_server_arg(&args)?;
        if let Some(server) = server {
            return self.test_server(&server, &rest);
        }
        // xtask's own logic (mode plan, mode proof, leak detection) first: it is what
        // decides whether the rest proves anything. Built alone: it has no dependencies.
        self.step(
            "cargo test -p xtask",
            self.cargo(&["test", "-p", "xtask", "--quiet"]),
        )?;
        let plan = self.prepare()?;
        if is_root() {
            // The Jepsen CI test skips (passing, with a SKIP line) where it cannot run; as
            // root it must run, so a skip fails the run instead of passing silently.
            self.set_env("REDLEASE_JEPSEN_REQUIRED", "1");
        }
        let mut failures = Vec::new();
        let mut all_targets =
            self.cargo(&["test", "--workspace", "--all-targets", "--no-fail-fast"]);
        all_targets.args(extra);
        let (result, stderr) =
            self.run_step("cargo test --workspace --all-targets", all_targets, true);
        failures.extend(result.err());
        failures.extend(
            self.prove_modes(
                "mode proof (workspace)",
                &stderr,
                plan.workspace,
                extra.is_empty(),
            )
            .err(),
        );
        let mut doc = self.cargo(&["test", "--workspace", "--doc", "--no-fail-fast"]);
        doc.args(extra);
        failures.extend(self.step("cargo test --workspace --doc", doc).err());
        for mode in &plan.kit_reruns {
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
            kit.env("REDLEASE_TEST_SERVERS", mode.env_value());
            let (result, stderr) =
                self.run_step(&format!("lease-testkit tests ({mode} mode)"), kit, true);
            failures.extend(result.err());
            failures.extend(
                self.prove_modes(&format!("mode proof (kit, {mode})"), &stderr, *mode, true)
                    .err(),
            );
        }
        failures.extend(self.check_leaks().err());
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// The compatibility suite against one server of the matrix ([`matrix`]).
    fn test_server(&mut self, name: &str, extra: &[String]) -> Result<(), String> {
        let server = matrix::server(name)?;
        self.ensure_servers()?;
        self.set_env("REDLEASE_SERVER", server.name);
        self.set_env("REDLEASE_TEST_SERVERS", Mode::Process.env_value());
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let run = format!("x{}-{:x}", std::process::id(), nanos % 0xffff_ffff);
        self.set_env("REDLEASE_TESTKIT_RUN_ID", &run);
        if is_root() {
            self.set_env("REDLEASE_JEPSEN_REQUIRED", "1");
        }
        self.note(
            &format!("server {}", server.name),
            server.describe,
            Duration::ZERO,
        );
        for (test, why) in server.skips {
            self.note(
                &format!("  {test}"),
                &format!("skipped: {why}"),
                Duration::ZERO,
            );
        }
        let mut cmd = self.cargo(&["test", "--workspace", "--no-fail-fast"]);
        for test in matrix::tests_for(&server) {
            cmd.args(["--test", test]);
        }
        cmd.args(extra);
        let step = format!("compatibility suite ({})", server.name);
        let (result, stderr) = self.run_step(&step, cmd, true);
        let mut failures: Vec<String> = result.err().into_iter().collect();
        failures.extend(
            self.prove_modes(
                &format!("mode proof ({})", server.name),
                &stderr,
                Mode::Process,
                extra.is_empty(),
            )
            .err(),
        );
        // Each binary that started a server (cluster nodes and sentinels too) announced the
        // binary it ran: `lease-testkit: server REDLEASE_SERVER=<name>: <path>`.
        let announced: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("lease-testkit: server "))
            .collect();
        let mut wrong: Vec<&str> = announced
            .iter()
            .copied()
            .filter(|l| !l.contains(&format!("REDLEASE_SERVER={}:", server.name)))
            .collect();
        if announced.is_empty() && extra.is_empty() {
            wrong.push("(no test binary announced its server)");
        }
        self.note(
            &format!("server proof ({})", server.name),
            &format!("{} binaries announced {}", announced.len(), server.name),
            Duration::ZERO,
        );
        if !wrong.is_empty() {
            failures.push(format!(
                "some test binaries did not run {}: {}",
                server.name,
                wrong.join(" | ")
            ));
        }
        failures.extend(self.check_leaks().err());
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
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

    /// Builds the Jepsen harness and runs it with `extra` (its own options).
    fn jepsen(&mut self, extra: &[OsString]) -> Result<(), String> {
        self.step(
            "cargo build -p lease-jepsen",
            self.cargo(&["build", "-p", "lease-jepsen", "--bins"]),
        )?;
        let mut run = self.cargo(&["run", "-q", "-p", "lease-jepsen", "--bin", "jepsen", "--"]);
        run.args(extra);
        for (k, v) in &self.env {
            run.env(k, v);
        }
        println!("\n=== jepsen: {}", show(&run));
        let start = Instant::now();
        let status = run
            .status()
            .map_err(|e| format!("cannot run the harness: {e}"))?;
        let took = start.elapsed();
        match status.code() {
            Some(0) => {
                self.note("jepsen", "ok", took);
                Ok(())
            }
            Some(77) => {
                self.note("jepsen", "SKIPPED (cannot run here; nothing checked)", took);
                Err(
                    "the Jepsen harness cannot run on this machine (see its message): \
                     nothing was checked"
                        .to_owned(),
                )
            }
            _ => {
                self.note("jepsen", &format!("FAILED ({status})"), took);
                Err(format!(
                    "jepsen: {status} (see the summary.md files under target/jepsen/)"
                ))
            }
        }
    }

    /// Fails if this run left kit containers, processes or temporary directories
    /// behind (and removes them).
    fn check_leaks(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let Some(run) = self.env_value("REDLEASE_TESTKIT_RUN_ID") else {
            return Ok(());
        };
        let docker = docker_program();
        let docker_ps = Command::new(&docker)
            .args(["ps", "-aq", "--filter", &leaks::container_filter(&run)])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let tmp = std::env::var_os("REDLEASE_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let processes: Vec<(u32, PathBuf)> = std::fs::read_dir("/proc")
            .map(|procs| {
                procs
                    .flatten()
                    .filter_map(|entry| {
                        let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
                        let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
                        Some((pid, cwd))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let entries: Vec<OsString> = std::fs::read_dir(&tmp)
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let entries: Vec<&std::ffi::OsStr> = entries.iter().map(OsString::as_os_str).collect();
        let mut found = leaks::find(&run, &tmp, &docker_ps, &processes, &entries);
        // The Jepsen harness's namespaces (`ip` is absent or refuses when not root: none).
        let netns = Command::new("ip")
            .args(["netns", "list"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
        found.extend(leaks::jepsen_namespaces(&netns, &alive));
        // Containers and processes first: a directory goes once nothing runs in it.
        for leak in &found {
            match leak {
                Leak::Container(id) => {
                    let _ = Command::new(&docker)
                        .args(["rm", "-f", "-v", id])
                        .stdout(Stdio::null())
                        .status();
                }
                Leak::Process { pid, .. } => {
                    let _ = Command::new("/bin/sh")
                        .args(["-c", "kill -s KILL \"$1\"", "sh", &pid.to_string()])
                        .status();
                }
                Leak::Directory(_) => {}
                Leak::Namespace(name) => {
                    // Its processes first (a namespace with processes stays alive).
                    let _ = Command::new("/bin/sh")
                        .args([
                            "-c",
                            "for p in $(ip netns pids \"$1\"); do kill -s KILL \"$p\"; done; \
                             ip netns del \"$1\"",
                            "sh",
                            name,
                        ])
                        .status();
                }
            }
        }
        for leak in &found {
            if let Leak::Directory(path) = leak {
                let _ = std::fs::remove_dir_all(path);
            }
        }
        let took = start.elapsed();
        if found.is_empty() {
            self.note(
                "leak check",
                "ok (no processes, containers, dirs, namespaces)",
                took,
            );
            Ok(())
        } else {
            self.note(
                "leak check",
                &format!("FAILED ({} leaks)", found.len()),
                took,
            );
            let listed: Vec<String> = found.iter().map(Leak::to_string).collect();
            Err(format!("leaked (and now removed): {}", listed.join(", ")))
        }
    }
}

/// Echoes `stream` line by line on stderr as it comes (on a thread of its own), and
/// sends each line on the returned channel.
fn tee_lines(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(&line);
                    let _ = err.flush();
                    if tx
                        .send(String::from_utf8_lossy(&line).into_owned())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Collects the lines of a child that has exited. A process it left behind may hold
/// the pipe open: after [`STDERR_DRAIN`] the rest is given up (and said so).
fn collect_lines(lines: &mpsc::Receiver<String>, name: &str) -> String {
    let deadline = Instant::now() + STDERR_DRAIN;
    let mut captured = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => captured.push_str(&line),
            Err(mpsc::RecvTimeoutError::Disconnected) => return captured,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                eprintln!(
                    "xtask: {name}: stderr still open {STDERR_DRAIN:?} after the command \
                     exited (a leftover process holds it); not reading further"
                );
                return captured;
            }
        }
    }
}

/// The docker CLI (`DOCKER`, default `docker`).
fn docker_program() -> String {
    std::env::var("DOCKER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "docker".to_owned())
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
