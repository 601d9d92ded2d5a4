// SPDX-License-Identifier: MIT
/*
 * forward.c - the llama forward pass (with qwen2's Q/K/V biases and NEOX
 * rope where the model has them) over paged KV: prefill (a prompt chunk
 * as one batch) and decode (one token from each of several sessions as one
 * batch). Both run the same pass over T tokens, so each weight matrix is
 * read once per pass whatever T is. K/V live in caller-owned blocks reached
 * through struct kve_kv_pool; see Documentation/engine.md for the layout.
 *
 * Owns the scratch activations and the thread team; does not own weights
 * (model.c), KV memory (the pool) or sessions (the caller).
 */
#include "engine_internal.h"
#include "threads.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct mm_item {
	const struct kve_mat *w;
	float *y;
	int rows_per;		/* rows per chunk */
	int first;		/* this item's first chunk */
};

struct mm_job {
	struct kve_engine *e;
	const float *x;
	const struct kve_q8x *xq;
	const struct kve_q8k *xk;
	int T, n, nchunks;
	int silu;		/* it[0] is the gate, it[1] the up matrix:
				 * g = silu(g) * u once a chunk has both */
	float *res;		/* one matrix: res += y, row range by row range
				 * (the residual add, in the job rather than
				 * after it on one thread) */
	struct mm_item it[3];
};

/* Tokens of a pass whose sessions begin with the same whole blocks (a
 * shared prompt, a prompt chunk after its first): their attention reads
 * those blocks once for all of them (attn_group_task) */
struct attn_group {
	uint32_t first, n;	/* members: att_tok[first, first + n) */
	uint32_t shared;	/* leading blocks every member reads whole */
	uint32_t ss;		/* a score row: the longest context, in 16s */
	uint32_t top;		/* the longest context */
	int chunk;		/* one session's prompt chunk (attn_plan) */
};

struct kve_engine {
	const struct kve_model *m;
	struct kve_kv_pool pool;
	const struct kve_kernels *k;
	struct kve_threads *th;
	uint32_t max_tok, max_ctx, max_chunk, max_batch;
	size_t es;		/* bytes per KV element (F32, F16) */
	size_t slab;		/* bytes of one [layer][K|V][kv_head] of a block */
	int kvt;		/* the pool's dtype */
	uint32_t rot_k, rot_v;	/* Q8_0 KV: Hadamard rotation sizes (kv_rotate) */
	struct kve_q8x *qq;	/* Q8_0 KV: the queries quantised, as e->q */
	float *x, *xb, *q, *kk, *vv, *att, *hb, *hb2;
	struct kve_q8x *xq;
	struct kve_q8k *xk;
	float *scores;		/* per thread, attn_scratch() floats each */
	float *inv_freq;
	float *rope_cs;		/* max_tok x rope_dims: cos, sin per pair */
	/* the pass in flight */
	uint32_t T, layer;
	int kv_in_attn;		/* rope and KV stores in the attention tasks:
				 * every token of the pass is another session's */
	struct kve_session *const *tok_sess;
	const uint32_t *tok_pos;
	struct kve_session **sess_buf;
	uint32_t *pos_buf;
	/* the pass's attention plan (attn_plan): att_tok lists the tokens
	 * that read their KV alone (n_alone), then each group's members */
	uint32_t *att_tok, *att_gid, n_alone, n_groups;
	struct attn_group *att_grp;	/* 2 x max_tok: found, then final */
	uint64_t *att_cost;		/* the work of the tasks before each unit */
};

/* ---- helpers -------------------------------------------------------- */

/* cos/sin of pos * inv_freq[i] for the rotated pairs, once per token per
 * pass (every layer and both Q and K reuse them) */
static void rope_table(float *cs, int rope_dims, uint32_t pos, const float *inv_freq)
{
	int i;

	for (i = 0; i < rope_dims / 2; i++) {
		float th = (float)pos * inv_freq[i];

		cs[2 * i] = cosf(th);
		cs[2 * i + 1] = sinf(th);
	}
}

/* Rotates pair i of each head by angle i: the pair is (2i, 2i+1) for
 * llama ("normal" rope in llama.cpp), (i, i + rope_dims/2) for NEOX-style
 * models (qwen2), which rotate the two halves of the rotated dims. */
static void rope(float *v, int n_heads, int head_dim, int rope_dims, int neox,
		 const float *cs)
{
	int h, i, step = neox ? 1 : 2, other = neox ? rope_dims / 2 : 1;

	for (i = 0; i < rope_dims / 2; i++) {
		float c = cs[2 * i], s = cs[2 * i + 1];

		for (h = 0; h < n_heads; h++) {
			float *p = v + (size_t)h * head_dim + step * i;
			float a = p[0], b = p[other];

			p[0] = a * c - b * s;
			p[other] = a * s + b * c;
		}
	}
}

static void add_bias(float *y, const float *bias, uint32_t T, uint32_t n)
{
	uint32_t t, i;

	for (t = 0; t < T; t++)
		for (i = 0; i < n; i++)
			y[(size_t)t * n + i] += bias[i];
}

static uint8_t *kv_head_base(struct kve_engine *e, uint32_t block_id,
			     uint32_t layer, int is_v, uint32_t kv_head)
{
	const struct kve_model_info *in = &e->m->info;
	uint8_t *b = e->pool.block_ptr(e->pool.ctx, block_id);
	size_t idx = (size_t)(layer * 2 + is_v) * in->n_kv_heads + kv_head;

	return b + idx * e->slab;
}

/* the bytes of a slab that its first rows rows take (what to ask memory
 * for): a Q8_0 slab's all (K's quants lie across its rows) */
static size_t slab_rows(const struct kve_engine *e, uint32_t rows)
{
	uint32_t hd = e->m->info.head_dim;

	if (e->kvt == KVE_KV_Q8_0)
		return e->slab;
	return (size_t)rows * hd * e->es;
}

/*
 * A Q8_0 KV rotates each head before it is quantised, as llama.cpp does
 * for a quantised cache: x -> H x in pieces of n values, H the orthonormal
 * Walsh-Hadamard matrix of size n (Sylvester's order, entries
 * +-1/sqrt(n)), which spreads a few large values over the whole piece, so
 * that one of them no longer sets a block's scale for 31 small ones. Q
 * and K by the same H (n: the largest power of two from 64 dividing the
 * head), so their dots are unchanged; V by H of 64, and each head's
 * attention output by it again (H H = I). Heads that are not a multiple
 * of 64 are not rotated.
 */
static void kv_rotate(const struct kve_engine *e, float *x, uint32_t len, uint32_t n)
{
	if (n)
		e->k->hadamard(x, (int)len, (int)n);
}

/* Q8_0 KV: query heads [h0, h0 + nh) of token t rotated (in place: the
 * float queries serve nothing else then) and quantised to dst */
static void quantize_heads(struct kve_engine *e, uint32_t t, uint32_t h0, uint32_t nh,
			   struct kve_q8x *dst)
{
	uint32_t hd = e->m->info.head_dim;
	float *q = e->q + ((size_t)t * e->m->info.n_heads + h0) * hd;

	kv_rotate(e, q, nh * hd, e->rot_k);
	e->k->quantize_q8x(q, (int)(nh * hd), dst);
}

