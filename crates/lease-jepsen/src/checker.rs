//! The checker: named properties over a run's history and the resource's log.
//!
//! Every property is sound with respect to how records are taken: a `send` is recorded before
//! the write leaves the node, an `elected` after the acquire's reply was seen, a `done` after
//! the outcome is known, and a `stepdown` before the release is sent. So "sent after X
//! completed" is concluded only when the `send` record is later than X's record.
//!
//! Each property is either **asserted** (a violation fails the run) or **reported** (counted
//! and shown, never failing), per scenario: see [`crate::scenario::Scenario::rules`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::history::{History, LogEntry, NodeId, Outcome};

mod liveness;
mod safety;
mod semaphore;
mod views;

pub use views::{Attempt, TermView, attempts, longest_gap, terms};

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
    /// At most `N` permits (the semaphore workload's count, [`Rules::permits`]) write at once
    /// as the resource saw it: for each token, the span of the log from its first entry to
    /// its last; no log position lies in more than `N` spans. (Each entry was appended while
    /// its permit was current, and a permit is current over one interval, so the spans of
    /// permits current together are the only ones that can overlap.)
    AtMostNHolders,
    /// After every isolation of Redis (`isolate-redis`: the whole fleet cut off from its
    /// store, for many TTLs) heals, a leader's write is applied within TTL + acquire interval
    /// + 1 s: recovery is bounded by the lease, not by TCP's retransmission backoff.
    Liveness,
}

impl Property {
    /// Every property, in report order.
    pub const ALL: [Property; 10] = [
        Property::TokensMonotonic,
        Property::TermsContiguous,
        Property::ElectionTokens,
        Property::AckedWrites,
        Property::NoStaleAfterElection,
        Property::NoStaleAfterNewerWrite,
        Property::NoOverlappingLeases,
        Property::Recovery,
        Property::AtMostNHolders,
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
            Property::AtMostNHolders => "at-most-n-holders",
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
    /// The semaphore workload's permit count ([`Property::AtMostNHolders`]); `None`: the
    /// property is not checked (one holder at a time, checked by the others).
    pub permits: Option<u32>,
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

/// The inputs every property reads.
struct Run<'a> {
    history: &'a History,
    log: &'a [LogEntry],
    rules: &'a Rules,
    terms: &'a [TermView],
    attempts: &'a [Attempt],
    by_id: HashMap<(NodeId, u64), &'a Attempt>,
}

impl Run<'_> {
    /// The send instant of a log entry's write (none: never sent, a phantom).
    fn sent(&self, e: &LogEntry) -> Option<u64> {
        self.by_id.get(&(e.node, e.seq)).map(|a| a.sent_us)
    }
}

/// The violations found so far, by property.
#[derive(Default)]
struct Flags(BTreeMap<Property, Vec<Violation>>);

impl Flags {
    fn push(&mut self, p: Property, v: Violation) {
        self.0.entry(p).or_default().push(v);
    }
}

/// Checks a run.
pub fn check(history: &History, log: &[LogEntry], rules: &Rules) -> Report {
    let terms = terms(history);
    let attempts = attempts(history);
    let run = Run {
        history,
        log,
        rules,
        terms: &terms,
        attempts: &attempts,
        by_id: attempts.iter().map(|a| ((a.node, a.seq), a)).collect(),
    };
    let mut flags = Flags::default();
    safety::tokens_monotonic(&run, &mut flags);
    safety::terms_contiguous(&run, &mut flags);
    safety::election_tokens(&run, &mut flags);
    safety::acked_writes(&run, &mut flags);
    safety::no_stale_writes(&run, &mut flags);
    safety::no_overlapping_leases(&run, &mut flags);
    if let Some(n) = rules.permits {
        semaphore::at_most_n(&run, n, &mut flags);
    }
    let recovered_after_us = liveness::recovery(&run, &mut flags);
    let isolation_recoveries_us = liveness::liveness(&run, &mut flags);
    let mut out = flags.0;

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
