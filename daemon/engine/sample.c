// SPDX-License-Identifier: MIT
/*
 * sample.c - picks the next token from logits: greedy, or temperature with
 * optional top-k, min-p and top-p, driven by a per-request RNG state that
 * lives in the request (struct kve_sampler), so replaying a request
 * replays its tokens. kve_sample_masked does the same over the tokens a
 * bitset allows (constrained decoding, kvconstrain.h). kve_logits_adjust
 * applies the penalties and biases a request asks for to the logits
 * before either. Owns no model state.
 */
#include "kvengine.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

struct cand {
	float p;
	int32_t id;
};

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t kve_rng_seed(uint64_t seed)
{
	uint64_t s = seed;

	return splitmix(&s);
}

static int by_prob(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t i, best = 0;

	for (i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return (int32_t)best;
}

/* Top-k, min-p, top-p and the draw over n weighted candidates
 * (unnormalised probabilities), shared by the free and the masked
 * sampler. */
static int32_t draw(struct kve_sampler *s, struct cand *c, uint32_t n)
{
	float sum = 0, r, acc;
	uint32_t i;

	qsort(c, n, sizeof(*c), by_prob);
	if (s->top_k && s->top_k < n)
		n = s->top_k;
	if (s->min_p > 0 && n > 1) {
		/* relative to the most likely token: c[0] after the sort */
		float cut = s->min_p * c[0].p;

		for (i = 1; i < n; i++)
			if (c[i].p < cut) {
				n = i;
				break;
			}
	}
	for (i = 0; i < n; i++)
		sum += c[i].p;
	if (s->top_p > 0 && s->top_p < 1) {
		float cut = s->top_p * sum, run = 0;

		for (i = 0; i < n; i++) {
			run += c[i].p;
			if (run >= cut) {
				n = i + 1;
				break;
			}
		}
		sum = run;
	}
	/* 24 random bits -> [0, 1) */
	r = (float)(splitmix(&s->rng) >> 40) * (1.0f / 16777216.0f) * sum;
	acc = 0;
	for (i = 0; i < n; i++) {
		acc += c[i].p;
		if (r < acc)
			return c[i].id;
	}
	return c[n - 1].id;
}

int32_t kve_sample(struct kve_sampler *s, const float *logits, uint32_t vocab,
		   void *scratch)
{
	struct cand *c = scratch;
	float mx;
	uint32_t i;

	if (!s || !logits || !vocab || vocab > INT32_MAX)
		return -EINVAL;
	if (!(s->temperature > 0) || s->top_k == 1)
		return argmax(logits, vocab);
	if (!c)
		return -EINVAL;
	mx = logits[argmax(logits, vocab)];
	for (i = 0; i < vocab; i++) {
		c[i].id = (int32_t)i;
		c[i].p = expf((logits[i] - mx) / s->temperature);
	}
	return draw(s, c, vocab);
}

static int allowed(const uint32_t *mask, uint32_t i)
{
	return (mask[i >> 5] >> (i & 31)) & 1;
}

/* The same choice as kve_sample over the allowed tokens only: greedy is
 * the best allowed token, and temperature, top-k and top-p act on the
 * allowed tokens' distribution. */
int32_t kve_sample_masked(struct kve_sampler *s, const float *logits, uint32_t vocab,
			  const uint32_t *mask, void *scratch)
{
	struct cand *c = scratch;
	float mx = 0;
	uint32_t i, w, n = 0;
	int32_t best = -1;

	if (!mask)
		return kve_sample(s, logits, vocab, scratch);
	if (!s || !logits || !vocab || vocab > INT32_MAX)
		return -EINVAL;
	for (w = 0; w < (vocab + 31) / 32; w++) {
		uint32_t bits = mask[w];

		if (w == vocab / 32)
			bits &= (1u << (vocab & 31)) - 1;
		while (bits) {
			i = w * 32 + (uint32_t)__builtin_ctz(bits);
			bits &= bits - 1;
			if (best < 0 || logits[i] > logits[best])
				best = (int32_t)i;
		}
	}
	if (best < 0)
		return -ENOENT;
	if (!(s->temperature > 0) || s->top_k == 1)
		return best;
	if (!c)
		return -EINVAL;
	mx = logits[best];
	for (i = 0; i < vocab; i++) {
		if (!allowed(mask, i))
			continue;
		c[n].id = (int32_t)i;
		c[n].p = expf((logits[i] - mx) / s->temperature);
		n++;
	}
	return draw(s, c, n);
}

int kve_logit_adjust_none(const struct kve_logit_adjust *a)
{
	return !a || ((!(a->repetition_penalty > 0) || a->repetition_penalty == 1.0f ||
		       !a->n_context) &&
		      ((a->frequency_penalty == 0 && a->presence_penalty == 0) ||
		       !a->n_generated) &&
		      !a->n_bias);
}

int kve_logits_adjust(float *logits, uint32_t vocab, const struct kve_logit_adjust *a)
{
	uint32_t i;

	if (!logits || !a || !vocab || vocab > INT32_MAX)
		return -EINVAL;
	if (a->repetition_penalty > 0 && a->repetition_penalty != 1.0f)
		for (i = 0; i < a->n_context; i++) {
			int32_t t = a->context[i];

			if (t < 0 || (uint32_t)t >= vocab)
				continue;
			if (logits[t] > 0)
				logits[t] /= a->repetition_penalty;
			else
				logits[t] *= a->repetition_penalty;
		}
	if (a->frequency_penalty != 0 || a->presence_penalty != 0)
		for (i = 0; i < a->n_generated; i++) {
			const struct kve_token_count *g = &a->generated[i];

			if (g->token < 0 || (uint32_t)g->token >= vocab || !g->count)
				continue;
			logits[g->token] -= (float)g->count * a->frequency_penalty +
					    a->presence_penalty;
		}
	for (i = 0; i < a->n_bias; i++) {
		const struct kve_token_bias *b = &a->bias[i];

		if (b->token >= 0 && (uint32_t)b->token < vocab)
			logits[b->token] += b->bias;
	}
	return 0;
}
