/* SPDX-License-Identifier: MIT */
/*
 * kernels_quant_avx512.h - the 512-bit products of the 4- to 6-bit types:
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL by Q8_0 activations (mm_q32) and Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS by Q8_K activations (mm_qk). Included by kernels_avx512.c
 * (KQ_VNNI 0: maddubs then madd) and kernels_avx512vnni.c (KQ_VNNI 1:
 * vpdpbusd / vpdpwssd), after kernels_q8_avx512.h (hsum16, hsum16x4,
 * load2, prefetch_ahead), with KQ_MM_Q32 / KQ_MM_QK naming the products
 * and KQ_LINKAGE their linkage.
 *
 * The weights' quants are unsigned (0..15, 0..31, 0..63: the 4- and 5-bit
 * values, Q6_K's before its -32), so one maddubs (or vpdpbusd) multiplies
 * them with the signed activation quants directly; the offsets (Q4_0 -8,
 * Q5_0 -16, Q6_K -32) come off through the activations' sums, the minima
 * (Q4_1, Q5_1, Q4_K, Q5_K) go on through them. A K-quant's sub-block
 * scales multiply the int16 pair sums in the same step (madd, or
 * vpdpwssd), so a 256-value block is one exact int32 sum per lane and one
 * float multiply-add per row and token. The int16 pair sums never
 * saturate (at most 2 * 63 * 127), so both forms give the same int32
 * lanes, and the VNNI set's results equal the AVX-512 set's bit for bit.
 *
 * Each (row, token) has its own accumulator and the same operations in
 * the same order whatever the tile, T or row range (the kernels'
 * contract). Tiles: R rows (4, one panel when packed, or 1) by C tokens
 * (4, 2 or 1).
 */
#ifndef KQ_MM_Q32
#error "define KQ_VNNI, KQ_MM_Q32, KQ_MM_QK and KQ_LINKAGE before including kernels_quant_avx512.h"
#endif

#include "kernels_k3_scales.h"

/* tokens per Q4_0 x16 tile (a tail takes 2, then 1) */
#ifndef KQ_X16_C
#define KQ_X16_C	4
#endif

/* acc lane i += sum of u[4i + k] * s[4i + k], k < 4 (u unsigned bytes) */
KVE_INLINE __m512i kq_dot(__m512i acc, __m512i u, __m512i s)
{
#if KQ_VNNI
	return _mm512_dpbusd_epi32(acc, u, s);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),
						       _mm512_set1_epi16(1)));
#endif
}

/* acc lane i += w16[2i] * (u.s pair 2i) + w16[2i + 1] * (pair 2i + 1) */
KVE_INLINE __m512i kq_dotw(__m512i acc, __m512i u, __m512i s, __m512i w16)
{
#if KQ_VNNI
	return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, s), w16);
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), w16));
#endif
}

KVE_INLINE float kq_f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/*
 * IQ4_NL's table as the weights' bytes, in each 128-bit lane: with VNNI
 * value + 128 (1..241, unsigned for vpdpbusd, whose sums are 32-bit;
 * -128 * sum(x) then comes off as Q4_0's -8 does), else the signed
 * values: maddubs's int16 pair sums would saturate on 241 * 127 * 2, so
 * the product takes |value| by x with the value's sign (as llama.cpp's
 * does; the activations are never -128), and no offset. Either way the
 * same exact int32 sums.
 */
KVE_INLINE __m512i kq_nl_signed(void)
{
	return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ggml_iq4nl_table()));
}

KVE_INLINE __m512i kq_nl_table(void)
{
	return KQ_VNNI ? _mm512_xor_si512(kq_nl_signed(), _mm512_set1_epi8(-128)) : kq_nl_signed();
}

/* x with the sign of q (q never 0: IQ4_NL's table has no 0) */
KVE_INLINE __m512i kq_sign(__m512i x, __m512i q)
{
	return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(q), _mm512_setzero_si512(), x);
}

/* acc + (quants q) . x, IQ4_NL's signed ones as above */
KVE_INLINE __m512i q32_dot(__m512i acc, __m512i q, __m512i x, const uint32_t type)
{
	if (type == GGML_IQ4_NL && !KQ_VNNI)
		return kq_dot(acc, _mm512_abs_epi8(q), kq_sign(x, q));
	return kq_dot(acc, q, x);
}

/*
 * A 512-bit load of weights kept in a register. GCC folds a load into
 * each of its uses (vpandd mem, vpandnd mem), so a vector a tile uses
 * twice was loaded twice, and the x16 tiles are bound by their loads
 * (with the activations' broadcasts and the prefetches, a Q4_K block of 16
 * rows was some 170 loads; this CPU does 2 zmm loads a cycle). The empty
 * asm makes the value opaque, so it is loaded once: from the L2, Q4_0 x16
 * 69 -> 82 GB/s and Q4_K x16 56 -> 73 (Documentation/engine.md, "Loads").
 */
KVE_INLINE __m512i kq_load1(const void *p)
{
	__m512i v = _mm512_loadu_si512(p);

	__asm__("" : "+v"(v));
	return v;
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1 ------------------------------------------ */

/*
 * Two 32-value blocks per vector, arranged [b 0-15 | b' 0-15 | b 16-31 |
 * b' 16-31] (16 values per 128-bit lane): the nibbles of b and b' side by
 * side take one AND and one shift. The activations are put in the same
 * order once per token, so lanes 0-3 and 8-11 are block b's, 4-7 and
 * 12-15 block b''s (KQ_PAIR_LANES).
 */
#define KQ_PAIR_LANES	0x0f0f	/* int32 lanes of the first block */

/* byte offsets in a block: the scale d, the minimum m, the 32 high bits, the nibbles */
KVE_INLINE int q32_off_m(uint32_t type) { return type == GGML_Q4_1 || type == GGML_Q5_1 ? 2 : 0; }
KVE_INLINE int q32_off_h(uint32_t type) { return type == GGML_Q5_1 ? 4 : 2; }
KVE_INLINE int q32_off_qs(uint32_t type)
{
	return type == GGML_Q4_0 || type == GGML_IQ4_NL ? 2 : type == GGML_Q4_1 ? 4 :
	       type == GGML_Q5_0 ? 6 : 8;
}

/* the activations of blocks b and b + 1 (two: b + 1 exists) in the pair order */
KVE_INLINE __m512i q32_x(const struct kve_q8x *xb, const int two)
{
	__m512i v = two ? load2(xb[0].q, xb[1].q) :
		    _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].q));

	return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), v);
}

/* the weights' quants of blocks p0 and p1 (each a block's start) in the
 * pair order; 5-bit types with their high bits, IQ4_NL's through its table */
KVE_INLINE __m512i q32_w(const uint8_t *p0, const uint8_t *p1, const uint32_t type)
{
	const int qs = q32_off_qs(type);
	__m256i v = _mm256_loadu2_m128i((const __m128i *)(p1 + qs), (const __m128i *)(p0 + qs));
	__m256i m = _mm256_set1_epi8(0x0f);
	__m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, m)),
				       _mm256_and_si256(_mm256_srli_epi16(v, 4), m), 1);

	if (type == GGML_IQ4_NL)
		return _mm512_shuffle_epi8(kq_nl_table(), q);
	if (type == GGML_Q5_0 || type == GGML_Q5_1) {
		uint32_t h0, h1;

		memcpy(&h0, p0 + q32_off_h(type), 4);
		memcpy(&h1, p1 + q32_off_h(type), 4);
		q = _mm512_mask_add_epi8(q, (__mmask64)((uint64_t)(h0 & 0xffff) |
							(uint64_t)(h1 & 0xffff) << 16 |
							(uint64_t)(h0 >> 16) << 32 |
							(uint64_t)(h1 >> 16) << 48),
					 q, _mm512_set1_epi8(16));
	}
	return q;
}

