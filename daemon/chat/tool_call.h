/* SPDX-License-Identifier: MIT */
/*
 * tool_call.h - tool calls in generated text, split from the content as
 * the model's family writes them (the template given to tc_stream_init
 * and tc_parse says which). The Hermes/Qwen syntax:
 *
 *   content\n<tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 *
 * (tags configurable for the chatml family). One streaming parser serves
 * both the batch and the SSE paths, so a response reads the same whichever
 * way it was asked for.
 *
 * How generated text splits into content and calls: the text is segments
 * S0 C1 S1 C2 ... Ck Sk where each Ci is a call block. Two ways a block
 * becomes a call:
 *  - streamed: the block starts exactly as the canonical form does,
 *    open tag, "\n{\"name\": \"NAME\", \"arguments\": {" with a valid NAME
 *    ([A-Za-z0-9_-]{1,64}), or in any JSON spacing where the decoder
 *    holds the calls to the tool grammar (tc_stream_constrained). The
 *    call is announced there and its arguments
 *    are passed on as they are generated, up to the "}" closing the
 *    arguments object (strings and nesting tracked); then whitespace, "}",
 *    whitespace and the close tag end the block. If something else follows
 *    the arguments, the call still ends there and that text is content;
 *    if the text ends inside the arguments (max_tokens), the call ends with
 *    the arguments generated so far.
 *  - whole: any other block is checked when its close tag arrives: one JSON
 *    object with exactly the keys "name" (valid) and "arguments" (an
 *    object), any spacing and order; it is then announced with its
 *    arguments in one piece. Anything else between the tags (bad JSON,
 *    extra keys, a block never closed, a block over TC_MAX_BLOCK) stays in
 *    the content verbatim.
 * Content = S0 and every later segment that is not all whitespace, each
 * minus one trailing "\n" when a call follows it. Arguments are the exact
 * bytes generated for the "arguments" value.
 *
 * The canonical form is what tc_render_call() and the chat template write
 * back for an assistant message: content, "\n" if there is content and a
 * call, then the calls joined by "\n". Text the model generated in that
 * form renders back byte for byte (tc_result.canonical), which is what
 * keeps the orchestrator's prefix reuse intact across tool turns.
 */
#ifndef KVD_CHAT_TOOL_CALL_H
#define KVD_CHAT_TOOL_CALL_H

#include <stddef.h>

#include "strbuf.h"

struct chat_template;

#define TC_DEFAULT_OPEN "<tool_call>"
#define TC_DEFAULT_CLOSE "</tool_call>"
#define TC_MAX_TAG 64			/* bytes per tag */
#define TC_MAX_BLOCK (256 * 1024)	/* bytes between the tags */
#define TC_MAX_NAME 64			/* OpenAI's limit on function names */
#define TC_ID_LEN 29			/* "call_" + 24 characters */

struct tc_tags {
	const char *open;
	const char *close;
};

/* A tool name as OpenAI allows it: [A-Za-z0-9_-]{1,64}. */
int tc_valid_name(const char *s, size_t len);
/* A fresh "call_" id (TC_ID_LEN characters + NUL) from getrandom(). */
void tc_make_id(char out[TC_ID_LEN + 1]);

/* Hermes syntax: the canonical text of one call (no separators). */
void tc_render_call(struct strbuf *b, const struct tc_tags *t,
		    const char *name, const char *args, size_t args_len);

/* Separator between content and the first call, and between calls. */
#define TC_SEP "\n"

struct tc_call {
	char id[TC_ID_LEN + 1];
	const char *name;	/* owned by the parser's result */
	const char *arguments;
	size_t arguments_len;
};

/* Streaming: text in, content and calls out, in order. */
enum tc_event {
	TC_CONTENT,		/* text, len: content */
	TC_CALL_START,		/* call: id and name (arguments not set) */
	TC_CALL_ARGS,		/* text, len: the next piece of its arguments */
	TC_CALL_END,		/* the call is complete */
	TC_REASONING,		/* text, len: reasoning (tc_stream_reasoning) */
};
typedef int (*tc_emit_fn)(void *ctx, enum tc_event ev, const char *text,
			  size_t len, const struct tc_call *call);

enum tc_phase { TC_OUT, TC_HEAD, TC_ARGS, TC_TAIL, TC_WHOLE };

/* How a family writes its calls (tool_call.c: Hermes; tool_call_tail.c:
 * the syntaxes whose calls end the reply). */
