//! redlease benchmarks on real Redis servers from the test kit.
//!
//! Every operation is measured beside its raw baseline in the same run, and reported as a
//! ratio: the lease scripts (acquire, renew, release) against a raw `SET NX PX` round trip; a
//! fenced `SET` against a plain `SET`; a lock cycle (obtain + release through `Locker`)
//! against two raw round trips, serially and with 64 concurrent tasks on one multiplexed
//! connection; Redlock over 3 and 5 nodes against a single node; the election failover after
//! the leader is killed (in TTLs); the Redis-side commands per second and memory of an idle
//! leader and an idle follower.
//!
//! `cargo bench -p redlease` (or `cargo xtask bench`) runs them; after criterion's own output
//! a ratio table is printed and written to `target/criterion/redlease-report.md` (the figures
//! in `docs/benchmarks.md` come from it). Without `--bench` (as `cargo test --all-targets`
//! runs it) every routine runs once, as a smoke test.

mod compare;
mod cpu;
mod elections;
mod failover;
mod idle;
mod many;
mod ops;
mod report;
mod setup;

use std::time::Duration;

use criterion::Criterion;

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let env = rt
        .block_on(setup::Env::start(5))
        .expect("start the Redis servers");
    // `REDLEASE_BENCH_ONLY=elections` (or `many`, or `contended`): only the many-elections
    // (or many-locks, or contended-lock) section (about a minute each; the whole run takes
    // much longer).
    let only = std::env::var("REDLEASE_BENCH_ONLY").ok();
    if only.as_deref() == Some("contended") {
        let contended = rt.block_on(compare::contended(&env, 8, Duration::from_secs(2), 3));
        println!(
            "{}",
            compare::render_contended(&contended, 8, Duration::from_secs(2))
        );
        drop(env);
        rt.shutdown_timeout(Duration::from_secs(2));
        return;
    }
    if matches!(only.as_deref(), Some("elections" | "many")) {
        let section = if only.as_deref() == Some("many") {
            many::render(&rt.block_on(many::measure(&env, 2_000, Duration::from_secs(10), 2)))
        } else {
            elections::render(&rt.block_on(elections::measure(
                &env,
                1_000,
                Duration::from_secs(10),
                2,
            )))
        };
        println!("{section}");
        drop(env);
        rt.shutdown_timeout(Duration::from_secs(2));
        return;
    }
    let out_dir = report::criterion_dir();
    let mut c = Criterion::default()
        .sample_size(40)
        .warm_up_time(Duration::from_millis(800))
        .measurement_time(Duration::from_secs(3))
        .nresamples(20_000)
        .without_plots()
        .output_directory(&out_dir)
        .configure_from_args();

    ops::scripts_vs_raw(&mut c, &rt, &env);
    ops::fenced_vs_plain(&mut c, &rt, &env);
    ops::lock_cycle(&mut c, &rt, &env);
    ops::lock_cycle_concurrent(&mut c, &rt, &env);
    ops::redlock(&mut c, &rt, &env);
    ops::redlock_slow_node(&mut c, &rt, &env);
    let failovers = failover::bench(&mut c, &rt, &env);
    c.final_summary();

    if bench_mode && std::env::var_os("REDLEASE_BENCH_COMPARE_ONLY").is_some() {
        // The comparison with other clients only (serial and 64 tasks), for a short run:
        // `REDLEASE_BENCH_COMPARE_ONLY=1 cargo bench -p redlease --bench benchmarks -- none`.
        let compared = rt.block_on(compare::interleaved(&env, 1_500));
        let concurrent = rt.block_on(compare::concurrent(&env, 64, Duration::from_secs(2), 6));
        let contended = rt.block_on(compare::contended(&env, 8, Duration::from_secs(2), 3));
        let mut text = compare::render(&compared);
        text.push_str(&compare::render_concurrent(&concurrent));
        text.push_str(&compare::render_contended(
            &contended,
            8,
            Duration::from_secs(2),
        ));
        println!("\n{text}");
    } else if bench_mode {
        let paired = rt.block_on(ops::paired(&env, 1_500));
        let idle = rt
            .block_on(idle::measure(Duration::from_secs(10)))
            .expect("idle measurement");
        let compared = rt.block_on(compare::interleaved(&env, 1_500));
        let concurrent = rt.block_on(compare::concurrent(&env, 64, Duration::from_secs(2), 6));
        let contended = rt.block_on(compare::contended(&env, 8, Duration::from_secs(2), 3));
        let many = rt.block_on(many::measure(&env, 2_000, Duration::from_secs(10), 2));
        let elections = rt.block_on(elections::measure(&env, 1_000, Duration::from_secs(10), 2));
        let mut text = report::render(&out_dir, &env, &paired, &failovers, &idle);
        text.push_str(&compare::render(&compared));
        text.push_str(&compare::render_concurrent(&concurrent));
        text.push_str(&compare::render_contended(
            &contended,
            8,
            Duration::from_secs(2),
        ));
        text.push_str(&many::render(&many));
        text.push_str(&elections::render(&elections));
        println!("\n{text}");
        let _ = std::fs::create_dir_all(&out_dir);
        let path = out_dir.join("redlease-report.md");
        match std::fs::write(&path, &text) {
            Ok(()) => println!("report written to {}", path.display()),
            Err(e) => eprintln!("cannot write {}: {e}", path.display()),
        }
    } else {
        // Smoke: at least one failover, each a proven election (the successor led with a
        // higher token; `failover::once` panics otherwise): when a filter skipped the
        // criterion routine, one runs here. Then the paired and idle measurements work (a
        // few iterations, a short period; the idle leader must have been elected).
        let failovers = if failovers.samples.is_empty() {
            vec![rt.block_on(failover::once(&env))]
        } else {
            failovers.samples
        };
        let paired = rt.block_on(ops::paired(&env, 4));
        assert!(!paired.is_empty());
        let compared = rt.block_on(compare::interleaved(&env, 4));
        assert_eq!(compared.cycles, 4);
        let concurrent = rt.block_on(compare::concurrent(&env, 4, Duration::from_millis(200), 1));
        assert!(
            concurrent.rounds[0].iter().all(|t| t.cycles_per_sec > 0.0),
            "{concurrent:?}"
        );
        let contended = rt.block_on(compare::contended(&env, 3, Duration::from_millis(200), 1));
        assert!(
            contended[0].iter().all(|t| t.acquisitions_per_sec > 0.0),
            "{contended:?}"
        );
        let many = rt.block_on(many::measure(&env, 50, Duration::from_secs(1), 1));
        assert!(many.redlease[0].renewals_per_lock_sec > 0.0, "{many:?}");
        let elections = rt.block_on(elections::measure(&env, 50, Duration::from_secs(1), 1));
        assert!(
            elections.redlease[0].renewals_per_lock_sec > 0.0,
            "{elections:?}"
        );
        let idle = rt
            .block_on(idle::measure(Duration::from_millis(800)))
            .expect("idle measurement (leader elected, follower following)");
        assert!(idle.leader_commands_per_sec > 0.0, "{idle:?}");
        println!(
            "smoke: {} failover(s), each successor elected with a higher token; idle leader \
             elected with token {}",
            failovers.len(),
            idle.leader_token
        );
    }
    drop(env);
    rt.shutdown_timeout(Duration::from_secs(2));
}
