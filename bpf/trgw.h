/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The TrGW media relay in XDP. The slow path (crates/trgw) owns calls,
 * ports and latching; it mirrors each relay leg whose far end is latched
 * into trgw_relay: (family, local address, local port) -> the latched
 * source it accepts, and the other leg (our address and port there, the
 * far end) to send from and to. Here a UDP datagram to a relay port from
 * exactly the latched source is re-originated on the other leg, 6<->4,
 * 4<->6, 6<->6 or 4<->4, with the header the slow path's socket would
 * give it (TTL/Hop Limit 64, TOS/Traffic Class 0, IPv4 DF set and
 * Identification 0 as Linux sends on an unconnected UDP socket, flow label
 * 0) and the payload untouched; its packets and payload bytes are counted
 * in trgw_stats[stats_index] for the slow path to merge. Anything else —
 * another source (not latched yet, or a new one to latch), a bad UDP
 * checksum or length, no route — passes to the slow path.
 */
#ifndef V6GATE_TRGW_H
#define V6GATE_TRGW_H

#include "xlat.h"

#define RELAY_TTL 64

/* The UDP datagram of `len` bytes at `l4off` sums, with the pseudo-header
 * `pseudo` (all in the same raw memory-order domain), to all ones. */
static __noinline int udp_csum_ok(struct xdp_md *ctx, __u32 l4off, __u32 len, __u64 pseudo)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 sum = pseudo;
	__u32 off = 0;
	int i;

	if (l4off > 128 || len > 2048)
		return 0;
	/* 32-bit words summed in a 64-bit accumulator, in unrolled blocks with
	 * one bounds check each: 128-byte blocks, then one block for each bit
	 * of the rest (64 ... 4 bytes), then 2 and 1. Cheaper than
	 * bpf_csum_diff, whose calls cost more than the adds here. */
	for (i = 0; i < 16; i++) {
		__u32 *q = data + l4off + off;

		if (off + 128 > len)
			break;
		if ((void *)q + 128 > end)
			return 0;
#pragma unroll
		for (int j = 0; j < 32; j++)
			sum += q[j];
		off += 128;
	}
#define CSUM_BLOCK(n)                                                   \
	if ((len - off) & (n)) {                                        \
		__u32 *q = data + l4off + off;                          \
		if (off > 2048 || (void *)q + (n) > end)                \
			return 0;                                       \
		_Pragma("unroll") for (int j = 0; j < (n) / 4; j++)     \
			sum += q[j];                                    \
		off += (n);                                             \
	}
	CSUM_BLOCK(64)
	CSUM_BLOCK(32)
	CSUM_BLOCK(16)
	CSUM_BLOCK(8)
	CSUM_BLOCK(4)
#undef CSUM_BLOCK
	if (off + 2 <= len) {
		__u16 *q = data + l4off + off;

		if (off > 2048 || (void *)(q + 1) > end)
			return 0;
		sum += *q;
		off += 2;
	}
	if (off < len) {
		__u8 *q = data + l4off + off;

		if (off > 2048 || (void *)(q + 1) > end)
			return 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		sum += *q;
#else
		sum += (__u32)*q << 8;
#endif
	}
	return fold(sum) == 0xffff;
}

/* The raw-domain sum of 16 address bytes. */
V6G_INLINE __u64 raw_sum16(const __u8 *a)
{
	return (__u64)LD32(a) + LD32(a + 4) + LD32(a + 8) + LD32(a + 12);
}

V6G_INLINE int mapped_eq4(const __u8 *m, __u32 a)
{
	return LD32(m) == 0 && LD32(m + 4) == 0 && LD32(m + 8) == bpf_htonl(0xffff) && LD32(m + 12) == bpf_htonl(a);
}

