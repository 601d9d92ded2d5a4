// SPDX-License-Identifier: MIT
/*
 * model.c - turns a validated GGUF container into a llama-family model
 * ("llama"; "qwen2": llama with Q/K/V biases and NEOX rope; "qwen3":
 * NEOX rope and a per-head RMS norm of Q and K): reads the
 * hyper-parameters from the "<arch>.*" metadata, finds every tensor by
 * name and checks its shape and type against them. A file that asks for
 * something the pass does not do (another rope scaling, experts, ...) is
 * refused with a message naming the architecture and the feature. Owns
 * no compute and no KV.
 */
#include "engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

/* What an architecture changes in the llama pass. */
enum bias_rule { BIAS_OPTIONAL, BIAS_REQUIRED, BIAS_NONE };

static const struct arch_desc {
	const char *name;
	int rope_neox;		/* rotate (i, i + d/2) instead of (2i, 2i+1) */
	enum bias_rule qkv_bias;
	int qk_norm;		/* attn_q_norm / attn_k_norm per head before rope */
} archs[] = {
	/* llama.cpp reads Q/K/V biases for llama too, when present */
	{ "llama", 0, BIAS_OPTIONAL, 0 },
	{ "qwen2", 1, BIAS_REQUIRED, 0 },
	/* llama.cpp's qwen3 graph has no Q/K/V biases: a file's are not read */
	{ "qwen3", 1, BIAS_NONE, 1 },
};

static int get_arch_u32(const struct gguf *g, const char *arch, const char *k,
			uint32_t *v, int required, char *err, size_t errlen)
{
	char key[160];
	int rc;

	snprintf(key, sizeof(key), "%s.%s", arch, k);
	rc = gguf_get_u32(g, key, v);
	if (rc == -ENOENT && !required)
		return 0;
	if (rc)
		snprintf(err, errlen, "model: metadata %s %s", key,
			 rc == -ENOENT ? "is missing" : "has the wrong type or range");
	return rc;
}

static int get_arch_f32(const struct gguf *g, const char *arch, const char *k,
			float *v, char *err, size_t errlen)
{
	char key[160];
	int rc;

	snprintf(key, sizeof(key), "%s.%s", arch, k);
	rc = gguf_get_f32(g, key, v);
	if (rc == -ENOENT)
		return 0;
	if (rc || !isfinite(*v))
		snprintf(err, errlen, "model: metadata %s is not a finite float",
			 key);
	return rc ? rc : (isfinite(*v) ? 0 : -EINVAL);
}

static int bind(struct kve_model *mo, const char *name, struct kve_mat *m,
		uint32_t cols, uint32_t rows, int optional, char *err,
		size_t errlen)
{
	const struct gguf *g = &mo->g;
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	memset(m, 0, sizeof(*m));
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "model: tensor '%s' is missing", name);
		return -EINVAL;
	}
	if (t->n_dims > 2 || t->ne[0] != cols || t->ne[1] != rows) {
		snprintf(err, errlen,
			 "model: tensor '%s' has shape [%llu, %llu], expected [%u, %u]",
			 name, (unsigned long long)t->ne[0],
			 (unsigned long long)t->ne[1], cols, rows);
		return -EINVAL;
	}
	if (((uintptr_t)t->data & (t->type == GGML_F32 ? 3 : 1))) {
		snprintf(err, errlen, "model: tensor '%s' data is misaligned",
			 name);
		return -EINVAL;
	}
	m->data = t->data;
	m->type = t->type;
	m->rows = rows;
	m->cols = cols;
	m->row_bytes = t->size / rows;
	return 0;
}

/* A vector of dim F32s (norm weights, biases); optional ones may be absent
 * (*out = NULL). */
static int bind_vec(const struct gguf *g, const char *name, uint32_t dim,
		    const float **out, int optional, char *err, size_t errlen)
{
	const struct gguf_tensor *t = gguf_find_tensor(g, name);

	*out = NULL;
	if (!t) {
		if (optional)
			return 0;
		snprintf(err, errlen, "model: tensor '%s' is missing", name);
		return -EINVAL;
	}
	if (t->type != GGML_F32 || t->n_dims != 1 || t->ne[0] != dim ||
	    ((uintptr_t)t->data & 3)) {
		snprintf(err, errlen,
			 "model: %s tensor '%s' must be F32 [%u] (is %s [%llu])",
			 strstr(name, ".bias") ? "bias" : strstr(name, "rope") ? "rope" : "norm",
			 name, dim,
			 ggml_type_name(t->type), (unsigned long long)t->ne[0]);
		return -EINVAL;
	}
	*out = (const float *)t->data;
	return 0;
}

