// SPDX-License-Identifier: MIT
/*
 * sched.c - the scheduler thread: the orchestrator's one loop.
 *
 * Each turn, under the lock: tend the workers (restarts, leases, health),
 * take finished tool rounds, admit waiting jobs (admit.c), build a step
 * for every worker that can take one (step.c), send the kernel this
 * turn's state changes in one batch, release expired KV; then, with the
 * lock dropped, reap killed workers and tokenize tool results, and sleep
 * in poll() on the workers' sockets, the io_uring and the wake-up
 * eventfd. Answers advance each job: a sampled token becomes text (stop
 * sequences held back), an event for its HTTP connection, and the next
 * position to compute. A job's KV positions count only once a worker has
 * answered for them, so a step lost with its worker is simply resent.
 * Lock rules: internal.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks.h"
#include "internal.h"
#include "log.h"


/* ---- finishing -------------------------------------------------------- */

/* How many tool calls the reply's text ends its round with (the model
 * family's syntax, daemon/chat), and the first one's tool class. */
static uint32_t tool_calls(struct kvd *d, uint32_t tenant, const char *text, size_t len,
			   uint32_t *cls)
{
	char name[TC_MAX_NAME + 1];
	int n = chat_count_calls(d->chat, text, len, name, sizeof(name));

	*cls = n > 0 ? kvd_toolclass(d, tenant, name, strlen(name)) : 0;
	return n > 0 ? (uint32_t)n : 0;
}

static int gen_append(struct kvd_job *j, const char *s, size_t n);

/* The round's text is complete: the detokenizer's held bytes and the text
 * held back for a possible stop sequence go out. */
static void round_end(struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;
	char raw[16], tail[48];
	int n;

	/* bytes of an incomplete UTF-8 sequence at the very end */
	n = kve_detok_flush(&j->detok, raw, sizeof(raw));
	n = n > 0 ? (int)kvd_utf8_clean(raw, (size_t)n, tail) : 0;
	if (n > 0 && c) {
		kvd_conv_append_text(c, tail, (size_t)n);
		gen_append(j, tail, (size_t)n);
	}
	/* the flushed bytes were the last token's: its text ends here, so a
	 * next turn repeating it keeps that token */
	if (c && c->n_tokens && c->tok_end[c->n_tokens - 1] == UINT32_MAX &&
	    c->text_len < UINT32_MAX)
		c->tok_end[c->n_tokens - 1] = (uint32_t)c->text_len;
	if (j->emitted < j->gen_len)
		kvd_job_emit_token(j, j->gen + j->emitted, j->gen_len - j->emitted, -1, 0,
				   NULL, 0);
	j->emitted = j->gen_len;
}

/*
 * The job lets go of its conversation: kept for the next turn (indexed
 * by its text, KV retained until its deadline, TOOL_WAIT or IDLE in the
 * kernel) or forgotten; after a failure its KV is not trusted and goes.
 * Never while a step of the job is in flight: the worker may still write
 * those blocks (release_job in step.c calls this when the last answers).
 */
void kvd_job_let_go(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;
	uint64_t now = kvd_now_ns();
	uint32_t cls;

	j->let_go = 0;
	if (!c)
		return;
	j->conv = NULL;
	c->job = NULL;
	/* others waiting for a block it was to compute must not wait on */
	kvd_prefix_pending_drop(d, c);
	if (j->failed) {
		/* what the failed step may have left is not trusted: drop it */
		kvd_conv_drop_kv(d, c);
		if (j->n_sched > 0)
			j->n_sched = 0;
	}
	if (c->delete_pending || !d->cfg.retention || !c->n_tokens) {
		kvd_conv_free(d, c);
		return;
	}
	kvd_conv_release(d, c);
	if (j->failed)
		return;
	if (j->round_start <= j->gen_len &&
	    tool_calls(d, j->tenant, j->gen + j->round_start, j->gen_len - j->round_start,
		       &cls)) {
		uint64_t pred = kvd_toolwait_predict_us(d, cls), keep = pred * 4;
		uint64_t lo = (uint64_t)d->cfg.toolwait_min_s * 1000000ull;
		uint64_t hi = (uint64_t)d->cfg.toolwait_max_s * 1000000ull;

		keep = keep < lo ? lo : keep > hi ? hi : keep;
		c->tool_class = cls;
		c->wait_started_ns = now;
		kvd_conv_set_deadline(d, c, now + keep * 1000ull);
		kvd_kstate_set(d, c, KVA_STATE_TOOL_WAIT, cls, pred);
		/* keep, spill or discard its KV for the wait */
		kvd_tiering_tool_wait(d, c, pred);
	} else {
		c->tool_class = 0;
		kvd_conv_set_deadline(d, c, now + (uint64_t)d->cfg.idle_retention_s * 1000000000ull);
		kvd_kstate_set(d, c, KVA_STATE_IDLE, 0, 0);
	}
}

