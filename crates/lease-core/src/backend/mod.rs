//! The backend trait adapters implement, and its typed requests and outcomes.
//!
//! A backend stores leases: one or more lock keys holding an owner value with a TTL, and
//! optionally a fence counter (`<fence>`) and an applied mark (`<fence>:applied`). Outcomes
//! (acquired, held by someone else, not ours) are values; failures to get an answer are
//! [`BackendError`]s. Every adapter implements the same semantics as the in-memory backend
//! ([`crate::memory::MemoryBackend`]), which is the executable specification:
//!
//! - **acquire**: if every lock key is absent or holds this owner, mint the next token above
//!   the counter, the applied mark and the request's floor (the mark and the floor heal a counter
//!   that went back), floored by the server's clock under
//!   [`TokenScheme::ClockFloored`](crate::TokenScheme::ClockFloored), store it in counter and mark, create the fence epoch if absent, then
//!   set every key to the owner value with the TTL. Same-owner takeover mints a fresh token.
//!   Otherwise nothing changes and the outcome is [`AcquireOutcome::Held`]. Both outcomes report
//!   the [`FenceState`] seen.
//! - **renew**: if every key holds this owner, set the TTL on each; otherwise nothing changes.
//! - **release**: delete every key that holds this owner (compare-and-delete), unless a `term`
//!   is given and the counter has moved past it (a later term of the same owner).
//! - **force release** (an administrator's): read every key, mint a fresh token into counter
//!   and mark when fenced (held or not), then delete every key whatever its owner.
//! - **fenced write**: guard (`token >= 1`, `token >= mark`), write, then advance the mark.

mod arc;
mod error;
mod request;
mod spec;

pub use error::{BackendError, BoxError, Effect};
pub use request::{
    AcquireOutcome, AcquireRequest, ForceReleaseOutcome, HandOffOutcome, LeaseInfo, ReleaseOutcome,
    ReleaseRequest, RenewOutcome, RenewRequest,
};
pub use spec::{
    LeaseSpec, MAX_KEYS, MAX_METADATA_LEN, Metadata, Owner, epoch_key_of, mark_key_of, split_stored,
};

use std::time::Duration;

use async_trait::async_trait;

use crate::config::Ttl;
use crate::fair::{FairInfo, FairRequest};
use crate::notify::{NoticeMark, ReleaseWatch, WatchRole};
use crate::preflight::StoreReport;
use crate::rwlock::SharedInfo;
use crate::semaphore::{PermitRequest, SemaphoreInfo};
#[cfg(doc)]
use crate::token::FenceState;
use crate::token::{FenceMark, Token};

/// How many leases the Redis backend renews in one script call of a batch
/// ([`LeaseBackend::renew_many`]); a larger batch is several calls in one pipeline, so no
/// single call holds the server for long.
pub const RENEW_BATCH_CHUNK: usize = 128;

/// Every [`LeaseBackend::renew`] of `reqs` on `backend`, concurrently; the outcomes in order.
/// The default [`LeaseBackend::renew_many`], for overrides that fall back to it.
pub async fn renew_each<B: LeaseBackend + ?Sized>(
    backend: &B,
    reqs: &[&RenewRequest],
) -> Vec<Result<RenewOutcome, BackendError>> {
    join_all(reqs.iter().map(|r| backend.renew(r)).collect()).await
}

/// Every permit renewal of `reqs` sent at once, each `backend.renew_permit`: the default of
/// [`LeaseBackend::renew_permit_many`].
pub async fn renew_permit_each<B: LeaseBackend + ?Sized>(
    backend: &B,
    reqs: &[&RenewRequest],
) -> Vec<Result<RenewOutcome, BackendError>> {
    join_all(reqs.iter().map(|r| backend.renew_permit(r)).collect()).await
}

/// Every reader's renewal of `reqs` sent at once, each `backend.renew_shared`: the default of
/// [`LeaseBackend::renew_shared_many`].
pub async fn renew_shared_each<B: LeaseBackend + ?Sized>(
    backend: &B,
    reqs: &[&RenewRequest],
) -> Vec<Result<RenewOutcome, BackendError>> {
    join_all(reqs.iter().map(|r| backend.renew_shared(r)).collect()).await
}

/// Runs `futures` concurrently; their outputs in order (no runtime needed).
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Option<std::pin::Pin<Box<F>>>> =
        futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (slot, out) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// A store of leases. Implemented by the Redis, Redlock and in-memory backends.
