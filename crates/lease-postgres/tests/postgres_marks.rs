//! The per-name mark against a real Postgres: stale refused, equal accepted, a refused fence
//! aborts every write of its transaction, concurrent writers never regress, the successor's
//! raise fences out the deposed term, and `PgFence` as a `FencedResource`. The concurrency test
//! proves its transactions overlapped, and its negative control (a naive read-then-write fence
//! through the same workload and checker) must be caught regressing.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    TestDb, assert_non_decreasing, first_regression, max_overlap, overlapping_spans, shuffle,
};
use lease_postgres::{
    BeginOutcome, MarkTable, PgFence, PgFenceError, PgWrite, QualifiedName, TxOutcome,
};
use lease_postgres::{FenceMark, FenceOutcome, FencedResource, Token};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

fn t(raw: u64) -> Token {
    Token::new(raw).unwrap()
}

async fn count(client: &Client, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

async fn setup(test: &str) -> (TestDb, Client, MarkTable) {
    let db = TestDb::new(test).await;
    let client = db.client().await;
    let marks = MarkTable::default();
    marks.migrate(&client).await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE state (id int PRIMARY KEY, value bigint NOT NULL);
             INSERT INTO state VALUES (1, 0);
             CREATE TABLE audit (seq bigserial PRIMARY KEY, token bigint NOT NULL);",
        )
        .await
        .unwrap();
    (db, client, marks)
}

