// SPDX-License-Identifier: MIT
/*
 * api.c - kvarenad's HTTP server (libmicrohttpd): routing, what a request
 * must be before anything reads it (Host, Origin, Content-Type, API key,
 * size), the request log line, the HTTP metrics, and the small routes
 * (models, health, metrics, sessions, tokenize). The generation APIs are
 * front ends over gen.c: chat_api.c (/v1/chat/completions), completions.c
 * (/v1/completions), messages.c (/v1/messages), responses.c
 * (/v1/responses); response bodies are theirs.
 *
 * A few event-loop threads for every connection (libmicrohttpd's thread
 * pool over epoll) and no callback that waits: a generation that has no
 * news parks its connection (park.c: suspended until a job's event, a
 * hang-up, a deadline) - the non-streaming handler until the reply is
 * done (api_wait), a stream's reader until its next bytes (sse_read).
 * Request bodies are read by libmicrohttpd as they come.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api_internal.h"
#include "auth.h"
#include "log.h"
#include "tokenize.h"
#include "turn_cache.h"

static const char *const route_names[R_COUNT] = {
	"other", "chat_completions", "models", "model", "health", "metrics",
	"sessions", "tokenize", "detokenize", "completions", "messages",
	"count_tokens", "responses", "response", "response_items",
};
static const int codes[] = { 200, 204, 400, 401, 403, 404, 405, 413, 415, 429, 500, 503 };
#define N_CODES (sizeof(codes) / sizeof(codes[0]) + 1)	/* + "other" */
_Static_assert(N_CODES <= API_N_CODES, "api_internal.h: API_N_CODES");

/* The routes: path (a trailing '*' takes one {id} segment), methods,
 * whether it reads a JSON body, and its error dialect. */
static const struct route_def {
	const char *path, *suffix;
	enum route r;
	const char *methods;
	int body;
	enum api_dialect dialect;
} routes[] = {
	{ "/v1/chat/completions", NULL, R_CHAT, "POST", 1, DIALECT_OPENAI },
	{ "/v1/completions", NULL, R_COMPLETIONS, "POST", 1, DIALECT_OPENAI },
	{ "/v1/messages", NULL, R_MESSAGES, "POST", 1, DIALECT_ANTHROPIC },
	{ "/v1/messages/count_tokens", NULL, R_COUNT_TOKENS, "POST", 1, DIALECT_ANTHROPIC },
	{ "/v1/responses", NULL, R_RESPONSES, "POST", 1, DIALECT_OPENAI },
	{ "/v1/responses/*", "/input_items", R_RESPONSE_ITEMS, "GET", 0, DIALECT_OPENAI },
	{ "/v1/responses/*", NULL, R_RESPONSE, "GET, DELETE", 0, DIALECT_OPENAI },
	{ "/v1/models", NULL, R_MODELS, "GET", 0, DIALECT_OPENAI },
	{ "/v1/models/*", NULL, R_MODEL, "GET", 0, DIALECT_OPENAI },
	{ "/v1/sessions/*", NULL, R_SESSION, "DELETE", 0, DIALECT_OPENAI },
	{ "/health", NULL, R_HEALTH, "GET, HEAD", 0, DIALECT_OPENAI },
	{ "/metrics", NULL, R_METRICS, "GET", 0, DIALECT_OPENAI },
	{ "/tokenize", NULL, R_TOKENIZE, "POST", 1, DIALECT_OPENAI },
	{ "/detokenize", NULL, R_DETOKENIZE, "POST", 1, DIALECT_OPENAI },
	/* llama.cpp's server's other names for the same routes: a client
	 * whose base URL lacks the /v1 reaches them too */
	{ "/chat/completions", NULL, R_CHAT, "POST", 1, DIALECT_OPENAI },
	{ "/completions", NULL, R_COMPLETIONS, "POST", 1, DIALECT_OPENAI },
	{ "/models", NULL, R_MODELS, "GET", 0, DIALECT_OPENAI },
	{ "/v1/health", NULL, R_HEALTH, "GET, HEAD", 0, DIALECT_OPENAI },
};

static const struct route_def *route_of(enum route r)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].r == r)
			return &routes[i];
	return NULL;
}

