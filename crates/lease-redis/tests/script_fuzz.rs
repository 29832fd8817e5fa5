//! A property pass over every script's inputs on a real server (issue 27): random stored state
//! (corrupt counters, marks and epochs, keys of the wrong type, odd bytes) and random
//! arguments (huge, negative and non-numeric numbers as text, odd bytes, missing arguments),
//! each script called raw with `EVAL`.
//!
//! Each script gets its own run of [`CASES_PER_SCRIPT`] cases, with stored values mostly valid
//! so that the interesting paths (a grant, an applied write) are reached, one odd value at a
//! time. Negative control: with acquire.lua's TTL check removed, the acquire run fails at once
//! (its counter and mark were written before the bad TTL failed the final SET).
//!
//! For every call: it answers within a bound (nothing loops); an error reply carries one of
//! the typed codes (`CORRUPT` naming one of the call's keys, `TOKEN_EXHAUSTED`, `WRONGTYPE`,
//! `ERR`) and **changes nothing**; and the applied mark moves only where a script may move
//! it: a fenced write answering 1 sets it to its (valid, not lower) token, an acquire that
//! grants sets it to the token it minted, a raise answering 1 lifts it to its token.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use lease_redis::scripts;
use lease_testkit::redis::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::Value;
use redis::aio::MultiplexedConnection;

// Key names with odd bytes (NUL, ESC, CR LF, a space, a backslash, non-ASCII).
const LOCK: &str = "{z\0\x1b[31m}:lock \\ é";
const COUNTER: &str = "{z\0\x1b[31m}:fence\r\n";
const MARK: &str = "{z\0\x1b[31m}:fence:applied";
const EPOCH: &str = "{z\0\x1b[31m}:fence:epoch";
const TARGET: &str = "{z\0\x1b[31m}:target";
const ALL_KEYS: [&str; 5] = [LOCK, COUNTER, MARK, EPOCH, TARGET];
/// Bound of one script call.
const CALL: Duration = Duration::from_secs(5);

/// Text that is almost, or not at all, a number.
fn nasty() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "",
            "0",
            "1",
            "5",
            "-1",
            "+5",
            "007",
            "1e3",
            " 1",
            "1 ",
            "1.5",
            "0x10",
            "nan",
            "inf",
            "9007199254740991",
            "9007199254740992",
            "9007199254740993",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999999",
            "-9007199254740993",
            "2592000000",
            "1000",
            "me",
            "other",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..12),
        (1u64..=(1 << 53)).prop_map(|n| n.to_string().into_bytes()),
    ]
}

/// What a key holds before the call.
#[derive(Clone, Debug)]
enum Stored {
    Absent,
    Text(Vec<u8>),
    Hash,
}

fn stored() -> impl Strategy<Value = Stored> {
    prop_oneof![
        3 => Just(Stored::Absent),
        4 => (1u64..1_000_000).prop_map(|n| Stored::Text(n.to_string().into_bytes())),
        2 => nasty().prop_map(Stored::Text),
        1 => Just(Stored::Hash),
    ]
}

fn lock_value() -> impl Strategy<Value = Stored> {
    prop_oneof![
        Just(Stored::Absent),
        Just(Stored::Absent),
        Just(Stored::Text(b"me".to_vec())),
        Just(Stored::Text(b"me\0meta".to_vec())),
        Just(Stored::Text(b"other".to_vec())),
        Just(Stored::Hash),
        nasty().prop_map(Stored::Text),
    ]
}

/// One raw script call.
#[derive(Clone, Debug)]
struct Case {
    script: &'static str,
    keys: Vec<&'static str>,
    args: Vec<Vec<u8>>,
}

fn arg_or_nasty(good: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![3 => Just(good.as_bytes().to_vec()), 2 => nasty()]
}

