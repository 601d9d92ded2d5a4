/* SPDX-License-Identifier: MIT */
/*
 * kernels_kvq8_avx2.h - attention over a Q8_0 KV (KVE_KV_Q8_0 slabs:
 * the rows' fp16 scales, then their int8 quants) with 256-bit integer
 * dot products. Included by the AVX2 and AVX-512 kernel files, under
 * their target pragmas, after KVE_INLINE.
 *
 * Scores: eight rows at a time, block by block: each (row, block) the
 * exact integer dot (maddubs, madd, then the eight lanes summed as
 * integers), then per block the float steps of kve_attn_scores_q8_c on
 * eight rows at once, in its order (the blocks summed from the first),
 * so the same bits.
 */

/* the eight int32 sums of eight vectors, in order (exact: integers) */
KVE_INLINE __m256i kvq8_hsum8x8(const __m256i *v)
{
	__m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
	__m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
	__m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);

	return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
				_mm256_permute2x128_si256(ab, cd, 0x31));
}

/* block b of the up to 8 rows from row j: their scales as floats */
KVE_INLINE __m256 kvq8_scales8(const uint8_t *k, int j, int m, int nb, int b)
{
	uint16_t d[8] = { 0 };
	int u;

	for (u = 0; u < m; u++)
		memcpy(&d[u], k + ((size_t)(j + u) * nb + b) * 2, 2);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
}

static inline void kvq8_scores_256(const struct kve_q8x *q, int nh, const uint8_t *k, int bt, int n,
			    int hd, float scale, float *sc, size_t ss)
{
	const int8_t *kq = kve_kvq8_quants(k, bt, hd);
	const __m256i ones = _mm256_set1_epi16(1);
	int nb = hd / QK8_0, h, j, b, u;

	for (h = 0; h < nh; h++) {
		const struct kve_q8x *qh = q + (size_t)h * nb;

		for (j = 0; j < n; j += 8) {
			int m = n - j < 8 ? n - j : 8;
			__m256 s = _mm256_setzero_ps();
			float out[8];

			for (b = 0; b < nb; b++) {
				__m256i qv = _mm256_loadu_si256((const __m256i *)qh[b].q);
				__m256i aq = _mm256_sign_epi8(qv, qv), v[8];
				__m256 f;

				for (u = 0; u < 8; u++) {
					__m256i x;

					if (u >= m) {
						v[u] = _mm256_setzero_si256();
						continue;
					}
					x = _mm256_loadu_si256((const __m256i *)(kq + (size_t)(j + u) * hd +
										 b * QK8_0));
					v[u] = _mm256_madd_epi16(_mm256_maddubs_epi16(aq,
									_mm256_sign_epi8(x, qv)), ones);
				}
				f = _mm256_mul_ps(_mm256_cvtepi32_ps(kvq8_hsum8x8(v)),
						  _mm256_mul_ps(kvq8_scales8(k, j, m, nb, b),
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

				memcpy(&d, v + ((size_t)j * nb + b) * 2, 2);
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
