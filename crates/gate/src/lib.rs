//! v6gate's daemon crate: the TOML configuration ([`config`]), the offline
//! translator behind `v6gate translate` ([`offline`]) and the human-readable
//! packet summaries of `--explain` ([`explain`]), and the fragment holder
//! for `amend-udp-checksum-zero` ([`amend`]).
#![deny(unsafe_code)]

pub mod amend;
pub mod config;
pub mod daemon;
pub mod destinations;
pub mod explain;
pub mod limits;
pub mod offline;
#[allow(unsafe_code)]
pub mod sys;
pub mod validate;
mod xdp_blocks;