KVE_INLINE void tile_q32(const struct kve_mat *w, const struct kve_q8x *xq, float *y,
			 int ldy, int r, int t, const int R, const int C, const uint32_t type)
{
	const int nb = (int)w->cols / 32;
	const int off = type == GGML_Q4_0 ? 3 : type == GGML_Q5_0 ? 4 :
			type == GGML_IQ4_NL && KQ_VNNI ? 7 : 0;
	const int affine = type == GGML_Q4_1 || type == GGML_Q5_1;
	const size_t step = kve_mat_bstep(w);
	__m512 acc[4][4];
	float ms[4][4];		/* Q4_1/Q5_1: the minima's sum, m * s per block */
	const uint8_t *bp[4];
	const struct kve_q8x *xs[4];
	int b, i, j;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		bp[i] = kve_mat_blk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			acc[i][j] = _mm512_setzero_ps();
			ms[i][j] = 0;
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		xs[j] = xq + (size_t)(t + j) * nb;
	for (b = 0; b < nb; b += 2) {
		const int two = b + 1 < nb;
		const size_t o0 = (size_t)b * step, o1 = two ? o0 + step : o0;
		__m512i xv[4], corr[4];
		__m512 dx[4];

		if (C == 1 && R == 4 && w->panel)
			prefetch_ahead(bp[0] + o0 + PF_AHEAD_Q8, 2 * step);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			xv[j] = q32_x(xs[j] + b, two);
			/* the offset: -8 (-16, -128) times each lane's four activations */
			corr[j] = off ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(
				kq_dot(_mm512_setzero_si512(), _mm512_set1_epi8(1), xv[j]), off)) :
				_mm512_setzero_si512();
			dx[j] = _mm512_mask_blend_ps(KQ_PAIR_LANES,
						     _mm512_set1_ps(two ? xs[j][b + 1].d : 0.0f),
						     _mm512_set1_ps(xs[j][b].d));
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			const uint8_t *p0 = bp[i] + o0, *p1 = bp[i] + o1;
			const __m512i q = q32_w(p0, p1, type);
			const float d0 = kq_f16(p0), d1 = two ? kq_f16(p1) : 0.0f;
			const __m512 dw = _mm512_mask_blend_ps(KQ_PAIR_LANES, _mm512_set1_ps(d1),
							       _mm512_set1_ps(d0));

#pragma GCC unroll 4
			for (j = 0; j < C; j++) {
				__m512i p = q32_dot(corr[j], q, xv[j], type);

				acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
							    _mm512_mul_ps(dw, dx[j]), acc[i][j]);
				if (affine) {
					ms[i][j] += kq_f16(p0 + q32_off_m(type)) * xs[j][b].s;
					if (two)
						ms[i][j] += kq_f16(p1 + q32_off_m(type)) *
							    xs[j][b + 1].s;
				}
			}
		}
	}
	if (R == 4) {
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			__m128 s = hsum16x4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);

			if (affine)
				s = _mm_add_ps(s, _mm_setr_ps(ms[0][j], ms[1][j], ms[2][j], ms[3][j]));
			_mm_storeu_ps(y + (size_t)(t + j) * ldy + r, s);
		}
		return;
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum16(acc[i][j]) + ms[i][j];
}

KVE_INLINE void rows_q32(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			 float *y, int ldy, int r0, int r1, const uint32_t type)
{
	int r = r0, t;

	for (; r + 4 <= r1; r += 4) {
		for (t = 0; t + 4 <= T; t += 4)
			tile_q32(w, xq, y, ldy, r, t, 4, 4, type);
		if (t + 2 <= T) {
			tile_q32(w, xq, y, ldy, r, t, 4, 2, type);
			t += 2;
		}
		if (t < T)
			tile_q32(w, xq, y, ldy, r, t, 4, 1, type);
	}
	for (; r < r1; r++)
		for (t = 0; t < T; t++)
			tile_q32(w, xq, y, ldy, r, t, 1, 1, type);
}

/* ---- Q4_0 and IQ4_NL in 16-row panels (KVE_PANEL_Q4X16) ------------ */

/*
 * Lane i of a group's vector is row i's 4 quants; the token's matching 4
 * activation quants are broadcast to every lane, so each vpdpbusd adds 4
 * products to all 16 rows and a block's 8 of them leave its exact sum,
 * sum(q * x) - 8 * sum(x), in the row's lane (two chains of 4, one
 * started at -8 * sum(x), so they do not wait on each other). Then per
 * block, for 16 rows at once: acc = fma(float(sum), d_w * d_x, acc). The
 * scalar row below does the same steps one row at a time, so rows in a
 * partial panel (a row range starting or ending inside one) give the
 * same bits, and so does any split of the tokens.
 */
KVE_INLINE int32_t q40x16_ld32(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return v;
}

KVE_INLINE __m512i kx_bcast(const int8_t *q)
{
	return _mm512_set1_epi32(q40x16_ld32(q));
}

/* acc + u . (the 4 bytes at q, in every lane): the broadcast folded into
 * vpdpbusd's memory operand with VNNI (GCC 12 does not fold it: a
 * separate vpbroadcastd per product; the Q4_K x16 tile from the L2 on
 * the Zen 5: 60-61 GB/s without, 66 with, on a 2048 x 768 matrix) */
KVE_INLINE __m512i kq_dot_bc(__m512i acc, __m512i u, const int8_t *q)
{
#if KQ_VNNI
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)q));
	return acc;
#else
	return kq_dot(acc, u, kx_bcast(q));
#endif
}

/* acc lane i += a16[2i] * w[0] + a16[2i + 1] * w[1], w the two int16 at
 * p (vpdpwssd, its broadcast folded as above; else madd) */
KVE_INLINE __m512i kq_dotw_bc(__m512i acc, __m512i a16, const int32_t *p)
{
#if KQ_VNNI
	__asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a16), "m"(*p));
	return acc;
#else
	return _mm512_add_epi32(acc, _mm512_madd_epi16(a16, _mm512_set1_epi32(*p)));
#endif
}

/*
 * IQ4_NL has Q4_0's block layout, so the same panels and tile: each
 * nibble vector goes through the table (kq_nl_table: + 128 with VNNI,
 * the offset -128 * sum(x); without, signed, each product by |value|
 * and x with the value's sign). nl: the type is IQ4_NL.
 */
KVE_INLINE __m512i q40x16_nl(__m512i q, const int nl)
{
	return nl ? _mm512_shuffle_epi8(kq_nl_table(), q) : q;
}

/* acc + q . (the 4 bytes at x, in every lane) */
KVE_INLINE __m512i q40x16_dot(__m512i acc, __m512i q, const int8_t *x, const int nl)
{
	if (nl && !KQ_VNNI)
		return kq_dot(acc, _mm512_abs_epi8(q), kq_sign(kx_bcast(x), q));
	return kq_dot_bc(acc, q, x);
}

KVE_INLINE void tile_q40x16(const struct kve_mat *w, const struct kve_q8x *xq, float *y,
			    int ldy, int r, int t, const int C, const int nl)
{
	const int nb = (int)w->cols / 32, off = nl ? (KQ_VNNI ? 128 : 0) : 8;
	const uint8_t *p = kve_q4x16_blk(w, (uint32_t)r, 0);
	const __m512i lo = _mm512_set1_epi8(0x0f);
	const struct kve_q8x *xs[KQ_X16_C];
	__m512 acc[KQ_X16_C];
	int b, j, k;

#pragma GCC unroll 8
	for (j = 0; j < C; j++) {
		acc[j] = _mm512_setzero_ps();
		xs[j] = xq + (size_t)(t + j) * nb;
	}
	for (b = 0; b < nb; b++, p += KVE_Q4X16_BLK) {
		const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		__m512i q[8], qa[8];
		__mmask64 qn[8];

		if (C == 1) {
			/* one token: four chains of 2 (the 4 groups' low and high
			 * nibbles), the broadcasts folded into vpdpbusd; Q4_0 with
			 * VNNI has the high nibbles in place (16 q, shifted back
			 * after: exact) */
			const struct kve_q8x *x = xs[0] + b;
			const int inplace = KQ_VNNI && !nl;
			__m512i s[4] = { _mm512_set1_epi32(-off * x->sum), _mm512_setzero_si512(),
					 _mm512_setzero_si512(), _mm512_setzero_si512() };

			prefetch_ahead(p + PF_AHEAD_Q8, KVE_Q4X16_BLK);
#pragma GCC unroll 4
			for (k = 0; k < 4; k++) {
				const __m512i v = kq_load1(p + 32 + 64 * k);

				s[k & 1] = q40x16_dot(s[k & 1], q40x16_nl(_mm512_and_si512(v, lo), nl),
						      x->q + 4 * k, nl);
				s[2 + (k & 1)] = q40x16_dot(s[2 + (k & 1)], inplace ?
					_mm512_andnot_si512(lo, v) : q40x16_nl(
					_mm512_and_si512(_mm512_srli_epi16(v, 4), lo), nl),
					x->q + 16 + 4 * k, nl);
			}
			s[2] = _mm512_add_epi32(s[2], s[3]);
			s[0] = _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]),
						inplace ? _mm512_srai_epi32(s[2], 4) : s[2]);
			acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]),
						 _mm512_mul_ps(dw, _mm512_set1_ps(x->d)), acc[0]);
			continue;
		}
