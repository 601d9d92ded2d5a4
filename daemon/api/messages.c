// SPDX-License-Identifier: MIT
/*
 * messages.c - POST /v1/messages and /v1/messages/count_tokens, the
 * Anthropic Messages API (what Claude Code and the Anthropic SDKs speak,
 * with their base URL pointed here). The request becomes the normalized
 * conversation (system, user text, assistant text and tool_use, tool
 * results) rendered by the model's family; the generation is gen.c's;
 * the reply is a "message" object or its event stream (message_start,
 * content_block_start/delta/stop, ping, message_delta, message_stop).
 * Errors have Anthropic's shape ({"type": "error", "error": {type,
 * message}}, api.c). What the Messages API has that this server cannot
 * do is refused with a 400 naming it (Documentation/api.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "chat_request.h"
#include "response.h"

#define MSG_MAX_BLOCKS 4096	/* content blocks per message */
#define MSG_MAX_SYSTEM 256	/* system blocks */

enum block { B_NONE, B_TEXT, B_TOOL, B_THINKING };

struct msg_fe {
	int count_only;		/* /v1/messages/count_tokens */
	int omit_thinking;	/* thinking.display "omitted": blocks without text */
	unsigned index;		/* the next content block's index */
	enum block open;	/* the block being streamed */
};

/* ---------------------------------------------------------------- output */

static json_t *usage_json(const struct kvd_usage *u)
{
	uint32_t cached = u->cached_tokens < u->prompt_tokens ? u->cached_tokens : u->prompt_tokens;

	/* Anthropic's input_tokens are those not read from the cache */
	return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
			 (json_int_t)(u->prompt_tokens - cached), "output_tokens",
			 (json_int_t)u->completion_tokens, "cache_read_input_tokens",
			 (json_int_t)cached, "cache_creation_input_tokens", (json_int_t)0);
}

static const char *stop_reason(const struct gen_choice *c)
{
	if (c->n_calls && !(c->finish == KVD_FINISH_LENGTH && c->in_call))
		return c->finish == KVD_FINISH_LENGTH ? "max_tokens" : "tool_use";
	if (c->finish == KVD_FINISH_LENGTH)
		return "max_tokens";
	return c->stop_seq ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const struct gen *g, const struct gen_choice *c)
{
	if (!c->stop_seq || c->stop_seq > g->cr.s.n_stop)
		return json_null();
	return json_string(g->cr.s.stop[c->stop_seq - 1]);
}

static void tool_id(char *out, size_t n, const struct tc_call *call)
{
	/* "call_" + 24 characters -> "toolu_" + the same; an id the model
	 * wrote (Mistral's 9 alphanumerics) -> "toolu_" + it, whole */
	snprintf(out, n, "toolu_%s", call->id + (strncmp(call->id, "call_", 5) ? 0 : 5));
}

/* The id a tool_use or tool_result block names, as the model family
 * sees it: "toolu_" + 9 alphanumerics is an id a Mistral model wrote
 * (tool_id), which its template writes back as it was; any other id is
 * passed on whole. */
static const char *model_id(const char *id)
{
	size_t n = strlen(id);

	if (n != 6 + 9 || strncmp(id, "toolu_", 6))
		return id;
	for (size_t i = 6; i < n; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9')))
			return id;
	return id + 6;
}

/* A call's arguments as the object they are; {} when cut or not JSON. */
static json_t *input_of(const char *args, size_t len)
{
	json_t *o = json_loadb(args, len, JSON_DECODE_ANY, NULL);

	if (!json_is_object(o)) {
		json_decref(o);
		o = json_object();
	}
	return o;
}

static json_t *message_base(struct gen *g)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "id", g->id, "type", "message",
			 "role", "assistant", "model", g->model);
}

static void event(struct gen *g, const char *name, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	gen_sse_event(g, name, s);
}

static void close_block(struct gen *g, struct msg_fe *f)
{
	if (f->open == B_NONE)
		return;
	/* a thinking block ends with its signature: empty, nothing here
	 * signs (a client sends it back as it came) */
	if (f->open == B_THINKING)
		event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type",
				"content_block_delta", "index", (int)f->index, "delta", "type",
				"signature_delta", "signature", ""));
	event(g, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop",
						 "index", (int)f->index));
	f->index++;
	f->open = B_NONE;
}

static void on_start(struct gen *g)
{
	json_t *m = message_base(g);

	if (m && (json_object_set_new(m, "content", json_array()) ||
		  json_object_set_new(m, "stop_reason", json_null()) ||
		  json_object_set_new(m, "stop_sequence", json_null()) ||
		  json_object_set_new(m, "usage", usage_json(&(struct kvd_usage){ 0 })))) {
		json_decref(m);
		m = NULL;
	}
	event(g, "message_start", m ? json_pack("{s:s, s:o}", "type", "message_start",
						"message", m) : NULL);
	event(g, "ping", json_pack("{s:s}", "type", "ping"));
}

