/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The XDP tester of `v6gate bench` (crates/bench, `--tester xdp`):
 *
 *   xdp_tgen   the generator, run by userspace with BPF_PROG_RUN in live
 *              frames mode (BPF_F_TEST_XDP_LIVE_FRAMES, the xdp-trafficgen
 *              approach): each run turns the kernel's copy of the frame
 *              into the next frame of the trial — the flow's headers
 *              (RFC 4814 ports, per-flow addresses), a CLOCK_MONOTONIC
 *              timestamp, the sequence number, the flow index and the
 *              trial's magic, the UDP checksum — and sends it out of the
 *              tester port (XDP_TX from the port given as ingress).
 *              Frames are IPv4, IPv6 or 4in6 (RFC 2473: an IPv4 UDP
 *              packet in an outer IPv6 header, next header 4, as a B4
 *              sends to its AFTR; the UDP checksum is the inner one).
 *   xdp_trecv  the counting receiver, attached to the other tester port:
 *              judges each test frame as the userspace Tally does (first
 *              arrival / duplicate by a bitmap, late against the budget,
 *              a latency trend per tenth of the trial), writes a latency
 *              sample every 2^k frames to a ring buffer, learns each
 *              flow's translated source, and drops the frame. A 4in6
 *              frame is judged by its inner IPv4 UDP packet and counts as
 *              IPv6 (its outer version). Frames that are not test frames
 *              pass.
 *
 * The payload layout is crates/bench/src/tester/frame.rs's:
 *   ts_ns (8, BE) | seq (4, BE) | flow (2, BE) | magic (4, BE)
 * right after the UDP header, or, in RTP mode (`bench trgw`), after a
 * 12-byte RTP header the generator writes per frame: V=2, PT 0 (PCMU),
 * SSRC V6G_RTP_SSRC_BASE + flow, and from the flow's packet number
 * n = seq / nflows (flows are sent round-robin, so n counts the flow's
 * own packets) the RTP sequence number n mod 2^16 and timestamp n * 160
 * (20 ms of 8 kHz audio per packet).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "tester.h"
#include "util.h"

#define INLINE V6G_INLINE
#define UDP_LEN 8
#define STAMP_LEN 18

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_tgen_config);
} tgen_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct v6g_tgen_flow);
} tgen_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_tgen_state);
} tgen_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_trecv_config);
} trecv_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v6g_trecv_counts);
} trecv_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V6G_TREND_SLOTS);
	__type(key, __u32);
	__type(value, struct v6g_trecv_trend);
} trecv_trend SEC(".maps");