/* one call's attention over a slab: the scores of nh query heads from
 * K (v = 0) or their sums of V rows (v = 1) */
static void attn_call(const struct kve_engine *e, int v, const float *q,
		      const struct kve_q8x *qq, int nh, const uint8_t *kb, uint32_t n,
		      float *sc, size_t ss, float *out)
{
	const struct kve_kernels *k = e->k;
	int hd = (int)e->m->info.head_dim, bt = (int)e->pool.block_tokens;

	if (e->kvt == KVE_KV_Q8_0) {
		if (!v)
			k->attn_scores_q8(qq, nh, kb, bt, (int)n, hd, e->m->info.attn_scale, sc, ss);
		else
			k->attn_values_q8(out, nh, sc, ss, kb, bt, (int)n, hd);
	} else if (!v) {
		k->attn_scores(q, nh, kb, e->kvt == KVE_KV_F16, (int)n, hd, e->m->info.attn_scale,
			       sc, ss);
	} else {
		k->attn_values(out, nh, sc, ss, kb, e->kvt == KVE_KV_F16, (int)n, hd);
	}
}

/* ---- threaded matmul ------------------------------------------------ */

/* Which activations a weight type multiplies: F32 ones, Q8_0 blocks of
 * 32 (kve_q8x) or Q8_K blocks of 256 (kve_q8k) */
enum act { ACT_F32, ACT_Q8, ACT_Q8K };

static enum act act_of(uint32_t type)
{
	switch (type) {
	case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1:
	case GGML_IQ4_NL:
		return ACT_Q8;
	case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
	case GGML_IQ4_XS:
		return ACT_Q8K;
	default:
		return ACT_F32;
	}
}

static void mm_rows(const struct kve_engine *e, const struct mm_job *j,
		    const struct kve_mat *w, float *y, int r0, int r1)
{
	const struct kve_kernels *k = e->k;
	int rows = (int)w->rows;

	switch (w->type) {
	case GGML_F32:
		k->mm_f32(w, j->x, j->T, y, rows, r0, r1);
		break;
	case GGML_F16:
		k->mm_f16(w, j->x, j->T, y, rows, r0, r1);
		break;
	case GGML_BF16:
		k->mm_bf16(w, j->x, j->T, y, rows, r0, r1);
		break;
	case GGML_Q8_0:
		k->mm_q8(w, j->xq, j->T, y, rows, r0, r1);
		break;
	case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: case GGML_IQ4_NL:
		k->mm_q32(w, j->xq, j->T, y, rows, r0, r1);
		break;
	case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
	case GGML_IQ4_XS:
		k->mm_qk(w, j->xk, j->T, y, rows, r0, r1);
		break;
	}
}

/* One chunk: a range of rows of one matrix (of both with silu). Every
 * (row, token) is summed the same whatever the range (the kernels'
 * contract), so the split never changes a result. */
static void mm_worker(void *arg, int c, int tid)
{
	struct mm_job *j = arg;
	const struct mm_item *it = &j->it[0];
	int r0, r1, t, items = j->silu ? 1 : j->n;

	(void)tid;
	while (it + 1 < j->it + items && c >= it[1].first)
		it++;
	r0 = (c - it->first) * it->rows_per;
	r1 = r0 + it->rows_per < (int)it->w->rows ? r0 + it->rows_per : (int)it->w->rows;
	mm_rows(j->e, j, it->w, it->y, r0, r1);
	if (j->res) {
		size_t n = it->w->rows;

		for (t = 0; t < j->T; t++) {
			float *x = j->res + (size_t)t * n;
			const float *y = it->y + (size_t)t * n;
			int r;

			for (r = r0; r < r1; r++)
				x[r] += y[r];
		}
	}
	if (!j->silu)
		return;
	mm_rows(j->e, j, j->it[1].w, j->it[1].y, r0, r1);
	/* elementwise, tails through the same vector code: per element
	 * the same as over the whole buffer */
	for (t = 0; t < j->T; t++)
		j->e->k->silu_mul(it->y + (size_t)t * it->w->rows + r0,
				  j->it[1].y + (size_t)t * it->w->rows + r0, r1 - r0);
}

/* Chunks per matrix: a few per thread, so that a thread the host
 * preempts holds back a small share, and no more than MM_CHUNK_BYTES of
 * weights each, so that the thread that finishes first waits at most
 * about that long for the other's last chunk (the output head was 8
 * chunks of 1.7 MB for 110M Q4_0); not much less, as each thread's run
 * of chunks is one stream only while its chunks follow each other in
 * memory (threads.c's chunk_of). Rows per
 * chunk a multiple of 16 (whole 4- and 16-row panels, and whole cache
 * lines of y) */
#define MM_CHUNK_BYTES	(256u << 10)

static int mm_split(const struct kve_engine *e, struct mm_item *it)
{
	int nt = kve_threads_count(e->th), rows = (int)it->w->rows;
	size_t bytes = (size_t)rows * it->w->row_bytes / MM_CHUNK_BYTES;
	int want = nt == 1 ? 1 : 4 * nt;

	if (nt > 1 && bytes > (size_t)want)
		want = bytes < 4096 ? (int)bytes : 4096;
	int per = ((rows + want - 1) / want + 15) & ~15;

	if (nt == 1 || per >= rows)
		per = rows;
	it->rows_per = per;
	return (rows + per - 1) / per;
}

static void matmul_job(struct kve_engine *e, struct mm_job *j)
{
	int i, q8 = 0, q8k = 0, cols = (int)j->it[0].w->cols;

	/* the matrices of one job share x, but a mix (Q4_K_M) may need both
	 * quantised forms of it */
	for (i = 0; i < j->n; i++) {
		q8 |= act_of(j->it[i].w->type) == ACT_Q8;
		q8k |= act_of(j->it[i].w->type) == ACT_Q8K;
	}
	if (q8) {
		for (i = 0; i < j->T; i++)
			e->k->quantize_q8x(j->x + (size_t)i * cols, cols,
					   e->xq + (size_t)i * (cols / QK8_0));
		j->xq = e->xq;
	}
	if (q8k) {
		for (i = 0; i < j->T; i++)
			e->k->quantize_q8k(j->x + (size_t)i * cols, cols,
					   e->xk + (size_t)i * (cols / QK_K));
		j->xk = e->xk;
	}
	j->nchunks = 0;
	for (i = 0; i < (j->silu ? 1 : j->n); i++) {
		j->it[i].first = j->nchunks;
		j->nchunks += mm_split(e, &j->it[i]);
	}
	kve_threads_run(e->th, mm_worker, j, j->nchunks);
}

/* y_i = W_i x for up to three matrices sharing the input x (T rows). */
static void matmul(struct kve_engine *e, const float *x, int T, int n,
		   const struct kve_mat *w0, float *y0,
		   const struct kve_mat *w1, float *y1,
		   const struct kve_mat *w2, float *y2)
{
	struct mm_job j = { .e = e, .x = x, .T = T, .n = n,
		.it = { { w0, y0, 0, 0 }, { w1, y1, 0, 0 }, { w2, y2, 0, 0 } } };

	matmul_job(e, &j);
}

