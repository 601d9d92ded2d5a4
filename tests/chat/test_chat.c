// SPDX-License-Identifier: MIT
/*
 * test_chat.c - unit tests of the model families' room (daemon/chat):
 * choosing a family, rendering conversations (exact text, byte stability
 * across turns), tool-call parsing (batch, and streaming split at every
 * byte). Conversations are written as OpenAI-style JSON and turned into
 * the room's normalized conversation here, as a front end would. CUnit,
 * built with ASan/UBSan.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <jansson.h>

#include "chat.h"
#include "chat_internal.h"	/* chat_tojson: the templates' tojson */
#include "jconv.h"

static struct chat_template *tmpl;	/* ChatML, as the test models' */

/* ---------------------------------------------------------------- chatml */

/* Appends a message (JSON text) to a growing conversation. */
struct conv {
	struct strbuf msgs;
	const char *tools;	/* "" or ",\"tools\":[...]" */
};

static char *conv_render(struct conv *c)
{
	struct strbuf b = { 0 };
	char *s;

	sb_adds(&b, "{\"messages\":[");
	sb_add(&b, c->msgs.s, c->msgs.len);
	sb_adds(&b, "]");
	sb_adds(&b, c->tools);
	sb_adds(&b, "}");
	s = render_json(tmpl, sb_cstr(&b));
	sb_free(&b);
	return s;
}

static void conv_add(struct conv *c, const char *msg_json)
{
	if (c->msgs.len)
		sb_adds(&c->msgs, ",");
	sb_adds(&c->msgs, msg_json);
}

/* The assistant message a client sends back for generated text: content
 * and tool calls exactly as a response carried them. */
static void conv_add_reply(struct conv *c, const char *generated)
{
	struct tc_result tr;
	json_t *m, *calls;
	char *s;

	CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, generated, strlen(generated), &tr), 0);
	CU_ASSERT(tr.canonical);
	m = json_pack("{s:s, s:o}", "role", "assistant", "content",
		      tr.n_calls && !tr.content_len ? json_null() :
		      json_stringn(tr.content, tr.content_len));
	if (tr.n_calls) {
		calls = json_array();
		for (size_t i = 0; i < tr.n_calls; i++)
			json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}",
				"id", tr.calls[i].id, "type", "function", "function",
				"name", tr.calls[i].name, "arguments", tr.calls[i].arguments));
		json_object_set_new(m, "tool_calls", calls);
	}
	s = json_dumps(m, JSON_COMPACT);
	conv_add(c, s);
	free(s);
	json_decref(m);
	tc_result_free(&tr);
}

static const char *last_call_id(struct conv *c, int back)
{
	static char id[64];
	const char *p = c->msgs.s + c->msgs.len;

	for (int i = 0; i <= back; i++) {
		p = memmem(c->msgs.s, (size_t)(p - c->msgs.s), "\"call_", 6);
		while (p) {
			const char *q = memmem(p + 1, c->msgs.len - (size_t)(p + 1 - c->msgs.s), "\"call_", 6);

			if (!q || q >= c->msgs.s + c->msgs.len)
				break;
			p = q;
		}
	}
	snprintf(id, sizeof(id), "%.*s", TC_ID_LEN, p + 1);
	return id;
}

/* Turn N's prompt + the generated text is a byte prefix of turn N+1's
 * prompt, whatever the client appends; and the generated text reappears
 * exactly (the assistant turn renders back to what the model wrote). */
static void check_turn(struct conv *c, const char *generated,
		       const char *const *then, size_t n_then)
{
	char *before = conv_render(c), *after;
	struct strbuf want = { 0 };

	CU_ASSERT_PTR_NOT_NULL_FATAL(before);
	conv_add_reply(c, generated);
	for (size_t i = 0; i < n_then; i++) {
		char msg[512];

		if (strstr(then[i], "%s"))
			snprintf(msg, sizeof(msg), then[i], last_call_id(c, (int)(n_then - 1 - i)));
		else
			snprintf(msg, sizeof(msg), "%s", then[i]);
		conv_add(c, msg);
	}
	after = conv_render(c);
	CU_ASSERT_PTR_NOT_NULL_FATAL(after);
	sb_adds(&want, before);
	sb_adds(&want, generated);
	sb_adds(&want, "<|im_end|>");
	if (strncmp(after, want.s, want.len))
		fprintf(stderr, "\nnot a prefix:\n--- want\n%s\n--- got\n%s\n", want.s, after);
	CU_ASSERT_EQUAL(strncmp(after, want.s, want.len), 0);
	sb_free(&want);
	free(before);
	free(after);
}

static void test_template_stable(void)
{
	const char *tools_decl = ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather \\u00e9t\\u00e9\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
				 "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"},\"n\":{\"type\":\"number\",\"default\":1.5}}}}}]";
	struct conv c = { .tools = tools_decl };
	const char *t1[] = { "{\"role\":\"user\",\"content\":\"and tomorrow?\"}" };
	const char *t2[] = { "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"{\\\"temp\\\": 21}\"}" };
	const char *t3[] = { "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"r1\"}",
			     "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"r2\"}",
			     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"thanks\"}]}" };
	const char *t4[] = { "{\"role\":\"system\",\"content\":\"late system note\"}",
			     "{\"role\":\"user\",\"content\":\"\\u65e5\\u672c\"}" };

	conv_add(&c, "{\"role\":\"system\",\"content\":\"You are terse.\"}");
	conv_add(&c, "{\"role\":\"user\",\"content\":\"weather in Paris?\"}");
	check_turn(&c, "Let me look.", t1, 1);
	check_turn(&c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", t2, 1);
	check_turn(&c, "Checking both.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a \\\"b\\\"\", \"n\": 2.50}}\n</tool_call>\n"
		   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Nice\"}}\n</tool_call>", t3, 3);
	check_turn(&c, "It is 21 \xc2\xb0" "C.\n\nBye \xf0\x9f\x91\x8b", t4, 2);
	check_turn(&c, "", t1, 1);
	sb_free(&c.msgs);

	/* without tools, without a system message */
	c.tools = "";
	conv_add(&c, "{\"role\":\"user\",\"content\":\"hi\"}");
	check_turn(&c, "hello", t1, 1);
	check_turn(&c, "<tool_call> not a call </tool_call>", t1, 1);
	sb_free(&c.msgs);
}

/* ---------------------------------------------------------------- tool calls */

struct tc_case {
	const char *text;
	const char *content;
	int n_calls;
	const char *name0, *args0;
	int canonical;
};

static const struct tc_case tc_cases[] = {
	{ "plain text", "plain text", 0, NULL, NULL, 1 },
	{ "", "", 0, NULL, NULL, 1 },
	{ "trailing ws \n\n", "trailing ws \n\n", 0, NULL, NULL, 1 },
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>",
	  "", 1, "f", "{\"a\": [1, {\"b\": \"}\"}]}", 1 },
	{ "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
	  "Sure.", 1, "f", "{}", 1 },
	{ "Sure.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
	  "Sure.\n", 1, "f", "{}", 1 },
	/* other spacing and key order: still a call, not canonical */
	{ "<tool_call>{\"arguments\":{\"x\":\"<tool_call>\"},\"name\":\"g-1\"}</tool_call>",
	  "", 1, "g-1", "{\"x\":\"<tool_call>\"}", 0 },
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\n<tool_call>\n{\"name\": \"h\", \"arguments\": {\"k\": null}}\n</tool_call>\n",
	  "", 2, "f", "{}", 0 },
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>",
	  "", 2, "f", "{}", 1 },
	/* text after a call stays content */
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.",
	  "\nDone.", 1, "f", "{}", 0 },
	/* a streamed call ends where its arguments end; what follows that is
	 * not "}" and the close tag is content */
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}\n</tool_call>",
	  "\n</tool_call>", 1, "f", "{}", 0 },
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>",
	  "} trailing\n</tool_call>", 1, "f", "{}", 0 },
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, \"]}\"]} }  \n</tool_call>\n",
	  "", 1, "f", "{\"x\": [1, \"]}\"]}", 0 },
	/* cut inside the arguments (max_tokens): the call has what was made */
	{ "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}\\\"{\", \"b\": [1",
	  "ok", 1, "f", "{\"a\": \"}\\\"{\", \"b\": [1", 0 },
	/* cut inside the call's closing syntax: those bytes are the call's */
	{ "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_ca",
	  "ok", 1, "f", "{\"a\": 1}", 0 },
	{ "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
	  "ok", 1, "f", "{\"a\": 1}", 0 },
	{ "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n",
	  "ok", 1, "f", "{\"a\": 1}", 0 },
	/* a canonical start with an invalid name is not streamed */
	{ "<tool_call>\n{\"name\": \"b@d\", \"arguments\": {}}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"b@d\", \"arguments\": {}}\n</tool_call>", 0, NULL, NULL, 1 },
	/* malformed blocks stay content, verbatim */
	{ "<tool_call>\n{\"name\": \"f\", \"arguments\": []}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"f\", \"arguments\": []}\n</tool_call>", 0, NULL, NULL, 1 },
	{ "x <tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
	  "x <tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>", 0, NULL, NULL, 1 },
	{ "<tool_call>{\"name\": \"bad name\", \"arguments\": {}}</tool_call>",
	  "<tool_call>{\"name\": \"bad name\", \"arguments\": {}}</tool_call>", 0, NULL, NULL, 1 },
	{ "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"extra\": 1}</tool_call>",
	  "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"extra\": 1}</tool_call>", 0, NULL, NULL, 1 },
	{ "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>",
	  "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>", 0, NULL, NULL, 1 },
	{ "a\n<tool_call>\n{\"name\": \"f\", \"argu",
	  "a\n<tool_call>\n{\"name\": \"f\", \"argu", 0, NULL, NULL, 1 },
	{ "a <tool_ca", "a <tool_ca", 0, NULL, NULL, 1 },
	{ "a </tool_call> b", "a </tool_call> b", 0, NULL, NULL, 1 },
	/* a malformed block then a good one */
	{ "<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"u\": \"\xc3\xa9\"}}\n</tool_call>",
	  "<tool_call>oops</tool_call>", 1, "f", "{\"u\": \"\xc3\xa9\"}", 1 },
};

