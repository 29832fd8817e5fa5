//! Native conditional commands: what the server offers instead of a compare-and-delete or
//! compare-and-expire script, probed once per backend and cached.
//!
//! Valkey 9.0 has `DELIFEQ key value`, Redis 8.4 (and Valkey 9.2) `DELEX key IFEQ value`;
//! Valkey 8.1+ and Redis 8.4 have `SET key value IFEQ old`. Each does in one command what
//! `release.lua` and `renew.lua` do for an unfenced single-key lock whose stored value is
//! exactly its owner, at a fraction of a script's server time (measured on Valkey 9.1:
//! `DELIFEQ` 0.07 µs, the compare-and-delete script 1.6 µs per call).
//!
//! Support is **probed, never guessed from a version string**: the first operation that could
//! use a native command sends one pipeline of `COMMAND INFO delifeq delex` and a
//! `SET <scratch> .. IFEQ ..` on a scratch key that cannot match (so it writes nothing; a
//! server without `IFEQ` answers a syntax error); operations that start while it is out run
//! their scripts rather than probe too. The answer is cached in the backend and shared by its
//! clones. A refused probe (an ACL without `COMMAND`, or without the scratch
//! key) counts as "not offered": the scripts run, as on any older server.
//!
//! A cached answer can go stale when the connection heals onto another server (a Sentinel
//! failover to an older replica): a native command that the server answers with "unknown
//! command", a syntax error or `NOPERM` ran nothing, so the backend forgets the native
//! commands ([`Native::disable`]) and runs the script for that same call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

/// The scratch key of the `SET .. IFEQ` probe. The probe compares it with a value no one
/// stores ([`PROBE_NEVER`]), so it never writes.
pub(crate) const PROBE_KEY: &str = "redlease:probe:set-ifeq";
/// The value the probe compares with.
const PROBE_NEVER: &str = "\0redlease probe: never stored\0";

/// Not probed yet.
const UNKNOWN: u8 = 0;
/// Probed (possibly finding nothing).
const PROBED: u8 = 1;
/// `DELIFEQ key value` (Valkey 9.0+).
const DELIFEQ: u8 = 2;
/// `DELEX key IFEQ value` (Redis 8.4+, Valkey 9.2+).
const DELEX: u8 = 4;
/// `SET key value IFEQ old` (Valkey 8.1+, Redis 8.4+).
const SET_IFEQ: u8 = 8;
/// Native commands switched off by the caller: never probe, always script.
const OFF: u8 = PROBED | 16;
/// One operation is probing now: the others run the scripts meanwhile (one probe per backend
/// however many calls start at once, none of them waiting for it).
const PROBING: u8 = 32;

/// The compare-and-delete command a server offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NativeDelete {
    /// `DELIFEQ key value`.
    DelIfEq,
    /// `DELEX key IFEQ value`.
    DelEx,
}

impl NativeDelete {
    /// The command deleting `key` if it holds exactly `value`; replies 1 (deleted) or 0.
    pub(crate) fn cmd(self, key: &str, value: &str) -> redis::Cmd {
        let mut cmd = redis::Cmd::with_capacity(4, 16 + key.len() + value.len());
        match self {
            NativeDelete::DelIfEq => cmd.arg("DELIFEQ").arg(key).arg(value),
            NativeDelete::DelEx => cmd.arg("DELEX").arg(key).arg("IFEQ").arg(value),
        };
        cmd
    }
}

/// What the server offers, as far as this backend knows: shared by a backend's clones.
#[derive(Clone, Debug)]
pub(crate) struct Native {
    state: Arc<AtomicU8>,
}

impl Native {
    /// Not probed yet (the probe runs with the first operation that could use one).
    pub(crate) fn new() -> Native {
        Native {
            state: Arc::new(AtomicU8::new(UNKNOWN)),
        }
    }

    /// Never probe, always run the scripts.
    pub(crate) fn off() -> Native {
        Native {
            state: Arc::new(AtomicU8::new(OFF)),
        }
    }

    /// Whether native commands may be used (not switched off).
    pub(crate) fn enabled(&self) -> bool {
        self.state.load(Ordering::Relaxed) != OFF
    }

    /// Forgets every native command (the server refused one): the scripts run from now on.
    pub(crate) fn disable(&self) {
        tracing::debug!("lease-redis: the server refused a native command; using the scripts");
        self.state.store(PROBED, Ordering::Relaxed);
    }

    /// The state, probing first if this backend has not probed yet. One call probes at a
    /// time; the calls that start meanwhile find no native command (their scripts decide, as
    /// on any server) rather than sending a probe each or waiting. A probe that fails on the
    /// connection (I/O), or whose call is dropped, is not cached: the next operation probes
    /// again.
    async fn state<C: ConnectionLike + Send>(&self, conn: &mut C) -> u8 {
        let s = self.state.load(Ordering::Relaxed);
        if s != UNKNOWN {
            return s;
        }
        if self
            .state
            .compare_exchange(UNKNOWN, PROBING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return PROBED;
        }
        let mut turn = ProbeTurn {
            state: &self.state,
            found: UNKNOWN,
        };
        match probe(conn).await {
            Ok(found) => {
                turn.found = found;
                found
            }
            Err(e) => {
                tracing::debug!(error = %e, "lease-redis: native command probe failed");
                PROBED
            }
        }
    }

