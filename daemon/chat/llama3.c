// SPDX-License-Identifier: MIT
/*
 * llama3.c - the Llama 3.x family (3.1, 3.2, 3.3 instruct), rendered as
 * their GGUF templates render with llama.cpp's context (date_string is
 * today's date, "%d %b %Y", local time):
 *
 *   <|start_header_id|>system<|end_header_id|>\n\n
 *   [Environment: ipython\n]Cutting Knowledge Date: December 2023\n
 *   Today Date: DD Mon YYYY\n\nSYSTEM<|eot_id|>
 *   <|start_header_id|>user<|end_header_id|>\n\n[the tools, then] TEXT<|eot_id|>
 *   <|start_header_id|>assistant<|end_header_id|>\n\n{"name": "N", "parameters": ARGS}<|eot_id|>
 *   <|start_header_id|>ipython<|end_header_id|>\n\n"RESULT"<|eot_id|>
 *   <|start_header_id|>assistant<|end_header_id|>\n\n
 *
 * With tools, the first user message carries them (tools_in_user_message,
 * the templates' default), each as tojson(indent=4). Message text is
 * trimmed (ASCII whitespace, as llama.cpp's Jinja trims); a tool result
 * is written as a JSON string (the template's tojson of a string). The
 * template renders one call per assistant message and drops the content
 * beside it: a message with two calls is refused. No BOS text: the
 * tokenizer adds BOS. Builtin tools (brave_search, wolfram_alpha,
 * code_interpreter through <|python_tag|>) are not offered: OpenAI's API
 * has no such tools.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_internal.h"

#define HDR(role) "<|start_header_id|>" role "<|end_header_id|>\n\n"
#define EOT "<|eot_id|>"

static int ascii_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void trimmed(struct chat_prompt *p, const char *s, size_t n)
{
	while (n && ascii_space(*s)) {
		s++;
		n--;
	}
	while (n && ascii_space(s[n - 1]))
		n--;
	chat_plain(p, s, n);
}

/* A tool result as the template's tojson writes a string. */
static void json_string_plain(struct chat_prompt *p, const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);

	if (!v) {	/* not UTF-8 (front ends validate): verbatim */
		chat_plain(p, s, n);
		return;
	}
	chat_tojson_plain(p, v, -1);
	json_decref(v);
}

void chat_date(int64_t now, const char *fmt, char *out, size_t size)
{
	time_t t = now ? (time_t)now : time(NULL);
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(out, size, fmt, &tm))
		snprintf(out, size, "?");
}

/* An assistant message's text: its call (the content beside it is not
 * written), or its content. */
static void assistant(struct chat_prompt *p, const struct chat_msg *m)
{
	if (!m->n_calls) {
		trimmed(p, m->content, m->content_len);
		return;
	}
	chat_markup(p, "{\"name\": \"");
	chat_plain(p, m->calls[0].name, strlen(m->calls[0].name));
	chat_markup(p, "\", \"parameters\": ");
	chat_args_plain(p, &m->calls[0]);
	chat_markup(p, "}");
}

static int render(const struct chat_template *t, const struct chat_conv *c,
		  struct chat_prompt *p, char *err, size_t errlen)
{
	size_t i = 0;
	char date[32];

