// SPDX-License-Identifier: MIT
/*
 * kve-logits - runs the engine over a token list and writes the logits of
 * every position (float32, n x vocab) so tests/engine/ref.py can compare
 * them with its numpy forward pass. Position 0 is a prefill of one token,
 * the rest are decode steps, so both paths are compared.
 *
 * usage: kve-logits MODEL OUT [--kv f16|f32|q8_0] [--block N] [--threads N]
 *                   [--prefill K] TOKEN...
 * --prefill K: prefill the first K tokens at once (logits of position K-1),
 *              then decode the rest.
 * --greedy N:  then N more greedy steps (the argmax fed back, lowest id on
 *              ties), their ids printed on a line "greedy ID..."; the
 *              logits each was chosen from are the last N rows of OUT.
 *        kve-logits --dequant TYPE IN OUT
 * writes the values of the blocks of ggml type TYPE in the file IN, as
 * kve_dequant_block gives them, to OUT (float32).
 *        kve-logits --tokenize MODEL FILE
 * prints the token ids (no BOS) of each line of FILE, lines given in hex
 * (MODEL may be a vocabulary-only GGUF, as llama.cpp's ggml-vocab-*.gguf).
 *        kve-logits --tokenize-bos MODEL FILE
 * the same with add_bos (BOS first where the file's add_bos_token says).
 *        kve-logits --pretok NAME FILE
 * prints the words the BPE pre-tokenizer NAME (a tokenizer.ggml.pre
 * value) splits each line of FILE into, in hex, separated by spaces.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "tcheck.h"

/* Reads one line of hex from f into text; returns its byte count or -1 at
 * the end of the file. */
static long hex_line(FILE *f, char *text, size_t max)
{
	char line[8192];
	size_t n = 0;
	unsigned v;

	if (!fgets(line, sizeof(line), f))
		return -1;
	while (line[2 * n] && line[2 * n] != '\n' &&
	       sscanf(line + 2 * n, "%2x", &v) == 1 && n < max)
		text[n++] = (char)v;
	return (long)n;
}

static int print_word(void *ctx, const char *w, size_t n)
{
	size_t i;

	printf("%s", *(int *)ctx ? " " : "");
	for (i = 0; i < n; i++)
		printf("%02x", (unsigned char)w[i]);
	*(int *)ctx = 1;
	return 0;
}

/* Calls fn on each hex line of file, ending each output line; -1 if the
 * file cannot be read. */
static int each_hex_line(const char *file, void (*fn)(void *ctx, const char *text, size_t n),
			 void *ctx)
{
	char text[4096];
	FILE *f = fopen(file, "r");
	long n;

	if (!f)
		return -1;
	while ((n = hex_line(f, text, sizeof(text))) >= 0) {
		fn(ctx, text, (size_t)n);
		printf("\n");
	}
	fclose(f);
	return 0;
}

static void pretok_line(void *ctx, const char *text, size_t n)
{
	int any = 0, rc = kve_pretok_split(ctx, text, n, print_word, &any);

	if (rc)
		printf(" error %d", rc);
}

static int pretok_file(const char *name, const char *file)
{
	char err[256];
	struct kve_pretok *p = kve_pretok_create(name, strlen(name), err, sizeof(err));
	int rc;

	if (!p) {
		fprintf(stderr, "kve-logits: %s\n", err);
		return 1;
	}
	rc = each_hex_line(file, pretok_line, p);
	kve_pretok_free(p);
	return rc ? 1 : 0;
}

static int tokenize_bos;	/* --tokenize-bos: add_bos 1 (BOS where the file asks) */

static void tokenize_line(void *ctx, const char *text, size_t n)
{
	int32_t ids[4096];
	int k = kve_tokenize(ctx, text, n, tokenize_bos, ids, 4096), i;

	for (i = 0; i < k && i < 4096; i++)
		printf(i ? " %d" : "%d", ids[i]);
}

static int tokenize_file(const char *model, const char *file)
{
	char err[256];
	struct kve_model *m = kve_model_load(model, err, sizeof(err));
	struct kve_model vocab_only;
	struct kve_tokenizer *t = NULL;
	const struct gguf_kv *kv;
	int rc;

	if (!m) {	/* a vocabulary-only file (llama.cpp's ggml-vocab-*.gguf) */
		memset(&vocab_only, 0, sizeof(vocab_only));
		if (gguf_open_file(&vocab_only.g, model, 0, err, sizeof(err))) {
			fprintf(stderr, "kve-logits: %s\n", err);
			return 1;
		}
		kv = gguf_find_kv(&vocab_only.g, "tokenizer.ggml.tokens");
		vocab_only.info.vocab = kv ? (uint32_t)kv->arr_n : 0;
		t = kve_tokenizer_create(&vocab_only, err, sizeof(err));
	} else {
		t = kve_tokenizer_create(m, err, sizeof(err));
	}
	if (!t) {
		fprintf(stderr, "kve-logits: %s\n", err);
		rc = 1;
	} else {
		rc = each_hex_line(file, tokenize_line, t) ? 1 : 0;
	}
	kve_tokenizer_free(t);
	if (m)
		kve_model_free(m);
	else
		gguf_close(&vocab_only.g);
	return rc;
}

