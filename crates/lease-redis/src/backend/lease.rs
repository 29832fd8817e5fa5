//! The [`LeaseBackend`] and [`Fencing`] implementations of [`RedisBackend`]: each operation
//! one script (or, where the server has them, the native conditional commands of the plain
//! lock), its reply parsed truthfully.

use std::time::Duration;

use async_trait::async_trait;
use lease_core::backend::{RENEW_BATCH_CHUNK, epoch_key_of, mark_key_of, renew_each};
use lease_core::fair::{FairInfo, FairRequest};
use lease_core::notify::{NoticeMark, ReleaseWatch, WatchRole};
use lease_core::preflight::StoreReport;
use lease_core::rwlock::SharedInfo;
use lease_core::semaphore::{PermitRequest, SemaphoreInfo};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, FenceState, Fencing, ForceReleaseOutcome,
    HandOffOutcome, LeaseBackend, LeaseInfo, LeaseSpec, Metadata, Owner, ReleaseOutcome,
    ReleaseRequest, RenewOutcome, RenewRequest, Token,
};
use redis::aio::ConnectionLike;

use crate::fence::RedisFencer;
use crate::native;
use crate::notify::{self};
use crate::reply;
use crate::scripts::{
    Batch, Call, Decimal, S_ACQUIRE, S_FORCE_RELEASE, S_INSPECT, S_PTTL, S_RELEASE, S_RELEASE_ONE,
    S_RENEW, S_RENEW_MANY, script_cmd,
};
use crate::topology::Topology;

use super::{NoticeArg, RedisBackend, fair, inspect_views, rwlock, semaphore};

