//! `redlease lock`: run CMD under a lock, renewed automatically (like `flock`, across
//! machines).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use redlease::{
    CancellationToken, LeaseBackend, Lock, LockError, LockOptions, Locker, LossReason,
    RetryStrategy,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::child::Cmd;
use crate::cli::LockArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, Progress, Sink, object, print_stdout};
use crate::run::OtherSignals;
use crate::supervise::{Ended, Lease, supervise};
use crate::{Ctx, duration, health};

pub(crate) async fn lock(ctx: &Ctx, args: LockArgs) -> Result<u8, Failure> {
    if !args.cmd.is_empty() {
        Cmd {
            argv: args.cmd.clone(),
        }
        .check()?;
    }
    let progress = Arc::new(Progress::new(ctx.json, Sink::Stderr).quiet(args.quiet));
    let view = health::LockSource::new(args.key.clone());
    let signals = Signals::watch(
        Arc::clone(&progress),
        Arc::clone(&view),
        !args.cmd.is_empty(),
    )?;
    crate::supervise::forward_signals(&progress)?;
    crate::child::reap_orphans_as_init();

    // Renew every TTL/3, in whole milliseconds (the library refuses zero and > TTL/2).
    let renew = Duration::from_millis(u64::try_from(args.ttl.as_millis() / 3).unwrap_or(u64::MAX));
    let grace = crate::supervise::grace(args.grace, args.ttl, renew)?;
    // The ownership token names this process (host-pid-random), so a waiting `lock` can say
    // who holds it.
    let mut options = LockOptions::new()
        .auto_renew(renew)
        .owner(redlease::default_instance_id());
    // The wait bounds when attempts may start: `--wait 0` is a single attempt (each attempt
    // is bounded by its own operation timeout, one TTL by default).
    let max = (args.ttl / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    let retry = RetryStrategy::exponential(Duration::from_millis(25), max)
        .map_err(|e| Failure::config(&e))?;
    options = options.retry(retry).wait(args.wait.duration());
    if let Some(max_hold) = args.max_hold {
        options = options.max_hold(max_hold);
    }
    let fence_key = format!("{}:fence", args.key);
    // Without CMD the lock is always fenced: the token is what it prints.
    if args.fence || args.shared || args.cmd.is_empty() {
        options = options.fence_key(fence_key.clone());
    }
    // Refuse bad input before connecting.
    redlease::Ttl::new(args.ttl).map_err(|e| Failure::config(&e))?;
    if renew.is_zero() {
        return Err(Failure::new(
            exit::INVALID,
            format!(
                "invalid value: --ttl {} is too short to renew (TTL/3 must be at least 1ms)",
                duration::show(args.ttl)
            ),
        ));
    }
    if let Some(max_hold) = args.max_hold
        && max_hold < args.ttl
    {
        return Err(Failure::new(
            exit::INVALID,
            format!(
                "invalid value: --max-hold {} is shorter than --ttl {} (obtaining alone holds \
                 the lock one TTL)",
                duration::show(max_hold),
                duration::show(args.ttl)
            ),
        ));
    }

    // The health address is checked and bound before connecting: a bad one fails fast.
    let sidecar = health::prepare(args.health_addr.as_deref(), &progress).await?;

    let prepared = Prepared {
        progress,
        view,
        signals,
        grace,
        options,
        sidecar,
    };
    crate::topology::with_backend!(ctx, managed, true, |backend, _topology| {
        lock_on(ctx, &args, Locker::new(backend), prepared).await
    })
}

/// What `lock` prepared before connecting.
struct Prepared {
    progress: Arc<Progress>,
    view: Arc<health::LockSource>,
    signals: Signals,
    grace: Duration,
    options: LockOptions,
    sidecar: Option<health::Pending>,
}

/// `lock` on any backend (standalone, Cluster, Sentinel, Redlock).
async fn lock_on<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    args: &LockArgs,
    locker: Locker<B>,
    prepared: Prepared,
) -> Result<u8, Failure> {
    let Prepared {
        progress,
        view,
        signals,
        grace,
        options,
        sidecar,
    } = prepared;
    if let Some(sidecar) = sidecar {
        sidecar.serve(view.clone());
    }
    let what = match args.permits {
        Some(n) => format!("a permit of semaphore {:?} ({n} permits", args.key),
        None if args.fair => format!("fair lock {:?} (", args.key),
        None if args.shared => format!("a shared hold of lock {:?} (", args.key),
        None => format!("lock {:?} (", args.key),
    };
    progress.event(
        "obtaining",
        &format!(
            "obtaining {what}{}ttl {}, wait {})",
            if args.permits.is_some() { ", " } else { "" },
            duration::show(args.ttl),
            args.wait
        ),
        &[("key", Json::from(args.key.as_str()))],
    );
    let held = Held {
        progress,
        view,
        signals,
        grace,
    };
    let failed = |e: LockError| {
        not_obtained(args, &e).unwrap_or_else(|| {
            let mut f = Failure::lock(&args.key, &e);
            if f.code == exit::NOT_OBTAINED {
                // Not obtained, whoever holds it: the chosen code (-E).
                f.code = args.conflict_exit_code;
            }
            f
        })
    };
    match args.permits {
        None if args.fair => {
            let fair = locker.fair(args.key.clone()).map_err(failed)?;
            let obtained = tokio::select! {
                r = fair.acquire(args.ttl, options) => r,
                () = held.signals.stop.cancelled() => return Ok(128 + held.signals.signo()),
            };
            hold(ctx, args, obtained.map_err(failed)?, held).await
        }
        None if args.shared => {
            let readers = locker.shared(args.key.clone()).map_err(failed)?;
            let obtained = tokio::select! {
                r = readers.acquire(args.ttl, options) => r,
                () = held.signals.stop.cancelled() => return Ok(128 + held.signals.signo()),
            };
            hold(ctx, args, obtained.map_err(failed)?, held).await
        }
        None => {
            let obtained = tokio::select! {
                r = locker.obtain(args.key.clone(), args.ttl, options) => r,
                () = held.signals.stop.cancelled() => return Ok(128 + held.signals.signo()),
            };
            hold(ctx, args, obtained.map_err(failed)?, held).await
        }
        Some(n) => {
            let semaphore = locker.semaphore(args.key.clone(), n).map_err(failed)?;
            let obtained = tokio::select! {
                r = semaphore.acquire(args.ttl, options) => r,
                () = held.signals.stop.cancelled() => return Ok(128 + held.signals.signo()),
            };
            hold(ctx, args, obtained.map_err(failed)?, held).await
        }
    }
}