/* "<arch>.<k>" as a string, NUL-terminated into out: 0, -ENOENT, or
 * -EINVAL (wrong type, too long) with err written */
static int get_arch_str(const struct gguf *g, const char *arch, const char *k,
			char *out, size_t outlen, char *err, size_t errlen)
{
	struct gguf_str s;
	char key[160];
	int rc;

	snprintf(key, sizeof(key), "%s.%s", arch, k);
	rc = gguf_get_str(g, key, &s);
	if (rc == -ENOENT)
		return rc;
	if (rc || s.n >= outlen || memchr(s.p, 0, s.n)) {
		snprintf(err, errlen, "model: metadata %s is not a short string", key);
		return -EINVAL;
	}
	memcpy(out, s.p, s.n);
	out[s.n] = 0;
	return 0;
}

/*
 * Metadata that changes the computation in ways the pass does not
 * follow: refused, naming the architecture and the feature, rather than
 * loaded and run wrong. (Keys the pass does not need and that change
 * nothing for it, such as a sliding window llama.cpp does not apply to
 * these architectures either, are not looked at.)
 */
static int refuse_features(const struct gguf *g, const char *arch, char *err, size_t errlen)
{
	char rs[32];
	uint32_t v = 0;
	int rc;

	rc = get_arch_u32(g, arch, "expert_count", &v, 0, err, errlen);
	if (rc)
		return rc;
	if (v > 0) {
		snprintf(err, errlen, "model: %s file with %u experts: mixture of experts is "
			 "not supported", arch, v);
		return -EINVAL;
	}
	rc = get_arch_str(g, arch, "rope.scaling.type", rs, sizeof(rs), err, errlen);
	if (rc == -EINVAL)
		return rc;
	if (!rc && strcmp(rs, "none") && strcmp(rs, "linear")) {
		snprintf(err, errlen, "model: %s file with rope scaling '%s': not supported "
			 "(none, linear, and llama 3's rope_freqs)", arch, rs);
		return -EINVAL;
	}
	return 0;
}

static struct kve_model *finish(struct kve_model *m, char *err, size_t errlen)
{
	struct kve_model_info *in = &m->info;
	const struct gguf *g = &m->g;
	const struct arch_desc *ad = NULL;
	struct gguf_str s;
	char arch[64], nm[96];
	uint32_t i, qdim, kvdim;
	uint64_t bytes = 0;

