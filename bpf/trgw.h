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
V6G_INLINE int udp_csum_ok(struct xdp_md *ctx, __u32 l4off, __u32 len, __u64 pseudo)
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
/* The same as a subprogram: xdp_gate's combined stack has no room for it
 * inlined next to the SIIT and NAT64 subprograms. */
static __noinline __u32 trgw(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	return trgw_inline(ctx, c, p, in6);
}

#endif
	}
	return fold(sum) == 0xffff;
}

/* A packet parsed by parse4()/parse6(), to a relay port from its latched
 * far end: re-originated on the other leg. Everything that depends on the
 * leg alone was computed by the slow path when it mirrored the leg (see
 * struct v6g_relay): the pseudo-header sum to verify the datagram with,
 * the UDP checksum's change (one fold here), the new IPv4 header's sum;
 * the new addresses are copied as they sit in the entry. All sums here are
 * in the raw memory-order domain (RFC 1071 §2(B): byte order does not
 * change a one's-complement sum), so nothing is byte-swapped. */
V6G_INLINE __u32 trgw_inline(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	struct v6g_relay_key k __attribute__((aligned(8)));
	const struct v6g_relay *r;
	struct v6g_count *st;
	struct egress eg;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *ip = data + ETH_HLEN;
	__u32 idx, rc, l3out, plen = p->plen;
	__u16 ulen, csum;
	int out6, delta;

	if (!(c->trgw_flags & V6G_TRGW_ON) || p->proto != IPPROTO_UDP)
		return PASS(V6G_P_NO_MATCH);
	/* parse4()/parse6() checked these bytes are there; the verifier wants
	 * to see it again. */
	if (in6) {
		if ((void *)(ip + 48) > end)
			return PASS(V6G_P_MALFORMED);
		copy16(k.addr, ip + 24);
		k.family = 6;
		ulen = LD16(ip + 44);
	} else {
		if ((void *)(ip + 28) > end)
			return PASS(V6G_P_MALFORMED);
		ST32(k.addr, 0);
		ST32(k.addr + 4, 0);
		ST32(k.addr + 8, bpf_htonl(0xffff));
		ST32(k.addr + 12, LD32(ip + 16));
		k.family = 4;
		ulen = LD16(ip + 24);
	}
	k.port_be = bpf_htons(p->dport);
	k.pad = 0;
	r = bpf_map_lookup_elem(&trgw_relay, &k);
	if (!r)
		return PASS(V6G_P_NO_MATCH);
	/* Only the latched far end; anything else is the slow path's to judge
	 * (and maybe latch). */
	if (r->peer_port_be != bpf_htons(p->sport) || !(r->flags & V6G_RELAY_OUT_KNOWN))
		return PASS(V6G_P_NOT_LATCHED);
	if (in6) {
		if ((LD32(ip + 8) ^ LD32(r->peer)) | (LD32(ip + 12) ^ LD32(r->peer + 4)) |
		    (LD32(ip + 16) ^ LD32(r->peer + 8)) | (LD32(ip + 20) ^ LD32(r->peer + 12)))
			return PASS(V6G_P_NOT_LATCHED);
	} else if (LD32(ip + 12) != LD32(r->peer + 12)) {
		/* The key's family is 4: the entry's peer is IPv4-mapped too
		 * (trgw::Leg::entry refuses mixed families). */
		return PASS(V6G_P_NOT_LATCHED);
	}
	/* The UDP Length must be the IP payload (the socket would trim or
	 * drop otherwise). */
	if (ulen != bpf_htons(plen))
		return PASS(V6G_P_MALFORMED);
	/* The socket discards a datagram whose checksum fails: so do we. */
	if (!udp_csum_ok(ctx, ETH_HLEN + (in6 ? 40 : 20), plen, (__u64)LD16(&r->in_pseudo_be) + bpf_htons(plen)))
		return PASS(V6G_P_UDP_CSUM);

	if (r->out_family != 4 && r->out_family != 6)
		return PASS(V6G_P_NO_MATCH);
	out6 = r->out_family == 6;
	l3out = (out6 ? 40 : 20) + plen;
	rc = route_table(c, ctx->ingress_ifindex, out6 ? AF_INET6 : AF_INET, out6 ? r->out_dst : r->out_dst + 12,
			 l3out, &eg);
	if (rc == 0) {
		struct bpf_fib_lookup fib = {};

		if (out6) {
			fib.family = AF_INET6;
			copy16(fib.ipv6_src, r->out_src);
			copy16(fib.ipv6_dst, r->out_dst);
		} else {
			fib.family = AF_INET;
			fib.ipv4_src = LD32(r->out_src + 12);
			fib.ipv4_dst = LD32(r->out_dst + 12);
		}
		fib.l4_protocol = IPPROTO_UDP;
		fib.sport = r->out_sport_be;
		fib.dport = r->out_dport_be;
		fib.tot_len = l3out;
		rc = route_fib(ctx, c, &fib, &eg);
		if (rc)
			return rc;
	} else if (rc != 1) {
		return rc;
	}
	/* RFC 1624 eqn. 3 with the leg's precomputed change; a transmitted
	 * UDP checksum is never zero (RFC 768). */
	csum = ~fold((__u64)(__u16)~bpf_htons(p->l4csum) + LD16(&r->csum_delta_be));
	if (!csum)
		csum = 0xffff;

	/* From here on the packet changes. */
	delta = (in6 ? 40 : 20) - (out6 ? 40 : 20);
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return PASS(V6G_P_ADJUST);
	if (trim(ctx, ETH_HLEN + l3out, delta))
		return PASS(V6G_P_ADJUST);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ip = data + ETH_HLEN;
	if (out6) {
		/* Checked before any write: a failure leaves the frame as it came. */
		if ((void *)(ip + 48) > end) {
			bpf_xdp_adjust_head(ctx, -delta);
			return PASS(V6G_P_ADJUST);
		}
		/* Version 6, Traffic Class 0, flow label 0; payload length; UDP,
		 * Hop Limit 64; then out_src and out_dst, adjacent in the entry. */
		ST32(ip, bpf_htonl(6u << 28));
		ST16(ip + 4, bpf_htons(plen));
		ST16(ip + 6, bpf_htons(IPPROTO_UDP << 8 | RELAY_TTL));
#pragma unroll
		for (int i = 0; i < 8; i++)
			ST32(ip + 8 + 4 * i, LD32(r->out_src + 4 * i));
		ST16(ip + 40, r->out_sport_be);
		ST16(ip + 42, r->out_dport_be);
		ST16(ip + 46, csum);
	} else {
		if ((void *)(ip + 28) > end) {
			bpf_xdp_adjust_head(ctx, -delta);
			return PASS(V6G_P_ADJUST);
		}
		/* As Linux sends on an unconnected UDP socket: DF, Identification
		 * 0; the header's sum less Total Length is the entry's. */
		ST16(ip, bpf_htons(0x4500));
		ST16(ip + 2, bpf_htons(l3out));
		ST32(ip + 4, bpf_htonl(0x4000));
		ST16(ip + 8, bpf_htons(RELAY_TTL << 8 | IPPROTO_UDP));
		ST16(ip + 10, (__u16)~fold((__u64)LD16(&r->ip_sum_be) + bpf_htons(l3out)));
		ST32(ip + 12, LD32(r->out_src + 12));
		ST32(ip + 16, LD32(r->out_dst + 12));
		ST16(ip + 20, r->out_sport_be);
		ST16(ip + 22, r->out_dport_be);
		ST16(ip + 26, csum);
	}
	idx = r->stats_index;
	st = bpf_map_lookup_elem(&trgw_stats, &idx);
	if (st) {
		st->packets++;
		st->bytes += plen - 8;
	}
	count(V6G_C_TRGW, p->l3len);
	return transmit(data, &eg, out6 ? ETH_P_IPV6 : ETH_P_IP);
}

/* The same as a subprogram: xdp_gate's combined stack has no room for it
 * inlined next to the SIIT and NAT64 subprograms. */
static __noinline __u32 trgw(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	return trgw_inline(ctx, c, p, in6);
}

#endif
