//! `[alg]`: the IMS-ALG (SIP/SDP gateway between the IPv6 and the IPv4
//! realm), read by the `alg` crate's own schema ([`::alg::Config`], embedded
//! as it is) and checked here: the table on its own (`check`), and what a
//! reload may change in a running ALG (`reload`). Its checks against the
//! other tables (`[trgw]` for in-process media, the addresses the TUN
//! device takes, the admin and control listeners) are in
//! [`crate::validate`].

use super::{Error, ErrorKind};

/// Every key of the `[alg]` table (the example mentions each one).
pub const ALG_KEYS: &[&str] = &[
    "listen-v6",
    "listen-v4",
    "advertise-v6",
    "advertise-v4",
    "tcp",
    "contact",
    "media",
    "media-v6-interface",
    "media-v4-interface",
    "max-message",
    "rate-limit",
    "dialog-timeout",
    "t1",
    "max-transactions",
    "max-connections",
    "max-outbound-connections",
    "client-prefix-length",
    "client-share",
    "max-state-bytes",
    "max-parked-bytes",
    "max-dns-lookups",
    "dns-timeout",
    "dns-servers",
    "tcp-idle-timeout",
    "tcp-message-timeout",
    "next-hop-allow",
    "next-hop-deny",
    "route",
    "ng",
];

/// The table's own checks ([`alg::Config::check`]), as a configuration
/// error naming the key: the crate's messages start with `[alg] KEY`.
pub(crate) fn check(c: &::alg::Config) -> Result<(), Error> {
    c.check().map_err(|m| {
        let (key, msg) = split_key(&m);
        Error::new(ErrorKind::Invalid, key, msg)
    })
}

/// `"[alg] key rest"` → (`"[alg] key"`, `"rest"`); other text as it is.
fn split_key(m: &str) -> (Option<String>, String) {
    let Some(rest) = m.strip_prefix("[alg] ") else { return (None, m.to_string()) };
    let key: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-').collect();
    if key.is_empty() || !ALG_KEYS.contains(&key.as_str()) {
        return (Some("[alg]".into()), rest.to_string());
    }
    (Some(format!("[alg] {key}")), rest[key.len()..].trim_start().to_string())
}

/// Whether a reload from `cur` to `new` can be applied to the running
/// daemon: `[alg]` added or removed, or a key that live dialogs depend on
/// changed ([`alg::Config::restart_needed`]), needs a restart; routes,
/// limits, timers and the Contact mode are applied to new requests.
pub fn reload(cur: Option<&::alg::Config>, new: Option<&::alg::Config>) -> Result<(), String> {
    match (cur, new) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) => match a.restart_needed(b) {
            None => Ok(()),
            Some(k) => Err(format!("[alg] {k} changed: restart v6gate to apply (live calls use it)")),
        },
        (None, Some(_)) => Err("[alg] added: restart v6gate to start the ALG".into()),
        (Some(_), None) => Err("[alg] removed: restart v6gate to stop the ALG (it would drop the calls)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn errors_name_the_alg_key_with_position() {
        let e = Config::parse("[alg]\nlisten-v6 = \"[::1]:5060\"\nbogus = 1\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownKey);
        assert_eq!(e.key(), Some("[alg] bogus"));
        assert_eq!(e.position().map(|p| p.0), Some(3));
        let e = Config::parse("[alg]\nrate-limit = \"many\"\n").unwrap_err();
        assert_eq!(e.key(), Some("[alg] rate-limit"), "{e}");
        let c = Config::parse("[alg]\nlisten-v6 = \"192.0.2.1:5060\"\nmedia = \"none\"\n").unwrap();
        let e = c.check().unwrap_err();
        assert_eq!(e.key(), Some("[alg] listen-v6"), "{e}");
        assert!(e.message().contains("IPv6"), "{e}");
    }

    #[test]
    fn key_split() {
        assert_eq!(split_key("[alg] t1 must be ..."), (Some("[alg] t1".into()), "must be ...".into()));
        assert_eq!(
            split_key("[alg] route domain `x` is not a domain"),
            (Some("[alg] route".into()), "domain `x` is not a domain".into())
        );
        assert_eq!(split_key("other"), (None, "other".into()));
    }

    #[test]
    fn reload_rules() {
        let a = ::alg::Config::default();
        let mut b = a.clone();
        b.rate_limit = 1;
        assert!(reload(Some(&a), Some(&b)).is_ok());
        assert!(reload(None, None).is_ok());
        b.tcp = false;
        assert!(reload(Some(&a), Some(&b)).unwrap_err().contains("[alg] tcp changed"));
        assert!(reload(None, Some(&a)).unwrap_err().contains("added"));
        assert!(reload(Some(&a), None).unwrap_err().contains("removed"));
    }
}
