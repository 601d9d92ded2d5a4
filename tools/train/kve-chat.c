// SPDX-License-Identifier: MIT
/*
 * kve-chat - greedy chat completions through the engine, driven over a
 * pipe: the agent model's evaluation (tools/train/eval.py) and smoke test
 * send the whole rendered conversation each turn and execute the tool
 * calls themselves.
 *
 * usage: kve-chat MODEL [--threads N] [--max-new N] [--ctx N]
 * Protocol (stdin -> stdout), repeated until end of input:
 *   -> "PROMPT <bytes>\n" then that many bytes of text
 *   <- "GEN <bytes> <tokens> <eos>\n" then the generated text (without
 *      the end-of-turn token; <eos> is 1 if generation stopped on it)
 * Each prompt is tokenized in full by the engine's tokenizer (as a server
 * renders and tokenizes a conversation); positions whose tokens equal the
 * previous prompt's plus its completion keep their KV, the rest are
 * prefilled. At the end, prefill and decode speeds go to stderr.
 *
 * Owns only this driver loop; the KV pool is one malloc'd slab.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvengine.h"

#define MAX_PROMPT (256u << 10)
#define BLOCK_TOKENS 16u

struct slab {
	unsigned char *mem;
	size_t block_bytes;
	uint32_t n;
};

static void *slab_ptr(void *ctx, uint32_t id)
{
	struct slab *s = ctx;

	return id < s->n ? s->mem + (size_t)id * s->block_bytes : NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct chat {
	struct kve_model *m;
	struct kve_tokenizer *tok;
	struct kve_engine *e;
	struct kve_session s;
	int32_t *ids;		/* tokens whose KV the session holds */
	uint32_t ctx, vocab, max_new;
	float *logits;
	char *out;
	size_t out_cap;
	double t_prefill, t_decode;
	uint64_t n_prefill, n_decode;
};

