//! The Lua scripts, composed at compile time from `scripts/*.lua`, and how they are run.
//!
//! Every script is [`PRELUDE`] (`prelude.lua`: the helpers `owner_of`, `less`, `canon`,
//! `read_int` and two constants) followed by the script's own file; each fenced write
//! (`fence_*`) is [`PRELUDE`] + [`FENCE_GUARD`] (`fence_guard.lua`: refuse a stale or invalid
//! token) + its write + [`FENCE_ADVANCE`] (`fence_advance.lua`: move the mark to the token).
//! The pieces are joined with `concat!(include_str!(..), ..)`, so each constant below is one
//! `&'static str` and its SHA1 is fixed at build time (a unit test pins every SHA1). Each
//! script's own file opens with a comment block stating its KEYS, ARGV and replies; read them
//! there.
//!
//! Scripts run by `EVALSHA`; on `NOSCRIPT` (a restarted or flushed server, a failover to a
//! node that never saw the script) the same call is sent once more as `EVAL` with the full
//! source, which also caches it on that server. That fallback is one extra round trip on the
//! node that owns the keys, and it is not a retry: `NOSCRIPT` means nothing ran.
//!
//! (redis-rs's `ScriptInvocation::invoke_async` falls back differently: `SCRIPT LOAD` then
//! `EVALSHA` again, two more round trips with a window in which the server can lose the script
//! again. We use `redis::Script` for the SHA1 only.)
//!
//! [`FencedWrite::Eval`](crate::FencedWrite::Eval) bodies run through one fixed script,
//! [`FENCE_EVAL`], which takes the body as its last argument and compiles it on the server:
//! neither the client nor the server keeps anything per body (the server's script cache holds
//! the dozen scripts below and nothing else of ours).

use std::sync::{Arc, LazyLock};

use lease_core::BackendError;
use redis::aio::ConnectionLike;
use redis::{ErrorKind, ServerErrorKind, Value};

use crate::error::backend_error;

/// The text of one file of `scripts/`, as a string literal.
macro_rules! lua_file {
    ($file:literal) => {
        include_str!(concat!("../scripts/", $file))
    };
}

/// `prelude.lua`: the helpers (`owner_of`, `less`, `canon`, `read_token`, `key_name`,
/// `corrupt`, and the constants) every script starts with, exactly once.
pub const PRELUDE: &str = lua_file!("prelude.lua");
/// `fence_guard.lua`: the fence check every fenced write runs after the prelude (refuse a
/// token not in 1..2^53 or below the mark, returning `{0, mark}`).
pub const FENCE_GUARD: &str = lua_file!("fence_guard.lua");
/// `fence_advance.lua`: the end of every fenced write (set the mark to the token, return 1).
pub const FENCE_ADVANCE: &str = lua_file!("fence_advance.lua");

/// A script: the prelude, then the script's own file.
macro_rules! plain_script {
    ($file:literal) => {
        concat!(lua_file!("prelude.lua"), lua_file!($file))
    };
}

/// A fenced write: prelude, guard, the script's own write, mark advance.
macro_rules! fence_script {
    ($file:literal) => {
        concat!(
            lua_file!("prelude.lua"),
            lua_file!("fence_guard.lua"),
            lua_file!($file),
            lua_file!("fence_advance.lua"),
        )
    };
}

/// `acquire.lua`: acquire or take over a lease, minting a token when fenced.
pub const ACQUIRE: &str = plain_script!("acquire.lua");
/// `renew.lua`: extend a lease held on every key.
pub const RENEW: &str = plain_script!("renew.lua");
/// `renew_many.lua`: renew.lua's rule for a batch of leases, one answer each.
pub const RENEW_MANY: &str = plain_script!("renew_many.lua");
/// `release.lua`: compare-and-delete, optionally only while the counter is at the term.
pub const RELEASE: &str = plain_script!("release.lua");
/// `release_one.lua`: release.lua's rule for one unfenced key, alone (**no prelude**: the
/// plain lock's release is every lock cycle's second round trip on a server without a native
/// compare-and-delete, and the prelude's definitions were most of its server time).
pub const RELEASE_ONE: &str = lua_file!("release_one.lua");
/// `pttl.lua`: the minimum remaining TTL of a lease held on every key.
pub const PTTL: &str = plain_script!("pttl.lua");
/// `inspect.lua`: holder, TTL, counter and mark, raw.
pub const INSPECT: &str = plain_script!("inspect.lua");
/// `raise.lua`: raise counter and mark to a token where the lease is still ours.
pub const RAISE: &str = plain_script!("raise.lua");
/// `force_release.lua`: an administrator's release, whatever the owner, raising the fence.
pub const FORCE_RELEASE: &str = plain_script!("force_release.lua");
/// `fence_set.lua`: fenced `SET`.
pub const FENCE_SET: &str = fence_script!("fence_set.lua");
/// `fence_hset.lua`: fenced `HSET` of one field.
pub const FENCE_HSET: &str = fence_script!("fence_hset.lua");
/// `fence_del.lua`: fenced `DEL`.
pub const FENCE_DEL: &str = fence_script!("fence_del.lua");
/// `fence_multi.lua`: several fenced writes under one check, all or nothing.
pub const FENCE_MULTI: &str = fence_script!("fence_multi.lua");
/// `fence_eval.lua`: a caller's Lua body (its last argument, compiled on the server as a chunk
/// of its own) between guard and mark advance.
pub const FENCE_EVAL: &str = fence_script!("fence_eval.lua");