#[tokio::test]
async fn stale_token_is_refused_and_nothing_is_written() {
    let (_db, mut client, marks) = setup("stale").await;

    match marks.begin(&mut client, "jobs", t(5)).await.unwrap() {
        BeginOutcome::Fenced(tx) => {
            tx.execute("UPDATE state SET value = 5 WHERE id = 1", &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        BeginOutcome::Stale { mark } => panic!("first fence refused by {mark:?}"),
    }
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(5))
    );

    // A lower token: refused with the mark that refused it, and the transaction rolled back.
    match marks.begin(&mut client, "jobs", t(4)).await.unwrap() {
        BeginOutcome::Stale { mark } => assert_eq!(mark, FenceMark::at(t(5))),
        BeginOutcome::Fenced(_) => panic!("token 4 passed a mark of 5"),
    }
    // Through the closure helper: the closure never runs.
    let ran = AtomicBool::new(false);
    let outcome = marks
        .run(&mut client, "jobs", t(1), |tx| {
            ran.store(true, Ordering::SeqCst);
            Box::pin(async move {
                tx.execute("UPDATE state SET value = 1 WHERE id = 1", &[])
                    .await?;
                Ok::<_, PgFenceError>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        TxOutcome::Stale {
            mark: FenceMark::at(t(5))
        }
    );
    assert!(
        !ran.load(Ordering::SeqCst),
        "the closure ran under a stale token"
    );

    let value: i64 = client
        .query_one("SELECT value FROM state WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(value, 5, "a stale write reached the table");
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(5))
    );
    // Other names are independent.
    assert_eq!(marks.mark(&client, "other").await.unwrap(), FenceMark::NONE);
}

#[tokio::test]
async fn equal_token_is_accepted_every_time() {
    let (_db, mut client, marks) = setup("equal").await;
    for i in 0..3i64 {
        let outcome = marks
            .run(&mut client, "jobs", t(7), |tx| {
                Box::pin(async move {
                    tx.execute("INSERT INTO audit (token) VALUES ($1)", &[&i])
                        .await?;
                    Ok::<_, PgFenceError>(())
                })
            })
            .await
            .unwrap();
        assert!(
            outcome.is_applied(),
            "write {i} under the same token refused: {outcome:?}"
        );
    }
    assert_eq!(count(&client, "audit").await, 3);
    // And raise_mark with the current mark is accepted too.
    assert_eq!(
        marks.raise_mark(&client, "jobs", t(7)).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(7))
    );
}

#[tokio::test]
async fn refused_fence_aborts_every_write_of_the_transaction() {
    let (_db, mut client, marks) = setup("rollback").await;
    assert!(
        marks
            .raise_mark(&client, "jobs", t(10))
            .await
            .unwrap()
            .is_applied()
    );

    // Writes to two tables BEFORE the fence, then the fence is refused. Even if the caller
    // ignores the outcome, keeps writing and commits, nothing reaches the tables.
    let tx = client.transaction().await.unwrap();
    tx.execute("UPDATE state SET value = 99 WHERE id = 1", &[])
        .await
        .unwrap();
    tx.execute("INSERT INTO audit (token) VALUES (9)", &[])
        .await
        .unwrap();
    let outcome = marks.fence(&tx, "jobs", t(9)).await.unwrap();
    assert_eq!(
        outcome,
        FenceOutcome::Stale {
            mark: FenceMark::at(t(10))
        }
    );
    let after = tx
        .execute("INSERT INTO audit (token) VALUES (9)", &[])
        .await
        .unwrap_err();
    assert_eq!(
        after.code(),
        Some(&SqlState::IN_FAILED_SQL_TRANSACTION),
        "the transaction must be aborted after a refused fence: {after}"
    );
    let _ = tx.commit().await; // COMMIT of an aborted transaction rolls back
    assert_eq!(count(&client, "audit").await, 0);
    let value: i64 = client
        .query_one("SELECT value FROM state WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(value, 0);

    // A savepoint: only the savepoint is aborted; the outer transaction still commits its
    // own earlier write and can go on.
    let mut outer = client.transaction().await.unwrap();
    outer
        .execute("INSERT INTO audit (token) VALUES (-1)", &[])
        .await
        .unwrap();
    match marks.begin(&mut outer, "jobs", t(3)).await.unwrap() {
        BeginOutcome::Stale { mark } => assert_eq!(mark, FenceMark::at(t(10))),
        BeginOutcome::Fenced(_) => panic!("token 3 passed a mark of 10"),
    }
    outer
        .execute("INSERT INTO audit (token) VALUES (-2)", &[])
        .await
        .unwrap();
    outer.commit().await.unwrap();
    assert_eq!(count(&client, "audit").await, 2);

    // A closure that fails after the fence held: its writes and the raised mark roll back
    // (a failed write never advances the mark).
    let result = marks
        .run(&mut client, "jobs", t(11), |tx| {
            Box::pin(async move {
                tx.execute("INSERT INTO audit (token) VALUES (11)", &[])
                    .await?;
                tx.execute("INSERT INTO no_such_table VALUES (1)", &[])
                    .await?;
                Ok::<_, PgFenceError>(())
            })
        })
        .await;
    assert!(
        matches!(result, Err(PgFenceError::Postgres(_))),
        "{result:?}"
    );
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(10))
    );
    assert_eq!(count(&client, "audit").await, 2);
}

/// How the concurrent workload fences its transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    /// `MarkTable::run`: the one-statement conditional raise (locks the mark row).
    Marks,
    /// Negative control: a naive read-then-write fence, `SELECT mark`, then (if the token is
    /// not below it) an unconditional write of the mark, in separate statements of one READ
    /// COMMITTED transaction, with a short `pg_sleep` between read and write to widen the race.
    NaiveReadThenWrite,
}

/// What one run of the concurrent workload did.
struct Workload {
    /// Tokens applied / refused.
    applied: usize,
    stale: usize,
    /// The audit log (tokens of applied transactions, in commit order).
    log: Vec<i64>,
    /// Start and end of every fenced transaction (from before `BEGIN` to after the outcome).
    spans: Vec<(std::time::Instant, std::time::Instant)>,
    /// Final state value and mark.
    value: i64,
    mark: FenceMark,
}

