// SPDX-License-Identifier: MIT
/*
 * test_xfer.c - the UCX transfer engine (daemon/remote/xfer.h, kvmove.h)
 * between two processes, each with its own kvarena arena (libkvarena:
 * the kernel backend when /dev/kvarena opens, else memfd).
 *
 *   test_xfer serve PORT         arena A, fills its blocks, waits for one client
 *   test_xfer client HOST:PORT   arena B (another size), pulls and pushes
 *   test_xfer client HOST:PORT --stream   pushes until the server vanishes;
 *                                must see the failure in bounded time
 *
 * tests/remote/run-xfer.sh runs them in two network namespaces joined by
 * a veth pair, UCX over TCP. The addresses, rkeys and block ids travel over
 * a plain TCP socket in proto.h framing (the daemon uses the authenticated
 * channel for this, chan.h).
 *
 * Checked: whole blocks and position ranges land exactly (every other
 * byte of both arenas unchanged), transfers outside an arena are refused
 * (-ERANGE) before they are issued, mismatched layouts are refused, and a
 * peer killed mid-transfer fails the flush instead of hanging.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kvarena.h>

#include "kvmove.h"
#include "proto.h"
#include "xfer.h"

#define MSG_INFO 101	/* geom, n ids, ids, blob */
#define MSG_VERIFY 102	/* n ranges of struct range */
#define MSG_VERDICT 103	/* int32 */
#define MSG_BYE 104

struct range {
	uint32_t block, p0, p1, seed;
};

static int fails;

/* How long a flush may take: KVR_TEST_FLUSH_MS (a TCG guest is slow). */
static int flush_ms(void)
{
	const char *v = getenv("KVR_TEST_FLUSH_MS");

	return v ? atoi(v) : 10000;
}
#define CHECK(c, ...) do { if (!(c)) { fails++; fprintf(stderr, "FAIL %s:%d: ", \
	__FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

struct side {
	struct kva_dev *dev;
	struct kva_arena *arena;
	void *base;
	struct kvd_kv_geom g;
	uint64_t sid;
	uint32_t ids[64];
	uint32_t n;
	struct kvr_xfer *x;
	struct kvr_peer *peer;
};

/* The test layout: 4 layers, 2 KV heads of 64, fp16, 16 tokens a block. */
static void test_geom(struct kvd_kv_geom *g, uint64_t bytes)
{
	memset(g, 0, sizeof(*g));
	g->n_layers = 4;
	g->n_kv_heads = 2;
	g->head_dim = 64;
	g->dtype = 1;
	g->block_tokens = 16;
	g->kv_block_bytes = 4 * 2 * 2 * 16 * 64 * 2;
	g->block_size = g->kv_block_bytes;
	g->blocks_per_page = (2u << 20) / g->block_size;
	g->arena_bytes = bytes;
	g->blocks_total = (uint32_t)(bytes / (2u << 20) * g->blocks_per_page);
}

static uint8_t pattern(uint32_t seed, uint32_t block, uint64_t off)
{
	uint64_t h = (seed * 0x9e3779b97f4a7c15ull) ^ (block * 0xc2b2ae3d27d4eb4full) ^
		     (off / 8 * 0x165667b19e3779f9ull);

	h ^= h >> 29;
	return (uint8_t)(h >> (off % 8 * 8));
}

static void fill(struct side *s, uint32_t seed)
{
	for (uint32_t i = 0; i < s->n; i++) {
		uint8_t *b = (uint8_t *)s->base + kvr_block_off(&s->g, s->ids[i]);

		for (uint64_t o = 0; o < s->g.kv_block_bytes; o++)
			b[o] = pattern(seed, i, o);
	}
}

/* Is byte o of a block inside positions [p0, p1)? */
static int in_range(const struct kvd_kv_geom *g, uint64_t o, uint32_t p0, uint32_t p1)
{
	uint64_t per_pos = (uint64_t)g->head_dim * 2;
	uint32_t t = (uint32_t)(o / per_pos % g->block_tokens);

	return t >= p0 && t < p1;
}

