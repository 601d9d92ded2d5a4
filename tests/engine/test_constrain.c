// SPDX-License-Identifier: MIT
/*
 * test_constrain - constrained decoding (kvconstrain.h) on real
 * tokenizers: texts a schema must accept or refuse, fed byte by byte and
 * as the tokenizer splits them (tokens spanning several JSON characters,
 * ending inside escapes or UTF-8 sequences); every step's mask checked
 * against kvc_advance for the whole vocabulary while a random-weight
 * model samples under the constraint; the lazy tool-call trigger; the
 * nesting limit; refusals naming the keyword; the compile cache;
 * kve_sample_masked. The property test against an independent validator
 * is kvc-gen + validate.js (run.sh).
 *
 * usage: test_constrain MODEL...
 */
#define _POSIX_C_SOURCE 200809L	/* pthread_barrier_t */
#include "cgen.h"

#include <errno.h>
#include <pthread.h>

static struct kvc_vocab *V;
static struct kve_tokenizer *T;
static uint32_t NV;
static int32_t byte_tok[256];
static const char *MNAME;

/* kvc_compile's grammar, or NULL with its return code in *rc */
static struct kvc_grammar *compile_rc(enum kvc_kind kind, const char *json, int *rc, char *err,
				      size_t n)
{
	struct kvc_spec sp = { .kind = kind, .json = json, .json_len = json ? strlen(json) : 0 };
	struct kvc_grammar *g = NULL;

	*rc = kvc_compile(V, &sp, &g, err, n);
	return *rc ? NULL : g;
}

static struct kvc_grammar *compile(enum kvc_kind kind, const char *json, char *err, size_t n)
{
	int rc;

	return compile_rc(kind, json, &rc, err, n);
}

/* 1 if text is accepted fed one byte token at a time and the output is
 * complete at the end */
static int accepts_bytes(struct kvc_grammar *g, const char *text, unsigned flags)
{
	struct kvc_matcher *m = kvc_matcher_create(g, flags);
	size_t i;
	int ok = 1;

	for (i = 0; text[i] && ok; i++)
		ok = kvc_advance(m, byte_tok[(uint8_t)text[i]]) == 0;
	ok = ok && kvc_accepting(m);
	kvc_matcher_free(m);
	return ok;
}

/* The same through the tokenizer's own split, checking each token's
 * mask bit on the way */
static int accepts_tokens(struct kvc_grammar *g, const char *text, int *mask_ok)
{
	int32_t ids[512];
	int n = kve_tokenize(T, text, strlen(text), 0, ids, 512), i, ok = 1;
	struct kvc_matcher *m = kvc_matcher_create(g, 0);
	uint32_t *mask = calloc(kvc_mask_words(V), 4);

	*mask_ok = 1;
	for (i = 0; i < n && ok; i++) {
		int bit;
		kvc_mask(m, mask);
		bit = (mask[ids[i] >> 5] >> (ids[i] & 31)) & 1;
		ok = kvc_advance(m, ids[i]) == 0;
		if (bit != ok)
			*mask_ok = 0;
	}
	ok = ok && kvc_accepting(m);
	kvc_matcher_free(m);
	free(mask);
	return ok;
}

struct tcase {
	const char *schema;
	const char *good[8];
	const char *bad[10];
};

static const struct tcase cases[] = {
	{ "{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":[\"c\",\"cel\",\"celsius\",\"celsius2\"]}},"
	  "\"required\":[\"unit\"],\"additionalProperties\":false}",
	  { "{\"unit\":\"c\"}", "{\"unit\": \"cel\"}", "{ \"unit\" : \"celsius\" }", "{\"unit\":\"celsius2\"}" },
	  { "{\"unit\":\"ce\"}", "{\"unit\":\"celsius3\"}", "{}", "{\"unit\":\"c\",\"x\":1}", "{\"Unit\":\"c\"}" } },
	{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}",
	  { "\"ab\"", "\"\\n\\\"\"", "\"\\u00e9\\u4e2d\\ud7ff\"", "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80z\"", "\"a\\\\\\/\"",
	    "\"\xe0\xa0\x80z\"", "\" !\"" },
	  { "\"a\"", "\"abcde\"", "\"\\ud800x\"", "\"\\x41\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"a\tb\"",
	    "\"\xf4\x90\x80\x80z\"", "\"ab", "\"\xe0\x9f\xbfz\"" } },
	/* each lead byte's class of character, and one continuation byte
	 * too many after it */
	{ "{\"type\":\"string\"}",
	  { "\"\xdf\xbf\"", "\"\xe0\xa0\x80\"", "\"\xed\x9f\xbf\"", "\"\xee\x80\x80\"",
	    "\"\xef\xbf\xbf\"", "\"\xf0\x90\x80\x80\"", "\"\xf3\xbf\xbf\xbf\"", "\"\xf4\x8f\xbf\xbf\"" },
	  { "\"\x80\"", "\"\xdf\xbf\x80\"", "\"\xe0\xa0\x80\x80\"", "\"\xed\x9f\xbf\x80\"",
	    "\"\xee\x80\x80\x80\"", "\"\xef\x90\x80\x80\"", "\"\xf0\x90\x80\x80\x80\"",
	    "\"\xf3\xbf\xbf\xbf\x80\"", "\"\xf4\x8f\xbf\xbf\x80\"", "\"\xf8\x80\"" } },
	{ "{\"type\":\"number\"}",
	  { "0", "-0.5", "1e5", "1E+05", "-2.25e-3", "123456789012345678", "3.141592653589" },
	  { "01", "1.", ".5", "+1", "1e", "1e+", "--1", "1234567890123456789", "NaN" } },
	{ "{\"type\":\"integer\",\"minimum\":-15,\"maximum\":250}",
	  { "-15", "-9", "0", "7", "99", "250", "199" },
	  { "-16", "251", "300", "-0", "1.5", "1e2", "1000", "-150" } },
	/* bounds of 0: -0 is never written (as everywhere), nothing past the bound */
	{ "{\"type\":\"number\",\"minimum\":0}",
	  { "0", "0.5", "12", "0.000" },
	  { "-0", "-0.0", "-1", "-0.5" } },
	{ "{\"type\":\"number\",\"maximum\":0}",
	  { "0", "-0.5", "-12", "0.000" },
	  { "-0", "-0.0", "1", "0.5" } },
	{ "{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}",
	  { "0", "9" },
	  { "-0", "-1", "10" } },
	{ "{\"type\":\"number\",\"minimum\":0.25,\"exclusiveMaximum\":1.5}",
	  { "0.25", "0.3", "1", "1.4999", "0.250001", "1.0" },
	  { "0.2", "0.24999", "1.5", "1.50", "2", "-1", "0" } },
	{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"array\","
	  "\"items\":{\"type\":\"boolean\"},\"maxItems\":2}},\"required\":[\"b\"]},\"n\":{\"type\":\"null\"}},"
	  "\"required\":[\"a\"]}",
	  { "{\"a\":{\"b\":[]}}", "{\"a\":{\"b\":[true,false]},\"n\":null}", "{\"a\":{\"b\":[ ]} , \"n\" : null}" },
	  { "{\"a\":{\"b\":[true,false,true]}}", "{\"a\":{}}", "{\"n\":null}", "{\"a\":{\"b\":[1]}}", "{\"a\":{\"b\":[true,]}}" } },
	{ "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"integer\",\"minimum\":5,\"maximum\":5},"
	  "{\"$ref\":\"#/$defs/p\"}],\"$defs\":{\"p\":{\"type\":\"array\",\"minItems\":1,\"items\":{\"const\":\"x\"}}}}",
	  { "\"\"", "\"q\"", "5", "[\"x\"]", "[\"x\",\"x\",\"x\"]" },
	  { "\"qq\"", "4", "[]", "[\"y\"]", "null" } },
	{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}}",
	  { "{}", "{\"k\":3}", "{\"k\":3,\"j\\\"\":9}" },
	  { "{\"k\":10}", "{\"k\":\"3\"}", "{3:3}" } },
	{ "{\"type\":\"object\",\"properties\":{\"free\":{\"type\":\"object\"},\"any\":{}},\"required\":[\"free\",\"any\"]}",
	  { "{\"free\":{},\"any\":1}", "{\"free\":{\"x\":[1,{\"y\":[[]]}],\"z\":\"w\"},\"any\":[{}]}",
	    "{\"free\":{\"a\":null},\"any\":\"s\"}" },
	  { "{\"free\":[],\"any\":1}", "{\"free\":{\"x\":},\"any\":1}", "{\"free\":{\"x\":1,},\"any\":1}",
	    "{\"free\":{},\"any\":}" } },
	/* the boolean schema true: any value, containers included */
	{ "{\"type\":\"object\",\"properties\":{\"t\":true},\"required\":[\"t\"],\"additionalProperties\":false}",
	  { "{\"t\":1}", "{\"t\":{\"a\":[true,null]}}", "{\"t\":\"s\"}", "{ \"t\" : [] }" },
	  { "{}", "{\"t\":}", "{\"u\":1}", "{\"t\":1,\"u\":2}", "{\"t\":tru}" } },
	/* UTF-8 in strings at the edges of each lead byte's range: the
	 * first and last character of every row, overlongs, surrogates,
	 * past U+10FFFF, lone and stray bytes */
	{ "{\"type\":\"string\"}",
	  { "\"\xc2\x80\xdf\xbf\"", "\"\xe0\xa0\x80\xe0\xbf\xbf\"", "\"\xe1\x80\x80\xec\xbf\xbf\"",
	    "\"\xed\x80\x80\xed\x9f\xbf\"", "\"\xee\x80\x80\xef\xbf\xbf\"",
	    "\"\xf0\x90\x80\x80\xf0\xbf\xbf\xbf\"", "\"\xf1\x80\x80\x80\xf3\xbf\xbf\xbf\"",
	    "\"\xf4\x80\x80\x80\xf4\x8f\xbf\xbf\"" },
	  { "\"\xc1\xbf\"", "\"\xe0\x80\x80\"", "\"\xed\xbf\xbf\"", "\"\xf0\x8f\xbf\xbf\"",
	    "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\x80\"", "\"\xc2\xc0\"",
	    "\"\xc2\"", "\"\xee\x80\"" } },
	{ "{\"type\":\"string\"}",
	  { "\"ok\"" },
	  { "\"\xdf\xc0\"", "\"\xe1\xbf\xc0\"", "\"\xe1\x7f\x80\"", "\"\xf1\x80\x80\xc0\"",
	    "\"\xf0\x90\x80\"", "\"\xf3\x7f\x80\x80\"", "\"\xe0\x9f\x80\"", "\"\xf4\x8f\xc0\x80\"",
	    "\"\x01\"", "\"\x1f\"" } },
	/* escapes: every one JSON has, \u at the edges of the surrogates and
	 * of each hex digit range */
	{ "{\"type\":\"string\"}",
	  { "\"\\b\\f\\n\\r\\t\\\"\\\\\\/\"", "\"\\uD7FF\\uE000\\ud7ff\\ue000\"",
	    "\"\\u0000\\u9999\\uAfAf\\uFfFf\"", "\"\\ucccc\\uCCCC\\uffff\\u0aF9\"",
	    "\"\x7f~ \"" },
	  { "\"\\uD800\"", "\"\\uDFFF\"", "\"\\udc00\"", "\"\\u0g00\"", "\"\\u00G0\"",
	    "\"\\u:000\"", "\"\\u/000\"", "\"\\a\"", "\"\\u@000\"", "\"\\u`000\"" } },
	/* enum values outside the schema's type (a list of types) are not
	 * offered */
	{ "{\"type\":[\"integer\",\"null\"],\"enum\":[1,\"a\",null,true,2.5]}",
	  { "1", "null" },
	  { "\"a\"", "true", "2.5", "2" } },
	{ "{\"type\":[\"array\",\"object\",\"boolean\",\"string\"],"
	  "\"enum\":[[1,2],{\"a\":1},true,\"s\",3,null,1.5]}",
	  { "[1,2]", "{\"a\":1}", "true", "\"s\"" },
	  { "3", "null", "1.5", "[1]", "{}", "false" } },
	{ "{\"type\":\"number\",\"enum\":[1,2.5,\"x\",[3]]}",
	  { "1", "2.5" },
	  { "\"x\"", "[3]", "3" } },
	/* a real's canonical text is the shortest that reads back: 0.1 + 0.2
	 * needs all 17 digits, 0.1 one */
	{ "{\"enum\":[0.30000000000000004,0.1]}",
	  { "0.30000000000000004", "0.1" },
	  { "0.3", "0.3000000000000000", "0.30000000000000005", "0.10" } },
};

