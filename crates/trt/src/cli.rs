//! `v6gate trt`: the relay alone, in the foreground (the binary runs it
//! through `function::runner`): its arguments, table and status file.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

use crate::config::TrtConfig;
use crate::Relay;

/// Arguments of `v6gate trt`.
// The doc comments are --help text: TOML tables in brackets, not links.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML) with a [trt] table; other tables are ignored.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// Write the counters as JSON to this file, every 100 ms and at exit.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
}

/// Read and check the `[trt]` table of `path`.
pub fn load(path: &std::path::Path) -> Result<TrtConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match TrtConfig::parse(&text).map_err(|e| e.in_file(Some(path)))? {
        Some(c) => Ok(c),
        None => bail!("config error in {}: no [trt] table", path.display()),
    }
}

/// Writes the relay's counters, copy mode and destination refusals to
/// `path` (when given), atomically: `v6gate trt --status-file`.
pub fn write_status(path: &Option<PathBuf>, r: &Relay) {
    if let Some(p) = path {
        let tmp = p.with_extension("tmp");
        let refused: serde_json::Map<String, serde_json::Value> = r
            .policy()
            .refused()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(why, n)| (why.as_str().to_string(), n.into()))
            .collect();
        let v =
            serde_json::json!({ "trt": r.counters().snapshot(), "copy": r.copy(), "destinations_refused": refused });
        if std::fs::write(&tmp, v.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
}
