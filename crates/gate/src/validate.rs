//! Checks across tables, run by [`Config::check`](crate::config::Config::check)
//! after each table has been checked on its own, and the warnings
//! `v6gate config check` and `v6gate run` print.
//!
//! Refused (each error names both keys):
//! - the same IPv6 prefix translated by two functions: `[siit] pool6` (the
//!   IVI prefix with `mapping = "ivi"`) or an `[siit] eamt` IPv6 prefix
//!   overlapping `[nat64] pool6` (NAT64 would take every packet SIIT is
//!   meant to translate);
//! - an `[siit] eamt` IPv4 prefix or `[siit] rfc6791v4-prefix` overlapping
//!   an `[nat64] pool4` prefix;
//! - a `[trgw]` interface address inside a prefix the daemon routes into
//!   its TUN device (the relay would never see its media);
//! - a tunnel's own IPv6 prefix (`[sixtofour]` 2002::/16, `[sixrd] prefix`,
//!   the Teredo prefix of `[teredo.relay]` / `[teredo.client]`) overlapping
//!   a prefix SIIT or NAT64 translates or `[tun] routes` (two devices would
//!   claim it); a tunnel's IPv4 address (`[sixtofour] address`, `[sixrd]
//!   address`, `[teredo.server] primary`/`secondary`, Teredo `bind`) inside
//!   an `[siit]` or `[nat64]` IPv4 prefix (the translator's device would
//!   take its packets); a tunnel device named like `[tun] name`; an
//!   interface in both `[teredo.relay] xdp-interfaces` and `[xdp]
//!   interfaces` (one XDP program per interface);
//! - `[alg]`: `media = "in-process"` (the default) without `[trgw]`, or
//!   without a `[[trgw.interface]]` of each realm's family (or naming one
//!   that does not exist in `media-v6-interface` / `media-v4-interface`);
//!   a listener inside a prefix routed into the TUN device, on a port of
//!   the relay's media range on a relay address, or on the port of
//!   `[trgw] ng` / `rtpproxy-udp` (UDP) or `[admin] listen` (TCP);
//! - an `[admin]` token that is empty, set twice (`token` and
//!   `token-file`), or a `token-file` that cannot be read.
//!
//! Warned about: an admin listener on a non-loopback address without a
//! token, a token shorter than 16 characters, a token file others can read;
//! `[alg] media = "ng"` pointed at this daemon's own `[trgw] ng` (works,
//! but `"in-process"` does the same without a datagram per command).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use xlat::addr::{Ivi, Prefix4, Prefix6};
use xlat::siit::MappingMode;

use crate::config::Config;

/// Shortest token not warned about.
pub const MIN_TOKEN_LEN: usize = 16;

fn overlap6(a: &Prefix6, b: &Prefix6) -> bool {
    a.contains(&b.addr()) || b.contains(&a.addr())
}

fn overlap4(a: &Prefix4, b: &Prefix4) -> bool {
    a.contains(b.addr()) || b.contains(a.addr())
}

fn show6(p: &Prefix6) -> String {
    format!("{}/{}", p.addr(), p.len())
}

fn show4(p: &Prefix4) -> String {
    format!("{}/{}", p.addr(), p.len())
}

/// The IPv6 prefixes SIIT translates, with their keys.
fn siit_v6(cfg: &Config) -> Vec<(String, Prefix6)> {
    let mut v = Vec::new();
    if let Some(s) = &cfg.siit {
        if let Some(p) = s.pool6 {
            match s.mapping {
                MappingMode::Rfc6052 => v.push(("[siit] pool6".to_string(), p)),
                MappingMode::Ivi => {
                    let ivi = Ivi::new(p).map(|i| i.ivi_prefix()).unwrap_or(p);
                    v.push(("[siit] pool6 (mapping = \"ivi\")".to_string(), ivi));
                }
            }
        }
        for (i, (p6, _)) in s.eamt.iter().enumerate() {
            v.push((format!("[siit] eamt[{i}].ipv6"), *p6));
        }
    }
    v
}

