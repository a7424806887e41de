//! The devices under test of `bench xlat`: whether each can run here, its
//! configuration (from `lab::gateconf`) and its process in the DUT
//! namespace.

use std::net::{Ipv4Addr, Ipv6Addr};
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
        Dut::Tester | Dut::Kernel | Dut::NullXdp => None,
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
        Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6 | Dut::V6gateDslite | Dut::V6gateXdpDslite => {
            (!gateconf::has_subcommand(v6gate, "softwire"))
                .then(|| format!("{} has no `softwire` subcommand", v6gate.display()))
        }
    }
}

/// The softwire DUTs' end-point (AFTR / lwAFTR) address: the tester's
/// B4 ([`HOST6`]) sends its 4in6 packets there; `v6gate softwire` routes
/// it into its TUN device.
pub(super) const AFTR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
/// DS-Lite: the IPv4 address of the host behind the tester's B4 (the inner
/// source; private, RFC 6333 §5.7 leaves it to the B4's LAN).
pub(super) const DSLITE_HOST4: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 10);
/// lw4o6: the lwB4's binding is [`HOST6`], IPv4 address [`HOST6_AS_V4`]
/// (the address SIIT gives the same host, in [`SIIT4`]) and this PSID,
/// with [`LW_PSID_LEN`] bits at offset [`LW_PSID_OFFSET`] (RFC 7597 §5.1:
/// 4,032 ports, 1024–65535 only).
pub(super) const LW_PSID: u16 = 5;
/// lw4o6: PSID length (k).
pub(super) const LW_PSID_LEN: u8 = 4;
/// lw4o6: PSID offset (a; the RFC 7597 default, ports 0–1023 excluded).
pub(super) const LW_PSID_OFFSET: u8 = 6;
/// The IPv6 link MTU with a softwire DUT (`t6`, `d6` and the softwire's
/// `mtu`): RFC 6333 §5.3's 1520 carries a 1500-byte IPv4 packet in 4in6
/// unfragmented, so the largest frame size runs in both directions.
pub(super) const SOFTWIRE_MTU: u16 = 1520;

/// The `busy-poll` window among `--v6gate-tun`'s lines: the one `[tun]`
/// setting the softwire DUTs take (as `v6gate softwire --busy-poll`).
fn softwire_busy_poll(lines: &[String]) -> Result<Option<String>> {
    let mut window = None;
    for l in lines {
        let t: toml::Table = toml::from_str(l).with_context(|| format!("`{l}` is not a TOML `key = value` line"))?;
        if let Some(v) = t.get("busy-poll") {
            let w = v.as_str().with_context(|| format!("`{l}`: busy-poll is a duration string"))?;
            window = Some(w.to_string());
        }
    }
    Ok(window)
}

/// The lwAFTR's binding file: the tester's one lwB4.
pub(super) fn lw4o6_bindings() -> String {
    format!("{HOST6} {HOST6_AS_V4} {LW_PSID} {LW_PSID_LEN} {LW_PSID_OFFSET}\n")
}

/// The `v6gate softwire` configuration of a softwire DUT (`bindings`: the
/// lwAFTR's binding file), on the TUN device [`TUN`].
pub(super) fn softwire_conf(dut: Dut, bindings: &Path) -> String {
    let common = format!("mtu = {SOFTWIRE_MTU}\ntun = \"{TUN}\"\n");
    if dut.dslite() {
        let xdp = if dut == Dut::V6gateXdpDslite {
            "[dslite.xdp]\ninterfaces = [\"d6\", \"d4\"]\nmode = \"native\"\n"
        } else {
            ""
        };
        // One subscriber (the tester's B4) holds every flow: no port quota.
        format!(
            "[dslite]\naftr-address = \"{AFTR6}\"\nb4-prefixes = [\"{HOSTS6}\"]\npool4 = [\"{POOL4}\"]\n\
             max-ports-per-subscriber = 65536\nlog-mappings = false\n{common}{xdp}"
        )
    } else {
        let xdp = if dut == Dut::V6gateXdpLw4o6 {
            "[lw4o6.xdp]\ninterfaces = [\"d6\", \"d4\"]\nmode = \"native\"\n"
        } else {
            ""
        };
        format!(
            "[lw4o6]\naftr-address = \"{AFTR6}\"\nbinding-file = \"{}\"\nipv4-prefixes = [\"{SIIT4}\"]\n\
             watch-binding-file = false\n{common}{xdp}",
            bindings.display()
        )
    }
}

