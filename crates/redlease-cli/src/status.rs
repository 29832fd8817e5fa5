//! `redlease status`: who leads an election now; who holds a semaphore (`--semaphore`), a
//! read-write lock (`--shared`) or a fair lock and who waits for it (`--fair`); with
//! `--check`, what the server's settings guarantee for fencing tokens.

use redlease::StoreReport;
use redlease::core::LeaseSpec;
use redlease::{ElectionConfig, LeaderWatch, LeaseBackend};

use crate::cli::StatusArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, object, print_stdout};
use crate::{Ctx, conn, duration};

pub(crate) async fn status(ctx: &Ctx, args: StatusArgs) -> Result<u8, Failure> {
    if let Some(name) = &args.name {
        // Validates the name exactly as an elector would (the instance id is a placeholder).
        ElectionConfig::builder(name.clone(), "redlease-status")
            .build()
            .map_err(|e| Failure::config(&e))?;
    }
    // Bad names are refused before connecting.
    if let Some(name) = &args.semaphore {
        redlease::core::semaphore_spec(name, None).map_err(|e| Failure::config(&e))?;
    }
    if let Some(key) = &args.shared {
        shared_spec(key)?;
    }
    if let Some(name) = &args.fair {
        redlease::core::fair_spec(name, None).map_err(|e| Failure::config(&e))?;
    }
    if let Some(key) = &args.lock {
        shared_spec(key)?;
    }
    crate::topology::with_backend!(ctx, once, args.watch, |backend, topology| {
        // On Redlock the counter is the highest over the answers, which a follower's failed
        // attempt may have raised: not the holder's token.
        let counter_is_token = !matches!(topology, crate::topology::Topology::Redlock(_));
        status_on(ctx, &args, backend, counter_is_token).await
    })
}

/// `status` on any backend (standalone, Cluster, Sentinel, Redlock).
async fn status_on<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    args: &StatusArgs,
    backend: B,
    counter_is_token: bool,
) -> Result<u8, Failure> {
    if args.watch
        && let Some(name) = &args.name
    {
        return watch(ctx, backend, name, args.every).await;
    }
    if let Some(name) = &args.name {
        election(ctx, &backend, name, counter_is_token).await?;
    }
    if let Some(name) = &args.semaphore {
        semaphore(ctx, &backend, name).await?;
    }
    if let Some(key) = &args.shared {
        shared(ctx, &backend, key).await?;
    }
    if let Some(name) = &args.fair {
        fair(ctx, &backend, name).await?;
    }
    if let Some(key) = &args.lock {
        plain_lock(ctx, &backend, key).await?;
    }
    if args.check {
        return check(ctx, &backend).await;
    }
    Ok(exit::OK)
}

/// Prints the store's report; `UNSAFE_STORE` unless it is confirmed safe: a known risk, a
/// setting the server did not disclose ("cannot confirm persistence"), an unsupported server
/// or a clock skew above the limit all fail the check (an asynchronous replica does not).
async fn check<B: LeaseBackend>(ctx: &Ctx, backend: &B) -> Result<u8, Failure> {
    let report = match tokio::time::timeout(conn::OP_TIMEOUT, backend.preflight()).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => return Err(Failure::backend("status --check", &e)),
        Err(_) => {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("status --check: no reply within {:?}", conn::OP_TIMEOUT),
            ));
        }
    };
    print_report(ctx, &report);
    Ok(if !report.confirmed_safe() {
        exit::UNSAFE_STORE
    } else {
        exit::OK
    })
}