#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			const __m512i v = kq_load1(p + 32 + 64 * k);

			q[k] = q40x16_nl(_mm512_and_si512(v, lo), nl);
			q[4 + k] = q40x16_nl(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo), nl);
		}
		if (nl && !KQ_VNNI)	/* |value| and its sign, once for the C tokens */
#pragma GCC unroll 8
			for (k = 0; k < 8; k++) {
				qa[k] = _mm512_abs_epi8(q[k]);
				qn[k] = _mm512_movepi8_mask(q[k]);
			}
#pragma GCC unroll 8
		for (j = 0; j < C; j++) {
			const struct kve_q8x *x = xs[j] + b;
			__m512i s0 = _mm512_set1_epi32(-off * x->sum), s1 = _mm512_setzero_si512();

#pragma GCC unroll 8
			for (k = 0; k < 8; k++) {
				const __m512i xb = kx_bcast(x->q + (k & 3) * 4 + (k >> 2) * 16);
				__m512i *sk = k < 4 ? &s0 : &s1;

				if (nl && !KQ_VNNI)
					*sk = kq_dot(*sk, qa[k], _mm512_mask_sub_epi8(
						xb, qn[k], _mm512_setzero_si512(), xb));
				else
					*sk = kq_dot(*sk, q[k], xb);
			}
			acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
						 _mm512_mul_ps(dw, _mm512_set1_ps(x->d)), acc[j]);
		}
	}
#pragma GCC unroll 8
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

/* one row of a partial panel, one token: tile_q40x16's steps for its lane */
KVE_INLINE float row_q40x16(const struct kve_mat *w, const struct kve_q8x *x, int r,
			    const int nl)
{
	const int nb = (int)w->cols / 32, i = r % KVE_PANEL_Q4X16;
	const uint8_t *p = kve_q4x16_blk(w, (uint32_t)r, 0);
	float acc = 0.0f;
	int b, k, m;

	for (b = 0; b < nb; b++, p += KVE_Q4X16_BLK) {
		int32_t s = nl ? 0 : -8 * x[b].sum;

		for (k = 0; k < 4; k++)
			for (m = 0; m < 4; m++) {
				const uint8_t v = p[32 + 64 * k + 4 * i + m];

				if (nl)
					s += ggml_iq4nl_value(v & 15) * x[b].q[4 * k + m] +
					     ggml_iq4nl_value(v >> 4) * x[b].q[16 + 4 * k + m];
				else
					s += (v & 15) * x[b].q[4 * k + m] +
					     (v >> 4) * x[b].q[16 + 4 * k + m];
			}
		acc = fmaf((float)s, kq_f16(p + 2 * i) * x[b].d, acc);
	}
	return acc;
}

static void rows_q40x16(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
			int ldy, int r0, int r1, const int nl)
{
	const int nb = (int)w->cols / 32;
	int r = r0, t;

	for (; r < r1 && (r % KVE_PANEL_Q4X16 || r + KVE_PANEL_Q4X16 > r1); r++)
		for (t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = row_q40x16(w, xq + (size_t)t * nb, r, nl);
	for (; r + KVE_PANEL_Q4X16 <= r1; r += KVE_PANEL_Q4X16) {
		for (t = 0; t + KQ_X16_C <= T; t += KQ_X16_C)
			tile_q40x16(w, xq, y, ldy, r, t, KQ_X16_C, nl);
		if (KQ_X16_C > 4 && t + 4 <= T) {
			tile_q40x16(w, xq, y, ldy, r, t, 4, nl);
			t += 4;
		}
		if (t + 2 <= T) {
			tile_q40x16(w, xq, y, ldy, r, t, 2, nl);
			t += 2;
		}
		if (t < T)
			tile_q40x16(w, xq, y, ldy, r, t, 1, nl);
	}
	for (; r < r1; r++)
		for (t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = row_q40x16(w, xq + (size_t)t * nb, r, nl);
}

KQ_LINKAGE void KQ_MM_Q32(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
	       int ldy, int r0, int r1)
{
	if (w->panel == KVE_PANEL_Q4X16) {
		if (w->type == GGML_IQ4_NL)
			rows_q40x16(w, xq, T, y, ldy, r0, r1, 1);
		else
			rows_q40x16(w, xq, T, y, ldy, r0, r1, 0);
		return;
	}
	switch (w->type) {
	case GGML_Q4_0: rows_q32(w, xq, T, y, ldy, r0, r1, GGML_Q4_0); break;
	case GGML_Q4_1: rows_q32(w, xq, T, y, ldy, r0, r1, GGML_Q4_1); break;
	case GGML_Q5_0: rows_q32(w, xq, T, y, ldy, r0, r1, GGML_Q5_0); break;
	case GGML_IQ4_NL: rows_q32(w, xq, T, y, ldy, r0, r1, GGML_IQ4_NL); break;
	default: rows_q32(w, xq, T, y, ldy, r0, r1, GGML_Q5_1); break;
	}
}

/* ---- Q4_K, Q5_K, Q6_K ------------------------------------------------- */

/*
 * A Q4_K/Q5_K block's scales and minima, [sc0..7 | m0..7] as int16: the
 * 12-byte packing (quant.c) undone four bytes at a time.
 */
KVE_INLINE __m256i k4_scales(const uint8_t *blk)
{
	/* words u0 u1 u2 of the 12 bytes (and 4 more of the block's quants,
	 * unused) in one vector, not four scalars inserted one by one:
	 * sc03 = u0 & 3f, m03 = u1 & 3f, sc47 = (u2 & 0f) | ((u0 >> 2) & 30),
	 * m47 = ((u2 >> 4) & 0f) | ((u1 >> 2) & 30), bytewise */
	const __m128i u = _mm_loadu_si128((const __m128i *)(blk + 4));
	const __m128i lo6 = _mm_and_si128(u, _mm_set1_epi8(0x3f));
	const __m128i hi2 = _mm_and_si128(_mm_srli_epi32(u, 2), _mm_set1_epi8(0x30));
	const __m128i lo4 = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(u, 0xaa),
							 _mm_setr_epi32(0, 4, 0, 0)),
					  _mm_set1_epi8(0x0f));

	/* [sc03 sc47 m03 m47] */
	return _mm256_cvtepu8_epi16(_mm_unpacklo_epi32(lo6, _mm_or_si128(lo4, hi2)));
}

/*
 * Q4_K/Q5_K: 64 bytes of nibbles hold sub-blocks 2k (low nibbles of the
 * first 32), 2k + 1 (their high nibbles), 2k + 2 and 2k + 3 (the next 32's):
 * vector v of a block is [sub-block s | s + 2], s = (0, 1, 4, 5)[v], its
 * activations KQ_K4_X(v) the same halves of the block's 256.
 */
KVE_INLINE __m512i k4_xv(const int8_t *q, const int v)
{
	const int s = v < 2 ? v : v + 2;

	return load2(q + 32 * s, q + 32 * (s + 2));
}

/* One row's share of one 256-value block for C tokens (xa: their
 * activations in k4_xv's order; xb: their Q8_K blocks): acc += d * dx *
 * sum(sc * q * x) - dmin * dx * sum(m * bsums) */
KVE_INLINE void k45_row(const uint8_t *blk, const int five, const __m512i (*xa)[4],
			const struct kve_q8k *const *xb, __m512 *acc, const int C)
{
	const __m512i lo = _mm512_set1_epi8(0x0f);
	const __m256i sm8 = k4_scales(blk);
	const __m512i sm = _mm512_zextsi256_si512(sm8);
	const __m512i v0 = _mm512_loadu_si512(blk + (five ? 48 : 16));
	const __m512i v1 = _mm512_loadu_si512(blk + (five ? 112 : 80));
	/* [m0 m0 m1 m1 .. m7 m7]: each minimum for its sub-block's two bsums */
	const __m256i m2 = _mm256_permutexvar_epi16(
		_mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), sm8);
	const float d = kq_f16(blk), dmin = kq_f16(blk + 2);
	__m512i q[4], sc[4];
	int v, j;

	q[0] = _mm512_and_si512(v0, lo);
	q[1] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), lo);
	q[2] = _mm512_and_si512(v1, lo);
	q[3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), lo);
#pragma GCC unroll 4
	for (v = 0; v < 4; v++) {
		const int s = v < 2 ? v : v + 2;

		sc[v] = _mm512_permutexvar_epi16(_mm512_inserti64x4(
			_mm512_set1_epi16((short)s), _mm256_set1_epi16((short)(s + 2)), 1), sm);
	}
	if (five) {	/* the 5th bits: bit s of qh[i] for value 32 s + i */
		const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));

