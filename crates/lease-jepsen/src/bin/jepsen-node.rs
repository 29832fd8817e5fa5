//! A node of the Jepsen harness: one elector built on the `redlease` facade, whose terms
//! append `token:node:seq` to a log at the resource, and keep trying with the old token for
//! one TTL after the term ended (a deposed leader that did not notice). Every attempt, election
//! and step-down is recorded in the node's history file (see `lease_jepsen::history`). The
//! other workloads (`--workload`, in `jepsen-node/holds.rs`) hold a lock, a semaphore's permit
//! or a read-write lock's reader or writer hold instead of terms; a reader's operations are
//! reads, logged at the resource when no higher-token write was applied before them.
//!
//! The harness starts it inside the node's network namespace and stops it with SIGTERM, or
//! by closing its stdin (the harness died), or with SIGKILL (a fault).

#[path = "jepsen-node/holds.rs"]
mod holds;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use lease_jepsen::history::{Event, HistoryFile, NodeId, Outcome, now_us};
use lease_jepsen::rng::Rng;
use lease_jepsen::{
    ELECTION, LOCK_FENCE, LOCK_KEY, LOG_KEY, RESOURCE_MARK, RWLOCK_FENCE, RWLOCK_KEY,
    RWLOCK_WRITTEN, SEMAPHORE, SEMAPHORE_PERMITS,
};
use redlease::redis::HealingConnection;
use redlease::redis::{RedisBackend, RedisFencer, RedisPermitFencer, backend_error};
use redlease::redlock::{Node, RedlockBackend, RedlockConfig};
use redlease::{
    CancellationToken, Effect, ElectionConfig, Elector, FenceOutcome, LeaseBackend, Lock,
    LockOptions, Locker, PermitWriteOutcome, Token,
};
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

#[derive(Parser, Debug)]
#[command(about = "A node of the redlease Jepsen harness")]
struct Args {
    /// The node's index.
    #[arg(long)]
    node: u32,
    /// How many times this node was started before.
    #[arg(long, default_value_t = 0)]
    incarnation: u32,
    /// The history file (appended to).
    #[arg(long)]
    history: PathBuf,
    /// The store's URL; three or more make a Redlock quorum.
    #[arg(long, required = true)]
    store: Vec<String>,
    /// The resource's URL; without it the log lives on the (single) store, fenced by the
    /// election's own mark.
    #[arg(long)]
    resource: Option<String>,
    /// Write without the fence (the negative control).
    #[arg(long)]
    unfenced: bool,
    /// The election's TTL in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// The mean length of a term before the leader resigns, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    term_ms: u64,
    /// The pause between two writes of a term, in milliseconds.
    #[arg(long, default_value_t = 25)]
    write_interval_ms: u64,
    /// Seed of the node's own randomness (term lengths).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `election` (an `Elector`), `lock` (a fenced, auto-renewed `Locker` lock), `semaphore`
    /// (permits of a semaphore, each writing through its permit fencer) or `rwlock` (a
    /// read-write lock's reader holds, which read, and writer holds, which write).
    #[arg(long, default_value = "election")]
    workload: String,
}

/// Where and how a term writes (or, a reader's hold, reads).
#[derive(Clone)]
enum Sink {
    /// Through a fencer on the store (the election's mark when `mark` is `None`, else the
    /// lock's) or on the resource (its own mark). With `written` (the read-write workload's
    /// writers) the write also records its token there as the last write applied.
    Fenced {
        conn: HealingConnection,
        mark: Option<String>,
        written: Option<&'static str>,
    },
    /// A reader's read (the read-write workload), by a script on the store: refused (stale)
    /// when a write with a higher token was applied ([`RWLOCK_WRITTEN`]), else appended to the
    /// log.
    Read(HealingConnection),
    /// Through a permit's fencer (the semaphore workload): applied only while the permit is
    /// current at the store.
    Permit(RedisPermitFencer<HealingConnection>),
    /// A plain RPUSH: the negative control.
    Unfenced(HealingConnection),
}

