// SPDX-License-Identifier: MIT
/*
 * rworker.c - `kvarenad --worker-of HOST:PORT`: a remote worker host. It
 * owns a kvarena arena of its own (kernel or memfd backend) and one stage
 * worker process on it (the same `kvarenad --worker` the orchestrator
 * runs locally), joins the orchestrator over the authenticated channel
 * (chan.h), and serves the orchestrator's steps, which name blocks of the
 * ORCHESTRATOR's arena:
 *
 *   for each sequence: blocks of this arena stand in for the step's
 *   blocks; positions [0, n_kv) come from the orchestrator's blocks by
 *   one-sided UCX gets (a decode sequence keeps its blocks here between
 *   steps, a "mirror", and fetches only what another worker appended
 *   meanwhile); the step goes to the local worker with this arena's block
 *   ids; the positions it wrote go back into the orchestrator's blocks by
 *   UCX puts; only when they have landed (flushed) does the RESULT go to
 *   the orchestrator. So the orchestrator's arena always holds every
 *   position it counts as written, and a host that vanishes costs a
 *   resent step, never a wrong token.
 *
 * Leases on this side: a step's blocks are freed only after the local
 * worker answered (or was killed and reaped) and every UCX operation on
 * them completed or the endpoint was force-closed. When the orchestrator
 * is gone (channel closed, heartbeats missing, a transfer failing) every
 * block goes back and the host joins again, after a back-off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chan.h"
#include "kv_arena.h"
#include "kvengine.h"
#include "kvmove.h"
#include "log.h"
#include "remote.h"
#include "rproto.h"
#include "worker.h"
#include "xfer.h"

#define MAX_MIRRORS 4096

/* SIGTERM / SIGINT: leave the orchestrator cleanly, give every block back */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* A decode sequence's KV kept here between its steps. */
struct mirror {
	uint64_t seq_id;
	uint64_t sid;			/* its kvarena session */
	uint32_t *btab, *atab;		/* this arena's ids, the orchestrator's */
	uint32_t n_blocks, cap;
	uint32_t n_valid;		/* positions equal to the orchestrator's */
	uint64_t used;
	int in_step;
};

/* One sequence of the step being served. */
struct seqwork {
	struct kvd_step_seq sq;
	char *ids;			/* in the message copy: A's ids, then ours */
	uint32_t *atab;			/* A's ids, saved */
	uint32_t *btab;			/* ours */
	struct mirror *m;		/* decode */
	uint64_t sid;			/* prefill: the step's own session */
	int has_sid;
};

