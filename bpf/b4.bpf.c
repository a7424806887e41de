/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The kernel datapath of the stateless B4s (RFC 6333 §5: the DS-Lite B4,
 * no NAT; the DSTM host holding a lease): two programs, one object.
 *
 *   tc_b4_encap, tc egress (TCX) of the B4's TUN device, where the IPv4
 *   routes point: an IPv4 packet the userspace B4 would encapsulate
 *   whole (it fits the tunnel MTU) is encapsulated here exactly as the
 *   engine does (RFC 2473: Traffic Class from the TOS when configured,
 *   flow label 0, the Tunnel Encapsulation Limit option when configured,
 *   the configured hop limit less the one the kernel takes forwarding the
 *   engine's packet out of the TUN device), given the uplink's Ethernet
 *   header from bpf_fib_lookup (as from the TUN device) and redirected
 *   to the uplink.
 *
 *   xdp_b4_decap, XDP on the uplink: IPv4-in-IPv6 from the AFTR to the
 *   B4 address (no extension header, hop limit > 1: the kernel forwards
 *   it into the TUN device first) whose inner packet the engine would
 *   hand on unchanged: the outer header stripped, the EtherType set to
 *   IPv4, XDP_PASS. The stack then receives the inner packet on the
 *   uplink (not on the TUN device: docs/softwire.md).
 *
 * Anything else continues on its way to the TUN engine (TC_ACT_OK;
 * XDP_PASS unchanged), counted by reason: IPv6 from the engine's own
 * traffic, GSO packets, packets over the tunnel MTU (the engine
 * fragments the outer packet, RFC 6333 §5.3), outer fragments (the
 * engine reassembles), ICMPv6 (errors relayed to the inner source),
 * extension headers, IPv4 options, a missing route or neighbour.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "util.h"
#include "b4.h"
#include "ifmac.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct b4_config);
} b4_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, B4_COUNTERS);
	__type(key, __u32);
	__type(value, struct b4_count);
} b4_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct b4_mac);
} b4_ifmac SEC(".maps");

/* The uplinks (the interfaces xdp_b4_decap is attached to): the only
 * interfaces tc_b4_encap redirects to. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} b4_tx SEC(".maps");

V6G_INLINE void count(__u32 idx, __u64 bytes)
{
	struct b4_count *c = bpf_map_lookup_elem(&b4_counters, &idx);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

V6G_INLINE const struct b4_config *config(void)
{
	__u32 zero = 0;
	const struct b4_config *c = bpf_map_lookup_elem(&b4_config, &zero);

	return c && (c->flags & B4_F_ON) ? c : 0;
}

V6G_INLINE int same16(const __u8 *a, const __u8 *b)
{
	return LD32(a) == LD32(b) && LD32(a + 4) == LD32(b + 4) && LD32(a + 8) == LD32(b + 8) &&
	       LD32(a + 12) == LD32(b + 12);
}

V6G_INLINE void copy16(__u8 *d, const __u8 *s)
{
	ST32(d, LD32(s));
	ST32(d + 4, LD32(s + 4));
	ST32(d + 8, LD32(s + 8));
	ST32(d + 12, LD32(s + 12));
}

/* The inner IPv4 header as the engine accepts it (Ipv4Packet::new and
 * checksum_ok): version 4, no options, a total length of exactly `len`, a
 * header checksum that verifies. 0 when it is, else the counter index of
 * the pass (B4_P_*). */
V6G_INLINE __u32 v4_header_bad(const struct iphdr *ip, void *end, __u32 len)
{
	__u64 hs = 0;
	__u32 tot;

	if ((void *)(ip + 1) > end)
		return B4_P_MALFORMED;
	if (ip->version != 4 || ip->ihl < 5)
		return B4_P_MALFORMED;
	if (ip->ihl != 5)
		return B4_P_OPTIONS;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < 20 || tot != len)
		return B4_P_MALFORMED;
