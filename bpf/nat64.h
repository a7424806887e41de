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
 * stays the truth), but for a FIN of a session carried in full when the
 * translator drains natpt_events (carried and told, see "FINs carried"
 * below) and for the IPv4 side's SYN+ACK of a half-open
 * session: carried, and recorded in both entries (V6G_NAT64_F_SYN_ACK, an
 * atomic OR) for the slow path, which steps V6 INIT -> ESTABLISHED as if
 * it had seen it when it next handles the session; the session is carried
 * in full from then on. Every other packet of a half-open session passes.
 */
#ifndef V6GATE_NAT64_H
#define V6GATE_NAT64_H

#include "xlat.h"
#include "portblock.h"

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

/* ---- NAT-PT and NAT64 sessions created here (issue #15) ------------------
 *
 * In NAT-PT mode a host X that holds a pool4 address T keeps its ports, so
 * the session of its SYN (X:x -> Y':y) is (T:x -> Y:y), known from the
 * packet and the host binding alone. The translator mirrors the bindings
 * (natpt_hosts), its pool4 (natpt_pool4) and what natpt_make[1] holds; the
 * program creates the session when every check the slow path's from6 makes
 * passes, tells the translator on natpt_events and translates the SYN as
 * the slow path would. In NAT64 (NAPT) mode (V6G_NATPT_MAKE_NAPT) the port
 * t comes from the host's port blocks (n64_*, below). */

/* natpt_hosts key: the IPv6 host's address. */
struct natpt_host_key {
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct natpt_host_key);
	__type(value, struct v6g_natpt_host);
} natpt_hosts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_lpm4);
	__type(value, __u8);
} natpt_pool4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct v6g_natpt_make);
} natpt_make SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} natpt_events SEC(".maps");

/* NAT64 (NAPT): the translator grants each IPv6 host blocks of pool4 TCP
 * ports (n64_blocks, a BPF_F_MMAPABLE array it maps too; bpf/portblock.h's
 * contract) and lists a host's in n64_hosts; it mirrors every TCP BIB entry
 * into n64_bib, and the program inserts its own there (BPF_NOEXIST) before
 * it creates a session: one mapping per X:x (RFC 6146 endpoint-independent
 * mapping), whoever makes it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct natpt_host_key);
	__type(value, struct v6g_n64_host);
} n64_hosts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, V6G_N64_BLOCK_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pb_block);
} n64_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 18);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v6g_n64_bib_key);
	__type(value, struct v6g_n64_bib);
} n64_bib SEC(".maps");

/* What the creation's steps hand on (a per-CPU scratch entry: the
 * subprograms' stacks add up along the call chain, 512 bytes at most). */
struct n64_made {
	__u32 t;	/* T, network order */
	__be16 tport_be; /* t */
	__u16 pad;
	__u32 slot;	/* NAT64: the block's n64_blocks index */
	__s32 idx;	/* NAT64: the port's index in it; -1: none taken */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct n64_made);
} n64_made SEC(".maps");

V6G_INLINE struct n64_made *made_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&n64_made, &zero);
}

/* A port from block `slot` (an n64_blocks index), or -1. A global
 * function: verified once on its own (pb_take is long once unrolled), not
 * again at each of its call sites. */
__attribute__((noinline)) int n64_take(__u32 slot, __u32 hint)
{
	struct pb_block *b = bpf_map_lookup_elem(&n64_blocks, &slot);

	if (!b)
		return -1;
	return pb_take(b, hint);
}

/* NAT64: a port for X:x (key k) from X's blocks, entered in n64_bib as
 * X:x's mapping; into the scratch entry. Returns 0, else PASS(reason)
 * with nothing taken. */
static __noinline __u32 n64_port(const struct v6g_flow *k)
{
	struct v6g_n64_bib_key bk __attribute__((aligned(8))) = {};
	struct v6g_n64_bib bv = {};
	struct v6g_n64_host *h;
	struct pb_block *b = 0;
	struct n64_made *m = made_scratch();
	__u32 hint = bpf_get_prandom_u32(), slot = 0;
	int idx = -1;

	if (!m)
		return PASS(V6G_P_NATPT_INSERT);
	m->idx = -1;
	if (bpf_ntohs(k->sport_be) < 1024)
		return PASS(V6G_P_NAT64_LOW_PORT);
	copy16(bk.x, k->src);
	bk.port_be = k->sport_be;
	if (bpf_map_lookup_elem(&n64_bib, &bk))
		return PASS(V6G_P_NAT64_BIB);
	h = bpf_map_lookup_elem(&n64_hosts, k->src);
	if (!h)
		return PASS(V6G_P_NAT64_NO_BLOCK);
#pragma unroll
	for (int i = 0; i < V6G_N64_BLOCKS; i++) {
		slot = h->slot[i];
		if (!slot)
			break;
		idx = n64_take(slot - 1, hint);
		if (idx >= 0)
			break;
	}
	if (idx < 0 || !slot)
		return PASS(V6G_P_NAT64_BLOCK_FULL);
	slot -= 1;
	b = bpf_map_lookup_elem(&n64_blocks, &slot);
	if (!b)
		return PASS(V6G_P_NAT64_BLOCK_FULL);
	ST32(bv.t, b->addr);
	bv.port_be = bpf_htons(b->base + idx);
	if (bpf_map_update_elem(&n64_bib, &bk, &bv, BPF_NOEXIST)) {
		pb_give(b, idx);
		return PASS(V6G_P_NAT64_BIB);
	}
	m->t = b->addr;
	m->tport_be = bv.port_be;
	m->slot = slot;
	m->idx = idx;
	return 0;
}

