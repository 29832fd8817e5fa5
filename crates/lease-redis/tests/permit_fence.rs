//! Permit-fenced writes on a real Redis: the resource-side rule of a semaphore's "at most N"
//! (`lease_core::semaphore`, "Fenced writes") against its executable specification, and its
//! guarantees.
//!
//! - `permit_writes_match_the_memory_backend`: seeded sequences of obtains, releases and
//!   writes (current tokens, older tokens of the same owner, owners without a permit, every
//!   write kind) give the same outcomes and the same stored values on Redis and in memory;
//! - `an_expired_permit_is_refused_although_its_token_is_above_the_mark` (the negative
//!   control of the plain fence rule): after the server expired a permit, its write is refused
//!   as not current, while the lock's fence rule would still apply it;
//! - `all_current_permits_write_and_no_more`: with `N = 2` both holders write (the older
//!   token too, which the lock's rule would refuse), a third cannot obtain, and once one
//!   releases, its writes stop and the newcomer's are applied;
//! - `a_newer_permit_of_the_same_owner_fences_the_older`, `the_owner_mark_expires_with_the_semaphore`;
//! - `cluster_targets_are_checked_before_any_round_trip`, `a_write_without_a_reply_is_unknown`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
use lease_core::rng::SplitMix64;
use lease_core::semaphore::{
    PermitCount, PermitFencing, PermitRequest, PermitWriteOutcome, semaphore_spec,
};
use lease_core::{
    AcquireOutcome, AcquireRequest, Effect, FenceMark, FenceOutcome, Fencing, LeaseBackend,
    LeaseSpec, Token, Ttl,
};
use lease_redis::{FencedWrite, RedisBackend, RedisLeaseError, Topology};

const N: u32 = 2;

fn spec() -> Arc<LeaseSpec> {
    Arc::new(semaphore_spec("{sem}", None).expect("spec"))
}

fn permit(spec: &Arc<LeaseSpec>, who: &str, ttl: Ttl) -> PermitRequest {
    PermitRequest::new(
        AcquireRequest::new(Arc::clone(spec), owner(who), ttl),
        PermitCount::new(N).expect("count"),
    )
}

async fn obtain(backend: &RedisBackend<Conn>, spec: &Arc<LeaseSpec>, who: &str, ttl: Ttl) -> Token {
    let got = backend.acquire_permit(&permit(spec, who, ttl)).await;
    match got {
        Ok(o) => acquired_token(&o).expect("fenced"),
        Err(e) => panic!("obtain {who}: {e}"),
    }
}

fn bounded<F: std::future::Future>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(10), f)
}

/// One write, as both backends take it.
fn writes(kind: u64, n: u64) -> (Vec<FencedWrite>, Vec<MemoryWrite>) {
    let (key, value) = (format!("{{sem}}:k{}", n % 3), format!("v{n}"));
    match kind % 4 {
        0 => (
            vec![FencedWrite::set(key.clone(), value.clone())],
            vec![MemoryWrite::Set { key, value }],
        ),
        1 => (
            vec![FencedWrite::hset("{sem}:h", key.clone(), value.clone())],
            vec![MemoryWrite::HSet {
                key: "{sem}:h".into(),
                field: key,
                value,
            }],
        ),
        2 => (
            vec![FencedWrite::del([key.clone()])],
            vec![MemoryWrite::Del { keys: vec![key] }],
        ),
        _ => (
            vec![
                FencedWrite::set(key.clone(), value.clone()),
                FencedWrite::hset("{sem}:h", "last", value.clone()),
            ],
            vec![
                MemoryWrite::Set {
                    key,
                    value: value.clone(),
                },
                MemoryWrite::HSet {
                    key: "{sem}:h".into(),
                    field: "last".into(),
                    value,
                },
            ],
        ),
    }
}

fn norm(r: Result<PermitWriteOutcome, String>) -> String {
    format!("{r:?}")
}

