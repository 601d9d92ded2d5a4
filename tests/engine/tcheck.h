/* SPDX-License-Identifier: MIT */
/*
 * tcheck.h - the engine tests' minimal harness and a malloc-backed KV
 * pool. Each CHECK prints "ok"/"FAIL" with its text; run.sh counts them.
 */
#ifndef KVE_TCHECK_H
#define KVE_TCHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvengine.h"

static int tc_pass, tc_fail __attribute__((unused));

#define CHECK(cond, ...) do { \
	if (cond) { tc_pass++; printf("ok   "); } \
	else { tc_fail++; printf("FAIL %s:%d ", __FILE__, __LINE__); } \
	printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

static inline int tc_done(void)
{
	printf("%d passed, %d failed\n", tc_pass, tc_fail);
	return tc_fail ? 1 : 0;
}

/* Blocks in one malloc'd slab; ids >= n are unknown (NULL). */
struct tpool {
	uint8_t *mem;
	size_t block_bytes;
	uint32_t n;
};

static inline void *tpool_ptr(void *ctx, uint32_t id)
{
	struct tpool *p = ctx;

	return id < p->n ? p->mem + (size_t)id * p->block_bytes : NULL;
}

static inline int tpool_init(struct tpool *p, const struct kve_model *m,
		      uint32_t block_tokens, enum kve_kv_dtype dt, uint32_t n,
		      struct kve_kv_pool *kp)
{
	p->block_bytes = kve_kv_block_bytes(m, block_tokens, dt);
	p->n = n;
	p->mem = aligned_alloc(64, (p->block_bytes * n + 63) & ~(size_t)63);
	if (!p->mem)
		return -1;
	/* poison: a read of a position never written shows up as NaN */
	memset(p->mem, 0xff, p->block_bytes * n);
	kp->ctx = p;
	kp->block_ptr = tpool_ptr;
	kp->block_tokens = block_tokens;
	kp->dtype = dt;
	return 0;
}

static inline void tpool_free(struct tpool *p)
{
	free(p->mem);
	p->mem = NULL;
}

#endif
