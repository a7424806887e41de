/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * v6gate XDP fast path: the contract with userspace.
 *
 * These structs mirror crates/xdp/src/types.rs (the one home of the
 * contract). v6gate_abi.h, generated from it by crates/xdp/build.rs,
 * holds the constants (flags, counter indices) and static asserts that
 * every size and offset below agrees with the Rust side: the object does
 * not build otherwise. Addresses are in network byte order, IPv4 ones
 * IPv4-mapped (::ffff:a.b.c.d) in 16-byte fields; ports are network order;
 * MTUs host order.
 */
#ifndef V6GATE_H
#define V6GATE_H

#include <linux/types.h>
#include "v6gate_abi.h"

/* RFC 7915 knobs of one function (SIIT or NAT64). */
struct v6g_xlat {
	__u8 flags;	/* V6G_XLAT_* */
	__u8 new_tos;
	__u16 ipv4_mtu;
	__u16 ipv6_mtu;
	__u16 frag_mtu; /* min(lowest-ipv6-mtu, ipv6-mtu) */
};

/* The single entry of the `config` array. */
struct v6g_config {
	__u8 pool6[16];
	__u8 pool6_len; /* 0, 32, 40, 48, 56, 64, 96 */
	__u8 trgw_flags;
	__u8 pad[2];
	struct v6g_xlat siit;
	struct v6g_xlat nat64;
	__u32 fib_cache_ms; /* 0: no FIB cache */
	__u8 fib_flags;	    /* V6G_FIB_* */
	__u8 route_flags;   /* V6G_ROUTES* */
	__u8 pad2[2];
	__u32 fib_table;
	__u8 eam4_lo[4]; /* the span of the EAMT: no trie lookup outside it */
	__u8 eam4_hi[4];
	__u8 eam6_lo[16];
	__u8 eam6_hi[16];
	__u32 default_nh4; /* with V6G_ROUTES4_DEFAULT: the trie holds only 0/0 */
	__u32 default_nh6;
};

/* A next hop resolved by the slow path (routes4/routes6 -> nexthops). */
struct v6g_nexthop {
	__u32 ifindex; /* 0: unused */
	__u16 mtu;
	__u8 dmac[6];
	__u8 smac[6];
	__u8 pad[2];
};

/* FIB cache: every input of the lookup -> its answer. */
struct v6g_fib_key {
	__u32 ifindex;
	__u8 family;
	__u8 proto;
	__u8 tos;
	__u8 pad;
	__be16 sport_be;
	__be16 dport_be;
	__u8 src[16];
	__u8 dst[16];
};

struct v6g_fib {
	__u64 expires_ns;
	__u32 ifindex;
	__u16 ok_len;
	__u8 dmac[6];
	__u8 smac[6];
	__u8 pad[6];
};

/* EAMT LPM trie keys (RFC 7757) and value. */
struct v6g_lpm4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct v6g_lpm6 {
	__u32 prefixlen;
	__u8 addr[16];
};

struct v6g_eam {
	__u8 net6[16];
	__u8 net4[4];
	__u8 len4;
	__u8 len6;
	__u8 shift; /* (128 - len6) - (32 - len4), at most 127 */
	__u8 pad;
};

/* NAT64 session, one entry per direction (RFC 6146). */
struct v6g_flow {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport_be;
	__be16 dport_be;
	__u8 family;
	__u8 proto;
	__u8 pad[2];
};

struct v6g_nat64 {
	__u8 src[16];
	__u8 dst[16];
	__be16 port_be; /* new port of the IPv6 host's side, or echo identifier */
	__u8 pad[2];
	__u32 flags; /* V6G_NAT64_F_*: HALF_OPEN by the slow path, SYN_ACK here */
	__u64 last_seen_ns;
};

/* NAT-PT sessions created here (bpf/nat64.h natpt_make). */
struct v6g_natpt_make {
	__u64 n;     /* [0]: created here; [1]: translator's count less drained */
	__u64 limit; /* [1]: max-sessions */
	__u32 flags; /* [1]: V6G_NATPT_MAKE_* */
	__u8 pool6[12];
};

struct v6g_natpt_host {
	__u8 addr[4];
};

struct v6g_natpt_event {
	__u8 x[16];
	__u8 y[4];
	__u8 t[4];
	__be16 sport_be;
	__be16 dport_be;
	__u8 proto;
	__u8 kind;	 /* 0 created, V6G_NATPT_EV_FIN6 / _FIN4 a FIN carried */
	__be16 tport_be; /* t: NAT-PT x, NAT64 the block port */
	__u64 ns;
};

/* NAT64 (NAPT) sessions created here: a host's port blocks (n64_hosts),
 * its TCP mappings (n64_bib). */
struct v6g_n64_host {
	__u32 slot[V6G_N64_BLOCKS]; /* slot + 1 in n64_blocks, 0: none */
};

struct v6g_n64_bib_key {
	__u8 x[16];
	__be16 port_be;
	__u8 pad[2];
};

struct v6g_n64_bib {
	__u8 t[4];
	__be16 port_be;
	__u8 pad[2];
};

/* TrGW media relay. */
struct v6g_relay_key {
	__u8 addr[16];
	__be16 port_be;
	__u8 family;
	__u8 pad;
};

struct v6g_relay {
	__u8 peer[16];
	__u8 out_src[16];
	__u8 out_dst[16];
	__be16 peer_port_be;
	__be16 out_sport_be;
	__be16 out_dport_be;
	__u8 out_family;
	__u8 flags; /* V6G_RELAY_* */
	__u32 stats_index;
	/* Precomputed by the slow path (network-order one's-complement sums,
	 * see types.rs): */
	__be16 in_pseudo_be;  /* arriving pseudo-header less its length */
	__be16 csum_delta_be; /* UDP checksum change, RFC 1624 */
	__be16 ip_sum_be;     /* IPv4 other leg: header sum less Total Length */
	__u8 pad[2];
};

struct v6g_count {
	__u64 packets;
	__u64 bytes;
};

V6G_CHECK_LAYOUT();

#endif
