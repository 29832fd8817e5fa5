//! What the election's replies and ends of terms do: an acquire's outcome (a term begins, a
//! follower is announced, a backoff), a renewal's (through the held lease), the end of a term,
//! a permanent refusal, and the stop once everything is released.

use super::*;

impl Election {
    pub(super) fn on_acquire(
        &mut self,
        now: Instant,
        sent_at: Instant,
        result: Option<Result<AcquireOutcome, BackendError>>,
    ) {
        // Any answer settles what an earlier unanswered acquire may have won (a win with our
        // owner would have been taken over by this acquire).
        self.maybe_won = match &result {
            Some(Ok(_)) => false,
            Some(Err(e)) => self.maybe_won || e.is_outcome_unknown(),
            None => true,
        };
        let notice_pending = std::mem::take(&mut self.notice_pending);
        if let Some(Ok(
            AcquireOutcome::Acquired { fence, .. } | AcquireOutcome::Held { fence, .. },
        )) = &result
        {
            self.note_fence(*fence);
        }
        match result {
            Some(Ok(AcquireOutcome::Acquired {
                token: Some(token), ..
            })) => {
                self.consecutive_errors = 0;
                let expired = now >= self.timing().valid_until(sent_at);
                if !matches!(self.state, State::Candidate { .. }) || expired {
                    // Won, but must not lead: shutting down, or the reply came after the lease
                    // it granted had already lapsed. Give it back.
                    if expired && !self.is_stopping() {
                        self.events.push_back(Event::Error {
                            op: Op::Acquire,
                            error: BackendError::Timeout(now - sent_at),
                        });
                    }
                    self.release_queue.push_back(Some(token));
                    self.schedule_acquire(now);
                    return;
                }
                if let Some(previous) = self.highest_token.filter(|p| token <= *p) {
                    // The store minted a token we have already seen: its counter went back
                    // (restart without persistence, eviction, failover). Lead anyway — the lease
                    // is ours — but say so loudly: fenced resources with a higher mark will
                    // refuse this term's writes.
                    self.events.push_back(Event::Error {
                        op: Op::Acquire,
                        error: BackendError::TokenRegression {
                            previous,
                            minted: token,
                        },
                    });
                }
                self.highest_token = self.highest_token.max(Some(token));
                self.highest_seen = self.highest_seen.max(Some(token));
                // The acquire set the TTL: the first renewal is due one interval after its
                // send (at once if the reply came later), never sooner.
                let lease = HeldLease::renewed_when_due(self.timing(), Some(token), sent_at, now);
                let valid_until = lease.valid_until();
                self.state = State::Leading(Leading { token, lease });
                self.events.push_back(Event::Elected { token, valid_until });
            }
            Some(Ok(AcquireOutcome::Acquired { token: None, .. })) => {
                self.consecutive_errors = self.consecutive_errors.saturating_add(1);
                self.events.push_back(Event::Error {
                    op: Op::Acquire,
                    error: BackendError::Protocol(
                        "acquire granted an unfenced lease; elections need a token".into(),
                    ),
                });
                self.release_queue.push_back(None);
                self.schedule_acquire(now);
            }
            Some(Ok(AcquireOutcome::Held { holder, .. })) => {
                self.consecutive_errors = 0;
                if let State::Candidate { follower } | State::Stopping { follower } =
                    &mut self.state
                    && !*follower
                {
                    *follower = true;
                    self.events.push_back(Event::Follower { holder });
                }
                self.schedule_acquire(now);
                if notice_pending {
                    // The lease was released while this acquire was out: it may have been
                    // judged before the release. Try again at once.
                    self.next_acquire = now;
                }
            }
            Some(Err(error)) if !error.is_transient() => {
                self.events.push_back(Event::Failed {
                    op: Op::Acquire,
                    error,
                });
                self.fail(now);
            }
            Some(Err(error)) => {
                self.consecutive_errors = self.consecutive_errors.saturating_add(1);
                self.events.push_back(Event::Error {
                    op: Op::Acquire,
                    error,
                });
                self.schedule_acquire(now);
            }
            None => {
                self.consecutive_errors = self.consecutive_errors.saturating_add(1);
                self.events.push_back(Event::Error {
                    op: Op::Acquire,
                    error: BackendError::Timeout(now - sent_at),
                });
                if self.is_stopping() {
                    // The unanswered acquire may have won: release whatever it took.
                    self.release_queue.push_back(None);
                }
                self.schedule_acquire(now);
            }
        }
    }

