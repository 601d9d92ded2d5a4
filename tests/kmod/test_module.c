// SPDX-License-Identifier: GPL-2.0
/*
 * Module load and unload: rmmod is refused while an arena fd or a dma-buf
 * is alive and succeeds after; 100 insmod/rmmod cycles leave nothing
 * behind.  Runs last: it reloads the module (with the parameters the
 * guest script passed, from $KT_MODPROBE_ARGS).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kt.h"

static const char *modargs(void)
{
	const char *a = getenv("KT_MODPROBE_ARGS");

	return a ? a : "";
}

static void test_rmmod_refused_while_alive(void)
{
	int dev = kt_dev_open(), arena, dmabuf;
	void *map;

	CU_ASSERT_FATAL(dev >= 0);
	arena = kt_arena(dev, 4 * KT_MIB, 1 << 20, 1);
	CU_ASSERT_FATAL(arena >= 0);
	close(dev);
	CU_ASSERT_NOT_EQUAL(kt_sh("rmmod kvarena 2>/dev/null"), 0);	/* arena fd */
	dmabuf = kt_export(arena);
	close(arena);
	CU_ASSERT_NOT_EQUAL(kt_sh("rmmod kvarena 2>/dev/null"), 0);	/* dma-buf fd */
	map = mmap(NULL, 4 * KT_MIB, PROT_READ, MAP_SHARED, dmabuf, 0);
	CU_ASSERT_FATAL(map != MAP_FAILED);
	close(dmabuf);
	CU_ASSERT_NOT_EQUAL(kt_sh("rmmod kvarena 2>/dev/null"), 0);	/* mapping */
	munmap(map, 4 * KT_MIB);
	CU_ASSERT_EQUAL(kt_sh("rmmod kvarena"), 0);
	CU_ASSERT_EQUAL(access("/dev/kvarena", F_OK), -1);
	CU_ASSERT_EQUAL(kt_sh("modprobe kvarena %s", modargs()), 0);
}

static void test_load_unload_cycles(void)
{
	int i, failed = 0;

	for (i = 0; i < 100 && !failed; i++) {
		int dev, arena;

		failed |= kt_sh("modprobe kvarena %s", modargs()) != 0;
		/* Use it a little each time, so unload has work to check. */
		dev = kt_dev_open();
		arena = dev >= 0 ? kt_arena(dev, 2 * KT_MIB, 1 << 20, 1) : -1;
		failed |= arena < 0;
		close(arena);
		close(dev);
		failed |= kt_sh("rmmod kvarena") != 0;
		if (failed)
			fprintf(stderr, "cycle %d failed\n", i);
	}
	CU_ASSERT_EQUAL(failed, 0);
	CU_ASSERT_EQUAL(i, 100);
	CU_ASSERT_EQUAL(kt_sh("grep -q '^kvarena ' /proc/modules"), 1);
	CU_ASSERT_EQUAL(kt_sh("modprobe kvarena %s", modargs()), 0);
	CU_ASSERT_EQUAL(kt_sysfs("pinned_bytes"), 0);
}

void kt_register_module(void)
{
	CU_pSuite s = CU_add_suite("module", NULL, NULL);

	KT_ADD(s, test_rmmod_refused_while_alive);
	KT_ADD(s, test_load_unload_cycles);
}
