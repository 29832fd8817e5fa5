//! Truthful outcomes of fenced Postgres writes against a real Postgres behind the kit's fault
//! proxy: a `COMMIT` whose reply is lost (the connection then reset) is *unknown* — and here it
//! was applied; an error Postgres answered with is *not applied* — and nothing was written.

mod common;

use std::time::Duration;

use common::TestDb;
use lease_postgres::Token;
use lease_postgres::{MarkTable, PgFenceError, TxOutcome};
use lease_testkit::proxy::{FaultProxy, Mode};
use tokio::sync::oneshot;
use tokio_postgres::{Client, NoTls};

const BOUND: Duration = Duration::from_secs(20);

/// The server's port, from the test database's connection string.
fn port_of(connection_string: &str) -> u16 {
    connection_string
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .expect("a port in the connection string")
}

async fn connect(connection_string: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(connection_string, NoTls)
        .await
        .expect("connect to postgres");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn rows(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_commit_whose_reply_is_lost_is_unknown_and_an_error_reply_is_not_applied() {
    let db = TestDb::new("pg_outcomes").await;
    let direct = db.client().await;
    let marks = MarkTable::default();
    marks.migrate(&direct).await.unwrap();
    direct
        .batch_execute("CREATE TABLE t (v int PRIMARY KEY)")
        .await
        .unwrap();
    let conn = db.connection_string();
    let port = port_of(&conn);
    let proxy = FaultProxy::start(([127, 0, 0, 1], port).into())
        .await
        .unwrap();
    let via_proxy = conn.replace(
        &format!("port={port}"),
        &format!("port={}", proxy.addr().port()),
    );

    // An error Postgres answers with (a duplicate key): not applied, nothing written.
    direct
        .execute("INSERT INTO t VALUES (0)", &[])
        .await
        .unwrap();
    let mut client = connect(&via_proxy).await;
    let err = marks
        .run(&mut client, "n", Token::new(1).unwrap(), |tx| {
            Box::pin(async move {
                tx.execute("INSERT INTO t VALUES (1)", &[]).await?;
                tx.execute("INSERT INTO t VALUES (0)", &[]).await?;
                Ok::<_, PgFenceError>(())
            })
        })
        .await
        .unwrap_err();
    assert!(!err.is_outcome_unknown(), "{err:?}");
    assert_eq!(rows(&direct).await, 1, "rolled back: row 1 was not written");

    // The COMMIT reaches Postgres, its reply is held, then the connection is reset.
    let (ready_tx, ready) = oneshot::channel();
    let (go, go_rx) = oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let marks = MarkTable::default();
        marks
            .run(&mut client, "n", Token::new(2).unwrap(), |tx| {
                Box::pin(async move {
                    tx.execute("INSERT INTO t VALUES (2)", &[]).await?;
                    let _ = ready_tx.send(());
                    let _ = go_rx.await;
                    Ok::<_, PgFenceError>(())
                })
            })
            .await
    });
    tokio::time::timeout(BOUND, ready)
        .await
        .expect("the write ran")
        .unwrap();
    proxy.set_mode(Mode::DropReplies);
    go.send(()).unwrap();
    let committed = tokio::time::timeout(BOUND, async {
        while rows(&direct).await < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(committed.is_ok(), "the COMMIT was applied at the server");
    proxy.reset_all().await;
    let result = tokio::time::timeout(BOUND, writer)
        .await
        .expect("the reset ends the call")
        .unwrap();
    let err = match result {
        Err(e) => e,
        Ok(TxOutcome::Applied(())) => panic!("a reply got through the held path"),
        Ok(other) => panic!("{other:?}"),
    };
    assert!(err.is_outcome_unknown(), "{err:?}");
    assert_eq!(err.effect(), lease_core::Effect::Unknown);
    // It was applied: "unknown" was the truthful answer.
    let mark: i64 = direct
        .query_one("SELECT mark FROM lease_fence_marks WHERE name = 'n'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(mark, 2);
}
