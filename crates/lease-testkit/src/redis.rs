//! A real Redis server per test: a testcontainers container or a `redis-server`
//! child process, behind one API.
//!
//! ```no_run
//! use lease_testkit::redis::{Persistence, RedisServer};
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let server = RedisServer::builder()
//!     .persistence(Persistence::AofAlways)
//!     .start()
//!     .await?;
//! let mut conn = server.connection().await?;
//! let _: () = redis::cmd("SET").arg("k").arg("v").query_async(&mut conn).await?;
//! server.restart().await?; // same port, the key survives (AOF always)
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::docker::{docker, docker_blocking, drop_on_kit_runtime, on_kit_runtime};
use crate::mode::{ServerMode, selection};
use crate::process::{ServerProcess, free_port, log_stdio, log_tail, loopback, require_program};
use crate::resp::{self, ProbeAuth};
use crate::tempdir::{TempDir, run_id};
use crate::{Error, Result};

/// How long `start()` waits for a new server to answer PING.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long `restart()` waits (includes loading the AOF).
const RESTART_DEADLINE: Duration = Duration::from_secs(120);
/// Grace period for `stop()` before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How many times a start is retried when the chosen free port was taken meanwhile.
const PORT_ATTEMPTS: usize = 8;
/// The port Redis listens on inside a container.
const CONTAINER_PORT: u16 = 6379;
/// Docker CLI timeout.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(60);

/// Docker label put on every container the kit starts.
pub const CONTAINER_LABEL: &str = "redlease.testkit";
/// Docker label carrying the run id ([`crate::tempdir::ENV_RUN_ID`]), when set.
pub const CONTAINER_RUN_LABEL: &str = "redlease.testkit.run";

/// Redis persistence settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Persistence {
    /// No RDB snapshots (`--save ""`), no AOF: a restart loses every key.
    #[default]
    None,
    /// AOF with `appendfsync everysec`: a graceful restart keeps the keys; a kill may
    /// lose up to about a second of writes.
    AofEverySec,
    /// AOF with `appendfsync always`: every acknowledged write survives a restart,
    /// even after `kill()`.
    AofAlways,
}

/// The lifecycle state of a [`RedisServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// Running and answering.
    Running,
    /// Paused (SIGSTOP or `docker pause`): connections are accepted by the kernel or
    /// the Docker proxy, but nothing is answered until `resume()`.
    Paused,
    /// Killed or stopped; `restart()` brings it back on the same port.
    Stopped,
}

impl ServerState {
    fn to_u8(self) -> u8 {
        match self {
            ServerState::Running => 0,
            ServerState::Paused => 1,
            ServerState::Stopped => 2,
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            0 => ServerState::Running,
            1 => ServerState::Paused,
            _ => ServerState::Stopped,
        }
    }
}

#[derive(Debug, Clone)]
struct AclUser {
    name: String,
    password: String,
}

#[derive(Debug, Clone)]
enum ConfigEntry {
    Line(String),
    Pair(String, String),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RedisOptions {
    persistence: Persistence,
    maxmemory: Option<String>,
    maxmemory_policy: Option<String>,
    requirepass: Option<String>,
    acl_user: Option<AclUser>,
    extra: Vec<ConfigEntry>,
    mode: Option<ServerMode>,
    pub(crate) cluster: bool,
}

/// Builder for a [`RedisServer`]; see [`RedisServer::builder`].
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisServerBuilder {
    opts: RedisOptions,
}

impl RedisServerBuilder {
    /// Persistence mode (default [`Persistence::None`]).
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.opts.persistence = persistence;
        self
    }

    /// `maxmemory` (e.g. `"64mb"`).
    pub fn maxmemory(mut self, bytes: impl Into<String>) -> Self {
        self.opts.maxmemory = Some(bytes.into());
        self
    }

    /// `maxmemory-policy` (e.g. `"allkeys-lru"`, `"noeviction"`).
    pub fn maxmemory_policy(mut self, policy: impl Into<String>) -> Self {
        self.opts.maxmemory_policy = Some(policy.into());
        self
    }

