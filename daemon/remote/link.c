// SPDX-License-Identifier: MIT
/*
 * link.c - `kvarenad --remote-link`: the orchestrator's end of one remote
 * worker. The orchestrator starts it in a worker slot exactly as it
 * starts a local worker (fd 3: the socketpair, HELLO with the arena's
 * data fd; lease, restart and SIGKILL as for any worker) and passes the
 * remote listening socket as fd 4. The link
 *
 *   1. maps the arena, waits for a remote host on fd 4, completes the
 *      TLS-PSK handshake (chan.h), checks its JOIN (version, the model
 *      fingerprint, the role it takes), and only then creates its UCX
 *      worker with the arena registered (xfer.h): no UCX port exists
 *      before a peer has proven the key, and none outlives the link;
 *   2. answers WELCOME (the HELLO, limits, its UCX blob), forwards the
 *      host's READY to the orchestrator;
 *   3. relays STEP to the host and RESULT back, progressing UCX all the
 *      while: over TCP the host's one-sided puts into the arena and gets
 *      from it are carried out in this process;
 *   4. exits when either side goes (EOF, a protocol error, or the host
 *      silent past timeout_ms). The orchestrator then resends the step
 *      and starts a new link, which the host joins again.
 *
 * Why a process and not a thread of the orchestrator: over TCP, UCX's
 * software RMA writes wherever a connected peer says (it does not check
 * addresses against registrations); here that is this process, which
 * holds the arena mapping and nothing else of the orchestrator's
 * (Documentation/remote.md, "Security"). And when the orchestrator kills
 * it (a lease past due), nothing more can land in the arena through it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "chan.h"
#include "log.h"
#include "remote.h"
#include "rproto.h"
#include "xfer.h"

#define ORCH_FD 3
#define LISTEN_FD 4

struct link {
	const char *model, *secret, *tls, *devices;
	uint32_t hb_ms, timeout_ms, max_ctx, max_batch;
	char tool_open[32], tool_close[32];
	struct kvd_hello hello;
	void *arena;
	struct kvr_psk psk;
	struct kvr_model_id mid;
	struct kvr_chan *ch;
	struct kvr_xfer *x;
	void *buf;
	size_t cap;
	uint64_t last_seen_ns, last_ping_ns, last_refusal_log_ns;
	char peer[80];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int ready_error(int status, const char *fmt, const char *arg)
{
	struct kvd_ready rd = { 0 };

	rd.status = status;
	rd.pid = (uint32_t)getpid();
	snprintf(rd.backend, sizeof(rd.backend), "remote");
	snprintf(rd.message, sizeof(rd.message), fmt, arg);
	kvd_log(KVD_LOG_ERR, "remote", "link: %s", rd.message);
	kvd_msg_send(ORCH_FD, KVD_MSG_READY, &rd, sizeof(rd), -1);
	return 1;
}

/* HELLO from the orchestrator: the role, the geometry, the arena fd. */
static int hello(struct link *l)
{
	uint16_t type;
	size_t len;
	int fd = -1, rc;

	rc = kvd_msg_recv(ORCH_FD, &type, &l->buf, &l->cap, &len, &fd);
	if (rc <= 0)
		return -EPIPE;
	if (type != KVD_MSG_HELLO || len != sizeof(l->hello) || fd < 0) {
		if (fd >= 0)
			close(fd);
		return ready_error(-EPROTO, "%s", "expected HELLO with the arena fd") ? -EPROTO : 0;
	}
	memcpy(&l->hello, l->buf, sizeof(l->hello));
	if (l->hello.copy_mode) {
		close(fd);
		ready_error(-EOPNOTSUPP, "%s", "a remote worker needs [kv] handoff = arena: "
			    "copy mode sends KV through the orchestrator, not between arenas");
		return -EOPNOTSUPP;
	}
	if (!l->hello.geom.arena_bytes || l->hello.geom.arena_bytes % (2u << 20)) {
		close(fd);
		ready_error(-EINVAL, "%s", "bad arena geometry");
		return -EINVAL;
	}
	l->arena = mmap(NULL, l->hello.geom.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
			fd, 0);
	close(fd);
	if (l->arena == MAP_FAILED) {
		l->arena = NULL;
		ready_error(-errno, "mmap of the arena: %s", strerror(errno));
		return -ENOMEM;
	}
	return 0;
}

