// SPDX-License-Identifier: MIT
/*
 * kvr-bench.c - make bench BENCH=remote, its transfer half: one session's
 * KV moved host to host by the daemon's own transfer engine
 * (daemon/remote/xfer.h, kvmove.h), arena to arena, each side a kvarena
 * arena of its own (the kernel backend when /dev/kvarena opens, else
 * memfd). The session is Llama-3-8B-shaped: 32 layers, 8 KV heads of 128,
 * fp16, 16 tokens a block = 2 MiB blocks; 8192 tokens = 512 blocks = 1 GiB.
 *
 *   kvr-bench serve PORT
 *   kvr-bench push|pull HOST:PORT [-t TOKENS] [-r REPEATS]
 *
 * push: the client's blocks into the server's (what a remote prefill host
 * does), pull: the server's into the client's (a remote decode host's
 * first step). Each repeat sends the block table over the control socket,
 * issues every block as one put/get, flushes (remote completion), and has
 * the server acknowledge; the time covers all of it. Prints
 *   ROW\tremote_kv_<dir>_gbps\t<best GB/s>\tGB/s\t...
 * and one line per repeat.
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

#define MSG_INFO 201
#define MSG_TABLE 202	/* the block table of a repeat */
#define MSG_DONE 203
#define MSG_ACK 204
#define MSG_BYE 205

struct side {
	struct kva_dev *dev;
	struct kva_arena *arena;
	void *base;
	struct kvd_kv_geom g;
	uint64_t sid;
	uint32_t *ids;
	uint32_t n;
	struct kvr_xfer *x;
	struct kvr_peer *peer;
};

static void geom_8b(struct kvd_kv_geom *g, uint32_t blocks)
{
	memset(g, 0, sizeof(*g));
	g->n_layers = 32;
	g->n_kv_heads = 8;
	g->head_dim = 128;
	g->dtype = 1;
	g->block_tokens = 16;
	g->kv_block_bytes = 32u * 2 * 8 * 16 * 128 * 2;	/* 2 MiB */
	g->block_size = g->kv_block_bytes;
	g->blocks_per_page = 1;
	g->blocks_total = blocks;
	g->arena_bytes = (uint64_t)blocks << 21;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int setup(struct side *s, uint32_t blocks)
{
	struct kva_arena_params ap = { .size = sizeof(ap) };
	struct kvr_xfer_params xp = { 0 };
	char err[256];
	int rc;

	geom_8b(&s->g, blocks + 8);
	s->ids = calloc(blocks, sizeof(*s->ids));
	rc = s->ids ? kva_open(KVA_BACKEND_AUTO, &s->dev) : -ENOMEM;
	if (rc)
		return rc;
	ap.bytes = s->g.arena_bytes;
	ap.block_size = s->g.block_size;
	ap.numa_node = KVA_NUMA_ANY;
	ap.flags = KVA_ARENA_MLOCK_TRY;
	rc = kva_arena_new(s->dev, &ap, &s->arena);
	if (!rc)
		rc = kva_arena_map(s->arena, &s->base);
	if (!rc)
		rc = kva_session_open(s->arena, 1, &s->sid);
	if (!rc)
		rc = kva_blocks_alloc(s->arena, s->sid, blocks, s->ids, 0) == (int)blocks ? 0 : -ENOSPC;
	if (rc)
		return rc;
	s->n = blocks;
	/* fault every page in before timing anything */
	memset(s->base, 0x5a, s->g.arena_bytes);
	xp.base = s->base;
	xp.len = s->g.arena_bytes;
	rc = kvr_xfer_create(&xp, &s->x, err, sizeof(err));
	if (rc)
		fprintf(stderr, "xfer: %s\n", err);
	return rc;
}

static int send_info(int sock, struct side *s)
{
	struct kvd_iov iov[3];
	void *blob;
	size_t len;
	int rc = kvr_xfer_info(s->x, &blob, &len);

	if (rc)
		return rc;
	iov[0] = (struct kvd_iov){ &s->g, sizeof(s->g) };
	iov[1] = (struct kvd_iov){ &s->n, sizeof(s->n) };
	iov[2] = (struct kvd_iov){ blob, len };
	rc = kvd_msg_sendv(sock, MSG_INFO, iov, 3);
	free(blob);
	return rc;
}

static int recv_info(int sock, struct side *s, struct kvd_kv_geom *pg, uint32_t *pn)
{
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	char err[256];
	int rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL);

	if (rc <= 0 || type != MSG_INFO || len < sizeof(*pg) + 4) {
		free(buf);
		return -EPROTO;
	}
	memcpy(pg, buf, sizeof(*pg));
	memcpy(pn, (char *)buf + sizeof(*pg), 4);
	rc = kvr_peer_connect(s->x, (char *)buf + sizeof(*pg) + 4, len - sizeof(*pg) - 4,
			      &s->peer, err, sizeof(err));
	if (rc)
		fprintf(stderr, "connect: %s\n", err);
	free(buf);
	return rc;
}

