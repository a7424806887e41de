//! Other spellings of keys and values: old ones kept working with a
//! deprecation warning, and other products' names (Jool's) accepted as
//! first-class synonyms, without one.
//!
//! The rewrite runs on the parsed TOML document (spans kept, so errors in
//! a rewritten value still point at the operator's line), before the table
//! is deserialised: each table's struct knows only the current names, and
//! the old ones live in one list per table next to it.

use core::fmt;
use core::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::duration;

/// One old spelling of a key or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alias {
    /// Key `old` is now `new`, a duration: a bare integer under `old`
    /// counted `unit` (`"ms"` or `"s"`), the unit its name carried.
    Duration {
        /// The old key, e.g. `timeout-ms`.
        old: &'static str,
        /// The current key, e.g. `timeout`.
        new: &'static str,
        /// Unit of a bare integer under `old`.
        unit: &'static str,
    },
    /// `name` is another product's name for `key`, accepted as an equal
    /// (not deprecated, no warning), so its operators can carry settings
    /// over: e.g. Jool's `zeroize-traffic-class` for `reset-traffic-class`.
    Synonym {
        /// The other name, e.g. `zeroize-traffic-class`.
        name: &'static str,
        /// v6gate's key, e.g. `reset-traffic-class`.
        key: &'static str,
        /// Whose name it is, for messages, e.g. `Jool`.
        of: &'static str,
    },
    /// Value `old` of `key` is now spelled `new`.
    Value {
        /// The key.
        key: &'static str,
        /// The old value, e.g. `epoll`.
        old: &'static str,
        /// The current value, e.g. `poll`.
        new: &'static str,
    },
}

/// An old spelling found in a configuration, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deprecation {
    /// The table, e.g. `trgw`.
    pub table: String,
    /// What was written, e.g. `io = "epoll"`.
    pub old: String,
    /// What to write instead, e.g. `io = "poll"`.
    pub new: String,
    /// Where in the text (the key or value).
    pub span: Range<usize>,
}

impl fmt::Display for Deprecation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {} is deprecated: write {}", self.table, self.old, self.new)
    }
}

/// Both a key and another name of it (old or synonym) are set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasError {
    /// The key at fault as the operator reads it, e.g. `[trgw] timeout-secs`.
    pub key: String,
    /// What is wrong.
    pub msg: String,
    /// Where in the text.
    pub span: Range<usize>,
}

impl fmt::Display for AliasError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.msg)
    }
}

impl std::error::Error for AliasError {}

/// How a value reads in TOML, for the messages.
fn show(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("{s:?}"),
        DeValue::Integer(i) => i.to_string(),
        DeValue::Boolean(b) => b.to_string(),
        _ => "...".into(),
    }
}

/// The [`Alias::Synonym`]s of `aliases` that table `[table]` of `doc` uses,
/// as (v6gate's key, the name written), so that errors about the key can
/// name it as the operator wrote it. Call before [`apply`].
pub fn synonyms_written<'a>(
    doc: &DeTable<'_>,
    table: &str,
    aliases: impl IntoIterator<Item = &'a Alias>,
) -> Vec<(&'static str, &'static str)> {
    let Some(DeValue::Table(t)) = doc.get(table).map(Spanned::get_ref) else {
        return Vec::new();
    };
    aliases
        .into_iter()
        .filter_map(|a| match *a {
            Alias::Synonym { name, key, .. } if t.contains_key(name) => Some((key, name)),
            _ => None,
        })
        .collect()
}