/// The IPv4 prefixes SIIT owns, with their keys.
fn siit_v4(cfg: &Config) -> Vec<(String, Prefix4)> {
    let mut v = Vec::new();
    if let Some(s) = &cfg.siit {
        for (i, (_, p4)) in s.eamt.iter().enumerate() {
            v.push((format!("[siit] eamt[{i}].ipv4"), *p4));
        }
        if let Some(p) = s.rfc6791_v4 {
            v.push(("[siit] rfc6791v4-prefix".to_string(), p));
        }
    }
    v
}

fn nat64_v4(cfg: &Config) -> Vec<(String, Prefix4)> {
    cfg.nat64
        .as_ref()
        .map(|n| n.pool4.iter().enumerate().map(|(j, e)| (format!("[nat64] pool4[{j}]"), e.prefix)).collect())
        .unwrap_or_default()
}

/// The prefix (and its key) the daemon routes into its TUN device that
/// holds `a`, if any.
fn routed_into_tun(cfg: &Config, a: IpAddr) -> Option<(String, String)> {
    match a {
        IpAddr::V4(a4) => {
            let mut v4 = siit_v4(cfg);
            v4.extend(nat64_v4(cfg));
            v4.into_iter().find(|(_, p)| p.contains(a4)).map(|(k, p)| (k, show4(&p)))
        }
        IpAddr::V6(a6) => {
            let mut v6: Vec<(String, Prefix6)> = siit_v6(cfg);
            if let Some(n) = &cfg.nat64 {
                v6.push(("[nat64] pool6".into(), n.pool6));
            }
            v6.into_iter().find(|(_, p)| p.contains(&a6)).map(|(k, p)| (k, show6(&p)))
        }
    }
}

/// Two listeners of one transport protocol that cannot both bind: the
/// same port on the same address, or on the wildcard address of its
/// family.
fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `[alg]` against the other tables: in-process media needs `[trgw]` with
/// an interface of each realm's family; the ALG's SIP ports must not be
/// media ports of the relay, nor the relay's control or the admin API's
/// listener; its addresses must not be routed into the TUN device.
fn check_alg(cfg: &Config, a: &alg::Config) -> Result<(), (String, String)> {
    let listeners = [("[alg] listen-v6", a.listen_v6), ("[alg] listen-v4", a.listen_v4)];
    for (k, l) in listeners {
        if let Some((k2, p)) = routed_into_tun(cfg, l.ip()) {
            return Err((
                k.into(),
                format!("`{}` is inside {k2} `{p}`, which the daemon routes into its TUN device: the ALG would never receive SIP", l.ip()),
            ));
        }
    }
    if a.media == alg::config::MediaMode::InProcess {
        let Some(t) = &cfg.trgw else {
            return Err((
                "[alg] media".into(),
                "\"in-process\" (the default) anchors the media in this daemon's [trgw] relay, and there is no [trgw] \
                 table: add [trgw] with an IPv6 and an IPv4 media address, or set media = \"ng\" with [[alg.ng]] \
                 servers, or media = \"none\" (signalling only)"
                    .into(),
            ));
        };
        let names = || t.interfaces.iter().map(|i| format!("`{}`", i.name)).collect::<Vec<_>>().join(", ");
        for (k, name, v6) in [
            ("[alg] media-v6-interface", &a.media_v6_interface, true),
            ("[alg] media-v4-interface", &a.media_v4_interface, false),
        ] {
            let fam = if v6 { "IPv6" } else { "IPv4" };
            let has = |i: &trgw::config::Interface| if v6 { i.ipv6.is_some() } else { i.ipv4.is_some() };
            match name {
                Some(n) => {
                    let Some(i) = t.interfaces.iter().find(|i| &i.name == n) else {
                        return Err((
                            k.into(),
                            format!("`{n}` is not a [[trgw.interface]] name (there are {})", names()),
                        ));
                    };
                    if !has(i) {
                        return Err((
                            k.into(),
                            format!("[[trgw.interface]] `{n}` has no {fam} address: the {fam} realm's media needs one"),
                        ));
                    }
                }
                None if !t.interfaces.iter().any(has) => {
                    return Err((
                        k.into(),
                        format!("no [[trgw.interface]] has an {fam} address, and the {fam} realm's media needs one"),
                    ));
                }
                None => {}
            }
        }
        for (k, l) in listeners {
            let on_relay = l.ip().is_unspecified()
                || t.interfaces
                    .iter()
                    .any(|i| i.ipv4.map(IpAddr::V4) == Some(l.ip()) || i.ipv6.map(IpAddr::V6) == Some(l.ip()));
            if on_relay && (t.port_min..=t.port_max).contains(&l.port()) {
                return Err((
                    k.into(),
                    format!(
                        "port {} is inside [trgw] port-min..port-max ({}..{}) on an address the relay binds media to: \
                         the relay could take it for a call; move the ALG's port or the media range",
                        l.port(),
                        t.port_min,
                        t.port_max
                    ),
                ));
            }
        }
    }
    if let Some(t) = &cfg.trgw {
        for (k2, other) in [("[trgw] ng", t.ng), ("[trgw] rtpproxy-udp", t.rtpproxy_udp)] {
            let Some(o) = other else { continue };
            if let Some((k, _)) = listeners.iter().find(|(_, l)| same_socket(*l, o)) {
                return Err(((*k).into(), format!("the same UDP port as {k2} `{o}`: give each its own")));
            }
        }
    }
    if let Some(adm) = cfg.admin.listen.filter(|_| a.tcp) {
        if let Some((k, _)) = listeners.iter().find(|(_, l)| same_socket(*l, adm)) {
            return Err((
                (*k).into(),
                format!("the same TCP port as [admin] listen `{adm}` (tcp = true): give each its own"),
            ));
        }
    }
    Ok(())
}

