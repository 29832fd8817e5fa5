//! Parsing of script replies. A server controls them: nothing here panics, every unexpected
//! shape is a [`BackendError::Protocol`].

use std::time::Duration;

use lease_core::backend::split_stored;
use lease_core::{
    AcquireOutcome, BackendError, Epoch, FenceMark, FenceOutcome, FenceState, ForceReleaseOutcome,
    HandOffOutcome, LeaseInfo, ReleaseOutcome, RenewOutcome, Token,
};
use redis::Value;

fn protocol(what: &str, v: &Value) -> BackendError {
    BackendError::Protocol(format!("{what}: unexpected reply {v:?}"))
}

fn int(what: &str, v: &Value) -> Result<i64, BackendError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(protocol(what, other)),
    }
}

fn bytes<'a>(what: &str, v: &'a Value) -> Result<&'a [u8], BackendError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(protocol(what, other)),
    }
}

fn array<'a>(what: &str, v: &'a Value) -> Result<&'a [Value], BackendError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(protocol(what, other)),
    }
}

fn flag(what: &str, v: &Value) -> Result<bool, BackendError> {
    match int(what, v)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(protocol(what, v)),
    }
}

/// A PTTL reply as a remaining TTL: `-1` (no expiry) is [`Duration::MAX`], as the in-memory
/// backend reports it; `-2` (no key) is `None`.
fn pttl(what: &str, v: &Value) -> Result<Option<Duration>, BackendError> {
    match int(what, v)? {
        -2 => Ok(None),
        -1 => Ok(Some(Duration::MAX)),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms.unsigned_abs()))),
        _ => Err(protocol(what, v)),
    }
}

/// A stored integer (counter or mark), by the rule the scripts and the in-memory backend share:
/// Rust's `u64` parser. Garbage is the server-side "not an integer" error, as in memory.
pub(crate) fn stored_int(raw: &[u8]) -> Result<u64, BackendError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| BackendError::Refused("ERR value is not an integer or out of range".into()))
}

/// A mark as the scripts return it (canonical decimal text); above 2^53 saturates at
/// [`Token::MAX`] (the mark refuses every token anyway), `0` is no mark.
fn mark_text(what: &str, v: &Value) -> Result<FenceMark, BackendError> {
    let raw = bytes(what, v)?;
    let n = std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| protocol(what, v))?;
    Ok(match Token::new(n) {
        Ok(t) => FenceMark::at(t),
        Err(_) if n == 0 => FenceMark::NONE,
        Err(_) => FenceMark::at(Token::MAX),
    })
}

/// An integer the scripts return as canonical decimal text ('0': none) as a token.
fn token_text(what: &str, v: &Value) -> Result<Option<Token>, BackendError> {
    let raw = bytes(what, v)?;
    let n = std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| protocol(what, v))?;
    if n == 0 {
        return Ok(None);
    }
    Token::new(n)
        .map(Some)
        .map_err(|e| BackendError::Protocol(format!("{what}: {e}")))
}

/// A fence epoch as the scripts return it: decimal text, '' when absent.
fn epoch_text(what: &str, v: &Value) -> Result<Option<Epoch>, BackendError> {
    let raw = bytes(what, v)?;
    if raw.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|e| Some(Epoch::new(e)))
        .ok_or_else(|| protocol(what, v))
}

pub(crate) fn acquire(v: &Value, fenced: bool) -> Result<AcquireOutcome, BackendError> {
    const W: &str = "acquire";
    let a = array(W, v)?;
    match a {
        [ok, token, before, epoch] if flag(W, ok)? => {
            let token = token_text(W, token)?;
            if fenced != token.is_some() {
                return Err(protocol(W, v));
            }
            Ok(AcquireOutcome::Acquired {
                token,
                fence: FenceState::new(token_text(W, before)?, epoch_text(W, epoch)?),
            })
        }
        [ok, holder, ttl, counter, epoch] if !flag(W, ok)? => Ok(AcquireOutcome::Held {
            // '' is no owner (owners are never empty): held by a read-write lock's readers.
            holder: Some(String::from_utf8_lossy(bytes(W, holder)?).into_owned())
                .filter(|h| !h.is_empty()),
            remaining: pttl(W, ttl)?,
            fence: FenceState::new(token_text(W, counter)?, epoch_text(W, epoch)?),
        }),
        _ => Err(protocol(W, v)),
    }
}

