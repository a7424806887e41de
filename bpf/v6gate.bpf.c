/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * v6gate XDP fast path: the programs. Each handles the common case of its
 * function completely and passes everything else to the slow path
 * unchanged, counting why (see common.h and docs/xdp.md).
 *
 *   xdp_siit    SIIT (RFC 7915 / RFC 6052 / RFC 7757)
 *   xdp_nat64   NAT64 established sessions (RFC 6146)
 *   xdp_trgw    TrGW media relay
 *   xdp_gate    everything the configuration turns on: TrGW relay ports
 *               first, then NAT64 sessions, then SIIT
 */
#include "siit.h"
#include "nat64.h"
#include "trgw.h"

V6G_INLINE __u32 ethertype(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return 0;
	return bpf_ntohs(eth->h_proto);
}

#define F_SIIT 1
#define F_NAT64 2
#define F_TRGW 4

V6G_INLINE __u32 dispatch(struct xdp_md *ctx, const struct v6g_config *c, int fns)
{
	__u32 et = ethertype(ctx), rc;
	struct pkt p = {};

	if (et == ETH_P_IP) {
		rc = parse4(ctx, &p);
		if (rc)
			return rc;
		rc = PASS(V6G_P_NO_MATCH);
		if (fns == F_TRGW)
			rc = trgw_inline(ctx, c, &p, 0);
		else if (fns & F_TRGW)
			rc = trgw(ctx, c, &p, 0);
		if ((fns & F_NAT64) && rc == PASS(V6G_P_NO_MATCH))
			rc = nat64(ctx, c, &p, 0);
		if ((fns & F_SIIT) && rc == PASS(V6G_P_NO_MATCH))
			rc = siit4(ctx, c, &p);
		return rc;
	}
	if (et == ETH_P_IPV6) {
		rc = parse6(ctx, &p);
		if (rc)
			return rc;
		rc = PASS(V6G_P_NO_MATCH);
		if (fns == F_TRGW)
			rc = trgw_inline(ctx, c, &p, 1);
		else if (fns & F_TRGW)
			rc = trgw(ctx, c, &p, 1);
		if ((fns & F_NAT64) && rc == PASS(V6G_P_NO_MATCH))
			rc = nat64(ctx, c, &p, 1);
		if ((fns & F_SIIT) && rc == PASS(V6G_P_NO_MATCH))
			rc = siit6(ctx, c, &p);
		return rc;
	}
	return PASS(V6G_P_NOT_IP);
}

SEC("xdp")
int xdp_siit(struct xdp_md *ctx)
{
	const struct v6g_config *c = get_config();

	if (!c)
		return XDP_PASS;
	return finish(ctx, dispatch(ctx, c, F_SIIT));
}

SEC("xdp")
int xdp_nat64(struct xdp_md *ctx)
{
	const struct v6g_config *c = get_config();

	if (!c)
		return XDP_PASS;
	return finish(ctx, dispatch(ctx, c, F_NAT64));
}

SEC("xdp")
int xdp_trgw(struct xdp_md *ctx)
{
	const struct v6g_config *c = get_config();

	if (!c)
		return XDP_PASS;
	return finish(ctx, dispatch(ctx, c, F_TRGW));
}

SEC("xdp")
int xdp_gate(struct xdp_md *ctx)
{
	const struct v6g_config *c = get_config();

	if (!c)
		return XDP_PASS;
	return finish(ctx, dispatch(ctx, c, F_SIIT | F_NAT64 | F_TRGW));
}

char LICENSE[] SEC("license") = "GPL";
