//! The crate's only unsafe code: marking the contract structs as plain old
//! data for aya's typed maps, `if_nametoindex`, the interface ioctls and
//! the batch map calls of `bpf(2)` that aya does not offer, and ([`xsk`])
//! the AF_XDP sockets.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod xsk;

use crate::types::{
    B4Config, Config, Count, DsB4Key, DsB4Val, DsEvent, DsInKey, DsInVal, DsOutKey, DsOutVal, DsState, Eam, FlowKey,
    IfMac, N64Bib, N64BibKey, N64Host, Nat64Value, NatptEvent, NatptHost, NatptMake, Nexthop, PbBlock, RelayKey,
    RelayValue, SkKey, SwAddr, SwBinding, SwConfig, SwV4Key, TdConfig, TdPeer, TgenConfig, TgenFlow, TgenState,
    TrecvConfig, TrecvCounts, TrecvLearned, TrecvTrend,
};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

// SAFETY: each type is a `types::contract!` struct: `#[repr(C)]`, `Copy`,
// made only of integers and integer arrays with no implicit padding (the
// macro's const assert; build.rs generates the C declaration from the same
// layout, with an assert of every size and offset), so every byte pattern
// is a valid value and no uninitialised padding is ever copied to or from
// the kernel.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for Eam {}
// SAFETY: as above.
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Nat64Value {}
// SAFETY: as above (NAT-PT creation, see types.rs).
unsafe impl aya::Pod for NatptMake {}
// SAFETY: as above.
unsafe impl aya::Pod for NatptHost {}
// SAFETY: as above (NAT64 creation with port blocks).
unsafe impl aya::Pod for N64Host {}
// SAFETY: as above.
unsafe impl aya::Pod for N64BibKey {}
// SAFETY: as above.
unsafe impl aya::Pod for N64Bib {}
// SAFETY: as above.
unsafe impl aya::Pod for RelayKey {}
// SAFETY: as above.
unsafe impl aya::Pod for RelayValue {}
// SAFETY: as above.
unsafe impl aya::Pod for Count {}
// SAFETY: as above.
unsafe impl aya::Pod for Nexthop {}
// SAFETY: as above.
unsafe impl aya::Pod for TgenConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for TgenFlow {}
// SAFETY: as above.
unsafe impl aya::Pod for TgenState {}
// SAFETY: as above.
unsafe impl aya::Pod for B4Config {}
// SAFETY: as above.
unsafe impl aya::Pod for TrecvConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for TrecvCounts {}
// SAFETY: as above.
unsafe impl aya::Pod for TrecvTrend {}
// SAFETY: as above.
unsafe impl aya::Pod for TrecvLearned {}

/// CLOCK_MONOTONIC in nanoseconds: the testers' one clock (the same in
/// every network namespace of the machine, so a timestamp written by a
/// sender in one namespace is compared with a receiver's in another; the
/// XDP programs read it with `bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a valid, writable pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The interface index of `name`, or `None` when there is no such
/// interface (in the caller's network namespace).
pub fn if_index(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call;
    // if_nametoindex only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// Turn GRO on or off on interface `name` (of the caller's network
/// namespace), as `ethtool -K NAME gro on|off` does (the legacy
/// `ETHTOOL_SGRO` ioctl). On a veth this also turns the interface's NAPI
/// on, which a peer needs before it can `XDP_REDIRECT` or `XDP_TX` frames
/// into it.
pub fn set_gro(name: &str, on: bool) -> std::io::Result<()> {
    const ETHTOOL_SGRO: u32 = 0x0000_002c;
    ethtool_set(name, ETHTOOL_SGRO, on)
}

/// Turn transmit checksum offload on or off on interface `name` (of the
/// caller's network namespace), as `ethtool -K NAME tx on|off` does (the
/// legacy `ETHTOOL_STXCSUM` ioctl). A veth with it on hands its peer
/// datagrams from local sockets with the transport checksum not yet
/// computed (CHECKSUM_PARTIAL), which an XDP program cannot verify: the
/// TrGW program passes them (`udp-checksum`). Tests that send from local
/// sockets through the fast path turn it off on the senders.
pub fn set_tx_checksum(name: &str, on: bool) -> std::io::Result<()> {
    const ETHTOOL_STXCSUM: u32 = 0x0000_0017;
    ethtool_set(name, ETHTOOL_STXCSUM, on)
}

/// One legacy ethtool "set value" ioctl (`cmd`) on interface `name`.
fn ethtool_set(name: &str, cmd: u32, on: bool) -> std::io::Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("interface name {name:?}")));
    }
    let mut val = EthtoolValue { cmd, data: u32::from(on) };
    // SAFETY: an all-zero ifreq is a valid value (a C struct of integers,
    // arrays and a union of them and pointers).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `ifr` is a valid ifreq whose name is NUL-terminated (zeroed
    // past the copied name, which is shorter than IFNAMSIZ) and whose data
    // pointer points at `val`, an ethtool_value that outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr) };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` is the socket opened above, closed once.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(err);
    }
    Ok(())
}

