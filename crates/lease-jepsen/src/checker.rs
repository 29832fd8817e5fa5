//! The checker: named properties over a run's history and the resource's log.
//!
//! Every property is sound with respect to how records are taken: a `send` is recorded before
//! the write leaves the node, an `elected` after the acquire's reply was seen, a `done` after
//! the outcome is known, and a `stepdown` before the release is sent. So "sent after X
//! completed" is concluded only when the `send` record is later than X's record.
//!
//! Each property is either **asserted** (a violation fails the run) or **reported** (counted
//! and shown, never failing), per scenario: see [`crate::scenario::Scenario::rules`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::history::{Event, HarnessEvent, History, LogEntry, NodeId, Outcome, Record};

/// The properties, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// Tokens in the resource's log never decrease.
    TokensMonotonic,
    /// Each term's writes form one contiguous block of the log, and the blocks come in
    /// election order.
    TermsContiguous,
    /// Election tokens are unique and increase in real time (ordered by the `elected`
    /// records).
    ElectionTokens,
    /// Every write acknowledged as applied is in the log exactly once; no write reported
    /// stale or not applied is; nothing is in the log that was not sent (unknown may go
    /// either way).
    AckedWrites,
    /// No write sent after a newer election completed (its `elected` record) is applied.
    /// Holds when the resource's mark is stamped at election (the log lives on the store).
    NoStaleAfterElection,
    /// No write sent after a newer term's first write was applied (its `done applied`) is
    /// applied: the fence rule at a resource whose mark learns a term at its first write.
    NoStaleAfterNewerWrite,
    /// No term begins (its `elected` record) while another term's lease is still valid by
    /// the library's own deadline rule (its last recorded local deadline, or its step-down).
    NoOverlappingLeases,
    /// After the final heal, a leader's write is applied within 2×TTL + acquire interval +
    /// slack.
    Recovery,
    /// After every isolation of Redis (`isolate-redis`: the whole fleet cut off from its
    /// store, for many TTLs) heals, a leader's write is applied within TTL + acquire interval
    /// + 1 s: recovery is bounded by the lease, not by TCP's retransmission backoff.
    Liveness,
}

impl Property {
    /// Every property, in report order.
    pub const ALL: [Property; 9] = [
        Property::TokensMonotonic,
        Property::TermsContiguous,
        Property::ElectionTokens,
        Property::AckedWrites,
        Property::NoStaleAfterElection,
        Property::NoStaleAfterNewerWrite,
        Property::NoOverlappingLeases,
        Property::Recovery,
        Property::Liveness,
    ];

    /// The property's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Property::TokensMonotonic => "tokens-monotonic",
            Property::TermsContiguous => "terms-contiguous",
            Property::ElectionTokens => "election-tokens",
            Property::AckedWrites => "acked-writes",
            Property::NoStaleAfterElection => "no-stale-after-election",
            Property::NoStaleAfterNewerWrite => "no-stale-after-newer-write",
            Property::NoOverlappingLeases => "no-overlapping-leases",
            Property::Recovery => "recovery",
            Property::Liveness => "liveness",
        }
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a property's violations fail the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A violation fails the run.
    Asserted,
    /// Violations are counted and shown only.
    Reported,
}

/// What the checker needs besides the history and the log.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The mode of each property (absent: reported).
    pub modes: Vec<(Property, Mode)>,
    /// The election's TTL (µs).
    pub ttl_us: u64,
    /// The election's acquire interval (µs).
    pub acquire_interval_us: u64,
    /// Slack added to the recovery bound (µs): a loaded machine, a node restart.
    pub recovery_slack_us: u64,
    /// Slack on the overlap check (µs): the conversion of a tokio deadline to wall-clock
    /// time.
    pub overlap_slack_us: u64,
}

impl Rules {
    /// The mode of `p`.
    pub fn mode(&self, p: Property) -> Mode {
        self.modes
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, m)| *m)
            .unwrap_or(Mode::Reported)
    }

    /// The recovery bound after the final heal (µs).
    pub fn recovery_bound_us(&self) -> u64 {
        2 * self.ttl_us + self.acquire_interval_us + self.recovery_slack_us
    }

    /// The liveness bound after an isolation of Redis heals (µs): TTL + acquire interval +
    /// 1 s (the lease's own bound; no orphan lease can outlive an isolation of many TTLs).
    pub fn liveness_bound_us(&self) -> u64 {
        self.ttl_us + self.acquire_interval_us + 1_000_000
    }
}