/* One bit per sequence number (sized by the loader). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} trecv_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} trecv_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct v6g_trecv_learned);
} trecv_learned SEC(".maps");

/* The host-order 16-bit-word sum of a u64 / u32 value's big-endian bytes. */
INLINE __u64 words64(__u64 v)
{
	return (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
}

INLINE __u64 words32(__u32 v)
{
	return (v >> 16) + (v & 0xffff);
}

SEC("xdp")
int xdp_tgen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const struct v6g_tgen_config *c;
	const struct v6g_tgen_flow *f;
	struct v6g_tgen_state *st;
	__u32 zero = 0, flow, seq, off;
	__u64 ts, sum;
	__u16 csum;
	__u8 *p, *s;

	c = bpf_map_lookup_elem(&tgen_config, &zero);
	st = bpf_map_lookup_elem(&tgen_state, &zero);
	if (!c || !st || !c->nflows || ctx->ingress_ifindex != c->ifindex)
		return XDP_PASS;
	/* One generator thread at a time, and a run never migrates: a plain
	 * increment is exact. */
	seq = (__u32)st->seq;
	st->seq++;
	flow = seq % c->nflows;
	f = bpf_map_lookup_elem(&tgen_flows, &flow);
	if (!f)
		return XDP_DROP;
	/* The flow's headers (the rest of the copied bytes is payload the
	 * stamp overwrites next, or zeros as in the template). */
	if (c->v6 == V6G_TGEN_4IN6) {
		/* The 64 bytes from the outer payload length on: the outer
		 * addresses, the inner IPv4 and UDP headers. The MACs, the
		 * EtherType and the outer version/class/flow label before them
		 * are the template's, the same for every flow. */
		if (data + V6G_TGEN_4IN6_OFF + 64 > end)
			return XDP_DROP;
#pragma unroll
		for (int i = 0; i < 16; i++)
			ST32(data + V6G_TGEN_4IN6_OFF + 4 * i, LD32((const __u8 *)f->hdr + 4 * i));
	} else if (c->v6) {
		if (data + 64 > end)
			return XDP_DROP;
#pragma unroll
		for (int i = 0; i < 16; i++)
			ST32(data + 4 * i, LD32((const __u8 *)f->hdr + 4 * i));
	} else {
		if (data + 44 > end)
			return XDP_DROP;
#pragma unroll
		for (int i = 0; i < 11; i++)
			ST32(data + 4 * i, LD32((const __u8 *)f->hdr + 4 * i));
	}
	off = c->udp_off;
	if (off > V6G_TGEN_4IN6_OFF + 64)
		return XDP_DROP;
	p = data + off;
	sum = f->base_sum;
	if (c->rtp) {
		__u32 n = seq / c->nflows, rts = n * 160, ssrc = V6G_RTP_SSRC_BASE + flow;

		if ((void *)(p + UDP_LEN + V6G_RTP_HEADER_LEN + STAMP_LEN) > end)
			return XDP_DROP;
		ST16(p + 8, bpf_htons(0x8000)); /* V=2, M=0, PT=0 */
		ST16(p + 10, bpf_htons((__u16)n));
		ST32(p + 12, bpf_htonl(rts));
		ST32(p + 16, bpf_htonl(ssrc));
		sum += 0x8000 + (__u16)n + words32(rts) + words32(ssrc);
		s = p + UDP_LEN + V6G_RTP_HEADER_LEN;
	} else {
		if ((void *)(p + UDP_LEN + STAMP_LEN) > end)
			return XDP_DROP;
		s = p + UDP_LEN;
	}
	ts = bpf_ktime_get_ns();
	ST32(s, bpf_htonl(ts >> 32));
	ST32(s + 4, bpf_htonl((__u32)ts));
	ST32(s + 8, bpf_htonl(seq));
	ST16(s + 12, bpf_htons((__u16)flow));
	ST32(s + 14, bpf_htonl(c->magic));
	sum += words64(ts) + words32(seq) + (__u16)flow + words32(c->magic);
	csum = ~fold(sum);
	/* RFC 768: a computed zero is sent as all ones. */
	if (!csum)
		csum = 0xffff;
	ST16(p + 6, bpf_htons(csum));
	return XDP_TX;
}

/* ---- receiver --------------------------------------------------------------- */

INLINE void count_foreign(struct v6g_trecv_counts *n)
{
	n->foreign++;
}

/* An unfragmented IPv4 UDP packet without options (the tester's frames). */
INLINE int udp4(const struct iphdr *ip)
{
	return ip->version == 4 && ip->ihl == 5 && ip->protocol == IPPROTO_UDP &&
	       !(ip->frag_off & bpf_htons(0x3fff));
}