/* Re-originate the datagram described by `p` on the other leg `r`. */
static __noinline __u32 relay(struct xdp_md *ctx, const struct pkt *p, const struct v6g_relay *r, int in6)
{
	struct bpf_fib_lookup fib = {};
	struct egress eg;
	struct v6g_count *st;
	__u32 idx = r->stats_index, rc, hl_in = in6 ? 40 : 20;
	int out6 = r->out_family == 6, delta;
	__u16 sport = bpf_ntohs(r->out_sport_be), dport = bpf_ntohs(r->out_dport_be), csum;
	__u32 l3out = (out6 ? 40 : 20) + (__u32)p->plen;
	struct a6 s6 = load6(r->out_src), d6 = load6(r->out_dst);
	__u64 old, new;
	__u16 hdr[10];

	if (r->out_family != 4 && r->out_family != 6)
		return PASS(V6G_P_NO_MATCH);
	/* RFC 768 / RFC 8200 §8.1: the new pseudo-header and ports. */
	if (in6)
		old = sum6(p->src6) + sum6(p->dst6);
	else
		old = sum4(p->src4) + sum4(p->dst4);
	old += p->sport + p->dport;
	if (out6)
		new = sum6(s6) + sum6(d6);
	else
		new = sum4((__u32)s6.lo) + sum4((__u32)d6.lo);
	new += sport + dport;
	csum = csum_update_udp(p->l4csum, old, new);

	if (out6) {
		fib.family = AF_INET6;
		store6(fib.ipv6_src, s6);
		store6(fib.ipv6_dst, d6);
	} else {
		fib.family = AF_INET;
		fib.ipv4_src = bpf_htonl((__u32)s6.lo);
		fib.ipv4_dst = bpf_htonl((__u32)d6.lo);
	}
	fib.l4_protocol = IPPROTO_UDP;
	fib.sport = bpf_htons(sport);
	fib.dport = bpf_htons(dport);
	fib.tot_len = l3out;
	rc = route(ctx, &fib, &eg);
	if (rc)
		return rc;

	/* As Linux sends on an unconnected UDP socket: DF, Identification 0. */
	if (!out6)
		ipv4_header(hdr, 0, l3out, 0, 0x4000, RELAY_TTL, IPPROTO_UDP, (__u32)s6.lo, (__u32)d6.lo);

	/* From here on the packet changes. */
	delta = (int)hl_in - (out6 ? 40 : 20);
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return PASS(V6G_P_ADJUST);
	if (trim(ctx, ETH_HLEN + l3out, delta))
		return PASS(V6G_P_ADJUST);
	{
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct ethhdr *eth = data;
		__u8 *ip = data + ETH_HLEN;
		__u8 *l4 = ip + (out6 ? 40 : 20);

		/* Checked before any write: a failure leaves the frame as it came. */
		if ((void *)(l4 + 8) > end || (void *)(ip + 20) > end) {
			bpf_xdp_adjust_head(ctx, -delta);
			return PASS(V6G_P_ADJUST);
		}
		if (out6) {
			struct ipv6hdr *ip6 = (struct ipv6hdr *)ip;
			__u32 w0 = bpf_htonl(6u << 28);

			if ((void *)(ip6 + 1) > end) {
				bpf_xdp_adjust_head(ctx, -delta);
				return PASS(V6G_P_ADJUST);
			}
			__builtin_memcpy(ip6, &w0, 4);
			ip6->payload_len = bpf_htons(p->plen);
			ip6->nexthdr = IPPROTO_UDP;
			ip6->hop_limit = RELAY_TTL;
			store6(&ip6->saddr, s6);
			store6(&ip6->daddr, d6);
		} else {
			put_ipv4_header(ip, hdr);
		}
		ST16(l4, bpf_htons(sport));
		ST16(l4 + 2, bpf_htons(dport));
		ST16(l4 + 6, bpf_htons(csum));
		st = bpf_map_lookup_elem(&trgw_stats, &idx);
		if (st) {
			st->packets++;
			st->bytes += p->plen - 8;
		}
		count(V6G_C_TRGW, p->l3len);
		return transmit(eth, &eg, out6 ? ETH_P_IPV6 : ETH_P_IP);
	}
}

/* A packet parsed by parse4()/parse6(). */
static __noinline __u32 trgw(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	struct v6g_relay_key k __attribute__((aligned(8))) = {};
	struct v6g_relay *r;
	__u64 pseudo;
	__u32 hl = in6 ? 40 : 20;

	if (!(c->trgw_flags & V6G_TRGW_ON) || p->proto != IPPROTO_UDP)
		return PASS(V6G_P_NO_MATCH);
	if (in6) {
		store6(k.addr, p->dst6);
		k.family = 6;
	} else {
		mapped4(k.addr, p->dst4);
		k.family = 4;
	}
	k.port_be = bpf_htons(p->dport);
	r = bpf_map_lookup_elem(&trgw_relay, &k);
	if (!r)
		return PASS(V6G_P_NO_MATCH);
	/* Only the latched far end; anything else is the slow path's to judge
	 * (and maybe latch). */
	if (r->peer_port_be != bpf_htons(p->sport) || !(r->flags & V6G_RELAY_OUT_KNOWN))
		return PASS(V6G_P_NOT_LATCHED);
	if (in6) {
		struct a6 peer = load6(r->peer);

		if (peer.hi != p->src6.hi || peer.lo != p->src6.lo)
			return PASS(V6G_P_NOT_LATCHED);
	} else if (!mapped_eq4(r->peer, p->src4)) {
		return PASS(V6G_P_NOT_LATCHED);
	}
	{
		/* The UDP Length must be the IP payload (the socket would trim
		 * or drop otherwise). */
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct udphdr *u = data + ETH_HLEN + hl;

		if ((void *)(u + 1) > end || bpf_ntohs(u->len) != p->plen)
			return PASS(V6G_P_MALFORMED);
	}
	/* The socket discards a datagram whose checksum fails: so do we. */
	if (in6) {
		__u32 a[8];

		store6(a, p->src6);
		store6(a + 4, p->dst6);
		pseudo = raw_sum16((__u8 *)a) + raw_sum16((__u8 *)(a + 4));
	} else {
		pseudo = (__u64)bpf_htonl(p->src4) + bpf_htonl(p->dst4);
	}
	pseudo += bpf_htons(p->plen) + bpf_htons(IPPROTO_UDP);
	if (!udp_csum_ok(ctx, ETH_HLEN + hl, p->plen, pseudo))
		return PASS(V6G_P_UDP_CSUM);
	return relay(ctx, p, r, in6);
}

#endif
