// SPDX-License-Identifier: MIT
/*
 * kernels_avx512.c - AVX-512 (F, BW, VL) kernels, compiled for that target
 * only and chosen at run time by kernels.c when the CPU has it. Same
 * contract and tiling as kernels_avx2.c with 16-float vectors; Q8_0 handles
 * two 32-value blocks per 512-bit vector.
 */
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

/* maddubs: |w| * sign(x, w) pairs to int16, madd: adjacent pairs to int32 */
KVE_INLINE __m512i q8_dot16(__m512i a, __m512i b)
{
	return _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1));
}

#define Q8_MM_NAME	mm_q8
#define Q8_MM_LINKAGE	static
#include "kernels_q8_avx512.h"

/* the 4- to 6-bit types, maddubs then madd */
#define KQ_VNNI		0
#define KQ_MM_Q32	mm_q32
#define KQ_MM_QK	mm_qk
#define KQ_LINKAGE	static
#include "kernels_quant_avx512.h"

/* decode prefetch distances over a packed panel, in bytes (0: none;
 * PF_AHEAD_Q8: kernels_q8_avx512.h). F16: 8 KiB, as Q8_0; on the Zen 5
 * (GQA F16 decode, 1 thread, alternating runs) the fastest step took
 * 2160-2300 us at 1 KiB (the AVX2 set's distance), 1970-2030 with none,
 * 1775-1985 at 4 KiB, 1490-1570 at 8-16 KiB and 1615-2395 at 32 KiB */
#ifndef PF_AHEAD_F16
#define PF_AHEAD_F16	8192
#endif
#ifndef PF_AHEAD_F32
#define PF_AHEAD_F32	0
#endif

/* 16 values: the chunk at p and the next one, step bytes on
 * (kve_mat_cstep; the two are adjacent when row-major) */
KVE_INLINE __m512 load_w(const uint8_t *p, size_t step, int f16)
{
	if (f16 == 2)	/* BF16: its bits are a float's upper half */
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
			_mm256_inserti128_si256(
				_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
				_mm_loadu_si128((const __m128i *)(p + step)), 1)), 16));
	if (f16)
		return _mm512_cvtph_ps(_mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
			_mm_loadu_si128((const __m128i *)(p + step)), 1));
	return _mm512_castpd_ps(_mm512_insertf64x4(
		_mm512_castpd256_pd512(_mm256_loadu_pd((const double *)p)),
		_mm256_loadu_pd((const double *)(p + step)), 1));
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
	const int pf = f16 ? PF_AHEAD_F16 : PF_AHEAD_F32;

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
		if (C == 1 && R == 4 && w->panel && pf > 0)
			prefetch_ahead(rows[0] + (size_t)(k / 8) * step + pf, 2 * step);
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
	if (R % 4 == 0 && kv == cols) {	/* four rows' sums at once */
#pragma GCC unroll 2
		for (i = 0; i < R; i += 4)
#pragma GCC unroll 6
			for (j = 0; j < C; j++)
				_mm_storeu_ps(y + (size_t)(t + j) * ldy + r + i,
					      hsum16x4(acc[i][j], acc[i + 1][j], acc[i + 2][j],
						       acc[i + 3][j]));
		return;
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

/* Two rows' 8 values of a panel chunk, side by side, as 16 floats. F32:
 * two 32-byte loads (GGUF aligns tensors to 32 bytes only; single 64-byte
 * loads straddling lines were 14% slower than tile_f on a Zen 5). */
KVE_INLINE __m512 two_rows(const uint8_t *p, int f16)
{
	if (f16 == 2)
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
	if (f16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
	return _mm512_castpd_ps(_mm512_insertf64x4(
		_mm512_castpd256_pd512(_mm256_loadu_pd((const double *)p)),
		_mm256_loadu_pd((const double *)(p + 32)), 1));
}

/*
 * Decode over one packed panel (4 rows from r, r a multiple of 4, cols a
 * multiple of 16): tile_f's R = 4, C = 1 case with about half the
 * instructions. A panel's chunk of 8 columns holds the 4 rows side by
 * side (64 bytes F16, 128 F32), so one value takes two rows' 8 values:
 * accumulator a01 holds rows 0 and 1 at columns k..k+7 in its halves,
 * c01 the same at k+8..k+15 (b23, d23: rows 2 and 3). Row i's lanes are
 * then tile_f's, each summing the same products in the same order, and
 * hsum16x4 sums them as hsum16 does: the same bits.
 */
KVE_INLINE void panel1(const struct kve_mat *w, const float *x, float *y, int r,
		       const int f16)
{
	const uint8_t *p = kve_mat_chunk(w, (uint32_t)r, 0);
	const size_t half = f16 ? 32 : 64;	/* two rows of one chunk */
	const int pf = f16 ? PF_AHEAD_F16 : PF_AHEAD_F32;
	__m512 a01 = _mm512_setzero_ps(), b23 = a01, c01 = a01, d23 = a01;
	int k;

	for (k = 0; k < (int)w->cols; k += 16, p += 4 * half) {
		__m512 xv = _mm512_loadu_ps(x + k);
		__m512 xlo = _mm512_shuffle_f32x4(xv, xv, 0x44);	/* [x0-7 | x0-7] */
		__m512 xhi = _mm512_shuffle_f32x4(xv, xv, 0xee);	/* [x8-15 | x8-15] */

		if (pf > 0)
			prefetch_ahead(p + pf, 4 * half);
		a01 = _mm512_fmadd_ps(two_rows(p, f16), xlo, a01);
		b23 = _mm512_fmadd_ps(two_rows(p + half, f16), xlo, b23);
		c01 = _mm512_fmadd_ps(two_rows(p + 2 * half, f16), xhi, c01);
		d23 = _mm512_fmadd_ps(two_rows(p + 3 * half, f16), xhi, d23);
	}
	_mm_storeu_ps(y + r, hsum16x4(_mm512_shuffle_f32x4(a01, c01, 0x44),
				      _mm512_shuffle_f32x4(a01, c01, 0xee),
				      _mm512_shuffle_f32x4(b23, d23, 0x44),
				      _mm512_shuffle_f32x4(b23, d23, 0xee)));
}

#define TILE_CASES(F16)                                                      \
	static void mm_##F16(const struct kve_mat *w, const float *x, int T, \
			     float *y, int ldy, int r0, int r1)              \
	{                                                                    \
		int r = r0, t;                                               \
		if (T == 1) {                                                \
			for (; w->panel && r + 4 <= r1; r += 4)    /* a panel */ \
				if (r % 4 == 0 && w->cols % 16 == 0)         \
					panel1(w, x, y, r, F16);             \
				else                                         \
					tile_f(w, x, y, ldy, r, 0, 4, 1, F16); \
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
TILE_CASES(2)	/* BF16: F16's tiles with the other conversion */

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

KVE_INLINE __m512 load_k16(const uint8_t *row, int i, int f16)
{
	if (f16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)i)));
	return _mm512_loadu_ps((const float *)row + i);
}

