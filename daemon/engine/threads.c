// SPDX-License-Identifier: MIT
/*
 * threads.c - the engine's worker team (see threads.h).
 *
 * Why not a mutex and condition variables (what this was): a decode step
 * of a 110M model is about 60 jobs of tens of microseconds each, and a
 * condition-variable hand-off costs two futex wake-ups per job, measured
 * at ~40 us per empty job on a loaded 2-core VM: more than the second
 * thread saves, so decode got slower with 2 threads. Here a job is
 * published with one atomic store and joined with one atomic counter;
 * a thread that finds nothing to do spins for KVE_SPIN_US (default 50
 * microseconds, enough to bridge the serial gaps between the jobs of one
 * step) and only then sleeps on a futex, so a host that has descheduled
 * the thread being waited for does not get a core burnt in return.
 *
 * Chunks are claimed from one 64-bit word, sequence << 32 | end << 16 |
 * next, by compare-and-swap: a claim succeeds only while the word still
 * names the job the thread read, so a thread woken late can neither run
 * a chunk of a finished job nor one of the next job with stale fn/arg
 * (all atomics are sequentially consistent; the job is written before the
 * word, and a job's fn/arg/nch change only once all its chunks are
 * claimed). The caller claims from the front (next++), the workers from
 * the back (--end), and chunk_of turns the back half around: with two
 * threads each then walks about the same half of every matrix upwards,
 * step after step, which it may still hold in its own caches, where
 * chunks taken alternately would go to either thread; the claims still
 * balance whatever the host does to either thread.
 */
#define _GNU_SOURCE
#include "threads.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US_DEFAULT	50
#define SPIN_US_MAX	10000

/* Three cache lines: the caller's own; the job, which a worker reads
 * whole as it starts (everything on one line: each line another core
 * wrote costs a transfer, about 0.5 us one way between the two vCPUs of
 * the Zen 5 VM); and done, which the workers write. */
struct kve_threads {
	int n;
	pthread_t *th;
	long spin_ns;
	uint32_t cur;			/* the caller's job counter */
	uint64_t waits_spun, waits_slept;	/* the caller's, kve_threads_waits */
	_Alignas(64) _Atomic uint64_t claim;	/* seq << 32 | end << 16 | next */
	_Atomic(kve_job_fn) fn;
	_Atomic(void *) arg;
	_Atomic uint32_t nch;			/* the job's chunks */
	_Atomic uint32_t seq;		/* futex: the latest job; workers wait on it */
	_Atomic uint32_t sleepers;		/* workers asleep (or about to be) on seq */
	_Atomic int stop;
	_Alignas(64) _Atomic uint32_t done;	/* futex: chunks of the job finished */
	_Atomic uint32_t caller_waits;		/* the caller is asleep on done */
};

struct worker_arg {
	struct kve_threads *t;
	int tid;
};

static void futex_wait(_Atomic uint32_t *a, uint32_t val)
{
	/* returns at once if *a != val; EINTR and spurious wake-ups just
	 * make the callers look again */
	syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *a, int n)
{
	syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins up to spin_ns while *a == val; 1 if it changed. */
static int spin_while(const struct kve_threads *t, _Atomic uint32_t *a, uint32_t val)
{
	long end = 0;
	int i;

	if (atomic_load(a) != val)
		return 1;
	if (t->spin_ns <= 0)
		return 0;
	for (;;) {
		for (i = 0; i < 64; i++) {
			cpu_relax();
			if (atomic_load(a) != val)
				return 1;
		}
		if (!end)
			end = now_ns() + t->spin_ns;
		else if (now_ns() > end)
			return 0;
	}
}

/* The chunk a claim of index i (of n) runs: the front half as it is, the
 * back half reversed. The caller claims 0, 1, ... (its half upwards) and
 * the worker n-1, n-2, ..., which here become h, h+1, ...: each thread
 * walks its half of a matrix upwards, one stream, where the worker's
 * chunks went downwards and each started a stream the kernels' prefetch
 * (ahead in memory) never reached. A thread that runs out takes the
 * other's last chunk first, as before. */
static inline int chunk_of(uint32_t i, uint32_t n)
{
	uint32_t h = (n + 1) / 2;

	return (int)(i < h ? i : n - 1 - i + h);
}

/* Claims and runs chunks of job s until none is left. */
static void work(struct kve_threads *t, uint32_t s, int tid)
{
	for (;;) {
		uint64_t w = atomic_load(&t->claim);
		kve_job_fn fn = atomic_load(&t->fn);
		void *arg = atomic_load(&t->arg);
		uint32_t next = (uint32_t)(w & 0xffff), end = (uint32_t)((w >> 16) & 0xffff), nch;

		if ((uint32_t)(w >> 32) != s || next >= end)
			return;
		if (!atomic_compare_exchange_weak(&t->claim, &w, tid ? w - (1u << 16) : w + 1))
			continue;
		/* the job's until its last chunk is done, which needs this one */
		nch = atomic_load(&t->nch);
		fn(arg, chunk_of(tid ? end - 1 : next, nch), tid);
		if (atomic_fetch_add(&t->done, 1) + 1 == nch && atomic_load(&t->caller_waits))
			futex_wake(&t->done, 1);
	}
}

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct kve_threads *t = wa->t;
	int tid = wa->tid;
	uint32_t seen = 0;

	free(wa);
	for (;;) {
		if (!spin_while(t, &t->seq, seen)) {
			atomic_fetch_add(&t->sleepers, 1);
			while (atomic_load(&t->seq) == seen)
				futex_wait(&t->seq, seen);
			atomic_fetch_sub(&t->sleepers, 1);
		}
		if (atomic_load(&t->stop))
			return NULL;
		seen = atomic_load(&t->seq);
		work(t, seen, tid);
	}
}

