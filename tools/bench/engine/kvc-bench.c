// SPDX-License-Identifier: MIT
/*
 * kvc-bench - the cost of constrained decoding on one GGUF model: greedy
 * decode tok/s with and without a tool-call grammar (a nested tool
 * schema) in the same run, two sessions stepping in turn, best round of
 * each; the mask's
 * share per token (kvc_mask + kve_sample_masked + kvc_advance); the cold
 * compile time of a 20-property schema (automaton and token sets for this
 * vocabulary) and a cache hit. Prints key=value lines for
 * run-bench.sh's BENCH=constrained.
 *
 * usage: kvc-bench MODEL [--tokens N] [--rounds R] [--compiles C]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvengine.h"
#include "kvconstrain.h"

#define BT 16

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct pool {
	uint8_t *mem;
	size_t bytes;
	uint32_t n;
};

static void *block_ptr(void *ctx, uint32_t id)
{
	struct pool *p = ctx;

	return id < p->n ? p->mem + (size_t)id * p->bytes : NULL;
}

/* A nested tool set: what an agent's tools look like. Strings are
 * bounded so that a greedy random model finishes calls and the run
 * crosses every kind of state (keys, enums, numbers, nested objects,
 * arrays, the tags), not one long string. */
static const char TOOLS[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"description\":\"run a command\","
	"\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"enum\":[\"ls -l\",\"make check\","
	"\"git status\",\"cat README.md\"]},\"cwd\":{\"type\":\"string\",\"maxLength\":24},"
	"\"env\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},"
	"\"value\":{\"type\":\"string\",\"maxLength\":16}},"
	"\"required\":[\"name\",\"value\"],\"additionalProperties\":false},\"timeout_s\":{\"type\":\"integer\","
	"\"minimum\":1,\"maximum\":600}},\"required\":[\"command\"],\"additionalProperties\":false}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"compile_c\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"source\":{\"type\":\"string\",\"maxLength\":48},\"flags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
	"\"maxLength\":32},\"maxItems\":8},\"opt\":{\"type\":\"object\",\"properties\":{\"level\":{\"type\":\"integer\","
	"\"minimum\":0,\"maximum\":3},\"debug\":{\"type\":\"boolean\"},\"std\":{\"enum\":[\"c11\",\"c17\",\"gnu11\"]}},"
	"\"required\":[\"level\"],\"additionalProperties\":false}},\"required\":[\"source\",\"opt\"],"
	"\"additionalProperties\":false}}}]";

/* 20 properties of every supported kind; salt makes each compile cold */
static char *schema20(int salt)
{
	static const char *const types[] = {
		"{\"type\":\"string\",\"maxLength\":40}",
		"{\"type\":\"integer\",\"minimum\":-100,\"maximum\":100000}",
		"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}",
		"{\"type\":\"boolean\"}",
		"{\"enum\":[\"low\",\"medium\",\"high\",\"highest\"]}",
		"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4}",
		"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
		"\"required\":[\"x\",\"y\"]}",
		"{\"type\":\"string\"}",
		"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":8},{\"type\":\"null\"}]}",
		"{\"type\":\"integer\"}",
	};
	char *s = malloc(8192);
	size_t n;
	int i;

	n = (size_t)snprintf(s, 8192, "{\"description\":\"bench %d\",\"type\":\"object\",\"properties\":{", salt);
	for (i = 0; i < 20; i++)
		n += (size_t)snprintf(s + n, 8192 - n, "%s\"field_%02d\":%s", i ? "," : "", i, types[i % 10]);
	n += (size_t)snprintf(s + n, 8192 - n, "},\"required\":[");
	for (i = 0; i < 20; i += 2)
		n += (size_t)snprintf(s + n, 8192 - n, "%s\"field_%02d\"", i ? "," : "", i);
	snprintf(s + n, 8192 - n, "],\"additionalProperties\":false}");
	return s;
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	uint32_t ntok = 128, rounds = 3, compiles = 7, i, r, prompt = 32;
	char err[256];
	struct kve_model *m;
	const struct kve_model_info *in;
	struct kve_tokenizer *t;
	struct kvc_vocab *v;
	struct kvc_grammar *g;
	struct kve_engine *e;
	struct kve_engine_params ep = { 1, 1, 64, 0 };
	struct kve_kv_pool kp;
	struct pool pool;
	uint32_t *bt, *mask, nb;
	float *lg, *lgb;
	int32_t *tok;
	double best_u = 0, best_c = 0, best_mask = 1e9, t0, *ct, sum_a = 0, sum_b = 0;
	struct kve_sampler greedy = { 0 };
	struct kvc_spec sp = { .kind = KVC_TOOL_CALLS, .json = TOOLS, .json_len = sizeof(TOOLS) - 1 };
	struct kvc_grammar_stats gs;
	int a, restarts = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: kvc-bench MODEL [--tokens N] [--rounds R] [--compiles C]\n");
		return 2;
	}
	for (a = 2; a < argc; a++) {
		if (!strcmp(argv[a], "--tokens") && a + 1 < argc) ntok = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--rounds") && a + 1 < argc) rounds = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--compiles") && a + 1 < argc) compiles = (uint32_t)atoi(argv[++a]);
		else { fprintf(stderr, "kvc-bench: unknown option %s\n", argv[a]); return 2; }
	}
	m = kve_model_load(argv[1], err, sizeof(err));
	if (!m) {
		fprintf(stderr, "kvc-bench: %s\n", err);
		return 1;
	}
	in = kve_model_info(m);
	if (prompt + ntok + 1 > in->ctx_len)
		ntok = in->ctx_len - prompt - 1;
	t = kve_tokenizer_create(m, err, sizeof(err));
	t0 = now();
	v = t ? kvc_vocab_create(t, in->vocab, err, sizeof(err)) : NULL;
	if (!v) {
		fprintf(stderr, "kvc-bench: %s\n", err);
		return 1;
	}
	printf("vocab=%u\nvocab_trie_ms=%.2f\n", in->vocab, (now() - t0) * 1e3);

	/* compile: cold (a new description each time), then a cache hit */
	ct = calloc(2 * compiles, sizeof(double));
	for (i = 0; i < compiles; i++) {
		char *js = schema20((int)i);
		struct kvc_spec s20 = { .kind = KVC_JSON_SCHEMA, .json = js, .json_len = strlen(js) };
		struct kvc_grammar *g20;

		double c0 = cpu_now();

		t0 = now();
		if (kvc_compile(v, &s20, &g20, err, sizeof(err))) {
			fprintf(stderr, "kvc-bench: 20-property schema: %s\n", err);
			return 1;
		}
		ct[i] = (now() - t0) * 1e3;
		ct[compiles + i] = (cpu_now() - c0) * 1e3;
		if (i == 0) {
			kvc_grammar_stats(g20, &gs);
			printf("schema20_dfa_states=%u\nschema20_token_sets=%u\nschema20_table_kb=%.0f\n",
			       gs.dfa_states, gs.token_sets, gs.table_bytes / 1024.0);
			kvc_grammar_release(g20);
			t0 = now();
			kvc_compile(v, &s20, &g20, err, sizeof(err));
			printf("schema20_cached_ms=%.4f\n", (now() - t0) * 1e3);
		}
		kvc_grammar_release(g20);
		free(js);
	}
	qsort(ct, compiles, sizeof(double), cmp_d);
	qsort(ct + compiles, compiles, sizeof(double), cmp_d);
	/* wall time (median, best) and CPU time (median): the host is shared */
	printf("schema20_compile_ms=%.2f\nschema20_compile_min_ms=%.2f\nschema20_compile_cpu_ms=%.2f\n",
	       ct[compiles / 2], ct[0], ct[compiles + compiles / 2]);

	t0 = now();
	if (kvc_compile(v, &sp, &g, err, sizeof(err))) {
		fprintf(stderr, "kvc-bench: tools: %s\n", err);
		return 1;
	}
	kvc_grammar_stats(g, &gs);
	printf("tools_compile_ms=%.2f\ntools_dfa_states=%u\n", (now() - t0) * 1e3, gs.dfa_states);

	nb = 2 * ((prompt + ntok + BT) / BT + 1);	/* two sessions */
	pool.bytes = kve_kv_block_bytes(m, BT, KVE_KV_F16);
	pool.n = nb;
	pool.mem = aligned_alloc(64, pool.bytes * nb);
	kp = (struct kve_kv_pool){ &pool, block_ptr, BT, KVE_KV_F16 };
	ep.max_ctx = prompt + ntok + 1;
	e = pool.mem ? kve_engine_create(m, &kp, &ep, err, sizeof(err)) : NULL;
	if (!e) {
		fprintf(stderr, "kvc-bench: %s\n", err);
		return 1;
	}
	bt = malloc(nb * sizeof(uint32_t));
	for (i = 0; i < nb; i++)
		bt[i] = i;
	lg = malloc(sizeof(float) * in->vocab);
	lgb = malloc(sizeof(float) * in->vocab);
	mask = calloc(kvc_mask_words(v), 4);
	tok = malloc(sizeof(int32_t) * prompt);
	for (i = 0; i < prompt; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % in->vocab);

	/* Two sessions decode side by side, one step each in turn: A free,
	 * B under the grammar, so both see the same machine (the host is
	 * shared and its speed drifts). Best round of each. */
	for (r = 0; r < rounds; r++) {
		struct kvc_matcher *mt = kvc_matcher_create(g, 0);
		struct kve_session sa = { bt, nb / 2, 0 }, sb = { bt + nb / 2, nb / 2, 0 };
		double ta = 0, tb = 0, tm = 0, tq;
		int32_t na, nbk;

		if (kve_prefill(e, &sa, tok, prompt, lg))
			return 1;
		na = kve_sample(&greedy, lg, in->vocab, NULL);
		if (kve_prefill(e, &sb, tok, prompt, lgb))
			return 1;
		for (i = 0; i < ntok; i++) {
			int k;

			for (k = 0; k < 2; k++) {	/* in turn, alternating who goes first */
				struct kve_session *ps;

				if ((k ^ (int)(i & 1)) == 0) {	/* A: free */
					t0 = now();
					ps = &sa;
					if (kve_decode(e, &ps, &na, 1, lg))
						return 1;
					na = kve_sample(&greedy, lg, in->vocab, NULL);
					ta += now() - t0;
					continue;
				}
				/* B: pick under the grammar, then decode it */
				t0 = now();
				kvc_mask(mt, mask);
				nbk = kve_sample_masked(&greedy, lgb, in->vocab, mask, NULL);
				if (nbk < 0 || kvc_advance(mt, nbk))
					return 1;
				if (kvc_finished(mt)) {	/* next call */
					kvc_matcher_free(mt);
					mt = kvc_matcher_create(g, 0);
					restarts++;
				}
				tq = now();
				tm += tq - t0;
				ps = &sb;
				if (kve_decode(e, &ps, &nbk, 1, lgb))
					return 1;
				tb += now() - t0;
			}
		}
		sum_a += ta;
		sum_b += tb;
		if (ntok / ta > best_u)
			best_u = ntok / ta;
		if (ntok / tb > best_c)
			best_c = ntok / tb;
		if (tm / ntok < best_mask)
			best_mask = tm / ntok;
		kvc_matcher_free(mt);
	}
	/* tok/s: over all rounds (the steps interleave, so the sums saw the
	 * same machine); best rounds too */
	printf("tokens=%u\nrounds=%u\nunconstrained_tps=%.1f\nconstrained_tps=%.1f\nratio=%.3f\n"
	       "unconstrained_best_tps=%.1f\nconstrained_best_tps=%.1f\n",
	       ntok, rounds, ntok * rounds / sum_a, ntok * rounds / sum_b, sum_a / sum_b,
	       best_u, best_c);
	printf("constraint_us_per_token=%.1f\nstep_us=%.1f\nmatcher_restarts=%d\n", best_mask * 1e6,
	       1e6 * sum_a / (ntok * rounds), restarts);
	kvc_grammar_release(g);
	kve_engine_free(e);
	kvc_vocab_free(v);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(pool.mem);
	free(bt);
	free(lg);
	free(lgb);
	free(mask);
	free(tok);
	free(ct);
	return 0;
}
