//! The sidecar endpoint of `run` and `lock` (`--health-addr ADDR`): `GET /healthz`,
//! `GET /leader` and `GET /metrics` on a tiny HTTP/1.1 server.
//!
//! The server reads one request head (request line and headers: at most [`MAX_HEAD`] bytes,
//! within [`READ_TIMEOUT`]), answers it with a `Content-Length` and `Connection: close`, and
//! closes the connection. No body is read; no keep-alive, no chunking, no TLS: enough for a
//! Kubernetes probe, a Prometheus scrape or `curl`, and small enough to read in one sitting
//! (a dependency such as hyper would bring more code than this whole module).
//!
//! - `GET /healthz`: 200 `ok` while the supervisor is healthy; 503 with the reason otherwise
//!   (see [`Source::health`], and the implementations [`ElectionSource`] and [`LockSource`]).
//! - `GET /leader`: a JSON object (see [`Source::leader`]).
//! - `GET /metrics`: the Prometheus text exposition of the global `metrics` recorder that
//!   [`prepare`] installs (`metrics-exporter-prometheus`; the libraries only emit through the
//!   `metrics` facade).
//! - Any other path: 404. A known path with a method other than `GET` or `HEAD`: 405 (with
//!   `Allow: GET, HEAD`). `HEAD` answers with the headers of `GET` and no body. A malformed
//!   request: 400; a head over [`MAX_HEAD`]: 431; not HTTP/1.x: 505; no complete head within
//!   [`READ_TIMEOUT`]: 408.
//! - Every connection is accepted at once; over [`MAX_CONNECTIONS`] being answered, it gets a
//!   503 (`too many connections`) written without waiting and is closed, so idle or slow
//!   clients cannot starve a kubelet probe.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::exit::{self, Failure};
use crate::output::{Json, Progress};
pub(crate) use crate::sources::{ElectionSource, LockPhase, LockSource};

/// The largest request head accepted (request line and headers).
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head (a probe sends it at once).
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// How long writing a response may take.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections answered at once; further ones get a 503 at once.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// Connections over the limit being told 503 at once; beyond these, closed unanswered.
pub(crate) const MAX_BUSY_ANSWERS: usize = 256;
/// How long a 503 over the limit may take (written, then the client's request drained).
pub(crate) const BUSY_LINGER: Duration = Duration::from_millis(250);
/// How often the metrics recorder's histograms are drained when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// Bucket bounds (seconds) of the `*_seconds` histograms: aggregatable across instances.
const SECONDS_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// What the endpoint reports: the supervisor's health and its view of the lease.
#[async_trait]
pub(crate) trait Source: Send + Sync + 'static {
    /// `Ok` while healthy; otherwise why not (one line).
    fn health(&self) -> Result<(), String>;
    /// The `/leader` object, as JSON.
    async fn leader(&self) -> String;
}

/// `--health-addr` as a socket address: an IP address and a port (`127.0.0.1:9100`,
/// `[::1]:9100`, `0.0.0.0:9100`; port 0 picks a free port). Host names are refused, so the
/// address bound is exactly the one given.
pub(crate) fn parse_addr(s: &str) -> Result<SocketAddr, Failure> {
    s.trim().parse::<SocketAddr>().map_err(|_| {
        Failure::new(
            exit::INVALID,
            format!(
                "invalid --health-addr {s:?}: expected an IP address and a port, e.g. \
                 127.0.0.1:9100 or [::1]:9100 (port 0 picks a free port)"
            ),
        )
    })
}

/// A bound listener and the installed metrics recorder, waiting for its [`Source`].
pub(crate) struct Pending {
    listener: TcpListener,
    metrics: PrometheusHandle,
}

/// With `--health-addr`: checks the address (exit 64), binds it (exit 74 when it cannot be
/// bound), installs the global Prometheus recorder, and reports the bound address on stderr
/// (event `health_listening`, field `addr`: with port 0, the port chosen). Serving starts
/// with [`Pending::serve`]; connections made before wait in the listen backlog.
pub(crate) async fn prepare(
    addr: Option<&str>,
    progress: &Progress,
) -> Result<Option<Pending>, Failure> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let addr = parse_addr(addr)?;
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Failure::new(
            exit::CANNOT_LISTEN,
            format!("cannot serve --health-addr {addr}: {e}"),
        )
    })?;
    let bound = listener.local_addr().map_err(|e| {
        Failure::new(
            exit::CANNOT_LISTEN,
            format!("cannot serve --health-addr {addr}: {e}"),
        )
    })?;
    let metrics = install_recorder()?;
    progress.event(
        "health_listening",
        &format!("serving /healthz, /leader and /metrics on http://{bound}"),
        &[("addr", Json::from(bound.to_string()))],
    );
    Ok(Some(Pending { listener, metrics }))
}

