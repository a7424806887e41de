/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The lwAFTR fast path (RFC 7596; DSTM's tunnel end-point is the lwAFTR
 * with whole-address leases) in XDP: xdp_softwire, attached to the
 * lwAFTR's IPv6 (softwire) and IPv4 interfaces; one program, the two
 * sides told apart by the EtherType.
 *
 * The slow path (crates/softwire: the lwAFTR engine over a TUN device)
 * stays the truth: it mirrors its binding table and DSTM leases into
 * sw_b4 / sw_v4 / sw_addr on load, reload and every lease grant or
 * expiry. Here, for a bound subscriber only, the fast path does what the
 * engine and the kernel's forwarding around the TUN device do together:
 *
 *   softwire -> IPv4: IPv4-in-IPv6 to the softwire address (no extension
 *   header), from a bound lwB4, whose inner TCP/UDP source port or ICMP
 *   echo identifier is in its port set (RFC 7596 §6.1) and whose
 *   destination no lwB4 holds: decapsulated, the inner TTL decremented
 *   as ip_forward() does it (the kernel forwarding the engine's output
 *   from the TUN device), forwarded by bpf_fib_lookup.
 *
 *   IPv4 -> softwire: TCP/UDP or ICMP echo to (address, port) an lwB4
 *   holds: TTL decremented (the kernel forwarding it into the TUN
 *   device), encapsulated as the engine does (RFC 2473: Traffic Class
 *   from the TOS when configured, flow label 0, the configured hop limit
 *   less the one the kernel takes forwarding it out of the TUN device,
 *   the Tunnel Encapsulation Limit option when configured), forwarded.
 *
 * Anything else passes (XDP_PASS) unchanged, counted by reason: ICMP
 * errors, fragments, options, packets over the tunnel MTU, TTL 1, unknown
 * bindings and port-set violations (the slow path counts, and answers
 * them when configured to), hairpinning. The kernel and the slow path
 * then do exactly what they do without XDP.
 *
 * The DS-Lite AFTR (RFC 6333, SW_F_DSLITE; crates/softwire's Aftr) uses
 * the same program with its NAT44 instead of bindings: the slow path
 * mirrors each mapping it would translate without a state change (UDP
 * and ICMP echo when created, TCP while ESTABLISHED) into ds_out / ds_in
 * synchronously, before it writes the packet that made it so, and its
 * pool4 prefixes into ds_pool. A softwire packet whose (B4, inner
 * protocol, source, port) has a session is decapsulated, its source
 * rewritten to the pool address and port (pkt::rewrite's RFC 1624
 * updates) and forwarded; an IPv4 packet to a session's pool address and
 * port is rewritten back and encapsulated to its B4. The NAT filters
 * endpoint-independently (any remote may use a mapping), so an exact
 * session match is all the engine would ask. A TCP mapping is mirrored
 * half-open when the B4's SYN creates it: its outside SYN+ACK is carried
 * and recorded in the entries (DS_F_SYN_ACK) for the slow path, whose
 * state machine reads it as if it had seen that SYN+ACK; from then on the
 * mapping is carried as ESTABLISHED, and through the close (the FIN
 * RCV states). New flows, TCP SYN/FIN/RST,
 * hairpinning (to a pool address) and everything passed above go to the
 * slow path; each forward refreshes the entry's last-seen time, which
 * the slow path reads before it expires a mapping.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "util.h"
#include "softwire.h"
#include "portblock.h"
#include "helpers.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sw_config);
} sw_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u8[16]);
	__type(value, struct sw_binding);
} sw_b4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sw_v4key);
	__type(value, __u8[16]);
} sw_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sw_addr);
} sw_addr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ds_out_key);
	__type(value, struct ds_out_val);
} ds_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ds_in_key);
	__type(value, struct ds_in_val);
} ds_in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ds_pool_key);
	__type(value, __u8);
} ds_pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ds_b4_key);
	__type(value, struct ds_b4_val);
} ds_b4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pb_block);
} ds_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ds_state);
} ds_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} ds_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SW_COUNTERS);
	__type(key, __u32);
	__type(value, struct v6g_count);
} sw_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct v6g_ifmac);
} sw_ifmac SEC(".maps");

/* The interfaces the fast path may send through (the ones it is attached to). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} sw_tx SEC(".maps");

V6G_INLINE void count(__u32 idx, __u64 bytes)
{
	count_add(&sw_counters, idx, 1, bytes);
}

/* bpf_fib_lookup's verdict as 0 or PASS(reason), and the egress check. */
V6G_INLINE __u32 lookup(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	return fib_egress(ctx, fib, &sw_tx, SW_P_TOO_BIG, SW_P_FIB, SW_P_EGRESS);
}