static void on_content(struct gen *g, struct gen_choice *c, const char *text, size_t len,
		       json_t *logprobs)
{
	struct msg_fe *f = g->fe;

	(void)c;
	json_decref(logprobs);
	if (!len)
		return;
	if (f->open != B_TEXT) {
		close_block(g, f);
		event(g, "content_block_start", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type",
				"content_block_start", "index", (int)f->index, "content_block",
				"type", "text", "text", ""));
		f->open = B_TEXT;
	}
	event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:o}}", "type",
			"content_block_delta", "index", (int)f->index, "delta", "type",
			"text_delta", "text", api_json_string_lossy(text, len)));
}

/* A thinking family's reasoning: a thinking block before the rest. */
static void on_reasoning(struct gen *g, struct gen_choice *c, const char *text, size_t len)
{
	struct msg_fe *f = g->fe;

	(void)c;
	if (f->open != B_THINKING) {
		close_block(g, f);
		event(g, "content_block_start", json_pack("{s:s, s:i, s:{s:s, s:s, s:s}}", "type",
				"content_block_start", "index", (int)f->index, "content_block",
				"type", "thinking", "thinking", "", "signature", ""));
		f->open = B_THINKING;
	}
	if (!f->omit_thinking)
		event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:o}}", "type",
				"content_block_delta", "index", (int)f->index, "delta", "type",
				"thinking_delta", "thinking", api_json_string_lossy(text, len)));
}

static void on_call_start(struct gen *g, struct gen_choice *c, const struct tc_call *call)
{
	struct msg_fe *f = g->fe;
	char id[48];

	(void)c;
	close_block(g, f);
	tool_id(id, sizeof(id), call);
	event(g, "content_block_start", json_pack("{s:s, s:i, s:{s:s, s:s, s:s, s:{}}}", "type",
			"content_block_start", "index", (int)f->index, "content_block",
			"type", "tool_use", "id", id, "name", call->name, "input"));
	f->open = B_TOOL;
}

static void on_call_args(struct gen *g, struct gen_choice *c, const char *args, size_t len)
{
	struct msg_fe *f = g->fe;

	(void)c;
	event(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:o}}", "type",
			"content_block_delta", "index", (int)f->index, "delta", "type",
			"input_json_delta", "partial_json", api_json_string_lossy(args, len)));
}

static void on_call_end(struct gen *g, struct gen_choice *c)
{
	(void)c;
	close_block(g, g->fe);
}

static void on_choice_done(struct gen *g, struct gen_choice *c)
{
	struct msg_fe *f = g->fe;

	close_block(g, f);
	event(g, "message_delta", json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta",
			"delta", "stop_reason", stop_reason(c), "stop_sequence", stop_sequence(g, c),
			"usage", usage_json(&c->usage)));
	event(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void on_error(struct gen *g, const struct api_error *e)
{
	gen_sse_event(g, "error", api_error_body(DIALECT_ANTHROPIC, e));
}

static char *body(struct gen *g)
{
	struct gen_choice *c = &g->ch[0];
	const struct tc_call *calls = gen_calls(c);
	json_t *m = message_base(g), *content = json_array();
	struct resp_ctx rc = { .has_timings = 1, .ttft_ms = g->ttft_ms, .total_ms = g->total_ms,
			       .usage = c->usage };
	json_t *ext = resp_ext(&rc, c->session_id);
	char *s = NULL;
	struct msg_fe *f = g->fe;

	if (content && c->reasoning.len)
		json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking",
				"thinking", f->omit_thinking ? json_string("") :
				api_json_string_lossy(c->reasoning.s, c->reasoning.len),
				"signature", ""));
	if (content && c->content.len)
		json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
				api_json_string_lossy(c->content.s, c->content.len)));
	for (size_t i = 0; content && i < c->n_calls; i++) {
		char id[48];

		tool_id(id, sizeof(id), &calls[i]);
		json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use",
				"id", id, "name", calls[i].name, "input",
				input_of(calls[i].arguments, calls[i].arguments_len)));
	}
	if (ext && c->tool_runs && json_object_set(ext, "tool_runs", c->tool_runs))
		json_decref(ext), ext = NULL;
	if (m && content && ext && !json_object_set_new(m, "content", content) &&
	    !json_object_set_new(m, "stop_reason", json_string(stop_reason(c))) &&
	    !json_object_set_new(m, "stop_sequence", stop_sequence(g, c)) &&
	    !json_object_set_new(m, "usage", usage_json(&c->usage)) &&
	    !json_object_set_new(m, "kvarena", ext))
		s = json_dumps(m, JSON_COMPACT);
	else if (!m || !content || !ext) {
		json_decref(content);
		json_decref(ext);
	}
	json_decref(m);
	return s;
}

