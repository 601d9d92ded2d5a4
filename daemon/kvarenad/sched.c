// SPDX-License-Identifier: MIT
/*
 * sched.c - the scheduler thread: the orchestrator's one loop.
 *
 * Each turn: restart dead workers, expire leases, admit queued jobs
 * (find or make the conversation, share cached prefix blocks, reserve
 * blocks), send prefill steps (one job each, to the cheapest idle prefill
 * worker) and decode steps (every decoding job, batched per idle decode
 * worker: continuous batching, since jobs join and leave between steps),
 * send the kernel this turn's state changes in one batch, then sleep in
 * poll() on the workers' sockets, the io_uring and the wake-up eventfd.
 * Results advance each job: its sampled token becomes text (stop
 * sequences held back), an event for its HTTP connection, and the next
 * decode input. A job's KV positions count only once a worker has
 * answered for them, so a step lost with its worker is simply resent.
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

#define MAX_STEP_RETRIES 3

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

static void finish(struct kvd *d, struct kvd_job *j, enum kvd_finish f)
{
	struct kvd_conv *c = j->conv;
	uint64_t now = kvd_now_ns();

	if (j->state == JOB_FINISHED)
		return;
	round_end(j);
	kvd_job_emit_done(j, f);
	j->state = JOB_FINISHED;
	d->m.completion_tokens += j->n_gen;
	kvd_tenant_charge(d, j->tenant, j->n_prompt - j->n_cached + j->n_gen);
	if (j->t_first && j->n_gen > 1)
		kvd_hist_add(&d->m.tpot, (double)(now - j->t_first) / 1e6 / (j->n_gen - 1));
	if (c) {
		uint32_t cls;

		c->job = NULL;
		kvd_conv_touch(c);
		if (c->delete_pending || !d->cfg.retention) {
			kvd_conv_free(d, c);
		} else if (j->round_start <= j->gen_len &&
			   tool_calls(d, j->tenant, j->gen + j->round_start,
				      j->gen_len - j->round_start, &cls)) {
			uint64_t pred = kvd_toolwait_predict_us(d, cls), keep = pred * 4;
			uint64_t lo = (uint64_t)d->cfg.toolwait_min_s * 1000000ull;
			uint64_t hi = (uint64_t)d->cfg.toolwait_max_s * 1000000ull;

			keep = keep < lo ? lo : keep > hi ? hi : keep;
			c->tool_class = cls;
			c->wait_started_ns = now;
			c->deadline_ns = now + keep * 1000ull;
			kvd_kstate_set(d, c, KVA_STATE_TOOL_WAIT, cls, pred);
			/* keep, spill or discard its KV for the wait */
			kvd_tiering_tool_wait(d, c, pred);
		} else {
			c->tool_class = 0;
			c->deadline_ns = now + (uint64_t)d->cfg.idle_retention_s * 1000000000ull;
			kvd_kstate_set(d, c, KVA_STATE_IDLE, 0, 0);
		}
	}
	j->conv = NULL;
	pthread_cond_broadcast(&d->idle_cond);
}

