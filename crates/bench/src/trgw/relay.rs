//! The relays under test of `bench trgw` (v6gate's `[trgw]`, rtpengine in
//! userspace mode): their command lines and configurations, starting one
//! in the relay namespace until it answers ng, and setting up calls over
//! ng offer/answer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use lab::gateconf;
use lab::topo::relay_addr::*;
use lab::topo::RelayTopo;

use super::{Ctx, RelayKind};
use crate::harness::cpu;
use crate::harness::guard::Proc;
use crate::ng::{self, Value};

/// Media ports both relays use.
pub const PORTS: (u16, u16) = (20000, 59999);

/// The `[trgw]` configuration given to `v6gate trgw --config`: one media
/// interface with both families (as rtpengine gets), ng on [`NG`].
pub fn v6gate_config(v4: Ipv4Addr, v6: Ipv6Addr, ports: (u16, u16), workers: usize) -> Result<String> {
    gateconf::V6gate {
        header: vec!["v6gate bench trgw: relay between the ua6 and ua4 namespaces".into()],
        trgw: v6gate_trgw(v4, v6, ports, workers),
        ..Default::default()
    }
    .render()
}

fn v6gate_trgw(v4: Ipv4Addr, v6: Ipv6Addr, ports: (u16, u16), workers: usize) -> Option<gateconf::Trgw> {
    Some(gateconf::Trgw {
        ng: Some(NG.into()),
        port_min: ports.0,
        port_max: ports.1,
        workers: Some(workers),
        interface: vec![gateconf::TrgwInterface { name: "pub".into(), ipv4: Some(v4), ipv6: Some(v6) }],
        ..Default::default()
    })
}

/// `cfg` (a rendered v6gate configuration with a `[trgw]` section) with
/// the extra `key=value` options of `--v6gate-trgw-opt` at the top of
/// `[trgw]`. A value that is not TOML is taken as a string; the result
/// must still be valid TOML (a key the bench sets already cannot be given
/// again). v6gate itself judges the keys when it starts.
pub fn with_trgw_opts(cfg: &str, opts: &[String]) -> Result<String> {
    if opts.is_empty() {
        return Ok(cfg.to_owned());
    }
    let mut extra = String::new();
    for o in opts {
        let (k, v) = o.split_once('=').ok_or_else(|| anyhow!("--v6gate-trgw-opt {o:?}: not key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            bail!("--v6gate-trgw-opt {o:?}: {k:?} is not a TOML bare key");
        }
        let value = if toml::from_str::<toml::Table>(&format!("k = {v}")).is_ok() {
            v.to_owned()
        } else {
            toml::Value::String(v.to_owned()).to_string()
        };
        extra.push_str(&format!("{k} = {value}\n"));
    }
    const SECTION: &str = "[trgw]\n";
    let at = cfg.find(SECTION).ok_or_else(|| anyhow!("the relay configuration has no [trgw] section"))? + SECTION.len();
    let out = format!("{}{extra}{}", &cfg[..at], &cfg[at..]);
    toml::from_str::<toml::Table>(&out).map_err(|e| {
        anyhow!("--v6gate-trgw-opt: the configuration is no longer valid TOML (a key given twice?): {e}")
    })?;
    Ok(out)
}

/// The XDP relay's admin API (the daemon's default, in the relay
/// namespace): `v6gate ctl xdp` reads its fast-path counters.
pub const XDP_ADMIN: &str = "127.0.0.1:9164";

/// TrGW media streams the XDP relay's fast path carries at most (two per
/// call: 32,768 calls, the XDP tester's search bound and room).
const XDP_TRGW_STREAMS: u32 = 1 << 16;

/// The `v6gate run` configuration of the XDP relay: [`v6gate_config`]'s
/// `[trgw]` and the XDP fast path (native mode) on the relay's interfaces
/// `r6` and `r4`; the admin API on [`XDP_ADMIN`] (the default).
pub fn v6gate_xdp_config(v4: Ipv4Addr, v6: Ipv6Addr, ports: (u16, u16), workers: usize) -> Result<String> {
    let mut c = gateconf::V6gate {
        header: vec!["v6gate bench trgw: relay between the ua6 and ua4 namespaces, XDP fast path".into()],
        xdp: Some(gateconf::Xdp {
            interfaces: vec!["r6".into(), "r4".into()],
            mode: Some("native".into()),
            nat64_sessions: None,
            trgw_streams: Some(XDP_TRGW_STREAMS),
        }),
        ..Default::default()
    };
    c.trgw = v6gate_trgw(v4, v6, ports, workers);
    c.render()
}

/// Why the XDP relay cannot run with `v6gate` (`Ok`: it can).
pub(super) fn xdp_availability(v6gate: &Path) -> std::result::Result<(), String> {
    let f = gateconf::Features::of(v6gate);
    match (f.run, f.xdp) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("{} has no `run` subcommand (daemon not built in)", v6gate.display())),
        (true, false) => Err(format!("{} has no [xdp] (XDP fast path)", v6gate.display())),
    }
}

