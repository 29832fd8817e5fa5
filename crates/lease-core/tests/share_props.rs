//! The share rule (`lease_core::share`) by property: targets add up to the names, differ by
//! at most one, and the step brings any holding to its target.

use lease_core::share::{Step, step, target};
use proptest::prelude::*;

proptest! {
    /// Every name has exactly one owner's share, and shares differ by at most one.
    #[test]
    fn targets_split_every_name_within_one(names in 0usize..5_000, members in 1usize..200) {
        let shares: Vec<usize> = (0..members).map(|r| target(names, members, r)).collect();
        prop_assert_eq!(shares.iter().sum::<usize>(), names);
        let max = shares.iter().copied().max().unwrap_or(0);
        let min = shares.iter().copied().min().unwrap_or(0);
        prop_assert!(max - min <= 1, "{shares:?}");
        prop_assert!(max <= names.div_ceil(members));
    }

    /// A view that counts more members than it ranks, or none, never asks for more than all.
    #[test]
    fn odd_views_stay_bounded(names in 0usize..5_000, members in 0usize..200, rank in 0usize..400) {
        prop_assert!(target(names, members, rank) <= names);
    }

    /// The step moves `owned` to `target` exactly: contend below, hold at, resign the excess above.
    #[test]
    fn step_reaches_the_target(owned in 0usize..5_000, t in 0usize..5_000) {
        match step(owned, t) {
            Step::Contend => prop_assert!(owned < t),
            Step::Hold => prop_assert_eq!(owned, t),
            Step::Resign(n) => prop_assert_eq!(owned - n, t),
        }
    }
}

/// A negative control: a naive `ceil(N / m)` for every member over-assigns (its shares add up
/// to more than the names), which is why ranks split the remainder.
#[test]
fn ceil_for_everyone_would_over_assign() {
    let (names, members) = (10usize, 3usize);
    let naive: usize = (0..members).map(|_| names.div_ceil(members)).sum();
    assert!(naive > names);
    let ranked: usize = (0..members).map(|r| target(names, members, r)).sum();
    assert_eq!(ranked, names);
}