	if (gguf_get_str(g, "general.architecture", &s))
		ERR("model: metadata general.architecture is missing or not a string");
	if (s.n == 0 || s.n >= sizeof(arch) || memchr(s.p, 0, s.n))
		ERR("model: general.architecture is empty or too long");
	memcpy(arch, s.p, s.n);
	arch[s.n] = 0;
	for (i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
		if (!strcmp(arch, archs[i].name))
			ad = &archs[i];
	if (!ad)
		ERR("model: architecture '%s' not supported (llama, qwen2, qwen3)", arch);
	in->arch = ad->name;
	in->rope_neox = ad->rope_neox;
	in->qk_norm = ad->qk_norm;
	if (refuse_features(g, arch, err, errlen))
		goto fail;

	if (get_arch_u32(g, arch, "embedding_length", &in->dim, 1, err, errlen) ||
	    get_arch_u32(g, arch, "block_count", &in->n_layers, 1, err, errlen) ||
	    get_arch_u32(g, arch, "feed_forward_length", &in->ffn_dim, 1, err, errlen) ||
	    get_arch_u32(g, arch, "attention.head_count", &in->n_heads, 1, err, errlen) ||
	    get_arch_u32(g, arch, "context_length", &in->ctx_len, 1, err, errlen))
		goto fail;
	in->n_kv_heads = in->n_heads;
	if (get_arch_u32(g, arch, "attention.head_count_kv", &in->n_kv_heads, 0, err, errlen))
		goto fail;
	if (!in->dim || in->dim > 65536 || !in->n_layers || in->n_layers > 1024 ||
	    !in->ffn_dim || in->ffn_dim > (1u << 20) || !in->n_heads ||
	    in->n_heads > 1024 || !in->ctx_len || in->ctx_len > (1u << 24))
		ERR("model: hyper-parameters out of range (dim %u layers %u ffn %u heads %u ctx %u)",
		    in->dim, in->n_layers, in->ffn_dim, in->n_heads, in->ctx_len);
	if (!in->n_kv_heads || in->n_heads % in->n_kv_heads)
		ERR("model: head_count_kv %u does not divide head_count %u",
		    in->n_kv_heads, in->n_heads);
	if (in->dim % in->n_heads)
		ERR("model: embedding_length %u not divisible by head_count %u",
		    in->dim, in->n_heads);
	in->head_dim = in->dim / in->n_heads;
	if (get_arch_u32(g, arch, "attention.key_length", &in->head_dim, 0, err, errlen))
		goto fail;
	if (!in->head_dim || in->head_dim > 1024 || (in->head_dim & 1))
		ERR("model: head dimension %u must be even and <= 1024", in->head_dim);
	in->rope_dims = in->head_dim;
	if (get_arch_u32(g, arch, "rope.dimension_count", &in->rope_dims, 0, err, errlen))
		goto fail;
	if (in->rope_dims > in->head_dim || (in->rope_dims & 1))
		ERR("model: rope.dimension_count %u must be even and <= head dim %u",
		    in->rope_dims, in->head_dim);
	in->rope_base = 10000.0f;
	in->rms_eps = 1e-5f;
	if (get_arch_f32(g, arch, "rope.freq_base", &in->rope_base, err, errlen) ||
	    get_arch_f32(g, arch, "attention.layer_norm_rms_epsilon", &in->rms_eps, err, errlen))
		goto fail;
	if (!(in->rope_base > 0) || !(in->rms_eps > 0))
		ERR("model: rope.freq_base and layer_norm_rms_epsilon must be > 0");
	{
		uint32_t vlen = in->head_dim;
		float factor = 0, scale = 0;

		if (get_arch_u32(g, arch, "attention.value_length", &vlen, 0, err, errlen))
			goto fail;
		if (vlen != in->head_dim)
			ERR("model: %s file with value heads of %u and key heads of %u: "
			    "different key and value lengths are not supported", arch, vlen,
			    in->head_dim);
		/* linear rope scaling: positions divided by the factor (the
		 * older key rope.scale_linear too, as llama.cpp reads it) */
		if (get_arch_f32(g, arch, "rope.scaling.factor", &factor, err, errlen) ||
		    (!factor && get_arch_f32(g, arch, "rope.scale_linear", &factor, err, errlen)))
			goto fail;
		if (factor < 0)
			ERR("model: %s rope scaling factor %g must be >= 0", arch, (double)factor);
		in->rope_freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
		if (get_arch_f32(g, arch, "attention.scale", &scale, err, errlen))
			goto fail;
		if (scale < 0)
			ERR("model: %s attention.scale %g must be >= 0", arch, (double)scale);
		in->attn_scale = scale == 0 ? 1.0f / sqrtf((float)in->head_dim) : scale;
	}

	qdim = in->n_heads * in->head_dim;
	kvdim = in->n_kv_heads * in->head_dim;
	{
		const struct gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
		if (!te)
			ERR("model: tensor 'token_embd.weight' is missing");
		if (te->ne[1] == 0 || te->ne[1] > (1u << 24))
			ERR("model: token_embd.weight vocabulary size out of range");
		in->vocab = (uint32_t)te->ne[1];
	}
	if (bind(m, "token_embd.weight", &m->tok_embd, in->dim, in->vocab, 0, err, errlen) ||
	    bind(m, "output.weight", &m->output, in->dim, in->vocab, 1, err, errlen) ||
	    bind_vec(g, "output_norm.weight", in->dim, &m->out_norm, 0, err, errlen))
		goto fail;
	/* llama 3.1+: one divisor per rotated pair's frequency */
	if (bind_vec(g, "rope_freqs.weight", in->rope_dims / 2, &m->rope_freqs, 1, err, errlen))
		goto fail;
	in->rope_freq_factors = m->rope_freqs != NULL;
	for (i = 0; m->rope_freqs && i < in->rope_dims / 2; i++)
		if (!(m->rope_freqs[i] > 0) || !isfinite(m->rope_freqs[i]))
			ERR("model: rope_freqs.weight[%u] is %g: frequency divisors must be "
			    "finite and > 0", i, (double)m->rope_freqs[i]);
	in->tied_output = m->output.data == NULL;
	if (in->tied_output)
		m->output = m->tok_embd;
	bytes += m->output.row_bytes * in->vocab;

	m->layers = calloc(in->n_layers, sizeof(*m->layers));
	if (!m->layers)
		ERR("model: out of memory");
	for (i = 0; i < in->n_layers; i++) {
		struct kve_layer *L = &m->layers[i];
#define B(field, suffix, c, r) \
		(snprintf(nm, sizeof(nm), "blk.%u." suffix ".weight", i), \
		 bind(m, nm, &L->field, c, r, 0, err, errlen))
#define N(field, suffix) \
		(snprintf(nm, sizeof(nm), "blk.%u." suffix ".weight", i), \
		 bind_vec(g, nm, in->dim, &L->field, 0, err, errlen))
#define BIAS(field, suffix, n) \
		(ad->qkv_bias == BIAS_NONE ? 0 : \
		 (snprintf(nm, sizeof(nm), "blk.%u." suffix ".bias", i), \
		  bind_vec(g, nm, n, &L->field, ad->qkv_bias == BIAS_OPTIONAL, err, errlen)))
#define HN(field, suffix) \
		(!ad->qk_norm ? 0 : \
		 (snprintf(nm, sizeof(nm), "blk.%u." suffix ".weight", i), \
		  bind_vec(g, nm, in->head_dim, &L->field, 0, err, errlen)))
		if (N(attn_norm, "attn_norm") || N(ffn_norm, "ffn_norm") ||
		    BIAS(bq, "attn_q", qdim) || BIAS(bk, "attn_k", kvdim) ||
		    BIAS(bv, "attn_v", kvdim) ||
		    HN(q_norm, "attn_q_norm") || HN(k_norm, "attn_k_norm") ||
		    B(wq, "attn_q", in->dim, qdim) ||
		    B(wk, "attn_k", in->dim, kvdim) ||
		    B(wv, "attn_v", in->dim, kvdim) ||
		    B(wo, "attn_output", qdim, in->dim) ||
		    B(gate, "ffn_gate", in->dim, in->ffn_dim) ||
		    B(up, "ffn_up", in->dim, in->ffn_dim) ||
		    B(down, "ffn_down", in->ffn_dim, in->dim))
			goto fail;
#undef B
#undef N
#undef BIAS
#undef HN
		/* all three or none: the pass adds them together */
		if ((L->bq != NULL) != (L->bk != NULL) || (L->bq != NULL) != (L->bv != NULL))
			ERR("model: layer %u has some of attn_q/k/v.bias but not all three", i);
		if (i && (L->bq != NULL) != (m->layers[0].bq != NULL))
			ERR("model: layer %u %s Q/K/V biases, layer 0 %s", i,
			    L->bq ? "has" : "lacks", L->bq ? "lacks them" : "has them");
		bytes += L->wq.row_bytes * qdim + (L->wk.row_bytes + L->wv.row_bytes) * kvdim +
			 L->wo.row_bytes * in->dim +
			 (L->gate.row_bytes + L->up.row_bytes) * in->ffn_dim +
			 L->down.row_bytes * in->dim;
	}
	in->qkv_bias = m->layers[0].bq != NULL;
	in->weight_type = gguf_find_tensor(g, "blk.0.attn_q.weight")->type;
	in->weight_bytes = bytes;
	return m;
fail:
	kve_model_free(m);
	return NULL;
}

/* KVE_WEIGHTS=copy|mmap, else copy when transparent huge pages are
 * enabled ("always" or "madvise") */
static int weights_copy(void)
{
	const char *v = getenv("KVE_WEIGHTS");
	char buf[128] = "";
	FILE *f;

	if (v && !strcmp(v, "mmap"))
		return 0;
	if (v && !strcmp(v, "copy"))
		return 1;
	f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strstr(buf, "[always]") || strstr(buf, "[madvise]");
}

/* KVE_PACK=0 keeps the weights row-major (to measure what packing gives) */
static int pack_off(void)
{
	const char *v = getenv("KVE_PACK");

	return v && !strcmp(v, "0");
}

/*
 * The matrices decode streams (every layer's and the output head, also
 * when it is the embedding) are packed into panels in
 * the private copy of the file; shapes that do not pack stay row-major
 * (Documentation/engine.md, "Weight layout").
 */
static int pack_weights(struct kve_model *m, char *err, size_t errlen)
{
	/* the set the engine will run (picked once per process): it may
	 * want its own layout (Q4_0 x16); none means its self-check could
	 * not run for want of memory, so the load fails like any other
	 * allocation and may be tried again */
	const struct kve_kernels *k = kve_kernels_select();
	uint32_t l, i;

	if (!k)
		goto oom;

	for (l = 0; l < m->info.n_layers; l++) {
		struct kve_layer *L = &m->layers[l];
		struct kve_mat *w[] = { &L->wq, &L->wk, &L->wv, &L->wo,
					&L->gate, &L->up, &L->down };

		for (i = 0; i < sizeof(w) / sizeof(w[0]); i++)
			if (kve_mat_pack_for(w[i], k) < 0)
				goto oom;
	}
	if (kve_mat_pack_for(&m->output, k) < 0)
		goto oom;
	/* tied: the embedding is the output head, its rows looked up
	 * through the same helpers the kernels read panels with */
	if (m->info.tied_output)
		m->tok_embd = m->output;
	return 0;
oom:
	snprintf(err, errlen, "model: out of memory packing the weights");
	return -ENOMEM;
}

struct kve_model *kve_model_load(const char *path, char *err, size_t errlen)
{
	struct kve_model *m = calloc(1, sizeof(*m));