static void fe_free(struct gen *g)
{
	free(g->fe);
	g->fe = NULL;
}

static const struct gen_ops msg_ops = {
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

/* ---------------------------------------------------------------- input */

struct mparser {
	struct chat_request *r;
	struct api_error *e;
	char pp[160];
};

static int oom(struct mparser *p)
{
	api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory");
	return -1;
}

/* Anthropic's errors carry no param: the message starts with it. */
static int refuse(struct mparser *p, const char *param, const char *fmt, const char *what)
{
	char msg[400];

	snprintf(msg, sizeof(msg), fmt, what);
	api_error_set(p->e, 400, API_INVALID, "unsupported_value", param, "%s: %s", param, msg);
	return -1;
}

/* A tool result's content: a string, or text blocks joined. */
static int result_text(struct mparser *p, json_t *v, const char **out, size_t *len)
{
	struct strbuf b = { 0 };
	json_t *blk;
	size_t i;

	*out = "";
	*len = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		*out = json_string_value(v);
		*len = json_string_length(v);
		return 0;
	}
	if (!json_is_array(v))
		return param_wrong_type(p->e, p->pp, v, "a string or an array of content blocks");
	json_array_foreach(v, i, blk) {
		const char *t = json_string_value(json_object_get(blk, "type"));

		if (!t || strcmp(t, "text") || !json_is_string(json_object_get(blk, "text"))) {
			sb_free(&b);
			return refuse(p, p->pp, "Invalid '%s': tool results here are text blocks only (images and documents are not supported).",
				      p->pp);
		}
		if (i)
			sb_adds(&b, "\n");
		sb_adds(&b, json_string_value(json_object_get(blk, "text")));
	}
	*out = chat_request_keep(p->r, b.s ? b.s : "", b.len);
	*len = b.len;
	sb_free(&b);
	return *out ? 0 : oom(p);
}

/* Whether a tool result answers a tool_use of the assistant message
 * before it (other results may come between). */
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

/* A user message's text so far becomes a message of its own. */
static int flush_user(struct mparser *p, struct strbuf *text)
{
	struct chat_msg *m;

	if (!text->len)
		return 0;
	m = &p->r->msgs[p->r->n_msgs++];
	m->role = CHAT_USER;
	m->content = chat_request_keep(p->r, text->s, text->len);
	m->content_len = text->len;
	sb_reset(text);
	return m->content ? 0 : oom(p);
}

/* A system message among the messages (a string or text blocks, joined
 * by newlines), rendered where it stands. */
static int system_message(struct mparser *p, json_t *c, size_t mi)
{
	struct chat_msg *m = &p->r->msgs[p->r->n_msgs];
	struct strbuf b = { 0 };
	json_t *blk;
	size_t i;

	snprintf(p->pp, sizeof(p->pp), "messages.%zu.content", mi);
	m->role = CHAT_SYSTEM;
	if (json_is_string(c)) {
		m->content = json_string_value(c);
		m->content_len = json_string_length(c);
		p->r->n_msgs++;
		return 0;
	}
	if (!json_is_array(c))
		return param_wrong_type(p->e, p->pp, c, "a string or an array of text blocks");
	json_array_foreach(c, i, blk) {
		json_t *x = json_object_get(blk, "text");

		if (!json_is_string(x) || strcmp(json_string_value(json_object_get(blk, "type")) ?
						 json_string_value(json_object_get(blk, "type")) : "", "text")) {
			sb_free(&b);
			return api_bad(p->e, p->pp, "Invalid '%s': a system message has text blocks.", p->pp), -1;
		}
		if (i)
			sb_adds(&b, "\n");
		sb_add(&b, json_string_value(x), json_string_length(x));
	}
	m->content = chat_request_keep(p->r, b.s ? b.s : "", b.len);
	m->content_len = b.len;
	sb_free(&b);
	if (!m->content)
		return oom(p);
	p->r->n_msgs++;
	return 0;
}

/* One message. An assistant's text blocks are its content and its
 * tool_use blocks its calls; a user's tool_result blocks are tool
 * messages and its text between them user messages, in order. */
