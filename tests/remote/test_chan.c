// SPDX-License-Identifier: MIT
/*
 * test_chan.c - the authenticated control channel (daemon/remote/chan.h)
 * on loopback: the right key talks (messages of 0 bytes to 8 MiB, types
 * kept); a wrong key, a plaintext client, a silent client and a client
 * that closes at once are refused without a message read, and the
 * listener goes on accepting; after the handshake, a header with a bad
 * magic or a length over KVD_MSG_MAX is refused, a peer that stalls
 * mid-message times out; key files that are short, missing, or readable
 * by others are refused.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chan.h"

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; fprintf(stderr, "FAIL %s:%d: ", \
	__FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static char dir[] = "/tmp/kvr-chan-XXXXXX";
static char addr[64];

static void write_key(const char *name, const char *content, mode_t mode)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	fputs(content, f);
	fclose(f);
	chmod(path, mode);
}

static int load(const char *name, struct kvr_psk *k, char *err, size_t errlen)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return kvr_psk_load(path, k, err, errlen);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The server: accepts `n` connections with key k; for each authenticated
 * one, echoes messages until EOF (type + 1), or runs the refusal checks
 * named by the first message's type (900+). Exits with its failures. */
static int server(int lfd, const struct kvr_psk *k, int n)
{
	char err[256];
	int i;

	for (i = 0; i < n; i++) {
		struct kvr_chan *c;
		void *buf = NULL;
		size_t cap = 0, len;
		uint16_t type;
		int rc;

		rc = kvr_chan_accept(lfd, k, 1500, 1500, &c, err, sizeof(err));
		if (rc) {
			printf("server: refused: %s\n", err);
			continue;
		}
		for (;;) {
			struct kvd_iov iov;

			rc = kvr_chan_recv(c, &type, &buf, &cap, &len);
			if (rc != 1) {
				printf("server: recv ends: %d\n", rc);
				/* the checks the client announced */
				if (rc == -EPROTO || rc == -EMSGSIZE || rc == -ETIMEDOUT)
					printf("server: refused frame %s\n", strerror(-rc));
				break;
			}
			iov.base = buf;
			iov.len = len;
			if (kvr_chan_send(c, (uint16_t)(type + 1), &iov, 1))
				break;
		}
		free(buf);
		kvr_chan_close(c);
	}
	return 0;
}

static int raw_connect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	a.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

