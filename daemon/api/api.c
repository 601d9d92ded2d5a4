// SPDX-License-Identifier: MIT
/*
 * api.c - kvarenad's HTTP server (libmicrohttpd): routing, API keys, body
 * limits, the request log line and the HTTP metrics, and the life of one
 * chat completion from submission to the last byte (JSON or SSE). The
 * request format is chat_request.c's, the prompt and the tool-call syntax
 * the model family's (daemon/chat), the response JSON response.c's.
 *
 * One thread per connection (libmicrohttpd's THREAD_PER_CONNECTION with
 * an internal poll() listener): a request's handler may block in
 * kvd_job_next() - the non-streaming handler waits for DONE in the access
 * callback; a stream's reader callback waits for the next event. While
 * waiting, each handler polls its socket for a hang-up every
 * WAIT_TICK_MS and cancels the job when the client is gone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api.h"
#include "auth.h"
#include "chat.h"
#include "chat_request.h"
#include "error.h"
#include "log.h"
#include "response.h"
#include "tokenize.h"

#define WAIT_TICK_MS 200
#define SSE_KEEPALIVE_MS 15000
#define CANCEL_WAIT_MS 5000		/* for DONE after kvd_job_cancel */
#define SESSION_ID_MAX 256
#define LOG_PATH_MAX 96

enum route { R_NONE, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS,
	     R_SESSION, R_TOKENIZE, R_DETOKENIZE, R_COUNT };
static const char *const route_names[R_COUNT] = {
	"other", "chat_completions", "models", "model", "health", "metrics",
	"sessions", "tokenize", "detokenize",
};
static const int codes[] = { 200, 400, 401, 404, 405, 413, 429, 500, 503 };
#define N_CODES (sizeof(codes) / sizeof(codes[0]) + 1)	/* + "other" */

struct kvd_api {
	struct kvd *d;
	struct MHD_Daemon *mhd;
	char *listen_addr;
	uint16_t port;
	int loopback;
	int allow_remote;
	size_t max_body;
	unsigned drain_timeout_s;
	const struct chat_template *tmpl;	/* the model's family (kvd's) */
	int64_t started;
	json_t *stools;			/* server-side tools' function objects */

	pthread_mutex_t lock;		/* auth, inflight wakeups */
	pthread_cond_t idle;
	struct auth_table *auth;	/* NULL: no keys */
	long inflight;
	int draining;

	/* metrics */
	unsigned long requests[R_COUNT][N_CODES];
	unsigned long disconnects;
	unsigned long tool_calls;
	unsigned long noncanonical;
};

/* One completion in flight: the job and what its events have produced.
 * Streams share it between the request and the response's reader (two
 * references); non-streaming requests own it alone. */
struct gen {
	int refs;
	struct kvd_api *a;
	struct kvd_job *job;
	MHD_socket fd;
	int stream, include_usage, want_logprobs, parallel;
	int parse_tools;
	uint32_t stools;		/* server-side tools offered (bits of a->stools) */
	/* calls to server-side tools, held back until the orchestrator says
	 * it ran them (a TOOL_RUN event) or the response ends with them */
	struct held_call *held;
	size_t n_held;
	int holding;			/* the call being parsed is held */
	int replaying;
	json_t *tool_runs;		/* non-stream: kvarena.tool_runs */
	struct tc_stream ts;
	struct resp_ctx rc;
	char id[40];
	char model[257];

	/* the request and its prompt live as long as the job: kvd_request
	 * points into them (prompt, stop strings, session key) */
	struct chat_request cr;
	struct chat_prompt prompt;
	struct strbuf raw;		/* everything generated */
	struct strbuf content;		/* non-stream: content so far */
	struct tc_call *calls;		/* non-stream: calls so far */
	struct strbuf call_text;	/* their names and arguments */
	size_t n_calls;
	json_t *logprobs;		/* non-stream "content" array */
	struct strbuf pending;		/* stream: content of this event */
	struct strbuf out;		/* stream: SSE bytes not yet sent */

	struct timespec peer_checked;
	int cancelled;			/* by us (one call) or client gone */
	struct timespec cancel_t;
	int client_gone;
	int finished;			/* DONE or ERROR seen (or given up) */
	int failed;
	struct api_error err;
	enum kvd_finish finish;
	struct kvd_usage usage;
	uint32_t tokens;		/* TOKEN events seen */
	char session_id[SESSION_ID_MAX + 1];
	double ttft_ms, total_ms;
	struct timespec last_sent;
};

struct req {
	struct kvd_api *a;
	struct timespec t0;
	char method[8];
	char path[LOG_PATH_MAX];
	enum route route;
	char session[SESSION_ID_MAX + 1];
	int status;
	struct strbuf body;
	int responded;			/* a response is queued */
	char tenant[KVD_API_MAX_TENANT_NAME + 1];
	uint32_t tenant_id;
	struct gen *gen;
};