/// Readies the topology for the XDP relay: forwarding on in the relay
/// namespace (`bpf_fib_lookup` answers only for interfaces that forward;
/// otherwise every packet passes, counted as `fib`); on the UA ends of the
/// links NAPI on (GRO), so that the fast path can redirect frames into
/// them, and the transmit checksum offload off, so that the UAs' datagrams
/// carry a full UDP checksum the fast path can verify (a partial one is
/// passed to the slow path, see `xdp::sys::set_tx_checksum`).
pub(super) fn prepare_xdp(topo: &RelayTopo) -> Result<()> {
    topo.relay.sysctl("net.ipv4.conf.all.forwarding", "1")?;
    topo.relay.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    for (ns, dev) in [(&topo.ua6, "u6"), (&topo.ua4, "u4")] {
        ns.run(|| {
            xdp::sys::set_gro(dev, true).with_context(|| format!("GRO on {dev}"))?;
            xdp::sys::set_tx_checksum(dev, false).with_context(|| format!("tx checksum offload off on {dev}"))?;
            Ok(())
        })?;
    }
    Ok(())
}

/// Descriptors the relays may need: four media sockets per call (RTP and
/// RTCP of both legs), 10,000 calls and more, plus room.
const RELAY_NOFILE: u64 = 1 << 18;

/// Lifts this process's RLIMIT_NOFILE (soft and hard; bounded by
/// `fs.nr_open`) to [`RELAY_NOFILE`] so that the relays it starts inherit
/// it: both v6gate relays raise their soft limit only up to the hard one,
/// and a usual hard limit (20,000 here) ends the calls near 5,000 with
/// "too many open files". Raising the hard limit needs CAP_SYS_RESOURCE;
/// without it the soft limit goes up to the hard one. Returns the limit in
/// force and, when it is below [`RELAY_NOFILE`], a note for the report.
pub(super) fn raise_nofile() -> Result<(u64, Option<String>)> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse::<u64>().ok());
    let want = nr_open.map_or(RELAY_NOFILE, |n| n.min(RELAY_NOFILE));
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= want {
        return Ok((soft, None));
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want)).is_ok() {
        return Ok((want, None));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("raising RLIMIT_NOFILE to its hard limit")?;
    Ok((
        hard,
        Some(format!(
            "RLIMIT_NOFILE could not be raised above its hard limit {hard} (no CAP_SYS_RESOURCE): the relays \
             fail beyond about {} calls (four media sockets each); raise it (ulimit -Hn) for larger runs.",
            hard / 4
        )),
    ))
}

/// rtpengine's command-line arguments for the same setup: userspace only
/// (`--table=-1`), both addresses, ng on `ng`; `threads`: `--num-threads`.
pub fn rtpengine_args(
    ng: &str,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    ports: (u16, u16),
    threads: Option<usize>,
    log_level: u8,
) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--config-file=none".into(),
        "--foreground".into(),
        "--table=-1".into(),
        format!("--interface={v4}"),
        format!("--interface={v6}"),
        format!("--listen-ng={ng}"),
        format!("--port-min={}", ports.0),
        format!("--port-max={}", ports.1),
    ];
    v.extend(threads.map(|t| format!("--num-threads={t}")));
    v.extend(["--log-stderr".into(), format!("--log-level={log_level}"), "--delete-delay=0".into()]);
    v
}

