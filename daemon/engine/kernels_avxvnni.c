// SPDX-License-Identifier: MIT
/*
 * kernels_avxvnni.c - the Q8_0 matrix product with AVX-VNNI (VEX-encoded
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
