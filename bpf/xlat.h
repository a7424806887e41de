/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * RFC 7915 header translation for the fast path, both directions, with the
 * addresses (and, for NAT64, one port) supplied by the caller: the XDP
 * counterpart of xlat::siit::Translator::translate_with followed by
 * nat64's port rewrite. It handles only the common case and must produce
 * the very bytes the Rust core produces for it; everything else is
 * PASS(reason) with the packet untouched:
 *
 *   IPv4: no options, not a fragment, header checksum right;
 *   IPv6: no extension headers;
 *   UDP with a nonzero checksum, TCP, ICMP/ICMPv6 echo request and reply;
 *   TTL/Hop Limit above 1; the result within the configured MTUs and,
 *   for DF-clear IPv4, within lowest-ipv6-mtu (no fragmentation here);
 *   a FIB route with a resolved neighbour on an allowed interface.
 */
#ifndef V6GATE_XLAT_H
#define V6GATE_XLAT_H

#include "common.h"

/* An IPv4 address IPv4-mapped (::ffff:a.b.c.d) into 16 bytes at `dst`
 * (4-byte aligned on the stack). */
V6G_INLINE void mapped4(__u8 *dst, __u32 a)
{
	ST32(dst, 0);
	ST32(dst + 4, 0);
	ST32(dst + 8, bpf_htonl(0xffff));
	store4(dst + 12, a);
}

#define IPPROTO_ICMPV6_ 58
#define ICMP_ECHOREPLY_ 0
#define ICMP_ECHO_ 8
#define ICMPV6_ECHO_REQUEST_ 128
#define ICMPV6_ECHO_REPLY_ 129

/* RFC 7915 §5.1: DF is set on translated packets above this size. */
#define DF_THRESHOLD 1260

/* A parsed packet, both families. Ports are host order; for ICMP echo both
 * hold the identifier. */
struct pkt {
	__u32 l3off;   /* offset of the L3 header in the frame (ETH_HLEN) */
	__u32 l3len;   /* IPv4 Total Length, or 40 + IPv6 Payload Length */
	__u32 avail;   /* bytes from the L3 header to the end of the frame */
	__u16 plen;    /* L4 bytes */
	__u16 l4csum;  /* L4 checksum as found */
	__u16 sport;
	__u16 dport;
	__u8 proto;    /* as in the header: 1, 6, 17, 58 */
	__u8 tos;      /* TOS or Traffic Class */
	__u8 ttl;      /* TTL or Hop Limit */
	__u8 df;
	__u8 icmp_type;
	__u8 icmp_code;
	__u8 tcp_flags;
	__u8 pad;
	__u32 src4;
	__u32 dst4;
	struct a6 src6;
	struct a6 dst6;
};

/* What the NAT64 caller rewrites after the address translation. */
#define PORT_NONE 0
#define PORT_SRC 1
#define PORT_DST 2

struct rewrite {
	__u8 which;   /* PORT_NONE, PORT_SRC or PORT_DST (ICMP: the identifier) */
	__u16 port;   /* host order */
};

/* The caller's half of a translation: new addresses, port rewrite, and
 * the counter of the packets it forwards. */
struct xargs {
	struct a6 src6;
	struct a6 dst6;
	__u32 src4;
	__u32 dst4;
	struct rewrite rw;
	__u32 ctr;
};

/* ---- parsing ------------------------------------------------------------- */

