/* SPDX-License-Identifier: MIT */
/*
 * kernels_q8_avx512.h - the 512-bit Q8_0 helpers (hsum16, hsum16x4,
 * load2, prefetch_ahead) for kernels_avx512.c and kernels_avx512vnni.c,
 * and the sign-form product (two 32-value blocks per vector) when the
 * includer defines, before including:
 *   q8_dot16(a, b): 16 int32 lanes, lane i = sum of a[4i..4i+3] *
 *     b[4i..4i+3] (a unsigned, b signed bytes; the products are at most
 *     128 * 127 and never saturate an int16 pair)
 *   Q8_MM_NAME, Q8_MM_LINKAGE: the product's name and linkage
 * kernels_avx512.c does (maddubs + madd); kernels_avx512vnni.c has its
 * own tile over the same integer lanes and takes only the helpers.
 */
#ifndef KVE_KERNELS_Q8_AVX512_H
#define KVE_KERNELS_Q8_AVX512_H

KVE_INLINE float hsum16(__m512 v)
{
	return _mm512_reduce_add_ps(v);
}

/*
 * hsum16 of a, b, c and d at once, as [a b c d]: the same additions of
 * the same pairs as _mm512_reduce_add_ps (lane k + lane k+8, then k + k+4,
 * k + k+2, k + k+1), so the same bits, in 14 instructions where four
 * hsum16 take 32: a tile's sums cost less than its short rows' products.
 */
KVE_INLINE __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
	/* [a0+a1 | b0+b1] per 256-bit half (a0, a1: a's halves), same for c, d */
	__m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
	__m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
	/* 128-bit lanes [a4 b4 c4 d4]: each sum's lanes k + k+4 */
	__m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
	__m512 h = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4e));	/* k + k+2 */

	h = _mm512_add_ps(h, _mm512_permute_ps(h, 0xb1));		/* k + k+1 */
	return _mm512_castps512_ps128(_mm512_permutexvar_ps(
		_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), h));
}

/*
 * Decode prefetch over a packed panel, the distances kernels_avx2.c
 * measured (PREFETCH_NOTE there): every line of the n bytes at p. On a
 * Zen 5 (2026-12-02) distances of 0 to 16 KiB measured alike within that
 * VM's noise, for Q8_0, F16 and F32 (PF_AHEAD_F32 in kernels_avx512.c);
 * later, on a quieter one, F16 was fastest at 8 KiB (PF_AHEAD_F16 there)
 * and Q8_0 alike at 8 and 16 KiB, slower at 4.
 */
#ifndef PF_AHEAD_Q8
#define PF_AHEAD_Q8	8192
#endif
KVE_INLINE void prefetch_ahead(const uint8_t *p, size_t n)
{
	size_t l;

	if (!kve_prefetch)	/* kve_prefetch_for: per CPU */
		return;
	/* whole when n is known at compile time: the loop's own
	 * instructions were a tenth of a Q4_K decode tile's */
#pragma GCC unroll 16
	for (l = 0; l < n; l += 64)
		_mm_prefetch((const char *)p + l, _MM_HINT_T0);
}

KVE_INLINE __m512i load2(const void *a, const void *b)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(
		_mm256_loadu_si256((const __m256i *)a)),
		_mm256_loadu_si256((const __m256i *)b), 1);
}

#ifdef Q8_MM_NAME	/* the sign-form product (kernels_avx512.c) */
KVE_INLINE void tile_q8(const struct kve_mat *w, const struct kve_q8x *xq,
			float *y, int ldy, int r, int t, const int R,
			const int C)
{
	__m512 acc[4][4];
	const uint8_t *sp[4], *qp[4];	/* block 0's scale and quants per row */
	const size_t step = kve_q8_bstep(w);
	const struct kve_q8x *xs[4];
	const __m512i zero = _mm512_setzero_si512();
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
			prefetch_ahead(sp[0] + (size_t)b * step + PF_AHEAD_Q8,
				       2 * KVE_PANEL_Q8 * Q8_0_BYTES);	/* 2 * step */
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
				__m512i p = q8_dot16(aw, sx);
				__m512 sc = _mm512_mask_blend_ps(0xff00,
					_mm512_set1_ps(dw0 * dx0[j]),
					_mm512_set1_ps(dw1 * dx1[j]));
				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc[i][j]);
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

Q8_MM_LINKAGE void Q8_MM_NAME(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			       float *y, int ldy, int r0, int r1)
{
	int r = r0, t;

	if (w->panel == KVE_PANEL_Q8X16) {	/* the VNNI set's layout: served, not fast */
		kve_mm_q8_c(w, xq, T, y, ldy, r0, r1);
		return;
	}

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

#endif /* Q8_MM_NAME */

#endif
