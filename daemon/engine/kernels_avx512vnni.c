// SPDX-License-Identifier: MIT
/*
 * kernels_avx512vnni.c - the Q8_0 matrix product with AVX-512 VNNI.
 * Compiled for that target only; kernels.c uses it, in the "avx512vnni"
 * set (the AVX-512 set with this mm_q8), only on a CPU reporting AVX-512
 * F, BW, VL and VNNI, and after it passes the self-check.
 *
 * vpdpbusd multiplies unsigned by signed bytes. The AVX-512 set makes the
 * operands fit by moving each weight's sign onto the activation (abs,
 * then a masked negate per row and token). Here the weights are made
 * unsigned instead, w + 128 (w ^ 0x80, right for every int8), one xor
 * per row shared by the tile's tokens, and the offset is taken back out
 * by starting each lane at -128 * (the sum of its four x), one vpdpbusd
 * per token shared by the tile's rows:
 *   lane = -128 * sum(x) + sum((w + 128) * x) = sum(x * w).
 * (It was the other way round, x + 128 and -128 * sum(w): a vpdpbusd and
 * a subtraction per row, which a one-token tile pays for each row.) So
 * each (row, token) costs one vpdpbusd, one convert and one FMA with the
 * scale; a one-token tile over a panel multiplies its 4 rows' scales by
 * dx at once. The lanes are the exact integers the AVX-512 set computes,
 * and the float steps after them are the same operations on the same
 * values in the same order (hsum16 and the per-block scale dw * dx from
 * kernels_q8_avx512.h), so the results equal that set's bit for bit.
 */
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

/* its helpers only (hsum16, hsum16x4, load2, prefetch_ahead): no
 * Q8_MM_NAME, so not the sign-form tile */
#include "kernels_q8_avx512.h"

/* the 4- to 6-bit types with vpdpbusd / vpdpwssd: the same int32 lanes as
 * the AVX-512 set's maddubs and madd (kernels_quant_avx512.h) */
#define KQ_VNNI		1
#define KQ_MM_Q32	kve_mm_q32_avx512vnni
#define KQ_MM_QK	kve_mm_qk_avx512vnni
#define KQ_LINKAGE
#include "kernels_quant_avx512.h"

/* [s0 x 8 | s1 x 8]: one scale per 32-value block of a two-block vector */
KVE_INLINE __m512 two_scales(float s0, float s1)
{
	return _mm512_castpd_ps(_mm512_insertf64x4(
		_mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(s0))),
		_mm256_castps_pd(_mm256_set1_ps(s1)), 1));
}

/*
 * y[t + j][r + i] for R rows (of a 4-row group) by C tokens. Blocks go in
 * pairs; an odd last block pairs with itself, its upper half zeroed on
 * the activation side (both lanes then sum to exactly 0) and scaled by 0.
 */
