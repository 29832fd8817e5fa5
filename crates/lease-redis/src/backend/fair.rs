//! Fair locks on Redis: the `fair_*.lua` scripts, each composed at compile time from
//! `prelude.lua`, `semaphore.lua` (the server's clock in ms, the fence state, the mint), then
//! `fair.lua` (reading, pruning and settling the queue, waking the head), then the script's
//! own file; and the [`RedisBackend`] side of the fair methods of
//! [`LeaseBackend`](lease_core::LeaseBackend). The rule is `lease_core::fair`'s; the
//! in-memory backend is its executable specification (`tests/fair.rs` compares them on a real
//! server).
//!
//! A child module of `backend.rs` (it uses the backend's connection lanes, replica
//! acknowledgement and notice settings), kept in a file of its own; each operation's call runs
//! through `view.rs`'s `ViewCall`, the shape the three views' backends share.

use std::sync::LazyLock;

use lease_core::backend::{epoch_key_of, mark_key_of};
use lease_core::fair::{FairRequest, check_fair_spec, fair_keys, fair_name, wake_key};
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::{
    AcquireOutcome, BackendError, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest, Token,
    TokenScheme,
};
use redis::aio::ConnectionLike;

use super::RedisBackend;
use super::view::{ViewCall, acquire_reply, int, protocol};
use crate::notify;
use crate::scripts::{Call, LuaScript};

/// A fair script: the prelude, the permit helpers, the fair helpers, then its own file.
macro_rules! fair_script {
    ($file:literal) => {
        concat!(
            include_str!("../../scripts/prelude.lua"),
            include_str!("../../scripts/semaphore.lua"),
            include_str!("../../scripts/fair.lua"),
            include_str!(concat!("../../scripts/", $file)),
        )
    };
}

/// `fair_acquire.lua`: one fair attempt (the lock, or a heartbeat of the owner's place).
pub(crate) const FAIR_ACQUIRE: &str = fair_script!("fair_acquire.lua");
/// `fair_release.lua`: release or leave, and wake the next waiter.
pub(crate) const FAIR_RELEASE: &str = fair_script!("fair_release.lua");

/// Every fair script, by file name.
#[cfg(test)]
pub(crate) const ALL: [(&str, &str); 2] = [
    ("fair_acquire.lua", FAIR_ACQUIRE),
    ("fair_release.lua", FAIR_RELEASE),
];

static S_ACQUIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("fair_acquire", FAIR_ACQUIRE));
static S_RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("fair_release", FAIR_RELEASE));

/// The spec whose keys are all of the fair lock's: the lock, the queue, the places (and the
/// fence keys), for the slot check.
fn all_keys(spec: &LeaseSpec) -> Result<LeaseSpec, BackendError> {
    let name = fair_name(spec);
    let [queue, places] = fair_keys(name);
    LeaseSpec::lock(
        [name.to_owned(), queue, places],
        spec.fence_key().map(str::to_owned),
    )
    .map_err(|e| BackendError::Invalid(e.to_string()))
}

/// The checks every fair operation makes before its round trip: one lock key, and on Redis
/// Cluster every key (queue, places and fence keys too) in one slot.
fn precheck<C>(
    backend: &RedisBackend<C>,
    op: &'static str,
    spec: &LeaseSpec,
) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    check_fair_spec(spec)?;
    backend.precheck(op, &all_keys(spec)?)
}

/// [`LeaseBackend::check_fair`](lease_core::LeaseBackend::check_fair).
pub(super) fn check<C>(backend: &RedisBackend<C>, spec: &LeaseSpec) -> Result<(), BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "check_fair", spec)
}

/// The lock, queue and places keys.
fn keyed(spec: &LeaseSpec) -> Call {
    let name = fair_name(spec);
    let mut call = Call::new();
    call.key(name);
    for k in fair_keys(name) {
        call.key(k);
    }
    call
}

/// The wake channel of `spec`'s waiters without the owner, with its verb (the release
/// scripts' notice argument for the key `<name>:wake:`): `''` when this backend does not
/// publish.
fn notice<C>(backend: &RedisBackend<C>, spec: &LeaseSpec) -> String
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    backend.notice_arg(&wake_key(fair_name(spec), ""))
}

