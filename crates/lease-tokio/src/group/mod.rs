//! [`ElectionGroup`]: many elections (one per name: a shard, a partition) on **one task** over
//! one backend, sharing the names fairly among the group's live members.
//!
//! # Why this API
//!
//! A process that owns "its share" of N names wants three things: to say *which names* and
//! *who it is* once, to learn which names it owns (and each one's fencing token) as that
//! changes, and to stop cleanly. So the group is built from a backend, the names, an instance
//! id and the timing of an [`ElectionConfig`]; it exposes a watch
//! of the owned names ([`ElectionGroup::subscribe`]), each owned name's token and fencer
//! ([`ElectionGroup::token`], [`ElectionGroup::fencer`]), and a shutdown that releases
//! everything ([`ElectionGroup::shutdown`]). There is no per-name leader callback: with
//! thousands of names, the caller's own tasks follow the watch (start work for a name that
//! appears, stop it when it disappears or its [`ElectionGroup::token`] turns `None`).
//!
//! # The share rule
//!
//! Members find each other through a **roster**: `max_members` roster slots, each an ordinary
//! election named `<group>.member.<i>`. A member leads exactly one slot (it contends for every
//! slot while it holds none, and resigns any extra it wins); the slot is renewed in the same
//! batches as the names, so a member that dies frees its slot one TTL later, judged by the
//! server's expiry like every lease. Every acquire interval the member reads which slots are
//! held (one `inspect` per slot), ranks itself among the live slots, and takes its target from
//! [`lease_core::share::target`]: the first `N mod m` ranks own `ceil(N/m)` names, the others
//! `floor(N/m)`. Targets add up to exactly N, so at rest every name is owned and no two members
//! differ by more than one. A member below its target contends for the names it does not own;
//! at its target it contends for nothing more; above it, it **resigns** the excess (each
//! release is a graceful one: the next owner does not wait for a TTL). A member contends for
//! no name until it holds a slot and has read the roster once. A member that **loses** its
//! slot (the key evicted or overwritten, an ACL change) keeps the names it owns — it resigns
//! none, contends for no more — while it contends for a slot again
//! ([`lease_core::share::target_without_slot`]).
//!
//! This is simpler than consistent hashing or a coordinator, needs nothing from the store but
//! the lease operations every backend has, and keeps each name an ordinary fenced election:
//! safety (one leader per name, tokens that only grow) never depends on the share rule, which
//! only decides who *tries*. [`GroupBuilder::contend_for_all`] turns the rule off (every
//! member contends for every name; no roster).
//!
//! # One task, batched renewals
//!
//! The group's task keeps one [`Election`](lease_core::Election) machine per name (and
//! per roster slot) and one timer queue (each machine's [`poll_timeout`] in a binary heap,
//! stale entries skipped; none while its renewal is in flight). When the earliest entry is
//! due, every machine due within the coalesce window ([`Election::coalesce_window`]) is polled;
//! the renewals of all of them go out together through [`LeaseBackend::renew_many`] (one
//! `renew_many.lua` call per 128 leases on Redis), bounded by the earliest of their deadlines,
//! and the batch comes back as one message whose replies are fed each to its own machine. Acquires and releases go out concurrently, at most [`GroupBuilder::max_in_flight`]
//! at once. A leader's loss is still judged by its own machine's deadline: [`ElectionGroup::token`]
//! is `None` at and after it even if the task is late.
//!
//! [`poll_timeout`]: lease_core::Election::poll_timeout
//! [`Election::coalesce_window`]: lease_core::Election::coalesce_window
//! [`LeaseBackend::renew_many`]: lease_core::LeaseBackend::renew_many

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    BackendError, ConfigError, ElectionConfig, Fencing, LeaseBackend, LeaseSpec, Token,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;

mod driver;

/// The default number of roster slots: the most members a group can have.
pub const DEFAULT_MAX_MEMBERS: usize = 32;

/// The default bound on acquires and releases in flight at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// Errors of building an [`ElectionGroup`] (all found before the first round trip).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// A name, the group name, the instance id or the timing is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The backend refuses a name's keys (for example an untagged name on Redis Cluster).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A name appears twice.
    #[error("the name {0:?} appears twice")]
    DuplicateName(String),
    /// No names were given.
    #[error("a group needs at least one name")]
    NoNames,
    /// `max_members` or `max_in_flight` is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// Not called inside a tokio runtime (the group's task needs one).
    #[error("an election group starts its task on the current tokio runtime; there is none")]
    NoRuntime,
}

/// The names a member owns now, each with its term's fencing token.
pub type Owned = Arc<BTreeMap<String, Token>>;

