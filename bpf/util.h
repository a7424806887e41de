/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Small helpers shared by every v6gate BPF object (the fast path and the
 * tester): inlining, word access at unaligned addresses, 16-byte copy and
 * compare, the checksum fold and update.
 */
#ifndef V6GATE_UTIL_H
#define V6GATE_UTIL_H

#include <linux/types.h>

#define V6G_INLINE static __always_inline

/* Address families for bpf_fib_lookup (the UAPI headers do not carry
 * them). */
#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* The header translation (xlat46/xlat64): inlined into its callers (siit4,
 * siit6, nat64), saving one BPF-to-BPF call per packet, which returns
 * through the SRSO return thunk on this CPU (SIIT ~105 -> ~94 ns, NAT64
 * ~138 -> ~124). The callers stay subprograms: inlined too, xdp_gate's
 * combined stack goes over 512 bytes; the TrGW's relay() inlined into
 * trgw() is refused by the verifier (a register read after a helper
 * call). */
#define V6G_SUB static __always_inline

/* Word loads and stores at addresses clang cannot prove aligned (byte
 * arrays in the contract structs, packet headers at 2-byte offsets).
 * __builtin_memcpy there compiles to a load or store per byte, which made
 * the programs several times longer. Callers pass stack pointers aligned
 * to the access (the verifier insists on that for the stack); packet and
 * map-value pointers may be unaligned on the architectures with
 * efficient unaligned access (x86-64, arm64), where the verifier allows it. */
#define LD16(p) (*(const __u16 *)(const void *)(p))
#define LD32(p) (*(const __u32 *)(const void *)(p))
#define ST16(p, v) (*(__u16 *)(void *)(p) = (v))
#define ST32(p, v) (*(__u32 *)(void *)(p) = (v))

/* 16 bytes (an IPv6 address) as they are. */
V6G_INLINE void copy16(void *dst, const void *src)
{
	ST32(dst, LD32(src));
	ST32((__u8 *)dst + 4, LD32((const __u8 *)src + 4));
	ST32((__u8 *)dst + 8, LD32((const __u8 *)src + 8));
	ST32((__u8 *)dst + 12, LD32((const __u8 *)src + 12));
}

/* Whether 16 bytes are the same. */
V6G_INLINE int same16(const void *a, const void *b)
{
	const __u8 *x = a, *y = b;

	return LD32(x) == LD32(y) && LD32(x + 4) == LD32(y + 4) && LD32(x + 8) == LD32(y + 8) &&
	       LD32(x + 12) == LD32(y + 12);
}

/* End-around-carry fold of an unfolded one's-complement sum (RFC 1071). */
V6G_INLINE __u16 fold(__u64 acc)
{
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	return (__u16)acc;
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), as xlat::checksum::update. */
V6G_INLINE __u16 csum_update(__u16 csum, __u64 old, __u64 new)
{
	__u64 acc = (__u64)(__u16)~csum + (__u64)(__u16)~fold(old) + (__u64)fold(new);

	return (__u16)~fold(acc);
}

/* A transmitted UDP checksum is never zero (RFC 768). */
V6G_INLINE __u16 csum_update_udp(__u16 csum, __u64 old, __u64 new)
{
	__u16 c = csum_update(csum, old, new);

	return c ? c : 0xffff;
}

#endif
