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
#include "tcheck.h"
#include "kvconstrain.h"

#include <errno.h>

static struct kvc_vocab *V;
static struct kve_tokenizer *T;
static uint32_t NV;
static int32_t byte_tok[256];
static const char *MNAME;

static struct kvc_grammar *compile(enum kvc_kind kind, const char *json, char *err, size_t n)
{
	struct kvc_spec sp = { .kind = kind, .json = json, .json_len = json ? strlen(json) : 0 };
	struct kvc_grammar *g = NULL;

	if (kvc_compile(V, &sp, &g, err, n))
		return NULL;
	return g;
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
	  { "\"ab\"", "\"\\n\\\"\"", "\"\\u00e9\\u4e2d\\ud7ff\"", "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80z\"", "\"a\\\\\\/\"" },
	  { "\"a\"", "\"abcde\"", "\"\\ud800x\"", "\"\\x41\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"a\tb\"",
	    "\"\xf4\x90\x80\x80z\"", "\"ab" } },
	{ "{\"type\":\"number\"}",
	  { "0", "-0.5", "1e5", "1E+05", "-2.25e-3", "123456789012345678", "3.141592653589" },
	  { "01", "1.", ".5", "+1", "1e", "1e+", "--1", "1234567890123456789", "NaN" } },
	{ "{\"type\":\"integer\",\"minimum\":-15,\"maximum\":250}",
	  { "-15", "-9", "0", "7", "99", "250", "199" },
	  { "-16", "251", "300", "-0", "1.5", "1e2", "1000", "-150" } },
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
		  "recursive $ref" },
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

int main(int argc, char **argv)
{
	int a;

	for (a = 1; a < argc; a++) {
		char err[256];
		struct kve_model *m = kve_model_load(argv[a], err, sizeof(err));

		MNAME = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
		if (!m) {
			CHECK(0, "load %s: %s", argv[a], err);
			continue;
		}
		T = kve_tokenizer_create(m, err, sizeof(err));
		NV = kve_model_info(m)->vocab;
		V = T ? kvc_vocab_create(T, NV, err, sizeof(err)) : NULL;
		CHECK(V != NULL, "%s: vocabulary trie (%s)", MNAME,
		      T && kve_tokenizer_kind(T) == KVE_TOK_BPE ? "byte-level BPE" : "SentencePiece");
		if (!V)
			continue;
		byte_tokens();
		accept_cases();
		refusals();
		cache();
		kvc_vocab_free(V);
		kve_tokenizer_free(T);
		kve_model_free(m);
	}
	return tc_done();
}