/// What the group's handle and its task share.
pub(crate) struct Shared {
    /// Each owned name's token and its index (of its deadline in `until`). Changed only when
    /// a term begins or ends.
    pub(crate) leases: Mutex<HashMap<Arc<str>, (Token, usize)>>,
    /// Each name's local lease deadline ([`until_nanos`] of it), by index: written by the task
    /// before the name's entry goes into `leases`, then at every renewal that moves it (one
    /// atomic store: no lock, no hash of the name, per renewal). Within a term it only grows,
    /// so a reader that sees an older value sees an earlier deadline.
    pub(crate) until: Box<[AtomicU64]>,
    /// The clock of the task's machines (the origin of `until`).
    pub(crate) clock: Clock,
    /// Live members in the last roster read (0 before the first).
    pub(crate) members: AtomicUsize,
    /// This member's target.
    pub(crate) target: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `at` as nanoseconds after the clock's origin (saturating: far-future instants stay far).
pub(crate) fn until_nanos(at: lease_core::Instant) -> u64 {
    u64::try_from(at.since_origin().as_nanos()).unwrap_or(u64::MAX)
}

/// Many elections on one task, sharing N names among the group's members. See the
/// [module docs](self).
///
/// Dropping the group stops it like [`ElectionGroup::shutdown`] (releasing what it owns, on
/// its own task) without waiting.
pub struct ElectionGroup<B: LeaseBackend> {
    backend: Arc<B>,
    shared: Arc<Shared>,
    owned: watch::Receiver<Owned>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl<B: LeaseBackend> std::fmt::Debug for ElectionGroup<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionGroup")
            .field("owned", &self.owned.borrow().len())
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl<B> std::fmt::Debug for GroupBuilder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBuilder")
            .field("group", &self.group)
            .field("names", &self.names.len())
            .field("instance_id", &self.instance_id)
            .field("share", &self.share)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("members", &self.members.load(Ordering::Relaxed))
            .field("target", &self.target.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Builder of an [`ElectionGroup`]; [`GroupBuilder::start`] validates and starts it.
pub struct GroupBuilder<B> {
    backend: Arc<B>,
    group: String,
    names: Vec<String>,
    instance_id: String,
    ttl: Duration,
    renew_interval: Option<Duration>,
    acquire_interval: Option<Duration>,
    max_members: usize,
    max_in_flight: usize,
    share: bool,
}

impl<B: LeaseBackend> ElectionGroup<B> {
    /// A group named `group` (its roster's keys derive from it) over `names`, for this
    /// member `instance_id` (unique among live members). Timing defaults to an
    /// [`ElectionConfig`]'s (TTL 15 s, renew every TTL/3, acquire every TTL/2).
    ///
    /// ```no_run
    /// # async fn demo<B: lease_core::LeaseBackend>(backend: B) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lease_tokio::ElectionGroup;
    /// let shards: Vec<String> = (0..1000).map(|i| format!("shard-{i}")).collect();
    /// let group = ElectionGroup::builder(backend, "shards", shards, "host-1")
    ///     .ttl(Duration::from_secs(6))
    ///     .start()?;
    /// let mut owned = group.subscribe();
    /// owned.changed().await?;
    /// for (name, token) in owned.borrow().iter() {
    ///     println!("{name}: term {token}");
    /// }
    /// group.shutdown().await; // releases every name it owns
    /// # Ok(()) }
    /// ```
    pub fn builder(
        backend: B,
        group: impl Into<String>,
        names: impl IntoIterator<Item = impl Into<String>>,
        instance_id: impl Into<String>,
    ) -> GroupBuilder<B> {
        GroupBuilder {
            backend: Arc::new(backend),
            group: group.into(),
            names: names.into_iter().map(Into::into).collect(),
            instance_id: instance_id.into(),
            ttl: ElectionConfig::DEFAULT_TTL,
            renew_interval: None,
            acquire_interval: None,
            max_members: DEFAULT_MAX_MEMBERS,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            share: true,
        }
    }

    /// A watch of the names this member owns, each with its term's token; updated once per
    /// turn of the group's task (a batch of changes at once).
    ///
    /// A name leaves the watch when its term ends, which the task notices at the latest at
    /// the term's local deadline; [`ElectionGroup::token`] is the exact answer at any instant.
    pub fn subscribe(&self) -> watch::Receiver<Owned> {
        self.owned.clone()
    }

    /// The names owned now (as last published); none once the group's task has ended (after
    /// [`ElectionGroup::shutdown`], or a panic: its last publication is not kept as if it
    /// were still true).
    pub fn owned(&self) -> Owned {
        if self.owned.has_changed().is_err() {
            return Owned::default();
        }
        Arc::clone(&self.owned.borrow())
    }

    /// `name`'s term token, if this member leads it now: `None` at and after the term's local
    /// deadline, even before the task has noticed.
    pub fn token(&self, name: &str) -> Option<Token> {
        let leases = lock(&self.shared.leases);
        let &(token, idx) = leases.get(name)?;
        // Read while the entry is there: the task removes it (under the lock) before the
        // deadline can belong to another term.
        let until = self.shared.until.get(idx)?.load(Ordering::Acquire);
        (until_nanos(self.shared.clock.now()) < until).then_some(token)
    }

    /// How many live members the last roster read found (0 before the first read, or with
    /// the share rule off).
    pub fn members(&self) -> usize {
        self.shared.members.load(Ordering::Relaxed)
    }

    /// How many names this member aims to own now.
    pub fn target(&self) -> usize {
        self.shared.target.load(Ordering::Relaxed)
    }

    /// Stops: every term ends, everything this member may hold (names and its roster slot)
    /// is released, each release bounded by the release timeout; returns once done.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Whether the group's task has ended (after [`ElectionGroup::shutdown`], or a panic).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl<B: LeaseBackend + Fencing> ElectionGroup<B> {
    /// A fencer for `name`'s current term, if this member leads it now: its writes are refused
    /// at the store as soon as a successor is elected, even if this process has not noticed.
    pub fn fencer(&self, name: &str) -> Option<B::Fencer> {
        let token = self.token(name)?;
        Some(
            self.backend
                .fencer(&LeaseSpec::election_mark_key(name), token),
        )
    }
}

impl<B: LeaseBackend> Drop for ElectionGroup<B> {
    fn drop(&mut self) {
        // The task releases what it holds and ends on its own.
        self.stop.cancel();
    }
}

impl<B: LeaseBackend> GroupBuilder<B> {
    /// The lease TTL of every name (default 15 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The renew interval (default TTL/3).
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = Some(d);
        self
    }
    /// The acquire interval (default TTL/2); also how often the roster is read.
    pub fn acquire_interval(mut self, d: Duration) -> Self {
        self.acquire_interval = Some(d);
        self
    }
    /// The number of roster slots, the most members the group can have (default
    /// [`DEFAULT_MAX_MEMBERS`]). Every member must use the same value. A member that finds
    /// every slot held contends for no name.
    pub fn max_members(mut self, n: usize) -> Self {
        self.max_members = n;
        self
    }
    /// The most acquires and releases in flight at once (default [`DEFAULT_MAX_IN_FLIGHT`]).
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }
    /// Turns the share rule off: this member contends for every name and keeps every one it
    /// wins (no roster). For a single process that must own everything, or as a baseline.
    pub fn contend_for_all(mut self) -> Self {
        self.share = false;
        self
    }

