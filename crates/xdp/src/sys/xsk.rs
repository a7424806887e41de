//! AF_XDP sockets (`linux/if_xdp.h`, Documentation/networking/af_xdp.rst):
//! the system calls, the memory mappings and the ring memory, with every
//! pointer in one place. The ring protocol on top (which index to read with
//! which ordering, what a descriptor means) is `crate::xsk`'s, in safe code.
//!
//! A ring is a power-of-two array of entries (8-byte UMEM addresses for the
//! fill and completion rings, 16-byte [`Desc`]s for the RX and TX rings)
//! with a producer and a consumer index and a flags word, each a `u32` in
//! memory shared with the kernel. The indices run freely and wrap at 2^32;
//! entry `i` lives at `i & (size - 1)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17): the most TX descriptors one
/// `sendto` turns into socket buffers in copy mode (default 32; at most the
/// TX ring's size). Not yet in the `libc` crate.
pub const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// One RX/TX ring entry (`struct xdp_desc`): a frame's UMEM offset and length.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Desc {
    /// Offset of the frame in the UMEM.
    pub addr: u64,
    /// Frame length.
    pub len: u32,
    /// Options (0: none).
    pub options: u32,
}

/// A ring entry type: [`Desc`] or a `u64` UMEM address.
pub trait Entry: Copy + private::Sealed {}
impl Entry for Desc {}
impl Entry for u64 {}
mod private {
    pub trait Sealed {}
    impl Sealed for super::Desc {}
    impl Sealed for u64 {}
}

/// Memory mapped into this process (`mmap`), unmapped on drop: the UMEM
/// (anonymous memory) or one ring of an XDP socket.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping owns its pages exclusively (nothing else in this process
// unmaps them) and exposes them only through raw-pointer reads and writes
// (atomics for the ring indices, volatile copies for entries and frames), so
// moving it to or sharing it with another thread is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above: no `&`-based access hands out non-atomic shared state.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes of zeroed, private, anonymous memory (populated now:
    /// the UMEM's pages must not fault in the send path).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, None, 0)
    }

    /// The ring of socket `fd` at page offset `pgoff` (`XDP_PGOFF_*`), `len` bytes.
    fn of_socket(fd: BorrowedFd<'_>, pgoff: u64, len: usize) -> io::Result<Mapping> {
        Mapping::map(len, libc::MAP_SHARED | libc::MAP_POPULATE, Some(fd), pgoff)
    }

    fn map(len: usize, flags: libc::c_int, fd: Option<BorrowedFd<'_>>, off: u64) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty mapping"));
        }
        let off = libc::off_t::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh mapping chosen by the kernel (address hint null):
        // it overlaps nothing this process uses; `fd`, when given, is an
        // open descriptor borrowed for the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.map_or(-1, |f| f.as_raw_fd()),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Mapping { ptr, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: an empty mapping is refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address (for `XDP_UMEM_REG`).
    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Copies `src` into the mapping at `at`. Errors when it does not fit.
    pub fn write(&self, at: usize, src: &[u8]) -> io::Result<()> {
        let end = at.checked_add(src.len()).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "write past the end of the mapping"));
        }
        // SAFETY: `at..at + src.len()` lies within the mapping (checked);
        // `src` is ordinary memory of this process, which cannot overlap a
        // mapping this struct owns. The kernel may read these bytes
        // concurrently only if the caller handed them to it, which the
        // ring protocol (crate::xsk) prevents.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(at), src.len()) };
        Ok(())
    }

    /// Copies `len` bytes at `at` out of the mapping.
    pub fn read(&self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        let end = at.checked_add(dst.len()).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "read past the end of the mapping"));
        }
        // SAFETY: in bounds (checked); `dst` is this process's own memory,
        // disjoint from the mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Runs `f` over `at..at + len` of the mapping as a mutable slice.
    /// Errors when the range is out of bounds.
    pub fn with_mut<R>(&mut self, at: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> io::Result<R> {
        let end = at.checked_add(len).filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "range past the end of the mapping"));
        }
        // SAFETY: in bounds (checked), valid readable and writable memory
        // for the mapping's lifetime; `&mut self` makes the slice the only
        // reference into the mapping this process holds while `f` runs. The
        // kernel reads only frames the ring protocol handed to it, which
        // crate::xsk never passes here.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), len) };
        Ok(f(s))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Where a ring's parts lie in its mapping (`struct xdp_ring_offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingOffsets {
    /// The producer index.
    pub producer: u64,
    /// The consumer index.
    pub consumer: u64,
    /// The first entry.
    pub desc: u64,
    /// The flags word (`XDP_RING_NEED_WAKEUP`).
    pub flags: u64,
}