/// Every script, by file name.
pub const ALL: [(&str, &str); 13] = [
    ("acquire.lua", ACQUIRE),
    ("renew.lua", RENEW),
    ("renew_many.lua", RENEW_MANY),
    ("release.lua", RELEASE),
    ("pttl.lua", PTTL),
    ("inspect.lua", INSPECT),
    ("raise.lua", RAISE),
    ("force_release.lua", FORCE_RELEASE),
    ("fence_set.lua", FENCE_SET),
    ("fence_hset.lua", FENCE_HSET),
    ("fence_del.lua", FENCE_DEL),
    ("fence_multi.lua", FENCE_MULTI),
    ("fence_eval.lua", FENCE_EVAL),
];

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
script!(S_RENEW_MANY, "renew_many", RENEW_MANY);
script!(S_RELEASE, "release", RELEASE);
script!(S_RELEASE_ONE, "release_one", RELEASE_ONE);
script!(S_PTTL, "pttl", PTTL);
script!(S_INSPECT, "inspect", INSPECT);
script!(S_RAISE, "raise", RAISE);
script!(S_FORCE_RELEASE, "force_release", FORCE_RELEASE);
script!(S_FENCE_SET, "fence_set", FENCE_SET);
script!(S_FENCE_HSET, "fence_hset", FENCE_HSET);
script!(S_FENCE_DEL, "fence_del", FENCE_DEL);
script!(S_FENCE_MULTI, "fence_multi", FENCE_MULTI);
script!(S_FENCE_EVAL, "fence_eval", FENCE_EVAL);

/// One script call: keys and arguments, sent as `EVALSHA` (then `EVAL` on `NOSCRIPT`).
///
/// The keys' bytes and the arguments' bytes are each kept back to back in one buffer (with
/// where each ends), not one allocation per key or argument: a batch of renewals adds four
/// per lease, and their allocations were a visible share of a renewal's instructions.
#[derive(Default)]
pub(crate) struct Call {
    keys: Parts,
    args: Parts,
}

/// The first reservation of a [`Parts`]' bytes.
const FIRST_RESERVE: usize = 128;

/// Byte strings back to back: `bytes`, and where each ends.
#[derive(Default)]
struct Parts {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Parts {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| self.bytes.get(start..end).unwrap_or_default())
    }
}

impl redis::RedisWrite for Parts {
    fn write_arg(&mut self, arg: &[u8]) {
        if self.bytes.capacity() == 0 {
            // Room for a small call's keys or arguments at once (not 8, 16, 32, ... bytes).
            self.bytes.reserve(arg.len().max(FIRST_RESERVE));
        }
        self.bytes.extend_from_slice(arg);
        self.ends.push(self.bytes.len());
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.ends.push(self.bytes.len());
        PartWriter(self)
    }
}

/// Appends to the last part of a [`Parts`].
struct PartWriter<'a>(&'a mut Parts);

