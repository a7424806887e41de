//! `[nat64] bib-file`: the static BIB entries added at run time (`v6gate
//! ctl bib add`) kept across restarts.
//!
//! Reloads keep those entries by themselves ([`nat64::Nat64::reconfigure`]);
//! this file is for restarts. The daemon reads it at start-up (entries the
//! configuration cannot hold are skipped with a warning) and rewrites it
//! after every `bib add` / `bib remove` and every reload, atomically (a
//! temporary file renamed over it). Its format is the configuration's:
//!
//! ```toml
//! [[bib]]
//! protocol = "udp"
//! ipv6 = "[2001:db8::11]:53"
//! ipv4 = "192.0.2.1:5353"
//! ```

use std::io::Write as _;
use std::path::Path;

use nat64::{Nat64, StaticBib};
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    bib: Vec<StaticBib>,
}

const HEADER: &str = "# v6gate: NAT64 BIB entries added with `v6gate ctl bib add` ([nat64] bib-file).\n\
                      # Read at start-up, rewritten by the daemon on every change.\n";

/// The entries in `path`; none when it does not exist yet.
pub fn load(path: &Path) -> Result<Vec<StaticBib>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
    };
    let f: File = toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message().trim()))?;
    Ok(f.bib)
}

/// Write `entries` to `path` atomically (`PATH.tmp`, then renamed).
pub fn save(path: &Path, entries: &[StaticBib]) -> Result<(), String> {
    let body = toml::to_string(&File { bib: entries.to_vec() }).map_err(|e| e.to_string())?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(HEADER.as_bytes())?;
        f.write_all(body.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: cannot write: {e}", path.display())
    })
}

/// Add the entries of `path` to `n`; returns how many were added and a
/// message for each one refused or for an unreadable file.
pub fn restore(n: &Nat64, path: &Path) -> (usize, Vec<String>) {
    let entries = match load(path) {
        Ok(v) => v,
        Err(e) => return (0, vec![e]),
    };
    let mut added = 0;
    let mut refused = Vec::new();
    for e in entries {
        match n.bib_add(e) {
            Ok(()) => added += 1,
            Err(why) => refused.push(format!(
                "{}: {} {} <-> {} not restored: {why}",
                path.display(),
                e.protocol,
                e.ipv6,
                e.ipv4
            )),
        }
    }
    (added, refused)
}

/// Rewrite `path` with the entries `n` holds now.
pub fn sync(n: &Nat64, path: &Path) -> Result<(), String> {
    save(path, &n.added_bib())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nat() -> Nat64 {
        let c: nat64::Config = toml::from_str("pool4 = [\"192.0.2.1/32\"]\n").unwrap();
        Nat64::new(c).unwrap()
    }

    #[test]
    fn round_trip_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bib.toml");
        assert_eq!(load(&path).unwrap(), vec![], "a missing file is empty");
        let n = nat();
        let e = StaticBib {
            protocol: nat64::Protocol::Udp,
            ipv6: "[2001:db8::11]:53".parse().unwrap(),
            ipv4: "192.0.2.1:5353".parse().unwrap(),
        };
        n.bib_add(e).unwrap();
        sync(&n, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# v6gate: NAT64 BIB entries"), "{text}");
        assert_eq!(load(&path).unwrap(), vec![e]);
        assert!(!dir.path().join("bib.toml.tmp").exists());
        // A fresh translator (a restart) gets the entry back.
        let n2 = nat();
        assert_eq!(restore(&n2, &path), (1, vec![]));
        assert_eq!(n2.added_bib(), vec![e]);
        // One the configuration cannot hold is named, the rest restored.
        let other = StaticBib { ipv4: "192.0.2.9:53".parse().unwrap(), ..e };
        save(&path, &[other, e]).unwrap();
        let (added, refused) = restore(&nat(), &path);
        assert_eq!(added, 1);
        assert!(refused[0].contains("192.0.2.9:53") && refused[0].contains("not in pool4"), "{refused:?}");
        // A broken file is reported, not half-read.
        std::fs::write(&path, "[[bib]]\nprotocol = \"sctp\"\n").unwrap();
        let (added, refused) = restore(&nat(), &path);
        assert_eq!(added, 0);
        assert!(refused[0].contains("bib.toml"), "{refused:?}");
        // An unwritable place is an error, not a panic.
        assert!(save(&dir.path().join("missing/dir/bib.toml"), &[e]).is_err());
    }
}
