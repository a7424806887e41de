//! The daemon's few system interfaces that need `unsafe`: the TUN device
//! ([`tun`]) and route netlink ([`netlink`]), shared with the tunnel
//! runners and so kept in the `netsys` crate, io_uring ([`uring`]) and
//! the heap's trimming ([`keep_heap`]).
//! Everything here is a thin, audited wrapper over one or two libc calls
//! with checked lengths; the rest of the crate stays safe
//! (`#![deny(unsafe_code)]` in `lib.rs`, lifted for this module only).
#![deny(clippy::undocumented_unsafe_blocks)]

pub use netsys::{netlink, tun};
pub mod uring;

/// How much free memory at the top of a heap glibc keeps instead of giving
/// it back to the kernel ([`keep_heap`]).
pub const HEAP_KEEP: i32 = 64 << 20;

/// Keeps freed heap memory for reuse. glibc's default gives the top of a
/// thread's heap back to the kernel as soon as it is free and maps it in
/// again on the next allocation: the SIP thread of `[alg]`, whose heap
/// rises and falls with every burst of messages, spent 1.3 % of its time
/// in mprotect(2) alone at 2,000 calls/s (profile, quick and loaded;
/// under 0.1 % with this). Up to [`HEAP_KEEP`] of free heap stays mapped
/// per arena and heaps grow 16 MiB at a time. Memory the daemon used at its peak stays
/// counted in its RSS (up to that bound per arena).
pub fn keep_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets glibc's malloc parameters (it takes the
    // arena locks itself); no memory is touched.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_KEEP);
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
        // Fixed (a trim threshold set by hand stops glibc's adjusting it):
        // buffers up to 4 MiB come from the heap, not a mmap(2) each.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}
