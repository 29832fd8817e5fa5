//! Permit-fenced writes: [`RedisPermitFencer`], the resource-side rule of a semaphore's "at
//! most N" (stated in `lease_core::semaphore`, "Fenced writes"; the in-memory backend's
//! `MemoryPermitFencer` is its executable specification).
//!
//! Each write is one of the fence scripts (`fence_set.lua`, `fence_hset.lua`, `fence_del.lua`,
//! `fence_multi.lua`, `fence_eval.lua`) composed as `prelude.lua` + `semaphore.lua` (the
//! server's clock in ms) + `permit_guard.lua` (the owner's permit must be current) +
//! `fence_guard.lua` (the token against the owner's mark) + the write + `permit_advance.lua`
//! (the owner's mark set to the token, expiring with the permits key).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};

use lease_core::semaphore::{PermitFencing, PermitWriteOutcome, permit_mark_key, permits_key};
use lease_core::{BackendError, Fencing, LeaseSpec, Owner, Token};
use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, ToSingleRedisArg, Value};

use super::{FencedWrite, RedisFencer, WriteKind};
use crate::RedisBackend;
use crate::error::RedisLeaseError;
use crate::reply;
use crate::scripts::LuaScript;

/// A permit-fenced write: the prelude, the permit helpers, the permit guard, the fence guard,
/// the write, the permit advance.
macro_rules! permit_fence_script {
    ($file:literal) => {
        concat!(
            include_str!("../../scripts/prelude.lua"),
            include_str!("../../scripts/semaphore.lua"),
            include_str!("../../scripts/permit_guard.lua"),
            include_str!("../../scripts/fence_guard.lua"),
            include_str!(concat!("../../scripts/", $file)),
            include_str!("../../scripts/permit_advance.lua"),
        )
    };
}

const PERMIT_FENCE_SET: &str = permit_fence_script!("fence_set.lua");
const PERMIT_FENCE_HSET: &str = permit_fence_script!("fence_hset.lua");
const PERMIT_FENCE_DEL: &str = permit_fence_script!("fence_del.lua");
const PERMIT_FENCE_EVAL: &str = permit_fence_script!("fence_eval.lua");
const PERMIT_FENCE_MULTI: &str = permit_fence_script!("fence_multi.lua");

static S_SET: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_fence_set", PERMIT_FENCE_SET));
static S_HSET: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_fence_hset", PERMIT_FENCE_HSET));
static S_DEL: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_fence_del", PERMIT_FENCE_DEL));
static S_EVAL: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_fence_eval", PERMIT_FENCE_EVAL));
static S_MULTI: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("permit_fence_multi", PERMIT_FENCE_MULTI));

/// The permit variant of the fenced script of `kind`.
pub(super) fn script(kind: WriteKind) -> &'static LuaScript {
    match kind {
        WriteKind::Set => &S_SET,
        WriteKind::HSet => &S_HSET,
        WriteKind::Del => &S_DEL,
        WriteKind::Eval => &S_EVAL,
        WriteKind::Multi => &S_MULTI,
    }
}

/// What the permit guard checks: the semaphore's permits key and the permit's owner.
#[derive(Clone, Debug)]
pub(super) struct PermitGuard {
    permits_key: Arc<str>,
    owner: Arc<str>,
}

impl PermitGuard {
    pub(super) fn permits_key(&self) -> &str {
        &self.permits_key
    }
    pub(super) fn owner(&self) -> &str {
        &self.owner
    }
}

/// A permit-fenced write's reply: the fence's (`1` applied, `{0, mark}` stale), or `{2}`: the
/// permit is not current.
fn outcome(v: &Value) -> Result<PermitWriteOutcome, BackendError> {
    if let Value::Array(a) = v
        && let [Value::Int(2)] = a.as_slice()
    {
        return Ok(PermitWriteOutcome::NotCurrent);
    }
    Ok(match reply::fence(v)? {
        lease_core::FenceOutcome::Applied => PermitWriteOutcome::Applied,
        lease_core::FenceOutcome::Stale { mark } => PermitWriteOutcome::Stale { mark },
    })
}

