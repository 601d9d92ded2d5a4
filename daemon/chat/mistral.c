// SPDX-License-Identifier: MIT
/*
 * mistral.c - the Mistral families, rendered as their GGUF templates
 * render (with the tools as llama.cpp hands them to a template):
 *
 *   mistral-v3   Mistral Nemo (the "v3-tekken" template):
 *                [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the last
 *                user message, the system message inside the last user
 *                message when that is the conversation's last,
 *                [INST]TEXT[/INST], [TOOL_CALLS][{"name": N, "arguments":
 *                ARGS, "id": ID}, ...]</s>, [TOOL_RESULTS]{"content":
 *                RESULT, "call_id": ID}[/TOOL_RESULTS], REPLY</s>
 *   mistral-v7   Mistral Small 3.1/3.2: [SYSTEM_PROMPT]SYSTEM (or the
 *                model's default, with today's date)[/SYSTEM_PROMPT], the
 *                tools (tojson) before the last user message,
 *                [TOOL_CALLS]N[CALL_ID]ID[ARGS]ARGS...</s>,
 *                [TOOL_RESULTS]ID[TOOL_CONTENT]RESULT[/TOOL_RESULTS]
 *   mistral-v11  Ministral 3, Magistral, Devstral: [SYSTEM_PROMPT] (or
 *                the default) then the tools once at the top, CONTENT
 *                [TOOL_CALLS]N[ARGS]ARGS...</s>,
 *                [TOOL_RESULTS]RESULT[/TOOL_RESULTS]
 *
 * The templates write no generation prompt (the reply follows [/INST] or
 * [/TOOL_RESULTS]) and no BOS text (the tokenizer adds BOS). User and
 * plain assistant turns must alternate, as the templates require. Call
 * ids are 9 alphanumerics in these templates: an id of another shape is
 * written as a 9-character digest of it, the same for the call and its
 * result. The v3 and v7 templates move the tools (and v3 the system
 * message) to the last user message, so a new user turn re-renders from
 * the previous last one: byte stability holds across tool rounds, not
 * across user turns (chat.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

enum { MISTRAL_V3, MISTRAL_V7, MISTRAL_V11 };

#define EOS "</s>"

static int is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The id as the template takes it: 9 alphanumerics, else a digest. */
static void call_id(const char *id, char out[10])
{
	static const char alnum[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	size_t n = id ? strlen(id) : 0, i;
	uint64_t h = 0xcbf29ce484222325ull;
	int ok = n == 9;

	for (i = 0; ok && i < 9; i++)
		ok = is_alnum(id[i]);
	if (ok) {
		memcpy(out, id, 10);
		return;
	}
	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)id[i]) * 0x100000001b3ull;
	for (i = 0; i < 9; i++) {
		out[i] = alnum[h % 62];
		h = h / 62 ^ (h << 29);
	}
	out[9] = '\0';
}

static void plain_id(struct chat_prompt *p, const char *id)
{
	char s[10];

	call_id(id, s);
	chat_plain(p, s, 9);
}

/* The default system message with today's date where the template has it. */
static void default_system(const struct chat_template *t, const struct chat_conv *c,
			   struct chat_prompt *p)
{
	const struct chat_text *s = &t->system;
	size_t at = 0;
	char date[32];

	if (!s->s)		/* none in the file, none of our own */
		return;
	chat_date(c->now, "%Y-%m-%d", date, sizeof(date));
	for (unsigned h = 0; h < s->n_holes; h++) {
		chat_markup_n(p, s->s + at, s->hole[h] - at);
		chat_markup(p, date);
		at = s->hole[h];
	}
	chat_markup_n(p, s->s + at, s->len - at);
}

static int tools_json(struct chat_prompt *p, const struct chat_conv *c)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < c->n_tools; i++)
		if (json_array_append_new(a, chat_tool_decl(&c->tools[i], 1))) {
			json_decref(a);
			return -ENOMEM;
		}
	if (!a)
		return -ENOMEM;
	chat_tojson_plain(p, a, -1);
	json_decref(a);
	return 0;
}