#pragma unroll
	for (int i = 0; i < 10; i++)
		hs += ((const __u16 *)ip)[i];
	if (fold(hs) != 0xffff)
		return B4_P_CHECKSUM;
	return 0;
}

/* The outer header: Ethernet, IPv6 and the optional limit option (the
 * leading pad aligns the IPv6 header for word stores). */
struct outer {
	__u8 pad[2];
	__u8 eth[ETH_HLEN];
	__u8 ip6[40];
	__u8 opt[8];
} __attribute__((aligned(4)));

/* IPv4 -> softwire. Returns B4_C_ENCAP (redirected), -1 (drop) or the
 * counter index of a pass. */
static __noinline int encap(struct __sk_buff *skb, const struct b4_config *c)
{
	struct bpf_fib_lookup fib = {};
	struct outer h = {};
	struct iphdr *ip;
	void *data, *end;
	__u32 l2 = c->l2len > ETH_HLEN ? ETH_HLEN : c->l2len;
	__u32 len, tot, hlen, total, w0, bad;
	long rc;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return B4_P_NOT_IP;
	if (skb->gso_size)
		return B4_P_GSO;
	if (skb->len < l2 + 20)
		return B4_P_MALFORMED;
	len = skb->len - l2;
	if (bpf_skb_pull_data(skb, l2 + 20))
		return B4_P_MALFORMED;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	ip = data + l2;
	/* Ipv4Packet::new and checksum_ok, as the engine checks them. */
	bad = v4_header_bad(ip, end, len);
	if (bad)
		return bad;
	tot = len;
	hlen = (c->flags & B4_F_ENCAP_LIMIT) ? 48 : 40;
	total = tot + hlen;
	if (total > c->mtu)
		return B4_P_TOO_BIG;
	/* The kernel forwards the engine's tunnel packet out of the TUN device. */
	if (c->hop_limit <= 1)
		return B4_P_TTL;
	w0 = bpf_htonl((6u << 28) | ((__u32)((c->flags & B4_F_COPY_TOS) ? ip->tos : 0) << 20));
	fib.family = AF_INET6;
	fib.l4_protocol = hlen == 48 ? 60 : IPPROTO_IPIP;
	fib.tot_len = total;
	fib.ifindex = c->tun_ifindex;
	fib.flowinfo = w0 & bpf_htonl(0x0fffffff);
	copy16((__u8 *)fib.ipv6_src, c->local);
	copy16((__u8 *)fib.ipv6_dst, c->aftr);
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return B4_P_TOO_BIG;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return B4_P_FIB;
	if (!bpf_map_lookup_elem(&b4_tx, &fib.ifindex))
		return B4_P_EGRESS;
	__builtin_memcpy(h.eth, fib.dmac, 6);
	__builtin_memcpy(h.eth + 6, fib.smac, 6);
	h.eth[12] = 0x86;
	h.eth[13] = 0xdd;
	ST32(h.ip6, w0);
	ST16(h.ip6 + 4, bpf_htons(total - 40));
	h.ip6[6] = hlen == 48 ? 60 : IPPROTO_IPIP;
	h.ip6[7] = c->hop_limit - 1;
	/* From the config: bpf_fib_lookup wrote the next hop over ipv6_dst. */
	copy16(h.ip6 + 8, c->local);
	copy16(h.ip6 + 24, c->aftr);
	/* RFC 2473 §5.1: the limit option and a PadN, as the engine writes them. */
	h.opt[0] = IPPROTO_IPIP;
	h.opt[2] = 4;
	h.opt[3] = 1;
	h.opt[4] = c->encap_limit;
	h.opt[5] = 1;
	h.opt[6] = 1;
	/* An L3 skb (the TUN device) gets its MAC header here, for the L2 uplink. */
	if (bpf_skb_change_head(skb, ETH_HLEN + hlen - l2, 0))
		return B4_P_MALFORMED;
	if (hlen == 48)
		rc = bpf_skb_store_bytes(skb, 0, h.eth, ETH_HLEN + 48, 0);
	else
		rc = bpf_skb_store_bytes(skb, 0, h.eth, ETH_HLEN + 40, 0);
	if (rc)
		return -1; /* cannot happen: the room was just made */
	count(B4_C_ENCAP, tot);
	bpf_redirect(fib.ifindex, 0);
	return B4_C_ENCAP;
}

