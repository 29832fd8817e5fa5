//! Release notices: the release script publishes, one subscriber connection per backend wakes
//! the waiters.
//!
//! - **Publishing.** `release.lua` publishes the owner on the lease's channel
//!   ([`notice_channel`]: `redlease:released:<first key>`) when a value it deleted carries the
//!   waiter mark (an attempt found the lock held and marked the holder's value; an
//!   uncontended release publishes nothing; see `docs/handover.md`), with
//!   `PUBLISH` on a standalone server and `SPUBLISH` on Redis Cluster (sharded pub/sub: the
//!   channel hashes to the key's slot, so the notice stays on the node that owns the key).
//!   It is part of the release script: no extra round trip. It is on by default for every
//!   [`RedisBackend`](crate::RedisBackend) (it wakes *other* processes' waiters), and is
//!   called with `redis.pcall`: a server that refuses it (an ACL user without `&redlease:*`)
//!   costs the waiters their notice, never the release.
//! - **Subscribing.** [`ReleaseNotices`] owns one pub/sub connection, opened on first need and
//!   shared by every backend it is given to
//!   ([`RedisBackend::with_release_notices`](crate::RedisBackend::with_release_notices)) and
//!   every waiter of those backends: one subscription per channel, whatever the number of
//!   waiters. Each channel has a [`ReleaseHub`], which holds the waking rules (one contender
//!   per notice, every observer; see [`lease_core::notify`]).
//! - **Loss.** A dropped subscriber connection (server restart, `CLIENT KILL`, a ping that
//!   gets no answer within [`PING_TIMEOUT`]) makes every hub not live, so drivers fall back to
//!   polling; the task reconnects with a backoff, subscribes again and, once confirmed, wakes
//!   every waiter once to re-check (notices published meanwhile were lost). An attempt never
//!   waits for the subscriber.
//!
//! - **Redis Cluster** (feature `cluster`). `ReleaseNotices::cluster` subscribes with
//!   `SSUBSCRIBE` on a RESP3 cluster connection: each channel on the node that owns its slot.
//!
//! - **Bounds.** The subscriber's memory follows the channels that have waiters, not every
//!   channel ever waited on: a hub's entry goes with its last watch; the set of channels the
//!   server refused (asked again only after the channel idles and is wanted anew) and the set
//!   pending a connection drop the channels that no longer have a hub whenever they pass
//!   [`MAX_TRACKED_CHANNELS`]; and the task's command queue holds at most
//!   [`COMMAND_QUEUE_CAPACITY`] commands: past that, commands are coalesced into one
//!   resynchronisation of every channel (a waiter's activation is never lost, only merged).
//!
//! Not covered yet: servers managed by Sentinel (`SentinelConnection` backends have no
//! subscriber; their waiters poll).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lease_core::notify::{HubLink, NoticeMark, ReleaseHub, ReleaseWatch, WatchRole};
use tokio::sync::mpsc;

use crate::slot;
use crate::topology::Topology;

mod conn;
mod subscriber;

use conn::Source;
use subscriber::Subscriber;

/// The prefix of every notice channel.
pub const CHANNEL_PREFIX: &str = "redlease:released:";

/// How often an idle subscriber connection is pinged, to notice a silent loss.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);

/// How long a ping, a subscription or a connection attempt may take before the subscriber
/// connection is given up and opened again.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest wait between two reconnection attempts (it starts at 50 ms and doubles).
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// How many commands (a channel to reconcile) the subscriber task's queue holds. The task may
/// spend up to [`PING_TIMEOUT`] on one channel when the server is slow; commands that find the
/// queue full are merged into one resynchronisation of every channel instead of queuing.
pub const COMMAND_QUEUE_CAPACITY: usize = 1024;

/// Past this many channels, the subscriber's refused and pending sets drop the channels that
/// no longer have a hub (a waiter): they stay bounded by the channels waited on now.
pub const MAX_TRACKED_CHANNELS: usize = 1024;

