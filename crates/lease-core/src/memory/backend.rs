//! [`MemoryBackend`]: the shared store on a manual clock, its staging and fault controls, and
//! its [`LeaseBackend`] impl.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;

use super::store::{Entry, Faults, Scheme, Store, Value};
use super::{ManualClock, MemoryWrite, lock};
use crate::backend::{
    AcquireOutcome, AcquireRequest, BackendError, FenceOutcome, ForceReleaseOutcome, LeaseBackend,
    LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest,
};
use crate::fair::{FairInfo, FairRequest, check_fair_spec, fair_name, wake_key};
use crate::notify::{HubLink, ReleaseHub, ReleaseWatch, WatchRole};
use crate::rwlock::{SharedInfo, check_shared_spec};
use crate::semaphore::{
    PermitRequest, PermitWriteOutcome, SemaphoreInfo, check_semaphore_spec, permit_mark_key,
    permits_key,
};
use crate::time::Instant;
use crate::token::{Token, TokenScheme};

/// An in-memory lease store. Clones share the same data and clock.
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    clock: ManualClock,
    /// Release notices: one hub per first key, always live (see [`crate::notify`]).
    hubs: Arc<Mutex<HashMap<String, Weak<ReleaseHub>>>>,
}

/// The in-memory store needs no subscription.
struct AlwaysLive;

impl HubLink for AlwaysLive {
    fn activate(&self) {}
    fn idle(&self) {}
}

impl MemoryBackend {
    /// An empty store on `clock`.
    pub fn new(clock: ManualClock) -> Self {
        MemoryBackend {
            store: Arc::new(Mutex::new(Store::default())),
            clock,
            hubs: Arc::default(),
        }
    }

