//! What the sidecar endpoint (`health.rs`) reports: `run`'s view of its election
//! ([`ElectionSource`]) and `lock`'s view of its lock ([`LockSource`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redlease::{CancellationToken, Elector, LeaseBackend, Role, Token};

use crate::health::{Source, lock, millis};
use crate::output::{Json, object};

/// `redlease run`'s view: the elector's own role, and the holder as stored.
///
/// **Healthy** (`/healthz` 200) unless, in this order:
/// 1. the supervisor is shutting down (a signal, CMD exited, leadership lost without
///    `--keep-running`): `shutting down`;
/// 2. the election loop has stopped (a permanent refusal: the process is about to exit);
/// 3. this instance does not lead, and the store has not answered for longer than the TTL
///    (a probe asks it who leads every acquire interval, on the election's connection). A
///    leader is healthy by construction: it leads only until its local deadline, the last
///    renewal the store answered plus the TTL.
///
/// `/leader`: `name`, `instance` (this instance's id), `role` (`leader` while this instance
/// holds the lease before its local deadline, `follower` once it has seen another holder,
/// `unknown` otherwise: starting, or the store not answering), `is_leader` (`role` is
/// `leader`), and who holds the lease: this instance's own term while it leads (`age_ms` 0),
/// else as stored in Redis at the last probe (every acquire interval and at each role change;
/// a request never costs a round trip): `holder`, `token` (the holder's term token),
/// `remaining_ttl_ms` (the stored TTL minus the probe's age), `age_ms` (how old that answer
/// is); `null` when nobody holds the lease. When the store did not answer the last probe, `error` says why and those fields
/// come from this instance's own view (its term when leading), else `null`.
pub(crate) struct ElectionSource<B> {
    elector: Elector<B>,
    ttl: Duration,
    /// Any of these cancelled: shutting down.
    stopping: Vec<CancellationToken>,
    reach: Mutex<Reach>,
}

/// When the store last answered, and the last error since.
struct Reach {
    last_ok: Instant,
    last_error: Option<String>,
    /// The last answer: who held the lease, and when it was asked.
    last_info: Option<(Option<redlease::LeaderInfo>, Instant)>,
}

impl<B: LeaseBackend> ElectionSource<B> {
    /// A view of `elector`, whose store was just reached (the connection is checked with a
    /// PING before an elector is built).
    pub(crate) fn new(
        elector: Elector<B>,
        ttl: Duration,
        stopping: Vec<CancellationToken>,
    ) -> Arc<Self> {
        Arc::new(ElectionSource {
            elector,
            ttl,
            stopping,
            reach: Mutex::new(Reach {
                last_ok: Instant::now(),
                last_error: None,
                last_info: None,
            }),
        })
    }

    /// Asks the store who leads every acquire interval, until shutdown, to know whether it
    /// answers.
    pub(crate) fn spawn_probe(self: &Arc<Self>) {
        let this = Arc::clone(self);
        let every = self.elector.config().acquire_interval();
        let mut roles = self.elector.subscribe();
        tokio::spawn(async move {
            loop {
                if this.stopping.iter().any(CancellationToken::is_cancelled) {
                    return;
                }
                let _ = this.stored().await;
                // Asked again at once when the role changes (a new holder is likely).
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    changed = roles.changed() => {
                        if changed.is_err() {
                            tokio::time::sleep(every).await;
                        }
                    }
                }
            }
        });
    }

    /// Who holds the lease, as stored; records whether the store answered.
    async fn stored(&self) -> Result<Option<redlease::LeaderInfo>, String> {
        let asked = Instant::now();
        let result = self.elector.leader().await;
        let mut reach = lock(&self.reach);
        match result {
            Ok(info) => {
                reach.last_ok = Instant::now();
                reach.last_error = None;
                reach.last_info = Some((info.clone(), asked));
                Ok(info)
            }
            Err(e) => {
                let e = crate::exit::one_line(&e.to_string());
                reach.last_error = Some(e.clone());
                Err(e)
            }
        }
    }
}