/* ---------------------------------------------------------------- helpers */

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
		(double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

void api_make_id(char *out, size_t outlen, const char *prefix)
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

/* Anthropic's error types by status. */
static const char *anthropic_type(int status)
{
	switch (status) {
	case 400: return "invalid_request_error";
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	case 503: return "overloaded_error";
	default: return status < 500 ? "invalid_request_error" : "api_error";
	}
}

char *api_error_body(enum api_dialect d, const struct api_error *e)
{
	json_t *o;
	char *s;

	if (d == DIALECT_OPENAI)
		return api_error_json(e);
	o = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
		      anthropic_type(e->status), "message",
		      api_json_string_lossy(e->message, strlen(e->message)));
	s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

static void add_cors(struct req *q, struct MHD_Response *r)
{
	if (!q->origin[0])
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin", q->origin);
	MHD_add_response_header(r, "Vary", "Origin");
	MHD_add_response_header(r, "Access-Control-Expose-Headers",
				"x-request-id, request-id, Retry-After");
}

enum MHD_Result api_queue(struct req *q, int status, char *body, const char *ctype,
			  const struct api_error *e)
{
	const struct route_def *rd = route_of(q->route);
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
	if (q->gen && q->gen->id[0]) {
		MHD_add_response_header(r, "x-request-id", q->gen->id);
		if (q->dialect == DIALECT_ANTHROPIC)
			MHD_add_response_header(r, "request-id", q->gen->id);
	}
	if (e && e->retry_after_s) {
		snprintf(ra, sizeof(ra), "%u", e->retry_after_s);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status == 405 && rd)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, rd->methods);
	add_cors(q, r);
	q->status = status;
	q->responded = 1;
	ret = MHD_queue_response(q->c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result api_send_json(struct req *q, int status, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return api_queue(q, status, s, "application/json", NULL);
}

enum MHD_Result api_send_error(struct req *q, const struct api_error *e)
{
	return api_queue(q, e->status, api_error_body(q->dialect, e), "application/json", e);
}

enum MHD_Result api_fail(struct req *q, int status, const char *type, const char *code,
			 const char *fmt, ...)
{
	struct api_error e;
	va_list ap;

	api_error_set(&e, status, type, code, NULL, "%s", "");
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	return api_send_error(q, &e);
}

struct gen *api_gen_new(struct req *q, const struct gen_ops *ops, const char *id_prefix)
{
	struct gen *g = gen_new(q->a, ops, id_prefix);
	const union MHD_ConnectionInfo *ci;

	if (!g)
		return NULL;
	ci = MHD_get_connection_info(q->c, MHD_CONNECTION_INFO_CONNECTION_FD);
	g->fd = ci ? ci->connect_fd : -1;
	q->gen = g;	/* freed with the request */
	return g;
}

/* From the first generation on, q's jobs and a hang-up wake it. */
static void park_gen(struct req *q, struct gen *g)
{
	if (!q->park.pk)
		park_attach(&q->park, q->a->parker, q->c, g->fd, g);
}

/* MHD reader for a stream (q's): the bytes there are, or the connection
 * parked until there are more (0: libmicrohttpd calls again on resume). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *q = cls;
	struct gen *g = q->gen;

	(void)pos;
	for (;;) {
		long n = gen_sse_read(g, buf, max);
		int r;

		if (n > 0)
			return (ssize_t)n;
		if (n == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (n != GEN_AGAIN)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		r = park_sleep(&q->park, gen_wake_at(g));
		if (r > 0)
			return 0;
		if (r < 0)	/* shutting down: on_completed cancels */
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

enum MHD_Result api_stream(struct req *q, struct gen *g)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	/* the reader's q lives until on_completed, after which libmicrohttpd
	 * reads no more */
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, q, NULL);
	if (!r)
		return MHD_NO;
	park_gen(q, g);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no");
	MHD_add_response_header(r, "x-request-id", g->id);
	if (q->dialect == DIALECT_ANTHROPIC)
		MHD_add_response_header(r, "request-id", g->id);
	add_cors(q, r);
	q->status = 200;
	q->responded = 1;
	ret = MHD_queue_response(q->c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* A non-streamed generation, on each call of the handler until it is
 * done: everything queued now, then the answer or the connection parked. */
static enum MHD_Result wait_more(struct req *q)
{
	struct gen *g = q->gen;
	char *out;
	int r;

	while (!gen_pump(g)) {
		r = park_sleep(&q->park, gen_wake_at(g));
		if (r > 0)
			return MHD_YES;	/* parked: called again on resume */
		if (r < 0) {
			q->status = 503;	/* shutting down: on_completed cancels */
			return MHD_NO;
		}
	}
	q->waiting = 0;
	if (g->client_gone) {
		q->status = 499;	/* for the log line: nobody to answer */
		return MHD_NO;
	}
	if (g->failed)
		return api_send_error(q, &g->err);
	out = g->ops->body(g);
	return out ? api_queue(q, 200, out, "application/json", NULL) :
		api_fail(q, 500, "server_error", NULL, "out of memory");
}

enum MHD_Result api_wait(struct req *q, struct gen *g)
{
	q->waiting = 1;
	park_gen(q, g);
	return wait_more(q);
}

/* ---------------------------------------------------------------- small routes */

static json_t *model_json(struct kvd_api *a)
{
	/* OpenAI's model object, with Anthropic's fields beside (the
	 * Anthropic SDK lists models from the same path) */
	char created[32];
	time_t t = (time_t)a->started;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", kvd_model_id(a->d),
			 "object", "model", "created", (json_int_t)a->started,
			 "owned_by", "kvarena", "type", "model", "display_name",
			 kvd_model_id(a->d), "created_at", created);
}

/*
 * The "tenant" label of a Prometheus sample line (len bytes, no newline):
 * 1 and the value in val when there is one, 0 when none, -1 when the
 * labels do not parse (the line is then treated as another tenant's).
 * Label values are quoted with \\, \" and \n escapes.
 */
static int tenant_label(const char *l, size_t len, char *val, size_t vlen)
{
	const char *e = l + len, *p = memchr(l, '{', len), *sp = memchr(l, ' ', len);

	if (!p || (sp && sp < p))
		return 0;	/* no labels */
	p++;
	while (p < e && *p != '}') {
		const char *name = p;
		size_t nn, o = 0;

		while (p < e && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		nn = (size_t)(p - name);
		if (!nn || e - p < 2 || p[0] != '=' || p[1] != '"')
			return -1;
		for (p += 2; p < e && *p != '"'; p++) {
			if (*p == '\\' && ++p == e)
				return -1;
			if (o + 1 < vlen)
				val[o++] = *p;
		}
		if (p == e)
			return -1;
		val[o] = '\0';
		p++;
		if (nn == 6 && !memcmp(name, "tenant", 6))
			return 1;
		if (p < e && *p == ',')
			p++;
	}
	return p < e ? 0 : -1;
}

/* The metrics a tenant may read: every line but other tenants' series
 * (samples labelled tenant="NAME" with another name). */
static void add_tenant_view(struct strbuf *b, const char *text, const char *tenant)
{
	const char *l = text, *nl;
	char val[KVD_API_MAX_TENANT_NAME + 2];

	for (; *l; l = nl) {
		size_t n;
		int r;

		nl = strchr(l, '\n');
		nl = nl ? nl + 1 : l + strlen(l);
		n = (size_t)(nl - l);
		r = *l == '#' ? 0 : tenant_label(l, n, val, sizeof(val));
		if (r == 0 || (r == 1 && !strcmp(val, tenant)))
			sb_add(b, l, n);
	}
}

/* Completions of an authenticated tenant, for its series. */
static void tenant_stats_add(struct kvd_api *a, const char *name, const struct kvd_usage *u)
{
	struct tenant_stats *t = NULL;

	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->n_tstats; i++)
		if (!strcmp(a->tstats[i].name, name))
			t = &a->tstats[i];
	/* by name, bounded: reloads may bring new names */
	if (!t && a->n_tstats < 4 * KVD_API_MAX_TENANTS) {
		t = realloc(a->tstats, (a->n_tstats + 1) * sizeof(*t));
		if (t) {
			a->tstats = t;
			t = &a->tstats[a->n_tstats++];
			memset(t, 0, sizeof(*t));
			snprintf(t->name, sizeof(t->name), "%s", name);
		}
	}
	if (t) {
		t->requests++;
		t->prompt += u->prompt_tokens;
		t->cached += u->cached_tokens;
		t->completion += u->completion_tokens;
	}
	pthread_mutex_unlock(&a->lock);
}

static void add_tenant_stats(struct kvd_api *a, struct strbuf *b)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} series[] = {
		{ "requests", "Generation requests answered, by tenant.",
		  offsetof(struct tenant_stats, requests) },
		{ "prompt_tokens", "Prompt tokens of the tenant's requests.",
		  offsetof(struct tenant_stats, prompt) },
		{ "cached_tokens", "Prompt tokens whose KV was reused, by tenant.",
		  offsetof(struct tenant_stats, cached) },
		{ "completion_tokens", "Generated tokens, by tenant.",
		  offsetof(struct tenant_stats, completion) },
	};

	pthread_mutex_lock(&a->lock);
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		sb_addf(b, "# HELP kvarenad_tenant_%s_total %s\n# TYPE kvarenad_tenant_%s_total counter\n",
			series[k].name, series[k].help, series[k].name);
		for (size_t i = 0; i < a->n_tstats; i++)
			sb_addf(b, "kvarenad_tenant_%s_total{tenant=\"%s\"} %lu\n", series[k].name,
				a->tstats[i].name,
				*(const unsigned long *)((const char *)&a->tstats[i] + series[k].off));
	}
	pthread_mutex_unlock(&a->lock);
}