struct collected {
	struct strbuf content;
	int n_calls;
	struct strbuf names, args, reasoning;
	int short_ids;		/* Mistral: 9-character ids */
};

static int collect(void *ctx, enum tc_event ev, const char *text, size_t len,
		   const struct tc_call *call)
{
	struct collected *c = ctx;

	switch (ev) {
	case TC_CONTENT:
		CU_ASSERT(len > 0);
		sb_add(&c->content, text, len);
		break;
	case TC_REASONING:
		CU_ASSERT(len > 0);
		sb_add(&c->reasoning, text, len);
		break;
	case TC_CALL_START:
		if (c->short_ids) {
			CU_ASSERT_EQUAL(strlen(call->id), 9);
		} else {
			CU_ASSERT_EQUAL(strlen(call->id), TC_ID_LEN);
			CU_ASSERT_EQUAL(strncmp(call->id, "call_", 5), 0);
		}
		sb_adds(&c->names, call->name);
		sb_adds(&c->names, "|");
		break;
	case TC_CALL_ARGS:
		CU_ASSERT(len > 0);
		sb_add(&c->args, text, len);
		break;
	case TC_CALL_END:
		sb_adds(&c->args, "|");
		c->n_calls++;
		break;
	}
	return 0;
}

/* stream_in: calls are not looked for (a request without tools) */
static int stream_no_calls;

static void stream_in(const struct chat_template *t, int reasoning, const char *text,
		      const size_t *cuts, size_t n_cuts, struct collected *out)
{
	struct tc_stream s;
	size_t at = 0, len = strlen(text);

	memset(out, 0, sizeof(*out));
	out->short_ids = !strncmp(chat_template_family(t), "mistral", 7);
	tc_stream_init(&s, t, collect, out);
	tc_stream_reasoning(&s, reasoning);
	tc_stream_calls(&s, !stream_no_calls);
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;

		CU_ASSERT_EQUAL(tc_stream_feed(&s, text + at, end - at), 0);
		at = end;
	}
	CU_ASSERT_EQUAL(tc_stream_finish(&s), 0);
	tc_stream_free(&s);
}

static void stream_pieces(const char *text, const size_t *cuts, size_t n_cuts,
			  struct collected *out)
{
	stream_in(tmpl, 0, text, cuts, n_cuts, out);
}

static void collected_free(struct collected *c)
{
	sb_free(&c->content);
	sb_free(&c->names);
	sb_free(&c->args);
	sb_free(&c->reasoning);
}

static void test_tool_calls_batch(void)
{
	for (size_t i = 0; i < sizeof(tc_cases) / sizeof(tc_cases[0]); i++) {
		const struct tc_case *k = &tc_cases[i];
		struct tc_result r;

		CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, k->text, strlen(k->text), &r), 0);
		if (strcmp(r.content, k->content) || (int)r.n_calls != k->n_calls ||
		    r.canonical != k->canonical)
			fprintf(stderr, "\ncase %zu: content '%s' calls %zu canonical %d\n",
				i, r.content, r.n_calls, r.canonical);
		CU_ASSERT_STRING_EQUAL(r.content, k->content);
		CU_ASSERT_EQUAL(r.content_len, strlen(k->content));
		CU_ASSERT_EQUAL((int)r.n_calls, k->n_calls);
		CU_ASSERT_EQUAL(r.canonical, k->canonical);
		if (k->n_calls) {
			CU_ASSERT_STRING_EQUAL(r.calls[0].name, k->name0);
			CU_ASSERT_STRING_EQUAL(r.calls[0].arguments, k->args0);
			CU_ASSERT_EQUAL(r.calls[0].arguments_len, strlen(k->args0));
		}
		tc_result_free(&r);
	}
}

/* Streaming gives the batch result however the text is cut: at every
 * single byte boundary, at every pair of boundaries (short texts), and
 * one byte at a time. */
static void test_tool_calls_stream(void)
{
	for (size_t i = 0; i < sizeof(tc_cases) / sizeof(tc_cases[0]); i++) {
		const char *text = tc_cases[i].text;
		size_t len = strlen(text);
		struct collected ref, got;
		size_t cuts[4096];

		stream_pieces(text, NULL, 0, &ref);
		CU_ASSERT_STRING_EQUAL(sb_cstr(&ref.content), tc_cases[i].content);
		for (size_t a = 0; a <= len; a++) {
			stream_pieces(text, &a, 1, &got);
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), sb_cstr(&ref.content));
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.names), sb_cstr(&ref.names));
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.args), sb_cstr(&ref.args));
			collected_free(&got);
			for (size_t b = a; len < 80 && b <= len; b++) {
				size_t two[2] = { a, b };

				stream_pieces(text, two, 2, &got);
				CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), sb_cstr(&ref.content));
				CU_ASSERT_STRING_EQUAL(sb_cstr(&got.args), sb_cstr(&ref.args));
				collected_free(&got);
			}
		}
		for (size_t a = 0; a < len && a < 4096; a++)
			cuts[a] = a + 1;
		stream_pieces(text, cuts, len < 4096 ? len : 4096, &got);
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), sb_cstr(&ref.content));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.names), sb_cstr(&ref.names));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.args), sb_cstr(&ref.args));
		collected_free(&got);
		collected_free(&ref);
	}
}

/* A canonical call is announced at its "arguments": { and its arguments
 * are passed on as they come, before the block closes. */
struct trace {
	int starts, args, ends;
	int args_before_end;
};

static int trace_emit(void *ctx, enum tc_event ev, const char *text,
		      size_t len, const struct tc_call *call)
{
	struct trace *t = ctx;

	(void)text;
	(void)len;
	(void)call;
	if (ev == TC_CALL_START)
		t->starts++;
	if (ev == TC_CALL_ARGS && !t->ends)
		t->args++;
	if (ev == TC_CALL_END)
		t->ends++;
	return 0;
}

