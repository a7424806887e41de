//! The testbeds: the papers' IPv6-only host — gateway — IPv4-only host
//! network ([`Lab`], for `v6gate lab` and the demo), the RFC 8219
//! tester — DUT — tester network ([`BenchTopo`], for `v6gate bench xlat`)
//! and the IPv6 UA — media relay — IPv4 UA network ([`RelayTopo`], for
//! `v6gate bench trgw`).
//!
//! Addresses come from the documentation ranges (RFC 3849 2001:db8::/32,
//! RFC 5737 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24). Those IPv4
//! ranges are not global, and RFC 6052 §3.1 forbids them under the
//! well-known prefix 64:ff9b::/96 (TAYGA and v6gate both refuse them);
//! TAYGA 0.9.2 also refuses the local-use 64:ff9b:1::/96 (RFC 8215) as
//! "reserved". So the translation prefix is a network-specific prefix from
//! the documentation range, 2001:db8:64::/96 (RFC 6052 §2.2, /96 format).

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{Context as _, Result};

use crate::netns::{self, veth, Netns};

/// Namespace name prefix of `v6gate lab`.
pub const LAB_PREFIX: &str = "v6gate-lab";

/// The lab's addresses (see docs/lab.md).
pub mod lab_addr {
    use super::*;
    /// IPv6-only client `h6`.
    pub const H6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
    /// The gateway on the IPv6 link.
    pub const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
    /// IPv4-only server `h4`.
    pub const H4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
    /// The gateway on the IPv4 link.
    pub const GW4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    /// The IPv4 address `h6` has through SIIT (EAMT entry H6 <-> H6_AS_V4).
    pub const H6_AS_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    /// The IPv6 address `h4` has through SIIT (EAMT SIIT6 <-> H4_NET).
    pub const H4_AS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, 2);
    /// IPv6 side of the EAMT entry for the IPv4 server's network.
    pub const SIIT6: &str = "2001:db8:4::/120";
    /// IPv4 side of that entry: the server's network.
    pub const H4_NET: &str = "198.51.100.0/24";
    /// The translator's own IPv4 address (ICMP errors).
    pub const XLAT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    /// Translation prefix (RFC 8215 local use).
    pub const POOL6: &str = "2001:db8:64::/96";
    /// Stateful NAT64 IPv4 pool.
    pub const POOL4: &str = "203.0.113.0/28";
    /// IPv4 prefix routed to the translator for SIIT (EAMT side).
    pub const SIIT4: &str = "192.0.2.0/24";
    /// The lab's DNS zone, served by `h4`.
    pub const ZONE: &str = "lab.example.";
    /// The IPv4-only server's name.
    pub const SERVER_NAME: &str = "server.lab.example.";
    /// Port of the demo TCP (HTTP) service on `h4`.
    pub const HTTP_PORT: u16 = 80;
    /// Port of the demo UDP echo service on `h4`.
    pub const ECHO_PORT: u16 = 7;
    /// Name of the gateway's TUN device.
    pub const TUN: &str = "v6gate0";
    /// The IPv6-only client's network (DNS64 clients).
    pub const H6_NET: &str = "2001:db8:6::/64";
    /// The gateway's admin API (inside `gw`).
    pub const LAB_ADMIN: &str = "127.0.0.1:9164";

    /// `addr` embedded in [`POOL6`] (RFC 6052 /96).
    pub fn in_pool6(addr: Ipv4Addr) -> Ipv6Addr {
        let o = addr.octets();
        Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]))
    }
}

/// Names of the lab's three namespaces.
#[derive(Debug, Clone)]
pub struct Lab {
    /// Name prefix; namespaces are `<prefix>-h6`, `-gw`, `-h4`.
    pub prefix: String,
}

impl Lab {
    /// The lab with this name prefix.
    pub fn new(prefix: &str) -> Self {
        Lab { prefix: prefix.to_owned() }
    }

    /// Namespace of the IPv6-only client.
    pub fn h6(&self) -> String {
        format!("{}-h6", self.prefix)
    }

    /// Namespace of the gateway.
    pub fn gw(&self) -> String {
        format!("{}-gw", self.prefix)
    }