static void job_ended(struct kvd *d, struct kvd_job *j)
{
	if (j->state == JOB_QUEUED)
		d->n_queued--;
	if (j->t_admit) {
		/* how long a job admitted now will hold its blocks: the
		 * horizon of the prefetches admission keeps room for */
		uint64_t h = kvd_now_ns() - j->t_admit;

		d->hold_ns = d->hold_ns ? d->hold_ns - d->hold_ns / 8 + h / 8 : h;
	}
	j->state = JOB_FINISHED;
	kvd_fair_job_gone(d, j->tenant);
	kvd_piece_free(&j->piece);
	if (j->inflight)
		j->let_go = 1;
	else
		kvd_job_let_go(d, j);
	pthread_cond_broadcast(&d->idle_cond);
}

void kvd_job_finish(struct kvd *d, struct kvd_job *j, enum kvd_finish f)
{
	uint64_t now = kvd_now_ns();

	if (j->state == JOB_FINISHED)
		return;
	round_end(j);
	d->m.completion_tokens += j->n_gen;
	kvd_tenant_charge(d, j->tenant, j->n_prompt - j->n_cached + j->n_gen);
	if (j->t_first && j->n_gen > 1)
		kvd_hist_add(&d->m.tpot, (double)(now - j->t_first) / 1e6 / (j->n_gen - 1));
	/* the conversation is indexed for its next turn before the client
	 * can hear that this one is done (its next request may come at once) */
	job_ended(d, j);
	kvd_job_emit_done(j, f);
}

void kvd_job_fail(struct kvd *d, struct kvd_job *j, enum kvd_err_kind kind, const char *msg)
{
	if (j->state == JOB_FINISHED)
		return;
	kvd_log(KVD_LOG_WARN, "sched", "%s: %s", j->request_id, msg);
	d->m.requests_failed++;
	kvd_tenant_charge(d, j->tenant, j->n_gen);
	j->failed = 1;
	job_ended(d, j);
	kvd_job_emit_error(j, kind, msg);
}

/* ---- tokens to text ----------------------------------------------------- */

static int gen_append(struct kvd_job *j, const char *s, size_t n)
{
	if (j->gen_len + n + 1 > j->gen_cap) {
		size_t cap = j->gen_cap ? j->gen_cap : 256;
		char *p;

		while (cap < j->gen_len + n + 1)
			cap *= 2;
		p = realloc(j->gen, cap);
		if (!p)
			return -ENOMEM;
		j->gen = p;
		j->gen_cap = cap;
	}
	memcpy(j->gen + j->gen_len, s, n);
	j->gen_len += n;
	j->gen[j->gen_len] = 0;
	return 0;
}

/* Where a stop sequence starts (or gen_len) and which (1 + its index;
 * 0: none), and how much may be emitted without giving away the start of
 * one. */
