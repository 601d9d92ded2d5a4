// SPDX-License-Identifier: MIT
/*
 * prefix.c - the prefix cache: the radix index (radix.c) tied to the
 * arena. The cache holds its own reference on every block the index
 * names, through one kvarena session of its own ("the cache session"),
 * so a block outlives the conversations that computed it, and sharing it
 * into a new conversation is the kernel's block reference
 * (kva_blocks_share), never a copy.
 *
 * Trees start from the tenant: tenants never share blocks, so neither a
 * faster first token nor usage.cached_tokens tells one tenant what another
 * sent (the cross-tenant timing channel vLLM closes with cache_salt).
 * Every hit compares the block's token ids (issue 36.6: a 64-bit key alone
 * would serve another prompt's KV on a collision, as vLLM's CVE-2025-25183).
 *
 * Prefills in flight: a conversation about to compute full blocks nobody
 * has cached registers its first such block; another conversation whose
 * prompt needs that same block next waits until it is computed, then
 * shares it, instead of computing it twice (100 agents starting with one
 * system prompt compute it once). Anything else proceeds at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hooks.h"
#include "internal.h"
#include "log.h"

int kvd_prefix_init(struct kvd *d)
{
	uint64_t seed = 0;
	int rc;

	if (!d->cfg.prefix_cache)
		return 0;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = kvd_now_ns();
	rc = kvd_radix_init(&d->radix, d->geom.block_tokens, d->geom.blocks_total, seed);
	if (!rc)
		rc = kvd_hmap_init(&d->pending, 64);
	if (rc)
		return rc;
	rc = kva_session_open(d->arena, 0, &d->cache_sid);
	if (rc)
		return rc;
	d->has_cache_sid = 1;
	return 0;
}

void kvd_prefix_fini(struct kvd *d)
{
	if (d->has_cache_sid && d->arena)
		kva_session_close(d->arena, d->cache_sid);
	d->has_cache_sid = 0;
	kvd_radix_fini(&d->radix);
	kvd_hmap_fini(&d->pending);
}

int kvd_prefix_cached(const struct kvd *d, uint32_t block)
{
	return kvd_radix_by_block(&d->radix, block) != NULL;
}

void kvd_prefix_busy(struct kvd *d, uint32_t block, int busy)
{
	struct kvd_rnode *n = kvd_radix_by_block(&d->radix, block);

	if (n)
		kvd_radix_set_busy(&d->radix, n, busy);
}

static int ensure_nodes(struct kvd *d, struct kvd_conv *c)
{
	if (!c->nodes)
		c->nodes = calloc(d->ctx_len / d->geom.block_tokens + 1, sizeof(*c->nodes));
	return c->nodes ? 0 : -ENOMEM;
}

/*
 * The cache session's references, many blocks a call: a call costs the
 * blocks the session holds besides its batch (kvc_blocks.c), and the
 * cache session holds most of the arena, so one block a call made a
 * watermark's eviction (up to 1300 blocks of a 10k-block arena) 1300
 * passes over the cache's 10k references in one turn. Frees here are of
 * blocks whose nodes have left the index already: one that fails (a
 * broken invariant: the cache holds every indexed block once) is logged
 * and stays the cache's.
 */
#define CACHE_BATCH 256

static uint32_t cache_let_go(struct kvd *d, const uint32_t *ids, uint32_t n)
{
	uint32_t i, freed = 0;

	if (!n || kva_blocks_free(d->arena, d->cache_sid, n, ids) >= 0)
		return n;
	for (i = 0; i < n; i++) {
		if (kva_blocks_free(d->arena, d->cache_sid, 1, ids + i) >= 0)
			freed++;
		else
			kvd_log(KVD_LOG_ERR, "cache", "block %u: the cache's reference would not go",
				ids[i]);
	}
	return freed;
}

/* c has offered its first n blocks only: the nodes past them are
 * forgotten, since they may leave the index (free_to_disk drops a
 * conversation's own leaves) while c no longer holds their blocks. */
void kvd_prefix_offered_to(struct kvd_conv *c, uint32_t n)
{
	if (c->nodes && n < c->n_offered)
		memset(c->nodes + n, 0, (c->n_offered - n) * sizeof(*c->nodes));
	c->n_offered = n;
}

/* Cached full blocks of the conversation's first max_tokens tokens. */
uint32_t kvd_prefix_lookup(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens,
			   struct kvd_rnode **path)
{
	if (!d->has_cache_sid)
		return 0;
	return kvd_radix_match_from(&d->radix, &c->match, c->tenant, c->tokens,
				    max_tokens / d->geom.block_tokens, path);
}

