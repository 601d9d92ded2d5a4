// SPDX-License-Identifier: MIT
/*
 * chat-render.c - renders a conversation with the model families' room,
 * for the comparison with llama.cpp (tests/chat/llama-ref.py):
 *
 *   kvd-chat-render [--family NAME] TEMPLATE.jinja CONV.json
 *
 * The family is recognised in TEMPLATE (or forced); its name goes to
 * stderr ("family: NAME"), the prompt to stdout. Exit 2 when no family
 * matches or the conversation cannot be rendered.
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
	if (argc - a != 2) {
		fprintf(stderr, "usage: kvd-chat-render [--family NAME] TEMPLATE CONV.json\n");
		return 1;
	}
	tmpl = slurp(argv[a], &tl);
	conv = slurp(argv[a + 1], &cl);
	if (!tmpl || !conv) {
		perror("kvd-chat-render");
		return 1;
	}
	if (chat_template_new(tmpl, tl, &o, &t, err, sizeof(err))) {
		fprintf(stderr, "kvd-chat-render: %s\n", err);
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
