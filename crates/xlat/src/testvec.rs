//! Test vectors from the RFCs, in one place for every crate's tests
//! (`xlat`'s own with `cfg(test)`, the others through the `testvec`
//! feature in their `[dev-dependencies]`). Not part of the product build.

use core::net::Ipv4Addr;

/// RFC 6052 §2.4, Table 1: the IPv4 address every row embeds.
pub const RFC6052_2_4_IPV4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 33);

/// RFC 6052 §2.4, Table 1: `(prefix, IPv4-embedded IPv6 address)` of
/// [`RFC6052_2_4_IPV4`] for each prefix length (32, 40, 48, 56, 64, 96).
/// The table's well-known-prefix row (`64:ff9b::192.0.2.33`) is left out:
/// RFC 6052 §3.1 forbids documentation space under the WKP.
pub const RFC6052_2_4: [(&str, &str); 6] = [
    ("2001:db8::/32", "2001:db8:c000:221::"),
    ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
    ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
    ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
    ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
    ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
];
