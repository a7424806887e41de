/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The `null-xdp` device under test of `v6gate bench xlat` (crates/xdp
 * null.rs): attached to both DUT ports, it redirects every frame out of
 * the other port unchanged (no parsing, no translation, no lookup but the
 * one devmap entry of the ingress port). It is the physical limit of the
 * bench's path — veth in, XDP, a redirect, veth out — so every fast-path
 * figure reads as a fraction of it.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Ingress ifindex -> the port to send out of (set by userspace). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} null_peer SEC(".maps");

SEC("xdp")
int xdp_null(struct xdp_md *ctx)
{
	/* A port without an entry passes its frames to the stack. */
	return bpf_redirect_map(&null_peer, ctx->ingress_ifindex, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
