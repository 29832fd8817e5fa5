//! The Postgres primitive.

use lease_testkit::postgres::Postgres;

#[tokio::test]
async fn accepts_queries_on_its_own_database() {
    let pg = Postgres::start().await.unwrap();
    assert!(pg.addr().ip().is_loopback());
    assert_eq!(
        pg.connection_string(),
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=redlease connect_timeout=5",
            pg.port()
        )
    );
    let client = pg.client().await.unwrap();
    let db: String = client
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(db, "redlease");
    client
        .batch_execute("CREATE TABLE fence (resource text PRIMARY KEY, token bigint NOT NULL)")
        .await
        .unwrap();
    client
        .execute("INSERT INTO fence VALUES ($1, $2)", &[&"lock-a", &42i64])
        .await
        .unwrap();
    let token: i64 = client
        .query_one("SELECT token FROM fence WHERE resource = $1", &[&"lock-a"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(token, 42);
}

#[tokio::test]
async fn custom_names_and_teardown_on_drop() {
    let pg = Postgres::builder()
        .database("fencing_db")
        .user("tester")
        .start()
        .await
        .unwrap();
    let (client, connection) =
        tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one("SELECT current_database(), current_user", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "fencing_db");
    assert_eq!(row.get::<_, String>(1), "tester");
    drop(client);

    let dir = pg.dir().to_path_buf();
    let pid = pg.pid().unwrap();
    assert!(dir.join("data").join("PG_VERSION").exists());
    drop(pg);
    assert!(!dir.exists(), "{} leaked", dir.display());
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.contains(") Z "));
    assert!(!alive, "postgres {pid} leaked");
}

#[tokio::test]
async fn invalid_names_are_a_typed_error() {
    let result = Postgres::builder().database("bad name; drop").start().await;
    assert!(
        matches!(result, Err(lease_testkit::Error::Config(_))),
        "{result:?}"
    );
}