static int dequant_file(uint32_t type, const char *in, const char *out)
{
	size_t bb = ggml_blck_bytes(type), bk = ggml_blck_size(type), len, i;
	uint8_t *blocks = tc_slurp(in, &len);
	float *y;
	FILE *f;
	int rc = 1;

	if (!blocks || !bb || len % bb) {
		fprintf(stderr, "kve-logits: cannot dequantize type %u from %s\n", type, in);
		free(blocks);
		return 1;
	}
	y = malloc(sizeof(float) * (len / bb) * bk + 1);
	f = fopen(out, "wb");
	if (y && f) {
		for (i = 0; i < len / bb; i++)
			kve_dequant_block(type, blocks + i * bb, y + i * bk);
		rc = fwrite(y, sizeof(float), len / bb * bk, f) == len / bb * bk ? 0 : 1;
	}
	if (f && fclose(f))
		rc = 1;
	free(y);
	free(blocks);
	return rc;
}

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t i, b = 0;

	for (i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return (int32_t)b;
}

int main(int argc, char **argv)
{
	enum kve_kv_dtype dt = KVE_KV_F32;
	uint32_t bt = 16, nth = 1, pre = 1, n = 0, i, vocab, nblk, greedy = 0;
	int32_t toks[4096];
	char err[256];
	struct kve_model *m;
	struct kve_engine *e;
	struct kve_kv_pool kp;
	struct kve_engine_params ep = { 0 };
	struct kve_session s = { 0 };
	struct tpool tp;
	float *lg;
	FILE *f;
	int a, rc;

	if (argc == 4 && !strcmp(argv[1], "--tokenize"))
		return tokenize_file(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "--tokenize-bos")) {
		tokenize_bos = 1;
		return tokenize_file(argv[2], argv[3]);
	}
	if (argc == 4 && !strcmp(argv[1], "--pretok"))
		return pretok_file(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "--dequant"))
		return dequant_file((uint32_t)atoi(argv[2]), argv[3], argv[4]);
	if (argc < 4) {
		fprintf(stderr, "usage: kve-logits MODEL OUT [opts] TOKEN...\n");
		return 2;
	}
	for (a = 3; a < argc; a++) {
		if (!strcmp(argv[a], "--kv") && a + 1 < argc)
			dt = !strcmp(argv[++a], "f16") ? KVE_KV_F16 :
			     !strcmp(argv[a], "q8_0") ? KVE_KV_Q8_0 : KVE_KV_F32;
		else if (!strcmp(argv[a], "--block") && a + 1 < argc)
			bt = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--threads") && a + 1 < argc)
			nth = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--prefill") && a + 1 < argc)
			pre = (uint32_t)atoi(argv[++a]);
		else if (!strcmp(argv[a], "--greedy") && a + 1 < argc)
			greedy = (uint32_t)atoi(argv[++a]);
		else if (n < 4096)
			toks[n++] = atoi(argv[a]);
	}
	if (!n || pre < 1 || pre > n || greedy > 4096 - n) {
		fprintf(stderr, "kve-logits: bad token list\n");
		return 2;
	}
	m = kve_model_load(argv[1], err, sizeof(err));
	if (!m) {
		fprintf(stderr, "kve-logits: %s\n", err);
		return 1;
	}
	vocab = kve_model_info(m)->vocab;
	nblk = (n + greedy + bt - 1) / bt;
	if (tpool_init(&tp, m, bt, dt, nblk, &kp))
		return 1;
	s.block_table = calloc(nblk, sizeof(uint32_t));
	s.n_blocks = nblk;
	for (i = 0; i < nblk; i++)	/* reversed: blocks are not contiguous */
		s.block_table[i] = nblk - 1 - i;
	ep.n_threads = nth;
	ep.max_batch = 1;
	ep.max_ctx = n + greedy;
	e = kve_engine_create(m, &kp, &ep, err, sizeof(err));
	if (!e) {
		fprintf(stderr, "kve-logits: %s\n", err);
		return 1;
	}
	lg = malloc((size_t)vocab * sizeof(float));
	f = fopen(argv[2], "wb");
	if (!f || !lg)
		return 1;
	rc = kve_prefill(e, &s, toks, pre, lg);
	if (rc) {
		fprintf(stderr, "kve-logits: prefill: %s\n", strerror(-rc));
		return 1;
	}
	fwrite(lg, sizeof(float), vocab, f);
	for (i = pre; i < n; i++) {
		struct kve_session *sp = &s;
		rc = kve_decode(e, &sp, &toks[i], 1, lg);
		if (rc) {
			fprintf(stderr, "kve-logits: decode: %s\n", strerror(-rc));
			return 1;
		}
		fwrite(lg, sizeof(float), vocab, f);
	}
	for (i = 0; i < greedy; i++) {
		struct kve_session *sp = &s;

		toks[n + i] = argmax(lg, vocab);
		printf("%s%d", i ? " " : "greedy ", toks[n + i]);
		if (i + 1 == greedy) {
			printf("\n");
			break;
		}
		rc = kve_decode(e, &sp, &toks[n + i], 1, lg);
		if (rc) {
			fprintf(stderr, "kve-logits: decode: %s\n", strerror(-rc));
			return 1;
		}
		fwrite(lg, sizeof(float), vocab, f);
	}
	fclose(f);
	printf("isa %s, %s, %u positions, vocab %u\n", kve_isa_name(),
	       tp.kv ? "KV in a kvarena arena" : "KV malloc", n - pre + 1, vocab);
	free(lg);
	free(s.block_table);
	kve_engine_free(e);
	tpool_free(&tp);
	kve_model_free(m);
	return 0;
}
