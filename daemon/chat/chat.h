/* SPDX-License-Identifier: MIT */
/*
 * chat.h - model families: how a conversation becomes the prompt text a
 * model was trained on (its chat template), and how the text it generates
 * splits back into content and tool calls (its tool-call syntax). One room
 * shared by every API front end (Chat Completions, Responses, Messages)
 * and by the orchestrator's agent loop; it knows no HTTP, no JSON wire
 * format of any API and no tokens. See Documentation/chat.md.
 *
 * A front end parses its request into the normalized conversation below
 * (struct chat_conv: system, user, assistant with text and tool calls,
 * tool results with their call ids, plus the declared tools), then
 *
 *	struct chat_prompt p = { 0 };
 *	if (chat_render(tmpl, &conv, &p, err, sizeof(err)))   -> 400 (err)
 *	... submit p.text (and p.plain) to the orchestrator ...
 *	tc_stream_init(&ts, tmpl, emit, ctx);                   (tool_call.h)
 *	... feed the generated text, get content and calls back ...
 *
 * The template (struct chat_template) is chosen once per model from the
 * GGUF's tokenizer.chat_template (chat_template_new) and is immutable:
 * any number of threads may use it.
 *
 * Rendering is append-only across turns (the prefix-reuse guarantee): the
 * prompt of turn N plus the text the model generated for it is a byte
 * prefix of the prompt of turn N+1, where the family's template allows it
 * (Documentation/chat.md says where a family's own template re-renders
 * earlier text, and how far the common prefix then reaches).
 */
#ifndef KVD_CHAT_H
#define KVD_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "strbuf.h"
#include "tool_call.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the normalized conversation ------------------------------------ */

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

struct chat_call {
	const char *id;			/* the call's id (tool results name it) */
	const char *name;		/* [A-Za-z0-9_-]{1,64} */
	const char *arguments;		/* a JSON object's text, verbatim */
	size_t arguments_len;
};

struct chat_msg {
	enum chat_role role;
	const char *content;		/* "" when none */
	size_t content_len;
	struct chat_call *calls;	/* assistant */
	size_t n_calls;
	const char *tool_call_id;	/* tool: the call it answers */
	/* assistant: its reasoning ("reasoning_content"), NULL when not
	 * given (families that think then read it from the content) */
	const char *reasoning;
	size_t reasoning_len;
};

struct chat_tool {
	const char *name;
	json_t *function;		/* {name, description, parameters, ...} */
};

/* Families that think (qwen3): whether the reply may reason first. */
enum chat_thinking {
	CHAT_THINK_DEFAULT = 0,		/* the template's default (it may) */
	CHAT_THINK_OFF,			/* the reply opens after an empty think block */
	CHAT_THINK_ON,
};

struct chat_conv {
	const struct chat_msg *msgs;
	size_t n_msgs;
	const struct chat_tool *tools;
	size_t n_tools;
	enum chat_thinking thinking;
	/* the time the date some templates write is taken from (Unix
	 * seconds, local time); 0: now */
	int64_t now;
};

/* ---- the rendered prompt --------------------------------------------- */

/* A byte range of a prompt's text. */
struct chat_span {
	size_t off, len;
};

/*
 * The prompt text, and the ranges of it that hold text from outside the
 * template (message content, tool declarations, call arguments, tool
 * output): those are tokenized as plain text, never as special tokens, so
 * a client or a tool cannot forge a turn by writing a marker. Everything
 * else is the template's own text. Allocation failure is sticky (oom).
 */
struct chat_prompt {
	struct strbuf text;
	struct chat_span *plain;	/* in order, not overlapping */
	size_t n_plain, cap_plain;
	int oom;
};

void chat_prompt_free(struct chat_prompt *p);
/* The template's own text (markup). */
void chat_markup(struct chat_prompt *p, const char *s);
void chat_markup_n(struct chat_prompt *p, const char *s, size_t n);
/* Text from outside the template (recorded as a plain span). */
void chat_plain(struct chat_prompt *p, const char *s, size_t n);
/* The template's markup: the complement of the plain spans, in order.
 * Writes at most max spans to out; returns how many there are. */
size_t chat_prompt_markup(const struct chat_prompt *p, struct chat_span *out, size_t max);

/* ---- templates --------------------------------------------------------- */

struct chat_template;

/* What the operator may set ([model] chat_template); NULL means "auto". */
struct chat_options {
	const char *choice;		/* "auto" or a family's name */
	const char *tool_open;		/* chatml only: tags around a call */
	const char *tool_close;		/* (NULL: <tool_call> </tool_call>) */
};

