/* SPDX-License-Identifier: MIT */
/*
 * cgen.h - the constrained-decoding tests' generation loop: a model with
 * its tokenizer, vocabulary trie and engine over the tests' KV pool
 * (tcheck.h), and one function that samples a completion, under a
 * grammar (mask, kve_sample_masked, kvc_advance; kvc_mask_budget near
 * the token limit) or free. Optionally it
 * checks at each step that every token's mask bit equals kvc_advance's
 * verdict on a copy of the matcher.
 */
#ifndef KVE_CGEN_H
#define KVE_CGEN_H

#include "tcheck.h"
#include "kvconstrain.h"

#define CGEN_BT 16

struct cgen {
	struct kve_model *m;
	struct kve_tokenizer *t;
	struct kvc_vocab *v;
	struct kve_engine *e;
	struct tpool tp;
	struct kve_kv_pool kp;
	uint32_t vocab, ctx, nblocks, *bt;
	float *lg;
	uint32_t *mask;
	void *scr;
};

static inline void cgen_close(struct cgen *c)
{
	kve_engine_free(c->e);
	tpool_free(&c->tp);
	kvc_vocab_free(c->v);
	kve_tokenizer_free(c->t);
	kve_model_free(c->m);
	free(c->bt);
	free(c->lg);
	free(c->mask);
	free(c->scr);
	memset(c, 0, sizeof(*c));
}

static inline int cgen_open(struct cgen *c, const char *path, char *err, size_t n)
{
	struct kve_engine_params ep = { 1, 1, 64, 0 };

	memset(c, 0, sizeof(*c));
	c->m = kve_model_load(path, err, n);
	if (!c->m)
		return -1;
	c->vocab = kve_model_info(c->m)->vocab;
	c->ctx = kve_model_info(c->m)->ctx_len;
	c->nblocks = (c->ctx + CGEN_BT - 1) / CGEN_BT;
	c->t = kve_tokenizer_create(c->m, err, n);
	c->v = c->t ? kvc_vocab_create(c->t, c->vocab, err, n) : NULL;
	if (!c->v || tpool_init(&c->tp, c->m, CGEN_BT, KVE_KV_F32, c->nblocks, &c->kp))
		goto fail;
	ep.max_ctx = c->ctx;
	c->e = kve_engine_create(c->m, &c->kp, &ep, err, n);
	c->bt = malloc(c->nblocks * sizeof(uint32_t));
	c->lg = malloc((size_t)c->vocab * sizeof(float));
	c->mask = calloc(kvc_mask_words(c->v), sizeof(uint32_t));
	c->scr = malloc(KVE_SAMPLE_SCRATCH(c->vocab));
	if (!c->e || !c->bt || !c->lg || !c->mask || !c->scr)
		goto fail;
	for (uint32_t i = 0; i < c->nblocks; i++)
		c->bt[i] = i;
	return 0;
fail:
	cgen_close(c);
	return -1;
}

struct cgen_out {
	char *text;		/* bytes, NUL-terminated */
	size_t len;
	uint32_t tokens;
	int complete;		/* constrained: ended at an accepting point */
	int mismatches;		/* mask bit != kvc_advance verdict (check) */
	int errors;		/* sampling or advance failed */
	int triggered;		/* lazy: the start tag was seen */
};

/* Tokens below nv whose bit in mask (kvc_mask of m) disagrees with
 * kvc_advance on a clone of m, which simulates the token's bytes. */
static inline uint32_t cgen_mask_mismatches(const struct kvc_matcher *m, const uint32_t *mask,
					    uint32_t nv)
{
	uint32_t id, bad = 0;

	for (id = 0; id < nv; id++) {
		struct kvc_matcher *cl = kvc_matcher_clone(m);
		int bit = (mask[id >> 5] >> (id & 31)) & 1;
		int ok = cl && kvc_advance(cl, (int32_t)id) == 0;

		bad += bit != ok;
		kvc_matcher_free(cl);
	}
	return bad;
}

/* Generates up to max tokens after prompt; g NULL: unconstrained.
 * check: compare the mask with kvc_advance for every token each step. */
static inline int cgen_run(struct cgen *c, struct kvc_grammar *g, unsigned flags,
			   const char *prompt, uint64_t seed, float temp, uint32_t max,
			   int check, struct cgen_out *o)
{
	struct kve_session s = { c->bt, c->nblocks, 0 };
	struct kve_sampler sm = { .temperature = temp, .top_p = 0.95f,
				  .rng = kve_rng_seed(seed) };
	struct kvc_matcher *mt = g ? kvc_matcher_create(g, flags) : NULL;
	int32_t ids[256];
	int n = kve_tokenize(c->t, prompt, strlen(prompt), 1, ids, 256);
	uint32_t step;
	size_t cap = 64;

	memset(o, 0, sizeof(*o));
	o->text = malloc(cap);
	if (!o->text || n <= 0 || n > 256 || (g && !mt) ||
	    kve_prefill(c->e, &s, ids, (uint32_t)n, c->lg)) {
		kvc_matcher_free(mt);
		o->errors++;
		return -1;
	}
	if (max > c->ctx - (uint32_t)n - 1)
		max = c->ctx - (uint32_t)n - 1;
	for (step = 0; step < max; step++) {
		struct kve_session *sp = &s;
		int32_t tok;
		char b[256];
		int k;

		if (mt) {
			/* near the limit, close the output instead of cutting it */
			int fin = kvc_remaining(mt) + 256 >= max - step;

			if ((fin ? kvc_mask_budget(mt, c->mask, max - step) : kvc_mask(mt, c->mask)) < 0) {
				o->errors++;
				break;
			}
			if (check && !fin)
				o->mismatches += (int)cgen_mask_mismatches(mt, c->mask, c->vocab);
			tok = kve_sample_masked(&sm, c->lg, c->vocab, c->mask, c->scr);
		} else {
			tok = kve_sample(&sm, c->lg, c->vocab, c->scr);
		}
		if (tok < 0 || (mt && kvc_advance(mt, tok))) {
			o->errors++;
			break;
		}
		o->tokens++;
		if (tok == kve_tokenizer_eos(c->t)) {
			o->complete = mt ? kvc_accepting(mt) || kvc_finished(mt) : 1;
			break;
		}
		k = kve_token_bytes(c->t, tok, b, sizeof(b));
		if (k > 0 && (size_t)k <= sizeof(b)) {
			if (o->len + (size_t)k + 1 > cap) {
				char *nt;
				cap = (o->len + (size_t)k + 1) * 2;
				nt = realloc(o->text, cap);
				if (!nt) {
					o->errors++;
					break;
				}
				o->text = nt;
			}
			memcpy(o->text + o->len, b, (size_t)k);
			o->len += (size_t)k;
		}
		if (mt && kvc_finished(mt)) {
			o->complete = 1;
			break;
		}
		if (kve_decode(c->e, &sp, &tok, 1, c->lg)) {
			o->errors++;
			break;
		}
	}
	o->text[o->len] = 0;
	if (mt) {
		o->triggered = kvc_triggered(mt);
		if (!o->complete && kvc_accepting(mt))
			o->complete = 1;	/* at the limit, on an end */
	}
	kvc_matcher_free(mt);
	return 0;
}

#endif
