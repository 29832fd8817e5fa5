//! The Lua scripts, embedded from `scripts/*.lua`, and how they are run.
//!
//! Each script opens with a comment block stating its KEYS, ARGV and replies; read them there.
//! Scripts run by `EVALSHA`; on `NOSCRIPT` (a restarted or flushed server, a failover to a
//! node that never saw the script) the same call is sent once more as `EVAL` with the full
//! source, which also caches it on that server. That fallback is one extra round trip on the
//! node that owns the keys, and it is not a retry: `NOSCRIPT` means nothing ran.
//!
//! (redis-rs's `ScriptInvocation::invoke_async` falls back differently: `SCRIPT LOAD` then
//! `EVALSHA` again, two more round trips with a window in which the server can lose the script
//! again. We use `redis::Script` for the SHA1 only.)

use std::sync::{Arc, LazyLock};

use lease_core::BackendError;
use redis::aio::ConnectionLike;
use redis::{ErrorKind, ServerErrorKind, Value};

use crate::error::backend_error;

mod cache;

pub use cache::BODY_CACHE_CAPACITY;
pub(crate) use cache::BodyCache;

/// `acquire.lua`: acquire or take over a lease, minting a token when fenced.
pub const ACQUIRE: &str = include_str!("../scripts/acquire.lua");
/// `renew.lua`: extend a lease held on every key.
pub const RENEW: &str = include_str!("../scripts/renew.lua");
/// `release.lua`: compare-and-delete, optionally only while the counter is at the term.
pub const RELEASE: &str = include_str!("../scripts/release.lua");
/// `pttl.lua`: the minimum remaining TTL of a lease held on every key.
pub const PTTL: &str = include_str!("../scripts/pttl.lua");
/// `inspect.lua`: holder, TTL, counter and mark, raw.
pub const INSPECT: &str = include_str!("../scripts/inspect.lua");
/// `raise.lua`: raise counter and mark to a token where the lease is still ours.
pub const RAISE: &str = include_str!("../scripts/raise.lua");
/// `fence_set.lua`: fenced `SET`.
pub const FENCE_SET: &str = include_str!("../scripts/fence_set.lua");
/// `fence_hset.lua`: fenced `HSET` of one field.
pub const FENCE_HSET: &str = include_str!("../scripts/fence_hset.lua");
/// `fence_del.lua`: fenced `DEL`.
pub const FENCE_DEL: &str = include_str!("../scripts/fence_del.lua");
/// `fence_multi.lua`: several fenced writes under one check, all or nothing.
pub const FENCE_MULTI: &str = include_str!("../scripts/fence_multi.lua");
/// `fence_eval.lua`: the template wrapping a caller's body between guard and mark advance;
/// the line equal to [`BODY_MARKER`] is replaced by the body.
pub const FENCE_EVAL_TEMPLATE: &str = include_str!("../scripts/fence_eval.lua");
/// The line of [`FENCE_EVAL_TEMPLATE`] replaced by a caller's body.
pub const BODY_MARKER: &str = "--@@BODY@@";

/// Every fixed script, by file name.
pub const ALL: [(&str, &str); 10] = [
    ("acquire.lua", ACQUIRE),
    ("renew.lua", RENEW),
    ("release.lua", RELEASE),
    ("pttl.lua", PTTL),
    ("inspect.lua", INSPECT),
    ("raise.lua", RAISE),
    ("fence_set.lua", FENCE_SET),
    ("fence_hset.lua", FENCE_HSET),
    ("fence_del.lua", FENCE_DEL),
    ("fence_multi.lua", FENCE_MULTI),
];

/// Wraps a caller's Lua body between the fence guard and the mark advance.
///
/// ```
/// let s = lease_redis::scripts::wrap_body("redis.call('SET', KEYS[2], ARGV[2])");
/// assert!(s.contains("redis.call('SET', KEYS[2], ARGV[2])"));
/// assert!(!s.contains(lease_redis::scripts::BODY_MARKER));
/// ```
pub fn wrap_body(body: &str) -> String {
    match FENCE_EVAL_TEMPLATE.split_once(BODY_MARKER) {
        Some((head, tail)) => {
            let mut s = String::with_capacity(head.len() + body.len() + tail.len());
            s.push_str(head);
            s.push_str(body);
            s.push_str(tail);
            s
        }
        // The template is ours and holds the marker (checked by a unit test); refuse to run a
        // body unguarded if it ever does not.
        None => {
            String::from("return redis.error_reply('ERR fence_eval template has no body marker')")
        }
    }
}

/// A script with its name (for traces) and SHA1.
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub(crate) name: &'static str,
    code: Arc<str>,
    hash: String,
}

impl LuaScript {
    pub(crate) fn new(name: &'static str, code: impl Into<Arc<str>>) -> LuaScript {
        let code: Arc<str> = code.into();
        let hash = redis::Script::new(&code).get_hash().to_owned();
        LuaScript { name, code, hash }
    }
}

