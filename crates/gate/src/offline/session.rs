//! What an offline run translates with: the engines a configuration builds
//! (as `v6gate run` builds them, [`crate::daemon::engine`]: `[siit]`,
//! `[nat64]`, or both with the daemon's dispatch), one instance for the
//! whole run, an offline clock, and the changes of `@set`, applied as a
//! reload applies a changed file.
//!
//! The clock starts at 0 and moves only when told ([`Offline::advance`],
//! [`Offline::advance_to`]); each move runs NAT64 expiry at the new time,
//! and the packets expiry emits (Port Unreachable for held SYNs nobody
//! answered) are handed back. Sessions, BIB entries and held SYNs live as
//! long as the run.

use core::time::Duration;

use xlat::{Out, Verdict};

use crate::config::{Config, Error, ErrorKind, SIIT_KEYS};
use crate::daemon::engine::{EngineKind, Engines};

/// The tables `@set` changes.
pub const SET_TABLES: &[&str] = &["siit", "nat64"];

/// One offline translator: engines, clock, configuration.
#[derive(Debug)]
pub struct Offline {
    cfg: Config,
    /// The configuration file as TOML, which `@set` edits and parses again.
    doc: toml::Table,
    engines: Engines,
    now_ns: u64,
}

/// `e` as one line without the file and position (`@set` edits a copy of
/// the file, whose positions mean nothing to the operator).
fn describe(e: &Error) -> String {
    match e.key() {
        Some(k) => format!("{k}: {}", e.message()),
        None => e.message().to_string(),
    }
}

impl Offline {
    /// Build from a whole configuration file's `text` (the daemon tables,
    /// `[dns64]` and `[trgw]` are ignored). Needs `[siit]` or `[nat64]`.
    pub fn parse(text: &str) -> Result<Offline, Error> {
        let cfg = Config::parse(text)?;
        cfg.check()?;
        Offline::new(cfg, text)
    }

    /// Build from a checked configuration and the text it was parsed from.
    pub fn new(cfg: Config, text: &str) -> Result<Offline, Error> {
        if cfg.siit.is_none() && cfg.nat64.is_none() {
            return Err(Error::new(
                ErrorKind::Missing,
                Some("[siit]".into()),
                "table missing: the offline translator needs [siit] or [nat64]",
            )
            .in_file(cfg.origin()));
        }
        let doc = text
            .parse::<toml::Table>()
            .map_err(|e| Error::new(ErrorKind::Syntax, None, e.message().replace('\n', "; ")))?;
        let engines = Engines::build(&cfg, 1, 1, None, 0)?;
        Ok(Offline { cfg, doc, engines, now_ns: 0 })
    }

    /// True when a `[nat64]` table keeps state across packets.
    pub fn stateful(&self) -> bool {
        self.engines.nat64.is_some()
    }

    /// The offline clock.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns)
    }

    /// The configuration in force (after the `@set`s so far).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The engines in force.
    pub fn engines(&self) -> &Engines {
        &self.engines
    }

    /// Which engine owns `pkt` (the daemon's dispatch).
    pub(crate) fn owner(&self, pkt: &[u8]) -> EngineKind {
        self.engines.owner(pkt)
    }

    /// Translate one packet at the current time.
    pub fn translate(&mut self, pkt: &[u8], out: &mut Out) -> Verdict {
        let kind = self.engines.owner(pkt);
        self.engines.translate_with(kind, pkt, self.now_ns, out)
    }

    /// Move the clock forward by `d` and run expiry; returns what expiry
    /// emits (complete IP packets).
    pub fn advance(&mut self, d: Duration) -> Vec<Vec<u8>> {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.advance_to(self.now_ns.saturating_add(ns))
    }

    /// Move the clock to `t_ns` (never backwards) and run expiry.
    pub fn advance_to(&mut self, t_ns: u64) -> Vec<Vec<u8>> {
        self.now_ns = self.now_ns.max(t_ns);
        match &self.engines.nat64 {
            Some(n) => n.expire(self.now_ns).icmp,
            None => Vec::new(),
        }
    }

    /// `@set KEY VALUE`: change one key of `[siit]` or `[nat64]` and apply
    /// the result as a reload does (a new configuration, checked, new
    /// engines built from it carrying the NAT64 sessions and BIB over).
    /// KEY is `siit.KEY`, `nat64.KEY` or a bare key of the one table that
    /// has it; VALUE is a TOML value (`1280`, `true`, `["192.0.2.0/30"]`,
    /// `"10s"`), or bare text taken as a string (`10s`, `64:ff9b::/96`).
    /// On error nothing changes.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (table, k) = self.resolve(key)?;
        let v = toml_value(value)?;
        let mut doc = self.doc.clone();
        let Some(t) = doc.get_mut(table).and_then(toml::Value::as_table_mut) else {
            return Err(format!("the configuration has no [{table}] table"));
        };
        t.insert(k.to_string(), v);
        let text = toml::to_string(&doc).map_err(|e| format!("{key}: {e}"))?;
        let cfg = Config::parse(&text).map_err(|e| describe(&e))?;
        let generation = self.engines.generation + 1;
        let engines =
            Engines::build(&cfg, generation, 1, Some(&self.engines), self.now_ns).map_err(|e| describe(&e))?;
        self.doc = doc;
        self.cfg = cfg;
        self.engines = engines;
        Ok(())
    }

    /// The table and key `key` names.
    fn resolve<'k>(&self, key: &'k str) -> Result<(&'static str, &'k str), String> {
        let present = |t: &str| match t {
            "siit" => self.cfg.siit.is_some(),
            _ => self.cfg.nat64.is_some(),
        };
        if let Some((t, k)) = key.split_once('.') {
            let Some(&table) = SET_TABLES.iter().find(|x| **x == t) else {
                return Err(format!("`{key}`: @set changes keys of [siit] and [nat64] (write siit.KEY or nat64.KEY)"));
            };
            if k.is_empty() {
                return Err(format!("`{key}`: no key after `{t}.`"));
            }
            if !present(table) {
                return Err(format!("the configuration has no [{table}] table"));
            }
            return Ok((table, k));
        }
        let knows = |t: &str| match t {
            "siit" => SIIT_KEYS.contains(&key),
            _ => nat64::config::KEYS.contains(&key),
        };
        let tables: Vec<&'static str> = SET_TABLES.iter().copied().filter(|t| present(t)).collect();
        let candidates: Vec<&'static str> = tables.iter().copied().filter(|t| knows(t)).collect();
        match (tables.as_slice(), candidates.as_slice()) {
            // One table: the key is its (an unknown one is refused by it).
            ([only], _) => Ok((only, key)),
            (_, [one]) => Ok((one, key)),
            (_, []) => Err(format!("unknown key `{key}`: neither [siit] nor [nat64] has it")),
            _ => Err(format!("`{key}` is a key of [siit] and of [nat64]: write siit.{key} or nat64.{key}")),
        }
    }
}