///
/// Each method is one atomic step at the store (for Redis: one script). Implementations must not
/// retry internally: retries and timeouts are the driver's and the machine's business.
#[async_trait]
pub trait LeaseBackend: Send + Sync + 'static {
    /// Acquires the lease for `req.owner` if free or already theirs.
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError>;
    /// Extends the lease if still ours.
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError>;
    /// Releases the lease if still ours.
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError>;
    /// Extends several leases at once: one outcome per request, in order, each with the
    /// meaning of [`LeaseBackend::renew`] for that request alone (one lease's refusal or
    /// `NotHeld` never affects another's). Drivers that hold many leases call it with the
    /// renewals that fall due together (`lease-tokio`'s locks do).
    ///
    /// The default runs every [`LeaseBackend::renew`] concurrently. Backends that can carry a
    /// batch in fewer round trips override it (the Redis backend: one script call per up to
    /// [`RENEW_BATCH_CHUNK`] leases, all of them in one pipeline).
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        renew_each(self, reqs).await
    }
    /// The minimum remaining TTL over the keys if every key is held by `owner`, else `None`.
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError>;
    /// Who holds the lease now, and the fence counter and mark.
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError>;
    /// [`inspect`](Self::inspect) for a watcher that waits for the holder's release notice
    /// (a [`release_watch`](Self::release_watch) as an observer, e.g. `LeaderWatch`): a store
    /// whose releases publish only when someone may be waiting (Redis: the waiter mark, see
    /// `docs/handover.md`) also records, atomically with the read, that someone waits for
    /// this holder. Recording is best effort (a read-only user or replica only reads). The
    /// default reads only: its watchers poll for releases nobody else waits for.
    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inspect(spec).await
    }

    /// An administrator's release of `spec`'s lease, whatever its owner, in one atomic step:
    /// every key is read first (a key that is not a plain lock's string is refused, nothing
    /// changed); when the lease is fenced, a fresh token is minted exactly as an acquire mints
    /// one (above the counter and the mark, by the store's token scheme; the epoch created if
    /// absent) and stored in counter and mark, whether or not the lease was held; then every
    /// held key is deleted (waiters notified as by a release). The broken holder's token is
    /// below the new mark, so its fenced writes are refused; the next acquire mints above the
    /// mark, so the next holder's are accepted. The default refuses with
    /// [`BackendError::Unsupported`] (Redlock among them: no single store can raise the mark).
    async fn force_release(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        let _ = spec;
        Err(BackendError::Unsupported(
            "this backend does not offer forced releases".into(),
        ))
    }

    /// Whether [`hand_off`](Self::hand_off) can pass `spec`'s lease straight from one owner
    /// to another (the default: never). Drivers ask before queueing a waiter of their own
    /// process behind a holder of their own process (`lease-tokio`'s locks; see
    /// `docs/handover.md`, "Hand-off within a process").
    fn can_hand_off(&self, spec: &LeaseSpec) -> bool {
        let _ = spec;
        false
    }

    /// Releases `from`'s lease, handing it to `to` in the same atomic step when nobody else
    /// is known to wait for it: if every key holds `from`'s owner with exactly `from_metadata`
    /// and no sign of another waiter, each key is set to `to`'s value with `to`'s TTL
    /// ([`HandOffOutcome::HandedOff`]: `to` holds the lease from when the step was sent, with
    /// no fencing token); otherwise it is [`release`](Self::release) of `from` (waiters
    /// notified). Only called when [`can_hand_off`](Self::can_hand_off) says so for the spec
    /// (the two requests share it); the default releases.
    ///
    /// An error is of unknown effect for both sides: `from` may still hold the lease, or `to`
    /// may hold it (a later acquire by `to`'s owner settles that, taking it over).
    async fn hand_off(
        &self,
        from: &ReleaseRequest,
        from_metadata: &Metadata,
        to: &AcquireRequest,
    ) -> Result<HandOffOutcome, BackendError> {
        let _ = (from_metadata, to);
        self.release(from).await.map(HandOffOutcome::from)
    }

    /// Refuses, before any round trip, a lease this backend can never serve (for example
    /// keys in different Redis Cluster slots). Drivers call it before contending.
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        let _ = spec;
        Ok(())
    }

    /// How much shorter than the TTL a lease's local validity must be, to allow for clock-rate
    /// drift between this process and the store (zero by default; Redlock's drift allowance).
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        let _ = ttl;
        Duration::ZERO
    }

    /// Reads what the store discloses about its durability, eviction and replication (see
    /// [`crate::preflight`]). A setting the store does not disclose is unknown, never an
    /// error; an error means the store could not be asked (unreachable). The default reports
    /// nothing known.
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        Ok(StoreReport::unknown(
            "this backend does not report its settings",
        ))
    }

    /// A watch on the release notifications of `spec`'s lease (see [`crate::notify`]), or
    /// `None` when this backend has none (the default): the drivers then only poll.
    ///
    /// Cheap and free of I/O: it registers the watch on the backend's hub for the lease's
    /// channel; the server-side subscription starts at [`ReleaseWatch::activate`].
    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let _ = (spec, role);
        None
    }

    /// A [`NoticeMark`] of this backend's release notices for `spec`'s lease, taken just
    /// before an attempt, when a contender may register its [`ReleaseWatch`] only after an
    /// attempt found the lease held (see [`NoticeMark`] for why no wake-up is lost); `None`
    /// (the default) when it must register its watch before the first attempt. A backend
    /// whose watches are all fed by one counted subscriber returns a mark; one that relays
    /// other watches (a quorum's), or has no notices, keeps the default.
    ///
    /// Cheap and free of I/O; called once per attempt while the contender has no watch.
    fn notice_mark(&self, spec: &LeaseSpec) -> Option<NoticeMark> {
        let _ = spec;
        None
    }

    /// Refuses, before any round trip, a semaphore this backend cannot serve: every backend
    /// without permit scripts (the default, [`BackendError::Unsupported`]), and on Redis
    /// Cluster a semaphore whose keys are in different slots. Drivers call it before the
    /// first permit is asked for (see [`crate::semaphore`]).
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        let _ = spec;
        Err(unsupported_semaphore())
    }

    /// Obtains one permit of the semaphore `req.spec` for `req.owner` (see
    /// [`crate::semaphore`] for the rule), or takes the owner's permit over. The default
    /// refuses with [`BackendError::Unsupported`].
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        let _ = req;
        Err(unsupported_semaphore())
    }

    /// Extends `req.owner`'s permit if it is still current. The default refuses with
    /// [`BackendError::Unsupported`].
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let _ = req;
        Err(unsupported_semaphore())
    }

    /// A batch of permit renewals, each judged alone as [`LeaseBackend::renew_permit`] judges
    /// it (one answer per request, in order); what a permit's auto-renewals are sent as, so a
    /// backend may send a batch in fewer round trips (on Redis, one script call per
    /// [`RENEW_BATCH_CHUNK`] permits). The default sends every `renew_permit` at once
    /// ([`renew_permit_each`]).
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        renew_permit_each(self, reqs).await
    }

    /// Gives `req.owner`'s permit back, waking one waiter. The default refuses with
    /// [`BackendError::Unsupported`].
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let _ = req;
        Err(unsupported_semaphore())
    }

    /// The remaining TTL of `owner`'s permit, `None` when it holds none. The default refuses
    /// with [`BackendError::Unsupported`].
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        let _ = (spec, owner);
        Err(unsupported_semaphore())
    }

    /// The semaphore's current holders, its permit count, and the fence counter and mark. The
    /// default refuses with [`BackendError::Unsupported`].
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        let _ = spec;
        Err(unsupported_semaphore())
    }

    /// Refuses, before any round trip, a fair lock this backend cannot serve: every backend
    /// without fair scripts (the default, [`BackendError::Unsupported`]: Redlock among them),
    /// and on Redis Cluster a fair lock whose keys are in different slots. Drivers call it
    /// before the first attempt (see [`crate::fair`]).
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        let _ = spec;
        Err(unsupported_fair())
    }

    /// One fair attempt (see [`crate::fair`] for the rule): the lock when it is free and the
    /// owner is first in line (or the owner holds it), else `Held` and a heartbeat of the
    /// owner's place. The default refuses with [`BackendError::Unsupported`].
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        let _ = req;
        Err(unsupported_fair())
    }

    /// Releases a fair lock if still ours, removes the owner's place, and wakes the next
    /// waiter alone. The default refuses with [`BackendError::Unsupported`].
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let _ = req;
        Err(unsupported_fair())
    }

    /// Removes `owner`'s place in the fair lock's queue (never the lock itself); whether it
    /// had one. The default refuses with [`BackendError::Unsupported`].
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        let _ = (spec, owner);
        Err(unsupported_fair())
    }

    /// The fair lock's holder, its live waiters in queue order (each with the time its place
    /// has left), and the fence counter and mark (see [`crate::fair`]); read only. The
    /// default refuses with [`BackendError::Unsupported`].
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        let _ = spec;
        Err(unsupported_fair())
    }

    /// A watch on the wakes of `owner` as a waiter of the fair lock `spec` (its own channel:
    /// [`crate::fair::wake_key`]), or `None` when this backend has no notices (the default).
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        let _ = (spec, owner, role);
        None
    }

    /// Refuses, before any round trip, a read-write lock this backend cannot serve: every
    /// backend without shared (reader) operations (the default, [`BackendError::Unsupported`]),
    /// and a spec of more than one key. Drivers call it before the first reader is asked for
    /// (see [`crate::rwlock`]).
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        let _ = spec;
        Err(unsupported_shared())
    }

    /// Obtains a shared (reader) hold of the one-key lock `req.spec` for `req.owner` (see
    /// [`crate::rwlock`] for the rule), or takes the owner's over. The default refuses with
    /// [`BackendError::Unsupported`].
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let _ = req;
        Err(unsupported_shared())
    }

    /// Extends `req.owner`'s reader hold if it is still current. The default refuses with
    /// [`BackendError::Unsupported`].
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let _ = req;
        Err(unsupported_shared())
    }

    /// A batch of reader renewals, each judged alone as [`LeaseBackend::renew_shared`] judges
    /// it (one answer per request, in order; one reader's lapsed hold or refusal never
    /// affects another's); what readers' auto-renewals are sent as, so a backend may send a
    /// batch in fewer round trips (on Redis, one script call per [`RENEW_BATCH_CHUNK`]
    /// readers). The default sends every `renew_shared` at once ([`renew_shared_each`]):
    /// the in-memory backend's, so the specification judges each alone; a backend without
    /// read-write locks (Redlock) refuses each as its `renew_shared` does.
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        renew_shared_each(self, reqs).await
    }

    /// Ends `req.owner`'s reader hold; the last reader's release wakes a waiting writer. The
    /// default refuses with [`BackendError::Unsupported`].
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let _ = req;
        Err(unsupported_shared())
    }

    /// The remaining TTL of `owner`'s reader hold, `None` when it holds none. The default
    /// refuses with [`BackendError::Unsupported`].
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        let _ = (spec, owner);
        Err(unsupported_shared())
    }

    /// The lock's writer or readers, whether a writer waits, and the fence counter and mark.
    /// The default refuses with [`BackendError::Unsupported`].
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        let _ = spec;
        Err(unsupported_shared())
    }
}

