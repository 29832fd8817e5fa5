//! Keeping CMD inside its lease (`run` and `lock`): CMD is stopped before the lease can pass
//! to anyone else.
//!
//! - Renewals succeeding: the lease's local deadline keeps moving; nothing happens.
//! - Renewals failing: once the remaining validity (local deadline minus now) reaches
//!   `--grace`, CMD's group gets SIGTERM; at the local deadline (or sooner, if the lease is
//!   found held by someone else) the group gets SIGKILL. The local deadline is the send instant
//!   of the last successful renewal plus the TTL (minus the backend's drift margin), never after
//!   the instant Redis lets the key expire, so CMD is gone before anyone else can be granted
//!   the lease.
//! - The lease ended (a renewal answered "not held", or the deadline passed while CMD was
//!   still running): SIGKILL to the group at once (fail closed).
//! - Asked to stop (a signal to redlease): SIGTERM, SIGKILL after `--grace`, but never after
//!   the deadline.
//! - CMD exited by itself: what it left in its group gets SIGTERM, then SIGKILL after
//!   `--grace` (never after the deadline), before the lease is released.
//!
//! A supervisor that is paused (SIGSTOP, a VM freeze) cannot do any of this: that is what the
//! fencing token (`REDLEASE_TOKEN`) is for.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use redlease::CancellationToken;
use tokio::time::Instant;

use crate::child::Child;
use crate::duration;
use crate::output::{Json, Progress};

/// How CMD's time under the lease ended. CMD has been reaped in every case.
#[derive(Debug)]
pub(crate) enum Ended {
    /// CMD exited by itself (its leftovers were stopped).
    Exited(io::Result<ExitStatus>),
    /// Renewals failed until the remaining validity reached the grace: CMD was stopped
    /// (SIGTERM, SIGKILL at the deadline at the latest).
    Expiring(io::Result<ExitStatus>),
    /// The lease ended while CMD ran (deadline passed, or held by someone else): SIGKILL.
    Lost(io::Result<ExitStatus>),
    /// `stop` was cancelled (a signal to redlease): SIGTERM, SIGKILL after the grace.
    Stopped(io::Result<ExitStatus>),
    /// Auto-renewal stopped at the lock's `--max-hold` and the remaining validity reached the
    /// grace: CMD was stopped as for [`Ended::Expiring`] (SIGTERM, SIGKILL at the deadline at
    /// the latest). Not a loss.
    Capped(io::Result<ExitStatus>),
}

/// The lease CMD runs under.
pub(crate) struct Lease<F, G = fn() -> bool> {
    /// The lease's local deadline, `None` once it has passed or the lease ended.
    pub(crate) valid_until: F,
    /// Cancelled when the lease ends (loss or deadline).
    pub(crate) ended: CancellationToken,
    /// Whether renewal stopped at the hold's cap (`lock --max-hold`): the deadline will not
    /// move again, and no renewal failed.
    pub(crate) capped: G,
}

