// SPDX-License-Identifier: MIT
/*
 * responses.c - the OpenAI Responses API: POST /v1/responses (JSON or
 * the typed event stream), GET and DELETE /v1/responses/{id}, GET
 * /v1/responses/{id}/input_items. The input items (messages, function
 * calls and their outputs; Codex's custom tool calls) become the
 * normalized conversation, rendered by the model's family; the
 * generation is gen.c's. A stored response (store, the default) keeps
 * its input and output items (responses_store.c): a request naming it as
 * previous_response_id sends only its new items, the conversation is
 * rebuilt from the chain, renders to the same bytes as before, and the
 * orchestrator finds the session it kept (in TOOL_WAIT while the client
 * ran the tools) and prefills only the new items.
 *
 * Custom tools (type "custom", Codex's freeform tools such as
 * apply_patch) are offered to the model as a function with one string
 * parameter, "input"; a call of one comes back as a custom_tool_call
 * item whose input is that string. Their grammar is shown to the model,
 * not enforced (Documentation/api.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "log.h"
#include "chat_request.h"
#include "response.h"
#include "responses_store.h"

#define RESP_MAX_ITEMS 8192
#define RESP_MAX_CUSTOM 32

enum open_kind { O_NONE, O_TEXT, O_CALL, O_REASONING };

struct resp_fe {
	/* the request */
	json_t *input;			/* this request's input items, with ids */
	json_t *tools;			/* as the client declared them */
	json_t *tool_choice;		/* as given, or "auto" */
	json_t *text_cfg;		/* as given, or {"format": {"type": "text"}} */
	json_t *metadata;
	json_t *not_offered;		/* hosted tools declined: [{type, name}] */
	const char *instructions;
	const char *prev;
	int store;
	int logprobs;			/* include message.output_text.logprobs */
	int top_logprobs;
	char *custom[RESP_MAX_CUSTOM];	/* custom tools' names */
	size_t n_custom;
	/* the output */
	json_t *output;
	unsigned seq;
	enum open_kind open;
	int open_custom;
	char item_id[48];
	struct strbuf text;		/* the open message's text */
	struct strbuf reasoning;	/* the open reasoning item's text */
	json_t *text_lp;		/* ... and its logprobs */
	const struct tc_call *call;	/* the open call (its id, name) */
	char call_id[TC_ID_LEN + 1];
	char call_name[TC_MAX_NAME + 1];
	struct strbuf args;
};

/* ---------------------------------------------------------------- output */

static int is_custom(const struct resp_fe *f, const char *name)
{
	for (size_t i = 0; i < f->n_custom; i++)
		if (!strcmp(f->custom[i], name))
			return 1;
	return 0;
}

static json_t *usage_json(const struct kvd_usage *u, uint32_t reasoning_tokens)
{
	return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}",
			 "input_tokens", (json_int_t)u->prompt_tokens,
			 "input_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens,
			 "output_tokens", (json_int_t)u->completion_tokens,
			 "output_tokens_details", "reasoning_tokens", (json_int_t)reasoning_tokens,
			 "total_tokens", (json_int_t)u->prompt_tokens + u->completion_tokens);
}

/* The response object; status "in_progress", "completed", "incomplete"
 * or "failed". */
static json_t *response_obj(struct gen *g, const char *status, const struct api_error *err)
{
	struct resp_fe *f = g->fe;
	struct gen_choice *c = &g->ch[0];
	int done = strcmp(status, "in_progress") != 0;
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:o, s:o, s:o, s:o, s:n, s:s, s:O,"
			      " s:b, s:o, s:{s:n, s:n}, s:s, s:b, s:f, s:O, s:O, s:O, s:i,"
			      " s:f, s:s, s:o, s:o, s:O}",
		"id", g->id, "object", "response", "created_at", (json_int_t)g->created,
		"status", status, "background", 0,
		"error", err ? json_pack("{s:s, s:s}", "code", err->code ? err->code : "server_error",
					 "message", err->message) : json_null(),
		"incomplete_details", !strcmp(status, "incomplete") ?
			json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
		"instructions", f->instructions ? json_string(f->instructions) : json_null(),
		"max_output_tokens", g->cr.s.max_tokens ? json_integer(g->cr.s.max_tokens) :
			json_null(),
		"max_tool_calls", "model", g->model, "output", f->output,
		"parallel_tool_calls", g->cr.parallel_tool_calls,
		"previous_response_id", f->prev ? json_string(f->prev) : json_null(),
		"reasoning", "effort", "summary",
		"service_tier", "default", "store", f->store,
		"temperature", (double)g->cr.s.temperature, "text", f->text_cfg,
		"tool_choice", f->tool_choice, "tools", f->tools,
		"top_logprobs", f->top_logprobs, "top_p", (double)g->cr.s.top_p,
		"truncation", "disabled",
		"usage", done && !err ? usage_json(&c->usage, c->reasoning_tokens) : json_null(),
		"user", g->cr.user ? json_string(g->cr.user) : json_null(),
		"metadata", f->metadata);
	struct resp_ctx rc = { .has_timings = done, .ttft_ms = c->ttft_ms,
			       .total_ms = c->total_ms, .usage = c->usage };
	json_t *ext;

	if (!o || !done)
		return o;
	ext = resp_ext(&rc, c->session_id);
	if (ext && c->tool_runs)
		json_object_set(ext, "tool_runs", c->tool_runs);
	if (ext && json_array_size(f->not_offered))
		json_object_set(ext, "tools_not_offered", f->not_offered);
	if (!ext || json_object_set_new(o, "kvarena", ext)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* One event: "type" and "sequence_number" added. */
static void ev(struct gen *g, const char *type, json_t *o)
{
	struct resp_fe *f = g->fe;
	char *s = NULL;

	size_t tl = strlen(type);

	if (o && !json_object_set_new(o, "type", json_string(type)) &&
	    !json_object_set_new(o, "sequence_number", json_integer(f->seq++)))
		s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (tl > 6 && !strcmp(type + tl - 6, ".delta"))
		s = gen_obfuscate(g, s);
	gen_sse_event(g, type, s);
}

static json_t *text_part(struct resp_fe *f)
{
	return json_pack("{s:s, s:o, s:[], s:O}", "type", "output_text", "text",
			 api_json_string_lossy(f->text.s ? f->text.s : "", f->text.len),
			 "annotations", "logprobs", f->text_lp);
}

/* A thinking family's reasoning: one reasoning_text part (no summary:
 * the model gives none). */
static json_t *reasoning_item(const char *id, const char *status, const char *text, size_t len)
{
	return json_pack("{s:s, s:s, s:s, s:[], s:[{s:s, s:o}]}", "id", id, "type", "reasoning",
			 "status", status, "summary", "content", "type", "reasoning_text",
			 "text", api_json_string_lossy(text ? text : "", len));
}

static json_t *message_item(const char *id, const char *status, json_t *part)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message",
			 "status", status, "role", "assistant", "content",
			 part ? json_pack("[o]", part) : json_array());
}

