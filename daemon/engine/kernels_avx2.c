// SPDX-License-Identifier: MIT
/*
 * kernels_avx2.c - AVX2/FMA/F16C kernels, compiled for that target only
 * (the pragma below) and chosen at run time by kernels.c. Same contract as
 * kernels_c.c: each (row, token) has its own accumulator, so results do
 * not depend on batch size or tile shape.
 *
 * Matrix products are register tiles of R weight rows x C tokens: each
 * weight vector loaded is used C times, which is what makes a decode step
 * over a batch read each weight once.
 */
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

KVE_INLINE float hsum8(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	__m128 s = _mm_add_ps(lo, hi);
	__m128 sh = _mm_movehdup_ps(s);

	s = _mm_add_ps(s, sh);
	sh = _mm_movehl_ps(sh, s);
	s = _mm_add_ss(s, sh);
	return _mm_cvtss_f32(s);
}

KVE_INLINE __m256 load_w(const uint8_t *row, int k, int f16)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)k)));
	return _mm256_loadu_ps((const float *)row + k);
}

KVE_INLINE float load_w1(const uint8_t *row, int k, int f16)
{
	if (f16) {
		uint16_t h;
		memcpy(&h, row + 2 * (size_t)k, 2);
		return _cvtsh_ss(h);
	}
	return ((const float *)row)[k];
}

/* R rows starting at r, C tokens starting at t. */
KVE_INLINE void tile_f(const struct kve_mat *w, const float *x, float *y,
		       int ldy, int r, int t, const int R, const int C,
		       const int f16)
{
	__m256 acc[8][4];
	const uint8_t *rows[8];
	const float *xs[4];
	int cols = (int)w->cols, k, i, j;
	int kv = cols & ~7;

#pragma GCC unroll 8
	for (i = 0; i < R; i++) {
		rows[i] = w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		xs[j] = x + (size_t)(t + j) * cols;
	for (k = 0; k < kv; k += 8) {
		__m256 xv[4];
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			xv[j] = _mm256_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
		for (i = 0; i < R; i++) {
			__m256 wv = load_w(rows[i], k, f16);
#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
		}
	}
#pragma GCC unroll 8
	for (i = 0; i < R; i++) {
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			float s = hsum8(acc[i][j]);
			for (k = kv; k < cols; k++)
				s += load_w1(rows[i], k, f16) * xs[j][k];
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
			for (; r + 8 <= r1; r += 8)                          \
				tile_f(w, x, y, ldy, r, 0, 8, 1, F16);       \
			for (; r < r1; r++)                                  \
				tile_f(w, x, y, ldy, r, 0, 1, 1, F16);       \
			return;                                              \
		}                                                            \
		for (; r < r1; r += 4) {                                     \
			int R = r1 - r >= 4 ? 4 : 1;                         \
			if (R == 1) {                                        \
				for (; r < r1; r++)                          \
					for (t = 0; t < T; t++)              \
						tile_f(w, x, y, ldy, r, t, 1, 1, F16); \
				break;                                       \
			}                                                    \
			for (t = 0; t + 3 <= T; t += 3)                      \
				tile_f(w, x, y, ldy, r, t, 4, 3, F16);       \
			if (T - t == 2)                                      \
				tile_f(w, x, y, ldy, r, t, 4, 2, F16);       \
			else if (T - t == 1)                                 \
				tile_f(w, x, y, ldy, r, t, 4, 1, F16);       \
		}                                                            \
	}
TILE_CASES(0)
TILE_CASES(1)

/* Q8_0 x Q8 activations: |w| * sign(x, w) through maddubs, then int32 ->
 * float scaled by d_w * d_x, accumulated per (row, token). */
KVE_INLINE void tile_q8(const struct kve_mat *w, const struct kve_q8x *xq,
			float *y, int ldy, int r, int t, const int R,
			const int C)
{
	__m256 acc[4][4];
	const uint8_t *rows[4];
	const struct kve_q8x *xs[4];
	const __m256i ones = _mm256_set1_epi16(1);
	int nb = (int)w->cols / QK8_0, b, i, j;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		rows[i] = w->data + (size_t)(r + i) * w->row_bytes;
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		xs[j] = xq + (size_t)(t + j) * nb;
	for (b = 0; b < nb; b++) {
		__m256i xv[4];
		float dx[4];
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			xv[j] = _mm256_loadu_si256((const __m256i *)xs[j][b].q);
			dx[j] = xs[j][b].d;
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			const uint8_t *blk = rows[i] + (size_t)b * Q8_0_BYTES;
			__m256i wv = _mm256_loadu_si256((const __m256i *)(blk + 2));
			__m256i aw = _mm256_sign_epi8(wv, wv);
			uint16_t h;
			float dw;

			memcpy(&h, blk, 2);
			dw = _cvtsh_ss(h);
#pragma GCC unroll 4
			for (j = 0; j < C; j++) {
				__m256i sx = _mm256_sign_epi8(xv[j], wv);
				__m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
				acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
							    _mm256_set1_ps(dw * dx[j]),
							    acc[i][j]);
			}
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum8(acc[i][j]);
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
	__m256 acc = _mm256_setzero_ps();
	int i = 0;
	float s;

	for (; i + 8 <= n; i += 8)
		acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
	s = hsum8(acc);
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static float dot_f16(const float *a, const uint16_t *b, int n)
{
	__m256 acc = _mm256_setzero_ps();
	int i = 0;
	float s;

	for (; i + 8 <= n; i += 8)
		acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
				      _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))),
				      acc);
	s = hsum8(acc);
	for (; i < n; i++)
		s += a[i] * _cvtsh_ss(b[i]);
	return s;
}

static void axpy_f32(float *y, float a, const float *x, int n)
{
	__m256 av = _mm256_set1_ps(a);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
							_mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * x[i];
}

static void axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	__m256 av = _mm256_set1_ps(a);
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av,
			_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
			_mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += a * _cvtsh_ss(x[i]);
}

const struct kve_kernels kve_kernels_avx2 = {
	.name = "avx2",
	.mm_f32 = mm_0,
	.mm_f16 = mm_1,
	.mm_q8 = mm_q8,
	.dot_f32 = dot_f32,
	.dot_f16 = dot_f16,
	.axpy_f32 = axpy_f32,
	.axpy_f16 = axpy_f16,
};
