//! What a run is and what it gave: its configuration ([`RunConfig`], [`Workload`]), the faults
//! applied, and the checked summary. The harness produces these; the report and the timeline
//! read them (and nothing of the harness).

use std::path::PathBuf;
use std::time::Duration;

use crate::checker::Report;
use crate::error::{JepsenError, Result};
use crate::history::{History, LogEntry, Target};
use crate::nemesis::Planned;
use crate::scenario::Scenario;

/// What the nodes contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// An `Elector`: terms are leadership terms.
    Election,
    /// A fenced, auto-renewed `Locker` lock: terms are holds of the lock.
    Lock,
    /// Permits of a semaphore of [`crate::SEMAPHORE_PERMITS`], auto-renewed, each writing
    /// through its permit fencer: terms are holds of a permit, and up to `N` overlap. Single
    /// store only (`single-aof`, `control`): the permit check runs on the store, atomically with
    /// the write, so the log lives there.
    Semaphore,
    /// A read-write lock ([`crate::RWLOCK_KEY`]), fenced and auto-renewed: each hold is, at
    /// random, a reader's (`Locker::shared`, beside other readers) or the writer's (the plain
    /// lock of the same key); writers write to the log, readers read (a read is accepted only
    /// if no higher-token write was applied, and is logged). Single store only (`single-aof`,
    /// `control`): every obtain stamps the writers' fence mark there, and Redlock refuses
    /// readers.
    Rwlock,
}

impl Workload {
    /// The workload's name (`--workload`).
    pub fn name(self) -> &'static str {
        match self {
            Workload::Election => "election",
            Workload::Lock => "lock",
            Workload::Semaphore => "semaphore",
            Workload::Rwlock => "rwlock",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = JepsenError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "election" => Ok(Workload::Election),
            "lock" => Ok(Workload::Lock),
            "semaphore" => Ok(Workload::Semaphore),
            "rwlock" => Ok(Workload::Rwlock),
            other => Err(JepsenError::Config(format!(
                "unknown workload {other:?}: election, lock, semaphore or rwlock"
            ))),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The scenario.
    pub scenario: Scenario,
    /// The workload.
    pub workload: Workload,
    /// The nemesis's seed.
    pub seed: u64,
    /// How long faults go on.
    pub time: Duration,
    /// How many nodes (3 to 5).
    pub nodes: usize,
    /// The election's TTL.
    pub ttl: Duration,
    /// Where the run's directory is made (`<out>/<scenario>-<workload>-<seed>-<µs>`).
    pub out: PathBuf,
    /// The `jepsen-node` binary.
    pub node_bin: PathBuf,
    /// A fixed schedule instead of the seed's (a test of one fault, say); `None` by default.
    pub schedule: Option<Vec<Planned>>,
}

impl RunConfig {
    /// A configuration with the defaults: the election workload, 3 nodes, TTL 1 s.
    pub fn new(
        scenario: Scenario,
        seed: u64,
        time: Duration,
        out: PathBuf,
        node_bin: PathBuf,
    ) -> Self {
        RunConfig {
            scenario,
            workload: Workload::Election,
            seed,
            time,
            nodes: 3,
            ttl: Duration::from_secs(1),
            out,
            node_bin,
            schedule: None,
        }
    }
}

/// A fault as it was applied.
#[derive(Debug, Clone)]
pub struct AppliedFault {
    /// Its number.
    pub id: u32,
    /// The planned fault.
    pub planned: Planned,
    /// Where it hit.
    pub target: Target,
    /// When it started and ended (µs since the epoch).
    pub span_us: (u64, u64),
}

/// A checked run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// What was run.
    pub config: RunConfig,
    /// The faults applied.
    pub faults: Vec<AppliedFault>,
    /// The checker's report.
    pub report: Report,
    /// The run's directory (histories, log, summary, timeline).
    pub dir: PathBuf,
    /// The run passed: no asserted property was violated (for the control: some was).
    pub passed: bool,
    /// The merged history.
    pub history: History,
    /// The resource's log.
    pub log: Vec<LogEntry>,
}

/// The result of [`run`](crate::harness::run).
#[derive(Debug, Clone)]
pub enum RunResult {
    /// The machine cannot run the harness (not root, no namespaces): nothing was checked.
    Skipped(String),
    /// The run happened and was checked.
    Checked(Box<RunSummary>),
}
