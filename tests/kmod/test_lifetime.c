// SPDX-License-Identifier: GPL-2.0
/*
 * A process killed with SIGKILL while it holds an arena fd, a dma-buf fd,
 * mappings of both, sessions and blocks returns every page: checked with
 * the module's own counters, the tenant's account and /proc/zoneinfo.
 * Tests the release paths in kmod/arena.c and kmod/dmabuf.c.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt.h"

#define ARENA_MB	64

static void holder(int ready)
{
	size_t len = ARENA_MB * KT_MIB;
	int64_t sid;
	int dev = kt_dev_open(), arena, dmabuf, i;
	uint32_t ids[256];
	char *a, *d;

	arena = kt_arena(dev, len, 256 << 10, 99);
	dmabuf = kt_export(arena);
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	d = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, dmabuf, 0);
	if (dev < 0 || arena < 0 || dmabuf < 0 || a == MAP_FAILED ||
	    d == MAP_FAILED)
		_exit(1);
	for (i = 0; i < 4; i++) {
		sid = kt_session(arena);
		if (sid < 0 || kt_alloc(arena, sid, 64, ids, 0) != 64)
			_exit(2);
		kt_set_state(arena, sid, KVA_STATE_TOOL_WAIT, 1, 1000);
	}
	memset(a, 1, len);
	if (write(ready, "r", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

static void test_sigkill_returns_everything(void)
{
	struct kva_tenant t = { .size = sizeof(t), .tenant_id = 99 };
	long long free0, free1, free2, pages = ARENA_MB * KT_MIB / 4096;
	int p[2], st, dev;
	pid_t pid;
	char c;

	CU_ASSERT_FATAL(pipe(p) == 0);
	free0 = kt_zone_free_pages();
	pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		holder(p[1]);
	}
	close(p[1]);
	CU_ASSERT_FATAL(read(p[0], &c, 1) == 1);
	close(p[0]);
	free1 = kt_zone_free_pages();
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), (long long)(ARENA_MB * KT_MIB));
	CU_ASSERT_EQUAL(kt_sysfs("sessions"), 4);
	CU_ASSERT_EQUAL(kt_sysfs("blocks_used"), 256);
	CU_ASSERT(free0 - free1 >= pages);		/* the arena is real */

	CU_ASSERT_EQUAL(kill(pid, SIGKILL), 0);
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
	CU_ASSERT_EQUAL(kt_sysfs("arenas"), 0);
	CU_ASSERT_EQUAL(kt_sysfs("sessions"), 0);
	CU_ASSERT_EQUAL(kt_sysfs("blocks_used"), 0);
	/* The tenant's account went with its last arena (no quota was set). */
	dev = kt_dev_open();
	CU_ASSERT_EQUAL(kt_ioctl(dev, KVA_IOC_TENANT_INFO, &t), -ENOENT);
	close(dev);
	free2 = kt_zone_free_pages();
	/*
	 * Every 2 MiB page is back: free2 - free1 counts the arena and the
	 * child's own pages, less what the kernel allocated meanwhile (under
	 * the debug kernel's KASAN and kmemleak, a few dozen pages).  A page
	 * the module kept would be 512 short.
	 */
	CU_ASSERT(free2 - free1 > pages - 512);
	if (free2 - free1 < pages)
		fprintf(stderr, "zoneinfo free pages: before %lld, held %lld, after %lld\n",
			free0, free1, free2);
}

void kt_register_lifetime(void)
{
	CU_pSuite s = CU_add_suite("lifetime", NULL, NULL);

	KT_ADD(s, test_sigkill_returns_everything);
}