/// The channel on which the release of a lease whose first key is `key` is published:
/// `redlease:released:<key>`. On Redis Cluster a key without a hash tag is its own channel
/// (a prefix would move it to another slot; channels and keys are separate namespaces).
///
/// ```
/// use lease_redis::notify::notice_channel;
/// use lease_redis::Topology;
/// assert_eq!(notice_channel("{jobs}:leader", Topology::Cluster), "redlease:released:{jobs}:leader");
/// assert_eq!(notice_channel("report", Topology::Standalone), "redlease:released:report");
/// assert_eq!(notice_channel("report", Topology::Cluster), "report");
/// ```
pub fn notice_channel(key: &str, topology: Topology) -> String {
    let mut s = String::with_capacity(CHANNEL_PREFIX.len() + key.len());
    push_channel(&mut s, key, topology);
    s
}

/// Appends [`notice_channel`]`(key, topology)` to `out`.
pub(crate) fn push_channel(out: &mut String, key: &str, topology: Topology) {
    if topology == Topology::Cluster && slot::hash_tag(key.as_bytes()).is_none() {
        out.push_str(key);
    } else {
        out.push_str(CHANNEL_PREFIX);
        out.push_str(key);
    }
}

/// Counters of a [`ReleaseNotices`] subscriber, for tests and operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoticeStats {
    /// Subscriber connections opened (the first, then every reconnection).
    pub connections: u64,
    /// Notices received on any channel.
    pub notices: u64,
    /// Channels subscribed now.
    pub subscribed: usize,
    /// Channels whose subscription the server refused (an ACL without them) and that are
    /// still waited on; their waiters poll, and the server is not asked again while they are
    /// (a channel that idles leaves this set, bounded by the channels waited on now).
    pub refused: usize,
    /// Subscriptions the server refused, in total.
    pub refusals: u64,
}

#[derive(Default)]
struct Shared {
    hubs: Mutex<HashMap<String, Weak<ReleaseHub>>>,
    stats: Mutex<NoticeStats>,
    /// What the subscriber task needs, until the first activation starts it.
    start: Mutex<Option<Unstarted>>,
    /// A command found the queue full: the task resynchronises every channel.
    overflow: std::sync::atomic::AtomicBool,
    /// Notices received and hubs gone live, on any channel: what a [`NoticeMark`] counts.
    /// Bumped before the notice is routed (or the hub set live), so a watch registered after
    /// a mark sees every wake it missed as a moved count.
    moves: AtomicU64,
    /// Hubs that exist now (each has a watch): while there are none, a mark needs no lookup.
    hubs_alive: AtomicUsize,
}

/// The subscriber task's source and command channel, before it runs. (Not the task itself:
/// it holds the `Shared` this sits in, and a subscriber never started must not keep it alive.)
type Unstarted = (Source, mpsc::Receiver<String>);

/// Asks the subscriber task to reconcile `channel`; a full queue sets the overflow flag and
/// makes sure the task wakes to see it (an empty command, or the full queue's own).
fn command(shared: &Shared, commands: &mpsc::Sender<String>, channel: &str) {
    if let Err(mpsc::error::TrySendError::Full(_)) = commands.try_send(channel.to_owned()) {
        shared
            .overflow
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Full again: the queued commands wake the task after the flag is set.
        let _ = commands.try_send(String::new());
    }
}

fn lock_start(m: &Mutex<Option<Unstarted>>) -> MutexGuard<'_, Option<Unstarted>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn hubs(&self) -> MutexGuard<'_, HashMap<String, Weak<ReleaseHub>>> {
        self.hubs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, NoticeStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hub(&self, channel: &str) -> Option<Arc<ReleaseHub>> {
        self.hubs().get(channel).and_then(Weak::upgrade)
    }

    /// A wake is about to be delivered on some channel (a notice, or a hub going live).
    pub(crate) fn moved(&self) {
        self.moves.fetch_add(1, Ordering::SeqCst);
    }

    fn all_hubs(&self) -> Vec<(String, Arc<ReleaseHub>)> {
        let mut hubs = self.hubs();
        hubs.retain(|_, h| h.strong_count() > 0);
        hubs.iter()
            .filter_map(|(c, h)| h.upgrade().map(|h| (c.clone(), h)))
            .collect()
    }
}

