//! A TCP fault proxy between a client and a server, switchable at run time.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_testkit::proxy::{FaultProxy, Mode};
//! use lease_testkit::redis::RedisServer;
//!
//! # async fn demo() -> lease_testkit::Result<()> {
//! let server = RedisServer::start().await?;
//! let proxy = FaultProxy::start(server.addr()).await?;
//! let client = redis::Client::open(server.url_via(proxy.addr()))?;
//! proxy.set_mode(Mode::Latency(Duration::from_millis(50))); // slow node
//! proxy.set_mode(Mode::Blackhole); // partition: nothing is forwarded or answered
//! proxy.set_mode(Mode::Pass); // healed
//! proxy.reset_all().await; // every open connection gets a TCP RST
//! # Ok(())
//! # }
//! ```
//!
//! Semantics:
//! * [`Mode::Pass`] forwards bytes both ways as they arrive.
//! * [`Mode::Latency`] delays every chunk read, in each direction, by the duration
//!   before writing it on.
//! * [`Mode::Blackhole`] accepts new connections but neither connects them upstream
//!   nor answers; on existing connections nothing more is forwarded in either
//!   direction (data stays queued, as in a partition where TCP keeps
//!   retransmitting). Switching back to `Pass` or `Latency` resumes forwarding, for
//!   held and new connections alike.
//! * [`Mode::DropReplies`] forwards client → server as in `Pass`, and holds server → client
//!   like `Blackhole`: requests are applied, replies are not seen until the mode changes.
//! * [`FaultProxy::reset_all`] closes every open connection on both sides with an
//!   RST (`SO_LINGER` 0), and returns once they are all closed.
//! * Dropping the proxy stops listening and closes every connection.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::{Error, Result};

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward everything.
    #[default]
    Pass,
    /// Forward everything, delaying each chunk by this much in each direction.
    Latency(Duration),
    /// Accept, but never forward or answer (new and existing connections).
    Blackhole,
    /// Forward requests to the server, but hold back every reply (a partition that drops only
    /// the server's packets, as an iptables rule on the reply path does): the server applies
    /// what it gets, the client hears nothing. Held replies are delivered when the mode
    /// changes back, as TCP retransmission would.
    DropReplies,
}

#[derive(Debug, Default)]
struct Registry {
    /// Ids of the connections currently open.
    open: Mutex<HashSet<u64>>,
    /// Notified whenever a connection closes.
    closed: Notify,
}

/// A running proxy; see the [module documentation](self).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    reset: watch::Sender<u64>,
    registry: Arc<Registry>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:<free port>` and forwards to `upstream`, in
    /// [`Mode::Pass`]. Its tasks run on the current tokio runtime.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::io("binding the fault proxy on 127.0.0.1", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the fault proxy address", e))?;
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let (reset, reset_rx) = watch::channel(0u64);
        let registry = Arc::new(Registry::default());
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            mode_rx,
            reset_rx,
            registry.clone(),
        ));
        Ok(FaultProxy {
            addr,
            upstream,
            mode,
            reset,
            registry,
            accept_task,
        })
    }

    /// The proxy's listening address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `redis://127.0.0.1:<port>/` (no credentials; for a password-protected server
    /// use [`crate::redis::RedisServer::url_via`]).
    pub fn url(&self) -> String {
        crate::redis::redis_url(self.addr, None, None)
    }

    /// Switches the mode; takes effect for the next chunk of every connection.
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// How many client connections are currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.registry.open.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// Resets (TCP RST on both sides) every connection open now, and waits until
    /// they are all closed. Later connections are unaffected.
    pub async fn reset_all(&self) {
        let targets: HashSet<u64> = self
            .registry
            .open
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        self.reset.send_modify(|generation| *generation += 1);
        loop {
            let closed = self.registry.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let remaining = self
                .registry
                .open
                .lock()
                .map(|s| s.intersection(&targets).count())
                .unwrap_or(0);
            if remaining == 0 {
                return;
            }
            closed.await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops the listener and its JoinSet, which aborts
        // every connection task (closing both sockets).
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    reset: watch::Receiver<u64>,
    registry: Arc<Registry>,
) {
    let mut connections = JoinSet::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let id = next_id;
                next_id += 1;
                if let Ok(mut open) = registry.open.lock() {
                    open.insert(id);
                }
                let generation = *reset.borrow();
                let guard = ConnGuard { id, registry: registry.clone() };
                connections.spawn(handle(
                    client,
                    upstream,
                    mode.clone(),
                    reset.clone(),
                    generation,
                    guard,
                ));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Unregisters a connection when its task ends (or is aborted).
struct ConnGuard {
    id: u64,
    registry: Arc<Registry>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Ok(mut open) = self.registry.open.lock() {
            open.remove(&self.id);
        }
        self.registry.closed.notify_waiters();
    }
}

async fn wait_reset(reset: &mut watch::Receiver<u64>, generation: u64) {
    if reset.wait_for(|g| *g != generation).await.is_err() {
        // The proxy is gone; the task is about to be aborted anyway.
        std::future::pending::<()>().await;
    }
}

async fn wait_not_blackhole(mode: &mut watch::Receiver<Mode>) -> bool {
    mode.wait_for(|m| *m != Mode::Blackhole).await.is_ok()
}

/// Which direction a pump copies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// Whether `mode` holds traffic going `dir`.
fn holds(mode: Mode, dir: Direction) -> bool {
    match mode {
        Mode::Blackhole => true,
        Mode::DropReplies => dir == Direction::ToClient,
        Mode::Pass | Mode::Latency(_) => false,
    }
}

fn rst(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn handle(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    mut reset: watch::Receiver<u64>,
    generation: u64,
    guard: ConnGuard,
) {
    let _ = client.set_nodelay(true);
    // In blackhole mode a new connection is held, never connected upstream.
    let connected = tokio::select! {
        biased;
        _ = wait_reset(&mut reset, generation) => None,
        upstream = async {
            if !wait_not_blackhole(&mut mode).await {
                return None;
            }
            TcpStream::connect(upstream).await.ok()
        } => Some(upstream),
    };
    let mut server = match connected {
        Some(Some(server)) => server,
        // Reset, or the upstream refused: close the client side with an RST.
        _ => {
            rst(&client);
            drop(client);
            drop(guard);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let was_reset = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let to_server = pump(
            &mut client_read,
            &mut server_write,
            mode.clone(),
            Direction::ToServer,
        );
        let to_client = pump(
            &mut server_read,
            &mut client_write,
            mode.clone(),
            Direction::ToClient,
        );
        tokio::select! {
            biased;
            _ = wait_reset(&mut reset, generation) => true,
            _ = async { tokio::join!(to_server, to_client) } => false,
        }
    };
    if was_reset {
        rst(&client);
        rst(&server);
    }
    drop(client);
    drop(server);
    drop(guard);
}

/// Copies one direction, honouring the mode for every chunk.
async fn pump<R, W>(reader: &mut R, writer: &mut W, mut mode: watch::Receiver<Mode>, dir: Direction)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = writer.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let mut delayed = false;
        loop {
            let current = *mode.borrow_and_update();
            match current {
                m if holds(m, dir) => {
                    if mode.wait_for(|m| !holds(*m, dir)).await.is_err() {
                        return;
                    }
                }
                Mode::Latency(delay) if !delayed => {
                    tokio::time::sleep(delay).await;
                    delayed = true;
                }
                _ => break,
            }
        }
        if writer.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