    /// Namespace of the IPv4-only server.
    pub fn h4(&self) -> String {
        format!("{}-h4", self.prefix)
    }

    /// Whether all three namespaces exist.
    pub fn is_up(&self) -> bool {
        [self.h6(), self.gw(), self.h4()].iter().all(|n| netns::exists(n))
    }

    /// Removes every namespace of the lab (and every process in them);
    /// returns their names. Safe to run at any time, also after a crash.
    pub fn down(&self) -> Vec<String> {
        netns::cleanup(&format!("{}-", self.prefix))
    }

    /// Builds the namespaces, links, addresses and routes (after removing
    /// whatever a previous run left). The gateway forwards but translates
    /// nothing until a translator attaches to [`lab_addr::TUN`] routes, see
    /// [`Lab::route_to_translator`].
    pub fn up(&self) -> Result<()> {
        use lab_addr::*;
        self.down();
        let built = (|| -> Result<()> {
            let h6 = Netns::create(&self.h6())?.keep_handle();
            let gw = Netns::create(&self.gw())?.keep_handle();
            let h4 = Netns::create(&self.h4())?.keep_handle();
            veth(&h6, "eth0", &gw, "to-h6")?;
            veth(&gw, "to-h4", &h4, "eth0")?;
            // The client is IPv6-only, the server IPv4-only.
            h6.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            h6.sysctl("net.ipv6.conf.eth0.accept_dad", "0")?;
            gw.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            gw.sysctl("net.ipv6.conf.to-h6.accept_dad", "0")?;
            h6.ip(&["addr", "add", &format!("{H6}/64"), "dev", "eth0", "nodad"])?;
            h6.ip(&["-6", "route", "add", "default", "via", &GW6.to_string()])?;
            h4.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
            h4.ip(&["addr", "add", &format!("{H4}/24"), "dev", "eth0"])?;
            h4.ip(&["route", "add", "default", "via", &GW4.to_string()])?;
            gw.ip(&["addr", "add", &format!("{GW6}/64"), "dev", "to-h6", "nodad"])?;
            gw.ip(&["addr", "add", &format!("{GW4}/24"), "dev", "to-h4"])?;
            gw.sysctl("net.ipv4.ip_forward", "1")?;
            gw.sysctl("net.ipv6.conf.all.forwarding", "1")?;
            Ok(())
        })();
        if built.is_err() {
            self.down();
        }
        built
    }

    /// Routes the translated prefixes (pool6, the SIIT IPv4 range, pool4)
    /// to the translator's TUN device `tun` in the gateway namespace.
    pub fn route_to_translator(&self, tun: &str) -> Result<()> {
        use lab_addr::*;
        let gw = Netns::attach(&self.gw());
        gw.ip(&["link", "set", tun, "up"])?;
        gw.ip(&["-6", "route", "replace", POOL6, "dev", tun])?;
        gw.ip(&["route", "replace", SIIT4, "dev", tun])?;
        gw.ip(&["route", "replace", POOL4, "dev", tun])?;
        Ok(())
    }
}

/// Namespace name prefix of `v6gate bench xlat`.
pub const BENCH_PREFIX: &str = "v6gate-bx";

