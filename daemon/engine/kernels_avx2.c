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
 *
 * PREFETCH_NOTE: row-major, a one-token tile walks 8 rows side by side,
 * 8 short streams (0.8-3 KiB each for 110M-class models) that the
 * hardware prefetcher barely ramps up on before they end, so the tile
 * prefetches the same offsets of the next tile's rows (worth 14% for F32
 * decode). Packed in 4-row panels (pack.c, what a loaded model gets), a
 * one-token tile takes one panel: the tiles read the matrix as one linear
 * stream, and the prefetch runs a fixed distance ahead in it: 1 KiB for
 * F16, 8 KiB for Q8_0 (4-16 KiB measured alike, 2 KiB about 30% slower),
 * none for F32 (any distance was slower: the hardware prefetcher keeps up
 * with one 4-byte-per-value stream). A/B against row-major with
 * kve-bench: 110M F32 decode +10%, GQA F16 +55%, 110M Q8_0 +60% (of
 * which +10% from taking one panel per tile rather than two), with
 * prefill as fast or faster. A prefetch is a hint: results do not change,
 * and one past the matrix's end does not fault.
 */
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include "engine_internal.h"

#include <math.h>

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

/* 8 values from p (a chunk of kve_mat_chunk); f16: 0 F32, 1 F16, 2 BF16
 * (its bits are a float's upper half) */
KVE_INLINE __m256 load_w(const uint8_t *p, int f16)
{
	if (f16 == 2)
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	return _mm256_loadu_ps((const float *)p);
}

KVE_INLINE float load_w1(const uint8_t *row, int k, int f16)
{
	if (f16) {
		uint16_t h;
		memcpy(&h, row + 2 * (size_t)k, 2);
		return f16 == 2 ? kve_bf16_to_f32(h) : _cvtsh_ss(h);
	}
	return ((const float *)row)[k];
}

/*
 * Decode prefetch for a one-token tile at byte offset off of its rows
 * (column k), row-major: the same offsets of the next tile's rows, once
 * per 64 bytes of a row. (Packed tiles prefetch in tile_f.)
 */
KVE_INLINE void prefetch_next_rows(const struct kve_mat *w, const uint8_t *const *rows,
				   int R, size_t off, int k, int f16)
{
	int i;

	if ((k * (f16 ? 2 : 4)) & 63)
		return;
#pragma GCC unroll 8
	for (i = 0; i < R; i++)
		_mm_prefetch((const char *)rows[i] + (size_t)R * w->row_bytes + off, _MM_HINT_T0);
}

/* Packed one-token tiles prefetch this far ahead in the stream (0: not
 * at all; see PREFETCH_NOTE) */
#define PF_AHEAD_F32	0
#define PF_AHEAD_F16	1024

/*
 * R rows starting at r, C tokens starting at t. packed: the R rows are
 * one panel (R = 4, r % 4 == 0), so each is a fixed distance from the
 * first and the tile needs one pointer for all of them (given 8 row
 * pointers the compiler keeps them on the stack and reloads each one
 * every step).
 */