const TASKS: usize = 32;
const TOKENS: u64 = 200;
/// Bound on one run of the workload (it takes about a second).
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// 32 tasks, each with its own connection, apply tokens 1..=200 in a seeded shuffled order,
/// released together by a barrier. Every applied transaction updates the state and appends its
/// token to a log after the fence.
async fn concurrent_workload(fence: Fence, seed: u64) -> Workload {
    let (db, client, marks) = setup(match fence {
        Fence::Marks => "concurrent_marks",
        Fence::NaiveReadThenWrite => "concurrent_naive",
    })
    .await;

    let mut tokens: Vec<u64> = (1..=TOKENS).collect();
    shuffle(&mut tokens, seed);
    let mut per_task: Vec<Vec<u64>> = vec![Vec::new(); TASKS];
    for (i, tok) in tokens.into_iter().enumerate() {
        per_task[i % TASKS].push(tok);
    }

    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for mine in per_task {
        let mut client = db.client().await;
        let marks = marks.clone();
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            barrier.wait().await;
            let mut results = Vec::new();
            for raw in mine {
                let token = t(raw);
                let start = std::time::Instant::now();
                let outcome = match fence {
                    Fence::Marks => marks
                        .run(&mut client, "jobs", token, |tx| {
                            Box::pin(async move {
                                let v = token.as_i64();
                                tx.execute("UPDATE state SET value = $1 WHERE id = 1", &[&v])
                                    .await?;
                                tx.execute("INSERT INTO audit (token) VALUES ($1)", &[&v])
                                    .await?;
                                Ok::<_, PgFenceError>(())
                            })
                        })
                        .await
                        .unwrap(),
                    Fence::NaiveReadThenWrite => naive_fenced_write(&mut client, &marks, raw).await,
                };
                results.push((raw, outcome, (start, std::time::Instant::now())));
            }
            results
        });
    }
    let mut w = Workload {
        applied: 0,
        stale: 0,
        log: Vec::new(),
        spans: Vec::new(),
        value: 0,
        mark: FenceMark::NONE,
    };
    while let Some(results) = tasks.join_next().await {
        for (raw, outcome, span) in results.unwrap() {
            w.spans.push(span);
            match outcome {
                TxOutcome::Applied(()) => w.applied += 1,
                TxOutcome::Stale { mark } => {
                    w.stale += 1;
                    assert!(
                        mark.token().is_some_and(|m| m.get() > raw),
                        "{fence:?}: token {raw} refused by {mark:?}, which accepts it"
                    );
                }
            }
        }
    }
    w.log = client
        .query("SELECT token FROM audit ORDER BY seq", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    w.value = client
        .query_one("SELECT value FROM state WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    w.mark = marks.mark(&client, "jobs").await.unwrap();
    w
}

/// The negative control's fence: read the mark, compare in the client, then write it, in
/// separate statements (READ COMMITTED, no row lock taken by the read).
async fn naive_fenced_write(client: &mut Client, marks: &MarkTable, raw: u64) -> TxOutcome<()> {
    let table = marks.table().quoted();
    let v = raw as i64;
    let tx = client.transaction().await.unwrap();
    let mark: Option<i64> = tx
        .query_opt(
            &format!("SELECT mark FROM {table} WHERE name = 'jobs'"),
            &[],
        )
        .await
        .unwrap()
        .map(|r| r.get(0));
    // Widens the window between the read and the write, as a slow client would.
    tx.batch_execute("SELECT pg_sleep(0.002)").await.unwrap();
    if let Some(m) = mark.filter(|&m| v < m) {
        tx.rollback().await.unwrap();
        return TxOutcome::Stale {
            mark: FenceMark::at(t(m as u64)),
        };
    }
    tx.execute(
        &format!(
            "INSERT INTO {table} (name, mark) VALUES ('jobs', $1) \
             ON CONFLICT (name) DO UPDATE SET mark = EXCLUDED.mark"
        ),
        &[&v],
    )
    .await
    .unwrap();
    tx.execute("UPDATE state SET value = $1 WHERE id = 1", &[&v])
        .await
        .unwrap();
    tx.execute("INSERT INTO audit (token) VALUES ($1)", &[&v])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    TxOutcome::Applied(())
}

/// 32 tasks × 200 shuffled tokens through `MarkTable::run`: the log never regresses, and the
/// run was concurrent (transactions were open at the same time, some were refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_fenced_transactions_never_regress() {
    let w = tokio::time::timeout(
        WORKLOAD_TIMEOUT,
        concurrent_workload(Fence::Marks, 0x5eed_f00d),
    )
    .await
    .expect("the workload did not finish in time");
    assert_eq!(w.applied + w.stale, TOKENS as usize);
    // A serialised run (one transaction at a time) could pass the rest vacuously.
    let overlap = max_overlap(&w.spans);
    let overlapping = overlapping_spans(&w.spans);
    eprintln!(
        "marks: {} applied, {} refused, at most {overlap} transactions open at once, {overlapping} of {} overlapping another",
        w.applied,
        w.stale,
        w.spans.len()
    );
    assert!(
        overlap >= 4 && overlapping >= w.spans.len() / 2,
        "at most {overlap} fenced transactions were open at once, {overlapping} overlapped another: the run was not concurrent"
    );
    assert!(
        w.stale > 0,
        "no write was refused: the order was not interleaved"
    );
    assert_eq!(
        w.log.len(),
        w.applied,
        "a refused transaction left a log entry"
    );
    assert_non_decreasing("per-name mark", &w.log);
    assert_eq!(w.log.last(), Some(&(TOKENS as i64)));
    assert_eq!(
        w.value, TOKENS as i64,
        "final state is not the highest token's"
    );
    assert_eq!(w.mark, FenceMark::at(t(TOKENS)));
}