/// The bench's addresses and MACs (see docs/bench-xlat.md).
pub mod bench_addr {
    use super::*;
    /// Tester MAC on the IPv6 link (interface `t6`).
    pub const T6_MAC: [u8; 6] = [2, 0, 0, 0, 6, 2];
    /// DUT MAC on the IPv6 link (interface `d6`).
    pub const D6_MAC: [u8; 6] = [2, 0, 0, 0, 6, 1];
    /// DUT MAC on the IPv4 link (interface `d4`).
    pub const D4_MAC: [u8; 6] = [2, 0, 0, 0, 4, 1];
    /// Tester MAC on the IPv4 link (interface `t4`).
    pub const T4_MAC: [u8; 6] = [2, 0, 0, 0, 4, 2];
    /// The tester interfaces' own MAC (both ports). It differs from
    /// `T6_MAC`/`T4_MAC`, which the DUT sends to (permanent neighbour
    /// entries): the tester's kernel sees every test frame as
    /// PACKET_OTHERHOST and drops it at once, before any routing, while the
    /// tester's packet socket still receives it.
    pub const TESTER_IF_MAC: [u8; 6] = [2, 0, 0, 0, 0xee, 0xee];
    /// Tester link address, IPv6 side.
    pub const T6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
    /// DUT link address, IPv6 side.
    pub const D6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
    /// Tester link address, IPv4 side.
    pub const T4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
    /// DUT link address, IPv4 side.
    pub const D4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    /// IPv4 on the IPv6-side link (kernel-forwarding baseline only): DUT.
    pub const D6_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    /// IPv4 on the IPv6-side link (kernel-forwarding baseline only): tester.
    pub const T6_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    /// The emulated IPv6-only host behind the tester (traffic source/sink).
    pub const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, 0, 0x10);
    /// Its IPv4 address through SIIT (EAMT entry), and its address in the
    /// kernel baseline.
    pub const HOST6_AS_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 130);
    /// The emulated IPv4-only host behind the tester.
    pub const HOST4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
    /// The translator's own IPv4 address.
    pub const XLAT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 64);
    /// Prefix of emulated IPv6 hosts (routed to the IPv6-side tester).
    pub const HOSTS6: &str = "2001:db8:46::/64";
    /// Prefix of emulated IPv4 hosts (routed to the IPv4-side tester).
    pub const HOSTS4: &str = "203.0.113.0/25";
    /// SIIT: IPv4 side of the EAMT (routed to the translator).
    pub const SIIT4: &str = "192.0.2.128/25";
    /// NAT64 IPv4 pool (routed to the translator).
    pub const POOL4: &str = "203.0.113.128/25";
    /// Translation prefix.
    pub const POOL6: &str = "2001:db8:64::/96";
    /// The TUN device translators use.
    pub const TUN: &str = "xlat0";
    /// `addr` embedded in [`POOL6`] (the lab's prefix too).
    pub use super::lab_addr::in_pool6;
}

/// The bench topology: `<prefix>-t6` (tester, IPv6 side) — `<prefix>-dut`
/// — `<prefix>-t4` (tester, IPv4 side). Deleted on drop.
#[derive(Debug)]
pub struct BenchTopo {
    /// Tester namespace, IPv6 side (interface `t6`).
    pub t6: Netns,
    /// Device under test (interfaces `d6`, `d4`).
    pub dut: Netns,
    /// Tester namespace, IPv4 side (interface `t4`).
    pub t4: Netns,
}

