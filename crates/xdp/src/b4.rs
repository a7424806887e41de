//! The kernel datapath of the B4s (`bpf/b4.bpf.c`, its map types in
//! [`crate::types`]): the
//! DS-Lite B4 (RFC 6333 §5), the DSTM host once it holds a lease, and the
//! host-integrated lwB4 (RFC 7596; the host's own traffic, from the
//! binding's address and the host's share of its port set; the NAPT's
//! stays on the engine, [`B4Settings::host`]).
//! One object, two programs: `tc_b4_encap` on the TUN device's tc egress
//! (TCX; IPv4 → softwire, redirected to the uplink) and `xdp_b4_decap` on
//! the uplink (softwire → IPv4, passed to the stack). The TUN engine
//! (crates/softwire's `B4`) stays the slow path and the truth: whatever
//! the programs cannot do byte for byte as it does, they pass to it.
//!
//! [`B4KernelPath::set_aftr`] turns the path on (a DSTM host: when a lease
//! names its tunnel end-point) or off. Same loader pattern as
//! [`crate::softwire`]: aya, XDP through bpf_link (native with a generic
//! fallback), everything detached on drop.

use crate::loader::{chain, map_err};
use crate::single::{Names, Single};
use crate::types::Count;
use crate::{Attachment, Error, Mode, TestResult};
use aya::maps::{Array, MapData};
use aya::programs::{tc::SchedClassifierLinkId, SchedClassifier, TcAttachType, TestRun, TestRunOptions};
use aya::EbpfLoader;
use core::net::Ipv6Addr;

/// The BPF object built by build.rs from `bpf/b4.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/b4.bpf.o"));

/// The XDP program (on the uplinks).
pub const XDP_PROGRAM: &str = "xdp_b4_decap";
/// The tc program (on the TUN device's egress).
pub const TC_PROGRAM: &str = "tc_b4_encap";
const CONFIG: &str = "b4_config";
const COUNTERS: &str = "b4_counters";
const TX: &str = "b4_tx";
const IFMAC: &str = "b4_ifmac";

pub use crate::types::{B4Config, B4Counter};
use crate::types::{B4_F_COPY_TOS, B4_F_ENCAP_LIMIT, B4_F_HOST, B4_F_ON};

/// tc verdicts (`TC_ACT_*`).
pub mod tc_action {
    /// Continue: the packet goes on into the TUN device (the engine).
    pub const OK: u32 = 0;
    /// Dropped.
    pub const SHOT: u32 = 2;
    /// Redirected to the uplink.
    pub const REDIRECT: u32 = 7;
}

/// The lwB4's host: the traffic the kernel path carries when the B4 is a
/// host-integrated lwB4 (its NAPT stays on the engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSettings {
    /// The binding's IPv4 address (the host's own).
    pub addr: core::net::Ipv4Addr,
    /// The host's ports: those of the port set in `first..=last`.
    pub first: u16,
    /// See `first`.
    pub last: u16,
    /// The binding's PSID.
    pub psid: u16,
    /// PSID offset (a).
    pub psid_offset: u8,
    /// PSID length (k; 0: the whole address). a + k ≤ 16.
    pub psid_len: u8,
}

/// What the kernel path needs of the B4's end-point configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct B4Settings {
    /// The B4 (softwire) address.
    pub local: Ipv6Addr,
    /// Tunnel hop limit.
    pub hop_limit: u8,
    /// Tunnel Encapsulation Limit option, if any.
    pub encap_limit: Option<u8>,
    /// Tunnel MTU (the engine fragments above it; 1280 at least).
    pub mtu: u16,
    /// Traffic Class from the inner TOS.
    pub copy_tos: bool,
    /// TCP SYNs both ways: the largest MSS option let through (0: none).
    pub mss_max: u16,
    /// The lwB4: only the host's own packets (`None`: every packet, the
    /// DS-Lite B4 and the DSTM host).
    pub host: Option<HostSettings>,
}

