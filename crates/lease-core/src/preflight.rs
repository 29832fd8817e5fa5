//! What a store says about how long its fencing tokens survive: the preflight report.
//!
//! Fencing tokens are strict only while the fence counter and mark survive. A store restarted
//! without persistence, a failover to a replica that missed the last writes, or an eviction
//! policy that may drop keys without a TTL, can hand out a token at or below one issued before.
//! [`LeaseBackend::preflight`](crate::LeaseBackend::preflight) reads the store's settings (where
//! the store allows it) into a [`StoreReport`]; [`StoreReport::risks`] says what can go wrong on
//! this store. A setting the store would not disclose (a managed service that forbids `CONFIG`)
//! is *unknown*, never a failure.
//!
//! ```
//! use lease_core::preflight::{Eviction, Persistence, Replication, StoreReport, StoreRisk};
//! let report = StoreReport::new(
//!     Persistence::Snapshots,
//!     Eviction::Never { policy: "noeviction".into() },
//!     Replication::Primary { replicas: 0 },
//! );
//! assert_eq!(report.risks(), vec![StoreRisk::RecentTokensLostOnCrash]);
//! assert!(report.fence_keys_at_risk());
//! ```

use std::fmt;

/// How the store persists writes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// Every acknowledged write is on disk before the reply (Redis: `appendonly yes` with
    /// `appendfsync always`): a restart keeps every token.
    EveryWrite,
    /// Writes reach the disk within about a second (Redis: AOF with `appendfsync everysec` or
    /// `no`): a crash or a kill may lose the last tokens.
    Periodic,
    /// Only periodic snapshots (Redis: RDB `save` rules, no AOF): a crash loses every token since
    /// the last snapshot.
    Snapshots,
    /// Nothing is persisted: a restart loses every token.
    None,
    /// The store did not say (the reason is in [`StoreReport::notes`]).
    Unknown,
}

/// Whether the store may evict the fence keys (they have no TTL).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Eviction {
    /// Keys without a TTL are never evicted (Redis: `noeviction` or a `volatile-*` policy).
    Never {
        /// The store's policy name.
        policy: String,
    },
    /// Any key may be evicted under memory pressure (Redis: an `allkeys-*` policy), the fence
    /// counter and mark included.
    Possible {
        /// The store's policy name.
        policy: String,
    },
    /// The store did not say.
    Unknown,
}

/// The store's place in a replicated set.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replication {
    /// A primary, with this many connected replicas.
    Primary {
        /// Connected replicas.
        replicas: u32,
    },
    /// A replica: writes are refused, or (a writable replica) lost at the next sync.
    Replica,
    /// The store did not say.
    Unknown,
}

/// What can make a token regress (or fail) on this store, from a [`StoreReport`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreRisk {
    /// Nothing is persisted: a restart starts the fence counter again.
    CounterLostOnRestart,
    /// Persistence lags the writes: a crash may lose the last tokens.
    RecentTokensLostOnCrash,
    /// The eviction policy may drop the fence counter and mark.
    FenceKeysEvictable,
    /// Replication is asynchronous: a failover to a replica may lose the last tokens.
    FailoverMayLoseTokens,
    /// This store is a replica: it cannot take the leases' writes.
    Replica,
}

impl fmt::Display for StoreRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreRisk::CounterLostOnRestart => {
                "no persistence: a restart loses the fence counter, and tokens start again"
            }
            StoreRisk::RecentTokensLostOnCrash => {
                "persistence lags writes: a crash may lose the last tokens issued"
            }
            StoreRisk::FenceKeysEvictable => {
                "an allkeys eviction policy may evict the fence counter and mark"
            }
            StoreRisk::FailoverMayLoseTokens => {
                "asynchronous replicas: a failover may lose the last tokens issued"
            }
            StoreRisk::Replica => "this server is a replica: it refuses the leases' writes",
        })
    }
}

/// What a store disclosed about its durability, eviction and replication.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreReport {
    /// How writes are persisted.
    pub persistence: Persistence,
    /// Whether keys without a TTL may be evicted.
    pub eviction: Eviction,
    /// Primary or replica.
    pub replication: Replication,
    /// Where the report comes from, and why a part is unknown.
    pub notes: Vec<String>,
}

impl StoreReport {
    /// A report of these settings, without notes (a backend of your own builds its report
    /// with this; add notes to [`StoreReport::notes`]).
    pub fn new(persistence: Persistence, eviction: Eviction, replication: Replication) -> Self {
        StoreReport {
            persistence,
            eviction,
            replication,
            notes: Vec::new(),
        }
    }

    /// A report in which nothing is known, with a note saying why.
    pub fn unknown(note: impl Into<String>) -> Self {
        StoreReport {
            persistence: Persistence::Unknown,
            eviction: Eviction::Unknown,
            replication: Replication::Unknown,
            notes: vec![note.into()],
        }
    }

