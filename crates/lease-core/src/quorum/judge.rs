//! The judges of a round's phases: when a phase can be judged ([`Round::decidable`]), one
//! judge per stage ([`Round::judge`]), each folding the phase's replies into the round's
//! causes and deciding the next phase or the verdict, what a late reply changes
//! ([`Round::absorb_late`]), and the error a failed round reports ([`round_error`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::{NodeCause, NodeFailure, QuorumError, RoundFailure};
use super::round::{AcquireRound, Cleanup, Round, Slot, Stage};
use super::wire::{Asked, NodeReply, NodeRequestKind, Verdict};
use super::{drift, fenced_quorum_token, round_succeeds, validity};
use crate::backend::{
    AcquireOutcome, BackendError, Effect, LeaseInfo, ReleaseOutcome, ReleaseRequest, RenewOutcome,
};
use crate::time::Instant;
use crate::token::{FenceMark, FenceState, Token};

/// What one phase heard: per node, its reply, or `None` when it had none when judged.
type Replies = Vec<(usize, Option<NodeReply>)>;

impl Round {
    /// Judges the phase of `stage` (taken out of the round, which is `Done` meanwhile) on its
    /// replies at `now`: the next stage, or the verdict.
    pub(super) fn judge(&mut self, stage: Stage, replies: Replies, now: Instant) {
        match stage {
            Stage::Acquire(acquire) => self.acquire_phase(acquire, replies, now),
            Stage::Raise { acquire, token } => self.raise_phase(acquire, token, replies, now),
            Stage::AcquireCleanup {
                acquire,
                failure,
                successes,
            } => self.acquire_cleanup_phase(acquire, failure, successes, replies),
            Stage::Renew { ttl, cleanup } => self.renew_phase(ttl, cleanup, replies, now),
            Stage::RenewCleanup => {
                // Every node's answer is in the trace; the verdict is the lost renew.
                self.decide(Verdict::Renew(Ok(RenewOutcome::NotHeld)));
            }
            Stage::Release => self.release_phase(replies),
            Stage::Remaining => self.remaining_phase(replies, now),
            Stage::Inspect => self.inspect_phase(replies, now),
            Stage::Done => {}
        }
    }

