/* SPDX-License-Identifier: MIT */
/*
 * kv_arena.h - the engine's KV cache in kvarena arena blocks (libkvarena,
 * kernel or memfd backend).
 *
 * A struct kve_arena_kv owns one arena (or, in a process that received the
 * arena's data fd, a read-write mapping of it) and exposes it as a
 * struct kve_kv_pool whose block ids are the arena's block ids. A
 * struct kve_arena_session pairs a kvarena session with the engine's block
 * table: blocks are allocated into the kvarena session with
 * kva_blocks_alloc() as the session grows, a prefix is shared between
 * sessions with kva_blocks_share(), and everything the session holds goes
 * back with kva_session_close().
 *
 * Handing KV from a prefill process to a decode process: the prefill side
 * calls kve_arena_send_pool() (geometry as bytes, the data fd by
 * SCM_RIGHTS) and kve_arena_send_session() per session over a connected
 * AF_UNIX SOCK_STREAM socket; the decode side calls kve_arena_recv_pool()
 * and kve_arena_recv_session() and runs its engine on the received pool,
 * reading and appending KV in place. The receiver cannot allocate blocks
 * (with the memfd backend the bookkeeping stays in the creating process),
 * so the sender reserves room for the tokens the receiver will append
 * (kve_arena_session_reserve) before sending.
 *
 * Same conventions as kvengine.h: 0 or a negative errno; functions that
 * can fail on bad input take an error buffer. Nothing here prints or exits.
 * Using these functions links libkvarena (build/lib/libkvarena.a
 * -lpthread); the rest of libkvengine does not need it.
 */
#ifndef KVE_KV_ARENA_H
#define KVE_KV_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include <kvarena.h>

#include "kvengine.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kve_arena_kv;

struct kve_arena_kv_params {
	enum kva_backend backend;	/* KVA_BACKEND_AUTO, _KERNEL or _MEMFD */
	struct kva_dev *dev;		/* optional: use this handle (not owned);
					 * backend is then ignored */
	uint32_t n_blocks;		/* capacity wanted; the arena is rounded up
					 * to whole 2 MiB pages, so it may hold more */
	uint32_t block_tokens;		/* 0: KVE_DEFAULT_BLOCK_TOKENS */
	enum kve_kv_dtype dtype;
	uint32_t tenant_id;
	const char *name;		/* arena name, optional (< 32 bytes) */
};

/*
 * Everything a peer process needs to address the blocks of a mapped arena,
 * sent as plain bytes. Block `id` starts at byte
 *   (id / blocks_per_page) * 2 MiB + (id % blocks_per_page) * block_size
 * (the UAPI's formula, libkvarena's kva_block_offset()) and holds kv_block_bytes bytes of KV in the layout
 * of kvengine.h; the model fields let a receiver check that it runs the
 * same shape.
 */
struct kve_arena_geom {
	uint64_t arena_bytes;		/* multiple of 2 MiB */
	uint32_t block_size;		/* arena block: multiple of 4 KiB, <= 2 MiB */
	uint32_t blocks_per_page;	/* 2 MiB / block_size */
	uint32_t blocks_total;
	uint32_t block_tokens;
	uint32_t dtype;			/* enum kve_kv_dtype */
	uint32_t kv_block_bytes;	/* kve_kv_block_bytes(), <= block_size */
	uint32_t n_layers, n_kv_heads, head_dim;
	uint32_t reserved;		/* 0 */
};

/*
 * Creates an arena sized for p->n_blocks blocks of
 * kve_kv_block_bytes(m, block_tokens, dtype) bytes, each rounded up to a
 * multiple of 4 KiB. libkvarena blocks are at most 2 MiB: when one block
 * of block_tokens tokens would be larger, block_tokens is reduced to the
 * most tokens that fit (read the result from kve_arena_kv_pool(kv)); a
 * model whose single token needs more than 2 MiB is refused. The arena is
 * mapped at once.
 */
int kve_arena_kv_create(const struct kve_model *m,
			const struct kve_arena_kv_params *p,
			struct kve_arena_kv **kvp, char *err, size_t errlen);

