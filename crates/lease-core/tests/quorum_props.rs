//! Properties of the Redlock quorum math (`lease_core::quorum`).
//!
//! - `quorum(n) = n/2 + 1`, and two quorums of the same `n` nodes always intersect;
//! - `validate_nodes` refuses fewer than 3, an even count, or a repeated node (in that order);
//! - `validity = ttl − elapsed − (ceil(ttl_ms × drift) + 2 ms)`, `None` when not positive;
//! - `validate_drift` accepts exactly the finite factors in `[0, 0.5)`;
//! - `round_succeeds` needs a quorum **and** positive validity;
//! - `fenced_quorum_token` is the maximum of the quorum's tokens.

use std::time::Duration;

use lease_core::quorum::{
    DRIFT_FLOOR, QuorumConfigError, drift, fenced_quorum_token, quorum, round_succeeds,
    validate_drift, validate_nodes, validity,
};
use lease_core::{ConfigError, Token};
use proptest::prelude::*;

/// `ceil(ttl_ms × permille / 1000)` in exact integer arithmetic.
fn exact_drift_ms(ttl_ms: u64, permille: u64) -> u64 {
    (u128::from(ttl_ms) * u128::from(permille)).div_ceil(1000) as u64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn quorum_is_a_strict_majority(n in 1usize..1000) {
        let q = quorum(n);
        prop_assert_eq!(q, n / 2 + 1);
        prop_assert!(2 * q > n, "a majority");
        prop_assert!(2 * (q - 1) <= n, "the smallest majority");
        // Two quorums of n nodes share at least one node.
        prop_assert!(q + q > n);
    }

    #[test]
    fn validate_nodes_rules(
        names in proptest::collection::vec("[a-e]", 0..10),
    ) {
        let n = names.len();
        let first_dup = names.iter().enumerate().find(|(i, a)| names[..*i].contains(a)).map(|(_, a)| a.clone());
        let expected = if n < 3 {
            Err(QuorumConfigError::TooFew(n))
        } else if n % 2 == 0 {
            Err(QuorumConfigError::Even(n))
        } else if let Some(d) = first_dup {
            Err(QuorumConfigError::Duplicate(d))
        } else {
            Ok(n / 2 + 1)
        };
        prop_assert_eq!(validate_nodes(&names), expected);
    }

    #[test]
    fn distinct_odd_node_sets_are_accepted(k in 1usize..20) {
        let n = 2 * k + 1;
        let names: Vec<String> = (0..n).map(|i| format!("10.0.0.{i}:6379")).collect();
        prop_assert_eq!(validate_nodes(&names), Ok(k + 1));
        // Repeating any one node is refused.
        let mut dup = names.clone();
        dup[n - 1] = names[0].clone();
        prop_assert_eq!(validate_nodes(&dup), Err(QuorumConfigError::Duplicate(names[0].clone())));
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift(
        ttl_ms in 1u64..10_000_000,
        elapsed_us in 0u64..20_000_000_000,
        permille in 0u64..500,
    ) {
        let ttl = Duration::from_millis(ttl_ms);
        let elapsed = Duration::from_micros(elapsed_us % (ttl_ms * 1000 + 5000));
        let factor = permille as f64 / 1000.0;
        let exact = Duration::from_millis(exact_drift_ms(ttl_ms, permille)) + DRIFT_FLOOR;
        let got_drift = drift(ttl, factor);
        // The float product may land a hair above an exact integer: the allowance is then one
        // millisecond larger (conservative), never smaller.
        prop_assert!(got_drift == exact || got_drift == exact + Duration::from_millis(1),
            "drift {:?}, exact {:?}", got_drift, exact);
        let expected = ttl.checked_sub(elapsed).and_then(|v| v.checked_sub(got_drift)).filter(|v| !v.is_zero());
        prop_assert_eq!(validity(ttl, elapsed, factor), expected);
        match validity(ttl, elapsed, factor) {
            Some(v) => prop_assert_eq!(v + elapsed + got_drift, ttl, "validity adds up"),
            None => prop_assert!(elapsed + got_drift >= ttl, "None only when nothing is left"),
        }
        // Positive validity is exactly what a round needs besides the quorum.
        prop_assert!(round_succeeds(2, 3, validity(ttl, elapsed, factor)) == expected.is_some());
    }

    #[test]
    fn validity_is_monotonic_in_elapsed(ttl_ms in 1u64..100_000, a in 0u64..200_000, b in 0u64..200_000, permille in 0u64..500) {
        let ttl = Duration::from_millis(ttl_ms);
        let f = permille as f64 / 1000.0;
        let (lo, hi) = (Duration::from_millis(a.min(b)), Duration::from_millis(a.max(b)));
        prop_assert!(validity(ttl, hi, f) <= validity(ttl, lo, f));
    }

    #[test]
    fn drift_factor_domain(f in prop_oneof![
        -1.0f64..1.0,
        Just(0.5f64),
        Just(0.0f64),
        Just(-0.0f64),
        Just(0.499_999_999f64),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ]) {
        let ok = f.is_finite() && (0.0..0.5).contains(&f);
        match validate_drift(f) {
            Ok(v) => { prop_assert!(ok); prop_assert_eq!(v.to_bits(), f.to_bits()); }
            Err(ConfigError::DriftFactor(v)) => { prop_assert!(!ok); prop_assert!(v.to_bits() == f.to_bits()); }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }

    #[test]
    fn round_needs_quorum_and_validity(n in 1usize..20, successes in 0usize..20, v in proptest::option::of(1u64..1000)) {
        let validity = v.map(Duration::from_millis);
        prop_assert_eq!(round_succeeds(successes, n, validity), successes > n / 2 && validity.is_some());
    }

    #[test]
    fn fenced_quorum_token_is_the_max(tokens in proptest::collection::vec(1u64..=(1u64 << 53), 0..9)) {
        let ts: Vec<Token> = tokens.iter().map(|&t| Token::new(t)).collect::<Result<_, _>>().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = fenced_quorum_token(ts.iter().copied());
        prop_assert_eq!(got.map(Token::get), tokens.iter().copied().max());
        if let Some(g) = got {
            prop_assert!(ts.iter().all(|t| *t <= g), "at least every node's token");
        }
    }
}

#[test]
fn validity_examples() {
    let ms = Duration::from_millis;
    // ttl 10 s, drift 0.01: allowance ceil(100) + 2 = 102 ms.
    assert_eq!(validity(ms(10_000), ms(0), 0.01), Some(ms(9_898)));
    assert_eq!(validity(ms(10_000), ms(9_897), 0.01), Some(ms(1)));
    assert_eq!(
        validity(ms(10_000), ms(9_898), 0.01),
        None,
        "zero is not positive"
    );
    assert_eq!(validity(ms(10_000), ms(20_000), 0.01), None);
    // Drift 0: only the 2 ms floor.
    assert_eq!(validity(ms(3), ms(0), 0.0), Some(ms(1)));
    assert_eq!(validity(ms(2), ms(0), 0.0), None);
    // ceil: 1001 ms × 0.001 = 1.001 → 2 ms.
    assert_eq!(drift(ms(1001), 0.001), ms(4));
}
