//! The programs a bench runs: v6gate itself and the peers it is compared
//! with (TAYGA, rtpengine, ...), found on PATH. A missing peer is not an
//! error: its rows are skipped with a note saying why.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};

/// `bin` as given when it names a path, else the first match on PATH
/// (`lab::testenv::find_program`, the lookup the tests use too).
pub fn find(bin: &Path) -> Option<PathBuf> {
    lab::testenv::find_program(bin)
}

/// `bin` found (see [`find`]), or the note that says why its rows are
/// skipped: "NAME is not installed (BIN not found on PATH)".
pub fn require(name: &str, bin: &Path) -> Result<PathBuf, String> {
    find(bin).ok_or_else(|| {
        if bin.components().count() > 1 {
            format!("{name} is not installed ({} does not exist)", bin.display())
        } else {
            format!("{name} is not installed ({} not found on PATH)", bin.display())
        }
    })
}

/// The first non-empty line `bin --version` prints (stdout or stderr).
pub fn version(bin: &Path) -> Option<String> {
    version_with(bin, "--version")
}

/// As [`version`], for programs that print it with another flag (SIPp: `-v`).
pub fn version_with(bin: &Path, flag: &str) -> Option<String> {
    let s = output_of(bin, &[flag])?;
    s.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
}

/// Everything `bin args...` prints, stdout then stderr (`None` when it
/// cannot run).
pub fn output_of(bin: &Path, args: &[&str]) -> Option<String> {
    let o = Command::new(bin).args(args).stdin(std::process::Stdio::null()).output().ok()?;
    Some(String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

/// The v6gate binary a bench runs: `given`, or this executable.
pub fn v6gate(given: Option<&Path>) -> Result<PathBuf> {
    match given {
        Some(p) => Ok(p.to_path_buf()),
        None => std::env::current_exe().context("locating this executable (the v6gate binary)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_on_path_and_says_why_not() {
        let sh = find(Path::new("sh")).expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"));
        assert_eq!(find(&sh), Some(sh.clone()), "a path is taken as given");
        assert_eq!(
            require("tayga", Path::new("no-such-program-v6gate")).unwrap_err(),
            "tayga is not installed (no-such-program-v6gate not found on PATH)"
        );
        assert!(require("x", Path::new("/nonexistent/x")).unwrap_err().contains("/nonexistent/x does not exist"));
        assert!(version(Path::new("no-such-program-v6gate")).is_none());
    }
}