	if (!m) {
		snprintf(err, errlen, "model: out of memory");
		return NULL;
	}
	if (gguf_open_file(&m->g, path, weights_copy(), err, errlen)) {
		free(m);
		return NULL;
	}
	m = finish(m, err, errlen);
	if (m && m->g.writable && !pack_off() && pack_weights(m, err, errlen)) {
		kve_model_free(m);
		return NULL;
	}
	if (m)
		gguf_seal(&m->g);
	return m;
}

struct kve_model *kve_model_load_mem(const void *buf, size_t len, char *err,
				     size_t errlen)
{
	struct kve_model *m = calloc(1, sizeof(*m));

	if (!m) {
		snprintf(err, errlen, "model: out of memory");
		return NULL;
	}
	if (gguf_open_mem(&m->g, buf, len, err, errlen)) {
		free(m);
		return NULL;
	}
	return finish(m, err, errlen);
}

void kve_model_free(struct kve_model *m)
{
	if (!m)
		return;
	free(m->layers);
	gguf_close(&m->g);
	free(m);
}

const struct kve_model_info *kve_model_info(const struct kve_model *m)
{
	return &m->info;
}

int kve_model_matrix(const struct kve_model *m, uint32_t n, const void **p, size_t *len)
{
	const struct kve_mat *w;

	if (n / 7 < m->info.n_layers) {
		const struct kve_layer *L = &m->layers[n / 7];
		const struct kve_mat *in_layer[7] = { &L->wq, &L->wk, &L->wv, &L->wo,
						      &L->gate, &L->up, &L->down };

		w = in_layer[n % 7];
	} else if (n == 7 * m->info.n_layers) {
		w = &m->output;
	} else {
		return -ENOENT;
	}
	*p = w->data;
	*len = (size_t)w->rows * w->row_bytes;
	return 0;
}

const char *kve_model_meta_str(const struct kve_model *m, const char *key,
			       size_t *len)
{
	struct gguf_str s;

	*len = 0;
	if (!m || !key || gguf_get_str(&m->g, key, &s))
		return NULL;
	*len = (size_t)s.n;
	return s.p;
}

size_t kve_kv_block_bytes(const struct kve_model *m, uint32_t block_tokens,
			  enum kve_kv_dtype dtype)
{
	const struct kve_model_info *in;

