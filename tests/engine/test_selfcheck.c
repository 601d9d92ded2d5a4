// SPDX-License-Identifier: MIT
/*
 * test_selfcheck.c - what the kernels' run-time self-check (selfcheck.c)
 * covers, fault by fault. Each candidate set is the portable C set with
 * one narrow fault: wrong in one row, one token, one call shape, one
 * element, one block or one input class only, and right everywhere else.
 * The self-check must refuse every one of them, naming the kernel (and
 * the part of the check that saw it); a set that differs from C only
 * where the kernels' contracts allow (NaN payloads, Q8_0 asked only for
 * whole blocks) must pass. A check that stops looking at a row, a token,
 * a shape or an element lets its fault through here.
 */
#include <float.h>
#include <math.h>

#include "engine_internal.h"
#include "tcheck.h"

static const struct kve_kernels *C = &kve_kernels_c;

/* the fault under test; its parameters; which call of a kernel it hits */
enum fault {
	F_NONE,
	/* matrix products (f_kind: which of the three) */
	F_ROW0, F_ROW_LAST, F_TOKEN0, F_TOKEN_LAST, F_ALONE0, F_ALONE_LAST, F_SLICE,
	F_PACKED, F_SHAPE_FIRST, F_SHAPE_LAST, F_Q8_PARTIAL_NAN,
	/* vectors: wrong where n == f_n, in element f_i (-1: the last) */
	F_DOT_F32, F_DOT_F16, F_DOT_F32_NEAR, F_DOT_F16_NEAR, F_AXPY_F32, F_AXPY_F16,
	F_AXPY_OFF,
	/* the Q8_K quantiser (f_i: which block) */
	F_QUANTK_Q, F_QUANTK_D, F_QUANTK_BSUM, F_QUANTK_SIGN,
	/* the quantiser and f32_to_f16 (f_i: which block, where it says) */
	F_QUANT_Q, F_QUANT_D, F_QUANT_LARGE, F_QUANT_ZERO, F_QUANT_HALF_TOP, F_QUANT_HALF_NEG,
	F_QUANT_HALF_FIRST, F_QUANT_HALF_TRUNC,
	F_F16_ELEM, F_F16_SUBNORMAL, F_F16_NAN_INF, F_F16_NAN_PAYLOAD, F_F16_POS_INF,
	F_F16_NEG_INF, F_F16_OVERFLOW_EDGE,
	F_SILU, F_SCORES, F_SCORES_STRIDE4, F_SOFTMAX, F_SOFTMAX_SUM, F_SOFTMAX_SECOND, F_VALUES, F_VALUES_ROW0,
	F_RMSNORM, F_SCORES_Q8_ULP, F_SCORES_Q8_HD, F_VALUES_Q8, F_HADAMARD,
};

static enum fault f;
static int f_kind, f_n, f_i, f_f16, f_calls;
static double f_factor;		/* F_AXPY_OFF: how many of the check's bounds off */
static const char *f_x0;	/* the last batch's activations: a token's identity */
static int f_T;			/* that batch's token count */

static void nudge(float *o)	/* off by one ulp: only a bit-for-bit check sees it */
{
	*o = nextafterf(*o, INFINITY);
}

/* how the matrix fault hits output (row r, token id) of this call:
 * 0 not at all, 1 far off, 2 one ulp off, 3 NaN */
static int mm_hit(const struct kve_mat *w, int T, long id, int r, int r0)
{
	switch (f) {
	case F_ROW0: return r == 0;
	case F_ROW_LAST: return r == (int)w->rows - 1;
	case F_TOKEN0: return id == 0;
	case F_TOKEN_LAST: return id == f_T - 1;
	case F_ALONE0: return T == 1 && id == 0 ? 2 : 0;
	case F_ALONE_LAST: return T == 1 && id == f_T - 1 ? 2 : 0;
	case F_SLICE: return r0 > 0 ? 2 : 0;
	case F_PACKED: return w->panel ? 2 : 0;
	case F_SHAPE_FIRST: return (int)w->rows == f_n;
	case F_SHAPE_LAST: return (int)w->rows == f_n && (int)w->cols == f_i;
	case F_Q8_PARTIAL_NAN: return w->cols % QK8_0 ? 3 : 0;
	default: return 0;
	}
}