/// Installs the process's global `metrics` recorder: Prometheus, histograms named
/// `*_seconds` with [`SECONDS_BUCKETS`].
fn install_recorder() -> Result<PrometheusHandle, Failure> {
    let software = |e: &dyn std::fmt::Display| {
        Failure::new(exit::SOFTWARE, format!("cannot set up /metrics: {e}"))
    };
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
        .map_err(|e| software(&e))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| software(&e))?;
    redlease::describe_metrics();
    Ok(handle)
}

impl Pending {
    /// Serves requests from now on (until the runtime shuts down, when the command exits).
    pub(crate) fn serve(self, source: Arc<dyn Source>) {
        let upkeep = self.metrics.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP_EVERY);
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        tokio::spawn(accept_loop(self.listener, source, self.metrics));
    }
}

async fn accept_loop(listener: TcpListener, source: Arc<dyn Source>, metrics: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let busy_slots = Arc::new(Semaphore::new(MAX_BUSY_ANSWERS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                    // Over the limit: 503 at once, by a short-lived task (at most
                    // MAX_BUSY_ANSWERS at a time; beyond that the connection is just closed).
                    if let Ok(busy) = Arc::clone(&busy_slots).try_acquire_owned() {
                        tokio::spawn(async move {
                            answer_busy(stream).await;
                            drop(busy);
                        });
                    }
                    continue;
                };
                let source = Arc::clone(&source);
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    answer(stream, source.as_ref(), &metrics).await;
                    drop(permit);
                });
            }
            // Out of file descriptors and the like: back off instead of spinning; the
            // connection, if any, stays in the backlog.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Over the limit: writes a 503, then reads (and discards) what the client sends for at most
/// [`BUSY_LINGER`] before closing, so that closing does not reset the connection before the
/// client has read the answer.
async fn answer_busy(mut stream: TcpStream) {
    let busy = Response::text(503, "too many connections\n").encode(false);
    let _ = tokio::time::timeout(BUSY_LINGER, async {
        stream.write_all(&busy).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// One connection: read the head, answer, close.
async fn answer(mut stream: TcpStream, source: &dyn Source, metrics: &PrometheusHandle) {
    let response = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Err(_) => Some(Response::text(408, "request head not received in time\n")),
        Ok(Err(Closed)) => None,
        Ok(Ok(Err(e))) => Some(e.response()),
        Ok(Ok(Ok(head))) => Some(respond(&head, source, metrics).await),
    };
    let Some(response) = response else {
        return;
    };
    let bytes = response.encode(response.head_only);
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    })
    .await;
}

/// The peer closed the connection before sending a complete head.
struct Closed;

/// Reads until the end of the head (the blank line), at most [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Result<Head, HeadError>, Closed> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| Closed)?;
        if n == 0 {
            return Err(Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf) {
            return Ok(parse_head(&buf[..end]));
        }
        if buf.len() > MAX_HEAD {
            return Ok(Err(HeadError::TooLarge));
        }
    }
}

/// The length of the head in `buf` (through its blank line), once it is complete. Lines end
/// with CRLF, or a bare LF (tolerated, as RFC 9112 allows).
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + off;
        let rest = &buf[nl + 1..];
        if rest.starts_with(b"\r\n") {
            return Some(nl + 3);
        }
        if rest.starts_with(b"\n") {
            return Some(nl + 2);
        }
        i = nl + 1;
    }
    None
}

/// A parsed request head: what the server needs of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// The method, as sent (methods are case-sensitive).
    pub(crate) method: String,
    /// The path of the target, without query or fragment.
    pub(crate) path: String,
}

/// Why a head is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Not a valid request line or header line.
    Malformed(&'static str),
    /// Over [`MAX_HEAD`] bytes.
    TooLarge,
    /// Not HTTP/1.0 or HTTP/1.1.
    Version,
}