#pragma GCC unroll 4
		for (v = 0; v < 4; v++) {
			const int s = v < 2 ? v : v + 2;
			__mmask64 hb = _mm512_test_epi8_mask(hv, _mm512_inserti64x4(
				_mm512_set1_epi8((char)(1 << s)), _mm256_set1_epi8((char)(1 << (s + 2))), 1));

			q[v] = _mm512_mask_add_epi8(q[v], hb, q[v], _mm512_set1_epi8(16));
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m512i is = _mm512_setzero_si512();
		__m256i mn = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[j]->bsums), m2);

#pragma GCC unroll 4
		for (v = 0; v < 4; v++)
			is = kq_dotw(is, q[v], xa[j][v], sc[v]);
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * xb[j]->d), acc[j]);
		acc[j] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(mn)),
					  _mm512_set1_ps(dmin * xb[j]->d), acc[j]);
	}
}

/*
 * Q6_K: each half of 128 values is 64 bytes of low nibbles (values 0-63
 * low, 64-127 high, in order) and 32 bytes of 2-bit highs (byte i: values
 * i, 32 + i, 64 + i, 96 + i): one vector of the low nibbles takes its
 * highs from the 32 bytes twice, shifted by 0 and 2 (4 and 6). Sixteen
 * int8 scales, one per 16 values; the -32 comes off as 32 * sum(sc * bsums).
 */
KVE_INLINE void q6k_row(const uint8_t *blk, const struct kve_q8k *const *xb, __m512 *acc,
			const int C)
{
	const __m512i lo = _mm512_set1_epi8(0x0f), hm = _mm512_set1_epi8(0x30);
	const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
	const __m512i sw = _mm512_zextsi256_si512(s16);
	const __m512i sl_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
	const __m512i sr_hi = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
	const float d = kq_f16(blk + 208);
	__m512i q[4], sc[4];
	int n, v, j;

#pragma GCC unroll 2
	for (n = 0; n < 2; n++) {
		const __m512i l = _mm512_loadu_si512(blk + 64 * n);
		const __m512i h = _mm512_broadcast_i64x4(
			_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n)));

		q[2 * n] = _mm512_or_si512(_mm512_and_si512(l, lo),
					   _mm512_and_si512(_mm512_sllv_epi16(h, sl_lo), hm));
		q[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), lo),
					       _mm512_and_si512(_mm512_srlv_epi16(h, sr_hi), hm));
	}
#pragma GCC unroll 4
	for (v = 0; v < 4; v++) {	/* values 64 v .. 64 v + 63: scales 4 v .. 4 v + 3 */
		__m512i idx = _mm512_inserti64x4(
			_mm512_castsi256_si512(_mm256_inserti128_si256(
				_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * v))),
				_mm_set1_epi16((short)(4 * v + 1)), 1)),
			_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(4 * v + 2))),
						_mm_set1_epi16((short)(4 * v + 3)), 1), 1);

		sc[v] = _mm512_permutexvar_epi16(idx, sw);
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m512i is = _mm512_setzero_si512();
		__m256i c = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[j]->bsums), s16);

#pragma GCC unroll 4
		for (v = 0; v < 4; v++)
			is = kq_dotw(is, q[v], _mm512_loadu_si512(xb[j]->q + 64 * v), sc[v]);
		is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(c, 5)));
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * xb[j]->d), acc[j]);
	}
}

/*
 * Q2_K and Q3_K: 64 bytes of 2-bit quants, bits 2j, 2j + 1 of byte 32n +
 * l value 128n + 32j + l, so the 64 bytes shifted by 2j are vector j,
 * values [32j, 32j + 32) and [128 + 32j, 160 + 32j), its int16 pair sums'
 * 16-value sub-blocks 2j, 2j + 1, 8 + 2j, 9 + 2j in its four 128-bit
 * lanes; the activations in that order (k23_xv). Q2_K (16 bytes of
 * scales, low nibble a scale and high a minimum per 16 values, then the
 * quants, fp16 d and dmin): its minima come off through the activations'
 * 16 sums. Q3_K (hmask[32], the quants, 12 bytes of 6-bit scales, fp16
 * d): bit 4n + j of hmask[l] set adds 4 (quants 0..7, the value less 4),
 * the -4 off as 4 * sum(sc * bsums), the scales less 32 signed.
 */
KVE_INLINE __m512i k23_xv(const int8_t *q, const int j)
{
	return load2(q + 32 * j, q + 128 + 32 * j);
}

/* One row's share of one Q2_K or Q3_K block for C tokens (xa: their
 * activations in k23_xv's order): acc += d * dx * sum(sc * q * x) - dmin
 * * dx * sum(m * bsums) (Q2_K) or d * dx * (sum(sc * q * x) - 4 *
 * sum(sc * bsums)) (Q3_K) */
KVE_INLINE void k23_row(const uint8_t *blk, const int three, const __m512i (*xa)[4],
			const struct kve_q8k *const *xb, __m512 *acc, const int C)
{
	const __m512i m3 = _mm512_set1_epi8(3);
	const __m512i v = _mm512_loadu_si512(blk + (three ? 32 : 16));
	const float d = kq_f16(blk + (three ? 108 : 80)), dmin = three ? 0 : kq_f16(blk + 82);
	__m256i s16, m16 = _mm256_setzero_si256();
	__m512i q[4], sc[4], sw, hm = _mm512_setzero_si512();
	int j, c;

	if (three) {
		s16 = kq_q3k_scales(blk + 96);
		hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)blk));
	} else {
		const __m128i sb = _mm_loadu_si128((const __m128i *)blk), lo = _mm_set1_epi8(0x0f);

		s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, lo));
		m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), lo));
	}
	sw = _mm512_zextsi256_si512(s16);
#pragma GCC unroll 4
	for (j = 0; j < 4; j++) {
		q[j] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3);
		if (three)	/* hmask bit j (values of half 0), 4 + j (half 1) */
			q[j] = _mm512_mask_add_epi8(q[j], _mm512_test_epi8_mask(hm, _mm512_inserti64x4(
				_mm512_set1_epi8((char)(1 << j)), _mm256_set1_epi8((char)(16 << j)), 1)),
				q[j], _mm512_set1_epi8(4));
		/* int16 lane i: sub-block (2j, 2j + 1, 8 + 2j, 9 + 2j)[i / 8]'s scale */
		sc[j] = _mm512_permutexvar_epi16(_mm512_add_epi16(
			_mm512_set1_epi16((short)(2 * j)), _mm512_cvtepu8_epi16(_mm256_setr_epi64x(
				0, 0x0101010101010101ll, 0x0808080808080808ll, 0x0909090909090909ll))),
			sw);
	}
#pragma GCC unroll 4
	for (c = 0; c < C; c++) {
		__m512i is = _mm512_setzero_si512();
		const __m256i mn = _mm256_madd_epi16(
			_mm256_loadu_si256((const __m256i *)xb[c]->bsums), three ? s16 : m16);

#pragma GCC unroll 4
		for (j = 0; j < 4; j++)
			is = kq_dotw(is, q[j], xa[c][j], sc[j]);
		if (three)
			is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(mn, 2)));
		acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * xb[c]->d), acc[c]);
		if (!three)
			acc[c] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(mn)),
						  _mm512_set1_ps(dmin * xb[c]->d), acc[c]);
	}
}

/*
 * IQ4_XS: fp16 d, u16 scales_h, scales_l[4], then per 32-value sub-block
 * s 16 bytes of nibbles as IQ4_NL's (values 0-15 low, 16-31 high). A
 * 64-byte load is sub-blocks 4h..4h + 3, one per 128-bit lane: its low
 * nibbles their first 16 values, its high nibbles their last 16; the
 * activations are put in the same order once per token and block
 * (iq4xs_xv). Through the signed table, |value| by x with the value's
 * sign (maddubs's pair sums within int16), times the sub-block's scale
 * ls - 32 in the madd (or vpdpwssd).
 */
KVE_INLINE void iq4xs_xv(const int8_t *q, __m512i xa[4])
{
	const __m512i lo = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13);
	const __m512i hi = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
	int h;

#pragma GCC unroll 2
	for (h = 0; h < 2; h++) {
		const __m512i a = _mm512_loadu_si512(q + 128 * h), b = _mm512_loadu_si512(q + 128 * h + 64);

		xa[2 * h] = _mm512_permutex2var_epi64(a, lo, b);
		xa[2 * h + 1] = _mm512_permutex2var_epi64(a, hi, b);
	}
}

/* the 8 scales ls - 32 as int16: ls is nibble s % 2 of scales_l[s / 2]
 * with bits 2s, 2s + 1 of scales_h above it */
