//! The key/counter store behind [`MemoryBackend`](super::MemoryBackend): the semantics of the
//! Redis scripts over plain maps, and the fault switches.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::MemoryWrite;
use super::rwlock::{current_readers, first_reader};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, FenceOutcome, ForceReleaseOutcome, LeaseInfo,
    LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, split_stored,
};
use crate::rwlock::writer_retry_within;
use crate::time::Instant;
use crate::token::{Epoch, FenceMark, FenceState, MAX_TOKEN, Token, TokenScheme};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Value {
    Str(String),
    Hash(BTreeMap<String, String>),
    /// A semaphore's permits: owner → when its permit expires (a Redis sorted set of
    /// owner → expiry in ms of the server's clock).
    ZSet(BTreeMap<String, Instant>),
    /// A fair lock's queue: owners in arrival order (a Redis sorted set of owner → arrival
    /// sequence).
    List(Vec<String>),
}

/// What a lock key holds (see [`Store::lock_value`]).
pub(super) enum LockValue {
    Free,
    Str(String),
    Readers(BTreeMap<String, Instant>),
}

#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) value: Value,
    pub(super) expires_at: Option<Instant>,
}

/// Fault switches of a [`MemoryBackend`](super::MemoryBackend): `Faults::default()` (none)
/// and the `with_*` methods (the struct is `#[non_exhaustive]`).
///
/// ```
/// use std::time::Duration;
/// use lease_core::memory::Faults;
/// let slow = Faults::default().with_reply_delay(Some(Duration::from_millis(300)));
/// assert_eq!(slow.reply_delay, Some(Duration::from_millis(300)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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

impl Faults {
    /// Fail this many next calls (not applied).
    pub fn with_fail_next(mut self, n: u32) -> Faults {
        self.fail_next = n;
        self
    }

    /// Fail every call while set (not applied).
    pub fn with_unavailable(mut self, unavailable: bool) -> Faults {
        self.unavailable = unavailable;
        self
    }

    /// Wait this long on the manual clock before applying each call.
    pub fn with_request_delay(mut self, delay: Option<Duration>) -> Faults {
        self.request_delay = delay;
        self
    }

    /// Wait this long on the manual clock after applying each call, before replying.
    pub fn with_reply_delay(mut self, delay: Option<Duration>) -> Faults {
        self.reply_delay = delay;
        self
    }
}

#[derive(Debug, Default)]
pub(super) struct Store {
    pub(super) entries: HashMap<String, Entry>,
    pub(super) faults: Faults,
    pub(super) calls: u64,
    pub(super) scheme: Scheme,
    /// Added to the clock's reading (µs since [`Instant::ZERO`]) to give the "server time".
    pub(super) wall_offset_us: i64,
}

/// The memory backend's token scheme: [`TokenScheme::Counter`] unless told otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scheme(pub(super) TokenScheme);