	(void)t;
	chat_date(c->now, "%d %b %Y", date, sizeof(date));
	chat_markup(p, HDR("system"));
	if (c->n_tools)
		chat_markup(p, "Environment: ipython\n");
	chat_markup(p, "Cutting Knowledge Date: December 2023\nToday Date: ");
	chat_markup(p, date);
	chat_markup(p, "\n\n");
	if (c->n_msgs && c->msgs[0].role == CHAT_SYSTEM) {
		trimmed(p, c->msgs[0].content, c->msgs[0].content_len);
		i = 1;
	}
	chat_markup(p, EOT);
	if (c->n_tools) {
		if (i == c->n_msgs) {
			snprintf(err, errlen, "this model's template puts the tools in the first user message, and there is none");
			return -EINVAL;
		}
		chat_markup(p, HDR("user"));
		chat_markup(p, "Given the following functions, please respond with a JSON for a function "
			       "call with its proper arguments that best answers the given prompt.\n\n"
			       "Respond in the format {\"name\": function name, \"parameters\": dictionary "
			       "of argument name and its value}.Do not use variables.\n\n");
		for (size_t k = 0; k < c->n_tools; k++) {
			json_t *d = chat_tool_decl(&c->tools[k], 1);

			if (!d)
				return -ENOMEM;
			chat_tojson_plain(p, d, 4);
			chat_markup(p, "\n\n");
			json_decref(d);
		}
		trimmed(p, c->msgs[i].content, c->msgs[i].content_len);
		chat_markup(p, EOT);
		i++;
	}
	for (; i < c->n_msgs; i++) {
		const struct chat_msg *m = &c->msgs[i];

		switch (m->role) {
		case CHAT_TOOL:
			chat_markup(p, HDR("ipython"));
			json_string_plain(p, m->content, m->content_len);
			chat_markup(p, EOT);
			break;
		case CHAT_ASSISTANT:
			if (m->n_calls > 1) {
				snprintf(err, errlen, "messages[%zu]: this model's template renders one tool call per assistant message, not %zu",
					 i, m->n_calls);
				return -EINVAL;
			}
			chat_markup(p, HDR("assistant"));
			assistant(p, m);
			chat_markup(p, EOT);
			break;
		case CHAT_SYSTEM:
		case CHAT_USER:
			chat_markup(p, m->role == CHAT_USER ? HDR("user") : HDR("system"));
			trimmed(p, m->content, m->content_len);
			chat_markup(p, EOT);
			break;
		}
	}
	chat_markup(p, HDR("assistant"));
	return p->oom ? -ENOMEM : 0;
}

static int render_round(const struct chat_template *t,
			const struct chat_tool_result *r, size_t n,
			struct chat_prompt *p)
{
	(void)t;
	chat_markup(p, EOT);
	for (size_t i = 0; i < n; i++) {
		chat_markup(p, HDR("ipython"));
		json_string_plain(p, r[i].output, r[i].output_len);
		chat_markup(p, EOT);
	}
	chat_markup(p, HDR("assistant"));
	return p->oom ? -ENOMEM : 0;
}

static void body(const struct chat_template *t, const struct tc_result *r, struct strbuf *b)
{
	struct chat_msg m;
	struct chat_prompt p = { 0 };

	(void)t;
	if (chat_result_msg(r, &m)) {
		b->oom = 1;
		return;
	}
	assistant(&p, &m);
	if (p.oom)
		b->oom = 1;
	else
		sb_add(b, p.text.s ? p.text.s : "", p.text.len);
	chat_prompt_free(&p);
	free(m.calls);
}

/* Llama 3.1's header (3.2 and 3.3 share it), no other tool syntax. */
static int detect(const char *tmpl, size_t len)
{
	return chat_has(tmpl, len, "<|start_header_id|>") && chat_has(tmpl, len, "<|eot_id|>") &&
	       chat_has(tmpl, len, "Cutting Knowledge Date") &&
	       chat_has(tmpl, len, "\"parameters\": dictionary of argument name") &&
	       !chat_has(tmpl, len, "<function=") && !chat_has(tmpl, len, ">>>") &&
	       !chat_has(tmpl, len, "functools[");
}

/* One call, the reply's JSON object; a call opens with '{' at the start. */
static const struct chat_call_grammar grammar = {
	.args_key = "parameters", .trigger = "{", .anchored = 1, .max_calls = 1,
};
static const char *const markers[] = { "<|python_tag|>", NULL };
static const char *const eog[] = { "<|eot_id|>", "<|eom_id|>", NULL };

const struct chat_family chat_family_llama3 = {
	.grammar = &grammar,
	.markers = markers,
	.eog = eog,
	.name = "llama3",
	.eot = "<|eot_id|>",
	.syntax = TC_SYN_LLAMA3,
	.body = body,
	.detect = detect,
	.render = render,
	.render_round = render_round,
};
