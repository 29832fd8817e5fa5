//! Properties of an administrator's forced release (`LeaseBackend::force_release`) over the
//! executable specification (`MemoryBackend`), under both token schemes:
//!
//! - it removes whoever holds the lease and says truthfully whether anyone did (and who);
//! - when fenced, the token it mints is above every token minted before it and is the mark:
//!   every earlier holder's fenced write is refused from then on;
//! - the next acquire mints above it, and that holder's fenced writes are accepted (the next
//!   legitimate holder is never refused);
//! - unfenced, nothing is minted and the mark is untouched.
//!
//! Negative control (`deleting_without_minting_leaves_the_old_holder_writing`): removing the
//! lock key alone, as a plain `DEL` would, lets the broken holder's write through; the mint is
//! what fences it out.

use std::sync::Arc;
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend, MemoryWrite};
use lease_core::{
    AcquireOutcome, AcquireRequest, ForceReleaseOutcome, LeaseSpec, Owner, ReleaseRequest, Token,
    TokenScheme, Ttl,
};
use proptest::prelude::*;

const OWNERS: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Op {
    Acquire(usize),
    Release(usize),
    Force,
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize).prop_map(Op::Acquire),
        2 => (0..3usize).prop_map(Op::Release),
        2 => Just(Op::Force),
        1 => Just(Op::Expire),
    ]
}

fn spec() -> Arc<LeaseSpec> {
    Arc::new(LeaseSpec::lock(["k"], Some("k:fence".to_owned())).unwrap())
}

fn write(token: Token, mem: &MemoryBackend) -> bool {
    let w = MemoryWrite::Set {
        key: "out".into(),
        value: token.to_string(),
    };
    mem.fenced_now("k:fence:applied", token, &[w])
        .unwrap()
        .is_applied()
}

fn acquire(mem: &MemoryBackend, owner: &str) -> AcquireOutcome {
    let req = AcquireRequest::new(
        spec(),
        Owner::new(owner).unwrap(),
        Ttl::new(Duration::from_secs(10)).unwrap(),
    );
    mem.acquire_now(&req).unwrap()
}

proptest! {
    #[test]
    fn forced_release_fences_out_every_earlier_holder_and_admits_the_next(
        ops in proptest::collection::vec(op(), 1..40),
        clock_floored in any::<bool>(),
    ) {
        let clock = ManualClock::new();
        let scheme = if clock_floored { TokenScheme::ClockFloored } else { TokenScheme::Counter };
        let mem = MemoryBackend::new(clock.clone()).with_token_scheme(scheme);
        let spec = spec();
        let mut minted: Vec<Token> = Vec::new();
        let mut holder: Option<&str> = None;
        for op in &ops {
            match op {
                Op::Acquire(i) => {
                    if let AcquireOutcome::Acquired { token: Some(t), .. } = acquire(&mem, OWNERS[*i]) {
                        prop_assert!(minted.iter().all(|m| *m < t), "tokens rise");
                        // The new holder is admitted, whatever was forced before.
                        prop_assert!(write(t, &mem), "the next holder's write is accepted");
                        minted.push(t);
                        holder = Some(OWNERS[*i]);
                    }
                }
                Op::Release(i) => {
                    let req = ReleaseRequest::new(Arc::clone(&spec), Owner::new(OWNERS[*i]).unwrap());
                    if mem.release_now(&req).unwrap() == lease_core::ReleaseOutcome::Released {
                        holder = None;
                    }
                }
                Op::Expire => {
                    clock.advance(Duration::from_secs(11));
                    holder = None;
                }
                Op::Force => {
                    let out = mem.force_release_now(&spec).unwrap();
                    match (&out, holder) {
                        (ForceReleaseOutcome::Released { holder: h, .. }, Some(expected)) => {
                            prop_assert_eq!(h.as_str(), expected);
                        }
                        (ForceReleaseOutcome::NotHeld { .. }, None) => {}
                        _ => prop_assert!(false, "{out:?} while held by {holder:?}"),
                    }
                    holder = None;
                    prop_assert_eq!(mem.get("k"), None, "the lock key is gone");
                    let f = out.fence().expect("fenced");
                    prop_assert!(minted.iter().all(|m| *m < f), "above every earlier token");
                    prop_assert_eq!(mem.get("k:fence:applied"), Some(f.to_string()));
                    for t in &minted {
                        prop_assert!(!write(*t, &mem), "earlier token {t} refused after the force");
                    }
                    minted.push(f);
                }
            }
        }
    }
}

#[test]
fn unfenced_forced_release_mints_nothing() {
    let mem = MemoryBackend::new(ManualClock::new());
    let spec = Arc::new(LeaseSpec::lock(["u"], None).unwrap());
    assert_eq!(
        mem.force_release_now(&spec).unwrap(),
        ForceReleaseOutcome::NotHeld { fence: None }
    );
    let req = AcquireRequest::new(
        Arc::clone(&spec),
        Owner::new("a").unwrap(),
        Ttl::new(Duration::from_secs(1)).unwrap(),
    );
    mem.acquire_now(&req).unwrap();
    assert_eq!(
        mem.force_release_now(&spec).unwrap(),
        ForceReleaseOutcome::Released {
            holder: "a".into(),
            fence: None
        }
    );
    assert_eq!(mem.get("u"), None);
}

#[test]
fn a_key_of_another_type_is_refused_and_nothing_changes() {
    let mem = MemoryBackend::new(ManualClock::new());
    let t = match acquire(&mem, "a") {
        AcquireOutcome::Acquired { token: Some(t), .. } => t,
        other => panic!("{other:?}"),
    };
    let w = mem
        .fenced_now(
            "k:fence:applied",
            t,
            &[MemoryWrite::HSet {
                key: "h".into(),
                field: "f".into(),
                value: "v".into(),
            }],
        )
        .unwrap();
    assert!(w.is_applied());
    let odd = Arc::new(LeaseSpec::lock(["h"], Some("k:fence".to_owned())).unwrap());
    assert!(mem.force_release_now(&odd).is_err());
    assert_eq!(mem.get("k:fence"), Some(t.to_string()), "nothing minted");
    assert!(write(t, &mem), "the holder still writes");
}

#[test]
fn deleting_without_minting_leaves_the_old_holder_writing() {
    let mem = MemoryBackend::new(ManualClock::new());
    let t = match acquire(&mem, "a") {
        AcquireOutcome::Acquired { token: Some(t), .. } => t,
        other => panic!("{other:?}"),
    };
    // A plain DEL of the lock key: the lock is free, but the mark did not move.
    mem.lose_key("k");
    assert!(
        write(t, &mem),
        "the broken holder still writes: the mint is what fences it"
    );
    // The forced release's mint refuses it.
    let f = mem.force_release_now(&spec()).unwrap().fence().unwrap();
    assert!(f > t);
    assert!(!write(t, &mem));
}
