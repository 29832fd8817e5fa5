//! The per-name mark in a transaction: a deposed leader's write is refused once its successor
//! has raised the mark at election.
//!
//! Connects to `DATABASE_URL` (a URL or a `key=value` connection string), or starts a
//! throwaway Postgres with the test kit when it is unset:
//!
//! ```text
//! cargo run -p lease-postgres --example postgres_fenced_write
//! DATABASE_URL=postgres://me@localhost/mydb cargo run -p lease-postgres --example postgres_fenced_write
//! ```

use lease_postgres::{BeginOutcome, MarkTable, PgFenceError, TxOutcome};
use lease_postgres::{FenceOutcome, Token};
use tokio_postgres::{Client, NoTls};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fence name: one per election (or per lock), shared by every term's writes.
const NAME: &str = "example-report-builder";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // Keep the kit's server (if any) alive until the end.
    let (conn, _server) = match std::env::var("DATABASE_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            println!("DATABASE_URL is unset: starting a throwaway Postgres");
            let pg = lease_testkit::postgres::Postgres::start().await?;
            (pg.connection_string(), Some(pg))
        }
    };
    let mut old_leader = connect(&conn).await?;
    let mut new_leader = connect(&conn).await?;

    // Once, at deploy time: the marks table, and the application's own table.
    let marks = MarkTable::default();
    marks.migrate(&old_leader).await?;
    old_leader
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS example_reports (id int PRIMARY KEY, state text NOT NULL);
             INSERT INTO example_reports VALUES (1, 'new') ON CONFLICT (id) DO NOTHING;",
        )
        .await?;

    // Tokens come from the elector (`term.token()`); here, two consecutive terms. Start above
    // whatever a previous run left behind.
    let base = marks
        .mark(&old_leader, NAME)
        .await?
        .token()
        .map_or(0, Token::get);
    let old_token = Token::new(base + 1)?;
    let new_token = Token::new(base + 2)?;

    // The old leader writes in a fenced transaction: the fence is the first statement.
    match marks.begin(&mut old_leader, NAME, old_token).await? {
        BeginOutcome::Fenced(tx) => {
            tx.execute(
                "UPDATE example_reports SET state = $1 WHERE id = 1",
                &[&format!("written under token {old_token}")],
            )
            .await?;
            tx.commit().await?;
            println!("old leader (token {old_token}): write committed");
        }
        BeginOutcome::Stale { mark } => println!("old leader: fenced out by {mark:?}"),
    }

    // The old leader pauses past its TTL; a successor is elected and raises the mark at once,
    // before writing anything.
    let raised = marks.raise_mark(&new_leader, NAME, new_token).await?;
    println!("new leader (token {new_token}): raise_mark -> {raised:?}");

    // The old leader wakes up and tries again with its old token: refused, nothing written.
    // (Low-level form: `fence` inside your own transaction. The refused fence also aborts the
    // transaction at the server, so even the write before it cannot commit.)
    let tx = old_leader.transaction().await?;
    tx.execute(
        "UPDATE example_reports SET state = 'stale write' WHERE id = 1",
        &[],
    )
    .await?;
    match marks.fence(&tx, NAME, old_token).await? {
        FenceOutcome::Applied => {
            tx.commit().await?;
            println!("old leader: write committed (unexpected!)");
        }
        FenceOutcome::Stale { mark } => {
            tx.rollback().await?;
            println!("old leader (token {old_token}): refused, mark is {mark:?}; stepping down");
        }
    }

    // The new leader writes through the closure helper.
    let outcome = marks
        .run(&mut new_leader, NAME, new_token, |tx| {
            Box::pin(async move {
                let n = tx
                    .execute(
                        "UPDATE example_reports SET state = $1 WHERE id = 1",
                        &[&format!("written under token {new_token}")],
                    )
                    .await?;
                Ok::<_, PgFenceError>(n)
            })
        })
        .await?;
    match outcome {
        TxOutcome::Applied(rows) => println!("new leader: {rows} row(s) committed"),
        TxOutcome::Stale { mark } => println!("new leader: fenced out by {mark:?}"),
    }

    let state: String = new_leader
        .query_one("SELECT state FROM example_reports WHERE id = 1", &[])
        .await?
        .get(0);
    println!("final state: {state}");
    Ok(())
}

async fn connect(conn: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(conn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection error: {e}");
        }
    });
    Ok(client)
}
