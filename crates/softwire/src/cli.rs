//! `v6gate softwire`: the softwire functions alone, in the foreground (the
//! binary runs them through `function::runner`, as `v6gate run` runs
//! them through its registry): their arguments, tables and status file.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::config::SoftwireConfig;
use crate::run::Softwires;

/// Arguments of `v6gate softwire`.
// The doc comments are --help text: TOML tables in brackets, not links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML) with [dslite], [lw4o6] (and
    /// [lw4o6.dstm]) and/or [b4]; other tables are ignored.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Write every function's counters and state as JSON to this file,
    /// every 100 ms and at exit.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// After each packet, keep reading the device (spinning) this long
    /// before sleeping in poll(2), as `[tun] busy-poll` does in `v6gate
    /// run`: packets closer together than the window skip a wake-up, at
    /// the price of a busy CPU (e.g. "1ms"; default "0s", off).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = busy_poll)]
    pub busy_poll: Duration,
}

/// `--busy-poll`: a duration in the configuration's one syntax, at most 1 s.
fn busy_poll(s: &str) -> Result<Duration, String> {
    let d = confval::duration::parse(s).map_err(|e| e.to_string())?;
    if d > Duration::from_secs(1) {
        return Err(format!("{} is above 1s", confval::duration::format(d)));
    }
    Ok(d)
}

/// Writes every function's status to `path` (when given), atomically:
/// `v6gate softwire --status-file`.
pub fn write_status(path: &Option<PathBuf>, s: &Softwires) {
    if let Some(p) = path {
        let tmp = p.with_extension("tmp");
        if std::fs::write(&tmp, s.status().to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
}

/// Read and check the softwire tables of `path`.
pub fn load(path: &std::path::Path) -> Result<SoftwireConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let cfg = SoftwireConfig::parse(&text).map_err(|e| e.in_file(Some(path)))?;
    if cfg.is_empty() {
        bail!("config error in {}: no [dslite], [lw4o6] or [b4] table", path.display());
    }
    Ok(cfg)
}