uint32_t kvd_prefix_attach(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens)
{
	uint32_t bt = d->geom.block_tokens, n, i, *ids;

	if (!d->has_cache_sid || !c->has_kv || c->as.s.n_blocks || c->as.s.n_tokens ||
	    ensure_nodes(d, c))
		return 0;
	if (max_tokens / bt > c->as.cap)
		max_tokens = c->as.cap * bt;
	n = kvd_prefix_lookup(d, c, max_tokens, c->nodes);
	if (!n)
		return 0;
	ids = c->as.s.block_table;
	for (i = 0; i < n; i++)
		ids[i] = c->nodes[i]->block;
	if (kva_blocks_share(d->arena, c->as.sid, n, ids) < 0) {
		memset(c->nodes, 0, n * sizeof(*c->nodes));
		return 0;
	}
	c->as.s.n_blocks = n;
	c->as.s.n_tokens = n * bt;
	kvd_blocks_hold(d, c, 0, n, +1);
	/* these blocks are indexed already: the conversation's own offers
	 * continue from here */
	c->n_offered = n;
	return n * bt;
}

/*
 * The cache's references on c's blocks from first to *end (at most
 * CACHE_BATCH of them) that the index names nowhere, in one call, before
 * they are indexed: returns how many (in ids, in c's order), 0 when the
 * call failed. What is not indexed after all goes back in one call too.
 */
static uint32_t share_unindexed(struct kvd *d, const struct kvd_conv *c, uint32_t first,
				uint32_t full, uint32_t *ids, uint32_t *end)
{
	uint32_t i, n = 0;

	for (i = first; i < full && n < CACHE_BATCH; i++)
		if (!kvd_radix_by_block(&d->radix, c->as.s.block_table[i]))
			ids[n++] = c->as.s.block_table[i];
	*end = i;
	if (n && kva_blocks_share(d->arena, d->cache_sid, n, ids) < 0)
		n = 0;
	return n;
}

void kvd_prefix_offer(struct kvd *d, struct kvd_conv *c)
{
	uint32_t bt = d->geom.block_tokens, full, i, ids[CACHE_BATCH], unused[CACHE_BATCH];
	uint32_t n_shared = 0, k = 0, n_unused = 0, end;

	if (!d->has_cache_sid || !c->has_kv || ensure_nodes(d, c))
		return;
	full = c->as.s.n_tokens / bt;
	end = c->n_offered;
	for (i = c->n_offered; i < full; i++) {
		struct kvd_rnode *parent = i ? c->nodes[i - 1] : NULL, *n;
		uint32_t block = c->as.s.block_table[i];
		int mine = 0;

		if (i && !parent)
			break;		/* the chain broke (no memory): nothing deeper */
		if (i == end) {		/* the next batch of references */
			cache_let_go(d, unused, n_unused);
			n_unused = 0;
			k = 0;
			n_shared = share_unindexed(d, c, i, full, ids, &end);
		}
		if (k < n_shared && ids[k] == block) {
			k++;
			mine = 1;	/* the cache's reference taken, to index */
		}
		n = kvd_radix_child(&d->radix, c->tenant, parent, c->tokens + (size_t)i * bt);
		if (!n && mine) {
			n = kvd_radix_insert(&d->radix, c->tenant, parent,
					     c->tokens + (size_t)i * bt, block,
					     d->block_users[block] > 0);
			if (n)		/* the routers' KV events (daemon/remote) */
				kvd_kvev_stored(d, n->h.key, parent ? parent->h.key : 0,
						c->tokens + (size_t)i * bt);
		}
		if (mine && (!n || n->block != block))
			unused[n_unused++] = block;
		/* an equal block another conversation computed meanwhile
		 * stays the index's, and this one's chain stops there: c->nodes
		 * names only blocks c holds (a node it does not hold may be
		 * evicted under it) */
		if (!n || n->block != block)
			break;
		c->nodes[i] = n;
	}
	/* the references taken for blocks the loop did not index */
	while (k < n_shared)
		unused[n_unused++] = ids[k++];
	cache_let_go(d, unused, n_unused);
	c->n_offered = i;
	kvd_kvev_flush(d);
	if (c->pending_registered && c->n_offered > c->pending_block)
		kvd_prefix_pending_drop(d, c);
}

