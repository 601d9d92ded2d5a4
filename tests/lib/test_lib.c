// SPDX-License-Identifier: GPL-2.0
/*
 * libkvarena on the host: the memfd backend through the public API (the
 * kernel backend is exercised by the in-guest suite and kva-share).  Same
 * errno values as the module for the same input, data sharing through the
 * memfd data fd, tenant quotas, threads.  Runs under ASan/UBSan and under
 * valgrind (make check-lib, check-lib-valgrind).
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvarena.h"

#define MIB	(1ULL << 20)
#define BS	(64U << 10)

static struct kva_dev *dev;

static int suite_init(void)
{
	return kva_open(KVA_BACKEND_MEMFD, &dev) != 0;
}

static int suite_clean(void)
{
	kva_close(dev);
	return 0;
}

static struct kva_arena *mk(uint64_t bytes, uint32_t bs, uint32_t tenant)
{
	struct kva_arena_params p = {
		.bytes = bytes, .block_size = bs, .numa_node = KVA_NUMA_ANY,
		.tenant_id = tenant, .name = "t",
	};
	struct kva_arena *a = NULL;

	CU_ASSERT_EQUAL(kva_arena_create(dev, &p, &a), 0);
	return a;
}

static void test_open_and_version(void)
{
	struct kva_version v;
	struct kva_dev *d;
	int ret;

	CU_ASSERT_EQUAL(kva_dev_backend(dev), KVA_BACKEND_MEMFD);
	CU_ASSERT(strstr(kva_dev_limits(dev), "no dma-buf") != NULL);
	CU_ASSERT_EQUAL(kva_version(dev, &v), 0);
	CU_ASSERT_EQUAL(v.api_version, KVA_API_VERSION);
	CU_ASSERT_FALSE(v.features & KVA_FEAT_DMABUF);
	CU_ASSERT(v.features & KVA_FEAT_SESSIONS);
	CU_ASSERT_EQUAL(kva_open(99, &d), -EINVAL);
	/* Without the module the kernel backend says so; AUTO falls back. */
	ret = kva_open(KVA_BACKEND_KERNEL, &d);
	if (access("/dev/kvarena", F_OK)) {
		CU_ASSERT_EQUAL(ret, -ENOENT);
		CU_ASSERT_EQUAL(kva_open(KVA_BACKEND_AUTO, &d), 0);
		CU_ASSERT_EQUAL(kva_dev_backend(d), KVA_BACKEND_MEMFD);
	}
	if (!ret || kva_dev_backend(d) == KVA_BACKEND_MEMFD)
		kva_close(d);
	CU_ASSERT_STRING_EQUAL(kva_state_name(KVA_STATE_TOOL_WAIT), "tool_wait");
	CU_ASSERT_STRING_EQUAL(kva_state_name(77), "unknown");
}

static void test_create_errors(void)
{
	struct kva_arena_params p = {
		.bytes = 4 * MIB, .block_size = BS, .numa_node = KVA_NUMA_ANY,
	};
	struct kva_arena *a = NULL;

#define EXPECT(stmt, err) do {						\
		struct kva_arena_params q = p;				\
		(void)q;						\
		stmt;							\
		CU_ASSERT_EQUAL(kva_arena_create(dev, &q, &a), err);	\
	} while (0)
	EXPECT(q.bytes = 0, -EINVAL);
	EXPECT(q.bytes = 3 * MIB, -EINVAL);
	EXPECT(q.bytes = 1ULL << 62, -E2BIG);
	EXPECT(q.block_size = 1000, -EINVAL);
	EXPECT(q.block_size = 4 << 20, -EINVAL);
	EXPECT(q.numa_node = -5, -EINVAL);
	EXPECT(q.numa_node = 4000, -EINVAL);
	EXPECT(q.name = "a name that is far too long for the arena", -EINVAL);
	EXPECT(q.name = "tab\there", -EINVAL);
#undef EXPECT
	CU_ASSERT_PTR_NULL(a);
}

