// SPDX-License-Identifier: MIT
/*
 * qwen.c - the Qwen families, rendered as their GGUF templates render
 * (Qwen2.5's and Qwen3's tokenizer.chat_template, byte for byte, with
 * the tools as llama.cpp hands them to a template: chat.md):
 *
 *   qwen2.5   <|im_start|>system\nSYSTEM (or the model's default)[TOOLS]<|im_end|>\n
 *             <|im_start|>user\nTEXT<|im_end|>\n
 *             <|im_start|>assistant[\nCONTENT]\n<tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call><|im_end|>\n
 *             <|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response><|im_end|>\n
 *             <|im_start|>assistant\n
 *   qwen3     the same without a default system message, tool results
 *             likewise grouped, and the reasoning of the assistant turns
 *             after the last user query kept as <think>\nR\n</think>\n\n
 *             (earlier ones dropped, as the template does); with
 *             thinking off the reply opens after <think>\n\n</think>\n\n.
 *
 * Tool calls use the Hermes syntax (tool_call.c, tags <tool_call> and
 * </tool_call>); ARGS is the call's arguments as tojson writes them.
 * Consecutive tool results share one user turn, so a result's closing
 * <|im_end|> depends on whether another follows: the prompt of a request
 * ending in tool results is still a prefix of the next one's, because the
 * next message (the assistant's reply) always comes after the generation
 * prompt.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>\n"

enum { QWEN25, QWEN3 };

static const char tools_head[] =
	"# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
	"You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char tools_tail[] =
	"\n</tools>\n\nFor each function call, return a json object with function name and "
	"arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
	"{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>" IM_END;

static int render_tools(struct chat_prompt *p, const struct chat_conv *c)
{
	chat_markup(p, tools_head);
	for (size_t i = 0; i < c->n_tools; i++) {
		json_t *d = chat_tool_decl(&c->tools[i], 1);

		if (!d)
			return -ENOMEM;
		chat_markup(p, "\n");
		chat_tojson_plain(p, d, -1);
		json_decref(d);
	}
	chat_markup(p, tools_tail);
	return 0;
}

static void render_calls(struct chat_prompt *p, const struct chat_msg *m, int first_nl)
{
	for (size_t k = 0; k < m->n_calls; k++) {
		if (k || first_nl)
			chat_markup(p, "\n");
		chat_markup(p, "<tool_call>\n{\"name\": \"");
		chat_plain(p, m->calls[k].name, strlen(m->calls[k].name));
		chat_markup(p, "\", \"arguments\": ");
		chat_args_plain(p, &m->calls[k]);
		chat_markup(p, "}\n</tool_call>");
	}
}

/* The template's str.strip/lstrip/rstrip('\n'). */
static void strip_nl(const char **s, size_t *n, int left, int right)
{
	while (left && *n && **s == '\n') {
		(*s)++;
		(*n)--;
	}
	while (right && *n && (*s)[*n - 1] == '\n')
		(*n)--;
}

/* The last occurrence of needle in s[0..n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *needle)
{
	size_t l = strlen(needle);
	const char *last = NULL, *q = s;

	while ((q = memmem(q, (size_t)(s + n - q), needle, l))) {
		last = q;
		q++;
	}
	return last;
}

/*
 * Qwen3's reading of an assistant message: its reasoning_content, or the
 * text before the first </think> (after the last <think> in it) and the
 * content after the last </think>.
 */
static void split_think(const struct chat_msg *m, const char **content, size_t *clen,
			const char **rs, size_t *rlen)
{
	const char *c = m->content;
	size_t n = m->content_len;
	const char *close = memmem(c, n, "</think>", 8), *open;

	*content = c;
	*clen = n;
	*rs = "";
	*rlen = 0;
	if (m->reasoning) {
		*rs = m->reasoning;
		*rlen = m->reasoning_len;
		return;
	}
	if (!close)
		return;
	{
		const char *lc = last_of(c, n, "</think>");

		*content = lc + 8;
		*clen = (size_t)(c + n - *content);
		strip_nl(content, clen, 1, 0);
	}
	*rs = c;
	*rlen = (size_t)(close - c);
	strip_nl(rs, rlen, 0, 1);
	open = last_of(*rs, *rlen, "<think>");
	if (open) {
		*rlen -= (size_t)(open + 7 - *rs);
		*rs = open + 7;
	}
	strip_nl(rs, rlen, 1, 0);
}