V6G_INLINE __u32 send(struct xdp_md *ctx, __u32 ifindex)
{
	return send_out(ctx, &sw_tx, ifindex);
}

/* As xlat::addr::is_forbidden_v4 (0/8, 127/8, 224/3): a source the
 * kernel's routing refuses (martian) or a destination it does not forward. */
V6G_INLINE int forbidden4(__u32 a_be)
{
	__u32 o = bpf_ntohl(a_be) >> 24;

	return o == 0 || o == 127 || o >= 224;
}

/* The header checks the kernel (ip_rcv) and the engine (Ipv4Packet::new,
 * checksum_ok, pkt::flow) make, and what the fast path leaves to them.
 * `l3len` is what follows the IPv4 header's start in the frame; `exact`:
 * no trailing bytes allowed (the inner packet of a tunnel packet). On
 * success sport and dport hold the ports (host order; the echo identifier
 * twice for ICMP echo). Returns 0 or PASS(reason). */
V6G_INLINE __u32 check4(struct iphdr *ip, void *end, __u32 l3len, int exact, __u16 *sport, __u16 *dport)
{
	__u16 *h = (__u16 *)ip;
	__u8 *l4 = (__u8 *)(ip + 1);
	__u32 tot;
	__u64 hs = 0;

	if ((void *)(ip + 1) > end)
		return PASS(SW_P_MALFORMED);
	if (ip->version != 4 || ip->ihl < 5)
		return PASS(SW_P_MALFORMED);
	if (ip->ihl != 5)
		return PASS(SW_P_OPTIONS);
	tot = bpf_ntohs(ip->tot_len);
	if (tot < 20 || tot > l3len || (exact && tot != l3len))
		return PASS(SW_P_MALFORMED);
#pragma unroll
	for (int i = 0; i < 10; i++)
		hs += h[i];
	if (fold(hs) != 0xffff)
		return PASS(SW_P_CHECKSUM);
	if (ip->frag_off & bpf_htons(0x3fff))
		return PASS(SW_P_FRAGMENT);
	if (ip->ttl <= 1)
		return PASS(SW_P_TTL);
	if (forbidden4(ip->saddr) || forbidden4(ip->daddr) || ip->daddr == 0xffffffff)
		return PASS(SW_P_FIB);
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		if (tot < 20 + (ip->protocol == IPPROTO_TCP ? 20 : 8) || (void *)(l4 + 4) > end)
			return PASS(SW_P_MALFORMED);
		*sport = bpf_ntohs(LD16(l4));
		*dport = bpf_ntohs(LD16(l4 + 2));
		return 0;
	}
	if (ip->protocol == IPPROTO_ICMP) {
		if (tot < 28 || (void *)(l4 + 8) > end)
			return PASS(SW_P_MALFORMED);
		if (l4[0] != 8 && l4[0] != 0)
			return PASS(SW_P_ICMP);
		*sport = *dport = bpf_ntohs(LD16(l4 + 4));
		return 0;
	}
	return PASS(SW_P_PROTOCOL);
}

/* RFC 7597 §5.1, as PsidMap::psid. */
V6G_INLINE __u16 psid_of(__u16 port, __u8 len, __u8 offset)
{
	if (len == 0 || len > 16 || offset > 16 - len)
		return 0;
	return (port >> (16 - offset - len)) & ((1u << len) - 1);
}

/* As PsidMap::allowed: A = 0 is nobody's when there is an A field. */
V6G_INLINE int port_allowed(__u16 port, __u16 psid, __u8 len, __u8 offset)
{
	if (len == 0)
		return 1;
	if (offset != 0 && offset <= 16 && (port >> (16 - offset)) == 0)
		return 0;
	return psid_of(port, len, offset) == psid;
}

/* ip_decrease_ttl(): the kernel's forwarding step, checksum included. */
V6G_INLINE void decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* The route of `ip` as it leaves with source (saddr, sport) (the NAT44's
 * pool address and port: the packet is rewritten only once forwarding is
 * certain, a passed packet stays untouched). */
V6G_INLINE __u32 fib4(struct xdp_md *ctx, struct bpf_fib_lookup *fib, const struct iphdr *ip, __u32 saddr,
		      __u16 sport, __u16 dport)
{
	fib->family = AF_INET;
	fib->tos = ip->tos;
	fib->l4_protocol = ip->protocol;
	fib->sport = bpf_htons(sport);
	fib->dport = bpf_htons(dport);
	fib->tot_len = bpf_ntohs(ip->tot_len);
	fib->ifindex = ctx->ingress_ifindex;
	fib->ipv4_src = saddr;
	fib->ipv4_dst = ip->daddr;
	return lookup(ctx, fib);
}