/* four keys' dots with nh query heads at once: each the dot_f16/dot_f32
 * chain, hsum16x4 the same sums as hsum16, so each score is the row
 * helper's bit for bit; each K vector loaded once for all heads */
KVE_INLINE void scores4(const float *q, const uint8_t *k, const int f16, int hd, float scale,
			float *sc, size_t ss, const int nh)
{
	size_t rb = (size_t)hd * (f16 ? 2 : 4);
	__m512 a[KVE_ATTN_HEADS][4];
	int h, i, r;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 4
		for (r = 0; r < 4; r++)
			a[h][r] = _mm512_setzero_ps();
	for (i = 0; i < hd; i += 16) {
		__m512 kv[4];

#pragma GCC unroll 4
		for (r = 0; r < 4; r++)
			kv[r] = load_k16(k + r * rb, i, f16);
#pragma GCC unroll 4
		for (h = 0; h < nh; h++) {
			__m512 qv = _mm512_loadu_ps(q + (size_t)h * hd + i);

#pragma GCC unroll 4
			for (r = 0; r < 4; r++)
				a[h][r] = _mm512_fmadd_ps(qv, kv[r], a[h][r]);
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
		_mm_storeu_ps(sc + (size_t)h * ss, _mm_mul_ps(hsum16x4(a[h][0], a[h][1], a[h][2],
								       a[h][3]),
							      _mm_set1_ps(scale)));
}

KVE_INLINE void attn_scores_i(const float *q, int nh, const uint8_t *k, const int f16, int n,
			      int hd, float scale, float *sc, size_t ss)
{
	size_t rb = (size_t)hd * (f16 ? 2 : 4);
	int h, j = 0;

	if (hd % 16 == 0)
		for (; j + 4 <= n; j += 4) {
			switch (nh) {
			case 1: scores4(q, k + j * rb, f16, hd, scale, sc + j, ss, 1); break;
			case 2: scores4(q, k + j * rb, f16, hd, scale, sc + j, ss, 2); break;
			case 3: scores4(q, k + j * rb, f16, hd, scale, sc + j, ss, 3); break;
			default: scores4(q, k + j * rb, f16, hd, scale, sc + j, ss, 4); break;
			}
		}
	for (; j < n; j++)
		for (h = 0; h < nh; h++) {
			const float *qh = q + (size_t)h * hd;

			sc[(size_t)h * ss + j] =
				(f16 ? dot_f16(qh, (const uint16_t *)(k + j * rb), hd) :
				       dot_f32(qh, (const float *)(k + j * rb), hd)) * scale;
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

/* out_h += p_h[j] * V_j for nh heads, nv vectors (16 columns each) from
 * column c0 held in registers: the same fma per element, in the same row
 * order, as axpy row by row; each V vector loaded once for all heads
 * (nh * nv <= 16) */
KVE_INLINE void values_nv(float *out, const float *p, size_t ps, const uint8_t *v,
			  const int f16, int n, int hd, int c0, const int nh, const int nv)
{
	size_t rb = (size_t)hd * (f16 ? 2 : 4);
	__m512 acc[KVE_ATTN_HEADS][8], av[KVE_ATTN_HEADS];
	int h, i, j;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 8
		for (i = 0; i < nv; i++)
			acc[h][i] = _mm512_loadu_ps(out + (size_t)h * hd + c0 + 16 * i);
	for (j = 0; j < n; j++) {
#pragma GCC unroll 4
		for (h = 0; h < nh; h++)
			av[h] = _mm512_set1_ps(p[(size_t)h * ps + j]);
#pragma GCC unroll 8
		for (i = 0; i < nv; i++) {
			__m512 w = load_k16(v + j * rb, c0 + 16 * i, f16);

#pragma GCC unroll 4
			for (h = 0; h < nh; h++)
				acc[h][i] = _mm512_fmadd_ps(av[h], w, acc[h][i]);
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 8
		for (i = 0; i < nv; i++)
			_mm512_storeu_ps(out + (size_t)h * hd + c0 + 16 * i, acc[h][i]);
}

#define VN(NH, NV) values_nv(out, p, ps, v, f16, n, hd, c0, NH, NV)

KVE_INLINE void attn_values_i(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			      const int f16, int n, int hd)
{
	int vmax = nh <= 2 ? 8 : 4;	/* nh * vmax <= 16 accumulators */
	int c0, h, j, nv;

	if (hd % 16) {
		for (h = 0; h < nh; h++)
			for (j = 0; j < n; j++) {
				float *oh = out + (size_t)h * hd;
				float a = p[(size_t)h * ps + j];

				if (f16)
					axpy_f16(oh, a, (const uint16_t *)v + (size_t)j * hd, hd);
				else
					axpy_f32(oh, a, (const float *)v + (size_t)j * hd, hd);
			}
		return;
	}
	for (c0 = 0; c0 < hd; c0 += 16 * nv) {
		nv = (hd - c0) / 16 < vmax ? (hd - c0) / 16 : vmax;
		if (nh <= 2) {
			switch (nv + 8 * (nh - 1)) {
			case 1: VN(1, 1); break;
			case 2: VN(1, 2); break;
			case 3: VN(1, 3); break;
			case 4: VN(1, 4); break;
			case 5: VN(1, 5); break;
			case 6: VN(1, 6); break;
			case 7: VN(1, 7); break;
			case 8: VN(1, 8); break;
			case 9: VN(2, 1); break;
			case 10: VN(2, 2); break;
			case 11: VN(2, 3); break;
			case 12: VN(2, 4); break;
			case 13: VN(2, 5); break;
			case 14: VN(2, 6); break;
			case 15: VN(2, 7); break;
			default: VN(2, 8); break;
			}
		} else {
			switch (nv + 4 * (nh - 3)) {
			case 1: VN(3, 1); break;
			case 2: VN(3, 2); break;
			case 3: VN(3, 3); break;
			case 4: VN(3, 4); break;
			case 5: VN(4, 1); break;
			case 6: VN(4, 2); break;
			case 7: VN(4, 3); break;
			default: VN(4, 4); break;
			}
		}
	}
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

#include "kernels_kvq8_avx2.h"

/* kvq8_values_256 with a 64-column window of nh heads in registers, and
 * each (p * scale) made for 16 rows at once: the same operations per
 * element ((p * scale) then one fused multiply-add per row, rows in
 * order), so the same bits. a: [head][block of the window][row] */
KVE_INLINE void kvq8_values_win(float *out, const float *a, const int8_t *vq, int n, int hd,
				int c0, const int nh)
{
	__m512 acc[KVE_ATTN_HEADS][4];
	int h, i, j;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 4
		for (i = 0; i < 4; i++)
			acc[h][i] = _mm512_loadu_ps(out + (size_t)h * hd + c0 + 16 * i);
	for (j = 0; j < n; j++) {
		const int8_t *r = vq + (size_t)j * hd + c0;
		__m512 w[4];

#pragma GCC unroll 4
		for (i = 0; i < 4; i++)
			w[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
				_mm_loadu_si128((const __m128i *)(r + 16 * i))));
#pragma GCC unroll 4
		for (h = 0; h < nh; h++) {
			__m512 a0 = _mm512_set1_ps(a[(h * 2) * 16 + j]);
			__m512 a1 = _mm512_set1_ps(a[(h * 2 + 1) * 16 + j]);

			acc[h][0] = _mm512_fmadd_ps(a0, w[0], acc[h][0]);
			acc[h][1] = _mm512_fmadd_ps(a0, w[1], acc[h][1]);
			acc[h][2] = _mm512_fmadd_ps(a1, w[2], acc[h][2]);
			acc[h][3] = _mm512_fmadd_ps(a1, w[3], acc[h][3]);
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
#pragma GCC unroll 4
		for (i = 0; i < 4; i++)
			_mm512_storeu_ps(out + (size_t)h * hd + c0 + 16 * i, acc[h][i]);
}

/* kve_hadamard_c, sixteen values a vector: the passes 16 apart and more
 * between vectors, those within one by a swap of its halves, quarters,
 * pairs or neighbours and a blend of the sums and differences: the same
 * sum or difference for every value, so the same bits */
KVE_INLINE __m512 fwht_in(__m512 r, __m512 t, __mmask16 hi)
{
	return _mm512_mask_sub_ps(_mm512_add_ps(r, t), hi, t, r);
}

static void hadamard_512(float *x, int len, int n)
{
	__m512 s = _mm512_set1_ps(1.0f / sqrtf((float)n));
	int o, w, i, j;

	for (o = 0; o < len; o += n) {
		float *p = x + o;

		for (i = 0; i < n; i += 16) {	/* the passes within a vector first */
			__m512 r = _mm512_loadu_ps(p + i);

			r = fwht_in(r, _mm512_permute_ps(r, 0xb1), 0xaaaa);
			r = fwht_in(r, _mm512_permute_ps(r, 0x4e), 0xcccc);
			r = fwht_in(r, _mm512_shuffle_f32x4(r, r, 0xb1), 0xf0f0);
			r = fwht_in(r, _mm512_shuffle_f32x4(r, r, 0x4e), 0xff00);
			_mm512_storeu_ps(p + i, r);
		}
		for (w = 16; w < n; w *= 2)
			for (i = 0; i < n; i += 2 * w)
				for (j = i; j < i + w; j += 16) {
					__m512 a = _mm512_loadu_ps(p + j), b = _mm512_loadu_ps(p + j + w);

					_mm512_storeu_ps(p + j, _mm512_add_ps(a, b));
					_mm512_storeu_ps(p + j + w, _mm512_sub_ps(a, b));
				}
		for (i = 0; i < n; i += 16)
			_mm512_storeu_ps(p + i, _mm512_mul_ps(_mm512_loadu_ps(p + i), s));
	}
}

static void kvq8_values_512(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			    int bt, int n, int hd)
{
	const int8_t *vq = kve_kvq8_quants(v, bt, hd);
	float a[KVE_ATTN_HEADS * 2 * 16];
	int c0, j0, h, b;

	if (hd % 64 || nh > KVE_ATTN_HEADS) {
		kvq8_values_256(out, nh, p, ps, v, bt, n, hd);
		return;
	}
	for (j0 = 0; j0 < n; j0 += 16) {
		int m = n - j0 < 16 ? n - j0 : 16;
		__mmask16 mk = (__mmask16)((1u << m) - 1);

		for (c0 = 0; c0 < hd; c0 += 64) {
			/* p * the scale, for the window's two blocks and m rows */
			for (b = 0; b < 2; b++) {
				__m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, v +
					((size_t)(c0 / QK8_0 + b) * bt + j0) * 2));

				for (h = 0; h < nh; h++)
					_mm512_storeu_ps(a + (h * 2 + b) * 16, _mm512_mul_ps(
						_mm512_maskz_loadu_ps(mk, p + (size_t)h * ps + j0), d));
			}
			switch (nh) {
			case 1: kvq8_values_win(out, a, vq + (size_t)j0 * hd, m, hd, c0, 1); break;
			case 2: kvq8_values_win(out, a, vq + (size_t)j0 * hd, m, hd, c0, 2); break;
			case 3: kvq8_values_win(out, a, vq + (size_t)j0 * hd, m, hd, c0, 3); break;
			default: kvq8_values_win(out, a, vq + (size_t)j0 * hd, m, hd, c0, 4); break;
			}
		}
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
	.attn_values_q8 = kvq8_values_512,
	.hadamard = hadamard_512,
	.rmsnorm = kve_rmsnorm_avx2,
	.q4_0_x16 = 1,
	.qk_x16 = 1,
};