fn mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl BenchTopo {
    /// Builds the topology with the tester links addressed, static
    /// neighbours in the DUT (no ARP/ND during trials) and routes from the
    /// DUT to the emulated hosts. `direct`: a single veth `t6`—`t4` between
    /// the testers and an empty DUT (the tester's own ceiling).
    pub fn create(prefix: &str, direct: bool) -> Result<Self> {
        use bench_addr::*;
        netns::cleanup(&format!("{prefix}-"));
        let t6 = Netns::create(&format!("{prefix}-t6"))?;
        let dut = Netns::create(&format!("{prefix}-dut"))?;
        let t4 = Netns::create(&format!("{prefix}-t4"))?;
        let topo = BenchTopo { t6, dut, t4 };
        for ns in [&topo.t6, &topo.dut, &topo.t4] {
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        if direct {
            veth(&topo.t6, "t6", &topo.t4, "t4")?;
            topo.t6.ip(&["link", "set", "t6", "address", &mac(TESTER_IF_MAC)])?;
            topo.t4.ip(&["link", "set", "t4", "address", &mac(TESTER_IF_MAC)])?;
            return Ok(topo);
        }
        veth(&topo.t6, "t6", &topo.dut, "d6")?;
        veth(&topo.dut, "d4", &topo.t4, "t4")?;
        let (t6, dut, t4) = (&topo.t6, &topo.dut, &topo.t4);
        t6.ip(&["link", "set", "t6", "address", &mac(TESTER_IF_MAC)])?;
        dut.ip(&["link", "set", "d6", "address", &mac(D6_MAC)])?;
        dut.ip(&["link", "set", "d4", "address", &mac(D4_MAC)])?;
        t4.ip(&["link", "set", "t4", "address", &mac(TESTER_IF_MAC)])?;
        t6.ip(&["addr", "add", &format!("{T6}/64"), "dev", "t6", "nodad"])?;
        t6.ip(&["addr", "add", &format!("{T6_V4}/26"), "dev", "t6"])?;
        t4.ip(&["addr", "add", &format!("{T4}/24"), "dev", "t4"])?;
        dut.ip(&["addr", "add", &format!("{D6}/64"), "dev", "d6", "nodad"])?;
        dut.ip(&["addr", "add", &format!("{D6_V4}/26"), "dev", "d6"])?;
        dut.ip(&["addr", "add", &format!("{D4}/24"), "dev", "d4"])?;
        for (addr, m, dev) in
            [(T6.to_string(), T6_MAC, "d6"), (T6_V4.to_string(), T6_MAC, "d6"), (T4.to_string(), T4_MAC, "d4")]
        {
            dut.ip(&["neigh", "replace", &addr, "lladdr", &mac(m), "dev", dev, "nud", "permanent"])?;
        }
        dut.ip(&["-6", "route", "add", HOSTS6, "via", &T6.to_string(), "dev", "d6"])?;
        dut.ip(&["route", "add", HOSTS4, "via", &T4.to_string(), "dev", "d4"])?;
        dut.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        dut.sysctl("net.ipv4.ip_forward", "1")?;
        // Larger socket buffers for the translators' TUN queues are set by
        // the DUT itself; the kernel baseline needs nothing more.
        Ok(topo)
    }
}

/// The media-relay testbed's addresses (see docs/bench-trgw.md).
pub mod relay_addr {
    use super::*;
    /// The IPv6-only UA.
    pub const UA6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
    /// The relay on the IPv6 link.
    pub const RELAY6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
    /// The IPv4-only UA.
    pub const UA4: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 2);
    /// The relay on the IPv4 link.
    pub const RELAY4: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 1);
    /// IPv6 address of the ua4 side, only in the kernel-forwarding (ceiling) variant.
    pub const UA4_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, 2);
    /// The relay namespace's IPv6 address on the ua4 link (ceiling variant).
    pub const RELAY_V6_4: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, 1);
    /// Where the relay listens for ng commands, inside the relay namespace.
    pub const NG: &str = "127.0.0.1:2223";
    /// IPv4 address of the ua6 side, only in the dual-stack variant.
    pub const UA6_V4: Ipv4Addr = Ipv4Addr::new(10, 0, 6, 2);
    /// The relay namespace's IPv4 address on the ua6 link (dual-stack variant).
    pub const RELAY4_6: Ipv4Addr = Ipv4Addr::new(10, 0, 6, 1);
    /// A second IPv6 address of the ua6 side: where a UE moves to
    /// (`bench sip` handover, added by the bench).
    pub const UA6_MOVED: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 3);
}

/// The media-relay testbed: `ua6` (IPv6 only) — `relay` — `ua4` (IPv4
/// only). Deleted on drop. Variants: `kernel` (ua4 also has IPv6, the relay
/// namespace forwards it: the tester's ceiling of `bench trgw`) and
/// [`RelayTopo::dual_stack`] (both UAs have both families and the relay
/// namespace routes both: `bench sip` runs native IPv4, native IPv6 and
/// the gateways between the realms in one topology).
///
/// ```text
///  ua6 (IPv6 only)            relay (DUT)                   ua4 (IPv4 only)
///  2001:db8:6::2 ---veth--- 2001:db8:6::1 | 10.0.4.1 ---veth--- 10.0.4.2
///                           ng on 127.0.0.1:2223
/// ```
#[derive(Debug)]
pub struct RelayTopo {
    /// The IPv6 UA's namespace (interface `u6`).
    pub ua6: Netns,
    /// The relay's namespace (interfaces `r6`, `r4`).
    pub relay: Netns,
    /// The IPv4 UA's namespace (interface `u4`).
    pub ua4: Netns,
    /// Kernel-forwarding variant: ua4 also has IPv6 and the relay
    /// namespace routes it (the tester's ceiling, no relay process).
    pub kernel: bool,
}