    /// The known risks, most severe first. Unknown settings add no risk (they are in
    /// [`StoreReport::notes`]).
    pub fn risks(&self) -> Vec<StoreRisk> {
        let mut risks = Vec::new();
        if self.replication == Replication::Replica {
            risks.push(StoreRisk::Replica);
        }
        match self.persistence {
            Persistence::None => risks.push(StoreRisk::CounterLostOnRestart),
            Persistence::Periodic | Persistence::Snapshots => {
                risks.push(StoreRisk::RecentTokensLostOnCrash)
            }
            _ => {}
        }
        if matches!(self.eviction, Eviction::Possible { .. }) {
            risks.push(StoreRisk::FenceKeysEvictable);
        }
        if matches!(self.replication, Replication::Primary { replicas } if replicas > 0) {
            risks.push(StoreRisk::FailoverMayLoseTokens);
        }
        risks
    }

    /// Whether a known setting lets the fence keys be evicted or lost (the strict check):
    /// no or lagging persistence, an `allkeys` eviction policy, or a replica.
    pub fn fence_keys_at_risk(&self) -> bool {
        self.risks()
            .iter()
            .any(|r| *r != StoreRisk::FailoverMayLoseTokens)
    }

    /// Whether some setting is unknown.
    pub fn is_partial(&self) -> bool {
        self.persistence == Persistence::Unknown
            || self.eviction == Eviction::Unknown
            || self.replication == Replication::Unknown
    }

    /// The worst of several stores' reports (a quorum of nodes): each setting is the riskiest
    /// one reported; a setting some store did not disclose is unknown unless another store
    /// reported a risk for it. Notes are kept, prefixed with each store's `label`.
    pub fn worst<'a>(reports: impl IntoIterator<Item = (&'a str, &'a StoreReport)>) -> Self {
        let mut out = StoreReport {
            persistence: Persistence::EveryWrite,
            eviction: Eviction::Never {
                policy: String::new(),
            },
            replication: Replication::Primary { replicas: 0 },
            notes: Vec::new(),
        };
        let mut any = false;
        for (label, r) in reports {
            any = true;
            if persistence_rank(&r.persistence) > persistence_rank(&out.persistence) {
                out.persistence = r.persistence.clone();
            }
            if eviction_rank(&r.eviction) > eviction_rank(&out.eviction) {
                out.eviction = r.eviction.clone();
            }
            if replication_rank(&r.replication) > replication_rank(&out.replication) {
                out.replication = r.replication.clone();
            }
            out.notes
                .extend(r.notes.iter().map(|n| format!("{label}: {n}")));
        }
        if !any {
            return StoreReport::unknown("no stores");
        }
        out
    }
}

fn persistence_rank(p: &Persistence) -> u8 {
    match p {
        Persistence::EveryWrite => 0,
        Persistence::Unknown => 1,
        Persistence::Periodic => 2,
        Persistence::Snapshots => 3,
        Persistence::None => 4,
    }
}

fn eviction_rank(e: &Eviction) -> u8 {
    match e {
        Eviction::Never { .. } => 0,
        Eviction::Unknown => 1,
        Eviction::Possible { .. } => 2,
    }
}

fn replication_rank(r: &Replication) -> (u8, u32) {
    match r {
        Replication::Primary { replicas } => (0, *replicas),
        Replication::Unknown => (1, 0),
        Replication::Replica => (2, 0),
    }
}

impl fmt::Display for StoreReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "persistence {:?}, eviction {:?}, replication {:?}",
            self.persistence, self.eviction, self.replication
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(p: Persistence, e: Eviction, r: Replication) -> StoreReport {
        StoreReport {
            persistence: p,
            eviction: e,
            replication: r,
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_worst_report_keeps_every_known_risk() {
        let never = || Eviction::Never {
            policy: "noeviction".into(),
        };
        let durable = report(
            Persistence::EveryWrite,
            never(),
            Replication::Primary { replicas: 0 },
        );
        let lagging = report(
            Persistence::Periodic,
            Eviction::Possible {
                policy: "allkeys-lru".into(),
            },
            Replication::Primary { replicas: 2 },
        );
        let silent = StoreReport::unknown("CONFIG refused");
        let worst = StoreReport::worst([("a", &durable), ("b", &lagging), ("c", &silent)]);
        assert_eq!(worst.persistence, Persistence::Periodic);
        assert!(matches!(worst.eviction, Eviction::Possible { .. }));
        assert_eq!(worst.replication, Replication::Unknown);
        assert_eq!(worst.notes, vec!["c: CONFIG refused".to_owned()]);
        assert_eq!(
            worst.risks(),
            vec![
                StoreRisk::RecentTokensLostOnCrash,
                StoreRisk::FenceKeysEvictable
            ]
        );
        // Unknown is never a risk, but it is not "safe" either: it wins over a safe setting.
        let worst = StoreReport::worst([("a", &durable), ("c", &silent)]);
        assert_eq!(worst.persistence, Persistence::Unknown);
        assert!(worst.risks().is_empty() && worst.is_partial());
        assert!(!worst.fence_keys_at_risk());
        // Replicas are a risk, but not one that makes a strict elector refuse.
        let replicated = report(
            Persistence::EveryWrite,
            never(),
            Replication::Primary { replicas: 1 },
        );
        assert_eq!(replicated.risks(), vec![StoreRisk::FailoverMayLoseTokens]);
        assert!(!replicated.fence_keys_at_risk());
        let replica = report(Persistence::EveryWrite, never(), Replication::Replica);
        assert!(replica.fence_keys_at_risk());
        assert_eq!(StoreReport::worst([]).persistence, Persistence::Unknown);
    }
}
