/* SPDX-License-Identifier: MIT */
/*
 * kernels_quant_avx2.h - the 256-bit products of the 4- to 6-bit types:
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL by Q8_0 activations (mm_q32) and Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS by Q8_K activations (mm_qk). Included by kernels_avx2.c (KQ_VNNI
 * 0: maddubs then madd) and kernels_avxvnni.c (KQ_VNNI 1: VEX vpdpbusd /
 * vpdpwssd), with KQ_MM_Q32 / KQ_MM_QK naming the products and
 * KQ_LINKAGE their linkage; the includer defines hsum8.
 *
 * The arithmetic is kernels_quant_avx512.h's (the comment there says why
 * it is exact and why both instruction forms give the same int32 lanes)
 * in 256-bit vectors: one 32-value block, or one K-quant sub-block, per
 * vector. One token (decode) takes 4 rows at a time, block by block, so
 * a packed panel is read as one stream; more tokens take one row at a
 * time, 4 tokens at a time.
 */
#ifndef KQ_MM_Q32
#error "define KQ_VNNI, KQ_MM_Q32, KQ_MM_QK and KQ_LINKAGE before including kernels_quant_avx2.h"
#endif

#include "kernels_k3_scales.h"

/* acc lane i += sum of u[4i + k] * s[4i + k], k < 4 (u unsigned bytes) */
KVE_INLINE __m256i kq_dot(__m256i acc, __m256i u, __m256i s)
{
#if KQ_VNNI
	return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
						       _mm256_set1_epi16(1)));
#endif
}

/* acc lane i += w16[2i] * (u.s pair 2i) + w16[2i + 1] * (pair 2i + 1) */
KVE_INLINE __m256i kq_dotw(__m256i acc, __m256i u, __m256i s, __m256i w16)
{
#if KQ_VNNI
	return _mm256_dpwssd_avx_epi32(acc, _mm256_maddubs_epi16(u, s), w16);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), w16));
#endif
}

KVE_INLINE float kq_f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* Decode reads a packed matrix as one stream; it asks for the lines this
 * far ahead (the Q8_0 product's distance, kernels_avx2.c's PREFETCH_NOTE) */
#define KQ_PF_AHEAD	8192

/* every line of [p, p + n) */
KVE_INLINE void kq_prefetch(const char *p, size_t n)
{
	size_t l;

	for (l = 0; l < n; l += 64)
		_mm_prefetch(p + l, _MM_HINT_T0);
	_mm_prefetch(p + n - 1, _MM_HINT_T0);
}

/* byte i of the result is 0x10 where bit i of h is set, else 0 */
KVE_INLINE __m256i kq_bits16(uint32_t h)
{
	const __m256i sel = _mm256_setr_epi64x(0x0000000000000000ll, 0x0101010101010101ll,
					       0x0202020202020202ll, 0x0303030303030303ll);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel);

	return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit),
				_mm256_set1_epi8(16));
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1 ------------------------------------------ */

KVE_INLINE int q32_off_m(uint32_t type) { return type == GGML_Q4_1 || type == GGML_Q5_1 ? 2 : 0; }
KVE_INLINE int q32_off_h(uint32_t type) { return type == GGML_Q5_1 ? 4 : 2; }
KVE_INLINE int q32_off_qs(uint32_t type)
{
	return type == GGML_Q4_0 || type == GGML_IQ4_NL ? 2 : type == GGML_Q4_1 ? 4 :
	       type == GGML_Q5_0 ? 6 : 8;
}

/*
 * IQ4_NL's table as the weights' bytes: with VNNI value + 128 (1..241,
 * unsigned for vpdpbusd, whose sums are 32-bit; -128 * sum(x) then comes
 * off as Q4_0's -8 does), else the signed values: maddubs's int16 pair
 * sums would saturate on 241 * 127 * 2, so the product takes |value| by
 * x with the value's sign (as llama.cpp's does), and no offset.
 */
KVE_INLINE __m256i kq_nl_signed(void)
{
	return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ggml_iq4nl_table()));
}

KVE_INLINE __m256i kq_nl_table(void)
{
	return KQ_VNNI ? _mm256_xor_si256(kq_nl_signed(), _mm256_set1_epi8(-128)) : kq_nl_signed();
}

