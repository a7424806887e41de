/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The kernel datapath of the B4s (the DS-Lite B4, RFC 6333 §5, the DSTM
 * host once it holds a lease, and the host-integrated lwB4's own traffic,
 * RFC 7596): the map contract shared by bpf/b4.bpf.c and
 * crates/xdp/src/b4.rs. Sizes are asserted on both sides.
 */
#ifndef V6GATE_B4_H
#define V6GATE_B4_H

#include <linux/types.h>

/* The one entry of b4_config. */
struct b4_config {
	__u8 local[16];	  /* the B4's softwire address, as on the wire */
	__u8 aftr[16];	  /* the AFTR (DSTM: the lease's TEP), as on the wire */
	__u32 flags;	  /* B4_F_* */
	__u16 mtu;	  /* largest tunnel packet (the engine's mtu, >= 1280) */
	__u8 hop_limit;	  /* the engine's tunnel hop limit */
	__u8 encap_limit; /* with B4_F_ENCAP_LIMIT: the option's value */
	__u32 l2len;	  /* bytes before the IPv4 header at the tc hook: 0 on the TUN
			   * device; 14 under BPF_PROG_TEST_RUN (an Ethernet frame) */
	__u32 tun_ifindex; /* the TUN device: the FIB lookup is made as from it */
	__u16 mss_max;	   /* TCP SYNs: the largest MSS option let through both ways
			    * (the tunnel MTU less the headers); 0: no clamping */
	__u16 pad;
	/* With B4_F_HOST (the lwB4, `[b4] host-ports`): only the host's own
	 * packets take the kernel path, the NAPT's go to the engine. */
	__u32 host_addr;   /* the binding's IPv4 address, as on the wire */
	__u16 host_first;  /* the host's ports: those of the port set */
	__u16 host_last;   /* within [host_first, host_last] */
	__u16 psid;	   /* the binding's PSID (RFC 7597 §5.1) */
	__u8 psid_offset;  /* a */
	__u8 psid_len;	   /* k (0: the whole address) */
};
_Static_assert(sizeof(struct b4_config) == 64, "struct b4_config differs from b4.rs");

#define B4_F_ON 1	   /* an AFTR to talk to (DSTM: a lease held) */
#define B4_F_COPY_TOS 2	   /* Traffic Class = inner TOS (RFC 2473 §6.4) */
#define B4_F_ENCAP_LIMIT 4 /* a Tunnel Encapsulation Limit option (RFC 2473 §4.1.1) */
#define B4_F_HOST 8	   /* the lwB4: the host's own ports only (the host_* fields) */

struct b4_mac {
	__u8 addr[6];
	__u16 pad;
};
_Static_assert(sizeof(struct b4_mac) == 8, "struct b4_mac differs from b4.rs");

struct b4_count {
	__u64 packets;
	__u64 bytes;
};

/* b4_counters (per CPU): what the kernel path did, and why it passed a
 * packet to the TUN engine (the slow path). */
#define B4_C_ENCAP 0	     /* IPv4 -> softwire: encapsulated, redirected to the uplink */
#define B4_C_DECAP 1	     /* softwire -> IPv4: decapsulated, passed to the stack */
#define B4_P_NOT_IP 2	     /* tc: not IPv4 (the engine's IPv6); XDP: not IPv6 */
#define B4_P_NOT_OURS 3	     /* XDP: not to the B4 address, or not IPv4-in-IPv6 */
#define B4_P_MALFORMED 4     /* truncated, lengths disagree, trailing bytes */
#define B4_P_OPTIONS 5	     /* IPv4 options, IPv6 extension headers */
#define B4_P_FRAGMENT 6	     /* an outer (IPv6) fragment: the engine reassembles */
#define B4_P_ICMP 7	     /* ICMPv6 to the B4 address (errors are relayed, RFC 2473 §8) */
#define B4_P_TTL 8	     /* hop limit <= 1: the kernel answers Time Exceeded */
#define B4_P_TOO_BIG 9	     /* over the tunnel MTU (the engine fragments) or the egress MTU */
#define B4_P_GSO 10	     /* a GSO packet: the engine's TUN read segments it */
#define B4_P_CHECKSUM 11     /* the IPv4 header checksum does not verify */
#define B4_P_FIB 12	     /* no route or neighbour towards the AFTR */
#define B4_P_EGRESS 13	     /* the route leaves through an interface not attached */
#define B4_P_DISABLED 14     /* no AFTR (DSTM: no lease yet) */
#define B4_P_OTHER_HOST 15   /* Ethernet destination not the interface's (or multicast) */
#define B4_P_UNKNOWN_AFTR 16 /* a softwire packet from another address than the AFTR */
#define B4_C_MSS_CLAMPED 17  /* a TCP SYN's MSS option lowered to mss_max (also counted
			      * encap or decap) */
#define B4_P_TCP_OPTIONS 18  /* a TCP SYN whose options do not parse: the engine leaves
			      * it untouched and counts it */
#define B4_P_NAPT 19	     /* lwB4: not the host's address and port (the NAPT's) */
#define B4_P_HOST_OTHER 20   /* lwB4: the host's address, but an inner fragment, an
			      * ICMP error, another protocol or a truncated header */
#define B4_COUNTERS 21

#endif