SEC("classifier")
int tc_b4_encap(struct __sk_buff *skb)
{
	const struct b4_config *c = config();
	__u32 len = skb->len;
	int rc;

	if (!c) {
		count(B4_P_DISABLED, len);
		return TC_ACT_OK;
	}
	rc = encap(skb, c);
	if (rc == B4_C_ENCAP)
		return TC_ACT_REDIRECT;
	if (rc < 0)
		return TC_ACT_SHOT;
	count(rc, len);
	return TC_ACT_OK;
}

/* Softwire -> IPv4: B4_C_DECAP (decapsulated), or the counter index of a pass. */
static __noinline __u32 decap(struct xdp_md *ctx, const struct b4_config *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 *o = data + ETH_HLEN;
	__u16 macs[6];
	struct iphdr *ip;
	__u32 plen, bad;

	if ((void *)(o + 40) > end)
		return B4_P_MALFORMED;
	if ((o[0] >> 4) != 6)
		return B4_P_MALFORMED;
	if (!same16(o + 24, c->local))
		return B4_P_NOT_OURS;
	plen = bpf_ntohs(LD16(o + 4));
	if (40 + plen > (__u32)(end - data) - ETH_HLEN)
		return B4_P_MALFORMED;
	if (o[6] == 44)
		return B4_P_FRAGMENT;
	if (o[6] == 58)
		return B4_P_ICMP;
	if (o[6] == 0 || o[6] == 43 || o[6] == 60)
		return B4_P_OPTIONS;
	if (o[6] != IPPROTO_IPIP)
		return B4_P_NOT_OURS;
	if (!same16(o + 8, c->aftr))
		return B4_P_UNKNOWN_AFTR;
	/* The kernel forwards the tunnel packet into the TUN device first. */
	if (o[7] <= 1)
		return B4_P_TTL;
	/* ip4in6::decap: the inner packet exactly fills the payload, its
	 * header checksum verifies. */
	ip = (struct iphdr *)(o + 40);
	bad = v4_header_bad(ip, end, plen);
	if (bad)
		return bad;
	/* Ethernet padding after a short packet: the kernel trims it. */
	if ((__u32)(end - data) > ETH_HLEN + 40 + plen &&
	    bpf_xdp_adjust_tail(ctx, -(int)((__u32)(end - data) - ETH_HLEN - 40 - plen)))
		return B4_P_MALFORMED;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return B4_P_MALFORMED;
#pragma unroll
	for (int i = 0; i < 6; i++)
		macs[i] = ((__u16 *)eth)[i];
	if (bpf_xdp_adjust_head(ctx, 40))
		return B4_P_MALFORMED; /* the head did not move */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return B4_P_MALFORMED; /* cannot happen: the inner header was there */
#pragma unroll
	for (int i = 0; i < 6; i++)
		((__u16 *)eth)[i] = macs[i];
	eth->h_proto = bpf_htons(ETH_P_IP);
	count(B4_C_DECAP, plen);
	return B4_C_DECAP;
}

SEC("xdp")
int xdp_b4_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct b4_config *c = config();
	__u32 rc, len = end - data;

	if (!c)
		rc = B4_P_DISABLED;
	else if ((void *)(eth + 1) > end)
		rc = B4_P_NOT_IP;
	else if (!for_us(&b4_ifmac, ctx, eth))
		rc = B4_P_OTHER_HOST;
	else if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		rc = B4_P_NOT_IP;
	else
		rc = decap(ctx, c);
	if (rc != B4_C_DECAP)
		count(rc, len);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
