//! `-v` / `RUST_LOG`: the libraries' `tracing` events on stderr, through the same bounded,
//! scrubbing, escaping queue as the progress lines (`output.rs`).
//!
//! The filter is `RUST_LOG` when set (`EnvFilter` syntax, e.g. `lease_redis=debug`), else by
//! `-v` count: none `warn` (the libraries' warnings: the store's risks found by the preflight,
//! a store that lost fence state, connection trouble), `-v` `info`, `-vv` `debug`, `-vvv`
//! `trace`. Without `-v`, the election loop's own per-retry warnings
//! (`lease_tokio::elector::run`, which the progress lines already report, rate-limited) are
//! kept to errors. Human lines read `redlease +1.234s: WARN target: message key=value`; with
//! `--json`, `{"t":..,"event":"log","level":..,"target":..,"message":..,"fields":..}`.

use std::fmt::Write as _;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::{EnvFilter, Registry};

use crate::output::{self, Json};

/// The default filter for a `-v` count (`-q` without `-v`: errors only).
fn default_filter(verbose: u8, quiet: bool) -> &'static str {
    match verbose {
        0 if quiet => "error",
        0 => "warn,lease_tokio::elector::run=error",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// Installs the subscriber (once, before the runtime starts); `quiet` is `run`/`lock -q`. A malformed `RUST_LOG` is
/// reported and the `-v` default used.
pub(crate) fn install(verbose: u8, quiet: bool, json: bool) {
    let fallback = default_filter(verbose, quiet);
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            output::stderr_line(&format!(
                "redlease: RUST_LOG ignored ({e}); using {fallback:?}"
            ));
            EnvFilter::new(fallback)
        }),
        _ => EnvFilter::new(fallback),
    };
    let subscriber = Registry::default().with(filter).with(Lines {
        json,
        start: Instant::now(),
    });
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Renders each event as one line.
struct Lines {
    json: bool,
    start: Instant,
}

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let t = self.start.elapsed().as_secs_f64();
        let line = if self.json {
            output::object(&[
                ("t", Json::Num(t)),
                ("event", Json::from("log")),
                ("level", Json::from(meta.level().as_str())),
                ("target", Json::from(meta.target())),
                ("message", Json::from(fields.message)),
                ("fields", Json::from(fields.rest.trim_start().to_owned())),
            ])
        } else {
            format!(
                "redlease +{t:.3}s: {} {}: {}{}",
                meta.level(),
                meta.target(),
                fields.message,
                fields.rest
            )
        };
        output::stderr_line(&line);
    }
}

/// An event's message and its other fields (` key=value`).
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}