/* after a correct product: apply the matrix fault for this call */
static void mm_fault(int kind, const struct kve_mat *w, const void *x, size_t tok_bytes,
		     int T, float *y, int ldy, int r0, int r1)
{
	int t, r;

	if (kind != f_kind)
		return;
	if (T > 1) {
		f_x0 = x;
		f_T = T;
	}
	for (t = 0; t < T; t++) {
		long id = (long)(((const char *)x - f_x0) / (long)tok_bytes) + t;

		for (r = r0; r < r1; r++) {
			float *o = &y[(size_t)t * ldy + r];
			int h = mm_hit(w, T, id, r, r0);

			if (h == 1)
				*o += 0.5f;
			else if (h == 2)
				nudge(o);
			else if (h == 3)
				*o = NAN;
		}
	}
}

static void f_mm_f32(const struct kve_mat *w, const float *x, int T, float *y, int ldy,
		     int r0, int r1)
{
	C->mm_f32(w, x, T, y, ldy, r0, r1);
	mm_fault(0, w, x, sizeof(float) * w->cols, T, y, ldy, r0, r1);
}

static void f_mm_f16(const struct kve_mat *w, const float *x, int T, float *y, int ldy,
		     int r0, int r1)
{
	C->mm_f16(w, x, T, y, ldy, r0, r1);
	mm_fault(1, w, x, sizeof(float) * w->cols, T, y, ldy, r0, r1);
}

static void f_mm_q8(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
		    int ldy, int r0, int r1)
{
	C->mm_q8(w, xq, T, y, ldy, r0, r1);
	mm_fault(2, w, xq, sizeof(*xq) * (w->cols / QK8_0 ? w->cols / QK8_0 : 1), T, y, ldy,
		 r0, r1);
}

static void f_mm_bf16(const struct kve_mat *w, const float *x, int T, float *y, int ldy,
		      int r0, int r1)
{
	C->mm_bf16(w, x, T, y, ldy, r0, r1);
	mm_fault(3, w, x, sizeof(float) * w->cols, T, y, ldy, r0, r1);
}

static void f_mm_q32(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
		     int ldy, int r0, int r1)
{
	C->mm_q32(w, xq, T, y, ldy, r0, r1);
	mm_fault(4, w, xq, sizeof(*xq) * (w->cols / 32), T, y, ldy, r0, r1);
}

static void f_mm_qk(const struct kve_mat *w, const struct kve_q8k *xk, int T, float *y,
		    int ldy, int r0, int r1)
{
	C->mm_qk(w, xk, T, y, ldy, r0, r1);
	mm_fault(5, w, xk, sizeof(*xk) * (w->cols / QK_K), T, y, ldy, r0, r1);
}

/* the Q8_K quantiser with one fault in block f_i */
static void f_quantize_k(const float *x, int n, struct kve_q8k *out)
{
	C->quantize_q8k(x, n, out);
	if (f_i >= n / QK_K)
		return;
	switch (f) {
	case F_QUANTK_Q:
		out[f_i].q[17] = (int8_t)(out[f_i].q[17] == 127 ? 126 : out[f_i].q[17] + 1);
		break;
	case F_QUANTK_D: {
		uint32_t b;

		memcpy(&b, &out[f_i].d, 4);
		b ^= 1;
		memcpy(&out[f_i].d, &b, 4);
		break;
	}
	case F_QUANTK_BSUM:
		out[f_i].bsums[15]++;
		break;
	case F_QUANTK_SIGN: {	/* the scale's sign from the last largest value */
		int j, last = 0;
		float amax = 0;

		for (j = 0; j < QK_K; j++)
			if (fabsf(x[f_i * QK_K + j]) >= amax && x[f_i * QK_K + j] == x[f_i * QK_K + j]) {
				amax = fabsf(x[f_i * QK_K + j]);
				last = j;
			}
		if (amax > 0 && (x[f_i * QK_K + last] > 0) != (out[f_i].d < 0)) {
			out[f_i].d = -out[f_i].d;
			for (j = 0; j < QK_K; j++)
				out[f_i].q[j] = (int8_t)-out[f_i].q[j];
			for (j = 0; j < QK_K / 16; j++)
				out[f_i].bsums[j] = (int16_t)-out[f_i].bsums[j];
		}
		break;
	}
	default:
		break;
	}
}