/// Negative control: the same workload and the same checker through a naive read-then-write
/// fence must be caught regressing (the log shows a lower token committed after a higher one).
/// Up to three rounds with different shuffles, to be deterministic enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_read_then_write_fence_is_caught_regressing() {
    for round in 0..3u64 {
        let w = tokio::time::timeout(
            WORKLOAD_TIMEOUT,
            concurrent_workload(Fence::NaiveReadThenWrite, 0x5eed_f00d + round),
        )
        .await
        .expect("the workload did not finish in time");
        let overlap = max_overlap(&w.spans);
        let overlapping = overlapping_spans(&w.spans);
        let regression = first_regression(&w.log);
        eprintln!(
            "naive round {round}: {} applied, {} refused, at most {overlap} open at once, first regression {regression:?}",
            w.applied, w.stale
        );
        assert!(
            overlap >= 4 && overlapping >= w.spans.len() / 2,
            "the control's run was not concurrent ({overlap} at once, {overlapping} overlapping)"
        );
        if regression.is_some() {
            return;
        }
    }
    panic!("the naive read-then-write fence was never caught regressing in 3 rounds");
}

/// The successor's raise at election waits for the deposed leader's open fenced transaction
/// (the row lock), then fences it out of every later transaction.
#[tokio::test]
async fn successor_raise_fences_out_the_deposed_term() {
    let (db, mut old_leader, marks) = setup("successor").await;
    let successor = db.client().await;
    let observer = db.client().await;

    let tx = match marks.begin(&mut old_leader, "jobs", t(1)).await.unwrap() {
        BeginOutcome::Fenced(tx) => tx,
        BeginOutcome::Stale { mark } => panic!("refused by {mark:?}"),
    };
    let raise = {
        let marks = marks.clone();
        tokio::spawn(async move { marks.raise_mark(&successor, "jobs", t(2)).await })
    };
    // Wait until the successor's raise is blocked on the mark row lock (a server-side signal,
    // polled; no timing assumption).
    loop {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 1 {
            break;
        }
        assert!(
            !raise.is_finished(),
            "the raise did not wait for the open transaction"
        );
        tokio::task::yield_now().await;
    }
    tx.execute("UPDATE state SET value = 1 WHERE id = 1", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(raise.await.unwrap().unwrap(), FenceOutcome::Applied);

    // From now on the deposed term (token 1) is refused, before the successor writes anything.
    match marks.begin(&mut old_leader, "jobs", t(1)).await.unwrap() {
        BeginOutcome::Stale { mark } => assert_eq!(mark, FenceMark::at(t(2))),
        BeginOutcome::Fenced(_) => panic!("the deposed term passed the successor's mark"),
    }
    // A raise never lowers the mark.
    assert_eq!(
        marks.raise_mark(&old_leader, "jobs", t(1)).await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t(2))
        }
    );
    let value: i64 = old_leader
        .query_one("SELECT value FROM state WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(value, 1);
}