/* input of a custom tool's call: the "input" string of its arguments */
static json_t *custom_input(const char *args, size_t len)
{
	json_t *o = json_loadb(args, len, 0, NULL);
	json_t *in = json_incref(json_object_get(o, "input"));

	json_decref(o);
	if (!json_is_string(in)) {
		json_decref(in);
		in = api_json_string_lossy(args, len);	/* cut: what there is */
	}
	return in;
}

static json_t *call_item(struct resp_fe *f, const char *id, const char *status,
			 const char *call_id, const char *name, const char *args, size_t len)
{
	if (is_custom(f, name))
		return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", id,
				 "type", "custom_tool_call", "status", status, "call_id", call_id,
				 "name", name, "input", custom_input(args, len));
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "function_call",
			 "status", status, "call_id", call_id, "name", name,
			 "arguments", api_json_string_lossy(args, len));
}

static void close_open(struct gen *g)
{
	struct resp_fe *f = g->fe;
	int idx = (int)json_array_size(f->output);

	if (f->open == O_TEXT) {
		json_t *part = text_part(f);

		ev(g, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:o, s:O}", "item_id",
				f->item_id, "output_index", idx, "content_index", 0, "text",
				api_json_string_lossy(f->text.s ? f->text.s : "", f->text.len),
				"logprobs", f->text_lp));
		ev(g, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id",
				f->item_id, "output_index", idx, "content_index", 0, "part", part));
		json_array_append_new(f->output, message_item(f->item_id, "completed", part));
		ev(g, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx,
				"item", json_array_get(f->output, (size_t)idx)));
		sb_reset(&f->text);
		json_array_clear(f->text_lp);
	} else if (f->open == O_REASONING) {
		json_t *item = reasoning_item(f->item_id, "completed", f->reasoning.s, f->reasoning.len);
		json_t *part = json_incref(json_array_get(json_object_get(item, "content"), 0));

		ev(g, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id",
				f->item_id, "output_index", idx, "content_index", 0, "text",
				json_object_get(part, "text")));
		ev(g, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id",
				f->item_id, "output_index", idx, "content_index", 0, "part", part));
		json_array_append_new(f->output, item);
		ev(g, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx,
				"item", item));
		sb_reset(&f->reasoning);
	} else if (f->open == O_CALL) {
		json_t *item = call_item(f, f->item_id, "completed", f->call_id, f->call_name,
					 f->args.s ? f->args.s : "", f->args.len);

		if (f->open_custom)
			ev(g, "response.custom_tool_call_input.done", json_pack("{s:s, s:i, s:O}",
					"item_id", f->item_id, "output_index", idx, "input",
					json_object_get(item, "input")));
		else
			ev(g, "response.function_call_arguments.done", json_pack("{s:s, s:i, s:s, s:o}",
					"item_id", f->item_id, "output_index", idx, "name", f->call_name,
					"arguments", api_json_string_lossy(f->args.s ? f->args.s : "",
									   f->args.len)));
		json_array_append_new(f->output, item);
		ev(g, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx,
				"item", item));
		sb_reset(&f->args);
	}
	f->open = O_NONE;
}

static void on_start(struct gen *g)
{
	ev(g, "response.created", json_pack("{s:o}", "response", response_obj(g, "in_progress", NULL)));
	ev(g, "response.in_progress", json_pack("{s:o}", "response",
						response_obj(g, "in_progress", NULL)));
}

static void on_content(struct gen *g, struct gen_choice *c, const char *text, size_t len,
		       json_t *logprobs)
{
	struct resp_fe *f = g->fe;
	int idx = (int)json_array_size(f->output);
	json_t *lp = json_array();

	(void)c;
	if (!len) {
		json_decref(logprobs);
		json_decref(lp);
		return;
	}
	if (f->open != O_TEXT) {
		close_open(g);
		idx = (int)json_array_size(f->output);
		api_make_id(f->item_id, sizeof(f->item_id), "msg_");
		ev(g, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", idx,
				"item", message_item(f->item_id, "in_progress", NULL)));
		ev(g, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}",
				"item_id", f->item_id, "output_index", idx, "content_index", 0,
				"part", "type", "output_text", "text", "", "annotations", "logprobs"));
		f->open = O_TEXT;
	}
	sb_add(&f->text, text, len);
	if (logprobs && f->logprobs) {
		json_array_extend(lp, logprobs);
		json_array_extend(f->text_lp, logprobs);
	}
	json_decref(logprobs);
	ev(g, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id",
			f->item_id, "output_index", idx, "content_index", 0, "delta",
			api_json_string_lossy(text, len), "logprobs", lp));
}

/* A thinking family's reasoning: a reasoning item with one
 * reasoning_text part, streamed as the openai client assembles it. */
static void on_reasoning(struct gen *g, struct gen_choice *c, const char *text, size_t len)
{
	struct resp_fe *f = g->fe;
	int idx;

	(void)c;
	if (f->open != O_REASONING) {
		close_open(g);
		idx = (int)json_array_size(f->output);
		api_make_id(f->item_id, sizeof(f->item_id), "rs_");
		ev(g, "response.output_item.added", json_pack("{s:i, s:{s:s, s:s, s:s, s:[], s:[]}}",
				"output_index", idx, "item", "id", f->item_id, "type", "reasoning",
				"status", "in_progress", "summary", "content"));
		ev(g, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}",
				"item_id", f->item_id, "output_index", idx, "content_index", 0,
				"part", "type", "reasoning_text", "text", ""));
		f->open = O_REASONING;
	}
	idx = (int)json_array_size(f->output);
	sb_add(&f->reasoning, text, len);
	ev(g, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:o}", "item_id",
			f->item_id, "output_index", idx, "content_index", 0, "delta",
			api_json_string_lossy(text, len)));
}