/* The transport header at `l4`: lengths, echo only, nonzero UDP checksum. */
V6G_INLINE __u32 parse_l4(struct pkt *p, void *l4, void *end)
{
	if (p->proto == IPPROTO_UDP) {
		struct udphdr *u = l4;

		if (p->plen < 8 || (void *)(u + 1) > end)
			return PASS(V6G_P_MALFORMED);
		if (u->check == 0)
			return PASS(V6G_P_UDP_ZERO_CSUM);
		p->sport = bpf_ntohs(u->source);
		p->dport = bpf_ntohs(u->dest);
		p->l4csum = bpf_ntohs(u->check);
		return 0;
	}
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *t = l4;

		if (p->plen < 20 || (void *)(t + 1) > end)
			return PASS(V6G_P_MALFORMED);
		p->sport = bpf_ntohs(t->source);
		p->dport = bpf_ntohs(t->dest);
		p->l4csum = bpf_ntohs(t->check);
		p->tcp_flags = ((__u8 *)t)[13];
		return 0;
	}
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6_) {
		__u8 *m = l4;

		if (p->plen < 8 || (void *)(m + 8) > end)
			return PASS(V6G_P_MALFORMED);
		p->icmp_type = m[0];
		p->icmp_code = m[1];
		if (p->proto == IPPROTO_ICMP) {
			if (m[0] != ICMP_ECHO_ && m[0] != ICMP_ECHOREPLY_)
				return PASS(V6G_P_ICMP);
		} else if (m[0] != ICMPV6_ECHO_REQUEST_ && m[0] != ICMPV6_ECHO_REPLY_) {
			return PASS(V6G_P_ICMP);
		}
		p->l4csum = ((__u16)m[2] << 8) | m[3];
		p->sport = ((__u16)m[4] << 8) | m[5];
		p->dport = p->sport;
		return 0;
	}
	return PASS(V6G_P_PROTOCOL);
}

/* IPv4 after the Ethernet header. */
V6G_INLINE __u32 parse4(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	__u16 *w = (__u16 *)ip;
	__u64 acc = 0;
	__u16 frag;

	if ((void *)(ip + 1) > end)
		return PASS(V6G_P_MALFORMED);
	if (ip->version != 4 || ip->ihl < 5)
		return PASS(V6G_P_MALFORMED);
	if (ip->ihl != 5)
		return PASS(V6G_P_IPV4_OPTIONS);
	p->l3off = ETH_HLEN;
	p->avail = end - (void *)ip;
	p->l3len = bpf_ntohs(ip->tot_len);
	if (p->l3len < 20 || p->l3len > p->avail)
		return PASS(V6G_P_MALFORMED);
#pragma unroll
	for (int i = 0; i < 10; i++)
		acc += bpf_ntohs(w[i]);
	if (fold(acc) != 0xffff)
		return PASS(V6G_P_IPV4_CHECKSUM);
	frag = bpf_ntohs(ip->frag_off);
	if (frag & 0x3fff)
		return PASS(V6G_P_FRAGMENT);
	p->df = !!(frag & 0x4000);
	p->plen = p->l3len - 20;
	p->proto = ip->protocol;
	p->tos = ip->tos;
	p->ttl = ip->ttl;
	p->src4 = bpf_ntohl(ip->saddr);
	p->dst4 = bpf_ntohl(ip->daddr);
	if (p->proto == IPPROTO_ICMPV6_)
		return PASS(V6G_P_PROTOCOL);
	return parse_l4(p, ip + 1, end);
}

V6G_INLINE int is_ext_header(__u8 next)
{
	switch (next) {
	case 0: case 43: case 44: case 50: case 51: case 60: case 135: case 139: case 140: case 253: case 254:
		return 1;
	}
	return 0;
}

/* IPv6 after the Ethernet header. */
V6G_INLINE __u32 parse6(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip = data + ETH_HLEN;
	__u8 *b = (__u8 *)ip;

	if ((void *)(ip + 1) > end)
		return PASS(V6G_P_MALFORMED);
	if (ip->version != 6)
		return PASS(V6G_P_MALFORMED);
	p->l3off = ETH_HLEN;
	p->avail = end - (void *)ip;
	p->plen = bpf_ntohs(ip->payload_len);
	p->l3len = 40 + (__u32)p->plen;
	if (p->l3len > p->avail)
		return PASS(V6G_P_MALFORMED);
	p->proto = ip->nexthdr;
	if (p->proto == 44)
		return PASS(V6G_P_FRAGMENT);
	if (is_ext_header(p->proto))
		return PASS(V6G_P_IPV6_EXT);
	if (p->proto == IPPROTO_ICMP)
		return PASS(V6G_P_PROTOCOL);
	p->tos = (b[0] << 4) | (b[1] >> 4);
	p->ttl = ip->hop_limit;
	p->src6 = load6(&ip->saddr);
	p->dst6 = load6(&ip->daddr);
	return parse_l4(p, ip + 1, end);
}

