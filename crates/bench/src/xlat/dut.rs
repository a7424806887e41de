//! The devices under test of `bench xlat`: whether each can run here, its
//! configuration (from `lab::gateconf`) and its process in the DUT
//! namespace.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use lab::gateconf::{self, Eam, Features};
use lab::netns::Netns;
use lab::topo::bench_addr::*;
use lab::topo::BenchTopo;

use super::{Ctx, Dut};
use crate::harness::guard::Proc;
use crate::harness::peers;
use crate::harness::{cpu, fastpath};

/// Why a DUT cannot run here (`None`: it can).
pub(super) fn availability(dut: Dut, v6gate: &Path) -> Option<String> {
    match dut {
        Dut::Tester | Dut::Kernel => None,
        Dut::TaygaSiit | Dut::TaygaNat64 => peers::require("tayga", Path::new("tayga")).err(),
        Dut::V6gateSiit | Dut::V6gateNat64 | Dut::V6gateXdpSiit | Dut::V6gateXdpNat64 => {
            let f = Features::of(v6gate);
            if !f.run {
                Some(format!("{} has no `run` subcommand (daemon not built in)", v6gate.display()))
            } else if dut.stateful() && !f.nat64 {
                Some("this v6gate has no [nat64]".into())
            } else if dut.xdp() && !f.xdp {
                Some("this v6gate has no [xdp] (XDP fast path)".into())
            } else {
                None
            }
        }
    }
}

/// The admin API of the XDP DUTs, in the DUT namespace (`v6gate ctl xdp`
/// tells when the fast path is attached and the NAT64 sessions mirrored).
pub const XDP_ADMIN: &str = "127.0.0.1:9164";

/// NAT64 sessions the XDP DUT's fast path may carry: every flow of a run
/// (`--flows`), with room.
const XDP_NAT64_SESSIONS: u32 = 1 << 17;

/// The TAYGA configuration for the bench (SIIT: a static map for the IPv6
/// host; NAT64: a dynamic pool).
pub fn tayga_conf(nat64: bool) -> String {
    gateconf::Tayga {
        header: None,
        tun_device: TUN.into(),
        ipv4_addr: XLAT4,
        prefix: POOL6.into(),
        maps: if nat64 { vec![] } else { vec![(HOST6_AS_V4, HOST6)] },
        dynamic_pool: nat64.then(|| POOL4.into()),
    }
    .render()
}

/// The v6gate configuration for the bench DUT; `xdp`: with the XDP fast
/// path (native mode) on the DUT's interfaces and the admin API on
/// `XDP_ADMIN`; `tun_extra`: `key = value` lines added to `[tun]`
/// (`--v6gate-tun`).
pub fn v6gate_conf(nat64: bool, xdp: bool, queues: usize, tun_extra: &[String]) -> Result<String> {
    let mut c = gateconf::V6gate {
        tun: Some(
            gateconf::Tun { name: TUN.into(), queues: Some(queues), ..Default::default() }.with_lines(tun_extra)?,
        ),
        admin: Some(if xdp {
            gateconf::Admin { enabled: Some(true), listen: Some(XDP_ADMIN.into()) }
        } else {
            gateconf::Admin { enabled: Some(false), listen: None }
        }),
        xdp: xdp.then(|| gateconf::Xdp {
            interfaces: vec!["d6".into(), "d4".into()],
            mode: Some("native".into()),
            nat64_sessions: nat64.then_some(XDP_NAT64_SESSIONS),
            trgw_streams: None,
        }),
        ..Default::default()
    };
    if nat64 {
        // Room for the session-setup trials' sessions (they are not reused).
        c.nat64 = Some(gateconf::Nat64 {
            pool6: POOL6.into(),
            pool4: vec![POOL4.into()],
            max_sessions: Some(4_194_304),
            max_bib: Some(4_194_304),
            mode: None,
        });
    } else {
        c.siit = Some(gateconf::Siit {
            pool6: Some(POOL6.into()),
            ipv4_address: Some(XLAT4),
            ipv6_address: None,
            eamt: vec![Eam::new(format!("{HOST6}/128"), format!("{HOST6_AS_V4}/32"))],
        });
    }
    c.render()
}

fn route_translated(ns: &Netns, nat64: bool) -> Result<()> {
    ns.ip(&["link", "set", TUN, "up"])?;
    ns.ip(&["-6", "route", "replace", POOL6, "dev", TUN])?;
    ns.ip(&["route", "replace", if nat64 { POOL4 } else { SIIT4 }, "dev", TUN])?;
    Ok(())
}

