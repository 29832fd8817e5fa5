//! Read-write locks on Redis: the readers' `rw_*.lua` scripts, each composed at compile time
//! like the permit scripts (`prelude.lua`, then `semaphore.lua`'s helpers: the server's clock
//! in ms, `settle`, the fence state and `mint`, then the script's own file), and the
//! [`RedisBackend`] side of the shared methods of [`LeaseBackend`](lease_core::LeaseBackend).
//! The writer is the plain lock: `acquire.lua` and the other plain scripts treat a key holding
//! readers as the rule says. The rule is `lease_core::rwlock`'s; the in-memory backend is its
//! executable specification (`tests/rwlock.rs` compares them on a real server).
//!
//! One key, so on Redis Cluster only the fence keys must share its slot (the precheck of any
//! fenced lock). Each operation's call runs through `view.rs`'s `ViewCall`, the shape the
//! three views' backends share.

use std::sync::LazyLock;
use std::time::Duration;

use lease_core::backend::renew_shared_each;
use lease_core::rwlock::{SharedInfo, check_shared_spec};
use lease_core::semaphore::PermitHolder;
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, FenceMark, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, RenewOutcome, RenewRequest,
};
use redis::Value;
use redis::aio::ConnectionLike;

use super::RedisBackend;
use super::semaphore::permit_script;
use super::view::{ViewCall, int, keyed, millis, protocol, renew_batch, text, token_reply};
use crate::reply;
use crate::scripts::LuaScript;
use crate::topology::Topology;

/// `rw_acquire.lua`: obtain or take over a reader's hold, minting a token when fenced.
pub(crate) const RW_ACQUIRE: &str = permit_script!("rw_acquire.lua");
/// `rw_renew.lua`: extend a reader's current hold.
pub(crate) const RW_RENEW: &str = permit_script!("rw_renew.lua");
/// `rw_renew_many.lua`: extend several readers' current holds (a batch).
pub(crate) const RW_RENEW_MANY: &str = permit_script!("rw_renew_many.lua");
/// `rw_release.lua`: end a reader's hold; the last reader publishes the release notice.
pub(crate) const RW_RELEASE: &str = permit_script!("rw_release.lua");
/// `rw_pttl.lua`: the remaining TTL of a reader's hold.
pub(crate) const RW_PTTL: &str = permit_script!("rw_pttl.lua");
/// `rw_inspect.lua`: the writer or the readers, the writer's mark, the counter and the mark.
pub(crate) const RW_INSPECT: &str = permit_script!("rw_inspect.lua");

/// Every read-write lock script, by file name.
#[cfg(test)]
pub(crate) const ALL: [(&str, &str); 6] = [
    ("rw_acquire.lua", RW_ACQUIRE),
    ("rw_renew.lua", RW_RENEW),
    ("rw_renew_many.lua", RW_RENEW_MANY),
    ("rw_release.lua", RW_RELEASE),
    ("rw_pttl.lua", RW_PTTL),
    ("rw_inspect.lua", RW_INSPECT),
];

static S_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("rw_acquire", RW_ACQUIRE));
static S_RENEW: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("rw_renew", RW_RENEW));
static S_RENEW_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("rw_renew_many", RW_RENEW_MANY));
static S_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("rw_release", RW_RELEASE));
static S_PTTL: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("rw_pttl", RW_PTTL));
static S_INSPECT: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("rw_inspect", RW_INSPECT));

/// The checks every shared operation makes before its round trip: one key, and on Redis
/// Cluster the fence keys in its slot.
fn precheck<C>(
    backend: &RedisBackend<C>,
    op: &'static str,
    spec: &LeaseSpec,
) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    check_shared_spec(spec)?;
    backend.precheck(op, spec)
}

/// [`LeaseBackend::check_shared`](lease_core::LeaseBackend::check_shared).
pub(super) fn check<C>(backend: &RedisBackend<C>, spec: &LeaseSpec) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "check_shared", spec)
}

pub(super) async fn acquire<C>(
    backend: &RedisBackend<C>,
    req: &AcquireRequest,
) -> Result<AcquireOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let spec = &*req.spec;
    precheck(backend, "acquire_shared", spec)?;
    let fenced = spec.fence_key().is_some();
    let mut call = keyed(spec, 3);
    call.arg(req.owner.as_str()).arg(req.ttl.as_millis());
    if fenced {
        call.arg(backend.mint_arg(req.floor));
    }
    ViewCall::new(call, &S_ACQUIRE)
        .acquire(backend, |v| reply::acquire(v, fenced))
        .await
}

pub(super) async fn renew<C>(
    backend: &RedisBackend<C>,
    req: &RenewRequest,
) -> Result<RenewOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "renew_shared", &req.spec)?;
    ViewCall::renewal(req, &S_RENEW).renew(backend).await
}

