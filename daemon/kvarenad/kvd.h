/* SPDX-License-Identifier: MIT */
/*
 * kvd.h - the orchestrator's interface to the HTTP layer (daemon/api/).
 *
 * The orchestrator (daemon/kvarenad/) owns sessions, the prefix cache, the
 * scheduler and the stage workers. The HTTP layer parses and validates
 * OpenAI requests, renders the chat to prompt text (daemon/chat),
 * submits a job here and turns the job's events into JSON or SSE. It never
 * sees tokens' KV, blocks or workers.
 *
 * Threads: every function here may be called from any thread. A job is
 * used by one thread at a time (the connection's). Errors are negative
 * errno values; functions that can fail on user input also fill a
 * struct kvd_error the HTTP layer turns into an OpenAI error body.
 */
#ifndef KVD_H
#define KVD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvd;
struct kvd_job;
struct chat_template;

#define KVD_MAX_STOP 4		/* OpenAI: up to 4 stop sequences */
#define KVD_MAX_STOP_LEN 256	/* bytes per stop sequence */
#define KVD_MAX_TOP_LOGPROBS 20
#define KVD_MAX_LOGIT_BIAS 1024	/* entries of logit_bias */

struct kvd_logit_bias {
	int32_t token;			/* < kvd_vocab_size() */
	float bias;			/* -100..100; -100 bans the token */
};

/* Sampling and limits of one completion; the HTTP layer has validated the
 * ranges (temperature 0..2, top_p 0..1, top_logprobs 0..20, penalties
 * -2..2, repetition_penalty 0..10, min_p 0..1); the orchestrator checks
 * token ids. The worker's sampler applies them (daemon/engine/sample.c):
 * repetition penalty over the context, frequency and presence penalties
 * over the tokens generated, biases, then temperature, top-k, min-p,
 * top-p. */
struct kvd_sampling {
	float temperature;		/* 0: greedy */
	float top_p;			/* 1: off */
	uint64_t seed;
	int has_seed;			/* 0: the orchestrator picks a seed */
	uint32_t max_tokens;		/* 0: until the context or server cap */
	uint32_t n_stop;
	const char *stop[KVD_MAX_STOP];	/* NUL-terminated, non-empty */
	int logprobs;			/* 1: per-token logprob in events */
	uint32_t top_logprobs;		/* 0..KVD_MAX_TOP_LOGPROBS */
	uint32_t top_k;			/* 0: off */
	float min_p;			/* 0: off */
	float frequency_penalty;	/* 0: off */
	float presence_penalty;		/* 0: off */
	float repetition_penalty;	/* 1 (or 0): off */
	uint32_t n_logit_bias;		/* <= KVD_MAX_LOGIT_BIAS; copied at submit */
	const struct kvd_logit_bias *logit_bias;
	int ignore_eos;			/* never end the turn: max_tokens or the
					 * context ends the reply */
	int close_in_budget;		/* structured decoding near max_tokens
					 * steers the output to close in time
					 * (opt-in: it can change the answer) */
};

/* Structured decoding: sampling restricted so the output parses
 * (daemon/engine/kvconstrain.h). */
enum kvd_constraint_kind {
	KVD_CONSTRAIN_NONE = 0,
	KVD_CONSTRAIN_TOOLS,		/* tool calls; json: the "tools" array */
	KVD_CONSTRAIN_JSON_OBJECT,	/* any JSON object (json_object) */
	KVD_CONSTRAIN_JSON_SCHEMA,	/* json: a JSON Schema (json_schema) */
};

struct kvd_constraint {
	enum kvd_constraint_kind kind;
	const char *json;
	size_t json_len;
	const char *tool_name;		/* TOOLS: only this one (named choice) */
	uint32_t max_calls;		/* TOOLS: 1 without parallel_tool_calls; 0: default */
	int lazy;			/* TOOLS: free text until a call opens ("auto") */
};

/* A byte range of a prompt. */
struct kvd_span {
	size_t off, len;
};

