/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The lwAFTR / DSTM tunnel end-point fast path (RFC 7596, RFC 2473): the
 * map contract shared by bpf/softwire.bpf.c and crates/xdp/src/softwire.rs.
 * A separate object with its own maps (as the Teredo relay's), loaded by
 * `v6gate softwire` / the daemon's [lw4o6] when its `xdp` key asks for it.
 * Every size is asserted here and in softwire.rs (`const` asserts).
 */
#ifndef V6GATE_SOFTWIRE_H
#define V6GATE_SOFTWIRE_H

#include <linux/types.h>

/* The one entry of sw_config. */
struct sw_config {
	__u8 local[16];	 /* the lwAFTR's softwire address, as on the wire */
	__u32 flags;	 /* SW_F_* */
	__u16 mtu;	 /* largest tunnel packet (the slow path's mtu, >= 1280) */
	__u8 hop_limit;	 /* the slow path's tunnel hop limit */
	__u8 encap_limit; /* with SW_F_ENCAP_LIMIT: the option's value */
};
_Static_assert(sizeof(struct sw_config) == 24, "struct sw_config differs from softwire.rs");

#define SW_F_ON 1
#define SW_F_COPY_TOS 2	    /* Traffic Class = inner TOS (RFC 2473 §6.4) */
#define SW_F_ENCAP_LIMIT 4  /* a Tunnel Encapsulation Limit option (RFC 2473 §4.1.1) */
#define SW_F_DSLITE 8	    /* the DS-Lite AFTR: NAT44 sessions (ds_*), not bindings */
#define SW_F_DS_CREATE 16   /* DS-Lite: a B4's TCP SYN creates its mapping here (ds_b4) */

/* sw_b4: an lwB4's IPv6 address (16 bytes) -> its binding. */
struct sw_binding {
	__u32 ipv4;	/* network order */
	__u16 psid;	/* host order; 0 for a whole address */
	__u8 psid_len;	/* k; 0: a whole address */
	__u8 offset;	/* a */
};
_Static_assert(sizeof(struct sw_binding) == 8, "struct sw_binding differs from softwire.rs");

/* sw_v4: (IPv4 address, PSID) -> the lwB4's IPv6 address (16 bytes). */
struct sw_v4key {
	__u32 ipv4; /* network order */
	__u16 psid; /* host order */
	__u16 pad;
};
_Static_assert(sizeof(struct sw_v4key) == 8, "struct sw_v4key differs from softwire.rs");

/* sw_addr: every IPv4 address a binding or lease holds -> its port-set
 * parameters (psid_len 0: a whole address). */
struct sw_addr {
	__u8 psid_len;
	__u8 offset;
	__u16 pad;
};
_Static_assert(sizeof(struct sw_addr) == 4, "struct sw_addr differs from softwire.rs");

struct sw_mac {
	__u8 addr[6];
	__u16 pad;
};
_Static_assert(sizeof(struct sw_mac) == 8, "struct sw_mac differs from softwire.rs");

/* The DS-Lite AFTR's NAT44 (RFC 6333 §6.6), mirrored by the slow path per
 * mapping it would translate without a state change (UDP and ICMP echo at
 * creation, TCP from ESTABLISHED through the close, whose FIN and RST
 * pass): two entries, one per direction. A TCP
 * mapping is mirrored when the B4's SYN creates it (RFC 6146 V6 INIT) with
 * DS_F_HALF_OPEN: then only the outside SYN+ACK is carried, which sets
 * DS_F_SYN_ACK in both entries (atomic OR) for the slow path to read: the
 * mapping is ESTABLISHED from then on, and the fast path carries it as such.
 *
 * ds_out: softwire -> IPv4, keyed by the B4 and the inner source. */
struct ds_out_key {
	__u8 b4[16];  /* the B4's IPv6 address, as on the wire */
	__u32 addr;   /* inner source address, network order */
	__u16 port;   /* inner source port / ICMP echo identifier, network order */
	__u8 proto;   /* 6, 17 or 1 */
	__u8 pad;
};
_Static_assert(sizeof(struct ds_out_key) == 24, "struct ds_out_key differs from dslite.rs");

#define DS_F_HALF_OPEN 1 /* slow path: TCP in V6 INIT, only the outside SYN+ACK may pass */
#define DS_F_SYN_ACK 2	 /* fast path: it forwarded that SYN+ACK (the slow path reads it) */
#define DS_F_XDP 4	 /* fast path: it created the mapping (a B4's SYN, ds_event) */
#define DS_F_FIN_V6 8	 /* fast path: it carried a FIN from the B4 (a DS_EV_FIN ds_event) */
#define DS_F_FIN_V4 16	 /* fast path: it carried a FIN from the IPv4 side (a DS_EV_FIN ds_event) */

struct ds_out_val {
	__u32 addr;	    /* pool address, network order */
	__u16 port;	    /* pool port, network order */
	__u16 pad;
	__u32 flags;	    /* DS_F_* */
	__u32 pad2;
	__u64 last_seen_ns; /* bpf_ktime_get_coarse_ns() of the last packet forwarded */
};
_Static_assert(sizeof(struct ds_out_val) == 24, "struct ds_out_val differs from dslite.rs");

/* ds_in: IPv4 -> softwire, keyed by the pool transport address. */
struct ds_in_key {
	__u32 addr;  /* pool address, network order */
	__u16 port;  /* pool port, network order */
	__u8 proto;
	__u8 pad;
};
_Static_assert(sizeof(struct ds_in_key) == 8, "struct ds_in_key differs from dslite.rs");

struct ds_in_val {
	__u8 b4[16];	    /* the B4's IPv6 address */
	__u32 addr;	    /* inner address, network order */
	__u16 port;	    /* inner port, network order */
	__u16 pad;
	__u32 flags;	    /* DS_F_* */
	__u32 pad2;
	__u64 last_seen_ns;
};
_Static_assert(sizeof(struct ds_in_val) == 40, "struct ds_in_val differs from dslite.rs");

/* ds_pool (LPM trie): the pool4 prefixes (hairpinning; the rest of a pool
 * address without a mirrored session is the slow path's). */
struct ds_pool_key {
	__u32 prefixlen;
	__u32 addr; /* network order */
};

/* Mappings created here (SW_F_DS_CREATE): a B4's TCP SYN without a
 * mapping takes a port from one of the B4's port blocks (bpf/portblock.h;
 * the slow path grants the blocks and writes them into ds_blocks, a
 * BPF_F_MMAPABLE array it also maps, and lists a B4's slots in ds_b4),
 * inserts ds_out then ds_in with BPF_NOEXIST (DS_F_HALF_OPEN | DS_F_XDP),
 * and tells the slow path with a ds_event on the ds_events ring buffer,
 * which it drains before it handles any packet.
 *
 * ds_b4: (B4, protocol) -> its blocks' slots in ds_blocks. */
#define DS_BLOCKS 8 /* blocks per B4 and protocol at most */

struct ds_b4_key {
	__u8 b4[16]; /* the B4's IPv6 address, as on the wire */
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct ds_b4_key) == 20, "struct ds_b4_key differs from dslite.rs");

