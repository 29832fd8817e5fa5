//! Feature `metrics`: what an election and a lock record, read back from the `metrics`
//! project's debugging recorder. In-memory backend on tokio's paused clock.

mod common;

use common::bridge;
use std::collections::HashMap;
use std::time::Duration;

use lease_core::ElectionConfig;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_tokio::{CancellationToken, Elector, LockOptions, Locker};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Runs `f` on a current-thread runtime with paused time under a fresh recorder, and returns
/// what was recorded: `name{label=value,...}` → value.
fn recorded<F: std::future::Future<Output = ()>>(f: F) -> HashMap<String, DebugValue> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = common::paused_runtime();
    metrics::with_local_recorder(&recorder, || runtime.block_on(f));
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

fn counter(m: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match m.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{key}: {other:?} in {:#?}", m.keys().collect::<Vec<_>>()),
    }
}

fn gauge(m: &HashMap<String, DebugValue>, key: &str) -> f64 {
    match m.get(key) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{key}: {other:?} in {:#?}", m.keys().collect::<Vec<_>>()),
    }
}

fn histogram_len(m: &HashMap<String, DebugValue>, key: &str) -> usize {
    match m.get(key) {
        Some(DebugValue::Histogram(h)) => h.len(),
        other => panic!("{key}: {other:?} in {:#?}", m.keys().collect::<Vec<_>>()),
    }
}

#[test]
fn an_election_records_its_terms_renewals_and_step_downs() {
    let m = recorded(async {
        let clock = ManualClock::new();
        let _bridge = bridge(clock.clone());
        let backend = MemoryBackend::new(clock);
        let config = ElectionConfig::builder("jobs", "a")
            .ttl(Duration::from_millis(900))
            .build()
            .unwrap();
        let elector = Elector::new(backend, config);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = elector.run(shutdown, move |term| {
            let stop = stop.clone();
            async move {
                // Lead for a few renewals, then shut down.
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                stop.cancel();
                term.cancelled().await;
            }
        });
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .unwrap()
            .unwrap();
    });
    assert_eq!(
        counter(&m, "redlease_elections_won_total{election=jobs}"),
        1
    );
    assert_eq!(gauge(&m, "redlease_election_token{election=jobs}"), 1.0);
    assert_eq!(gauge(&m, "redlease_election_is_leader{election=jobs}"), 0.0);
    assert_eq!(
        counter(
            &m,
            "redlease_election_stepdowns_total{election=jobs,reason=Shutdown}"
        ),
        1
    );
    assert!(histogram_len(&m, "redlease_election_renew_seconds{election=jobs}") >= 2);
}

#[test]
fn a_lock_records_obtains_misses_failures_and_loss() {
    let m = recorded(async {
        let clock = ManualClock::new();
        let _bridge = bridge(clock.clone());
        let backend = std::sync::Arc::new(MemoryBackend::new(clock));
        let locker = Locker::from_arc(std::sync::Arc::clone(&backend));
        let lock = locker
            .obtain(
                "{jobs}:42",
                Duration::from_millis(600),
                LockOptions::new().auto_renew(Duration::from_millis(100)),
            )
            .await
            .unwrap();
        let busy = locker
            .obtain("{jobs}:42", Duration::from_millis(600), LockOptions::new())
            .await
            .unwrap_err();
        assert!(busy.is_not_obtained());
        backend.set_unavailable(true);
        tokio::time::timeout(Duration::from_secs(5), lock.lost().cancelled())
            .await
            .unwrap();
    });
    assert_eq!(
        histogram_len(&m, "redlease_lock_obtain_seconds{lock={jobs}}"),
        1
    );
    assert_eq!(
        counter(&m, "redlease_lock_not_obtained_total{lock={jobs}}"),
        1
    );
    assert!(counter(&m, "redlease_lock_refresh_failures_total{lock={jobs}}") >= 1);
    assert_eq!(
        counter(
            &m,
            "redlease_lock_lost_total{lock={jobs},reason=DeadlineExpired}"
        ),
        1
    );
}

#[test]
fn the_leader_gauge_is_zero_from_the_start_of_a_run() {
    let m = recorded(async {
        let clock = ManualClock::new();
        let _bridge = bridge(clock.clone());
        let backend = MemoryBackend::new(clock);
        // Never elected: every acquire fails.
        backend.set_unavailable(true);
        let config = ElectionConfig::builder("idle", "a")
            .ttl(Duration::from_millis(900))
            .build()
            .unwrap();
        let elector = Elector::new(backend, config);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = elector.hold(shutdown);
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(2_000)).await;
            stop.cancel();
        };
        let (result, ()) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(run, stopper)
        })
        .await
        .unwrap();
        result.unwrap();
    });
    assert_eq!(gauge(&m, "redlease_election_is_leader{election=idle}"), 0.0);
    assert!(
        !m.contains_key("redlease_elections_won_total{election=idle}"),
        "never elected"
    );
}
