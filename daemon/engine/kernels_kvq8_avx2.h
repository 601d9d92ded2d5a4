/* SPDX-License-Identifier: MIT */
/*
 * kernels_kvq8_avx2.h - attention over a Q8_0 KV (KVE_KV_Q8_0 slabs:
 * the rows' fp16 scales, then their int8 quants) with 256-bit integer
 * dot products. Included by the AVX2 and AVX-512 kernel files, under
 * their target pragmas, after KVE_INLINE.
 *
 * Scores: eight rows at a time, a lane a row (K's quants lie in fours,
 * kvengine.h): per four dimensions one maddubs and madd of the query's
 * four (broadcast) against the rows' (the sign moved onto them, so the
 * quants must lie in -127..127, as the quantiser writes them), summed
 * as integers; then per block the float steps of kve_attn_scores_q8_c on
 * the eight rows at once, in its order (the blocks summed from the
 * first): the same bits.
 */

/* the scales of block b of up to 8 rows from row j of a K slab */
KVE_INLINE __m256 kvq8_kscales8(const uint8_t *k, int bt, int j, int m, int b)
{
	const uint8_t *p = k + ((size_t)b * bt + j) * 2;
	uint16_t d[8] = { 0 };

	if (m == 8)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	memcpy(d, p, (size_t)m * 2);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
}

static inline void kvq8_scores_256(const struct kve_q8x *q, int nh, const uint8_t *k, int bt,
				   int n, int hd, float scale, float *sc, size_t ss)
{
	const uint8_t *kq = (const uint8_t *)kve_kvq8_quants(k, bt, hd);
	const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
	const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	int nb = hd / QK8_0, h, j, b, g, u;

	for (h = 0; h < nh; h++) {
		const struct kve_q8x *qh = q + (size_t)h * nb;

		for (j = 0; j < n; j += 8) {
			int m = n - j < 8 ? n - j : 8;
			__m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), lane);
			__m256 s = _mm256_setzero_ps();
			float out[8];

			for (b = 0; b < nb; b++) {
				__m256i acc = _mm256_setzero_si256();
				__m256 f;

				for (g = 0; g < QK8_0 / 4; g++) {
					int32_t q4;
					__m256i qv, kv;

					memcpy(&q4, qh[b].q + 4 * g, 4);
					qv = _mm256_set1_epi32(q4);
					kv = _mm256_xor_si256(_mm256_maskload_epi32((const int *)(kq +
						((size_t)(b * QK8_0 / 4 + g) * bt + j) * 4), rows), flip);
					acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(
						_mm256_sign_epi8(qv, qv), _mm256_sign_epi8(kv, qv)), ones));
				}
				f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc),
						  _mm256_mul_ps(kvq8_kscales8(k, bt, j, m, b),
								_mm256_set1_ps(qh[b].d)));
				s = b ? _mm256_add_ps(s, f) : f;
			}
			_mm256_storeu_ps(out, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
			for (u = 0; u < m; u++)
				sc[(size_t)h * ss + j + u] = out[u];
		}
	}
}

/* out_h += (p_h[j] * scale of row j's block) * quant, row by row; eight
 * columns a vector, a head's row in registers (hd <= 128), else in memory */
static inline void kvq8_values_256(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			    int bt, int n, int hd)
{
	const int8_t *vq = kve_kvq8_quants(v, bt, hd);
	int nb = hd / QK8_0, h, j, b, c;

	for (h = 0; h < nh; h++) {
		float *oh = out + (size_t)h * hd;

		for (j = 0; j < n; j++) {
			const int8_t *r = vq + (size_t)j * hd;

			for (b = 0; b < nb; b++) {
				uint16_t d;
				__m256 a;

				memcpy(&d, v + ((size_t)b * bt + j) * 2, 2);
				a = _mm256_set1_ps(p[(size_t)h * ps + j] * _cvtsh_ss(d));
				for (c = b * QK8_0; c < (b + 1) * QK8_0; c += 8) {
					__m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
						_mm_loadl_epi64((const __m128i *)(r + c))));

					_mm256_storeu_ps(oh + c, _mm256_fmadd_ps(a, w,
								_mm256_loadu_ps(oh + c)));
				}
			}
		}
	}
}
