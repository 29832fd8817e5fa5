//! Leader election under real faults: a paused Redis, a blackholed network, restarts with and
//! without persistence, and a stalled leader process.
//!
//! Every step-down and take-over is also bounded from above (with [`SLACK`] for a loaded
//! machine): a step-down comes by one TTL after the fault (the local deadline of the last
//! renewal sent before it), a take-over by TTL + acquire interval (the old lease lapses, the
//! next poll wins), or by 2·TTL + acquire interval where an acquire may have been applied
//! unanswered during the fault (an orphan lease of up to one TTL) or errors backed off (up to
//! one TTL).

mod common;

use redlease::TokenScheme;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use lease_testkit::proxy::{FaultProxy, Mode};
use lease_testkit::redis::{Persistence, RedisServer};
use redlease::redis::RedisBackend;
use redlease::{CancellationToken, Elector, FenceOutcome, Role, Token};

type Run = tokio::task::JoinHandle<Result<(), redlease::ElectorError>>;
type Terms = tokio::sync::mpsc::UnboundedReceiver<(Token, &'static str)>;

/// Runs `e` with a leader callback that reports each term's token and when it was cancelled.
fn spawn_reporting<B: redlease::LeaseBackend + redlease::Fencing>(
    e: &Elector<B>,
    shutdown: &CancellationToken,
) -> (Run, Terms) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (e, s) = (e.clone(), shutdown.clone());
    let run = tokio::spawn(async move {
        e.run(s, move |term| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((term.token(), "elected"));
                term.cancelled().await;
                let _ = tx.send((term.token(), "cancelled"));
            }
        })
        .await
    });
    (run, rx)
}

async fn next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(Token, &'static str)>,
) -> (Token, &'static str) {
    tokio::time::timeout(EVENTUALLY, rx.recv())
        .await
        .expect("no event in time")
        .expect("channel open")
}

/// Scheduling slack on top of the protocol's bounds (a loaded 2-core machine, debug builds).
const SLACK: Duration = Duration::from_secs(2);

/// Asserts that `since.elapsed()` is at most `bound`.
fn within(since: Instant, bound: Duration, what: &str) {
    let took = since.elapsed();
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
}

/// TTL + acquire interval + slack: a take-over once the old lease can no longer be renewed.
fn takeover_bound(c: &redlease::ElectionConfig) -> Duration {
    c.ttl().get() + c.acquire_interval() + SLACK
}

/// 2·TTL + acquire interval + slack: a take-over after a fault during which an acquire may
/// have been applied unanswered (an orphan lease) or acquire errors backed off.
fn recovery_bound(c: &redlease::ElectionConfig) -> Duration {
    c.ttl().get() * 2 + c.acquire_interval() + SLACK
}

