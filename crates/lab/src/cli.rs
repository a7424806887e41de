//! `v6gate lab`: the papers' testbed in network namespaces — an IPv6-only
//! host `h6`, the gateway `gw` and an IPv4-only server `h4` — with the
//! gateway (v6gate, or TAYGA standing in) and the demo services.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};

use crate::gateconf::{self, Eam, Features};
use crate::netns::{self, Netns};
use crate::services;
use crate::topo::{lab_addr::*, Lab, LAB_PREFIX};

/// `v6gate lab` arguments.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// Namespace name prefix (namespaces are PREFIX-h6, PREFIX-gw, PREFIX-h4).
    #[arg(long, global = true, default_value = LAB_PREFIX)]
    pub prefix: String,
    #[command(subcommand)]
    pub cmd: LabCmd,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// Build the namespaces, links, addresses and routes (no gateway yet);
    /// removes a previous lab first.
    Up,
    /// Remove the lab: kill every process in its namespaces, delete them.
    /// Works after a crash too.
    Down,
    /// Show the namespaces, their addresses and the processes in them.
    Status,
    /// `up`, then start the gateway in `gw` and the demo services (DNS,
    /// HTTP, UDP echo) on the IPv4-only server `h4`; returns once they run.
    Run(RunArgs),
    /// Run the demo services in the foreground (what `run` starts in `h4`).
    Serve(ServeArgs),
    /// Demo clients (no dig/curl needed), run inside a lab node.
    #[command(subcommand)]
    Client(ClientCmd),
    /// Run a command inside a lab node: `v6gate lab exec h6 -- ping -c1 ...`.
    Exec {
        /// h6, gw or h4.
        node: Node,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
}

/// A lab node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Node {
    /// The IPv6-only client.
    H6,
    /// The gateway.
    Gw,
    /// The IPv4-only server.
    H4,
}

/// Which translator the gateway runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Gateway {
    /// v6gate when this binary has `v6gate run`, else TAYGA.
    Auto,
    /// `v6gate run` (SIIT, NAT64, DNS64).
    V6gate,
    /// TAYGA (SIIT/stateless NAT64 only; no DNS64).
    Tayga,
    /// Nothing: the lab's links and routes only.
    None,
}

/// `v6gate lab run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The translator in the gateway namespace.
    #[arg(long, value_enum, default_value = "auto")]
    pub gateway: Gateway,
    /// The v6gate binary for `--gateway v6gate` (default: this executable).
    #[arg(long)]
    pub v6gate: Option<PathBuf>,
}

/// `v6gate lab serve` arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// DNS (UDP) listen address, authoritative for lab.example.
    #[arg(long, default_value = "0.0.0.0:53")]
    pub dns: SocketAddr,
    /// HTTP (TCP) listen address.
    #[arg(long, default_value = "0.0.0.0:80")]
    pub http: SocketAddr,
    /// UDP echo listen address.
    #[arg(long, default_value = "0.0.0.0:7")]
    pub echo: SocketAddr,
}

/// Demo clients.
#[derive(Debug, Subcommand)]
pub enum ClientCmd {
    /// Resolve a name (prints the answer records).
    Dns {
        /// Name to resolve.
        name: String,
        /// Record type.
        #[arg(long = "type", default_value = "AAAA")]
        rtype: String,
        /// DNS server (default: the gateway's DNS64, `[2001:db8:6::1]:53`).
        #[arg(long)]
        server: Option<String>,
        /// Lab node to run in.
        #[arg(long, value_enum, default_value = "h6")]
        node: Node,
    },
    /// HTTP GET over TCP (prints the response).
    Tcp {
        /// Address (port 80 unless given).
        addr: String,
        /// Lab node to run in.
        #[arg(long, value_enum, default_value = "h6")]
        node: Node,
    },
    /// Send one UDP datagram to the echo service and print the reply.
    Udp {
        /// Address (port 7 unless given).
        addr: String,
        /// Message.
        #[arg(long, default_value = "hello over UDP")]
        msg: String,
        /// Lab node to run in.
        #[arg(long, value_enum, default_value = "h6")]
        node: Node,
    },
}

/// Where `lab run` keeps its generated configuration and logs.
pub fn work_dir(prefix: &str) -> PathBuf {
    PathBuf::from(format!("/run/{prefix}"))
}

fn ns_of(lab: &Lab, n: Node) -> String {
    match n {
        Node::H6 => lab.h6(),
        Node::Gw => lab.gw(),
        Node::H4 => lab.h4(),
    }
}