    fn config(&self, name: &str) -> Result<ElectionConfig, GroupError> {
        let mut b = ElectionConfig::builder(name, self.instance_id.as_str()).ttl(self.ttl);
        if let Some(d) = self.renew_interval {
            b = b.renew_interval(d);
        }
        if let Some(d) = self.acquire_interval {
            b = b.acquire_interval(d);
        }
        let config = b.build()?;
        self.backend.check_spec(&config.lease_spec())?;
        Ok(config)
    }

    /// Validates everything (before any round trip) and starts the group's task on the
    /// current tokio runtime.
    pub fn start(self) -> Result<ElectionGroup<B>, GroupError> {
        if self.names.is_empty() {
            return Err(GroupError::NoNames);
        }
        if self.max_members == 0 {
            return Err(GroupError::Zero("max_members"));
        }
        if self.max_in_flight == 0 {
            return Err(GroupError::Zero("max_in_flight"));
        }
        let mut seen = HashSet::with_capacity(self.names.len());
        let mut names = Vec::with_capacity(self.names.len());
        for name in &self.names {
            if !seen.insert(name.as_str()) {
                return Err(GroupError::DuplicateName(name.clone()));
            }
            names.push(self.config(name)?);
        }
        let roster = if self.share {
            (0..self.max_members)
                .map(|i| self.config(&format!("{}.member.{i}", self.group)))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| GroupError::NoRuntime)?;
        let shared = Arc::new(Shared {
            leases: Mutex::new(HashMap::new()),
            until: (0..names.len()).map(|_| AtomicU64::new(0)).collect(),
            clock: Clock::new(),
            members: AtomicUsize::new(0),
            target: AtomicUsize::new(0),
        });
        let (tx, rx) = watch::channel(Owned::default());
        let stop = CancellationToken::new();
        let driver = driver::Driver::new(
            Arc::clone(&self.backend),
            names,
            roster,
            self.max_in_flight,
            Arc::clone(&shared),
            tx,
        );
        let task = runtime.spawn(driver.run(stop.clone()));
        Ok(ElectionGroup {
            backend: self.backend,
            shared,
            owned: rx,
            stop,
            task: Some(task),
        })
    }
}