    /// `requirepass`: the password of the `default` user. [`RedisServer::url`] then
    /// carries it.
    pub fn requirepass(mut self, password: impl Into<String>) -> Self {
        self.opts.requirepass = Some(password.into());
        self
    }

    /// An ACL user with full access (`on >password ~* &* +@all`); connect as it with
    /// [`RedisServer::acl_user_url`].
    pub fn acl_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.opts.acl_user = Some(AclUser {
            name: name.into(),
            password: password.into(),
        });
        self
    }

    /// One configuration directive with a single value (the value may contain
    /// spaces; it is passed as one argument).
    pub fn config(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.opts
            .extra
            .push(ConfigEntry::Pair(name.into(), value.into()));
        self
    }

    /// One raw `redis.conf` line, e.g. `"maxmemory-samples 10"` or
    /// `"user bob on >pw ~bob:* +get"`. Tokens are split on whitespace; double or
    /// single quotes group a token, as in `redis.conf`.
    pub fn config_line(mut self, line: impl Into<String>) -> Self {
        self.opts.extra.push(ConfigEntry::Line(line.into()));
        self
    }

    /// Forces the mode for this server, overriding `REDLEASE_TEST_SERVERS`.
    pub fn mode(mut self, mode: ServerMode) -> Self {
        self.opts.mode = Some(mode);
        self
    }

    /// Starts the server and waits until it answers PING.
    pub async fn start(self) -> Result<RedisServer> {
        RedisServer::start_with(self.opts).await
    }
}

/// A Redis server owned by the test. Dropping it kills the process or removes the
/// container (also when paused, also while a test panics) and deletes its files.
#[derive(Debug)]
pub struct RedisServer {
    opts: RedisOptions,
    mode: ServerMode,
    port: u16,
    bus_port: Option<u16>,
    state: AtomicU8,
    inner: tokio::sync::Mutex<Backend>,
}

#[derive(Debug)]
enum Backend {
    Process(ProcessBackend),
    Container(ContainerBackend),
}

#[derive(Debug)]
struct ProcessBackend {
    // Field order matters: the process is killed before the directory is removed.
    process: Option<ServerProcess>,
    program: PathBuf,
    args: Vec<String>,
    dir: TempDir,
}

impl ProcessBackend {
    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<()> {
        let log = self.log_path();
        let (out, err) = log_stdio(&log)?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(self.dir.path())
            .stdout(out)
            .stderr(err);
        self.process = Some(ServerProcess::spawn(cmd, "redis-server")?);
        Ok(())
    }
}

#[derive(Debug)]
struct ContainerBackend {
    container: Option<Arc<ContainerAsync<GenericImage>>>,
    id: String,
    image: String,
}

impl Drop for ContainerBackend {
    fn drop(&mut self) {
        // Synchronous and independent of any runtime: `docker rm -f` also removes a
        // paused container. testcontainers' own Drop then finds nothing to remove.
        if let Err(e) = docker_blocking(&["rm", "-f", "-v", &self.id], DOCKER_TIMEOUT) {
            eprintln!("lease-testkit: could not remove container {}: {e}", self.id);
        }
        if let Some(container) = self.container.take() {
            drop_on_kit_runtime(container);
        }
    }
}

