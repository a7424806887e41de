//! The functions the daemon runs through the function contract
//! ([`function::Function`]), in start order: one registration line each.
//! They stop in reverse, a reload is planned for all of them before any
//! applies ([`function::Registry`]), and `/status`, `/metrics` and the
//! start-up log read them without naming them.
//!
//! Not on the contract yet (started, reloaded and reported by hand in
//! [`super::run`], [`super::Daemon::reload`] and `admin`): the packet
//! engines (SIIT, NAT64) with their TUN device and workers, DNS64, the
//! TrGW relay, the ALG and the shared XDP plane (`fastpath`).

use anyhow::Context as _;
use function::{Env, Registry};

use crate::config::Config;
use crate::destinations::Destinations;

/// The daemon's registry: over the whole configuration.
pub type Functions = Registry<Config>;

/// Start every function `cfg` configures, in order; when one cannot
/// start, those started before it are stopped and the error returned.
pub fn start(cfg: &Config, env: &Env, destinations: &Destinations) -> anyhow::Result<Functions> {
    let mut r = Functions::new();
    let started = (|| -> anyhow::Result<()> {
        r.start(
            cfg,
            "tunnels",
            "[sixtofour], [sixrd] or [teredo.*]",
            |c| c.configured_tunnels(),
            |t| tunnel::Tunnels::start(t).context("cannot start the tunnels"),
        )?;
        r.start(
            cfg,
            "softwires",
            "[dslite], [lw4o6] or [b4]",
            |c| c.configured_softwires(),
            |s| {
                softwire::run::Softwires::start_with(s, env.config_path.clone(), env.busy_poll)
                    .context("cannot start the softwires")
            },
        )?;
        r.start(
            cfg,
            "trt",
            "[trt]",
            |c| c.trt.as_ref(),
            |t| {
                let policy = destinations.policy("trt", dstpolicy::Lists::default());
                trt::Relay::start_with(t, policy).context("[trt]: cannot start the transport relay")
            },
        )?;
        Ok(())
    })();
    match started {
        Ok(()) => {
            for (key, fp) in r.fast_paths() {
                for m in fp.mirrors {
                    tracing::info!("{key}: fast path {} mirrors {} into {}", m.program, m.what, m.maps.join(", "));
                }
            }
            Ok(r)
        }
        Err(e) => {
            r.stop();
            Err(e)
        }
    }
}