int main(void)
{
	struct kvr_psk good, other, k;
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	struct kvr_chan *c;
	struct timespec t0;
	char err[256], path[300];
	void *buf = NULL;
	size_t cap = 0, len;
	uint16_t type;
	int lfd, rc, fd, st;
	pid_t pid;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!mkdtemp(dir))
		return 2;

	/* key files */
	write_key("good", "0123456789abcdef0123456789abcdef0123456789abcdef\n", 0600);
	write_key("other", "fedcba9876543210fedcba9876543210fedcba9876543210\n", 0600);
	write_key("short", "0123456789abcdef\n", 0600);
	write_key("open", "0123456789abcdef0123456789abcdef0123456789abcdef\n", 0644);
	CHECK(!load("good", &good, err, sizeof(err)), "good key: %s", err);
	CHECK(!load("other", &other, err, sizeof(err)), "other key: %s", err);
	CHECK(memcmp(&good, &other, sizeof(good)), "different files, different keys");
	CHECK(load("short", &k, err, sizeof(err)) == -EINVAL && strstr(err, "at least"),
	      "short key refused: %s", err);
	CHECK(load("open", &k, err, sizeof(err)) == -EPERM && strstr(err, "chmod"),
	      "group/world-readable key refused: %s", err);
	CHECK(load("missing", &k, err, sizeof(err)) == -ENOENT, "missing key refused");
	snprintf(path, sizeof(path), "%s", dir);
	CHECK(kvr_psk_load(path, &k, err, sizeof(err)) < 0, "a directory is refused");

	CHECK(kvr_listen("127.0.0.1:70000", &lfd, err, sizeof(err)) == -EINVAL, "bad port");
	CHECK(kvr_listen("nohost", &lfd, err, sizeof(err)) == -EINVAL, "no port");
	rc = kvr_listen("127.0.0.1:0", &lfd, err, sizeof(err));
	CHECK(!rc, "listen: %s", err);
	getsockname(lfd, (struct sockaddr *)&sa, &sl);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));

	pid = fork();
	if (pid == 0)
		_exit(server(lfd, &good, 9));

	/* 1. the right key: messages both ways, 0 bytes to 8 MiB */
	rc = kvr_chan_connect(addr, &good, 3000, 3000, &c, err, sizeof(err));
	CHECK(!rc, "connect with the key: %s", err);
	if (!rc) {
		size_t sizes[] = { 0, 1, 4096, 1u << 20, 8u << 20 };

		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			char *m = malloc(sizes[i] + 1);
			struct kvd_iov iov = { m, sizes[i] };

			for (size_t b = 0; b < sizes[i]; b++)
				m[b] = (char)(b * 7 + i);
			CHECK(!kvr_chan_send(c, (uint16_t)(10 + i), &iov, 1), "send %zu", sizes[i]);
			rc = kvr_chan_recv(c, &type, &buf, &cap, &len);
			CHECK(rc == 1 && type == 11 + i && len == sizes[i] &&
			      (!len || !memcmp(buf, m, len)), "echo of %zu bytes", sizes[i]);
			free(m);
		}
		kvr_chan_close(c);
	}

	/* 2. a wrong key: refused by both ends */
	rc = kvr_chan_connect(addr, &other, 3000, 3000, &c, err, sizeof(err));
	CHECK(rc == -EACCES, "a wrong key is refused (%d: %s)", rc, err);

	/* 3. plaintext: an HTTP request instead of a TLS hello */
	fd = raw_connect();
	CHECK(fd >= 0, "raw connect");
	(void)!write(fd, "GET / HTTP/1.0\r\n\r\n", 18);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	{
		char junk[256];
		ssize_t r = read(fd, junk, sizeof(junk));

		/* a TLS alert at most, never an HTTP answer or our framing */
		CHECK(r <= 0 || (unsigned char)junk[0] == 0x15, "plaintext gets no answer");
	}
	close(fd);

	/* 4. a silent client: the handshake times out (1.5 s), then the
	 * listener serves the next */
	fd = raw_connect();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kvr_chan_connect(addr, &good, 5000, 3000, &c, err, sizeof(err));
	CHECK(!rc, "a good client after a silent one: %s", err);
	CHECK(ms_since(&t0) >= 1000, "the silent one held the listener for its timeout only");
	if (!rc)
		kvr_chan_close(c);
	close(fd);

	/* 5. connect and close at once */
	fd = raw_connect();
	close(fd);

	/* 6. after the handshake: a bad magic is refused */
	rc = kvr_chan_connect(addr, &good, 3000, 3000, &c, err, sizeof(err));
	CHECK(!rc, "connect: %s", err);
	if (!rc) {
		struct kvd_msg_hdr h = { 0x12345678, KVD_PROTO_VERSION, 1, 0, 0 };

		kvr_chan_write(c, &h, sizeof(h));
		rc = kvr_chan_recv(c, &type, &buf, &cap, &len);
		CHECK(rc <= 0, "a bad header ends the connection (%d)", rc);
		kvr_chan_close(c);
	}
	/* 7. ... and a length over KVD_MSG_MAX */
	rc = kvr_chan_connect(addr, &good, 3000, 3000, &c, err, sizeof(err));
	CHECK(!rc, "connect: %s", err);
	if (!rc) {
		struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, 1,
					 KVD_MSG_MAX + 1, 0 };

		kvr_chan_write(c, &h, sizeof(h));
		rc = kvr_chan_recv(c, &type, &buf, &cap, &len);
		CHECK(rc <= 0, "an oversized message ends the connection (%d)", rc);
		kvr_chan_close(c);
	}
	/* 8. a peer stalling mid-message: the server's read times out */
	rc = kvr_chan_connect(addr, &good, 3000, 5000, &c, err, sizeof(err));
	CHECK(!rc, "connect: %s", err);
	if (!rc) {
		struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, 1, 100, 0 };

		kvr_chan_write(c, &h, sizeof(h));
		kvr_chan_write(c, "half", 4);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		rc = kvr_chan_recv(c, &type, &buf, &cap, &len);
		CHECK(rc <= 0 && ms_since(&t0) < 4000,
		      "the server gave up on the stalled message (%d after %ld ms)", rc,
		      ms_since(&t0));
		kvr_chan_close(c);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
	      "server exited cleanly");
	close(lfd);
	free(buf);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	(void)!system(path);
	printf("test_chan: %s (%d failures)\n", fails ? "FAIL" : "PASS", fails);
	return fails ? 1 : 0;
}