static int parse_message(struct mparser *p, json_t *m, size_t mi)
{
	struct chat_request *r = p->r;
	json_t *role = json_object_get(m, "role"), *c = json_object_get(m, "content"), *blk;
	struct strbuf text = { 0 }, thinking = { 0 };
	struct chat_msg *am = NULL;
	size_t i, before = r->n_msgs;
	int assistant, rc = -1;

	snprintf(p->pp, sizeof(p->pp), "messages.%zu.role", mi);
	if (!json_is_string(role))
		return role ? param_wrong_type(p->e, p->pp, role, "a string") :
			(api_bad(p->e, p->pp, "Field required: '%s'.", p->pp), -1);
	if (!strcmp(json_string_value(role), "assistant"))
		assistant = 1;
	else if (!strcmp(json_string_value(role), "user"))
		assistant = 0;
	else if (!strcmp(json_string_value(role), "system"))
		return system_message(p, c, mi);	/* Claude Code's, mid-conversation */
	else
		return api_bad(p->e, p->pp, "Invalid '%s': 'user', 'assistant' or 'system'.",
			       p->pp), -1;
	snprintf(p->pp, sizeof(p->pp), "messages.%zu.content", mi);
	if (json_is_string(c)) {
		struct chat_msg *x = &r->msgs[r->n_msgs++];

		x->role = assistant ? CHAT_ASSISTANT : CHAT_USER;
		x->content = json_string_value(c);
		x->content_len = json_string_length(c);
		return 0;
	}
	if (!json_is_array(c))
		return c ? param_wrong_type(p->e, p->pp, c, "a string or an array of content blocks") :
			(api_bad(p->e, p->pp, "Field required: '%s'.", p->pp), -1);
	if (json_array_size(c) > MSG_MAX_BLOCKS)
		return api_bad(p->e, p->pp, "Invalid '%s': at most %d blocks.", p->pp, MSG_MAX_BLOCKS), -1;
	if (assistant) {
		am = &r->msgs[r->n_msgs++];
		am->role = CHAT_ASSISTANT;
	}
	json_array_foreach(c, i, blk) {
		const char *t = json_string_value(json_object_get(blk, "type"));

		snprintf(p->pp, sizeof(p->pp), "messages.%zu.content.%zu", mi, i);
		if (!json_is_object(blk) || !t) {
			api_bad(p->e, p->pp, "Invalid '%s': a content block with a 'type'.", p->pp);
			goto out;
		}
		if (!strcmp(t, "text")) {
			json_t *x = json_object_get(blk, "text");

			if (!json_is_string(x)) {
				param_wrong_type(p->e, p->pp, x, "a text block with a string 'text'");
				goto out;
			}
			sb_add(&text, json_string_value(x), json_string_length(x));
		} else if (!strcmp(t, "thinking") && assistant) {
			/* the reasoning of this turn, where the family's
			 * template writes it back (qwen3: after the last user
			 * query); the signature is not checked (none is made) */
			json_t *x = json_object_get(blk, "thinking");

			if (!json_is_string(x)) {
				param_wrong_type(p->e, p->pp, x, "a thinking block with a string 'thinking'");
				goto out;
			}
			sb_add(&thinking, json_string_value(x), json_string_length(x));
		} else if (!strcmp(t, "redacted_thinking") && assistant) {
			continue;	/* another model's, encrypted: nothing to read */
		} else if (!strcmp(t, "tool_use") && assistant) {
			json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
			json_t *input = json_object_get(blk, "input");
			struct chat_call *cc;
			char *args;

			if (!json_is_string(id) || !json_string_length(id) ||
			    json_string_length(id) > CHAT_MAX_ID || !json_is_string(name) ||
			    !tc_valid_name(json_string_value(name), json_string_length(name)) ||
			    !json_is_object(input)) {
				api_bad(p->e, p->pp, "Invalid '%s': a tool_use block has an 'id', a 'name' ([A-Za-z0-9_-], 1 to 64) and an 'input' object.",
					p->pp);
				goto out;
			}
			if (!am->calls && !(am->calls = calloc(json_array_size(c), sizeof(*am->calls)))) {
				oom(p);
				goto out;
			}
			cc = &am->calls[am->n_calls++];
			cc->id = model_id(json_string_value(id));
			cc->name = json_string_value(name);
			/* ", " and ": " between items: how the model writes its
			 * calls, so the turn renders back as it was generated */
			args = json_dumps(input, JSON_PRESERVE_ORDER);
			cc->arguments = args ? chat_request_keep(r, args, strlen(args)) : NULL;
			cc->arguments_len = args ? strlen(args) : 0;
			free(args);
			if (!cc->arguments) {
				oom(p);
				goto out;
			}
		} else if (!strcmp(t, "tool_result") && !assistant) {
			json_t *id = json_object_get(blk, "tool_use_id");
			struct chat_msg *tm;

			if (!json_is_string(id) || json_string_length(id) > CHAT_MAX_ID) {
				api_bad(p->e, p->pp, "Invalid '%s': a tool_result block needs its 'tool_use_id'.",
					p->pp);
				goto out;
			}
			if (flush_user(p, &text))
				goto out;
			if (!answers_call(r, model_id(json_string_value(id)))) {
				api_bad(p->e, p->pp, "Invalid '%s': tool_use_id '%s' does not answer a tool_use block of the assistant message before it.",
					p->pp, json_string_value(id));
				goto out;
			}
			tm = &r->msgs[r->n_msgs++];
			tm->role = CHAT_TOOL;
			tm->tool_call_id = model_id(json_string_value(id));
			snprintf(p->pp, sizeof(p->pp), "messages.%zu.content.%zu.content", mi, i);
			if (result_text(p, json_object_get(blk, "content"), &tm->content,
					&tm->content_len))
				goto out;
		} else {
			refuse(p, p->pp, "Unsupported content block type '%s' here: this server takes text, tool_use (assistant), tool_result (user) and thinking (assistant) blocks.",
			       t);
			goto out;
		}
	}
	if (am) {
		am->content = chat_request_keep(r, text.s ? text.s : "", text.len);
		am->content_len = text.len;
		if (thinking.len) {
			am->reasoning = chat_request_keep(r, thinking.s, thinking.len);
			am->reasoning_len = thinking.len;
		}
		rc = am->content && (!thinking.len || am->reasoning) ? 0 : oom(p);
	} else {
		rc = flush_user(p, &text);
		if (!rc && r->n_msgs == before) {	/* no content at all */
			r->msgs[r->n_msgs].role = CHAT_USER;
			r->msgs[r->n_msgs++].content = "";
		}
	}
out:
	sb_free(&text);
	sb_free(&thinking);
	return rc;
}

