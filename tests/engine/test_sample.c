// SPDX-License-Identifier: MIT
/*
 * test_sample.c - the sampler's request parameters beyond temperature,
 * top-k and top-p (test_engine.c has those): min-p, and the logit
 * adjustments (repetition, frequency and presence penalties, biases).
 */
#include <errno.h>
#include <math.h>

#include "tcheck.h"

static void test_min_p(void)
{
	/* probabilities 0.5, 0.3, 0.15, 0.05 */
	const float lg[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
	char scratch[KVE_SAMPLE_SCRATCH(4)];
	unsigned seen[4] = { 0 }, seen0[4] = { 0 };
	struct kve_sampler s = { 1.0f, 0, 1.0f, kve_rng_seed(1), 0.5f };
	struct kve_sampler s0 = { 1.0f, 0, 1.0f, kve_rng_seed(1), 0 };
	int i;

	for (i = 0; i < 4000; i++) {
		int32_t t = kve_sample(&s, lg, 4, scratch), t0 = kve_sample(&s0, lg, 4, scratch);

		if (t >= 0 && t < 4)
			seen[t]++;
		if (t0 >= 0 && t0 < 4)
			seen0[t0]++;
	}
	CHECK(seen[0] && seen[1] && !seen[2] && !seen[3],
	      "min_p 0.5 keeps p >= 0.25 only (%u %u %u %u)", seen[0], seen[1], seen[2], seen[3]);
	CHECK(seen[0] + seen[1] == 4000, "every draw is one of the two");
	/* the kept two renormalised: 0.625 and 0.375 */
	CHECK(seen[0] > 2300 && seen[0] < 2700, "renormalised over the kept tokens (%u of 4000)",
	      seen[0]);
	CHECK(seen0[2] && seen0[3], "min_p 0 keeps all (%u %u)", seen0[2], seen0[3]);
	s.min_p = 1.0f;
	for (i = 0; i < 100; i++)
		if (kve_sample(&s, lg, 4, scratch) != 0)
			break;
	CHECK(i == 100, "min_p 1 keeps only the most likely token");
}

static void test_adjust(void)
{
	float lg[6] = { 2, -2, 1, 0.5f, 3, 0 };
	const int32_t ctx[] = { 0, 1, 7, -1 };
	const struct kve_token_count gen[] = { { 2, 3 }, { 3, 0 }, { 99, 1 } };
	const struct kve_token_bias bias[] = { { 4, -INFINITY }, { 5, 1.5f }, { 6, 9 } };
	struct kve_logit_adjust a = { 0 };
	struct kve_sampler g = { 0 };

	CHECK(kve_logit_adjust_none(&a) && kve_logit_adjust_none(NULL), "nothing set: none");
	a.repetition_penalty = 2;
	CHECK(kve_logit_adjust_none(&a), "a penalty without tokens changes nothing");
	a.context = ctx;
	a.n_context = 4;
	a.frequency_penalty = 0.5f;
	a.presence_penalty = 1;
	a.generated = gen;
	a.n_generated = 3;
	a.bias = bias;
	a.n_bias = 3;
	CHECK(!kve_logit_adjust_none(&a), "set: not none");
	CHECK(kve_logits_adjust(lg, 6, &a) == 0, "adjust");
	CHECK(lg[0] == 1 && lg[1] == -4, "repetition: positive divided, negative multiplied (%g %g)",
	      lg[0], lg[1]);
	CHECK(lg[2] == 1 - 3 * 0.5f - 1, "frequency x count + presence (%g)", lg[2]);
	CHECK(lg[3] == 0.5f, "a count of 0 is not a presence (%g)", lg[3]);
	CHECK(isinf(lg[4]) && lg[4] < 0 && lg[5] == 1.5f, "biases (%g %g)", lg[4], lg[5]);
	CHECK(kve_sample(&g, lg, 6, NULL) == 5, "greedy after the bias ban picks the next best");
	CHECK(kve_logits_adjust(NULL, 6, &a) == -EINVAL && kve_logits_adjust(lg, 0, &a) == -EINVAL,
	      "bad arguments");
}

int main(void)
{
	test_min_p();
	test_adjust();
	return tc_done();
}