/// One violation, with the history around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What is wrong, in words.
    pub what: String,
    /// When (µs since the epoch), for the timeline and the excerpt.
    pub at_us: u64,
    /// The history records around it (and log entries, when relevant).
    pub excerpt: Vec<String>,
}

/// A property's verdict.
#[derive(Debug, Clone)]
pub struct PropertyResult {
    /// Which property.
    pub property: Property,
    /// Asserted or reported.
    pub mode: Mode,
    /// What broke it (empty: it held).
    pub violations: Vec<Violation>,
}

impl PropertyResult {
    /// Whether this property fails the run.
    pub fn fails(&self) -> bool {
        self.mode == Mode::Asserted && !self.violations.is_empty()
    }
}

/// One term, as the history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermView {
    /// Who led.
    pub node: NodeId,
    /// With which token.
    pub token: u64,
    /// When its `elected` record was written.
    pub elected_us: u64,
    /// The last local deadline it recorded.
    pub deadline_us: u64,
    /// When it recorded its step-down, if it did.
    pub stepped_down_us: Option<u64>,
}

impl TermView {
    /// The end of the term's lease as the library judges it: the step-down if recorded, and
    /// never after the local deadline.
    pub fn end_us(&self) -> u64 {
        self.stepped_down_us
            .map_or(self.deadline_us, |s| s.min(self.deadline_us))
    }
}

/// One write attempt, as the history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The writer.
    pub node: NodeId,
    /// Its sequence number.
    pub seq: u64,
    /// The token it carried.
    pub token: u64,
    /// When its `send` was recorded.
    pub sent_us: u64,
    /// When its outcome was recorded (none: the node died or the run ended first).
    pub done_us: Option<u64>,
    /// Its outcome (`Unknown` when no `done` was recorded).
    pub outcome: Outcome,
}

/// The checker's full answer.
#[derive(Debug, Clone)]
pub struct Report {
    /// Per property.
    pub results: Vec<PropertyResult>,
    /// Terms, by election time.
    pub terms: Vec<TermView>,
    /// Attempts, by send time.
    pub attempts: Vec<Attempt>,
    /// Attempts per outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// Write attempts found in the log.
    pub log_len: usize,
    /// The longest stretch without a valid lease (µs), from the first election to the end,
    /// and where it started.
    pub longest_gap: (u64, u64),
    /// How long after the heal the first write was applied (µs), if one was.
    pub recovered_after_us: Option<u64>,
    /// After each isolation of Redis healed: how long until the first write was applied
    /// (µs; `None`: none was), in order.
    pub isolation_recoveries_us: Vec<Option<u64>>,
}

impl Report {
    /// Whether any asserted property is violated.
    pub fn failed(&self) -> bool {
        self.results.iter().any(PropertyResult::fails)
    }

    /// The result of `p`.
    pub fn result(&self, p: Property) -> Option<&PropertyResult> {
        self.results.iter().find(|r| r.property == p)
    }

    /// The number of violations of `p`.
    pub fn violations(&self, p: Property) -> usize {
        self.result(p).map_or(0, |r| r.violations.len())
    }
}

/// The end of every `isolate-redis` fault, with the start of the next fault (if any).
fn isolation_heals(history: &History) -> Vec<(u64, Option<u64>)> {
    let mut isolations = HashSet::new();
    let mut out = Vec::new();
    let mut records: Vec<_> = history.harness.iter().collect();
    records.sort_by_key(|r| r.at_us);
    for r in records {
        match &r.event {
            HarnessEvent::FaultStart { id, kind, .. } => {
                if let Some(last) = out.last_mut()
                    && let (_, next @ None) = last
                {
                    *next = Some(r.at_us);
                }
                if kind == "isolate-redis" {
                    isolations.insert(*id);
                }
            }
            HarnessEvent::FaultEnd { id } if isolations.contains(id) => out.push((r.at_us, None)),
            _ => {}
        }
    }
    out
}