/// What `lock` keeps while it holds the lock (or the permit).
struct Held {
    progress: Arc<Progress>,
    view: Arc<health::LockSource>,
    signals: Signals,
    grace: Duration,
}

/// Runs CMD under `lock` (a lock, or a semaphore's permit), then releases it.
async fn hold<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    args: &LockArgs,
    lock: Lock<B>,
    held: Held,
) -> Result<u8, Failure> {
    let Held {
        progress,
        view,
        signals,
        grace,
    } = held;
    let token = lock.fence_token();
    view.set(health::LockPhase::Held {
        token,
        lost: lock.lost(),
    });
    progress.event(
        "obtained",
        &match (token, args.permits) {
            (Some(t), Some(n)) => format!(
                "obtained a permit of semaphore {:?} ({n} permits) with fencing token {t}",
                args.key
            ),
            (Some(t), None) if args.shared => format!(
                "obtained a shared hold of lock {:?} with fencing token {t}",
                args.key
            ),
            (Some(t), None) => format!("obtained lock {:?} with fencing token {t}", args.key),
            (None, _) => format!("obtained lock {:?}", args.key),
        },
        &[
            ("key", Json::from(args.key.as_str())),
            ("token", Json::from(token.map(|t| t.get()))),
        ],
    );

    if args.cmd.is_empty() {
        return hold_until_stopped(ctx, args, lock, &progress, &view, &signals).await;
    }

    let mut env = vec![
        ("REDLEASE_LOCK_KEY", args.key.clone()),
        ("REDLEASE_REDIS_URL", ctx.exported_url.clone()),
    ];
    if let Some(n) = args.permits {
        env.push(("REDLEASE_LOCK_PERMITS", n.to_string()));
    }
    if let Some(t) = token {
        env.push(("REDLEASE_TOKEN", t.to_string()));
    }
    let cmd = Cmd {
        argv: args.cmd.clone(),
    };
    let mut child = match cmd.spawn(&env, args.stdin) {
        Ok(c) => c,
        Err(f) => {
            let _ = lock.release().await;
            return Err(f);
        }
    };
    progress.event(
        "cmd_started",
        &format!(
            "started CMD (process group {}): {}",
            child.id(),
            cmd.display()
        ),
        &[
            ("pid", Json::from(u64::from(child.id()))),
            ("pgid", Json::from(u64::from(child.id()))),
        ],
    );

    let lease = Lease {
        valid_until: || {
            let until = lock.valid_until();
            (until > tokio::time::Instant::now()).then_some(until)
        },
        ended: lock.lost(),
        capped: || lock.capped(),
    };
    let ended = supervise(
        &mut child,
        &lease,
        grace,
        &signals.stop,
        &signals.hurry,
        &progress,
    )
    .await;
    let (code, cause) = match ended {
        Ended::Exited(status) => {
            let status = status
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("waiting for CMD: {e}")))?;
            let code = exit::status_code(status);
            progress.event(
                "cmd_exited",
                &format!("CMD {}; releasing the lock", exit::describe_status(status)),
                &[("status", Json::from(u64::from(code)))],
            );
            view.set(health::LockPhase::Released);
            match lock.release().await {
                Ok(()) => {}
                Err(e) => progress.event(
                    "release_failed",
                    &format!("warning: the lock was not released cleanly: {e}"),
                    &[("error", Json::from(e.to_string()))],
                ),
            }
            (code, "cmd_exited")
        }
        Ended::Capped(status) => capped(args, lock, &progress, Some(status)).await,
        Ended::Expiring(status) | Ended::Lost(status)
            if lock.loss_reason() == Some(LossReason::MaxHoldReached) =>
        {
            capped(args, lock, &progress, Some(status)).await
        }
        Ended::Expiring(status) | Ended::Lost(status) => {
            progress.event(
                "lost",
                &format!("lock {:?} lost while CMD ran: CMD stopped", args.key),
                &[("key", Json::from(args.key.as_str()))],
            );
            report_stopped(&progress, status);
            // Released if still ours (renewals were failing: it may come back).
            let _ = lock.release().await;
            (exit::LOST, "lost")
        }
        Ended::Stopped(status) => {
            report_stopped(&progress, status);
            let _ = lock.release().await;
            (128 + signals.signo(), "signal")
        }
    };
    progress.event(
        "exit",
        &format!("exiting with {code}"),
        &[
            ("code", Json::from(u64::from(code))),
            ("cause", Json::from(cause)),
        ],
    );
    Ok(code)
}