SEC("xdp")
int xdp_trecv(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const struct v6g_trecv_config *c;
	struct v6g_trecv_counts *n;
	struct v6g_trecv_trend *tr;
	struct ethhdr *eth = data;
	__u32 zero = 0, seq, magic, word, tenth, is6, src6;
	__u64 ts, now, lat, bit, old, *w;
	__u16 flow, sport_be;
	__u8 *pl, *src, *st;

	struct iphdr *ip4 = NULL;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end)
			return XDP_PASS;
		if (ip->nexthdr == IPPROTO_UDP) {
			src = (__u8 *)&ip->saddr;
			pl = (__u8 *)(ip + 1);
		} else if (ip->nexthdr == IPPROTO_IPIP) {
			/* 4in6: the inner IPv4 packet is the test frame. */
			ip4 = (void *)(ip + 1);
		} else {
			return XDP_PASS;
		}
		is6 = 1;
	} else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		ip4 = (void *)(eth + 1);
		is6 = 0;
	} else {
		return XDP_PASS;
	}
	src6 = !ip4;
	if (ip4) {
		if ((void *)(ip4 + 1) > end || !udp4(ip4))
			return XDP_PASS;
		src = (__u8 *)&ip4->saddr;
		pl = (__u8 *)(ip4 + 1);
	}
	c = bpf_map_lookup_elem(&trecv_config, &zero);
	if (!c)
		return XDP_PASS;
	/* The stamp: right after the UDP header, or after the RTP header. */
	st = pl + UDP_LEN;
	if (c->rtp)
		st += V6G_RTP_HEADER_LEN;
	if ((void *)(st + STAMP_LEN) > end)
		return XDP_PASS;
	magic = bpf_ntohl(LD32(st + 14));
	if ((magic & 0xffff0000) != V6G_TESTER_MAGIC_HI)
		return XDP_PASS; /* not a test frame: the tester's kernel decides */
	n = bpf_map_lookup_elem(&trecv_counts, &zero);
	if (!n)
		return XDP_DROP;
	seq = bpf_ntohl(LD32(st + 8));
	if (magic != c->magic || seq >= c->total || is6 != c->rx_v6) {
		count_foreign(n);
		return XDP_DROP;
	}
	word = seq >> 6;
	w = bpf_map_lookup_elem(&trecv_seen, &word);
	if (!w) {
		count_foreign(n);
		return XDP_DROP;
	}
	bit = 1ULL << (seq & 63);
	old = __sync_fetch_and_or(w, bit);
	if (old & bit) {
		n->dup++;
		return XDP_DROP;
	}
	now = bpf_ktime_get_ns();
	ts = ((__u64)bpf_ntohl(LD32(st)) << 32) | bpf_ntohl(LD32(st + 4));
	lat = now > ts ? now - ts : 0;
	n->received++;
	tenth = (__u32)(((__u64)seq * V6G_TREND_SLOTS) / c->total);
	tr = bpf_map_lookup_elem(&trecv_trend, &tenth);
	if (tr) {
		tr->sum_ns += lat;
		tr->count++;
	}
	if (lat > c->budget_ns) {
		n->late++;
	} else if (!(seq & ((1u << (c->sample_shift & 31)) - 1))) {
		struct v6g_trecv_sample s = { .seq = seq, .lat_ns = (__u32)lat };

		if (bpf_ringbuf_output(&trecv_samples, &s, sizeof(s), 0))
			n->sample_lost++;
		else
			n->sampled++;
	}
	if (c->learn) {
		struct v6g_trecv_learned *l;
		__u32 fl;

		flow = bpf_ntohs(*(__u16 *)(void *)(st + 12));
		fl = flow;
		sport_be = *(__u16 *)(void *)pl;
		if (fl < c->nflows) {
			l = bpf_map_lookup_elem(&trecv_learned, &fl);
			if (l && (!l->seq1 || seq + 1 < l->seq1)) {
				l->seq1 = seq + 1;
				l->port_be = sport_be;
				l->v6 = src6;
				if (src6) {
					ST32(l->addr, LD32(src));
					ST32(l->addr + 4, LD32(src + 4));
					ST32(l->addr + 8, LD32(src + 8));
					ST32(l->addr + 12, LD32(src + 12));
				} else {
					ST32(l->addr, LD32(src));
				}
			}
		}
	}
	return XDP_DROP;
}

/*
 * The live frames probe (xdp::tester::live_frames): run once with
 * BPF_PROG_RUN in live frames mode to learn whether the kernel grants that
 * mode; it drops its frame, so the probe sends nothing.
 */
SEC("xdp")
int xdp_tprobe(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
