// SPDX-License-Identifier: MIT
/*
 * kva-share: a prefill process and a decode process sharing one KV arena.
 *
 * The "prefill" process creates an arena, allocates blocks into a session
 * and writes a pattern into them.  It passes the arena fd and a data fd
 * (the dma-buf) to a "decode" process over a Unix socket.  The decode
 * process maps the data fd, checks every byte, takes its own references on
 * the same blocks (prefix sharing) and reports.  Then both print what the
 * module accounts.  Used by `make demo`; handy as a smoke test.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvarena.h"

#define MAX_BLOCKS	256

struct handoff {
	uint64_t bytes;
	uint32_t block_size;
	uint32_t nblocks;
	uint32_t ids[MAX_BLOCKS];
};

static int fail(const char *what, int err)
{
	fprintf(stderr, "kva-share: %s: %s\n", what, strerror(-err));
	return 1;
}

/* The hand-over: geometry and block ids, with the arena and data fds. */
static int send_fds(int sock, const struct handoff *h, int fd1, int fd2)
{
	int fds[2] = { fd1, fd2 };

	return kva_send_fds(sock, h, sizeof(*h), fds, 2);
}

static int recv_fds(int sock, struct handoff *h, int *fd1, int *fd2)
{
	unsigned int n = 2;
	int fds[2], ret;

	ret = kva_recv_fds(sock, h, sizeof(*h), fds, &n);
	if (ret)
		return ret;
	if (n != 2) {
		while (n)
			close(fds[--n]);
		return -EBADMSG;
	}
	*fd1 = fds[0];
	*fd2 = fds[1];
	return 0;
}

static uint64_t pattern(uint32_t block, uint64_t word)
{
	return ((uint64_t)block << 40) ^ (word * 0x9e3779b97f4a7c15ULL);
}

static void *block_at(void *base, const struct handoff *h, uint32_t id)
{
	return (char *)base + kva_block_offset(h->block_size, id);
}

static int decode_side(int sock, enum kva_backend backend)
{
	struct kva_arena *arena = NULL;
	struct kva_dev *dev;
	struct handoff h;
	int afd, dfd, ret;
	uint64_t sid;
	uint32_t i;
	uint64_t w, bad = 0;
	void *base;

	ret = recv_fds(sock, &h, &afd, &dfd);
	if (ret)
		return fail("decode: receive fds", ret);
	ret = kva_map_fd(dfd, h.bytes, &base);
	if (ret)
		return fail("decode: map data fd", ret);
	for (i = 0; i < h.nblocks; i++) {
		uint64_t *p = block_at(base, &h, h.ids[i]);

		for (w = 0; w < h.block_size / 8; w++)
			bad += p[w] != pattern(h.ids[i], w);
	}
	printf("decode  pid %d: mapped the %s fd, verified %u blocks x %u KiB: %s\n",
	       getpid(), backend == KVA_BACKEND_KERNEL ? "dma-buf" : "memfd",
	       h.nblocks, h.block_size >> 10, bad ? "MISMATCH" : "identical");
	if (bad)
		return 1;
	if (backend != KVA_BACKEND_KERNEL)
		return 0;

	/* The arena fd lets this process hold the prefix too. */
	ret = kva_open(KVA_BACKEND_KERNEL, &dev);
	if (!ret)
		ret = kva_arena_from_fd(dev, afd, &arena);
	if (!ret)
		ret = kva_session_open(arena, 2, &sid);
	if (!ret)
		ret = kva_blocks_share(arena, sid, h.nblocks, h.ids);
	if (!ret)
		ret = kva_session_set_state(arena, sid, KVA_STATE_DECODE, 0, 0);
	if (ret < 0)
		return fail("decode: share the prefix", ret);
	printf("decode  pid %d: session %" PRIu64 " shares the %u blocks and decodes in place\n",
	       getpid(), sid, h.nblocks);
	ret = kva_session_close(arena, sid);
	kva_arena_destroy(arena);
	kva_close(dev);
	kva_unmap(base, h.bytes);
	return ret < 0 ? fail("decode: end", ret) : 0;
}

static void print_file(const char *label, const char *path)
{
	char line[256];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	if (label)
		printf("%s", label);
	while (fgets(line, sizeof(line), f))
		fputs(line, stdout);
	fclose(f);
}

static void print_module_stats(void)
{
	static const char *const names[] = {
		"pinned_bytes", "arenas", "arenas_created", "blocks_used",
		"sessions",
	};
	char path[128];
	size_t i;

	printf("\nmodule stats (/sys/class/misc/kvarena/):\n");
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "/sys/class/misc/kvarena/%s",
			 names[i]);
		printf("  %-15s ", names[i]);
		print_file(NULL, path);
	}
	print_file("\n/sys/kernel/debug/kvarena/arenas:\n",
		   "/sys/kernel/debug/kvarena/arenas");
	print_file("\n/sys/kernel/debug/kvarena/tenants:\n",
		   "/sys/kernel/debug/kvarena/tenants");
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kva-share [-b kernel|memfd] [-m arena_MiB] [-n blocks] [-s block_KiB]\n");
}

