// SPDX-License-Identifier: MIT
/* Built against an installed libkvarena (pkg-config), run on the memfd backend. */
#include <stdio.h>
#include <kvarena/kvarena.h>

int main(void)
{
	struct kva_arena_params p = { .size = sizeof(p), .bytes = 2 << 20, .block_size = 4096,
				      .numa_node = KVA_NUMA_ANY, .name = "inst" };
	struct kva_arena *a;
	struct kva_dev *d;
	uint64_t sid;
	uint32_t ids[4];

	if (kva_open(KVA_BACKEND_MEMFD, &d) || kva_arena_new(d, &p, &a) ||
	    kva_session_open(a, 1, &sid) || kva_blocks_alloc(a, sid, 4, ids, 0) != 4)
		return 1;
	printf("installed libkvarena: %u blocks allocated\n", 4);
	kva_arena_destroy(a);
	kva_close(d);
	return 0;
}
