/* SPDX-License-Identifier: MIT */
/*
 * threads.h - a fixed team of worker threads for the forward pass. A job
 * is a number of chunks; the threads claim them one at a time, so a
 * thread the host has descheduled costs at most the chunk it holds, and
 * the others finish the rest. Waiting spins for a bounded time, then
 * sleeps on a futex: a spinning barrier on a loaded host starves the
 * thread it waits for, a sleeping one costs a wake-up per job.
 */
#ifndef KVE_THREADS_H
#define KVE_THREADS_H

#include <stdint.h>

struct kve_threads;
/* one chunk of a job; tid (0 = the caller) only picks per-thread scratch */
typedef void (*kve_job_fn)(void *arg, int chunk, int tid);

/* Most chunks one job may have. */
#define KVE_THREADS_MAX_CHUNKS 65535

struct kve_threads *kve_threads_create(int n);	/* n >= 1, caller included */
void kve_threads_free(struct kve_threads *t);
/* Runs fn(arg, c, tid) once for each c in [0, nchunks), spread over the
 * team (the caller is tid 0 and takes part); returns when all are done.
 * Which thread runs a chunk varies from run to run, so results must not
 * depend on it. nchunks in [1, KVE_THREADS_MAX_CHUNKS]. */
void kve_threads_run(struct kve_threads *t, kve_job_fn fn, void *arg, int nchunks);
int kve_threads_count(const struct kve_threads *t);
/* How long an idle thread spins before it sleeps, in nanoseconds:
 * $KVE_SPIN_US microseconds when it is a number in [0, 10000], else 50
 * (read by kve_threads_create). */
long kve_threads_spin_ns(const struct kve_threads *t);
/* Workers asleep on the futex now (or about to be): an idle team has all
 * n - 1 of them there once its spin has run out. For tests and stats. */
int kve_threads_asleep(const struct kve_threads *t);
/* How the caller's waits for the others' chunks ended so far: seen done
 * while spinning (the wait was shorter than the spin), or after sleeping
 * on the futex. The caller's thread only; for tests and tuning. */
void kve_threads_waits(const struct kve_threads *t, uint64_t *spun, uint64_t *slept);

#endif
