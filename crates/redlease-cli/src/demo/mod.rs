//! `redlease demo`: a failover story, on the in-memory store by default or on Redis.
//!
//! Three contenders elect a leader. The leader writes under its token, then **stalls**: its
//! calls to the store hang (a wrapper backend blocks them while a flag is set), as in a long
//! GC pause, so it cannot renew. Its lease expires at the store and a successor is elected
//! with a higher token. The stalled leader then resumes and, still holding its old token,
//! writes: the store refuses the write (stale), because the successor's election stamped a
//! higher mark.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redlease::core::election::Op;
use redlease::core::{
    AcquireOutcome, AcquireRequest, Instant, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome,
    ReleaseRequest, RenewOutcome, RenewRequest,
};
use redlease::memory::{ManualClock, MemoryBackend, MemoryWrite};
use redlease::redis::RedisBackend;
use redlease::redis::client::aio::MultiplexedConnection;
use redlease::{
    BackendError, CancellationToken, ElectionConfig, Elector, FenceOutcome, FencedResource,
    Fencing, LeaseBackend, Observer, StepDownReason, Term, Token, Ttl,
};
use tokio::sync::{mpsc, watch};

use crate::exit::{self, Failure};
use crate::output::{Json, Progress, Sink};
use crate::{Ctx, conn, duration};

/// The lease TTL of the story: short, so the whole story takes about two seconds.
const TTL: Duration = Duration::from_secs(1);
/// The contenders.
const NAMES: [&str; 3] = ["alpha", "bravo", "charlie"];
/// A hang guard for each step of the story (never reached when things work).
const STEP_LIMIT: Duration = Duration::from_secs(5);
/// How long the first leader works before it stalls (pacing of the story only).
const WORK_BEFORE_STALL: Duration = Duration::from_millis(300);
/// The delay between the contenders' starts.
const STAGGER: Duration = Duration::from_millis(20);
/// The exit code when the story did not go as expected.
const STORY_FAILED: u8 = 1;

pub(crate) async fn demo(ctx: &Ctx) -> Result<u8, Failure> {
    let progress = Arc::new(Progress::new(ctx.json, Sink::Stdout));
    if ctx.redis_explicit {
        let connection = conn::connect(&ctx.redis_url).await?;
        let suffix: String = redlease::random_token().chars().take(8).collect();
        let store = RedisStore {
            backend: RedisBackend::new(connection),
        };
        let name = format!("redlease-demo-{suffix}");
        let label = format!("on Redis at {}", ctx.redis_url);
        let store = Arc::new(store);
        let result = story(Arc::clone(&store), &name, &label, &progress).await;
        store.cleanup(&name).await;
        finish(result, &progress)
    } else {
        let clock = ManualClock::new();
        // The in-memory store expires leases on its manual clock: keep it equal to the real
        // time elapsed (the electors' deadlines run on the real clock).
        let ticker = tokio::spawn(follow_real_time(clock.clone()));
        let store = MemoryStore {
            backend: MemoryBackend::new(clock),
        };
        let label = "on the in-memory store (no Redis needed)".to_owned();
        let result = story(Arc::new(store), "redlease-demo", &label, &progress).await;
        ticker.abort();
        finish(result, &progress)
    }
}

async fn follow_real_time(clock: ManualClock) {
    let start = tokio::time::Instant::now();
    loop {
        clock.set(Instant::from_origin(start.elapsed()));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn finish(result: Result<Summary, String>, progress: &Progress) -> Result<u8, Failure> {
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

/// What the story proved.
#[derive(Debug)]
struct Summary {
    first_token: Token,
    successor_token: Token,
    refused_mark: Token,
}

/// The store the story runs on: its lease backend and fenced writes.
trait Store: Send + Sync + 'static {
    type Backend: LeaseBackend + Clone;
    fn backend(&self) -> Self::Backend;
    /// A fenced `SET key value` under `token` against the mark at `mark_key`.
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static;
    /// `GET key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send;
}

struct MemoryStore {
    backend: MemoryBackend,
}

impl Store for MemoryStore {
    type Backend = MemoryBackend;
    fn backend(&self) -> MemoryBackend {
        self.backend.clone()
    }
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static {
        let fencer = self.backend.fencer(mark_key, token);
        let write = MemoryWrite::Set {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        async move { fencer.apply(token, write).await.map_err(|e| e.to_string()) }
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send {
        let v = self.backend.get(key);
        async move { Ok(v) }
    }
}

struct RedisStore {
    backend: RedisBackend<MultiplexedConnection>,
}

impl RedisStore {
    async fn cleanup(&self, name: &str) {
        let mut conn = self.backend.connection().clone();
        let spec = LeaseSpec::election(name);
        let mut cmd = redlease::redis::client::cmd("DEL");
        for k in spec.keys() {
            cmd.arg(k);
        }
        cmd.arg(format!("{name}:fence"))
            .arg(LeaseSpec::election_mark_key(name))
            .arg(report_key(name));
        let _ = tokio::time::timeout(conn::OP_TIMEOUT, cmd.query_async::<i64>(&mut conn)).await;
    }
}

impl Store for RedisStore {
    type Backend = RedisBackend<MultiplexedConnection>;
    fn backend(&self) -> Self::Backend {
        self.backend.clone()
    }
    fn fenced_set(
        &self,
        mark_key: &str,
        token: Token,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<FenceOutcome, String>> + Send + 'static {
        let fencer = self.backend.fencer(mark_key, token);
        let (key, value) = (key.to_owned(), value.to_owned());
        async move { fencer.set(key, value).await.map_err(|e| e.to_string()) }
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<String>, String>> + Send {
        let mut conn = self.backend.connection().clone();
        let key = key.to_owned();
        async move {
            redlease::redis::client::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        }
    }
}

/// A backend whose calls hang while `stalled` is set (a paused process cannot reach the
/// store). Calls dropped while waiting (timed out by the elector) never reach the store.
#[derive(Clone)]
struct Stall<B> {
    inner: B,
    stalled: watch::Receiver<bool>,
}

impl<B> Stall<B> {
    async fn gate(&self) {
        let mut rx = self.stalled.clone();
        let _ = rx.wait_for(|stalled| !stalled).await;
    }
}

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Stall<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        self.gate().await;
        self.inner.acquire(req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.gate().await;
        self.inner.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.gate().await;
        self.inner.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.gate().await;
        self.inner.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.gate().await;
        self.inner.inspect(spec).await
    }
    fn check_spec(&self, spec: &LeaseSpec) -> Result<(), BackendError> {
        self.inner.check_spec(spec)
    }
    fn validity_margin(&self, ttl: Ttl) -> Duration {
        self.inner.validity_margin(ttl)
    }
}

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

fn report_key(name: &str) -> String {
    format!("{name}:report")
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

fn describe_write(w: &Result<FenceOutcome, String>) -> String {
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

fn outcome_name(w: &Result<FenceOutcome, String>) -> &'static str {
    match w {
        Ok(FenceOutcome::Applied) => "applied",
        Ok(FenceOutcome::Stale { .. }) => "stale",
        Err(_) => "error",
    }
}

/// Prints what the electors notice: followers, ended terms, the first failure of each kind.
struct DemoObserver {
    who: usize,
    progress: Arc<Progress>,
    errors_seen: Mutex<Vec<String>>,
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

async fn story<S: Store>(
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
