/* SPDX-License-Identifier: MIT */
/*
 * kernels_q8_avx2.h - the 256-bit Q8_0 matrix product, included by
 * kernels_avx2.c (maddubs + madd) and kernels_avxvnni.c (vpdpbusd), each
 * compiled for its own target. The includer defines, before including:
 *   q8_dot4(a, b): 8 int32 lanes, lane i = sum of a[4i..4i+3] * b[4i..4i+3]
 *     (a unsigned, b signed bytes; |products| <= 127 * 127, so neither
 *     form saturates and both give the same exact integers)
 *   Q8_MM_NAME, Q8_MM_LINKAGE: the product's name and linkage
 * Everything after the integer lanes is shared, so the two give the same
 * floats bit for bit.
 */
#ifndef KVE_KERNELS_Q8_AVX2_H
#define KVE_KERNELS_Q8_AVX2_H

/*
 * Q8_0 weights x Q8_0 activations, rows taken in groups of four (a, b, c,
 * d). For each token and 32-value block: p_a..p_d = each row's exact
 * integer dot product as 8 int32 lanes (q8_row: adjacent pairs summed by
 * madd); two levels of interleave-and-add (q8_pairs) leave each row's
 * lanes 0-3 and 4-7 summed in one vector, [a b c d | a b c d], which is
 * converted and accumulated once:
 *   acc = fma(float(h), [d_wa d_wb d_wc d_wd | same] * d_x, acc)
 * and at the end row a = l0 + l4, b = l1 + l5, ... Integer sums are exact
 * and a row's lanes never mix with another row's (a short group repeats
 * its first row), so a result does not depend on the grouping, T or the
 * tile. Against converting each row's 8 lanes separately this does a
 * quarter of the float work and keeps one accumulator per 4 rows.
 *
 * The group scale vectors come from dwq, converted once per 4-row group
 * when T >= 3, else built per block.
 */
#define Q8_DWQ_MAX 2048		/* blocks cached per row group (65536 columns) */

/*
 * One row's block: maddubs wants an unsigned and a signed operand, so one
 * side gives up its sign to the other. Row-major, |w| * sign(x, w): two
 * vpsignb per row, exact for every int8 weight (|-128| is 128 unsigned).
 * Packed, |x| * sign(w, x), with |x| (ax) once per token and block of a
 * tile (shared by its rows): one vpsignb per row, and one per tile. sign(-128, x < 0) would wrap, so kve_mat_pack leaves a
 * matrix holding -128 row-major (ggml's quantiser never writes it: its
 * quants are round(v * 127 / amax)). The integers are the same either way.
 */
KVE_INLINE __m256i q8_row(__m256i w, __m256i x, __m256i ax, const int packed)
{
	if (packed)
		return q8_dot4(ax, _mm256_sign_epi8(w, x));
	return q8_dot4(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* [a0+a1 b0+b1 a2+a3 b2+b3 | same for lanes 4-7] of 32-bit lanes a, b:
 * vphaddd's sums (in another order of lanes) in 3 single-uop
 * instructions where vphaddd takes more */
KVE_INLINE __m256i q8_pairs(__m256i a, __m256i b)
{
	return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

/* [d0 d1 d2 d3 d0 d1 d2 d3] from the fp16 scales of four blocks */
KVE_INLINE __m256 q8_quad_scale(const uint8_t *b0, const uint8_t *b1, const uint8_t *b2,
				const uint8_t *b3)
{
	uint16_t h0, h1, h2, h3;
	__m128 v;

	memcpy(&h0, b0, 2);
	memcpy(&h1, b1, 2);
	memcpy(&h2, b2, 2);
	memcpy(&h3, b3, 2);
	v = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)h0 | (uint64_t)h1 << 16 |
						       (uint64_t)h2 << 32 | (uint64_t)h3 << 48)));
	return _mm256_set_m128(v, v);
}

/* the same from 4 fp16 scales stored side by side (a packed panel) */
KVE_INLINE __m256 q8_scale4(const uint8_t *p)
{
	__m128 v = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p));

	return _mm256_set_m128(v, v);
}

/*
 * Decode prefetch for a one-token Q8_0 tile. Packed (prefetch_panel_q8):
 * a panel's block at p is one stream, prefetched PF_AHEAD_Q8 bytes ahead,
 * every line of the block. Row-major (prefetch_q8, R rows at byte offset
 * off of their blocks, block b): the same offsets of the next tile's
 * rows, every other block.
 */