/* acc + (the block's quants q) . x, IQ4_NL's signed ones as above */
KVE_INLINE __m256i q32_dot(__m256i acc, __m256i q, __m256i x, const uint32_t type)
{
	if (type == GGML_IQ4_NL && !KQ_VNNI)
		return kq_dot(acc, _mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
	return kq_dot(acc, q, x);
}

/* a block's 32 quants in order (low nibbles: values 0-15), unsigned but
 * for IQ4_NL without VNNI (its table's values) */
KVE_INLINE __m256i q32_w(const uint8_t *p, const uint32_t type)
{
	__m128i v = _mm_loadu_si128((const __m128i *)(p + q32_off_qs(type)));
	__m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
				     _mm256_set1_epi8(0x0f));

	if (type == GGML_IQ4_NL)
		return _mm256_shuffle_epi8(kq_nl_table(), q);

	if (type == GGML_Q5_0 || type == GGML_Q5_1) {
		uint32_t h;

		memcpy(&h, p + q32_off_h(type), 4);
		q = _mm256_or_si256(q, kq_bits16(h));
	}
	return q;
}

/* One row's share of one block for C tokens: acc += d * dx * (sum(q * x)
 * - off * sum(x)); the minimum's m * s on ms */
KVE_INLINE void q32_row(const uint8_t *p, const struct kve_q8x *const *xb, const __m256i *corr,
			__m256 *acc, float *ms, const int C, const uint32_t type)
{
	const __m256i q = q32_w(p, type);
	const float d = kq_f16(p);
	int j;

#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m256i s = q32_dot(corr[j], q, _mm256_loadu_si256((const __m256i *)xb[j]->q),
				    type);

		acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb[j]->d), acc[j]);
		if (type == GGML_Q4_1 || type == GGML_Q5_1)
			ms[j] += kq_f16(p + q32_off_m(type)) * xb[j]->s;
	}
}

/* the offset term for a token's block: -8 (-16, -128) times each lane's
 * four activations (0 for the types with a minimum instead, and for
 * IQ4_NL's signed quants) */
KVE_INLINE __m256i q32_corr(const struct kve_q8x *xb, const uint32_t type)
{
	const int off = type == GGML_Q4_0 ? 3 : type == GGML_Q5_0 ? 4 :
			type == GGML_IQ4_NL && KQ_VNNI ? 7 : 0;

	if (!off)
		return _mm256_setzero_si256();
	return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(kq_dot(
		_mm256_setzero_si256(), _mm256_set1_epi8(1),
		_mm256_loadu_si256((const __m256i *)xb->q)), off));
}

/* R rows (4: one panel when packed) by C tokens */
KVE_INLINE void tile_q32(const struct kve_mat *w, const struct kve_q8x *xq, float *y,
			 int ldy, int r, int t, const int R, const int C, const uint32_t type)
{
	const int nb = (int)w->cols / 32;
	const size_t step = kve_mat_bstep(w);
	__m256 acc[4][4];
	float ms[4][4];
	const uint8_t *bp[4];
	int b, i, j;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		bp[i] = kve_mat_blk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			acc[i][j] = _mm256_setzero_ps();
			ms[i][j] = 0;
		}
	}
	for (b = 0; b < nb; b++) {
		const struct kve_q8x *xb[4];
		__m256i corr[4];

		if (C == 1 && R == 4 && w->panel)	/* decode: a panel's block, ahead */
			kq_prefetch((const char *)bp[0] + (size_t)b * step + KQ_PF_AHEAD, step);
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			xb[j] = xq + (size_t)(t + j) * nb + b;
			corr[j] = q32_corr(xb[j], type);
		}
#pragma GCC unroll 4
		for (i = 0; i < R; i++)
			q32_row(bp[i] + (size_t)b * step, xb, corr, acc[i], ms[i], C, type);
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum8(acc[i][j]) + ms[i][j];
}

KVE_INLINE void rows_q32(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			 float *y, int ldy, int r0, int r1, const uint32_t type)
{
	int r = r0, t;

	if (T == 1)
		for (; r + 4 <= r1; r += 4)
			tile_q32(w, xq, y, ldy, r, 0, 4, 1, type);
	for (; r < r1; r++) {
		for (t = 0; t + 4 <= T; t += 4)
			tile_q32(w, xq, y, ldy, r, t, 1, 4, type);
		for (; t < T; t++)
			tile_q32(w, xq, y, ldy, r, t, 1, 1, type);
	}
}

