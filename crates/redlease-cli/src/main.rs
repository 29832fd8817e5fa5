//! The `redlease` command: leader election and locks on Redis with fencing tokens, from the
//! shell. Built on the public API of the [`redlease`] facade.
//!
//! ```text
//! redlease [--redis URL] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--json] [-v]
//!          [--export-redis-password]
//!          [--cluster | --sentinel ADDRS --service NAME | --redlock URL,URL,URL] <command>
//!
//!   run    --name NAME [--ttl 5s] [--instance-id ID] [--grace TTL/3] [--keep-running]
//!          [--require-durable-store] [--stdin] [-q] [--health-addr ADDR] -- CMD [ARGS...]
//!   lock   KEY [--ttl 10s] [-w 30s|SECS|forever] [-E 71] [--fence] [--grace TTL/3] [--stdin]
//!          [-q] [--health-addr ADDR] -- CMD [ARGS...]
//!   status --name NAME
//!   fence  set|hset|del --name NAME --token T ARGS...
//!   demo   [--redis URL]
//!   completions bash|zsh|fish|elvish|powershell
//!   man
//! ```
//!
//! - `--redis` defaults to `redis://127.0.0.1:6379`, or `REDLEASE_REDIS_URL`. A connection
//!   attempt gives up after about one second.
//! - `--cluster`, `--sentinel ... --service NAME`, `--redlock URL,URL,URL`: `run`, `lock`,
//!   `status` and `fence` on a Redis Cluster, a Sentinel-managed primary or a Redlock quorum
//!   (`topology.rs`), with TLS for each; `fence` on Redlock is refused (exit 64).
//! - `rediss://` URLs connect over TLS, trusting the system's roots (or the bundle named by
//!   `SSL_CERT_FILE` / `SSL_CERT_DIR`, which replace them, as with OpenSSL) plus `--tls-ca`
//!   (`REDLEASE_TLS_CA`); `--tls-cert` and `--tls-key` (`REDLEASE_TLS_CERT`,
//!   `REDLEASE_TLS_KEY`, both or neither) present a client certificate (mutual TLS). A TLS
//!   failure exits 69 with the reason (unknown CA, expired certificate, wrong host name,
//!   client certificate required, not a TLS port); an unreadable or unusable TLS file, or a
//!   `--tls-*` option with a plain `redis://` URL, exits 64.
//! - Progress is printed on stderr (`redlease +1.234s: ...`), as JSON lines with `--json`;
//!   results (`status`, `fence`) go to stdout, as one JSON object with `--json`.
//! - `run`: while elected leader of NAME, CMD runs with `REDLEASE_TOKEN` (the term's fencing
//!   token), `REDLEASE_NAME`, `REDLEASE_LEADER_ID` and `REDLEASE_REDIS_URL` in its
//!   environment, never `REDLEASE_INSTANCE_ID` (a nested `run` must not re-take the term) (the URL without its password unless `--export-redis-password`), stdin
//!   `/dev/null` unless `--stdin`, in its own process group under a trampoline that kills the
//!   whole group if redlease dies. Renewals
//!   failing with only `--grace` (default TTL/3) left: SIGTERM to the group; at the lease's
//!   deadline, or when it is found held by another: SIGKILL; exit 72 (or contend again with
//!   `--keep-running`). CMD exited: its leftovers stopped, release, exit with its status (or
//!   contend again with `--keep-running`). SIGINT/SIGTERM: stop CMD, release, exit 130/143;
//!   SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM: forwarded to CMD's group. `-q`: only what
//!   went wrong on stderr. Guarantees and limits: `docs/cli.md`.
//! - `lock`: CMD runs under the lock KEY, renewed every TTL/3; with `--fence` a token is minted
//!   from `<KEY>:fence` and passed as `REDLEASE_TOKEN`. Lost while CMD runs: CMD is stopped,
//!   exit 72. Not obtained within `--wait` (`-w 2.5` seconds, a duration, `forever`; default
//!   30 s): exit 71, or `-E N`.
//! - `run`/`lock --health-addr ADDR` (or `REDLEASE_HEALTH_ADDR`): the sidecar endpoint,
//!   `GET /healthz`, `/leader` and `/metrics` (see `health.rs` and `docs/production.md`).
//! - `fence`: a fenced `SET`/`HSET`/`DEL` against the election's mark `<NAME>:fence:applied`.
//! - `demo`: three contenders, one elected, the leader stalls, a successor is elected with a
//!   higher token, the stale leader's write is refused. In-memory unless `--redis` is given.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`run`/`lock`: CMD exited 0) |
//! | 1 | `demo`: the story did not go as expected |
//! | 1–255 | `run`/`lock`: CMD's own exit status, passed through; 128+N when CMD was killed by signal N |
//! | 2 | usage: unknown option, missing argument, missing `--` or CMD, malformed duration |
//! | 3 | `fence`: refused, the token is stale (a newer term exists); nothing was written |
//! | 64 | invalid value: name/key/instance id empty, too long or with NUL; TTL or interval out of range; token not in 1..=2^53; malformed Redis URL; an unusable TLS file, `--tls-cert` without `--tls-key` (or the reverse), a `--tls-*` option with `redis://`; a subcommand a topology cannot offer (`fence` with `--redlock`); a key outside the election's slot on a cluster |
//! | 69 | Redis unreachable (refused, timed out after ~1 s, unknown host, no reply), or TLS failed (unknown CA, expired certificate, wrong host name, client certificate required, not a TLS port) |
//! | 70 | Redis error or unexpected reply (authentication, WRONGTYPE, script error) |
//! | 71 | `lock`: not obtained within `--wait` (another status with `-E N`); not sysexits' `EX_OSERR` |
//! | 72 | `run`/`lock`: leadership or the lock was lost while CMD ran; CMD was stopped; not sysexits' `EX_OSFILE` |
//! | 73 | `lock --max-hold`: the hold reached its cap; CMD was stopped (as for 72) and the lock released; not a loss; not sysexits' `EX_CANTCREAT` |
//! | 74 | `run`/`lock`: `--health-addr` cannot be bound (in use, not local, privileged port) |
//! | 75 | outcome unknown: the request may have reached Redis and no reply was seen (`fence`: the write may have been applied; `lock`: it may be held until its TTL) |
//! | 78 | `status --check`, `run --require-durable-store`: the server's settings let the fence keys be evicted or lost |
//! | 126 | CMD could not be executed |
//! | 127 | CMD not found |
//! | 130, 131, 143 | redlease got SIGINT / SIGQUIT / SIGTERM: CMD was stopped (at once on SIGQUIT) and the lease released (SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM are forwarded to CMD) |
//!
//! Every failure is reported as exactly one line on stderr (`redlease: ...`).

