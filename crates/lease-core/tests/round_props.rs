//! Properties of the Redlock round machine (`lease_core::quorum::Round`).
//!
//! - every phase asks every node once, with one deadline (`phase start + bound`); the raise
//!   phase asks exactly the nodes that granted the acquisition, for the maximum of their tokens;
//! - an acquire is granted iff at least a quorum granted (and, fenced, raised) and the validity
//!   `ttl − elapsed − drift` is positive, and then its validity ends at `start + ttl − drift`;
//! - a failed acquire asks **every** node to clean up (compare-and-delete for our owner), then
//!   is `Held` iff a quorum reported another holder, else a `QuorumError` listing every node
//!   that did not succeed, in node order; with transient causes it is `Unavailable` iff every
//!   node answered the cleanup, else `OutcomeUnknown`;
//! - a renew is renewed iff a quorum renewed with validity left; `NotHeld` (after a cleanup of
//!   every node) iff not that and a quorum said "not ours"; otherwise an error, and nothing is
//!   deleted;
//! - early verdict: with the replies in any order, a phase is judged exactly when its outcome
//!   can no longer change (acquire, raise: a quorum succeeded or can no longer succeed; renew,
//!   release: a quorum succeeded, a quorum said "not ours", or neither can happen), never
//!   earlier, and the verdict is the one waiting for every reply gives;
//! - late replies (to requests of a phase already judged) are accepted: before the verdict of
//!   a failed acquire they replace the node's "unanswered" cause (so the error is the one
//!   waiting for all gives), after the verdict they change nothing; a reply not waited for is
//!   never reported as "not applied";
//! - replies the round does not await (unknown, repeated) are refused and change nothing.

use std::sync::Arc;
use std::time::Duration;

use lease_core::quorum::{
    NodeCause, NodeReply, NodeRequest, NodeRequestId, NodeRequestKind, Phase, Quorum, QuorumError,
    Round, RoundFailure, RoundInputError, Verdict, drift, quorum, validity,
};
use lease_core::{
    AcquireOutcome, AcquireRequest, BackendError, FenceState, Instant, LeaseSpec, Owner,
    ReleaseOutcome, ReleaseRequest, RenewOutcome, RenewRequest, Token, Ttl,
};
use proptest::prelude::*;

const BOUND: Duration = Duration::from_millis(100);

/// What one node answers in the acquire phase.
#[derive(Clone, Debug)]
enum Ans {
    Grant(u64),
    Held(u8),
    Unavailable,
    TimedOut,
}

fn ans() -> impl Strategy<Value = Ans> {
    prop_oneof![
        3 => (1u64..50).prop_map(Ans::Grant),
        1 => (0u8..2).prop_map(Ans::Held),
        1 => Just(Ans::Unavailable),
        1 => Just(Ans::TimedOut),
    ]
}

fn nodes() -> impl Strategy<Value = usize> {
    prop_oneof![Just(3usize), Just(5), Just(7)]
}

fn machine(n: usize, factor: f64) -> Quorum {
    let addresses: Vec<String> = (0..n).map(|i| format!("n{i}:6379")).collect();
    Quorum::new(&addresses, factor).expect("valid")
}

fn spec(fenced: bool) -> Arc<LeaseSpec> {
    Arc::new(if fenced {
        LeaseSpec::election("jobs")
    } else {
        LeaseSpec::lock(["k"], None).expect("valid")
    })
}

fn acquire_req(spec: &Arc<LeaseSpec>, ttl: Duration) -> AcquireRequest {
    AcquireRequest::new(
        Arc::clone(spec),
        Owner::new("me").expect("valid"),
        Ttl::new(ttl).expect("valid"),
    )
}

fn drain(round: &mut Round) -> Vec<NodeRequest> {
    std::iter::from_fn(|| round.poll_request()).collect()
}