/* res += W x (T rows; y is W x's scratch): the residual connection */
static void matmul_add(struct kve_engine *e, const float *x, int T,
		       const struct kve_mat *w, float *y, float *res)
{
	struct mm_job j = { .e = e, .x = x, .T = T, .n = 1, .res = res,
		.it = { { w, y, 0, 0 } } };

	matmul_job(e, &j);
}

/* gate = silu(W_gate x) * (W_up x), one job: a chunk computes the same
 * rows of both and applies the gate to them */
static void matmul_swiglu(struct kve_engine *e, const float *x, int T,
			  const struct kve_mat *gate, float *g,
			  const struct kve_mat *up, float *u)
{
	struct mm_job j = { .e = e, .x = x, .T = T, .n = 2, .silu = 1,
		.it = { { gate, g, 0, 0 }, { up, u, 0, 0 } } };

	matmul_job(e, &j);
}

/* ---- attention ------------------------------------------------------ */

/* Attention tasks: one per (token or group, KV head), attn_plan; chunk c
 * runs a range of them, as much work as any other (task_at) */
static int attn_chunks(const struct kve_engine *e)
{
	int tasks = (int)((e->n_alone + e->n_groups) * e->m->info.n_kv_heads);
	int nt = kve_threads_count(e->th);
	int want = nt == 1 ? 1 : 8 * nt;

	return tasks < want ? tasks : want;
}

/* The largest of x[0..n-1] (NaNs skipped; -inf if none), as one running
 * "if (x > m) m = x" would give it up to the sign of a zero maximum (which
 * e^(x - m) does not see): eight running maxima side by side, so the
 * compares do not wait on each other */
static float max_of(const float *x, uint32_t n)
{
	float m[8] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY,
		       -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	const float *end = x + n;
	int i;

	for (; end - x >= 8; x += 8)
		for (i = 0; i < 8; i++)
			if (x[i] > m[i])
				m[i] = x[i];
	for (; x < end; x++)
		if (*x > m[0])
			m[0] = *x;
	for (i = 1; i < 8; i++)
		if (m[i] > m[0])
			m[0] = m[i];
	return m[0];
}

/* x[j] *= a, eight at a time (the compiler's -O2 vectoriser leaves a
 * loop that needs a tail alone) */
static void scale_by(float *x, uint32_t n, float a)
{
	float *end = x + n;
	int i;

	for (; end - x >= 8; x += 8)
		for (i = 0; i < 8; i++)
			x[i] *= a;
	for (; x < end; x++)
		*x *= a;
}

/* query heads an attention call takes: the GQA group, at most
 * KVE_ATTN_HEADS; each has a max_ctx row of scores per thread */
static uint32_t attn_slice(const struct kve_model_info *in)
{
	uint32_t group = in->n_heads / in->n_kv_heads;

	return group < KVE_ATTN_HEADS ? group : KVE_ATTN_HEADS;
}

/*
 * Decode's attention was 17% of a 110M Q4_0 step at a 128-160 token
 * context while it reads 8% of the step's bytes (its K and V at 15-19
 * GB/s, the weights at 40-48): a task read one KV head's 2 KiB slab in
 * each block, the slabs of one block and layer lying side by side by head
 * (kv_head_base), so every slab was a short run of its own. Now a task
 * takes a run of its token's KV heads and reads them block by block: one
 * stretch of adjacent slabs per block (24 KiB for the 110M models), K
 * then V, and asks memory for the stretch KV_PF_AHEAD bytes ahead, slab
 * by slab, while it works on this one. Each head's scores, softmax and
 * weighted sum are the same calls on the same data as head by head, so
 * the same bits.
 */

/* floats of scores a thread holds: at least one KV head's query heads
 * for the longest context, and room for a run of many at short ones or
 * a group of tokens (attn_plan): 256 KiB, 26 members at 2k tokens */
#define ATTN_RUN_FLOATS	65536

/* how far ahead the attention asks for K and V: 4-32 KiB measured alike
 * on the Zen 5 (each about 10% faster a step than none; on a Zen 4 none
 * was 3-8% faster, so kve_prefetch turns it off there) */
#define KV_PF_AHEAD	8192

static size_t attn_scratch(const struct kve_model_info *in, uint32_t max_ctx)
{
	size_t one = (size_t)(in->n_heads / in->n_kv_heads) * ((max_ctx + 15) & ~15u);

	return one > ATTN_RUN_FLOATS ? one : ATTN_RUN_FLOATS;
}

/* asks memory for every line of the n bytes at p, four a turn. It was a
 * loop of one prefetch per line that looked the block up (pool.block_ptr,
 * two calls) for every slab: attention from the caches took 154-173 us of
 * a 110M step where it now takes 139-159 (three runs, alternating steps) */
static inline void kv_prefetch(const uint8_t *p, size_t n)
{
	const uint8_t *end = p + n;

	if (!kve_prefetch)	/* kve_prefetch_for: per CPU */
		return;
	for (; end - p >= 256; p += 256) {
		__builtin_prefetch(p, 0, 3);
		__builtin_prefetch(p + 64, 0, 3);
		__builtin_prefetch(p + 128, 0, 3);
		__builtin_prefetch(p + 192, 0, 3);
	}
	for (; p < end; p += 64)
		__builtin_prefetch(p, 0, 3);
}

static void store_kv_head(struct kve_engine *e, uint32_t t, uint32_t g);

/* Token t's rope and KV store for KV head g, in its attention task
 * (kv_in_attn) rather than on one thread before the job: no other task
 * reads them (each token is its own session's, and groups read only
 * blocks before every member's position), and per head they are the same
 * operations */
static void rope_store(struct kve_engine *e, uint32_t t, uint32_t g)
{
	const struct kve_model_info *in = &e->m->info;
	uint32_t hd = in->head_dim, group = in->n_heads / in->n_kv_heads;
	const float *cs = e->rope_cs + (size_t)t * in->rope_dims;

	rope(e->q + ((size_t)t * in->n_heads + (size_t)g * group) * hd, (int)group, (int)hd,
	     (int)in->rope_dims, in->rope_neox, cs);
	rope(e->kk + ((size_t)t * in->n_kv_heads + g) * hd, 1, (int)hd, (int)in->rope_dims,
	     in->rope_neox, cs);
	store_kv_head(e, t, g);
}

/* a group's members read at most 1/ATTN_OWN_SHARE of the rows they
 * share of their own (attn_plan) */
#define ATTN_OWN_SHARE	4

/* Members a group can have: rows of scores for each (the longest
 * context, ss floats) and its queries and sums (2 x head_dim) fit a
 * thread's scratch */
static uint32_t group_cap(const struct kve_engine *e, uint32_t ss)
{
	const struct kve_model_info *in = &e->m->info;
	/* Q8_0 KV: the queries quantised too (44 bytes a 32 < 32 floats) */
	size_t row = (size_t)(in->n_heads / in->n_kv_heads) *
		     (ss + (e->kvt == KVE_KV_Q8_0 ? 3 : 2) * in->head_dim);

	return (uint32_t)(attn_scratch(in, e->max_ctx) / row);
}

