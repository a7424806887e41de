//! The standalone entry point: the ALG with the TrGW of the same process
//! (`[alg]` and `[trgw]` of one file), until Ctrl-C / SIGTERM is delivered
//! by the caller's runtime. `v6gate run` (phase 2) starts the same pieces.

use std::sync::Arc;

use anyhow::{Context as _, Result};

use crate::config::{Config, MediaMode};
use crate::media::{InProcess, MediaControl, NgClients};
use crate::runner::{spawn, AlgHandle};

/// A running ALG with its media relay.
pub struct Serving {
    /// The ALG.
    pub alg: AlgHandle,
    /// The in-process relay, when `media = "in-process"`.
    pub relay: Option<Arc<trgw::RelayHandle>>,
}

/// The media control the configuration asks for (`relay` for in-process).
pub fn media_for(cfg: &Config, relay: Option<Arc<trgw::RelayHandle>>) -> Result<Option<Box<dyn MediaControl>>> {
    Ok(match cfg.media {
        MediaMode::None => None,
        MediaMode::InProcess => {
            Some(Box::new(InProcess(relay.context("media = \"in-process\" needs a [trgw] relay")?)))
        }
        MediaMode::Ng => {
            let servers: Vec<_> = cfg.ng.iter().map(|s| (s.addr, s.weight)).collect();
            Some(Box::new(NgClients::new(&servers, std::time::Duration::from_millis(500), 2)?))
        }
    })
}

/// Starts the ALG (and, for in-process media, the `[trgw]` relay) from a
/// configuration file's text.
pub fn serve_text(text: &str) -> Result<Serving> {
    let cfg = Config::from_toml_file_text(text).map_err(anyhow::Error::msg)?;
    let relay = if cfg.media == MediaMode::InProcess {
        let t = trgw::Config::from_toml_file_text(text)
            .map_err(anyhow::Error::msg)
            .context("[trgw] for in-process media")?;
        Some(Arc::new(trgw::Relay::start(t)?))
    } else {
        None
    };
    serve(cfg, relay)
}

/// Starts the ALG with a relay already running (the daemon's), its next
/// hops through a destination policy of its own ([`spawn`]).
pub fn serve(cfg: Config, relay: Option<Arc<trgw::RelayHandle>>) -> Result<Serving> {
    serve_with_policy(cfg, relay, None)
}

/// [`serve`] with a destination policy given (`policy` None: its own).
pub fn serve_with_policy(
    cfg: Config,
    relay: Option<Arc<trgw::RelayHandle>>,
    policy: Option<Arc<dstpolicy::Policy>>,
) -> Result<Serving> {
    let media = media_for(&cfg, relay.clone())?;
    let alg = match policy {
        Some(p) => crate::runner::spawn_with_policy(cfg, media, None, p)?,
        None => spawn(cfg, media, None)?,
    };
    Ok(Serving { alg, relay })
}