enum tc_syntax {
	TC_SYN_HERMES,		/* <tool_call>\n{"name": N, "arguments": A}\n</tool_call> */
	TC_SYN_LLAMA3,		/* the reply is {"name": N, "parameters": A} */
	TC_SYN_MISTRAL_JSON,	/* [TOOL_CALLS][{"name": N, "arguments": A, "id": I}, ...] */
	TC_SYN_MISTRAL_ARGS,	/* [TOOL_CALLS]N[CALL_ID]I[ARGS]A..., or without [CALL_ID] */
};

struct tc_stream {
	const struct chat_template *t;
	enum tc_syntax syn;
	struct tc_tags tags;
	tc_emit_fn emit;
	void *ctx;
	struct strbuf hold;	/* outside a block: not yet emitted */
	struct strbuf ws;	/* whitespace before an open tag */
	struct strbuf block;	/* inside a block: after the open tag */
	enum tc_phase phase;
	int depth, in_str, esc;	/* scanning streamed arguments */
	int seg_nonws;		/* this segment emitted non-whitespace */
	size_t n_calls;
	int err;		/* first error from emit or allocation */
	/* a leading think block (qwen3): 0 undecided, 1 inside, 2 past it
	 * (or none), 3 dropping the newlines after it; emitted as
	 * TC_REASONING only when asked for */
	int think, think_state, reasoning, think_text;
	struct strbuf think_hold;
	int no_calls;		/* tc_stream_calls(s, 0): all text is content */
	int loose;		/* tc_stream_constrained(s, 1) */
	/* tc_stream_forced: the call the reply must open with, announced
	 * at its first text (1), then met in the text (2) */
	const char *forced;
	int forced_said;
	/* the syntaxes whose calls end the reply (tool_call_tail.c) */
	int tail_final;		/* no more calls: the rest is content */
	int tail_nonws;		/* llama3: content seen before any call */
	size_t tail_scan;	/* bytes of block already scanned */
};

/* The template is the model's (chat.h); it outlives the stream. */
void tc_stream_init(struct tc_stream *s, const struct chat_template *t,
		    tc_emit_fn emit, void *ctx);
/* Families that think (qwen3): the reasoning block leading the reply is
 * split off as TC_REASONING events instead of staying in the content
 * (the default: the text the template reads back). Before any feed. */
void tc_stream_reasoning(struct tc_stream *s, int on);
/* Whether calls are looked for at all (default 1). 0 for a request
 * without tools: the text after the think block is content, whatever it
 * spells. Before any feed. */
void tc_stream_calls(struct tc_stream *s, int on);
/* The decoder holds every call to the tool grammar (a request with
 * tools): a Hermes block whose head reads {"name": NAME, "arguments": {
 * in any JSON spacing is streamed, not only the canonical one. Text not
 * held to the grammar keeps the stricter rule above: a block in another
 * spacing is checked whole. Before any feed. */
void tc_stream_constrained(struct tc_stream *s, int on);
/* The decoder holds the reply to open with a call of NAME (tool_choice
 * naming it, the Hermes syntax): its TC_CALL_START (id and name) goes
 * out as soon as the reply's first text other than whitespace opens the
 * tag, not once the model has written the name, so a client sees the
 * call begin at the first token. The
 * model's own head then starts nothing new; a reply cut before its
 * arguments ends the announced call with none. NAME outlives the
 * stream. Other syntaxes: no effect. Before any feed. */
void tc_stream_forced(struct tc_stream *s, const char *name);
/* 0, or the first negative error (emit's, or -ENOMEM) */
int tc_stream_feed(struct tc_stream *s, const char *text, size_t len);
int tc_stream_finish(struct tc_stream *s);
void tc_stream_free(struct tc_stream *s);

/* Batch: the whole text at once (reasoning stays in the content). */
struct tc_result {
	char *content;		/* NUL-terminated, never NULL on success */
	size_t content_len;
	struct tc_call *calls;
	size_t n_calls;
	int canonical;		/* re-rendering gives the text back exactly */
	/* the reasoning split off (tc_stream_reasoning); tc_parse leaves it
	 * NULL (it keeps the reasoning in the content) and never frees it */
	const char *reasoning;
	size_t reasoning_len;
};

int tc_parse(const struct chat_template *t, const char *text, size_t len,
	     struct tc_result *r);
void tc_result_free(struct tc_result *r);
/* Hermes syntax: the canonical assistant text for content + calls (the
 * chat template's assistant body). */
void tc_render_body(struct strbuf *b, const struct tc_tags *t,
		    const char *content, size_t content_len,
		    const struct tc_call *calls, size_t n_calls);

#endif
