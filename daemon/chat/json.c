// SPDX-License-Identifier: MIT
/*
 * json.c - JSON text as the chat templates' Jinja "tojson" filter writes
 * it (HF transformers' json.dumps with ensure_ascii=False; llama.cpp's
 * Jinja engine the same): ", " and ": " separators, keys in their order,
 * UTF-8 written raw, only '"', '\\' and control characters escaped (\b \f
 * \n \r \t, else \u00XX); with indent N, one member per line and ","
 * between. Integers as they are; reals as Python's repr writes them (the
 * shortest text that reads back to the same double: 0.1, 1.5, 1.0, 1e-05,
 * 1e+16), which llama.cpp's engine matches up to 6 significant digits and
 * for non-integral values (it writes 1.0 as "1" and 3.14159265 as
 * "3.14159"). Also the tool declaration the families render, normalized as
 * llama.cpp normalizes it.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

static void put_string(struct strbuf *b, const char *s, size_t n)
{
	sb_adds(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		size_t run = i;

		while (run < n && (unsigned char)s[run] >= 0x20 && s[run] != '"' && s[run] != '\\')
			run++;
		if (run > i) {
			sb_add(b, s + i, run - i);
			i = run - 1;
			continue;
		}
		switch (c) {
		case '"': sb_adds(b, "\\\""); break;
		case '\\': sb_adds(b, "\\\\"); break;
		case '\b': sb_adds(b, "\\b"); break;
		case '\f': sb_adds(b, "\\f"); break;
		case '\n': sb_adds(b, "\\n"); break;
		case '\r': sb_adds(b, "\\r"); break;
		case '\t': sb_adds(b, "\\t"); break;
		default: sb_addf(b, "\\u%04x", c); break;
		}
	}
	sb_adds(b, "\"");
}

/* Python's repr of a finite double. */
static void put_real(struct strbuf *b, double d)
{
	char digits[40], out[64];
	int prec, exp;
	char *e;

	if (!isfinite(d)) {	/* jansson never holds one; json.dumps: NaN */
		sb_adds(b, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
		return;
	}
	if (d == 0) {
		sb_adds(b, signbit(d) ? "-0.0" : "0.0");
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(digits, sizeof(digits), "%.*e", prec - 1, d);
		if (strtod(digits, NULL) == d)
			break;
	}
	/* digits: [-]D[.DDD]e[+-]XX */
	e = strchr(digits, 'e');
	exp = atoi(e + 1);
	*e = '\0';
	if (exp < -4 || exp >= 16) {
		/* mantissa without a trailing ".0"; exponent at least 2 digits */
		snprintf(out, sizeof(out), "%se%c%02d", digits, exp < 0 ? '-' : '+', abs(exp));
		sb_adds(b, out);
		return;
	}
	{
		char mant[40];
		size_t n = 0, i, nd;
		int neg = digits[0] == '-';
		const char *p = digits + neg;

		for (; *p; p++)
			if (*p != '.')
				mant[n++] = *p;
		mant[n] = '\0';
		nd = n;	/* significant digits, first one before the point */
		if (neg)
			sb_adds(b, "-");
		if (exp < 0) {
			sb_adds(b, "0.");
			for (i = 0; i < (size_t)(-exp - 1); i++)
				sb_adds(b, "0");
			sb_add(b, mant, nd);
			return;
		}
		if ((size_t)exp + 1 >= nd) {
			sb_add(b, mant, nd);
			for (i = nd; i < (size_t)exp + 1; i++)
				sb_adds(b, "0");
			sb_adds(b, ".0");
			return;
		}
		sb_add(b, mant, (size_t)exp + 1);
		sb_adds(b, ".");
		sb_add(b, mant + exp + 1, nd - (size_t)exp - 1);
	}
}

static void newline(struct strbuf *b, int indent, int level)
{
	sb_adds(b, "\n");
	for (int i = 0; i < indent * level; i++)
		sb_adds(b, " ");
}

static void put(struct strbuf *b, const json_t *v, int indent, int level)
{
	const char *item_sep = indent >= 0 ? "," : ", ";
	const char *key;
	json_t *x;
	size_t i, n;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		sb_adds(b, "{");
		n = 0;
		json_object_foreach((json_t *)v, key, x) {
			if (n++)
				sb_adds(b, item_sep);
			if (indent >= 0)
				newline(b, indent, level + 1);
			put_string(b, key, strlen(key));
			sb_adds(b, ": ");
			put(b, x, indent, level + 1);
		}
		if (n && indent >= 0)
			newline(b, indent, level);
		sb_adds(b, "}");
		break;
	case JSON_ARRAY:
		sb_adds(b, "[");
		json_array_foreach(v, i, x) {
			if (i)
				sb_adds(b, item_sep);
			if (indent >= 0)
				newline(b, indent, level + 1);
			put(b, x, indent, level + 1);
		}
		if (json_array_size(v) && indent >= 0)
			newline(b, indent, level);
		sb_adds(b, "]");
		break;
	case JSON_STRING:
		put_string(b, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER:
		sb_addf(b, "%lld", (long long)json_integer_value(v));
		break;
	case JSON_REAL:
		put_real(b, json_real_value(v));
		break;
	case JSON_TRUE:
		sb_adds(b, "true");
		break;
	case JSON_FALSE:
		sb_adds(b, "false");
		break;
	case JSON_NULL:
		sb_adds(b, "null");
		break;
	}
}

void chat_tojson(struct strbuf *b, const json_t *v, int indent)
{
	put(b, v, indent, 0);
}

void chat_tojson_plain(struct chat_prompt *p, const json_t *v, int indent)
{
	struct strbuf b = { 0 };

	chat_tojson(&b, v, indent);
	if (b.oom)
		p->oom = 1;
	else
		chat_plain(p, b.s, b.len);
	sb_free(&b);
}

json_t *chat_tool_decl(const struct chat_tool *t, int wrap)
{
	json_t *fn = t->function, *desc = json_object_get(fn, "description");
	json_t *params = json_object_get(fn, "parameters");
	json_t *f = json_object(), *w;

	if (!f || json_object_set_new(f, "name", json_string(t->name)) ||
	    json_object_set_new(f, "description", json_is_string(desc) ?
				json_incref(desc) : json_string("")) ||
	    json_object_set_new(f, "parameters", json_is_object(params) ?
				json_incref(params) : json_object())) {
		json_decref(f);
		return NULL;
	}
	if (!wrap)
		return f;
	w = json_object();
	if (!w || json_object_set_new(w, "type", json_string("function"))) {
		json_decref(w);
		json_decref(f);
		return NULL;
	}
	if (json_object_set_new(w, "function", f)) {	/* f is w's, or freed */
		json_decref(w);
		return NULL;
	}
	return w;
}

int chat_args_json(const char *args, size_t len, json_t **out)
{
	*out = json_loadb(args, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	return *out ? 0 : -1;
}

void chat_args_plain(struct chat_prompt *p, const struct chat_call *c)
{
	json_t *a;

	if (chat_args_json(c->arguments, c->arguments_len, &a)) {
		chat_plain(p, c->arguments, c->arguments_len);
		return;
	}
	chat_tojson_plain(p, a, -1);
	json_decref(a);
}
