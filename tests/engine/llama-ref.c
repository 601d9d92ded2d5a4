// SPDX-License-Identifier: MIT
/*
 * llama-ref - the llama.cpp side of the engine's peer tests (tests/engine/
 * peer.py): the reference users trust, through libllama and libggml from
 * the benchmark's peer cache (tools/bench/engine/fetch-llama.sh), built
 * against it by peer.sh; never part of the engine.
 *
 *   llama-ref quantize IN OUT TYPE       llama_model_quantize: TYPE q4_0 q4_1
 *                                        q5_0 q5_1 q8_0 q4_k q5_k q6_k bf16
 *                                        (every matrix that type: "pure") or
 *                                        q4_k_m q5_k_m (llama.cpp's own mix)
 *   llama-ref logits MODEL OUT K TOK...  prefill the first K tokens (logits of
 *                                        position K-1), decode the rest one at
 *                                        a time; writes float32 rows (vocab
 *                                        each) to OUT as kve-logits does
 *   llama-ref greedy MODEL N OUT TOK...  prefill TOK..., then N greedy tokens:
 *                                        prints their ids; OUT gets the logits
 *                                        each was chosen from
 *   llama-ref dequant TYPE IN OUT        ggml's to_float of the blocks in IN
 *                                        (TYPE a ggml type number) to OUT
 *   llama-ref tokenize MODEL SPECIAL [ADD]  stdin's text as token ids (SPECIAL 1:
 *                                        control tokens in the text are parsed;
 *                                        ADD 1: add_special, BOS as the file says)
 *   llama-ref template TMPL ADD_ASS      llama_chat_apply_template of the
 *                                        messages on stdin (role NUL content
 *                                        NUL ...) with the template text TMPL
 *                                        (a file), printed as bytes
 *
 * KV in F32 and flash attention off, so that what differs from the engine
 * is the weights' arithmetic, not llama.cpp's fp16 KV; with KVE_REF_KV=q8_0
 * in the environment, K and V in Q8_0 (its -ctk q8_0 -ctv q8_0, flash
 * attention on, as it needs), against the engine's Q8_0 KV.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
	(void)ud;
	if (level >= GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static bool no_progress(float p, void *ud)
{
	(void)p;
	(void)ud;
	return true;
}

static int quantize(const char *in, const char *out, const char *type)
{
	static const struct { const char *name; enum llama_ftype ft; int pure; } t[] = {
		{ "q4_0", LLAMA_FTYPE_MOSTLY_Q4_0, 1 }, { "q4_1", LLAMA_FTYPE_MOSTLY_Q4_1, 1 },
		{ "q5_0", LLAMA_FTYPE_MOSTLY_Q5_0, 1 }, { "q5_1", LLAMA_FTYPE_MOSTLY_Q5_1, 1 },
		{ "q8_0", LLAMA_FTYPE_MOSTLY_Q8_0, 1 }, { "q3_k", LLAMA_FTYPE_MOSTLY_Q3_K_S, 1 },
		{ "q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M, 0 }, { "q4_k", LLAMA_FTYPE_MOSTLY_Q4_K_S, 1 },
		{ "q5_k", LLAMA_FTYPE_MOSTLY_Q5_K_S, 1 }, { "q6_k", LLAMA_FTYPE_MOSTLY_Q6_K, 1 },
		{ "iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL, 1 }, { "iq4_xs", LLAMA_FTYPE_MOSTLY_IQ4_XS, 1 },
		{ "bf16", LLAMA_FTYPE_MOSTLY_BF16, 1 }, { "q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M, 0 },
		{ "q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M, 0 }, { "q2_k", LLAMA_FTYPE_MOSTLY_Q2_K, 0 },
	};
	struct llama_model_quantize_params p = llama_model_quantize_default_params();
	unsigned i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]) && strcmp(t[i].name, type); i++)
		;
	if (i == sizeof(t) / sizeof(t[0])) {
		fprintf(stderr, "llama-ref: unknown type %s\n", type);
		return 2;
	}
	p.nthread = 1;
	p.ftype = t[i].ft;
	p.pure = t[i].pure;
	if (llama_model_quantize(in, out, &p)) {
		fprintf(stderr, "llama-ref: quantizing %s failed\n", in);
		return 1;
	}
	return 0;
}

static struct llama_context *open_ctx(const char *path, struct llama_model **model, int n_ctx)
{
	struct llama_model_params mp = llama_model_default_params();
	struct llama_context_params cp = llama_context_default_params();
	struct llama_context *ctx;

	mp.n_gpu_layers = 0;
	mp.progress_callback = no_progress;
	*model = llama_model_load_from_file(path, mp);
	if (!*model) {
		fprintf(stderr, "llama-ref: cannot load %s\n", path);
		return NULL;
	}
	cp.n_ctx = (uint32_t)n_ctx;
	cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.type_k = cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	if (getenv("KVE_REF_KV") && !strcmp(getenv("KVE_REF_KV"), "q8_0")) {
		cp.type_k = cp.type_v = GGML_TYPE_Q8_0;
		cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
	}
	ctx = llama_init_from_model(*model, cp);
	if (!ctx)
		fprintf(stderr, "llama-ref: cannot create a context for %s\n", path);
	return ctx;
}

/* tokens [from, to) at their positions; logits of the last one */
static int run(struct llama_context *ctx, const llama_token *tok, int from, int to)
{
	struct llama_batch b = llama_batch_init(to - from, 0, 1);
	int i, rc;

	b.n_tokens = to - from;
	for (i = from; i < to; i++) {
		b.token[i - from] = tok[i];
		b.pos[i - from] = i;
		b.n_seq_id[i - from] = 1;
		b.seq_id[i - from][0] = 0;
		b.logits[i - from] = i == to - 1;
	}
	rc = llama_decode(ctx, b);
	llama_batch_free(b);
	return rc;
}

