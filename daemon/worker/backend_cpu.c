// SPDX-License-Identifier: MIT
/*
 * backend_cpu.c - the `cpu` backend: kvarena's CPU engine (libkvengine)
 * behind the worker's backend ABI (backend.h). Built into the worker, and
 * also built alone as a dlopen()-able plugin (daemon/backends/cpu) that
 * exports kvd_backend_entry(), which proves the ABI with a real engine.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvengine.h"

struct cpu_backend {
	struct kve_model *model;
	struct kve_engine *engine;
	struct kve_kv_pool pool;
	void *base;
	struct kvd_kv_geom geom;
	uint32_t vocab;
};

static void *cpu_block_ptr(void *ctx, uint32_t id)
{
	struct cpu_backend *b = ctx;

	if (id >= b->geom.blocks_total)
		return NULL;
	return kvd_block_addr(b->base, &b->geom, id);
}

static int cpu_create(const struct kvd_backend_init *in, void **ctxp,
		      char *err, size_t errlen)
{
	struct kve_engine_params ep = { 0 };
	const struct kve_model_info *mi;
	struct cpu_backend *b;

	if (!in || in->size < offsetof(struct kvd_backend_init, max_step_tokens) ||
	    !in->model_path || !in->arena_base) {
		snprintf(err, errlen, "cpu backend: incomplete init");
		return -EINVAL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->model = kve_model_load(in->model_path, err, errlen);
	if (!b->model) {
		free(b);
		return -EINVAL;
	}
	mi = kve_model_info(b->model);
	if (mi->n_layers != in->geom.n_layers || mi->n_kv_heads != in->geom.n_kv_heads ||
	    mi->head_dim != in->geom.head_dim ||
	    kve_kv_block_bytes(b->model, in->geom.block_tokens, in->geom.dtype) !=
		    in->geom.kv_block_bytes) {
		snprintf(err, errlen, "cpu backend: the arena's KV geometry does not fit %s",
			 in->model_path);
		kve_model_free(b->model);
		free(b);
		return -EINVAL;
	}
	b->base = in->arena_base;
	b->geom = in->geom;
	b->vocab = mi->vocab;
	b->pool.ctx = b;
	b->pool.block_ptr = cpu_block_ptr;
	b->pool.block_tokens = in->geom.block_tokens;
	b->pool.dtype = (enum kve_kv_dtype)in->geom.dtype;
	ep.n_threads = in->n_threads ? in->n_threads : 1;
	ep.max_batch = in->max_batch ? in->max_batch : 8;
	/* a step's token budget is one pass (kve_batch) */
	if (in->size >= sizeof(*in))
		ep.max_chunk = in->max_step_tokens <= 4096 ? in->max_step_tokens : 4096;
	ep.max_ctx = in->max_ctx;
	b->engine = kve_engine_create(b->model, &b->pool, &ep, err, errlen);
	if (!b->engine) {
		kve_model_free(b->model);
		free(b);
		return -EINVAL;
	}
	*ctxp = b;
	return 0;
}

static void cpu_destroy(void *ctx)
{
	struct cpu_backend *b = ctx;

	if (!b)
		return;
	kve_engine_free(b->engine);
	kve_model_free(b->model);
	free(b);
}

static uint32_t cpu_vocab(void *ctx)
{
	return ((struct cpu_backend *)ctx)->vocab;
}

/* struct kvd_seq and struct kve_session are the same three fields. */
_Static_assert(sizeof(struct kvd_seq) == sizeof(struct kve_session),
	       "kvd_seq must match kve_session");

static int cpu_prefill(void *ctx, struct kvd_seq *seq, const int32_t *tokens,
		       uint32_t n, float *logits)
{
	struct cpu_backend *b = ctx;

	return kve_prefill(b->engine, (struct kve_session *)seq, tokens, n, logits);
}

static int cpu_decode(void *ctx, struct kvd_seq *const *seqs,
		      const int32_t *tokens, uint32_t n, float *logits)
{
	struct cpu_backend *b = ctx;

	return kve_decode(b->engine, (struct kve_session *const *)seqs, tokens, n,
			  logits);
}

static int cpu_batch(void *ctx, struct kvd_seq *const *seqs, const uint32_t *n_new,
		     const int32_t *tokens, uint32_t n, float *logits)
{
	struct cpu_backend *b = ctx;

	return kve_batch(b->engine, (struct kve_session *const *)seqs, n_new, tokens, n,
			 logits);
}

static const struct kvd_backend_ops cpu_ops = {
	.abi_version = KVD_BACKEND_ABI_VERSION,
	.size = sizeof(struct kvd_backend_ops),
	.name = "cpu",
	.create = cpu_create,
	.destroy = cpu_destroy,
	.vocab_size = cpu_vocab,
	.prefill = cpu_prefill,
	.decode = cpu_decode,
	.batch = cpu_batch,
};

const struct kvd_backend_ops *kvd_backend_cpu(void)
{
	return &cpu_ops;
}

#ifdef KVD_BACKEND_PLUGIN
__attribute__((visibility("default")))
const struct kvd_backend_ops *kvd_backend_entry(uint32_t abi)
{
	return abi == KVD_BACKEND_ABI_VERSION ? &cpu_ops : NULL;
}
#endif