static void byte_tokens(void)
{
	int32_t i;
	char b[8];

	for (i = 0; i < 256; i++)
		byte_tok[i] = -1;
	/* prefer the byte-fallback / single-byte token for each byte */
	for (i = (int32_t)NV - 1; i >= 0; i--)
		if (kve_token_bytes(T, i, b, sizeof(b)) == 1)
			byte_tok[(uint8_t)b[0]] = i;
	for (i = 0; i < 256; i++)
		if (byte_tok[i] < 0)
			break;
	CHECK(i == 256, "%s: every byte has a one-byte token", MNAME);
}

static void accept_cases(void)
{
	size_t c, k;
	char err[256];

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, cases[c].schema, err, sizeof(err));
		int good = 1, bad = 1, tok = 1, mask = 1, mo;

		CHECK(g != NULL, "%s: case %zu compiles%s%s", MNAME, c, g ? "" : ": ", g ? "" : err);
		if (!g)
			continue;
		for (k = 0; k < 8 && cases[c].good[k]; k++) {
			if (!accepts_bytes(g, cases[c].good[k], 0)) {
				printf("# case %zu: refused %s\n", c, cases[c].good[k]);
				good = 0;
			}
			if (!accepts_tokens(g, cases[c].good[k], &mo)) {
				printf("# case %zu: tokens of %s refused\n", c, cases[c].good[k]);
				tok = 0;
			}
			mask &= mo;
		}
		for (k = 0; k < 10 && cases[c].bad[k]; k++) {
			if (accepts_bytes(g, cases[c].bad[k], 0)) {
				printf("# case %zu: accepted %s\n", c, cases[c].bad[k]);
				bad = 0;
			}
			if (accepts_tokens(g, cases[c].bad[k], &mo)) {
				printf("# case %zu: tokens of %s accepted\n", c, cases[c].bad[k]);
				bad = 0;
			}
			mask &= mo;
		}
		CHECK(good && tok, "%s: case %zu accepts its valid texts, bytewise and tokenized", MNAME, c);
		CHECK(bad, "%s: case %zu refuses its invalid texts", MNAME, c);
		CHECK(mask, "%s: case %zu: each token's mask bit == kvc_advance's verdict", MNAME, c);
		kvc_grammar_release(g);
	}
}

static void refusals(void)
{
	static const char *const s[][2] = {
		{ "{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'" },
		{ "{\"type\":\"string\",\"format\":\"date-time\"}", "'format'" },
		{ "{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'" },
		{ "{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'" },
		{ "{\"properties\":{\"a\":{\"not\":{}}}}", "/properties/a: unsupported keyword 'not'" },
		{ "{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"$ref\":\"#/$defs/n\"}",
		  "/$defs/n/items: recursive $ref '#/$defs/n'" },
		/* a -> b -> a: the cycle is named where it closes, at the first ref */
		{ "{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/b\"}},"
		  "\"b\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"}}},\"$ref\":\"#/$defs/a\"}",
		  "/$defs/b/items: recursive $ref '#/$defs/a'" },
		{ "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "admits no value" },
		{ "{\"type\":\"object\",\"required\":[\"x\"]}", "'x' is not in properties" },
		{ "{\"type\":\"strin\"}", "unknown type 'strin'" },
		{ "{\"type\":", "not valid JSON" },
		{ "{\"a\":1,\"a\":2}", "not valid JSON" },
	};
	size_t i;
	char err[256];

	for (i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, s[i][0], err, sizeof(err));
		CHECK(!g && strstr(err, s[i][1]), "%s: refused, naming %s (%s)", MNAME, s[i][1], g ? "compiled" : err);
		kvc_grammar_release(g);
	}
}

/*
 * Each of the schema compiler's refusals, named, and the edges on the
 * other side of its limits compiled (and, where it matters, what they
 * accept): a check dropped, or a bound moved by one, shows in one of them.
 */
static void schema_edges(void)
{
	static const char *const refused[][2] = {
		{ "{\"type\":\"number\",\"exclusiveMinimum\":\"1\"}", "exclusiveMinimum must be a number" },
		{ "{\"type\":\"number\",\"exclusiveMaximum\":null}", "exclusiveMaximum must be a number" },
		{ "{\"type\":\"number\",\"minimum\":\"1\"}", "minimum and maximum must be numbers" },
		{ "{\"type\":\"number\",\"maximum\":[1]}", "minimum and maximum must be numbers" },
		{ "{\"type\":\"integer\",\"minimum\":1e18}", "bounds beyond +-1e18" },
		{ "{\"type\":\"integer\",\"maximum\":-1e18}", "bounds beyond +-1e18" },
		{ "{\"type\":\"number\",\"minimum\":1.23e-39}", "minimum 1.23e-39 has too many digits" },
		{ "{\"type\":\"number\",\"maximum\":1.23e-39}", "maximum 1.23e-39 has too many digits" },
		{ "{\"type\":\"number\",\"maximum\":-1.23e-39}", "maximum -1.23e-39 has too many digits" },
		{ "{\"type\":\"number\",\"minimum\":-1.23e-39}", "minimum -1.23e-39 has too many digits" },
		{ "{\"type\":\"string\",\"maxLength\":-1}", "maxLength must be a non-negative integer" },
		{ "{\"type\":\"string\",\"minLength\":1.5}", "minLength must be a non-negative integer" },
		{ "{\"type\":\"array\",\"maxItems\":1000001}", "maxItems must be a non-negative integer" },
		{ "{\"type\":\"object\",\"properties\":[]}", "properties must be an object" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":\"a\"}", "required must be an array" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[1]}", "required must list strings" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\",\"b\"]}",
		  "required property 'b' is not in properties" },
		{ "{\"type\":\"array\",\"items\":[{}]}", "tuple items are not supported" },
		{ "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems above maxItems" },
		{ "{\"type\":\"array\",\"minItems\":1,\"maxItems\":0}", "minItems above maxItems" },
		{ "{\"type\":\"array\",\"minItems\":17}", "minItems above 16 is not supported" },
		{ "{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength above maxLength" },
		{ "{\"type\":\"string\",\"minLength\":1,\"maxLength\":0}", "minLength above maxLength" },
		{ "{\"type\":\"string\",\"minLength\":257}", "minLength above 256 is not supported" },
		{ "{\"$ref\":\"other.json#/a\"}", "only local '#/...' references" },
		{ "{\"$ref\":\"#/$defs/nope\",\"$defs\":{}}", "$ref '#/$defs/nope' does not resolve" },
		{ "{\"$ref\":\"#/$defs/a/2\",\"$defs\":{\"a\":[{},{}]}}", "does not resolve" },
		{ "{\"properties\":{\"a\":false}}", "/properties/a: schema false admits no value" },
		{ "{\"properties\":{\"a\":3}}", "/properties/a: a schema must be an object or a boolean" },
		{ "{\"$ref\":1}", "$ref must be a string" },
		{ "{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}",
		  "$ref beside other keywords is not supported" },
		{ "{\"anyOf\":[]}", "anyOf must be a non-empty array" },
		{ "{\"allOf\":{}}", "allOf must be a non-empty array" },
		{ "{\"anyOf\":[{}],\"type\":\"string\"}", "anyOf beside other keywords" },
		{ "{\"allOf\":[{}],\"minimum\":1}", "allOf beside other keywords" },
		{ "{\"allOf\":[{},{}]}", "allOf with more than one schema" },
		{ "{\"enum\":\"a\"}", "enum must be an array" },
		{ "{\"type\":\"string\",\"enum\":[1,2]}", "no enum value has the schema's type" },
		{ "{\"type\":\"string\",\"const\":1}", "no enum value has the schema's type" },
		/* an unknown type name beside enum or const, as alone */
		{ "{\"type\":\"strin\",\"enum\":[1]}", "unknown type 'strin'" },
		{ "{\"type\":[\"integer\",\"strin\"],\"const\":1}", "unknown type 'strin'" },
		{ "{\"type\":[\"string\",1]}", "type must name types" },
		{ "{\"type\":[]}", "type must be a string or an array of strings" },
		{ "{\"type\":{}}", "type must be a string or an array of strings" },
		{ "{\"items\":{\"type\":\"strin\"}}", "/items: unknown type 'strin'" },
		{ "[1]", "a schema must be an object or a boolean" },
	};
	static const struct tcase edges[] = {
		/* the limits themselves are allowed */
		{ "{\"type\":\"string\",\"minLength\":256}", { 0 }, { "\"\"" } },
		{ "{\"type\":\"array\",\"minItems\":16,\"items\":{\"type\":\"null\"}}",
		  { "[null,null,null,null,null,null,null,null,null,null,null,null,null,null,null,null]" },
		  { "[null,null,null,null,null,null,null,null,null,null,null,null,null,null,null]" } },
		{ "{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", { "\"ab\"" }, { "\"a\"", "\"abc\"" } },
		{ "{\"type\":\"array\",\"minItems\":1,\"maxItems\":1}", { "[1]" }, { "[]", "[1,2]" } },
		{ "{\"type\":\"array\",\"maxItems\":1000000,\"items\":{\"const\":0}}", { "[]", "[0,0,0]" }, { "[1]" } },
		{ "{\"type\":\"string\",\"maxLength\":0}", { "\"\"" }, { "\"a\"" } },
		{ "{\"type\":\"array\",\"maxItems\":0}", { "[]" }, { "[1]" } },
		/* bounds at 1e18 constrain nothing generated */
		{ "{\"type\":\"integer\",\"maximum\":1e18}", { "1", "999999999999999999" }, { "1.5" } },
		{ "{\"type\":\"integer\",\"minimum\":-1e18}", { "-1", "-999999999999999999" }, { "-" } },
		/* 18 integer digits are the most a bound may have (1e18 is none) */
		{ "{\"type\":\"integer\",\"maximum\":123456789012345680}",
		  { "123456789012345680", "5", "-7" }, { "123456789012345681", "999999999999999999" } },
		/* 40 fraction digits are the most a bound may have */
		{ "{\"type\":\"number\",\"minimum\":1.2e-39,\"maximum\":1}", { "1", "0.5" }, { "0", "2" } },
		/* exclusive bounds as booleans (draft 4) and as numbers */
		{ "{\"type\":\"integer\",\"minimum\":2,\"exclusiveMinimum\":true,\"maximum\":5,"
		  "\"exclusiveMaximum\":true}", { "3", "4" }, { "2", "5" } },
		{ "{\"type\":\"integer\",\"minimum\":2,\"exclusiveMinimum\":false,\"maximum\":5,"
		  "\"exclusiveMaximum\":false}", { "2", "5" }, { "1", "6" } },
		{ "{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":3}", { "-2", "2", "0" },
		  { "-3", "3" } },
		/* an exclusive bound equal to the inclusive one wins */
		{ "{\"type\":\"integer\",\"minimum\":2,\"exclusiveMinimum\":2,\"maximum\":5,"
		  "\"exclusiveMaximum\":5}", { "3", "4" }, { "2", "5" } },
		{ "{\"type\":\"integer\",\"minimum\":-3,\"exclusiveMinimum\":-5,\"maximum\":3,"
		  "\"exclusiveMaximum\":4}", { "-3", "3" }, { "-4", "4" } },
		{ "{\"type\":\"integer\",\"minimum\":-5,\"exclusiveMinimum\":-3,\"maximum\":4,"
		  "\"exclusiveMaximum\":3}", { "-2", "2" }, { "-3", "3" } },
		{ "{\"type\":\"number\",\"maximum\":0,\"exclusiveMaximum\":true}", { "-1", "-0.5" },
		  { "0", "0.5" } },
		{ "{\"type\":\"number\",\"exclusiveMaximum\":0}", { "-1", "-0.5" },
		  { "0", "0.0", "0.5" } },
		{ "{\"type\":\"number\",\"exclusiveMinimum\":0}", { "1", "0.5", "0.01" },
		  { "0", "0.0", "-0.5" } },
		{ "{\"type\":\"integer\",\"maximum\":0}", { "0", "-7" }, { "1" } },
		{ "{\"type\":\"integer\",\"minimum\":0}", { "0", "7" }, { "-1" } },
		{ "{\"type\":\"integer\",\"minimum\":-7,\"maximum\":-2}", { "-7", "-2" }, { "-1", "-8", "0" } },
		/* allOf of one, a $ref through an array, an escaped pointer */
		{ "{\"allOf\":[{\"type\":\"integer\",\"maximum\":3}],\"title\":\"t\"}", { "3" }, { "4" } },
		{ "{\"$ref\":\"#/$defs/a/1\",\"$defs\":{\"a\":[{\"const\":1},{\"const\":2}]}}", { "2" }, { "1" } },
		{ "{\"$ref\":\"#/$defs/a~1b~0c\",\"$defs\":{\"a/b~c\":{\"const\":\"x\"}}}", { "\"x\"" }, { "1" } },
		/* keywords that imply a type */
		{ "{\"minItems\":1}", { "[1]" }, { "[]", "1" } },
		{ "{\"maxLength\":1}", { "\"a\"" }, { "\"ab\"", "1" } },
		{ "{\"minimum\":1}", { "1", "1.5" }, { "0", "\"a\"" } },
		{ "{\"exclusiveMaximum\":1}", { "0" }, { "1" } },
		{ "{\"required\":[\"a\"],\"properties\":{\"a\":{\"const\":1}}}", { "{\"a\":1}" }, { "{}" } },
		{ "{\"additionalProperties\":false}", { "{}" }, { "{\"a\":1}" } },
		{ "{\"const\":{\"a\":[1,2.5,null]}}", { "{\"a\":[1,2.5,null]}" }, { "{\"a\":[1,2.5]}" } },
		{ "{\"type\":[\"string\",\"null\"],\"maxLength\":1}", { "null", "\"a\"" }, { "\"ab\"", "1" } },
	};
	char err[256], deep[2048];
	size_t i, k;
	int d;

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, refused[i][0], err, sizeof(err));
		CHECK(!g && strstr(err, refused[i][1]), "%s: %s refused, naming %s (%s)", MNAME,
		      refused[i][0], refused[i][1], g ? "compiled" : err);
		kvc_grammar_release(g);
	}
	for (i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, edges[i].schema, err, sizeof(err));
		int ok = g != NULL;

		for (k = 0; g && k < 8 && edges[i].good[k]; k++)
			if (!accepts_bytes(g, edges[i].good[k], 0)) {
				printf("# %s: refused %s\n", edges[i].schema, edges[i].good[k]);
				ok = 0;
			}
		for (k = 0; g && k < 10 && edges[i].bad[k]; k++)
			if (accepts_bytes(g, edges[i].bad[k], 0)) {
				printf("# %s: accepted %s\n", edges[i].schema, edges[i].bad[k]);
				ok = 0;
			}
		CHECK(ok, "%s: %s compiles, accepts and refuses as it should %s", MNAME,
		      edges[i].schema, g ? "" : err);
		kvc_grammar_release(g);
	}
	{	/* maxLength above 256: strings stop at 256 code points */
		struct kvc_grammar *g = compile(KVC_JSON_SCHEMA,
						"{\"type\":\"string\",\"maxLength\":300}",
						err, sizeof(err));
		char s256[260], s257[261];

		s256[0] = s257[0] = '"';
		memset(s256 + 1, 'a', 256);
		memset(s257 + 1, 'a', 257);
		memcpy(s256 + 257, "\"", 2);
		memcpy(s257 + 258, "\"", 2);
		CHECK(g && accepts_bytes(g, s256, 0) && !accepts_bytes(g, s257, 0),
		      "%s: maxLength 300: 256 characters taken, 257 refused (strings stop at 256) %s",
		      MNAME, g ? "" : err);
		kvc_grammar_release(g);
	}
	/* nesting: 48 schemas deep compiles, 49 is refused */
	for (d = 48; d <= 49; d++) {
		struct kvc_grammar *g;
		char long_err[1024];	/* the path is cut at 511 bytes, then the message */
		size_t n = 0;

		for (k = 1; k < (size_t)d; k++)
			n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"properties\":{\"a\":");
		n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"type\":\"null\"}");
		for (k = 1; k < (size_t)d; k++)
			n += (size_t)snprintf(deep + n, sizeof(deep) - n, "}}");
		g = compile(KVC_JSON_SCHEMA, deep, long_err, sizeof(long_err));
		if (d == 48)
			CHECK(g && accepts_bytes(g, "{\"a\":{\"a\":{}}}", 0), "%s: a schema 48 deep compiles %s",
			      MNAME, g ? "" : long_err);
		else
			CHECK(!g && strstr(long_err, "nested deeper than 48"), "%s: 49 deep refused (%s)",
			      MNAME, g ? "compiled" : strstr(long_err, ": schema") ? strstr(long_err, ": schema") : long_err);
		kvc_grammar_release(g);
	}
}

