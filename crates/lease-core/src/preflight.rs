//! What a store says about how long its fencing tokens survive: the preflight report.
//!
//! Fencing tokens are strict only while the fence counter and mark survive. A store restarted
//! without persistence, a failover to a replica that missed the last writes, or an eviction
//! policy that may drop keys without a TTL, can hand out a token at or below one issued before.
//! [`LeaseBackend::preflight`](crate::LeaseBackend::preflight) reads the store's settings (where
//! the store allows it) into a [`StoreReport`]; [`StoreReport::risks`] says what can go wrong on
//! this store. A setting the store would not disclose (a managed service that forbids `CONFIG`)
//! is *unknown*: not an error, but never safe either: it is reported as a risk of its own
//! ([`StoreRisk::Unconfirmed`], "cannot confirm persistence"), so a strict check fails on it.
//!
//! The report also names the server and its version ([`ServerInfo`]; a server older than the
//! minimum a backend supports is [`StoreRisk::UnsupportedServer`]) and the difference between
//! the server's clock and this host's ([`ClockSkew`]; above [`CLOCK_SKEW_LIMIT`] it is
//! [`StoreRisk::ClockSkew`]).
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
use std::time::Duration;

/// Above this difference between a store's wall clock and this host's, the preflight reports
/// [`StoreRisk::ClockSkew`] (after subtracting the measurement's uncertainty, half the round
/// trip). Leases are timed by durations, not dates, so a steady skew alone is harmless; but a
/// skew this large means one host is not synchronised, and the correction that comes later
/// steps a clock: Redis expires keys by its wall clock, so a step forward on the server ends
/// every lease early (two holders at once), and a step on this host misdates what it logs.
pub const CLOCK_SKEW_LIMIT: Duration = Duration::from_secs(1);

/// Which setting a [`StoreRisk::Unconfirmed`] could not confirm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// How writes are persisted.
    Persistence,
    /// Whether keys without a TTL may be evicted.
    Eviction,
    /// Primary or replica.
    Replication,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Setting::Persistence => "persistence",
            Setting::Eviction => "eviction",
            Setting::Replication => "replication",
        })
    }
}

/// The server a report was read from: its product and version.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The product, lower case: `redis`, `valkey`, or what the server calls itself.
    pub product: String,
    /// The version as the server reports it (`7.0.15`, `9.1.2`).
    pub version: String,
}

impl ServerInfo {
    /// A server `product` at `version`.
    pub fn new(product: impl Into<String>, version: impl Into<String>) -> Self {
        ServerInfo {
            product: product.into(),
            version: version.into(),
        }
    }

    /// The version's first three numbers (`"7.0.15"` is `(7, 0, 15)`; missing parts are 0);
    /// `None` when it does not start with a number.
    ///
    /// ```
    /// use lease_core::preflight::ServerInfo;
    /// assert_eq!(ServerInfo::new("redis", "6.2.14").version_numbers(), Some((6, 2, 14)));
    /// assert_eq!(ServerInfo::new("valkey", "9.1").version_numbers(), Some((9, 1, 0)));
    /// assert_eq!(ServerInfo::new("redis", "unstable").version_numbers(), None);
    /// ```
    pub fn version_numbers(&self) -> Option<(u32, u32, u32)> {
        let mut parts = self.version.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some((major, minor, patch))
    }
}

impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.product, self.version)
    }
}

/// How far the store's wall clock is from this host's, measured once by the preflight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClockSkew {
    /// The store's clock minus this host's, in milliseconds (positive: the store is ahead),
    /// against the midpoint of the request's round trip.
    pub offset_ms: i64,
    /// Half the round trip: the true offset is within `offset_ms` ± this.
    pub uncertainty: Duration,
}

impl ClockSkew {
    /// A skew of `offset_ms` (store minus host) measured within ± `uncertainty`.
    pub fn new(offset_ms: i64, uncertainty: Duration) -> Self {
        ClockSkew {
            offset_ms,
            uncertainty,
        }
    }

    /// Whether the clocks certainly differ by more than `limit` (the offset less the
    /// uncertainty).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::preflight::ClockSkew;
    /// let ms = Duration::from_millis;
    /// assert!(ClockSkew::new(-1_500, ms(100)).exceeds(ms(1_000)));
    /// assert!(!ClockSkew::new(1_050, ms(100)).exceeds(ms(1_000)));
    /// ```
    pub fn exceeds(&self, limit: Duration) -> bool {
        let certain =
            u128::from(self.offset_ms.unsigned_abs()).saturating_sub(self.uncertainty.as_millis());
        certain > limit.as_millis()
    }
}

