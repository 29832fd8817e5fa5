//! The story: the contenders, their leader work, and the plot with its checks.

use std::sync::{Arc, Mutex};

use redlease::core::LeaseSpec;
use redlease::{CancellationToken, ElectionConfig, Elector, FenceOutcome, Term, Token};
use tokio::sync::{mpsc, watch};

use super::model::{NAMES, STAGGER, STEP_LIMIT, Summary, TTL, WORK_BEFORE_STALL, report_key};
use super::render::{DemoObserver, describe_write, outcome_name};
use super::stall::Stall;
use super::store::Store;
use crate::duration;
use crate::output::{Json, Progress};

/// What the contenders report to the story.
#[derive(Debug)]
enum Report {
    /// Elected, and the first write under the token was made.
    Elected {
        who: usize,
        token: Token,
        write: Result<FenceOutcome, String>,
    },
    /// The write made after resuming, with the token kept from before the stall.
    StaleWrite {
        who: usize,
        write: Result<FenceOutcome, String>,
    },
}

fn report_value(who: usize, token: Token) -> String {
    format!("written by {} under token {token}", NAMES[who])
}

/// One contender's view of the story, for its leader callback.
struct Contender<S> {
    who: usize,
    store: Arc<S>,
    mark_key: String,
    report_key: String,
    progress: Arc<Progress>,
    reports: mpsc::UnboundedSender<Report>,
    write_again: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>>,
    finish: CancellationToken,
}

impl<S: Store> Contender<S> {
    /// One term. A real leader would stop writing at `term.cancelled()`; this one models a
    /// process that is paused before it can notice: it keeps its token and, when told to
    /// (after it resumes), writes with it again.
    async fn lead(self: Arc<Self>, token: Token) {
        let who = NAMES[self.who];
        self.progress.event(
            "elected",
            &format!("{who} is elected leader with token {token}"),
            &[("who", Json::from(who)), ("token", Json::from(token.get()))],
        );
        let write = self
            .store
            .fenced_set(
                &self.mark_key,
                token,
                &self.report_key,
                &report_value(self.who, token),
            )
            .await;
        self.progress.event(
            "write",
            &format!(
                "{who} writes the report under token {token}: {}",
                describe_write(&write)
            ),
            &[
                ("who", Json::from(who)),
                ("token", Json::from(token.get())),
                ("outcome", Json::from(outcome_name(&write))),
            ],
        );
        let _ = self.reports.send(Report::Elected {
            who: self.who,
            token,
            write,
        });
        let mut again = self.write_again.lock().await;
        tokio::select! {
            _ = self.finish.cancelled() => {}
            Some(()) = again.recv() => {
                let write = self
                    .store
                    .fenced_set(&self.mark_key, token, &self.report_key, &report_value(self.who, token))
                    .await;
                let _ = self.reports.send(Report::StaleWrite { who: self.who, write });
                self.finish.cancelled().await;
            }
        }
    }
}

async fn next_report(
    reports: &mut mpsc::UnboundedReceiver<Report>,
    what: &str,
) -> Result<Report, String> {
    match tokio::time::timeout(STEP_LIMIT, reports.recv()).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(format!("the contenders stopped before {what}")),
        Err(_) => Err(format!("no {what} within {STEP_LIMIT:?}")),
    }
}

pub(super) async fn story<S: Store>(
    store: Arc<S>,
    name: &str,
    label: &str,
    progress: &Arc<Progress>,
) -> Result<Summary, String> {
    progress.say(&format!(
        "redlease demo: leader election with fencing tokens, {label}"
    ));
    progress.say(&format!(
        "election {name:?}, TTL {}; contenders {}",
        duration::show(TTL),
        NAMES.join(", ")
    ));
    progress.say("");

    let shutdown = CancellationToken::new();
    let finish = CancellationToken::new();
    let (reports_tx, mut reports) = mpsc::unbounded_channel::<Report>();
    let mut stall = Vec::new();
    let mut write_again = Vec::new();
    let mut tasks = Vec::new();
    progress.event(
        "contend",
        &format!(
            "{} start contending, {} apart",
            NAMES.join(", "),
            duration::show(STAGGER)
        ),
        &[("name", Json::from(name))],
    );
    for (who, id) in NAMES.iter().enumerate() {
        let (stall_tx, stall_rx) = watch::channel(false);
        stall.push(stall_tx);
        let (again_tx, again_rx) = mpsc::unbounded_channel::<()>();
        write_again.push(again_tx);
        let config = ElectionConfig::builder(name, *id)
            .ttl(TTL)
            .build()
            .map_err(|e| e.to_string())?;
        let backend = Stall {
            inner: store.backend(),
            stalled: stall_rx,
        };
        let elector = Elector::builder(backend, config)
            .observer(DemoObserver {
                who,
                progress: Arc::clone(progress),
                errors_seen: Mutex::new(Vec::new()),
            })
            .build();
        let contender = Arc::new(Contender {
            who,
            store: Arc::clone(&store),
            mark_key: LeaseSpec::election_mark_key(name),
            report_key: report_key(name),
            progress: Arc::clone(progress),
            reports: reports_tx.clone(),
            write_again: Arc::new(tokio::sync::Mutex::new(again_rx)),
            finish: finish.clone(),
        });
        let shutdown = shutdown.clone();
        if who > 0 {
            // Staggered starts keep the story's first lines in a readable order.
            tokio::time::sleep(STAGGER).await;
        }
        tasks.push(tokio::spawn(async move {
            elector
                .run(shutdown, move |term: Term<Stall<S::Backend>>| {
                    Arc::clone(&contender).lead(term.token())
                })
                .await
        }));
    }
    drop(reports_tx);

    let outcome = plot(
        store.as_ref(),
        name,
        progress,
        &mut reports,
        &stall,
        &write_again,
    )
    .await;

    // Whatever happened: resume everyone, end the works, shut the electors down.
    for s in &stall {
        s.send_replace(false);
    }
    shutdown.cancel();
    finish.cancel();
    for t in tasks {
        match tokio::time::timeout(STEP_LIMIT, t).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(format!("an elector failed: {e}")),
            Ok(Err(e)) => return Err(format!("an elector task failed: {e}")),
            Err(_) => return Err("an elector did not shut down".to_owned()),
        }
    }
    outcome
}