static void on_call_start(struct gen *g, struct gen_choice *c, const struct tc_call *call)
{
	struct resp_fe *f = g->fe;
	int idx;

	(void)c;
	close_open(g);
	idx = (int)json_array_size(f->output);
	snprintf(f->call_id, sizeof(f->call_id), "%s", call->id);
	snprintf(f->call_name, sizeof(f->call_name), "%s", call->name);
	f->open_custom = is_custom(f, call->name);
	api_make_id(f->item_id, sizeof(f->item_id), f->open_custom ? "ctc_" : "fc_");
	ev(g, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", idx, "item",
			call_item(f, f->item_id, "in_progress", f->call_id, f->call_name, "", 0)));
	f->open = O_CALL;
}

static void on_call_args(struct gen *g, struct gen_choice *c, const char *args, size_t len)
{
	struct resp_fe *f = g->fe;

	(void)c;
	sb_add(&f->args, args, len);
	/* a custom call's input is one JSON string: sent whole when done */
	if (!f->open_custom)
		ev(g, "response.function_call_arguments.delta", json_pack("{s:s, s:i, s:o}",
				"item_id", f->item_id, "output_index", (int)json_array_size(f->output),
				"delta", api_json_string_lossy(args, len)));
}

static void on_call_end(struct gen *g, struct gen_choice *c)
{
	(void)c;
	close_open(g);
}

static const char *final_status(const struct gen *g)
{
	return g->ch[0].finish == KVD_FINISH_LENGTH ? "incomplete" : "completed";
}

static void store(struct gen *g, json_t *response, uint32_t tenant)
{
	struct resp_fe *f = g->fe;
	int rc;

	if (!f->store || !response)
		return;
	rc = responses_store_put(g->a->store, tenant, g->id, f->prev, f->input, f->output,
				 response);
	if (rc)
		kvd_log(KVD_LOG_WARN, "api", "%s: not stored (%s)", g->id, strerror(-rc));
}

static uint32_t tenant_of(const struct gen *g);

static void on_choice_done(struct gen *g, struct gen_choice *c)
{
	const char *st = final_status(g);
	json_t *r;

	(void)c;
	close_open(g);
	r = response_obj(g, st, NULL);
	store(g, r, tenant_of(g));
	ev(g, !strcmp(st, "completed") ? "response.completed" : "response.incomplete",
	   json_pack("{s:o}", "response", r));
}

static void on_error(struct gen *g, const struct api_error *e)
{
	close_open(g);
	ev(g, "response.failed", json_pack("{s:o}", "response", response_obj(g, "failed", e)));
}

/* non-stream: the message (all content), then the calls */
static char *body(struct gen *g)
{
	struct resp_fe *f = g->fe;
	struct gen_choice *c = &g->ch[0];
	const struct tc_call *calls = gen_calls(c);
	json_t *r;
	char *s;

	if (c->reasoning.len) {
		char id[48];

		api_make_id(id, sizeof(id), "rs_");
		json_array_append_new(f->output, reasoning_item(id, "completed", c->reasoning.s,
								c->reasoning.len));
	}
	if (c->content.len) {
		char id[48];

		api_make_id(id, sizeof(id), "msg_");
		sb_add(&f->text, c->content.s, c->content.len);
		if (c->logprobs && f->logprobs)
			json_array_extend(f->text_lp, c->logprobs);
		json_array_append_new(f->output, message_item(id, "completed", text_part(f)));
	}
	for (size_t i = 0; i < c->n_calls; i++) {
		char id[48];

		api_make_id(id, sizeof(id), is_custom(f, calls[i].name) ? "ctc_" : "fc_");
		json_array_append_new(f->output, call_item(f, id, "completed", calls[i].id,
				calls[i].name, calls[i].arguments, calls[i].arguments_len));
	}
	r = response_obj(g, final_status(g), NULL);
	store(g, r, tenant_of(g));
	s = r ? json_dumps(r, JSON_COMPACT) : NULL;
	json_decref(r);
	return s;
}

static void fe_free(struct gen *g)
{
	struct resp_fe *f = g->fe;

	if (!f)
		return;
	json_decref(f->input);
	json_decref(f->tools);
	json_decref(f->tool_choice);
	json_decref(f->text_cfg);
	json_decref(f->metadata);
	json_decref(f->not_offered);
	json_decref(f->output);
	json_decref(f->text_lp);
	for (size_t i = 0; i < f->n_custom; i++)
		free(f->custom[i]);
	sb_free(&f->text);
	sb_free(&f->reasoning);
	sb_free(&f->args);
	free(f);
	g->fe = NULL;
}

static const struct gen_ops resp_ops = {
	.start = on_start,
	.content = on_content,
	.reasoning = on_reasoning,
	.call_start = on_call_start,
	.call_args = on_call_args,
	.call_end = on_call_end,
	.choice_done = on_choice_done,
	.error = on_error,
	.body = body,
	.free = fe_free,
};

static uint32_t tenant_of(const struct gen *g)
{
	return g->tenant;
}

/* ---------------------------------------------------------------- input */

struct rparser {
	struct chat_request *r;
	struct resp_fe *f;
	struct api_error *e;
	char pp[160];
};

static int oom(struct rparser *p)
{
	api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory");
	return -1;
}

static int unsupported(struct rparser *p, const char *param, const char *fmt, const char *what)
{
	api_error_set(p->e, 400, API_INVALID, "unsupported_value", param, fmt, what);
	return -1;
}

/* Text parts (input_text, output_text, text) joined; a string as is. */
static int parts_text(struct rparser *p, json_t *v, const char **out, size_t *len)
{
	struct strbuf b = { 0 };
	json_t *part;
	size_t i;

	if (json_is_string(v)) {
		*out = json_string_value(v);
		*len = json_string_length(v);
		return 0;
	}
	if (!json_is_array(v))
		return param_wrong_type(p->e, p->pp, v, "a string or an array of content parts");
	json_array_foreach(v, i, part) {
		const char *t = json_string_value(json_object_get(part, "type"));
		json_t *x = json_object_get(part, "text");

		if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) ||
		    !json_is_string(x)) {
			sb_free(&b);
			return unsupported(p, p->pp, "Invalid content part '%s': this server takes text parts only (input_text, output_text).",
					   t ? t : "without a type");
		}
		sb_add(&b, json_string_value(x), json_string_length(x));
	}
	*out = chat_request_keep(p->r, b.s ? b.s : "", b.len);
	*len = b.len;
	sb_free(&b);
	return *out ? 0 : oom(p);
}