KQ_LINKAGE void KQ_MM_Q32(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
			  int ldy, int r0, int r1)
{
	if (w->panel == KVE_PANEL_Q4X16) {	/* the AVX-512 sets' layout: served, not fast */
		kve_mm_q32_c(w, xq, T, y, ldy, r0, r1);
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

/* A Q4_K/Q5_K block's scales and minima as bytes [sc0..7 | m0..7] (the
 * 12-byte packing of quant.c undone four bytes at a time) */
KVE_INLINE __m128i k4_scales8(const uint8_t *blk)
{
	uint32_t u[3];

	memcpy(u, blk + 4, 12);
	return _mm_setr_epi32((int)(u[0] & 0x3f3f3f3f),
			      (int)((u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030)),
			      (int)(u[1] & 0x3f3f3f3f),
			      (int)(((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030)));
}

/* int16 lane j of v (in both 128-bit halves) in all 16 lanes */
KVE_INLINE __m256i kq_bcast16(__m256i v, const int j)
{
	return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
}

/*
 * One row's share of one Q4_K/Q5_K block for C tokens: 32 bytes of
 * nibbles hold sub-blocks 2k (low) and 2k + 1 (high), each multiplied by
 * its own scale in the madd; acc += d * dx * sum - dmin * dx * sum(m * bsums)
 */
KVE_INLINE void k45_row(const uint8_t *blk, const int five, const struct kve_q8k *const *xb,
			__m256 *acc, const int C)
{
	const __m256i lo = _mm256_set1_epi8(0x0f);
	const __m128i sm8 = k4_scales8(blk);
	const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8));
	const __m256i m2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm8, sm8));
	const __m256i hv = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) :
			   _mm256_setzero_si256();
	const uint8_t *qs = blk + (five ? 48 : 16);
	const float d = kq_f16(blk), dmin = kq_f16(blk + 2);
	__m256i is[4];
	int k, j;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		is[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (k = 0; k < 4; k++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
		__m256i ql = _mm256_and_si256(v, lo);
		__m256i qh = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
		const __m256i s0 = kq_bcast16(sc, 2 * k), s1 = kq_bcast16(sc, 2 * k + 1);

		if (five) {	/* bit s of qh[i]: value 32 s + i's 5th bit */
			const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * k)));
			const __m256i b1 = _mm256_set1_epi8((char)(1 << (2 * k + 1)));

			ql = _mm256_or_si256(ql, _mm256_and_si256(_mm256_cmpeq_epi8(
				_mm256_and_si256(hv, b0), b0), _mm256_set1_epi8(16)));
			qh = _mm256_or_si256(qh, _mm256_and_si256(_mm256_cmpeq_epi8(
				_mm256_and_si256(hv, b1), b1), _mm256_set1_epi8(16)));
		}
#pragma GCC unroll 4
		for (j = 0; j < C; j++) {
			is[j] = kq_dotw(is[j], ql, _mm256_loadu_si256((const __m256i *)(xb[j]->q + 64 * k)),
					s0);
			is[j] = kq_dotw(is[j], qh,
					_mm256_loadu_si256((const __m256i *)(xb[j]->q + 64 * k + 32)), s1);
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m256i mn = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[j]->bsums), m2);

		acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_set1_ps(d * xb[j]->d), acc[j]);
		acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(dmin * xb[j]->d), acc[j]);
	}
}

/*
 * One row's share of one Q6_K block for C tokens: per half of 128 values,
 * 32 bytes of low nibbles hold values 0-31 (low) and 64-95 (high), the
 * next 32 values 32-63 and 96-127, and each byte of the 32 bytes of 2-bit
 * highs values i, 32 + i, 64 + i and 96 + i; one int8 scale per 16 values
 * (each vector's two in its 128-bit halves), and the -32 as
 * 32 * sum(sc * bsums)
 */
KVE_INLINE void q6k_row(const uint8_t *blk, const struct kve_q8k *const *xb, __m256 *acc,
			const int C)
{
	const __m256i lo = _mm256_set1_epi8(0x0f), hm = _mm256_set1_epi8(0x30);
	const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
	const __m256i slo = _mm256_permute2x128_si256(s16, s16, 0x00);	/* s0..7 twice */
	const __m256i shi = _mm256_permute2x128_si256(s16, s16, 0x11);	/* s8..15 twice */
	const float d = kq_f16(blk + 208);
	__m256i is[4];
	int n, k, j;

#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		is[j] = _mm256_setzero_si256();
#pragma GCC unroll 2
	for (n = 0; n < 2; n++) {
		const __m256i l0 = _mm256_loadu_si256((const __m256i *)(blk + 64 * n));
		const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * n + 32));
		const __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
		__m256i q[4], s[4];

		q[0] = _mm256_or_si256(_mm256_and_si256(l0, lo),
				       _mm256_and_si256(_mm256_slli_epi16(h, 4), hm));
		q[1] = _mm256_or_si256(_mm256_and_si256(l1, lo),
				       _mm256_and_si256(_mm256_slli_epi16(h, 2), hm));
		q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo),
				       _mm256_and_si256(h, hm));
		q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo),
				       _mm256_and_si256(_mm256_srli_epi16(h, 2), hm));