struct rw {
	/* options */
	const char *orch, *model_path, *secret, *worker_backend, *backend_options;
	const char *tls, *devices, *kv_backend;
	uint32_t kv_blocks, threads, roles, retry_ms;
	int once;
	/* this host */
	char self[PATH_MAX], host[64];
	struct kvr_psk psk;
	struct kvr_model_id mid;
	struct kve_model *model;
	struct kve_arena_kv *kv;
	struct kva_arena *arena;
	void *base;
	struct kvd_kv_geom bg;
	int data_fd;
	struct kvr_xfer *x;
	/* its stage worker */
	pid_t wpid;
	int wsock;
	uint32_t wrole, wvocab, w_ctx, w_batch;
	char wbackend[32], w_open[32], w_close[32];
	/* the session with an orchestrator */
	struct kvr_chan *ch;
	struct kvr_peer *peer;
	struct kvr_welcome wel;
	struct kvd_kv_geom ag;
	uint64_t last_seen_ns, last_ping_ns;
	struct mirror **mirrors;	/* MAX_MIRRORS slots; entries stay put */
	uint32_t n_mirrors;
	uint64_t clock;
	void *rx, *wrx;
	size_t rx_cap, wrx_cap;
	char *step;
	size_t step_cap;
	struct queued *queue;		/* steps waiting for the one running */
	uint64_t steps, pulled, pushed;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *role_name(uint32_t role)
{
	return role == KVD_ROLE_PREFILL ? "prefill" : "decode";
}

/* ---- the local stage worker ------------------------------------------ */

static void worker_stop(struct rw *r)
{
	int st;

	if (r->wsock >= 0)
		close(r->wsock);
	r->wsock = -1;
	if (r->wpid > 0) {
		kill(r->wpid, SIGKILL);
		waitpid(r->wpid, &st, 0);
	}
	r->wpid = 0;
}

static int worker_start(struct rw *r, uint32_t role)
{
	char threads[16], batch[16], ctx[16];
	struct kvd_hello h = { 0 };
	struct kvd_ready rd;
	uint16_t type;
	size_t len;
	int sv[2], rc;

	if (r->wpid > 0 && r->wrole == role && r->w_ctx == r->wel.max_ctx &&
	    r->w_batch == r->wel.max_batch && !memcmp(r->w_open, r->wel.tool_open, 32) &&
	    !memcmp(r->w_close, r->wel.tool_close, 32))
		return 0;
	worker_stop(r);
	snprintf(threads, sizeof(threads), "%u", r->threads);
	snprintf(batch, sizeof(batch), "%u", r->wel.max_batch);
	snprintf(ctx, sizeof(ctx), "%u", r->wel.max_ctx);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	r->wpid = fork();
	if (r->wpid < 0) {
		rc = -errno;
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (r->wpid == 0) {
		const char *argv[] = { r->self, "--worker", role_name(role), "--model",
				       r->model_path, "--backend", r->worker_backend,
				       "--backend-options", r->backend_options, "--threads",
				       threads, "--max-batch", batch, "--max-ctx", ctx,
				       "--tool-open", r->wel.tool_open, "--tool-close",
				       r->wel.tool_close, NULL };
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (dup2(sv[1], KVD_WORKER_FD) < 0)
			_exit(127);
		close_range(KVD_WORKER_FD + 1, ~0u, 0);
		execv(r->self, (char *const *)argv);
		_exit(127);
	}
	close(sv[1]);
	r->wsock = sv[0];
	r->wrole = role;
	h.role = role;
	h.geom = r->bg;
	rc = kvd_msg_send(r->wsock, KVD_MSG_HELLO, &h, sizeof(h), r->data_fd);
	if (!rc) {
		rc = kvd_msg_recv(r->wsock, &type, &r->wrx, &r->wrx_cap, &len, NULL);
		rc = rc <= 0 ? -EPIPE : type != KVD_MSG_READY || len != sizeof(rd) ? -EPROTO : 0;
	}
	if (!rc) {
		memcpy(&rd, r->wrx, sizeof(rd));
		rd.message[sizeof(rd.message) - 1] = 0;
		rd.backend[sizeof(rd.backend) - 1] = 0;
		if (rd.status) {
			kvd_log(KVD_LOG_ERR, "remote", "local %s worker cannot serve: %s",
				role_name(role), rd.message);
			rc = rd.status;
		}
		r->wvocab = rd.vocab;
		snprintf(r->wbackend, sizeof(r->wbackend), "%s", rd.backend);
	}
	if (rc) {
		worker_stop(r);
		return rc;
	}
	r->w_ctx = r->wel.max_ctx;
	r->w_batch = r->wel.max_batch;
	memcpy(r->w_open, r->wel.tool_open, 32);
	memcpy(r->w_close, r->wel.tool_close, 32);
	kvd_log(KVD_LOG_INFO, "remote", "local %s worker ready: pid %d, backend %s",
		role_name(role), (int)r->wpid, r->wbackend);
	return 0;
}

/* ---- this host's arena -------------------------------------------------- */

static void geom_from(struct kvd_kv_geom *g, const struct kve_arena_geom *e)
{
	memset(g, 0, sizeof(*g));
	g->arena_bytes = e->arena_bytes;
	g->block_size = e->block_size;
	g->blocks_per_page = e->blocks_per_page;
	g->blocks_total = e->blocks_total;
	g->block_tokens = e->block_tokens;
	g->dtype = e->dtype;
	g->kv_block_bytes = e->kv_block_bytes;
	g->n_layers = e->n_layers;
	g->n_kv_heads = e->n_kv_heads;
	g->head_dim = e->head_dim;
}

static void arena_close(struct rw *r)
{
	kvr_xfer_destroy(r->x);
	r->x = NULL;
	if (r->data_fd >= 0)
		close(r->data_fd);
	r->data_fd = -1;
	kve_arena_kv_destroy(r->kv);
	r->kv = NULL;
	r->arena = NULL;
	r->base = NULL;
}

/* An arena with the orchestrator's block layout, and UCX over it. */
static int arena_ensure(struct rw *r, char *err, size_t errlen)
{
	struct kve_arena_kv_params p = { 0 };
	struct kvr_xfer_params xp = { 0 };
	struct kve_arena_geom eg;
	int rc;

	if (r->kv && r->bg.block_tokens == r->ag.block_tokens && r->bg.dtype == r->ag.dtype)
		return 0;
	worker_stop(r);
	arena_close(r);
	p.backend = !strcmp(r->kv_backend, "kernel") ? KVA_BACKEND_KERNEL :
		    !strcmp(r->kv_backend, "memfd") ? KVA_BACKEND_MEMFD : KVA_BACKEND_AUTO;
	p.n_blocks = r->kv_blocks ? r->kv_blocks : r->ag.blocks_total;
	p.block_tokens = r->ag.block_tokens;
	p.dtype = r->ag.dtype ? KVE_KV_F16 : KVE_KV_F32;
	p.name = "kvarenad-remote";
	rc = kve_arena_kv_create(r->model, &p, &r->kv, err, errlen);
	if (rc)
		return rc;
	r->arena = kve_arena_kv_arena(r->kv);
	kve_arena_kv_geom(r->kv, &eg);
	geom_from(&r->bg, &eg);
	if (!kvr_geom_compatible(&r->bg, &r->ag)) {
		snprintf(err, errlen, "block layouts differ (block %u tokens x %u bytes here, "
			 "%u x %u at the orchestrator)", r->bg.block_tokens, r->bg.kv_block_bytes,
			 r->ag.block_tokens, r->ag.kv_block_bytes);
		return -EINVAL;
	}
	r->data_fd = kva_arena_data_fd(r->arena, KVA_EXPORT_CLOEXEC);
	rc = r->data_fd < 0 ? r->data_fd : kva_arena_map(r->arena, &r->base);
	if (rc) {
		snprintf(err, errlen, "arena: %s", strerror(-rc));
		return rc;
	}
	xp.base = r->base;
	xp.len = r->bg.arena_bytes;
	xp.tls = r->tls;
	xp.net_devices = r->devices;
	rc = kvr_xfer_create(&xp, &r->x, err, errlen);
	if (rc)
		return rc;
	kvd_log(KVD_LOG_INFO, "remote", "arena: %s backend, %u blocks of %u tokens; UCX %s",
		kve_arena_kv_backend(r->kv) == KVA_BACKEND_KERNEL ? "kernel" : "memfd",
		r->bg.blocks_total, r->bg.block_tokens, kvr_xfer_transports(r->x));
	return 0;
}

/* ---- mirrors (decode) ----------------------------------------------------- */

static void mirror_drop(struct rw *r, struct mirror *m)
{
	for (uint32_t i = 0; i < r->n_mirrors; i++)
		if (r->mirrors[i] == m) {
			r->mirrors[i] = r->mirrors[--r->n_mirrors];
			break;
		}
	kva_session_close(r->arena, m->sid);	/* its blocks go back */
	free(m->btab);
	free(m->atab);
	free(m);
}

static void mirrors_drop_all(struct rw *r)
{
	while (r->n_mirrors)
		mirror_drop(r, r->mirrors[r->n_mirrors - 1]);
}

/* Frees the least recently used mirror no step is using: 1, or 0. */
static int mirror_evict(struct rw *r)
{
	struct mirror *best = NULL;

	for (uint32_t i = 0; i < r->n_mirrors; i++)
		if (!r->mirrors[i]->in_step && (!best || r->mirrors[i]->used < best->used))
			best = r->mirrors[i];
	if (!best)
		return 0;
	mirror_drop(r, best);
	return 1;
}

/* n blocks into session sid, evicting mirrors while the arena is full. */
static int alloc_blocks(struct rw *r, uint64_t sid, uint32_t n, uint32_t *ids)
{
	for (;;) {
		int rc = kva_blocks_alloc(r->arena, sid, n, ids, 0);

		if (rc == (int)n)
			return 0;
		if ((rc != -ENOSPC && rc != -EBUSY && rc >= 0) || !mirror_evict(r))
			return rc < 0 ? rc : -ENOSPC;
	}
}

static struct mirror *mirror_for(struct rw *r, const struct seqwork *s, int *err)
{
	uint32_t bt = r->ag.block_tokens, i;
	struct mirror *m = NULL;

	*err = 0;
	for (i = 0; i < r->n_mirrors; i++)
		if (r->mirrors[i]->seq_id == s->sq.seq_id) {
			m = r->mirrors[i];
			break;
		}
	if (m) {
		/* still the orchestrator's blocks? (a step resent after a
		 * loss repeats positions: keep only what precedes them) */
		uint32_t valid = m->n_valid < s->sq.n_kv ? m->n_valid : s->sq.n_kv;
		uint32_t nb = (valid + bt - 1) / bt;

		if (m->n_blocks > s->sq.n_blocks || memcmp(m->atab, s->atab, nb * 4)) {
			mirror_drop(r, m);
			m = NULL;
		} else {
			m->n_valid = valid;
		}
	}
	if (!m) {
		if (r->n_mirrors == MAX_MIRRORS && !mirror_evict(r)) {
			*err = -ENOSPC;
			return NULL;
		}
		m = calloc(1, sizeof(*m));
		if (!m) {
			*err = -ENOMEM;
			return NULL;
		}
		m->seq_id = s->sq.seq_id;
		*err = kva_session_open(r->arena, s->sq.seq_id, &m->sid);
		if (*err) {
			free(m);
			return NULL;
		}
		r->mirrors[r->n_mirrors++] = m;
	}
	if (m->cap < s->sq.n_blocks) {
		uint32_t *b = realloc(m->btab, s->sq.n_blocks * 4);
		uint32_t *a = b ? realloc(m->atab, s->sq.n_blocks * 4) : NULL;

		if (b)
			m->btab = b;
		if (a)
			m->atab = a;
		if (!b || !a) {
			*err = -ENOMEM;
			return NULL;
		}
		m->cap = s->sq.n_blocks;
	}
	m->in_step = 1;	/* before allocating: eviction must spare it */
	if (m->n_blocks < s->sq.n_blocks) {
		*err = alloc_blocks(r, m->sid, s->sq.n_blocks - m->n_blocks, m->btab + m->n_blocks);
		if (*err) {
			m->in_step = 0;
			return NULL;
		}
		m->n_blocks = s->sq.n_blocks;
	}
	m->used = ++r->clock;
	return m;
}

/* ---- the channel --------------------------------------------------------- */

static int chan_send(struct rw *r, uint16_t type, const void *p, size_t len)
{
	struct kvd_iov iov = { p, len };

	return kvr_chan_send(r->ch, type, &iov, 1);
}

/* A STEP that arrived while another ran: kept, in order. */
struct queued {
	void *msg;
	size_t len;
	struct queued *next;
};

static int queue_step(struct rw *r, size_t len)
{
	struct queued *q = calloc(1, sizeof(*q)), **pp;

	if (!q || !(q->msg = malloc(len ? len : 1))) {
		free(q);
		return -ENOMEM;
	}
	memcpy(q->msg, r->rx, len);
	q->len = len;
	for (pp = &r->queue; *pp; pp = &(*pp)->next)
		;
	*pp = q;
	return 0;
}

static void queue_drop(struct rw *r)
{
	while (r->queue) {
		struct queued *q = r->queue;

		r->queue = q->next;
		free(q->msg);
		free(q);
	}
}

static int chan_readable(struct rw *r)
{
	struct pollfd p = { kvr_chan_fd(r->ch), POLLIN, 0 };

	return kvr_chan_pending(r->ch) || poll(&p, 1, 0) > 0;
}

/* Heartbeats and liveness, between other work: 0, or why the session
 * ends; with step_len, 1 when a STEP arrived (payload in r->rx). */
static int service_chan(struct rw *r, size_t *step_len)
{
	uint64_t now = now_ns();

	if (stop_requested)
		return -EINTR;
	while (chan_readable(r)) {
		uint16_t type;
		size_t len;
		int rc = kvr_chan_recv(r->ch, &type, &r->rx, &r->rx_cap, &len);

		if (rc != 1)
			return rc ? rc : -ECONNRESET;
		r->last_seen_ns = now;
		if (type == KVR_MSG_PING) {
			if (chan_send(r, KVR_MSG_PONG, r->rx, len))
				return -ECONNRESET;
		} else if (type == KVD_MSG_STEP && step_len) {
			*step_len = len;
			return 1;
		} else if (type == KVD_MSG_STEP) {
			/* sent while one runs (steps in flight): served next,
			 * in order */
			if (queue_step(r, len))
				return -ENOMEM;
		} else if (type != KVR_MSG_PONG) {
			kvd_log(KVD_LOG_ERR, "remote", "orchestrator sent message %u now", type);
			return -EPROTO;
		}
	}
	if (now - r->last_ping_ns >= (uint64_t)r->wel.heartbeat_ms * 1000000ull) {
		r->last_ping_ns = now;
		if (chan_send(r, KVR_MSG_PING, &now, sizeof(now)))
			return -ECONNRESET;
	}
	if (now - r->last_seen_ns > (uint64_t)r->wel.timeout_ms * 1000000ull) {
		kvd_log(KVD_LOG_WARN, "remote", "orchestrator silent for %u ms",
			r->wel.timeout_ms);
		return -ETIMEDOUT;
	}
	return 0;
}

static int flush_idle(void *arg)
{
	return service_chan(arg, NULL);
}

/* ---- a step -------------------------------------------------------------- */

/* Checks the step against the orchestrator's geometry and this host's
 * role; fills w[] pointing into the copy. */
static int parse_step(struct rw *r, size_t len, struct kvd_step *st, struct seqwork **wp)
{
	char *p = r->step, *end = p + len;
	struct seqwork *w;
	uint32_t bt = r->ag.block_tokens, max_blocks = (r->wel.max_ctx + bt - 1) / bt + 2;

	if (len < sizeof(*st))
		return -EPROTO;
	memcpy(st, p, sizeof(*st));
	p += sizeof(*st);
	if (!st->n_seq || st->n_seq > 4096 ||
	    st->kind != (r->wrole == KVD_ROLE_PREFILL ? KVD_STEP_PREFILL : KVD_STEP_DECODE))
		return -EPROTO;
	w = calloc(st->n_seq, sizeof(*w));
	if (!w)
		return -ENOMEM;
	for (uint32_t i = 0; i < st->n_seq; i++) {
		struct kvd_step_seq *sq = (void *)p;
		uint64_t need;

		if ((size_t)(end - p) < sizeof(*sq))
			goto bad;
		memcpy(&w[i].sq, sq, sizeof(*sq));
		need = sizeof(*sq) + (uint64_t)w[i].sq.n_new * 4 + (uint64_t)w[i].sq.n_blocks * 4 +
		       w[i].sq.constraint_len;
		if ((uint64_t)(end - p) < need || !w[i].sq.n_new || w[i].sq.n_blocks > max_blocks ||
		    (uint64_t)w[i].sq.n_blocks * bt < (uint64_t)w[i].sq.n_kv + w[i].sq.n_new)
			goto bad;
		if (w[i].sq.flags & KVD_SEQ_SAMPLER) {
			/* the sampler's state follows (proto.h); its sizes only,
			 * the local worker checks the rest */
			struct kvd_sampler_wire sw;

			if ((uint64_t)(end - p) < need + sizeof(sw))
				goto bad;
			memcpy(&sw, p + need, sizeof(sw));
			if (sw.n_bias > KVD_SAMPLER_MAX_ENTRIES || sw.n_context > KVD_SAMPLER_MAX_ENTRIES ||
			    sw.n_generated > KVD_SAMPLER_MAX_ENTRIES)
				goto bad;
			need += sizeof(sw) + (uint64_t)sw.n_bias * 8 + (uint64_t)sw.n_context * 4 +
				(uint64_t)sw.n_generated * 8;
			if ((uint64_t)(end - p) < need)
				goto bad;
		}
		/* every record is padded to 8 bytes (proto.h) */
		need = (need + 7) & ~(uint64_t)7;
		if ((uint64_t)(end - p) < need)
			goto bad;
		w[i].ids = p + sizeof(*sq) + (size_t)w[i].sq.n_new * 4;
		w[i].atab = malloc((size_t)w[i].sq.n_blocks * 4 + 4);
		if (!w[i].atab)
			goto bad;
		memcpy(w[i].atab, w[i].ids, (size_t)w[i].sq.n_blocks * 4);
		for (uint32_t b = 0; b < w[i].sq.n_blocks; b++)
			if (w[i].atab[b] >= r->ag.blocks_total)
				goto bad;
		p += need;
	}
	if (p != end)
		goto bad;
	*wp = w;
	return 0;
bad:
	for (uint32_t i = 0; i < st->n_seq; i++)
		free(w[i].atab);
	free(w);
	return -EPROTO;
}

static void step_release(struct rw *r, struct seqwork *w, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (w[i].has_sid)
			kva_session_close(r->arena, w[i].sid);	/* its blocks go back */
		else if (w[i].m)
			w[i].m->in_step = 0;
		if (w[i].has_sid)
			free(w[i].btab);
		free(w[i].atab);
	}
	free(w);
}

/* The local worker's RESULT for the step, heartbeats served meanwhile.
 * 1 with it in r->wrx, or <0: the worker died or the orchestrator left
 * (then the worker is killed: its blocks may be freed). */
static int await_result(struct rw *r, uint64_t step_id, size_t *len)
{
	for (;;) {
		struct pollfd p[3] = { { r->wsock, POLLIN, 0 }, { kvr_chan_fd(r->ch), POLLIN, 0 },
				       { kvr_xfer_fd(r->x), POLLIN, 0 } };
		int rc;

		kvr_xfer_progress(r->x);
		if (!kvr_chan_pending(r->ch))
			poll(p, 3, (int)(r->wel.heartbeat_ms / 2 ? r->wel.heartbeat_ms / 2 : 1));
		rc = service_chan(r, NULL);
		if (rc) {
			worker_stop(r);
			return rc;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			uint16_t type;
			struct kvd_result res;

			rc = kvd_msg_recv(r->wsock, &type, &r->wrx, &r->wrx_cap, len, NULL);
			if (rc <= 0 || type != KVD_MSG_RESULT || *len < sizeof(res)) {
				kvd_log(KVD_LOG_ERR, "remote", "local worker lost mid-step");
				worker_stop(r);
				return -EIO;
			}
			memcpy(&res, r->wrx, sizeof(res));
			if (res.step_id != step_id) {
				worker_stop(r);
				return -EPROTO;
			}
			return 1;
		}
	}
}

#ifdef KVD_TEST_HOOKS
/*
 * kvarenad-hooks only (tests/remote/test_remote.py): with
 * KVR_TEST_STALL_MS set, the first prefill step of at least 64 new positions pushes
 * the first half of them, waits until they landed, then stalls that long
 * (heartbeats answered) before the rest: the window in which the test
 * kills this host, cuts its link, or lets the orchestrator's lease expire,
 * with the transfer half done. Returns where the rest starts.
 */
static uint32_t test_stall(struct rw *r, const struct seqwork *s, uint32_t from, uint32_t to)
{
	const char *v = getenv("KVR_TEST_STALL_MS");
	uint32_t mid = from + (to - from) / 2;
	static int stalled;
	uint64_t end;

	if (!v || stalled || r->wrole != KVD_ROLE_PREFILL || to - from < 64)
		return from;
	stalled = 1;	/* once per process: the step sent again goes through */
	if (kvr_move_positions(r->peer, KVR_PUSH, &r->bg, s->btab, &r->ag, s->atab, from, mid) ||
	    kvr_peer_flush(r->peer, -1, flush_idle, r))
		return from;
	kvd_log(KVD_LOG_INFO, "remote", "test: positions %u..%u landed, stalling %s ms",
		from, mid, v);
	end = now_ns() + (uint64_t)atoi(v) * 1000000ull;
	while (now_ns() < end && !service_chan(r, NULL))
		usleep(20000);
	return mid;
}
#endif

static int do_step(struct rw *r, const void *msg, size_t len)
{
	uint32_t bt = r->ag.block_tokens, i;
	struct seqwork *w = NULL;
	struct kvd_result res;
	struct kvd_step st;
	size_t rlen = 0;
	uint64_t t0 = now_ns(), t_fetched, t_computed, pulled0 = r->pulled, pushed0 = r->pushed;
	int rc;

	if (len > r->step_cap) {
		char *p = realloc(r->step, len);

		if (!p)
			return -ENOMEM;
		r->step = p;
		r->step_cap = len;
	}
	memcpy(r->step, msg, len);
	rc = parse_step(r, len, &st, &w);
	if (rc) {
		kvd_log(KVD_LOG_ERR, "remote", "malformed step from the orchestrator");
		return rc;
	}
	/* this arena's blocks for each sequence, filled from the orchestrator's */
	for (i = 0; i < st.n_seq && !rc; i++) {
		struct seqwork *s = &w[i];
		uint32_t from = 0;

		if (r->wrole == KVD_ROLE_PREFILL) {
			s->btab = malloc((size_t)s->sq.n_blocks * 4 + 4);
			rc = s->btab ? kva_session_open(r->arena, s->sq.seq_id, &s->sid) : -ENOMEM;
			if (rc)
				break;
			s->has_sid = 1;
			rc = alloc_blocks(r, s->sid, s->sq.n_blocks, s->btab);
		} else {
			s->m = mirror_for(r, s, &rc);
			if (s->m) {
				s->btab = s->m->btab;
				from = s->m->n_valid;
			}
		}
		if (!rc && from < s->sq.n_kv) {
			rc = kvr_move_positions(r->peer, KVR_PULL, &r->bg, s->btab, &r->ag, s->atab,
						from, s->sq.n_kv);
			r->pulled += (uint64_t)(s->sq.n_kv - from) * (r->bg.kv_block_bytes / bt);
		}
		if (!rc)
			memcpy(s->ids, s->btab, (size_t)s->sq.n_blocks * 4);
	}
	if (rc) {
		/* this host cannot take the step (its arena is full): the
		 * orchestrator gets an error for it and sends it elsewhere */
		struct kvd_result err = { .step_id = st.step_id, .status = rc };

		kvd_log(KVD_LOG_WARN, "remote", "step %llu refused: %s",
			(unsigned long long)st.step_id, strerror(-rc));
		step_release(r, w, st.n_seq);
		return kvr_peer_failed(r->peer) ? -ECONNRESET :
		       chan_send(r, KVD_MSG_RESULT, &err, sizeof(err));
	}
	rc = kvr_peer_flush(r->peer, -1, flush_idle, r);
	if (rc) {
		kvd_log(KVD_LOG_WARN, "remote", "fetching KV from the orchestrator failed: %s",
			strerror(-rc));
		step_release(r, w, st.n_seq);
		return -ECONNRESET;
	}
	t_fetched = now_ns();
	rc = kvd_msg_send(r->wsock, KVD_MSG_STEP, r->step, len, -1);
	if (!rc)
		rc = await_result(r, st.step_id, &rlen);
	t_computed = now_ns();
	if (rc < 0) {
		/* the worker is dead (killed if it was not): blocks may go */
		step_release(r, w, st.n_seq);
		return rc;
	}
	memcpy(&res, r->wrx, sizeof(res));
	rc = 0;
	if (!res.status) {
		/* what the step wrote, into the orchestrator's blocks */
		for (i = 0; i < st.n_seq && !rc; i++) {
			struct seqwork *s = &w[i];
			uint32_t from = s->sq.n_kv, to = s->sq.n_kv + s->sq.n_new;

#ifdef KVD_TEST_HOOKS
			from = test_stall(r, s, from, to);
#endif
			rc = kvr_move_positions(r->peer, KVR_PUSH, &r->bg, s->btab, &r->ag, s->atab,
						from, to);
			r->pushed += (uint64_t)s->sq.n_new * (r->bg.kv_block_bytes / bt);
		}
		if (!rc)
			rc = kvr_peer_flush(r->peer, -1, flush_idle, r);
		if (rc) {
			kvd_log(KVD_LOG_WARN, "remote", "returning KV to the orchestrator failed: %s",
				strerror(-rc));
			kvr_peer_close(r->peer);	/* nothing more lands anywhere */
			r->peer = NULL;
			step_release(r, w, st.n_seq);
			return -ECONNRESET;
		}
		for (i = 0; i < st.n_seq; i++)
			if (w[i].m) {
				w[i].m->n_valid = w[i].sq.n_kv + w[i].sq.n_new;
				memcpy(w[i].m->atab, w[i].atab, (size_t)w[i].sq.n_blocks * 4);
			}
	}
	step_release(r, w, st.n_seq);
	r->steps++;
	/* what layer-wise overlap could save at most: the smaller of the
	 * transfer and the compute it would hide behind (remote.md) */
	kvd_log(KVD_LOG_DEBUG, "remote", "step %llu (%s, %u seqs): fetched %llu KiB in %.2f ms, "
		"computed in %.2f ms, returned %llu KiB in %.2f ms",
		(unsigned long long)st.step_id, role_name(r->wrole), st.n_seq,
		(unsigned long long)((r->pulled - pulled0) >> 10), (t_fetched - t0) / 1e6,
		(t_computed - t_fetched) / 1e6, (unsigned long long)((r->pushed - pushed0) >> 10),
		(now_ns() - t_computed) / 1e6);
	return chan_send(r, KVD_MSG_RESULT, r->wrx, rlen);
}

/* ---- a session with the orchestrator ---------------------------------------- */

static uint32_t arena_used(struct rw *r)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };

	if (!r->arena || kva_arena_get_info(r->arena, &ai))
		return 0;
	return ai.blocks_total - ai.blocks_free;
}