struct ds_b4_val {
	__u32 slot[DS_BLOCKS]; /* slot + 1 in ds_blocks, 0: none (the rest is 0 too) */
};
_Static_assert(sizeof(struct ds_b4_val) == 4 * DS_BLOCKS, "struct ds_b4_val differs from dslite.rs");

/* ds_events: one per mapping created here (DS_EV_CREATED), and (with
 * SW_F_DS_CREATE, whose slow path drains the ring) one per TCP FIN carried
 * here (DS_EV_FIN: a FIN without SYN or RST of a mapping that is not
 * half-open), submitted with BPF_RB_NO_WAKEUP: the slow path drains the
 * ring before every packet it handles and at each loop turn, and steps its
 * state machine as if it had seen that FIN at `ns`. */
#define DS_EV_CREATED 0
#define DS_EV_FIN 1

struct ds_event {
	__u8 b4[16];
	__u32 addr;	 /* inner source address, network order */
	__u32 out_addr;	 /* pool address, network order */
	__u16 port;	 /* inner source port, network order */
	__u16 out_port;	 /* pool port, network order */
	__u8 proto;
	__u8 kind;	 /* DS_EV_* */
	__u8 from_v4;	 /* DS_EV_FIN: 1 from the IPv4 side, 0 from the B4 */
	__u8 tcp_flags;	 /* DS_EV_FIN: the segment's TCP flags */
	__u32 slot;	 /* DS_EV_CREATED: the block the port came from (its ds_blocks index) */
	__u64 ns;	 /* bpf_ktime_get_coarse_ns() at creation / when the FIN was carried */
};
_Static_assert(sizeof(struct ds_event) == 48, "struct ds_event differs from dslite.rs");

