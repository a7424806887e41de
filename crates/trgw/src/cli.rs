//! `v6gate trgw`: the arguments and configuration of the relay run alone.
//! The binary runs it (logging and signals are the binary's business).

use std::path::PathBuf;

use anyhow::{Context as _, Result};

use crate::config::Config;

/// Arguments of `v6gate trgw`.
// The doc comments are `--help` text: `[table]` names a TOML table, not an item.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML) with a [trgw] table; other tables are
    /// ignored.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
}

/// Reads and checks the `[trgw]` table of `a.config`.
pub fn load(a: &Args) -> Result<Config> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("reading {}", a.config.display()))?;
    let (cfg, deprecated) =
        Config::parse_toml(&text).map_err(|e| anyhow::anyhow!("config error in {}: {e}", a.config.display()))?;
    for d in deprecated {
        eprintln!("v6gate: config warning in {}: {d}", a.config.display());
    }
    Ok(cfg)
}