impl fmt::Display for ClockSkew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:+} ms (± {} ms)",
            self.offset_ms,
            self.uncertainty.as_millis()
        )
    }
}

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
    /// The store did not disclose this setting (a refused `CONFIG` or `INFO`, an unreachable
    /// node): nothing confirms it is safe, so a strict check fails ("cannot confirm ...").
    Unconfirmed(Setting),
    /// The server is older than the oldest version this backend supports.
    UnsupportedServer {
        /// The server, as reported.
        server: String,
        /// The oldest supported version of that product.
        minimum: String,
    },
    /// The store's clock and this host's differ by more than [`CLOCK_SKEW_LIMIT`].
    ClockSkew {
        /// The store's clock minus this host's, in milliseconds.
        offset_ms: i64,
    },
}

impl fmt::Display for StoreRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreRisk::CounterLostOnRestart => f.write_str(
                "no persistence: a restart loses the fence counter, and tokens start again",
            ),
            StoreRisk::RecentTokensLostOnCrash => {
                f.write_str("persistence lags writes: a crash may lose the last tokens issued")
            }
            StoreRisk::FenceKeysEvictable => {
                f.write_str("an allkeys eviction policy may evict the fence counter and mark")
            }
            StoreRisk::FailoverMayLoseTokens => {
                f.write_str("asynchronous replicas: a failover may lose the last tokens issued")
            }
            StoreRisk::Replica => {
                f.write_str("this server is a replica: it refuses the leases' writes")
            }
            StoreRisk::Unconfirmed(setting) => write!(
                f,
                "cannot confirm {setting}: the server did not disclose it (see the notes)"
            ),
            StoreRisk::UnsupportedServer { server, minimum } => write!(
                f,
                "{server} is older than the oldest supported version ({minimum})"
            ),
            StoreRisk::ClockSkew { offset_ms } => write!(
                f,
                "the server's clock is {offset_ms:+} ms from this host's (limit {} ms): \
                 a clock step on the server would end leases early",
                CLOCK_SKEW_LIMIT.as_millis()
            ),
        }
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
    /// The server's product and version, when it said (a quorum of several servers: unset,
    /// each node's in the notes).
    pub server: Option<ServerInfo>,
    /// The oldest version of [`StoreReport::server`]'s product the backend supports; a
    /// server below it is [`StoreRisk::UnsupportedServer`].
    pub minimum: Option<ServerInfo>,
    /// The store's clock against this host's, when measured (a quorum: the largest).
    pub clock_skew: Option<ClockSkew>,
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
            server: None,
            minimum: None,
            clock_skew: None,
        }
    }

    /// A report in which nothing is known, with a note saying why.
    pub fn unknown(note: impl Into<String>) -> Self {
        StoreReport {
            persistence: Persistence::Unknown,
            eviction: Eviction::Unknown,
            replication: Replication::Unknown,
            notes: vec![note.into()],
            server: None,
            minimum: None,
            clock_skew: None,
        }
    }

    /// The risks, most severe first. A setting the store did not disclose is a risk of its
    /// own, [`StoreRisk::Unconfirmed`] (why is in [`StoreReport::notes`]): unknown never
    /// reads as safe.
    pub fn risks(&self) -> Vec<StoreRisk> {
        let mut risks = Vec::new();
        if let (Some(server), Some(minimum)) = (&self.server, &self.minimum)
            && let (Some(have), Some(need)) = (server.version_numbers(), minimum.version_numbers())
            && have < need
        {
            risks.push(StoreRisk::UnsupportedServer {
                server: server.to_string(),
                minimum: minimum.to_string(),
            });
        }
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
        for (unknown, setting) in [
            (
                self.persistence == Persistence::Unknown,
                Setting::Persistence,
            ),
            (self.eviction == Eviction::Unknown, Setting::Eviction),
            (
                self.replication == Replication::Unknown,
                Setting::Replication,
            ),
        ] {
            if unknown {
                risks.push(StoreRisk::Unconfirmed(setting));
            }
        }
        if let Some(skew) = self.clock_skew
            && skew.exceeds(CLOCK_SKEW_LIMIT)
        {
            risks.push(StoreRisk::ClockSkew {
                offset_ms: skew.offset_ms,
            });
        }
        risks
    }

    /// Whether the fence keys may be evicted or lost, or nothing confirms they are not (the
    /// strict elector's check): no or lagging persistence, an `allkeys` eviction policy, a
    /// replica, an unsupported server, or a setting the store did not disclose. Replicas
    /// of a primary and clock skew are risks too, but not for the keys themselves.
    pub fn fence_keys_at_risk(&self) -> bool {
        self.risks().iter().any(|r| {
            !matches!(
                r,
                StoreRisk::FailoverMayLoseTokens | StoreRisk::ClockSkew { .. }
            )
        })
    }

    /// Whether every setting is known and no risk but [`StoreRisk::FailoverMayLoseTokens`]
    /// applies (`redlease status --check` exits 0 only then; an asynchronous replica is the
    /// norm of a replicated set, documented, and not a failure of the check).
    pub fn confirmed_safe(&self) -> bool {
        self.risks()
            .iter()
            .all(|r| *r == StoreRisk::FailoverMayLoseTokens)
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
            server: None,
            minimum: None,
            clock_skew: None,
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
            if let Some(server) = &r.server {
                out.notes.push(format!("{label}: {server}"));
            }
            if let Some(skew) = r.clock_skew
                && out
                    .clock_skew
                    .is_none_or(|o| skew.offset_ms.unsigned_abs() > o.offset_ms.unsigned_abs())
            {
                out.clock_skew = Some(skew);
            }
            // A node below its product's minimum is reported as such, by name.
            let below = r.risks().into_iter().find_map(|risk| match risk {
                StoreRisk::UnsupportedServer { server, minimum } => Some((server, minimum)),
                _ => None,
            });
            if let Some((server, minimum)) = below {
                out.notes.push(format!(
                    "{label}: {server} is older than the oldest supported version ({minimum})"
                ));
                out.server = r.server.clone();
                out.minimum = r.minimum.clone();
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
        if let Some(server) = &self.server {
            write!(f, "{server}: ")?;
        }
        write!(
            f,
            "persistence {:?}, eviction {:?}, replication {:?}",
            self.persistence, self.eviction, self.replication
        )?;
        if let Some(skew) = &self.clock_skew {
            write!(f, ", clock skew {skew}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(p: Persistence, e: Eviction, r: Replication) -> StoreReport {
        StoreReport::new(p, e, r)
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
                StoreRisk::FenceKeysEvictable,
                StoreRisk::Unconfirmed(Setting::Replication),
            ]
        );
        // Unknown is never safe: it wins over a safe setting, and is a risk of its own.
        let worst = StoreReport::worst([("a", &durable), ("c", &silent)]);
        assert_eq!(worst.persistence, Persistence::Unknown);
        assert!(worst.is_partial());
        assert_eq!(
            worst.risks(),
            vec![
                StoreRisk::Unconfirmed(Setting::Persistence),
                StoreRisk::Unconfirmed(Setting::Eviction),
                StoreRisk::Unconfirmed(Setting::Replication),
            ]
        );
        assert!(worst.fence_keys_at_risk());
        assert!(!worst.confirmed_safe());
        assert_eq!(
            StoreRisk::Unconfirmed(Setting::Persistence).to_string(),
            "cannot confirm persistence: the server did not disclose it (see the notes)"
        );
        // Replicas are a risk, but not one that makes a strict elector refuse.
        let replicated = report(
            Persistence::EveryWrite,
            never(),
            Replication::Primary { replicas: 1 },
        );
        assert_eq!(replicated.risks(), vec![StoreRisk::FailoverMayLoseTokens]);
        assert!(!replicated.fence_keys_at_risk());
        assert!(replicated.confirmed_safe());
        let replica = report(Persistence::EveryWrite, never(), Replication::Replica);
        assert!(replica.fence_keys_at_risk());
        assert_eq!(StoreReport::worst([]).persistence, Persistence::Unknown);
    }

    #[test]
    fn server_version_and_clock_skew_are_judged() {
        let never = Eviction::Never {
            policy: "noeviction".into(),
        };
        let mut r = report(
            Persistence::EveryWrite,
            never,
            Replication::Primary { replicas: 0 },
        );
        r.server = Some(ServerInfo::new("redis", "6.2.14"));
        r.minimum = Some(ServerInfo::new("redis", "6.2.0"));
        r.clock_skew = Some(ClockSkew::new(-40, Duration::from_millis(1)));
        assert!(
            r.risks().is_empty() && r.confirmed_safe(),
            "{:?}",
            r.risks()
        );
        assert_eq!(r.to_string().split(':').next(), Some("redis 6.2.14"));

        r.server = Some(ServerInfo::new("redis", "6.0.20"));
        assert_eq!(
            r.risks(),
            vec![StoreRisk::UnsupportedServer {
                server: "redis 6.0.20".into(),
                minimum: "redis 6.2.0".into()
            }]
        );
        assert!(r.fence_keys_at_risk());

        r.server = Some(ServerInfo::new("redis", "7.0.15"));
        r.clock_skew = Some(ClockSkew::new(2_500, Duration::from_millis(3)));
        assert_eq!(r.risks(), vec![StoreRisk::ClockSkew { offset_ms: 2_500 }]);
        assert!(!r.fence_keys_at_risk(), "skew does not touch the keys");
        assert!(!r.confirmed_safe(), "but the check fails on it");

        // A quorum keeps the largest skew and names each node's server.
        let mut other = r.clone();
        other.clock_skew = Some(ClockSkew::new(-10, Duration::ZERO));
        other.server = Some(ServerInfo::new("valkey", "9.1.2"));
        let worst = StoreReport::worst([("a", &other), ("b", &r)]);
        assert_eq!(worst.clock_skew.map(|s| s.offset_ms), Some(2_500));
        assert!(worst.notes.contains(&"a: valkey 9.1.2".to_owned()));
        assert!(worst.server.is_none());
    }
}
