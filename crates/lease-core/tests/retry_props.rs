//! Properties of retry strategies (`lease_core::retry`), lock retry schedules (`lease_core::lock`)
//! and jitter (`lease_core::rng`).
//!
//! - constructors refuse spinning strategies (zero linear interval, zero or inverted exponential);
//! - exponential: the k-th delay is `min · 2^k` capped at `max`, for **any** k (no overflow, and
//!   never smaller than an earlier delay);
//! - `limit(n, s)` yields exactly `n` delays, those of `s`;
//! - every `sequence()` is independent: interleaving several sequences of one strategy, on one
//!   thread or on many threads sharing the strategy, gives each exactly its own sequence;
//! - an obtain schedule gives up when the strategy stops and stops at the wait deadline;
//! - `jitter_down(d, p)` stays within `[d − p%·d, d]` (never lengthens).

use std::sync::Arc;
use std::time::Duration;

use lease_core::lock::{NextAttempt, ObtainSchedule};
use lease_core::rng::SplitMix64;
use lease_core::{Instant, RetryStrategy};
use proptest::prelude::*;

/// Durations over the whole range, with the small and huge ends reached often.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..1000).prop_map(Duration::from_nanos),
        (1u64..100_000).prop_map(Duration::from_millis),
        (1u64..u64::MAX).prop_map(Duration::from_nanos),
        (1u64..u64::MAX / 4).prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ]
}

/// Durations a retry constructor accepts (at least 1 ms), over the whole range.
fn valid_duration() -> impl Strategy<Value = Duration> {
    duration().prop_map(|d| d.max(Duration::from_millis(1)))
}

/// The exponential rule, computed exactly in u128 nanoseconds.
fn exp_oracle(min: Duration, max: Duration, k: u32) -> Duration {
    let min_ns = min.as_nanos();
    let max_ns = max.as_nanos();
    let ns = if k >= 127 {
        max_ns
    } else {
        min_ns.saturating_mul(1u128 << k).min(max_ns)
    };
    Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32)
}

/// A test-side description of a strategy (the type itself is opaque).
#[derive(Clone, Debug)]
enum Model {
    None,
    Linear(Duration),
    Exponential { min: Duration, max: Duration },
    Limit { retries: u32, inner: Box<Model> },
}

/// A strategy and its model; a refused constructor models as `None` (the default).
fn leaf() -> impl Strategy<Value = (Model, RetryStrategy)> {
    prop_oneof![
        Just((Model::None, RetryStrategy::none())),
        duration().prop_map(|d| match RetryStrategy::linear(d) {
            Ok(s) => (Model::Linear(d), s),
            Err(_) => (Model::None, RetryStrategy::default()),
        }),
        (duration(), duration()).prop_map(|(a, b)| {
            let (min, max) = (a.min(b), a.max(b));
            match RetryStrategy::exponential(min, max) {
                Ok(s) => (Model::Exponential { min, max }, s),
                Err(_) => (Model::None, RetryStrategy::default()),
            }
        }),
    ]
}

fn strategy() -> impl Strategy<Value = (Model, RetryStrategy)> {
    leaf().prop_recursive(2, 4, 1, |inner| {
        (0u32..8, inner).prop_map(|(n, (m, s))| {
            (
                Model::Limit {
                    retries: n,
                    inner: Box::new(m),
                },
                RetryStrategy::limit(n, s),
            )
        })
    })
}