#define PF_AHEAD_Q8	8192
KVE_INLINE void prefetch_panel_q8(const uint8_t *p)
{
	const char *f = (const char *)p + PF_AHEAD_Q8;

	_mm_prefetch(f, _MM_HINT_T0);
	_mm_prefetch(f + 64, _MM_HINT_T0);
	_mm_prefetch(f + 128, _MM_HINT_T0);
}

KVE_INLINE void prefetch_q8(const struct kve_mat *w, const uint8_t *const *sp, int R,
			    size_t off, int b)
{
	int i;

	if (b & 1)
		return;
#pragma GCC unroll 8
	for (i = 0; i < R; i++)
		_mm_prefetch((const char *)sp[i] + (size_t)R * w->row_bytes + off, _MM_HINT_T0);
}

/* NG groups of 4 rows from r (the last group has `last` real rows, the
 * rest repeat its first), C tokens from t; dwq: 4 scales per group per
 * block, or NULL */
KVE_INLINE void tile_q8(const struct kve_mat *w, const float *dwq, const struct kve_q8x *xq,
			float *y, int ldy, int r, int t, const int NG, const int C,
			const int last, const int packed)
{
	__m256 acc[2][3];
	const uint8_t *sp[8], *qp[8];	/* block 0's scale and quants per row */
	const uint8_t *pb[2];		/* packed: each group's panel */
	const struct kve_q8x *xs[3];
	const size_t step = kve_q8_bstep(w);
	int nb = (int)w->cols / QK8_0, b, g, i, j, seq[2];
	size_t off;

#pragma GCC unroll 2
	for (g = 0; g < NG; g++) {
#pragma GCC unroll 4
		for (i = 0; i < 4; i++) {
			uint32_t row = (uint32_t)(r + 4 * g + (g == NG - 1 && i >= last ? 0 : i));

			sp[4 * g + i] = kve_q8_scale(w, row, 0);
			qp[4 * g + i] = kve_q8_quants(w, row, 0);
		}
		seq[g] = sp[4 * g + 1] == sp[4 * g] + 2 && sp[4 * g + 2] == sp[4 * g] + 4 &&
			 sp[4 * g + 3] == sp[4 * g] + 6;
		pb[g] = sp[4 * g];
#pragma GCC unroll 3
		for (j = 0; j < C; j++)
			acc[g][j] = _mm256_setzero_ps();
	}
#pragma GCC unroll 3
	for (j = 0; j < C; j++)
		xs[j] = xq + (size_t)(t + j) * nb;
	for (b = 0, off = 0; b < nb; b++, off += step) {
		__m256i xv[3], ax[3];

		if (C == 1 && packed)	/* decode (see PREFETCH_NOTE) */
#pragma GCC unroll 2
			for (g = 0; g < NG; g++)
				prefetch_panel_q8(pb[g] + off);
		else if (C == 1)
			prefetch_q8(w, sp, 4 * NG, off, b);
#pragma GCC unroll 3
		for (j = 0; j < C; j++) {
			xv[j] = _mm256_loadu_si256((const __m256i *)xs[j][b].q);
			ax[j] = _mm256_sign_epi8(xv[j], xv[j]);	/* used if packed */
		}
#pragma GCC unroll 2
		for (g = 0; g < NG; g++) {
			const uint8_t *const *s4 = sp + 4 * g, *const *q4 = qp + 4 * g;
			__m256i h01[3];
			__m256 dw;

			/* packed: a panel, its rows at fixed distances (one pointer) */
			const uint8_t *pq = pb[g] + off + 2 * KVE_PANEL_Q8;

			if (dwq)
				dw = _mm256_broadcast_ps((const __m128 *)(dwq + ((size_t)b * NG + g) * 4));
			else if (packed || seq[g])	/* 4 scales side by side */
				dw = q8_scale4((packed ? pb[g] : s4[0]) + off);
			else
				dw = q8_quad_scale(s4[0] + off, s4[1] + off, s4[2] + off, s4[3] + off);
			{
				__m256i w0 = _mm256_loadu_si256((const __m256i *)(packed ? pq : q4[0] + off));
				__m256i w1 = _mm256_loadu_si256((const __m256i *)(packed ? pq + QK8_0 :
										   q4[1] + off));

#pragma GCC unroll 3
				for (j = 0; j < C; j++)
					h01[j] = q8_pairs(q8_row(w0, xv[j], ax[j], packed),
							  q8_row(w1, xv[j], ax[j], packed));
			}
			{
				__m256i w2 = _mm256_loadu_si256((const __m256i *)(packed ? pq + 2 * QK8_0 :
										   q4[2] + off));
				__m256i w3 = _mm256_loadu_si256((const __m256i *)(packed ? pq + 3 * QK8_0 :
										   q4[3] + off));

#pragma GCC unroll 3
				for (j = 0; j < C; j++) {
					__m256i h23 = q8_pairs(q8_row(w2, xv[j], ax[j], packed),
							       q8_row(w3, xv[j], ax[j], packed));
					/* [a0..3 b0..3 c0..3 d0..3 | the same of lanes 4-7] */
					__m256i h = _mm256_add_epi32(_mm256_unpacklo_epi64(h01[j], h23),
								     _mm256_unpackhi_epi64(h01[j], h23));
					__m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(&xs[j][b].d));

					acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), sc, acc[g][j]);
				}
			}
		}
	}