V6G_INLINE void mapped_from(__u8 *d, const __u8 *a4)
{
	ST32(d, 0);
	ST32(d + 4, 0);
	ST32(d + 8, bpf_htonl(0xffff));
	ST32(d + 12, LD32(a4));
}

/* Whether IPv6 SYN `p` (key `k`, no entry yet) may create its session, as
 * from6 would: 0 (NAT-PT: T and t in the scratch entry), 1 (NAT64: the
 * port is to be taken from the host's blocks), else PASS(reason). */
static __noinline __u32 natpt_check(const struct pkt *p, const struct v6g_flow *k)
{
	struct v6g_lpm4 pk __attribute__((aligned(8))) = {};
	struct v6g_natpt_make *mk, *ctl;
	struct v6g_natpt_host *h;
	struct n64_made *m;
	__u32 idx = 1;

	ctl = bpf_map_lookup_elem(&natpt_make, &idx);
	idx = 0;
	mk = bpf_map_lookup_elem(&natpt_make, &idx);
	m = made_scratch();
	if (!ctl || !mk || !m || !(ctl->flags & V6G_NATPT_MAKE_ON))
		return PASS(V6G_P_NO_MATCH);
	/* from6: the destination in pool6 (a /96: Y is its last 4 bytes). */
	if (LD32(k->dst) != LD32(ctl->pool6) || LD32(k->dst + 4) != LD32(ctl->pool6 + 4) ||
	    LD32(k->dst + 8) != LD32(ctl->pool6 + 8))
		return PASS(V6G_P_NO_MATCH);
	if (LD32(k->src) == LD32(ctl->pool6) && LD32(k->src + 4) == LD32(ctl->pool6 + 4) &&
	    LD32(k->src + 8) == LD32(ctl->pool6 + 8))
		return PASS(V6G_P_NATPT_HAIRPIN);
	if (forbidden6(p->src6) || forbidden4(load4(k->dst + 12)))
		return PASS(V6G_P_NATPT_FORBIDDEN);
	pk.prefixlen = 32;
	ST32(pk.addr, LD32(k->dst + 12));
	if (bpf_map_lookup_elem(&natpt_pool4, &pk))
		return PASS(V6G_P_NATPT_HAIRPIN);
	m->idx = -1;
	if (!(ctl->flags & V6G_NATPT_MAKE_NAPT)) {
		h = bpf_map_lookup_elem(&natpt_hosts, k->src);
		if (!h)
			return PASS(V6G_P_NATPT_NO_HOST);
		m->t = LD32(h->addr);
		m->tport_be = k->sport_be;
	}
	if (ctl->flags & V6G_NATPT_MAKE_HELD)
		return PASS(V6G_P_NATPT_HELD);
	if ((__s64)(ctl->n + *(volatile __u64 *)&mk->n) >= (__s64)ctl->limit)
		return PASS(V6G_P_NATPT_TABLE_FULL);
	if (bpf_ringbuf_query(&natpt_events, BPF_RB_AVAIL_DATA) + sizeof(struct v6g_natpt_event) + 8 >
	    bpf_ringbuf_query(&natpt_events, BPF_RB_RING_SIZE))
		return PASS(V6G_P_NATPT_RING_FULL);
	return (ctl->flags & V6G_NATPT_MAKE_NAPT) ? 1 : 0;
}

/* The session of IPv6 SYN `k` checked by natpt_check (and, NAT64, with
 * the port n64_port took), created as from6 would: both entries
 * (half-open) with BPF_NOEXIST, then the event. Returns 0 when the
 * session's entries are there (created here; NAT-PT: or by another CPU
 * or the slow path first, used as they are), else PASS(reason) with
 * nothing created and a NAT64 port given back. A subprogram: its stack
 * is its own, and calls nothing (the chain's 512 bytes). */