/*
 * The pass's attention plan. A decode batch of sessions that share a
 * prompt read the prompt's KV once per sequence, the same blocks again and
 * again. Tokens whose sessions begin with the same whole blocks before
 * their positions are grouped (where the shared part dominates, below):
 * a group task reads each shared block once and scores it against every
 * member's queries, up to KVE_ATTN_HEADS at a time (the kernels load a K
 * or V vector once for all of them), then each member's own blocks as
 * before. Every score
 * and every sum is the same kernel arithmetic in the same order as
 * member by member (a score is its row's dot; a member's sums run over
 * its blocks in ascending order, the shared ones first as before), so
 * the same bits. The same holds for a prompt chunk after the first: its
 * tokens share every block before the chunk.
 */
static void attn_plan(struct kve_engine *e)
{
	uint32_t bt = e->pool.block_tokens, T = e->T, n = 0, nf = 0, a = 0, t, g, k, i;
	struct attn_group *G = e->att_grp, *F = e->att_grp + e->max_tok;

	/* each token to the group of the first with its first block (as
	 * first: the leader); shared: what all share with the leader. The
	 * tokens of a prompt chunk (adjacent, of one session) group only
	 * with each other: joined with other sessions' tokens that share a
	 * system prompt, a group would share only that prompt, where the
	 * chunk shares its whole history */
	for (t = 0; t < T; t++) {
		const struct kve_session *s = e->tok_sess[t], *l = NULL;
		uint32_t whole = e->tok_pos[t] / bt, ss = (e->tok_pos[t] + 16) & ~15u;
		int chunk = (t && e->tok_sess[t - 1] == s) || (t + 1 < T && e->tok_sess[t + 1] == s);

		e->att_gid[t] = UINT32_MAX;
		if (!whole)
			continue;
		for (g = 0; g < n; g++) {
			l = e->tok_sess[G[g].first];
			if (l == s || (!chunk && !G[g].chunk &&
				       l->block_table[0] == s->block_table[0]))
				break;
		}
		if (g == n) {
			G[n++] = (struct attn_group){ t, 0, whole, 0, 0, chunk };
		} else {
			k = G[g].shared < whole ? G[g].shared : whole;
			if (l != s)
				for (i = 1; i < k; i++)
					if (l->block_table[i] != s->block_table[i])
						k = i;
			G[g].shared = k;
		}
		G[g].n++;
		if (ss > G[g].ss)
			G[g].ss = ss;
		if (e->tok_pos[t] + 1 > G[g].top)
			G[g].top = e->tok_pos[t] + 1;
		e->att_gid[t] = g;
	}
	/* a group of one, one whose rows would not fit twice, or one whose
	 * members read much of their own reads alone: a group task reads
	 * the members' own blocks one KV head at a time, 2 KiB slabs 576 KiB
	 * apart at the 110M shape, where a lone token reads a block's heads
	 * as one stretch; with 1888 own tokens after 512 shared a batch of
	 * 16 decoded 2.4x slower grouped, with 128 after 512 alike, with at
	 * most 32 after 1024 (8 sessions) 1.3-1.45x faster (Zen 4) */
	for (g = 0; g < n; g++)
		if (G[g].n < 2 || group_cap(e, G[g].ss) < 2 ||
		    G[g].top - G[g].shared * bt > G[g].shared * bt / ATTN_OWN_SHARE)
			G[g].shared = 0;
	for (t = 0; t < T; t++)
		if (e->att_gid[t] == UINT32_MAX || !G[e->att_gid[t]].shared)
			e->att_tok[a++] = t;
	e->n_alone = a;
	for (g = 0; g < n; g++) {
		uint32_t cap = group_cap(e, G[g].ss), m = G[g].n;

		if (!G[g].shared)
			continue;
		G[g].first = a;
		G[g].n = 0;
		a += m;
		/* as many tasks as the scratch needs, members in token order */
		for (i = 0; i < m; i += cap)
			F[nf++] = (struct attn_group){ G[g].first + i, m - i < cap ? m - i : cap,
						       G[g].shared, G[g].ss, G[g].top, G[g].chunk };
	}
	for (t = 0; t < T; t++) {
		g = e->att_gid[t];
		if (g != UINT32_MAX && G[g].shared)
			e->att_tok[G[g].first + G[g].n++] = t;
	}
	e->n_groups = nf;
	/* a unit's work, per KV head: the K and V rows it reads, each shared
	 * row once per call of up to KVE_ATTN_HEADS members */
	e->att_cost[0] = 0;
	for (k = 0; k < e->n_alone; k++)
		e->att_cost[k + 1] = e->att_cost[k] + e->tok_pos[e->att_tok[k]] + 1;
	for (g = 0; g < nf; g++, k++) {
		uint64_t w = (uint64_t)F[g].shared * bt * ((F[g].n + KVE_ATTN_HEADS - 1) / KVE_ATTN_HEADS);

		for (i = 0; i < F[g].n; i++)
			w += e->tok_pos[e->att_tok[F[g].first + i]] + 1 - F[g].shared * bt;
		e->att_cost[k + 1] = e->att_cost[k] + w;
	}
}

/* The first task whose work starts at or after `at` (att_cost's units):
 * chunks take equal work, not equal counts of tasks, a group's task
 * being worth many of a lone token's, a late prompt token's more than an
 * early one's */
static uint32_t task_at(const struct kve_engine *e, uint64_t at)
{
	const uint64_t *P = e->att_cost;
	uint32_t nkv = e->m->info.n_kv_heads, lo = 0, hi = e->n_alone + e->n_groups, u;
	uint64_t w;

	if (at >= P[hi] * nkv)
		return hi * nkv;
	while (hi - lo > 1) {	/* the last unit whose work starts at or before `at` */
		u = lo + (hi - lo) / 2;
		if (P[u] * nkv <= at)
			lo = u;
		else
			hi = u;
	}
	w = P[lo + 1] - P[lo];
	return lo * nkv + (uint32_t)((at - P[lo] * nkv + w - 1) / w);
}

/* One group's attention for KV head g: the shared blocks once for all
 * members, then each member's own; sc: the thread's scratch (scores, then
 * the members' queries and sums, side by side so that a kernel call takes
 * up to KVE_ATTN_HEADS of them, then with a Q8_0 KV their queries
 * quantised) */