static enum MHD_Result do_metrics(struct req *q)
{
	struct kvd_api *a = q->a;
	char *base = kvd_metrics_text(a->d);
	struct strbuf b = { 0 };

	if (base)
		sb_adds(&b, base);
	free(base);
	add_tenant_stats(a, &b);
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
	sb_addf(&b, "# HELP kvarenad_http_connections_parked Connections waiting for their generation's next event (suspended, no thread held).\n"
		    "# TYPE kvarenad_http_connections_parked gauge\n"
		    "kvarenad_http_connections_parked %lu\n"
		    "# HELP kvarenad_http_threads The HTTP server's event-loop threads.\n"
		    "# TYPE kvarenad_http_threads gauge\n"
		    "kvarenad_http_threads %u\n", parker_parked(a->parker), a->threads);
	sb_addf(&b, "# HELP kvarenad_http_client_disconnects_total Completions cancelled because the client went away.\n"
		    "# TYPE kvarenad_http_client_disconnects_total counter\n"
		    "kvarenad_http_client_disconnects_total %lu\n"
		    "# HELP kvarenad_tool_calls_total Tool calls returned to clients.\n"
		    "# TYPE kvarenad_tool_calls_total counter\n"
		    "kvarenad_tool_calls_total %lu\n"
		    "# HELP kvarenad_tool_calls_noncanonical_total Responses with tool calls whose text does not render back byte for byte (the next turn re-prefills from there).\n"
		    "# TYPE kvarenad_tool_calls_noncanonical_total counter\n"
		    "kvarenad_tool_calls_noncanonical_total %lu\n"
		    "# HELP kvarenad_http_cross_site_refused_total Requests refused for their Host, Origin or Content-Type (browsers, DNS rebinding).\n"
		    "# TYPE kvarenad_http_cross_site_refused_total counter\n"
		    "kvarenad_http_cross_site_refused_total %lu\n",
		__atomic_load_n(&a->disconnects, __ATOMIC_RELAXED),
		__atomic_load_n(&a->tool_calls, __ATOMIC_RELAXED),
		__atomic_load_n(&a->noncanonical, __ATOMIC_RELAXED),
		__atomic_load_n(&a->refused_cross_site, __ATOMIC_RELAXED));
	if (!b.oom && !q->metrics_all) {
		/* a tenant reads no other tenant's series */
		struct strbuf v = { 0 };

		add_tenant_view(&v, b.s ? b.s : "", q->tenant);
		sb_free(&b);
		b = v;
	}
	if (b.oom) {
		sb_free(&b);
		return MHD_NO;
	}
	return api_queue(q, 200, sb_steal(&b, NULL),
			 "text/plain; version=0.0.4; charset=utf-8", NULL);
}

