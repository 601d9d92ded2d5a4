// SPDX-License-Identifier: MIT
/*
 * json_schema.c - turns a constrained-decoding spec into the byte NFA of
 * grammar.c: a JSON Schema (the subset in Documentation/constrain.md;
 * other keywords are refused, naming them), any JSON object, or tool
 * calls over an OpenAI tools array, written as <tool_call>{"name": ...,
 * "arguments": ...}</tool_call> or in another family's syntax
 * (struct kvc_call_syntax). Parses with jansson. What it generates is always a
 * subset of what the schema accepts: properties in declared order,
 * canonical numbers and enum values, bounded whitespace.
 */
#define _GNU_SOURCE
#include "constrain_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_SCHEMA_DEPTH 48	/* nested subschemas, $ref included */
#define MAX_STR_UNROLL 256	/* longer maxLength: strings stop at 256 */
#define MAX_ITEMS_UNROLL 16	/* larger maxItems: arrays stop at 16 */
#define INT_DIGITS 18		/* |numbers| < 1e18 */
#define FREE_FRAC 12		/* fraction digits of numbers without bounds */
#define MAX_FRAC 40

struct sb {
	struct nfa *n;
	json_t *root;		/* $ref resolution */
	uint32_t ws;
	int32_t v_obj, v_arr;	/* free-form containers' entries (-1: not built) */
	char *err;
	size_t errlen;
	int bad;
	int depth;
	const char *refs[MAX_SCHEMA_DEPTH];
	int n_refs;
};

static int32_t fail(struct sb *b, const char *path, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (b->bad)
		return -1;
	b->bad = -EINVAL;
	k = snprintf(b->err, b->errlen, "%s: ", *path ? path : "schema");
	if (k < 0 || (size_t)k >= b->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->err + k, b->errlen - k, fmt, ap);
	va_end(ap);
	return -1;
}

/* jansson could not allocate (a key's or a literal's text): out of memory,
 * not a fault of the schema (kvc_spec_nfa names it). */
static int32_t oom(struct sb *b)
{
	if (!b->bad)
		b->bad = -ENOMEM;
	return -1;
}

static int32_t st(struct sb *b)
{
	return nfa_state(b->n);
}

static int32_t ws(struct sb *b, int32_t from)
{
	return nfa_ws(b->n, from, b->ws);
}

static int32_t lit(struct sb *b, int32_t from, const char *s)
{
	return nfa_lit(b->n, from, s, strlen(s));
}

/* ---- strings -------------------------------------------------------- */

/* One character of string content: printable ASCII, an escape, or a
 * well-formed UTF-8 sequence (no surrogates, none above U+10FFFF). */
static int32_t str_char(struct sb *b, int32_t from)
{
	struct nfa *n = b->n;
	int32_t end = st(b), esc = st(b), c1 = st(b), c2 = st(b);
	int32_t u1 = st(b), u2a = st(b), u2b = st(b), u3 = st(b), u4 = st(b);
	int32_t e0 = st(b), ed = st(b), f0 = st(b), f4 = st(b);

	nfa_byte(n, from, 0x20, 0x21, end);
	nfa_byte(n, from, 0x23, 0x5b, end);
	nfa_byte(n, from, 0x5d, 0x7f, end);
	nfa_byte(n, from, '\\', '\\', esc);
	nfa_byte(n, esc, '"', '"', end);
	nfa_byte(n, esc, '\\', '\\', end);
	nfa_byte(n, esc, '/', '/', end);
	nfa_byte(n, esc, 'b', 'b', end);
	nfa_byte(n, esc, 'f', 'f', end);
	nfa_byte(n, esc, 'n', 'n', end);
	nfa_byte(n, esc, 'r', 'r', end);
	nfa_byte(n, esc, 't', 't', end);
	nfa_byte(n, esc, 'u', 'u', u1);
	/* \uXXXX outside the surrogates D800-DFFF */
	nfa_byte(n, u1, '0', '9', u2a);
	nfa_byte(n, u1, 'a', 'c', u2a);
	nfa_byte(n, u1, 'A', 'C', u2a);
	nfa_byte(n, u1, 'e', 'f', u2a);
	nfa_byte(n, u1, 'E', 'F', u2a);
	nfa_byte(n, u1, 'd', 'd', u2b);
	nfa_byte(n, u1, 'D', 'D', u2b);
	nfa_byte(n, u2b, '0', '7', u3);
	nfa_byte(n, u2a, '0', '9', u3);
	nfa_byte(n, u2a, 'a', 'f', u3);
	nfa_byte(n, u2a, 'A', 'F', u3);
	nfa_byte(n, u3, '0', '9', u4);
	nfa_byte(n, u3, 'a', 'f', u4);
	nfa_byte(n, u3, 'A', 'F', u4);
	nfa_byte(n, u4, '0', '9', end);
	nfa_byte(n, u4, 'a', 'f', end);
	nfa_byte(n, u4, 'A', 'F', end);
	/* UTF-8 */
	nfa_byte(n, c1, 0x80, 0xbf, end);
	nfa_byte(n, c2, 0x80, 0xbf, c1);
	nfa_byte(n, from, 0xc2, 0xdf, c1);
	nfa_byte(n, from, 0xe0, 0xe0, e0);
	nfa_byte(n, e0, 0xa0, 0xbf, c1);
	nfa_byte(n, from, 0xe1, 0xec, c2);
	nfa_byte(n, from, 0xee, 0xef, c2);
	nfa_byte(n, from, 0xed, 0xed, ed);
	nfa_byte(n, ed, 0x80, 0x9f, c1);
	nfa_byte(n, from, 0xf0, 0xf0, f0);
	nfa_byte(n, f0, 0x90, 0xbf, c2);
	{
		int32_t c3 = st(b);
		nfa_byte(n, c3, 0x80, 0xbf, c2);
		nfa_byte(n, from, 0xf1, 0xf3, c3);
	}
	nfa_byte(n, from, 0xf4, 0xf4, f4);
	nfa_byte(n, f4, 0x80, 0x8f, c2);
	return end;
}