static void refuse(struct link *l, const char *why)
{
	struct kvr_refuse r = { { 0 } };
	struct kvd_iov iov = { &r, sizeof(r) };

	snprintf(r.why, sizeof(r.why), "%s", why);
	kvr_chan_send(l->ch, KVR_MSG_REFUSE, &iov, 1);
	kvd_log(KVD_LOG_WARN, "remote", "refused worker host %s: %s", l->peer, why);
}

/* A joined host that fits, with the link's UCX ready: 0. Otherwise the
 * connection is dropped and the link goes on waiting. */
static int take_join(struct link *l)
{
	struct kvr_join j;
	struct kvr_welcome w = { 0 };
	struct kvd_iov iov[2];
	struct kvr_xfer_params xp = { 0 };
	uint32_t role_bit = 1u << (l->hello.role - 1);
	char err[256];
	void *blob = NULL;
	size_t blen = 0, len;
	uint16_t type;
	int rc;

	rc = kvr_chan_recv(l->ch, &type, &l->buf, &l->cap, &len);
	if (rc != 1 || type != KVR_MSG_JOIN || len != sizeof(j)) {
		kvd_log(KVD_LOG_WARN, "remote", "worker host %s: no JOIN", l->peer);
		return -EPROTO;
	}
	memcpy(&j, l->buf, sizeof(j));
	j.host[sizeof(j.host) - 1] = 0;
	if (j.version != KVR_REMOTE_VERSION) {
		refuse(l, "remote protocol version differs: update both hosts");
		return -EPROTO;
	}
	if (j.model.size != l->mid.size || memcmp(j.model.digest, l->mid.digest, 32)) {
		refuse(l, "its model file differs from the orchestrator's");
		return -EINVAL;
	}
	if (!(j.roles & role_bit)) {
		refuse(l, l->hello.role == KVD_ROLE_PREFILL ?
				  "this slot is a prefill worker; the host takes decode only" :
				  "this slot is a decode worker; the host takes prefill only");
		return -EINVAL;
	}
	xp.base = l->arena;
	xp.len = l->hello.geom.arena_bytes;
	xp.tls = l->tls;
	xp.net_devices = l->devices;
	rc = kvr_xfer_create(&xp, &l->x, err, sizeof(err));
	if (!rc)
		rc = kvr_xfer_info(l->x, &blob, &blen);
	if (rc) {
		kvd_log(KVD_LOG_ERR, "remote", "UCX for worker host %s: %s", l->peer,
			rc == -ENOMEM ? "out of memory" : err);
		refuse(l, "the orchestrator cannot set up UCX (see its log)");
		return rc;
	}
	w.hello = l->hello;
	w.model = l->mid;
	w.max_ctx = l->max_ctx;
	w.max_batch = l->max_batch;
	w.heartbeat_ms = l->hb_ms;
	w.timeout_ms = l->timeout_ms;
	memcpy(w.tool_open, l->tool_open, sizeof(w.tool_open));
	memcpy(w.tool_close, l->tool_close, sizeof(w.tool_close));
	w.blob_len = (uint32_t)blen;
	iov[0] = (struct kvd_iov){ &w, sizeof(w) };
	iov[1] = (struct kvd_iov){ blob, blen };
	rc = kvr_chan_send(l->ch, KVR_MSG_WELCOME, iov, 2);
	free(blob);
	if (rc)
		return rc;
	kvd_log(KVD_LOG_INFO, "remote", "worker host %s (%s, pid %u) joined as %s worker; "
		"UCX transports %s", l->peer, j.host, j.pid,
		l->hello.role == KVD_ROLE_PREFILL ? "prefill" : "decode",
		kvr_xfer_transports(l->x));
	return 0;
}

static void drop_peer(struct link *l)
{
	kvr_xfer_destroy(l->x);
	l->x = NULL;
	kvr_chan_close(l->ch);
	l->ch = NULL;
}

/* Waits for a host to join: 0 with l->ch and l->x set, or -EPIPE when the
 * orchestrator went away. */