static __noinline __u32 natpt_make_session(const struct v6g_flow *k, __u32 napt)
{
	union {
		struct {
			struct v6g_flow k4;
			struct v6g_nat64 v;
		} e;
		struct v6g_natpt_event ev;
		struct v6g_n64_bib_key bk;
		__u32 idx;
	} u __attribute__((aligned(8)));
	struct v6g_natpt_make *mk;
	struct n64_made *m = made_scratch();
	struct pb_block *b;
	__u32 rc;

	u.idx = 0;
	mk = bpf_map_lookup_elem(&natpt_make, &u.idx);
	if (!mk || !m)
		return PASS(V6G_P_NATPT_INSERT);
	/* T and t: m->t, m->tport_be (the scratch entry, not copied: the
	 * stack is short). */
	/* IPv6 side X:x -> Y':y => T:t -> Y:y. */
	__builtin_memset(&u, 0, sizeof(u));
	mapped_from(u.e.v.src, (const __u8 *)&m->t);
	mapped_from(u.e.v.dst, k->dst + 12);
	u.e.v.port_be = m->tport_be;
	u.e.v.flags = V6G_NAT64_F_HALF_OPEN;
	if (bpf_map_update_elem(&nat64_sessions, k, &u.e.v, BPF_NOEXIST)) {
		/* NAT-PT's mapping is the same whoever made it; NAT64's port
		 * is this SYN's own: the other session stays, this goes back. */
		if (!napt && bpf_map_lookup_elem(&nat64_sessions, k)) {
			count(V6G_C_NATPT_RACE, 0);
			return 0;
		}
		rc = PASS(V6G_P_NATPT_INSERT);
		goto undo;
	}
	/* IPv4 side Y:y -> T:t => Y':y -> X:x. */
	copy16(u.e.k4.src, u.e.v.dst);
	copy16(u.e.k4.dst, u.e.v.src);
	u.e.k4.sport_be = k->dport_be;
	u.e.k4.dport_be = m->tport_be;
	u.e.k4.family = 4;
	u.e.k4.proto = IPPROTO_TCP;
	copy16(u.e.v.src, k->dst);
	copy16(u.e.v.dst, k->src);
	u.e.v.port_be = k->sport_be;
	if (bpf_map_update_elem(&nat64_sessions, &u.e.k4, &u.e.v, BPF_NOEXIST)) {
		bpf_map_delete_elem(&nat64_sessions, k);
		rc = PASS(V6G_P_NATPT_INSERT);
		goto undo;
	}
	__sync_fetch_and_add(&mk->n, 1);
	__builtin_memset(&u, 0, sizeof(u));
	copy16(u.ev.x, k->src);
	ST32(u.ev.y, LD32(k->dst + 12));
	ST32(u.ev.t, m->t);
	u.ev.sport_be = k->sport_be;
	u.ev.dport_be = k->dport_be;
	u.ev.proto = IPPROTO_TCP;
	u.ev.tport_be = m->tport_be;
	u.ev.ns = bpf_ktime_get_coarse_ns();
	/* No wake-up: the translator polls the ring (before each packet and
	 * each timer tick), nobody waits on it; a wake-up would queue an
	 * irq_work per event. */
	if (bpf_ringbuf_output(&natpt_events, &u.ev, sizeof(u.ev), BPF_RB_NO_WAKEUP)) {
		__sync_fetch_and_add(&mk->n, -1);
		/* The IPv4 side's key again (the union held it). */
		__builtin_memset(&u, 0, sizeof(u));
		mapped_from(u.e.k4.src, k->dst + 12);
		mapped_from(u.e.k4.dst, (const __u8 *)&m->t);
		u.e.k4.sport_be = k->dport_be;
		u.e.k4.dport_be = m->tport_be;
		u.e.k4.family = 4;
		u.e.k4.proto = IPPROTO_TCP;
		bpf_map_delete_elem(&nat64_sessions, &u.e.k4);
		bpf_map_delete_elem(&nat64_sessions, k);
		rc = PASS(V6G_P_NATPT_RING_FULL);
		goto undo;
	}
	count(napt ? V6G_C_NAT64_MADE : V6G_C_NATPT_MADE, 0);
	return 0;
undo:
	/* NAT64: X:x's mapping and its port were this SYN's: both go back. */
	if (napt && m->idx >= 0) {
		__builtin_memset(&u, 0, sizeof(u));
		copy16(u.bk.x, k->src);
		u.bk.port_be = k->sport_be;
		bpf_map_delete_elem(&n64_bib, &u.bk);
		u.idx = m->slot;
		b = bpf_map_lookup_elem(&n64_blocks, &u.idx);
		if (b)
			pb_give(b, m->idx);
	}
	return rc;
}