static void test_tool_calls_incremental(void)
{
	const char *text = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"0123456789\"}}\n</tool_call>";
	const char *args = strstr(text, "{\"text");
	struct tc_stream st;
	struct trace t = { 0 };
	size_t i;

	tc_stream_init(&st, tmpl, trace_emit, &t);
	for (i = 0; text + i < args; i++)
		CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
	CU_ASSERT_EQUAL(t.starts, 0);	/* not before the arguments open */
	CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i++, 1), 0);
	CU_ASSERT_EQUAL(t.starts, 1);
	for (; text[i] != '}'; i++)
		CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
	/* every byte so far went out on its own, nothing held back */
	CU_ASSERT_EQUAL(t.args, (int)(text + i - args));
	CU_ASSERT_EQUAL(t.ends, 0);
	CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, strlen(text + i)), 0);
	CU_ASSERT_EQUAL(t.ends, 1);
	CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
	tc_stream_free(&st);
}

/* Calls held to the grammar (tc_stream_constrained) stream in any JSON
 * spacing: announced at the arguments' "{", the arguments passed on as
 * they come, and the same call as the whole check makes of the block. */
static void test_tool_calls_loose(void)
{
	static const char *const texts[] = {
		"<tool_call>{\"name\":\"write\",\"arguments\":{\"t\":\"}x\"}}</tool_call>",
		"<tool_call>\n{ \"name\" :\t\"write\" ,\r\n \"arguments\":  {\"t\": \"}x\"} }\n</tool_call>",
		"a\n<tool_call>{\n\"name\": \"write\", \"arguments\": {}}\n</tool_call>",
	};
	for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
		const char *text = texts[k], *args = strstr(text, "\"arguments\"");
		struct tc_stream st;
		struct trace t = { 0 };
		struct collected whole, loose;
		size_t i;
		int constrained;

		args = strchr(args, '{');
		for (constrained = 0; constrained < 2; constrained++) {
			memset(&t, 0, sizeof(t));
			tc_stream_init(&st, tmpl, trace_emit, &t);
			tc_stream_constrained(&st, constrained);
			for (i = 0; text + i <= args; i++)
				CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
			/* announced at the arguments' "{" only when held */
			CU_ASSERT_EQUAL(t.starts, constrained);
			CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, strlen(text + i)), 0);
			CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
			CU_ASSERT_EQUAL(t.starts, 1);
			CU_ASSERT_EQUAL(t.ends, 1);
			tc_stream_free(&st);
		}
		/* the same content and call, byte for byte */
		stream_pieces(text, NULL, 0, &whole);
		memset(&loose, 0, sizeof(loose));
		tc_stream_init(&st, tmpl, collect, &loose);
		tc_stream_constrained(&st, 1);
		for (i = 0; text[i]; i++)
			CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
		CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
		tc_stream_free(&st);
		CU_ASSERT_EQUAL(whole.n_calls, 1);
		CU_ASSERT_EQUAL(loose.n_calls, 1);
		CU_ASSERT_EQUAL(whole.content.len, loose.content.len);
		CU_ASSERT(!whole.content.len || !memcmp(whole.content.s, loose.content.s,
							 whole.content.len));
		CU_ASSERT_EQUAL(whole.args.len, loose.args.len);
		CU_ASSERT(whole.args.len && !memcmp(whole.args.s, loose.args.s, whole.args.len));
		CU_ASSERT_EQUAL(whole.names.len, loose.names.len);
		collected_free(&whole);
		collected_free(&loose);
	}
	/* a head past TC_MAX_HEAD's whitespace: checked whole, still a call */
	{
		struct strbuf b = { 0 };
		struct collected got;
		struct tc_stream st;

		sb_adds(&b, "<tool_call>{\"name\": \"f\",");
		for (int i = 0; i < 1024; i++)
			sb_adds(&b, " ");
		sb_adds(&b, "\"arguments\": {\"a\": 1}}</tool_call>");
		memset(&got, 0, sizeof(got));
		tc_stream_init(&st, tmpl, collect, &got);
		tc_stream_constrained(&st, 1);
		CU_ASSERT_EQUAL(tc_stream_feed(&st, b.s, b.len), 0);
		CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
		tc_stream_free(&st);
		CU_ASSERT_EQUAL(got.n_calls, 1);
		CU_ASSERT_EQUAL(got.content.len, 0);
		CU_ASSERT(got.args.len == 9 && !memcmp(got.args.s, "{\"a\": 1}|", 9));
		collected_free(&got);
		sb_free(&b);
	}
}

static struct chat_template *family(const char *name);

/* A call forced by name (tc_stream_forced) is announced with the reply's
 * first byte, once: the model's own head starts nothing more, the call
 * is the one the whole check makes of the text, and a reply cut inside
 * the head ends the announced call with no arguments and no content. */
static void test_tool_calls_forced(void)
{
	static const char *const texts[] = {
		"<tool_call>\n{\"name\": \"write\", \"arguments\": {\"t\": \"}x\"}}\n</tool_call>",
		"<tool_call>{ \"name\" : \"write\",\n\"arguments\":{}}</tool_call>",
		/* whitespace first (the grammar allows it): content, as before */
		"\r\t<tool_call>{\"name\": \"write\", \"arguments\": {}}</tool_call>",
		" \n<tool_call>{\"name\": \"write\", \"arguments\": {}}</tool_call>",
	};
	struct chat_template *q3 = family("qwen3");

	for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
		for (int think = 0; think < 2; think++) {
			const char *text = texts[k];
			struct collected whole, got;
			struct tc_stream st;
			struct trace t = { 0 };
			size_t i;

			tc_stream_init(&st, think ? q3 : tmpl, trace_emit, &t);
			tc_stream_constrained(&st, 1);
			tc_stream_reasoning(&st, think);
			tc_stream_forced(&st, "write");
			/* the first byte of the tag (qwen3 holds "<t" until it
			 * knows it is not "<think>") */
			i = strcspn(text, "<") + (think ? 3 : 1);
			CU_ASSERT_EQUAL(tc_stream_feed(&st, text, i), 0);
			CU_ASSERT_EQUAL(t.starts, 1);
			for (; text[i]; i++)
				CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
			CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
			CU_ASSERT_EQUAL(t.starts, 1);
			CU_ASSERT_EQUAL(t.ends, 1);
			tc_stream_free(&st);

			stream_in(think ? q3 : tmpl, think, text, NULL, 0, &whole);
			memset(&got, 0, sizeof(got));
			tc_stream_init(&st, think ? q3 : tmpl, collect, &got);
			tc_stream_constrained(&st, 1);
			tc_stream_reasoning(&st, think);
			tc_stream_forced(&st, "write");
			for (i = 0; text[i]; i++)
				CU_ASSERT_EQUAL(tc_stream_feed(&st, text + i, 1), 0);
			CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
			tc_stream_free(&st);
			CU_ASSERT_EQUAL(got.n_calls, 1);
			CU_ASSERT(got.content.len == whole.content.len &&
				  (!got.content.len ||
				   !memcmp(got.content.s, whole.content.s, got.content.len)));
			CU_ASSERT(got.names.len == 6 && !memcmp(got.names.s, "write|", 6));
			CU_ASSERT(got.args.len == whole.args.len &&
				  !memcmp(got.args.s, whole.args.s, whole.args.len));
			collected_free(&whole);
			collected_free(&got);
		}
	}
	/* cut inside the head (max_tokens): the announced call, ended */
	{
		struct collected got;
		struct tc_stream st;

		memset(&got, 0, sizeof(got));
		tc_stream_init(&st, tmpl, collect, &got);
		tc_stream_constrained(&st, 1);
		tc_stream_forced(&st, "write");
		CU_ASSERT_EQUAL(tc_stream_feed(&st, "<tool_call>\n{\"na", 16), 0);
		CU_ASSERT_EQUAL(tc_stream_finish(&st), 0);
		tc_stream_free(&st);
		CU_ASSERT_EQUAL(got.n_calls, 1);
		CU_ASSERT_EQUAL(got.content.len, 0);
		CU_ASSERT(got.names.len == 6 && !memcmp(got.names.s, "write|", 6));
		CU_ASSERT(got.args.len == 1 && got.args.s[0] == '|');
		collected_free(&got);
	}
	/* not Hermes: no effect (the llama3 reply is the call) */
	{
		struct chat_template *l3 = family("llama3");
		struct tc_stream st;

		tc_stream_init(&st, l3, collect, NULL);
		tc_stream_forced(&st, "write");
		CU_ASSERT_PTR_NULL(st.forced);
		tc_stream_free(&st);
		chat_template_free(l3);
	}
	chat_template_free(q3);
}

