/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The ingress-MAC check of the single-program objects (teredo, softwire;
 * their loader is crates/xdp/src/single.rs, which records each attached
 * interface's MAC address in the object's ifindex -> MAC hash map).
 */
#ifndef V6GATE_IFMAC_H
#define V6GATE_IFMAC_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "util.h"

/* The frame is addressed to the ingress interface: unicast, and its MAC
 * when the loader recorded it in `ifmac` (a value whose first 6 bytes are
 * the address); any unicast destination on an interface without an entry. */
V6G_INLINE int for_us(void *ifmac, struct xdp_md *ctx, const struct ethhdr *eth)
{
	__u32 in = ctx->ingress_ifindex;
	const __u8 *m;

	if (eth->h_dest[0] & 1)
		return 0;
	m = bpf_map_lookup_elem(ifmac, &in);
	if (!m)
		return 1;
	return LD32(eth->h_dest) == LD32(m) && LD16(eth->h_dest + 4) == LD16(m + 4);
}

#endif