static enum MHD_Result do_session_delete(struct req *q)
{
	int r = kvd_session_delete(q->a->d, q->arg, q->tenant_id);

	if (r == -ENOENT)
		return api_fail(q, 404, API_INVALID, "session_not_found",
				"No session '%s'.", q->arg);
	if (r < 0)
		return api_fail(q, 500, "server_error", NULL,
				"could not delete the session (%s)", strerror(-r));
	return api_send_json(q, 200, json_pack("{s:s, s:s, s:b}", "id", q->arg,
					       "object", "session.deleted", "deleted", 1));
}

static enum MHD_Result dispatch(struct req *q, const char *method)
{
	struct kvd_api *a = q->a;

	switch (q->route) {
	case R_CHAT:
		return chat_api_handle(q);
	case R_COMPLETIONS:
		return completions_handle(q);
	case R_MESSAGES:
	case R_COUNT_TOKENS:
		return messages_handle(q);
	case R_RESPONSES:
	case R_RESPONSE:
	case R_RESPONSE_ITEMS:
		return responses_handle(q);
	case R_MODELS: {
		json_t *m = model_json(a);

		return api_send_json(q, 200, json_pack("{s:s, s:[o], s:b, s:s, s:s}", "object",
					"list", "data", m, "has_more", 0, "first_id",
					kvd_model_id(a->d), "last_id", kvd_model_id(a->d)));
	}
	case R_MODEL:
		if (strcmp(q->arg, kvd_model_id(a->d)))
			return api_fail(q, 404, API_INVALID, "model_not_found",
					"The model '%s' does not exist or you do not have access to it.",
					q->arg);
		return api_send_json(q, 200, model_json(a));
	case R_HEALTH: {
		/* degraded: a stage has no working worker (200 while the other
		 * stage's workers serve its work, else 503) */
		int h = __atomic_load_n(&a->draining, __ATOMIC_RELAXED) ? -1 : kvd_health(a->d);

		return api_send_json(q, h == KVD_HEALTH_OK || h == KVD_HEALTH_DEGRADED ? 200 : 503,
				     json_pack("{s:s}", "status", h == KVD_HEALTH_OK ? "ok" :
					       h < 0 ? "unavailable" : "degraded"));
	}
	case R_METRICS:
		return do_metrics(q);
	case R_SESSION:
		return do_session_delete(q);
	case R_TOKENIZE:
	case R_DETOKENIZE: {
		struct api_error e;
		char *out = (q->route == R_TOKENIZE ? api_tokenize : api_detokenize)
			(a->d, q->body.s ? q->body.s : "", q->body.len, &e);

		return out ? api_queue(q, 200, out, "application/json", NULL) :
			api_send_error(q, &e);
	}
	default:
		(void)method;
		return MHD_NO;
	}
}

/* ---------------------------------------------------------------- requests */

/* The route of url (its {id} in arg); NULL when none. */
static const struct route_def *match_route(const char *url, char *arg, size_t arglen)
{
	arg[0] = '\0';
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const struct route_def *r = &routes[i];
		size_t pl = strlen(r->path), n;
		const char *id, *end;

		if (r->path[pl - 1] != '*') {
			if (!strcmp(url, r->path))
				return r;
			continue;
		}
		if (strncmp(url, r->path, pl - 1) || !url[pl - 1])
			continue;
		id = url + pl - 1;
		end = strchr(id, '/');
		if (r->suffix ? !end || strcmp(end, r->suffix) : end != NULL)
			continue;
		n = end ? (size_t)(end - id) : strlen(id);
		if (!n || n >= arglen)
			continue;
		memcpy(arg, id, n);
		arg[n] = '\0';
		return r;
	}
	return NULL;
}

