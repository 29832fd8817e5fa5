//! The checker: named properties over a run's history and the resource's log.
//!
//! Every property is sound with respect to how records are taken: a `send` is recorded before
//! the write leaves the node, an `elected` (or `shared`) after the acquire's reply was seen, a
//! `done` after the outcome is known, and a `stepdown` before the release is sent. So "sent
//! after X completed" is concluded only when the `send` record is later than X's record.
//!
//! Each property is either **asserted** (a violation fails the run) or **reported** (counted
//! and shown, never failing), per scenario: see [`crate::scenario::Scenario::rules`].
//!
//! # The read-write workload
//!
//! Readers' holds are recorded `shared` (a [`TermView`] with `shared` set), writers' holds
//! `elected`; both mint from the one fence counter, so a token says which kind of hold it
//! was, and an operation with a reader's token is a **read**, any other a **write**.
//!
//! **What the resource observes.** Only the operations that reach it, in its own order (the
//! log). A write is appended by the writer's fenced script, accepted iff its token is not
//! below the applied mark, which every obtain, a reader's or a writer's, stamps with its token,
//! and every accepted write advances. A read is appended by the read script, accepted iff no
//! write with a higher token was applied before it (it compares its token with the last
//! applied write's, kept beside the log). The resource never sees a hold: a hold begins and
//! ends at the store, and its holder may be paused or cut off while it still believes it
//! holds. So the extent of a hold **as the resource saw it** is its token's **span**: the log
//! from the token's first accepted operation to its last.
//!
//! **[`Property::NoReaderBesideWriter`]**, exactly: in the log, (1) no read lies strictly
//! inside a writer's span, (2) no write lies strictly inside a reader's span or another
//! writer's, and (3) no token is recorded both `shared` and `elected`. Readers' spans may
//! overlap each other. Two spans overlap exactly when an endpoint of one lies strictly inside
//! the other, so (1) and (2) say that no reader's span overlaps a writer's and no two writers'
//! spans overlap.
//!
//! **Why it is sound** (it holds whenever tokens are distinct and minted in admission order,
//! and the resource applies the two rules above atomically and keeps what it applied): a
//! read with token `r` between two writes with `w`: if `r < w`, `w`'s first write was applied
//! before the read, which is then refused; if `r > w`, `r` was minted (stamping the mark)
//! before the read, so `w`'s later write is refused. A write with `w` between two reads with
//! `r`: if `w > r`, the later read is refused; if `w < r`, the mark held `r` before the first
//! read, so the write is refused. Two writers `v < w`: `w` was minted before its first write,
//! so `v`'s later write is refused.
//!
//! **What is not judged here.** A read accepted after a writer was admitted but before it
//! wrote is no violation: the resource had not changed, so the read saw a state no writer
//! had touched (the writer's hold, as the resource saw it, had not begun). Whether holds
//! overlapped as the holders believed them (local deadlines) is
//! [`Property::NoOverlappingLeases`]'s question (two readers excepted): a lease's end is not
//! observable at the resource.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::history::{History, LogEntry, NodeId, Outcome};

mod liveness;
mod rwlock;
mod safety;
mod semaphore;
mod views;

pub use views::{Attempt, TermView, attempts, longest_gap, terms};

/// The properties, by name.
///
/// With the read-write workload some terms are readers' holds ([`TermView::shared`]) and their
/// log entries are reads; the properties of one holder at a time then judge the writes, and
/// [`Property::NoReaderBesideWriter`] judges reads against writes. Without readers every
/// entry is a write and each property reads as its first sentence says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// Tokens in the resource's log never decrease. With readers: the writes' tokens never
    /// decrease, and no read carries a token below an earlier write's (readers' reads
    /// interleave by design).
    TokensMonotonic,
    /// Each term's writes form one contiguous block of the log, and the blocks come in
    /// election order. With readers: over the writes only.
    TermsContiguous,
    /// Election tokens are unique and increase in real time (ordered by the `elected`
    /// records).
    ElectionTokens,
    /// Every write acknowledged as applied is in the log exactly once; no write reported
    /// stale or not applied is; nothing is in the log that was not sent (unknown may go
    /// either way). Reads alike.
    AckedWrites,
    /// No write sent after a newer election completed (its `elected` record) is applied.
    /// Holds when the resource's mark is stamped at election (the log lives on the store).
    /// With readers: a reader's obtain is an election here (it stamps the mark too), and reads
    /// are not judged (a reader's read beside a newer reader is the point).
    NoStaleAfterElection,
    /// No write sent after a newer term's first write was applied (its `done applied`) is
    /// applied: the fence rule at a resource whose mark learns a term at its first write.
    /// With readers: reads are judged too, against newer **writes** only.
    NoStaleAfterNewerWrite,
    /// No term begins (its `elected` record) while another term's lease is still valid by
    /// the library's own deadline rule (its last recorded local deadline, or its step-down).
    /// Two readers' holds may overlap.
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
    /// No reader beside a writer, nor two writers, as the resource saw it (the read-write
    /// workload, [`Rules::read_write`]): for each token, the span of the log from its first
    /// accepted operation to its last; no read lies inside a writer's span, no write inside a
    /// reader's or another writer's span, and no token was granted both to a reader and to a
    /// writer. The exact property and why it is sound: the `rwlock` checker module.
    NoReaderBesideWriter,
    /// After every isolation of Redis (`isolate-redis`: the whole fleet cut off from its
    /// store, for many TTLs) heals, a leader's write is applied within TTL + acquire interval
    /// + 1 s: recovery is bounded by the lease, not by TCP's retransmission backoff.
    Liveness,
}

impl Property {
    /// Every property, in report order.
    pub const ALL: [Property; 11] = [
        Property::TokensMonotonic,
        Property::TermsContiguous,
        Property::ElectionTokens,
        Property::AckedWrites,
        Property::NoStaleAfterElection,
        Property::NoStaleAfterNewerWrite,
        Property::NoOverlappingLeases,
        Property::Recovery,
        Property::AtMostNHolders,
        Property::NoReaderBesideWriter,
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
            Property::NoReaderBesideWriter => "no-reader-beside-writer",
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
    /// The read-write workload ([`Property::NoReaderBesideWriter`] is checked); `false` for
    /// the others.
    pub read_write: bool,
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
    /// The readers' tokens (terms recorded `shared`).
    readers: HashSet<u64>,
}

impl Run<'_> {
    /// The send instant of a log entry's write (none: never sent, a phantom).
    fn sent(&self, e: &LogEntry) -> Option<u64> {
        self.by_id.get(&(e.node, e.seq)).map(|a| a.sent_us)
    }

    /// Whether an operation with `token` is a read (its token is a reader's).
    fn is_read(&self, token: u64) -> bool {
        self.readers.contains(&token)
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
        readers: terms.iter().filter(|t| t.shared).map(|t| t.token).collect(),
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
    if rules.read_write {
        rwlock::no_reader_beside_writer(&run, &mut flags);
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
