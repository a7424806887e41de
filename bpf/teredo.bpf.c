/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The Teredo relay fast path (RFC 4380 §5.4) in XDP: xdp_teredo, attached
 * to the relay's IPv4 and IPv6 interfaces (one program; it tells the two
 * sides apart by the EtherType).
 *
 * The slow path (crates/tunnel, the relay's UDP socket and TUN device)
 * owns everything stateful: the trust procedure (bubbles, queues, the
 * RFC 6081 mapping learnt from a symmetric NAT), expiry, ICMPv6. When a
 * peer becomes trusted it writes teredo_peers[Teredo address] = mapping;
 * it deletes the entry when the peer expires. Here, for such a peer only:
 *
 *   IPv4 side: a UDP datagram to the relay's address and port from exactly
 *   the peer's mapping, carrying a plain IPv6 packet (no origin indication
 *   or authentication header) from the peer's Teredo address to a global
 *   non-Teredo destination, leaves as that IPv6 packet (hop limit minus
 *   one, as the kernel forwarding it out of the TUN device would) towards
 *   the FIB's next hop; the entry's last_seen_ns is refreshed (the slow
 *   path keeps the peer alive with it).
 *
 *   IPv6 side: an IPv6 packet to the Teredo prefix whose destination is a
 *   trusted peer leaves in IPv4/UDP to the mapping, with the header the
 *   relay's unconnected UDP socket gives it on Linux: TOS 0, DF set,
 *   Identification 0, TTL from the config (64), source the relay's address
 *   and port, the UDP checksum computed. The hop limit is decremented
 *   first (the kernel forwarding it into the TUN device would).
 *
 * Anything else passes (XDP_PASS) unchanged, counted by reason: the
 * kernel and the slow path then do exactly what they do without XDP.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
/* util.h only: common.h's helpers come with the fast path's maps, which
 * this object must not create (ipv4 header and checksum sum are written
 * here again for that reason). */
#include "util.h"
#include "teredo.h"
#include "helpers.h"

#define TD_MAX_PKT 2048

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct td_config);
} teredo_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u8[16]);
	__type(value, struct td_peer);
} teredo_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TD_COUNTERS);
	__type(key, __u32);
	__type(value, struct v6g_count);
} teredo_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct v6g_ifmac);
} teredo_ifmac SEC(".maps");

/* The interfaces the fast path may send through (the ones it is attached to). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} teredo_tx SEC(".maps");

V6G_INLINE void count(__u32 idx, __u64 bytes)
{
	count_add(&teredo_counters, idx, 1, bytes);
}

/* The raw (memory-order) one's-complement sum of `len` bytes at `off`,
 * added to `*sum`. Returns 0, or -1 when the bytes are not all in the
 * frame. 128-byte unrolled blocks, then one block per bit of the rest. */
static __noinline int sum_bytes(struct xdp_md *ctx, __u32 off, __u32 len, __u64 *sum)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 s = 0;
	__u32 o = 0;
	int i;

	if (off > 256 || len > TD_MAX_PKT)
		return -1;
	for (i = 0; i < TD_MAX_PKT / 128; i++) {
		__u32 *q = data + off + o;

		if (o + 128 > len)
			break;
		if ((void *)q + 128 > end)
			return -1;
#pragma unroll
		for (int j = 0; j < 32; j++)
			s += q[j];
		o += 128;
	}
#define TD_BLOCK(n)                                                     \
	if ((len - o) & (n)) {                                          \
		__u32 *q = data + off + o;                              \
		if (o > TD_MAX_PKT || (void *)q + (n) > end)            \
			return -1;                                      \
		_Pragma("unroll") for (int j = 0; j < (n) / 4; j++)     \
			s += q[j];                                      \
		o += (n);                                               \
	}
	TD_BLOCK(64)
	TD_BLOCK(32)
	TD_BLOCK(16)
	TD_BLOCK(8)
	TD_BLOCK(4)
