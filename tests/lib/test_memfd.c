// SPDX-License-Identifier: GPL-2.0
/*
 * The memfd backend's own choices, seen from outside the public API: the
 * memory it maps (hugetlb pages when the host has them free, else a plain
 * memfd advised for transparent huge pages, with no file descriptor left
 * behind by the failed hugetlb try; bound to the NUMA node asked for), and
 * the victims call's argument checks, called as the module's ioctl would be
 * (raw struct kva_victims through kva_call: flags, stride, bounds), which
 * kva_arena_victims() cannot reach since it fills those fields itself.
 */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MIB	(1ULL << 20)
#define BS	(64U << 10)

static struct kva_arena *mk_memfd(struct kva_dev *d, uint64_t bytes,
				  int32_t node, const char *name)
{
	struct kva_arena_params p = { .size = sizeof(p),
		.bytes = bytes, .block_size = BS, .numa_node = node,
		.name = name,
	};
	struct kva_arena *a = NULL;

	CU_ASSERT_EQUAL(kva_arena_new(d, &p, &a), 0);
	return a;
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* opendir's own */
}

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/*
 * The /proc/self/smaps entry holding addr: the mapping's path (after the
 * inode) and its VmFlags line.  0 when found.
 */
static int smaps_of(const void *addr, char *path, size_t plen, char *flags,
		    size_t flen)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	uintptr_t want = (uintptr_t)addr;
	char line[512];
	bool in = false;
	int ret = -1;

	if (!f)
		return -1;
	path[0] = flags[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		int off = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) == 2 &&
		    off > 0) {
			in = want >= lo && want < hi;
			if (in) {
				snprintf(path, plen, "%s", line + off);
				path[strcspn(path, "\n")] = '\0';
			}
		} else if (in && !strncmp(line, "VmFlags:", 8)) {
			snprintf(flags, flen, "%s ", line + 8);
			flags[strcspn(flags, "\n")] = ' ';
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

static bool has_flag(const char *flags, const char *f)
{
	char want[8];

	snprintf(want, sizeof(want), " %s ", f);
	return strstr(flags, want) != NULL;
}

/*
 * hugetlb 2 MiB pages when enough are free, else the fallback: a plain
 * memfd advised MADV_HUGEPAGE.  Either way the arena keeps exactly one
 * descriptor (close-on-exec) and gives it back when destroyed.
 */
static void test_memfd_memory(void)
{
	long free_huge = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
	bool thp = access("/sys/kernel/mm/transparent_hugepage", F_OK) == 0;
	char path[512], flags[512];
	struct kva_arena *a;
	struct kva_dev *d;
	int before, fl;
	void *base;

	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	before = open_fds();
	CU_ASSERT_FATAL(before > 0);
	a = mk_memfd(d, 8 * MIB, KVA_NUMA_ANY, "mem");
	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(open_fds(), before + 1);
	fl = fcntl(kva_arena_fd(a), F_GETFD);
	CU_ASSERT(fl >= 0 && (fl & FD_CLOEXEC));
	CU_ASSERT_EQUAL_FATAL(kva_arena_map(a, &base), 0);
	CU_ASSERT_EQUAL_FATAL(smaps_of(base, path, sizeof(path), flags, sizeof(flags)), 0);
	CU_ASSERT(strstr(path, "memfd:kvarena:mem") != NULL);
	CU_ASSERT(has_flag(flags, "sh"));
	if (free_huge >= 4) {
		/* a reservation racing this test could move it to the fallback */
		CU_ASSERT(has_flag(flags, "ht"));
	} else {
		CU_ASSERT_FALSE(has_flag(flags, "ht"));
		if (thp)
			CU_ASSERT(has_flag(flags, "hg"));
	}
	/* the whole arena is mapped, its last byte writable */
	((volatile char *)base)[8 * MIB - 1] = 1;
	kva_arena_destroy(a);
	CU_ASSERT_EQUAL(open_fds(), before);

	/* Creating many in a row leaks nothing (the hugetlb try's fd). */
	for (fl = 0; fl < 8; fl++) {
		a = mk_memfd(d, 2 * MIB, KVA_NUMA_ANY, "loop");
		if (a)
			kva_arena_destroy(a);
	}
	CU_ASSERT_EQUAL(open_fds(), before);
	kva_close(d);
}

/* numa_maps' policy word for the mapping that starts at addr. */
static int numa_policy_of(const void *addr, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/numa_maps", "r");
	char line[512], pol[64];
	unsigned long start;
	int ret = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx %63s", &start, pol) == 2 &&
		    start == (uintptr_t)addr) {
			snprintf(out, len, "%s", pol);
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/* An arena asked for node 0 is bound there; KVA_NUMA_ANY is not bound. */
static void test_memfd_numa(void)
{
	struct kva_arena *a, *b;
	struct kva_dev *d;
	char pol[64];
	void *base;

	if (access("/sys/devices/system/node/node0", F_OK) ||
	    access("/proc/self/numa_maps", F_OK)) {
		printf("(no NUMA node 0 here: binding not checked) ");
		return;
	}
	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	a = mk_memfd(d, 4 * MIB, 0, "n0");
	b = mk_memfd(d, 4 * MIB, KVA_NUMA_ANY, "any");
	CU_ASSERT_FATAL(a && b);
	CU_ASSERT_EQUAL(kva_arena_map(a, &base), 0);
	CU_ASSERT_EQUAL(numa_policy_of(base, pol, sizeof(pol)), 0);
	CU_ASSERT_STRING_EQUAL(pol, "bind:0");
	CU_ASSERT_EQUAL(kva_arena_map(b, &base), 0);
	CU_ASSERT_EQUAL(numa_policy_of(base, pol, sizeof(pol)), 0);
	CU_ASSERT_STRING_EQUAL(pol, "default");
	kva_arena_destroy(a);
	kva_arena_destroy(b);
	kva_close(d);
}

static int victims_raw(struct kva_arena *a, struct kva_victims *v)
{
	return kva_call(a, KVA_IOC_ARENA_VICTIMS, v);
}

/*
 * KVA_IOC_ARENA_VICTIMS as the module takes it: each bound at its edge,
 * the caller's stride honoured (what is known copied, the rest of each
 * entry zeroed, nothing past count touched), KVA_POLICY_ARENA meaning the
 * arena's own policy and an explicit one overriding it.
 */
static void test_memfd_victims_args(void)
{
	struct timespec ms = { .tv_nsec = 2 * 1000 * 1000 };
	struct kva_victim pub[4], raw[4];
	struct kva_victims v, v0 = { .size = sizeof(v), .max = 4,
		.policy = KVA_POLICY_ARENA, .victim_size = sizeof(struct kva_victim) };
	unsigned char wide[4 * 48], *big;
	struct kva_arena *a;
	struct kva_policy_set ps;
	struct kva_dev *d;
	uint64_t s1, s2;
	uint32_t ids[8];
	int i, n;

	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	a = mk_memfd(d, 4 * MIB, KVA_NUMA_ANY, "vict");
	CU_ASSERT_FATAL(a != NULL);
	/* s2 idle since longer, s1 in a tool wait: LRU ranks s2 first,
	 * the tool-wait policy s1 (1 s left x 2 blocks against a pause of
	 * about a millisecond x 3) */
	CU_ASSERT_EQUAL_FATAL(kva_session_open(a, 0, &s2), 0);
	CU_ASSERT_EQUAL_FATAL(kva_session_open(a, 0, &s1), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s2, 3, ids, 0), 3);
	nanosleep(&ms, NULL);	/* distinct activity times */
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, s1, 2, ids + 3, 0), 2);
	CU_ASSERT_EQUAL(kva_session_set_state(a, s1, KVA_STATE_TOOL_WAIT, 1,
					      1000000), 0);
	CU_ASSERT_EQUAL(kva_arena_set_policy(a, KVA_POLICY_LRU, 0, 0, 0), 0);

	/* the arena's policy, through the public call and raw */
	CU_ASSERT_EQUAL(kva_arena_victims(a, KVA_POLICY_ARENA, pub, 4), 2);
	CU_ASSERT_EQUAL(pub[0].session_id, s2);
	CU_ASSERT_EQUAL(pub[1].session_id, s1);
	v = v0;
	v.victims = (uintptr_t)raw;
	memset(raw, 0xa5, sizeof(raw));
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	CU_ASSERT_EQUAL(v.count, 2);
	CU_ASSERT_EQUAL(raw[0].session_id, s2);
	CU_ASSERT_EQUAL(raw[0].blocks_held, 3);
	CU_ASSERT_EQUAL(raw[1].session_id, s1);
	CU_ASSERT_EQUAL(raw[1].state, KVA_STATE_TOOL_WAIT);
	CU_ASSERT_EQUAL(raw[1].tool_class, 1);
	CU_ASSERT_EQUAL(raw[2].session_id, 0xa5a5a5a5a5a5a5a5ull);	/* past count */
	/* an explicit policy overrides the arena's */
	v = v0;
	v.victims = (uintptr_t)raw;
	v.policy = KVA_POLICY_TOOLWAIT;
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	CU_ASSERT_EQUAL(raw[0].session_id, s1);
	CU_ASSERT_EQUAL(raw[1].session_id, s2);
	/* max bounds the count: only the best one */
	v = v0;
	v.victims = (uintptr_t)raw;
	v.max = 1;
	memset(raw, 0xa5, sizeof(raw));
	CU_ASSERT_EQUAL(victims_raw(a, &v), 1);
	CU_ASSERT_EQUAL(raw[0].session_id, s2);
	CU_ASSERT_EQUAL(raw[1].session_id, 0xa5a5a5a5a5a5a5a5ull);

	/* A wider stride: the struct's bytes, the rest zeroed, the next
	 * entry at 48. */
	v = v0;
	v.victims = (uintptr_t)wide;
	v.victim_size = 48;
	memset(wide, 0xa5, sizeof(wide));
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	for (i = 0; i < 2; i++) {
		struct kva_victim e;

		memcpy(&e, wide + 48 * i, sizeof(e));
		CU_ASSERT_EQUAL(e.session_id, pub[i].session_id);
		CU_ASSERT_EQUAL(e.blocks_held, pub[i].blocks_held);
		for (n = (int)sizeof(e); n < 48; n++)
			CU_ASSERT_EQUAL(wide[48 * i + n], 0);
	}
	CU_ASSERT_EQUAL(wide[96], 0xa5);	/* nothing past count */
	CU_ASSERT_EQUAL(wide[sizeof(wide) - 1], 0xa5);

	/* Each bound at its edge: the last good value, then the first bad. */
	big = calloc(KVA_MAX_VICTIMS, KVA_STRUCT_MAX);
	CU_ASSERT_FATAL(big != NULL);
	v = v0;
	v.victims = (uintptr_t)big;
	v.max = KVA_MAX_VICTIMS;
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	v.max = KVA_MAX_VICTIMS + 1;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v.max = 0;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v = v0;
	v.victims = (uintptr_t)big;
	v.victim_size = KVA_VICTIM_SIZE_VER0;
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	v.victim_size = KVA_VICTIM_SIZE_VER0 - 1;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v.victim_size = KVA_STRUCT_MAX;
	memset(big, 0xa5, 2 * KVA_STRUCT_MAX);
	CU_ASSERT_EQUAL(victims_raw(a, &v), 2);
	CU_ASSERT_EQUAL(((struct kva_victim *)(big + KVA_STRUCT_MAX))->session_id, s1);
	CU_ASSERT_EQUAL(big[KVA_STRUCT_MAX - 1], 0);
	v.victim_size = KVA_STRUCT_MAX + 1;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -E2BIG);
	v.max = 0;		/* EINVAL is checked before E2BIG */
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v = v0;
	v.victims = (uintptr_t)big;
	v.policy = KVC_POLICY_COUNT - 1;
	/* TTL, the last policy: accepted; the 30 s default ttl has not run out */
	CU_ASSERT_EQUAL(victims_raw(a, &v), 0);
	v.policy = KVC_POLICY_COUNT;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v.policy = KVA_POLICY_ARENA - 1;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v = v0;
	v.victims = (uintptr_t)big;
	v.flags = 1;
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EINVAL);
	v = v0;			/* no array at all */
	CU_ASSERT_EQUAL(victims_raw(a, &v), -EFAULT);
	free(big);

	/* set_policy's flags, the same way */
	ps = (struct kva_policy_set){ .size = sizeof(ps), .flags = 1,
		.policy = KVA_POLICY_TTL };
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_SET_POLICY, &ps), -EINVAL);
	ps.flags = 0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_SET_POLICY, &ps), 0);
	kva_arena_destroy(a);
	kva_close(d);
}