static int method_allowed(const struct route_def *r, const char *method)
{
	const char *p = r->methods;
	size_t n = strlen(method);

	while ((p = strstr(p, method))) {
		if ((p == r->methods || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
			return 1;
		p += n;
	}
	return 0;
}

/* Routes that take a request body get max_body; the others 64 KiB. */
static size_t body_cap(const struct kvd_api *a, const struct route_def *r)
{
	return r && r->body ? a->max_body : 64 * 1024;
}

/* 0 when the request may go on (q->tenant set); else a response queued.
 * The key comes as OpenAI's clients send it (Authorization: Bearer KEY)
 * or as Anthropic's do (x-api-key: KEY). On /metrics a metrics key reads
 * everything (q->metrics_all); a tenant's key reads what is not another
 * tenant's. */
static int authenticate(struct req *q, enum MHD_Result *ret)
{
	struct kvd_api *a = q->a;
	struct auth_table *t, *m;
	const struct auth_tenant *who = NULL;
	const char *h, *x, *key;

	pthread_mutex_lock(&a->lock);
	t = a->auth;
	if (t)
		auth_table_get(t);
	m = q->route == R_METRICS ? a->metrics_auth : NULL;
	if (m)
		auth_table_get(m);
	pthread_mutex_unlock(&a->lock);
	if (!t && !m) {
		/* no keys at all: every route is open, /metrics whole */
		snprintf(q->tenant, sizeof(q->tenant), "-");
		q->metrics_all = 1;
		return 0;
	}
	h = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	x = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, "x-api-key");
	key = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
	while (key && *key == ' ')
		key++;
	if (m && ((key && auth_lookup(m, key, strlen(key))) || (x && auth_lookup(m, x, strlen(x))))) {
		snprintf(q->tenant, sizeof(q->tenant), "(metrics)");
		q->metrics_all = 1;
		auth_table_put(m);
		auth_table_put(t);
		return 0;
	}
	auth_table_put(m);
	if (t) {
		who = key ? auth_lookup(t, key, strlen(key)) : NULL;
		if (!who && x)
			who = auth_lookup(t, x, strlen(x));
	}
	if (who) {
		snprintf(q->tenant, sizeof(q->tenant), "%s", who->name);
		q->tenant_id = who->id;
	}
	auth_table_put(t);
	if (who)
		return 0;
	snprintf(q->tenant, sizeof(q->tenant), "?");
	*ret = api_fail(q, 401, API_INVALID, "invalid_api_key",
			h || x ? "Incorrect API key provided. Send a valid key as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."
			       : "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.");
	return -1;
}

static int name_eq(const char *a, size_t an, const char *b)
{
	return strlen(b) == an && !strncasecmp(a, b, an);
}

/* DNS rebinding: a page of evil.example whose name now resolves to this
 * address sends Host: evil.example. Accepted: the listen address, on
 * loopback "localhost" and the loopback addresses, and the configured
 * names; a wildcard listen address accepts any Host unless names are
 * configured. No Host (HTTP/1.0) is not a browser. */
static int host_ok(const struct kvd_api *a, const char *host)
{
	const char *h = host, *e;
	size_t n;

	if (!host)
		return 1;
	if (*h == '[') {
		e = strchr(h, ']');
		if (!e)
			return 0;
		h++;
		n = (size_t)(e - h);
	} else {
		e = strchr(h, ':');
		n = e ? (size_t)(e - h) : strlen(h);
	}
	for (size_t i = 0; i < a->n_hosts; i++)
		if (!strcmp(a->hosts[i], "*") || name_eq(h, n, a->hosts[i]))
			return 1;
	if (a->wildcard && !a->n_hosts)
		return 1;
	if (name_eq(h, n, a->listen_addr))
		return 1;
	if (a->loopback) {
		char ip[64];
		struct in_addr v4;
		struct in6_addr v6;

		if (name_eq(h, n, "localhost") || n >= sizeof(ip))
			return n < sizeof(ip);
		memcpy(ip, h, n);
		ip[n] = '\0';
		if (inet_pton(AF_INET, ip, &v4) == 1)
			return (ntohl(v4.s_addr) >> 24) == 127;
		if (inet_pton(AF_INET6, ip, &v6) == 1)
			return IN6_IS_ADDR_LOOPBACK(&v6);
	}
	return 0;
}

/* A browser's Origin: allowed when configured ("*" or the exact origin)
 * or this server's own (http://HOST, the Host already checked). Sets
 * q->origin to echo in Access-Control-Allow-Origin. */
static int origin_ok(struct req *q, const char *origin, const char *host)
{
	struct kvd_api *a = q->a;

	if (!origin)
		return 1;
	for (size_t i = 0; i < a->n_cors; i++)
		if (!strcmp(a->cors_origins[i], "*") || !strcmp(a->cors_origins[i], origin)) {
			snprintf(q->origin, sizeof(q->origin), "%s",
				 strcmp(a->cors_origins[i], "*") ? origin : "*");
			return 1;
		}
	return host && !strncmp(origin, "http://", 7) && !strcmp(origin + 7, host);
}

/* A JSON body: application/json (with parameters) and nothing else, so
 * no page can send one without a CORS preflight. */
static int is_json_type(const char *ct)
{
	size_t n = strlen("application/json");

	if (!ct)
		return 0;
	while (*ct == ' ')
		ct++;
	return !strncasecmp(ct, "application/json", n) &&
	       (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static enum MHD_Result preflight(struct req *q, const struct route_def *rd)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	add_cors(q, r);
	MHD_add_response_header(r, "Access-Control-Allow-Methods", rd->methods);
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
				"Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, OpenAI-Beta, OpenAI-Organization, OpenAI-Project");
	MHD_add_response_header(r, "Access-Control-Max-Age", "600");
	q->status = 204;
	q->responded = 1;
	ret = MHD_queue_response(q->c, 204, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result refuse_cross_site(struct req *q, int status, const char *fmt,
					 const char *what)
{
	__atomic_add_fetch(&q->a->refused_cross_site, 1, __ATOMIC_RELAXED);
	kvd_log(KVD_LOG_WARN, "api", "%s %s refused: %s '%.100s'", q->method, q->path,
		status == 415 ? "Content-Type" : "Host/Origin", what ? what : "");
	return api_fail(q, status, API_INVALID, status == 415 ? "unsupported_media_type" :
			"cross_site_refused", fmt, what ? what : "");
}

/* Headers a request may carry once. Two Content-Length or Host headers
 * are how requests are smuggled past a proxy that reads the other one,
 * and two keys leave which one authenticates to the reader: refused. */
static const char *const single_headers[] = {
	MHD_HTTP_HEADER_HOST, MHD_HTTP_HEADER_CONTENT_LENGTH, MHD_HTTP_HEADER_CONTENT_TYPE,
	MHD_HTTP_HEADER_TRANSFER_ENCODING, MHD_HTTP_HEADER_AUTHORIZATION, "x-api-key", "Origin",
};

struct header_count {
	unsigned int n[sizeof(single_headers) / sizeof(single_headers[0])];
	const char *twice;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	struct header_count *hc = cls;

	(void)kind;
	(void)value;
	for (size_t i = 0; i < sizeof(single_headers) / sizeof(single_headers[0]); i++)
		if (!strcasecmp(key, single_headers[i]) && ++hc->n[i] == 2 && !hc->twice)
			hc->twice = single_headers[i];
	return MHD_YES;
}

/* The first call for a request: every check that needs no body. */
static enum MHD_Result begin(struct req *q, const char *url, const char *method)
{
	struct kvd_api *a = q->a;
	const struct route_def *rd = match_route(url, q->arg, sizeof(q->arg));
	struct header_count hc = { 0 };
	const char *host, *origin, *cl, *ct;
	enum MHD_Result ret;

	if (!rd)
		return api_fail(q, 404, API_INVALID, NULL, "Invalid URL (%s %.200s)", q->method, url);
	q->route = rd->r;
	q->dialect = rd->dialect;
	MHD_get_connection_values(q->c, MHD_HEADER_KIND, count_header, &hc);
	if (hc.twice)
		return api_fail(q, 400, API_INVALID, NULL, "The header '%s' was sent more than once.",
				hc.twice);
	host = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	origin = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, "Origin");
	if (!host_ok(a, host))
		return refuse_cross_site(q, 403, "Host '%.100s' is not this server's name (DNS rebinding?); add it to [server] allowed_hosts if it is.",
					 host);
	if (!origin_ok(q, origin, host))
		return refuse_cross_site(q, 403, "Requests from pages of '%.100s' are not allowed; list the origin in [server] cors_origins to allow them.",
					 origin);
	if (!strcmp(method, "OPTIONS") && origin &&
	    MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, "Access-Control-Request-Method"))
		return preflight(q, rd);
	if (!method_allowed(rd, method))
		return api_fail(q, 405, API_INVALID, NULL, "Method %s is not allowed on %.200s; use %s.",
				q->method, url, rd->methods);
	if (__atomic_load_n(&a->draining, __ATOMIC_RELAXED) && q->route != R_HEALTH &&
	    q->route != R_METRICS)
		return api_fail(q, 503, "server_error", "service_unavailable",
				"The server is shutting down.");
	if (q->route != R_HEALTH && authenticate(q, &ret))
		return ret;
	cl = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > body_cap(a, rd))
		return api_fail(q, 413, API_INVALID, "request_too_large",
				"The request body is larger than %zu bytes.", body_cap(a, rd));
	ct = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (rd->body && !is_json_type(ct))
		return refuse_cross_site(q, 415, "The body must be JSON sent as 'Content-Type: application/json' (got '%.100s').",
					 ct ? ct : "none");
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct kvd_api *a = cls;
	struct req *q = *con_cls;

	(void)version;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		*con_cls = q;
		q->a = a;
		q->c = c;
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
		return begin(q, url, method);
	}
	if (*upload_size) {
		if (q->responded) {
			*upload_size = 0;	/* refused already: drain it */
			return MHD_YES;
		}
		if (q->body.len + *upload_size > body_cap(a, route_of(q->route))) {
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
	if (q->waiting)
		return wait_more(q);
	if (q->responded)
		return MHD_YES;
	return dispatch(q, method);
}

/* " end_user=ID" appended to the log line's extra (printable, capped). */
static void log_end_user(char *extra, size_t len, const char *id)
{
	size_t o = strlen(extra), n = 0;

	if (len - o < 12)
		return;
	o += (size_t)snprintf(extra + o, len - o, " end_user=");
	for (; id[n] && n < 64 && o + 1 < len; n++)
		extra[o++] = (unsigned char)id[n] >= 0x21 && (unsigned char)id[n] <= 0x7e &&
			id[n] != '"' ? id[n] : '?';
	extra[o] = '\0';
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct kvd_api *a = cls;
	struct req *q = *con_cls;
	struct gen *g;
	char extra[320] = "";

	(void)c;
	if (!q)
		return;
	park_detach(&q->park);	/* no wake-up touches q from here on */
	g = q->gen;
	if (g && g->ch[0].job && !g->finished) {
		/* the stream was cut (client gone, write failed, shutdown) */
		int any = 0;

		for (unsigned i = 0; i < g->n; i++)
			if (g->ch[i].job && !g->ch[i].cancelled && !g->ch[i].finished) {
				g->ch[i].cancelled = 1;
				kvd_job_cancel(g->ch[i].job);
				any = 1;
			}
		if (any && !g->client_gone)
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
	if (g && g->cr.root) {
		/* the end user a client names (OpenAI's safety_identifier,
		 * Anthropic's metadata.user_id): who asked, for the operator */
		json_t *u = q->dialect == DIALECT_ANTHROPIC ?
			json_object_get(json_object_get(g->cr.root, "metadata"), "user_id") :
			json_object_get(g->cr.root, "safety_identifier");

		if (json_is_string(u))
			log_end_user(extra, sizeof(extra), json_string_value(u));
	}
	if (g && g->ch[0].job) {
		uint32_t toks = 0;

		for (unsigned i = 0; i < g->n; i++)
			toks += g->ch[i].tokens;
		if (q->tenant_id)
			tenant_stats_add(a, q->tenant, &g->usage);
		kvd_log(KVD_LOG_INFO, "api",
			"%s %s %d tenant=%s id=%s prompt=%u cached=%u completion=%u ttft_ms=%.1f total_ms=%.1f wall_ms=%.1f%s%s",
			q->method, q->path, q->status, q->tenant, g->id,
			g->usage.prompt_tokens, g->usage.cached_tokens,
			g->usage.completion_tokens ? g->usage.completion_tokens : toks,
			g->ttft_ms, g->total_ms, ms_since(&q->t0),
			g->client_gone ? " client_gone=1" : "", extra);
	} else {
		kvd_log(KVD_LOG_INFO, "api", "%s %s %d tenant=%s wall_ms=%.1f%s",
			q->method, q->path, q->status, q->tenant, ms_since(&q->t0), extra);
	}
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

/* ---------------------------------------------------------------- connections */

/*
 * max_connections in all. libmicrohttpd's own limit is per event loop (its
 * share of the total) and a loop at it stops accepting, so a connection
 * past it would wait in the listen backlog, unanswered; its limit is set
 * out of reach and the count is kept here: a connection past the limit is
 * accepted and closed at once, as one past the per-address limit is.
 * The accept policy reserves a place; the start notification, which
 * follows in the same thread, takes it, and the close gives it back. A
 * reservation libmicrohttpd dropped in between (out of memory) is taken
 * back at that thread's next accept.
 */
static _Thread_local int conn_reserved;

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct kvd_api *a = cls;

	(void)addr;
	(void)len;
	if (conn_reserved)
		__atomic_sub_fetch(&a->conns, 1, __ATOMIC_RELAXED);
	conn_reserved = 0;
	if (__atomic_add_fetch(&a->conns, 1, __ATOMIC_RELAXED) > a->max_conns) {
		__atomic_sub_fetch(&a->conns, 1, __ATOMIC_RELAXED);
		kvd_log(KVD_LOG_DEBUG, "api", "at max_connections (%u): connection closed",
			a->max_conns);
		return MHD_NO;
	}
	conn_reserved = 1;
	return MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct kvd_api *a = cls;

	(void)c;
	(void)socket_context;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		if (conn_reserved)
			conn_reserved = 0;
		else	/* not through on_accept: counted here */
			__atomic_add_fetch(&a->conns, 1, __ATOMIC_RELAXED);
	} else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		__atomic_sub_fetch(&a->conns, 1, __ATOMIC_RELAXED);
	}
}

