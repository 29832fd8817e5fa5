//! The fair lock's operations over the in-memory store: the executable specification of
//! `lease-redis`'s `fair_*.lua` scripts (the rule is stated in [`crate::fair`]).
//!
//! Like the scripts, every operation reads and checks everything first (the lock key, the
//! queue, the places, the fence keys) and writes last, so a refusal changes nothing. Places
//! are judged by the store's clock (`now`); the queue and places keys expire with the last
//! place. Each operation returns, beside its outcome, the owner to wake (the new head of a
//! free lock), which the backend notifies on that waiter's own channel.

use std::collections::BTreeMap;
use std::time::Duration;

use super::store::{Entry, Store, Value};
use crate::backend::{
    AcquireOutcome, BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, split_stored,
};
use crate::fair::{FairInfo, FairRequest, check_fair_spec, fair_keys, fair_name};
use crate::semaphore::PermitHolder;
use crate::time::Instant;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A fair lock as read at `now`: the holder's stored value, the queue and places with the
/// expired places dropped, and the queue's first entry as stored (to tell a new head).
struct Fair {
    lock_key: String,
    keys: [String; 2],
    holder: Option<String>,
    queue: Vec<String>,
    places: BTreeMap<String, Instant>,
    stored_first: Option<String>,
}

impl Fair {
    /// The first queued waiter that has a place.
    fn head(&self) -> Option<&str> {
        self.queue.first().map(String::as_str)
    }

    fn holder_owner(&self) -> Option<&str> {
        self.holder.as_deref().map(|v| split_stored(v).0)
    }

    fn remove(&mut self, owner: &str) -> bool {
        self.queue.retain(|o| o != owner);
        self.places.remove(owner).is_some()
    }

    /// The waiter to wake: the head of a free lock, when the lock was just released or the
    /// head is not the one stored before this operation.
    fn wake(&self, released: bool) -> Option<String> {
        if self.holder.is_some() {
            return None;
        }
        let head = self.head()?;
        (released || self.stored_first.as_deref() != Some(head)).then(|| head.to_owned())
    }
}

