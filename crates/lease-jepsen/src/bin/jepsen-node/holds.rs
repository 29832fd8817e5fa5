//! The hold workloads of `jepsen-node`: a fenced lock, a semaphore permit, and a read-write
//! lock's reader or writer hold, each obtained, operated under and released in a loop. What
//! they share once a hold is granted — record it, operate under it, watch it, record its end,
//! release it — is [`hold`]; each workload only obtains.

use super::*;

/// How a hold is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `elected`: a lock's, a permit's or a writer's hold.
    Exclusive,
    /// `shared`: a reader's hold (the read-write workload).
    Shared,
}

/// A granted hold: its token, where its operations go, and how it is recorded.
struct Grant {
    token: Token,
    sink: Sink,
    kind: Kind,
}

/// After a failed obtain (its wait ended, the store was cut off): a short pause, then again.
async fn pause_after_failure() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// One granted hold, to its release: records it (`elected`, or `shared` for a reader), runs
/// its operations through `sink` (they go on for one TTL after the hold ends: a holder that
/// did not notice), watches it for a random length around `term_ms` or until it is lost or
/// `shutdown` fires (recording each renewal's new local deadline), then records the
/// step-down and releases it.
async fn hold<X: LeaseBackend>(
    node: &Arc<Node_>,
    lock: Lock<X>,
    Grant { token, sink, kind }: Grant,
    term_ms: u64,
    rng: &mut Rng,
    shutdown: &CancellationToken,
) {
    let mut deadline = deadline_us(Some(lock.valid_until()));
    node.record(match kind {
        Kind::Exclusive => Event::Elected {
            token: token.get(),
            deadline_us: deadline,
        },
        Kind::Shared => Event::Shared {
            token: token.get(),
            deadline_us: deadline,
        },
    });
    let ended = CancellationToken::new();
    let writer = tokio::spawn(write_loop(Arc::clone(node), sink, token, ended.clone()));
    node.writers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(writer);
    let length = Duration::from_millis(rng.range(term_ms / 2, term_ms * 3 / 2));
    let stop = tokio::time::sleep(length);
    tokio::pin!(stop);
    let lost = lock.lost();
    loop {
        tokio::select! {
            _ = lost.cancelled() => break,
            _ = shutdown.cancelled() => break,
            _ = &mut stop => break,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                if !lock.held() {
                    break;
                }
                let d = deadline_us(Some(lock.valid_until()));
                if d > deadline + 1_000 {
                    deadline = d;
                    node.record(Event::Deadline { token: token.get(), deadline_us: d });
                }
            }
        }
    }
    node.record(Event::SteppedDown { token: token.get() });
    ended.cancel();
    let _ = tokio::time::timeout(node.ttl * 2, lock.release()).await;
}

/// The token of a fenced hold; a hold without one is a bug of the node (exit 70).
fn token_of(token: Option<Token>) -> Token {
    token.unwrap_or_else(|| {
        eprintln!("jepsen-node: a fenced hold without a token");
        std::process::exit(70);
    })
}

/// The lock workload: obtain the lock (fenced, auto-renewed, waiting up to a TTL), write under
/// it for a while, release it, and again; the writes go on for one TTL after each release.
pub(super) async fn locks<B: LeaseBackend>(
    locker: Locker<B>,
    node: Arc<Node_>,
    term_ms: u64,
    seed: u64,
    shutdown: CancellationToken,
) {
    let mut rng = Rng::new(seed);
    let ttl = node.ttl;
    while !shutdown.is_cancelled() {
        let options = LockOptions::new()
            .fence_key(LOCK_FENCE)
            .wait(ttl)
            .auto_renew(ttl / 3);
        let obtained = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = locker.obtain(LOCK_KEY, ttl, options) => r,
        };
        let Ok(lock) = obtained else {
            pause_after_failure().await;
            continue;
        };
        let held = Grant {
            token: token_of(lock.fence_token()),
            sink: node.sink.clone(),
            kind: Kind::Exclusive,
        };
        hold(&node, lock, held, term_ms, &mut rng, &shutdown).await;
    }
}