static size_t find_stop(const struct kvd_job *j, size_t *safe, uint32_t *which)
{
	size_t best = j->gen_len, hold = 0;
	uint32_t i;

	*which = 0;
	for (i = 0; i < j->s.n_stop; i++) {
		const char *st = j->stop[i];
		size_t sl = strlen(st), from, k;
		const char *hit;

		from = j->emitted > sl ? j->emitted - sl : 0;
		hit = memmem(j->gen + from, j->gen_len - from, st, sl);
		if (hit && (size_t)(hit - j->gen) < best) {
			best = (size_t)(hit - j->gen);
			*which = i + 1;
		}
		for (k = sl - 1; k > hold; k--)
			if (k <= j->gen_len && !memcmp(j->gen + j->gen_len - k, st, k)) {
				hold = k;
				break;
			}
	}
	*safe = j->gen_len - hold;
	return best;
}

/*
 * Replaces bytes that are not valid UTF-8, and NUL, with U+FFFD. The detokenizer
 * holds back incomplete sequences, so what reaches here is either valid
 * or never will be (a small model's stray bytes). The conversation keeps
 * this same text, so a client that sends the reply back (as JSON, valid
 * UTF-8) repeats it byte for byte and the conversation still matches.
 */
size_t kvd_utf8_clean(const char *in, size_t n, char *out)
{
	const unsigned char *p = (const unsigned char *)in;
	size_t i = 0, o = 0;

	while (i < n) {
		unsigned char c = p[i];
		size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			     (c & 0xf8) == 0xf0 ? 4 : 0;
		uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
		size_t k;
		int ok = len && i + len <= n && c;	/* NUL too: C strings, JSON parsers */

		for (k = 1; ok && k < len; k++) {
			ok = (p[i + k] & 0xc0) == 0x80;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if (ok && len > 1)	/* overlong, surrogate, out of range */
			ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
			       (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
			       (cp >= 0xd800 && cp <= 0xdfff));
		if (ok) {
			memcpy(out + o, p + i, len);
			o += len;
			i += len;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	return o;
}

#ifdef KVD_TEST_HOOKS
/* kvarenad-hooks (the sandbox's guest lane, tests/sandbox/guest-daemon.sh):
 * the test, driving the daemon over HTTP, leaves the next scripted reply in
 * the file $KVD_TEST_REPLY_FILE; the first round to start takes it (read,
 * then removed), so it stands for exactly one round of one request. */
static void test_reply_from_file(struct kvd *d, const struct kvd_job *j)
{
	const char *path = getenv("KVD_TEST_REPLY_FILE");
	const char *dir = getenv("KVD_TEST_REPLY_DIR");
	char per_key[600];
	char *buf;
	size_t n;
	FILE *f;

	/* the trace replayer's server-side tool mode (tools/replay/): the
	 * reply of the request naming KEY is in DIR/KEY.reply */
	if (dir && *dir && j->session_key && strlen(j->session_key) < 128 &&
	    strspn(j->session_key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789_-") == strlen(j->session_key)) {
		snprintf(per_key, sizeof(per_key), "%s/%s.reply", dir, j->session_key);
		path = per_key;
	}
	if (!path || !*path || d->n_test_replies)
		return;
	f = fopen(path, "re");
	if (!f)
		return;
	buf = malloc(65536);
	n = buf ? fread(buf, 1, 65535, f) : 0;
	fclose(f);
	unlink(path);
	if (!buf || !n) {
		free(buf);
		return;
	}
	buf[n] = 0;
	d->test_replies[0] = buf;
	d->n_test_replies = 1;
}
#endif

void kvd_on_token(struct kvd *d, struct kvd_job *j, int32_t tok, float lp,
		  const struct kvd_top *top, uint32_t n_top)
{
	struct kvd_conv *c = j->conv;
	char raw[256], piece[768];
	size_t stop, safe;
	int n;

	if (!j->t_first) {
		j->t_first = kvd_now_ns();
		kvd_hist_add(&d->m.ttft, (double)(j->t_first - j->t_submit) / 1e6);
	}
#ifdef KVD_TEST_HOOKS
	/* test_orch: a scripted reply stands for this round's (the random
	 * test model never calls a tool); its tokens get KV with the next
	 * prefill, as a client's text would */
	if (j->round_tokens == 0)
		test_reply_from_file(d, j);
	if (j->round_tokens == 0 && d->n_test_replies) {
		char *txt = d->test_replies[0];
		size_t tl = strlen(txt);
		int bad;

		d->n_test_replies--;
		memmove(d->test_replies, d->test_replies + 1,
			d->n_test_replies * sizeof(d->test_replies[0]));
		j->round_tokens++;
		{
			struct kvd_piece pc;

			bad = kvd_piece_make(d, txt, tl, 0, NULL, &pc) ||
			      kvd_conv_append_piece(c, &pc) || gen_append(j, txt, tl);
			kvd_piece_free(&pc);
		}
		free(txt);
		if (bad) {
			kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
			return;
		}
		round_end(j);
		if (!kvd_agent_try(d, j))
			kvd_job_finish(d, j, KVD_FINISH_STOP);
		return;
	}
#endif
	j->round_tokens++;
	j->n_gen++;
	if (j->smp && kvd_sampling_note(j, tok)) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return;
	}
	if (j->cw.kind && tok != d->eos && tok != d->eot && tok != d->eom) {
		if (j->n_hist == j->cap_hist) {
			uint32_t cap = j->cap_hist ? j->cap_hist * 2 : 64;
			int32_t *h = realloc(j->hist, cap * sizeof(*h));

			if (!h) {
				kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
				return;
			}
			j->hist = h;
			j->cap_hist = cap;
		}
		j->hist[j->n_hist++] = tok;
	}
	if (tok == d->eos || tok == d->eot || (tok == d->eom && tok >= 0)) {
		/* a round ending in calls to server-side tools goes on */
		round_end(j);
		if (kvd_agent_try(d, j))
			return;
		kvd_job_finish(d, j, KVD_FINISH_STOP);
		return;
	}
	n = kve_detok_push(&j->detok, tok, raw, sizeof(raw));
	n = n > 0 ? (int)kvd_utf8_clean(raw, (size_t)n, piece) : 0;
	if (kvd_conv_push_token(c, tok, piece, (size_t)n, j->detok.n_pending == 0) ||
	    gen_append(j, piece, (size_t)n)) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return;
	}
	stop = find_stop(j, &safe, &j->stop_seq);
	if (stop < j->gen_len) {
		if (stop > j->emitted)
			kvd_job_emit_token(j, j->gen + j->emitted, stop - j->emitted, tok, lp,
					   top, n_top);
		j->gen_len = stop;
		j->emitted = stop;
		/* the client will send back the reply as cut: so does the
		 * conversation, or its next turn would not match */
		{
			uint32_t k = c->n_tokens;

			/* an end not known (UINT32_MAX) is past any cut */
			while (k && c->tok_end[k - 1] > j->text_base + stop)
				k--;
			if (kvd_conv_truncate(d, c, k))
				kvd_conv_drop_kv(d, c);
		}
		kvd_job_finish(d, j, KVD_FINISH_STOP);
		return;
	}
	if (safe < j->emitted)
		safe = j->emitted;
	kvd_job_emit_token(j, j->gen + j->emitted, safe - j->emitted, tok, lp, top, n_top);
	j->emitted = safe;
	if (j->n_gen >= j->max_new || c->n_tokens >= d->ctx_len)
		kvd_job_finish(d, j, KVD_FINISH_LENGTH);
	/* else the token just pushed is the next position to compute */
}


/* ---- server-side tool rounds ---------------------------------------------- */

/* A round's tools ran: their results, as the chat template's tool turns,
 * wait to be tokenized (unlocked, kvd_sched_main), then only those tokens
 * are prefilled and the next round decodes. */
static void tools_done(struct kvd *d, struct kvd_round *r)
{
	struct kvd_job *j = kvd_agent_round_job(r);
	struct kvd_conv *c = j->conv;
	size_t len = 0, n_markup = 0;
	struct kvd_span *markup = NULL;
	char *t;

	t = j->state == JOB_TOOL_RUNNING ?
	    kvd_agent_round_finish(d, r, &len, &markup, &n_markup) : NULL;
	kvd_agent_round_free(d, r);	/* the scheduler's list still holds j */
	if (j->state != JOB_TOOL_RUNNING) {
		free(t);
		free(markup);
		return;
	}
	if (!t) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return;
	}
	if (j->cancelled || !c || c->delete_pending) {
		free(t);
		free(markup);
		kvd_job_finish(d, j, KVD_FINISH_STOP);
		return;
	}
	j->tool_text = t;
	j->tool_text_len = len;
	j->tool_markup = markup;
	j->tool_n_markup = n_markup;
	j->state = JOB_TOOL_RESULTS;
}

/* The tool results' tokens (j->piece, made unlocked) join the
 * conversation; the job runs again. */
static void tools_apply(struct kvd *d, struct kvd_job *j, int rc)
{
	struct kvd_conv *c = j->conv;
	uint32_t before = c->n_tokens;

	free(j->tool_text);
	j->tool_text = NULL;
	free(j->tool_markup);
	j->tool_markup = NULL;
	if (!rc)
		rc = kvd_conv_append_piece(c, &j->piece);
	kvd_piece_free(&j->piece);
	if (rc) {
		kvd_job_fail(d, j, KVD_ERR_INTERNAL, "cannot tokenize the tool results");
		return;
	}
	d->m.tool_result_tokens += c->n_tokens - before;
	if (c->n_tokens + 1 >= d->ctx_len || j->n_gen >= j->max_new) {
		kvd_job_finish(d, j, KVD_FINISH_LENGTH);
		return;
	}
	/* usage sums the rounds: each round's context, and what was reused */
	j->n_prompt += c->n_tokens;
	j->n_cached += c->as.s.n_tokens;
	d->m.prompt_tokens += c->n_tokens;
	d->m.cached_tokens += c->as.s.n_tokens;
	d->m.session_hit_tokens += c->as.s.n_tokens;
	if (j->max_new > j->n_gen + (d->ctx_len - c->n_tokens))
		j->max_new = j->n_gen + (d->ctx_len - c->n_tokens);
	j->round_start = j->gen_len;
	j->round_tokens = 0;
	/* structured decoding applies to each round's assistant message: the
	 * workers' matchers start over (they are keyed by n_hist) */
	j->n_hist = 0;
	j->seq_id = __atomic_add_fetch(&d->next_seq_id, 1, __ATOMIC_RELAXED);
	/* gen offsets of this round map to conversation text from here */
	j->text_base = c->text_len - j->gen_len;
	kve_detok_init(&j->detok, d->tok);
	j->detok.at_start = 0;
	j->in_prefill = 1;
	/* its KV may have gone to disk while the tools ran: back first */
	if (kvd_tiering_need_kv(d, c)) {
		j->state = JOB_KV_WAIT;
		return;
	}
	kvd_resume_round(d, j);
}

/* The round's KV is where it will be (the arena, or gone): prefill the
 * tool results after it. */
void kvd_resume_round(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;

	j->state = JOB_RUNNING;
	if (!c->has_kv || (!c->as.s.n_blocks && !c->as.s.n_tokens)) {
		/* evicted while the tools ran: readmitted and recomputed like
		 * a preempted job (sharing what the prefix cache holds) */
		j->n_sched = 0;
		j->state = JOB_PREEMPTED;
		return;
	}
	j->n_sched = c->as.s.n_tokens;
	if (kvd_reserve_or_preempt(d, j, c->n_tokens) < 0)
		return;
	if (j->state == JOB_RUNNING)
		kvd_kstate_set(d, c, KVA_STATE_PREFILL, 0, 0);
}

/* ---- housekeeping ------------------------------------------------------------ */

/* Jobs that can no longer run: cancelled with nothing in flight, or
 * waiting on workers that have all been down for longer than a lease. */
static void tidy_jobs(struct kvd *d, uint64_t now)
{
	uint64_t limit = (uint64_t)d->cfg.lease_ms * 1000000ull;
	uint64_t pd = d->stage_down_since[KVD_ROLE_PREFILL];
	uint64_t dd = d->stage_down_since[KVD_ROLE_DECODE];
	int share = kvd_stages_shared(d);
	struct kvd_job *j;

	for (j = d->jobs; j; j = j->next) {
		int need_p, need_d;

		if (j->state == JOB_FINISHED || j->state == JOB_TOOL_RUNNING ||
		    j->state == JOB_TOOL_RESULTS || j->inflight)
			continue;
		if (j->cancelled) {
			kvd_job_finish(d, j, KVD_FINISH_STOP);
			continue;
		}
		if (j->state != JOB_RUNNING || !j->conv)
			continue;
		need_p = j->conv->n_tokens - j->n_sched > 1;
		need_d = !need_p;
		if (share ? (pd && dd && now - (pd > dd ? pd : dd) > limit) :
		    ((need_p && pd && now - pd > limit) || (need_d && dd && now - dd > limit)))
			kvd_job_fail(d, j, KVD_ERR_UNAVAILABLE,
				     "no worker able to run this request has been up for a "
				     "KV lease ([workers] lease_ms): the workers keep failing");
	}
}

/* Finished jobs leave the scheduler's list (their API side may hold them). */
static void sweep(struct kvd *d)
{
	struct kvd_job **pp, *j;

	d->jobs_tail = NULL;
	for (pp = &d->jobs; (j = *pp);) {
		if (j->state == JOB_FINISHED && !j->inflight && !j->let_go) {
			*pp = j->next;
			kvd_job_put(j);
			continue;
		}
		d->jobs_tail = j;
		pp = &j->next;
	}
}

static int all_ready(struct kvd *d)
{
	uint32_t i;

	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].state != W_READY &&
		    !d->workers[i].remote)	/* a remote host joins when it will */
			return 0;
	return 1;
}

