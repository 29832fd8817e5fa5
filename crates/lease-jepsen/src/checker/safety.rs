//! The safety properties: over the resource's log and the history's terms and writes.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::views::{excerpt, log_excerpt};
use super::{Flags, Property, Run, TermView, Violation};
use crate::history::{NodeId, Outcome};

/// [`Property::TokensMonotonic`]: every entry against the highest token of the writes before
/// it (without readers, every entry is a write).
pub(super) fn tokens_monotonic(run: &Run<'_>, flag: &mut Flags) {
    let mut highest: Option<(usize, u64)> = None;
    for (i, e) in run.log.iter().enumerate() {
        if let Some((hi, h)) = highest
            && e.token < h
        {
            let at = run.sent(e).unwrap_or(0);
            let mut ex = vec![log_excerpt(run.log, i)];
            ex.extend(excerpt(run.history, at, 4));
            let what = if run.is_read(e.token) {
                ", a read,"
            } else {
                ""
            };
            flag.push(
                Property::TokensMonotonic,
                Violation {
                    what: format!(
                        "log[{i}] = {e}{what} carries token {} after log[{hi}] carried {h}",
                        e.token
                    ),
                    at_us: at,
                    excerpt: ex,
                },
            );
        }
        if !run.is_read(e.token) && highest.is_none_or(|(_, h)| e.token > h) {
            highest = Some((i, e.token));
        }
    }
}

/// [`Property::TermsContiguous`].
pub(super) fn terms_contiguous(run: &Run<'_>, flag: &mut Flags) {
    let election_rank: HashMap<u64, usize> = {
        let mut m = HashMap::new();
        for (i, t) in run.terms.iter().enumerate() {
            m.entry(t.token).or_insert(i);
        }
        m
    };
    let mut closed: HashSet<u64> = HashSet::new();
    let mut current: Option<u64> = None;
    let mut last_rank: Option<usize> = None;
    // Readers' reads interleave by design: the writes alone form the blocks.
    for (i, e) in run.log.iter().enumerate() {
        if current == Some(e.token) || run.is_read(e.token) {
            continue;
        }
        let at = run.sent(e).unwrap_or(0);
        if closed.contains(&e.token) {
            flag.push(
                Property::TermsContiguous,
                Violation {
                    what: format!(
                        "log[{i}] = {e}: term {} writes again after another term's block",
                        e.token
                    ),
                    at_us: at,
                    excerpt: vec![log_excerpt(run.log, i)],
                },
            );
        }
        match election_rank.get(&e.token) {
            None => flag.push(
                Property::TermsContiguous,
                Violation {
                    what: format!("log[{i}] = {e}: token {} was never elected", e.token),
                    at_us: at,
                    excerpt: vec![log_excerpt(run.log, i)],
                },
            ),
            Some(&rank) => {
                if let Some(last) = last_rank
                    && rank < last
                {
                    flag.push(
                        Property::TermsContiguous,
                        Violation {
                            what: format!(
                                "log[{i}] = {e}: term {} (election #{rank}) follows election #{last}",
                                e.token
                            ),
                            at_us: at,
                            excerpt: vec![log_excerpt(run.log, i)],
                        },
                    );
                }
                last_rank = Some(last_rank.map_or(rank, |l| l.max(rank)));
            }
        }
        if let Some(c) = current {
            closed.insert(c);
        }
        current = Some(e.token);
    }
}

/// [`Property::ElectionTokens`].
pub(super) fn election_tokens(run: &Run<'_>, flag: &mut Flags) {
    let mut seen_tokens: HashMap<u64, NodeId> = HashMap::new();
    let mut prev: Option<&TermView> = None;
    for t in run.terms {
        if let Some(other) = seen_tokens.insert(t.token, t.node) {
            flag.push(
                Property::ElectionTokens,
                Violation {
                    what: format!(
                        "token {} elected twice (node {other}, then node {})",
                        t.token, t.node
                    ),
                    at_us: t.elected_us,
                    excerpt: excerpt(run.history, t.elected_us, 4),
                },
            );
        } else if let Some(p) = prev
            && t.token < p.token
        {
            flag.push(
                Property::ElectionTokens,
                Violation {
                    what: format!(
                        "node {} elected with token {} after node {} with {}",
                        t.node, t.token, p.node, p.token
                    ),
                    at_us: t.elected_us,
                    excerpt: excerpt(run.history, t.elected_us, 4),
                },
            );
        }
        if prev.is_none_or(|p| t.token > p.token) {
            prev = Some(t);
        }
    }
}