static struct chat_msg *last_assistant(struct chat_request *r)
{
	return r->n_msgs && r->msgs[r->n_msgs - 1].role == CHAT_ASSISTANT ?
		&r->msgs[r->n_msgs - 1] : NULL;
}

static int add_call(struct rparser *p, const char *id, const char *name, const char *args,
		    size_t args_len)
{
	struct chat_request *r = p->r;
	struct chat_msg *m = last_assistant(r);
	struct chat_call *c;

	if (!m) {
		m = &r->msgs[r->n_msgs++];
		m->role = CHAT_ASSISTANT;
		m->content = "";
	}
	if (m->n_calls >= CHAT_MAX_CALLS)
		return api_bad(p->e, p->pp, "Invalid '%s': at most %d calls in a row.", p->pp,
			       CHAT_MAX_CALLS), -1;
	c = realloc(m->calls, (m->n_calls + 1) * sizeof(*c));
	if (!c)
		return oom(p);
	m->calls = c;
	c[m->n_calls].id = id;
	c[m->n_calls].name = name;
	c[m->n_calls].arguments = args;
	c[m->n_calls].arguments_len = args_len;
	m->n_calls++;
	return 0;
}

static int answers_call(const struct chat_request *r, const char *id)
{
	for (size_t j = r->n_msgs; j-- > 0;) {
		const struct chat_msg *m = &r->msgs[j];

		if (m->role == CHAT_TOOL)
			continue;
		if (m->role == CHAT_ASSISTANT)
			for (size_t k = 0; k < m->n_calls; k++)
				if (!strcmp(m->calls[k].id, id))
					return 1;
		return 0;
	}
	return 0;
}

/*
 * A reasoning item (this server's, or another model's): its
 * reasoning_text parts are the reasoning of the assistant turn that
 * follows (its message or calls), where the family's template writes it
 * back (qwen3: after the last user query); summaries and encrypted
 * content are not text the model wrote here, and are skipped.
 */
static int reasoning_input(struct rparser *p, json_t *it)
{
	struct chat_request *r = p->r;
	struct chat_msg *m = &r->msgs[r->n_msgs];
	json_t *content = json_object_get(it, "content"), *part;
	struct strbuf b = { 0 };
	size_t i;

	if (content && !json_is_null(content) && !json_is_array(content))
		return param_wrong_type(p->e, p->pp, content, "an array of reasoning_text parts");
	json_array_foreach(content, i, part) {
		const char *t = json_string_value(json_object_get(part, "type"));
		json_t *x = json_object_get(part, "text");

		if (!t || strcmp(t, "reasoning_text") || !json_is_string(x)) {
			sb_free(&b);
			return unsupported(p, p->pp, "Invalid reasoning content part '%s': reasoning_text parts only.",
					   t ? t : "without a type");
		}
		sb_add(&b, json_string_value(x), json_string_length(x));
	}
	if (!b.len)
		return 0;
	m->role = CHAT_ASSISTANT;
	m->content = "";
	m->reasoning = chat_request_keep(r, b.s, b.len);
	m->reasoning_len = b.len;
	sb_free(&b);
	if (!m->reasoning)
		return oom(p);
	r->n_msgs++;
	return 0;
}

/* The assistant message a reasoning item opened, still without text or
 * calls: the next assistant item fills it. */
static struct chat_msg *reasoning_only(struct chat_request *r)
{
	struct chat_msg *m = last_assistant(r);

	return m && m->reasoning && !m->content_len && !m->n_calls ? m : NULL;
}

/* One input item into the conversation. */
static int add_item(struct rparser *p, json_t *it)
{
	struct chat_request *r = p->r;
	const char *t = json_string_value(json_object_get(it, "type"));
	json_t *role = json_object_get(it, "role");

	if (!json_is_object(it))
		return param_wrong_type(p->e, p->pp, it, "an input item object");
	if (!t && role)
		t = "message";	/* EasyInputMessage: {role, content} */
	if (!t)
		return api_bad(p->e, p->pp, "Invalid '%s': an item needs a 'type'.", p->pp), -1;
	if (!strcmp(t, "message")) {
		const char *rs = json_string_value(role);
		struct chat_msg *m;

		if (!rs)
			return api_bad(p->e, p->pp, "Invalid '%s': a message needs a 'role'.", p->pp), -1;
		m = &r->msgs[r->n_msgs];
		if (!strcmp(rs, "assistant") && reasoning_only(r)) {
			m = reasoning_only(r);
			return parts_text(p, json_object_get(it, "content"), &m->content,
					  &m->content_len);
		}
		if (!strcmp(rs, "user"))
			m->role = CHAT_USER;
		else if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
			m->role = CHAT_SYSTEM;
		else if (!strcmp(rs, "assistant"))
			m->role = CHAT_ASSISTANT;
		else
			return api_bad(p->e, p->pp, "Invalid role '%s': user, system, developer or assistant.",
				       rs), -1;
		if (parts_text(p, json_object_get(it, "content"), &m->content, &m->content_len))
			return -1;
		r->n_msgs++;
		return 0;
	}
	if (!strcmp(t, "function_call") || !strcmp(t, "custom_tool_call")) {
		const char *id = json_string_value(json_object_get(it, "call_id"));
		const char *name = json_string_value(json_object_get(it, "name"));
		json_t *a = json_object_get(it, !strcmp(t, "function_call") ? "arguments" : "input");

		if (!id || !*id || strlen(id) > CHAT_MAX_ID || !name ||
		    !tc_valid_name(name, strlen(name)) || !json_is_string(a))
			return api_bad(p->e, p->pp, "Invalid '%s': a %s item has a 'call_id', a 'name' and %s.",
				       p->pp, t, !strcmp(t, "function_call") ? "'arguments' (a string)" :
				       "an 'input' string"), -1;
		if (!strcmp(t, "custom_tool_call")) {
			/* as the model called it: {"input": "..."} */
			json_t *o = json_pack("{s:O}", "input", a);
			char *s = o ? json_dumps(o, 0) : NULL;
			const char *k = s ? chat_request_keep(r, s, strlen(s)) : NULL;

			json_decref(o);
			free(s);
			if (!k)
				return oom(p);
			return add_call(p, id, name, k, strlen(k));
		}
		return add_call(p, id, name, json_string_value(a), json_string_length(a));
	}
	if (!strcmp(t, "function_call_output") || !strcmp(t, "custom_tool_call_output")) {
		const char *id = json_string_value(json_object_get(it, "call_id"));
		struct chat_msg *m = &r->msgs[r->n_msgs];

		if (!id || strlen(id) > CHAT_MAX_ID)
			return api_bad(p->e, p->pp, "Invalid '%s': a %s item needs its 'call_id'.", p->pp,
				       t), -1;
		if (!answers_call(r, id))
			return api_bad(p->e, p->pp, "Invalid '%s': no function call with call_id '%s' before it.",
				       p->pp, id), -1;
		m->role = CHAT_TOOL;
		m->tool_call_id = id;
		if (parts_text(p, json_object_get(it, "output"), &m->content, &m->content_len))
			return -1;
		r->n_msgs++;
		return 0;
	}
	if (!strcmp(t, "reasoning"))
		return reasoning_input(p, it);
	return unsupported(p, p->pp, "Unsupported input item type '%s': this server takes message, function_call, function_call_output, custom_tool_call, custom_tool_call_output and reasoning items.",
			   t);
}

