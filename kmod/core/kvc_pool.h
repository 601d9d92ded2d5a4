/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The block pool: which of an arena's fixed-size blocks are free, and how
 * many references each allocated block has.  O(1) per block: a stack of free
 * ids and a refcount array.  It knows nothing of sessions or memory.
 * Callers serialise access.
 */
#ifndef KVC_POOL_H
#define KVC_POOL_H

#include "kvc_shim.h"

struct kvc_pool {
	u32 nblocks;
	u32 nfree;
	u32 *free_ids;		/* stack: free_ids[0..nfree) */
	u32 *refcnt;		/* per block; 0 = free */
};

int kvc_pool_init(struct kvc_pool *pool, u32 nblocks);
void kvc_pool_destroy(struct kvc_pool *pool);

/* Pop n <= nfree ids into ids[] with one reference each. */
void kvc_pool_alloc(struct kvc_pool *pool, u32 n, u32 *ids);
/* Take one more reference on an allocated block. */
void kvc_pool_get(struct kvc_pool *pool, u32 id);
/* Drop one reference; returns true when the block went back to the pool. */
bool kvc_pool_put(struct kvc_pool *pool, u32 id);

static inline bool kvc_pool_valid(const struct kvc_pool *pool, u32 id)
{
	return id < pool->nblocks;
}

static inline bool kvc_pool_allocated(const struct kvc_pool *pool, u32 id)
{
	return id < pool->nblocks && pool->refcnt[id] != 0;
}

#endif /* KVC_POOL_H */
