// SPDX-License-Identifier: MIT
/*
 * kernels_avx512.c - AVX-512 (F, BW, VL) kernels, compiled for that target
 * only and chosen at run time by kernels.c when the CPU has it. Same
 * contract and tiling as kernels_avx2.c with 16-float vectors; Q8_0 handles
 * two 32-value blocks per 512-bit vector.
 */
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

KVE_INLINE float hsum16(__m512 v)
{
	return _mm512_reduce_add_ps(v);
}

/* 16 values: the chunk at p and the next one, step bytes on
 * (kve_mat_cstep; the two are adjacent when row-major) */
KVE_INLINE __m512 load_w(const uint8_t *p, size_t step, int f16)
{
	if (f16)
		return _mm512_cvtph_ps(_mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
			_mm_loadu_si128((const __m128i *)(p + step)), 1));
	return _mm512_castpd_ps(_mm512_insertf64x4(
		_mm512_castpd256_pd512(_mm256_loadu_pd((const double *)p)),
		_mm256_loadu_pd((const double *)(p + step)), 1));
}

/*
 * Decode prefetch over a packed panel, the distances kernels_avx2.c
 * measured (PREFETCH_NOTE there): every line of the n bytes at p. Not
 * measured on AVX-512 hardware (none was available).
 */
#define PF_AHEAD_F16	1024
#define PF_AHEAD_Q8	8192
KVE_INLINE void prefetch_ahead(const uint8_t *p, size_t n)
{
	size_t l;

	for (l = 0; l < n; l += 64)
		_mm_prefetch((const char *)p + l, _MM_HINT_T0);
}

KVE_INLINE void tile_f(const struct kve_mat *w, const float *x, float *y,
		       int ldy, int r, int t, const int R, const int C,
		       const int f16)
{
	__m512 acc[8][6];
	const uint8_t *rows[8];
	const float *xs[6];
	const size_t step = kve_mat_cstep(w);
	int cols = (int)w->cols, k, i, j;
	int kv = cols & ~15;

#pragma GCC unroll 8
	for (i = 0; i < R; i++) {
		rows[i] = kve_mat_chunk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 6
		for (j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 6
	for (j = 0; j < C; j++)
		xs[j] = x + (size_t)(t + j) * cols;
	for (k = 0; k < kv; k += 16) {
		__m512 xv[6];

		/* decode over a packed F16 panel, as in kernels_avx2.c's
		 * tile_f (F32 streams best without) */
		if (C == 1 && R == 4 && f16 && w->panel)
			prefetch_ahead(rows[0] + (size_t)(k / 8) * step + PF_AHEAD_F16, 2 * step);
#pragma GCC unroll 6
		for (j = 0; j < C; j++)
			xv[j] = _mm512_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
		for (i = 0; i < R; i++) {
			__m512 wv = load_w(rows[i] + (size_t)(k / 8) * step, step, f16);
#pragma GCC unroll 6
			for (j = 0; j < C; j++)
				acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
		}
	}
#pragma GCC unroll 8
	for (i = 0; i < R; i++) {
#pragma GCC unroll 6
		for (j = 0; j < C; j++) {
			float s = hsum16(acc[i][j]);
			for (k = kv; k < cols; k++)
				s += kve_mat_at(w, (uint32_t)(r + i), (uint32_t)k) * xs[j][k];
			y[(size_t)(t + j) * ldy + r + i] = s;
		}
	}
}

#define TILE_CASES(F16)                                                      \
	static void mm_##F16(const struct kve_mat *w, const float *x, int T, \
			     float *y, int ldy, int r0, int r1)              \
	{                                                                    \
		int r = r0, t;                                               \
		if (T == 1) {                                                \
			for (; w->panel && r + 4 <= r1; r += 4)              \
				tile_f(w, x, y, ldy, r, 0, 4, 1, F16); /* a panel */ \
			for (; r + 8 <= r1; r += 8)                          \
				tile_f(w, x, y, ldy, r, 0, 8, 1, F16);       \
			for (; r < r1; r++)                                  \
				tile_f(w, x, y, ldy, r, 0, 1, 1, F16);       \
			return;                                              \
		}                                                            \
		for (; r + 4 <= r1; r += 4) {                                \
			for (t = 0; t + 6 <= T; t += 6)                      \
				tile_f(w, x, y, ldy, r, t, 4, 6, F16);       \
			for (; t + 2 <= T; t += 2)                           \
				tile_f(w, x, y, ldy, r, t, 4, 2, F16);       \
			if (t < T)                                           \
				tile_f(w, x, y, ldy, r, t, 4, 1, F16);       \
		}                                                            \
		for (; r < r1; r++)                                          \
			for (t = 0; t < T; t++)                              \
				tile_f(w, x, y, ldy, r, t, 1, 1, F16);       \
	}
TILE_CASES(0)
TILE_CASES(1)

KVE_INLINE __m512i load2(const void *a, const void *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(
		_mm256_loadu_si256((const __m256i *)a)),
		_mm256_loadu_si256((const __m256i *)b), 1);
}

