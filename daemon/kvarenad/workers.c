// SPDX-License-Identifier: MIT
/*
 * workers.c - the stage worker processes: started as fresh execs of
 * kvarenad itself (`--worker`), handed the arena's data fd over a
 * SOCK_STREAM socketpair, sent steps, and restarted when they die.
 * A step's lease (lease_ms) bounds how long a worker may hold blocks:
 * past it the worker is killed before anything it reads can be freed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

static const char *role_name(uint32_t role)
{
	return role == KVD_ROLE_PREFILL ? "prefill" : "decode";
}

int kvd_worker_spawn(struct kvd *d, struct kvd_worker *w)
{
	struct kvd_hello h = { 0 };
	char threads[16], batch[16], ctx[16];
	const char *backend = w->role == KVD_ROLE_PREFILL ? d->cfg.prefill_backend :
							     d->cfg.decode_backend;
	int sv[2], rc;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	snprintf(threads, sizeof(threads), "%u", d->cfg.threads_per_worker);
	snprintf(batch, sizeof(batch), "%u", d->cfg.max_batch);
	snprintf(ctx, sizeof(ctx), "%u", d->ctx_len);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (pid == 0) {
		const char *argv[] = { d->self_exe, "--worker", role_name(w->role),
				       "--model", d->cfg.model_path, "--backend", backend,
				       "--backend-options", d->cfg.backend_options,
				       "--threads", threads, "--max-batch", batch,
				       "--max-ctx", ctx, "--tool-open", d->cfg.tool_open,
				       "--tool-close", d->cfg.tool_close,
				       "--chat-template", d->cfg.chat_template, NULL };

		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (w->remote) {
			kvd_remote_exec(d, w, sv[1]);	/* the link process */
			_exit(127);
		}
		if (dup2(sv[1], KVD_WORKER_FD) < 0)
			_exit(127);
		close_range(KVD_WORKER_FD + 1, ~0u, 0);
		execv(d->self_exe, (char *const *)argv);
		_exit(127);
	}
	close(sv[1]);
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
	rc = kvd_msg_send(sv[0], KVD_MSG_HELLO, &h, sizeof(h), d->data_fd);
	if (rc) {
		close(sv[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return rc;
	}
	w->pid = pid;
	w->sock = sv[0];
	w->state = W_STARTING;
	w->started_ns = kvd_now_ns();
	w->n_inflight = 0;
	return 0;
}

int kvd_workers_start(struct kvd *d)
{
	uint32_t i, n = d->cfg.prefill_workers + d->cfg.decode_workers;
	uint32_t rp = kvd_remote_slots(d, KVD_ROLE_PREFILL), rd = kvd_remote_slots(d, KVD_ROLE_DECODE);
	int rc;

	d->workers = calloc(n + rp + rd, sizeof(*d->workers));
	if (!d->workers)
		return -ENOMEM;
	d->n_workers = n + rp + rd;
	for (i = 0; i < n + rp + rd; i++) {
		struct kvd_worker *w = &d->workers[i];

		w->index = (int)i;
		w->sock = -1;
		w->role = i < d->cfg.prefill_workers ? KVD_ROLE_PREFILL : KVD_ROLE_DECODE;
		/* after the local ones: remote slots, prefill then decode */
		w->remote = i >= n;
		if (w->remote)
			w->role = i < n + rp ? KVD_ROLE_PREFILL : KVD_ROLE_DECODE;
		w->inflight = calloc(d->cfg.max_batch + 1, sizeof(*w->inflight));
		if (!w->inflight)
			return -ENOMEM;
		rc = kvd_worker_spawn(d, w);
		if (rc)
			return rc;
	}
	return 0;
}

void kvd_workers_stop(struct kvd *d)
{
	uint32_t i;

	for (i = 0; i < d->n_workers; i++) {
		struct kvd_worker *w = &d->workers[i];

		if (w->sock >= 0)
			close(w->sock);	/* EOF: the worker exits */
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
		free(w->inflight);
	}
	free(d->workers);
	d->workers = NULL;
	d->n_workers = 0;
}

/*
 * The worker is gone (EOF, a protocol error, or its lease expired and we
 * killed it). Its in-flight jobs go back to the state before the step:
 * the KV it may have written past each job's n_kv is not counted, so the
 * step is simply sent again, to this worker once restarted or another.
 */
void kvd_worker_lost(struct kvd *d, struct kvd_worker *w, const char *why)
{
	uint32_t i;
	int st = 0;

	kvd_log(KVD_LOG_WARN, "workers", "%s worker %d (pid %d) lost: %s; restarting",
		role_name(w->role), w->index, (int)w->pid, why);
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		waitpid(w->pid, &st, 0);
	}
	if (w->sock >= 0)
		close(w->sock);
	w->sock = -1;
	w->pid = 0;
	for (i = 0; i < w->n_inflight; i++) {
		struct kvd_job *j = w->inflight[i];

		if (j->state == JOB_PREFILLING)
			j->state = JOB_PREFILL_READY;
		else if (j->state == JOB_DECODING)
			j->state = JOB_DECODE_READY;
		else if (j->state == JOB_KV_LOADING)
			j->state = JOB_KV_LOAD_READY;
		j->worker = -1;
		j->retries++;
		kvd_job_put(j);
	}
	w->n_inflight = 0;
	w->queued_tokens = 0;
	w->state = W_DOWN;
	w->restarts++;
	d->m.worker_restarts++;
	/* back off when it keeps failing to start */
	w->next_start_ns = kvd_now_ns() + (w->fails_in_row ? 200000000ull << (w->fails_in_row > 5 ? 5 : w->fails_in_row) : 0);
	w->fails_in_row++;
}