/* Nemo's own writing of a tool: string members unescaped, the rest tojson. */
static int tools_v3(struct chat_prompt *p, const struct chat_conv *c)
{
	chat_markup(p, "[AVAILABLE_TOOLS][");
	for (size_t i = 0; i < c->n_tools; i++) {
		json_t *f = chat_tool_decl(&c->tools[i], 0), *v;
		const char *key;
		size_t k = 0;

		if (!f)
			return -ENOMEM;
		chat_markup(p, "{\"type\": \"function\", \"function\": {");
		json_object_foreach(f, key, v) {
			if (k++)
				chat_markup(p, ", ");
			chat_markup(p, "\"");
			chat_plain(p, key, strlen(key));
			if (json_is_string(v)) {
				chat_markup(p, "\": \"");
				chat_plain(p, json_string_value(v), json_string_length(v));
				chat_markup(p, "\"");
			} else {
				chat_markup(p, "\": ");
				chat_tojson_plain(p, v, -1);
			}
		}
		json_decref(f);
		chat_markup(p, "}}");
		chat_markup(p, i + 1 < c->n_tools ? ", " : "]");
	}
	chat_markup(p, "[/AVAILABLE_TOOLS]");
	return 0;
}

/* The templates' check: user and plain assistant turns alternate. */
static int alternate(const struct chat_template *t, const struct chat_conv *c,
		     size_t from, char *err, size_t errlen)
{
	size_t n = 0;

	for (size_t i = from; i < c->n_msgs; i++) {
		const struct chat_msg *m = &c->msgs[i];

		if (m->role == CHAT_TOOL || m->n_calls)
			continue;
		if (t->variant == MISTRAL_V11 && m->role == CHAT_SYSTEM)
			continue;
		if ((m->role == CHAT_USER) != (n % 2 == 0)) {
			snprintf(err, errlen, "messages[%zu]: this model's template needs user and assistant "
				 "messages to alternate after the system message (tool calls and results aside)", i);
			return -EINVAL;
		}
		n++;
	}
	return 0;
}

static int same_text(const struct chat_msg *a, const struct chat_msg *b)
{
	return a->content_len == b->content_len && !memcmp(a->content, b->content, a->content_len);
}

static void call_v3(struct chat_prompt *p, const struct chat_call *call)
{
	chat_markup(p, "{\"name\": \"");
	chat_plain(p, call->name, strlen(call->name));
	chat_markup(p, "\", \"arguments\": ");
	chat_args_plain(p, call);
	chat_markup(p, ", \"id\": \"");
	plain_id(p, call->id);
	chat_markup(p, "\"}");
}

/* An assistant message, without the </s> that ends it. */
static void assistant(struct chat_prompt *p, int v, const struct chat_msg *m)
{
	if (!m->n_calls) {
		chat_plain(p, m->content, m->content_len);
		return;
	}
	if (v == MISTRAL_V3) {
		chat_markup(p, "[TOOL_CALLS][");
		for (size_t k = 0; k < m->n_calls; k++) {
			if (k)
				chat_markup(p, ", ");
			call_v3(p, &m->calls[k]);
		}
		chat_markup(p, "]");
		return;
	}
	if (v == MISTRAL_V11)
		chat_plain(p, m->content, m->content_len);
	for (size_t k = 0; k < m->n_calls; k++) {
		chat_markup(p, "[TOOL_CALLS]");
		chat_plain(p, m->calls[k].name, strlen(m->calls[k].name));
		if (v == MISTRAL_V7) {
			chat_markup(p, "[CALL_ID]");
			plain_id(p, m->calls[k].id);
		}
		chat_markup(p, "[ARGS]");
		chat_args_plain(p, &m->calls[k]);
	}
}

static int render(const struct chat_template *t, const struct chat_conv *c,
		  struct chat_prompt *p, char *err, size_t errlen)
{
	int v = t->variant;
	int sys0 = c->n_msgs && c->msgs[0].role == CHAT_SYSTEM;
	size_t from = sys0 ? 1 : 0, last_user = SIZE_MAX;
	int rc = alternate(t, c, from, err, errlen);

