// SPDX-License-Identifier: MIT
/*
 * test_threads - the worker team (daemon/engine/threads.c): every chunk of
 * every job runs exactly once and its writes are visible when run()
 * returns, over many jobs of varying size, with the bounded spin (the
 * default) and with KVE_SPIN_US=0 (every wait goes to the futex: the
 * sleep/wake paths). An idle team's workers go to sleep once their spin
 * runs out (waited for with a generous deadline, never timed), and
 * KVE_SPIN_US is read as documented. Each thread walks its half of a
 * job upwards from the half's start (the caller the front half, the
 * worker the back one), then takes the other's last chunks downwards. No
 * timing is asserted: the host may be loaded.
 */
#define _GNU_SOURCE
#include "threads.h"

#include <stdatomic.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tcheck.h"

#define JOBS	20000
#define MAXC	64

struct job {
	int seq;
	int out[MAXC];			/* plain writes, read after run() */
	_Atomic int runs[MAXC];
	_Atomic int by_tid[2];
	int order[2][MAXC], nord[2];	/* each thread's chunks, in its order */
};

static void chunk(void *arg, int c, int tid)
{
	struct job *j = arg;

	j->out[c] = j->seq * 131 + c;
	atomic_fetch_add(&j->runs[c], 1);
	if (tid >= 0 && tid < 2) {
		atomic_fetch_add(&j->by_tid[tid], 1);
		j->order[tid][j->nord[tid]++] = c;
	}
}

/* 1 if the chunks of o[0..m) that lie in [lo, hi) are lo, lo + 1, ...
 * (up) or hi - 1, hi - 2, ... (down), in that order */
static int walks(const int *o, int m, int lo, int hi, int up)
{
	int i, k = 0;

	for (i = 0; i < m; i++) {
		if (o[i] < lo || o[i] >= hi)
			continue;
		if (o[i] != (up ? lo + k : hi - 1 - k))
			return 0;
		k++;
	}
	return 1;
}

/* The caller walks the front half [0, h) upwards and takes the back
 * half's last chunks downwards; the worker walks [h, n) upwards from h
 * and takes the front half's last chunks downwards. */
static int order_ok(const struct job *j, int n)
{
	int h = (n + 1) / 2;

	return walks(j->order[0], j->nord[0], 0, h, 1) &&
	       walks(j->order[0], j->nord[0], h, n, 0) &&
	       walks(j->order[1], j->nord[1], h, n, 1) &&
	       walks(j->order[1], j->nord[1], 0, h, 0);
}

/* 1 once all n - 1 workers of an idle team sleep on the futex; 0 if they
 * are not all there after 20 s (a worker that never stops spinning). */
static int all_asleep(const struct kve_threads *t)
{
	const struct timespec ms = { 0, 1000000 };
	int i;

	for (i = 0; i < 20000; i++) {
		if (kve_threads_asleep(t) == kve_threads_count(t) - 1)
			return 1;
		nanosleep(&ms, NULL);
	}
	return 0;
}

static void team(const char *spin, int n)
{
	struct kve_threads *t;
	static struct job j;
	int i, c, bad_runs = 0, bad_out = 0, bad_order = 0;
	unsigned x = 12345;

	setenv("KVE_SPIN_US", spin, 1);
	t = kve_threads_create(n);
	CHECK(t && kve_threads_count(t) == n, "spin %s us: a team of %d", spin, n);
	if (!t)
		return;
	CHECK(all_asleep(t), "spin %s us: a new team's %d workers sleep", spin, n - 1);
	memset(&j, 0, sizeof(j));
	for (i = 0; i < JOBS; i++) {
		int n;

		x = x * 1103515245u + 12345u;
		n = 1 + (int)((x >> 16) % MAXC);
		j.seq = i;
		for (c = 0; c < MAXC; c++)
			atomic_store(&j.runs[c], 0);
		j.nord[0] = j.nord[1] = 0;
		kve_threads_run(t, chunk, &j, n);
		for (c = 0; c < MAXC; c++) {
			bad_runs += atomic_load(&j.runs[c]) != (c < n);
			bad_out += c < n && j.out[c] != i * 131 + c;
		}
		bad_order += kve_threads_count(t) == 2 && !order_ok(&j, n);
	}
	CHECK(!bad_runs, "spin %s us: %d jobs of 1-%d chunks: each chunk ran once (%d wrong)",
	      spin, JOBS, MAXC, bad_runs);
	CHECK(!bad_out, "spin %s us: every chunk's writes seen when run() returned (%d wrong)",
	      spin, bad_out);
	if (n == 2)
		CHECK(!bad_order, "spin %s us: each thread walked its half upwards, then the "
		      "other's last chunks downwards (%d jobs not)", spin, bad_order);
	CHECK(all_asleep(t), "spin %s us: after %d jobs the team's %d workers sleep",
	      spin, JOBS, n - 1);
	for (c = 0; c < MAXC; c++)
		atomic_store(&j.runs[c], 0);
	j.nord[0] = j.nord[1] = 0;
	kve_threads_run(t, chunk, &j, MAXC);
	CHECK(atomic_load(&j.runs[MAXC - 1]) == 1 && j.out[MAXC - 1] == j.seq * 131 + MAXC - 1,
	      "spin %s us: a job after the workers slept runs", spin);
	printf("# spin %s us: chunks run by the caller %d, by worker 1 %d\n", spin,
	       atomic_load(&j.by_tid[0]), atomic_load(&j.by_tid[1]));
	kve_threads_free(t);
}