static long spin_ns_from_env(void)
{
	const char *s = getenv("KVE_SPIN_US");
	char *end;
	long v;

	if (!s || !*s)
		return SPIN_US_DEFAULT * 1000L;
	v = strtol(s, &end, 10);
	if (*end || v < 0 || v > SPIN_US_MAX)
		return SPIN_US_DEFAULT * 1000L;
	return v * 1000L;
}

struct kve_threads *kve_threads_create(int n)
{
	struct kve_threads *t;
	int i;

	if (n < 1)
		return NULL;
	t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
	if (!t)
		return NULL;
	*t = (struct kve_threads){ .n = n, .spin_ns = spin_ns_from_env() };
	if (n == 1)
		return t;
	t->th = calloc(n - 1, sizeof(*t->th));
	if (!t->th)
		goto fail;
	for (i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		if (!wa)
			goto fail_started;
		wa->t = t;
		wa->tid = i;
		if (pthread_create(&t->th[i - 1], NULL, worker, wa)) {
			free(wa);
			goto fail_started;
		}
	}
	return t;
fail_started:
	t->n = i;	/* workers 1..i-1 exist */
	kve_threads_free(t);
	return NULL;
fail:
	free(t);
	return NULL;
}

void kve_threads_free(struct kve_threads *t)
{
	int i;

	if (!t)
		return;
	if (t->n > 1) {
		atomic_store(&t->stop, 1);
		atomic_store(&t->seq, ++t->cur);
		futex_wake(&t->seq, INT_MAX);
		for (i = 1; i < t->n; i++)
			pthread_join(t->th[i - 1], NULL);
	}
	free(t->th);
	free(t);
}

void kve_threads_run(struct kve_threads *t, kve_job_fn fn, void *arg, int nchunks)
{
	uint32_t nch = (uint32_t)nchunks;
	int c;

	if (t->n == 1 || nchunks == 1) {
		for (c = 0; c < nchunks; c++)
			fn(arg, c, 0);
		return;
	}
	if (nchunks < 1 || nchunks > KVE_THREADS_MAX_CHUNKS)
		abort();	/* a caller's bug, never input-driven */
	atomic_store(&t->fn, fn);
	atomic_store(&t->arg, arg);
	atomic_store(&t->done, 0);
	atomic_store(&t->nch, nch);
	t->cur++;
	atomic_store(&t->claim, (uint64_t)t->cur << 32 | (uint64_t)nch << 16);
	atomic_store(&t->seq, t->cur);
	if (atomic_load(&t->sleepers))
		futex_wake(&t->seq, INT_MAX);

	work(t, t->cur, 0);

	/* the others hold at most one chunk each: wait for done == nch,
	 * spinning while it moves, asleep once it stops moving */
	for (;;) {
		uint32_t d = atomic_load(&t->done);

		if (d == nch)
			break;
		if (spin_while(t, &t->done, d)) {
			t->waits_spun++;
			continue;
		}
		t->waits_slept++;
		atomic_store(&t->caller_waits, 1);
		if (atomic_load(&t->done) == d)
			futex_wait(&t->done, d);
		atomic_store(&t->caller_waits, 0);
	}
}

int kve_threads_count(const struct kve_threads *t)
{
	return t->n;
}

long kve_threads_spin_ns(const struct kve_threads *t)
{
	return t->spin_ns;
}

int kve_threads_asleep(const struct kve_threads *t)
{
	return (int)atomic_load(&t->sleepers);
}

void kve_threads_waits(const struct kve_threads *t, uint64_t *spun, uint64_t *slept)
{
	*spun = t->waits_spun;
	*slept = t->waits_slept;
}
