//! # confval — the configuration vocabulary every table shares
//!
//! One home for the values several tables of the v6gate configuration
//! write the same way, so an operator learns each syntax once:
//!
//! - [`duration`]: one duration syntax (`"250ms"`, `"60s"`, `"5m"`,
//!   `"2h4m"`, Jool's `"HH:MM:SS"`, a bare integer counting seconds) for
//!   every timeout of `[nat64]`, `[dns64]` and `[trgw]`;
//! - [`IoMode`]: how a table's workers move packets (`io = "uring"` or
//!   `io = "poll"`), for `[tun]` and `[trgw]`;
//! - [`alias`]: old key names and values kept working with a deprecation
//!   warning, and Jool's key names accepted as equals (no warning: they
//!   are first-class synonyms, not deprecated), rewritten in the parsed
//!   TOML document before a table is deserialised (so each table's struct
//!   knows only v6gate's names).
//!
//! No I/O and no logging: deprecations are returned to the caller, which
//! prints them (`v6gate config check`) or logs them (`v6gate run`).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod alias;
pub mod duration;
mod io;

pub use alias::{Alias, AliasError, Deprecation};
pub use io::IoMode;