static int join(struct rw *r, char *err, size_t errlen)
{
	struct kvr_join j = { 0 };
	uint16_t type;
	size_t len;
	int rc;

	j.version = KVR_REMOTE_VERSION;
	j.roles = r->roles;
	j.model = r->mid;
	j.pid = (uint32_t)getpid();
	snprintf(j.host, sizeof(j.host), "%s", r->host);
	rc = chan_send(r, KVR_MSG_JOIN, &j, sizeof(j));
	if (!rc)
		rc = kvr_chan_recv(r->ch, &type, &r->rx, &r->rx_cap, &len) == 1 ? 0 : -ECONNRESET;
	if (rc) {
		snprintf(err, errlen, "the orchestrator closed the connection");
		return rc;
	}
	if (type == KVR_MSG_REFUSE && len == sizeof(struct kvr_refuse)) {
		struct kvr_refuse f;

		memcpy(&f, r->rx, sizeof(f));
		f.why[sizeof(f.why) - 1] = 0;
		snprintf(err, errlen, "refused: %s", f.why);
		return -EPERM;
	}
	if (type != KVR_MSG_WELCOME || len < sizeof(r->wel)) {
		snprintf(err, errlen, "no WELCOME");
		return -EPROTO;
	}
	memcpy(&r->wel, r->rx, sizeof(r->wel));
	r->wel.tool_open[31] = r->wel.tool_close[31] = 0;
	r->ag = r->wel.hello.geom;
	if (len != sizeof(r->wel) + r->wel.blob_len ||
	    (r->wel.hello.role != KVD_ROLE_PREFILL && r->wel.hello.role != KVD_ROLE_DECODE) ||
	    !r->ag.block_tokens || !r->ag.blocks_per_page || !r->ag.blocks_total ||
	    !r->wel.heartbeat_ms || r->wel.timeout_ms < r->wel.heartbeat_ms || !r->wel.max_ctx ||
	    !r->wel.max_batch || !r->wel.tool_open[0] || !r->wel.tool_close[0]) {
		snprintf(err, errlen, "malformed WELCOME");
		return -EPROTO;
	}
	return 0;
}

