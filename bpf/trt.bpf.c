/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The TRT relay's in-kernel copy (crates/trt, loaded by crates/xdp's
 * sockmap module): a stream-verdict program on a sockhash that redirects
 * every byte a relayed socket receives to the send side of its peer
 * socket, so bulk data never wakes the relay and never passes through
 * user space.
 *
 *   trt_socks  SOCKHASH, socket cookie -> the socket (the relay inserts
 *              both sockets of a pair once the IPv4 side is connected).
 *   trt_pairs  HASH, socket cookie -> struct trt_pair: the peer's cookie,
 *              the bytes redirected so far (the relay compares them with
 *              what the peer has sent before it passes a FIN on), and a
 *              sticky "user" flag.
 *   trt_verdict  the sk_skb stream verdict.
 *
 * A socket whose peer is not (or no longer) in trt_socks cannot be
 * redirected: its data is passed to its own receive queue instead
 * (SK_PASS) and the pair is flagged "user" for good, so that direction is
 * copied by the relay in user space from then on, in order — dropping
 * would lose bytes TCP has already acknowledged. The relay inserts the
 * client socket first, so only client bytes arriving in the microseconds
 * between the two inserts can take that path.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Sizes are set by the loader (max-connections). */
struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, 2048);
    __type(key, __u64);
    __type(value, __u32); /* a socket fd on update */
} trt_socks SEC(".maps");

struct trt_pair {
    __u64 peer;   /* the peer socket's cookie */
    __u64 bytes;  /* bytes redirected to the peer */
    __u64 user;   /* 1: a redirect failed; user space copies */
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 2048);
    __type(key, __u64);
    __type(value, struct trt_pair);
} trt_pairs SEC(".maps");

SEC("sk_skb/stream_verdict")
int trt_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct trt_pair *p = bpf_map_lookup_elem(&trt_pairs, &cookie);
    if (!p)
        return SK_PASS;
    if (p->user)
        return SK_PASS;
    __u32 len = skb->len;
    /* The FIN's own skb carries no bytes: redirected, the peer's send
     * work would take its zero-length send for a broken pipe. The FIN is
     * passed on by the relay (shutdown) once the bytes before it are out. */
    if (len == 0)
        return SK_DROP;
    if (bpf_sk_redirect_hash(skb, &trt_socks, &p->peer, 0) != SK_PASS) {
        p->user = 1;
        return SK_PASS;
    }
    __sync_fetch_and_add(&p->bytes, len);
    return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