/* True when `a` is in the DS-Lite pool (Nat44::is_external). */
V6G_INLINE int in_pool(__u32 a)
{
	struct ds_pool_key k = { .prefixlen = 32, .addr = a };

	return bpf_map_lookup_elem(&ds_pool, &k) != 0;
}

/* The TCP flags of `ip` (0 when not TCP; FIN|SYN|RST when the header is
 * cut short, which check4 rules out: passed as control). */
V6G_INLINE __u8 tcp_flags(const struct iphdr *ip, void *end)
{
	const __u8 *l4 = (const __u8 *)(ip + 1);

	if (ip->protocol != IPPROTO_TCP)
		return 0;
	if ((void *)(l4 + 14) > end)
		return 0x07;
	return l4[13];
}

#define DS_CARRY_SYN_ACK 1
#define DS_CARRY_FIN 2

/* DS-Lite: may a packet with TCP flags `f` of a session whose entry has
 * `flags` be carried? 0, DS_CARRY_SYN_ACK (yes: the outside SYN+ACK of a
 * half-open mapping, `in`: from the IPv4 side), DS_CARRY_FIN (yes, with a
 * ds_event: a FIN without SYN or RST of a mapping that is not half-open,
 * when `fins`: the slow path drains the ring), or PASS(reason). SYN, RST
 * and the other FINs are the slow path's (its state machine is the
 * truth), and so is every other packet of a half-open mapping: the engine
 * translates those without a state change or lifetime refresh, which
 * last_seen would not repeat. */
V6G_INLINE __u32 ds_carry(__u32 flags, __u8 f, int in, int fins)
{
	int half = (flags & (DS_F_HALF_OPEN | DS_F_SYN_ACK)) == DS_F_HALF_OPEN;

	if (half && in && (f & 0x17) == 0x12)
		return DS_CARRY_SYN_ACK;
	if (fins && !half && (f & 0x07) == 0x01)
		return DS_CARRY_FIN;
	if (f & 0x07)
		return PASS(SW_P_TCP_CONTROL);
	if (half)
		return PASS(SW_P_HALF_OPEN);
	return 0;
}

/* The NAT44 rewrite as pkt::rewrite (crates/softwire) does it: the source
 * (dst = 0) or destination address and port (ICMP echo: the identifier;
 * both network order) of an unfragmented packet without options, with
 * RFC 1624 updates of the header and transport checksums (a zero UDP
 * checksum stays zero). The sums are of raw network-order words: one's-
 * complement arithmetic commutes with the byte swap. Returns 0, or -1
 * when the transport header is cut short (check4 rules that out). */
V6G_INLINE int nat_rewrite(struct iphdr *ip, void *end, int dst, __u32 addr, __u16 port)
{
	__u8 *l4 = (__u8 *)(ip + 1);
	__u32 oa = dst ? ip->daddr : ip->saddr;
	__u64 old = (oa & 0xffff) + (oa >> 16), new = (addr & 0xffff) + (addr >> 16);
	__u16 *pp, op;

	if (dst)
		ip->daddr = addr;
	else
		ip->saddr = addr;
	ip->check = csum_update(ip->check, old, new);
	if (ip->protocol == IPPROTO_ICMP) {
		if ((void *)(l4 + 8) > end)
			return -1;
		pp = (__u16 *)(l4 + 4);
		op = *pp;
		*pp = port;
		ST16(l4 + 2, csum_update(LD16(l4 + 2), op, port));
		return 0;
	}
	if (ip->protocol == IPPROTO_TCP) {
		if ((void *)(l4 + 20) > end)
			return -1;
		pp = (__u16 *)(l4 + (dst ? 2 : 0));
		old += *pp;
		new += port;
		*pp = port;
		ST16(l4 + 16, csum_update(LD16(l4 + 16), old, new));
		return 0;
	}
	if ((void *)(l4 + 8) > end)
		return -1;
	pp = (__u16 *)(l4 + (dst ? 2 : 0));
	old += *pp;
	new += port;
	*pp = port;
	if (LD16(l4 + 6))
		ST16(l4 + 6, csum_update_udp(LD16(l4 + 6), old, new));
	return 0;
}

/* DS-Lite, softwire side: the session of the B4 at `src6` sending `ip`
 * (sport: its source port or echo identifier), or PASS(reason) in *rc. */
