/* SPDX-License-Identifier: MIT */
/*
 * strbuf.h - a growable byte string for the daemon's renderers (chat
 * templates, JSON, SSE frames). Allocation failure is sticky: the first failed
 * append sets oom and later appends do nothing, so a renderer checks once
 * at the end. Callers bound what they append; the buffer itself does not.
 */
#ifndef KVD_STRBUF_H
#define KVD_STRBUF_H

#include <stddef.h>

struct strbuf {
	char *s;		/* NUL-terminated when len > 0 or after sb_cstr */
	size_t len, cap;
	int oom;
};

void sb_add(struct strbuf *b, const void *p, size_t n);
void sb_adds(struct strbuf *b, const char *s);
void sb_addf(struct strbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (n <= len). */
void sb_consume(struct strbuf *b, size_t n);
void sb_reset(struct strbuf *b);
/* The contents as a C string ("" when empty); NULL after oom. */
const char *sb_cstr(struct strbuf *b);
/* Hand the malloc'd string to the caller (NULL after oom); b is empty. */
char *sb_steal(struct strbuf *b, size_t *len);
void sb_free(struct strbuf *b);

#endif