static int elem(int n)
{
	return f_i < 0 ? n - 1 : f_i;
}

/* 95% of the error the check allows a dot over n values (n * 4 ulps of
 * the sum of the terms' magnitudes): a set that far off is still right */
static float near_bound(const float *a, const float *b, const uint16_t *h, int n)
{
	double s = 0;
	int i;

	for (i = 0; i < n; i++)
		s += fabs((double)a[i] * (h ? kve_f16_to_f32(h[i]) : b[i]));
	return (float)(0.95 * n * 4 * FLT_EPSILON * s);
}

static float f_dot_f32(const float *a, const float *b, int n)
{
	float d = C->dot_f32(a, b, n);

	if (f == F_DOT_F32_NEAR && n == f_n)
		return d + near_bound(a, b, NULL, n);
	return d + (f == F_DOT_F32 && n == f_n ? 0.5f : 0.0f);
}

static float f_dot_f16(const float *a, const uint16_t *b, int n)
{
	float d = C->dot_f16(a, b, n);

	if (f == F_DOT_F16_NEAR && n == f_n)
		return d + near_bound(a, NULL, b, n);
	return d + (f == F_DOT_F16 && n == f_n ? 0.5f : 0.0f);
}

/* F_AXPY_OFF: every element off by f_factor times the check's bound for
 * it (2 x 4 ulps of |y| + |a x|, for FMA against a multiply and an add) */
static void axpy_off(float *y, const float *y0, float a, const float *x, const uint16_t *h,
		     int n)
{
	int j;

	for (j = 0; j < n; j++) {
		double t = fabs((double)y0[j]) + fabs((double)a * (h ? kve_f16_to_f32(h[j]) : x[j]));

		y[j] = (float)(y[j] + f_factor * 2 * 4 * FLT_EPSILON * t);
	}
}

static void f_axpy_f32(float *y, float a, const float *x, int n)
{
	float y0[128];

	memcpy(y0, y, sizeof(float) * (size_t)(n < 128 ? n : 128));
	C->axpy_f32(y, a, x, n);
	if (f == F_AXPY_F32 && n == f_n)
		y[elem(n)] += 0.5f;
	if (f == F_AXPY_OFF && !f_f16 && n <= 128)
		axpy_off(y, y0, a, x, NULL, n);
}

static void f_axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	float y0[128];

	memcpy(y0, y, sizeof(float) * (size_t)(n < 128 ? n : 128));
	C->axpy_f16(y, a, x, n);
	if (f == F_AXPY_F16 && n == f_n)
		y[elem(n)] += 0.5f;
	if (f == F_AXPY_OFF && f_f16 && n <= 128)
		axpy_off(y, y0, a, NULL, x, n);
}

static void f_quantize(const float *x, int n, struct kve_q8x *out)
{
	C->quantize_q8x(x, n, out);
	if (f == F_QUANT_Q && f_i < n / QK8_0)
		out[f_i].q[QK8_0 - 1] ^= 1;
	if (f == F_QUANT_D && f_i < n / QK8_0) {	/* the scale's lowest bit */
		uint32_t b;

		memcpy(&b, &out[f_i].d, 4);
		b ^= 1;
		memcpy(&out[f_i].d, &b, 4);
	}
	if (f == F_QUANT_LARGE) {	/* wrong only where a block's scale is large */
		int b;

		for (b = 0; b < n / QK8_0; b++)
			if (isfinite(out[b].d) && out[b].d > 100.0f)
				out[b].q[0] ^= 1;
	}
	if (f == F_QUANT_ZERO) {	/* a block of zeros' quants from 0 x (1 / 0) */
		int b, i;

		for (b = 0; b < n / QK8_0; b++) {
			for (i = 0; i < QK8_0 && x[b * QK8_0 + i] == 0.0f; i++)
				;
			if (i == QK8_0)
				out[b].q[0] = -128;
		}
	}
	if (f == F_QUANT_HALF_FIRST || f == F_QUANT_HALF_TRUNC) {
		/* 0.5 rounded up to 1; or positive half steps toward zero (1.5
		 * to 1: 0.5 and 126.5 come out right) */
		int i;

		for (i = 0; i < n; i++) {
			float d = out[i / QK8_0].d, v = x[i] / d;

			if (!(d > 0) || !isfinite(d) || v <= 0 || v != floorf(v) + 0.5f)
				continue;
			if (f == F_QUANT_HALF_FIRST && v == 0.5f)
				out[i / QK8_0].q[i % QK8_0] = 1;
			if (f == F_QUANT_HALF_TRUNC)
				out[i / QK8_0].q[i % QK8_0] = (int8_t)floorf(v);
		}
	}
	if (f == F_QUANT_HALF_TOP) {	/* +-126.5 rounded away from zero, not to even */
		int i;

		for (i = 0; i < n; i++) {
			float d = out[i / QK8_0].d;

			if (d > 0 && isfinite(d) && fabsf(x[i]) == 126.5f * d)
				out[i / QK8_0].q[i % QK8_0] = x[i] > 0 ? 127 : -127;
		}
	}
	if (f == F_QUANT_HALF_NEG) {	/* negative half steps rounded down, not to even */
		int i;

		for (i = 0; i < n; i++) {
			float d = out[i / QK8_0].d, v = x[i] / d;

			if (d > 0 && isfinite(d) && v < 0 && v == floorf(v) + 0.5f)
				out[i / QK8_0].q[i % QK8_0] = (int8_t)floorf(v);
		}
	}
}