KVE_INLINE void tile_f(const struct kve_mat *w, const float *x, float *y,
		       int ldy, int r, int t, const int R, const int C,
		       const int f16, const int packed)
{
	const size_t es = f16 ? 2 : 4;
	const int pf = f16 ? PF_AHEAD_F16 : PF_AHEAD_F32;
	__m256 acc[8][4];
	const uint8_t *rows[8];
	const float *xs[4];
	const size_t step = packed ? KVE_PANEL_F * 8 * es : kve_mat_cstep(w);
	int cols = (int)w->cols, k, i, j;
	int kv = cols & ~7;
	size_t off;

#pragma GCC unroll 8
	for (i = 0; i < R; i++) {
		rows[i] = packed ? kve_mat_chunk(w, (uint32_t)r, 0) + (size_t)i * 8 * es :
			  kve_mat_chunk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		xs[j] = x + (size_t)(t + j) * cols;
	for (k = 0, off = 0; k < kv; k += 8, off += step) {
		__m256 xv[4];

		if (C == 1 && packed && pf > 0) {
			const char *f = (const char *)rows[0] + off + pf;
#pragma GCC unroll 4
			for (i = 0; i < (int)step; i += 64)
				_mm_prefetch(f + i, _MM_HINT_T0);
		} else if (C == 1 && !packed) {
			prefetch_next_rows(w, rows, R, off, k, f16);
		}
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			xv[j] = _mm256_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
		for (i = 0; i < R; i++) {
			__m256 wv = load_w((packed ? rows[0] + (size_t)i * 8 * es : rows[i]) + off,
					   f16);
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
			for (k = kv; k < cols; k++)	/* row-major only: packed cols % 8 == 0 */
				s += kve_mat_at(w, (uint32_t)(r + i), (uint32_t)k) * xs[j][k];
			y[(size_t)(t + j) * ldy + r + i] = s;
		}
	}
}

/* 4 rows from r, tokens [0, T), in tiles of 3, then 2 or 1 */
KVE_INLINE void rows4(const struct kve_mat *w, const float *x, int T, float *y, int ldy,
		      int r, const int f16, const int packed)
{
	int t;

	for (t = 0; t + 3 <= T; t += 3)
		tile_f(w, x, y, ldy, r, t, 4, 3, f16, packed);
	if (T - t == 2)
		tile_f(w, x, y, ldy, r, t, 4, 2, f16, packed);
	else if (T - t == 1)
		tile_f(w, x, y, ldy, r, t, 4, 1, f16, packed);
}

#define TILE_CASES(F16)                                                      \
	static void mm_##F16(const struct kve_mat *w, const float *x, int T, \
			     float *y, int ldy, int r0, int r1)              \
	{                                                                    \
		int r = r0, t;                                               \
		if (T == 1) {                                                \
			for (; w->panel && r + 4 <= r1; r += 4) {           \
				if (!(r % KVE_PANEL_F))  /* panel by panel */ \
					tile_f(w, x, y, ldy, r, 0, 4, 1, F16, 1); \
				else                                         \
					tile_f(w, x, y, ldy, r, 0, 4, 1, F16, 0); \
			}                                                    \
			for (; r + 8 <= r1; r += 8)                          \
				tile_f(w, x, y, ldy, r, 0, 8, 1, F16, 0);    \
			for (; r < r1; r++)                                  \
				tile_f(w, x, y, ldy, r, 0, 1, 1, F16, 0);    \
			return;                                              \
		}                                                            \
		for (; r + 4 <= r1; r += 4)                                  \
			if (w->panel && !(r % KVE_PANEL_F))                  \
				rows4(w, x, T, y, ldy, r, F16, 1);           \
			else                                                 \
				rows4(w, x, T, y, ldy, r, F16, 0);           \
		for (; r < r1; r++)                                          \
			for (t = 0; t < T; t++)                              \
				tile_f(w, x, y, ldy, r, t, 1, 1, F16, 0);    \
	}
TILE_CASES(0)
TILE_CASES(1)
TILE_CASES(2)	/* BF16: F16's tiles with the other conversion */

/* maddubs: |w| * sign(x, w) pairs to int16 (no saturation: <= 2 * 127 *
 * 127), madd: adjacent pairs to int32 */
KVE_INLINE __m256i q8_dot4(__m256i a, __m256i b)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

#define Q8_MM_NAME	mm_q8
#define Q8_MM_LINKAGE	static
#include "kernels_q8_avx2.h"

/* the 4- to 6-bit types, maddubs then madd */
#define KQ_VNNI		0
#define KQ_MM_Q32	mm_q32
#define KQ_MM_QK	mm_qk
#define KQ_LINKAGE	static
#include "kernels_quant_avx2.h"

KVE_INLINE float dot_f32_i(const float *a, const float *b, int n)
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

KVE_INLINE float dot_f16_i(const float *a, const uint16_t *b, int n)
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

static float dot_f32(const float *a, const float *b, int n)
{
	return dot_f32_i(a, b, n);
}

static float dot_f16(const float *a, const uint16_t *b, int n)
{
	return dot_f16_i(a, b, n);
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

/* Same arithmetic as kve_quantize_q8x, 32 values at a time: the max of
 * |x| (NaN ignored, as fmaxf does: max_ps returns its second operand when
 * the first is NaN), the same scalar d and 1/d, the same products, NaN ->
 * 0, clamp to [-127, 127] (what the portable branches do, including at
 * -127.5) and cvtps_epi32's round half to even (lrintf's). */
/* the max of |p[0..n)| (n a multiple of 32; NaN ignored, as fmaxf does:
 * max_ps returns its second operand when the first is NaN) */
KVE_INLINE float amax_of(const float *p, int n)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m = _mm256_setzero_ps();
	__m128 m4;
	int k;

	for (k = 0; k < n; k += 8)
		m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(p + k), absmask), m);
	m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	return _mm_cvtss_f32(m4);
}

/* 32 values times id as quants, in order: the same products, NaN -> 0,
 * clamp to [-127, 127] (what the portable branches do, including at
 * -127.5) and cvtps_epi32's round half to even (lrintf's) */