#[tokio::test]
async fn paused_redis_leader_steps_down_by_its_deadline_while_still_paused() {
    let server = redis().await;
    let elector = Elector::new(backend(&server).await, config("svc", "a", 600));
    let shutdown = CancellationToken::new();
    let (run, mut rx) = spawn_reporting(&elector, &shutdown);
    let (t1, what) = next(&mut rx).await;
    assert_eq!(what, "elected");
    server.pause().await.unwrap();
    let paused = Instant::now();
    // No renewal can succeed now; the term must end on the local deadline alone.
    let (t, what) = next(&mut rx).await;
    assert_eq!((t, what), (t1, "cancelled"));
    within(
        paused,
        elector.config().ttl().get() + SLACK,
        "the step-down",
    );
    // token() checks the deadline itself: no leadership is claimed after it.
    assert_eq!(elector.token(), None);
    assert_eq!(elector.valid_until(), None);
    assert!(!matches!(elector.state().role, Role::Leader(_)));
    server.resume().await.unwrap();
    let resumed = Instant::now();
    let (t2, what) = next(&mut rx).await;
    assert_eq!(what, "elected");
    assert!(t2 > t1);
    within(resumed, recovery_bound(elector.config()), "the re-election");
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn blackholed_renewals_are_bounded_and_the_successor_takes_over() {
    let server = redis().await;
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    // The client's own response timeout is disabled: only the library bounds the round trip.
    let client = redis::Client::open(server.url_via(proxy.addr())).unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .unwrap();
    let a = Elector::new(
        RedisBackend::new(conn).with_token_scheme(TokenScheme::Counter),
        config("svc", "a", 600),
    );
    let b = Elector::new(backend(&server).await, config("svc", "b", 600));
    let shutdown = CancellationToken::new();
    let (run_a, mut rx) = spawn_reporting(&a, &shutdown);
    let (ta, _) = next(&mut rx).await;
    let run_b = {
        let (e, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&b, EVENTUALLY, "b follows", |r| *r == Role::Follower).await;
    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    // Renewals hang in the blackhole; the library's bound ends the term anyway.
    let (t, what) = next(&mut rx).await;
    assert_eq!((t, what), (ta, "cancelled"));
    within(cut, a.config().ttl().get() + SLACK, "a's step-down");
    assert_eq!(a.token(), None);
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta);
    within(cut, takeover_bound(b.config()), "b's take-over");
    // a is still cut off and must not claim leadership.
    assert_eq!(a.token(), None);
    proxy.set_mode(Mode::Pass);
    proxy.reset_all().await;
    shutdown.cancel();
    run_a.await.unwrap().unwrap();
    run_b.await.unwrap().unwrap();
}

#[tokio::test]
async fn restart_with_aof_always_keeps_the_term_and_the_noscript_path_works() {
    let server = RedisServer::builder()
        .persistence(Persistence::AofAlways)
        .start()
        .await
        .unwrap();
    let manager = redis::aio::ConnectionManager::new(server.client().unwrap())
        .await
        .unwrap();
    let rec = Recorder::default();
    let elector = Elector::builder(
        RedisBackend::new(manager).with_token_scheme(TokenScheme::Counter),
        config("svc", "a", 4000),
    )
    .observer(rec.clone())
    .build();
    let shutdown = CancellationToken::new();
    let (run, mut rx) = spawn_reporting(&elector, &shutdown);
    let (t1, _) = next(&mut rx).await;
    // The restarted server has the lease (AOF) but no scripts: EVALSHA answers NOSCRIPT.
    server.restart().await.unwrap();
    // Outlive two TTLs: only successful renewals after the restart keep the same term.
    tokio::time::sleep(Duration::from_millis(8000)).await;
    assert_eq!(elector.token(), Some(t1), "the term survived the restart");
    assert!(rx.try_recv().is_err(), "no step-down: {:?}", rec.events());
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn restart_without_persistence_is_reported_and_tokens_stay_above() {
    let server = redis().await;
    let manager = redis::aio::ConnectionManager::new(server.client().unwrap())
        .await
        .unwrap();
    let rec = Recorder::default();
    let elector = Elector::builder(RedisBackend::new(manager), config("svc", "a", 1000))
        .observer(rec.clone())
        .build();
    let shutdown = CancellationToken::new();
    let (run, mut rx) = spawn_reporting(&elector, &shutdown);
    let (t1, _) = next(&mut rx).await;
    // Let a few terms go by so the counter is above 1.
    elector.resign();
    let _ = next(&mut rx).await; // cancelled
    let (t2, _) = next(&mut rx).await;
    assert!(t2 > t1);
    let killed = Instant::now();
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    let restarted = Instant::now();
    // The data is gone: the renewal finds the lease not ours, the term ends, and the next
    // election mints a token above t2 anyway (the clock floor, and this instance's own floor),
    // and reports that the store lost its fence state (a new epoch).
    let (t, what) = next(&mut rx).await;
    assert_eq!((t, what), (t2, "cancelled"));
    // No renewal can succeed after the kill: the local deadline ends the term at the latest,
    // and the restart time is part of that bound.
    within(
        killed,
        elector.config().ttl().get() + SLACK,
        "the step-down",
    );
    let (t3, what) = next(&mut rx).await;
    assert_eq!(what, "elected");
    within(
        restarted,
        recovery_bound(elector.config()),
        "the re-election",
    );
    assert!(
        t3 > t2,
        "token {t3} after {t2}: the counter loss was not healed"
    );
    let events = rec.events();
    assert!(
        events.iter().any(|e| e == "store lost: new epoch"),
        "the loss was not reported: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e.starts_with("regression")),
        "no regression: {events:?}"
    );
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

/// A leader whose whole runtime stalls (a task blocks the thread) past its TTL: meanwhile a
/// successor is elected, and the stale leader's fenced write — made the moment it resumes,
/// before its loop can notice anything — is refused.
#[tokio::test]
async fn a_stalled_leader_process_is_fenced_out() {
    let server = redis().await;
    let url = server.url();
    let (elected_tx, elected_rx) = std::sync::mpsc::channel::<Token>();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let (result_tx, result_rx) = tokio::sync::oneshot::channel::<FenceOutcome>();
    let result_tx = Arc::new(Mutex::new(Some(result_tx)));
    let resume_rx = Arc::new(Mutex::new(resume_rx));
    let stalled = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let a = Elector::new(backend_at(&url).await, config("{svc}", "a", 600));
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            a.run(shutdown, move |term| {
                let (elected_tx, resume_rx, result_tx, stop) = (
                    elected_tx.clone(),
                    resume_rx.clone(),
                    result_tx.clone(),
                    stop.clone(),
                );
                async move {
                    let fencer = term.fencer();
                    assert!(fencer.set("{svc}:state", "a").await.unwrap().is_applied());
                    let _ = elected_tx.send(term.token());
                    // The stall: this blocks the runtime's only thread (no renewals, no
                    // timers) until the test lets it go.
                    let _ = resume_rx.lock().unwrap().recv();
                    let outcome = fencer.set("{svc}:state", "stale a").await.unwrap();
                    if let Some(tx) = result_tx.lock().unwrap().take() {
                        let _ = tx.send(outcome);
                    }
                    stop.cancel();
                }
            })
            .await
            .unwrap();
        });
    });
    let ta = tokio::task::spawn_blocking(move || elected_rx.recv().unwrap())
        .await
        .unwrap();
    // a stalled right after its election: its lease lapses by one TTL.
    let stalled_since = Instant::now();
    let b = Elector::new(backend(&server).await, config("{svc}", "b", 600));
    let shutdown = CancellationToken::new();
    let run_b = {
        let (e, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta);
    within(stalled_since, takeover_bound(b.config()), "b's take-over");
    resume_tx.send(()).unwrap();
    let outcome = result_rx.await.unwrap();
    match outcome {
        FenceOutcome::Stale { mark } => assert_eq!(mark.token(), Some(tb)),
        FenceOutcome::Applied => panic!("the stalled leader's write was applied"),
    }
    let mut conn = server.connection().await.unwrap();
    let v: String = redis::AsyncCommands::get(&mut conn, "{svc}:state")
        .await
        .unwrap();
    assert_eq!(v, "a");
    tokio::task::spawn_blocking(move || stalled.join().unwrap())
        .await
        .unwrap();
    shutdown.cancel();
    run_b.await.unwrap().unwrap();
}