/* ---- FINs carried (issue #15) ----------------------------------------------
 *
 * With creation on (the translator drains natpt_events), a FIN without SYN
 * or RST of a session carried in full is forwarded here too and told to
 * the translator (kind FIN6 / FIN4, at its time), which steps RFC 6146's
 * state machine as if it had seen it. Room in the ring is checked before
 * the packet is translated (fin_room), the record written after
 * (fin_tell); the two are subprograms so that nat64()'s stack stays as
 * it is. */
static __noinline int fin_room(void)
{
	struct v6g_natpt_make *ctl;
	__u32 idx = 1;

	ctl = bpf_map_lookup_elem(&natpt_make, &idx);
	if (!ctl || !(ctl->flags & V6G_NATPT_MAKE_ON))
		return 0;
	return bpf_ringbuf_query(&natpt_events, BPF_RB_AVAIL_DATA) + sizeof(struct v6g_natpt_event) + 8 <=
	       bpf_ringbuf_query(&natpt_events, BPF_RB_RING_SIZE);
}

/* Session `v` (the entry of key `k`, a packet from the IPv6 side when
 * in6) carried a FIN: the record (X:x, Y:y, T:t as at creation). */
static __noinline void fin_tell(const struct v6g_flow *k, const struct v6g_nat64 *v, int in6)
{
	struct v6g_natpt_event ev __attribute__((aligned(8))) = {};

	if (in6) {
		copy16(ev.x, k->src);
		ST32(ev.y, LD32(k->dst + 12));
		ST32(ev.t, LD32(v->src + 12));
		ev.sport_be = k->sport_be;
		ev.dport_be = k->dport_be;
		ev.tport_be = v->port_be;
		ev.kind = V6G_NATPT_EV_FIN6;
	} else {
		copy16(ev.x, v->dst);
		ST32(ev.y, LD32(k->src + 12));
		ST32(ev.t, LD32(k->dst + 12));
		ev.sport_be = v->port_be;
		ev.dport_be = k->sport_be;
		ev.tport_be = k->dport_be;
		ev.kind = V6G_NATPT_EV_FIN4;
	}
	ev.proto = IPPROTO_TCP;
	ev.ns = bpf_ktime_get_coarse_ns();
	if (bpf_ringbuf_output(&natpt_events, &ev, sizeof(ev), BPF_RB_NO_WAKEUP) == 0)
		count(V6G_C_NAT64_FIN, 0);
}

/* A packet parsed by parse4() (in6 = 0) or parse6() (in6 = 1). */
static __noinline __u32 nat64(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p, int in6)
{
	int icmp = p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6_;
	struct v6g_flow k __attribute__((aligned(8))) = {};
	struct v6g_nat64 *v;
	struct xargs a = {};
	__u32 rc, flags;
	int half, syn_ack, made;

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
	made = 0;
	if (!v) {
		/* NAT-PT: an IPv6 host's SYN (no ACK, FIN or RST) may create it. */
		if (!in6 || p->proto != IPPROTO_TCP || (p->tcp_flags & 0x17) != TCP_SYN_)
			return PASS(V6G_P_NO_MATCH);
		/* Checked, (NAT64) a port taken, then created: three
		 * subprograms called one after the other, so that their stacks
		 * do not add up. */
		rc = natpt_check(p, &k);
		if (IS_PASS(rc))
			return rc;
		if (rc == 1) {
			rc = n64_port(&k);
			if (rc)
				return rc;
			rc = natpt_make_session(&k, 1);
		} else {
			rc = natpt_make_session(&k, 0);
		}
		if (rc)
			return rc;
		v = bpf_map_lookup_elem(&nat64_sessions, &k);
		if (!v)
			return PASS(V6G_P_NATPT_INSERT);
		made = 1;
	}
	flags = *(volatile __u32 *)&v->flags;
	half = (flags & (V6G_NAT64_F_HALF_OPEN | V6G_NAT64_F_SYN_ACK)) == V6G_NAT64_F_HALF_OPEN;
	syn_ack = half && !in6 && p->proto == IPPROTO_TCP && (p->tcp_flags & 0x17) == 0x12;
	/* 2: a FIN of a session carried in full, told to the translator. */
	if (!made && !half && p->proto == IPPROTO_TCP && (p->tcp_flags & 0x07) == TCP_FIN_ && fin_room())
		syn_ack = 2;
	if (!made && !syn_ack && tcp_control(p))
		return PASS(V6G_P_TCP_CONTROL);
	if (!made && !syn_ack && half)
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
		if (syn_ack == 1)
			nat64_syn_ack(v, &k);
		else if (syn_ack == 2)
			fin_tell(&k, v, in6);
	}
	return rc;
}

#endif
