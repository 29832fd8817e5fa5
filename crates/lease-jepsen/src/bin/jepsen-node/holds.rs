//! The hold workloads of `jepsen-node`: a fenced lock and a semaphore permit, each obtained,
//! written under and released in a loop.

use super::*;

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
        let lock = match obtained {
            Ok(lock) => lock,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(token) = lock.fence_token() else {
            eprintln!("jepsen-node: a fenced lock without a token");
            std::process::exit(70);
        };
        let mut deadline = deadline_us(Some(lock.valid_until()));
        node.record(Event::Elected {
            token: token.get(),
            deadline_us: deadline,
        });
        let ended = CancellationToken::new();
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
        let _ = tokio::time::timeout(ttl * 2, lock.release()).await;
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
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (Some(token), Some(fencer)) = (permit.fence_token(), permit.permit_fencer()) else {
            eprintln!("jepsen-node: a permit without a token");
            std::process::exit(70);
        };
        let sink = match &node.sink {
            Sink::Unfenced(conn) => Sink::Unfenced(conn.clone()),
            _ => Sink::Permit(fencer),
        };
        let mut deadline = deadline_us(Some(permit.valid_until()));
        node.record(Event::Elected {
            token: token.get(),
            deadline_us: deadline,
        });
        let ended = CancellationToken::new();
        let writer = tokio::spawn(write_loop(Arc::clone(&node), sink, token, ended.clone()));
        node.writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(writer);
        let length = Duration::from_millis(rng.range(term_ms / 2, term_ms * 3 / 2));
        let stop = tokio::time::sleep(length);
        tokio::pin!(stop);
        let lost = permit.lost();
        loop {
            tokio::select! {
                _ = lost.cancelled() => break,
                _ = shutdown.cancelled() => break,
                _ = &mut stop => break,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {
                    if !permit.held() {
                        break;
                    }
                    let d = deadline_us(Some(permit.valid_until()));
                    if d > deadline + 1_000 {
                        deadline = d;
                        node.record(Event::Deadline { token: token.get(), deadline_us: d });
                    }
                }
            }
        }
        node.record(Event::SteppedDown { token: token.get() });
        ended.cancel();
        let _ = tokio::time::timeout(ttl * 2, permit.release()).await;
    }
}
