// SPDX-License-Identifier: MIT
/*
 * fuzz_chat - libFuzzer harness over what untrusted bytes reach in the
 * model families' room (daemon/chat/): generated text (a model steered by
 * a prompt injection writes whatever it is told) through every family's
 * tool-call parser, and a GGUF's tokenizer.chat_template (a file from a
 * model hub) through family recognition, the template scanner (default
 * system messages) and rendering. Built with clang
 * -fsanitize=fuzzer,address,undefined (make fuzz-chat); beyond the
 * sanitizers' reports it checks:
 *
 *  - the stream fed in pieces of sizes the input picks gives what it gives
 *    fed whole (content, reasoning, names, arguments, in order; every
 *    event well formed, calls opened and closed in turn, ids of the
 *    family's shape);
 *  - text tc_parse() calls canonical renders back byte for byte: the
 *    prompt before the reply + the reply + the end of turn is a prefix of
 *    the prompt after it (a tool round answering its calls; a new user
 *    turn for the families whose templates keep earlier turns as they
 *    were), the prefix-reuse guarantee of Documentation/chat.md;
 *  - a template, recognised or forced as each family, renders a
 *    conversation with tools and a tool round, or refuses it with a
 *    reason (never an empty one).
 *
 * Input: byte 0: bits 0-2 the family (0-6 parse generated text; 7: the
 * rest is a template), bit 3 the reasoning split; bytes 1-2 a seed for
 * the piece sizes; the rest the text.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat.h"

static const char *const families[] = { "chatml", "qwen2.5", "qwen3", "llama3",
					"mistral-v3", "mistral-v7", "mistral-v11" };
#define N_FAMILIES 7
#define NOW 1767225600	/* 2026-01-01: the date some templates write, fixed */

static struct chat_template *forced[N_FAMILIES];
static json_t *tool_fn;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	json_error_t je;

	(void)argc;
	(void)argv;
	for (size_t i = 0; i < N_FAMILIES; i++) {
		struct chat_options o = { families[i], NULL, NULL };
		char err[300];

		if (chat_template_new(NULL, 0, &o, &forced[i], err, sizeof(err))) {
			fprintf(stderr, "fuzz_chat: %s: %s\n", families[i], err);
			abort();
		}
	}
	tool_fn = json_loads("{\"name\": \"get_weather\", \"description\": \"Weather.\", "
			     "\"parameters\": {\"type\": \"object\", \"properties\": "
			     "{\"city\": {\"type\": \"string\"}}}}", 0, &je);
	assert(tool_fn);
	return 0;
}