	if (!m || (dtype != KVE_KV_F32 && dtype != KVE_KV_F16 && dtype != KVE_KV_Q8_0))
		return 0;	/* no block of an unknown type: callers refuse 0 */
	in = &m->info;
	if (dtype == KVE_KV_Q8_0)
		return in->head_dim % QK8_0 ? 0 :
		       (size_t)in->n_layers * 2 * in->n_kv_heads * block_tokens *
		       (in->head_dim / 16 + in->head_dim);
	return (size_t)in->n_layers * 2 * in->n_kv_heads * block_tokens *
	       in->head_dim * (dtype == KVE_KV_F16 ? 2 : 4);
}

void kve_mat_row_f32(const struct kve_mat *m, uint32_t row, float *out)
{
	uint32_t i, j;

	switch (m->type) {
	case GGML_F32:
	case GGML_F16:
	case GGML_BF16:
		for (i = 0; i < m->cols; i++)
			out[i] = kve_mat_at(m, row, i);
		break;
	default: {	/* the other quantised types: block by block */
		uint8_t buf[256];	/* a Q4_0 x16 block's copy */

		for (i = 0; i < m->cols / ggml_blck_size(m->type); i++)
			kve_dequant_block(m->type, kve_mat_blk_get(m, row, i, buf),
					  out + (size_t)i * ggml_blck_size(m->type));
		break;
	}
	case GGML_Q8_0:
		for (i = 0; i < m->cols / QK8_0; i++) {
			uint8_t buf[Q8_0_BYTES];
			const uint8_t *blk = kve_q8_blk_get(m, row, i, buf), *q = blk + 2;
			uint16_t h;
			float d;

			memcpy(&h, blk, 2);
			d = kve_f16_to_f32(h);
			for (j = 0; j < QK8_0; j++)
				out[i * QK8_0 + j] = d * (float)(int8_t)q[j];
		}
		break;
	}
}