/* ds_state (BPF_F_MMAPABLE, one entry): the table limit. The program adds
 * 1 to `created` (atomic) per mapping it creates; the slow path writes
 * `drained` (events it consumed), `engine_len` (mappings in its table,
 * those included) and `limit` (its max-mappings). A mapping is created
 * here only while engine_len + (created - drained) < limit. */
struct ds_state {
	__u64 created;
	__u64 drained;
	__u64 engine_len;
	__u64 limit;
};
_Static_assert(sizeof(struct ds_state) == 32, "struct ds_state differs from dslite.rs");

struct sw_count {
	__u64 packets;
	__u64 bytes;
};

/* sw_counters (per CPU): what the fast path did, and why it passed. */
#define SW_C_DECAP 0	    /* softwire -> IPv4: decapsulated and forwarded */
#define SW_C_ENCAP 1	    /* IPv4 -> softwire: encapsulated and forwarded */
#define SW_P_NOT_IP 2	    /* neither IPv4 nor IPv6 */
#define SW_P_NOT_OURS 3	    /* IPv6 not to the softwire address / not IPv4-in-IPv6 */
#define SW_P_MALFORMED 4    /* truncated, lengths disagree, trailing bytes */
#define SW_P_OPTIONS 5	    /* IPv4 options, IPv6 extension headers */
#define SW_P_FRAGMENT 6	    /* an IPv4 or IPv6 fragment */
#define SW_P_ICMP 7	    /* ICMP other than echo (errors: RFC 7596 §8), ICMPv6 */
#define SW_P_PROTOCOL 8	    /* neither TCP, UDP nor ICMP */
#define SW_P_TTL 9	    /* TTL or hop limit <= 1: the kernel answers Time Exceeded */
#define SW_P_TOO_BIG 10	    /* over the tunnel MTU or the egress MTU */
#define SW_P_NO_BINDING 11  /* unknown lwB4, or no lwB4 holds the address and port */
#define SW_P_POLICY 12	    /* wrong address or port outside the set (RFC 7596 §6.1) */
#define SW_P_HAIRPIN 13	    /* to an address an lwB4 holds (RFC 7596 §6.3) */
#define SW_P_CHECKSUM 14    /* IPv4 header checksum does not verify */
#define SW_P_FIB 15	    /* no route or neighbour */
#define SW_P_EGRESS 16	    /* the egress interface is not one of the fast path's */
#define SW_P_DISABLED 17    /* no configuration written */
#define SW_P_OTHER_HOST 18  /* Ethernet destination not the interface's (or multicast) */
#define SW_P_NO_SESSION 19  /* DS-Lite: no mirrored NAT44 session (new flow, unknown B4, ...) */
#define SW_P_TCP_CONTROL 20 /* DS-Lite: TCP SYN, FIN or RST (the slow path's state machine) */
#define SW_P_HALF_OPEN 21   /* DS-Lite: TCP in V6 INIT, not the outside SYN+ACK */
#define SW_C_SYN_ACK 22	    /* DS-Lite: outside SYN+ACK carried (also counted in SW_C_ENCAP) */
#define SW_C_CREATED 23	    /* DS-Lite: mappings created here (their SYN also counted in SW_C_DECAP) */
#define SW_P_NO_BLOCK 24    /* DS-Lite: a SYN from a B4 without port blocks (the slow path grants them) */
#define SW_P_BLOCK_FULL 25  /* DS-Lite: a SYN whose B4's blocks are all in use */
#define SW_P_TABLE_FULL 26  /* DS-Lite: a SYN while the NAT44 holds max-mappings */
#define SW_P_RING_FULL 27   /* DS-Lite: a SYN or FIN while ds_events has no room (the slow path lags) */
#define SW_P_RACE 28	    /* DS-Lite: a SYN whose mapping another CPU created first */
#define SW_C_FIN 29	    /* DS-Lite: TCP FINs carried (also counted in SW_C_DECAP / SW_C_ENCAP) */
#define SW_COUNTERS 30

#endif