V6G_INLINE struct ds_out_val *ds_session_out(const __u8 *src6, const struct iphdr *ip, void *end, __u16 sport,
					       int fins, __u32 *rc)
{
	struct ds_out_key k __attribute__((aligned(8))) = {};
	struct ds_out_val *v;

	if (in_pool(ip->daddr)) {
		*rc = PASS(SW_P_HAIRPIN);
		return 0;
	}
	ST32(k.b4, LD32(src6));
	ST32(k.b4 + 4, LD32(src6 + 4));
	ST32(k.b4 + 8, LD32(src6 + 8));
	ST32(k.b4 + 12, LD32(src6 + 12));
	k.addr = ip->saddr;
	k.port = bpf_htons(sport);
	k.proto = ip->protocol;
	v = bpf_map_lookup_elem(&ds_out, &k);
	if (!v) {
		*rc = PASS(SW_P_NO_SESSION);
		return 0;
	}
	*rc = ds_carry(v->flags, tcp_flags(ip, end), 0, fins);
	return (*rc & V6G_PASS_BIT) ? 0 : v;
}


/* A port from block `slot` (a ds_b4 slot number, index + 1) of a B4, or
 * -1; *b the block. A subprogram: pb_take is long once unrolled. */
static __noinline int ds_take(__u32 slot, __u32 hint, struct pb_block **b)
{
	__u32 idx = slot - 1;

	*b = bpf_map_lookup_elem(&ds_blocks, &idx);
	if (!*b)
		return -1;
	return pb_take(*b, hint);
}

/* DS-Lite: create the mapping of a B4's TCP SYN (src6, ip, sport; dport
 * for the route) that has none, as the slow path's Nat44::outbound would
 * (V6 INIT, half-open), with a port of one of the B4's blocks: routed
 * first (the packet must be forwarded here, or nothing is created), then
 * ds_out and ds_in inserted with BPF_NOEXIST, then the event. Returns the
 * ds_out entry, or 0 with PASS(reason) in *rc (nothing created). */
V6G_INLINE struct ds_out_val *ds_create(struct xdp_md *ctx, struct bpf_fib_lookup *fib, const __u8 *src6,
					  const struct iphdr *ip, __u16 sport, __u16 dport, __u32 *rc)
{
	struct ds_out_key ok __attribute__((aligned(8))) = {};
	struct ds_b4_key bk __attribute__((aligned(8))) = {};
	struct ds_in_key ik __attribute__((aligned(8))) = {};
	struct ds_out_val ov = {};
	struct ds_in_val iv = {};
	struct ds_event ev = {};
	struct pb_block *b = 0;
	struct ds_state *st;
	struct ds_b4_val *bv;
	__u32 zero = 0, slot = 0, hint = bpf_get_prandom_u32();
	__u64 now;
	int idx = -1;

	ST32(bk.b4, LD32(src6));
	ST32(bk.b4 + 4, LD32(src6 + 4));
	ST32(bk.b4 + 8, LD32(src6 + 8));
	ST32(bk.b4 + 12, LD32(src6 + 12));
	bk.proto = IPPROTO_TCP;
	bv = bpf_map_lookup_elem(&ds_b4, &bk);
	if (!bv) {
		*rc = PASS(SW_P_NO_BLOCK);
		return 0;
	}
	st = bpf_map_lookup_elem(&ds_state, &zero);
	if (!st || st->engine_len + (__s64)(st->created - st->drained) >= st->limit) {
		*rc = PASS(SW_P_TABLE_FULL);
		return 0;
	}
	if (bpf_ringbuf_query(&ds_events, BPF_RB_AVAIL_DATA) + 2 * sizeof(ev) + 16 >
	    bpf_ringbuf_query(&ds_events, BPF_RB_RING_SIZE)) {
		*rc = PASS(SW_P_RING_FULL);
		return 0;
	}
#pragma unroll
	for (int i = 0; i < DS_BLOCKS; i++) {
		slot = bv->slot[i];
		if (!slot)
			break;
		idx = ds_take(slot, hint, &b);
		if (idx >= 0)
			break;
	}
	if (idx < 0 || !b) {
		*rc = PASS(SW_P_BLOCK_FULL);
		return 0;
	}
	ov.addr = b->addr;
	ov.port = bpf_htons(b->base + idx);
	*rc = fib4(ctx, fib, ip, ov.addr, b->base + idx, dport);
	if (*rc)
		goto give;
	now = bpf_ktime_get_coarse_ns();
	__builtin_memcpy(ok.b4, bk.b4, 16);
	ok.addr = ip->saddr;
	ok.port = bpf_htons(sport);
	ok.proto = IPPROTO_TCP;
	ov.flags = DS_F_HALF_OPEN | DS_F_XDP;
	ov.last_seen_ns = now;
	if (bpf_map_update_elem(&ds_out, &ok, &ov, BPF_NOEXIST)) {
		/* another CPU created it first (or the map is full): the slow path */
		*rc = PASS(SW_P_RACE);
		goto give;
	}
	ik.addr = ov.addr;
	ik.port = ov.port;
	ik.proto = IPPROTO_TCP;
	__builtin_memcpy(iv.b4, bk.b4, 16);
	iv.addr = ok.addr;
	iv.port = ok.port;
	iv.flags = ov.flags;
	iv.last_seen_ns = now;
	if (bpf_map_update_elem(&ds_in, &ik, &iv, BPF_NOEXIST)) {
		*rc = PASS(SW_P_RACE);
		goto unout;
	}
	__builtin_memcpy(ev.b4, bk.b4, 16);
	ev.addr = ok.addr;
	ev.port = ok.port;
	ev.out_addr = ov.addr;
	ev.out_port = ov.port;
	ev.proto = IPPROTO_TCP;
	ev.slot = slot - 1;
	ev.ns = now;
	__sync_fetch_and_add(&st->created, 1);
	if (bpf_ringbuf_output(&ds_events, &ev, sizeof(ev), 0)) {
		__sync_fetch_and_add(&st->created, -1);
		*rc = PASS(SW_P_RING_FULL);
		bpf_map_delete_elem(&ds_in, &ik);
		goto unout;
	}
	count(SW_C_CREATED, 0);
	return bpf_map_lookup_elem(&ds_out, &ok);
unout:
	bpf_map_delete_elem(&ds_out, &ok);
give:
	pb_give(b, idx);
	return 0;
}

