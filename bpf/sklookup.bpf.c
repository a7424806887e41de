/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The TrGW's shared-socket media mode ([trgw] sockets = "shared"):
 * a BPF_PROG_TYPE_SK_LOOKUP program attached to the daemon's network
 * namespace (bpf_link). For every UDP packet the kernel is about to look a
 * socket up for, it looks the destination (family, address, port) up in
 * trgw_sk_ports, which the relay fills with the media ports it allocated
 * (and empties when it frees them); a hit names an index in trgw_sk_socks,
 * the worker's shared socket of that family, and the packet is assigned to
 * it (bpf_sk_assign). Anything else — other protocols, other addresses,
 * media ports not allocated — goes on to the kernel's normal lookup, so a
 * port the relay does not hold is never taken from another program.
 *
 * The worker learns the original destination with IP_RECVORIGDSTADDR /
 * IPV6_RECVORIGDSTADDR and finds the leg by it (crates/trgw/src/shared.rs).
 *
 * Key (struct v6g_sk_key, crates/xdp/src/sklookup.rs `port_key`): the
 * local address in network order, IPv4 as IPv4-mapped (::ffff:a.b.c.d);
 * the local port in network order; the family (4 or 6); one zero byte.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "v6gate_abi.h"

#define V6G_AF_INET 2
#define V6G_AF_INET6 10

/* struct v6g_sk_key and the counter indices (SK_*) are declared in
 * crates/xdp/src/types/sklookup.rs, generated into v6gate_abi.h. */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct v6g_sk_key);
	__type(value, __u32);
} trgw_sk_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32); /* a socket's descriptor on update (aya's SockMap) */
} trgw_sk_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SK_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} trgw_sk_counters SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&trgw_sk_counters, &i);
	if (c)
		*c += 1;
}

SEC("sk_lookup")
int trgw_sk_lookup(struct bpf_sk_lookup *ctx)
{
	struct v6g_sk_key k = {};
	struct bpf_sock *sk;
	__u32 *idx;
	long err;

	/* Every field is read unconditionally (the ones of the other family
	 * read as zero): the verifier refuses a load through a context
	 * pointer the compiler would otherwise merge from two branches. */
	__u32 protocol = ctx->protocol, family = ctx->family, ip4 = ctx->local_ip4;
	__u32 a0 = ctx->local_ip6[0], a1 = ctx->local_ip6[1], a2 = ctx->local_ip6[2], a3 = ctx->local_ip6[3];
	__u32 port = ctx->local_port;

	if (protocol != IPPROTO_UDP)
		return SK_PASS;
	if (family == V6G_AF_INET) {
		k.addr[2] = bpf_htonl(0xffff);
		k.addr[3] = ip4;
		k.family = 4;
	} else if (family == V6G_AF_INET6) {
		k.addr[0] = a0;
		k.addr[1] = a1;
		k.addr[2] = a2;
		k.addr[3] = a3;
		k.family = 6;
	} else {
		return SK_PASS;
	}
	/* local_port is in host byte order in the context. */
	k.port_be = bpf_htons((__u16)port);
	idx = bpf_map_lookup_elem(&trgw_sk_ports, &k);
	if (!idx)
		return SK_PASS;
	sk = bpf_map_lookup_elem(&trgw_sk_socks, idx);
	if (!sk) {
		count(SK_NO_SOCKET);
		return SK_PASS;
	}
	err = bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	count(err ? SK_ASSIGN_FAILED : SK_STEERED);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
