//! `redlease run`: contend; while leader, run CMD; stop it when leadership is lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlease::Op;
use redlease::{
    BackendError, CancellationToken, ElectionConfig, Elector, ElectorError, LeaseBackend, Observer,
    StepDownReason, Term, Token,
};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::child::Cmd;
use crate::cli::RunArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, Progress, Sink};
use crate::supervise::{Ended, Lease, supervise};
use crate::{Ctx, duration, health};

/// How a term's work ended.
#[derive(Debug)]
enum TermEnd {
    /// CMD exited on its own.
    Exited(std::process::ExitStatus),
    /// Leadership was lost; CMD was stopped.
    Lost(std::io::Result<std::process::ExitStatus>),
    /// redlease was asked to stop; CMD was stopped.
    Interrupted,
    /// CMD could not be started.
    SpawnFailed(Failure),
}

pub(crate) async fn run(ctx: &Ctx, args: RunArgs) -> Result<u8, Failure> {
    let instance_id = args
        .instance_id
        .clone()
        .unwrap_or_else(redlease::default_instance_id);
    let config = ElectionConfig::builder(args.name.clone(), instance_id.clone())
        .ttl(args.ttl)
        .build()
        .map_err(|e| Failure::config(&e))?;
    let grace = crate::supervise::grace(args.grace, args.ttl, config.renew_interval())?;
    Cmd {
        argv: args.cmd.clone(),
    }
    .check()?;
    let progress = Arc::new(Progress::new(ctx.json, Sink::Stderr).quiet(args.quiet));
    // Signals are watched from the start: a Ctrl-C while connecting or contending still
    // releases what was taken.
    let sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGINT: {e}")))?;
    let sigterm = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch SIGTERM: {e}")))?;
    let other = OtherSignals::new()?;
    crate::supervise::forward_signals(&progress)?;
    crate::child::reap_orphans_as_init();

    // The health address is checked and bound before connecting: a bad one fails fast.
    let sidecar = health::prepare(args.health_addr.as_deref(), &progress).await?;

    let env = Prelude {
        instance_id,
        config,
        grace,
        progress,
        sigint,
        sigterm,
        other,
        sidecar,
    };
    crate::topology::with_backend!(ctx, managed, true, |backend, topology| {
        run_on(ctx, args, backend, &topology.shown(ctx), env).await
    })
}

/// What `run` prepared before connecting.
struct Prelude {
    instance_id: String,
    config: ElectionConfig,
    grace: Duration,
    progress: Arc<Progress>,
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
    other: OtherSignals,
    sidecar: Option<health::Pending>,
}