static void fail(struct kvd *d, struct kvd_job *j, enum kvd_err_kind kind,
		 const char *msg)
{
	struct kvd_conv *c = j->conv;

	kvd_log(KVD_LOG_WARN, "sched", "%s: %s", j->request_id, msg);
	kvd_job_emit_error(j, kind, msg);
	j->state = JOB_FINISHED;
	d->m.requests_failed++;
	kvd_tenant_charge(d, j->tenant, j->n_gen);
	if (c) {
		c->job = NULL;
		/* what the failed step may have left is not trusted: drop it */
		if (c->delete_pending)
			kvd_conv_free(d, c);
		else
			kvd_conv_drop_kv(d, c);
	}
	j->conv = NULL;
	pthread_cond_broadcast(&d->idle_cond);
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

static void on_token(struct kvd *d, struct kvd_job *j, int32_t tok, float lp,
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
		bad = kvd_conv_append_tokens(d, c, txt, tl, 0, NULL) || gen_append(j, txt, tl);
		free(txt);
		if (bad) {
			fail(d, j, KVD_ERR_INTERNAL, "out of memory");
			return;
		}
		round_end(j);
		if (!kvd_agent_try(d, j))
			finish(d, j, KVD_FINISH_STOP);
		return;
	}
#endif
	j->round_tokens++;
	j->n_gen++;
	j->next_token = tok;
	if (j->smp && kvd_sampling_note(j, tok)) {
		fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return;
	}
	if (j->cw.kind && tok != d->eos && tok != d->eot && tok != d->eom) {
		if (j->n_hist == j->cap_hist) {
			uint32_t cap = j->cap_hist ? j->cap_hist * 2 : 64;
			int32_t *h = realloc(j->hist, cap * sizeof(*h));

			if (!h) {
				fail(d, j, KVD_ERR_INTERNAL, "out of memory");
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
		finish(d, j, KVD_FINISH_STOP);
		return;
	}
	n = kve_detok_push(&j->detok, tok, raw, sizeof(raw));
	n = n > 0 ? (int)kvd_utf8_clean(raw, (size_t)n, piece) : 0;
	if (kvd_conv_push_token(c, tok, piece, (size_t)n, j->detok.n_pending == 0) ||
	    gen_append(j, piece, (size_t)n)) {
		fail(d, j, KVD_ERR_INTERNAL, "out of memory");
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

			while (k && (c->tok_end[k - 1] == UINT32_MAX ||
				     c->tok_end[k - 1] > j->text_base + stop))
				k--;
			if (kvd_conv_truncate(d, c, k))
				kvd_conv_drop_kv(d, c);
		}
		finish(d, j, KVD_FINISH_STOP);
		return;
	}
	if (safe < j->emitted)
		safe = j->emitted;
	kvd_job_emit_token(j, j->gen + j->emitted, safe - j->emitted, tok, lp, top, n_top);
	j->emitted = safe;
	if (j->n_gen >= j->max_new || c->n_tokens >= d->ctx_len) {
		finish(d, j, KVD_FINISH_LENGTH);
		return;
	}
	j->state = JOB_DECODE_READY;
}

/* ---- server-side tool rounds ---------------------------------------------- */

static void resume_round(struct kvd *d, struct kvd_job *j);

/* A round's tools ran: append their results as tool turns (the chat
 * template's text), prefill only those tokens, decode the next round. */
static void tools_done(struct kvd *d, struct kvd_round *r)
{
	struct kvd_job *j = kvd_agent_round_job(r);
	struct kvd_conv *c = j->conv;
	uint32_t before;
	size_t len = 0, n_markup = 0;
	struct kvd_span *markup = NULL;
	char *t;
	int rc;

	t = j->state == JOB_TOOL_RUNNING ?
	    kvd_agent_round_finish(d, r, &len, &markup, &n_markup) : NULL;
	kvd_agent_round_free(d, r);	/* the scheduler's list still holds j */
	if (j->state != JOB_TOOL_RUNNING) {
		free(t);
		free(markup);
		return;
	}
	if (!t) {
		fail(d, j, KVD_ERR_INTERNAL, "out of memory");
		return;
	}
	if (j->cancelled || !c || c->delete_pending) {
		free(t);
		free(markup);
		finish(d, j, KVD_FINISH_STOP);
		return;
	}
	before = c->n_tokens;
	/* the tools' output is plain text: it cannot close its turn */
	rc = kvd_conv_append_tokens(d, c, t, len, 0,
				    &(struct kvd_markup){ markup, n_markup, 0 });
	free(t);
	free(markup);
	if (rc) {
		fail(d, j, KVD_ERR_INTERNAL, "cannot tokenize the tool results");
		return;
	}
	d->m.tool_result_tokens += c->n_tokens - before;
	if (c->n_tokens + 1 >= d->ctx_len || j->n_gen >= j->max_new) {
		finish(d, j, KVD_FINISH_LENGTH);
		return;
	}
	/* its KV may have gone to disk during the tools: back first */
	if (kvd_tiering_need_kv(d, c)) {
		j->state = JOB_KV_WAIT;
		return;
	}
	resume_round(d, j);
}

/* The round's KV is in the arena: prefill the tool results. */
static void resume_round(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;
	int rc;

	rc = kvd_conv_reserve(d, c, c->n_tokens - c->as.s.n_tokens + 1);
	if (rc) {
		fail(d, j, rc == -EDQUOT ? KVD_ERR_QUOTA : KVD_ERR_BUSY,
		     rc == -EDQUOT ? "the tenant's KV budget is used up" :
				     "the KV arena cannot hold the tool results");
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
	j->state = JOB_PREFILL_READY;
	kvd_kstate_set(d, c, KVA_STATE_PREFILL, 0, 0);
}

/* ---- admission ------------------------------------------------------------ */

/* 0 admitted, 1 wait (no room yet), <0 failed (job finished). */
static int admit(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c;
	uint32_t keep = 0, kv0, sess_hit = 0;
	int rc, fresh = 0;

	if (!j->conv) {
		struct kvd_markup pm = { j->markup, j->n_markup, 0 };

		c = kvd_conv_match(d, j->tenant, j->session_key, j->prompt, j->prompt_len,
				   j->markup_known ? &pm : NULL, &keep);
		if (c && (!d->cfg.retention || !keep))
			c = NULL;
		if (c) {
			if (kvd_conv_truncate(d, c, keep)) {
				kvd_conv_drop_kv(d, c);
				c = NULL;
			}
		}
		if (c) {
			sess_hit = c->has_kv ? c->as.s.n_tokens : 0;
			pm.off = c->text_len;
			rc = kvd_conv_append_tokens(d, c, j->prompt + c->text_len,
						    j->prompt_len - c->text_len, 0,
						    j->markup_known ? &pm : NULL);
		} else {
			c = kvd_conv_new(d, j->tenant, j->session_key);
			if (!c) {
				fail(d, j, KVD_ERR_BUSY, "too many sessions in use");
				return -EBUSY;
			}
			fresh = 1;
			rc = kvd_conv_append_tokens(d, c, j->prompt, j->prompt_len, 1,
						    j->markup_known ? &pm : NULL);
		}
		c->job = j;
		j->conv = c;
		if (rc) {
			fail(d, j, KVD_ERR_INTERNAL, "cannot tokenize the prompt");
			if (fresh)
				kvd_conv_free(d, c);
			return rc;
		}
		if (c->n_tokens >= d->ctx_len) {
			fail(d, j, KVD_ERR_TOO_LONG, "the conversation exceeds the context length");
			return -E2BIG;
		}
		if (c->wait_started_ns && c->tool_class) {
			kvd_toolwait_record(d, c->tool_class,
					    (kvd_now_ns() - c->wait_started_ns) / 1000);
			c->wait_started_ns = 0;
		}
		j->text_base = c->text_len;
		kve_detok_init(&j->detok, d->tok);
		j->detok.at_start = 0;	/* the reply continues a text */
		j->n_prompt = c->n_tokens;
		(void)sess_hit;
	}
	c = j->conv;
	/* its KV may be on disk: the job waits for the restore */
	if (kvd_tiering_need_kv(d, c))
		return 1;
	rc = kvd_conv_open_kv(d, c);
	if (rc == -ENOSPC || rc == -EBUSY) {
		kvd_make_room(d, 1);
		rc = kvd_conv_open_kv(d, c);
	}
	if (rc) {
		if (rc == -ENOSPC || rc == -EBUSY)
			return 1;
		fail(d, j, KVD_ERR_INTERNAL, "cannot open a kvarena session");
		return rc;
	}
	kv0 = c->as.s.n_tokens;
	if (!kv0 && d->cfg.prefix_cache)
		kv0 = kvd_prefix_attach(d, c, c->n_tokens - 1);
	rc = kvd_conv_reserve(d, c, c->n_tokens - c->as.s.n_tokens + 1);
	if (rc == -EDQUOT) {
		fail(d, j, KVD_ERR_QUOTA, "the tenant's KV budget is used up");
		return rc;
	}
	if (rc)
		return 1;
	j->n_cached = c->as.s.n_tokens;
	if (j->n_cached > c->n_tokens - 1)
		j->n_cached = c->n_tokens - 1;
	d->m.prompt_tokens += j->n_prompt;
	d->m.cached_tokens += j->n_cached;
	if (kv0 && !sess_hit)
		d->m.prefix_hit_tokens += j->n_cached;
	else
		d->m.session_hit_tokens += j->n_cached;
	j->max_new = j->s.max_tokens ? j->s.max_tokens : d->cfg.max_tokens_cap;
	if (j->max_new > d->ctx_len - c->n_tokens)
		j->max_new = d->ctx_len - c->n_tokens;
	j->state = JOB_PREFILL_READY;
	kvd_kstate_set(d, c, KVA_STATE_PREFILL, 0, 0);
	return 0;
}

/*
 * Conversations that start together with the same system prompt (agents
 * fanned out by one client) would each prefill it: the prefix cache only
 * knows blocks once a prefill has answered. A new conversation whose
 * prompt shares at least two blocks' worth of text with one being
 * prefilled for the same tenant waits for it and then shares its blocks;
 * with prefill steps serialized per worker this costs it nothing.
 */
static int wait_for_shared_prefill(struct kvd *d, const struct kvd_job *j)
{
	const struct kvd_job *o;
	size_t want = (size_t)d->geom.block_tokens * 2 * 2;	/* ~2 bytes per token */

	if (!d->cfg.prefix_cache || j->conv)
		return 0;
	for (o = d->jobs; o; o = o->next) {
		size_t n = 0, m;

		if (o == j || o->tenant != j->tenant ||
		    (o->state != JOB_PREFILL_READY && o->state != JOB_PREFILLING))
			continue;
		m = o->prompt_len < j->prompt_len ? o->prompt_len : j->prompt_len;
		while (n < m && o->prompt[n] == j->prompt[n])
			n++;
		if (n >= want)
			return 1;
	}
	return 0;
}

static int workers_up(struct kvd *d, uint32_t role)
{
	uint32_t i;

	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].role == role && d->workers[i].fails_in_row < 6 &&
		    kvd_worker_joinable(d, &d->workers[i]))
			return 1;
	return 0;
}