/// The `xdp` part of the lwAFTR's status file (`v6gate softwire
/// --status-file`), once it is written.
fn softwire_xdp_status(ctx: &Ctx) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(ctx.work.join("softwire.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let x = v.as_object()?.values().map(|f| f["xdp"].clone()).find(|x| !x.is_null())?;
    Some(x)
}

/// What the lwAFTR's fast path did (its counters), for the report's notes.
pub(super) fn softwire_xdp_note(ctx: &Ctx) -> String {
    // The status file is rewritten every 100 ms; its counters every 200 ms.
    std::thread::sleep(Duration::from_millis(500));
    match softwire_xdp_status(ctx) {
        Some(x) => format!("softwire XDP counters {}", x["counters"]),
        None => "softwire XDP status not available".into(),
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

/// Waits (5 s at most) until `done` holds, the DUT process alive.
fn wait_for(p: &mut Proc, what: &str, done: impl Fn() -> bool) -> Result<()> {
    for _ in 0..100 {
        if done() {
            return Ok(());
        }
        p.alive()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the DUT did not {what} within 5 s{}", p.log_note())
}

fn wait_for_link(ns: &Netns, dev: &str, p: &mut Proc) -> Result<()> {
    wait_for(p, &format!("create {dev}"), || ns.ip(&["link", "show", dev]).is_ok())
}

/// `cmd args` in the DUT namespace on the DUT CPUs (SCHED_FIFO with `--realtime`).
fn placed(ctx: &Ctx, ns: &Netns, cmd: &str) -> std::process::Command {
    let place = cpu::placement(&ctx.a.dut_cpus, ctx.a.realtime);
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
        // The program is the bench's own: [`null_xdp`] attaches it.
        Dut::NullXdp => Ok(None),
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
        Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6 | Dut::V6gateDslite | Dut::V6gateXdpDslite => {
            let mtu = SOFTWIRE_MTU.to_string();
            ns.ip(&["link", "set", "d6", "mtu", &mtu])?;
            topo.t6.ip(&["link", "set", "t6", "mtu", &mtu])?;
            let bindings = ctx.work.join("lw4o6-bindings");
            std::fs::write(&bindings, lw4o6_bindings())?;
            let conf = ctx.work.join("softwire.toml");
            std::fs::write(&conf, softwire_conf(dut, &bindings))?;
            let mut c = placed(ctx, ns, &ctx.v6gate.to_string_lossy());
            c.args(["softwire", "--config", &conf.to_string_lossy()]);
            c.arg("--status-file").arg(ctx.work.join("softwire.json"));
            if let Some(w) = softwire_busy_poll(&ctx.a.v6gate_tun)? {
                c.args(["--busy-poll", &w]);
            }
            let mut p = Proc::spawn("v6gate softwire", c, Some(&ctx.work.join("softwire.log")))?;
            wait_for_link(ns, TUN, &mut p)?;
            // The softwire routes its end-point address into the device itself.
            let aftr = format!("{AFTR6}/128");
            wait_for(&mut p, &format!("route {aftr} into {TUN}"), || {
                ns.ip(&["-6", "route", "show", &aftr]).is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(TUN))
            })?;
            if matches!(dut, Dut::V6gateXdpLw4o6 | Dut::V6gateXdpDslite) {
                // As for the XDP translator: the fast path redirects into
                // d6/d4, whose peers need NAPI (GRO on) to take the frames.
                for (tns, dev) in [(&topo.t6, "t6"), (&topo.t4, "t4")] {
                    tns.run(|| xdp::sys::set_gro(dev, true).with_context(|| format!("GRO on {dev}")))?;
                }
                wait_for(&mut p, "attach the softwire's XDP fast path to d6 and d4", || {
                    softwire_xdp_status(ctx).is_some_and(|x| x["attached"].as_array().is_some_and(|a| a.len() == 2))
                })?;
                let x = softwire_xdp_status(ctx).unwrap_or_default();
                eprintln!("bench xlat: {}: XDP attached ({})", dut.name(), x["attached"]);
            }
            Ok(Some(p))
        }
    }
}

/// The `null-xdp` DUT's program, attached to `d6` and `d4` for as long as
/// the value lives (`None` for every other DUT): the redirect needs NAPI
/// on the tester ports it sends into (GRO on, whichever tester runs).
pub(super) fn null_xdp(dut: Dut, topo: &BenchTopo) -> Result<Option<xdp::null::NullRedirect>> {
    if dut != Dut::NullXdp {
        return Ok(None);
    }
    for (tns, dev) in [(&topo.t6, "t6"), (&topo.t4, "t4")] {
        tns.run(|| xdp::sys::set_gro(dev, true).with_context(|| format!("GRO on {dev}")))?;
    }
    let null = topo.dut.run(|| Ok(xdp::null::NullRedirect::attach("d6", "d4")?)).context("null-xdp on d6 and d4")?;
    eprintln!("bench xlat: null-xdp: attached ({:?})", null.modes());
    Ok(Some(null))
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
    fn softwire_configs_name_the_bench_addresses() {
        let d = softwire_conf(Dut::V6gateDslite, Path::new("/x/b"));
        assert!(d.starts_with("[dslite]\naftr-address = \"2001:db8:ffff::1\"\n"), "{d}");
        assert!(d.contains("b4-prefixes = [\"2001:db8:46::/64\"]\npool4 = [\"203.0.113.128/25\"]\n"), "{d}");
        assert!(d.contains("mtu = 1520\ntun = \"xlat0\"\n") && !d.contains("binding-file"), "{d}");
        let l = softwire_conf(Dut::V6gateLw4o6, Path::new("/x/b"));
        assert!(l.starts_with("[lw4o6]\n") && l.contains("binding-file = \"/x/b\"\n"), "{l}");
        assert!(l.contains("ipv4-prefixes = [\"192.0.2.128/25\"]") && l.contains("watch-binding-file = false"), "{l}");
        assert_eq!(lw4o6_bindings(), "2001:db8:46::10 192.0.2.130 5 4 6\n");
        // Each parses as its table, the whole file checked (softwire's own parser).
        let x = softwire_conf(Dut::V6gateXdpDslite, Path::new("/x/b"));
        assert!(x.ends_with("[dslite.xdp]\ninterfaces = [\"d6\", \"d4\"]\nmode = \"native\"\n"), "{x}");
        for (dut, table) in
            [(Dut::V6gateDslite, "dslite"), (Dut::V6gateXdpDslite, "dslite"), (Dut::V6gateLw4o6, "lw4o6")]
        {
            let c = softwire::config::SoftwireConfig::parse(&softwire_conf(dut, Path::new("/x/b"))).unwrap();
            assert_eq!(c.functions(), vec![table]);
        }
    }

    #[test]
    fn softwires_take_busy_poll_from_the_tun_lines() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(softwire_busy_poll(&l(&["io = \"poll\"", "busy-poll = \"1ms\""])).unwrap().as_deref(), Some("1ms"));
        assert_eq!(softwire_busy_poll(&l(&["io = \"poll\""])).unwrap(), None);
        assert!(softwire_busy_poll(&l(&["busy-poll = 3"])).is_err());
        assert!(softwire_busy_poll(&l(&["not toml"])).is_err());
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
        assert!(availability(Dut::V6gateLw4o6, Path::new("/nonexistent/v6gate")).unwrap().contains("no `softwire`"));
    }
}