impl HeadError {
    fn response(&self) -> Response {
        match self {
            HeadError::Malformed(why) => Response::text(400, &format!("bad request: {why}\n")),
            HeadError::TooLarge => Response::text(431, "request head too large\n"),
            HeadError::Version => Response::text(505, "only HTTP/1.0 and HTTP/1.1 are served\n"),
        }
    }
}

/// Parses a complete head (request line, header lines, blank line).
pub(crate) fn parse_head(head: &[u8]) -> Result<Head, HeadError> {
    if head.len() > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| HeadError::Malformed("not UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("request line"));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(HeadError::Malformed("method"));
    }
    if !version.starts_with("HTTP/") {
        return Err(HeadError::Malformed("version"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HeadError::Version);
    }
    let path = target_path(target).ok_or(HeadError::Malformed("request target"))?;
    for line in lines {
        if line.is_empty() {
            break;
        }
        let Some((name, _value)) = line.split_once(':') else {
            return Err(HeadError::Malformed("header line"));
        };
        // No whitespace before the colon, no obsolete line folding (RFC 9112, 5.1 and 5.2).
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(HeadError::Malformed("header name"));
        }
    }
    Ok(Head {
        method: method.to_owned(),
        path: path.to_owned(),
    })
}

/// The path of a request target: origin form (`/leader?x=1`) or absolute form
/// (`http://host:9100/leader`); `None` for anything else.
fn target_path(target: &str) -> Option<&str> {
    let path = if target.starts_with('/') {
        target
    } else {
        let rest = target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))?;
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => "/",
        }
    };
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return None;
    }
    Some(path.split(['?', '#']).next().unwrap_or(path))
}

/// A token character (RFC 9110, 5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What a path serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Healthz,
    Leader,
    Metrics,
}

/// Where a request goes: a route, or the status that refuses it (404 unknown path, 405
/// method other than GET/HEAD on a known path). The second value: `HEAD` (no body).
pub(crate) fn route(head: &Head) -> Result<(Route, bool), u16> {
    let route = match head.path.as_str() {
        "/healthz" => Route::Healthz,
        "/leader" => Route::Leader,
        "/metrics" => Route::Metrics,
        _ => return Err(404),
    };
    match head.method.as_str() {
        "GET" => Ok((route, false)),
        "HEAD" => Ok((route, true)),
        _ => Err(405),
    }
}

async fn respond(head: &Head, source: &dyn Source, metrics: &PrometheusHandle) -> Response {
    let (route, head_only) = match route(head) {
        Ok(r) => r,
        Err(405) => {
            let mut r = Response::text(405, "method not allowed: use GET or HEAD\n");
            r.allow = true;
            return r;
        }
        Err(status) => {
            return Response::text(status, "not found: try /healthz, /leader or /metrics\n");
        }
    };
    let mut response = match route {
        Route::Healthz => match source.health() {
            Ok(()) => Response::text(200, "ok\n"),
            Err(why) => Response::text(503, &format!("unavailable: {why}\n")),
        },
        Route::Leader => Response {
            status: 200,
            content_type: "application/json",
            body: format!("{}\n", source.leader().await).into_bytes(),
            allow: false,
            head_only: false,
        },
        Route::Metrics => {
            metrics.run_upkeep();
            Response {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: metrics.render().into_bytes(),
                allow: false,
                head_only: false,
            }
        }
    };
    response.head_only = head_only;
    response
}

/// A response, written with `Content-Length` and `Connection: close`.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: Vec<u8>,
    /// Add `Allow: GET, HEAD` (a 405).
    pub(crate) allow: bool,
    /// Answering a `HEAD`: the headers of `GET`, no body.
    pub(crate) head_only: bool,
}