/// Starts `kind` in the relay namespace and waits until it answers an ng
/// ping (10 s at most).
pub(super) fn start(ctx: &Ctx, topo: &RelayTopo, kind: RelayKind, bin: &Path, tag: &str) -> Result<Proc> {
    let place = cpu::placement(&ctx.args.relay_cpus, ctx.args.realtime);
    let mut cmd = topo.relay.command(&place[0]);
    cmd.args(&place[1..]).arg(bin);
    match kind {
        RelayKind::V6gate => {
            let cfg = ctx.work.join("v6gate-trgw.toml");
            let c = v6gate_config(RELAY4, RELAY6, PORTS, ctx.relay_threads)?;
            std::fs::write(&cfg, with_trgw_opts(&c, &ctx.args.v6gate_trgw_opts)?)?;
            cmd.arg("trgw").arg("--config").arg(&cfg);
        }
        RelayKind::V6gateXdp => {
            let cfg = ctx.work.join("v6gate-xdp.toml");
            let c = v6gate_xdp_config(RELAY4, RELAY6, PORTS, ctx.relay_threads)?;
            std::fs::write(&cfg, with_trgw_opts(&c, &ctx.args.v6gate_trgw_opts)?)?;
            cmd.arg("run").arg("--config").arg(&cfg);
        }
        RelayKind::Rtpengine => {
            cmd.args(rtpengine_args(NG, RELAY4, RELAY6, PORTS, Some(ctx.relay_threads), 4));
        }
    }
    let mut p = Proc::spawn(kind.name(), cmd, Some(&ctx.work.join(format!("{}-{tag}.log", kind.name()))))?;
    wait_for_ng(&topo.relay, &mut p, kind.name())?;
    Ok(p)
}