mod child;
mod cli;
mod conn;
mod demo;
mod duration;
mod exit;
mod fence;
mod health;
mod lock;
mod log;
mod output;
mod run;
mod sdnotify;
mod secret;
mod sources;
mod status;
mod supervise;
mod topology;
mod unlock;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command, DEFAULT_REDIS_URL};
use crate::exit::{Failure, USAGE};
use redlease::redis::TlsConfig;

/// What every command gets.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The Redis URL in effect (with its password: never print it, show [`Ctx::shown_url`]).
    pub(crate) redis_url: String,
    /// The Redis URL as printed: its password redacted.
    pub(crate) shown_url: String,
    /// The Redis URL as exported to CMD (`REDLEASE_REDIS_URL`): without its password unless
    /// `--export-redis-password`.
    pub(crate) exported_url: String,
    /// Whether `--redis` was given on the command line (not from the environment).
    pub(crate) redis_explicit: bool,
    /// `--json`.
    pub(crate) json: bool,
    /// `--poll-only`: no release-notice subscriber.
    pub(crate) poll_only: bool,
    /// The TLS configuration for a `rediss://` URL: the system's roots (or `SSL_CERT_FILE`),
    /// plus `--tls-ca`; `--tls-cert`/`--tls-key`.
    pub(crate) tls: TlsConfig,
    /// Whether any `--tls-*` option (or its variable) was given: refused with a plain URL.
    pub(crate) tls_given: bool,
    /// `--cluster`: `redis_url` lists the seeds of a Redis Cluster.
    pub(crate) cluster: bool,
    /// `--sentinel`: the sentinels' addresses.
    pub(crate) sentinel: Option<String>,
    /// `--service`: the primary the sentinels watch.
    pub(crate) service: Option<String>,
    /// `--redlock`: the quorum's primaries.
    pub(crate) redlock: Option<String>,
}

fn main() -> ExitCode {
    let code = supervisor_main();
    output::flush(output::FLUSH_TIMEOUT);
    code
}