/* '"' chars{min,max} '"'; max < 0: unbounded */
static int32_t string_len(struct sb *b, int32_t from, long min, long max)
{
	int32_t cur = lit(b, from, "\""), end = st(b);
	long k;

	if (max > MAX_STR_UNROLL)
		max = MAX_STR_UNROLL;
	for (k = 0;; k++) {
		if (k >= min)
			nfa_byte(b->n, cur, '"', '"', end);
		if (max >= 0 && k >= max)
			break;
		if (max < 0 && k >= min) {	/* loop here */
			int32_t e = str_char(b, cur);
			nfa_eps(b->n, e, cur);
			break;
		}
		cur = str_char(b, cur);
		if (cur < 0)
			break;
	}
	return end;
}

/* ---- numbers -------------------------------------------------------- */

/* A non-negative decimal bound: integer digits (no leading zeros, "0"
 * for zero) and fraction digits (no trailing zeros). */
struct bound {
	int present, excl;
	char i[INT_DIGITS + 2], f[MAX_FRAC + 2];
	int ni, nf;
};

/* Shortest decimal that reads back as v (v >= 0): comparisons against it
 * are exact, and decimal order implies double order. */
static int bound_set(struct bound *bd, double v, int excl)
{
	char buf[64], dig[24], *e;
	int prec, nd = 0, exp10, p, k;

	memset(bd, 0, sizeof(*bd));
	bd->present = 1;
	bd->excl = excl;
	if (v == 0) {
		strcpy(bd->i, "0");
		bd->ni = 1;
		return 0;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	for (k = 0; buf[k] && buf[k] != 'e'; k++)
		if (buf[k] >= '0' && buf[k] <= '9')
			dig[nd++] = buf[k];
	e = strchr(buf, 'e');
	if (!e)
		return -1;
	exp10 = atoi(e + 1);
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	p = exp10 + 1;		/* digits before the point */
	if (p > INT_DIGITS)
		return -1;
	if (p <= 0) {
		strcpy(bd->i, "0");
		bd->ni = 1;
		if (-p + nd > MAX_FRAC)
			return -1;
		memset(bd->f, '0', -p);
		memcpy(bd->f - p, dig, nd);
		bd->nf = -p + nd;
	} else {
		for (k = 0; k < p; k++)
			bd->i[k] = k < nd ? dig[k] : '0';
		bd->ni = p;
		for (k = p; k < nd; k++)
			bd->f[bd->nf++] = dig[k];
	}
	while (bd->nf && bd->f[bd->nf - 1] == '0')
		bd->nf--;
	return 0;
}

struct numgen {
	struct sb *b;
	const struct bound *lo, *hi;
	int L, fr;
	int32_t end;
	int32_t *memo;		/* [p][phase][tl][th] */
	/* nodes bound by neither side depend only on the digits still to
	 * read (integer part) or read (fraction): shared by all lengths */
	int32_t *free_int, *free_frac;
};

static char bdigit(const struct bound *bd, int L, int p)
{
	if (p < L)
		return bd->i[p];
	return p - L < bd->nf ? bd->f[p - L] : '0';
}

/* Whether the bound's digits from p on are all zero; p >= L: the integer
 * part has been read, so only fraction digits are left. */
static int rest_zero(const struct bound *bd, int L, int p)
{
	int k;

	for (k = p - L; k < bd->nf; k++)
		if (bd->f[k] != '0')
			return 0;
	return 1;
}

/* phase 0: integer digits (p <= L); 1: fraction, p - L digits read */
static int32_t num_node(struct numgen *g, int p, int phase, int tl, int th)
{
	struct sb *b = g->b;
	int32_t *slot = &g->memo[((p * 2 + phase) * 2 + tl) * 2 + th], s;
	int d;

	if (!tl && !th && (phase || p > 0))	/* p 0: no leading zero */
		slot = phase ? &g->free_frac[p - g->L] : &g->free_int[g->L - p];

	if (*slot >= 0)
		return *slot;
	s = st(b);
	*slot = s;
	if (s < 0)
		return -1;
	if ((phase == 0 && p == g->L) || (phase == 1 && p > g->L)) {
		int lo_ok = !tl || (rest_zero(g->lo, g->L, p) && !g->lo->excl);
		int hi_ok = !th || !(g->hi->excl && rest_zero(g->hi, g->L, p));
		if (lo_ok && hi_ok)
			nfa_eps(b->n, s, g->end);
	}
	if (phase == 0 && p == g->L) {
		if (g->fr > 0)
			nfa_byte(b->n, s, '.', '.', num_node(g, p, 1, tl, th));
		return s;
	}
	if (phase == 1 && p >= g->L + g->fr)
		return s;
	for (d = (phase == 0 && p == 0 && g->L > 1) ? 1 : 0; d <= 9; d++) {
		int a = tl ? bdigit(g->lo, g->L, p) - '0' : 0;
		int z = th ? bdigit(g->hi, g->L, p) - '0' : 9;

		if (d < a || d > z)
			continue;
		nfa_byte(b->n, s, (uint8_t)('0' + d), (uint8_t)('0' + d),
			 num_node(g, p + 1, phase, tl && d == a, th && d == z));
	}
	return s;
}

/* Non-negative decimals in [lo, hi] (either may be absent), integer part
 * of at most INT_DIGITS digits, fr fraction digits at most. */
static void nonneg_range(struct sb *b, int32_t from, const struct bound *lo,
			 const struct bound *hi, int fr, int32_t end)
{
	static const struct bound none;
	int lmin = lo->present ? lo->ni : 1, lmax = hi->present ? hi->ni : INT_DIGITS, L;
	int32_t free_int[INT_DIGITS + 2], free_frac[MAX_FRAC + 2];
	size_t cells;

	memset(free_int, 0xff, sizeof(free_int));
	memset(free_frac, 0xff, sizeof(free_frac));
	for (L = lmin; L <= lmax && !b->n->failed; L++) {
		struct numgen g = { .b = b, .lo = lo->present && lo->ni == L ? lo : &none,
				    .hi = hi->present && hi->ni == L ? hi : &none,
				    .L = L, .fr = fr, .end = end,
				    .free_int = free_int, .free_frac = free_frac };
		cells = (size_t)(L + fr + 2) * 8;
		g.memo = malloc(cells * sizeof(int32_t));
		if (!g.memo) {
			b->n->failed = -ENOMEM;
			return;
		}
		memset(g.memo, 0xff, cells * sizeof(int32_t));
		nfa_eps(b->n, from, num_node(&g, 0, 0, g.lo != &none, g.hi != &none));
		free(g.memo);
	}
}

static int get_num(json_t *s, const char *k, double *v)
{
	json_t *x = json_object_get(s, k);

	if (!x || !json_is_number(x))
		return 0;
	*v = json_number_value(x);
	return 1;
}

static int32_t number(struct sb *b, int32_t from, json_t *s, int is_int, const char *path)
{
	struct bound plo = { 0 }, phi = { 0 }, nlo = { 0 }, nhi = { 0 };
	double lo = 0, hi = 0, v;
	int has_lo = 0, has_hi = 0, lo_ex = 0, hi_ex = 0, fr, free_num;
	int32_t end = st(b), numend = st(b);
	json_t *x;

	if (get_num(s, "minimum", &v)) {
		has_lo = 1;
		lo = v;
	}
	if ((x = json_object_get(s, "exclusiveMinimum"))) {
		if (json_is_boolean(x)) {
			lo_ex = json_is_true(x);
		} else if (json_is_number(x)) {
			v = json_number_value(x);
			if (!has_lo || v >= lo) {
				has_lo = 1;
				lo = v;
				lo_ex = 1;
			}
		} else {
			return fail(b, path, "exclusiveMinimum must be a number");
		}
	}
	if (get_num(s, "maximum", &v)) {
		has_hi = 1;
		hi = v;
	}
	if ((x = json_object_get(s, "exclusiveMaximum"))) {
		if (json_is_boolean(x)) {
			hi_ex = json_is_true(x);
		} else if (json_is_number(x)) {
			v = json_number_value(x);
			if (!has_hi || v <= hi) {
				has_hi = 1;
				hi = v;
				hi_ex = 1;
			}
		} else {
			return fail(b, path, "exclusiveMaximum must be a number");
		}
	}
	if ((json_object_get(s, "minimum") && !json_is_number(json_object_get(s, "minimum"))) ||
	    (json_object_get(s, "maximum") && !json_is_number(json_object_get(s, "maximum"))))
		return fail(b, path, "minimum and maximum must be numbers");
	if (!has_lo)
		lo_ex = 0;
	if (!has_hi)
		hi_ex = 0;
	/* beyond +-1e18 a bound constrains nothing we generate */
	if (has_lo && lo <= -1e18)
		has_lo = 0;
	if (has_hi && hi >= 1e18)
		has_hi = 0;
	if ((has_lo && lo >= 1e18) || (has_hi && hi <= -1e18))
		return fail(b, path, "bounds beyond +-1e18 are not supported");
	free_num = !has_lo && !has_hi && !is_int;
	fr = is_int ? 0 : FREE_FRAC;
	/* x >= 0 */
	if (!has_hi || hi > 0 || (hi == 0 && !hi_ex)) {
		if (has_lo && lo >= 0) {
			if (bound_set(&plo, lo, lo_ex))
				return fail(b, path, "minimum %g has too many digits", lo);
		} else {
			bound_set(&plo, 0, 0);
		}
		if (has_hi && bound_set(&phi, hi, hi_ex))
			return fail(b, path, "maximum %g has too many digits", hi);
		if (!is_int && (plo.nf > fr || phi.nf > fr))
			fr = plo.nf > phi.nf ? plo.nf : phi.nf;
	}
	/* x < 0 as -y */
	if (!has_lo || lo < 0) {
		if (has_hi && hi < 0) {
			if (bound_set(&nlo, -hi, hi_ex))
				return fail(b, path, "maximum %g has too many digits", hi);
		} else {
			bound_set(&nlo, 0, 1);
		}
		if (has_lo && bound_set(&nhi, -lo, lo_ex))
			return fail(b, path, "minimum %g has too many digits", lo);
		if (!is_int && (nlo.nf > fr || nhi.nf > fr))
			fr = nlo.nf > nhi.nf ? nlo.nf : nhi.nf;
	}
	if (fr > MAX_FRAC)
		fr = MAX_FRAC;
	if (plo.present)
		nonneg_range(b, from, &plo, &phi, fr, numend);
	if (nlo.present)
		nonneg_range(b, lit(b, from, "-"), &nlo, &nhi, fr, numend);
	nfa_eps(b->n, numend, end);
	if (free_num) {	/* exponent: only without bounds */
		int32_t e = st(b), e2 = st(b), d1 = st(b), d2 = st(b);
		nfa_byte(b->n, numend, 'e', 'e', e);
		nfa_byte(b->n, numend, 'E', 'E', e);
		nfa_byte(b->n, e, '+', '+', e2);
		nfa_byte(b->n, e, '-', '-', e2);
		nfa_eps(b->n, e, e2);
		nfa_byte(b->n, e2, '0', '9', d1);
		nfa_byte(b->n, d1, '0', '9', d2);
		nfa_eps(b->n, d1, end);
		nfa_eps(b->n, d2, end);
	}
	return end;
}

/* ---- literals and free-form values ---------------------------------- */

/* The canonical text of a JSON value (reals: the shortest that reads back). */
static char *dump_value(json_t *v)
{
	if (json_is_real(v)) {
		double x = json_real_value(v);
		char buf[64];
		int prec;

		if (!isfinite(x))
			return NULL;
		for (prec = 1; prec <= 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*g", prec, x);
			if (strtod(buf, NULL) == x)
				break;
		}
		return strdup(buf);
	}
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static int32_t literal(struct sb *b, int32_t from, json_t *v, const char *path)
{
	char *t = dump_value(v);
	int32_t e;

	if (!t)	/* jansson refuses NaN and infinities: only memory is left */
		return json_is_real(v) && !isfinite(json_real_value(v)) ?
		       fail(b, path, "cannot serialise an enum or const value") : oom(b);
	e = lit(b, from, t);
	free(t);
	return e;
}

static int32_t free_value(struct sb *b, int32_t from, int containers);

/* The free-form containers, once per grammar: called, so they nest. */
static void build_free(struct sb *b)
{
	int32_t x, o, m, k, c, a, e;

	if (b->v_obj >= 0 || b->bad)
		return;
	b->v_obj = st(b);
	b->v_arr = st(b);
	x = st(b);
	if (x < 0)
		return;
	b->n->flags[x] |= NF_RETURN;
	/* object */
	o = ws(b, lit(b, b->v_obj, "{"));
	nfa_byte(b->n, o, '}', '}', x);
	m = st(b);
	nfa_eps(b->n, o, m);
	k = ws(b, lit(b, ws(b, string_len(b, m, 0, -1)), ":"));
	k = ws(b, free_value(b, k, 1));
	nfa_byte(b->n, k, '}', '}', x);
	c = ws(b, lit(b, k, ","));
	nfa_eps(b->n, c, m);
	/* array: one item sub-automaton, entered after '[' or after ',' */
	a = ws(b, lit(b, b->v_arr, "["));
	nfa_byte(b->n, a, ']', ']', x);
	m = st(b);
	nfa_eps(b->n, a, m);
	e = ws(b, free_value(b, m, 1));
	nfa_byte(b->n, e, ']', ']', x);
	c = ws(b, lit(b, e, ","));
	nfa_eps(b->n, c, m);
}

/* containers: 1 objects and arrays too (by call), 0 scalars only */
static int32_t free_value(struct sb *b, int32_t from, int containers)
{
	int32_t end = st(b);

	nfa_eps(b->n, string_len(b, from, 0, -1), end);
	nfa_eps(b->n, number(b, from, NULL, 0, ""), end);
	nfa_eps(b->n, lit(b, from, "true"), end);
	nfa_eps(b->n, lit(b, from, "false"), end);
	nfa_eps(b->n, lit(b, from, "null"), end);
	if (containers) {
		if (b->v_obj < 0) {
			/* build_free recurses into free_value: build first */
			build_free(b);
		}
		nfa_call(b->n, from, b->v_obj, end);
		nfa_call(b->n, from, b->v_arr, end);
	}
	return end;
}

/* ---- schemas -------------------------------------------------------- */

static const char *const annotations[] = {
	"title", "description", "default", "examples", "$schema", "$id",
	"$comment", "deprecated", "readOnly", "writeOnly", "$defs",
	"definitions", NULL,
};

static const char *const keywords[] = {
	"type", "enum", "const", "properties", "required", "additionalProperties",
	"items", "minItems", "maxItems", "minLength", "maxLength", "minimum",
	"maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "allOf",
	"$ref", NULL,
};

static int in_list(const char *k, const char *const *l)
{
	for (; *l; l++)
		if (!strcmp(k, *l))
			return 1;
	return 0;
}

static int32_t value(struct sb *b, int32_t from, json_t *s, const char *path);

static void subpath(char *out, size_t n, const char *path, const char *a, const char *c)
{
	snprintf(out, n, "%s/%s%s%s", path, a, c ? "/" : "", c ? c : "");
}

static int get_len(struct sb *b, json_t *s, const char *k, long *v, const char *path)
{
	json_t *x = json_object_get(s, k);

	if (!x)
		return 0;
	if (!json_is_integer(x) || json_integer_value(x) < 0 ||
	    json_integer_value(x) > 1000000) {
		fail(b, path, "%s must be a non-negative integer", k);
		return -1;
	}
	*v = (long)json_integer_value(x);
	return 1;
}

static int32_t object(struct sb *b, int32_t from, json_t *s, const char *path)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	json_t *addl = json_object_get(s, "additionalProperties");
	int32_t end = st(b), o, f, r;
	const char *key;
	json_t *ps;
	size_t i;
	char sp[512];

	if (props && !json_is_object(props))
		return fail(b, path, "properties must be an object");
	if (req && !json_is_array(req))
		return fail(b, path, "required must be an array");
	for (i = 0; req && i < json_array_size(req); i++) {
		json_t *r0 = json_array_get(req, i);
		if (!json_is_string(r0))
			return fail(b, path, "required must list strings");
		if (!props || !json_object_get(props, json_string_value(r0)))
			return fail(b, path, "required property '%s' is not in properties",
				    json_string_value(r0));
	}
	if (!props && (!addl || json_is_true(addl))) {	/* any object */
		build_free(b);
		nfa_call(b->n, from, b->v_obj, end);
		return end;
	}
	o = ws(b, lit(b, from, "{"));
	if (!props && json_is_object(addl)) {	/* a map: keys free, values typed */
		int32_t m = st(b), k, c;
		nfa_byte(b->n, o, '}', '}', end);
		nfa_eps(b->n, o, m);
		k = ws(b, lit(b, ws(b, string_len(b, m, 0, -1)), ":"));
		subpath(sp, sizeof(sp), path, "additionalProperties", NULL);
		k = ws(b, value(b, k, addl, sp));
		nfa_byte(b->n, k, '}', '}', end);
		c = ws(b, lit(b, k, ","));
		nfa_eps(b->n, c, m);
		return end;
	}
	/* declared properties in order; optional ones may be skipped.
	 * f: nothing written yet, r: something written (needs a comma) */
	f = o;
	r = st(b);
	json_object_foreach(props, key, ps) {
		int32_t m = st(b), f2 = st(b), r2 = st(b), v;
		int required = 0;
		size_t j;
		json_t *kj;
		char *kt;

		for (j = 0; req && j < json_array_size(req); j++)
			if (!strcmp(json_string_value(json_array_get(req, j)), key))
				required = 1;
		nfa_eps(b->n, f, m);
		nfa_eps(b->n, ws(b, lit(b, r, ",")), m);
		kj = json_string(key);
		kt = kj ? json_dumps(kj, JSON_ENCODE_ANY) : NULL;
		json_decref(kj);
		if (!kt)
			return oom(b);
		v = ws(b, lit(b, ws(b, lit(b, m, kt)), ":"));
		free(kt);
		subpath(sp, sizeof(sp), path, "properties", key);
		v = ws(b, value(b, v, ps, sp));
		if (b->bad)
			return -1;
		nfa_eps(b->n, v, r2);
		if (!required) {
			nfa_eps(b->n, f, f2);
			nfa_eps(b->n, r, r2);
		}
		f = f2;
		r = r2;
	}
	nfa_byte(b->n, f, '}', '}', end);
	nfa_byte(b->n, r, '}', '}', end);
	return end;
}

static int32_t array(struct sb *b, int32_t from, json_t *s, const char *path)
{
	json_t *items = json_object_get(s, "items");
	long mn = 0, mx = -1, k, copies;
	int32_t end = st(b), cur, after;
	char sp[512];

	if (get_len(b, s, "minItems", &mn, path) < 0 || get_len(b, s, "maxItems", &mx, path) < 0)
		return -1;
	if (items && !json_is_object(items) && !json_is_boolean(items))
		return fail(b, path, "items must be a schema (tuple items are not supported)");
	if (mx >= 0 && mn > mx)
		return fail(b, path, "minItems above maxItems");
	if (mn > MAX_ITEMS_UNROLL)
		return fail(b, path, "minItems above %d is not supported", MAX_ITEMS_UNROLL);
	if (mx > MAX_ITEMS_UNROLL)
		mx = MAX_ITEMS_UNROLL;
	subpath(sp, sizeof(sp), path, "items", NULL);
	cur = ws(b, lit(b, from, "["));
	if (mn == 0)
		nfa_byte(b->n, cur, ']', ']', end);
	if (mx == 0)
		return end;
	/* item 1 .. max (or min, then a loop) */
	copies = mx >= 0 ? mx : (mn > 1 ? mn : 1);
	for (k = 1; k <= copies; k++) {
		after = ws(b, items ? value(b, cur, items, sp) : free_value(b, cur, 1));
		if (b->bad)
			return -1;
		if (k >= mn)
			nfa_byte(b->n, after, ']', ']', end);
		if (k == copies) {
			if (mx < 0) {	/* unbounded: one more copy in a loop */
				int32_t c = ws(b, lit(b, after, ",")), e;
				e = ws(b, items ? value(b, c, items, sp) : free_value(b, c, 1));
				nfa_eps(b->n, e, after);
			}
			break;
		}
		cur = ws(b, lit(b, after, ","));
	}
	return end;
}

/* 1: v is of type t, 0: it is not, -1: t names no type */
static int json_type_ok(json_t *v, const char *t)
{
	if (!strcmp(t, "string")) return json_is_string(v);
	if (!strcmp(t, "integer")) return json_is_integer(v) ||
		(json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
	if (!strcmp(t, "number")) return json_is_number(v);
	if (!strcmp(t, "boolean")) return json_is_boolean(v);
	if (!strcmp(t, "null")) return json_is_null(v);
	if (!strcmp(t, "object")) return json_is_object(v);
	if (!strcmp(t, "array")) return json_is_array(v);
	return -1;
}

static int32_t typed(struct sb *b, int32_t from, json_t *s, const char *t, const char *path)
{
	if (!strcmp(t, "string")) {
		long mn = 0, mx = -1;
		if (get_len(b, s, "minLength", &mn, path) < 0 ||
		    get_len(b, s, "maxLength", &mx, path) < 0)
			return -1;
		if (mx >= 0 && mn > mx)
			return fail(b, path, "minLength above maxLength");
		if (mn > MAX_STR_UNROLL)
			return fail(b, path, "minLength above %d is not supported", MAX_STR_UNROLL);
		return string_len(b, from, mn, mx);
	}
	if (!strcmp(t, "integer"))
		return number(b, from, s, 1, path);
	if (!strcmp(t, "number"))
		return number(b, from, s, 0, path);
	if (!strcmp(t, "boolean")) {
		int32_t end = st(b);
		nfa_eps(b->n, lit(b, from, "true"), end);
		nfa_eps(b->n, lit(b, from, "false"), end);
		return end;
	}
	if (!strcmp(t, "null"))
		return lit(b, from, "null");
	if (!strcmp(t, "object"))
		return object(b, from, s, path);
	if (!strcmp(t, "array"))
		return array(b, from, s, path);
	return fail(b, path, "unknown type '%s'", t);
}

static json_t *resolve(struct sb *b, const char *ref, const char *path)
{
	json_t *cur = b->root;
	const char *p = ref;

	if (strncmp(ref, "#/", 2)) {
		fail(b, path, "$ref '%s' is not supported (only local '#/...' references)", ref);
		return NULL;
	}
	p += 2;
	while (*p && cur) {
		size_t n = 0, i;
		const char *q = strchr(p, '/');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		char *tok = malloc(len + 1);	/* a key of any length */

		if (!tok) {
			oom(b);
			return NULL;
		}
		for (i = 0; i < len; i++) {
			if (p[i] == '~' && i + 1 < len && (p[i + 1] == '0' || p[i + 1] == '1')) {
				tok[n++] = p[i + 1] == '0' ? '~' : '/';
				i++;
			} else {
				tok[n++] = p[i];
			}
		}
		tok[n] = 0;
		if (json_is_object(cur))
			cur = json_object_get(cur, tok);
		else if (json_is_array(cur))
			cur = json_array_get(cur, (size_t)strtoul(tok, NULL, 10));
		else
			cur = NULL;
		free(tok);
		p += len;
		if (*p == '/')
			p++;
	}
	if (!cur)
		fail(b, path, "$ref '%s' does not resolve", ref);
	return cur;
}

static int only_annotations(json_t *s, const char *except)
{
	const char *k;
	json_t *v;

	json_object_foreach(s, k, v)
		if (strcmp(k, except) && !in_list(k, annotations))
			return 0;
	return 1;
}

static int32_t value(struct sb *b, int32_t from, json_t *s, const char *path)
{
	const char *k;
	json_t *v, *t;
	int32_t end;
	char sp[512];

	if (b->bad || from < 0)
		return -1;
	if (json_is_true(s))
		return free_value(b, from, 1);
	if (json_is_false(s))
		return fail(b, path, "schema false admits no value");
	if (!json_is_object(s))
		return fail(b, path, "a schema must be an object or a boolean");
	if (++b->depth > MAX_SCHEMA_DEPTH) {
		b->depth--;
		return fail(b, path, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
	}
	json_object_foreach(s, k, v)
		if (!in_list(k, keywords) && !in_list(k, annotations)) {
			b->depth--;
			return fail(b, path, "unsupported keyword '%s'", k);
		}
	end = -1;
	if ((v = json_object_get(s, "$ref"))) {
		const char *ref = json_string_value(v);
		json_t *target;
		int i;

		if (!ref)
			end = fail(b, path, "$ref must be a string");
		else if (!only_annotations(s, "$ref"))
			end = fail(b, path, "$ref beside other keywords is not supported");
		else {
			for (i = 0; i < b->n_refs; i++)
				if (!strcmp(b->refs[i], ref))
					break;
			if (i < b->n_refs)
				end = fail(b, path, "recursive $ref '%s' is not supported", ref);
			else if ((target = resolve(b, ref, path))) {
				b->refs[b->n_refs++] = ref;
				end = value(b, from, target, ref + 1);
				b->n_refs--;
			}
		}
	} else if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "allOf"))) {
		int any = json_object_get(s, "anyOf") != NULL;
		size_t i;

		if (!json_is_array(v) || !json_array_size(v))
			end = fail(b, path, "%s must be a non-empty array", any ? "anyOf" : "allOf");
		else if (!only_annotations(s, any ? "anyOf" : "allOf"))
			end = fail(b, path, "%s beside other keywords is not supported",
				   any ? "anyOf" : "allOf");
		else if (!any && json_array_size(v) != 1)
			end = fail(b, path, "allOf with more than one schema is not supported");
		else {
			end = st(b);
			for (i = 0; i < json_array_size(v) && !b->bad; i++) {
				char idx[24];
				snprintf(idx, sizeof(idx), "%zu", i);
				subpath(sp, sizeof(sp), path, any ? "anyOf" : "allOf", idx);
				nfa_eps(b->n, value(b, from, json_array_get(v, i), sp), end);
			}
		}
	} else if ((v = json_object_get(s, "enum")) || (v = json_object_get(s, "const"))) {
		int is_const = !json_object_get(s, "enum");
		size_t i, n = is_const ? 1 : json_array_size(v);
		int any = 0;

		t = json_object_get(s, "type");
		if (!is_const && !json_is_array(v))
			end = fail(b, path, "enum must be an array");
		else {
			end = st(b);
			for (i = 0; i < n && !b->bad; i++) {
				json_t *e = is_const ? v : json_array_get(v, i);
				int ok = !t, r;
				size_t j;

				for (j = 0; j < (json_is_array(t) ? json_array_size(t) : 1); j++) {
					json_t *tj = json_is_array(t) ? json_array_get(t, j) : t;

					if (!json_is_string(tj))
						continue;
					r = json_type_ok(e, json_string_value(tj));
					if (r < 0) {
						end = fail(b, path, "unknown type '%s'", json_string_value(tj));
						break;
					}
					ok |= r;
				}
				if (!ok || b->bad)
					continue;
				nfa_eps(b->n, literal(b, from, e, path), end);
				any = 1;
			}
			if (!any && !b->bad)
				end = fail(b, path, "no enum value has the schema's type");
		}
	} else if ((t = json_object_get(s, "type"))) {
		if (json_is_string(t)) {
			end = typed(b, from, s, json_string_value(t), path);
		} else if (json_is_array(t) && json_array_size(t)) {
			size_t i;
			end = st(b);
			for (i = 0; i < json_array_size(t) && !b->bad; i++) {
				json_t *ti = json_array_get(t, i);
				if (!json_is_string(ti))
					end = fail(b, path, "type must name types");
				else
					nfa_eps(b->n, typed(b, from, s, json_string_value(ti), path), end);
			}
		} else {
			end = fail(b, path, "type must be a string or an array of strings");
		}
	} else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
		   json_object_get(s, "additionalProperties")) {
		end = typed(b, from, s, "object", path);
	} else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
		   json_object_get(s, "maxItems")) {
		end = typed(b, from, s, "array", path);
	} else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength")) {
		end = typed(b, from, s, "string", path);
	} else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
		   json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum")) {
		end = typed(b, from, s, "number", path);
	} else {
		end = free_value(b, from, 1);
	}
	b->depth--;
	return b->bad ? -1 : end;
}

