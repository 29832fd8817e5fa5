//! An in-memory backend with a manual clock and fault switches.
//!
//! It implements [`LeaseBackend`] with exactly the semantics of the Redis scripts (same-owner
//! takeover, counter healing from the mark, exact owner match, guard-then-write-then-advance
//! for fenced writes, WRONGTYPE on a write to a key of another type), so code written against
//! it behaves the same against Redis. Time is a [`ManualClock`] the test advances; nothing here
//! reads a real clock or needs a runtime (delays are futures woken by the clock).
//!
//! It is for unit tests — ours and our users'. It is not a stand-in for Redis in integration
//! tests.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::memory::{ManualClock, MemoryBackend};
//! use lease_core::{LeaseSpec, Owner, Ttl, AcquireRequest, AcquireOutcome, Metadata};
//! use std::sync::Arc;
//!
//! let clock = ManualClock::new();
//! let backend = MemoryBackend::new(clock.clone());
//! let req = AcquireRequest {
//!     spec: Arc::new(LeaseSpec::election("jobs")),
//!     owner: Owner::new("a")?,
//!     ttl: Ttl::new(Duration::from_secs(1))?,
//!     metadata: Metadata::default(),
//! };
//! let first = backend.acquire_now(&req)?;
//! assert!(matches!(first, AcquireOutcome::Acquired { token: Some(t) } if t.get() == 1));
//! clock.advance(Duration::from_secs(2)); // the lease expires
//! let second = backend.acquire_now(&AcquireRequest { owner: Owner::new("b")?, ..req })?;
//! assert!(matches!(second, AcquireOutcome::Acquired { token: Some(t) } if t.get() == 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, FenceOutcome, FencedResource, Fencing,
    LeaseBackend, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome,
    RenewRequest, split_stored,
};
use crate::time::Instant;
use crate::token::{FenceMark, MAX_TOKEN, Token};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere while holding it; the data is still consistent
    // for our purposes (every mutation is a single step), so keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct ClockState {
    now: Instant,
    waiters: Vec<(Instant, Waker)>,
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    state: Arc<Mutex<ClockState>>,
}

impl ManualClock {
    /// A clock at [`Instant::ZERO`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `start`.
    pub fn starting_at(start: Instant) -> Self {
        let c = Self::default();
        lock(&c.state).now = start;
        c
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        lock(&self.state).now
    }

    /// Moves time forward by `d` and wakes the sleepers that are due.
    pub fn advance(&self, d: Duration) {
        let now = self.now() + d;
        self.set(now);
    }