/* DS-Lite: a FIN of the mapping inside (b4, addr, port) <-> outside
 * (out_addr, out_port) is about to be forwarded (routed; not yet
 * rewritten): tell the slow path (a DS_EV_FIN ds_event, no wake-up: it
 * drains the ring before every packet and at each loop turn). Returns 0,
 * or PASS(SW_P_RING_FULL) (the packet then passes untouched: the slow
 * path sees that FIN itself). */
V6G_INLINE __u32 ds_fin_event(const __u8 *b4, __u32 addr, __u16 port, __u32 out_addr, __u16 out_port, int from_v4,
			      __u8 f)
{
	struct ds_event ev = {};

	ST32(ev.b4, LD32(b4));
	ST32(ev.b4 + 4, LD32(b4 + 4));
	ST32(ev.b4 + 8, LD32(b4 + 8));
	ST32(ev.b4 + 12, LD32(b4 + 12));
	ev.addr = addr;
	ev.port = port;
	ev.out_addr = out_addr;
	ev.out_port = out_port;
	ev.proto = IPPROTO_TCP;
	ev.kind = DS_EV_FIN;
	ev.from_v4 = from_v4;
	ev.tcp_flags = f;
	ev.ns = bpf_ktime_get_coarse_ns();
	if (bpf_ringbuf_output(&ds_events, &ev, sizeof(ev), BPF_RB_NO_WAKEUP))
		return PASS(SW_P_RING_FULL);
	return 0;
}

/* DS-Lite: after ds_fin_event, the FIN is recorded in both entries of
 * the mapping (`o` / `i`: the one the packet found; the other looked up). */
V6G_INLINE void ds_fin_out(struct ds_out_val *o, __u8 proto, __u32 flag)
{
	struct ds_in_key k __attribute__((aligned(8))) = {};
	struct ds_in_val *i;

	__sync_fetch_and_or(&o->flags, flag);
	k.addr = o->addr;
	k.port = o->port;
	k.proto = proto;
	i = bpf_map_lookup_elem(&ds_in, &k);
	if (i)
		__sync_fetch_and_or(&i->flags, flag);
	count(SW_C_FIN, 0);
}

/* The other entry of `v` (ds_out, keyed by its B4 and inside). */
V6G_INLINE struct ds_out_val *ds_out_of(const struct ds_in_val *v, __u8 proto)
{
	struct ds_out_key k __attribute__((aligned(8))) = {};

	ST32(k.b4, LD32(v->b4));
	ST32(k.b4 + 4, LD32(v->b4 + 4));
	ST32(k.b4 + 8, LD32(v->b4 + 8));
	ST32(k.b4 + 12, LD32(v->b4 + 12));
	k.addr = v->addr;
	k.port = v->port;
	k.proto = proto;
	return bpf_map_lookup_elem(&ds_out, &k);
}

/* The softwire side: IPv4-in-IPv6 from a bound lwB4 or (DS-Lite) a B4
 * with a NAT44 session. */