/// `run` on any backend (standalone, Cluster, Sentinel, Redlock).
async fn run_on<B: LeaseBackend + 'static>(
    ctx: &Ctx,
    args: RunArgs,
    backend: B,
    place: &str,
    env: Prelude,
) -> Result<u8, Failure> {
    let Prelude {
        instance_id,
        config,
        grace,
        progress,
        mut sigint,
        mut sigterm,
        mut other,
        sidecar,
    } = env;
    // systemd's readiness protocol, when NOTIFY_SOCKET is set (docs/cli.md).
    let notifier = crate::sdnotify::Notifier::from_env().map(Arc::new);
    let elector = Elector::builder(backend, config)
        .observer(ProgressObserver::new(Arc::clone(&progress)).with_notifier(notifier.clone()))
        .require_durable_store(args.require_durable_store)
        .build();
    progress.event(
        "contending",
        &format!(
            "contending for {:?} as {instance_id} (ttl {}, grace {}) on {}",
            args.name,
            duration::show(args.ttl),
            duration::show(grace),
            place
        ),
        &[
            ("name", Json::from(args.name.as_str())),
            ("instance_id", Json::from(instance_id.as_str())),
            ("ttl_ms", Json::from(millis(args.ttl))),
        ],
    );
    if let Some(n) = &notifier {
        n.send(&format!(
            "READY=1\n{}",
            crate::sdnotify::status_line(&format!("contending for {}", args.name))
        ));
    }

    let shutdown = CancellationToken::new();
    let stop_child = CancellationToken::new();
    let hurry = CancellationToken::new();
    let (child_running_tx, mut child_running) = watch::channel(false);
    let child_running_tx = Arc::new(child_running_tx);
    let (ends_tx, mut ends) = mpsc::unbounded_channel::<TermEnd>();
    if let Some(sidecar) = sidecar {
        // Shutting down: `shutdown` (CMD exited, leadership lost) or `stop_child` (a signal).
        let source = health::ElectionSource::new(
            elector.clone(),
            args.ttl,
            vec![shutdown.clone(), stop_child.clone()],
        );
        source.spawn_probe();
        sidecar.serve(source);
    }

    let work = Work {
        cmd: Cmd {
            argv: args.cmd.clone(),
        },
        name: args.name.clone(),
        instance_id: instance_id.clone(),
        redis_url: ctx.exported_url.clone(),
        grace,
        stdin: args.stdin,
        elector: elector.clone(),
        stop_child: stop_child.clone(),
        hurry: hurry.clone(),
        running: Arc::clone(&child_running_tx),
        ends: ends_tx,
        progress: Arc::clone(&progress),
    };
    let work = Arc::new(work);
    let leader_fn = move |term: Term<B>| {
        let work = Arc::clone(&work);
        async move { work.lead(term).await }
    };
    let elector_run = elector.run(shutdown.clone(), leader_fn);
    tokio::pin!(elector_run);

    let mut exit_code: Option<u8> = None;
    let mut cause = "";
    let mut signalled = false;
    loop {
        tokio::select! {
            result = &mut elector_run => {
                match result {
                    Ok(()) => {}
                    Err(ElectorError::Backend(e)) => return Err(Failure::backend("election", &e)),
                    Err(e @ ElectorError::UnsafeStore { .. }) => {
                        return Err(Failure::new(exit::UNSAFE_STORE, format!("--require-durable-store: {e}")));
                    }
                    Err(e) => return Err(Failure::new(exit::SOFTWARE, format!("election: {e}"))),
                }
                break;
            }
            Some(end) = ends.recv() => match end {
                TermEnd::Exited(status) => {
                    progress.event(
                        "cmd_exited",
                        &format!("CMD {}; releasing the lease", exit::describe_status(status)),
                        &[("status", Json::from(u64::from(exit::status_code(status))))],
                    );
                    if !args.keep_running && !signalled {
                        exit_code = Some(exit::status_code(status));
                        cause = "cmd_exited";
                        shutdown.cancel();
                    }
                }
                TermEnd::Lost(status) => {
                    let how = match &status {
                        Ok(s) => exit::describe_status(*s),
                        Err(e) => format!("could not be waited for: {e}"),
                    };
                    progress.event("cmd_stopped", &format!("CMD stopped after leadership was lost: {how}"), &[]);
                    if !args.keep_running && !signalled {
                        exit_code = Some(exit::LOST);
                        cause = "lost";
                        shutdown.cancel();
                    } else if args.keep_running {
                        progress.event("contending", "contending again (--keep-running)", &[]);
                    }
                }
                TermEnd::Interrupted => {}
                TermEnd::SpawnFailed(f) => {
                    progress.event("spawn_failed", &f.message, &[]);
                    if !signalled {
                        exit_code = Some(f.code);
                        cause = "spawn_failed";
                        shutdown.cancel();
                    }
                }
            },
            _ = sigint.recv() => {
                notify_stopping(notifier.as_deref(), signalled);
                on_signal(2, &mut signalled, &mut exit_code, &mut cause, &stop_child, &hurry, &progress);
            }
            _ = sigterm.recv() => {
                notify_stopping(notifier.as_deref(), signalled);
                on_signal(15, &mut signalled, &mut exit_code, &mut cause, &stop_child, &hurry, &progress);
            }
            _ = other.quit.recv() => {
                notify_stopping(notifier.as_deref(), signalled);
                on_signal(3, &mut signalled, &mut exit_code, &mut cause, &stop_child, &hurry, &progress);
                hurry.cancel();
            }
            _ = other.tstp.recv() => other.tstp_ignored(&progress),
            // After a signal: release once CMD has stopped (not before: the lease keeps
            // others from starting their CMD while ours is still shutting down).
            Ok(_) = child_running.wait_for(|running| !running), if signalled && !shutdown.is_cancelled() => {
                shutdown.cancel();
            }
        }
    }
    let code = exit_code.unwrap_or(exit::OK);
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

/// Tells systemd (when `NOTIFY_SOCKET` is set) that `run` is stopping, at the first signal.
fn notify_stopping(notifier: Option<&crate::sdnotify::Notifier>, signalled: bool) {
    if let (Some(n), false) = (notifier, signalled) {
        n.send("STOPPING=1");
    }
}

fn on_signal(
    signo: u8,
    signalled: &mut bool,
    exit_code: &mut Option<u8>,
    cause: &mut &'static str,
    stop_child: &CancellationToken,
    hurry: &CancellationToken,
    progress: &Progress,
) {
    if *signalled {
        progress.event("signal", "second signal: killing CMD now", &[]);
        hurry.cancel();
        return;
    }
    *signalled = true;
    *exit_code = Some(128 + signo);
    *cause = "signal";
    let name = exit::signal_name(i32::from(signo));
    progress.event(
        "signal",
        &format!(
            "{name}: stopping CMD{}, then releasing the lease",
            if signo == 3 { " at once (SIGKILL)" } else { "" }
        ),
        &[("signal", Json::from(name))],
    );
    stop_child.cancel();
}

use crate::supervise::millis;

/// The signals besides SIGINT/SIGTERM with a policy of their own (see `docs/cli.md`): SIGQUIT
/// kills CMD at once (exit 131), SIGTSTP is ignored (a stopped supervisor cannot renew while
/// CMD runs on). SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH and SIGALRM are forwarded to CMD's group
/// ([`crate::supervise::forward_signals`]).
/// SIGCONT needs nothing: CMD runs in its own process group and never gets the terminal's
/// SIGTSTP.
pub(crate) struct OtherSignals {
    pub(crate) quit: tokio::signal::unix::Signal,
    pub(crate) tstp: tokio::signal::unix::Signal,
}

impl OtherSignals {
    pub(crate) fn new() -> Result<Self, Failure> {
        let watch = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch {name}: {e}")))
        };
        Ok(OtherSignals {
            quit: watch(SignalKind::quit(), "SIGQUIT")?,
            tstp: watch(
                SignalKind::from_raw(rustix::process::Signal::TSTP.as_raw()),
                "SIGTSTP",
            )?,
        })
    }

    pub(crate) fn tstp_ignored(&self, progress: &Progress) {
        progress.event(
            "signal",
            "SIGTSTP ignored: a stopped supervisor could not renew the lease while CMD runs \
             (stop CMD with SIGINT/SIGTERM instead)",
            &[("signal", Json::from("SIGTSTP"))],
        );
    }
}