/// Writes under one permit of a semaphore, each applied only while the permit is current (its
/// owner in `<name>:permits` with an expiry above the server's `TIME`) and its token not below
/// the owner's mark (`<mark key>:<owner>`), checked atomically with the write in one script:
/// the resource never accepts writes from more than `N` permits at one instant of the
/// server's clock. See `lease_core::semaphore`, "Fenced writes".
///
/// Made by [`PermitFencing::permit_fencer`] on a [`RedisBackend`] (a permit's
/// `permit_fencer()` in `lease-tokio`). It shares the backend's connection, write timeout and
/// replica acknowledgement, like [`RedisFencer`]. On Redis Cluster every target key must be in
/// the semaphore's slot (give the name a hash tag, `{deploys}`); another is refused with
/// [`RedisLeaseError::Slot`] before any round trip.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lease_core::semaphore::{PermitCount, PermitFencing, PermitRequest, PermitWriteOutcome, semaphore_spec};
/// use lease_core::{AcquireOutcome, AcquireRequest, LeaseBackend, Owner, Ttl};
/// use lease_redis::RedisBackend;
///
/// let conn = redis::Client::open("redis://127.0.0.1/")?.get_multiplexed_async_connection().await?;
/// let backend = RedisBackend::new(conn);
/// let spec = Arc::new(semaphore_spec("{deploys}", None)?);
/// let owner = Owner::new("worker-1")?;
/// let ask = AcquireRequest::new(Arc::clone(&spec), owner.clone(), Ttl::new(Duration::from_secs(30))?);
/// let req = PermitRequest::new(ask, PermitCount::new(3)?);
/// if let AcquireOutcome::Acquired { token: Some(token), .. } = backend.acquire_permit(&req).await? {
///     // (lease-tokio's `Permit::permit_fencer()` makes this fencer for a held permit.)
///     let fencer = backend.permit_fencer(&spec, &owner, token).expect("a fenced semaphore");
///     match fencer.set("{deploys}:slot:eu", "v42").await? {
///         PermitWriteOutcome::Applied => {}
///         refused => eprintln!("not written: {refused:?}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisPermitFencer<C> {
    fencer: RedisFencer<C>,
    guard: PermitGuard,
}

impl<C> fmt::Debug for RedisPermitFencer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPermitFencer")
            .field("fencer", &self.fencer)
            .field("permits_key", &self.guard.permits_key)
            .field("owner", &self.guard.owner)
            .finish()
    }
}

impl<C> RedisPermitFencer<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Writes of `owner`'s permit of semaphore `spec` under `token`, through `fencer`'s
    /// connection, timeout and acknowledgement (its mark key and token are replaced by the
    /// owner's mark and `token`). `None` when `spec` is not a fenced semaphore's.
    pub fn new(
        fencer: &RedisFencer<C>,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<RedisPermitFencer<C>> {
        let permits = permits_key(spec).ok()?;
        let mark = permit_mark_key(spec, owner)?;
        let mut fencer = fencer.with_token(token);
        fencer.mark_key = mark.into();
        Some(RedisPermitFencer {
            fencer,
            guard: PermitGuard {
                permits_key: permits.into(),
                owner: owner.as_str().into(),
            },
        })
    }

    /// The token this fencer writes under.
    pub fn token(&self) -> Token {
        self.fencer.token()
    }

    /// The owner's mark key (`<mark key>:<owner>`).
    pub fn mark_key(&self) -> &str {
        self.fencer.mark_key()
    }

    /// The semaphore's permits key.
    pub fn permits_key(&self) -> &str {
        self.guard.permits_key()
    }

    /// The permit's owner.
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }

    /// The same fencer under another token (same permit).
    pub fn with_token(&self, token: Token) -> RedisPermitFencer<C> {
        RedisPermitFencer {
            fencer: self.fencer.with_token(token),
            guard: self.guard.clone(),
        }
    }

    /// Permit-fenced `SET key value`.
    pub fn set(
        &self,
        key: impl Into<String>,
        value: impl ToSingleRedisArg,
    ) -> impl Future<Output = Result<PermitWriteOutcome, RedisLeaseError>> + Send + '_ {
        self.apply_all(vec![FencedWrite::set(key, value)])
    }

    /// Permit-fenced `HSET key field value`.
    pub fn hset(
        &self,
        key: impl Into<String>,
        field: impl ToSingleRedisArg,
        value: impl ToSingleRedisArg,
    ) -> impl Future<Output = Result<PermitWriteOutcome, RedisLeaseError>> + Send + '_ {
        self.apply_all(vec![FencedWrite::hset(key, field, value)])
    }

    /// Permit-fenced `DEL keys...`.
    pub fn del<I, S>(
        &self,
        keys: I,
    ) -> impl Future<Output = Result<PermitWriteOutcome, RedisLeaseError>> + Send + '_
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.apply_all(vec![FencedWrite::del(keys)])
    }

    /// Runs a Lua `body` under the permit's fence ([`FencedWrite::Eval`]'s rules: the body's
    /// keys start at `KEYS[2]`, its arguments at `ARGV[2]`).
    pub fn eval<K, S, A>(
        &self,
        body: impl Into<String>,
        keys: K,
        args: A,
    ) -> impl Future<Output = Result<PermitWriteOutcome, RedisLeaseError>> + Send + '_
    where
        K: IntoIterator<Item = S>,
        S: Into<String>,
        A: IntoIterator,
        A::Item: ToRedisArgs,
    {
        self.apply_all(vec![FencedWrite::eval(body, keys, args)])
    }

    /// Applies several writes under one check, all or nothing (as
    /// [`RedisFencer::apply_all`]).
    pub async fn apply_all(
        &self,
        writes: Vec<FencedWrite>,
    ) -> Result<PermitWriteOutcome, RedisLeaseError> {
        let result = self
            .fencer
            .send(
                self.fencer.token(),
                writes,
                Some(&self.guard),
                outcome,
                PermitWriteOutcome::is_applied,
            )
            .await;
        #[cfg(feature = "metrics")]
        super::telemetry::count_permit(self.fencer.mark_key(), &result);
        result
    }
}