#[async_trait]
impl<C> LeaseBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let spec = &*req.spec;
        self.precheck("acquire", spec)?;
        if let ([key], None) = (spec.keys(), spec.fence_key()) {
            // Fast path for the common unfenced single-key lock: a free key is taken with one
            // plain `SET NX PX` (no script). When the key exists — someone else's, or ours
            // (reentrant takeover), or of another type — the script below decides, exactly as
            // if it had been called first: `SET NX` changed nothing.
            let mut conn = self.lane().await;
            // Sized once, and the owner borrowed when there is no metadata: a visible share
            // of a lock cycle's client instructions.
            let mut cmd = redis::Cmd::with_capacity(6, 32 + key.len() + req.owner.as_str().len());
            cmd.arg("SET").arg(key);
            if req.metadata.is_empty() && !req.waiters {
                cmd.arg(req.owner.as_str());
            } else {
                cmd.arg(stored_value(req));
            }
            let set: Option<redis::Value> = cmd
                .arg("NX")
                .arg("PX")
                .arg(req.ttl.as_millis())
                .query_async(&mut conn)
                .await
                .map_err(crate::error::backend_error)?;
            if set.is_some() {
                self.acknowledge(&mut conn).await?;
                return Ok(AcquireOutcome::Acquired {
                    token: None,
                    fence: FenceState::UNKNOWN,
                });
            }
        }
        let mut call = Call::new();
        for k in spec.keys() {
            call.key(k);
        }
        if let Some(fence) = spec.fence_key() {
            call.key(fence)
                .key(mark_key_of(fence))
                .key(epoch_key_of(fence));
        }
        call.arg(stored_value(req));
        match req.writer_mark {
            // The usual case (an election, a lock that retries as long as its TTL): the TTL.
            Some(life) if life == req.ttl.get() => call.arg(req.ttl.as_millis()),
            life => call.arg(format!(
                "{}:{}",
                req.ttl.as_millis(),
                life.map_or(0, |l| l.as_millis().max(1))
            )),
        };
        if spec.fence_key().is_some() {
            call.arg(self.mint_arg(req.floor));
        }
        let mut conn = self.lane().await;
        let v = call.run(&mut conn, &S_ACQUIRE).await?;
        let outcome = reply::acquire(&v, spec.fence_key().is_some())?;
        if matches!(outcome, AcquireOutcome::Acquired { .. }) {
            self.acknowledge(&mut conn).await?;
        }
        Ok(outcome)
    }

    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        let spec = &*req.spec;
        self.precheck("renew", spec)?;
        let mut conn = self.lane().await;
        if self.native_fits(spec)
            && let [key] = spec.keys()
            && let Some(outcome) = self.renew_native(&mut conn, req, key).await?
        {
            self.acknowledge(&mut conn).await?;
            return Ok(outcome);
        }
        let v = if let [key] = spec.keys() {
            // One key (every plain lock): the command written straight, no call buffers.
            let mut ttl = Decimal::default();
            let args = [req.owner.as_str().as_bytes(), ttl.of(req.ttl.as_millis())];
            Call::run_one(&mut conn, &S_RENEW, key.as_bytes(), &args).await?
        } else {
            let mut call = Call::new();
            for k in spec.keys() {
                call.key(k);
            }
            call.arg(req.owner.as_str()).arg(req.ttl.as_millis());
            call.run(&mut conn, &S_RENEW).await?
        };
        let outcome = reply::renew(&v)?;
        if outcome == RenewOutcome::Renewed {
            self.acknowledge(&mut conn).await?;
        }
        Ok(outcome)
    }

    /// On a standalone server, one `renew_many.lua` call per [`RENEW_BATCH_CHUNK`] leases, all
    /// in one pipeline (and one `WAIT` after it with replica acknowledgement). On Redis Cluster
    /// each lease's renewal goes to its own slot's node, all at once.
    async fn renew_many(&self, reqs: &[&RenewRequest]) -> Vec<Result<RenewOutcome, BackendError>> {
        if self.topology == Topology::Cluster || reqs.len() < 2 {
            return renew_each(self, reqs).await;
        }
        let mut conn = self.lane().await;
        let replies = match Call::run_pipelined(&RenewBatch(reqs), &mut conn, &S_RENEW_MANY).await {
            Ok(replies) => replies,
            Err(e) => return reqs.iter().map(|_| Err(e.duplicate())).collect(),
        };
        let mut out = Vec::with_capacity(reqs.len());
        for (chunk, reply) in reqs.chunks(RENEW_BATCH_CHUNK).zip(replies) {
            match reply.and_then(|v| reply::renew_many(&v, chunk.len())) {
                Ok(outcomes) => out.extend(outcomes),
                Err(e) => out.extend(chunk.iter().map(|_| Err(e.duplicate()))),
            }
        }
        let renewed = out.iter().any(|r| matches!(r, Ok(RenewOutcome::Renewed)));
        if renewed && let Err(e) = self.acknowledge(&mut conn).await {
            for r in &mut out {
                if matches!(r, Ok(RenewOutcome::Renewed)) {
                    *r = Err(e.duplicate());
                }
            }
        }
        out
    }

    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        let spec = &*req.spec;
        self.precheck("release", spec)?;
        // One clone of the connection for the whole release, native command and script alike.
        let mut conn = self.lend();
        if self.native_fits(spec)
            && let [key] = spec.keys()
            && let Some(outcome) = self
                .release_native(&mut conn, key, req.owner.as_str())
                .await?
        {
            return Ok(outcome);
        }
        if let ([key], None) = (spec.keys(), spec.fence_key()) {
            // The plain lock: release_one.lua, the same rule without the prelude, key count,
            // or term. Its notice argument is left out where it is the default (standalone,
            // publishing: the script builds the channel from the key when it publishes).
            let mut notice = NoticeArg::default();
            let owner = req.owner.as_str().as_bytes();
            let (one, both);
            let args: &[&[u8]] = if self.publish && self.topology != Topology::Cluster {
                one = [owner];
                &one
            } else {
                both = [owner, self.notice_arg_in(&mut notice, key)];
                &both
            };
            let v = Call::run_one(&mut conn, &S_RELEASE_ONE, key.as_bytes(), args).await?;
            return reply::release(&v);
        }
        let mut call = Call::new();
        for k in spec.keys() {
            call.key(k);
        }
        let term = match (req.term_token, spec.fence_key()) {
            (Some(term), Some(fence)) => {
                call.key(fence);
                Some(term)
            }
            _ => None,
        };
        call.arg(req.owner.as_str()).arg(spec.keys().len());
        match spec.keys().first() {
            Some(key) => call.arg(self.notice_arg(key)),
            None => call.arg(""),
        };
        if let Some(term) = term {
            call.arg(term.to_string());
        }
        let v = call.run(&mut conn, &S_RELEASE).await?;
        reply::release(&v)
    }

    /// The plain lock (one unfenced key): a hand-off is one step.
    fn can_hand_off(&self, spec: &LeaseSpec) -> bool {
        spec.keys().len() == 1 && spec.fence_key().is_none() && self.check_spec(spec).is_ok()
    }

    /// Where the server has `SET ... IFEQ` (Valkey 8.1+, Redis 8.4+): `SET key <to> IFEQ
    /// <from> PX <ttl>`, and the release when it did not match. Elsewhere one
    /// `release_one.lua` call with the hand-off's arguments. With replica acknowledgement a
    /// hand-off is acknowledged like an acquire.
    async fn hand_off(
        &self,
        from: &ReleaseRequest,
        from_metadata: &Metadata,
        to: &AcquireRequest,
    ) -> Result<HandOffOutcome, BackendError> {
        let spec = &*from.spec;
        self.precheck("hand_off", spec)?;
        let ([key], None) = (spec.keys(), spec.fence_key()) else {
            return self.release(from).await.map(HandOffOutcome::from);
        };
        if to.spec.keys() != spec.keys() || to.spec.fence_key().is_some() {
            return Err(BackendError::Invalid(
                "a hand-off passes one lease to a request for the same key".into(),
            ));
        }
        let from_value = from.owner.stored_value(from_metadata);
        let to_value = stored_value(to);
        let mut conn = self.lane().await;
        if self.native_fits(spec) && self.native.set_ifeq(&mut conn).await {
            let reply: redis::RedisResult<redis::Value> = redis::cmd("SET")
                .arg(key)
                .arg(&to_value)
                .arg("IFEQ")
                .arg(&from_value)
                .arg("PX")
                .arg(to.ttl.as_millis())
                .query_async(&mut conn)
                .await;
            match reply {
                Ok(redis::Value::Okay) => {
                    self.acknowledge(&mut conn).await?;
                    return Ok(HandOffOutcome::HandedOff);
                }
                // Not exactly ours (marked, gone, another's): the release decides.
                Ok(redis::Value::Nil) => {
                    return self.release(from).await.map(HandOffOutcome::from);
                }
                Err(e) if native::not_offered(&e) => self.native.disable(),
                Err(e) if e.code() == Some("WRONGTYPE") => {
                    return self.release(from).await.map(HandOffOutcome::from);
                }
                Err(e) => return Err(crate::error::backend_error(e)),
                Ok(other) => {
                    return Err(BackendError::Protocol(format!(
                        "unexpected reply to a native hand-off: {other:?}"
                    )));
                }
            }
        }
        let mut notice = NoticeArg::default();
        let mut ttl = Decimal::default();
        let args = [
            from.owner.as_str().as_bytes(),
            self.notice_arg_in(&mut notice, key),
            from_value.as_bytes(),
            to_value.as_bytes(),
            ttl.of(to.ttl.as_millis()),
        ];
        let v = Call::run_one(&mut conn, &S_RELEASE_ONE, key.as_bytes(), &args).await?;
        let outcome = reply::hand_off(&v)?;
        if outcome == HandOffOutcome::HandedOff {
            self.acknowledge(&mut conn).await?;
        }
        Ok(outcome)
    }

    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.precheck("remaining", spec)?;
        let mut call = Call::new();
        for k in spec.keys() {
            call.key(k);
        }
        call.arg(owner.as_str());
        let mut conn = self.lend();
        let v = call.run(&mut conn, &S_PTTL).await?;
        reply::remaining(&v)
    }

    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inspect_lease(spec, false).await
    }

    /// `inspect.lua` with its mark flag: the holder's value gets the waiter mark in the same
    /// call (`redis.pcall`: an ACL without `SET` or a read-only replica only reads).
    async fn force_release(&self, spec: &LeaseSpec) -> Result<ForceReleaseOutcome, BackendError> {
        self.precheck("force_release", spec)?;
        let Some(first) = spec.keys().first() else {
            return Err(BackendError::Invalid("a lease without keys".into()));
        };
        let mut call = Call::new();
        for k in spec.keys() {
            call.key(k);
        }
        call.arg(spec.keys().len()).arg(self.notice_arg(first));
        if let Some(fence) = spec.fence_key() {
            call.key(fence)
                .key(mark_key_of(fence))
                .key(epoch_key_of(fence));
            call.arg(self.scheme_name());
        }
        let mut conn = self.lend();
        let v = call.run(&mut conn, &S_FORCE_RELEASE).await?;
        reply::force_release(&v, spec.fence_key().is_some())
    }

    async fn observe(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.inspect_lease(spec, true).await
    }

    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.precheck("check", spec)
    }

    /// `ceil(ttl × drift factor) + 2 ms` (see [`RedisBackend::with_drift_factor`]).
    fn validity_margin(&self, ttl: lease_core::Ttl) -> Duration {
        lease_core::quorum::drift(ttl.get(), self.drift_factor)
    }

    fn release_watch(&self, spec: &LeaseSpec, role: WatchRole) -> Option<ReleaseWatch> {
        let key = spec.keys().first()?;
        let notices = self.notices.as_ref()?;
        Some(notices.watch(&notify::notice_channel(key, self.topology), role))
    }

    /// Every watch of this backend is fed by its one [`notify::ReleaseNotices`] subscriber,
    /// which counts its notices: a contender registers its watch once an attempt found the
    /// lease held.
    fn notice_mark(&self, spec: &LeaseSpec) -> Option<NoticeMark> {
        let key = spec.keys().first()?;
        let notices = self.notices.as_ref()?;
        Some(notices.mark_with(|| notify::notice_channel(key, self.topology)))
    }

    /// `CONFIG GET` of the persistence and eviction settings (one parameter per call on
    /// Redis 6.2), `INFO server` (product and version), `INFO replication` and `TIME` (clock
    /// skew), on the server this connection reaches (on Cluster: the node the client routes
    /// to; see the notes). A refused command leaves its part unknown, which the report
    /// lists as a risk ("cannot confirm ...").
    async fn preflight(&self) -> Result<StoreReport, BackendError> {
        let mut conn = self.conn.clone();
        let mut report = crate::preflight::read(&mut conn).await?;
        if self.topology == Topology::Cluster {
            report
                .notes
                .push("Redis Cluster: the node the client routed to; check every primary".into());
            // Sharded pub/sub (SPUBLISH, SSUBSCRIBE) came with Redis 7.0.
            if let Some(server) = &report.server
                && server.product == "redis"
                && server.version_numbers().is_some_and(|v| v < (7, 0, 0))
            {
                report.notes.push(format!(
                    "{server} on Redis Cluster has no sharded pub/sub (SPUBLISH, Redis 7.0+): \
                     no release notices, waiters poll"
                ));
            }
        }
        Ok(report)
    }

    // Semaphores: the permit scripts, in `backend/semaphore.rs`.
    fn check_semaphore(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        semaphore::check(self, spec)
    }
    async fn acquire_permit(&self, req: &PermitRequest) -> Result<AcquireOutcome, BackendError> {
        semaphore::acquire(self, req).await
    }
    async fn renew_permit(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        semaphore::renew(self, req).await
    }
    async fn renew_permit_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        semaphore::renew_many(self, reqs).await
    }
    async fn release_permit(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        semaphore::release(self, req).await
    }
    async fn permit_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        semaphore::remaining(self, spec, owner).await
    }
    async fn inspect_semaphore(&self, spec: &LeaseSpec) -> Result<SemaphoreInfo, BackendError> {
        semaphore::inspect(self, spec).await
    }

    // Fair locks: the fair scripts, in `backend/fair.rs`.
    fn check_fair(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        fair::check(self, spec)
    }
    async fn acquire_fair(&self, req: &FairRequest) -> Result<AcquireOutcome, BackendError> {
        fair::acquire(self, req).await
    }
    async fn release_fair(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        fair::release(self, req).await
    }
    async fn leave_fair(&self, spec: &LeaseSpec, owner: &Owner) -> Result<bool, BackendError> {
        fair::leave(self, spec, owner).await
    }
    async fn inspect_fair(&self, spec: &LeaseSpec) -> Result<FairInfo, BackendError> {
        inspect_views::inspect_fair(self, spec).await
    }
    fn fair_watch(&self, spec: &LeaseSpec, owner: &Owner, role: WatchRole) -> Option<ReleaseWatch> {
        fair::watch(self, spec, owner, role)
    }

    // Read-write locks' readers: the rw_*.lua scripts, in `backend/rwlock.rs`.
    fn check_shared(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        rwlock::check(self, spec)
    }
    async fn acquire_shared(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        rwlock::acquire(self, req).await
    }
    async fn renew_shared(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        rwlock::renew(self, req).await
    }
    async fn renew_shared_many(
        &self,
        reqs: &[&RenewRequest],
    ) -> Vec<Result<RenewOutcome, BackendError>> {
        rwlock::renew_many(self, reqs).await
    }
    async fn release_shared(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        rwlock::release(self, req).await
    }
    async fn shared_remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        rwlock::remaining(self, spec, owner).await
    }
    async fn inspect_shared(&self, spec: &LeaseSpec) -> Result<SharedInfo, BackendError> {
        rwlock::inspect(self, spec).await
    }
}

