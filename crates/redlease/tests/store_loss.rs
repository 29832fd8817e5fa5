//! Tokens across a store that loses its data: repeated restarts without persistence under a
//! running election whose leaders write to a separate, durable resource through the fence.
//!
//! Three electors share a Redis that keeps nothing across a restart (`kill -9`, restart: every
//! key is gone: lease, counter, mark, epoch). Each leader appends `token` to a list on a second
//! Redis (the resource, never restarted) through a fenced write, every few milliseconds, and
//! keeps writing with its old token for one TTL after its term ended: a deposed leader that did
//! not notice. After the restarts the resource's log, in the order the resource applied it, and
//! the elections, in the order they happened, are checked:
//!
//! - **token regressions**: terms whose token is not above every earlier term's;
//! - **stale writes accepted**: writes applied after a write of a term elected later (the fence
//!   exists to make this impossible; it can only happen when tokens went back).
//!
//! Three configurations run side by side: the default (clock-floored tokens, each instance's
//! floor), the plain counter with floors, and the plain counter without floors (the behaviour
//! before clock floors and floors existed; a negative control: it must be caught). The figures
//! are printed (`--nocapture`) and go into `docs/fencing.md`.
//!
//! `REDLEASE_LOSS_RESTARTS` (default 20) sets the number of restarts per configuration.
//!
//! **Not yet reliable** (ignored): in process mode the electors saw broken pipes before the
//! first restart and the first term came only after 15 s. Until that is understood, the
//! figures come from the simulation and the single-restart tests, not from this harness.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lease_testkit::redis::RedisServer;
use redlease::core::{
    AcquireOutcome, AcquireRequest, LeaseInfo, LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest,
    RenewOutcome, RenewRequest,
};
use redlease::redis::{RedisBackend, RedisFencer};
use redlease::{
    BackendError, CancellationToken, ElectionConfig, Elector, LeaseBackend, Token, TokenScheme,
};

const TTL: Duration = Duration::from_millis(1000);
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

impl<B: redlease::Fencing> redlease::Fencing for NoFloor<B> {
    type Fencer = B::Fencer;
    fn fencer(&self, mark_key: &str, token: Token) -> B::Fencer {
        self.0.fencer(mark_key, token)
    }
}

#[derive(Clone, Copy, Debug)]
enum Setup {
    Default,
    CounterWithFloors,
    CounterWithoutFloors,
}

#[derive(Debug, Default)]
struct Figures {
    terms: usize,
    regressions: usize,
    writes_applied: usize,
    stale_accepted: usize,
    losses_reported: usize,
}