/*
 * The spec's own refusals (kind, missing or oversized text, tools that
 * are not function declarations, tags, max_calls, max_ws), each named,
 * and their limits allowed; the whitespace bound and the default number
 * of calls as generated.
 */
#define J(lit) .json = lit, .json_len = sizeof(lit) - 1
/* Schemas over the state limits: an object of P strings of maxLength 256
 * (about 3,600 states each). 20 fit the NFA's limit (4 x KVC_MAX_STATES)
 * and not the DFA's; 80 do not fit the NFA's. Each is refused with
 * -E2BIG and the limit it passed. */
static void too_large(void)
{
	static const struct { int props; unsigned limit; } cases[] = {
		{ 20, KVC_MAX_STATES }, { 80, 4 * KVC_MAX_STATES },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t cap = 64 * (size_t)cases[i].props + 64, n = 0;
		char *js = malloc(cap), err[256] = "", want[64];
		struct kvc_grammar *g = NULL;
		int p, rc = -1;

		if (js) {
			n += (size_t)snprintf(js + n, cap - n, "{\"type\":\"object\",\"properties\":{");
			for (p = 0; p < cases[i].props; p++)
				n += (size_t)snprintf(js + n, cap - n,
						      "%s\"p%d\":{\"type\":\"string\",\"maxLength\":256}",
						      p ? "," : "", p);
			n += (size_t)snprintf(js + n, cap - n, "}}");
			g = compile_rc(KVC_JSON_SCHEMA, js, &rc, err, sizeof(err));
		}
		snprintf(want, sizeof(want), "schema too large: over %u automaton states",
			 cases[i].limit);
		CHECK(js && n < cap && rc == -E2BIG && !g && !strcmp(err, want),
		      "%s: %d strings of maxLength 256: -E2BIG, \"%s\" (%d: %s)", MNAME,
		      cases[i].props, want, rc, err);
		kvc_grammar_release(g);
		free(js);
	}
}

static void spec_edges(void)
{
	static const char one[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
	static const char tag65[] = "<a-start-tag-one-byte-longer-than-the-limit-of-64-bytes-at-all-->";
	static const struct {
		struct kvc_spec sp;
		const char *want;
	} refused[] = {
		{ { .kind = (enum kvc_kind)7, J("{}") }, "unknown constraint kind 7" },
		{ { .kind = KVC_JSON_SCHEMA }, "no schema given" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = 0 }, "no tools given" },
		{ { .kind = KVC_JSON_SCHEMA, .json = "{}", .json_len = KVC_MAX_SPEC_BYTES + 1 },
		  "exceeds the limit of 1048576" },
		{ { .kind = KVC_TOOL_CALLS, J("{}") }, "tools: must be a non-empty array" },
		{ { .kind = KVC_TOOL_CALLS, J("[]") }, "tools: must be a non-empty array" },
		{ { .kind = KVC_TOOL_CALLS, J("[1]") }, "tools/0: must be {" },
		{ { .kind = KVC_TOOL_CALLS, J("[{\"type\":\"function\",\"function\":1}]") },
		  "tools/0: must be {" },
		{ { .kind = KVC_TOOL_CALLS, J("[{\"type\":\"func\",\"function\":{\"name\":\"f\"}}]") }, "tools/0: must be {" },
		{ { .kind = KVC_TOOL_CALLS, J("[{\"type\":1,\"function\":{\"name\":\"f\"}}]") }, "tools/0: must be {" },
		{ { .kind = KVC_TOOL_CALLS, J("[{\"function\":{\"name\":\"f\"}},{\"function\":{\"name\":\"\"}}]") }, "tools/1: function.name must be a non-empty string" },
		{ { .kind = KVC_TOOL_CALLS, J("[{\"function\":{\"name\":2}}]") },
		  "tools/0: function.name must be a non-empty string" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .max_calls = 65 },
		  "max_calls 65 above 64" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .start_tag = "" },
		  "start tag must be 1-64 bytes" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .start_tag = " <t>" },
		  "start tag must be 1-64 bytes" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .start_tag = tag65 },
		  "start tag must be 1-64 bytes" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .end_tag = "\n</t>" },
		  "end tag must be 1-64 bytes" },
		{ { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1, .end_tag = tag65 },
		  "end tag must be 1-64 bytes" },
		{ { .kind = KVC_JSON_OBJECT, .max_ws = 65 }, "max_ws 65 above 64" },
	};
	char err[256];
	size_t i;
	int ok;

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct kvc_grammar *g = NULL;
		int rc = kvc_compile(V, &refused[i].sp, &g, err, sizeof(err));

		CHECK(rc == -EINVAL && !g && strstr(err, refused[i].want), "%s: spec %zu refused, naming "
		      "%s (%d: %s)", MNAME, i, refused[i].want, rc, err);
		kvc_grammar_release(g);
	}
	{	/* no vocabulary, or no spec: refused, not dereferenced */
		struct kvc_spec js = { .kind = KVC_JSON_OBJECT };
		struct kvc_grammar *g1 = (struct kvc_grammar *)err, *g2 = (struct kvc_grammar *)err;

		CHECK(kvc_compile(V, NULL, &g1, err, sizeof(err)) == -EINVAL && !g1 &&
		      strstr(err, "no vocabulary or spec") &&
		      kvc_compile(NULL, &js, &g2, err, sizeof(err)) == -EINVAL && !g2,
		      "%s: kvc_compile without a spec, or without a vocabulary: -EINVAL, no grammar",
		      MNAME);
	}
	{	/* the limits: 64 calls, 64 whitespace bytes, the longest tags */
		struct kvc_spec calls = { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1,
					  .max_calls = 64, .start_tag = tag65 + 1, .end_tag = tag65 + 1 };
		struct kvc_spec wsp = { .kind = KVC_JSON_OBJECT, .max_ws = 64 };
		struct kvc_grammar *gc = NULL, *gw = NULL;
		char text[200];

		ok = !kvc_compile(V, &calls, &gc, err, sizeof(err));
		snprintf(text, sizeof(text), "%s{\"name\":\"f\",\"arguments\":{}}%s", tag65 + 1, tag65 + 1);
		CHECK(ok && accepts_bytes(gc, text, 0), "%s: 64 calls and 64-byte tags allowed %s", MNAME,
		      ok ? "" : err);
		ok = !kvc_compile(V, &wsp, &gw, err, sizeof(err));
		text[0] = '{';
		memset(text + 1, ' ', 64);
		snprintf(text + 65, sizeof(text) - 65, "\"a\":1}");
		CHECK(ok && accepts_bytes(gw, text, 0), "%s: max_ws 64 allowed, 64 spaces in an object %s",
		      MNAME, ok ? "" : err);
		kvc_grammar_release(gc);
		kvc_grammar_release(gw);
	}
	{	/* a schema of exactly KVC_MAX_SPEC_BYTES: "{", spaces, "}" */
		char *big = malloc(KVC_MAX_SPEC_BYTES);
		struct kvc_spec sp = { .kind = KVC_JSON_SCHEMA, .json = big,
				       .json_len = KVC_MAX_SPEC_BYTES };
		struct kvc_grammar *g = NULL;

		ok = big != NULL;
		if (ok) {
			memset(big, ' ', KVC_MAX_SPEC_BYTES);
			big[0] = '{';
			big[KVC_MAX_SPEC_BYTES - 1] = '}';
			ok = !kvc_compile(V, &sp, &g, err, sizeof(err));
		}
		CHECK(ok && accepts_bytes(g, "[1]", 0), "%s: a schema of exactly %u bytes allowed %s",
		      MNAME, KVC_MAX_SPEC_BYTES, ok ? "" : err);
		kvc_grammar_release(g);
		free(big);
	}
	{	/* max_ws 1: one whitespace byte at a place, not two; the default 8 */
		struct kvc_spec w1 = { .kind = KVC_JSON_OBJECT, .max_ws = 1 };
		struct kvc_spec w0 = { .kind = KVC_JSON_OBJECT };
		struct kvc_grammar *g1 = NULL, *g0 = NULL;

		ok = !kvc_compile(V, &w1, &g1, err, sizeof(err)) && !kvc_compile(V, &w0, &g0, err, sizeof(err));
		CHECK(ok && accepts_bytes(g1, "{ \"a\": [1, {}] }", 0) && !accepts_bytes(g1, "{  \"a\":1}", 0) &&
		      !accepts_bytes(g1, "{\"a\":1}\n\n", 0) && accepts_bytes(g0, "{        \"a\":1}", 0) &&
		      !accepts_bytes(g0, "{         \"a\":1}", 0),
		      "%s: whitespace bounded by max_ws (1) and by default (8) %s", MNAME, ok ? "" : err);
		kvc_grammar_release(g1);
		kvc_grammar_release(g0);
	}
	{	/* the default: at most 4 calls in a row */
		struct kvc_spec d = { .kind = KVC_TOOL_CALLS, .json = one, .json_len = sizeof(one) - 1 };
		struct kvc_grammar *g = NULL;
		char text[400] = "";
		int k, four = 0;

		ok = !kvc_compile(V, &d, &g, err, sizeof(err));
		for (k = 0; ok && k < 5; k++) {
			strcat(text, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>");
			if (k == 3)
				four = accepts_bytes(g, text, 0);
		}
		CHECK(ok && four && !accepts_bytes(g, text, 0), "%s: 4 calls by default, not 5 %s", MNAME,
		      ok ? "" : err);
		kvc_grammar_release(g);
	}
}

