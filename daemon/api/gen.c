// SPDX-License-Identifier: MIT
/*
 * gen.c - the life of one generation request, whatever API asked for it
 * (gen.h): render the normalized conversation, offer the server-side
 * tools, compile nothing but describe the constraint, submit n jobs, then
 * turn each job's events into content, tool calls (tool_call.c's parser)
 * and server-side tool runs, and hand them to the front end in order.
 * Calls to server-side tools are held back until the orchestrator says it
 * ran them. Nothing here waits: the HTTP layer calls gen_pump() or
 * gen_sse_read() when a job has news (park.c) or gen_wake_at() passes;
 * each look polls the connection for a hang-up (at most every
 * WAIT_TICK_MS while tokens flow) and cancels the jobs when the client is
 * gone.
 *
 * Not here: request formats (chat_request.c and the front ends), output
 * formats (response.c and the front ends), HTTP (api.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api_internal.h"
#include "chat.h"
#include "log.h"
#include "response.h"
#include "turn_cache.h"

#define WAIT_TICK_MS 200
#define SSE_KEEPALIVE_MS 15000
#define CANCEL_WAIT_MS 5000		/* for DONE after kvd_job_cancel */

struct held_call {
	struct tc_call call;
	char *name;
	struct strbuf args;
};

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
		(double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The peer closed its end (or the socket failed). */
static int peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	if (fd < 0)
		return 0;
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

struct gen *gen_new(struct kvd_api *a, const struct gen_ops *ops, const char *id_prefix)
{
	struct gen *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->refs = 1;
	g->a = a;
	g->ops = ops;
	g->fd = -1;
	g->n = 1;
	for (unsigned i = 0; i < GEN_MAX_CHOICES; i++) {
		g->ch[i].index = i;
		g->ch[i].g = g;
	}
	api_make_id(g->id, sizeof(g->id), id_prefix);
	g->created = (int64_t)time(NULL);
	g->fingerprint = kvd_system_fingerprint(a->d);
	return g;
}

void gen_ref(struct gen *g)
{
	__atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
}

static void held_clear(struct gen_choice *c)
{
	for (size_t i = 0; i < c->n_held; i++) {
		free(c->held[i].name);
		sb_free(&c->held[i].args);
	}
	free(c->held);
	c->held = NULL;
	c->n_held = 0;
	c->holding = 0;
}

void gen_unref(struct gen *g)
{
	if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (g->ops && g->ops->free)
		g->ops->free(g);
	for (unsigned i = 0; i < GEN_MAX_CHOICES; i++) {
		struct gen_choice *c = &g->ch[i];

		if (c->job)
			kvd_job_free(c->job);
		tc_stream_free(&c->ts);
		sb_free(&c->raw);
		sb_free(&c->content);
		sb_free(&c->reasoning);
		sb_free(&c->pending);
		sb_free(&c->call_text);
		free(c->calls);
		free(c->offs);
		json_decref(c->logprobs);
		json_decref(c->tool_runs);
		held_clear(c);
	}
	chat_request_free(&g->cr);
	chat_prompt_free(&g->prompt);
	free(g->c_json);
	free(g->markup);
	sb_free(&g->out);
	free(g);
}

/* ---------------------------------------------------------------- output */

void gen_sse_raw(struct gen *g, const char *text)
{
	sb_adds(&g->out, text);
}

void gen_sse_data(struct gen *g, char *json)
{
	if (!json) {
		g->out.oom = 1;
		return;
	}
	sb_adds(&g->out, "data: ");
	sb_adds(&g->out, json);
	sb_adds(&g->out, "\n\n");
	free(json);
}

void gen_sse_event(struct gen *g, const char *name, char *json)
{
	if (!json) {
		g->out.oom = 1;
		return;
	}
	sb_adds(&g->out, "event: ");
	sb_adds(&g->out, name);
	sb_adds(&g->out, "\n");
	gen_sse_data(g, json);
}

char *gen_obfuscate(const struct gen *g, char *json)
{
	static const char field[] = ",\"obfuscation\":\"";
	static const char alnum[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	unsigned char rnd[GEN_OBFUSCATION_QUANTUM];
	size_t len, base, pad;
	char *out;

	if (!json || !g->cr.obfuscate)
		return json;
	len = strlen(json);
	if (!len || json[len - 1] != '}') {
		free(json);
		return NULL;
	}
	/* the object less its '}', the field, the padding, '"}' */
	base = len - 1 + sizeof(field) - 1 + 2;
	pad = GEN_OBFUSCATION_QUANTUM - base % GEN_OBFUSCATION_QUANTUM;
	out = malloc(base + pad + 1);
	if (!out || getrandom(rnd, pad, 0) != (ssize_t)pad) {
		free(out);
		free(json);
		return NULL;
	}
	memcpy(out, json, len - 1);
	memcpy(out + len - 1, field, sizeof(field) - 1);
	for (size_t i = 0; i < pad; i++)
		out[len - 1 + sizeof(field) - 1 + i] = alnum[rnd[i] % (sizeof(alnum) - 1)];
	memcpy(out + base + pad - 2, "\"}", 3);
	free(json);
	return out;
}

const struct tc_call *gen_calls(struct gen_choice *c)
{
	/* names and arguments are kept as offsets into call_text while it
	 * grows; pointers are made when asked for */
	for (size_t i = 0; i < c->n_calls; i++) {
		c->calls[i].name = c->call_text.s + c->offs[2 * i];
		c->calls[i].arguments = c->call_text.s + c->offs[2 * i + 1];
	}
	return c->calls;
}

const char *gen_finish_reason(const struct gen_choice *c)
{
	if (c->cancelled && c->n_calls && !c->g->client_gone)
		return "tool_calls";	/* stopped after one call */
	return resp_finish_reason(c->finish, c->n_calls);
}

/* ---------------------------------------------------------------- events */

static void gen_fail(struct gen *g, const struct api_error *e)
{
	if (!g->failed) {
		g->failed = 1;
		g->err = *e;
	}
	g->finished = 1;
}

static void gen_oom(struct gen *g)
{
	struct api_error e;

	api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
	gen_fail(g, &e);
}

/* 1 when name is a server-side tool offered to this request */
static int offered_stool(const struct gen *g, const char *name)
{
	size_t i;
	json_t *f;

	json_array_foreach(g->a->stools, i, f)
		if (i < 32 && (g->stools & (1u << i)) &&
		    !strcmp(json_string_value(json_object_get(f, "name")), name))
			return 1;
	return 0;
}

static int choice_emit(void *ctx, enum tc_event ev, const char *text, size_t len,
		       const struct tc_call *call);

/* Held calls the orchestrator did not run go to the client as its own. */
static int held_release(struct gen_choice *c)
{
	struct held_call *h = c->held;
	size_t n = c->n_held;
	int rc = 0;

	c->held = NULL;
	c->n_held = 0;
	c->replaying = 1;
	for (size_t i = 0; i < n; i++) {
		if (!rc) {
			h[i].call.name = h[i].name;
			rc = choice_emit(c, TC_CALL_START, NULL, 0, &h[i].call);
		}
		if (!rc && h[i].args.len)
			rc = choice_emit(c, TC_CALL_ARGS, h[i].args.s, h[i].args.len, &h[i].call);
		if (!rc)
			rc = choice_emit(c, TC_CALL_END, NULL, 0, &h[i].call);
		free(h[i].name);
		sb_free(&h[i].args);
	}
	free(h);
	c->replaying = 0;
	return rc;
}

static void flush_pending(struct gen_choice *c, json_t *logprobs)
{
	struct gen *g = c->g;

	if ((c->pending.len || logprobs) && g->ops->content)
		g->ops->content(g, c, c->pending.s ? c->pending.s : "", c->pending.len,
				logprobs);
	else
		json_decref(logprobs);
	sb_reset(&c->pending);
}

/* tc_stream's output: content, and calls as they are generated. */
static int choice_emit(void *ctx, enum tc_event ev, const char *text, size_t len,
		       const struct tc_call *call)
{
	struct gen_choice *c = ctx;
	struct gen *g = c->g;
	struct tc_call *calls;
	size_t *offs;

	if (c->cancelled)	/* parallel_tool_calls false: one call only */
		return 0;
	/* ... also when the job goes on (the decoder allows one call; an
	 * orchestrator that wrote more anyway: the rest are dropped) */
	if (!g->parallel && ev != TC_CONTENT && (c->dropping || (ev == TC_CALL_START &&
	    c->n_calls + c->n_held >= 1))) {
		c->dropping = ev != TC_CALL_END;
		return 0;
	}
	if (!c->replaying) {
		if (ev == TC_CALL_START && g->stools && offered_stool(g, call->name)) {
			struct held_call *h = realloc(c->held, (c->n_held + 1) * sizeof(*h));

			if (!h)
				return -ENOMEM;
			c->held = h;
			h = &c->held[c->n_held];
			memset(h, 0, sizeof(*h));
			h->call = *call;
			h->name = strdup(call->name);
			if (!h->name)
				return -ENOMEM;
			c->n_held++;
			c->holding = 1;
			return 0;
		}
		if (c->holding && ev == TC_CALL_ARGS) {
			sb_add(&c->held[c->n_held - 1].args, text, len);
			return c->held[c->n_held - 1].args.oom ? -ENOMEM : 0;
		}
		if (c->holding && ev == TC_CALL_END) {
			c->holding = 0;
			return 0;
		}
		/* a client-side call beside held ones: the orchestrator runs
		 * none of the round's calls; the client gets them all */
		if (ev == TC_CALL_START && c->n_held) {
			int rc = held_release(c);

			if (rc || c->cancelled)
				return rc;
		}
	}
	switch (ev) {
	case TC_CONTENT:
		sb_add(&c->content, text, len);
		if (g->stream)
			sb_add(&c->pending, text, len);
		break;
	case TC_CALL_START:
		calls = realloc(c->calls, (c->n_calls + 1) * sizeof(*calls));
		if (!calls)
			return -ENOMEM;
		c->calls = calls;
		offs = realloc(c->offs, (c->n_calls + 1) * 2 * sizeof(*offs));
		if (!offs)
			return -ENOMEM;
		c->offs = offs;
		calls[c->n_calls] = *call;
		offs[2 * c->n_calls] = c->call_text.len;
		sb_add(&c->call_text, call->name, strlen(call->name) + 1);
		offs[2 * c->n_calls + 1] = c->call_text.len;
		calls[c->n_calls].arguments_len = 0;
		c->in_call = 1;
		if (g->stream) {
			flush_pending(c, NULL);
			if (g->ops->call_start)
				g->ops->call_start(g, c, call);
		}
		break;
	case TC_CALL_ARGS:
		sb_add(&c->call_text, text, len);
		c->calls[c->n_calls].arguments_len += len;
		if (g->stream && g->ops->call_args)
			g->ops->call_args(g, c, text, len);
		break;
	case TC_REASONING:	/* asked for: split_reasoning */
		sb_add(&c->reasoning, text, len);
		if (g->stream) {
			flush_pending(c, NULL);
			if (g->ops->reasoning)
				g->ops->reasoning(g, c, text, len);
		}
		break;
	case TC_CALL_END:
		sb_add(&c->call_text, "", 1);
		c->n_calls++;
		c->in_call = 0;
		if (g->stream && g->ops->call_end)
			g->ops->call_end(g, c);
		__atomic_add_fetch(&g->a->tool_calls, 1, __ATOMIC_RELAXED);
		/* one call only: the decoder ends the reply after it when it
		 * constrains the calls; otherwise stop the job here */
		if (!g->parallel && !g->calls_bounded) {
			c->cancelled = 1;
			clock_gettime(CLOCK_MONOTONIC, &c->cancel_t);
			kvd_job_cancel(c->job);
		}
		break;
	}
	return (g->out.oom || c->call_text.oom || c->pending.oom || c->content.oom ||
		c->reasoning.oom) ? -ENOMEM : 0;
}

static void choice_done(struct gen *g, struct gen_choice *c)
{
	if (c->finished)
		return;
	c->finished = 1;
	g->n_finished++;
	g->usage.completion_tokens += c->usage.completion_tokens;
	if (c->index == 0) {
		/* one prompt, computed once (n > 1 choices copy its KV): counted
		 * once, as OpenAI and vLLM count it */
		g->usage.prompt_tokens = c->usage.prompt_tokens;
		g->usage.cached_tokens = c->usage.cached_tokens;
		g->usage.restored_tokens = c->usage.restored_tokens;
		g->usage.restore_stall_ms = c->usage.restore_stall_ms;
		g->ttft_ms = c->ttft_ms;
		g->total_ms = c->total_ms;
	}
	if (g->stream && g->ops->choice_done)
		g->ops->choice_done(g, c);
	if (g->n_finished == g->n) {
		g->finished = 1;
		if (g->stream && g->ops->done && !g->ended) {
			g->ended = 1;
			g->ops->done(g);
		}
	}
}

static void request_base(struct gen *g, struct kvd_request *kr);
static int submit_one(struct gen *g, struct kvd_request *kr, struct kvd_job **job,
		      struct api_error *e);

/*
 * The think budget was spent (budget_cut 1) and the first job ended
 * (ev): the block is closed as the template closes it and a second job
 * continues from the prompt, the reasoning and "\n</think>\n\n", with
 * the tokens left; the prefix cache has the first job's KV. 1 when the
 * continuation runs (its events come as this choice's), 0 when the reply
 * ends with ev (no tokens left, or it could not be submitted).
 */
static int budget_continue(struct gen *g, struct gen_choice *c, const struct kvd_event *ev)
{
	static const char close_tag[] = "\n</think>\n\n";
	struct chat_prompt p = { 0 };
	struct kvd_request kr;
	struct kvd_span *m;
	struct kvd_job *job = NULL;
	struct api_error e;
	uint32_t used = ev->usage.completion_tokens;
	size_t nm, at;
	int rc;

	if (g->cr.s.max_tokens && used >= g->cr.s.max_tokens)
		return 0;
	if (tc_stream_feed(&c->ts, close_tag, sizeof(close_tag) - 1))
		return 0;
	sb_add(&c->raw, close_tag, sizeof(close_tag) - 1);
	/* the prompt's markup, then "<think>" and the close as markup; the
	 * reasoning between them is the model's text (plain) */
	chat_markup_n(&p, g->prompt.text.s, g->prompt.text.len);
	at = p.text.len;
	chat_markup_n(&p, c->raw.s, 7);
	chat_plain(&p, c->raw.s + 7, c->raw.len - 7 - (sizeof(close_tag) - 1));
	chat_markup_n(&p, close_tag, sizeof(close_tag) - 1);
	m = p.oom || c->raw.oom ? NULL : malloc((g->n_markup + 2) * sizeof(*m));
	if (!m) {
		chat_prompt_free(&p);
		return 0;
	}
	memcpy(m, g->markup, g->n_markup * sizeof(*m));
	nm = g->n_markup;
	m[nm++] = (struct kvd_span){ at, 7 };
	m[nm++] = (struct kvd_span){ p.text.len - (sizeof(close_tag) - 1), sizeof(close_tag) - 1 };
	request_base(g, &kr);
	kr.prompt = p.text.s;
	kr.prompt_len = p.text.len;
	kr.markup = m;
	kr.n_markup = nm;
	if (kr.s.max_tokens)
		kr.s.max_tokens -= used;
	rc = submit_one(g, &kr, &job, &e);
	free(m);
	chat_prompt_free(&p);
	if (rc) {
		kvd_log(KVD_LOG_WARN, "api", "%s: the reply past its think budget not continued: %s",
			g->id, e.message);
		return 0;
	}
	if (g->notify_fn)
		kvd_job_set_notify(job, g->notify_fn, g->notify_arg);
	c->usage0 = ev->usage;
	c->ttft0 = ev->ttft_ms;
	c->total0 = ev->total_ms;
	kvd_job_free(c->job);
	c->job = job;
	c->budget_cut = 2;
	return 1;
}

/* Consume one event of choice c; for streams, the front end writes its
 * frames. */
static void choice_event(struct gen *g, struct gen_choice *c, const struct kvd_event *ev)
{
	struct api_error e;
	json_t *lp = NULL;

	switch (ev->type) {
	case KVD_EV_TOKEN:
		c->tokens++;
		if (c->cancelled || c->budget_cut == 1)
			return;	/* past the one call we return, or the budget */
		sb_add(&c->raw, ev->text, ev->text_len);
		if (g->want_logprobs) {
			lp = json_array();
			if (!lp || json_array_append_new(lp, resp_logprob(ev))) {
				json_decref(lp);
				gen_oom(g);
				return;
			}
		}
		if (g->parse_tools || g->thinks) {
			int before = c->ts.think_state;

			if (tc_stream_feed(&c->ts, ev->text, ev->text_len)) {
				json_decref(lp);
				gen_oom(g);
				return;
			}
			/* the think block's tokens, its tags included */
			if (g->thinks && (before == 1 || c->ts.think_state == 1 ||
			    (before == 0 && c->ts.think_state == 3)))
				c->reasoning_tokens++;
			/* the budget spent with the block still open: this job
			 * ends here, a continuation closes the block */
			if (g->cr.think_budget && !c->budget_cut && c->ts.think_state == 1 &&
			    c->reasoning_tokens >= g->cr.think_budget) {
				c->budget_cut = 1;
				kvd_job_cancel(c->job);
			}
		} else {
			choice_emit(c, TC_CONTENT, ev->text, ev->text_len, NULL);
		}
		if (lp && c->logprobs)
			json_array_extend(c->logprobs, lp);
		if (g->stream)
			flush_pending(c, lp);
		else
			json_decref(lp);
		return;
	case KVD_EV_TOOL_RUN: {
		json_t *run = resp_tool_run(ev->tool_run);

		/* the held calls ran: they are not the client's */
		held_clear(c);
		if (!run) {
			gen_oom(g);
			return;
		}
		if (g->stream) {
			flush_pending(c, NULL);
			if (g->ops->tool_run)
				g->ops->tool_run(g, c, run);
		}
		if (c->tool_runs && json_array_append(c->tool_runs, run))
			gen_oom(g);
		json_decref(run);
		return;
	}
	case KVD_EV_DONE:
		if (c->budget_cut == 1 && !g->client_gone) {
			if (budget_continue(g, c, ev))
				return;
			/* nothing left to continue with: the reply ends here */
		}
		if (c->budget_cut == 2) {
			/* one reply: the first job's prompt, both jobs' output */
			struct kvd_event e = *ev;

			e.usage.prompt_tokens = c->usage0.prompt_tokens;
			e.usage.cached_tokens = c->usage0.cached_tokens;
			e.usage.restored_tokens = c->usage0.restored_tokens;
			e.usage.restore_stall_ms = c->usage0.restore_stall_ms;
			e.usage.completion_tokens += c->usage0.completion_tokens;
			e.ttft_ms = c->ttft0;
			e.total_ms += c->total0;
			c->budget_cut = 3;
			choice_event(g, c, &e);
			return;
		}
		if ((g->parse_tools || g->thinks) &&
		    (tc_stream_finish(&c->ts) || held_release(c))) {
			gen_oom(g);
			return;
		}
		if (g->stream)
			flush_pending(c, NULL);
		c->finish = ev->finish;
		c->stop_seq = ev->stop_seq;
		c->usage = ev->usage;
		snprintf(c->session_id, sizeof(c->session_id), "%s",
			 ev->session_id ? ev->session_id : "");
		c->ttft_ms = ev->ttft_ms;
		c->total_ms = ev->total_ms;
		/* a reply ending in calls comes back with their results: keep
		 * its exact text for that turn's rendering */
		if (c->n_calls && !c->raw.oom && !json_array_size(c->tool_runs))
			turn_cache_put(g->a->turns, g->tenant, gen_calls(c)[0].id,
				       c->raw.s, c->raw.len);
		choice_done(g, c);
		return;
	case KVD_EV_ERROR:
	default:
		api_error_from_kvd(&e, &ev->err);
		if (g->stream && !g->failed && g->ops->error)
			g->ops->error(g, &e);
		gen_fail(g, &e);
		return;
	}
}

/* Counts responses whose text would not render back byte for byte. */
static void check_canonical(struct gen *g)
{
	for (unsigned i = 0; i < g->n; i++) {
		struct gen_choice *c = &g->ch[i];
		struct tc_result tr;

		if (!c->n_calls || c->cancelled || c->raw.oom)
			continue;
		if (!tc_parse(g->a->tmpl, c->raw.s ? c->raw.s : "", c->raw.len, &tr)) {
			if (!tr.canonical) {
				__atomic_add_fetch(&g->a->noncanonical, 1, __ATOMIC_RELAXED);
				kvd_log(KVD_LOG_DEBUG, "api", "%s: tool-call text is not canonical; the next turn re-renders it differently",
					g->id);
			}
			tc_result_free(&tr);
		}
	}
}

static void cancel_all(struct gen *g)
{
	for (unsigned i = 0; i < g->n; i++) {
		struct gen_choice *c = &g->ch[i];

		if (c->job && !c->cancelled) {
			c->cancelled = 1;
			clock_gettime(CLOCK_MONOTONIC, &c->cancel_t);
			kvd_job_cancel(c->job);
		}
	}
}

int gen_step(struct gen *g, int timeout_ms)
{
	struct kvd_job *jobs[GEN_MAX_CHOICES];
	unsigned map[GEN_MAX_CHOICES], n = 0, which = 0;
	struct kvd_event ev;
	int r;

	if (g->finished)
		return 1;
	for (unsigned i = 0; i < g->n; i++)
		if (!g->ch[i].finished) {
			map[n] = i;
			jobs[n++] = g->ch[i].job;
		}
	r = n == 1 ? kvd_job_next(jobs[0], &ev, timeout_ms) :
		kvd_job_next_any(jobs, n, &ev, &which, timeout_ms);
	if (r < 0) {
		struct api_error e;

		api_error_set(&e, 500, "server_error", NULL, NULL,
			      "the orchestrator failed (%s)", strerror(-r));
		gen_fail(g, &e);
		return 1;
	}
	if (r > 0) {
		choice_event(g, &g->ch[map[which]], &ev);
		if (g->out.oom)
			gen_oom(g);
		if (g->finished)
			check_canonical(g);
		/* a steady stream of tokens must not hide a hang-up */
		if (g->finished || ms_since(&g->peer_checked) < WAIT_TICK_MS)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &g->peer_checked);
	if (peer_gone(g->fd)) {
		if (!g->client_gone)
			__atomic_add_fetch(&g->a->disconnects, 1, __ATOMIC_RELAXED);
		g->client_gone = 1;
		cancel_all(g);
		return 1;
	}
	for (unsigned i = 0; i < g->n; i++) {
		struct gen_choice *c = &g->ch[i];

		if (!c->finished && c->cancelled && ms_since(&c->cancel_t) > CANCEL_WAIT_MS) {
			/* we stopped it after one tool call and the orchestrator
			 * did not end the job: end it here with what we counted */
			memset(&ev, 0, sizeof(ev));
			ev.type = KVD_EV_DONE;
			ev.finish = KVD_FINISH_STOP;
			ev.usage.completion_tokens = c->tokens;
			kvd_log(KVD_LOG_WARN, "api", "%s: no DONE %d ms after cancel; ending it",
				g->id, CANCEL_WAIT_MS);
			choice_event(g, c, &ev);
		}
	}
	return r > 0;
}

int gen_pump(struct gen *g)
{
	while (!g->finished && !g->client_gone && gen_step(g, 0))
		;
	return g->finished || g->client_gone;
}

static uint64_t ts_ns(const struct timespec *t)
{
	return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

uint64_t gen_wake_at(const struct gen *g)
{
	uint64_t t = 0, c;

	if (g->finished || g->client_gone)
		return 0;
	if (g->stream)	/* the next keep-alive */
		t = ts_ns(&g->last_sent) + (SSE_KEEPALIVE_MS + 1) * 1000000ull;
	for (unsigned i = 0; i < g->n; i++)
		if (!g->ch[i].finished && g->ch[i].cancelled) {
			/* a job we cancelled that did not end yet */
			c = ts_ns(&g->ch[i].cancel_t) + (CANCEL_WAIT_MS + 1) * 1000000ull;
			t = !t || c < t ? c : t;
		}
	return t;
}

long gen_sse_read(struct gen *g, char *buf, size_t max)
{
	size_t n;

	for (;;) {
		if (g->client_gone || g->out.oom)
			return -1;
		if (g->out.len)
			break;
		if (g->finished)
			return 0;	/* the end */
		if (gen_step(g, 0) || g->out.len || g->finished || g->client_gone)
			continue;
		if (ms_since(&g->last_sent) <= SSE_KEEPALIVE_MS)
			return GEN_AGAIN;
		sb_adds(&g->out, ": keep-alive\n\n");
	}
	n = g->out.len < max ? g->out.len : max;
	memcpy(buf, g->out.s, n);
	sb_consume(&g->out, n);
	clock_gettime(CLOCK_MONOTONIC, &g->last_sent);
	return (long)n;
}

/* ---------------------------------------------------------------- submit */

/*
 * Server-side tools go after the request's own tools, in the daemon's
 * order, so a conversation's prompt renders the same on every turn. A
 * tool the client declares itself stays the client's: the server's of the
 * same name is not offered.
 */
static int offer_stools(struct gen *g, struct chat_request *cr)
{
	size_t n = json_array_size(g->a->stools), i, k;
	struct chat_tool *t;
	json_t *f;

	t = realloc(cr->tools, (cr->n_tools + n) * sizeof(*t));
	if (!t)
		return -1;
	cr->tools = t;
	json_array_foreach(g->a->stools, i, f) {
		const char *name = json_string_value(json_object_get(f, "name"));

		for (k = 0; k < cr->n_tools; k++)
			if (!strcmp(cr->tools[k].name, name))
				break;
		if (k < cr->n_tools || i >= 32)
			continue;
		memset(&cr->tools[cr->n_tools], 0, sizeof(cr->tools[0]));
		cr->tools[cr->n_tools].name = name;
		cr->tools[cr->n_tools].function = f;
		cr->n_tools++;
		g->stools |= 1u << i;
	}
	return 0;
}

/*
 * Structured decoding for a request: tool_choice "required" or a named
 * tool constrain the reply to tool calls; "auto" with tools constrains a
 * call once the model opens one (free text before); a JSON format
 * (without a forced tool call) constrains the reply to JSON. Returns the
 * spec text (malloc'd, freed by the caller) or NULL.
 */
static char *constraint_for(const struct chat_request *cr, struct kvd_constraint *k)
{
	char *txt = NULL;

	memset(k, 0, sizeof(*k));
	if (cr->format != CHAT_FORMAT_TEXT && cr->tool_choice != CHAT_TOOLS_REQUIRED &&
	    cr->tool_choice != CHAT_TOOLS_NAMED) {
		if (cr->format == CHAT_FORMAT_JSON_OBJECT) {
			k->kind = KVD_CONSTRAIN_JSON_OBJECT;
			return NULL;
		}
		k->kind = KVD_CONSTRAIN_JSON_SCHEMA;
		txt = json_dumps(cr->json_schema, JSON_COMPACT);
	} else if (cr->n_tools && cr->tool_choice != CHAT_TOOLS_NONE) {
		json_t *arr = json_array();
		size_t i;

		for (i = 0; arr && i < cr->n_tools; i++)
			json_array_append_new(arr, json_pack("{s:s,s:O}", "type", "function",
							     "function", cr->tools[i].function));
		txt = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
		json_decref(arr);
		k->kind = KVD_CONSTRAIN_TOOLS;
		k->lazy = cr->tool_choice == CHAT_TOOLS_AUTO;
		k->tool_name = cr->tool_choice == CHAT_TOOLS_NAMED ? cr->tool_choice_name : NULL;
		k->max_calls = cr->parallel_tool_calls ? 0 : 1;
	}
	if (txt) {
		k->json = txt;
		k->json_len = strlen(txt);
	}
	return txt;
}

/* Any tool the client marked strict: its schema must be honoured. */
static int any_strict(const struct chat_request *cr)
{
	for (size_t i = 0; i < cr->n_tools; i++)
		if (json_is_true(json_object_get(cr->tools[i].function, "strict")))
			return 1;
	return 0;
}

struct kvd_span *gen_prompt_markup(const struct chat_prompt *p, size_t *n)
{
	size_t nm = chat_prompt_markup(p, NULL, 0);
	struct chat_span *cs = malloc((nm + 1) * sizeof(*cs));
	struct kvd_span *m = malloc((nm + 1) * sizeof(*m));

	if (!cs || !m) {
		free(cs);
		free(m);
		return NULL;
	}
	chat_prompt_markup(p, cs, nm);
	for (size_t i = 0; i < nm; i++)
		m[i] = (struct kvd_span){ cs[i].off, cs[i].len };
	free(cs);
	*n = nm;
	return m;
}

/* A continuation's request: this one's settings (the constraint as it
 * was accepted), the prompt and markup left to the caller. */
static void request_base(struct gen *g, struct kvd_request *kr)
{
	struct chat_request *cr = &g->cr;

	memset(kr, 0, sizeof(*kr));
	kr->model = cr->model;
	kr->session_key = cr->prompt_cache_key ? cr->prompt_cache_key : cr->user;
	kr->tenant = g->tenant;
	kr->request_id = g->id;
	kr->s = cr->s;
	kr->server_tools = g->stools;
	kr->c = g->kc;
}

static int submit_one(struct gen *g, struct kvd_request *kr, struct kvd_job **job,
		      struct api_error *e)
{
	struct kvd_error ke;

	memset(&ke, 0, sizeof(ke));
	if (!kvd_job_submit(g->a->d, kr, job, &ke))
		return 0;
	api_error_from_kvd(e, &ke);
	return -1;
}

int gen_submit(struct gen *g, uint32_t tenant, unsigned n, struct api_error *e)
{
	struct kvd_api *a = g->a;
	struct chat_request *cr = &g->cr;
	struct kvd_request kr;
	struct kvd_error ke;
	struct kvd_span *markup = NULL;
	char *c_json = NULL;
	unsigned i;
	int rc = 0;

	if (n < 1 || n > GEN_MAX_CHOICES) {
		api_bad(e, "n", "Invalid value for 'n': 1 to %d choices.", GEN_MAX_CHOICES);
		return -1;
	}
	if (!g->raw_prompt) {
		/* only with tool_choice "auto": "none" wants no call,
		 * "required" and a named tool want the client's */
		if (a->stools && cr->tool_choice == CHAT_TOOLS_AUTO &&
		    kvd_server_tools_allowed(a->d, tenant) && offer_stools(g, cr))
			goto nomem;
		struct chat_conv conv = { .msgs = cr->msgs, .n_msgs = cr->n_msgs,
					  .tools = cr->tools, .n_tools = cr->n_tools,
					  .thinking = cr->thinking };
		char why[200];
		int r;

		/* replies the client sends back render as they were generated */
		turn_cache_apply(a->turns, a->tmpl, tenant, cr->msgs, cr->n_msgs, cr->keep);
		r = chat_render(a->tmpl, &conv, &g->prompt, why, sizeof(why));

		if (r == -EINVAL) {
			api_bad(e, "messages", "%s", why);
			return -1;
		}
		if (r)
			goto nomem;
		g->parse_tools = cr->n_tools > 0 && cr->tool_choice != CHAT_TOOLS_NONE;
		g->thinks = chat_template_thinks(a->tmpl);
		g->split_reasoning = g->thinks && !cr->reasoning_inline;
		/* an effort is a think budget, which a family that does not
		 * think cannot spend (OpenAI refuses it for such models too) */
		if (cr->effort && !g->thinks) {
			api_error_set(e, 400, API_INVALID, "unsupported_value", cr->effort_param,
				      "Unsupported value: '%s' for '%s': this model's chat template does not think, so it has no reasoning to spend an effort on (none or minimal only).",
				      chat_effort_name(cr->effort), cr->effort_param);
			return -1;
		}
		if (cr->effort && !cr->think_budget)
			cr->think_budget = chat_effort_budget(cr->effort);
	}
	g->n = n;
	g->tenant = tenant;
	g->want_logprobs = cr->s.logprobs;
	g->parallel = cr->parallel_tool_calls;
	snprintf(g->model, sizeof(g->model), "%s", cr->model ? cr->model : "");
	clock_gettime(CLOCK_MONOTONIC, &g->peer_checked);
	g->last_sent = g->peer_checked;
	for (i = 0; i < n; i++) {
		struct gen_choice *c = &g->ch[i];

		tc_stream_init(&c->ts, a->tmpl, choice_emit, c);
		tc_stream_reasoning(&c->ts, g->split_reasoning);
		tc_stream_calls(&c->ts, g->parse_tools);
		c->logprobs = g->want_logprobs ? json_array() : NULL;
		c->tool_runs = g->stools ? json_array() : NULL;
		if ((g->want_logprobs && !c->logprobs) || (g->stools && !c->tool_runs))
			goto nomem;
	}

	memset(&kr, 0, sizeof(kr));
	kr.model = cr->model;
	kr.prompt = g->prompt.text.s;
	kr.prompt_len = g->prompt.text.len;
	if (!g->raw_prompt) {
		/* special tokens only in the template's markup: client text
		 * never becomes a marker (daemon/chat, "Plain text") */
		markup = gen_prompt_markup(&g->prompt, &g->n_markup);
		if (!markup)
			goto nomem;
		kr.markup = markup;
		kr.n_markup = g->n_markup;
	}
	kr.session_key = cr->prompt_cache_key ? cr->prompt_cache_key : cr->user;
	kr.tenant = tenant;
	kr.request_id = g->id;
	kr.s = cr->s;
	kr.server_tools = g->stools;
	if (!g->raw_prompt) {
		c_json = constraint_for(cr, &kr.c);
		if ((kr.c.kind == KVD_CONSTRAIN_TOOLS || kr.c.kind == KVD_CONSTRAIN_JSON_SCHEMA) &&
		    !c_json)
			goto nomem;
	}
	for (i = 0; i < n; i++) {
		struct kvd_job *job = NULL;

		if (i > 0) {
			/* each choice its own conversation (a session key would
			 * make them one) and its own draw */
			kr.session_key = NULL;
			if (cr->s.has_seed)
				kr.s.seed = cr->s.seed + i;
			/* the prompt's KV: the first choice's, computed once */
			kr.fork_of = g->ch[0].job;
		}
		memset(&ke, 0, sizeof(ke));
		rc = kvd_job_submit(a->d, &kr, &job, &ke);
		/* "auto" with schemas the decoder cannot follow: the calls are
		 * parsed, not constrained (nobody asked for strict) */
		if (rc && kr.c.kind == KVD_CONSTRAIN_TOOLS && kr.c.lazy && ke.code &&
		    !strcmp(ke.code, "unsupported_schema") && !any_strict(cr)) {
			kvd_log(KVD_LOG_INFO, "api", "%s: tool calls not constrained: %s", g->id,
				ke.message);
			memset(&kr.c, 0, sizeof(kr.c));
			memset(&ke, 0, sizeof(ke));
			rc = kvd_job_submit(a->d, &kr, &job, &ke);
		}
		if (rc) {
			api_error_from_kvd(e, &ke);
			break;
		}
		/* calls held to the grammar stream in whatever spacing; a
		 * call forced by name is announced at the first token */
		tc_stream_constrained(&g->ch[i].ts, kr.c.kind == KVD_CONSTRAIN_TOOLS);
		if (kr.c.kind == KVD_CONSTRAIN_TOOLS && !kr.c.lazy && kr.c.tool_name)
			tc_stream_forced(&g->ch[i].ts, kr.c.tool_name);
		g->ch[i].job = job;
	}
	g->calls_bounded = kr.c.kind == KVD_CONSTRAIN_TOOLS && kr.c.max_calls == 1;
	/* the orchestrator keeps its own copies; these stay for a
	 * continuation past the think budget (budget_continue) */
	g->kc = kr.c;
	g->c_json = c_json;
	g->markup = markup;
	if (rc) {
		/* none of it: what was submitted goes */
		for (unsigned k = 0; k < i; k++) {
			kvd_job_cancel(g->ch[k].job);
			kvd_job_free(g->ch[k].job);
			g->ch[k].job = NULL;
		}
		return -1;
	}
	if (g->stream && g->ops->start)
		g->ops->start(g);
	return 0;
nomem:
	free(markup);
	api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
	return -1;
}
