// SPDX-License-Identifier: MIT
/*
 * prefix.c - the prefix cache: full KV blocks keyed by a chained hash of
 * their tokens (hash of the parent block's hash and this block's token
 * ids), so a block's key names its whole prefix. The cache holds its own
 * reference on every block it indexes through one kvarena session of its
 * own ("the cache session"), so a block outlives the conversations that
 * made it, and sharing it into a new conversation is the kernel's block
 * reference (kva_blocks_share), never a copy.
 *
 * Chains start from the tenant: tenants never share blocks, so neither a
 * faster first token nor usage.cached_tokens tells one tenant what another
 * sent (the cross-tenant timing channel vLLM closes with cache_salt).
 *
 * Eviction frees only blocks no conversation holds, least recently used
 * first and, among equals, the deepest (a conversation's tail before the
 * system prompt everyone shares).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "internal.h"
#include "log.h"

/* FNV-1a over the parent hash and the ids, then a 64-bit finaliser. */
uint64_t kvd_prefix_hash(uint64_t parent, const int32_t *tokens, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull ^ parent;
	const uint8_t *p = (const uint8_t *)tokens;
	size_t i;

	for (i = 0; i < (size_t)n * sizeof(*tokens); i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h ? h : 1;
}

/* The root of a tenant's hash chains. */
static uint64_t chain_root(uint32_t tenant)
{
	return kvd_prefix_hash(0x6b7661726e61ull, (const int32_t *)&tenant, 1);
}

int kvd_prefix_init(struct kvd *d)
{
	struct kvd_prefix *p = &d->prefix;
	uint32_t cap = 16;
	int rc;

	if (!d->cfg.prefix_cache)
		return 0;
	while (cap < 2 * d->geom.blocks_total)
		cap *= 2;
	p->slots = calloc(cap, sizeof(*p->slots));
	p->by_block = calloc(d->geom.blocks_total, sizeof(*p->by_block));
	if (!p->slots || !p->by_block)
		return -ENOMEM;
	p->cap = cap;
	rc = kva_session_open(d->arena, 0, &p->cache_sid);
	if (rc)
		return rc;
	p->has_sid = 1;
	return 0;
}

void kvd_prefix_fini(struct kvd *d)
{
	struct kvd_prefix *p = &d->prefix;

	if (p->has_sid && d->arena)
		kva_session_close(d->arena, p->cache_sid);
	free(p->slots);
	free(p->by_block);
	memset(p, 0, sizeof(*p));
}

static struct kvd_pentry *find(struct kvd_prefix *p, uint64_t h)
{
	uint32_t i = (uint32_t)h & (p->cap - 1);

	while (p->slots[i].used) {
		if (p->slots[i].hash == h)
			return &p->slots[i];
		i = (i + 1) & (p->cap - 1);
	}
	return NULL;
}

int kvd_prefix_cached(const struct kvd *d, uint32_t block)
{
	return d->prefix.by_block && d->prefix.by_block[block];
}

/* Backward-shift deletion keeps the probe chains intact. */
static void remove_slot(struct kvd_prefix *p, uint32_t i)
{
	uint32_t j = i;

	p->by_block[p->slots[i].block] = 0;
	p->slots[i].used = 0;
	p->n--;
	for (;;) {
		uint32_t home;

		j = (j + 1) & (p->cap - 1);
		if (!p->slots[j].used)
			break;
		home = (uint32_t)p->slots[j].hash & (p->cap - 1);
		/* can slot j move back to i? only if home is not in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			p->slots[i] = p->slots[j];
			p->by_block[p->slots[i].block] = i + 1;
			p->slots[j].used = 0;
			i = j;
		}
	}
}

uint32_t kvd_prefix_attach(struct kvd *d, struct kvd_conv *c, uint32_t max_tokens)
{
	struct kvd_prefix *p = &d->prefix;
	uint32_t bt = d->geom.block_tokens, n = 0, i, max_blocks = max_tokens / bt;
	uint64_t h = chain_root(c->tenant), now = kvd_now_ns();
	uint32_t ids[256];

	if (!p->slots || !c->has_kv || c->as.s.n_blocks || c->as.s.n_tokens)
		return 0;
	if (max_blocks > c->as.cap)
		max_blocks = c->as.cap;
	if (max_blocks > 256)
		max_blocks = 256;
	for (i = 0; i < max_blocks; i++) {
		struct kvd_pentry *e;

		h = kvd_prefix_hash(h, c->tokens + (size_t)i * bt, bt);
		e = find(p, h);
		if (!e)
			break;
		ids[n++] = e->block;
		e->last_used_ns = now;
	}
	if (!n)
		return 0;
	if (kva_blocks_share(d->arena, c->as.sid, n, ids) < 0)
		return 0;
	memcpy(c->as.s.block_table, ids, n * sizeof(*ids));
	c->as.s.n_blocks = n;
	c->as.s.n_tokens = n * bt;
	for (i = 0; i < n; i++)
		d->block_users[ids[i]]++;
	if (kvd_tenant_slot(d, c->tenant))
		d->tenant_blocks[kvd_tenant_slot(d, c->tenant)] += n;
	/* these blocks are already indexed: the conversation's hashes
	 * continue from here */
	if (!c->hashes)
		c->hashes = calloc(c->as.cap, sizeof(*c->hashes));
	if (c->hashes) {
		h = chain_root(c->tenant);
		for (i = 0; i < n; i++) {
			h = kvd_prefix_hash(h, c->tokens + (size_t)i * bt, bt);
			c->hashes[i] = h;
		}
		c->n_hashed = n;
	}
	return n * bt;
}

void kvd_prefix_offer(struct kvd *d, struct kvd_conv *c)
{
	struct kvd_prefix *p = &d->prefix;
	uint32_t bt = d->geom.block_tokens, full, i;
	uint64_t now = kvd_now_ns();

	if (!p->slots || !c->has_kv)
		return;
	if (!c->hashes && !(c->hashes = calloc(c->as.cap, sizeof(*c->hashes))))
		return;
	full = c->as.s.n_tokens / bt;
	for (i = c->n_hashed; i < full; i++) {
		uint64_t h = kvd_prefix_hash(i ? c->hashes[i - 1] : chain_root(c->tenant),
					     c->tokens + (size_t)i * bt, bt);
		uint32_t block = c->as.s.block_table[i], s;
		struct kvd_pentry *e;

		c->hashes[i] = h;
		e = find(p, h);
		if (e) {
			e->last_used_ns = now;
			continue;
		}
		if (p->by_block[block] || p->n * 2 >= p->cap)
			continue;
		if (kva_blocks_share(d->arena, p->cache_sid, 1, &block) < 0)
			continue;
		s = (uint32_t)h & (p->cap - 1);
		while (p->slots[s].used)
			s = (s + 1) & (p->cap - 1);
		p->slots[s] = (struct kvd_pentry){ h, block, i, now, 1 };
		p->by_block[block] = s + 1;
		p->n++;
		kvd_kvev_stored(d, h, i ? c->hashes[i - 1] : 0, c->tokens + (size_t)i * bt);
	}
	c->n_hashed = full;
	kvd_kvev_flush(d);
}

uint32_t kvd_prefix_evict(struct kvd *d, uint32_t want)
{
	struct kvd_prefix *p = &d->prefix;
	uint32_t freed = 0;

	if (!p->slots)
		return 0;
	while (freed < want) {
		uint32_t i, best = UINT32_MAX;

		for (i = 0; i < p->cap; i++) {
			const struct kvd_pentry *e = &p->slots[i];

			if (!e->used || d->block_users[e->block])
				continue;
			if (best == UINT32_MAX || e->last_used_ns < p->slots[best].last_used_ns ||
			    (e->last_used_ns == p->slots[best].last_used_ns &&
			     e->depth > p->slots[best].depth))
				best = i;
		}
		if (best == UINT32_MAX)
			break;
		if (kva_blocks_free(d->arena, p->cache_sid, 1, &p->slots[best].block) < 0)
			break;

		kvd_kvev_removed(d, p->slots[best].hash);
		remove_slot(p, best);
		freed++;
		d->m.cache_evictions++;
	}
	kvd_kvev_flush(d);
	return freed;
}

void kvd_prefix_drop(struct kvd *d, uint32_t block)
{
	struct kvd_prefix *p = &d->prefix;
	uint32_t i;

	if (!p->by_block || !p->by_block[block])
		return;
	i = p->by_block[block] - 1;
	if (kva_blocks_free(d->arena, p->cache_sid, 1, &block) < 0)
		return;
	remove_slot(p, i);
	d->m.cache_evictions++;
}