/*
 * What the backend says of itself (its version call) and the flags every
 * call refuses: through kva_call, since the public wrappers always pass
 * flags 0.
 */
static void test_memfd_version_and_flags(void)
{
	uint64_t cap = ((uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2) &
		       ~(KVA_PAGE_SIZE - 1);
	struct kva_version v = { .size = sizeof(v) };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_session_create sc = { .size = sizeof(sc) };
	struct kva_session_end se = { .size = sizeof(se) };
	struct kva_session_state ss = { .size = sizeof(ss) };
	struct kva_session_info si = { .size = sizeof(si) };
	struct kva_arena *a;
	struct kva_dev *d;

	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	CU_ASSERT_EQUAL(kva_dev_version(d, &v), 0);
	/* half of RAM in whole 2 MiB pages, as the module's default */
	CU_ASSERT_EQUAL(v.max_pinned_bytes, cap);
	CU_ASSERT_EQUAL(v.max_arena_bytes, cap);
	CU_ASSERT_EQUAL(v.page_size, KVA_PAGE_SIZE);
	CU_ASSERT_EQUAL(v.max_batch, KVA_MAX_BATCH);
	/* exactly what the backend can do: no dma-buf, tracepoints, io_uring,
	 * events or netlink */
	CU_ASSERT_EQUAL(v.features, KVA_FEAT_MMAP | KVA_FEAT_SESSIONS | KVA_FEAT_BLOCK_SHARE |
			KVA_FEAT_TENANT_QUOTA | KVA_FEAT_NUMA | KVA_FEAT_EVICTION |
			KVA_FEAT_SESSION_UPDATE);

	{	/* the tenant call's flags; then a policy given at creation */
		struct kva_tenant t = { .size = sizeof(t), .flags = 1, .tenant_id = 9 };
		struct kva_arena_params p = { .size = sizeof(p), .bytes = 2 * MIB,
			.block_size = BS, .numa_node = KVA_NUMA_ANY, .name = "pol",
			.policy = KVA_POLICY_TTL, .low_wm = 2, .high_wm = 6, .ttl_ms = 1234 };

		CU_ASSERT_EQUAL(kva_memfd_tenant(d, true, &t), -EINVAL);
		a = NULL;
		CU_ASSERT_EQUAL_FATAL(kva_arena_new(d, &p, &a), 0);
		CU_ASSERT_EQUAL(kva_arena_get_info(a, &ai), 0);
		CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_TTL);
		CU_ASSERT_EQUAL(ai.low_wm, 2);
		CU_ASSERT_EQUAL(ai.high_wm, 6);
		CU_ASSERT_EQUAL(ai.ttl_ms, 1234);
		kva_arena_destroy(a);
		ai = (struct kva_arena_info){ .size = sizeof(ai) };
	}
	a = mk_memfd(d, 2 * MIB, KVA_NUMA_ANY, "flags");
	CU_ASSERT_FATAL(a != NULL);
	ai.flags = 1;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_INFO, &ai), -EINVAL);
	ai.flags = 0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_INFO, &ai), 0);
	CU_ASSERT_EQUAL(ai.blocks_total, 32);
	sc.flags = 1;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_CREATE, &sc), -EINVAL);
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_INFO, &ai), 0);
	CU_ASSERT_EQUAL(ai.sessions, 0);	/* none made */
	sc.flags = 0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_CREATE, &sc), 0);
	CU_ASSERT(sc.session_id > 0);
	ss.session_id = se.session_id = si.session_id = sc.session_id;
	ss.flags = 1u << 31;
	ss.state = KVA_STATE_TOOL_WAIT;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_SET_STATE, &ss), -EINVAL);
	/* TIER needs the VER1 struct; VER1's pad must be 0 */
	ss.flags = KVA_SESSION_STATE_TIER;
	ss.size = KVA_SESSION_STATE_SIZE_VER0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_SET_STATE, &ss), -EINVAL);
	ss.size = sizeof(ss);
	ss.pad = 1;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_SET_STATE, &ss), -EINVAL);
	ss.pad = 0;
	si.flags = 1;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_INFO, &si), -EINVAL);
	si.flags = 0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_INFO, &si), 0);
	CU_ASSERT_EQUAL(si.state, KVA_STATE_IDLE);	/* unchanged */
	se.flags = 1;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_END, &se), -EINVAL);
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_ARENA_INFO, &ai), 0);
	CU_ASSERT_EQUAL(ai.sessions, 1);	/* still there */
	se.flags = 0;
	CU_ASSERT_EQUAL(kva_call(a, KVA_IOC_SESSION_END, &se), 0);
	kva_arena_destroy(a);
	kva_close(d);
}