impl<C> Fencing for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Fencer = RedisFencer<C>;

    fn fencer(&self, mark_key: &str, token: Token) -> RedisFencer<C> {
        // Infallible by the trait: no hash-tag check here (the spec was checked when it was
        // acquired); target keys are still checked against the mark's slot on every write.
        RedisFencer::from_parts(self.conn.clone(), mark_key.to_owned(), token, self.topology)
            .with_timeout(self.fence_timeout)
            .with_replica_ack_opt(self.replica_ack, self.acks.clone())
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// `inspect.lua` on the first key (and the fence keys); `mark`: also give the holder's
    /// value the waiter mark.
    async fn inspect_lease(&self, spec: &LeaseSpec, mark: bool) -> Result<LeaseInfo, BackendError> {
        self.precheck("inspect", spec)?;
        let Some(first) = spec.keys().first() else {
            return Err(BackendError::Invalid("a lease without keys".into()));
        };
        let mut call = Call::new();
        call.key(first);
        if let Some(fence) = spec.fence_key() {
            call.key(fence)
                .key(mark_key_of(fence))
                .key(epoch_key_of(fence));
        }
        if mark {
            call.arg("w");
        }
        let mut conn = self.lend();
        let v = call.run(&mut conn, &S_INSPECT).await?;
        reply::inspect(&v, spec.fence_key().is_some())
    }
}