/// One subscriber connection for release notices, shared by every backend and waiter it is
/// given to. Cheap to clone. See the [module docs](self).
///
/// Its task starts, on the tokio runtime of the first waiter that needs notices, when that
/// waiter activates its watch (so building one needs no runtime, and one that is never
/// needed costs no task and no connection); it ends when every clone and every watch on it
/// are gone.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use lease_redis::{RedisBackend, notify::ReleaseNotices};
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let backend = RedisBackend::new(client.get_multiplexed_async_connection().await?)
///     .with_release_notices(ReleaseNotices::new(client));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReleaseNotices {
    shared: Arc<Shared>,
    commands: mpsc::Sender<String>,
}

impl fmt::Debug for ReleaseNotices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseNotices")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl ReleaseNotices {
    /// A subscriber that opens its pub/sub connections with `client` (TLS and credentials
    /// as configured on it).
    pub fn new(client: redis::Client) -> ReleaseNotices {
        ReleaseNotices::spawn(Source::Standalone(Box::new(client)))
    }

    /// A subscriber on a Redis Cluster (Redis 7: sharded pub/sub): `SSUBSCRIBE` on a cluster
    /// connection built from `builder` (nodes, credentials and TLS as configured on it), with
    /// RESP3 and a push channel of its own, so each channel is subscribed on the node that
    /// owns its slot (redis-rs routes it, and subscribes again after reconnections and slot
    /// moves). Give it to a backend made with
    /// [`RedisBackend::cluster`](crate::RedisBackend::cluster).
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster(
        builder: redis::cluster::ClusterClientBuilder,
    ) -> Result<ReleaseNotices, redis::RedisError> {
        let (tx, pushes) = mpsc::unbounded_channel();
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        Ok(ReleaseNotices::spawn(Source::Cluster {
            client: Box::new(client),
            pushes,
        }))
    }

    fn spawn(source: Source) -> ReleaseNotices {
        let shared = Arc::new(Shared::default());
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE_CAPACITY);
        // Started by the first activation (a waiter that needs notices), on its runtime.
        *lock_start(&shared.start) = Some((source, rx));
        ReleaseNotices { shared, commands }
    }

    /// A watch on `channel` (see [`lease_core::notify`]).
    pub fn watch(&self, channel: &str, role: WatchRole) -> ReleaseWatch {
        let hub = {
            let mut hubs = self.shared.hubs();
            match hubs.get(channel).and_then(Weak::upgrade) {
                Some(hub) => hub,
                None => {
                    let hub = ReleaseHub::new(Link {
                        shared: Arc::clone(&self.shared),
                        channel: channel.to_owned(),
                        commands: self.commands.clone(),
                    });
                    self.shared.hubs_alive.fetch_add(1, Ordering::SeqCst);
                    hubs.insert(channel.to_owned(), Arc::downgrade(&hub));
                    hub
                }
            }
        };
        hub.watch(role)
    }

    /// A [`NoticeMark`] for `channel`, to take just before an attempt whose watch is
    /// registered only if the attempt finds the lease held (see
    /// [`LeaseBackend::notice_mark`](lease_core::LeaseBackend::notice_mark)): it counts every
    /// notice and every channel going live on this subscriber.
    pub fn mark(&self, channel: &str) -> NoticeMark {
        self.mark_with(|| channel.to_owned())
    }

    /// [`ReleaseNotices::mark`], building the channel only when some hub exists (an
    /// uncontended process has none: the mark is two atomic loads).
    pub(crate) fn mark_with(&self, channel: impl FnOnce() -> String) -> NoticeMark {
        let count = self.shared.moves.load(Ordering::SeqCst);
        let others_wait = self.shared.hubs_alive.load(Ordering::SeqCst) > 0
            && self
                .shared
                .hub(&channel())
                .is_some_and(|hub| hub.has_waiters());
        NoticeMark::new(count, others_wait)
    }

    /// The subscriber's counters.
    pub fn stats(&self) -> NoticeStats {
        *self.shared.stats()
    }

    /// Whether `channel` is subscribed and confirmed now.
    pub fn is_live(&self, channel: &str) -> bool {
        self.shared.hub(channel).is_some_and(|h| h.is_live())
    }

    /// Whether some watch of this process is registered on `channel` now (a waiter, a
    /// follower or an observer): a release of that lease is likely to find the waiter mark.
    pub fn has_watches(&self, channel: &str) -> bool {
        self.shared.hub(channel).is_some_and(|h| h.watches() > 0)
    }
}