static void attn_group_task(struct kve_engine *e, const struct attn_group *gr, uint32_t g,
			    float *sc)
{
	const struct kve_model_info *in = &e->m->info;
	const struct kve_kernels *k = e->k;
	uint32_t hd = in->head_dim, bt = e->pool.block_tokens, group = in->n_heads / in->n_kv_heads;
	uint32_t slice = attn_slice(in), rows = gr->n * group, i, h, r, b, v, nh;
	uint32_t nbh = hd / QK8_0;	/* Q8_0 blocks a query head */
	const uint32_t *mem = e->att_tok + gr->first;
	const struct kve_session *s0 = e->tok_sess[mem[0]];
	size_t ss = gr->ss;
	float *qs = sc + (size_t)rows * ss, *out = qs + (size_t)rows * hd;
	struct kve_q8x *qs8 = (struct kve_q8x *)(out + (size_t)rows * hd);

	for (i = 0; i < gr->n; i++) {
		if (e->kv_in_attn)
			rope_store(e, mem[i], g);
		if (e->kvt == KVE_KV_Q8_0)	/* the scores take the quantised ones only */
			quantize_heads(e, mem[i], g * group, group, qs8 + (size_t)i * group * nbh);
		else
			memcpy(qs + (size_t)i * group * hd,
			       e->q + ((size_t)mem[i] * in->n_heads + (size_t)g * group) * hd,
			       (size_t)group * hd * sizeof(float));
	}
	memset(out, 0, (size_t)rows * hd * sizeof(float));
	/* v = 0: the scores from K; v = 1: the sums of V rows */
	for (v = 0; v < 2; v++) {
		for (b = 0; b < gr->shared; b++) {
			const uint8_t *kb = kv_head_base(e, s0->block_table[b], e->layer, (int)v, g);

			if (b + 1 < gr->shared)
				kv_prefetch(kv_head_base(e, s0->block_table[b + 1], e->layer, (int)v, g),
					    slab_rows(e, bt));
			for (r = 0; r < rows; r += nh) {
				nh = rows - r < KVE_ATTN_HEADS ? rows - r : KVE_ATTN_HEADS;
				attn_call(e, (int)v, qs + (size_t)r * hd, qs8 + (size_t)r * nbh,
					  (int)nh, kb, bt, sc + r * ss + b * bt, ss,
					  out + (size_t)r * hd);
			}
		}
		for (i = 0; i < gr->n; i++) {
			const struct kve_session *s = e->tok_sess[mem[i]];
			uint32_t npos = e->tok_pos[mem[i]] + 1, nblk = (npos + bt - 1) / bt;
			size_t r0 = (size_t)i * group;

			for (b = gr->shared; b < nblk; b++) {
				const uint8_t *kb = kv_head_base(e, s->block_table[b], e->layer, (int)v, g);
				uint32_t end = npos - b * bt < bt ? npos - b * bt : bt;

				for (h = 0; h < group; h += nh) {
					nh = group - h < slice ? group - h : slice;
					attn_call(e, (int)v, qs + (r0 + h) * hd, qs8 + (r0 + h) * nbh,
						  (int)nh, kb, end, sc + (r0 + h) * ss + b * bt, ss,
						  out + (r0 + h) * hd);
				}
			}
			for (h = 0; h < group && !v; h++) {
				float *sh = sc + (r0 + h) * ss;

				scale_by(sh, npos, 1.0f / k->softmax_exp(sh, (int)npos,
									 max_of(sh, npos)));
			}
		}
	}
	if (e->kvt == KVE_KV_Q8_0)	/* V's rotation undone */
		kv_rotate(e, out, rows * hd, e->rot_v);
	for (i = 0; i < gr->n; i++)
		memcpy(e->att + ((size_t)mem[i] * in->n_heads + (size_t)g * group) * hd,
		       out + (size_t)i * group * hd, (size_t)group * hd * sizeof(float));
}

static void attn_worker(void *arg, int c, int tid)
{
	struct kve_engine *e = arg;
	const struct kve_model_info *in = &e->m->info;
	const struct kve_kernels *k = e->k;
	uint32_t hd = in->head_dim, bt = e->pool.block_tokens, nkv = in->n_kv_heads;
	uint32_t group = in->n_heads / nkv, slice = attn_slice(in);
	uint64_t alone = (uint64_t)e->n_alone * nkv, nch = (uint64_t)attn_chunks(e);
	uint64_t work = e->att_cost[e->n_alone + e->n_groups] * nkv;
	uint32_t t0 = task_at(e, work * (uint64_t)c / nch);
	uint32_t t1 = task_at(e, work * (uint64_t)(c + 1) / nch), task, run;
	size_t cap = attn_scratch(in, e->max_ctx);
	float *sc = e->scores + (size_t)tid * cap;
	size_t slab = e->slab;
	uint32_t nbh = hd / QK8_0;	/* Q8_0 blocks a query head */

	for (task = t0; task < t1 && task < alone; task += run) {
		uint32_t t = e->att_tok[task / nkv], g0 = task % nkv, npos = e->tok_pos[t] + 1;
		uint32_t nblk = (npos + bt - 1) / bt, b, g, h, nh, v, i, ahead;
		size_t ss = (npos + 15) & ~15u;	/* one head's scores */
		const struct kve_session *s = e->tok_sess[t];
		const float *q = e->q + ((size_t)t * in->n_heads + (size_t)g0 * group) * hd;
		struct kve_q8x *qq = e->qq + ((size_t)t * in->n_heads + (size_t)g0 * group) * nbh;
		float *out = e->att + ((size_t)t * in->n_heads + (size_t)g0 * group) * hd;

		/* this token's heads from g0 to the chunk's end, as many
		 * as the scores fit (at least one: attn_scratch) */
		run = nkv - g0 < t1 - task ? nkv - g0 : t1 - task;
		if ((size_t)run * group * ss > cap)
			run = (uint32_t)(cap / (group * ss));
		for (g = g0; g < g0 + run && e->kv_in_attn; g++)
			rope_store(e, t, g);
		if (e->kvt == KVE_KV_Q8_0)
			quantize_heads(e, t, g0 * group, run * group, qq);
		/* stretches ahead: at least KV_PF_AHEAD bytes */
		ahead = (uint32_t)(KV_PF_AHEAD / (run * slab));
		ahead = ahead ? ahead : 1;
		for (i = 0; i < ahead && i < 2 * nblk; i++) {
			const uint8_t *pf = kv_head_base(e, s->block_table[i % nblk], e->layer,
							 i >= nblk, g0);
			uint32_t rows = npos - i % nblk * bt < bt ? npos - i % nblk * bt : bt;

			for (g = 0; g < run; g++)
				kv_prefetch(pf + g * slab, slab_rows(e, rows));
		}
		memset(out, 0, (size_t)run * group * hd * sizeof(float));
		/* v = 0: the scores from K; v = 1: the sums of V rows */
		for (v = 0; v < 2; v++) {
			for (b = 0; b < nblk; b++) {
				const uint8_t *kb = kv_head_base(e, s->block_table[b], e->layer, (int)v, g0);
				uint32_t end = npos - b * bt < bt ? npos - b * bt : bt;
				/* the stretch ahead, K's blocks then V's */
				uint32_t na = v * nblk + b + ahead, nb = na % nblk;
				uint32_t nrows = npos - nb * bt < bt ? npos - nb * bt : bt;
				const uint8_t *pf = na >= 2 * nblk ? NULL :
					kv_head_base(e, s->block_table[nb], e->layer, na >= nblk, g0);

				for (g = 0; g < run; g++) {
					if (pf)
						kv_prefetch(pf + g * slab, slab_rows(e, nrows));
					for (h = g * group; h < (g + 1) * group; h += nh) {
						nh = (g + 1) * group - h < slice ? (g + 1) * group - h : slice;
						attn_call(e, (int)v, q + (size_t)h * hd, qq + (size_t)h * nbh,
							  (int)nh, kb + g * slab, end, sc + h * ss + b * bt,
							  ss, out + (size_t)h * hd);
					}
				}
			}
			for (h = 0; h < run * group && !v; h++) {
				float *sh = sc + h * ss;

				scale_by(sh, npos, 1.0f / k->softmax_exp(sh, (int)npos,
									 max_of(sh, npos)));
			}
		}
		if (e->kvt == KVE_KV_Q8_0)	/* V's rotation undone */
			kv_rotate(e, out, run * group * hd, e->rot_v);
	}
	/* then the groups' tasks in the chunk: one KV head of one group each */
	for (task = t0 > alone ? t0 : (uint32_t)alone; task < t1; task++)
		attn_group_task(e, e->att_grp + e->max_tok + (task - alone) / nkv,
				(uint32_t)((task - alone) % nkv), sc);
}

