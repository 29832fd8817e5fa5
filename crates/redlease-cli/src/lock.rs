//! `redlease lock`: run CMD under a lock, renewed automatically (like `flock`, across
//! machines).

use std::time::Duration;

use redlease::redis::RedisBackend;
use redlease::{CancellationToken, LockError, LockOptions, Locker, RetryStrategy};
use tokio::signal::unix::{SignalKind, signal};

use crate::child::{Cmd, terminate};
use crate::cli::LockArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, Progress, Sink};
use crate::{Ctx, conn, duration, health};

pub(crate) async fn lock(ctx: &Ctx, args: LockArgs) -> Result<u8, Failure> {
    Cmd {
        argv: args.cmd.clone(),
    }
    .check()?;
    let progress = Progress::new(ctx.json, Sink::Stderr);
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGINT: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGTERM: {e}")))?;

    // Renew every TTL/3, in whole milliseconds (the library refuses zero and > TTL/2).
    let renew = Duration::from_millis(u64::try_from(args.ttl.as_millis() / 3).unwrap_or(u64::MAX));
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
    options = options.retry(retry).wait(args.wait);
    let fence_key = format!("{}:fence", args.key);
    if args.fence {
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

    // The health address is checked and bound before connecting: a bad one fails fast.
    let sidecar = health::prepare(args.health_addr.as_deref(), &progress).await?;
    let view = health::LockSource::new(args.key.clone());

    let connection = conn::connect_managed(ctx).await?;
    let locker = Locker::new(conn::with_notices(ctx, RedisBackend::new(connection))?);
    if let Some(sidecar) = sidecar {
        sidecar.serve(view.clone());
    }
    progress.event(
        "obtaining",
        &format!(
            "obtaining lock {:?} (ttl {}, wait {})",
            args.key,
            duration::show(args.ttl),
            duration::show(args.wait)
        ),
        &[("key", Json::from(args.key.as_str()))],
    );
    let obtained = tokio::select! {
        r = locker.obtain(args.key.clone(), args.ttl, options) => r,
        _ = sigint.recv() => return Ok(128 + 2),
        _ = sigterm.recv() => return Ok(128 + 15),
    };
    let lock = obtained
        .map_err(|e| not_obtained(&args, &e).unwrap_or_else(|| Failure::lock(&args.key, &e)))?;
    let token = lock.fence_token();
    view.set(health::LockPhase::Held {
        token,
        lost: lock.lost(),
    });
    progress.event(
        "obtained",
        &match token {
            Some(t) => format!("obtained lock {:?} with fencing token {t}", args.key),
            None => format!("obtained lock {:?}", args.key),
        },
        &[
            ("key", Json::from(args.key.as_str())),
            ("token", Json::from(token.map(|t| t.get()))),
        ],
    );

    let mut env = vec![
        ("REDLEASE_LOCK_KEY", args.key.clone()),
        ("REDLEASE_REDIS_URL", ctx.redis_url.clone()),
    ];
    if let Some(t) = token {
        env.push(("REDLEASE_TOKEN", t.to_string()));
    }
    let cmd = Cmd {
        argv: args.cmd.clone(),
    };
    let mut child = match cmd.spawn(&env) {
        Ok(c) => c,
        Err(f) => {
            let _ = lock.release().await;
            return Err(f);
        }
    };
    progress.event(
        "cmd_started",
        &format!(
            "started CMD (pid {}): {}",
            child.id().unwrap_or(0),
            cmd.display()
        ),
        &[("pid", Json::from(u64::from(child.id().unwrap_or(0))))],
    );

    let lost = lock.lost();
    let hurry = CancellationToken::new();
    enum End {
        Exited(std::process::ExitStatus),
        Lost,
        Signal(u8),
    }
    let end = tokio::select! {
        biased;
        _ = sigint.recv() => End::Signal(2),
        _ = sigterm.recv() => End::Signal(15),
        _ = lost.cancelled() => End::Lost,
        status = child.wait() => match status {
            Ok(s) => End::Exited(s),
            Err(e) => return Err(Failure::new(exit::SOFTWARE, format!("waiting for CMD: {e}"))),
        },
    };
    if let End::Signal(_) = end {
        view.stopping();
    }
    let (code, cause) = match end {
        End::Exited(status) => {
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
        End::Lost => {
            progress.event(
                "lost",
                &format!(
                    "lock {:?} lost while CMD ran: stopping CMD (SIGTERM, SIGKILL after {})",
                    args.key,
                    duration::show(args.grace)
                ),
                &[("key", Json::from(args.key.as_str()))],
            );
            stop(
                &mut child,
                args.grace,
                &hurry,
                &mut sigint,
                &mut sigterm,
                &progress,
            )
            .await;
            drop(lock);
            (exit::LOST, "lost")
        }
        End::Signal(signo) => {
            let name = exit::signal_name(i32::from(signo));
            progress.event(
                "signal",
                &format!("{name}: stopping CMD, then releasing the lock"),
                &[("signal", Json::from(name))],
            );
            stop(
                &mut child,
                args.grace,
                &hurry,
                &mut sigint,
                &mut sigterm,
                &progress,
            )
            .await;
            let _ = lock.release().await;
            (128 + signo, "signal")
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
    let within = if args.wait.is_zero() {
        "at the first attempt (--wait 0)".to_owned()
    } else {
        format!("within {}", duration::show(args.wait))
    };
    Some(Failure::new(
        exit::NOT_OBTAINED,
        format!(
            "lock {:?} not obtained {within}: held by {}",
            args.key,
            holder.as_deref().unwrap_or("another owner")
        ),
    ))
}

/// Stops CMD; a further signal meanwhile kills it at once.
async fn stop(
    child: &mut tokio::process::Child,
    grace: Duration,
    hurry: &CancellationToken,
    sigint: &mut tokio::signal::unix::Signal,
    sigterm: &mut tokio::signal::unix::Signal,
    progress: &Progress,
) {
    let stopping = terminate(child, grace, hurry);
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            status = &mut stopping => {
                if let Ok(s) = status {
                    progress.event("cmd_stopped", &format!("CMD {}", exit::describe_status(s)), &[]);
                }
                return;
            }
            _ = sigint.recv() => hurry.cancel(),
            _ = sigterm.recv() => hurry.cancel(),
        }
    }
}