fn print_report(ctx: &Ctx, report: &StoreReport) {
    let risks: Vec<String> = report.risks().iter().map(ToString::to_string).collect();
    let persistence = format!("{:?}", report.persistence);
    let eviction = format!("{:?}", report.eviction);
    let replication = format!("{:?}", report.replication);
    let server = report.server.as_ref().map(ToString::to_string);
    let skew_ms = report.clock_skew.map(|s| s.offset_ms);
    if ctx.json {
        print_stdout(&object(&[
            ("server", Json::from(server)),
            (
                "clock_skew_ms",
                skew_ms.map_or(Json::Null, |ms| Json::Num(ms as f64)),
            ),
            ("persistence", Json::from(persistence.as_str())),
            ("eviction", Json::from(eviction.as_str())),
            ("replication", Json::from(replication.as_str())),
            (
                "fence_keys_at_risk",
                Json::from(report.fence_keys_at_risk()),
            ),
            ("confirmed_safe", Json::from(report.confirmed_safe())),
            ("risks", Json::from(risks)),
            ("notes", Json::from(report.notes.clone())),
        ]));
        return;
    }
    print_stdout(&format!(
        "server:      {}",
        server.as_deref().unwrap_or("unknown (INFO server refused)")
    ));
    print_stdout(&format!("persistence: {persistence}"));
    print_stdout(&format!("eviction:    {eviction}"));
    print_stdout(&format!("replication: {replication}"));
    if let Some(skew) = report.clock_skew {
        print_stdout(&format!("clock skew:  {skew} (server minus this host)"));
    }
    if risks.is_empty() {
        print_stdout("risks:       none");
    }
    for risk in &risks {
        print_stdout(&format!("risk:        {risk}"));
    }
    for note in &report.notes {
        print_stdout(&format!("note:        {note}"));
    }
}

/// Prints each change of leader of election `name` until SIGINT or SIGTERM: at once on a
/// release notice, else at the next poll. A failed poll is reported on stderr and polling
/// goes on (Redis may come back).
async fn watch<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    backend: B,
    name: &str,
    every: std::time::Duration,
) -> Result<u8, Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGINT: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGTERM: {e}")))?;
    let mut leader = LeaderWatch::new(std::sync::Arc::new(backend), name)
        .and_then(|w| w.every(every))
        .map_err(|e| Failure::config(&e))?;
    loop {
        tokio::select! {
            _ = sigint.recv() => return Ok(exit::OK),
            _ = sigterm.recv() => return Ok(exit::OK),
            change = leader.changed() => match change {
                Ok(info) => {
                    let holder = info.as_ref().map(|i| i.instance_id.clone());
                    let token = info.as_ref().and_then(|i| i.token);
                    if ctx.json {
                        print_stdout(&object(&[
                            ("event", Json::from("leader")),
                            ("name", Json::from(name)),
                            ("holder", Json::from(holder)),
                            ("token", Json::from(token.map(|t| t.get()))),
                        ]));
                    } else {
                        match (holder, token) {
                            (Some(h), Some(t)) => print_stdout(&format!("leader: {h} (token {t})")),
                            (Some(h), None) => print_stdout(&format!("leader: {h}")),
                            (None, _) => print_stdout("leader: (none)"),
                        }
                    }
                }
                Err(e) => {
                    eprintln!("redlease: status --watch: {e} (still watching)");
                    tokio::time::sleep(every).await;
                }
            },
        }
    }
}

