// SPDX-License-Identifier: MIT
/*
 * kernels_avxvnni.c - the Q8_0 matrix product (and the 4- to 6-bit
 * types' products, kernels_quant_avx2.h) with AVX-VNNI (VEX-encoded
 * 256-bit vpdpbusd: four u8 x s8 products summed into each int32 lane in
 * one instruction, where AVX2 needs maddubs then madd). Compiled for that
 * target only; kernels.c uses it, in the "avxvnni" set (the AVX2 set with
 * this mm_q8), only on a CPU reporting AVX-VNNI and after it passes the
 * self-check. The integer lanes are the ones AVX2 computes, and all that
 * follows is kernels_q8_avx2.h's shared code, so its results equal the
 * AVX2 set's bit for bit.
 */
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c,avxvnni")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

KVE_INLINE __m256i q8_dot4(__m256i a, __m256i b)
{
	return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, b);
}

#define Q8_MM_NAME	kve_mm_q8_avxvnni
#define Q8_MM_LINKAGE
#include "kernels_q8_avx2.h"

KVE_INLINE float hsum8(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	__m128 s = _mm_add_ps(lo, hi);
	__m128 sh = _mm_movehdup_ps(s);

	s = _mm_add_ps(s, sh);
	sh = _mm_movehl_ps(sh, s);
	s = _mm_add_ss(s, sh);
	return _mm_cvtss_f32(s);
}

/* the 4- to 6-bit types with VEX vpdpbusd / vpdpwssd: the AVX2 set's
 * int32 lanes, so its results (kernels_quant_avx2.h) */
#define KQ_VNNI		1
#define KQ_MM_Q32	kve_mm_q32_avxvnni
#define KQ_MM_QK	kve_mm_qk_avxvnni
#define KQ_LINKAGE
#include "kernels_quant_avx2.h"
