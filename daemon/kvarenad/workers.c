// SPDX-License-Identifier: MIT
/*
 * workers.c - the stage worker processes: started as fresh execs of
 * kvarenad itself (`--worker`), handed the arena's data fd over a
 * SOCK_STREAM socketpair, sent steps, and restarted when they die.
 *
 * I/O never blocks the scheduler: after HELLO the socket is non-blocking,
 * steps are queued as bytes and written as the socket takes them, and
 * answers are assembled across reads (proto.h's kvd_msg_rx/tx), so a
 * worker that stops reading or stops mid-message only delays its own
 * steps until its lease runs out.
 *
 * Leases: the oldest step in flight may run lease_ms (plus
 * lease_per_token_ms per token it computes) from when the worker could
 * start it; past that the worker is killed before anything it reads can
 * be freed, and its steps are sent again.
 *
 * Health: a worker that keeps failing (dying, failing steps, failing to
 * start) without a successful step in between is restarted after a
 * back-off that doubles per failure (first restart at once, then 100 ms,
 * up to [workers] restart_backoff_max_ms); once it is up again it is probed with one
 * step at a time (half-open) until one succeeds, which makes it healthy.
 * A stage with no working worker makes /health "degraded".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks.h"
#include "internal.h"
#include "log.h"
#include "worker.h"

#define KVD_BACKOFF_FIRST_MS 100

extern char **environ;

static const char *role_name(uint32_t role)
{
	return role == KVD_ROLE_PREFILL ? "prefill" : "decode";
}

int kvd_worker_usable(const struct kvd_worker *w)
{
	return w->state == W_READY && w->sock >= 0;
}

static int spawn(struct kvd *d, struct kvd_worker *w)
{
	struct kvd_hello h = { 0 };
	char threads[16], batch[16], ctx[16], step[16];
	const char *backend = w->role == KVD_ROLE_PREFILL ? d->cfg.prefill_backend :
							     d->cfg.decode_backend;
	const char *argv[] = { d->self_exe, "--worker", role_name(w->role),
			       "--model", d->cfg.model_path, "--backend", backend,
			       "--backend-options", d->cfg.backend_options,
			       "--threads", threads, "--max-batch", batch,
			       "--max-ctx", ctx, "--max-step-tokens", step,
			       "--tool-open", d->cfg.tool_open,
			       "--tool-close", d->cfg.tool_close,
			       "--chat-template", d->cfg.chat_template, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	int sv[2], rc, fl;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	if (sv[1] == KVD_WORKER_FD) {
		/* dup2 onto itself would keep close-on-exec */
		int f = fcntl(sv[1], F_DUPFD_CLOEXEC, KVD_WORKER_FD + 1);

		if (f < 0) {
			rc = -errno;
			close(sv[0]);
			close(sv[1]);
			return rc;
		}
		close(sv[1]);
		sv[1] = f;
	}
	snprintf(threads, sizeof(threads), "%u", d->cfg.threads_per_worker);
	snprintf(batch, sizeof(batch), "%u", d->cfg.max_batch);
	snprintf(ctx, sizeof(ctx), "%u", d->ctx_len);
	snprintf(step, sizeof(step), "%u", d->cfg.step_tokens);
	if (w->remote) {
		/* the link process to a remote host runs code of ours first
		 * (daemon/remote): a fork, not a spawn */
		pid = fork();
		if (pid < 0) {
			rc = -errno;
			close(sv[0]);
			close(sv[1]);
			return rc;
		}
		if (pid == 0) {
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			signal(SIGPIPE, SIG_DFL);
			kvd_remote_exec(d, w, sv[1]);
			_exit(127);
		}
		close(sv[1]);
		goto hello;
	}
	/* posix_spawn (vfork-like): no copy of the orchestrator's page
	 * tables while the scheduler waits; the child gets only the socket,
	 * no signal mask and default dispositions */
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_adddup2(&fa, sv[1], KVD_WORKER_FD);
	posix_spawn_file_actions_addclosefrom_np(&fa, KVD_WORKER_FD + 1);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(&pid, d->self_exe, &fa, &at, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(sv[1]);
	if (rc) {
		close(sv[0]);
		return -rc;
	}
hello:
	h.role = w->role;
	h.copy_mode = d->cfg.handoff == KVD_HANDOFF_COPY;
	h.geom.arena_bytes = d->geom.arena_bytes;
	h.geom.block_size = d->geom.block_size;
	h.geom.blocks_per_page = d->geom.blocks_per_page;
	h.geom.blocks_total = d->geom.blocks_total;
	h.geom.block_tokens = d->geom.block_tokens;
	h.geom.dtype = d->geom.dtype;
	h.geom.kv_block_bytes = d->geom.kv_block_bytes;
	h.geom.n_layers = d->geom.n_layers;
	h.geom.n_kv_heads = d->geom.n_kv_heads;
	h.geom.head_dim = d->geom.head_dim;
	/* a fresh socket's buffer takes HELLO whole: this cannot block */
	rc = kvd_msg_send(sv[0], KVD_MSG_HELLO, &h, sizeof(h), d->data_fd);
	fl = fcntl(sv[0], F_GETFL);
	if (!rc && (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0))
		rc = -errno;
	if (rc) {
		close(sv[0]);
		kill(pid, SIGKILL);
		if (d->reap && d->n_reap < d->n_workers * 4 + 8)
			d->reap[d->n_reap++] = pid;
		else
			waitpid(pid, NULL, 0);	/* SIGKILLed: moments */
		return rc;
	}
	w->pid = pid;
	w->sock = sv[0];
	w->state = W_STARTING;
	w->started_ns = kvd_now_ns();
	w->n_q = 0;
	w->q_head = 0;
	w->q_tokens = 0;
	w->rx.got = 0;
	w->tx.len = w->tx.off = 0;
	return 0;
}