KVE_INLINE __m128i iq4xs_scales(const uint8_t *blk)
{
	const __m128i raw = _mm_loadl_epi64((const __m128i *)blk);
	const __m128i l = _mm_shuffle_epi8(raw, _mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1,
							      6, -1, 6, -1, 7, -1, 7, -1));
	const __m128i h = _mm_shuffle_epi8(raw, _mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3,
							      2, 3, 2, 3, 2, 3, 2, 3));
	const __m128i l4 = _mm_and_si128(_mm_srlv_epi16(l, _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)),
					 _mm_set1_epi16(0xF));
	const __m128i h2 = _mm_and_si128(_mm_srlv_epi16(h, _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
					 _mm_set1_epi16(3));

	return _mm_sub_epi16(_mm_or_si128(l4, _mm_slli_epi16(h2, 4)), _mm_set1_epi16(32));
}

/*
 * With VNNI no sign trick: vpdpbusd takes the table + 128 (its sums are
 * 32-bit), each int32 lane starts at -128 times the sum of its
 * activations (iq4xs_xc, once per token and block), so the lane holds
 * the exact sum of value * x over its bytes, which vpmulld scales by its
 * sub-block's ls - 32: the same int32 lanes as the madd form's, so the
 * same bits as the parent set's.
 */
KVE_INLINE void iq4xs_xc(const __m512i xa[4], __m512i xc[2])
{
	const __m512i one = _mm512_set1_epi8(1);
	int h;

#pragma GCC unroll 2
	for (h = 0; h < 2; h++)
		xc[h] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(
			kq_dot(kq_dot(_mm512_setzero_si512(), one, xa[2 * h]), one, xa[2 * h + 1]), 7));
}

/* One row's share of one IQ4_XS block for C tokens (xa: their activations
 * in iq4xs_xv's order; xc: with VNNI, iq4xs_xc of them): acc += d * dx *
 * sum(sc * value * x) */
KVE_INLINE void iq4xs_row(const uint8_t *blk, const __m512i (*xa)[4], const __m512i (*xc)[2],
			  const struct kve_q8k *const *xb, __m512 *acc, const int C)
{
	const __m512i lo = _mm512_set1_epi8(0x0f);
	const float d = kq_f16(blk);
	int v, j;
#if KQ_VNNI
	const __m512i tbl = kq_nl_table();
	const __m512i s32 = _mm512_zextsi256_si512(_mm256_cvtepi16_epi32(iq4xs_scales(blk)));
	__m512i u[4], sc[2];

#pragma GCC unroll 2
	for (v = 0; v < 2; v++) {
		const __m512i w = _mm512_loadu_si512(blk + 8 + 64 * v);

		u[2 * v] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(w, lo));
		u[2 * v + 1] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(w, 4), lo));
		/* int32 lane i: sub-block 4 v + i / 4's scale */
		sc[v] = _mm512_permutexvar_epi32(_mm512_setr_epi32(
			4 * v, 4 * v, 4 * v, 4 * v, 4 * v + 1, 4 * v + 1, 4 * v + 1, 4 * v + 1,
			4 * v + 2, 4 * v + 2, 4 * v + 2, 4 * v + 2, 4 * v + 3, 4 * v + 3, 4 * v + 3,
			4 * v + 3), s32);
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m512i is = _mm512_setzero_si512();

#pragma GCC unroll 2
		for (v = 0; v < 2; v++)
			is = _mm512_add_epi32(is, _mm512_mullo_epi32(kq_dot(kq_dot(
				xc[j][v], u[2 * v], xa[j][2 * v]), u[2 * v + 1], xa[j][2 * v + 1]), sc[v]));
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * xb[j]->d), acc[j]);
	}
#else
	const __m512i tbl = kq_nl_signed();
	const __m512i s8 = _mm512_castsi128_si512(iq4xs_scales(blk));
	__m512i qa[4], sc[2];
	__mmask64 neg[4];

	(void)xc;

#pragma GCC unroll 2
	for (v = 0; v < 2; v++) {
		const __m512i w = _mm512_loadu_si512(blk + 8 + 64 * v);
		const __m512i q0 = _mm512_shuffle_epi8(tbl, _mm512_and_si512(w, lo));
		const __m512i q1 = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(w, 4),
									      lo));

		qa[2 * v] = _mm512_abs_epi8(q0);
		qa[2 * v + 1] = _mm512_abs_epi8(q1);
		neg[2 * v] = _mm512_movepi8_mask(q0);
		neg[2 * v + 1] = _mm512_movepi8_mask(q1);
		/* int16 lane i: sub-block 4 v + i / 8's scale */
		sc[v] = _mm512_permutexvar_epi16(_mm512_add_epi16(
			_mm512_set1_epi16((short)(4 * v)), _mm512_cvtepu8_epi16(_mm256_setr_epi64x(
				0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll))),
			s8);
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m512i is = _mm512_setzero_si512();

#pragma GCC unroll 4
		for (v = 0; v < 4; v++)
			is = kq_dotw(is, qa[v], _mm512_mask_sub_epi8(xa[j][v], neg[v],
					_mm512_setzero_si512(), xa[j][v]), sc[v / 2]);
		acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(d * xb[j]->d), acc[j]);
	}
#endif
}

/* prefetch_ahead over one block of a 4-row panel, its length known at
 * compile time so that the loop unrolls */
KVE_INLINE void kq_prefetch_panel(const uint8_t *p, const uint32_t type)
{
	prefetch_ahead(p, KVE_PANEL_Q * (type == GGML_Q6_K ? 210 : type == GGML_Q5_K ? 176 :
					 type == GGML_IQ4_XS ? 136 : type == GGML_Q2_K ? 84 :
					 type == GGML_Q3_K ? 110 : 144));
}

