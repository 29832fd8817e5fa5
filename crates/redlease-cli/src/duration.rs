//! Durations on the command line: `500ms`, `5s`, `1.5s`, `2m`, `1h`, `1m30s`.

use std::time::Duration;

/// Parses a duration: one or more `<number><unit>` parts (units `ms`, `s`, `m`, `h`; the
/// number may have a fraction). The result must be a whole number of milliseconds (Redis
/// `PX` takes milliseconds).
pub(crate) fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration (expected e.g. 5s, 500ms, 2m)".to_owned());
    }
    if s.bytes().all(|b| b == b'0') {
        // Zero needs no unit.
        return Ok(Duration::ZERO);
    }
    let mut total_us: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num.matches('.').count() > 1 || num == "." {
            return Err(format!(
                "{input:?} is not a duration (expected e.g. 5s, 500ms, 1.5s, 2m, 1m30s)"
            ));
        }
        let unit_len = tail
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(tail.len());
        let (unit, after) = tail.split_at(unit_len);
        let unit_us: u128 = match unit {
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            "" => {
                return Err(format!(
                    "{input:?} has no unit: add one of ms, s, m, h (e.g. {num}s)"
                ));
            }
            other => {
                return Err(format!(
                    "{input:?}: unknown unit {other:?} (use ms, s, m or h)"
                ));
            }
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 = if int.is_empty() {
            0
        } else {
            int.parse()
                .map_err(|_| format!("{input:?}: the number is too large"))?
        };
        // The fraction in microseconds of the unit, exactly (up to 9 digits considered).
        let mut frac_us: u128 = 0;
        if !frac.is_empty() {
            if frac.len() > 9 {
                return Err(format!("{input:?}: too many decimals"));
            }
            let digits: u128 = frac
                .parse()
                .map_err(|_| format!("{input:?} is not a duration"))?;
            let scale = 10u128.pow(u32::try_from(frac.len()).unwrap_or(9));
            let scaled = digits * unit_us;
            if !scaled.is_multiple_of(scale) {
                return Err(format!("{input:?} is not a whole number of milliseconds"));
            }
            frac_us = scaled / scale;
        }
        total_us = int
            .checked_mul(unit_us)
            .and_then(|v| v.checked_add(frac_us))
            .and_then(|v| v.checked_add(total_us))
            .ok_or_else(|| format!("{input:?}: the duration is too large"))?;
        rest = after;
    }
    if !total_us.is_multiple_of(1_000) {
        return Err(format!("{input:?} is not a whole number of milliseconds"));
    }
    let ms = u64::try_from(total_us / 1_000)
        .map_err(|_| format!("{input:?}: the duration is too large"))?;
    Ok(Duration::from_millis(ms))
}

/// How long `lock` waits for the lock: a duration, or until obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Give up after this long (zero: a single attempt).
    For(Duration),
    /// Block until obtained (`forever`), like `flock` without `-w`.
    Forever,
}

/// The wait handed to the library for `forever`: ten years, which no attempt outlives (the
/// library's deadlines saturate, so it cannot overflow either).
pub(crate) const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Wait {
    /// The library's wait.
    pub(crate) fn duration(self) -> Duration {
        match self {
            Wait::For(d) => d,
            Wait::Forever => FOREVER,
        }
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::For(d) => f.write_str(&show(*d)),
            Wait::Forever => f.write_str("forever"),
        }
    }
}

/// Parses `lock --wait`: `forever` (block until obtained), a bare number of seconds as
/// `flock -w` takes it (`2`, `2.5`, `0`), or a duration as [`parse`] reads it (`500ms`, `1m`).
pub(crate) fn parse_wait(input: &str) -> Result<Wait, String> {
    let s = input.trim();
    if s.eq_ignore_ascii_case("forever") {
        return Ok(Wait::Forever);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return parse(&format!("{s}s")).map(Wait::For).map_err(|e| {
            format!("--wait {input:?}: {e} (seconds, a duration such as 500ms, or forever)")
        });
    }
    parse(s)
        .map(Wait::For)
        .map_err(|e| format!("{e}, or forever"))
}

/// A duration for humans: `1.5s`, `250ms`, `2m`.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_owned()
    } else if ms < 1_000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) && ms >= 60_000 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn accepts_units_fractions_and_compounds() {
        assert_eq!(parse("500ms"), Ok(ms(500)));
        assert_eq!(parse("5s"), Ok(ms(5_000)));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse(".25s"), Ok(ms(250)));
        assert_eq!(parse("2m"), Ok(ms(120_000)));
        assert_eq!(parse("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse(" 0s "), Ok(ms(0)));
        assert_eq!(parse("0"), Ok(ms(0)));
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        for bad in [
            "",
            "5",
            "5x",
            "s",
            "1..5s",
            "1.0001s",
            "0.5ms",
            "5 s",
            "-1s",
            "1e3ms",
            "ms5",
            "99999999999999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse("5").unwrap_err().contains("no unit"));
    }

    #[test]
    fn waits_take_seconds_durations_and_forever() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("FOREVER"), Ok(Wait::Forever));
        assert_eq!(parse_wait("2"), Ok(Wait::For(ms(2_000))));
        assert_eq!(parse_wait("2.5"), Ok(Wait::For(ms(2_500))));
        assert_eq!(parse_wait(".25"), Ok(Wait::For(ms(250))));
        assert_eq!(parse_wait("0"), Ok(Wait::For(ms(0))));
        assert_eq!(parse_wait("0.0"), Ok(Wait::For(ms(0))));
        assert_eq!(parse_wait("300ms"), Ok(Wait::For(ms(300))));
        assert_eq!(parse_wait("1m30s"), Ok(Wait::For(ms(90_000))));
        for bad in ["", "-1", "2.0005", "1..2", "never", "5x", "inf"] {
            assert!(parse_wait(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(Wait::Forever.duration(), FOREVER);
        assert_eq!(Wait::Forever.to_string(), "forever");
        assert_eq!(Wait::For(ms(2_500)).to_string(), "2.500s");
    }

    #[test]
    fn shows_compactly() {
        assert_eq!(show(ms(250)), "250ms");
        assert_eq!(show(ms(5_000)), "5s");
        assert_eq!(show(ms(1_500)), "1.500s");
        assert_eq!(show(ms(120_000)), "2m");
    }
}
