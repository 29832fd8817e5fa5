//! What a fenced write writes: [`FencedWrite`], the targets of one fenced script call.

use redis::{ToRedisArgs, ToSingleRedisArg};

fn single(v: impl ToSingleRedisArg) -> Vec<u8> {
    v.to_redis_args().concat()
}

/// A write a [`RedisFencer`](crate::RedisFencer) applies under the fence.
///
/// ```
/// use lease_redis::FencedWrite;
/// let w = FencedWrite::hset("{jobs}:state", "phase", 3);
/// assert_eq!(w.keys(), ["{jobs}:state"]);
/// let e = FencedWrite::eval("redis.call('INCR', KEYS[2])", ["{jobs}:n"], Vec::<String>::new());
/// assert_eq!(e.keys(), ["{jobs}:n"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// `SET key value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// `HSET key field value`. Fails with `WRONGTYPE` (mark unmoved) when `key` is not a hash.
    HSet {
        /// The hash key.
        key: String,
        /// The field.
        field: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// `DEL keys...` (an empty list only advances the mark).
    Del {
        /// The keys.
        keys: Vec<String>,
    },
    /// A Lua body run between the guard and the mark advance. `KEYS[1]` and `ARGV[1]` are the
    /// fence's (mark key, token): the body's keys start at `KEYS[2]`, its arguments at
    /// `ARGV[2]`. The body is sent as an argument of one fixed script and compiled on the
    /// server as a chunk of its own (see `scripts/fence_eval.lua`): it cannot reach the
    /// guard's names, so nothing it assigns (with or without `local`) changes what the fence
    /// writes, and distinct bodies never grow the server's script cache. An error raised or
    /// returned by the body (or a body that does not compile) leaves the mark as it was,
    /// restored if the body wrote the mark key itself (writes the body made to other keys
    /// before failing stay). The body's return value is discarded. Cannot be combined with
    /// other writes in [`RedisFencer::apply_all`](crate::RedisFencer::apply_all).
    Eval {
        /// The Lua body.
        body: String,
        /// The body's keys (`KEYS[2..]`).
        keys: Vec<String>,
        /// The body's arguments (`ARGV[2..]`).
        args: Vec<Vec<u8>>,
    },
}

impl FencedWrite {
    /// `SET key value`.
    pub fn set(key: impl Into<String>, value: impl ToSingleRedisArg) -> FencedWrite {
        FencedWrite::Set {
            key: key.into(),
            value: single(value),
        }
    }

    /// `HSET key field value`.
    pub fn hset(
        key: impl Into<String>,
        field: impl ToSingleRedisArg,
        value: impl ToSingleRedisArg,
    ) -> FencedWrite {
        FencedWrite::HSet {
            key: key.into(),
            field: single(field),
            value: single(value),
        }
    }

    /// `DEL keys...`.
    pub fn del<I, S>(keys: I) -> FencedWrite
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        FencedWrite::Del {
            keys: keys.into_iter().map(Into::into).collect(),
        }
    }

    /// A Lua `body` with its keys (`KEYS[2..]`) and arguments (`ARGV[2..]`; each item may
    /// expand to several arguments, as with redis-rs's `arg`).
    pub fn eval<K, S, A>(body: impl Into<String>, keys: K, args: A) -> FencedWrite
    where
        K: IntoIterator<Item = S>,
        S: Into<String>,
        A: IntoIterator,
        A::Item: ToRedisArgs,
    {
        let mut out = Vec::new();
        for a in args {
            a.write_redis_args(&mut out);
        }
        FencedWrite::Eval {
            body: body.into(),
            keys: keys.into_iter().map(Into::into).collect(),
            args: out,
        }
    }

    /// The keys this write touches.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            FencedWrite::Set { key, .. } | FencedWrite::HSet { key, .. } => vec![key.as_str()],
            FencedWrite::Del { keys } | FencedWrite::Eval { keys, .. } => {
                keys.iter().map(String::as_str).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_constructors() {
        assert_eq!(
            FencedWrite::set("k", 12),
            FencedWrite::Set {
                key: "k".into(),
                value: b"12".to_vec()
            }
        );
        assert_eq!(
            FencedWrite::hset("h", "f", b"v".as_slice()),
            FencedWrite::HSet {
                key: "h".into(),
                field: b"f".to_vec(),
                value: b"v".to_vec()
            }
        );
        assert_eq!(FencedWrite::del(["a", "b"]).keys(), ["a", "b"]);
        let e = FencedWrite::eval("return 1", ["k"], [1, 2]);
        assert!(
            matches!(e, FencedWrite::Eval { ref args, .. } if args == &[b"1".to_vec(), b"2".to_vec()])
        );
    }
}
