/* SPDX-License-Identifier: MIT */
/*
 * kernels_k3_scales.h - a Q3_K block's sixteen 6-bit scales, less 32, as
 * int16 lanes, decoded in one 128-bit vector (kve_q3k_scales' steps, four
 * scales a lane): written to memory a u32 at a time and read back as one
 * vector, the scalar decode cost a store-forwarding stall per row and
 * block. Included by kernels_quant_avx2.h and kernels_quant_avx512.h
 * (AVX2 and up); reads exactly the block's 12 scale bytes.
 */
#ifndef KERNELS_K3_SCALES_H
#define KERNELS_K3_SCALES_H

KVE_INLINE __m256i kq_q3k_scales(const uint8_t *s)
{
	uint32_t a2;
	__m128i a, v, h;

	memcpy(&a2, s + 8, 4);
	a = _mm_loadl_epi64((const __m128i *)s);	/* [a0 a1 0 0] */
	/* [a0 a1 a0 >> 4 a1 >> 4]: each byte's low 4 bits */
	v = _mm_and_si128(_mm_unpacklo_epi64(a, _mm_srli_epi32(a, 4)), _mm_set1_epi8(0x0f));
	/* a2 >> 0, 2, 4, 6: each byte's top 2 bits */
	h = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)a2), _mm_setr_epi32(0, 2, 4, 6)),
			  _mm_set1_epi8(0x03));
	v = _mm_or_si128(v, _mm_slli_epi32(h, 4));
	return _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
}

#endif
