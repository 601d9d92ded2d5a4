/* SPDX-License-Identifier: MIT */
/*
 * test_run.h - the daemon suites' RUN(name): calls test_name() when it is
 * this process's to run (test_run_mine), and says how long it took when
 * that was a second or more, so that a lane's time can be traced to its
 * tests.
 */
#ifndef KVD_TEST_RUN_H
#define KVD_TEST_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double test_run_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Whether test `name` runs: KVD_TEST_ONLY lists the ones that do (all when
 * unset); KVD_TEST_SHARD=i/n runs every n-th from the i-th (0-based), so
 * that n processes run a suite's tests once between them, side by side:
 * most of the suites' time is tools and tiers waiting out real durations.
 */
static inline int test_run_mine(const char *name)
{
	static unsigned int index;
	const char *only = getenv("KVD_TEST_ONLY"), *shard = getenv("KVD_TEST_SHARD");
	unsigned int i, n, me = index++;

	if (only && !strstr(only, name))
		return 0;
	if (shard && sscanf(shard, "%u/%u", &i, &n) == 2 && n)
		return me % n == i;
	return 1;
}

#define RUN(name) do { \
		double t_; \
		if (!test_run_mine(#name)) \
			break; \
		t_ = test_run_now_s(); \
		test_##name(); \
		t_ = test_run_now_s() - t_; \
		if (t_ >= 1.0) \
			printf("--   %s: %.1f s\n", #name, t_); \
		fflush(stdout); \
	} while (0)

#endif