/// What the leader callback needs.
struct Work<B: LeaseBackend> {
    cmd: Cmd,
    name: String,
    instance_id: String,
    redis_url: String,
    grace: Duration,
    stdin: bool,
    elector: Elector<B>,
    stop_child: CancellationToken,
    hurry: CancellationToken,
    running: Arc<watch::Sender<bool>>,
    ends: mpsc::UnboundedSender<TermEnd>,
    progress: Arc<Progress>,
}

impl<B: LeaseBackend> Work<B> {
    /// One term: start CMD with the token; end it with the term (or end the term with it).
    async fn lead(&self, term: Term<B>) {
        // Set before checking `stop_child`: the main loop releases only once this is false.
        self.running.send_replace(true);
        let end = self.lead_inner(&term).await;
        self.running.send_replace(false);
        if let Some(end) = end {
            let _ = self.ends.send(end);
        }
    }

    async fn lead_inner(&self, term: &Term<B>) -> Option<TermEnd> {
        if self.stop_child.is_cancelled() {
            return None;
        }
        let token = term.token();
        let env = [
            ("REDLEASE_TOKEN", token.to_string()),
            ("REDLEASE_NAME", self.name.clone()),
            // Not REDLEASE_INSTANCE_ID: a `redlease run` inside CMD would take it up and
            // re-take this very term (see `Cmd::spawn`).
            ("REDLEASE_LEADER_ID", self.instance_id.clone()),
            ("REDLEASE_REDIS_URL", self.redis_url.clone()),
        ];
        let mut child = match self.cmd.spawn(&env, self.stdin) {
            Ok(c) => c,
            Err(f) => return Some(TermEnd::SpawnFailed(f)),
        };
        self.progress.event(
            "cmd_started",
            &format!(
                "started CMD (process group {}) with REDLEASE_TOKEN={token}: {}",
                child.id(),
                self.cmd.display()
            ),
            &[
                ("pid", Json::from(u64::from(child.id()))),
                ("pgid", Json::from(u64::from(child.id()))),
                ("token", Json::from(token.get())),
            ],
        );
        let lease = Lease {
            valid_until: || self.elector.valid_until(),
            ended: term.cancellation_token(),
            capped: || false,
        };
        let ended = supervise(
            &mut child,
            &lease,
            self.grace,
            &self.stop_child,
            &self.hurry,
            &self.progress,
        )
        .await;
        Some(match ended {
            Ended::Exited(Ok(s)) => TermEnd::Exited(s),
            Ended::Exited(Err(e)) => TermEnd::SpawnFailed(Failure::new(
                exit::SOFTWARE,
                format!("waiting for CMD: {e}"),
            )),
            Ended::Stopped(status) => {
                if let Ok(s) = status {
                    self.progress.event(
                        "cmd_stopped",
                        &format!("CMD {}", exit::describe_status(s)),
                        &[],
                    );
                }
                TermEnd::Interrupted
            }
            // A term has no cap: `Capped` never comes from it.
            Ended::Expiring(status) | Ended::Lost(status) | Ended::Capped(status) => {
                TermEnd::Lost(status)
            }
        })
    }
}

