/* SPDX-License-Identifier: MIT */
/*
 * threads.h - a fixed team of worker threads for the forward pass, woken
 * and joined with a mutex and condition variables (no spinning: on a
 * loaded host a spinning barrier starves the thread it waits for).
 */
#ifndef KVE_THREADS_H
#define KVE_THREADS_H

struct kve_threads;
typedef void (*kve_job_fn)(void *arg, int tid, int nthreads);

struct kve_threads *kve_threads_create(int n);	/* n >= 1, caller included */
void kve_threads_free(struct kve_threads *t);
/* Runs fn(arg, tid, n) on every thread (the caller is tid 0); returns when
 * all are done. */
void kve_threads_run(struct kve_threads *t, kve_job_fn fn, void *arg);
int kve_threads_count(const struct kve_threads *t);

#endif
