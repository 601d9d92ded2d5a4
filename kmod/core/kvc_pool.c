// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Block pool: free-id stack and per-block refcounts (see kvc_pool.h).
 * Validation of ids belongs to the caller (kvc_arena.c), which checks a whole
 * batch before changing anything.
 */
#include "kvc_pool.h"

int kvc_pool_init(struct kvc_pool *pool, u32 nblocks)
{
	u32 i;

	pool->nblocks = nblocks;
	pool->free_ids = kvc_zalloc((size_t)nblocks * sizeof(u32));
	pool->refcnt = kvc_zalloc((size_t)nblocks * sizeof(u32));
	if (!pool->free_ids || !pool->refcnt) {
		kvc_pool_destroy(pool);
		return -ENOMEM;
	}
	/* Lowest ids on top, so a fresh arena hands out 0, 1, 2, ... */
	for (i = 0; i < nblocks; i++) {
		pool->free_ids[i] = nblocks - 1 - i;
		kvc_resched(i);
	}
	pool->nfree = nblocks;
	return 0;
}

void kvc_pool_destroy(struct kvc_pool *pool)
{
	kvc_free(pool->free_ids);
	kvc_free(pool->refcnt);
	pool->free_ids = NULL;
	pool->refcnt = NULL;
	pool->nblocks = 0;
	pool->nfree = 0;
}

void kvc_pool_alloc(struct kvc_pool *pool, u32 n, u32 *ids)
{
	u32 i;

	for (i = 0; i < n; i++) {
		u32 id = pool->free_ids[--pool->nfree];

		pool->refcnt[id] = 1;
		ids[i] = id;
	}
}

void kvc_pool_get(struct kvc_pool *pool, u32 id)
{
	pool->refcnt[id]++;
}

bool kvc_pool_put(struct kvc_pool *pool, u32 id)
{
	if (--pool->refcnt[id])
		return false;
	pool->free_ids[pool->nfree++] = id;
	return true;
}
