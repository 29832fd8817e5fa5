//! The checker against hand-made histories: a clean one passes, and each broken one is flagged
//! by the property it breaks (the negative controls of the checker itself).

use lease_jepsen::checker::{Mode, Property, Report, Rules, check, longest_gap, terms};
use lease_jepsen::history::{
    Event, HarnessEvent, HarnessRecord, History, Line, LogEntry, NodeId, Outcome, Record,
};

const MS: u64 = 1000;

fn id(node: u32) -> NodeId {
    NodeId {
        node,
        incarnation: 0,
    }
}

/// A history under construction (times in ms).
#[derive(Default)]
struct H {
    lines: Vec<Line>,
}

impl H {
    fn at(&mut self, ms: u64, node: u32, event: Event) -> &mut Self {
        self.lines.push(Line::Node(Record {
            at_us: ms * MS,
            node: id(node),
            event,
        }));
        self
    }
    fn elected(&mut self, ms: u64, node: u32, token: u64, deadline_ms: u64) -> &mut Self {
        self.at(
            ms,
            node,
            Event::Elected {
                token,
                deadline_us: deadline_ms * MS,
            },
        )
    }
    fn shared(&mut self, ms: u64, node: u32, token: u64, deadline_ms: u64) -> &mut Self {
        self.at(
            ms,
            node,
            Event::Shared {
                token,
                deadline_us: deadline_ms * MS,
            },
        )
    }
    fn down(&mut self, ms: u64, node: u32, token: u64) -> &mut Self {
        self.at(ms, node, Event::SteppedDown { token })
    }
    /// A write sent at `ms`, done 2 ms later with `outcome`.
    fn write(&mut self, ms: u64, node: u32, seq: u64, token: u64, outcome: Outcome) -> &mut Self {
        self.at(ms, node, Event::Send { seq, token });
        self.at(ms + 2, node, Event::Done { seq, outcome })
    }
    fn harness(&mut self, ms: u64, event: HarnessEvent) -> &mut Self {
        self.lines.push(Line::Harness(HarnessRecord {
            at_us: ms * MS,
            event,
        }));
        self
    }
    fn history(&self) -> History {
        History::from_lines(self.lines.clone())
    }
}

fn entry(token: u64, node: u32, seq: u64) -> LogEntry {
    LogEntry {
        token,
        node: id(node),
        seq,
    }
}

fn rules() -> Rules {
    Rules {
        modes: Property::ALL.iter().map(|p| (*p, Mode::Asserted)).collect(),
        ttl_us: 1000 * MS,
        acquire_interval_us: 250 * MS,
        recovery_slack_us: 1000 * MS,
        overlap_slack_us: 2 * MS,
        permits: None,
        read_write: false,
    }
}

/// Two clean terms: node 0 leads with 10 and resigns, node 1 leads with 20; node 0 keeps
/// writing with 10 after its term (refused); a heal at 3000 and a write right after.
fn clean() -> (H, Vec<LogEntry>) {
    let mut h = H::default();
    h.elected(100, 0, 10, 1100)
        .write(110, 0, 0, 10, Outcome::Applied)
        .write(200, 0, 1, 10, Outcome::Applied)
        .down(900, 0, 10)
        .elected(1000, 1, 20, 2000)
        .write(1010, 1, 0, 20, Outcome::Applied)
        .write(1020, 0, 2, 10, Outcome::Stale)
        .write(1030, 1, 1, 20, Outcome::Unknown)
        .write(1040, 1, 2, 20, Outcome::NotApplied)
        .harness(3000, HarnessEvent::Healed)
        .write(3100, 1, 3, 20, Outcome::Applied)
        .harness(3500, HarnessEvent::End);
    let log = vec![
        entry(10, 0, 0),
        entry(10, 0, 1),
        entry(20, 1, 0),
        entry(20, 1, 1),
        entry(20, 1, 3),
    ];
    (h, log)
}

fn flagged(report: &Report) -> Vec<Property> {
    report
        .results
        .iter()
        .filter(|r| !r.violations.is_empty())
        .map(|r| r.property)
        .collect()
}

#[test]
fn a_clean_history_passes() {
    let (h, log) = clean();
    let report = check(&h.history(), &log, &rules());
    assert!(flagged(&report).is_empty(), "{:#?}", report.results);
    assert!(!report.failed());
    assert_eq!(report.outcomes[&Outcome::Applied], 4);
    assert_eq!(report.outcomes[&Outcome::Stale], 1);
    assert_eq!(report.recovered_after_us, Some(102 * MS));
    // Leaderless from 900 (step-down) to 1000, and from node 1's deadline (2000) to the end.
    assert_eq!(report.longest_gap, (1500 * MS, 2000 * MS));
}

