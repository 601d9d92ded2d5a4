// SPDX-License-Identifier: MIT
/*
 * scan.c - facts read from a GGUF chat template's Jinja text without
 * running it: whether it holds a marker, and the value of a string
 * literal (a model's default system message lives in one, and differs
 * between models of one family). Literals are Jinja's (Python's) quoted
 * strings with \n \t \r \\ \' \" escapes; "a" + "b" concatenations are
 * joined; the name "today" stands for the date, kept as a hole.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

int chat_has(const char *tmpl, size_t len, const char *marker)
{
	return tmpl && memmem(tmpl, len, marker, strlen(marker)) != NULL;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
		p++;
	return p;
}

/* One quoted literal at p, appended to b; the byte after it, or NULL. */
static const char *literal(const char *p, const char *end, struct strbuf *b)
{
	char q;

	if (p >= end || (*p != '\'' && *p != '"'))
		return NULL;
	q = *p++;
	for (; p < end && *p != q; p++) {
		if (*p != '\\') {
			sb_add(b, p, 1);
			continue;
		}
		if (++p >= end)
			return NULL;
		switch (*p) {
		case 'n': sb_adds(b, "\n"); break;
		case 't': sb_adds(b, "\t"); break;
		case 'r': sb_adds(b, "\r"); break;
		case '\\': case '\'': case '"': sb_add(b, p, 1); break;
		default: return NULL;	/* an escape we do not read: no value */
		}
	}
	return p < end ? p + 1 : NULL;
}

int chat_scan_string(const char *tmpl, size_t len, const char *const *anchors,
		     struct chat_text *out)
{
	const char *end = tmpl + len, *p = tmpl;
	struct strbuf b = { 0 };

	memset(out, 0, sizeof(*out));
	if (!tmpl)
		return -1;
	for (; *anchors; anchors++) {
		p = memmem(p, (size_t)(end - p), *anchors, strlen(*anchors));
		if (!p)
			return -1;
		p += strlen(*anchors);
	}
	p = skip_ws(p, end);
	if (p < end && *p == '-')			/* the end of a statement */
		p++;
	if (p + 2 <= end && !memcmp(p, "%}", 2))
		p = skip_ws(p + 2, end);
	if (p + 2 <= end && !memcmp(p, "{{", 2)) {	/* an output statement */
		p += 2;
		if (p < end && *p == '-')
			p++;
		p = skip_ws(p, end);
	}
	for (;;) {
		if (p + 5 <= end && !memcmp(p, "today", 5)) {
			if (out->n_holes == CHAT_TEXT_HOLES)
				goto bad;
			out->hole[out->n_holes++] = b.len;
			p += 5;
		} else {
			p = literal(p, end, &b);
			if (!p)
				goto bad;
		}
		p = skip_ws(p, end);
		if (p >= end || *p != '+')
			break;
		p = skip_ws(p + 1, end);
	}
	if (b.oom)
		goto bad;
	out->s = sb_steal(&b, &out->len);
	if (!out->s)
		goto bad;
	return 0;
bad:
	sb_free(&b);
	memset(out, 0, sizeof(*out));
	return -1;
}
