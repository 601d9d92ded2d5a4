// SPDX-License-Identifier: MIT
/*
 * kernels_avx512vnni.c - the Q8_0 matrix product with AVX-512 VNNI
 * (512-bit vpdpbusd: four u8 x s8 products summed into each int32 lane in
 * one instruction, where AVX-512 BW needs maddubs then madd). Compiled for
 * that target only; kernels.c uses it, in the "avx512vnni" set (the
 * AVX-512 set with this mm_q8), only on a CPU reporting AVX-512 F, BW, VL
 * and VNNI, and after it passes the self-check. The integer lanes are
 * the ones the AVX-512 set computes, and all that follows is
 * kernels_q8_avx512.h's shared code, so its results equal that set's bit
 * for bit.
 */
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

#include "engine_internal.h"

#define KVE_INLINE static inline __attribute__((always_inline))

KVE_INLINE __m512i q8_dot16(__m512i a, __m512i b)
{
	return _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b);
}

#define Q8_MM_NAME	kve_mm_q8_avx512vnni
#define Q8_MM_LINKAGE
#include "kernels_q8_avx512.h"
