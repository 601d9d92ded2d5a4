/* SPDX-License-Identifier: MIT */
/*
 * api_internal.h - what the HTTP server (api.c) shares with its front
 * ends (chat_api.c, completions.c, messages.c, responses.c) and the
 * generation core (gen.c): the server's state, one request's state, and
 * the helpers that queue a response. Only api.c knows libmicrohttpd's
 * daemon; front ends queue responses through these helpers.
 */
#ifndef KVD_API_INTERNAL_H
#define KVD_API_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include "api.h"
#include "chat.h"
#include "error.h"
#include "gen.h"
#include "park.h"
#include "strbuf.h"
#include "tool_call.h"

#define API_ARG_MAX 256			/* a path's {id} */
#define API_N_CODES 13			/* HTTP statuses counted in metrics */
#define API_LOG_PATH_MAX 96

enum route {
	R_NONE, R_CHAT, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_SESSION,
	R_TOKENIZE, R_DETOKENIZE, R_COMPLETIONS, R_MESSAGES, R_COUNT_TOKENS,
	R_RESPONSES, R_RESPONSE, R_RESPONSE_ITEMS, R_COUNT
};

/* Error bodies: OpenAI's, or Anthropic's on /v1/messages. */
enum api_dialect { DIALECT_OPENAI, DIALECT_ANTHROPIC };

struct responses_store;
struct turn_cache;

/* What one tenant asked for, for /metrics (by name: ids are the
 * orchestrator's, names what an operator reads). */
struct tenant_stats {
	char name[KVD_API_MAX_TENANT_NAME + 1];
	unsigned long requests;
	unsigned long prompt, cached, completion;	/* tokens */
};

struct kvd_api {
	struct kvd *d;
	struct MHD_Daemon *mhd;
	char *listen_addr;
	uint16_t port;
	int loopback;
	int wildcard;			/* listening on 0.0.0.0 or :: */
	int allow_remote;
	size_t max_body;
	unsigned drain_timeout_s;
	const struct chat_template *tmpl;	/* the model's family (kvd's) */
	int64_t started;
	json_t *stools;			/* server-side tools' function objects */
	/* cross-site requests (Documentation/api.md, "Browsers") */
	char **cors_origins;		/* allowed Origins; "*": any */
	size_t n_cors;
	char **hosts;			/* allowed Host names besides the listen address */
	size_t n_hosts;
	struct responses_store *store;	/* /v1/responses kept for continuation */
	struct turn_cache *turns;	/* replies with calls, as generated */
	struct parker *parker;		/* connections waiting for their jobs */
	unsigned threads;		/* libmicrohttpd's event-loop threads */
	unsigned max_conns;		/* connections at once (api.c's count) */
	unsigned long conns;		/* open and reserved at accept (atomic) */

	pthread_mutex_t lock;		/* auth, inflight wakeups, tenant stats */
	pthread_cond_t idle;
	struct auth_table *auth;	/* NULL: no keys */
	struct auth_table *metrics_auth;	/* keys that read all of /metrics */
	struct tenant_stats *tstats;
	size_t n_tstats;
	long inflight;
	int draining;

	/* metrics */
	unsigned long requests[R_COUNT][API_N_CODES];
	unsigned long disconnects;
	unsigned long tool_calls;
	unsigned long noncanonical;
	unsigned long refused_cross_site;
};

struct req {
	struct kvd_api *a;
	struct MHD_Connection *c;
	struct timespec t0;
	char method[8];
	char path[API_LOG_PATH_MAX];
	enum route route;
	enum api_dialect dialect;
	char arg[API_ARG_MAX + 1];	/* the path's {id} */
	int status;
	struct strbuf body;
	int responded;			/* a response is queued */
	char origin[256];		/* an allowed Origin to echo (CORS) */
	char tenant[KVD_API_MAX_TENANT_NAME + 1];
	uint32_t tenant_id;
	int metrics_all;		/* a metrics key: every tenant's series */
	struct gen *gen;
	int waiting;			/* api_wait: the handler resumes there */
	struct park park;		/* parked while its gen has no news */
};

/* Queue a response with body (malloc'd, taken); NULL body: MHD_NO. */
enum MHD_Result api_queue(struct req *q, int status, char *body, const char *ctype,
			  const struct api_error *e);
enum MHD_Result api_send_json(struct req *q, int status, json_t *o);	/* o stolen */
/* The error in the route's dialect. */
enum MHD_Result api_send_error(struct req *q, const struct api_error *e);
enum MHD_Result api_fail(struct req *q, int status, const char *type, const char *code,
			 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A gen for q's connection (hang-ups noticed), owned by q from here on;
 * NULL out of memory. */
struct gen *api_gen_new(struct req *q, const struct gen_ops *ops, const char *id_prefix);
/* Start an SSE response reading g (q's gen). */
enum MHD_Result api_stream(struct req *q, struct gen *g);
/* Not streamed: answer with g's body when it is done (q's gen); the
 * connection is parked until then. */
enum MHD_Result api_wait(struct req *q, struct gen *g);
/* The error body in a dialect (malloc'd). */
char *api_error_body(enum api_dialect d, const struct api_error *e);

/* "prefix" + 24 random characters. */
void api_make_id(char *out, size_t outlen, const char *prefix);

/* Front ends: each handles its routes' requests (body in q->body). */
enum MHD_Result chat_api_handle(struct req *q);
enum MHD_Result completions_handle(struct req *q);
enum MHD_Result messages_handle(struct req *q);
enum MHD_Result responses_handle(struct req *q);

/* responses.c: its store (per tenant, bounded), created with the server. */
struct responses_store *responses_store_new(size_t max_per_tenant, size_t max_bytes_per_tenant);
void responses_store_free(struct responses_store *s);
/* Tenants no longer configured lose what they stored (SIGHUP). */
void responses_store_keep_tenants(struct responses_store *s, const uint32_t *ids, size_t n);

#endif