/*
 * Asks for the lines the attention tasks will store this layer's K and V
 * to (kv_in_attn), before the Q/K/V product: they were not in any cache,
 * and the stores waited on them: 24-26 us of a 110M Q4_0 step, 9-10 with
 * this (decode at 128-192 tokens).
 */
static void kv_store_prefetch(struct kve_engine *e, uint32_t l)
{
	const struct kve_model_info *in = &e->m->info;
	uint32_t bt = e->pool.block_tokens, hd = in->head_dim, t, i;
	int q8 = e->kvt == KVE_KV_Q8_0;
	size_t row = q8 ? hd : (size_t)hd * e->es, o;

	for (t = 0; t < e->T; t++) {
		uint32_t pos = e->tok_pos[t], blk = e->tok_sess[t]->block_table[pos / bt];

		for (i = 0; i < 2 * in->n_kv_heads; i++) {
			const uint8_t *base = kv_head_base(e, blk, l, (int)(i / in->n_kv_heads),
							   i % in->n_kv_heads);
			const uint8_t *d = (q8 ? (const uint8_t *)kve_kvq8_quants(base, (int)bt,
										  (int)hd) : base) +
					   (size_t)(pos % bt) * row;

			if (q8 && i < in->n_kv_heads)
				continue;	/* K's quants go in fours across the slab */
			if (q8)	/* the row's scales, a block's apart */
				for (o = 0; o < hd / QK8_0; o++)
					__builtin_prefetch(base + ((size_t)o * bt + pos % bt) * 2, 1, 3);
			for (o = 0; o < row; o += 64)
				__builtin_prefetch(d + o, 1, 3);
		}
	}
}

/* a K or V row into row off of a Q8_0 slab: quantised as the Q8_0
 * activations are (llama.cpp's q8_0 KV: d = amax / 127 in fp16) */
static void store_q8(struct kve_engine *e, uint8_t *slab, uint32_t off, int is_v,
		     const float *src)
{
	uint32_t hd = e->m->info.head_dim, nb = hd / QK8_0, bt = e->pool.block_tokens, b, i;
	struct kve_q8x blk[1024 / QK8_0];
	uint8_t *quants = slab + (size_t)bt * (hd / 16);
	float rot[1024];

	memcpy(rot, src, hd * sizeof(float));
	kv_rotate(e, rot, hd, is_v ? e->rot_v : e->rot_k);
	e->k->quantize_q8x(rot, (int)hd, blk);
	for (b = 0; b < nb; b++) {
		uint16_t d = kve_f32_to_f16(blk[b].d);

		memcpy(slab + ((size_t)b * bt + off) * 2, &d, 2);	/* block by block */
		if (is_v) {	/* V's quants row by row */
			memcpy(quants + (size_t)off * hd + (size_t)b * QK8_0, blk[b].q, QK8_0);
			continue;
		}
		/* K's in fours, offset by 128 */
		for (i = 0; i < QK8_0; i += 4) {
			uint8_t u[4] = { (uint8_t)(blk[b].q[i] ^ 0x80), (uint8_t)(blk[b].q[i + 1] ^ 0x80),
					 (uint8_t)(blk[b].q[i + 2] ^ 0x80),
					 (uint8_t)(blk[b].q[i + 3] ^ 0x80) };

			memcpy(quants + (((size_t)b * QK8_0 + i) / 4 * bt + off) * 4, u, 4);
		}
	}
}

/* token t's K and V of KV head g into its session's block */
static void store_kv_head(struct kve_engine *e, uint32_t t, uint32_t g)
{
	const struct kve_model_info *in = &e->m->info;
	const struct kve_session *s = e->tok_sess[t];
	uint32_t pos = e->tok_pos[t], bt = e->pool.block_tokens, hd = in->head_dim;
	uint32_t blk = s->block_table[pos / bt], off = pos % bt;
	int v;

	for (v = 0; v < 2; v++) {
		const float *src = (v ? e->vv : e->kk) + ((size_t)t * in->n_kv_heads + g) * hd;
		uint8_t *base = kv_head_base(e, blk, e->layer, v, g);
		uint8_t *dst = base + (size_t)off * hd * e->es;

		if (e->kvt == KVE_KV_Q8_0)
			store_q8(e, base, off, v, src);
		else if (e->es == 4)
			memcpy(dst, src, hd * sizeof(float));
		else
			e->k->f32_to_f16((uint16_t *)dst, src, (int)hd);
	}
}

/* ---- the pass ------------------------------------------------------- */

/* Runs T tokens; logits for the n_out tokens listed in out_idx go to
 * logits (vocab floats each). Positions/sessions were validated. */
static void forward(struct kve_engine *e, const int32_t *tokens, uint32_t T,
		    const uint32_t *out_idx, uint32_t n_out, float *logits, int distinct)
{
	const struct kve_model *m = e->m;
	const struct kve_model_info *in = &m->info;
	uint32_t dim = in->dim, qdim = in->n_heads * in->head_dim;
	uint32_t kvdim = in->n_kv_heads * in->head_dim;
	uint32_t l, t, i;

	e->T = T;
	/* a task that stores a token's KV while another task of the same
	 * session reads it would race: only when no two tokens share one */
	e->kv_in_attn = distinct || T == 1;
	attn_plan(e);
	for (t = 0; t < T; t++) {
		kve_mat_row_f32(&m->tok_embd, (uint32_t)tokens[t], e->x + (size_t)t * dim);
		rope_table(e->rope_cs + (size_t)t * in->rope_dims, (int)in->rope_dims,
			   e->tok_pos[t], e->inv_freq);
	}

	for (l = 0; l < in->n_layers; l++) {
		const struct kve_layer *L = &m->layers[l];

		e->layer = l;
		for (t = 0; t < T; t++)
			e->k->rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim,
				      L->attn_norm, (int)dim, in->rms_eps);
		if (e->kv_in_attn)
			kv_store_prefetch(e, l);
		matmul(e, e->xb, (int)T, 3, &L->wq, e->q, &L->wk, e->kk, &L->wv, e->vv);
		if (L->bq) {
			add_bias(e->q, L->bq, T, qdim);
			add_bias(e->kk, L->bk, T, kvdim);
			add_bias(e->vv, L->bv, T, kvdim);
		}
		if (L->q_norm) {	/* qwen3: each head RMS-normed before rope */
			for (i = 0; i < T * in->n_heads; i++)
				e->k->rmsnorm(e->q + (size_t)i * in->head_dim,
					      e->q + (size_t)i * in->head_dim, L->q_norm,
					      (int)in->head_dim, in->rms_eps);
			for (i = 0; i < T * in->n_kv_heads; i++)
				e->k->rmsnorm(e->kk + (size_t)i * in->head_dim,
					      e->kk + (size_t)i * in->head_dim, L->k_norm,
					      (int)in->head_dim, in->rms_eps);
		}
		for (t = 0; t < T && !e->kv_in_attn; t++) {
			const float *cs = e->rope_cs + (size_t)t * in->rope_dims;

			rope(e->q + (size_t)t * qdim, (int)in->n_heads, (int)in->head_dim,
			     (int)in->rope_dims, in->rope_neox, cs);
			rope(e->kk + (size_t)t * kvdim, (int)in->n_kv_heads, (int)in->head_dim,
			     (int)in->rope_dims, in->rope_neox, cs);
			for (i = 0; i < in->n_kv_heads; i++)
				store_kv_head(e, t, i);
		}
		kve_threads_run(e->th, attn_worker, e, attn_chunks(e));
		matmul_add(e, e->att, (int)T, &L->wo, e->xb, e->x);

		for (t = 0; t < T; t++)
			e->k->rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim,
				      L->ffn_norm, (int)dim, in->rms_eps);
		matmul_swiglu(e, e->xb, (int)T, &L->gate, e->hb, &L->up, e->hb2);
		matmul_add(e, e->hb, (int)T, &L->down, e->xb, e->x);
	}

	if (!n_out)
		return;
	for (i = 0; i < n_out; i++)
		e->k->rmsnorm(e->xb + (size_t)i * dim, e->x + (size_t)out_idx[i] * dim,
			      m->out_norm, (int)dim, in->rms_eps);
	matmul(e, e->xb, (int)n_out, 1, &m->output, logits, NULL, NULL, NULL, NULL);
}

