// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A program built against a deliberately older copy of the headers
 * (tests/abi/old/: the first version of kva_arena_params, kva_arena_info
 * and kva_arena_create) and run against the library built now: the library
 * must write no byte past the old structs (guards after each), fill what
 * the old caller knows, and take the old, shorter kva_arena_params with
 * defaults for the fields it lacks.  memfd backend, no module needed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <kvarena/kvarena.h>

#define GUARD 0xa5

static int fails;

#define CHECK(c)							\
	do {								\
		if (!(c)) {						\
			fprintf(stderr, "old-header: %s:%d: %s\n",	\
				__FILE__, __LINE__, #c);		\
			fails++;					\
		}							\
	} while (0)

/* An output struct with 64 guard bytes after it. */
#define GUARDED(type) struct { struct type s; unsigned char g[64]; }

static int guard_ok(const unsigned char *g)
{
	int i;

	for (i = 0; i < 64; i++)
		if (g[i] != GUARD)
			return 0;
	return 1;
}

int main(void)
{
	GUARDED(kva_version) v;
	GUARDED(kva_arena_info) ai;
	GUARDED(kva_session_info) si;
	GUARDED(kva_tenant) t;
	struct {
		struct kva_arena_params p;
		unsigned char g[64];
	} p;
	struct kva_arena *a;
	struct kva_dev *d;
	uint64_t sid;
	uint32_t ids[2];

	/* The copy is old: the library's kva_arena_info is bigger. */
	CHECK(sizeof(struct kva_arena_info) == KVA_ARENA_INFO_SIZE_VER0);
	CHECK(kva_open(KVA_BACKEND_MEMFD, &d) == 0);
	if (fails)
		return 1;

	memset(&v, GUARD, sizeof(v));
	v.s.size = sizeof(v.s);
	CHECK(kva_dev_version(d, &v.s) == 0);
	CHECK(v.s.api_version == KVA_API_VERSION && guard_ok(v.g));

	/* Old params: no eviction fields; the guard bytes after them are
	 * what a newer library would read if it ignored size. */
	memset(&p, GUARD, sizeof(p));
	memset(&p.p, 0, sizeof(p.p));
	p.p.size = sizeof(p.p);
	p.p.bytes = 4 << 20;
	p.p.block_size = 64 << 10;
	p.p.numa_node = KVA_NUMA_ANY;
	p.p.tenant_id = 3;
	p.p.name = "old-abi";
	CHECK(kva_arena_new(d, &p.p, &a) == 0);
	if (fails)
		return 1;

	memset(&ai, GUARD, sizeof(ai));
	ai.s.size = sizeof(ai.s);
	CHECK(kva_arena_get_info(a, &ai.s) == 0);
	CHECK(guard_ok(ai.g));
	CHECK(ai.s.size == KVA_ARENA_INFO_SIZE_VER0);
	CHECK(ai.s.blocks_total == 64 && ai.s.tenant_id == 3 &&
	      !strcmp(ai.s.name, "old-abi"));

	CHECK(kva_session_open(a, 9, &sid) == 0);
	CHECK(kva_blocks_alloc(a, sid, 2, ids, 0) == 2);
	memset(&si, GUARD, sizeof(si));
	si.s.size = sizeof(si.s);
	CHECK(kva_session_get_info(a, sid, &si.s) == 0);
	CHECK(si.s.blocks_held == 2 && si.s.cookie == 9 && guard_ok(si.g));

	memset(&t, GUARD, sizeof(t));
	t.s.size = sizeof(t.s);
	CHECK(kva_tenant_info(d, 3, &t.s) == 0);
	CHECK(t.s.used_bytes == 2 * (64 << 10) && guard_ok(t.g));

	/* A size below the first version is refused, nothing written. */
	memset(&ai, GUARD, sizeof(ai));
	ai.s.size = KVA_ARENA_INFO_SIZE_VER0 - 8;
	CHECK(kva_arena_get_info(a, &ai.s) == -EINVAL);
	CHECK(ai.s.blocks_total == 0xa5a5a5a5);

	kva_arena_destroy(a);
	kva_close(d);
	if (!fails)
		printf("old-header: an older caller is served within its sizes\n");
	return fails != 0;
}