static int wait_join(struct link *l)
{
	for (;;) {
		struct pollfd p[2] = { { ORCH_FD, POLLIN, 0 }, { LISTEN_FD, POLLIN, 0 } };
		char err[256];
		int rc;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -EPIPE;
		if (p[0].revents)
			return -EPIPE;	/* nothing but EOF comes before READY */
		if (!(p[1].revents & POLLIN))
			continue;
		rc = kvr_chan_accept(LISTEN_FD, &l->psk, 5000, (int)l->timeout_ms, &l->ch, err,
				     sizeof(err));
		if (rc) {
			uint64_t now = now_ns();

			/* a scanner or a wrong key: one line a second at most */
			if (now - l->last_refusal_log_ns > 1000000000ull) {
				kvd_log(KVD_LOG_WARN, "remote", "%s", err);
				l->last_refusal_log_ns = now;
			}
			continue;
		}
		snprintf(l->peer, sizeof(l->peer), "%s", kvr_chan_peer(l->ch));
		if (!take_join(l))
			return 0;
		drop_peer(l);
	}
}

/* The host's READY, forwarded with its name in the backend field. The
 * worker is not progressed before it: the host connects meanwhile
 * (kvr_peer_connect, xfer.h). */
static int forward_ready(struct link *l)
{
	uint64_t t0 = now_ns();

	for (;;) {
		struct pollfd p[2] = { { ORCH_FD, POLLIN, 0 }, { kvr_chan_fd(l->ch), POLLIN, 0 } };
		struct kvd_ready rd;
		uint16_t type;
		size_t len;
		char host[80];
		int rc;

		if (!kvr_chan_pending(l->ch) && poll(p, 2, 1000) < 0 && errno != EINTR)
			return -EIO;
		if (p[0].revents)
			return -EPIPE;
		/* the host loads its model and starts its worker: up to 10 min */
		if (now_ns() - t0 > 600000000000ull)
			return -ETIMEDOUT;
		if (!kvr_chan_pending(l->ch) && !(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		rc = kvr_chan_recv(l->ch, &type, &l->buf, &l->cap, &len);
		if (rc != 1)
			return -ECONNRESET;
		if (type == KVR_MSG_PING) {
			struct kvd_iov iov = { l->buf, len };

			if (kvr_chan_send(l->ch, KVR_MSG_PONG, &iov, 1))
				return -ECONNRESET;
			continue;
		}
		if (type != KVD_MSG_READY || len != sizeof(rd))
			return -EPROTO;
		memcpy(&rd, l->buf, sizeof(rd));
		rd.backend[sizeof(rd.backend) - 1] = 0;
		rd.message[sizeof(rd.message) - 1] = 0;
		snprintf(host, sizeof(host), "%s", l->peer);
		if (strrchr(host, ':'))
			*strrchr(host, ':') = 0;
		{
			char name[sizeof(rd.backend)];

			snprintf(name, sizeof(name), "%.12s@%.18s", rd.backend, host);
			memcpy(rd.backend, name, sizeof(name));
		}
		rd.pid = (uint32_t)getpid();
		if (rd.status)
			kvd_log(KVD_LOG_ERR, "remote", "worker host %s cannot serve: %s", l->peer,
				rd.message);
		l->last_seen_ns = now_ns();
		return kvd_msg_send(ORCH_FD, KVD_MSG_READY, &rd, sizeof(rd), -1) ? -EPIPE :
		       rd.status ? -EIO : 0;
	}
}

/* STEP down, RESULT up, UCX progressed, heartbeats both ways. Returns when
 * either side is gone. */
static int relay(struct link *l)
{
	uint64_t hb = (uint64_t)l->hb_ms * 1000000ull, to = (uint64_t)l->timeout_ms * 1000000ull;

	for (;;) {
		struct pollfd p[3] = { { ORCH_FD, POLLIN, 0 },
				       { kvr_chan_fd(l->ch), POLLIN, 0 },
				       { kvr_xfer_fd(l->x), POLLIN, 0 } };
		uint64_t now;
		uint16_t type;
		size_t len;
		int rc;

		kvr_xfer_progress(l->x);
		if (!kvr_chan_pending(l->ch) &&
		    poll(p, 3, (int)(l->hb_ms / 2 ? l->hb_ms / 2 : 1)) < 0 && errno != EINTR)
			return -EIO;
		kvr_xfer_progress(l->x);
		now = now_ns();
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			rc = kvd_msg_recv(ORCH_FD, &type, &l->buf, &l->cap, &len, NULL);
			if (rc <= 0)
				return 0;	/* the orchestrator stops us */
			if (type != KVD_MSG_STEP) {
				kvd_log(KVD_LOG_ERR, "remote", "link: unexpected message %u", type);
				return -EPROTO;
			}
			struct kvd_iov iov = { l->buf, len };

			if (kvr_chan_send(l->ch, KVD_MSG_STEP, &iov, 1)) {
				kvd_log(KVD_LOG_WARN, "remote", "worker host %s: send failed",
					l->peer);
				return -ECONNRESET;
			}
		}
		if (kvr_chan_pending(l->ch) || (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			rc = kvr_chan_recv(l->ch, &type, &l->buf, &l->cap, &len);
			if (rc != 1) {
				kvd_log(KVD_LOG_WARN, "remote", "worker host %s gone: %s", l->peer,
					rc ? strerror(-rc) : "closed");
				return -ECONNRESET;
			}
			l->last_seen_ns = now;
			if (type == KVD_MSG_RESULT) {
				if (kvd_msg_send(ORCH_FD, KVD_MSG_RESULT, l->buf, len, -1))
					return 0;
			} else if (type == KVR_MSG_PING) {
				struct kvd_iov iov = { l->buf, len };

				if (kvr_chan_send(l->ch, KVR_MSG_PONG, &iov, 1))
					return -ECONNRESET;
			} else if (type != KVR_MSG_PONG) {
				kvd_log(KVD_LOG_ERR, "remote", "worker host %s: unexpected message %u",
					l->peer, type);
				return -EPROTO;
			}
		}
		if (now - l->last_ping_ns >= hb) {
			struct kvd_iov iov = { &now, sizeof(now) };

			l->last_ping_ns = now;
			if (kvr_chan_send(l->ch, KVR_MSG_PING, &iov, 1))
				return -ECONNRESET;
		}
		if (now - l->last_seen_ns > to) {
			kvd_log(KVD_LOG_WARN, "remote", "worker host %s silent for %u ms: dropped",
				l->peer, l->timeout_ms);
			return -ETIMEDOUT;
		}
	}
}

int kvr_link_main(int argc, char **argv)
{
	struct link l = { .hb_ms = 1000, .timeout_ms = 5000, .max_ctx = 0, .max_batch = 16 };
	char err[256];
	int i, rc;

	snprintf(l.tool_open, sizeof(l.tool_open), "<tool_call>");
	snprintf(l.tool_close, sizeof(l.tool_close), "</tool_call>");
	for (i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--model"))
			l.model = v;
		else if (!strcmp(k, "--secret-file"))
			l.secret = v;
		else if (!strcmp(k, "--ucx-tls"))
			l.tls = *v ? v : NULL;
		else if (!strcmp(k, "--ucx-devices"))
			l.devices = *v ? v : NULL;
		else if (!strcmp(k, "--heartbeat-ms"))
			l.hb_ms = (uint32_t)atoi(v);
		else if (!strcmp(k, "--timeout-ms"))
			l.timeout_ms = (uint32_t)atoi(v);
		else if (!strcmp(k, "--max-ctx"))
			l.max_ctx = (uint32_t)atoi(v);
		else if (!strcmp(k, "--max-batch"))
			l.max_batch = (uint32_t)atoi(v);
		else if (!strcmp(k, "--tool-open"))
			snprintf(l.tool_open, sizeof(l.tool_open), "%s", v);
		else if (!strcmp(k, "--tool-close"))
			snprintf(l.tool_close, sizeof(l.tool_close), "%s", v);
		else if (!strcmp(k, "--log-level"))
			kvd_log_set_level((enum kvd_log_level)atoi(v));
	}
	/* die with the orchestrator, as its workers do */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	if (!l.model || !l.secret || !l.hb_ms || l.timeout_ms < l.hb_ms)
		return 2;
	rc = hello(&l);
	if (rc)
		goto out;
	rc = kvr_psk_load(l.secret, &l.psk, err, sizeof(err));
	if (rc) {
		ready_error(rc, "%s", err);
		goto out;
	}
	rc = kvr_model_id(l.model, &l.mid);
	if (rc) {
		ready_error(rc, "model fingerprint: %s", strerror(-rc));
		goto out;
	}
	rc = wait_join(&l);
	if (!rc)
		rc = forward_ready(&l);
	if (!rc)
		rc = relay(&l);
out:
	drop_peer(&l);
	if (l.arena)
		munmap(l.arena, l.hello.geom.arena_bytes);
	free(l.buf);
	return rc == -EPIPE || !rc ? 0 : 1;
}
