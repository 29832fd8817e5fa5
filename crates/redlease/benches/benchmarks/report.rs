//! The ratio report: criterion's medians (from `new/estimates.json`), the paired cross-check,
//! the failover distribution and the idle costs, with the machine they were measured on.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::failover::{self, Failovers};
use crate::idle::{self, Idle};
use crate::ops::{CONCURRENCY, Paired};
use crate::setup::Env;

/// Where criterion writes (and this report reads): `<target>/criterion`.
pub(crate) fn criterion_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("criterion")
}

/// Criterion's median estimate (ns) of `group/id`, if it was run.
fn median_ns(dir: &Path, group: &str, id: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(group).join(id).join("new/estimates.json")).ok()?;
    let after = &text[text.find("\"median\"")?..];
    let after = &after[after.find("\"point_estimate\"")? + "\"point_estimate\"".len()..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let end = after.find([',', '}'])?;
    after[..end].trim().parse().ok()
}

fn show_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

struct Row {
    what: &'static str,
    group: &'static str,
    op: &'static str,
    base: &'static str,
    paired: Option<&'static str>,
    goal: Option<f64>,
}

const ROWS: &[Row] = &[
    Row {
        what: "acquire script vs raw `SET NX PX`",
        group: "scripts",
        op: "acquire",
        base: "raw_set_nx_px",
        paired: Some("acquire"),
        goal: None,
    },
    Row {
        what: "renew script vs raw `SET NX PX`",
        group: "scripts",
        op: "renew",
        base: "raw_set_nx_px",
        paired: Some("renew"),
        goal: None,
    },
    Row {
        what: "release script vs raw `SET NX PX`",
        group: "scripts",
        op: "release",
        base: "raw_set_nx_px",
        paired: Some("release"),
        goal: None,
    },
    Row {
        what: "fenced `SET` vs plain `SET`",
        group: "fence",
        op: "fenced_set",
        base: "plain_set",
        paired: Some("fenced_set"),
        goal: Some(1.15),
    },
    Row {
        what: "lock cycle (`Locker` obtain + release) vs 2 raw round trips, serial",
        group: "lock_cycle",
        op: "locker",
        base: "raw_two_round_trips",
        paired: Some("lock_cycle"),
        goal: Some(1.10),
    },
    Row {
        what: "lock cycle: `Locker` vs the same two scripts called directly (driver overhead)",
        group: "lock_cycle",
        op: "locker",
        base: "bare_scripts",
        paired: Some("locker_vs_bare"),
        goal: None,
    },
    Row {
        what: "lock cycle: the two scripts called directly vs 2 raw round trips",
        group: "lock_cycle",
        op: "bare_scripts",
        base: "raw_two_round_trips",
        paired: None,
        goal: None,
    },
    Row {
        what: "lock cycle vs 2 raw round trips, 64 tasks on one connection (time per cycle)",
        group: "lock_cycle_64_tasks",
        op: "locker",
        base: "raw_two_round_trips",
        paired: None,
        goal: Some(1.10),
    },
    Row {
        what: "Redlock 3 nodes vs single node (lock cycle)",
        group: "redlock_cycle",
        op: "redlock_3",
        base: "single_node",
        paired: Some("redlock_3"),
        goal: Some(1.3),
    },
    Row {
        what: "Redlock 5 nodes vs single node (lock cycle)",
        group: "redlock_cycle",
        op: "redlock_5",
        base: "single_node",
        paired: Some("redlock_5"),
        goal: None,
    },
    Row {
        what: "Redlock 3 nodes (two behind 1 ms one-way latency, one behind 20 ms) vs single node behind 1 ms (lock cycle)",
        group: "redlock_slow_node",
        op: "redlock_3_one_at_20ms",
        base: "single_at_1ms",
        paired: Some("redlock_3_slow_node"),
        goal: Some(1.15),
    },
];

pub(crate) fn render(
    dir: &Path,
    env: &Env,
    paired: &[Paired],
    failovers: &Failovers,
    idle: &Idle,
) -> String {
    let mut s = String::new();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(s, "## Measured figures\n");
    let _ = writeln!(
        s,
        "Machine: {cpus} CPUs (`nproc`), {}; Redis {} ({} mode, loopback); {} concurrent \
         tasks in the concurrent row.\n",
        cpu_model(),
        env.redis_version,
        env.mode,
        CONCURRENCY
    );
    let _ = writeln!(
        s,
        "| comparison | operation (median) | baseline (median) | ratio | paired ratio | goal |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|");
    for r in ROWS {
        let (Some(op), Some(base)) = (
            median_ns(dir, r.group, r.op),
            median_ns(dir, r.group, r.base),
        ) else {
            let _ = writeln!(s, "| {} | not run | | | | |", r.what);
            continue;
        };
        let ratio = op / base;
        let paired_ratio = r
            .paired
            .and_then(|id| paired.iter().find(|p| p.id == id))
            .map_or_else(|| "—".to_owned(), |p| format!("{:.2}×", p.ratio()));
        let goal = match r.goal {
            Some(g) if ratio <= g => format!("≤ {g:.2}×: met"),
            Some(g) => format!("≤ {g:.2}×: **missed**"),
            None => "—".to_owned(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {ratio:.2}× | {paired_ratio} | {goal} |",
            r.what,
            show_ns(op),
            show_ns(base)
        );
    }

    let ttl = failover::TTL.as_secs_f64();
    let mut f: Vec<f64> = failovers
        .samples
        .iter()
        .map(|d| d.as_secs_f64() / ttl)
        .collect();
    f.sort_by(f64::total_cmp);
    if let (Some(min), Some(max)) = (f.first(), f.last()) {
        let median = f[f.len() / 2];
        let _ = writeln!(
            s,
            "\nFailover after the leader is killed (TTL {} ms, {} kills at random points of \
             the renew cycle): the successor leads after a median of **{median:.2} TTL** \
             (min {min:.2}, max {max:.2}).",
            failover::TTL.as_millis(),
            f.len()
        );
    }
    let scale = idle::TTL.as_secs_f64() / 15.0;
    let _ = writeln!(
        s,
        "\nIdle cost at the Redis server (TTL {} s, {} s per phase): leader {:.2} round trips/s \
         (EVALSHA), {:.2} commands/s counting the commands its scripts run; follower {:.2} \
         round trips/s, {:.2} commands/s. Both scale with 1/TTL (at the default 15 s TTL: \
         leader {:.2} round trips/s, follower {:.2}). `used_memory` delta: leader {} bytes \
         (its keys, the script cache and its connection), follower {} bytes (its connection).",
        idle::TTL.as_secs(),
        idle.period.as_secs(),
        idle.leader_evalsha_per_sec,
        idle.leader_commands_per_sec,
        idle.follower_evalsha_per_sec,
        idle.follower_commands_per_sec,
        idle.leader_evalsha_per_sec * scale,
        idle.follower_evalsha_per_sec * scale,
        idle.leader_memory_bytes,
        idle.follower_memory_bytes
    );
    let _ = writeln!(
        s,
        "\nPaired ratio: each operation alternated with its baseline on the same connection \
         ({} pairs), median against median; a cross-check of the criterion ratio that is \
         robust to load drifting during the run.",
        paired.first().map_or(0, |_| 1_500)
    );
    let _ = writeln!(
        s,
        "\nRegenerate: `cargo xtask bench` (or `cargo bench -p redlease --bench benchmarks`); \
         the report is written to `target/criterion/redlease-report.md`."
    );
    s
}
