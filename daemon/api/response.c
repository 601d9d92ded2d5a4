// SPDX-License-Identifier: MIT
/*
 * response.c - chat.completion and chat.completion.chunk JSON (see
 * response.h), built with jansson. Our one extension is a top-level
 * "kvarena" object carrying the session id (for DELETE /v1/sessions/{id}).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "response.h"
#include "strbuf.h"

const char *resp_finish_reason(enum kvd_finish f, size_t n_calls)
{
	if (f == KVD_FINISH_LENGTH)
		return "length";
	return n_calls ? "tool_calls" : "stop";
}

static json_t *bytes_array(const char *s, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer((unsigned char)s[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *resp_logprob(const struct kvd_event *ev)
{
	const char *text = ev->text ? ev->text : "";
	size_t len = ev->text_len;
	json_t *top = json_array(), *o;

	/* the chosen token's own bytes, when it is among the top ones: the
	 * event's text may hold a partial character back */
	for (uint32_t i = 0; i < ev->n_top; i++)
		if (ev->top[i].token == ev->token) {
			text = ev->top[i].text;
			len = ev->top[i].text_len;
		}
	for (uint32_t i = 0; top && i < ev->n_top; i++) {
		const struct kvd_top_logprob *t = &ev->top[i];

		if (json_array_append_new(top, json_pack("{s:o, s:f, s:o}",
				"token", api_json_string_lossy(t->text, t->text_len),
				"logprob", (double)t->logprob,
				"bytes", bytes_array(t->text, t->text_len)))) {
			json_decref(top);
			return NULL;
		}
	}
	if (!top)
		return NULL;
	o = json_pack("{s:o, s:f, s:o, s:o}", "token", api_json_string_lossy(text, len),
		      "logprob", (double)ev->logprob, "bytes",
		      bytes_array(text, len), "top_logprobs", top);
	return o;
}

