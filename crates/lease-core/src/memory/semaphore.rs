//! The semaphore's permit operations over the in-memory store: the executable specification
//! of `lease-redis`'s `permit_*.lua` scripts (the rule is stated in [`crate::semaphore`]).
//!
//! Like the scripts, every operation reads and checks first and writes last, so a refusal
//! (WRONGTYPE, a corrupt count or fence key, another permit count) changes nothing. Expired
//! permits are judged by the store's clock (`now`) and removed by the next operation that
//! writes; both keys expire with the last permit.

use std::collections::BTreeMap;
use std::time::Duration;

use super::MemoryWrite;
use super::store::{Entry, Store, Value, corrupt};
use crate::backend::{
    AcquireOutcome, BackendError, FenceOutcome, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use crate::semaphore::{
    MAX_PERMITS, PermitHolder, PermitRequest, PermitWriteOutcome, SemaphoreInfo,
    check_semaphore_spec, semaphore_name,
};
use crate::time::Instant;
use crate::token::Token;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// What a corrupt count key is said to be.
fn not_a_count() -> String {
    format!("is not a permit count in 1..{MAX_PERMITS}")
}

/// The semaphore's two keys (checked to be a semaphore's).
fn keys(spec: &LeaseSpec) -> Result<(&str, &str), BackendError> {
    check_semaphore_spec(spec)?;
    match spec.keys() {
        [permits, size] => Ok((permits.as_str(), size.as_str())),
        _ => Err(BackendError::Invalid("not a semaphore's keys".into())),
    }
}

impl Store {
    /// Every permit (current or expired) at `key`; empty when absent; WRONGTYPE for a key of
    /// another type.
    fn permits(
        &mut self,
        key: &str,
        now: Instant,
    ) -> Result<BTreeMap<String, Instant>, BackendError> {
        match self.live(key, now) {
            None => Ok(BTreeMap::new()),
            Some(Entry {
                value: Value::ZSet(m),
                ..
            }) => Ok(m.clone()),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    /// The stored count at `key` (read as a string: WRONGTYPE otherwise); `None` when absent.
    /// Judged only while some permit is current: then anything but a count in
    /// 1..=[`MAX_PERMITS`] is [`BackendError::Corrupt`].
    fn stored_count(
        &mut self,
        key: &str,
        current: usize,
        now: Instant,
    ) -> Result<Option<u32>, BackendError> {
        let raw = self.get_str(key, now)?;
        if current == 0 {
            return Ok(None);
        }
        match raw {
            None => Ok(None),
            // Plain digits without a leading zero (the scripts' pattern), in 1..=MAX_PERMITS.
            Some(s) => match s.parse::<u32>() {
                Ok(n)
                    if (1..=MAX_PERMITS).contains(&n)
                        && s.bytes().all(|b| b.is_ascii_digit())
                        && !s.starts_with('0') =>
                {
                    Ok(Some(n))
                }
                _ => Err(corrupt(key, &not_a_count())),
            },
        }
    }

    /// Writes `permits` (the expired ones dropped) back, both keys expiring with the last
    /// permit; deletes both keys when none is left. `count`: a new count to store.
    fn store_permits(
        &mut self,
        (permits_key, size_key): (&str, &str),
        mut permits: BTreeMap<String, Instant>,
        count: Option<u32>,
        now: Instant,
    ) {
        permits.retain(|_, expiry| *expiry > now);
        let Some(last) = permits.values().max().copied() else {
            self.entries.remove(permits_key);
            self.entries.remove(size_key);
            return;
        };
        self.entries.insert(
            permits_key.to_owned(),
            Entry {
                value: Value::ZSet(permits),
                expires_at: Some(last),
            },
        );
        if let Some(n) = count {
            self.set_str(size_key, n.to_string(), Some(last));
        } else if let Some(e) = self.live(size_key, now) {
            e.expires_at = Some(last);
        }
    }

    pub(super) fn acquire_permit(
        &mut self,
        req: &PermitRequest,
        now: Instant,
    ) -> Result<AcquireOutcome, BackendError> {
        let spec = &req.acquire.spec;
        let keys = keys(spec)?;
        let owner = req.acquire.owner.as_str();
        let asked = req.permits.get();
        let permits = self.permits(keys.0, now)?;
        let current: Vec<Instant> = permits.values().copied().filter(|e| *e > now).collect();
        let mine = permits.get(owner).is_some_and(|e| *e > now);
        if let Some(stored) = self.stored_count(keys.1, current.len(), now)?
            && stored != asked
        {
            return Err(BackendError::PermitsMismatch {
                name: semaphore_name(spec).to_owned(),
                stored,
                asked,
            });
        }
        let full = u32::try_from(current.len()).unwrap_or(u32::MAX) >= asked;
        if !mine && full {
            let first = current.iter().min().copied().unwrap_or(now);
            let fence = self.fence_state(spec, now)?;
            return Ok(AcquireOutcome::Held {
                holder: None,
                remaining: Some(first - now),
                fence,
            });
        }
        let (token, fence) = self.mint(spec, req.acquire.floor, now)?;
        let mut permits = permits;
        permits.insert(owner.to_owned(), now + req.acquire.ttl.get());
        self.store_permits(keys, permits, Some(asked), now);
        Ok(AcquireOutcome::Acquired { token, fence })
    }

    pub(super) fn renew_permit(
        &mut self,
        req: &RenewRequest,
        now: Instant,
    ) -> Result<RenewOutcome, BackendError> {
        let keys = keys(&req.spec)?;
        let mut permits = self.permits(keys.0, now)?;
        let owner = req.owner.as_str();
        if permits.get(owner).is_none_or(|e| *e <= now) {
            return Ok(RenewOutcome::NotHeld);
        }
        permits.insert(owner.to_owned(), now + req.ttl.get());
        self.store_permits(keys, permits, None, now);
        Ok(RenewOutcome::Renewed)
    }

    pub(super) fn release_permit(
        &mut self,
        req: &ReleaseRequest,
        now: Instant,
    ) -> Result<ReleaseOutcome, BackendError> {
        let keys = keys(&req.spec)?;
        let mut permits = self.permits(keys.0, now)?;
        let mine = permits.remove(req.owner.as_str()).is_some_and(|e| e > now);
        self.store_permits(keys, permits, None, now);
        Ok(if mine {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    pub(super) fn permit_remaining(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<Option<Duration>, BackendError> {
        let keys = keys(spec)?;
        let permits = self.permits(keys.0, now)?;
        Ok(permits
            .get(owner.as_str())
            .filter(|e| **e > now)
            .map(|e| *e - now))
    }

    pub(super) fn inspect_semaphore(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<SemaphoreInfo, BackendError> {
        let keys = keys(spec)?;
        let permits = self.permits(keys.0, now)?;
        let mut current: Vec<(Instant, String)> = permits
            .into_iter()
            .filter(|(_, e)| *e > now)
            .map(|(o, e)| (e, o))
            .collect();
        current.sort();
        let mut info = SemaphoreInfo {
            permits: self.stored_count(keys.1, current.len(), now)?,
            holders: current
                .into_iter()
                .map(|(e, o)| PermitHolder::new(o, e - now))
                .collect(),
            ..SemaphoreInfo::default()
        };
        (info.counter, info.mark) = self.counter_and_mark(spec, now)?;
        Ok(info)
    }

    /// A permit-fenced write (the spec of `permit_guard.lua` + `fence_guard.lua` + the write +
    /// `permit_advance.lua`): `owner`'s permit at `permits_key` must be current, then the
    /// lock's fence rule against `mark_key` (the owner's mark); the mark, once advanced,
    /// expires with the permits key (never before the owner's permit).
    pub(super) fn permit_fenced(
        &mut self,
        permits_key: &str,
        owner: &str,
        mark_key: &str,
        token: Token,
        writes: &[MemoryWrite],
        now: Instant,
    ) -> Result<PermitWriteOutcome, BackendError> {
        let permits = self.permits(permits_key, now)?;
        let Some(expiry) = permits.get(owner).copied().filter(|e| *e > now) else {
            return Ok(PermitWriteOutcome::NotCurrent);
        };
        // Read before the writes (which may touch the permits key itself).
        let until = self
            .live(permits_key, now)
            .and_then(|e| e.expires_at)
            .map_or(expiry, |t| t.max(expiry));
        match self.fenced(mark_key, token, writes, now)? {
            FenceOutcome::Stale { mark } => Ok(PermitWriteOutcome::Stale { mark }),
            FenceOutcome::Applied => {
                self.set_str(mark_key, token.get().to_string(), Some(until));
                Ok(PermitWriteOutcome::Applied)
            }
        }
    }
}
