//! The fair lock's inspect on Redis: `fair_inspect.lua`, composed at compile time as the fair
//! scripts are (`prelude.lua`, `semaphore.lua`, `fair.lua`, then its own file), and the
//! [`RedisBackend`] side of [`LeaseBackend::inspect_fair`](lease_core::LeaseBackend::inspect_fair).
//! One read-only script, judged by the server's clock (a lapsed place is not shown); the
//! in-memory backend is its executable specification (`tests/fair.rs` compares them on a real
//! server).
//!
//! A child module of `backend.rs`, in a file of its own beside `fair.rs` (whose scripts write).

use std::sync::LazyLock;
use std::time::Duration;

use lease_core::backend::mark_key_of;
use lease_core::fair::{FairInfo, fair_keys, fair_name};
use lease_core::semaphore::PermitHolder;
use lease_core::{BackendError, FenceMark, LeaseSpec};
use redis::Value;
use redis::aio::ConnectionLike;

use super::RedisBackend;
use super::view::{int, millis, protocol, text, token_reply};
use crate::scripts::{Call, LuaScript};

/// `fair_inspect.lua`: the holder, the live waiters in queue order, the counter and the mark.
pub(crate) const FAIR_INSPECT: &str = concat!(
    include_str!("../../scripts/prelude.lua"),
    include_str!("../../scripts/semaphore.lua"),
    include_str!("../../scripts/fair.lua"),
    include_str!("../../scripts/fair_inspect.lua"),
);

static S_FAIR_INSPECT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new("fair_inspect", FAIR_INSPECT));

/// The lock, queue and places keys, then the fence counter and mark when fenced.
fn fair_keyed(spec: &LeaseSpec) -> Call {
    let name = fair_name(spec);
    let mut keys = vec![name.to_owned()];
    keys.extend(fair_keys(name));
    if let Some(fence) = spec.fence_key() {
        keys.push(fence.to_owned());
        keys.push(mark_key_of(fence));
    }
    let mut call = Call::new();
    for k in &keys {
        call.key(k);
    }
    call
}

fn fair_reply(v: &Value) -> Result<FairInfo, BackendError> {
    const W: &str = "fair_inspect";
    let Value::Array(a) = v else {
        return Err(protocol(W, v));
    };
    let [holder, holder_ms, waiters, counter, mark, waiting] = a.as_slice() else {
        return Err(protocol(W, v));
    };
    let mut info = FairInfo::default();
    let holder = text(W, holder)?;
    if !holder.is_empty() {
        // -1: a lock key without expiry (never a fair hold's).
        let remaining = match int(W, holder_ms)? {
            -1 => Duration::MAX,
            _ => millis(W, holder_ms)?,
        };
        info.holder = Some(PermitHolder::new(holder, remaining));
    }
    let Value::Array(waiters) = waiters else {
        return Err(protocol(W, waiters));
    };
    for pair in waiters.chunks(2) {
        let [owner, ms] = pair else {
            return Err(protocol(W, v));
        };
        info.waiters
            .push(PermitHolder::new(text(W, owner)?, millis(W, ms)?));
    }
    info.counter = token_reply(W, counter)?;
    info.mark = token_reply(W, mark)?.map_or(FenceMark::NONE, FenceMark::at);
    info.waiting = usize::try_from(int(W, waiting)?).map_err(|_| protocol(W, waiting))?;
    Ok(info)
}

/// [`LeaseBackend::inspect_fair`](lease_core::LeaseBackend::inspect_fair): refused before any
/// round trip unless the spec is a fair lock's, and on Redis Cluster unless all its keys share
/// one slot (as every fair operation).
pub(super) async fn inspect_fair<C>(
    backend: &RedisBackend<C>,
    spec: &LeaseSpec,
) -> Result<FairInfo, BackendError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    // The fair operations' own check: a fair lock's spec, every key in one Cluster slot.
    super::fair::check(backend, spec)?;
    let call = fair_keyed(spec);
    let mut conn = backend.conn.clone();
    let v = call.run(&mut conn, &S_FAIR_INSPECT).await?;
    fair_reply(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fair_inspect_script_is_pinned_and_composed() {
        let hash = redis::Script::new(FAIR_INSPECT).get_hash().to_owned();
        assert_eq!(
            hash, "bc3b37bd5b12ae7422c5803d3b90638ff5504708",
            "fair_inspect.lua: re-pin deliberately"
        );
        let own = FAIR_INSPECT
            .strip_prefix(include_str!("../../scripts/prelude.lua"))
            .and_then(|c| c.strip_prefix(include_str!("../../scripts/semaphore.lua")))
            .and_then(|c| c.strip_prefix(include_str!("../../scripts/fair.lua")))
            .expect("composed as the fair scripts are");
        assert!(own.starts_with("--[[ fair_inspect.lua:"));
    }

    #[test]
    fn a_fair_inspect_reply_is_typed() {
        let s = |x: &str| Value::BulkString(x.as_bytes().to_vec());
        let v = Value::Array(vec![
            s("h"),
            Value::Int(900),
            Value::Array(vec![s("w1"), Value::Int(5), s("w2"), Value::Int(9)]),
            s("3"),
            s("2"),
            Value::Int(2),
        ]);
        let info = fair_reply(&v).expect("a reply");
        let holder = info.holder.expect("a holder");
        assert_eq!(holder.owner, "h");
        assert_eq!(holder.remaining, Duration::from_millis(900));
        let order: Vec<&str> = info.waiters.iter().map(|w| w.owner.as_str()).collect();
        assert_eq!(order, ["w1", "w2"]);
        assert_eq!(info.counter.map(|t| t.get()), Some(3));
        assert_eq!(info.waiting, 2);
        let free = Value::Array(vec![
            s(""),
            Value::Int(-2),
            Value::Array(vec![]),
            s("0"),
            s("0"),
            Value::Int(0),
        ]);
        let info = fair_reply(&free).expect("a reply");
        assert_eq!((info.holder, info.waiters.len()), (None, 0));
        let garbage = Value::Array(vec![s("w"), Value::Int(-5)]);
        assert!(matches!(
            fair_reply(&garbage),
            Err(BackendError::Protocol(_))
        ));
        let odd = Value::Array(vec![
            s(""),
            Value::Int(-2),
            Value::Array(vec![s("w1")]),
            s("0"),
            s("0"),
            Value::Int(1),
        ]);
        assert!(matches!(fair_reply(&odd), Err(BackendError::Protocol(_))));
    }
}