pub(crate) fn renew(v: &Value) -> Result<RenewOutcome, BackendError> {
    Ok(if flag("renew", v)? {
        RenewOutcome::Renewed
    } else {
        RenewOutcome::NotHeld
    })
}

/// A `renew_many.lua` reply for `n` leases: one outcome each (`-1`: that lease's key has the
/// wrong type, refused as `renew.lua` would refuse it).
pub(crate) fn renew_many(
    v: &Value,
    n: usize,
) -> Result<Vec<Result<RenewOutcome, BackendError>>, BackendError> {
    let items = array("renew_many", v)?;
    if items.len() != n {
        return Err(protocol("renew_many", v));
    }
    items
        .iter()
        .map(|item| {
            Ok(match int("renew_many", item)? {
                1 => Ok(RenewOutcome::Renewed),
                0 => Ok(RenewOutcome::NotHeld),
                -1 => Err(BackendError::Refused(
                    "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
                )),
                _ => return Err(protocol("renew_many", item)),
            })
        })
        .collect()
}

pub(crate) fn release(v: &Value) -> Result<ReleaseOutcome, BackendError> {
    Ok(if flag("release", v)? {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    })
}

/// `release_one.lua` with a hand-off's arguments: 2 handed off, 1 released, 0 not ours.
pub(crate) fn hand_off(v: &Value) -> Result<HandOffOutcome, BackendError> {
    match v {
        Value::Int(2) => Ok(HandOffOutcome::HandedOff),
        Value::Int(1) => Ok(HandOffOutcome::Released),
        Value::Int(0) => Ok(HandOffOutcome::NotHeld),
        _ => Err(protocol("hand_off", v)),
    }
}

pub(crate) fn raise(v: &Value) -> Result<bool, BackendError> {
    flag("raise", v)
}

pub(crate) fn remaining(v: &Value) -> Result<Option<Duration>, BackendError> {
    const W: &str = "pttl";
    match array(W, v)? {
        [ok] if !flag(W, ok)? => Ok(None),
        [ok, ms] if flag(W, ok)? => match int(W, ms)? {
            -1 => Ok(Some(Duration::MAX)),
            ms if ms >= 0 => Ok(Some(Duration::from_millis(ms.unsigned_abs()))),
            _ => Err(protocol(W, v)),
        },
        _ => Err(protocol(W, v)),
    }
}

/// `force_release.lua`'s `{held, holder, token}`.
pub(crate) fn force_release(v: &Value, fenced: bool) -> Result<ForceReleaseOutcome, BackendError> {
    const W: &str = "force release";
    let [held, holder, token] = array(W, v)? else {
        return Err(protocol(W, v));
    };
    let fence = token_text(W, token)?;
    if fenced != fence.is_some() {
        return Err(protocol(W, v));
    }
    Ok(if flag(W, held)? {
        ForceReleaseOutcome::Released {
            holder: String::from_utf8_lossy(bytes(W, holder)?).into_owned(),
            fence,
        }
    } else {
        ForceReleaseOutcome::NotHeld { fence }
    })
}

pub(crate) fn inspect(v: &Value, fenced: bool) -> Result<LeaseInfo, BackendError> {
    const W: &str = "inspect";
    let [
        has_value,
        value,
        ttl,
        has_counter,
        counter,
        has_mark,
        mark,
        epoch,
    ] = array(W, v)?
    else {
        return Err(protocol(W, v));
    };
    let mut info = LeaseInfo::default();
    if flag(W, has_value)? {
        let stored = String::from_utf8_lossy(bytes(W, value)?).into_owned();
        let (owner, meta) = split_stored(&stored);
        info.holder = Some(owner.to_owned());
        info.metadata = Some(meta.to_owned());
        info.remaining = pttl(W, ttl)?;
    }
    if fenced {
        let c = if flag(W, has_counter)? {
            stored_int(bytes(W, counter)?)?
        } else {
            0
        };
        let m = if flag(W, has_mark)? {
            stored_int(bytes(W, mark)?)?
        } else {
            0
        };
        info.counter = Token::new(c).ok();
        info.mark = Token::new(m).map(FenceMark::at).unwrap_or(FenceMark::NONE);
        info.epoch = epoch_text(W, epoch)?;
    }
    Ok(info)
}