/// The value an acquire stores: the owner, with its metadata after a NUL, and the waiter mark
/// (`scripts/prelude.lua`) when others of the process wait ([`AcquireRequest::waiters`]), so
/// that this holder's release publishes for them.
fn stored_value(req: &AcquireRequest) -> String {
    let mut v = req.owner.stored_value(&req.metadata);
    if req.waiters {
        v.push_str(if req.metadata.is_empty() {
            "\0\0w"
        } else {
            "\0w"
        });
    }
    v
}

/// Renewals sent as `renew_many.lua` calls of [`RENEW_BATCH_CHUNK`] leases each, encoded
/// straight from the requests into each call's command: no [`Call`] in between, so the
/// leases' keys and owners are copied once less (a batch of 2,000 renewals held about 150 KB
/// of such copies at once).
struct RenewBatch<'a>(&'a [&'a RenewRequest]);

impl Batch for RenewBatch<'_> {
    fn len(&self) -> usize {
        self.0.len().div_ceil(RENEW_BATCH_CHUNK)
    }

    fn cmd(&self, i: usize, verb: &str, script_ref: &[u8]) -> redis::Cmd {
        let chunk = self.0.chunks(RENEW_BATCH_CHUNK).nth(i).unwrap_or_default();
        let keys = chunk.iter().map(|r| r.spec.keys().len()).sum();
        // Each lease's key count, owner and TTL: the counts and TTLs take at most 20 bytes.
        let data = chunk
            .iter()
            .map(|r| {
                r.spec.keys().iter().map(String::len).sum::<usize>() + r.owner.as_str().len() + 20
            })
            .sum();
        let mut cmd = script_cmd(verb, script_ref, keys, 3 * chunk.len(), data);
        for req in chunk {
            for k in req.spec.keys() {
                cmd.arg(k);
            }
        }
        for req in chunk {
            cmd.arg(req.spec.keys().len())
                .arg(req.owner.as_str())
                .arg(req.ttl.as_millis());
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lease_core::{LeaseSpec, Owner, Ttl};

    use super::*;

    #[test]
    fn a_renew_batch_encodes_each_chunk_as_the_call_it_replaces() {
        let reqs: Vec<RenewRequest> = (0..RENEW_BATCH_CHUNK + 3)
            .map(|i| {
                let keys: Vec<String> = (0..=i % 3).map(|k| format!("k{i}:{k}")).collect();
                RenewRequest::new(
                    Arc::new(LeaseSpec::lock(keys, None).expect("keys")),
                    Owner::new(format!("owner-{i}")).expect("owner"),
                    Ttl::new(Duration::from_millis(3000 + i as u64)).expect("ttl"),
                )
            })
            .collect();
        let refs: Vec<&RenewRequest> = reqs.iter().collect();
        let batch = RenewBatch(&refs);
        assert_eq!(batch.len(), 2);
        for (i, chunk) in refs.chunks(RENEW_BATCH_CHUNK).enumerate() {
            let mut call = Call::new();
            for req in chunk {
                for k in req.spec.keys() {
                    call.key(k);
                }
                call.arg(req.spec.keys().len())
                    .arg(req.owner.as_str())
                    .arg(req.ttl.as_millis());
            }
            let calls = [call];
            for verb in ["EVALSHA", "EVAL"] {
                assert_eq!(
                    batch.cmd(i, verb, b"sha").get_packed_command(),
                    calls.as_slice().cmd(0, verb, b"sha").get_packed_command(),
                    "chunk {i}, {verb}"
                );
            }
        }
    }
}
