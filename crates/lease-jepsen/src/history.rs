//! Histories: what every node and the harness did, one line per record, in files that survive
//! a `kill -9` of their writer (each record is one `write` to a file opened for appending).
//!
//! A node's record is `<µs since the epoch> <node>.<incarnation> <event> <fields>`:
//!
//! | event | fields | written |
//! |---|---|---|
//! | `start` | — | when the node process starts |
//! | `elected` | token, local deadline (µs) | when the leader callback starts (or a lock's or permit's hold, or a writer's hold of the read-write workload, begins) |
//! | `shared` | token, local deadline (µs) | when a reader's hold (the read-write workload) begins |
//! | `deadline` | token, local deadline (µs) | when a renewal moved the local deadline |
//! | `stepdown` | token | when the term ended (before the release is sent) |
//! | `send` | seq, token | **before** a write (with a reader's token: a read) is sent |
//! | `done` | seq, outcome | when the write's outcome is known |
//!
//! The harness writes `h` records: `fault-start <id> <kind> <target> <detail>`,
//! `fault-end <id>`, `healed`, `end`. Wall-clock time (`SystemTime`) is shared by every
//! process on the machine, so records of different processes compare.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{JepsenError, Result};

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One node process: its index (its lane and namespace) and its incarnation (a node restarted
/// after `kill -9` is a new incarnation, with its own write sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    /// The node's index, from 0.
    pub node: u32,
    /// How many times this node was started before, from 0.
    pub incarnation: u32,
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.node, self.incarnation)
    }
}

impl std::str::FromStr for NodeId {
    type Err = JepsenError;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || JepsenError::Parse {
            what: "a node id",
            line: s.to_owned(),
        };
        let (node, inc) = s.split_once('.').ok_or_else(bad)?;
        Ok(NodeId {
            node: node.parse().map_err(|_| bad())?,
            incarnation: inc.parse().map_err(|_| bad())?,
        })
    }
}

/// What a write's caller heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The resource applied it (the fence accepted the token).
    Applied,
    /// The fence refused the token: nothing was written.
    Stale,
    /// It failed without reaching the resource (a refused connection, an error reply).
    NotApplied,
    /// It may or may not have been applied (a timeout, a lost connection, a node killed
    /// before the reply).
    Unknown,
}

impl Outcome {
    /// Every outcome, in display order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Applied,
        Outcome::Stale,
        Outcome::NotApplied,
        Outcome::Unknown,
    ];

    /// The word used in histories.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Stale => "stale",
            Outcome::NotApplied => "not-applied",
            Outcome::Unknown => "unknown",
        }
    }

    fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a node did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The process started.
    Start,
    /// The elector won a term with `token`; its local deadline is `deadline_us`.
    Elected {
        /// The term's token.
        token: u64,
        /// The local deadline (µs since the epoch).
        deadline_us: u64,
    },
    /// A reader's hold of the read-write workload began with `token` (a term whose operations
    /// at the resource are reads, beside other readers); its local deadline is `deadline_us`.
    Shared {
        /// The hold's token (minted from the same counter as the writers').
        token: u64,
        /// The local deadline (µs since the epoch).
        deadline_us: u64,
    },
    /// A renewal moved the term's local deadline.
    Deadline {
        /// The term's token.
        token: u64,
        /// The new local deadline (µs since the epoch).
        deadline_us: u64,
    },
    /// The term with `token` ended (the node knows it no longer leads).
    SteppedDown {
        /// The term's token.
        token: u64,
    },
    /// A write is about to be sent.
    Send {
        /// The node incarnation's write sequence number.
        seq: u64,
        /// The token it carries.
        token: u64,
    },
    /// A write's outcome.
    Done {
        /// The write's sequence number.
        seq: u64,
        /// What the caller heard.
        outcome: Outcome,
    },
}

/// One line of a node's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When (µs since the epoch).
    pub at_us: u64,
    /// Who.
    pub node: NodeId,
    /// What.
    pub event: Event,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.at_us, self.node)?;
        match &self.event {
            Event::Start => write!(f, "start"),
            Event::Elected { token, deadline_us } => write!(f, "elected {token} {deadline_us}"),
            Event::Shared { token, deadline_us } => write!(f, "shared {token} {deadline_us}"),
            Event::Deadline { token, deadline_us } => {
                write!(f, "deadline {token} {deadline_us}")
            }
            Event::SteppedDown { token } => write!(f, "stepdown {token}"),
            Event::Send { seq, token } => write!(f, "send {seq} {token}"),
            Event::Done { seq, outcome } => write!(f, "done {seq} {outcome}"),
        }
    }
}