/*
 * The template for a model whose GGUF says tokenizer.chat_template = tmpl
 * (len bytes; NULL when the file has none). "auto" recognises the family
 * by the markers its template writes; a file without a template is ChatML
 * (llama.cpp's default too); a template of no known family is refused
 * (-EINVAL, err says which families exist and how to force one). 0 and
 * *out, -EINVAL, or -ENOMEM.
 */
int chat_template_new(const char *tmpl, size_t len, const struct chat_options *o,
		      struct chat_template **out, char *err, size_t errlen);
void chat_template_free(struct chat_template *t);

/* The family's name ("chatml"); how it was chosen, for the startup log. */
const char *chat_template_family(const struct chat_template *t);
const char *chat_template_why(const struct chat_template *t);
/* The text of the token that ends an assistant turn ("<|im_end|>"). */
const char *chat_template_eot(const struct chat_template *t);
/* How the family writes tool calls (tool_call.h). */
enum tc_syntax chat_template_syntax(const struct chat_template *t);
/* 1 when the family's replies may open with a reasoning block (qwen3's
 * <think>...</think>): tc_stream_reasoning() splits it off. */
int chat_template_thinks(const struct chat_template *t);

/*
 * What the structured decoder needs to write the family's calls (the
 * engine's struct kvc_call_syntax has the same members): Hermes families
 * give their tags (hermes set); the others the whole shape. A NULL-
 * terminated list of the markers a parser must see in generated text
 * (control tokens the tokenizer must show: "[TOOL_CALLS]"), and of the
 * tokens that end a turn ("<|eot_id|>", "<|eom_id|>").
 */
struct chat_call_grammar {
	int hermes;
	const char *open, *close;	/* hermes: the tags */
	const char *list_open, *list_sep, *list_close;
	const char *call_open, *call_close;
	int name_args;
	const char *args_key;
	int id;
	const char *id_mark, *args_mark;
	const char *trigger;
	int anchored;
	unsigned max_calls;		/* the syntax's own bound; 0: none */
	/* a block the reply may open with in which calls are not looked for
	 * (qwen3's "<think>" ... "</think>"); NULL: none */
	const char *skip_open, *skip_close;
};
void chat_template_grammar(const struct chat_template *t, struct chat_call_grammar *g);
const char *const *chat_template_markers(const struct chat_template *t);
const char *const *chat_template_eog(const struct chat_template *t);
/* The names families go by, for messages ("chatml, ..."). */
const char *chat_families(void);

/*
 * A tool every family can declare and the decoder can call: its
 * "parameters", when given, a JSON Schema of type object (OpenAI's rule;
 * a schema without "type" is taken as an object). 0, or -EINVAL with
 * err in OpenAI's words: "Invalid schema for function 'NAME': schema must
 * be a JSON Schema of 'type: "object"', got 'type: "integer"'."
 */
int chat_tool_check(const struct chat_tool *t, char *err, size_t errlen);
/* The same for a schema on its own (NULL or JSON null: none), as the
 * front ends whose tools carry it elsewhere (Anthropic's input_schema). */
int chat_parameters_check(const char *name, const json_t *parameters, char *err,
			  size_t errlen);

/*
 * Appends the prompt for c (its messages, then the generation prompt that
 * opens the assistant's reply) to out. 0; -ENOMEM; -EINVAL with err when
 * the conversation is one the family's template cannot express.
 */
int chat_render(const struct chat_template *t, const struct chat_conv *c,
		struct chat_prompt *out, char *err, size_t errlen);

/* One result of a server-side tool (the agent loop). */
struct chat_tool_result {
	const char *call_id;		/* may be NULL */
	const char *name;
	const char *output;
	size_t output_len;
};

/*
 * The agent loop's continuation: what the template renders after an
 * assistant reply that ended in these calls (the end of the assistant's
 * turn), the results as tool turns, and the generation prompt of the next
 * reply. Appended to out; 0 or -ENOMEM.
 */
int chat_render_tool_round(const struct chat_template *t,
			   const struct chat_tool_result *r, size_t n,
			   struct chat_prompt *out);

/*
 * The calls in generated text (the whole reply so far): how many, and the
 * first one's name copied to name (NUL-terminated; "" when none). For
 * the scheduler's tool-wait class. -ENOMEM.
 */
int chat_count_calls(const struct chat_template *t, const char *text,
		     size_t len, char *name, size_t name_size);

#ifdef __cplusplus
}
#endif

#endif