/* Configured tags, and a block over the size cap stays content. */
static void test_tool_calls_tags_and_cap(void)
{
	const struct chat_options o = { "chatml", "[CALL]", "[/CALL]" };
	const char *text = "hi\n[CALL]\n{\"name\": \"f\", \"arguments\": {}}\n[/CALL]";
	struct chat_template *t;
	struct tc_result r;
	struct strbuf big = { 0 };

	CU_ASSERT_EQUAL_FATAL(chat_template_new(NULL, 0, &o, &t, NULL, 0), 0);
	CU_ASSERT_EQUAL_FATAL(tc_parse(t, text, strlen(text), &r), 0);
	chat_template_free(t);
	CU_ASSERT_STRING_EQUAL(r.content, "hi");
	CU_ASSERT_EQUAL(r.n_calls, 1);
	CU_ASSERT(r.canonical);
	tc_result_free(&r);

	/* checked whole (not the canonical start): over the cap, content */
	sb_adds(&big, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \"");
	for (int i = 0; i < TC_MAX_BLOCK / 8 + 1; i++)
		sb_adds(&big, "aaaaaaaa");
	sb_adds(&big, "\"}}</tool_call>");
	CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, big.s, big.len, &r), 0);
	CU_ASSERT_EQUAL(r.n_calls, 0);
	CU_ASSERT_EQUAL(r.content_len, big.len);
	tc_result_free(&r);
	/* streamed: arguments are passed on, not held, so no cap applies */
	sb_reset(&big);
	sb_adds(&big, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"");
	for (int i = 0; i < TC_MAX_BLOCK / 8 + 1; i++)
		sb_adds(&big, "aaaaaaaa");
	sb_adds(&big, "\"}}\n</tool_call>");
	CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, big.s, big.len, &r), 0);
	CU_ASSERT_EQUAL(r.n_calls, 1);
	CU_ASSERT_EQUAL(r.content_len, 0);
	CU_ASSERT(r.canonical);
	tc_result_free(&r);
	sb_free(&big);
}


/* ---------------------------------------------------------------- families */

