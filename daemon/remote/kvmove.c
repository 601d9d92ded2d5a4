// SPDX-License-Identifier: MIT
/*
 * kvmove.c - block positions to transfers (kvmove.h).
 */
#include <errno.h>

#include "kvmove.h"

int kvr_geom_compatible(const struct kvd_kv_geom *a, const struct kvd_kv_geom *b)
{
	return a->block_tokens == b->block_tokens && a->dtype == b->dtype &&
	       a->kv_block_bytes == b->kv_block_bytes && a->n_layers == b->n_layers &&
	       a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim;
}

uint64_t kvr_block_off(const struct kvd_kv_geom *g, uint32_t id)
{
	return (uint64_t)(id / g->blocks_per_page) * (2u << 20) +
	       (uint64_t)(id % g->blocks_per_page) * g->block_size;
}

static int one(struct kvr_peer *p, enum kvr_dir dir, uint64_t loff, uint64_t roff,
	       uint64_t len)
{
	return dir == KVR_PUSH ? kvr_peer_put(p, loff, roff, len) :
				 kvr_peer_get(p, loff, roff, len);
}

int kvr_move_range(struct kvr_peer *p, enum kvr_dir dir, const struct kvd_kv_geom *lg,
		   uint32_t lid, const struct kvd_kv_geom *rg, uint32_t rid, uint32_t p0,
		   uint32_t p1)
{
	uint64_t lb, rb, es, run, stride;
	uint32_t bt = lg->block_tokens, s, n_runs;
	int rc;

	if (!kvr_geom_compatible(lg, rg) || p0 >= p1 || p1 > bt || lid >= lg->blocks_total ||
	    rid >= rg->blocks_total)
		return -EINVAL;
	lb = kvr_block_off(lg, lid);
	rb = kvr_block_off(rg, rid);
	if (p0 == 0 && p1 == bt)
		return one(p, dir, lb, rb, lg->kv_block_bytes);
	es = lg->dtype ? 2 : 4;
	n_runs = lg->n_layers * 2 * lg->n_kv_heads;
	stride = (uint64_t)bt * lg->head_dim * es;		/* one (layer, kv, head) */
	run = (uint64_t)(p1 - p0) * lg->head_dim * es;
	if (stride * n_runs != lg->kv_block_bytes)
		return -EINVAL;
	for (s = 0; s < n_runs; s++) {
		uint64_t o = s * stride + (uint64_t)p0 * lg->head_dim * es;

		rc = one(p, dir, lb + o, rb + o, run);
		if (rc)
			return rc;
	}
	return 0;
}

int kvr_move_positions(struct kvr_peer *p, enum kvr_dir dir, const struct kvd_kv_geom *lg,
		       const uint32_t *ltab, const struct kvd_kv_geom *rg,
		       const uint32_t *rtab, uint32_t from, uint32_t to)
{
	uint32_t bt = lg->block_tokens, pos = from;
	int rc;

	while (pos < to) {
		uint32_t b = pos / bt, p0 = pos % bt, p1 = to - b * bt > bt ? bt : to - b * bt;

		rc = kvr_move_range(p, dir, lg, ltab[b], rg, rtab[b], p0, p1);
		if (rc)
			return rc;
		pos = b * bt + p1;
	}
	return 0;
}
