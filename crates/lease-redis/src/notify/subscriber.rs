//! The subscriber task: connects when a channel is wanted, keeps each channel's subscription
//! in line with its hub, routes notices to the hubs, and on a lost connection makes every hub
//! not live, reconnects with a backoff and subscribes again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::conn::{Conn, Failed, Incoming, Source, next_incoming, ping_conn};
use super::{MAX_RECONNECT_DELAY, MAX_TRACKED_CHANNELS, PING_INTERVAL, Shared};

/// Why a connection's loop ended.
enum Ended {
    /// Every handle and watch is gone.
    Done,
    /// The connection failed; open another.
    Lost(String),
}

/// The subscriber task's state.
pub(super) struct Subscriber {
    source: Source,
    shared: Arc<Shared>,
    commands: mpsc::Receiver<String>,
    /// Channels to reconcile once connected.
    pending: HashSet<String>,
    /// Channels subscribed on the current connection.
    subscribed: HashSet<String>,
    /// Channels the server refused (never asked again).
    refused: HashSet<String>,
}

impl Subscriber {
    pub(super) fn new(
        source: Source,
        shared: Arc<Shared>,
        commands: mpsc::Receiver<String>,
    ) -> Subscriber {
        Subscriber {
            source,
            shared,
            commands,
            pending: HashSet::new(),
            subscribed: HashSet::new(),
            refused: HashSet::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut delay = Duration::from_millis(50);
        loop {
            // Connect only when some channel is wanted.
            if !self.wait_for_need().await {
                return;
            }
            match self.source.connect().await {
                Ok(conn) => {
                    self.shared.stats().connections += 1;
                    tracing::debug!("release notices: subscriber connected");
                    let ended = self.serve(conn).await;
                    self.lost();
                    match ended {
                        Ended::Done => return,
                        Ended::Lost(why) => {
                            tracing::warn!(reason = %why, "release notices: subscriber connection lost; waiters poll until it is back");
                            delay = Duration::from_millis(50);
                        }
                    }
                }
                Err(why) => {
                    tracing::warn!(reason = %why, retry_in = ?delay, "release notices: cannot open the subscriber connection; waiters poll");
                }
            }
            // Back off, still taking commands (they are reconciled once connected).
            let sleep = tokio::time::sleep(delay);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    cmd = self.commands.recv() => match cmd {
                        Some(channel) => self.add_pending(channel),
                        None => return,
                    },
                }
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
        }
    }

    /// Waits until some activated hub exists; `false` when every sender is gone.
    async fn wait_for_need(&mut self) -> bool {
        loop {
            if self.shared.all_hubs().iter().any(|(_, h)| h.is_activated()) {
                return true;
            }
            match self.commands.recv().await {
                Some(channel) => self.add_pending(channel),
                None => return false,
            }
        }
    }

    /// Serves one connection: subscribes what is wanted, routes notices, reconciles
    /// commands, pings when idle.
    async fn serve(&mut self, mut conn: Conn) -> Ended {
        self.subscribed.clear();
        // Everything is reconciled below: an earlier overflow is covered.
        self.shared
            .overflow
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // Everything activated now, whatever the pending set says.
        let wanted: HashSet<String> = self
            .shared
            .all_hubs()
            .into_iter()
            .filter(|(_, h)| h.is_activated())
            .map(|(c, _)| c)
            .chain(self.pending.drain())
            .filter(|c| !c.is_empty())
            .collect();
        for channel in wanted {
            if let Err(e) = self.reconcile(&mut conn, &channel).await {
                return Ended::Lost(e);
            }
        }
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.reset();
        loop {
            let incoming = tokio::select! {
                incoming = next_incoming(&mut conn, &mut self.source) => incoming,
                cmd = self.commands.recv() => match cmd {
                    Some(channel) => {
                        if !channel.is_empty()
                            && let Err(e) = self.reconcile(&mut conn, &channel).await
                        {
                            return Ended::Lost(e);
                        }
                        if let Err(e) = self.resync_after_overflow(&mut conn).await {
                            return Ended::Lost(e);
                        }
                        continue;
                    }
                    None => return Ended::Done,
                },
                _ = ping.tick() => {
                    if let Err(e) = ping_conn(&mut conn).await {
                        return Ended::Lost(e);
                    }
                    continue;
                }
            };
            ping.reset();
            match incoming {
                Incoming::Notice(channel) => self.route(&channel),
                Incoming::Confirmed(channel) => {
                    if self.subscribed.contains(&channel)
                        && let Some(hub) = self.shared.hub(&channel)
                    {
                        self.shared.moved();
                        hub.set_live(true);
                    }
                }
                Incoming::Disconnected => {
                    // Some node's connection dropped: notices may be lost until its
                    // subscriptions are back. Everything re-checks once they are.
                    for (_, hub) in self.shared.all_hubs() {
                        hub.set_live(false);
                    }
                    let channels: Vec<String> = self.subscribed.drain().collect();
                    for channel in channels {
                        if let Err(e) = self.reconcile(&mut conn, &channel).await {
                            return Ended::Lost(e);
                        }
                    }
                }
                Incoming::Other => {}
                Incoming::Closed => {
                    return Ended::Lost("the server closed the connection".into());
                }
            }
        }
    }