static __noinline __u32 decap(struct xdp_md *ctx, const struct sw_config *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	const struct sw_binding *b;
	struct ds_out_val *ds = 0;
	__u8 key[16] __attribute__((aligned(4)));
	__u8 *o = data + ETH_HLEN;
	struct iphdr *ip;
	__u16 sport = 0, dport = 0, isport;
	__u32 plen, rc, daddr, saddr, fin = 0;

	if ((void *)(o + 40) > end)
		return PASS(SW_P_MALFORMED);
	if ((o[0] >> 4) != 6)
		return PASS(SW_P_MALFORMED);
	if (LD32(o + 24) != LD32(c->local) || LD32(o + 28) != LD32(c->local + 4) ||
	    LD32(o + 32) != LD32(c->local + 8) || LD32(o + 36) != LD32(c->local + 12))
		return PASS(SW_P_NOT_OURS);
	plen = bpf_ntohs(LD16(o + 4));
	if (40 + plen != (__u32)(end - data) - ETH_HLEN)
		return PASS(SW_P_MALFORMED);
	if (o[6] == 44)
		return PASS(SW_P_FRAGMENT);
	if (o[6] == 0 || o[6] == 43 || o[6] == 60)
		return PASS(SW_P_OPTIONS);
	if (o[6] == 58)
		return PASS(SW_P_ICMP);
	if (o[6] != IPPROTO_IPIP)
		return PASS(SW_P_NOT_OURS);
	/* The kernel forwards the tunnel packet into the TUN device first. */
	if (o[7] <= 1)
		return PASS(SW_P_TTL);
	ip = (struct iphdr *)(o + 40);
	rc = check4(ip, end, plen, 1, &sport, &dport);
	if (rc)
		return rc;
	if (c->flags & SW_F_DSLITE) {
		ds = ds_session_out(o + 8, ip, end, sport, !!(c->flags & SW_F_DS_CREATE), &rc);
		if (!ds && rc == PASS(SW_P_NO_SESSION) && (c->flags & SW_F_DS_CREATE) &&
		    ip->protocol == IPPROTO_TCP && (tcp_flags(ip, end) & 0x17) == 0x02) {
			/* A plain SYN (the one Nat44::outbound creates a TCP mapping for). */
			ds = ds_create(ctx, &fib, o + 8, ip, sport, dport, &rc);
			if (!ds)
				return rc;
			goto routed;
		}
		if (!ds)
			return rc;
		fin = rc == DS_CARRY_FIN;
		isport = sport;
		saddr = ds->addr;
		sport = bpf_ntohs(ds->port);
		rc = fib4(ctx, &fib, ip, saddr, sport, dport);
		if (rc)
			return rc;
		if (fin) {
			rc = ds_fin_event(o + 8, ip->saddr, bpf_htons(isport), ds->addr, ds->port, 0, tcp_flags(ip, end));
			if (rc)
				return rc;
		}
		goto routed;
	}
	ST32(key, LD32(o + 8));
	ST32(key + 4, LD32(o + 12));
	ST32(key + 8, LD32(o + 16));
	ST32(key + 12, LD32(o + 20));
	b = bpf_map_lookup_elem(&sw_b4, key);
	if (!b)
		return PASS(SW_P_NO_BINDING);
	if (b->ipv4 != ip->saddr || !port_allowed(sport, b->psid, b->psid_len, b->offset))
		return PASS(SW_P_POLICY);
	daddr = ip->daddr;
	if (bpf_map_lookup_elem(&sw_addr, &daddr))
		return PASS(SW_P_HAIRPIN);
	saddr = ip->saddr;
	rc = fib4(ctx, &fib, ip, saddr, sport, dport);
	if (rc)
		return rc;
routed:
	if (bpf_xdp_adjust_head(ctx, 40))
		return PASS(SW_P_MALFORMED); /* the head did not move */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ip = data + ETH_HLEN;
	if ((void *)(ip + 1) > end)
		return XDP_DROP; /* cannot happen: the inner header was there */
	if (ds) {
		/* The engine translates, then the kernel forwards its output. */
		if (nat_rewrite(ip, end, 0, ds->addr, ds->port))
			return XDP_DROP; /* cannot happen: check4 saw the header */
		if (fin)
			ds_fin_out(ds, IPPROTO_TCP, DS_F_FIN_V6);
		ds->last_seen_ns = bpf_ktime_get_coarse_ns();
	}
	decrease_ttl(ip);
	write_eth(data, &fib, ETH_P_IP);
	count(SW_C_DECAP, plen);
	return send(ctx, fib.ifindex);
}

/* DS-Lite, IPv4 side: the session of the pool transport address `ip` is
 * sent to, or PASS(reason) in *rc (DS_CARRY_SYN_ACK: the outside SYN+ACK
 * of a half-open mapping; DS_CARRY_FIN: a FIN to carry with an event). */