/* Qwen3: the user message after which reasoning is kept (the last one
 * that is not a tool response in a user turn). */
static size_t last_query(const struct chat_conv *c)
{
	for (size_t i = c->n_msgs; i-- > 0;) {
		const struct chat_msg *m = &c->msgs[i];

		if (m->role != CHAT_USER)
			continue;
		if (m->content_len >= 15 + 16 && !memcmp(m->content, "<tool_response>", 15) &&
		    !memcmp(m->content + m->content_len - 16, "</tool_response>", 16))
			continue;
		return i;
	}
	return c->n_msgs ? c->n_msgs - 1 : 0;
}

static void render_turn(struct chat_prompt *p, const char *role,
			const struct chat_msg *m)
{
	chat_markup(p, IM_START);
	chat_markup(p, role);
	chat_markup(p, "\n");
	chat_plain(p, m->content, m->content_len);
	chat_markup(p, IM_END);
}

/*
 * An assistant message. Qwen 2.5 writes its content after a newline only
 * when there is some; Qwen 3 reads its reasoning (keep: the message comes
 * after the last user query, where the template keeps it).
 */
static void assistant(struct chat_prompt *p, const struct chat_msg *m, int q3, int keep,
		      int last)
{
	const char *ct, *rs;
	size_t cl, rl;

	if (!q3) {
		if (!m->n_calls) {
			render_turn(p, "assistant", m);
			return;
		}
		chat_markup(p, IM_START "assistant");
		if (m->content_len) {
			chat_markup(p, "\n");
			chat_plain(p, m->content, m->content_len);
		}
		render_calls(p, m, 1);
		chat_markup(p, IM_END);
		return;
	}
	split_think(m, &ct, &cl, &rs, &rl);
	chat_markup(p, IM_START "assistant\n");
	if (keep && (last || rl)) {
		const char *s = ct;
		size_t n = cl;

		strip_nl(&rs, &rl, 1, 1);
		chat_markup(p, "<think>\n");
		chat_plain(p, rs, rl);
		chat_markup(p, "\n</think>\n\n");
		strip_nl(&s, &n, 1, 0);
		chat_plain(p, s, n);
	} else {
		chat_plain(p, ct, cl);
	}
	render_calls(p, m, cl > 0);
	chat_markup(p, IM_END);
}

static int render(const struct chat_template *t, const struct chat_conv *c,
		  struct chat_prompt *p, char *err, size_t errlen)
{
	int q3 = t->variant == QWEN3;
	int sys0 = c->n_msgs && c->msgs[0].role == CHAT_SYSTEM;
	size_t lq = q3 ? last_query(c) : 0;

	(void)err;
	(void)errlen;
	if (c->n_tools) {
		chat_markup(p, IM_START "system\n");
		if (sys0) {
			chat_plain(p, c->msgs[0].content, c->msgs[0].content_len);
			chat_markup(p, q3 ? "\n\n" : "");
		} else if (!q3) {
			chat_markup_n(p, t->system.s, t->system.len);
		}
		if (!q3)
			chat_markup(p, "\n\n");
		if (render_tools(p, c))
			return -ENOMEM;
	} else if (sys0) {
		render_turn(p, "system", &c->msgs[0]);
	} else if (!q3) {
		chat_markup(p, IM_START "system\n");
		chat_markup_n(p, t->system.s, t->system.len);
		chat_markup(p, IM_END);
	}
	for (size_t i = 0; i < c->n_msgs; i++) {
		const struct chat_msg *m = &c->msgs[i];
		int prev_tool = i > 0 && c->msgs[i - 1].role == CHAT_TOOL;
		int next_tool = i + 1 < c->n_msgs && c->msgs[i + 1].role == CHAT_TOOL;

		switch (m->role) {
		case CHAT_SYSTEM:
			if (i)
				render_turn(p, "system", m);
			break;
		case CHAT_USER:
			render_turn(p, "user", m);
			break;
		case CHAT_ASSISTANT:
			assistant(p, m, q3, q3 && i > lq, i + 1 == c->n_msgs);
			break;
		case CHAT_TOOL:
			if (!prev_tool)
				chat_markup(p, IM_START "user");
			chat_markup(p, "\n<tool_response>\n");
			chat_plain(p, m->content, m->content_len);
			chat_markup(p, "\n</tool_response>");
			if (!next_tool)
				chat_markup(p, IM_END);
			break;
		}
	}
	chat_markup(p, IM_START "assistant\n");
	if (q3 && c->thinking == CHAT_THINK_OFF)
		chat_markup(p, "<think>\n\n</think>\n\n");
	return p->oom ? -ENOMEM : 0;
}

