//! Scenarios: which servers, which workload, which faults, and which properties are asserted.

use std::fmt;
use std::time::Duration;

use crate::checker::{Mode, Property, Rules};
use crate::error::JepsenError;
use crate::run::Workload;

/// A workload over a topology of Redis servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// One Redis with `appendfsync always`: the store of the election **and** the resource
    /// (the log is written through the term's fencer, whose mark the election stamps).
    SingleAof,
    /// One Redis without persistence as the store (a restart loses the lease, the counter
    /// and the mark), and a separate resource Redis (`appendfsync always`, never restarted)
    /// fenced by its own mark.
    SingleNoPersist,
    /// Three Redlock servers with `appendfsync always`, and a separate resource Redis fenced
    /// by its own mark.
    Redlock,
    /// The negative control: `SingleAof`'s topology and faults, with writes sent **without**
    /// the fence. The checker must flag it.
    Control,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 4] = [
        Scenario::SingleAof,
        Scenario::SingleNoPersist,
        Scenario::Redlock,
        Scenario::Control,
    ];

    /// The scenario's name (`--scenario`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::SingleAof => "single-aof",
            Scenario::SingleNoPersist => "single-nopersist",
            Scenario::Redlock => "redlock",
            Scenario::Control => "control",
        }
    }

    /// How many store servers (the election's).
    pub fn stores(self) -> usize {
        match self {
            Scenario::Redlock => 3,
            _ => 1,
        }
    }

    /// Whether the stores keep data across `kill -9` (`appendfsync always`).
    pub fn stores_persist(self) -> bool {
        !matches!(self, Scenario::SingleNoPersist)
    }

    /// Whether the log lives on a separate resource server (else on the store, fenced by the
    /// election's own mark).
    pub fn separate_resource(self) -> bool {
        matches!(self, Scenario::SingleNoPersist | Scenario::Redlock)
    }

    /// Whether writes go through the fence.
    pub fn fenced(self) -> bool {
        !matches!(self, Scenario::Control)
    }

    /// Whether a run of this scenario passes when the checker finds violations (the control).
    pub fn expects_violations(self) -> bool {
        matches!(self, Scenario::Control)
    }

    /// Which properties are asserted here, and why the others are only reported.
    pub fn modes(self) -> Vec<(Property, Mode, &'static str)> {
        use Mode::{Asserted, Reported};
        use Property::*;
        let always = [
            (TokensMonotonic, Asserted, "the fence refuses lower tokens"),
            (
                TermsContiguous,
                Asserted,
                "follows from the fence and increasing election tokens",
            ),
            (
                ElectionTokens,
                Asserted,
                "clock-floored tokens survive a store without persistence (docs/fencing.md)",
            ),
            (
                AckedWrites,
                Asserted,
                "the log's server keeps acknowledged writes (appendfsync always) and outcomes are truthful",
            ),
            (
                NoStaleAfterNewerWrite,
                Asserted,
                "the fence rule at the resource",
            ),
            (
                Recovery,
                Asserted,
                "2 x TTL + acquire interval covers an orphan lease and backed-off errors",
            ),
            (
                Liveness,
                Asserted,
                "connections that go silent are rebuilt (issue 26): the lease bounds recovery, not TCP",
            ),
        ];
        let mut modes: Vec<(Property, Mode, &'static str)> = always.to_vec();
        match self {
            Scenario::SingleAof | Scenario::Control => {
                modes.push((
                    NoStaleAfterElection,
                    Asserted,
                    "the log is on the store: the election stamps the mark it is fenced by",
                ));
                modes.push((
                    NoOverlappingLeases,
                    Asserted,
                    "the store keeps the lease across kill -9 (appendfsync always)",
                ));
            }
            Scenario::SingleNoPersist => {
                modes.push((
                    NoStaleAfterElection,
                    Reported,
                    "the resource's own mark learns a term at its first write, not at its election",
                ));
                modes.push((
                    NoOverlappingLeases,
                    Reported,
                    "a restart without persistence drops the lease while its holder still trusts it",
                ));
            }
            Scenario::Redlock => {
                modes.push((
                    NoStaleAfterElection,
                    Reported,
                    "the resource's own mark learns a term at its first write, not at its election",
                ));
                modes.push((
                    NoOverlappingLeases,
                    Asserted,
                    "every server keeps the lease across kill -9 (appendfsync always); drift margin",
                ));
            }
        }
        modes.sort_by_key(|(p, _, _)| *p);
        modes
    }

    /// The checker's rules for an election with this TTL and acquire interval.
    pub fn rules(self, ttl: Duration, acquire_interval: Duration) -> Rules {
        Rules {
            modes: self.modes().into_iter().map(|(p, m, _)| (p, m)).collect(),
            ttl_us: micros(ttl),
            acquire_interval_us: micros(acquire_interval),
            recovery_slack_us: 3_000_000,
            overlap_slack_us: 2_000,
            permits: None,
            read_write: false,
        }
    }

    /// Whether `workload` runs on this scenario: the semaphore needs the single store (its
    /// permit check runs there, atomically with the write; Redlock refuses semaphores, and a
    /// store without persistence loses the log with the permits). So does the read-write
    /// lock: Redlock refuses readers, and a separate resource's mark would not learn of a
    /// reader's obtain (on the store, every obtain stamps the writers' mark).
    pub fn supports(self, workload: Workload) -> bool {
        !matches!(workload, Workload::Semaphore | Workload::Rwlock)
            || matches!(self, Scenario::SingleAof | Scenario::Control)
    }

    /// [`Scenario::modes`] for `workload`. With the semaphore, up to `N` holders write at
    /// once, so the properties of one holder at a time are only reported, and
    /// [`Property::AtMostNHolders`] is asserted in their place. With the read-write lock, the
    /// properties of one holder at a time judge the writes (and reads against writes; see
    /// [`Property`]) and stay as they are, [`Property::NoReaderBesideWriter`] is asserted, and
    /// the order of election records is only reported (readers obtain concurrently).
    pub fn modes_for(self, workload: Workload) -> Vec<(Property, Mode, &'static str)> {
        let mut modes = self.modes();
        if workload == Workload::Semaphore {
            const INTERLEAVED: &str = "up to N permits write at once: their writes interleave";
            for (p, m, why) in &mut modes {
                if matches!(
                    p,
                    Property::TokensMonotonic
                        | Property::TermsContiguous
                        | Property::NoStaleAfterElection
                        | Property::NoStaleAfterNewerWrite
                        | Property::NoOverlappingLeases
                ) {
                    *m = Mode::Reported;
                    *why = INTERLEAVED;
                }
                if *p == Property::ElectionTokens {
                    *m = Mode::Reported;
                    *why =
                        "concurrent obtains may record their grants in another order than minted";
                }
            }
            modes.push((
                Property::AtMostNHolders,
                Mode::Asserted,
                "the permit fence applies a write only while its permit is current at the store",
            ));
            modes.sort_by_key(|(p, _, _)| *p);
        }
        if workload == Workload::Rwlock {
            for (p, m, why) in &mut modes {
                if *p == Property::ElectionTokens {
                    *m = Mode::Reported;
                    *why = "concurrent reader obtains may record their grants in another order than minted";
                }
            }
            modes.push((
                Property::NoReaderBesideWriter,
                Mode::Asserted,
                "every obtain stamps the writers' mark; a read below the last write's token is refused",
            ));
            modes.sort_by_key(|(p, _, _)| *p);
        }
        modes
    }

    /// [`Scenario::rules`] for `workload`.
    pub fn rules_for(self, workload: Workload, ttl: Duration, acquire_interval: Duration) -> Rules {
        let mut rules = self.rules(ttl, acquire_interval);
        if matches!(workload, Workload::Semaphore | Workload::Rwlock) {
            rules.modes = self
                .modes_for(workload)
                .into_iter()
                .map(|(p, m, _)| (p, m))
                .collect();
        }
        match workload {
            Workload::Semaphore => rules.permits = Some(crate::SEMAPHORE_PERMITS),
            Workload::Rwlock => rules.read_write = true,
            Workload::Election | Workload::Lock => {}
        }
        rules
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scenario {
    type Err = JepsenError;
    fn from_str(s: &str) -> Result<Self, JepsenError> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                JepsenError::Config(format!(
                    "unknown scenario {s:?}: expected single-aof, single-nopersist, redlock or control"
                ))
            })
    }
}
