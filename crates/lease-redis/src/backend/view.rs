//! What the Redis side of the views' primitives shares — semaphores (`semaphore.rs`),
//! read-write locks (`rwlock.rs`) and fair locks (`fair.rs`), each a view of the backend whose
//! lease operations are that primitive's: [`ViewCall`], one script call of a view's
//! operation, which runs the script on the right connection and maps its reply (or its error)
//! into the truthful outcome, acknowledged by replicas when it took or extended a hold;
//! [`renew_batch`], a batch of renewals by one `*_renew_many.lua` script; [`keyed`], the call's
//! keys; and the readers of the replies those scripts give.
//!
//! A child module of `backend.rs` (it uses the backend's connection lanes and replica
//! acknowledgement), kept in a file of its own.

use std::time::Duration;

use lease_core::backend::{RENEW_BATCH_CHUNK, epoch_key_of, mark_key_of};
use lease_core::{
    AcquireOutcome, BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, RenewOutcome,
    RenewRequest, Token,
};
use redis::Value;
use redis::aio::ConnectionLike;

use super::RedisBackend;
use crate::reply;
use crate::scripts::{Call, LuaScript};

/// One script call of a view's operation: the call (its keys and arguments) and the script it
/// runs. Each way to run it is one operation's shape, the same for every view: where it runs
/// (an acquire or a renewal on an acknowledgement lane, a release or a read on the shared
/// connection), how its reply is read (errors are the script call's: a refusal, or an error
/// whose effect may be unknown), and whether replicas must acknowledge it before the outcome
/// is returned. The script's name is what a malformed reply is reported under.
pub(super) struct ViewCall<'s> {
    call: Call,
    script: &'s LuaScript,
}

impl<'s> ViewCall<'s> {
    /// `call` of `script`.
    pub(super) fn new(call: Call, script: &'s LuaScript) -> ViewCall<'s> {
        ViewCall { call, script }
    }

    /// A renewal of `req` by `script`: the spec's keys, then the owner and the TTL in ms.
    pub(super) fn renewal(req: &RenewRequest, script: &'s LuaScript) -> ViewCall<'s> {
        let mut call = keyed(&req.spec, 0);
        call.arg(req.owner.as_str()).arg(req.ttl.as_millis());
        ViewCall::new(call, script)
    }

    /// A release of `req` by `script`: the spec's keys, then the owner and the release notice
    /// on the first key's channel (`''` when `backend` does not publish).
    pub(super) fn release_of<C>(
        backend: &RedisBackend<C>,
        req: &ReleaseRequest,
        script: &'s LuaScript,
    ) -> ViewCall<'s>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let spec = &*req.spec;
        let mut call = keyed(spec, 0);
        call.arg(req.owner.as_str());
        call.arg(
            spec.keys()
                .first()
                .map_or_else(String::new, |k| backend.notice_arg(k)),
        );
        ViewCall::new(call, script)
    }

    /// A `*_pttl.lua` read of `owner`'s hold by `script`: the spec's first key, then the owner.
    pub(super) fn remaining_of(
        spec: &LeaseSpec,
        owner: &Owner,
        script: &'s LuaScript,
    ) -> ViewCall<'s> {
        let mut call = Call::new();
        if let Some(k) = spec.keys().first() {
            call.key(k);
        }
        call.arg(owner.as_str());
        ViewCall::new(call, script)
    }