uint32_t kvd_prefix_evict(struct kvd *d, uint32_t want)
{
	uint32_t ids[CACHE_BATCH], taken = 0, freed = 0, k = 0;
	struct kvd_rnode *n;

	if (!d->has_cache_sid)
		return 0;
	/* out of the index one by one (a leaf's going may make its parent
	 * the next victim), the references in batches */
	while (taken < want && (n = kvd_radix_victim(&d->radix))) {
		ids[k++] = n->block;
		kvd_kvev_removed(d, n->h.key);
		kvd_radix_remove(&d->radix, n);
		taken++;
		d->m.cache_evictions++;
		if (k == CACHE_BATCH) {
			freed += cache_let_go(d, ids, k);
			k = 0;
		}
	}
	freed += cache_let_go(d, ids, k);
	kvd_kvev_flush(d);
	return freed;
}

/* ---- prefills in flight ---------------------------------------------------- */

static uint64_t pending_key(struct kvd *d, const struct kvd_conv *c, uint32_t block,
			    struct kvd_rnode *parent)
{
	return kvd_radix_key(&d->radix, c->tenant, parent,
			     c->tokens + (size_t)block * d->geom.block_tokens);
}

/* c (KV open, its cached prefix attached) will compute the full block
 * after its cached prefix: others needing it next may wait for it, under
 * the last block c offered as parent. */
void kvd_prefix_pending_add(struct kvd *d, struct kvd_conv *c)
{
	uint32_t bt = d->geom.block_tokens, b = c->as.s.n_tokens / bt;

	if (!d->has_cache_sid || c->pending_registered || c->as.s.n_tokens % bt ||
	    (b + 1) * bt > c->n_tokens || (b && (!c->nodes || b > c->n_offered)))
		return;
	c->pending_block = b;
	c->pending_parent = b ? c->nodes[b - 1] : NULL;
	kvd_hmap_add(&d->pending, &c->by_pending, pending_key(d, c, b, c->pending_parent));
	c->pending_registered = 1;
}

void kvd_prefix_pending_drop(struct kvd *d, struct kvd_conv *c)
{
	if (!c->pending_registered)
		return;
	kvd_hmap_del(&d->pending, &c->by_pending);
	c->pending_registered = 0;
}

/* 1 when another conversation is computing the block c needs right after
 * its cached prefix (n_cached full blocks matched by its last lookup),
 * one it could attach: not the block of its last token, which c computes
 * itself whatever the other brings (its logits). */
int kvd_prefix_pending_wait(struct kvd *d, const struct kvd_conv *c, uint32_t n_cached)
{
	uint32_t bt = d->geom.block_tokens;
	struct kvd_rnode *parent = n_cached ? c->match.last : NULL;
	struct kvd_hnode *e;
	uint64_t key;

	if (!d->has_cache_sid || !d->pending.n || (n_cached + 1) * bt >= c->n_tokens)
		return 0;
	key = kvd_radix_key(&d->radix, c->tenant, parent, c->tokens + (size_t)n_cached * bt);
	for (e = kvd_hmap_first(&d->pending, key); e; e = kvd_hmap_next(e)) {
		const struct kvd_conv *o = (const struct kvd_conv *)
			((const char *)e - offsetof(struct kvd_conv, by_pending));

		if (o != c && o->tenant == c->tenant && o->pending_parent == parent &&
		    o->pending_block == n_cached &&
		    !memcmp(o->tokens + (size_t)n_cached * bt, c->tokens + (size_t)n_cached * bt,
			    (size_t)bt * sizeof(*c->tokens)))
			return 1;
	}
	return 0;
}

/* Only a leaf can go (a child's key chains through its parent): tiering.c
 * drops a conversation's blocks deepest first, so its whole private tail
 * leaves the index; a block with cached children of its own stays. */
void kvd_prefix_drop(struct kvd *d, const uint32_t *blocks, uint32_t count)
{
	uint32_t ids[CACHE_BATCH], i, k = 0;
	struct kvd_rnode *n;

	if (!d->has_cache_sid)
		return;
	for (i = 0; i < count; i++) {
		n = kvd_radix_by_block(&d->radix, blocks[i]);
		if (!n || n->n_children)
			continue;
		ids[k++] = blocks[i];
		kvd_kvev_removed(d, n->h.key);
		kvd_radix_remove(&d->radix, n);
		d->m.cache_evictions++;
		if (k == CACHE_BATCH) {
			cache_let_go(d, ids, k);
			k = 0;
		}
	}
	cache_let_go(d, ids, k);
	kvd_kvev_flush(d);
}
