// SPDX-License-Identifier: MIT
/*
 * kernels.c - picks the kernel set once, by CPU features: AVX-512 with
 * VNNI > AVX-512 (F, BW, VL) > AVX-VNNI > AVX2 (+FMA, F16C) > portable C.
 * The VNNI sets are their parent sets with the Q8_0 product done by
 * vpdpbusd (kernels_avxvnni.c, kernels_avx512vnni.c). KVE_ISA=c|avx2|
 * avxvnni|avx512|avx512vnni may ask for a lower set (never for one the CPU
 * lacks), which is how tests cover the fallbacks. The AVX-512 and VNNI
 * sets were developed on AVX2 machines (the AVX-512 ones run under
 * emulation, tests/engine/avx512-emu.sh; all of them on one Zen 5 since),
 * so before one is used it must pass kve_kernels_selfcheck() against the
 * portable C set; if it
 * does not, the next lower set is tried and one line says why (stderr,
 * and kve_isa_note()). KVE_SELFCHECK=1 checks any SIMD set picked.
 */
#include "engine_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* picked once, under pick_lock: engines may be created from many threads */
static pthread_mutex_t pick_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct kve_kernels *chosen;
static char note[768];
int kve_prefetch;

static struct kve_kernels set_avxvnni, set_avx512vnni;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

static void make_vnni_sets(void)
{
	set_avxvnni = kve_kernels_avx2;
	set_avxvnni.name = "avxvnni";
	set_avxvnni.mm_q8 = kve_mm_q8_avxvnni;
	set_avxvnni.mm_q32 = kve_mm_q32_avxvnni;
	set_avxvnni.mm_qk = kve_mm_qk_avxvnni;
	set_avx512vnni = kve_kernels_avx512;
	set_avx512vnni.name = "avx512vnni";
	set_avx512vnni.mm_q8 = kve_mm_q8_avx512vnni;
	set_avx512vnni.mm_q32 = kve_mm_q32_avx512vnni;
	set_avx512vnni.mm_qk = kve_mm_qk_avx512vnni;
	set_avx512vnni.attn_scores_q8 = kve_attn_scores_q8_avx512vnni;
	set_avx512vnni.q8_x16 = 1;
}

const struct kve_kernels *kve_kernels_avxvnni(void)
{
	pthread_once(&vnni_once, make_vnni_sets);
	return &set_avxvnni;
}

const struct kve_kernels *kve_kernels_avx512vnni(void)
{
	pthread_once(&vnni_once, make_vnni_sets);
	return &set_avx512vnni;
}

static int has_f16c(void)
{
	unsigned int a, b, c, d;

	/* F16C is CPUID.1:ECX bit 29; __builtin_cpu_supports lacks it */
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	return (c >> 29) & 1;
}

unsigned kve_cpu_probe(void)
{
	unsigned has = has_f16c() ? KVE_HAS_F16C : 0;

	/* libgcc reports AVX and AVX-512 features only when XCR0 has their
	 * register state on; __builtin_cpu_supports takes literal names only */
	__builtin_cpu_init();
	has |= __builtin_cpu_supports("avx2") ? KVE_HAS_AVX2 : 0;
	has |= __builtin_cpu_supports("fma") ? KVE_HAS_FMA : 0;
	has |= __builtin_cpu_supports("avxvnni") ? KVE_HAS_AVXVNNI : 0;
	has |= __builtin_cpu_supports("avx512f") ? KVE_HAS_AVX512F : 0;
	has |= __builtin_cpu_supports("avx512bw") ? KVE_HAS_AVX512BW : 0;
	has |= __builtin_cpu_supports("avx512vl") ? KVE_HAS_AVX512VL : 0;
	has |= __builtin_cpu_supports("avx512vnni") ? KVE_HAS_AVX512VNNI : 0;
	return has;
}

int kve_prefetch_for(const char *want, unsigned ebx0, unsigned edx0, unsigned ecx0,
		     unsigned eax1)
{
	/* "AuthenticAMD" in ebx, edx, ecx */
	const int amd = ebx0 == 0x68747541u && edx0 == 0x69746e65u && ecx0 == 0x444d4163u;
	unsigned family = (eax1 >> 8) & 0xf;

	if (want && (!strcmp(want, "0") || !strcmp(want, "1")))
		return want[0] == '1';
	if (family == 0xf)
		family += (eax1 >> 20) & 0xff;
	return amd && family == 0x1a;
}

static int prefetch_default(void)
{
	unsigned a, b, c, d, b0, c0, d0;

	__asm__ volatile("cpuid" : "=a"(a), "=b"(b0), "=c"(c0), "=d"(d0) : "a"(0), "c"(0));
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	return kve_prefetch_for(getenv("KVE_PREFETCH"), b0, d0, c0, a);
}

