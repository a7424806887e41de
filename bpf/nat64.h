/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * NAT64 sessions (RFC 6146) in XDP. The slow path (crates/nat64) creates
 * every session and mirrors the ones whose packets change nothing there
 * but the idle timer into nat64_sessions, one entry per direction keyed by
 * the packet's 5-tuple: UDP and ICMP echo from creation, TCP from
 * ESTABLISHED through the close (FIN RCV states), and a TCP session its
 * IPv6 SYN created (V6 INIT) at once, half-open (V6G_NAT64_F_HALF_OPEN).
 * Here a packet that matches is translated like the slow path does
 * (RFC 7915 headers with the session's addresses, then the one port or
 * ICMP identifier the session rewrites) and the entry's last-seen time is
 * refreshed, so the slow path does not expire a flow that only the fast
 * path sees. TCP SYN, FIN and RST go to the slow path (its state machine
 * stays the truth), but for the IPv4 side's SYN+ACK of a half-open
 * session: carried, and recorded in both entries (V6G_NAT64_F_SYN_ACK, an
 * atomic OR) for the slow path, which steps V6 INIT -> ESTABLISHED as if
 * it had seen it when it next handles the session; the session is carried
 * in full from then on. Every other packet of a half-open session passes.
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

/* The IPv4 side's SYN+ACK of half-open session `v` (the entry of key `k`)
 * is on its way: both entries record it. The IPv6 side's key is X:x ->
 * Y':y, i.e. v's destination and port, v's source, k's source port. */
V6G_INLINE void nat64_syn_ack(struct v6g_nat64 *v, const struct v6g_flow *k)
{
	struct v6g_flow k6 __attribute__((aligned(8))) = {};
	struct v6g_nat64 *o;

	__sync_fetch_and_or(&v->flags, V6G_NAT64_F_SYN_ACK);
	store6(k6.dst, load6(v->src));
	store6(k6.src, load6(v->dst));
	k6.sport_be = v->port_be;
	k6.dport_be = k->sport_be;
	k6.family = 6;
	k6.proto = IPPROTO_TCP;
	o = bpf_map_lookup_elem(&nat64_sessions, &k6);
	if (o)
		__sync_fetch_and_or(&o->flags, V6G_NAT64_F_SYN_ACK);
	count(V6G_C_NAT64_SYN_ACK, 0);
}

/* A packet parsed by parse4() (in6 = 0) or parse6() (in6 = 1). */
static __noinline __u32 nat64(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	int icmp = p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6_;
	struct v6g_flow k __attribute__((aligned(8))) = {};
	struct v6g_nat64 *v;
	struct xargs a = {};
	__u32 rc, flags;
	int half, syn_ack;

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
	flags = *(volatile __u32 *)&v->flags;
	half = (flags & (V6G_NAT64_F_HALF_OPEN | V6G_NAT64_F_SYN_ACK)) == V6G_NAT64_F_HALF_OPEN;
	syn_ack = half && !in6 && p->proto == IPPROTO_TCP && (p->tcp_flags & 0x17) == 0x12;
	if (!syn_ack && tcp_control(p))
		return PASS(V6G_P_TCP_CONTROL);
	if (!syn_ack && half)
		return PASS(V6G_P_HALF_OPEN);
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
	if (!IS_PASS(rc)) {
		v->last_seen_ns = bpf_ktime_get_coarse_ns();
		if (syn_ack)
			nat64_syn_ack(v, &k);
	}
	return rc;
}

#endif