static void test_family_choice(void)
{
	struct chat_template *t;
	struct chat_options o = { 0 };
	char err[300];
	const char *llama = "{{- bos_token }}<|start_header_id|>system<|end_header_id|>";

	/* no template: ChatML */
	CU_ASSERT_EQUAL_FATAL(chat_template_new(NULL, 0, NULL, &t, err, sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(chat_template_family(t), "chatml");
	CU_ASSERT_STRING_EQUAL(chat_template_eot(t), "<|im_end|>");
	chat_template_free(t);
	/* a ChatML template */
	CU_ASSERT_EQUAL_FATAL(chat_template_new("<|im_start|>{{ m.role }}", 24, NULL, &t, err,
						sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(chat_template_family(t), "chatml");
	chat_template_free(t);
	/* a template of no family is refused, naming what to set */
	CU_ASSERT_EQUAL(chat_template_new("{{ messages }}", 14, NULL, &t, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "chat_template = chatml"));
	/* ChatML turns with tools or reasoning of their own are not chatml's
	 * (LFM2, SmolLM3, Hermes 2 Pro and 3's preamble); Hermes calls with
	 * Qwen's preamble are (the agent model's) */
	{
		static const char *const others[] = {
			"<|im_start|>{{ m.role }}{% if tools %}<|tool_list_start|>{{ tools }}{% endif %}",
			"{% set reasoning_mode = '/think' %}<|im_start|>system\n{{ reasoning_mode }}",
			"<|im_start|>system\nYou are a function calling AI model. You may call one or more "
			"functions to assist with the user query. <tools>{{ tools }}</tools><tool_call>",
			"<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}",
			/* Qwen's markers and <think>, no reasoning_content (QwQ) */
			"{{- '<|im_start|>user' }}You may call one or more functions to assist with the "
			"user query.<tool_call>{{- '<|im_start|>assistant\\n<think>\\n' }}",
		};
		const char *agent = "<|im_start|>system\n{{ sys }}{%- if tools %}\n\n# Tools\n\nYou may call "
				    "one or more functions to assist with the user query.<tools>{{ tools }}"
				    "</tools><tool_call>{%- endif %}<|im_end|>\n";

		for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
			CU_ASSERT_EQUAL(chat_template_new(others[i], strlen(others[i]), NULL, &t, err,
							  sizeof(err)), -EINVAL);
			CU_ASSERT_PTR_NOT_NULL(strstr(err, "is of no family"));
		}
		CU_ASSERT_EQUAL_FATAL(chat_template_new(agent, strlen(agent), NULL, &t, err, sizeof(err)), 0);
		CU_ASSERT_STRING_EQUAL(chat_template_family(t), "chatml");
		chat_template_free(t);
	}
	/* Qwen 2.5's default system message is the model's, read from the
	 * literal its template writes (an output statement) */
	{
		const char *q = "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == "
				"'system' %}{{- messages[0]['content'] }}{%- else %}\n    {{- 'You are Kiwi, "
				"it\\'s \"ok\".' }}\n{%- endif %}{{- \"\\n\\n# Tools\\n\\nYou may call one or "
				"more functions to assist with the user query.\" }}<tool_call>{%- endif %}"
				"{{- '<|im_start|>user' }}";
		const struct chat_msg um = { .role = CHAT_USER, .content = "hi", .content_len = 2 };
		const struct chat_conv cv = { .msgs = &um, .n_msgs = 1 };
		struct chat_prompt qp = { 0 };

		CU_ASSERT_EQUAL_FATAL(chat_template_new(q, strlen(q), NULL, &t, err, sizeof(err)), 0);
		CU_ASSERT_STRING_EQUAL(chat_template_family(t), "qwen2.5");
		CU_ASSERT_EQUAL(chat_render(t, &cv, &qp, err, sizeof(err)), 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(sb_cstr(&qp.text),
					      "<|im_start|>system\nYou are Kiwi, it's \"ok\".<|im_end|>\n"));
		chat_prompt_free(&qp);
		chat_template_free(t);
	}
	/* ... unless the operator says ChatML */
	o.choice = "chatml";
	CU_ASSERT_EQUAL_FATAL(chat_template_new(llama, strlen(llama), &o, &t, err, sizeof(err)), 0);
	CU_ASSERT_STRING_EQUAL(chat_template_family(t), "chatml");
	chat_template_free(t);
	o.choice = "jinja2";
	CU_ASSERT_EQUAL(chat_template_new(NULL, 0, &o, &t, err, sizeof(err)), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown chat template 'jinja2'"));
	/* tags */
	o.choice = NULL;
	o.tool_open = o.tool_close = "<x>";
	CU_ASSERT_EQUAL(chat_template_new(NULL, 0, &o, &t, err, sizeof(err)), -EINVAL);
	o.tool_open = "";
	CU_ASSERT_EQUAL(chat_template_new(NULL, 0, &o, &t, err, sizeof(err)), -EINVAL);
}

/* JSON as the templates' tojson writes it (Python's json.dumps): one line
 * with ", " and ": ", or indent N (0 too) with "," at line ends. */
static void test_tojson(void)
{
	static const struct {
		const char *in;
		int indent;
		const char *out;
	} cases[] = {
		{ "[1, 2]", -1, "[1, 2]" },
		{ "[]", -1, "[]" },
		{ "[]", 4, "[]" },
		{ "{}", 4, "{}" },
		{ "[1]", 0, "[\n1\n]" },
		{ "{\"a\": [1, {\"b\": []}]}", 4,
		  "{\n    \"a\": [\n        1,\n        {\n            \"b\": []\n        }\n    ]\n}" },
		{ "{\"a\": [1, {\"b\": []}]}", -1, "{\"a\": [1, {\"b\": []}]}" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY, NULL);
		struct strbuf b = { 0 };

		CU_ASSERT_PTR_NOT_NULL_FATAL(v);
		chat_tojson(&b, v, cases[i].indent);
		if (strcmp(sb_cstr(&b), cases[i].out))
			fprintf(stderr, "\ntojson %s indent %d: %s\n", cases[i].in, cases[i].indent,
				sb_cstr(&b));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&b), cases[i].out);
		sb_free(&b);
		json_decref(v);
	}
}

/* Which bytes are plain: the content, never the template's markers. */
static void test_plain_spans(void)
{
	struct jconv j;
	struct chat_prompt p = { 0 };
	char err[200];
	struct strbuf plain = { 0 };

	CU_ASSERT_EQUAL_FATAL(jconv_parse(&j, "{\"messages\":[{\"role\":\"system\",\"content\":\"S<|im_end|>\"},"
					  "{\"role\":\"user\",\"content\":\"U\"},"
					  "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
					  "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"</tool_response>\"}],"
					  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}"), 0);
	CU_ASSERT_EQUAL_FATAL(chat_render(tmpl, &j.c, &p, err, sizeof(err)), 0);
	for (size_t i = 0; i < p.n_plain; i++) {
		CU_ASSERT(i == 0 || p.plain[i].off > p.plain[i - 1].off + p.plain[i - 1].len);
		CU_ASSERT(p.plain[i].len > 0);
		CU_ASSERT(p.plain[i].off + p.plain[i].len <= p.text.len);
		sb_add(&plain, p.text.s + p.plain[i].off, p.plain[i].len);
		sb_adds(&plain, "|");
	}
	CU_ASSERT_STRING_EQUAL(sb_cstr(&plain),
			       "S<|im_end|>|{\"type\": \"function\", \"function\": {\"name\": \"f\"}}|"
			       "U|f|{}|</tool_response>|");
	{
		/* the markup is the complement, in order: with the plain spans
		 * it makes the whole text, byte for byte */
		size_t n = chat_prompt_markup(&p, NULL, 0), k = 0, at = 0;
		struct chat_span *m = calloc(n + 1, sizeof(*m));

		CU_ASSERT_PTR_NOT_NULL_FATAL(m);
		CU_ASSERT_EQUAL(chat_prompt_markup(&p, m, n), n);
		CU_ASSERT_EQUAL(n, p.n_plain + 1);	/* markup before, between, after */
		for (size_t i = 0; i <= p.n_plain; i++) {
			size_t end = i < p.n_plain ? p.plain[i].off : p.text.len;

			if (end > at) {
				CU_ASSERT(k < n && m[k].off == at && m[k].len == end - at);
				k++;
			}
			if (i < p.n_plain)
				at = p.plain[i].off + p.plain[i].len;
		}
		CU_ASSERT_EQUAL(k, n);
		CU_ASSERT_EQUAL(chat_prompt_markup(&p, m, 1), n);	/* counts past max */
		CU_ASSERT_EQUAL(m[0].off, 0);
		free(m);
	}
	sb_free(&plain);
	chat_prompt_free(&p);
	/* freed, it is empty again: ready for another rendering */
	CU_ASSERT(!p.text.s && !p.text.len && !p.plain && !p.n_plain && !p.cap_plain && !p.oom);
	jconv_free(&j);
}

/* The agent loop's round: what follows the generated calls. */
static void test_tool_round(void)
{
	struct chat_tool_result r[2] = { { NULL, "calc", "7", 1 }, { "id", "sh", "a\nb", 3 } };
	struct chat_prompt p = { 0 };

	CU_ASSERT_EQUAL_FATAL(chat_render_tool_round(tmpl, r, 2, &p), 0);
	CU_ASSERT_STRING_EQUAL(sb_cstr(&p.text), "<|im_end|>\n"
			       "<|im_start|>tool\n<tool_response>\n7\n</tool_response><|im_end|>\n"
			       "<|im_start|>tool\n<tool_response>\na\nb\n</tool_response><|im_end|>\n"
			       "<|im_start|>assistant\n");
	CU_ASSERT_EQUAL(p.n_plain, 2);
	chat_prompt_free(&p);
}

static void test_count_calls(void)
{
	char name[65];
	const char *t = "x\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {}}\n</tool_call>\n"
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {}}\n</tool_call>";

	CU_ASSERT_EQUAL(chat_count_calls(tmpl, t, strlen(t), name, sizeof(name)), 2);
	CU_ASSERT_STRING_EQUAL(name, "read_file");
	CU_ASSERT_EQUAL(chat_count_calls(tmpl, "plain", 5, name, sizeof(name)), 0);
	CU_ASSERT_STRING_EQUAL(name, "");
}


/* ---------------------------------------------------------------- every family */

static struct chat_template *family(const char *name)
{
	struct chat_options o = { name, NULL, NULL };
	struct chat_template *t = NULL;
	char err[300];

	if (chat_template_new(NULL, 0, &o, &t, err, sizeof(err)))
		fprintf(stderr, "\nfamily %s: %s\n", name, err);
	return t;
}

struct fcase {
	const char *family;
	const char *text;
	const char *content;
	const char *names;	/* "a|b|" */
	const char *args;	/* "{...}|{...}|" */
	const char *id0;	/* the first call's id when the model gave it */
	int canonical;
};

#define X10 "xxxxxxxxxx"
#define X70 X10 X10 X10 X10 X10 X10 X10
static const struct fcase fcases[] = {
	/* Llama 3.x: the reply is the call */
	{ "llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
	  "get_weather|", "{\"city\": \"Paris\"}|", NULL, 1 },
	{ "llama3", "  {\"name\": \"f\", \"arguments\": {}}\n", "", "f|", "{}|", NULL, 0 },
	{ "llama3", "{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"a\": [1, \"}\"]}}", "",
	  "f|", "{\"a\": [1, \"}\"]}|", NULL, 0 },
	{ "llama3", "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", "f|", "{}|", NULL, 0 },
	{ "llama3", "{\"name\": \"f\", \"parameters\": {}} and more", "and more", "f|", "{}|", NULL, 0 },
	{ "llama3", "Hello {\"name\": \"f\", \"parameters\": {}}", "Hello {\"name\": \"f\", \"parameters\": {}}",
	  "", "", NULL, 1 },
	{ "llama3", "{\"name\": \"bad name\", \"parameters\": {}}", "{\"name\": \"bad name\", \"parameters\": {}}",
	  "", "", NULL, 1 },
	{ "llama3", "{\"name\": \"f\", \"parameters\": 5}", "{\"name\": \"f\", \"parameters\": 5}", "", "", NULL, 1 },
	{ "llama3", "{\"name\": \"f\", \"parameters\": {\"a\": [1", "{\"name\": \"f\", \"parameters\": {\"a\": [1",
	  "", "", NULL, 1 },
	{ "llama3", "{\"a\": 1}", "{\"a\": 1}", "", "", NULL, 1 },
	{ "llama3", " It is 18C. ", " It is 18C. ", "", "", NULL, 0 },
	{ "llama3", "It is 18C.", "It is 18C.", "", "", NULL, 1 },
	{ "llama3", "", "", "", "", NULL, 1 },
	/* Mistral v3 (Nemo): a JSON array after [TOOL_CALLS] */
	{ "mistral-v3", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abc123XYZ\"}]", "",
	  "f|", "{\"a\": 1}|", "abc123XYZ", 1 },
	{ "mistral-v3", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefgh1\"}, "
	  "{\"name\": \"g\", \"arguments\": {\"s\": \"]}\"}, \"id\": \"abcdefgh2\"}]", "",
	  "f|g|", "{}|{\"s\": \"]}\"}|", "abcdefgh1", 1 },
	{ "mistral-v3", "Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}]", "Sure.",
	  "f|", "{}|", "abcdefghi", 0 },
	{ "mistral-v3", "[TOOL_CALLS] [ {\"arguments\": {}, \"name\": \"f\"} ]", "", "f|", "{}|", NULL, 0 },
	{ "mistral-v3", "[TOOL_CALLS]oops", "[TOOL_CALLS]oops", "", "", NULL, 1 },
	{ "mistral-v3", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}, \"id\": \"abcdefghi\"}, {\"name\": 3}]",
	  " {\"name\": 3}]", "f|", "{}|", "abcdefghi", 0 },
	{ "mistral-v3", "text [TOOL_CALL", "text [TOOL_CALL", "", "", NULL, 1 },
	{ "mistral-v3", "It is 18C.", "It is 18C.", "", "", NULL, 1 },
	/* Mistral v7 (Small 3.2): [TOOL_CALLS]N[CALL_ID]I[ARGS]A */
	{ "mistral-v7", "[TOOL_CALLS]get_weather[CALL_ID]123456789[ARGS]{\"city\": \"Paris\"}", "",
	  "get_weather|", "{\"city\": \"Paris\"}|", "123456789", 1 },
	{ "mistral-v7", "[TOOL_CALLS]a[CALL_ID]000000001[ARGS]{}[TOOL_CALLS]b[CALL_ID]000000002[ARGS]{\"x\": 2}",
	  "", "a|b|", "{}|{\"x\": 2}|", "000000001", 1 },
	{ "mistral-v7", "[TOOL_CALLS]f[ARGS]{}", "", "f|", "{}|", NULL, 0 },
	{ "mistral-v7", "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]f[ARGS][1]", "", "", NULL, 1 },
	/* an id is at most 64 bytes: [ARGS] further on is not this call's,
	 * whole or in pieces (fuzz_chat found them read differently) */
	{ "mistral-v7", "[TOOL_CALLS]f[CALL_ID]" X70 "[ARGS]{}", "[TOOL_CALLS]f[CALL_ID]" X70 "[ARGS]{}",
	  "", "", NULL, 1 },
	/* the id ends at the whole mark: "[ARGS" is part of an id (not 9
	 * alphanumerics, so a new one is made) */
	{ "mistral-v7", "[TOOL_CALLS]f[CALL_ID]ab[ARGS[ARGS]{}", "", "f|", "{}|", NULL, 0 },
	/* Mistral v11 (Ministral 3, Devstral): content, then [TOOL_CALLS]N[ARGS]A */
	{ "mistral-v11", "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "Let me check.",
	  "get_weather|", "{\"city\": \"Paris\"}|", NULL, 1 },
	{ "mistral-v11", "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": \"[ARGS]\"}", "", "a|b|",
	  "{}|{\"x\": \"[ARGS]\"}|", NULL, 1 },
	{ "mistral-v11", "[TOOL_CALLS]a[ARGS]{} trailing", " trailing", "a|", "{}|", NULL, 0 },
	/* fewer bytes after a call than [TOOL_CALLS] has, not its start
	 * (fuzz_chat: read past the text) */
	{ "mistral-v11", "[TOOL_CALLS]a[ARGS]{}[T|", "[T|", "a|", "{}|", NULL, 0 },
	{ "mistral-v11", "[TOOL_CALLS]a b[ARGS]{}", "[TOOL_CALLS]a b[ARGS]{}", "", "", NULL, 1 },
	{ "mistral-v11", "[TOOL_CALLS]a[ARGS]{\"x\": ", "[TOOL_CALLS]a[ARGS]{\"x\": ", "", "", NULL, 1 },
	/* every character a name may have, at the ends of its ranges */
	{ "chatml", "<tool_call>\n{\"name\": \"az-AZ_09\", \"arguments\": {}}\n</tool_call>", "",
	  "az-AZ_09|", "{}|", NULL, 1 },
	{ "chatml", "<tool_call>\n{\"name\": \"a.b\", \"arguments\": {}}\n</tool_call>",
	  "<tool_call>\n{\"name\": \"a.b\", \"arguments\": {}}\n</tool_call>", "", "", NULL, 1 },
	/* Qwen: Hermes calls; Qwen 3's think block stays in the content here */
	{ "qwen2.5", "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", "Checking.",
	  "f|", "{\"a\": 1}|", NULL, 1 },
	{ "qwen2.5", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>", "",
	  "f|", "{\"a\":1}|", NULL, 0 },
	{ "qwen3", "<think>\nI'll call <tool_call>.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
	  "<think>\nI'll call <tool_call>.\n</think>\n", "f|", "{}|", NULL, 1 },
	{ "qwen3", "<think>\nfine\n</think>\n\nIt is 18C.", "<think>\nfine\n</think>\n\nIt is 18C.", "", "", NULL, 1 },
	{ "qwen3", "<think>\nunclosed <tool_call>", "<think>\nunclosed <tool_call>", "", "", NULL, 1 },
	{ "qwen3", "<thin", "<thin", "", "", NULL, 1 },
};

static void check_fcase(const struct fcase *k, const struct chat_template *t, size_t idx)
{
	struct tc_result r;
	struct collected ref, got;
	size_t len = strlen(k->text);
	struct strbuf names = { 0 }, args = { 0 };

	CU_ASSERT_EQUAL_FATAL(tc_parse(t, k->text, len, &r), 0);
	for (size_t i = 0; i < r.n_calls; i++) {
		sb_adds(&names, r.calls[i].name);
		sb_adds(&names, "|");
		sb_add(&args, r.calls[i].arguments, r.calls[i].arguments_len);
		sb_adds(&args, "|");
	}
	if (strcmp(r.content, k->content) || strcmp(sb_cstr(&names), k->names) ||
	    strcmp(sb_cstr(&args), k->args) || r.canonical != k->canonical)
		fprintf(stderr, "\nfcase %zu (%s): content '%s' names '%s' args '%s' canonical %d\n",
			idx, k->family, r.content, sb_cstr(&names), sb_cstr(&args), r.canonical);
	CU_ASSERT_STRING_EQUAL(r.content, k->content);
	CU_ASSERT_STRING_EQUAL(sb_cstr(&names), k->names);
	CU_ASSERT_STRING_EQUAL(sb_cstr(&args), k->args);
	CU_ASSERT_EQUAL(r.canonical, k->canonical);
	if (k->id0)
		CU_ASSERT(r.n_calls && !strcmp(r.calls[0].id, k->id0));
	tc_result_free(&r);
	sb_free(&names);
	sb_free(&args);
	/* streamed, split at every byte and byte by byte: the same */
	stream_in(t, 0, k->text, NULL, 0, &ref);
	CU_ASSERT_STRING_EQUAL(sb_cstr(&ref.content), k->content);
	CU_ASSERT_STRING_EQUAL(sb_cstr(&ref.names), k->names);
	for (size_t a = 0; a <= len; a++) {
		stream_in(t, 0, k->text, &a, 1, &got);
		if (strcmp(sb_cstr(&got.content), sb_cstr(&ref.content)) ||
		    strcmp(sb_cstr(&got.names), sb_cstr(&ref.names)))
			fprintf(stderr, "\nfcase %zu cut at %zu: content '%s' names '%s'\n", idx, a,
				sb_cstr(&got.content), sb_cstr(&got.names));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), sb_cstr(&ref.content));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.names), sb_cstr(&ref.names));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.args), sb_cstr(&ref.args));
		collected_free(&got);
	}
	{
		size_t cuts[512], n = len < 512 ? len : 512;

		for (size_t a = 0; a < n; a++)
			cuts[a] = a + 1;
		stream_in(t, 0, k->text, cuts, n, &got);
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), sb_cstr(&ref.content));
		CU_ASSERT_STRING_EQUAL(sb_cstr(&got.args), sb_cstr(&ref.args));
		collected_free(&got);
	}
	collected_free(&ref);
}

