/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The kernel datapath of the B4s (RFC 6333 §5: the DS-Lite B4, no NAT;
 * the DSTM host holding a lease; the host-integrated lwB4 (RFC 7596),
 * for the host's own packets): two programs, one object.
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
 *   Both ways, a TCP SYN's MSS option above mss_max (the tunnel MTU less
 *   the outer, IPv4 and TCP headers) is lowered to it, the TCP checksum
 *   updated incrementally, as the engine does (b4::clamp_mss): bulk TCP
 *   then fits the tunnel unfragmented.
 *
 *   A TCP GSO packet (the B4 host's own bulk TCP: the stack hands tc
 *   egress the unsegmented skb) whose segments fit the tunnel MTU is
 *   encapsulated with bpf_skb_adjust_room(BPF_F_ADJ_ROOM_ENCAP_L3_IPV6),
 *   so that the kernel segments it after the encapsulation, each segment
 *   an IPv4-in-IPv6 packet as the engine would send it.
 *
 * The lwB4 (B4_F_HOST): its NAPT stays in the engine; the kernel path
 * carries only the host's own traffic, which needs no translation: the
 * host's IPv4 stack uses the binding's address and the ports of its port
 * set within [host_first, host_last] (`[b4] host-ports`, which the NAPT
 * never allocates). Egress: source address the binding's, source port
 * (TCP, UDP; the ICMP echo identifier) the host's; ingress: destination
 * address and port the host's. Everything else, the NAPT's mappings,
 * inner fragments and ICMP errors included, goes to the engine.
 *
 * Anything else continues on its way to the TUN engine (TC_ACT_OK;
 * XDP_PASS unchanged), counted by reason: IPv6 from the engine's own
 * traffic, other GSO packets, packets over the tunnel MTU (the engine
 * fragments the outer packet, RFC 6333 §5.3), outer fragments (the
 * engine reassembles), ICMPv6 (errors relayed to the inner source),
 * extension headers, IPv4 options, SYNs whose TCP options do not parse,
 * a missing route or neighbour.
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
#include "helpers.h"

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
	__type(value, struct v6g_count);
} b4_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct v6g_ifmac);
} b4_ifmac SEC(".maps");

/* The uplinks (the interfaces xdp_b4_decap is attached to): the only
 * interfaces tc_b4_encap redirects to. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} b4_tx SEC(".maps");

V6G_INLINE void count_n(__u32 idx, __u32 packets, __u64 bytes)
{
	count_add(&b4_counters, idx, packets, bytes);
}

V6G_INLINE void count(__u32 idx, __u64 bytes)
{
	count_n(idx, 1, bytes);
}

V6G_INLINE const struct b4_config *config(void)
{
	__u32 zero = 0;
	const struct b4_config *c = bpf_map_lookup_elem(&b4_config, &zero);

	return c && (c->flags & B4_F_ON) ? c : 0;
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

/* lwB4 (B4_F_HOST): is `port` one of the host's? In [host_first,
 * host_last] and in the binding's port set (RFC 7597 §5.1: the PSID field
 * the binding's, A = 0 nobody's), as portset.rs's PsidMap::allowed. */
V6G_INLINE int host_port(const struct b4_config *c, __u32 port)
{
	__u32 a = c->psid_offset & 15, k = c->psid_len & 15;

	if (port < c->host_first || port > c->host_last)
		return 0;
	if (!k)
		return 1;
	if (a && !(port >> ((16 - a) & 15)))
		return 0;
	return ((port >> ((16 - a - k) & 15)) & ((1u << k) - 1)) == c->psid;
}

/* lwB4 (B4_F_HOST): 0 when IPv4 packet `ip` (header checked, `len` bytes,
 * the first min(len, 28) of them in [ip, end)) is the host's own, as the
 * engine's B4::host_packet decides: the binding's address (egress: the
 * source; ingress: the destination), not a fragment, a TCP or UDP header
 * or an ICMP echo request or reply whose port (egress: the source port;
 * ingress: the destination port; echo: the identifier) is the host's.
 * Else the counter index of the pass. */
V6G_INLINE __u32 not_host(const struct b4_config *c, const struct iphdr *ip, const void *end, __u32 len,
			  int egress)
{
	const __u8 *l4 = (const __u8 *)(ip + 1);
	__u32 need, port;

	if ((egress ? ip->saddr : ip->daddr) != LD32(c->host_addr))
		return B4_P_NAPT;
	if (ip->frag_off & bpf_htons(0x3fff))
		return B4_P_HOST_OTHER;
	if (ip->protocol == IPPROTO_TCP)
		need = 20;
	else if (ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_ICMP)
		need = 8;
	else
		return B4_P_HOST_OTHER;
	if (len < 20 + need || (const void *)(l4 + 8) > end)
		return B4_P_HOST_OTHER;
	if (ip->protocol == IPPROTO_ICMP) {
		if (l4[0] != 0 && l4[0] != 8)
			return B4_P_HOST_OTHER; /* an error: the engine relays it */
		port = LD16(l4 + 4);
	} else {
		port = egress ? LD16(l4) : LD16(l4 + 2);
	}
	return host_port(c, bpf_ntohs(port)) ? 0 : B4_P_NAPT;
}

