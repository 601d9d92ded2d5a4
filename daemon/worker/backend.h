/* SPDX-License-Identifier: MIT */
/*
 * backend.h - the stage compute ABI of kvarenad's workers (version 1).
 *
 * A backend computes logits for a stage (prefill or decode) over KV blocks
 * that live in a kvarena arena. `cpu` (the built-in engine) is compiled
 * into the worker; any other backend is a shared object the worker loads
 * with dlopen() (`--backend /path/to/x.so`) that exports
 *
 *     const struct kvd_backend_ops *kvd_backend_entry(uint32_t abi_version);
 *
 * returning its ops for that ABI version, or NULL when it does not speak
 * it. A GPU prefill backend imports the arena's dma-buf (init->arena_fd);
 * a CPU-side backend uses the mapping (init->arena_base). Either way the
 * KV it writes must follow the engine's block layout (proto.h's
 * struct kvd_kv_geom and Documentation/engine.md, "KV block layout"),
 * so that any other stage's backend reads it in place.
 *
 * Rules: no global state the worker can see; errors are negative errno
 * values with a one-line message in err; the worker owns sampling, so a
 * backend only fills logits (vocab floats per sequence). Structs carry
 * their size first; a backend reads only the fields its size covers.
 * Documentation/daemon.md, "Backends", is the reference.
 */
#ifndef KVD_BACKEND_H
#define KVD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVD_BACKEND_ABI_VERSION 1
#define KVD_BACKEND_ENTRY "kvd_backend_entry"

struct kvd_backend_init {
	uint32_t size;			/* sizeof(struct kvd_backend_init) */
	uint32_t role;			/* enum kvd_role */
	const char *model_path;		/* GGUF file */
	const char *options;		/* backend-specific, may be NULL */
	int arena_fd;			/* dma-buf or memfd; not owned */
	void *arena_base;		/* the worker's mapping of the arena */
	struct kvd_kv_geom geom;
	uint32_t n_threads;
	uint32_t max_batch;		/* sequences per decode call */
	uint32_t max_ctx;		/* longest sequence */
	/* tokens of one step at most (prompt chunks and decode tokens
	 * together); 0: unknown (before this field) */
	uint32_t max_step_tokens;
};

/* One sequence: block_table[i] holds positions [i*bt, (i+1)*bt);
 * n_tokens positions already hold KV; the backend writes only positions
 * >= n_tokens and advances n_tokens by what it appends. */
struct kvd_seq {
	uint32_t *block_table;
	uint32_t n_blocks;
	uint32_t n_tokens;
};

struct kvd_backend_ops {
	uint32_t abi_version;		/* KVD_BACKEND_ABI_VERSION */
	uint32_t size;			/* sizeof(struct kvd_backend_ops) */
	const char *name;
	int (*create)(const struct kvd_backend_init *init, void **ctx,
		      char *err, size_t errlen);
	void (*destroy)(void *ctx);
	uint32_t (*vocab_size)(void *ctx);
	/* Append n tokens to seq; logits of the last one to logits. */
	int (*prefill)(void *ctx, struct kvd_seq *seq, const int32_t *tokens,
		       uint32_t n, float *logits);
	/* One token for each of n sequences; logits + i * vocab for seq i. */
	int (*decode)(void *ctx, struct kvd_seq *const *seqs,
		      const int32_t *tokens, uint32_t n, float *logits);
	/* Optional (a backend whose size does not cover it, or NULL: the
	 * worker calls decode for the one-token sequences and prefill for
	 * each other): a ragged batch of n distinct sequences, sequence i
	 * appending n_new[i] tokens (tokens holds them sequence by
	 * sequence), the logits of its last token to logits + i * vocab.
	 * A step mixing prompt chunks with decode tokens is one call. */
	int (*batch)(void *ctx, struct kvd_seq *const *seqs, const uint32_t *n_new,
		     const int32_t *tokens, uint32_t n, float *logits);
};

typedef const struct kvd_backend_ops *(*kvd_backend_entry_fn)(uint32_t abi);

/* The built-in CPU engine backend. */
const struct kvd_backend_ops *kvd_backend_cpu(void);

#ifdef __cplusplus
}
#endif
#endif
