// SPDX-License-Identifier: MIT
/*
 * kva-bench-blocks: block alloc+free throughput through libkvarena, one
 * call per batch (the ioctl path on the kernel backend, the shared core
 * in-process on the memfd backend), or with -u through io_uring: each
 * submission carries `batch` SQEs of -i blocks each (default 1).  An "op" is one block
 * allocated and freed again.  Prints one results.tsv row per batch size:
 *   ROW <prefix>_batch<N>_<suffix> <ops/s> ops/s - - -
 * Usage: kva-bench-blocks [-b kernel|memfd] [-u] [-t seconds] [-p prefix]
 *                          [-s suffix] batch...
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvarena.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run(struct kva_arena *arena, uint64_t sid, uint32_t batch,
	       double seconds, double *ops_per_s)
{
	uint32_t ids[KVA_MAX_BATCH];
	uint64_t ops = 0, i;
	double t0 = now(), t;
	int ret;

	for (;;) {
		for (i = 0; i < 256; i++) {
			ret = kva_blocks_alloc(arena, sid, batch, ids, 0);
			if (ret != (int)batch)
				return ret < 0 ? ret : -EIO;
			ret = kva_blocks_free(arena, sid, batch, ids);
			if (ret != (int)batch)
				return ret < 0 ? ret : -EIO;
			ops += batch;
		}
		t = now() - t0;
		if (t >= seconds)
			break;
	}
	*ops_per_s = (double)ops / t;
	return 0;
}

/* batch SQEs of per_sqe blocks each per submission: allocs, then frees. */
static int run_uring(struct kva_arena *arena, uint64_t sid, uint32_t batch,
		     uint32_t per_sqe, double seconds, double *ops_per_s)
{
	static struct kva_blocks b[KVA_MAX_BATCH];
	static struct kva_ring_cqe cqe[KVA_MAX_BATCH];
	static uint32_t ids[KVA_MAX_BATCH][64];
	struct kva_ring *ring;
	uint64_t ops = 0;
	double t0, t;
	uint32_t i, pass, got;
	int ret, n;

	ret = kva_ring_open(arena, batch, &ring);
	if (ret)
		return ret;
	t0 = now();
	do {
		for (pass = 0; pass < 2; pass++) {
			for (i = 0; i < batch; i++) {
				b[i] = (struct kva_blocks){ .size = sizeof(b[i]),
					.session_id = sid, .count = per_sqe,
					.ids = (uintptr_t)ids[i] };
				kva_ring_queue(ring, pass ? KVA_RING_BLOCKS_FREE :
					       KVA_RING_BLOCKS_ALLOC, &b[i], i);
			}
			if (kva_ring_submit(ring) != (int)batch) {
				kva_ring_close(ring);
				return -EIO;
			}
			for (got = 0; got < batch; got += (uint32_t)n) {
				n = kva_ring_reap(ring, cqe, batch - got,
						  batch - got);
				if (n <= 0) {
					kva_ring_close(ring);
					return n ? n : -EIO;
				}
				for (i = 0; i < (uint32_t)n; i++)
					if (cqe[i].res != (int)per_sqe) {
						kva_ring_close(ring);
						return cqe[i].res < 0 ?
						       cqe[i].res : -EIO;
					}
			}
		}
		ops += (uint64_t)batch * per_sqe;
		t = now() - t0;
	} while (t < seconds);
	kva_ring_close(ring);
	*ops_per_s = (double)ops / t;
	return 0;
}

int main(int argc, char **argv)
{
	enum kva_backend backend = KVA_BACKEND_AUTO;
	const char *prefix = "blocks", *suffix = "host";
	struct kva_arena_params p = { .size = sizeof(p),
		.bytes = 64ULL << 20, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .name = "bench",
	};
	struct kva_arena *arena;
	struct kva_dev *dev;
	double seconds = 2.0, rate;
	uint64_t sid;
	int opt, ret, i, uring = 0;
	uint32_t per_sqe = 1;

	while ((opt = getopt(argc, argv, "b:t:p:s:ui:")) != -1) {
		switch (opt) {
		case 'i':
			per_sqe = (uint32_t)atoi(optarg);
			if (!per_sqe || per_sqe > 64)
				return 2;
			break;
		case 'u':
			uring = 1;
			break;
		case 'b':
			backend = strcmp(optarg, "memfd") ? KVA_BACKEND_KERNEL :
							    KVA_BACKEND_MEMFD;
			break;
		case 't':
			seconds = atof(optarg);
			break;
		case 'p':
			prefix = optarg;
			break;
		case 's':
			suffix = optarg;
			break;
		default:
			fprintf(stderr, "usage: kva-bench-blocks [-b kernel|memfd] [-u [-i ids]] [-t s] [-p prefix] [-s suffix] batch...\n");
			return 2;
		}
	}
	ret = kva_open(backend, &dev);
	if (!ret)
		ret = kva_arena_new(dev, &p, &arena);
	if (!ret)
		ret = kva_session_open(arena, 0, &sid);
	if (ret) {
		fprintf(stderr, "kva-bench-blocks: setup: %s\n", strerror(-ret));
		return 1;
	}
	for (i = optind; i < argc; i++) {
		uint32_t batch = (uint32_t)atoi(argv[i]);

		if (!batch || batch > KVA_MAX_BATCH) {
			fprintf(stderr, "kva-bench-blocks: bad batch %s\n", argv[i]);
			return 2;
		}
		ret = uring ? run_uring(arena, sid, batch, per_sqe, seconds,
					&rate) :
			      run(arena, sid, batch, seconds, &rate);
		if (ret) {
			fprintf(stderr, "kva-bench-blocks: %s\n", strerror(-ret));
			return 1;
		}
		printf("ROW\t%s_batch%u_%s\t%.0f\tops/s\t-\t-\t-\n", prefix,
		       batch, suffix, rate);
		fflush(stdout);
	}
	kva_arena_destroy(arena);
	kva_close(dev);
	return 0;
}