int kvd_workers_start(struct kvd *d)
{
	uint32_t i, k, n = d->cfg.prefill_workers + d->cfg.decode_workers;
	uint32_t rp = kvd_remote_slots(d, KVD_ROLE_PREFILL), rd = kvd_remote_slots(d, KVD_ROLE_DECODE);
	int rc;

	d->workers = calloc(n + rp + rd, sizeof(*d->workers));
	/* each worker's restarts leave one pid to reap; a few rounds of all */
	d->reap = calloc((size_t)(n + rp + rd) * 4 + 8, sizeof(*d->reap));
	if (!d->workers || !d->reap) {
		rc = -ENOMEM;
		goto fail;
	}
	d->n_workers = n + rp + rd;
	/* decode tokens of a full batch, plus prompt chunks of a budget */
	d->max_seqs = d->cfg.max_batch + (d->cfg.step_tokens < 64 ? d->cfg.step_tokens : 64);
	for (i = 0; i < n + rp + rd; i++) {
		struct kvd_worker *w = &d->workers[i];

		w->index = (int)i;
		w->sock = -1;
		w->role = i < d->cfg.prefill_workers ? KVD_ROLE_PREFILL : KVD_ROLE_DECODE;
		/* after the local ones: remote slots, prefill then decode */
		w->remote = i >= n;
		if (w->remote)
			w->role = i < n + rp ? KVD_ROLE_PREFILL : KVD_ROLE_DECODE;
		for (k = 0; k < KVD_MAX_DEPTH; k++) {
			w->q[k].seqs = calloc(d->max_seqs, sizeof(*w->q[k].seqs));
			if (!w->q[k].seqs) {
				rc = -ENOMEM;
				goto fail;
			}
		}
		rc = spawn(d, w);
		if (rc)
			goto fail;
	}
	return 0;
fail:
	kvd_workers_stop(d);	/* the workers started so far, every queue */
	return rc;
}

void kvd_workers_reap(pid_t *pids, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);	/* SIGKILLed: gone in moments */
}

void kvd_workers_stop(struct kvd *d)
{
	uint32_t i, k;

	for (i = 0; i < d->n_workers; i++) {
		struct kvd_worker *w = &d->workers[i];

		if (w->sock >= 0)
			close(w->sock);	/* EOF: the worker exits */
		w->sock = -1;
		if (w->pid > 0) {
			int st;
			int tries = 50;

			while (waitpid(w->pid, &st, WNOHANG) == 0 && tries--) {
				struct timespec ts = { 0, 10000000 };

				nanosleep(&ts, NULL);	/* up to 0.5 s to exit cleanly */
			}
			if (tries < 0) {
				kill(w->pid, SIGKILL);
				waitpid(w->pid, &st, 0);
			}
		}
		for (k = 0; k < KVD_MAX_DEPTH; k++)
			free(w->q[k].seqs);
		kvd_msg_rx_free(&w->rx);
		kvd_msg_tx_free(&w->tx);
	}
	kvd_workers_reap(d->reap, d->n_reap);
	d->n_reap = 0;
	free(d->reap);
	d->reap = NULL;
	free(d->workers);
	d->workers = NULL;
	d->n_workers = 0;
}

