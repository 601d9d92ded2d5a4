// SPDX-License-Identifier: MIT
/*
 * markup.c - which parts of a prompt are the chat template's own markup
 * (kvd_request.markup), and what follows from it: a piece of the prompt is
 * tokenized with special tokens only in its markup (kve_tokenize_spans),
 * so client and tool text never becomes a marker token (issue 36.5); and a
 * conversation remembers, byte by byte, which of its text was markup,
 * plain, or of no known kind (the model's own reply, a prompt tokenized
 * the old way), so that a later prompt continues its KV only where the two
 * agree: plain text that spells a cached conversation's markup does not
 * get that markup's tokens.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The markup spans of [off, off + len) of a request's prompt, made
 * relative to it (out: n + 1 entries at most). */
static size_t slice(const struct kvd_span *m, size_t n, size_t off, size_t len,
		    struct kve_span *out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t a = m[i].off, b = m[i].off + m[i].len;

		if (b <= off || a >= off + len)
			continue;
		a = a < off ? off : a;
		b = b > off + len ? off + len : b;
		out[k].off = a - off;
		out[k++].len = b - a;
	}
	return k;
}

int kvd_markup_tokenize(const struct kvd *d, const char *text, size_t len,
			const struct kvd_span *markup, size_t n_markup, size_t off,
			int add_bos, int32_t **ids_out)
{
	struct kve_span *sp;
	unsigned flags = add_bos ? KVE_TOKENIZE_BOS : KVE_TOKENIZE_CONT;
	size_t k;
	int32_t *ids;
	int n, rc;

	*ids_out = NULL;
	sp = malloc((n_markup + 1) * sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	k = slice(markup, n_markup, off, len, sp);
	n = kve_tokenize_spans(d->tok, text, len, sp, k, flags, NULL, 0);
	if (n < 0) {
		free(sp);
		return n;
	}
	ids = malloc(((size_t)n + 1) * sizeof(*ids));
	if (!ids) {
		free(sp);
		return -ENOMEM;
	}
	rc = kve_tokenize_spans(d->tok, text, len, sp, k, flags, ids, (size_t)n);
	free(sp);
	if (rc < 0) {
		free(ids);
		return rc;
	}
	*ids_out = ids;
	return n;
}

int kvd_markup_count(const struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup)
{
	struct kve_span *sp = malloc((n_markup + 1) * sizeof(*sp));
	int n;

	if (!sp)
		return -ENOMEM;
	n = kve_tokenize_spans(d->tok, text, len, sp, slice(markup, n_markup, 0, len, sp),
			       KVE_TOKENIZE_BOS, NULL, 0);
	free(sp);
	return n;
}

int kvd_count_prompt(struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup)
{
	return markup ? kvd_markup_count(d, text, len, markup, n_markup) :
		kve_tokenize(d->tok, text, len, 1, NULL, 0);
}

int kvd_markup_token_bytes(const struct kvd *d, int32_t id, char *buf, size_t size)
{
	int b = kve_token_bytes(d->tok, id, buf, size);

	/* a control marker of the markup: its text is what it stood for */
	if (b == 0)
		b = kve_token_special(d->tok, id, buf, size);
	return b < 0 ? 0 : b;
}

void kvd_markup_classes(uint8_t *cls, size_t len, const struct kvd_span *markup,
			size_t n_markup, size_t off, int known)
{
	memset(cls, known ? KVD_TEXT_PLAIN : KVD_TEXT_ANY, len);
	for (size_t i = 0; known && i < n_markup; i++) {
		size_t a = markup[i].off, b = markup[i].off + markup[i].len;

		if (b <= off || a >= off + len)
			continue;
		a = a < off ? off : a;
		b = b > off + len ? off + len : b;
		memset(cls + (a - off), KVD_TEXT_MARKUP, b - a);
	}
}

size_t kvd_markup_agree(const uint8_t *cls, size_t l, const struct kvd_span *markup,
			size_t n_markup, int known)
{
	size_t at = 0, i = 0;

	if (!known || !cls)
		return l;
	while (at < l) {
		/* the prompt's next run: plain up to the next markup span, then it */
		size_t m0 = i < n_markup ? markup[i].off : SIZE_MAX;
		size_t end = at < m0 ? (m0 < l ? m0 : l) :
			     (markup[i].off + markup[i].len < l ? markup[i].off + markup[i].len : l);
		uint8_t want = at < m0 ? KVD_TEXT_PLAIN : KVD_TEXT_MARKUP;

		for (; at < end; at++)
			if (cls[at] != KVD_TEXT_ANY && cls[at] != want)
				return at;
		if (want == KVD_TEXT_MARKUP)
			i++;
	}
	return l;
}
