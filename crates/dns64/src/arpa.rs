//! Reverse-tree names: ip6.arpa (RFC 3596 §2.5) and in-addr.arpa
//! (RFC 1035 §3.5).

use core::net::{Ipv4Addr, Ipv6Addr};
use hickory_proto::rr::Name;

/// The IPv6 address a full ip6.arpa name (32 nibble labels, lowest nibble
/// first, then `ip6.arpa`) stands for; `None` for any other name,
/// including partial names above a full address.
pub fn ip6_arpa_addr(name: &Name) -> Option<Ipv6Addr> {
    if name.num_labels() != 34 {
        return None;
    }
    let labels: Vec<&[u8]> = name.iter().collect();
    let (nibbles, zone) = labels.split_at(32);
    if !zone[0].eq_ignore_ascii_case(b"ip6") || !zone[1].eq_ignore_ascii_case(b"arpa") {
        return None;
    }
    let mut v: u128 = 0;
    for (i, label) in nibbles.iter().enumerate() {
        let [c] = label else { return None };
        let d = (*c as char).to_digit(16)?;
        v |= u128::from(d) << (4 * i);
    }
    Some(Ipv6Addr::from(v))
}

/// `d.c.b.a.in-addr.arpa.` for `a.b.c.d`.
pub fn in_addr_name(a: Ipv4Addr) -> Name {
    let [a, b, c, d] = a.octets();
    // Four decimal labels and two fixed ones: always a valid name.
    Name::from_ascii(format!("{d}.{c}.{b}.{a}.in-addr.arpa.")).expect("in-addr.arpa name is valid")
}

/// The full ip6.arpa name of `a` (lowercase nibbles).
pub fn ip6_arpa_name(a: Ipv6Addr) -> Name {
    let v = u128::from(a);
    let mut s = String::with_capacity(73);
    for i in 0..32 {
        let d = ((v >> (4 * i)) & 0xf) as u32;
        s.push(char::from_digit(d, 16).unwrap_or('0'));
        s.push('.');
    }
    s.push_str("ip6.arpa.");
    // 32 one-character labels and two fixed ones: always a valid name.
    Name::from_ascii(s).expect("ip6.arpa name is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc3596_example() {
        // RFC 3596 §2.5: 2001:db8::567:89ab.
        let n = Name::from_ascii("b.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.IP6.ARPA.").unwrap();
        assert_eq!(ip6_arpa_addr(&n), Some("2001:db8::567:89ab".parse().unwrap()));
        assert_eq!(ip6_arpa_name("2001:db8::567:89ab".parse().unwrap()).to_lowercase(), n.to_lowercase());
    }

    #[test]
    fn rejects_other_names() {
        for s in [
            "0.0.ip6.arpa.",
            "x.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
            "ba.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
            "b.a.9.8.7.6.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.int.",
            "1.2.0.192.in-addr.arpa.",
            "example.com.",
        ] {
            assert_eq!(ip6_arpa_addr(&Name::from_ascii(s).unwrap()), None, "{s}");
        }
    }

    #[test]
    fn in_addr() {
        assert_eq!(in_addr_name("192.0.2.33".parse().unwrap()), Name::from_ascii("33.2.0.192.in-addr.arpa.").unwrap());
    }

    proptest! {
        #[test]
        fn round_trip(v in any::<u128>()) {
            let a = Ipv6Addr::from(v);
            prop_assert_eq!(ip6_arpa_addr(&ip6_arpa_name(a)), Some(a));
        }
    }
}