int main(int argc, char **argv)
{
	enum kva_backend backend = KVA_BACKEND_AUTO;
	struct kva_arena_params p = { .size = sizeof(p),
		.bytes = 64ULL << 20, .block_size = 256 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 7, .name = "demo",
	};
	struct kva_session_info si = { .size = sizeof(si) };
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_arena *arena;
	struct kva_dev *dev;
	struct handoff h = { 0 };
	int opt, ret, sv[2], dfd, status;
	uint64_t sid;
	uint32_t i, n = 32;
	uint64_t w;
	pid_t pid;

	while ((opt = getopt(argc, argv, "b:m:n:s:h")) != -1) {
		switch (opt) {
		case 'b':
			backend = !strcmp(optarg, "memfd") ? KVA_BACKEND_MEMFD :
								 KVA_BACKEND_KERNEL;
			break;
		case 'm':
			p.bytes = strtoull(optarg, NULL, 0) << 20;
			break;
		case 'n':
			n = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 's':
			p.block_size = (uint32_t)strtoul(optarg, NULL, 0) << 10;
			break;
		default:
			usage();
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!n || n > MAX_BLOCKS) {
		fprintf(stderr, "kva-share: -n must be 1..%d\n", MAX_BLOCKS);
		return 2;
	}
	ret = kva_open(backend, &dev);
	if (ret)
		return fail("open /dev/kvarena", ret);
	backend = kva_dev_backend(dev);
	if (backend == KVA_BACKEND_MEMFD)
		printf("note: %s\n", kva_dev_limits(dev));
	ret = kva_arena_new(dev, &p, &arena);
	if (ret)
		return fail("create arena", ret);
	kva_arena_get_info(arena, &ai);
	printf("prefill pid %d: arena %u \"%s\": %llu MiB in 2 MiB pages, %u blocks of %u KiB\n",
	       getpid(), ai.arena_id, ai.name, (unsigned long long)(ai.bytes >> 20),
	       ai.blocks_total, ai.block_size >> 10);

	ret = kva_session_open(arena, 1, &sid);
	if (!ret)
		ret = kva_session_set_state(arena, sid, KVA_STATE_PREFILL, 0, 0);
	if (!ret)
		ret = kva_blocks_alloc(arena, sid, n, h.ids, 0);
	if (ret < 0)
		return fail("allocate blocks", ret);
	ret = kva_arena_map(arena, NULL);
	if (ret)
		return fail("map arena", ret);
	for (i = 0; i < n; i++) {
		uint64_t *b = kva_arena_block_ptr(arena, h.ids[i]);

		for (w = 0; w < p.block_size / 8; w++)
			b[w] = pattern(h.ids[i], w);
	}
	printf("prefill pid %d: session %" PRIu64 " wrote KV into %u blocks (ids %u..%u)\n",
	       getpid(), sid, n, h.ids[0], h.ids[n - 1]);

	h.bytes = ai.bytes;
	h.block_size = ai.block_size;
	h.nblocks = n;
	dfd = kva_arena_data_fd(arena, KVA_EXPORT_CLOEXEC);
	if (dfd < 0)
		return fail("export data fd", dfd);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return fail("socketpair", -errno);
	pid = fork();
	if (pid < 0)
		return fail("fork", -errno);
	if (pid == 0) {
		close(sv[0]);
		ret = decode_side(sv[1], backend);
		fflush(stdout);		/* _exit() flushes nothing; a pipe buffers */
		_exit(ret);
	}
	close(sv[1]);
	ret = send_fds(sv[0], &h, kva_arena_fd(arena), dfd);
	if (ret)
		return fail("send fds", ret);
	close(dfd);
	ret = kva_session_set_state(arena, sid, KVA_STATE_TOOL_WAIT, 3, 200000);
	if (ret)
		return fail("tool wait", ret);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "kva-share: decode process failed\n");
		return 1;
	}
	kva_session_get_info(arena, sid, &si);
	kva_arena_get_info(arena, &ai);
	printf("prefill pid %d: session %" PRIu64 " state %s (tool class %u), %u blocks held, %llu idle block-us, %llu idle byte-s\n",
	       getpid(), sid, kva_state_name(si.state), si.tool_class,
	       si.blocks_held, (unsigned long long)si.idle_block_us,
	       (unsigned long long)si.idle_byte_sec);
	printf("arena %u: %u of %u blocks free, %u live sessions, %llu ended\n",
	       ai.arena_id, ai.blocks_free, ai.blocks_total, ai.sessions,
	       (unsigned long long)ai.sessions_ended);
	if (backend == KVA_BACKEND_KERNEL)
		print_module_stats();
	ret = kva_session_close(arena, sid);
	kva_arena_destroy(arena);
	kva_close(dev);
	return ret ? fail("end session", ret) : 0;
}
