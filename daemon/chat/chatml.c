// SPDX-License-Identifier: MIT
/*
 * chatml.c - the "chatml" family: ChatML turns with Hermes/Qwen-2.5 tool
 * calling and tool results in "tool" turns, the format of the shipped
 * agent model (Documentation/model.md) and of llama.cpp's built-in chatml
 * template for conversations without tools:
 *
 *   <|im_start|>system\nSYSTEM\n\nTOOLS PREAMBLE<|im_end|>\n
 *   <|im_start|>user\nTEXT<|im_end|>\n
 *   <|im_start|>assistant\nCONTENT\n<tool_call>\n{...}\n</tool_call><|im_end|>\n
 *   <|im_start|>tool\n<tool_response>\nRESULT\n</tool_response><|im_end|>\n
 *   <|im_start|>assistant\n
 *
 * Every message renders on its own from its own fields (no look-ahead, no
 * dropping of earlier content), so the rendering of a conversation is a
 * prefix of the rendering of any continuation of it. Tool results use one
 * "tool" turn per message rather than grouping consecutive results into a
 * user turn: grouping would make the rendering of a result depend on
 * whether another follows it. Assistant tool calls are written by
 * tc_render_call(), the same code that defines what the parser accepts
 * as canonical, with the arguments string verbatim. Does not validate
 * (the front end did) and does not tokenize (the orchestrator does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>\n"

/*
 * The tool block of the system turn, in the Hermes/Qwen-2.5 wording that
 * tool-calling ChatML models (and models/kvarena-agent, see
 * Documentation/model.md) are trained on, byte for byte: one tool per
 * line as JSON with ", " and ": " separators, keys in the client's order,
 * non-ASCII escaped.
 */
static void render_tools(struct chat_prompt *p, const struct chat_conv *c,
			 const struct tc_tags *t)
{
	chat_markup(p, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
		       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
	for (size_t i = 0; i < c->n_tools; i++) {
		json_t *o = json_pack("{s:s, s:O}", "type", "function",
				      "function", c->tools[i].function);
		char *s = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;

		if (!s) {
			p->oom = 1;
			json_decref(o);
			return;
		}
		chat_markup(p, "\n");
		chat_plain(p, s, strlen(s));
		free(s);
		json_decref(o);
	}
	chat_markup(p, "\n</tools>\n\nFor each function call, return a json object with function name "
		       "and arguments within ");
	chat_markup(p, t->open);
	chat_markup(p, t->close);
	chat_markup(p, " XML tags:\n");
	chat_markup(p, t->open);
	chat_markup(p, "\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n");
	chat_markup(p, t->close);
}

static void render_turn(struct chat_prompt *p, const char *role, const char *text,
			size_t len)
{
	chat_markup(p, IM_START);
	chat_markup(p, role);
	chat_markup(p, "\n");
	chat_plain(p, text, len);
	chat_markup(p, IM_END);
}

/* A call as tc_render_call() writes it, its name and arguments plain. */
static void render_call(struct chat_prompt *p, const struct tc_tags *t,
			const struct chat_call *call)
{
	chat_markup(p, t->open);
	chat_markup(p, "\n{\"name\": \"");
	chat_plain(p, call->name, strlen(call->name));
	chat_markup(p, "\", \"arguments\": ");
	chat_plain(p, call->arguments, call->arguments_len);
	chat_markup(p, "}\n");
	chat_markup(p, t->close);
}

static int render(const struct chat_template *tm, const struct chat_conv *c,
		  struct chat_prompt *p, char *err, size_t errlen)
{
	const struct tc_tags *t = &tm->tags;
	size_t i = 0;

	(void)err;
	(void)errlen;
	if (c->n_tools) {
		chat_markup(p, IM_START "system\n");
		if (c->n_msgs && c->msgs[0].role == CHAT_SYSTEM) {
			chat_plain(p, c->msgs[0].content, c->msgs[0].content_len);
			chat_markup(p, "\n\n");
			i = 1;
		}
		render_tools(p, c, t);
		chat_markup(p, IM_END);
	}
	for (; i < c->n_msgs; i++) {
		const struct chat_msg *m = &c->msgs[i];

		switch (m->role) {
		case CHAT_SYSTEM:
			render_turn(p, "system", m->content, m->content_len);
			break;
		case CHAT_USER:
			render_turn(p, "user", m->content, m->content_len);
			break;
		case CHAT_ASSISTANT:
			chat_markup(p, IM_START "assistant\n");
			chat_plain(p, m->content, m->content_len);
			for (size_t k = 0; k < m->n_calls; k++) {
				if (k > 0 || m->content_len > 0)
					chat_markup(p, TC_SEP);
				render_call(p, t, &m->calls[k]);
			}
			chat_markup(p, IM_END);
			break;
		case CHAT_TOOL:
			chat_markup(p, IM_START "tool\n<tool_response>\n");
			chat_plain(p, m->content, m->content_len);
			chat_markup(p, "\n</tool_response>" IM_END);
			break;
		}
	}
	chat_markup(p, IM_START "assistant\n");
	return p->oom ? -ENOMEM : 0;
}

static int render_round(const struct chat_template *tm,
			const struct chat_tool_result *r, size_t n,
			struct chat_prompt *p)
{
	(void)tm;
	chat_markup(p, IM_END);
	for (size_t i = 0; i < n; i++) {
		chat_markup(p, IM_START "tool\n<tool_response>\n");
		chat_plain(p, r[i].output, r[i].output_len);
		chat_markup(p, "\n</tool_response>" IM_END);
	}
	chat_markup(p, IM_START "assistant\n");
	return p->oom ? -ENOMEM : 0;
}

/*
 * A ChatML template (turns open with <|im_start|>) that handles no tools
 * and no reasoning, or declares Hermes calls with Qwen's tool preamble
 * and results in their own turns (the agent model's). A ChatML template
 * with tools of its own (LFM2's lists, MiniCPM's XML, Hermes 2 Pro's and
 * 3's preamble), a reasoning mode (SmolLM3's "/think") or Phi-4's
 * <|im_sep|> is not this family's: rendering it as this one would prompt
 * its model wrongly, so it is refused unless the operator forces a family.
 */
static int detect(const char *tmpl, size_t len)
{
	if (!chat_has(tmpl, len, IM_START) || chat_has(tmpl, len, "<function=") ||
	    chat_has(tmpl, len, "think") || chat_has(tmpl, len, "<|im_sep|>"))
		return 0;
	if (!chat_has(tmpl, len, "<tool_call>"))
		return !chat_has(tmpl, len, "tools");
	return chat_has(tmpl, len, "You may call one or more functions to assist with the user query.") &&
	       !chat_has(tmpl, len, "function calling AI model") &&
	       !chat_has(tmpl, len, "'<|im_start|>user'") && !chat_has(tmpl, len, "\"<|im_start|>user\"");
}

static void body(const struct chat_template *t, const struct tc_result *r, struct strbuf *b)
{
	tc_render_body(b, &t->tags, r->content, r->content_len, r->calls, r->n_calls);
}

static const char *const eog[] = { "<|im_end|>", NULL };

const struct chat_family chat_family_chatml = {
	.name = "chatml",
	.eog = eog,
	.eot = "<|im_end|>",
	.syntax = TC_SYN_HERMES,
	.detect = detect,
	.render = render,
	.render_round = render_round,
	.body = body,
};