/* ---------------------------------------------------------------- lifecycle */

void kvd_api_config_defaults(struct kvd_api_config *c)
{
	memset(c, 0, sizeof(*c));
	c->listen_addr = "127.0.0.1";
	c->port = 8000;
	c->max_body = 4u << 20;
	c->max_connections = 1024;
	c->max_connections_per_ip = KVD_API_DEFAULT_PER_IP;
	c->conn_timeout_s = 60;
	c->drain_timeout_s = 30;
}

uint16_t kvd_api_port(const struct kvd_api *a)
{
	return a->port;
}

/* A metrics key must not be a tenant's (it would read every tenant's
 * series with a tenant's key): 0, or -EINVAL naming the tenant. */
static int keys_disjoint(const struct auth_table *metrics, const struct auth_table *tenants,
			 char *err, size_t errlen)
{
	const struct auth_tenant *who;

	for (size_t i = 0; metrics && tenants && i < auth_table_keys(metrics); i++)
		if ((who = auth_lookup(tenants, auth_table_key(metrics, i),
				       strlen(auth_table_key(metrics, i))))) {
			snprintf(err, errlen, "a metrics key is also tenant %s's key", who->name);
			return -EINVAL;
		}
	return 0;
}

/* The metrics keys as a table of one pseudo-tenant (NULL: none). */
static int metrics_table(const char *const *keys, size_t n, struct auth_table **out,
			 char *err, size_t errlen)
{
	struct kvd_api_tenant m = { "metrics", UINT32_MAX, keys, n };
	char why[200];

	*out = NULL;
	if (!n)
		return 0;
	*out = auth_table_new(&m, 1, why, sizeof(why));
	if (!*out) {
		snprintf(err, errlen, "metrics keys: %s", why);
		return -EINVAL;
	}
	return 0;
}