/// A TOML value as `@set` takes it: TOML syntax, else the text as a string.
fn toml_value(text: &str) -> Result<toml::Value, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("no value".into());
    }
    match format!("v = {t}").parse::<toml::Table>() {
        Ok(mut one) => Ok(one.remove("v").unwrap_or_else(|| toml::Value::String(t.to_string()))),
        Err(_) if t.starts_with(['"', '\'', '[', '{']) => Err(format!("`{t}` is not a TOML value")),
        Err(_) => Ok(toml::Value::String(t.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &str =
        "[siit]\npool6 = \"64:ff9b:1::/96\"\n[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"192.0.2.1/32\"]\n";

    #[test]
    fn values_are_toml_or_text() {
        assert_eq!(toml_value("1280").unwrap(), toml::Value::Integer(1280));
        assert_eq!(toml_value("true").unwrap(), toml::Value::Boolean(true));
        assert_eq!(toml_value("10s").unwrap(), toml::Value::String("10s".into()));
        assert_eq!(toml_value("\"10s\"").unwrap(), toml::Value::String("10s".into()));
        assert_eq!(toml_value("64:ff9b::/96").unwrap(), toml::Value::String("64:ff9b::/96".into()));
        assert!(toml_value("[\"192.0.2.0/30\"]").unwrap().is_array());
        assert!(toml_value("[1, ").is_err());
        assert!(toml_value("  ").is_err());
    }

    #[test]
    fn keys_resolve_to_one_table() {
        let mut o = Offline::parse(BOTH).unwrap();
        assert_eq!(o.resolve("udp-timeout").unwrap(), ("nat64", "udp-timeout"));
        assert_eq!(o.resolve("ipv4-mtu").unwrap(), ("siit", "ipv4-mtu"));
        assert_eq!(o.resolve("siit.pool6").unwrap(), ("siit", "pool6"));
        let e = o.resolve("pool6").unwrap_err();
        assert!(e.contains("siit.pool6 or nat64.pool6"), "{e}");
        assert!(o.resolve("bogus").unwrap_err().contains("unknown key `bogus`"));
        assert!(o.resolve("tun.mtu").unwrap_err().contains("[siit] and [nat64]"));
        assert!(o.resolve("nat64.").is_err());
        o.set("nat64.udp-timeout", "10s").unwrap();
        assert_eq!(o.config().nat64.as_ref().unwrap().udp_timeout.0, 10);
        assert_eq!(o.engines().generation, 2);
        // Refused changes leave everything as it was.
        let e = o.set("nat64.udp-timeout", "0").unwrap_err();
        assert!(e.starts_with("[nat64] udp-timeout: "), "{e}");
        let e = o.set("nat64.udp-timeout", "100000000000000").unwrap_err();
        assert!(e.contains("[nat64] udp-timeout") && e.contains("above the maximum"), "{e}");
        let e = o.set("nat64.udp-timeout", "soon").unwrap_err();
        assert!(e.contains("[nat64] udp-timeout") && e.contains("soon"), "{e}");
        let e = o.set("siit.pool7", "1").unwrap_err();
        assert!(e.contains("[siit] pool7") && e.contains("unknown key"), "{e}");
        assert_eq!(o.config().nat64.as_ref().unwrap().udp_timeout.0, 10);
        assert_eq!(o.engines().generation, 2);
        // Only [nat64]: bare keys belong to it; [siit] is not there.
        let mut n = Offline::parse("[nat64]\npool4 = [\"192.0.2.1/32\"]\n").unwrap();
        assert!(n.stateful());
        assert!(n.set("ipv4-mtu", "1400").unwrap_err().contains("[nat64] ipv4-mtu"));
        assert!(n.set("siit.ipv4-mtu", "1400").unwrap_err().contains("no [siit] table"));
        assert!(Offline::parse("[dns64]\nupstream = [\"192.0.2.53\"]\n").is_err());
    }
}
