//! [`Property::NoReaderBesideWriter`]: no reader beside a writer, nor two writers, as the
//! resource's log shows it (the read-write workload). The property, what the resource can
//! observe and why the check is sound: the checker's module docs ("The read-write workload").
//!
//! A token's **span** is the stretch of the log from its first entry to its last. The sweep
//! keeps the spans open strictly around each position and judges the entry there: a read
//! inside a writer's span, or a write inside a reader's or another writer's span, is one
//! violation per pair of tokens (two spans overlap exactly when an endpoint of one lies
//! strictly inside the other, and endpoints are entries).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::views::{excerpt, log_excerpt};
use super::{Flags, Property, Run, Violation};
use crate::history::LogEntry;

/// One overlap found by [`overlaps`]: at `log[at]`, the entry's token `inner` lies inside the
/// span of `outer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Overlap {
    /// The log position.
    pub at: usize,
    /// The token of the entry there.
    pub inner: u64,
    /// The token whose span contains it.
    pub outer: u64,
}

/// Every overlap of a read with a writer's span or of a write with any other token's span,
/// the first per pair of tokens, in log order. `is_read` tells a reader's token.
pub(super) fn overlaps(log: &[LogEntry], is_read: impl Fn(u64) -> bool) -> Vec<Overlap> {
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, e) in log.iter().enumerate() {
        last.insert(e.token, i);
    }
    // Tokens whose first entry is before the current position and whose last is after it.
    let mut open: BTreeSet<u64> = BTreeSet::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut pairs: HashSet<(u64, u64)> = HashSet::new();
    let mut out = Vec::new();
    for (i, e) in log.iter().enumerate() {
        let read = is_read(e.token);
        for &o in &open {
            // Readers beside readers are the point of a read-write lock.
            if o == e.token || (read && is_read(o)) {
                continue;
            }
            let pair = (e.token.min(o), e.token.max(o));
            if pairs.insert(pair) {
                out.push(Overlap {
                    at: i,
                    inner: e.token,
                    outer: o,
                });
            }
        }
        let first = seen.insert(e.token);
        let ends_here = last.get(&e.token) == Some(&i);
        if ends_here {
            open.remove(&e.token);
        } else if first {
            open.insert(e.token);
        }
    }
    out
}

/// [`Property::NoReaderBesideWriter`].
pub(super) fn no_reader_beside_writer(run: &Run<'_>, flag: &mut Flags) {
    // A token granted both to a reader and to a writer makes the kind of its operations
    // unknowable (and breaks the one counter's promise).
    let writers: HashSet<u64> = run
        .terms
        .iter()
        .filter(|t| !t.shared)
        .map(|t| t.token)
        .collect();
    for t in run.terms.iter().filter(|t| t.shared) {
        if writers.contains(&t.token) {
            flag.push(
                Property::NoReaderBesideWriter,
                Violation {
                    what: format!(
                        "token {} was granted to reader {} and to a writer",
                        t.token, t.node
                    ),
                    at_us: t.elected_us,
                    excerpt: excerpt(run.history, t.elected_us, 4),
                },
            );
        }
    }
    let kind = |token: u64| {
        if run.is_read(token) {
            "reader"
        } else {
            "writer"
        }
    };
    for o in overlaps(run.log, |t| run.is_read(t)) {
        let e = &run.log[o.at];
        let at = run.sent(e).unwrap_or(0);
        let mut ex = vec![log_excerpt(run.log, o.at)];
        ex.extend(excerpt(run.history, at, 4));
        let op = if run.is_read(e.token) {
            "read"
        } else {
            "write"
        };
        flag.push(
            Property::NoReaderBesideWriter,
            Violation {
                what: format!(
                    "log[{}] = {e}, {}'s {op}, lies inside the span of {} {}",
                    o.at,
                    kind(e.token),
                    kind(o.outer),
                    o.outer
                ),
                at_us: at,
                excerpt: ex,
            },
        );
    }
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
                    node: 0,
                    incarnation: 0,
                },
                seq: seq as u64,
            })
            .collect()
    }

    /// Readers are the even tokens here.
    fn found(tokens: &[u64]) -> Vec<(usize, u64, u64)> {
        overlaps(&log(tokens), |t| t % 2 == 0)
            .into_iter()
            .map(|o| (o.at, o.inner, o.outer))
            .collect()
    }

    #[test]
    fn readers_beside_readers_and_writers_in_turn_pass() {
        assert!(found(&[1, 1, 2, 4, 2, 4, 6, 2, 5, 5, 8, 10, 8, 10, 7]).is_empty());
        assert!(found(&[]).is_empty());
        assert!(found(&[3]).is_empty());
    }

    /// Negative control: a read inside a writer's span, a write inside a reader's span, and
    /// two writers' spans that overlap, each once per pair.
    #[test]
    fn overlaps_with_a_writer_are_found_once_per_pair() {
        assert_eq!(found(&[1, 2, 1, 2, 1]), vec![(1, 2, 1)]);
        assert_eq!(found(&[2, 1, 2]), vec![(1, 1, 2)]);
        assert_eq!(found(&[1, 3, 1, 3]), vec![(1, 3, 1)]);
        // A writer that comes back after a reader began still overlaps it.
        assert_eq!(found(&[1, 2, 2, 1]), vec![(1, 2, 1)]);
    }
}