static int parse_system(struct mparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	struct strbuf b = { 0 };
	struct chat_msg *m;
	json_t *blk;
	size_t i;

	if (!v || json_is_null(v))
		return 0;
	m = &r->msgs[r->n_msgs];
	m->role = CHAT_SYSTEM;
	if (json_is_string(v)) {
		m->content = json_string_value(v);
		m->content_len = json_string_length(v);
		r->n_msgs++;
		return 0;
	}
	if (!json_is_array(v))
		return param_wrong_type(p->e, "system", v, "a string or an array of text blocks");
	if (json_array_size(v) > MSG_MAX_SYSTEM)
		return api_bad(p->e, "system", "Invalid 'system': at most %d blocks.", MSG_MAX_SYSTEM), -1;
	json_array_foreach(v, i, blk) {
		const char *t = json_string_value(json_object_get(blk, "type"));

		if (!t || strcmp(t, "text") || !json_is_string(json_object_get(blk, "text"))) {
			sb_free(&b);
			snprintf(p->pp, sizeof(p->pp), "system.%zu", i);
			return api_bad(p->e, p->pp, "Invalid '%s': system blocks are text blocks.", p->pp), -1;
		}
		if (i)
			sb_adds(&b, "\n");
		sb_adds(&b, json_string_value(json_object_get(blk, "text")));
	}
	m->content = chat_request_keep(r, b.s ? b.s : "", b.len);
	m->content_len = b.len;
	sb_free(&b);
	if (!m->content)
		return oom(p);
	r->n_msgs++;
	return 0;
}

static int parse_tools(struct mparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	json_t *t;
	size_t i;

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
		json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
		const char *type = json_string_value(json_object_get(t, "type"));
		json_t *desc = json_object_get(t, "description"), *fn;
		char why[200];

		snprintf(p->pp, sizeof(p->pp), "tools.%zu", i);
		if (!json_is_object(t))
			return param_wrong_type(p->e, p->pp, t, "an object");
		if (type && strcmp(type, "custom"))
			return refuse(p, p->pp, "Unsupported tool type '%s': this server has no server tools of Anthropic's; declare client tools (name, description, input_schema).",
				      type);
		if (!json_is_string(name) || !tc_valid_name(json_string_value(name),
							    json_string_length(name)))
			return api_bad(p->e, p->pp, "Invalid '%s.name': 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.",
				       p->pp), -1;
		for (size_t k = 0; k < r->n_tools; k++)
			if (!strcmp(r->tools[k].name, json_string_value(name)))
				return api_bad(p->e, p->pp, "Invalid '%s': duplicate tool name '%s'.", p->pp,
					       json_string_value(name)), -1;
		if (!json_is_object(schema))
			return api_bad(p->e, p->pp, "Invalid '%s.input_schema': a JSON Schema object.",
				       p->pp), -1;
		/* the input is an object (every family writes arguments as
		 * one; Anthropic's own rule) */
		if (chat_parameters_check(json_string_value(name), schema, why, sizeof(why))) {
			snprintf(p->pp, sizeof(p->pp), "tools.%zu.input_schema", i);
			api_error_set(p->e, 400, API_INVALID, "invalid_function_parameters", p->pp,
				      "%s: %s", p->pp, why);
			return -1;
		}
		/* deferred (Anthropic's tool search): not in the context until
		 * found, so not in the prompt */
		if (json_is_true(json_object_get(t, "defer_loading")))
			continue;
		if (desc && !json_is_string(desc))
			return param_wrong_type(p->e, p->pp, desc, "a string description");
		/* the family renders OpenAI-style function declarations */
		fn = json_pack("{s:O, s:O?, s:O}", "name", name, "description", desc,
			       "parameters", schema);
		if (!fn || json_array_append_new(r->keep, fn))
			return oom(p);
		r->tools[r->n_tools].name = json_string_value(name);
		r->tools[r->n_tools].function = fn;
		r->n_tools++;
	}
	return 0;
}