static int session(struct rw *r)
{
	struct kvd_ready rd = { 0 };
	char err[256] = "";
	int rc;

	rc = kvr_chan_connect(r->orch, &r->psk, 5000, 10000, &r->ch, err, sizeof(err));
	if (rc) {
		kvd_log(KVD_LOG_WARN, "remote", "%s", err);
		return rc == -EACCES ? -EACCES : -EAGAIN;
	}
	rc = join(r, err, sizeof(err));
	if (rc)
		goto out;
	rc = arena_ensure(r, err, sizeof(err));
	if (!rc) {
		rc = worker_start(r, r->wel.hello.role);
		if (rc)
			snprintf(err, sizeof(err), "the local %s worker does not start",
				 role_name(r->wel.hello.role));
	}
	if (!rc)
		rc = kvr_peer_connect(r->x, (char *)r->rx + sizeof(r->wel), r->wel.blob_len,
				      &r->peer, err, sizeof(err));
	rd.status = rc;
	rd.vocab = r->wvocab;
	rd.pid = (uint32_t)getpid();
	snprintf(rd.backend, sizeof(rd.backend), "%s", rc ? "remote" : r->wbackend);
	snprintf(rd.message, sizeof(rd.message), "%.191s", err);
	if (chan_send(r, KVD_MSG_READY, &rd, sizeof(rd)) && !rc)
		rc = -ECONNRESET;
	if (rc)
		goto out;
	kvd_log(KVD_LOG_INFO, "remote", "joined %s (%s) as a %s worker", r->orch,
		kvr_chan_peer(r->ch), role_name(r->wrole));
	r->last_seen_ns = r->last_ping_ns = now_ns();
	for (;;) {
		struct pollfd p[3] = { { kvr_chan_fd(r->ch), POLLIN, 0 },
				       { r->wsock, POLLIN, 0 }, { kvr_xfer_fd(r->x), POLLIN, 0 } };

		kvr_xfer_progress(r->x);
		if (!kvr_chan_pending(r->ch))
			poll(p, 3, r->queue ? 0 :
				   (int)(r->wel.heartbeat_ms / 2 ? r->wel.heartbeat_ms / 2 : 1));
		if (p[1].revents) {
			snprintf(err, sizeof(err), "the local worker exited");
			rc = -EIO;
			break;
		}
		size_t len;

		if (r->queue) {
			struct queued *q = r->queue;

			r->queue = q->next;
			rc = do_step(r, q->msg, q->len);
			free(q->msg);
			free(q);
		} else {
			rc = service_chan(r, &len);
			if (rc == 1)
				rc = do_step(r, r->rx, len);
		}
		if (rc < 0) {
			if (rc == -EINTR)
				snprintf(err, sizeof(err), "stopping");
			break;
		}
	}
out:
	if (rc && err[0])
		kvd_log(rc == -EPERM ? KVD_LOG_ERR : KVD_LOG_WARN, "remote", "%s", err);
	if (r->peer)
		kvr_peer_close(r->peer);	/* forced: nothing lands after this */
	r->peer = NULL;
	queue_drop(r);	/* the orchestrator sends them again */
	if (r->arena) {
		uint32_t held = 0;

		for (uint32_t i = 0; i < r->n_mirrors; i++)
			held += r->mirrors[i]->n_blocks;
		mirrors_drop_all(r);
		kvd_log(KVD_LOG_INFO, "remote", "session over after %llu steps (%llu MiB in, "
			"%llu MiB out): %u mirrored blocks released, %u blocks held",
			(unsigned long long)r->steps, (unsigned long long)(r->pulled >> 20),
			(unsigned long long)(r->pushed >> 20), held, arena_used(r));
	}
	kvr_chan_close(r->ch);
	r->ch = NULL;
	return rc;
}