/* A vocabulary cut just below the tokenizer's EOS (n_vocab == eos id):
 * it has no EOS, so an accepting matcher's mask sets no bit at or past
 * n_vocab, and the id n_vocab is no token. */
static void eos_outside(void)
{
	int32_t eos = kve_tokenizer_eos(T);
	struct kvc_vocab *v;
	struct kvc_spec sp = { .kind = KVC_JSON_SCHEMA, .json = "{\"const\":1}", .json_len = 11 };
	struct kvc_grammar *g = NULL;
	struct kvc_matcher *m = NULL;
	uint32_t *mask = NULL, w, words, past = 0;
	char err[256] = "";
	int ok;

	if (eos < 256 || byte_tok['1'] < 0 || byte_tok['1'] >= eos)
		return;	/* SPM: EOS is id 2, below the byte tokens */
	v = kvc_vocab_create(T, (uint32_t)eos, err, sizeof(err));
	ok = v && !kvc_compile(v, &sp, &g, err, sizeof(err));
	words = v ? kvc_mask_words(v) : 0;
	mask = calloc(words + 1, 4);
	m = ok ? kvc_matcher_create(g, 0) : NULL;
	ok = ok && m && mask && kvc_advance(m, byte_tok['1']) == 0 && kvc_accepting(m);
	if (ok) {
		kvc_mask(m, mask);
		for (w = (uint32_t)eos; w < (words + 1) * 32; w++)
			past += (mask[w >> 5] >> (w & 31)) & 1;
		ok = !past && kvc_advance(m, eos) != 0;
	}
	CHECK(ok, "%s: a vocabulary of %d tokens (EOS past its end): no mask bit past it (%u), "
	      "id %d no token %s", MNAME, eos, past, eos, err);
	kvc_matcher_free(m);
	kvc_grammar_release(g);
	kvc_vocab_free(v);
	free(mask);
}

/* A vocabulary of single bytes only, each once (a byte-level BPE
 * model's first ids: its byte tokens): no two tokens share a trie node,
 * so the trie has one node per byte of the vocabulary, the most it can
 * have (ASan sees one more). It still spells any JSON, one byte a
 * token. */
static void bytes_only(void)
{
	struct kvc_spec sp = { .kind = KVC_JSON_OBJECT };
	struct kvc_grammar *g = NULL;
	struct kvc_vocab *v = NULL;
	uint8_t seen[256] = { 0 };
	uint32_t n, distinct = 0;
	char err[256] = "", piece[16];
	int ok = 1;

	for (n = 0; n < NV; n++) {
		int k = kve_token_bytes(T, (int32_t)n, piece, sizeof(piece));

		if (k > 1 || (k == 1 && seen[(uint8_t)piece[0]]))
			break;
		if (k == 1) {
			seen[(uint8_t)piece[0]] = 1;
			distinct++;
		}
	}
	if (distinct == 256) {
		struct kvc_matcher *m;
		const char *p;

		v = kvc_vocab_create(T, n, err, sizeof(err));
		ok = v && !kvc_compile(v, &sp, &g, err, sizeof(err));
		m = ok ? kvc_matcher_create(g, 0) : NULL;
		ok = ok && m;
		/* the ids below n are this vocabulary's byte tokens */
		for (p = "{\"a\":[1,{}]}"; ok && *p; p++)
			ok = byte_tok[(uint8_t)*p] < (int32_t)n &&
			     kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		ok = ok && kvc_accepting(m);
		kvc_matcher_free(m);
	}
	if (distinct < 256)	/* SentencePiece: id 0 is <unk>, five bytes */
		printf("# %s: its first ids are not the 256 bytes alone (a byte-level "
		       "BPE vocabulary's are)\n", MNAME);
	else
		CHECK(ok, "%s: a vocabulary of its first %u ids, the 256 bytes once each: "
		      "compiles and spells an object %s", MNAME, n, err);
	kvc_grammar_release(g);
	kvc_vocab_free(v);
}

static void cache(void)
{
	char err[256];
	struct kvc_grammar *a = compile(KVC_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"integer\"}}}", err, sizeof(err));
	struct kvc_grammar *b = compile(KVC_JSON_SCHEMA, " { \"type\" : \"object\" ,\n \"properties\":{\"q\":{\"type\":\"integer\"}}}", err, sizeof(err));
	struct kvc_grammar *c = compile(KVC_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"number\"}}}", err, sizeof(err));

	CHECK(a && a == b && c && c != a, "%s: the cache returns one grammar for the same content, another for other content", MNAME);
	kvc_grammar_release(a);
	kvc_grammar_release(b);
	kvc_grammar_release(c);
}

static const char TOOLS[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"command\":{\"enum\":[\"ls\",\"ls -l\",\"make check\"]}},\"required\":[\"command\"],"
	"\"additionalProperties\":false}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"days\":{\"type\":\"integer\","
	"\"minimum\":1,\"maximum\":7},\"opts\":{\"type\":\"object\",\"properties\":{\"metric\":{\"type\":\"boolean\"}}}},"
	"\"required\":[\"city\"]}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"noargs\"}}]";

static struct kvc_grammar *tools_grammar(const char *name, uint32_t calls)
{
	struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = TOOLS, .json_len = strlen(TOOLS),
			       .tool_name = name, .max_calls = calls };
	struct kvc_grammar *g = NULL;
	char err[256];

	if (kvc_compile(V, &sp, &g, err, sizeof(err)))
		printf("# tools: %s\n", err);
	return g;
}

/*
 * An EOS of id 0 (GPT-NeoX and StarCoder vocabularies put
 * <|endoftext|> there) is an EOS like any other: an accepting matcher's
 * mask sets bit 0 and the token ends the output. The model file read
 * again with its eos_token_id made 0, the rest unchanged.
 */