static uint64_t backoff_ns(const struct kvd *d, uint32_t fails)
{
	uint64_t ms, max = d->cfg.restart_backoff_max_ms;

	if (fails <= 1)
		return 0;
	ms = (uint64_t)KVD_BACKOFF_FIRST_MS << (fails - 2 < 16 ? fails - 2 : 16);
	return (ms < max ? ms : max) * 1000000ull;
}

/*
 * The worker is gone (EOF, a protocol error, a write error, or its lease
 * expired and we kill it). Its steps in flight are void: their jobs go
 * back to the KV confirmed before them and are sent again, to this worker
 * once restarted or another; the step it was computing is charged
 * (bisection, step.c). Reaping waits until the lock is dropped.
 */
void kvd_worker_lost(struct kvd *d, struct kvd_worker *w, const char *why)
{
	if (w->state == W_DOWN)
		return;
	kvd_log(KVD_LOG_WARN, "workers", "%s worker %d (pid %d) lost: %s; restarting",
		role_name(w->role), w->index, (int)w->pid, why);
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		if (d->n_reap < (uint32_t)d->n_workers * 4 + 8)
			d->reap[d->n_reap++] = w->pid;
		else
			waitpid(w->pid, NULL, 0);	/* never in practice */
	}
	if (w->sock >= 0)
		close(w->sock);
	w->sock = -1;
	w->pid = 0;
	kvd_steps_void(d, w, 1);
	w->rx.got = 0;
	w->tx.len = w->tx.off = 0;
	w->state = W_DOWN;
	w->restarts++;
	d->m.worker_restarts++;
	d->m.worker_failures[w->role]++;
	w->fails_in_row++;
	w->next_start_ns = kvd_now_ns() + backoff_ns(d, w->fails_in_row);
	w->probing = 0;
}

uint64_t kvd_workers_tend(struct kvd *d, uint64_t now)
{
	uint64_t next = now + 250000000ull;
	uint32_t i;

	for (i = 0; i < d->n_workers; i++) {
		struct kvd_worker *w = &d->workers[i];

		if (w->state == W_READY && w->n_q) {
			/* the oldest step's lease: lease_ms, plus
			 * lease_per_token_ms per token it computes (slow
			 * machines, long prompts) */
			const struct kvd_wstep *st = &w->q[w->q_head];
			uint64_t end = w->head_started_ns + (uint64_t)d->cfg.lease_ms * 1000000ull +
				       (uint64_t)st->tokens * d->cfg.lease_per_token_ms * 1000000ull;

			if (now > end) {
				d->m.lease_expiries++;
				kvd_worker_lost(d, w, "KV lease expired");
			} else if (end < next) {
				next = end;
			}
		}
		if (w->state == W_DOWN && !d->stopping) {
			if (now >= w->next_start_ns) {
				int rc = spawn(d, w);

				if (rc) {
					kvd_log(KVD_LOG_ERR, "workers", "restart worker %d: %s",
						w->index, strerror(-rc));
					w->fails_in_row++;
					w->next_start_ns = now + backoff_ns(d, w->fails_in_row < 2 ?
									    2 : w->fails_in_row);
				}
			} else if (w->next_start_ns < next) {
				next = w->next_start_ns;
			}
		}
	}
	kvd_health_update(d, now);
	return next;
}

void kvd_health_update(struct kvd *d, uint64_t now)
{
	uint32_t up[3] = { 0 }, have[3] = { 0 }, i, r;
	int health = KVD_HEALTH_OK;

	for (i = 0; i < d->n_workers; i++) {
		have[d->workers[i].role]++;
		if (kvd_worker_usable(&d->workers[i]))
			up[d->workers[i].role]++;
	}
	for (r = KVD_ROLE_PREFILL; r <= KVD_ROLE_DECODE; r++) {
		if (up[r] || !have[r]) {
			d->stage_down_since[r] = 0;
			continue;
		}
		if (!d->stage_down_since[r])
			d->stage_down_since[r] = now;
		health = KVD_HEALTH_DEGRADED;
	}
	if (health && (!(up[KVD_ROLE_PREFILL] + up[KVD_ROLE_DECODE]) || !kvd_stages_shared(d)))
		health = KVD_HEALTH_DOWN;
	__atomic_store_n(&d->health, health, __ATOMIC_RELAXED);
}