    /// Moves time forward to `t` (never backward) and wakes the sleepers that are due.
    pub fn set(&self, t: Instant) {
        let due: Vec<Waker> = {
            let mut s = lock(&self.state);
            if t > s.now {
                s.now = t;
            }
            let now = s.now;
            let (due, keep): (Vec<_>, Vec<_>) = s.waiters.drain(..).partition(|(at, _)| *at <= now);
            s.waiters = keep;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// A future that completes once the clock reaches `at`.
    pub fn sleep_until(&self, at: Instant) -> Sleep {
        Sleep {
            clock: self.clone(),
            at,
        }
    }

    /// The earliest instant a sleeper waits for, if any (useful to drive simulations).
    pub fn next_wake(&self) -> Option<Instant> {
        lock(&self.state).waiters.iter().map(|(at, _)| *at).min()
    }
}

/// Future returned by [`ManualClock::sleep_until`].
#[derive(Debug)]
pub struct Sleep {
    clock: ManualClock,
    at: Instant,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = lock(&self.clock.state);
        if s.now >= self.at {
            return Poll::Ready(());
        }
        let at = self.at;
        s.waiters.push((at, cx.waker().clone()));
        Poll::Pending
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Str(String),
    Hash(BTreeMap<String, String>),
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    expires_at: Option<Instant>,
}

/// Fault switches of a [`MemoryBackend`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Fail this many next calls with [`BackendError::Unavailable`] (not applied).
    pub fail_next: u32,
    /// Fail every call with [`BackendError::Unavailable`] while set (not applied).
    pub unavailable: bool,
    /// Wait this long on the manual clock before applying each call.
    pub request_delay: Option<Duration>,
    /// Wait this long on the manual clock after applying each call, before replying.
    pub reply_delay: Option<Duration>,
}

#[derive(Debug, Default)]
struct Store {
    entries: HashMap<String, Entry>,
    faults: Faults,
    calls: u64,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Store {
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        let expired = self
            .entries
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| t <= now));
        if expired {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    fn get_str(&mut self, key: &str, now: Instant) -> Result<Option<String>, BackendError> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    fn get_int(&mut self, key: &str, now: Instant) -> Result<u64, BackendError> {
        match self.get_str(key, now)? {
            None => Ok(0),
            Some(s) => s.parse::<u64>().map_err(|_| {
                BackendError::Refused("ERR value is not an integer or out of range".into())
            }),
        }
    }

    fn pttl(&mut self, key: &str, now: Instant) -> Option<Duration> {
        self.live(key, now)
            .map(|e| e.expires_at.map_or(Duration::MAX, |t| t - now))
    }

    fn set_str(&mut self, key: &str, value: String, expires_at: Option<Instant>) {
        self.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value),
                expires_at,
            },
        );
    }

    /// Reads the mark: absent means none; garbage is an error (as `tonumber` would fail).
    fn mark(&mut self, spec: &LeaseSpec, now: Instant) -> Result<u64, BackendError> {
        match spec.mark_key() {
            Some(k) => self.get_int(&k, now),
            None => Ok(0),
        }
    }

    fn acquire(
        &mut self,
        req: &AcquireRequest,
        now: Instant,
    ) -> Result<AcquireOutcome, BackendError> {
        // Check every key before changing any (all-or-nothing).
        for k in req.spec.keys() {
            if let Some(v) = self.get_str(k, now)?
                && !req.owner.matches(&v)
            {
                let remaining = self.pttl(k, now);
                return Ok(AcquireOutcome::Held {
                    holder: Some(split_stored(&v).0.to_owned()),
                    remaining,
                });
            }
        }
        let token = match req.spec.fence_key() {
            None => None,
            Some(fk) => {
                let counter = self.get_int(fk, now)?;
                let mark = self.mark(&req.spec, now)?;
                // Counter healing: never mint at or below a token already applied.
                let base = counter.max(mark);
                let next = base.saturating_add(1);
                if next > MAX_TOKEN {
                    return Err(BackendError::TokenExhausted(format!(
                        "counter {fk} would pass 2^53"
                    )));
                }
                self.set_str(fk, next.to_string(), None);
                if let Some(mk) = req.spec.mark_key() {
                    self.set_str(&mk, next.to_string(), None);
                }
                Some(Token::new(next).map_err(|e| BackendError::Protocol(e.to_string()))?)
            }
        };
        let value = req.owner.stored_value(&req.metadata);
        let expires = now + req.ttl.get();
        for k in req.spec.keys() {
            self.set_str(k, value.clone(), Some(expires));
        }
        Ok(AcquireOutcome::Acquired { token })
    }

    fn all_ours(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<bool, BackendError> {
        for k in spec.keys() {
            match self.get_str(k, now)? {
                Some(v) if owner.matches(&v) => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    fn renew(&mut self, req: &RenewRequest, now: Instant) -> Result<RenewOutcome, BackendError> {
        if !self.all_ours(&req.spec, &req.owner, now)? {
            return Ok(RenewOutcome::NotHeld);
        }
        let expires = now + req.ttl.get();
        for k in req.spec.keys() {
            if let Some(e) = self.live(k, now) {
                e.expires_at = Some(expires);
            }
        }
        Ok(RenewOutcome::Renewed)
    }

    fn release(
        &mut self,
        req: &ReleaseRequest,
        now: Instant,
    ) -> Result<ReleaseOutcome, BackendError> {
        if let (Some(term), Some(fk)) = (req.term, req.spec.fence_key())
            && self.get_int(fk, now)? != term.get()
        {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let mut all = true;
        for k in req.spec.keys() {
            match self.get_str(k, now)? {
                Some(v) if req.owner.matches(&v) => {
                    self.entries.remove(k.as_str());
                }
                _ => all = false,
            }
        }
        Ok(if all {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    fn remaining(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<Option<Duration>, BackendError> {
        if !self.all_ours(spec, owner, now)? {
            return Ok(None);
        }
        Ok(spec.keys().iter().filter_map(|k| self.pttl(k, now)).min())
    }

    fn inspect(&mut self, spec: &LeaseSpec, now: Instant) -> Result<LeaseInfo, BackendError> {
        let mut info = LeaseInfo::default();
        if let Some(k) = spec.keys().first()
            && let Some(v) = self.get_str(k, now)?
        {
            let (o, m) = split_stored(&v);
            info.holder = Some(o.to_owned());
            info.metadata = Some(m.to_owned());
            info.remaining = self.pttl(k, now);
        }
        if let Some(fk) = spec.fence_key() {
            info.counter = Token::new(self.get_int(fk, now)?).ok();
            info.mark = Token::new(self.mark(spec, now)?)
                .map(FenceMark::at)
                .unwrap_or(FenceMark::NONE);
        }
        Ok(info)
    }

    /// The Redlock fenced-quorum second round (`raise.lua`): where every lock key still holds
    /// `owner`, lift counter and mark to at least `token`.
    fn raise(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
        now: Instant,
    ) -> Result<bool, BackendError> {
        let Some(fk) = spec.fence_key() else {
            return Err(BackendError::Invalid(
                "raise_counter needs a fenced lease".into(),
            ));
        };
        if !self.all_ours(spec, owner, now)? {
            return Ok(false);
        }
        let counter = self.get_int(fk, now)?;
        let mark = self.mark(spec, now)?;
        if counter < token.get() {
            self.set_str(fk, token.get().to_string(), None);
        }
        if mark < token.get()
            && let Some(mk) = spec.mark_key()
        {
            self.set_str(&mk, token.get().to_string(), None);
        }
        Ok(true)
    }

    fn apply_write(&mut self, w: &MemoryWrite, now: Instant) -> Result<(), BackendError> {
        match w {
            MemoryWrite::Set { key, value } => {
                self.set_str(key, value.clone(), None);
            }
            MemoryWrite::HSet { key, field, value } => match self.live(key, now) {
                None => {
                    let mut h = BTreeMap::new();
                    h.insert(field.clone(), value.clone());
                    self.entries.insert(
                        key.clone(),
                        Entry {
                            value: Value::Hash(h),
                            expires_at: None,
                        },
                    );
                }
                Some(Entry {
                    value: Value::Hash(h),
                    ..
                }) => {
                    h.insert(field.clone(), value.clone());
                }
                Some(_) => return Err(BackendError::Refused(WRONGTYPE.into())),
            },
            MemoryWrite::Del { keys } => {
                for k in keys {
                    self.entries.remove(k);
                }
            }
        }
        Ok(())
    }

    /// Checks a batch's types as the batch goes (like the Redis multi-write script): a write
    /// sees the types earlier writes of the same batch leave behind.
    fn check_writes(&mut self, writes: &[MemoryWrite], now: Instant) -> Result<(), BackendError> {
        // Per key: Some(true) = string, Some(false) = hash, None = absent.
        let mut seen: HashMap<&str, Option<bool>> = HashMap::new();
        for w in writes {
            match w {
                MemoryWrite::Set { key, .. } => {
                    seen.insert(key, Some(true));
                }
                MemoryWrite::HSet { key, .. } => {
                    let is_str = match seen.get(key.as_str()) {
                        Some(t) => *t,
                        None => self
                            .live(key, now)
                            .map(|e| matches!(e.value, Value::Str(_))),
                    };
                    if is_str == Some(true) {
                        return Err(BackendError::Refused(WRONGTYPE.into()));
                    }
                    seen.insert(key, Some(false));
                }
                MemoryWrite::Del { keys } => {
                    for k in keys {
                        seen.insert(k, None);
                    }
                }
            }
        }
        Ok(())
    }

    fn fenced(
        &mut self,
        mark_key: &str,
        token: Token,
        writes: &[MemoryWrite],
        now: Instant,
    ) -> Result<FenceOutcome, BackendError> {
        let raw = self.get_int(mark_key, now)?;
        let mark = match raw {
            0 => FenceMark::NONE,
            // Above 2^53 (never written by us): every valid token is below it, as in Redis.
            m if m > MAX_TOKEN => {
                return Ok(FenceOutcome::Stale {
                    mark: FenceMark::at(Token::MAX),
                });
            }
            m => Token::new(m).map(FenceMark::at).unwrap_or(FenceMark::NONE),
        };
        if !mark.accepts(token) {
            return Ok(FenceOutcome::Stale { mark });
        }
        // Redis scripts have no rollback: a write that fails leaves the mark unmoved. The
        // in-memory store checks every write first so a batch is all-or-nothing, like the
        // Redis multi-write script, which validates types before writing.
        self.check_writes(writes, now)?;
        for w in writes {
            self.apply_write(w, now)?;
        }
        self.set_str(mark_key, token.get().to_string(), None);
        Ok(FenceOutcome::Applied)
    }
}

/// An in-memory lease store. Clones share the same data and clock.
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    clock: ManualClock,
}

impl MemoryBackend {
    /// An empty store on `clock`.
    pub fn new(clock: ManualClock) -> Self {
        MemoryBackend {
            store: Arc::new(Mutex::new(Store::default())),
            clock,
        }
    }

    /// The clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Replaces the fault switches.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.store).faults = faults;
    }

    /// The current fault switches.
    pub fn faults(&self) -> Faults {
        lock(&self.store).faults.clone()
    }

    /// Fails the next `n` calls with [`BackendError::Unavailable`].
    pub fn fail_next(&self, n: u32) {
        lock(&self.store).faults.fail_next = n;
    }

    /// While `true`, every call fails with [`BackendError::Unavailable`].
    pub fn set_unavailable(&self, unavailable: bool) {
        lock(&self.store).faults.unavailable = unavailable;
    }

    /// Loses every key (a restart without persistence).
    pub fn lose_data(&self) {
        lock(&self.store).entries.clear();
    }

    /// Loses one key (eviction, or a snapshot that did not have it).
    pub fn lose_key(&self, key: &str) {
        lock(&self.store).entries.remove(key);
    }

    /// Sets a string key directly (to stage a scenario, e.g. a counter restored lower).
    pub fn put(&self, key: &str, value: &str) {
        lock(&self.store).set_str(key, value.to_owned(), None);
    }

    /// Reads a string key (`None` if absent, expired, or not a string).
    pub fn get(&self, key: &str) -> Option<String> {
        let now = self.clock.now();
        lock(&self.store).get_str(key, now).ok().flatten()
    }

    /// Reads a hash field.
    pub fn hget(&self, key: &str, field: &str) -> Option<String> {
        let now = self.clock.now();
        match lock(&self.store).live(key, now) {
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) => h.get(field).cloned(),
            _ => None,
        }
    }

    /// How many calls reached the store (including failed ones).
    pub fn calls(&self) -> u64 {
        lock(&self.store).calls
    }

    fn gate(&self) -> Result<(), BackendError> {
        let mut s = lock(&self.store);
        s.calls += 1;
        if s.faults.unavailable {
            return Err(BackendError::Unavailable(
                "in-memory backend switched off".into(),
            ));
        }
        if s.faults.fail_next > 0 {
            s.faults.fail_next -= 1;
            return Err(BackendError::Unavailable(
                "in-memory backend injected failure".into(),
            ));
        }
        Ok(())
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Store, Instant) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        self.gate()?;
        let now = self.clock.now();
        f(&mut lock(&self.store), now)
    }

    async fn delayed<T>(
        &self,
        f: impl FnOnce(&mut Store, Instant) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let faults = self.faults();
        if let Some(d) = faults.request_delay {
            self.clock.sleep_until(self.clock.now() + d).await;
        }
        let r = self.with(f);
        if let Some(d) = faults.reply_delay {
            self.clock.sleep_until(self.clock.now() + d).await;
        }
        r
    }

    /// [`LeaseBackend::acquire`], applied at once (no delay faults).
    pub fn acquire_now(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.with(|s, now| s.acquire(req, now))
    }
    /// [`LeaseBackend::renew`], applied at once.
    pub fn renew_now(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.with(|s, now| s.renew(req, now))
    }
    /// [`LeaseBackend::release`], applied at once.
    pub fn release_now(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.with(|s, now| s.release(req, now))
    }
    /// [`LeaseBackend::inspect`], applied at once.
    pub fn inspect_now(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.with(|s, now| s.inspect(spec, now))
    }
    /// The Redlock fenced-quorum raise (Redis `raise.lua`), applied at once: if every lock key
    /// of `spec` holds `owner`, lifts the counter and the mark to at least `token` and returns
    /// `true`; otherwise changes nothing and returns `false`. `spec` must be fenced.
    pub fn raise_counter_now(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        self.with(|s, now| s.raise(spec, owner, token, now))
    }
    /// [`MemoryBackend::raise_counter_now`] as a call to the store: honours the delay faults
    /// like the [`LeaseBackend`] methods (for the Redlock backend's node trait).
    pub async fn raise_counter(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Result<bool, BackendError> {
        self.delayed(|s, now| s.raise(spec, owner, token, now))
            .await
    }
    /// A fenced batch of writes under `token` against `mark_key`, applied at once.
    pub fn fenced_now(
        &self,
        mark_key: &str,
        token: Token,
        writes: &[MemoryWrite],
    ) -> Result<FenceOutcome, BackendError> {
        self.with(|s, now| s.fenced(mark_key, token, writes, now))
    }
}

#[async_trait]
impl LeaseBackend for MemoryBackend {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.delayed(|s, now| s.acquire(req, now)).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.delayed(|s, now| s.renew(req, now)).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.delayed(|s, now| s.release(req, now)).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.delayed(|s, now| s.remaining(spec, owner, now)).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.delayed(|s, now| s.inspect(spec, now)).await
    }
}

/// A write the in-memory fencer understands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryWrite {
    /// `SET key value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `HSET key field value`.
    HSet {
        /// The key.
        key: String,
        /// The field.
        field: String,
        /// The value.
        value: String,
    },
    /// `DEL keys...`.
    Del {
        /// The keys.
        keys: Vec<String>,
    },
}

/// Fenced writes to a [`MemoryBackend`] under one term's token.
#[derive(Clone, Debug)]
pub struct MemoryFencer {
    backend: MemoryBackend,
    mark_key: String,
    token: Token,
}

impl MemoryFencer {
    /// A fencer for `token` against the mark at `mark_key`.
    pub fn new(backend: MemoryBackend, mark_key: impl Into<String>, token: Token) -> Self {
        MemoryFencer {
            backend,
            mark_key: mark_key.into(),
            token,
        }
    }
    /// The token this fencer writes under.
    pub fn token(&self) -> Token {
        self.token
    }
    /// Applies several writes under one check (all-or-nothing).
    pub async fn apply_all(&self, writes: Vec<MemoryWrite>) -> Result<FenceOutcome, BackendError> {
        let (mark, token) = (self.mark_key.clone(), self.token);
        self.backend
            .delayed(move |s, now| s.fenced(&mark, token, &writes, now))
            .await
    }
}

#[async_trait]
impl FencedResource for MemoryFencer {
    type Write = MemoryWrite;
    type Error = BackendError;
    async fn apply(&self, token: Token, write: MemoryWrite) -> Result<FenceOutcome, BackendError> {
        let mark = self.mark_key.clone();
        self.backend
            .delayed(move |s, now| s.fenced(&mark, token, &[write], now))
            .await
    }
}

impl Fencing for MemoryBackend {
    type Fencer = MemoryFencer;
    fn fencer(&self, mark_key: &str, token: Token) -> MemoryFencer {
        MemoryFencer::new(self.clone(), mark_key, token)
    }
}
