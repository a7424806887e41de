/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * SIIT (RFC 7915) in XDP: the stateless address mapping — RFC 7757 EAMT
 * in two LPM tries, then the RFC 6052 prefix of any allowed length (u
 * octet skipped, Well-Known Prefix restricted to global IPv4 addresses) —
 * as xlat::addr::Mapper does it, and the two entry points.
 */
#ifndef V6GATE_SIIT_H
#define V6GATE_SIIT_H

#include "xlat.h"

/* RFC 6890 "Globally Reachable = False" blocks, as xlat::addr::rfc6052::is_global_v4. */
V6G_INLINE int is_global4(__u32 a)
{
	__u32 o0 = a >> 24, o1 = (a >> 16) & 0xff, o2 = (a >> 8) & 0xff;

	switch (o0) {
	case 0: case 10: case 127:
		return 0;
	case 100:
		return (o1 & 0xc0) != 64;
	case 169:
		return o1 != 254;
	case 172:
		return (o1 & 0xf0) != 16;
	case 192:
		if (o1 == 0 && o2 == 0)
			return a == 0xc0000009 || a == 0xc000000a;
		if (o1 == 0 && o2 == 2)
			return 0;
		return o1 != 168;
	case 198:
		return !((o1 & 0xfe) == 18 || (o1 == 51 && o2 == 100));
	case 203:
		return !(o1 == 0 && o2 == 113);
	}
	return o0 < 240;
}

/* ---- RFC 7757 EAMT ------------------------------------------------------------ */

/* Within the span of the EAMT (as xlat::addr::Eamt checks first). */
V6G_INLINE int in_span4(const struct v6g_config *c, __u32 a)
{
	return a >= load4(c->eam4_lo) && a <= load4(c->eam4_hi);
}

V6G_INLINE int in_span6(const struct v6g_config *c, struct a6 a)
{
	struct a6 lo = load6(c->eam6_lo), hi = load6(c->eam6_hi);

	if (a.hi < lo.hi || (a.hi == lo.hi && a.lo < lo.lo))
		return 0;
	return !(a.hi > hi.hi || (a.hi == hi.hi && a.lo > hi.lo));
}

V6G_INLINE __u32 eam_suffix4(__u8 len4)
{
	return len4 >= 32 ? 0 : (__u32)((1ULL << (32 - len4)) - 1);
}

V6G_INLINE int eam_4to6(__u32 a, struct a6 *out)
{
	struct v6g_lpm4 k = { .prefixlen = 32 };
	struct v6g_eam *e;
	__u64 x;
	__u32 sh;

	store4(k.addr, a);
	e = bpf_map_lookup_elem(&eamt4, &k);
	if (!e)
		return 0;
	*out = load6(e->net6);
	x = a & eam_suffix4(e->len4);
	sh = e->shift & 127;
	if (sh >= 64) {
		out->hi |= x << (sh - 64);
	} else {
		out->lo |= x << sh;
		if (sh)
			out->hi |= x >> (64 - sh);
	}
	return 1;
}

/* Returns 1 and the IPv4 address when an EAM covers `a`. */
V6G_INLINE int eam_6to4(struct a6 a, __u32 *out)
{
	struct v6g_lpm6 k = { .prefixlen = 128 };
	struct v6g_eam *e;
	__u64 v;
	__u32 sh;

	store6(k.addr, a);
	e = bpf_map_lookup_elem(&eamt6, &k);
	if (!e)
		return 0;
	sh = e->shift & 127;
	if (sh >= 64)
		v = a.hi >> (sh - 64);
	else if (sh == 0)
		v = a.lo;
	else
		v = (a.lo >> sh) | (a.hi << (64 - sh));
	*out = load4(e->net4) | ((__u32)v & eam_suffix4(e->len4));
	return 1;
}

V6G_INLINE int eam_covers4(__u32 a)
{
	struct v6g_lpm4 k = { .prefixlen = 32 };

	store4(k.addr, a);
	return bpf_map_lookup_elem(&eamt4, &k) != 0;
}

/* ---- RFC 6052 ----------------------------------------------------------------- */

V6G_INLINE int pool6_embed(const struct v6g_config *c, __u32 a, struct a6 *out)
{
	__u32 len = c->pool6_len, lo_bits;

	if (!len)
		return 0;
	if ((c->siit.flags & V6G_XLAT_POOL6_WKP) && !is_global4(a))
		return 0;
	*out = load6(c->pool6);
	if (len == 96) {
		out->lo |= a;
		return 1;
	}
	if (len < 32 || len > 64)
		return 0;
	/* IPv4 bits before the u octet end the upper half; the rest follow
	 * the u octet (bits 72..) in the lower half. */
	lo_bits = len - 32;
	out->hi |= (__u64)a >> lo_bits;
	out->lo |= ((__u64)a & ((1ULL << lo_bits) - 1)) << (56 - lo_bits);
	return 1;
}

