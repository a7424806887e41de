//! The probes behind [`super::Report`]: each asks the kernel once, in a
//! throwaway namespace where it touches the network, and records what the
//! kernel answered.

use std::path::Path;
use std::time::Duration;

use lab::netns::Netns;
use socket2::{Domain, Protocol, Socket, Type};
use xdp::tester::LiveFrames;

use super::{CpuIdle, Feature, NoFile, Peer, Report, State};
use crate::harness::peers;

/// A feature's fixed words: its id, its name and what its absence disables.
struct Spec {
    id: &'static str,
    name: &'static str,
    without: &'static str,
}

const fn spec(id: &'static str, name: &'static str, without: &'static str) -> Spec {
    Spec { id, name, without }
}

impl Spec {
    fn is(&self, state: State, detail: impl Into<String>) -> Feature {
        Feature { id: self.id, name: self.name, state, detail: detail.into(), without: self.without }
    }

    fn from<E: std::fmt::Display>(&self, r: Result<String, E>) -> Feature {
        match r {
            Ok(d) => self.is(State::Yes, d),
            Err(e) => self.is(State::No, e.to_string()),
        }
    }
}

const NETNS: Spec = spec("netns", "network namespaces", "the lab, every bench and every namespace test");
const TUN: Spec =
    spec("tun", "TUN devices", "v6gate run's translators, the tunnels and the softwires (their userspace engines)");
const XDP_NATIVE: Spec = spec(
    "xdp-native",
    "native XDP on veth",
    "the fast path and the XDP tester's receiver in the veth driver (they fall back to generic XDP)",
);
const XDP_GENERIC: Spec = spec("xdp-generic", "generic XDP", "XDP on interfaces whose driver has no XDP hook");
const TEST_RUN: Spec = spec(
    "bpf-test-run",
    "BPF_PROG_TEST_RUN",
    "the XDP differential tests (fast path byte-identical to the Rust core) and the cost bench",
);
const LIVE_FRAMES: Spec = spec(
    "live-frames",
    "BPF_PROG_RUN live frames",
    "the XDP tester's in-kernel generator (--tester xdp) and its tests",
);
const AF_XDP: Spec = spec("af-xdp", "AF_XDP sockets (copy mode, veth)", "the AF_XDP tester (--tester afxdp)");
const SK_LOOKUP: Spec =
    spec("sk-lookup", "BPF sk_lookup", "[trgw] sockets = \"shared\" (media ports steered to a few sockets)");
const SOCKMAP: Spec = spec(
    "sockmap",
    "BPF sockmap (sk_skb verdict)",
    "[trt] copy = \"sockmap\" (TCP copied in the kernel; the relay splices instead)",
);
const IO_URING: Spec = spec("io-uring", "io_uring", "io = \"uring\" of [tun] and [trgw] (io = \"poll\" works without)");
const RAW_41: Spec = spec(
    "raw-ip41",
    "raw IPv4 sockets, protocol 41",
    "the 6to4 and 6rd tunnels (v6gate tunnel, [sixtofour], [sixrd]) and bench tunnel's 6to4 rows",
);
const RAW_4: Spec = spec(
    "raw-ip6-4",
    "raw IPv6 sockets, protocol 4",
    "nothing of v6gate's own (its softwires carry 4in6 on TUN devices); kernel-less 4in6 experiments",
);
const PM_QOS: Spec =
    spec("pm-qos", "PM QoS CPU latency requests", "[trt] cpu-latency and bench transition --trt-cpu-latency");

/// Every feature that needs root to probe, in report order.
const ROOT_FEATURES: [&Spec; 12] = [
    &NETNS,
    &TUN,
    &XDP_NATIVE,
    &XDP_GENERIC,
    &TEST_RUN,
    &LIVE_FRAMES,
    &AF_XDP,
    &SK_LOOKUP,
    &SOCKMAP,
    &RAW_41,
    &RAW_4,
    &PM_QOS,
];

/// A peer: its name, program, the flag that prints its version (none:
/// the Debian package's version), its Debian package, what needs it.
struct PeerSpec {
    name: &'static str,
    program: &'static str,
    flag: Option<&'static str>,
    package: &'static str,
    without: &'static str,
}