/* ---- specs ---------------------------------------------------------- */

/* The spec's JSON (*rc 0), or NULL with *rc -EINVAL (not JSON, too long)
 * or -ENOMEM (jansson could not allocate) and err set. */
static json_t *parse(const struct kvc_spec *spec, int *rc, char *err, size_t errlen)
{
	json_error_t je;
	json_t *j;

	*rc = -EINVAL;
	if (!spec->json || !spec->json_len) {
		snprintf(err, errlen, "%s", spec->kind == KVC_TOOL_CALLS ? "no tools given" : "no schema given");
		return NULL;
	}
	if (spec->json_len > KVC_MAX_SPEC_BYTES) {
		snprintf(err, errlen, "schema of %zu bytes exceeds the limit of %u", spec->json_len,
			 KVC_MAX_SPEC_BYTES);
		return NULL;
	}
	j = json_loadb(spec->json, spec->json_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	/* out of memory: jansson says so, or (its lexer's buffer not
	 * allocated) returns before any error text is written */
	if (!j && (json_error_code(&je) == json_error_out_of_memory || !je.text[0])) {
		snprintf(err, errlen, "out of memory parsing the %s",
			 spec->kind == KVC_TOOL_CALLS ? "tools" : "schema");
		*rc = -ENOMEM;
	} else if (!j) {
		snprintf(err, errlen, "%s is not valid JSON: %s at line %d column %d",
			 spec->kind == KVC_TOOL_CALLS ? "tools" : "schema", je.text, je.line, je.column);
	}
	if (j)
		*rc = 0;
	return j;
}

static int check_tag(const char *t, const char *which, char *err, size_t errlen)
{
	size_t n = strlen(t);

	if (!n || n > 64 || strchr(" \t\r\n", t[0])) {
		snprintf(err, errlen, "%s tag must be 1-64 bytes, not starting with whitespace", which);
		return -EINVAL;
	}
	return 0;
}

/* The syntax as text, for the cache key (malloc'd; NULL: out of memory):
 * its strings, each with its length (so no two syntaxes print alike). */
static char *syntax_key(const struct kvc_call_syntax *y)
{
	const char *str[9];
	size_t n = 64, i;
	char *s, *p;

	if (!y)
		return strdup("");
	str[0] = y->list_open;
	str[1] = y->list_sep;
	str[2] = y->list_close;
	str[3] = y->call_open;
	str[4] = y->call_close;
	str[5] = y->args_key;
	str[6] = y->id_mark;
	str[7] = y->args_mark;
	str[8] = y->trigger;
	for (i = 0; i < 9; i++)
		n += (str[i] ? strlen(str[i]) : 0) + 24;
	s = p = malloc(n);
	if (!s)
		return NULL;
	p += sprintf(p, "%d,%d,%d:", y->name_args, y->id, y->anchored);
	for (i = 0; i < 9; i++)
		p += str[i] ? sprintf(p, "%zu:%s", strlen(str[i]), str[i]) : sprintf(p, "-:");
	return s;
}

int kvc_spec_key(const struct kvc_spec *spec, char **key, char *err, size_t errlen)
{
	json_t *j = NULL;
	char *body = NULL, *syn;
	size_t n;
	int rc;
	const char *st_ = spec->start_tag ? spec->start_tag : "<tool_call>";
	const char *et = spec->end_tag ? spec->end_tag : "</tool_call>";

	*key = NULL;
	if (spec->kind != KVC_JSON_SCHEMA && spec->kind != KVC_JSON_OBJECT &&
	    spec->kind != KVC_TOOL_CALLS) {
		snprintf(err, errlen, "unknown constraint kind %d", (int)spec->kind);
		return -EINVAL;
	}
	if (spec->kind != KVC_JSON_OBJECT) {
		j = parse(spec, &rc, err, errlen);
		if (!j)
			return rc;
		body = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
		json_decref(j);
		if (!body)
			return -ENOMEM;
	}
	syn = syntax_key(spec->kind == KVC_TOOL_CALLS ? spec->syntax : NULL);
	if (!syn) {
		free(body);
		return -ENOMEM;
	}
	n = (body ? strlen(body) : 0) + strlen(st_) + strlen(et) + strlen(syn) +
	    (spec->tool_name ? strlen(spec->tool_name) : 0) +
	    (spec->skip_open ? strlen(spec->skip_open) : 0) +
	    (spec->skip_close ? strlen(spec->skip_close) : 0) + 128;
	*key = malloc(n);
	if (!*key) {
		free(body);
		free(syn);
		return -ENOMEM;
	}
	snprintf(*key, n, "%d|%u|%u|%s|%s|%s|%zu:%s%zu:%s|%s%s|%s", (int)spec->kind,
		 spec->max_ws ? spec->max_ws : KVC_DEFAULT_WS,
		 spec->max_calls ? spec->max_calls : KVC_DEFAULT_CALLS, st_, et, syn,
		 spec->skip_open ? strlen(spec->skip_open) : 0, spec->skip_open ? spec->skip_open : "",
		 spec->skip_close ? strlen(spec->skip_close) : 0, spec->skip_close ? spec->skip_close : "",
		 spec->tool_name ? "=" : "*", spec->tool_name ? spec->tool_name : "",
		 body ? body : "");
	free(body);
	free(syn);
	return 0;
}

/* 9 alphanumerics (a Mistral call id). */
static int32_t id9(struct sb *b, int32_t from)
{
	for (int i = 0; i < 9 && from >= 0; i++) {
		int32_t to = st(b);

		nfa_byte(b->n, from, '0', '9', to);
		nfa_byte(b->n, from, 'A', 'Z', to);
		nfa_byte(b->n, from, 'a', 'z', to);
		from = to;
	}
	return from;
}

/*
 * One call, a sub-automaton entered by a call (its end returns): the
 * syntax's call_open, the body of one of the tools (a JSON object with
 * the name and the arguments, or the NAME_ARGS form), call_close.
 */
static int32_t tool_calls(struct sb *b, json_t *tools, const struct kvc_spec *spec,
			  const struct kvc_call_syntax *y, const char *st_, const char *et)
{
	int32_t tc = st(b), x = st(b), p, alt_end = st(b);
	size_t i;
	int n_used = 0, json_body = !y || !y->name_args;
	const char *open = y ? (y->call_open ? y->call_open : "") : st_;
	const char *close = y ? (y->call_close ? y->call_close : "") : et;
	const char *args_key = y && y->args_key ? y->args_key : "arguments";
	char sp[96], ak[80];

	if (x < 0)
		return -1;
	b->n->flags[x] |= NF_RETURN;
	if (!json_is_array(tools) || !json_array_size(tools))
		return fail(b, "tools", "must be a non-empty array");
	snprintf(ak, sizeof(ak), "\"%s\"", args_key);
	p = lit(b, tc, open);
	if (json_body) {
		if (*open)
			p = ws(b, p);
		p = ws(b, lit(b, p, "{"));
		p = ws(b, lit(b, ws(b, lit(b, p, "\"name\"")), ":"));
	}
	for (i = 0; i < json_array_size(tools); i++) {
		json_t *t = json_array_get(tools, i), *fn, *name, *params, *ty;
		int32_t q;
		char *nt;

		snprintf(sp, sizeof(sp), "tools/%zu", i);
		fn = json_object_get(t, "function");
		ty = json_object_get(t, "type");
		if (!json_is_object(t) || !json_is_object(fn) ||
		    (ty && (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))))
			return fail(b, sp, "must be {\"type\": \"function\", \"function\": {...}}");
		name = json_object_get(fn, "name");
		if (!json_is_string(name) || !json_string_length(name))
			return fail(b, sp, "function.name must be a non-empty string");
		if (spec->tool_name && strcmp(spec->tool_name, json_string_value(name)))
			continue;
		params = json_object_get(fn, "parameters");
		snprintf(sp, sizeof(sp), "tools/%zu/function/parameters", i);
		/* the arguments are an object, as every tool-call syntax and
		 * OpenAI's function parameters have them */
		ty = params ? json_object_get(params, "type") : NULL;
		if (params && (!json_is_object(params) ||
			       (ty && (!json_is_string(ty) || strcmp(json_string_value(ty), "object")))))
			return fail(b, sp, "must be a JSON Schema of type object");
		if (json_body) {
			nt = json_dumps(name, JSON_ENCODE_ANY);
			if (!nt)
				return oom(b);
			q = ws(b, lit(b, p, nt));
			free(nt);
			q = ws(b, lit(b, q, ","));
			q = ws(b, lit(b, ws(b, lit(b, q, ak)), ":"));
		} else {
			q = lit(b, p, json_string_value(name));
			if (y->id) {
				q = lit(b, q, y->id_mark ? y->id_mark : "");
				q = id9(b, q);
			}
			q = lit(b, q, y->args_mark ? y->args_mark : "");
		}
		b->root = params;
		if (params && ty) {
			q = value(b, q, params, sp);
		} else if (params) {	/* no "type": an object all the same */
			json_t *obj = json_deep_copy(params);

			if (!obj || json_object_set_new(obj, "type", json_string("object"))) {
				json_decref(obj);
				return oom(b);
			}
			b->root = obj;
			q = value(b, q, obj, sp);
			b->root = params;
			json_decref(obj);
		} else {	/* no parameters: an empty object */
			q = ws(b, lit(b, q, "{"));
			q = lit(b, q, "}");
		}
		if (json_body && y && y->id) {
			q = ws(b, lit(b, ws(b, q), ","));
			q = ws(b, lit(b, ws(b, lit(b, q, "\"id\"")), ":"));
			q = lit(b, id9(b, lit(b, q, "\"")), "\"");
		}
		if (b->bad)
			return -1;
		nfa_eps(b->n, q, alt_end);
		n_used++;
	}
	if (!n_used)
		return fail(b, "tool_choice", "no tool named '%s'", spec->tool_name);
	p = alt_end;
	if (json_body)
		p = lit(b, ws(b, p), "}");
	if (*close)
		p = ws(b, p);
	nfa_eps(b->n, lit(b, p, close), x);
	return tc;
}