/// Extracts the terms of a history.
pub fn terms(history: &History) -> Vec<TermView> {
    let mut terms: Vec<TermView> = Vec::new();
    let mut index: HashMap<(NodeId, u64), usize> = HashMap::new();
    for r in &history.records {
        match r.event {
            Event::Elected { token, deadline_us } => {
                index.insert((r.node, token), terms.len());
                terms.push(TermView {
                    node: r.node,
                    token,
                    elected_us: r.at_us,
                    deadline_us,
                    stepped_down_us: None,
                });
            }
            Event::Deadline { token, deadline_us } => {
                if let Some(&i) = index.get(&(r.node, token)) {
                    terms[i].deadline_us = terms[i].deadline_us.max(deadline_us);
                }
            }
            Event::SteppedDown { token } => {
                if let Some(&i) = index.get(&(r.node, token)) {
                    terms[i].stepped_down_us.get_or_insert(r.at_us);
                }
            }
            _ => {}
        }
    }
    terms
}

/// Extracts the write attempts of a history.
pub fn attempts(history: &History) -> Vec<Attempt> {
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut index: HashMap<(NodeId, u64), usize> = HashMap::new();
    for r in &history.records {
        match r.event {
            Event::Send { seq, token } => {
                index.insert((r.node, seq), attempts.len());
                attempts.push(Attempt {
                    node: r.node,
                    seq,
                    token,
                    sent_us: r.at_us,
                    done_us: None,
                    outcome: Outcome::Unknown,
                });
            }
            Event::Done { seq, outcome } => {
                if let Some(&i) = index.get(&(r.node, seq)) {
                    attempts[i].done_us = Some(r.at_us);
                    attempts[i].outcome = outcome;
                }
            }
            _ => {}
        }
    }
    attempts
}

/// The records around `at_us` (at most `n` before and after), as text.
fn excerpt(history: &History, at_us: u64, n: usize) -> Vec<String> {
    let pos = history.records.partition_point(|r| r.at_us < at_us);
    let from = pos.saturating_sub(n);
    let to = (pos + n).min(history.records.len());
    let mut lines: Vec<String> = history.records[from..to]
        .iter()
        .map(Record::to_string)
        .collect();
    lines.extend(
        history
            .harness
            .iter()
            .filter(|h| {
                let lo = history.records.get(from).map_or(0, |r| r.at_us);
                let hi = history
                    .records
                    .get(to.saturating_sub(1))
                    .map_or(u64::MAX, |r| r.at_us);
                h.at_us >= lo && h.at_us <= hi
            })
            .map(ToString::to_string),
    );
    lines
}

fn log_excerpt(log: &[LogEntry], i: usize) -> String {
    let from = i.saturating_sub(3);
    let to = (i + 4).min(log.len());
    let parts: Vec<String> = (from..to)
        .map(|j| {
            if j == i {
                format!("[{}]", log[j])
            } else {
                log[j].to_string()
            }
        })
        .collect();
    format!("log[{from}..{to}]: {}", parts.join(" "))
}