int kvd_api_set_metrics_keys(struct kvd_api *a, const char *const *keys, size_t n,
			     char *err, size_t errlen)
{
	struct auth_table *m, *old;
	int r = metrics_table(keys, n, &m, err, errlen);

	if (r)
		return r;
	pthread_mutex_lock(&a->lock);
	r = keys_disjoint(m, a->auth, err, errlen);
	if (!r) {
		old = a->metrics_auth;
		a->metrics_auth = m;
		m = old;
	}
	pthread_mutex_unlock(&a->lock);
	auth_table_put(m);
	return r;
}

int kvd_api_set_tenants(struct kvd_api *a, const struct kvd_api_tenant *t,
			size_t n, char *err, size_t errlen)
{
	struct auth_table *nt = NULL, *old;
	uint32_t ids[KVD_API_MAX_TENANTS];

	if (n > KVD_API_MAX_TENANTS) {
		snprintf(err, errlen, "at most %d tenants", KVD_API_MAX_TENANTS);
		return -EINVAL;
	}
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
	if (keys_disjoint(a->metrics_auth, nt, err, errlen)) {
		pthread_mutex_unlock(&a->lock);
		auth_table_put(nt);
		return -EINVAL;
	}
	old = a->auth;
	a->auth = nt;
	pthread_mutex_unlock(&a->lock);
	auth_table_put(old);
	/* what a tenant no longer configured kept goes with it (by its id,
	 * which names it whatever its place in the file) */
	for (size_t i = 0; i < n; i++)
		ids[i] = t[i].id;
	responses_store_keep_tenants(a->store, ids, n);
	kvd_log(KVD_LOG_INFO, "api", "API keys: %zu tenant(s), %zu key(s)%s", n,
		auth_table_keys(nt), nt ? "" : " (no authentication)");
	return 0;
}