static int add_items(struct rparser *p, json_t *items, const char *what)
{
	json_t *it;
	size_t i;

	json_array_foreach(items, i, it) {
		snprintf(p->pp, sizeof(p->pp), "%s[%zu]", what, i);
		if (add_item(p, it))
			return -1;
	}
	return 0;
}

/* This request's input as items, each with an id (input_items lists
 * them). */
static json_t *normalize_input(struct rparser *p, json_t *in)
{
	json_t *out = json_array(), *it;
	size_t i;
	char id[48];

	if (!out)
		return NULL;
	if (json_is_string(in)) {
		api_make_id(id, sizeof(id), "msg_");
		json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:[{s:s, s:O}]}", "id", id,
				"type", "message", "role", "user", "content", "type", "input_text",
				"text", in));
		return out;
	}
	json_array_foreach(in, i, it) {
		json_t *c = json_deep_copy(it);

		if (!c || json_array_append_new(out, c)) {
			json_decref(out);
			return NULL;
		}
		if (!json_object_get(c, "type") && json_object_get(c, "role"))
			json_object_set_new(c, "type", json_string("message"));
		if (!json_object_get(c, "id")) {
			const char *t = json_string_value(json_object_get(c, "type"));

			api_make_id(id, sizeof(id), t && !strcmp(t, "message") ? "msg_" : "item_");
			json_object_set_new(c, "id", json_string(id));
		}
	}
	(void)p;
	return out;
}

static int parse_tools(struct rparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	struct resp_fe *f = p->f;
	json_t *t;
	size_t i;

	f->tools = v && json_is_array(v) ? json_incref(v) : json_array();
	f->not_offered = json_array();
	if (!f->tools || !f->not_offered)
		return oom(p);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return param_wrong_type(p->e, "tools", v, "an array");
	if (json_array_size(v) > CHAT_MAX_TOOLS)
		return api_bad(p->e, "tools", "Invalid 'tools': at most %d tools.", CHAT_MAX_TOOLS), -1;
	r->tools = calloc(json_array_size(v) + 1, sizeof(*r->tools));
	if (!r->tools)
		return oom(p);
	json_array_foreach(v, i, t) {
		const char *type = json_string_value(json_object_get(t, "type"));
		json_t *name = json_object_get(t, "name"), *params = json_object_get(t, "parameters");
		json_t *desc = json_object_get(t, "description"), *fn;
		char why[200];

		snprintf(p->pp, sizeof(p->pp), "tools[%zu]", i);
		if (!json_is_object(t) || !type)
			return api_bad(p->e, p->pp, "Invalid '%s': a tool object with a 'type'.", p->pp), -1;
		if (strcmp(type, "function") && strcmp(type, "custom")) {
			/* a hosted tool (web_search, file_search, ...) or a group
			 * of them (namespace): this server runs none, so the model
			 * is not told of it; the response says so
			 * (kvarena.tools_not_offered), and the harness goes on
			 * with the tools it runs itself */
			json_t *no = json_pack("{s:s}", "type", type);

			if (!no || (json_is_string(name) && json_object_set(no, "name", name)) ||
			    json_array_append_new(f->not_offered, no))
				return oom(p);
			continue;
		}
		if (!json_is_string(name) || !tc_valid_name(json_string_value(name),
							    json_string_length(name)))
			return api_bad(p->e, p->pp, "Invalid '%s.name': 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.",
				       p->pp), -1;
		for (size_t k = 0; k < r->n_tools; k++)
			if (!strcmp(r->tools[k].name, json_string_value(name)))
				return api_bad(p->e, p->pp, "Invalid '%s': duplicate tool name '%s'.", p->pp,
					       json_string_value(name)), -1;
		if (desc && !json_is_null(desc) && !json_is_string(desc))
			return param_wrong_type(p->e, p->pp, desc, "a string description");
		if (!strcmp(type, "custom")) {
			/* one free-form string argument; a grammar is described,
			 * not enforced */
			json_t *fmt = json_object_get(t, "format");
			const char *ft = json_string_value(json_object_get(fmt, "type"));
			struct strbuf d = { 0 };
			char *name_copy;

			if (f->n_custom == RESP_MAX_CUSTOM)
				return api_bad(p->e, p->pp, "Invalid '%s': at most %d custom tools.", p->pp,
					       RESP_MAX_CUSTOM), -1;
			if (fmt && !json_is_null(fmt) && (!ft || (strcmp(ft, "text") && strcmp(ft, "grammar"))))
				return unsupported(p, p->pp, "Unsupported custom tool format '%s': text or grammar.",
						   ft ? ft : "without a type");
			if (json_is_string(desc))
				sb_adds(&d, json_string_value(desc));
			if (ft && !strcmp(ft, "grammar")) {
				const char *def = json_string_value(json_object_get(fmt, "definition"));
				const char *syn = json_string_value(json_object_get(fmt, "syntax"));

				sb_addf(&d, "%sThe input must follow this %s grammar:\n%s",
					d.len ? "\n\n" : "", syn ? syn : "", def ? def : "");
			}
			fn = json_pack("{s:O, s:o, s:{s:s, s:{s:{s:s}}, s:[s], s:b}}", "name", name,
				       "description", json_stringn(d.s ? d.s : "", d.len), "parameters",
				       "type", "object", "properties", "input", "type", "string",
				       "required", "input", "additionalProperties", 0);
			sb_free(&d);
			name_copy = strdup(json_string_value(name));
			if (!name_copy) {
				json_decref(fn);
				return oom(p);
			}
			f->custom[f->n_custom++] = name_copy;
		} else {
			if (params && !json_is_null(params) && !json_is_object(params))
				return param_wrong_type(p->e, p->pp, params, "a JSON Schema object");
			if (chat_parameters_check(json_string_value(name), params, why, sizeof(why))) {
				/* OpenAI's rule: the arguments are an object */
				snprintf(p->pp, sizeof(p->pp), "tools[%zu].parameters", i);
				api_error_set(p->e, 400, API_INVALID, "invalid_function_parameters", p->pp,
					      "%s", why);
				return -1;
			}
			fn = json_pack("{s:O, s:O?, s:O?, s:O?}", "name", name, "description",
				       json_is_string(desc) ? desc : NULL, "parameters",
				       json_is_object(params) ? params : NULL, "strict",
				       json_is_boolean(json_object_get(t, "strict")) ?
					json_object_get(t, "strict") : NULL);
		}
		if (!fn || json_array_append_new(r->keep, fn))
			return oom(p);
		r->tools[r->n_tools].name = json_string_value(name);
		r->tools[r->n_tools].function = fn;
		r->n_tools++;
	}
	return 0;
}

