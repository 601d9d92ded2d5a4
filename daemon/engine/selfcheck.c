// SPDX-License-Identifier: MIT
/*
 * selfcheck.c - a quick run-time check of a SIMD kernel set against the
 * portable C set, used by kernels.c before it trusts a set that could not
 * be tested where the engine was developed (AVX-512, AVX-VNNI, AVX-512
 * VNNI). Small deterministic random inputs with awkward shapes (row,
 * column and token tails, every tile size), each result compared with
 * the C kernel's within a bound derived from float summation order, and
 * the batch-invariance contract (a token alone == in a batch == in a row
 * slice, bit for bit) checked on the candidate itself. Takes well under
 * a millisecond.
 */
#include "engine_internal.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define SC_T 7		/* tokens: covers 6- and 3-wide tiles and a tail */
#define SC_MAXC 512

static uint64_t sc_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static float sc_rand(uint64_t *s)	/* uniform in [-1, 1) */
{
	return (float)((double)sc_next(s) / 2147483648.0 * 2.0 - 1.0);
}

static void sc_msg(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void sc_msg(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/* |a - b| within n * 4 * eps * s (s: sum of |terms|); NaN fails. */
static int sc_close(float a, float b, double s, int n)
{
	double bound = (double)n * 4 * FLT_EPSILON * s + 1e-30;

	return fabs((double)a - (double)b) <= bound;
}

/* the activations a type multiplies: 0 F32, 1 Q8_0 blocks, 2 Q8_K blocks */
static int sc_act(uint32_t type)
{
	return type == GGML_F32 || type == GGML_F16 || type == GGML_BF16 ? 0 :
	       ggml_blck_size(type) == QK_K ? 2 : 1;
}

static void sc_mm(const struct kve_kernels *k, const struct kve_mat *w,
		  const float *x, const struct kve_q8x *xq, const struct kve_q8k *xk, int T,
		  float *y, int r0, int r1)
{
	switch (w->type) {
	case GGML_F32: k->mm_f32(w, x, T, y, (int)w->rows, r0, r1); break;
	case GGML_F16: k->mm_f16(w, x, T, y, (int)w->rows, r0, r1); break;
	case GGML_BF16: k->mm_bf16(w, x, T, y, (int)w->rows, r0, r1); break;
	case GGML_Q8_0: k->mm_q8(w, xq, T, y, (int)w->rows, r0, r1); break;
	default:
		if (sc_act(w->type) == 2)
			k->mm_qk(w, xk, T, y, (int)w->rows, r0, r1);
		else
			k->mm_q32(w, xq, T, y, (int)w->rows, r0, r1);
		break;
	}
}

static const char *sc_mm_name(uint32_t type)
{
	switch (type) {
	case GGML_F32: return "mm_f32";
	case GGML_F16: return "mm_f16";
	case GGML_BF16: return "mm_bf16";
	case GGML_Q8_0: return "mm_q8";
	case GGML_Q4_K: return "mm_qk (Q4_K)";
	case GGML_Q5_K: return "mm_qk (Q5_K)";
	case GGML_Q6_K: return "mm_qk (Q6_K)";
	case GGML_Q4_0: return "mm_q32 (Q4_0)";
	case GGML_Q4_1: return "mm_q32 (Q4_1)";
	case GGML_Q5_0: return "mm_q32 (Q5_0)";
	case GGML_IQ4_NL: return "mm_q32 (IQ4_NL)";
	case GGML_IQ4_XS: return "mm_qk (IQ4_XS)";
	case GGML_Q2_K: return "mm_qk (Q2_K)";
	case GGML_Q3_K: return "mm_qk (Q3_K)";
	default: return "mm_q32 (Q5_1)";
	}
}

/* a row of a 4- to 6-bit type or BF16: random bytes, the blocks' fp16
 * scales set to small positive values (minima of either sign) */
static void sc_fill_row(uint32_t type, uint8_t *row, int cols, uint64_t *seed)
{
	size_t bb = ggml_blck_bytes(type), n = (size_t)cols / ggml_blck_size(type) * bb, i;
	uint16_t h;

	for (i = 0; i < n; i++)
		row[i] = (uint8_t)sc_next(seed);
	if (type == GGML_BF16) {	/* random values, as bf16 */
		for (i = 0; i < (size_t)cols; i++) {
			float v = sc_rand(seed);
			uint32_t b;

			memcpy(&b, &v, 4);
			h = (uint16_t)(b >> 16);
			memcpy(row + 2 * i, &h, 2);
		}
		return;
	}
	for (i = 0; i < n; i += bb) {
		size_t at = type == GGML_Q6_K ? 208 : type == GGML_Q2_K ? 80 :
			    type == GGML_Q3_K ? 108 : 0;

		h = kve_f32_to_f16(0.002f + 0.01f * (sc_rand(seed) + 1));
		memcpy(row + i + at, &h, 2);
		if (type == GGML_Q4_1 || type == GGML_Q5_1 || type == GGML_Q4_K ||
		    type == GGML_Q5_K || type == GGML_Q2_K) {
			h = kve_f32_to_f16((type == GGML_Q4_1 || type == GGML_Q5_1 ? 0.05f : 0.002f) *
					   sc_rand(seed));
			memcpy(row + i + at + 2, &h, 2);
		}
	}
}

/* One matrix shape of one type. Returns 0 or -1 with why filled. */
static int sc_matrix(const struct kve_kernels *cand, const struct kve_kernels *ref,
		     uint32_t type, int rows, int cols, uint64_t *seed,
		     char *why, size_t len)
{
	size_t row_bytes = (size_t)cols / ggml_blck_size(type) * ggml_blck_bytes(type);
	uint8_t *data = malloc(row_bytes * (size_t)rows + 64);
	float *x = malloc(sizeof(float) * SC_T * SC_MAXC);
	float *xd = malloc(sizeof(float) * SC_T * SC_MAXC);	/* as the kernel sees x */
	float *wrow = malloc(sizeof(float) * SC_MAXC);
	float *yc = malloc(sizeof(float) * SC_T * (size_t)rows);
	float *yr = malloc(sizeof(float) * SC_T * (size_t)rows);
	float *y1 = malloc(sizeof(float) * SC_T * (size_t)rows);
	struct kve_q8x *xq = malloc(sizeof(*xq) * SC_T * (SC_MAXC / QK8_0));
	struct kve_q8k *xk = malloc(sizeof(*xk) * SC_T * (SC_MAXC / QK_K));
	struct kve_mat w = { data, type, (uint32_t)rows, (uint32_t)cols, row_bytes, 0 }, wp, wx;
	const struct kve_mat *wm;
	int pass;
	const char *name = sc_mm_name(type);
	int rc = -1, r, t, c, nb = cols / QK8_0, nbk = cols / QK_K;
	uint8_t *pk = NULL;

	if (!data || !x || !xd || !wrow || !yc || !yr || !y1 || !xq || !xk) {
		sc_msg(why, len, "self-check: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (r = 0; r < rows; r++) {
		uint8_t *row = data + (size_t)r * row_bytes;

		if (type != GGML_F32 && type != GGML_F16 && type != GGML_Q8_0) {
			sc_fill_row(type, row, cols, seed);
			continue;
		}
		for (c = 0; c < cols; c++) {
			float v = sc_rand(seed);

			if (type == GGML_F32) {
				memcpy(row + 4 * (size_t)c, &v, 4);
			} else if (type == GGML_F16) {
				uint16_t h = kve_f32_to_f16(v);
				memcpy(row + 2 * (size_t)c, &h, 2);
			} else {
				uint8_t *b = row + (size_t)(c / QK8_0) * Q8_0_BYTES;
				if (c % QK8_0 == 0) {
					uint16_t h = kve_f32_to_f16(0.004f + 0.01f * (sc_rand(seed) + 1));
					memcpy(b, &h, 2);
				}
				b[2 + c % QK8_0] = (uint8_t)(int8_t)(int)(v * 127.0f);
			}
		}
	}
	for (t = 0; t < SC_T; t++) {
		for (c = 0; c < cols; c++)
			x[t * cols + c] = sc_rand(seed);
		if (sc_act(type) == 1) {
			kve_quantize_q8x(x + t * cols, cols, xq + t * nb);
			for (c = 0; c < cols; c++)
				xd[t * cols + c] = xq[t * nb + c / QK8_0].d *
						   xq[t * nb + c / QK8_0].q[c % QK8_0];
		} else if (sc_act(type) == 2) {
			kve_quantize_q8k(x + t * cols, cols, xk + t * nbk);
			for (c = 0; c < cols; c++)
				xd[t * cols + c] = xk[t * nbk + c / QK_K].d *
						   xk[t * nbk + c / QK_K].q[c % QK_K];
		} else {
			memcpy(xd + t * cols, x + t * cols, sizeof(float) * cols);
		}
	}

	sc_mm(ref, &w, x, xq, xk, SC_T, yr, 0, rows);
	/* pass 0: row-major (then packed in panels); pass 1: the set's own
	 * 16-row layouts (Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K x16; engine_internal.h) */
	for (pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			if (rows % KVE_PANEL_Q4X16 ||
			    !((cand->q4_0_x16 && (type == GGML_Q4_0 || type == GGML_IQ4_NL)) ||
			      (cand->q8_x16 && type == GGML_Q8_0) ||
			      (cand->qk_x16 && ggml_blck_size(type) == QK_K)))
				break;
			free(pk);
			wx = w;
			wx.data = pk = malloc(row_bytes * (size_t)rows + 64);
			if (pk)
				memcpy(pk, data, row_bytes * (size_t)rows);
			if (!pk || kve_mat_pack_for(&wx, cand) < 0) {
				sc_msg(why, len, "self-check: out of memory");
				rc = -ENOMEM;
				goto out;
			}
			name = type == GGML_Q4_0 ? "mm_q32 (Q4_0 in 16-row panels)" :
			       type == GGML_IQ4_NL ? "mm_q32 (IQ4_NL in 16-row panels)" :
			       type == GGML_Q8_0 ? "mm_q8 (Q8_0 in 16-row panels)" :
			       type == GGML_Q4_K ? "mm_qk (Q4_K in 16-row panels)" :
			       type == GGML_Q5_K ? "mm_qk (Q5_K in 16-row panels)" :
			       type == GGML_IQ4_XS ? "mm_qk (IQ4_XS in 16-row panels)" :
			       type == GGML_Q2_K ? "mm_qk (Q2_K in 16-row panels)" :
			       type == GGML_Q3_K ? "mm_qk (Q3_K in 16-row panels)" :
			       "mm_qk (Q6_K in 16-row panels)";
		}
		wm = pass ? &wx : &w;
		sc_mm(cand, wm, x, xq, xk, SC_T, yc, 0, rows);

		for (r = 0; r < rows; r++) {
			kve_mat_row_f32(&w, (uint32_t)r, wrow);
			for (t = 0; t < SC_T; t++) {
				double s = 0;

				for (c = 0; c < cols; c++)
					s += fabs((double)wrow[c] * xd[t * cols + c]);
				if (!sc_close(yc[t * rows + r], yr[t * rows + r], s, cols)) {
					sc_msg(why, len, "%s [%d x %d] x %d tokens: row %d token %d gives %.9g, "
					       "portable C %.9g (bound %.3g)", name, rows, cols, SC_T, r, t,
					       (double)yc[t * rows + r], (double)yr[t * rows + r],
					       (double)cols * 4 * FLT_EPSILON * s);
					goto out;
				}
			}
		}
		/* batch invariance: each token alone, then row slices of 5 */
		for (t = 0; t < SC_T; t++) {
			sc_mm(cand, wm, x + t * cols, xq + t * nb, xk + t * nbk, 1, y1, 0, rows);
			if (memcmp(y1, yc + t * rows, sizeof(float) * rows)) {
				sc_msg(why, len, "%s [%d x %d]: token %d alone differs from the same token "
				       "in a batch of %d", name, rows, cols, t, SC_T);
				goto out;
			}
		}
		memset(y1, 0, sizeof(float) * SC_T * rows);
		for (r = 0; r < rows; r += 5)
			sc_mm(cand, wm, x, xq, xk, SC_T, y1, r, r + 5 < rows ? r + 5 : rows);
		if (memcmp(y1, yc, sizeof(float) * SC_T * rows)) {
			sc_msg(why, len, "%s [%d x %d]: rows computed in slices of 5 differ from one pass",
			       name, rows, cols);
			goto out;
		}
		if (pass)
			continue;
		/* packed in panels, as loaded models are: the same bits */
		wp = w;
		wp.data = pk = malloc(row_bytes * (size_t)rows + 64);
		if (pk)
			memcpy(pk, data, row_bytes * (size_t)rows);
		c = pk ? kve_mat_pack(&wp) : -1;
		if (c < 0) {
			sc_msg(why, len, "self-check: out of memory");
			rc = -ENOMEM;
			goto out;
		}
		if (c == 0) {
			sc_mm(cand, &wp, x, xq, xk, SC_T, y1, 0, rows);
			if (memcmp(y1, yc, sizeof(float) * SC_T * rows)) {
				sc_msg(why, len, "%s [%d x %d]: packed in panels differs from row-major",
				       name, rows, cols);
				goto out;
			}
		}
	}
	rc = 0;
out:
	free(pk);
	free(data);
	free(x);
	free(xd);
	free(wrow);
	free(yc);
	free(yr);
	free(y1);
	free(xq);
	free(xk);
	return rc;
}

static int sc_attention(const struct kve_kernels *cand, const struct kve_kernels *ref,
			uint64_t *seed, char *why, size_t len)
{
	static const int ns[] = { 12, 64, 70, 128 };
	float a[128], b[128], y[128], yr[128], b16f[128];
	uint16_t h[128];
	unsigned i;
	int n, j;

	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		double s = 0, s16 = 0;
		float alpha = sc_rand(seed);

		n = ns[i];
		for (j = 0; j < n; j++) {
			a[j] = sc_rand(seed);
			b[j] = sc_rand(seed);
			h[j] = kve_f32_to_f16(sc_rand(seed));
			b16f[j] = kve_f16_to_f32(h[j]);
			s += fabs((double)a[j] * b[j]);
			s16 += fabs((double)a[j] * b16f[j]);
		}
		if (!sc_close(cand->dot_f32(a, b, n), ref->dot_f32(a, b, n), s, n)) {
			sc_msg(why, len, "dot_f32 over %d values: %.9g, portable C %.9g", n,
			       (double)cand->dot_f32(a, b, n), (double)ref->dot_f32(a, b, n));
			return -1;
		}
		if (!sc_close(cand->dot_f16(a, h, n), ref->dot_f16(a, h, n), s16, n)) {
			sc_msg(why, len, "dot_f16 over %d values: %.9g, portable C %.9g", n,
			       (double)cand->dot_f16(a, h, n), (double)ref->dot_f16(a, h, n));
			return -1;
		}
		for (int f16 = 0; f16 < 2; f16++) {
			memcpy(y, a, sizeof(float) * n);
			memcpy(yr, a, sizeof(float) * n);
			if (f16) {
				cand->axpy_f16(y, alpha, h, n);
				ref->axpy_f16(yr, alpha, h, n);
			} else {
				cand->axpy_f32(y, alpha, b, n);
				ref->axpy_f32(yr, alpha, b, n);
			}
			for (j = 0; j < n; j++) {
				double t = fabs((double)a[j]) +
					   fabs((double)alpha * (f16 ? b16f[j] : b[j]));
				if (!sc_close(y[j], yr[j], t, 2)) {	/* FMA vs mul+add */
					sc_msg(why, len, "%s over %d values: element %d is %.9g, "
					       "portable C %.9g", f16 ? "axpy_f16" : "axpy_f32", n, j,
					       (double)y[j], (double)yr[j]);
					return -1;
				}
			}
		}
	}
	return 0;
}

/* The Q8_K quantiser too, bit for bit: the 256 values given (the last
 * block's extremes: NaN, infinities, zeros) and a block whose largest
 * magnitude comes first negative, then positive (the first one's sign
 * is the scale's) */
static int sc_convert_k(const struct kve_kernels *cand, const struct kve_kernels *ref,
			const float *x, char *why, size_t len)
{
	static struct kve_q8k ka[3], kb[3];
	static float xk[3 * QK_K];
	int b, i;

	memcpy(xk, x, sizeof(float) * QK_K);
	for (i = 0; i < QK_K; i++)
		xk[QK_K + i] = (float)((i * 37) % 101 - 50) / 7.0f;
	xk[QK_K + 9] = -20.0f;
	xk[QK_K + 200] = 20.0f;
	memset(xk + 2 * QK_K, 0, sizeof(float) * QK_K);	/* a zero block */
	memset(ka, 0x55, sizeof(ka));
	memset(kb, 0x55, sizeof(kb));
	cand->quantize_q8k(xk, 3 * QK_K, ka);
	ref->quantize_q8k(xk, 3 * QK_K, kb);
	for (b = 0; b < 3; b++) {
		if (memcmp(&ka[b].d, &kb[b].d, sizeof(float)) || memcmp(ka[b].q, kb[b].q, QK_K) ||
		    memcmp(ka[b].bsums, kb[b].bsums, sizeof(ka[b].bsums))) {
			sc_msg(why, len, "quantize_q8k: block %d differs from the portable "
			       "quantiser (d %.9g vs %.9g)", b, (double)ka[b].d, (double)kb[b].d);
			return -1;
		}
	}
	return 0;
}

/* The quantiser must match bit for bit (it is shared by contract), fp16
 * stores too except for NaN payloads (a NaN must still be a NaN). Inputs include the edge cases: NaN,
 * infinities, an all-zero block, values that land on half steps. */
static int sc_convert(const struct kve_kernels *cand, const struct kve_kernels *ref,
		      uint64_t *seed, char *why, size_t len)
{
	float x[8 * QK8_0];
	struct kve_q8x qa[8], qb[8];
	uint16_t ha[8 * QK8_0], hb[8 * QK8_0];
	int i, b;

	for (i = 0; i < 8 * QK8_0; i++)
		x[i] = sc_rand(seed) * (i < 5 * QK8_0 ? 1.0f : 70000.0f);
	for (i = QK8_0; i < 2 * QK8_0; i++)
		x[i] = 0.0f;
	x[2 * QK8_0] = NAN;
	x[3 * QK8_0 + 1] = INFINITY;
	x[3 * QK8_0 + 2] = -INFINITY;
	x[4 * QK8_0] = 254.0f;		/* d = 2: odd values land on halves */
	x[4 * QK8_0 + 1] = -5.0f;	/* -2.5 -> -2 */
	x[4 * QK8_0 + 2] = 253.0f;	/* 126.5 -> 126 */
	x[4 * QK8_0 + 3] = 1.0f;	/* 0.5 -> 0 */
	x[4 * QK8_0 + 4] = 3.0f;	/* 1.5 -> 2 */
	x[5 * QK8_0 + 3] = 6e-8f;	/* fp16 subnormal range */
	x[5 * QK8_0 + 4] = 65520.0f;	/* rounds to fp16 inf */
	memset(qa, 0x55, sizeof(qa));
	memset(qb, 0x55, sizeof(qb));
	cand->quantize_q8x(x, 8 * QK8_0, qa);
	ref->quantize_q8x(x, 8 * QK8_0, qb);
	for (b = 0; b < 8; b++) {
		if (memcmp(&qa[b].d, &qb[b].d, sizeof(float)) ||
		    memcmp(qa[b].q, qb[b].q, QK8_0) || qa[b].sum != qb[b].sum ||
		    memcmp(&qa[b].s, &qb[b].s, sizeof(float))) {
			sc_msg(why, len, "quantize_q8x: block %d differs from the portable "
			       "quantiser (d %.9g vs %.9g, sum %d vs %d, s %.9g vs %.9g)", b,
			       (double)qa[b].d, (double)qb[b].d, qa[b].sum, qb[b].sum,
			       (double)qa[b].s, (double)qb[b].s);
			return -1;
		}
	}
	if (sc_convert_k(cand, ref, x, why, len))
		return -1;
	cand->f32_to_f16(ha, x, 8 * QK8_0 - 3);
	ref->f32_to_f16(hb, x, 8 * QK8_0 - 3);
	for (i = 0; i < 8 * QK8_0 - 3; i++) {
		/* NaN payloads may differ; a NaN must stay a NaN */
		if (x[i] != x[i] ? (ha[i] & 0x7c00) != 0x7c00 || !(ha[i] & 0x3ff) :
		    ha[i] != hb[i]) {
			sc_msg(why, len, "f32_to_f16: %.9g gives 0x%04x, portable 0x%04x",
			       (double)x[i], ha[i], hb[i]);
			return -1;
		}
	}
	return 0;
}

/* SwiGLU: each element within 4e-6 relative of the portable one (the
 * SIMD exp is its own approximation), NaN where it is NaN. */
static int sc_silu(const struct kve_kernels *cand, const struct kve_kernels *ref,
		   uint64_t *seed, char *why, size_t len)
{
	float g[77], u[77], ga[77], gb[77];
	int i;

	for (i = 0; i < 77; i++) {
		g[i] = sc_rand(seed) * 24.0f;
		u[i] = sc_rand(seed) * 3.0f;
	}
	g[3] = -100.0f;
	g[4] = 100.0f;
	g[5] = 0.0f;
	g[6] = NAN;
	g[7] = -1e-30f;
	memcpy(ga, g, sizeof(g));
	memcpy(gb, g, sizeof(g));
	cand->silu_mul(ga, u, 77);
	ref->silu_mul(gb, u, 77);
	for (i = 0; i < 77; i++) {
		if (gb[i] != gb[i] ? ga[i] == ga[i] :
		    !(fabs((double)ga[i] - gb[i]) <= 4e-6 * fabs((double)gb[i]) + 1e-35)) {
			sc_msg(why, len, "silu_mul: silu(%.9g) * %.9g gives %.9g, portable C %.9g",
			       (double)g[i], (double)u[i], (double)ga[i], (double)gb[i]);
			return -1;
		}
	}
	return 0;
}

/* Block attention for three query heads at once (rows and score arrays
 * apart, as the engine passes them): scores and value sums within the
 * summation-order bound of the portable kernels, softmax within 4e-6
 * relative. */
static int sc_block_attn(const struct kve_kernels *cand, const struct kve_kernels *ref,
			 uint64_t *seed, char *why, size_t len)
{
	enum { N = 19, HD = 72, NH = 3, SS = N + 2 };
	static float q[NH * HD], kf[N * HD], sa[NH * SS], sb[NH * SS], oa[NH * HD], ob[NH * HD];
	static float mag[NH * HD];
	static uint16_t kh[N * HD];
	float suma, sumb;
	int f16, h, i, j;

	for (i = 0; i < NH * HD; i++)
		q[i] = sc_rand(seed);
	for (i = 0; i < N * HD; i++) {
		kf[i] = sc_rand(seed);
		kh[i] = kve_f32_to_f16(sc_rand(seed));
	}
	for (f16 = 0; f16 < 2; f16++) {
		const void *k = f16 ? (const void *)kh : (const void *)kf;

		cand->attn_scores(q, NH, k, f16, N, HD, 0.125f, sa, SS);
		ref->attn_scores(q, NH, k, f16, N, HD, 0.125f, sb, SS);
		for (h = 0; h < NH; h++) {
			for (j = 0; j < N; j++) {
				double s = 0;

				for (i = 0; i < HD; i++)
					s += fabs((double)q[h * HD + i] *
						  (f16 ? kve_f16_to_f32(kh[j * HD + i]) :
						   kf[j * HD + i])) * 0.125;
				if (!sc_close(sa[h * SS + j], sb[h * SS + j], s, HD)) {
					sc_msg(why, len, "attn_scores (%s K, head_dim %d, head %d of %d): "
					       "row %d gives %.9g, portable C %.9g",
					       f16 ? "fp16" : "fp32", HD, h, NH, j,
					       (double)sa[h * SS + j], (double)sb[h * SS + j]);
					return -1;
				}
			}
		}
		suma = cand->softmax_exp(sa, N, 0.5f);
		sumb = ref->softmax_exp(sb, N, 0.5f);
		for (j = 0; j < N; j++) {
			if (!(fabs((double)sa[j] - sb[j]) <= 4e-6 * sb[j])) {
				sc_msg(why, len, "softmax_exp: element %d gives %.9g, portable C %.9g",
				       j, (double)sa[j], (double)sb[j]);
				return -1;
			}
		}
		if (!(fabs((double)suma - sumb) <= 4e-6 * sumb)) {
			sc_msg(why, len, "softmax_exp: sum %.9g, portable C %.9g", (double)suma,
			       (double)sumb);
			return -1;
		}
		for (i = 0; i < NH * HD; i++) {
			oa[i] = ob[i] = sc_rand(seed);
			mag[i] = fabsf(oa[i]);
		}
		cand->attn_values(oa, NH, sb, SS, k, f16, N, HD);
		ref->attn_values(ob, NH, sb, SS, k, f16, N, HD);
		for (h = 0; h < NH; h++) {
			for (i = 0; i < HD; i++) {
				for (j = 0; j < N; j++)
					mag[h * HD + i] +=
						fabsf(sb[h * SS + j] *
						      (f16 ? kve_f16_to_f32(kh[j * HD + i]) :
						       kf[j * HD + i]));
				if (!sc_close(oa[h * HD + i], ob[h * HD + i], mag[h * HD + i], 2 * N)) {
					sc_msg(why, len, "attn_values (%s V, %d rows, head %d of %d): "
					       "element %d gives %.9g, portable C %.9g",
					       f16 ? "fp16" : "fp32", N, h, NH, i,
					       (double)oa[h * HD + i], (double)ob[h * HD + i]);
					return -1;
				}
			}
		}
	}
	return 0;
}

/* Block attention over a Q8_0 KV slab (24 rows, 19 read, three query
 * heads) at head dimensions 64, 96 and 128: scores bit for bit the
 * portable C kernel's (the contract: exact integer dots, the same float
 * steps), value sums within the summation bound */
static int sc_block_attn_q8(const struct kve_kernels *cand, const struct kve_kernels *ref,
			    uint64_t *seed, char *why, size_t len)
{
	enum { BT = 24, N = 19, NH = 3, SS = N + 2, HDMAX = 128 };
	static const int hds[] = { 64, 96, 128 };
	static uint8_t slab[BT * (HDMAX / 16 + HDMAX)];
	static struct kve_q8x q[NH * HDMAX / QK8_0];
	static float qf[NH * HDMAX], sa[NH * SS], sb[NH * SS], oa[NH * HDMAX], ob[NH * HDMAX];
	static float mag[NH * HDMAX];
	unsigned t;
	int h, i, j;

	for (t = 0; t < sizeof(hds) / sizeof(hds[0]); t++) {
		int hd = hds[t], nb = hd / QK8_0;
		int8_t *quants = (int8_t *)slab + (size_t)BT * (hd / 16);

		for (i = 0; i < BT * nb; i++) {
			/* scales of both signs, one row's zero */
			uint16_t d = kve_f32_to_f16(i / nb == 5 ? 0.0f : sc_rand(seed) * 0.05f);

			memcpy(slab + (size_t)i * 2, &d, 2);
		}
		/* -127..127 as K holds them (offset by 128; V reads the same
		 * bytes as they are), both ends included */
		for (i = 0; i < BT * hd; i++)
			quants[i] = (int8_t)((i % 97 == 0 ? 127 : i % 89 == 0 ? -127 :
					      (int)(sc_rand(seed) * 127.0f)) ^ 0x80);
		for (i = 0; i < NH * hd; i++)
			qf[i] = sc_rand(seed) * (i % 7 ? 1.0f : 3.0f);
		ref->quantize_q8x(qf, NH * hd, q);
		cand->attn_scores_q8(q, NH, slab, BT, N, hd, 0.125f, sa, SS);
		ref->attn_scores_q8(q, NH, slab, BT, N, hd, 0.125f, sb, SS);
		for (h = 0; h < NH; h++) {
			for (j = 0; j < N; j++) {
				if (memcmp(&sa[h * SS + j], &sb[h * SS + j], sizeof(float))) {
					sc_msg(why, len, "attn_scores_q8 (head_dim %d, head %d of %d): "
					       "row %d gives %.9g, portable C %.9g", hd, h, NH, j,
					       (double)sa[h * SS + j], (double)sb[h * SS + j]);
					return -1;
				}
			}
		}
		for (i = 0; i < NH * hd; i++) {
			oa[i] = ob[i] = sc_rand(seed);
			mag[i] = fabsf(oa[i]);
		}
		for (i = 0; i < NH * SS; i++)
			sb[i] = fabsf(sc_rand(seed));
		cand->attn_values_q8(oa, NH, sb, SS, slab, BT, N, hd);
		ref->attn_values_q8(ob, NH, sb, SS, slab, BT, N, hd);
		for (h = 0; h < NH; h++) {
			for (i = 0; i < hd; i++) {
				for (j = 0; j < N; j++) {
					uint16_t d;

					memcpy(&d, slab + ((size_t)j * nb + i / QK8_0) * 2, 2);
					mag[h * hd + i] += fabsf(sb[h * SS + j] * kve_f16_to_f32(d) *
								 (float)quants[j * hd + i]);
				}
				if (!sc_close(oa[h * hd + i], ob[h * hd + i], mag[h * hd + i], 2 * N)) {
					sc_msg(why, len, "attn_values_q8 (head_dim %d, %d rows, head %d "
					       "of %d): element %d gives %.9g, portable C %.9g", hd, N,
					       h, NH, i, (double)oa[h * hd + i], (double)ob[h * hd + i]);
					return -1;
				}
			}
		}
	}
	return 0;
}

/* The Q8_0 KV's rotation over three pieces of 64, then two of 128 and
 * one of 256: bit for bit the portable one's (the same sums) */
static int sc_hadamard(const struct kve_kernels *cand, const struct kve_kernels *ref,
		       uint64_t *seed, char *why, size_t len)
{
	static const int ns[] = { 64, 128, 256 };
	static float a[256 * 3], b[256 * 3];
	unsigned t;
	int i;

	for (t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		int n = ns[t], l = n == 64 ? 192 : 256;

		for (i = 0; i < l; i++)
			a[i] = b[i] = sc_rand(seed) * (i % 13 ? 1.0f : 40.0f);
		cand->hadamard(a, l, n);
		ref->hadamard(b, l, n);
		for (i = 0; i < l; i++) {
			if (memcmp(&a[i], &b[i], sizeof(float))) {
				sc_msg(why, len, "hadamard (%d values, pieces of %d): element %d gives "
				       "%.9g, portable C %.9g", l, n, i, (double)a[i], (double)b[i]);
				return -1;
			}
		}
	}
	return 0;
}

/* RMSNorm: within 1e-5 relative (summation order of the squares) */
static int sc_rmsnorm(const struct kve_kernels *cand, const struct kve_kernels *ref,
		      uint64_t *seed, char *why, size_t len)
{
	float x[75], w[75], a[75], b[75];
	int i;

	for (i = 0; i < 75; i++) {
		x[i] = sc_rand(seed) * 3.0f;
		w[i] = 1.0f + 0.1f * sc_rand(seed);
	}
	cand->rmsnorm(a, x, w, 75, 1e-5f);
	ref->rmsnorm(b, x, w, 75, 1e-5f);
	for (i = 0; i < 75; i++) {
		if (!(fabs((double)a[i] - b[i]) <= 1e-5 * fabs((double)b[i]) + 1e-30)) {
			sc_msg(why, len, "rmsnorm over 75 values: element %d gives %.9g, "
			       "portable C %.9g", i, (double)a[i], (double)b[i]);
			return -1;
		}
	}
	return 0;
}

int kve_kernels_selfcheck(const struct kve_kernels *cand,
			  const struct kve_kernels *ref, char *why, size_t len)
{
	/* the last shape only for the types after Q8_0 (the first three's
	 * random inputs stay what they were); { 32, 256 } only for the
	 * K-quants (two 16-row panels) */
	static const int shapes[][2] = { { 13, 44 }, { 9, 96 }, { 5, 256 }, { 4, 64 },
					 { 16, 72 }, { 8, 96 }, { 12, 512 }, { 32, 96 },
					 { 32, 256 } };
	static const uint32_t types[] = { GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16,
					  GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1,
					  GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_IQ4_NL,
					  GGML_IQ4_XS, GGML_Q2_K, GGML_Q3_K };
	uint64_t seed = 0x6b76652d73656c66ull;	/* fixed: the check is reproducible */
	unsigned ti, si;
	int rc;

	sc_msg(why, len, "%s", "");
	if (!cand->mm_f32 || !cand->mm_f16 || !cand->mm_q8 || !cand->mm_bf16 ||
	    !cand->mm_q32 || !cand->mm_qk || !cand->dot_f32 || !cand->quantize_q8k ||
	    !cand->dot_f16 || !cand->axpy_f32 || !cand->axpy_f16 || !cand->quantize_q8x ||
	    !cand->f32_to_f16 || !cand->silu_mul || !cand->attn_scores ||
	    !cand->softmax_exp || !cand->attn_values || !cand->attn_scores_q8 ||
	    !cand->attn_values_q8 || !cand->hadamard || !cand->rmsnorm) {
		sc_msg(why, len, "a kernel of the %s set is missing", cand->name);
		return -1;
	}
	for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
			if (shapes[si][1] % ggml_blck_size(types[ti]) ||
			    (ti < 3 && si == 6) ||
			    (si == 8 && ggml_blck_size(types[ti]) != QK_K) ||
			    (types[ti] == GGML_BF16 && shapes[si][1] % 8))
				continue;
			rc = sc_matrix(cand, ref, types[ti], shapes[si][0], shapes[si][1], &seed,
				       why, len);
			if (rc)
				return rc;
		}
	}
	if (sc_attention(cand, ref, &seed, why, len))
		return -1;
	if (sc_convert(cand, ref, &seed, why, len) || sc_silu(cand, ref, &seed, why, len))
		return -1;
	if (sc_block_attn(cand, ref, &seed, why, len) ||
	    sc_block_attn_q8(cand, ref, &seed, why, len) ||
	    sc_hadamard(cand, ref, &seed, why, len))
		return -1;
	return sc_rmsnorm(cand, ref, &seed, why, len);
}