impl RedisServer {
    /// Starts a server with default options (no persistence, no password) in the
    /// mode chosen by [`crate::mode::server_mode`].
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// A builder for non-default options.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    pub(crate) async fn start_with(opts: RedisOptions) -> Result<Self> {
        crate::reaper::reap_stale_dirs();
        let mode = match opts.mode {
            Some(mode) => mode,
            None if opts.cluster => ServerMode::Process,
            None => selection()?.mode,
        };
        match mode {
            ServerMode::Process => Self::start_process(opts).await,
            ServerMode::Container => {
                if opts.cluster {
                    return Err(Error::Config(
                        "cluster nodes run as processes only".to_owned(),
                    ));
                }
                let image = selection()?.image.clone();
                crate::reaper::reap_stale_containers().await;
                Self::start_container(opts, image).await
            }
        }
    }

    async fn start_process(opts: RedisOptions) -> Result<Self> {
        let program = require_program(
            "redis-server",
            &[],
            "install Redis (Debian/Ubuntu: `apt-get install redis-server`, or run scripts/install-deps.sh)",
        )?;
        let dir = TempDir::new(if opts.cluster {
            "cluster-node"
        } else {
            "redis"
        })?;
        let dir_str = dir
            .path()
            .to_str()
            .ok_or_else(|| Error::Config("temp dir path is not UTF-8".to_owned()))?
            .to_owned();
        let mut backend = ProcessBackend {
            process: None,
            program,
            args: Vec::new(),
            dir,
        };
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let bus_port = if opts.cluster {
                let mut bus = free_port()?;
                while bus == port {
                    bus = free_port()?;
                }
                Some(bus)
            } else {
                None
            };
            backend.args = redis_args(&opts, port, bus_port, &dir_str, "127.0.0.1")?;
            let _ = std::fs::remove_file(backend.log_path());
            backend.spawn()?;
            let server = RedisServer {
                mode: ServerMode::Process,
                port,
                bus_port,
                state: AtomicU8::new(ServerState::Running.to_u8()),
                inner: tokio::sync::Mutex::new(Backend::Process(backend)),
                opts: opts.clone(),
            };
            match server.wait_ready(START_DEADLINE).await {
                Ok(()) => return Ok(server),
                Err(Error::Exited { log, what, status }) if is_port_conflict(&log) => {
                    last_error = Some(Error::Exited { log, what, status });
                    let Backend::Process(b) = server.into_backend() else {
                        unreachable!("process backend")
                    };
                    backend = b;
                    backend.process = None;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }

    fn into_backend(self) -> Backend {
        self.inner.into_inner()
    }

    async fn start_container(opts: RedisOptions, image: String) -> Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let (image_name, image_tag) = split_image(&image);
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let host_port = free_port()?;
            let name = format!(
                "redlease-redis-{}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed),
                host_port
            );
            let mut cmd = vec!["redis-server".to_owned()];
            cmd.extend(redis_args(&opts, CONTAINER_PORT, None, "/data", "0.0.0.0")?);
            let mut request = GenericImage::new(image_name.clone(), image_tag.clone())
                .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                .with_cmd(cmd)
                .with_container_name(name.clone())
                .with_label(CONTAINER_LABEL, "redis")
                .with_label(crate::reaper::OWNER_LABEL, crate::reaper::owner())
                .with_mapped_port(host_port, CONTAINER_PORT.tcp())
                .with_startup_timeout(START_DEADLINE)
                .with_host_config_modifier(|host_config| {
                    // Publish on loopback only (testcontainers publishes on 0.0.0.0).
                    if let Some(bindings) = host_config.port_bindings.as_mut() {
                        for binding in bindings.values_mut().flatten().flatten() {
                            binding.host_ip = Some("127.0.0.1".to_owned());
                        }
                    }
                });
            if let Some(run) = run_id() {
                request = request.with_label(CONTAINER_RUN_LABEL, run);
            }
            let started = on_kit_runtime(async move { request.start().await }).await?;
            match started {
                Ok(container) => {
                    let id = container.id().to_owned();
                    let server = RedisServer {
                        mode: ServerMode::Container,
                        port: host_port,
                        bus_port: None,
                        state: AtomicU8::new(ServerState::Running.to_u8()),
                        inner: tokio::sync::Mutex::new(Backend::Container(ContainerBackend {
                            container: Some(Arc::new(container)),
                            id,
                            image: image.clone(),
                        })),
                        opts,
                    };
                    server.wait_ready(START_DEADLINE).await?;
                    return Ok(server);
                }
                Err(e) => {
                    // A failed start may leave a created container behind.
                    let _ = docker(&["rm", "-f", "-v", &name], DOCKER_TIMEOUT).await;
                    let message = e.to_string();
                    if is_port_conflict(&message) {
                        last_error = Some(Error::Container(message));
                        continue;
                    }
                    return Err(Error::Container(format!(
                        "starting {image} via testcontainers: {message}"
                    )));
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Config("no port attempts".to_owned())))
    }

    /// Polls PING until it answers PONG (not LOADING) or the deadline passes.
    async fn wait_ready(&self, deadline: Duration) -> Result<()> {
        let started = Instant::now();
        let auth = self.probe_auth();
        let addr = self.addr();
        let what = format!("redis ({}) on {addr}", self.mode);
        loop {
            if let Backend::Process(p) = &mut *self.inner.lock().await {
                let exited = p.process.as_mut().and_then(ServerProcess::try_exited);
                if let Some(status) = exited {
                    p.process = None;
                    self.set_state(ServerState::Stopped);
                    return Err(Error::Exited {
                        what,
                        status: status.to_string(),
                        log: log_tail(&p.log_path()),
                    });
                }
            }
            let last_error = match resp::ping(addr, &auth).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if started.elapsed() > deadline {
                let log = self.logs().await.unwrap_or_default();
                return Err(Error::NotReady {
                    what,
                    waited: started.elapsed(),
                    last_error: format!("{last_error}; log tail:\n{log}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub(crate) fn probe_auth(&self) -> ProbeAuth {
        match &self.opts.requirepass {
            Some(password) => ProbeAuth {
                user: None,
                password: Some(password.clone()),
            },
            None => ProbeAuth::default(),
        }
    }

    fn set_state(&self, state: ServerState) {
        self.state.store(state.to_u8(), Ordering::SeqCst);
    }

    /// The mode this server runs in.
    pub fn mode(&self) -> ServerMode {
        self.mode
    }

    /// The current lifecycle state.
    pub fn state(&self) -> ServerState {
        ServerState::from_u8(self.state.load(Ordering::SeqCst))
    }

    /// The persistence mode it was started with.
    pub fn persistence(&self) -> Persistence {
        self.opts.persistence
    }

    /// `127.0.0.1:<port>` (the host port, also in container mode). It stays the same
    /// across `restart()`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// The TCP port (see [`addr`](Self::addr)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port (cluster nodes only).
    pub fn cluster_bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// `redis://127.0.0.1:<port>/`, with the `requirepass` password when one is set.
    pub fn url(&self) -> String {
        self.url_via(self.addr())
    }

    /// The URL for another address (e.g. a [`crate::proxy::FaultProxy`] in front of
    /// this server), with the same credentials as [`url`](Self::url).
    pub fn url_via(&self, addr: SocketAddr) -> String {
        match &self.opts.requirepass {
            Some(password) => redis_url(addr, None, Some(password)),
            None => redis_url(addr, None, None),
        }
    }

    /// The URL without any credentials (to check that authentication is required).
    pub fn url_without_auth(&self) -> String {
        redis_url(self.addr(), None, None)
    }

    /// The URL authenticating as `user` with `password`.
    pub fn url_for_user(&self, user: &str, password: &str) -> String {
        redis_url(self.addr(), Some(user), Some(password))
    }

    /// The URL of the ACL user configured with [`RedisServerBuilder::acl_user`].
    pub fn acl_user_url(&self) -> Option<String> {
        self.opts
            .acl_user
            .as_ref()
            .map(|u| self.url_for_user(&u.name, &u.password))
    }

    /// A redis-rs client for [`url`](Self::url).
    pub fn client(&self) -> Result<redis::Client> {
        Ok(redis::Client::open(self.url())?)
    }

    /// A new multiplexed connection (response timeout 10 s, so a paused server
    /// makes calls fail instead of hanging forever).
    pub async fn connection(&self) -> Result<redis::aio::MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(10)));
        Ok(self
            .client()?
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// The process id (process mode, while running).
    pub async fn pid(&self) -> Option<u32> {
        match &*self.inner.lock().await {
            Backend::Process(p) => p.process.as_ref().map(ServerProcess::pid),
            Backend::Container(_) => None,
        }
    }

    /// The container id (container mode).
    pub async fn container_id(&self) -> Option<String> {
        match &*self.inner.lock().await {
            Backend::Process(_) => None,
            Backend::Container(c) => Some(c.id.clone()),
        }
    }

    /// The server's data directory on the host (process mode).
    pub async fn data_dir(&self) -> Option<PathBuf> {
        match &*self.inner.lock().await {
            Backend::Process(p) => Some(p.dir.path().to_path_buf()),
            Backend::Container(_) => None,
        }
    }

    /// The tail of the server's log (its stdout/stderr), for diagnostics.
    pub async fn logs(&self) -> Result<String> {
        let id = match &*self.inner.lock().await {
            Backend::Process(p) => return Ok(log_tail(&p.log_path())),
            Backend::Container(c) => c.id.clone(),
        };
        let out = crate::process::run_with_timeout_async(
            {
                let mut cmd = Command::new(crate::mode::docker_program());
                cmd.args(["logs", "--tail", "60", &id]);
                cmd
            },
            DOCKER_TIMEOUT,
        )
        .await?;
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// Freezes the server: SIGSTOP (process) or `docker pause` (container). It
    /// accepts no work until [`resume`](Self::resume). No-op when already paused.
    pub async fn pause(&self) -> Result<()> {
        let mut backend = self.inner.lock().await;
        match self.state() {
            ServerState::Paused => return Ok(()),
            ServerState::Stopped => {
                return Err(Error::InvalidState(
                    "pause() on a stopped server".to_owned(),
                ));
            }
            ServerState::Running => {}
        }
        match &mut *backend {
            Backend::Process(p) => running(p)?.pause()?,
            Backend::Container(c) => {
                let container = container(c)?;
                on_kit_runtime(async move { container.pause().await })
                    .await?
                    .map_err(|e| Error::Container(format!("docker pause: {e}")))?;
            }
        }
        self.set_state(ServerState::Paused);
        Ok(())
    }

    /// Undoes [`pause`](Self::pause): SIGCONT or `docker unpause`. No-op when running.
    pub async fn resume(&self) -> Result<()> {
        let mut backend = self.inner.lock().await;
        match self.state() {
            ServerState::Running => return Ok(()),
            ServerState::Stopped => {
                return Err(Error::InvalidState(
                    "resume() on a stopped server".to_owned(),
                ));
            }
            ServerState::Paused => {}
        }
        resume_backend(&mut backend).await?;
        self.set_state(ServerState::Running);
        Ok(())
    }

    /// Kills the server abruptly (SIGKILL, also in container mode: `docker kill -s
    /// KILL`). Unsynced data is lost. [`restart`](Self::restart) brings it back.
    pub async fn kill(&self) -> Result<()> {
        let mut backend = self.inner.lock().await;
        if self.state() == ServerState::Stopped {
            return Ok(());
        }
        match &mut *backend {
            Backend::Process(p) => {
                if let Some(mut process) = p.process.take() {
                    process.kill();
                }
            }
            Backend::Container(_) => {
                if self.state() == ServerState::Paused {
                    // Docker refuses to kill a paused container.
                    resume_backend(&mut backend).await?;
                }
                let Backend::Container(c) = &mut *backend else {
                    unreachable!()
                };
                docker(&["kill", "-s", "KILL", &c.id], DOCKER_TIMEOUT).await?;
            }
        }
        self.set_state(ServerState::Stopped);
        Ok(())
    }

    /// Stops the server gracefully (SIGTERM / `docker stop`; a paused server is
    /// resumed first). With AOF, everything written so far is kept.
    pub async fn stop(&self) -> Result<()> {
        let mut backend = self.inner.lock().await;
        if self.state() == ServerState::Stopped {
            return Ok(());
        }
        match &mut *backend {
            Backend::Process(p) => {
                if let Some(mut process) = p.process.take() {
                    process.terminate("TERM", STOP_GRACE).await?;
                }
            }
            Backend::Container(_) => {
                if self.state() == ServerState::Paused {
                    resume_backend(&mut backend).await?;
                }
                let Backend::Container(c) = &mut *backend else {
                    unreachable!()
                };
                let container = container(c)?;
                let grace = STOP_GRACE.as_secs() as i32;
                on_kit_runtime(async move { container.stop_with_timeout(Some(grace)).await })
                    .await?
                    .map_err(|e| Error::Container(format!("docker stop: {e}")))?;
            }
        }
        self.set_state(ServerState::Stopped);
        Ok(())
    }

    /// Restarts the server on the same port and waits until it answers again
    /// (after loading its AOF, if any). A running or paused server is first stopped
    /// gracefully ([`stop`](Self::stop)); call [`kill`](Self::kill) first to
    /// simulate a crash. Keys survive with AOF persistence and are lost without it.
    pub async fn restart(&self) -> Result<()> {
        if self.state() != ServerState::Stopped {
            self.stop().await?;
        }
        {
            let mut backend = self.inner.lock().await;
            match &mut *backend {
                Backend::Process(p) => p.spawn()?,
                Backend::Container(c) => {
                    let container = container(c)?;
                    on_kit_runtime(async move { container.start().await })
                        .await?
                        .map_err(|e| Error::Container(format!("docker start: {e}")))?;
                }
            }
            self.set_state(ServerState::Running);
        }
        self.wait_ready(RESTART_DEADLINE).await
    }

    /// The image (container mode).
    pub async fn image(&self) -> Option<String> {
        match &*self.inner.lock().await {
            Backend::Process(_) => None,
            Backend::Container(c) => Some(c.image.clone()),
        }
    }
}

fn running(p: &mut ProcessBackend) -> Result<&mut ServerProcess> {
    p.process
        .as_mut()
        .ok_or_else(|| Error::InvalidState("the server process is not running".to_owned()))
}

fn container(c: &ContainerBackend) -> Result<Arc<ContainerAsync<GenericImage>>> {
    c.container
        .clone()
        .ok_or_else(|| Error::InvalidState("the container is gone".to_owned()))
}

async fn resume_backend(backend: &mut Backend) -> Result<()> {
    match backend {
        Backend::Process(p) => running(p)?.resume(),
        Backend::Container(c) => {
            let container = container(c)?;
            on_kit_runtime(async move { container.unpause().await })
                .await?
                .map_err(|e| Error::Container(format!("docker unpause: {e}")))
        }
    }
}

fn is_port_conflict(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("address already in use") || text.contains("port is already allocated")
}

/// Splits `name[:tag]` (the tag is after the last `:` that follows the last `/`).
fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_owned(),
            image[slash + i + 1..].to_owned(),
        ),
        None => (image.to_owned(), "latest".to_owned()),
    }
}

/// Builds the `redis-server` arguments (used for both modes).
fn redis_args(
    opts: &RedisOptions,
    port: u16,
    bus_port: Option<u16>,
    dir: &str,
    bind: &str,
) -> Result<Vec<String>> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        bind,
        "--protected-mode",
        "no",
        "--dir",
        dir,
        "--daemonize",
        "no",
        "--logfile",
        "",
        "--save",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    match opts.persistence {
        Persistence::None => push(&["--appendonly", "no"]),
        Persistence::AofEverySec => push(&["--appendonly", "yes", "--appendfsync", "everysec"]),
        Persistence::AofAlways => push(&["--appendonly", "yes", "--appendfsync", "always"]),
    }
    if let Some(bytes) = &opts.maxmemory {
        push(&["--maxmemory", bytes]);
    }
    if let Some(policy) = &opts.maxmemory_policy {
        push(&["--maxmemory-policy", policy]);
    }
    if let Some(password) = &opts.requirepass {
        push(&["--requirepass", password]);
    }
    if let Some(user) = &opts.acl_user {
        let password = format!(">{}", user.password);
        push(&["--user", &user.name, "on", &password, "~*", "&*", "+@all"]);
    }
    if let Some(bus) = bus_port {
        push(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus.to_string(),
            "--cluster-node-timeout",
            "5000",
        ]);
    }
    for entry in &opts.extra {
        let tokens = match entry {
            ConfigEntry::Pair(name, value) => vec![name.clone(), value.clone()],
            ConfigEntry::Line(line) => split_config_line(line)?,
        };
        let Some((name, values)) = tokens.split_first() else {
            continue;
        };
        let name = name.trim_start_matches('-');
        if name.is_empty() || values.is_empty() {
            return Err(Error::Config(format!(
                "config line {entry:?} needs a directive and a value"
            )));
        }
        args.push(format!("--{name}"));
        args.extend(values.iter().cloned());
    }
    Ok(args)
}