#undef TD_BLOCK
	if (o + 2 <= len) {
		__u16 *q = data + off + o;

		if (o > TD_MAX_PKT || (void *)(q + 1) > end)
			return -1;
		s += *q;
		o += 2;
	}
	if (o < len) {
		__u8 *q = data + off + o;

		if (o > TD_MAX_PKT || (void *)(q + 1) > end)
			return -1;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		s += *q;
#else
		s += (__u32)*q << 8;
#endif
	}
	*sum += s;
	return 0;
}

/* RFC 4291: not ::, ::1, link-local (fe80::/10) or multicast (ff00::/8);
 * as crates/tunnel's is_global_v6. */
V6G_INLINE int global6(const __u8 *a)
{
	if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
		return 0;
	if (LD32(a) == 0 && LD32(a + 4) == 0 && LD32(a + 8) == 0) {
		__u32 low = bpf_ntohl(LD32(a + 12));

		return low > 1;
	}
	return 1;
}

/* bpf_fib_lookup's verdict as 0 or PASS(reason), and the egress check. */
V6G_INLINE __u32 lookup(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	return fib_egress(ctx, fib, &teredo_tx, TD_P_TOO_BIG, TD_P_FIB, TD_P_EGRESS);
}

V6G_INLINE __u32 send(struct xdp_md *ctx, __u32 ifindex)
{
	return send_out(ctx, &teredo_tx, ifindex);
}

/* IPv4 side: a Teredo datagram from a trusted peer -> its IPv6 packet. */
/* The inner next headers both directions leave to the slow path: a bubble
 * (No Next Header), ICMPv6, a Fragment header. Their pass code, or 0. */
static __always_inline __u32 inner_nh_pass(__u8 nh)
{
	if (nh == 59)
		return PASS(TD_P_BUBBLE);
	if (nh == 58)
		return PASS(TD_P_ICMP);
	if (nh == 44)
		return PASS(TD_P_FRAGMENT);
	return 0;
}