/// Checks a run.
pub fn check(history: &History, log: &[LogEntry], rules: &Rules) -> Report {
    let terms = terms(history);
    let attempts = attempts(history);
    let by_id: HashMap<(NodeId, u64), &Attempt> =
        attempts.iter().map(|a| ((a.node, a.seq), a)).collect();
    // The send instant of a log entry's write (none: never sent, a phantom).
    let sent = |e: &LogEntry| by_id.get(&(e.node, e.seq)).map(|a| a.sent_us);
    let mut out: BTreeMap<Property, Vec<Violation>> = BTreeMap::new();
    let mut flag = |p: Property, v: Violation| out.entry(p).or_default().push(v);

    // tokens-monotonic
    let mut highest: Option<(usize, u64)> = None;
    for (i, e) in log.iter().enumerate() {
        if let Some((hi, h)) = highest
            && e.token < h
        {
            let at = sent(e).unwrap_or(0);
            let mut ex = vec![log_excerpt(log, i)];
            ex.extend(excerpt(history, at, 4));
            flag(
                Property::TokensMonotonic,
                Violation {
                    what: format!(
                        "log[{i}] = {e} carries token {} after log[{hi}] carried {h}",
                        e.token
                    ),
                    at_us: at,
                    excerpt: ex,
                },
            );
        }
        if highest.is_none_or(|(_, h)| e.token > h) {
            highest = Some((i, e.token));
        }
    }

    // terms-contiguous
    let election_rank: HashMap<u64, usize> = {
        let mut m = HashMap::new();
        for (i, t) in terms.iter().enumerate() {
            m.entry(t.token).or_insert(i);
        }
        m
    };
    let mut closed: HashSet<u64> = HashSet::new();
    let mut current: Option<u64> = None;
    let mut last_rank: Option<usize> = None;
    for (i, e) in log.iter().enumerate() {
        if current == Some(e.token) {
            continue;
        }
        let at = sent(e).unwrap_or(0);
        if closed.contains(&e.token) {
            flag(
                Property::TermsContiguous,
                Violation {
                    what: format!(
                        "log[{i}] = {e}: term {} writes again after another term's block",
                        e.token
                    ),
                    at_us: at,
                    excerpt: vec![log_excerpt(log, i)],
                },
            );
        }
        match election_rank.get(&e.token) {
            None => flag(
                Property::TermsContiguous,
                Violation {
                    what: format!("log[{i}] = {e}: token {} was never elected", e.token),
                    at_us: at,
                    excerpt: vec![log_excerpt(log, i)],
                },
            ),
            Some(&rank) => {
                if let Some(last) = last_rank
                    && rank < last
                {
                    flag(
                        Property::TermsContiguous,
                        Violation {
                            what: format!(
                                "log[{i}] = {e}: term {} (election #{rank}) follows election #{last}",
                                e.token
                            ),
                            at_us: at,
                            excerpt: vec![log_excerpt(log, i)],
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

    // election-tokens
    let mut seen_tokens: HashMap<u64, NodeId> = HashMap::new();
    let mut prev: Option<&TermView> = None;
    for t in &terms {
        if let Some(other) = seen_tokens.insert(t.token, t.node) {
            flag(
                Property::ElectionTokens,
                Violation {
                    what: format!(
                        "token {} elected twice (node {other}, then node {})",
                        t.token, t.node
                    ),
                    at_us: t.elected_us,
                    excerpt: excerpt(history, t.elected_us, 4),
                },
            );
        } else if let Some(p) = prev
            && t.token < p.token
        {
            flag(
                Property::ElectionTokens,
                Violation {
                    what: format!(
                        "node {} elected with token {} after node {} with {}",
                        t.node, t.token, p.node, p.token
                    ),
                    at_us: t.elected_us,
                    excerpt: excerpt(history, t.elected_us, 4),
                },
            );
        }
        if prev.is_none_or(|p| t.token > p.token) {
            prev = Some(t);
        }
    }

    // acked-writes
    let mut count: HashMap<(NodeId, u64), usize> = HashMap::new();
    for (i, e) in log.iter().enumerate() {
        let n = count.entry((e.node, e.seq)).or_insert(0);
        *n += 1;
        match by_id.get(&(e.node, e.seq)) {
            None => flag(
                Property::AckedWrites,
                Violation {
                    what: format!("log[{i}] = {e} was never sent"),
                    at_us: 0,
                    excerpt: vec![log_excerpt(log, i)],
                },
            ),
            Some(a) => {
                if *n == 2 {
                    flag(
                        Property::AckedWrites,
                        Violation {
                            what: format!("{e} is in the log more than once"),
                            at_us: a.sent_us,
                            excerpt: vec![log_excerpt(log, i)],
                        },
                    );
                }
                if a.token != e.token {
                    flag(
                        Property::AckedWrites,
                        Violation {
                            what: format!("{e} was sent with token {}", a.token),
                            at_us: a.sent_us,
                            excerpt: vec![log_excerpt(log, i)],
                        },
                    );
                }
                if matches!(a.outcome, Outcome::Stale | Outcome::NotApplied) && *n == 1 {
                    let mut ex = vec![log_excerpt(log, i)];
                    ex.extend(excerpt(history, a.sent_us, 3));
                    flag(
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
    for a in &attempts {
        if a.outcome == Outcome::Applied && !count.contains_key(&(a.node, a.seq)) {
            flag(
                Property::AckedWrites,
                Violation {
                    what: format!(
                        "{}:{}:{} was acknowledged as applied but is not in the log",
                        a.token, a.node, a.seq
                    ),
                    at_us: a.sent_us,
                    excerpt: excerpt(history, a.sent_us, 3),
                },
            );
        }
    }

    // no-stale-after-election and no-stale-after-newer-write
    // For each token: when its election completed, and when its first write was applied.
    let mut elected_at: BTreeMap<u64, u64> = BTreeMap::new();
    for t in &terms {
        let e = elected_at.entry(t.token).or_insert(t.elected_us);
        *e = (*e).min(t.elected_us);
    }
    let mut first_applied: BTreeMap<u64, u64> = BTreeMap::new();
    for a in &attempts {
        if a.outcome == Outcome::Applied
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
    for (i, e) in log.iter().enumerate() {
        let Some(s) = sent(e) else { continue };
        for (p, m, what) in [
            (Property::NoStaleAfterElection, &elected_at, "was elected"),
            (
                Property::NoStaleAfterNewerWrite,
                &first_applied,
                "had a write applied",
            ),
        ] {
            if let Some((at, tok)) = earliest_above(m, e.token)
                && s > at
            {
                let mut ex = vec![log_excerpt(log, i)];
                ex.extend(excerpt(history, s, 4));
                flag(
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

    // no-overlapping-leases
    for (j, b) in terms.iter().enumerate() {
        for a in &terms[..j] {
            if a.node == b.node && a.token == b.token {
                continue;
            }
            if b.elected_us + rules.overlap_slack_us < a.end_us() && a.elected_us <= b.elected_us {
                flag(
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
                        excerpt: excerpt(history, b.elected_us, 4),
                    },
                );
            }
        }
    }

    // recovery
    let mut recovered_after_us = None;
    if let Some(healed) = history.healed_at() {
        let first = attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Applied && a.sent_us >= healed)
            .filter_map(|a| a.done_us)
            .min();
        recovered_after_us = first.map(|d| d - healed);
        let bound = rules.recovery_bound_us();
        if first.is_none_or(|d| d - healed > bound) {
            flag(
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
                    excerpt: excerpt(history, healed, 6),
                },
            );
        }
    }

    // liveness: after every isolation of Redis heals
    let mut isolation_recoveries_us = Vec::new();
    for (healed, next_start) in isolation_heals(history) {
        let bound = rules.liveness_bound_us();
        let first = attempts
            .iter()
            .filter(|a| a.outcome == Outcome::Applied && a.sent_us >= healed)
            .filter_map(|a| a.done_us)
            .min();
        isolation_recoveries_us.push(first.map(|d| d - healed));
        if next_start.is_some_and(|n| n < healed + bound) {
            continue; // another fault began before the bound: nothing to judge
        }
        if first.is_none_or(|d| d - healed > bound) {
            flag(
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
                    excerpt: excerpt(history, healed, 6),
                },
            );
        }
    }

    let mut outcomes: BTreeMap<Outcome, usize> = Outcome::ALL.iter().map(|o| (*o, 0)).collect();
    for a in &attempts {
        *outcomes.entry(a.outcome).or_insert(0) += 1;
    }
    let longest_gap = longest_gap(&terms, history.end_at());
    let results = Property::ALL
        .iter()
        .map(|&p| PropertyResult {
            property: p,
            mode: rules.mode(p),
            violations: out.remove(&p).unwrap_or_default(),
        })
        .collect();
    Report {
        results,
        terms,
        attempts,
        outcomes,
        log_len: log.len(),
        longest_gap,
        recovered_after_us,
        isolation_recoveries_us,
    }
}

/// The longest stretch (length, start) between the first election and `end_us` in which no
/// term's lease was valid.
pub fn longest_gap(terms: &[TermView], end_us: u64) -> (u64, u64) {
    let mut windows: Vec<(u64, u64)> = terms.iter().map(|t| (t.elected_us, t.end_us())).collect();
    windows.sort_unstable();
    let Some(&(first, _)) = windows.first() else {
        return (0, 0);
    };
    let mut covered = first;
    let mut best = (0, first);
    for (s, e) in windows {
        if s > covered && s - covered > best.0 {
            best = (s - covered, covered);
        }
        covered = covered.max(e);
    }
    if end_us > covered && end_us - covered > best.0 {
        best = (end_us - covered, covered);
    }
    best
}