static void eos_id0(const char *path)
{
	static const char key[] = "eos_token_id\x04\0\0\0";	/* the key's end, U32 */
	struct kvc_spec sp = { .kind = KVC_JSON_SCHEMA, .json = "{\"const\":1}", .json_len = 11 };
	size_t len = 0, i;
	uint8_t *b = tc_slurp(path, &len), *at = NULL;
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	struct kvc_vocab *v = NULL;
	struct kvc_grammar *g = NULL;
	struct kvc_matcher *mt = NULL;
	uint32_t *mask = NULL;
	char err[256] = "";
	int ok = 0;

	for (i = 0; b && !at && i + sizeof(key) - 1 + 4 <= len; i++)
		if (!memcmp(b + i, key, sizeof(key) - 1))
			at = b + i + sizeof(key) - 1;
	if (at) {
		memset(at, 0, 4);
		m = kve_model_load_mem(b, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		v = t ? kvc_vocab_create(t, NV, err, sizeof(err)) : NULL;
		mask = v ? calloc(kvc_mask_words(v), 4) : NULL;
		ok = mask && kve_tokenizer_eos(t) == 0 && !kvc_compile(v, &sp, &g, err, sizeof(err));
		mt = ok ? kvc_matcher_create(g, 0) : NULL;
		ok = ok && mt && kvc_advance(mt, byte_tok['1']) == 0 && kvc_accepting(mt);
		if (ok)
			kvc_mask(mt, mask);
		ok = ok && (mask[0] & 1) && kvc_advance(mt, 0) == 0 &&
		     kvc_advance(mt, byte_tok['1']) == -EPERM;
	}
	CHECK(ok, "%s: an EOS of id 0: its mask bit set once accepting, and it ends the output %s",
	      MNAME, at ? err : "(no eos_token_id in the file)");
	kvc_matcher_free(mt);
	kvc_grammar_release(g);
	kvc_vocab_free(v);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(mask);
	free(b);
}

/*
 * A token that completes the start tag and goes on into the call: its
 * bytes after the tag's last byte are the grammar's from the tag on
 * (">{" after "<tool_call" opens the call), not the tag's last byte
 * again. Only vocabularies with such a piece can say; brackets-tag-spm
 * has ">{", and main() checks that some model did.
 */
static int tag_token_models;

static void lazy_token_past_tag(void)
{
	struct kvc_grammar *g = tools_grammar(NULL, 0);
	struct kvc_matcher *m = g ? kvc_matcher_create(g, KVC_LAZY) : NULL;
	uint32_t *mask = calloc(kvc_mask_words(V), 4);
	const char *p;
	int32_t id = -1;
	uint32_t i;
	int ok = m && mask;

	for (i = 0; i < NV && id < 0; i++) {
		char b[8];

		if (kve_token_bytes(T, (int32_t)i, b, sizeof(b)) == 2 && !memcmp(b, ">{", 2))
			id = (int32_t)i;
	}
	if (id >= 0) {
		tag_token_models++;
		for (p = "Calling <tool_call"; ok && *p; p++)
			ok = kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		if (ok)
			kvc_mask(m, mask);
		ok = ok && ((mask[id >> 5] >> (id & 31)) & 1) && kvc_advance(m, id) == 0 &&
		     kvc_triggered(m) && !kvc_accepting(m);
		for (p = "\"name\":\"noargs\",\"arguments\":{}}</tool_call>"; ok && *p; p++)
			ok = kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		CHECK(ok && kvc_accepting(m), "%s: lazy: the token '>{' after '<tool_call' completes "
		      "the tag and opens the call", MNAME);
	}
	free(mask);
	kvc_matcher_free(m);
	kvc_grammar_release(g);
}

static void tool_calls(void)
{
	struct kvc_grammar *g = tools_grammar(NULL, 2), *one = tools_grammar(NULL, 1),
			   *named = tools_grammar("get_weather", 1);
	const char *c1 = "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"command\": \"make check\"}}\n</tool_call>";
	const char *c2 = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Z\\u00fcrich\",\"days\":3,"
			 "\"opts\":{}}}</tool_call>";
	const char *c3 = "<tool_call>{\"name\":\"noargs\",\"arguments\":{}}</tool_call>";
	char buf[1024];
	struct kvc_spec bad = { .kind = KVC_TOOL_CALLS, .json = TOOLS, .json_len = strlen(TOOLS),
				.tool_name = "nope" };
	struct kvc_grammar *gb = NULL;
	char err[256];

	CHECK(g && one && named, "%s: tool-call grammars compile", MNAME);
	if (!g || !one || !named)
		return;
	snprintf(buf, sizeof(buf), "%s\n%s", c1, c2);
	CHECK(accepts_bytes(g, c1, 0) && accepts_bytes(g, c2, 0) && accepts_bytes(g, c3, 0) &&
	      accepts_bytes(g, buf, 0),
	      "%s: tool calls (enum argument, nested object, no parameters, two in a row) accepted", MNAME);
	CHECK(!accepts_bytes(one, buf, 0) && accepts_bytes(one, c2, 0),
	      "%s: max_calls 1 (parallel_tool_calls false) refuses a second call", MNAME);
	CHECK(!accepts_bytes(named, c1, 0) && accepts_bytes(named, c2, 0),
	      "%s: a named tool_choice allows that tool only", MNAME);
	CHECK(!accepts_bytes(g, "<tool_call>{\"name\":\"rm\",\"arguments\":{}}</tool_call>", 0) &&
	      !accepts_bytes(g, "<tool_call>{\"name\":\"run\",\"arguments\":{\"command\":\"rm\"}}</tool_call>", 0) &&
	      !accepts_bytes(g, "<tool_call>{\"name\":\"run\",\"arguments\":{\"command\":\"ls\"}}", 0) &&
	      !accepts_bytes(g, "Sure. <tool_call>{\"name\":\"noargs\",\"arguments\":{}}</tool_call>", 0) &&
	      !accepts_bytes(g, "<tool_call>{\"arguments\":{},\"name\":\"noargs\"}</tool_call>", 0),
	      "%s: unknown tool, bad argument, unclosed call, text before a required call refused", MNAME);
	snprintf(buf, sizeof(buf), "Let me check. <tool_%s", c3 + 6);
	CHECK(accepts_bytes(g, "Just text, no call.", KVC_LAZY) && accepts_bytes(g, buf, KVC_LAZY) &&
	      !accepts_bytes(g, "Calling <tool_call>{\"name\":\"rm\"", KVC_LAZY) &&
	      !accepts_bytes(g, "text <tool_call>{\"name\":\"noargs\",\"arguments\":{}}", KVC_LAZY),
	      "%s: lazy (tool_choice auto): free text, then constrained from the start tag on", MNAME);
	{	/* a lazy matcher: triggered only at the tag */
		struct kvc_matcher *m = kvc_matcher_create(g, KVC_LAZY);
		const char *p = "x <tool_call";
		int ok = 1;
		for (; *p; p++)
			ok &= kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		ok &= !kvc_triggered(m);
		ok &= kvc_advance(m, byte_tok['>']) == 0 && kvc_triggered(m) && !kvc_accepting(m);
		ok &= kvc_advance(m, byte_tok['x']) == -EPERM;
		CHECK(ok, "%s: the trigger fires at the tag's last byte; bytes after it are constrained", MNAME);
		kvc_matcher_free(m);
	}
	CHECK(kvc_compile(V, &bad, &gb, err, sizeof(err)) == -EINVAL && strstr(err, "no tool named 'nope'"),
	      "%s: a named tool that is not declared is refused (%s)", MNAME, err);
	kvc_grammar_release(g);
	kvc_grammar_release(one);
	kvc_grammar_release(named);
}

/* The cache key holds the whole spec however long the tags: two tool
 * sets that differ only in their last bytes, under a 64-byte start tag,
 * are two grammars. */
static void cache_long_tag(void)
{
	static const char tag[] = "<a-start-tag-of-the-longest-length-allowed-which-is-64-bytes--->";
	static const char ta[] = "[{\"type\":\"function\",\"function\":{\"name\":\"aa\"}}]";
	static const char tb[] = "[{\"type\":\"function\",\"function\":{\"name\":\"ab\"}}]";
	struct kvc_spec sa = { .kind = KVC_TOOL_CALLS, .json = ta, .json_len = sizeof(ta) - 1,
			       .start_tag = tag };
	struct kvc_spec sb = sa;
	struct kvc_grammar *ga = NULL, *gb = NULL;
	struct kvc_grammar_stats st = { 0 };
	char err[256], call[160];
	int ok;

	sb.json = tb;
	sb.json_len = sizeof(tb) - 1;
	ok = sizeof(tag) - 1 == 64 && !kvc_compile(V, &sa, &ga, err, sizeof(err)) &&
	     !kvc_compile(V, &sb, &gb, err, sizeof(err));
	if (ok)
		kvc_grammar_stats(gb, &st);
	snprintf(call, sizeof(call), "%s{\"name\":\"ab\",\"arguments\":{}}</tool_call>", tag);
	CHECK(ok && ga != gb && !st.cached && accepts_bytes(gb, call, 0) && !accepts_bytes(ga, call, 0),
	      "%s: a 64-byte start tag: tool sets differing in their last bytes are two grammars", MNAME);
	kvc_grammar_release(ga);
	kvc_grammar_release(gb);
}

/* The lazy scan for the start tag after false starts: text that
 * shares a stretch with the tag is still free text ("<toolol_call>",
 * where a scan that falls back too far would see the tag), and a tag
 * whose own prefix repeats is found after a partial match ("abac" in
 * "ababac", found by falling back to "ab"). */
static void tag_scan(void)
{
	static const char call[] = "{\"name\":\"noargs\",\"arguments\":{}}</tool_call>";
	struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = TOOLS, .json_len = strlen(TOOLS),
			       .start_tag = "abac" };
	struct kvc_grammar *g = tools_grammar(NULL, 2), *ga = NULL;
	const char *texts[2] = { "I typed <toolol_call> by mistake.", NULL };
	char err[256], buf[256];
	int i, ok[2] = { 0, 0 }, trig[2] = { 1, 0 };

	snprintf(buf, sizeof(buf), "ababac%s", call);
	texts[1] = buf;
	if (kvc_compile(V, &sp, &ga, err, sizeof(err)))
		printf("# abac: %s\n", err);
	for (i = 0; i < 2; i++) {
		struct kvc_grammar *gi = i ? ga : g;
		struct kvc_matcher *m = gi ? kvc_matcher_create(gi, KVC_LAZY) : NULL;
		const char *p;

		ok[i] = m != NULL;
		for (p = texts[i]; ok[i] && *p; p++)
			ok[i] = kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		ok[i] = ok[i] && kvc_accepting(m);
		trig[i] = m ? kvc_triggered(m) : -1;
		kvc_matcher_free(m);
	}
	CHECK(ok[0] && !trig[0], "%s: lazy: '%s' is free text (no tag)", MNAME, texts[0]);
	CHECK(ok[1] && trig[1] == 1, "%s: lazy, start tag 'abac': '%s' is a call after a false start",
	      MNAME, texts[1]);
	kvc_grammar_release(g);
	kvc_grammar_release(ga);
}

/*
 * Lazy free text, with none and then part of the start tag "th" written:
 * each token's mask bit is what its bytes fed one at a time give. A
 * token that completes the tag and goes on with bytes the grammar
 * refuses ("he" after "t": the call must open with '{') is masked; one
 * that completes it validly, or never does, is not.
 */
static void lazy_mask_bytes(void)
{
	struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = TOOLS, .json_len = strlen(TOOLS),
			       .start_tag = "th" };
	struct kvc_grammar *g = NULL;
	uint32_t *mask = calloc(kvc_mask_words(V), 4);
	char err[256];
	int k;

	if (kvc_compile(V, &sp, &g, err, sizeof(err)))
		printf("# th: %s\n", err);
	for (k = 0; k < 2; k++) {
		struct kvc_matcher *m = g ? kvc_matcher_create(g, KVC_LAZY) : NULL;
		int ok = m && mask && (!k || kvc_advance(m, byte_tok['t']) == 0), mism = 0, masked = 0;
		uint32_t id;

		if (ok)
			kvc_mask(m, mask);
		for (id = 0; ok && id < NV; id++) {
			char b[64];
			int n = kve_token_bytes(T, (int32_t)id, b, sizeof(b)), j, bytes_ok = 1;
			struct kvc_matcher *c;

			for (j = 0; j < n && j < (int)sizeof(b); j++)
				bytes_ok &= byte_tok[(uint8_t)b[j]] >= 0;
			if (n <= 0 || n > (int)sizeof(b) || !bytes_ok)
				continue;
			c = kvc_matcher_clone(m);
			for (j = 0; c && bytes_ok && j < n; j++)
				bytes_ok = kvc_advance(c, byte_tok[(uint8_t)b[j]]) == 0;
			kvc_matcher_free(c);
			mism += bytes_ok != (int)((mask[id >> 5] >> (id & 31)) & 1);
			masked += !bytes_ok;
		}
		CHECK(ok && !mism && masked > 0, "%s: lazy after '%.*s': every mask bit is its bytes' "
		      "verdict (%d differ; %d tokens refused)", MNAME, k, "th", mism, masked);
		/* 2 tokens left: one that opens the call must leave room to
		 * close it (kvc_remaining <= 1), free text may stop anywhere */
		if (ok)
			kvc_mask_budget(m, mask, 2);
		for (id = 0, mism = masked = 0; ok && id < NV; id++) {
			struct kvc_matcher *c = kvc_matcher_clone(m);
			int keep = c && kvc_advance(c, (int32_t)id) == 0 && kvc_remaining(c) <= 1;

			kvc_matcher_free(c);
			if ((int32_t)id == kve_tokenizer_eos(T))
				continue;
			mism += keep != (int)((mask[id >> 5] >> (id & 31)) & 1);
			masked += !keep;
		}
		CHECK(ok && !mism && masked > 0, "%s: lazy after '%.*s', 2 tokens left: every budget "
		      "mask bit is what the token leaves (%d differ; %d tokens refused)", MNAME, k, "th",
		      mism, masked);
		kvc_matcher_free(m);
	}
	free(mask);
	kvc_grammar_release(g);
}

/* kvc_finished: 0 while a byte may still follow (the value, then its
 * trailing whitespace), 1 once only EOS may; 0 in lazy free text. */