impl RingOffsets {
    /// The layout [`Ring::anonymous`] uses: each index on a cache line of
    /// its own, as the kernel lays out its rings.
    pub const LOCAL: RingOffsets = RingOffsets { producer: 0, consumer: 64, flags: 128, desc: 192 };

    fn of(o: &libc::xdp_ring_offset) -> RingOffsets {
        RingOffsets { producer: o.producer, consumer: o.consumer, desc: o.desc, flags: o.flags }
    }
}

/// One ring's memory: its indices, flags and entries. Cloning shares the
/// memory (tests play the kernel's side of a ring with a clone).
#[derive(Debug)]
pub struct Ring<E: Entry> {
    map: Arc<Mapping>,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    _entry: std::marker::PhantomData<E>,
}

impl<E: Entry> Clone for Ring<E> {
    fn clone(&self) -> Self {
        Ring { map: self.map.clone(), ..*self }
    }
}

impl<E: Entry> Ring<E> {
    /// A ring of `size` entries in `map` at `off`. Checks that `size` is a
    /// power of two and that the indices (4-byte aligned) and the entries
    /// (aligned to their size) lie within the mapping.
    pub fn new(map: Mapping, off: RingOffsets, size: u32) -> io::Result<Ring<E>> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("AF_XDP ring: {why}"));
        if !size.is_power_of_two() {
            return Err(bad("size is not a power of two"));
        }
        let base = map.ptr.as_ptr() as usize;
        let word = |o: u64| -> io::Result<usize> {
            let o = usize::try_from(o).map_err(|_| bad("offset out of range"))?;
            if o.checked_add(4).is_none_or(|e| e > map.len) || !(base + o).is_multiple_of(4) {
                return Err(bad("index outside the mapping or misaligned"));
            }
            Ok(o)
        };
        let (producer, consumer, flags) = (word(off.producer)?, word(off.consumer)?, word(off.flags)?);
        let desc = usize::try_from(off.desc).map_err(|_| bad("offset out of range"))?;
        let entry = std::mem::size_of::<E>();
        let end = (size as usize).checked_mul(entry).and_then(|b| b.checked_add(desc));
        if end.is_none_or(|e| e > map.len) || !(base + desc).is_multiple_of(entry) {
            return Err(bad("entries outside the mapping or misaligned"));
        }
        Ok(Ring {
            map: Arc::new(map),
            producer,
            consumer,
            flags,
            desc,
            mask: size - 1,
            _entry: std::marker::PhantomData,
        })
    }

    /// A ring of `size` entries in anonymous memory laid out as
    /// [`RingOffsets::LOCAL`]: for tests of the ring protocol.
    pub fn anonymous(size: u32) -> io::Result<Ring<E>> {
        let len = (size as usize)
            .checked_mul(std::mem::size_of::<E>())
            .and_then(|b| b.checked_add(RingOffsets::LOCAL.desc as usize))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ring::new(Mapping::anonymous(len)?, RingOffsets::LOCAL, size)
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` + 4 is within the mapping and 4-byte aligned (checked
        // in `new`), the mapping lives as long as `self`, and the word is
        // only ever accessed atomically (by this process through this
        // reference, by the kernel with READ_ONCE/WRITE_ONCE and barriers).
        unsafe { &*self.map.ptr.as_ptr().add(at).cast::<AtomicU32>() }
    }

    /// The producer index.
    pub fn producer(&self) -> &AtomicU32 {
        self.word(self.producer)
    }

    /// The consumer index.
    pub fn consumer(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    /// The flags word.
    pub fn flags(&self) -> &AtomicU32 {
        self.word(self.flags)
    }

    /// Entries in the ring.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    fn slot(&self, idx: u32) -> *mut E {
        let i = (idx & self.mask) as usize;
        // SAFETY: `i < size`, and `desc + size * size_of::<E>()` is within
        // the mapping (checked in `new`), so the result stays in bounds.
        unsafe { self.map.ptr.as_ptr().add(self.desc).cast::<E>().add(i) }
    }

    /// Writes entry `idx` (taken modulo the size).
    pub fn write(&self, idx: u32, e: E) {
        // SAFETY: the slot is in bounds and aligned (see `slot` and `new`).
        // The ring protocol gives the slot to this side until the index
        // that publishes it is stored (Release); a volatile write keeps the
        // compiler from eliding or merging it.
        unsafe { std::ptr::write_volatile(self.slot(idx), e) }
    }

    /// Reads entry `idx` (taken modulo the size).
    pub fn read(&self, idx: u32) -> E {
        // SAFETY: in bounds and aligned as above; every bit pattern is a
        // valid `Desc` or `u64`. The protocol publishes the slot to this side
        // with the producer index (read with Acquire before this).
        unsafe { std::ptr::read_volatile(self.slot(idx)) }
    }
}

/// A new AF_XDP socket (close-on-exec).
pub fn socket() -> io::Result<OwnedFd> {
    // SAFETY: no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor just opened and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` points at a live `T` of the size passed, read by the kernel only.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads socket option `opt` (level `SOL_XDP`) into a `T`; returns it and
/// the length the kernel wrote.
fn getsockopt<T: Default>(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<(T, usize)> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live `T` of `len` bytes the kernel may write; `len`
    // is a valid in/out length.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_XDP, opt, (&mut v as *mut T).cast(), &mut len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((v, len as usize))
}

/// Sets a `u32` option of level `SOL_XDP` (ring sizes, `XDP_MAX_TX_SKB_BUDGET`).
pub fn set_u32(fd: BorrowedFd<'_>, opt: libc::c_int, v: u32) -> io::Result<()> {
    setsockopt(fd, libc::SOL_XDP, opt, &v)
}

/// Raises the socket's send buffer to `bytes` past `net.core.wmem_max`
/// (`SO_SNDBUFFORCE`, CAP_NET_ADMIN): in copy mode every frame in flight
/// is a socket buffer charged to it.
pub fn set_sndbuf_force(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v)
}