#[tokio::test]
async fn permit_writes_match_the_memory_backend() {
    let (_server, backend, mut raw) = setup().await;
    let owners = ["a", "b", "c"];
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..24u64 {
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut raw)
            .await
            .expect("flush");
        let mem = MemoryBackend::new(ManualClock::new());
        let spec = spec();
        let long = ttl_ms(LONG);
        let mut rng = SplitMix64::new(seed);
        // Every token each owner was given, newest last.
        let mut tokens: Vec<Vec<Token>> = vec![Vec::new(); owners.len()];
        for step in 0..30 {
            let who = usize::try_from(rng.next_u64() % 3).expect("small");
            let o = owner(owners[who]);
            match rng.next_u64() % 5 {
                0 => {
                    let req = permit(&spec, owners[who], long);
                    let m = mem.acquire_permit_now(&req);
                    let r = bounded(backend.acquire_permit(&req))
                        .await
                        .expect("bounded");
                    let token_of = |r: &Result<AcquireOutcome, lease_core::BackendError>| match r {
                        Ok(AcquireOutcome::Acquired { token, .. }) => format!("acquired {token:?}"),
                        Ok(other) => format!("{}", matches!(other, AcquireOutcome::Held { .. })),
                        Err(e) => format!("{e}"),
                    };
                    assert_eq!(token_of(&r), token_of(&m), "seed {seed} step {step}");
                    if let Ok(AcquireOutcome::Acquired { token: Some(t), .. }) = r {
                        tokens[who].push(t);
                    }
                }
                1 => {
                    let req = release(&spec, owners[who], None);
                    let m = mem.release_permit_now(&req);
                    let r = bounded(backend.release_permit(&req))
                        .await
                        .expect("bounded");
                    assert_eq!(
                        format!("{r:?}"),
                        format!("{m:?}"),
                        "seed {seed} step {step}"
                    );
                }
                _ => {
                    // The newest token, an older one of the same owner, or any token of an
                    // owner who never obtained.
                    let pick = rng.next_u64();
                    let t = match tokens[who].as_slice() {
                        [] => token(1 + pick % 5),
                        all if pick.is_multiple_of(3) => all[0],
                        all => all[all.len() - 1],
                    };
                    let (rw, mw) = writes(rng.next_u64(), pick);
                    let m = mem
                        .permit_fencer(&spec, &o, t)
                        .expect("fencer")
                        .apply_all(mw)
                        .await
                        .map_err(|e| e.to_string());
                    let r = bounded(
                        backend
                            .permit_fencer(&spec, &o, t)
                            .expect("fencer")
                            .apply_all(rw),
                    )
                    .await
                    .expect("bounded")
                    .map_err(|e| e.to_string());
                    let (r, m) = (norm(r), norm(m));
                    seen.insert(
                        r.split(['(', ')', ' ', '{'])
                            .nth(1)
                            .unwrap_or("")
                            .to_owned(),
                    );
                    assert_eq!(r, m, "seed {seed} step {step} {t:?}");
                }
            }
        }
        // The same values were written.
        for key in ["{sem}:k0", "{sem}:k1", "{sem}:k2"] {
            assert_eq!(get(&mut raw, key).await, mem.get(key), "seed {seed}: {key}");
        }
        for field in ["{sem}:k0", "{sem}:k1", "{sem}:k2", "last"] {
            assert_eq!(
                hget(&mut raw, "{sem}:h", field).await,
                mem.hget("{sem}:h", field),
                "seed {seed}: {field}"
            );
        }
    }
    // Every outcome was met (the sequences exercise the rule, not only its happy path).
    for outcome in ["Applied", "NotCurrent", "Stale"] {
        assert!(seen.contains(outcome), "{outcome} never seen: {seen:?}");
    }
}

#[tokio::test]
async fn an_expired_permit_is_refused_although_its_token_is_above_the_mark() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let t = obtain(&backend, &spec, "a", ttl_ms(300)).await;
    let fencer = backend
        .permit_fencer(&spec, &owner("a"), t)
        .expect("fencer");
    let applied = bounded(fencer.set("{sem}:out", "1"))
        .await
        .expect("bounded");
    assert_eq!(applied.expect("write"), PermitWriteOutcome::Applied);
    // No signal exists for "the server's clock passed the expiry": wait past it.
    tokio::time::sleep(Duration::from_millis(450)).await;
    // The token is equal to the owner's mark, and above the lease mark of the semaphore: the
    // lock's rule accepts it (the negative control: that rule cannot see the expiry) ...
    let plain = backend.fencer(&spec.mark_key().expect("fenced"), t);
    let got = bounded(plain.set("{sem}:plain", "1"))
        .await
        .expect("bounded");
    assert_eq!(got.expect("plain write"), FenceOutcome::Applied);
    // ... the permit's rule refuses it, even under a higher token.
    for tok in [t, token(t.get() + 5)] {
        let got = bounded(fencer.with_token(tok).set("{sem}:out", "2"))
            .await
            .expect("bounded");
        assert_eq!(
            got.expect("write"),
            PermitWriteOutcome::NotCurrent,
            "{tok:?}"
        );
    }
    assert_eq!(get(&mut raw, "{sem}:out").await.as_deref(), Some("1"));
}

