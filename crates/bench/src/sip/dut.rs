//! The gateways under test of `bench sip`, in the relay namespace on the
//! same addresses: v6gate (`v6gate run` with `[alg]` and its in-process
//! `[trgw]`) and Kamailio with rtpengine (userspace) over ng. Both listen
//! for SIP on `[RELAY6]:5060` and `RELAY4:5060` and put media on the same
//! two addresses.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use lab::gateconf;
use lab::netns::Netns;
use lab::topo::relay_addr::*;

use crate::harness::cpu;
use crate::harness::guard::{pid_cpu_seconds, Proc};
use crate::trgw::{rtpengine_args, wait_for_ng};

const KAMAILIO_CFG: &str = include_str!("kamailio.cfg");

/// Where Debian installs Kamailio's modules.
pub const KAMAILIO_MODULES: &str = "/usr/lib/x86_64-linux-gnu/kamailio/modules/";

/// The SIP port of both gateways.
pub const SIP_PORT: u16 = 5060;

/// Media ports of both gateways.
pub const PORTS: (u16, u16) = (20000, 59999);

/// Where the caller sends its requests when a gateway is under test.
pub fn sip6() -> SocketAddr {
    SocketAddr::new(IpAddr::V6(RELAY6), SIP_PORT)
}

/// v6gate's configuration: the ALG on both relay addresses, media from its
/// own TrGW (`workers` threads) on the same addresses. No per-source rate
/// limit (every call of the bench comes from one caller) and room for
/// the transactions that RFC 3261's timers keep for 32 s at thousands of
/// calls per second.
pub fn v6gate_config(workers: usize) -> Result<String> {
    let iface = |name: &str, v6: bool| gateconf::TrgwInterface {
        name: name.into(),
        ipv4: (!v6).then_some(RELAY4),
        ipv6: v6.then_some(RELAY6),
    };
    gateconf::V6gate {
        header: vec!["v6gate bench sip: the IMS-ALG and its TrGW between the ua6 and ua4 namespaces".into()],
        trgw: Some(gateconf::Trgw {
            port_min: PORTS.0,
            port_max: PORTS.1,
            workers: Some(workers),
            // No socket()+bind() per media port in the SIP thread: what an
            // operator runs at thousands of calls/s (docs/bench-sip.md).
            sockets: Some("shared".into()),
            interface: vec![iface("v6", true), iface("v4", false)],
            ..Default::default()
        }),
        alg: Some(gateconf::Alg {
            listen_v6: format!("[{RELAY6}]:{SIP_PORT}"),
            listen_v4: format!("{RELAY4}:{SIP_PORT}"),
            tcp: Some(false),
            media_v6_interface: Some("v6".into()),
            media_v4_interface: Some("v4".into()),
            rate_limit: Some(0),
            max_transactions: Some(2_000_000),
            // One caller sends every call: the global caps alone, sized
            // for thousands of calls/s held 32 s by Timer J.
            client_share: Some(100),
            max_state_bytes: Some(4 << 30),
            ..Default::default()
        }),
        ..Default::default()
    }
    .render()
}

/// Kamailio's configuration (this module's `kamailio.cfg`) for `children`
/// UDP worker processes, rtpengine on [`NG`].
pub fn kamailio_config(children: usize) -> String {
    KAMAILIO_CFG
        .replace("@CHILDREN@", &children.max(1).to_string())
        .replace("@GW6@", &RELAY6.to_string())
        .replace("@GW4@", &RELAY4.to_string())
        .replace("@NG@", NG)
        .replace("@MPATH@", KAMAILIO_MODULES)
}

/// A running gateway: its processes (killed when dropped).
#[derive(Debug)]
pub struct Gateway {
    pub procs: Vec<Proc>,
}

impl Gateway {
    /// Fails when a process of the gateway has exited.
    pub fn alive(&mut self) -> Result<()> {
        for p in &mut self.procs {
            p.alive()?;
        }
        Ok(())
    }

    /// CPU seconds used so far by every process in the gateway's
    /// namespace (Kamailio's children included).
    pub fn cpu_seconds(relay: &Netns) -> f64 {
        relay.pids().into_iter().filter_map(|p| pid_cpu_seconds(p as u32)).sum()
    }