/// Waits until the relay `p` answers an ng ping on [`NG`] in namespace
/// `ns` (10 s at most).
pub fn wait_for_ng(ns: &lab::netns::Netns, p: &mut Proc, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut client = ns.run(|| ng::Client::connect(NG.parse()?))?;
    client.timeout = Duration::from_millis(200);
    loop {
        p.alive().context("at start")?;
        if client.ping().is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{what} did not answer ng ping on {NG} within 10 s{}", p.log_note());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A realistic offer/answer SDP body for one G.711 call leg.
pub fn sdp(ip: IpAddr, port: u16, sess: u64) -> String {
    let fam = if ip.is_ipv4() { "IP4" } else { "IP6" };
    format!(
        "v=0\r\no=- {sess} 1 IN {fam} {ip}\r\ns=v6gate-bench\r\nc=IN {fam} {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
         a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\na=sendrecv\r\n"
    )
}

fn reply_addr(reply: &Value, want_v4: bool, what: &str) -> Result<SocketAddr> {
    let sdp =
        reply.get("sdp").and_then(Value::as_str).ok_or_else(|| anyhow!("{what}: reply without sdp: {reply:?}"))?;
    let a = ng::sdp_audio_addr(sdp).ok_or_else(|| anyhow!("{what}: no audio address in the relay's SDP:\n{sdp}"))?;
    if a.is_ipv4() != want_v4 {
        bail!(
            "{what}: the relay's SDP has {} but the other side is IPv{}:\n{sdp}",
            a.ip(),
            if want_v4 { 4 } else { 6 }
        );
    }
    Ok(a)
}

/// One leg's ng message (offer or answer).
fn leg(command: &str, call_id: &str, i: usize, sdp_body: String, family: &str) -> Value {
    let mut items = vec![
        ("command", Value::str(command)),
        ("call-id", Value::str(call_id)),
        ("from-tag", Value::str(&format!("ua6-{i}"))),
    ];
    if command == "answer" {
        items.push(("to-tag", Value::str(&format!("ua4-{i}"))));
    }
    items.extend([
        ("sdp", Value::Bytes(sdp_body.into_bytes())),
        ("address family", Value::str(family)),
        ("replace", ng::list(&["origin", "session-connection"])),
        ("ICE", Value::str("remove")),
    ]);
    Value::Dict(items.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

/// Sets up `n` calls; returns per call (relay address for ua6 to send to,
/// relay address for ua4 to send to).
pub(super) fn setup_calls(
    client: &mut ng::Client,
    n: u32,
    p6: &[u16],
    p4: &[u16],
) -> Result<Vec<(SocketAddr, SocketAddr)>> {
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let call_id = format!("v6gate-bench-{}-{i}", std::process::id());
        let offer = leg("offer", &call_id, i, sdp(IpAddr::V6(UA6), p6[i % p6.len()], i as u64), "IP4");
        let r = client.request(&offer).with_context(|| format!("ng offer of call {i} (calls 0..{i} were set up)"))?;
        let to_ua4 = reply_addr(&r, true, "offer")?; // where ua4 sends
        let answer = leg("answer", &call_id, i, sdp(IpAddr::V4(UA4), p4[i % p4.len()], i as u64), "IP6");
        let r = client.request(&answer).with_context(|| format!("ng answer of call {i} (calls 0..{i} were set up)"))?;
        let to_ua6 = reply_addr(&r, false, "answer")?; // where ua6 sends
        out.push((to_ua6, to_ua4));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdp_is_parsed_back() {
        let s = sdp(IpAddr::V6(UA6), 4000, 7);
        assert_eq!(ng::sdp_audio_addr(&s), Some(SocketAddr::new(IpAddr::V6(UA6), 4000)));
        assert!(s.contains("c=IN IP6 2001:db8:6::2\r\n"));
    }

    #[test]
    fn offer_and_answer_messages() {
        let o = leg("offer", "c1", 3, sdp(IpAddr::V6(UA6), 4000, 3), "IP4");
        assert_eq!(o.get("from-tag").and_then(Value::as_str), Some("ua6-3"));
        assert!(o.get("to-tag").is_none());
        assert_eq!(o.get("address family").and_then(Value::as_str), Some("IP4"));
        let a = leg("answer", "c1", 3, sdp(IpAddr::V4(UA4), 4000, 3), "IP6");
        assert_eq!(a.get("to-tag").and_then(Value::as_str), Some("ua4-3"));
    }

    #[test]
    fn the_descriptor_limit_in_force_is_reported() {
        let (n, note) = raise_nofile().unwrap();
        let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(n, soft, "the limit reported is the one in force");
        assert_eq!(note.is_some(), n < RELAY_NOFILE, "a note exactly when the relays get less than asked: {note:?}");
    }

    #[test]
    fn relay_configurations() {
        let c = v6gate_config(RELAY4, RELAY6, PORTS, 2).unwrap();
        assert!(
            c.contains("ng = \"127.0.0.1:2223\"")
                && c.contains("workers = 2")
                && c.contains("ipv6 = \"2001:db8:6::1\""),
            "{c}"
        );
        let x = v6gate_xdp_config(RELAY4, RELAY6, PORTS, 2).unwrap();
        let trgw = c.split_once("[trgw]").unwrap().1;
        assert!(x.contains(trgw.split("\n\n[[").next().unwrap()), "the same [trgw] keys:\n{x}\n{c}");
        assert!(
            x.contains("[xdp]\ninterfaces = [\"r6\", \"r4\"]\nmode = \"native\"\ntrgw-streams = 65536\n")
                && x.contains("workers = 2"),
            "{x}"
        );
        let o = with_trgw_opts(&c, &["sockets=shared".into(), "max-calls = 40000".into(), "x=[1, 2]".into()]).unwrap();
        let t: toml::Table = toml::from_str(&o).unwrap();
        assert_eq!(t["trgw"]["sockets"].as_str(), Some("shared"), "a bare word is a string:\n{o}");
        assert_eq!(t["trgw"]["max-calls"].as_integer(), Some(40000));
        assert_eq!(t["trgw"]["x"].as_array().map(Vec::len), Some(2));
        assert_eq!(t["trgw"]["workers"].as_integer(), Some(2), "the bench's keys stay");
        assert_eq!(with_trgw_opts(&c, &[]).unwrap(), c);
        for bad in ["workers=4", "no-equals", "a b=1", "=1"] {
            assert!(with_trgw_opts(&c, &[bad.into()]).is_err(), "{bad}");
        }
        assert!(with_trgw_opts("[xdp]\n", &["a=1".into()]).is_err(), "no [trgw]");
        let r = rtpengine_args(NG, RELAY4, RELAY6, PORTS, Some(3), 4);
        assert!(r.contains(&"--interface=10.0.4.1".to_string()) && r.contains(&"--num-threads=3".to_string()));
        assert!(!rtpengine_args(NG, RELAY4, RELAY6, PORTS, None, 6).iter().any(|a| a.starts_with("--num-threads")));
    }
}
