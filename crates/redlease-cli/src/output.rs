//! Output: progress events on stderr (human lines, or JSON lines with `--json`), and a small
//! JSON writer (the workspace has no JSON crate; the CLI only writes flat objects).
//!
//! Every line is scrubbed of secrets ([`crate::secret`]) and escaped for a terminal: control
//! characters (C0, DEL, C1, so no escape sequence from a server or an instance id reaches the
//! terminal) and Unicode bidirectional controls are written as `\u{..}` in human lines and
//! `\uXXXX` in JSON.
//!
//! Stderr is written by one thread fed through a bounded queue ([`QUEUE_LINES`] lines): a
//! blocked stderr (a full pipe, a stalled log driver) never blocks the runtime, so renewals
//! and CMD's supervision go on. Lines that do not fit are dropped and counted; the count is
//! reported once the writer catches up. At exit the queue is flushed for at most
//! [`FLUSH_TIMEOUT`].

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines the stderr queue holds before dropping.
pub(crate) const QUEUE_LINES: usize = 1024;
/// How long the exit waits for queued lines to be written.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// A JSON value of a flat object.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Int(u64),
    Num(f64),
    Str(String),
    /// An array of strings.
    Strs(Vec<String>),
    /// An array of objects, each already written by [`object`].
    Objects(Vec<String>),
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_owned())
    }
}
impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::Int(v)
    }
}
impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}
impl From<Vec<String>> for Json {
    fn from(v: Vec<String>) -> Json {
        Json::Strs(v)
    }
}
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}

/// Writes `{"k":v,...}` (keys in the given order).
pub(crate) fn object(fields: &[(&str, Json)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(&mut out, k);
        out.push(':');
        match v {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Num(x) if x.is_finite() => {
                let _ = write!(out, "{x:.3}");
            }
            Json::Num(_) => out.push_str("null"),
            Json::Str(s) => push_str(&mut out, s),
            Json::Strs(items) => {
                out.push('[');
                for (j, item) in items.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    push_str(&mut out, item);
                }
                out.push(']');
            }
            Json::Objects(items) => {
                out.push('[');
                out.push_str(&items.join(","));
                out.push(']');
            }
        }
    }
    out.push('}');
    out
}

fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Characters never written raw: controls (C0, DEL, C1), and bidirectional controls that
/// reorder what a terminal shows.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text for a terminal: each character of [`needs_escape`] (newlines and tabs included) as
/// `\u{..}`; a backslash before such an escape's shape is left as is (the text is for
/// reading, not parsing).
pub(crate) fn escape(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// A line ready to write: secrets scrubbed, escaped (human lines; JSON is escaped already).
fn clean(line: &str, json: bool) -> String {
    let scrubbed = crate::secret::scrub(line);
    if json { scrubbed } else { escape(&scrubbed) }
}

/// The stderr writer: a thread fed by a bounded queue.
struct Writer {
    tx: SyncSender<String>,
    /// Lines queued so far.
    sent: AtomicU64,
    /// Lines dropped because the queue was full (not yet reported).
    dropped: AtomicU64,
    /// Lines written (or failed to write) so far, for [`flush`].
    written: Mutex<u64>,
    progress: Condvar,
}

static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn writer() -> Option<&'static Writer> {
    WRITER
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<String>(QUEUE_LINES);
            let spawned = std::thread::Builder::new()
                .name("redlease-stderr".to_owned())
                .spawn(move || write_loop(&rx));
            spawned.ok().map(|_| Writer {
                tx,
                sent: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                written: Mutex::new(0),
                progress: Condvar::new(),
            })
        })
        .as_ref()
}

fn write_loop(rx: &Receiver<String>) {
    while let Ok(line) = rx.recv() {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let Some(w) = WRITER.get().and_then(Option::as_ref) else {
            continue;
        };
        let dropped = w.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let note = if JSON.load(Ordering::Relaxed) {
                object(&[
                    ("event", Json::from("dropped")),
                    ("lines", Json::from(dropped)),
                ])
            } else {
                format!("redlease: {dropped} progress lines dropped (stderr was blocked)")
            };
            let _ = writeln!(err, "{note}");
        }
        drop(err);
        let mut written = w.written.lock().unwrap_or_else(|p| p.into_inner());
        *written += 1;
        w.progress.notify_all();
    }
}