static void run_jobs(struct kvd *d)
{
	struct kvd_job *j, **pp, *batch[256];
	uint32_t running = 0;

	/* admission, oldest first; sweep finished jobs */
	for (j = d->jobs; j; j = j->next)
		if (j->state != JOB_QUEUED && j->state != JOB_FINISHED)
			running++;
	for (pp = &d->jobs; (j = *pp);) {
		if (j->state == JOB_FINISHED) {
			*pp = j->next;
			kvd_job_put(j);
			continue;
		}
		if (j->cancelled && j->worker < 0 && j->state != JOB_TOOL_RUNNING) {
			if (j->state == JOB_QUEUED)
				d->n_queued--;
			finish(d, j, KVD_FINISH_STOP);
			pp = &j->next;
			continue;
		}
		if (j->state == JOB_KV_WAIT) {
			if (!kvd_tiering_need_kv(d, j->conv))
				resume_round(d, j);
			pp = &j->next;
			continue;
		}
		if (j->state == JOB_QUEUED) {
			int rc = wait_for_shared_prefill(d, j) ? 1 : admit(d, j);

			if (rc == 1 && !running && !kvd_tiering_busy(d)) {
				/* nothing running will free blocks for it (nor
				 * will a spill or restore in flight) */
				kvd_make_room(d, d->geom.blocks_total);
				rc = admit(d, j);
				if (rc == 1 && !kvd_tiering_busy(d)) {
					fail(d, j, KVD_ERR_BUSY,
					     "the KV arena cannot hold this conversation");
					rc = -ENOSPC;
				}
			}
			if (rc != 1)
				d->n_queued--;
			if (rc == 0)
				running++;
		}
		pp = &j->next;
	}
	for (d->jobs_tail = d->jobs; d->jobs_tail && d->jobs_tail->next;
	     d->jobs_tail = d->jobs_tail->next)
		;

	/* prefill: one job per step, cheapest idle prefill worker */
	for (j = d->jobs; j; j = j->next) {
		struct kvd_worker *w;
		uint32_t new_tokens;

		if (j->state != JOB_PREFILL_READY)
			continue;
		if (j->retries > MAX_STEP_RETRIES || !workers_up(d, KVD_ROLE_PREFILL)) {
			fail(d, j, KVD_ERR_UNAVAILABLE, "no prefill worker could run this step");
			continue;
		}
		new_tokens = j->conv->n_tokens - j->conv->as.s.n_tokens;
		w = kvd_route(d, KVD_ROLE_PREFILL, new_tokens, 0);
		if (!w)
			break;
		if (kvd_worker_send_step(d, w, KVD_STEP_PREFILL, &j, 1))
			kvd_worker_lost(d, w, "send failed");
		else
			d->m.steps_prefill++;
	}
	/* copy mode: KV bytes to a decode worker */
	for (j = d->jobs; j; j = j->next) {
		struct kvd_worker *w;

		if (j->state != JOB_KV_LOAD_READY)
			continue;
		w = kvd_route(d, KVD_ROLE_DECODE, 0, 0);
		if (!w)
			break;
		if (kvd_worker_send_kv_load(d, w, j))
			kvd_worker_lost(d, w, "send failed");
	}
	/* decode: continuous batching over every ready job */
	for (;;) {
		struct kvd_worker *w = NULL;
		uint32_t n = 0, max = d->cfg.max_batch < 256 ? d->cfg.max_batch : 256;

		for (j = d->jobs; j && n < max; j = j->next) {
			if (j->state != JOB_DECODE_READY)
				continue;
			if (j->retries > MAX_STEP_RETRIES || !workers_up(d, KVD_ROLE_DECODE)) {
				fail(d, j, KVD_ERR_UNAVAILABLE, "no decode worker could run this step");
				continue;
			}
			if (!w && !(w = kvd_route(d, KVD_ROLE_DECODE, 0, 0)))
				break;
			if (kvd_conv_reserve(d, j->conv, 1)) {
				finish(d, j, KVD_FINISH_LENGTH);
				continue;
			}
			kvd_kstate_set(d, j->conv, KVA_STATE_DECODE, 0, 0);
			batch[n++] = j;
		}
		if (!n)
			break;
		if (kvd_worker_send_step(d, w, KVD_STEP_DECODE, batch, n)) {
			kvd_worker_lost(d, w, "send failed");
			break;
		}
		d->m.steps_decode++;
		d->m.decode_seqs += n;
	}
}