    /// An obtain: its reply read by `read`; an `Acquired` outcome is returned only once
    /// replicas acknowledged it (when replica acknowledgement is on: its failure is the
    /// error), a `Held` one at once.
    pub(super) async fn acquire<C>(
        self,
        backend: &RedisBackend<C>,
        read: impl FnOnce(&Value) -> Result<AcquireOutcome, BackendError>,
    ) -> Result<AcquireOutcome, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let mut conn = backend.lane().await;
        let v = self.call.run(&mut conn, self.script).await?;
        let outcome = read(&v)?;
        if matches!(outcome, AcquireOutcome::Acquired { .. }) {
            backend.acknowledge(&mut conn).await?;
        }
        Ok(outcome)
    }

    /// A renewal (`1` renewed, `0` not held): renewed only once replicas acknowledged it.
    pub(super) async fn renew<C>(
        self,
        backend: &RedisBackend<C>,
    ) -> Result<RenewOutcome, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let mut conn = backend.lane().await;
        let v = self.call.run(&mut conn, self.script).await?;
        if flag_reply(self.script.name, &v)? {
            backend.acknowledge(&mut conn).await?;
            Ok(RenewOutcome::Renewed)
        } else {
            Ok(RenewOutcome::NotHeld)
        }
    }

    /// A release (`1` released, `0` not held), on the shared connection.
    pub(super) async fn release<C>(
        self,
        backend: &RedisBackend<C>,
    ) -> Result<ReleaseOutcome, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        Ok(if self.flag(backend).await? {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// A call answering `1` or `0` (a release, a fair waiter's leave), on the shared
    /// connection: whether it answered `1`.
    pub(super) async fn flag<C>(self, backend: &RedisBackend<C>) -> Result<bool, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let name = self.script.name;
        self.read(backend, |v| flag_reply(name, v)).await
    }

    /// A `*_pttl.lua` read (`{1, ms}` held, `{0}` not), on the shared connection.
    pub(super) async fn remaining<C>(
        self,
        backend: &RedisBackend<C>,
    ) -> Result<Option<Duration>, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let name = self.script.name;
        self.read(backend, |v| pttl_reply(name, v)).await
    }

    /// A read (a remaining TTL, an inspection), on the shared connection: its reply read by
    /// `read`.
    pub(super) async fn read<C, T>(
        self,
        backend: &RedisBackend<C>,
        read: impl FnOnce(&Value) -> Result<T, BackendError>,
    ) -> Result<T, BackendError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let mut conn = backend.conn.clone();
        let v = self.call.run(&mut conn, self.script).await?;
        read(&v)
    }
}

/// A call with `spec`'s keys, then the first `fence_keys` of its fence keys (counter, mark,
/// epoch) when it is fenced.
pub(super) fn keyed(spec: &LeaseSpec, fence_keys: usize) -> Call {
    let mut call = Call::new();
    for k in spec.keys() {
        call.key(k);
    }
    if let Some(fence) = spec.fence_key() {
        let all = [fence.to_owned(), mark_key_of(fence), epoch_key_of(fence)];
        for k in all.iter().take(fence_keys) {
            call.key(k);
        }
    }
    call
}

/// A batch of renewals on a standalone server by a `*_renew_many.lua` script whose arguments
/// are, renewal after renewal, its spec's keys, then its owner and TTL, and whose reply is
/// `renew_many.lua`'s (one `1`/`0`/`-1` each): one call per [`RENEW_BATCH_CHUNK`] renewals,
/// pipelined on one connection, acknowledged by replicas once when any was renewed. A
/// renewal `precheck` refuses is answered alone, before any round trip; an answer that could
/// not be read (a lost connection, an error reply) is every renewal's of its call (each
/// [`BackendError::duplicate`]d), and a failed acknowledgement is every renewed one's.
pub(super) async fn renew_batch<C>(
    backend: &RedisBackend<C>,
    reqs: &[&RenewRequest],
    precheck: impl Fn(&LeaseSpec) -> Result<(), BackendError>,
    script: &LuaScript,
) -> Vec<Result<RenewOutcome, BackendError>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut out: Vec<Option<Result<RenewOutcome, BackendError>>> = reqs
        .iter()
        .map(|r| precheck(&r.spec).err().map(Err))
        .collect();
    let sendable: Vec<(usize, &RenewRequest)> = reqs
        .iter()
        .enumerate()
        .filter(|(i, _)| out[*i].is_none())
        .map(|(i, r)| (i, *r))
        .collect();
    let calls: Vec<Call> = sendable
        .chunks(RENEW_BATCH_CHUNK)
        .map(|chunk| {
            let mut call = Call::new();
            for (_, req) in chunk {
                for k in req.spec.keys() {
                    call.key(k);
                }
                call.arg(req.owner.as_str()).arg(req.ttl.as_millis());
            }
            call
        })
        .collect();
    if !calls.is_empty() {
        let mut conn = backend.lane().await;
        match Call::run_pipelined(calls.as_slice(), &mut conn, script).await {
            Ok(replies) => {
                for (chunk, reply) in sendable.chunks(RENEW_BATCH_CHUNK).zip(replies) {
                    match reply.and_then(|v| reply::renew_many(&v, chunk.len())) {
                        Ok(outcomes) => {
                            for ((i, _), o) in chunk.iter().zip(outcomes) {
                                out[*i] = Some(o);
                            }
                        }
                        Err(e) => {
                            for (i, _) in chunk {
                                out[*i] = Some(Err(e.duplicate()));
                            }
                        }
                    }
                }
            }
            Err(e) => {
                for (i, _) in &sendable {
                    out[*i] = Some(Err(e.duplicate()));
                }
            }
        }
        let renewed = out
            .iter()
            .any(|r| matches!(r, Some(Ok(RenewOutcome::Renewed))));
        if renewed && let Err(e) = backend.acknowledge(&mut conn).await {
            for r in out.iter_mut() {
                if matches!(r, Some(Ok(RenewOutcome::Renewed))) {
                    *r = Some(Err(e.duplicate()));
                }
            }
        }
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| Err(BackendError::Protocol("a renewal left unanswered".into())))
        })
        .collect()
}