/// The loaded B4 kernel path. Dropping it detaches both programs.
pub struct B4KernelPath {
    obj: Single,
    settings: B4Settings,
    cfg: B4Config,
    tc: Option<(String, SchedClassifierLinkId)>,
}

impl std::fmt::Debug for B4KernelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("B4KernelPath")
            .field("settings", &self.settings)
            .field("xdp", &self.obj.attachments())
            .field("tc", &self.tc.as_ref().map(|t| &t.0))
            .field("aftr", &self.aftr())
            .finish()
    }
}

impl B4KernelPath {
    /// Load both programs for `settings`; off (no AFTR) and attached nowhere.
    pub fn load(settings: B4Settings) -> Result<B4KernelPath, Error> {
        let names =
            Names { object: "the B4 BPF object", program: XDP_PROGRAM, tx: TX, ifmac: IFMAC, counters: COUNTERS };
        let mut obj = Single::load(&mut EbpfLoader::new(), OBJECT, names)?;
        let tc: &mut SchedClassifier = obj.program_mut(TC_PROGRAM)?;
        tc.load().map_err(|e| Error::Unavailable(format!("loading program {TC_PROGRAM}: {}", chain(&e))))?;
        let mut flags = 0;
        if settings.copy_tos {
            flags |= B4_F_COPY_TOS;
        }
        if settings.encap_limit.is_some() {
            flags |= B4_F_ENCAP_LIMIT;
        }
        if let Some(h) = settings.host {
            if u16::from(h.psid_offset) + u16::from(h.psid_len) > 16 || h.first > h.last {
                return Err(Error::Config(format!(
                    "host ports {}-{} with psid offset {} and length {}",
                    h.first, h.last, h.psid_offset, h.psid_len
                )));
            }
            flags |= B4_F_HOST;
        }
        let h = settings.host;
        let cfg = B4Config {
            local: settings.local.octets(),
            aftr: [0; 16],
            flags,
            mtu: settings.mtu.max(1280),
            hop_limit: settings.hop_limit,
            encap_limit: settings.encap_limit.unwrap_or(0),
            l2len: 0,
            tun_ifindex: 0,
            mss_max: settings.mss_max,
            pad: 0,
            host_addr: h.map_or([0; 4], |h| h.addr.octets()),
            host_first: h.map_or(0, |h| h.first),
            host_last: h.map_or(0, |h| h.last),
            psid: h.map_or(0, |h| h.psid),
            psid_offset: h.map_or(0, |h| h.psid_offset),
            psid_len: h.map_or(0, |h| h.psid_len),
        };
        let mut p = B4KernelPath { obj, settings, cfg, tc: None };
        p.write()?;
        Ok(p)
    }

    fn write(&mut self) -> Result<(), Error> {
        let cfg = self.cfg;
        let mut a: Array<&mut MapData, B4Config> =
            Array::try_from(self.obj.map_mut(CONFIG)?).map_err(|e| Error::Bpf(format!("map {CONFIG}: {e}")))?;
        a.set(0, cfg, 0).map_err(|e| map_err(CONFIG, e))
    }

    /// The settings in force.
    pub fn settings(&self) -> &B4Settings {
        &self.settings
    }

    /// The AFTR the path talks to; `None`: off, everything goes to the engine.
    pub fn aftr(&self) -> Option<Ipv6Addr> {
        (self.cfg.flags & B4_F_ON != 0).then(|| Ipv6Addr::from(self.cfg.aftr))
    }

    /// Talk to `aftr` (the DS-Lite AFTR, a DSTM lease's TEP), or stop
    /// (`None`: a DSTM host without a lease). Written only when it changes.
    pub fn set_aftr(&mut self, aftr: Option<Ipv6Addr>) -> Result<(), Error> {
        if self.aftr() == aftr {
            return Ok(());
        }
        match aftr {
            Some(a) => {
                self.cfg.aftr = a.octets();
                self.cfg.flags |= B4_F_ON;
            }
            None => {
                self.cfg.aftr = [0; 16];
                self.cfg.flags &= !B4_F_ON;
            }
        }
        self.write()
    }