/* Every block a pass will touch must resolve; the table must be long
 * enough. Called before anything is written. */
static int check_session(struct kve_engine *e, const struct kve_session *s,
			 uint32_t n_new)
{
	uint32_t bt = e->pool.block_tokens, end, b;

	if (!s || !s->block_table)
		return -EINVAL;
	if (s->n_tokens > UINT32_MAX - n_new)
		return -ENOSPC;
	end = s->n_tokens + n_new;
	if (end > e->max_ctx || (end + bt - 1) / bt > s->n_blocks)
		return -ENOSPC;
	for (b = 0; b < (end + bt - 1) / bt; b++)
		if (!e->pool.block_ptr(e->pool.ctx, s->block_table[b]))
			return -EFAULT;
	return 0;
}

int kve_prefill(struct kve_engine *e, struct kve_session *s,
		const int32_t *tokens, uint32_t n_tokens, float *logits)
{
	uint32_t done = 0, i;
	int rc;

	if (!e || !s || !tokens || !n_tokens || !logits)
		return -EINVAL;
	/* a negative id converts far above the vocabulary */
	for (i = 0; i < n_tokens; i++)
		if ((uint32_t)tokens[i] >= e->m->info.vocab)
			return -EINVAL;
	rc = check_session(e, s, n_tokens);
	if (rc)
		return rc;
	while (done < n_tokens) {
		uint32_t T = n_tokens - done < e->max_chunk ? n_tokens - done : e->max_chunk;
		int last = done + T == n_tokens;
		uint32_t out = T - 1;

		for (i = 0; i < T; i++) {
			e->sess_buf[i] = s;
			e->pos_buf[i] = s->n_tokens + i;
		}
		e->tok_sess = e->sess_buf;
		e->tok_pos = e->pos_buf;
		forward(e, tokens + done, T, &out, last ? 1 : 0, logits, 0);
		s->n_tokens += T;
		done += T;
	}
	return 0;
}

int kve_decode(struct kve_engine *e, struct kve_session *const *sessions,
	       const int32_t *tokens, uint32_t n, float *logits)
{
	uint32_t i, j;
	int rc;

	if (!e || !sessions || !tokens || !logits || !n || n > e->max_batch)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		/* a negative id converts far above the vocabulary */
		if ((uint32_t)tokens[i] >= e->m->info.vocab)
			return -EINVAL;
		for (j = 0; j < i; j++)
			if (sessions[j] == sessions[i])
				return -EINVAL;
		rc = check_session(e, sessions[i], 1);
		if (rc)
			return rc;
	}
	for (i = 0; i < n; i++) {
		e->sess_buf[i] = sessions[i];
		e->pos_buf[i] = sessions[i]->n_tokens;
		e->pos_buf[e->max_tok + i] = i;	/* output index list */
	}
	e->tok_sess = e->sess_buf;
	e->tok_pos = e->pos_buf;
	forward(e, tokens, n, e->pos_buf + e->max_tok, n, logits, 1);
	for (i = 0; i < n; i++)
		sessions[i]->n_tokens++;
	return 0;
}

int kve_batch(struct kve_engine *e, struct kve_session *const *sessions,
	      const uint32_t *n_new, const int32_t *tokens, uint32_t n, float *logits)
{
	uint32_t i, j, vocab, seq = 0, off = 0;
	uint64_t total = 0, fed = 0;
	int rc;

	if (!e || !sessions || !n_new || !tokens || !logits || !n)
		return -EINVAL;
	vocab = e->m->info.vocab;
	for (i = 0; i < n; i++) {
		if (!n_new[i])
			return -EINVAL;
		for (j = 0; j < i; j++)
			if (sessions[j] == sessions[i])
				return -EINVAL;
		rc = check_session(e, sessions[i], n_new[i]);
		if (rc)
			return rc;
		total += n_new[i];
	}
	for (fed = 0; fed < total; fed++)
		/* a negative id converts far above the vocabulary */
		if ((uint32_t)tokens[fed] >= vocab)
			return -EINVAL;
	/* passes of up to max_tok tokens, in order: a session split across
	 * two passes has its first part's KV written before the second reads
	 * it; the sessions whose last token falls in a pass are consecutive,
	 * so their logits rows are too */
	for (fed = 0; fed < total;) {
		uint32_t T = 0, n_out = 0, first_out = seq;
		uint32_t *out_idx = e->pos_buf + e->max_tok;

		while (seq < n && T < e->max_tok) {
			uint32_t take = n_new[seq] - off, t;

			if (take > e->max_tok - T)
				take = e->max_tok - T;
			for (t = 0; t < take; t++) {
				e->sess_buf[T + t] = sessions[seq];
				e->pos_buf[T + t] = sessions[seq]->n_tokens + off + t;
			}
			T += take;
			off += take;
			if (off == n_new[seq]) {
				out_idx[n_out++] = T - 1;
				seq++;
				off = 0;
			}
		}
		e->tok_sess = e->sess_buf;
		e->tok_pos = e->pos_buf;
		forward(e, tokens + fed, T, out_idx, n_out,
			logits + (size_t)first_out * vocab, 0);
		fed += T;
	}
	for (i = 0; i < n; i++)
		sessions[i]->n_tokens += n_new[i];
	return 0;
}

/* ---- lifetime ------------------------------------------------------- */