static void finished(void)
{
	char err[256];
	struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, "{\"enum\":[\"a\"]}", err, sizeof(err)),
			   *tg = tools_grammar(NULL, 1);
	struct kvc_matcher *m = g ? kvc_matcher_create(g, 0) : NULL;
	struct kvc_matcher *lz = tg ? kvc_matcher_create(tg, KVC_LAZY) : NULL;
	int ok = m && lz, before = 0, spaces = 0;
	const char *p;

	for (p = "\"a\""; ok && *p; p++) {
		before |= kvc_finished(m);
		ok = kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
	}
	ok = ok && kvc_accepting(m) && !kvc_finished(m);
	while (ok && spaces < 100 && kvc_advance(m, byte_tok[' ']) == 0)
		spaces++;
	ok = ok && spaces > 0 && spaces < 100 && kvc_accepting(m) && kvc_finished(m);
	ok = ok && !before && kvc_advance(lz, byte_tok['x']) == 0 && !kvc_finished(lz);
	CHECK(ok, "%s: kvc_finished: 0 inside the value and after it while whitespace may follow, "
	      "1 after the last allowed space (%d), 0 in lazy free text", MNAME, spaces);
	if (ok) {	/* EOS ends it: an empty mask (every word cleared), no more tokens */
		uint32_t w, words = kvc_mask_words(V), *mask = malloc(words * 4), set = 0;
		int n;

		memset(mask, 0xff, words * 4);
		ok = kvc_advance(m, kve_tokenizer_eos(T)) == 0;
		n = kvc_mask(m, mask);
		for (w = 0; w < words; w++)
			set |= mask[w];
		CHECK(ok && n == 0 && !set && kvc_advance(m, byte_tok[' ']) == -EPERM &&
		      kvc_advance(m, kve_tokenizer_eos(T)) == -EPERM,
		      "%s: after EOS: kvc_mask allows nothing and clears all %u words, every token "
		      "refused", MNAME, words);
		free(mask);
	}
	kvc_matcher_free(m);
	kvc_matcher_free(lz);
	kvc_grammar_release(g);
	kvc_grammar_release(tg);
}

/* kvc_mask_budget at its exact edge: a token is kept with tokens_left
 * tokens to go iff the output can still be completed after it within
 * tokens_left - 1 (kvc_remaining of a clone that took it, one token per
 * byte at worst). Checked for every allowed token at tokens_left = r and
 * r + 1 for each distinct r, and at 0 (nothing but EOS), constrained (a string with minLength) and
 * lazy with all of the start tag but its last byte seen (the token that
 * completes the tag must leave room to close the call). */
static int budget_edge_at(struct kvc_matcher *m, uint32_t *mask, uint32_t *bm, uint32_t *rem,
			  int *kept_at_edge)
{
	uint32_t w, id, t, words = kvc_mask_words(V), tried[64], nt = 0;
	int ok = kvc_mask(m, mask) > 0;

	for (id = 0; ok && id < NV; id++) {
		struct kvc_matcher *c;

		rem[id] = UINT32_MAX;
		if (!((mask[id >> 5] >> (id & 31)) & 1) || (int32_t)id == kve_tokenizer_eos(T))
			continue;
		c = kvc_matcher_clone(m);
		ok = c && kvc_advance(c, (int32_t)id) == 0;
		if (ok)
			rem[id] = kvc_remaining(c);
		kvc_matcher_free(c);
	}
	for (id = 0; ok && id < NV; id++) {
		uint32_t k, r = rem[id];

		if (r == UINT32_MAX)
			continue;
		for (k = 0; k < nt && tried[k] != r; k++)
			;
		if (k < nt || nt == 64)
			continue;
		tried[nt++] = r;
		for (t = r ? r : 1; t <= r + 1; t++) {
			memcpy(bm, mask, words * 4);
			ok &= kvc_mask_budget(m, bm, t) >= 0;
			for (w = 0; ok && w < NV; w++) {
				int bit = (bm[w >> 5] >> (w & 31)) & 1;

				if (rem[w] == UINT32_MAX)
					continue;
				ok &= bit == (rem[w] <= t - 1);
				if (bit && rem[w] == t - 1 && rem[w] > 0)
					(*kept_at_edge)++;
			}
		}
	}
	/* no token left: none but EOS */
	memcpy(bm, mask, words * 4);
	ok &= kvc_mask_budget(m, bm, 0) >= 0;
	for (w = 0; ok && w < NV; w++)
		ok &= !((bm[w >> 5] >> (w & 31)) & 1) || (int32_t)w == kve_tokenizer_eos(T);
	return ok;
}

static void budget_edge(void)
{
	char err[256];
	struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":3}", err,
					sizeof(err)), *tg = tools_grammar(NULL, 1);
	uint32_t words = kvc_mask_words(V);
	uint32_t *mask = calloc(words, 4), *bm = calloc(words, 4), *rem = calloc(NV, 4);
	struct kvc_matcher *m = g ? kvc_matcher_create(g, 0) : NULL;
	struct kvc_matcher *lz = tg ? kvc_matcher_create(tg, KVC_LAZY) : NULL;
	const char *p;
	int ok = m && lz && mask && bm && rem, edge = 0, ledge = 0;

	ok = ok && kvc_advance(m, byte_tok['"']) == 0 && budget_edge_at(m, mask, bm, rem, &edge);
	CHECK(ok && edge > 0, "%s: budget mask in a string (minLength 3): a token is kept iff what "
	      "follows it fits tokens_left - 1, %d kept at exactly that edge", MNAME, edge);
	for (p = "Sure. <tool_call"; ok && *p; p++)
		ok = kvc_advance(lz, byte_tok[(uint8_t)*p]) == 0;
	ok = ok && !kvc_triggered(lz) && budget_edge_at(lz, mask, bm, rem, &ledge);
	CHECK(ok && ledge > 0, "%s: budget mask in lazy free text one byte before the start tag: a "
	      "token completing the tag is kept iff the call fits after it (%d at the edge)", MNAME, ledge);
	kvc_matcher_free(m);
	kvc_matcher_free(lz);
	kvc_grammar_release(g);
	kvc_grammar_release(tg);
	free(mask);
	free(bm);
	free(rem);
}

/* Free-form nesting stops at KVC_MAX_DEPTH: the mask (the slow path near
 * the limit) and kvc_advance agree, and '[' is refused at the limit. */
static void depth_limit(void)
{
	char err[256];
	struct kvc_grammar *g = compile(KVC_JSON_OBJECT, NULL, err, sizeof(err));
	struct kvc_matcher *m = g ? kvc_matcher_create(g, 0) : NULL;
	uint32_t *mask = calloc(kvc_mask_words(V), 4), d;
	int agree = 1, refused = 0;
	const char *p;

	if (!m) {
		CHECK(0, "%s: json_object compiles: %s", MNAME, err);
		free(mask);
		return;
	}
	for (p = "{\"a\":"; *p; p++)
		kvc_advance(m, byte_tok[(uint8_t)*p]);
	for (d = 0; d < KVC_MAX_DEPTH + 2; d++) {
		uint32_t id;
		kvc_mask(m, mask);
		for (id = 0; id < NV; id++) {
			struct kvc_matcher *c = kvc_matcher_clone(m);
			int bit = (mask[id >> 5] >> (id & 31)) & 1;
			if (bit != (kvc_advance(c, (int32_t)id) == 0))
				agree = 0;
			kvc_matcher_free(c);
		}
		if (kvc_advance(m, byte_tok['[']) == -EPERM) {
			refused = 1;
			break;
		}
	}
	CHECK(agree && refused && d == KVC_MAX_DEPTH - 1,
	      "%s: nesting stops at %d levels (refused at %u), mask == advance near the limit",
	      MNAME, KVC_MAX_DEPTH, d);
	kvc_matcher_free(m);
	kvc_grammar_release(g);
	free(mask);
}

/* States share a token set only when they answer alike for every byte
 * string up to the longest token (L bytes): in a string of maxLength
 * L + 3, the counts L - 1 and L before the bound differ only in what a
 * token of L string characters does. At every count the mask is exactly
 * the tokens kvc_advance takes. */
static void string_counts(void)
{
	char err[256], spec[80], piece[512];
	uint32_t *mask = calloc(kvc_mask_words(V), 4), id, L = 0, j;
	struct kvc_grammar *g;
	struct kvc_matcher *m;
	int agree = 1, n;

	for (id = 0; id < NV; id++) {
		n = kve_token_bytes(T, (int32_t)id, piece, sizeof(piece));
		if (n > (int)L)
			L = (uint32_t)n;
	}
	snprintf(spec, sizeof(spec), "{\"type\":\"string\",\"maxLength\":%u}", L + 3);
	g = compile(KVC_JSON_SCHEMA, spec, err, sizeof(err));
	m = g ? kvc_matcher_create(g, 0) : NULL;
	if (!m || !mask || kvc_advance(m, byte_tok['"'])) {
		CHECK(0, "%s: %s compiles: %s", MNAME, spec, g ? "" : err);
		kvc_matcher_free(m);
		kvc_grammar_release(g);
		free(mask);
		return;
	}
	for (j = 0; j <= L + 3 && agree; j++) {
		kvc_mask(m, mask);
		for (id = 0; id < NV; id++) {
			struct kvc_matcher *c = kvc_matcher_clone(m);
			int bit = (mask[id >> 5] >> (id & 31)) & 1;

			if (bit != (kvc_advance(c, (int32_t)id) == 0)) {
				printf("# after %u characters: token %u's bit %d\n", j, id, bit);
				agree = 0;
			}
			kvc_matcher_free(c);
		}
		if (j < L + 3 && kvc_advance(m, byte_tok['a']))
			agree = 0;
	}
	CHECK(agree, "%s: a string of maxLength %u (the longest token + 3): at each count "
	      "the mask is what kvc_advance takes", MNAME, L + 3);
	kvc_matcher_free(m);
	kvc_grammar_release(g);
	free(mask);
}

static void sample_masked(void)
{
	uint32_t n = 300, i, mask[10] = { 0 }, bad = 0, seen = 0;
	float lg[300];
	uint64_t r = 7;
	struct kve_sampler s = { .temperature = 0.8f, .top_p = 0.9f, .rng = kve_rng_seed(3) };
	struct kve_sampler g0 = { 0 };
	void *scr = malloc(KVE_SAMPLE_SCRATCH(300));
	int32_t t;

	for (i = 0; i < n; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		lg[i] = (float)((r >> 40) % 1000) / 1000.0f;
	}
	lg[5] = 100;	/* the global best, not allowed */
	for (i = 37; i < n; i += 41)
		mask[i >> 5] |= 1u << (i & 31);
	t = kve_sample_masked(&g0, lg, n, mask, NULL);
	{
		int32_t best = -1;
		for (i = 0; i < n; i++)
			if (((mask[i >> 5] >> (i & 31)) & 1) && (best < 0 || lg[i] > lg[best]))
				best = (int32_t)i;
		CHECK(t == best, "kve_sample_masked greedy: the best allowed token (%d)", t);
	}
	for (i = 0; i < 2000; i++) {
		t = kve_sample_masked(&s, lg, n, mask, scr);
		if (t < 0 || !((mask[t >> 5] >> (t & 31)) & 1))
			bad++;
		else
			seen |= 1u << ((t - 37) / 41);
	}
	CHECK(!bad && __builtin_popcount(seen) >= 3,
	      "kve_sample_masked sampled: only allowed tokens, several of them (%d)", __builtin_popcount(seen));
	memset(mask, 0, sizeof(mask));
	CHECK(kve_sample_masked(&s, lg, n, mask, scr) == -ENOENT, "kve_sample_masked: no allowed token: -ENOENT");
	{	/* bits past the vocabulary in its last mask word are not tokens:
		 * a vocabulary of 40 with all 64 bits set, the logits rising */
		float *l40 = malloc(40 * sizeof(float));	/* exact: ASan sees a read past it */
		uint32_t all[2] = { ~0u, ~0u };
		struct kve_sampler k1 = { .temperature = 0.8f, .top_k = 1, .rng = kve_rng_seed(5) };
		int ok = 1;

		for (i = 0; i < 40; i++)
			l40[i] = (float)i;
		ok &= kve_sample_masked(&g0, l40, 40, all, NULL) == 39;
		ok &= kve_sample_masked(&k1, l40, 40, all, NULL) == 39;
		for (i = 0; i < 200; i++) {
			t = kve_sample_masked(&s, l40, 40, all, scr);
			ok &= t >= 0 && t < 40;
		}
		all[1] = 0xffu << 8;	/* only ids 40..47: none in the vocabulary */
		all[0] = 0;
		ok &= kve_sample_masked(&s, l40, 40, all, scr) == -ENOENT;
		all[1] = 1u << 7;	/* id 39 only */
		ok &= kve_sample_masked(&s, l40, 40, all, scr) == 39;
		CHECK(ok, "kve_sample_masked: mask bits past a vocabulary of 40 are no tokens; top_k 1 "
		      "is greedy");
		free(l40);
	}
	{	/* bad arguments: -EINVAL, and a sampled draw needs its scratch */
		uint32_t one[1] = { 1 };
		float l1[1] = { 0 };

		CHECK(kve_sample(NULL, lg, n, scr) == -EINVAL && kve_sample(&s, NULL, n, scr) == -EINVAL &&
		      kve_sample(&s, lg, 0, scr) == -EINVAL &&
		      kve_sample(&s, lg, (uint32_t)INT32_MAX + 1, scr) == -EINVAL &&
		      kve_sample(&s, lg, n, NULL) == -EINVAL && kve_sample(&g0, lg, n, NULL) == 5 &&
		      kve_sample_masked(NULL, lg, n, mask, scr) == -EINVAL &&
		      kve_sample_masked(&s, NULL, n, mask, scr) == -EINVAL &&
		      kve_sample_masked(&s, lg, 0, mask, scr) == -EINVAL &&
		      kve_sample_masked(&s, lg, (uint32_t)INT32_MAX + 1, mask, scr) == -EINVAL &&
		      kve_sample_masked(&s, l1, 1, one, NULL) == -EINVAL &&
		      kve_sample_masked(&g0, l1, 1, one, NULL) == 0 &&
		      kve_sample_masked(&g0, lg, n, NULL, NULL) == 5,
		      "kve_sample and kve_sample_masked: bad arguments are -EINVAL, greedy needs no scratch, "
		      "no mask is no constraint");
	}
	free(scr);
}