    /// The native compare-and-delete, if the server offers one.
    pub(crate) async fn delete<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> Option<NativeDelete> {
        let s = self.state(conn).await;
        if s & DELIFEQ != 0 {
            Some(NativeDelete::DelIfEq)
        } else if s & DELEX != 0 {
            Some(NativeDelete::DelEx)
        } else {
            None
        }
    }

    /// Whether the server offers `SET .. IFEQ`.
    pub(crate) async fn set_ifeq<C: ConnectionLike + Send>(&self, conn: &mut C) -> bool {
        self.state(conn).await & SET_IFEQ != 0
    }
}

/// The probing call's turn: when it ends (answered, failed, or dropped), the answer is
/// stored, or the state goes back to unknown for the next operation to probe. Only from
/// [`PROBING`]: a [`Native::disable`] meanwhile stands.
struct ProbeTurn<'a> {
    state: &'a AtomicU8,
    found: u8,
}

impl Drop for ProbeTurn<'_> {
    fn drop(&mut self) {
        let _ =
            self.state
                .compare_exchange(PROBING, self.found, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// One pipeline: `COMMAND INFO delifeq delex` and the `SET .. IFEQ` probe. Only an I/O
/// failure of the pipeline itself is an error; a refused part finds nothing.
async fn probe<C: ConnectionLike + Send>(conn: &mut C) -> Result<u8, RedisError> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("COMMAND").arg("INFO").arg("delifeq").arg("delex");
    pipe.cmd("SET")
        .arg(PROBE_KEY)
        .arg(PROBE_NEVER)
        .arg("IFEQ")
        .arg(PROBE_NEVER);
    let replies: Vec<redis::RedisResult<Value>> = pipe.query_async(conn).await?;
    let mut found = PROBED;
    let mut replies = replies.into_iter();
    if let Some(Ok(Value::Array(entries))) = replies.next() {
        // One entry per name asked, nil for a command the server does not know.
        let mut entries = entries.iter();
        if entries.next().is_some_and(|e| !matches!(e, Value::Nil)) {
            found |= DELIFEQ;
        }
        if entries.next().is_some_and(|e| !matches!(e, Value::Nil)) {
            found |= DELEX;
        }
    }
    // A server with IFEQ compares and writes nothing (nil); one without it answers a syntax
    // error; a refusal (ACL) finds nothing.
    if let Some(Ok(Value::Nil)) = replies.next() {
        found |= SET_IFEQ;
    }
    tracing::debug!(
        delifeq = found & DELIFEQ != 0,
        delex = found & DELEX != 0,
        set_ifeq = found & SET_IFEQ != 0,
        "lease-redis: native conditional commands probed"
    );
    Ok(found)
}

/// Whether `e` says the server does not run this command here (unknown command, a syntax
/// error for an option it lacks, or an ACL refusal): nothing ran, so the script may run
/// instead.
pub(crate) fn not_offered(e: &RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e.detail().is_some_and(|d| {
            let d = d.to_ascii_lowercase();
            d.starts_with("unknown command") || d.starts_with("syntax error")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use redis::{Cmd, Pipeline, RedisFuture};

    use super::*;

    /// A connection whose replies never come (the probe's turn is all these tests watch).
    struct Silent;

    impl ConnectionLike for Silent {
        fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
            Box::pin(std::future::pending())
        }
        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a Pipeline,
            _: usize,
            _: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            Box::pin(std::future::pending())
        }
        fn get_db(&self) -> i64 {
            0
        }
    }

    #[test]
    fn one_call_probes_the_others_script_and_a_dropped_probe_is_not_kept() {
        let native = Native::new();
        let mut cx = Context::from_waker(Waker::noop());
        let (mut first, mut second) = (Silent, Silent);
        {
            let mut probing = pin!(native.state(&mut first));
            assert!(probing.as_mut().poll(&mut cx).is_pending(), "probing");
            assert_eq!(native.state.load(Ordering::Relaxed), PROBING);
            // A call meanwhile finds no native command at once, without a probe of its own.
            let mut meanwhile = pin!(native.delete(&mut second));
            assert_eq!(meanwhile.as_mut().poll(&mut cx), Poll::Ready(None));
        }
        // The probing call was dropped unanswered: the next operation probes again.
        assert_eq!(native.state.load(Ordering::Relaxed), UNKNOWN);
        let mut again = pin!(native.state(&mut first));
        assert!(again.as_mut().poll(&mut cx).is_pending());
        assert_eq!(native.state.load(Ordering::Relaxed), PROBING);
    }

    #[test]
    fn a_probe_turn_keeps_its_answer_and_never_overwrites_a_settled_state() {
        let state = AtomicU8::new(PROBING);
        drop(ProbeTurn {
            state: &state,
            found: PROBED | DELIFEQ,
        });
        assert_eq!(state.load(Ordering::Relaxed), PROBED | DELIFEQ);
        // Switched off meanwhile (or settled by another): the turn leaves it alone.
        let state = AtomicU8::new(OFF);
        drop(ProbeTurn {
            state: &state,
            found: UNKNOWN,
        });
        assert_eq!(state.load(Ordering::Relaxed), OFF);
    }
}
