//! Fencing enforced at Postgres: a leader paused past its TTL is fenced out of Postgres by its
//! successor's election, even though the successor has not written anything yet (it raises
//! the mark at election).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use lease_postgres::{MarkTable, PgFenceError, TxOutcome};
use lease_testkit::postgres::Postgres;
use redlease::{CancellationToken, Elector, Token};
use tokio_postgres::NoTls;

const NAME: &str = "report-builder";

async fn pg_connect(conn: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(conn, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn write(
    marks: &MarkTable,
    client: &mut tokio_postgres::Client,
    token: Token,
    value: &'static str,
) -> TxOutcome<()> {
    marks
        .run(client, NAME, token, move |tx| {
            Box::pin(async move {
                tx.execute(
                    "UPDATE report SET value = $1, token = $2 WHERE id = 1",
                    &[&value, &token.as_i64()],
                )
                .await?;
                Ok::<_, PgFenceError>(())
            })
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_paused_leader_is_fenced_out_of_postgres_by_its_successors_election() {
    let redis_server = redis().await;
    let pg = Postgres::start().await.unwrap();
    let setup = pg.client().await.unwrap();
    let marks = MarkTable::default();
    marks.migrate(&setup).await.unwrap();
    setup
        .batch_execute(
            "CREATE TABLE report (id int PRIMARY KEY, value text NOT NULL, token bigint NOT NULL);
             INSERT INTO report VALUES (1, 'initial', 0);",
        )
        .await
        .unwrap();

    // Leader a runs on its own single-threaded runtime so that the stall stops it entirely.
    let (redis_url, pg_conn) = (redis_server.url(), pg.connection_string());
    let (elected_tx, elected_rx) = std::sync::mpsc::channel::<Token>();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let (late_tx, late_rx) = tokio::sync::oneshot::channel::<TxOutcome<()>>();
    let shared = Arc::new(Mutex::new((Some(resume_rx), Some(late_tx))));
    let a_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let a = Elector::new(backend_at(&redis_url).await, config(NAME, "a", 600));
            let shutdown = CancellationToken::new();
            let stop = shutdown.clone();
            a.run(shutdown, move |term| {
                let (elected_tx, shared, stop, pg_conn) = (
                    elected_tx.clone(),
                    shared.clone(),
                    stop.clone(),
                    pg_conn.clone(),
                );
                async move {
                    let marks = MarkTable::default();
                    let mut client = pg_connect(&pg_conn).await;
                    let first = write(&marks, &mut client, term.token(), "a: first").await;
                    assert!(matches!(first, TxOutcome::Applied(())));
                    let _ = elected_tx.send(term.token());
                    // The stall (a GC pause, a frozen VM): nothing on this runtime runs.
                    let resume = shared.lock().unwrap().0.take();
                    if let Some(rx) = resume {
                        let _ = rx.recv();
                    }
                    // Resumed: the leader still believes in its term and writes at once.
                    let late = write(&marks, &mut client, term.token(), "a: after the pause").await;
                    if let Some(tx) = shared.lock().unwrap().1.take() {
                        let _ = tx.send(late);
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
    // a stalls right after this: its lease lapses by one TTL.
    let stalled_since = std::time::Instant::now();

    // The successor raises the mark at election, before (and without) writing anything.
    let b = Elector::new(backend(&redis_server).await, config(NAME, "b", 600));
    let shutdown = CancellationToken::new();
    let (raised_tx, mut raised_rx) = tokio::sync::mpsc::unbounded_channel::<Token>();
    let run_b = {
        let (e, s, pg_conn) = (b.clone(), shutdown.clone(), pg.connection_string());
        tokio::spawn(async move {
            e.run(s, move |term| {
                let (raised_tx, pg_conn) = (raised_tx.clone(), pg_conn.clone());
                async move {
                    let client = pg_connect(&pg_conn).await;
                    let raised = MarkTable::default()
                        .raise_mark(&client, NAME, term.token())
                        .await
                        .unwrap();
                    assert!(raised.is_applied());
                    let _ = raised_tx.send(term.token());
                    term.cancelled().await;
                }
            })
            .await
        })
    };
    let tb = tokio::time::timeout(EVENTUALLY, raised_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(tb > ta);
    // An upper bound, not only "eventually": a's lease lapses, b's next poll wins (TTL +
    // acquire interval), plus 2 s of slack for a loaded machine.
    let bound = b.config().ttl().get() + b.config().acquire_interval() + Duration::from_secs(2);
    let took = stalled_since.elapsed();
    assert!(
        took <= bound,
        "b's take-over took {took:?}, more than {bound:?}"
    );

    resume_tx.send(()).unwrap();
    match tokio::time::timeout(EVENTUALLY, late_rx)
        .await
        .expect("the resumed leader's write in time")
        .unwrap()
    {
        TxOutcome::Stale { mark } => assert_eq!(mark.token(), Some(tb)),
        TxOutcome::Applied(()) => panic!("the paused leader's write reached Postgres"),
    }
    let row = setup
        .query_one("SELECT value, token FROM report WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "a: first");
    assert_eq!(row.get::<_, i64>(1), ta.as_i64());
    tokio::task::spawn_blocking(move || a_thread.join().unwrap())
        .await
        .unwrap();
    shutdown.cancel();
    run_b.await.unwrap().unwrap();
}