    /// The end of each process's log.
    pub fn log_tail(&self) -> String {
        self.procs.iter().map(Proc::log_tail).collect::<Vec<_>>().join("\n")
    }
}

/// What [`start`] needs.
#[derive(Debug)]
pub struct Setup<'a> {
    pub relay: &'a Netns,
    pub work: &'a Path,
    /// CPUs of the gateway (taskset list).
    pub cpus: &'a str,
    pub realtime: bool,
    /// Worker threads of the media relay (v6gate's TrGW, rtpengine).
    pub threads: usize,
}

fn wait_sip(relay: &Netns, p: &mut Proc, want: usize, what: &str) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(10);
    while relay.udp_listeners(SIP_PORT) < want {
        p.alive()?;
        if Instant::now() > end {
            bail!("{what} does not listen on UDP {SIP_PORT}{}", p.log_note());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Starts `v6gate run` and waits until the ALG listens in both realms.
pub fn start_v6gate(s: &Setup, bin: &Path) -> Result<Gateway> {
    let cfg = s.work.join("v6gate-sip.toml");
    std::fs::write(&cfg, v6gate_config(s.threads)?)?;
    let place = cpu::placement(s.cpus, s.realtime);
    let mut cmd = s.relay.command(&place[0]);
    cmd.args(&place[1..]).arg(bin).arg("run").arg("--config").arg(&cfg);
    let mut p = Proc::spawn("v6gate run", cmd, Some(&s.work.join("v6gate.log")))?;
    wait_sip(s.relay, &mut p, 2, "v6gate run")?;
    Ok(Gateway { procs: vec![p] })
}

/// Starts rtpengine (userspace, ng on [`NG`]) and Kamailio with
/// `children` worker processes per socket, and waits
/// until rtpengine answers ng and Kamailio listens in both realms.
pub fn start_kamailio(s: &Setup, kamailio: &Path, rtpengine: &Path, children: usize) -> Result<Gateway> {
    let place = cpu::placement(s.cpus, s.realtime);
    let mut cmd = s.relay.command(&place[0]);
    cmd.args(&place[1..]).arg(rtpengine).args(rtpengine_args(NG, RELAY4, RELAY6, PORTS, Some(s.threads), 4));
    let mut rtp = Proc::spawn("rtpengine", cmd, Some(&s.work.join("rtpengine.log")))?;
    wait_for_ng(s.relay, &mut rtp, "rtpengine")?;
    let cfg = s.work.join("kamailio.cfg");
    std::fs::write(&cfg, kamailio_config(children))?;
    let run: PathBuf = s.work.join("kamailio-run");
    std::fs::create_dir_all(&run)?;
    let mut cmd = s.relay.command(&place[0]);
    cmd.args(&place[1..]).arg(kamailio).arg("-f").arg(&cfg).args(["-DD", "-E", "-m", "512", "-M", "32"]);
    cmd.arg("-Y").arg(&run).arg("-P").arg(run.join("kamailio.pid"));
    let mut k = Proc::spawn("kamailio", cmd, Some(&s.work.join("kamailio.log")))?;
    wait_sip(s.relay, &mut k, 2, "kamailio")?;
    Ok(Gateway { procs: vec![k, rtp] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations() {
        let v = v6gate_config(1).unwrap();
        assert!(v.contains("listen-v6 = \"[2001:db8:6::1]:5060\"") && v.contains("rate-limit = 0"), "{v}");
        assert!(v.contains("listen-v4 = \"10.0.4.1:5060\"") && v.contains("media-v4-interface = \"v4\""), "{v}");
        let k = kamailio_config(2);
        assert!(k.contains("children=2") && k.contains("listen=udp:[2001:db8:6::1]:5060"), "{k}");
        assert!(k.contains("\"udp:127.0.0.1:2223\""), "{k}");
        assert!(!k.contains("@CHILDREN@") && !k.contains("@MPATH@") && !k.contains("@NG@"), "{k}");
    }
}
