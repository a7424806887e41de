//! The B4's kernel datapath (`xdp::b4`, `bpf/b4.bpf.c`) for a DS-Lite B4,
//! a DSTM host or a host-integrated lwB4 (`[b4.kernel]`; the lwB4's: the
//! host's own traffic only, [`crate::b4::Napt::host`]): tc egress on the TUN device
//! encapsulates, XDP on the uplinks decapsulates, and whatever the
//! engine must do itself (outer fragmentation and reassembly, ICMP
//! relaying, packets over the tunnel MTU) still reaches it through the
//! TUN device. The engine's configuration is the path's: same address,
//! hop limit, Traffic Class rule and encapsulation limit; the runner
//! points it at the AFTR, or for a DSTM host at the TEP of the lease in
//! force (and turns it off without one).

use crate::b4::{B4Config, Napt};
use crate::config::B4Kernel;
use crate::fast::xdp_status;
use anyhow::{bail, Context as _, Result};
use core::net::Ipv6Addr;
use xdp::b4::{B4Counter, B4KernelPath, B4Settings, HostSettings};

/// The kernel path's settings for a B4 configured with `cfg`.
pub fn settings(cfg: &B4Config) -> B4Settings {
    let e = cfg.endpoint;
    B4Settings {
        local: e.local,
        hop_limit: e.hop_limit,
        encap_limit: e.encap_limit,
        mtu: e.mtu,
        copy_tos: e.copy_tos,
        mss_max: if cfg.mss_clamp { crate::b4::mss_max(&e) } else { 0 },
        host: cfg.napt.and_then(|n| {
            n.host.map(|h| HostSettings {
                addr: n.ipv4,
                first: h.first,
                last: h.last,
                psid: n.psid,
                psid_offset: n.map.offset(),
                psid_len: n.map.psid_len(),
            })
        }),
    }
}

/// Refuse an uplink whose reverse-path filter is strict: the decapsulated
/// IPv4 packets arrive on the uplink while the routes back to their
/// sources point into the TUN device, so `rp_filter = 1` would drop them
/// (0 or 2, loose, let them in; the kernel uses the larger of `all` and
/// the interface's value).
pub fn check_rp_filter(iface: &str) -> Result<()> {
    let read = |d: &str| -> Result<u8> {
        let p = format!("/proc/sys/net/ipv4/conf/{d}/rp_filter");
        let s = std::fs::read_to_string(&p).with_context(|| format!("reading {p}"))?;
        s.trim().parse().with_context(|| format!("{p}: `{}`", s.trim()))
    };
    let v = read("all")?.max(read(iface)?);
    if v == 1 {
        bail!(
            "{iface}: rp_filter is strict (1): the decapsulated IPv4 packets arrive on {iface} while their \
             sources route into the TUN device; set net.ipv4.conf.{{all,{iface}}}.rp_filter to 2 (loose) or 0"
        );
    }
    Ok(())
}

/// The loaded, attached kernel path of one B4.
#[derive(Debug)]
pub struct B4Fast {
    kp: B4KernelPath,
    last_error: Option<String>,
}

impl B4Fast {
    /// Load the programs for `cfg`, attach the encapsulation to `tun` and
    /// the decapsulation to `k`'s uplinks. Off until [`B4Fast::set_aftr`].
    pub fn start(cfg: &B4Config, tun: &str, k: &B4Kernel) -> Result<B4Fast> {
        for i in &k.interfaces {
            check_rp_filter(i).context("[b4.kernel] interfaces")?;
        }
        let mut kp = B4KernelPath::load(settings(cfg)).context("[b4.kernel]")?;
        kp.attach_tun(tun).context("[b4.kernel] the TUN device")?;
        for i in &k.interfaces {
            kp.attach_uplink(i, k.mode).with_context(|| format!("[b4.kernel] interfaces: {i}"))?;
        }
        Ok(B4Fast { kp, last_error: None })
    }

    /// The loaded path.
    pub fn path(&self) -> &B4KernelPath {
        &self.kp
    }

    /// Talk to `aftr` (unspecified or `None`: off). An error stays in the
    /// status; the packets then take the TUN engine.
    pub fn set_aftr(&mut self, aftr: Option<Ipv6Addr>) {
        let a = aftr.filter(|a| !a.is_unspecified());
        match self.kp.set_aftr(a) {
            Ok(()) => self.last_error = None,
            Err(e) => {
                tracing::warn!("[b4.kernel]: {e}; the TUN engine carries everything");
                self.last_error = Some(e.to_string());
            }
        }
    }

    /// The status: attachments, the AFTR in use, counters by label.
    pub fn status(&self) -> serde_json::Value {
        let (uplinks, counters) = xdp_status(self.kp.attachments(), self.kp.counters(), B4Counter::label);
        serde_json::json!({
            "tun": self.kp.tun(),
            "uplinks": uplinks,
            "aftr": self.kp.aftr().map(|a| a.to_string()),
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}

/// The host-integrated lwB4's share of the port set (`[b4] host-ports`) and
/// the sysctls that confine the host's stack to it (docs/softwire.md
/// "Host-integrated lwB4"): `null` without host ports.
pub fn host_ports_status(napt: Option<&Napt>) -> serde_json::Value {
    let Some((n, h)) = napt.and_then(|n| n.host.map(|h| (n, h))) else { return serde_json::Value::Null };
    serde_json::json!({
        "first": h.first,
        "last": h.last,
        "ports": n.host_ports().count(),
        "ip_local_port_range": format!("{} {}", h.first, h.last),
        "ip_local_reserved_ports": n.host_reserved(),
    })
}

/// Warn when this namespace's `net.ipv4.ip_local_port_range` reaches
/// outside the host's ports: the host's connections from the other ports
/// then go through the NAPT (they work, on the engine).
pub fn check_local_ports(napt: &Napt) {
    let Some(h) = napt.host else { return };
    let p = "/proc/sys/net/ipv4/ip_local_port_range";
    let range = std::fs::read_to_string(p).ok().and_then(|s| {
        let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
        Some((it.next()??, it.next()??))
    });
    match range {
        Some((lo, hi)) if lo >= h.first && hi <= h.last => {}
        r => tracing::warn!(
            current = ?r,
            "[b4] host-ports {}-{}: set net.ipv4.ip_local_port_range = \"{} {}\" and \
             net.ipv4.ip_local_reserved_ports = \"{}\" so that the host's own connections use its ports \
             (and the kernel path); others go through the NAPT",
            h.first,
            h.last,
            h.first,
            h.last,
            napt.host_reserved()
        ),
    }
}