static int render_round(const struct chat_template *t,
			const struct chat_tool_result *r, size_t n,
			struct chat_prompt *p)
{
	(void)t;
	chat_markup(p, IM_END);
	for (size_t i = 0; i < n; i++) {
		if (!i)
			chat_markup(p, IM_START "user");
		chat_markup(p, "\n<tool_response>\n");
		chat_plain(p, r[i].output, r[i].output_len);
		chat_markup(p, "\n</tool_response>");
	}
	if (n)
		chat_markup(p, IM_END);
	chat_markup(p, IM_START "assistant\n");
	return p->oom ? -ENOMEM : 0;
}

/* The reply as the template writes it back, between the generation
 * prompt and <|im_end|> (Qwen 3: as a message after the last query). */
static void body(const struct chat_template *t, const struct tc_result *r, struct strbuf *b)
{
	struct chat_msg m;
	struct chat_prompt p = { 0 };
	size_t head = strlen(IM_START "assistant"), tail = strlen(IM_END);

	if (chat_result_msg(r, &m)) {
		b->oom = 1;
		return;
	}
	assistant(&p, &m, t->variant == QWEN3, 1, 0);
	if (p.oom) {
		b->oom = 1;
	} else if (p.text.len >= head + tail) {
		/* the generation prompt's newline, when the body has it */
		size_t skip = head + (p.text.s[head] == '\n');

		sb_add(b, p.text.s + skip, p.text.len - skip - tail);
	}
	chat_prompt_free(&p);
	free(m.calls);
}

/* Qwen's tool preamble and tool results in a user turn. */
static int qwen_markers(const char *tmpl, size_t len)
{
	return chat_has(tmpl, len, IM_START) && chat_has(tmpl, len, "<tool_call>") &&
	       chat_has(tmpl, len, "You may call one or more functions to assist with the user query.") &&
	       (chat_has(tmpl, len, "'<|im_start|>user'") || chat_has(tmpl, len, "\"<|im_start|>user\"")) &&
	       !chat_has(tmpl, len, "<function=");
}

static int detect25(const char *tmpl, size_t len)
{
	return qwen_markers(tmpl, len) && !chat_has(tmpl, len, "<think>");
}

/* Qwen 3 writes back the reasoning of recent replies (reasoning_content);
 * QwQ, with the same markers, drops it everywhere and opens every reply
 * with <think>: not this family's rendering, so refused. */
static int detect3(const char *tmpl, size_t len)
{
	return qwen_markers(tmpl, len) && chat_has(tmpl, len, "<think>") &&
	       chat_has(tmpl, len, "reasoning_content");
}

#define QWEN_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* Qwen 2.5's default system message: the literal the template writes
 * when the conversation has none (Qwen's own when there is no template). */
static int setup25(struct chat_template *t, const char *tmpl, size_t len)
{
	static const char *const anchors[] = { "if tools", "messages[0]", "else", NULL };

	t->variant = QWEN25;
	if (tmpl && !chat_scan_string(tmpl, len, anchors, &t->system) && !t->system.n_holes)
		return 0;
	free(t->system.s);
	memset(&t->system, 0, sizeof(t->system));
	t->system.s = strdup(QWEN_DEFAULT_SYSTEM);
	if (!t->system.s)
		return -ENOMEM;
	t->system.len = strlen(t->system.s);
	return 0;
}

static int setup3(struct chat_template *t, const char *tmpl, size_t len)
{
	(void)tmpl;
	(void)len;
	t->variant = QWEN3;
	return 0;
}

static const char *const eog[] = { "<|im_end|>", NULL };

const struct chat_family chat_family_qwen25 = {
	.eog = eog,
	.name = "qwen2.5",
	.eot = "<|im_end|>",
	.syntax = TC_SYN_HERMES,
	.body = body,
	.detect = detect25,
	.setup = setup25,
	.render = render,
	.render_round = render_round,
};

const struct chat_family chat_family_qwen3 = {
	.eog = eog,
	.name = "qwen3",
	.eot = "<|im_end|>",
	.syntax = TC_SYN_HERMES,
	.think = 1,
	.body = body,
	.detect = detect3,
	.setup = setup3,
	.render = render,
	.render_round = render_round,
};