static json_t *usage_json(const struct resp_ctx *c, const struct kvd_usage *u)
{
	json_t *o = json_pack("{s:I, s:I, s:I, s:{s:I}}",
			      "prompt_tokens", (json_int_t)u->prompt_tokens,
			      "completion_tokens", (json_int_t)u->completion_tokens,
			      "total_tokens", (json_int_t)u->prompt_tokens + u->completion_tokens,
			      "prompt_tokens_details",
			      "cached_tokens", (json_int_t)u->cached_tokens);

	/* a thinking family's: how many of the completion tokens were its
	 * think block (OpenAI's field) */
	if (o && c->reasoning_tokens &&
	    json_object_set_new(o, "completion_tokens_details",
				json_pack("{s:I}", "reasoning_tokens",
					  (json_int_t)c->reasoning_tokens))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *call_json(const struct tc_call *c, size_t index, int with_index)
{
	json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", c->id,
			      "type", "function", "function", "name", c->name,
			      "arguments", c->arguments, c->arguments_len);

	if (o && with_index &&
	    json_object_set_new(o, "index", json_integer((json_int_t)index))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static char *dump(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	return s;
}

static json_t *base(const struct resp_ctx *c, const char *object)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", c->id, "object", object,
			      "created", (json_int_t)c->created, "model", c->model);

	if (o && c->fingerprint &&
	    json_object_set_new(o, "system_fingerprint", json_string(c->fingerprint))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static char *chunk(const struct resp_ctx *c, json_t *delta, json_t *logprobs,
		   const char *finish, json_t *extension);

static double per(double a, double b)
{
	return b > 0 ? a / b : 0;
}

json_t *resp_timings(const struct kvd_usage *u, double ttft_ms, double total_ms)
{
	double pn = u->prompt_tokens - (u->cached_tokens < u->prompt_tokens ?
					u->cached_tokens : u->prompt_tokens);
	double gn = u->completion_tokens, gms = total_ms > ttft_ms ? total_ms - ttft_ms : 0;

	/* the first generated token is the prefill's: decode made the rest */
	return json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f}",
			 "cache_n", (json_int_t)u->cached_tokens,
			 "prompt_n", (json_int_t)pn, "prompt_ms", ttft_ms,
			 "prompt_per_token_ms", per(ttft_ms, pn),
			 "prompt_per_second", per(pn * 1000, ttft_ms),
			 "predicted_n", (json_int_t)gn, "predicted_ms", gms,
			 "predicted_per_token_ms", per(gms, gn > 1 ? gn - 1 : 0),
			 "predicted_per_second", per((gn > 1 ? gn - 1 : 0) * 1000, gms));
}

static json_t *ext_of(const struct resp_ctx *c, const char *session_id)
{
	json_t *o = json_pack("{s:s?}", "session_id", session_id);

	if (o && c && c->has_timings &&
	    json_object_set_new(o, "timings", resp_timings(&c->usage, c->ttft_ms, c->total_ms))) {
		json_decref(o);
		return NULL;
	}
	/* the conversation's KV came back from the disk tier for this turn */
	if (o && c && c->has_timings && (c->usage.restored_tokens || c->usage.restore_stall_ms) &&
	    json_object_set_new(o, "kv", json_pack("{s:I, s:I}",
						   "restored_n", (json_int_t)c->usage.restored_tokens,
						   "restore_stall_ms",
						   (json_int_t)c->usage.restore_stall_ms))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

char *resp_completion(const struct resp_ctx *c, const struct tc_result *tr,
		      const char *finish, const struct kvd_usage *u,
		      const char *session_id, json_t *logprobs)
{
	return resp_completion_runs(c, tr, finish, u, session_id, logprobs, NULL);
}

json_t *resp_tool_run(const struct kvd_tool_run *t)
{
	return json_pack("{s:i, s:i, s:s, s:o, s:s, s:i, s:o, s:f}",
			 "round", (int)t->round, "index", (int)t->index, "name", t->name,
			 "arguments", api_json_string_lossy(t->arguments, t->arguments_len),
			 "exit_reason", t->exit_reason, "exit_code", t->exit_code,
			 "output", api_json_string_lossy(t->output, t->output_len),
			 "wall_ms", t->wall_ms);
}

char *resp_chunk_tool_run(const struct resp_ctx *c, json_t *run)
{
	json_t *e = run ? json_pack("{s:o}", "tool_run", run) : NULL;

	if (!e)
		return NULL;
	return chunk(c, json_object(), NULL, NULL, e);
}

json_t *resp_choice(const struct tc_result *tr, unsigned index, const char *finish,
		    json_t *logprobs)
{
	json_t *msg = NULL, *calls = NULL, *lp = json_null();
	int r;

	/* json_pack's "o" and json_object_set_new() take the reference
	 * whether or not they succeed */
	if (logprobs)
		lp = json_pack("{s:o}", "content", logprobs);
	if (!lp)
		return NULL;
	if (tr->n_calls) {
		calls = json_array();
		for (size_t i = 0; calls && i < tr->n_calls; i++)
			if (json_array_append_new(calls, call_json(&tr->calls[i], i, 0)))
				goto fail;
		if (!calls)
			goto fail;
	}
	msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
			tr->n_calls && !tr->content_len ? json_null() :
			api_json_string_lossy(tr->content, tr->content_len), "refusal");
	if (!msg)
		goto fail;
	if (calls) {
		r = json_object_set_new(msg, "tool_calls", calls);
		calls = NULL;
		if (r)
			goto fail;
	}
	/* a family that thinks: its reasoning apart, as llama.cpp's and
	 * vLLM's servers name it (only when there was some) */
	if (tr->reasoning_len &&
	    json_object_set_new(msg, "reasoning_content",
				api_json_string_lossy(tr->reasoning, tr->reasoning_len)))
		goto fail;
	return json_pack("{s:i, s:o, s:o, s:s}", "index", (int)index, "message", msg,
			 "logprobs", lp, "finish_reason", finish);
fail:
	json_decref(msg);
	json_decref(calls);
	json_decref(lp);
	return NULL;
}

json_t *resp_ext(const struct resp_ctx *c, const char *session_id)
{
	return ext_of(c, session_id);
}

char *resp_completion_choices(const struct resp_ctx *c, json_t *choices,
			      const struct kvd_usage *u, json_t *ext)
{
	json_t *o = base(c, "chat.completion");

	if (!o || !choices || !ext || json_object_set_new(o, "choices", choices) ||
	    json_object_set_new(o, "usage", usage_json(c, u)) ||
	    json_object_set_new(o, "kvarena", ext)) {
		if (!o) {
			json_decref(choices);
			json_decref(ext);
		}
		json_decref(o);
		return NULL;
	}
	return dump(o);
}

char *resp_completion_runs(const struct resp_ctx *c, const struct tc_result *tr,
			   const char *finish, const struct kvd_usage *u,
			   const char *session_id, json_t *logprobs, json_t *tool_runs)
{
	json_t *ch = resp_choice(tr, 0, finish, logprobs), *e = ext_of(c, session_id);

	if (e && tool_runs && json_object_set_new(e, "tool_runs", tool_runs)) {
		json_decref(e);
		e = NULL;
	} else if (!e) {
		json_decref(tool_runs);
	}
	return resp_completion_choices(c, ch ? json_pack("[o]", ch) : NULL, u, e);
}

/* A chunk with one choice; delta, logprobs and extension are stolen. */
static char *chunk(const struct resp_ctx *c, json_t *delta, json_t *logprobs,
		   const char *finish, json_t *extension)
{
	json_t *o = base(c, "chat.completion.chunk"), *choices = NULL;
	json_t *lp = logprobs ? json_pack("{s:o}", "content", logprobs) : json_null();

	if (delta && lp)
		choices = json_pack("[{s:i, s:o, s:o, s:o}]", "index", (int)c->choice,
				    "delta", delta, "logprobs", lp, "finish_reason",
				    finish ? json_string(finish) : json_null());
	else {
		json_decref(delta);
		json_decref(lp);
	}
	if (!o || json_object_set_new(o, "choices", choices) ||
	    (c->usage_null && json_object_set_new(o, "usage", json_null())) ||
	    (extension && json_object_set_new(o, "kvarena", extension))) {
		if (!o) {
			json_decref(choices);
			json_decref(extension);
		}
		json_decref(o);
		return NULL;
	}
	return dump(o);
}

char *resp_chunk_role(const struct resp_ctx *c)
{
	return chunk(c, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
		     NULL, NULL, NULL);
}

char *resp_chunk_content(const struct resp_ctx *c, const char *text,
			 size_t len, json_t *logprobs)
{
	return chunk(c, len ? json_pack("{s:o}", "content", api_json_string_lossy(text, len)) :
		     json_object(), logprobs, NULL, NULL);
}

char *resp_chunk_reasoning(const struct resp_ctx *c, const char *text, size_t len)
{
	return chunk(c, json_pack("{s:o}", "reasoning_content", api_json_string_lossy(text, len)),
		     NULL, NULL, NULL);
}

char *resp_chunk_call(const struct resp_ctx *c, size_t index,
		      const struct tc_call *call)
{
	json_t *cj = json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}",
			       "index", (json_int_t)index, "id", call->id,
			       "type", "function", "function", "name", call->name,
			       "arguments", "");

	return chunk(c, json_pack("{s:[o]}", "tool_calls", cj), NULL, NULL, NULL);
}

char *resp_chunk_call_args(const struct resp_ctx *c, size_t index,
			   const char *args, size_t len)
{
	json_t *cj = json_pack("{s:I, s:{s:s%}}", "index", (json_int_t)index,
			       "function", "arguments", args, len);

	return chunk(c, json_pack("{s:[o]}", "tool_calls", cj), NULL, NULL, NULL);
}

char *resp_chunk_finish(const struct resp_ctx *c, const char *finish,
			const char *session_id)
{
	return chunk(c, json_object(), NULL, finish, ext_of(c, session_id));
}

char *resp_chunk_usage(const struct resp_ctx *c, const struct kvd_usage *u,
		       const char *session_id)
{
	json_t *o = base(c, "chat.completion.chunk");

	if (!o || json_object_set_new(o, "choices", json_array()) ||
	    json_object_set_new(o, "usage", usage_json(c, u)) ||
	    json_object_set_new(o, "kvarena", ext_of(c, session_id))) {
		json_decref(o);
		return NULL;
	}
	return dump(o);
}
