//! [`Property::AtMostNHolders`]: at most `N` permits write at once, as the resource's log shows
//! it (the semaphore workload).
//!
//! The log is the resource's own order of accepted writes. A permit-fenced write is appended
//! only while its permit is current at the store, in the same script; a permit is current over
//! one interval (from its obtain to its expiry or release), and the store never holds more than
//! `N` current permits. So if the span of each token — its first to its last entry — contains
//! a log position, that token's permit was current when that entry was appended, and no
//! position may lie in more than `N` spans.

use std::collections::BTreeMap;

use super::views::{excerpt, log_excerpt};
use super::{Flags, Property, Run, Violation};
use crate::history::LogEntry;

/// The first position at which more than `n` tokens' spans overlap, with the tokens whose
/// spans contain it; `None` when there is none.
pub(super) fn first_excess(log: &[LogEntry], n: u32) -> Option<(usize, Vec<u64>)> {
    let mut spans: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (i, e) in log.iter().enumerate() {
        spans
            .entry(e.token)
            .and_modify(|s| s.1 = i)
            .or_insert((i, i));
    }
    // Sweep the log: a token is open from its first to its last entry.
    let mut starts: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut ends: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (token, (a, b)) in &spans {
        starts.entry(*a).or_default().push(*token);
        ends.entry(*b).or_default().push(*token);
    }
    let mut open: Vec<u64> = Vec::new();
    for i in 0..log.len() {
        open.extend(starts.remove(&i).unwrap_or_default());
        if open.len() > n as usize {
            open.sort_unstable();
            return Some((i, open));
        }
        for t in ends.remove(&i).unwrap_or_default() {
            open.retain(|o| *o != t);
        }
    }
    None
}

/// [`Property::AtMostNHolders`] for a semaphore of `n` permits.
pub(super) fn at_most_n(run: &Run<'_>, n: u32, flag: &mut Flags) {
    let Some((i, tokens)) = first_excess(run.log, n) else {
        return;
    };
    let at = run.log.get(i).and_then(|e| run.sent(e)).unwrap_or(0);
    let mut ex = vec![log_excerpt(run.log, i)];
    ex.extend(excerpt(run.history, at, 4));
    flag.push(
        Property::AtMostNHolders,
        Violation {
            what: format!(
                "at log[{i}] the spans of {} permits overlap (tokens {tokens:?}), N = {n}",
                tokens.len()
            ),
            at_us: at,
            excerpt: ex,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::NodeId;

    fn log(tokens: &[u64]) -> Vec<LogEntry> {
        tokens
            .iter()
            .enumerate()
            .map(|(seq, &token)| LogEntry {
                token,
                node: NodeId {
                    node: u32::try_from(token % 5).unwrap_or(0),
                    incarnation: 0,
                },
                seq: seq as u64,
            })
            .collect()
    }

    #[test]
    fn n_interleaved_holders_pass() {
        assert_eq!(first_excess(&log(&[1, 2, 1, 2, 3, 2, 3, 4, 4]), 2), None);
        assert_eq!(first_excess(&log(&[1, 1, 2, 2, 3]), 1), None);
        assert_eq!(first_excess(&log(&[]), 1), None);
    }

    /// Negative control: N + 1 overlapping accepted holders fail.
    #[test]
    fn n_plus_one_overlapping_holders_fail() {
        assert_eq!(
            first_excess(&log(&[1, 2, 3, 1, 2, 3]), 2),
            Some((2, vec![1, 2, 3]))
        );
        // A token that comes back after others opened still overlaps them.
        assert_eq!(first_excess(&log(&[1, 2, 2, 1]), 1), Some((1, vec![1, 2])));
    }
}