static int logits(const char *path, const char *out, int k, int n, char **toks)
{
	struct llama_model *model;
	struct llama_context *ctx = open_ctx(path, &model, n + 8);
	llama_token *tok = calloc((size_t)n, sizeof(*tok));
	FILE *f = fopen(out, "wb");
	int nv, i, rc = 1;

	if (!ctx || !tok || !f || k < 1 || k > n)
		goto out;
	nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
	for (i = 0; i < n; i++)
		tok[i] = atoi(toks[i]);
	if (run(ctx, tok, 0, k))
		goto out;
	fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), (size_t)nv, f);
	for (i = k; i < n; i++) {
		if (run(ctx, tok, i, i + 1))
			goto out;
		fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), (size_t)nv, f);
	}
	rc = 0;
out:
	if (f && fclose(f))
		rc = 1;
	free(tok);
	if (ctx)
		llama_free(ctx);
	return rc;
}

static int argmax(const float *l, int n)
{
	int i, b = 0;

	for (i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return b;
}

static int greedy(const char *path, int steps, const char *out, int n, char **toks)
{
	struct llama_model *model;
	struct llama_context *ctx = open_ctx(path, &model, n + steps + 8);
	llama_token *tok = calloc((size_t)(n + steps), sizeof(*tok));
	FILE *f = fopen(out, "wb");
	int nv, i, rc = 1;

	if (!ctx || !tok || !f || n < 1)
		goto out;
	nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
	for (i = 0; i < n; i++)
		tok[i] = atoi(toks[i]);
	if (run(ctx, tok, 0, n))
		goto out;
	for (i = 0; i < steps; i++) {
		fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), (size_t)nv, f);
		tok[n + i] = argmax(llama_get_logits_ith(ctx, -1), nv);
		printf("%s%d", i ? " " : "", tok[n + i]);
		if (i + 1 < steps && run(ctx, tok, n + i, n + i + 1))
			goto out;
	}
	printf("\n");
	rc = 0;
out:
	if (f && fclose(f))
		rc = 1;
	free(tok);
	if (ctx)
		llama_free(ctx);
	return rc;
}

static void *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	size_t cap = 0, n = 0, r;

	if (!f)
		return NULL;
	do {
		if (n == cap) {
			char *q = realloc(p, cap = cap * 2 + 65536);

			if (!q) {
				free(p);
				fclose(f);
				return NULL;
			}
			p = q;
		}
		r = fread(p + n, 1, cap - n, f);
		n += r;
	} while (r);
	fclose(f);
	*len = n;
	return p;
}

