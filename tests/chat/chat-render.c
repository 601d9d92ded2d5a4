// SPDX-License-Identifier: MIT
/*
 * chat-render.c - renders a conversation with the model families' room,
 * for the comparison with llama.cpp (tests/chat/llama-ref.py):
 *
 *   kvd-chat-render [--family NAME] TEMPLATE.jinja CONV.json
 *   kvd-chat-render [--family NAME] TEMPLATE.jinja --parse REPLY.txt
 *
 * The family is recognised in TEMPLATE (or forced); its name goes to
 * stderr ("family: NAME"), the prompt to stdout; with --parse, the reply
 * split by the family's syntax (reasoning apart) as {"content",
 * "reasoning_content", "tool_calls": [{"id", "name", "arguments"}]}. Exit
 * 2 when no family matches or the conversation cannot be rendered.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "jconv.h"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	size_t cap = 0, n = 0, r;

	if (!f)
		return NULL;
	do {
		if (n + 4096 + 1 > cap) {
			char *t = realloc(s, cap = (cap + 4096) * 2);

			if (!t) {
				free(s);
				fclose(f);
				return NULL;
			}
			s = t;
		}
		r = fread(s + n, 1, cap - n - 1, f);
		n += r;
	} while (r);
	fclose(f);
	s[n] = 0;
	*len = n;
	return s;
}

struct parsed {
	struct strbuf content, reasoning, args;
	json_t *calls, *cur;
};

static int on_event(void *ctx, enum tc_event ev, const char *text, size_t len,
		    const struct tc_call *call)
{
	struct parsed *p = ctx;

	switch (ev) {
	case TC_CONTENT:
		sb_add(&p->content, text, len);
		break;
	case TC_REASONING:
		sb_add(&p->reasoning, text, len);
		break;
	case TC_CALL_START:
		p->cur = json_pack("{s:s, s:s}", "id", call->id, "name", call->name);
		sb_reset(&p->args);
		break;
	case TC_CALL_ARGS:
		sb_add(&p->args, text, len);
		break;
	case TC_CALL_END:
		json_object_set_new(p->cur, "arguments", json_stringn(p->args.s ? p->args.s : "",
								      p->args.len));
		json_array_append_new(p->calls, p->cur);
		p->cur = NULL;
		break;
	}
	return 0;
}

static int parse_reply(const struct chat_template *t, const char *text, size_t len)
{
	struct parsed p = { .calls = json_array() };
	struct tc_stream s;
	json_t *o;
	char *out;

	tc_stream_init(&s, t, on_event, &p);
	tc_stream_reasoning(&s, 1);
	if (tc_stream_feed(&s, text, len) || tc_stream_finish(&s))
		return 2;
	tc_stream_free(&s);
	o = json_pack("{s:s%, s:s%, s:o}", "content", p.content.s ? p.content.s : "", p.content.len,
		      "reasoning_content", p.reasoning.s ? p.reasoning.s : "", p.reasoning.len,
		      "tool_calls", p.calls);
	out = json_dumps(o, JSON_COMPACT);
	puts(out);
	free(out);
	json_decref(o);
	sb_free(&p.content);
	sb_free(&p.reasoning);
	sb_free(&p.args);
	return 0;
}

int main(int argc, char **argv)
{
	struct chat_options o = { 0 };
	struct chat_template *t;
	char err[400], *tmpl, *conv, *out;
	size_t tl, cl;
	int a = 1;

	if (argc > 3 && !strcmp(argv[1], "--family")) {
		o.choice = argv[2];
		a = 3;
	}
	if (argc - a == 3 && !strcmp(argv[a + 1], "--parse")) {
		int rc;

		tmpl = slurp(argv[a], &tl);
		conv = slurp(argv[a + 2], &cl);
		if (!tmpl || !conv || chat_template_new(tmpl, tl, &o, &t, err, sizeof(err))) {
			fprintf(stderr, "kvd-chat-render: %s\n", tmpl && conv ? err : "cannot read");
			free(tmpl);
			free(conv);
			return 2;
		}
		fprintf(stderr, "family: %s\n", chat_template_family(t));
		rc = parse_reply(t, conv, cl);
		chat_template_free(t);
		free(tmpl);
		free(conv);
		return rc;
	}
	if (argc - a != 2) {
		fprintf(stderr, "usage: kvd-chat-render [--family NAME] TEMPLATE CONV.json\n");
		return 1;
	}
	tmpl = slurp(argv[a], &tl);
	conv = slurp(argv[a + 1], &cl);
	if (!tmpl || !conv) {
		perror("kvd-chat-render");
		free(tmpl);
		free(conv);
		return 1;
	}
	if (chat_template_new(tmpl, tl, &o, &t, err, sizeof(err))) {
		fprintf(stderr, "kvd-chat-render: %s\n", err);
		free(tmpl);
		free(conv);
		return 2;
	}
	fprintf(stderr, "family: %s\n", chat_template_family(t));
	out = render_json(t, conv);
	if (out)
		fputs(out, stdout);
	free(out);
	chat_template_free(t);
	free(tmpl);
	free(conv);
	return out ? 0 : 2;
}