#[tokio::test]
async fn all_current_permits_write_and_no_more() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let ta = obtain(&backend, &spec, "a", long).await;
    let tb = obtain(&backend, &spec, "b", long).await;
    assert!(ta < tb);
    let fa = backend
        .permit_fencer(&spec, &owner("a"), ta)
        .expect("fencer");
    let fb = backend
        .permit_fencer(&spec, &owner("b"), tb)
        .expect("fencer");
    for f in [&fb, &fa, &fb, &fa] {
        let got = bounded(f.hset("{sem}:log", f.owner(), f.token().get()))
            .await
            .expect("bounded");
        assert_eq!(
            got.expect("write"),
            PermitWriteOutcome::Applied,
            "{}",
            f.owner()
        );
    }
    // The lock's rule would have refused a's older token once b wrote (control).
    let plain = backend.fencer(&spec.mark_key().expect("fenced"), ta);
    let got = bounded(plain.set("{sem}:plain", "1"))
        .await
        .expect("bounded");
    assert!(matches!(got.expect("plain"), FenceOutcome::Stale { .. }));
    // A third owner can neither obtain nor write.
    let full = backend.acquire_permit(&permit(&spec, "c", long)).await;
    assert!(matches!(full, Ok(AcquireOutcome::Held { .. })), "{full:?}");
    let fc = backend
        .permit_fencer(&spec, &owner("c"), token(tb.get() + 1))
        .expect("fencer");
    let got = bounded(fc.set("{sem}:out", "c")).await.expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::NotCurrent);
    // a gives its permit back: its writes stop, c's start.
    let released = backend.release_permit(&release(&spec, "a", None)).await;
    assert!(released.is_ok(), "{released:?}");
    let tc = obtain(&backend, &spec, "c", long).await;
    let got = bounded(fa.set("{sem}:out", "a")).await.expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::NotCurrent);
    let got = bounded(fc.with_token(tc).set("{sem}:out", "c"))
        .await
        .expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    let got = bounded(fb.set("{sem}:out", "b")).await.expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    assert_eq!(get(&mut raw, "{sem}:out").await.as_deref(), Some("b"));
}

#[tokio::test]
async fn a_newer_permit_of_the_same_owner_fences_the_older() {
    let (_server, backend, _raw) = setup().await;
    let spec = spec();
    let long = ttl_ms(LONG);
    let old = obtain(&backend, &spec, "a", long).await;
    let new = obtain(&backend, &spec, "a", long).await; // the same owner takes its permit over
    assert!(old < new);
    let f = backend
        .permit_fencer(&spec, &owner("a"), old)
        .expect("fencer");
    let got = bounded(f.set("{sem}:out", "old")).await.expect("bounded");
    assert_eq!(
        got.expect("write"),
        PermitWriteOutcome::Applied,
        "no newer write yet"
    );
    let got = bounded(f.with_token(new).set("{sem}:out", "new"))
        .await
        .expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    let got = bounded(f.set("{sem}:out", "old again"))
        .await
        .expect("bounded");
    assert_eq!(
        got.expect("write"),
        PermitWriteOutcome::Stale {
            mark: FenceMark::at(new)
        }
    );
    // Invalid tokens never pass: 0 cannot be a Token, above 2^53 neither (typed before).
    assert!(Token::new(0).is_err());
}

