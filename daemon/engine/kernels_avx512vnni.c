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
 * Attention scores over a Q8_0 KV (KVE_KV_Q8_0 slabs), eight rows at a
 * time, two blocks (64 quants) a vector: per row and query head one
 * vpdpbusd of the row made unsigned (x ^ 0x80, shared by the heads)
 * against the head's quants, each lane started at -128 * the sum of its
 * four quants (the offset above); the lanes summed as integers to
 * [block 2c: rows 0-7 | block 2c + 1: rows 0-7]; then the float steps of
 * kve_attn_scores_q8_c on eight rows at once, in its order: the same
 * bits. A head dimension that is not a multiple of 64 takes the 256-bit
 * kernel.
 */
#include "kernels_kvq8_avx2.h"

/* the sixteen lanes of each of v[0..7] summed by block half:
 * [v0..v7 low 8 lanes | v0..v7 high 8 lanes] (exact: integers) */
KVE_INLINE __m512i kvq8_hsum_rows(const __m512i *v)
{
	__m512i t[4], u0, u1, s;
	int i;

	for (i = 0; i < 4; i++)
		t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
					_mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
	u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
	u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
	/* quarters: u0 = rows 0-3, u1 = rows 4-7, of [A, A, B, B] */
	s = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
			     _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
	/* [A 0-3, B 0-3, A 4-7, B 4-7] -> [A 0-7 | B 0-7] */
	return _mm512_shuffle_i32x4(s, s, _MM_SHUFFLE(3, 1, 2, 0));
}

/* eight rows from row j (m of them real: the rest repeat the last, and
 * their scales are 0) for nh heads, block pair c */
KVE_INLINE void kvq8_rows8(const uint8_t *k, const int8_t *kq, int j, int m, int nb, int hd,
			   int c, const __m512i *qv, const __m512i *init, const __m512 *dq,
			   __m256 *s, const int nh)
{
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	const __m512i lo_first = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14,
						   1, 3, 5, 7, 9, 11, 13, 15);
	int cs = nb / 2, h, u;
	__m512i xu[8];
	__m512 dk;

#pragma GCC unroll 8
	for (u = 0; u < 8; u++)
		xu[u] = _mm512_xor_si512(_mm512_loadu_si512(kq + (size_t)(j + (u < m ? u : m - 1)) *
							     hd + c * 64), flip);
	/* the rows' scales of blocks 2c and 2c + 1: [r0 A, r0 B, r1 A, ...] */
	if (nb == 2 && m == 8) {
		dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + (size_t)j * 4)));
	} else {
		uint32_t dpair[8] = { 0 };

		for (u = 0; u < m; u++)
			memcpy(&dpair[u], k + ((size_t)(j + u) * nb + 2 * c) * 2, 4);
		dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dpair));
	}
	dk = _mm512_permutexvar_ps(lo_first, dk);
#pragma GCC unroll 4
	for (h = 0; h < nh; h++) {
		__m512i v[8];
		__m512 f;
		__m256 lo, hi;

#pragma GCC unroll 8
		for (u = 0; u < 8; u++)
			v[u] = _mm512_dpbusd_epi32(init[h * cs + c], xu[u], qv[h * cs + c]);
		f = _mm512_mul_ps(_mm512_cvtepi32_ps(kvq8_hsum_rows(v)),
				  _mm512_mul_ps(dk, dq[h * cs + c]));
		lo = _mm512_castps512_ps256(f);
		hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1));
		s[h] = _mm256_add_ps(c ? _mm256_add_ps(s[h], lo) : lo, hi);
	}
}

void kve_attn_scores_q8_avx512vnni(const struct kve_q8x *q, int nh, const uint8_t *k, int bt,
				   int n, int hd, float scale, float *sc, size_t ss)
{
	const int8_t *kq = kve_kvq8_quants(k, bt, hd);
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	int nb = hd / QK8_0, cs = nb / 2, j, c, h;
	/* per head and block pair: its quants, the lanes' starts, its scales */
	__m512i qv[KVE_ATTN_HEADS * 1024 / 64], init[KVE_ATTN_HEADS * 1024 / 64];
	__m512 dq[KVE_ATTN_HEADS * 1024 / 64];

	if (hd % 64 || nh > KVE_ATTN_HEADS) {
		kvq8_scores_256(q, nh, k, bt, n, hd, scale, sc, ss);
		return;
	}
	for (h = 0; h < nh; h++)
		for (c = 0; c < cs; c++) {
			const struct kve_q8x *qb = q + (size_t)h * nb + 2 * c;

			qv[h * cs + c] = _mm512_inserti64x4(_mm512_castsi256_si512(
				_mm256_loadu_si256((const __m256i *)qb[0].q)),
				_mm256_loadu_si256((const __m256i *)qb[1].q), 1);
			init[h * cs + c] = _mm512_sub_epi32(_mm512_setzero_si512(),
				_mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, qv[h * cs + c]));
			dq[h * cs + c] = two_scales(qb[0].d, qb[1].d);
		}
	for (j = 0; j < n; j += 8) {
		int m = n - j < 8 ? n - j : 8;
		__m256 s[KVE_ATTN_HEADS];

		for (c = 0; c < cs; c++) {
			switch (nh) {
			case 1: kvq8_rows8(k, kq, j, m, nb, hd, c, qv, init, dq, s, 1); break;
			case 2: kvq8_rows8(k, kq, j, m, nb, hd, c, qv, init, dq, s, 2); break;
			case 3: kvq8_rows8(k, kq, j, m, nb, hd, c, qv, init, dq, s, 3); break;
			default: kvq8_rows8(k, kq, j, m, nb, hd, c, qv, init, dq, s, 4); break;
			}
		}
		for (h = 0; h < nh; h++)
			_mm256_mask_storeu_ps(sc + (size_t)h * ss + j, (__mmask8)((1u << m) - 1),
					      _mm256_mul_ps(s[h], _mm256_set1_ps(scale)));
	}
}