fn acquire_reply(a: &Ans) -> NodeReply {
    match a {
        Ans::Grant(t) => NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
            token: Token::new(*t).ok(),
            fence: FenceState::UNKNOWN,
        })),
        Ans::Held(h) => NodeReply::Acquire(Ok(AcquireOutcome::Held {
            holder: Some(format!("other-{h}")),
            remaining: Some(Duration::from_millis(500)),
            fence: FenceState::UNKNOWN,
        })),
        Ans::Unavailable => NodeReply::Acquire(Err(BackendError::Unavailable("down".into()))),
        Ans::TimedOut => NodeReply::TimedOut,
    }
}

/// Checks that `requests` is a cleanup of every node for our owner, and answers it: node `i`
/// answers iff `answered[i]`.
fn answer_cleanup(
    round: &mut Round,
    n: usize,
    answered: &[bool],
    at: Instant,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(round.phase(), Phase::Cleanup);
    let requests = drain(round);
    prop_assert_eq!(
        requests.iter().map(|r| r.node).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>(),
        "every node is cleaned up"
    );
    for r in &requests {
        match &r.kind {
            NodeRequestKind::Release(req) => {
                prop_assert_eq!(req.owner.as_str(), "me");
                prop_assert_eq!(req.term_token, None);
            }
            other => prop_assert!(false, "not a cleanup: {:?}", other),
        }
        let reply = if answered[r.node] {
            NodeReply::Release(Ok(ReleaseOutcome::NotHeld))
        } else {
            NodeReply::TimedOut
        };
        round
            .handle_reply(at, r.id, reply)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    Ok(())
}

/// A random order in which the `n` nodes reply.
fn order() -> impl Strategy<Value = Vec<usize>> {
    Just((0..7).collect::<Vec<usize>>()).prop_shuffle()
}

fn take_order(order: &[usize], n: usize) -> Vec<usize> {
    order.iter().copied().filter(|&i| i < n).collect()
}

/// Feeds the replies of `requests` in `order` at `at` and returns after how many replies the
/// phase was judged (the phase changed or the verdict appeared), checking it never happened
/// before `decided(prefix)` said so and always when it did. Every reply is fed, the ones after
/// the decision as late replies (accepted).
fn feed_in_order(
    round: &mut Round,
    requests: &[NodeRequest],
    order: &[usize],
    at: Instant,
    reply: impl Fn(usize) -> NodeReply,
    decided: impl Fn(&[usize]) -> bool,
) -> Result<usize, TestCaseError> {
    let phase = round.phase();
    let mut judged_at = None;
    for (k, &node) in order.iter().enumerate() {
        let r = requests.iter().find(|r| r.node == node).expect("asked");
        round
            .handle_reply(at, r.id, reply(node))
            .map_err(|e| TestCaseError::fail(format!("{e} (reply {k}, node {node})")))?;
        if judged_at.is_none() {
            let judged = round.phase() != phase;
            prop_assert_eq!(
                judged,
                decided(&order[..=k]),
                "judged exactly when decidable, after {} replies",
                k + 1
            );
            if judged {
                judged_at = Some(k + 1);
            }
        }
    }
    prop_assert!(judged_at.is_some(), "judged once every reply is in");
    Ok(judged_at.unwrap_or(order.len()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn acquire_rules(
        n in nodes(),
        fenced in any::<bool>(),
        answers in proptest::collection::vec(ans(), 7),
        raised in proptest::collection::vec(any::<bool>(), 7),
        cleanup in proptest::collection::vec(prop_oneof![4 => Just(true), 1 => Just(false)], 7),
        order1 in order(),
        order2 in order(),
        ttl_ms in 50u64..3000,
        elapsed1_ms in 0u64..3000,
        elapsed2_ms in 0u64..1000,
        start_ms in 0u64..10_000,
    ) {
        let answers = &answers[..n];
        let q = quorum(n);
        let factor = 0.01;
        let quorum_m = machine(n, factor);
        prop_assert_eq!(quorum_m.quorum(), q);
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::from_origin(Duration::from_millis(start_ms));
        let spec = spec(fenced);
        let mut round = quorum_m.acquire(acquire_req(&spec, ttl), BOUND, start);

        // Acquire phase: every node once, one deadline.
        let requests = drain(&mut round);
        prop_assert_eq!(requests.iter().map(|r| r.node).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
        prop_assert!(requests.iter().all(|r| r.deadline == start + BOUND));
        prop_assert!(requests.iter().all(|r| matches!(r.kind, NodeRequestKind::Acquire(_))));
        prop_assert_eq!(round.poll_timeout(), Some(start + BOUND));
        round.handle_timeout(start + (BOUND - Duration::from_nanos(1)));
        prop_assert_eq!(round.phase(), Phase::Acquire, "nothing times out before the deadline");

        // Replies in a random order: the phase is judged exactly when a quorum has granted or
        // can no longer grant, never earlier; the rest come late.
        let t1 = start + Duration::from_millis(elapsed1_ms);
        let order1 = take_order(&order1, n);
        let grants = |nodes: &[usize]| nodes.iter().filter(|&&i| matches!(answers[i], Ans::Grant(_))).count();
        let k1 = feed_in_order(&mut round, &requests, &order1, t1, |i| acquire_reply(&answers[i]), |p| {
            let g = grants(p);
            g >= q || g + (n - p.len()) < q
        })?;
        // A repeated reply is refused.
        prop_assert_eq!(
            round.handle_reply(t1, requests[0].id, NodeReply::TimedOut),
            Err(RoundInputError::UnknownRequest(requests[0].id))
        );

        // The prefix the phase was judged on.
        let mut judged: Vec<usize> = order1[..k1].to_vec();
        judged.sort_unstable();
        let granting: Vec<(usize, u64)> = judged.iter()
            .filter_map(|&i| match answers[i] { Ans::Grant(t) => Some((i, t)), _ => None }).collect();
        let all_grants = grants(&order1);
        let held = answers.iter().filter(|a| matches!(a, Ans::Held(_))).count();
        let v1 = validity(ttl, t1 - start, factor);
        let first_ok = granting.len() >= q && v1.is_some();
        // The wait-for-all rule decides the same way.
        prop_assert_eq!(first_ok, all_grants >= q && v1.is_some());

        let mut granted = false;
        let mut failure = None;
        let mut successes = all_grants;
        let mut not_raised = Vec::new();
        if first_ok && !fenced {
            granted = true;
        } else if first_ok {
            // Raise phase: exactly the nodes that granted before the phase was judged, for the
            // maximum of their tokens.
            prop_assert_eq!(round.phase(), Phase::Raise);
            let max = granting.iter().map(|g| g.1).max().and_then(|t| Token::new(t).ok());
            prop_assert_eq!(round.token(), max);
            let raises = drain(&mut round);
            prop_assert_eq!(raises.iter().map(|r| r.node).collect::<Vec<_>>(), granting.iter().map(|g| g.0).collect::<Vec<_>>());
            for r in &raises {
                let is_max = matches!(&r.kind, NodeRequestKind::Raise { token, .. } if Some(*token) == max);
                prop_assert!(is_max, "raise to the maximum: {:?}", r.kind);
                prop_assert_eq!(r.deadline, t1 + BOUND);
            }
            let t2 = t1 + Duration::from_millis(elapsed2_ms);
            let asked: Vec<usize> = raises.iter().map(|r| r.node).collect();
            let order2: Vec<usize> = take_order(&order2, n).into_iter().filter(|i| asked.contains(i)).collect();
            let m = asked.len();
            let k2 = feed_in_order(&mut round, &raises, &order2, t2, |i| NodeReply::Raise(Ok(raised[i])), |p| {
                let r = p.iter().filter(|&&i| raised[i]).count();
                r >= q || r + (m - p.len()) < q
            })?;
            let raised_judged = order2[..k2].iter().filter(|&&i| raised[i]).count();
            let raised_all = order2.iter().filter(|&&i| raised[i]).count();
            let v2 = validity(ttl, t2 - start, factor);
            prop_assert_eq!(raised_judged >= q, raised_all >= q, "the same as waiting for all");
            if raised_judged >= q && v2.is_some() {
                granted = true;
            } else {
                // Late raise replies are counted before the verdict.
                successes = raised_all;
                not_raised = asked.iter().copied().filter(|&i| !raised[i]).collect();
                failure = max.map(|token| RoundFailure::RaiseFailed { token, elapsed: t2 - start });
            }
        } else if granting.len() < q {
            failure = Some(RoundFailure::NoQuorum);
        } else {
            failure = Some(RoundFailure::ValidityExhausted { elapsed: t1 - start });
        }

        if granted {
            let verdict = round.poll_outcome();
            let ok = matches!(verdict, Some(Verdict::Acquire(Ok(AcquireOutcome::Acquired { token, .. }))) if token.is_some() == fenced);
            prop_assert!(ok, "granted");
            prop_assert_eq!(round.valid_until(), Some(start + (ttl - drift(ttl, factor))));
            prop_assert!(round.validity().is_some_and(|v| !v.is_zero()));
            prop_assert_eq!(round.outstanding(), 0, "every late reply was taken");
            prop_assert_eq!(round.poll_timeout(), None);
            return Ok(());
        }

        // Failed: cleanup of every node, then the verdict.
        prop_assert!(round.poll_outcome().is_none(), "no verdict before the cleanup");
        let t3 = round.poll_timeout().expect("awaiting the cleanup");
        answer_cleanup(&mut round, n, &cleanup, t3)?;
        prop_assert!(round.valid_until().is_none());
        let verdict = round.poll_outcome().expect("decided").into_acquire();
        if held >= q {
            prop_assert!(matches!(verdict, Ok(AcquireOutcome::Held { .. })), "{:?}", verdict);
            return Ok(());
        }
        let error = verdict.expect_err("not acquired");
        let qe = QuorumError::find(&error).expect("a quorum error");
        prop_assert_eq!(Some(qe.failure), failure);
        prop_assert_eq!((qe.successes, qe.quorum, qe.nodes), (successes, q, n));
        // Every late reply was absorbed: the same causes as waiting for all.
        let mut expected: Vec<usize> = answers.iter().enumerate().filter(|(_, a)| !matches!(a, Ans::Grant(_))).map(|(i, _)| i).collect();
        expected.extend(not_raised);
        expected.sort_unstable();
        prop_assert_eq!(qe.causes.iter().map(|c| c.index).collect::<Vec<_>>(), expected);
        prop_assert!(!qe.causes.iter().any(|c| matches!(c.cause, NodeCause::Unanswered)));
        let named = qe.causes.iter().all(|c| c.address == format!("n{}:6379", c.index));
        prop_assert!(named, "causes name their node");
        let unanswered: Vec<usize> = (0..n).filter(|&i| !cleanup[i]).collect();
        prop_assert_eq!(qe.cleanup_failures.iter().map(|c| c.index).collect::<Vec<_>>(), unanswered.clone());
        // Only transient causes here: Unavailable iff every node answered the cleanup.
        if unanswered.is_empty() {
            prop_assert!(matches!(error, BackendError::Unavailable(_)), "{:?}", error);
        } else {
            prop_assert!(matches!(error, BackendError::OutcomeUnknown(_)), "{:?}", error);
        }
    }

    #[test]
    fn renew_rules(
        n in nodes(),
        answers in proptest::collection::vec(0u8..4, 7),
        order in order(),
        late in any::<bool>(),
        ttl_ms in 50u64..3000,
        elapsed_ms in 0u64..3000,
    ) {
        let answers = &answers[..n];
        let q = quorum(n);
        let m = machine(n, 0.01);
        let ttl = Duration::from_millis(ttl_ms);
        let req = RenewRequest::new(spec(true), Owner::new("me").expect("valid"), Ttl::new(ttl).expect("valid"));
        let mut round = m.renew(req, BOUND, Instant::ZERO);
        let requests = drain(&mut round);
        prop_assert_eq!(requests.len(), n);
        let t = Instant::ZERO + Duration::from_millis(elapsed_ms);
        let order = take_order(&order, n);
        let reply = |i: usize| match answers[i] {
            0 => NodeReply::Renew(Ok(RenewOutcome::Renewed)),
            1 => NodeReply::Renew(Ok(RenewOutcome::NotHeld)),
            2 => NodeReply::Renew(Err(BackendError::Unavailable("down".into()))),
            _ => NodeReply::TimedOut,
        };
        let count = |p: &[usize], a: u8| p.iter().filter(|&&i| answers[i] == a).count();
        let decided = |p: &[usize]| {
            let (r, no, pending) = (count(p, 0), count(p, 1), n - p.len());
            r >= q || no >= q || (r + pending < q && no + pending < q)
        };
        // Feed until judged; the rest late (or never, when `late` is false).
        let mut k = 0;
        for (j, &i) in order.iter().enumerate() {
            let r = requests.iter().find(|r| r.node == i).expect("asked");
            round.handle_reply(t, r.id, reply(i)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let judged = round.phase() != Phase::Renew;
            prop_assert_eq!(judged, decided(&order[..=j]), "judged exactly when decidable");
            if judged {
                k = j + 1;
                break;
            }
        }
        prop_assert!(k > 0);
        let prefix = &order[..k];
        let (renewed_p, not_ours_p) = (count(prefix, 0), count(prefix, 1));
        let renewed = count(&order, 0);
        let not_ours = count(&order, 1);
        let v = validity(ttl, t - Instant::ZERO, 0.01);
        // The wait-for-all rule gives the same verdict.
        prop_assert_eq!(renewed_p >= q, renewed >= q);
        prop_assert_eq!(not_ours_p >= q, not_ours >= q);
        if renewed_p >= q && v.is_some() {
            prop_assert!(matches!(round.poll_outcome(), Some(Verdict::Renew(Ok(RenewOutcome::Renewed)))));
        } else if not_ours_p >= q {
            prop_assert!(round.poll_outcome().is_none());
            answer_cleanup(&mut round, n, &vec![true; n], t)?;
            prop_assert!(matches!(round.poll_outcome(), Some(Verdict::Renew(Ok(RenewOutcome::NotHeld)))));
        } else {
            prop_assert!(drain(&mut round).is_empty(), "nothing deleted");
            let e = round.poll_outcome().expect("decided").into_renew().expect_err("inconclusive");
            let qe = QuorumError::find(&e).expect("a quorum error");
            prop_assert!(qe.is_lost());
            prop_assert_eq!(qe.causes.len(), n - renewed_p);
            let shows_not_ours = qe.causes.iter().filter(|c| matches!(c.cause, NodeCause::NotOurs)).count();
            prop_assert_eq!(shows_not_ours, not_ours_p);
            let unanswered = qe.causes.iter().filter(|c| matches!(c.cause, NodeCause::Unanswered)).count();
            prop_assert_eq!(unanswered, n - k, "the replies not waited for are named as such");
            if k < n {
                // A reply not waited for is never reported as "not applied".
                prop_assert!(matches!(e, BackendError::OutcomeUnknown(_)), "{:?}", e);
            }
        }
        prop_assert_eq!(round.outstanding(), n - k);
        if late {
            // Late replies are accepted after the verdict and change nothing.
            for &i in &order[k..] {
                let r = requests.iter().find(|r| r.node == i).expect("asked");
                round.handle_reply(t, r.id, reply(i)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            prop_assert_eq!(round.outstanding(), 0);
            prop_assert!(round.poll_outcome().is_none(), "the verdict is given once");
        }
    }

    #[test]
    fn release_rules(
        n in nodes(),
        answers in proptest::collection::vec(0u8..3, 7),
        order in order(),
    ) {
        let answers = &answers[..n];
        let q = quorum(n);
        let m = machine(n, 0.01);
        let req = ReleaseRequest::new(spec(false), Owner::new("me").expect("valid"));
        let mut round = m.release(req, BOUND, Instant::ZERO);
        let requests = drain(&mut round);
        let order = take_order(&order, n);
        let t = Instant::ZERO + Duration::from_millis(3);
        let count = |p: &[usize], a: u8| p.iter().filter(|&&i| answers[i] == a).count();
        let k = feed_in_order(&mut round, &requests, &order, t, |i| match answers[i] {
            0 => NodeReply::Release(Ok(ReleaseOutcome::Released)),
            1 => NodeReply::Release(Ok(ReleaseOutcome::NotHeld)),
            _ => NodeReply::TimedOut,
        }, |p| {
            let (r, no, pending) = (count(p, 0), count(p, 1), n - p.len());
            r >= q || no >= q || (r + pending < q && no + pending < q)
        })?;
        prop_assert!(k <= n);
        // The same verdict as waiting for every reply.
        let (released, not_ours) = (count(&order, 0), count(&order, 1));
        let verdict = round.poll_outcome().expect("decided").into_release();
        if released >= q {
            prop_assert_eq!(verdict.ok(), Some(ReleaseOutcome::Released));
        } else if not_ours >= q {
            prop_assert_eq!(verdict.ok(), Some(ReleaseOutcome::NotHeld));
        } else {
            let e = verdict.expect_err("no quorum");
            prop_assert!(QuorumError::find(&e).is_some_and(|qe| qe.is_lost()));
        }
        prop_assert!(round.poll_outcome().is_none(), "given once");
    }
}

#[test]
fn the_round_never_reads_a_clock_it_is_not_given() {
    // Two rounds fed the same instants decide the same, whatever the wall clock does.
    let m = machine(3, 0.01);
    let run = || {
        let mut round = m.acquire(
            acquire_req(&spec(false), Duration::from_secs(1)),
            BOUND,
            Instant::ZERO,
        );
        for r in drain(&mut round) {
            let reply = NodeReply::Acquire(Ok(AcquireOutcome::Acquired {
                token: None,
                fence: FenceState::UNKNOWN,
            }));
            round
                .handle_reply(Instant::ZERO + Duration::from_millis(50), r.id, reply)
                .expect("awaited");
        }
        (round.valid_until(), round.validity())
    };
    let a = run();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(a, run());
    assert_eq!(a.1, Some(Duration::from_millis(938)));
}

proptest! {
    #[test]
    fn unknown_and_timed_out_replies_are_refused(n in nodes(), id in 100u64..1000) {
        let m = machine(n, 0.01);
        let mut round = m.acquire(acquire_req(&spec(false), Duration::from_secs(1)), BOUND, Instant::ZERO);
        let requests = drain(&mut round);
        prop_assert_eq!(
            round.handle_reply(Instant::ZERO, NodeRequestId(id), NodeReply::TimedOut),
            Err(RoundInputError::UnknownRequest(NodeRequestId(id)))
        );
        let wrong = round.handle_reply(Instant::ZERO, requests[0].id, NodeReply::Raise(Ok(true)));
        let refused = matches!(wrong, Err(RoundInputError::WrongReply { .. }));
        prop_assert!(refused, "a wrong reply kind is refused");
        round.handle_timeout(Instant::ZERO + BOUND);
        prop_assert_eq!(round.phase(), Phase::Cleanup, "every node timed out: no quorum");
        // A reply after its request timed out: the timeout was its reply.
        let late = round.handle_reply(
            Instant::ZERO + BOUND,
            requests[0].id,
            NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token: None, fence: FenceState::UNKNOWN })),
        );
        prop_assert_eq!(late, Err(RoundInputError::UnknownRequest(requests[0].id)));
    }

    /// A late request that reaches its deadline while the round cleans up times out on its own
    /// deadline (earlier than the cleanup's), and stays unknown.
    #[test]
    fn late_requests_time_out_at_their_own_deadline(slow in 0usize..3) {
        let m = machine(3, 0.01);
        let mut round = m.acquire(acquire_req(&spec(false), Duration::from_secs(1)), BOUND, Instant::ZERO);
        let requests = drain(&mut round);
        let t = Instant::ZERO + Duration::from_millis(10);
        for r in requests.iter().filter(|r| r.node != slow) {
            round.handle_reply(t, r.id, NodeReply::Acquire(Err(BackendError::Unavailable("down".into()))))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        // Two refusals of three: no quorum possible, judged without the slow node.
        prop_assert_eq!(round.phase(), Phase::Cleanup);
        prop_assert_eq!(round.outstanding(), 1);
        let cleanup = drain(&mut round);
        prop_assert_eq!(cleanup.len(), 3, "the cleanup goes to every node, the slow one too");
        prop_assert_eq!(round.poll_timeout(), Some(Instant::ZERO + BOUND), "the late request's deadline first");
        round.handle_timeout(Instant::ZERO + BOUND);
        prop_assert_eq!(round.outstanding(), 3, "the cleanup is still awaited");
        prop_assert_eq!(round.poll_timeout(), Some(t + BOUND));
        for r in &cleanup {
            round.handle_reply(t + Duration::from_millis(1), r.id, NodeReply::Release(Ok(ReleaseOutcome::NotHeld)))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let e = round.poll_outcome().expect("decided").into_acquire().expect_err("failed");
        let qe = QuorumError::find(&e).expect("quorum error");
        prop_assert!(qe.causes.iter().any(|c| c.index == slow && c.is_timeout()));
        // Every node answered the cleanup (after its acquire, on its connection): nothing left.
        prop_assert!(matches!(e, BackendError::Unavailable(_)), "{:?}", e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The turn rule's inputs: every request that changes a node (acquire, raise, cleanup,
    /// renew, release) names its node, lease and owner; reads take no turn. A request sent
    /// late (after waiting for its turn) still gets a full bound once sent, and is never
    /// abandoned before its phase's deadline.
    #[test]
    fn turns_name_node_lease_and_owner_and_expiry_gives_a_full_bound(
        n in nodes(),
        fenced in any::<bool>(),
        waited_ms in 0u64..400,
    ) {
        let m = machine(n, 0.01);
        let s = spec(fenced);
        let me = Owner::new("me").expect("valid");
        let start = Instant::ZERO + Duration::from_millis(7);
        let mut rounds = vec![
            m.acquire(acquire_req(&s, Duration::from_secs(1)), BOUND, start),
            m.renew(
                RenewRequest::new(Arc::clone(&s), me.clone(), Ttl::new(Duration::from_secs(1)).expect("valid")),
                BOUND,
                start,
            ),
            m.release(
                ReleaseRequest::new(Arc::clone(&s), me.clone()),
                BOUND,
                start,
            ),
        ];
        for round in &mut rounds {
            let requests = drain(round);
            prop_assert_eq!(requests.len(), n);
            for r in &requests {
                let key = r.turn_key().expect("a state-changing request takes a turn");
                prop_assert_eq!(key.node, r.node);
                prop_assert_eq!(&key.spec, &s);
                prop_assert_eq!(&key.owner, &me);
                prop_assert_eq!(r.bound, BOUND);
                prop_assert_eq!(r.deadline, start + BOUND);
                // Sent at once: abandoned at the deadline; sent later: a full bound after.
                prop_assert_eq!(r.expires_at(start), r.deadline);
                let sent = start + Duration::from_millis(waited_ms);
                prop_assert_eq!(r.expires_at(sent), sent + BOUND);
                prop_assert!(r.expires_at(sent) >= r.deadline);
            }
        }
        let mut reads = vec![
            m.remaining(Arc::clone(&s), me.clone(), BOUND, start),
            m.inspect(Arc::clone(&s), BOUND, start),
        ];
        for round in &mut reads {
            for r in drain(round) {
                prop_assert!(r.turn_key().is_none(), "reads take no turn");
            }
        }
    }
}
