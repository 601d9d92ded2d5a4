// SPDX-License-Identifier: MIT
/*
 * kvd-handoff - what handing a session's KV from a prefill process to a
 * decode process costs, with 8B-shaped KV (Llama-3-8B fp16: 128 KiB per
 * token, 16 tokens = one 2 MiB block), over kvarenad's worker protocol:
 *
 *  arena: the decode process mapped the arena once (its data fd, sent at
 *         start); a hand-off sends the block table and the receiver
 *         checks it can address every block (reads each block's marker).
 *  copy:  the prefill process sends the KV bytes over the same socket and
 *         the decode process writes them into blocks of its own, what
 *         systems without a shared arena do.
 *
 * Each hand-off is timed from the first byte sent to the receiver's
 * acknowledgement; the median of several runs is reported, with rows
 *   ROW handoff_<n>k_vs_copy <arena us> us copy <copy us> <copy/arena>
 * usage: kvd-handoff [-b memfd|kernel] [-r RUNS] TOKENS...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvarena.h>

#include "proto.h"

#define BLOCK (2u << 20)
#define TOKENS_PER_BLOCK 16
#define CHUNK_BLOCKS 16		/* 32 MiB per copy message */

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The decode side: map the arena, then answer hand-offs. */
static int decode_side(int sock, uint32_t n_blocks)
{
	struct kvd_result ack = { 0 };
	void *buf = NULL, *arena, *own;
	size_t cap = 0, len;
	uint16_t type;
	int fd = -1, rc;
	struct kvd_kv_geom g;
	uint32_t loaded = 0;

	rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, &fd);
	if (rc <= 0 || type != KVD_MSG_HELLO || fd < 0 || len != sizeof(struct kvd_hello))
		return 1;
	memcpy(&g, &((struct kvd_hello *)buf)->geom, sizeof(g));
	arena = mmap(NULL, g.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	/* this stage's own blocks, allocated and touched up front as an arena
	 * of its own would be */
	own = mmap(NULL, (size_t)n_blocks * BLOCK, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (arena == MAP_FAILED || own == MAP_FAILED)
		return 1;
	while ((rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL)) > 0) {
		if (type == KVD_MSG_STEP) {
			const uint32_t *ids = buf;
			uint64_t sum = 0;
			uint32_t i;

			for (i = 0; i < len / 4; i++) {
				uint64_t m;

				memcpy(&m, kvd_block_addr(arena, &g, ids[i]), 8);
				sum += m == ids[i];
			}
			ack.n_seq = (uint32_t)sum;
			ack.kv_bytes = 0;
			kvd_msg_send(sock, KVD_MSG_RESULT, &ack, sizeof(ack), -1);
		} else if (type == KVD_MSG_KV_LOAD) {
			struct kvd_kv_load kl;
			const char *p = (const char *)buf + sizeof(kl);

			memcpy(&kl, buf, sizeof(kl));
			p += (size_t)kl.n_blocks * 4;
			memcpy((char *)own + (size_t)loaded * BLOCK, p, (size_t)kl.n_blocks * BLOCK);
			loaded += kl.n_blocks;
			if (kl.pad) {	/* last chunk */
				ack.n_seq = loaded;
				ack.kv_bytes = (uint64_t)loaded * BLOCK;
				loaded = 0;
				kvd_msg_send(sock, KVD_MSG_KV_LOADED, &ack, sizeof(ack), -1);
			}
		}
	}
	free(buf);
	return 0;
}

static int wait_ack(int sock, void **buf, size_t *cap, uint32_t want)
{
	uint16_t type;
	size_t len;
	struct kvd_result r;

	if (kvd_msg_recv(sock, &type, buf, cap, &len, NULL) <= 0 || len != sizeof(r))
		return -1;
	memcpy(&r, *buf, sizeof(r));
	return r.n_seq == want ? 0 : -1;
}