static int setup(struct side *s, uint64_t bytes, uint32_t n)
{
	struct kva_arena_params ap = { .size = sizeof(ap) };
	char err[256];
	int rc;

	test_geom(&s->g, bytes);
	/* KVR_TEST_BACKEND=kernel|memfd; default: the module when it opens */
	rc = kva_open(!getenv("KVR_TEST_BACKEND") ? KVA_BACKEND_AUTO :
		      !strcmp(getenv("KVR_TEST_BACKEND"), "kernel") ? KVA_BACKEND_KERNEL :
		      KVA_BACKEND_MEMFD, &s->dev);
	if (rc)
		return rc;
	ap.bytes = bytes;
	ap.block_size = s->g.block_size;
	ap.numa_node = KVA_NUMA_ANY;
	ap.flags = KVA_ARENA_MLOCK_TRY;
	rc = kva_arena_new(s->dev, &ap, &s->arena);
	if (!rc)
		rc = kva_arena_map(s->arena, &s->base);
	if (!rc)
		rc = kva_session_open(s->arena, 1, &s->sid);
	if (!rc)
		rc = kva_blocks_alloc(s->arena, s->sid, n, s->ids, 0) == (int)n ? 0 : -ENOSPC;
	if (rc)
		return rc;
	s->n = n;
	{
		struct kvr_xfer_params xp = { .base = s->base, .len = bytes };

		rc = kvr_xfer_create(&xp, &s->x, err, sizeof(err));
		if (rc)
			fprintf(stderr, "xfer: %s\n", err);
	}
	return rc;
}

static void teardown(struct side *s)
{
	kvr_xfer_destroy(s->x);
	if (s->arena) {
		kva_session_close(s->arena, s->sid);
		kva_arena_destroy(s->arena);
	}
	if (s->dev)
		kva_close(s->dev);
}

static int send_info(int sock, struct side *s)
{
	struct kvd_iov iov[4];
	void *blob;
	size_t len;
	int rc = kvr_xfer_info(s->x, &blob, &len);

	if (rc)
		return rc;
	iov[0] = (struct kvd_iov){ &s->g, sizeof(s->g) };
	iov[1] = (struct kvd_iov){ &s->n, sizeof(s->n) };
	iov[2] = (struct kvd_iov){ s->ids, s->n * sizeof(uint32_t) };
	iov[3] = (struct kvd_iov){ blob, len };
	rc = kvd_msg_sendv(sock, MSG_INFO, iov, 4);
	free(blob);
	return rc;
}

/* Peer's geometry and block ids; the client connects s->peer (the server
 * only serves: one endpoint, one direction, as between the daemons). */
static int recv_info(int sock, struct side *s, struct kvd_kv_geom *pg, uint32_t *pids,
		     uint32_t *pn, int connect)
{
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	char err[256];
	const char *p;
	int rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL);

	if (rc <= 0 || type != MSG_INFO || len < sizeof(*pg) + 4) {
		free(buf);
		return -EPROTO;
	}
	p = buf;
	memcpy(pg, p, sizeof(*pg));
	memcpy(pn, p + sizeof(*pg), 4);
	if (*pn > 64 || len < sizeof(*pg) + 4 + *pn * 4u) {
		free(buf);
		return -EPROTO;
	}
	memcpy(pids, p + sizeof(*pg) + 4, *pn * 4u);
	p += sizeof(*pg) + 4 + *pn * 4u;
	rc = !connect ? 0 : kvr_peer_connect(s->x, p, len - (size_t)(p - (char *)buf), &s->peer, err,
			      sizeof(err));
	if (rc)
		fprintf(stderr, "connect: %s\n", err);
	free(buf);
	return rc;
}

static int tcp_listen(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1))
		return -1;
	return fd;
}

static int tcp_connect(const char *hostport)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	char host[128];
	const char *c = strrchr(hostport, ':');
	int fd, tries;

	if (!c || (size_t)(c - hostport) >= sizeof(host))
		return -1;
	memcpy(host, hostport, (size_t)(c - hostport));
	host[c - hostport] = 0;
	if (getaddrinfo(host, c + 1, &hints, &ai))
		return -1;
	for (tries = 0; tries < 100; tries++) {	/* the server may still be starting */
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		close(fd);
		fd = -1;
		usleep(50000);
	}
	freeaddrinfo(ai);
	return fd;
}