/// Cross-table checks: `Err((key, message))` naming the first key in the
/// key slot and the second in the message.
pub fn check(cfg: &Config) -> Result<(), (String, String)> {
    if let Some(n) = &cfg.nat64 {
        for (k, p) in siit_v6(cfg) {
            if overlap6(&p, &n.pool6) {
                return Err((
                    k,
                    format!(
                        "`{}` overlaps [nat64] pool6 `{}`: one IPv6 prefix cannot be translated by both SIIT and NAT64 \
                         (NAT64 would take SIIT's packets); give each its own prefix",
                        show6(&p),
                        show6(&n.pool6)
                    ),
                ));
            }
        }
    }
    for (k, p) in siit_v4(cfg) {
        for (k2, q) in nat64_v4(cfg) {
            if overlap4(&p, &q) {
                return Err((
                    k,
                    format!(
                        "`{}` overlaps {k2} `{}`: an IPv4 address cannot belong to both SIIT and NAT64",
                        show4(&p),
                        show4(&q)
                    ),
                ));
            }
        }
    }
    if let Some(t) = &cfg.trgw {
        for (i, ifc) in t.interfaces.iter().enumerate() {
            for a in [ifc.ipv4.map(IpAddr::V4), ifc.ipv6.map(IpAddr::V6)].into_iter().flatten() {
                if let Some((k, p)) = routed_into_tun(cfg, a) {
                    let fam = if a.is_ipv4() { "ipv4" } else { "ipv6" };
                    return Err((
                        format!("[trgw] interface[{i}].{fam}"),
                        format!("`{a}` is inside {k} `{p}`, which the daemon routes into its TUN device: the relay would never receive its media"),
                    ));
                }
            }
        }
    }
    tunnels(cfg)?;
    softwires(cfg)?;
    if let Some(a) = &cfg.alg {
        check_alg(cfg, a)?;
    }
    admin_token(cfg).map(|_| ()).map_err(|m| ("[admin] token-file".to_string(), m))?;
    if cfg.admin.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(("[admin] token".into(), "must not be empty".into()));
    }
    if cfg.admin.token.is_some() && cfg.admin.token_file.is_some() {
        return Err(("[admin] token".into(), "set either token or token-file, not both".into()));
    }
    Ok(())
}