/* KVE_SPIN_US: a number in [0, 10000] is taken, anything else (unset
 * included) gives the default 50. */
static void spin_setting(void)
{
	static const struct {
		const char *env;
		long us;
	} cases[] = {
		{ NULL, 50 }, { "", 50 }, { "0", 0 }, { "7", 7 }, { "10000", 10000 },
		{ "10001", 50 }, { "-1", 50 }, { "12x", 50 }, { "x", 50 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kve_threads *t;

		if (cases[i].env)
			setenv("KVE_SPIN_US", cases[i].env, 1);
		else
			unsetenv("KVE_SPIN_US");
		t = kve_threads_create(1);
		CHECK(t && kve_threads_spin_ns(t) == cases[i].us * 1000,
		      "KVE_SPIN_US %s%s%s: spin %ld us (%ld ns)", cases[i].env ? "'" : "",
		      cases[i].env ? cases[i].env : "unset", cases[i].env ? "'" : "", cases[i].us,
		      t ? kve_threads_spin_ns(t) : -1L);
		kve_threads_free(t);
	}
}

/* The worker's chunk is busy for 5 ms; a chunk the caller (tid 0) runs
 * returns once the worker's has started. So the caller waits up to 5 ms
 * for the worker in nearly every job, whichever chunks each takes (not
 * in one where the host held the caller back until the worker was done). */
static _Atomic int started1;

static void slow_chunk(void *arg, int c, int tid)
{
	struct timespec a, b;

	(void)arg;
	(void)c;
	if (!tid) {
		while (!atomic_load(&started1))
			;
		return;
	}
	atomic_store(&started1, 1);
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec < 5000000);
}

/* With a 10 ms spin, the caller's waits of up to 5 ms end while it spins,
 * not asleep: of 40 jobs at least one does (38 on a loaded machine; no
 * timing asserted: only a host that holds the caller back 5 ms or the
 * worker 10 ms in every job fails it). */
static void caller_spins(void)
{
	struct kve_threads *t;
	uint64_t spun = 0, slept = 0;
	int i;

	setenv("KVE_SPIN_US", "10000", 1);
	t = kve_threads_create(2);
	CHECK(t != NULL, "spin 10000 us: a team of 2");
	if (!t)
		return;
	for (i = 0; i < 40; i++) {
		atomic_store(&started1, 0);
		kve_threads_run(t, slow_chunk, NULL, 2);
	}
	kve_threads_waits(t, &spun, &slept);
	CHECK(spun >= 1, "spin 10000 us: 40 jobs, the worker's chunk 5 ms: the caller's waits "
	      "ended %llu times spinning, %llu asleep",
	      (unsigned long long)spun, (unsigned long long)slept);
	kve_threads_free(t);
}

/* A chunk count outside [1, 65535] is a caller's bug: a team of 2 aborts
 * rather than run it (checked in a child); 65535 runs. */
static void nop(void *arg, int c, int tid)
{
	(void)arg;
	(void)c;
	(void)tid;
}

static int aborts(int nchunks)
{
	pid_t p = fork();
	int st = 0;

	if (p == 0) {
		struct kve_threads *t = kve_threads_create(2);

		if (t)
			kve_threads_run(t, nop, NULL, nchunks);
		_exit(t ? 0 : 3);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		return -1;
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT ? 1 : WIFEXITED(st) && !WEXITSTATUS(st) ? 0 : -1;
}

int main(void)
{
	struct kve_threads *one = kve_threads_create(1);
	static struct job j;
	int c, ok = 1;

	CHECK(!kve_threads_create(0), "a team of 0 is refused");
	CHECK(one && kve_threads_count(one) == 1, "a team of 1");
	if (one) {
		kve_threads_run(one, chunk, &j, 5);
		for (c = 0; c < MAXC; c++)
			ok &= atomic_load(&j.runs[c]) == (c < 5);
		CHECK(ok && atomic_load(&j.by_tid[0]) == 5, "a team of 1 runs the chunks itself");
		kve_threads_free(one);
	}
	team("50", 2);
	team("0", 2);
	team("0", 3);
	spin_setting();
	caller_spins();
	CHECK(aborts(0) == 1 && aborts(KVE_THREADS_MAX_CHUNKS + 1) == 1 &&
	      aborts(KVE_THREADS_MAX_CHUNKS) == 0,
	      "a team of 2 aborts on 0 or %d chunks (a caller's bug), runs %d",
	      KVE_THREADS_MAX_CHUNKS + 1, KVE_THREADS_MAX_CHUNKS);
	kve_threads_free(NULL);
	return tc_done();
}