    pub(super) fn on_renew(
        &mut self,
        now: Instant,
        token: Option<Token>,
        result: Result<RenewOutcome, BackendError>,
    ) {
        let Some(term) = self.term_mut() else {
            return;
        };
        if Some(term.token) != token {
            return;
        }
        term.lease.handle_renew(now, result);
        self.drain_lease(now);
    }

    pub(super) fn drain_lease(&mut self, now: Instant) {
        let mut lost = None;
        if let State::Leading(term) = &mut self.state {
            while let Some(ev) = term.lease.poll_event() {
                match ev {
                    LeaseEvent::Renewed { .. } => {}
                    LeaseEvent::RenewFailed(error) if !error.is_transient() => {
                        self.events.push_back(Event::Failed {
                            op: Op::Renew,
                            error,
                        });
                    }
                    LeaseEvent::RenewFailed(error) => self.events.push_back(Event::Error {
                        op: Op::Renew,
                        error,
                    }),
                    LeaseEvent::Lost(reason) => lost = Some(reason),
                }
            }
        }
        if let Some(reason) = lost {
            self.end_term(now, reason.into());
            if reason == LossReason::Refused {
                self.fail(now);
            }
        }
    }

    /// Stops after a permanent refusal: no more acquires; pending releases still go out, and
    /// a release of what an unanswered acquire may have won.
    pub(super) fn fail(&mut self, now: Instant) {
        self.end_term(now, StepDownReason::Refused);
        self.enter_stopping();
        if self.maybe_won {
            self.maybe_won = false;
            self.release_queue.push_back(None);
        }
        self.maybe_stop();
    }

    /// Candidate (or stopping) → stopping; a term must have been ended first.
    pub(super) fn enter_stopping(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Stopped) {
            State::Candidate { follower } | State::Stopping { follower } => {
                State::Stopping { follower }
            }
            State::Leading(_) => State::Stopping { follower: false },
            State::Stopped => State::Stopped,
        };
    }

    /// Ends the term being led (if any): leading → candidate, not yet a follower.
    pub(super) fn end_term(&mut self, now: Instant, reason: StepDownReason) {
        if !matches!(self.state, State::Leading(_)) {
            return;
        }
        let State::Leading(mut term) =
            std::mem::replace(&mut self.state, State::Candidate { follower: false })
        else {
            return;
        };
        term.lease.end();
        self.events.push_back(Event::SteppedDown {
            token: term.token,
            reason,
        });
        self.release_queue.push_back(Some(term.token));
        self.schedule_acquire(now);
        if matches!(
            reason,
            StepDownReason::Resigned | StepDownReason::WorkReturned
        ) {
            // A voluntary step-down gives the others the first chance: every live follower
            // polls at least once per acquire interval, so wait a little longer than that.
            let interval = self.config.acquire_interval();
            let wait = (interval + interval / 10).min(self.config.ttl().get());
            self.next_acquire = now + wait;
        }
    }

    /// Compares what the store reported with what this instance saw before: reports a loss
    /// once, then remembers the store's state.
    pub(super) fn note_fence(&mut self, fence: FenceState) {
        match StoreLoss::detect(self.epoch, self.highest_seen, fence) {
            // The same loss seen again (followers poll while the store is still behind).
            Some(StoreLoss::CounterBehind { .. }) if self.loss_reported => {}
            Some(loss) => {
                self.loss_reported = true;
                self.events.push_back(Event::StoreLost(loss));
            }
            None => self.loss_reported = false,
        }
        if fence.epoch.is_some() {
            self.epoch = fence.epoch;
        }
        self.highest_seen = self.highest_seen.max(fence.counter);
    }

    pub(super) fn maybe_stop(&mut self) {
        if matches!(self.state, State::Stopping { .. })
            && self.acquire_in_flight.is_none()
            && self.release_in_flight.is_none()
            && self.release_queue.is_empty()
        {
            self.state = State::Stopped;
            self.events.push_back(Event::Stopped);
        }
    }
}