V6G_INLINE int pool6_extract(const struct v6g_config *c, struct a6 a, __u32 *out)
{
	__u32 len = c->pool6_len, lo_bits;
	struct a6 p;
	__u64 hi, lo;

	if (!len)
		return 0;
	p = load6(c->pool6);
	if (len == 96) {
		if (a.hi != p.hi || (a.lo >> 32) != (p.lo >> 32))
			return 0;
		*out = (__u32)a.lo;
	} else {
		if (len < 32 || len > 64)
			return 0;
		if (len == 64 ? a.hi != p.hi : (a.hi >> (64 - len)) != (p.hi >> (64 - len)))
			return 0;
		lo_bits = len - 32;
		hi = a.hi & ((1ULL << (32 - lo_bits)) - 1);
		lo = (a.lo >> (56 - lo_bits)) & ((1ULL << lo_bits) - 1);
		*out = (__u32)((hi << lo_bits) | lo);
	}
	if ((c->siit.flags & V6G_XLAT_POOL6_WKP) && !is_global4(*out))
		return 0;
	return 1;
}

/* xlat::addr::Mapper: EAMT first (RFC 7757 §3.3), then pool6. */
V6G_INLINE int siit_map46(const struct v6g_config *c, __u32 a, struct a6 *out)
{
	if ((c->siit.flags & V6G_XLAT_HAVE_EAMT) && in_span4(c, a) && eam_4to6(a, out))
		return 1;
	return pool6_embed(c, a, out);
}

V6G_INLINE int siit_map64(const struct v6g_config *c, struct a6 a, __u32 *out, int *by_eam)
{
	*by_eam = 0;
	if ((c->siit.flags & V6G_XLAT_HAVE_EAMT) && in_span6(c, a) && eam_6to4(a, out)) {
		*by_eam = 1;
		return 1;
	}
	return pool6_extract(c, a, out);
}

/* ---- entry points --------------------------------------------------------------- */

/* An IPv4 packet parsed by parse4(). */
static __noinline __u32 siit4(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p)
{
	struct xargs a = { .rw = { .which = PORT_NONE }, .ctr = V6G_C_SIIT_46 };

	if (!(c->siit.flags & V6G_XLAT_ON))
		return PASS(V6G_P_NO_MATCH);
	/* §4.1: never-translated addresses (the slow path drops them). */
	if (forbidden4(p->src4) || forbidden4(p->dst4))
		return PASS(V6G_P_ADDRESS);
	if (!siit_map46(c, p->dst4, &a.dst6))
		return PASS(V6G_P_NO_MATCH);
	/* RFC 7757 §4.2.1 (simple hairpinning): sources through pool6 only. */
	if (c->siit.flags & V6G_XLAT_EAM_SIMPLE) {
		if (!pool6_embed(c, p->src4, &a.src6))
			return PASS(V6G_P_NO_MATCH);
	} else if (!siit_map46(c, p->src4, &a.src6)) {
		return PASS(V6G_P_NO_MATCH);
	}
	return xlat46(ctx, p, &c->siit, &a);
}

/* An IPv6 packet parsed by parse6(). */
static __noinline __u32 siit6(struct xdp_md *ctx, const struct v6g_config *c, const struct pkt *p)
{
	struct xargs a = { .rw = { .which = PORT_NONE }, .ctr = V6G_C_SIIT_64 };
	__u32 s4, d4;
	int dst_eam, src_eam;

	if (!(c->siit.flags & V6G_XLAT_ON))
		return PASS(V6G_P_NO_MATCH);
	if (forbidden6(p->src6) || forbidden6(p->dst6))
		return PASS(V6G_P_ADDRESS);
	if (!siit_map64(c, p->dst6, &d4, &dst_eam) || !siit_map64(c, p->src6, &s4, &src_eam))
		return PASS(V6G_P_NO_MATCH);
	if (forbidden4(s4) || forbidden4(d4))
		return PASS(V6G_P_ADDRESS);
	/* RFC 7757 §4.2.2 (intrinsic hairpinning): a pool6 destination whose
	 * IPv4 form is an EAM address is turned around by the slow path. */
	if ((c->siit.flags & V6G_XLAT_EAM_HAIRPIN) && (c->siit.flags & V6G_XLAT_HAVE_EAMT) && !dst_eam &&
	    in_span4(c, d4) && eam_covers4(d4))
		return PASS(V6G_P_ADDRESS);
	a.src4 = s4;
	a.dst4 = d4;
	return xlat64(ctx, p, &c->siit, &a);
}

#endif