impl std::io::Write for PartWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.bytes.extend_from_slice(buf);
        if let Some(end) = self.0.ends.last_mut() {
            *end = self.0.bytes.len();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A number's decimal digits, written on the stack (a script argument without a `String`).
#[derive(Default)]
pub(crate) struct Decimal([u8; 20]);

impl Decimal {
    /// The digits of `n`.
    pub(crate) fn of(&mut self, mut n: u64) -> &[u8] {
        let mut at = self.0.len();
        loop {
            at -= 1;
            // `n % 10` is a digit: the cast cannot truncate.
            self.0[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.0.get(at..).unwrap_or_default()
    }
}

/// Script calls sent together by [`Call::run_pipelined`]: each encoded as a command when it is
/// sent (again, as `EVAL`, if the server answers `NOSCRIPT`).
pub(crate) trait Batch {
    /// How many calls.
    fn len(&self) -> usize;
    /// Call `i` as `verb script_ref numkeys key.. arg..`.
    fn cmd(&self, i: usize, verb: &str, script_ref: &[u8]) -> redis::Cmd;
}

impl Batch for [Call] {
    fn len(&self) -> usize {
        <[Call]>::len(self)
    }

    fn cmd(&self, i: usize, verb: &str, script_ref: &[u8]) -> redis::Cmd {
        self.get(i)
            .map_or_else(redis::Cmd::new, |call| call.cmd(verb, script_ref))
    }
}

/// A script call's command, its buffers sized for `keys` keys and `args` arguments of `data`
/// bytes in all, with `verb script_ref keys` written: the keys and then the arguments follow.
pub(crate) fn script_cmd(
    verb: &str,
    script_ref: &[u8],
    keys: usize,
    args: usize,
    data: usize,
) -> redis::Cmd {
    let data = verb.len() + script_ref.len() + 20 + data;
    let mut cmd = redis::Cmd::with_capacity(3 + keys + args, data);
    cmd.arg(verb).arg(script_ref).arg(keys);
    cmd
}

impl Call {
    pub(crate) fn new() -> Call {
        Call::default()
    }

    pub(crate) fn key(&mut self, k: impl AsRef<[u8]>) -> &mut Call {
        redis::RedisWrite::write_arg(&mut self.keys, k.as_ref());
        self
    }

    pub(crate) fn arg(&mut self, a: impl redis::ToRedisArgs) -> &mut Call {
        a.write_redis_args(&mut self.args);
        self
    }

    pub(crate) fn arg_bytes(&mut self, a: &[u8]) -> &mut Call {
        redis::RedisWrite::write_arg(&mut self.args, a);
        self
    }

    fn cmd(&self, verb: &str, script_ref: &[u8]) -> redis::Cmd {
        // Sized once: growing the command's buffers argument by argument was a visible share
        // of a lock cycle's instructions.
        let mut cmd = script_cmd(
            verb,
            script_ref,
            self.keys.len(),
            self.args.len(),
            self.keys.bytes.len() + self.args.bytes.len(),
        );
        for k in self.keys.iter() {
            cmd.arg(k);
        }
        for a in self.args.iter() {
            cmd.arg(a);
        }
        cmd
    }

    /// Runs one call of `script` per element of `calls` in one pipeline (one write, one
    /// read): `EVALSHA` each, then, in a second pipeline, `EVAL` for those the server
    /// answered `NOSCRIPT` (nothing of those ran). One result per call, in order; the outer
    /// error is a failure of the pipeline itself (every call's outcome is then that error's).
    pub(crate) async fn run_pipelined<C>(
        calls: &(impl Batch + ?Sized),
        conn: &mut C,
        script: &LuaScript,
    ) -> Result<Vec<Result<Value, BackendError>>, BackendError>
    where
        C: ConnectionLike + Send,
    {
        tracing::debug!(
            script = script.name,
            calls = calls.len(),
            "lease-redis: EVALSHA pipeline"
        );
        let mut out = Vec::with_capacity(calls.len());
        let mut missing = Vec::new();
        let sent = Call::pipeline(
            calls,
            0..calls.len(),
            "EVALSHA",
            script.hash.as_bytes(),
            conn,
        )
        .await?;
        for (i, r) in sent.into_iter().enumerate() {
            match r {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    missing.push(i);
                    out.push(Err(BackendError::Protocol("NOSCRIPT".into())));
                }
                r => out.push(r.map_err(backend_error)),
            }
        }
        if !missing.is_empty() {
            tracing::debug!(
                script = script.name,
                calls = missing.len(),
                "lease-redis: NOSCRIPT, sending EVAL"
            );
            let again = missing.iter().copied();
            let resent = Call::pipeline(calls, again, "EVAL", script.code.as_bytes(), conn).await?;
            for (&i, r) in missing.iter().zip(resent) {
                if let Some(slot) = out.get_mut(i) {
                    *slot = r.map_err(backend_error);
                }
            }
        }
        Ok(out)
    }

    /// Sends the calls of `batch` at `indices` as `verb` in one pipeline; one result per call.
    async fn pipeline<C>(
        batch: &(impl Batch + ?Sized),
        indices: impl Iterator<Item = usize>,
        verb: &str,
        script_ref: &[u8],
        conn: &mut C,
    ) -> Result<Vec<redis::RedisResult<Value>>, BackendError>
    where
        C: ConnectionLike + Send,
    {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut count = 0;
        for i in indices {
            pipe.add_command(batch.cmd(i, verb, script_ref));
            count += 1;
        }
        let replies: Vec<redis::RedisResult<Value>> =
            pipe.query_async(conn).await.map_err(backend_error)?;
        if replies.len() != count {
            return Err(BackendError::Protocol(format!(
                "a pipeline of {count} script calls got {} replies",
                replies.len()
            )));
        }
        Ok(replies)
    }

    /// Runs `script`: `EVALSHA`, and once `EVAL` if the server answers `NOSCRIPT`.
    /// One call of `script` with one key and `args`, its command written straight from them
    /// (no [`Call`] buffers in between): what the plain lock's release sends, every lock
    /// cycle's second round trip. `EVALSHA`, then `EVAL` if the server answers `NOSCRIPT`.
    pub(crate) async fn run_one<C>(
        conn: &mut C,
        script: &LuaScript,
        key: &[u8],
        args: &[&[u8]],
    ) -> Result<Value, BackendError>
    where
        C: ConnectionLike + Send,
    {
        tracing::debug!(
            script = script.name,
            keys = 1,
            args = args.len(),
            "lease-redis: EVALSHA"
        );
        let cmd = |verb: &str, script_ref: &[u8]| {
            let data = key.len() + args.iter().map(|a| a.len()).sum::<usize>();
            let mut cmd = script_cmd(verb, script_ref, 1, args.len(), data);
            cmd.arg(key);
            for a in args {
                cmd.arg(*a);
            }
            cmd
        };
        let r = cmd("EVALSHA", script.hash.as_bytes())
            .query_async::<Value>(conn)
            .await;
        let r = match r {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(script = script.name, "lease-redis: NOSCRIPT, sending EVAL");
                cmd("EVAL", script.code.as_bytes())
                    .query_async::<Value>(conn)
                    .await
            }
            r => r,
        };
        r.map_err(|e| {
            let e = backend_error(e);
            tracing::debug!(script = script.name, error = %e, "lease-redis: script failed");
            e
        })
    }

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
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn decimal_writes_every_u64() {
        for n in [0, 7, 10, 1_000, 30_000, 4_294_967_296, u64::MAX] {
            assert_eq!(Decimal::default().of(n), n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn a_call_encodes_its_keys_and_arguments_as_separate_arguments() {
        let mut call = Call::new();
        call.key("k1").key("").key(b"k3".as_slice());
        call.arg(2usize)
            .arg("owner")
            .arg(3000u64)
            .arg("")
            .arg_bytes(b"raw")
            .arg(&["a", "b"][..]);
        let expected = redis::cmd("EVALSHA")
            .arg("sha")
            .arg(3)
            .arg("k1")
            .arg("")
            .arg("k3")
            .arg(2)
            .arg("owner")
            .arg(3000)
            .arg("")
            .arg("raw")
            .arg("a")
            .arg("b")
            .get_packed_command();
        assert_eq!(call.cmd("EVALSHA", b"sha").get_packed_command(), expected);
        // An argument written through a writer is one argument, however many writes.
        let mut parts = Parts::default();
        redis::RedisWrite::write_arg(&mut parts, b"x");
        {
            use std::io::Write;
            let mut w = redis::RedisWrite::writer_for_next_arg(&mut parts);
            w.write_all(b"ab").unwrap();
            w.write_all(b"cd").unwrap();
        }
        drop(redis::RedisWrite::writer_for_next_arg(&mut parts));
        let got: Vec<&[u8]> = parts.iter().collect();
        assert_eq!(got, [b"x".as_slice(), b"abcd", b""]);
    }

    /// Every script's own file (what follows the prelude, or the guard), by file name.
    const OWN_PARTS: [(&str, &str); 13] = [
        ("acquire.lua", lua_file!("acquire.lua")),
        ("renew.lua", lua_file!("renew.lua")),
        ("renew_many.lua", lua_file!("renew_many.lua")),
        ("release.lua", lua_file!("release.lua")),
        ("pttl.lua", lua_file!("pttl.lua")),
        ("inspect.lua", lua_file!("inspect.lua")),
        ("raise.lua", lua_file!("raise.lua")),
        ("force_release.lua", lua_file!("force_release.lua")),
        ("fence_set.lua", lua_file!("fence_set.lua")),
        ("fence_hset.lua", lua_file!("fence_hset.lua")),
        ("fence_del.lua", lua_file!("fence_del.lua")),
        ("fence_multi.lua", lua_file!("fence_multi.lua")),
        ("fence_eval.lua", lua_file!("fence_eval.lua")),
    ];

    /// The SHA1 of every composed script, pinned. A change to any part (the prelude, the guard,
    /// the advance or a script's own file) changes a SHA1 and must be deliberate: re-pin it
    /// then. (A server that cached an old script answers NOSCRIPT once and gets the new source
    /// by EVAL.)
    const PINNED_SHA1: [(&str, &str); 13] = [
        ("acquire.lua", "a4eae7dc1bb16f83b89492cac41ccb418d82d7ab"),
        ("renew.lua", "68745ccf39dfb26e1d26d18423f2318587844ce4"),
        ("renew_many.lua", "3f2e92cc1e1723056f4f482ce29e1a1b498e6504"),
        ("release.lua", "b0e8c7e2355c1ac9774c1332f577446d9918412b"),
        ("pttl.lua", "2f33cf41230258a05c727c1fac89fbeb781b773b"),
        ("inspect.lua", "ee29356897951a283e8a6df2b119485150cb7b96"),
        ("raise.lua", "ca63471b085b3ffc3840b29aa080c3777f58f267"),
        (
            "force_release.lua",
            "f933d7a85ad1738322f672b1d70d690feee24996",
        ),
        ("fence_set.lua", "9e9a36bd0adb1b41b965c989fd969d1f4eeaacca"),
        ("fence_hset.lua", "4cd89632d94ca772525f65d632b4bdbc0aafcf82"),
        ("fence_del.lua", "2fb8736a6a93fcd485ed1ba1b492ba7e89504fb3"),
        (
            "fence_multi.lua",
            "4ec68d7d34b9c2266f80bbfd938796c570e5b4fe",
        ),
        ("fence_eval.lua", "9a00d95656177ba0608b55522fda9f19f9a80e30"),
    ];

    /// Every composed script, by file name.
    fn composed<'a>() -> impl Iterator<Item = (&'a str, &'a str)> {
        ALL.into_iter()
    }

    fn is_fenced(file: &str) -> bool {
        file.starts_with("fence_")
    }

    /// The names a chunk defines at its top level: `local function f`, `function f` and
    /// `local a, b = ...` (lines starting in column 0; nested blocks are indented).
    fn top_level_definitions(code: &str) -> Vec<String> {
        let mut names = Vec::new();
        for line in code.lines() {
            let decl = if let Some(rest) = line.strip_prefix("local function ") {
                rest.split('(').next().unwrap_or_default()
            } else if let Some(rest) = line.strip_prefix("function ") {
                rest.split('(').next().unwrap_or_default()
            } else if let Some(rest) = line.strip_prefix("local ") {
                rest.split('=').next().unwrap_or_default()
            } else {
                continue;
            };
            names.extend(decl.split(',').map(|n| n.trim().to_owned()));
        }
        names
    }

    #[test]
    fn every_part_opens_with_its_comment_block() {
        for (file, code) in OWN_PARTS {
            assert!(
                code.starts_with(&format!("--[[ {file}:")),
                "{file} must open with its comment block"
            );
            for word in ["KEYS", "ARGV", "Returns"] {
                assert!(code.contains(word), "{file} documents {word}");
            }
        }
        for (file, code) in [
            ("prelude.lua", PRELUDE),
            ("fence_guard.lua", FENCE_GUARD),
            ("fence_advance.lua", FENCE_ADVANCE),
        ] {
            assert!(code.starts_with(&format!("--[[ {file}:")), "{file}");
        }
    }

    /// release_one.lua stands alone (no prelude), so it is checked here rather than with the
    /// composed scripts; its SHA1 is pinned like theirs.
    #[test]
    fn release_one_stands_alone_and_is_pinned() {
        assert!(RELEASE_ONE.starts_with("--[[ release_one.lua:"));
        for word in ["KEYS", "ARGV", "Returns"] {
            assert!(
                RELEASE_ONE.contains(word),
                "release_one.lua documents {word}"
            );
        }
        assert!(RELEASE_ONE.ends_with('\n'));
        assert!(!RELEASE_ONE.contains(PRELUDE));
        assert!(!RELEASE_ONE.contains("tostring("));
        // Without a notice argument the script publishes on the standalone channel itself.
        assert!(RELEASE_ONE.contains(&format!(
            "ARGV[2] or ('p:{}' .. KEYS[1])",
            crate::notify::CHANNEL_PREFIX
        )));
        assert_eq!(
            redis::Script::new(RELEASE_ONE).get_hash(),
            "1b642977c7204584b87b2d2302c06ab9bb0cc427",
            "release_one.lua changed: check, then re-pin"
        );
    }

    #[test]
    fn every_part_ends_with_a_newline() {
        // Parts are concatenated as they are: a missing newline would join two Lua lines.
        for (file, code) in OWN_PARTS.into_iter().chain([
            ("prelude.lua", PRELUDE),
            ("fence_guard.lua", FENCE_GUARD),
            ("fence_advance.lua", FENCE_ADVANCE),
        ]) {
            assert!(code.ends_with('\n'), "{file}");
        }
    }

    #[test]
    fn scripts_are_composed_in_order() {
        for ((file, code), (own_file, own)) in composed().zip(OWN_PARTS) {
            assert_eq!(file, own_file);
            let expected = if is_fenced(file) {
                [PRELUDE, FENCE_GUARD, own, FENCE_ADVANCE].concat()
            } else {
                [PRELUDE, own].concat()
            };
            assert_eq!(
                code, expected,
                "{file} is prelude (+ guard) + own part (+ advance)"
            );
        }
    }

    #[test]
    fn prelude_once_everywhere_and_guard_once_in_every_fenced_write() {
        for (file, code) in composed() {
            assert_eq!(code.matches(PRELUDE).count(), 1, "prelude in {file}");
            let fenced = usize::from(is_fenced(file));
            assert_eq!(code.matches(FENCE_GUARD).count(), fenced, "guard in {file}");
            assert_eq!(
                code.matches(FENCE_ADVANCE).count(),
                fenced,
                "advance in {file}"
            );
        }
        // The composed text really is Lua defining the helpers once, not only the same bytes.
        for (file, code) in composed() {
            assert_eq!(
                code.matches("local function less(").count(),
                1,
                "less() in {file}"
            );
        }
    }

    #[test]
    fn no_script_defines_a_name_twice() {
        for (file, code) in composed() {
            let names = top_level_definitions(code);
            let mut seen = HashSet::new();
            for name in &names {
                assert!(seen.insert(name), "{file} defines {name} twice");
            }
            for helper in [
                "owner_of",
                "less",
                "canon",
                "read_token",
                "key_name",
                "corrupt",
                "MAX_TOKEN",
            ] {
                assert!(names.iter().any(|n| n == helper), "{file} defines {helper}");
            }
        }
        // The check itself finds duplicates.
        let twice = [PRELUDE, PRELUDE].concat();
        let names = top_level_definitions(&twice);
        assert!(names.len() > names.iter().collect::<HashSet<_>>().len());
    }

    #[test]
    fn script_sha1s_are_pinned() {
        let actual: Vec<(&str, String)> = composed()
            .map(|(file, code)| (file, redis::Script::new(code).get_hash().to_owned()))
            .collect();
        let pinned: Vec<(&str, String)> = PINNED_SHA1
            .iter()
            .map(|&(file, sha)| (file, sha.to_owned()))
            .collect();
        assert_eq!(
            actual, pinned,
            "a script's text changed: check, then re-pin"
        );
    }

    #[test]
    fn the_eval_body_cannot_reach_the_fence_names() {
        // The body is compiled by loadstring from an argument: no body text is spliced into
        // a script, and the advance writes from the guard's locals, not KEYS/ARGV.
        assert!(FENCE_EVAL.contains("loadstring(body_source, '=fenced_body')"));
        assert!(FENCE_ADVANCE.contains("redis.call('SET', mark_key, token)"));
        assert!(!FENCE_ADVANCE.contains("KEYS[1]"));
        let guard = FENCE_EVAL.find("local mark_key = KEYS[1]").expect("guard");
        let body = FENCE_EVAL.find("pcall(body)").expect("body");
        let advance = FENCE_EVAL
            .rfind("redis.call('SET', mark_key, token)")
            .expect("advance");
        assert!(guard < body && body < advance);
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
        for (file, code) in composed() {
            assert!(!code.contains("tostring("), "{file} uses tostring");
        }
    }
}