// SAFETY: a `types::contract!` struct, as the ones above: integers and
// integer arrays without padding, every byte pattern valid.
unsafe impl aya::Pod for TdConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for TdPeer {}
// SAFETY: as above.
unsafe impl aya::Pod for IfMac {}
// SAFETY: as above.
unsafe impl aya::Pod for SwConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for SwBinding {}
// SAFETY: as above.
unsafe impl aya::Pod for SwV4Key {}
// SAFETY: as above.
unsafe impl aya::Pod for SwAddr {}
// SAFETY: as above.
unsafe impl aya::Pod for DsOutKey {}
// SAFETY: as above.
unsafe impl aya::Pod for DsOutVal {}
// SAFETY: as above.
unsafe impl aya::Pod for DsInKey {}
// SAFETY: as above.
unsafe impl aya::Pod for DsInVal {}
// SAFETY: as above.
unsafe impl aya::Pod for DsB4Key {}
// SAFETY: as above.
unsafe impl aya::Pod for DsB4Val {}
// SAFETY: as above.
unsafe impl aya::Pod for DsEvent {}
// SAFETY: as above.
unsafe impl aya::Pod for DsState {}
// SAFETY: as above.
unsafe impl aya::Pod for PbBlock {}
// SAFETY: as above.
unsafe impl aya::Pod for SkKey {}
// SAFETY: as above.
unsafe impl aya::Pod for NatptEvent {}

/// A `T` read from the start of `b` (a ring buffer record, as the program
/// wrote it); `None` when `b` is shorter than `T`.
pub fn read_pod<T: aya::Pod>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: `b` holds at least size_of::<T>() bytes (checked above), the
    // read is unaligned-safe, and `T: Pod` makes every byte pattern a valid
    // value.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// The hardware (MAC) address of Ethernet interface `name` (of the
/// caller's network namespace: the `SIOCGIFHWADDR` ioctl on a socket
/// opened there; sysfs would show the namespace it was mounted in).
pub fn if_mac(name: &str) -> std::io::Result<[u8; 6]> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("interface name {name:?}")));
    }
    // SAFETY: an all-zero ifreq is a valid value (a C struct of integers,
    // arrays and a union of them and pointers).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `ifr` is a valid ifreq with a NUL-terminated name (zeroed
    // past the copied name, shorter than IFNAMSIZ); SIOCGIFHWADDR writes
    // only into it.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr) };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` is the socket opened above, closed once.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return Err(err);
    }
    // SAFETY: SIOCGIFHWADDR succeeded, so the union holds the hardware
    // address (a sockaddr; its sa_data starts with the address bytes).
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    if sa.sa_family != libc::ARPHRD_ETHER {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("{name} is not an Ethernet interface (type {})", sa.sa_family),
        ));
    }
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// `bpf_attr`'s member for the `BPF_MAP_*_BATCH` commands (linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// One `BPF_MAP_UPDATE_BATCH` / `BPF_MAP_DELETE_BATCH` call: `keys` is
/// `count` keys back to back, `values` (update) as many values. Returns
/// how many elements the kernel processed; on an error, the error and that
/// count (elements before the failing one were done).
fn map_batch(
    cmd: libc::c_long,
    fd: BorrowedFd<'_>,
    keys: *const u8,
    values: Option<*const u8>,
    count: u32,
) -> (u32, io::Result<()>) {
    let mut attr = BatchAttr {
        keys: keys as u64,
        values: values.map_or(0, |v| v as u64),
        count,
        map_fd: fd.as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    // SAFETY: `attr` is a valid batch attribute of the size passed; the
    // kernel reads `count` keys (and values) from the buffers, which the
    // callers pass as slices of `count` `Pod` elements of the map's key
    // (value) type (no padding: every byte initialised), and writes only
    // `attr.count`. `fd` is an open map descriptor.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, &mut attr as *mut BatchAttr, std::mem::size_of::<BatchAttr>() as u32)
    };
    let res = if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) };
    (attr.count, res)
}

/// Inserts or replaces `keys.len()` entries of the map `fd` (key type `K`,
/// value type `V`, the map's) with one `BPF_MAP_UPDATE_BATCH` (Linux >=
/// 5.6). The kernel stops at the first failing element: the error comes
/// with how many were written before it.
pub fn map_update_batch<K: aya::Pod, V: aya::Pod>(
    fd: BorrowedFd<'_>,
    keys: &[K],
    values: &[V],
) -> Result<(), (usize, io::Error)> {
    if keys.len() != values.len() {
        return Err((0, io::Error::new(io::ErrorKind::InvalidInput, "as many values as keys are needed")));
    }
    if keys.is_empty() {
        return Ok(());
    }
    let count = u32::try_from(keys.len()).map_err(|_| (0, io::Error::from(io::ErrorKind::InvalidInput)))?;
    let (done, r) = map_batch(BPF_MAP_UPDATE_BATCH, fd, keys.as_ptr().cast(), Some(values.as_ptr().cast()), count);
    r.map_err(|e| (done as usize, e))
}

/// Deletes `keys` from the map `fd` with `BPF_MAP_DELETE_BATCH`; keys the
/// map does not hold are skipped (the kernel stops at one, so the rest are
/// deleted with another call). Returns how many were deleted.
pub fn map_delete_batch<K: aya::Pod>(fd: BorrowedFd<'_>, keys: &[K]) -> io::Result<usize> {
    let mut rest = keys;
    let mut deleted = 0;
    while !rest.is_empty() {
        let count = u32::try_from(rest.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let (done, r) = map_batch(BPF_MAP_DELETE_BATCH, fd, rest.as_ptr().cast(), None, count);
        let done = (done as usize).min(rest.len());
        deleted += done;
        match r {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && done < rest.len() => rest = &rest[done + 1..],
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}