#[test]
fn an_unknown_write_may_be_absent_too() {
    let (h, mut log) = clean();
    log.retain(|e| *e != entry(20, 1, 1));
    assert!(flagged(&check(&h.history(), &log, &rules())).is_empty());
}

#[test]
fn a_stale_write_applied_is_caught() {
    // The deposed leader's write with 10, sent after term 20 was elected and wrote, is in the
    // log: the fence let it through.
    let (h, mut log) = clean();
    log.insert(3, entry(10, 0, 2));
    let f = flagged(&check(&h.history(), &log, &rules()));
    for p in [
        Property::TokensMonotonic,
        Property::TermsContiguous,
        Property::AckedWrites, // it was reported stale
        Property::NoStaleAfterElection,
        Property::NoStaleAfterNewerWrite,
    ] {
        assert!(f.contains(&p), "{p} not flagged: {f:?}");
    }
}

#[test]
fn a_write_sent_after_a_newer_election_is_caught_before_the_new_term_writes() {
    // Node 0 (10) writes at 1005, after term 20 was elected (1000) but before 20's first
    // write: the log stays monotonic, only the election-time rule sees it.
    let (mut h, mut log) = clean();
    h.write(1005, 0, 7, 10, Outcome::Applied);
    log.insert(2, entry(10, 0, 7));
    let f = flagged(&check(&h.history(), &log, &rules()));
    assert_eq!(f, vec![Property::NoStaleAfterElection], "{f:?}");
}

#[test]
fn acknowledged_writes_missing_duplicated_or_invented_are_caught() {
    let (h, log) = clean();
    for broken in [
        // An applied write lost.
        log.iter()
            .copied()
            .filter(|e| *e != entry(10, 0, 1))
            .collect::<Vec<_>>(),
        // Applied twice.
        {
            let mut l = log.clone();
            l.insert(1, entry(10, 0, 0));
            l
        },
        // Never sent.
        {
            let mut l = log.clone();
            l.push(entry(20, 1, 99));
            l
        },
        // Reported not applied, yet there.
        {
            let mut l = log.clone();
            l.insert(4, entry(20, 1, 2));
            l
        },
    ] {
        let f = flagged(&check(&h.history(), &broken, &rules()));
        assert!(f.contains(&Property::AckedWrites), "{broken:?}: {f:?}");
    }
}

#[test]
fn interleaved_terms_are_caught() {
    // 10, 20, 10, 20: both terms' blocks split (and a token decrease).
    let (h, _) = clean();
    let log = vec![
        entry(10, 0, 0),
        entry(20, 1, 0),
        entry(10, 0, 1),
        entry(20, 1, 1),
    ];
    let report = check(&h.history(), &log, &rules());
    assert!(report.violations(Property::TermsContiguous) >= 1);
    assert!(report.violations(Property::TokensMonotonic) >= 1);
}

#[test]
fn reused_or_decreasing_election_tokens_are_caught() {
    let mut h = H::default();
    h.elected(100, 0, 10, 1100)
        .down(500, 0, 10)
        .elected(600, 1, 10, 1600)
        .down(1000, 1, 10)
        .elected(1100, 2, 5, 2100);
    let report = check(&h.history(), &[], &rules());
    assert_eq!(report.violations(Property::ElectionTokens), 2);
}

#[test]
fn an_acquire_while_another_lease_is_valid_is_caught() {
    // Node 1 is elected at 600 while node 0's term (deadline 1100, no step-down) is valid.
    let mut h = H::default();
    h.elected(100, 0, 10, 1100).elected(600, 1, 20, 1600);
    let report = check(&h.history(), &[], &rules());
    assert_eq!(report.violations(Property::NoOverlappingLeases), 1);
    // A renewal recorded later extends the term: still caught. A step-down before 600 is not.
    let mut ok = H::default();
    ok.elected(100, 0, 10, 1100)
        .down(550, 0, 10)
        .elected(600, 1, 20, 1600);
    assert_eq!(
        check(&ok.history(), &[], &rules()).violations(Property::NoOverlappingLeases),
        0
    );
    let mut renewed = H::default();
    renewed
        .elected(100, 0, 10, 500)
        .at(
            400,
            0,
            Event::Deadline {
                token: 10,
                deadline_us: 1400 * MS,
            },
        )
        .elected(900, 1, 20, 1900);
    assert_eq!(
        check(&renewed.history(), &[], &rules()).violations(Property::NoOverlappingLeases),
        1
    );
}