/// The story itself, with its checks.
async fn plot<S: Store>(
    store: &S,
    name: &str,
    progress: &Progress,
    reports: &mut mpsc::UnboundedReceiver<Report>,
    stall: &[watch::Sender<bool>],
    write_again: &[mpsc::UnboundedSender<()>],
) -> Result<Summary, String> {
    // 1. One leader is elected and writes under its token.
    let (leader, first_token) = match next_report(reports, "first leader").await? {
        Report::Elected {
            who,
            token,
            write: Ok(FenceOutcome::Applied),
        } => (who, token),
        other => return Err(format!("unexpected first report: {other:?}")),
    };

    // 2. It works a little, then stalls with its token in hand.
    tokio::time::sleep(WORK_BEFORE_STALL).await;
    stall[leader].send_replace(true);
    let l = NAMES[leader];
    progress.event(
        "stall",
        &format!(
            "{l} stalls: its calls to the store hang from now on, like a long GC pause; it \
             still holds token {first_token}"
        ),
        &[
            ("who", Json::from(l)),
            ("token", Json::from(first_token.get())),
        ],
    );

    // 3. Its lease expires at the store; a successor is elected with a higher token.
    let (successor, successor_token) = match next_report(reports, "successor").await? {
        Report::Elected {
            who,
            token,
            write: Ok(FenceOutcome::Applied),
        } if who != leader => (who, token),
        other => return Err(format!("unexpected report while {l} stalls: {other:?}")),
    };
    if successor_token <= first_token {
        return Err(format!(
            "the successor's token {successor_token} is not above {first_token}"
        ));
    }

    // 4. The stalled leader resumes and writes with its old token: refused.
    stall[leader].send_replace(false);
    progress.event(
        "resume",
        &format!(
            "{l} resumes and, unaware that its term is over, writes with its old token \
             {first_token}"
        ),
        &[
            ("who", Json::from(l)),
            ("token", Json::from(first_token.get())),
        ],
    );
    write_again[leader]
        .send(())
        .map_err(|_| format!("{l}'s leader work is gone"))?;
    let refused_mark = match next_report(reports, "stale write").await? {
        Report::StaleWrite { who, write } if who == leader => match write {
            Ok(FenceOutcome::Stale { mark }) => {
                let mark = mark.token();
                progress.event(
                    "refused",
                    &format!(
                        "the store REFUSES {l}'s write: token {first_token} is stale, the \
                         mark is {} ({}'s term)",
                        mark.map_or_else(|| "?".to_owned(), |t| t.to_string()),
                        NAMES[successor]
                    ),
                    &[
                        ("who", Json::from(l)),
                        ("token", Json::from(first_token.get())),
                        ("mark", Json::from(mark.map(|t| t.get()))),
                    ],
                );
                match mark {
                    Some(m) if m == successor_token => m,
                    other => {
                        return Err(format!(
                            "refused with mark {other:?}, expected the successor's token \
                             {successor_token}"
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "{l}'s write with the stale token {first_token} was not refused: {other:?}"
                ));
            }
        },
        other => return Err(format!("unexpected report: {other:?}")),
    };

    // 5. The data is the successor's.
    let value = tokio::time::timeout(STEP_LIMIT, store.get(&report_key(name)))
        .await
        .map_err(|_| "reading the report timed out".to_owned())??;
    let expected = report_value(successor, successor_token);
    progress.event(
        "report",
        &format!(
            "the report reads {:?}",
            value.as_deref().unwrap_or("(missing)")
        ),
        &[("value", Json::from(value.clone()))],
    );
    if value.as_deref() != Some(expected.as_str()) {
        return Err(format!("the report reads {value:?}, expected {expected:?}"));
    }
    Ok(Summary {
        first_token,
        successor_token,
        refused_mark,
    })
}
