//! The Jepsen harness's command: `jepsen --scenario S --seed N --time D [--nodes N] [--runs K]`.
//!
//! Exit status: 0 every run passed, 1 a run failed (or an error), 77 skipped (not root, no
//! network namespaces: nothing was checked), 64 bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lease_jepsen::history::Outcome;
use lease_jepsen::{RunConfig, RunResult, Scenario, Workload};

#[derive(Parser, Debug)]
#[command(
    about = "Jepsen-style fault runs of redlease: nodes in network namespaces, a seeded nemesis, a checker"
)]
struct Args {
    /// single-aof, single-nopersist, redlock or control.
    #[arg(long, default_value = "single-aof")]
    scenario: String,
    /// The nemesis's seed (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How long faults go on: `45s`, `10m`, `90` (seconds).
    #[arg(long, default_value = "45s")]
    time: String,
    /// How many nodes (3 to 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The election's TTL in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// `election` (an `Elector`), `lock` (a fenced `Locker` lock), `semaphore` (a semaphore's
    /// permits) or `rwlock` (a read-write lock's readers and writers; single-aof, control).
    #[arg(long, default_value = "election")]
    workload: String,
    /// Runs with seeds seed, seed+1, ...
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Where run directories go.
    #[arg(long, default_value = "target/jepsen")]
    out: PathBuf,
}

fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    match unit {
        "" | "s" => Some(Duration::from_secs(n)),
        "ms" => Some(Duration::from_millis(n)),
        "m" | "min" => Some(Duration::from_secs(n * 60)),
        "h" => Some(Duration::from_secs(n * 3600)),
        _ => None,
    }
}

/// SIGINT or SIGTERM: the run's future is then dropped, and its guards remove everything.
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let scenario: Scenario = match args.scenario.parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("jepsen: {e}");
            return ExitCode::from(64);
        }
    };
    let workload: Workload = match args.workload.parse() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("jepsen: {e}");
            return ExitCode::from(64);
        }
    };
    let Some(time) = parse_duration(&args.time) else {
        eprintln!("jepsen: --time {:?}: expected e.g. 45s, 10m, 90", args.time);
        return ExitCode::from(64);
    };
    let node_bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("jepsen-node")))
        .filter(|p| p.exists());
    let Some(node_bin) = node_bin else {
        eprintln!(
            "jepsen: the jepsen-node binary is not next to this one (build the lease-jepsen package)"
        );
        return ExitCode::FAILURE;
    };
    let seed = args
        .seed
        .unwrap_or_else(|| lease_jepsen::history::now_us() % 1_000_000);
    let mut failed = 0;
    println!(
        "| scenario | seed | verdict | faults | terms | applied | stale | not applied | unknown | longest gap (ms) | recovery (ms) | violations (asserted / reported) | run |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for k in 0..args.runs {
        let mut cfg = RunConfig::new(scenario, seed + k, time, args.out.clone(), node_bin.clone());
        cfg.nodes = args.nodes;
        cfg.workload = workload;
        cfg.ttl = Duration::from_millis(args.ttl_ms);
        let result = tokio::select! {
            r = lease_jepsen::harness::run(&cfg) => r,
            _ = interrupted() => {
                eprintln!("jepsen: interrupted; everything the run made is removed");
                return ExitCode::FAILURE;
            }
        };
        match result {
            Ok(RunResult::Skipped(why)) => {
                eprintln!("jepsen: SKIPPED, nothing was checked: {why}");
                return ExitCode::from(77);
            }
            Ok(RunResult::Checked(s)) => {
                let r = &s.report;
                let n = |o: Outcome| r.outcomes.get(&o).copied().unwrap_or(0);
                let asserted: usize = r
                    .results
                    .iter()
                    .filter(|p| p.mode == lease_jepsen::checker::Mode::Asserted)
                    .map(|p| p.violations.len())
                    .sum();
                let reported: usize = r
                    .results
                    .iter()
                    .filter(|p| p.mode == lease_jepsen::checker::Mode::Reported)
                    .map(|p| p.violations.len())
                    .sum();
                let names: Vec<String> = r
                    .results
                    .iter()
                    .filter(|p| !p.violations.is_empty())
                    .map(|p| format!("{} {}", p.property, p.violations.len()))
                    .collect();
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {asserted} / {reported} {} | {} |",
                    scenario,
                    cfg.seed,
                    if s.passed { "pass" } else { "FAIL" },
                    s.faults.len(),
                    r.terms.len(),
                    n(Outcome::Applied),
                    n(Outcome::Stale),
                    n(Outcome::NotApplied),
                    n(Outcome::Unknown),
                    r.longest_gap.0 / 1000,
                    r.recovered_after_us
                        .map_or("-".to_owned(), |u| (u / 1000).to_string()),
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!("({})", names.join(", "))
                    },
                    s.dir.display()
                );
                if !s.passed {
                    failed += 1;
                    eprintln!("jepsen: run failed; see {}/summary.md", s.dir.display());
                }
            }
            Err(e) => {
                eprintln!("jepsen: run with seed {} stopped: {e}", cfg.seed);
                failed += 1;
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
