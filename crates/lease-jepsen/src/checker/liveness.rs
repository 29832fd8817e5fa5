//! The liveness properties: a write is applied soon enough after the final heal and after
//! every isolation of Redis.

use super::views::{excerpt, isolation_heals};
use super::{Flags, Property, Run, Violation};
use crate::history::Outcome;

/// [`Property::Recovery`]; how long after the final heal the first write was applied (µs).
pub(super) fn recovery(run: &Run<'_>, flag: &mut Flags) -> Option<u64> {
    let mut recovered_after_us = None;
    if let Some(healed) = run.history.healed_at() {
        let first = run
            .attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Applied && a.sent_us >= healed)
            .filter_map(|a| a.done_us)
            .min();
        recovered_after_us = first.map(|d| d - healed);
        let bound = run.rules.recovery_bound_us();
        if first.is_none_or(|d| d - healed > bound) {
            flag.push(
                Property::Recovery,
                Violation {
                    what: match first {
                        Some(d) => format!(
                            "the first write after the heal was applied {} ms after it (bound {} ms)",
                            (d - healed) / 1000,
                            bound / 1000
                        ),
                        None => format!(
                            "no write was applied after the heal (bound {} ms)",
                            bound / 1000
                        ),
                    },
                    at_us: healed,
                    excerpt: excerpt(run.history, healed, 6),
                },
            );
        }
    }
    recovered_after_us
}

/// [`Property::Liveness`]; after each isolation of Redis healed, how long until the first
/// write was applied (µs).
pub(super) fn liveness(run: &Run<'_>, flag: &mut Flags) -> Vec<Option<u64>> {
    let mut isolation_recoveries_us = Vec::new();
    for (healed, next_start) in isolation_heals(run.history) {
        let bound = run.rules.liveness_bound_us();
        let first = run
            .attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Applied && a.sent_us >= healed)
            .filter_map(|a| a.done_us)
            .min();
        isolation_recoveries_us.push(first.map(|d| d - healed));
        if next_start.is_some_and(|n| n < healed + bound) {
            continue; // another fault began before the bound: nothing to judge
        }
        if first.is_none_or(|d| d - healed > bound) {
            flag.push(
                Property::Liveness,
                Violation {
                    what: match first {
                        Some(d) => format!(
                            "after an isolation of Redis healed, the first write was applied {} ms later (bound {} ms)",
                            (d - healed) / 1000,
                            bound / 1000
                        ),
                        None => format!(
                            "no write was applied after an isolation of Redis healed (bound {} ms)",
                            bound / 1000
                        ),
                    },
                    at_us: healed,
                    excerpt: excerpt(run.history, healed, 6),
                },
            );
        }
    }
    isolation_recoveries_us
}