static int serve(int port)
{
	struct side s = { 0 };
	struct kvd_kv_geom pg;
	uint32_t pids[64], pn;
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	int lfd, sock, rc;

	rc = setup(&s, 8u << 20, 64);
	if (rc) {
		fprintf(stderr, "serve: arena: %s\n", strerror(-rc));
		return 2;
	}
	fill(&s, 1);
	lfd = tcp_listen(port);
	if (lfd < 0)
		return 2;
	printf("listening %d backend %s\n", port,
	       kva_dev_backend(s.dev) == KVA_BACKEND_KERNEL ? "kernel" : "memfd");
	fflush(stdout);
	sock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (sock < 0 || send_info(sock, &s) || recv_info(sock, &s, &pg, pids, &pn, 0))
		return 2;
	for (;;) {
		struct pollfd pfd[2] = { { sock, POLLIN, 0 }, { kvr_xfer_fd(s.x), POLLIN, 0 } };

		kvr_xfer_progress(s.x);	/* the client's puts and gets land here */
		if (poll(pfd, 2, 100) <= 0 || !(pfd[0].revents & (POLLIN | POLLHUP)))
			continue;
		rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL);
		if (rc <= 0 || type == MSG_BYE)
			break;
		if (type == MSG_VERIFY) {
			const struct range *r = buf;
			uint32_t nr = (uint32_t)(len / sizeof(*r));
			int32_t bad = 0;

			/* every byte: pushed ranges hold the client's pattern,
			 * all else the server's own */
			for (uint32_t i = 0; i < s.n; i++) {
				const uint8_t *b = (uint8_t *)s.base + kvr_block_off(&s.g, s.ids[i]);

				for (uint64_t o = 0; o < s.g.kv_block_bytes; o++) {
					uint8_t want = pattern(1, i, o);

					for (uint32_t k = 0; k < nr; k++)
						if (r[k].block == i && in_range(&s.g, o, r[k].p0, r[k].p1))
							want = pattern(r[k].seed & 0xffff, r[k].seed >> 16, o);
					if (b[o] != want)
						bad++;
				}
			}
			if (kvd_msg_send(sock, MSG_VERDICT, &bad, sizeof(bad), -1))
				break;
		}
	}
	free(buf);
	close(sock);
	close(lfd);
	teardown(&s);
	return 0;
}

