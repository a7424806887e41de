//! The one duration syntax of the configuration.
//!
//! Every timeout key of every table accepts:
//!
//! - a string of numbers with units, spaces allowed around them:
//!   `"250ms"`, `"60s"`, `"5m"`, `"2h4m"`, `"1h 30m"`,
//!   `"1d"` (units `us`, `ms`, `s`, `m`, `h`, `d`; no fractions: write
//!   `"1500ms"`, not `"1.5s"`; `us`, microseconds, for the few keys that
//!   count below a millisecond, such as `[tun] busy-poll`);
//! - Jool's clock form `"HH:MM:SS"` or `"MM:SS"` (`"02:04:00"`);
//! - a bare integer, or a string of digits, counting seconds (`300`).
//!
//! Keys that used to carry their unit in their name (`timeout-ms`,
//! `timeout-secs`) are kept as deprecated aliases (see [`crate::alias`]);
//! a bare integer under one of them keeps counting that unit.
//!
//! Use [`deserialize`] / [`serialize`] as `#[serde(with = "confval::duration")]`
//! on a [`Duration`] field, or [`secs`] as `deserialize_with` on a field that
//! counts whole seconds.

use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// The units, with their length in microseconds.
const UNITS: [(&str, u64); 6] =
    [("us", 1), ("ms", 1_000), ("s", 1_000_000), ("m", 60_000_000), ("h", 3_600_000_000), ("d", 86_400_000_000)];

/// What is wrong with a duration; the message quotes the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError(String);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DurationError {}

fn err(s: &str, why: impl fmt::Display) -> DurationError {
    DurationError(format!("`{s}` is not a duration: {why} (write e.g. \"250ms\", \"60s\", \"5m\", \"2h4m\")"))
}

/// Parse the text forms (see the module documentation).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(err(text, "it is empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = s.parse().map_err(|_| err(text, "too large"))?;
        return Ok(Duration::from_secs(n));
    }
    if s.contains(':') {
        return parse_clock(text, s);
    }
    let mut us: u64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err(text, "a number must come before each unit"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| err(text, "too large"))?;
        rest = rest[digits..].trim_start();
        let ulen = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..ulen];
        let Some((_, per)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(match unit {
                "" if rest.starts_with('.') => err(text, "fractions are not accepted, use a smaller unit"),
                "" => err(text, "a unit must follow each number (us, ms, s, m, h or d)"),
                u => err(text, format_args!("unknown unit `{u}` (use us, ms, s, m, h or d)")),
            });
        };
        us = n.checked_mul(*per).and_then(|v| v.checked_add(us)).ok_or_else(|| err(text, "too large"))?;
        rest = rest[ulen..].trim_start();
    }
    Ok(Duration::from_micros(us))
}

/// Jool's `"HH:MM:SS"` (or `"MM:SS"`).
fn parse_clock(text: &str, s: &str) -> Result<Duration, DurationError> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() > 3 {
        return Err(err(text, "a clock time is HH:MM:SS"));
    }
    let mut total = 0u64;
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(text, "a clock time is HH:MM:SS"));
        }
        let v: u64 = p.parse().map_err(|_| err(text, "too large"))?;
        if i > 0 && v >= 60 {
            return Err(err(text, "minutes and seconds must be below 60"));
        }
        total = total.checked_mul(60).and_then(|t| t.checked_add(v)).ok_or_else(|| err(text, "too large"))?;
    }
    Ok(Duration::from_secs(total))
}

/// The canonical spelling: `"2h4m"`, `"1m"`, `"1500ms"`, `"50us"`, `"0s"`.
/// It [`parse`]s back to the same duration (to the microsecond).
pub fn format(d: Duration) -> String {
    let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
    if us == 0 {
        return "0s".into();
    }
    if !us.is_multiple_of(1_000) {
        return format!("{us}us");
    }
    if !us.is_multiple_of(1_000_000) {
        return format!("{}ms", us / 1_000);
    }
    let mut out = String::new();
    let mut left = us;
    for (u, per) in UNITS.iter().rev().filter(|(u, _)| *u != "ms" && *u != "us") {
        if left >= *per {
            out.push_str(&format!("{}{u}", left / per));
            left %= per;
        }
    }
    out
}

/// A number or a string, as TOML (or any serde format) gives it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Secs(u64),
    Text(String),
}

/// Serde: a [`Duration`] in the one syntax (a bare integer counts seconds).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match Raw::deserialize(d).map_err(|_| {
        serde::de::Error::custom("expected a duration: a string such as \"250ms\", \"60s\", \"5m\", or whole seconds")
    })? {
        Raw::Secs(n) => Ok(Duration::from_secs(n)),
        Raw::Text(s) => parse(&s).map_err(serde::de::Error::custom),
    }
}

