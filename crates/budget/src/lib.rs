//! # budget — what one client may hold of a table every client shares
//!
//! Every table a client can grow (DS-Lite port quotas, DSTM leases, Teredo
//! peers and bubbles, TRT connections and flows, the ALG's transactions)
//! has a global cap and a fair share per client, where a client is not an
//! address but what one party controls: an IPv6 prefix (a /64 by default:
//! one host, or one LAN, can take any number of addresses of its /64) or
//! an IPv4 address. This crate is that vocabulary, once:
//!
//! - [`ClientKey`]: the client an address belongs to
//!   ([`ClientKey::of`]`(addr, v6_prefix_len)`), IPv4-mapped IPv6
//!   addresses counting as their IPv4 address;
//! - [`check_prefix_len`]: the one check of a configured prefix length
//!   (/48 to /128, the `client-prefix-length` keys);
//! - [`FairShare`]: a count per client under a global cap and a per-client
//!   share, refusing (never evicting) beyond either, with the refusals
//!   counted by kind;
//! - [`Bucket`] and [`RateTable`]: token buckets, one or one per client
//!   (bounded), for rate limits.
//!
//! No I/O, no clocks (callers pass milliseconds of their own monotonic
//! clock), no locks (callers own the value and wrap it as they need).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod key;
mod rate;
mod share;

pub use key::{check_prefix_len, ClientKey, DEFAULT_V6_PREFIX, MAX_V6_PREFIX, MIN_V6_PREFIX};
pub use rate::{Bucket, RateTable};
pub use share::{FairShare, Refusal, Refusals};
