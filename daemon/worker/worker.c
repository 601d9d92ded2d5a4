// SPDX-License-Identifier: MIT
/*
 * worker.c - the stage worker process: maps the arena the orchestrator
 * sends, runs one backend (built-in cpu or a dlopen()ed plugin) and
 * answers steps with sampled tokens. It holds no session state between
 * steps: every step carries the block tables and sampler states it needs,
 * so a worker that dies loses nothing the orchestrator cannot resend.
 *
 * Sampling lives here, not in backends: the engine's sampler (greedy,
 * temperature, top-k, min-p, top-p) over the logits after the request's
 * penalties and biases, with the chosen token's log-probability and the
 * top alternatives computed from the raw logits (OpenAI's logprobs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "callsyntax.h"
#include "kvconstrain.h"
#include "kvengine.h"
#include "log.h"
#include "worker.h"

/* Structured decoding: matchers by sequence, at a known position. The
 * cache holds every sequence of the steps a worker may have queued (two
 * in flight, each up to max_batch decode tokens plus 64 prompts' last
 * chunks), so that a batch of constrained sequences never evicts its own
 * matchers and replays every one's history each step (issue 36.6). */
#define MATCHER_CACHE(a) (2u * ((a)->max_batch ? (a)->max_batch : 1) + 128u)
struct mcache {
	uint64_t seq_id, hash;
	uint32_t pos;			/* tokens it has consumed */
	uint64_t used;
	struct kvc_matcher *m;
};

struct worker {
	int sock;
	const char *model_path;
	const struct kvd_worker_args *args;
	struct kve_model *tmodel;	/* the tokenizer's (weights mapped, unused) */
	struct kve_tokenizer *tok;
	struct chat_template *chat;	/* the model's family: its call syntax */
	struct kvc_vocab *cvocab;
	struct mcache *mc;		/* n_mc entries */
	uint32_t n_mc;
	uint64_t mc_clock;
	uint32_t *mask;
	int32_t eos;
	uint32_t role;
	int copy_mode;
	struct kvd_kv_geom geom;
	void *arena;		/* the shared arena */
	void *priv;		/* copy mode, prefill: this stage's own KV */
	const struct kvd_backend_ops *ops;
	void *bctx;
	void *dl;
	uint32_t vocab;
	float *logits;
	uint32_t logits_n;	/* sequences the buffer holds */
	float *adjusted;	/* one sequence's logits after penalties, biases */
	void *scratch;
	void *rx;
	size_t rx_cap;
	char *tx;
	size_t tx_cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int load_backend(struct worker *w, const char *name, char *err, size_t errlen)
{
	kvd_backend_entry_fn entry;

	if (!name || !strcmp(name, "cpu")) {
		w->ops = kvd_backend_cpu();
		return 0;
	}
	w->dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!w->dl) {
		snprintf(err, errlen, "backend %s: %s", name, dlerror());
		return -ENOENT;
	}
	entry = (kvd_backend_entry_fn)dlsym(w->dl, KVD_BACKEND_ENTRY);
	if (!entry) {
		snprintf(err, errlen, "backend %s: no %s symbol", name, KVD_BACKEND_ENTRY);
		return -ENOEXEC;
	}
	w->ops = entry(KVD_BACKEND_ABI_VERSION);
	if (!w->ops || w->ops->abi_version != KVD_BACKEND_ABI_VERSION ||
	    w->ops->size < sizeof(struct kvd_backend_ops) || !w->ops->create ||
	    !w->ops->prefill || !w->ops->decode || !w->ops->vocab_size) {
		snprintf(err, errlen, "backend %s: does not speak ABI version %u", name,
			 KVD_BACKEND_ABI_VERSION);
		w->ops = NULL;
		return -ENOEXEC;
	}
	return 0;
}

static int geom_ok(const struct kvd_kv_geom *g)
{
	return g->block_size && g->block_size <= (2u << 20) && !(g->block_size & 4095) &&
	       g->blocks_per_page == (2u << 20) / g->block_size && g->block_tokens &&
	       g->kv_block_bytes && g->kv_block_bytes <= g->block_size &&
	       g->arena_bytes && !(g->arena_bytes & ((2u << 20) - 1)) &&
	       (uint64_t)g->blocks_total <= g->arena_bytes / (2u << 20) * g->blocks_per_page &&
	       g->dtype <= 2;
}