    /// Mints tokens by `scheme` from now on. The in-memory store defaults to
    /// [`TokenScheme::Counter`] (tokens 1, 2, 3… read well in tests, and nothing is lost unless
    /// a test says so); [`TokenScheme::ClockFloored`] floors each token by the "server time":
    /// the clock's reading in µs since [`Instant::ZERO`] plus [`set_wall_offset`](Self::set_wall_offset).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lease_core::memory::{ManualClock, MemoryBackend};
    /// use lease_core::TokenScheme;
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_secs(1));
    /// let b = MemoryBackend::new(clock).with_token_scheme(TokenScheme::ClockFloored);
    /// # let _ = b;
    /// ```
    pub fn with_token_scheme(self, scheme: TokenScheme) -> Self {
        lock(&self.store).scheme = Scheme(scheme);
        self
    }

    /// Sets how far the store's "server time" is from its clock's reading, in µs (negative: a
    /// server whose clock is behind, as after a failover to a host with a slower clock).
    pub fn set_wall_offset(&self, micros: i64) {
        lock(&self.store).wall_offset_us = micros;
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

    /// A release notice on the lease's first key, when the release deleted (a lock's keys, or
    /// a semaphore's permit).
    fn notify_release(&self, spec: &LeaseSpec, outcome: &Result<ReleaseOutcome, BackendError>) {
        if matches!(outcome, Ok(ReleaseOutcome::Released))
            && let Some(key) = spec.keys().first()
            && let Some(hub) = lock(&self.hubs).get(key).and_then(Weak::upgrade)
        {
            hub.notify();
        }
    }

    /// Wakes `owner`, the new head of the fair lock `spec`, on its own channel.
    fn wake_waiter(&self, spec: &LeaseSpec, owner: Option<String>) {
        if let Some(owner) = owner
            && let Some(hub) = lock(&self.hubs)
                .get(&wake_key(fair_name(spec), &owner))
                .and_then(Weak::upgrade)
        {
            hub.notify();
        }
    }

    /// A watch on the hub of `key`, made on first need (always live).
    fn watch_key(&self, key: &str, role: WatchRole) -> ReleaseWatch {
        let hub = {
            let mut hubs = lock(&self.hubs);
            hubs.retain(|_, h| h.strong_count() > 0);
            match hubs.get(key).and_then(Weak::upgrade) {
                Some(hub) => hub,
                None => {
                    let hub = ReleaseHub::new(AlwaysLive);
                    hub.set_live(true);
                    hubs.insert(key.to_owned(), Arc::downgrade(&hub));
                    hub
                }
            }
        };
        hub.watch(role)
    }

    /// [`LeaseBackend::acquire_fair`], applied at once (no delay faults; the wake it causes
    /// is sent).
    pub fn acquire_fair_now(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        let (outcome, wake) = self.with(|s, now| s.acquire_fair(req, now))?;
        self.wake_waiter(&req.acquire.spec, wake);
        Ok(outcome)
    }
    /// [`LeaseBackend::release_fair`], applied at once (the wake it causes is sent).
    pub fn release_fair_now(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let (outcome, wake) = self.with(|s, now| s.release_fair(req, now))?;
        self.wake_waiter(&req.spec, wake);
        Ok(outcome)
    }
    /// [`LeaseBackend::leave_fair`], applied at once (the wake it causes is sent).
    pub fn leave_fair_now(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        let (had, wake) = self.with(|s, now| s.leave_fair(spec, owner, now))?;
        self.wake_waiter(spec, wake);
        Ok(had)
    }

    /// The live waiters of the fair lock `spec`, first in line first (a read, applied at
    /// once; see [`crate::fair`]).
    pub fn fair_queue_now(&self, spec: &LeaseSpec) -> Result<Vec<String>, BackendError> {
        self.with(|s, now| s.fair_queue(spec, now))
    }
    /// [`LeaseBackend::inspect_fair`], applied at once.
    pub fn inspect_fair_now(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.with(|s, now| s.inspect_fair(spec, now))
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

    pub(super) async fn delayed<T>(
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
    /// [`LeaseBackend::acquire_permit`], applied at once (no delay faults).
    pub fn acquire_permit_now(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        self.with(|s, now| s.acquire_permit(req, now))
    }
    /// [`LeaseBackend::renew_permit`], applied at once.
    pub fn renew_permit_now(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.with(|s, now| s.renew_permit(req, now))
    }
    /// [`LeaseBackend::release_permit`], applied at once (no release notice).
    pub fn release_permit_now(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.with(|s, now| s.release_permit(req, now))
    }
    /// [`LeaseBackend::inspect_semaphore`], applied at once.
    pub fn inspect_semaphore_now(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.with(|s, now| s.inspect_semaphore(spec, now))
    }
    /// [`LeaseBackend::acquire_shared`], applied at once (no delay faults).
    pub fn acquire_shared_now(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.with(|s, now| s.acquire_shared(req, now))
    }
    /// [`LeaseBackend::renew_shared`], applied at once.
    pub fn renew_shared_now(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.with(|s, now| s.renew_shared(req, now))
    }
    /// [`LeaseBackend::release_shared`], applied at once (no release notice).
    pub fn release_shared_now(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.with(|s, now| s.release_shared(req, now))
            .map(|(o, _)| o)
    }
    /// [`LeaseBackend::inspect_shared`], applied at once.
    pub fn inspect_shared_now(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.with(|s, now| s.inspect_shared(spec, now))
    }
    /// An administrator's release of `spec` (see
    /// [`LeaseBackend::force_release`]), applied at once (no release notice).
    pub fn force_release_now(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        self.with(|s, now| s.force_release(spec, now))
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
    /// A permit-fenced batch of writes of `owner`'s permit of semaphore `spec` under `token`,
    /// applied at once ([`MemoryPermitFencer`](super::MemoryPermitFencer)'s rule: the permit
    /// current, the token not below the owner's mark). `None` when `spec` is not a fenced
    /// semaphore's.
    pub fn permit_fenced_now(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
        writes: &[MemoryWrite],
    ) -> Option<Result<PermitWriteOutcome, BackendError>> {
        let permits = permits_key(spec).ok()?;
        let mark = permit_mark_key(spec, owner)?;
        Some(
            self.with(|s, now| s.permit_fenced(permits, owner.as_str(), &mark, token, writes, now)),
        )
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
        let outcome = self.delayed(|s, now| s.release(req, now)).await;
        self.notify_release(&req.spec, &outcome);
        outcome
    }

    /// Semaphores as the Redis scripts keep them (see [`crate::semaphore`]).
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        check_semaphore_spec(spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        self.delayed(|s, now| s.acquire_permit(req, now)).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.delayed(|s, now| s.renew_permit(req, now)).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let outcome = self.delayed(|s, now| s.release_permit(req, now)).await;
        self.notify_release(&req.spec, &outcome);
        outcome
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.delayed(|s, now| s.permit_remaining(spec, owner, now))
            .await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        self.delayed(|s, now| s.inspect_semaphore(spec, now)).await
    }

    /// Read-write locks as the Redis scripts keep them (see [`crate::rwlock`]).
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        check_shared_spec(spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.delayed(|s, now| s.acquire_shared(req, now)).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.delayed(|s, now| s.renew_shared(req, now)).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let outcome = self.delayed(|s, now| s.release_shared(req, now)).await;
        // The notice goes out only when the last reader left.
        let notice = match &outcome {
            Ok((ReleaseOutcome::Released, true)) => Ok(ReleaseOutcome::Released),
            _ => Ok(ReleaseOutcome::NotHeld),
        };
        self.notify_release(&req.spec, &notice);
        outcome.map(|(o, _)| o)
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.delayed(|s, now| s.shared_remaining(spec, owner, now))
            .await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        self.delayed(|s, now| s.inspect_shared(spec, now)).await
    }

    /// Release notices as Redis gives them (a release wakes one contender of the lease's first
    /// key and every observer), always live.
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let key = spec.keys().first()?;
        Some(self.watch_key(key, role))
    }

    /// Fair locks as the Redis scripts keep them (see [`crate::fair`]).
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        check_fair_spec(spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        let (outcome, wake) = self.delayed(|s, now| s.acquire_fair(req, now)).await?;
        self.wake_waiter(&req.acquire.spec, wake);
        Ok(outcome)
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let (outcome, wake) = self.delayed(|s, now| s.release_fair(req, now)).await?;
        self.wake_waiter(&req.spec, wake);
        Ok(outcome)
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        let (had, wake) = self
            .delayed(|s, now| s.leave_fair(spec, owner, now))
            .await?;
        self.wake_waiter(spec, wake);
        Ok(had)
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        self.delayed(|s, now| s.inspect_fair(spec, now)).await
    }
    /// A waiter's own wake: only the releases and leaves that make it the head of a free
    /// lock notify it.
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        Some(self.watch_key(&wake_key(fair_name(spec), owner.as_str()), role))
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
    async fn force_release(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        let outcome = self.delayed(|s, now| s.force_release(spec, now)).await;
        if matches!(outcome, Ok(ForceReleaseOutcome::Released { .. })) {
            self.notify_release(spec, &Ok(ReleaseOutcome::Released));
        }
        outcome
    }
}
