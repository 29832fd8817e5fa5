//! Example-based tests of election rules added after the property suites: the voluntary
//! step-down delay, token-regression reports, the validity margin, and in-memory batch types.

use std::time::Duration;

use lease_core::election::{Event, Op, Reply, RequestKind};
use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
use lease_core::{
    AcquireOutcome, BackendError, Election, ElectionConfig, FenceOutcome, FenceState, Instant,
    Token,
};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn config() -> ElectionConfig {
    ElectionConfig::builder("e", "a")
        .ttl(ms(3000))
        .build()
        .unwrap()
}

/// Elects `m` at `now` with `token`; returns the renew request id polled right after.
fn elect(m: &mut Election, now: Instant, token: u64) {
    let req = m.poll_request(now).expect("acquire");
    assert!(matches!(req.kind, RequestKind::Acquire(_)));
    m.handle_reply(
        now,
        req.id,
        Reply::Acquire(Ok(AcquireOutcome::Acquired {
            token: Some(Token::new(token).unwrap()),
            fence: FenceState::UNKNOWN,
        })),
    );
    // The acquire set the TTL: no renewal before one is due.
    assert!(m.poll_request(now).is_none(), "no renewal at once");
}

fn drain(m: &mut Election) -> Vec<Event> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

#[test]
fn voluntary_step_down_waits_longer_than_one_acquire_interval() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 3, t0);
    elect(&mut m, t0, 1);
    assert!(m.resign(t0 + ms(10)));
    let rel = m.poll_request(t0 + ms(10)).expect("release");
    assert!(matches!(rel.kind, RequestKind::Release(_)));
    m.handle_reply(
        t0 + ms(12),
        rel.id,
        Reply::Release(Ok(lease_core::ReleaseOutcome::Released)),
    );
    // acquire interval = 1500 ms: a follower polls within it, so we wait 1650 ms.
    assert_eq!(m.poll_timeout(), Some(t0 + ms(10) + ms(1650)));
    assert!(m.poll_request(t0 + ms(1600)).is_none());
    assert!(m.poll_request(t0 + ms(1660)).is_some());
}

#[test]
fn a_token_not_above_one_already_granted_is_reported() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 3, t0);
    elect(&mut m, t0, 7);
    drain(&mut m);
    m.resign(t0);
    let rel = m.poll_request(t0).unwrap();
    m.handle_reply(
        t0,
        rel.id,
        Reply::Release(Ok(lease_core::ReleaseOutcome::Released)),
    );
    drain(&mut m);
    // The store restarted empty: the next term gets token 1 again.
    let t1 = t0 + ms(5000);
    elect(&mut m, t1, 1);
    let events = drain(&mut m);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Error { op: Op::Acquire, error: BackendError::TokenRegression { previous, minted } }
            if previous.get() == 7 && minted.get() == 1
    )), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Elected { token, .. } if token.get() == 1))
    );
    assert_eq!(m.highest_token().map(Token::get), Some(7));
}

#[test]
fn the_validity_margin_shortens_every_lease() {
    let t0 = Instant::ZERO;
    let mut m = Election::new(config(), 3, t0);
    m.set_validity_margin(ms(32));
    elect(&mut m, t0, 1);
    assert_eq!(m.valid_until(), Some(t0 + ms(3000 - 32)));
    m.handle_timeout(t0 + ms(2968));
    assert!(
        m.token(t0 + ms(2968)).is_none(),
        "never leader at or after the shortened deadline"
    );
}

#[test]
fn memory_batches_see_their_own_types() {
    let clock = ManualClock::new();
    let b = MemoryBackend::new(clock);
    let t = Token::new(1).unwrap();
    b.put("k", "string");
    // DEL then HSET on a string key is fine: the DEL removed the string.
    let ok = b
        .fenced_now(
            "m",
            t,
            &[
                MemoryWrite::Del {
                    keys: vec!["k".into()],
                },
                MemoryWrite::HSet {
                    key: "k".into(),
                    field: "f".into(),
                    value: "v".into(),
                },
            ],
        )
        .unwrap();
    assert_eq!(ok, FenceOutcome::Applied);
    assert_eq!(b.hget("k", "f").as_deref(), Some("v"));
    // SET then HSET on one key is refused whole: nothing written, mark unmoved.
    let err = b.fenced_now(
        "m",
        Token::new(2).unwrap(),
        &[
            MemoryWrite::Set {
                key: "x".into(),
                value: "1".into(),
            },
            MemoryWrite::HSet {
                key: "x".into(),
                field: "f".into(),
                value: "v".into(),
            },
        ],
    );
    assert!(matches!(err, Err(BackendError::Refused(_))));
    assert_eq!(b.get("x"), None);
    assert_eq!(b.get("m").as_deref(), Some("1"));
    // A mark above 2^53 (never written by us) is corrupt, as the Redis scripts say: a typed,
    // permanent refusal naming the key, nothing written.
    b.put("m2", "9007199254740993");
    let corrupt = b.fenced_now(
        "m2",
        Token::MAX,
        &[MemoryWrite::Set {
            key: "y".into(),
            value: "1".into(),
        }],
    );
    assert!(
        matches!(&corrupt, Err(BackendError::Corrupt { key, .. }) if key == "m2"),
        "{corrupt:?}"
    );
    assert_eq!(b.get("y"), None);
}

/// The first renewal of a term is due one renew interval after the acquire's send, not at
/// once (the acquire set the TTL), and at once when the reply came later than that.
#[test]
fn the_first_renewal_is_due_one_interval_after_the_acquire() {
    let cfg = ElectionConfig::builder("jobs", "a")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let interval = cfg.renew_interval();
    for reply_after in [
        Duration::from_millis(5),
        interval + Duration::from_millis(5),
    ] {
        let t0 = Instant::ZERO;
        let mut m = Election::new(cfg.clone(), 1, t0);
        let req = m.poll_request(t0).expect("acquire");
        let now = t0 + reply_after;
        m.handle_reply(
            now,
            req.id,
            Reply::Acquire(Ok(AcquireOutcome::Acquired {
                token: Some(Token::new(1).unwrap()),
                fence: FenceState::UNKNOWN,
            })),
        );
        let due = (t0 + interval).max(now);
        if due > now {
            assert!(m.poll_request(now).is_none(), "no renewal before it is due");
            assert_eq!(m.poll_timeout(), Some(due));
        }
        let renew = m.poll_request(due).expect("the renewal when due");
        assert!(matches!(renew.kind, RequestKind::Renew(_)));
    }
}
