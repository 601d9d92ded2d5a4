/* SPDX-License-Identifier: MIT */
/*
 * bench_argmax.h - the greedy pick both bench drivers (kve-bench.c,
 * llama-driver.c) apply to each decode step's logits. It is the drivers'
 * cost, not an engine's, but it sits inside the timed decode loop: the
 * plain loop ("if (l[i] > l[b]) b = i") took about 130 us over 32000
 * logits on the Zen 5 bench host, 7% of a 110M Q4_0 step and far more of
 * a 15M one (Documentation/engine.md, "Decode's fixed costs"). This one
 * returns the same index: the first i whose l[i] no element exceeds
 * (NaNs never win; l[0] NaN gives 0, as the loop did), reading 8 lanes
 * at a time.
 */
#ifndef KVA_BENCH_ARGMAX_H
#define KVA_BENCH_ARGMAX_H

#include <immintrin.h>
#include <stdio.h>

__attribute__((target("avx2"), unused))
static int bench_argmax(const float *l, int n)
{
	__m256 m = _mm256_set1_ps(l[0]);
	float lane[8], best = l[0];
	int i, k;

	if (l[0] != l[0])
		return 0;
	/* the largest value: "x > m" is false for a NaN x, as in the loop */
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(l + i);

		m = _mm256_blendv_ps(m, x, _mm256_cmp_ps(x, m, _CMP_GT_OQ));
	}
	_mm256_storeu_ps(lane, m);
	for (k = 0; k < 8; k++)
		if (lane[k] > best)
			best = lane[k];
	for (; i < n; i++)
		if (l[i] > best)
			best = l[i];
	/* its first index (+0 and -0 compare equal, as they do in the loop) */
	for (i = 0; i + 8 <= n; i += 8) {
		int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i),
							    _mm256_set1_ps(best), _CMP_EQ_OQ));

		if (mask)
			return i + __builtin_ctz((unsigned)mask);
	}
	for (; i < n; i++)
		if (l[i] == best)
			return i;
	return 0;
}

/* After the prompt, outside the timed loops: "argmax2=ID" and
 * "argmax_gap=G", the runner-up and how far below the argmax a it is, so
 * that bench.sh can tell a near-tie (the engines' top two swapped by a
 * few thousandths) from a disagreement */
__attribute__((unused))
static void bench_print_runner_up(const float *l, int n, int a)
{
	int i, b = a ? 0 : 1;

	for (i = 0; i < n; i++)
		if (i != a && l[i] > l[b])
			b = i;
	printf("argmax2=%d\nargmax_gap=%.6f\n", b, (double)(l[a] - l[b]));
}

#endif