/* Generates one completion of text; writes the reply frame. */
static int turn(struct chat *c, const char *text, size_t len)
{
	struct kve_sampler greedy = { 0 };
	int32_t *tk, eos = kve_tokenizer_eos(c->tok), next;
	uint32_t keep = 0, n, gen = 0;
	size_t out_n = 0;
	int k, rc, stopped = 0;
	double t0;

	/* a prompt as kvarenad and llama.cpp tokenize one: BOS where the file
	 * asks (the agent model's is the "\u2581" training began with) */
	k = kve_tokenize(c->tok, text, len, 1, NULL, 0);
	if (k <= 0 || (uint32_t)k >= c->ctx) {
		fprintf(stderr, "kve-chat: prompt of %d tokens (context %u)\n", k, c->ctx);
		return -EINVAL;
	}
	n = (uint32_t)k;
	tk = malloc((size_t)n * sizeof(*tk));
	if (!tk)
		return -ENOMEM;
	kve_tokenize(c->tok, text, len, 1, tk, n);
	while (keep < c->s.n_tokens && keep < n - 1 && c->ids[keep] == tk[keep])
		keep++;
	memcpy(c->ids + keep, tk + keep, (size_t)(n - keep) * sizeof(*tk));
	c->s.n_tokens = keep;
	t0 = now();
	rc = kve_prefill(c->e, &c->s, tk + keep, n - keep, c->logits);
	c->t_prefill += now() - t0;
	c->n_prefill += n - keep;
	free(tk);
	if (rc)
		return rc;
	for (;;) {
		char piece[256];
		struct kve_session *sp = &c->s;
		int b;

		next = kve_sample(&greedy, c->logits, c->vocab, NULL);
		if (next < 0)
			return next;
		if (next == eos) {
			stopped = 1;
			break;
		}
		b = kve_token_bytes(c->tok, next, piece, sizeof(piece));
		if (b < 0 || b > (int)sizeof(piece))
			return -EINVAL;
		if (out_n + (size_t)b > c->out_cap)
			return -E2BIG;
		memcpy(c->out + out_n, piece, (size_t)b);
		out_n += (size_t)b;
		if (++gen >= c->max_new || c->s.n_tokens + 1 >= c->ctx)
			break;
		c->ids[c->s.n_tokens] = next;
		t0 = now();
		rc = kve_decode(c->e, &sp, &next, 1, c->logits);
		c->t_decode += now() - t0;
		c->n_decode++;
		if (rc)
			return rc;
	}
	printf("GEN %zu %u %d\n", out_n, gen, stopped);
	fwrite(c->out, 1, out_n, stdout);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	struct kve_engine_params ep = { .n_threads = 1, .max_batch = 1 };
	struct chat c = { .max_new = 256 };
	struct slab slab = { 0 };
	struct kve_kv_pool pool;
	char err[256], line[64], *text = NULL;
	unsigned long len;
	int a, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: kve-chat MODEL [--threads N] [--max-new N] [--ctx N]\n");
		return 2;
	}
	for (a = 2; a + 1 < argc; a += 2) {
		unsigned long v = strtoul(argv[a + 1], NULL, 10);

		if (!strcmp(argv[a], "--threads") && v >= 1 && v <= 2)
			ep.n_threads = (uint32_t)v;
		else if (!strcmp(argv[a], "--max-new") && v >= 1 && v <= 4096)
			c.max_new = (uint32_t)v;
		else if (!strcmp(argv[a], "--ctx") && v >= 16 && v <= 65536)
			c.ctx = (uint32_t)v;
		else {
			fprintf(stderr, "kve-chat: bad option %s %s\n", argv[a], argv[a + 1]);
			return 2;
		}
	}
	if (a != argc) {
		fprintf(stderr, "kve-chat: option %s needs a value\n", argv[a]);
		return 2;
	}
	c.m = kve_model_load(argv[1], err, sizeof(err));
	if (!c.m || !(c.tok = kve_tokenizer_create(c.m, err, sizeof(err)))) {
		fprintf(stderr, "kve-chat: %s\n", err);
		kve_model_free(c.m);
		return 1;
	}
	c.vocab = kve_model_info(c.m)->vocab;
	if (!c.ctx)
		c.ctx = kve_model_info(c.m)->ctx_len;
	c.ctx = (c.ctx + BLOCK_TOKENS - 1) / BLOCK_TOKENS * BLOCK_TOKENS;
	slab.n = c.ctx / BLOCK_TOKENS;
	slab.block_bytes = kve_kv_block_bytes(c.m, BLOCK_TOKENS, KVE_KV_F32);
	slab.mem = aligned_alloc(64, (slab.block_bytes * slab.n + 63) & ~(size_t)63);
	pool = (struct kve_kv_pool){ &slab, slab_ptr, BLOCK_TOKENS, KVE_KV_F32 };
	c.s.n_blocks = slab.n;
	c.s.block_table = calloc(slab.n, sizeof(uint32_t));
	c.ids = calloc(c.ctx, sizeof(*c.ids));
	c.logits = malloc((size_t)c.vocab * sizeof(float));
	c.out_cap = (size_t)c.max_new * 256;
	c.out = malloc(c.out_cap);
	text = malloc(MAX_PROMPT);
	if (!slab.mem || !c.s.block_table || !c.ids || !c.logits || !c.out || !text) {
		fprintf(stderr, "kve-chat: out of memory\n");
		rc = 1;
		goto out;
	}
	for (a = 0; a < (int)slab.n; a++)
		c.s.block_table[a] = (uint32_t)a;
	ep.max_ctx = c.ctx;
	c.e = kve_engine_create(c.m, &pool, &ep, err, sizeof(err));
	if (!c.e) {
		fprintf(stderr, "kve-chat: %s\n", err);
		rc = 1;
		goto out;
	}
	while (fgets(line, sizeof(line), stdin)) {
		char *end;

		if (strncmp(line, "PROMPT ", 7) ||
		    (len = strtoul(line + 7, &end, 10)) == 0 || *end != '\n' || len > MAX_PROMPT) {
			fprintf(stderr, "kve-chat: expected 'PROMPT <1..%u>', got '%.40s'\n",
				MAX_PROMPT, line);
			rc = 1;
			break;
		}
		if (fread(text, 1, len, stdin) != len) {
			fprintf(stderr, "kve-chat: short prompt\n");
			rc = 1;
			break;
		}
		a = turn(&c, text, len);
		if (a) {
			fprintf(stderr, "kve-chat: %s\n", strerror(-a));
			rc = 1;
			break;
		}
	}
	fprintf(stderr, "kve-chat: isa %s; prefill %llu tokens in %.3f s (%.1f tok/s); "
		"decode %llu tokens in %.3f s (%.1f tok/s)\n", kve_isa_name(),
		(unsigned long long)c.n_prefill, c.t_prefill,
		c.t_prefill > 0 ? c.n_prefill / c.t_prefill : 0.0,
		(unsigned long long)c.n_decode, c.t_decode,
		c.t_decode > 0 ? c.n_decode / c.t_decode : 0.0);
out:
	kve_engine_free(c.e);
	free(text);
	free(c.out);
	free(c.logits);
	free(c.ids);
	free(c.s.block_table);
	free(slab.mem);
	kve_tokenizer_free(c.tok);
	kve_model_free(c.m);
	return rc;
}