/// The default refusal of the fair lock methods of [`LeaseBackend`].
fn unsupported_fair() -> BackendError {
    BackendError::Unsupported("this backend does not offer fair locks".into())
}

/// The default refusal of the shared (reader) methods of [`LeaseBackend`].
fn unsupported_shared() -> BackendError {
    BackendError::Unsupported("this backend does not offer read-write locks".into())
}

/// The default refusal of the semaphore methods of [`LeaseBackend`].
fn unsupported_semaphore() -> BackendError {
    BackendError::Unsupported("this backend does not offer semaphores".into())
}

/// The result of a fenced write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a stale outcome means this holder was fenced out and must stop writing"]
pub enum FenceOutcome {
    /// The write was applied and the mark advanced to the token.
    Applied,
    /// The token was below the mark: nothing was written.
    Stale {
        /// The mark that refused the write.
        mark: FenceMark,
    },
}

impl FenceOutcome {
    /// Whether the write was applied.
    pub fn is_applied(self) -> bool {
        matches!(self, FenceOutcome::Applied)
    }
}

/// A resource that enforces the fence rule atomically with each write.
///
/// Implemented by the Redis fencer, the Postgres adapter and the in-memory fencer; implement it
/// for your own store: check `token >= mark`, apply the write, and advance the mark, atomically.
#[async_trait]
pub trait FencedResource: Send + Sync {
    /// A write this resource understands.
    type Write: Send;
    /// Why a write failed (not a stale token: that is [`FenceOutcome::Stale`]).
    type Error: std::error::Error + Send + Sync + 'static;
    /// Applies `write` iff `token` passes the fence; a failed write never advances the mark.
    async fn apply(&self, token: Token, write: Self::Write) -> Result<FenceOutcome, Self::Error>;
}

