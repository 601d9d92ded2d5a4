/* SPDX-License-Identifier: MIT */
/*
 * gen.h - one generation request's life, shared by every front end
 * (/v1/chat/completions, /v1/completions, /v1/messages, /v1/responses):
 * a normalized conversation (struct chat_request) is rendered, submitted
 * to the orchestrator as n jobs (n choices), and the jobs' events are
 * turned into content, tool calls and server-side tool runs, per choice,
 * in order. What the client sees is the front end's: it gets those as
 * callbacks (struct gen_ops) and writes its own JSON or SSE frames.
 *
 * Threads: a gen belongs to its connection (one event-loop thread at a
 * time); nothing here blocks: the caller looks again when a job has news
 * (kvd_job_set_notify) or at gen_wake_at().
 */
#ifndef KVD_API_GEN_H
#define KVD_API_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "chat.h"
#include "chat_request.h"
#include "error.h"
#include "kvd.h"
#include "strbuf.h"
#include "tool_call.h"

#define GEN_MAX_CHOICES 16
#define GEN_SESSION_MAX 256

struct gen;
struct gen_choice;
struct kvd_api;

/* What the front end does with a generation's output. Streaming calls
 * come as the events arrive (write frames with gen_sse_*); non-streaming
 * requests get only body() at the end, with everything accumulated in
 * the choices. Every callback is optional except body. */
struct gen_ops {
	void (*start)(struct gen *g);		/* stream: submitted */
	void (*content)(struct gen *g, struct gen_choice *c, const char *text,
			size_t len, json_t *logprobs);	/* logprobs stolen */
	/* a family that thinks (qwen3): the next piece of the reasoning the
	 * reply opens with (all of it comes before any content or call) */
	void (*reasoning)(struct gen *g, struct gen_choice *c, const char *text, size_t len);
	void (*call_start)(struct gen *g, struct gen_choice *c, const struct tc_call *call);
	void (*call_args)(struct gen *g, struct gen_choice *c, const char *args, size_t len);
	void (*call_end)(struct gen *g, struct gen_choice *c);
	void (*tool_run)(struct gen *g, struct gen_choice *c, json_t *run);	/* borrowed */
	void (*choice_done)(struct gen *g, struct gen_choice *c);
	void (*done)(struct gen *g);		/* stream: every choice done */
	void (*error)(struct gen *g, const struct api_error *e);	/* stream */
	/* non-stream: the response body (malloc'd), NULL out of memory */
	char *(*body)(struct gen *g);
	/* the front end's state (gen.fe, choice.fe) goes */
	void (*free)(struct gen *g);
};

struct held_call;

struct gen_choice {
	unsigned index;
	struct gen *g;
	struct kvd_job *job;
	struct tc_stream ts;
	struct strbuf raw;		/* everything generated */
	struct strbuf content;		/* the content so far */
	struct strbuf reasoning;	/* the reasoning so far (split_reasoning) */
	struct strbuf pending;		/* stream: content of this event */
	struct tc_call *calls;		/* the calls so far (names, arguments
					 * in call_text; see gen_calls()) */
	struct strbuf call_text;
	size_t *offs;			/* per call: name, arguments in call_text */
	size_t n_calls;
	int in_call;			/* a call is open (stream) */
	int dropping;			/* a call past parallel_tool_calls: false */
	json_t *logprobs;		/* requested: "content" array */
	json_t *tool_runs;		/* server-side tools offered: their runs */
	/* calls to server-side tools, held back until the orchestrator
	 * says it ran them (TOOL_RUN) or the reply ends with them */
	struct held_call *held;
	size_t n_held;
	int holding, replaying;
	int cancelled;			/* by us (one call) or client gone */
	struct timespec cancel_t;
	int finished;
	enum kvd_finish finish;
	uint32_t stop_seq;		/* 1 + the stop sequence that ended it */
	struct kvd_usage usage;
	char session_id[GEN_SESSION_MAX + 1];
	double ttft_ms, total_ms;
	uint32_t tokens;		/* TOKEN events seen */
	uint32_t reasoning_tokens;	/* ... of them inside the think block */
	/* the think budget: 1 the job was cancelled at it, 2 a continuation
	 * (the prompt, the reasoning, the think block closed) runs; what the
	 * first job counted */
	int budget_cut;
	struct kvd_usage usage0;
	double ttft0, total0;
	void *fe;			/* the front end's */
};