/* ---------------------------------------------------------------- helpers */

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
		(double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void make_id(char *out, size_t outlen, const char *prefix)
{
	char call[TC_ID_LEN + 1];

	tc_make_id(call);	/* "call_" + 24 random characters */
	snprintf(out, outlen, "%s%s", prefix, call + 5);
}

static size_t code_index(int status)
{
	for (size_t i = 0; i < N_CODES - 1; i++)
		if (codes[i] == status)
			return i;
	return N_CODES - 1;
}

/* The peer closed its end (or the socket failed). */
static int peer_gone(MHD_socket fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	if (fd < 0)
		return 0;
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result queue(struct MHD_Connection *c, struct req *q,
			     int status, char *body, const char *ctype,
			     const struct api_error *e)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	char ra[16];

	if (!body)
		return MHD_NO;	/* out of memory: drop the connection */
	r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (q->gen && q->gen->id[0])
		MHD_add_response_header(r, "x-request-id", q->gen->id);
	if (e && e->retry_after_s) {
		snprintf(ra, sizeof(ra), "%u", e->retry_after_s);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status == 405) {
		static const char *const allow[R_COUNT] = {
			[R_CHAT] = "POST", [R_MODELS] = "GET", [R_MODEL] = "GET",
			[R_HEALTH] = "GET, HEAD", [R_METRICS] = "GET",
			[R_SESSION] = "DELETE", [R_TOKENIZE] = "POST",
			[R_DETOKENIZE] = "POST",
		};
		if (allow[q->route])
			MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow[q->route]);
	}
	q->status = status;
	q->responded = 1;
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct req *q,
				 int status, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return queue(c, q, status, s, "application/json", NULL);
}

static enum MHD_Result send_error(struct MHD_Connection *c, struct req *q,
				  const struct api_error *e)
{
	return queue(c, q, e->status, api_error_json(e), "application/json", e);
}