fn owner() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"me".to_vec()),
        Just(b"other".to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

/// Each script's calls, by name.
fn cases() -> Vec<(&'static str, BoxedStrategy<Case>)> {
    let acquire = (
        owner(),
        arg_or_nasty("1000"),
        prop::sample::select(vec!["counter:", "clock:", "counter:", "clock:", "", "x:"]),
        arg_or_nasty("0"),
        any::<bool>(),
    )
        .prop_map(|(owner, ttl, scheme, floor, fenced)| {
            let mut args = vec![owner, ttl];
            let mut keys = vec![LOCK];
            if fenced {
                keys.extend([COUNTER, MARK, EPOCH]);
                let mut f = scheme.as_bytes().to_vec();
                f.extend(floor);
                args.push(f);
            }
            Case {
                script: scripts::ACQUIRE,
                keys,
                args,
            }
        });
    let renew = (owner(), arg_or_nasty("1000")).prop_map(|(o, ttl)| Case {
        script: scripts::RENEW,
        keys: vec![LOCK],
        args: vec![o, ttl],
    });
    let renew_many =
        (arg_or_nasty("1"), owner(), arg_or_nasty("1000")).prop_map(|(n, o, t)| Case {
            script: scripts::RENEW_MANY,
            keys: vec![LOCK],
            args: vec![n, o, t],
        });
    let release = (
        owner(),
        arg_or_nasty("1"),
        prop::sample::select(vec!["", "p:ch", "s:ch", "x"]),
        prop::option::of(nasty()),
    )
        .prop_map(|(o, n, notice, term)| {
            let mut keys = vec![LOCK];
            let mut args = vec![o, n, notice.as_bytes().to_vec()];
            if let Some(t) = term {
                keys.push(COUNTER);
                args.push(t);
            }
            Case {
                script: scripts::RELEASE,
                keys,
                args,
            }
        });
    let raise = (owner(), nasty(), arg_or_nasty("1")).prop_map(|(o, t, n)| Case {
        script: scripts::RAISE,
        keys: vec![LOCK, COUNTER, MARK],
        args: vec![o, t, n],
    });
    let fence_set = nasty().prop_map(|t| Case {
        script: scripts::FENCE_SET,
        keys: vec![MARK, TARGET],
        args: vec![t, b"v".to_vec()],
    });
    let fence_hset = nasty().prop_map(|t| Case {
        script: scripts::FENCE_HSET,
        keys: vec![MARK, TARGET],
        args: vec![t, b"f".to_vec(), b"v".to_vec()],
    });
    let fence_del = nasty().prop_map(|t| Case {
        script: scripts::FENCE_DEL,
        keys: vec![MARK, TARGET],
        args: vec![t],
    });
    let fence_multi = (nasty(), arg_or_nasty("1"), arg_or_nasty("1")).prop_map(|(t, m, nk)| Case {
        script: scripts::FENCE_MULTI,
        keys: vec![MARK, TARGET],
        args: vec![t, m, b"hset".to_vec(), nk, b"f".to_vec(), b"v".to_vec()],
    });
    let fence_eval = (
        nasty(),
        prop::sample::select(vec![
            "redis.call('SET', KEYS[2], 'v')",
            "token = '9007199254740000'",
            "redis.call('SET', KEYS[1], '9007199254740000'); error('x')",
            "redis.call('HSET', KEYS[1], 'a', 'b'); return redis.error_reply('ERR y')",
            "return (",
            "ARGV[1] = '9007199254740000'; KEYS[1] = KEYS[2]",
        ]),
    )
        .prop_map(|(t, body)| Case {
            script: scripts::FENCE_EVAL,
            keys: vec![MARK, TARGET],
            args: vec![t, body.as_bytes().to_vec()],
        });
    let reads = prop::sample::select(vec![0usize, 1]).prop_map(|i| {
        if i == 0 {
            Case {
                script: scripts::PTTL,
                keys: vec![LOCK],
                args: vec![b"me".to_vec()],
            }
        } else {
            Case {
                script: scripts::INSPECT,
                keys: vec![LOCK, COUNTER, MARK, EPOCH],
                args: vec![],
            }
        }
    });
    vec![
        ("acquire", acquire.boxed()),
        ("renew", renew.boxed()),
        ("renew_many", renew_many.boxed()),
        ("release", release.boxed()),
        ("raise", raise.boxed()),
        ("fence_set", fence_set.boxed()),
        ("fence_hset", fence_hset.boxed()),
        ("fence_del", fence_del.boxed()),
        ("fence_multi", fence_multi.boxed()),
        ("fence_eval", fence_eval.boxed()),
        ("pttl/inspect", reads.boxed()),
    ]
}

/// Every key's type, value (a hash's fields) and whether it expires.
type Snapshot = BTreeMap<&'static str, (String, Vec<Vec<u8>>, bool)>;

async fn snapshot(conn: &mut MultiplexedConnection) -> Snapshot {
    let mut out = BTreeMap::new();
    for key in ALL_KEYS {
        let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await.unwrap();
        let value: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![redis::cmd("GET").arg(key).query_async(conn).await.unwrap()],
            "hash" => redis::cmd("HGETALL")
                .arg(key)
                .query_async(conn)
                .await
                .unwrap(),
            _ => vec![],
        };
        let pttl: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap();
        out.insert(key, (kind, value, pttl >= 0));
    }
    out
}

async fn put(conn: &mut MultiplexedConnection, key: &str, v: &Stored) {
    let _: () = redis::cmd("DEL").arg(key).query_async(conn).await.unwrap();
    match v {
        Stored::Absent => {}
        Stored::Text(t) => {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(t.as_slice())
                .query_async(conn)
                .await
                .unwrap();
        }
        Stored::Hash => {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("f")
                .arg("v")
                .query_async(conn)
                .await
                .unwrap();
        }
    }
}

