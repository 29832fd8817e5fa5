//! One Postgres server shared by the tests of a binary that run at the same time, and a fresh
//! database per test.
//!
//! The server lives as long as some test holds it: the last [`TestDb`] dropped stops it (a
//! `static` would never be dropped and would leak the server past the test binary).

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use lease_core::rng::SplitMix64;
use lease_testkit::postgres::Postgres;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

static SERVER: Mutex<Weak<Postgres>> = Mutex::const_new(Weak::new());
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// A database of its own on a shared server.
pub struct TestDb {
    server: Arc<Postgres>,
    database: String,
}

impl TestDb {
    /// A fresh, empty database named after the test.
    pub async fn new(test: &str) -> TestDb {
        let server = {
            let mut shared = SERVER.lock().await;
            match shared.upgrade() {
                Some(server) => server,
                None => {
                    let server = Arc::new(Postgres::start().await.expect("start postgres"));
                    *shared = Arc::downgrade(&server);
                    server
                }
            }
        };
        let database = format!("{test}_{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
        let admin = connect(&server.connection_string()).await;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{database}\""))
            .await
            .expect("create database");
        TestDb { server, database }
    }

    /// The connection string of this test's database.
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={} dbname={} connect_timeout=5",
            self.server.port(),
            self.server.user(),
            self.database
        )
    }

    /// A new connection to this test's database.
    pub async fn client(&self) -> Client {
        connect(&self.connection_string()).await
    }
}

async fn connect(conn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conn, NoTls)
        .await
        .expect("connect to postgres");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Fisher–Yates with a seeded generator: the same seed gives the same order.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below_inclusive(i as u64) as usize;
        items.swap(i, j);
    }
}

/// The checker of the concurrency tests: the first place where `tokens` (applied tokens in
/// commit order) decreases, as (earlier, later), or `None` if it never does.
pub fn first_regression(tokens: &[i64]) -> Option<(i64, i64)> {
    tokens
        .windows(2)
        .find(|w| w[0] > w[1])
        .map(|w| (w[0], w[1]))
}

/// Asserts that `tokens` never decreases, with context.
pub fn assert_non_decreasing(what: &str, tokens: &[i64]) {
    if let Some((a, b)) = first_regression(tokens) {
        panic!("{what}: applied tokens regressed from {a} to {b}: {tokens:?}");
    }
}

/// The most spans open at one instant (a sweep; at equal instants ends count first, so
/// touching spans do not overlap).
pub fn max_overlap(spans: &[(std::time::Instant, std::time::Instant)]) -> usize {
    let mut edges: Vec<(std::time::Instant, i32)> = Vec::new();
    for &(start, end) in spans {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort();
    let (mut open, mut max) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        max = max.max(open);
    }
    max as usize
}

/// How many spans overlap at least one other span (not only at the start, when a barrier
/// releases every task at once: a run that went serial after the first wave scores low).
pub fn overlapping_spans(spans: &[(std::time::Instant, std::time::Instant)]) -> usize {
    spans
        .iter()
        .enumerate()
        .filter(|&(i, &(s, e))| {
            spans
                .iter()
                .enumerate()
                .any(|(j, &(s2, e2))| i != j && s < e2 && s2 < e)
        })
        .count()
}