/*
 * The calls' argument checks: a vocabulary from no tokenizer or of size 0
 * or past 2^24; a compile with no room for a message (nothing written);
 * a matcher of no grammar, or lazy on a grammar without a start tag;
 * tokens outside the vocabulary refused, the matcher unchanged.
 */
static void api_edges(void)
{
	static const struct kvc_spec any = { .kind = KVC_JSON_OBJECT };
	static const struct kvc_spec bad = { .kind = KVC_JSON_SCHEMA, .json = "[", .json_len = 1 };
	struct kvc_grammar *g = NULL, *g2 = NULL;
	struct kvc_matcher *m;
	char err[256], keep[4] = "xyz";
	int ok;

	err[0] = 0;
	ok = !kvc_vocab_create(NULL, NV, err, sizeof(err)) && strstr(err, "bad vocabulary size");
	err[0] = 0;
	ok &= !kvc_vocab_create(T, 0, err, sizeof(err)) && strstr(err, "bad vocabulary size");
	err[0] = 0;
	ok &= !kvc_vocab_create(T, (1u << 24) + 1, err, sizeof(err)) &&
	      strstr(err, "bad vocabulary size");
	CHECK(ok, "%s: a vocabulary of no tokenizer, of 0 tokens or of 2^24 + 1 refused (%s)",
	      MNAME, err);
	ok = kvc_compile(V, &any, &g, NULL, 0) == 0 && g &&
	     kvc_compile(V, &bad, &g2, keep, 0) == -EINVAL && !g2 && !strcmp(keep, "xyz");
	CHECK(ok, "%s: compile with no room for a message: a good spec compiles, a bad one is "
	      "refused, nothing written", MNAME);
	ok = !kvc_matcher_create(NULL, 0) && (!g || !kvc_matcher_create(g, KVC_LAZY));
	m = g ? kvc_matcher_create(g, 0) : NULL;
	ok &= m && kvc_advance(m, -1) == -EINVAL && kvc_advance(m, (int32_t)NV) == -EINVAL &&
	      kvc_advance(m, byte_tok['{']) == 0 && kvc_advance(m, byte_tok['}']) == 0 &&
	      kvc_accepting(m);
	CHECK(ok, "%s: no matcher of no grammar, nor a lazy one without a start tag; tokens -1 "
	      "and %u refused, the matcher unchanged ({} then accepted)", MNAME, NV);
	kvc_matcher_free(m);
	kvc_grammar_release(g);
}

/* Two threads compiling the same new spec at once get one grammar: the
 * later finds the other's in the cache ("compiled meanwhile") and drops
 * its own. Compiled 4 times with fresh specs (the race is likely, not
 * certain; either way the grammars must be one). */
struct race {
	const char *json;
	struct kvc_grammar *g;
	pthread_barrier_t *bar;
};

static void *race_body(void *arg)
{
	struct race *r = arg;
	char err[256];

	pthread_barrier_wait(r->bar);
	r->g = compile(KVC_TOOL_CALLS, r->json, err, sizeof(err));
	return NULL;
}

static void compile_race(void)
{
	pthread_barrier_t bar;
	char js[4][sizeof(TOOLS) + 64];
	int i, ok = 1;

	pthread_barrier_init(&bar, NULL, 2);
	for (i = 0; i < 4; i++) {
		struct race r[2];
		pthread_t th;

		/* a tool set of its own: not in the cache yet */
		snprintf(js[i], sizeof(js[i]), "[{\"type\":\"function\",\"function\":{\"name\":"
			 "\"race%d\"}},%s", i, TOOLS + 1);
		r[0] = (struct race){ js[i], NULL, &bar };
		r[1] = r[0];
		pthread_create(&th, NULL, race_body, &r[1]);
		race_body(&r[0]);
		pthread_join(th, NULL);
		ok &= r[0].g && r[0].g == r[1].g;
		kvc_grammar_release(r[0].g);
		kvc_grammar_release(r[1].g);
	}
	pthread_barrier_destroy(&bar);
	CHECK(ok, "%s: two threads compiling the same new tool set at once get one grammar "
	      "(4 times)", MNAME);
}

/* A grammar held while the cache (32 entries) turns over keeps working,
 * and is freed by its last release (ASan: no leak, no use after free). */
static void cache_evicted(void)
{
	char err[256], js[96];
	struct kvc_grammar *held = compile(KVC_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":-77}",
					   err, sizeof(err)), *g;
	int i, ok = held != NULL;

	for (i = 0; ok && i < 40; i++) {
		snprintf(js, sizeof(js), "{\"type\":\"integer\",\"maximum\":%d}", 1000 + i);
		g = compile(KVC_JSON_SCHEMA, js, err, sizeof(err));
		ok = g != NULL;
		kvc_grammar_release(g);
	}
	ok = ok && accepts_bytes(held, "-77", 0) && !accepts_bytes(held, "-78", 0);
	g = compile(KVC_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":-77}", err, sizeof(err));
	ok = ok && g && g != held;	/* evicted: compiled anew */
	kvc_grammar_release(g);
	kvc_grammar_release(held);
	CHECK(ok, "%s: a grammar held while 40 others pass through the cache still works, and a "
	      "new compile of its spec is another grammar", MNAME);
}

/* A JSON string holds every ASCII byte from 0x20 up but '"' and '\',
 * raw, and none below 0x20: each byte alone between quotes. */
static void string_bytes(void)
{
	char err[256], text[4] = "\"x\"";
	struct kvc_grammar *g = compile(KVC_JSON_SCHEMA, "{\"type\":\"string\"}", err, sizeof(err));
	int b, wrong = -1;

	for (b = 1; g && b < 0x80 && wrong < 0; b++) {
		int want = b >= 0x20 && b != '"' && b != '\\';

		text[1] = (char)b;
		if (accepts_bytes(g, text, 0) != want)
			wrong = b;
	}
	CHECK(g && wrong < 0, "%s: a string accepts each byte 0x20-0x7f but '\"' and '\\' raw, none "
	      "below 0x20 (first wrong: 0x%02x) %s", MNAME, wrong < 0 ? 0 : wrong, g ? "" : err);
	kvc_grammar_release(g);
}

/* Threads compiling through one cache, sharing grammars, each with its
 * own matchers (run under ASan: use-after-free or double free fail). */
static void *thread_body(void *arg)
{
	long k = (long)arg, i;
	char err[256], js[128];
	long ok = 1;

	for (i = 0; i < 20; i++) {
		struct kvc_grammar *g;
		snprintf(js, sizeof(js), "{\"type\":\"integer\",\"minimum\":%ld,\"maximum\":%ld}",
			 (i + k) % 3, 100 + (i + k) % 3);
		g = compile(KVC_JSON_SCHEMA, js, err, sizeof(err));
		ok &= g && accepts_bytes(g, "42", 0) && !accepts_bytes(g, "-1", 0);
		kvc_grammar_release(g);
	}
	return (void *)ok;
}

static void threads(void)
{
	pthread_t th[4];
	long k, ok = 1;
	void *r;

	for (k = 0; k < 4; k++)
		pthread_create(&th[k], NULL, thread_body, (void *)k);
	for (k = 0; k < 4; k++) {
		pthread_join(th[k], &r);
		ok &= (long)r;
	}
	CHECK(ok, "%s: 4 threads compiling through the shared cache, matching concurrently", MNAME);
}

/* Sampling under each kind of constraint with the mask checked against
 * kvc_advance for the whole vocabulary at every step. */
static void generation(struct cgen *c)
{
	static const int pick[] = { 0, 1, 5, 6, 9 };
	struct kvc_grammar *gs[8] = { 0 };
	unsigned fl[8] = { 0 };
	int ng = 0, k, seed;
	char err[256];

	for (k = 0; k < 5; k++)
		gs[ng++] = compile(KVC_JSON_SCHEMA, cases[pick[k]].schema, err, sizeof(err));
	gs[ng++] = compile(KVC_JSON_OBJECT, NULL, err, sizeof(err));
	gs[ng] = tools_grammar(NULL, 2);
	ng++;
	gs[ng] = tools_grammar(NULL, 2);
	fl[ng++] = KVC_LAZY;
	for (k = 0; k < ng; k++) {
		int mism = 0, errs = 0, complete = 0, toks = 0;
		if (!gs[k]) {
			CHECK(0, "%s: grammar %d compiles", MNAME, k);
			continue;
		}
		for (seed = 0; seed < 2; seed++) {
			struct cgen_out o;
			cgen_run(c, gs[k], fl[k], "The arena hands out memory.", 100 * k + seed, 1.0f, 100, 1, &o);
			mism += o.mismatches;
			errs += o.errors;
			complete += o.complete;
			toks += o.tokens;
			free(o.text);
		}
		CHECK(!mism && !errs && complete == 2, "%s: grammar %d%s: %d sampled tokens, every step's mask == "
		      "kvc_advance over all %u tokens, both outputs complete (%d)", MNAME, k,
		      fl[k] ? " (lazy)" : "", toks, NV, complete);
		kvc_grammar_release(gs[k]);
	}
}

/*
 * Where a value ends inside a container its token set cannot say alone
 * what may follow: `}` after `[1` is refused only because the stack says
 * an array called the number (the "maybe" tokens, decided by the stack).
 * At such places in free-form nesting, the mask must equal kvc_advance
 * (which simulates each token's bytes) over the whole vocabulary, and
 * the closer of the other container must be refused. With tokens that
 * close two containers (brackets-tag-spm.gguf: "]]" after [1 inside an
 * object is refused, "]}" is not) the stack decides.
 */
