//! What the checker reads from a history: terms, write attempts, isolation heals, lease gaps,
//! and the excerpts that show a violation in context.

use std::collections::{HashMap, HashSet};

use crate::history::{Event, HarnessEvent, History, LogEntry, NodeId, Outcome, Record};

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
    /// A reader's hold (recorded `shared`, the read-write workload): its operations at the
    /// resource are reads, and other readers' holds may overlap it.
    pub shared: bool,
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

/// The end of every `isolate-redis` fault, with the start of the next fault (if any).
pub(super) fn isolation_heals(history: &History) -> Vec<(u64, Option<u64>)> {
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

/// Extracts the terms of a history (a reader's hold is a term too, marked
/// [`shared`](TermView::shared)).
pub fn terms(history: &History) -> Vec<TermView> {
    let mut terms: Vec<TermView> = Vec::new();
    let mut index: HashMap<(NodeId, u64), usize> = HashMap::new();
    for r in &history.records {
        match r.event {
            Event::Elected { token, deadline_us } | Event::Shared { token, deadline_us } => {
                index.insert((r.node, token), terms.len());
                terms.push(TermView {
                    node: r.node,
                    token,
                    elected_us: r.at_us,
                    deadline_us,
                    stepped_down_us: None,
                    shared: matches!(r.event, Event::Shared { .. }),
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
pub(super) fn excerpt(history: &History, at_us: u64, n: usize) -> Vec<String> {
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

/// Log entries around `log[i]` (marked), as text.
pub(super) fn log_excerpt(log: &[LogEntry], i: usize) -> String {
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