static enum MHD_Result fail(struct MHD_Connection *c, struct req *q, int status,
			    const char *type, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static enum MHD_Result fail(struct MHD_Connection *c, struct req *q, int status,
			    const char *type, const char *code, const char *fmt, ...)
{
	struct api_error e;
	va_list ap;

	api_error_set(&e, status, type, code, NULL, "%s", "");
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	return send_error(c, q, &e);
}

/* ---------------------------------------------------------------- generation */

struct held_call {
	struct tc_call call;
	char *name;
	struct strbuf args;
};

static void held_clear(struct gen *g)
{
	for (size_t i = 0; i < g->n_held; i++) {
		free(g->held[i].name);
		sb_free(&g->held[i].args);
	}
	free(g->held);
	g->held = NULL;
	g->n_held = 0;
	g->holding = 0;
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

static int gen_emit(void *ctx, enum tc_event ev, const char *text, size_t len,
		    const struct tc_call *call);

/* Held calls the orchestrator did not run go to the client as its own. */
static int held_release(struct gen *g)
{
	struct held_call *h = g->held;
	size_t n = g->n_held;
	int rc = 0;

	g->held = NULL;
	g->n_held = 0;
	g->replaying = 1;
	for (size_t i = 0; i < n; i++) {
		if (!rc) {
			h[i].call.name = h[i].name;
			rc = gen_emit(g, TC_CALL_START, NULL, 0, &h[i].call);
		}
		if (!rc && h[i].args.len)
			rc = gen_emit(g, TC_CALL_ARGS, h[i].args.s, h[i].args.len, &h[i].call);
		if (!rc)
			rc = gen_emit(g, TC_CALL_END, NULL, 0, &h[i].call);
		free(h[i].name);
		sb_free(&h[i].args);
	}
	free(h);
	g->replaying = 0;
	return rc;
}

static void gen_unref(struct gen *g)
{
	if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (g->job)
		kvd_job_free(g->job);
	chat_request_free(&g->cr);
	chat_prompt_free(&g->prompt);
	tc_stream_free(&g->ts);
	sb_free(&g->raw);
	sb_free(&g->content);
	sb_free(&g->call_text);
	sb_free(&g->pending);
	sb_free(&g->out);
	free(g->calls);
	json_decref(g->logprobs);
	held_clear(g);
	json_decref(g->tool_runs);
	free(g);
}

static void sse_frame(struct gen *g, char *json)
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

static void flush_pending(struct gen *g, json_t *logprobs)
{
	if (g->pending.len || logprobs)
		sse_frame(g, resp_chunk_content(&g->rc, g->pending.s, g->pending.len,
						logprobs));
	else
		json_decref(logprobs);
	sb_reset(&g->pending);
}

/* tc_stream's output: content, and calls as they are generated. */
static int gen_emit(void *ctx, enum tc_event ev, const char *text, size_t len,
		    const struct tc_call *call)
{
	struct gen *g = ctx;
	struct tc_call *calls;

	if (g->cancelled)	/* parallel_tool_calls false: one call only */
		return 0;
	if (!g->replaying) {
		if (ev == TC_CALL_START && g->stools && offered_stool(g, call->name)) {
			struct held_call *h = realloc(g->held, (g->n_held + 1) * sizeof(*h));

			if (!h)
				return -ENOMEM;
			g->held = h;
			h = &g->held[g->n_held];
			memset(h, 0, sizeof(*h));
			h->call = *call;
			h->name = strdup(call->name);
			if (!h->name)
				return -ENOMEM;
			g->n_held++;
			g->holding = 1;
			return 0;
		}
		if (g->holding && ev == TC_CALL_ARGS) {
			sb_add(&g->held[g->n_held - 1].args, text, len);
			return g->held[g->n_held - 1].args.oom ? -ENOMEM : 0;
		}
		if (g->holding && ev == TC_CALL_END) {
			g->holding = 0;
			return 0;
		}
		/* a client-side call beside held ones: the orchestrator runs
		 * none of the round's calls; the client gets them all */
		if (ev == TC_CALL_START && g->n_held) {
			int rc = held_release(g);

			if (rc || g->cancelled)
				return rc;
		}
	}
	switch (ev) {
	case TC_CONTENT:
		sb_add(g->stream ? &g->pending : &g->content, text, len);
		break;
	case TC_CALL_START:
		if (g->stream) {
			flush_pending(g, NULL);
			sse_frame(g, resp_chunk_call(&g->rc, g->n_calls, call));
			break;
		}
		/* names and arguments are kept as offsets into call_text until
		 * the end (it may move as it grows) */
		calls = realloc(g->calls, (g->n_calls + 1) * sizeof(*calls));
		if (!calls)
			return -ENOMEM;
		g->calls = calls;
		calls[g->n_calls] = *call;
		calls[g->n_calls].name = (const char *)(uintptr_t)g->call_text.len;
		sb_add(&g->call_text, call->name, strlen(call->name) + 1);
		calls[g->n_calls].arguments = (const char *)(uintptr_t)g->call_text.len;
		calls[g->n_calls].arguments_len = 0;
		break;
	case TC_CALL_ARGS:
		if (g->stream) {
			sse_frame(g, resp_chunk_call_args(&g->rc, g->n_calls, text, len));
			break;
		}
		sb_add(&g->call_text, text, len);
		g->calls[g->n_calls].arguments_len += len;
		break;
	case TC_REASONING:	/* not asked for: it stays in the content */
		break;
	case TC_CALL_END:
		if (!g->stream)
			sb_add(&g->call_text, "", 1);
		g->n_calls++;
		__atomic_add_fetch(&g->a->tool_calls, 1, __ATOMIC_RELAXED);
		if (!g->parallel) {
			g->cancelled = 1;
			clock_gettime(CLOCK_MONOTONIC, &g->cancel_t);
			kvd_job_cancel(g->job);
		}
		break;
	}
	return (g->out.oom || g->call_text.oom || g->pending.oom ||
		g->content.oom) ? -ENOMEM : 0;
}

static void gen_fail(struct gen *g, const struct api_error *e)
{
	g->failed = 1;
	g->finished = 1;
	g->err = *e;
}

static void gen_oom(struct gen *g)
{
	struct api_error e;

	api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
	gen_fail(g, &e);
}

/* Consume one event; for streams, append the SSE frames it makes. */
static void gen_event(struct gen *g, const struct kvd_event *ev)
{
	struct api_error e;
	json_t *lp = NULL;

	switch (ev->type) {
	case KVD_EV_TOKEN:
		g->tokens++;
		if (g->cancelled)
			return;	/* past the one call we return */
		sb_add(&g->raw, ev->text, ev->text_len);
		if (g->want_logprobs) {
			lp = json_array();
			if (!lp || json_array_append_new(lp, resp_logprob(ev))) {
				json_decref(lp);
				gen_oom(g);
				return;
			}
		}
		if (g->parse_tools) {
			if (tc_stream_feed(&g->ts, ev->text, ev->text_len)) {
				json_decref(lp);
				gen_oom(g);
				return;
			}
		} else {
			gen_emit(g, TC_CONTENT, ev->text, ev->text_len, NULL);
		}
		if (g->stream) {
			flush_pending(g, lp);
		} else if (lp) {
			json_array_extend(g->logprobs, lp);
			json_decref(lp);
		}
		return;
	case KVD_EV_TOOL_RUN: {
		json_t *run = resp_tool_run(ev->tool_run);

		/* the held calls ran: they are not the client's */
		held_clear(g);
		if (!run) {
			gen_oom(g);
			return;
		}
		if (g->stream) {
			flush_pending(g, NULL);
			sse_frame(g, resp_chunk_tool_run(&g->rc, run));
		} else if (json_array_append_new(g->tool_runs, run)) {
			gen_oom(g);
		}
		return;
	}
	case KVD_EV_DONE:
		if (g->parse_tools && (tc_stream_finish(&g->ts) || held_release(g))) {
			gen_oom(g);
			return;
		}
		g->finished = 1;
		g->finish = ev->finish;
		g->usage = ev->usage;
		snprintf(g->session_id, sizeof(g->session_id), "%s",
			 ev->session_id ? ev->session_id : "");
		g->ttft_ms = ev->ttft_ms;
		g->total_ms = ev->total_ms;
		g->rc.has_timings = 1;
		g->rc.ttft_ms = ev->ttft_ms;
		g->rc.total_ms = ev->total_ms;
		g->rc.usage = ev->usage;
		if (g->stream) {
			const char *fin = g->cancelled && g->n_calls ? "tool_calls" :
				resp_finish_reason(ev->finish, g->n_calls);

			flush_pending(g, NULL);
			sse_frame(g, resp_chunk_finish(&g->rc, fin, g->session_id));
			if (g->include_usage)
				sse_frame(g, resp_chunk_usage(&g->rc, &g->usage,
							      g->session_id));
			sb_adds(&g->out, "data: [DONE]\n\n");
		}
		return;
	case KVD_EV_ERROR:
	default:
		api_error_from_kvd(&e, &ev->err);
		gen_fail(g, &e);
		if (g->stream) {
			flush_pending(g, NULL);
			sse_frame(g, api_error_json(&e));
		}
		return;
	}
}

/* Wait for and consume the next event. 1: consumed; 0: nothing yet. */
static int gen_step(struct gen *g, int timeout_ms)
{
	struct kvd_event ev;
	int r = kvd_job_next(g->job, &ev, timeout_ms);

	if (r < 0) {
		struct api_error e;

		api_error_set(&e, 500, "server_error", NULL, NULL,
			      "the orchestrator failed (%s)", strerror(-r));
		gen_fail(g, &e);
		return 1;
	}
	if (r > 0) {
		gen_event(g, &ev);
		if (g->out.oom || g->raw.oom || g->content.oom || g->pending.oom)
			gen_oom(g);
		/* a steady stream of tokens must not hide a hang-up */
		if (g->finished || ms_since(&g->peer_checked) < WAIT_TICK_MS)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &g->peer_checked);
	if (peer_gone(g->fd)) {
		g->client_gone = 1;
		if (!g->cancelled) {
			g->cancelled = 1;
			clock_gettime(CLOCK_MONOTONIC, &g->cancel_t);
			kvd_job_cancel(g->job);
		}
		__atomic_add_fetch(&g->a->disconnects, 1, __ATOMIC_RELAXED);
	} else if (g->cancelled && ms_since(&g->cancel_t) > CANCEL_WAIT_MS) {
		/* we stopped it after one tool call and the orchestrator did not
		 * end the job: end it here with what we counted */
		memset(&ev, 0, sizeof(ev));
		ev.type = KVD_EV_DONE;
		ev.finish = KVD_FINISH_STOP;
		ev.usage.completion_tokens = g->tokens;
		kvd_log(KVD_LOG_WARN, "api", "%s: no DONE %d ms after cancel; ending it",
			g->id, CANCEL_WAIT_MS);
		gen_event(g, &ev);
	}
	return r > 0;
}

/* Count responses whose text would not render back byte for byte. */
static void check_canonical(struct gen *g)
{
	struct tc_result tr;

	if (!g->n_calls || g->cancelled || g->raw.oom)
		return;
	if (!tc_parse(g->a->tmpl, g->raw.s ? g->raw.s : "", g->raw.len, &tr)) {
		if (!tr.canonical) {
			__atomic_add_fetch(&g->a->noncanonical, 1, __ATOMIC_RELAXED);
			kvd_log(KVD_LOG_DEBUG, "api", "%s: tool-call text is not canonical; the next turn re-renders it differently",
				g->id);
		}
		tc_result_free(&tr);
	}
}

/* MHD reader for a stream: block until there are bytes to send. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct gen *g = cls;
	size_t n;

	(void)pos;
	while (g->out.len == 0) {
		if (g->finished) {
			check_canonical(g);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		gen_step(g, WAIT_TICK_MS);
		if (g->client_gone)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (g->out.len == 0 && !g->finished &&
		    ms_since(&g->last_sent) > SSE_KEEPALIVE_MS)
			sb_adds(&g->out, ": keep-alive\n\n");
		if (g->out.oom)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = g->out.len < max ? g->out.len : max;
	memcpy(buf, g->out.s, n);
	sb_consume(&g->out, n);
	clock_gettime(CLOCK_MONOTONIC, &g->last_sent);
	return (ssize_t)n;
}

static void sse_free(void *cls)
{
	gen_unref(cls);
}

/* ---------------------------------------------------------------- routes */

/*
 * Server-side tools go after the request's own tools, in the daemon's
 * order, so a conversation's prompt renders the same on every turn. A
 * tool the client declares itself stays the client's: the server's of the
 * same name is not offered.
 */
static int offer_stools(struct kvd_api *a, struct gen *g, struct chat_request *cr)
{
	size_t n = json_array_size(a->stools), i, k;
	struct chat_tool *t;
	json_t *f;

	t = realloc(cr->tools, (cr->n_tools + n) * sizeof(*t));
	if (!t)
		return -1;
	cr->tools = t;
	json_array_foreach(a->stools, i, f) {
		const char *name = json_string_value(json_object_get(f, "name"));

		for (k = 0; k < cr->n_tools; k++)
			if (!strcmp(cr->tools[k].name, name))
				break;
		if (k < cr->n_tools || i >= 32)
			continue;
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
 * call once the model opens one (free text before); a JSON
 * response_format (without a forced tool call) constrains the reply to
 * JSON. Returns the spec text (malloc'd, freed by the caller) or NULL.
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

static enum MHD_Result do_chat(struct MHD_Connection *c, struct req *q)
{
	char *c_json = NULL;
	int rc;
	struct kvd_api *a = q->a;
	struct chat_request *cr;
	struct api_error e;
	struct kvd_request kr;
	struct kvd_error ke;
	const union MHD_ConnectionInfo *ci;
	struct gen *g;
	enum MHD_Result ret;

	g = calloc(1, sizeof(*g));
	if (!g)
		return fail(c, q, 500, "server_error", NULL, "out of memory");
	g->refs = 1;
	g->a = a;
	q->gen = g;	/* freed with the request from here on */
	cr = &g->cr;
	if (chat_request_parse(q->body.s ? q->body.s : "", q->body.len,
			       kvd_model_id(a->d), cr, &e))
		return send_error(c, q, &e);
	/* only with tool_choice "auto": "none" wants no call, "required" and a
	 * named tool want the client's */
	if (a->stools && cr->tool_choice == CHAT_TOOLS_AUTO &&
	    kvd_server_tools_allowed(a->d, q->tenant_id) && offer_stools(a, g, cr))
		return fail(c, q, 500, "server_error", NULL, "out of memory");
	{
		struct chat_conv conv = { .msgs = cr->msgs, .n_msgs = cr->n_msgs,
					  .tools = cr->tools, .n_tools = cr->n_tools };
		char why[200];

		rc = chat_render(a->tmpl, &conv, &g->prompt, why, sizeof(why));
		if (rc == -EINVAL) {
			api_bad(&e, "messages", "%s", why);
			return send_error(c, q, &e);
		}
		if (rc)
			return fail(c, q, 500, "server_error", NULL, "out of memory");
	}
	g->stream = cr->stream;
	g->include_usage = cr->include_usage;
	g->want_logprobs = cr->s.logprobs;
	g->parallel = cr->parallel_tool_calls;
	g->parse_tools = cr->n_tools > 0 && cr->tool_choice != CHAT_TOOLS_NONE;
	g->logprobs = cr->s.logprobs ? json_array() : NULL;
	g->tool_runs = g->stools ? json_array() : NULL;
	make_id(g->id, sizeof(g->id), "chatcmpl-");
	snprintf(g->model, sizeof(g->model), "%s", cr->model);
	g->rc.id = g->id;
	g->rc.model = g->model;
	g->rc.created = (int64_t)time(NULL);
	g->rc.usage_null = cr->stream && cr->include_usage;
	g->rc.fingerprint = kvd_system_fingerprint(a->d);
	tc_stream_init(&g->ts, a->tmpl, gen_emit, g);
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	g->fd = ci ? ci->connect_fd : -1;
	clock_gettime(CLOCK_MONOTONIC, &g->peer_checked);

	memset(&kr, 0, sizeof(kr));
	memset(&ke, 0, sizeof(ke));
	kr.model = cr->model;
	kr.prompt = g->prompt.text.s;
	kr.prompt_len = g->prompt.text.len;
	kr.session_key = cr->prompt_cache_key ? cr->prompt_cache_key : cr->user;
	kr.tenant = q->tenant_id;
	kr.request_id = g->id;
	kr.s = cr->s;
	kr.server_tools = g->stools;
	c_json = constraint_for(cr, &kr.c);
	if ((kr.c.kind == KVD_CONSTRAIN_TOOLS || kr.c.kind == KVD_CONSTRAIN_JSON_SCHEMA) &&
	    !c_json) {
		return fail(c, q, 500, "server_error", NULL, "out of memory");
	}
	rc = kvd_job_submit(a->d, &kr, &g->job, &ke);
	free(c_json);	/* the orchestrator keeps its own copy */
	if (rc) {
		g->job = NULL;
		api_error_from_kvd(&e, &ke);
		return send_error(c, q, &e);
	}

	if (g->stream) {
		struct MHD_Response *r;

		clock_gettime(CLOCK_MONOTONIC, &g->last_sent);
		sse_frame(g, resp_chunk_role(&g->rc));
		__atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
						      sse_read, g, sse_free);
		if (!r) {
			gen_unref(g);
			return MHD_NO;
		}
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
		MHD_add_response_header(r, "x-request-id", g->id);
		q->status = 200;
		q->responded = 1;
		ret = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return ret;
	}

	while (!g->finished && !g->client_gone)
		gen_step(g, WAIT_TICK_MS);
	if (g->client_gone) {
		q->status = 499;	/* for the log line: nobody to answer */
		return MHD_NO;
	}
	if (g->failed)
		return send_error(c, q, &g->err);
	check_canonical(g);
	{
		struct tc_result tr = { 0 };
		const char *fin = g->cancelled && g->n_calls ? "tool_calls" :
			resp_finish_reason(g->finish, g->n_calls);
		char *body;

		for (size_t i = 0; i < g->n_calls; i++) {
			g->calls[i].name = g->call_text.s + (uintptr_t)g->calls[i].name;
			g->calls[i].arguments = g->call_text.s +
				(uintptr_t)g->calls[i].arguments;
		}
		tr.content = g->content.s ? g->content.s : "";
		tr.content_len = g->content.len;
		tr.calls = g->calls;
		tr.n_calls = g->n_calls;
		body = resp_completion_runs(&g->rc, &tr, fin, &g->usage, g->session_id,
					    g->logprobs, g->tool_runs);
		g->logprobs = NULL;
		g->tool_runs = NULL;
		if (!body)
			return fail(c, q, 500, "server_error", NULL, "out of memory");
		return queue(c, q, 200, body, "application/json", NULL);
	}
}

static json_t *model_json(struct kvd_api *a)
{
	return json_pack("{s:s, s:s, s:I, s:s}", "id", kvd_model_id(a->d),
			 "object", "model", "created", (json_int_t)a->started,
			 "owned_by", "kvarena");
}

static enum MHD_Result do_metrics(struct MHD_Connection *c, struct req *q)
{
	struct kvd_api *a = q->a;
	char *base = kvd_metrics_text(a->d);
	struct strbuf b = { 0 };

	if (base)
		sb_adds(&b, base);
	free(base);
	sb_adds(&b, "# HELP kvarenad_http_requests_total HTTP requests answered, by route and status.\n"
		    "# TYPE kvarenad_http_requests_total counter\n");
	for (size_t r = 0; r < R_COUNT; r++)
		for (size_t i = 0; i < N_CODES; i++) {
			unsigned long n = __atomic_load_n(&a->requests[r][i], __ATOMIC_RELAXED);
			char code[8];

			if (!n)
				continue;
			if (i < N_CODES - 1)
				snprintf(code, sizeof(code), "%d", codes[i]);
			else
				snprintf(code, sizeof(code), "other");
			sb_addf(&b, "kvarenad_http_requests_total{route=\"%s\",code=\"%s\"} %lu\n",
				route_names[r], code, n);
		}
	pthread_mutex_lock(&a->lock);
	sb_addf(&b, "# HELP kvarenad_http_requests_in_flight HTTP requests being served.\n"
		    "# TYPE kvarenad_http_requests_in_flight gauge\n"
		    "kvarenad_http_requests_in_flight %ld\n", a->inflight);
	pthread_mutex_unlock(&a->lock);
	sb_addf(&b, "# HELP kvarenad_http_client_disconnects_total Completions cancelled because the client went away.\n"
		    "# TYPE kvarenad_http_client_disconnects_total counter\n"
		    "kvarenad_http_client_disconnects_total %lu\n"
		    "# HELP kvarenad_tool_calls_total Tool calls returned to clients.\n"
		    "# TYPE kvarenad_tool_calls_total counter\n"
		    "kvarenad_tool_calls_total %lu\n"
		    "# HELP kvarenad_tool_calls_noncanonical_total Responses with tool calls whose text does not render back byte for byte (the next turn re-prefills from there).\n"
		    "# TYPE kvarenad_tool_calls_noncanonical_total counter\n"
		    "kvarenad_tool_calls_noncanonical_total %lu\n",
		__atomic_load_n(&a->disconnects, __ATOMIC_RELAXED),
		__atomic_load_n(&a->tool_calls, __ATOMIC_RELAXED),
		__atomic_load_n(&a->noncanonical, __ATOMIC_RELAXED));
	if (b.oom) {
		sb_free(&b);
		return MHD_NO;
	}
	return queue(c, q, 200, sb_steal(&b, NULL),
		     "text/plain; version=0.0.4; charset=utf-8", NULL);
}

static enum MHD_Result do_session_delete(struct MHD_Connection *c, struct req *q)
{
	int r = kvd_session_delete(q->a->d, q->session, q->tenant_id);

	if (r == -ENOENT)
		return fail(c, q, 404, API_INVALID, "session_not_found",
			    "No session '%s'.", q->session);
	if (r < 0)
		return fail(c, q, 500, "server_error", NULL,
			    "could not delete the session (%s)", strerror(-r));
	return send_json(c, q, 200, json_pack("{s:s, s:s, s:b}", "id", q->session,
					      "object", "session.deleted", "deleted", 1));
}

static enum MHD_Result dispatch(struct MHD_Connection *c, struct req *q)
{
	struct kvd_api *a = q->a;

	switch (q->route) {
	case R_CHAT:
		return do_chat(c, q);
	case R_MODELS:
		return send_json(c, q, 200, json_pack("{s:s, s:[o]}", "object", "list",
						      "data", model_json(a)));
	case R_MODEL:
		if (strcmp(q->session, kvd_model_id(a->d)))
			return fail(c, q, 404, API_INVALID, "model_not_found",
				    "The model '%s' does not exist or you do not have access to it.",
				    q->session);
		return send_json(c, q, 200, model_json(a));
	case R_HEALTH: {
		int ok = kvd_ready(a->d) && !__atomic_load_n(&a->draining, __ATOMIC_RELAXED);

		return send_json(c, q, ok ? 200 : 503, json_pack("{s:s}", "status",
						ok ? "ok" : "unavailable"));
	}
	case R_METRICS:
		return do_metrics(c, q);
	case R_SESSION:
		return do_session_delete(c, q);
	case R_TOKENIZE:
	case R_DETOKENIZE: {
		struct api_error e;
		char *out = (q->route == R_TOKENIZE ? api_tokenize : api_detokenize)
			(a->d, q->body.s ? q->body.s : "", q->body.len, &e);

		return out ? queue(c, q, 200, out, "application/json", NULL) : send_error(c, q, &e);
	}
	default:
		return MHD_NO;
	}
}

/* ---------------------------------------------------------------- requests */

/* route and the method it takes */
static enum route match_route(const char *url, const char **method, char *arg,
			      size_t arglen)
{
	size_t n;

	*method = NULL;
	arg[0] = '\0';
	if (!strcmp(url, "/v1/chat/completions"))
		return *method = "POST", R_CHAT;
	if (!strcmp(url, "/v1/models"))
		return *method = "GET", R_MODELS;
	if (!strcmp(url, "/health"))
		return *method = "GET", R_HEALTH;
	if (!strcmp(url, "/metrics"))
		return *method = "GET", R_METRICS;
	if (!strcmp(url, "/tokenize"))
		return *method = "POST", R_TOKENIZE;
	if (!strcmp(url, "/detokenize"))
		return *method = "POST", R_DETOKENIZE;
	if (!strncmp(url, "/v1/models/", 11) && url[11] &&
	    (n = strlen(url + 11)) < arglen) {
		memcpy(arg, url + 11, n + 1);
		return *method = "GET", R_MODEL;
	}
	if (!strncmp(url, "/v1/sessions/", 13) && url[13] && !strchr(url + 13, '/') &&
	    (n = strlen(url + 13)) < arglen) {
		memcpy(arg, url + 13, n + 1);
		return *method = "DELETE", R_SESSION;
	}
	return R_NONE;
}

/* Routes that take a request body get max_body; the others 64 KiB. */
static size_t body_cap(const struct kvd_api *a, enum route r)
{
	return r == R_CHAT || r == R_TOKENIZE || r == R_DETOKENIZE ? a->max_body : 64 * 1024;
}

/* 0 when the request may go on (q->tenant set); else a response queued. */
static int authenticate(struct MHD_Connection *c, struct req *q,
			enum MHD_Result *ret)
{
	struct kvd_api *a = q->a;
	struct auth_table *t;
	const struct auth_tenant *who;
	const char *h, *key;

	pthread_mutex_lock(&a->lock);
	t = a->auth;
	if (t)
		auth_table_get(t);
	pthread_mutex_unlock(&a->lock);
	if (!t) {
		snprintf(q->tenant, sizeof(q->tenant), "-");
		return 0;
	}
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
					MHD_HTTP_HEADER_AUTHORIZATION);
	key = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
	while (key && *key == ' ')
		key++;
	who = key ? auth_lookup(t, key, strlen(key)) : NULL;
	if (who) {
		snprintf(q->tenant, sizeof(q->tenant), "%s", who->name);
		q->tenant_id = who->id;
	}
	auth_table_put(t);
	if (who)
		return 0;
	snprintf(q->tenant, sizeof(q->tenant), "?");
	*ret = fail(c, q, 401, API_INVALID, "invalid_api_key",
		    h ? "Incorrect API key provided. Send a valid key as 'Authorization: Bearer KEY'."
		      : "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.");
	return -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct kvd_api *a = cls;
	struct req *q = *con_cls;
	const char *want;
	enum MHD_Result ret;

	(void)version;
	if (!q) {
		const char *cl;

		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		*con_cls = q;
		q->a = a;
		clock_gettime(CLOCK_MONOTONIC, &q->t0);
		snprintf(q->method, sizeof(q->method), "%s", method);
		for (char *p = q->method; *p; p++)
			if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
				*p = '?';
		snprintf(q->path, sizeof(q->path), "%s", url);
		for (char *p = q->path; *p; p++)	/* one log line, printable */
			if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
				*p = '?';
		snprintf(q->tenant, sizeof(q->tenant), "-");
		pthread_mutex_lock(&a->lock);
		a->inflight++;
		pthread_mutex_unlock(&a->lock);

		q->route = match_route(url, &want, q->session, sizeof(q->session));
		if (q->route == R_NONE)
			return fail(c, q, 404, API_INVALID, NULL,
				    "Invalid URL (%s %.200s)", q->method, url);
		if (strcmp(method, want) &&
		    !(q->route == R_HEALTH && !strcmp(method, "HEAD")))
			return fail(c, q, 405, API_INVALID, NULL,
				    "Method %s is not allowed on %.200s; use %s.",
				    q->method, url, want);
		if (__atomic_load_n(&a->draining, __ATOMIC_RELAXED) && q->route != R_HEALTH &&
		    q->route != R_METRICS)
			return fail(c, q, 503, "server_error", "service_unavailable",
				    "The server is shutting down.");
		if (q->route != R_HEALTH && authenticate(c, q, &ret))
			return ret;
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > body_cap(a, q->route))
			return fail(c, q, 413, API_INVALID, "request_too_large",
				    "The request body is larger than %zu bytes.", a->max_body);
		return MHD_YES;
	}
	if (*upload_size) {
		if (q->body.len + *upload_size > body_cap(a, q->route)) {
			/* a body without Content-Length grew past the cap; no
			 * response can be queued while an upload is being read
			 * (libmicrohttpd), so the connection is closed */
			q->status = 413;
			return MHD_NO;
		}
		sb_add(&q->body, upload, *upload_size);
		*upload_size = 0;
		return q->body.oom ? MHD_NO : MHD_YES;
	}
	if (q->responded)
		return MHD_YES;
	return dispatch(c, q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct kvd_api *a = cls;
	struct req *q = *con_cls;
	struct gen *g;
	char extra[160] = "";

	(void)c;
	if (!q)
		return;
	g = q->gen;
	if (g && g->job && !g->finished && !g->cancelled) {
		/* the stream was cut (client gone, write failed, shutdown) */
		g->cancelled = 1;
		kvd_job_cancel(g->job);
		__atomic_add_fetch(&a->disconnects, 1, __ATOMIC_RELAXED);
	}
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		snprintf(extra, sizeof(extra), " aborted=%d", (int)toe);
	if (g && g->failed)
		snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra),
			 " error=\"%.100s\"", g->err.message);
	if (q->status)
		__atomic_add_fetch(&a->requests[q->route][code_index(q->status)], 1,
				   __ATOMIC_RELAXED);
	if (g && g->job)
		kvd_log(KVD_LOG_INFO, "api",
			"%s %s %d tenant=%s id=%s prompt=%u cached=%u completion=%u ttft_ms=%.1f total_ms=%.1f wall_ms=%.1f%s%s",
			q->method, q->path, q->status, q->tenant, g->id,
			g->usage.prompt_tokens, g->usage.cached_tokens,
			g->usage.completion_tokens ? g->usage.completion_tokens : g->tokens,
			g->ttft_ms, g->total_ms, ms_since(&q->t0),
			g->client_gone ? " client_gone=1" : "", extra);
	else
		kvd_log(KVD_LOG_INFO, "api", "%s %s %d tenant=%s wall_ms=%.1f%s",
			q->method, q->path, q->status, q->tenant, ms_since(&q->t0), extra);
	gen_unref(g);
	sb_free(&q->body);
	free(q);
	*con_cls = NULL;
	pthread_mutex_lock(&a->lock);
	if (--a->inflight == 0)
		pthread_cond_broadcast(&a->idle);
	pthread_mutex_unlock(&a->lock);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	kvd_log(KVD_LOG_DEBUG, "http", "%s", line);
}

/* ---------------------------------------------------------------- lifecycle */

void kvd_api_config_defaults(struct kvd_api_config *c)
{
	memset(c, 0, sizeof(*c));
	c->listen_addr = "127.0.0.1";
	c->port = 8000;
	c->max_body = 4u << 20;
	c->max_connections = 1024;
	c->conn_timeout_s = 60;
	c->drain_timeout_s = 30;
}

uint16_t kvd_api_port(const struct kvd_api *a)
{
	return a->port;
}

int kvd_api_set_tenants(struct kvd_api *a, const struct kvd_api_tenant *t,
			size_t n, char *err, size_t errlen)
{
	struct auth_table *nt = NULL, *old;

	if (n) {
		nt = auth_table_new(t, n, err, errlen);
		if (!nt)
			return -EINVAL;
	} else if (!a->loopback && !a->allow_remote) {
		snprintf(err, errlen, "refusing to drop every API key while listening on %s (beyond loopback) without allow_remote",
			 a->listen_addr);
		return -EINVAL;
	}
	pthread_mutex_lock(&a->lock);
	old = a->auth;
	a->auth = nt;
	pthread_mutex_unlock(&a->lock);
	auth_table_put(old);
	kvd_log(KVD_LOG_INFO, "api", "API keys: %zu tenant(s), %zu key(s)%s", n,
		auth_table_keys(nt), nt ? "" : " (no authentication)");
	return 0;
}

static void api_free(struct kvd_api *a)
{
	auth_table_put(a->auth);
	free(a->listen_addr);
	json_decref(a->stools);
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->idle);
	free(a);
}