static int hello(struct worker *w, const struct kvd_worker_args *a)
{
	struct kvd_backend_init in = { 0 };
	struct kvd_ready rd = { 0 };
	struct kvd_hello h;
	uint16_t type;
	size_t len;
	int fd = -1, rc;

	rc = kvd_msg_recv(w->sock, &type, &w->rx, &w->rx_cap, &len, &fd);
	if (rc <= 0)
		return rc ? rc : -ECONNRESET;
	if (type != KVD_MSG_HELLO || len != sizeof(h) || fd < 0) {
		rc = -EPROTO;
		snprintf(rd.message, sizeof(rd.message), "expected HELLO with the arena fd");
		goto out;
	}
	memcpy(&h, w->rx, sizeof(h));
	if (!geom_ok(&h.geom) || (h.role != KVD_ROLE_PREFILL && h.role != KVD_ROLE_DECODE)) {
		rc = -EINVAL;
		snprintf(rd.message, sizeof(rd.message), "HELLO: bad geometry or role");
		goto out;
	}
	w->role = h.role;
	w->copy_mode = !!h.copy_mode;
	w->geom = h.geom;
	w->arena = mmap(NULL, h.geom.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w->arena == MAP_FAILED) {
		w->arena = NULL;
		rc = -errno;
		snprintf(rd.message, sizeof(rd.message), "mmap arena: %s", strerror(-rc));
		goto out;
	}
	if (w->copy_mode && w->role == KVD_ROLE_PREFILL) {
		w->priv = mmap(NULL, h.geom.arena_bytes, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (w->priv == MAP_FAILED) {
			w->priv = NULL;
			rc = -errno;
			snprintf(rd.message, sizeof(rd.message), "private KV: %s", strerror(-rc));
			goto out;
		}
	}
	rc = load_backend(w, a->backend, rd.message, sizeof(rd.message));
	if (rc)
		goto out;
	in.size = sizeof(in);
	in.role = w->role;
	in.model_path = a->model_path;
	in.options = a->backend_options;
	in.arena_fd = fd;
	in.arena_base = w->priv ? w->priv : w->arena;
	in.geom = w->geom;
	in.n_threads = a->n_threads;
	in.max_batch = a->max_batch;
	in.max_ctx = a->max_ctx;
	in.max_step_tokens = a->max_step_tokens ? a->max_step_tokens : a->max_batch;
	rc = w->ops->create(&in, &w->bctx, rd.message, sizeof(rd.message));
	if (rc)
		goto out;
	w->vocab = w->ops->vocab_size(w->bctx);
	w->scratch = malloc(KVE_SAMPLE_SCRATCH(w->vocab));
	if (!w->scratch)
		rc = -ENOMEM;
out:
	if (fd >= 0)
		close(fd);
	rd.status = rc;
	rd.vocab = w->vocab;
	rd.pid = (uint32_t)getpid();
	snprintf(rd.backend, sizeof(rd.backend), "%s", w->ops ? w->ops->name : "?");
	if (kvd_msg_send(w->sock, KVD_MSG_READY, &rd, sizeof(rd), -1) < 0 && !rc)
		rc = -EPIPE;
	return rc;
}

static int ensure_logits(struct worker *w, uint32_t n)
{
	float *p;

	if (n <= w->logits_n)
		return 0;
	p = realloc(w->logits, (size_t)n * w->vocab * sizeof(float));
	if (!p)
		return -ENOMEM;
	w->logits = p;
	w->logits_n = n;
	return 0;
}

/* Appends to the reply buffer. */
static int tx_put(struct worker *w, size_t *off, const void *p, size_t n)
{
	if (*off + n > w->tx_cap) {
		size_t cap = w->tx_cap ? w->tx_cap : 4096;
		char *nb;

		while (cap < *off + n)
			cap *= 2;
		nb = realloc(w->tx, cap);
		if (!nb)
			return -ENOMEM;
		w->tx = nb;
		w->tx_cap = cap;
	}
	memcpy(w->tx + *off, p, n);
	*off += n;
	return 0;
}

/* One sequence of a step, pointing into the received message. */
struct step_view {
	const struct kvd_step_seq *sq;
	const int32_t *tokens;
	uint32_t *blocks;
	struct kvd_constraint_wire cw;	/* cw.kind 0: free */
	const char *json, *name;
	const int32_t *hist;
	int has_sampler;		/* KVD_SEQ_SAMPLER */
	void *sbuf;			/* its arrays (malloc'd) */
	struct kvd_sampler_wire sw;
	struct kve_logit_adjust adj;	/* points into the message */
};

/* Sample from one sequence's logits; fills the result entry and its top
 * alternatives (written to top, at most KVD_MAX_TOP). */
#define KVD_MAX_TOP 20
/* The matcher for a constrained sequence at its position: from the cache,
 * else compiled (the vocabulary caches grammars by content) and replayed
 * over the tokens the request generated so far. */
static struct kvc_matcher *matcher_for(struct worker *w, const struct step_view *v,
				       struct mcache **slot)
{
	static const enum kvc_kind kinds[] = { 0, KVC_TOOL_CALLS, KVC_JSON_OBJECT,
					       KVC_JSON_SCHEMA };
	struct mcache *e, *lru;
	struct kvc_spec sp = { 0 };
	struct kvc_call_syntax y;
	struct kvc_grammar *g = NULL;
	char err[200], name[256];
	uint32_t i;

	if (!w->mc) {
		w->mc = calloc(MATCHER_CACHE(w->args), sizeof(*w->mc));
		if (!w->mc)
			return NULL;
		w->n_mc = MATCHER_CACHE(w->args);
	}
	lru = &w->mc[0];
	for (i = 0; i < w->n_mc; i++) {
		e = &w->mc[i];
		if (e->m && e->seq_id == v->sq->seq_id && e->hash == v->cw.hash &&
		    e->pos == v->cw.n_hist) {
			e->used = ++w->mc_clock;
			*slot = e;
			return e->m;
		}
		if (!e->m || e->used < lru->used)
			lru = e;
	}
	if (!w->cvocab) {
		setenv("KVE_WEIGHTS", "mmap", 1);
		w->tmodel = kve_model_load(w->model_path, err, sizeof(err));
		w->tok = w->tmodel ? kve_tokenizer_create(w->tmodel, err, sizeof(err)) : NULL;
		if (w->tok && !w->chat) {
			/* the family the orchestrator found in the same file */
			struct chat_options co = { w->args->chat_template, w->args->tool_open,
						   w->args->tool_close };
			size_t tl;
			const char *tt = kve_model_meta_str(w->tmodel, "tokenizer.chat_template", &tl);

			if (!chat_template_new(tt, tl, &co, &w->chat, err, sizeof(err)))
				for (const char *const *mk = chat_template_markers(w->chat); *mk; mk++)
					kve_tokenizer_show(w->tok, *mk);
		}
		w->cvocab = w->tok && w->chat ? kvc_vocab_create(w->tok, w->vocab, err, sizeof(err)) :
			    NULL;
		w->mask = calloc((w->vocab + 31) / 32, sizeof(uint32_t));
		if (!w->cvocab || !w->mask) {
			kvd_log(KVD_LOG_ERR, "worker", "structured decoding: %s", err);
			return NULL;
		}
		w->eos = kve_tokenizer_eos(w->tok);
	}
	if (v->cw.name_len >= sizeof(name))
		return NULL;
	memcpy(name, v->name, v->cw.name_len);
	name[v->cw.name_len] = 0;
	sp.kind = kinds[v->cw.kind];
	sp.json = v->cw.json_len ? v->json : NULL;
	sp.json_len = v->cw.json_len;
	sp.tool_name = v->cw.name_len ? name : NULL;
	sp.max_calls = v->cw.max_calls;
	if (sp.kind == KVC_TOOL_CALLS)
		kvd_call_syntax(w->chat, &sp, &y);
	if (kvc_compile(w->cvocab, &sp, &g, err, sizeof(err))) {
		kvd_log(KVD_LOG_ERR, "worker", "constraint: %s", err);
		return NULL;
	}
	if (lru->m)
		kvc_matcher_free(lru->m);
	lru->m = kvc_matcher_create(g, v->cw.flags & KVD_CONSTRAINT_LAZY ? KVC_LAZY : 0);
	kvc_grammar_release(g);
	if (!lru->m)
		return NULL;
	for (i = 0; i < v->cw.n_hist; i++)
		if (kvc_advance(lru->m, v->hist[i])) {
			kvc_matcher_free(lru->m);
			lru->m = NULL;
			return NULL;
		}
	lru->seq_id = v->sq->seq_id;
	lru->hash = v->cw.hash;
	lru->pos = v->cw.n_hist;
	lru->used = ++w->mc_clock;
	*slot = lru;
	return lru->m;
}

static int sample_one(struct worker *w, const struct step_view *v,
		      const float *lg, struct kvd_result_seq *rs, struct kvd_top *top)
{
	const struct kvd_step_seq *sq = v->sq;
	struct kve_sampler sm = { sq->temperature, 0, sq->top_p, sq->rng, 0 };
	const float *raw = lg;	/* logprobs are the model's, before adjustments */
	struct kvc_matcher *m = NULL;
	struct mcache *slot = NULL;
	uint32_t i, k, n_top = sq->top_logprobs > KVD_MAX_TOP ? KVD_MAX_TOP : sq->top_logprobs;
	double mx = -INFINITY, sum = 0, lse;
	int32_t tok;

	if (v->has_sampler) {
		sm.top_k = v->sw.top_k;
		sm.min_p = v->sw.min_p;
		if (!kve_logit_adjust_none(&v->adj)) {
			if (!w->adjusted) {
				w->adjusted = malloc((size_t)w->vocab * sizeof(float));
				if (!w->adjusted)
					return -ENOMEM;
			}
			memcpy(w->adjusted, lg, (size_t)w->vocab * sizeof(float));
			kve_logits_adjust(w->adjusted, w->vocab, &v->adj);
			lg = w->adjusted;
		}
	}
	if (v->cw.kind) {
		m = matcher_for(w, v, &slot);
		if (!m)
			return -EINVAL;
		int allowed = 0;

		/* near the token limit, prefer tokens that still let the output
		 * close in time; when none can (a budget below the shortest
		 * completion), keep to the grammar alone */
		if ((v->cw.flags & KVD_CONSTRAINT_BUDGET) && v->cw.tokens_left &&
		    v->cw.tokens_left <= kvc_remaining(m) + 64)
			allowed = kvc_mask_budget(m, w->mask, v->cw.tokens_left);
		if (allowed <= 0)
			allowed = kvc_mask(m, w->mask);

		if (kvc_finished(m) || allowed <= 0)
			tok = w->eos;	/* nothing may follow: end the output */
		else
			tok = kve_sample_masked(&sm, lg, w->vocab, w->mask, w->scratch);
		if (tok >= 0 && tok != w->eos && kvc_advance(m, tok))
			return -EINVAL;
		slot->pos++;
	} else {
		tok = kve_sample(&sm, lg, w->vocab, w->scratch);
	}
	if (tok < 0)
		return tok;
	rs->seq_id = sq->seq_id;
	rs->token = tok;
	rs->rng = sm.rng;
	rs->logprob = 0;
	rs->n_top = 0;
	if (!(sq->flags & KVD_SEQ_LOGPROBS) && !n_top)
		return 0;
	lg = raw;
	for (i = 0; i < w->vocab; i++)
		if (lg[i] > mx)
			mx = lg[i];
	for (i = 0; i < w->vocab; i++)
		sum += exp((double)lg[i] - mx);
	lse = mx + log(sum);
	rs->logprob = (float)((double)lg[tok] - lse);
	/* top n_top by insertion: n_top <= 20 */
	for (i = 0; i < w->vocab; i++) {
		float v = lg[i];

		if (rs->n_top == n_top && (!n_top || v <= lg[top[n_top - 1].token]))
			continue;
		k = rs->n_top < n_top ? rs->n_top++ : n_top - 1;
		while (k > 0 && lg[top[k - 1].token] < v) {
			top[k] = top[k - 1];
			k--;
		}
		top[k].token = (int32_t)i;
	}
	for (k = 0; k < rs->n_top; k++)
		top[k].logprob = (float)((double)lg[top[k].token] - lse);
	return 0;
}

static void free_views(struct step_view *v, uint32_t n)
{
	for (uint32_t i = 0; v && i < n; i++)
		free(v[i].sbuf);
	free(v);
}

/* Parses the step's sequences into arrays; every count checked. */

static int parse_step(struct worker *w, size_t len, struct kvd_step *st,
		      struct step_view **views)
{
	const char *p = w->rx, *end = p + len;
	struct step_view *v;
	uint32_t i;

	if (len < sizeof(*st))
		return -EPROTO;
	memcpy(st, p, sizeof(*st));
	p += sizeof(*st);
	if (!st->n_seq || st->n_seq > 4096 ||
	    (st->kind != KVD_STEP_PREFILL && st->kind != KVD_STEP_DECODE &&
	     st->kind != KVD_STEP_MIXED))
		return -EPROTO;
	v = calloc(st->n_seq, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (i = 0; i < st->n_seq; i++) {
		const struct kvd_step_seq *sq = (const void *)p;
		uint64_t need;

		if ((size_t)(end - p) < sizeof(*sq))
			goto bad;
		need = sizeof(*sq) + (uint64_t)sq->n_new * 4 + (uint64_t)sq->n_blocks * 4 +
		       sq->constraint_len;
		if ((uint64_t)(end - p) < need || !sq->n_new ||
		    (st->kind == KVD_STEP_DECODE && sq->n_new != 1))
			goto bad;
		if (sq->flags & KVD_SEQ_SAMPLER) {
			/* the sampler's arrays follow the constraint */
			const char *x = p + need;
			struct kvd_sampler_wire *sw = &v[i].sw;

			if ((uint64_t)(end - p) < need + sizeof(*sw))
				goto bad;
			memcpy(sw, x, sizeof(*sw));
			if (sw->n_bias > KVD_SAMPLER_MAX_ENTRIES ||
			    sw->n_context > KVD_SAMPLER_MAX_ENTRIES ||
			    sw->n_generated > KVD_SAMPLER_MAX_ENTRIES ||
			    !isfinite(sw->min_p) || !isfinite(sw->repetition_penalty) ||
			    !isfinite(sw->frequency_penalty) || !isfinite(sw->presence_penalty))
				goto bad;
			x += sizeof(*sw);
			need += sizeof(*sw) + (uint64_t)sw->n_bias * 8 +
				(uint64_t)sw->n_context * 4 + (uint64_t)sw->n_generated * 8;
			if ((uint64_t)(end - p) < need)
				goto bad;
			/* an aligned copy: the constraint's text before it has
			 * any length */
			v[i].sbuf = malloc(need - (uint64_t)(x - p) + 8);
			if (!v[i].sbuf)
				goto bad;
			memcpy(v[i].sbuf, x, need - (uint64_t)(x - p));
			x = v[i].sbuf;
			v[i].has_sampler = 1;
			v[i].adj.repetition_penalty = sw->repetition_penalty;
			v[i].adj.frequency_penalty = sw->frequency_penalty;
			v[i].adj.presence_penalty = sw->presence_penalty;
			v[i].adj.bias = (const struct kve_token_bias *)x;
			v[i].adj.n_bias = sw->n_bias;
			x += (size_t)sw->n_bias * 8;
			v[i].adj.context = (const int32_t *)x;
			v[i].adj.n_context = sw->n_context;
			x += (size_t)sw->n_context * 4;
			v[i].adj.generated = (const struct kve_token_count *)x;
			v[i].adj.n_generated = sw->n_generated;
		}
		/* each record is padded to 8 bytes: the next one's 64-bit
		 * fields are aligned */
		need = (need + 7) & ~(uint64_t)7;
		if ((uint64_t)(end - p) < need)
			goto bad;
		if ((uint64_t)sq->n_blocks * w->geom.block_tokens <
		    (uint64_t)sq->n_kv + sq->n_new)
			goto bad;
		v[i].sq = sq;
		v[i].tokens = (const int32_t *)(p + sizeof(*sq));
		v[i].blocks = (uint32_t *)(p + sizeof(*sq) + (size_t)sq->n_new * 4);
		for (uint32_t b = 0; b < sq->n_blocks; b++)
			if (v[i].blocks[b] >= w->geom.blocks_total)
				goto bad;
		if (sq->constraint_len) {
			const char *c = p + sizeof(*sq) + (size_t)sq->n_new * 4 +
					(size_t)sq->n_blocks * 4;

			if (sq->constraint_len < sizeof(v[i].cw))
				goto bad;
			memcpy(&v[i].cw, c, sizeof(v[i].cw));
			if (!v[i].cw.kind || v[i].cw.kind > 3 ||
			    (uint64_t)sizeof(v[i].cw) + v[i].cw.json_len + v[i].cw.name_len +
			    (uint64_t)v[i].cw.n_hist * 4 != sq->constraint_len)
				goto bad;
			v[i].hist = (const int32_t *)(c + sizeof(v[i].cw));
			v[i].json = (const char *)(v[i].hist + v[i].cw.n_hist);
			v[i].name = v[i].json + v[i].cw.json_len;
		}
		p += need;
	}
	if (p != end)
		goto bad;
	*views = v;
	return 0;
bad:
	free_views(v, st->n_seq);
	return -EPROTO;
}

/* copy mode: this stage's private KV starts as a copy of the blocks that
 * already hold the sequence's earlier positions (counted: it is a copy). */
static uint64_t copy_in(struct worker *w, const struct step_view *v)
{
	uint32_t bt = w->geom.block_tokens, nb = (v->sq->n_kv + bt - 1) / bt, b;

	for (b = 0; b < nb; b++)
		memcpy(kvd_block_addr(w->priv, &w->geom, v->blocks[b]),
		       kvd_block_addr(w->arena, &w->geom, v->blocks[b]),
		       w->geom.kv_block_bytes);
	return (uint64_t)nb * w->geom.kv_block_bytes;
}

#ifdef KVD_TEST_HOOKS
/* test_orch only: when the file $KVD_TEST_STALL_FILE exists as a step's
 * answer goes out, the file is removed and the worker sends the header
 * and half the payload, then stops (as a worker stuck mid-message would);
 * the orchestrator must neither freeze nor wait past the step's lease. */
static void test_stall(struct worker *w, const void *buf, size_t len)
{
	const char *path = getenv("KVD_TEST_STALL_FILE");
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, KVD_MSG_RESULT,
				 (uint32_t)len, 0 };

	if (!path || !*path || unlink(path))
		return;
	if (write(w->sock, &h, sizeof(h)) == (ssize_t)sizeof(h) &&
	    write(w->sock, buf, len / 2) >= 0)
		for (;;)
			pause();
}
#endif

/* The backend's compute for one step: one ragged batch when it offers
 * one, else decode for the one-token sequences (in batches of max_batch)
 * and prefill for each other. logits + i * vocab for sequence i. */
static int compute(struct worker *w, const struct kvd_step *st, const struct step_view *v,
		   struct kvd_seq **sp, uint32_t *nn, int32_t *toks, uint64_t *copied)
{
	const struct kvd_backend_ops *o = w->ops;
	uint32_t i, off = 0, nd = 0;
	int rc = 0;

	for (i = 0; i < st->n_seq; i++) {
		nn[i] = v[i].sq->n_new;
		memcpy(toks + off, v[i].tokens, (size_t)nn[i] * 4);
		off += nn[i];
		if (w->priv)
			*copied += copy_in(w, &v[i]);
	}
	if (o->size >= offsetof(struct kvd_backend_ops, batch) + sizeof(o->batch) && o->batch)
		return o->batch(w->bctx, sp, nn, toks, st->n_seq, w->logits);
	for (i = 0, off = 0; !rc && i < st->n_seq; off += nn[i], i++)
		if (nn[i] > 1)
			rc = o->prefill(w->bctx, sp[i], toks + off, nn[i],
					w->logits + (size_t)i * w->vocab);
	/* the one-token sequences, batched; their logits rows moved after */
	while (!rc) {
		struct kvd_seq *bs[256];
		int32_t bt[256];
		uint32_t idx[256], k, max = w->args->max_batch ? w->args->max_batch : 1;
		float *tmp;

		if (max > 256)
			max = 256;
		for (k = 0, off = 0, i = 0; i < st->n_seq; off += nn[i], i++)
			if (nn[i] == 1 && k < max && i >= nd) {
				bs[k] = sp[i];
				bt[k] = toks[off];
				idx[k++] = i;
			}
		if (!k)
			break;
		nd = idx[k - 1] + 1;
		tmp = malloc((size_t)k * w->vocab * sizeof(float));
		if (!tmp)
			return -ENOMEM;
		rc = o->decode(w->bctx, bs, bt, k, tmp);
		for (i = 0; !rc && i < k; i++)
			memcpy(w->logits + (size_t)idx[i] * w->vocab, tmp + (size_t)i * w->vocab,
			       (size_t)w->vocab * sizeof(float));
		free(tmp);
	}
	return rc;
}

static int do_step(struct worker *w, size_t len)
{
	struct kvd_result res = { 0 };
	struct step_view *v = NULL;
	struct kvd_step st;
	struct kvd_seq *seqs = NULL, **sp = NULL;
	int32_t *toks = NULL;
	uint32_t *nn = NULL;
	struct kvd_top top[KVD_MAX_TOP];
	size_t off = 0, total = 0;
	uint64_t t0 = now_ns(), copied = 0;
	uint32_t i;
	int rc;

	rc = parse_step(w, len, &st, &v);
	if (rc)
		return rc;
	res.step_id = st.step_id;
	for (i = 0; i < st.n_seq; i++)
		total += v[i].sq->n_new;
	seqs = calloc(st.n_seq, sizeof(*seqs));
	sp = calloc(st.n_seq, sizeof(*sp));
	nn = calloc(st.n_seq, sizeof(*nn));
	toks = calloc(total, sizeof(*toks));
	if (!seqs || !sp || !nn || !toks || ensure_logits(w, st.n_seq)) {
		rc = -ENOMEM;
		goto reply;
	}
	for (i = 0; i < st.n_seq; i++) {
		seqs[i].block_table = v[i].blocks;
		seqs[i].n_blocks = v[i].sq->n_blocks;
		seqs[i].n_tokens = v[i].sq->n_kv;
		sp[i] = &seqs[i];
	}
#ifdef KVD_TEST_HOOKS
	/* test_orch only: when the file $KVD_TEST_FAIL_FILE exists as a step
	 * arrives, it is removed and the step fails whole, once, as a passing
	 * backend fault would: its retry succeeds */
	if (getenv("KVD_TEST_FAIL_FILE") && *getenv("KVD_TEST_FAIL_FILE") &&
	    !unlink(getenv("KVD_TEST_FAIL_FILE"))) {
		rc = -EIO;
		goto reply;
	}
	/* test_orch only: a step carrying the token $KVD_TEST_POISON fails
	 * whole, as a backend fault set off by one sequence's input would */
	if (getenv("KVD_TEST_POISON")) {
		int32_t bad = (int32_t)atoi(getenv("KVD_TEST_POISON"));

		for (i = 0; i < st.n_seq && !rc; i++)
			for (uint32_t k = 0; k < v[i].sq->n_new; k++)
				if (v[i].tokens[k] == bad)
					rc = -EINVAL;
		if (rc)
			goto reply;
	}
#endif
	rc = compute(w, &st, v, sp, nn, toks, &copied);
	res.n_seq = st.n_seq;
	rc = rc ? rc : tx_put(w, &off, &res, sizeof(res));
	for (i = 0; !rc && i < st.n_seq; i++) {
		struct kvd_result_seq rs = { 0 };

		if (v[i].sq->flags & KVD_SEQ_SAMPLE) {
			rc = sample_one(w, &v[i], w->logits + (size_t)i * w->vocab, &rs, top);
			if (rc)
				break;
		} else {
			rs.seq_id = v[i].sq->seq_id;
			rs.token = -1;
			rs.rng = v[i].sq->rng;
		}
		if (w->priv) {
			uint32_t bt = w->geom.block_tokens;

			rs.first_block = v[i].sq->n_kv / bt;
			rs.n_kv_blocks = (v[i].sq->n_kv + v[i].sq->n_new + bt - 1) / bt -
					 rs.first_block;
		}
		rc = tx_put(w, &off, &rs, sizeof(rs));
		if (!rc && rs.n_top)
			rc = tx_put(w, &off, top, rs.n_top * sizeof(top[0]));
		for (uint32_t b = 0; !rc && b < rs.n_kv_blocks; b++) {
			rc = tx_put(w, &off,
				    kvd_block_addr(w->priv, &w->geom, v[i].blocks[rs.first_block + b]),
				    w->geom.kv_block_bytes);
			copied += w->geom.kv_block_bytes;
		}
	}
reply:
	free_views(v, st.n_seq);
	free(seqs);
	free(sp);
	free(nn);
	free(toks);
	if (rc) {
		memset(&res, 0, sizeof(res));
		res.step_id = st.step_id;
		res.status = rc;
		off = 0;
		if (tx_put(w, &off, &res, sizeof(res)))
			return -ENOMEM;
	} else {
		res.compute_ns = now_ns() - t0;
		res.kv_bytes = copied;
		memcpy(w->tx, &res, sizeof(res));
	}
#ifdef KVD_TEST_HOOKS
	test_stall(w, w->tx, off);
#endif
	return kvd_msg_send(w->sock, KVD_MSG_RESULT, w->tx, off, -1);
}

/* copy mode, decode side: write the received blocks into the arena. */
static int do_kv_load(struct worker *w, size_t len)
{
	struct kvd_result res = { 0 };
	struct kvd_kv_load kl;
	const char *p = w->rx;
	const uint32_t *ids;
	uint32_t i;

	if (len < sizeof(kl))
		return -EPROTO;
	memcpy(&kl, p, sizeof(kl));
	if (!kl.n_blocks || kl.n_blocks > w->geom.blocks_total ||
	    len != sizeof(kl) + (size_t)kl.n_blocks * (4 + w->geom.kv_block_bytes))
		return -EPROTO;
	ids = (const uint32_t *)(p + sizeof(kl));
	p += sizeof(kl) + (size_t)kl.n_blocks * 4;
	for (i = 0; i < kl.n_blocks; i++)
		if (ids[i] >= w->geom.blocks_total)
			return -EPROTO;
	for (i = 0; i < kl.n_blocks; i++, p += w->geom.kv_block_bytes)
		memcpy(kvd_block_addr(w->arena, &w->geom, ids[i]), p, w->geom.kv_block_bytes);
	res.step_id = kl.step_id;
	res.kv_bytes = (uint64_t)kl.n_blocks * w->geom.kv_block_bytes;
	return kvd_msg_send(w->sock, KVD_MSG_KV_LOADED, &res, sizeof(res), -1);
}

/* A worker's compute is throughput work: SCHED_BATCH (the same share of
 * the CPU, no preempting on wakeup), so that when the workers keep every
 * core busy the orchestrator's scheduler thread, which holds its lock
 * while it hands out steps, and the HTTP threads run when they wake
 * rather than a slice later (daemon.md, "Processes"). Threads started
 * later inherit it. */
static void batch_policy(void)
{
	struct sched_param sp = { 0 };

	if (sched_setscheduler(0, SCHED_BATCH, &sp))
		kvd_log(KVD_LOG_WARN, "worker", "SCHED_BATCH refused (%s): normal policy",
			strerror(errno));
}

int kvd_worker_main(int sock, const struct kvd_worker_args *a)
{
	struct worker w = { .sock = sock, .model_path = a->model_path, .args = a };
	uint16_t type;
	size_t len;
	int rc;

	/* die with the orchestrator: a worker never outlives it */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	batch_policy();
	rc = hello(&w, a);
	if (rc) {
		kvd_log(KVD_LOG_ERR, "worker", "cannot serve: %s", strerror(-rc));
		goto out;
	}
	for (;;) {
		rc = kvd_msg_recv(sock, &type, &w.rx, &w.rx_cap, &len, NULL);
		if (rc <= 0)
			break;
		if (type == KVD_MSG_STEP)
			rc = do_step(&w, len);
		else if (type == KVD_MSG_KV_LOAD && w.role == KVD_ROLE_DECODE)
			rc = do_kv_load(&w, len);
		else
			rc = -EPROTO;
		if (rc < 0) {
			kvd_log(KVD_LOG_ERR, "worker", "message %u: %s", type, strerror(-rc));
			break;
		}
	}
out:
	if (w.ops && w.bctx)
		w.ops->destroy(w.bctx);
	if (w.arena)
		munmap(w.arena, w.geom.arena_bytes);
	if (w.priv)
		munmap(w.priv, w.geom.arena_bytes);
	for (uint32_t i = 0; i < w.n_mc; i++)
		kvc_matcher_free(w.mc[i].m);
	free(w.mc);
	kvc_vocab_free(w.cvocab);
	chat_template_free(w.chat);
	kve_tokenizer_free(w.tok);
	kve_model_free(w.tmodel);
	free(w.mask);
	free(w.logits);
	free(w.adjusted);
	free(w.scratch);
	free(w.rx);
	free(w.tx);
	if (w.dl)
		dlclose(w.dl);
	return rc < 0 ? 1 : 0;
}
