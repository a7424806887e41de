//! Directive lines of `v6gate translate` (lines starting with `@`):
//!
//! - `@advance DURATION`: move the offline clock forward and run NAT64
//!   expiry. DURATION is seconds (`6`, `0.5`) or a duration in the
//!   configuration's syntax (`"250ms"`, `6s`, `5m`, `2h4m`).
//! - `@set KEY VALUE`: change one `[siit]` or `[nat64]` setting as a
//!   reload would (see [`super::Offline::set`]).

use core::time::Duration;

/// One directive.
#[derive(Debug, Clone, PartialEq)]
pub enum Directive {
    /// `@advance`.
    Advance(Duration),
    /// `@set KEY VALUE`.
    Set {
        /// `siit.KEY`, `nat64.KEY` or a bare key.
        key: String,
        /// The rest of the line.
        value: String,
    },
}

/// The longest `@advance` accepted (about 100 years): a clock in
/// nanoseconds has room for it, and no lifetime is longer.
pub const MAX_ADVANCE: Duration = Duration::from_secs(100 * 365 * 86_400);

const USAGE: &str = "known: @advance SECONDS, @set KEY VALUE";

/// Parse a directive line (starting with `@`, surrounding blanks removed).
pub fn parse(line: &str) -> Result<Directive, String> {
    let line = line.trim();
    let body = line.strip_prefix('@').ok_or_else(|| format!("`{line}` is not a directive ({USAGE})"))?;
    let (name, rest) = match body.split_once(char::is_whitespace) {
        Some((n, r)) => (n, r.trim()),
        None => (body, ""),
    };
    match name {
        "advance" => {
            if rest.is_empty() {
                return Err("@advance needs a duration: @advance SECONDS (e.g. @advance 6, @advance 250ms)".into());
            }
            advance(rest).map(Directive::Advance).map_err(|m| format!("@advance {rest}: {m}"))
        }
        "set" => {
            let Some((key, value)) = rest.split_once(char::is_whitespace) else {
                return Err(format!(
                    "@set needs a key and a value: @set KEY VALUE (e.g. @set nat64.udp-timeout 10s), got `{line}`"
                ));
            };
            Ok(Directive::Set { key: key.to_string(), value: value.trim().to_string() })
        }
        _ => Err(format!("unknown directive `@{name}` ({USAGE})")),
    }
}

fn advance(text: &str) -> Result<Duration, String> {
    let t = text.trim().trim_matches('"');
    let d = if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err("not a duration of zero or more seconds".into());
        }
        Duration::try_from_secs_f64(secs).map_err(|_| "too long".to_string())?
    } else {
        confval::duration::parse(t).map_err(|e| e.to_string())?
    };
    if d > MAX_ADVANCE {
        return Err(format!("longer than {} days", MAX_ADVANCE.as_secs() / 86_400));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_takes_seconds_and_durations() {
        let a = |s: &str| parse(s).unwrap();
        assert_eq!(a("@advance 6"), Directive::Advance(Duration::from_secs(6)));
        assert_eq!(a("  @advance   0.5  "), Directive::Advance(Duration::from_millis(500)));
        assert_eq!(a("@advance 250ms"), Directive::Advance(Duration::from_millis(250)));
        assert_eq!(a("@advance \"2h4m\""), Directive::Advance(Duration::from_secs(7440)));
        assert_eq!(a("@advance 0"), Directive::Advance(Duration::ZERO));
        for bad in ["@advance", "@advance -1", "@advance soon", "@advance NaN", "@advance inf", "@advance 1e30"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("@advance 40000d").is_err());
        assert!(parse("@advance 36500d").is_ok());
    }

    #[test]
    fn set_takes_a_key_and_the_rest_of_the_line() {
        assert_eq!(
            parse("@set nat64.pool4 [\"192.0.2.0/30\", \"192.0.2.8/31\"]").unwrap(),
            Directive::Set { key: "nat64.pool4".into(), value: "[\"192.0.2.0/30\", \"192.0.2.8/31\"]".into() }
        );
        assert_eq!(
            parse("@set udp-timeout\t10s").unwrap(),
            Directive::Set { key: "udp-timeout".into(), value: "10s".into() }
        );
        assert!(parse("@set udp-timeout").unwrap_err().contains("@set KEY VALUE"));
        assert!(parse("@set").is_err());
        assert!(parse("@reload").unwrap_err().contains("unknown directive `@reload`"));
        assert!(parse("@").is_err());
    }
}