static void free_list(char **l, size_t n)
{
	for (size_t i = 0; l && i < n; i++)
		free(l[i]);
	free(l);
}

static char **copy_list(const char *const *l, size_t n)
{
	char **c = n ? calloc(n, sizeof(*c)) : NULL;

	for (size_t i = 0; c && i < n; i++)
		if (!(c[i] = strdup(l[i]))) {
			free_list(c, n);
			return NULL;
		}
	return c;
}

static void api_free(struct kvd_api *a)
{
	auth_table_put(a->auth);
	auth_table_put(a->metrics_auth);
	free(a->tstats);
	free(a->listen_addr);
	json_decref(a->stools);
	free_list(a->cors_origins, a->n_cors);
	free_list(a->hosts, a->n_hosts);
	responses_store_free(a->store);
	turn_cache_free(a->turns);
	parker_free(a->parker);
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
	/* no callback waits (park.c): a few event loops serve every
	 * connection; suspended ones are resumed through the ITC */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
		MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
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
	for (size_t i = 0; i < c->n_cors_origins; i++)
		if (!c->cors_origins[i] || !*c->cors_origins[i] ||
		    (strcmp(c->cors_origins[i], "*") && !strstr(c->cors_origins[i], "://"))) {
			snprintf(err, errlen, "cors_origins: '%s' is not an origin (scheme://host[:port]) or '*'",
				 c->cors_origins[i] ? c->cors_origins[i] : "");
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
	a->wildcard = ss.ss_family == AF_INET ? s4->sin_addr.s_addr == htonl(INADDR_ANY) :
		IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr);
	a->cors_origins = copy_list(c->cors_origins, c->n_cors_origins);
	a->n_cors = a->cors_origins ? c->n_cors_origins : 0;
	a->hosts = copy_list(c->allowed_hosts, c->n_allowed_hosts);
	a->n_hosts = a->hosts ? c->n_allowed_hosts : 0;
	a->store = responses_store_new(c->responses_max ? c->responses_max : 1000,
				       c->responses_max_bytes ? c->responses_max_bytes : 64u << 20);
	a->turns = turn_cache_new();
	a->threads = c->threads ? c->threads :
		cpus < 2 ? 2 : cpus > KVD_API_AUTO_THREADS_MAX ? KVD_API_AUTO_THREADS_MAX : (unsigned)cpus;
	if (!a->listen_addr || !a->store || !a->turns || a->n_cors != c->n_cors_origins ||
	    a->n_hosts != c->n_allowed_hosts) {
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
	}
	if (metrics_table(c->metrics_keys, c->n_metrics_keys, &a->metrics_auth, err, errlen) ||
	    keys_disjoint(a->metrics_auth, a->auth, err, errlen)) {
		api_free(a);
		return -EINVAL;
	}
	if (!c->n_tenants && !a->loopback && !c->allow_remote) {
		snprintf(err, errlen, "refusing to listen on %s without API keys: anyone who can reach it could use the server. Configure API keys, listen on loopback, or set allow_remote",
			 addr);
		kvd_log(KVD_LOG_ERR, "api", "%s", err);
		api_free(a);
		return -EPERM;
	}
	a->parker = parker_new(err, errlen);
	if (!a->parker) {
		api_free(a);
		return -ENOMEM;
	}
	a->max_conns = c->max_connections ? c->max_connections : 1024;
	a->mhd = MHD_start_daemon(flags, c->port, on_accept, a, on_request, a,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
		/* on_accept's limit binds first (above) */
		MHD_OPTION_CONNECTION_LIMIT, a->max_conns * a->threads + a->threads,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, a,
		/* one client (address) cannot take every connection */
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, c->max_connections_per_ip,
		MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)(c->conn_timeout_s ? c->conn_timeout_s : 60),
		MHD_OPTION_THREAD_POOL_SIZE, a->threads,
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
		kvd_log(KVD_LOG_WARN, "api", "listening on %s port %u WITHOUT API keys (loopback only: any local user can use the server; browsers' pages cannot)",
			addr, (unsigned)a->port);
	else
		kvd_log(KVD_LOG_WARN, "api", "listening on %s port %u WITHOUT API keys and beyond loopback (allow_remote set): anyone who can reach this address can use the server",
			addr, (unsigned)a->port);
	kvd_log(KVD_LOG_INFO, "api", "%u event-loop thread(s) (epoll) serve at most %u connection(s)%s",
		a->threads, c->max_connections ? c->max_connections : 1024,
		c->max_connections_per_ip ? "" : ", any number from one address");
	if (c->max_connections_per_ip)
		kvd_log(KVD_LOG_INFO, "api", "at most %u connection(s) from one address",
			c->max_connections_per_ip);
	if (a->metrics_auth)
		kvd_log(KVD_LOG_INFO, "api", "/metrics: %zu metrics key(s) read every tenant's series",
			auth_table_keys(a->metrics_auth));
	if (a->n_cors)
		kvd_log(KVD_LOG_INFO, "api", "pages of %zu origin(s) may call the API (cors_origins%s)",
			a->n_cors, a->n_cors == 1 && !strcmp(a->cors_origins[0], "*") ? ": any" : "");
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
	/* libmicrohttpd must not stop with a connection suspended: every
	 * parked one is resumed, ends (its jobs cancelled) and none parks
	 * again */
	park_release_all(a->parker);
	MHD_stop_daemon(a->mhd);
	kvd_log(KVD_LOG_INFO, "api", "stopped");
	api_free(a);
}