KVE_INLINE void tile_q8(const struct kve_mat *w, const struct kve_q8x *xq,
			float *y, int ldy, int r, int t, const int R,
			const int C)
{
	__m512 acc[4][4];
	const uint8_t *sp[4], *qp[4];	/* block 0's scale and quants per row */
	const size_t step = kve_q8_bstep(w);
	const struct kve_q8x *xs[4];
	const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
	int nb = (int)w->cols / QK8_0, b, i, j;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		sp[i] = kve_q8_scale(w, (uint32_t)(r + i), 0);
		qp[i] = kve_q8_quants(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		xs[j] = xq + (size_t)(t + j) * nb;
	for (b = 0; b < nb; b += 2) {
		int two = b + 1 < nb;
		__m512i xv[4];
		float dx0[4], dx1[4];

		if (C == 1 && w->panel)	/* decode: as kernels_avx2.c's prefetch_q8 */
			prefetch_ahead(sp[0] + (size_t)b * step + PF_AHEAD_Q8, 2 * step);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			if (two) {
				xv[j] = load2(xs[j][b].q, xs[j][b + 1].q);
				dx1[j] = xs[j][b + 1].d;
			} else {
				xv[j] = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xs[j][b].q));
				xv[j] = _mm512_inserti64x4(xv[j], _mm256_setzero_si256(), 1);
				dx1[j] = 0;
			}
			dx0[j] = xs[j][b].d;
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			size_t o0 = (size_t)b * step, o1 = two ? o0 + step : o0;
			__m512i wv = load2(qp[i] + o0, qp[i] + o1);
			__m512i aw = _mm512_abs_epi8(wv);
			__mmask64 neg = _mm512_movepi8_mask(wv);
			uint16_t h0, h1;
			float dw0, dw1;

			memcpy(&h0, sp[i] + o0, 2);
			memcpy(&h1, sp[i] + o1, 2);
			dw0 = _cvtsh_ss(h0);
			dw1 = two ? _cvtsh_ss(h1) : 0.0f;
#pragma GCC unroll 4
			for (j = 0; j < C; j++) {
				__m512i sx = _mm512_mask_sub_epi8(xv[j], neg, zero, xv[j]);
				__m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), ones);
				__m512 sc = _mm512_mask_blend_ps(0xff00,
					_mm512_set1_ps(dw0 * dx0[j]),
					_mm512_set1_ps(dw1 * dx1[j]));
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[i][j]);
			}
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum16(acc[i][j]);
}

static void mm_q8(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		  float *y, int ldy, int r0, int r1)
{
	int r = r0, t;

	for (; r + 4 <= r1; r += 4) {
		for (t = 0; t + 2 <= T; t += 2)
			tile_q8(w, xq, y, ldy, r, t, 4, 2);
		if (t < T)
			tile_q8(w, xq, y, ldy, r, t, 4, 1);
	}
	for (; r < r1; r++)
		for (t = 0; t < T; t++)
			tile_q8(w, xq, y, ldy, r, t, 1, 1);
}

static float dot_f32(const float *a, const float *b, int n)
{
	__m512 acc = _mm512_setzero_ps();
	int i = 0;
	float s;

	for (; i + 16 <= n; i += 16)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
	s = hsum16(acc);
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static float dot_f16(const float *a, const uint16_t *b, int n)
{
	__m512 acc = _mm512_setzero_ps();
	int i = 0;
	float s;

	for (; i + 16 <= n; i += 16)
		acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i),
				      _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))),
				      acc);
	s = hsum16(acc);
	for (; i < n; i++)
		s += a[i] * _cvtsh_ss(b[i]);
	return s;
}

static void axpy_f32(float *y, float a, const float *x, int n)
{
	__m512 av = _mm512_set1_ps(a);
	int i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i),
							_mm512_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * x[i];
}

static void axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	__m512 av = _mm512_set1_ps(a);
	int i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(av,
			_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
			_mm512_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * _cvtsh_ss(x[i]);
}

static void attn_scores(const float *q, const void *k, int f16, int n, int hd,
			float scale, float *sc)
{
	int j;

	for (j = 0; j < n; j++)
		sc[j] = (f16 ? dot_f16(q, (const uint16_t *)k + (size_t)j * hd, hd) :
			       dot_f32(q, (const float *)k + (size_t)j * hd, hd)) * scale;
}

static void attn_values(float *out, const float *p, const void *v, int f16, int n, int hd)
{
	int j;

	for (j = 0; j < n; j++) {
		if (f16)
			axpy_f16(out, p[j], (const uint16_t *)v + (size_t)j * hd, hd);
		else
			axpy_f32(out, p[j], (const float *)v + (size_t)j * hd, hd);
	}
}

const struct kve_kernels kve_kernels_avx512 = {
	.name = "avx512",
	.mm_f32 = mm_0,
	.mm_f16 = mm_1,
	.mm_q8 = mm_q8,
	.dot_f32 = dot_f32,
	.dot_f16 = dot_f16,
	.axpy_f32 = axpy_f32,
	.axpy_f16 = axpy_f16,
	.quantize_q8x = kve_quantize_q8x_avx2,	/* AVX-512 CPUs have AVX2 */
	.f32_to_f16 = kve_f32_to_f16_avx2,
	.silu_mul = kve_silu_mul_avx2,
	.attn_scores = attn_scores,
	.softmax_exp = kve_softmax_exp_avx2,
	.attn_values = attn_values,
	.rmsnorm = kve_rmsnorm_avx2,
};