static __noinline __u32 decap(struct xdp_md *ctx, const struct td_config *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct iphdr *ip = data + ETH_HLEN;
	struct udphdr *udp;
	struct td_peer *peer;
	__u8 key[16] __attribute__((aligned(4)));
	__u32 tot, ulen, plen, rc;
	__u64 sum = 0;
	__u8 *in;
	__u32 pass;

	if ((void *)(ip + 1) > end)
		return PASS(TD_P_MALFORMED);
	if (ip->protocol != IPPROTO_UDP || ip->daddr != c->relay_addr)
		return PASS(TD_P_NOT_TEREDO);
	if (ip->version != 4)
		return PASS(TD_P_MALFORMED);
	if (ip->ihl != 5)
		return PASS(TD_P_IPV4_OPTIONS);
	if (ip->frag_off & bpf_htons(0x3fff))
		return PASS(TD_P_FRAGMENT);
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return PASS(TD_P_MALFORMED);
	if (udp->dest != c->relay_port)
		return PASS(TD_P_NOT_TEREDO);
	tot = bpf_ntohs(ip->tot_len);
	ulen = bpf_ntohs(udp->len);
	if (tot != (__u32)(end - data) - ETH_HLEN || ulen != tot - 20)
		return PASS(TD_P_MALFORMED);
	in = (void *)(udp + 1);
	if ((void *)(in + 40) > end)
		return PASS(TD_P_MALFORMED);
	if ((in[0] >> 4) != 6)
		return in[0] == 0 ? PASS(TD_P_INDICATOR) : PASS(TD_P_MALFORMED);
	plen = bpf_ntohs(LD16(in + 4));
	if (ulen != 8 + 40 + plen)
		return PASS(TD_P_MALFORMED);
	if (bpf_ntohl(LD32(in + 8)) != c->prefix_hi32)
		return PASS(TD_P_UNTRUSTED);
	pass = inner_nh_pass(in[6]);
	if (pass)
		return pass;
	if (bpf_ntohl(LD32(in + 24)) == c->prefix_hi32 || !global6(in + 24))
		return PASS(TD_P_ADDRESS);
	if (in[7] <= 1)
		return PASS(TD_P_HOP_LIMIT);
	copy16(key, in + 8);
	peer = bpf_map_lookup_elem(&teredo_peers, key);
	if (!peer)
		return PASS(TD_P_UNTRUSTED);
	if (peer->addr != ip->saddr || peer->port != udp->source)
		return PASS(TD_P_SPOOFED);
	/* The IPv4 header checksum, and the UDP checksum unless it is zero
	 * (RFC 768: none sent), as the kernel checks them. */
	{
		__u16 *h = (__u16 *)ip;
		__u64 hs = 0;

#pragma unroll
		for (int i = 0; i < 10; i++)
			hs += h[i];
		if (fold(hs) != 0xffff)
			return PASS(TD_P_CHECKSUM);
	}
	if (udp->check) {
		sum = (__u64)ip->saddr + ip->daddr + bpf_htons(IPPROTO_UDP) + udp->len;
		if (sum_bytes(ctx, ETH_HLEN + 20, ulen, &sum) || fold(sum) != 0xffff)
			return PASS(TD_P_CHECKSUM);
		/* sum_bytes is a subprogram: the packet pointers are stale. */
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		in = data + ETH_HLEN + 28;
		if ((void *)(in + 40) > end)
			return PASS(TD_P_MALFORMED);
	}
	fib.family = AF_INET6;
	fib.l4_protocol = in[6];
	fib.tot_len = 40 + plen;
	fib.ifindex = ctx->ingress_ifindex;
	fib.flowinfo = LD32(in) & bpf_htonl(0x0fffffff);
	copy16(fib.ipv6_src, in + 8);
	copy16(fib.ipv6_dst, in + 24);
	rc = lookup(ctx, &fib);
	if (rc)
		return rc;
	/* Written at most once a millisecond: the entry's cache line is
	 * shared by every CPU the peer's packets arrive on. */
	peer = bpf_map_lookup_elem(&teredo_peers, key);
	if (peer) {
		__u64 now = bpf_ktime_get_ns();

		if (now - peer->last_seen_ns > 1000000)
			peer->last_seen_ns = now;
	}
	in[7]--;
	if (bpf_xdp_adjust_head(ctx, 28)) {
		/* The head did not move; the pointers are stale all the same. */
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		in = data + ETH_HLEN + 28;
		if ((void *)(in + 40) <= end)
			in[7]++;
		return PASS(TD_P_MALFORMED);
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN > end)
		return XDP_DROP; /* cannot happen: 28 bytes were there before */
	write_eth(data, &fib, ETH_P_IPV6);
	count(TD_C_DECAP, 40 + plen);
	return send(ctx, fib.ifindex);
}

