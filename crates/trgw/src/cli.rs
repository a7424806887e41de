//! `v6gate trgw`: run the media relay alone, in the foreground.

use std::path::PathBuf;

use anyhow::{Context as _, Result};

use crate::config::Config;
use crate::relay::Relay;

/// Arguments of `v6gate trgw`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML) with a [trgw] table; other tables are
    /// ignored.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
}

/// Reads the `[trgw]` table of `a.config` and runs the relay until SIGINT
/// or SIGTERM, as [`serve`] does.
pub fn run(a: &Args) -> Result<()> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("reading {}", a.config.display()))?;
    let (cfg, deprecated) =
        Config::parse_toml(&text).map_err(|e| anyhow::anyhow!("config error in {}: {e}", a.config.display()))?;
    for d in deprecated {
        eprintln!("v6gate: config warning in {}: {d}", a.config.display());
    }
    serve(cfg)
}

/// Runs the relay with an already checked configuration until SIGINT or
/// SIGTERM, logging to stderr (filter with RUST_LOG, default `info`).
/// `v6gate run` calls this when `[trgw]` is its only function.
pub fn serve(cfg: Config) -> Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    // Block the signals before any thread starts, then wait for one.
    // SAFETY: sigset manipulation on a local set; sigwait on it.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let relay = Relay::start(cfg)?;
    tracing::info!(ng = ?relay.ng_addr(), rtpproxy = ?relay.rtpproxy_udp_addr(), "trgw running");
    let mut sig = 0;
    // SAFETY: waiting on the set built above.
    unsafe { libc::sigwait(&set, &mut sig) };
    tracing::info!(signal = sig, "stopping");
    let s = relay.stats();
    relay.stop();
    tracing::info!(calls_created = s.totals.calls_created, timed_out = s.totals.calls_timed_out, "trgw stopped");
    Ok(())
}