/*
 * Maps a data fd received from the process that created the arena (a
 * memfd or a dma-buf; see kva_arena_data_fd) and describes it with g after
 * checking g against the model and the fd's size. The fd is not closed
 * (the mapping does not need it). Such a view has no kvarena bookkeeping:
 * sessions cannot be opened on it, only received.
 */
int kve_arena_kv_map(const struct kve_model *m, int data_fd,
		     const struct kve_arena_geom *g, struct kve_arena_kv **kvp,
		     char *err, size_t errlen);

/* Unmaps, destroys the arena (if owned) and closes the device handle (if
 * opened here). Sessions must have been closed. NULL is allowed. */
void kve_arena_kv_destroy(struct kve_arena_kv *kv);

/* The pool to give kve_engine_create(); valid while kv lives. */
const struct kve_kv_pool *kve_arena_kv_pool(const struct kve_arena_kv *kv);
void kve_arena_kv_geom(const struct kve_arena_kv *kv, struct kve_arena_geom *g);
/* The arena handle (NULL for a view made by kve_arena_kv_map). */
struct kva_arena *kve_arena_kv_arena(const struct kve_arena_kv *kv);
/* KVA_BACKEND_KERNEL or _MEMFD; KVA_BACKEND_AUTO for a view (unknown). */
enum kva_backend kve_arena_kv_backend(const struct kve_arena_kv *kv);

/* ---- sessions -------------------------------------------------------- */

struct kve_arena_session {
	struct kve_session s;	/* give &as->s to kve_prefill / kve_decode;
				 * s.n_blocks counts the blocks held */
	uint64_t sid;		/* the kvarena session */
	uint32_t cap;		/* block_table entries */
};

/* A kvarena session (cookie as kva_session_open) with room in its table
 * for max_tokens positions; it holds no blocks yet. */
int kve_arena_session_open(struct kve_arena_kv *kv, uint64_t cookie,
			   uint32_t max_tokens, struct kve_arena_session *as);

/* Makes the session hold enough blocks for n_more positions after
 * s.n_tokens, allocating the missing ones (all or nothing). -ENOSPC when
 * the table is too short or the arena is full, -EDQUOT over quota. */
int kve_arena_session_reserve(struct kve_arena_kv *kv,
			      struct kve_arena_session *as, uint32_t n_more);

/* dst (just opened, empty) takes a reference on the donor's first
 * n_blocks blocks, which must be full (n_blocks * block_tokens <=
 * donor n_tokens), and continues after them. */
int kve_arena_session_share(struct kve_arena_kv *kv,
			    struct kve_arena_session *dst,
			    const struct kve_arena_session *donor,
			    uint32_t n_blocks);

/* Ends the kvarena session (its blocks go back unless another session
 * still shares them) and frees the table. */
int kve_arena_session_close(struct kve_arena_kv *kv,
			    struct kve_arena_session *as);

/* kve_prefill / kve_decode after reserving the blocks the tokens need. */
int kve_arena_prefill(struct kve_engine *e, struct kve_arena_kv *kv,
		      struct kve_arena_session *as, const int32_t *tokens,
		      uint32_t n_tokens, float *logits);
int kve_arena_decode(struct kve_engine *e, struct kve_arena_kv *kv,
		     struct kve_arena_session *const *as,
		     const int32_t *tokens, uint32_t n, float *logits);

/* ---- handing KV to another process ------------------------------------ */

/* Sends the geometry and a new data fd of the arena (kva_send_fds()). */
int kve_arena_send_pool(int sock, struct kve_arena_kv *kv);
/* Receives them and maps the arena (kve_arena_kv_map); the received fd is
 * closed once mapped. */
int kve_arena_recv_pool(int sock, const struct kve_model *m,
			struct kve_arena_kv **kvp, char *err, size_t errlen);
/* Sends a session's n_tokens and block table (ids only, n_blocks of them). */
int kve_arena_send_session(int sock, const struct kve_session *s);
/* Receives one into s, with a malloc'd block_table (free() it); every id
 * is checked against the pool. */
int kve_arena_recv_session(int sock, const struct kve_arena_kv *kv,
			   struct kve_session *s);

#ifdef __cplusplus
}
#endif
#endif