/// `reply::acquire` of a view's obtain script whose holder `''` means "not reported".
pub(super) fn acquire_reply(v: &Value, fenced: bool) -> Result<AcquireOutcome, BackendError> {
    Ok(match reply::acquire(v, fenced)? {
        AcquireOutcome::Held {
            holder,
            remaining,
            fence,
        } => AcquireOutcome::Held {
            holder: holder.filter(|h| !h.is_empty()),
            remaining,
            fence,
        },
        acquired => acquired,
    })
}

/// A reply `what` could not read.
pub(super) fn protocol(what: &str, v: &Value) -> BackendError {
    BackendError::Protocol(format!("{what}: unexpected reply {v:?}"))
}

/// A text reply (bulk or simple string).
pub(super) fn text<'a>(what: &str, v: &'a Value) -> Result<&'a str, BackendError> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).map_err(|_| protocol(what, v)),
        Value::SimpleString(s) => Ok(s),
        other => Err(protocol(what, other)),
    }
}

/// An integer reply.
pub(super) fn int(what: &str, v: &Value) -> Result<i64, BackendError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(protocol(what, other)),
    }
}

/// A duration reply in whole milliseconds (not negative).
pub(super) fn millis(what: &str, v: &Value) -> Result<Duration, BackendError> {
    let ms = int(what, v)?;
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| protocol(what, v))
}

/// A `1`/`0` reply.
pub(super) fn flag_reply(what: &str, v: &Value) -> Result<bool, BackendError> {
    match int(what, v)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(protocol(what, v)),
    }
}

/// A token reply (decimal text; `0`: none).
pub(super) fn token_reply(what: &str, v: &Value) -> Result<Option<Token>, BackendError> {
    let n = text(what, v)?
        .parse::<u64>()
        .map_err(|_| protocol(what, v))?;
    if n == 0 {
        return Ok(None);
    }
    Token::new(n)
        .map(Some)
        .map_err(|e| BackendError::Protocol(format!("{what}: {e}")))
}

/// A `*_pttl.lua` reply: `{1, ms}` held, `{0}` not.
fn pttl_reply(what: &str, v: &Value) -> Result<Option<Duration>, BackendError> {
    match v {
        Value::Array(a) => match a.as_slice() {
            [held, ms] if flag_reply(what, held)? => Ok(Some(millis(what, ms)?)),
            [held] if !flag_reply(what, held)? => Ok(None),
            _ => Err(protocol(what, v)),
        },
        other => Err(protocol(what, other)),
    }
}

/// Asserts that every composed script of `all` has the SHA1 `pinned` gives it, in the same
/// order: a change to a shared part or a script's own file must be re-pinned deliberately.
#[cfg(test)]
pub(super) fn assert_pinned(all: &[(&str, &str)], pinned: &[(&str, &str)]) {
    assert_eq!(all.len(), pinned.len(), "one pin per script");
    for ((file, code), (pinned_file, sha)) in all.iter().zip(pinned) {
        assert_eq!(file, pinned_file);
        let hash = redis::Script::new(code).get_hash().to_owned();
        assert_eq!(&hash, sha, "{file}: re-pin deliberately");
    }
}