fn wait_for_link(ns: &Netns, dev: &str, p: &mut Proc) -> Result<()> {
    for _ in 0..100 {
        if ns.ip(&["link", "show", dev]).is_ok() {
            return Ok(());
        }
        p.alive()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the DUT did not create {dev} within 5 s{}", p.log_note())
}

/// `cmd args` in the DUT namespace on the DUT CPUs.
fn placed(ctx: &Ctx, ns: &Netns, cmd: &str) -> std::process::Command {
    let place = cpu::placement(&ctx.a.dut_cpus, false);
    let mut c = ns.command(&place[0]);
    c.args(&place[1..]).arg(cmd);
    c
}

/// Starts `dut` in the topology's DUT namespace (`None`: nothing runs
/// there; the tester and the kernel need no process).
pub(super) fn start(ctx: &Ctx, dut: Dut, topo: &BenchTopo) -> Result<Option<Proc>> {
    start_with(ctx, dut, topo, &[])
}

/// [`start`], with `tun_extra` `[tun]` lines after `--v6gate-tun`'s (v6gate DUTs).
pub(super) fn start_with(ctx: &Ctx, dut: Dut, topo: &BenchTopo, tun_extra: &[String]) -> Result<Option<Proc>> {
    let ns = &topo.dut;
    match dut {
        Dut::Tester => Ok(None),
        Dut::Kernel => {
            ns.ip(&["route", "add", SIIT4, "via", &T6_V4.to_string(), "dev", "d6"])?;
            Ok(None)
        }
        Dut::TaygaSiit | Dut::TaygaNat64 => {
            let conf = ctx.work.join("tayga.conf");
            std::fs::write(&conf, tayga_conf(dut.stateful()))?;
            let conf = conf.to_string_lossy().into_owned();
            ns.exec("tayga", &["--mktun", "-c", &conf])?;
            route_translated(ns, dut.stateful())?;
            let mut c = placed(ctx, ns, "tayga");
            c.args(["-c", &conf, "--nodetach"]);
            let mut p = Proc::spawn("tayga", c, Some(&ctx.work.join("tayga.log")))?;
            std::thread::sleep(Duration::from_millis(300));
            p.alive()?;
            Ok(Some(p))
        }
        Dut::V6gateSiit | Dut::V6gateNat64 | Dut::V6gateXdpSiit | Dut::V6gateXdpNat64 => {
            let conf = ctx.work.join("v6gate.toml");
            let tun: Vec<String> = ctx.a.v6gate_tun.iter().chain(tun_extra).cloned().collect();
            std::fs::write(&conf, v6gate_conf(dut.stateful(), dut.xdp(), ctx.dut_cpus.len(), &tun)?)?;
            let mut c = placed(ctx, ns, &ctx.v6gate.to_string_lossy());
            c.args(["run", "--config", &conf.to_string_lossy()]);
            let mut p = Proc::spawn("v6gate", c, Some(&ctx.work.join("v6gate.log")))?;
            wait_for_link(ns, TUN, &mut p)?;
            route_translated(ns, dut.stateful())?;
            if dut.xdp() {
                // The fast path redirects into d6/d4, whose peers (the
                // tester's ports) need NAPI (GRO on) to take the frames,
                // whichever tester runs.
                for (tns, dev) in [(&topo.t6, "t6"), (&topo.t4, "t4")] {
                    tns.run(|| xdp::sys::set_gro(dev, true).with_context(|| format!("GRO on {dev}")))?;
                }
                let x = wait_xdp(ctx, ns, &mut p, "attached to d6 and d4", |x| {
                    x["interfaces"].as_array().is_some_and(|a| a.len() == 2)
                })?;
                let modes: Vec<&str> =
                    x["interfaces"].as_array().into_iter().flatten().filter_map(|i| i["mode"].as_str()).collect();
                eprintln!("bench xlat: {}: XDP attached ({})", dut.name(), modes.join(", "));
            }
            Ok(Some(p))
        }
    }
}

/// `v6gate ctl xdp` of the DUT, once `ok` holds for it (10 s at most).
pub(super) fn wait_xdp(
    ctx: &Ctx,
    ns: &Netns,
    p: &mut Proc,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let v6gate = ctx.v6gate.to_string_lossy();
    let mut last;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        p.alive()?;
        match fastpath::ctl_xdp(ns, &v6gate, XDP_ADMIN) {
            Ok(x) if ok(&x) => return Ok(x),
            Ok(x) => last = x.to_string(),
            Err(e) => last = format!("{e:#}"),
        }
        if std::time::Instant::now() > deadline {
            bail!("the XDP fast path was not {what} within 10 s: {last}{}", p.log_note());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_name_the_bench_addresses() {
        let t = tayga_conf(false);
        assert!(t.contains("map 192.0.2.130 2001:db8:46::10") && t.contains("prefix 2001:db8:64::/96"));
        assert!(tayga_conf(true).contains("dynamic-pool 203.0.113.128/25"));
        let v = v6gate_conf(false, false, 1, &["io = \"poll\"".to_string()]).unwrap();
        assert!(
            v.contains("[siit]") && v.contains("name = \"xlat0\"") && v.contains("queues = 1\nio = \"poll\"\n"),
            "{v}"
        );
        assert!(v6gate_conf(true, false, 2, &[]).unwrap().contains("max-sessions = 4194304"));
        assert!(v6gate_conf(false, false, 1, &["not toml".into()]).is_err());
        assert!(!v.contains("[xdp]") && v.contains("enabled = false"), "{v}");
        let x = v6gate_conf(true, true, 1, &[]).unwrap();
        // (lab::gateconf's tests parse [xdp] with the daemon's parser.)
        assert!(
            x.contains("[xdp]\ninterfaces = [\"d6\", \"d4\"]\nmode = \"native\"\nnat64-sessions = 131072\n"),
            "{x}"
        );
        assert!(x.contains(&format!("enabled = true\nlisten = \"{XDP_ADMIN}\"")), "{x}");
        assert!(!v6gate_conf(false, true, 1, &[]).unwrap().contains("nat64-sessions"));
    }

    #[test]
    fn missing_tayga_is_a_skip_note() {
        if peers::find(Path::new("tayga")).is_none() {
            assert_eq!(
                availability(Dut::TaygaSiit, Path::new("v6gate")).as_deref(),
                Some("tayga is not installed (tayga not found on PATH)")
            );
        }
        assert_eq!(availability(Dut::Kernel, Path::new("/nonexistent")), None);
        assert!(availability(Dut::V6gateSiit, Path::new("/nonexistent/v6gate")).unwrap().contains("no `run`"));
    }
}
