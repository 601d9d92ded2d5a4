// SPDX-License-Identifier: MIT
/*
 * kve-tiles - the selected kernel set's one-token matrix products on one
 * GGUF file's own matrices, packed as the engine packs them (the
 * measurements of Documentation/engine.md, "Loads, not arithmetic"):
 *   - every matrix a decode step reads, in its order, alternating with a
 *     plain read pass over the same bytes (per type: us a pass, GB/s, and
 *     the read pass's GB/s; the median of the passes);
 *   - per quantised type, its first matrix cut to about 400 KB (from the
 *     L2), then one 16-row panel of it (from the L1), repeated.
 * KVE_ISA picks another set (as for the engine), so two sets compare in
 * alternate runs; the engine's own decode is kve-bench's.
 *
 * usage: kve-tiles MODEL [--passes N]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "kvengine.h"

#define MAX_MATS	(7 * 512 + 1)
#define MAX_COLS	32768	/* activations this tool quantises */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* kve-bench's read pass: four 32-byte loads per 128 bytes, summed */
__attribute__((target("avx2")))
static double read_pass(const uint8_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	long long out[4];
	size_t i;

	for (i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	_mm256_storeu_si256((__m256i *)out, a0);
	return (double)(out[0] + out[1] + out[2] + out[3]);
}

static volatile double sink;	/* keeps the read passes alive */

struct acts {
	const float *x;
	struct kve_q8x *xq;
	struct kve_q8k *xk;
	float *y;
};

/* one token through matrix w, as forward.c's mm_rows dispatches it */
static void product(const struct kve_kernels *k, const struct kve_mat *w, const struct acts *a)
{
	int n = (int)w->rows;

	switch (w->type) {
	case GGML_F32: k->mm_f32(w, a->x, 1, a->y, n, 0, n); break;
	case GGML_F16: k->mm_f16(w, a->x, 1, a->y, n, 0, n); break;
	case GGML_BF16: k->mm_bf16(w, a->x, 1, a->y, n, 0, n); break;
	case GGML_Q8_0: k->mm_q8(w, a->xq, 1, a->y, n, 0, n); break;
	case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: case GGML_IQ4_NL:
		k->mm_q32(w, a->xq, 1, a->y, n, 0, n);
		break;
	default: k->mm_qk(w, a->xk, 1, a->y, n, 0, n); break;
	}
}

static size_t mat_bytes(const struct kve_mat *w)
{
	return (size_t)w->rows * w->row_bytes;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* GB/s of w's product repeated over about 400 MB, best of 5 */
static double repeated(const struct kve_kernels *k, const struct kve_mat *w, const struct acts *a)
{
	double nb = (double)mat_bytes(w), best = 0;
	int n = (int)(4e8 / nb) + 1, r, i;

	for (r = 0; r < 5; r++) {
		double t = now(), gbs;

		for (i = 0; i < n; i++)
			product(k, w, a);
		gbs = nb * n / (now() - t) / 1e9;
		best = gbs > best ? gbs : best;
	}
	return best;
}

int main(int argc, char **argv)
{
	static const struct kve_mat *mats[MAX_MATS];
	static double tt[32], tr[32], tb[32];
	const struct kve_kernels *k = kve_kernels_select();
	struct kve_model *m;
	struct acts a;
	char err[256];
	int passes = 30, nm = 0, i, p, l;
	double *pp, *pr;
	float *x;

	if (argc < 2 || (argc == 4 && strcmp(argv[2], "--passes")) || argc == 3 || argc > 4) {
		fprintf(stderr, "usage: kve-tiles MODEL [--passes N]\n");
		return 2;
	}
	if (argc == 4)
		passes = atoi(argv[3]);
	if (passes < 1 || passes > 100000) {
		fprintf(stderr, "kve-tiles: --passes must be 1..100000\n");
		return 2;
	}
	m = kve_model_load(argv[1], err, sizeof(err));
	if (!m) {
		fprintf(stderr, "kve-tiles: %s\n", err);
		return 1;
	}
	if (m->info.n_layers > 512) {
		fprintf(stderr, "kve-tiles: more than 512 layers\n");
		return 1;
	}
	for (l = 0; l < (int)m->info.n_layers; l++) {
		const struct kve_layer *L = &m->layers[l];

		mats[nm++] = &L->wq;
		mats[nm++] = &L->wk;
		mats[nm++] = &L->wv;
		mats[nm++] = &L->wo;
		mats[nm++] = &L->gate;
		mats[nm++] = &L->up;
		mats[nm++] = &L->down;
	}
	mats[nm++] = &m->output;
	x = malloc(MAX_COLS * sizeof(float));
	a.xq = malloc(MAX_COLS / QK8_0 * sizeof(*a.xq));
	a.xk = malloc(MAX_COLS / QK_K * sizeof(*a.xk));
	a.y = malloc((size_t)m->output.rows * sizeof(float) + 65536 * sizeof(float));
	pp = malloc((size_t)passes * sizeof(double));
	pr = malloc((size_t)passes * sizeof(double));
	if (!x || !a.xq || !a.xk || !a.y || !pp || !pr) {
		fprintf(stderr, "kve-tiles: out of memory\n");
		return 1;
	}
	for (i = 0; i < nm; i++)
		if (mats[i]->cols > MAX_COLS || mats[i]->rows > m->output.rows + 65536) {
			fprintf(stderr, "kve-tiles: a matrix of %u x %u is too large here\n",
				mats[i]->rows, mats[i]->cols);
			return 1;
		}
	srand(1);
	for (i = 0; i < MAX_COLS; i++)
		x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
	/* one token's activations; a matrix reads the prefix it needs */
	k->quantize_q8x(x, MAX_COLS, a.xq);
	k->quantize_q8k(x, MAX_COLS, a.xk);
	a.x = x;
	printf("kernels %s, %d matrices, %d passes of each kind, alternating\n", k->name, nm, passes);

	for (p = 0; p < passes; p++) {
		double t0 = now(), t1;

		for (i = 0; i < nm; i++) {
			double u = now();

			product(k, mats[i], &a);
			tt[mats[i]->type & 31] += now() - u;
		}
		t1 = now();
		pp[p] = t1 - t0;
		for (i = 0; i < nm; i++) {
			double u = now();

			sink += read_pass(mats[i]->data, mat_bytes(mats[i]));
			tr[mats[i]->type & 31] += now() - u;
		}
		pr[p] = now() - t1;
	}
	for (i = 0; i < nm; i++)
		tb[mats[i]->type & 31] += (double)mat_bytes(mats[i]);
	qsort(pp, (size_t)passes, sizeof(double), cmp_double);
	qsort(pr, (size_t)passes, sizeof(double), cmp_double);
	{
		double all = 0;

		for (i = 0; i < 32; i++)
			all += tb[i];
		printf("all matrices, %.1f MB: products median %.0f us (%.1f GB/s), read median %.0f us (%.1f GB/s): %.1f%% of the read\n",
		       all / 1e6, pp[passes / 2] * 1e6, all / pp[passes / 2] / 1e9,
		       pr[passes / 2] * 1e6, all / pr[passes / 2] / 1e9,
		       100 * pr[passes / 2] / pp[passes / 2]);
	}
	for (i = 0; i < 32; i++)
		if (tb[i] > 0)
			printf("  type %d: %.1f MB, products %.1f GB/s, read %.1f GB/s (means)\n", i,
			       tb[i] / 1e6, tb[i] * passes / tt[i] / 1e9, tb[i] * passes / tr[i] / 1e9);

	for (i = 0; i < 32; i++) {
		struct kve_mat cut;
		int j;

		if (tb[i] <= 0 || i == GGML_F32 || i == GGML_F16 || i == GGML_BF16)
			continue;
		for (j = 0; j < nm && (int)mats[j]->type != i; j++)
			;
		cut = *mats[j];
		cut.rows = (uint32_t)(400000 / cut.row_bytes) & ~15u;
		if (cut.rows < 16)
			cut.rows = 16;
		if (cut.rows > mats[j]->rows)
			cut.rows = mats[j]->rows;
		printf("type %d, %u x %u (%.0f KB): %.1f GB/s", i, cut.rows, cut.cols,
		       mat_bytes(&cut) / 1e3, repeated(k, &cut, &a));
		if (mats[j]->rows >= 16) {
			cut.rows = 16;
			printf("; 16 rows (%.1f KB): %.1f GB/s", mat_bytes(&cut) / 1e3,
			       repeated(k, &cut, &a));
		}
		printf("\n");
	}
	kve_model_free(m);
	return 0;
}