impl RelayTopo {
    /// Builds the namespaces `<prefix>-ua6`, `<prefix>-relay`,
    /// `<prefix>-ua4` (removing stale ones of those names first). With
    /// `kernel`, ua4 gets an IPv6 address too and the relay namespace
    /// forwards IPv6.
    pub fn build(prefix: &str, kernel: bool) -> Result<Self> {
        use relay_addr::*;
        let topo = RelayTopo {
            ua6: Netns::create(&format!("{prefix}-ua6"))?,
            relay: Netns::create(&format!("{prefix}-relay"))?,
            ua4: Netns::create(&format!("{prefix}-ua4"))?,
            kernel,
        };
        let (ua6, relay, ua4) = (&topo.ua6, &topo.relay, &topo.ua4);
        // No duplicate address detection (link-local addresses included):
        // neighbour discovery must work from the first packet.
        for ns in [ua6, relay, ua4] {
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        }
        veth(ua6, "u6", relay, "r6")?;
        veth(ua4, "u4", relay, "r4")?;
        ua6.ip(&["-6", "addr", "add", &format!("{UA6}/64"), "dev", "u6", "nodad"])?;
        relay.ip(&["-6", "addr", "add", &format!("{RELAY6}/64"), "dev", "r6", "nodad"])?;
        ua6.ip(&["-6", "route", "add", "default", "via", &RELAY6.to_string()])?;
        relay.ip(&["addr", "add", &format!("{RELAY4}/24"), "dev", "r4"])?;
        ua4.ip(&["addr", "add", &format!("{UA4}/24"), "dev", "u4"])?;
        ua4.ip(&["route", "add", "default", "via", &RELAY4.to_string()])?;
        if kernel {
            ua4.ip(&["-6", "addr", "add", &format!("{UA4_V6}/64"), "dev", "u4", "nodad"])?;
            relay.ip(&["-6", "addr", "add", &format!("{RELAY_V6_4}/64"), "dev", "r4", "nodad"])?;
            ua4.ip(&["-6", "route", "add", "default", "via", &RELAY_V6_4.to_string()])?;
            relay.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        } else {
            ua4.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        }
        // Resolve the neighbours before the first trial.
        ua6.exec("ping", &["-6", "-c1", "-W2", &RELAY6.to_string()]).context("ua6 cannot reach the relay")?;
        ua4.exec("ping", &["-4", "-c1", "-W2", &RELAY4.to_string()]).context("ua4 cannot reach the relay")?;
        if kernel {
            ua6.exec("ping", &["-6", "-c1", "-W2", &UA4_V6.to_string()]).context("ua6 cannot reach ua4 over IPv6")?;
        }
        Ok(topo)
    }

    /// The kernel variant plus IPv4 on the ua6 side ([`relay_addr::UA6_V4`])
    /// and IPv4 forwarding: each UA has both families, the relay namespace
    /// routes between them and can host a gateway on its own addresses.
    pub fn dual_stack(prefix: &str) -> Result<Self> {
        use relay_addr::*;
        let topo = Self::build(prefix, true)?;
        let (ua6, relay) = (&topo.ua6, &topo.relay);
        ua6.ip(&["addr", "add", &format!("{UA6_V4}/24"), "dev", "u6"])?;
        relay.ip(&["addr", "add", &format!("{RELAY4_6}/24"), "dev", "r6"])?;
        ua6.ip(&["route", "add", "default", "via", &RELAY4_6.to_string()])?;
        relay.sysctl("net.ipv4.ip_forward", "1")?;
        ua6.exec("ping", &["-4", "-c1", "-W2", &UA4.to_string()]).context("ua6 cannot reach ua4 over IPv4")?;
        Ok(topo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool6_embedding() {
        assert_eq!(lab_addr::in_pool6(lab_addr::H4).to_string(), "2001:db8:64::c633:6402");
    }
}
