// SPDX-License-Identifier: MIT
/*
 * test_calls_prop.c - the structured decoder and the tool-call parser
 * agree (issue 40 item 4), for every family: tool sets of many shapes are
 * compiled into each family's call grammar (daemon/kvarenad/callsyntax.h,
 * as the daemon does), outputs are drawn from the grammar by random walks
 * over its token masks (every allowed token equally likely, closing near
 * the token budget), and each output is parsed by the family's parser,
 * whole and streamed in random pieces: every output of a forced call
 * (tool_choice required or named) must be calls only, as many as the
 * grammar allows, to tools of the set (the named one), with arguments
 * that are JSON objects, exactly the bytes written; a lazy ("auto") output
 * must give the same calls after its free text. And what the decoder
 * refuses: a function whose parameters are not an object schema.
 *
 *   test_calls_prop MODEL.gguf [SEED]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "callsyntax.h"
#include "chat.h"
#include "kvconstrain.h"
#include "kvengine.h"

static int fails, checks;

#define CHECK(cond, ...) do { \
	checks++; \
	if (!(cond)) { \
		fails++; \
		printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); \
	} \
} while (0)

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* Tool sets: nested objects, enums, arrays, bounded numbers, strings with
 * anything in them, no parameters, free-form objects, a schema without
 * "type" (read as an object). */
static const char *const tool_sets[] = {
	"[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"days\":{\"type\":\"integer\","
	"\"minimum\":1,\"maximum\":7},\"units\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}},"
	"\"required\":[\"city\"]}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]",
	"[{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"path\":{\"type\":\"string\",\"maxLength\":8},\"lines\":{\"type\":\"array\","
	"\"items\":{\"type\":\"string\",\"maxLength\":6},\"maxItems\":3},\"opts\":{\"type\":\"object\","
	"\"properties\":{\"append\":{\"type\":\"boolean\"},\"mode\":{\"type\":[\"integer\",\"null\"]}}}},"
	"\"required\":[\"path\",\"lines\"]}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"parameters\":{\"properties\":"
	"{\"x\":{\"type\":\"number\",\"minimum\":-5,\"maximum\":5}}}}}]",
	"[{\"type\":\"function\",\"function\":{\"name\":\"free-form_1\",\"parameters\":{\"type\":\"object\"}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"empty\",\"parameters\":{}}}]",
};

static const char *const families[] = { "chatml", "qwen2.5", "qwen3", "llama3",
					"mistral-v3", "mistral-v7", "mistral-v11" };

struct out {
	char *text;
	size_t len;
};

/* A random walk under g; the text written. */
static int walk(const struct kve_tokenizer *tok, struct kvc_vocab *v, struct kvc_grammar *g,
		unsigned flags, uint32_t vocab, int32_t eos, struct out *o)
{
	struct kvc_matcher *m = kvc_matcher_create(g, flags);
	uint32_t words = kvc_mask_words(v), *mask = malloc(words * 4);
	uint32_t budget = 400, step;
	char piece[256];
	int rc = -EIO;

	o->text = NULL;
	o->len = 0;
	if (!m || !mask)
		goto out;
	for (step = 0; step < budget; step++) {
		uint32_t left = budget - step, allowed[4096], n = 0;
		int k;

		k = left <= kvc_remaining(m) + 48 ? kvc_mask_budget(m, mask, left) : kvc_mask(m, mask);
		if (k <= 0)
			break;
		/* stop once the output may end, now and then (always near the end) */
		if (eos >= 0 && (mask[eos / 32] >> (eos % 32) & 1) &&
		    (rnd(4) == 0 || left < 8 || kvc_finished(m))) {
			if (kvc_advance(m, eos))
				goto out;
			break;
		}
		for (uint32_t i = 0; i < vocab && n < 4096; i++)
			if ((mask[i / 32] >> (i % 32) & 1) && (int32_t)i != eos)
				allowed[n++] = i;
		if (!n)
			break;
		{
			int32_t id = (int32_t)allowed[rnd(n)];
			int b = kve_token_bytes(tok, id, piece, sizeof(piece));

			if (kvc_advance(m, id) || b < 0)
				goto out;
			o->text = realloc(o->text, o->len + (size_t)b + 1);
			if (!o->text)
				goto out;
			memcpy(o->text + o->len, piece, (size_t)b);
			o->len += (size_t)b;
			o->text[o->len] = 0;
		}
		if (kvc_finished(m))
			break;
	}
	rc = kvc_accepting(m) || kvc_finished(m) ? 0 : -EAGAIN;
out:
	kvc_matcher_free(m);
	free(mask);
	return rc;
}