static void on_ready(struct kvd *d, struct kvd_worker *w, const void *p, size_t len)
{
	struct kvd_ready rd;

	if (w->state != W_STARTING || len != sizeof(rd)) {
		kvd_worker_lost(d, w, "protocol error");
		return;
	}
	memcpy(&rd, p, sizeof(rd));
	rd.message[sizeof(rd.message) - 1] = 0;
	rd.backend[sizeof(rd.backend) - 1] = 0;
	if (rd.status || rd.vocab != d->vocab) {
		kvd_log(KVD_LOG_ERR, "workers", "worker %d cannot serve: %s", w->index,
			rd.status ? rd.message : "vocabulary differs from the model's");
		kvd_worker_lost(d, w, "failed to start");
		return;
	}
	snprintf(w->backend, sizeof(w->backend), "%s", rd.backend);
	w->state = W_READY;
	w->ready_ns = kvd_now_ns();
	/* after failures, one step at a time until one succeeds */
	w->probing = w->fails_in_row > 0;
	kvd_log(KVD_LOG_INFO, "workers", "%s worker %d ready: pid %d, backend %s%s",
		role_name(w->role), w->index, (int)w->pid, w->backend,
		w->probing ? " (probing after failures)" : "");
}

void kvd_worker_readable(struct kvd *d, struct kvd_worker *w)
{
	int rc;

	/* whatever has arrived; a partial message waits in rx */
	while (w->sock >= 0 && (rc = kvd_msg_read(w->sock, &w->rx)) != 0) {
		if (rc < 0) {
			kvd_worker_lost(d, w, rc == -ECONNRESET ? "exited" : strerror(-rc));
			return;
		}
		if (w->rx.hdr.type == KVD_MSG_READY)
			on_ready(d, w, w->rx.buf, w->rx.hdr.len);
		else if ((w->rx.hdr.type == KVD_MSG_RESULT || w->rx.hdr.type == KVD_MSG_KV_LOADED) &&
			 w->state == W_READY && w->n_q)
			rc = kvd_step_result(d, w, w->rx.hdr.type, w->rx.buf, w->rx.hdr.len);
		else
			rc = -EPROTO;
		if (rc < 0) {
			kvd_worker_lost(d, w, "protocol error");
			return;
		}
	}
}

void kvd_worker_flush(struct kvd *d, struct kvd_worker *w)
{
	int rc;

	if (w->sock < 0 || w->tx.off == w->tx.len)
		return;
	rc = kvd_msg_flush(w->sock, &w->tx);
	if (rc < 0)
		kvd_worker_lost(d, w, strerror(-rc));
}

/* ---- steps to bytes ----------------------------------------------------------- */

static size_t seq_bytes(struct kvd *d, const struct kvd_sent *e)
{
	struct kvd_job *j = e->j;
	size_t n = sizeof(struct kvd_step_seq) + (size_t)j->conv->as.s.n_blocks * 4 +
		   (size_t)e->n_new * 4;

	/* what sampling needs goes with the sequence that samples */
	if (e->flags & KVD_SEQ_SAMPLE) {
		if (j->cw.kind)
			n += sizeof(j->cw) + j->cw.json_len + j->cw.name_len +
			     (size_t)j->n_hist * 4;
		n += kvd_sampling_wire_len(d, j);
	}
	return (n + 7) & ~(size_t)7;	/* records start 8-byte aligned */
}

/* n bytes at *p: none is no copy (the history, schema and name of a
 * reply that has none are NULL, which memcpy may not be given) */
static void put_bytes(char **p, const void *src, size_t n)
{
	if (n)
		memcpy(*p, src, n);
	*p += n;
}