/// Registers `area` as the socket's UMEM in chunks of `chunk` bytes, the
/// first `headroom` bytes of each left to the application (`XDP_UMEM_REG`).
pub fn register_umem(fd: BorrowedFd<'_>, area: &Mapping, chunk: u32, headroom: u32) -> io::Result<()> {
    let reg = libc::xdp_umem_reg {
        addr: area.addr(),
        len: area.len as u64,
        chunk_size: chunk,
        headroom,
        flags: 0,
        tx_metadata_len: 0,
    };
    setsockopt(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
}

/// Where each of the socket's rings lies in its mapping: (rx, tx, fill,
/// completion). Errors on a kernel older than 5.4 (no flags word).
pub fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<[RingOffsets; 4]> {
    let (o, len) = getsockopt::<XdpMmapOffsets>(fd, libc::XDP_MMAP_OFFSETS)?;
    if len < std::mem::size_of::<XdpMmapOffsets>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "XDP_MMAP_OFFSETS without the ring flags (Linux before 5.4): no XDP_USE_NEED_WAKEUP",
        ));
    }
    let o = o.0;
    Ok([RingOffsets::of(&o.rx), RingOffsets::of(&o.tx), RingOffsets::of(&o.fr), RingOffsets::of(&o.cr)])
}

/// `libc::xdp_mmap_offsets` with a `Default` for [`getsockopt`].
struct XdpMmapOffsets(libc::xdp_mmap_offsets);

impl Default for XdpMmapOffsets {
    fn default() -> Self {
        let z = libc::xdp_ring_offset { producer: 0, consumer: 0, desc: 0, flags: 0 };
        XdpMmapOffsets(libc::xdp_mmap_offsets { rx: z, tx: z, fr: z, cr: z })
    }
}

/// Which ring of a socket to map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// The TX ring ([`Desc`] entries).
    Tx,
    /// The UMEM's fill ring (`u64` entries).
    Fill,
    /// The UMEM's completion ring (`u64` entries).
    Completion,
}

impl RingKind {
    fn pgoff(self) -> u64 {
        match self {
            RingKind::Tx => libc::XDP_PGOFF_TX_RING as u64,
            RingKind::Fill => libc::XDP_UMEM_PGOFF_FILL_RING,
            RingKind::Completion => libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        }
    }
}

/// Maps ring `kind` of socket `fd` (its size set before, its offsets from
/// [`mmap_offsets`]).
pub fn map_ring<E: Entry>(fd: BorrowedFd<'_>, kind: RingKind, off: RingOffsets, size: u32) -> io::Result<Ring<E>> {
    let len = usize::try_from(off.desc)
        .ok()
        .and_then(|d| (size as usize).checked_mul(std::mem::size_of::<E>())?.checked_add(d))
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ring::new(Mapping::of_socket(fd, kind.pgoff(), len)?, off, size)
}