/// Splits a `redis.conf` line into tokens (whitespace separated; `"..."` with
/// backslash escapes and `'...'` group).
fn split_config_line(line: &str) -> Result<Vec<String>> {
    let mut tokens = Vec::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut token = String::new();
        if c == '"' || c == '\'' {
            let quote = c;
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' if quote == '"' => match chars.next() {
                        Some('n') => token.push('\n'),
                        Some('t') => token.push('\t'),
                        Some(other) => token.push(other),
                        None => break,
                    },
                    c if c == quote => {
                        closed = true;
                        break;
                    }
                    c => token.push(c),
                }
            }
            if !closed {
                return Err(Error::Config(format!("unbalanced quotes in {line:?}")));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                token.push(c);
                chars.next();
            }
        }
        tokens.push(token);
    }
    Ok(tokens)
}

/// `redis://[user][:password@]addr/` with percent-encoded credentials.
pub(crate) fn redis_url(addr: SocketAddr, user: Option<&str>, password: Option<&str>) -> String {
    let creds = match (user, password) {
        (None, None) => String::new(),
        (Some(u), None) => format!("{}@", encode(u)),
        (None, Some(p)) => format!(":{}@", encode(p)),
        (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
    };
    format!("redis://{creds}{addr}/")
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_config_lines_like_redis_conf() {
        assert_eq!(
            split_config_line(r#"user bob on ">p w" ~* '+@all'"#).unwrap(),
            ["user", "bob", "on", ">p w", "~*", "+@all"]
        );
        assert_eq!(split_config_line(r#"save """#).unwrap(), ["save", ""]);
        assert!(split_config_line(r#"save "x"#).is_err());
    }

    #[test]
    fn splits_image_references() {
        assert_eq!(split_image("redis:7"), ("redis".into(), "7".into()));
        assert_eq!(
            split_image("localhost:5000/redlease-test/redis:7.0.15"),
            ("localhost:5000/redlease-test/redis".into(), "7.0.15".into())
        );
        assert_eq!(split_image("redis"), ("redis".into(), "latest".into()));
    }

    #[test]
    fn urls_encode_credentials() {
        let addr = loopback(7000);
        assert_eq!(redis_url(addr, None, None), "redis://127.0.0.1:7000/");
        assert_eq!(
            redis_url(addr, Some("al ice"), Some("p@ss")),
            "redis://al%20ice:p%40ss@127.0.0.1:7000/"
        );
        assert_eq!(
            redis_url(addr, None, Some("pw")),
            "redis://:pw@127.0.0.1:7000/"
        );
    }

    #[test]
    fn args_follow_persistence_and_options() {
        let opts = RedisServerBuilder::default()
            .persistence(Persistence::AofAlways)
            .requirepass("pw")
            .config_line("maxmemory-samples 7")
            .opts;
        let args = redis_args(&opts, 1234, None, "/d", "127.0.0.1").unwrap();
        let joined = args.join(" ");
        assert!(
            joined.contains("--appendonly yes --appendfsync always"),
            "{joined}"
        );
        assert!(joined.contains("--requirepass pw"), "{joined}");
        assert!(joined.contains("--maxmemory-samples 7"), "{joined}");
        assert!(joined.contains("--port 1234"), "{joined}");
    }
}