/* ---- the program ------------------------------------------------------------- */

static const char usage[] =
	"usage: kvarenad --worker-of HOST:PORT --model FILE --secret-file FILE\n"
	"                [--role prefill|decode|any] [--kv-blocks N]\n"
	"                [--backend auto|kernel|memfd] [--threads N]\n"
	"                [--worker-backend cpu|FILE.so] [--backend-options S]\n"
	"                [--ucx-tls LIST] [--ucx-devices LIST] [--retry-ms N] [--once]\n"
	"                [--log-level error|warn|info|debug]\n"
	"\n"
	"Serves prefill or decode steps for the kvarenad orchestrator at HOST:PORT\n"
	"(its [remote] listen) from this host's own KV arena, KV moved by UCX.\n"
	"See kvarenad(8) and Documentation/remote.md.\n";

static int parse_args(struct rw *r, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "worker-of", required_argument, NULL, 'o' },
		{ "model", required_argument, NULL, 'm' },
		{ "secret-file", required_argument, NULL, 's' },
		{ "role", required_argument, NULL, 'r' },
		{ "kv-blocks", required_argument, NULL, 'k' },
		{ "backend", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "worker-backend", required_argument, NULL, 'w' },
		{ "backend-options", required_argument, NULL, 'O' },
		{ "ucx-tls", required_argument, NULL, 'T' },
		{ "ucx-devices", required_argument, NULL, 'D' },
		{ "retry-ms", required_argument, NULL, 'R' },
		{ "once", no_argument, NULL, '1' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const lv[] = { "error", "warn", "info", "debug" };
	char *end;
	int opt, i;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'o': r->orch = optarg; break;
		case 'm': r->model_path = optarg; break;
		case 's': r->secret = optarg; break;
		case 'r':
			r->roles = !strcmp(optarg, "prefill") ? 1u : !strcmp(optarg, "decode") ? 2u :
				   !strcmp(optarg, "any") ? KVR_ROLE_ANY : 0;
			if (!r->roles)
				goto bad;
			break;
		case 'k':
			r->kv_blocks = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || r->kv_blocks < 8 || r->kv_blocks > (1u << 20))
				goto bad;
			break;
		case 'b':
			if (strcmp(optarg, "auto") && strcmp(optarg, "kernel") &&
			    strcmp(optarg, "memfd"))
				goto bad;
			r->kv_backend = optarg;
			break;
		case 't':
			r->threads = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || r->threads < 1 || r->threads > 2)
				goto bad;
			break;
		case 'w': r->worker_backend = optarg; break;
		case 'O': r->backend_options = optarg; break;
		case 'T': r->tls = optarg; break;
		case 'D': r->devices = optarg; break;
		case 'R':
			r->retry_ms = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || r->retry_ms < 10 || r->retry_ms > 3600000)
				goto bad;
			break;
		case '1': r->once = 1; break;
		case 'l':
			for (i = 0; i < 4 && strcmp(optarg, lv[i]); i++)
				;
			if (i == 4)
				goto bad;
			kvd_log_set_level((enum kvd_log_level)i);
			break;
		case 'h': fputs(usage, stdout); return 1;
		default: goto bad;
		}
	}
	if (optind != argc || !r->orch || !r->model_path || !r->secret)
		goto bad;
	return 0;
