// SPDX-License-Identifier: GPL-2.0
/*
 * Host unit tests for kmod/core/kvc_predict.c: synthetic wait
 * distributions (uniform, bimodal, heavy tail) are sampled, bucketed into
 * the toolwait log2 histogram, and the predictor is compared with the
 * samples' own conditional mean E[T - e | T > e].  Closing line:
 * "N passed, N failed".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_predict.h"

#define NSAMPLES 200000

static int passed, failed;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static double uniform01(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / (double)(1ULL << 53);
}

#define CHECK(cond, ...)						\
	do {								\
		if (cond) {						\
			passed++;					\
		} else {						\
			failed++;					\
			printf("FAIL %s:%d: ", __FILE__, __LINE__);	\
			printf(__VA_ARGS__);				\
			printf("\n");					\
		}							\
	} while (0)

static uint32_t slot_of(uint64_t us)
{
	uint32_t s = 0;

	while (us >> (s + 1))
		s++;
	return s >= KVC_PREDICT_SLOTS ? KVC_PREDICT_SLOTS - 1 : s;
}

struct dist {
	uint64_t *t;
	uint32_t slots[KVC_PREDICT_SLOTS];
};

static void fill(struct dist *d, uint64_t (*gen)(void))
{
	memset(d->slots, 0, sizeof(d->slots));
	for (int i = 0; i < NSAMPLES; i++) {
		d->t[i] = gen();
		d->slots[slot_of(d->t[i])]++;
	}
}

/* The samples' own E[T - e | T > e], or -1 if none survive. */
static double truth(const struct dist *d, uint64_t e)
{
	double sum = 0;
	long n = 0;

	for (int i = 0; i < NSAMPLES; i++)
		if (d->t[i] > e) {
			sum += (double)(d->t[i] - e);
			n++;
		}
	return n ? sum / (double)n : -1;
}

static double truth_survival(const struct dist *d, uint64_t e, uint64_t h)
{
	long n = 0, m = 0;

	for (int i = 0; i < NSAMPLES; i++) {
		n += d->t[i] > e;
		m += d->t[i] > e + h;
	}
	return n ? (double)m / (double)n : -1;
}

/*
 * The log2 buckets hide where in a bucket the mass lies, so the bound is
 * relative to the bucket at the elapsed time: tol x (truth + bucket width).
 */
static void expect_near(const char *name, const struct dist *d, uint64_t e,
			double tol)
{
	uint64_t got = kvc_predict_remaining_us(d->slots, KVC_PREDICT_SLOTS,
						 e, 0);
	double want = truth(d, e);
	double slack = tol * (want + (double)(1ULL << slot_of(e ? e : 1)));

	CHECK(fabs((double)got - want) <= slack,
	      "%s: elapsed %lu us: predicted %lu us, samples say %.0f (+-%.0f)",
	      name, (unsigned long)e, (unsigned long)got, want, slack);
}

static uint64_t gen_uniform(void)	/* 0..1 s */
{
	return (uint64_t)(uniform01() * 1e6);
}

static uint64_t gen_bimodal(void)	/* 60% ~50 ms, 40% ~2 s */
{
	double j = 0.9 + 0.2 * uniform01();

	return (uint64_t)((uniform01() < 0.6 ? 50000 : 2000000) * j);
}

static uint64_t gen_pareto(void)	/* alpha 1.5, x_min 10 ms */
{
	double x = 10000.0 / pow(1.0 - uniform01(), 1.0 / 1.5);

	return x > 3e9 ? 3000000000ULL : (uint64_t)x;
}

static void test_uniform(struct dist *d)
{
	fill(d, gen_uniform);
	for (uint64_t e = 0; e < 1000000; e += 100000)
		expect_near("uniform", d, e, 0.15);
	/* Past the support: Lindy (remaining = elapsed). */
	CHECK(kvc_predict_remaining_us(d->slots, KVC_PREDICT_SLOTS, 5000000, 0)
	      == 5000000, "uniform: beyond support");
	/* Survival: half of what is left at 0.5 s is gone 0.25 s later. */
	uint32_t s = kvc_predict_survival(d->slots, KVC_PREDICT_SLOTS, 500000,
					  250000);
	double want = truth_survival(d, 500000, 250000) * 1024;

	CHECK(fabs(s - want) < 0.15 * 1024, "uniform survival %u vs %.0f", s,
	      want);
}