static void test_family_calls(void)
{
	for (size_t i = 0; i < sizeof(fcases) / sizeof(fcases[0]); i++) {
		struct chat_template *t = family(fcases[i].family);

		CU_ASSERT_PTR_NOT_NULL_FATAL(t);
		check_fcase(&fcases[i], t, i);
		chat_template_free(t);
	}
}

/* Qwen 3's reasoning split off: streamed at every cut, the same; without
 * tools (no_calls) the text after the think block is content whatever it
 * spells. */
static void test_reasoning(void)
{
	static const struct { const char *text, *reasoning, *content, *names; int no_calls; } cases[] = {
		{ "<think>\nThe user asks.\nTwo lines.\n</think>\n\nIt is 18C.", "The user asks.\nTwo lines.",
		  "It is 18C.", "", 0 },
		{ "<think>\n\nx\n\n</think>\n\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
		  "x", "", "f|", 0 },
		{ "<think>\ncut off\n", "cut off", "", "", 0 },
		{ "No think block.", "", "No think block.", "", 0 },
		{ "<think></think>ok", "", "ok", "", 0 },
		{ "<think>\nx\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
		  "x", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "", 1 },
		{ "Plain <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "",
		  "Plain <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "", 1 },
	};
	struct chat_template *t = family("qwen3");

	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].text);

		for (size_t a = 0; a <= len; a++) {
			struct collected got;

			stream_no_calls = cases[i].no_calls;
			stream_in(t, 1, cases[i].text, &a, 1, &got);
			stream_no_calls = 0;
			if (strcmp(sb_cstr(&got.reasoning), cases[i].reasoning) ||
			    strcmp(sb_cstr(&got.content), cases[i].content))
				fprintf(stderr, "\nreasoning case %zu cut %zu: '%s' / '%s'\n", i, a,
					sb_cstr(&got.reasoning), sb_cstr(&got.content));
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.reasoning), cases[i].reasoning);
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.content), cases[i].content);
			CU_ASSERT_STRING_EQUAL(sb_cstr(&got.names), cases[i].names);
			collected_free(&got);
		}
	}
	chat_template_free(t);
}