/// Where a fault hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A node (by index).
    Node(usize),
    /// A Redis server (by index: the store, or a Redlock server).
    Redis(usize),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Node(i) => write!(f, "n{i}"),
            Target::Redis(i) => write!(f, "r{i}"),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = JepsenError;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || JepsenError::Parse {
            what: "a fault target",
            line: s.to_owned(),
        };
        let (kind, index) = s.split_at_checked(1).ok_or_else(bad)?;
        let index = index.parse().map_err(|_| bad())?;
        match kind {
            "n" => Ok(Target::Node(index)),
            "r" => Ok(Target::Redis(index)),
            _ => Err(bad()),
        }
    }
}

/// What the harness did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessEvent {
    /// A fault began.
    FaultStart {
        /// The fault's number in the schedule.
        id: u32,
        /// Its kind (`pause-node`, `partition`, ...).
        kind: String,
        /// Where.
        target: Target,
        /// Details (direction, ports, duration).
        detail: String,
    },
    /// A fault was healed.
    FaultEnd {
        /// The fault's number.
        id: u32,
    },
    /// Every fault is healed: the recovery bound starts here.
    Healed,
    /// The run ended (the nodes were told to stop).
    End,
}

/// One line of the harness's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessRecord {
    /// When (µs since the epoch).
    pub at_us: u64,
    /// What.
    pub event: HarnessEvent,
}

impl fmt::Display for HarnessRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} h ", self.at_us)?;
        match &self.event {
            HarnessEvent::FaultStart {
                id,
                kind,
                target,
                detail,
            } => write!(f, "fault-start {id} {kind} {target} {detail}"),
            HarnessEvent::FaultEnd { id } => write!(f, "fault-end {id}"),
            HarnessEvent::Healed => write!(f, "healed"),
            HarnessEvent::End => write!(f, "end"),
        }
    }
}

/// A parsed line: a node's or the harness's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A node's record.
    Node(Record),
    /// The harness's record.
    Harness(HarnessRecord),
}

/// Parses one history line.
pub fn parse_line(line: &str) -> Result<Line> {
    let bad = || JepsenError::Parse {
        what: "a history line",
        line: line.to_owned(),
    };
    let mut words = line.split_whitespace();
    let at_us: u64 = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let who = words.next().ok_or_else(bad)?;
    let kind = words.next().ok_or_else(bad)?;
    let mut num = || -> Result<u64> { words.next().and_then(|w| w.parse().ok()).ok_or_else(bad) };
    if who == "h" {
        let event = match kind {
            "fault-start" => {
                let id = u32::try_from(num()?).map_err(|_| bad())?;
                let kind = words.next().ok_or_else(bad)?.to_owned();
                let target = words.next().ok_or_else(bad)?.parse()?;
                let detail = words.collect::<Vec<_>>().join(" ");
                HarnessEvent::FaultStart {
                    id,
                    kind,
                    target,
                    detail,
                }
            }
            "fault-end" => HarnessEvent::FaultEnd {
                id: u32::try_from(num()?).map_err(|_| bad())?,
            },
            "healed" => HarnessEvent::Healed,
            "end" => HarnessEvent::End,
            _ => return Err(bad()),
        };
        return Ok(Line::Harness(HarnessRecord { at_us, event }));
    }
    let node: NodeId = who.parse()?;
    let event = match kind {
        "start" => Event::Start,
        "elected" => Event::Elected {
            token: num()?,
            deadline_us: num()?,
        },
        "shared" => Event::Shared {
            token: num()?,
            deadline_us: num()?,
        },
        "deadline" => Event::Deadline {
            token: num()?,
            deadline_us: num()?,
        },
        "stepdown" => Event::SteppedDown { token: num()? },
        "send" => Event::Send {
            seq: num()?,
            token: num()?,
        },
        "done" => {
            let seq = num()?;
            let outcome = words.next().and_then(Outcome::parse).ok_or_else(bad)?;
            Event::Done { seq, outcome }
        }
        _ => return Err(bad()),
    };
    Ok(Line::Node(Record { at_us, node, event }))
}

/// Everything recorded in a run, merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The nodes' records, by time (stable: a node's own order is kept for equal times).
    pub records: Vec<Record>,
    /// The harness's records, by time.
    pub harness: Vec<HarnessRecord>,
}

impl History {
    /// Merges parsed lines. A torn last line of a killed writer is ignored by the caller
    /// ([`History::read_files`]); here every line is already parsed.
    pub fn from_lines(lines: impl IntoIterator<Item = Line>) -> History {
        let mut h = History::default();
        for line in lines {
            match line {
                Line::Node(r) => h.records.push(r),
                Line::Harness(r) => h.harness.push(r),
            }
        }
        h.records.sort_by_key(|r| r.at_us);
        h.harness.sort_by_key(|r| r.at_us);
        h
    }

