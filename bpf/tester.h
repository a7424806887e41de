/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The XDP tester's contract with userspace (crates/xdp/src/types.rs,
 * `tester` section: the one home; v6gate_abi.h asserts every size and
 * offset against it). Multi-byte fields are host order unless named _be.
 */
#ifndef V6GATE_TESTER_H
#define V6GATE_TESTER_H

#include <linux/types.h>
#include "v6gate_abi.h"

/* Generator: the single entry of tgen_config. */
struct v6g_tgen_config {
	__u32 nflows;  /* frames cycle through tgen_flows[0..nflows) */
	__u32 magic;   /* MAGIC_HI | trial id, written into every frame */
	__u16 udp_off; /* offset of the UDP header in the frame */
	__u8 v6;       /* 1: IPv6 (64 header bytes copied), 0: IPv4 (44),
	                * V6G_TGEN_4IN6: 4in6 (64 from V6G_TGEN_4IN6_OFF) */
	__u8 rtp;      /* RTP frames: RTP header after UDP, the stamp after it */
	__u32 ifindex; /* the sending port; frames of other interfaces pass */
};

/* One flow: the frame's first 64 bytes (4in6: the 64 from
 * V6G_TGEN_4IN6_OFF; headers, zero payload) and the
 * unfolded one's-complement sum (host-order 16-bit words, as
 * xlat::checksum::sum) of the UDP pseudo-header and datagram with the
 * checksum and the stamp fields zero. */
struct v6g_tgen_flow {
	__u8 hdr[64];
	__u64 base_sum;
};

/* Generator state: frames generated so far (the next sequence number). */
struct v6g_tgen_state {
	__u64 seq;
};

/* Receiver: the single entry of trecv_config. */
struct v6g_trecv_config {
	__u64 budget_ns;   /* later than this after its timestamp: late */
	__u32 magic;       /* frames of this trial */
	__u32 total;       /* sequence numbers 0..total; 0: closed (all foreign) */
	__u32 nflows;      /* learn the source of flows 0..nflows */
	__u8 sample_shift; /* a latency sample every 2^shift sequence numbers */
	__u8 rx_v6;        /* count only IPv6 (1) or only IPv4 (0) frames */
	__u8 learn;        /* record each flow's first source address and port */
	__u8 rtp;          /* the stamp follows a 12-byte RTP header */
};

/* Receiver counters (per CPU, summed by userspace). */
struct v6g_trecv_counts {
	__u64 received;  /* first arrivals (on time or late) */
	__u64 late;      /* first arrivals later than the budget */
	__u64 dup;       /* seen before */
	__u64 foreign;   /* not this trial's (another trial, out of range, other version) */
	__u64 sampled;   /* latency samples written to the ring */
	__u64 sample_lost; /* samples the ring had no room for */
};

/* Mean latency of one tenth of the trial (by sequence number). */
struct v6g_trecv_trend {
	__u64 sum_ns;
	__u64 count;
};

/* One latency sample in trecv_samples. */
struct v6g_trecv_sample {
	__u32 seq;
	__u32 lat_ns; /* at most the budget */
};

/* The source a flow's first frame arrived from (NAT64 learning). */
struct v6g_trecv_learned {
	__u32 seq1;  /* sequence number + 1 of that frame; 0: none yet */
	__be16 port_be;
	__u8 v6;
	__u8 pad;
	__u8 addr[16]; /* IPv4 in the first 4 bytes */
};

V6G_CHECK_TESTER_LAYOUT();

#endif
