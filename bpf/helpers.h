/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The helpers every forwarding BPF object shares (the gateway's in
 * common.h, the softwire, Teredo and B4 objects): the pass verdict, the
 * per-CPU counters, the FIB lookup with its egress check, the Ethernet
 * header and the send, and the ingress-MAC check of the single-program
 * objects (their loader, crates/xdp/src/single.rs, records each attached
 * interface's MAC address in the object's ifindex -> struct v6g_ifmac
 * hash map). Each object passes its own maps and pass reasons; everything
 * is inlined, so the map references stay constants.
 */
#ifndef V6GATE_HELPERS_H
#define V6GATE_HELPERS_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "v6gate_abi.h"
#include "util.h"

/* A pass to the slow path for `reason` (a counter index of the object). */
#define V6G_PASS_BIT 0x100u
#define PASS(reason) (V6G_PASS_BIT | (reason))
#define IS_PASS(rc) ((rc) & V6G_PASS_BIT)

/* Add `packets` and `bytes` to counter `idx` of the per-CPU array
 * `counters` (struct v6g_count values). */
V6G_INLINE void count_add(void *counters, __u32 idx, __u32 packets, __u64 bytes)
{
	struct v6g_count *c = bpf_map_lookup_elem(counters, &idx);

	if (c) {
		c->packets += packets;
		c->bytes += bytes;
	}
}

/* The Ethernet header of a packet bpf_fib_lookup routed: its next hop's
 * and egress interface's MACs, and `proto`. */
V6G_INLINE void write_eth(void *data, const struct bpf_fib_lookup *fib, __u16 proto)
{
	__u16 *m = data;

	m[0] = LD16(fib->dmac);
	m[1] = LD16(fib->dmac + 2);
	m[2] = LD16(fib->dmac + 4);
	m[3] = LD16(fib->smac);
	m[4] = LD16(fib->smac + 2);
	m[5] = LD16(fib->smac + 4);
	m[6] = bpf_htons(proto);
}

/* bpf_fib_lookup's verdict as 0 or PASS(reason): `too_big` when the
 * packet needs fragmenting, `no_route` for any other failure, `egress`
 * when the egress interface is not in the devmap `tx`. */
V6G_INLINE __u32 fib_egress(struct xdp_md *ctx, struct bpf_fib_lookup *fib, void *tx, __u32 too_big,
			    __u32 no_route, __u32 egress)
{
	long rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);

	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return PASS(too_big);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return PASS(no_route);
	if (!bpf_map_lookup_elem(tx, &fib->ifindex))
		return PASS(egress);
	return 0;
}

/* Send out of `ifindex`: back out of the ingress interface, or redirected
 * through the devmap `tx` (up the stack should the entry have gone). */
V6G_INLINE __u32 send_out(struct xdp_md *ctx, void *tx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(tx, ifindex, XDP_PASS);
}

/* The frame is addressed to the ingress interface: unicast, and its MAC
 * when the loader recorded it in `ifmac` (a struct v6g_ifmac); any unicast
 * destination on an interface without an entry. */
V6G_INLINE int for_us(void *ifmac, struct xdp_md *ctx, const struct ethhdr *eth)
{
	__u32 in = ctx->ingress_ifindex;
	const struct v6g_ifmac *m;

	if (eth->h_dest[0] & 1)
		return 0;
	m = bpf_map_lookup_elem(ifmac, &in);
	if (!m)
		return 1;
	return LD32(eth->h_dest) == LD32(m->addr) && LD16(eth->h_dest + 4) == LD16(m->addr + 4);
}

#endif
