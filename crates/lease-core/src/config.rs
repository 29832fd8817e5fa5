//! Validated configuration.
//!
//! Every invalid combination is a typed [`ConfigError`] at construction, before any round trip.
//! Defaults are relative to the TTL (renew = TTL/3, acquire = TTL/2) because fixed absolute
//! defaults break short TTLs.

use std::time::Duration;

/// The shortest election TTL accepted. Shorter leases spend most of their life renewing.
pub const MIN_ELECTION_TTL: Duration = Duration::from_millis(100);
/// The shortest interval or timeout accepted anywhere (renew, acquire, auto-renew, retry,
/// operation timeout): 1 ms, the granularity of Redis `PX`. Anything shorter cannot fit a
/// round trip and would only produce a storm of spurious timeouts.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// The longest TTL accepted anywhere (30 days): longer ones are almost surely unit mistakes.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest accepted election name or lock key, in bytes.
pub const MAX_NAME_LEN: usize = 1024;
/// The longest accepted instance id or owner token, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// A configuration or input error, found before any round trip.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The TTL is zero.
    #[error("ttl must be positive")]
    ZeroTtl,
    /// The TTL has a sub-millisecond part (Redis PX takes whole milliseconds).
    #[error("ttl {0:?} is not a whole number of milliseconds")]
    TtlNotWholeMillis(Duration),
    /// The TTL is below the minimum for this use.
    #[error("ttl {ttl:?} is below the minimum {min:?}")]
    TtlTooShort {
        /// The TTL given.
        ttl: Duration,
        /// The minimum.
        min: Duration,
    },
    /// The TTL is above [`MAX_TTL`].
    #[error("ttl {ttl:?} is above the maximum {max:?}")]
    TtlTooLong {
        /// The TTL given.
        ttl: Duration,
        /// The maximum.
        max: Duration,
    },
    /// The renew interval is zero.
    #[error("renew interval must be positive")]
    ZeroRenewInterval,
    /// The renew interval exceeds TTL/2, leaving less than one retry before expiry.
    #[error("renew interval {renew:?} exceeds ttl/2 ({ttl:?}/2)")]
    RenewIntervalTooLong {
        /// The renew interval given.
        renew: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// The acquire interval is zero.
    #[error("acquire interval must be positive")]
    ZeroAcquireInterval,
    /// The acquire interval is not shorter than the TTL.
    #[error("acquire interval {acquire:?} must be shorter than the ttl {ttl:?}")]
    AcquireIntervalTooLong {
        /// The acquire interval given.
        acquire: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// The operation timeout is zero.
    #[error("operation timeout must be positive")]
    ZeroOperationTimeout,
    /// The operation timeout is not shorter than the TTL.
    #[error("operation timeout {timeout:?} must be shorter than the ttl {ttl:?}")]
    OperationTimeoutTooLong {
        /// The timeout given.
        timeout: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// A non-zero interval or timeout below [`MIN_INTERVAL`] (it cannot fit a round trip).
    #[error("{what} {value:?} is below the minimum {min:?}")]
    IntervalTooShort {
        /// Which setting ("renew interval", "acquire interval", "retry delay", ...).
        what: &'static str,
        /// The value given.
        value: Duration,
        /// The minimum, [`MIN_INTERVAL`].
        min: Duration,
    },
    /// An empty name or key.
    #[error("{what} must not be empty")]
    Empty {
        /// What was empty ("name", "instance id", "key", ...).
        what: &'static str,
    },
    /// A name, key or id that is too long.
    #[error("{what} is {len} bytes, more than the maximum {max}")]
    TooLong {
        /// What was too long.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A forbidden character (NUL in ids: it separates the owner from metadata).
    #[error("{what} contains a NUL byte")]
    ContainsNul {
        /// What contained it.
        what: &'static str,
    },
    /// Too many keys in one lease.
    #[error("a lease takes at most {max} keys, got {len}")]
    TooManyKeys {
        /// Number of keys given.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The same key twice in one lease.
    #[error("key {0:?} appears twice")]
    DuplicateKey(String),
    /// Metadata too large.
    #[error("metadata is {len} bytes, more than the maximum {max}")]
    MetadataTooLong {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A Redlock node set that is not odd and at least 3, or repeats a node.
    #[error(transparent)]
    Quorum(#[from] crate::quorum::QuorumConfigError),
    /// A drift factor outside `[0, 0.5)`.
    #[error("drift factor {0} must be in [0, 0.5)")]
    DriftFactor(f64),
    /// Anything else, with a reason.
    #[error("{0}")]
    Invalid(String),
}

/// A validated lease TTL: whole milliseconds, from 1 ms to [`MAX_TTL`].
///
/// ```
/// use std::time::Duration;
/// use lease_core::{Ttl, ConfigError};
/// assert_eq!(Ttl::new(Duration::from_secs(2))?.as_millis(), 2000);
/// assert_eq!(Ttl::new(Duration::ZERO), Err(ConfigError::ZeroTtl));
/// assert!(matches!(Ttl::new(Duration::from_micros(1500)), Err(ConfigError::TtlNotWholeMillis(_))));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Ttl(Duration);

impl Ttl {
    /// Validates a TTL.
    pub fn new(ttl: Duration) -> Result<Ttl, ConfigError> {
        if ttl.is_zero() {
            return Err(ConfigError::ZeroTtl);
        }
        if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ConfigError::TtlNotWholeMillis(ttl));
        }
        if ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLong { ttl, max: MAX_TTL });
        }
        Ok(Ttl(ttl))
    }

    /// A TTL of `ms` milliseconds that was validated before (as [`Ttl::as_millis`] gave it).
    pub(crate) const fn from_valid_millis(ms: u32) -> Ttl {
        Ttl(Duration::from_millis(ms as u64))
    }

    /// The TTL as a duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// Whole milliseconds (what `PX` takes).
    pub fn as_millis(self) -> u64 {
        // At most 30 days in ms: fits in u64.
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Refuses a non-zero `value` below [`MIN_INTERVAL`] (zero has its own error per setting).
pub fn check_interval(what: &'static str, value: Duration) -> Result<(), ConfigError> {
    if !value.is_zero() && value < MIN_INTERVAL {
        return Err(ConfigError::IntervalTooShort {
            what,
            value,
            min: MIN_INTERVAL,
        });
    }
    Ok(())
}

/// Validates an auto-renew interval for a lease of `ttl`: at least [`MIN_INTERVAL`] and at
/// most TTL/2 (so one failed renewal still leaves a retry before expiry). The one rule for
/// elections' renew interval and locks' auto-renewal.
///
/// ```
/// use std::time::Duration;
/// use lease_core::config::{check_renew_interval, ConfigError};
/// let ttl = Duration::from_secs(3);
/// assert!(check_renew_interval(Duration::from_secs(1), ttl).is_ok());
/// assert_eq!(check_renew_interval(Duration::ZERO, ttl), Err(ConfigError::ZeroRenewInterval));
/// assert!(matches!(check_renew_interval(Duration::from_nanos(1), ttl), Err(ConfigError::IntervalTooShort { .. })));
/// assert!(matches!(check_renew_interval(Duration::from_secs(2), ttl), Err(ConfigError::RenewIntervalTooLong { .. })));
/// ```
pub fn check_renew_interval(renew: Duration, ttl: Duration) -> Result<(), ConfigError> {
    if renew.is_zero() {
        return Err(ConfigError::ZeroRenewInterval);
    }
    check_interval("renew interval", renew)?;
    if renew > ttl / 2 {
        return Err(ConfigError::RenewIntervalTooLong { renew, ttl });
    }
    Ok(())
}

/// Validates an operation timeout: positive, at least [`MIN_INTERVAL`].
pub fn check_operation_timeout(timeout: Duration) -> Result<(), ConfigError> {
    if timeout.is_zero() {
        return Err(ConfigError::ZeroOperationTimeout);
    }
    check_interval("operation timeout", timeout)
}

/// `d` truncated to whole milliseconds.
pub(crate) fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn check_text(what: &'static str, s: &str, max: usize) -> Result<(), ConfigError> {
    if s.is_empty() {
        return Err(ConfigError::Empty { what });
    }
    if s.len() > max {
        return Err(ConfigError::TooLong {
            what,
            len: s.len(),
            max,
        });
    }
    if s.as_bytes().contains(&0) {
        return Err(ConfigError::ContainsNul { what });
    }
    Ok(())
}

/// Validated configuration of one elector.
///
/// ```
/// use std::time::Duration;
/// use lease_core::{ElectionConfig, ConfigError};
/// let c = ElectionConfig::builder("jobs", "host-1").ttl(Duration::from_secs(3)).build()?;
/// assert_eq!(c.renew_interval(), Duration::from_secs(1));
/// assert_eq!(c.acquire_interval(), Duration::from_millis(1500));
/// let bad = ElectionConfig::builder("jobs", "host-1")
///     .ttl(Duration::from_secs(3))
///     .renew_interval(Duration::from_secs(2))
///     .build();
/// assert!(matches!(bad, Err(ConfigError::RenewIntervalTooLong { .. })));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    name: String,
    instance_id: crate::Owner,
    ttl: Ttl,
    renew_interval: Duration,
    acquire_interval: Duration,
    operation_timeout: Option<Duration>,
}

impl ElectionConfig {
    /// The default TTL: 15 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// Starts a configuration for election `name`, contended by `instance_id`.
    ///
    /// The instance id must be unique among live processes: two replicas with one id take the
    /// lease over from each other and both lead.
    pub fn builder(
        name: impl Into<String>,
        instance_id: impl Into<String>,
    ) -> ElectionConfigBuilder {
        ElectionConfigBuilder {
            name: name.into(),
            instance_id: instance_id.into(),
            ttl: Self::DEFAULT_TTL,
            renew_interval: None,
            acquire_interval: None,
            operation_timeout: None,
        }
    }

    /// The election name; the keys `<name>:leader`, `<name>:fence`, `<name>:fence:applied`
    /// derive from it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// This instance's id (the value stored in the lease).
    pub fn instance_id(&self) -> &str {
        self.instance_id.as_str()
    }
    /// This instance's id as a lease owner.
    pub fn owner(&self) -> &crate::Owner {
        &self.instance_id
    }
    /// The lease TTL.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }
    /// How often the leader renews.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }
    /// How often a follower tries to acquire.
    pub fn acquire_interval(&self) -> Duration {
        self.acquire_interval
    }
    /// An extra cap on every round trip, below the bounds the machine derives itself.
    pub fn operation_timeout(&self) -> Option<Duration> {
        self.operation_timeout
    }

    /// The bound of one acquire round trip: `min(acquire interval, TTL - renew interval)`,
    /// capped by the operation timeout.
    pub fn acquire_timeout(&self) -> Duration {
        let d = self
            .acquire_interval
            .min(self.ttl.get().saturating_sub(self.renew_interval));
        self.cap(d)
    }

    /// The bound of one release round trip: one renew interval, capped by the operation timeout.
    pub fn release_timeout(&self) -> Duration {
        self.cap(self.renew_interval)
    }

    pub(crate) fn cap(&self, d: Duration) -> Duration {
        match self.operation_timeout {
            Some(t) => d.min(t),
            None => d,
        }
    }

    /// The lease keys of this election.
    pub fn lease_spec(&self) -> crate::LeaseSpec {
        crate::LeaseSpec::election(&self.name)
    }
}

/// Builder of [`ElectionConfig`]; [`ElectionConfigBuilder::build`] validates.
#[derive(Clone, Debug)]
pub struct ElectionConfigBuilder {
    name: String,
    instance_id: String,
    ttl: Duration,
    renew_interval: Option<Duration>,
    acquire_interval: Option<Duration>,
    operation_timeout: Option<Duration>,
}

impl ElectionConfigBuilder {
    /// The lease TTL (default 15 s; at least 100 ms; whole milliseconds).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The renew interval (default TTL/3; at most TTL/2).
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = Some(d);
        self
    }
    /// The acquire interval (default TTL/2; below TTL).
    pub fn acquire_interval(mut self, d: Duration) -> Self {
        self.acquire_interval = Some(d);
        self
    }
    /// An extra cap on every round trip (default none: the machine's own bounds apply).
    pub fn operation_timeout(mut self, d: Duration) -> Self {
        self.operation_timeout = Some(d);
        self
    }
    /// Replaces the instance id.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = id.into();
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<ElectionConfig, ConfigError> {
        check_text("election name", &self.name, MAX_NAME_LEN)?;
        check_text("instance id", &self.instance_id, MAX_ID_LEN)?;
        let instance_id = crate::Owner::new(&self.instance_id)?;
        let ttl = Ttl::new(self.ttl)?;
        if ttl.get() < MIN_ELECTION_TTL {
            return Err(ConfigError::TtlTooShort {
                ttl: ttl.get(),
                min: MIN_ELECTION_TTL,
            });
        }
        let renew = self
            .renew_interval
            .unwrap_or_else(|| whole_millis(ttl.get() / 3));
        check_renew_interval(renew, ttl.get())?;
        let acquire = self
            .acquire_interval
            .unwrap_or_else(|| whole_millis(ttl.get() / 2));
        if acquire.is_zero() {
            return Err(ConfigError::ZeroAcquireInterval);
        }
        check_interval("acquire interval", acquire)?;
        if acquire >= ttl.get() {
            return Err(ConfigError::AcquireIntervalTooLong {
                acquire,
                ttl: ttl.get(),
            });
        }
        if let Some(t) = self.operation_timeout {
            check_operation_timeout(t)?;
            if t >= ttl.get() {
                return Err(ConfigError::OperationTimeoutTooLong {
                    timeout: t,
                    ttl: ttl.get(),
                });
            }
        }
        Ok(ElectionConfig {
            name: self.name,
            instance_id,
            ttl,
            renew_interval: renew,
            acquire_interval: acquire,
            operation_timeout: self.operation_timeout,
        })
    }
}