/// Prints election transitions; repeated identical errors are printed once per 10 s.
pub(crate) struct ProgressObserver {
    progress: Arc<Progress>,
    /// systemd's `NOTIFY_SOCKET`, told each transition as `STATUS=`.
    notifier: Option<Arc<crate::sdnotify::Notifier>>,
    last_error: Mutex<Option<(String, Instant)>>,
}

impl ProgressObserver {
    pub(crate) fn new(progress: Arc<Progress>) -> Self {
        ProgressObserver {
            progress,
            notifier: None,
            last_error: Mutex::new(None),
        }
    }
}

impl ProgressObserver {
    /// The same observer, also telling systemd each transition (`STATUS=`).
    pub(crate) fn with_notifier(
        mut self,
        notifier: Option<Arc<crate::sdnotify::Notifier>>,
    ) -> Self {
        self.notifier = notifier;
        self
    }

    fn notify(&self, status: &str) {
        if let Some(n) = &self.notifier {
            n.send(&crate::sdnotify::status_line(status));
        }
    }
}

impl Observer for ProgressObserver {
    fn on_elected(&self, token: Token) {
        self.progress.event(
            "elected",
            &format!("elected leader with token {token}"),
            &[("token", Json::from(token.get()))],
        );
        self.notify(&format!("leader (token {token})"));
    }

    fn on_stepped_down(&self, token: Token, reason: StepDownReason) {
        let why = match reason {
            StepDownReason::Lost => "the lease is held by someone else",
            StepDownReason::DeadlineExpired => "no renewal succeeded before the lease's deadline",
            StepDownReason::Resigned => "resigned",
            StepDownReason::Shutdown => "shutting down",
            StepDownReason::WorkReturned => "CMD exited",
            _ => "term ended",
        };
        self.progress.event(
            "stepped_down",
            &format!("term {token} ended: {why}"),
            &[
                ("token", Json::from(token.get())),
                ("reason", Json::from(format!("{reason:?}"))),
            ],
        );
        self.notify(&format!("stepped down (term {token}: {why})"));
    }

    fn on_follower(&self, holder: Option<&str>) {
        self.progress.event(
            "follower",
            &format!("following {}", holder.unwrap_or("another instance")),
            &[("holder", Json::from(holder))],
        );
        self.notify(&format!(
            "follower (leader: {})",
            holder.unwrap_or("another instance")
        ));
    }

    fn on_error(&self, op: Op, error: &BackendError) {
        let text = format!("{op:?} failed (will retry): {error}");
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some((prev, at)) = last.as_ref()
            && *prev == text
            && now.duration_since(*at) < Duration::from_secs(10)
        {
            return;
        }
        *last = Some((text.clone(), now));
        drop(last);
        self.progress.event(
            "error",
            &text,
            &[
                ("op", Json::from(format!("{op:?}"))),
                ("error", Json::from(error.to_string())),
            ],
        );
    }
}
