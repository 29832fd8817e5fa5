//! The fair lock's operations over the in-memory store: the executable specification of
//! `lease-redis`'s `fair_*.lua` scripts (the rule is stated in [`crate::fair`]).
//!
//! Like the scripts, every operation reads and checks everything first (the lock key, the
//! queue's front, the places, the fence keys) and writes last, so a refusal changes nothing.
//! Places are judged by the store's clock (`now`); the queue and places keys expire with the
//! last place. Each operation drops at most [`PRUNE_PER_CALL`] entries, in the scripts' order
//! (expired places earliest first, ties by owner; then dead entries at the queue's front),
//! and refuses a new waiter past [`MAX_WAITERS`] live places. Each operation returns, beside
//! its outcome, the owner to wake (the new head of a free lock), which the backend notifies
//! on that waiter's own channel.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::store::{Entry, Store, Value};
use crate::backend::{
    AcquireOutcome, BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, split_stored,
};
use crate::fair::{
    FairInfo, FairRequest, INSPECT_SCAN, INSPECT_SHOWN, MAX_WAITERS, PRUNE_PER_CALL,
    check_fair_spec, fair_keys, fair_name,
};
use crate::semaphore::PermitHolder;
use crate::time::Instant;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A fair lock as read at `now` (nothing written: `fair.lua`'s `read_fair`).
struct Fair {
    lock_key: String,
    keys: [String; 2],
    /// The holder's stored value.
    holder: Option<String>,
    /// The entries to drop, in order (at most [`PRUNE_PER_CALL`]).
    drop: Vec<String>,
    /// The first queued waiter with a live place (the owner being removed aside).
    head: Option<String>,
    /// The budget ran out before a head was found: a free lock goes to nobody this time.
    blocked: bool,
    /// The queue's first entry as stored (to tell a new head).
    stored_first: Option<String>,
}

impl Fair {
    fn holder_owner(&self) -> Option<&str> {
        self.holder.as_deref().map(|v| split_stored(v).0)
    }

    /// The waiter to wake: the head of a free lock, when the lock was just released or the
    /// head is not the one stored before this operation.
    fn wake(&self, released: bool) -> Option<String> {
        if self.holder.is_some() {
            return None;
        }
        let head = self.head.as_deref()?;
        (released || self.stored_first.as_deref() != Some(head)).then(|| head.to_owned())
    }
}

/// The queue and places as stored (read only).
struct Stored<'a> {
    queue: &'a [String],
    places: Option<&'a BTreeMap<String, Instant>>,
}

impl Stored<'_> {
    fn place(&self, owner: &str) -> Option<Instant> {
        self.places.and_then(|p| p.get(owner).copied())
    }

    fn live(&self, owner: &str, now: Instant) -> bool {
        self.place(owner).is_some_and(|e| e > now)
    }

    fn live_count(&self, now: Instant) -> usize {
        self.places
            .map_or(0, |p| p.values().filter(|e| **e > now).count())
    }
}

impl Store {
    /// Type-checks the queue and places keys (expired entries go).
    fn check_fair_keys(&mut self, keys: &[String; 2], now: Instant) -> Result<(), BackendError> {
        let queue_ok = match self.live(&keys[0], now) {
            None => true,
            Some(e) => matches!(e.value, Value::List(_)),
        };
        let places_ok = match self.live(&keys[1], now) {
            None => true,
            Some(e) => matches!(e.value, Value::ZSet(_)),
        };
        if queue_ok && places_ok {
            Ok(())
        } else {
            Err(BackendError::Refused(WRONGTYPE.into()))
        }
    }

