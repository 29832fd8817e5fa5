//! A minimal RESP2 client used for readiness probes (independent of redis-rs, so
//! probes never depend on client-side reconnect or handshake behaviour).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text (simple or bulk string), if it is one.
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// One connection.
pub(crate) struct Conn {
    stream: BufReader<TcpStream>,
    timeout: Duration,
}

impl Conn {
    /// Connects, with `timeout` for the connect and for every later call.
    pub(crate) async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, String> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connect to {addr} timed out"))?
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream: BufReader::new(stream),
            timeout,
        })
    }

    /// Sends one command and reads its reply.
    pub(crate) async fn call(&mut self, args: &[&str]) -> Result<Reply, String> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            buf.extend_from_slice(arg.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        let fut = async {
            self.stream
                .get_mut()
                .write_all(&buf)
                .await
                .map_err(|e| format!("write: {e}"))?;
            read_reply(&mut self.stream).await
        };
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| format!("`{}` got no reply within {:?}", args[0], self.timeout))?
    }

    /// AUTH (with or without a user name), failing on an error reply.
    pub(crate) async fn auth(&mut self, user: Option<&str>, password: &str) -> Result<(), String> {
        let reply = match user {
            Some(user) => self.call(&["AUTH", user, password]).await?,
            None => self.call(&["AUTH", password]).await?,
        };
        match reply {
            Reply::Error(e) => Err(format!("AUTH: {e}")),
            _ => Ok(()),
        }
    }
}

fn read_reply<'a>(
    r: &'a mut BufReader<TcpStream>,
) -> Pin<Box<dyn Future<Output = Result<Reply, String>> + Send + 'a>> {
    Box::pin(async move {
        let mut line = String::new();
        let n = r
            .read_line(&mut line)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".to_owned());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(1.min(line.len()));
        let parse_len = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| format!("bad RESP length {s:?}"))
        };
        match kind {
            "+" => Ok(Reply::Simple(rest.to_owned())),
            "-" => Ok(Reply::Error(rest.to_owned())),
            ":" => Ok(Reply::Int(parse_len(rest)?)),
            "$" => {
                let len = parse_len(rest)?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut data = vec![0; len as usize + 2];
                r.read_exact(&mut data)
                    .await
                    .map_err(|e| format!("read: {e}"))?;
                data.truncate(len as usize);
                Ok(Reply::Bulk(Some(data)))
            }
            "*" => {
                let len = parse_len(rest)?;
                if len < 0 {
                    return Ok(Reply::Array(None));
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(read_reply(r).await?);
                }
                Ok(Reply::Array(Some(items)))
            }
            _ => Err(format!("unexpected RESP line {line:?}")),
        }
    })
}

/// Credentials a probe uses.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProbeAuth {
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
}

/// Connects, authenticates if needed and runs one command. `Ok(reply)` even for an
/// error reply; `Err` for transport problems.
pub(crate) async fn probe(
    addr: SocketAddr,
    auth: &ProbeAuth,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, String> {
    let mut conn = Conn::connect(addr, timeout).await?;
    if let Some(password) = &auth.password {
        conn.auth(auth.user.as_deref(), password).await?;
    }
    conn.call(args).await
}

/// One readiness probe: `Ok(())` when PING answers PONG (not LOADING, not an error).
pub(crate) async fn ping(addr: SocketAddr, auth: &ProbeAuth) -> Result<(), String> {
    match probe(addr, auth, &["PING"], Duration::from_secs(2)).await? {
        Reply::Simple(s) if s == "PONG" => Ok(()),
        other => Err(format!("PING answered {other:?}")),
    }
}