static uint32_t next_rand(uint32_t *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

/* ---- the stream, whole and in pieces ---- */

struct seen {
	const char *family;
	struct strbuf content, reasoning, calls;	/* calls: "id name\targs\n" */
	int in_call;
	size_t n_calls;
};

static int ok_id(const char *family, const char *id)
{
	size_t n = strlen(id);

	if (!strncmp(family, "mistral", 7)) {
		if (n != 9)
			return 0;
		for (size_t i = 0; i < n; i++)
			if (!isalnum((unsigned char)id[i]))
				return 0;
		return 1;
	}
	return n == TC_ID_LEN && !strncmp(id, "call_", 5);
}

static int seen_emit(void *ctx, enum tc_event ev, const char *text, size_t len,
		     const struct tc_call *call)
{
	struct seen *s = ctx;

	switch (ev) {
	case TC_CONTENT:
		assert(len > 0 && !s->in_call);
		sb_add(&s->content, text, len);
		break;
	case TC_REASONING:
		assert(len > 0 && !s->in_call);
		sb_add(&s->reasoning, text, len);
		break;
	case TC_CALL_START:
		assert(!s->in_call && call && ok_id(s->family, call->id));
		assert(tc_valid_name(call->name, strlen(call->name)));
		s->in_call = 1;
		sb_adds(&s->calls, call->name);
		sb_adds(&s->calls, "\t");
		break;
	case TC_CALL_ARGS:
		assert(len > 0 && s->in_call);
		sb_add(&s->calls, text, len);
		break;
	case TC_CALL_END:
		assert(s->in_call);
		s->in_call = 0;
		s->n_calls++;
		sb_adds(&s->calls, "\n");
		break;
	}
	return 0;
}

static void stream(const struct chat_template *t, int reasoning, const char *text,
		   size_t len, uint32_t seed, struct seen *out)
{
	struct tc_stream s;
	size_t at = 0;

	memset(out, 0, sizeof(*out));
	out->family = chat_template_family(t);
	tc_stream_init(&s, t, seen_emit, out);
	tc_stream_reasoning(&s, reasoning);
	while (at < len) {
		size_t n = seed ? 1 + next_rand(&seed) % 64 : len;

		if (n > len - at)
			n = len - at;
		assert(tc_stream_feed(&s, text + at, n) == 0);
		at += n;
	}
	assert(tc_stream_finish(&s) == 0);
	assert(!out->in_call);
	tc_stream_free(&s);
}

static int sb_eq(const struct strbuf *a, const struct strbuf *b)
{
	return a->len == b->len && (!a->len || !memcmp(a->s, b->s, a->len));
}

static void seen_free(struct seen *s)
{
	sb_free(&s->content);
	sb_free(&s->reasoning);
	sb_free(&s->calls);
}

/* ---- rendering back ---- */

static char *render(const struct chat_template *t, const struct chat_msg *m, size_t n,
		    size_t *len, int *refused)
{
	struct chat_tool tool = { "get_weather", tool_fn };
	struct chat_conv c = { m, n, &tool, 1, CHAT_THINK_DEFAULT, NOW };
	struct chat_prompt p = { 0 };
	char err[300] = "", *s;
	int rc = chat_render(t, &c, &p, err, sizeof(err));

	assert(rc == 0 || rc == -EINVAL);
	assert(rc == 0 || err[0]);		/* a refusal says why */
	*refused = rc != 0;
	if (rc) {
		chat_prompt_free(&p);
		return NULL;
	}
	/* the plain spans lie in the text, in order */
	for (size_t i = 0, end = 0; i < p.n_plain; i++) {
		assert(p.plain[i].off >= end && p.plain[i].len <= p.text.len - p.plain[i].off);
		end = p.plain[i].off + p.plain[i].len;
	}
	s = sb_steal(&p.text, len);
	chat_prompt_free(&p);
	assert(s);
	return s;
}

/* Families whose templates write an earlier plain turn back as it was
 * (Documentation/chat.md, "Byte stability across turns"). */
static int user_turn_stable(const char *family)
{
	return !strcmp(family, "chatml") || !strcmp(family, "qwen2.5") ||
	       !strcmp(family, "llama3") || !strcmp(family, "mistral-v11");
}

static void check_canonical(const struct chat_template *t, const char *text, size_t len)
{
	struct chat_msg m[2 + 8] = { 0 };
	struct chat_call calls[8];
	struct tc_result r;
	char *before, *after;
	size_t blen, alen, n = 2;
	const char *eot = chat_template_eot(t);
	int refused;

	assert(tc_parse(t, text, len, &r) == 0);
	if (!r.canonical || r.n_calls > 8 || (!r.n_calls && !user_turn_stable(chat_template_family(t)))) {
		tc_result_free(&r);
		return;
	}
	m[0] = (struct chat_msg){ .role = CHAT_USER, .content = "Weather in Paris?", .content_len = 17 };
	before = render(t, m, 1, &blen, &refused);
	assert(before);
	/* sent back as a client does: content and calls with their ids */
	m[1] = (struct chat_msg){ .role = CHAT_ASSISTANT, .content = r.content,
				  .content_len = r.content_len, .calls = calls, .n_calls = r.n_calls };
	for (size_t i = 0; i < r.n_calls; i++)
		calls[i] = (struct chat_call){ r.calls[i].id, r.calls[i].name, r.calls[i].arguments,
					       r.calls[i].arguments_len };
	for (size_t i = 0; i < r.n_calls; i++)
		m[n++] = (struct chat_msg){ .role = CHAT_TOOL, .content = "18C", .content_len = 3,
					    .tool_call_id = r.calls[i].id };
	if (!r.n_calls)
		m[n++] = (struct chat_msg){ .role = CHAT_USER, .content = "And in Nice?", .content_len = 12 };
	after = render(t, m, n, &alen, &refused);
	if (after) {
		size_t el = strlen(eot);
		int prefix = alen >= blen + len + el && !memcmp(after, before, blen) &&
			     !memcmp(after + blen, text, len) && !memcmp(after + blen + len, eot, el);

		if (!prefix) {
			fprintf(stderr, "fuzz_chat: %s: canonical reply not rendered back:\n"
				"--- before + reply:\n%s%.*s%s\n--- after:\n%s\n",
				chat_template_family(t), before, (int)len, text, eot, after);
			abort();
		}
	}
	free(before);
	free(after);
	tc_result_free(&r);
}

static void parse_generated(const struct chat_template *t, int reasoning, uint32_t seed,
			    const char *text, size_t len)
{
	struct seen whole, pieces;

	stream(t, reasoning, text, len, 0, &whole);
	stream(t, reasoning, text, len, seed | 1, &pieces);
	if (!sb_eq(&whole.content, &pieces.content) || !sb_eq(&whole.reasoning, &pieces.reasoning) ||
	    !sb_eq(&whole.calls, &pieces.calls) || whole.n_calls != pieces.n_calls) {
		fprintf(stderr, "fuzz_chat: %s: streamed in pieces differs from whole:\n"
			"content %zu/%zu, reasoning %zu/%zu, calls %zu/%zu\n", whole.family,
			whole.content.len, pieces.content.len, whole.reasoning.len,
			pieces.reasoning.len, whole.n_calls, pieces.n_calls);
		fprintf(stderr, "--- whole:\n%.*s\n%.*s\n--- in pieces:\n%.*s\n%.*s\n",
			(int)whole.content.len, whole.content.s ? whole.content.s : "",
			(int)whole.calls.len, whole.calls.s ? whole.calls.s : "",
			(int)pieces.content.len, pieces.content.s ? pieces.content.s : "",
			(int)pieces.calls.len, pieces.calls.s ? pieces.calls.s : "");
		abort();
	}
	seen_free(&whole);
	seen_free(&pieces);
	check_canonical(t, text, len);
}

/* ---- a template from a file ---- */

static void use_template(const char *text, size_t len)
{
	static const struct chat_call call = { "call_aaaaaaaaaaaaaaaaaaaaaaaa", "get_weather",
					       "{\"city\": \"Paris\"}", 17 };
	struct chat_msg m[4] = {
		{ .role = CHAT_SYSTEM, .content = "Be terse.", .content_len = 9 },
		{ .role = CHAT_USER, .content = "Weather in Paris?", .content_len = 17 },
		{ .role = CHAT_ASSISTANT, .content = "", .calls = (struct chat_call *)&call, .n_calls = 1 },
		{ .role = CHAT_TOOL, .content = "18C", .content_len = 3, .tool_call_id = call.id },
	};

	for (int i = -1; i < N_FAMILIES; i++) {
		struct chat_options o = { i < 0 ? "auto" : families[i], NULL, NULL };
		struct chat_template *t = NULL;
		char err[400] = "", *s;
		size_t n;
		int refused, rc = chat_template_new(text, len, &o, &t, err, sizeof(err));

		assert(rc == 0 || rc == -EINVAL);
		if (rc) {
			assert(i < 0 && err[0] && !t);	/* only "auto" refuses */
			continue;
		}
		assert(chat_template_family(t) && chat_template_why(t));
		for (size_t k = 1; k <= 4; k++) {
			s = render(t, m, k, &n, &refused);
			free(s);
		}
		chat_template_free(t);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned fam;
	uint32_t seed;
	const char *text = (const char *)data + 3;

	if (size < 3)
		return 0;
	fam = data[0] & 7;
	seed = (uint32_t)data[1] << 8 | data[2];
	if (fam == 7)
		use_template(text, size - 3);
	else
		parse_generated(forced[fam], (data[0] >> 3) & 1, seed, text, size - 3);
	return 0;
}