KVE_INLINE void tile_qk(const struct kve_mat *w, const struct kve_q8k *xk, float *y, int ldy,
			int r, int t, const int R, const int C, const uint32_t type)
{
	const int nb = (int)w->cols / QK_K;
	const size_t step = kve_mat_bstep(w);
	__m512 acc[4][4];
	const uint8_t *bp[4];
	int b, i, j, v;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		bp[i] = kve_mat_blk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm512_setzero_ps();
	}
	for (b = 0; b < nb; b++) {
		const struct kve_q8k *xb[4];
		__m512i xa[4][4], xc[4][2];

		if (C == 1 && R == 4 && w->panel)
			kq_prefetch_panel(bp[0] + (size_t)b * step + PF_AHEAD_Q8, type);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			xb[j] = xk + (size_t)(t + j) * nb + b;
			if (type == GGML_IQ4_XS) {
				iq4xs_xv(xb[j]->q, xa[j]);
				if (KQ_VNNI)
					iq4xs_xc(xa[j], xc[j]);
			} else if (type == GGML_Q2_K || type == GGML_Q3_K) {
#pragma GCC unroll 4
				for (v = 0; v < 4; v++)
					xa[j][v] = k23_xv(xb[j]->q, v);
			} else if (type != GGML_Q6_K)
#pragma GCC unroll 4
				for (v = 0; v < 4; v++)
					xa[j][v] = k4_xv(xb[j]->q, v);
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			if (type == GGML_Q6_K)
				q6k_row(bp[i] + (size_t)b * step, xb, acc[i], C);
			else if (type == GGML_Q2_K || type == GGML_Q3_K)
				k23_row(bp[i] + (size_t)b * step, type == GGML_Q3_K,
					(const __m512i (*)[4])xa, xb, acc[i], C);
			else if (type == GGML_IQ4_XS)
				iq4xs_row(bp[i] + (size_t)b * step, (const __m512i (*)[4])xa,
					  (const __m512i (*)[2])xc, xb, acc[i], C);
			else
				k45_row(bp[i] + (size_t)b * step, type == GGML_Q5_K,
					(const __m512i (*)[4])xa, xb, acc[i], C);
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

KVE_INLINE void rows_qk(const struct kve_mat *w, const struct kve_q8k *xk, int T,
			float *y, int ldy, int r0, int r1, const uint32_t type)
{
	int r = r0, t;

	for (; r + 4 <= r1; r += 4) {
		for (t = 0; t + 4 <= T; t += 4)
			tile_qk(w, xk, y, ldy, r, t, 4, 4, type);
		if (t + 2 <= T) {
			tile_qk(w, xk, y, ldy, r, t, 4, 2, type);
			t += 2;
		}
		if (t < T)
			tile_qk(w, xk, y, ldy, r, t, 4, 1, type);
	}
	for (; r < r1; r++)
		for (t = 0; t < T; t++)
			tile_qk(w, xk, y, ldy, r, t, 1, 1, type);
}

/* ---- Q4_K, Q5_K, Q6_K, IQ4_XS in 16-row panels (KVE_PANEL_QKX16) ---- */

/*
 * As Q4_0 x16: lane i of a group's vector is row i's 4 bytes, the
 * token's 4 matching activation quants broadcast to every lane, so each
 * vpdpbusd adds 4 products to all 16 rows. A sub-block's chain leaves its
 * exact sum in the row's lane, which the rows' sub-block scales (decoded
 * from the 3 or 4 groups of scale bytes, one lane per row) multiply;
 * then kve_mm_qk_c's float step for 16 rows at once. Integers are exact
 * in any order, and the float operations are the C product's in its
 * order, so every (row, token) gives the C product's bits: the rows of a
 * partial panel are left to it.
 */
/* vpshufb indices: dword lane i gets byte s of lane i (zero-extended);
 * word pairs: bytes s and s + 1 of lane i as its two words */
KVE_INLINE __m512i kx_byte_idx(const int s)
{
	return _mm512_add_epi32(_mm512_set1_epi32((int)(0x80808000u | (unsigned)s)),
				_mm512_set4_epi32(12, 8, 4, 0));
}

KVE_INLINE __m512i kx_word_idx(const int s)
{
	return _mm512_add_epi32(_mm512_set1_epi32((int)(0x80008000u | (unsigned)s |
							(unsigned)(s + 1) << 16)),
				_mm512_set4_epi32(0xc000c, 0x80008, 0x40004, 0));
}

/* Q5_K: the 5th bits of a group's values, bit s of its qh group's bytes,
 * as 16 (bit 4) */
KVE_INLINE __m512i q5kx16_hi(__m512i qh, const int s)
{
	const __m512i v = s <= 4 ? _mm512_slli_epi16(qh, 4 - s) : _mm512_srli_epi16(qh, s - 4);

	return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
}

/*
 * Q4_K (five 0) and Q5_K (five 1). The 16 rows' scales and minima, bytes
 * of the three scale groups u0 u1 u2 (quant.c's kve_q4k_scales, one lane
 * per row), are put in four vectors of bytes (scales 0-3, 4-7, minima
 * 0-3, 4-7) once per block; one vpshufb then gives sub-block s's scale
 * in each lane, or two minima as a word pair. The minima's sum is 4
 * vpdpwssd of those pairs against the activations' 32-value sums (each
 * fits an int16: at most 32 * 127), and, with VNNI and Q4_K, the high
 * nibbles go into vpdpbusd in place (v & 0xf0, 16 q) and their sums come
 * back by a shift (exact: multiples of 16; maddubs would saturate). All
 * integers exact, so the same sums as before and the C product's bits.
 */
KVE_INLINE void tile_q45kx16(const struct kve_mat *w, const struct kve_q8k *xk, float *y,
			     int ldy, int r, int t, const int C, const int five)
{
	const int nb = (int)w->cols / QK_K, qs = five ? 768 : 256, hi16 = KQ_VNNI && !five;
	const size_t bb = five ? KVE_Q5KX16_BLK : KVE_Q4KX16_BLK;
	const uint8_t *p = kve_qkx16_blk(w, (uint32_t)r, 0);
	const __m512i lo = _mm512_set1_epi8(0x0f), m3f = _mm512_set1_epi8(0x3f);
	const __m512i m30 = _mm512_set1_epi8(0x30);
	__m512 acc[4];
	int b, j, k, g;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm512_setzero_ps();
	for (b = 0; b < nb; b++, p += bb) {
		const __m512i u0 = kq_load1(p + 64), u1 = kq_load1(p + 128);
		const __m512i u2 = kq_load1(p + 192);
		/* (a & 0x0f) | (b & 0x30), a's high bits already clear: 0xf8 */
		const __m512i sc[2] = {
			_mm512_and_si512(u0, m3f),
			_mm512_ternarylogic_epi32(_mm512_and_si512(u2, lo), _mm512_srli_epi32(u0, 2),
						  m30, 0xf8) };
		const __m512i mn[2] = {
			_mm512_and_si512(u1, m3f),
			_mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 4), lo),
						  _mm512_srli_epi32(u1, 2), m30, 0xf8) };
		const struct kve_q8k *x[4];
		/* per token: the 8 sub-blocks' activation sums as word pairs,
		 * dwords 0, 1 (B0 B1), (B2 B3), 4, 5 (B4 B5), (B6 B7) */
		int32_t bp[4][8] __attribute__((aligned(32)));
		__m512i is[4];

		if (C == 1)
			prefetch_ahead(p + PF_AHEAD_Q8, bb);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			const __m256i bs = _mm256_madd_epi16(
				_mm256_loadu_si256((const __m256i *)xk[(size_t)(t + j) * nb + b].bsums),
				_mm256_set1_epi16(1));

			x[j] = xk + (size_t)(t + j) * nb + b;
			_mm256_store_si256((__m256i *)bp[j], _mm256_packs_epi32(bs, bs));
			is[j] = _mm512_setzero_si512();
		}
#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {	/* sub-blocks 2k and 2k + 1: nibble bytes 32k.. */
			const __m512i sa = _mm512_shuffle_epi8(sc[k / 2], kx_byte_idx(2 * k % 4));
			const __m512i sb = _mm512_shuffle_epi8(sc[k / 2], kx_byte_idx(2 * k % 4 + 1));
			__m512i pa[4], pb[4];

#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				pa[j] = pb[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (g = 0; g < 8; g++) {
				const __m512i v = kq_load1(p + qs + 64 * (8 * k + g));
				__m512i ql = _mm512_and_si512(v, lo), qh;

				if (hi16) {
					qh = _mm512_andnot_si512(lo, v);
				} else {
					qh = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo);
				}
				if (five) {	/* bits 2k, 2k + 1 of qh bytes 4g.. */
					const __m512i h = kq_load1(p + 256 + 64 * g);

					ql = _mm512_or_si512(ql, q5kx16_hi(h, 2 * k));
					qh = _mm512_or_si512(qh, q5kx16_hi(h, 2 * k + 1));
				}

#pragma GCC unroll 4
				for (j = 0; j < C; j++) {
					pa[j] = kq_dot_bc(pa[j], ql, x[j]->q + 64 * k + 4 * g);
					pb[j] = kq_dot_bc(pb[j], qh, x[j]->q + 64 * k + 32 + 4 * g);
				}
			}
#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				is[j] = _mm512_add_epi32(is[j], _mm512_add_epi32(
					_mm512_mullo_epi32(pa[j], sa),
					_mm512_mullo_epi32(hi16 ? _mm512_srai_epi32(pb[j], 4) : pb[j], sb)));
		}
		{
			const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
			const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
			const __m512i m01 = _mm512_shuffle_epi8(mn[0], kx_word_idx(0));
			const __m512i m23 = _mm512_shuffle_epi8(mn[0], kx_word_idx(2));
			const __m512i m45 = _mm512_shuffle_epi8(mn[1], kx_word_idx(0));
			const __m512i m67 = _mm512_shuffle_epi8(mn[1], kx_word_idx(2));

			/* y += (d * dx) * isum - (dmin * dx) * msum */
#pragma GCC unroll 4
			for (j = 0; j < C; j++) {
				__m512i ms = kq_dotw_bc(_mm512_setzero_si512(), m01, &bp[j][0]);

				ms = kq_dotw_bc(ms, m23, &bp[j][1]);
				ms = kq_dotw_bc(ms, m45, &bp[j][4]);
				ms = kq_dotw_bc(ms, m67, &bp[j][5]);
				acc[j] = _mm512_add_ps(acc[j], _mm512_sub_ps(
					_mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[j]->d)),
						      _mm512_cvtepi32_ps(is[j])),
					_mm512_mul_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(x[j]->d)),
						      _mm512_cvtepi32_ps(ms))));
			}
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

/* (Q6_K keeps the folded loads: loaded once it was 30% faster from the
 * L2 but 1-10% slower a decode step from memory, alternating steps) */

/* Q6_K: sub-block s's int8 scale of the 16 rows (groups g: scale bytes
 * 4k..4k+3, one lane per row), sign-extended */
KVE_INLINE __m512i q6kx16_sc(const __m512i *g, const int s)
{
	return _mm512_srai_epi32(_mm512_slli_epi32(g[s / 4], 24 - 8 * (s % 4)), 24);
}

