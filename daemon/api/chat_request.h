/* SPDX-License-Identifier: MIT */
/*
 * chat_request.h - a validated POST /v1/chat/completions body. Strings
 * point into the parsed JSON (root), which the request owns; nothing here
 * is used after chat_request_free().
 */
#ifndef KVD_API_CHAT_REQUEST_H
#define KVD_API_CHAT_REQUEST_H

#include <stddef.h>

#include <jansson.h>

#include "chat.h"
#include "error.h"
#include "kvd.h"

/* Bounds on what one request may carry (besides the body cap). */
#define CHAT_MAX_MESSAGES 4096
#define CHAT_MAX_PARTS 256		/* content parts per message */
#define CHAT_MAX_TOOLS 128
#define CHAT_MAX_CALLS 128		/* tool calls per assistant message */
#define CHAT_MAX_ID 256			/* tool_call ids, user, cache key */
#define CHAT_MAX_CHOICES 16		/* n */

/* Messages, calls and tools are the model families' normalized
 * conversation (daemon/chat/chat.h). */

enum chat_tool_choice { CHAT_TOOLS_AUTO, CHAT_TOOLS_NONE, CHAT_TOOLS_REQUIRED,
			 CHAT_TOOLS_NAMED };

/* response_format: JSON formats are served by constrained decoding (the
 * orchestrator compiles the schema and refuses what it does not support). */
enum chat_format { CHAT_FORMAT_TEXT, CHAT_FORMAT_JSON_OBJECT,
		   CHAT_FORMAT_JSON_SCHEMA };

/* OpenAI's reasoning efforts above "minimal" (none and minimal turn
 * thinking off) */
enum chat_effort { CHAT_EFFORT_UNSET, CHAT_EFFORT_LOW, CHAT_EFFORT_MEDIUM, CHAT_EFFORT_HIGH,
		   CHAT_EFFORT_XHIGH };

struct chat_request {
	json_t *root;
	json_t *keep;			/* strings made while parsing */
	const char *model;
	struct chat_msg *msgs;
	size_t n_msgs;
	struct chat_tool *tools;
	size_t n_tools;
	enum chat_tool_choice tool_choice;
	const char *tool_choice_name;	/* CHAT_TOOLS_NAMED */
	int parallel_tool_calls;
	int stream;
	int include_usage;
	int obfuscate;			/* stream_options.include_obfuscation */
	const char *user;		/* NULL when absent */
	const char *prompt_cache_key;	/* NULL when absent */
	enum chat_format format;
	json_t *json_schema;		/* CHAT_FORMAT_JSON_SCHEMA */
	struct kvd_sampling s;
	struct kvd_logit_bias *bias;	/* s.logit_bias */
	unsigned n;			/* choices, 1..CHAT_MAX_CHOICES */
	/* whether a family that thinks (qwen3) may reason before the reply:
	 * chat_template_kwargs.enable_thinking, or an API's "no reasoning"
	 * (reasoning_effort none, Anthropic's thinking disabled) */
	enum chat_thinking thinking;
	/* the reasoning of a family that thinks stays in the content, as
	 * generated (llama.cpp's reasoning_format "none"); else it comes
	 * apart: reasoning_content, a reasoning item, thinking blocks */
	int reasoning_inline;
	/* the most tokens the think block may take (Anthropic's
	 * thinking.budget_tokens); then it is closed and the reply goes on
	 * (gen.c); 0: no budget */
	uint32_t think_budget;
	/* OpenAI's reasoning effort above none (chat_effort_budget): a
	 * family that thinks gets that budget unless one is given; one that
	 * does not is refused (gen.c, which knows the family); effort_param
	 * names the field for that 400 */
	enum chat_effort effort;
	const char *effort_param;
};

/* Parses an OpenAI reasoning effort (none, minimal, low, medium, high,
 * xhigh) from v into r (thinking off for none and minimal, r->effort for
 * the rest); absent or null sets nothing. 0, or -1 with e filled. */
int param_effort(struct chat_request *r, json_t *v, const char *param, struct api_error *e);
/* The think budget an effort gives a family that thinks (0: none), and
 * its name as the API spells it ("" for CHAT_EFFORT_UNSET). */
uint32_t chat_effort_budget(enum chat_effort effort);
const char *chat_effort_name(enum chat_effort effort);

/* What every front end's parser shares (chat_request.c): the body
 * parsed into r->root with the defaults set, the top-level keys checked
 * against known (400 unknown_parameter), and model checked (400 missing,
 * 404 model_not_found). 0, or -1 with e filled; r needs
 * chat_request_free() either way. */
int chat_request_begin(const char *body, size_t len, const char *model_id,
		       const char *const *known, size_t n_known, struct chat_request *r,
		       struct api_error *e);
/* A copy of s[0..n) (valid UTF-8) that lives as long as r; NULL when out
 * of memory. */
const char *chat_request_keep(struct chat_request *r, const char *s, size_t n);

/* Typed fields of a JSON object, errors naming param (OpenAI's wording);
 * absent or null leaves *out as it is. 0, or -1 with e filled. */
/* (v NULL: a missing key, "Missing required parameter") */
const char *param_type_name(const json_t *v);
int param_wrong_type(struct api_error *e, const char *param, const json_t *v,
		     const char *want);
int param_number(struct api_error *e, json_t *o, const char *key, double lo, double hi,
		 double *out);
int param_int(struct api_error *e, json_t *o, const char *key, json_int_t lo,
	      json_int_t hi, json_int_t *out, int *present);
int param_bool(struct api_error *e, json_t *o, const char *key, int *out);
int param_string(struct api_error *e, json_t *o, const char *key, const char *param,
		 size_t max, const char **out);
/* Stop sequences (a string or at most KVD_MAX_STOP strings) into s. */
int param_stop(struct api_error *e, json_t *v, const char *key, struct kvd_sampling *s);
/* top_k, min_p, repetition_penalty / repeat_penalty, ignore_eos,
 * logit_bias and the "kvarena" extension object into r->s. */
int param_extra_sampling(struct chat_request *r, json_t *root, struct api_error *e);

/*
 * OpenAI's fields that say how a request is served rather than what is
 * generated, each honoured or refused (never accepted and ignored):
 * service_tier ("auto"/"default": the one tier), prompt_cache_retention
 * ("in_memory": what the KV retention is; "24h" refused), metadata
 * (validated: labels for a stored object), safety_identifier (an end
 * user's id, in the request log line), and the given verbosity (key in o,
 * named param) "medium" only (the model has one way of answering).
 */
int param_serving(struct api_error *e, json_t *root);
int param_verbosity(struct api_error *e, json_t *o, const char *key, const char *param);
/* stream_options: include_usage (into *include_usage, NULL: refused),
 * include_obfuscation (into r->obfuscate); any other key is 400; only
 * with stream. */
int param_stream_options(struct chat_request *r, json_t *root, int stream, int *include_usage,
			 struct api_error *e);

/* 0, or -1 with e filled (400; 404 model_not_found when model is not
 * model_id). r needs chat_request_free() either way. */
int chat_request_parse(const char *body, size_t len, const char *model_id,
		       struct chat_request *r, struct api_error *e);
void chat_request_free(struct chat_request *r);

#endif