const PEERS: [PeerSpec; 8] = [
    PeerSpec {
        name: "TAYGA",
        program: "tayga",
        flag: None,
        package: "tayga",
        without: "bench xlat's TAYGA rows, the lab with TAYGA and its test",
    },
    PeerSpec {
        name: "rtpengine",
        program: "rtpengine",
        flag: Some("--version"),
        package: "rtpengine-daemon",
        without: "the rtpengine rows of bench trgw and bench sip, the reference interop test",
    },
    PeerSpec {
        name: "Kamailio",
        program: "kamailio",
        flag: Some("-v"),
        package: "kamailio",
        without: "bench sip's Kamailio+rtpengine rows and the Kamailio interop tests",
    },
    PeerSpec {
        name: "SIPp",
        program: "sipp",
        flag: Some("-v"),
        package: "sip-tester",
        without: "bench sip and the SIP interop tests (their calls), TRT's SIP test",
    },
    PeerSpec {
        name: "Miredo",
        program: "miredo",
        flag: Some("-V"),
        package: "miredo",
        without: "bench tunnel's Miredo rows and the Teredo interop tests",
    },
    PeerSpec {
        name: "Miredo server",
        program: "miredo-server",
        flag: Some("-V"),
        package: "miredo-server",
        without: "the Teredo interop test against Miredo's server",
    },
    PeerSpec {
        name: "socat",
        program: "socat",
        flag: Some("-V"),
        package: "socat",
        without: "bench transition's socat row",
    },
    PeerSpec {
        name: "nftables",
        program: "nft",
        flag: Some("--version"),
        package: "nftables",
        without: "TRT's tproxy rule (setup = \"auto\") and the tunnel and TRT tests' NATs",
    },
];

/// Probes this host (see the module documentation of [`super`]). Never
/// fails: what cannot be probed is `unknown`, with the reason.
pub fn probe() -> Report {
    let root = lab::testenv::is_root();
    let mut features = if root { root_features() } else { unprobed() };
    features.push(io_uring());
    let mut r = Report {
        kernel: kernel(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| cpu_model(&t)),
        root,
        features,
        nofile: nofile(),
        cpuidle: cpuidle(),
        peers: PEERS.iter().map(peer).collect(),
        summary: String::new(),
    };
    r.summary = r.summary();
    r
}

/// The features that need root, as a process without it reports them.
fn unprobed() -> Vec<Feature> {
    ROOT_FEATURES.iter().map(|s| s.is(State::Unknown, "needs root to probe")).collect()
}

fn kernel() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// The first `model name` of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_owned())
    })
}

/// Whether capability `bit` is in the `CapEff:` mask of a
/// `/proc/<pid>/status` text.
fn cap_effective(status: &str, bit: u32) -> Option<bool> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    u64::from_str_radix(hex, 16).ok().map(|mask| mask >> bit & 1 == 1)
}

/// CAP_SYS_RESOURCE (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;

fn nofile() -> Option<NoFile> {
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()?;
    let read_u64 = |p: &str| std::fs::read_to_string(p).ok().and_then(|t| t.trim().parse().ok());
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    Some(NoFile {
        soft,
        hard,
        nr_open: read_u64("/proc/sys/fs/nr_open"),
        can_raise_hard: cap_effective(&status, CAP_SYS_RESOURCE).unwrap_or(false),
    })
}

fn cpuidle() -> CpuIdle {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpuidle/{f}")).ok().map(|t| t.trim().to_owned())
    };
    CpuIdle {
        driver: read("current_driver"),
        governor: read("current_governor").or_else(|| read("current_governor_ro")),
        pm_qos_limit_us: netsys::cpu_latency::current().ok().map(|d| d.as_micros() as u64),
    }
}

fn peer(p: &PeerSpec) -> Peer {
    let path = peers::find(Path::new(p.program));
    let version = path.as_deref().and_then(|bin| {
        let own = p.flag.and_then(|flag| peers::output_of(bin, &[flag])).and_then(|o| super::version_number(&o));
        own.or_else(|| {
            let o = peers::output_of(Path::new("dpkg-query"), &["--showformat=${Version}", "--show", p.package]);
            o.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty() && !v.contains(char::is_whitespace))
        })
    });
    Peer { name: p.name, program: p.program, path: path.map(|p| p.display().to_string()), version, without: p.without }
}

