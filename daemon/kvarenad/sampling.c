// SPDX-License-Identifier: MIT
/*
 * sampling.c - a job's sampler state beyond temperature and top-p, as the
 * workers get it with every step (proto.h's struct kvd_sampler_wire):
 * top-k, min-p, logit biases (ignore_eos is a ban on the end tokens),
 * the distinct tokens of the context for the repetition penalty and the
 * counts of the generated tokens for the frequency and presence
 * penalties. The worker samples (daemon/engine/sample.c); this file only
 * keeps what it needs, so a resent step or another worker samples the
 * same token. Not here: temperature, top-p, the RNG, constraints (the
 * step's own fields).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct kvd_jsampler {
	struct kvd_sampler_wire w;
	struct kve_token_bias *bias;
	/* repetition penalty: the context's distinct tokens, and which of
	 * the conversation's tokens are folded in */
	int track_context;
	uint8_t *seen;			/* bitmap over the vocabulary */
	int32_t *context;
	uint32_t n_context, cap_context;
	uint32_t context_upto;
	/* frequency/presence: generated tokens by id, sorted */
	int track_generated;
	struct kve_token_count *gen;
	uint32_t n_gen, cap_gen;
};

static void set_err(struct kvd_error *e, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_err(struct kvd_error *e, const char *param, const char *fmt, ...)
{
	va_list ap;

	memset(e, 0, sizeof(*e));
	e->kind = KVD_ERR_INVALID;
	e->param = param;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

int kvd_sampling_setup(struct kvd *d, struct kvd_job *j, const struct kvd_sampling *s,
		       struct kvd_error *err)
{
	struct kvd_jsampler *x;
	uint32_t i, n_ban = 0;

	if (s->n_logit_bias > KVD_MAX_LOGIT_BIAS || (s->n_logit_bias && !s->logit_bias)) {
		set_err(err, "logit_bias", "at most %d logit_bias entries", KVD_MAX_LOGIT_BIAS);
		return -EINVAL;
	}
	for (i = 0; i < s->n_logit_bias; i++)
		if (s->logit_bias[i].token < 0 || (uint32_t)s->logit_bias[i].token >= d->vocab) {
			set_err(err, "logit_bias", "Invalid key in 'logit_bias': token id %d is not in the vocabulary (0..%u)",
				s->logit_bias[i].token, d->vocab - 1);
			return -EINVAL;
		}
	if (!s->top_k && !(s->min_p > 0) && !s->n_logit_bias && !s->ignore_eos &&
	    s->frequency_penalty == 0 && s->presence_penalty == 0 &&
	    (!(s->repetition_penalty > 0) || s->repetition_penalty == 1.0f))
		return 0;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	j->smp = x;
	x->w.top_k = s->top_k;
	x->w.min_p = s->min_p > 0 ? s->min_p : 0;
	x->w.repetition_penalty = s->repetition_penalty > 0 ? s->repetition_penalty : 1.0f;
	x->w.frequency_penalty = s->frequency_penalty;
	x->w.presence_penalty = s->presence_penalty;
	x->track_context = x->w.repetition_penalty != 1.0f;
	x->track_generated = s->frequency_penalty != 0 || s->presence_penalty != 0;
	if (s->ignore_eos)
		n_ban = 1 + (d->eot >= 0 && d->eot != d->eos) + (d->eom >= 0);
	x->bias = calloc(s->n_logit_bias + n_ban + 1, sizeof(*x->bias));
	if (!x->bias)
		return -ENOMEM;
	for (i = 0; i < s->n_logit_bias; i++) {
		x->bias[i].token = s->logit_bias[i].token;
		/* OpenAI: -100 bans; so it does here, whatever the logits */
		x->bias[i].bias = s->logit_bias[i].bias <= -100 ? -INFINITY :
				  s->logit_bias[i].bias;
	}
	if (s->ignore_eos) {
		x->bias[i].token = d->eos;
		x->bias[i++].bias = -INFINITY;
		if (d->eot >= 0 && d->eot != d->eos) {
			x->bias[i].token = d->eot;
			x->bias[i++].bias = -INFINITY;
		}
		if (d->eom >= 0) {	/* the family's second end of turn */
			x->bias[i].token = d->eom;
			x->bias[i++].bias = -INFINITY;
		}
	}
	x->w.n_bias = i;
	if (x->track_context) {
		x->seen = calloc((d->vocab + 7) / 8, 1);
		if (!x->seen)
			return -ENOMEM;
	}
	return 0;
}

void kvd_sampling_free(struct kvd_job *j)
{
	struct kvd_jsampler *x = j->smp;

	if (!x)
		return;
	free(x->bias);
	free(x->seen);
	free(x->context);
	free(x->gen);
	free(x);
	j->smp = NULL;
}

int kvd_sampling_note(struct kvd_job *j, int32_t tok)
{
	struct kvd_jsampler *x = j->smp;
	uint32_t lo = 0, hi;

	if (!x || !x->track_generated)
		return 0;
	hi = x->n_gen;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (x->gen[mid].token < tok)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < x->n_gen && x->gen[lo].token == tok) {
		x->gen[lo].count++;
		return 0;
	}
	if (x->n_gen == x->cap_gen) {
		uint32_t cap = x->cap_gen ? x->cap_gen * 2 : 64;
		struct kve_token_count *g = realloc(x->gen, cap * sizeof(*g));

		if (!g)
			return -ENOMEM;
		x->gen = g;
		x->cap_gen = cap;
	}
	if (lo < x->n_gen)
		memmove(x->gen + lo + 1, x->gen + lo, (x->n_gen - lo) * sizeof(*x->gen));
	x->gen[lo].token = tok;
	x->gen[lo].count = 1;
	x->n_gen++;
	x->w.n_generated = x->n_gen;
	return 0;
}

/* Folds the conversation's tokens not seen yet into the context set. */
static int sync_context(struct kvd *d, struct kvd_jsampler *x, const struct kvd_conv *c)
{
	uint32_t i;

	if (!x->track_context || !c)
		return 0;
	if (c->n_tokens < x->context_upto)
		x->context_upto = 0;	/* cut (cannot happen mid-request): rescan */
	for (i = x->context_upto; i < c->n_tokens; i++) {
		int32_t t = c->tokens[i];

		if (t < 0 || (uint32_t)t >= d->vocab || (x->seen[t >> 3] & (1u << (t & 7))))
			continue;
		if (x->n_context == x->cap_context) {
			uint32_t cap = x->cap_context ? x->cap_context * 2 : 256;
			int32_t *p = realloc(x->context, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			x->context = p;
			x->cap_context = cap;
		}
		x->seen[t >> 3] |= (uint8_t)(1u << (t & 7));
		x->context[x->n_context++] = t;
	}
	x->context_upto = c->n_tokens;
	x->w.n_context = x->n_context;
	return 0;
}

size_t kvd_sampling_wire_len(struct kvd *d, struct kvd_job *j)
{
	struct kvd_jsampler *x = j->smp;

	if (!x)
		return 0;
	if (sync_context(d, x, j->conv))
		x->w.n_context = 0;	/* out of memory: this step goes without */
	return sizeof(x->w) + (size_t)x->w.n_bias * 8 + (size_t)x->w.n_context * 4 +
	       (size_t)x->w.n_generated * 8;
}

void kvd_sampling_put(const struct kvd_job *j, char **p)
{
	const struct kvd_jsampler *x = j->smp;

	if (!x)
		return;
	memcpy(*p, &x->w, sizeof(x->w));
	*p += sizeof(x->w);
	if (x->w.n_bias)
		memcpy(*p, x->bias, (size_t)x->w.n_bias * 8);
	*p += (size_t)x->w.n_bias * 8;
	if (x->w.n_context)
		memcpy(*p, x->context, (size_t)x->w.n_context * 4);
	*p += (size_t)x->w.n_context * 4;
	if (x->w.n_generated)
		memcpy(*p, x->gen, (size_t)x->w.n_generated * 8);
	*p += (size_t)x->w.n_generated * 8;
}