    /// Reads and merges history files. A line that does not parse is an error, except the
    /// last line of a file without its newline (a writer killed mid-line: `write` of one
    /// short line is atomic on Linux, so this is not expected, but is not a violation).
    pub fn read_files(paths: &[PathBuf]) -> Result<History> {
        let mut lines = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|error| JepsenError::Io {
                path: path.clone(),
                error,
            })?;
            let complete = text.ends_with('\n');
            let all: Vec<&str> = text.lines().collect();
            for (i, line) in all.iter().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                match parse_line(line) {
                    Ok(l) => lines.push(l),
                    Err(_) if i + 1 == all.len() && !complete => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(History::from_lines(lines))
    }

    /// The instant of the `healed` record, if any.
    pub fn healed_at(&self) -> Option<u64> {
        self.harness
            .iter()
            .find(|r| r.event == HarnessEvent::Healed)
            .map(|r| r.at_us)
    }

    /// The instant of the `end` record, else of the last record.
    pub fn end_at(&self) -> u64 {
        self.harness
            .iter()
            .find(|r| r.event == HarnessEvent::End)
            .map(|r| r.at_us)
            .or_else(|| self.records.last().map(|r| r.at_us))
            .unwrap_or(0)
    }

    /// The first record's instant.
    pub fn start_at(&self) -> u64 {
        let node = self.records.first().map(|r| r.at_us);
        let harness = self.harness.first().map(|r| r.at_us);
        match (node, harness) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(0),
        }
    }
}

/// An appending history file shared by the tasks of one process.
#[derive(Debug)]
pub struct HistoryFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl HistoryFile {
    /// Opens (creates) `path` for appending.
    pub fn open(path: &Path) -> Result<HistoryFile> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|error| JepsenError::Io {
                path: path.to_path_buf(),
                error,
            })?;
        Ok(HistoryFile {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends one line (one `write`; no buffering, so a `kill -9` right after loses nothing).
    pub fn append(&self, line: &dyn fmt::Display) -> Result<()> {
        let text = format!("{line}\n");
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(text.as_bytes())
            .map_err(|error| JepsenError::Io {
                path: self.path.clone(),
                error,
            })
    }

    /// Appends a node record stamped now.
    pub fn node(&self, node: NodeId, event: Event) -> Result<()> {
        self.append(&Record {
            at_us: now_us(),
            node,
            event,
        })
    }

    /// Appends a harness record stamped now; returns its instant.
    pub fn harness(&self, event: HarnessEvent) -> Result<u64> {
        let at_us = now_us();
        self.append(&HarnessRecord { at_us, event })?;
        Ok(at_us)
    }
}

/// One entry of the resource's log: `token:node.incarnation:seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogEntry {
    /// The token the write carried.
    pub token: u64,
    /// The writer.
    pub node: NodeId,
    /// The writer's sequence number.
    pub seq: u64,
}

impl fmt::Display for LogEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.token, self.node, self.seq)
    }
}

impl std::str::FromStr for LogEntry {
    type Err = JepsenError;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || JepsenError::Parse {
            what: "a log entry",
            line: s.to_owned(),
        };
        let mut parts = s.split(':');
        let token = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let node = parts.next().ok_or_else(bad)?.parse()?;
        let seq = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(LogEntry { token, node, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let node = NodeId {
            node: 2,
            incarnation: 1,
        };
        for event in [
            Event::Start,
            Event::Elected {
                token: 7,
                deadline_us: 99,
            },
            Event::Shared {
                token: 8,
                deadline_us: 99,
            },
            Event::Deadline {
                token: 7,
                deadline_us: 100,
            },
            Event::SteppedDown { token: 7 },
            Event::Send { seq: 3, token: 7 },
            Event::Done {
                seq: 3,
                outcome: Outcome::NotApplied,
            },
        ] {
            let r = Record {
                at_us: 5,
                node,
                event,
            };
            assert_eq!(parse_line(&r.to_string()).unwrap(), Line::Node(r));
        }
        let h = HarnessRecord {
            at_us: 9,
            event: HarnessEvent::FaultStart {
                id: 4,
                kind: "partition".into(),
                target: Target::Node(1),
                detail: "both all 2000ms".into(),
            },
        };
        assert_eq!(parse_line(&h.to_string()).unwrap(), Line::Harness(h));
        let e: LogEntry = "12:3.0:44".parse().unwrap();
        assert_eq!(e.to_string(), "12:3.0:44");
        assert!("12:3:44".parse::<LogEntry>().is_err());
        assert!(parse_line("1 0.0 elected x").is_err());
    }
}