impl Sink {
    async fn write(&self, token: Token, entry: String) -> Outcome {
        match self {
            Sink::Fenced {
                conn,
                mark,
                written,
            } => {
                let fencer = match mark {
                    Some(mark) => RedisFencer::new(conn.clone(), mark.as_str(), token),
                    None => RedisFencer::for_election(conn.clone(), ELECTION, token),
                };
                let write = match *written {
                    None => fencer.eval(
                        "redis.call('RPUSH', KEYS[2], ARGV[2])",
                        vec![LOG_KEY],
                        vec![entry],
                    ),
                    Some(written) => fencer.eval(
                        "redis.call('RPUSH', KEYS[2], ARGV[2]) redis.call('SET', KEYS[3], ARGV[3])",
                        vec![LOG_KEY, written],
                        vec![entry, token.get().to_string()],
                    ),
                };
                match write.await {
                    Ok(FenceOutcome::Applied) => Outcome::Applied,
                    Ok(FenceOutcome::Stale { .. }) => Outcome::Stale,
                    Err(e) if e.effect() == Effect::Unknown => Outcome::Unknown,
                    Err(_) => Outcome::NotApplied,
                }
            }
            Sink::Permit(fencer) => {
                match fencer
                    .with_token(token)
                    .eval("redis.call('RPUSH', KEYS[2], ARGV[2])", [LOG_KEY], [entry])
                    .await
                {
                    Ok(PermitWriteOutcome::Applied) => Outcome::Applied,
                    Ok(PermitWriteOutcome::NotCurrent | PermitWriteOutcome::Stale { .. }) => {
                        Outcome::Stale
                    }
                    Err(e) if e.effect() == Effect::Unknown => Outcome::Unknown,
                    Err(_) => Outcome::NotApplied,
                }
            }
            Sink::Read(conn) => {
                let mut conn = conn.clone();
                let r: Result<i64, _> = redis::Script::new(READ)
                    .key(RWLOCK_WRITTEN)
                    .key(LOG_KEY)
                    .arg(token.get())
                    .arg(entry)
                    .invoke_async(&mut conn)
                    .await;
                match r {
                    Ok(1) => Outcome::Applied,
                    Ok(_) => Outcome::Stale,
                    Err(e) => match backend_error(e).effect() {
                        Effect::Unknown => Outcome::Unknown,
                        _ => Outcome::NotApplied,
                    },
                }
            }
            Sink::Unfenced(conn) => {
                let mut conn = conn.clone();
                let r: Result<i64, _> = redis::cmd("RPUSH")
                    .arg(LOG_KEY)
                    .arg(entry)
                    .query_async(&mut conn)
                    .await;
                match r {
                    Ok(_) => Outcome::Applied,
                    Err(e) => match backend_error(e).effect() {
                        Effect::Unknown => Outcome::Unknown,
                        _ => Outcome::NotApplied,
                    },
                }
            }
        }
    }
}

/// A reader's read at the resource: `KEYS[1]` the token of the last write applied, `KEYS[2]`
/// the log, `ARGV[1]` the reader's token, `ARGV[2]` the entry. A write with a higher token
/// came from a writer admitted after the reader (one counter mints both), so the reader's
/// hold had ended: refused (0). Otherwise the read is logged (1). Tokens stay below 2^53,
/// exact in Lua.
const READ: &str = "local w = tonumber(redis.call('GET', KEYS[1]) or '0') \
    if w > tonumber(ARGV[1]) then return 0 end \
    redis.call('RPUSH', KEYS[2], ARGV[2]) return 1";

struct Node_ {
    id: NodeId,
    history: HistoryFile,
    sink: Sink,
    seq: AtomicU64,
    ttl: Duration,
    write_interval: Duration,
    writers: Mutex<Vec<JoinHandle<()>>>,
}

impl Node_ {
    fn record(&self, event: Event) {
        if let Err(e) = self.history.node(self.id, event) {
            eprintln!("jepsen-node {}: cannot record: {e}", self.id);
            std::process::exit(2);
        }
    }
}

