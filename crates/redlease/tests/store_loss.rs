//! Tokens across a store that loses data: repeated restarts without persistence and repeated
//! Sentinel failovers, under a running election whose leaders write to a separate, durable
//! resource through the fence.
//!
//! Three electors contend for one election. Each term's work appends its token to a list on a
//! second Redis (the resource, never restarted or failed over) through a fenced write every
//! few milliseconds, resigns after a short term (so elections keep happening, also around
//! each fault), and keeps writing with its old token for one TTL after its term ended: a
//! deposed leader that did not notice. Meanwhile the store loses data again and again:
//!
//! - **restarts**: `kill -9` and restart of a store that keeps nothing (lease, counter, mark,
//!   epoch: all gone);
//! - **failovers**: `SENTINEL FAILOVER` on a primary with two replicas and three sentinels.
//!   Until the sentinels demote it, the old primary still accepts writes from the clients
//!   connected to it; those writes are lost when it becomes a replica (asynchronous
//!   replication's window).
//!
//! Afterwards the resource's log, in the order the resource applied it, and the elections, in
//! the order they happened, are checked:
//!
//! - **token regressions**: terms whose token is not above every earlier term's;
//! - **stale writes accepted**: writes applied after a write of a term elected later (the
//!   fence exists to make this impossible; it can only happen when tokens went back).
//!
//! Configurations side by side: the default (clock-floored tokens, each instance's floor), the
//! plain counter with floors, the plain counter without floors (the behaviour before clock
//! floors and floors existed: the negative control, which must be caught on restarts), and for
//! failovers the default with replica acknowledgement (`WAIT`). The figures are printed
//! (`--nocapture`) and go into `docs/fencing.md`.
//!
//! `REDLEASE_LOSS_FAULTS` (default 20) sets the number of faults per configuration. The
//! rows with the plain counter and floors, and the failover row without floors, assert nothing
//! and are ignored in the default run; `--include-ignored` runs them for the table.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lease_testkit::redis::RedisServer;
use lease_testkit::sentinel::SentinelGroup;
use redlease::core::{
    AcquireOutcome, AcquireRequest, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use redlease::redis::{RedisBackend, RedisFencer, ReplicaAck, SentinelConnection};
use redlease::{
    BackendError, CancellationToken, ElectionConfig, Elector, Fencing, LeaseBackend, Token,
    TokenScheme,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_millis(1000);
/// Each term's work returns after this long: the leader resigns and the next election runs.
const TERM: Duration = Duration::from_millis(300);
/// Bound of every wait for a term, a fault or a topology change.
const WAIT: Duration = Duration::from_secs(60);
const LOG: &str = "resource:log";
const MARK: &str = "resource:mark";

/// A backend that drops every acquire's floor: the behaviour before floors existed.
#[derive(Clone)]
struct NoFloor<B>(B);

#[async_trait]
impl<B: LeaseBackend + Clone> LeaseBackend for NoFloor<B> {
    async fn acquire(&self, req: &AcquireRequest) -> Result<AcquireOutcome, BackendError> {
        let mut req = req.clone();
        req.floor = None;
        self.0.acquire(&req).await
    }
    async fn renew(&self, req: &RenewRequest) -> Result<RenewOutcome, BackendError> {
        self.0.renew(req).await
    }
    async fn release(&self, req: &ReleaseRequest) -> Result<ReleaseOutcome, BackendError> {
        self.0.release(req).await
    }
    async fn remaining(
        &self,
        spec: &LeaseSpec,
        owner: &Owner,
    ) -> Result<Option<Duration>, BackendError> {
        self.0.remaining(spec, owner).await
    }
    async fn inspect(&self, spec: &LeaseSpec) -> Result<LeaseInfo, BackendError> {
        self.0.inspect(spec).await
    }
}

impl<B: Fencing> Fencing for NoFloor<B> {
    type Fencer = B::Fencer;
    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.0.fencer(mark_key, token)
    }
}

/// What the run counted (read through `Debug`).
#[derive(Debug, Default)]
#[allow(dead_code)]
struct Figures {
    faults: usize,
    terms: usize,
    regressions: usize,
    /// Terms none of whose writes was applied (a regressed term is fenced out by the
    /// deposed leader's higher token; a term cut short by a fault may also write nothing).
    terms_without_writes: usize,
    writes_applied: usize,
    stale_accepted: usize,
    losses_reported: usize,
    seconds: u64,
}

/// What the electors share with the harness.
#[derive(Default)]
struct Shared {
    /// Every term's token, in the order the terms started.
    elections: Mutex<Vec<Token>>,
    /// The writers (each ends one TTL after its term).
    writers: Mutex<Vec<JoinHandle<()>>>,
    losses: AtomicUsize,
}

/// One elector: leads for [`TERM`] at most, writes, and keeps writing for a TTL after each
/// term.
fn spawn_node<B>(
    elector: Elector<B>,
    resource: redis::aio::MultiplexedConnection,
    shared: Arc<Shared>,
    terms: watch::Sender<usize>,
    shutdown: CancellationToken,
) -> JoinHandle<()>
where
    B: LeaseBackend + Fencing,
{
    tokio::spawn(async move {
        let result = elector
            .run(shutdown, move |term| {
                let resource = resource.clone();
                let shared = Arc::clone(&shared);
                let terms = terms.clone();
                async move {
                    let token = term.token();
                    // The term's rank: its place in the order of elections. Each write
                    // carries it, so two terms that got the same token stay distinct.
                    let rank = {
                        let mut elections = shared.elections.lock().unwrap();
                        elections.push(token);
                        elections.len() - 1
                    };
                    terms.send_modify(|n| *n += 1);
                    let fencer = RedisFencer::new(resource, MARK, token);
                    let ended = term.cancellation_token();
                    let writer = tokio::spawn(async move {
                        let mut stop_at: Option<tokio::time::Instant> = None;
                        loop {
                            // Refused (stale) and failed writes are expected; the log says
                            // which were applied.
                            let _ = tokio::time::timeout(
                                Duration::from_secs(1),
                                fencer.eval(
                                    "redis.call('RPUSH', KEYS[2], ARGV[2])",
                                    [LOG],
                                    [format!("{token}:{rank}")],
                                ),
                            )
                            .await;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            if ended.is_cancelled() {
                                let at = *stop_at
                                    .get_or_insert_with(|| tokio::time::Instant::now() + TTL);
                                if tokio::time::Instant::now() >= at {
                                    break;
                                }
                            }
                        }
                    });
                    shared.writers.lock().unwrap().push(writer);
                    tokio::select! {
                        _ = term.cancelled() => {}
                        _ = tokio::time::sleep(TERM) => {}
                    }
                }
            })
            .await;
        if let Err(e) = result {
            panic!("the elector stopped: {e}");
        }
    })
}

/// Waits (bounded) until more than `seen` terms have started.
async fn wait_terms(terms: &mut watch::Receiver<usize>, seen: usize, what: &str) {
    tokio::time::timeout(WAIT, terms.wait_for(|n| *n > seen))
        .await
        .unwrap_or_else(|_| panic!("no new term within {WAIT:?} ({what})"))
        .expect("the electors are alive");
}

type Fault<'a> = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>;

/// Runs three electors on `backends` through `faults` faults, then checks the log.
async fn measure<B>(
    backends: Vec<B>,
    resource_server: &RedisServer,
    faults: usize,
    mut fault: Fault<'_>,
) -> Figures
where
    B: LeaseBackend + Fencing,
{
    let started = Instant::now();
    let resource = resource_server.connection().await.expect("connect");
    let shared = Arc::new(Shared::default());
    let (terms, mut terms_rx) = watch::channel(0usize);
    let shutdown = CancellationToken::new();
    let mut nodes = Vec::new();
    for (i, backend) in backends.into_iter().enumerate() {
        let config = ElectionConfig::builder("{loss}", format!("node-{i}"))
            .ttl(TTL)
            .build()
            .expect("config");
        let elector = Elector::builder(backend, config)
            .observer(LossCounter(Arc::clone(&shared)))
            .build();
        nodes.push(spawn_node(
            elector,
            resource.clone(),
            Arc::clone(&shared),
            terms.clone(),
            shutdown.clone(),
        ));
    }
    let mut seen = 0;
    for i in 0..faults {
        // A term since the last fault, which writes for a while; then the next fault.
        wait_terms(&mut terms_rx, seen, &format!("before fault {i}")).await;
        tokio::time::sleep(TERM).await;
        seen = *terms_rx.borrow();
        fault().await;
    }
    wait_terms(&mut terms_rx, seen, "after the last fault").await;
    shutdown.cancel();
    for n in nodes {
        tokio::time::timeout(WAIT, n)
            .await
            .expect("the node stops")
            .expect("no panic");
    }
    // Deposed writers stop within a TTL of their term's end.
    let writers = std::mem::take(&mut *shared.writers.lock().unwrap());
    for w in writers {
        tokio::time::timeout(WAIT, w)
            .await
            .expect("the writer stops")
            .expect("no panic");
    }

    let mut conn = resource;
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg(LOG)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("read the log");
    let elections = shared.elections.lock().unwrap().clone();
    let log: Vec<usize> = log
        .iter()
        .map(|w| {
            w.split_once(':')
                .and_then(|(_, rank)| rank.parse().ok())
                .unwrap_or_else(|| panic!("a log entry without a rank: {w:?}"))
        })
        .collect();
    check(&elections, &log, faults, &shared, started)
}

/// Checks the elections (tokens in election order) against the log (the rank of each applied
/// write's term, in the order the resource applied them).
fn check(
    elections: &[Token],
    log: &[usize],
    faults: usize,
    shared: &Shared,
    started: Instant,
) -> Figures {
    let mut f = Figures {
        faults,
        terms: elections.len(),
        writes_applied: log.len(),
        losses_reported: shared.losses.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs(),
        ..Figures::default()
    };
    let mut highest = 0;
    for t in elections {
        if t.get() <= highest {
            f.regressions += 1;
        }
        highest = highest.max(t.get());
    }
    f.terms_without_writes = (0..elections.len())
        .filter(|rank| !log.contains(rank))
        .count();
    // A write applied after a write of a later-elected term is stale.
    let mut newest_written = 0usize;
    for &rank in log {
        if rank < newest_written {
            f.stale_accepted += 1;
        }
        newest_written = newest_written.max(rank);
    }
    f
}

struct LossCounter(Arc<Shared>);

impl redlease::Observer for LossCounter {
    fn on_store_lost(&self, _loss: &redlease::StoreLoss) {
        self.0.losses.fetch_add(1, Ordering::Relaxed);
    }
}

fn faults() -> usize {
    std::env::var("REDLEASE_LOSS_FAULTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

#[derive(Clone, Copy, Debug)]
enum Setup {
    Default,
    CounterWithFloors,
    CounterWithoutFloors,
    DefaultWithReplicaAck,
    CounterWithReplicaAck,
}

impl Setup {
    fn scheme(self) -> TokenScheme {
        match self {
            Setup::Default | Setup::DefaultWithReplicaAck => TokenScheme::ClockFloored,
            Setup::CounterWithFloors
            | Setup::CounterWithoutFloors
            | Setup::CounterWithReplicaAck => TokenScheme::Counter,
        }
    }
}

async fn with_restarts(setup: Setup) -> Figures {
    let n = faults();
    let store = RedisServer::start().await.expect("start the store");
    let resource = RedisServer::start().await.expect("start the resource");
    let mut backends = Vec::new();
    for _ in 0..3 {
        let manager = redis::aio::ConnectionManager::new(store.client().expect("client"))
            .await
            .expect("connect");
        backends.push(RedisBackend::new(manager).with_token_scheme(setup.scheme()));
    }
    let store = &store;
    let fault: Fault<'_> = Box::new(move || {
        Box::pin(async move {
            store.kill().await.expect("kill");
            store.restart().await.expect("restart");
        })
    });
    let f = match setup {
        Setup::CounterWithoutFloors => {
            let backends = backends.into_iter().map(NoFloor).collect();
            measure(backends, &resource, n, fault).await
        }
        _ => measure(backends, &resource, n, fault).await,
    };
    eprintln!("restarts, {setup:?}: {f:?}");
    f
}

async fn with_failovers(setup: Setup) -> Figures {
    let n = faults();
    let group = SentinelGroup::start(&format!("loss-{setup:?}").to_lowercase())
        .await
        .expect("start the sentinel group");
    let resource = RedisServer::start().await.expect("start the resource");
    let mut backends = Vec::new();
    for _ in 0..3 {
        let conn = tokio::time::timeout(
            WAIT,
            SentinelConnection::connect(group.sentinel_urls(), group.name()),
        )
        .await
        .expect("connect in time")
        .expect("connect through the sentinels");
        let mut backend = RedisBackend::new(conn).with_token_scheme(setup.scheme());
        if let Setup::DefaultWithReplicaAck | Setup::CounterWithReplicaAck = setup {
            backend = backend
                .with_replica_ack(ReplicaAck::new(2, Duration::from_millis(100)).expect("ack"));
        }
        backends.push(backend);
    }
    let group = &group;
    let fault: Fault<'_> = Box::new(move || {
        Box::pin(async move {
            let started = Instant::now();
            let old = group.primary_index().await.expect("the primary");
            group.failover().await.expect("SENTINEL FAILOVER");
            group
                .wait_new_primary(old, WAIT)
                .await
                .expect("a new primary");
            let promoted = started.elapsed();
            group.wait_settled(WAIT).await.expect("the group settles");
            eprintln!(
                "failover: new primary after {promoted:?}, settled after {:?}",
                started.elapsed()
            );
        })
    });
    let f = match setup {
        Setup::CounterWithoutFloors => {
            let backends = backends.into_iter().map(NoFloor).collect();
            measure(backends, &resource, n, fault).await
        }
        _ => measure(backends, &resource, n, fault).await,
    };
    eprintln!("failovers, {setup:?}: {f:?}");
    f
}

