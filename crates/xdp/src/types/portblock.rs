//! Port blocks (`bpf/portblock.h`): the element of the `BPF_F_MMAPABLE`
//! arrays `ds_blocks` and `n64_blocks` that a slow path maps and shares
//! with a program (`crate::portblock`).

use super::{first_line, tiles, CType, Contract, Field};

constants! {
    /// The port block allocator's sizes.
    PORTBLOCK_CONSTANTS;
    /// Bitmap words per block.
    pub const PB_WORDS: usize = 4 => "PB_WORDS";
    /// The largest block, in ports.
    pub const PB_MAX_PORTS: u16 = 256 => "PB_MAX_PORTS";
    /// Lost races per word before `pb_take` gives up on it.
    pub const PB_RETRIES: usize = 4 => "PB_RETRIES";
}

const _: () = assert!(PB_MAX_PORTS as usize == PB_WORDS * 64);

contract! {
    /// One port block: a run of consecutive pool ports on one pool
    /// address, and the bitmap of those in use.
    pub struct PbBlock / "pb_block" {
        /// Pool address, network order.
        pub addr: u32,
        /// First port, host order.
        pub base: u16,
        /// Ports in the block, 0 (an empty slot) ..= `PB_MAX_PORTS`.
        pub size: u16,
        /// Bit i % 64 of word i / 64: port base + i is in use.
        pub used: [u64; PB_WORDS],
    }
}