static void f_to_f16(uint16_t *dst, const float *src, int n)
{
	int i;

	C->f32_to_f16(dst, src, n);
	for (i = 0; i < n; i++) {
		uint16_t e = dst[i] & 0x7c00, m = dst[i] & 0x3ff;

		if (f == F_F16_ELEM && i == elem(n))
			dst[i] ^= 1;
		else if (f == F_F16_SUBNORMAL && !e && m)
			dst[i] ^= 1;
		else if (f == F_F16_NAN_INF && e == 0x7c00 && m)
			dst[i] &= 0xfc00;	/* NaN stored as an infinity */
		else if (f == F_F16_NAN_PAYLOAD && e == 0x7c00 && m)
			dst[i] ^= 0x0001 | (m == 1 ? 0x0200 : 0);	/* another NaN */
		else if (f == F_F16_POS_INF && src[i] == INFINITY)
			dst[i] = 0x7bff;	/* +inf stored as the largest finite */
		else if (f == F_F16_NEG_INF && src[i] == -INFINITY)
			dst[i] = 0x7c00;	/* -inf stored without its sign */
		else if (f == F_F16_OVERFLOW_EDGE && src[i] == 65520.0f)
			dst[i] = 0x7bff;	/* the first value that rounds to inf kept finite */
	}
}

static void f_silu(float *g, const float *u, int n)
{
	C->silu_mul(g, u, n);
	if (f == F_SILU) {
		int i = elem(n);

		g[i] = g[i] != g[i] ? 0.0f : g[i] * 1.001f + 1e-3f;
	}
}

/* the first element of the first head, or the last of the last: the
 * self-check must read every head the call takes */
static size_t head_off(int nh, size_t stride)
{
	return f_i < 0 ? (size_t)(nh - 1) * stride : 0;
}

static void f_scores(const float *q, int nh, const void *k, int f16, int n, int hd, float scale,
		     float *sc, size_t ss)
{
	/* F_SCORES_STRIDE4: rows laid out at the stride rounded down to 4 */
	C->attn_scores(q, nh, k, f16, n, hd, scale, sc,
		       f == F_SCORES_STRIDE4 ? ss & ~(size_t)3 : ss);
	if (f == F_SCORES && f16 == f_f16)
		sc[head_off(nh, ss) + elem(n)] += 0.5f;
}

static float f_softmax(float *sc, int n, float mx)
{
	float sum = C->softmax_exp(sc, n, mx);

	f_calls++;
	if (f == F_SOFTMAX)
		sc[elem(n)] *= 1.01f;
	if (f == F_SOFTMAX_SUM)
		sum *= 1.01f;
	if (f == F_SOFTMAX_SECOND && f_calls == 2)
		sc[0] *= 1.01f;
	return sum;
}

