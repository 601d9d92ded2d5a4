// SPDX-License-Identifier: MIT
/*
 * strbuf.c - growable byte strings (see strbuf.h).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

static int sb_grow(struct strbuf *b, size_t extra)
{
	size_t want, cap;
	char *s;

	if (b->oom)
		return -1;
	if (extra > ((size_t)-1) / 2 - b->len) {
		b->oom = 1;
		return -1;
	}
	want = b->len + extra + 1;
	if (want <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < want)
		cap *= 2;
	s = realloc(b->s, cap);
	if (!s) {
		b->oom = 1;
		return -1;
	}
	b->s = s;
	b->cap = cap;
	return 0;
}

void sb_add(struct strbuf *b, const void *p, size_t n)
{
	if (sb_grow(b, n))
		return;
	if (n)
		memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void sb_adds(struct strbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

void sb_addf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return;
	}
	if (sb_grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void sb_consume(struct strbuf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
		if (b->s)
			b->s[0] = '\0';
		return;
	}
	memmove(b->s, b->s + n, b->len - n);
	b->len -= n;
	b->s[b->len] = '\0';
}

void sb_reset(struct strbuf *b)
{
	sb_consume(b, b->len);
}

const char *sb_cstr(struct strbuf *b)
{
	if (b->oom)
		return NULL;
	if (!b->s && sb_grow(b, 0))
		return NULL;
	b->s[b->len] = '\0';
	return b->s;
}

char *sb_steal(struct strbuf *b, size_t *len)
{
	char *s = NULL;

	if (sb_cstr(b))
		s = b->s;
	else
		free(b->s);
	if (len)
		*len = s ? b->len : 0;
	b->s = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
	return s;
}

void sb_free(struct strbuf *b)
{
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