/// [`LeaseBackend::renew_shared_many`](lease_core::LeaseBackend::renew_shared_many): on a
/// standalone server, one `rw_renew_many.lua` call per [`RENEW_BATCH_CHUNK`] readers (of any
/// keys), the calls pipelined on one connection, each reader judged alone by the server's
/// clock; on Redis Cluster, where the keys may live in different slots, each is its own call.
/// A request refused before any round trip is answered alone; the others still leave
/// together.
///
/// [`RENEW_BATCH_CHUNK`]: lease_core::backend::RENEW_BATCH_CHUNK
pub(super) async fn renew_many<C>(
    backend: &RedisBackend<C>,
    reqs: &[&RenewRequest],
) -> Vec<Result<RenewOutcome, BackendError>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    if backend.topology == Topology::Cluster || reqs.len() < 2 {
        return renew_shared_each(backend, reqs).await;
    }
    renew_batch(
        backend,
        reqs,
        |spec| precheck(backend, "renew_shared", spec),
        &S_RENEW_MANY,
    )
    .await
}

pub(super) async fn release<C>(
    backend: &RedisBackend<C>,
    req: &ReleaseRequest,
) -> Result<ReleaseOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "release_shared", &req.spec)?;
    ViewCall::release_of(backend, req, &S_RELEASE)
        .release(backend)
        .await
}

pub(super) async fn remaining<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
    owner: &Owner,
) -> Result<Option<Duration>, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "shared_remaining", spec)?;
    ViewCall::remaining_of(spec, owner, &S_PTTL)
        .remaining(backend)
        .await
}

fn inspect_reply(v: &Value) -> Result<SharedInfo, BackendError> {
    const W: &str = "rw_inspect";
    let Value::Array(a) = v else {
        return Err(protocol(W, v));
    };
    let [writer, writer_ms, readers, waiting, counter, mark] = a.as_slice() else {
        return Err(protocol(W, v));
    };
    let mut info = SharedInfo::default();
    let writer = text(W, writer)?;
    if !writer.is_empty() {
        // -1: a writer's key without expiry (never ours).
        let remaining = match int(W, writer_ms)? {
            -1 => Duration::MAX,
            _ => millis(W, writer_ms)?,
        };
        info.writer = Some(PermitHolder::new(writer, remaining));
    }
    let readers = match readers {
        Value::Array(r) => r.as_slice(),
        other => return Err(protocol(W, other)),
    };
    for pair in readers.chunks(2) {
        let [owner, ms] = pair else {
            return Err(protocol(W, v));
        };
        info.readers
            .push(PermitHolder::new(text(W, owner)?, millis(W, ms)?));
    }
    if int(W, waiting)? >= 0 {
        info.writer_waiting = Some(millis(W, waiting)?);
    }
    info.counter = token_reply(W, counter)?;
    info.mark = token_reply(W, mark)?.map_or(FenceMark::NONE, FenceMark::at);
    Ok(info)
}

pub(super) async fn inspect<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
) -> Result<SharedInfo, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "inspect_shared", spec)?;
    ViewCall::new(keyed(spec, 2), &S_INSPECT)
        .read(backend, inspect_reply)
        .await
}

#[cfg(test)]
mod tests {
    use super::super::view::assert_pinned;
    use super::*;

    /// The SHA1 of every composed read-write lock script, pinned (as `scripts.rs` pins the
    /// others): a change to the prelude, `semaphore.lua` or a script's own file must be
    /// deliberate.
    const PINNED_SHA1: [(&str, &str); 6] = [
        ("rw_acquire.lua", "46f63215cf9bee6103aa83f5ed136772b11939cb"),
        ("rw_renew.lua", "4bd45842c62a2e6f3d354d2530aaa44831845a45"),
        (
            "rw_renew_many.lua",
            "ba6ec3364f2ef39caa17b621d90d2e80b3d5e635",
        ),
        ("rw_release.lua", "71cee700060d5a93f3daf73dd7ea92c906ff1754"),
        ("rw_pttl.lua", "32352a2399cf02fde31aca3cb6e9d102438da107"),
        ("rw_inspect.lua", "6ad62ffd6cb265c4dea395e920efaf6e49d43e05"),
    ];

    #[test]
    fn every_rw_script_is_pinned() {
        assert_pinned(&ALL, &PINNED_SHA1);
    }

    #[test]
    fn an_inspect_reply_is_typed() {
        let s = |x: &str| Value::BulkString(x.as_bytes().to_vec());
        let v = Value::Array(vec![
            s(""),
            Value::Int(-2),
            Value::Array(vec![s("r1"), Value::Int(5), s("r2"), Value::Int(9)]),
            Value::Int(7),
            s("3"),
            s("2"),
        ]);
        let info = inspect_reply(&v).expect("a reply");
        assert_eq!(info.writer, None);
        assert_eq!(info.readers.len(), 2);
        assert_eq!(info.writer_waiting, Some(Duration::from_millis(7)));
        let garbage = Value::Array(vec![s("w"), Value::Int(-5)]);
        assert!(matches!(
            inspect_reply(&garbage),
            Err(BackendError::Protocol(_))
        ));
    }
}