/* TCP MSS clamping, as the engine's b4::clamp_mss. MSS_NONE: nothing to
 * do (not a whole TCP segment with SYN set, no MSS option); MSS_BAD: the
 * TCP header or its options do not parse (the engine counts it and leaves
 * it untouched); else the offset of the MSS value from the TCP header. */
#define MSS_NONE 0
#define MSS_BAD 1

/* The options walk (RFC 9293 §3.2): end of list, no-operation, and
 * kind-length-value; the first MSS option (kind 2, length 4) is the one.
 * The caller has checked that tcp + optend is within the packet. */
V6G_INLINE __u32 mss_at(const __u8 *tcp, const void *end, __u32 optend)
{
	__u32 pos = 20;

	/* Every step moves on by one byte at least: 40 steps cover 40 bytes of options. */
	for (int i = 0; i < 40; i++) {
		const __u8 *p;
		__u32 l;

		if (pos >= optend)
			return MSS_NONE;
		p = tcp + (pos & 63);
		/* Within the packet (the caller checked optend): for the verifier. */
		if ((const void *)(p + 1) > end)
			return MSS_BAD;
		if (p[0] == 0)
			return MSS_NONE;
		if (p[0] == 1) {
			pos++;
			continue;
		}
		if (pos + 2 > optend || (const void *)(p + 2) > end)
			return MSS_BAD;
		l = p[1];
		if (l < 2 || pos + l > optend)
			return MSS_BAD;
		if (p[0] == 2)
			return l == 4 && (const void *)(p + 4) <= end ? pos + 2 : MSS_BAD;
		pos += l;
	}
	return MSS_NONE;
}

/* The MSS option of IPv4 packet `ip` (header verified, no options, `len`
 * bytes, the first min(len, 80) of them in [ip, end)). */