bad:
	fputs(usage, stderr);
	return 2;
}

int kvr_rworker_main(int argc, char **argv)
{
	struct rw *r;
	char err[256];
	uint32_t backoff;
	ssize_t n;
	int rc, status = 0;

	r = calloc(1, sizeof(*r));
	if (!r)
		return 1;
	r->wsock = r->data_fd = -1;
	r->mirrors = calloc(MAX_MIRRORS, sizeof(*r->mirrors));
	if (!r->mirrors) {
		free(r);
		return 1;
	}
	r->roles = KVR_ROLE_ANY;
	r->threads = 1;
	r->kv_backend = "auto";
	r->worker_backend = "cpu";
	r->backend_options = "";
	r->retry_ms = 1000;
	rc = parse_args(r, argc, argv);
	if (rc) {
		free(r->mirrors);
		free(r);
		return rc == 1 ? 0 : 2;
	}
	signal(SIGPIPE, SIG_IGN);
	{
		struct sigaction sa = { .sa_handler = on_stop };

		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
	}
	n = readlink("/proc/self/exe", r->self, sizeof(r->self) - 1);
	if (n <= 0) {
		free(r->mirrors);
		free(r);
		return 1;
	}
	r->self[n] = 0;
	if (gethostname(r->host, sizeof(r->host) - 1))
		snprintf(r->host, sizeof(r->host), "?");
	rc = kvr_psk_load(r->secret, &r->psk, err, sizeof(err));
	if (!rc && (rc = kvr_model_id(r->model_path, &r->mid)))
		snprintf(err, sizeof(err), "model %s: %s", r->model_path, strerror(-rc));
	if (!rc) {
		/* the model's shape for the arena; the worker loads it itself */
		setenv("KVE_WEIGHTS", "mmap", 1);
		r->model = kve_model_load(r->model_path, err, sizeof(err));
		unsetenv("KVE_WEIGHTS");
		rc = r->model ? 0 : -EINVAL;
	}
	if (rc) {
		kvd_log(KVD_LOG_ERR, "remote", "%s", err);
		free(r->mirrors);
		free(r);
		return 2;
	}
	kvd_log(KVD_LOG_INFO, "remote", "worker host %s: joining %s (%s)", r->host, r->orch,
		r->roles == KVR_ROLE_ANY ? "any role" : role_name(r->roles == 1 ? 1 : 2));
	backoff = r->retry_ms;
	for (;;) {
		uint64_t t0 = now_ns();

		rc = session(r);
		if (stop_requested)
			break;
		if (rc == -EPERM || rc == -EINVAL) {
			status = 2;	/* refused, or cannot serve this model: final */
			break;
		}
		if (r->once) {
			status = rc == -EACCES ? 2 : 0;
			break;
		}
		/* a session that served a while rejoins at once */
		if (now_ns() - t0 > 10000000000ull)
			backoff = r->retry_ms;
		for (uint32_t slept = 0; slept < backoff && !stop_requested; slept += 50)
			usleep(50000);
		if (backoff < 30000)
			backoff *= 2;
		if (backoff > 30000)
			backoff = 30000;
	}
	worker_stop(r);
	mirrors_drop_all(r);
	free(r->mirrors);
	arena_close(r);
	kve_model_free(r->model);
	free(r->rx);
	free(r->wrx);
	free(r->step);
	free(r);
	return status;
}