pub(super) async fn acquire<C>(
    backend: &RedisBackend<C>,
    req: &FairRequest,
) -> Result<AcquireOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let spec = &*req.acquire.spec;
    precheck(backend, "acquire_fair", spec)?;
    let fenced = spec.fence_key().is_some();
    let mut call = keyed(spec);
    let (mut scheme, mut floor) = ("", String::new());
    if let Some(fence) = spec.fence_key() {
        call.key(fence)
            .key(mark_key_of(fence))
            .key(epoch_key_of(fence));
        scheme = match backend.scheme {
            TokenScheme::Counter => "counter",
            _ => "clock",
        };
        floor = req.acquire.floor.map_or(0, Token::get).to_string();
    }
    let packed = format!(
        "{}:{}:{scheme}:{floor}:{}",
        req.acquire.ttl.as_millis(),
        req.place_ttl.map_or(0, |p| p.as_millis()),
        notice(backend, spec),
    );
    call.arg(req.owner().stored_value(&req.acquire.metadata))
        .arg(packed);
    ViewCall::new(call, &S_ACQUIRE)
        .acquire(backend, |v| fair_acquire_reply(v, req, fenced))
        .await
}

/// `fair_acquire.lua`'s reply: acquire.lua's shapes, or `{3, max}`: the queue is full.
fn fair_acquire_reply(
    v: &redis::Value,
    req: &FairRequest,
    fenced: bool,
) -> Result<AcquireOutcome, BackendError> {
    const W: &str = "fair_acquire";
    if let redis::Value::Array(a) = v
        && let [flag, max] = a.as_slice()
        && int(W, flag)? == 3
    {
        let limit = usize::try_from(int(W, max)?).map_err(|_| protocol(W, v))?;
        return Err(BackendError::QueueFull {
            name: req.name().to_owned(),
            limit,
        });
    }
    acquire_reply(v, fenced)
}

/// `fair_release.lua` in `mode` (`r` release, `l` leave); whether it answered 1.
async fn release_or_leave<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
    owner: &Owner,
    term: Option<Token>,
    mode: char,
) -> Result<bool, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut call = keyed(spec);
    let term = match (term, spec.fence_key()) {
        (Some(t), Some(fence)) => {
            call.key(fence);
            t.get().to_string()
        }
        _ => String::new(),
    };
    call.arg(owner.as_str())
        .arg(format!("{mode}:{term}:{}", notice(backend, spec)));
    ViewCall::new(call, &S_RELEASE).flag(backend).await
}

pub(super) async fn release<C>(
    backend: &RedisBackend<C>,
    req: &ReleaseRequest,
) -> Result<ReleaseOutcome, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "release_fair", &req.spec)?;
    let released = release_or_leave(backend, &req.spec, &req.owner, req.term_token, 'r').await?;
    Ok(if released {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    })
}

pub(super) async fn leave<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
    owner: &Owner,
) -> Result<bool, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    precheck(backend, "leave_fair", spec)?;
    release_or_leave(backend, spec, owner, None, 'l').await
}

/// [`LeaseBackend::fair_watch`](lease_core::LeaseBackend::fair_watch): the waiter's own
/// channel, on the backend's notices.
pub(super) fn watch<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
    owner: &Owner,
    role: WatchRole,
) -> Option<ReleaseWatch>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let notices = backend.notices.as_ref()?;
    let key = wake_key(fair_name(spec), owner.as_str());
    Some(notices.watch(&notify::notice_channel(&key, backend.topology), role))
}

#[cfg(test)]
mod tests {
    use super::super::view::assert_pinned;
    use super::*;

    /// The SHA1 of every composed fair script, pinned (as `scripts.rs` pins the others).
    const PINNED_SHA1: [(&str, &str); 2] = [
        (
            "fair_acquire.lua",
            "4e88f8b040f30fa2137d10ee401c79eeb6e6c57a",
        ),
        (
            "fair_release.lua",
            "e39431d11891a311f057cacfb6d38b749e2513f0",
        ),
    ];

    #[test]
    fn every_fair_script_is_pinned() {
        assert_pinned(&ALL, &PINNED_SHA1);
    }

    #[test]
    fn every_fair_script_is_prelude_helpers_and_its_own_file() {
        let prelude = include_str!("../../scripts/prelude.lua");
        let helpers = include_str!("../../scripts/semaphore.lua");
        let fair = include_str!("../../scripts/fair.lua");
        for (file, code) in ALL {
            let own = code
                .strip_prefix(prelude)
                .and_then(|c| c.strip_prefix(helpers))
                .and_then(|c| c.strip_prefix(fair))
                .unwrap_or_else(|| panic!("{file}: not composed as expected"));
            assert!(
                own.starts_with(&format!("--[[ {file}:")),
                "{file} opens with its comment block"
            );
        }
    }
}