#[test]
fn a_late_or_missing_recovery_is_caught() {
    // Bound: 2 x 1000 + 250 + 1000 = 3250 ms after the heal at 3000.
    let (mut h, log) = clean();
    h.lines
        .retain(|l| !matches!(l, Line::Node(r) if r.at_us >= 3000 * MS));
    let log_without: Vec<LogEntry> = log.iter().copied().filter(|e| e.seq != 3).collect();
    let report = check(&h.history(), &log_without, &rules());
    assert_eq!(report.violations(Property::Recovery), 1, "none applied");
    h.write(6300, 1, 3, 20, Outcome::Applied);
    let report = check(&h.history(), &log, &rules());
    assert_eq!(report.violations(Property::Recovery), 1, "too late");
}

#[test]
fn reported_properties_do_not_fail_the_run() {
    let mut h = H::default();
    h.elected(100, 0, 10, 1100).elected(600, 1, 20, 1600);
    let mut r = rules();
    r.modes = vec![(Property::NoOverlappingLeases, Mode::Reported)];
    let report = check(&h.history(), &[], &r);
    assert_eq!(report.violations(Property::NoOverlappingLeases), 1);
    assert!(!report.failed());
    let mut r = rules();
    r.modes = vec![(Property::NoOverlappingLeases, Mode::Asserted)];
    assert!(check(&h.history(), &[], &r).failed());
}

#[test]
fn the_longest_gap_spans_stretches_without_any_valid_lease() {
    let (h, _) = clean();
    let t = terms(&h.history());
    assert_eq!(longest_gap(&t, 2100 * MS), (100 * MS, 900 * MS));
    assert_eq!(longest_gap(&[], 5), (0, 0));
}

/// Liveness (issue 26): after an `isolate-redis` fault heals, a write within TTL + acquire
/// interval + 1 s (here 500 + 250 + 1000 = 1750 ms); other faults' heals are not judged.
#[test]
fn a_slow_recovery_after_an_isolation_is_caught() {
    let isolation = |h: &mut H, id: u32, kind: &str, start: u64, end: u64| {
        h.harness(
            start,
            HarnessEvent::FaultStart {
                id,
                kind: kind.to_owned(),
                target: lease_jepsen::history::Target::Redis(0),
                detail: String::new(),
            },
        )
        .harness(end, HarnessEvent::FaultEnd { id });
    };
    let mut rules = rules();
    rules.ttl_us = 500 * MS;
    // In time: healed at 1000, a write applied at 1010 (the clean history's writes).
    let (mut h, log) = clean();
    isolation(&mut h, 1, "isolate-redis", 150, 1000);
    let report = check(&h.history(), &log, &rules);
    assert_eq!(
        report.violations(Property::Liveness),
        0,
        "{:#?}",
        report.results
    );
    // Too late: healed at 1050; the next applied write is sent at 3100 (2050 ms later).
    let (mut h, log) = clean();
    isolation(&mut h, 1, "isolate-redis", 1045, 1050);
    let report = check(&h.history(), &log, &rules);
    assert_eq!(
        report.violations(Property::Liveness),
        1,
        "{:#?}",
        report.results
    );
    // The same gap after a partition is not this property's business.
    let (mut h, log) = clean();
    isolation(&mut h, 1, "partition", 1045, 1050);
    let report = check(&h.history(), &log, &rules);
    assert_eq!(report.violations(Property::Liveness), 0);
    // Nor when the next fault begins before the bound.
    let (mut h, log) = clean();
    isolation(&mut h, 1, "isolate-redis", 1045, 1050);
    isolation(&mut h, 2, "pause-node", 2000, 2100);
    let report = check(&h.history(), &log, &rules);
    assert_eq!(report.violations(Property::Liveness), 0);
}

/// Three permit holders of a semaphore of two (tokens 10, 20, 30) whose accepted writes
/// interleave: the semaphore check flags it (the negative control of `at-most-n-holders`);
/// two interleaved holders pass it.
#[test]
fn n_plus_one_overlapping_permit_holders_are_caught() {
    let mut h = H::default();
    h.elected(100, 0, 10, 1100)
        .elected(110, 1, 20, 1110)
        .elected(120, 2, 30, 1120);
    let mut log = Vec::new();
    for (i, (node, token)) in [(0, 10), (1, 20), (2, 30), (0, 10), (1, 20), (2, 30)]
        .into_iter()
        .enumerate()
    {
        let seq = u64::try_from(i).expect("small");
        h.write(200 + 10 * seq, node, seq, token, Outcome::Applied);
        log.push(entry(token, node, seq));
    }
    h.harness(3000, HarnessEvent::End);
    let semaphore = |n| Rules {
        permits: Some(n),
        ..rules()
    };
    let report = check(&h.history(), &log, &semaphore(2));
    assert_eq!(
        report.violations(Property::AtMostNHolders),
        1,
        "{:#?}",
        report.results
    );
    assert!(report.failed());
    // With three permits the same history is within the bound; without a count, unchecked.
    let report = check(&h.history(), &log, &semaphore(3));
    assert_eq!(report.violations(Property::AtMostNHolders), 0);
    let report = check(&h.history(), &log, &rules());
    assert_eq!(report.violations(Property::AtMostNHolders), 0);
}

