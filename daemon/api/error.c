// SPDX-License-Identifier: MIT
/*
 * error.c - OpenAI-shaped error bodies and the mapping from the
 * orchestrator's error kinds to HTTP statuses (see error.h).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "error.h"
#include "strbuf.h"

/* snprintf may cut a multi-byte character; JSON needs whole ones. */
static void trim_utf8(char *s)
{
	size_t n = strlen(s), i = n, need;
	unsigned char c;

	while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && n - i < 3)
		i--;
	if (i == 0)
		return;
	c = (unsigned char)s[i - 1];
	if (c < 0x80)
		return;
	need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
	if (n - (i - 1) < need)
		s[i - 1] = '\0';
}

void api_error_set(struct api_error *e, int status, const char *type,
		   const char *code, const char *param, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = type;
	e->code = code;
	e->retry_after_s = 0;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	trim_utf8(e->param);
	trim_utf8(e->message);
}

void api_error_from_kvd(struct api_error *e, const struct kvd_error *k)
{
	static const struct {
		int status;
		const char *type, *code;
	} map[] = {
		[KVD_ERR_NONE] = { 500, "server_error", NULL },
		[KVD_ERR_INVALID] = { 400, API_INVALID, NULL },
		[KVD_ERR_TOO_LONG] = { 400, API_INVALID, "context_length_exceeded" },
		[KVD_ERR_NOT_FOUND] = { 404, API_INVALID, "not_found" },
		[KVD_ERR_BUSY] = { 429, "rate_limit_error", "rate_limit_exceeded" },
		[KVD_ERR_QUOTA] = { 429, "insufficient_quota", "insufficient_quota" },
		[KVD_ERR_UNAVAILABLE] = { 503, "server_error", "service_unavailable" },
		[KVD_ERR_INTERNAL] = { 500, "server_error", NULL },
	};
	unsigned kind = (unsigned)k->kind;

	if (kind >= sizeof(map) / sizeof(map[0]))
		kind = KVD_ERR_INTERNAL;
	api_error_set(e, map[kind].status, map[kind].type,
		      k->code ? k->code : map[kind].code, k->param, "%s",
		      k->message[0] ? k->message : "internal error");
	if (kind == KVD_ERR_BUSY || kind == KVD_ERR_QUOTA)
		e->retry_after_s = k->retry_after_s ? k->retry_after_s : 1;
}

/* Length of the valid UTF-8 sequence at p, 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	size_t need;
	unsigned cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		need = 2, cp = p[0] & 0x1F;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		need = 3, cp = p[0] & 0x0F;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		need = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((need == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
	    (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0;
	return need;
}

json_t *api_json_string_lossy(const char *s, size_t n)
{
	struct strbuf b = { 0 };
	json_t *j;

	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq((const unsigned char *)s + i, n - i);

		if (k) {
			sb_add(&b, s + i, k);
			i += k;
		} else {
			sb_adds(&b, "\xEF\xBF\xBD");
			i++;
		}
	}
	j = b.oom ? NULL : json_stringn(b.len ? b.s : "", b.len);
	sb_free(&b);
	return j;
}

char *api_error_json(const struct api_error *e)
{
	json_t *o = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error",
			      "message", api_json_string_lossy(e->message, strlen(e->message)),
			      "type", e->type ? e->type : "server_error",
			      "param", e->param[0] ?
				api_json_string_lossy(e->param, strlen(e->param)) : json_null(),
			      "code", e->code ? json_string(e->code) : json_null());
	char *s;

	if (!o)
		return NULL;
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}