    /// Brings one channel's subscription in line with its hub: subscribed while activated.
    async fn reconcile(&mut self, conn: &mut Conn, channel: &str) -> Result<(), String> {
        let hub = self.shared.hub(channel).filter(|h| h.is_activated());
        match hub {
            Some(hub) => {
                if self.refused.contains(channel) {
                    return Ok(());
                }
                if !self.subscribed.contains(channel) {
                    match conn.subscribe(channel).await {
                        Ok(()) => {}
                        Err(Failed::Refused(why)) => {
                            // Permanent (an ACL without the channel or the command): not
                            // retried; this channel's waiters poll.
                            tracing::warn!(channel, reason = %why, "release notices: the server refuses the subscription; waiters poll");
                            self.refused.insert(channel.to_owned());
                            if self.refused.len() > MAX_TRACKED_CHANNELS {
                                let shared = &self.shared;
                                self.refused.retain(|c| shared.hub(c).is_some());
                            }
                            let mut stats = self.shared.stats();
                            stats.refused = self.refused.len();
                            stats.refusals += 1;
                            return Ok(());
                        }
                        Err(Failed::Lost(why)) => return Err(why),
                    }
                    self.subscribed.insert(channel.to_owned());
                    self.shared.stats().subscribed = self.subscribed.len();
                    tracing::trace!(channel, "release notices: subscribed");
                }
                self.shared.moved();
                hub.set_live(true);
            }
            None => {
                // Not wanted now: a later want asks the server again.
                if self.refused.remove(channel) {
                    self.shared.stats().refused = self.refused.len();
                }
                if self.subscribed.remove(channel) {
                    if let Err(Failed::Lost(why)) = conn.unsubscribe(channel).await {
                        return Err(why);
                    }
                    self.shared.stats().subscribed = self.subscribed.len();
                    tracing::trace!(channel, "release notices: unsubscribed");
                }
                let mut hubs = self.shared.hubs();
                if hubs.get(channel).is_some_and(|h| h.strong_count() == 0) {
                    hubs.remove(channel);
                }
            }
        }
        Ok(())
    }

    /// Remembers `channel` for the next connection (an empty command only wakes the task);
    /// past [`MAX_TRACKED_CHANNELS`], drops those without a hub.
    fn add_pending(&mut self, channel: String) {
        if channel.is_empty() {
            return;
        }
        self.pending.insert(channel);
        if self.pending.len() > MAX_TRACKED_CHANNELS {
            let shared = &self.shared;
            self.pending.retain(|c| shared.hub(c).is_some());
        }
    }

    /// After a command found the queue full: reconciles every channel with a hub and every
    /// channel subscribed (commands were merged, so any of them may have changed).
    async fn resync_after_overflow(&mut self, conn: &mut Conn) -> Result<(), String> {
        if !self
            .shared
            .overflow
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(());
        }
        tracing::debug!("release notices: command queue overflowed; resynchronising every channel");
        let channels: HashSet<String> = self
            .shared
            .all_hubs()
            .into_iter()
            .map(|(c, _)| c)
            .chain(self.subscribed.iter().cloned())
            .collect();
        for channel in channels {
            self.reconcile(conn, &channel).await?;
        }
        Ok(())
    }

    fn route(&self, channel: &str) {
        self.shared.stats().notices += 1;
        // Counted first: a watch registered after a mark taken before this notice sees it.
        self.shared.moved();
        match self.shared.hub(channel) {
            Some(hub) => hub.notify(),
            None => tracing::trace!(channel, "release notices: a notice nobody waits for"),
        }
    }

    /// The connection is gone: every hub stops being live (drivers poll).
    fn lost(&mut self) {
        self.shared.stats().subscribed = 0;
        self.subscribed.clear();
        for (channel, hub) in self.shared.all_hubs() {
            hub.set_live(false);
            if hub.is_activated() {
                self.pending.insert(channel);
            }
        }
    }
}
