//! The subscriber's two transports: a standalone pub/sub connection (`SUBSCRIBE`, pinged
//! when idle) and a RESP3 Redis Cluster connection (`SSUBSCRIBE`, its pushes on a channel of
//! its own, watched by redis-rs). The task above ([`super::subscriber`]) sees one [`Conn`].

use std::future::poll_fn;

use futures_core::Stream;
#[cfg(feature = "cluster")]
use tokio::sync::mpsc;

use super::PING_TIMEOUT;

/// Where the subscriber connects.
pub(super) enum Source {
    /// One server: `SUBSCRIBE` on a pub/sub connection.
    Standalone(Box<redis::Client>),
    /// Redis Cluster: `SSUBSCRIBE` on a RESP3 cluster connection, whose pushes arrive here.
    #[cfg(feature = "cluster")]
    Cluster {
        client: Box<redis::cluster::ClusterClient>,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    },
}

/// One open subscriber connection.
pub(super) enum Conn {
    Standalone {
        sink: redis::aio::PubSubSink,
        stream: redis::aio::PubSubStream,
    },
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

/// What arrived on a connection (only a cluster connection reports confirmations and
/// disconnections).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(super) enum Incoming {
    /// A notice on this channel.
    Notice(String),
    /// The server confirmed a subscription again (Cluster: redis-rs resubscribes on its own
    /// after a reconnect).
    Confirmed(String),
    /// redis-rs lost a node connection (Cluster): subscriptions are being re-established.
    Disconnected,
    /// Anything else (other pushes).
    Other,
    /// The connection is gone.
    Closed,
}

#[cfg(feature = "cluster")]
fn channel_of(data: &[redis::Value]) -> Option<String> {
    match data.first() {
        Some(redis::Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
        Some(redis::Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

impl Source {
    /// Opens a subscriber connection (bounded by [`PING_TIMEOUT`]).
    pub(super) async fn connect(&mut self) -> Result<Conn, String> {
        let opened = match self {
            Source::Standalone(client) => {
                tokio::time::timeout(PING_TIMEOUT, client.get_async_pubsub())
                    .await
                    .map(|r| {
                        r.map(|p| {
                            let (sink, stream) = p.split();
                            Conn::Standalone { sink, stream }
                        })
                    })
            }
            #[cfg(feature = "cluster")]
            Source::Cluster { client, pushes } => {
                // Pushes of an earlier connection mean nothing now.
                while pushes.try_recv().is_ok() {}
                tokio::time::timeout(PING_TIMEOUT, client.get_async_connection())
                    .await
                    .map(|r| r.map(Conn::Cluster))
            }
        };
        match opened {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {PING_TIMEOUT:?}")),
        }
    }
}

impl Conn {
    /// Subscribes `channel` (`SUBSCRIBE`; `SSUBSCRIBE` on a cluster), bounded.
    pub(super) async fn subscribe(&mut self, channel: &str) -> Result<(), Failed> {
        match self {
            Conn::Standalone { sink, .. } => bounded("SUBSCRIBE", sink.subscribe(channel)).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => bounded("SSUBSCRIBE", c.ssubscribe(channel)).await,
        }
    }

    /// Unsubscribes `channel` (`UNSUBSCRIBE`; `SUNSUBSCRIBE` on a cluster), bounded.
    pub(super) async fn unsubscribe(&mut self, channel: &str) -> Result<(), Failed> {
        match self {
            Conn::Standalone { sink, .. } => {
                bounded("UNSUBSCRIBE", sink.unsubscribe(channel)).await
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => bounded("SUNSUBSCRIBE", c.sunsubscribe(channel)).await,
        }
    }
}

/// The next thing that arrives on `conn`.
pub(super) async fn next_incoming(conn: &mut Conn, source: &mut Source) -> Incoming {
    match (conn, source) {
        (Conn::Standalone { stream, .. }, _) => {
            match poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await {
                Some(msg) => Incoming::Notice(msg.get_channel_name().to_owned()),
                None => Incoming::Closed,
            }
        }
        #[cfg(feature = "cluster")]
        (Conn::Cluster(_), Source::Cluster { pushes, .. }) => match pushes.recv().await {
            Some(push) => match push.kind {
                redis::PushKind::SMessage | redis::PushKind::Message => {
                    channel_of(&push.data).map_or(Incoming::Other, Incoming::Notice)
                }
                redis::PushKind::SSubscribe => {
                    channel_of(&push.data).map_or(Incoming::Other, Incoming::Confirmed)
                }
                redis::PushKind::Disconnection => Incoming::Disconnected,
                _ => Incoming::Other,
            },
            None => Incoming::Closed,
        },
        #[cfg(feature = "cluster")]
        (Conn::Cluster(_), Source::Standalone(_)) => std::future::pending().await,
    }
}

/// Pings an idle standalone connection (bounded); a cluster connection is watched by
/// redis-rs, which reports a lost node with a disconnection push.
pub(super) async fn ping_conn(conn: &mut Conn) -> Result<(), String> {
    match conn {
        Conn::Standalone { sink, .. } => {
            match tokio::time::timeout(PING_TIMEOUT, sink.ping::<redis::Value>()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("ping failed: {e}")),
                Err(_) => Err(format!("no ping reply within {PING_TIMEOUT:?}")),
            }
        }
        #[cfg(feature = "cluster")]
        Conn::Cluster(_) => Ok(()),
    }
}

/// Why a subscription command failed.
pub(super) enum Failed {
    /// The connection is unusable: open another.
    Lost(String),
    /// The server answered with an error (an ACL refusal): permanent for this channel.
    Refused(String),
}

async fn bounded(
    what: &str,
    call: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> Result<(), Failed> {
    match tokio::time::timeout(PING_TIMEOUT, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
            Err(Failed::Lost(format!("{what} failed: {e}")))
        }
        Ok(Err(e)) => Err(Failed::Refused(format!("{what} refused: {e}"))),
        Err(_) => Err(Failed::Lost(format!(
            "no {what} confirmation within {PING_TIMEOUT:?}"
        ))),
    }
}
