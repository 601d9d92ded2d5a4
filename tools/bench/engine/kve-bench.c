// SPDX-License-Identifier: MIT
/*
 * kve-bench - times kvarena's engine on one GGUF file: prefill of a prompt
 * (best of 3), greedy decode, decode with a batch of sessions that share
 * the prompt's blocks, and the decode roofline: the rate at which as many
 * threads as --threads read the model's own matrices, in passes that
 * alternate with the decode steps. Prints key=value lines for bench.sh. The prompt is the same
 * token formula the llama.cpp driver uses, so argmax can be compared.
 * KV lives in a libkvarena arena (kernel backend if /dev/kvarena opens,
 * else memfd) through daemon/engine/kv_arena.c, as in production: blocks
 * are allocated per session, the batch sessions share the prompt's blocks
 * with kva_blocks_share, and with --own N each prefills N tokens of its
 * own after it (conversations that share a system prompt, each with its
 * own turns; untimed). Blocks are reserved, and the arena written
 * once, before the timed sections.
 *
 * usage: kve-bench MODEL [--threads N] [--prompt N] [--decode N] [--batch N]
 *                  [--own N] [--kv f16|f32|q8_0] [--block N] [--no-bw] [--bw-mib N]
 *                  [--backend kernel|memfd|auto]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kvengine.h"
#include "kv_arena.h"
#include "bench_argmax.h"

#define PREFILL_REPS 3

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((target("avx2")))
static double read_pass(const uint8_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	size_t i;
	long long out[4];

	for (i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	_mm256_storeu_si256((__m256i *)out, a0);
	return (double)(out[0] + out[1] + out[2] + out[3]);
}

/* CPU seconds of all this process's threads: on a shared host the wall
 * clock counts the time others held the cores, this does not (it does
 * count a waiting thread's spinning) */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile double bw_sink;	/* keeps the read passes alive */

struct bw_part {
	const uint8_t *p;
	size_t n;
	pthread_barrier_t *go;
	double sum;
};

static void *bw_thread(void *arg)
{
	struct bw_part *b = arg;

	pthread_barrier_wait(b->go);
	b->sum = read_pass(b->p, b->n);
	return NULL;
}

/* Best of 5 passes over mib MiB (512 unless --bw-mib), GB/s, the buffer
 * read by nth threads (each its own slice, started together); huge: the
 * buffer in 2 MiB
 * transparent huge pages (as the engine's weights are by default), else
 * 4 KiB pages. The roofline takes the better of the two. */