/* ---- results ---------------------------------------------------------------- */

static struct kvd_job *inflight(struct kvd_worker *w, uint64_t seq_id)
{
	uint32_t i;

	for (i = 0; i < w->n_inflight; i++)
		if (w->inflight[i]->seq_id == seq_id)
			return w->inflight[i];
	return NULL;
}

static void release_inflight(struct kvd *d, struct kvd_worker *w)
{
	uint32_t i;

	for (i = 0; i < w->n_inflight; i++) {
		struct kvd_job *j = w->inflight[i];

		j->worker = -1;
		if (j->state == JOB_PREFILLING)
			j->state = JOB_PREFILL_READY;
		else if (j->state == JOB_DECODING)
			j->state = JOB_DECODE_READY;
		else if (j->state == JOB_KV_LOADING)
			j->state = JOB_KV_LOAD_READY;
		kvd_job_put(j);
	}
	w->n_inflight = 0;
	w->queued_tokens = 0;
	w->state = W_IDLE;
	(void)d;
}

static int on_result(struct kvd *d, struct kvd_worker *w, const char *p, size_t len)
{
	const char *end = p + len;
	struct kvd_result r;
	uint32_t i;

	if (len < sizeof(r) || w->state != W_BUSY)
		return -EPROTO;
	memcpy(&r, p, sizeof(r));
	p += sizeof(r);
	if (r.step_id != w->step_id)
		return -EPROTO;
	if (r.status) {
		kvd_log(KVD_LOG_WARN, "sched", "worker %d: step failed: %s", w->index,
			strerror(-r.status));
		for (i = 0; i < w->n_inflight; i++)
			w->inflight[i]->retries++;
		release_inflight(d, w);
		return 0;
	}
	if (w->step_kind == KVD_STEP_PREFILL) {
		kvd_hist_add(&d->m.prefill_ms, (double)r.compute_ns / 1e6);
		/* what recomputing costs, for the keep/spill/discard choice */
		kvd_tiering_prefill_observed(d, w->queued_tokens, r.compute_ns);
	}
	if (r.n_seq != w->n_inflight)
		return -EPROTO;
	d->m.kv_bytes_copied += r.kv_bytes;
	for (i = 0; i < r.n_seq; i++) {
		struct kvd_result_seq rs;
		const struct kvd_top *top;
		struct kvd_job *j;
		size_t kvb;

		if ((size_t)(end - p) < sizeof(rs))
			return -EPROTO;
		memcpy(&rs, p, sizeof(rs));
		p += sizeof(rs);
		if (rs.n_top > KVD_MAX_TOP_LOGPROBS ||
		    (size_t)(end - p) < rs.n_top * sizeof(struct kvd_top))
			return -EPROTO;
		top = (const struct kvd_top *)p;
		p += rs.n_top * sizeof(struct kvd_top);
		kvb = (size_t)rs.n_kv_blocks * d->geom.kv_block_bytes;
		if ((size_t)(end - p) < kvb)
			return -EPROTO;
		j = inflight(w, rs.seq_id);
		if (!j || rs.token < 0 || (uint32_t)rs.token >= d->vocab)
			return -EPROTO;
		j->rng = rs.rng;
		if (j->conv) {
			struct kvd_conv *c = j->conv;

			c->as.s.n_tokens = w->step_kind == KVD_STEP_PREFILL ? c->n_tokens :
					   c->as.s.n_tokens + 1;
			kvd_prefix_offer(d, c);
			if (w->step_kind == KVD_STEP_PREFILL && rs.n_kv_blocks) {
				/* copy mode: keep the bytes for a decode worker */
				uint32_t b;
				char *q;

				if (rs.first_block + rs.n_kv_blocks > c->as.s.n_blocks)
					return -EPROTO;
				free(j->kv_payload);
				j->kv_payload_len = (size_t)rs.n_kv_blocks * (4 + d->geom.kv_block_bytes);
				j->kv_payload = malloc(j->kv_payload_len);
				if (j->kv_payload) {
					q = j->kv_payload;
					for (b = 0; b < rs.n_kv_blocks; b++, q += 4)
						memcpy(q, &c->as.s.block_table[rs.first_block + b], 4);
					memcpy(q, p, kvb);
				}
			}
		}
		p += kvb;
		if (j->state == JOB_FINISHED || !j->conv)
			continue;
		if (j->cancelled) {
			finish(d, j, KVD_FINISH_STOP);
			continue;
		}
		if (w->step_kind == KVD_STEP_PREFILL)
			d->m.handoffs++;
		on_token(d, j, rs.token, rs.logprob, top, rs.n_top);
		if (j->state == JOB_DECODE_READY && w->step_kind == KVD_STEP_PREFILL &&
		    j->kv_payload)
			j->state = JOB_KV_LOAD_READY;
	}
	if (p != end)
		return -EPROTO;
	for (i = 0; i < w->n_inflight; i++) {
		w->inflight[i]->worker = -1;
		if (w->inflight[i]->state == JOB_PREFILLING ||
		    w->inflight[i]->state == JOB_DECODING)
			w->inflight[i]->state = JOB_DECODE_READY;
		kvd_job_put(w->inflight[i]);
	}
	w->n_inflight = 0;
	w->queued_tokens = 0;
	w->state = W_IDLE;
	w->fails_in_row = 0;
	return 0;
}

