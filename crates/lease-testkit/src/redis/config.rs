//! Server options shared by both backends: persistence, the builder, the `redis-server`
//! arguments and connection URLs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::RedisServer;
use crate::mode::ServerMode;
use crate::tempdir::TempDir;
use crate::tls::{ClientAuth, ServerCert};
use crate::{Error, Result};

/// A TLS port's files and client authentication.
#[derive(Debug, Clone)]
pub(crate) struct TlsOptions {
    pub(super) cert_file: PathBuf,
    pub(super) key_file: PathBuf,
    pub(super) ca_file: PathBuf,
    pub(super) client_auth: ClientAuth,
    // Keeps the certificate files while the server may read them (restarts).
    _dir: Arc<TempDir>,
}

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

#[derive(Debug, Clone)]
pub(super) struct AclUser {
    pub(super) name: String,
    pub(super) password: String,
}

#[derive(Debug, Clone)]
pub(super) enum ConfigEntry {
    Line(String),
    Pair(String, String),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RedisOptions {
    pub(super) persistence: Persistence,
    pub(super) maxmemory: Option<String>,
    pub(super) maxmemory_policy: Option<String>,
    pub(super) requirepass: Option<String>,
    pub(super) acl_user: Option<AclUser>,
    pub(super) extra: Vec<ConfigEntry>,
    pub(super) mode: Option<ServerMode>,
    pub(crate) cluster: bool,
    pub(crate) tls: Option<TlsOptions>,
}

impl RedisOptions {
    /// Adds a `redis.conf` setting (after the kit's own, so it overrides them).
    pub(crate) fn push_config(&mut self, name: &str, value: &str) {
        self.extra
            .push(ConfigEntry::Pair(name.to_owned(), value.to_owned()));
    }
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

    /// A TLS port besides the plain one (`--tls-port`), serving `cert` (signed by its test
    /// CA, also the CA client certificates are checked against), not asking for client
    /// certificates. See [`RedisServer::tls_url`]. TLS servers run as processes only.
    pub fn tls(self, cert: &ServerCert) -> Self {
        self.tls_with(cert, ClientAuth::None)
    }

    /// Like [`tls`](Self::tls), with `tls-auth-clients` set by `client_auth` (mutual TLS).
    pub fn tls_with(mut self, cert: &ServerCert, client_auth: ClientAuth) -> Self {
        self.opts.tls = Some(TlsOptions {
            cert_file: cert.cert_file().to_path_buf(),
            key_file: cert.key_file().to_path_buf(),
            ca_file: cert.ca_file().to_path_buf(),
            client_auth,
            _dir: cert.dir.clone(),
        });
        self
    }

    /// Forces the mode for this server, overriding `REDLEASE_TEST_SERVERS`.
    pub fn mode(mut self, mode: ServerMode) -> Self {
        self.opts.mode = Some(mode);
        self
    }

    /// The options built so far (for a cluster's nodes).
    pub(crate) fn into_options(self) -> RedisOptions {
        self.opts
    }

    /// Starts the server and waits until it answers PING.
    pub async fn start(self) -> Result<RedisServer> {
        RedisServer::start_with(self.opts).await
    }
}

/// Builds the `redis-server` arguments (used for both modes).
pub(super) fn redis_args(
    opts: &RedisOptions,
    port: u16,
    tls_port: Option<u16>,
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
    if let (Some(tls), Some(tls_port)) = (&opts.tls, tls_port) {
        let path = |p: &PathBuf| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| Error::Config(format!("path {} is not UTF-8", p.display())))
        };
        let (cert, key, ca) = (
            path(&tls.cert_file)?,
            path(&tls.key_file)?,
            path(&tls.ca_file)?,
        );
        push(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            tls.client_auth.redis_value(),
        ]);
    }
    if let Some(bus) = bus_port {
        push(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ]);
        // Redis 6.2 has no `cluster-port` (its bus is the port + 10000, chosen so).
        if crate::server::has_cluster_port_option() {
            push(&["--cluster-port", &bus.to_string()]);
        }
    }
    for entry in &opts.extra {
        let tokens = match entry {
            // A value of several words is several arguments (`replicaof "host port"`):
            // Redis 7 splits one quoted argument itself, Redis 6.2 does not.
            ConfigEntry::Pair(name, value) if value.contains(char::is_whitespace) => {
                std::iter::once(name.clone())
                    .chain(value.split_whitespace().map(str::to_owned))
                    .collect()
            }
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
    format!("redis://{}{addr}/", credentials(user, password))
}

/// `rediss://[user][:password@]host:port/` with percent-encoded credentials.
pub(crate) fn rediss_url(host: &str, port: u16, password: Option<&str>) -> String {
    format!("rediss://{}{host}:{port}/", credentials(None, password))
}

fn credentials(user: Option<&str>, password: Option<&str>) -> String {
    match (user, password) {
        (None, None) => String::new(),
        (Some(u), None) => format!("{}@", encode(u)),
        (None, Some(p)) => format!(":{}@", encode(p)),
        (Some(u), Some(p)) => format!("{}:{}@", encode(u), encode(p)),
    }
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
    use crate::process::loopback;

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
        let args = redis_args(&opts, 1234, None, None, "/d", "127.0.0.1").unwrap();
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
