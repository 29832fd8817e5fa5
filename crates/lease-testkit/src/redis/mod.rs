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

// One public facade over two backends: `process` (a `redis-server` child), `container`
// (testcontainers), and `config` (options, arguments and URLs shared by both).
mod config;
mod container;
mod process;

pub use config::{Persistence, RedisServerBuilder};
pub(crate) use config::{RedisOptions, redis_url, rediss_url};
pub use container::{CONTAINER_LABEL, CONTAINER_RUN_LABEL};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::docker::{docker, on_kit_runtime};
use crate::mode::{ServerMode, selection};
use crate::poll::{Look, poll_every, with_detail};
use crate::process::{ServerProcess, log_tail, loopback};
use crate::resp::{self, ProbeAuth};
use crate::{Error, Result};

use container::{ContainerBackend, container};
use process::{ProcessBackend, running};

/// How long `start()` waits for a new server to answer PING.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long `restart()` waits (includes loading the AOF).
const RESTART_DEADLINE: Duration = Duration::from_secs(120);
/// Grace period for `stop()` before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How many times a start is retried when the chosen free port was taken meanwhile.
const PORT_ATTEMPTS: usize = 8;
/// Docker CLI timeout.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a starting server is pinged.
const READY_POLL: Duration = Duration::from_millis(25);

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

/// A Redis server owned by the test. Dropping it kills the process or removes the
/// container (also when paused, also while a test panics) and deletes its files.
#[derive(Debug)]
pub struct RedisServer {
    opts: RedisOptions,
    mode: ServerMode,
    port: u16,
    tls_port: Option<u16>,
    bus_port: Option<u16>,
    state: AtomicU8,
    inner: tokio::sync::Mutex<Backend>,
}

#[derive(Debug)]
enum Backend {
    Process(ProcessBackend),
    Container(ContainerBackend),
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
        if opts.tls.is_some() {
            static ANNOUNCED: std::sync::Once = std::sync::Once::new();
            ANNOUNCED.call_once(|| {
                use std::io::Write;
                // Not one of `mode`'s announcements: a TLS server never proves a mode.
                let _ = writeln!(
                    std::io::stderr(),
                    "lease-testkit: Redis TLS servers run as redis-server processes \
                     (TLS has no container mode)"
                );
            });
        }
        let mode = match opts.mode {
            Some(mode) => mode,
            // The container image carries no certificates: TLS servers are processes.
            None if opts.cluster || opts.tls.is_some() => ServerMode::Process,
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
                if opts.tls.is_some() {
                    return Err(Error::Config(
                        "TLS servers run as processes only".to_owned(),
                    ));
                }
                let image = selection()?.image.clone();
                crate::reaper::reap_stale_containers().await;
                Self::start_container(opts, image).await
            }
        }
    }

    fn into_backend(self) -> Backend {
        self.inner.into_inner()
    }
    /// Polls PING until it answers PONG (not LOADING) or the deadline passes.
    async fn wait_ready(&self, deadline: Duration) -> Result<()> {
        let auth = &self.probe_auth();
        let addr = self.addr();
        let what = &format!("redis ({}) on {addr}", self.mode);
        let ready = poll_every(READY_POLL, deadline, what.clone(), || async move {
            if let Backend::Process(p) = &mut *self.inner.lock().await {
                let exited = p.process.as_mut().and_then(ServerProcess::try_exited);
                if let Some(status) = exited {
                    p.process = None;
                    self.set_state(ServerState::Stopped);
                    return Look::Fail(Error::Exited {
                        what: what.clone(),
                        status: status.to_string(),
                        log: log_tail(&p.log_path()),
                    });
                }
            }
            match resp::ping(addr, auth).await {
                Ok(()) => Look::Done(()),
                Err(e) => Look::NotYet(e),
            }
        })
        .await;
        match ready {
            Err(e @ Error::NotReady { .. }) => {
                let log = self.logs().await.unwrap_or_default();
                Err(with_detail(e, || format!("; log tail:\n{log}")))
            }
            other => other,
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

    /// The TLS port (servers built with [`RedisServerBuilder::tls`] only).
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `127.0.0.1:<tls port>` (servers built with [`RedisServerBuilder::tls`] only).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_port.map(loopback)
    }

    /// `rediss://127.0.0.1:<tls port>/`, with the `requirepass` password when one is set
    /// (servers built with [`RedisServerBuilder::tls`] only). The host is the IP address:
    /// give the server certificate `127.0.0.1` among its names.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_url_for_host("127.0.0.1")
    }

    /// [`tls_url`](Self::tls_url) with another host name for the same port (`localhost`, or
    /// a name the certificate does not carry, to test name checks).
    pub fn tls_url_for_host(&self, host: &str) -> Option<String> {
        let port = self.tls_port?;
        Some(rediss_url(host, port, self.opts.requirepass.as_deref()))
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

/// A stored lock value without lease-redis's waiter mark (`owner\0\0w` → `owner`,
/// `owner\0meta\0w` → `owner\0meta`; see `lease-redis/scripts/prelude.lua`): what the value
/// says about its holder, for tests that check the holder and not the notices.
///
/// # Panics
///
/// On a flags part other than the mark (so that nothing else is ever hidden).
pub fn without_waiter_mark(v: String) -> String {
    let Some(first) = v.find('\0') else {
        return v;
    };
    let Some(second) = v[first + 1..].find('\0').map(|i| first + 1 + i) else {
        return v;
    };
    assert_eq!(
        &v[second..],
        "\0w",
        "a flags part other than the waiter mark: {v:?}"
    );
    let mut v = v;
    v.truncate(second);
    if v.len() == first + 1 {
        // No metadata: the unmarked value is the owner alone.
        v.truncate(first);
    }
    v
}

#[cfg(test)]
mod mark_tests {
    use super::without_waiter_mark as w;

    #[test]
    fn the_waiter_mark_is_stripped_and_nothing_else() {
        assert_eq!(w("a".into()), "a");
        assert_eq!(w("a\0m".into()), "a\0m");
        assert_eq!(w("a\0\0w".into()), "a");
        assert_eq!(w("a\0m\0w".into()), "a\0m");
        assert!(std::panic::catch_unwind(|| w("a\0m\0x".into())).is_err());
    }
}
