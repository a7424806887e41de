/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * v6gate XDP fast path: maps, counters, checksums, address helpers and
 * forwarding (bpf_fib_lookup + devmap), shared by the SIIT, NAT64 and
 * TrGW programs.
 *
 * Every function either handles a packet completely (returns XDP_TX or
 * XDP_REDIRECT) or returns PASS(reason) having left the packet exactly as
 * it was; the entry point counts the reason and returns XDP_PASS, so the
 * slow path sees the original packet.
 */
#ifndef V6GATE_COMMON_H
#define V6GATE_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "v6gate.h"
#include "helpers.h"

/* ---- maps (sizes are defaults; the loader sets them from the config) ---- */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_lpm4);
	__type(value, struct v6g_eam);
} eamt4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_lpm6);
	__type(value, struct v6g_eam);
} eamt6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct v6g_flow);
	__type(value, struct v6g_nat64);
} nat64_sessions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct v6g_relay_key);
	__type(value, struct v6g_relay);
} trgw_relay SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct v6g_count);
} trgw_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6G_COUNTER_MAX);
	__type(key, __u32);
	__type(value, struct v6g_count);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct v6g_fib_key);
	__type(value, struct v6g_fib);
} fib_cache SEC(".maps");

/* Per-CPU scratch space for route(): keeps the BPF stack (512 bytes for a
 * whole call chain) free. Internal: userspace never reads it. */
struct v6g_scratch {
	struct v6g_fib_key k;
	struct v6g_fib v;
	union {
		struct v6g_lpm4 r4;
		struct v6g_lpm6 r6;
	};
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_scratch);
} scratch SEC(".maps");

/* Routes and next hops the slow path resolved (Katran/Cilium style: the
 * daemon owns policy and keeps these fresh from netlink route and
 * neighbour events); a miss takes bpf_fib_lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_lpm4);
	__type(value, __u32);
} routes4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_lpm6);
	__type(value, __u32);
} routes6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct v6g_nexthop);
} nexthops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_ports SEC(".maps");

/* ---- verdicts ---------------------------------------------------------- */

/* PASS(reason) with a V6G_P_* counter index (helpers.h). */

V6G_INLINE struct v6g_count *counter(__u32 idx)
{
	return bpf_map_lookup_elem(&counters, &idx);
}

V6G_INLINE void count(__u32 idx, __u64 bytes)
{
	count_add(&counters, idx, 1, bytes);
}

/* The XDP action for `rc`, counting passes by reason. */
V6G_INLINE int finish(struct xdp_md *ctx, __u32 rc)
{
	if (IS_PASS(rc)) {
		count(rc & ~V6G_PASS_BIT, ctx->data_end - ctx->data);
		return XDP_PASS;
	}
	return rc;
}

V6G_INLINE const struct v6g_config *get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&config, &zero);
}

/* ---- the Internet checksum (RFC 1071, RFC 1624) -------------------------
 * Sums are unfolded host-order u64 accumulators of big-endian words, as in
 * xlat::checksum; fold() is an end-around-carry fold, so any two sums of
 * the same words fold alike, whatever their grouping (16- or 32-bit).
 * csum_update() and csum_update_udp() are in util.h (the softwire object's
 * DS-Lite NAT44 uses them too).
 */

/* ---- addresses ------------------------------------------------------------ */

/* An IPv6 address as two host-order halves. */
struct a6 {
	__u64 hi;
	__u64 lo;
};

V6G_INLINE struct a6 load6(const void *p)
{
	const __u8 *b = p;
	struct a6 a;

	a.hi = ((__u64)bpf_ntohl(LD32(b)) << 32) | bpf_ntohl(LD32(b + 4));
	a.lo = ((__u64)bpf_ntohl(LD32(b + 8)) << 32) | bpf_ntohl(LD32(b + 12));
	return a;
}

V6G_INLINE void store6(void *p, struct a6 a)
{
	__u8 *b = p;

	ST32(b, bpf_htonl(a.hi >> 32));
	ST32(b + 4, bpf_htonl((__u32)a.hi));
	ST32(b + 8, bpf_htonl(a.lo >> 32));
	ST32(b + 12, bpf_htonl((__u32)a.lo));
}

V6G_INLINE __u32 load4(const void *p)
{
	return bpf_ntohl(LD32(p));
}

V6G_INLINE void store4(void *p, __u32 a)
{
	ST32(p, bpf_htonl(a));
}

/* Two MAC addresses (destination, source) as three 16-bit words each. */
V6G_INLINE void copy_mac(__u16 *dst, const void *src)
{
	const __u8 *b = src;

	dst[0] = LD16(b);
	dst[1] = LD16(b + 2);
	dst[2] = LD16(b + 4);
}

V6G_INLINE __u64 sum4(__u32 a)
{
	return (__u64)a;
}

V6G_INLINE __u64 sum6(struct a6 a)
{
	return (a.hi >> 32) + (a.hi & 0xffffffff) + (a.lo >> 32) + (a.lo & 0xffffffff);
}