static int run(enum kva_backend backend, uint32_t tokens, int runs)
{
	uint64_t sid;
	uint32_t n = tokens / TOKENS_PER_BLOCK, i;
	struct kva_arena_params p = { 0 };
	struct kva_dev *dev = NULL;
	struct kva_arena *a = NULL;
	struct kvd_hello h = { 0 };
	uint32_t *ids = calloc(n, sizeof(*ids));
	double *ta = calloc((size_t)runs, sizeof(double)), *tc = calloc((size_t)runs, sizeof(double));
	void *base, *buf = NULL;
	size_t cap = 0;
	int sv[2], fd, r, rc = 1;
	pid_t pid;

	if (!ids || !ta || !tc || kva_open(backend, &dev))
		goto out;
	p.size = sizeof(p);
	p.bytes = (uint64_t)n * BLOCK;
	p.block_size = BLOCK;
	p.numa_node = KVA_NUMA_ANY;
	p.name = "handoff";
	if (kva_arena_new(dev, &p, &a) || kva_session_open(a, 1, &sid))
		goto out;
	for (i = 0; i < n; i += 1024) {
		uint32_t k = n - i < 1024 ? n - i : 1024;

		if (kva_blocks_alloc(a, sid, k, ids + i, 0) != (int)k)
			goto out;
	}
	if (kva_arena_map(a, &base))
		goto out;
	h.geom.arena_bytes = p.bytes;
	h.geom.block_size = BLOCK;
	h.geom.blocks_per_page = 1;
	h.geom.blocks_total = n;
	h.geom.block_tokens = TOKENS_PER_BLOCK;
	h.geom.kv_block_bytes = BLOCK;
	/* the prefill's KV: every byte written, a marker in front */
	for (i = 0; i < n; i++) {
		uint64_t m = ids[i];
		char *b = kvd_block_addr(base, &h.geom, ids[i]);

		memset(b, (int)(i & 0xff), BLOCK);
		memcpy(b, &m, 8);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		goto out;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(decode_side(sv[1], n));
	}
	close(sv[1]);
	fd = kva_arena_data_fd(a, 0);
	if (fd < 0 || kvd_msg_send(sv[0], KVD_MSG_HELLO, &h, sizeof(h), fd))
		goto done;
	close(fd);
	for (r = -1; r < runs; r++) {	/* run -1 warms both paths up */
		double t0 = now_us();

		if (kvd_msg_send(sv[0], KVD_MSG_STEP, ids, (size_t)n * 4, -1) ||
		    wait_ack(sv[0], &buf, &cap, n))
			goto done;
		if (r >= 0)
			ta[r] = now_us() - t0;
		t0 = now_us();
		for (i = 0; i < n; i += CHUNK_BLOCKS) {
			uint32_t k = n - i < CHUNK_BLOCKS ? n - i : CHUNK_BLOCKS, j;
			struct kvd_kv_load kl = { 0, k, i + k == n };
			struct kvd_iov iov[2 + CHUNK_BLOCKS];

			iov[0].base = &kl;
			iov[0].len = sizeof(kl);
			iov[1].base = ids + i;
			iov[1].len = (size_t)k * 4;
			for (j = 0; j < k; j++) {
				iov[2 + j].base = kvd_block_addr(base, &h.geom, ids[i + j]);
				iov[2 + j].len = BLOCK;
			}
			if (kvd_msg_sendv(sv[0], KVD_MSG_KV_LOAD, iov, 2 + (int)k))
				goto done;
		}
		if (wait_ack(sv[0], &buf, &cap, n))
			goto done;
		if (r >= 0)
			tc[r] = now_us() - t0;
	}
	qsort(ta, (size_t)runs, sizeof(double), cmp_d);
	qsort(tc, (size_t)runs, sizeof(double), cmp_d);
	printf("ROW\thandoff_%uk_vs_copy\t%.1f\tus\tcopy\t%.1f\t%.0f\n", tokens / 1024,
	       ta[runs / 2], tc[runs / 2], tc[runs / 2] / ta[runs / 2]);
	printf("ROW\thandoff_%uk_copy_bytes\t%llu\tbytes\tarena\t0\t-\n", tokens / 1024,
	       (unsigned long long)n * BLOCK);
	fflush(stdout);
	rc = 0;
done:
	close(sv[0]);
	waitpid(pid, NULL, 0);
out:
	free(buf);
	free(ids);
	free(ta);
	free(tc);
	kva_arena_destroy(a);
	kva_close(dev);
	return rc;
}

int main(int argc, char **argv)
{
	enum kva_backend b = KVA_BACKEND_MEMFD;
	int opt, runs = 5, i, rc = 0;

	while ((opt = getopt(argc, argv, "b:r:")) != -1) {
		if (opt == 'b')
			b = !strcmp(optarg, "kernel") ? KVA_BACKEND_KERNEL : KVA_BACKEND_MEMFD;
		else if (opt == 'r')
			runs = atoi(optarg) > 0 ? atoi(optarg) : 5;
		else
			return 2;
	}
	for (i = optind; i < argc; i++) {
		uint32_t t = (uint32_t)strtoul(argv[i], NULL, 10);

		if (t < TOKENS_PER_BLOCK)
			return 2;
		rc |= run(b, t, runs);
	}
	return rc;
}