struct gen {
	int refs;
	struct kvd_api *a;
	const struct gen_ops *ops;
	void *fe;			/* the front end's */
	int fd;				/* the connection, to notice hang-ups */
	uint32_t tenant;		/* gen_submit's */
	int stream, want_logprobs, parallel, parse_tools;
	/* the family thinks (its think block is followed: the reply goes
	 * through the parser even without tools), and the reasoning comes
	 * apart from the content (not reasoning_format "none") */
	int thinks, split_reasoning;
	int calls_bounded;		/* the decoder allows one call (no cancel) */
	uint32_t stools;		/* server-side tools offered (bits) */
	unsigned n;			/* choices */
	struct gen_choice ch[GEN_MAX_CHOICES];
	unsigned n_finished;
	/* the request: kvd_request points into these while jobs live */
	struct chat_request cr;
	struct chat_prompt prompt;
	int raw_prompt;			/* prompt.text given as is (/v1/completions) */
	/* the HTTP layer's notification of the jobs (park.c), given to a
	 * job submitted later too */
	void (*notify_fn)(void *arg);
	void *notify_arg;
	/* what a continuation past the think budget is submitted with */
	struct kvd_constraint kc;
	char *c_json;
	size_t n_markup;
	struct kvd_span *markup;
	char id[48];
	char model[257];
	int64_t created;
	const char *fingerprint;
	struct strbuf out;		/* stream: bytes not yet sent */
	struct timespec last_sent, peer_checked;
	int client_gone;
	int failed;			/* the request failed (after submission) */
	struct api_error err;
	int finished;			/* every choice done, or failed */
	int ended;			/* ops->done sent */
	struct kvd_usage usage;		/* summed over the choices */
	double ttft_ms, total_ms;	/* choice 0's */
};

/* A gen for front end ops, one reference; NULL out of memory. id_prefix
 * names the request ("chatcmpl-", "resp_", "msg_", "cmpl-"). */
struct gen *gen_new(struct kvd_api *a, const struct gen_ops *ops, const char *id_prefix);
void gen_ref(struct gen *g);
void gen_unref(struct gen *g);

/* Renders g->cr (or takes g->prompt as is when raw_prompt), offers the
 * server-side tools allowed to tenant, compiles the constraint and
 * submits n jobs. 0, or -1 with e filled (nothing submitted). */
int gen_submit(struct gen *g, uint32_t tenant, unsigned n, struct api_error *e);
/* A rendered prompt's markup as kvd_request.markup wants it (malloc'd,
 * *n spans; NULL when out of memory). */
struct kvd_span *gen_prompt_markup(const struct chat_prompt *p, size_t *n);

/* Consumes events until there are bytes to send (stream), the end, or
 * timeout. 1 something happened, 0 nothing yet. */
int gen_step(struct gen *g, int timeout_ms);
/* Consumes every event queued now (never waits): 1 when the request is
 * over (finished, failed or the client gone), 0 when it waits for more. */
int gen_pump(struct gen *g);
/* When the gen must be looked at even without an event (CLOCK_MONOTONIC
 * ns: an SSE keep-alive, a cancelled job that did not end); 0: never. */
uint64_t gen_wake_at(const struct gen *g);

/* A choice's calls with names and arguments pointing into call_text
 * (valid until the choice changes). */
const struct tc_call *gen_calls(struct gen_choice *c);

/* SSE output: "data: JSON\n\n" or "event: NAME\ndata: JSON\n\n"; json
 * is freed; NULL marks out of memory. */
void gen_sse_data(struct gen *g, char *json);
void gen_sse_event(struct gen *g, const char *name, char *json);
void gen_sse_raw(struct gen *g, const char *text);
/* A delta event's JSON object, as gen_sse_data / gen_sse_event, with
 * stream_options.include_obfuscation honoured: an "obfuscation" field of
 * random characters pads the object to a multiple of
 * GEN_OBFUSCATION_QUANTUM bytes, so its size says less of its text. */
#define GEN_OBFUSCATION_QUANTUM 64
char *gen_obfuscate(const struct gen *g, char *json);

/* A stream's next bytes for the HTTP layer's reader (never waits): the
 * number copied to buf, 0 at the end, -1 when it must be cut (client
 * gone, out of memory), GEN_AGAIN when nothing is ready yet. */
#define GEN_AGAIN (-2)
long gen_sse_read(struct gen *g, char *buf, size_t max);

/* The finish of a choice: "stop", "length", "tool_calls" (OpenAI's). */
const char *gen_finish_reason(const struct gen_choice *c);

#endif
