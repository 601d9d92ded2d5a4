// SPDX-License-Identifier: MIT
/*
 * chat_template.c - ChatML rendering of a chat request:
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
 * (chat_request.c did) and does not tokenize (the orchestrator does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>\n"

int chat_template_known(const char *name)
{
	return !name || !strcmp(name, "chatml");
}

/*
 * The tool block of the system turn, in the Hermes/Qwen-2.5 wording that
 * tool-calling ChatML models (and models/kvarena-agent, see
 * Documentation/model.md) are trained on, byte for byte: one tool per
 * line as JSON with ", " and ": " separators, keys in the client's order,
 * non-ASCII escaped.
 */
static void render_tools(struct strbuf *b, const struct chat_request *r,
			 const struct tc_tags *t)
{
	sb_adds(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
		   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
	for (size_t i = 0; i < r->n_tools; i++) {
		json_t *o = json_pack("{s:s, s:O}", "type", "function",
				      "function", r->tools[i].function);
		char *s = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;

		if (!s) {
			b->oom = 1;
			json_decref(o);
			return;
		}
		sb_adds(b, "\n");
		sb_adds(b, s);
		free(s);
		json_decref(o);
	}
	sb_adds(b, "\n</tools>\n\nFor each function call, return a json object with function name "
		   "and arguments within ");
	sb_adds(b, t->open);
	sb_adds(b, t->close);
	sb_adds(b, " XML tags:\n");
	sb_adds(b, t->open);
	sb_adds(b, "\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n");
	sb_adds(b, t->close);
}

static void render_turn(struct strbuf *b, const char *role, const char *text,
			size_t len)
{
	sb_adds(b, IM_START);
	sb_adds(b, role);
	sb_adds(b, "\n");
	sb_add(b, text, len);
	sb_adds(b, IM_END);
}

int chat_render(const struct chat_request *r, const struct tc_tags *tags,
		struct strbuf *b)
{
	struct tc_tags t = {
		tags && tags->open ? tags->open : TC_DEFAULT_OPEN,
		tags && tags->close ? tags->close : TC_DEFAULT_CLOSE,
	};
	size_t i = 0;

	if (r->n_tools) {
		sb_adds(b, IM_START "system\n");
		if (r->n_msgs && r->msgs[0].role == CHAT_SYSTEM) {
			sb_add(b, r->msgs[0].content, r->msgs[0].content_len);
			sb_adds(b, "\n\n");
			i = 1;
		}
		render_tools(b, r, &t);
		sb_adds(b, IM_END);
	}
	for (; i < r->n_msgs; i++) {
		const struct chat_msg *m = &r->msgs[i];

		switch (m->role) {
		case CHAT_SYSTEM:
			render_turn(b, "system", m->content, m->content_len);
			break;
		case CHAT_USER:
			render_turn(b, "user", m->content, m->content_len);
			break;
		case CHAT_ASSISTANT:
			sb_adds(b, IM_START "assistant\n");
			sb_add(b, m->content, m->content_len);
			for (size_t k = 0; k < m->n_calls; k++) {
				if (k > 0 || m->content_len > 0)
					sb_adds(b, TC_SEP);
				tc_render_call(b, &t, m->calls[k].name,
					       m->calls[k].arguments,
					       m->calls[k].arguments_len);
			}
			sb_adds(b, IM_END);
			break;
		case CHAT_TOOL:
			sb_adds(b, IM_START "tool\n<tool_response>\n");
			sb_add(b, m->content, m->content_len);
			sb_adds(b, "\n</tool_response>" IM_END);
			break;
		}
	}
	sb_adds(b, IM_START "assistant\n");
	return b->oom ? -ENOMEM : 0;
}
