//! Driver tests over the in-memory backend, on tokio's paused clock (virtual time).
//!
//! These test the driver's own logic (one generic loop); the same scenarios against real Redis
//! live in the `redlease` crate's integration tests.

mod common;

use common::bridge;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::election::Op;
use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{BackendError, ElectionConfig, Role, StepDownReason, Token};
use lease_tokio::{CancellationToken, Elector, ElectorError, Observer};

fn config(id: &str) -> ElectionConfig {
    ElectionConfig::builder("jobs", id)
        .ttl(Duration::from_millis(900))
        .build()
        .unwrap()
}

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Observer for Recorder {
    fn on_elected(&self, token: Token) {
        self.0.lock().unwrap().push(format!("elected {token}"));
    }
    fn on_stepped_down(&self, token: Token, reason: StepDownReason) {
        self.0
            .lock()
            .unwrap()
            .push(format!("stepped_down {token} {reason:?}"));
    }
    fn on_follower(&self, holder: Option<&str>) {
        self.0.lock().unwrap().push(format!("follower {holder:?}"));
    }
    fn on_error(&self, op: Op, _error: &BackendError) {
        self.0.lock().unwrap().push(format!("error {op:?}"));
    }
}

async fn wait_role(e: &Elector<MemoryBackend>, pred: impl Fn(&Role) -> bool) -> Role {
    let mut rx = e.subscribe();
    let s = rx.wait_for(|s| pred(&s.role)).await.unwrap();
    s.role
}

#[tokio::test(start_paused = true)]
async fn elects_runs_work_and_releases_on_shutdown() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let backend = MemoryBackend::new(clock);
    let elector = Elector::new(backend.clone(), config("a"));
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let run = {
        let e = elector.clone();
        let s = shutdown.clone();
        tokio::spawn(async move {
            e.run(s, move |term| {
                let tx = tx.clone();
                async move {
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(term.token());
                    }
                    term.cancelled().await;
                }
            })
            .await
        })
    };
    let token = rx.await.unwrap();
    assert_eq!(token.get(), 1);
    assert_eq!(elector.token(), Some(token));
    assert_eq!(backend.get("jobs:leader").as_deref(), Some("a"));
    // Stays elected across many TTLs (renewals work).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(elector.token(), Some(token));
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        backend.get("jobs:leader"),
        None,
        "shutdown released the lease"
    );
    assert_eq!(elector.state().role, Role::Stopped);
    assert_eq!(elector.token(), None);
}