static void test_blocks_and_sessions(void)
{
	struct kva_arena *a = mk(4 * MIB, BS, 1);
	struct kva_session_info si;
	struct kva_arena_info ai;
	uint32_t s1, s2, ids[64], more[8], bad[2];

	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_total, 64);
	CU_ASSERT_EQUAL(ai.blocks_per_page, 32);
	CU_ASSERT_EQUAL(ai.dmabuf_attachments, 0);
	CU_ASSERT_EQUAL(kva_session_create(a, 5, &s1), 0);
	CU_ASSERT_EQUAL(kva_session_create(a, 6, &s2), 0);
	CU_ASSERT_NOT_EQUAL(s1, s2);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 60, ids, 0), 60);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 8, more, 0), -ENOSPC);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 8, more, KVA_ALLOC_PARTIAL), 4);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 1, more, KVA_ALLOC_PARTIAL), -ENOSPC);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 0, more, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, KVA_MAX_BATCH + 1, more, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 1, more, 4), -EINVAL);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, 999, 1, more, 0), -ENOENT);

	CU_ASSERT_EQUAL(kva_blocks_share(a, s2, 3, ids), 3);
	CU_ASSERT_EQUAL(kva_blocks_share(a, s2, 1, ids), -EEXIST);
	bad[0] = ids[5];
	bad[1] = ids[5];
	CU_ASSERT_EQUAL(kva_blocks_share(a, s2, 2, bad), -EINVAL);
	bad[1] = 64;
	CU_ASSERT_EQUAL(kva_blocks_free(a, s1, 2, bad), -EINVAL);
	CU_ASSERT_EQUAL(kva_blocks_free(a, s2, 1, ids + 10), -ENOENT);
	CU_ASSERT_EQUAL(kva_blocks_free(a, s1, 4, more), 4);
	CU_ASSERT_EQUAL(kva_blocks_free(a, s1, 4, more), -ENOENT);	/* double */

	CU_ASSERT_EQUAL(kva_session_set_state(a, s1, KVA_STATE_TOOL_WAIT, 2, 99), 0);
	CU_ASSERT_EQUAL(kva_session_set_state(a, s1, KVA_STATE_TOOL_WAIT, 2, 99), -EALREADY);
	CU_ASSERT_EQUAL(kva_session_set_state(a, s1, KVA_STATE_DECODE, 2, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_session_set_state(a, s1, 9, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_session_info(a, s1, &si), 0);
	CU_ASSERT_EQUAL(si.blocks_held, 60);
	CU_ASSERT_EQUAL(si.cookie, 5);
	CU_ASSERT_EQUAL(si.tool_class, 2);

	/* Ending s1 frees all but the 3 blocks s2 still shares. */
	CU_ASSERT_EQUAL(kva_session_end(a, s1), 0);
	CU_ASSERT_EQUAL(kva_session_end(a, s1), -ENOENT);
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, 61);
	CU_ASSERT_EQUAL(ai.sessions, 1);
	CU_ASSERT_EQUAL(ai.sessions_ended, 1);
	CU_ASSERT_EQUAL(kva_session_set_state(a, s2, KVA_STATE_ENDED, 0, 0), 0);
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, 64);
	kva_arena_destroy(a);
}

static void test_map_and_data_fd(void)
{
	struct kva_arena *a = mk(8 * MIB, 768 << 10, 1);	/* 2 per page */
	uint32_t sid, ids[4], i;
	int fd, st;
	char *base;
	pid_t pid;

	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_arena_export_dmabuf(a, 0), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kva_arena_from_fd(dev, kva_arena_fd(a), &a), -EOPNOTSUPP);
	CU_ASSERT_EQUAL(kva_arena_map(a, (void **)&base), 0);
	CU_ASSERT_EQUAL(kva_session_create(a, 0, &sid), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, sid, 4, ids, 0), 4);
	/* Blocks never straddle a 2 MiB page. */
	for (i = 0; i < 4; i++) {
		char *p = kva_arena_block_ptr(a, ids[i]);
		uint64_t off = (uint64_t)(p - base);

		CU_ASSERT_EQUAL(off / KVA_PAGE_SIZE,
				(off + (768 << 10) - 1) / KVA_PAGE_SIZE);
		memset(p, (int)(0x10 + ids[i]), 768 << 10);
	}
	CU_ASSERT_PTR_NULL(kva_arena_block_ptr(a, 8));	/* 4 pages x 2 */
	CU_ASSERT_EQUAL(kva_arena_data_fd(a, 2), -EINVAL);
	fd = kva_arena_data_fd(a, KVA_EXPORT_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		char *m;
		uint32_t per = 2;

		if (kva_map_fd(fd, 8 * MIB, (void **)&m))
			_exit(1);
		for (i = 0; i < 4; i++) {
			char *p = m + (ids[i] / per) * KVA_PAGE_SIZE +
				  (ids[i] % per) * (768 << 10);

			if (p[0] != (char)(0x10 + ids[i]) ||
			    p[(768 << 10) - 1] != (char)(0x10 + ids[i]))
				_exit(2);
		}
		_exit(0);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd);
	kva_arena_destroy(a);
}