macro_rules! script {
    ($static:ident, $name:literal, $code:ident) => {
        pub(crate) static $static: LazyLock<LuaScript> =
            LazyLock::new(|| LuaScript::new($name, $code));
    };
}

script!(S_ACQUIRE, "acquire", ACQUIRE);
script!(S_RENEW, "renew", RENEW);
script!(S_RELEASE, "release", RELEASE);
script!(S_PTTL, "pttl", PTTL);
script!(S_INSPECT, "inspect", INSPECT);
script!(S_RAISE, "raise", RAISE);
script!(S_FENCE_SET, "fence_set", FENCE_SET);
script!(S_FENCE_HSET, "fence_hset", FENCE_HSET);
script!(S_FENCE_DEL, "fence_del", FENCE_DEL);
script!(S_FENCE_MULTI, "fence_multi", FENCE_MULTI);

/// One script call: keys and arguments, sent as `EVALSHA` (then `EVAL` on `NOSCRIPT`).
#[derive(Default)]
pub(crate) struct Call {
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(crate) fn new() -> Call {
        Call::default()
    }

    pub(crate) fn key(&mut self, k: impl AsRef<[u8]>) -> &mut Call {
        self.keys.push(k.as_ref().to_vec());
        self
    }

    pub(crate) fn arg(&mut self, a: impl redis::ToRedisArgs) -> &mut Call {
        a.write_redis_args(&mut self.args);
        self
    }

    pub(crate) fn arg_bytes(&mut self, a: &[u8]) -> &mut Call {
        self.args.push(a.to_vec());
        self
    }

    fn cmd(&self, verb: &str, script_ref: &[u8]) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script_ref).arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k.as_slice());
        }
        for a in &self.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// Runs `script`: `EVALSHA`, and once `EVAL` if the server answers `NOSCRIPT`.
    pub(crate) async fn run<C>(
        &self,
        conn: &mut C,
        script: &LuaScript,
    ) -> Result<Value, BackendError>
    where
        C: ConnectionLike + Send,
    {
        tracing::debug!(
            script = script.name,
            keys = self.keys.len(),
            args = self.args.len(),
            "lease-redis: EVALSHA"
        );
        let r = self
            .cmd("EVALSHA", script.hash.as_bytes())
            .query_async::<Value>(conn)
            .await;
        let r = match r {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(script = script.name, "lease-redis: NOSCRIPT, sending EVAL");
                self.cmd("EVAL", script.code.as_bytes())
                    .query_async::<Value>(conn)
                    .await
            }
            r => r,
        };
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                let e = backend_error(e);
                tracing::debug!(script = script.name, error = %e, "lease-redis: script failed");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helpers(code: &str) -> &str {
        let start = code.find("-- helpers:begin").expect("helpers:begin");
        let end = code.find("-- helpers:end").expect("helpers:end");
        &code[start..end]
    }

    #[test]
    fn every_script_opens_with_its_comment_block() {
        for (file, code) in ALL
            .iter()
            .copied()
            .chain([("fence_eval.lua", FENCE_EVAL_TEMPLATE)])
        {
            assert!(
                code.starts_with(&format!("--[[ {file}:")),
                "{file} must open with its comment block"
            );
            for word in ["KEYS", "ARGV", "Returns"] {
                assert!(code.contains(word), "{file} documents {word}");
            }
        }
    }

    #[test]
    fn helpers_are_identical_everywhere() {
        let reference = helpers(ACQUIRE);
        for (file, code) in ALL {
            assert_eq!(helpers(code), reference, "helpers of {file}");
        }
        assert_eq!(helpers(FENCE_EVAL_TEMPLATE), reference);
    }

    #[test]
    fn template_has_exactly_one_marker_line() {
        assert_eq!(FENCE_EVAL_TEMPLATE.matches(BODY_MARKER).count(), 1);
        assert!(FENCE_EVAL_TEMPLATE.lines().any(|l| l == BODY_MARKER));
        let w = wrap_body("return 7");
        assert!(w.contains("\nreturn 7\n"));
        // The guard precedes the body, and the advance follows it.
        let g = w.find("less(token, mark)").expect("guard");
        let b = w.find("return 7").expect("body");
        let a = w
            .rfind("redis.call('SET', KEYS[1], token)")
            .expect("advance");
        assert!(g < b && b < a);
    }

    #[test]
    fn hashes_are_sha1_of_the_source() {
        assert_eq!(
            S_ACQUIRE.hash,
            redis::Script::new(ACQUIRE).get_hash().to_owned()
        );
        assert_eq!(S_ACQUIRE.hash.len(), 40);
    }

    #[test]
    fn no_script_formats_numbers_with_tostring() {
        // Lua 5.1 prints doubles >= 1e14 in exponent form; tokens must never be printed so.
        for (file, code) in ALL {
            assert!(!code.contains("tostring("), "{file} uses tostring");
        }
    }
}