/// The tunnel tables against the translators and the daemon's device.
fn tunnels(cfg: &Config) -> Result<(), (String, String)> {
    let t = &cfg.tunnels;
    if t.is_empty() {
        return Ok(());
    }
    let mut v6 = siit_v6(cfg);
    if let Some(n) = &cfg.nat64 {
        v6.push(("[nat64] pool6".into(), n.pool6));
    }
    let daemon_tun = cfg.siit.is_some() || cfg.nat64.is_some() || cfg.dns64.is_some();
    if daemon_tun {
        for r in &cfg.tun.routes {
            if let xlat::addr::IpPrefix::V6(p) = r {
                v6.push(("[tun] routes".into(), *p));
            }
        }
    }
    for (k, p) in t.owned_v6() {
        if let Some((k2, q)) = v6.iter().find(|(_, q)| overlap6(&p, q)) {
            return Err((
                k,
                format!(
                    "`{}` overlaps {k2} `{}`: the tunnel's device and the translator's would both claim it; \
                     give each its own prefix",
                    show6(&p),
                    show6(q)
                ),
            ));
        }
    }
    let mut v4 = siit_v4(cfg);
    v4.extend(nat64_v4(cfg));
    for (k, a) in t.local_v4() {
        if let Some((k2, q)) = v4.iter().find(|(_, q)| q.contains(a)) {
            return Err((
                k,
                format!(
                    "`{a}` is inside {k2} `{}`, which the daemon routes into its TUN device: the tunnel would never \
                     receive its packets",
                    show4(q)
                ),
            ));
        }
    }
    if let (Some(x), Some(r)) = (&cfg.xdp, t.teredo_relay.as_ref().and_then(|r| r.xdp.as_ref())) {
        if let Some(i) = r.interfaces.iter().find(|i| x.interfaces.contains(i)) {
            return Err((
                "[teredo.relay] xdp-interfaces".into(),
                format!(
                    "`{i}` is also in [xdp] interfaces: an interface carries one XDP program; give the relay's \
                     fast path other interfaces"
                ),
            ));
        }
    }
    if daemon_tun {
        if let Some((table, d)) = t.devices().into_iter().find(|(_, d)| d.name == cfg.tun.name) {
            return Err((
                format!("[{table}] tun"),
                format!("`{}` is also [tun] name, the translators' device; each needs its own", d.name),
            ));
        }
    }
    Ok(())
}

/// The softwire tables and `[trt]` against the daemon's device, the
/// tunnels' devices and the translators' prefixes: each device its own
/// name, no route into a softwire's device that a translator routes into
/// its own, and the TRT prefix (handed to tproxy) apart from the
/// translators' IPv6 prefixes.
fn softwires(cfg: &Config) -> Result<(), (String, String)> {
    let s = &cfg.softwires;
    let devs: Vec<(&str, &netsys::DeviceSpec)> = [
        ("dslite", s.dslite.as_ref().map(|t| &t.tun)),
        ("lw4o6", s.lw4o6.as_ref().map(|t| &t.tun)),
        ("b4", s.b4.as_ref().map(|t| &t.tun)),
    ]
    .into_iter()
    .filter_map(|(t, d)| d.map(|d| (t, d)))
    .collect();
    if devs.is_empty() && cfg.trt.is_none() {
        return Ok(());
    }
    let daemon_tun = cfg.siit.is_some() || cfg.nat64.is_some() || cfg.dns64.is_some();
    let mut taken: Vec<(String, &str)> =
        cfg.tunnels.devices().into_iter().map(|(t, d)| (format!("[{t}] tun"), d.name.as_str())).collect();
    if daemon_tun {
        taken.push(("[tun] name".into(), cfg.tun.name.as_str()));
    }
    let mut v6 = siit_v6(cfg);
    if let Some(n) = &cfg.nat64 {
        v6.push(("[nat64] pool6".into(), n.pool6));
    }
    let mut v4 = siit_v4(cfg);
    v4.extend(nat64_v4(cfg));
    for (t, d) in &devs {
        if let Some((k, _)) = taken.iter().find(|(_, n)| *n == d.name) {
            return Err((format!("[{t}] tun"), format!("`{}` is also {k}; each device needs its own name", d.name)));
        }
        taken.push((format!("[{t}] tun"), d.name.as_str()));
        for r in &d.routes {
            let clash = match r {
                xlat::addr::IpPrefix::V6(p) => v6.iter().find(|(_, q)| overlap6(p, q)).map(|(k, q)| (k, show6(q))),
                xlat::addr::IpPrefix::V4(p) => v4.iter().find(|(_, q)| overlap4(p, q)).map(|(k, q)| (k, show4(q))),
            };
            if let Some((k, q)) = clash {
                return Err((
                    format!("[{t}]"),
                    format!("routes `{r}` into its device, which overlaps {k} `{q}`: give each its own prefix"),
                ));
            }
        }
    }
    if let Some(t) = &cfg.trt {
        let p = t.prefix.prefix();
        if let Some((k, q)) = v6.iter().find(|(_, q)| overlap6(&p, q)) {
            return Err((
                "[trt] prefix".into(),
                format!(
                    "`{}` overlaps {k} `{}`: the relay and the translator would both claim it; give each its own prefix",
                    show6(&p),
                    show6(q)
                ),
            ));
        }
    }
    Ok(())
}