/* ---- byte stability, every family ---- */

/* A conversation the test grows as a client would: messages, and the
 * strings they own. */
struct sconv {
	struct chat_msg msgs[32];
	struct chat_call calls[32][4];
	char *own[256];
	size_t n, n_own;
	struct chat_tool tools[2];
	json_t *fns[2];
	size_t n_tools;
};

static const char *keep(struct sconv *c, const char *s, size_t n)
{
	char *d = strndup(s, n);

	c->own[c->n_own++] = d;
	return d;
}

static void sc_add(struct sconv *c, enum chat_role role, const char *text, const char *call_id)
{
	struct chat_msg *m = &c->msgs[c->n++];

	memset(m, 0, sizeof(*m));
	m->role = role;
	m->content = keep(c, text, strlen(text));
	m->content_len = strlen(text);
	m->tool_call_id = call_id ? keep(c, call_id, strlen(call_id)) : NULL;
}

/* The reply, parsed as the front end does and sent back as the client
 * does (content and calls with their ids). */
static void sc_reply(struct sconv *c, const struct chat_template *t, const char *gen)
{
	struct tc_result r;
	struct chat_msg *m = &c->msgs[c->n];

	CU_ASSERT_EQUAL_FATAL(tc_parse(t, gen, strlen(gen), &r), 0);
	if (!r.canonical)
		fprintf(stderr, "\n%s: not canonical: %s\n", chat_template_family(t), gen);
	CU_ASSERT(r.canonical);
	memset(m, 0, sizeof(*m));
	m->role = CHAT_ASSISTANT;
	m->content = keep(c, r.content, r.content_len);
	m->content_len = r.content_len;
	m->calls = c->calls[c->n];
	for (size_t i = 0; i < r.n_calls && i < 4; i++) {
		m->calls[i].id = keep(c, r.calls[i].id, strlen(r.calls[i].id));
		m->calls[i].name = keep(c, r.calls[i].name, strlen(r.calls[i].name));
		m->calls[i].arguments = keep(c, r.calls[i].arguments, r.calls[i].arguments_len);
		m->calls[i].arguments_len = r.calls[i].arguments_len;
		m->n_calls++;
	}
	c->n++;
	tc_result_free(&r);
}

static char *sc_render_think(struct sconv *c, const struct chat_template *t,
			     enum chat_thinking think)
{
	struct chat_conv cv = { c->msgs, c->n, c->tools, c->n_tools, think, 0 };
	struct chat_prompt p = { 0 };
	char err[300], *s;

	CU_ASSERT_EQUAL(chat_render(t, &cv, &p, err, sizeof(err)), 0);
	s = sb_steal(&p.text, NULL);
	chat_prompt_free(&p);
	return s;
}

static char *sc_render(struct sconv *c, const struct chat_template *t)
{
	return sc_render_think(c, t, CHAT_THINK_DEFAULT);
}

static void sc_free(struct sconv *c)
{
	for (size_t i = 0; i < c->n_own; i++)
		free(c->own[i]);
	for (size_t i = 0; i < c->n_tools; i++)
		json_decref(c->fns[i]);
}

/* How far turn N's prompt + reply + end of turn reaches into turn N+1's. */
static size_t common(const char *before, const char *gen, const char *eot, const char *after)
{
	struct strbuf want = { 0 };
	size_t n = 0;

	sb_adds(&want, before);
	sb_adds(&want, gen);
	sb_adds(&want, eot);
	while (n < want.len && after[n] == want.s[n])
		n++;
	if (n == want.len) {
		sb_free(&want);
		return SIZE_MAX;	/* a prefix */
	}
	sb_free(&want);
	return n;
}

/* The prompts part where before has marker (the bytes the marker shares
 * with what replaces it aside). */
static int diverges_at(size_t at, const char *before, const char *marker)
{
	const char *m = strstr(before, marker);

	return m && at != SIZE_MAX && at >= (size_t)(m - before) &&
	       at < (size_t)(m - before) + 3;
}

/* The call a family's model writes, and the last call's id to answer. */
static const char *family_call(const char *fam, const char *name, const char *args, char *buf, size_t size)
{
	if (!strcmp(fam, "llama3"))
		snprintf(buf, size, "{\"name\": \"%s\", \"parameters\": %s}", name, args);
	else if (!strcmp(fam, "mistral-v3"))
		snprintf(buf, size, "[TOOL_CALLS][{\"name\": \"%s\", \"arguments\": %s, \"id\": \"abcdefgh1\"}]",
			 name, args);
	else if (!strcmp(fam, "mistral-v7"))
		snprintf(buf, size, "[TOOL_CALLS]%s[CALL_ID]abcdefgh1[ARGS]%s", name, args);
	else if (!strcmp(fam, "mistral-v11"))
		snprintf(buf, size, "[TOOL_CALLS]%s[ARGS]%s", name, args);
	else if (!strcmp(fam, "qwen3"))
		snprintf(buf, size, "<think>\nI need the weather.\n</think>\n\n<tool_call>\n"
			 "{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>", name, args);
	else
		snprintf(buf, size, "<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
			 name, args);
	return buf;
}

/*
 * Turn N's prompt + the reply + the end of the turn is a byte prefix of
 * turn N+1's prompt: across tool rounds for every family, across user
 * turns where the template keeps earlier text; where it does not (chat.md),
 * the prompts agree exactly up to the place the template moves.
 */