static int dequant(int type, const char *in, const char *out)
{
	const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)type);
	size_t len, nb;
	void *blocks = slurp(in, &len);
	float *y;
	FILE *f;
	int rc = 1;

	if (!blocks || !tr || !tr->to_float || !tr->type_size || len % tr->type_size) {
		fprintf(stderr, "llama-ref: cannot dequantize type %d from %s\n", type, in);
		free(blocks);
		return 1;
	}
	nb = len / tr->type_size;
	y = malloc(sizeof(float) * nb * (size_t)tr->blck_size);
	f = fopen(out, "wb");
	if (y && f) {
		tr->to_float(blocks, y, (int64_t)(nb * (size_t)tr->blck_size));
		rc = fwrite(y, sizeof(float), nb * (size_t)tr->blck_size, f) ==
		     nb * (size_t)tr->blck_size ? 0 : 1;
	}
	if (f && fclose(f))
		rc = 1;
	free(y);
	free(blocks);
	return rc;
}

static int tokenize(const char *path, int special, int add)
{
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model;
	size_t len;
	char *text = slurp("/dev/stdin", &len);
	llama_token *tok;
	int n, i;

	mp.n_gpu_layers = 0;
	mp.vocab_only = true;
	model = llama_model_load_from_file(path, mp);
	if (!model || !text)
		return 1;
	tok = malloc(sizeof(*tok) * (len + 16));
	n = llama_tokenize(llama_model_get_vocab(model), text, (int32_t)len, tok,
			   (int32_t)len + 16, add != 0, special != 0);
	for (i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", tok[i]);
	printf("\n");
	free(tok);
	free(text);
	llama_model_free(model);
	return n < 0;
}

static int tmpl_apply(const char *tmpl_path, int add_ass)
{
	size_t len, tl, i, n = 0;
	char *in = slurp("/dev/stdin", &len), *tmpl = slurp(tmpl_path, &tl), *buf;
	struct llama_chat_message msg[256];
	int32_t r;

	if (!in || !tmpl)
		return 1;
	tmpl = realloc(tmpl, tl + 1);
	tmpl[tl] = 0;
	for (i = 0; i < len && n < 256;) {
		msg[n].role = in + i;
		i += strlen(in + i) + 1;
		if (i >= len)
			break;
		msg[n].content = in + i;
		i += strlen(in + i) + 1;
		n++;
	}
	buf = malloc(len * 4 + 65536);
	r = llama_chat_apply_template(tmpl, msg, n, add_ass != 0, buf, (int32_t)(len * 4 + 65536));
	if (r < 0) {
		fprintf(stderr, "llama-ref: the template is not one llama.cpp knows\n");
		return 1;
	}
	fwrite(buf, 1, (size_t)r, stdout);
	free(buf);
	free(in);
	free(tmpl);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	llama_log_set(quiet, NULL);
	if (argc >= 5 && !strcmp(argv[1], "dequant"))
		return dequant(atoi(argv[2]), argv[3], argv[4]);
	if (argc >= 4 && !strcmp(argv[1], "template"))
		return tmpl_apply(argv[2], atoi(argv[3]));
	{
		/* the CPU backends sit beside libllama in the peer cache */
		Dl_info di;
		char dir[4096];

		if (dladdr((void *)llama_backend_init, &di) && di.dli_fname) {
			snprintf(dir, sizeof(dir), "%s", di.dli_fname);
			ggml_backend_load_all_from_path(dirname(dir));
		} else {
			ggml_backend_load_all();
		}
	}
	llama_backend_init();
	if (argc >= 5 && !strcmp(argv[1], "quantize"))
		rc = quantize(argv[2], argv[3], argv[4]);
	else if (argc >= 5 && !strcmp(argv[1], "logits"))
		rc = logits(argv[2], argv[3], atoi(argv[4]), argc - 5, argv + 5);
	else if (argc >= 6 && !strcmp(argv[1], "greedy"))
		rc = greedy(argv[2], atoi(argv[3]), argv[4], argc - 5, argv + 5);
	else if (argc >= 4 && !strcmp(argv[1], "tokenize"))
		rc = tokenize(argv[2], atoi(argv[3]), argc >= 5 ? atoi(argv[4]) : 0);
	else {
		fprintf(stderr, "usage: llama-ref quantize|logits|greedy|dequant|tokenize|template ...\n");
		rc = 2;
	}
	llama_backend_free();
	return rc;
}
