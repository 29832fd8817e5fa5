//! Semaphores on Redis: the `permit_*.lua` scripts, each composed at compile time from
//! `prelude.lua`, then `semaphore.lua` (the permit helpers: the server's clock in ms, the
//! count, `settle`, the fence state), then the script's own file; and the [`RedisBackend`]
//! side of the permit methods of [`LeaseBackend`](lease_core::LeaseBackend). The rule is
//! `lease_core::semaphore`'s; the in-memory backend is its executable specification
//! (`tests/semaphore.rs` compares them on a real server).
//!
//! A child module of `backend.rs` (it uses the backend's connection lanes, replica
//! acknowledgement and notice settings), kept in a file of its own; each operation's call runs
//! through `view.rs`'s `ViewCall`, the shape the three views' backends share.

use std::sync::LazyLock;
use std::time::Duration;

use lease_core::backend::renew_permit_each;
use lease_core::semaphore::{
    PermitHolder, PermitRequest, SemaphoreInfo, check_semaphore_spec, semaphore_name,
};
use lease_core::{
    AcquireOutcome, BackendError, FenceMark, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use redis::Value;
use redis::aio::ConnectionLike;

use super::RedisBackend;
use super::view::{self, ViewCall, int, keyed, millis, protocol, renew_batch, text, token_reply};
use crate::scripts::LuaScript;
use crate::topology::Topology;

/// A permit script: the prelude, the permit helpers, then the script's own file (the
/// read-write lock's scripts are composed the same way, in `rwlock.rs`).
macro_rules! permit_script {
    ($file:literal) => {
        concat!(
            include_str!("../../scripts/prelude.lua"),
            include_str!("../../scripts/semaphore.lua"),
            include_str!(concat!("../../scripts/", $file)),
        )
    };
}
pub(super) use permit_script;

/// `permit_acquire.lua`: obtain or take over one permit, minting a token when fenced.
pub(crate) const PERMIT_ACQUIRE: &str = permit_script!("permit_acquire.lua");
/// `permit_renew.lua`: extend an owner's current permit.
pub(crate) const PERMIT_RENEW: &str = permit_script!("permit_renew.lua");
/// `permit_renew_many.lua`: extend several owners' current permits (a batch).
pub(crate) const PERMIT_RENEW_MANY: &str = permit_script!("permit_renew_many.lua");
/// `permit_release.lua`: give an owner's permit back and publish the release notice.
pub(crate) const PERMIT_RELEASE: &str = permit_script!("permit_release.lua");
/// `permit_pttl.lua`: the remaining TTL of an owner's permit.
pub(crate) const PERMIT_PTTL: &str = permit_script!("permit_pttl.lua");
/// `permit_inspect.lua`: the current permits, the count, the counter and the mark.
pub(crate) const PERMIT_INSPECT: &str = permit_script!("permit_inspect.lua");

/// Every permit script, by file name.
#[cfg(test)]
pub(crate) const ALL: [(&str, &str); 6] = [
    ("permit_acquire.lua", PERMIT_ACQUIRE),
    ("permit_renew.lua", PERMIT_RENEW),
    ("permit_renew_many.lua", PERMIT_RENEW_MANY),
    ("permit_release.lua", PERMIT_RELEASE),
    ("permit_pttl.lua", PERMIT_PTTL),
    ("permit_inspect.lua", PERMIT_INSPECT),
];

static S_ACQUIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_acquire", PERMIT_ACQUIRE));
static S_RENEW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_renew", PERMIT_RENEW));
static S_RENEW_MANY: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_renew_many", PERMIT_RENEW_MANY));
static S_RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_release", PERMIT_RELEASE));
static S_PTTL: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new("permit_pttl", PERMIT_PTTL));
static S_INSPECT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_inspect", PERMIT_INSPECT));

/// `permit_acquire.lua`'s reply: acquire.lua's shapes (the holder '' is "not reported"), or
/// `{2, stored}`: another count is stored.
fn acquire_reply(
    v: &Value,
    req: &PermitRequest,
    fenced: bool,
) -> Result<AcquireOutcome, BackendError> {
    const W: &str = "permit_acquire";
    if let Value::Array(a) = v
        && let [flag, stored] = a.as_slice()
        && int(W, flag)? == 2
    {
        let stored = text(W, stored)?
            .parse::<u32>()
            .map_err(|_| protocol(W, v))?;
        return Err(BackendError::PermitsMismatch {
            name: req.name().to_owned(),
            stored,
            asked: req.permits.get(),
        });
    }
    view::acquire_reply(v, fenced)
}

fn inspect_reply(v: &Value) -> Result<SemaphoreInfo, BackendError> {
    const W: &str = "permit_inspect";
    let Value::Array(a) = v else {
        return Err(protocol(W, v));
    };
    let [count, holders, counter, mark] = a.as_slice() else {
        return Err(protocol(W, v));
    };
    let mut info = SemaphoreInfo::default();
    let count = text(W, count)?;
    if !count.is_empty() {
        info.permits = Some(count.parse::<u32>().map_err(|_| protocol(W, v))?);
    }
    let holders = match holders {
        Value::Array(h) => h.as_slice(),
        other => return Err(protocol(W, other)),
    };
    for pair in holders.chunks(2) {
        let [owner, ms] = pair else {
            return Err(protocol(W, v));
        };
        info.holders
            .push(PermitHolder::new(text(W, owner)?, millis(W, ms)?));
    }
    info.counter = token_reply(W, counter)?;
    info.mark = token_reply(W, mark)?.map_or(FenceMark::NONE, FenceMark::at);
    Ok(info)
}