fn io_uring() -> Feature {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    match io_uring::IoUring::new(4) {
        Ok(_) => IO_URING.is(State::Yes, "io_uring_setup works"),
        Err(e) => {
            let why = match sysctl.as_deref().map(str::trim) {
                Some(v) if v != "0" => format!("io_uring_setup: {e} (kernel.io_uring_disabled = {v})"),
                _ => format!("io_uring_setup: {e}"),
            };
            IO_URING.is(State::No, why)
        }
    }
}

/// The probes that need root: one throwaway namespace with a veth pair.
fn root_features() -> Vec<Feature> {
    let ns = match Netns::unique("v6doc") {
        Ok(ns) => ns,
        Err(e) => {
            let mut out = vec![NETNS.is(State::No, format!("{e:#}"))];
            out.extend(ROOT_FEATURES[1..].iter().map(|s| s.is(State::Unknown, "not probed: no namespace to probe in")));
            return out;
        }
    };
    let veth = ns
        .ip(&["link", "add", "dxa", "type", "veth", "peer", "name", "dxb"])
        .and_then(|_| ns.ip(&["link", "set", "dxa", "up"]))
        .and_then(|_| ns.ip(&["link", "set", "dxb", "up"]))
        .map(|_| ())
        .map_err(|e| format!("no veth pair: {e:#}"));
    let inside = ns.run(|| Ok(in_namespace(veth)));
    let mut out = vec![NETNS.is(State::Yes, "created one (and removed it)")];
    match inside {
        Ok(mut f) => out.append(&mut f),
        Err(e) => out.extend(ROOT_FEATURES[1..].iter().map(|s| s.is(State::Unknown, format!("not probed: {e:#}")))),
    }
    out
}

/// The features probed on a thread inside the namespace, in
/// [`ROOT_FEATURES`] order from [`TUN`].
fn in_namespace(veth: Result<(), String>) -> Vec<Feature> {
    let tun = TUN.from(netsys::tun::open_queues("v6doc0", 1, true).map(|_| "created a device (and removed it)".into()));
    let (native, generic, test_run) = xdp_attach_and_test_run(&veth);
    let live = match xdp::tester::live_frames() {
        Ok(LiveFrames::Granted) => LIVE_FRAMES.is(State::Yes, "granted"),
        Ok(refused @ LiveFrames::Refused(_)) => LIVE_FRAMES.is(State::No, refused.describe()),
        Err(e) => LIVE_FRAMES.is(State::Unknown, format!("the probe failed: {e}")),
    };
    let af_xdp = match (&veth, xdp::sys::if_index("dxa")) {
        (Ok(()), Some(i)) => {
            // The tester's own socket code (`xdp::xsk`), with small rings.
            let cfg = xdp::xsk::TxConfig { frames: 64, tx_ring: 64, budget: 32, ..xdp::xsk::TxConfig::new(i) };
            AF_XDP.from(xdp::xsk::TxSocket::open(cfg).map(|s| format!("bound to a veth's queue 0 ({})", s.describe())))
        }
        (Err(e), _) => AF_XDP.is(State::Unknown, e.clone()),
        (Ok(()), None) => AF_XDP.is(State::Unknown, "the veth is gone"),
    };
    let sk_lookup = SK_LOOKUP.from(xdp::sklookup::SkLookup::attach(1, 1).map(|_| "attached to a namespace".into()));
    let sockmap = SOCKMAP.from(xdp::sockmap::SockRelay::load(1).map(|_| "loaded and attached to a sockhash".into()));
    let raw = |d: Domain, p: i32| Socket::new(d, Type::RAW, Some(Protocol::from(p))).map(|_| "opened one".to_owned());
    let raw41 = RAW_41.from(raw(Domain::IPV4, 41));
    let raw4 = RAW_4.from(raw(Domain::IPV6, 4));
    // The longest limit there is: held, it changes nothing.
    let qos = netsys::cpu_latency::CpuLatency::hold(Duration::from_secs(2_000))
        .map(|_| format!("{} accepts requests", netsys::cpu_latency::DEVICE));
    let pm_qos = PM_QOS.from(qos.map_err(|e| format!("{}: {e}", netsys::cpu_latency::DEVICE)));
    vec![tun, native, generic, test_run, live, af_xdp, sk_lookup, sockmap, raw41, raw4, pm_qos]
}

