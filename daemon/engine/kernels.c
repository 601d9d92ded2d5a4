// SPDX-License-Identifier: MIT
/*
 * kernels.c - picks the kernel set once, by CPU features: AVX-512 (F, BW,
 * VL) > AVX2 (+FMA, F16C) > portable C. KVE_ISA=c|avx2|avx512 may ask for a
 * lower set (never for one the CPU lacks), which is how tests cover the
 * fallbacks. The AVX-512 set has never run on hardware during development,
 * so before it is used it must pass kve_kernels_selfcheck() against the
 * portable C set; if it does not, AVX2 is used and one line says why
 * (stderr, and kve_isa_note()). KVE_SELFCHECK=1 checks any SIMD set picked.
 */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct kve_kernels *chosen;
static char note[512];

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

const struct kve_kernels *kve_kernels_pick(unsigned cpu, const char *want,
					   int force_check,
					   const struct kve_kernels *set512,
					   const struct kve_kernels *set2,
					   const struct kve_kernels *setc,
					   char *log, size_t loglen)
{
	const struct kve_kernels *k = setc;
	char why[384];

	if (log && loglen)
		log[0] = 0;
	if (cpu & KVE_CPU_AVX2) {
		k = set2;
		if (cpu & KVE_CPU_AVX512)
			k = set512;
	}
	if (want) {
		if (!strcmp(want, "c"))
			k = setc;
		else if (!strcmp(want, "avx2") && k == set512)
			k = set2;
	}
	while (k != setc && (k == set512 || force_check)) {
		const struct kve_kernels *lower = k == set512 ? set2 : setc;

		if (!kve_kernels_selfcheck(k, setc, why, sizeof(why)))
			break;
		if (log && loglen)
			snprintf(log, loglen, "kvengine: %s kernel self-check failed (%s); "
				 "using %s kernels", k->name, why, lower->name);
		k = lower;
	}
	return k;
}

const struct kve_kernels *kve_kernels_select(void)
{
	const struct kve_kernels *k;
	const char *force;
	unsigned cpu = 0;

	if (chosen)
		return chosen;
	if (has_avx2()) {
		cpu |= KVE_CPU_AVX2;
		if (has_avx512())
			cpu |= KVE_CPU_AVX512;
	}
	force = getenv("KVE_SELFCHECK");
	k = kve_kernels_pick(cpu, getenv("KVE_ISA"), force && !strcmp(force, "1"),
			     &kve_kernels_avx512, &kve_kernels_avx2, &kve_kernels_c,
			     note, sizeof(note));
	if (note[0])
		fprintf(stderr, "%s\n", note);
	chosen = k;
	return k;
}

const char *kve_isa_name(void)
{
	return kve_kernels_select()->name;
}

const char *kve_isa_note(void)
{
	kve_kernels_select();
	return note;
}
