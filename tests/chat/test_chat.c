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

static struct chat_template *tmpl;	/* ChatML, as the test models' */

/* ---------------------------------------------------------------- conversations */

/* {"messages": [...], "tools": [...]} in the OpenAI shape, as the room's
 * normalized conversation (strings point into root). */
struct jconv {
	json_t *root;
	struct chat_msg *msgs;
	struct chat_tool *tools;
	struct chat_conv c;
};

static void jconv_free(struct jconv *j)
{
	for (size_t i = 0; j->msgs && i < j->c.n_msgs; i++)
		free(j->msgs[i].calls);
	free(j->msgs);
	free(j->tools);
	json_decref(j->root);
	memset(j, 0, sizeof(*j));
}

static const char *str_or(json_t *v, const char *dflt)
{
	return json_is_string(v) ? json_string_value(v) : dflt;
}

static int jconv_parse(struct jconv *j, const char *text)
{
	json_error_t je;
	json_t *ms, *ts, *m, *t;
	size_t i, k;

	memset(j, 0, sizeof(*j));
	j->root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!j->root) {
		fprintf(stderr, "\njconv: %s\n", je.text);
		return -1;
	}
	ms = json_object_get(j->root, "messages");
	ts = json_object_get(j->root, "tools");
	j->msgs = calloc(json_array_size(ms) + 1, sizeof(*j->msgs));
	j->tools = calloc(json_array_size(ts) + 1, sizeof(*j->tools));
	if (!j->msgs || !j->tools)
		return -1;
	json_array_foreach(ms, i, m) {
		struct chat_msg *cm = &j->msgs[i];
		const char *role = str_or(json_object_get(m, "role"), "");
		json_t *calls = json_object_get(m, "tool_calls"), *c, *content;

		cm->role = !strcmp(role, "system") ? CHAT_SYSTEM : !strcmp(role, "user") ? CHAT_USER :
			   !strcmp(role, "assistant") ? CHAT_ASSISTANT : CHAT_TOOL;
		content = json_object_get(m, "content");
		if (json_is_array(content))	/* one text part */
			content = json_object_get(json_array_get(content, 0), "text");
		cm->content = str_or(content, "");
		cm->content_len = json_is_string(content) ? json_string_length(content) : 0;
		cm->tool_call_id = str_or(json_object_get(m, "tool_call_id"), NULL);
		if (json_array_size(calls)) {
			cm->calls = calloc(json_array_size(calls), sizeof(*cm->calls));
			if (!cm->calls)
				return -1;
			json_array_foreach(calls, k, c) {
				json_t *fn = json_object_get(c, "function");
				json_t *args = json_object_get(fn, "arguments");

				cm->calls[k].id = str_or(json_object_get(c, "id"), NULL);
				cm->calls[k].name = str_or(json_object_get(fn, "name"), "");
				cm->calls[k].arguments = str_or(args, "{}");
				cm->calls[k].arguments_len = json_is_string(args) ?
							     json_string_length(args) : 2;
			}
			cm->n_calls = json_array_size(calls);
		}
		j->c.n_msgs = i + 1;
	}
	json_array_foreach(ts, i, t) {
		j->tools[i].function = json_object_get(t, "function");
		j->tools[i].name = str_or(json_object_get(j->tools[i].function, "name"), "");
	}
	j->c.msgs = j->msgs;
	j->c.tools = j->tools;
	j->c.n_tools = json_array_size(ts);
	return 0;
}

/* The prompt for a JSON conversation, malloc'd; NULL when it fails. */
static char *render_json(const struct chat_template *t, const char *text)
{
	struct jconv j;
	struct chat_prompt p = { 0 };
	char err[256];
	char *s = NULL;
	int rc;

	if (jconv_parse(&j, text)) {
		jconv_free(&j);
		return NULL;
	}
	rc = chat_render(t, &j.c, &p, err, sizeof(err));
	if (rc)
		fprintf(stderr, "\nrender: %s\n", err);
	else
		s = sb_steal(&p.text, NULL);
	chat_prompt_free(&p);
	jconv_free(&j);
	return s;
}

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
	struct strbuf names, args;
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
	case TC_CALL_START:
		CU_ASSERT_EQUAL(strlen(call->id), TC_ID_LEN);
		CU_ASSERT_EQUAL(strncmp(call->id, "call_", 5), 0);
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

static void stream_pieces(const char *text, const size_t *cuts, size_t n_cuts,
			  struct collected *out)
{
	struct tc_stream s;
	size_t at = 0, len = strlen(text);

	memset(out, 0, sizeof(*out));
	tc_stream_init(&s, tmpl, collect, out);
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;

		CU_ASSERT_EQUAL(tc_stream_feed(&s, text + at, end - at), 0);
		at = end;
	}
	CU_ASSERT_EQUAL(tc_stream_finish(&s), 0);
	tc_stream_free(&s);
}

static void collected_free(struct collected *c)
{
	sb_free(&c->content);
	sb_free(&c->names);
	sb_free(&c->args);
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
	sb_free(&plain);
	chat_prompt_free(&p);
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
	CU_add_test(s, "chatml: tool round", test_tool_round);
	CU_add_test(s, "chatml: counting calls", test_count_calls);
	CU_add_test(s, "tool calls: batch", test_tool_calls_batch);
	CU_add_test(s, "tool calls: streamed, split everywhere", test_tool_calls_stream);
	CU_add_test(s, "tool calls: arguments streamed as generated", test_tool_calls_incremental);
	CU_add_test(s, "tool calls: tags and size cap", test_tool_calls_tags_and_cap);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures();
	CU_cleanup_registry();
	chat_template_free(tmpl);
	return fails ? 1 : 0;
}
