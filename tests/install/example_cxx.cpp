// SPDX-License-Identifier: MIT
/*
 * A C++ user of the installed libkvarena (pkg-config), built with
 * -Wall -Wextra -Werror: the UAPI and library types by their bare names
 * next to the functions, on the memfd backend.
 */
#include <cstdio>
#include <cstring>
#include <kvarena/kvarena.h>
#include <kvarena/kvarena_toolwait.h>

#define CHECK(c)                                                        \
	do {                                                            \
		if (!(c)) {                                             \
			std::fprintf(stderr, "example_cxx: %s:%d: %s\n", \
				     __FILE__, __LINE__, #c);           \
			return 1;                                       \
		}                                                       \
	} while (0)

int main()
{
	kva_dev *dev = nullptr;
	kva_arena *arena = nullptr;
	kva_arena_params p{};
	kva_version v{};
	kva_arena_info ai{};
	kva_session_info si{};
	kva_toolwait_session tws{};
	kva_toolwait_stats twst{};
	kva_toolwait_kind kind = KVA_TOOLWAIT_AUTO;
	uint64_t sid = 0;
	uint32_t ids[4];
	void *base = nullptr;

	(void)tws;
	(void)twst;
	(void)kind;
	CHECK(kva_open(KVA_BACKEND_MEMFD, &dev) == 0);
	v.size = sizeof(v);
	CHECK(kva_dev_version(dev, &v) == 0 && v.api_version == KVA_API_VERSION);

	p.size = sizeof(p);
	p.bytes = KVA_PAGE_SIZE;
	p.block_size = 64 * 1024;
	p.numa_node = KVA_NUMA_ANY;
	p.name = "cxx";
	CHECK(kva_arena_new(dev, &p, &arena) == 0);
	ai.size = sizeof(ai);
	CHECK(kva_arena_get_info(arena, &ai) == 0 && ai.blocks_total == 32 &&
	      std::strcmp(ai.name, "cxx") == 0);

	CHECK(kva_session_open(arena, 42, &sid) == 0);
	CHECK(kva_blocks_alloc(arena, sid, 4, ids, 0) == 4);
	CHECK(kva_arena_map(arena, &base) == 0);
	std::memset(kva_arena_block_ptr(arena, ids[3]), 0x5a, p.block_size);
	si.size = sizeof(si);
	CHECK(kva_session_get_info(arena, sid, &si) == 0 && si.blocks_held == 4 &&
	      si.cookie == 42);
	CHECK(kva_session_close(arena, sid) == 0);
	kva_arena_destroy(arena);
	kva_close(dev);
	std::printf("example_cxx: C++ user of libkvarena ok\n");
	return 0;
}