static void f_values(float *out, int nh, const float *p, size_t ps, const void *v, int f16,
		     int n, int hd)
{
	if (f == F_VALUES_ROW0 && n > 1) {	/* row 0 of V left out */
		C->attn_values(out, nh, p + 1, ps, (const char *)v + (size_t)hd * (f16 ? 2 : 4),
			       f16, n - 1, hd);
		return;
	}
	C->attn_values(out, nh, p, ps, v, f16, n, hd);
	if (f == F_VALUES && f16 == f_f16)
		out[head_off(nh, (size_t)hd) + elem(hd)] += 0.5f;
}

/* Q8_0 KV: a score one ulp off (the contract is bit for bit), or wrong
 * only at head dimension 128 (the third the check asks for); a value sum */
static void f_scores_q8(const struct kve_q8x *q, int nh, const uint8_t *k, int bt, int n,
			int hd, float scale, float *sc, size_t ss)
{
	C->attn_scores_q8(q, nh, k, bt, n, hd, scale, sc, ss);
	if (f == F_SCORES_Q8_ULP)
		sc[head_off(nh, ss) + elem(n)] = nextafterf(sc[head_off(nh, ss) + elem(n)],
							    INFINITY);
	if (f == F_SCORES_Q8_HD && hd == 128)
		sc[elem(n)] += 0.01f;
}

static void f_values_q8(float *out, int nh, const float *p, size_t ps, const uint8_t *v, int bt,
			int n, int hd)
{
	C->attn_values_q8(out, nh, p, ps, v, bt, n, hd);
	if (f == F_VALUES_Q8)
		out[head_off(nh, (size_t)hd) + elem(hd)] += 0.01f;
}

/* the rotation one ulp off in one element, at pieces of 128 only */
static void f_hadamard(float *x, int len, int n)
{
	C->hadamard(x, len, n);
	if (f == F_HADAMARD && n == 128)
		x[elem(len)] = nextafterf(x[elem(len)], INFINITY);
}

static void f_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	C->rmsnorm(out, x, w, n, eps);
	if (f == F_RMSNORM)
		out[elem(n)] *= 1.001f;
}

static const struct kve_kernels faulty = {
	.name = "avx512", .mm_f32 = f_mm_f32, .mm_f16 = f_mm_f16, .mm_q8 = f_mm_q8,
	.mm_bf16 = f_mm_bf16, .mm_q32 = f_mm_q32, .mm_qk = f_mm_qk,
	.dot_f32 = f_dot_f32, .dot_f16 = f_dot_f16, .axpy_f32 = f_axpy_f32,
	.axpy_f16 = f_axpy_f16, .quantize_q8x = f_quantize, .quantize_q8k = f_quantize_k,
	.f32_to_f16 = f_to_f16, .silu_mul = f_silu, .attn_scores = f_scores,
	.softmax_exp = f_softmax, .attn_values = f_values, .attn_scores_q8 = f_scores_q8,
	.attn_values_q8 = f_values_q8, .hadamard = f_hadamard, .rmsnorm = f_rmsnorm,
};

/* run the self-check with one fault; want: the start of why, or NULL for
 * a pass; also: a part of why that must appear (which check saw it) */
static void expect(const char *what, enum fault ft, int kind, int n, int i, int f16,
		   const char *want, const char *also)
{
	char why[512];
	int rc;

	f = ft;
	f_kind = kind;
	f_n = n;
	f_i = i;
	f_f16 = f16;
	f_calls = 0;
	f_x0 = NULL;
	f_T = 0;
	rc = kve_kernels_selfcheck(&faulty, C, why, sizeof(why));
	f = F_NONE;
	if (!want)
		CHECK(rc == 0 && !why[0], "self-check passes %s: %s", what, why);
	else
		CHECK(rc == -1 && !strncmp(why, want, strlen(want)) && (!also || strstr(why, also)),
		      "self-check catches %s: %s", what, why);
}