/// A key's name as the scripts print it: bytes outside printable ASCII, the space and the
/// backslash as `\xNN`.
fn escaped(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_graphic() && b != b'\\' {
                char::from(b).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

/// The canonical decimal of `raw` when it is a token in 1..=2^53 (Rust's u64 rule).
fn valid_token(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw)
        .ok()?
        .parse::<u64>()
        .ok()
        .filter(|t| (1..=1 << 53).contains(t))
}

fn mark_of(s: &Snapshot) -> Option<Vec<u8>> {
    match s.get(MARK) {
        Some((kind, v, _)) if kind == "string" => v.first().cloned(),
        _ => None,
    }
}

#[test]
fn every_script_input_is_refused_typed_or_applied_as_specified() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt.block_on(RedisServer::start()).expect("redis server");
    let conn = rt.block_on(server.connection()).expect("connection");
    for (name, case) in cases() {
        let mut runner = TestRunner::new(Config {
            cases: CASES_PER_SCRIPT,
            failure_persistence: None,
            ..Config::default()
        });
        let state = (lock_value(), stored(), stored(), stored(), stored());
        if let Err(e) = check(&rt, &conn, &mut runner, state, case) {
            panic!("{name}: {e}");
        }
    }
}

/// Random cases per script and run.
const CASES_PER_SCRIPT: u32 = 100;

type State = (Stored, Stored, Stored, Stored, Stored);

fn check(
    rt: &tokio::runtime::Runtime,
    conn: &MultiplexedConnection,
    runner: &mut TestRunner,
    state: impl Strategy<Value = State>,
    case: BoxedStrategy<Case>,
) -> Result<(), String> {
    runner.run(&(state, case), |((lock, counter, mark, epoch, target), c)| {
        let mut conn = conn.clone();
        rt.block_on(async {
            for (key, v) in [
                (LOCK, &lock),
                (COUNTER, &counter),
                (MARK, &mark),
                (EPOCH, &epoch),
                (TARGET, &target),
            ] {
                put(&mut conn, key, v).await;
            }
            let before = snapshot(&mut conn).await;
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(c.script).arg(c.keys.len());
            for k in &c.keys {
                cmd.arg(*k);
            }
            for a in &c.args {
                cmd.arg(a.as_slice());
            }
            let reply = tokio::time::timeout(CALL, cmd.query_async::<Value>(&mut conn))
                .await
                .map_err(|_| TestCaseError::fail("no answer in time: a script loops"))?;
            let after = snapshot(&mut conn).await;
            let token_arg = |i: usize| c.args.get(i).and_then(|a| valid_token(a));
            match reply {
                Err(e) => {
                    let code = e.code().unwrap_or("");
                    prop_assert!(
                        ["CORRUPT", "TOKEN_EXHAUSTED", "WRONGTYPE", "ERR"].contains(&code),
                        "untyped error {e:?}"
                    );
                    if code == "CORRUPT" {
                        let key = e.detail().unwrap_or("").split(' ').next().unwrap_or("");
                        prop_assert!(
                            c.keys.iter().any(|k| escaped(k) == key),
                            "CORRUPT names {key:?}: {e:?}"
                        );
                        prop_assert!(!key.bytes().any(|b| b.is_ascii_control()), "{key:?}");
                    }
                    // Not applied: nothing changed (a fenced Lua body's own writes to other
                    // keys are the documented exception; its mark is still restored).
                    if c.script == scripts::FENCE_EVAL {
                        prop_assert_eq!(mark_of(&before), mark_of(&after), "{:?}", e);
                    } else {
                        prop_assert_eq!(&before, &after, "an error changed state: {:?}", e);
                    }
                }
                Ok(v) => {
                    let (mb, ma) = (mark_of(&before), mark_of(&after));
                    if mb != ma {
                        let fence = c.script == scripts::FENCE_SET
                            || c.script == scripts::FENCE_HSET
                            || c.script == scripts::FENCE_DEL
                            || c.script == scripts::FENCE_MULTI
                            || c.script == scripts::FENCE_EVAL;
                        let moved_to = ma.as_deref().and_then(valid_token);
                        let old = mb.as_deref().and_then(valid_token).unwrap_or(0);
                        if fence {
                            prop_assert_eq!(&v, &Value::Int(1), "mark moved without applying");
                            prop_assert_eq!(moved_to, token_arg(0));
                        } else if c.script == scripts::RAISE {
                            prop_assert_eq!(&v, &Value::Int(1));
                            prop_assert_eq!(moved_to, token_arg(1));
                        } else {
                            prop_assert!(c.script == scripts::ACQUIRE, "{v:?}");
                            let granted = matches!(&v, Value::Array(a) if a.first() == Some(&Value::Int(1)));
                            prop_assert!(granted, "{v:?}");
                        }
                        // Never down (an equal token may rewrite `+5` as `5`).
                        prop_assert!(
                            moved_to.is_some_and(|t| t >= old),
                            "the mark moved to {ma:?} from {mb:?}"
                        );
                    }
                }
            }
            Ok(())
        })
    })
    .map_err(|e| e.to_string())
}