/// [`Property::AckedWrites`].
pub(super) fn acked_writes(run: &Run<'_>, flag: &mut Flags) {
    let mut count: HashMap<(NodeId, u64), usize> = HashMap::new();
    for (i, e) in run.log.iter().enumerate() {
        let n = count.entry((e.node, e.seq)).or_insert(0);
        *n += 1;
        match run.by_id.get(&(e.node, e.seq)) {
            None => flag.push(
                Property::AckedWrites,
                Violation {
                    what: format!("log[{i}] = {e} was never sent"),
                    at_us: 0,
                    excerpt: vec![log_excerpt(run.log, i)],
                },
            ),
            Some(a) => {
                if *n == 2 {
                    flag.push(
                        Property::AckedWrites,
                        Violation {
                            what: format!("{e} is in the log more than once"),
                            at_us: a.sent_us,
                            excerpt: vec![log_excerpt(run.log, i)],
                        },
                    );
                }
                if a.token != e.token {
                    flag.push(
                        Property::AckedWrites,
                        Violation {
                            what: format!("{e} was sent with token {}", a.token),
                            at_us: a.sent_us,
                            excerpt: vec![log_excerpt(run.log, i)],
                        },
                    );
                }
                if matches!(a.outcome, Outcome::Stale | Outcome::NotApplied) && *n == 1 {
                    let mut ex = vec![log_excerpt(run.log, i)];
                    ex.extend(excerpt(run.history, a.sent_us, 3));
                    flag.push(
                        Property::AckedWrites,
                        Violation {
                            what: format!("{e} was reported {} but is in the log", a.outcome),
                            at_us: a.sent_us,
                            excerpt: ex,
                        },
                    );
                }
            }
        }
    }
    for a in run.attempts {
        if a.outcome == Outcome::Applied && !count.contains_key(&(a.node, a.seq)) {
            flag.push(
                Property::AckedWrites,
                Violation {
                    what: format!(
                        "{}:{}:{} was acknowledged as applied but is not in the log",
                        a.token, a.node, a.seq
                    ),
                    at_us: a.sent_us,
                    excerpt: excerpt(run.history, a.sent_us, 3),
                },
            );
        }
    }
}

/// [`Property::NoStaleAfterElection`] and [`Property::NoStaleAfterNewerWrite`].
pub(super) fn no_stale_writes(run: &Run<'_>, flag: &mut Flags) {
    // For each token: when its election (a reader's obtain too) completed, and when its first
    // write was applied (a reader's read is not a write).
    let mut elected_at: BTreeMap<u64, u64> = BTreeMap::new();
    for t in run.terms {
        let e = elected_at.entry(t.token).or_insert(t.elected_us);
        *e = (*e).min(t.elected_us);
    }
    let mut first_applied: BTreeMap<u64, u64> = BTreeMap::new();
    for a in run.attempts {
        if a.outcome == Outcome::Applied
            && !run.is_read(a.token)
            && let Some(d) = a.done_us
        {
            let e = first_applied.entry(a.token).or_insert(d);
            *e = (*e).min(d);
        }
    }
    // The earliest completion among tokens above t.
    let earliest_above = |m: &BTreeMap<u64, u64>, t: u64| -> Option<(u64, u64)> {
        m.range(t + 1..).map(|(tok, at)| (*at, *tok)).min()
    };
    for (i, e) in run.log.iter().enumerate() {
        let Some(s) = run.sent(e) else { continue };
        for (p, m, what) in [
            (Property::NoStaleAfterElection, &elected_at, "was elected"),
            (
                Property::NoStaleAfterNewerWrite,
                &first_applied,
                "had a write applied",
            ),
        ] {
            // A read beside a newer reader is the point: reads are judged against writes only.
            if p == Property::NoStaleAfterElection && run.is_read(e.token) {
                continue;
            }
            if let Some((at, tok)) = earliest_above(m, e.token)
                && s > at
            {
                let mut ex = vec![log_excerpt(run.log, i)];
                ex.extend(excerpt(run.history, s, 4));
                flag.push(
                    p,
                    Violation {
                        what: format!(
                            "{e} applied, sent {} ms after term {tok} {what}",
                            (s - at) / 1000
                        ),
                        at_us: s,
                        excerpt: ex,
                    },
                );
            }
        }
    }
}

/// [`Property::NoOverlappingLeases`].
pub(super) fn no_overlapping_leases(run: &Run<'_>, flag: &mut Flags) {
    for (j, b) in run.terms.iter().enumerate() {
        for a in &run.terms[..j] {
            if (a.node == b.node && a.token == b.token) || (a.shared && b.shared) {
                continue;
            }
            if b.elected_us + run.rules.overlap_slack_us < a.end_us()
                && a.elected_us <= b.elected_us
            {
                flag.push(
                    Property::NoOverlappingLeases,
                    Violation {
                        what: format!(
                            "node {} elected with {} while node {}'s term {} was valid for {} ms more",
                            b.node,
                            b.token,
                            a.node,
                            a.token,
                            (a.end_us() - b.elected_us) / 1000
                        ),
                        at_us: b.elected_us,
                        excerpt: excerpt(run.history, b.elected_us, 4),
                    },
                );
            }
        }
    }
}