impl Response {
    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            allow: false,
            head_only: false,
        }
    }

    pub(crate) fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Result<Head, HeadError> {
        parse_head(s.as_bytes())
    }

    fn get(path: &str) -> Head {
        Head {
            method: "GET".to_owned(),
            path: path.to_owned(),
        }
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r"), None);
        assert_eq!(head_end(b""), None);
    }

    #[test]
    fn request_lines_parse() {
        assert_eq!(
            head("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"),
            Ok(get("/healthz"))
        );
        assert_eq!(head("GET /leader HTTP/1.0\r\n\r\n"), Ok(get("/leader")));
        // Query and fragment are not part of the path; absolute form is accepted.
        assert_eq!(
            head("GET /metrics?name[]=x HTTP/1.1\r\n\r\n"),
            Ok(get("/metrics"))
        );
        assert_eq!(
            head("GET http://127.0.0.1:9100/leader HTTP/1.1\r\n\r\n"),
            Ok(get("/leader"))
        );
        assert_eq!(head("GET http://host HTTP/1.1\r\n\r\n"), Ok(get("/")));
        // Bare LF line ends.
        assert_eq!(
            head("GET /healthz HTTP/1.1\nHost: x\n\n"),
            Ok(get("/healthz"))
        );
        assert_eq!(
            head("DELETE /leader HTTP/1.1\r\n\r\n").map(|h| h.method),
            Ok("DELETE".to_owned())
        );
    }

    #[test]
    fn malformed_heads_are_refused() {
        for bad in [
            "\r\n\r\n",
            "GET\r\n\r\n",
            "GET /healthz\r\n\r\n",
            "GET  /healthz HTTP/1.1\r\n\r\n",
            "GET /healthz HTTP/1.1 extra\r\n\r\n",
            "G(T /healthz HTTP/1.1\r\n\r\n",
            "GET healthz HTTP/1.1\r\n\r\n",
            "GET ftp://x/healthz HTTP/1.1\r\n\r\n",
            "GET /healthz HTTX/1.1\r\n\r\n",
            "GET /healthz HTTP/1.1\r\nno colon\r\n\r\n",
            "GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
            "GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            "GET /healthz HTTP/1.1\r\n: empty name\r\n\r\n",
        ] {
            assert!(
                matches!(head(bad), Err(HeadError::Malformed(_))),
                "{bad:?}: {:?}",
                head(bad)
            );
        }
        assert_eq!(
            parse_head(b"GET /\xff HTTP/1.1\r\n\r\n"),
            Err(HeadError::Malformed("not UTF-8"))
        );
        assert_eq!(
            head("GET /healthz HTTP/2.0\r\n\r\n"),
            Err(HeadError::Version)
        );
        assert_eq!(
            head("GET /healthz HTTP/0.9\r\n\r\n"),
            Err(HeadError::Version)
        );
        let huge = format!(
            "GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert_eq!(head(&huge), Err(HeadError::TooLarge));
    }

    #[test]
    fn routes_and_methods() {
        assert_eq!(route(&get("/healthz")), Ok((Route::Healthz, false)));
        assert_eq!(route(&get("/leader")), Ok((Route::Leader, false)));
        assert_eq!(route(&get("/metrics")), Ok((Route::Metrics, false)));
        let mut h = get("/metrics");
        h.method = "HEAD".to_owned();
        assert_eq!(route(&h), Ok((Route::Metrics, true)));
        for path in ["/", "/healthz/", "/Healthz", "/leaderx", "/metrics/x"] {
            assert_eq!(route(&get(path)), Err(404), "{path}");
        }
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
            let h = Head {
                method: method.to_owned(),
                path: "/healthz".to_owned(),
            };
            assert_eq!(route(&h), Err(405), "{method}");
        }
        // An unknown path is 404 whatever the method.
        let h = Head {
            method: "POST".to_owned(),
            path: "/nope".to_owned(),
        };
        assert_eq!(route(&h), Err(404));
    }

    #[test]
    fn responses_carry_their_length_and_close() {
        let r = Response::text(200, "ok\n");
        let text = String::from_utf8(r.encode(false)).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("\r\nContent-Length: 3\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nok\n"), "{text}");
        // HEAD: the same headers, no body.
        let text = String::from_utf8(r.encode(true)).unwrap();
        assert!(text.contains("\r\nContent-Length: 3\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
        let mut r = Response::text(405, "no\n");
        r.allow = true;
        let text = String::from_utf8(r.encode(false)).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(text.contains("\r\nAllow: GET, HEAD\r\n"), "{text}");
    }

    #[test]
    fn addresses_are_ip_and_port() {
        assert_eq!(
            parse_addr("127.0.0.1:9100").unwrap(),
            "127.0.0.1:9100".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(parse_addr("[::1]:0").unwrap().port(), 0);
        for bad in [
            "",
            "9100",
            ":9100",
            "localhost:9100",
            "127.0.0.1",
            "1.2.3.4:99999",
        ] {
            let e = parse_addr(bad).err().unwrap();
            assert_eq!(e.code, exit::INVALID, "{bad}");
            assert!(e.message.contains("--health-addr"), "{}", e.message);
        }
    }
}