/// Where `[admin] token-file` points (relative to the configuration file).
pub fn token_path(cfg: &Config) -> Option<PathBuf> {
    let f = cfg.admin.token_file.as_ref()?;
    if f.is_absolute() {
        return Some(f.clone());
    }
    let dir = cfg.origin().and_then(|o| o.parent()).map(PathBuf::from).unwrap_or_default();
    Some(dir.join(f))
}

/// The admin token: `[admin] token`, or the first line of `token-file`.
pub fn admin_token(cfg: &Config) -> Result<Option<String>, String> {
    if let Some(t) = &cfg.admin.token {
        return Ok(Some(t.clone()));
    }
    let Some(p) = token_path(cfg) else { return Ok(None) };
    let text = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let t = text.lines().next().unwrap_or("").trim().to_string();
    if t.is_empty() {
        return Err(format!("{} holds no token (its first line is empty)", p.display()));
    }
    Ok(Some(t))
}

/// What an operator should know about a configuration that is valid.
pub fn warnings(cfg: &Config) -> Vec<String> {
    let mut w = Vec::new();
    let token = admin_token(cfg).ok().flatten();
    if let Some(a) = cfg.admin.listen {
        if !a.ip().is_loopback() && token.is_none() {
            w.push(format!(
                "[admin] listen: {a} is not a loopback address and no [admin] token is set: anyone who can reach it \
                 reads the status and metrics, and state-changing requests (reload, bib add/remove) are refused; \
                 set token or token-file (docs/security.md)"
            ));
        }
    }
    if let (Some(a), Some(t)) = (&cfg.alg, &cfg.trgw) {
        if a.media == alg::config::MediaMode::Ng && a.ng.iter().any(|s| t.ng.is_some_and(|n| same_socket(n, s.addr))) {
            w.push(
                "[alg] ng: names this daemon's own [trgw] ng listener; media = \"in-process\" does the same without a \
                 datagram per command"
                    .into(),
            );
        }
    }
    if token.as_deref().is_some_and(|t| t.len() < MIN_TOKEN_LEN) {
        w.push(format!("[admin] token: shorter than {MIN_TOKEN_LEN} characters; use a long random one"));
    }
    if let Some(p) = token_path(cfg) {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(m) = std::fs::metadata(&p) {
            if m.permissions().mode() & 0o077 != 0 {
                w.push(format!(
                    "[admin] token-file: {} can be read by other users (mode {:o}); chmod 600 it",
                    p.display(),
                    m.permissions().mode() & 0o777
                ));
            }
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        let c = Config::parse(text).unwrap();
        c.check().unwrap_err().to_string()
    }

    #[test]
    fn same_pool6_for_siit_and_nat64_is_refused_naming_both() {
        let e =
            err("[siit]\npool6 = \"64:ff9b::/96\"\n[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/30\"]\n");
        assert!(e.contains("[siit] pool6") && e.contains("[nat64] pool6"), "{e}");
        let e =
            err("[siit]\npool6 = \"64:ff9b::/64\"\n[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/30\"]\n");
        assert!(e.contains("overlaps"), "{e}");
        let e = err(
            "[siit]\npool6 = \"64:ff9b:2::/96\"\neamt = [[\"64:ff9b:1::5/128\", \"192.0.2.5\"]]\n[nat64]\npool6 = \"64:ff9b:1::/96\"\npool4 = [\"203.0.113.0/30\"]\n",
        );
        assert!(e.contains("[siit] eamt[0].ipv6") && e.contains("[nat64] pool6"), "{e}");
    }

    #[test]
    fn eamt_overlapping_pool4_is_refused_naming_both() {
        let e = err(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\neamt = [[\"2001:db8::/120\", \"192.0.2.0/24\"], [\"2001:db8:1::/124\", \"203.0.113.0/28\"]]\n\
             [nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"198.51.100.1/32\", \"203.0.113.4/30\"]\n",
        );
        assert!(e.contains("[siit] eamt[1].ipv4") && e.contains("[nat64] pool4[1]"), "{e}");
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\nrfc6791v4-prefix = \"203.0.113.0/24\"\n\
             [nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.4/30\"]\n");
        assert!(e.contains("[siit] rfc6791v4-prefix") && e.contains("[nat64] pool4[0]"), "{e}");
    }

    #[test]
    fn separate_prefixes_pass() {
        let c = Config::parse(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\neamt = [[\"2001:db8::/120\", \"192.0.2.0/24\"]]\n\
             [nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/30\"]\n",
        )
        .unwrap();
        c.check().unwrap();
    }

    #[test]
    fn relay_address_routed_into_the_tun_is_refused() {
        let e = err("[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/30\"]\n\
             [trgw]\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"203.0.113.1\"\n");
        assert!(e.contains("[trgw] interface[0].ipv4") && e.contains("[nat64] pool4[0]"), "{e}");
    }

    const TRGW: &str = "[trgw]\nng = \"127.0.0.1:2223\"\nport-min = 30000\nport-max = 30999\n\
        [[trgw.interface]]\nname = \"v6\"\nipv6 = \"2001:db8::1\"\n[[trgw.interface]]\nname = \"v4\"\nipv4 = \"192.0.2.1\"\n";
    const ALG: &str = "[alg]\nlisten-v6 = \"[2001:db8::1]:5060\"\nlisten-v4 = \"192.0.2.1:5060\"\n";

    #[test]
    fn alg_with_the_relay_of_this_daemon() {
        Config::parse(&format!("{TRGW}{ALG}")).unwrap().check().unwrap();
        let e = err(ALG);
        assert!(e.contains("[alg] media") && e.contains("no [trgw]"), "{e}");
        Config::parse(&format!("{ALG}media = \"none\"\n")).unwrap().check().unwrap();
        let e = err(&format!("{TRGW}{ALG}media-v4-interface = \"v9\"\n"));
        assert!(e.contains("[alg] media-v4-interface") && e.contains("`v9` is not") && e.contains("`v4`"), "{e}");
        let e = err(&format!("{TRGW}{ALG}media-v4-interface = \"v6\"\n"));
        assert!(e.contains("`v6` has no IPv4 address"), "{e}");
        let v6only = "[trgw]\n[[trgw.interface]]\nname = \"v6\"\nipv6 = \"2001:db8::1\"\n";
        let e = err(&format!("{v6only}{ALG}"));
        assert!(e.contains("[alg] media-v4-interface") && e.contains("no [[trgw.interface]] has an IPv4"), "{e}");
    }

    #[test]
    fn alg_ports_clash_with_media_control_and_admin() {
        let e = err(&format!("{TRGW}[alg]\nlisten-v6 = \"[2001:db8::1]:5060\"\nlisten-v4 = \"192.0.2.1:30002\"\n"));
        assert!(e.contains("[alg] listen-v4") && e.contains("port-min..port-max"), "{e}");
        // Another address than the relay's: no clash.
        let ok = format!("{TRGW}[alg]\nlisten-v6 = \"[2001:db8::1]:5060\"\nlisten-v4 = \"192.0.2.9:30002\"\n");
        Config::parse(&ok).unwrap().check().unwrap();
        let e = err(&format!("{TRGW}[alg]\nlisten-v6 = \"[2001:db8::1]:5060\"\nlisten-v4 = \"127.0.0.1:2223\"\n"));
        assert!(e.contains("[alg] listen-v4") && e.contains("[trgw] ng"), "{e}");
        let e = err(&format!("{ALG}media = \"none\"\n[admin]\nlisten = \"0.0.0.0:5060\"\n"));
        assert!(e.contains("[alg] listen-v4") && e.contains("[admin] listen"), "{e}");
        let e = err(&format!("[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"192.0.2.0/28\"]\n{ALG}media = \"none\"\n"));
        assert!(e.contains("[alg] listen-v4") && e.contains("[nat64] pool4[0]"), "{e}");
        let c = Config::parse(&format!("{TRGW}{ALG}media = \"ng\"\n[[alg.ng]]\naddr = \"127.0.0.1:2223\"\n")).unwrap();
        c.check().unwrap();
        assert!(warnings(&c).iter().any(|w| w.contains("[alg] ng")), "{:?}", warnings(&c));
    }

    #[test]
    fn tunnel_prefixes_addresses_and_devices_are_checked_against_the_translators() {
        // The 6rd prefix inside SIIT's pool6.
        let e = err("[siit]\npool6 = \"2001:db8::/32\"\n\
             [sixrd]\nmode = \"br\"\nprefix = \"2001:db8::/32\"\nipv4-mask-len = 8\naddress = \"10.0.0.1\"\n");
        assert!(e.contains("[sixrd] prefix") && e.contains("[siit] pool6"), "{e}");
        // 2002::/16 inside [tun] routes of a running translator.
        let e = err(
            "[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/30\"]\n[tun]\nroutes = [\"2002:c000::/24\"]\n\
             [sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\n",
        );
        assert!(e.contains("[sixtofour]") && e.contains("[tun] routes"), "{e}");
        // A Teredo server address inside the NAT64 pool4.
        let e = err("[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"192.0.2.8/29\"]\n\
             [teredo.server]\nprimary = \"192.0.2.10\"\n");
        assert!(e.contains("[teredo.server] primary") && e.contains("[nat64] pool4[0]"), "{e}");
        // The tunnel's device named like the translators'.
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\n[tun]\nname = \"gw0\"\n\
             [sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\ntun = \"gw0\"\n");
        assert!(e.contains("[sixtofour] tun") && e.contains("[tun] name"), "{e}");
        // The relay's XDP fast path on an interface of the daemon's.
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\n[xdp]\ninterfaces = [\"eth0\", \"eth1\"]\n\
             [teredo.relay]\nbind = \"192.0.2.1:3544\"\nxdp = \"native\"\nxdp-interfaces = [\"eth2\", \"eth1\"]\n");
        assert!(e.contains("[teredo.relay] xdp-interfaces") && e.contains("`eth1`") && e.contains("[xdp]"), "{e}");
        // Apart, they pass; a tunnel alone is a configuration.
        let c = Config::parse(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\neamt = [[\"2001:db8::/120\", \"198.51.100.0/24\"]]\n\
             [sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\n",
        )
        .unwrap();
        c.check().unwrap();
        assert!(c.tunnels.sixtofour.is_some());
        Config::parse("[teredo.relay]\naddress = \"2001:db8::1\"\n").unwrap().check().unwrap();
        // The tunnel crate's own errors keep their key.
        let e = Config::parse("[sixtofour]\nmode = \"bridge\"\naddress = \"192.0.2.1\"\n").unwrap_err();
        assert_eq!(e.key(), Some("[sixtofour] mode"), "{e}");
    }

    #[test]
    fn softwire_and_trt_tables_run_in_the_daemon_and_are_checked() {
        // A softwire or TRT table alone is a configuration.
        let c = Config::parse(
            "[dslite]\naftr-address = \"2001:db8:ffff::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"203.0.113.0/28\"]\n",
        )
        .unwrap();
        c.check().unwrap();
        assert_eq!(c.softwires.functions(), ["dslite"]);
        let c = Config::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\n").unwrap();
        c.check().unwrap();
        assert_eq!(c.trt.as_ref().map(|t| t.prefix.prefix().to_string()).as_deref(), Some("64:ff9b:1::/96"));
        // The crates' own errors keep their key.
        let e = Config::parse("[trt]\nprefix = \"64:ff9b:1::/95\"\n").unwrap_err();
        assert_eq!(e.key(), Some("[trt] prefix"), "{e}");
        let e = Config::parse("[dslite]\naftr-address = \"192.0.2.1\"\n").unwrap_err();
        assert!(e.to_string().contains("[dslite]"), "{e}");
        // The TRT prefix inside the translator's pool6.
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\n[trt]\nprefix = \"64:ff9b:1::/96\"\n");
        assert!(e.contains("[trt] prefix") && e.contains("[siit] pool6"), "{e}");
        // A softwire device named like the translators'.
        let e = err(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\n[tun]\nname = \"gw0\"\n\
             [dslite]\naftr-address = \"2001:db8:ffff::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"203.0.113.0/28\"]\ntun = \"gw0\"\n",
        );
        assert!(e.contains("[dslite] tun") && e.contains("[tun] name"), "{e}");
        // The DS-Lite pool4 (routed into the AFTR's device) inside the NAT64 pool4.
        let e = err(
            "[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"203.0.113.0/24\"]\n\
             [dslite]\naftr-address = \"2001:db8:ffff::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"203.0.113.0/28\"]\n",
        );
        assert!(e.contains("[dslite]") && e.contains("[nat64] pool4"), "{e}");
        // Reload compares the checked tables (the registry's plan).
        let a = Config::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\n").unwrap();
        let b = Config::parse("[trt]\nprefix = \"64:ff9b:2::/96\"\n").unwrap();
        // The same relay written with a default spelled out is the same table.
        let a2 = Config::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ntcp-port = 7040\n").unwrap();
        assert!(a.trt == a2.trt && a.trt != b.trt);
        let d = Config::parse(
            "[dslite]\naftr-address = \"2001:db8:ffff::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"203.0.113.0/28\"]\n",
        )
        .unwrap();
        let d2 = Config::parse(
            "[dslite]\naftr-address = \"2001:db8:ffff::2\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"203.0.113.0/28\"]\n",
        )
        .unwrap();
        assert!(d.configured_softwires() == d.clone().configured_softwires() && d.softwires != d2.softwires);
        assert!(d.configured_tunnels().is_none() && a.configured_softwires().is_none());
    }

    #[test]
    fn admin_token_rules_and_warnings() {
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\ntoken = \" \"\n");
        assert!(e.contains("[admin] token"), "{e}");
        let e = err("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\ntoken-file = \"/nonexistent/v6gate-token\"\n");
        assert!(e.contains("[admin] token-file") && e.contains("cannot read"), "{e}");
        let open = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\nlisten = \"0.0.0.0:9164\"\n").unwrap();
        let w = warnings(&open);
        assert!(w.iter().any(|m| m.contains("not a loopback address")), "{w:?}");
        let with = Config::parse(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\nlisten = \"0.0.0.0:9164\"\ntoken = \"0123456789abcdef0123\"\n",
        )
        .unwrap();
        assert!(warnings(&with).is_empty(), "{:?}", warnings(&with));
        let lo = Config::parse("[siit]\npool6 = \"64:ff9b::/96\"\n").unwrap();
        assert!(warnings(&lo).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tok");
        std::fs::write(&f, "short\n").unwrap();
        let c =
            Config::parse(&format!("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\ntoken-file = \"{}\"\n", f.display()))
                .unwrap();
        assert_eq!(admin_token(&c).unwrap().as_deref(), Some("short"));
        assert!(warnings(&c).iter().any(|m| m.contains("shorter than")), "{:?}", warnings(&c));
    }
}