static void put_seq(struct kvd *d, struct kvd_job *j, uint32_t kind, char **p)
{
	struct kvd_conv *c = j->conv;
	struct kvd_step_seq sq = { 0 };
	uint32_t n_new = kind == KVD_STEP_PREFILL ? c->n_tokens - c->as.s.n_tokens : 1;

	sq.seq_id = j->seq_id;
	sq.n_kv = c->as.s.n_tokens;
	sq.n_new = n_new;
	sq.n_blocks = c->as.s.n_blocks;
	sq.flags = j->s.logprobs ? KVD_SEQ_LOGPROBS : 0;
	sq.top_logprobs = j->s.top_logprobs;
	sq.temperature = j->s.temperature;
	sq.top_p = j->s.top_p;
	sq.rng = j->rng;
	sq.constraint_len = j->cw.kind ? (uint32_t)(sizeof(j->cw) + j->cw.json_len +
						     j->cw.name_len + (size_t)j->n_hist * 4) : 0;
	if (j->smp)
		sq.flags |= KVD_SEQ_SAMPLER;
	memcpy(*p, &sq, sizeof(sq));
	*p += sizeof(sq);
	if (kind == KVD_STEP_PREFILL)
		memcpy(*p, c->tokens + c->as.s.n_tokens, (size_t)n_new * 4);
	else
		memcpy(*p, &j->next_token, 4);
	*p += (size_t)n_new * 4;
	memcpy(*p, c->as.s.block_table, (size_t)sq.n_blocks * 4);
	*p += (size_t)sq.n_blocks * 4;
	if (sq.constraint_len) {
		struct kvd_constraint_wire cw = j->cw;

		cw.n_hist = j->n_hist;
		cw.tokens_left = j->max_new > j->n_gen ? j->max_new - j->n_gen : 1;
		memcpy(*p, &cw, sizeof(cw));
		*p += sizeof(cw);
		memcpy(*p, j->c_json, cw.json_len);
		*p += cw.json_len;
		memcpy(*p, j->c_name, cw.name_len);
		*p += cw.name_len;
		memcpy(*p, j->hist, (size_t)j->n_hist * 4);
		*p += (size_t)j->n_hist * 4;
	}
	kvd_sampling_put(j, p);
	(void)d;
}

int kvd_worker_send_step(struct kvd *d, struct kvd_worker *w, uint32_t kind,
			 struct kvd_job **jobs, uint32_t n)
{
	struct kvd_step st = { 0 };
	size_t len = sizeof(st);
	char *buf, *p;
	uint32_t i;
	int rc;

	for (i = 0; i < n; i++) {
		const struct kvd_conv *c = jobs[i]->conv;

		len += sizeof(struct kvd_step_seq) + (size_t)c->as.s.n_blocks * 4 +
		       (kind == KVD_STEP_PREFILL ? (size_t)(c->n_tokens - c->as.s.n_tokens) * 4 : 4);
		if (jobs[i]->cw.kind)
			len += sizeof(jobs[i]->cw) + jobs[i]->cw.json_len + jobs[i]->cw.name_len +
			       (size_t)jobs[i]->n_hist * 4;
		len += kvd_sampling_wire_len(d, jobs[i]);
	}
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	st.step_id = ++d->next_step_id;
	st.kind = kind;
	st.n_seq = n;
	memcpy(buf, &st, sizeof(st));
	p = buf + sizeof(st);
	for (i = 0; i < n; i++)
		put_seq(d, jobs[i], kind, &p);
	rc = kvd_msg_send(w->sock, KVD_MSG_STEP, buf, len, -1);
	free(buf);
	if (rc)
		return rc;
	w->state = W_BUSY;
	w->step_id = st.step_id;
	w->step_kind = kind;
	w->step_started_ns = kvd_now_ns();
	w->queued_tokens = 0;
	for (i = 0; i < n; i++) {
		struct kvd_job *j = jobs[i];

		j->refs++;
		j->worker = w->index;
		j->state = kind == KVD_STEP_PREFILL ? JOB_PREFILLING : JOB_DECODING;
		w->inflight[i] = j;
		if (kind == KVD_STEP_PREFILL)
			w->queued_tokens += j->conv->n_tokens - j->conv->as.s.n_tokens;
	}
	w->n_inflight = n;
	return 0;
}

int kvd_worker_send_kv_load(struct kvd *d, struct kvd_worker *w, struct kvd_job *j)
{
	struct kvd_kv_load kl = { 0 };
	struct kvd_iov iov[2];
	int rc;

	kl.step_id = ++d->next_step_id;
	kl.n_blocks = (uint32_t)(j->kv_payload_len / (4 + d->geom.kv_block_bytes));
	iov[0].base = &kl;
	iov[0].len = sizeof(kl);
	iov[1].base = j->kv_payload;
	iov[1].len = j->kv_payload_len;
	rc = kvd_msg_sendv(w->sock, KVD_MSG_KV_LOAD, iov, 2);
	if (rc)
		return rc;
	w->state = W_BUSY;
	w->step_id = kl.step_id;
	w->step_kind = 0;
	w->step_started_ns = kvd_now_ns();
	j->refs++;
	j->worker = w->index;
	j->state = JOB_KV_LOADING;
	w->inflight[0] = j;
	w->n_inflight = 1;
	return 0;
}