static int on_kv_loaded(struct kvd *d, struct kvd_worker *w, const char *p, size_t len)
{
	struct kvd_result r;
	struct kvd_job *j;

	if (len != sizeof(r) || w->state != W_BUSY || w->step_kind || w->n_inflight != 1)
		return -EPROTO;
	memcpy(&r, p, sizeof(r));
	if (r.step_id != w->step_id)
		return -EPROTO;
	d->m.kv_bytes_copied += r.kv_bytes;
	j = w->inflight[0];
	free(j->kv_payload);
	j->kv_payload = NULL;
	j->kv_payload_len = 0;
	j->worker = -1;
	if (j->state == JOB_KV_LOADING)
		j->state = JOB_DECODE_READY;
	kvd_job_put(j);
	w->n_inflight = 0;
	w->state = W_IDLE;
	return 0;
}

static void on_worker_readable(struct kvd *d, struct kvd_worker *w, void **buf,
			       size_t *cap)
{
	uint16_t type;
	size_t len;
	int rc;

	pthread_mutex_unlock(&d->lock);
	rc = kvd_msg_recv(w->sock, &type, buf, cap, &len, NULL);
	pthread_mutex_lock(&d->lock);
	if (rc <= 0) {
		kvd_worker_lost(d, w, rc ? strerror(-rc) : "exited");
		return;
	}
	if (type == KVD_MSG_READY && w->state == W_STARTING && len == sizeof(struct kvd_ready)) {
		struct kvd_ready rd;

		memcpy(&rd, *buf, sizeof(rd));
		rd.message[sizeof(rd.message) - 1] = 0;
		rd.backend[sizeof(rd.backend) - 1] = 0;
		if (rd.status || rd.vocab != d->vocab) {
			kvd_log(KVD_LOG_ERR, "workers", "worker %d cannot serve: %s", w->index,
				rd.status ? rd.message : "vocabulary differs from the model's");
			kvd_worker_lost(d, w, "failed to start");
			return;
		}
		snprintf(w->backend, sizeof(w->backend), "%s", rd.backend);
		w->state = W_IDLE;
		kvd_log(KVD_LOG_INFO, "workers", "%s worker %d ready: pid %d, backend %s",
			w->role == KVD_ROLE_PREFILL ? "prefill" : "decode", w->index, (int)w->pid,
			w->backend);
		return;
	}
	if (type == KVD_MSG_RESULT)
		rc = on_result(d, w, *buf, len);
	else if (type == KVD_MSG_KV_LOADED)
		rc = on_kv_loaded(d, w, *buf, len);
	else
		rc = -EPROTO;
	if (rc)
		kvd_worker_lost(d, w, "protocol error");
}

