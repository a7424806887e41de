//! `v6gate tunnel`: the arguments and configuration of the tunnels run
//! alone, and their status file. The binary runs them (logging and signals
//! are the binary's business).

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

use crate::config::TunnelConfig;
use crate::run::Tunnels;

/// Arguments of `v6gate tunnel`.
// The doc comments are `--help` text: `[table]` names a TOML table, not an item.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML) with [sixtofour], [sixrd] and/or
    /// [teredo.server], [teredo.relay], [teredo.client]; other tables are
    /// ignored.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Write every function's counters and state as JSON to this file,
    /// every 100 ms and at exit.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
}

/// Reads and checks the tunnel tables of `a.config`; at least one is needed.
pub fn load(a: &Args) -> Result<TunnelConfig> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("reading {}", a.config.display()))?;
    let cfg = TunnelConfig::parse(&text).map_err(|e| e.in_file(Some(&a.config)))?;
    if cfg.is_empty() {
        bail!("config error in {}: no [sixtofour], [sixrd] or [teredo.*] table", a.config.display());
    }
    Ok(cfg)
}

/// Writes `t`'s status to `a.status_file` (when given), atomically.
pub fn write_status(a: &Args, t: &Tunnels) {
    if let Some(p) = &a.status_file {
        let tmp = p.with_extension("tmp");
        if std::fs::write(&tmp, t.status().to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
}