/// The spec of `delay(k)`, by structure.
fn delay_oracle(s: &Model, k: u32) -> Option<Duration> {
    match s {
        Model::None => None,
        Model::Linear(d) => Some(*d),
        Model::Exponential { min, max } => Some(exp_oracle(*min, *max, k)),
        Model::Limit { retries, inner } => {
            if k < *retries {
                delay_oracle(inner, k)
            } else {
                None
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn constructors_refuse_spinning_strategies(a in prop_oneof![Just(Duration::ZERO), duration()], b in prop_oneof![Just(Duration::ZERO), duration()]) {
        // Zero and sub-millisecond intervals spin: refused.
        let ms = Duration::from_millis(1);
        prop_assert_eq!(RetryStrategy::linear(a).is_ok(), a >= ms);
        prop_assert_eq!(RetryStrategy::exponential(a, b).is_ok(), a >= ms && a <= b);
    }

    #[test]
    fn exponential_is_min_times_2k_capped_for_any_k(
        min in valid_duration(),
        max in valid_duration(),
        k in prop_oneof![0u32..130, any::<u32>(), Just(u32::MAX)],
    ) {
        let (min, max) = (min.min(max), min.max(max));
        let s = RetryStrategy::exponential(min, max).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let d = s.delay(k);
        prop_assert_eq!(d, Some(exp_oracle(min, max, k)), "k = {}", k);
        // Never shrinks as k grows.
        if k > 0 {
            prop_assert!(s.delay(k - 1) <= d);
        }
        prop_assert!(d <= Some(max) && d >= Some(min));
    }

    #[test]
    fn sequences_follow_delay_and_limit_yields_exactly_n((model, s) in strategy(), extra in 0u32..5) {
        let mut seq = s.sequence();
        let mut got = Vec::new();
        // Enough draws to see the end of any limited strategy, plus a few more.
        for _ in 0..(40 + extra) {
            match seq.next_delay() {
                Some(d) => got.push(d),
                None => break,
            }
        }
        for (k, d) in got.iter().enumerate() {
            prop_assert_eq!(Some(*d), delay_oracle(&model, k as u32), "draw {}", k);
        }
        if got.len() < 40 {
            prop_assert_eq!(delay_oracle(&model, got.len() as u32), None, "stopped early");
        }
        if let Model::Limit { retries, inner } = &model {
            // A limit over a strategy that never stops by itself yields exactly `retries`.
            if delay_oracle(inner, 0).is_some() && !matches!(**inner, Model::Limit { .. }) {
                prop_assert_eq!(got.len(), *retries as usize);
                prop_assert_eq!(seq.retries(), *retries);
            }
            prop_assert!(got.len() <= *retries as usize);
        }
        // Once stopped, a sequence stays stopped.
        if got.len() < 40 {
            prop_assert_eq!(seq.next_delay(), None);
        }
    }

    #[test]
    fn limit_n_yields_exactly_n(n in 0u32..200, d in valid_duration()) {
        for inner in [
            RetryStrategy::linear(d).map_err(|e| TestCaseError::fail(e.to_string()))?,
            RetryStrategy::exponential(d, d.saturating_mul(3)).map_err(|e| TestCaseError::fail(e.to_string()))?,
        ] {
            let s = RetryStrategy::limit(n, inner);
            let mut seq = s.sequence();
            let count = std::iter::from_fn(|| seq.next_delay()).take(1000).count();
            prop_assert_eq!(count, n as usize);
        }
    }

    #[test]
    fn interleaved_sequences_are_independent(
        (model, s) in strategy(),
        schedule in proptest::collection::vec(0usize..4, 0..120),
    ) {
        let mut seqs: Vec<_> = (0..4).map(|_| s.sequence()).collect();
        let mut seen: Vec<Vec<Option<Duration>>> = vec![Vec::new(); 4];
        for &i in &schedule {
            seen[i].push(seqs[i].next_delay());
        }
        for got in &seen {
            for (k, d) in got.iter().enumerate() {
                // Each sequence sees delay(k) for its own k-th draw (None once stopped).
                let k = k as u32;
                let expected = (0..=k).all(|j| delay_oracle(&model, j).is_some()).then(|| delay_oracle(&model, k)).flatten();
                prop_assert_eq!(*d, expected);
            }
        }
    }

    #[test]
    fn jitter_down_stays_within_percent_below(
        seed in any::<u64>(),
        d in prop_oneof![duration(), (0u64..1000).prop_map(Duration::from_nanos), Just(Duration::ZERO)],
        percent in prop_oneof![Just(10u32), 0u32..=100, 100u32..1000],
    ) {
        let mut rng = SplitMix64::new(seed);
        for _ in 0..20 {
            let j = rng.jitter_down(d, percent);
            prop_assert!(j <= d, "never lengthened");
            let p = u128::from(percent.min(100));
            let floor_ns = d.as_nanos() - d.as_nanos() * p / 100;
            prop_assert!(j.as_nanos() >= floor_ns, "{:?} below {}% under {:?}", j, p, d);
            if percent == 10 {
                // The election's jitter: within [0.9·d, d].
                prop_assert!(j.as_nanos() * 10 >= d.as_nanos() * 9);
            }
        }
    }

    #[test]
    fn obtain_schedule_gives_up_or_stops_at_the_deadline(
        (model, s) in strategy(),
        wait_ms in 0u64..10_000,
        steps in proptest::collection::vec(0u64..3000, 1..40),
    ) {
        let deadline = Instant::ZERO + Duration::from_millis(wait_ms);
        let mut schedule = ObtainSchedule::new(s.sequence(), deadline);
        prop_assert_eq!(schedule.deadline(), deadline);
        let mut now = Instant::ZERO;
        for (k, step) in steps.iter().enumerate() {
            now += Duration::from_millis(*step);
            match schedule.after_failure(now) {
                NextAttempt::At(at) => {
                    prop_assert!(at <= deadline, "never schedules past the deadline");
                    prop_assert_eq!(Some(at - now), delay_oracle(&model, k as u32));
                    now = at;
                }
                NextAttempt::GiveUp => {
                    prop_assert_eq!(delay_oracle(&model, k as u32), None);
                    break;
                }
                NextAttempt::DeadlineExceeded => {
                    let d = delay_oracle(&model, k as u32);
                    prop_assert!(d.is_some_and(|d| now + d > deadline));
                    break;
                }
                _ => prop_assert!(false, "unknown outcome"),
            }
        }
    }
}

/// Many threads share one strategy (as a static or an `Arc`) and draw concurrently: each
/// thread's sequence is exactly the strategy's, whatever the others do (the shared-counter race
/// of the reference library cannot happen).
#[test]
fn sequences_from_a_shared_strategy_in_concurrent_threads() {
    let strategies = [
        RetryStrategy::limit(
            7,
            RetryStrategy::exponential(Duration::from_millis(3), Duration::from_millis(40))
                .unwrap(),
        ),
        RetryStrategy::limit(50, RetryStrategy::linear(Duration::from_millis(2)).unwrap()),
        RetryStrategy::exponential(Duration::from_millis(1), Duration::from_secs(3600)).unwrap(),
    ];
    for s in strategies {
        let shared = Arc::new(s);
        let expected: Vec<Option<Duration>> = {
            let mut seq = shared.sequence();
            (0..80).map(|_| seq.next_delay()).collect()
        };
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let shared = Arc::clone(&shared);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut out = Vec::new();
                    for _ in 0..4 {
                        // Several acquisitions per thread, each with its own sequence.
                        let mut seq = shared.sequence();
                        let delays: Vec<_> = (0..80)
                            .map(|_| {
                                std::thread::yield_now();
                                seq.next_delay()
                            })
                            .collect();
                        out.push(delays);
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            for delays in h.join().unwrap() {
                assert_eq!(delays, expected);
            }
        }
    }
}

#[test]
fn exponential_examples_at_the_edges() {
    let ms = Duration::from_millis;
    let s = RetryStrategy::exponential(ms(1), Duration::from_secs(1 << 40)).unwrap();
    assert_eq!(s.delay(0), Some(ms(1)));
    assert_eq!(s.delay(31), Some(ms(1 << 31)));
    assert_eq!(s.delay(32), Some(ms(1 << 32)));
    assert_eq!(s.delay(40), Some(ms(1 << 40)));
    let s = RetryStrategy::exponential(ms(1), Duration::from_secs(10_000)).unwrap();
    assert_eq!(s.delay(u32::MAX), Some(Duration::from_secs(10_000)));
    let max = RetryStrategy::exponential(Duration::from_secs(1), Duration::MAX).unwrap();
    assert_eq!(max.delay(u32::MAX), Some(Duration::MAX));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Jittered sequences: each delay within `[d, d + 25 % · d]` of the exact one (never
    /// shorter: a retry never runs before the strategy says), and as many as the exact
    /// sequence.
    #[test]
    fn jittered_delays_stay_within_a_quarter_above_the_exact_delay((_, s) in strategy(), seed in any::<u64>()) {
        let mut exact = s.sequence();
        let mut jittered = s.jittered_sequence(seed);
        for _ in 0..40 {
            match (exact.next_delay(), jittered.next_delay()) {
                (Some(d), Some(j)) => {
                    prop_assert!(j >= d, "{:?} < {:?}", j, d);
                    prop_assert!(j <= d.saturating_add(d / 4), "{:?} > 1.25 × {:?}", j, d);
                }
                (None, None) => break,
                (e, j) => prop_assert!(false, "exact {:?} vs jittered {:?}", e, j),
            }
        }
    }
}

/// Two waiters with the same strategy do not retry in lockstep.
#[test]
fn jittered_sequences_of_two_waiters_differ() {
    let s = RetryStrategy::linear(Duration::from_millis(100)).expect("valid");
    let a: Vec<_> = (0..5)
        .map({
            let mut q = s.jittered_sequence(1);
            move |_| q.next_delay()
        })
        .collect();
    let b: Vec<_> = (0..5)
        .map({
            let mut q = s.jittered_sequence(2);
            move |_| q.next_delay()
        })
        .collect();
    assert_ne!(a, b);
}