/// A backend whose leases can fence writes in the same store.
pub trait Fencing {
    /// The fencer handed to each term: binds the token to the store.
    type Fencer: Clone + Send + Sync + 'static;
    /// A fencer for writes under `token` against the applied mark stored at `mark_key`
    /// (for a lease, [`LeaseSpec::mark_key`]; for an election `<name>:fence:applied`).
    fn fencer(&self, mark_key: &str, token: Token) -> Self::Fencer;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many times `needle` appears in the messages of `e` and of everything below it
    /// (the chain a reporter prints by walking `source()`).
    fn count_in_chain(e: &(dyn std::error::Error + 'static), needle: &str) -> usize {
        let mut count = 0;
        let mut next = Some(e);
        while let Some(err) = next {
            count += err.to_string().matches(needle).count();
            next = err.source();
        }
        count
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::other("wire cut");
        for e in [
            BackendError::Unavailable(Box::new(io())),
            BackendError::OutcomeUnknown(Box::new(io())),
            BackendError::Other(Box::new(io())),
        ] {
            assert_eq!(count_in_chain(&e, "wire cut"), 1, "{e}");
        }
        // A quorum error inside, and a configuration error wrapping another.
        let e = crate::ConfigError::from(crate::quorum::QuorumConfigError::Even(4));
        assert_eq!(count_in_chain(&e, "got 4"), 1, "{e}");
    }
}