#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {	/* values 128 n + 32 k..: scales 8 n + 2 k, + 1 */
			const __m256i src = n ? shi : slo;

			s[k] = _mm256_shuffle_epi8(src, _mm256_set_m128i(
				_mm_set1_epi16((short)((4 * k + 3) << 8 | (4 * k + 2))),
				_mm_set1_epi16((short)((4 * k + 1) << 8 | (4 * k)))));
		}
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
#pragma GCC unroll 4
			for (k = 0; k < 4; k++)
				is[j] = kq_dotw(is[j], q[k], _mm256_loadu_si256(
					(const __m256i *)(xb[j]->q + 128 * n + 32 * k)), s[k]);
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m256i c = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[j]->bsums), s16);

		is[j] = _mm256_sub_epi32(is[j], _mm256_slli_epi32(c, 5));
		acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_set1_ps(d * xb[j]->d), acc[j]);
	}
}

/*
 * One row's share of one Q2_K or Q3_K block for C tokens: per half n of
 * 128 values, the 32 bytes of 2-bit quants shifted by 2j are values 128n
 * + 32j.. + 31, 16-value sub-blocks 8n + 2j (low 128 bits) and 8n + 2j +
 * 1 (high), each with its scale in the madd. Q2_K: acc += d * dx * sum -
 * dmin * dx * sum(m * bsums), a 4-bit minimum per 16 values. Q3_K: bit
 * 4n + j of hmask[l] adds 4 (quants 0..7), the -4 off as 4 * sum(sc *
 * bsums), the 6-bit scales less 32; acc += d * dx * sum.
 */
KVE_INLINE void k23_row(const uint8_t *blk, const int three, const struct kve_q8k *const *xb,
			__m256 *acc, const int C)
{
	const __m256i m3 = _mm256_set1_epi8(3);
	const uint8_t *qs = blk + (three ? 32 : 16);
	const float d = kq_f16(blk + (three ? 108 : 80)), dmin = three ? 0 : kq_f16(blk + 82);
	const __m256i hm = three ? _mm256_loadu_si256((const __m256i *)blk) : _mm256_setzero_si256();
	__m256i s16, m16 = _mm256_setzero_si256(), slo, shi, is[4];
	int n, k, j;

	if (three) {
		s16 = kq_q3k_scales(blk + 96);
	} else {
		const __m128i sb = _mm_loadu_si128((const __m128i *)blk), lo = _mm_set1_epi8(0x0f);

		s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, lo));
		m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), lo));
	}
	slo = _mm256_permute2x128_si256(s16, s16, 0x00);	/* s0..7 twice */
	shi = _mm256_permute2x128_si256(s16, s16, 0x11);	/* s8..15 twice */
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		is[j] = _mm256_setzero_si256();
#pragma GCC unroll 2
	for (n = 0; n < 2; n++) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
		const __m256i src = n ? shi : slo;

#pragma GCC unroll 4
		for (k = 0; k < 4; k++) {
			__m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), m3);
			const __m256i s = _mm256_shuffle_epi8(src, _mm256_set_m128i(
				_mm_set1_epi16((short)((4 * k + 3) << 8 | (4 * k + 2))),
				_mm_set1_epi16((short)((4 * k + 1) << 8 | (4 * k)))));

			if (three) {	/* bit 4n + k of hmask, moved to bit 2 */
				const int s = 4 * n + k - 2;

				q = _mm256_or_si256(q, _mm256_and_si256(s >= 0 ? _mm256_srli_epi16(hm, s) :
									_mm256_slli_epi16(hm, -s),
									_mm256_set1_epi8(4)));
			}
#pragma GCC unroll 4
			for (j = 0; j < C; j++)
				is[j] = kq_dotw(is[j], q, _mm256_loadu_si256(
					(const __m256i *)(xb[j]->q + 128 * n + 32 * k)), s);
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++) {
		__m256i mn = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[j]->bsums),
					       three ? s16 : m16);

		if (three)
			is[j] = _mm256_sub_epi32(is[j], _mm256_slli_epi32(mn, 2));
		acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_set1_ps(d * xb[j]->d), acc[j]);
		if (!three)
			acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mn), _mm256_set1_ps(dmin * xb[j]->d),
						  acc[j]);
	}
}