/* kvc_spec_nfa's parses of a spec kvc_compile's kvc_spec_key parsed
 * already: only memory can fail (jansson reports some allocation failures
 * in its lexer as syntax errors, which here they cannot be). */
static int reparse_failed(char *err, size_t errlen)
{
	snprintf(err, errlen, "out of memory parsing the spec");
	return -ENOMEM;
}

int kvc_spec_nfa(const struct kvc_spec *spec, struct nfa *n, char **key,
		 char **start_tag, char *err, size_t errlen)
{
	struct sb b = { .n = n, .v_obj = -1, .v_arr = -1, .err = err, .errlen = errlen };
	json_t *j = NULL;
	int32_t s0, cur, fin;
	int rc;
	const char *st_ = spec->start_tag ? spec->start_tag : "<tool_call>";
	const char *et = spec->end_tag ? spec->end_tag : "</tool_call>";

	*start_tag = NULL;
	/* kvc_compile has checked the same spec: only memory can fail here */
	rc = kvc_spec_key(spec, key, err, errlen);
	if (rc)
		return reparse_failed(err, errlen);
	b.ws = spec->max_ws ? spec->max_ws : KVC_DEFAULT_WS;
	if (b.ws > 64) {
		snprintf(err, errlen, "max_ws %u above 64", b.ws);
		return -EINVAL;
	}
	s0 = nfa_state(n);	/* state 0: the start */
	cur = ws(&b, s0);
	fin = -1;
	switch (spec->kind) {
	case KVC_JSON_OBJECT:
		build_free(&b);
		fin = st(&b);
		nfa_call(n, cur, b.v_obj, fin);
		break;
	case KVC_JSON_SCHEMA:
		j = parse(spec, &rc, err, errlen);
		if (!j)
			return reparse_failed(err, errlen);
		b.root = j;
		fin = value(&b, cur, j, "");
		break;
	case KVC_TOOL_CALLS: {
		uint32_t calls = spec->max_calls ? spec->max_calls : KVC_DEFAULT_CALLS, i;
		const struct kvc_call_syntax *y = spec->syntax;
		int json_body = !y || !y->name_args;
		const char *trig = st_;
		int32_t tc;

		if (calls > 64) {
			snprintf(err, errlen, "max_calls %u above 64", calls);
			return -EINVAL;
		}
		if (y) {
			trig = y->trigger ? y->trigger : y->list_open && *y->list_open ?
			       y->list_open : y->call_open ? y->call_open : "";
			if (check_tag(trig, "trigger", err, errlen))
				return -EINVAL;
		} else if (check_tag(st_, "start", err, errlen) || check_tag(et, "end", err, errlen)) {
			return -EINVAL;
		}
		j = parse(spec, &rc, err, errlen);
		if (!j)
			return reparse_failed(err, errlen);
		tc = tool_calls(&b, j, spec, y, st_, et);
		if (y && y->list_open && *y->list_open) {
			cur = lit(&b, cur, y->list_open);
			if (json_body)
				cur = ws(&b, cur);
		}
		for (i = 0; i < calls && tc >= 0; i++) {
			int32_t r = st(&b), e;

			nfa_call(n, cur, tc, r);
			if (!y || !y->list_sep) {	/* Hermes: whitespace between */
				cur = ws(&b, r);
				e = cur;
			} else {
				e = r;
				cur = json_body ? ws(&b, lit(&b, ws(&b, r), y->list_sep)) :
				      lit(&b, r, y->list_sep);
			}
			if (y && y->list_close && *y->list_close)
				e = lit(&b, json_body ? ws(&b, e) : e, y->list_close);
			/* the trailing whitespace: once (without a separator or
			 * a close, e is cur, which has it already) */
			if (y && (y->list_sep || (y->list_close && *y->list_close)))
				e = ws(&b, e);
			if (e >= 0)
				n->flags[e] |= NF_ACCEPT;
		}
		fin = cur;
		*start_tag = strdup(trig);
		if (!*start_tag)
			rc = -ENOMEM;
		break;
	}
	}
	if (!b.bad && fin >= 0 && spec->kind != KVC_TOOL_CALLS) {
		fin = ws(&b, fin);
		if (fin >= 0)
			n->flags[fin] |= NF_ACCEPT;
	}
	json_decref(j);
	if (b.bad)
		rc = b.bad;
	else if (n->failed)
		rc = n->failed;
	if (rc == -E2BIG)
		snprintf(err, errlen, "schema too large: over %u automaton states", n->limit);
	else if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	if (rc) {
		free(*key);
		*key = NULL;
		free(*start_tag);
		*start_tag = NULL;
	}
	return rc;
}