/// Tells the subscriber task which channel to reconcile.
struct Link {
    shared: Arc<Shared>,
    channel: String,
    commands: mpsc::Sender<String>,
}

impl HubLink for Link {
    fn activate(&self) {
        // The task ends only when every sender is gone, and this link holds one.
        command(&self.shared, &self.commands, &self.channel);
        let mut start = lock_start(&self.shared.start);
        if start.is_some() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    if let Some((source, rx)) = start.take() {
                        rt.spawn(Subscriber::new(source, Arc::clone(&self.shared), rx).run());
                    }
                }
                Err(_) => {
                    tracing::warn!(
                        "release notices: activated outside a tokio runtime; waiters poll until a waiter on a runtime activates them"
                    );
                }
            }
        }
    }

    fn idle(&self) {
        command(&self.shared, &self.commands, &self.channel);
    }
}

impl Drop for Link {
    /// The hub is gone (its last watch dropped): forget its entry, unless a new hub took the
    /// channel meanwhile. Without this, every key ever locked would leave an entry behind.
    fn drop(&mut self) {
        self.shared.hubs_alive.fetch_sub(1, Ordering::SeqCst);
        let mut hubs = self.shared.hubs();
        if hubs
            .get(&self.channel)
            .is_some_and(|h| h.strong_count() == 0)
        {
            hubs.remove(&self.channel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_keep_the_key_slot() {
        for key in ["{jobs}:leader", "a{b}c", "x{}{y}"] {
            let ch = notice_channel(key, Topology::Cluster);
            assert_eq!(slot::key_slot(&ch), slot::key_slot(key), "{key} -> {ch}");
        }
        assert_eq!(notice_channel("a}b{c", Topology::Cluster), "a}b{c");
    }

    #[test]
    fn hubs_of_uncontended_keys_leave_nothing_behind() {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("url");
        let notices = ReleaseNotices::new(client);
        for i in 0..100 {
            drop(notices.watch(&format!("redlease:released:k{i}"), WatchRole::Contender));
        }
        let kept = notices.watch("redlease:released:kept", WatchRole::Contender);
        assert_eq!(notices.shared.hubs().len(), 1);
        drop(kept);
        assert!(notices.shared.hubs().is_empty());
    }

    #[test]
    fn a_full_command_queue_sets_the_overflow_flag() {
        let shared = Shared::default();
        let (tx, mut rx) = mpsc::channel(2);
        command(&shared, &tx, "a");
        command(&shared, &tx, "b");
        assert!(!shared.overflow.load(std::sync::atomic::Ordering::SeqCst));
        // Full: merged into a resynchronisation, the queue does not grow.
        for _ in 0..100 {
            command(&shared, &tx, "c");
        }
        assert!(shared.overflow.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(rx.try_recv().ok().as_deref(), Some("a"));
        assert_eq!(rx.try_recv().ok().as_deref(), Some("b"));
        assert!(rx.try_recv().is_err());
        // With room again, a full queue's wake-up (an empty command) gets in.
        command(&shared, &tx, "d");
        assert_eq!(rx.try_recv().ok().as_deref(), Some("d"));
    }

    #[test]
    fn building_needs_no_runtime_and_an_unused_subscriber_is_freed() {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("url");
        let notices = ReleaseNotices::new(client);
        let shared = Arc::downgrade(&notices.shared);
        let watch = notices.watch("redlease:released:k", WatchRole::Contender);
        // No runtime here: the task cannot start; the watch simply never goes live.
        watch.activate();
        assert!(!watch.is_live());
        drop(watch);
        drop(notices);
        assert!(
            shared.upgrade().is_none(),
            "nothing keeps the subscriber alive"
        );
    }
}