/// Prints who leads election `name`.
/// `counter_is_token`: whether the fence counter is the holder's token while the lease is held
/// (not on Redlock: the token is then unknown, `null`, and the counter is `last_token`).
async fn election<B: LeaseBackend>(
    ctx: &Ctx,
    backend: &B,
    name: &str,
    counter_is_token: bool,
) -> Result<(), Failure> {
    let spec = LeaseSpec::election(name);
    let info = match tokio::time::timeout(conn::OP_TIMEOUT, backend.inspect(&spec)).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(Failure::backend("status", &e)),
        Err(_) => {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("status: no reply within {:?}", conn::OP_TIMEOUT),
            ));
        }
    };
    let held = info.holder.is_some();
    // The counter is the latest token minted: the holder's while the lease is held.
    let token = if held && counter_is_token {
        info.counter
    } else {
        None
    };
    let remaining_ms = info
        .remaining
        .filter(|_| held)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mark = info.mark.token();
    if ctx.json {
        print_stdout(&object(&[
            ("name", Json::from(name)),
            ("holder", Json::from(info.holder.clone())),
            ("token", Json::from(token.map(|t| t.get()))),
            ("remaining_ms", Json::from(remaining_ms)),
            ("mark", Json::from(mark.map(|t| t.get()))),
            ("last_token", Json::from(info.counter.map(|t| t.get()))),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("name:       {name}"));
        print_stdout(&format!(
            "holder:     {}",
            info.holder.clone().unwrap_or_else(|| "(none)".to_owned())
        ));
        print_stdout(&format!(
            "token:      {}",
            token.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "remaining:  {}",
            info.remaining
                .filter(|_| held)
                .map_or_else(none, duration::show)
        ));
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        if (!held || !counter_is_token)
            && let Some(last) = info.counter
        {
            print_stdout(&format!("last token: {last}"));
        }
    }
    Ok(())
}

/// Prints semaphore `name`'s count and current holders (`status --semaphore`): one read, the
/// store's own view (expiry by the server's clock). Refused before any round trip where
/// semaphores are not offered (Redlock) or the name breaks Cluster's one-slot rule.
async fn semaphore<B: LeaseBackend>(ctx: &Ctx, backend: &B, name: &str) -> Result<(), Failure> {
    let spec = redlease::core::semaphore_spec(name, None).map_err(|e| Failure::config(&e))?;
    // As `lock -n`: a topology without semaphores, or an untagged name on Cluster, is a wrong
    // invocation (64), refused before any round trip.
    backend
        .check_semaphore(&spec)
        .map_err(|e| Failure::new(exit::INVALID, format!("status --semaphore: {e}")))?;
    let info = match tokio::time::timeout(conn::OP_TIMEOUT, backend.inspect_semaphore(&spec)).await
    {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(Failure::backend("status --semaphore", &e)),
        Err(_) => {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("status --semaphore: no reply within {:?}", conn::OP_TIMEOUT),
            ));
        }
    };
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mark = info.mark.token().map(|t| t.get());
    let last = info.counter.map(|t| t.get());
    if ctx.json {
        let holders = info
            .holders
            .iter()
            .map(|h| {
                object(&[
                    ("owner", Json::from(h.owner.as_str())),
                    ("remaining_ms", Json::from(millis(h.remaining))),
                ])
            })
            .collect();
        print_stdout(&object(&[
            ("semaphore", Json::from(name)),
            ("permits", Json::from(info.permits.map(u64::from))),
            ("held", Json::from(info.holders.len() as u64)),
            ("holders", Json::Objects(holders)),
            ("mark", Json::from(mark)),
            ("last_token", Json::from(last)),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("semaphore:  {name}"));
        print_stdout(&format!(
            "permits:    {} held of {}",
            info.holders.len(),
            info.permits.map_or_else(none, |n| n.to_string())
        ));
        for h in &info.holders {
            print_stdout(&format!(
                "holder:     {} ({} left)",
                h.owner,
                duration::show(h.remaining)
            ));
        }
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "last token: {}",
            last.map_or_else(none, |t| t.to_string())
        ));
    }
    Ok(())
}