KVE_INLINE __m256i quant32(const float *p, float id)
{
	const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
	const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256i q[4], q01, q23;
	int k;

	for (k = 0; k < 4; k++) {
		__m256 t = _mm256_mul_ps(_mm256_loadu_ps(p + 8 * k), _mm256_set1_ps(id));

		t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
		t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
		q[k] = _mm256_cvtps_epi32(t);
	}
	q01 = _mm256_packs_epi32(q[0], q[1]);
	q23 = _mm256_packs_epi32(q[2], q[3]);
	return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), perm);
}

/* sums of 4 consecutive quants, 8 int32 lanes in order */
KVE_INLINE __m256i sums4(__m256i q)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
				 _mm256_set1_epi16(1));
}

/* Same arithmetic as kve_quantize_q8x, 32 values at a time (the fp16
 * rounding of d by F16C, the same round to nearest even) */
void kve_quantize_q8x_avx2(const float *x, int n, struct kve_q8x *out)
{
	int b;

	for (b = 0; b < n / QK8_0; b++) {
		const float *p = x + b * QK8_0;
		float amax = amax_of(p, QK8_0), id = amax != 0 ? 127.0f / amax : 0.0f;
		__m256i q = quant32(p, id), s = sums4(q);
		__m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));

		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
		s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
		out[b].d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
		_mm256_storeu_si256((__m256i *)out[b].q, q);
		out[b].sum = _mm_cvtsi128_si32(s4);
		out[b].s = _cvtsh_ss(_cvtss_sh(amax / 127.0f * (float)out[b].sum,
					       _MM_FROUND_TO_NEAREST_INT));
	}
}

/* Same arithmetic as kve_quantize_q8k: the first value of the largest
 * magnitude gives the block's scale, with its sign */
void kve_quantize_q8k_avx2(const float *x, int n, struct kve_q8k *out)
{
	const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	int b, k;

	for (b = 0; b < n / QK_K; b++) {
		const float *p = x + b * QK_K;
		float amax = amax_of(p, QK_K), max = 0, iscale;

		for (k = 0; amax != 0 && k < QK_K; k += 8) {
			__m256 a = _mm256_and_ps(_mm256_loadu_ps(p + k), absmask);
			int m = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));

			if (m) {
				max = p[k + __builtin_ctz((unsigned)m)];
				break;
			}
		}
		iscale = amax != 0 ? -127.0f / max : 0.0f;
		out[b].d = amax != 0 ? 1.0f / iscale : 0.0f;
		for (k = 0; k < QK_K; k += 32) {
			__m256i q = quant32(p + k, iscale), s = sums4(q);

			_mm256_storeu_si256((__m256i *)(out[b].q + k), q);
			/* lanes [a b c d | e f g h]: a + b + c + d, e + f + g + h */
			s = _mm256_hadd_epi32(s, s);
			s = _mm256_hadd_epi32(s, s);
			out[b].bsums[k / 16] = (int16_t)_mm256_cvtsi256_si32(s);
			out[b].bsums[k / 16 + 1] = (int16_t)_mm256_extract_epi32(s, 4);
		}
	}
}

void kve_f32_to_f16_avx2(uint16_t *dst, const float *src, int n)
{
	int i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

/* one key's dots with nh query heads: each dot_*_i's chain (one
 * accumulator, hsum8, the scalar tail), the K row loaded once */
KVE_INLINE void score_key(const float *q, const uint8_t *row, const int f16, int hd,
			  float scale, float *sc, size_t ss, const int nh)
{
	size_t es = f16 ? 2 : 4;
	__m256 acc[KVE_ATTN_HEADS];
	int h, i, k;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
		acc[h] = _mm256_setzero_ps();
	for (i = 0; i + 8 <= hd; i += 8) {
		__m256 kv = load_w(row + (size_t)i * es, f16);

#pragma GCC unroll 4
		for (h = 0; h < nh; h++)
			acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * hd + i), kv, acc[h]);
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++) {
		float s = hsum8(acc[h]);

		for (k = i; k < hd; k++)
			s += q[(size_t)h * hd + k] * load_w1(row, k, f16);
		sc[(size_t)h * ss] = s * scale;
	}
}

KVE_INLINE void attn_scores_i(const float *q, int nh, const uint8_t *k, const int f16, int n,
			      int hd, float scale, float *sc, size_t ss)
{
	size_t rb = (size_t)hd * (f16 ? 2 : 4);
	int j;

	for (j = 0; j < n; j++) {
		switch (nh) {
		case 1: score_key(q, k + j * rb, f16, hd, scale, sc + j, ss, 1); break;
		case 2: score_key(q, k + j * rb, f16, hd, scale, sc + j, ss, 2); break;
		case 3: score_key(q, k + j * rb, f16, hd, scale, sc + j, ss, 3); break;
		default: score_key(q, k + j * rb, f16, hd, scale, sc + j, ss, 4); break;
		}
	}
}

