//! DNS64 (RFC 6147): a resolver front end that synthesises AAAA records
//! from A records with an RFC 6052 prefix, so IPv6-only clients reach
//! IPv4-only servers through a NAT64.
//!
//! - [`Config`] — the `[dns64]` table ([`EXAMPLE_TOML`] is its commented
//!   example), validated by [`Config::check`].
//! - [`Core`] — the RFC 6147 logic without sockets: a query in, an
//!   [`Action`] out (reply, drop, or an upstream [`Lookup`] whose outcome
//!   goes back in). Unit tests and the `dns64_query` fuzz target drive it
//!   directly.
//! - [`Server`] — UDP and TCP listeners plus the upstream client
//!   ([`Upstreams`]), on a thread of its own ([`Server::start`]) or on a
//!   caller's tokio runtime ([`Server::spawn`]); [`Server::stats`] gives
//!   the counters ([`Stats`]).
//!
//! Behaviour, choices and counters: `docs/dns64.md`.
#![forbid(unsafe_code)]

pub mod arpa;
pub mod cache;
pub mod config;
pub mod core;
pub mod server;
pub mod stats;
pub mod upstream;

pub use crate::cache::Cache;
pub use crate::config::{Config, ConfigError, RangePrefix, EXAMPLE_TOML};
pub use crate::core::{Action, Client, Core, Lookup, Task, Upstream};
pub use crate::server::{Error, Server};
pub use crate::stats::{Counters, Stats};
pub use crate::upstream::Upstreams;