#[async_trait]
impl<B: LeaseBackend> Source for ElectionSource<B> {
    fn health(&self) -> Result<(), String> {
        if self.stopping.iter().any(CancellationToken::is_cancelled) {
            return Err("shutting down".to_owned());
        }
        if self.elector.state().role == Role::Stopped {
            return Err("the election has stopped".to_owned());
        }
        if self.elector.is_leader() {
            return Ok(());
        }
        let reach = lock(&self.reach);
        let silent = reach.last_ok.elapsed();
        if silent > self.ttl {
            return Err(format!(
                "the store has not answered for {} (longer than the TTL, {}){}",
                crate::duration::show(silent),
                crate::duration::show(self.ttl),
                reach
                    .last_error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        Ok(())
    }

    async fn leader(&self) -> String {
        let token = self.elector.token();
        let role = match (token, self.elector.state().role) {
            (Some(_), _) => "leader",
            (None, Role::Follower) => "follower",
            _ => "unknown",
        };
        let mut error = None;
        let (cached, last_error) = {
            let reach = lock(&self.reach);
            (reach.last_info.clone(), reach.last_error.clone())
        };
        let age = cached.as_ref().map(|(_, at)| at.elapsed());
        let answer = match (last_error, cached) {
            (Some(e), _) => Err(e),
            (None, Some((_, at))) if at.elapsed() > self.ttl => Err(format!(
                "the store has not answered for {}",
                crate::duration::show(at.elapsed())
            )),
            (None, Some((info, _))) => Ok(info),
            (None, None) => Err("the store has not answered yet".to_owned()),
        };
        // Leading: this instance's own view is the freshest there is.
        let answer = match (token, self.elector.valid_until()) {
            (Some(t), Some(until)) => Ok(Some(redlease::LeaderInfo::new(
                self.elector.instance_id(),
                Some(t),
                Some(until.saturating_duration_since(tokio::time::Instant::now())),
            ))),
            _ => answer,
        };
        let age = if token.is_some() {
            Some(Duration::ZERO)
        } else {
            age
        };
        let (holder, held_token, remaining) = match answer {
            Ok(Some(info)) => (
                Some(info.instance_id),
                info.token.map(Token::get),
                info.remaining
                    .map(|r| millis(r.saturating_sub(age.unwrap_or_default()))),
            ),
            Ok(None) => (None, None, None),
            Err(e) => {
                error = Some(e);
                match (token, self.elector.valid_until()) {
                    (Some(t), Some(until)) => (
                        Some(self.elector.instance_id().to_owned()),
                        Some(t.get()),
                        Some(millis(
                            until.saturating_duration_since(tokio::time::Instant::now()),
                        )),
                    ),
                    _ => (None, None, None),
                }
            }
        };
        object(&[
            ("name", Json::from(self.elector.config().name())),
            ("instance", Json::from(self.elector.instance_id())),
            ("role", Json::from(role)),
            ("is_leader", Json::from(token.is_some())),
            ("holder", Json::from(holder)),
            ("token", Json::from(held_token)),
            ("remaining_ttl_ms", Json::from(remaining)),
            ("age_ms", Json::from(age.map(millis))),
            ("error", Json::from(error)),
        ])
    }
}

/// Where `redlease lock` is.
#[derive(Debug)]
pub(crate) enum LockPhase {
    /// Waiting for the lock (within `--wait`).
    Obtaining,
    /// Obtained; held until `lost` fires.
    Held {
        token: Option<Token>,
        lost: CancellationToken,
    },
    /// Released after CMD exited.
    Released,
}

/// `redlease lock`'s view.
///
/// **Healthy** while obtaining or holding the lock; 503 once it is lost (`the lock was
/// lost`: renewal failed for good or its local deadline passed), released, or the supervisor
/// is shutting down (a signal). A store that does not answer shows as a loss once the lock's
/// deadline passes.
///
/// `/leader`: `key`, `state` (`obtaining`, `held`, `lost`, `released`), `held` (`state` is
/// `held`), `token` (the fencing token with `--fence`, else `null`).
pub(crate) struct LockSource {
    key: String,
    phase: Mutex<LockPhase>,
    stopping: CancellationToken,
}

impl LockSource {
    pub(crate) fn new(key: String) -> Arc<Self> {
        Arc::new(LockSource {
            key,
            phase: Mutex::new(LockPhase::Obtaining),
            stopping: CancellationToken::new(),
        })
    }

    pub(crate) fn set(&self, phase: LockPhase) {
        *lock(&self.phase) = phase;
    }

    /// The supervisor is stopping (a signal).
    pub(crate) fn stopping(&self) {
        self.stopping.cancel();
    }

    fn state(&self) -> (&'static str, Option<Token>) {
        match &*lock(&self.phase) {
            LockPhase::Obtaining => ("obtaining", None),
            LockPhase::Held { token, lost } if lost.is_cancelled() => ("lost", *token),
            LockPhase::Held { token, .. } => ("held", *token),
            LockPhase::Released => ("released", None),
        }
    }
}

#[async_trait]
impl Source for LockSource {
    fn health(&self) -> Result<(), String> {
        if self.stopping.is_cancelled() {
            return Err("shutting down".to_owned());
        }
        match self.state().0 {
            "lost" => Err("the lock was lost".to_owned()),
            "released" => Err("the lock was released".to_owned()),
            _ => Ok(()),
        }
    }

    async fn leader(&self) -> String {
        let (state, token) = self.state();
        object(&[
            ("key", Json::from(self.key.as_str())),
            ("state", Json::from(state)),
            ("held", Json::from(state == "held")),
            ("token", Json::from(token.map(Token::get))),
        ])
    }
}