KVE_INLINE void tile_q6kx16(const struct kve_mat *w, const struct kve_q8k *xk, float *y,
			    int ldy, int r, int t, const int C)
{
	const int nb = (int)w->cols / QK_K;
	const uint8_t *p = kve_qkx16_blk(w, (uint32_t)r, 0);
	const __m512i lo = _mm512_set1_epi8(0x0f), hm = _mm512_set1_epi8(0x30);
	__m512 acc[4];
	int b, j, n, h, g, v;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm512_setzero_ps();
	for (b = 0; b < nb; b++, p += KVE_Q6KX16_BLK) {
		const uint8_t *q6 = p + 32 + 4 * 64;	/* kve_q6kx16_group's order */
		const struct kve_q8k *x[4];
		__m512i sg[4], is[4];

		if (C == 1)
			prefetch_ahead(p + PF_AHEAD_Q8, KVE_Q6KX16_BLK);
#pragma GCC unroll 4
		for (v = 0; v < 4; v++)
			sg[v] = _mm512_loadu_si512(p + 32 + 64 * v);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			x[j] = xk + (size_t)(t + j) * nb + b;
			is[j] = _mm512_setzero_si512();
		}
		/* half n, quarter h: the sub-blocks 8n + h + 2v (v < 4) of values
		 * 128n + 32v + 16h + 0..15, from ql bytes 64n + 16h.. (low
		 * nibbles v 0, 1; high v 2, 3; + 32 for odd v) and qh 32n + 16h.. */
#pragma GCC unroll 2
		for (n = 0; n < 2; n++) {
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				__m512i pp[4][4];

#pragma GCC unroll 4
				for (j = 0; j < C; j++)
#pragma GCC unroll 4
					for (v = 0; v < 4; v++)	/* the -32 off each quant */
						pp[j][v] = _mm512_set1_epi32(
							-32 * x[j]->bsums[8 * n + h + 2 * v]);
#pragma GCC unroll 4
				for (g = 4 * h; g < 4 * h + 4; g++) {
					/* ql groups 16n + g and 16n + 8 + g, qh 8n + g */
					const uint8_t *lg = q6 + 64 * (24 * n + 3 * g);
					const __m512i l0 = _mm512_loadu_si512(lg);
					const __m512i l1 = _mm512_loadu_si512(lg + 64);
					const __m512i hb = _mm512_loadu_si512(lg + 128);
					__m512i q[4];

					/* low nibble | high bits, one bit select each
					 * (lo ? nibble : high bits): 0xe4 */
					q[0] = _mm512_ternarylogic_epi32(l0, _mm512_and_si512(
						_mm512_slli_epi16(hb, 4), hm), lo, 0xe4);
					q[1] = _mm512_ternarylogic_epi32(l1, _mm512_and_si512(
						_mm512_slli_epi16(hb, 2), hm), lo, 0xe4);
					q[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 4),
									 _mm512_and_si512(hb, hm), lo, 0xe4);
					q[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4), _mm512_and_si512(
						_mm512_srli_epi16(hb, 2), hm), lo, 0xe4);
#pragma GCC unroll 4
					for (j = 0; j < C; j++)
#pragma GCC unroll 4
						for (v = 0; v < 4; v++)
							pp[j][v] = kq_dot_bc(pp[j][v], q[v],
								x[j]->q + 128 * n + 32 * v + 4 * g);
				}
#pragma GCC unroll 4
				for (j = 0; j < C; j++)
#pragma GCC unroll 4
					for (v = 0; v < 4; v++)
						is[j] = _mm512_add_epi32(is[j], _mm512_mullo_epi32(
							pp[j][v], q6kx16_sc(sg, 8 * n + h + 2 * v)));
			}
		}
		{
			const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));

			/* y += (d * dx) * isum */
#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(
					_mm512_mul_ps(d, _mm512_set1_ps(x[j]->d)),
					_mm512_cvtepi32_ps(is[j])));
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

/*
 * IQ4_XS x16: the 16 rows' scales_l (one group: lane i row i's 4 bytes)
 * and scales_h (16 words) give sub-block s's ls - 32 in each lane by
 * shifts; each 64-byte group of nibbles is 16 rows by 4 bytes of one
 * sub-block, through the table as in IQ4_NL x16 (VNNI: + 128, the
 * sub-block's lanes starting at -128 times its activations' sum; else
 * |value| by x with the value's sign), and each sub-block's sums times
 * its scale by vpmulld. All exact: the portable product's integer sum
 * per row, then its float step, so its bits.
 */
KVE_INLINE void tile_iq4xsx16(const struct kve_mat *w, const struct kve_q8k *xk, float *y,
			      int ldy, int r, int t, const int C)
{
	const int nb = (int)w->cols / QK_K;
	const uint8_t *p = kve_qkx16_blk(w, (uint32_t)r, 0);
	const __m512i lo = _mm512_set1_epi8(0x0f), tbl = kq_nl_table();
	const __m512i m4 = _mm512_set1_epi32(0xF), m3 = _mm512_set1_epi32(3);
	__m512 acc[4];
	int b, j, s, g;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm512_setzero_ps();
	for (b = 0; b < nb; b++, p += KVE_IQ4XSX16_BLK) {
		const __m512i sl = kq_load1(p + 64);
		const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 32)));
		const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		const struct kve_q8k *x[4];
		__m512i is[4];

		if (C == 1)
			prefetch_ahead(p + PF_AHEAD_Q8, KVE_IQ4XSX16_BLK);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			x[j] = xk + (size_t)(t + j) * nb + b;
			is[j] = _mm512_setzero_si512();
		}
#pragma GCC unroll 8
		for (s = 0; s < 8; s++) {
			const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(
				_mm512_and_si512(_mm512_srli_epi32(sl, 4 * s), m4),
				_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * s), m3), 4)),
				_mm512_set1_epi32(32));
			__m512i ps[4];

#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				ps[j] = _mm512_set1_epi32(KQ_VNNI ? -128 * (x[j]->bsums[2 * s] +
									    x[j]->bsums[2 * s + 1]) : 0);
#pragma GCC unroll 4
			for (g = 0; g < 4; g++) {
				const __m512i v = kq_load1(p + 128 + 64 * (4 * s + g));
				const __m512i ql = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, lo));
				const __m512i qh = _mm512_shuffle_epi8(tbl, _mm512_and_si512(
					_mm512_srli_epi16(v, 4), lo));

#pragma GCC unroll 4
				for (j = 0; j < C; j++) {
					ps[j] = q40x16_dot(ps[j], ql, x[j]->q + 32 * s + 4 * g, 1);
					ps[j] = q40x16_dot(ps[j], qh, x[j]->q + 32 * s + 16 + 4 * g, 1);
				}
			}
#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				is[j] = _mm512_add_epi32(is[j], _mm512_mullo_epi32(ps[j], sc));
		}
		/* y += (d * dx) * isum */
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[j]->d)),
								   _mm512_cvtepi32_ps(is[j])));
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

/*
 * Q2_K (three 0) and Q3_K (three 1) x16: qs group 8n + g is 16 rows by
 * quant bytes 32n + 4g.. + 3, whose bits 2j, 2j + 1 are values 128n +
 * 32j + 4g.. + 3 of sub-block 8n + 2j + g / 4; Q3_K adds 4 where bit 4n +
 * j of the same bytes of hmask (group g) is set, each sub-block's lanes
 * starting at -4 times its activations' sum (the quants' -4). Sub-block
 * s's scale from the scale groups: Q2_K's low nibble of byte s % 4 of
 * group s / 4 (the minimum its high nibble, whose sum goes by vpdpwssd
 * of minima pairs against the activations' 16-value sums); Q3_K's 6 bits
 * as kve_q3k_scales puts them, less 32. Every sum exact, then the C
 * product's float step: its bits. (One tile with Q6_K's, the quants and
 * scales by type, made prefill 10-35% slower: kept apart.)
 */