/* RFC 8200 §8.1 pseudo-header sum. */
V6G_INLINE __u64 pseudo6(struct a6 s, struct a6 d, __u8 next, __u32 len)
{
	return sum6(s) + sum6(d) + (len >> 16) + (len & 0xffff) + next;
}

/* As xlat::addr::is_forbidden_v4: 0/8, 127/8, 224/3. */
V6G_INLINE int forbidden4(__u32 a)
{
	__u32 o = a >> 24;

	return o == 0 || o == 127 || o >= 224;
}

/* As xlat::addr::is_forbidden_v6: ::, ::1, ff00::/8, ::ffff:0:0/96. */
V6G_INLINE int forbidden6(struct a6 a)
{
	if (a.hi == 0 && (a.lo == 0 || a.lo == 1 || (a.lo >> 32) == 0xffff))
		return 1;
	return (a.hi >> 56) == 0xff;
}

/* A 20-byte IPv4 header (no options) in network order, checksum included,
 * as xlat's Ipv4Header::emit writes it. `flags_frag` holds DF/MF/offset. */
V6G_INLINE void ipv4_header(__u16 *hdr, __u8 tos, __u16 total, __u16 ident, __u16 flags_frag, __u8 ttl, __u8 proto,
			    __u32 src, __u32 dst)
{
	__u64 acc = 0;

	hdr[0] = (0x45 << 8) | tos;
	hdr[1] = total;
	hdr[2] = ident;
	hdr[3] = flags_frag;
	hdr[4] = ((__u16)ttl << 8) | proto;
	hdr[5] = 0;
	hdr[6] = src >> 16;
	hdr[7] = src & 0xffff;
	hdr[8] = dst >> 16;
	hdr[9] = dst & 0xffff;
#pragma unroll
	for (int i = 0; i < 10; i++)
		acc += hdr[i];
	hdr[5] = (__u16)~fold(acc);
#pragma unroll
	for (int i = 0; i < 10; i++)
		hdr[i] = bpf_htons(hdr[i]);
}

/* The 20 bytes ipv4_header() built, into the packet. */
V6G_INLINE void put_ipv4_header(void *ip, const __u16 *hdr)
{
#pragma unroll
	for (int i = 0; i < 10; i++)
		ST16((__u8 *)ip + 2 * i, hdr[i]);
}

/* ---- forwarding ------------------------------------------------------------ */

/* Where a translated packet goes, decided before the packet is touched. */
struct egress {
	__u32 ifindex; /* 0: back out of the ingress interface (XDP_TX) */
	__u16 mac[6];  /* destination, source: the Ethernet header's first 12 bytes */
};

/* Look up the route and neighbour of the packet-to-be in `fib` (family,
 * addresses, tot_len, tos/flowinfo and ports filled in) and check the
 * egress interface may be used. Returns 0 or PASS(reason).
 *
 * With fib_cache_ms set, the answer for the same lookup inputs is reused
 * for that long (per CPU, LRU): bpf_fib_lookup is most of the fast path's
 * cost. A packet larger than any the cached lookup accepted is looked up
 * again (the MTU check); a miss or a failure is never cached. */
/* The slow path's route for the packet-to-be, when it mirrored one: a
 * longest-prefix match in routes4/routes6, then the next hop. Returns 1
 * (eg filled), 0 (no route here: ask the FIB) or PASS(reason). */
V6G_INLINE __u32 route_table(const struct v6g_config *c, __u32 in, __u8 family, const void *dst, __u32 tot_len,
			     struct egress *eg)
{
	const struct v6g_nexthop *nh;
	struct v6g_scratch *sc;
	__u32 *id, zero = 0;

	/* The trie keys live in the per-CPU scratch entry: the stack is full. */
	if (family == AF_INET) {
		if (!(c->route_flags & V6G_ROUTES4))
			return 0;
		if (c->route_flags & V6G_ROUTES4_DEFAULT) {
			id = (__u32 *)&c->default_nh4;
			goto found;
		}
		sc = bpf_map_lookup_elem(&scratch, &zero);
		if (!sc)
			return 0;
		sc->r4.prefixlen = 32;
		ST32(sc->r4.addr, LD32(dst));
		id = bpf_map_lookup_elem(&routes4, &sc->r4);
	} else {
		if (!(c->route_flags & V6G_ROUTES6))
			return 0;
		if (c->route_flags & V6G_ROUTES6_DEFAULT) {
			id = (__u32 *)&c->default_nh6;
			goto found;
		}
		sc = bpf_map_lookup_elem(&scratch, &zero);
		if (!sc)
			return 0;
		sc->r6.prefixlen = 128;
		copy16(sc->r6.addr, dst);
		id = bpf_map_lookup_elem(&routes6, &sc->r6);
	}
	if (!id)
		return 0;
found:
	nh = bpf_map_lookup_elem(&nexthops, id);
	if (!nh || !nh->ifindex)
		return 0;
	if (tot_len > nh->mtu)
		return PASS(V6G_P_TOO_BIG);
	copy_mac(eg->mac, nh->dmac);
	copy_mac(eg->mac + 3, nh->smac);
	eg->ifindex = nh->ifindex == in ? 0 : nh->ifindex;
	return 1;
}