/* ---- the L4 checksum after translation --------------------------------------
 * Exactly as the Rust core computes it: RFC 7915's address update
 * (xlat::siit l4_patch), then nat64's port rewrite (nat64::rewrite::l4),
 * each an RFC 1624 update of its own.
 */
V6G_INLINE __u16 l4_after(const struct pkt *p, __u64 addr_old, __u64 addr_new, struct a6 s6, struct a6 d6,
			  int to6, const struct rewrite *rw, __u8 *icmp_word0)
{
	__u16 c = p->l4csum;
	__u16 old_port;

	if (p->proto == IPPROTO_UDP) {
		c = csum_update_udp(c, addr_old, addr_new);
	} else if (p->proto == IPPROTO_TCP) {
		c = csum_update(c, addr_old, addr_new);
	} else {
		/* Echo: type 8/0 <-> 128/129, code 0. ICMPv6 covers a pseudo-header,
		 * ICMPv4 does not. */
		__u16 w_old = ((__u16)p->icmp_type << 8) | p->icmp_code;
		__u8 t_new;
		__u64 pseudo = pseudo6(s6, d6, IPPROTO_ICMPV6_, p->plen);

		if (to6)
			t_new = p->icmp_type == ICMP_ECHO_ ? ICMPV6_ECHO_REQUEST_ : ICMPV6_ECHO_REPLY_;
		else
			t_new = p->icmp_type == ICMPV6_ECHO_REQUEST_ ? ICMP_ECHO_ : ICMP_ECHOREPLY_;
		*icmp_word0 = t_new;
		if (to6)
			c = csum_update(c, w_old, ((__u64)t_new << 8) + pseudo);
		else
			c = csum_update(c, w_old + pseudo, (__u64)t_new << 8);
	}
	if (rw->which == PORT_NONE)
		return c;
	if (p->proto == IPPROTO_UDP || p->proto == IPPROTO_TCP)
		old_port = rw->which == PORT_SRC ? p->sport : p->dport;
	else
		old_port = p->sport; /* the echo identifier */
	if (p->proto == IPPROTO_UDP)
		return csum_update_udp(c, old_port, rw->port);
	return csum_update(c, old_port, rw->port);
}

/* Write the L4 changes at `l4`. The caller has checked the header is in
 * the frame; the checks here repeat it for the verifier. Returns nonzero
 * (never in practice) when it is not. */
V6G_INLINE int l4_write(const struct pkt *p, __u8 *l4, void *end, __u16 csum, __u8 icmp_type,
			const struct rewrite *rw)
{
	if (p->proto == IPPROTO_UDP || p->proto == IPPROTO_TCP) {
		if ((void *)(l4 + 8) > end)
			return -1;
		if (rw->which == PORT_SRC)
			ST16(l4, bpf_htons(rw->port));
		else if (rw->which == PORT_DST)
			ST16(l4 + 2, bpf_htons(rw->port));
		if (p->proto == IPPROTO_UDP) {
			ST16(l4 + 6, bpf_htons(csum));
			return 0;
		}
		if ((void *)(l4 + 20) > end)
			return -1;
		ST16(l4 + 16, bpf_htons(csum));
		return 0;
	}
	if ((void *)(l4 + 8) > end)
		return -1;
	l4[0] = icmp_type;
	l4[1] = 0;
	ST16(l4 + 2, bpf_htons(csum));
	if (rw->which != PORT_NONE)
		ST16(l4 + 4, bpf_htons(rw->port));
	return 0;
}

V6G_INLINE __u32 l4_min(__u8 proto)
{
	return proto == IPPROTO_TCP ? 20 : 8;
}

