// SPDX-License-Identifier: GPL-2.0
/*
 * Tracepoints fire with the right fields: kvarena_session_state,
 * kvarena_blocks and kvarena_arena, read back through tracefs.  Tests
 * kmod/trace.h and its call sites.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "kt.h"

#define TRACEFS "/sys/kernel/tracing"

static int put(const char *file, const char *val)
{
	char path[128];
	int fd, ret;

	snprintf(path, sizeof(path), TRACEFS "/%s", file);
	fd = open(path, O_WRONLY | O_TRUNC);
	if (fd < 0)
		return -errno;
	ret = write(fd, val, strlen(val)) == (ssize_t)strlen(val) ? 0 : -errno;
	close(fd);
	return ret;
}

static char *slurp(const char *file)
{
	char path[128], *buf = calloc(1, 1 << 20);
	ssize_t n, off = 0;
	int fd;

	snprintf(path, sizeof(path), TRACEFS "/%s", file);
	fd = open(path, O_RDONLY);
	if (fd < 0 || !buf) {
		if (fd >= 0)
			close(fd);
		return buf;
	}
	while (off < (1 << 20) - 1 &&
	       (n = read(fd, buf + off, (1 << 20) - 1 - off)) > 0)
		off += n;
	close(fd);
	return buf;
}

static void test_tracepoints(void)
{
	int64_t sid;
	int dev = kt_dev_open(), arena;
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 2 * KT_MIB, .block_size = 1 << 20,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 31, .name = "tr",
	};
	char want[160], *t;
	uint32_t ids[2];

	CU_ASSERT_FATAL(dev >= 0);
	CU_ASSERT_FATAL(put("events/kvarena/enable", "1") == 0);
	CU_ASSERT_FATAL(put("trace", "") == 0);
	arena = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	CU_ASSERT_FATAL(arena >= 0);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 2, ids, 0), 2);
	CU_ASSERT_EQUAL(kt_set_state(arena, sid, KVA_STATE_TOOL_WAIT, 5, 777), 0);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
	close(arena);
	put("events/kvarena/enable", "0");
	t = slurp("trace");
	CU_ASSERT_FATAL(t != NULL);

	snprintf(want, sizeof(want), "kvarena_arena: arena=%u tenant=31 bytes=%llu bs=%u created",
		 c.arena_id, 2 * KT_MIB, 1 << 20);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_session_state: arena=%u session=%" PRId64 " 4->0 ",
		 c.arena_id, sid);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_blocks: arena=%u session=%" PRId64 " op=0 count=2 released=0 free=0",
		 c.arena_id, sid);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_session_state: arena=%u session=%" PRId64 " 0->3 tool=5 wait_us=777 blocks=2 bs=%u cookie=42",
		 c.arena_id, sid, 1 << 20);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_blocks: arena=%u session=%" PRId64 " op=3 count=2 released=2 free=2",
		 c.arena_id, sid);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_session_state: arena=%u session=%" PRId64 " 3->4 ",
		 c.arena_id, sid);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	snprintf(want, sizeof(want), "kvarena_arena: arena=%u tenant=31 bytes=%llu bs=%u freed",
		 c.arena_id, 2 * KT_MIB, 1 << 20);
	CU_ASSERT_PTR_NOT_NULL(strstr(t, want));
	free(t);
	close(dev);
}

void kt_register_trace(void)
{
	CU_pSuite s = CU_add_suite("trace", NULL, NULL);

	KT_ADD(s, test_tracepoints);
}