static void test_family_stable(void)
{
	static const char *const fams[] = { "chatml", "qwen2.5", "qwen3", "llama3",
					    "mistral-v3", "mistral-v7", "mistral-v11" };

	for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		for (int with_sys = 0; with_sys < 2; with_sys++) {
			struct chat_template *t = family(fams[f]);
			const char *fam = fams[f], *eot;
			struct sconv c = { 0 };
			char gen[512], *b1, *b2, *b3, *b4;
			size_t at;
			json_error_t je;

			CU_ASSERT_PTR_NOT_NULL_FATAL(t);
			eot = chat_template_eot(t);
			c.fns[0] = json_loads("{\"name\": \"get_weather\", \"description\": \"Weather.\", "
					      "\"parameters\": {\"type\": \"object\", \"properties\": "
					      "{\"city\": {\"type\": \"string\"}}}}", 0, &je);
			c.tools[0] = (struct chat_tool){ "get_weather", c.fns[0] };
			c.n_tools = 1;
			if (with_sys)
				sc_add(&c, CHAT_SYSTEM, "Be terse.", NULL);
			sc_add(&c, CHAT_USER, "Weather in Paris?", NULL);
			/* a tool round */
			b1 = sc_render(&c, t);
			family_call(fam, "get_weather", "{\"city\": \"Paris\"}", gen, sizeof(gen));
			sc_reply(&c, t, gen);
			sc_add(&c, CHAT_TOOL, "18C", c.msgs[c.n - 1].n_calls ? c.msgs[c.n - 1].calls[0].id : "x");
			b2 = sc_render(&c, t);
			at = common(b1, gen, eot, b2);
			{
				/* the agent loop's continuation is the template's */
				struct chat_tool_result res = { c.msgs[c.n - 1].tool_call_id, "get_weather", "18C", 3 };
				struct chat_prompt rp = { 0 };
				struct strbuf whole = { 0 };

				CU_ASSERT_EQUAL(chat_render_tool_round(t, &res, 1, &rp), 0);
				sb_adds(&whole, b1);
				sb_adds(&whole, gen);
				sb_add(&whole, rp.text.s, rp.text.len);
				if (strcmp(sb_cstr(&whole), b2) && (strcmp(fam, "mistral-v3") || !with_sys))
					fprintf(stderr, "\n%s: round differs:\n%s\n---\n%s\n", fam,
						sb_cstr(&whole), b2);
				if (strcmp(fam, "mistral-v3") || !with_sys)
					CU_ASSERT_STRING_EQUAL(sb_cstr(&whole), b2);
				sb_free(&whole);
				chat_prompt_free(&rp);
			}
			if (!strcmp(fam, "mistral-v3") && with_sys) {
				/* Nemo writes the system message in the last user
				 * message while it is the conversation's last */
				CU_ASSERT_EQUAL(at, (size_t)(strstr(b1, "[INST]") - b1) + 6);
			} else {
				if (at != SIZE_MAX)
					fprintf(stderr, "\n%s: tool round not a prefix at %zu:\n%s\n---\n%s\n",
						fam, at, b1, b2);
				CU_ASSERT_EQUAL(at, SIZE_MAX);
			}
			/* the final answer, then a new user turn */
			snprintf(gen, sizeof(gen), "%s", !strcmp(fam, "qwen3") ?
				 "<think>\nAnswer now.\n</think>\n\nIt is 18C." : "It is 18C.");
			sc_reply(&c, t, gen);
			sc_add(&c, CHAT_USER, "And in Nice?", NULL);
			b3 = sc_render(&c, t);
			at = common(b2, gen, eot, b3);
			if (!strcmp(fam, "qwen3")) {
				/* earlier reasoning is dropped: the first reply that
				 * had some re-renders without it */
				CU_ASSERT(diverges_at(at, b2, "<think>"));
			} else if (!strcmp(fam, "mistral-v3") || !strcmp(fam, "mistral-v7")) {
				/* the tools move to the new last user message */
				CU_ASSERT(diverges_at(at, b2, "[AVAILABLE_TOOLS]"));
			} else {
				if (at != SIZE_MAX)
					fprintf(stderr, "\n%s: user turn not a prefix at %zu:\n%s\n---\n%s\n",
						fam, at, b2, b3);
				CU_ASSERT_EQUAL(at, SIZE_MAX);
			}
			/* another plain turn: stable where the last was */
			snprintf(gen, sizeof(gen), "Nice: 20C.");
			sc_reply(&c, t, gen);
			sc_add(&c, CHAT_USER, "Thanks", NULL);
			b4 = sc_render(&c, t);
			at = common(b3, gen, eot, b4);
			if (strncmp(fam, "mistral-v", 9) || !strcmp(fam, "mistral-v11"))
				CU_ASSERT_EQUAL(at, SIZE_MAX);
			free(b1);
			free(b2);
			free(b3);
			free(b4);
			sc_free(&c);
			chat_template_free(t);
		}
	}
}

/*
 * qwen3 with thinking off: the generation prompt opens the reply after an
 * empty think block, which the template does not write back for a reply
 * without reasoning (as llama.cpp renders it): a tool round is a prefix
 * up to that block.
 */
static void test_qwen3_think_off(void)
{
	struct chat_template *t = family("qwen3");
	struct sconv c = { 0 };
	char gen[256], *b1, *b2;
	const char *empty = "<think>\n\n</think>\n\n";
	size_t at;

	CU_ASSERT_PTR_NOT_NULL_FATAL(t);
	sc_add(&c, CHAT_USER, "Weather in Paris?", NULL);
	b1 = sc_render_think(&c, t, CHAT_THINK_OFF);
	CU_ASSERT(strlen(b1) > strlen(empty) && !strcmp(b1 + strlen(b1) - strlen(empty), empty));
	snprintf(gen, sizeof(gen), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
		 "{\"city\": \"Paris\"}}\n</tool_call>");
	sc_reply(&c, t, gen);
	sc_add(&c, CHAT_TOOL, "18C", c.msgs[1].calls[0].id);
	b2 = sc_render_think(&c, t, CHAT_THINK_OFF);
	at = common(b1, gen, chat_template_eot(t), b2);
	/* (the bytes the block shares with what follows aside: "<") */
	CU_ASSERT(at != SIZE_MAX && at >= strlen(b1) - strlen(empty) &&
		  at < strlen(b1) - strlen(empty) + 3);
	free(b1);
	free(b2);
	sc_free(&c);
	chat_template_free(t);
}

int main(void)
{
	CU_pSuite s;
	unsigned fails;

	if (chat_template_new(NULL, 0, NULL, &tmpl, NULL, 0) ||
	    CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("chat", NULL, NULL);
	CU_add_test(s, "families: choice and refusal", test_family_choice);
	CU_add_test(s, "chatml: byte-stable across turns", test_template_stable);
	CU_add_test(s, "chatml: plain spans", test_plain_spans);
	CU_add_test(s, "tojson as the templates write it", test_tojson);
	CU_add_test(s, "chatml: tool round", test_tool_round);
	CU_add_test(s, "chatml: counting calls", test_count_calls);
	CU_add_test(s, "tool calls: batch", test_tool_calls_batch);
	CU_add_test(s, "tool calls: streamed, split everywhere", test_tool_calls_stream);
	CU_add_test(s, "tool calls: arguments streamed as generated", test_tool_calls_incremental);
	CU_add_test(s, "tool calls: held to the grammar, any spacing streams", test_tool_calls_loose);
	CU_add_test(s, "tool calls: a call forced by name announced at once", test_tool_calls_forced);
	CU_add_test(s, "tool calls: tags and size cap", test_tool_calls_tags_and_cap);
	CU_add_test(s, "families: tool-call syntaxes, streamed", test_family_calls);
	CU_add_test(s, "families: qwen3 reasoning split off", test_reasoning);
	CU_add_test(s, "families: byte stability across turns", test_family_stable);
	CU_add_test(s, "families: qwen3 with thinking off", test_qwen3_think_off);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures();
	CU_cleanup_registry();
	chat_template_free(tmpl);
	return fails ? 1 : 0;
}