/// The read-write workload: writer 10 writes and steps down; readers 20 and 30 read side by
/// side (their reads interleave, each below no write's token); writer 40 is admitted after
/// both left and writes; deposed reader 20 reads again between writer 40's writes and is
/// refused. Every property passes, `no-reader-beside-writer` included.
fn clean_read_write() -> (H, Vec<LogEntry>) {
    let mut h = H::default();
    h.elected(100, 0, 10, 1100)
        .write(110, 0, 0, 10, Outcome::Applied)
        .write(120, 0, 1, 10, Outcome::Applied)
        .down(200, 0, 10)
        .shared(300, 1, 20, 1300)
        .shared(310, 2, 30, 1310)
        .write(320, 1, 0, 20, Outcome::Applied)
        .write(330, 2, 0, 30, Outcome::Applied)
        .write(340, 1, 1, 20, Outcome::Applied)
        .write(350, 2, 1, 30, Outcome::Applied)
        .down(400, 1, 20)
        .down(410, 2, 30)
        .elected(500, 0, 40, 1500)
        .write(510, 0, 2, 40, Outcome::Applied)
        .write(520, 1, 2, 20, Outcome::Stale)
        .write(530, 0, 3, 40, Outcome::Applied)
        .down(600, 0, 40)
        .harness(3500, HarnessEvent::End);
    let log = vec![
        entry(10, 0, 0),
        entry(10, 0, 1),
        entry(20, 1, 0),
        entry(30, 2, 0),
        entry(20, 1, 1),
        entry(30, 2, 1),
        entry(40, 0, 2),
        entry(40, 0, 3),
    ];
    (h, log)
}

fn read_write() -> Rules {
    Rules {
        read_write: true,
        ..rules()
    }
}

/// The negative control of `no-reader-beside-writer`: a clean read-write history passes; a
/// reader's read accepted between a writer's writes, a writer's write accepted between
/// readers' reads, and a token granted both to a reader and a writer are flagged.
#[test]
fn a_reader_beside_a_writer_is_caught() {
    let (h, log) = clean_read_write();
    let report = check(&h.history(), &log, &read_write());
    assert!(flagged(&report).is_empty(), "{:#?}", report.results);
    assert!(!report.failed());

    // Deposed reader 20's read, sent after writer 40's first write, let through between
    // writer 40's writes.
    let (mut h, mut log) = clean_read_write();
    h.lines.retain(|l| {
        !matches!(l, Line::Node(r) if r.event == Event::Done { seq: 2, outcome: Outcome::Stale })
    });
    h.at(
        522,
        1,
        Event::Done {
            seq: 2,
            outcome: Outcome::Applied,
        },
    );
    log.insert(7, entry(20, 1, 2));
    let report = check(&h.history(), &log, &read_write());
    assert_eq!(
        report.violations(Property::NoReaderBesideWriter),
        1,
        "{:#?}",
        report.results
    );
    assert!(report.failed());

    // Deposed writer 10's write, sent before the readers were admitted (its outcome unknown:
    // a timeout), applied between their reads. Only this property can see it: the write was
    // sent before any newer election, and the writes' tokens never decrease.
    let (mut h, mut log) = clean_read_write();
    h.write(295, 0, 9, 10, Outcome::Unknown);
    log.insert(4, entry(10, 0, 9));
    let report = check(&h.history(), &log, &read_write());
    assert_eq!(
        flagged(&report),
        vec![Property::NoReaderBesideWriter],
        "{:#?}",
        report.results
    );
    // Inside both readers' spans: one violation per pair.
    assert_eq!(report.violations(Property::NoReaderBesideWriter), 2);
    // Without the read-write rule the same log is not judged by it.
    let report = check(&h.history(), &log, &rules());
    assert_eq!(report.violations(Property::NoReaderBesideWriter), 0);

    // One token, a reader's and a writer's.
    let (mut h, log) = clean_read_write();
    h.shared(150, 2, 10, 1150);
    let report = check(&h.history(), &log, &read_write());
    assert!(report.violations(Property::NoReaderBesideWriter) >= 1);
}