static double read_bandwidth(int huge, int nth, size_t mib)
{
	size_t n = mib << 20, al = 2u << 20, part;
	uint8_t *raw = mmap(NULL, n + al, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *p;
	double best = 0;
	int i, k;

	if (raw == MAP_FAILED)
		return 0;
	if (nth < 1 || nth > 2)
		nth = 1;
	part = n / (size_t)nth;
	p = (uint8_t *)(((uintptr_t)raw + al - 1) & ~(uintptr_t)(al - 1));
	madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	memset(p, 1, n);
	for (i = 0; i < 5; i++) {
		struct bw_part parts[2];
		pthread_t th[2];
		pthread_barrier_t go;
		double t;

		pthread_barrier_init(&go, NULL, (unsigned)nth + 1);
		for (k = 0; k < nth; k++) {
			parts[k] = (struct bw_part){ p + (size_t)k * part, part, &go, 0 };
			if (pthread_create(&th[k], NULL, bw_thread, &parts[k]))
				abort();
		}
		t = now();
		pthread_barrier_wait(&go);
		for (k = 0; k < nth; k++) {
			pthread_join(th[k], NULL);
			bw_sink += parts[k].sum;
		}
		t = now() - t;
		pthread_barrier_destroy(&go);
		if (n / t / 1e9 > best)
			best = n / t / 1e9;
	}
	munmap(raw, n + al);
	return best;
}

/*
 * The roofline's read passes: the model's matrices as a decode step reads
 * them (the same memory, so the same pages and the same share left in the
 * caches by the pass before), each matrix split in halves between two
 * threads as the engine splits it. A pass alternates with a decode step,
 * so both meet the same neighbours on a shared host, and the rate is
 * bytes over the passes' whole time, as decode's is tokens over its steps'
 * whole time. The helper thread is woken before the clock starts and the
 * two begin together (a spin handshake), so its wake-up is not counted.
 */
struct wpass {
	const struct kve_model *m;
	int nth;
	pthread_t helper;
	atomic_int go, ready, done;	/* pass numbers */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int quit;
	double sum;		/* the helper's, kept alive */
};

static double read_matrices(const struct kve_model *m, int part, int nth)
{
	const void *p;
	size_t len, a, b;
	uint32_t n;
	double sum = 0;

	for (n = 0; !kve_model_matrix(m, n, &p, &len); n++) {
		a = nth == 1 ? 0 : part * (len / 2 & ~(size_t)127);
		b = nth == 1 || part ? len : len / 2 & ~(size_t)127;
		sum += read_pass((const uint8_t *)p + a, b - a);
	}
	return sum;
}

static void *wpass_helper(void *arg)
{
	struct wpass *w = arg;
	int seen = 0;

	for (;;) {
		pthread_mutex_lock(&w->mu);
		while (!w->quit && atomic_load(&w->go) <= seen)
			pthread_cond_wait(&w->cv, &w->mu);
		pthread_mutex_unlock(&w->mu);
		if (w->quit)
			return NULL;
		seen = atomic_load(&w->go);
		atomic_store(&w->ready, seen);
		while (atomic_load(&w->go) != -seen)	/* the start */
			_mm_pause();
		w->sum += read_matrices(w->m, 1, 2);
		atomic_store(&w->done, seen);
	}
}

/* one pass, its seconds */
static double wpass_run(struct wpass *w, int k)
{
	double t;

	if (w->nth == 2) {
		/* the helper on a CPU other than ours: woken on this one
		 * (the scheduler's habit for a thread woken by another), the
		 * two would share a core, and the roofline would be one
		 * thread's (2 threads read at 1.0x one in loaded runs so) */
		int cpu = sched_getcpu(), o;
		cpu_set_t all, other;

		CPU_ZERO(&other);
		if (cpu >= 0 && !sched_getaffinity(0, sizeof(all), &all))
			for (o = 0; o < CPU_SETSIZE; o++)
				if (o != cpu && CPU_ISSET(o, &all)) {
					CPU_SET(o, &other);
					pthread_setaffinity_np(w->helper, sizeof(other), &other);
					break;
				}
		pthread_mutex_lock(&w->mu);
		atomic_store(&w->go, k);
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
		while (atomic_load(&w->ready) != k)
			_mm_pause();
	}
	t = now();
	atomic_store(&w->go, -k);
	bw_sink += read_matrices(w->m, 0, w->nth);
	while (w->nth == 2 && atomic_load(&w->done) != k)
		_mm_pause();
	return now() - t;
}

static int32_t argmax(const float *l, uint32_t n)
{
	return (int32_t)bench_argmax(l, (int)n);
}

int main(int argc, char **argv)
{
	uint32_t threads = 1, prompt = 128, ndec = 64, batch = 8, own = 0, bt = 16, i, j;
	enum kve_kv_dtype dt = KVE_KV_F16;
	enum kva_backend backend = KVA_BACKEND_AUTO;
	int bw = 1, a, rc;
	size_t bw_mib = 512;	/* the read test's buffer */
	char err[256];
	struct kve_model *m;
	const struct kve_model_info *in;
	struct kve_engine *e;
	struct kve_engine_params ep = { 0 };
	struct kve_arena_kv *kv;
	struct kve_arena_kv_params ap = { 0 };
	struct kve_arena_session s0, *ss;
	int32_t *tok, next[64];
	float *lg;
	uint32_t per, ctx;
	double t, t_pre, t_dec, t_bat, c_dec, c_pre = 0, c_bat = 0, t_min = 0;
	double t_read = 0, kv_read = 0, dram = 0;
	size_t kv_tok;
	struct wpass wp = { .nth = 1 };

	if (argc < 2) {
		fprintf(stderr, "usage: kve-bench MODEL [options]\n");
		return 2;
	}
	for (a = 2; a < argc; a++) {
		if (!strcmp(argv[a], "--threads") && a + 1 < argc) threads = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--prompt") && a + 1 < argc) prompt = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--decode") && a + 1 < argc) ndec = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--batch") && a + 1 < argc) batch = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--own") && a + 1 < argc) own = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--block") && a + 1 < argc) bt = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--kv") && a + 1 < argc)
			dt = !strcmp(argv[++a], "f32") ? KVE_KV_F32 :
			     !strcmp(argv[a], "q8_0") ? KVE_KV_Q8_0 : KVE_KV_F16;
		else if (!strcmp(argv[a], "--no-bw")) bw = 0;
		else if (!strcmp(argv[a], "--bw-mib") && a + 1 < argc) bw_mib = strtoul(argv[++a], NULL, 10);
		else if (!strcmp(argv[a], "--backend") && a + 1 < argc) {
			a++;	/* where the KV arena is: kernel, memfd, auto */
			backend = !strcmp(argv[a], "kernel") ? KVA_BACKEND_KERNEL :
				  !strcmp(argv[a], "memfd") ? KVA_BACKEND_MEMFD :
				  KVA_BACKEND_AUTO;
		}
		else { fprintf(stderr, "kve-bench: unknown option %s\n", argv[a]); return 2; }
	}
	if (!bw_mib || bw_mib > 65536) {
		fprintf(stderr, "kve-bench: --bw-mib 1..65536\n");
		return 2;
	}
	if (!batch || batch > 64 || !prompt || prompt % bt || own > 65536) {
		fprintf(stderr, "kve-bench: batch 1..64, prompt a multiple of the block size, "
			"own 0..65536\n");
		return 2;
	}
	m = kve_model_load(argv[1], err, sizeof(err));
	if (!m) {
		fprintf(stderr, "kve-bench: %s\n", err);
		return 1;
	}
	in = kve_model_info(m);
	wp.m = m;
	wp.nth = threads == 2 ? 2 : 1;
	pthread_mutex_init(&wp.mu, NULL);
	pthread_cond_init(&wp.cv, NULL);
	/* K and V of one position, all layers: what the attention reads per
	 * position of the context (the KV store's element size) */
	kv_tok = kve_kv_block_bytes(m, 1, dt);
	ctx = prompt + own + ndec + 1;
	per = (ctx + bt - 1) / bt;
	/* the prompt's blocks once, then private tails for each session */
	ap.backend = backend;
	ap.n_blocks = per + batch * per;
	ap.block_tokens = bt;
	ap.dtype = dt;
	ap.name = "kve-bench";
	if (kve_arena_kv_create(m, &ap, &kv, err, sizeof(err))) {
		fprintf(stderr, "kve-bench: %s\n", err);
		return 1;
	}
	if (kve_arena_kv_pool(kv)->block_tokens != bt) {
		fprintf(stderr, "kve-bench: block of %u tokens over 2 MiB\n", bt);
		return 1;
	}
	/* Every block written once before anything is timed, as llama.cpp
	 * clears its KV buffer when it makes a context: on the Zen 5 VM the
	 * first write to a 4 KiB page of a new arena took 10-40 us (the
	 * host's, not a fault the guest sees), and decode's KV stores met
	 * one in each layer at every block boundary (Documentation/engine.md,
	 * Two threads). A new arena reads as zeros, so no value changes. */
	{
		const struct kve_kv_pool *pl = kve_arena_kv_pool(kv);
		size_t bb = kve_kv_block_bytes(m, bt, dt);
		uint32_t id;
		void *p;

		for (id = 0; (p = pl->block_ptr(pl->ctx, id)); id++)
			memset(p, 0, bb);
	}
	ep.n_threads = threads;
	ep.max_batch = batch;
	ep.max_chunk = prompt;
	ep.max_ctx = ctx;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	if (!e) {
		fprintf(stderr, "kve-bench: %s\n", err);
		return 1;
	}
	tok = malloc(sizeof(int32_t) * prompt);
	lg = malloc(sizeof(float) * in->vocab * batch);
	for (i = 0; i < prompt; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % in->vocab);

	/* prefill: session 0 holds the prompt's blocks and its decode tail */
	{
		struct kve_session *sp = &s0.s;

		rc = kve_arena_session_open(kv, 1, ctx, &s0);
		rc = rc ? rc : kve_arena_session_reserve(kv, &s0, ctx);
		if (rc) {
			fprintf(stderr, "kve-bench: arena session: %s\n", strerror(-rc));
			return 1;
		}
		/* best of PREFILL_REPS (the same in llama-driver.c): one
		 * prefill of a small model is a few ms on a shared host */
		for (t_pre = 0, j = 0; j < PREFILL_REPS; j++) {
			double c;

			s0.s.n_tokens = 0;	/* the same positions again */
			t = now();
			c = cpu_now();
			rc = kve_prefill(e, &s0.s, tok, prompt, lg);
			t = now() - t;
			c = cpu_now() - c;
			if (!j || c < c_pre)
				c_pre = c;
			if (rc) {
				fprintf(stderr, "kve-bench: prefill: %s\n", strerror(-rc));
				return 1;
			}
			if (!j || t < t_pre)
				t_pre = t;
		}
		next[0] = argmax(lg, in->vocab);
		printf("argmax=%d\n", next[0]);
		bench_print_runner_up(lg, (int)in->vocab, next[0]);
		if (bw && threads == 2 && pthread_create(&wp.helper, NULL, wpass_helper, &wp)) {
			fprintf(stderr, "kve-bench: pthread_create failed\n");
			return 1;
		}
		if (bw)	/* the first pass only brings the weights back */
			wpass_run(&wp, 1);
		for (t_dec = c_dec = 0, i = 0; i < ndec; i++) {
			double cs = cpu_now(), ts = now();

			rc = kve_decode(e, &sp, next, 1, lg);
			if (rc)
				return 1;
			next[0] = argmax(lg, in->vocab);
			ts = now() - ts;
			c_dec += cpu_now() - cs;
			t_dec += ts;
			if (!i || ts < t_min)
				t_min = ts;
			/* the attention read this step's K and V rows */
			kv_read += (double)kv_tok * sp->n_tokens;
			if (bw)
				t_read += wpass_run(&wp, (int)i + 2);
		}
		if (bw && threads == 2) {
			pthread_mutex_lock(&wp.mu);
			wp.quit = 1;
			pthread_cond_signal(&wp.cv);
			pthread_mutex_unlock(&wp.mu);
			pthread_join(wp.helper, NULL);
		}

		/* batch: sessions share the prompt's blocks, own their tails */
		{
			struct kve_session **ps = calloc(batch, sizeof(*ps));
			uint32_t steps = ndec / 2 ? ndec / 2 : 1;

			ss = calloc(batch, sizeof(*ss));
			for (j = 0; j < batch; j++) {
				rc = kve_arena_session_open(kv, 2 + j, ctx, &ss[j]);
				rc = rc ? rc : kve_arena_session_share(kv, &ss[j], &s0, prompt / bt);
				rc = rc ? rc : kve_arena_session_reserve(kv, &ss[j], own + steps);
				if (!rc && own) {	/* its own turns */
					int32_t *mine = malloc(own * sizeof(*mine));

					for (i = 0; mine && i < own; i++)
						mine[i] = (int32_t)((tok[i % prompt] + 7 * j + 1) % in->vocab);
					rc = mine ? kve_prefill(e, &ss[j].s, mine, own, lg) : -ENOMEM;
					free(mine);
				}
				if (rc) {
					fprintf(stderr, "kve-bench: batch session: %s\n", strerror(-rc));
					return 1;
				}
				ps[j] = &ss[j].s;
				next[j] = (int32_t)((tok[prompt - 1] + j) % in->vocab);
			}
			t = now();
			c_bat = cpu_now();
			for (i = 0; i < steps; i++) {
				rc = kve_decode(e, ps, next, batch, lg);
				if (rc) {
					fprintf(stderr, "kve-bench: batch decode: %s\n", strerror(-rc));
					return 1;
				}
				for (j = 0; j < batch; j++)
					next[j] = argmax(lg + (size_t)j * in->vocab, in->vocab);
			}
			t_bat = (now() - t) / steps;
			c_bat = (cpu_now() - c_bat) / steps;
			for (j = 0; j < batch; j++)
				kve_arena_session_close(kv, &ss[j]);
			free(ss);
			free(ps);
		}
		kve_arena_session_close(kv, &s0);
	}
	{
		struct kve_arena_geom g;

		kve_arena_kv_geom(kv, &g);
		printf("kv=%s arena, %u-byte blocks of %u tokens\n",
		       kve_arena_kv_backend(kv) == KVA_BACKEND_KERNEL ? "kernel" : "memfd",
		       g.block_size, g.block_tokens);
	}
	printf("weights=%s\n", getenv("KVE_WEIGHTS") ? getenv("KVE_WEIGHTS") : "default");
	printf("prefetch=%d\n", kve_isa_prefetch());
	printf("isa=%s\nthreads=%u\nprefill_tps=%.1f\ndecode_tps=%.1f\nbatch=%u\nbatch_tps=%.1f\n",
	       kve_isa_name(), threads, prompt / t_pre, ndec / t_dec, batch, batch / t_bat);
	/* decode_cpu_tps: tokens per CPU second (all threads); decode_cpus:
	 * CPUs the decode loop held on average (threads x 1.0 when the host
	 * left them alone); decode_best_tps: from the fastest single step,
	 * the one the host disturbed least */
	printf("decode_cpu_tps=%.1f\ndecode_cpus=%.2f\ndecode_best_tps=%.1f\n",
	       ndec / c_dec, c_dec / t_dec, 1.0 / t_min);
	/* the same per CPU second, for prefill (best of PREFILL_REPS) and
	 * the batch: what a shared host's wall clock hides */
	printf("prefill_cpu_tps=%.1f\nbatch_cpu_tps=%.1f\n", prompt / c_pre, batch / c_bat);
	printf("weight_mb=%.1f\n", in->weight_bytes / 1e6);
	if (bw) {
		/* the roofline: a step's bytes (all matrices, and the K and
		 * V rows its attention reads) at the rate the passes between
		 * the steps read the matrices */
		double gbs = (double)ndec * (double)in->weight_bytes / t_read / 1e9;
		double bytes = (double)in->weight_bytes + kv_read / ndec;
		double roof = gbs * 1e9 / bytes;
		/* and, for comparison, DRAM: best of 5 passes over a --bw-mib
		 * buffer (512 MiB) in 4 KiB and 2 MiB pages */
		double g4 = read_bandwidth(0, (int)threads, bw_mib);
		double g2 = read_bandwidth(1, (int)threads, bw_mib);

		dram = g2 > g4 ? g2 : g4;
		printf("kv_read_mb=%.1f\n", kv_read / ndec / 1e6);
		printf("dram_gbs_4k=%.1f\ndram_gbs_2m=%.1f\ndram_gbs=%.1f\n", g4, g2, dram);
		printf("dram_roofline_pct=%.1f\n",
		       100.0 * (ndec / t_dec) / (dram * 1e9 / (double)in->weight_bytes));
		printf("read_gbs=%.1f\nroofline_tps=%.1f\nroofline_pct=%.1f\n", gbs, roof,
		       100.0 * (ndec / t_dec) / roof);
	}
	return 0;
}