impl<F: Fn() -> Option<Instant>, G> Lease<F, G> {
    /// Completes when the lease ends or its deadline passes (re-read after every renewal).
    pub(crate) async fn deadline(&self) {
        loop {
            let Some(until) = (self.valid_until)() else {
                return;
            };
            tokio::select! {
                () = self.ended.cancelled() => return,
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

/// Watches CMD under `lease` until it has ended one of the ways of [`Ended`].
pub(crate) async fn supervise<F: Fn() -> Option<Instant>, G: Fn() -> bool>(
    child: &mut Child,
    lease: &Lease<F, G>,
    grace: Duration,
    stop: &CancellationToken,
    hurry: &CancellationToken,
    progress: &Progress,
) -> Ended {
    loop {
        let Some(deadline) = (lease.valid_until)() else {
            return lost(child, progress, "the lease's deadline passed").await;
        };
        let term_at = deadline.checked_sub(grace).unwrap_or(deadline);
        tokio::select! {
            biased;
            () = lease.ended.cancelled() => {
                return lost(child, progress, "the lease ended").await;
            }
            () = child.exited() => {
                return Ended::Exited(child.finish(grace, lease.deadline()).await);
            }
            () = stop.cancelled() => {
                return Ended::Stopped(child.stop(grace, hurry, lease.deadline()).await);
            }
            () = tokio::time::sleep_until(term_at) => {
                let now = Instant::now();
                match (lease.valid_until)() {
                    // Renewed meanwhile: the deadline moved.
                    Some(until) if until.saturating_duration_since(now) > grace => continue,
                    // Already past (this process was paused): no grace left.
                    None => return lost(child, progress, "the lease's deadline passed").await,
                    Some(until) if (lease.capped)() => {
                        let left = until.saturating_duration_since(now);
                        progress.event(
                            "max_hold",
                            &format!(
                                "the lock reaches its --max-hold in {} (--grace {}): stopping \
                                 CMD (SIGTERM now, SIGKILL when the hold ends)",
                                duration::show(left),
                                duration::show(grace)
                            ),
                            &[("remaining_ms", Json::from(millis(left)))],
                        );
                        return Ended::Capped(child.stop(grace, hurry, lease.deadline()).await);
                    }
                    Some(until) => {
                        let left = until.saturating_duration_since(now);
                        progress.event(
                            "expiring",
                            &format!(
                                "renewals are failing and {} of the lease is left (--grace {}): \
                                 stopping CMD (SIGTERM now, SIGKILL at the lease's deadline)",
                                duration::show(left),
                                duration::show(grace)
                            ),
                            &[("remaining_ms", Json::from(millis(left)))],
                        );
                        return Ended::Expiring(child.stop(grace, hurry, lease.deadline()).await);
                    }
                }
            }
        }
    }
}

async fn lost(child: &mut Child, progress: &Progress, why: &str) -> Ended {
    if !child.has_exited() {
        progress.event(
            "killing",
            &format!("{why} while CMD ran: SIGKILL to CMD's process group"),
            &[],
        );
    }
    Ended::Lost(child.kill().await)
}

/// The signals redlease passes on to CMD's process group instead of acting on them (as tini
/// and dumb-init do): SIGHUP (reload), SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM. SIGINT and SIGTERM
/// stop CMD and release; SIGQUIT kills CMD at once (see `docs/cli.md`).
pub(crate) const FORWARDED: [rustix::process::Signal; 5] = [
    rustix::process::Signal::HUP,
    rustix::process::Signal::USR1,
    rustix::process::Signal::USR2,
    rustix::process::Signal::WINCH,
    rustix::process::Signal::ALARM,
];

/// Installs the handlers of [`FORWARDED`] (so none of them ends redlease by its default
/// action) and forwards each to CMD's process group while CMD runs; with no CMD running (not
/// leader, waiting for the lock), it is dropped and said so.
pub(crate) fn forward_signals(
    progress: &std::sync::Arc<Progress>,
) -> Result<(), crate::exit::Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    for sig in FORWARDED {
        let name = crate::exit::signal_name(sig.as_raw());
        let mut stream = signal(SignalKind::from_raw(sig.as_raw())).map_err(|e| {
            crate::exit::Failure::new(crate::exit::SOFTWARE, format!("cannot watch {name}: {e}"))
        })?;
        let progress = std::sync::Arc::clone(progress);
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if crate::child::forward(sig) > 0 {
                    progress.event(
                        "signal_forwarded",
                        &format!("{name} forwarded to CMD's process group"),
                        &[("signal", Json::from(name))],
                    );
                } else {
                    progress.event(
                        "signal",
                        &format!("{name}: no CMD running, nothing to forward it to (ignored)"),
                        &[("signal", Json::from(name))],
                    );
                }
            }
        });
    }
    Ok(())
}

/// Whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The grace period in effect: `--grace`, or TTL/3 (whole milliseconds). It must be shorter
/// than the renew slack (TTL minus the renew interval): a longer one would stop CMD while
/// renewals are healthy (exit 64).
pub(crate) fn grace(
    given: Option<Duration>,
    ttl: Duration,
    renew_interval: Duration,
) -> Result<Duration, crate::exit::Failure> {
    let slack = ttl.saturating_sub(renew_interval);
    let grace = given.unwrap_or_else(|| Duration::from_millis(millis(ttl / 3)));
    if grace >= slack {
        return Err(crate::exit::Failure::new(
            crate::exit::INVALID,
            format!(
                "invalid value: --grace {} must be shorter than the TTL minus the renew interval \
                 ({}): CMD gets SIGTERM when only --grace is left of the lease, so a longer grace \
                 would stop it while renewals are healthy (raise --ttl)",
                duration::show(grace),
                duration::show(slack)
            ),
        ));
    }
    Ok(grace)
}
