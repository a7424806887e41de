/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Port blocks (RFC 7422 bulk port allocation, RFC 6888 REQ-4): a run of
 * consecutive pool ports on one pool address that a NAT's slow path has
 * claimed for one subscriber, and a bitmap of the ones in use, from which
 * an XDP program takes a port for a mapping it creates itself.
 *
 * Contract (the same for every user; the DS-Lite AFTR's in
 * bpf/softwire.bpf.c and crates/xdp/src/dslite.rs):
 *
 * - The slow path owns the block: it claims the ports in its own pool
 *   before it writes the block (addr, base, size, used = 0) and gives them
 *   back only after it has taken the block out of every map the program
 *   reads. The program never changes addr, base or size.
 * - Bit i of used[i / 64] is port base + i; bits at or past size are never
 *   set (pb_take does not hand them out).
 * - Taking is lock-free: pb_take picks a clear bit, sets it with an atomic
 *   OR and owns the port only when the OR's previous value had the bit
 *   clear; a lost race (another CPU, or the slow path, set it first)
 *   retries, at most PB_RETRIES times per word. -1: no port found (the
 *   block is full, or every try lost a race): the caller falls back.
 * - Giving back is an atomic AND (pb_give), by whoever owns the port when
 *   its mapping goes: the program, when it loses an insert race and does
 *   not use the port; the slow path, when it deletes the mapping (it maps
 *   the block's memory, e.g. a BPF_F_MMAPABLE array, and does the same
 *   AND on the same word).
 * - Nothing here calls a BPF helper: the header also compiles for the
 *   host (the allocator's unit test, bpf/test/portblock_test.c).
 */
#ifndef V6GATE_PORTBLOCK_H
#define V6GATE_PORTBLOCK_H

/* struct pb_block, PB_WORDS, PB_MAX_PORTS and PB_RETRIES are declared in
 * crates/xdp/src/types/portblock.rs (generated into v6gate_abi.h). */
#include "v6gate_abi.h"

#define PB_INLINE static __inline __attribute__((always_inline))

/* Index of the lowest set bit of a non-zero x (no ctz instruction in BPF). */
PB_INLINE __u32 pb_lowest(__u64 x)
{
	__u32 n = 0;

	if (!(x & 0xffffffffull)) {
		n += 32;
		x >>= 32;
	}
	if (!(x & 0xffff)) {
		n += 16;
		x >>= 16;
	}
	if (!(x & 0xff)) {
		n += 8;
		x >>= 8;
	}
	if (!(x & 0xf)) {
		n += 4;
		x >>= 4;
	}
	if (!(x & 0x3)) {
		n += 2;
		x >>= 2;
	}
	if (!(x & 0x1))
		n += 1;
	return n;
}

/* The bits of word w that stand for ports of a block of `size` ports. */
PB_INLINE __u64 pb_mask(__u32 size, __u32 w)
{
	__u32 lo = w * 64;

	if (size >= lo + 64)
		return ~0ull;
	if (size <= lo)
		return 0;
	return (1ull << (size - lo)) - 1;
}

/* Take a free port of `b`: the first free one at or after index `hint`
 * (mod size; a random hint spreads the ports, RFC 6056's aim, within the
 * block), else the first free one from the start of the hint's word, then
 * the next words. Returns the port's index (the port is base + index), or
 * -1. */
PB_INLINE int pb_take(struct pb_block *b, __u32 hint)
{
	__u32 size = b->size, w0, i;

	if (size == 0 || size > PB_MAX_PORTS)
		return -1;
	hint %= size;
	w0 = hint / 64;
#pragma unroll
	for (i = 0; i < PB_WORDS; i++) {
		__u32 w = (w0 + i) % PB_WORDS;
		__u64 mask = pb_mask(size, w);
		/* the hint's own word: bits at or after the hint first */
		__u64 after = i == 0 ? mask & (~0ull << (hint % 64)) : 0;

#pragma unroll
		for (int r = 0; r < PB_RETRIES; r++) {
			__u64 cur = *(volatile __u64 *)&b->used[w];
			__u64 free = ~cur & after;
			__u64 bit, prev;
			__u32 at;

			if (!free)
				free = ~cur & mask;
			if (!free)
				break;
			at = pb_lowest(free);
			bit = 1ull << at;
			prev = __sync_fetch_and_or(&b->used[w], bit);
			if (!(prev & bit))
				return (int)(w * 64 + at);
		}
	}
	return -1;
}

/* Give port index `i` of `b` back (an index pb_take returned). */
PB_INLINE void pb_give(struct pb_block *b, __u32 i)
{
	if (i < PB_MAX_PORTS)
		__sync_fetch_and_and(&b->used[i / 64], ~(1ull << (i % 64)));
}

/* The index of `port` (host order) in `b`, or -1 when it is not one of its ports. */
PB_INLINE int pb_index(const struct pb_block *b, __u16 port)
{
	if (b->size == 0 || port < b->base || (__u32)(port - b->base) >= b->size)
		return -1;
	return port - b->base;
}

#endif