/// Runs `v6gate lab ...`.
pub fn run(a: &LabArgs) -> Result<ExitCode> {
    let lab = Lab::new(&a.prefix);
    match &a.cmd {
        LabCmd::Up => {
            need_root()?;
            lab.up()?;
            println!("lab up: {} (IPv6-only) -- {} -- {} (IPv4-only)", lab.h6(), lab.gw(), lab.h4());
        }
        LabCmd::Down => {
            need_root()?;
            let gone = lab.down();
            let _ = std::fs::remove_dir_all(work_dir(&a.prefix));
            if gone.is_empty() {
                println!("lab down: nothing to remove");
            } else {
                println!("lab down: removed {}", gone.join(", "));
            }
        }
        LabCmd::Status => return status(&lab),
        LabCmd::Run(r) => {
            need_root()?;
            run_lab(&lab, r)?;
        }
        LabCmd::Serve(s) => serve(s)?,
        LabCmd::Client(c) => client(&lab, c)?,
        LabCmd::Exec { node, cmd } => {
            let ns = ns_of(&lab, *node);
            if !netns::exists(&ns) {
                bail!("{ns} does not exist; run `v6gate lab up` first");
            }
            let st = Command::new("ip").args(["netns", "exec", &ns]).args(cmd).status().context("ip netns exec")?;
            return Ok(if st.success() { ExitCode::SUCCESS } else { ExitCode::from(st.code().unwrap_or(1) as u8) });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn need_root() -> Result<()> {
    if !crate::testenv::is_root() {
        bail!("the lab creates network namespaces: run as root");
    }
    Ok(())
}

fn status(lab: &Lab) -> Result<ExitCode> {
    let mut any = false;
    for n in [lab.h6(), lab.gw(), lab.h4()] {
        if !netns::exists(&n) {
            println!("{n}: absent");
            continue;
        }
        any = true;
        println!("{n}:");
        let ns = Netns::attach(&n);
        if let Ok(o) = ns.ip(&["-br", "addr"]) {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                println!("    {l}");
            }
        }
        for pid in ns.pids() {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .map(|c| c.replace('\0', " ").trim().to_owned())
                .unwrap_or_default();
            println!("    pid {pid}: {comm}");
        }
    }
    Ok(if any { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// Starts `cmd` inside `ns`, detached (own process group, output to `log`).
fn spawn_in(ns: &str, cmd: &Path, args: &[&str], log: &Path) -> Result<u32> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", cmd.display()))?;
    Ok(child.id())
}

fn alive(pid: u32) -> bool {
    // A zombie is dead too: look at the state field.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The v6gate configuration `lab run` generates for the gateway, with the
/// tables this v6gate binary has (see [`Features`]).
pub fn v6gate_config(f: Features) -> Result<String> {
    let mut c = gateconf::V6gate {
        header: vec!["Generated by `v6gate lab run`: the lab gateway.".into()],
        siit: Some(gateconf::Siit {
            ipv4_address: Some(XLAT4),
            ipv6_address: Some(GW6),
            eamt: vec![Eam::new(format!("{H6}/128"), format!("{H6_AS_V4}/32")), Eam::new(SIIT6, H4_NET)],
            ..Default::default()
        }),
        tun: Some(gateconf::Tun { name: TUN.into(), auto_routes: Some(false), ..Default::default() }),
        admin: Some(gateconf::Admin { enabled: None, listen: Some(LAB_ADMIN.into()) }),
        ..Default::default()
    }
    .comment(
        "siit",
        &format!(
            "SIIT (RFC 7915) with explicit address mappings only (RFC 7757): the\n\
             IPv6-only host h6 is {H6_AS_V4} to the IPv4 world, the IPv4-only server\n\
             h4 is {H4_AS_V6} to the IPv6 world (ping both ways)."
        ),
    )
    .comment(
        "tun",
        "`v6gate lab run` adds the routes itself: the EAMT entry for h4's network\n\
         must not pull 198.51.100.0/24 into the TUN device.",
    );
    if f.nat64 {
        c.nat64 = Some(gateconf::Nat64 { pool6: POOL6.into(), pool4: vec![POOL4.into()], ..Default::default() });
        c = c.comment(
            "nat64",
            &format!(
                "Stateful NAT64 (RFC 6146) for everything else: pool6 {POOL6}, a\n\
                 network-specific prefix (the documentation IPv4 ranges are not global,\n\
                 so the well-known 64:ff9b::/96 may not carry them, RFC 6052 §3.1)."
            ),
        );
    }
    if f.dns64 {
        c.dns64 = Some(gateconf::Dns64 {
            listen: vec![format!("[{GW6}]:53")],
            upstream: vec![format!("{H4}:53")],
            prefix: POOL6.into(),
            allow: vec![H6_NET.into()],
        });
        c = c.comment("dns64", "DNS64 (RFC 6147) for h6, upstream: the lab's authoritative server on h4.");
    }
    c.render()
}

/// The TAYGA configuration `lab run --gateway tayga` generates. TAYGA
/// cannot reach an IPv4 address both through a `map` and through the
/// prefix, so h4 keeps only its prefix form (h4 = pool6 + 198.51.100.2).
pub fn tayga_config() -> String {
    gateconf::Tayga {
        header: Some("Generated by `v6gate lab run --gateway tayga`.".into()),
        tun_device: TUN.into(),
        ipv4_addr: XLAT4,
        prefix: POOL6.into(),
        maps: vec![(H6_AS_V4, H6)],
        dynamic_pool: Some(POOL4.into()),
    }
    .render()
}

fn pick_gateway(r: &RunArgs, v6gate: &Path) -> Gateway {
    if r.gateway != Gateway::Auto {
        return r.gateway;
    }
    if Features::of(v6gate).run {
        Gateway::V6gate
    } else {
        Gateway::Tayga
    }
}

fn wait_for(what: &str, pid: u32, log: &Path, mut ready: impl FnMut() -> bool) -> Result<()> {
    for _ in 0..100 {
        if ready() {
            return Ok(());
        }
        if !alive(pid) {
            let l = std::fs::read_to_string(log).unwrap_or_default();
            bail!("{what} exited: {}", l.trim());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{what} did not come up within 5 s (log: {})", log.display())
}

/// Starts the translator `kind` in the lab's gateway namespace (writing its
/// configuration and log into `work`) and routes the translated prefixes to
/// it. Returns what the v6gate binary offers (nothing for TAYGA).
pub fn start_gateway(lab: &Lab, kind: Gateway, v6gate: &Path, work: &Path) -> Result<Features> {
    let mut features = Features::default();
    let gw = Netns::attach(&lab.gw());
    match kind {
        Gateway::V6gate => {
            let cfg = work.join("v6gate.toml");
            features = Features::of(v6gate);
            std::fs::write(&cfg, v6gate_config(features)?)?;
            let log = work.join("gateway.log");
            let pid = spawn_in(&lab.gw(), v6gate, &["run", "--config", &cfg.to_string_lossy()], &log)?;
            wait_for("v6gate run", pid, &log, || gw.ip(&["link", "show", TUN]).is_ok())?;
            lab.route_to_translator(TUN)?;
            gw.ip(&["-6", "route", "replace", SIIT6, "dev", TUN])?;
        }
        Gateway::Tayga => {
            let cfg = work.join("tayga.conf");
            std::fs::write(&cfg, tayga_config())?;
            let cfg = cfg.to_string_lossy().into_owned();
            gw.exec("tayga", &["--mktun", "-c", &cfg]).context("tayga --mktun (is tayga installed?)")?;
            lab.route_to_translator(TUN)?;
            gw.ip(&["-6", "route", "replace", SIIT6, "dev", TUN])?;
            let log = work.join("gateway.log");
            let pid = spawn_in(&lab.gw(), Path::new("tayga"), &["-c", &cfg, "--nodetach"], &log)?;
            std::thread::sleep(Duration::from_millis(200));
            if !alive(pid) {
                bail!("tayga exited: {}", std::fs::read_to_string(&log).unwrap_or_default().trim());
            }
        }
        Gateway::None | Gateway::Auto => {}
    }
    Ok(features)
}

fn run_lab(lab: &Lab, r: &RunArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let v6gate = r.v6gate.clone().unwrap_or_else(|| exe.clone());
    let work = work_dir(&lab.prefix);
    lab.up()?;
    let mut features = Features::default();
    let started = (|| -> Result<Gateway> {
        std::fs::create_dir_all(&work)?;
        let kind = pick_gateway(r, &v6gate);
        features = start_gateway(lab, kind, &v6gate, &work)?;
        let log = work.join("services.log");
        let pid = spawn_in(&lab.h4(), &exe, &["lab", "serve"], &log)?;
        let h4 = Netns::attach(&lab.h4());
        wait_for("lab serve", pid, &log, || {
            h4.exec("cat", &["/proc/net/udp"]).is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(":0035 "))
        })?;
        Ok(kind)
    })();
    let kind = match started {
        Ok(k) => k,
        Err(e) => {
            lab.down();
            return Err(e);
        }
    };
    let (name, gw_name) = match kind {
        Gateway::V6gate => ("v6gate", "v6gate"),
        Gateway::Tayga => ("TAYGA (stand-in: no DNS64, no stateful NAT64)", "tayga"),
        _ => ("none", "none"),
    };
    let h4_siit = if kind == Gateway::Tayga { in_pool6(H4) } else { H4_AS_V6 };
    // For scripts (scripts/demo.sh): what runs and where to reach it.
    std::fs::write(
        work.join("lab.env"),
        format!(
            "LAB_GATEWAY={gw_name}\nLAB_H6={H6}\nLAB_H4={H4}\nLAB_H4_NAT64={}\nLAB_H4_SIIT6={h4_siit}\n\
             LAB_H6_SIIT4={H6_AS_V4}\nLAB_DNS64={GW6}\nLAB_NAME={SERVER_NAME}\nLAB_ADMIN={LAB_ADMIN}\n\
             LAB_HAS_NAT64={}\nLAB_HAS_DNS64={}\n",
            in_pool6(H4),
            if kind == Gateway::Tayga {
                "stateless"
            } else if features.nat64 {
                "stateful"
            } else {
                "no"
            },
            if features.dns64 { "yes" } else { "no" },
        ),
    )?;
    println!("lab running; gateway: {name}; files in {}", work.display());
    println!("  {} (IPv6-only)  {H6}", lab.h6());
    println!("  {} (gateway)    {GW6} | {GW4}", lab.gw());
    println!("  {} (IPv4-only)  {H4}  DNS :53 for {ZONE}, HTTP :{HTTP_PORT}, UDP echo :{ECHO_PORT}", lab.h4());
    println!("  NAT64 {POOL6} -> pool4 {POOL4}; SIIT: h6 = {H6_AS_V4}, h4 = {h4_siit}");
    println!("try:  v6gate lab client dns {SERVER_NAME}");
    println!("      v6gate lab client tcp {}", in_pool6(H4));
    println!("      v6gate lab exec h4 -- ping -c2 {H6_AS_V4}");
    println!("stop: v6gate lab down");
    Ok(())
}

fn serve(s: &ServeArgs) -> Result<()> {
    let dns = std::net::UdpSocket::bind(s.dns).with_context(|| format!("DNS on {}", s.dns))?;
    let http = std::net::TcpListener::bind(s.http).with_context(|| format!("HTTP on {}", s.http))?;
    let echo = std::net::UdpSocket::bind(s.echo).with_context(|| format!("UDP echo on {}", s.echo))?;
    eprintln!("lab serve: DNS {} (zone {ZONE}), HTTP {}, UDP echo {}", s.dns, s.http, s.echo);
    let t1 = std::thread::spawn(move || services::serve_dns(dns, services::Zone::lab()));
    let t2 = std::thread::spawn(move || services::serve_http(http));
    let t3 = std::thread::spawn(move || services::serve_echo(echo));
    for t in [t1, t2, t3] {
        match t.join() {
            Ok(r) => r?,
            Err(_) => bail!("a service thread panicked"),
        }
    }
    Ok(())
}

fn enter_node(lab: &Lab, node: Node) -> Result<()> {
    let ns = ns_of(lab, node);
    if !netns::exists(&ns) {
        bail!("{ns} does not exist; run `v6gate lab run` first");
    }
    Netns::attach(&ns).enter_thread()
}

fn client(lab: &Lab, c: &ClientCmd) -> Result<()> {
    match c {
        ClientCmd::Dns { name, rtype, server, node } => {
            let server = services::sockaddr(server.as_deref().unwrap_or(&format!("[{GW6}]")), 53)?;
            enter_node(lab, *node)?;
            let ans = services::dns_query(server, name, rtype)?;
            if ans.is_empty() {
                println!("{name} {rtype}: no records (NOERROR)");
            }
            for a in ans {
                println!("{a}");
            }
        }
        ClientCmd::Tcp { addr, node } => {
            let addr = services::sockaddr(addr, HTTP_PORT)?;
            enter_node(lab, *node)?;
            print!("{}", services::http_get(addr)?);
        }
        ClientCmd::Udp { addr, msg, node } => {
            let addr = services::sockaddr(addr, ECHO_PORT)?;
            enter_node(lab, *node)?;
            let (reply, from) = services::udp_echo(addr, msg)?;
            println!("echo from {from}: {reply}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_configs_name_the_lab_addresses() {
        let v = v6gate_config(Features { run: true, nat64: true, dns64: true, alg: false, xdp: true }).unwrap();
        assert!(!v6gate_config(Features::default()).unwrap().contains("[nat64]"));
        for s in
            ["[siit]", "[nat64]", "[dns64]", "2001:db8:6::2/128", "192.0.2.2/32", "2001:db8:64::/96", "198.51.100.2:53"]
        {
            assert!(v.contains(s), "{s} in {v}");
        }
        let t = tayga_config();
        assert!(t.contains("map 192.0.2.2 2001:db8:6::2") && !t.contains("map 198.51.100.2"));
    }
}