static int parse_tool_choice(struct rparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	const char *s;

	p->f->tool_choice = v && !json_is_null(v) ? json_incref(v) : json_string("auto");
	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		const char *name = json_string_value(json_object_get(v, "name"));
		size_t i;

		if (!t || (strcmp(t, "function") && strcmp(t, "custom")))
			return unsupported(p, "tool_choice", "Unsupported 'tool_choice' type '%s': a function or custom tool by name, or auto, none, required.",
					   t ? t : "");
		for (i = 0; name && i < r->n_tools; i++)
			if (!strcmp(r->tools[i].name, name))
				break;
		if (!name || i == r->n_tools)
			return api_bad(p->e, "tool_choice.name", "Invalid 'tool_choice': no tool named '%s' in 'tools'.",
				       name ? name : ""), -1;
		r->tool_choice = CHAT_TOOLS_NAMED;
		r->tool_choice_name = name;
		return 0;
	}
	s = json_string_value(v);
	if (!s)
		return param_wrong_type(p->e, "tool_choice", v, "a string or an object");
	if (!strcmp(s, "auto"))
		return 0;
	if (!strcmp(s, "none")) {
		r->tool_choice = CHAT_TOOLS_NONE;
		return 0;
	}
	if (!strcmp(s, "required")) {
		if (!r->n_tools)
			return api_bad(p->e, "tool_choice", "Invalid 'tool_choice': 'required' needs 'tools'."), -1;
		r->tool_choice = CHAT_TOOLS_REQUIRED;
		return 0;
	}
	return api_bad(p->e, "tool_choice", "Invalid value for 'tool_choice': '%s'.", s), -1;
}

static int parse_text(struct rparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	json_t *fmt;
	const char *t;

	p->f->text_cfg = v && !json_is_null(v) ? json_incref(v) :
		json_pack("{s:{s:s}}", "format", "type", "text");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return param_wrong_type(p->e, "text", v, "an object");
	{
		const char *k;
		json_t *x;

		json_object_foreach(v, k, x)
			if (strcmp(k, "format") && strcmp(k, "verbosity")) {
				api_error_set(p->e, 400, API_INVALID, "unknown_parameter", "text",
					      "Unrecognized argument in 'text': %s", k);
				return -1;
			}
	}
	if (param_verbosity(p->e, v, "verbosity", "text.verbosity"))
		return -1;
	fmt = json_object_get(v, "format");
	if (!fmt || json_is_null(fmt))
		return 0;
	t = json_string_value(json_object_get(fmt, "type"));
	if (!t)
		return api_bad(p->e, "text.format.type", "Missing required parameter: 'text.format.type'."), -1;
	if (!strcmp(t, "text"))
		return 0;
	if (!strcmp(t, "json_object")) {
		r->format = CHAT_FORMAT_JSON_OBJECT;
		return 0;
	}
	if (!strcmp(t, "json_schema")) {
		r->json_schema = json_object_get(fmt, "schema");
		if (!json_is_object(r->json_schema))
			return api_bad(p->e, "text.format.schema", "Missing or invalid 'text.format.schema': a JSON Schema object."), -1;
		r->format = CHAT_FORMAT_JSON_SCHEMA;
		return 0;
	}
	return api_bad(p->e, "text.format.type", "Invalid 'text.format.type': '%s' (text, json_object, json_schema).",
		       t), -1;
}

static const char *const known_keys[] = {
	"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
	"max_output_tokens", "temperature", "top_p", "top_logprobs", "text", "stream",
	"stream_options", "store", "previous_response_id", "metadata", "user",
	"prompt_cache_key", "safety_identifier", "service_tier", "truncation", "include",
	"prompt_cache_retention",
	"reasoning", "background", "prompt", "conversation", "max_tool_calls",
	"client_metadata",
	/* vLLM's and llama.cpp's, and ours */
	"seed", "top_k", "min_p", "repetition_penalty", "repeat_penalty", "ignore_eos",
	"logit_bias", "kvarena",
};

static int refuse_set(struct rparser *p, json_t *root, const char *key, const char *why)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v) || json_is_false(v))
		return 0;
	api_error_set(p->e, 400, API_INVALID, "unsupported_parameter", key,
		      "Unsupported parameter: '%s' %s.", key, why);
	return -1;
}