/*
 * kva_session_update() through the memfd backend (issue 39.2, 39.4): a new
 * prediction without a transition re-ranks the arena's victims, the tier
 * is recorded and read back, KEEP with another state is refused.
 */
static void test_memfd_update(void)
{
	struct kva_session_info si = { .size = sizeof(si) };
	struct kva_victim v[4];
	struct kva_arena *a;
	struct kva_dev *d;
	uint64_t x, y;
	uint32_t ids[2];

	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	a = mk_memfd(d, 2 * MIB, KVA_NUMA_ANY, "update");
	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_session_open(a, 1, &x), 0);
	CU_ASSERT_EQUAL(kva_session_open(a, 2, &y), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, x, 1, ids, 0), 1);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, y, 1, ids + 1, 0), 1);
	/* X returns in 1 ms, Y in 100 s: Y goes first */
	CU_ASSERT_EQUAL(kva_session_set_state(a, x, KVA_STATE_TOOL_WAIT, 1, 1000), 0);
	CU_ASSERT_EQUAL(kva_session_set_state(a, y, KVA_STATE_TOOL_WAIT, 2, 100000000), 0);
	CU_ASSERT_EQUAL_FATAL(kva_arena_victims(a, KVA_POLICY_TOOLWAIT, v, 4), 2);
	CU_ASSERT_EQUAL(v[0].session_id, y);
	/* X re-predicted: 1000 s, and its KV on disk */
	CU_ASSERT_EQUAL(kva_session_update(a, x, KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER,
					   KVA_STATE_TOOL_WAIT, 1, 1000000000ull,
					   KVA_TIER_DISK), 0);
	CU_ASSERT_EQUAL_FATAL(kva_arena_victims(a, KVA_POLICY_TOOLWAIT, v, 4), 2);
	CU_ASSERT_EQUAL(v[0].session_id, x);
	CU_ASSERT_EQUAL(kva_session_get_info(a, x, &si), 0);
	CU_ASSERT_EQUAL(si.tier, KVA_TIER_DISK);
	CU_ASSERT_EQUAL(si.transitions, 1);
	CU_ASSERT_EQUAL(si.expected_wait_us, 1000000000ull);
	CU_ASSERT_EQUAL(kva_session_update(a, y, KVA_SESSION_STATE_KEEP, KVA_STATE_DECODE,
					   0, 0, 0), -EINVAL);
	CU_ASSERT_EQUAL(kva_session_update(a, y, KVA_SESSION_STATE_TIER, KVA_STATE_DECODE,
					   0, 0, KVA_TIER_NONE), 0);
	CU_ASSERT_EQUAL(kva_session_get_info(a, y, &si), 0);
	CU_ASSERT_EQUAL(si.state, KVA_STATE_DECODE);
	CU_ASSERT_EQUAL(si.tier, KVA_TIER_NONE);
	kva_arena_destroy(a);
	kva_close(d);
}