/// Under REPEATABLE READ, racing a concurrent raise is a serialization failure, never a
/// stale commit.
#[tokio::test]
async fn repeatable_read_conflict_is_an_error_not_a_stale_commit() {
    let (db, mut client, marks) = setup("repeatable").await;
    let other = db.client().await;
    assert!(
        marks
            .raise_mark(&other, "jobs", t(1))
            .await
            .unwrap()
            .is_applied()
    );

    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    tx.execute("INSERT INTO audit (token) VALUES (3)", &[])
        .await
        .unwrap(); // takes the snapshot
    assert!(
        marks
            .raise_mark(&other, "jobs", t(5))
            .await
            .unwrap()
            .is_applied()
    );
    let err = marks.fence(&tx, "jobs", t(3)).await.unwrap_err();
    assert!(err.is_retryable_conflict(), "{err}");
    drop(tx);
    assert_eq!(count(&client, "audit").await, 0);
}

/// A generic writer: works with any fenced resource.
async fn write_through<R: FencedResource>(
    resource: &R,
    token: Token,
    write: R::Write,
) -> Result<FenceOutcome, R::Error> {
    resource.apply(token, write).await
}

fn audit_write(token: i64) -> PgWrite {
    PgWrite::new()
        .statement(
            "UPDATE state SET value = $1 WHERE id = 1",
            vec![Box::new(token)],
        )
        .statement(
            "INSERT INTO audit (token) VALUES ($1)",
            vec![Box::new(token)],
        )
}

#[tokio::test]
async fn pg_fence_is_a_fenced_resource() {
    let (db, client, _) = setup("resource").await;
    let marks = MarkTable::new(QualifiedName::with_schema("public", "resource marks").unwrap());
    marks.migrate(&client).await.unwrap();
    let fence = PgFence::new(
        Arc::new(tokio::sync::Mutex::new(db.client().await)),
        marks.clone(),
        "jobs",
    )
    .unwrap();

    assert_eq!(
        write_through(&fence, t(3), audit_write(3)).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        write_through(&fence, t(3), audit_write(3)).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(
        write_through(&fence, t(2), audit_write(2)).await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t(3))
        }
    );
    assert_eq!(count(&client, "audit").await, 2);

    // A failing statement rolls back the whole write and does not advance the mark.
    let failing = audit_write(4).statement("INSERT INTO audit (token) VALUES ('x')", vec![]);
    assert!(matches!(
        fence.apply(t(4), failing).await,
        Err(PgFenceError::Postgres(_))
    ));
    assert_eq!(fence.mark().await.unwrap(), FenceMark::at(t(3)));
    assert_eq!(count(&client, "audit").await, 2);

    // The successor raises the mark at election; the old token is then refused.
    assert!(fence.raise_mark(t(8)).await.unwrap().is_applied());
    assert_eq!(
        fence.apply(t(4), audit_write(4)).await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t(8))
        }
    );
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(8))
    );
    // The default table was not touched.
    assert_eq!(
        MarkTable::default().mark(&client, "jobs").await.unwrap(),
        FenceMark::NONE
    );
}

#[tokio::test]
async fn bad_names_are_refused_before_any_round_trip() {
    let (_db, client, marks) = setup("names").await;
    for name in ["", "a\0b"] {
        assert!(matches!(
            marks.raise_mark(&client, name, t(1)).await,
            Err(PgFenceError::InvalidName(_))
        ));
    }
    let long = "n".repeat(lease_postgres::MAX_FENCE_NAME_LEN + 1);
    assert!(matches!(
        marks.mark(&client, &long).await,
        Err(PgFenceError::InvalidName(_))
    ));
    assert!(matches!(
        PgFence::new(tokio::sync::Mutex::new(client), marks, ""),
        Err(PgFenceError::InvalidName(_))
    ));
}