impl Default for Scheme {
    fn default() -> Self {
        Scheme(TokenScheme::Counter)
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// [`BackendError::Corrupt`] for `key`, the name escaped as the Redis scripts escape it (the
/// first 200 bytes; bytes outside printable ASCII, the space and the backslash as `\xNN`).
pub(super) fn corrupt(key: &str, detail: &str) -> BackendError {
    use std::fmt::Write as _;
    let bytes = key.as_bytes();
    let mut name = String::with_capacity(bytes.len().min(200));
    for &b in bytes.iter().take(200) {
        if b.is_ascii_graphic() && b != b'\\' {
            name.push(char::from(b));
        } else {
            let _ = write!(name, "\\x{b:02x}");
        }
    }
    if bytes.len() > 200 {
        name.push_str("...");
    }
    BackendError::Corrupt {
        key: name,
        detail: detail.to_owned(),
    }
}

impl Store {
    pub(super) fn live(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        let expired = self
            .entries
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| t <= now));
        if expired {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    pub(super) fn get_str(
        &mut self,
        key: &str,
        now: Instant,
    ) -> Result<Option<String>, BackendError> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    /// A fence counter or mark: absent is 0; anything but a decimal integer in 0..2^53 (by
    /// Rust's `u64` parser, the scripts' rule) is [`BackendError::Corrupt`] naming the key.
    pub(super) fn get_int(&mut self, key: &str, now: Instant) -> Result<u64, BackendError> {
        match self.get_str(key, now)? {
            None => Ok(0),
            Some(s) => match s.parse::<u64>() {
                Ok(n) if n <= MAX_TOKEN => Ok(n),
                _ => Err(corrupt(key, "is not a decimal integer in 0..2^53")),
            },
        }
    }

    /// A lock key as the plain lock and the read-write lock see it: free, a writer's (or plain
    /// lock's) string, or the readers' sorted set (see [`crate::rwlock`]); WRONGTYPE otherwise.
    pub(super) fn lock_value(
        &mut self,
        key: &str,
        now: Instant,
    ) -> Result<LockValue, BackendError> {
        match self.live(key, now) {
            None => Ok(LockValue::Free),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(LockValue::Str(s.clone())),
            Some(Entry {
                value: Value::ZSet(m),
                ..
            }) => Ok(LockValue::Readers(m.clone())),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    pub(super) fn pttl(&mut self, key: &str, now: Instant) -> Option<Duration> {
        self.live(key, now)
            .map(|e| e.expires_at.map_or(Duration::MAX, |t| t - now))
    }

    pub(super) fn set_str(&mut self, key: &str, value: String, expires_at: Option<Instant>) {
        self.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value),
                expires_at,
            },
        );
    }

    /// Reads the mark: absent means none; garbage is an error (as `tonumber` would fail).
    pub(super) fn mark(&mut self, spec: &LeaseSpec, now: Instant) -> Result<u64, BackendError> {
        match spec.mark_key() {
            Some(k) => self.get_int(&k, now),
            None => Ok(0),
        }
    }

    /// The fence counter and the applied mark of `spec` as read (none when unfenced).
    pub(super) fn counter_and_mark(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<(Option<Token>, FenceMark), BackendError> {
        let Some(fk) = spec.fence_key() else {
            return Ok((None, FenceMark::NONE));
        };
        let counter = Token::new(self.get_int(fk, now)?).ok();
        let mark = Token::new(self.mark(spec, now)?)
            .map(FenceMark::at)
            .unwrap_or(FenceMark::NONE);
        Ok((counter, mark))
    }

    /// The "server time" in µs: the clock's reading plus the offset (never below zero).
    fn wall_us(&self, now: Instant) -> u64 {
        let us = u64::try_from((now - Instant::ZERO).as_micros()).unwrap_or(u64::MAX);
        us.saturating_add_signed(self.wall_offset_us)
    }

    /// The fence state of `spec` now: max(counter, mark) and the epoch (not created).
    pub(super) fn fence_state(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<FenceState, BackendError> {
        let Some(fk) = spec.fence_key() else {
            return Ok(FenceState::UNKNOWN);
        };
        let counter = self.get_int(fk, now)?.max(self.mark(spec, now)?);
        let epoch = match spec.epoch_key() {
            Some(k) => match self.get_str(&k, now)? {
                None => None,
                Some(v) => Some(v.parse::<u64>().map_err(|_| {
                    corrupt(&k, "is not a decimal integer (the fence epoch, in us)")
                })?),
            },
            None => None,
        };
        Ok(FenceState::new(
            Token::new(counter).ok(),
            epoch.map(Epoch::new),
        ))
    }

    /// Mints the next token of `spec` (when fenced) above the counter, the mark and `floor`,
    /// stores it in counter and mark and creates the epoch if absent: the fenced part of an
    /// acquire, shared by locks and semaphore permits. The fence state seen before.
    pub(super) fn mint(
        &mut self,
        spec: &LeaseSpec,
        floor: Option<Token>,
        now: Instant,
    ) -> Result<(Option<Token>, FenceState), BackendError> {
        Ok(match spec.fence_key() {
            None => (None, FenceState::UNKNOWN),
            Some(fk) => {
                let before = self.fence_state(spec, now)?;
                // Counter healing: never mint at or below a token already applied (the mark)
                // or one the acquirer saw minted (its floor).
                let base = before.counter.max(floor).map_or(0, Token::get);
                let mut next = base.saturating_add(1);
                let wall = self.wall_us(now);
                if self.scheme.0 == TokenScheme::ClockFloored {
                    next = next.max(wall);
                }
                if next > MAX_TOKEN {
                    return Err(BackendError::TokenExhausted(format!(
                        "counter {fk} would pass 2^53"
                    )));
                }
                self.set_str(fk, next.to_string(), None);
                if let Some(mk) = spec.mark_key() {
                    self.set_str(&mk, next.to_string(), None);
                }
                let mut fence = before;
                if fence.epoch.is_none()
                    && let Some(ek) = spec.epoch_key()
                {
                    self.set_str(&ek, wall.to_string(), None);
                    fence.epoch = Some(Epoch::new(wall));
                }
                let token = Token::new(next).map_err(|e| BackendError::Protocol(e.to_string()))?;
                (Some(token), fence)
            }
        })
    }

    pub(super) fn acquire(
        &mut self,
        req: &AcquireRequest,
        now: Instant,
    ) -> Result<AcquireOutcome, BackendError> {
        // Check every key before changing any (all-or-nothing).
        for k in req.spec.keys() {
            match self.lock_value(k, now)? {
                LockValue::Str(v) if !req.owner.matches(&v) => {
                    let remaining = self.pttl(k, now);
                    let fence = self.fence_state(&req.spec, now)?;
                    return Ok(AcquireOutcome::Held {
                        holder: Some(split_stored(&v).0.to_owned()),
                        remaining,
                        fence,
                    });
                }
                // Readers hold it (see crate::rwlock): held, and a writer that will try again
                // waits from now on (its mark keeps new readers out for its life).
                LockValue::Readers(m) => {
                    if let Some(first) = first_reader(&m, now) {
                        let mark = req.writer_mark;
                        if let Some(mark) = mark {
                            self.mark_writer_waiting(k, m, mark, now);
                        }
                        let fence = self.fence_state(&req.spec, now)?;
                        let within = mark.unwrap_or(req.ttl.get());
                        return Ok(AcquireOutcome::Held {
                            holder: None,
                            remaining: Some(writer_retry_within(first - now, within)),
                            fence,
                        });
                    }
                }
                _ => {}
            }
        }
        let (token, fence) = self.mint(&req.spec, req.floor, now)?;
        let value = req.owner.stored_value(&req.metadata);
        let expires = now + req.ttl.get();
        for k in req.spec.keys() {
            self.set_str(k, value.clone(), Some(expires));
        }
        Ok(AcquireOutcome::Acquired { token, fence })
    }

    fn all_ours(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<bool, BackendError> {
        for k in spec.keys() {
            match self.lock_value(k, now)? {
                LockValue::Str(v) if owner.matches(&v) => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    pub(super) fn renew(
        &mut self,
        req: &RenewRequest,
        now: Instant,
    ) -> Result<RenewOutcome, BackendError> {
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

    pub(super) fn release(
        &mut self,
        req: &ReleaseRequest,
        now: Instant,
    ) -> Result<ReleaseOutcome, BackendError> {
        if let (Some(term), Some(fk)) = (req.term_token, req.spec.fence_key())
            && self.get_int(fk, now)? != term.get()
        {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let mut all = true;
        for k in req.spec.keys() {
            match self.lock_value(k, now)? {
                LockValue::Str(v) if req.owner.matches(&v) => {
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

    /// An administrator's release (see [`LeaseBackend::force_release`](crate::LeaseBackend::force_release)):
    /// every key read first (a key of another type is WRONGTYPE, nothing changed), a fresh
    /// token minted when fenced, held or not, then every held key deleted.
    pub(super) fn force_release(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<ForceReleaseOutcome, BackendError> {
        let mut held = Vec::new();
        let mut holder = None;
        for k in spec.keys() {
            if let Some(v) = self.get_str(k, now)? {
                holder.get_or_insert_with(|| split_stored(&v).0.to_owned());
                held.push(k.clone());
            }
        }
        let (fence, _) = self.mint(spec, None, now)?;
        for k in &held {
            self.entries.remove(k);
        }
        Ok(match holder {
            Some(holder) => ForceReleaseOutcome::Released { holder, fence },
            None => ForceReleaseOutcome::NotHeld { fence },
        })
    }

    pub(super) fn remaining(
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

    pub(super) fn inspect(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<LeaseInfo, BackendError> {
        let mut info = LeaseInfo::default();
        if let Some(k) = spec.keys().first() {
            match self.lock_value(k, now)? {
                LockValue::Str(v) => {
                    let (o, m) = split_stored(&v);
                    info.holder = Some(o.to_owned());
                    info.metadata = Some(m.to_owned());
                    info.remaining = self.pttl(k, now);
                }
                // Read-held: the reader whose hold expires first.
                LockValue::Readers(m) => {
                    if let Some((o, e)) = current_readers(&m, now).into_iter().next() {
                        info.holder = Some(o);
                        info.remaining = Some(e - now);
                    }
                }
                LockValue::Free => {}
            }
        }
        if spec.fence_key().is_some() {
            (info.counter, info.mark) = self.counter_and_mark(spec, now)?;
            info.epoch = self.fence_state(spec, now)?.epoch;
        }
        Ok(info)
    }

    /// The Redlock fenced-quorum second round (`raise.lua`): where every lock key still holds
    /// `owner`, lift counter and mark to at least `token`.
    pub(super) fn raise(
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

    pub(super) fn fenced(
        &mut self,
        mark_key: &str,
        token: Token,
        writes: &[MemoryWrite],
        now: Instant,
    ) -> Result<FenceOutcome, BackendError> {
        // Garbage or a value above 2^53 (never written by us) is Corrupt, as in Redis.
        let raw = self.get_int(mark_key, now)?;
        let mark = Token::new(raw)
            .map(FenceMark::at)
            .unwrap_or(FenceMark::NONE);
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