/// Binds the socket to queue `queue` of interface `ifindex` with `flags`
/// (`XDP_COPY`, `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`).
pub fn bind(fd: BorrowedFd<'_>, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `sa` is a valid sockaddr_xdp of the size passed, read only.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Wakes the kernel to send what the TX ring holds (`sendto` with no
/// data, `MSG_DONTWAIT`). In copy mode the call itself turns up to the
/// socket's budget of descriptors into socket buffers and transmits them.
pub fn wake_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address: the kernel
    // dereferences neither.
    let rc = unsafe { libc::sendto(fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The socket's drop counters (`XDP_STATISTICS`): (TX descriptors the
/// kernel found invalid, times it found the TX ring empty when woken; 0
/// where the kernel does not report it).
pub fn tx_statistics(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let (s, len) = getsockopt::<XdpStatistics>(fd, libc::XDP_STATISTICS)?;
    let empty = if len >= std::mem::size_of::<XdpStatistics>() { s.0.tx_ring_empty_descs } else { 0 };
    Ok((s.0.tx_invalid_descs, empty))
}

struct XdpStatistics(libc::xdp_statistics);

impl Default for XdpStatistics {
    fn default() -> Self {
        XdpStatistics(libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        })
    }
}

/// Whether the bound socket runs in zero-copy mode (`XDP_OPTIONS`).
pub fn zero_copy(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let (o, _) = getsockopt::<u32>(fd, libc::XDP_OPTIONS)?;
    Ok(o & libc::XDP_OPTIONS_ZEROCOPY != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn rings_check_their_layout() {
        let m = || Mapping::anonymous(4096).unwrap();
        assert!(Ring::<Desc>::new(m(), RingOffsets::LOCAL, 6).is_err(), "not a power of two");
        assert!(Ring::<Desc>::new(m(), RingOffsets::LOCAL, 256).is_err(), "192 + 256 * 16 > 4096");
        assert!(Ring::<Desc>::new(m(), RingOffsets::LOCAL, 128).is_ok());
        assert!(Ring::<u64>::new(m(), RingOffsets::LOCAL, 512).is_err(), "192 + 512 * 8 > 4096");
        assert!(
            Ring::<u64>::new(m(), RingOffsets { consumer: 4094, ..RingOffsets::LOCAL }, 8).is_err(),
            "index past the end"
        );
        assert!(
            Ring::<u64>::new(m(), RingOffsets { flags: 130, ..RingOffsets::LOCAL }, 8).is_err(),
            "misaligned index"
        );
        assert!(
            Ring::<u64>::new(m(), RingOffsets { desc: 196, ..RingOffsets::LOCAL }, 8).is_err(),
            "misaligned entries"
        );
        assert!(Mapping::anonymous(0).is_err());
    }

    #[test]
    fn entries_wrap_and_clones_share_the_memory() {
        let r = Ring::<Desc>::anonymous(4).unwrap();
        let peer = r.clone();
        for i in 0..10u32 {
            r.write(i, Desc { addr: u64::from(i) * 2048, len: 60 + i, options: 0 });
            assert_eq!(peer.read(i).addr, u64::from(i) * 2048);
            assert_eq!(peer.read(i + 4).len, 60 + i, "entry i + size is entry i");
        }
        r.producer().store(7, Ordering::Release);
        assert_eq!(peer.producer().load(Ordering::Acquire), 7);
        assert_eq!(
            (peer.consumer().load(Ordering::Relaxed), peer.flags().load(Ordering::Relaxed), r.size()),
            (0, 0, 4)
        );
    }

    #[test]
    fn mappings_copy_in_bounds_only() {
        let mut m = Mapping::anonymous(100).unwrap();
        m.write(96, &[1, 2, 3, 4]).unwrap();
        assert!(m.write(97, &[1, 2, 3, 4]).is_err());
        assert!(m.write(usize::MAX, &[1]).is_err());
        let mut b = [0u8; 4];
        m.read(96, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        assert!(m.read(97, &mut b).is_err());
        assert_eq!(m.with_mut(98, 2, |s| s.to_vec()).unwrap(), [3, 4]);
        assert!(m.with_mut(99, 2, |_| ()).is_err());
        assert!(!m.is_empty() && m.len() >= 100);
    }
}