static void test_tenant_quota(void)
{
	struct kva_tenant t;
	struct kva_arena *a;
	uint32_t sid, ids[8];

	CU_ASSERT_EQUAL(kva_tenant_info(dev, 500, &t), -ENOENT);
	CU_ASSERT_EQUAL(kva_tenant_set_quota(dev, 500, 2 * BS), 0);
	a = mk(4 * MIB, BS, 500);
	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_session_create(a, 0, &sid), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, sid, 3, ids, 0), -EDQUOT);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, sid, 3, ids, KVA_ALLOC_PARTIAL), 2);
	CU_ASSERT_EQUAL(kva_tenant_info(dev, 500, &t), 0);
	CU_ASSERT_EQUAL(t.used_bytes, 2 * BS);
	CU_ASSERT_EQUAL(t.arenas, 1);
	kva_arena_destroy(a);
	CU_ASSERT_EQUAL(kva_tenant_info(dev, 500, &t), 0);
	CU_ASSERT_EQUAL(t.used_bytes, 0);
	CU_ASSERT_EQUAL(t.arenas, 0);
}

/* set_policy reaches the shared core with each field in its place. */
static void test_set_policy(void)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_arena *a = mk(4 * MIB, BS, 0);	/* 128 blocks */

	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_arena_set_policy(a, KVA_POLICY_TTL, 3, 5, 70000), 0);
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_TTL);
	CU_ASSERT_EQUAL(ai.low_wm, 3);
	CU_ASSERT_EQUAL(ai.high_wm, 5);
	CU_ASSERT_EQUAL(ai.ttl_ms, 70000);
	CU_ASSERT_EQUAL(kva_arena_set_policy(a, KVA_POLICY_LRU, 6, 5, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_arena_set_policy(a, KVA_POLICY_LRU, 1, 129, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_arena_set_policy(a, KVA_POLICY_COUNT, 0, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_TTL);	/* unchanged */
	CU_ASSERT_EQUAL(ai.high_wm, 5);
	kva_arena_destroy(a);
}

static void test_idle_accounting(void)
{
	struct timespec ts = { .tv_nsec = 20 * 1000 * 1000 };
	struct kva_arena *a = mk(2 * MIB, BS, 1);
	struct kva_session_info si;
	uint32_t sid, ids[4];

	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_session_create(a, 0, &sid), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, sid, 4, ids, 0), 4);
	CU_ASSERT_EQUAL(kva_session_set_state(a, sid, KVA_STATE_TOOL_WAIT, 1, 1), 0);
	nanosleep(&ts, NULL);
	CU_ASSERT_EQUAL(kva_session_set_state(a, sid, KVA_STATE_DECODE, 0, 0), 0);
	nanosleep(&ts, NULL);
	CU_ASSERT_EQUAL(kva_session_info(a, sid, &si), 0);
	CU_ASSERT(si.idle_block_us >= 4 * 20000);
	CU_ASSERT(si.idle_block_us < 4 * 20000 * 20);
	CU_ASSERT(si.state_ns[KVA_STATE_DECODE] >= 20000000ULL);
	kva_arena_destroy(a);
}

struct worker_arg {
	struct kva_arena *a;
	int errors;
};

static void *worker(void *p)
{
	struct worker_arg *w = p;
	uint32_t sid, ids[16];
	int i, n;

	if (kva_session_create(w->a, 0, &sid)) {
		w->errors++;
		return NULL;
	}
	for (i = 0; i < 20000; i++) {
		n = kva_blocks_alloc(w->a, sid, 16, ids, KVA_ALLOC_PARTIAL);
		if (n == -ENOSPC)
			continue;
		if (n <= 0 || kva_blocks_free(w->a, sid, (uint32_t)n, ids) != n)
			w->errors++;
	}
	w->errors += kva_session_end(w->a, sid) != 0;
	return NULL;
}

static void test_threads(void)
{
	struct kva_arena *a = mk(2 * MIB, BS, 1);	/* 32 blocks, 2 x 16 */
	struct worker_arg w[3] = { { a, 0 }, { a, 0 }, { a, 0 } };
	struct kva_arena_info ai;
	pthread_t t[3];
	int i;

	CU_ASSERT_FATAL(a != NULL);
	for (i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, worker, &w[i]);
	for (i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		CU_ASSERT_EQUAL(w[i].errors, 0);
	}
	CU_ASSERT_EQUAL(kva_arena_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_free, 32);
	CU_ASSERT_EQUAL(ai.sessions, 0);
	kva_arena_destroy(a);
}

int main(void)
{
	CU_pSuite s;
	unsigned int failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	s = CU_add_suite("libkvarena-memfd", suite_init, suite_clean);
	CU_add_test(s, "open and version", test_open_and_version);
	CU_add_test(s, "create errors", test_create_errors);
	CU_add_test(s, "blocks and sessions", test_blocks_and_sessions);
	CU_add_test(s, "map and data fd", test_map_and_data_fd);
	CU_add_test(s, "tenant quota", test_tenant_quota);
	CU_add_test(s, "set policy", test_set_policy);
	CU_add_test(s, "idle accounting", test_idle_accounting);
	CU_add_test(s, "threads", test_threads);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
		 CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