/* Does m's mask differ from kvc_advance (on a clone) for some token? */
static int mask_disagrees(struct kvc_matcher *m, struct kvc_vocab *v, uint32_t vocab)
{
	uint32_t *mask = calloc(kvc_mask_words(v), 4);
	int differ = mask == NULL;

	if (mask && kvc_mask(m, mask) >= 0) {
		for (uint32_t i = 0; i < vocab && !differ; i++) {
			struct kvc_matcher *c = kvc_matcher_clone(m);
			int ok = c && kvc_advance(c, (int32_t)i) == 0;

			differ = !c || ok != (int)(mask[i / 32] >> (i % 32) & 1);
			kvc_matcher_free(c);
		}
	} else {
		differ = 1;
	}
	free(mask);
	return differ;
}

struct got {
	size_t n_calls, n_content_nonws;
	struct strbuf names;
	int bad_args;
};

static int on_event(void *ctx, enum tc_event ev, const char *text, size_t len,
		    const struct tc_call *call)
{
	struct got *g = ctx;

	(void)text;
	if (ev == TC_CALL_START) {
		sb_adds(&g->names, call->name);
		sb_adds(&g->names, "|");
	} else if (ev == TC_CALL_END) {
		g->n_calls++;
	} else if (ev == TC_CONTENT) {
		for (size_t i = 0; i < len; i++)
			if (text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r')
				g->n_content_nonws++;
	}
	return 0;
}

/* The calls of one output; what the batch parse and the stream (cut at
 * random places) say agree. */
static void check_output(const struct chat_template *t, const char *fam, const char *set_json,
			 const char *named, uint32_t max_calls, int lazy, const struct out *o)
{
	struct tc_result r;
	json_t *tools = json_loads(set_json, 0, NULL);
	struct tc_stream s;
	struct got g = { 0 };
	size_t at = 0;

	CHECK(tc_parse(t, o->text ? o->text : "", o->len, &r) == 0, "%s: parses", fam);
	for (size_t i = 0; i < r.n_calls; i++) {
		json_t *a = json_loadb(r.calls[i].arguments, r.calls[i].arguments_len, 0, NULL);
		int known = 0;
		size_t k;
		json_t *tl;

		json_array_foreach(tools, k, tl)
			known |= !strcmp(json_string_value(json_object_get(json_object_get(tl, "function"),
									   "name")), r.calls[i].name);
		CHECK(json_is_object(a), "%s: call %zu's arguments are a JSON object: %.*s", fam, i,
		      (int)r.calls[i].arguments_len, r.calls[i].arguments);
		CHECK(known && (!named || !strcmp(named, r.calls[i].name)),
		      "%s: call %zu is to a tool of the set (%s)", fam, i, r.calls[i].name);
		json_decref(a);
	}
	if (!lazy) {
		size_t nonws = 0;

		for (size_t i = 0; i < r.content_len; i++)
			nonws += !strchr(" \n\t\r", r.content[i]);
		CHECK(r.n_calls >= 1 && r.n_calls <= max_calls && !nonws,
		      "%s: a forced output is %zu call(s) (1..%u) and nothing else:\n%s\ncontent: '%s'",
		      fam, r.n_calls, max_calls, o->text ? o->text : "", r.content);
	}
	/* streamed in random pieces */
	tc_stream_init(&s, t, on_event, &g);
	while (at < o->len) {
		size_t n = 1 + rnd(7);

		if (n > o->len - at)
			n = o->len - at;
		tc_stream_feed(&s, o->text + at, n);
		at += n;
	}
	tc_stream_finish(&s);
	tc_stream_free(&s);
	CHECK(g.n_calls == r.n_calls, "%s: streamed, the same %zu call(s) (got %zu)", fam, r.n_calls,
	      g.n_calls);
	sb_free(&g.names);
	tc_result_free(&r);
	json_decref(tools);
}

int main(int argc, char **argv)
{
	char err[300];
	struct kve_model *model;
	struct kve_tokenizer *tok;
	uint32_t vocab;
	int32_t eos;
	unsigned outputs = 0, calls_seen = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: test_calls_prop MODEL.gguf [SEED]\n");
		return 2;
	}
	rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9e3779b97f4a7c15ull;
	if (!rng)
		rng = 1;
	model = kve_model_load(argv[1], err, sizeof(err));
	if (!model) {
		fprintf(stderr, "%s: %s\n", argv[1], err);
		return 2;
	}
	vocab = kve_model_info(model)->vocab;
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
		struct chat_options o = { families[f], NULL, NULL };
		struct chat_template *t;
		struct kvc_vocab *v;

		tok = kve_tokenizer_create(model, err, sizeof(err));
		if (!tok || chat_template_new(NULL, 0, &o, &t, err, sizeof(err))) {
			CHECK(0, "%s: %s", families[f], err);
			continue;
		}
		for (const char *const *mk = chat_template_markers(t); *mk; mk++)
			kve_tokenizer_show(tok, *mk);
		eos = kve_tokenizer_eos(tok);
		v = kvc_vocab_create(tok, vocab, err, sizeof(err));
		if (!v) {
			CHECK(0, "%s: vocabulary: %s", families[f], err);
			continue;
		}
		for (size_t ts = 0; ts < sizeof(tool_sets) / sizeof(tool_sets[0]); ts++) {
			for (int mode = 0; mode < 4; mode++) {	/* required, parallel 1, named, lazy */
				struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = tool_sets[ts],
						       .json_len = strlen(tool_sets[ts]) };
				struct kvc_call_syntax y;
				struct kvc_grammar *g;
				json_t *tools = json_loads(tool_sets[ts], 0, NULL);
				const char *named = mode == 2 ? json_string_value(json_object_get(
					json_object_get(json_array_get(tools, 1), "function"), "name")) : NULL;
				uint32_t max_calls;

				sp.max_calls = mode == 1 ? 1 : 3;
				sp.tool_name = named;
				kvd_call_syntax(t, &sp, &y);
				max_calls = sp.max_calls;
				if (kvc_compile(v, &sp, &g, err, sizeof(err))) {
					CHECK(0, "%s: tool set %zu mode %d compiles: %s", families[f], ts,
					      mode, err);
					json_decref(tools);
					continue;
				}
				for (int k = 0; k < 6; k++) {
					struct out out;
					int rc = walk(tok, v, g, mode == 3 ? KVC_LAZY : 0, vocab, eos, &out);

					if (!rc) {
						struct tc_result r;

						outputs++;
						check_output(t, families[f], tool_sets[ts], named, max_calls,
							     mode == 3, &out);
						if (!tc_parse(t, out.text ? out.text : "", out.len, &r)) {
							calls_seen += (unsigned)r.n_calls;
							tc_result_free(&r);
						}
					}
					free(out.text);
				}
				kvc_grammar_release(g);
				json_decref(tools);
			}
		}
		/* qwen3 thinks first: a tag written in its reasoning does not
		 * start a call (lazy); the first after </think> does, and so
		 * does one the reply opens with (no reasoning: "<t" is the
		 * start of both); the mask agrees with kvc_advance at every
		 * step, inside the block too */
		if (!strcmp(families[f], "qwen3")) {
			static const char think[] = "<think>\nI may write <tool_call> here.\n</think>\n\n";
			static const char call[] = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
			static const char *const replies[][2] = {
				{ think, call }, { "", call }, { "<thin", call }, { "Let me see.\n\n", call },
			};
			struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = tool_sets[0],
					       .json_len = strlen(tool_sets[0]) };
			struct kvc_call_syntax y;
			struct kvc_grammar *g = NULL;

			kvd_call_syntax(t, &sp, &y);
			if (kvc_compile(v, &sp, &g, err, sizeof(err)))
				CHECK(0, "qwen3: the lazy grammar compiles: %s", err);
			for (size_t c = 0; g && c < sizeof(replies) / sizeof(replies[0]); c++) {
				struct kvc_matcher *m = kvc_matcher_create(g, KVC_LAZY);
				int32_t ids[256];
				int ok = m != NULL, before = 0, mism = 0;

				for (int part = 0; part < 2 && ok; part++) {
					int n = kve_tokenize(tok, replies[c][part], strlen(replies[c][part]), 0,
							     ids, 256);

					for (int i = 0; i < n && ok; i++) {
						mism += mask_disagrees(m, v, vocab);
						ok = !kvc_advance(m, ids[i]);
					}
					if (!part)
						before = kvc_triggered(m);
				}
				CHECK(ok && !before && kvc_triggered(m) && kvc_accepting(m) && !mism,
				      "qwen3: '%s' then a call: %s, %s, the call accepted; masks == "
				      "kvc_advance (%d differ)", replies[c][0],
				      before ? "triggered before the call" : "free text",
				      ok ? "advanced" : "a token refused", mism);
				kvc_matcher_free(m);
			}
			kvc_grammar_release(g);
		}
		/* what no syntax can write: a function whose parameters are
		 * not an object schema is refused */
		{
			static const char bad[] = "[{\"type\":\"function\",\"function\":{\"name\":\"t\","
						  "\"parameters\":{\"type\":\"integer\"}}}]";
			struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = bad, .json_len = sizeof(bad) - 1 };
			struct kvc_call_syntax y;
			struct kvc_grammar *g = NULL;

			kvd_call_syntax(t, &sp, &y);
			CHECK(kvc_compile(v, &sp, &g, err, sizeof(err)) == -EINVAL &&
			      strstr(err, "must be a JSON Schema of type object"),
			      "%s: parameters of type integer refused: %s", families[f], err);
			kvc_grammar_release(g);
		}
		kvc_vocab_free(v);
		chat_template_free(t);
		kve_tokenizer_free(tok);
	}
	kve_model_free(model);
	printf("test_calls_prop: %u outputs (%u calls) over %zu families, %d checks, %d failed\n",
	       outputs, calls_seen, sizeof(families) / sizeof(families[0]), checks, fails);
	CHECK(outputs > 100 && calls_seen > outputs / 2, "enough outputs and calls to mean something");
	return fails ? 1 : 0;
}
