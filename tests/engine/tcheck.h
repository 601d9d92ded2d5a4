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
#include "kv_arena.h"

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

/* A whole file in memory (free it), or NULL with *len 0 */
static inline uint8_t *tc_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	long n;

	*len = 0;
	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
	    (p = malloc((size_t)n)) && fread(p, 1, (size_t)n, f) != (size_t)n) {
		free(p);
		p = NULL;
	}
	fclose(f);
	*len = p ? (size_t)n : 0;
	return p;
}

/*
 * The tests' KV pool: blocks in one malloc'd slab, or - with
 * KVE_TEST_KV=arena in the environment - blocks of a libkvarena arena on
 * the memfd backend, allocated with kva_blocks_alloc into one kvarena
 * session (the test's block number i is the i-th block allocated; ids >= n
 * are unknown: NULL). Either way every block is poisoned first, so a read
 * of a position never written shows up as NaN.
 */
struct tpool {
	uint8_t *mem;			/* malloc mode */
	size_t block_bytes;
	uint32_t n;
	struct kve_arena_kv *kv;	/* arena mode */
	struct kve_arena_session as;
	const struct kve_kv_pool *akp;
};

static inline int tpool_arena_mode(void)
{
	const char *v = getenv("KVE_TEST_KV");

	return v && !strcmp(v, "arena");
}

static inline void *tpool_ptr(void *ctx, uint32_t id)
{
	struct tpool *p = ctx;

	if (id >= p->n)
		return NULL;
	if (p->kv)
		return p->akp->block_ptr(p->akp->ctx, p->as.s.block_table[id]);
	return p->mem + (size_t)id * p->block_bytes;
}

static inline int tpool_init(struct tpool *p, const struct kve_model *m,
		      uint32_t block_tokens, enum kve_kv_dtype dt, uint32_t n,
		      struct kve_kv_pool *kp)
{
	uint32_t i;

	memset(p, 0, sizeof(*p));
	p->block_bytes = kve_kv_block_bytes(m, block_tokens, dt);
	p->n = n;
	if (tpool_arena_mode()) {
		struct kve_arena_kv_params ap = { .backend = KVA_BACKEND_MEMFD,
			.n_blocks = n, .block_tokens = block_tokens, .dtype = dt,
			.name = "kve-test" };
		char err[256];
		int rc = kve_arena_kv_create(m, &ap, &p->kv, err, sizeof(err));

		if (rc) {
			printf("FAIL tpool: %s\n", err);
			return -1;
		}
		p->akp = kve_arena_kv_pool(p->kv);
		if (p->akp->block_tokens != block_tokens) {
			printf("FAIL tpool: arena reduced block_tokens to %u\n",
			       p->akp->block_tokens);
			return -1;
		}
		rc = kve_arena_session_open(p->kv, 1, n * block_tokens, &p->as);
		if (!rc)
			rc = kve_arena_session_reserve(p->kv, &p->as, n * block_tokens);
		if (rc) {
			printf("FAIL tpool: arena session: %s\n", strerror(-rc));
			return -1;
		}
	} else {
		p->mem = aligned_alloc(64, (p->block_bytes * n + 63) & ~(size_t)63);
		if (!p->mem)
			return -1;
	}
	for (i = 0; i < n; i++)
		memset(tpool_ptr(p, i), 0xff, p->block_bytes);
	kp->ctx = p;
	kp->block_ptr = tpool_ptr;
	kp->block_tokens = block_tokens;
	kp->dtype = dt;
	return 0;
}

/* Copies blocks [first, first + n) to out, or compares them with it. */
static inline void tpool_snap(struct tpool *p, uint32_t first, uint32_t n, uint8_t *out)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		memcpy(out + (size_t)i * p->block_bytes, tpool_ptr(p, first + i), p->block_bytes);
}

static inline int tpool_same(struct tpool *p, uint32_t first, uint32_t n, const uint8_t *snap)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (memcmp(snap + (size_t)i * p->block_bytes, tpool_ptr(p, first + i),
			   p->block_bytes))
			return 0;
	return 1;
}

static inline void tpool_free(struct tpool *p)
{
	if (p->kv) {
		kve_arena_session_close(p->kv, &p->as);
		kve_arena_kv_destroy(p->kv);
		p->kv = NULL;
	}
	free(p->mem);
	p->mem = NULL;
}

#endif