/// The fast path's object loaded with small maps: native XDP on `dxa`,
/// generic on `dxb`, and one `BPF_PROG_TEST_RUN` of its program.
fn xdp_attach_and_test_run(veth: &Result<(), String>) -> (Feature, Feature, Feature) {
    let small = xdp::Limits {
        eamt: 16,
        nat64_sessions: 16,
        trgw_relays: 16,
        trgw_stats: 16,
        tx_ports: 4,
        fib_cache: 16,
        routes: 16,
        nexthops: 16,
    };
    let mut fp = match xdp::FastPath::load(small) {
        Ok(fp) => fp,
        Err(e) => {
            let why = format!("the fast path does not load: {e}");
            return (XDP_NATIVE.is(State::No, &why), XDP_GENERIC.is(State::No, &why), TEST_RUN.is(State::No, why));
        }
    };
    // An Ethernet frame of the local experimental EtherType: passed.
    let mut frame = [0u8; 64];
    frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    let test_run = TEST_RUN.from(
        fp.test_run(xdp::types::progs::GATE, &frame, 1, 1)
            .map(|r| format!("ran the fast path's program on a frame (action {})", r.action)),
    );
    if let Err(e) = veth {
        return (XDP_NATIVE.is(State::Unknown, e.clone()), XDP_GENERIC.is(State::Unknown, e.clone()), test_run);
    }
    let native = match fp.attach("dxa", xdp::Mode::Native) {
        Ok(Some(a)) if a.mode == xdp::Mode::Native => XDP_NATIVE.is(State::Yes, "attached to a veth in the driver"),
        Ok(Some(a)) => XDP_NATIVE.is(
            State::No,
            format!("the kernel attached it generic: {}", a.fallback.as_deref().unwrap_or("no reason given")),
        ),
        Ok(None) => XDP_NATIVE.is(State::Unknown, "nothing attached"),
        Err(e) => XDP_NATIVE.is(State::No, e.to_string()),
    };
    let generic = match fp.attach("dxb", xdp::Mode::Generic) {
        Ok(Some(_)) => XDP_GENERIC.is(State::Yes, "attached to a veth"),
        Ok(None) => XDP_GENERIC.is(State::Unknown, "nothing attached"),
        Err(e) => XDP_GENERIC.is(State::No, e.to_string()),
    };
    let _ = fp.detach_all();
    (native, generic, test_run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model(info).as_deref(), Some("Intel(R) Xeon(R) Platinum 8375C"));
        assert_eq!(cpu_model("processor: 0\n"), None);
    }

    #[test]
    fn without_root_the_kernel_features_are_unknown_and_say_why() {
        let f = unprobed();
        // Each once (tests/doctor.rs checks the report's order as root).
        let mut ids: Vec<&str> = f.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ROOT_FEATURES.len());
        assert!(!ids.contains(&"io-uring"), "probed without root");
        assert!(f.iter().all(|f| f.state == State::Unknown && f.detail == "needs root to probe"));
    }

    #[test]
    fn capabilities_are_read_from_the_effective_mask() {
        // Root in a container without CAP_SYS_RESOURCE (bit 24 clear) ...
        let without = "Name:\tv6gate\nCapInh:\t0000000000000000\nCapEff:\t00000000a80c25fb\n";
        assert_eq!(cap_effective(without, CAP_SYS_RESOURCE), Some(false));
        assert_eq!(cap_effective(without, 0), Some(true), "CAP_CHOWN");
        // ... and with every capability.
        assert_eq!(cap_effective("CapEff:\t000001ffffffffff\n", CAP_SYS_RESOURCE), Some(true));
        assert_eq!(cap_effective("Name: x\n", CAP_SYS_RESOURCE), None);
        assert_eq!(cap_effective("CapEff:\tzz\n", CAP_SYS_RESOURCE), None);
    }
}