static int parse_tool_choice(struct mparser *p, json_t *v)
{
	struct chat_request *r = p->r;
	const char *t;

	if (!v || json_is_null(v))
		return 0;
	t = json_string_value(json_object_get(v, "type"));
	if (!json_is_object(v) || !t)
		return api_bad(p->e, "tool_choice", "Invalid 'tool_choice': {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}."), -1;
	if (json_is_true(json_object_get(v, "disable_parallel_tool_use")))
		r->parallel_tool_calls = 0;
	if (!strcmp(t, "auto"))
		return 0;
	if (!strcmp(t, "none")) {
		r->tool_choice = CHAT_TOOLS_NONE;
		return 0;
	}
	if (!r->n_tools)
		return api_bad(p->e, "tool_choice", "Invalid 'tool_choice': '%s' needs 'tools'.", t), -1;
	if (!strcmp(t, "any")) {
		r->tool_choice = CHAT_TOOLS_REQUIRED;
		return 0;
	}
	if (!strcmp(t, "tool")) {
		const char *name = json_string_value(json_object_get(v, "name"));
		size_t i;

		for (i = 0; name && i < r->n_tools; i++)
			if (!strcmp(r->tools[i].name, name))
				break;
		if (!name || i == r->n_tools)
			return api_bad(p->e, "tool_choice.name", "Invalid 'tool_choice.name': no tool named '%s' in 'tools'.",
				       name ? name : ""), -1;
		r->tool_choice = CHAT_TOOLS_NAMED;
		r->tool_choice_name = name;
		return 0;
	}
	return api_bad(p->e, "tool_choice.type", "Invalid 'tool_choice.type': '%s'.", t), -1;
}

static const char *const known_keys[] = {
	"model", "messages", "max_tokens", "system", "tools", "tool_choice",
	"stop_sequences", "temperature", "top_p", "top_k", "stream", "metadata",
	"thinking", "service_tier", "container", "mcp_servers", "context_management",
	"output_config",
	/* vLLM's and llama.cpp's, and ours */
	"min_p", "repetition_penalty", "repeat_penalty", "ignore_eos", "kvarena",
	"seed", "logit_bias",
};

/* Parameters that would change the reply and are not served. */
static int refuse_set(struct mparser *p, json_t *root, const char *key, const char *why)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v) || (json_is_array(v) && !json_array_size(v)))
		return 0;
	api_error_set(p->e, 400, API_INVALID, "unsupported_parameter", key,
		      "Unsupported parameter: '%s' %s.", key, why);
	return -1;
}

/* output_config: "format" (a JSON schema the reply must follow: the
 * structured decoder) and "effort" (how much a Claude model spends; this
 * model has one way of answering, so every effort is the same). */
static int parse_output_config(struct mparser *p, json_t *v)
{
	json_t *fmt, *x;
	const char *k;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return param_wrong_type(p->e, "output_config", v, "an object");
	json_object_foreach(v, k, x) {
		if (!strcmp(k, "effort")) {
			const char *eff = json_string_value(x);

			if (!eff || (strcmp(eff, "low") && strcmp(eff, "medium") && strcmp(eff, "high") &&
				     strcmp(eff, "max")))
				return api_bad(p->e, "output_config.effort", "Invalid 'output_config.effort': low, medium, high or max."), -1;
		} else if (strcmp(k, "format")) {
			return refuse(p, "output_config", "Unsupported 'output_config' field '%s' (format and effort only).", k);
		}
	}
	fmt = json_object_get(v, "format");
	if (!fmt || json_is_null(fmt))
		return 0;
	if (!json_is_object(fmt) || !json_is_string(json_object_get(fmt, "type")) ||
	    strcmp(json_string_value(json_object_get(fmt, "type")), "json_schema") ||
	    !json_is_object(json_object_get(fmt, "schema")))
		return api_bad(p->e, "output_config.format", "Invalid 'output_config.format': {\"type\": \"json_schema\", \"schema\": {...}}."), -1;
	p->r->format = CHAT_FORMAT_JSON_SCHEMA;
	p->r->json_schema = json_object_get(fmt, "schema");
	return 0;
}