static int parse_misc(struct rparser *p, json_t *root)
{
	struct chat_request *r = p->r;
	struct resp_fe *f = p->f;
	json_t *v, *x;
	const char *s;
	size_t i;

	v = json_object_get(root, "include");
	if (v && !json_is_null(v)) {
		if (!json_is_array(v))
			return param_wrong_type(p->e, "include", v, "an array of strings");
		json_array_foreach(v, i, x) {
			s = json_string_value(x);
			if (s && !strcmp(s, "message.output_text.logprobs"))
				f->logprobs = 1;
			else if (!s || strcmp(s, "reasoning.encrypted_content"))
				return unsupported(p, "include", "Unsupported 'include' value '%s': message.output_text.logprobs (and reasoning.encrypted_content: none here, the reasoning items carry their text).",
						   s ? s : "");
		}
	}
	v = json_object_get(root, "reasoning");
	if (v && !json_is_null(v)) {
		if (!json_is_object(v))
			return param_wrong_type(p->e, "reasoning", v, "an object");
		json_object_foreach(v, s, x)
			if (strcmp(s, "effort") && strcmp(s, "summary") && strcmp(s, "generate_summary")) {
				api_error_set(p->e, 400, API_INVALID, "unknown_parameter", "reasoning",
					      "Unrecognized argument in 'reasoning': %s", s);
				return -1;
			}
		/* "auto" leaves the summary to the model's abilities: none
		 * here; asking for one (concise, detailed) is refused */
		x = json_object_get(v, "summary");
		if (x && !json_is_null(x) && !(json_is_string(x) &&
		    (!strcmp(json_string_value(x), "none") || !strcmp(json_string_value(x), "auto"))))
			return unsupported(p, "reasoning.summary", "Unsupported 'reasoning.summary' '%s': this model gives no reasoning summaries (auto or none only).",
					   json_is_string(x) ? json_string_value(x) : "");
		x = json_object_get(v, "generate_summary");
		if (x && !json_is_null(x))
			return unsupported(p, "reasoning.generate_summary", "Unsupported 'reasoning.generate_summary' %s: this model gives no reasoning summaries.",
					   "");
		/* none, minimal: a family that thinks (qwen3) answers at
		 * once (it cannot think a little); the rest: a think budget */
		if (param_effort(p->r, json_object_get(v, "effort"), "reasoning.effort", p->e))
			return -1;
	}
	v = json_object_get(root, "truncation");
	if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
		return unsupported(p, "truncation", "Unsupported 'truncation' '%s': only 'disabled' (a conversation over the context is a 400).",
				   json_is_string(v) ? json_string_value(v) : "");
	if (param_serving(p->e, root))
		return -1;
	v = json_object_get(root, "metadata");
	v = json_is_object(v) ? v : NULL;
	x = json_object_get(root, "client_metadata");	/* Codex's: for the client's logs */
	if (x && !json_is_null(x) && !json_is_object(x))
		return param_wrong_type(p->e, "client_metadata", x, "an object");
	f->metadata = v ? json_incref(v) : json_object();
	for (i = 0; i < 2; i++) {
		static const char *const strs[] = { "user", "prompt_cache_key" };
		const char *o;

		if (param_string(p->e, root, strs[i], strs[i], CHAT_MAX_ID, &o))
			return -1;
		if (i == 0)
			r->user = o;
		else
			r->prompt_cache_key = o;
	}
	return refuse_set(p, root, "background", "is not supported: requests run while their connection lasts") ||
		refuse_set(p, root, "prompt", "(reusable prompt templates) is not supported by this server") ||
		refuse_set(p, root, "conversation", "is not supported: continue with previous_response_id") ||
		refuse_set(p, root, "max_tool_calls", "is not supported: this server runs no hosted tools") ? -1 : 0;
}

static int parse(struct gen *g, struct resp_fe *f, const struct req *q, struct api_error *e)
{
	struct chat_request *r = &g->cr;
	struct rparser p = { .r = r, .f = f, .e = e };
	json_t *root, *in, *chain = NULL;
	json_int_t mt = 0, top = 0, seed = 0;
	size_t cap;
	int has, has_seed, rc = -1;
	double d;

	if (chat_request_begin(q->body.s ? q->body.s : "", q->body.len, kvd_model_id(q->a->d),
			       known_keys, sizeof(known_keys) / sizeof(known_keys[0]), r, e))
		return -1;
	root = r->root;
	f->store = 1;
	f->output = json_array();
	f->text_lp = json_array();
	if (!f->output || !f->text_lp)
		return oom(&p);
	in = json_object_get(root, "input");
	if (!in || (!json_is_string(in) && !json_is_array(in)))
		return in ? param_wrong_type(e, "input", in, "a string or an array of input items") :
			(api_bad(e, "input", "Missing required parameter: 'input'."), -1);
	if (json_is_array(in) && json_array_size(in) > RESP_MAX_ITEMS)
		return api_bad(e, "input", "Invalid 'input': at most %d items.", RESP_MAX_ITEMS), -1;
	if (param_string(e, root, "instructions", "instructions", 1u << 24, &f->instructions) ||
	    param_string(e, root, "previous_response_id", "previous_response_id", RS_ID_MAX,
			 &f->prev) ||
	    param_bool(e, root, "store", &f->store) || param_bool(e, root, "stream", &g->stream) ||
	    param_bool(e, root, "parallel_tool_calls", &r->parallel_tool_calls))
		return -1;
	/* the stored conversation this one continues */
	if (f->prev) {
		char missing[RS_ID_MAX + 1] = "";
		int c;

		chain = json_array();
		c = chain ? responses_store_chain(q->a->store, q->tenant_id, f->prev, chain,
						  missing, sizeof(missing)) : -ENOMEM;
		if (c == -ENOENT) {
			api_error_set(e, 400, API_INVALID, "previous_response_not_found",
				      "previous_response_id",
				      "Previous response with id '%s' not found%s.", missing,
				      strcmp(missing, f->prev) ? " (an earlier response of the chain is gone: the oldest go first, or it was deleted)" : "");
			goto out;
		}
		if (c) {
			api_error_set(e, c == -ELOOP ? 400 : 500, c == -ELOOP ? API_INVALID : "server_error",
				      NULL, "previous_response_id", "%s", c == -ELOOP ?
				      "The chain of previous responses is too long." : "out of memory");
			goto out;
		}
	}
	f->input = normalize_input(&p, in);
	if (!f->input) {
		oom(&p);
		goto out;
	}
	cap = 2 + json_array_size(chain) + json_array_size(f->input);
	r->msgs = calloc(cap, sizeof(*r->msgs));
	if (!r->msgs) {
		oom(&p);
		goto out;
	}
	if (f->instructions) {
		r->msgs[0].role = CHAT_SYSTEM;
		r->msgs[0].content = f->instructions;
		r->msgs[0].content_len = strlen(f->instructions);
		r->n_msgs = 1;
	}
	if ((chain && add_items(&p, chain, "previous_response_id")) ||
	    add_items(&p, f->input, "input"))
		goto out;
	if (!r->n_msgs) {
		api_bad(e, "input", "Invalid 'input': nothing to respond to.");
		goto out;
	}
	if (parse_tools(&p, json_object_get(root, "tools")) ||
	    parse_tool_choice(&p, json_object_get(root, "tool_choice")) ||
	    parse_text(&p, json_object_get(root, "text")) || parse_misc(&p, root))
		goto out;
	if (param_int(e, root, "max_output_tokens", 1, UINT32_MAX, &mt, &has) ||
	    param_int(e, root, "top_logprobs", 0, KVD_MAX_TOP_LOGPROBS, &top, &has) ||
	    param_int(e, root, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed))
		goto out;
	r->s.max_tokens = (uint32_t)mt;
	f->top_logprobs = (int)top;
	r->s.logprobs = f->logprobs;
	r->s.top_logprobs = f->logprobs ? (uint32_t)top : 0;
	r->s.seed = (uint64_t)seed;
	r->s.has_seed = has_seed;
	d = 1;
	if (param_number(e, root, "temperature", 0, 2, &d))
		goto out;
	r->s.temperature = (float)d;
	d = 1;
	if (param_number(e, root, "top_p", 0, 1, &d))
		goto out;
	r->s.top_p = (float)d;
	if (param_extra_sampling(r, root, e))
		goto out;
	if (param_stream_options(r, root, g->stream, NULL, e))
		goto out;
	rc = 0;
out:
	json_decref(chain);
	return rc;
}

