//! The function contract: what every v6gate function (SIIT, NAT64, DNS64,
//! TrGW, ALG, tunnels, softwires, TRT) offers the daemon and the
//! standalone commands, and the [`Registry`] they run functions through.
//!
//! A function lives in its own crate and implements [`Function`] there:
//!
//! - its configuration table(s): a typed `Deserialize` struct whose
//!   checks return [`config::Error`] (the key, and the byte span of the
//!   value, which the caller turns into a line and column);
//! - start (the crate's own constructor, from its checked table and the
//!   [`Env`] the host gives it);
//! - reload: [`Function::plan_reload`] says whether a new table can be
//!   applied to the running function ([`Reload::Applied`]) or needs a
//!   restart ([`Reload::NeedsRestart`], with the reason), before anything
//!   changes; [`Function::reload`] applies it;
//! - a typed status ([`Function::Status`], serialised into `/status`);
//! - its metric families ([`metrics::Family`]: name, help, type, samples),
//!   which the admin API renders without knowing the function;
//! - its fast-path adapter ([`FastPath`]: which BPF maps it mirrors what
//!   into);
//! - stop.
//!
//! The host (gate's daemon, the standalone runner) holds the running
//! functions in a [`Registry`]: started in order, reloaded each, stopped
//! in reverse. This crate has no I/O and depends on no function, so every
//! function crate and gate can depend on it without cycles.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod metrics;
mod registry;
pub mod runner;

pub use config::Error as ConfigError;
pub use metrics::Family;
pub use registry::{Entry, Registry};

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Lock `m`, taking the data of a poisoned lock as it is: a thread that
/// panicked while holding it leaves counters and tables that are still
/// worth reading, and the process must not stop serving because of it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a reload would do to a running function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The new table is applied to the running function (nothing to do
    /// when it did not change).
    Applied,
    /// The running function cannot take the new table: the reason, e.g.
    /// `"[trt] changed: restart v6gate to apply"`.
    NeedsRestart(String),
}

impl Reload {
    /// `Applied` when the table did not change, else a restart with the
    /// reason `"{what} changed: restart v6gate to apply"`: the rule of a
    /// function whose devices, sockets or tables belong to the running
    /// instance.
    pub fn unless_changed<C: PartialEq + ?Sized>(cur: &C, new: &C, what: &str) -> Reload {
        if cur == new {
            Reload::Applied
        } else {
            Reload::NeedsRestart(format!("{what} changed: restart v6gate to apply"))
        }
    }
}

/// A reload a running function accepted but could not apply (it runs on
/// as it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadError {
    /// The function (its status key).
    pub function: &'static str,
    /// What failed.
    pub message: String,
}

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}]: {}", self.function, self.message)
    }
}

impl std::error::Error for ReloadError {}

/// One BPF map a function mirrors its state into (its fast-path adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Mirror {
    /// The maps' names in the BPF object (`ds_out`, `ds_in`, ...).
    pub maps: &'static [&'static str],
    /// What the function writes there (`"lwAFTR bindings"`, ...).
    pub what: &'static str,
    /// The program that reads it (`"softwire.bpf.c"`, ...).
    pub program: &'static str,
}

/// A function's fast-path adapter: which maps it fills. The loader and
/// the map structs stay where they are (the function's crate for the
/// softwires, the B4 and the Teredo relay; gate's shared plane,
/// `daemon::fastpath`, for SIIT, NAT64 and the TrGW, which are not on
/// the contract yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FastPath {
    /// The maps this function mirrors into (empty: no fast path now).
    pub mirrors: Vec<Mirror>,
}

/// What the host gives a function when it starts it.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// The configuration file (a function may re-read a file it names,
    /// e.g. the lwAFTR's binding table).
    pub config_path: Option<PathBuf>,
    /// The host's device busy-poll window (`[tun] busy-poll`): zero when
    /// the host has none.
    pub busy_poll: Duration,
}

/// The contract of one running function (or of a group of functions
/// that share a crate and a table family, e.g. the tunnels).
pub trait Function: Send + 'static {
    /// Its checked configuration (one table or a group of tables).
    type Config: PartialEq + Send + Sync + 'static;
    /// Its status in `/status` (and a standalone command's status file).
    type Status: serde::Serialize;

    /// The key of its status in `/status` (`"trt"`, `"tunnels"`, ...).
    fn status_key(&self) -> &'static str;

    /// The names of the functions running (`/status` `functions`, the
    /// start-up log): `["trt"]`, `["sixtofour", "teredo-relay"]`, ...
    fn names(&self) -> Vec<&'static str>;

    /// Whether `new` can be applied to the running function, decided
    /// before anything changes. The default: applied when unchanged,
    /// else a restart ([`Reload::unless_changed`]).
    fn plan_reload(&self, cur: &Self::Config, new: &Self::Config) -> Reload {
        Reload::unless_changed(cur, new, &format!("[{}]", self.status_key()))
    }

    /// Apply `new` (which [`Function::plan_reload`] accepted). The default
    /// does nothing (an unchanged table). An error leaves the function as
    /// it was.
    fn reload(&mut self, _new: &Self::Config) -> Result<(), ReloadError> {
        Ok(())
    }

    /// Its status now.
    fn status(&self) -> Self::Status;

    /// Its metric families now.
    fn metrics(&self) -> Vec<Family>;

    /// Its fast-path adapter: the maps it mirrors into now (reported by
    /// `/status` `fast_paths`).
    fn fast_path(&self) -> FastPath {
        FastPath::default()
    }

    /// Stop: join its threads, close its devices and sockets, remove what
    /// it added to the system. A one-line summary for the log, if any.
    fn stop(self) -> Option<String>;
}