    /// Whether the current phase can be judged now. Every phase is once every request has
    /// its reply; earlier, as soon as the outcome cannot change with the missing replies:
    ///
    /// - acquire: a quorum granted (the validity, judged now, only shrinks by waiting), or
    ///   so few can still grant that a quorum is out of reach;
    /// - raise: likewise with the nodes that raised;
    /// - renew, release: a quorum succeeded, a quorum said "not ours", or neither can still
    ///   happen (a quorum of one answer and a quorum of the other cannot both exist);
    /// - cleanup, remaining, inspect: never early (the cleanup must know every node's answer
    ///   to report its effect truthfully; remaining and inspect combine every answer: the
    ///   `q`-th largest remaining time, the maximum counter and mark).
    pub(super) fn decidable(&self) -> bool {
        let pending = self.slots.iter().filter(|s| s.reply.is_none()).count();
        if pending == 0 {
            return true;
        }
        let q = self.quorum.quorum();
        let count = |f: &dyn Fn(&NodeReply) -> bool| {
            self.slots
                .iter()
                .filter(|s| s.reply.as_ref().is_some_and(f))
                .count()
        };
        let either =
            |yes: usize, no: usize| yes >= q || no >= q || (yes + pending < q && no + pending < q);
        match &self.stage {
            Stage::Acquire(acquire) => {
                let granted = count(&|r| {
                    matches!(r, NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, .. }))
                        if !acquire.fenced || token.is_some())
                });
                granted >= q || granted + pending < q
            }
            Stage::Raise { .. } => {
                let raised = count(&|r| matches!(r, NodeReply::Raise(Ok(true))));
                raised >= q || raised + pending < q
            }
            Stage::Renew { .. } => either(
                count(&|r| matches!(r, NodeReply::Renew(Ok(RenewOutcome::Renewed)))),
                count(&|r| matches!(r, NodeReply::Renew(Ok(RenewOutcome::NotHeld)))),
            ),
            Stage::Release => either(
                count(&|r| matches!(r, NodeReply::Release(Ok(ReleaseOutcome::Released)))),
                count(&|r| matches!(r, NodeReply::Release(Ok(ReleaseOutcome::NotHeld)))),
            ),
            _ => false,
        }
    }

    /// A reply to a request of a phase judged without it. Before the verdict (a failed
    /// acquire cleaning up) it replaces that node's [`NodeCause::Unanswered`] with what the
    /// node said (a late success removes the cause and counts among the successes of the
    /// phase it belongs to; a late `Held` joins the holders the verdict is drawn from). After
    /// the verdict it changes nothing: a late grant after a granted acquire is simply held by
    /// our owner until the release (which goes to every node) or its TTL.
    pub(super) fn absorb_late(&mut self, slot: &Slot, reply: NodeReply) {
        if self.is_done() {
            return;
        }
        let Some(pos) = self
            .causes
            .iter()
            .position(|c| c.index == slot.node && matches!(c.cause, NodeCause::Unanswered))
        else {
            return;
        };
        let cause = match reply {
            NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, fence })) => {
                self.fence_seen = self.fence_seen.max(fence.counter);
                let fenced = self.stage.acquire_mut().is_some_and(|a| a.fenced);
                if fenced && token.is_none() {
                    Some(NodeCause::Error(BackendError::Protocol(
                        "a fenced acquire granted no token".into(),
                    )))
                } else {
                    None
                }
            }
            NodeReply::Raise(Ok(true))
            | NodeReply::Renew(Ok(RenewOutcome::Renewed))
            | NodeReply::Release(Ok(ReleaseOutcome::Released))
            | NodeReply::Remaining(Ok(_))
            | NodeReply::Inspect(Ok(_)) => None,
            NodeReply::Acquire(Ok(AcquireOutcome::Held {
                holder,
                remaining,
                fence,
            })) => {
                self.fence_seen = self.fence_seen.max(fence.counter);
                if let Some(acquire) = self.stage.acquire_mut() {
                    acquire.held.push((holder.clone(), remaining));
                }
                Some(NodeCause::Held { holder })
            }
            NodeReply::Raise(Ok(false))
            | NodeReply::Renew(Ok(RenewOutcome::NotHeld))
            | NodeReply::Release(Ok(ReleaseOutcome::NotHeld)) => Some(NodeCause::NotOurs),
            NodeReply::Acquire(Err(e))
            | NodeReply::Raise(Err(e))
            | NodeReply::Renew(Err(e))
            | NodeReply::Release(Err(e))
            | NodeReply::Remaining(Err(e))
            | NodeReply::Inspect(Err(e)) => Some(NodeCause::Error(e)),
            NodeReply::TimedOut => Some(NodeCause::Error(self.timeout())),
        };
        match cause {
            Some(cause) => self.causes[pos].cause = cause,
            None => {
                self.causes.remove(pos);
                // A late success counts where it belongs: a late grant with a failed acquire
                // phase, a late raise with a failed raise phase.
                if let Stage::AcquireCleanup {
                    failure, successes, ..
                } = &mut self.stage
                {
                    let raise = matches!(failure, RoundFailure::RaiseFailed { .. });
                    if raise == (slot.asked == Asked::Raise) {
                        *successes += 1;
                    }
                }
            }
        }
    }

    /// `(elapsed, validity)` at `now` for `ttl`.
    fn validity_at(&mut self, ttl: Duration, now: Instant) -> (Duration, Option<Duration>) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        (elapsed, validity(ttl, elapsed, self.quorum.drift_factor()))
    }

    /// The error for `reply` when it is not the expected variant (only a timeout reaches here:
    /// [`Round::handle_reply`] refuses other mismatches).
    fn other_reply(&self, reply: NodeReply) -> BackendError {
        match reply {
            NodeReply::TimedOut => self.timeout(),
            other => BackendError::Protocol(format!("unexpected reply {other:?}")),
        }
    }

    fn acquire_phase(&mut self, mut acquire: AcquireRound, replies: Replies, now: Instant) {
        let fenced = acquire.fenced;
        let mut acquired: Vec<(usize, Option<Token>)> = Vec::new();
        let mut held = Vec::new();
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Acquire(Ok(AcquireOutcome::Acquired { token, fence }))) => {
                    self.fence_seen = self.fence_seen.max(fence.counter);
                    if fenced && token.is_none() {
                        NodeCause::Error(BackendError::Protocol(
                            "a fenced acquire granted no token".into(),
                        ))
                    } else {
                        acquired.push((i, token));
                        continue;
                    }
                }
                Some(NodeReply::Acquire(Ok(AcquireOutcome::Held {
                    holder,
                    remaining,
                    fence,
                }))) => {
                    self.fence_seen = self.fence_seen.max(fence.counter);
                    held.push((holder.clone(), remaining));
                    NodeCause::Held { holder }
                }
                Some(NodeReply::Acquire(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let (elapsed, validity) = self.validity_at(acquire.ttl, now);
        acquire.held = held;
        acquire.acquire_elapsed = elapsed;
        let q = self.quorum.quorum();
        let failure = if acquired.len() < q {
            RoundFailure::NoQuorum
        } else if !round_succeeds(acquired.len(), self.quorum.nodes(), validity) {
            RoundFailure::ValidityExhausted { elapsed }
        } else if let Some(v) = validity.filter(|_| !fenced) {
            self.granted = Some((now, v));
            return self.decide(Verdict::Acquire(Ok(AcquireOutcome::Acquired {
                token: None,
                fence: FenceState::UNKNOWN,
            })));
        } else {
            // Fenced: the token is the maximum minted by the granting nodes; the raise phase
            // asks each of them to raise its counter to it.
            let Some(token) = fenced_quorum_token(acquired.iter().filter_map(|a| a.1)) else {
                return self.decide(Verdict::Acquire(Err(BackendError::Protocol(
                    "a fenced quorum without tokens".into(),
                ))));
            };
            self.token = Some(token);
            let kinds = acquired
                .iter()
                .map(|(i, _)| {
                    (
                        *i,
                        NodeRequestKind::Raise {
                            spec: Arc::clone(&acquire.cleanup.spec),
                            owner: acquire.cleanup.owner.clone(),
                            token,
                        },
                    )
                })
                .collect();
            self.stage = Stage::Raise { acquire, token };
            return self.start_phase(kinds, now);
        };
        self.start_acquire_cleanup(acquire, failure, acquired.len(), now);
    }

    fn raise_phase(&mut self, acquire: AcquireRound, token: Token, replies: Replies, now: Instant) {
        let mut raised = 0;
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Raise(Ok(true))) => {
                    raised += 1;
                    continue;
                }
                Some(NodeReply::Raise(Ok(false))) => NodeCause::NotOurs,
                Some(NodeReply::Raise(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        self.causes.sort_by_key(|c| c.index);
        let (elapsed, validity) = self.validity_at(acquire.ttl, now);
        match validity {
            Some(v) if round_succeeds(raised, self.quorum.nodes(), validity) => {
                self.granted = Some((now, v));
                let fence = FenceState::new(self.fence_seen, None);
                self.decide(Verdict::Acquire(Ok(AcquireOutcome::Acquired {
                    token: Some(token),
                    fence,
                })));
            }
            _ => {
                let failure = RoundFailure::RaiseFailed { token, elapsed };
                self.start_acquire_cleanup(acquire, failure, raised, now);
            }
        }
    }

    /// Compare-and-delete on every node after a failed acquire: including those that did not
    /// answer (their request may have taken effect); another owner's value is never deleted.
    fn start_acquire_cleanup(
        &mut self,
        acquire: AcquireRound,
        failure: RoundFailure,
        successes: usize,
        now: Instant,
    ) {
        let kinds = self.cleanup_requests(&acquire.cleanup);
        self.stage = Stage::AcquireCleanup {
            acquire,
            failure,
            successes,
        };
        self.start_phase(kinds, now);
    }

    /// A compare-and-delete of `cleanup`'s lease and owner for every node.
    fn cleanup_requests(&self, cleanup: &Cleanup) -> Vec<(usize, NodeRequestKind)> {
        let req = ReleaseRequest::new(Arc::clone(&cleanup.spec), cleanup.owner.clone());
        self.quorum.every(|| NodeRequestKind::Release(req.clone()))
    }

    fn acquire_cleanup_phase(
        &mut self,
        acquire: AcquireRound,
        failure: RoundFailure,
        successes: usize,
        replies: Replies,
    ) {
        let mut cleanup_failures = Vec::new();
        for (i, reply) in replies {
            let error = match reply {
                Some(NodeReply::Release(Ok(_))) => continue,
                Some(NodeReply::Release(Err(e))) => e,
                Some(other) => self.other_reply(other),
                None => self.timeout(),
            };
            cleanup_failures.push(self.failure(i, NodeCause::Error(error)));
        }
        if acquire.held.len() >= self.quorum.quorum() {
            // A quorum positively says someone else holds it: a lost race, not an error.
            let (holder, remaining) = self.dominant_holder(acquire.held, acquire.acquire_elapsed);
            let fence = FenceState::new(self.fence_seen, None);
            return self.decide(Verdict::Acquire(Ok(AcquireOutcome::Held {
                holder,
                remaining,
                fence,
            })));
        }
        let error = self.error(failure, successes, cleanup_failures);
        self.decide(Verdict::Acquire(Err(error)));
    }

    /// The most frequent holder among the `Held` replies (ties: the one a lower node reported),
    /// and, when a quorum names it, how long at least a quorum of its keys remain.
    fn dominant_holder(
        &self,
        held: Vec<(Option<String>, Option<Duration>)>,
        elapsed: Duration,
    ) -> (Option<String>, Option<Duration>) {
        let mut counts: HashMap<Option<&str>, (usize, usize)> = HashMap::new();
        for (i, (h, _)) in held.iter().enumerate() {
            let e = counts.entry(h.as_deref()).or_insert((0, i));
            e.0 += 1;
        }
        let best = counts
            .into_iter()
            .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
            .map(|(h, _)| h.map(str::to_owned));
        let Some(holder) = best else {
            return (None, None);
        };
        let remainings: Vec<Duration> = held
            .iter()
            .filter(|(h, _)| *h == holder)
            .filter_map(|(_, r)| *r)
            .collect();
        let remaining = qth_largest(remainings, self.quorum.quorum())
            .and_then(|r| self.conservative(r, elapsed));
        (holder, remaining)
    }

    /// A remaining time reported by nodes during a round that took `elapsed`, made
    /// conservative: minus the round's duration and the drift allowance; `None` if nothing is
    /// left.
    fn conservative(&self, remaining: Duration, elapsed: Duration) -> Option<Duration> {
        let d = drift(remaining, self.quorum.drift_factor());
        remaining
            .checked_sub(elapsed)?
            .checked_sub(d)
            .filter(|v| !v.is_zero())
    }

    fn renew_phase(&mut self, ttl: Duration, cleanup: Cleanup, replies: Replies, now: Instant) {
        let (mut renewed, mut not_ours) = (0, 0);
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Renew(Ok(RenewOutcome::Renewed))) => {
                    renewed += 1;
                    continue;
                }
                Some(NodeReply::Renew(Ok(RenewOutcome::NotHeld))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Renew(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let (elapsed, validity) = self.validity_at(ttl, now);
        let q = self.quorum.quorum();
        if round_succeeds(renewed, self.quorum.nodes(), validity)
            && let Some(v) = validity
        {
            self.granted = Some((now, v));
            return self.decide(Verdict::Renew(Ok(RenewOutcome::Renewed)));
        }
        if not_ours >= q {
            // Conclusively lost: clean up everywhere, including a minority that accepted the
            // extension, so it does not block the next holder.
            let kinds = self.cleanup_requests(&cleanup);
            self.stage = Stage::RenewCleanup;
            return self.start_phase(kinds, now);
        }
        // Inconclusive (errors, timeouts, or no validity left): report it and leave the keys.
        // The driver tolerates it until its local deadline, renews again meanwhile, and
        // releases on every node when the term ends; deleting the keys here would let another
        // contender in while the driver still (rightly, by its rules) counts itself the holder.
        let failure = if renewed >= q {
            RoundFailure::ValidityExhausted { elapsed }
        } else {
            RoundFailure::NoQuorum
        };
        let error = self.error(failure, renewed, Vec::new());
        self.decide(Verdict::Renew(Err(error)));
    }

    fn release_phase(&mut self, replies: Replies) {
        let (mut released, mut not_ours) = (0, 0);
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Release(Ok(ReleaseOutcome::Released))) => {
                    released += 1;
                    continue;
                }
                Some(NodeReply::Release(Ok(ReleaseOutcome::NotHeld))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Release(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let q = self.quorum.quorum();
        if released >= q {
            return self.decide(Verdict::Release(Ok(ReleaseOutcome::Released)));
        }
        if not_ours >= q {
            return self.decide(Verdict::Release(Ok(ReleaseOutcome::NotHeld)));
        }
        let error = self.error(RoundFailure::NoQuorum, released, Vec::new());
        self.decide(Verdict::Release(Err(error)));
    }

    fn remaining_phase(&mut self, replies: Replies, now: Instant) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        let mut ours = Vec::new();
        let mut not_ours = 0;
        for (i, reply) in replies {
            let cause = match reply {
                Some(NodeReply::Remaining(Ok(Some(d)))) => {
                    ours.push(d);
                    continue;
                }
                Some(NodeReply::Remaining(Ok(None))) => {
                    not_ours += 1;
                    NodeCause::NotOurs
                }
                Some(NodeReply::Remaining(Err(e))) => NodeCause::Error(e),
                Some(other) => NodeCause::Error(self.other_reply(other)),
                None => NodeCause::Unanswered,
            };
            self.causes.push(self.failure(i, cause));
        }
        let q = self.quorum.quorum();
        let verdict = if ours.len() >= q {
            Ok(qth_largest(ours, q).and_then(|r| self.conservative(r, elapsed)))
        } else if not_ours >= q {
            Ok(None)
        } else {
            Err(self.error(RoundFailure::NoQuorum, ours.len(), Vec::new()))
        };
        self.decide(Verdict::Remaining(verdict));
    }

    fn inspect_phase(&mut self, replies: Replies, now: Instant) {
        let elapsed = now - self.start;
        self.elapsed = Some(elapsed);
        let mut infos = Vec::new();
        for (i, reply) in replies {
            let error = match reply {
                Some(NodeReply::Inspect(Ok(info))) => {
                    infos.push(info);
                    continue;
                }
                Some(NodeReply::Inspect(Err(e))) => e,
                Some(other) => self.other_reply(other),
                None => self.timeout(),
            };
            self.causes.push(self.failure(i, NodeCause::Error(error)));
        }
        let q = self.quorum.quorum();
        if infos.len() < q {
            let error = self.error(RoundFailure::NoQuorum, infos.len(), Vec::new());
            return self.decide(Verdict::Inspect(Err(error)));
        }
        let mut out = LeaseInfo {
            counter: infos.iter().filter_map(|i| i.counter).max(),
            mark: infos
                .iter()
                .map(|i| i.mark)
                .max()
                .unwrap_or(FenceMark::NONE),
            ..LeaseInfo::default()
        };
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for h in infos.iter().filter_map(|i| i.holder.as_deref()) {
            match votes.iter_mut().find(|(v, _)| *v == h) {
                Some((_, c)) => *c += 1,
                None => votes.push((h, 1)),
            }
        }
        if let Some((holder, _)) = votes.into_iter().find(|(_, c)| *c >= q) {
            let theirs: Vec<&LeaseInfo> = infos
                .iter()
                .filter(|i| i.holder.as_deref() == Some(holder))
                .collect();
            out.holder = Some(holder.to_owned());
            out.metadata = theirs.first().and_then(|i| i.metadata.clone());
            out.remaining = qth_largest(theirs.iter().filter_map(|i| i.remaining).collect(), q)
                .and_then(|r| self.conservative(r, elapsed));
        }
        self.decide(Verdict::Inspect(Ok(out)));
    }

    /// The error for a failed round: a quorum of permanent refusals stays permanent (retrying
    /// cannot help); anything else is a [`QuorumError`] in [`BackendError::Unavailable`] when
    /// the round provably left nothing applied ([`QuorumError::effect`]), else in
    /// [`BackendError::OutcomeUnknown`].
    fn error(
        &mut self,
        failure: RoundFailure,
        successes: usize,
        cleanup_failures: Vec<NodeFailure>,
    ) -> BackendError {
        let e = QuorumError {
            op: self.op,
            failure,
            successes,
            quorum: self.quorum.quorum(),
            nodes: self.quorum.nodes(),
            causes: std::mem::take(&mut self.causes),
            cleanup_failures,
        };
        round_error(e)
    }
}

/// Sorted descending, the `q`-th value: the largest value that at least `q` of them reach.
pub(super) fn qth_largest(mut values: Vec<Duration>, q: usize) -> Option<Duration> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(q.checked_sub(1)?).copied()
}

/// See [`Round::error`].
pub(super) fn round_error(e: QuorumError) -> BackendError {
    let permanent = |pred: fn(&BackendError) -> bool| {
        e.causes
            .iter()
            .filter(|c| matches!(&c.cause, NodeCause::Error(b) if pred(b)))
            .count()
            >= e.quorum
    };
    if permanent(|b| matches!(b, BackendError::TokenExhausted(_))) {
        return BackendError::TokenExhausted(e.to_string());
    }
    // Permanent only when nothing may have been applied anywhere (a minority that renewed,
    // deleted or did not answer makes the round's outcome unknown).
    let settled = e.effect() == Effect::NotApplied;
    if settled && permanent(|b| matches!(b, BackendError::Invalid(_))) {
        return BackendError::Invalid(e.to_string());
    }
    if settled && permanent(|b| !b.is_transient()) {
        return BackendError::Refused(e.to_string());
    }
    BackendError::from(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qth_largest_picks_the_quorums_minimum() {
        let ms = Duration::from_millis;
        assert_eq!(qth_largest(vec![ms(1), ms(5), ms(3)], 2), Some(ms(3)));
        assert_eq!(qth_largest(vec![ms(1)], 2), None);
        assert_eq!(qth_largest(vec![ms(1)], 0), None);
    }
}
