//! One run of an [`Elector`]: the driver of the [`Election`] machine.
//!
//! [`Run`] holds what lives for one `run`/`hold` call; `Elector::run_inner` calls its steps
//! in order, once per turn of the loop:
//!
//! 1. [`Run::begin_shutdown_if_asked`]: the caller's shutdown reaches the machine once;
//! 2. [`Run::send_requests`]: every request the machine asks for, each on its own task bounded
//!    by its deadline;
//! 3. [`Run::handle_events`]: terms start (the leader work is spawned) and end (its token is
//!    cancelled), observers are told, a permanent refusal is recorded;
//! 4. [`Run::publish_state`]: `token()`'s deadline and the watch channel follow the machine;
//! 5. [`Run::wait`]: the first of a reply, the machine's timer, shutdown, a resign command,
//!    the end of the term's work, or a release notice is fed back to the machine;
//!
//! and, once the machine has stopped, [`Run::await_last_work`] then [`Run::finish`].
//!
//! **A run dropped before it finished** (the caller's `run`/`hold` future was dropped: a
//! `select!` that took another branch, a `timeout` around it) ends what it started, in `Drop`:
//! the term's token is cancelled (as at any step-down: the work ends when it sees it; it is
//! not awaited, since nobody is left to await it), requests in flight are aborted,
//! `token()` turns `None`, watchers see [`Role::Stopped`], the observer hears `SteppedDown`
//! with [`StepDownReason::Shutdown`], and a best-effort release of the lease (bounded by the
//! release timeout) runs on its own task, so another instance is elected at once instead of
//! after the TTL.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lease_core::election::{Event, Op, Reply, Request, RequestId, RequestKind};
use lease_core::notify::{ReleaseWatch, WatchRole};
use lease_core::{BackendError, Election, LeaseBackend, Role, StepDownReason, StoreLoss, Token};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Command, Elector, ElectorError, ElectorState, Term, lock};
use crate::clock::Clock;
use crate::observer::Observer;
use crate::telemetry;

/// What the run tells its observer task.
pub(super) enum Notice {
    Elected(Token),
    SteppedDown(Token, StepDownReason),
    Follower(Option<String>),
    Error(Op, BackendError),
    Refused(Op, Arc<BackendError>),
    Panicked(Token, String),
    StoreLost(StoreLoss),
}

/// The state of one run.
pub(super) struct Run<'a, B: LeaseBackend, F> {
    elector: &'a Elector<B>,
    leader_fn: Option<F>,
    clock: Clock,
    machine: Election,
    requests: JoinSet<(Reply, Duration)>,
    request_ids: HashMap<tokio::task::Id, RequestId>,
    /// The current term's work, when `run` was given a leader callback.
    work: Option<(Token, JoinHandle<()>)>,
    term_cancel: Option<CancellationToken>,
    /// The current term's span (`term`, with the election's name, this instance and the
    /// token): the leader work, the term's requests and its events run inside it.
    term_span: Option<tracing::Span>,
    shutting_down: bool,
    follower_of: Option<String>,
    refused: Option<(Op, Arc<BackendError>)>,
    /// `None` once [`Run::finish`] let the observer task drain.
    notices: Option<mpsc::UnboundedSender<Notice>>,
    observer_task: Option<JoinHandle<()>>,
    /// Release notices for this election's lease, when the backend has them.
    watch: Option<ReleaseWatch>,
    /// Set by [`Run::finish`]; a run dropped before it is cleaned up by `Drop`.
    finished: bool,
}