/// `lock KEY` without CMD: prints the token on stdout, then holds the lock (renewed) until
/// SIGINT/SIGTERM (released: exit 0) or until it is lost (exit 72).
async fn hold_until_stopped<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    args: &LockArgs,
    lock: Lock<B>,
    progress: &Progress,
    view: &health::LockSource,
    signals: &Signals,
) -> Result<u8, Failure> {
    let token = lock.fence_token().map(|t| t.get());
    if ctx.json {
        print_stdout(&object(&[
            ("key", Json::from(args.key.as_str())),
            ("token", Json::from(token)),
            ("owner", Json::from(lock.owner())),
        ]));
    } else {
        print_stdout(&token.map_or_else(|| "-".to_owned(), |t| t.to_string()));
    }
    let lost = lock.lost();
    let (code, cause) = tokio::select! {
        () = signals.stop.cancelled() => {
            view.set(health::LockPhase::Released);
            if let Err(e) = lock.release().await {
                progress.event(
                    "release_failed",
                    &format!("warning: the lock was not released cleanly: {e}"),
                    &[("error", Json::from(e.to_string()))],
                );
                return Err(Failure::lock(&args.key, &e));
            }
            (exit::OK, "signal")
        }
        () = lost.cancelled() => {
            if lock.loss_reason() == Some(LossReason::MaxHoldReached) {
                capped(args, lock, progress, None).await
            } else {
            progress.event(
                "lost",
                &format!("lock {:?} lost while held", args.key),
                &[("key", Json::from(args.key.as_str()))],
            );
            let _ = lock.release().await;
            (exit::LOST, "lost")
            }
        }
    };
    progress.event(
        "exit",
        &format!("exiting with {code}"),
        &[
            ("code", Json::from(u64::from(code))),
            ("cause", Json::from(cause)),
        ],
    );
    Ok(code)
}

