//! What the demo prints: the electors' observer, the write outcomes and the verdict.

use std::sync::{Arc, Mutex};

use redlease::Op;
use redlease::{BackendError, FenceOutcome, Observer, StepDownReason, Token};

use super::model::{NAMES, STORY_FAILED, Summary};
use crate::exit::{self, Failure};
use crate::output::{Json, Progress};

pub(super) fn finish(result: Result<Summary, String>, progress: &Progress) -> Result<u8, Failure> {
    match result {
        Ok(s) => {
            progress.say("");
            progress.say(&format!(
                "OK: one leader at a time; the successor's token {} is above {}; the stale \
                 leader's write was refused (mark {}).",
                s.successor_token, s.first_token, s.refused_mark
            ));
            if progress.json() {
                progress.event(
                    "result",
                    "",
                    &[
                        ("ok", Json::from(true)),
                        ("first_token", Json::from(s.first_token.get())),
                        ("successor_token", Json::from(s.successor_token.get())),
                        ("refused_mark", Json::from(s.refused_mark.get())),
                    ],
                );
            }
            Ok(exit::OK)
        }
        Err(why) => {
            if progress.json() {
                progress.event(
                    "result",
                    "",
                    &[
                        ("ok", Json::from(false)),
                        ("error", Json::from(why.as_str())),
                    ],
                );
            }
            Err(Failure::new(
                STORY_FAILED,
                format!("demo: the story did not go as expected: {why}"),
            ))
        }
    }
}

pub(super) fn describe_write(w: &Result<FenceOutcome, String>) -> String {
    match w {
        Ok(FenceOutcome::Applied) => "applied".to_owned(),
        Ok(FenceOutcome::Stale { mark }) => format!(
            "REFUSED, the token is stale (mark {})",
            mark.token()
                .map_or_else(|| "?".to_owned(), |t| t.to_string())
        ),
        Err(e) => format!("failed: {e}"),
    }
}

pub(super) fn outcome_name(w: &Result<FenceOutcome, String>) -> &'static str {
    match w {
        Ok(FenceOutcome::Applied) => "applied",
        Ok(FenceOutcome::Stale { .. }) => "stale",
        Err(_) => "error",
    }
}

/// Prints what the electors notice: followers, ended terms, the first failure of each kind.
pub(super) struct DemoObserver {
    pub(super) who: usize,
    pub(super) progress: Arc<Progress>,
    pub(super) errors_seen: Mutex<Vec<String>>,
}

impl Observer for DemoObserver {
    fn on_follower(&self, holder: Option<&str>) {
        let who = NAMES[self.who];
        let holder = holder.unwrap_or("another contender");
        self.progress.event(
            "follower",
            &format!("{who} follows {holder}"),
            &[("who", Json::from(who)), ("holder", Json::from(holder))],
        );
    }

    fn on_stepped_down(&self, token: Token, reason: StepDownReason) {
        let who = NAMES[self.who];
        let why = match reason {
            StepDownReason::DeadlineExpired => {
                "no renewal succeeded before its local deadline (a fully paused process would \
                 not even notice this)"
            }
            StepDownReason::Lost => "the lease is held by someone else",
            StepDownReason::Shutdown => "the demo is over",
            _ => "the term ended",
        };
        self.progress.event(
            "stepped_down",
            &format!("{who}'s elector ends term {token}: {why}"),
            &[
                ("who", Json::from(who)),
                ("token", Json::from(token.get())),
                ("reason", Json::from(format!("{reason:?}"))),
            ],
        );
    }

    fn on_error(&self, op: Op, error: &BackendError) {
        let who = NAMES[self.who];
        let kind = format!("{op:?}");
        {
            let mut seen = self.errors_seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.contains(&kind) {
                return;
            }
            seen.push(kind.clone());
        }
        self.progress.event(
            "error",
            &format!("{who}: {} {}", kind.to_lowercase(), short_error(error)),
            &[("who", Json::from(who)), ("op", Json::from(kind.as_str()))],
        );
    }
}

fn short_error(e: &BackendError) -> String {
    match e {
        BackendError::Timeout(_) => "got no reply in time".to_owned(),
        other => format!("failed: {other}"),
    }
}