/// The semaphore workload: obtain a permit of [`SEMAPHORE`] (auto-renewed, waiting up to a
/// TTL), write through its permit fencer for a while (or, with `--unfenced`, plainly), release
/// it, and again; the writes go on for one TTL after each release, and are refused then.
pub(super) async fn permits(
    locker: Locker<RedisBackend<HealingConnection>>,
    node: Arc<Node_>,
    term_ms: u64,
    seed: u64,
    shutdown: CancellationToken,
) {
    let mut rng = Rng::new(seed);
    let ttl = node.ttl;
    let semaphore = match locker.semaphore(SEMAPHORE, SEMAPHORE_PERMITS) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("jepsen-node: {e}");
            std::process::exit(64);
        }
    };
    while !shutdown.is_cancelled() {
        let options = LockOptions::new().wait(ttl).auto_renew(ttl / 3);
        let obtained = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = semaphore.acquire(ttl, options) => r,
        };
        let Ok(permit) = obtained else {
            pause_after_failure().await;
            continue;
        };
        let Some(fencer) = permit.permit_fencer() else {
            eprintln!("jepsen-node: a permit without a fencer");
            std::process::exit(70);
        };
        let sink = match &node.sink {
            Sink::Unfenced(conn) => Sink::Unfenced(conn.clone()),
            _ => Sink::Permit(fencer),
        };
        let held = Grant {
            token: token_of(permit.fence_token()),
            sink,
            kind: Kind::Exclusive,
        };
        hold(&node, permit, held, term_ms, &mut rng, &shutdown).await;
    }
}

/// The read-write workload: at random (one hold in three a writer's), obtain a reader's hold
/// of [`RWLOCK_KEY`] (`Locker::shared`) or the writer's (the plain lock of the same key), both
/// fenced by [`RWLOCK_FENCE`], auto-renewed, waiting up to a TTL; then operate under it for a
/// while, release it, and again. A writer writes to the log through the fence (its sink, made
/// by `main`); a reader reads (a read accepted only if no higher-token write was applied, and
/// logged). With `--unfenced` both append plainly. The operations go on for one TTL after
/// each release. Both retry every TTL/8 within their wait (a writer's waiting mark stands only
/// while it tries).
pub(super) async fn rwlocks(
    locker: Locker<RedisBackend<HealingConnection>>,
    node: Arc<Node_>,
    term_ms: u64,
    seed: u64,
    shutdown: CancellationToken,
) {
    let mut rng = Rng::new(seed);
    let ttl = node.ttl;
    let readers = match locker.shared(RWLOCK_KEY) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("jepsen-node: {e}");
            std::process::exit(64);
        }
    };
    // Both wait up to a TTL, retrying: a writer that retries keeps its waiting mark standing
    // (one that would not try again sets none), so readers cannot starve it.
    let retry = match redlease::RetryStrategy::linear(ttl / 8) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("jepsen-node: {e}");
            std::process::exit(64);
        }
    };
    while !shutdown.is_cancelled() {
        let options = LockOptions::new()
            .fence_key(RWLOCK_FENCE)
            .wait(ttl)
            .retry(retry.clone())
            .auto_renew(ttl / 3);
        if rng.chance(33) {
            let obtained = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = locker.obtain(RWLOCK_KEY, ttl, options) => r,
            };
            let Ok(lock) = obtained else {
                pause_after_failure().await;
                continue;
            };
            let held = Grant {
                token: token_of(lock.fence_token()),
                sink: node.sink.clone(),
                kind: Kind::Exclusive,
            };
            hold(&node, lock, held, term_ms, &mut rng, &shutdown).await;
        } else {
            let obtained = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = readers.acquire(ttl, options) => r,
            };
            let Ok(reader) = obtained else {
                pause_after_failure().await;
                continue;
            };
            let sink = match &node.sink {
                Sink::Unfenced(conn) => Sink::Unfenced(conn.clone()),
                Sink::Fenced { conn, .. } | Sink::Read(conn) => Sink::Read(conn.clone()),
                Sink::Permit(_) => {
                    eprintln!("jepsen-node: the read-write workload with a permit's sink");
                    std::process::exit(70);
                }
            };
            let held = Grant {
                token: token_of(reader.fence_token()),
                sink,
                kind: Kind::Shared,
            };
            hold(&node, reader, held, term_ms, &mut rng, &shutdown).await;
        }
    }
}