void kve_engine_free(struct kve_engine *e)
{
	if (!e)
		return;
	kve_threads_free(e->th);
	free(e->x);
	free(e->xb);
	free(e->q);
	free(e->kk);
	free(e->vv);
	free(e->att);
	free(e->hb);
	free(e->hb2);
	free(e->xq);
	free(e->qq);
	free(e->xk);
	free(e->scores);
	free(e->inv_freq);
	free(e->rope_cs);
	free(e->sess_buf);
	free(e->pos_buf);
	free(e->att_tok);
	free(e->att_gid);
	free(e->att_grp);
	free(e->att_cost);
	free(e);
}

static void *alloc_f(size_t n)
{
	return aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
}

struct kve_engine *kve_engine_create(const struct kve_model *m,
				     const struct kve_kv_pool *pool,
				     const struct kve_engine_params *p,
				     char *err, size_t errlen)
{
	const struct kve_model_info *in;
	struct kve_engine *e;
	uint32_t nt, qdim, kvdim, widest, i;

	if (!m || !pool || !p || !pool->block_ptr) {
		snprintf(err, errlen, "engine: model, pool and params are required");
		return NULL;
	}
	in = &m->info;
	if (p->n_threads < 1 || p->n_threads > 2) {
		snprintf(err, errlen, "engine: n_threads %u not supported (1 or 2)", p->n_threads);
		return NULL;
	}
	if (!pool->block_tokens || pool->block_tokens > 4096 ||
	    !kve_kv_block_bytes(m, 1, pool->dtype)) {
		snprintf(err, errlen, "engine: block_tokens %u or dtype %d invalid%s",
			 pool->block_tokens, (int)pool->dtype,
			 pool->dtype == KVE_KV_Q8_0 && in->head_dim % QK8_0 ?
			 " (a Q8_0 KV needs a head dimension that is a multiple of 32)" : "");
		return NULL;
	}
	if (!p->max_batch || p->max_batch > 1024 || p->max_chunk > 4096 ||
	    p->max_ctx > (1u << 24)) {
		snprintf(err, errlen, "engine: max_batch %u / max_chunk %u / max_ctx %u out of range",
			 p->max_batch, p->max_chunk, p->max_ctx);
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		goto oom;
	e->m = m;
	e->pool = *pool;
	e->k = kve_kernels_select();
	if (!e->k)
		goto oom;
	e->es = pool->dtype == KVE_KV_F32 ? 4 : 2;
	e->kvt = pool->dtype;
	if (e->kvt == KVE_KV_Q8_0 && in->head_dim % 64 == 0) {
		e->rot_v = 64;
		for (e->rot_k = 64; in->head_dim % (2 * e->rot_k) == 0; e->rot_k *= 2)
			;
	}
	e->slab = kve_kv_block_bytes(m, pool->block_tokens, pool->dtype) /
		  ((size_t)in->n_layers * 2 * in->n_kv_heads);
	e->max_chunk = p->max_chunk ? p->max_chunk : 128;
	e->max_batch = p->max_batch;
	e->max_ctx = p->max_ctx ? p->max_ctx : in->ctx_len;
	e->max_tok = e->max_chunk > e->max_batch ? e->max_chunk : e->max_batch;
	nt = e->max_tok;
	qdim = in->n_heads * in->head_dim;
	kvdim = in->n_kv_heads * in->head_dim;
	widest = in->dim;
	if (qdim > widest)
		widest = qdim;
	if (in->ffn_dim > widest)
		widest = in->ffn_dim;
	e->th = kve_threads_create((int)p->n_threads);
	e->x = alloc_f((size_t)nt * in->dim);
	e->xb = alloc_f((size_t)nt * (qdim > in->dim ? qdim : in->dim));
	e->q = alloc_f((size_t)nt * qdim);
	e->kk = alloc_f((size_t)nt * kvdim);
	e->vv = alloc_f((size_t)nt * kvdim);
	e->att = alloc_f((size_t)nt * qdim);
	e->hb = alloc_f((size_t)nt * in->ffn_dim);
	e->hb2 = alloc_f((size_t)nt * in->ffn_dim);
	e->xq = malloc(((size_t)nt * (widest / QK8_0 + 1)) * sizeof(struct kve_q8x));
	e->xk = malloc(((size_t)nt * (widest / QK_K + 1)) * sizeof(struct kve_q8k));
	e->scores = alloc_f((size_t)p->n_threads * attn_scratch(in, e->max_ctx));
	e->inv_freq = alloc_f(in->rope_dims / 2 + 1);
	e->rope_cs = alloc_f((size_t)nt * in->rope_dims + 1);
	e->sess_buf = calloc(nt, sizeof(*e->sess_buf));
	e->pos_buf = calloc((size_t)nt * 2, sizeof(*e->pos_buf));
	e->att_tok = calloc(nt, sizeof(*e->att_tok));
	e->att_gid = calloc(nt, sizeof(*e->att_gid));
	e->att_grp = calloc((size_t)nt * 2, sizeof(*e->att_grp));
	e->att_cost = calloc((size_t)nt * 2 + 1, sizeof(*e->att_cost));
	if (e->kvt == KVE_KV_Q8_0)
		e->qq = calloc((size_t)nt * (qdim / QK8_0), sizeof(*e->qq));
	if (!e->th || !e->x || !e->xb || !e->q || !e->kk || !e->vv || !e->att ||
	    !e->hb || !e->hb2 || !e->xq || !e->xk || !e->scores || !e->inv_freq || !e->rope_cs ||
	    !e->sess_buf || !e->pos_buf || !e->att_tok || !e->att_gid || !e->att_grp ||
	    !e->att_cost || (e->kvt == KVE_KV_Q8_0 && !e->qq))
		goto oom;
	/* base^(-2i/d), divided by llama 3's factor for the pair, times the
	 * linear scaling (positions / factor) */
	for (i = 0; i < in->rope_dims / 2; i++)
		e->inv_freq[i] = (float)(pow((double)in->rope_base, -2.0 * i / (double)in->rope_dims) /
					 (m->rope_freqs ? (double)m->rope_freqs[i] : 1.0) *
					 (double)in->rope_freq_scale);
	/* fault the scratch in now, not inside the first request */
	memset(e->x, 0, (size_t)nt * in->dim * sizeof(float));
	memset(e->xb, 0, (size_t)nt * (qdim > in->dim ? qdim : in->dim) * sizeof(float));
	memset(e->q, 0, (size_t)nt * qdim * sizeof(float));
	memset(e->kk, 0, (size_t)nt * kvdim * sizeof(float));
	memset(e->vv, 0, (size_t)nt * kvdim * sizeof(float));
	memset(e->att, 0, (size_t)nt * qdim * sizeof(float));
	memset(e->hb, 0, (size_t)nt * in->ffn_dim * sizeof(float));
	memset(e->hb2, 0, (size_t)nt * in->ffn_dim * sizeof(float));
	memset(e->xq, 0, ((size_t)nt * (widest / QK8_0 + 1)) * sizeof(struct kve_q8x));
	memset(e->xk, 0, ((size_t)nt * (widest / QK_K + 1)) * sizeof(struct kve_q8k));
	memset(e->scores, 0, (size_t)p->n_threads * attn_scratch(in, e->max_ctx) * sizeof(float));
	return e;
oom:
	kve_engine_free(e);
	snprintf(err, errlen, "engine: out of memory");
	return NULL;
}
