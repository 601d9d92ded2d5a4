/* SPDX-License-Identifier: MIT */
/*
 * response.h - the JSON the API sends back for chat completions: the
 * chat.completion object and the chat.completion.chunk objects of a
 * stream (each returned as a malloc'd compact JSON string, NULL when out of
 * memory). Knows nothing about HTTP.
 */
#ifndef KVD_API_RESPONSE_H
#define KVD_API_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kvd.h"
#include "chat.h"

struct resp_ctx {
	const char *id;		/* "chatcmpl-..." */
	const char *model;
	int64_t created;	/* Unix seconds */
	int usage_null;		/* streaming with include_usage: "usage": null */
	const char *fingerprint;	/* system_fingerprint, or NULL */
	unsigned choice;		/* chunks: the choice's index */
	/* set when the orchestrator said DONE: "kvarena": {"timings"} */
	int has_timings;
	double ttft_ms, total_ms;
	struct kvd_usage usage;
	/* usage.completion_tokens_details.reasoning_tokens (0: absent) */
	uint32_t reasoning_tokens;
};

/* llama.cpp's server's "timings" object from the orchestrator's figures:
 * prompt_n (tokens prefilled), cache_n (reused), prompt_ms (submission to
 * first token, queueing included), predicted_n, predicted_ms (first token
 * to the end) and the per-token and per-second rates. */
json_t *resp_timings(const struct kvd_usage *u, double ttft_ms, double total_ms);

/* {token, logprob, bytes, top_logprobs} for one token event; NULL when out
 * of memory. Token bytes that are not valid UTF-8 show as U+FFFD in
 * "token"; "bytes" has them exactly. */
json_t *resp_logprob(const struct kvd_event *ev);

/* The whole chat.completion; logprobs is the "content" array (stolen) or
 * NULL when not requested. */
char *resp_completion(const struct resp_ctx *c, const struct tc_result *tr,
		      const char *finish, const struct kvd_usage *u,
		      const char *session_id, json_t *logprobs);

/* One choice {index, message, logprobs, finish_reason} (logprobs stolen);
 * NULL when out of memory. */
json_t *resp_choice(const struct tc_result *tr, unsigned index, const char *finish,
		    json_t *logprobs);
/* The "kvarena" extension object: session_id, and timings once known. */
json_t *resp_ext(const struct resp_ctx *c, const char *session_id);
/* The chat.completion with these choices and that extension (both stolen;
 * NULL in either means out of memory). */
char *resp_completion_choices(const struct resp_ctx *c, json_t *choices,
			      const struct kvd_usage *u, json_t *ext);
/* The same with the server-side tool runs (a JSON array, stolen; NULL:
 * none) in "kvarena": {"tool_runs": [...]}. */
char *resp_completion_runs(const struct resp_ctx *c, const struct tc_result *tr,
			   const char *finish, const struct kvd_usage *u,
			   const char *session_id, json_t *logprobs, json_t *tool_runs);
/* {round, index, name, arguments, exit_reason, exit_code, output, wall_ms}
 * of one server-side tool run; NULL when out of memory. */
json_t *resp_tool_run(const struct kvd_tool_run *t);
/* A chunk with an empty delta and "kvarena": {"tool_run": run} (stolen). */
char *resp_chunk_tool_run(const struct resp_ctx *c, json_t *run);

char *resp_chunk_role(const struct resp_ctx *c);
/* content may be empty when only logprobs are sent (stolen; may be NULL) */
char *resp_chunk_content(const struct resp_ctx *c, const char *text,
			 size_t len, json_t *logprobs);
/* A piece of a thinking family's reasoning: {"reasoning_content": text} */
char *resp_chunk_reasoning(const struct resp_ctx *c, const char *text, size_t len);
/* A tool call: the header chunk (id, type, name, empty arguments), then
 * its arguments. */
char *resp_chunk_call(const struct resp_ctx *c, size_t index,
		      const struct tc_call *call);
char *resp_chunk_call_args(const struct resp_ctx *c, size_t index,
			   const char *args, size_t len);
char *resp_chunk_finish(const struct resp_ctx *c, const char *finish,
			const char *session_id);
char *resp_chunk_usage(const struct resp_ctx *c, const struct kvd_usage *u,
		       const char *session_id);

const char *resp_finish_reason(enum kvd_finish f, size_t n_calls);

#endif