static void matrix_faults(void)
{
	static const char *names[6] = { "mm_f32", "mm_f16", "mm_q8", "mm_bf16", "mm_q32",
					"mm_qk" };
	/* the first shape of each type and the last (selfcheck.c's table;
	 * each type skips those that are not whole blocks; the types after
	 * Q8_0 have one more, 12 x 512) */
	static const int first[6] = { 13, 13, 9, 9, 9, 5 };
	static const int last[6][2] = { { 8, 96 }, { 8, 96 }, { 8, 96 }, { 12, 512 },
					 { 12, 512 }, { 12, 512 } };
	char what[160];
	int k;

	for (k = 0; k < 6; k++) {
#define M(ft, n, i, also, text) do { \
		snprintf(what, sizeof(what), "an %s wrong %s", names[k], text); \
		expect(what, ft, k, n, i, 0, names[k], also); } while (0)
		M(F_ROW0, 0, 0, "gives", "in row 0 of every matrix only");
		M(F_ROW_LAST, 0, 0, "gives", "in the last row of every matrix only");
		M(F_TOKEN0, 0, 0, "gives", "for the batch's first token only (alone or not)");
		M(F_TOKEN_LAST, 0, 0, "gives", "for the batch's last token only (alone or not)");
		M(F_ALONE0, 0, 0, "alone", "by one ulp for the first token computed alone");
		M(F_ALONE_LAST, 0, 0, "alone", "by one ulp for the last token computed alone");
		M(F_SLICE, 0, 0, "slices", "by one ulp in row ranges not starting at row 0");
		M(F_PACKED, 0, 0, "packed", "by one ulp on matrices packed in panels");
		M(F_SHAPE_FIRST, first[k], 0, "gives", "on the first shape only");
		M(F_SHAPE_LAST, last[k][0], last[k][1], "gives", "on the last shape only");
#undef M
	}
	expect("an mm_q8 that gives NaN for a row that is not whole Q8_0 blocks (never asked)",
	       F_Q8_PARTIAL_NAN, 2, 0, 0, 0, NULL, NULL);
}

