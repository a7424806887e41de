//! # tunnel — 6to4, 6rd and Teredo
//!
//! The kernel has no `sit` driver here and loads no modules, so v6gate
//! carries these tunnels itself: raw IPv4 sockets for protocol 41, UDP
//! sockets for Teredo, a TUN device on the IPv6 side.
//!
//! - [`proto41`]: 6to4 (RFC 3056/3068/3964, RFC 7526) and 6rd (RFC 5969)
//!   site and relay modes, one core.
//! - [`teredo`]: the Teredo server, relay and client (RFC 4380, RFC 5991,
//!   RFC 6081 extensions).
//!
//! Every core is I/O-free (the quinn-proto pattern): the caller gives it
//! the time and packets; it returns packets to send in an [`Outbox`] and
//! tells when it next wants a timer call. Tables are bounded and expire
//! ([`table`]). Packet parsing and encapsulation is `xlat::tunnel`'s.
//!
//! Around them: [`config`] (the `[sixtofour]`, `[sixrd]` and `[teredo.*]`
//! tables), [`run`] (one thread per function over real sockets and a TUN
//! device; [`Tunnels::start`] is the standalone entry point), [`sys`]
//! (sockets, devices, `poll`) and [`cli`] (`v6gate tunnel`).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod cli;
pub mod config;
pub mod function;
pub mod outbox;
pub mod proto41;
pub mod run;
pub mod sys;
pub mod table;
pub mod teredo;
#[cfg(test)]
mod testutil;

pub use config::TunnelConfig;

/// An IPv6 packet a tunnel never carries: a multicast destination
/// (ff00::/8: MLD reports to ff02::16, solicitations to ff02::1/::2) or a
/// link-local or unspecified source (RFC 4291 §2.5.2, §2.5.6: such packets
/// do not leave the link, and the far end of a tunnel is another link).
/// The kernel sends these on every TUN device that comes up; the cores
/// count them apart (`drop_link_scope`) so they do not swell the counter
/// of a real misconfiguration.
pub fn is_link_scope(src: &core::net::Ipv6Addr, dst: &core::net::Ipv6Addr) -> bool {
    dst.is_multicast() || src.is_unspecified() || teredo::is_link_local(src)
}
pub use outbox::{Dest, Outbox};
pub use run::Tunnels;
