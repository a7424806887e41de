//! The devices under test of `bench xlat`: whether each can run here, its
//! configuration (from `lab::gateconf`) and its process in the DUT
//! namespace.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use lab::gateconf::{self, Eam, Features};
use lab::netns::Netns;
use lab::topo::bench_addr::*;
use lab::topo::BenchTopo;

use super::{Ctx, Dut};
use crate::harness::cpu;
use crate::harness::guard::Proc;
use crate::harness::peers;

/// Why a DUT cannot run here (`None`: it can).
pub(super) fn availability(dut: Dut, v6gate: &Path) -> Option<String> {
    match dut {
        Dut::Tester | Dut::Kernel => None,
        Dut::TaygaSiit | Dut::TaygaNat64 => peers::require("tayga", Path::new("tayga")).err(),
        Dut::V6gateSiit | Dut::V6gateNat64 => {
            let f = Features::of(v6gate);
            if !f.run {
                Some(format!("{} has no `run` subcommand (daemon not built in)", v6gate.display()))
            } else if dut == Dut::V6gateNat64 && !f.nat64 {
                Some("this v6gate has no [nat64]".into())
            } else {
                None
            }
        }
    }
}

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

/// The v6gate configuration for the bench DUT; `tun_extra`: `key = value`
/// lines added to `[tun]` (`--v6gate-tun`).
pub fn v6gate_conf(nat64: bool, queues: usize, tun_extra: &[String]) -> Result<String> {
    let mut c = gateconf::V6gate {
        tun: Some(
            gateconf::Tun { name: TUN.into(), queues: Some(queues), ..Default::default() }.with_lines(tun_extra)?,
        ),
        admin: Some(gateconf::Admin { enabled: Some(false), listen: None }),
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
        Dut::V6gateSiit | Dut::V6gateNat64 => {
            let conf = ctx.work.join("v6gate.toml");
            std::fs::write(&conf, v6gate_conf(dut.stateful(), ctx.dut_cpus.len(), &ctx.a.v6gate_tun)?)?;
            let mut c = placed(ctx, ns, &ctx.v6gate.to_string_lossy());
            c.args(["run", "--config", &conf.to_string_lossy()]);
            let mut p = Proc::spawn("v6gate", c, Some(&ctx.work.join("v6gate.log")))?;
            wait_for_link(ns, TUN, &mut p)?;
            route_translated(ns, dut.stateful())?;
            Ok(Some(p))
        }
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
        let v = v6gate_conf(false, 1, &["io = \"poll\"".to_string()]).unwrap();
        assert!(
            v.contains("[siit]") && v.contains("name = \"xlat0\"") && v.contains("queues = 1\nio = \"poll\"\n"),
            "{v}"
        );
        assert!(v6gate_conf(true, 2, &[]).unwrap().contains("max-sessions = 4194304"));
        assert!(v6gate_conf(false, 1, &["not toml".into()]).is_err());
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