static void attn_scores(const float *q, int nh, const void *k, int f16, int n, int hd,
			float scale, float *sc, size_t ss)
{
	if (f16)
		attn_scores_i(q, nh, k, 1, n, hd, scale, sc, ss);
	else
		attn_scores_i(q, nh, k, 0, n, hd, scale, sc, ss);
}

/* out_h += p_h[j] * V_j for nh heads, nv vectors (8 columns each) from
 * column c0 held in registers: the same fma per element, in the same
 * row order, as axpy row by row; each V vector loaded once for all
 * heads (nh * nv <= 8) */
KVE_INLINE void values_nv(float *out, const float *p, size_t ps, const uint8_t *v,
			  const int f16, int n, int hd, int c0, const int nh, const int nv)
{
	size_t es = f16 ? 2 : 4;
	__m256 acc[KVE_ATTN_HEADS][8], av[KVE_ATTN_HEADS];
	int h, i, j;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 8
		for (i = 0; i < nv; i++)
			acc[h][i] = _mm256_loadu_ps(out + (size_t)h * hd + c0 + 8 * i);
	for (j = 0; j < n; j++) {
		const uint8_t *row = v + ((size_t)j * hd + c0) * es;

#pragma GCC unroll 4
		for (h = 0; h < nh; h++)
			av[h] = _mm256_set1_ps(p[(size_t)h * ps + j]);
#pragma GCC unroll 8
		for (i = 0; i < nv; i++) {
			__m256 w = load_w(row + (size_t)8 * i * es, f16);

#pragma GCC unroll 4
			for (h = 0; h < nh; h++)
				acc[h][i] = _mm256_fmadd_ps(av[h], w, acc[h][i]);
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 8
		for (i = 0; i < nv; i++)
			_mm256_storeu_ps(out + (size_t)h * hd + c0 + 8 * i, acc[h][i]);
}

#define VN(NH, NV) values_nv(out, p, ps, v, f16, n, hd, c0, NH, NV)

KVE_INLINE void attn_values_i(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			      const int f16, int n, int hd)
{
	size_t es = f16 ? 2 : 4;
	int vmax = nh == 1 ? 8 : nh == 2 ? 4 : 2;	/* nh * vmax <= 8 accumulators */
	int hv = hd & ~7, c0, h, i, j, nv;

	for (c0 = 0; c0 < hv; c0 += 8 * nv) {
		nv = (hv - c0) / 8 < vmax ? (hv - c0) / 8 : vmax;
		if (nh == 1) {
			switch (nv) {
			case 1: VN(1, 1); break;
			case 2: VN(1, 2); break;
			case 3: VN(1, 3); break;
			case 4: VN(1, 4); break;
			case 5: VN(1, 5); break;
			case 6: VN(1, 6); break;
			case 7: VN(1, 7); break;
			default: VN(1, 8); break;
			}
		} else if (nh == 2) {
			switch (nv) {
			case 1: VN(2, 1); break;
			case 2: VN(2, 2); break;
			case 3: VN(2, 3); break;
			default: VN(2, 4); break;
			}
		} else if (nh == 3) {
			if (nv == 1)
				VN(3, 1);
			else
				VN(3, 2);
		} else {
			if (nv == 1)
				VN(4, 1);
			else
				VN(4, 2);
		}
	}
	for (h = 0; h < nh; h++)
		for (j = 0; j < n; j++)
			for (i = hv; i < hd; i++)
				out[(size_t)h * hd + i] += p[(size_t)h * ps + j] *
							   load_w1(v + (size_t)j * hd * es, i, f16);
}

#undef VN

static void attn_values(float *out, int nh, const float *p, size_t ps, const void *v, int f16,
			int n, int hd)
{
	if (f16)
		attn_values_i(out, nh, p, ps, v, 1, n, hd);
	else
		attn_values_i(out, nh, p, ps, v, 0, n, hd);
}

/* e^x for x in [-87.3, 88.4] (clamped), Cephes' expf: 2^n * p(r) with
 * r = x - n ln2 in two parts and a degree-6 polynomial; ~1 ulp. */
KVE_INLINE __m256 exp8(__m256 x)
{
	__m256 fx, r, r2, p;
	__m256i n;

	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365402f)),
			  _mm256_set1_ps(88.3762589f));
	fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504089f),
					     _mm256_set1_ps(0.5f)));
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
	r2 = _mm256_mul_ps(r, r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(n));
}