static void test_bimodal(struct dist *d)
{
	fill(d, gen_bimodal);
	expect_near("bimodal", d, 0, 0.15);
	expect_near("bimodal", d, 20000, 0.15);
	expect_near("bimodal", d, 100000, 0.15);
	expect_near("bimodal", d, 1000000, 0.15);
	/* The decisive property: once the short mode is over, expect the long. */
	uint64_t early = kvc_predict_remaining_us(d->slots, KVC_PREDICT_SLOTS,
						   10000, 0);
	uint64_t late = kvc_predict_remaining_us(d->slots, KVC_PREDICT_SLOTS,
						  100000, 0);

	CHECK(early < 1100000 && late > 1500000,
	      "bimodal: early %lu late %lu", (unsigned long)early,
	      (unsigned long)late);
	uint32_t s = kvc_predict_survival(d->slots, KVC_PREDICT_SLOTS, 100000,
					  1000000);

	CHECK(s > 900, "bimodal: a wait past 100 ms survives 1 s more: %u", s);
}

static void test_heavy_tail(struct dist *d)
{
	uint64_t prev = 0;

	fill(d, gen_pareto);
	/* Pareto alpha 1.5: mean residual life grows linearly, ~2e. */
	for (uint64_t e = 20000; e <= 5120000; e *= 4) {
		uint64_t r = kvc_predict_remaining_us(d->slots,
						      KVC_PREDICT_SLOTS, e, 0);

		expect_near("pareto", d, e, 0.35);
		CHECK(r > prev, "pareto: remaining grows with elapsed (%lu)",
		      (unsigned long)e);
		prev = r;
	}
}

static void test_cold_start(void)
{
	uint32_t slots[KVC_PREDICT_SLOTS] = { 0 };

	slots[17] = KVC_PREDICT_MIN_SAMPLES - 1;
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 0, 0) ==
	      KVC_PREDICT_COLD_US, "cold default");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 300000, 0) ==
	      KVC_PREDICT_COLD_US - 300000, "cold, elapsed");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 4000000, 0) ==
	      4000000, "cold, Lindy");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 0, 200000) ==
	      200000, "cold, hint");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 150000,
				       200000) == 150000, "cold, hint/2 floor");
	CHECK(kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 0, 1000) == 512,
	      "cold survival");
	slots[17]++;
	/* Eight waits all in [131 ms, 262 ms): midpoint 196 ms. */
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 0, 0) ==
	      196608, "warm: slot midpoint");
	/* exactly KVC_PREDICT_MIN_SAMPLES is warm for survival too: all
	 * eight waits outlast 1 ms */
	CHECK(kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 0, 1000) == 1024,
	      "warm survival at exactly %u samples", KVC_PREDICT_MIN_SAMPLES);
}