struct kvd_request {
	const char *model;		/* must name the served model */
	const char *prompt;		/* rendered chat text, UTF-8 */
	size_t prompt_len;
	/* Where the prompt is the chat template's own markup (in order, not
	 * overlapping): there a marker's text is its special token; all else
	 * (client and tool text) is plain and never becomes one, whatever it
	 * spells (chat_prompt_markup() gives them, daemon/chat). NULL: the
	 * prompt is one text tokenized without special tokens, as before
	 * front ends marked their markup (a raw completion prompt). */
	const struct kvd_span *markup;
	size_t n_markup;
	const char *session_key;	/* prompt_cache_key or user; may be NULL: a
					 * routing hint, never the name of a
					 * conversation (it continues, cuts or
					 * claims none) */
	uint32_t tenant;		/* from the API key (0: no keys configured) */
	const char *request_id;		/* "chatcmpl-..." for logs; may be NULL */
	struct kvd_sampling s;
	/* Bit i: the i-th server-side tool of kvd_server_tools() was declared
	 * in the prompt (the HTTP layer appended it for this tenant). Calls
	 * only to such tools are run by the orchestrator; 0: none. */
	uint32_t server_tools;
	struct kvd_constraint c;	/* refused with KVD_ERR_INVALID (param
					 * "tools" or "response_format") when it
					 * uses what the compiler does not support */
	/* n > 1: choice 0's job, submitted with the same prompt; this choice
	 * waits for that one's prompt KV and copies what the prefix cache
	 * does not share, so the prompt is computed once (its last token
	 * again, for the logits). NULL: an ordinary request. */
	struct kvd_job *fork_of;
};

/* Maps to an HTTP status and OpenAI error type in the HTTP layer. */
enum kvd_err_kind {
	KVD_ERR_NONE = 0,
	KVD_ERR_INVALID,	/* 400 invalid_request_error */
	KVD_ERR_TOO_LONG,	/* 400, code "context_length_exceeded" */
	KVD_ERR_NOT_FOUND,	/* 404 (unknown model, unknown session) */
	KVD_ERR_BUSY,		/* 429, Retry-After: retry_after_s */
	KVD_ERR_QUOTA,		/* 429, tenant budget; Retry-After */
	KVD_ERR_UNAVAILABLE,	/* 503 (draining, no worker) */
	KVD_ERR_INTERNAL,	/* 500 */
};

struct kvd_error {
	enum kvd_err_kind kind;
	uint32_t retry_after_s;		/* BUSY, QUOTA */
	const char *param;		/* the offending field, or NULL */
	const char *code;		/* OpenAI "code", or NULL */
	char message[256];
};

enum kvd_finish {
	KVD_FINISH_STOP = 0,		/* end of turn or a stop sequence */
	KVD_FINISH_LENGTH,		/* max_tokens or the context */
};

struct kvd_usage {
	uint32_t prompt_tokens;
	uint32_t cached_tokens;		/* prompt tokens whose KV was reused */
	uint32_t completion_tokens;
	/* of cached_tokens, those whose KV the disk tier brought back for
	 * this turn (read from a spill file, or shared from the prefix cache
	 * as the file's hashes said), and how long the turn waited for it */
	uint32_t restored_tokens;
	uint32_t restore_stall_ms;
};

struct kvd_top_logprob {
	int32_t token;
	float logprob;
	const char *text;		/* the token's bytes (not NUL-safe) */
	size_t text_len;
};

enum kvd_event_type {
	KVD_EV_TOKEN = 1,
	KVD_EV_DONE,
	KVD_EV_ERROR,
	KVD_EV_TOOL_RUN,	/* a server-side tool ran; decoding goes on */
};

/* One server-side tool run (KVD_EV_TOOL_RUN). The reply's text up to here
 * ended in calls to server-side tools only; the orchestrator ran them,
 * appended their results as tool turns and decodes the next round. */
struct kvd_tool_run {
	uint32_t round;			/* 1.. within the request */
	uint32_t index;			/* the call's place in its round */
	const char *name;		/* NUL-terminated */
	const char *arguments;		/* the call's JSON object, verbatim */
	size_t arguments_len;
	const char *exit_reason;	/* "exit", "signal", "timeout", "oom",
					   "output-cap", "setup-failed", "refused" */
	int exit_code;			/* exit code or signal number */
	const char *output;		/* exactly what the model was given */
	size_t output_len;
	double wall_ms;
};

/* Valid until the next kvd_job_next() or kvd_job_free() on the job. */
struct kvd_event {
	enum kvd_event_type type;
	/* TOKEN: the text this token completes (UTF-8; may be empty while a
	 * multi-byte character or a possible stop sequence is held back). */
	const char *text;
	size_t text_len;
	int32_t token;
	float logprob;			/* when requested */
	uint32_t n_top;
	const struct kvd_top_logprob *top;
	/* DONE */
	enum kvd_finish finish;
	struct kvd_usage usage;
	const char *session_id;		/* for DELETE /v1/sessions/{id} */
	double ttft_ms, total_ms;	/* from submission: first token, done */
	uint32_t stop_seq;		/* 1 + the index of the stop sequence
					 * that ended the reply; 0: none */
	/* ERROR (after submission: a worker failed for good, shutdown) */
	struct kvd_error err;
	/* TOOL_RUN */
	const struct kvd_tool_run *tool_run;
};