/// Rewrite the other spellings of `aliases` in table `[table]` of `doc` to
/// v6gate's; returns one [`Deprecation`] per rewrite of an old spelling, in
/// the order of `aliases` ([`Alias::Synonym`]s are rewritten silently). A
/// table that is absent or not a table is left alone (the deserialiser
/// reports it).
pub fn apply<'a>(
    doc: &mut DeTable<'_>,
    table: &str,
    aliases: impl IntoIterator<Item = &'a Alias>,
) -> Result<Vec<Deprecation>, AliasError> {
    let mut found = Vec::new();
    let Some(DeValue::Table(t)) = doc.get_mut(table).map(Spanned::get_mut) else {
        return Ok(found);
    };
    for a in aliases {
        match *a {
            Alias::Duration { old, new, unit } => {
                let Some((k, v)) = t.remove_entry(old) else { continue };
                let span = k.span();
                if t.contains_key(new) {
                    return Err(AliasError {
                        key: format!("[{table}] {old}"),
                        msg: format!("is the old name of `{new}`, which is set too: keep only `{new}`"),
                        span,
                    });
                }
                let vspan = v.span();
                let shown = show(v.get_ref());
                let value = match v.into_inner() {
                    // A bare integer keeps counting the unit the old name carried.
                    DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                        Ok(n) => DeValue::String(format!("{n}{unit}").into()),
                        Err(_) => DeValue::Integer(i),
                    },
                    other => other,
                };
                let hint = match &value {
                    DeValue::String(s) => {
                        duration::parse(s).map_or_else(|_| format!("{s:?}"), |d| format!("{:?}", duration::format(d)))
                    }
                    other => show(other),
                };
                found.push(Deprecation {
                    table: table.to_string(),
                    old: format!("{old} = {shown}"),
                    new: format!("{new} = {hint}"),
                    span: span.clone(),
                });
                t.insert(Spanned::new(span.clone(), new.into()), Spanned::new(vspan, value));
            }
            Alias::Synonym { name, key, of } => {
                let Some((k, v)) = t.remove_entry(name) else { continue };
                let span = k.span();
                if t.contains_key(key) {
                    return Err(AliasError {
                        key: format!("[{table}] {name}"),
                        msg: format!("is {of}'s name of `{key}`, which is set too: keep one of them"),
                        span,
                    });
                }
                t.insert(Spanned::new(span, key.into()), v);
            }
            Alias::Value { key, old, new } => {
                let Some(v) = t.get_mut(key) else { continue };
                let span = v.span();
                let is_old = matches!(v.get_ref(), DeValue::String(s) if s == old);
                if is_old {
                    *v = Spanned::new(span.clone(), DeValue::String(new.into()));
                    found.push(Deprecation {
                        table: table.to_string(),
                        old: format!("{key} = {old:?}"),
                        new: format!("{key} = {new:?}"),
                        span,
                    });
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALIASES: &[Alias] = &[
        Alias::Duration { old: "timeout-ms", new: "timeout", unit: "ms" },
        Alias::Duration { old: "wait-secs", new: "wait", unit: "s" },
        Alias::Value { key: "io", old: "epoll", new: "poll" },
        Alias::Synonym { name: "hold-time", key: "wait", of: "Jool" },
    ];

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct T {
        #[serde(default, with = "crate::duration")]
        timeout: core::time::Duration,
        #[serde(default, with = "crate::duration")]
        wait: core::time::Duration,
        #[serde(default)]
        io: Option<String>,
    }

    #[derive(serde::Deserialize, Debug)]
    struct File {
        x: T,
    }

    fn run(text: &str) -> Result<(T, Vec<Deprecation>), String> {
        let mut doc = DeTable::parse(text).map_err(|e| e.to_string())?;
        let d = apply(doc.get_mut(), "x", ALIASES).map_err(|e| e.to_string())?;
        let f: File = serde::Deserialize::deserialize(toml::de::Deserializer::from(doc)).map_err(|e| e.to_string())?;
        Ok((f.x, d))
    }

    #[test]
    fn old_keys_keep_their_unit_and_warn() {
        let (t, d) = run("[x]\ntimeout-ms = 1500\nwait-secs = 120\n").unwrap();
        assert_eq!(t.timeout, core::time::Duration::from_millis(1500));
        assert_eq!(t.wait, core::time::Duration::from_secs(120));
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].to_string(), "[x] timeout-ms = 1500 is deprecated: write timeout = \"1500ms\"");
        assert_eq!(d[1].to_string(), "[x] wait-secs = 120 is deprecated: write wait = \"2m\"");
        assert_eq!(d[0].span, 4..14, "points at the old key");
        // The old key also takes the new syntax.
        let (t, d) = run("[x]\ntimeout-ms = \"2s\"\n").unwrap();
        assert_eq!(t.timeout, core::time::Duration::from_secs(2));
        assert_eq!(d[0].new, "timeout = \"2s\"");
    }

    #[test]
    fn old_values_are_respelled() {
        let (t, d) = run("[x]\nio = \"epoll\"\n").unwrap();
        assert_eq!(t.io.as_deref(), Some("poll"));
        assert_eq!(d[0].to_string(), "[x] io = \"epoll\" is deprecated: write io = \"poll\"");
        let (t, d) = run("[x]\nio = \"poll\"\n").unwrap();
        assert_eq!(t.io.as_deref(), Some("poll"));
        assert!(d.is_empty());
    }

    #[test]
    fn current_spellings_are_untouched() {
        let (t, d) = run("[x]\ntimeout = 3\n").unwrap();
        assert_eq!(t.timeout, core::time::Duration::from_secs(3), "a bare integer under the new name is seconds");
        assert!(d.is_empty());
        assert!(run("[y]\nz = 1\n").is_err(), "other tables are left to the deserialiser");
    }

    #[test]
    fn synonyms_are_accepted_without_a_warning() {
        let (t, d) = run("[x]\nhold-time = \"5m\"\n").unwrap();
        assert_eq!(t.wait, core::time::Duration::from_secs(300));
        assert!(d.is_empty(), "a synonym is not deprecated: {d:?}");
        let e = run("[x]\nwait = 3\nhold-time = 4\n").unwrap_err();
        assert!(e.contains("[x] hold-time: is Jool's name of `wait`, which is set too: keep one of them"), "{e}");
        // An error in the value points at what the operator wrote.
        let text = "[x]\nhold-time = \"later\"\n";
        let mut doc = DeTable::parse(text).unwrap();
        assert_eq!(synonyms_written(doc.get_ref(), "x", ALIASES), [("wait", "hold-time")]);
        assert!(synonyms_written(doc.get_ref(), "y", ALIASES).is_empty());
        assert!(apply(doc.get_mut(), "x", ALIASES).unwrap().is_empty());
        let e = <File as serde::Deserialize>::deserialize(toml::de::Deserializer::from(doc)).unwrap_err();
        assert_eq!(e.span(), Some(16..23), "{e}");
    }

    #[test]
    fn old_and_new_together_is_an_error() {
        let e = run("[x]\ntimeout = 3\ntimeout-ms = 1500\n").unwrap_err();
        assert!(e.contains("[x] timeout-ms: is the old name of `timeout`, which is set too"), "{e}");
    }

    #[test]
    fn bad_values_under_old_keys_are_reported_where_written() {
        let text = "[x]\ntimeout-ms = \"soon\"\n";
        let mut doc = DeTable::parse(text).unwrap();
        apply(doc.get_mut(), "x", ALIASES).unwrap();
        let e = <File as serde::Deserialize>::deserialize(toml::de::Deserializer::from(doc)).unwrap_err();
        assert!(e.message().contains("`soon` is not a duration"), "{e}");
        assert_eq!(e.span(), Some(17..23));
        // A negative integer is passed through for the deserialiser to refuse.
        assert!(run("[x]\ntimeout-ms = -5\n").is_err());
    }
}