/// Sets whether the writer's own notes are JSON.
pub(crate) fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// Queues one line for stderr: never blocks; dropped (and counted) when the queue is full.
pub(crate) fn stderr_line(line: &str) {
    let line = clean(line, JSON.load(Ordering::Relaxed));
    let Some(w) = writer() else {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
        return;
    };
    match w.tx.try_send(line) {
        Ok(()) => {
            w.sent.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            w.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits (at most `timeout`) until every queued line has been written.
pub(crate) fn flush(timeout: Duration) {
    let Some(w) = WRITER.get().and_then(Option::as_ref) else {
        return;
    };
    let target = w.sent.load(Ordering::Relaxed);
    let deadline = Instant::now() + timeout;
    let mut written = w.written.lock().unwrap_or_else(|p| p.into_inner());
    while *written < target {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        written = match w.progress.wait_timeout(written, left) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}

/// Where timeline events go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

/// Progress reporting with timestamps relative to the start of the command.
#[derive(Debug)]
pub(crate) struct Progress {
    start: Instant,
    json: bool,
    sink: Sink,
    /// `-q`: only the events in [`KEPT_WHEN_QUIET`] are written.
    quiet: bool,
}

/// The events `-q` keeps: the ones that say something went wrong (CMD stopped or killed, the
/// lease lost, a failed release or start, a retried Redis error) and the bound health address
/// (asked for, and unknowable otherwise with port 0). The final failure line of a command is
/// not an event and is always written.
pub(crate) const KEPT_WHEN_QUIET: [&str; 7] = [
    "error",
    "expiring",
    "killing",
    "lost",
    "release_failed",
    "spawn_failed",
    "health_listening",
];

impl Progress {
    pub(crate) fn new(json: bool, sink: Sink) -> Progress {
        Progress {
            start: Instant::now(),
            json,
            sink,
            quiet: false,
        }
    }

    /// `-q`: write only the events that say something went wrong ([`KEPT_WHEN_QUIET`]).
    pub(crate) fn quiet(mut self, quiet: bool) -> Progress {
        self.quiet = quiet;
        self
    }

    pub(crate) fn json(&self) -> bool {
        self.json
    }

    pub(crate) fn elapsed_secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// One event: a human line (`text`) or a JSON line (`event` plus `fields`).
    pub(crate) fn event(&self, event: &str, text: &str, fields: &[(&str, Json)]) {
        if self.quiet && !KEPT_WHEN_QUIET.contains(&event) {
            return;
        }
        let t = self.elapsed_secs();
        let line = if self.json {
            let mut all = vec![("t", Json::Num(t)), ("event", Json::from(event))];
            all.extend(fields.iter().cloned());
            object(&all)
        } else {
            match self.sink {
                Sink::Stderr => format!("redlease +{t:.3}s: {text}"),
                Sink::Stdout => format!("  +{t:6.3}s  {text}"),
            }
        };
        self.write_line(&line);
    }

    /// A plain line (human mode only; ignored with `--json`).
    pub(crate) fn say(&self, text: &str) {
        if !self.json && !self.quiet {
            self.write_line(text);
        }
    }

    fn write_line(&self, line: &str) {
        // A closed pipe must not turn into a panic: ignore write errors.
        match self.sink {
            Sink::Stdout => {
                let line = clean(line, self.json);
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Sink::Stderr => stderr_line(line),
        }
    }
}

/// Writes one line on stdout (a command's result), scrubbed and escaped, ignoring a closed
/// pipe.
pub(crate) fn print_stdout(line: &str) {
    let line = clean(line, JSON.load(Ordering::Relaxed));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_valid_json() {
        let s = object(&[
            ("name", Json::from("a\"b\\c\n\u{1}")),
            ("token", Json::from(Some(7u64))),
            ("mark", Json::from(None::<u64>)),
            ("ok", Json::from(true)),
            ("t", Json::Num(1.5)),
        ]);
        assert_eq!(
            s,
            r#"{"name":"a\"b\\c\n\u0001","token":7,"mark":null,"ok":true,"t":1.500}"#
        );
    }

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(escape("id\u{1b}[31mred\u{7}"), "id\\u{1b}[31mred\\u{7}");
        assert_eq!(escape("a\u{9b}b\u{202e}c"), "a\\u{9b}b\\u{202e}c");
        assert_eq!(escape("plain text: ok"), "plain text: ok");
        assert_eq!(
            object(&[("id", Json::from("x\u{1b}]0;pwn\u{7}\u{202e}\u{7f}"))]),
            r#"{"id":"x\u001b]0;pwn\u0007\u202e\u007f"}"#
        );
    }
}
