//! Secrets never printed: the Redis URL's password is redacted in every line (human and
//! JSON, errors included), and is exported to CMD only on request.
//!
//! Two layers: URLs are shown through [`redact`] (`redis://user:***@host`), and every line
//! written by [`crate::output`] is scrubbed of each registered secret ([`register_url`]: the
//! password as written and percent-decoded), so a library or server error that quotes it
//! cannot leak it either. Passwords shorter than [`MIN_SCRUBBED`] bytes are only redacted
//! structurally (scrubbing every occurrence of a two-letter word would garble every line).

use std::sync::Mutex;

/// The shortest secret scrubbed from arbitrary text.
pub(crate) const MIN_SCRUBBED: usize = 4;

/// What redacted text reads.
pub(crate) const MASK: &str = "***";

static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The parts of a URL's authority: `(start, end)` byte ranges of the password, if any.
fn password_range(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..auth_end].rfind('@')?;
    let colon = rest[..at].find(':')?;
    Some((start + colon + 1, start + at))
}

/// Query parameters that carry a password in `redis+unix://` / `unix://` URLs.
const PASSWORD_PARAMS: [&str; 2] = ["pass=", "password="];

/// Ranges of password query parameters' values.
fn query_password_ranges(url: &str) -> Vec<(usize, usize)> {
    let Some(q) = url.find('?') else {
        return Vec::new();
    };
    let end_all = url.find('#').filter(|h| *h > q).unwrap_or(url.len());
    let mut ranges = Vec::new();
    let mut pos = q + 1;
    while pos < end_all {
        let end = url[pos..end_all].find('&').map_or(end_all, |e| pos + e);
        let param = &url[pos..end];
        if let Some(p) = PASSWORD_PARAMS.iter().find(|p| param.starts_with(**p)) {
            ranges.push((pos + p.len(), end));
        }
        pos = end + 1;
    }
    ranges
}

/// The URL with its password (userinfo or `pass=` parameter) replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let mut ranges = query_password_ranges(url);
    ranges.extend(password_range(url));
    ranges.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut pos = 0;
    for (s, e) in ranges {
        if s < pos || e < s {
            continue;
        }
        out.push_str(&url[pos..s]);
        if e > s {
            out.push_str(MASK);
        }
        pos = e;
    }
    out.push_str(&url[pos..]);
    out
}

/// The URL without its password (the user name, if any, is kept): what CMD gets in
/// `REDLEASE_REDIS_URL` unless `--export-redis-password`.
pub(crate) fn without_password(url: &str) -> String {
    let mut out = url.to_owned();
    let mut ranges = query_password_ranges(url);
    ranges.sort_unstable();
    // Query parameters first (they come after the authority): remove `&pass=...` whole.
    for (s, e) in ranges.into_iter().rev() {
        let name_start = PASSWORD_PARAMS
            .iter()
            .map(|p| s.saturating_sub(p.len()))
            .find(|ns| PASSWORD_PARAMS.iter().any(|p| out[*ns..].starts_with(p)))
            .unwrap_or(s);
        // Remove the separator before it too (or after it, for the first parameter).
        let (a, b) = if out[..name_start].ends_with('&') {
            (name_start - 1, e)
        } else if out[e..].starts_with('&') {
            (name_start, e + 1)
        } else if out[..name_start].ends_with('?') {
            (name_start - 1, e)
        } else {
            (name_start, e)
        };
        out.replace_range(a..b, "");
    }
    if let Some((s, e)) = password_range(&out) {
        // `user:pass@` -> `user@`; `:pass@` -> `` (nothing left of the userinfo).
        let user_start = out[..s - 1].rfind("://").map_or(0, |i| i + 3);
        if s - 1 == user_start {
            out.replace_range(user_start..=e, "");
        } else {
            out.replace_range(s - 1..e, "");
        }
    }
    out
}

/// Registers the URL's password (as written and percent-decoded) for scrubbing.
pub(crate) fn register_url(url: &str) {
    let mut found: Vec<String> = Vec::new();
    let mut ranges = query_password_ranges(url);
    ranges.extend(password_range(url));
    for (s, e) in ranges {
        let raw = &url[s..e];
        found.push(raw.to_owned());
        found.push(percent_decode(raw));
    }
    let mut secrets = SECRETS.lock().unwrap_or_else(|p| p.into_inner());
    for s in found {
        if s.len() >= MIN_SCRUBBED && !secrets.contains(&s) {
            secrets.push(s);
        }
    }
    // Longest first: a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every registered secret replaced by `***`.
pub(crate) fn scrub(text: &str) -> String {
    let secrets = SECRETS.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = text.to_owned();
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://:***@host:6379/0"
        );
        assert_eq!(
            redact("rediss://app:p%40ss@h:1?x=1"),
            "rediss://app:***@h:1?x=1"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("redis://user@host"), "redis://user@host");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=topsecret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn the_exported_url_has_no_password() {
        assert_eq!(
            without_password("redis://:s3cret@host:1/0"),
            "redis://host:1/0"
        );
        assert_eq!(
            without_password("rediss://app:s3cret@host:1"),
            "rediss://app@host:1"
        );
        assert_eq!(without_password("redis://host"), "redis://host");
        assert_eq!(
            without_password("unix:///r.sock?pass=secret&db=2"),
            "unix:///r.sock?db=2"
        );
        assert_eq!(
            without_password("unix:///r.sock?db=2&pass=secret"),
            "unix:///r.sock?db=2"
        );
        assert_eq!(
            without_password("unix:///r.sock?pass=secret"),
            "unix:///r.sock"
        );
    }

    #[test]
    fn registered_secrets_are_scrubbed_from_any_text() {
        register_url("redis://:hunter%2122@h");
        assert_eq!(
            scrub("auth failed for hunter!22 (hunter%2122)"),
            "auth failed for *** (***)"
        );
    }
}