/// One elector's run: leads, writes, and keeps writing for a TTL after each term.
fn spawn_node<B>(
    elector: Elector<B>,
    resource: redis::aio::MultiplexedConnection,
    elections: Arc<Mutex<Vec<(Instant, Token)>>>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()>
where
    B: LeaseBackend + redlease::Fencing,
{
    tokio::spawn(async move {
        let result = elector
            .run(shutdown, move |term| {
                let resource = resource.clone();
                let elections = Arc::clone(&elections);
                async move {
                    let token = term.token();
                    elections.lock().unwrap().push((Instant::now(), token));
                    // Writes in the background, and for one TTL after the term ends too: a
                    // deposed leader that has not noticed yet.
                    let fencer = RedisFencer::new(resource, MARK, token);
                    let ended = term.cancellation_token();
                    tokio::spawn(async move {
                        let mut stop_at: Option<tokio::time::Instant> = None;
                        loop {
                            let _ = fencer
                                .eval(
                                    "redis.call('RPUSH', KEYS[2], ARGV[2])",
                                    [LOG],
                                    [token.to_string()],
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
                    term.cancelled().await;
                }
            })
            .await;
        if let Err(e) = result {
            panic!("the elector stopped: {e}");
        }
    })
}

async fn measure(setup: Setup, restarts: usize) -> Figures {
    let store = RedisServer::start().await.expect("start the store");
    let resource_server = RedisServer::start().await.expect("start the resource");
    let resource = resource_server.connection().await.expect("connect");
    let elections = Arc::new(Mutex::new(Vec::new()));
    let losses = Arc::new(Mutex::new(0usize));
    let shutdown = CancellationToken::new();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let manager = redis::aio::ConnectionManager::new(store.client().expect("client"))
            .await
            .expect("connect");
        let scheme = match setup {
            Setup::Default => TokenScheme::ClockFloored,
            _ => TokenScheme::Counter,
        };
        let backend = RedisBackend::new(manager).with_token_scheme(scheme);
        let config = ElectionConfig::builder("{loss}", format!("node-{i}"))
            .ttl(TTL)
            .build()
            .expect("config");
        let observer = LossCounter(Arc::clone(&losses));
        let node = match setup {
            Setup::CounterWithoutFloors => spawn_node(
                Elector::builder(NoFloor(backend), config)
                    .observer(observer)
                    .build(),
                resource.clone(),
                Arc::clone(&elections),
                shutdown.clone(),
            ),
            _ => spawn_node(
                Elector::builder(backend, config).observer(observer).build(),
                resource.clone(),
                Arc::clone(&elections),
                shutdown.clone(),
            ),
        };
        nodes.push(node);
    }
    for _ in 0..restarts {
        // Wait (bounded) for a term to start since the last restart, then let it write.
        let before = elections.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(15);
        while elections.lock().unwrap().len() == before {
            assert!(Instant::now() < deadline, "no election within 15 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.kill().await.expect("kill");
        store.restart().await.expect("restart");
    }
    // One more term after the last restart, then stop everything.
    let before = elections.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(15);
    while elections.lock().unwrap().len() == before {
        assert!(Instant::now() < deadline, "no election within 15 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    shutdown.cancel();
    for n in nodes {
        tokio::time::timeout(Duration::from_secs(10), n)
            .await
            .expect("the node stops")
            .expect("no panic");
    }
    // Deposed writers finish within a TTL of their term's end.
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;

    let mut conn = resource;
    let log: Vec<u64> = redis::cmd("LRANGE")
        .arg(LOG)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("read the log");
    let elections = elections.lock().unwrap().clone();
    let mut f = Figures {
        terms: elections.len(),
        writes_applied: log.len(),
        losses_reported: *losses.lock().unwrap(),
        ..Figures::default()
    };
    let mut highest = 0;
    for (_, t) in &elections {
        if t.get() <= highest {
            f.regressions += 1;
        }
        highest = highest.max(t.get());
    }
    // A term's rank: the index of its (first) election. A write applied after a write of a
    // later-elected term is stale.
    let rank = |token: u64| {
        elections
            .iter()
            .rposition(|(_, t)| t.get() == token)
            .unwrap_or(usize::MAX)
    };
    let mut newest_written = 0usize;
    for &w in &log {
        let r = rank(w);
        if r < newest_written {
            f.stale_accepted += 1;
        }
        newest_written = newest_written.max(r);
    }
    f
}

struct LossCounter(Arc<Mutex<usize>>);

impl redlease::Observer for LossCounter {
    fn on_error(&self, op: redlease::Op, error: &BackendError) {
        eprintln!("error {op:?}: {error}");
    }
    fn on_refused(&self, op: redlease::Op, error: &BackendError) {
        eprintln!("refused {op:?}: {error}");
    }
    fn on_store_lost(&self, _loss: &redlease::StoreLoss) {
        *self.0.lock().unwrap() += 1;
    }
}

fn restarts() -> usize {
    std::env::var("REDLEASE_LOSS_RESTARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "not yet reliable: in process mode the electors saw broken pipes before the first restart and the first term came only after 15 s; investigate before relying on its figures"]
async fn restarts_without_persistence_keep_tokens_strict_with_the_default_scheme() {
    let n = restarts();
    let f = measure(Setup::Default, n).await;
    eprintln!("default (clock-floored, floors), {n} restarts: {f:?}");
    assert!(f.terms > n, "every restart should end in a new term: {f:?}");
    assert!(f.writes_applied > 0, "{f:?}");
    assert_eq!(f.regressions, 0, "{f:?}");
    assert_eq!(f.stale_accepted, 0, "{f:?}");
    assert!(f.losses_reported >= n, "every loss is reported: {f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "not yet reliable: in process mode the electors saw broken pipes before the first restart and the first term came only after 15 s; investigate before relying on its figures"]
async fn restarts_without_persistence_with_a_plain_counter_and_floors() {
    let n = restarts();
    let f = measure(Setup::CounterWithFloors, n).await;
    eprintln!("counter with floors, {n} restarts: {f:?}");
    assert!(f.terms > n, "{f:?}");
    assert!(f.losses_reported >= n, "every loss is reported: {f:?}");
}

/// The negative control: the plain counter without floors (before this work) must be caught
/// regressing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "not yet reliable: in process mode the electors saw broken pipes before the first restart and the first term came only after 15 s; investigate before relying on its figures"]
async fn restarts_without_persistence_with_a_plain_counter_and_no_floors_are_caught() {
    let n = restarts();
    let f = measure(Setup::CounterWithoutFloors, n).await;
    eprintln!("counter without floors, {n} restarts: {f:?}");
    assert!(
        f.regressions > 0,
        "the checker must catch regressions: {f:?}"
    );
}