/* ---- housekeeping ------------------------------------------------------------ */

static void reap_and_restart(struct kvd *d, uint64_t now)
{
	uint32_t i;
	int st;

	for (i = 0; i < d->n_workers; i++) {
		struct kvd_worker *w = &d->workers[i];

		if (w->pid > 0 && waitpid(w->pid, &st, WNOHANG) == w->pid) {
			w->pid = 0;
			kvd_worker_lost(d, w, WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited");
		}
		/* a step's lease: lease_ms, plus lease_per_token_ms for each
		 * prompt token it prefills (slow machines, long prompts) */
		if (w->state == W_BUSY && now - w->step_started_ns >
			(uint64_t)d->cfg.lease_ms * 1000000ull +
			(uint64_t)w->queued_tokens * d->cfg.lease_per_token_ms * 1000000ull) {
			d->m.lease_expiries++;
			kvd_worker_lost(d, w, "KV lease expired");
		}
		if (w->state == W_DOWN && now >= w->next_start_ns && !d->stopping) {
			int rc = kvd_worker_spawn(d, w);

			if (rc)
				kvd_log(KVD_LOG_ERR, "workers", "restart worker %d: %s", w->index,
					strerror(-rc));
		}
	}
}

static void expire_convs(struct kvd *d, uint64_t now)
{
	struct kvd_conv *c, *next;

	for (c = d->convs; c; c = next) {
		next = c->next;
		if (c->job || !c->has_kv || !c->deadline_ns || now < c->deadline_ns || c->tier_op)
			continue;
		kvd_log(KVD_LOG_DEBUG, "sched", "%s: retention over, KV released", c->id);
		kvd_tiering_expire(d, c);
	}
}

static int all_ready(struct kvd *d)
{
	uint32_t i;

	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].state != W_IDLE && d->workers[i].state != W_BUSY &&
		    !d->workers[i].remote)	/* a remote host joins when it will */
			return 0;
	return 1;
}

