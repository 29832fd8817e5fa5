//! A locker's lines, sharded by key ([`Lines`]): each key's holder, turn and queue live in the
//! one [`Shard`] its hash picks, so obtains of different keys on different threads seldom take
//! the same lock or touch the same cache line. (With one lock for every key, each task's three
//! takes per lock cycle moved that lock's cache line between the cores.) The rules are the
//! lines' own (see the [parent module](super)); every rule concerns one key, and one key's
//! entries are all in its shard.

use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lease_core::{AcquireRequest, BackendError, HandOffOutcome, LeaseBackend};

use super::{Shard, WaitSeat, Waiter, first_key};
use crate::lock::handle::Shared;

/// Shards per locker (4 KiB, made at the locker's first obtain that can be handed off).
pub(crate) const SHARDS: usize = 32;

/// The lines of one locker (and its clones). See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Lines<B> {
    /// Made at the first obtain that can be handed off: a locker whose leases never can (a
    /// read-write lock's or a semaphore's view) makes none.
    shards: OnceLock<Box<[Shard<B>]>>,
    /// Picks a key's shard (seeded per locker).
    hasher: foldhash::fast::RandomState,
}

impl<B: LeaseBackend> Lines<B> {
    pub(crate) fn new() -> Self {
        Lines {
            shards: OnceLock::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// `key`'s shard.
    fn shard(&self, key: &str) -> &Shard<B> {
        let shards = self
            .shards
            .get_or_init(|| (0..SHARDS).map(|_| Shard::new()).collect());
        let i = usize::try_from(self.hasher.hash_one(key) % SHARDS as u64).unwrap_or(0);
        &shards[i]
    }

    /// An obtain's place in the lines of its key.
    pub(crate) fn seat<'a>(&'a self, request: &'a AcquireRequest) -> WaitSeat<'a, B> {
        WaitSeat::new(self.shard(first_key(&request.spec)), request)
    }

    /// How many obtains wait in `key`'s queue now.
    pub(crate) fn waiting(&self, key: &str) -> usize {
        match self.shards.get() {
            Some(_) => self.shard(key).waiting(key),
            None => 0,
        }
    }

    /// [`Shard::hold`] in `lock`'s shard.
    pub(crate) fn hold(&self, lock: &Arc<Shared<B>>) {
        self.shard(first_key(&lock.renew.spec)).hold(lock);
    }

    /// [`Shard::leave`] in `lock`'s shard.
    pub(crate) fn leave(&self, lock: &Shared<B>) {
        self.shard(first_key(&lock.renew.spec)).leave(lock);
    }

    /// [`Shard::claim`] in `lock`'s shard.
    pub(crate) fn claim(&self, lock: &Shared<B>) -> Option<Arc<Waiter>> {
        self.shard(first_key(&lock.renew.spec)).claim(lock)
    }

    /// [`Shard::settle`] in the waiter's shard (its key is the releasing lock's).
    pub(crate) fn settle(
        &self,
        backend: &Arc<B>,
        waiter: &Waiter,
        sent_at: tokio::time::Instant,
        result: &Result<HandOffOutcome, BackendError>,
        bound: Duration,
    ) {
        self.shard(first_key(&waiter.request.spec))
            .settle(backend, waiter, sent_at, result, bound);
    }
}