#pragma GCC unroll 2
	for (g = 0; g < NG; g++) {
#pragma GCC unroll 3
		for (j = 0; j < C; j++) {
			__m128 q = _mm_add_ps(_mm256_castps256_ps128(acc[g][j]),
					      _mm256_extractf128_ps(acc[g][j], 1));
			float *yo = y + (size_t)(t + j) * ldy + r + 4 * g;

			if (g < NG - 1 || last == 4) {
				_mm_storeu_ps(yo, q);
			} else {
				float l[4];

				_mm_storeu_ps(l, q);
				for (i = 0; i < last; i++)
					yo[i] = l[i];
			}
		}
	}
}

/* 4 rows from r, tokens [0, T); packed: the rows are one panel */
KVE_INLINE void q8_rows4(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			 float *y, int ldy, int r, float *dwq, const int packed)
{
	int nb = (int)w->cols / QK8_0, t, b;

	if (T < 3 || nb > Q8_DWQ_MAX) {	/* T < 3, or rows too long to cache */
		for (t = 0; t + 2 <= T; t += 2)
			tile_q8(w, NULL, xq, y, ldy, r, t, 1, 2, 4, packed);
		for (; t < T; t++)
			tile_q8(w, NULL, xq, y, ldy, r, t, 1, 1, 4, packed);
		return;
	}
	for (b = 0; b < nb; b++)
		_mm_store_ps(dwq + (size_t)b * 4, _mm256_castps256_ps128(q8_quad_scale(
			kve_q8_scale(w, (uint32_t)r, (uint32_t)b),
			kve_q8_scale(w, (uint32_t)r + 1, (uint32_t)b),
			kve_q8_scale(w, (uint32_t)r + 2, (uint32_t)b),
			kve_q8_scale(w, (uint32_t)r + 3, (uint32_t)b))));
	for (t = 0; t + 3 <= T; t += 3)
		tile_q8(w, dwq, xq, y, ldy, r, t, 1, 3, 4, packed);
	if (T - t == 2)
		tile_q8(w, dwq, xq, y, ldy, r, t, 1, 2, 4, packed);
	else if (T - t == 1)
		tile_q8(w, dwq, xq, y, ldy, r, t, 1, 1, 4, packed);
}

Q8_MM_LINKAGE void Q8_MM_NAME(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			       float *y, int ldy, int r0, int r1)
{
	float dwq[4 * Q8_DWQ_MAX] __attribute__((aligned(32)));
	int r = r0, t;

	if (w->panel == KVE_PANEL_Q8X16) {	/* the VNNI set's layout: served, not fast */
		kve_mm_q8_c(w, xq, T, y, ldy, r0, r1);
		return;
	}

	if (T == 1 && !w->panel)
		for (; r + 8 <= r1; r += 8)
			tile_q8(w, NULL, xq, y, ldy, r, 0, 2, 1, 4, 0);
	for (; r + 4 <= r1; r += 4)	/* packed: panel by panel, one stream */
		if (w->panel && !(r % KVE_PANEL_Q8))
			q8_rows4(w, xq, T, y, ldy, r, dwq, 1);
		else
			q8_rows4(w, xq, T, y, ldy, r, dwq, 0);
	if (r < r1)	/* 1-3 rows left: one short group */
		for (t = 0; t < T; t++) {
			if (r1 - r == 1)
				tile_q8(w, NULL, xq, y, ldy, r, t, 1, 1, 1, 0);
			else if (r1 - r == 2)
				tile_q8(w, NULL, xq, y, ldy, r, t, 1, 1, 2, 0);
			else
				tile_q8(w, NULL, xq, y, ldy, r, t, 1, 1, 3, 0);
		}
}

#endif