/* context_management: edits Anthropic applies to the context before the
 * model reads it. Clearing thinking blocks is what happens here anyway
 * (none are kept); other edits would change the prompt and are refused. */
static int parse_context_management(struct mparser *p, json_t *v)
{
	json_t *edits, *ed;
	size_t i;

	if (!v || json_is_null(v))
		return 0;
	edits = json_object_get(v, "edits");
	if (!json_is_object(v) || (edits && !json_is_array(edits)))
		return api_bad(p->e, "context_management", "Invalid 'context_management': {\"edits\": [...]}."), -1;
	json_array_foreach(edits, i, ed) {
		const char *t = json_string_value(json_object_get(ed, "type"));

		if (!t || strncmp(t, "clear_thinking_", 15))
			return refuse(p, "context_management", "Unsupported context edit '%s': only clear_thinking edits (no thinking is kept here).",
				      t ? t : "");
	}
	return 0;
}

static int parse(struct gen *g, const struct req *q, int count_only, struct api_error *e)
{
	struct chat_request *r = &g->cr;
	struct mparser p = { .r = r, .e = e };
	json_t *root, *msgs, *m, *th;
	json_int_t mt = 0, k = 0;
	size_t i, cap = 1;
	int has;
	double d;

	if (chat_request_begin(q->body.s ? q->body.s : "", q->body.len, kvd_model_id(q->a->d),
			       known_keys, sizeof(known_keys) / sizeof(known_keys[0]), r, e))
		return -1;
	root = r->root;
	msgs = json_object_get(root, "messages");
	if (!json_is_array(msgs))
		return msgs ? param_wrong_type(e, "messages", msgs, "an array") :
			(api_bad(e, "messages", "Field required: 'messages'."), -1);
	if (json_array_size(msgs) > CHAT_MAX_MESSAGES)
		return api_bad(e, "messages", "Invalid 'messages': at most %d.", CHAT_MAX_MESSAGES), -1;
	json_array_foreach(msgs, i, m) {
		json_t *c = json_object_get(m, "content");

		if (!json_is_object(m)) {
			snprintf(p.pp, sizeof(p.pp), "messages.%zu", i);
			return param_wrong_type(e, p.pp, m, "an object");
		}
		cap += json_is_array(c) ? json_array_size(c) + 1 : 1;
	}
	r->msgs = calloc(cap, sizeof(*r->msgs));
	if (!r->msgs)
		return oom(&p);
	if (parse_system(&p, json_object_get(root, "system")) ||
	    parse_tools(&p, json_object_get(root, "tools")) ||
	    parse_tool_choice(&p, json_object_get(root, "tool_choice")))
		return -1;
	json_array_foreach(msgs, i, m)
		if (parse_message(&p, m, i))
			return -1;
	for (i = 0; i < r->n_msgs && r->msgs[i].role == CHAT_SYSTEM; i++)
		;
	if (i == r->n_msgs)
		return api_bad(e, "messages", "Invalid 'messages': at least one user or assistant message."), -1;
	if (param_int(e, root, "max_tokens", 1, UINT32_MAX, &mt, &has))
		return -1;
	if (!has && !count_only)
		return api_bad(e, "max_tokens", "Field required: 'max_tokens'."), -1;
	r->s.max_tokens = (uint32_t)mt;
	d = 1;
	if (param_number(e, root, "temperature", 0, 1, &d))
		return -1;
	r->s.temperature = (float)d;
	d = 1;
	if (param_number(e, root, "top_p", 0, 1, &d))
		return -1;
	r->s.top_p = (float)d;
	if (param_stop(e, json_object_get(root, "stop_sequences"), "stop_sequences", &r->s) ||
	    param_extra_sampling(r, root, e) || param_bool(e, root, "stream", &g->stream))
		return -1;
	if (param_int(e, root, "top_k", 0, INT32_MAX, &k, &has))
		return -1;
	if (has)
		r->s.top_k = (uint32_t)k;
	if (param_int(e, root, "seed", INT64_MIN, INT64_MAX, &k, &has))
		return -1;
	r->s.seed = (uint64_t)k;
	r->s.has_seed = has;
	/* metadata.user_id: an end user's opaque id (abuse tracing); it goes
	 * in the request log line, and is no session key (Claude Code sends
	 * one for every request) */
	m = json_object_get(root, "metadata");
	if (m && !json_is_null(m)) {
		const char *mk;
		json_t *mv;

		if (!json_is_object(m))
			return param_wrong_type(e, "metadata", m, "an object");
		json_object_foreach(m, mk, mv)
			if (strcmp(mk, "user_id"))
				return api_error_set(e, 400, API_INVALID, "unknown_parameter", "metadata",
						     "metadata.%s: Extra inputs are not permitted (user_id only).", mk), -1;
		if (param_string(e, m, "user_id", "metadata.user_id", 256, &mk))
			return -1;
	}
	{
		static const char *const tiers[] = { "auto", "standard_only" };
		const char *t;

		/* both are what this server does: it has one (standard) tier */
		if (param_string(e, root, "service_tier", "service_tier", 64, &t))
			return -1;
		if (t && strcmp(t, tiers[0]) && strcmp(t, tiers[1]))
			return api_bad(e, "service_tier", "Invalid 'service_tier': auto or standard_only."), -1;
	}
	th = json_object_get(root, "thinking");
	if (th && !json_is_null(th)) {
		const char *t = json_string_value(json_object_get(th, "type"));
		const char *disp = NULL;
		json_t *bt = json_object_get(th, "budget_tokens");

		/* adaptive: the model decides whether to think (a family
		 * that does, qwen3, gives thinking blocks); enabled: it may
		 * think, budget_tokens at most; disabled: it does not */
		if (!t || (strcmp(t, "disabled") && strcmp(t, "adaptive") && strcmp(t, "enabled")))
			return refuse(&p, "thinking", "Invalid 'thinking': %s: enabled, adaptive or disabled.",
				      t ? t : "not an object with a type");
		if (param_string(e, th, "display", "thinking.display", 64, &disp))
			return -1;
		if (disp && strcmp(disp, "summarized") && strcmp(disp, "omitted"))
			return refuse(&p, "thinking.display", "Invalid 'thinking.display' '%s': summarized or omitted.",
				      disp);
		((struct msg_fe *)g->fe)->omit_thinking = disp && !strcmp(disp, "omitted");
		if (!strcmp(t, "disabled"))
			r->thinking = CHAT_THINK_OFF;
		if (!strcmp(t, "enabled")) {
			/* the think block is closed once it has taken
			 * budget_tokens, and the reply goes on (gen.c) */
			if (!json_is_integer(bt) || json_integer_value(bt) < 1 ||
			    json_integer_value(bt) > UINT32_MAX)
				return refuse(&p, "thinking.budget_tokens", "Invalid 'thinking.budget_tokens': %s (a positive integer is required with type enabled).",
					      bt ? "not a positive integer" : "missing");
			r->think_budget = (uint32_t)json_integer_value(bt);
			r->thinking = CHAT_THINK_ON;
		}
	}
	return parse_output_config(&p, json_object_get(root, "output_config")) ||
		parse_context_management(&p, json_object_get(root, "context_management")) ||
		refuse_set(&p, root, "container", "is not supported by this server") ||
		refuse_set(&p, root, "mcp_servers", "is not supported: declare tools, or configure MCP servers on the server ([mcp.NAME])") ? -1 : 0;
}