static void stack_decided(void)
{
	static const struct {
		const char *prefix;
		char refused;
	} cases[] = {
		{ "{\"a\":[1", '}' }, { "{\"a\":1", ']' }, { "{\"a\":[{\"b\":[true", '}' },
		{ "{\"a\":{\"b\":\"x\"", ']' }, { "{\"a\":[[2.5", '}' }, { "{\"a\":[null", '}' },
	};
	char err[256], piece[16];
	struct kvc_grammar *g = compile(KVC_JSON_OBJECT, NULL, err, sizeof(err));
	uint32_t *mask = calloc(kvc_mask_words(V), 4), id, two = 0;
	size_t c;

	/* tokens that close two containers (brackets-tag-spm.gguf has four) */
	for (id = 0; id < NV; id++) {
		int n = kve_token_bytes(T, (int32_t)id, piece, sizeof(piece));

		two += n == 2 && strchr("]}", piece[0]) && strchr("]}", piece[1]);
	}
	printf("# %s: %u tokens close two containers\n", MNAME, two);
	if (strstr(MNAME, "brackets"))
		CHECK(two == 4, "%s: ]], }}, ]} and }] are tokens", MNAME);

	for (c = 0; g && mask && c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct kvc_matcher *m = kvc_matcher_create(g, 0);
		const char *p;
		uint32_t mism = 0;
		int ok = m != NULL;

		for (p = cases[c].prefix; ok && *p; p++)
			ok = kvc_advance(m, byte_tok[(uint8_t)*p]) == 0;
		if (ok) {
			kvc_mask(m, mask);
			mism = cgen_mask_mismatches(m, mask, NV);
		}
		id = (uint32_t)byte_tok[(uint8_t)cases[c].refused];
		CHECK(ok && !mism && !((mask[id >> 5] >> (id & 31)) & 1),
		      "%s: after '%s' the mask equals kvc_advance over %u tokens (%u differ) and "
		      "refuses '%c'", MNAME, cases[c].prefix, NV, mism, cases[c].refused);
		kvc_matcher_free(m);
	}
	CHECK(g && mask, "%s: the any-object grammar compiles (%s)", MNAME, g ? "" : err);
	free(mask);
	kvc_grammar_release(g);
}

/* kvc_grammar_stats: the table's bytes are the sum of the parts it
 * reports, and states that must have equal token sets share one: a long
 * maxLength string has hundreds of states and a handful of sets. */
static void grammar_stats(void)
{
	static const char *const schemas[] = {
		"{\"type\":\"string\",\"maxLength\":300}",
		"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
		"\"b\":{\"enum\":[\"x\",\"yy\"]}},\"required\":[\"a\"]}",
		"{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":4}",
		NULL,	/* the tool-call grammar */
	};
	/* the subset construction's exact counts (one DFA state per set of
	 * NFA states, a set found in any order is one state): a change to
	 * the grammar builders that moves them must show its new counts are
	 * still one state per set before it updates them here */
	static const uint32_t states[] = { 3603, 137, 466, 686 };
	size_t i;

	for (i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
		char err[256];
		struct kvc_grammar *g = schemas[i] ?
			compile(KVC_JSON_SCHEMA, schemas[i], err, sizeof(err)) : tools_grammar(NULL, 2);
		struct kvc_grammar_stats st = { 0 };
		uint64_t parts;

		if (!g) {
			CHECK(0, "%s: stats: schema %zu compiles", MNAME, i);
			continue;
		}
		kvc_grammar_stats(g, &st);
		parts = 4 * ((uint64_t)st.dfa_states * (st.byte_classes + 1) +
			     (uint64_t)st.bitset_sets * ((NV + 31) / 32) + st.listed_ids + st.maybe_ids);
		CHECK(st.table_bytes == parts && st.byte_classes >= 1 && st.byte_classes <= 256 &&
		      st.bitset_sets <= st.token_sets && st.token_sets <= st.dfa_states &&
		      st.dfa_states >= 2 && st.compile_ms >= 0 && st.compile_ms < 60000,
		      "%s: stats of schema %zu: %u states, %u classes, %u sets (%u bitsets, %u listed, "
		      "%u maybe): %llu table bytes, the parts' sum %llu; compiled in %.3g ms", MNAME, i,
		      st.dfa_states, st.byte_classes, st.token_sets, st.bitset_sets, st.listed_ids,
		      st.maybe_ids, (unsigned long long)st.table_bytes, (unsigned long long)parts,
		      st.compile_ms);
		CHECK(st.dfa_states == states[i], "%s: schema %zu: %u DFA states, as the subset "
		      "construction makes (%u)", MNAME, i, st.dfa_states, states[i]);
		if (i == 0)
			CHECK(st.dfa_states > 300 && st.token_sets * 4 < st.dfa_states,
			      "%s: maxLength 300: %u states share %u token sets", MNAME,
			      st.dfa_states, st.token_sets);
		kvc_grammar_release(g);
	}
}

/* A $ref's key of any length: 300 characters resolve */
static void long_ref_key(void)
{
	char err[256], key[301], spec[700];
	struct kvc_grammar *g;

	memset(key, 'k', 300);
	key[300] = 0;
	snprintf(spec, sizeof(spec), "{\"$ref\":\"#/$defs/%s\",\"$defs\":{\"%s\":{\"const\":\"x\"}}}",
		 key, key);
	g = compile(KVC_JSON_SCHEMA, spec, err, sizeof(err));
	CHECK(g && accepts_bytes(g, "\"x\"", 0) && !accepts_bytes(g, "1", 0),
	      "%s: a $ref to a 300-character key resolves (%s)", MNAME, g ? "" : err);
	kvc_grammar_release(g);
}

/* The free-form containers are built once per grammar: each further
 * any-object item adds its separator and a call (about 20 NFA states),
 * not another copy of the containers (hundreds). */
static void free_built_once(void)
{
	char err[256];
	uint32_t n[2];
	int i;

	for (i = 0; i < 2; i++) {
		char spec[96];
		struct kvc_grammar *g;
		struct kvc_grammar_stats st = { 0 };

		snprintf(spec, sizeof(spec),
			 "{\"type\":\"array\",\"items\":{\"type\":\"object\"},\"maxItems\":%d}", i + 2);
		g = compile(KVC_JSON_SCHEMA, spec, err, sizeof(err));
		if (g)
			kvc_grammar_stats(g, &st);
		n[i] = st.nfa_states;
		kvc_grammar_release(g);
	}
	CHECK(n[0] && n[1] > n[0] && (n[1] - n[0]) * 4 < n[0],
	      "%s: any-object items: 2 take %u NFA states, 3 take %u (the containers built once)",
	      MNAME, n[0], n[1]);
}

/*
 * No endless whitespace in a tool call: at every place of a call's text
 * outside its JSON strings (the frame, between the arguments' tokens,
 * after the call), KVC_DEFAULT_WS + 1 whitespace bytes more are refused,
 * for schemas with properties, free-form arguments and none, forced and
 * lazy, in every family's syntax: a model cannot loop on spaces
 * until max_tokens. Strings are the model's text (spaces there are
 * content, as in llama.cpp's JSON grammars).
 */
static void ws_everywhere(void)
{
	/* the families' syntaxes (daemon/chat: llama3, mistral v3, v11) */
	static const struct kvc_call_syntax llama3 = {
		.args_key = "parameters", .trigger = "{", .anchored = 1,
	};
	static const struct kvc_call_syntax mistral_v3 = {
		.list_open = "[TOOL_CALLS][", .list_sep = ",", .list_close = "]", .id = 1,
		.trigger = "[TOOL_CALLS]",
	};
	static const struct kvc_call_syntax mistral_v11 = {
		.list_sep = "", .call_open = "[TOOL_CALLS]", .name_args = 1, .args_mark = "[ARGS]",
	};
#define WS_TYPED "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"," \
	"\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"array\",\"items\":{\"type\":" \
	"\"integer\"}},\"c\":{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"boolean\"}}}}}}}]"
#define WS_FREE "[{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\"}}}]"
	static const struct {
		const char *tools, *text, *trigger;
		const struct kvc_call_syntax *y;
		unsigned max_calls;
	} cases[] = {
		{ WS_TYPED, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x y\", \"b\": [1, 2], \"c\": {\"d\": true}}}\n</tool_call>",
		  "<tool_call>", NULL, 0 },
		{ WS_FREE, "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"k\": [null, {\"z\": -1.5e3}], \"s\": \"a b\"}}\n</tool_call>"
		  "\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", "<tool_call>", NULL, 0 },
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"h\"}}]",
		  "<tool_call>\n{\"name\": \"h\", \"arguments\": {}}\n</tool_call>", "<tool_call>", NULL, 0 },
		{ WS_FREE, "{\"name\": \"g\", \"parameters\": {\"k\": [1, {\"z\": false}]}}", "{", &llama3, 1 },
		{ WS_FREE, "[TOOL_CALLS][{\"name\": \"g\", \"arguments\": {\"k\": 1}, \"id\": \"abcDEF123\"}, "
		  "{\"name\": \"g\", \"arguments\": {}, \"id\": \"abcDEF124\"}]", "[TOOL_CALLS]", &mistral_v3, 0 },
		{ WS_FREE, "[TOOL_CALLS]g[ARGS]{\"k\": [1, {\"z\": false}], \"s\": \"a b\"}[TOOL_CALLS]g[ARGS]{}",
		  "[TOOL_CALLS]", &mistral_v11, 0 },
	};
#undef WS_TYPED
#undef WS_FREE
	char spaces[KVC_DEFAULT_WS + 2];
	int bad = 0, good = 1;

	memset(spaces, ' ', KVC_DEFAULT_WS + 1);
	spaces[KVC_DEFAULT_WS + 1] = '\0';
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		for (unsigned lazy = 0; lazy <= 1; lazy++) {
			struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = cases[c].tools,
					       .json_len = strlen(cases[c].tools), .syntax = cases[c].y,
					       .max_calls = cases[c].max_calls };
			struct kvc_grammar *g = NULL;
			const char *t = cases[c].text;
			size_t len = strlen(t);
			char err[256], buf[512];
			int in_str = 0, esc = 0;

			if (kvc_compile(V, &sp, &g, err, sizeof(err))) {
				CHECK(0, "%s: ws case %zu compiles: %s", MNAME, c, err);
				continue;
			}
			good &= accepts_bytes(g, t, lazy ? KVC_LAZY : 0);
			for (size_t i = 0; i <= len; i++) {
				/* the string state after t[0..i) */
				if (i > 0) {
					char ch = t[i - 1];

					if (in_str && esc)
						esc = 0;
					else if (in_str && ch == '\\')
						esc = 1;
					else if (ch == '"')
						in_str = !in_str;
				}
				if (in_str)
					continue;
				snprintf(buf, sizeof(buf), "%.*s%s%s", (int)i, t, spaces, t + i);
				/* lazy: free text until the trigger is complete */
				if (lazy && i < strlen(cases[c].trigger))
					continue;
				if (accepts_bytes(g, buf, lazy ? KVC_LAZY : 0)) {
					if (bad < 8)
						fprintf(stderr, "ws case %zu lazy %u: %zu spaces accepted at %zu: '%s'\n",
							c, lazy, sizeof(spaces) - 1, i, buf);
					bad++;
				}
			}
			kvc_grammar_release(g);
		}
	}
	CHECK(good && !bad, "%s: tool calls: %d whitespace bytes refused at every place outside strings (%d places accepted them)",
	      MNAME, KVC_DEFAULT_WS + 1, bad);
}

int main(int argc, char **argv)
{
	int a;

	sample_masked();
	for (a = 1; a < argc; a++) {
		char err[256];
		struct cgen c;

		MNAME = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
		if (cgen_open(&c, argv[a], err, sizeof(err))) {
			CHECK(0, "load %s: %s", argv[a], err);
			continue;
		}
		T = c.t;
		V = c.v;
		NV = c.vocab;
		CHECK(V != NULL, "%s: vocabulary trie (%s)", MNAME,
		      kve_tokenizer_kind(T) == KVE_TOK_BPE ? "byte-level BPE" : "SentencePiece");
		byte_tokens();
		accept_cases();
		refusals();
		schema_edges();
		spec_edges();
		too_large();
		eos_outside();
		eos_id0(argv[a]);
		bytes_only();
		cache();
		cache_long_tag();
		tag_scan();
		lazy_mask_bytes();
		lazy_token_past_tag();
		tool_calls();
		ws_everywhere();
		budget_edge();
		finished();
		grammar_stats();
		free_built_once();
		long_ref_key();
		stack_decided();
		depth_limit();
	string_counts();
		threads();
		api_edges();
		string_bytes();
		compile_race();
		cache_evicted();
		generation(&c);
		cgen_close(&c);
	}
	if (argc > 1)
		CHECK(tag_token_models > 0, "a model's vocabulary has '>{', a token past the start tag");
	return tc_done();
}
