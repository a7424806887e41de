//! The one configuration error type: which file, where in it, which key,
//! what is wrong. A function crate's table checks return it with the key
//! and the byte span of the value ([`Error::spanned`]); the host that
//! holds the text resolves the span into a line and column
//! ([`Error::at`]) and names the file ([`Error::in_file`]).

use core::fmt;
use core::ops::Range;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The class of a configuration error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A key or table v6gate does not know.
    UnknownKey,
    /// A value of the wrong type, or a required key is missing.
    Type,
    /// A value of the right type that is not acceptable (bad prefix, MTU
    /// below the minimum, inconsistent settings, ...).
    Invalid,
    /// A table the requested function needs is absent.
    Missing,
}

/// A configuration error: which file, where in it, which key, what is wrong.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    file: Option<PathBuf>,
    /// Byte offset of the value in the text, until [`Error::at`] resolves it.
    offset: Option<usize>,
    /// 1-based line and column.
    pos: Option<(usize, usize)>,
    /// Key as the operator wrote it, e.g. `[siit] eamt[1].ipv4`.
    key: Option<String>,
    msg: String,
}

impl Error {
    /// An error of `kind` at `key` (`[table] key`, or None for the file).
    pub fn new(kind: ErrorKind, key: Option<String>, msg: impl Into<String>) -> Self {
        Error { kind, file: None, offset: None, pos: None, key, msg: msg.into() }
    }

    /// An unacceptable value of `[table] key` (`key` is that whole name).
    pub fn invalid(key: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::Invalid, Some(key.into()), msg)
    }

    /// The same error, pointing at byte range `span` of the text (a
    /// `toml::Spanned` value's span).
    pub fn spanned(mut self, span: Range<usize>) -> Self {
        self.offset = Some(span.start);
        self
    }

    /// Resolve a span (this one's, or `span` when given) into a line and
    /// column of `text`.
    pub fn at(mut self, text: &str, span: Option<Range<usize>>) -> Self {
        if let Some(at) = span.map(|s| s.start).or(self.offset) {
            self.pos = Some(line_col(text, at));
        }
        self
    }

    /// Name the key as the file wrote it: `written` maps v6gate's name
    /// (`[siit] new-tos`) to a synonym the file used (`[siit] tos`).
    pub fn named_as_written(mut self, written: &[(String, String)]) -> Self {
        if let Some(k) = &self.key {
            if let Some((_, name)) = written.iter().find(|(key, _)| key == k) {
                self.key = Some(name.clone());
            }
        }
        self
    }

    /// Name the file (unless already named).
    pub fn in_file(mut self, file: Option<&Path>) -> Self {
        if self.file.is_none() {
            self.file = file.map(Path::to_path_buf);
        }
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The key at fault, e.g. `[siit] pool6`, when there is one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// 1-based (line, column) in the file, when known.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.pos
    }

    /// The byte offset of the value at fault in the text, when known.
    pub fn offset(&self) -> Option<usize> {
        self.offset
    }

    /// The problem, without file, position or key.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