int kvd_api_start(struct kvd *d, const struct kvd_api_config *c,
		  struct kvd_api **out, char *err, size_t errlen)
{
	struct kvd_api *a;
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
		MHD_USE_ITC | MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *di;
	const char *addr = c->listen_addr ? c->listen_addr : "127.0.0.1";

	*out = NULL;
	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(c->port);
	} else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(c->port);
		flags |= MHD_USE_IPv6;
	} else {
		snprintf(err, errlen, "listen address '%s' is not a numeric IPv4 or IPv6 address",
			 addr);
		return -EINVAL;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->idle, NULL);
	a->d = d;
	a->listen_addr = strdup(addr);
	a->tmpl = kvd_chat_template(d);
	a->max_body = c->max_body ? c->max_body : 4u << 20;
	a->drain_timeout_s = c->drain_timeout_s ? c->drain_timeout_s : 30;
	a->allow_remote = c->allow_remote;
	a->started = (int64_t)time(NULL);
	a->loopback = ss.ss_family == AF_INET ?
		(ntohl(s4->sin_addr.s_addr) >> 24) == 127 :
		(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) ||
		 (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127));
	if (!a->listen_addr) {
		api_free(a);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (kvd_server_tools(d)) {
		json_error_t je;
		size_t i;
		json_t *f;

		/* parsed once: the same bytes render on every request */
		a->stools = json_loads(kvd_server_tools(d), 0, &je);
		if (!json_is_array(a->stools)) {
			snprintf(err, errlen, "server-side tool declarations: %s", je.text);
			api_free(a);
			return -EINVAL;
		}
		json_array_foreach(a->stools, i, f)
			if (!json_is_string(json_object_get(f, "name"))) {
				snprintf(err, errlen, "server-side tool %zu has no name", i);
				api_free(a);
				return -EINVAL;
			}
	}
	if (c->n_tenants) {
		a->auth = auth_table_new(c->tenants, c->n_tenants, err, errlen);
		if (!a->auth) {
			api_free(a);
			return -EINVAL;
		}
	} else if (!a->loopback && !c->allow_remote) {
		snprintf(err, errlen, "refusing to listen on %s without API keys: anyone who can reach it could use the server. Configure API keys, listen on loopback, or set allow_remote",
			 addr);
		kvd_log(KVD_LOG_ERR, "api", "%s", err);
		api_free(a);
		return -EPERM;
	}
	a->mhd = MHD_start_daemon(flags, c->port, NULL, NULL, on_request, a,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
		MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)(c->max_connections ? c->max_connections : 1024),
		MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)(c->conn_timeout_s ? c->conn_timeout_s : 60),
		MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20),
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
		MHD_OPTION_END);
	if (!a->mhd) {
		snprintf(err, errlen, "cannot listen on %s port %u (in use, or not an address of this host?)",
			 addr, (unsigned)c->port);
		api_free(a);
		return -EADDRNOTAVAIL;
	}
	di = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
	a->port = di ? di->port : c->port;
	if (a->auth)
		kvd_log(KVD_LOG_INFO, "api", "listening on %s port %u; API keys required (%zu tenant(s), %zu key(s))",
			addr, (unsigned)a->port, c->n_tenants, auth_table_keys(a->auth));
	else if (a->loopback)
		kvd_log(KVD_LOG_WARN, "api", "listening on %s port %u WITHOUT API keys (loopback only: any local user can use the server)",
			addr, (unsigned)a->port);
	else
		kvd_log(KVD_LOG_WARN, "api", "listening on %s port %u WITHOUT API keys and beyond loopback (allow_remote set): anyone who can reach this address can use the server",
			addr, (unsigned)a->port);
	*out = a;
	return 0;
}

void kvd_api_stop(struct kvd_api *a)
{
	MHD_socket fd;
	struct timespec until;
	long left;

	if (!a)
		return;
	__atomic_store_n(&a->draining, 1, __ATOMIC_RELAXED);
	fd = MHD_quiesce_daemon(a->mhd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += a->drain_timeout_s;
	pthread_mutex_lock(&a->lock);
	kvd_log(KVD_LOG_INFO, "api", "draining: %ld request(s) in flight", a->inflight);
	while (a->inflight > 0 &&
	       pthread_cond_timedwait(&a->idle, &a->lock, &until) != ETIMEDOUT)
		;
	left = a->inflight;
	pthread_mutex_unlock(&a->lock);
	if (left)
		kvd_log(KVD_LOG_WARN, "api", "drain timeout: closing %ld request(s) still in flight",
			left);
	MHD_stop_daemon(a->mhd);
	kvd_log(KVD_LOG_INFO, "api", "stopped");
	api_free(a);
}