/* Remove Ethernet padding beyond the IP packet; on failure undo the head
 * move `head` (bytes) so the frame is as it came. */
V6G_INLINE int trim(struct xdp_md *ctx, __u32 want, int head)
{
	__u32 have = ctx->data_end - ctx->data;

	if (have <= want)
		return 0;
	if (bpf_xdp_adjust_tail(ctx, -(int)(have - want))) {
		bpf_xdp_adjust_head(ctx, -head);
		return -1;
	}
	return 0;
}

/* The transport ports of the packet-to-be, for the FIB lookup. */
V6G_INLINE void fib_ports(struct bpf_fib_lookup *fib, const struct pkt *p, const struct rewrite *rw)
{
	__u16 sport = p->sport, dport = p->dport;

	if (p->proto != IPPROTO_UDP && p->proto != IPPROTO_TCP)
		return;
	if (rw->which == PORT_SRC)
		sport = rw->port;
	else if (rw->which == PORT_DST)
		dport = rw->port;
	fib->sport = bpf_htons(sport);
	fib->dport = bpf_htons(dport);
}

/* ---- RFC 7915 §4: IPv4 -> IPv6 ---------------------------------------------- */

/* A BPF-to-BPF call, not inlined: each caller (SIIT, NAT64) would
 * otherwise get its own copy of the stack frame. */
V6G_SUB __u32 xlat46(struct xdp_md *ctx, const struct pkt *p, const struct v6g_xlat *xp,
			       const struct xargs *a)
{
	const struct rewrite *rw = &a->rw;
	struct a6 src6 = a->src6, dst6 = a->dst6;
	__u32 ctr = a->ctr;
	struct bpf_fib_lookup fib = {};
	struct egress eg;
	__u32 v6len = 40 + (__u32)p->plen;
	__u8 tc, icmp_type = 0;
	__u16 csum;
	__u32 rc;

	/* §4.1 Hop Limit: the slow path sends Time Exceeded. */
	if (p->ttl <= 1)
		return PASS(V6G_P_TTL);
	/* §4.1: DF clear and larger than lowest-ipv6-mtu means fragmenting;
	 * larger than the IPv6 MTU means Fragmentation Needed. */
	if ((!p->df && v6len > xp->frag_mtu) || v6len > xp->ipv6_mtu)
		return PASS(V6G_P_TOO_BIG);
	tc = (xp->flags & V6G_XLAT_RESET_TC) ? 0 : p->tos;
	csum = l4_after(p, sum4(p->src4) + sum4(p->dst4), sum6(src6) + sum6(dst6), src6, dst6, 1, rw, &icmp_type);

	fib.family = AF_INET6;
	fib.l4_protocol = p->proto == IPPROTO_ICMP ? IPPROTO_ICMPV6_ : p->proto;
	fib_ports(&fib, p, rw);
	fib.tot_len = v6len;
	fib.flowinfo = bpf_htonl((__u32)tc << 20);
	store6(fib.ipv6_src, src6);
	store6(fib.ipv6_dst, dst6);
	rc = route(ctx, &fib, &eg);
	if (rc)
		return rc;

	/* From here on the packet changes: grow the head by 20 bytes. */
	if (bpf_xdp_adjust_head(ctx, -20))
		return PASS(V6G_P_ADJUST);
	if (trim(ctx, ETH_HLEN + v6len, -20))
		return PASS(V6G_P_ADJUST);
	{
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct ethhdr *eth = data;
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		__u8 *l4 = (__u8 *)(ip6 + 1);
		__u32 w0 = (6u << 28) | ((__u32)tc << 20);

		/* The frame grew by 20 bytes: it holds the new headers. Checked
		 * before any write, so a failure leaves the frame as it came. */
		if ((void *)(l4 + l4_min(p->proto)) > end || (void *)(l4 + 8) > end) {
			bpf_xdp_adjust_head(ctx, 20);
			return PASS(V6G_P_ADJUST);
		}
		w0 = bpf_htonl(w0);
		__builtin_memcpy(ip6, &w0, 4);
		ip6->payload_len = bpf_htons(p->plen);
		ip6->nexthdr = p->proto == IPPROTO_ICMP ? IPPROTO_ICMPV6_ : p->proto;
		ip6->hop_limit = p->ttl - 1;
		store6(&ip6->saddr, src6);
		store6(&ip6->daddr, dst6);
		if (l4_write(p, l4, end, csum, icmp_type, rw))
			return XDP_ABORTED; /* unreachable: the header was checked above */
		count(ctr, p->l3len);
		return transmit(eth, &eg, ETH_P_IPV6);
	}
}