/* IPv6 side: a packet to a trusted peer -> IPv4/UDP to its mapping. */
static __noinline __u32 encap(struct xdp_md *ctx, const struct td_config *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct td_peer *peer;
	__u8 key[16] __attribute__((aligned(4)));
	__u32 plen, total, ulen, rc, daddr;
	__u16 dport, hdr[14];
	__u64 sum = 0, hs = 0;
	__u8 *in = data + ETH_HLEN;
	__u32 pass;

	if ((void *)(in + 40) > end)
		return PASS(TD_P_MALFORMED);
	if ((in[0] >> 4) != 6)
		return PASS(TD_P_MALFORMED);
	if (bpf_ntohl(LD32(in + 24)) != c->prefix_hi32)
		return PASS(TD_P_NOT_TEREDO);
	plen = bpf_ntohs(LD16(in + 4));
	total = 40 + plen;
	if (total != (__u32)(end - data) - ETH_HLEN)
		return PASS(TD_P_MALFORMED);
	if (total > c->mtu6 || total > TD_MAX_PKT - 28)
		return PASS(TD_P_TOO_BIG);
	if (!global6(in + 8))
		return PASS(TD_P_ADDRESS);
	pass = inner_nh_pass(in[6]);
	if (pass)
		return pass;
	if (in[7] <= 1)
		return PASS(TD_P_HOP_LIMIT);
	copy16(key, in + 24);
	peer = bpf_map_lookup_elem(&teredo_peers, key);
	if (!peer)
		return PASS(TD_P_UNTRUSTED);
	daddr = peer->addr;
	dport = peer->port;
	fib.family = AF_INET;
	fib.l4_protocol = IPPROTO_UDP;
	fib.sport = c->relay_port;
	fib.dport = dport;
	fib.tot_len = total + 28;
	fib.ifindex = ctx->ingress_ifindex;
	fib.ipv4_src = c->relay_addr;
	fib.ipv4_dst = daddr;
	rc = lookup(ctx, &fib);
	if (rc)
		return rc;
	in[7]--;
	if (sum_bytes(ctx, ETH_HLEN, total, &sum)) {
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		in = data + ETH_HLEN;
		if ((void *)(in + 40) <= end)
			in[7]++;
		return PASS(TD_P_MALFORMED);
	}
	ulen = total + 8;
	/* The IPv4 header in host order, its checksum, then the UDP header. */
	hdr[0] = 0x4500;
	hdr[1] = total + 28;
	hdr[2] = 0;
	hdr[3] = 0x4000; /* DF */
	hdr[4] = ((__u16)c->ttl << 8) | IPPROTO_UDP;
	hdr[5] = 0;
	hdr[6] = bpf_ntohl(c->relay_addr) >> 16;
	hdr[7] = bpf_ntohl(c->relay_addr) & 0xffff;
	hdr[8] = bpf_ntohl(daddr) >> 16;
	hdr[9] = bpf_ntohl(daddr) & 0xffff;
#pragma unroll
	for (int i = 0; i < 10; i++)
		hs += hdr[i];
	hdr[5] = (__u16)~fold(hs);
#pragma unroll
	for (int i = 0; i < 10; i++)
		hdr[i] = bpf_htons(hdr[i]);
	hdr[10] = c->relay_port;
	hdr[11] = dport;
	hdr[12] = bpf_htons(ulen);
	/* Raw-domain sum: pseudo-header, UDP header, payload. */
	sum += (__u64)c->relay_addr + daddr + bpf_htons(IPPROTO_UDP) + hdr[12];
	sum += (__u64)hdr[10] + hdr[11] + hdr[12];
	hdr[13] = (__u16)~fold(sum);
	if (!hdr[13])
		hdr[13] = 0xffff;
	if (bpf_xdp_adjust_head(ctx, -28)) {
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		in = data + ETH_HLEN;
		if ((void *)(in + 40) <= end)
			in[7]++;
		return PASS(TD_P_MALFORMED);
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + 28 > end)
		return XDP_DROP; /* cannot happen: the packet was longer */
	write_eth(data, &fib, ETH_P_IP);
#pragma unroll
	for (int i = 0; i < 14; i++)
		ST16((__u8 *)data + ETH_HLEN + 2 * i, hdr[i]);
	count(TD_C_ENCAP, total);
	return send(ctx, fib.ifindex);
}

SEC("xdp")
int xdp_teredo(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct td_config *c;
	__u32 zero = 0, rc, len = end - data;

	c = bpf_map_lookup_elem(&teredo_config, &zero);
	if (!c || !(c->flags & TD_F_ON)) {
		rc = PASS(TD_P_DISABLED);
	} else if ((void *)(eth + 1) > end) {
		rc = PASS(TD_P_NOT_IP);
	} else if (!for_us(&teredo_ifmac, ctx, eth)) {
		rc = PASS(TD_P_OTHER_HOST);
	} else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		rc = decap(ctx, c);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		rc = encap(ctx, c);
	} else {
		rc = PASS(TD_P_NOT_IP);
	}
	if (rc & V6G_PASS_BIT) {
		count(rc & ~V6G_PASS_BIT, len);
		return XDP_PASS;
	}
	return rc;
}

char LICENSE[] SEC("license") = "GPL";