/// Connects (a self-healing connection), retrying until it succeeds (the server may be partitioned or down
/// when a node restarts) or `shutdown` fires.
async fn manager(url: &str, shutdown: &CancellationToken) -> Option<HealingConnection> {
    let client = match redis::Client::open(url) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jepsen-node: bad URL {url}: {e}");
            std::process::exit(64);
        }
    };
    loop {
        if shutdown.is_cancelled() {
            return None;
        }
        let attempt = tokio::time::timeout(
            Duration::from_secs(3),
            HealingConnection::connect(client.clone()),
        )
        .await;
        if let Ok(Ok(conn)) = attempt {
            return Some(conn);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn deadline_us(elector_until: Option<tokio::time::Instant>) -> u64 {
    let now = tokio::time::Instant::now();
    let wall = now_us();
    match elector_until {
        Some(until) => {
            wall + u64::try_from(until.saturating_duration_since(now).as_micros()).unwrap_or(0)
        }
        None => wall,
    }
}

/// Runs the elector until shutdown; terms write through `node.sink`.
async fn drive<B: LeaseBackend>(
    elector: Elector<B>,
    node: Arc<Node_>,
    term_ms: u64,
    seed: u64,
    shutdown: CancellationToken,
) {
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    loop {
        let node = Arc::clone(&node);
        let rng = Arc::clone(&rng);
        let watcher = elector.clone();
        let result = elector
            .run(shutdown.clone(), move |term| {
                let node = Arc::clone(&node);
                let elector = watcher.clone();
                let length = {
                    let mut r = rng.lock().unwrap_or_else(|p| p.into_inner());
                    Duration::from_millis(r.range(term_ms / 2, term_ms * 3 / 2))
                };
                async move {
                    let token = term.token();
                    let mut deadline = deadline_us(elector.valid_until());
                    node.record(Event::Elected {
                        token: token.get(),
                        deadline_us: deadline,
                    });
                    let ended = term.cancellation_token();
                    let writer = tokio::spawn(write_loop(
                        Arc::clone(&node),
                        node.sink.clone(),
                        token,
                        ended.clone(),
                    ));
                    node.writers
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(writer);
                    let stop = tokio::time::sleep(length);
                    tokio::pin!(stop);
                    loop {
                        tokio::select! {
                            _ = term.cancelled() => break,
                            _ = &mut stop => break,
                            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                                if elector.token() == Some(token) {
                                    let d = deadline_us(elector.valid_until());
                                    // Only a renewal moves it by more than the clock jitter.
                                    if d > deadline + 1_000 {
                                        deadline = d;
                                        node.record(Event::Deadline { token: token.get(), deadline_us: d });
                                    }
                                }
                            }
                        }
                    }
                    node.record(Event::SteppedDown { token: token.get() });
                    // The writer keeps going (with the old token) for one TTL from here.
                    ended.cancel();
                }
            })
            .await;
        match result {
            Ok(()) => return,
            Err(e) => {
                eprintln!("jepsen-node: the elector stopped: {e}; running it again");
                if shutdown.is_cancelled() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A term's writes: every `write_interval` while the term lasts, then for one TTL after it
/// ended (a deposed leader that did not notice).
async fn write_loop(node: Arc<Node_>, sink: Sink, token: Token, ended: CancellationToken) {
    let mut stop_at: Option<tokio::time::Instant> = None;
    loop {
        let seq = node.seq.fetch_add(1, Ordering::SeqCst);
        let entry = format!("{}:{}:{seq}", token.get(), node.id);
        node.record(Event::Send {
            seq,
            token: token.get(),
        });
        let outcome = tokio::time::timeout(Duration::from_secs(1), sink.write(token, entry))
            .await
            .unwrap_or(Outcome::Unknown);
        node.record(Event::Done { seq, outcome });
        tokio::time::sleep(node.write_interval).await;
        if ended.is_cancelled() {
            let at = *stop_at.get_or_insert_with(|| tokio::time::Instant::now() + node.ttl);
            if tokio::time::Instant::now() >= at {
                return;
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let id = NodeId {
        node: args.node,
        incarnation: args.incarnation,
    };
    let history = match HistoryFile::open(&args.history) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("jepsen-node {id}: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = history.node(id, Event::Start) {
        eprintln!("jepsen-node {id}: {e}");
        std::process::exit(2);
    }
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("jepsen-node: no SIGTERM handler: {e}");
                        return;
                    }
                };
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 64];
            tokio::select! {
                _ = term.recv() => {}
                // EOF or an error: the harness is gone.
                _ = async { while let Ok(n) = stdin.read(&mut buf).await { if n == 0 { break; } } } => {}
            }
            shutdown.cancel();
        });
    }
    let ttl = Duration::from_millis(args.ttl_ms);
    let config = match ElectionConfig::builder(ELECTION, format!("node-{id}"))
        .ttl(ttl)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("jepsen-node: {e}");
            std::process::exit(64);
        }
    };
    let mut stores = Vec::new();
    for url in &args.store {
        match manager(url, &shutdown).await {
            Some(c) => stores.push((url.clone(), c)),
            None => return,
        }
    }
    let sink_conn = match &args.resource {
        Some(url) => match manager(url, &shutdown).await {
            Some(c) => c,
            None => return,
        },
        None => stores[0].1.clone(),
    };
    let workload = args.workload.as_str();
    if !["election", "lock", "semaphore", "rwlock"].contains(&workload) {
        eprintln!("jepsen-node: --workload {workload:?}: election, lock, semaphore or rwlock");
        std::process::exit(64);
    }
    if matches!(workload, "semaphore" | "rwlock") && (stores.len() >= 3 || args.resource.is_some())
    {
        eprintln!("jepsen-node: the {workload} workload runs on one store, with the log on it");
        std::process::exit(64);
    }
    let sink = if args.unfenced {
        Sink::Unfenced(sink_conn)
    } else {
        let mark = match (&args.resource, workload) {
            (Some(_), _) => Some(RESOURCE_MARK.to_owned()),
            (None, "lock") => Some(format!("{LOCK_FENCE}:applied")),
            (None, "rwlock") => Some(format!("{RWLOCK_FENCE}:applied")),
            (None, _) => None,
        };
        Sink::Fenced {
            conn: sink_conn,
            mark,
            written: (workload == "rwlock").then_some(RWLOCK_WRITTEN),
        }
    };
    let node = Arc::new(Node_ {
        id,
        history,
        sink,
        seq: AtomicU64::new(0),
        ttl,
        write_interval: Duration::from_millis(args.write_interval_ms),
        writers: Mutex::new(Vec::new()),
    });
    let seed = args.seed ^ (u64::from(args.node) << 32) ^ u64::from(args.incarnation);
    if stores.len() >= 3 {
        let nodes = stores
            .into_iter()
            .map(|(url, conn)| Node::new(url, RedisBackend::new(conn)))
            .collect();
        let backend = match RedlockBackend::new(nodes, RedlockConfig::new()) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("jepsen-node: {e}");
                std::process::exit(64);
            }
        };
        if workload == "lock" {
            holds::locks(
                Locker::new(backend),
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        } else {
            let elector = Elector::builder(backend, config).seed(seed).build();
            drive(
                elector,
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        }
    } else {
        let backend = RedisBackend::new(stores[0].1.clone());
        if workload == "semaphore" {
            holds::permits(
                Locker::new(backend),
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        } else if workload == "rwlock" {
            holds::rwlocks(
                Locker::new(backend),
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        } else if workload == "lock" {
            holds::locks(
                Locker::new(backend),
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        } else {
            let elector = Elector::builder(backend, config).seed(seed).build();
            drive(
                elector,
                Arc::clone(&node),
                args.term_ms,
                seed,
                shutdown.clone(),
            )
            .await;
        }
    }
    // Deposed writers stop within a TTL of their term's end.
    let writers = std::mem::take(&mut *node.writers.lock().unwrap_or_else(|p| p.into_inner()));
    for w in writers {
        let _ = tokio::time::timeout(ttl + Duration::from_secs(3), w).await;
    }
}