static int client(const char *hostport, int stream)
{
	struct side s = { 0 };
	struct kvd_kv_geom pg, bad;
	uint32_t pids[64], pn, i;
	struct range r[8];
	uint32_t nr = 0;
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	int sock, rc;

	rc = setup(&s, 16u << 20, 64);
	if (rc) {
		fprintf(stderr, "client: arena: %s\n", strerror(-rc));
		return 2;
	}
	fill(&s, 2);
	sock = tcp_connect(hostport);
	if (sock < 0 || recv_info(sock, &s, &pg, pids, &pn, 1) || send_info(sock, &s)) {
		fprintf(stderr, "client: cannot reach %s\n", hostport);
		return 2;
	}
	CHECK(kvr_geom_compatible(&s.g, &pg), "geometries differ");

	if (stream) {
		/* push 2 MiB runs (a whole page of blocks) until the peer dies */
		uint64_t sent = 0;
		struct timespec t0, t1;

		printf("streaming\n");
		fflush(stdout);
		for (;;) {
			rc = kvr_peer_put(s.peer, 0, 0, 2u << 20);
			if (!rc)
				rc = kvr_peer_flush(s.peer, 3000, NULL, NULL);
			if (rc)
				break;
			sent += 2u << 20;
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		rc = kvr_peer_put(s.peer, 0, 0, 4096);
		if (!rc)
			rc = kvr_peer_flush(s.peer, 5000, NULL, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		CHECK(rc == -ECONNRESET, "after the failure, a put fails at once (%d)", rc);
		printf("stream ended after %llu MiB: peer failure seen\n",
		       (unsigned long long)(sent >> 20));
		teardown(&s);
		return fails ? 1 : 0;
	}

	/* pull: 8 whole blocks, then positions [3, 11) of a ninth */
	for (i = 0; i < 8; i++)
		CHECK(!kvr_move_range(s.peer, KVR_PULL, &s.g, s.ids[i], &pg, pids[i], 0, 16),
		      "pull block %u", i);
	CHECK(!kvr_move_range(s.peer, KVR_PULL, &s.g, s.ids[8], &pg, pids[8], 3, 11),
	      "pull range");
	rc = kvr_peer_flush(s.peer, flush_ms(), NULL, NULL);
	CHECK(!rc, "flush after pulls: %d", rc);
	for (i = 0; i < 10; i++) {
		const uint8_t *b = (uint8_t *)s.base + kvr_block_off(&s.g, s.ids[i]);
		uint32_t badb = 0;

		for (uint64_t o = 0; o < s.g.kv_block_bytes; o++) {
			uint8_t want = i < 8 || (i == 8 && in_range(&s.g, o, 3, 11)) ?
					       pattern(1, i, o) : pattern(2, i, o);

			badb += b[o] != want;
		}
		CHECK(!badb, "pulled block %u: %u bytes wrong", i, badb);
	}

	/* push positions [5, 50) of client blocks 20..23 into server blocks
	 * 20..23, and a whole block 30 -> 31 */
	CHECK(!kvr_move_positions(s.peer, KVR_PUSH, &s.g, s.ids + 20, &pg, pids + 20, 5, 50),
	      "push positions");
	CHECK(!kvr_move_range(s.peer, KVR_PUSH, &s.g, s.ids[30], &pg, pids[31], 0, 16),
	      "push block");
	rc = kvr_peer_flush(s.peer, flush_ms(), NULL, NULL);
	CHECK(!rc, "flush after pushes: %d", rc);
	r[nr++] = (struct range){ 20, 5, 16, 2 | 20u << 16 };
	r[nr++] = (struct range){ 21, 0, 16, 2 | 21u << 16 };
	r[nr++] = (struct range){ 22, 0, 16, 2 | 22u << 16 };
	r[nr++] = (struct range){ 23, 0, 2, 2 | 23u << 16 };
	r[nr++] = (struct range){ 31, 0, 16, 2 | 30u << 16 };
	CHECK(!kvd_msg_send(sock, MSG_VERIFY, r, nr * sizeof(r[0]), -1), "send verify");
	rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL);
	CHECK(rc == 1 && type == MSG_VERDICT && len == 4 && !*(int32_t *)buf,
	      "server: pushed ranges landed exactly (%d bytes wrong)",
	      rc == 1 && len == 4 ? *(int32_t *)buf : -1);

	/* bounds and layouts are refused before anything is issued */
	CHECK(kvr_peer_put(s.peer, 0, pg.arena_bytes - 4096, 8192) == -ERANGE,
	      "put past the peer's arena");
	CHECK(kvr_peer_get(s.peer, s.g.arena_bytes, 0, 1) == -ERANGE,
	      "get past the local arena");
	CHECK(kvr_peer_put(s.peer, 0, 0, 0) == -ERANGE, "empty put");
	bad = pg;
	bad.head_dim = 32;
	CHECK(kvr_move_range(s.peer, KVR_PUSH, &s.g, s.ids[0], &bad, pids[0], 0, 16) == -EINVAL,
	      "mismatched layout");
	CHECK(kvr_move_range(s.peer, KVR_PUSH, &s.g, s.ids[0], &pg, pg.blocks_total, 0, 16) ==
		      -EINVAL, "block id past the peer's arena");
	CHECK(kvr_move_range(s.peer, KVR_PUSH, &s.g, s.ids[0], &pg, pids[0], 4, 4) == -EINVAL,
	      "empty range");
	CHECK(!kvr_peer_flush(s.peer, flush_ms(), NULL, NULL), "nothing was issued by refusals");
	kvd_msg_send(sock, MSG_BYE, NULL, 0, -1);
	free(buf);
	close(sock);
	teardown(&s);
	printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "serve"))
		return serve(atoi(argv[2]));
	if (argc >= 3 && !strcmp(argv[1], "client"))
		return client(argv[2], argc >= 4 && !strcmp(argv[3], "--stream"));
	fprintf(stderr, "usage: test_xfer serve PORT | client HOST:PORT [--stream]\n");
	return 2;
}