fn supervisor_main() -> ExitCode {
    // CMD's trampoline (see `child.rs`): nothing else of the command runs in that process.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match argv.get(1).and_then(|a| a.to_str()) {
        Some(child::EXEC_ARG) => return child::trampoline(&argv[2..]),
        Some(child::EXEC_CMD_ARG) => return child::exec_cmd(&argv[2..]),
        Some(child::EXIT_BY_SIGNAL_ARG) => return child::exit_by_signal(&argv[2..]),
        _ => {}
    }
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return usage_error(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    let redis_explicit = matches!(
        matches
            .subcommand()
            .and_then(|(_, sub)| sub.value_source("redis"))
            .or_else(|| matches.value_source("redis")),
        Some(ValueSource::CommandLine)
    );
    let (tls, tls_given) = match tls_config(&cli) {
        Ok(t) => t,
        Err(f) => return fail(&f, cli.json),
    };
    output::set_json(cli.json);
    // `run`/`lock -q`: the libraries' warnings too are left out (errors still print).
    let quiet = match &cli.command {
        Command::Run(args) => args.quiet,
        Command::Lock(args) => args.quiet,
        _ => false,
    };
    log::install(cli.verbose, quiet, cli.json);
    let redis_url = cli
        .redis
        .clone()
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
    for url in redis_url
        .split(',')
        .chain(cli.redlock.as_deref().unwrap_or_default().split(','))
        .chain(cli.sentinel.as_deref().unwrap_or_default().split(','))
    {
        secret::register_url(url.trim());
    }
    let ctx = Ctx {
        shown_url: redis_url
            .split(',')
            .map(secret::redact)
            .collect::<Vec<_>>()
            .join(","),
        cluster: cli.cluster,
        sentinel: cli.sentinel.clone(),
        service: cli.service.clone(),
        redlock: cli.redlock.clone(),
        exported_url: if cli.export_redis_password {
            redis_url.clone()
        } else {
            secret::without_password(&redis_url)
        },
        redis_url,
        redis_explicit,
        json: cli.json,
        poll_only: cli.poll_only,
        tls,
        tls_given,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                &Failure::new(exit::SOFTWARE, format!("cannot start: {e}")),
                ctx.json,
            );
        }
    };
    let result = runtime.block_on(dispatch(&ctx, cli.command));
    // Background tasks (a release in flight after a failure) get a moment, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => fail(&f, ctx.json),
    }
}

/// The TLS options: `--tls-cert` and `--tls-key` go together (exit 64 otherwise). The
/// system's roots are trusted (`SSL_CERT_FILE` / `SSL_CERT_DIR` replace them when set, as
/// with OpenSSL), plus `--tls-ca`.
fn tls_config(cli: &Cli) -> Result<(TlsConfig, bool), Failure> {
    let mut tls = TlsConfig::new().system_roots(true);
    if let Some(ca) = &cli.tls_ca {
        tls = tls.ca_file(ca);
    }
    match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => tls = tls.client_identity_files(cert, key),
        (None, None) => {}
        (Some(_), None) => {
            return Err(Failure::new(
                exit::INVALID,
                "--tls-cert needs --tls-key (the client certificate's private key)",
            ));
        }
        (None, Some(_)) => {
            return Err(Failure::new(
                exit::INVALID,
                "--tls-key needs --tls-cert (the client certificate)",
            ));
        }
    }
    let given = cli.tls_ca.is_some() || cli.tls_cert.is_some();
    Ok((tls, given))
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<u8, Failure> {
    let topology = ctx.cluster || ctx.sentinel.is_some() || ctx.redlock.is_some();
    if topology && matches!(command, Command::Demo(_)) {
        return Err(Failure::new(
            exit::INVALID,
            "--cluster, --sentinel and --redlock do not apply to `demo` (a single server or \
             the in-memory store)",
        ));
    }
    match command {
        Command::Run(args) => run::run(ctx, args).await,
        Command::Lock(args) => lock::lock(ctx, args).await,
        Command::Status(args) => status::status(ctx, args).await,
        Command::Fence(args) => fence::fence(ctx, args).await,
        Command::Unlock(args) => unlock::unlock(ctx, args).await,
        Command::Demo(_) => demo::demo(ctx).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "redlease", &mut script);
            write_stdout(&script)
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut page)
                .map_err(|e| {
                    Failure::new(exit::SOFTWARE, format!("cannot render the man page: {e}"))
                })?;
            write_stdout(&page)
        }
    }
}

/// Writes generated text (a script, a man page) on stdout as is.
fn write_stdout(bytes: &[u8]) -> Result<u8, Failure> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot write to stdout: {e}")))?;
    Ok(exit::OK)
}

/// Reports a failure as one line on stderr: `redlease: <message>`, or with `--json` an object
/// `{"event":"error","code":N,"message":"..."}`.
fn fail(f: &Failure, json: bool) -> ExitCode {
    let line = if json {
        output::object(&[
            ("event", output::Json::from("error")),
            ("code", output::Json::from(u64::from(f.code))),
            ("message", output::Json::from(f.message.as_str())),
        ])
    } else {
        format!("redlease: {}", f.message)
    };
    output::stderr_line(&line);
    ExitCode::from(f.code)
}

/// Help and version print as usual; any other parse error is one line on stderr, exit 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(USAGE);
        }
        _ => {}
    }
    let rendered = e.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more information")
        {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
    }
    let mut message = parts.join(" ");
    if matches!(
        e.kind(),
        ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument
    ) && (message.contains("<CMD>") || is_run_or_lock_without_separator())
    {
        message
            .push_str(" (put the command after `--`, e.g. `redlease run --name jobs -- ./job.sh`)");
    }
    fail(&Failure::new(USAGE, message), false)
}

/// `run`/`lock` given without `--` (CMD words were taken as unexpected arguments).
fn is_run_or_lock_without_separator() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let is_cmd = args.iter().any(|a| a == "run" || a == "lock");
    is_cmd && !args.iter().any(|a| a == "--")
}
