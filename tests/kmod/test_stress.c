// SPDX-License-Identifier: GPL-2.0
/*
 * Two processes x 2 threads on one arena for KT_STRESS_SECONDS (10 s):
 * random allocs (with running out), frees, shares of each other's blocks,
 * state changes.  Each owner stamps its blocks and re-checks the stamp
 * before freeing, so a block handed out twice is caught; afterwards the
 * arena must be whole again.  Tests kmod/arena_ops.c's locking.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kt.h"

#define BS		(64U << 10)
#define ARENA_BYTES	(16 * KT_MIB)		/* 256 blocks for 4 workers */
#define MAXH		96
#define WORKERS		4
#define STRIDE		512			/* words between stamps */

struct board {				/* MAP_SHARED between the processes */
	volatile uint32_t pub[WORKERS][MAXH];
	volatile uint32_t npub[WORKERS];
	volatile uint64_t ops[WORKERS];
	volatile uint32_t errors[WORKERS];
};

struct worker {
	int arena, idx;
	char *base;
	struct board *board;
	uint64_t seed;
};

static double kt_seconds(void)
{
	const char *s = getenv("KT_STRESS_SECONDS");

	return s ? atof(s) : 10.0;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t *blk(char *base, uint32_t id)
{
	return (uint64_t *)(base + kva_block_offset(BS, id));
}

static uint64_t stamp(int idx, uint32_t id, uint64_t w)
{
	return ((uint64_t)(idx + 1) << 56) | ((uint64_t)id << 24) | w;
}

static void stamp_block(struct worker *w, uint32_t id)
{
	uint64_t *p = blk(w->base, id), i;

	for (i = 0; i < BS / 8; i += STRIDE)
		p[i] = stamp(w->idx, id, i);
	p[BS / 8 - 1] = stamp(w->idx, id, BS / 8 - 1);
}

static int check_block(struct worker *w, uint32_t id)
{
	uint64_t *p = blk(w->base, id), i;

	for (i = 0; i < BS / 8; i += STRIDE)
		if (p[i] != stamp(w->idx, id, i))
			return -1;
	return p[BS / 8 - 1] == stamp(w->idx, id, BS / 8 - 1) ? 0 : -1;
}

static void drop(uint32_t *v, uint32_t *n, uint32_t i)
{
	v[i] = v[--*n];
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint32_t own[MAXH], shared[MAXH], nown = 0, nshared = 0, ids[8];
	struct timespec t0, t;
	struct kva_session_info si;
	uint32_t *err = (uint32_t *)&w->board->errors[w->idx];
	int64_t sid = kt_session(w->arena);
	int ret;
	uint64_t ops = 0;
	double limit = kt_seconds();

	if (sid <= 0) {
		(*err)++;
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		uint32_t r = rnd(&w->seed) % 100, i, n;

		if ((ops & 63) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > limit)
				break;
		}
		ops++;
		if (r < 40 && nown + 8 <= MAXH) {
			n = 1 + rnd(&w->seed) % 8;
			ret = kt_alloc(w->arena, sid, n, ids, KVA_ALLOC_PARTIAL);
			if (ret == -ENOSPC)
				continue;
			if (ret <= 0 || (uint32_t)ret > n) {
				(*err)++;
				continue;
			}
			for (i = 0; i < (uint32_t)ret; i++) {
				stamp_block(w, ids[i]);
				own[nown++] = ids[i];
			}
		} else if (r < 70 && nown) {
			i = rnd(&w->seed) % nown;
			if (check_block(w, own[i]))
				(*err)++;	/* someone else got our block */
			if (kt_free(w->arena, sid, 1, &own[i]) != 1)
				(*err)++;
			drop(own, &nown, i);
		} else if (r < 85 && nshared < MAXH) {
			uint32_t other = rnd(&w->seed) % WORKERS, np, id;

			np = w->board->npub[other];
			if (other == (uint32_t)w->idx || !np)
				continue;
			id = w->board->pub[other][rnd(&w->seed) % np];
			ret = kt_share(w->arena, sid, 1, &id);
			if (ret == 1)
				shared[nshared++] = id;
			else if (ret != -ENOENT && ret != -EEXIST)
				(*err)++;
		} else if (r < 95 && nshared) {
			i = rnd(&w->seed) % nshared;
			if (kt_free(w->arena, sid, 1, &shared[i]) != 1)
				(*err)++;
			drop(shared, &nshared, i);
		} else {
			ret = kt_set_state(w->arena, sid, 1 + r % 3, 0, 0);
			if (ret && ret != -EALREADY)
				(*err)++;
			if (kt_session_info(w->arena, sid, &si) ||
			    si.blocks_held != nown + nshared)
				(*err)++;
		}
		/* Publish what we own so the others can share it. */
		w->board->npub[w->idx] = 0;
		for (i = 0; i < nown; i++)
			w->board->pub[w->idx][i] = own[i];
		w->board->npub[w->idx] = nown;
	}
	w->board->npub[w->idx] = 0;
	for (uint32_t i = 0; i < nown; i++)
		if (check_block(w, own[i]))
			(*err)++;
	if (kt_end(w->arena, sid))
		(*err)++;
	w->board->ops[w->idx] = ops;
	return NULL;
}

static void run_workers(int arena, char *base, struct board *board, int first)
{
	struct worker w[2];
	pthread_t th[2];
	int i;

	for (i = 0; i < 2; i++) {
		w[i] = (struct worker){ .arena = arena, .idx = first + i,
					.base = base, .board = board,
					.seed = 0x9e3779b9ULL * (first + i + 1) };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

static void test_two_procs_two_threads(void)
{
	struct board *board;
	struct kva_arena_info info;
	uint64_t total = 0;
	int dev = kt_dev_open(), arena, st, i;
	char *base;
	pid_t pid;

	CU_ASSERT_FATAL(dev >= 0);
	arena = kt_arena(dev, ARENA_BYTES, BS, 4);
	CU_ASSERT_FATAL(arena >= 0);
	base = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
		    arena, 0);
	board = mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CU_ASSERT_FATAL(base != MAP_FAILED && board != MAP_FAILED);
	memset(board, 0, sizeof(*board));

	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		run_workers(arena, base, board, 2);
		_exit(0);
	}
	run_workers(arena, base, board, 0);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	for (i = 0; i < WORKERS; i++) {
		CU_ASSERT_EQUAL(board->errors[i], 0);
		CU_ASSERT(board->ops[i] > 100);
		total += board->ops[i];
	}
	printf("\n    stress: %llu operations by %d workers in %.0f s\n",
	       (unsigned long long)total, WORKERS, kt_seconds());
	/* Invariants: everything returned, nothing leaked or lost. */
	CU_ASSERT_EQUAL(kt_arena_info(arena, &info), 0);
	CU_ASSERT_EQUAL(info.blocks_free, info.blocks_total);
	CU_ASSERT_EQUAL(info.sessions, 0);
	CU_ASSERT_EQUAL(info.sessions_ended, WORKERS);
	CU_ASSERT_EQUAL(kt_sysfs("blocks_used"), 0);
	munmap(board, sizeof(*board));
	munmap(base, ARENA_BYTES);
	close(arena);
	close(dev);
}

void kt_register_stress(void)
{
	CU_pSuite s = CU_add_suite("stress", NULL, NULL);

	KT_ADD(s, test_two_procs_two_threads);
}