/* ---------------------------------------------------------------- routes */

/* limit as the list endpoints take it: digits only, 1..100 (20 if absent) */
static int list_limit(const char *s, long *limit)
{
	char *end;

	if (!s) {
		*limit = 20;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*limit = strtol(s, &end, 10);
	return errno || *end || *limit < 1 || *limit > 100 ? -1 : 0;
}

static const char *item_id(json_t *items, size_t k)
{
	const char *id = json_string_value(json_object_get(json_array_get(items, k), "id"));

	return id ? id : "";
}

/* An input item as the Responses API lists it: a message's text content as
 * its parts (input_text, or output_text for the assistant's), and a
 * status. Only the listing: the stored item renders the prompt as sent. */
static json_t *listed_item(json_t *it)
{
	const char *type = json_string_value(json_object_get(it, "type"));
	const char *role = json_string_value(json_object_get(it, "role"));
	json_t *text = json_object_get(it, "content"), *c;
	int assistant = role && !strcmp(role, "assistant");

	if (!type || strcmp(type, "message"))
		return json_incref(it);
	c = json_copy(it);
	if (!c)
		return NULL;
	if (json_is_string(text))
		json_object_set_new(c, "content",
				    assistant ? json_pack("[{s:s, s:O, s:[]}]", "type", "output_text",
							  "text", text, "annotations")
					      : json_pack("[{s:s, s:O}]", "type", "input_text",
							  "text", text));
	if (!json_object_get(c, "status"))
		json_object_set_new(c, "status", json_string("completed"));
	return c;
}

/* GET /v1/responses/{id}/input_items: a page of the input in the order
 * asked, after the item named by `after`. An `after` that names no item is
 * a 400: listing from the start again would loop a client that pages on
 * through a chain whose items it no longer has. */
static enum MHD_Result get_items(struct req *q)
{
	json_t *items = responses_store_get(q->a->store, q->tenant_id, q->arg, RS_INPUT);
	const char *order = MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, "order");
	const char *after = MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, "after");
	const char *lim = MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, "limit");
	struct api_error e;
	json_t *data, *o;
	size_t n, i, m, start = 0;
	long limit;
	int desc;

	if (!items)
		return api_fail(q, 404, API_INVALID, NULL, "Response with id '%s' not found.", q->arg);
	if (list_limit(lim, &limit)) {
		json_decref(items);
		api_bad(&e, "limit", "Invalid 'limit': '%.40s'; expected an integer from 1 to 100.", lim);
		return api_send_error(q, &e);
	}
	if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
		json_decref(items);
		api_bad(&e, "order", "Invalid 'order': '%.40s'; expected 'asc' or 'desc'.", order);
		return api_send_error(q, &e);
	}
	desc = !order || !strcmp(order, "desc");
	n = json_array_size(items);
	if (after) {
		for (i = 0; i < n && strcmp(item_id(items, desc ? n - 1 - i : i), after); i++)
			;
		if (i == n) {
			json_decref(items);
			api_bad(&e, "after", "Invalid 'after': no input item '%.100s' in response '%s'.",
				after, q->arg);
			return api_send_error(q, &e);
		}
		start = i + 1;
	}
	data = json_array();
	for (i = start; data && i < n && i < start + (size_t)limit; i++)
		json_array_append_new(data, listed_item(json_array_get(items, desc ? n - 1 - i : i)));
	m = json_array_size(data);
	o = json_pack("{s:s, s:o, s:o, s:o, s:b}", "object", "list", "data", data,
		      "first_id", m ? json_incref(json_object_get(json_array_get(data, 0), "id")) :
		      json_null(), "last_id", m ?
		      json_incref(json_object_get(json_array_get(data, m - 1), "id")) : json_null(),
		      "has_more", start + m < n);
	json_decref(items);
	return api_send_json(q, 200, o);
}

enum MHD_Result responses_handle(struct req *q)
{
	struct api_error e;
	struct resp_fe *f;
	struct gen *g;

	if (q->route == R_RESPONSE_ITEMS)
		return get_items(q);
	if (q->route == R_RESPONSE) {
		json_t *r;

		if (!strcmp(q->method, "DELETE")) {
			if (responses_store_delete(q->a->store, q->tenant_id, q->arg))
				return api_fail(q, 404, API_INVALID, NULL,
						"Response with id '%s' not found.", q->arg);
			return api_send_json(q, 200, json_pack("{s:s, s:s, s:b}", "id", q->arg,
						"object", "response", "deleted", 1));
		}
		r = responses_store_get(q->a->store, q->tenant_id, q->arg, RS_RESPONSE);
		if (!r)
			return api_fail(q, 404, API_INVALID, NULL, "Response with id '%s' not found.",
					q->arg);
		return api_send_json(q, 200, r);
	}
	g = api_gen_new(q, &resp_ops, "resp_");
	f = g ? calloc(1, sizeof(*f)) : NULL;
	if (!f)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	g->fe = f;
	if (parse(g, f, q, &e) || gen_submit(g, q->tenant_id, 1, &e))
		return api_send_error(q, &e);
	if (g->stream)
		return api_stream(q, g);
	return api_wait(q, g);
}
