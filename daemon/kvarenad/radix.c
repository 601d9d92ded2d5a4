// SPDX-License-Identifier: MIT
/*
 * radix.c - the radix index over token ids (SGLang's radix cache, at the
 * granularity of one KV block): a tree per tenant whose edges are the
 * block_tokens ids of one full block, each node naming the arena block
 * that holds those positions' KV for exactly that prefix.
 *
 * - Lookup walks a prompt block by block from the tenant's root: one hash
 *   probe per block, the node's ids and parent compared (a key collision
 *   costs a compare, never another prompt's KV), so the longest cached
 *   prefix of an n-token prompt costs O(n), at any depth. A sequence
 *   looked up again (a queued turn, every scheduler turn) goes on from
 *   its last match while no node has left the index: one probe.
 * - A node is busy while some conversation holds its block; a node that
 *   is neither busy nor a parent is an evictable leaf. Evictable leaves
 *   wait in one list in the order they became evictable: released ones
 *   at the tail (most recently used), and a parent whose last child was
 *   just evicted at the head (it was used no later than that child, and
 *   is the chain's next deepest). Eviction pops the head: true LRU over
 *   leaves, deepest first within a chain, O(1) per block evicted.
 *
 * Pure data structure: no arena calls, no locks (the orchestrator's lock
 * covers it); prefix.c ties it to the arena and the cache's references.
 * tests/daemon/test_radix.c checks it against a brute-force model.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint64_t kvd_radix_key(const struct kvd_radix *r, uint32_t tenant,
		       const struct kvd_rnode *parent, const int32_t *tokens)
{
	uint64_t h = r->seed ^ kvd_mix64(((uint64_t)tenant << 32) ^ 0x726164697878ull);
	uint32_t i;

	h = kvd_mix64(h ^ (parent ? parent->serial : 0));
	/* two tokens a round, one multiply (odd: a bijection) and a fold,
	 * then one full mix: a third of the cost of a mix per token. Every
	 * queued turn's prefix is walked in every scheduler turn, 61 ns a
	 * block before, most of a turn at 1000 conversations. */
	for (i = 0; i + 1 < r->bt; i += 2) {
		h = (h ^ ((uint32_t)tokens[i] | (uint64_t)(uint32_t)tokens[i + 1] << 32)) *
		    0x9e3779b97f4a7c15ull;
		h ^= h >> 32;
	}
	if (i < r->bt) {
		h = (h ^ (uint32_t)tokens[i]) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 32;
	}
	return kvd_mix64(h);
}

int kvd_radix_init(struct kvd_radix *r, uint32_t block_tokens, uint32_t blocks_total,
		   uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	if (!block_tokens || !blocks_total)
		return -EINVAL;
	r->bt = block_tokens;
	r->blocks_total = blocks_total;
	r->seed = seed;
	r->by_block = calloc(blocks_total, sizeof(*r->by_block));
	if (!r->by_block || kvd_hmap_init(&r->map, blocks_total)) {
		free(r->by_block);
		r->by_block = NULL;
		return -ENOMEM;
	}
	return 0;
}

void kvd_radix_fini(struct kvd_radix *r)
{
	uint32_t i;

	if (r->by_block)
		for (i = 0; i < r->blocks_total; i++)
			free(r->by_block[i]);
	free(r->by_block);
	kvd_hmap_fini(&r->map);
	memset(r, 0, sizeof(*r));
}

static void lru_del(struct kvd_radix *r, struct kvd_rnode *n)
{
	if (!n->on_lru)
		return;
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else
		r->lru_head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		r->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
	n->on_lru = 0;
	r->n_evictable--;
}

static void lru_add(struct kvd_radix *r, struct kvd_rnode *n, int at_head)
{
	if (n->on_lru || n->busy || n->n_children)
		return;
	if (at_head) {
		n->lru_prev = NULL;
		n->lru_next = r->lru_head;
		if (r->lru_head)
			r->lru_head->lru_prev = n;
		else
			r->lru_tail = n;
		r->lru_head = n;
	} else {
		n->lru_next = NULL;
		n->lru_prev = r->lru_tail;
		if (r->lru_tail)
			r->lru_tail->lru_next = n;
		else
			r->lru_head = n;
		r->lru_tail = n;
	}
	n->on_lru = 1;
	r->n_evictable++;
}

