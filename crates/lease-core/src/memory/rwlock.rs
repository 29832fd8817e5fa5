//! The read-write lock's shared (reader) operations over the in-memory store: the executable
//! specification of `lease-redis`'s `rw_*.lua` scripts (the rule is stated in
//! [`crate::rwlock`]). The writer side is the plain lock (`store.rs`, which treats a read-held
//! key as the rule says).
//!
//! Like the scripts, every operation reads and checks first and writes last. Holds expire by
//! the store's clock (`now`); expired entries are removed by the next operation that writes,
//! and the key expires with its last entry.

use std::collections::BTreeMap;
use std::time::Duration;

use super::store::{Entry, LockValue, Store, Value};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest, split_stored,
};
use crate::rwlock::{SharedInfo, WRITER_WAITING, check_shared_spec};
use crate::semaphore::PermitHolder;
use crate::time::Instant;

/// The current readers of a read-held key (the mark left out), the one whose hold expires
/// first first (ties by owner).
pub(super) fn current_readers(
    m: &BTreeMap<String, Instant>,
    now: Instant,
) -> Vec<(String, Instant)> {
    let mut v: Vec<(String, Instant)> = m
        .iter()
        .filter(|(o, e)| o.as_str() != WRITER_WAITING && **e > now)
        .map(|(o, e)| (o.clone(), *e))
        .collect();
    v.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    v
}

/// When the first current reader's hold expires, if any reader is current.
pub(super) fn first_reader(m: &BTreeMap<String, Instant>, now: Instant) -> Option<Instant> {
    m.iter()
        .filter(|(o, e)| o.as_str() != WRITER_WAITING && **e > now)
        .map(|(_, e)| *e)
        .min()
}

/// The one key of a read-write lock (checked).
fn key(spec: &LeaseSpec) -> Result<&str, BackendError> {
    check_shared_spec(spec)?;
    spec.keys()
        .first()
        .map(String::as_str)
        .ok_or_else(|| BackendError::Invalid("a read-write lock is one key".into()))
}

impl Store {
    /// Writes the readers' set back without its expired entries, expiring with its last entry;
    /// deletes the key when nothing is left.
    pub(super) fn store_readers(
        &mut self,
        key: &str,
        mut m: BTreeMap<String, Instant>,
        now: Instant,
    ) {
        m.retain(|_, e| *e > now);
        let Some(last) = m.values().max().copied() else {
            self.entries.remove(key);
            return;
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::ZSet(m),
                expires_at: Some(last),
            },
        );
    }

    /// A writer found readers at `key`: the mark lapses `ttl` (the writer's mark life) from
    /// now, never earlier than it did.
    pub(super) fn mark_writer_waiting(
        &mut self,
        key: &str,
        mut m: BTreeMap<String, Instant>,
        ttl: Duration,
        now: Instant,
    ) {
        let lapse = now + ttl;
        let e = m.entry(WRITER_WAITING.to_owned()).or_insert(lapse);
        if *e < lapse {
            *e = lapse;
        }
        self.store_readers(key, m, now);
    }

    pub(super) fn acquire_shared(
        &mut self,
        req: &AcquireRequest,
        now: Instant,
    ) -> Result<AcquireOutcome, BackendError> {
        let k = key(&req.spec)?;
        let owner = req.owner.as_str();
        let readers = match self.lock_value(k, now)? {
            LockValue::Str(v) => {
                let remaining = self.pttl(k, now);
                let fence = self.fence_state(&req.spec, now)?;
                return Ok(AcquireOutcome::Held {
                    holder: Some(split_stored(&v).0.to_owned()),
                    remaining,
                    fence,
                });
            }
            LockValue::Free => BTreeMap::new(),
            LockValue::Readers(m) => m,
        };
        let mine = readers.get(owner).is_some_and(|e| *e > now);
        if let Some(lapse) = readers.get(WRITER_WAITING).filter(|e| **e > now)
            && !mine
        {
            let remaining = Some(*lapse - now);
            let fence = self.fence_state(&req.spec, now)?;
            return Ok(AcquireOutcome::Held {
                holder: None,
                remaining,
                fence,
            });
        }
        let (token, fence) = self.mint(&req.spec, req.floor, now)?;
        let mut readers = readers;
        readers.insert(owner.to_owned(), now + req.ttl.get());
        self.store_readers(k, readers, now);
        Ok(AcquireOutcome::Acquired { token, fence })
    }

    pub(super) fn renew_shared(
        &mut self,
        req: &RenewRequest,
        now: Instant,
    ) -> Result<RenewOutcome, BackendError> {
        let k = key(&req.spec)?;
        let LockValue::Readers(mut m) = self.lock_value(k, now)? else {
            return Ok(RenewOutcome::NotHeld);
        };
        let owner = req.owner.as_str();
        if m.get(owner).is_none_or(|e| *e <= now) {
            return Ok(RenewOutcome::NotHeld);
        }
        m.insert(owner.to_owned(), now + req.ttl.get());
        self.store_readers(k, m, now);
        Ok(RenewOutcome::Renewed)
    }

    /// The outcome, and whether the release notice is due (the owner's hold was current and
    /// no reader is left).
    pub(super) fn release_shared(
        &mut self,
        req: &ReleaseRequest,
        now: Instant,
    ) -> Result<(ReleaseOutcome, bool), BackendError> {
        let k = key(&req.spec)?;
        let LockValue::Readers(mut m) = self.lock_value(k, now)? else {
            return Ok((ReleaseOutcome::NotHeld, false));
        };
        let mine = m.remove(req.owner.as_str()).is_some_and(|e| e > now);
        let last = first_reader(&m, now).is_none();
        self.store_readers(k, m, now);
        Ok(if mine {
            (ReleaseOutcome::Released, last)
        } else {
            (ReleaseOutcome::NotHeld, false)
        })
    }

    pub(super) fn shared_remaining(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<Option<Duration>, BackendError> {
        let k = key(spec)?;
        let LockValue::Readers(m) = self.lock_value(k, now)? else {
            return Ok(None);
        };
        Ok(m.get(owner.as_str())
            .filter(|e| **e > now)
            .map(|e| *e - now))
    }

    pub(super) fn inspect_shared(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<SharedInfo, BackendError> {
        let k = key(spec)?;
        let mut info = SharedInfo::default();
        match self.lock_value(k, now)? {
            LockValue::Free => {}
            LockValue::Str(v) => {
                let remaining = self.pttl(k, now).unwrap_or(Duration::MAX);
                info.writer = Some(PermitHolder::new(split_stored(&v).0, remaining));
            }
            LockValue::Readers(m) => {
                info.readers = current_readers(&m, now)
                    .into_iter()
                    .map(|(o, e)| PermitHolder::new(o, e - now))
                    .collect();
                info.writer_waiting = m
                    .get(WRITER_WAITING)
                    .filter(|e| **e > now)
                    .map(|e| *e - now);
            }
        }
        (info.counter, info.mark) = self.counter_and_mark(spec, now)?;
        Ok(info)
    }
}
