/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The Teredo relay fast path (RFC 4380 §5.4): the map contract shared by
 * bpf/teredo.bpf.c and crates/xdp/src/teredo.rs. Kept apart from
 * v6gate.h: a separate object with its own maps, loaded only when the
 * relay's `xdp` key asks for it. Every size is asserted here and in
 * teredo.rs (`const` asserts), every counter index is checked by the
 * differential test through the reason it counts.
 */
#ifndef V6GATE_TEREDO_H
#define V6GATE_TEREDO_H

#include <linux/types.h>

/* The one entry of teredo_config. Addresses and ports in network order. */
struct td_config {
	__u32 relay_addr;  /* the relay's IPv4 address (its UDP socket's) */
	__u16 relay_port;  /* its UDP port (3544) */
	__u16 flags;       /* TD_F_* */
	__u32 prefix_hi32; /* the Teredo prefix's first 32 bits, host order */
	__u32 mtu6;        /* largest IPv6 packet to a client: the relay TUN's MTU */
	__u32 ttl;         /* outer TTL (the kernel's default for the relay's socket) */
	__u32 pad;
};
_Static_assert(sizeof(struct td_config) == 24, "struct td_config differs from teredo.rs");

#define TD_F_ON 1

/* teredo_peers: a trusted peer's Teredo address (16 bytes, as on the
 * wire) -> its mapping, written by the slow path when the RFC 4380 §5.4
 * trust procedure completes and deleted on expiry. */
struct td_peer {
	__u32 addr;         /* mapped IPv4 address, network order */
	__u16 port;         /* mapped UDP port, network order */
	__u16 pad;
	__u64 last_seen_ns; /* bpf_ktime_get_ns() of the last packet decapsulated from it */
};
_Static_assert(sizeof(struct td_peer) == 16, "struct td_peer differs from teredo.rs");

/* teredo_ifmac: an attached interface's index -> its MAC address (the
 * first 6 bytes); frames to another destination pass, as the kernel does
 * not route them (PACKET_OTHERHOST). */
struct td_mac {
	__u8 addr[6];
	__u16 pad;
};
_Static_assert(sizeof(struct td_mac) == 8, "struct td_mac differs from teredo.rs");

struct td_count {
	__u64 packets;
	__u64 bytes;
};

/* teredo_counters (per CPU): what the fast path did, and why it passed. */
#define TD_C_DECAP 0          /* IPv4 -> IPv6: decapsulated and forwarded */
#define TD_C_ENCAP 1          /* IPv6 -> IPv4: encapsulated and forwarded */
#define TD_P_NOT_IP 2         /* neither IPv4 nor IPv6 */
#define TD_P_NOT_TEREDO 3     /* not UDP to the relay / not to the Teredo prefix */
#define TD_P_MALFORMED 4      /* truncated, lengths disagree, trailing bytes */
#define TD_P_IPV4_OPTIONS 5   /* outer IPv4 header with options */
#define TD_P_FRAGMENT 6       /* outer IPv4 fragment, inner Fragment header */
#define TD_P_INDICATOR 7      /* origin indication or authentication header */
#define TD_P_BUBBLE 8         /* Next Header 59 */
#define TD_P_UNTRUSTED 9      /* no trusted-peer entry (or a non-Teredo source) */
#define TD_P_SPOOFED 10       /* entry, but another outer address or port */
#define TD_P_CHECKSUM 11      /* outer UDP checksum does not verify */
#define TD_P_ICMP 12          /* ICMPv6 (the trust procedure's echo test, errors) */
#define TD_P_HOP_LIMIT 13     /* hop limit <= 1: the kernel answers Time Exceeded */
#define TD_P_TOO_BIG 14       /* over the Teredo MTU or the egress MTU */
#define TD_P_ADDRESS 15       /* Teredo to Teredo, non-global destination, link-scope source */
#define TD_P_FIB 16           /* no route or neighbour (bpf_fib_lookup) */
#define TD_P_EGRESS 17        /* the egress interface is not one of the fast path's */
#define TD_P_DISABLED 18      /* no configuration written */
#define TD_P_OTHER_HOST 19    /* Ethernet destination not the interface's (or multicast) */
#define TD_COUNTERS 20

#endif