static void vector_faults(void)
{
	static const int ns[4] = { 12, 64, 70, 128 };	/* selfcheck.c's lengths */
	char what[160];
	int j, last;

	for (j = 0; j < 4; j++) {
		snprintf(what, sizeof(what), "a dot_f32 wrong over %d values only", ns[j]);
		expect(what, F_DOT_F32, 0, ns[j], 0, 0, "dot_f32", NULL);
		snprintf(what, sizeof(what), "a dot_f16 wrong over %d values only", ns[j]);
		expect(what, F_DOT_F16, 0, ns[j], 0, 0, "dot_f16", NULL);
		snprintf(what, sizeof(what), "a dot_f32 off by 95%% of its bound over %d values "
			 "(allowed)", ns[j]);
		expect(what, F_DOT_F32_NEAR, 0, ns[j], 0, 0, NULL, NULL);
		snprintf(what, sizeof(what), "a dot_f16 off by 95%% of its bound over %d values "
			 "(allowed)", ns[j]);
		expect(what, F_DOT_F16_NEAR, 0, ns[j], 0, 0, NULL, NULL);
		for (last = 0; last < 2; last++) {
			snprintf(what, sizeof(what), "an axpy_f32 wrong in its %s element over %d "
				 "values only", last ? "last" : "first", ns[j]);
			expect(what, F_AXPY_F32, 0, ns[j], last ? -1 : 0, 0, "axpy_f32", NULL);
			snprintf(what, sizeof(what), "an axpy_f16 wrong in its %s element over %d "
				 "values only", last ? "last" : "first", ns[j]);
			expect(what, F_AXPY_F16, 0, ns[j], last ? -1 : 0, 0, "axpy_f16", NULL);
		}
	}
	/* axpy's bound (2 x 4 ulps: FMA against a multiply and an add) is
	 * neither looser nor tighter than that; rounding y moves the error
	 * by at most half an ulp of y, so 0.85 and 1.25 stay on their side */
	for (j = 0; j < 2; j++) {
		snprintf(what, sizeof(what), "an axpy_%s off by 0.85 times its bound everywhere "
			 "(allowed)", j ? "f16" : "f32");
		f_factor = 0.85;
		expect(what, F_AXPY_OFF, 0, 0, 0, j, NULL, NULL);
		snprintf(what, sizeof(what), "an axpy_%s off by 1.25 times its bound everywhere",
			 j ? "f16" : "f32");
		f_factor = 1.25;
		expect(what, F_AXPY_OFF, 0, 0, 0, j, j ? "axpy_f16" : "axpy_f32", NULL);
	}
	/* the self-check's quantiser input: 8 blocks, each its own case
	 * (small values, all zero, NaN, infinities, half steps, fp16 edges,
	 * large values) */
	for (j = 0; j < 8; j++) {
		snprintf(what, sizeof(what), "a quantiser wrong in one quant of block %d only", j);
		expect(what, F_QUANT_Q, 0, 0, j, 0, "quantize_q8x: block", NULL);
		snprintf(what, sizeof(what), "a quantiser whose scale differs in its lowest bit in "
			 "block %d only", j);
		expect(what, F_QUANT_D, 0, 0, j, 0, "quantize_q8x: block", NULL);
	}
	/* the Q8_K input: the first block the Q8_0 one's 256 values, the
	 * second a largest magnitude first negative, then positive, the
	 * third zeros */
	for (j = 0; j < 3; j++) {
		snprintf(what, sizeof(what), "a Q8_K quantiser wrong in one quant of block %d only", j);
		expect(what, F_QUANTK_Q, 0, 0, j, 0, "quantize_q8k: block", NULL);
		snprintf(what, sizeof(what), "a Q8_K quantiser whose scale differs in its lowest bit "
			 "in block %d only", j);
		expect(what, F_QUANTK_D, 0, 0, j, 0, "quantize_q8k: block", NULL);
		snprintf(what, sizeof(what), "a Q8_K quantiser with one sum of 16 wrong in block %d",
			 j);
		expect(what, F_QUANTK_BSUM, 0, 0, j, 0, "quantize_q8k: block", NULL);
	}
	expect("a Q8_K quantiser that takes the scale's sign from the last value of the largest "
	       "magnitude, not the first", F_QUANTK_SIGN, 0, 0, 1, 0, "quantize_q8k: block 1", NULL);
	expect("a quantiser wrong only in blocks of large values (finite scale > 100)", F_QUANT_LARGE,
	       0, 0, 0, 0, "quantize_q8x: block", NULL);
	expect("a quantiser wrong only in blocks of zeros (quants from 0 x (1 / 0))", F_QUANT_ZERO,
	       0, 0, 0, 0, "quantize_q8x: block 1", NULL);
	expect("a quantiser that rounds 0.5 up to 1 (every other half step to even)",
	       F_QUANT_HALF_FIRST, 0, 0, 0, 0, "quantize_q8x: block 4", NULL);
	expect("a quantiser that rounds positive half steps toward zero (1.5 to 1; 0.5, 126.5 "
	       "and -2.5 come out right)", F_QUANT_HALF_TRUNC, 0, 0, 0, 0,
	       "quantize_q8x: block 4", NULL);
	expect("a quantiser that rounds 126.5 away from zero (every other half step to even)",
	       F_QUANT_HALF_TOP, 0, 0, 0, 0, "quantize_q8x: block 4", NULL);
	expect("a quantiser that rounds negative half steps down (-2.5 to -3)", F_QUANT_HALF_NEG,
	       0, 0, 0, 0, "quantize_q8x: block 4", NULL);
	expect("an f32_to_f16 wrong in its first element only", F_F16_ELEM, 0, 0, 0, 0,
	       "f32_to_f16", NULL);
	expect("an f32_to_f16 wrong in its last element only", F_F16_ELEM, 0, 0, -1, 0,
	       "f32_to_f16", NULL);
	expect("an f32_to_f16 wrong on subnormal results only", F_F16_SUBNORMAL, 0, 0, 0, 0,
	       "f32_to_f16", NULL);
	expect("an f32_to_f16 that stores a NaN as an infinity", F_F16_NAN_INF, 0, 0, 0, 0,
	       "f32_to_f16", NULL);
	expect("an f32_to_f16 that stores +inf as the largest finite value", F_F16_POS_INF, 0, 0,
	       0, 0, "f32_to_f16: inf", NULL);
	expect("an f32_to_f16 that stores -inf as +inf", F_F16_NEG_INF, 0, 0, 0, 0,
	       "f32_to_f16: -inf", NULL);
	expect("an f32_to_f16 that keeps 65520 (the first value that rounds to inf) finite",
	       F_F16_OVERFLOW_EDGE, 0, 0, 0, 0, "f32_to_f16: 65520", NULL);
	expect("an f32_to_f16 whose NaNs carry another payload (allowed)", F_F16_NAN_PAYLOAD,
	       0, 0, 0, 0, NULL, NULL);
	{	/* selfcheck.c's SwiGLU inputs: -100, 100, 0, NaN, -1e-30 at 3..7 */
		static const int el[] = { 0, 3, 4, 5, 6, 7, -1 };

		for (j = 0; j < (int)(sizeof(el) / sizeof(el[0])); j++) {
			snprintf(what, sizeof(what), "a silu_mul wrong in element %d only%s", el[j],
				 el[j] == 6 ? " (NaN in, 0 out)" : el[j] < 0 ? " (the last)" : "");
			expect(what, F_SILU, 0, 0, el[j], 0, "silu_mul", NULL);
		}
	}
	for (j = 0; j < 4; j++) {
		snprintf(what, sizeof(what), "attn_scores wrong in its %s row, %s K only",
			 j & 1 ? "last head's last" : "first head's first", j & 2 ? "fp16" : "fp32");
		expect(what, F_SCORES, 0, 0, j & 1 ? -1 : 0, !!(j & 2), "attn_scores", NULL);
		snprintf(what, sizeof(what), "attn_values wrong in its %s element, %s V only",
			 j & 1 ? "last head's last" : "first head's first", j & 2 ? "fp16" : "fp32");
		expect(what, F_VALUES, 0, 0, j & 1 ? -1 : 0, !!(j & 2), "attn_values", NULL);
	}
	expect("attn_scores that lays its rows out at a stride rounded down to 4",
	       F_SCORES_STRIDE4, 0, 0, 0, 0, "attn_scores", NULL);
	expect("attn_values leaving out V's row 0", F_VALUES_ROW0, 0, 0, 0, 0, "attn_values", NULL);
	expect("a softmax_exp wrong in its last element only", F_SOFTMAX, 0, 0, -1, 0,
	       "softmax_exp: element", NULL);
	expect("a softmax_exp whose elements are right and sum wrong", F_SOFTMAX_SUM, 0, 0, 0, 0,
	       "softmax_exp: sum", NULL);
	expect("a softmax_exp wrong on its second call only (fp16 scores)", F_SOFTMAX_SECOND, 0,
	       0, 0, 0, "softmax_exp", NULL);
	expect("an attn_scores_q8 one ulp off in its first head's first row (Q8_0 KV)",
	       F_SCORES_Q8_ULP, 0, 0, 0, 0, "attn_scores_q8 (head_dim 64", NULL);
	expect("an attn_scores_q8 one ulp off in its last head's last row (Q8_0 KV)",
	       F_SCORES_Q8_ULP, 0, 0, -1, 0, "attn_scores_q8 (head_dim 64", NULL);
	expect("an attn_scores_q8 wrong at head dimension 128 only (Q8_0 KV)", F_SCORES_Q8_HD, 0,
	       0, 0, 0, "attn_scores_q8 (head_dim 128", NULL);
	expect("an attn_values_q8 wrong in its first head's first element (Q8_0 KV)",
	       F_VALUES_Q8, 0, 0, 0, 0, "attn_values_q8", NULL);
	expect("an attn_values_q8 wrong in its last head's last element (Q8_0 KV)",
	       F_VALUES_Q8, 0, 0, -1, 0, "attn_values_q8", NULL);
	expect("a hadamard one ulp off in its first element, pieces of 128 only (Q8_0 KV)",
	       F_HADAMARD, 0, 0, 0, 0, "hadamard (256 values, pieces of 128", NULL);
	expect("a hadamard one ulp off in its last element, pieces of 128 only (Q8_0 KV)",
	       F_HADAMARD, 0, 0, -1, 0, "hadamard (256 values, pieces of 128", NULL);
	expect("an rmsnorm wrong in its first element only", F_RMSNORM, 0, 0, 0, 0, "rmsnorm",
	       NULL);
	expect("an rmsnorm wrong in its last element only", F_RMSNORM, 0, 0, -1, 0, "rmsnorm",
	       NULL);
}

int main(void)
{
	expect("the portable set wrapped without a fault", F_NONE, 0, 0, 0, 0, NULL, NULL);
	matrix_faults();
	vector_faults();
	return tc_done();
}