/* ---- RFC 7915 §5: IPv6 -> IPv4 ---------------------------------------------- */

V6G_SUB __u32 xlat64(struct xdp_md *ctx, const struct pkt *p, const struct v6g_xlat *xp,
			       const struct xargs *a)
{
	const struct rewrite *rw = &a->rw;
	__u32 src4 = a->src4, dst4 = a->dst4, ctr = a->ctr;
	struct bpf_fib_lookup fib = {};
	struct egress eg;
	struct v6g_count *cnt;
	__u32 total = 20 + (__u32)p->plen;
	__u8 tos, icmp_type = 0, proto;
	__u16 csum, ident = 0;
	__u16 hdr[10];
	__u32 rc;

	if (p->ttl <= 1)
		return PASS(V6G_P_TTL);
	/* §5.1: larger than the IPv4 MTU means fragmenting or Packet Too Big. */
	if (total > xp->ipv4_mtu)
		return PASS(V6G_P_TOO_BIG);
	tos = (xp->flags & V6G_XLAT_RESET_TOS) ? xp->new_tos : p->tos;
	proto = p->proto == IPPROTO_ICMPV6_ ? IPPROTO_ICMP : p->proto;
	csum = l4_after(p, sum6(p->src6) + sum6(p->dst6), sum4(src4) + sum4(dst4), p->src6, p->dst6, 0, rw,
			&icmp_type);

	fib.family = AF_INET;
	fib.l4_protocol = proto;
	fib_ports(&fib, p, rw);
	fib.tot_len = total;
	fib.tos = tos;
	fib.ipv4_src = bpf_htonl(src4);
	fib.ipv4_dst = bpf_htonl(dst4);
	rc = route(ctx, &fib, &eg);
	if (rc)
		return rc;

	/* §5.1: DF above 1260 bytes; otherwise an Identification from this
	 * CPU's packet count (a per-CPU sequential generator). */
	cnt = counter(ctr);
	if (total <= DF_THRESHOLD && cnt)
		ident = (__u16)(cnt->packets ^ ((__u64)bpf_get_smp_processor_id() << 13));
	ipv4_header(hdr, tos, total, ident, total <= DF_THRESHOLD ? 0 : 0x4000, p->ttl - 1, proto, src4, dst4);

	/* From here on the packet changes: drop 20 bytes of head room. */
	if (bpf_xdp_adjust_head(ctx, 20))
		return PASS(V6G_P_ADJUST);
	if (trim(ctx, ETH_HLEN + total, 20))
		return PASS(V6G_P_ADJUST);
	{
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct ethhdr *eth = data;
		__u8 *ip4 = data + ETH_HLEN;
		__u8 *l4 = ip4 + 20;

		if ((void *)(l4 + l4_min(p->proto)) > end || (void *)(l4 + 8) > end) {
			bpf_xdp_adjust_head(ctx, -20);
			return PASS(V6G_P_ADJUST);
		}
		put_ipv4_header(ip4, hdr);
		if (l4_write(p, l4, end, csum, icmp_type, rw))
			return XDP_ABORTED; /* unreachable: the header was checked above */
		if (cnt) {
			cnt->packets++;
			cnt->bytes += p->l3len;
		}
		return transmit(eth, &eg, ETH_P_IP);
	}
}

#endif
