// SPDX-License-Identifier: MIT
/*
 * threads.c - the engine's worker team (see threads.h). One generation
 * counter under a mutex: run() bumps it and broadcasts, each worker runs
 * its share and the last to finish signals the caller. With one thread
 * run() is a plain call.
 */
#define _GNU_SOURCE
#include "threads.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct kve_threads {
	int n;
	pthread_t *th;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	int pending;
	int stop;
	kve_job_fn fn;
	void *arg;
};

struct worker_arg {
	struct kve_threads *t;
	int tid;
};

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct kve_threads *t = wa->t;
	int tid = wa->tid;
	uint64_t seen = 0;

	free(wa);
	for (;;) {
		kve_job_fn fn;
		void *arg;

		pthread_mutex_lock(&t->mu);
		while (t->gen == seen && !t->stop)
			pthread_cond_wait(&t->go, &t->mu);
		if (t->stop) {
			pthread_mutex_unlock(&t->mu);
			return NULL;
		}
		seen = t->gen;
		fn = t->fn;
		arg = t->arg;
		pthread_mutex_unlock(&t->mu);

		fn(arg, tid, t->n);

		pthread_mutex_lock(&t->mu);
		if (--t->pending == 0)
			pthread_cond_signal(&t->done);
		pthread_mutex_unlock(&t->mu);
	}
}

struct kve_threads *kve_threads_create(int n)
{
	struct kve_threads *t;
	int i;

	if (n < 1)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->n = n;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->go, NULL);
	pthread_cond_init(&t->done, NULL);
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
		pthread_mutex_lock(&t->mu);
		t->stop = 1;
		pthread_cond_broadcast(&t->go);
		pthread_mutex_unlock(&t->mu);
		for (i = 1; i < t->n; i++)
			pthread_join(t->th[i - 1], NULL);
	}
	free(t->th);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->go);
	pthread_cond_destroy(&t->done);
	free(t);
}

void kve_threads_run(struct kve_threads *t, kve_job_fn fn, void *arg)
{
	if (t->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&t->mu);
	t->fn = fn;
	t->arg = arg;
	t->pending = t->n - 1;
	t->gen++;
	pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);

	fn(arg, 0, t->n);

	pthread_mutex_lock(&t->mu);
	while (t->pending)
		pthread_cond_wait(&t->done, &t->mu);
	pthread_mutex_unlock(&t->mu);
}

int kve_threads_count(const struct kve_threads *t)
{
	return t->n;
}
