//! The run's summary, as Markdown.

use std::fmt::Write;

use crate::checker::Mode;
use crate::run::RunSummary;

/// Milliseconds from the run's start.
fn rel(summary: &RunSummary, at_us: u64) -> String {
    let start = summary.history.start_at();
    format!("{:.3}", at_us.saturating_sub(start) as f64 / 1e6)
}

/// The summary of a run: seed, faults applied, attempts by outcome, longest leaderless gap,
/// each property's verdict, and the violations with their history excerpts.
pub fn markdown(s: &RunSummary) -> String {
    let c = &s.config;
    let r = &s.report;
    let mut o = String::new();
    let verdict = match (s.passed, c.scenario.expects_violations()) {
        (true, false) => "PASS",
        (false, false) => "FAIL",
        (true, true) => "PASS (the control was flagged, as it must be)",
        (false, true) => "FAIL (the control was NOT flagged)",
    };
    let _ = writeln!(
        o,
        "# Jepsen run: {} ({} workload) seed {}\n",
        c.scenario,
        c.workload.name(),
        c.seed
    );
    let _ = writeln!(o, "- verdict: **{verdict}**");
    let _ = writeln!(
        o,
        "- nodes: {}, TTL: {} ms, faults for {} s; replay: `cargo xtask jepsen --scenario {} --seed {} --time {}s --nodes {} --workload {}`",
        c.nodes,
        c.ttl.as_millis(),
        c.time.as_secs(),
        c.scenario,
        c.seed,
        c.time.as_secs(),
        c.nodes,
        c.workload.name()
    );
    let outcomes: Vec<String> = r.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        o,
        "- attempts: {} ({}); log entries: {}; terms: {}",
        r.attempts.len(),
        outcomes.join(", "),
        r.log_len,
        r.terms.len()
    );
    let _ = writeln!(
        o,
        "- longest leaderless gap: {} ms (from t={} s)",
        r.longest_gap.0 / 1000,
        rel(s, r.longest_gap.1)
    );
    match r.recovered_after_us {
        Some(us) => {
            let _ = writeln!(
                o,
                "- first write applied {} ms after the final heal",
                us / 1000
            );
        }
        None => {
            let _ = writeln!(o, "- no write applied after the final heal");
        }
    }
    if !r.isolation_recoveries_us.is_empty() {
        let each: Vec<String> = r
            .isolation_recoveries_us
            .iter()
            .map(|us| us.map_or_else(|| "none".to_owned(), |us| format!("{} ms", us / 1000)))
            .collect();
        let _ = writeln!(
            o,
            "- first write applied after each isolation of Redis healed: {}",
            each.join(", ")
        );
    }
    let _ = writeln!(o, "\n## Properties\n");
    let _ = writeln!(o, "| property | mode | violations | why this mode |");
    let _ = writeln!(o, "|---|---|---|---|");
    let why = c.scenario.modes_for(c.workload);
    for p in &r.results {
        let reason = why
            .iter()
            .find(|(q, _, _)| *q == p.property)
            .map_or("", |(_, _, w)| w);
        let mode = match p.mode {
            Mode::Asserted => "asserted",
            Mode::Reported => "reported",
        };
        let _ = writeln!(
            o,
            "| {} | {mode} | {} | {reason} |",
            p.property,
            p.violations.len()
        );
    }
    let _ = writeln!(o, "\n## Faults ({})\n", s.faults.len());
    let _ = writeln!(o, "| # | t (s) | fault | target | held (ms) |");
    let _ = writeln!(o, "|---|---|---|---|---|");
    for f in &s.faults {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            f.id,
            rel(s, f.span_us.0),
            f.planned.fault,
            f.target,
            (f.span_us.1 - f.span_us.0) / 1000
        );
    }
    for p in &r.results {
        if p.violations.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "\n## Violations of {} ({}, first 5 of {})\n",
            p.property,
            if p.mode == Mode::Asserted {
                "asserted"
            } else {
                "reported"
            },
            p.violations.len()
        );
        for v in p.violations.iter().take(5) {
            let _ = writeln!(o, "- t={} s: {}\n\n```", rel(s, v.at_us), v.what);
            for line in &v.excerpt {
                let _ = writeln!(o, "{line}");
            }
            let _ = writeln!(o, "```");
        }
    }
    let _ = writeln!(
        o,
        "\nFiles: `node-*.hist` (histories), `harness.hist` (faults), `resource.log` (the log), `timeline.svg`."
    );
    o
}