static void test_extremes(void)
{
	uint32_t slots[KVC_PREDICT_SLOTS];
	uint64_t r;

	for (int i = 0; i < KVC_PREDICT_SLOTS; i++)
		slots[i] = UINT32_MAX;
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 0, 0);
	/* Equal counts per slot, midpoints 1.5 x 2^i: mean 1.5 x 2^32 / 32. */
	CHECK(fabs((double)r - 1.5 * 4294967296.0 / 32) < 1e6,
	      "saturated: %lu", (unsigned long)r);
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, UINT64_MAX / 4,
				     0);
	CHECK(r == UINT64_MAX / 4, "beyond the last slot: Lindy");
	/*
	 * One 40-minute wait among 4 million short ones: the counts sum past
	 * 2^20, so they are scaled (by 4); rounding down would lose it and
	 * fall back to the cold-start rule (about 1 s).  Its slot's midpoint
	 * is 3 x 2^30 us.
	 */
	memset(slots, 0, sizeof(slots));
	slots[0] = 4000000;
	slots[31] = 1;
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 10, 0);
	CHECK(r == 3ULL * (1ULL << 30) - 10, "rare long wait survives scaling: %lu",
	      (unsigned long)r);
	CHECK(kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 10, 1000) == 1024,
	      "rare long wait: certain to last 1 ms more");
	/* Just at the scaling threshold (2^20, no scaling) and one past it. */
	memset(slots, 0, sizeof(slots));
	slots[3] = 1048576 - 8;
	slots[20] = 8;
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 16, 0);
	CHECK(r == 3ULL * (1ULL << 19) - 16, "2^20 samples, past slot 3: %lu",
	      (unsigned long)r);
	slots[3]++;
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 16, 0);
	CHECK(r == 3ULL * (1ULL << 19) - 16, "2^20 + 1 samples, past slot 3: %lu",
	      (unsigned long)r);
	/* A wait inside a slot: the slot's mass is spread uniformly. */
	memset(slots, 0, sizeof(slots));
	slots[10] = 100;	/* [1024, 2048) us */
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 1536, 0);
	CHECK(r == 256, "half-way through a slot: mean of the rest %lu",
	      (unsigned long)r);
	CHECK(kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 1024, 512) == 512,
	      "half of a uniform slot survives half its width: %u",
	      kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 1024, 512));
	CHECK(kvc_predict_survival(slots, KVC_PREDICT_SLOTS, 1024, 1024) == 0,
	      "nothing outlives its slot");
	/* Past the middle of the last slot holding waits, the rest is held
	 * at a quarter of the slot (the spread mass would leave nothing at
	 * its top), and a runtime predicting anew at each overrun does so
	 * at most twice more in the slot before the Lindy rule. */
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 1280, 0) == 384,
	      "before the middle of the last slot: the mean of the rest");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 1792, 0) == 256,
	      "past the middle of the last slot: a quarter of it");
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 2047, 0) == 256,
	      "at the last us of the last slot: still a quarter of it");
	{
		uint64_t e = 1024;
		int n = 0;

		while (e < 2048 && n < 100) {
			e += kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, e, 0);
			n++;
		}
		CHECK(n == 3 && e == 2048,
		      "overruns in the last slot: %d predictions to its top, %lu us",
		      n, (unsigned long)e);
		/* the hint: the prediction just passed, as kvarenad gives */
		CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, e, e) == e,
		      "at the top: the Lindy rule");
	}
	/* Not the last slot: the mass above pulls the rest up as before. */
	slots[12] = 1;	/* [4096, 8192) us */
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 2047, 0) > 256,
	      "a slot with waits above it: no floor needed");
	slots[12] = 0;
	/* Exactly 2^20 samples are not scaled: 3 and 5 above elapsed keep
	 * their 3 : 5 weights (scaled by 2 they would round to 2 : 3). */
	memset(slots, 0, sizeof(slots));
	slots[3] = 1048576 - 8;
	slots[19] = 3;
	slots[20] = 5;
	r = kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 16, 0);
	CHECK(r == (3 * 786432ULL + 5 * 1572864ULL) / 8 - 16,
	      "2^20 samples unscaled: %lu", (unsigned long)r);
	/* Cold start between base / 3 and base / 2: still base - elapsed. */
	memset(slots, 0, sizeof(slots));
	CHECK(kvc_predict_remaining_us(slots, KVC_PREDICT_SLOTS, 400000, 0) == 600000,
	      "cold, elapsed 0.4 s: 0.6 s left");
	/* Histograms longer than the predictor's 32 slots: the rest ignored. */
	{
		uint32_t big[40] = { 0 };

		big[10] = 100;
		big[35] = 1000000;
		CHECK(kvc_predict_remaining_us(big, 40, 1536, 0) == 256 &&
		      kvc_predict_survival(big, 40, 1024, 512) == 512,
		      "slots past the 32nd are ignored");
	}
}

int main(void)
{
	struct dist d = { .t = calloc(NSAMPLES, sizeof(uint64_t)) };

	if (!d.t)
		return 1;
	test_uniform(&d);
	test_bimodal(&d);
	test_heavy_tail(&d);
	test_cold_start();
	test_extremes();
	free(d.t);
	printf("test_predict: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
