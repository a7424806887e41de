/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Host unit test of bpf/portblock.h (run by crates/xdp/tests/portblock.rs):
 * the allocator's contract, single-threaded and with threads racing for
 * the same block. Exit status 0 and "ok" on success; the first failed
 * check is printed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "portblock.h"

static int fails;

#define CHECK(c, ...)                                                   \
	do {                                                            \
		if (!(c)) {                                             \
			fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #c); \
			fprintf(stderr, __VA_ARGS__);                   \
			fputc('\n', stderr);                            \
			fails++;                                        \
		}                                                       \
	} while (0)

static int popcount_block(const struct pb_block *b)
{
	int n = 0;

	for (int w = 0; w < PB_WORDS; w++)
		n += __builtin_popcountll(b->used[w]);
	return n;
}

/* Every size takes exactly `size` distinct ports below size, then none. */
static void fills_exactly(__u16 size, __u32 hint_step)
{
	struct pb_block b = { .addr = 0x0100a8c0, .base = 40000, .size = size };
	char seen[PB_MAX_PORTS] = { 0 };

	for (__u32 k = 0; k < size; k++) {
		int i = pb_take(&b, k * hint_step);

		CHECK(i >= 0 && i < size, "size %u take %u gave %d", size, k, i);
		if (i < 0 || i >= size)
			return;
		CHECK(!seen[i], "size %u index %d handed out twice", size, i);
		seen[i] = 1;
	}
	CHECK(pb_take(&b, 0) == -1, "size %u: a full block gave a port", size);
	CHECK(popcount_block(&b) == size, "size %u: %d bits set", size, popcount_block(&b));
	/* no bit past the block */
	for (int i = size; i < PB_MAX_PORTS; i++)
		CHECK(!(b.used[i / 64] & (1ull << (i % 64))), "size %u: bit %d past the end", size, i);
}

static void hint_and_give(void)
{
	struct pb_block b = { .base = 1024, .size = 100 };
	int i;

	CHECK(pb_take(&b, 70) == 70, "a free hint is taken");
	CHECK(pb_take(&b, 70) == 71, "the next free one after a used hint");
	CHECK(pb_take(&b, 170) == 72, "the hint is taken mod size (170 %% 100 = 70)");
	CHECK(pb_take(&b, 99) == 99, "last index");
	/* past the last free bit of the hint's word: from the word's start */
	b.used[1] |= ~0ull << (99 - 64);
	CHECK(pb_take(&b, 99) == 64, "wraps to the hint word's start");
	/* give back and take again */
	pb_give(&b, 70);
	CHECK(!(b.used[1] & (1ull << 6)), "give clears the bit");
	CHECK(pb_take(&b, 70) == 70, "a given port is taken again");
	CHECK(pb_index(&b, 1024) == 0 && pb_index(&b, 1123) == 99, "pb_index in range");
	CHECK(pb_index(&b, 1023) == -1 && pb_index(&b, 1124) == -1, "pb_index out of range");
	/* the slow path holds a bit (its own mapping): the program skips it */
	memset(b.used, 0, sizeof(b.used));
	b.used[0] = 1ull << 5;
	i = pb_take(&b, 5);
	CHECK(i == 6, "a bit set by another owner is skipped (got %d)", i);
	/* bad blocks hand out nothing */
	b.size = 0;
	CHECK(pb_take(&b, 0) == -1, "an empty slot");
	b.size = PB_MAX_PORTS + 1;
	CHECK(pb_take(&b, 0) == -1, "an oversized block");
}

static void lowest(void)
{
	for (int i = 0; i < 64; i++) {
		CHECK(pb_lowest(1ull << i) == (__u32)i, "lowest of bit %d", i);
		CHECK(pb_lowest((~0ull) << i) == (__u32)i, "lowest of mask from %d", i);
	}
}

/* Threads racing on one block: together they get every port once. */
#define THREADS 4
static struct pb_block shared = { .base = 2000, .size = PB_MAX_PORTS };
static int got[THREADS][PB_MAX_PORTS];
static int ngot[THREADS];

static void *racer(void *arg)
{
	long t = (long)arg;

	for (;;) {
		/* every thread starts at the same hint: maximal contention */
		int i = pb_take(&shared, 17);

		if (i < 0) {
			/* a run of lost races may give up early: only a full block ends it */
			if (popcount_block(&shared) == PB_MAX_PORTS)
				break;
			continue;
		}
		got[t][ngot[t]++] = i;
	}
	return 0;
}

static void races(void)
{
	pthread_t th[THREADS];
	int owner[PB_MAX_PORTS];
	int total = 0;

	for (int round = 0; round < 50; round++) {
		memset(shared.used, 0, sizeof(shared.used));
		memset(ngot, 0, sizeof(ngot));
		for (long t = 0; t < THREADS; t++)
			pthread_create(&th[t], 0, racer, (void *)t);
		for (int t = 0; t < THREADS; t++)
			pthread_join(th[t], 0);
		for (int i = 0; i < PB_MAX_PORTS; i++)
			owner[i] = -1;
		total = 0;
		for (int t = 0; t < THREADS; t++) {
			for (int k = 0; k < ngot[t]; k++) {
				int i = got[t][k];

				CHECK(owner[i] == -1, "round %d: index %d taken by %d and %d", round, i, owner[i], t);
				owner[i] = t;
			}
			total += ngot[t];
		}
		CHECK(total == PB_MAX_PORTS, "round %d: %d ports handed out", round, total);
		/* give back concurrently-taken ports: the block empties */
		for (int i = 0; i < PB_MAX_PORTS; i++)
			pb_give(&shared, i);
		CHECK(popcount_block(&shared) == 0, "round %d: gives left bits", round);
	}
}

int main(void)
{
	lowest();
	for (__u16 size = 1; size <= PB_MAX_PORTS; size++) {
		fills_exactly(size, 0);
		fills_exactly(size, 37);
	}
	hint_and_give();
	races();
	if (fails) {
		fprintf(stderr, "%d checks failed\n", fails);
		return 1;
	}
	puts("ok");
	return 0;
}