/*
 * One row's share of one IQ4_XS block for C tokens: sub-block s (32
 * values) is 16 bytes of nibbles as IQ4_NL's, through the table (signed:
 * |value| by x with the value's sign, so maddubs's pair sums stay within
 * int16), times its scale ls - 32 in the madd; acc += d * dx * sum
 */
KVE_INLINE void iq4xs_row(const uint8_t *blk, const struct kve_q8k *const *xb, __m256 *acc,
			  const int C)
{
	const __m256i lo = _mm256_set1_epi8(0x0f), tbl = kq_nl_signed();
	const float d = kq_f16(blk);
	uint16_t h;
	__m256i is[4];
	int s, j;

	memcpy(&h, blk + 2, 2);
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		is[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (s = 0; s < 8; s++) {
		const __m128i v = _mm_loadu_si128((const __m128i *)(blk + 8 + 16 * s));
		const __m256i q = _mm256_shuffle_epi8(tbl, _mm256_and_si256(
			_mm256_set_m128i(_mm_srli_epi16(v, 4), v), lo));
		const __m256i qa = _mm256_abs_epi8(q);
		const int ls = ((blk[4 + s / 2] >> 4 * (s % 2)) & 0xF) | ((h >> 2 * s) & 3) << 4;
		const __m256i sc = _mm256_set1_epi16((short)(ls - 32));

#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			is[j] = kq_dotw(is[j], qa, _mm256_sign_epi8(_mm256_loadu_si256(
				(const __m256i *)(xb[j]->q + 32 * s)), q), sc);
	}
#pragma GCC unroll 4
	for (j = 0; j < C; j++)
		acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_set1_ps(d * xb[j]->d),
					 acc[j]);
}

KVE_INLINE void tile_qk(const struct kve_mat *w, const struct kve_q8k *xk, float *y, int ldy,
			int r, int t, const int R, const int C, const uint32_t type)
{
	const int nb = (int)w->cols / QK_K;
	const size_t step = kve_mat_bstep(w);
	__m256 acc[4][4];
	const uint8_t *bp[4];
	int b, i, j;

#pragma GCC unroll 4
	for (i = 0; i < R; i++) {
		bp[i] = kve_mat_blk(w, (uint32_t)(r + i), 0);
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			acc[i][j] = _mm256_setzero_ps();
	}
	for (b = 0; b < nb; b++) {
		const struct kve_q8k *xb[4];

		if (C == 1 && R == 4 && w->panel)	/* decode: a panel's block, ahead */
			kq_prefetch((const char *)bp[0] + (size_t)b * step + KQ_PF_AHEAD, step);
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			xb[j] = xk + (size_t)(t + j) * nb + b;
#pragma GCC unroll 4
		for (i = 0; i < R; i++) {
			if (type == GGML_Q6_K)
				q6k_row(bp[i] + (size_t)b * step, xb, acc[i], C);
			else if (type == GGML_Q2_K || type == GGML_Q3_K)
				k23_row(bp[i] + (size_t)b * step, type == GGML_Q3_K, xb, acc[i], C);
			else if (type == GGML_IQ4_XS)
				iq4xs_row(bp[i] + (size_t)b * step, xb, acc[i], C);
			else
				k45_row(bp[i] + (size_t)b * step, type == GGML_Q5_K, xb, acc[i], C);
		}
	}
#pragma GCC unroll 4
	for (i = 0; i < R; i++)
#pragma GCC unroll 4
		for (j = 0; j < C; j++)
			y[(size_t)(t + j) * ldy + r + i] = hsum8(acc[i][j]);
}

KVE_INLINE void rows_qk(const struct kve_mat *w, const struct kve_q8k *xk, int T,
			float *y, int ldy, int r0, int r1, const uint32_t type)
{
	int r = r0, t;

	if (T == 1)
		for (; r + 4 <= r1; r += 4)
			tile_qk(w, xk, y, ldy, r, 0, 4, 1, type);
	for (; r < r1; r++) {
		for (t = 0; t + 4 <= T; t += 4)
			tile_qk(w, xk, y, ldy, r, t, 1, 4, type);
		for (; t < T; t++)
			tile_qk(w, xk, y, ldy, r, t, 1, 1, type);
	}
}

KQ_LINKAGE void KQ_MM_QK(const struct kve_mat *w, const struct kve_q8k *xk, int T, float *y,
			 int ldy, int r0, int r1)
{
	if (w->panel == KVE_PANEL_QKX16) {	/* the AVX-512 sets' layout: served, not fast */
		kve_mm_qk_c(w, xk, T, y, ldy, r0, r1);
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
