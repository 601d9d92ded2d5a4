// SPDX-License-Identifier: MIT
/*
 * kernels.c - picks the kernel set once, by CPU features: AVX-512 (F, BW,
 * VL) > AVX2 (+FMA, F16C) > portable C. KVE_ISA=c|avx2|avx512 may ask for a
 * lower set (never for one the CPU lacks), which is how tests cover the
 * fallbacks.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

static const struct kve_kernels *chosen;

static int has_avx512(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int has_avx2(void)
{
	unsigned int a, b, c, d;

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return 0;
	/* F16C is CPUID.1:ECX bit 29; __builtin_cpu_supports lacks it */
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	return (c >> 29) & 1;
}

const struct kve_kernels *kve_kernels_select(void)
{
	const struct kve_kernels *k;
	const char *want;

	if (chosen)
		return chosen;
	k = &kve_kernels_c;
	if (has_avx2())
		k = &kve_kernels_avx2;
	if (k == &kve_kernels_avx2 && has_avx512())
		k = &kve_kernels_avx512;
	want = getenv("KVE_ISA");
	if (want) {
		if (!strcmp(want, "c"))
			k = &kve_kernels_c;
		else if (!strcmp(want, "avx2") && k == &kve_kernels_avx512)
			k = &kve_kernels_avx2;
	}
	chosen = k;
	return k;
}

const char *kve_isa_name(void)
{
	return kve_kernels_select()->name;
}