/// One read of the store, bounded by [`conn::OP_TIMEOUT`]: a read without a reply fails with
/// `UNAVAILABLE` (never shown as free), a refusal as the backend error says.
async fn read<T>(
    what: &str,
    read: impl std::future::Future<Output = Result<T, redlease::BackendError>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(conn::OP_TIMEOUT, read).await {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(e)) => Err(Failure::backend(what, &e)),
        Err(_) => Err(Failure::new(
            exit::UNAVAILABLE,
            format!("{what}: no reply within {:?}", conn::OP_TIMEOUT),
        )),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `{"owner":..,"remaining_ms":..}` of each holder.
fn holders_json(holders: &[redlease::PermitHolder]) -> Json {
    Json::Objects(
        holders
            .iter()
            .map(|h| {
                object(&[
                    ("owner", Json::from(h.owner.as_str())),
                    ("remaining_ms", Json::from(millis(h.remaining))),
                ])
            })
            .collect(),
    )
}

/// `OWNER (T left)`.
fn held(h: &redlease::PermitHolder) -> String {
    format!("{} ({} left)", h.owner, duration::show(h.remaining))
}

/// The spec of read-write lock `key` as `lock --shared` fences it (`<KEY>:fence`).
fn shared_spec(key: &str) -> Result<LeaseSpec, Failure> {
    LeaseSpec::lock([key.to_owned()], Some(format!("{key}:fence"))).map_err(|e| Failure::config(&e))
}

/// Prints read-write lock `key`'s writer or readers (`status --shared`): one read, the
/// store's own view (a reader's expiry by the server's clock). The fence key is the one
/// `lock --shared` uses (`<KEY>:fence`). Refused before any round trip where read-write locks
/// are not offered (Redlock) or the fence keys are not in the key's Cluster slot.
async fn shared<B: LeaseBackend>(ctx: &Ctx, backend: &B, key: &str) -> Result<(), Failure> {
    const WHAT: &str = "status --shared";
    let spec = shared_spec(key)?;
    backend
        .check_shared(&spec)
        .map_err(|e| Failure::new(exit::INVALID, format!("{WHAT}: {e}")))?;
    let info = read(WHAT, backend.inspect_shared(&spec)).await?;
    let (state, shown) = match (&info.writer, info.readers.len()) {
        (Some(_), _) => ("write", "write-held".to_owned()),
        (None, 0) => ("free", "free".to_owned()),
        (None, 1) => ("read", "read-held (1 reader)".to_owned()),
        (None, n) => ("read", format!("read-held ({n} readers)")),
    };
    let mark = info.mark.token().map(|t| t.get());
    let last = info.counter.map(|t| t.get());
    if ctx.json {
        print_stdout(&object(&[
            ("lock", Json::from(key)),
            ("state", Json::from(state)),
            (
                "writer",
                Json::from(info.writer.as_ref().map(|w| w.owner.clone())),
            ),
            (
                "writer_remaining_ms",
                Json::from(info.writer.as_ref().map(|w| millis(w.remaining))),
            ),
            ("readers", holders_json(&info.readers)),
            ("writer_waiting", Json::from(info.writer_waiting.is_some())),
            (
                "writer_waiting_ms",
                Json::from(info.writer_waiting.map(millis)),
            ),
            ("mark", Json::from(mark)),
            ("last_token", Json::from(last)),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("lock:       {key}"));
        print_stdout(&format!("state:      {shown}"));
        if let Some(w) = &info.writer {
            print_stdout(&format!("writer:     {}", held(w)));
        }
        for r in &info.readers {
            print_stdout(&format!("reader:     {}", held(r)));
        }
        print_stdout(&format!(
            "waiting:    {}",
            info.writer_waiting.map_or_else(none, |d| format!(
                "a writer (its mark lapses in {})",
                duration::show(d)
            ))
        ));
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "last token: {}",
            last.map_or_else(none, |t| t.to_string())
        ));
    }
    Ok(())
}

/// Prints plain lock `key`'s holder (`status --lock`): one read, the store's own view (the
/// time left by the server's clock), with the fence counter and mark `lock --fence` uses
/// (`<KEY>:fence`). While a `lock --fence` holder holds it, the last token is its token.
async fn plain_lock<B: LeaseBackend>(ctx: &Ctx, backend: &B, key: &str) -> Result<(), Failure> {
    const WHAT: &str = "status --lock";
    let spec = shared_spec(key)?;
    backend
        .check_spec(&spec)
        .map_err(|e| Failure::new(exit::INVALID, format!("{WHAT}: {e}")))?;
    let info = read(WHAT, backend.inspect(&spec)).await?;
    let metadata = info.metadata.clone().filter(|m| !m.is_empty());
    let remaining = info.remaining.filter(|_| info.holder.is_some());
    let mark = info.mark.token().map(|t| t.get());
    let last = info.counter.map(|t| t.get());
    if ctx.json {
        print_stdout(&object(&[
            ("lock", Json::from(key)),
            ("held", Json::from(info.holder.is_some())),
            ("holder", Json::from(info.holder.clone())),
            ("metadata", Json::from(metadata)),
            ("remaining_ms", Json::from(remaining.map(millis))),
            ("mark", Json::from(mark)),
            ("last_token", Json::from(last)),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("lock:       {key}"));
        print_stdout(&format!(
            "holder:     {}",
            info.holder.clone().unwrap_or_else(|| "(none)".to_owned())
        ));
        if let Some(m) = &metadata {
            print_stdout(&format!("metadata:   {m}"));
        }
        print_stdout(&format!(
            "remaining:  {}",
            remaining.map_or_else(none, duration::show)
        ));
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "last token: {}",
            last.map_or_else(none, |t| t.to_string())
        ));
    }
    Ok(())
}

/// Prints fair lock `name`'s holder and its waiters in queue order (`status --fair`): one
/// read, the store's own view (a place's expiry by the server's clock; a lapsed place is not
/// shown); the count of every live waiter, and the first of them (bounded, as the store's
/// inspection is). Refused before any round trip where fair locks are not offered (Redlock) or the
/// name breaks Cluster's one-slot rule.
async fn fair<B: LeaseBackend>(ctx: &Ctx, backend: &B, name: &str) -> Result<(), Failure> {
    const WHAT: &str = "status --fair";
    let spec = redlease::core::fair_spec(name, None).map_err(|e| Failure::config(&e))?;
    backend
        .check_fair(&spec)
        .map_err(|e| Failure::new(exit::INVALID, format!("{WHAT}: {e}")))?;
    let info = read(WHAT, backend.inspect_fair(&spec)).await?;
    // Every fair hold mints: while the lock is held, the counter is the holder's token.
    let token = info.holder.as_ref().and(info.counter).map(|t| t.get());
    let mark = info.mark.token().map(|t| t.get());
    let last = info.counter.map(|t| t.get());
    if ctx.json {
        print_stdout(&object(&[
            ("fair", Json::from(name)),
            (
                "holder",
                Json::from(info.holder.as_ref().map(|h| h.owner.clone())),
            ),
            ("token", Json::from(token)),
            (
                "remaining_ms",
                Json::from(info.holder.as_ref().map(|h| millis(h.remaining))),
            ),
            // Every live waiter; `waiters` lists the first of them (bounded: see
            // `redlease::core::INSPECT_SHOWN`).
            ("waiting", Json::from(info.waiting as u64)),
            ("waiters", holders_json(&info.waiters)),
            ("mark", Json::from(mark)),
            ("last_token", Json::from(last)),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("fair lock:  {name}"));
        print_stdout(&format!(
            "holder:     {}",
            info.holder
                .as_ref()
                .map_or_else(|| "(none)".to_owned(), held)
        ));
        print_stdout(&format!(
            "token:      {}",
            token.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!("waiting:    {}", info.waiting));
        for (i, w) in info.waiters.iter().enumerate() {
            print_stdout(&format!("waiter:     {}. {}", i + 1, held(w)));
        }
        if info.waiting > info.waiters.len() {
            print_stdout(&format!(
                "waiter:     ... and {} more",
                info.waiting - info.waiters.len()
            ));
        }
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "last token: {}",
            last.map_or_else(none, |t| t.to_string())
        ));
    }
    Ok(())
}