V6G_INLINE __u32 mss_find(const struct iphdr *ip, const void *end, __u32 len)
{
	const __u8 *tcp = (const __u8 *)(ip + 1);
	__u32 optend;

	if (ip->protocol != IPPROTO_TCP || (ip->frag_off & bpf_htons(0x3fff)) || len < 40)
		return MSS_NONE;
	if ((const void *)(tcp + 20) > end)
		return MSS_BAD; /* cannot happen: the caller has the first 40 bytes */
	if (!(tcp[13] & 0x02))
		return MSS_NONE;
	optend = (__u32)(tcp[12] >> 4) * 4;
	if (optend < 20 || optend > len - 20)
		return MSS_BAD;
	return mss_at(tcp, end, optend);
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
	const __u8 *tcp;
	void *data, *end;
	__u32 l2 = c->l2len > ETH_HLEN ? ETH_HLEN : c->l2len;
	__u32 gso = skb->gso_size, segs = skb->gso_segs;
	__u32 len, seg, hlen, total, w0, bad, mss = MSS_NONE;
	__u16 mss_old = 0, mss_new = bpf_htons(c->mss_max);
	__u8 tos;
	long rc;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return B4_P_NOT_IP;
	if (skb->len < l2 + 20)
		return B4_P_MALFORMED;
	len = skb->len - l2;
	if (bpf_skb_pull_data(skb, l2 + 20))
		return B4_P_MALFORMED;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	ip = data + l2;
	/* Ipv4Packet::new and checksum_ok, as the engine checks them (a GSO
	 * packet's header is the one its segments copy). */
	bad = v4_header_bad(ip, end, len);
	if (bad)
		return bad;
	if (c->flags & B4_F_HOST) {
		/* The lwB4: the host's own packets only. */
		if (bpf_skb_pull_data(skb, l2 + (len < 28 ? len : 28)))
			return B4_P_MALFORMED;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		ip = data + l2;
		if ((void *)(ip + 1) > end)
			return B4_P_MALFORMED;
		bad = not_host(c, ip, end, len, 1);
		if (bad)
			return bad;
	}
	tos = ip->tos;
	hlen = (c->flags & B4_F_ENCAP_LIMIT) ? 48 : 40;
	seg = len;
	if (gso) {
		/* TCP segments the kernel cuts after the encapsulation, each an
		 * IPv4-in-IPv6 packet fitting the tunnel. Anything else (UDP GSO)
		 * the TUN read segments and the engine fragments. */
		if (ip->protocol != IPPROTO_TCP || len < 40 || bpf_skb_pull_data(skb, l2 + 40))
			return B4_P_GSO;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		tcp = data + l2 + 20;
		if ((void *)(tcp + 20) > end)
			return B4_P_GSO;
		seg = 20 + (__u32)(tcp[12] >> 4) * 4 + gso;
		if (seg + hlen > c->mtu)
			return B4_P_GSO;
	} else if (c->mss_max && ip->protocol == IPPROTO_TCP) {
		/* The TCP header with the longest options. */
		if (bpf_skb_pull_data(skb, l2 + (len < 80 ? len : 80)))
			return B4_P_MALFORMED;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		ip = data + l2;
		if ((void *)(ip + 1) > end)
			return B4_P_MALFORMED;
		mss = mss_find(ip, end, len);
		if (mss == MSS_BAD)
			return B4_P_TCP_OPTIONS;
		if (mss != MSS_NONE) {
			tcp = (const __u8 *)(ip + 1) + (mss & 63);
			if ((void *)(tcp + 2) > end)
				return B4_P_MALFORMED;
			mss_old = LD16(tcp);
			if (bpf_ntohs(mss_old) <= c->mss_max)
				mss = MSS_NONE;
		}
	}
	total = seg + hlen;
	if (total > c->mtu)
		return B4_P_TOO_BIG;
	/* The kernel forwards the engine's tunnel packet out of the TUN device. */
	if (c->hop_limit <= 1)
		return B4_P_TTL;
	w0 = bpf_htonl((6u << 28) | ((__u32)((c->flags & B4_F_COPY_TOS) ? tos : 0) << 20));
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
	/* From here on the packet is ours: nothing is passed changed. The MSS
	 * (bpf_l4_csum_replace leaves a CHECKSUM_PARTIAL sum, which the
	 * transmit completes over the new option, alone). */
	if (mss != MSS_NONE) {
		if (bpf_l4_csum_replace(skb, l2 + 20 + 16, mss_old, mss_new, 2) ||
		    bpf_skb_store_bytes(skb, l2 + 20 + (mss & 63), &mss_new, 2, 0))
			return -1; /* cannot happen: the bytes were pulled */
		count(B4_C_MSS_CLAMPED, len);
	}
	__builtin_memcpy(h.eth, fib.dmac, 6);
	__builtin_memcpy(h.eth + 6, fib.smac, 6);
	h.eth[12] = 0x86;
	h.eth[13] = 0xdd;
	ST32(h.ip6, w0);
	/* A GSO packet's: rewritten per segment by the segmentation. */
	total = len + hlen;
	ST16(h.ip6 + 4, bpf_htons(total - 40 > 0xffff ? 0xffff : total - 40));
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
	if (gso) {
		/* The room as an IPv6 encapsulation (skb->encapsulation, the inner
		 * headers, SKB_GSO_IPXIP6), the segment size kept; then the MAC
		 * header for the L2 uplink. */
		if (bpf_skb_adjust_room(skb, hlen, BPF_ADJ_ROOM_MAC,
					BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | BPF_F_ADJ_ROOM_FIXED_GSO))
			return B4_P_GSO;
		if (l2 < ETH_HLEN && bpf_skb_change_head(skb, ETH_HLEN - l2, 0))
			return -1; /* the room for the inner packet is made already */
	} else if (bpf_skb_change_head(skb, ETH_HLEN + hlen - l2, 0)) {
		/* An L3 skb (the TUN device) gets its MAC header here, for the L2 uplink. */
		return B4_P_MALFORMED;
	}
	if (hlen == 48)
		rc = bpf_skb_store_bytes(skb, 0, h.eth, ETH_HLEN + 48, 0);
	else
		rc = bpf_skb_store_bytes(skb, 0, h.eth, ETH_HLEN + 40, 0);
	if (rc)
		return -1; /* cannot happen: the room was just made */
	count_n(B4_C_ENCAP, gso ? (segs ? segs : 1) : 1, len);
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
	__u32 plen, bad, mss = MSS_NONE;

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
	/* The lwB4: the host's own packets only (the NAPT's to the engine). */
	if (c->flags & B4_F_HOST) {
		bad = not_host(c, ip, end, plen, 0);
		if (bad)
			return bad;
	}
	/* A SYN's MSS option: found here (options that do not parse go to the
	 * engine), lowered once the packet is decapsulated. */
	if (c->mss_max) {
		mss = mss_find(ip, end, plen);
		if (mss == MSS_BAD)
			return B4_P_TCP_OPTIONS;
	}
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
	if (mss != MSS_NONE) {
		__u8 *tcp = data + ETH_HLEN + 20;
		__u8 *m = tcp + (mss & 63);
		__u16 old, new = bpf_htons(c->mss_max);

		if ((void *)(tcp + 20) > end || (void *)(m + 2) > end)
			return B4_C_DECAP; /* cannot happen: mss_find saw them */
		old = LD16(m);
		if (bpf_ntohs(old) > c->mss_max) {
			ST16(m, new);
			ST16(tcp + 16, csum_update(LD16(tcp + 16), old, new));
			count(B4_C_MSS_CLAMPED, plen);
		}
	}
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
