//! Leader election against a real Redis: the reference scenarios.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use redis::AsyncCommands;
use redlease::redis::RedisFencer;
use redlease::{CancellationToken, Elector, FenceOutcome, Role, Token, TokenError};

#[tokio::test]
async fn elect_and_release_on_shutdown() {
    let server = redis().await;
    let backend = backend(&server).await;
    let elector = Elector::new(backend, config("svc", "a", 1000));
    let shutdown = CancellationToken::new();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let token = wait_leader(&elector, EVENTUALLY).await;
    assert_eq!(token.get(), 1);
    let mut conn = server.connection().await.unwrap();
    let holder: Option<String> = conn.get("svc:leader").await.unwrap();
    assert_eq!(holder.as_deref(), Some("a"));
    let mark: String = conn.get("svc:fence:applied").await.unwrap();
    assert_eq!(mark, "1", "the mark is stamped at election");
    shutdown.cancel();
    run.await.unwrap().unwrap();
    let holder: Option<String> = conn.get("svc:leader").await.unwrap();
    assert_eq!(holder, None, "released on shutdown");
}

#[tokio::test]
async fn leader_work_returning_ends_the_term_and_releases() {
    let server = redis().await;
    // A long TTL: the key can only disappear quickly by being released, not by expiring.
    let rec = Recorder::default();
    let elector = Elector::builder(backend(&server).await, config("svc", "a", 10_000))
        .observer(rec.clone())
        .build();
    let shutdown = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Token>();
    let run = {
        let (e, s) = (elector.clone(), shutdown.clone());
        tokio::spawn(async move {
            e.run(s, move |term| {
                let tx = tx.clone();
                async move {
                    let first = term.token().get() == 1;
                    let _ = tx.send(term.token());
                    if !first {
                        term.cancelled().await;
                    }
                    // The first term returns at once, which ends it.
                }
            })
            .await
        })
    };
    let first = tokio::time::timeout(EVENTUALLY, rx.recv())
        .await
        .expect("the first term starts")
        .unwrap();
    assert_eq!(first.get(), 1);
    let mut conn = server.connection().await.unwrap();
    let released = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let holder: Option<String> = conn.get("svc:leader").await.unwrap();
            if holder.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        released.is_ok(),
        "the returned term's lease was not released"
    );
    // It re-contends and leads a new term with a greater token.
    let second = tokio::time::timeout(EVENTUALLY, rx.recv())
        .await
        .expect("a second term starts")
        .unwrap();
    assert!(second > first);
    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, run)
        .await
        .expect("run returns")
        .unwrap()
        .unwrap();
    let ev = rec.events();
    assert_eq!(ev[0], "elected 1");
    assert_eq!(ev[1], "stepped_down 1 WorkReturned");
}