impl<'a, B, F, Fut> Run<'a, B, F>
where
    B: LeaseBackend,
    F: FnMut(Term<B>) -> Fut + Send,
    Fut: Future<Output = ()> + Send + 'static,
{
    pub(super) fn start(elector: &'a Elector<B>, leader_fn: Option<F>) -> Self {
        let inner = &elector.inner;
        let (notices, notice_rx) = mpsc::unbounded_channel();
        let observer_task = tokio::spawn(observe(Arc::clone(&inner.observer), notice_rx));
        let clock = Clock::new();
        let mut machine = Election::new(inner.config.clone(), inner.seed, clock.now());
        machine.set_validity_margin(inner.backend.validity_margin(inner.config.ttl()));
        // Subscribed for the whole run: a follower is woken by the leader's release.
        let watch = inner
            .backend
            .release_watch(machine.spec(), WatchRole::Contender);
        if let Some(w) = &watch {
            w.set_contending(false);
            w.activate();
        }
        telemetry::contending(inner.config.name());
        Run {
            elector,
            leader_fn,
            clock,
            machine,
            requests: JoinSet::new(),
            request_ids: HashMap::new(),
            work: None,
            term_cancel: None,
            term_span: None,
            shutting_down: false,
            follower_of: None,
            refused: None,
            notices: Some(notices),
            observer_task: Some(observer_task),
            watch,
            finished: false,
        }
    }

    fn name(&self) -> &str {
        self.elector.inner.config.name()
    }

    fn notify(&self, notice: Notice) {
        // The observer task only ends after the run drops the sender.
        if let Some(n) = &self.notices {
            let _ = n.send(notice);
        }
    }

    pub(super) fn begin_shutdown_if_asked(&mut self, shutdown: &CancellationToken) {
        if shutdown.is_cancelled() && !self.shutting_down {
            self.shutting_down = true;
            tracing::debug!(name = self.name(), "election shutting down");
            self.machine.shutdown(self.clock.now());
        }
    }

    pub(super) fn send_requests(&mut self) {
        let floor = self
            .elector
            .inner
            .floor
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Ok(floor) = Token::new(floor) {
            self.machine.raise_floor(floor);
        }
        let now = self.clock.now();
        while let Some(mut req) = self.machine.poll_request(now) {
            // Other followers of this process waiting: a campaign that wins must leave
            // them on record at the store (see `AcquireRequest::waiters`).
            if let RequestKind::Acquire(r) = &mut req.kind
                && self.watch.as_ref().is_some_and(ReleaseWatch::others_wait)
            {
                r.waiters = true;
            }
            let id = req.id;
            let backend = Arc::clone(&self.elector.inner.backend);
            let span = self.term_span.clone().unwrap_or_else(tracing::Span::none);
            let handle = self
                .requests
                .spawn(perform(backend, req, self.clock).instrument(span));
            self.request_ids.insert(handle.id(), id);
        }
    }

    /// Acts on every event; whether the machine has stopped.
    pub(super) fn handle_events(&mut self) -> bool {
        let mut stopped = false;
        while let Some(event) = self.machine.poll_event() {
            // Inside the current term's span (if any): a term's own events carry it.
            let span = self.term_span.clone().unwrap_or_else(tracing::Span::none);
            let _entered = span.enter();
            match event {
                Event::Elected { token, valid_until } => self.term_started(token, valid_until),
                Event::SteppedDown { token, reason } => self.term_ended(token, reason),
                Event::Follower { holder } => {
                    tracing::debug!(name = self.name(), ?holder, "following");
                    self.follower_of.clone_from(&holder);
                    self.notify(Notice::Follower(holder));
                }
                Event::Error { op, error } => {
                    if op == Op::Renew {
                        telemetry::renew_failed(self.name());
                    }
                    tracing::warn!(name = self.name(), ?op, %error, "election backend error (handled)");
                    self.notify(Notice::Error(op, error));
                }
                Event::Failed { op, error } => {
                    tracing::error!(name = self.name(), ?op, %error, "election refused with a permanent error; stopping");
                    let error = Arc::new(error);
                    self.notify(Notice::Refused(op, Arc::clone(&error)));
                    self.refused = Some((op, error));
                }
                Event::Released { token, outcome } => {
                    tracing::debug!(name = self.name(), ?token, ?outcome, "released");
                }
                Event::StoreLost(loss) => {
                    tracing::error!(name = self.name(), %loss, highest_seen = ?self.machine.highest_seen(), "the store lost fence state; the next acquire mints above the highest token seen");
                    telemetry::store_lost(self.name(), &loss);
                    self.notify(Notice::StoreLost(loss));
                }
                Event::Stopped => stopped = true,
                _ => {}
            }
        }
        stopped || self.machine.is_stopped()
    }

    fn term_started(&mut self, token: Token, valid_until: lease_core::Instant) {
        let inner = &self.elector.inner;
        *lock(&inner.lease) = Some((token, self.clock.to_tokio(valid_until)));
        let span = tracing::info_span!(
            "term",
            name = self.name(),
            instance = inner.config.instance_id(),
            %token
        );
        span.in_scope(|| tracing::info!(name = self.name(), %token, "elected leader"));
        telemetry::elected(self.name(), token);
        self.term_span = Some(span.clone());
        let cancel = CancellationToken::new();
        self.term_cancel = Some(cancel.clone());
        self.notify(Notice::Elected(token));
        if let Some(f) = self.leader_fn.as_mut() {
            let term = Term {
                token,
                cancel,
                backend: Arc::clone(&inner.backend),
                mark_key: Arc::clone(&inner.mark_key),
            };
            self.work = Some((token, tokio::spawn(f(term).instrument(span))));
        }
    }

    fn term_ended(&mut self, token: Token, reason: StepDownReason) {
        *lock(&self.elector.inner.lease) = None;
        if let Some(c) = self.term_cancel.take() {
            c.cancel();
        }
        tracing::warn!(name = self.name(), %token, ?reason, "stepped down");
        telemetry::stepped_down(self.name(), reason);
        self.notify(Notice::SteppedDown(token, reason));
        // Events from here on belong to no term (this one was logged inside it).
        self.term_span = None;
        // No new term before this one's work has returned.
        if self.work.is_some() {
            self.machine.pause_contention(true);
        }
    }

    pub(super) fn publish_state(&mut self) {
        let inner = &self.elector.inner;
        // Renewals move the local deadline; keep the shared copy current.
        if let Some(until) = self.machine.valid_until()
            && let Some((_, t)) = lock(&inner.lease).as_mut()
        {
            *t = self.clock.to_tokio(until);
        }
        let now = self.clock.now();
        let role = self.machine.role(now);
        let leader = match role {
            Role::Leader(_) => Some(inner.config.instance_id().to_owned()),
            Role::Follower => self.follower_of.clone(),
            _ => None,
        };
        if let Some(w) = &self.watch {
            // Only a follower acts on a notice; otherwise let another waiter have it.
            w.set_contending(self.machine.wants_notices());
        }
        let next = ElectorState { role, leader };
        inner.state.send_if_modified(|s| {
            if *s == next {
                false
            } else {
                *s = next;
                true
            }
        });
    }

    /// Waits for the first of: a reply, the machine's timer, shutdown, a command, or the end of
    /// the term's work; feeds it to the machine.
    pub(super) async fn wait(
        &mut self,
        shutdown: &CancellationToken,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) {
        let timeout = self.machine.poll_timeout().map(|t| self.clock.to_tokio(t));
        tokio::select! {
            biased;
            Some(joined) = self.requests.join_next_with_id() => {
                let (task_id, reply) = match joined {
                    Ok((task_id, (reply, took))) => {
                        if matches!(reply, Reply::Renew(Ok(_))) {
                            telemetry::renewed(self.name(), took);
                        }
                        (task_id, reply)
                    }
                    Err(e) => (e.id(), Reply::TimedOut),
                };
                if let Some(id) = self.request_ids.remove(&task_id) {
                    self.machine.handle_reply(self.clock.now(), id, reply);
                }
            }
            _ = async {
                match timeout {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => self.machine.handle_timeout(self.clock.now()),
            _ = shutdown.cancelled(), if !self.shutting_down => {}
            Some(cmd) = commands.recv() => self.command(cmd),
            _ = async {
                match self.watch.as_mut() {
                    Some(w) => w.notified().await,
                    None => std::future::pending().await,
                }
            } => {
                if self.machine.handle_notice(self.clock.now()) {
                    tracing::debug!(name = self.name(), "released by its holder: contending now");
                }
            }
            joined = async {
                match self.work.as_mut() {
                    Some((_, handle)) => handle.await,
                    None => std::future::pending().await,
                }
            } => self.work_returned(joined),
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Resign(token) => {
                let now = self.clock.now();
                if self.machine.token(now) == Some(token) {
                    self.machine.resign(now);
                }
            }
        }
    }

    /// The term's work returned (or panicked): the term ends, contention resumes.
    fn work_returned(&mut self, joined: Result<(), tokio::task::JoinError>) {
        let Some((token, _)) = self.work.take() else {
            return;
        };
        if let Err(e) = joined
            && e.is_panic()
        {
            let message = panic_message(e.into_panic());
            tracing::error!(name = self.name(), %token, panic = %message, "leader work panicked; ending the term and releasing the lease");
            self.notify(Notice::Panicked(token, message));
        }
        let now = self.clock.now();
        self.machine.work_returned(now, token);
        self.machine.pause_contention(false);
    }

    /// The machine stopped: wait for the last term's work (its token is cancelled already).
    pub(super) async fn await_last_work(&mut self) {
        if let Some((token, handle)) = self.work.take()
            && let Err(e) = handle.await
            && e.is_panic()
        {
            let message = panic_message(e.into_panic());
            tracing::error!(name = self.name(), %token, panic = %message, "leader work panicked while the election stopped");
            self.notify(Notice::Panicked(token, message));
        }
    }

    /// Publishes `Stopped`, lets the observer task drain, and returns the run's result.
    pub(super) async fn finish(mut self) -> Result<(), ElectorError> {
        self.finished = true;
        let inner = &self.elector.inner;
        *lock(&inner.lease) = None;
        inner.state.send_replace(ElectorState {
            role: Role::Stopped,
            leader: None,
        });
        drop(self.notices.take());
        if let Some(task) = self.observer_task.take() {
            let _ = task.await;
        }
        match self.refused.take() {
            // The observer task has ended: this is the last reference.
            Some((op, error)) => Err(ElectorError::Refused {
                op,
                error: Arc::try_unwrap(error)
                    .unwrap_or_else(|shared| BackendError::Refused(shared.to_string())),
            }),
            None => Ok(()),
        }
    }
}

impl<B: LeaseBackend, F> Drop for Run<'_, B, F> {
    /// A run dropped before it finished: see the module documentation.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let inner = &self.elector.inner;
        let now = self.clock.now();
        let term = self.machine.token(now);
        if let Some(c) = self.term_cancel.take() {
            c.cancel();
        }
        // The work is told, as at any step-down, and not awaited (nobody is left to await it).
        drop(self.work.take());
        self.requests.abort_all();
        *lock(&inner.lease) = None;
        inner.state.send_replace(ElectorState {
            role: Role::Stopped,
            leader: None,
        });
        if let (Some(token), Some(n)) = (term, &self.notices) {
            let _ = n.send(Notice::SteppedDown(token, StepDownReason::Shutdown));
        }
        tracing::warn!(
            name = inner.config.name(),
            ?term,
            "election run dropped before it finished; ending the term and releasing"
        );
        if self.machine.is_stopped() {
            return;
        }
        // Whatever this run may hold (a term, or an acquire in flight that may have been
        // granted): released by owner, which is harmless when nothing is held.
        let release = lease_core::ReleaseRequest::new(
            Arc::clone(self.machine.spec()),
            self.machine.owner().clone(),
        )
        .with_term_token(term);
        let req = Request::new(
            RequestId(u64::MAX),
            RequestKind::Release(release),
            now,
            now + inner.config.release_timeout(),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let backend = Arc::clone(&inner.backend);
            let clock = self.clock;
            runtime.spawn(async move {
                let (reply, _) = perform(backend, req, clock).await;
                tracing::debug!(?reply, "release after a dropped run");
            });
        }
    }
}