/// Serde: a [`Duration`] written back in its [canonical](format()) spelling.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// Serde: a duration in whole seconds, for keys that count seconds
/// (`"5m"` is 300; `"1500ms"` is refused).
pub fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = deserialize(d)?;
    if v.subsec_nanos() != 0 {
        return Err(serde::de::Error::custom(format_args!(
            "`{}` is not a whole number of seconds, which this key counts",
            format(v)
        )));
    }
    Ok(v.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> u64 {
        parse(s).unwrap_or_else(|e| panic!("{e}")).as_millis() as u64
    }

    #[test]
    fn units_and_sums() {
        assert_eq!(ms("250ms"), 250);
        assert_eq!(ms("60s"), 60_000);
        assert_eq!(ms("5m"), 300_000);
        assert_eq!(ms("2h4m"), 7_440_000);
        assert_eq!(ms("2h 4m"), 7_440_000);
        assert_eq!(ms(" 1m30s "), 90_000);
        assert_eq!(ms("1s500ms"), 1_500);
        assert_eq!(ms("1d"), 86_400_000);
        assert_eq!(ms("5 m 3 s"), 303_000);
        assert_eq!(ms("0s"), 0);
    }

    #[test]
    fn bare_numbers_are_seconds() {
        assert_eq!(ms("300"), 300_000);
        assert_eq!(ms("0"), 0);
    }

    #[test]
    fn jool_clock_form() {
        assert_eq!(ms("02:04:00"), 7_440_000);
        assert_eq!(ms("00:05:00"), 300_000);
        assert_eq!(ms("5:00"), 300_000);
        for bad in ["1:60", "1:2:60", "1:2:3:4", "1::2", "a:00"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = |s: &str| parse(s).unwrap_err().to_string();
        assert!(e("5M").contains("unknown unit `M`"), "{}", e("5M"));
        assert!(e("5min").contains("unknown unit `min`"));
        assert!(e("1.5s").contains("fractions"));
        assert!(e("m").contains("a number must come before"));
        assert!(e("5 5s").contains("a unit must follow"));
        assert!(e("").contains("empty"));
        assert!(e("99999999999999999999d").contains("too large"));
        assert!(e("999999999999999d").contains("too large"));
        assert!(e("-5s").contains("a number must come before"));
        assert!(e("x").starts_with("`x` is not a duration"));
    }

    #[test]
    fn canonical_spelling_round_trips() {
        for (d, s) in
            [(0, "0s"), (250, "250ms"), (1_500, "1500ms"), (60_000, "1m"), (7_440_000, "2h4m"), (90_000, "1m30s")]
        {
            assert_eq!(format(Duration::from_millis(d)), s);
            assert_eq!(ms(s), d);
        }
        assert_eq!(format(Duration::from_secs(86_400 + 1)), "1d1s");
    }

    #[test]
    fn microseconds_for_short_keys() {
        assert_eq!(parse("50us").unwrap(), Duration::from_micros(50));
        assert_eq!(parse("1ms 250us").unwrap(), Duration::from_micros(1_250));
        for (d, s) in [(50, "50us"), (1_250, "1250us"), (2_000, "2ms"), (3_000_000, "3s")] {
            assert_eq!(format(Duration::from_micros(d)), s);
            assert_eq!(parse(s).unwrap(), Duration::from_micros(d));
        }
        assert!(parse("5µs").unwrap_err().to_string().contains("a unit must follow"));
    }

    #[test]
    fn serde_forms() {
        #[derive(Deserialize, serde::Serialize, Debug)]
        struct T {
            #[serde(with = "crate::duration")]
            d: Duration,
        }
        #[derive(Deserialize, Debug)]
        struct S {
            #[serde(deserialize_with = "secs")]
            s: u64,
        }
        let t: T = toml::from_str("d = 90").unwrap();
        assert_eq!(t.d, Duration::from_secs(90));
        let t: T = toml::from_str("d = \"1500ms\"").unwrap();
        assert_eq!(t.d, Duration::from_millis(1500));
        assert_eq!(toml::to_string(&t).unwrap().trim(), "d = \"1500ms\"");
        assert!(toml::from_str::<T>("d = -1").is_err());
        let e = toml::from_str::<T>("d = \"5x\"").unwrap_err().to_string();
        assert!(e.contains("unknown unit `x`"), "{e}");
        assert!(toml::from_str::<T>("d = true").unwrap_err().to_string().contains("expected a duration"));
        assert_eq!(toml::from_str::<S>("s = \"5m\"").unwrap().s, 300);
        assert_eq!(toml::from_str::<S>("s = 7").unwrap().s, 7);
        let e = toml::from_str::<S>("s = \"1500ms\"").unwrap_err().to_string();
        assert!(e.contains("whole number of seconds"), "{e}");
    }
}