#[tokio::test]
async fn resign_releases_and_recontends() {
    let server = redis().await;
    let a = Elector::new(backend(&server).await, config("svc", "a", 1000));
    let b = Elector::new(backend(&server).await, config("svc", "b", 1000));
    let shutdown = CancellationToken::new();
    let ra = {
        let (e, s) = (a.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ta = wait_leader(&a, EVENTUALLY).await;
    let rb = {
        let (e, s) = (b.clone(), shutdown.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&b, EVENTUALLY, "b follows", |r| *r == Role::Follower).await;
    a.resign();
    // b (polling every acquire interval) takes the released lease before a re-contends.
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta);
    wait_role(&a, EVENTUALLY, "a follows", |r| *r == Role::Follower).await;
    shutdown.cancel();
    ra.await.unwrap().unwrap();
    rb.await.unwrap().unwrap();
}

#[tokio::test]
async fn follower_takes_over_with_greater_token_and_events_fire_once() {
    let server = redis().await;
    let (rec_a, rec_b) = (Recorder::default(), Recorder::default());
    // A TTL of 2 s: on a loaded machine a 600 ms lease could lapse between renewals, which
    // would change the event lists (a deadline step-down and a new term).
    let a = Elector::builder(backend(&server).await, config("svc", "a", 2000))
        .observer(rec_a.clone())
        .build();
    let b = Elector::builder(backend(&server).await, config("svc", "b", 2000))
        .observer(rec_b.clone())
        .build();
    let (sa, sb) = (CancellationToken::new(), CancellationToken::new());
    let ra = {
        let (e, s) = (a.clone(), sa.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ta = wait_leader(&a, EVENTUALLY).await;
    let rb = {
        let (e, s) = (b.clone(), sb.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_role(&b, EVENTUALLY, "b follows", |r| *r == Role::Follower).await;
    // Anyone can ask who leads.
    let info = b.leader().await.unwrap().expect("a leader");
    assert_eq!(info.instance_id, "a");
    assert_eq!(info.token, Some(ta));
    // Let b poll several times as a follower.
    let mut polls = 0;
    while polls < 4 {
        tokio::time::sleep(b.config().acquire_interval()).await;
        polls += 1;
    }
    sa.cancel();
    ra.await.unwrap().unwrap();
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta, "successor's token {tb} must exceed {ta}");
    sb.cancel();
    rb.await.unwrap().unwrap();
    // A renewal or poll that times out under load is an `Error` event the design tolerates
    // (the term goes on): only the role events are compared exactly.
    let roles = |ev: Vec<String>| -> Vec<String> {
        ev.into_iter()
            .filter(|e| !e.starts_with("error "))
            .collect()
    };
    assert_eq!(
        roles(rec_a.events()),
        vec![
            format!("elected {ta}"),
            format!("stepped_down {ta} Shutdown")
        ]
    );
    let eb = roles(rec_b.events());
    assert_eq!(
        eb.iter().filter(|e| e.starts_with("follower")).count(),
        1,
        "{eb:?}"
    );
    assert_eq!(
        eb,
        vec![
            "follower a".to_owned(),
            format!("elected {tb}"),
            format!("stepped_down {tb} Shutdown")
        ]
    );
}

#[tokio::test]
async fn eight_electors_fifty_terms_unique_increasing_tokens() {
    let server = redis().await;
    let shutdown = CancellationToken::new();
    let terms: Arc<Mutex<Vec<(usize, Token)>>> = Arc::default();
    let mut runs = Vec::new();
    for i in 0..8 {
        let cfg = redlease::ElectionConfig::builder("busy", format!("e{i}"))
            .ttl(Duration::from_millis(200))
            .acquire_interval(Duration::from_millis(10))
            .build()
            .unwrap();
        let e = Elector::new(backend(&server).await, cfg);
        let (terms, s) = (terms.clone(), shutdown.clone());
        runs.push(tokio::spawn(async move {
            let stop = s.clone();
            e.run(s, move |term| {
                let (terms, stop) = (terms.clone(), stop.clone());
                async move {
                    let mut t = terms.lock().unwrap();
                    t.push((i, term.token()));
                    if t.len() >= 400 {
                        stop.cancel();
                    }
                    // Return: the term ends and is released.
                }
            })
            .await
        }));
    }
    for r in runs {
        tokio::time::timeout(Duration::from_secs(120), r)
            .await
            .expect("400 terms in time")
            .unwrap()
            .unwrap();
    }
    let terms = terms.lock().unwrap().clone();
    assert!(terms.len() >= 400);
    let tokens: Vec<u64> = terms.iter().map(|(_, t)| t.get()).collect();
    let unique: BTreeSet<u64> = tokens.iter().copied().collect();
    assert_eq!(unique.len(), tokens.len(), "a token was used by two terms");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must increase in election order"
    );
    let per_elector: BTreeSet<usize> = terms.iter().map(|(i, _)| *i).collect();
    assert!(per_elector.len() > 1, "terms spread over several electors");
}

#[tokio::test]
async fn deposed_terms_writes_are_refused_before_the_successor_writes() {
    let server = redis().await;
    let a = Elector::new(backend(&server).await, config("{svc}", "a", 600));
    let b = Elector::new(backend(&server).await, config("{svc}", "b", 600));
    let (sa, sb) = (CancellationToken::new(), CancellationToken::new());
    let ra = {
        let (e, s) = (a.clone(), sa.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let ta = wait_leader(&a, EVENTUALLY).await;
    let stale = a.fencer().expect("a leads");
    assert_eq!(
        stale.set("{svc}:state", "from a").await.unwrap(),
        FenceOutcome::Applied
    );
    sa.cancel();
    ra.await.unwrap().unwrap();
    let rb = {
        let (e, s) = (b.clone(), sb.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    let tb = wait_leader(&b, EVENTUALLY).await;
    assert!(tb > ta);
    // b has not written anything; a's token is already dead.
    match stale.set("{svc}:state", "late write from a").await.unwrap() {
        FenceOutcome::Stale { mark } => assert_eq!(mark.token(), Some(tb)),
        FenceOutcome::Applied => panic!("a deposed term's write was applied"),
    }
    let mut conn = server.connection().await.unwrap();
    let v: String = conn.get("{svc}:state").await.unwrap();
    assert_eq!(v, "from a", "the refused write changed nothing");
    // The successor writes; equal tokens keep passing for its whole term.
    let f = b.fencer().unwrap();
    assert!(f.set("{svc}:state", "b1").await.unwrap().is_applied());
    assert!(f.hset("{svc}:h", "k", "b2").await.unwrap().is_applied());
    // The same writes on the elector with an explicit token.
    let explicit = b.fencer_for(ta);
    assert!(!explicit.del(["{svc}:state"]).await.unwrap().is_applied());
    sb.cancel();
    rb.await.unwrap().unwrap();
}

#[tokio::test]
async fn invalid_and_stale_tokens_are_refused() {
    assert_eq!(Token::new(0), Err(TokenError::Zero));
    assert_eq!(Token::from_i64(-3), Err(TokenError::Negative(-3)));
    assert!(matches!("0".parse::<Token>(), Err(TokenError::Zero)));
    assert!(matches!(
        "-1".parse::<Token>(),
        Err(TokenError::Negative(-1))
    ));
    assert!(matches!(
        "9007199254740993".parse::<Token>(),
        Err(TokenError::TooLarge(_))
    ));
    let server = redis().await;
    let conn = server.connection().await.unwrap();
    let f5 = RedisFencer::for_election(conn.clone(), "svc", Token::new(5).unwrap());
    assert!(f5.set("k", "five").await.unwrap().is_applied());
    let f4 = f5.with_token(Token::new(4).unwrap());
    assert!(!f4.set("k", "four").await.unwrap().is_applied());
    assert!(
        f5.set("k", "five again").await.unwrap().is_applied(),
        "equal token accepted"
    );
}

#[tokio::test]
async fn running_the_same_elector_twice_is_refused() {
    let server = redis().await;
    let e = Elector::new(backend(&server).await, config("svc", "a", 1000));
    let s = CancellationToken::new();
    let first = {
        let (e, s) = (e.clone(), s.clone());
        tokio::spawn(async move { e.hold(s).await })
    };
    wait_leader(&e, EVENTUALLY).await;
    let second = e.hold(s.clone()).await;
    assert!(matches!(
        second,
        Err(redlease::ElectorError::AlreadyRunning)
    ));
    s.cancel();
    first.await.unwrap().unwrap();
}
