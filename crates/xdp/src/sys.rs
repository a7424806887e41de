//! The crate's only unsafe code: marking the contract structs as plain old
//! data for aya's typed maps, and `if_nametoindex`.
#![deny(clippy::undocumented_unsafe_blocks)]

use crate::types::{Config, Count, Eam, FlowKey, Nat64Value, RelayKey, RelayValue};
use std::ffi::CString;

// SAFETY: each type is `#[repr(C)]`, `Copy`, made only of integers and
// integer arrays with no implicit padding (build.rs asserts every size and
// offset against the C side; `types::tests` checks there is no padding),
// so every byte pattern is a valid value and no uninitialised padding is
// ever copied to or from the kernel.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for Eam {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Nat64Value {}
// SAFETY: as above.
unsafe impl aya::Pod for RelayKey {}
// SAFETY: as above.
unsafe impl aya::Pod for RelayValue {}
// SAFETY: as above.
unsafe impl aya::Pod for Count {}

/// The interface index of `name`, or `None` when there is no such
/// interface (in the caller's network namespace).
pub fn if_index(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call;
    // if_nametoindex only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}