impl Store {
    fn list(&mut self, key: &str, now: Instant) -> Result<Vec<String>, BackendError> {
        match self.live(key, now) {
            None => Ok(Vec::new()),
            Some(Entry {
                value: Value::List(l),
                ..
            }) => Ok(l.clone()),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    fn zset(&mut self, key: &str, now: Instant) -> Result<BTreeMap<String, Instant>, BackendError> {
        match self.live(key, now) {
            None => Ok(BTreeMap::new()),
            Some(Entry {
                value: Value::ZSet(m),
                ..
            }) => Ok(m.clone()),
            Some(_) => Err(BackendError::Refused(WRONGTYPE.into())),
        }
    }

    /// Reads a fair lock (nothing written): expired places and their queue entries dropped,
    /// then queue entries without a place dropped from the front (as the scripts do).
    fn read_fair(&mut self, spec: &LeaseSpec, now: Instant) -> Result<Fair, BackendError> {
        check_fair_spec(spec)?;
        let name = fair_name(spec).to_owned();
        let keys = fair_keys(&name);
        let holder = self.get_str(&name, now)?;
        let mut queue = self.list(&keys[0], now)?;
        let mut places = self.zset(&keys[1], now)?;
        let stored_first = queue.first().cloned();
        let expired: Vec<String> = places
            .iter()
            .filter(|(_, e)| **e <= now)
            .map(|(o, _)| o.clone())
            .collect();
        for o in &expired {
            places.remove(o);
            queue.retain(|q| q != o);
        }
        while queue.first().is_some_and(|h| !places.contains_key(h)) {
            queue.remove(0);
        }
        Ok(Fair {
            lock_key: name,
            keys,
            holder,
            queue,
            places,
            stored_first,
        })
    }

    /// Writes the queue and places back, both expiring with the last place; both deleted when
    /// the queue is empty.
    fn store_fair(&mut self, fair: Fair) {
        let [qk, pk] = fair.keys;
        let last = fair.places.values().max().copied();
        match last {
            Some(last) if !fair.queue.is_empty() => {
                self.entries.insert(
                    qk,
                    Entry {
                        value: Value::List(fair.queue),
                        expires_at: Some(last),
                    },
                );
                self.entries.insert(
                    pk,
                    Entry {
                        value: Value::ZSet(fair.places),
                        expires_at: Some(last),
                    },
                );
            }
            _ => {
                self.entries.remove(&qk);
                self.entries.remove(&pk);
            }
        }
    }

    pub(super) fn acquire_fair(
        &mut self,
        req: &FairRequest,
        now: Instant,
    ) -> Result<(AcquireOutcome, Option<String>), BackendError> {
        let spec = &req.acquire.spec;
        let owner = req.acquire.owner.as_str();
        let mut fair = self.read_fair(spec, now)?;
        let ours = fair.holder_owner() == Some(owner);
        let first = fair.holder.is_none() && fair.head().is_none_or(|h| h == owner);
        if ours || first {
            let (token, fence) = self.mint(spec, req.acquire.floor, now)?;
            let value = req.acquire.owner.stored_value(&req.acquire.metadata);
            self.set_str(&fair.lock_key, value, Some(now + req.acquire.ttl.get()));
            fair.remove(owner);
            fair.holder = Some(owner.to_owned());
            self.store_fair(fair);
            return Ok((AcquireOutcome::Acquired { token, fence }, None));
        }
        let fence = self.fence_state(spec, now)?;
        let holder = fair.holder_owner().or(fair.head()).map(str::to_owned);
        if let Some(place) = req.place_ttl {
            if !fair.places.contains_key(owner) {
                fair.queue.push(owner.to_owned());
            }
            fair.places.insert(owner.to_owned(), now + place.get());
        }
        let wake = fair.wake(false).filter(|h| h != owner);
        self.store_fair(fair);
        Ok((
            AcquireOutcome::Held {
                holder,
                remaining: None,
                fence,
            },
            wake,
        ))
    }

    pub(super) fn release_fair(
        &mut self,
        req: &ReleaseRequest,
        now: Instant,
    ) -> Result<(ReleaseOutcome, Option<String>), BackendError> {
        let mut fair = self.read_fair(&req.spec, now)?;
        let mut held = fair.holder_owner() == Some(req.owner.as_str());
        if held
            && let (Some(term), Some(fk)) = (req.term_token, req.spec.fence_key())
            && self.get_int(fk, now)? != term.get()
        {
            held = false;
        }
        if held {
            self.entries.remove(&fair.lock_key);
            fair.holder = None;
        }
        fair.remove(req.owner.as_str());
        let wake = fair.wake(held);
        self.store_fair(fair);
        let outcome = if held {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        };
        Ok((outcome, wake))
    }

    pub(super) fn leave_fair(
        &mut self,
        spec: &LeaseSpec,
        owner: &Owner,
        now: Instant,
    ) -> Result<(bool, Option<String>), BackendError> {
        let mut fair = self.read_fair(spec, now)?;
        let had = fair.remove(owner.as_str());
        let wake = fair.wake(false);
        self.store_fair(fair);
        Ok((had, wake))
    }

    /// The live waiters of a fair lock, first in line first (read only).
    pub(super) fn fair_queue(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<Vec<String>, BackendError> {
        Ok(self.read_fair(spec, now)?.queue)
    }

    /// The holder, the live waiters in queue order with their places' remaining time, and the
    /// fence counter and mark (read only; `fair_inspect.lua`'s specification).
    pub(super) fn inspect_fair(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<FairInfo, BackendError> {
        let fair = self.read_fair(spec, now)?;
        let mut info = FairInfo::default();
        if let Some(owner) = fair.holder_owner() {
            let remaining = self.pttl(&fair.lock_key, now).unwrap_or(Duration::MAX);
            info.holder = Some(PermitHolder::new(owner, remaining));
        }
        info.waiters = fair
            .queue
            .iter()
            .filter_map(|o| {
                fair.places
                    .get(o)
                    .map(|e| PermitHolder::new(o.clone(), *e - now))
            })
            .collect();
        (info.counter, info.mark) = self.counter_and_mark(spec, now)?;
        Ok(info)
    }
}