/// The checks every permit operation makes before its round trip: a semaphore's keys, and on
/// Redis Cluster every key (fence keys too) in one slot.
fn precheck<C>(
    backend: &RedisBackend<C>,
    op: &'static str,
    spec: &LeaseSpec,
) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    check_semaphore_spec(spec)?;
    backend.precheck(op, spec)
}

/// [`LeaseBackend::check_semaphore`](lease_core::LeaseBackend::check_semaphore).
pub(super) fn check<C>(backend: &RedisBackend<C>, spec: &LeaseSpec) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "check_semaphore", spec)
}

pub(super) async fn acquire<C>(
    backend: &RedisBackend<C>,
    req: &PermitRequest,
) -> Result<AcquireOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let spec = &*req.acquire.spec;
    precheck(backend, "acquire_permit", spec)?;
    let fenced = spec.fence_key().is_some();
    let mut call = keyed(spec, 3);
    let mut packed = format!("{}:{}", req.ttl().as_millis(), req.permits.get());
    if fenced {
        packed.push(':');
        packed.push_str(&backend.mint_arg(req.acquire.floor));
    }
    call.arg(req.owner().as_str()).arg(packed);
    ViewCall::new(call, &S_ACQUIRE)
        .acquire(backend, |v| acquire_reply(v, req, fenced))
        .await
}

pub(super) async fn renew<C>(
    backend: &RedisBackend<C>,
    req: &RenewRequest,
) -> Result<RenewOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "renew_permit", &req.spec)?;
    ViewCall::renewal(req, &S_RENEW).renew(backend).await
}

/// [`LeaseBackend::renew_permit_many`](lease_core::LeaseBackend::renew_permit_many): on a
/// standalone server, one `permit_renew_many.lua` call per [`RENEW_BATCH_CHUNK`] permits, the
/// calls pipelined on one connection (permits of several semaphores may share a call: on
/// Redis Cluster, where they may live in different slots, each is its own call). A request
/// refused before any round trip is answered alone; the others still leave together.
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
        return renew_permit_each(backend, reqs).await;
    }
    renew_batch(
        backend,
        reqs,
        |spec| precheck(backend, "renew_permit", spec),
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
    precheck(backend, "release_permit", &req.spec)?;
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
    precheck(backend, "permit_remaining", spec)?;
    ViewCall::remaining_of(spec, owner, &S_PTTL)
        .remaining(backend)
        .await
}

pub(super) async fn inspect<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
) -> Result<SemaphoreInfo, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "inspect_semaphore", spec)?;
    let info = ViewCall::new(keyed(spec, 2), &S_INSPECT)
        .read(backend, inspect_reply)
        .await;
    info.map_err(|e| {
        tracing::debug!(semaphore = semaphore_name(spec), error = %e, "lease-redis: permit_inspect reply");
        e
    })
}

#[cfg(test)]
mod tests {
    use super::super::view::assert_pinned;
    use super::*;

    /// The SHA1 of every composed permit script, pinned (as `scripts.rs` pins the others):
    /// a change to the prelude, `semaphore.lua` or a script's own file must be deliberate.
    const PINNED_SHA1: [(&str, &str); 6] = [
        (
            "permit_acquire.lua",
            "4ba61bc782b78bf9721ac1499781e3c75a143d17",
        ),
        (
            "permit_renew.lua",
            "a13b3992594bfbe2efed67ebca3259fb50caba18",
        ),
        (
            "permit_renew_many.lua",
            "1442c146d3f6511d16564ea7768b9a032baba0de",
        ),
        (
            "permit_release.lua",
            "095eac14146b3796ae782067d3c0b230f7795efb",
        ),
        (
            "permit_pttl.lua",
            "318ca245d50bddab7ba16ba8a37fe18ca85cc534",
        ),
        (
            "permit_inspect.lua",
            "ec6e5583483472112cafc510aa9568dd60accf6e",
        ),
    ];

    #[test]
    fn every_permit_script_is_pinned() {
        assert_pinned(&ALL, &PINNED_SHA1);
    }

    #[test]
    fn every_permit_script_is_prelude_helpers_and_its_own_file() {
        let prelude = include_str!("../../scripts/prelude.lua");
        let helpers = include_str!("../../scripts/semaphore.lua");
        for (file, code) in ALL {
            assert!(code.starts_with(prelude), "{file}");
            let own = &code[prelude.len()..];
            assert!(own.starts_with(helpers), "{file}");
            let own = &own[helpers.len()..];
            assert!(
                own.starts_with(&format!("--[[ {file}:")),
                "{file} opens with its comment block"
            );
            assert_eq!(code.matches("local function now_ms").count(), 1, "{file}");
        }
    }

    #[test]
    fn a_mismatch_reply_is_typed() {
        let spec = std::sync::Arc::new(lease_core::semaphore::semaphore_spec("s", None).unwrap());
        let req = PermitRequest::new(
            lease_core::AcquireRequest::new(
                spec,
                Owner::new("o").unwrap(),
                lease_core::Ttl::new(Duration::from_secs(1)).unwrap(),
            ),
            lease_core::semaphore::PermitCount::new(3).unwrap(),
        );
        let v = Value::Array(vec![Value::Int(2), Value::BulkString(b"5".to_vec())]);
        match acquire_reply(&v, &req, true) {
            Err(BackendError::PermitsMismatch {
                name,
                stored: 5,
                asked: 3,
            }) => assert_eq!(name, "s"),
            other => panic!("{other:?}"),
        }
        let garbage = Value::Array(vec![Value::Int(2), Value::BulkString(b"x".to_vec())]);
        assert!(matches!(
            acquire_reply(&garbage, &req, true),
            Err(BackendError::Protocol(_))
        ));
    }
}