struct kvd_rnode *kvd_radix_child(const struct kvd_radix *r, uint32_t tenant,
				  const struct kvd_rnode *parent, const int32_t *tokens)
{
	uint64_t key = kvd_radix_key(r, tenant, parent, tokens);
	struct kvd_hnode *e;

	for (e = kvd_hmap_first(&r->map, key); e; e = kvd_hmap_next(e)) {
		struct kvd_rnode *n = (struct kvd_rnode *)e;

		if (n->tenant == tenant && n->parent == parent &&
		    !memcmp(n->tokens, tokens, (size_t)r->bt * sizeof(*tokens)))
			return n;
	}
	return NULL;
}

uint32_t kvd_radix_match_from(const struct kvd_radix *r, struct kvd_rmatch *m, uint32_t tenant,
			      const int32_t *tokens, uint32_t n_blocks, struct kvd_rnode **path)
{
	struct kvd_rnode *n = m->last, *c;
	uint32_t i;

	if (m->removals != r->removals || (n && n->tenant != tenant))
		n = NULL;	/* a node on the path may be gone: from the root */
	while (n && n->depth >= n_blocks)
		n = n->parent;
	i = n ? n->depth + 1 : 0;
	for (; i < n_blocks; i++) {
		c = kvd_radix_child(r, tenant, n, tokens + (size_t)i * r->bt);
		if (!c)
			break;
		n = c;
	}
	m->removals = r->removals;
	m->last = n;
	if (path)
		for (c = n; c; c = c->parent)
			path[c->depth] = c;
	return i;
}

uint32_t kvd_radix_match(const struct kvd_radix *r, uint32_t tenant, const int32_t *tokens,
			 uint32_t n_blocks, struct kvd_rnode **path)
{
	struct kvd_rmatch m = { 0 };

	return kvd_radix_match_from(r, &m, tenant, tokens, n_blocks, path);
}

struct kvd_rnode *kvd_radix_insert(struct kvd_radix *r, uint32_t tenant,
				   struct kvd_rnode *parent, const int32_t *tokens,
				   uint32_t block, int busy)
{
	struct kvd_rnode *n;

	if (block >= r->blocks_total || r->by_block[block])
		return NULL;
	n = calloc(1, sizeof(*n) + (size_t)r->bt * sizeof(*tokens));
	if (!n)
		return NULL;
	n->parent = parent;
	n->serial = ++r->serial;
	n->tenant = tenant;
	n->block = block;
	n->depth = parent ? parent->depth + 1 : 0;
	n->busy = !!busy;
	memcpy(n->tokens, tokens, (size_t)r->bt * sizeof(*tokens));
	kvd_hmap_add(&r->map, &n->h, kvd_radix_key(r, tenant, parent, tokens));
	r->by_block[block] = n;
	r->n++;
	if (parent) {
		parent->n_children++;
		lru_del(r, parent);
	}
	lru_add(r, n, 0);
	return n;
}

struct kvd_rnode *kvd_radix_by_block(const struct kvd_radix *r, uint32_t block)
{
	return r->by_block && block < r->blocks_total ? r->by_block[block] : NULL;
}

void kvd_radix_set_busy(struct kvd_radix *r, struct kvd_rnode *n, int busy)
{
	n->busy = !!busy;
	if (busy)
		lru_del(r, n);
	else
		lru_add(r, n, 0);
}

struct kvd_rnode *kvd_radix_victim(const struct kvd_radix *r)
{
	return r->lru_head;
}

void kvd_radix_remove(struct kvd_radix *r, struct kvd_rnode *n)
{
	struct kvd_rnode *p = n->parent;

	if (n->n_children)
		return;		/* only leaves go: a child's chain names its parent */
	lru_del(r, n);
	kvd_hmap_del(&r->map, &n->h);
	r->by_block[n->block] = NULL;
	r->n--;
	r->removals++;
	free(n);
	if (p && !--p->n_children)
		lru_add(r, p, 1);
}