#[tokio::test]
async fn the_owner_mark_expires_with_the_semaphore() {
    let (_server, backend, mut raw) = setup().await;
    let spec = spec();
    let t = obtain(&backend, &spec, "a", ttl_ms(400)).await;
    let _b = obtain(&backend, &spec, "b", ttl_ms(LONG)).await;
    let f = backend
        .permit_fencer(&spec, &owner("a"), t)
        .expect("fencer");
    assert_eq!(
        bounded(f.set("{sem}:out", "1"))
            .await
            .expect("bounded")
            .expect("write"),
        PermitWriteOutcome::Applied
    );
    let mark = f.mark_key().to_owned();
    assert_eq!(mark, "{sem}:fence:applied:a");
    assert_eq!(get(&mut raw, &mark).await, Some(t.get().to_string()));
    let permits_ttl = pttl(&mut raw, "{sem}:permits").await;
    let mark_ttl = pttl(&mut raw, &mark).await;
    // As long as the permits key (which lasts as long as the longest permit, b's), and never
    // less than a's permit (a few ms of slack for the reads in between).
    assert!(
        mark_ttl > 400 && mark_ttl <= permits_ttl + 5,
        "{mark_ttl} vs {permits_ttl}"
    );
    // Once nothing is held, nothing of the writes' marks is left.
    let () = redis::cmd("DEL")
        .arg("{sem}:permits")
        .arg("{sem}:size")
        .query_async::<i64>(&mut raw)
        .await
        .map(drop)
        .expect("DEL");
    assert_eq!(
        bounded(f.set("{sem}:out", "2"))
            .await
            .expect("bounded")
            .expect("write"),
        PermitWriteOutcome::NotCurrent
    );
}

#[tokio::test]
async fn cluster_targets_are_checked_before_any_round_trip() {
    let (_server, _backend, raw) = setup().await;
    let counting = Counting::new(raw);
    let cluster = RedisBackend::with_topology(counting.clone(), Topology::Cluster);
    let spec = spec();
    let f = cluster
        .permit_fencer(&spec, &owner("a"), token(1))
        .expect("fencer");
    let got = bounded(f.set("elsewhere", "x")).await.expect("bounded");
    assert!(matches!(got, Err(RedisLeaseError::Slot(_))), "{got:?}");
    assert_eq!(counting.calls(), 0, "refused before any round trip");
    // A lock's spec is no semaphore: no fencer.
    let lock = lock(&["{sem}:lock"], Some("{sem}:fence"));
    assert!(
        cluster
            .permit_fencer(&lock, &owner("a"), token(1))
            .is_none()
    );
    assert!(
        cluster
            .permit_fencer(
                &Arc::new(semaphore_spec("{sem}", None).expect("spec")),
                &owner("a"),
                token(1)
            )
            .is_some()
    );
}

#[tokio::test]
async fn a_write_without_a_reply_is_unknown() {
    let (server, _backend, mut raw) = setup().await;
    let proxy = lease_testkit::proxy::FaultProxy::start(server.addr())
        .await
        .expect("proxy");
    let client = redis::Client::open(format!("redis://{}/", proxy.addr())).expect("client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let backend = RedisBackend::new(conn)
        .with_token_scheme(lease_core::TokenScheme::Counter)
        .with_fence_timeout(Duration::from_millis(300));
    let spec = spec();
    let t = obtain(&backend, &spec, "a", ttl_ms(LONG)).await;
    let f = backend
        .permit_fencer(&spec, &owner("a"), t)
        .expect("fencer");
    // Once with replies, so the server has the script (a NOSCRIPT held back would leave the
    // write unknown but not applied).
    let got = bounded(f.set("{sem}:out", "0")).await.expect("bounded");
    assert_eq!(got.expect("write"), PermitWriteOutcome::Applied);
    proxy.set_mode(lease_testkit::proxy::Mode::DropReplies);
    let got = bounded(f.set("{sem}:out", "1")).await.expect("bounded");
    match got {
        Err(e) => assert_eq!(e.effect(), Effect::Unknown, "{e}"),
        Ok(o) => panic!("a write without a reply reported {o:?}"),
    }
    // Unknown, and in fact applied: the server got the request.
    assert_eq!(get(&mut raw, "{sem}:out").await.as_deref(), Some("1"));
    proxy.set_mode(lease_testkit::proxy::Mode::Pass);
}
