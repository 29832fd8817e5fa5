//! Output: progress events on stderr (human lines, or JSON lines with `--json`), and a small
//! JSON writer (the workspace has no JSON crate; the CLI only writes flat objects).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

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
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
}

impl Progress {
    pub(crate) fn new(json: bool, sink: Sink) -> Progress {
        Progress {
            start: Instant::now(),
            json,
            sink,
        }
    }

    pub(crate) fn json(&self) -> bool {
        self.json
    }

    pub(crate) fn elapsed_secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// One event: a human line (`text`) or a JSON line (`event` plus `fields`).
    pub(crate) fn event(&self, event: &str, text: &str, fields: &[(&str, Json)]) {
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
        if !self.json {
            self.write_line(text);
        }
    }

    fn write_line(&self, line: &str) {
        // A closed pipe must not turn into a panic: ignore write errors.
        match self.sink {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Sink::Stderr => {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        }
    }
}

/// Writes one line on stdout (a command's result), ignoring a closed pipe.
pub(crate) fn print_stdout(line: &str) {
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
}
