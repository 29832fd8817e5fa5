//! Per-row fencing, identifiers, migrations and token ranges against a real Postgres.

mod common;

use std::sync::Arc;

use common::{TestDb, assert_non_decreasing, max_overlap, overlapping_spans, shuffle};
use lease_postgres::{FenceMark, FenceOutcome, Token, TokenError};
use lease_postgres::{FencedTable, IdentError, MarkTable, PgFenceError, QualifiedName, RowOutcome};
use std::time::Duration;
use tokio_postgres::Client;

fn t(raw: u64) -> Token {
    Token::new(raw).unwrap()
}

async fn value_of(client: &Client, key: &str) -> Option<(String, i64)> {
    client
        .query_opt("SELECT value, fence FROM kv WHERE key = $1", &[&key])
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

async fn kv(test: &str) -> (TestDb, Client, FencedTable) {
    let db = TestDb::new(test).await;
    let client = db.client().await;
    client
        .batch_execute("CREATE TABLE kv (key text PRIMARY KEY, value text NOT NULL)")
        .await
        .unwrap();
    let table = FencedTable::new(QualifiedName::new("kv").unwrap(), "key").unwrap();
    table.migrate(&client).await.unwrap();
    (db, client, table)
}

#[tokio::test]
async fn update_refuses_stale_accepts_equal_and_reports_missing_rows() {
    let (_db, client, table) = kv("rows_update").await;
    client
        .execute("INSERT INTO kv (key, value) VALUES ('a', 'initial')", &[])
        .await
        .unwrap();
    // A row that predates the fence column has fence 0: every token passes.
    assert_eq!(
        table.row_mark(&client, &"a").await.unwrap(),
        Some(FenceMark::NONE)
    );

    assert_eq!(
        table
            .update(&client, t(5), &"a", &[("value", &"five")])
            .await
            .unwrap(),
        RowOutcome::Applied
    );
    assert_eq!(
        table
            .update(&client, t(4), &"a", &[("value", &"four")])
            .await
            .unwrap(),
        RowOutcome::Stale {
            mark: FenceMark::at(t(5))
        }
    );
    assert_eq!(value_of(&client, "a").await, Some(("five".into(), 5)));
    assert_eq!(
        table
            .update(&client, t(5), &"a", &[("value", &"five again")])
            .await
            .unwrap(),
        RowOutcome::Applied,
        "an equal token must pass"
    );
    assert_eq!(value_of(&client, "a").await, Some(("five again".into(), 5)));
    assert_eq!(
        table
            .update(&client, t(9), &"missing", &[("value", &"x")])
            .await
            .unwrap(),
        RowOutcome::NotFound
    );
    assert_eq!(value_of(&client, "missing").await, None);
    // A prepared shape, reused; an update that sets nothing but the fence.
    let touch = table.update_statement(&[]).unwrap();
    assert!(
        touch
            .execute(&client, t(6), &"a", &[])
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(value_of(&client, "a").await, Some(("five again".into(), 6)));
}

#[tokio::test]
async fn upsert_inserts_then_fences() {
    let (_db, client, table) = kv("rows_upsert").await;
    let upsert = table.upsert_statement(&["value"]).unwrap();

    assert_eq!(
        upsert.execute(&client, t(5), &"k", &[&"v5"]).await.unwrap(),
        FenceOutcome::Applied
    );
    assert_eq!(value_of(&client, "k").await, Some(("v5".into(), 5)));
    assert_eq!(
        upsert.execute(&client, t(3), &"k", &[&"v3"]).await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t(5))
        }
    );
    assert_eq!(value_of(&client, "k").await, Some(("v5".into(), 5)));
    assert!(
        upsert
            .execute(&client, t(5), &"k", &[&"v5b"])
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        table
            .upsert(&client, t(7), &"k", &[("value", &"v7")])
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(value_of(&client, "k").await, Some(("v7".into(), 7)));

    // Inside a transaction, a refused upsert reports the mark and leaves other writes to the
    // caller (per-row fencing guards only its own row).
    let mut client = client;
    let tx = client.transaction().await.unwrap();
    assert_eq!(
        upsert.execute(&tx, t(6), &"k", &[&"v6"]).await.unwrap(),
        FenceOutcome::Stale {
            mark: FenceMark::at(t(7))
        }
    );
    tx.rollback().await.unwrap();
    assert_eq!(value_of(&client, "k").await, Some(("v7".into(), 7)));
}

#[tokio::test]
async fn bad_shapes_are_refused_before_any_round_trip() {
    let (_db, client, table) = kv("rows_shapes").await;
    assert!(matches!(
        table.update_statement(&["value", "value"]),
        Err(PgFenceError::Shape(_))
    ));
    assert!(matches!(
        table.update_statement(&["key"]),
        Err(PgFenceError::Shape(_))
    ));
    assert!(matches!(
        table.upsert_statement(&["fence"]),
        Err(PgFenceError::Shape(_))
    ));
    assert!(matches!(
        table.update_statement(&[""]),
        Err(PgFenceError::InvalidIdentifier(IdentError::Empty))
    ));
    assert!(matches!(
        table.with_fence_column("key"),
        Err(PgFenceError::Shape(_))
    ));
    let update = table.update_statement(&["value"]).unwrap();
    assert!(matches!(
        update.execute(&client, t(1), &"a", &[]).await,
        Err(PgFenceError::Arity {
            expected: 1,
            got: 0
        })
    ));
    assert!(matches!(
        FencedTable::new(QualifiedName::new("kv").unwrap(), "x\0"),
        Err(PgFenceError::InvalidIdentifier(IdentError::Nul(_)))
    ));
}

/// A table named `we"ird table` in a schema with a quote and a space, a key column with a
/// quote, a value column `sel ect`, a fence column with a quote, a marks table with a quote;
/// and a column name that reads like an injection.
#[tokio::test]
async fn quoted_identifiers_work_and_cannot_inject() {
    let db = TestDb::new("idents").await;
    let mut client = db.client().await;
    client
        .batch_execute(
            r#"CREATE SCHEMA "my ""app"" schema";
               CREATE TABLE "my ""app"" schema"."we""ird table" (
                   "k e""y" text PRIMARY KEY,
                   "sel ect" text,
                   "x""; DROP TABLE victim; --" text
               );
               CREATE TABLE victim (id int);"#,
        )
        .await
        .unwrap();
    let name = QualifiedName::with_schema(r#"my "app" schema"#, r#"we"ird table"#).unwrap();
    let table = FencedTable::new(name, r#"k e"y"#)
        .unwrap()
        .with_fence_column(r#"fen"ce"#)
        .unwrap();
    table.migrate(&client).await.unwrap();

    let evil = r#"x"; DROP TABLE victim; --"#;
    let upsert = table.upsert_statement(&["sel ect", evil]).unwrap();
    assert!(
        upsert
            .execute(&client, t(2), &"row 1", &[&"chosen", &"harmless"])
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        table
            .update(&client, t(1), &"row 1", &[("sel ect", &"stale")])
            .await
            .unwrap(),
        RowOutcome::Stale {
            mark: FenceMark::at(t(2))
        }
    );
    let row = client
        .query_one(
            r#"SELECT "sel ect", "x""; DROP TABLE victim; --", "fen""ce"
               FROM "my ""app"" schema"."we""ird table" WHERE "k e""y" = 'row 1'"#,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "chosen");
    assert_eq!(row.get::<_, String>(1), "harmless");
    assert_eq!(row.get::<_, i64>(2), 2);
    // The victim table is still there.
    client
        .execute("SELECT count(*) FROM victim", &[])
        .await
        .unwrap();

    // A marks table with a quote and a space in its name, in the same schema.
    let marks =
        MarkTable::new(QualifiedName::with_schema(r#"my "app" schema"#, r#"ma"rks tbl"#).unwrap());
    marks.migrate(&client).await.unwrap();
    let tx = client.transaction().await.unwrap();
    assert!(
        marks
            .fence(&tx, r#"name with "quotes"'; --"#, t(3))
            .await
            .unwrap()
            .is_applied()
    );
    tx.commit().await.unwrap();
    assert_eq!(
        marks
            .mark(&client, r#"name with "quotes"'; --"#)
            .await
            .unwrap(),
        FenceMark::at(t(3))
    );
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&r#"my "app" schema"#],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 2);
}

#[tokio::test]
async fn migrations_are_idempotent() {
    let db = TestDb::new("migrate").await;
    let client = db.client().await;
    client
        .batch_execute("CREATE TABLE kv (key text PRIMARY KEY, value text NOT NULL)")
        .await
        .unwrap();
    let marks = MarkTable::default();
    let table = FencedTable::new(QualifiedName::new("kv").unwrap(), "key").unwrap();

    marks.migrate(&client).await.unwrap();
    table.migrate(&client).await.unwrap();
    assert!(
        marks
            .raise_mark(&client, "jobs", t(4))
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        table
            .upsert(&client, t(4), &"a", &[("value", &"v")])
            .await
            .unwrap()
            .is_applied()
    );
    // Twice more: no error, nothing lost, no duplicate column.
    for _ in 0..2 {
        marks.migrate(&client).await.unwrap();
        table.migrate(&client).await.unwrap();
    }
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(t(4))
    );
    assert_eq!(
        table.row_mark(&client, &"a").await.unwrap(),
        Some(FenceMark::at(t(4)))
    );
    let fence_columns: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_name = 'kv' AND column_name = 'fence'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(fence_columns, 1);

    // A pre-existing fence column of the wrong type is reported, not silently used.
    client
        .batch_execute("CREATE TABLE bad (key text PRIMARY KEY, fence integer)")
        .await
        .unwrap();
    let bad = FencedTable::new(QualifiedName::new("bad").unwrap(), "key").unwrap();
    let err = bad.migrate(&client).await.unwrap_err();
    assert!(matches!(err, PgFenceError::Shape(_)), "{err}");
    // A key column without a unique constraint cannot serve the upsert: reported at migrate.
    client
        .batch_execute("CREATE TABLE nonunique (key text, value text)")
        .await
        .unwrap();
    let nonunique = FencedTable::new(QualifiedName::new("nonunique").unwrap(), "key").unwrap();
    let err = nonunique.migrate(&client).await.unwrap_err();
    assert!(matches!(err, PgFenceError::Shape(_)), "{err}");
    // An existing table named like the marks table but of another shape is reported too.
    client
        .batch_execute("CREATE TABLE other_marks (name text PRIMARY KEY, mark text)")
        .await
        .unwrap();
    let other = MarkTable::new(QualifiedName::new("other_marks").unwrap());
    let err = other.migrate(&client).await.unwrap_err();
    assert!(matches!(err, PgFenceError::Shape(_)), "{err}");
    client
        .batch_execute("CREATE TABLE keyless_marks (name text, mark bigint)")
        .await
        .unwrap();
    let keyless = MarkTable::new(QualifiedName::new("keyless_marks").unwrap());
    let err = keyless.migrate(&client).await.unwrap_err();
    assert!(matches!(err, PgFenceError::Shape(_)), "{err}");
    // A marks table cannot hold a value that is not a token.
    let err = client
        .execute(
            "INSERT INTO lease_fence_marks (name, mark) VALUES ('x', 0)",
            &[],
        )
        .await
        .unwrap_err();
    assert!(err.as_db_error().is_some(), "{err}");
}

#[tokio::test]
async fn tokens_beyond_i64_and_bad_stored_marks_are_refused() {
    // Raw input: beyond i64, beyond 2^53, zero, negative. `?` turns it into the typed error.
    fn parse(raw: &str) -> Result<Token, PgFenceError> {
        Ok(raw.parse::<Token>()?)
    }
    assert!(matches!(
        parse("9223372036854775808"),
        Err(PgFenceError::TokenOutOfRange(TokenError::TooLarge(_)))
    ));
    assert!(matches!(
        parse("18446744073709551616"),
        Err(PgFenceError::TokenOutOfRange(TokenError::TooLarge(_)))
    ));
    assert!(matches!(
        parse("9007199254740993"),
        Err(PgFenceError::TokenOutOfRange(TokenError::TooLarge(_)))
    ));
    assert_eq!(
        Token::from_i64(i64::MAX),
        Err(TokenError::TooLarge(i64::MAX as u64))
    );
    assert_eq!(Token::from_i64(-1), Err(TokenError::Negative(-1)));
    assert_eq!(Token::from_i64(0), Err(TokenError::Zero));
    assert!(Token::new(u64::MAX).is_err());

    // The largest token works end to end.
    let (_db, client, table) = kv("tokens").await;
    let marks = MarkTable::default();
    marks.migrate(&client).await.unwrap();
    assert!(
        marks
            .raise_mark(&client, "jobs", Token::MAX)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        marks.mark(&client, "jobs").await.unwrap(),
        FenceMark::at(Token::MAX)
    );
    assert!(
        table
            .upsert(&client, Token::MAX, &"a", &[("value", &"max")])
            .await
            .unwrap()
            .is_applied()
    );
    // A fence column someone else set beyond 2^53 is reported as such, not misread.
    client
        .execute(
            "UPDATE kv SET fence = 9223372036854775807 WHERE key = 'a'",
            &[],
        )
        .await
        .unwrap();
    assert!(matches!(
        table.row_mark(&client, &"a").await,
        Err(PgFenceError::InvalidStoredMark { value: i64::MAX })
    ));
    assert!(matches!(
        table
            .update(&client, Token::MAX, &"a", &[("value", &"x")])
            .await,
        Err(PgFenceError::InvalidStoredMark { .. })
    ));
}

/// 32 tasks, autocommit, 4 rows × tokens 1..=200 in a seeded shuffled order: rows `u0`, `u1`
/// exist and take conditional updates; rows `i0`, `i1` start absent and take upserts (racing
/// inserts). A trigger logs every applied token per row; the log must never regress.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_row_writes_never_regress() {
    const TASKS: usize = 32;
    const TOKENS: u64 = 200;
    const KEYS: [&str; 4] = ["u0", "u1", "i0", "i1"];
    let db = TestDb::new("concurrent_rows").await;
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE kv (key text PRIMARY KEY, value bigint NOT NULL);
             INSERT INTO kv VALUES ('u0', 0), ('u1', 0);
             CREATE TABLE kv_log (seq bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL);
             CREATE FUNCTION log_fence() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO kv_log (key, token) VALUES (NEW.key, NEW.fence);
                 RETURN NEW;
             END $$;",
        )
        .await
        .unwrap();
    let table = FencedTable::new(QualifiedName::new("kv").unwrap(), "key").unwrap();
    table.migrate(&client).await.unwrap();
    client
        .batch_execute(
            "CREATE TRIGGER kv_log AFTER INSERT OR UPDATE ON kv \
             FOR EACH ROW EXECUTE FUNCTION log_fence()",
        )
        .await
        .unwrap();
    let update = Arc::new(table.update_statement(&["value"]).unwrap());
    let upsert = Arc::new(table.upsert_statement(&["value"]).unwrap());

    let mut writes: Vec<(usize, u64)> = (0..KEYS.len())
        .flat_map(|k| (1..=TOKENS).map(move |tok| (k, tok)))
        .collect();
    shuffle(&mut writes, 0xfe_0ce);
    let mut per_task: Vec<Vec<(usize, u64)>> = vec![Vec::new(); TASKS];
    for (i, w) in writes.into_iter().enumerate() {
        per_task[i % TASKS].push(w);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for mine in per_task {
        let client = db.client().await;
        let (update, upsert, barrier) = (update.clone(), upsert.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let mut refused = Vec::new();
            let mut spans = Vec::new();
            for (k, raw) in mine {
                let (key, token, v) = (KEYS[k], t(raw), raw as i64);
                let start = std::time::Instant::now();
                let mark = if k < 2 {
                    match update.execute(&client, token, &key, &[&v]).await.unwrap() {
                        RowOutcome::Applied => None,
                        RowOutcome::Stale { mark } => Some(mark),
                        other => panic!("update of existing row {key}: {other:?}"),
                    }
                } else {
                    match upsert.execute(&client, token, &key, &[&v]).await.unwrap() {
                        FenceOutcome::Applied => None,
                        FenceOutcome::Stale { mark } => Some(mark),
                    }
                };
                spans.push((start, std::time::Instant::now()));
                if let Some(mark) = mark {
                    refused.push((raw, mark));
                }
            }
            (refused, spans)
        });
    }
    let mut refused = 0;
    let mut spans = Vec::new();
    while let Some(result) = tokio::time::timeout(Duration::from_secs(120), tasks.join_next())
        .await
        .expect("the writers did not finish in time")
    {
        let (result, task_spans) = result.unwrap();
        spans.extend(task_spans);
        for (raw, mark) in result {
            refused += 1;
            assert!(
                mark.token().is_some_and(|m| m.get() > raw),
                "token {raw} refused by {mark:?}, which accepts it"
            );
        }
    }
    assert!(
        refused > 0,
        "no write was refused: the order was not interleaved"
    );
    // A serialised run (one write at a time) could pass the rest vacuously.
    let overlap = max_overlap(&spans);
    let overlapping = overlapping_spans(&spans);
    eprintln!(
        "rows: {refused} refused, at most {overlap} writes in flight at once, {overlapping} of {} overlapping another",
        spans.len()
    );
    assert!(
        overlap >= 4 && overlapping >= spans.len() / 2,
        "at most {overlap} writes were in flight at once, {overlapping} overlapped another: the run was not concurrent"
    );

    let mut logged = 0;
    for key in KEYS {
        let log: Vec<i64> = client
            .query(
                "SELECT token FROM kv_log WHERE key = $1 ORDER BY seq",
                &[&key],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        logged += log.len();
        assert_non_decreasing(key, &log);
        assert_eq!(log.last(), Some(&(TOKENS as i64)), "{key}");
        let row = client
            .query_one("SELECT value, fence FROM kv WHERE key = $1", &[&key])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), TOKENS as i64, "{key}: final value");
        assert_eq!(row.get::<_, i64>(1), TOKENS as i64, "{key}: final fence");
    }
    assert_eq!(
        logged + refused,
        KEYS.len() * TOKENS as usize,
        "every write is either applied (logged once) or refused"
    );
}