	if (rc)
		return rc;
	for (size_t i = from; i < c->n_msgs; i++)
		if (c->msgs[i].role == CHAT_USER)
			last_user = i;
	/* v11 writes no block for an empty default (Ministral's templates) */
	if (v != MISTRAL_V3 && (sys0 || v == MISTRAL_V7 || t->system.len)) {
		chat_markup(p, "[SYSTEM_PROMPT]");
		if (sys0)
			chat_plain(p, c->msgs[0].content, c->msgs[0].content_len);
		else
			default_system(t, c, p);
		chat_markup(p, "[/SYSTEM_PROMPT]");
	}
	if (v == MISTRAL_V11 && c->n_tools) {
		chat_markup(p, "[AVAILABLE_TOOLS]");
		if (tools_json(p, c))
			return -ENOMEM;
		chat_markup(p, "[/AVAILABLE_TOOLS]");
	}
	for (size_t i = from; i < c->n_msgs; i++) {
		const struct chat_msg *m = &c->msgs[i];

		switch (m->role) {
		case CHAT_USER:
			if (c->n_tools && v != MISTRAL_V11 && last_user != SIZE_MAX &&
			    same_text(m, &c->msgs[last_user])) {
				if (v == MISTRAL_V3) {
					if (tools_v3(p, c))
						return -ENOMEM;
				} else {
					chat_markup(p, "[AVAILABLE_TOOLS]");
					if (tools_json(p, c))
						return -ENOMEM;
					chat_markup(p, "[/AVAILABLE_TOOLS]");
				}
			}
			chat_markup(p, "[INST]");
			if (v == MISTRAL_V3 && sys0 && i + 1 == c->n_msgs) {
				chat_plain(p, c->msgs[0].content, c->msgs[0].content_len);
				chat_markup(p, "\n\n");
			}
			chat_plain(p, m->content, m->content_len);
			chat_markup(p, "[/INST]");
			break;
		case CHAT_ASSISTANT:
			assistant(p, v, m);
			chat_markup(p, EOS);
			break;
		case CHAT_TOOL:
			chat_markup(p, "[TOOL_RESULTS]");
			if (v == MISTRAL_V3) {
				chat_markup(p, "{\"content\": ");
				chat_plain(p, m->content, m->content_len);
				chat_markup(p, ", \"call_id\": \"");
				plain_id(p, m->tool_call_id);
				chat_markup(p, "\"}");
			} else {
				if (v == MISTRAL_V7) {
					plain_id(p, m->tool_call_id);
					chat_markup(p, "[TOOL_CONTENT]");
				}
				chat_plain(p, m->content, m->content_len);
			}
			chat_markup(p, "[/TOOL_RESULTS]");
			break;
		case CHAT_SYSTEM:
			if (v == MISTRAL_V3) {
				snprintf(err, errlen, "messages[%zu]: this model's template takes a system message only first", i);
				return -EINVAL;
			}
			chat_markup(p, "[SYSTEM_PROMPT]");
			chat_plain(p, m->content, m->content_len);
			chat_markup(p, "[/SYSTEM_PROMPT]");
			break;
		}
	}
	return p->oom ? -ENOMEM : 0;
}

static int render_round(const struct chat_template *t,
			const struct chat_tool_result *r, size_t n,
			struct chat_prompt *p)
{
	chat_markup(p, EOS);
	for (size_t i = 0; i < n; i++) {
		chat_markup(p, "[TOOL_RESULTS]");
		if (t->variant == MISTRAL_V3) {
			chat_markup(p, "{\"content\": ");
			chat_plain(p, r[i].output, r[i].output_len);
			chat_markup(p, ", \"call_id\": \"");
			plain_id(p, r[i].call_id);
			chat_markup(p, "\"}");
		} else {
			if (t->variant == MISTRAL_V7) {
				plain_id(p, r[i].call_id);
				chat_markup(p, "[TOOL_CONTENT]");
			}
			chat_plain(p, r[i].output, r[i].output_len);
		}
		chat_markup(p, "[/TOOL_RESULTS]");
	}
	return p->oom ? -ENOMEM : 0;
}

static void body(const struct chat_template *t, const struct tc_result *r, struct strbuf *b)
{
	struct chat_msg m;
	struct chat_prompt p = { 0 };

	if (chat_result_msg(r, &m)) {
		b->oom = 1;
		return;
	}
	assistant(&p, t->variant, &m);
	if (p.oom)
		b->oom = 1;
	else
		sb_add(b, p.text.s ? p.text.s : "", p.text.len);
	chat_prompt_free(&p);
	free(m.calls);
}