/* Queue a completion. 0 and *jobp, or a negative errno with err filled
 * (BUSY/QUOTA: 429; TOO_LONG; NOT_FOUND for an unknown model). */
int kvd_job_submit(struct kvd *d, const struct kvd_request *req,
		   struct kvd_job **jobp, struct kvd_error *err);
/* Wait up to timeout_ms (-1: forever) for the next event: 1 and *ev, 0 on
 * timeout. After DONE or ERROR there are no more events. */
int kvd_job_next(struct kvd_job *job, struct kvd_event *ev, int timeout_ms);
/* The same over n jobs (n > 1 choices of one request): the next event of
 * any of them, 1 with *which its index, 0 on timeout. */
int kvd_job_next_any(struct kvd_job *const *jobs, unsigned n, struct kvd_event *ev,
		     unsigned *which, int timeout_ms);
/* For servers that never wait in kvd_job_next (an event loop): fn(arg)
 * is called when an event is queued on job while none was waiting (and at
 * once when one is waiting now), from whichever thread queued it, with the
 * job's queue locked: it must only note the news (wake its consumer), not
 * call back into the job or block. fn NULL: after the call returns, fn is
 * not running and is not called again. The consumer takes events with
 * kvd_job_next(job, ev, 0) until it returns 0 before it sleeps. */
void kvd_job_set_notify(struct kvd_job *job, void (*fn)(void *arg), void *arg);
/* The client went away: stop generating (the session is kept). */
void kvd_job_cancel(struct kvd_job *job);
void kvd_job_free(struct kvd_job *job);

/* DELETE /v1/sessions/{id}: release a session's KV now. -ENOENT unknown
 * (or another tenant's). */
int kvd_session_delete(struct kvd *d, const char *session_id, uint32_t tenant);

/* The served model's id (for /v1/models and the "model" check). */
const char *kvd_model_id(const struct kvd *d);
/* Token ids are < this (logit_bias, /tokenize). */
uint32_t kvd_vocab_size(const struct kvd *d);
/* What names this server's numerics (model, context, KV layout, kernel
 * set): OpenAI's system_fingerprint. Same seed and fingerprint, same
 * output. */
const char *kvd_system_fingerprint(const struct kvd *d);
/* The model's tokenizer. kvd_tokenize: text to ids (add_special: the BOS
 * the model's prompts start with; special token text such as
 * <|im_start|> becomes its control token, as in a rendered prompt);
 * returns the number of ids (written up to max) or -errno.
 * kvd_token_piece: one id's bytes (up to len), their length, or -errno
 * (-EINVAL: not a token id). */
int kvd_tokenize(struct kvd *d, const char *text, size_t len, int add_special,
		 int32_t *ids, size_t max);
int kvd_token_piece(struct kvd *d, int32_t id, char *buf, size_t len);
/* How many tokens a rendered chat prompt is, its markup given as in
 * kvd_request (special tokens only there; NULL: the whole text, as
 * kvd_tokenize with add_special): what a request with it counts
 * (Anthropic's count_tokens). -errno. */
int kvd_count_prompt(struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup);
/* The served model's family (daemon/chat/chat.h): how prompts are rendered
 * and generated tool calls parsed. Lives as long as d. */
const struct chat_template *kvd_chat_template(const struct kvd *d);
/* Longest prompt + completion in tokens. */
uint32_t kvd_context_len(const struct kvd *d);
/* 1 when able to serve, 0 while starting or draining. */
int kvd_ready(const struct kvd *d);
/* /health: KVD_HEALTH_OK; KVD_HEALTH_DEGRADED when a stage has no
 * working worker but the other stage's workers still serve its work
 * ([sched] share_stages); KVD_HEALTH_DOWN when no worker can serve a
 * request (they keep failing: restarts back off); -1 while starting or
 * draining. Lock-free. */
#define KVD_HEALTH_OK 0
#define KVD_HEALTH_DEGRADED 1
#define KVD_HEALTH_DOWN 2
int kvd_health(const struct kvd *d);
/* Server-side tools (Documentation/daemon.md, "Server-side tools"): a
 * JSON array of OpenAI function objects ({"name", "description",
 * "parameters"}), fixed for the daemon's life; element i is bit i of
 * kvd_request.server_tools. NULL when none are enabled. */
const char *kvd_server_tools(const struct kvd *d);
/* 1 when the tenant may have them: [tenant.NAME] server_tools = yes, or
 * any request when no API keys are configured at all. */
int kvd_server_tools_allowed(struct kvd *d, uint32_t tenant);
/* Prometheus text exposition of every metric; malloc'd, caller frees. */
char *kvd_metrics_text(struct kvd *d);

#ifdef __cplusplus
}
#endif
#endif