pub(crate) fn fence(v: &Value) -> Result<FenceOutcome, BackendError> {
    const W: &str = "fenced write";
    match v {
        Value::Int(1) => Ok(FenceOutcome::Applied),
        Value::Array(a) => match a.as_slice() {
            [ok, mark] if !flag(W, ok)? => Ok(FenceOutcome::Stale {
                mark: mark_text(W, mark)?,
            }),
            _ => Err(protocol(W, v)),
        },
        other => Err(protocol(W, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }
    fn arr(v: Vec<Value>) -> Value {
        Value::Array(v)
    }

    #[test]
    fn acquire_replies() {
        let t = |v| Token::new(v).ok();
        let got = acquire(&arr(vec![Value::Int(1), b("42"), b("41"), b("7")]), true).unwrap();
        assert_eq!(
            got,
            AcquireOutcome::Acquired {
                token: t(42),
                fence: FenceState::new(t(41), Some(Epoch::new(7))),
            }
        );
        let got = acquire(&arr(vec![Value::Int(1), b("0"), b("0"), b("")]), false).unwrap();
        assert_eq!(
            got,
            AcquireOutcome::Acquired {
                token: None,
                fence: FenceState::UNKNOWN
            }
        );
        let held = vec![Value::Int(0), b("bob"), Value::Int(1500), b("9"), b("7")];
        assert_eq!(
            acquire(&arr(held), true).unwrap(),
            AcquireOutcome::Held {
                holder: Some("bob".into()),
                remaining: Some(Duration::from_millis(1500)),
                fence: FenceState::new(t(9), Some(Epoch::new(7))),
            }
        );
        let held = vec![Value::Int(0), b("bob"), Value::Int(-1), b("0"), b("")];
        let got = acquire(&arr(held), true).unwrap();
        assert!(
            matches!(got, AcquireOutcome::Held { remaining: Some(d), fence, .. } if d == Duration::MAX && fence == FenceState::UNKNOWN)
        );
        let max = vec![Value::Int(1), b("9007199254740992"), b("5"), b("1")];
        assert!(matches!(
            acquire(&arr(max), true).unwrap(),
            AcquireOutcome::Acquired {
                token: Some(Token::MAX),
                ..
            }
        ));
    }

    #[test]
    fn malformed_acquire_replies_are_protocol_errors() {
        let ok = |token: &str| arr(vec![Value::Int(1), b(token), b("0"), b("")]);
        for v in [
            Value::Nil,
            Value::Int(1),
            arr(vec![]),
            arr(vec![Value::Int(1)]),
            arr(vec![Value::Int(1), b("1")]), // the old two-element shape
            arr(vec![Value::Int(2), b("1"), b("0"), b("")]),
            ok("0"),                                                // fenced but token 0
            ok("1e15"),                                             // float formatting
            ok("9007199254740993"),                                 // above 2^53
            arr(vec![Value::Int(1), Value::Int(5), b("0"), b("")]), // token must be text
            arr(vec![Value::Int(1), b("5"), b("x"), b("")]),
            arr(vec![Value::Int(1), b("5"), b("4"), b("-1")]),
            arr(vec![Value::Int(0), b("x")]),
            arr(vec![Value::Int(0), b("x"), Value::Int(5)]), // the old three-element shape
            arr(vec![Value::Int(0), b("x"), Value::Int(-7), b("0"), b("")]),
            arr(vec![
                Value::Int(0),
                Value::Nil,
                Value::Int(5),
                b("0"),
                b(""),
            ]),
        ] {
            assert!(
                matches!(acquire(&v, true), Err(BackendError::Protocol(_))),
                "{v:?}"
            );
        }
        assert!(matches!(
            acquire(&ok("3"), false),
            Err(BackendError::Protocol(_))
        ));
    }

    #[test]
    fn flags() {
        assert_eq!(renew(&Value::Int(1)).unwrap(), RenewOutcome::Renewed);
        assert_eq!(renew(&Value::Int(0)).unwrap(), RenewOutcome::NotHeld);
        assert!(renew(&Value::Int(2)).is_err());
        assert!(renew(&Value::Nil).is_err());
        assert_eq!(release(&Value::Int(1)).unwrap(), ReleaseOutcome::Released);
        assert!(release(&b("1")).is_err());
        assert!(raise(&Value::Int(1)).unwrap());
    }

    #[test]
    fn remaining_replies() {
        assert_eq!(remaining(&arr(vec![Value::Int(0)])).unwrap(), None);
        assert_eq!(
            remaining(&arr(vec![Value::Int(1), Value::Int(250)])).unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            remaining(&arr(vec![Value::Int(1), Value::Int(-1)])).unwrap(),
            Some(Duration::MAX)
        );
        assert!(remaining(&arr(vec![Value::Int(1), Value::Int(-2)])).is_err());
        assert!(remaining(&arr(vec![Value::Int(1)])).is_err());
    }

    #[test]
    fn inspect_replies() {
        let v = arr(vec![
            Value::Int(1),
            b("a\0meta"),
            Value::Int(900),
            Value::Int(1),
            b("7"),
            Value::Int(1),
            b("7"),
            b("1764590400000000"),
        ]);
        let info = inspect(&v, true).unwrap();
        assert_eq!(info.epoch, Some(Epoch::new(1_764_590_400_000_000)));
        assert_eq!(info.holder.as_deref(), Some("a"));
        assert_eq!(info.metadata.as_deref(), Some("meta"));
        assert_eq!(info.remaining, Some(Duration::from_millis(900)));
        assert_eq!(info.counter, Some(Token::new(7).unwrap()));
        assert_eq!(info.mark, FenceMark::at(Token::new(7).unwrap()));
        let empty = arr(vec![
            Value::Int(0),
            b(""),
            Value::Int(-2),
            Value::Int(0),
            b(""),
            Value::Int(0),
            b(""),
            b(""),
        ]);
        assert_eq!(inspect(&empty, true).unwrap(), LeaseInfo::default());
        let garbage = arr(vec![
            Value::Int(0),
            b(""),
            Value::Int(-2),
            Value::Int(1),
            b("x"),
            Value::Int(0),
            b(""),
            b(""),
        ]);
        assert!(matches!(
            inspect(&garbage, true),
            Err(BackendError::Refused(_))
        ));
        assert!(matches!(
            inspect(&arr(vec![]), true),
            Err(BackendError::Protocol(_))
        ));
    }

    #[test]
    fn fence_replies() {
        assert_eq!(fence(&Value::Int(1)).unwrap(), FenceOutcome::Applied);
        assert_eq!(
            fence(&arr(vec![Value::Int(0), b("12")])).unwrap(),
            FenceOutcome::Stale {
                mark: FenceMark::at(Token::new(12).unwrap())
            }
        );
        assert_eq!(
            fence(&arr(vec![Value::Int(0), b("0")])).unwrap(),
            FenceOutcome::Stale {
                mark: FenceMark::NONE
            }
        );
        assert_eq!(
            fence(&arr(vec![Value::Int(0), b("18446744073709551615")])).unwrap(),
            FenceOutcome::Stale {
                mark: FenceMark::at(Token::MAX)
            }
        );
        for v in [
            Value::Int(0),
            Value::Int(2),
            arr(vec![Value::Int(1), b("3")]),
            arr(vec![Value::Int(0), b("x")]),
            Value::Nil,
        ] {
            assert!(matches!(fence(&v), Err(BackendError::Protocol(_))), "{v:?}");
        }
    }
}