/// The hold reached its `--max-hold` (CMD, if any, was stopped: `status`): reports it, makes
/// sure the lock is released, and gives [`exit::MAX_HOLD`].
async fn capped<B: LeaseBackend + 'static>(
    args: &LockArgs,
    lock: Lock<B>,
    progress: &Progress,
    status: Option<std::io::Result<std::process::ExitStatus>>,
) -> (u8, &'static str) {
    let what = if status.is_some() {
        "while CMD ran: CMD stopped"
    } else {
        "while held"
    };
    progress.event(
        "max_hold",
        &format!(
            "lock {:?} reached its --max-hold {what}; releasing it",
            args.key
        ),
        &[("key", Json::from(args.key.as_str()))],
    );
    if let Some(status) = status {
        report_stopped(progress, status);
    }
    // The library released it at the end of the hold when the token was its own; `lock` names
    // its owner, so release here (a compare-and-delete: nothing of anyone else's).
    let _ = lock.release().await;
    (exit::MAX_HOLD, "max_hold")
}

fn report_stopped(progress: &Progress, status: std::io::Result<std::process::ExitStatus>) {
    if let Ok(s) = status {
        progress.event(
            "cmd_stopped",
            &format!("CMD {}", exit::describe_status(s)),
            &[],
        );
    }
}

/// redlease's own signals while `lock` runs: the first SIGINT/SIGTERM stops CMD
/// (SIGTERM, SIGKILL after the grace), SIGQUIT or a second signal kills it at once; SIGTSTP
/// is ignored.
struct Signals {
    stop: CancellationToken,
    hurry: CancellationToken,
    signo: Arc<AtomicU8>,
}

impl Signals {
    /// `has_cmd`: whether a CMD runs under the lock (else `lock KEY` only holds it).
    fn watch(
        progress: Arc<Progress>,
        view: Arc<health::LockSource>,
        has_cmd: bool,
    ) -> Result<Signals, Failure> {
        let mut sigint = signal(SignalKind::interrupt())
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGINT: {e}")))?;
        let mut sigterm = signal(SignalKind::terminate())
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGTERM: {e}")))?;
        let mut other = OtherSignals::new()?;
        let signals = Signals {
            stop: CancellationToken::new(),
            hurry: CancellationToken::new(),
            signo: Arc::new(AtomicU8::new(0)),
        };
        let (stop, hurry, signo) = (
            signals.stop.clone(),
            signals.hurry.clone(),
            Arc::clone(&signals.signo),
        );
        tokio::spawn(async move {
            loop {
                let n: u8 = tokio::select! {
                    _ = sigint.recv() => 2,
                    _ = sigterm.recv() => 15,
                    _ = other.quit.recv() => 3,
                    _ = other.tstp.recv() => {
                        other.tstp_ignored(&progress);
                        continue;
                    }
                };
                let name = exit::signal_name(i32::from(n));
                if stop.is_cancelled() {
                    progress.event("signal", &format!("{name} again: killing CMD now"), &[]);
                    hurry.cancel();
                    continue;
                }
                signo.store(n, Ordering::SeqCst);
                // The sidecar says "shutting down" from the first signal on.
                view.stopping();
                let what = if has_cmd {
                    "stopping CMD, then releasing the lock"
                } else {
                    "releasing the lock"
                };
                progress.event(
                    "signal",
                    &format!("{name}: {what}"),
                    &[("signal", Json::from(name))],
                );
                if n == 3 {
                    hurry.cancel();
                }
                stop.cancel();
            }
        });
        Ok(signals)
    }

    fn signo(&self) -> u8 {
        self.signo.load(Ordering::SeqCst)
    }
}

/// The failure of a lock held by someone else, naming the holder.
fn not_obtained(args: &LockArgs, e: &LockError) -> Option<Failure> {
    let holder = match e {
        LockError::NotObtained { holder } => holder,
        LockError::DeadlineExceeded { last } => match &**last {
            LockError::NotObtained { holder } => holder,
            _ => return None,
        },
        _ => return None,
    };
    let within = match args.wait {
        duration::Wait::For(d) if d.is_zero() => "at the first attempt (--wait 0)".to_owned(),
        duration::Wait::For(d) => format!("within {}", duration::show(d)),
        duration::Wait::Forever => "(--wait forever)".to_owned(),
    };
    let message = match args.permits {
        Some(n) => format!(
            "no permit of semaphore {:?} obtained {within}: all {n} permits held",
            args.key
        ),
        None if args.shared => format!(
            "no shared hold of lock {:?} obtained {within}: {}",
            args.key,
            holder
                .as_deref()
                .map_or("a writer waits".to_owned(), |h| format!(
                    "held by writer {h}"
                ))
        ),
        None => format!(
            "lock {:?} not obtained {within}: held by {}",
            args.key,
            holder.as_deref().unwrap_or("readers or another owner")
        ),
    };
    Some(Failure::new(args.conflict_exit_code, message))
}