/*
 * Ending a session settles its idle time at the moment it ends: 4 blocks
 * 20 ms in a tool wait, then ended, add at least 4 x 20000 block-us to the
 * arena's total for ended sessions.
 */
static void test_memfd_idle_at_end(void)
{
	struct timespec ts = { .tv_nsec = 20 * 1000 * 1000 };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_arena *a;
	struct kva_dev *d;
	uint64_t sid;
	uint32_t ids[4];

	CU_ASSERT_EQUAL_FATAL(kva_open(KVA_BACKEND_MEMFD, &d), 0);
	a = mk_memfd(d, 2 * MIB, KVA_NUMA_ANY, "idle");
	CU_ASSERT_FATAL(a != NULL);
	CU_ASSERT_EQUAL(kva_session_open(a, 0, &sid), 0);
	CU_ASSERT_EQUAL(kva_blocks_alloc(a, sid, 4, ids, 0), 4);
	CU_ASSERT_EQUAL(kva_session_set_state(a, sid, KVA_STATE_TOOL_WAIT, 1, 1), 0);
	nanosleep(&ts, NULL);
	CU_ASSERT_EQUAL(kva_session_close(a, sid), 0);
	CU_ASSERT_EQUAL(kva_arena_get_info(a, &ai), 0);
	CU_ASSERT_EQUAL(ai.sessions_ended, 1);
	CU_ASSERT(ai.idle_block_us >= 4 * 20000);
	CU_ASSERT(ai.idle_block_us < 4ULL * 10 * 1000000);	/* not garbage: < 10 s each */
	kva_arena_destroy(a);
	kva_close(d);
}

void add_memfd_tests(CU_pSuite s)
{
	CU_add_test(s, "memfd version and refused flags", test_memfd_version_and_flags);
	CU_add_test(s, "memfd memory: hugetlb or THP, no fd leak", test_memfd_memory);
	CU_add_test(s, "memfd memory: NUMA binding", test_memfd_numa);
	CU_add_test(s, "memfd victims: arguments as the module's", test_memfd_victims_args);
	CU_add_test(s, "memfd idle time settled when a session ends", test_memfd_idle_at_end);
	CU_add_test(s, "memfd session update: KEEP re-ranks, TIER recorded", test_memfd_update);
}