void *kvd_sched_main(void *arg)
{
	struct kvd *d = arg;
	struct pollfd *pfd;
	void *buf = NULL;
	size_t cap = 0;
	uint32_t i;

	pfd = calloc(d->n_workers + 3, sizeof(*pfd));
	if (!pfd)
		return NULL;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		uint64_t now = kvd_now_ns();
		int n = 0, timeout = 250, rc, next;
		uint64_t cnt;

		reap_and_restart(d, now);
		if (d->stop_now)
			break;
		if (!d->ready && all_ready(d)) {
			d->ready = 1;
			kvd_log(KVD_LOG_INFO, "sched", "all %u workers ready", d->n_workers);
		}
		{
			struct kvd_round *r;

			while ((r = kvd_agent_next_done(d)))
				tools_done(d, r);
		}
		/* spills and restores done, prefetches and overruns due */
		next = kvd_tiering_poll(d, now);
		if (next >= 0 && next < timeout)
			timeout = next;
		run_jobs(d);
		kvd_kstate_flush(d);
		expire_convs(d, now);
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
			pfd[n].fd = d->workers[i].sock;
			pfd[n++].events = d->workers[i].sock >= 0 ? POLLIN : 0;
		}
		pthread_mutex_unlock(&d->lock);
		rc = poll(pfd, (nfds_t)n, timeout);
		pthread_mutex_lock(&d->lock);
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
			on_worker_readable(d, w, &buf, &cap);
		}
	}
	pthread_mutex_unlock(&d->lock);
	free(buf);
	free(pfd);
	return NULL;
}