    /// The queue and places (after [`Store::check_fair_keys`]).
    fn stored(&self, keys: &[String; 2]) -> Stored<'_> {
        let queue = match self.entries.get(&keys[0]) {
            Some(Entry {
                value: Value::List(l),
                ..
            }) => l.as_slice(),
            _ => &[],
        };
        let places = match self.entries.get(&keys[1]) {
            Some(Entry {
                value: Value::ZSet(m),
                ..
            }) => Some(m),
            _ => None,
        };
        Stored { queue, places }
    }

    /// Reads a fair lock (nothing written), as `read_fair` does: the expired places to drop
    /// (earliest first, ties by owner), then the front's entries without a live place, at
    /// most [`PRUNE_PER_CALL`] in all, until the head (`skip` aside).
    fn read_fair(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
        skip: Option<&str>,
    ) -> Result<Fair, BackendError> {
        check_fair_spec(spec)?;
        let name = fair_name(spec).to_owned();
        let keys = fair_keys(&name);
        let holder = self.get_str(&name, now)?;
        self.check_fair_keys(&keys, now)?;
        let stored = self.stored(&keys);
        let mut expired: Vec<(Instant, &String)> = stored
            .places
            .into_iter()
            .flatten()
            .filter(|(_, e)| **e <= now)
            .map(|(o, e)| (*e, o))
            .collect();
        expired.sort();
        let mut drop: Vec<String> = expired
            .into_iter()
            .take(PRUNE_PER_CALL)
            .map(|(_, o)| o.clone())
            .collect();
        let mut dead: HashSet<String> = drop.iter().cloned().collect();
        let (mut head, mut blocked) = (None, false);
        for o in stored.queue {
            if dead.contains(o) || skip == Some(o.as_str()) {
                continue;
            }
            if stored.live(o, now) {
                head = Some(o.clone());
                break;
            }
            if drop.len() >= PRUNE_PER_CALL {
                blocked = true;
                break;
            }
            dead.insert(o.clone());
            drop.push(o.clone());
        }
        let stored_first = stored.queue.first().cloned();
        Ok(Fair {
            lock_key: name,
            keys,
            holder,
            drop,
            head,
            blocked,
            stored_first,
        })
    }

    /// Whether `owner` has a live place (read only).
    fn has_place(&self, fair: &Fair, owner: &str, now: Instant) -> bool {
        !fair.drop.iter().any(|o| o == owner) && self.stored(&fair.keys).live(owner, now)
    }

    /// The writes: `fair`'s drops, then `edit` on the queue and places; then both expire with
    /// the last place, or are deleted when the queue is empty or every place has expired.
    fn write_fair(
        &mut self,
        fair: &Fair,
        now: Instant,
        edit: impl FnOnce(&mut Vec<String>, &mut BTreeMap<String, Instant>),
    ) {
        let [qk, pk] = &fair.keys;
        let mut queue = match self.entries.remove(qk) {
            Some(Entry {
                value: Value::List(l),
                ..
            }) => l,
            _ => Vec::new(),
        };
        let mut places = match self.entries.remove(pk) {
            Some(Entry {
                value: Value::ZSet(m),
                ..
            }) => m,
            _ => BTreeMap::new(),
        };
        if !fair.drop.is_empty() {
            let dead: HashSet<&String> = fair.drop.iter().collect();
            queue.retain(|o| !dead.contains(o));
            places.retain(|o, _| !dead.contains(o));
        }
        edit(&mut queue, &mut places);
        let last = places.values().max().copied();
        if let Some(last) = last
            && !queue.is_empty()
            && last > now
        {
            self.entries.insert(
                qk.clone(),
                Entry {
                    value: Value::List(queue),
                    expires_at: Some(last),
                },
            );
            self.entries.insert(
                pk.clone(),
                Entry {
                    value: Value::ZSet(places),
                    expires_at: Some(last),
                },
            );
        }
    }

    pub(super) fn acquire_fair(
        &mut self,
        req: &FairRequest,
        now: Instant,
    ) -> Result<(AcquireOutcome, Option<String>), BackendError> {
        let spec = &req.acquire.spec;
        let owner = req.acquire.owner.as_str();
        let fair = self.read_fair(spec, now, None)?;
        let ours = fair.holder_owner() == Some(owner);
        let first = fair.holder.is_none()
            && match fair.head.as_deref() {
                Some(h) => h == owner,
                None => !fair.blocked,
            };
        if ours || first {
            let (token, fence) = self.mint(spec, req.acquire.floor, now)?;
            let value = req.acquire.owner.stored_value(&req.acquire.metadata);
            self.set_str(&fair.lock_key, value, Some(now + req.acquire.ttl.get()));
            self.write_fair(&fair, now, |queue, places| {
                queue.retain(|o| o != owner);
                places.remove(owner);
            });
            return Ok((AcquireOutcome::Acquired { token, fence }, None));
        }
        let fence = self.fence_state(spec, now)?;
        let holder = fair
            .holder_owner()
            .or(fair.head.as_deref())
            .map(str::to_owned);
        if let Some(place) = req.place_ttl {
            let live = self.has_place(&fair, owner, now);
            if !live && self.stored(&fair.keys).live_count(now) >= MAX_WAITERS {
                return Err(BackendError::QueueFull {
                    name: fair.lock_key,
                    limit: MAX_WAITERS,
                });
            }
            self.write_fair(&fair, now, |queue, places| {
                if !live {
                    queue.retain(|o| o != owner);
                    queue.push(owner.to_owned());
                }
                places.insert(owner.to_owned(), now + place.get());
            });
        } else {
            self.write_fair(&fair, now, |_, _| {});
        }
        let wake = fair.wake(false).filter(|h| h != owner);
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
        let owner = req.owner.as_str();
        let mut fair = self.read_fair(&req.spec, now, Some(owner))?;
        let mut held = fair.holder_owner() == Some(owner);
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
        self.write_fair(&fair, now, |queue, places| {
            queue.retain(|o| o != owner);
            places.remove(owner);
        });
        let wake = fair.wake(held);
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
        let owner = owner.as_str();
        let fair = self.read_fair(spec, now, Some(owner))?;
        let had = self.has_place(&fair, owner, now);
        self.write_fair(&fair, now, |queue, places| {
            queue.retain(|o| o != owner);
            places.remove(owner);
        });
        Ok((had, fair.wake(false)))
    }

    /// The live waiters of a fair lock, first in line first: every queued entry with a live
    /// place (read only, unbounded: a test's view).
    pub(super) fn fair_queue(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<Vec<String>, BackendError> {
        check_fair_spec(spec)?;
        let keys = fair_keys(fair_name(spec));
        self.check_fair_keys(&keys, now)?;
        let stored = self.stored(&keys);
        Ok(stored
            .queue
            .iter()
            .filter(|o| stored.live(o, now))
            .cloned()
            .collect())
    }

    /// The holder, the first [`INSPECT_SHOWN`] live waiters among the first [`INSPECT_SCAN`]
    /// queue entries with their places' remaining time, the count of live places, and the
    /// fence counter and mark (read only; `fair_inspect.lua`'s specification).
    pub(super) fn inspect_fair(
        &mut self,
        spec: &LeaseSpec,
        now: Instant,
    ) -> Result<FairInfo, BackendError> {
        check_fair_spec(spec)?;
        let name = fair_name(spec).to_owned();
        let keys = fair_keys(&name);
        let holder = self.get_str(&name, now)?;
        self.check_fair_keys(&keys, now)?;
        let mut info = FairInfo::default();
        let stored = self.stored(&keys);
        info.waiting = stored.live_count(now);
        info.waiters = stored
            .queue
            .iter()
            .take(INSPECT_SCAN)
            .filter_map(|o| {
                stored
                    .place(o)
                    .filter(|e| *e > now)
                    .map(|e| PermitHolder::new(o.clone(), e - now))
            })
            .take(INSPECT_SHOWN)
            .collect();
        if let Some(v) = holder {
            let owner = split_stored(&v).0.to_owned();
            let remaining = self.pttl(&name, now).unwrap_or(Duration::MAX);
            info.holder = Some(PermitHolder::new(owner, remaining));
        }
        (info.counter, info.mark) = self.counter_and_mark(spec, now)?;
        Ok(info)
    }
}