unsigned kve_cpu_features_from(unsigned has)
{
	const unsigned avx2 = KVE_HAS_AVX2 | KVE_HAS_FMA | KVE_HAS_F16C;
	const unsigned avx512 = KVE_HAS_AVX512F | KVE_HAS_AVX512BW | KVE_HAS_AVX512VL;
	unsigned cpu = 0;

	if ((has & avx2) != avx2)
		return 0;
	cpu |= KVE_CPU_AVX2;
	if (has & KVE_HAS_AVXVNNI)
		cpu |= KVE_CPU_AVXVNNI;
	if ((has & avx512) == avx512) {
		cpu |= KVE_CPU_AVX512;
		if (has & KVE_HAS_AVX512VNNI)
			cpu |= KVE_CPU_AVX512VNNI;
	}
	return cpu;
}

unsigned kve_cpu_features(void)
{
	return kve_cpu_features_from(kve_cpu_probe());
}

#define NSETS 5

const struct kve_kernels *kve_kernels_pick_sets(unsigned cpu, const char *want,
						int force_check,
						const struct kve_kernel_sets *s,
						char *log, size_t loglen)
{
	/* best first; names are what KVE_ISA takes */
	const struct {
		const char *name;
		const struct kve_kernels *k;
		unsigned need;
		int untested;	/* never run where the engine was developed */
	} cand[NSETS] = {
		{ "avx512vnni", s->avx512vnni,
		  KVE_CPU_AVX2 | KVE_CPU_AVX512 | KVE_CPU_AVX512VNNI, 1 },
		{ "avx512", s->avx512, KVE_CPU_AVX2 | KVE_CPU_AVX512, 1 },
		{ "avxvnni", s->avxvnni, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI, 1 },
		{ "avx2", s->avx2, KVE_CPU_AVX2, 0 },
		{ "c", s->c, 0, 0 },
	};
	char why[384];
	size_t used = 0;
	int i = 0, j, rc;

	if (log && loglen)
		log[0] = 0;
	if (want)
		for (j = 0; j < NSETS; j++)
			if (!strcmp(want, cand[j].name))
				i = j;
	while (i < NSETS - 1 && (!cand[i].k || (cpu & cand[i].need) != cand[i].need))
		i++;
	while (i < NSETS - 1 && (cand[i].untested || force_check)) {
		rc = kve_kernels_selfcheck(cand[i].k, s->c, why, sizeof(why));
		if (!rc)
			break;
		if (rc == -ENOMEM) {
			/* no verdict: a short allocation must not cost a set for good */
			if (log && loglen > used + 1)
				snprintf(log + used, loglen - used,
					 "%skvengine: %s kernel self-check could not run (%s)",
					 used ? "\n" : "", cand[i].k->name, why);
			return NULL;
		}
		j = i + 1;
		while (j < NSETS - 1 && (!cand[j].k || (cpu & cand[j].need) != cand[j].need))
			j++;
		if (log && loglen > used + 1) {
			int n = snprintf(log + used, loglen - used,
					 "%skvengine: %s kernel self-check failed (%s); using %s kernels",
					 used ? "\n" : "", cand[i].k->name, why, cand[j].k->name);
			used = n < 0 ? used : used + (size_t)n;
			if (used >= loglen)
				used = loglen - 1;
		}
		i = j;
	}
	return cand[i].k;
}

const struct kve_kernels *kve_kernels_pick(unsigned cpu, const char *want,
					   int force_check,
					   const struct kve_kernels *set512,
					   const struct kve_kernels *set2,
					   const struct kve_kernels *setc,
					   char *log, size_t loglen)
{
	const struct kve_kernel_sets s = { NULL, set512, NULL, set2, setc };

	return kve_kernels_pick_sets(cpu & (KVE_CPU_AVX2 | KVE_CPU_AVX512), want, force_check,
				     &s, log, loglen);
}

const struct kve_kernels *kve_kernels_select(void)
{
	const struct kve_kernels *k;
	const char *force;
	struct kve_kernel_sets s = {
		kve_kernels_avx512vnni(), &kve_kernels_avx512, kve_kernels_avxvnni(),
		&kve_kernels_avx2, &kve_kernels_c,
	};

	pthread_mutex_lock(&pick_lock);
	if (!chosen) {
		force = getenv("KVE_SELFCHECK");
		k = kve_kernels_pick_sets(kve_cpu_features(), getenv("KVE_ISA"),
					  force && !strcmp(force, "1"), &s, note, sizeof(note));
		if (note[0])
			fprintf(stderr, "%s\n", note);
		kve_prefetch = prefetch_default();
		chosen = k;
	}
	k = chosen;
	pthread_mutex_unlock(&pick_lock);
	return k;
}

const char *kve_isa_name(void)
{
	const struct kve_kernels *k = kve_kernels_select();

	return k ? k->name : "none (out of memory)";
}

int kve_isa_prefetch(void)
{
	kve_kernels_select();
	return kve_prefetch;
}

const char *kve_isa_note(void)
{
	kve_kernels_select();
	return note;
}
