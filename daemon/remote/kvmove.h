/* SPDX-License-Identifier: MIT */
/*
 * kvmove.h - KV positions of arena blocks as UCX transfers (xfer.h).
 *
 * A block holds block_tokens positions of one sequence for all layers,
 * laid out [layer][K|V][kv_head][token][head_dim] (Documentation/
 * engine.md, "KV block layout"). A whole block is one contiguous
 * transfer of kv_block_bytes; a range of positions inside a block is
 * n_layers * 2 * n_kv_heads contiguous runs, one per (layer, K|V, head).
 * Both arenas must have the same block layout (kvr_geom_compatible);
 * their sizes and block counts may differ.
 */
#ifndef KVR_KVMOVE_H
#define KVR_KVMOVE_H

#include <stdint.h>

#include "proto.h"
#include "xfer.h"

/* 1 when blocks of a and b hold the same bytes at the same offsets. */
int kvr_geom_compatible(const struct kvd_kv_geom *a, const struct kvd_kv_geom *b);

/* Byte offset of block id in an arena of geometry g. */
uint64_t kvr_block_off(const struct kvd_kv_geom *g, uint32_t id);

enum kvr_dir { KVR_PUSH = 0, KVR_PULL = 1 };

/*
 * Positions [p0, p1) (0 <= p0 < p1 <= block_tokens) of local block lid
 * to the peer's block rid (KVR_PUSH), or the peer's to local (KVR_PULL).
 * A whole block is one operation. lg/rg: local and peer geometry.
 * Issued only: complete with kvr_peer_flush(). 0 or kvr_peer_put's codes.
 */
int kvr_move_range(struct kvr_peer *p, enum kvr_dir dir, const struct kvd_kv_geom *lg,
		   uint32_t lid, const struct kvd_kv_geom *rg, uint32_t rid, uint32_t p0,
		   uint32_t p1);

/*
 * Positions [from, to) of a sequence whose block tables are ltab (local)
 * and rtab (peer), both covering `to` positions.
 */
int kvr_move_positions(struct kvr_peer *p, enum kvr_dir dir, const struct kvd_kv_geom *lg,
		       const uint32_t *ltab, const struct kvd_kv_geom *rg,
		       const uint32_t *rtab, uint32_t from, uint32_t to);

#endif