KVE_INLINE void tile_k23x16(const struct kve_mat *w, const struct kve_q8k *xk, float *y,
			    int ldy, int r, int t, const int C, const int three)
{
	const int nb = (int)w->cols / QK_K;
	const size_t bb = three ? KVE_Q3KX16_BLK : KVE_Q2KX16_BLK;
	const uint8_t *p = kve_qkx16_blk(w, (uint32_t)r, 0);
	const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
	const __m512i lo = _mm512_set1_epi32(0x0f0f0f0f), l2 = _mm512_set1_epi32(0x03030303);
	__m512 acc[4];
	int b, j, n, h, g, v;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm512_setzero_ps();
	for (b = 0; b < nb; b++, p += bb) {
		const uint8_t *hm = p + 224, *qs = p + (three ? 736 : 320);
		const struct kve_q8k *x[4];
		__m512i sg[4], is[4];

		if (C == 1)
			prefetch_ahead(p + PF_AHEAD_Q8, bb);
		if (three) {	/* kve_q3k_scales per lane: (a & 0x0f) | b, 0xec */
			const __m512i u0 = kq_load1(p + 32), u1 = kq_load1(p + 96);
			const __m512i u2 = kq_load1(p + 160);

			sg[0] = _mm512_ternarylogic_epi32(u0, _mm512_slli_epi32(
				_mm512_and_si512(u2, l2), 4), lo, 0xec);
			sg[1] = _mm512_ternarylogic_epi32(u1, _mm512_slli_epi32(
				_mm512_and_si512(_mm512_srli_epi32(u2, 2), l2), 4), lo, 0xec);
			sg[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(u0, 4), _mm512_slli_epi32(
				_mm512_and_si512(_mm512_srli_epi32(u2, 4), l2), 4), lo, 0xec);
			sg[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(u1, 4), _mm512_slli_epi32(
				_mm512_and_si512(_mm512_srli_epi32(u2, 6), l2), 4), lo, 0xec);
		} else {
#pragma GCC unroll 4
			for (v = 0; v < 4; v++)
				sg[v] = kq_load1(p + 64 + 64 * v);
		}
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			x[j] = xk + (size_t)(t + j) * nb + b;
			is[j] = _mm512_setzero_si512();
		}
		/* half n, quarter h: sub-blocks 8n + 2v + h (v < 4) of values
		 * 128n + 32v + 16h + 0..15, from qs groups 8n + 4h.. + 3 */
#pragma GCC unroll 2
		for (n = 0; n < 2; n++) {
#pragma GCC unroll 2
			for (h = 0; h < 2; h++) {
				__m512i pp[4][4];

#pragma GCC unroll 4
				for (j = 0; j < C; j++)
#pragma GCC unroll 4
					for (v = 0; v < 4; v++)
						pp[j][v] = _mm512_set1_epi32(
							three ? -4 * x[j]->bsums[8 * n + 2 * v + h] : 0);
#pragma GCC unroll 4
				for (g = 4 * h; g < 4 * h + 4; g++) {
					const __m512i qv = kq_load1(qs + 64 * (8 * n + g));
					__m512i q[4], hv = _mm512_setzero_si512();

					if (three)
						hv = kq_load1(hm + 64 * g);
#pragma GCC unroll 4
					for (v = 0; v < 4; v++) {
						q[v] = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * v), m3);
						if (three) {	/* bit 4n + v of hmask as 4: a | b & c */
							const int s = 4 * n + v - 2;
							const __m512i hs = s >= 0 ? _mm512_srli_epi16(hv, s) :
									   _mm512_slli_epi16(hv, -s);

							q[v] = _mm512_ternarylogic_epi32(q[v], hs, m4, 0xf8);
						}
					}
#pragma GCC unroll 4
					for (j = 0; j < C; j++)
#pragma GCC unroll 4
						for (v = 0; v < 4; v++)
							pp[j][v] = kq_dot_bc(pp[j][v], q[v],
								x[j]->q + 128 * n + 32 * v + 4 * g);
				}
#pragma GCC unroll 4
				for (v = 0; v < 4; v++) {
					const int s = 8 * n + 2 * v + h;
					__m512i sc = _mm512_srli_epi32(_mm512_slli_epi32(sg[s / 4],
							24 - 8 * (s % 4)), 24);

					sc = three ? _mm512_sub_epi32(sc, _mm512_set1_epi32(32)) :
						     _mm512_and_si512(sc, _mm512_set1_epi32(0xF));
#pragma GCC unroll 4
					for (j = 0; j < C; j++)
						is[j] = _mm512_add_epi32(is[j], _mm512_mullo_epi32(pp[j][v], sc));
				}
			}
		}
		{
			const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));

			if (three) {	/* y += (d * dx) * isum */
#pragma GCC unroll 4
				for (j = 0; j < C; j++)
					acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(
						_mm512_mul_ps(d, _mm512_set1_ps(x[j]->d)),
						_mm512_cvtepi32_ps(is[j])));
			} else {	/* y += (d * dx) * isum - (dmin * dx) * msum */
				const __m512 dmin = _mm512_cvtph_ps(
					_mm256_loadu_si256((const __m256i *)(p + 32)));
				__m512i mp[8];

#pragma GCC unroll 4
				for (v = 0; v < 4; v++) {	/* minima 4v, 4v + 1 | 4v + 2, 4v + 3 */
					const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(sg[v], 4), lo);

					mp[2 * v] = _mm512_shuffle_epi8(mn, kx_word_idx(0));
					mp[2 * v + 1] = _mm512_shuffle_epi8(mn, kx_word_idx(2));
				}
#pragma GCC unroll 4
				for (j = 0; j < C; j++) {
					const int32_t *bs = (const int32_t *)x[j]->bsums;
					__m512i ms = _mm512_setzero_si512();

#pragma GCC unroll 8
					for (v = 0; v < 8; v++)	/* pair v: bsums 2v, 2v + 1 */
						ms = kq_dotw_bc(ms, mp[v], bs + v);
					acc[j] = _mm512_add_ps(acc[j], _mm512_sub_ps(
						_mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[j]->d)),
							      _mm512_cvtepi32_ps(is[j])),
						_mm512_mul_ps(_mm512_mul_ps(dmin, _mm512_set1_ps(x[j]->d)),
							      _mm512_cvtepi32_ps(ms))));
				}
			}
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		_mm512_storeu_ps(y + (size_t)(t + j) * ldy + r, acc[j]);
}

KVE_INLINE void tiles_qkx16(const struct kve_mat *w, const struct kve_q8k *xk, float *y,
			    int ldy, int r, int t, const int C)
{
	if (w->type == GGML_Q6_K)
		tile_q6kx16(w, xk, y, ldy, r, t, C);
	else if (w->type == GGML_Q3_K)
		tile_k23x16(w, xk, y, ldy, r, t, C, 1);
	else if (w->type == GGML_Q2_K)
		tile_k23x16(w, xk, y, ldy, r, t, C, 0);
	else if (w->type == GGML_IQ4_XS)
		tile_iq4xsx16(w, xk, y, ldy, r, t, C);
	else if (w->type == GGML_Q5_K)
		tile_q45kx16(w, xk, y, ldy, r, t, C, 1);
	else
		tile_q45kx16(w, xk, y, ldy, r, t, C, 0);
}

/*
 * NAME(w, x, T, y, ldy, r0, r1) over a 16-row layout whose tiles give the
 * portable product's bits: whole panels by TILE (TILE(w, x, y, ldy, r, t,
 * C) for C = 4, 2, 1 tokens, C a constant in each call), the rows of a
 * partial panel by EDGE, that portable product. A macro, so each tile is
 * inlined with its C.
 */
#define KQ_ROWS_X16(NAME, XT, TILE, EDGE)						\
static void NAME(const struct kve_mat *w, const XT *x, int T, float *y, int ldy,	\
		 int r0, int r1)								\
{											\
	int r = (r0 + 15) / 16 * 16, t;							\
											\
	if (r > r1)									\
		r = r1;									\
	if (r > r0)									\
		EDGE(w, x, T, y, ldy, r0, r);						\
	for (; r + 16 <= r1; r += 16) {							\
		for (t = 0; t + 4 <= T; t += 4)						\
			TILE(w, x, y, ldy, r, t, 4);					\
		if (t + 2 <= T) {							\
			TILE(w, x, y, ldy, r, t, 2);					\
			t += 2;								\
		}									\
		if (t < T)								\
			TILE(w, x, y, ldy, r, t, 1);					\
	}										\
	if (r < r1)									\
		EDGE(w, x, T, y, ldy, r, r1);						\
}

_Static_assert(KVE_PANEL_QKX16 == 16 && KVE_PANEL_Q8X16 == 16, "KQ_ROWS_X16's panels");

KQ_ROWS_X16(rows_qkx16, struct kve_q8k, tiles_qkx16, kve_mm_qk_c)

KQ_LINKAGE void KQ_MM_QK(const struct kve_mat *w, const struct kve_q8k *xk, int T, float *y,
	      int ldy, int r0, int r1)
{
	if (w->panel == KVE_PANEL_QKX16) {
		rows_qkx16(w, xk, T, y, ldy, r0, r1);
		return;
	}
	switch (w->type) {
	case GGML_Q4_K: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_Q4_K); break;
	case GGML_Q5_K: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_Q5_K); break;
	case GGML_IQ4_XS: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_IQ4_XS); break;
	case GGML_Q2_K: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_Q2_K); break;
	case GGML_Q3_K: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_Q3_K); break;
	default: rows_qk(w, xk, T, y, ldy, r0, r1, GGML_Q6_K); break;
	}
}