KVE_INLINE void tile_q8_vnni(const struct kve_mat *w, const struct kve_q8x *xq,
			     float *y, int ldy, int r, int t, const int R, const int C)
{
	__m512 acc[4][4];
	const uint8_t *sp[4], *qp[4];
	const size_t step = kve_q8_bstep(w);
	const struct kve_q8x *xt[4];
	const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8((char)0x80);
	int nb = (int)w->cols / QK8_0, b, i, j;
	/* 4 rows of one panel (a row slice may start inside a panel) */
	const int one_panel = R == 4 && w->panel && r % KVE_PANEL_Q8 == 0;

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
		xt[j] = xq + (size_t)(t + j) * nb;
	for (b = 0; b < nb; b += 2) {
		const int two = b + 1 < nb;
		const size_t o0 = (size_t)b * step, o1 = two ? o0 + step : o0;
		__m512i xs[4], offx[4];
		__m512 dx[4], dw4 = _mm512_setzero_ps();

		if (C == 1 && w->panel)	/* decode: as kernels_avx2.c's prefetch_q8 */
			prefetch_ahead(sp[0] + o0 + PF_AHEAD_Q8,
				       2 * KVE_PANEL_Q8 * Q8_0_BYTES);	/* 2 * step */
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			/* a missing block's zeros: its lanes sum to 0 (its
			 * weights are block b's again) */
			xs[j] = two ? load2(xt[j][b].q, xt[j][b + 1].q) :
				_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)xt[j][b].q));
			/* -128 * the sum of each lane's four x */
			offx[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xs[j]));
			dx[j] = two_scales(xt[j][b].d, two ? xt[j][b + 1].d : 0.0f);
		}
		if (one_panel) {	/* the panel's 4 scales side by side */
			uint64_t h0, h1;

			memcpy(&h0, sp[0] + o0, 8);
			memcpy(&h1, sp[0] + o1, 8);
			dw4 = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi64x((long long)h1,
										    (long long)h0)));
			if (C == 1)	/* dw * dx for the 4 rows at once */
				dw4 = _mm512_mul_ps(dw4, _mm512_castps256_ps512(_mm256_set_m128(
					_mm_set1_ps(two ? xt[0][b + 1].d : 0.0f),
					_mm_set1_ps(xt[0][b].d))));
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			/* w + 128 */
			const __m512i wu = _mm512_xor_si512(load2(qp[i] + o0, qp[i] + o1), bias);
			__m512 dw;

			if (one_panel) {
				/* [row i's scale of block b x 8 | of block b + 1 x 8 (or 0)] */
				dw = _mm512_maskz_permutexvar_ps(two ? 0xffff : 0x00ff,
					_mm512_setr_epi32(i, i, i, i, i, i, i, i, i + 4, i + 4, i + 4,
							  i + 4, i + 4, i + 4, i + 4, i + 4), dw4);
			} else {
				uint16_t h0, h1;

				memcpy(&h0, sp[i] + o0, 2);
				memcpy(&h1, sp[i] + o1, 2);
				dw = two_scales(_cvtsh_ss(h0), two ? _cvtsh_ss(h1) : 0.0f);
			}
#pragma GCC unroll 4
			for (j = 0; j < C; j++) {
				__m512i p = _mm512_dpbusd_epi32(offx[j], wu, xs[j]);

				/* one panel, one token: dw is dw * dx already */
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
							    one_panel && C == 1 ? dw :
							    _mm512_mul_ps(dw, dx[j]), acc[i][j]);
			}
		}
	}
	if (R == 4) {
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			_mm_storeu_ps(y + (size_t)(t + j) * ldy + r,
				      hsum16x4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
		return;
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum16(acc[i][j]);
}

/*
 * Q8_0 x16 (engine_internal.h): y[t + j][r..r + 15] for C tokens. Per
 * block, each token's 8 vpdpbusd of the 16 rows' weights + 128 (unsigned)
 * by its 4 quants broadcast, from -128 * the block's quant sum, leave the
 * exact integer sums; then, per lane, s += (float)isum * (dw * dx): the
 * portable product's operations in its order, so its bits.
 */
KVE_INLINE void tile_q8x16(const struct kve_mat *w, const struct kve_q8x *xq, float *y,
			   int ldy, int r, int t, const int C)
{
	const int nb = (int)w->cols / QK8_0;
	const uint8_t *p = kve_q8x16_blk(w, (uint32_t)r, 0);
	const __m512i bias = _mm512_set1_epi8((char)0x80);
	__m512 acc[4];
	int b, j, g;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm512_setzero_ps();
	for (b = 0; b < nb; b++, p += KVE_Q8X16_BLK) {
		const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		const struct kve_q8x *x[4];
		__m512i is[4];

		if (C == 1)
			prefetch_ahead(p + PF_AHEAD_Q8, KVE_Q8X16_BLK);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			x[j] = xq + (size_t)(t + j) * nb + b;
			is[j] = _mm512_set1_epi32(-128 * x[j]->sum);
		}
#pragma GCC unroll 8
		for (g = 0; g < QK8_0 / 4; g++) {
			const __m512i v = _mm512_xor_si512(kq_load1(p + 32 + 64 * g), bias);

#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				is[j] = kq_dot_bc(is[j], v, x[j]->q + 4 * g);
		}
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(is[j]),
					_mm512_mul_ps(dw, _mm512_set1_ps(x[j]->d))));
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

KQ_ROWS_X16(rows_q8x16, struct kve_q8x, tile_q8x16, kve_mm_q8_c)

