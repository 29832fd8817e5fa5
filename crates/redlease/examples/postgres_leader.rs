//! A leader that writes to Postgres under its token.
//!
//! At election it raises the Postgres mark to its token (so a deposed leader is fenced out of
//! Postgres before this one writes anything); then every write runs in a transaction whose
//! first statement is the fence. A stale term's transaction is refused and rolled back.
//!
//! ```sh
//! REDLEASE_REDIS_URL=redis://127.0.0.1:6379 \
//! DATABASE_URL='host=127.0.0.1 user=postgres dbname=app' \
//!     cargo run -p redlease --example postgres_leader
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

// The facade's `postgres` feature (redlease = { version = "0.1", features = ["postgres"] }):
// the Postgres adapter and the tokio-postgres it is built on, with no dependency of their own.
use redlease::postgres::tokio_postgres::{self, NoTls};
use redlease::postgres::{MarkTable, PgFenceError, TxOutcome};
use redlease::{CancellationToken, ElectionConfig, Elector};

const NAME: &str = "ledger-writer";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let redis_url =
        std::env::var("REDLEASE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let Ok(pg_url) = std::env::var("DATABASE_URL") else {
        eprintln!("set DATABASE_URL to a Postgres connection string");
        std::process::exit(2);
    };
    let backend = match redlease::redis::connect(&redis_url).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot reach Redis at {redis_url}: {e}");
            std::process::exit(2);
        }
    };
    let (setup, connection) = tokio_postgres::connect(&pg_url, NoTls).await?;
    tokio::spawn(connection);
    let marks = MarkTable::default();
    marks.migrate(&setup).await?;
    setup
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS ledger (id int PRIMARY KEY, entries bigint NOT NULL);
             INSERT INTO ledger VALUES (1, 0) ON CONFLICT (id) DO NOTHING;",
        )
        .await?;

    let config = ElectionConfig::builder(NAME, redlease::default_instance_id())
        .ttl(Duration::from_secs(5))
        .build()?;
    let elector = Elector::new(backend, config);
    let shutdown = CancellationToken::new();
    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });

    elector
        .run(shutdown, move |term| {
            let (pg_url, marks) = (pg_url.clone(), marks.clone());
            async move {
                let token = term.token();
                let Ok((mut client, connection)) = tokio_postgres::connect(&pg_url, NoTls).await
                else {
                    eprintln!("cannot reach Postgres; ending the term");
                    return;
                };
                tokio::spawn(connection);
                // Fence out every earlier term at once.
                match marks.raise_mark(&client, NAME, token).await {
                    Ok(o) if o.is_applied() => println!("elected with token {token}; mark raised"),
                    Ok(_) => return println!("token {token} is already stale"),
                    Err(e) => return eprintln!("raising the mark failed: {e}"),
                }
                loop {
                    tokio::select! {
                        _ = term.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    let outcome = marks
                        .run(&mut client, NAME, token, |tx| {
                            Box::pin(async move {
                                tx.execute(
                                    "UPDATE ledger SET entries = entries + 1 WHERE id = 1",
                                    &[],
                                )
                                .await?;
                                Ok::<_, PgFenceError>(())
                            })
                        })
                        .await;
                    match outcome {
                        Ok(TxOutcome::Applied(())) => println!("entry written under token {token}"),
                        Ok(TxOutcome::Stale { mark }) => {
                            println!("fenced out by {mark:?}; stopping");
                            break;
                        }
                        Err(e) => eprintln!("write failed: {e}"),
                    }
                }
            }
        })
        .await?;
    Ok(())
}