static void record_turn(struct kvd *d, uint64_t t0)
{
	uint64_t us = (kvd_now_ns() - t0) / 1000;

	d->step_us[d->n_step_us++ % KVD_STEP_RING] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	kvd_hist_add(&d->m.step_ms, (double)us / 1000.0);
}

#define MAX_TOKENIZE 64

void *kvd_sched_main(void *arg)
{
	struct kvd *d = arg;
	struct kvd_job *tok[MAX_TOKENIZE];
	struct pollfd *pfd;
	pid_t *reap;
	uint32_t i, n_reap, n_tok;
	uint64_t t_turn;

	pfd = calloc(d->n_workers + 3, sizeof(*pfd));
	reap = calloc((size_t)d->n_workers * 4 + 8, sizeof(*reap));
	if (!pfd || !reap) {
		free(pfd);
		free(reap);
		return NULL;
	}
	pthread_mutex_lock(&d->lock);
	kvd_wakes_defer(d, 1);
	t_turn = kvd_now_ns();
	for (;;) {
		uint64_t now = kvd_now_ns(), next, dl;
		int n = 0, timeout, rc, did;
		struct kvd_round *r;
		struct kvd_job *j;
		uint64_t cnt;

		next = kvd_workers_tend(d, now);
		if (d->stop_now)
			break;
		if (!d->ready && all_ready(d)) {
			d->ready = 1;
			kvd_log(KVD_LOG_INFO, "sched", "all %u workers ready", d->n_workers);
		}
		while ((r = kvd_agent_next_done(d)))
			tools_done(d, r);
		/* spills and restores done, prefetches and overruns due */
		rc = kvd_tiering_poll(d, now);
		if (rc >= 0 && now + (uint64_t)rc * 1000000ull < next)
			next = now + (uint64_t)rc * 1000000ull;
		tidy_jobs(d, now);
		sweep(d);
		kvd_admit(d);
		kvd_steps_build(d);
		kvd_kstate_flush(d);
		dl = kvd_conv_expire(d, now);
		if (dl && dl < next)
			next = dl;
		kvd_toolwait_state_snap(d, now, 0);
		/* tool results to tokenize while the lock is dropped */
		n_tok = 0;
		for (j = d->jobs; j && n_tok < MAX_TOKENIZE; j = j->next)
			if (j->state == JOB_TOOL_RESULTS && j->tool_text) {
				j->refs++;
				tok[n_tok++] = j;
			}
		n_reap = d->n_reap;
		memcpy(reap, d->reap, n_reap * sizeof(*reap));
		d->n_reap = 0;
		pfd[n].fd = d->wake_fd;
		pfd[n++].events = POLLIN;
		if (kvd_kstate_fd(d) >= 0) {
			pfd[n].fd = kvd_kstate_fd(d);
			pfd[n++].events = POLLIN;
		}
		if (kvd_tiering_fd(d) >= 0) {
			pfd[n].fd = kvd_tiering_fd(d);
			pfd[n++].events = POLLIN;
		}
		for (i = 0; i < d->n_workers; i++) {
			struct kvd_worker *w = &d->workers[i];

			pfd[n].fd = w->sock;
			pfd[n++].events = w->sock < 0 ? 0 :
					  POLLIN | (w->tx.off < w->tx.len ? POLLOUT : 0);
		}
		now = kvd_now_ns();
		timeout = next <= now ? 0 : (int)((next - now) / 1000000ull) + 1;
		if (timeout > 250)
			timeout = 250;
#ifdef KVD_TEST_HOOKS
		kvd_audit(d);
#endif
		record_turn(d, t_turn);
		kvd_wakes_defer(d, 0);
		pthread_mutex_unlock(&d->lock);

		kvd_wakes_flush(d);
		kvd_workers_reap(reap, n_reap);
		kvd_toolwait_state_flush(d);
		did = 0;
		for (i = 0; i < n_tok; i++) {
			j = tok[i];
			/* the tools' output is plain text: it cannot close
			 * its turn */
			j->tool_rc = kvd_piece_make(d, j->tool_text, j->tool_text_len, 0,
						    &(struct kvd_markup){ j->tool_markup,
									  j->tool_n_markup, 0 },
						    &j->piece);
			did = 1;
		}
		rc = poll(pfd, (nfds_t)n, did ? 0 : timeout);

		pthread_mutex_lock(&d->lock);
		kvd_wakes_done(d);
		kvd_wakes_defer(d, 1);
		t_turn = kvd_now_ns();
		for (i = 0; i < n_tok; i++) {
			j = tok[i];
			if (j->state == JOB_TOOL_RESULTS)
				tools_apply(d, j, j->tool_rc);
			else
				kvd_piece_free(&j->piece);
			kvd_job_put(j);
		}
		if (rc <= 0)
			continue;
		if (pfd[0].revents & POLLIN)
			(void)!read(d->wake_fd, &cnt, sizeof(cnt));
		n = 1;
		if (kvd_kstate_fd(d) >= 0) {
			if (pfd[n].revents)
				kvd_kstate_poll(d);
			n++;
		}
		if (kvd_tiering_fd(d) >= 0)
			n++;	/* reaped at the top of the loop */
		for (i = 0; i < d->n_workers; i++, n++) {
			struct kvd_worker *w = &d->workers[i];

			if (w->sock < 0 || pfd[n].fd != w->sock || !pfd[n].revents)
				continue;
			if (pfd[n].revents & POLLOUT)
				kvd_worker_flush(d, w);
			if (w->sock >= 0 && (pfd[n].revents & (POLLIN | POLLHUP | POLLERR)))
				kvd_worker_readable(d, w);
		}
	}
	kvd_wakes_defer(d, 0);
	pthread_mutex_unlock(&d->lock);
	kvd_wakes_flush(d);
	pthread_mutex_lock(&d->lock);
	kvd_wakes_done(d);
	pthread_mutex_unlock(&d->lock);
	free(pfd);
	free(reap);
	return NULL;
}