static enum MHD_Result count_tokens(struct req *q, struct gen *g)
{
	struct chat_conv conv = { .msgs = g->cr.msgs, .n_msgs = g->cr.n_msgs,
				  .tools = g->cr.tools, .n_tools = g->cr.n_tools,
				  .thinking = g->cr.thinking };
	char why[200];
	int n, rc = chat_render(q->a->tmpl, &conv, &g->prompt, why, sizeof(why));
	struct kvd_span *markup;
	size_t nm;

	if (rc == -EINVAL)
		return api_fail(q, 400, API_INVALID, NULL, "%s", why);
	if (rc)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	/* as a request counts it: special tokens only in the markup */
	markup = gen_prompt_markup(&g->prompt, &nm);
	if (!markup)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	n = kvd_count_prompt(q->a->d, g->prompt.text.s, g->prompt.text.len, markup, nm);
	free(markup);
	if (n < 0)
		return api_fail(q, 400, API_INVALID, NULL, "The prompt cannot be tokenized (%s).",
				strerror(-n));
	return api_send_json(q, 200, json_pack("{s:i}", "input_tokens", n));
}

enum MHD_Result messages_handle(struct req *q)
{
	struct api_error e;
	struct msg_fe *f;
	struct gen *g;

	g = api_gen_new(q, &msg_ops, "msg_");
	f = g ? calloc(1, sizeof(*f)) : NULL;
	if (!f)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	g->fe = f;
	f->count_only = q->route == R_COUNT_TOKENS;
	if (parse(g, q, f->count_only, &e))
		return api_send_error(q, &e);
	if (f->count_only)
		return count_tokens(q, g);
	if (gen_submit(g, q->tenant_id, 1, &e))
		return api_send_error(q, &e);
	if (g->stream)
		return api_stream(q, g);
	return api_wait(q, g);
}