impl<C> PermitFencing for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type PermitFencer = RedisPermitFencer<C>;
    fn permit_fencer(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
        token: Token,
    ) -> Option<RedisPermitFencer<C>> {
        let mark = permit_mark_key(spec, owner)?;
        RedisPermitFencer::new(&self.fencer(&mark, token), spec, owner, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::FenceMark;

    const PRELUDE: &str = include_str!("../../scripts/prelude.lua");
    const HELPERS: &str = include_str!("../../scripts/semaphore.lua");
    const GUARD: &str = include_str!("../../scripts/permit_guard.lua");
    const ADVANCE: &str = include_str!("../../scripts/permit_advance.lua");

    const ALL: [(&str, &str, &str); 5] = [
        (
            "fence_set.lua",
            PERMIT_FENCE_SET,
            include_str!("../../scripts/fence_set.lua"),
        ),
        (
            "fence_hset.lua",
            PERMIT_FENCE_HSET,
            include_str!("../../scripts/fence_hset.lua"),
        ),
        (
            "fence_del.lua",
            PERMIT_FENCE_DEL,
            include_str!("../../scripts/fence_del.lua"),
        ),
        (
            "fence_eval.lua",
            PERMIT_FENCE_EVAL,
            include_str!("../../scripts/fence_eval.lua"),
        ),
        (
            "fence_multi.lua",
            PERMIT_FENCE_MULTI,
            include_str!("../../scripts/fence_multi.lua"),
        ),
    ];

    #[test]
    fn every_permit_fenced_write_is_composed_in_order() {
        for (file, code, own) in ALL {
            let expected = [
                PRELUDE,
                HELPERS,
                GUARD,
                crate::scripts::FENCE_GUARD,
                own,
                ADVANCE,
            ]
            .concat();
            assert_eq!(code, expected, "{file}");
            assert_eq!(code.matches("local function less(").count(), 1, "{file}");
        }
        for (file, part) in [("permit_guard.lua", GUARD), ("permit_advance.lua", ADVANCE)] {
            assert!(part.starts_with(&format!("--[[ {file}:")), "{file}");
            assert!(part.ends_with('\n'), "{file}");
        }
    }

    #[test]
    fn permit_write_replies() {
        assert_eq!(
            outcome(&Value::Int(1)).unwrap(),
            PermitWriteOutcome::Applied
        );
        assert_eq!(
            outcome(&Value::Array(vec![Value::Int(2)])).unwrap(),
            PermitWriteOutcome::NotCurrent
        );
        assert_eq!(
            outcome(&Value::Array(vec![
                Value::Int(0),
                Value::BulkString(b"9".to_vec())
            ]))
            .unwrap(),
            PermitWriteOutcome::Stale {
                mark: FenceMark::at(Token::new(9).unwrap())
            }
        );
        for v in [
            Value::Int(2),
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![]),
            Value::Nil,
        ] {
            assert!(
                matches!(outcome(&v), Err(BackendError::Protocol(_))),
                "{v:?}"
            );
        }
    }
}