    /// Attach the encapsulation to `tun`'s egress (TCX); the FIB lookup
    /// is made as from it.
    pub fn attach_tun(&mut self, tun: &str) -> Result<(), Error> {
        if self.tc.is_some() {
            return Err(Error::Interface(format!("{tun}: the tc program is attached already")));
        }
        let ifindex = crate::sys::if_index(tun).ok_or_else(|| Error::Interface(format!("{tun}: no such interface")))?;
        self.cfg.tun_ifindex = ifindex;
        self.cfg.l2len = 0;
        self.write()?;
        let tc: &mut SchedClassifier = self.obj.program_mut(TC_PROGRAM)?;
        let id = tc
            .attach(tun, TcAttachType::Egress)
            .map_err(|e| Error::Interface(format!("{tun}: tc egress attach failed: {}", chain(&e))))?;
        self.tc = Some((tun.to_owned(), id));
        Ok(())
    }

    /// Attach the decapsulation to uplink `iface` in `mode` (recording
    /// its MAC address) and let the encapsulation redirect to it.
    pub fn attach_uplink(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        self.obj.attach(iface, mode)
    }

    /// Detach both programs.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        if let Some((tun, id)) = self.tc.take() {
            let tc: &mut SchedClassifier = self.obj.program_mut(TC_PROGRAM)?;
            tc.detach(id).map_err(|e| Error::Interface(format!("{tun}: tc detach failed: {}", chain(&e))))?;
        }
        self.obj.detach_all()
    }

    /// The uplinks attached to.
    pub fn attachments(&self) -> &[Attachment] {
        self.obj.attachments()
    }

    /// The TUN device the tc program is attached to.
    pub fn tun(&self) -> Option<&str> {
        self.tc.as_ref().map(|t| t.0.as_str())
    }

    /// The counters summed over CPUs, in [`B4Counter::ALL`] order.
    pub fn counters(&self) -> Result<Vec<(B4Counter, Count)>, Error> {
        self.obj.counters(B4Counter::ALL, |c| c as u32)
    }

    /// Tests: FIB lookups as from `tun_ifindex`, frames given to
    /// [`B4KernelPath::test_run_tc`] carrying an Ethernet header (what
    /// BPF_PROG_TEST_RUN hands a tc program), redirects allowed to `egress`,
    /// frames accepted on `ifindex` only when addressed to `mac`.
    pub fn prepare_test(&mut self, tun_ifindex: u32, egress: u32, mac: [u8; 6]) -> Result<(), Error> {
        self.cfg.tun_ifindex = tun_ifindex;
        self.cfg.l2len = 14;
        self.write()?;
        self.obj.allow_egress(egress)?;
        self.obj.set_interface_mac(egress, mac)
    }

    /// The tc program over `frame` (Ethernet) with `BPF_PROG_TEST_RUN`
    /// (not live: nothing is sent); `action` is the `TC_ACT_*` verdict.
    pub fn test_run_tc(&self, frame: &[u8]) -> Result<TestResult, Error> {
        let prog: &SchedClassifier = self.obj.program(TC_PROGRAM)?;
        let mut out = vec![0u8; frame.len() + 256];
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.data_out = Some(&mut out);
        let r = prog.test_run(opts).map_err(|e| Error::Unavailable(format!("BPF_PROG_TEST_RUN: {}", chain(&e))))?;
        out.truncate(r.data_size_out as usize);
        Ok(TestResult { action: r.return_value, frame: out, ns_per_run: r.duration.as_nanos() as u64 })
    }

    /// The XDP program over `frame` with `BPF_PROG_TEST_RUN`, as received
    /// on `ingress_ifindex`.
    pub fn test_run_xdp(&self, frame: &[u8], ingress_ifindex: u32) -> Result<TestResult, Error> {
        self.obj.test_run(frame, ingress_ifindex, 1)
    }
}

impl Drop for B4KernelPath {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}
