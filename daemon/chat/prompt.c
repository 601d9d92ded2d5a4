// SPDX-License-Identifier: MIT
/*
 * prompt.c - the rendered prompt: its text, and which ranges of it came
 * from outside the template (see struct chat_prompt in chat.h). The
 * families append through these three functions only, so no text reaches
 * a prompt without being marked as markup or as plain.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

void chat_prompt_free(struct chat_prompt *p)
{
	sb_free(&p->text);
	free(p->plain);
	memset(p, 0, sizeof(*p));
}

size_t chat_prompt_markup(const struct chat_prompt *p, struct chat_span *out, size_t max)
{
	size_t n = 0, at = 0;

	for (size_t i = 0; i <= p->n_plain; i++) {
		size_t end = i < p->n_plain ? p->plain[i].off : p->text.len;

		if (end > at) {
			if (n < max)
				out[n] = (struct chat_span){ at, end - at };
			n++;
		}
		if (i < p->n_plain)
			at = p->plain[i].off + p->plain[i].len;
	}
	return n;
}

void chat_markup_n(struct chat_prompt *p, const char *s, size_t n)
{
	sb_add(&p->text, s, n);
	if (p->text.oom)
		p->oom = 1;
}

void chat_markup(struct chat_prompt *p, const char *s)
{
	chat_markup_n(p, s, strlen(s));
}

void chat_plain(struct chat_prompt *p, const char *s, size_t n)
{
	size_t off = p->text.len;
	struct chat_span *last = p->n_plain ? &p->plain[p->n_plain - 1] : NULL;

	if (!n || p->oom)
		return;
	sb_add(&p->text, s, n);
	if (p->text.oom) {
		p->oom = 1;
		return;
	}
	if (last && last->off + last->len == off) {	/* adjacent: one span */
		last->len += n;
		return;
	}
	if (p->n_plain == p->cap_plain) {
		size_t cap = p->cap_plain ? p->cap_plain * 2 : 16;
		struct chat_span *v = realloc(p->plain, cap * sizeof(*v));

		if (!v) {
			p->oom = 1;
			return;
		}
		p->plain = v;
		p->cap_plain = cap;
	}
	p->plain[p->n_plain].off = off;
	p->plain[p->n_plain].len = n;
	p->n_plain++;
}