static void put_seq(const struct kvd_sent *e, char **p)
{
	char *start = *p;
	const struct kvd_job *j = e->j;
	const struct kvd_conv *c = j->conv;
	struct kvd_step_seq sq = { 0 };

	sq.seq_id = e->seq_id;
	sq.n_kv = e->n_kv;
	sq.n_new = e->n_new;
	sq.n_blocks = c->as.s.n_blocks;
	sq.flags = e->flags;
	sq.top_logprobs = j->s.top_logprobs;
	sq.temperature = j->s.temperature;
	sq.top_p = j->s.top_p;
	sq.rng = j->rng;
	sq.constraint_len = j->cw.kind && (e->flags & KVD_SEQ_SAMPLE) ?
		(uint32_t)(sizeof(j->cw) + j->cw.json_len + j->cw.name_len +
			   (size_t)j->n_hist * 4) : 0;
	if (j->smp && (e->flags & KVD_SEQ_SAMPLE))
		sq.flags |= KVD_SEQ_SAMPLER;
	memcpy(*p, &sq, sizeof(sq));
	*p += sizeof(sq);
	memcpy(*p, c->tokens + e->n_kv, (size_t)e->n_new * 4);
	*p += (size_t)e->n_new * 4;
	memcpy(*p, c->as.s.block_table, (size_t)sq.n_blocks * 4);
	*p += (size_t)sq.n_blocks * 4;
	if (sq.constraint_len) {
		struct kvd_constraint_wire cw = j->cw;

		cw.n_hist = j->n_hist;
		cw.tokens_left = j->max_new > j->n_gen ? j->max_new - j->n_gen : 1;
		memcpy(*p, &cw, sizeof(cw));
		*p += sizeof(cw);
		put_bytes(p, j->hist, (size_t)j->n_hist * 4);
		put_bytes(p, j->c_json, cw.json_len);
		put_bytes(p, j->c_name, cw.name_len);
	}
	if (e->flags & KVD_SEQ_SAMPLE)
		kvd_sampling_put(j, p);
	while ((size_t)(*p - start) % 8)
		*(*p)++ = 0;
}

/*
 * The step in w's next slot (filled by step.c, its jobs' bookkeeping
 * done) becomes bytes to send; it is in flight from here on. Whatever
 * fails (no memory, a write error) loses the worker, which voids the
 * step like any other in flight.
 */
void kvd_worker_send(struct kvd *d, struct kvd_worker *w)
{
	struct kvd_wstep *st = &w->q[(w->q_head + w->n_q) % KVD_MAX_DEPTH];
	struct kvd_iov iov[2];
	char *buf = NULL;
	int rc;

	st->id = ++d->next_step_id;
	st->void_ = 0;
	if (st->kind) {
		struct kvd_step hdr = { st->id, st->kind, st->n_seq };
		size_t len = sizeof(hdr);
		uint32_t i;
		char *p;

		for (i = 0; i < st->n_seq; i++)
			len += seq_bytes(d, &st->seqs[i]);
		buf = malloc(len);
		rc = -ENOMEM;
		if (buf) {
			memcpy(buf, &hdr, sizeof(hdr));
			p = buf + sizeof(hdr);
			for (i = 0; i < st->n_seq; i++)
				put_seq(&st->seqs[i], &p);
			iov[0].base = buf;
			iov[0].len = len;
			rc = kvd_msg_queue(&w->tx, KVD_MSG_STEP, iov, 1);
		}
	} else {
		const struct kvd_job *j = st->seqs[0].j;
		struct kvd_kv_load kl = { 0 };

		kl.step_id = st->id;
		kl.n_blocks = (uint32_t)(j->kv_payload_len / (4 + d->geom.kv_block_bytes));
		iov[0].base = &kl;
		iov[0].len = sizeof(kl);
		iov[1].base = j->kv_payload;
		iov[1].len = j->kv_payload_len;
		rc = kvd_msg_queue(&w->tx, KVD_MSG_KV_LOAD, iov, 2);
	}
	free(buf);
#ifdef KVD_TEST_HOOKS
	if (d->test_send_fail == w->index + 1) {
		d->test_send_fail = 0;
		rc = -EIO;	/* as a worker gone between two writes */
	}
#endif
	if (!w->n_q)
		w->head_started_ns = kvd_now_ns();
	w->n_q++;
	w->q_tokens += st->tokens;
	if (rc)
		kvd_worker_lost(d, w, strerror(-rc));
	else
		kvd_worker_flush(d, w);
}