V6G_INLINE struct ds_in_val *ds_session_in(struct iphdr *ip, void *end, __u32 l3len, int fins, __u32 *rc)
{
	struct ds_in_key k __attribute__((aligned(8))) = {};
	struct ds_in_val *v;
	__u16 sport = 0, dport = 0;

	*rc = check4(ip, end, l3len, 0, &sport, &dport);
	if (*rc)
		return 0;
	k.addr = ip->daddr;
	k.port = bpf_htons(dport);
	k.proto = ip->protocol;
	v = bpf_map_lookup_elem(&ds_in, &k);
	if (!v) {
		*rc = in_pool(ip->daddr) ? PASS(SW_P_NO_SESSION) : PASS(SW_P_NOT_OURS);
		return 0;
	}
	*rc = ds_carry(v->flags, tcp_flags(ip, end), 1, fins);
	return (*rc & V6G_PASS_BIT) ? 0 : v;
}

/* The outside SYN+ACK of `v`'s half-open mapping is on its way to the B4:
 * both entries record it (the slow path moves the mapping to ESTABLISHED
 * when it reads it; the B4's ACK finds ds_out carried). */
V6G_INLINE void ds_syn_ack(struct ds_in_val *v, __u8 proto)
{
	struct ds_out_val *o;

	__sync_fetch_and_or(&v->flags, DS_F_SYN_ACK);
	o = ds_out_of(v, proto);
	if (o)
		__sync_fetch_and_or(&o->flags, DS_F_SYN_ACK);
	count(SW_C_SYN_ACK, 0);
}

/* A FIN from the IPv4 side of `v`'s mapping is on its way to the B4
 * (after ds_fin_event): both entries record it. */
V6G_INLINE void ds_fin_in(struct ds_in_val *v, __u8 proto)
{
	struct ds_out_val *o;

	__sync_fetch_and_or(&v->flags, DS_F_FIN_V4);
	o = ds_out_of(v, proto);
	if (o)
		__sync_fetch_and_or(&o->flags, DS_F_FIN_V4);
	count(SW_C_FIN, 0);
}

/* The IPv4 side: to an address and port an lwB4 holds, or (DS-Lite) to a
 * NAT44 session's pool transport address. */