void kve_mm_q8_avx512vnni(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			  float *y, int ldy, int r0, int r1)
{
	int r = r0, t;

	if (w->panel == KVE_PANEL_Q8X16) {
		rows_q8x16(w, xq, T, y, ldy, r0, r1);
		return;
	}

	for (; r + 4 <= r1; r += 4) {
		for (t = 0; t + 4 <= T; t += 4)
			tile_q8_vnni(w, xq, y, ldy, r, t, 4, 4);
		if (t + 2 <= T) {
			tile_q8_vnni(w, xq, y, ldy, r, t, 4, 2);
			t += 2;
		}
		if (t < T)
			tile_q8_vnni(w, xq, y, ldy, r, t, 4, 1);
	}
	for (; r < r1; r++)
		for (t = 0; t < T; t++)
			tile_q8_vnni(w, xq, y, ldy, r, t, 1, 1);
}

/*
 * Attention scores over a Q8_0 KV (KVE_KV_Q8_0 slabs), sixteen rows a
 * vector, a lane a row: K's quants lie in fours, offset by 128
 * (kvengine.h), so one vpdpbusd takes four dimensions of sixteen rows
 * against the query head's four (broadcast), each lane started at -128 x
 * the block's query quant sum (the offset, as above); a block of 32 is 8
 * of them, with no reduction across lanes. Then per block the float steps
 * of kve_attn_scores_q8_c on the sixteen rows at once, in its order: the
 * same bits. Each K vector is loaded once for all heads of the call.
 */
#include "kernels_kvq8_avx2.h"

KVE_INLINE void kvq8_rows16(const struct kve_q8x *q, const uint8_t *k, const uint8_t *kq,
			    int bt, int j, int m, int nb, float scale, float *sc, size_t ss,
			    const int nh)
{
	__mmask16 mk = (__mmask16)((1u << m) - 1);
	__m512 s[KVE_ATTN_HEADS];
	int b, g, h;

#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
		s[h] = _mm512_setzero_ps();	/* the first block sets them */
	for (b = 0; b < nb; b++) {
		__m512i acc[KVE_ATTN_HEADS];
		__m512 dk = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, k + ((size_t)b * bt + j) * 2));

#pragma GCC unroll 4
		for (h = 0; h < nh; h++)
			acc[h] = _mm512_set1_epi32(-128 * q[(size_t)h * nb + b].sum);
#pragma GCC unroll 8
		for (g = 0; g < QK8_0 / 4; g++) {
			__m512i kv = _mm512_maskz_loadu_epi32(mk, kq + ((size_t)(b * QK8_0 / 4 + g) * bt +
									j) * 4);

#pragma GCC unroll 4
			for (h = 0; h < nh; h++) {
				int32_t q4;

				memcpy(&q4, q[(size_t)h * nb + b].q + 4 * g, 4);
				acc[h] = _mm512_dpbusd_epi32(acc[h], kv, _mm512_set1_epi32(q4));
			}
		}
#pragma GCC unroll 4
		for (h = 0; h < nh; h++) {
			__m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[h]),
						 _mm512_mul_ps(dk, _mm512_set1_ps(q[(size_t)h * nb + b].d)));

			s[h] = b ? _mm512_add_ps(s[h], f) : f;
		}
	}
#pragma GCC unroll 4
	for (h = 0; h < nh; h++)
		_mm512_mask_storeu_ps(sc + (size_t)h * ss + j, mk,
				      _mm512_mul_ps(s[h], _mm512_set1_ps(scale)));
}

void kve_attn_scores_q8_avx512vnni(const struct kve_q8x *q, int nh, const uint8_t *k, int bt,
				   int n, int hd, float scale, float *sc, size_t ss)
{
	const uint8_t *kq = (const uint8_t *)kve_kvq8_quants(k, bt, hd);
	int nb = hd / QK8_0, j;

	if (nh > KVE_ATTN_HEADS) {
		kvq8_scores_256(q, nh, k, bt, n, hd, scale, sc, ss);
		return;
	}
	for (j = 0; j < n; j += 16) {
		int m = n - j < 16 ? n - j : 16;

		switch (nh) {
		case 1: kvq8_rows16(q, k, kq, bt, j, m, nb, scale, sc, ss, 1); break;
		case 2: kvq8_rows16(q, k, kq, bt, j, m, nb, scale, sc, ss, 2); break;
		case 3: kvq8_rows16(q, k, kq, bt, j, m, nb, scale, sc, ss, 3); break;
		default: kvq8_rows16(q, k, kq, bt, j, m, nb, scale, sc, ss, 4); break;
		}
	}
}
