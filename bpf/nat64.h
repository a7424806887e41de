/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * NAT64 established sessions (RFC 6146) in XDP. The slow path (crates/nat64)
 * creates every session and mirrors each established one into
 * nat64_sessions, one entry per direction keyed by the packet's 5-tuple;
 * here a packet that matches is translated like the slow path does
 * (RFC 7915 headers with the session's addresses, then the one port or
 * ICMP identifier the session rewrites) and the entry's last-seen time is
 * refreshed, so the slow path does not expire a flow that only the fast
 * path sees. TCP SYN, FIN and RST go to the slow path: its state machine
 * stays the truth.
 */
#ifndef V6GATE_NAT64_H
#define V6GATE_NAT64_H

#include "xlat.h"

#define TCP_FIN_ 0x01
#define TCP_SYN_ 0x02
#define TCP_RST_ 0x04

V6G_INLINE int tcp_control(const struct pkt *p)
{
	return p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN_ | TCP_SYN_ | TCP_RST_));
}

/* A packet parsed by parse4() (in6 = 0) or parse6() (in6 = 1). */
static __noinline __u32 nat64(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	int icmp = p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6_;
	struct v6g_flow k __attribute__((aligned(8))) = {};
	struct v6g_nat64 *v;
	struct xargs a = {};
	__u32 rc;

	if (!(c->nat64.flags & V6G_XLAT_ON))
		return PASS(V6G_P_NO_MATCH);
	/* ICMP echo: the identifier is the IPv6 host's "port" (the source on
	 * the IPv6 side, the destination on the IPv4 side), the peer's is 0. */
	if (in6) {
		store6(k.src, p->src6);
		store6(k.dst, p->dst6);
		k.sport_be = bpf_htons(p->sport);
		k.dport_be = icmp ? 0 : bpf_htons(p->dport);
	} else {
		mapped4(k.src, p->src4);
		mapped4(k.dst, p->dst4);
		k.sport_be = icmp ? 0 : bpf_htons(p->sport);
		k.dport_be = bpf_htons(p->dport);
	}
	k.family = in6 ? 6 : 4;
	k.proto = p->proto;
	v = bpf_map_lookup_elem(&nat64_sessions, &k);
	if (!v)
		return PASS(V6G_P_NO_MATCH);
	if (tcp_control(p))
		return PASS(V6G_P_TCP_CONTROL);
	/* As nat64: 6->4 rewrites the source port (to t), 4->6 the destination
	 * port (to x); ICMP echo the identifier. */
	a.rw.port = bpf_ntohs(v->port_be);
	if (in6) {
		a.rw.which = PORT_SRC;
		a.src4 = load4(v->src + 12);
		a.dst4 = load4(v->dst + 12);
		a.ctr = V6G_C_NAT64_64;
		rc = xlat64(ctx, p, &c->nat64, &a);
	} else {
		a.rw.which = PORT_DST;
		a.src6 = load6(v->src);
		a.dst6 = load6(v->dst);
		a.ctr = V6G_C_NAT64_46;
		rc = xlat46(ctx, p, &c->nat64, &a);
	}
	if (!IS_PASS(rc))
		v->last_seen_ns = bpf_ktime_get_coarse_ns();
	return rc;
}

#endif