/// `config KIND in FILE: line L, column C: ` (the parts that are known).
pub fn write_where(
    f: &mut fmt::Formatter<'_>,
    kind: &str,
    file: Option<&Path>,
    pos: Option<(usize, usize)>,
) -> fmt::Result {
    match file {
        Some(p) => write!(f, "config {kind} in {}: ", p.display())?,
        None => write!(f, "config {kind}: ")?,
    }
    if let Some((l, c)) = pos {
        write!(f, "line {l}, column {c}: ")?;
    }
    Ok(())
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_where(f, "error", self.file.as_deref(), self.pos)?;
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// Render a serde path (`siit.eamt.1.ipv4`) the way an operator reads it
/// (`[siit] eamt[1].ipv4`), skipping the `Spanned` wrapper's private keys.
pub fn render_path(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut segs = path.iter().filter(|s| !matches!(s, Segment::Map { key } if key.starts_with("$__")));
    let table = match segs.next()? {
        Segment::Map { key } => key.clone(),
        _ => return None,
    };
    let mut out = format!("[{table}]");
    let mut first = true;
    for s in segs {
        match s {
            Segment::Map { key } if first => {
                out.push(' ');
                out.push_str(key);
            }
            Segment::Map { key } => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
        first = false;
    }
    Some(out)
}

/// Turn a deserialisation error into one that names the key (`[table]
/// key`) and points at the value; `hint` may add to the message of an
/// unknown top-level name.
pub fn from_serde(
    text: &str,
    err: serde_path_to_error::Error<toml::de::Error>,
    hint: impl Fn(&str) -> Option<String>,
) -> Error {
    let key = render_path(err.path());
    let inner = err.into_inner();
    // serde says "field"; a TOML user says "key". Keep serde's list of
    // what is allowed, it is the most useful part.
    let msg = inner
        .message()
        .trim()
        .replace('\n', "; ")
        .replace("missing field `", "missing key `")
        .replace("duplicate field `", "duplicate key `");
    let e = if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let expected = tail.trim_start_matches(',').trim();
        let expected = if expected.is_empty() { String::new() } else { format!(" ({expected})") };
        // The path usually ends with the unknown key itself already; at the
        // top level it is nothing but the unknown name.
        let full = match key {
            Some(k) if k == format!("[{name}]") => None,
            Some(k) if k.ends_with(&format!(" {name}")) || k.ends_with(&format!(".{name}")) => Some(k),
            Some(k) if k.contains(' ') => Some(format!("{k}.{name}")),
            Some(k) => Some(format!("{k} {name}")),
            None => None,
        };
        match full {
            Some(k) => Error::new(ErrorKind::UnknownKey, Some(k), format!("unknown key{expected}")),
            _ => {
                let mut m = format!("unknown top-level table or key{expected}");
                if let Some(h) = hint(name) {
                    m.push_str(&h);
                }
                Error::new(ErrorKind::UnknownKey, Some(name.to_string()), m)
            }
        }
    } else {
        Error::new(ErrorKind::Type, key, msg)
    };
    e.at(text, inner.span())
}

/// A TOML syntax error.
pub fn syntax(text: &str, e: &toml::de::Error) -> Error {
    Error::new(ErrorKind::Syntax, None, e.message().trim().replace('\n', "; ")).at(text, e.span())
}

/// Table `name` of a whole TOML file, deserialised as `T` with its spans
/// (other tables are not read): what a standalone command reads from a
/// file `v6gate run` reads whole. Errors name the key and the line.
pub fn parse_table<T: DeserializeOwned>(text: &str, name: &str) -> Result<Option<T>, Error> {
    let doc = toml::de::DeTable::parse(text).map_err(|e| syntax(text, &e))?;
    let de = toml::Deserializer::from(doc);
    let mut track = serde_path_to_error::Track::new();
    let seed = OneTable::<T> { name, out: PhantomData };
    seed.deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
        .map_err(|e| from_serde(text, serde_path_to_error::Error::new(track.path(), e), |_| None))
}

/// Reads one key of a map as `T`, skipping the others.
struct OneTable<'a, T> {
    name: &'a str,
    out: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for OneTable<'_, T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for OneTable<'_, T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table of v6gate configuration")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut out = None;
        while let Some(k) = map.next_key::<String>()? {
            if k == self.name {
                out = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct T {
        port: u16,
        #[serde(default)]
        name: Option<toml::Spanned<String>>,
    }

    #[test]
    fn one_table_is_read_with_its_spans_and_errors_name_key_and_line() {
        let text = "[other]\nx = 1\n[t]\nport = 7\nname = \"a\"\n";
        let t: T = parse_table(text, "t").ok().flatten().unwrap_or(T { port: 0, name: None });
        assert_eq!(t.port, 7);
        assert_eq!(t.name.as_ref().map(|n| line_col(text, n.span().start)), Some((5, 8)));
        assert!(matches!(parse_table::<T>("[other]\n", "t"), Ok(None)));
        let e = parse_table::<T>("[t]\nport = \"x\"\n", "t").err().map(|e| (e.key().map(String::from), e.position()));
        assert_eq!(e, Some((Some("[t] port".to_string()), Some((2, 8)))));
        let e = parse_table::<T>("[t]\nport = 1\nbogus = 2\n", "t").err();
        assert_eq!(e.as_ref().map(Error::kind), Some(ErrorKind::UnknownKey));
        assert_eq!(e.as_ref().and_then(Error::key), Some("[t] bogus"));
        let e = parse_table::<T>("[t\n", "t").err();
        assert_eq!(e.as_ref().map(Error::kind), Some(ErrorKind::Syntax));
    }

    #[test]
    fn a_spanned_error_gets_its_line_from_the_text() {
        let text = "[trt]\nprefix = \"x\"\n";
        let at = text.find("\"x\"").unwrap_or(0);
        let e = Error::invalid("[trt] prefix", "`x` is not a prefix").spanned(at..at + 3).at(text, None);
        assert_eq!(e.position(), Some((2, 10)));
        assert_eq!(e.to_string(), "config error: line 2, column 10: [trt] prefix: `x` is not a prefix");
        let e = e.in_file(Some(Path::new("/etc/v6gate.toml")));
        assert!(e.to_string().starts_with("config error in /etc/v6gate.toml: line 2"), "{e}");
        assert_eq!((e.kind(), e.key(), e.message()), (ErrorKind::Invalid, Some("[trt] prefix"), "`x` is not a prefix"));
    }

    #[test]
    fn line_col_counts_chars() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
        assert_eq!(line_col("x", 99), (1, 2));
        assert_eq!(line_col("", 5), (1, 1));
    }

    #[test]
    fn a_synonym_is_named_as_written() {
        let e =
            Error::invalid("[siit] new-tos", "bad").named_as_written(&[("[siit] new-tos".into(), "[siit] tos".into())]);
        assert_eq!(e.key(), Some("[siit] tos"));
    }
}