static int serve(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct side s = { 0 };
	struct kvd_kv_geom pg;
	void *buf = NULL;
	size_t cap = 0, len;
	uint32_t pn;
	uint16_t type;
	int one = 1, lfd, sock, rc;

	rc = setup(&s, 512);
	if (rc) {
		fprintf(stderr, "serve: arena: %s\n", strerror(-rc));
		return 2;
	}
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1))
		return 2;
	printf("listening %d backend %s\n", port,
	       kva_dev_backend(s.dev) == KVA_BACKEND_KERNEL ? "kernel" : "memfd");
	fflush(stdout);
	sock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (sock < 0 || send_info(sock, &s) || recv_info(sock, &s, &pg, &pn))
		return 2;
	for (;;) {
		struct pollfd pfd[2] = { { sock, POLLIN, 0 }, { kvr_xfer_fd(s.x), POLLIN, 0 } };

		/* over TCP the client's one-sided puts and gets are carried
		 * out here, as the orchestrator's link does */
		kvr_xfer_progress(s.x);
		if (poll(pfd, 2, 100) <= 0 || !(pfd[0].revents & (POLLIN | POLLHUP)))
			continue;
		rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL);
		if (rc <= 0 || type == MSG_BYE)
			break;
		if (type == MSG_TABLE) {
			/* the table names this side's blocks: check, answer */
			const uint32_t *t = buf;
			int32_t bad = 0;

			for (size_t i = 0; i < len / 4; i++)
				bad += t[i] >= s.g.blocks_total;
			kvd_msg_send(sock, MSG_ACK, &bad, sizeof(bad), -1);
		} else if (type == MSG_DONE) {
			kvd_msg_send(sock, MSG_ACK, NULL, 0, -1);
		}
	}
	free(buf);
	close(sock);
	close(lfd);
	return 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int client(const char *hostport, int pull, uint32_t tokens, int repeats)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	struct side s = { 0 };
	struct kvd_kv_geom pg;
	uint32_t pn, nb = tokens / 16;
	char host[128];
	const char *c = strrchr(hostport, ':');
	double *gbps = calloc((size_t)repeats, sizeof(double));
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	int sock = -1, one = 1, rc, r;

	if (!c || !gbps || nb == 0 || nb > 512)
		return 2;
	rc = setup(&s, 512);
	if (rc) {
		fprintf(stderr, "client: arena: %s\n", strerror(-rc));
		return 2;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(c - hostport), hostport);
	if (getaddrinfo(host, c + 1, &hints, &ai))
		return 2;
	for (r = 0; r < 100; r++) {
		sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (!connect(sock, ai->ai_addr, ai->ai_addrlen))
			break;
		close(sock);
		sock = -1;
		usleep(100000);
	}
	freeaddrinfo(ai);
	if (sock < 0)
		return 2;
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (recv_info(sock, &s, &pg, &pn) || send_info(sock, &s) || pn < nb)
		return 2;
	for (r = 0; r < repeats; r++) {
		double t0 = now_s(), dt;

		rc = kvd_msg_send(sock, MSG_TABLE, s.ids, nb * 4u, -1);	/* the table alongside */
		if (!rc)
			rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL) == 1 && len == 4 &&
			     !*(int32_t *)buf ? 0 : -EPROTO;
		if (!rc)
			rc = kvr_move_positions(s.peer, pull ? KVR_PULL : KVR_PUSH, &s.g, s.ids, &pg,
						s.ids, 0, nb * 16);
		if (!rc)
			rc = kvr_peer_flush(s.peer, 120000, NULL, NULL);
		if (!rc)
			rc = kvd_msg_send(sock, MSG_DONE, NULL, 0, -1);
		if (!rc)
			rc = kvd_msg_recv(sock, &type, &buf, &cap, &len, NULL) == 1 ? 0 : -EPROTO;
		if (rc) {
			fprintf(stderr, "repeat %d: %s\n", r, strerror(-rc));
			return 1;
		}
		dt = now_s() - t0;
		gbps[r] = (double)nb * s.g.kv_block_bytes / dt / 1e9;
		printf("%s %u tokens (%u blocks, %.0f MiB): %.3f s, %.3f GB/s\n",
		       pull ? "pull" : "push", nb * 16, nb,
		       (double)nb * s.g.kv_block_bytes / (1 << 20), dt, gbps[r]);
	}
	kvd_msg_send(sock, MSG_BYE, NULL, 0, -1);
	qsort(gbps, (size_t)repeats, sizeof(double), cmp_d);
	printf("ROW\tremote_kv_%s_gbps\t%.3f\tGB/s\tmedian\t%.3f\t-\n", pull ? "pull" : "push",
	       gbps[repeats - 1], gbps[repeats / 2]);
	free(buf);
	free(gbps);
	close(sock);
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t tokens = 8192;
	int repeats = 5, i;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-t"))
			tokens = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-r"))
			repeats = atoi(argv[i + 1]);
	}
	if (repeats < 1)
		repeats = 1;
	if (argc >= 3 && !strcmp(argv[1], "serve"))
		return serve(atoi(argv[2]));
	if (argc >= 3 && (!strcmp(argv[1], "push") || !strcmp(argv[1], "pull")))
		return client(argv[2], !strcmp(argv[1], "pull"), tokens, repeats);
	fprintf(stderr, "usage: kvr-bench serve PORT | push|pull HOST:PORT [-t TOKENS] "
		"[-r REPEATS]\n");
	return 2;
}