static int mistral(const char *tmpl, size_t len)
{
	return chat_has(tmpl, len, "[INST]") && chat_has(tmpl, len, "[TOOL_CALLS]") &&
	       chat_has(tmpl, len, "[TOOL_RESULTS]");
}

static int detect_v3(const char *tmpl, size_t len)
{
	return mistral(tmpl, len) && chat_has(tmpl, len, "[AVAILABLE_TOOLS][") &&
	       chat_has(tmpl, len, "\"call_id\"") && !chat_has(tmpl, len, "[SYSTEM_PROMPT]");
}

static int detect_v7(const char *tmpl, size_t len)
{
	return mistral(tmpl, len) && chat_has(tmpl, len, "[SYSTEM_PROMPT]") &&
	       chat_has(tmpl, len, "[CALL_ID]") && chat_has(tmpl, len, "[TOOL_CONTENT]");
}

static int detect_v11(const char *tmpl, size_t len)
{
	return mistral(tmpl, len) && chat_has(tmpl, len, "[SYSTEM_PROMPT]") &&
	       chat_has(tmpl, len, "[ARGS]") && !chat_has(tmpl, len, "[CALL_ID]");
}

static int setup(struct chat_template *t, int variant, const char *tmpl, size_t len)
{
	static const char *const anchors[] = { "set default_system_message =", NULL };

	t->variant = variant;
	if (variant == MISTRAL_V3 || !tmpl)
		return 0;
	if (chat_scan_string(tmpl, len, anchors, &t->system))
		memset(&t->system, 0, sizeof(t->system));	/* none: empty */
	return 0;
}

static int setup_v3(struct chat_template *t, const char *tmpl, size_t len)
{
	return setup(t, MISTRAL_V3, tmpl, len);
}

static int setup_v7(struct chat_template *t, const char *tmpl, size_t len)
{
	return setup(t, MISTRAL_V7, tmpl, len);
}

static int setup_v11(struct chat_template *t, const char *tmpl, size_t len)
{
	return setup(t, MISTRAL_V11, tmpl, len);
}

static const struct chat_call_grammar grammar_v3 = {
	.list_open = "[TOOL_CALLS][", .list_sep = ",", .list_close = "]",
	.id = 1, .trigger = "[TOOL_CALLS]",
};
static const struct chat_call_grammar grammar_v7 = {
	.list_sep = "", .call_open = "[TOOL_CALLS]", .name_args = 1, .id = 1,
	.id_mark = "[CALL_ID]", .args_mark = "[ARGS]",
};
static const struct chat_call_grammar grammar_v11 = {
	.list_sep = "", .call_open = "[TOOL_CALLS]", .name_args = 1, .args_mark = "[ARGS]",
};
static const char *const markers[] = { "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]",
				       "[/THINK]", NULL };
static const char *const eog[] = { EOS, NULL };

const struct chat_family chat_family_mistral_v3 = {
	.grammar = &grammar_v3,
	.markers = markers,
	.eog = eog,
	.name = "mistral-v3",
	.eot = EOS,
	.syntax = TC_SYN_MISTRAL_JSON,
	.body = body,
	.detect = detect_v3,
	.setup = setup_v3,
	.render = render,
	.render_round = render_round,
};

const struct chat_family chat_family_mistral_v7 = {
	.grammar = &grammar_v7,
	.markers = markers,
	.eog = eog,
	.name = "mistral-v7",
	.eot = EOS,
	.syntax = TC_SYN_MISTRAL_ARGS,
	.body = body,
	.detect = detect_v7,
	.setup = setup_v7,
	.render = render,
	.render_round = render_round,
};

const struct chat_family chat_family_mistral_v11 = {
	.grammar = &grammar_v11,
	.markers = markers,
	.eog = eog,
	.name = "mistral-v11",
	.eot = EOS,
	.syntax = TC_SYN_MISTRAL_ARGS,
	.body = body,
	.detect = detect_v11,
	.setup = setup_v11,
	.render = render,
	.render_round = render_round,
};