#[tokio::test(start_paused = true)]
async fn running_twice_is_refused() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let elector = Elector::new(MemoryBackend::new(clock), config("a"));
    let shutdown = CancellationToken::new();
    let first = {
        let e = elector.clone();
        let s = shutdown.clone();
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&elector, |r| matches!(r, Role::Leader(_))).await;
    let second = elector.hold(shutdown.clone()).await;
    assert!(matches!(second, Err(ElectorError::AlreadyRunning)));
    shutdown.cancel();
    first.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn work_returning_ends_the_term_and_releases() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let backend = MemoryBackend::new(clock);
    let rec = Recorder::default();
    let elector = Elector::builder(backend.clone(), config("a"))
        .observer(rec.clone())
        .seed(1)
        .build();
    let shutdown = CancellationToken::new();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let run = {
        let e = elector.clone();
        let s = shutdown.clone();
        let tokens = tokens.clone();
        tokio::spawn(async move {
            e.run(s.clone(), move |term| {
                let tokens = tokens.clone();
                let s = s.clone();
                async move {
                    let mut t = tokens.lock().unwrap();
                    t.push(term.token());
                    if t.len() == 3 {
                        s.cancel();
                    }
                    // Return at once: the term ends and must release.
                }
            })
            .await
        })
    };
    run.await.unwrap().unwrap();
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(
        tokens.iter().map(|t| t.get()).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(backend.get("jobs:leader"), None);
    let ev = rec.events();
    assert!(
        ev.contains(&"stepped_down 1 WorkReturned".to_owned()),
        "{ev:?}"
    );
    assert!(
        ev.contains(&"stepped_down 2 WorkReturned".to_owned()),
        "{ev:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn resign_steps_down_and_recontends_with_a_higher_token() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let elector = Elector::new(MemoryBackend::new(clock), config("a"));
    let shutdown = CancellationToken::new();
    let run = {
        let e = elector.clone();
        let s = shutdown.clone();
        tokio::spawn(async move { e.hold(s).await })
    };
    let Role::Leader(first) = wait_role(&elector, |r| matches!(r, Role::Leader(_))).await else {
        unreachable!()
    };
    elector.resign();
    wait_role(&elector, |r| !matches!(r, Role::Leader(_))).await;
    let Role::Leader(second) = wait_role(&elector, |r| matches!(r, Role::Leader(_))).await else {
        unreachable!()
    };
    assert!(second > first);
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn follower_takes_over_with_greater_token_and_events_fire_once() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let backend = MemoryBackend::new(clock);
    let rec_a = Recorder::default();
    let rec_b = Recorder::default();
    let a = Elector::builder(backend.clone(), config("a"))
        .observer(rec_a.clone())
        .build();
    let b = Elector::builder(backend.clone(), config("b"))
        .observer(rec_b.clone())
        .build();
    let stop_a = CancellationToken::new();
    let stop_b = CancellationToken::new();
    let run_a = {
        let (e, s) = (a.clone(), stop_a.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let Role::Leader(ta) = wait_role(&a, |r| matches!(r, Role::Leader(_))).await else {
        unreachable!()
    };
    let run_b = {
        let (e, s) = (b.clone(), stop_b.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&b, |r| *r == Role::Follower).await;
    assert_eq!(b.state().leader.as_deref(), Some("a"));
    // Many polls as a follower: still one follower event.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let info = b.leader().await.unwrap().unwrap();
    assert_eq!(info.instance_id, "a");
    assert_eq!(info.token, Some(ta));
    stop_a.cancel();
    run_a.await.unwrap().unwrap();
    let Role::Leader(tb) = wait_role(&b, |r| matches!(r, Role::Leader(_))).await else {
        unreachable!()
    };
    assert!(tb > ta);
    stop_b.cancel();
    run_b.await.unwrap().unwrap();
    let eb = rec_b.events();
    assert_eq!(
        eb.iter().filter(|e| e.starts_with("follower")).count(),
        1,
        "{eb:?}"
    );
    assert_eq!(eb.first().map(String::as_str), Some("follower Some(\"a\")"));
    assert!(eb.contains(&format!("elected {tb}")));
    let ea = rec_a.events();
    assert_eq!(
        ea,
        vec![
            format!("elected {ta}"),
            format!("stepped_down {ta} Shutdown")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn unreachable_backend_steps_down_by_the_deadline() {
    let clock = ManualClock::new();
    let _b = bridge(clock.clone());
    let backend = MemoryBackend::new(clock);
    let rec = Recorder::default();
    let elector = Elector::builder(backend.clone(), config("a"))
        .observer(rec.clone())
        .build();
    let shutdown = CancellationToken::new();
    let cancelled_at = Arc::new(Mutex::new(None));
    let run = {
        let e = elector.clone();
        let s = shutdown.clone();
        let cancelled_at = cancelled_at.clone();
        tokio::spawn(async move {
            e.run(s, move |term| {
                let cancelled_at = cancelled_at.clone();
                async move {
                    term.cancelled().await;
                    *cancelled_at.lock().unwrap() = Some(tokio::time::Instant::now());
                }
            })
            .await
        })
    };
    wait_role(&elector, |r| matches!(r, Role::Leader(_))).await;
    backend.set_unavailable(true);
    let cut = tokio::time::Instant::now();
    wait_role(&elector, |r| !matches!(r, Role::Leader(_))).await;
    // The last successful renewal was sent before the cut, so the term ended within one TTL.
    let ended = cancelled_at
        .lock()
        .unwrap()
        .unwrap_or_else(tokio::time::Instant::now);
    assert!(
        ended <= cut + Duration::from_millis(900),
        "term outlived the lease"
    );
    assert_eq!(elector.token(), None);
    assert!(rec.events().iter().any(|e| e == "error Renew"));
    assert!(rec.events().iter().any(|e| e.ends_with("DeadlineExpired")));
    backend.set_unavailable(false);
    let Role::Leader(t2) = wait_role(&elector, |r| matches!(r, Role::Leader(_))).await else {
        unreachable!()
    };
    assert_eq!(t2.get(), 2);
    shutdown.cancel();
    run.await.unwrap().unwrap();
}

/// An elector `id` holding in the background: the elector, its shutdown, its run.
#[allow(clippy::type_complexity)]
fn holding(
    backend: &Arc<MemoryBackend>,
    id: &str,
) -> (
    Elector<Arc<MemoryBackend>>,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), ElectorError>>,
) {
    let elector = Elector::new(Arc::clone(backend), config(id));
    let stop = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), stop.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    (elector, stop, run)
}

/// A `LeaderWatch` reports each change of leader (holder, token) without contending: nobody,
/// then `a` with token 1, then, after `a` resigned and only `b` contends, `b` with token 2.
#[tokio::test(start_paused = true)]
async fn a_leader_watch_reports_each_change_without_contending() {
    let clock = ManualClock::new();
    let _bridge = bridge(clock.clone());
    let backend = Arc::new(MemoryBackend::new(clock));
    let mut watch = lease_tokio::LeaderWatch::new(Arc::clone(&backend), "jobs")
        .unwrap()
        .every(Duration::from_millis(50))
        .unwrap();
    let bounded = Duration::from_secs(10);
    let first = tokio::time::timeout(bounded, watch.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(first.is_none(), "{first:?}");

    let (_a, stop_a, run_a) = holding(&backend, "a");
    let seen = tokio::time::timeout(bounded, watch.changed())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.instance_id.as_str(), seen.token.map(|t| t.get())),
        ("a", Some(1))
    );

    stop_a.cancel();
    tokio::time::timeout(bounded, run_a)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let gone = tokio::time::timeout(bounded, watch.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(gone.is_none(), "released on shutdown: {gone:?}");

    let (b, stop_b, run_b) = holding(&backend, "b");
    let mut from_b = b.watch();
    let seen = tokio::time::timeout(bounded, watch.changed())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.instance_id.as_str(), seen.token.map(|t| t.get())),
        ("b", Some(2))
    );
    let same = tokio::time::timeout(bounded, from_b.changed())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(same.instance_id, "b");
    stop_b.cancel();
    tokio::time::timeout(bounded, run_b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