/* The FIB part of route(): the cache, then bpf_fib_lookup. */
V6G_INLINE __u32 route_fib(struct xdp_md *ctx, const struct v6g_config *c, struct bpf_fib_lookup *fib,
			   struct egress *eg)
{
	__u32 in = ctx->ingress_ifindex, cache_ms = c ? c->fib_cache_ms : 0, zero = 0;
	struct v6g_scratch *sc = 0;
	struct v6g_fib *e = 0;
	__u64 now = 0;
	long rc;

	fib->ifindex = in;
	if (cache_ms)
		sc = bpf_map_lookup_elem(&scratch, &zero);
	if (sc) {
		/* Built in place: the stack is full. */
		struct v6g_fib_key *kp = &sc->k;

		__builtin_memset(kp, 0, sizeof(*kp));
		kp->ifindex = in;
		kp->family = fib->family;
		kp->proto = fib->l4_protocol;
		kp->sport_be = fib->sport;
		kp->dport_be = fib->dport;
		if (fib->family == AF_INET) {
			kp->tos = fib->tos;
			ST32(kp->src, fib->ipv4_src);
			ST32(kp->dst, fib->ipv4_dst);
		} else {
			kp->tos = bpf_ntohl(fib->flowinfo) >> 20;
			copy16(kp->src, fib->ipv6_src);
			copy16(kp->dst, fib->ipv6_dst);
		}
		now = bpf_ktime_get_coarse_ns();
		e = bpf_map_lookup_elem(&fib_cache, kp);
		if (e && now < e->expires_ns && fib->tot_len <= e->ok_len) {
			copy_mac(eg->mac, e->dmac);
			copy_mac(eg->mac + 3, e->smac);
			eg->ifindex = e->ifindex == in ? 0 : e->ifindex;
			goto check;
		}
	}
	if (c && (c->fib_flags & V6G_FIB_DIRECT)) {
		__u32 flags = BPF_FIB_LOOKUP_DIRECT;

		if (c->fib_flags & V6G_FIB_TABLE) {
			flags |= BPF_FIB_LOOKUP_TBID;
			fib->tbid = c->fib_table;
		}
		rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), flags);
	} else {
		rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	}
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return PASS(V6G_P_TOO_BIG);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return PASS(V6G_P_FIB);
	copy_mac(eg->mac, fib->dmac);
	copy_mac(eg->mac + 3, fib->smac);
	if (sc) {
		struct v6g_fib *nv = &sc->v;

		nv->expires_ns = now + (__u64)cache_ms * 1000000;
		nv->ifindex = fib->ifindex;
		/* tot_len is the packet's length still (it is only replaced by
		 * the MTU on FRAG_NEEDED). */
		nv->ok_len = fib->tot_len;
		if (e && now < e->expires_ns && e->ifindex == fib->ifindex && e->ok_len > nv->ok_len)
			nv->ok_len = e->ok_len;
		copy_mac((__u16 *)(void *)nv->dmac, fib->dmac);
		copy_mac((__u16 *)(void *)nv->smac, fib->smac);
		ST32(nv->pad, 0);
		ST16(nv->pad + 4, 0);
		bpf_map_update_elem(&fib_cache, &sc->k, nv, BPF_ANY);
	}
	eg->ifindex = fib->ifindex == in ? 0 : fib->ifindex;
check:
	if (!eg->ifindex)
		return 0;
	if (!bpf_map_lookup_elem(&tx_ports, &eg->ifindex))
		return PASS(V6G_P_EGRESS);
	return 0;
}

V6G_INLINE __u32 route(struct xdp_md *ctx, struct bpf_fib_lookup *fib, struct egress *eg)
{
	const struct v6g_config *c = get_config();
	__u32 rc;

	if (c) {
		rc = route_table(c, ctx->ingress_ifindex, fib->family,
				 fib->family == AF_INET ? (const void *)&fib->ipv4_dst : (const void *)fib->ipv6_dst,
				 fib->tot_len, eg);
		if (rc == 1)
			return 0; /* egress checked when the next hop was mirrored */
		if (rc)
			return rc;
	}
	return route_fib(ctx, c, fib, eg);
}

/* Write the Ethernet header and send. */
V6G_INLINE __u32 transmit(struct ethhdr *eth, const struct egress *eg, __u16 proto)
{
	__u16 *m = (__u16 *)(void *)eth;

	m[0] = eg->mac[0];
	m[1] = eg->mac[1];
	m[2] = eg->mac[2];
	m[3] = eg->mac[3];
	m[4] = eg->mac[4];
	m[5] = eg->mac[5];
	eth->h_proto = bpf_htons(proto);
	if (!eg->ifindex)
		return XDP_TX;
	/* The entry was there a moment ago (route()); should it vanish in
	 * between, the translated packet goes up the stack, which forwards it. */
	return bpf_redirect_map(&tx_ports, eg->ifindex, XDP_PASS);
}

#endif