void kve_silu_mul_avx2(float *g, const float *u, int n)
{
	const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
	int i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(g + i);
		__m256 e = exp8(_mm256_xor_ps(v, sign));

		_mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)),
						      _mm256_loadu_ps(u + i)));
	}
	if (i < n) {	/* the tail through the same vector code */
		float tg[8] = { 0 }, tu[8] = { 0 };

		memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
		memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
		kve_silu_mul_avx2(tg, tu, 8);
		memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
	}
}

float kve_softmax_exp_avx2(float *sc, int n, float mx)
{
	__m256 m = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
	int j = 0;
	float sum;

	for (; j + 8 <= n; j += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), m));

		_mm256_storeu_ps(sc + j, e);
		acc = _mm256_add_ps(acc, e);
	}
	sum = hsum8(acc);
	if (j < n) {	/* the tail through the same exp */
		float t[8];
		int i;

		for (i = 0; i < 8; i++)
			t[i] = j + i < n ? sc[j + i] : mx;
		_mm256_storeu_ps(t, exp8(_mm256_sub_ps(_mm256_loadu_ps(t), m)));
		for (i = 0; j + i < n; i++) {
			sc[j + i] = t[i];
			sum += t[i];
		}
	}
	return sum;
}

void kve_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps)
{
	__m256 acc = _mm256_setzero_ps(), sv;
	float ss, s;
	int i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);

		acc = _mm256_fmadd_ps(v, v, acc);
	}
	ss = hsum8(acc);
	for (; i < n; i++)
		ss += x[i] * x[i];
	s = 1.0f / sqrtf(ss / (float)n + eps);
	sv = _mm256_set1_ps(s);
	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
							_mm256_loadu_ps(w + i)));
	for (; i < n; i++)
		out[i] = x[i] * s * w[i];
}

#include "kernels_kvq8_avx2.h"

/* kve_hadamard_c, eight values a vector: the passes 8 apart and more
 * between vectors, those within one by a swap of its halves, pairs or
 * neighbours and a blend of the sums and differences: the same sum or
 * difference for every value, so the same bits */
#define FWHT_IN(r, t, hi) _mm256_blend_ps(_mm256_add_ps(r, t), _mm256_sub_ps(t, r), hi)

static void hadamard_256(float *x, int len, int n)
{
	__m256 s = _mm256_set1_ps(1.0f / sqrtf((float)n));
	int o, w, i, j;

	for (o = 0; o < len; o += n) {
		float *p = x + o;

		for (i = 0; i < n; i += 8) {	/* the passes within a vector first */
			__m256 r = _mm256_loadu_ps(p + i);

			r = FWHT_IN(r, _mm256_permute_ps(r, 0xb1), 0xaa);
			r = FWHT_IN(r, _mm256_permute_ps(r, 0x4e), 0xcc);
			r = FWHT_IN(r, _mm256_permute2f128_ps(r, r, 0x01), 0xf0);
			_mm256_storeu_ps(p + i, r);
		}
		for (w = 8; w < n; w *= 2)
			for (i = 0; i < n; i += 2 * w)
				for (j = i; j < i + w; j += 8) {
					__m256 a = _mm256_loadu_ps(p + j), b = _mm256_loadu_ps(p + j + w);

					_mm256_storeu_ps(p + j, _mm256_add_ps(a, b));
					_mm256_storeu_ps(p + j + w, _mm256_sub_ps(a, b));
				}
		for (i = 0; i < n; i += 8)
			_mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), s));
	}
}

#undef FWHT_IN

const struct kve_kernels kve_kernels_avx2 = {
	.name = "avx2",
	.mm_f32 = mm_0,
	.mm_f16 = mm_1,
	.mm_q8 = mm_q8,
	.dot_f32 = dot_f32,
	.dot_f16 = dot_f16,
	.axpy_f32 = axpy_f32,
	.axpy_f16 = axpy_f16,
	.quantize_q8x = kve_quantize_q8x_avx2,
	.quantize_q8k = kve_quantize_q8k_avx2,
	.mm_bf16 = mm_2,
	.mm_q32 = mm_q32,
	.mm_qk = mm_qk,
	.f32_to_f16 = kve_f32_to_f16_avx2,
	.silu_mul = kve_silu_mul_avx2,
	.attn_scores = attn_scores,
	.softmax_exp = kve_softmax_exp_avx2,
	.attn_values = attn_values,
	.attn_scores_q8 = kvq8_scores_256,
	.attn_values_q8 = kvq8_values_256,
	.hadamard = hadamard_256,
	.rmsnorm = kve_rmsnorm_avx2,
};