/// Performs one request, bounded by its deadline. `tokio::time::timeout_at` polls the request
/// before the timer, so a reply that is ready when the deadline fires counts as the reply.
async fn perform<B: LeaseBackend>(
    backend: Arc<B>,
    req: Request,
    clock: Clock,
) -> (Reply, Duration) {
    let started = tokio::time::Instant::now();
    let deadline = clock.to_tokio(req.deadline);
    let call = async {
        match &req.kind {
            RequestKind::Acquire(r) => Reply::Acquire(backend.acquire(r).await),
            RequestKind::Renew(r) => Reply::Renew(backend.renew(r).await),
            RequestKind::Release(r) => Reply::Release(backend.release(r).await),
            _ => Reply::TimedOut,
        }
    };
    let reply = tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or(Reply::TimedOut);
    (reply, started.elapsed())
}

/// Calls the observer for each notice, on its own task (never blocks the loop).
async fn observe(observer: Arc<dyn Observer>, mut rx: mpsc::UnboundedReceiver<Notice>) {
    while let Some(n) = rx.recv().await {
        match n {
            Notice::Elected(t) => observer.on_elected(t),
            Notice::SteppedDown(t, r) => observer.on_stepped_down(t, r),
            Notice::Follower(h) => observer.on_follower(h.as_deref()),
            Notice::Error(op, e) => observer.on_error(op, &e),
            Notice::Refused(op, e) => observer.on_refused(op, &e),
            Notice::Panicked(t, m) => observer.on_leader_panic(t, &m),
            Notice::StoreLost(loss) => observer.on_store_lost(&loss),
        }
    }
}

/// The message of a panic payload (`&str` or `String`, as `panic!` makes them).
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(_) => "a panic with a non-string payload".to_owned(),
        },
    }
}