static __noinline __u32 encap(struct xdp_md *ctx, const struct sw_config *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct sw_v4key k = {};
	const struct sw_addr *sa;
	struct ds_in_val *ds = 0;
	struct iphdr *ip = data + ETH_HLEN;
	__u16 sport = 0, dport = 0, psid;
	__u32 l3len = (__u32)(end - data) - ETH_HLEN, tot, hlen, total, daddr, rc, w0, carry = 0;
	__u8 tos, *b4, *o;

	if ((void *)(ip + 1) > end)
		return PASS(SW_P_MALFORMED);
	if (c->flags & SW_F_DSLITE) {
		ds = ds_session_in(ip, end, l3len, !!(c->flags & SW_F_DS_CREATE), &rc);
		if (!ds)
			return rc;
		carry = rc;
		b4 = ds->b4;
		goto tunnel;
	}
	daddr = ip->daddr;
	sa = bpf_map_lookup_elem(&sw_addr, &daddr);
	if (!sa)
		return PASS(SW_P_NOT_OURS);
	rc = check4(ip, end, l3len, 0, &sport, &dport);
	if (rc)
		return rc;
	psid = psid_of(dport, sa->psid_len, sa->offset);
	if (!port_allowed(dport, psid, sa->psid_len, sa->offset))
		return PASS(SW_P_NO_BINDING);
	k.ipv4 = daddr;
	k.psid = psid;
	b4 = bpf_map_lookup_elem(&sw_v4, &k);
	if (!b4)
		return PASS(SW_P_NO_BINDING);
tunnel:
	tot = bpf_ntohs(ip->tot_len);
	hlen = (c->flags & SW_F_ENCAP_LIMIT) ? 48 : 40;
	total = tot + hlen;
	if (total > c->mtu)
		return PASS(SW_P_TOO_BIG);
	/* The kernel forwards the engine's tunnel packet out of the TUN device. */
	if (c->hop_limit <= 1)
		return PASS(SW_P_TTL);
	tos = (c->flags & SW_F_COPY_TOS) ? ip->tos : 0;
	w0 = bpf_htonl((6u << 28) | ((__u32)tos << 20));
	fib.family = AF_INET6;
	fib.l4_protocol = hlen == 48 ? 60 : IPPROTO_IPIP;
	fib.tot_len = total;
	fib.ifindex = ctx->ingress_ifindex;
	fib.flowinfo = w0 & bpf_htonl(0x0fffffff);
	ST32(fib.ipv6_src, LD32(c->local));
	ST32((__u8 *)fib.ipv6_src + 4, LD32(c->local + 4));
	ST32((__u8 *)fib.ipv6_src + 8, LD32(c->local + 8));
	ST32((__u8 *)fib.ipv6_src + 12, LD32(c->local + 12));
	ST32(fib.ipv6_dst, LD32(b4));
	ST32((__u8 *)fib.ipv6_dst + 4, LD32(b4 + 4));
	ST32((__u8 *)fib.ipv6_dst + 8, LD32(b4 + 8));
	ST32((__u8 *)fib.ipv6_dst + 12, LD32(b4 + 12));
	rc = lookup(ctx, &fib);
	if (rc)
		return rc;
	if (carry == DS_CARRY_FIN) {
		__u8 *l4 = (__u8 *)(ip + 1);

		if ((void *)(l4 + 14) > end)
			return PASS(SW_P_MALFORMED); /* cannot happen: check4 saw the header */
		rc = ds_fin_event(ds->b4, ds->addr, ds->port, ip->daddr, LD16(l4 + 2), 1, l4[13]);
		if (rc)
			return rc;
	}
	/* Ethernet padding after a short packet: the kernel trims it. */
	if (l3len > tot && bpf_xdp_adjust_tail(ctx, -(int)(l3len - tot)))
		return PASS(SW_P_MALFORMED);
	if (bpf_xdp_adjust_head(ctx, -(int)hlen))
		return PASS(SW_P_MALFORMED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	o = data + ETH_HLEN;
	if ((void *)(o + 48 + sizeof(struct iphdr)) > end)
		return XDP_DROP; /* cannot happen: the packet was longer */
	if (hlen == 40)
		ip = (struct iphdr *)(o + 40);
	else
		ip = (struct iphdr *)(o + 48);
	if ((void *)(ip + 1) > end)
		return XDP_DROP;
	/* The kernel forwards it into the TUN device, then the engine translates. */
	decrease_ttl(ip);
	if (ds) {
		if (nat_rewrite(ip, end, 1, ds->addr, ds->port))
			return XDP_DROP; /* cannot happen: check4 saw the header */
		if (carry == DS_CARRY_SYN_ACK)
			ds_syn_ack(ds, ip->protocol);
		else if (carry == DS_CARRY_FIN)
			ds_fin_in(ds, ip->protocol);
		ds->last_seen_ns = bpf_ktime_get_coarse_ns();
	}
	write_eth(data, &fib, ETH_P_IPV6);
	ST32(o, w0);
	ST16(o + 4, bpf_htons(total - 40));
	o[6] = hlen == 48 ? 60 : IPPROTO_IPIP;
	o[7] = c->hop_limit - 1;
	/* From the config and the map value: bpf_fib_lookup wrote the next
	 * hop's address over fib.ipv6_dst. */
	ST32(o + 8, LD32(c->local));
	ST32(o + 12, LD32(c->local + 4));
	ST32(o + 16, LD32(c->local + 8));
	ST32(o + 20, LD32(c->local + 12));
	ST32(o + 24, LD32(b4));
	ST32(o + 28, LD32(b4 + 4));
	ST32(o + 32, LD32(b4 + 8));
	ST32(o + 36, LD32(b4 + 12));
	if (hlen == 48) {
		/* RFC 2473 §5.1: the limit option and a PadN, as the engine writes them. */
		o[40] = IPPROTO_IPIP;
		o[41] = 0;
		o[42] = 4;
		o[43] = 1;
		o[44] = c->encap_limit;
		o[45] = 1;
		o[46] = 1;
		o[47] = 0;
	}
	count(SW_C_ENCAP, tot);
	return send(ctx, fib.ifindex);
}

SEC("xdp")
int xdp_softwire(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct sw_config *c;
	__u32 zero = 0, rc, len = end - data;

	c = bpf_map_lookup_elem(&sw_config, &zero);
	if (!c || !(c->flags & SW_F_ON)) {
		rc = PASS(SW_P_DISABLED);
	} else if ((void *)(eth + 1) > end) {
		rc = PASS(SW_P_NOT_IP);
	} else if (!for_us(&sw_ifmac, ctx, eth)) {
		rc = PASS(SW_P_OTHER_HOST);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		rc = decap(ctx, c);
	} else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		rc = encap(ctx, c);
	} else {
		rc = PASS(SW_P_NOT_IP);
	}
	if (rc & V6G_PASS_BIT) {
		count(rc & ~V6G_PASS_BIT, len);
		return XDP_PASS;
	}
	return rc;
}

char LICENSE[] SEC("license") = "GPL";