fn assert_strict(f: &Figures) {
    assert!(f.terms > f.faults, "elections kept happening: {f:?}");
    assert!(f.writes_applied > 0, "{f:?}");
    assert_eq!(f.regressions, 0, "{f:?}");
    assert_eq!(f.stale_accepted, 0, "{f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_keep_tokens_strict_with_the_default_scheme() {
    let f = with_restarts(Setup::Default).await;
    assert_strict(&f);
    assert!(
        f.losses_reported >= f.faults,
        "every loss is reported: {f:?}"
    );
}

/// Reported beside the others, not strict: a term that began just before the restart was
/// seen only by its holder, so the others' floors do not cover its token and the counter
/// hands it out again (0 of 20 restarts in one run, 2 of 20 in another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures for docs/fencing.md, not a check: run with --ignored --nocapture"]
async fn restarts_with_a_plain_counter_and_floors() {
    let f = with_restarts(Setup::CounterWithFloors).await;
    assert!(f.terms > f.faults, "{f:?}");
    assert!(
        f.losses_reported >= f.faults,
        "every loss is reported: {f:?}"
    );
}

/// The negative control: the plain counter without floors (before this work) must be caught
/// regressing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_with_a_plain_counter_and_no_floors_are_caught() {
    let f = with_restarts(Setup::CounterWithoutFloors).await;
    assert!(
        f.regressions > 0,
        "the checker must catch regressions: {f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_keep_tokens_strict_with_the_default_scheme() {
    let f = with_failovers(Setup::Default).await;
    assert_strict(&f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_keep_tokens_strict_with_replica_acknowledgement() {
    let f = with_failovers(Setup::DefaultWithReplicaAck).await;
    assert_strict(&f);
}

/// Reported beside the others, not strict: a grant the old primary gave in the window before
/// its demotion is lost with it, and only its holder saw that token, so another instance's
/// floor does not cover it and the counter hands it out again. The clock floor is what keeps
/// failovers strict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures for docs/fencing.md, not a check: run with --ignored --nocapture"]
async fn failovers_with_a_plain_counter_and_floors() {
    let f = with_failovers(Setup::CounterWithFloors).await;
    assert!(f.terms > f.faults, "{f:?}");
}

/// Reported beside the others: with `WAIT` a grant no replica holds is an unknown outcome, not
/// a term, so the plain counter's lost grants are never acted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures for docs/fencing.md, not a check: run with --ignored --nocapture"]
async fn failovers_with_a_plain_counter_and_replica_acknowledgement() {
    let f = with_failovers(Setup::CounterWithReplicaAck).await;
    assert!(f.terms > f.faults, "{f:?}");
}

/// Reported beside the others (the behaviour before this work); failovers lose grants in the
/// window before the old primary's demotion, so it regresses in most runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures for docs/fencing.md, not a check: run with --ignored --nocapture"]
async fn failovers_with_a_plain_counter_and_no_floors() {
    let f = with_failovers(Setup::CounterWithoutFloors).await;
    assert!(f.terms > f.faults, "{f:?}");
}

/// The checker itself: a history with a regressed token and a stale write must be flagged.
#[test]
fn the_checker_catches_a_regression_and_a_stale_write() {
    let t = |n| Token::new(n).unwrap();
    // The third term got the second's token again; the fourth a lower one.
    let elections = [t(5), t(6), t(6), t(4)];
    // Term 0 writes, term 2 writes, then term 1 (same token as term 2: the resource cannot
    // tell them apart) writes again: stale. Term 3 never writes (fenced out).
    let log = [0, 1, 2, 1];
    let f = check(&elections, &log, 1, &Shared::default(), Instant::now());
    assert_eq!(f.regressions, 2);
    assert_eq!(f.stale_accepted, 1);
    assert_eq!(f.terms_without_writes, 1);
}
