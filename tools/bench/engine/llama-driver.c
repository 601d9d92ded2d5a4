// SPDX-License-Identifier: MIT
/*
 * llama-driver - the llama.cpp side of the engine benchmark: the same
 * measurements as kve-bench (prefill of the same prompt, greedy decode,
 * decode at batch N with the prompt shared across sequences) through
 * libllama, printing the same key=value lines. Built by bench.sh against
 * the node-llama-cpp binaries in a cache outside the repository; never
 * part of the engine.
 *
 * usage: llama-driver LIBDIR MODEL [--threads N] [--prompt N] [--decode N]
 *                     [--batch N] [--kv f16|q8_0]
 *
 * --kv q8_0: K and V cached as Q8_0 (llama.cpp's -ctk q8_0 -ctv q8_0,
 * which needs its flash attention), against kve-bench --kv q8_0.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"
#include "bench_argmax.h"

#define PREFILL_REPS 3

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *l, int n)
{
	return bench_argmax(l, n);
}

static bool no_progress(float p, void *ud)
{
	(void)p;
	(void)ud;
	return true;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
	(void)ud;
	if (level >= GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

int main(int argc, char **argv)
{
	int threads = 1, prompt = 128, ndec = 64, batch = 8, kvq8 = 0, a, i, j, nv, steps;
	struct llama_model_params mp;
	struct llama_context_params cp;
	struct llama_model *model;
	struct llama_context *ctx;
	struct llama_batch b;
	const struct llama_vocab *vocab;
	llama_token *tok, next[64];
	double t, t_pre, t_dec, t_bat;

	if (argc < 3) {
		fprintf(stderr, "usage: llama-driver LIBDIR MODEL [options]\n");
		return 2;
	}
	for (a = 3; a < argc; a++) {
		if (!strcmp(argv[a], "--threads") && a + 1 < argc) threads = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--prompt") && a + 1 < argc) prompt = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--decode") && a + 1 < argc) ndec = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--batch") && a + 1 < argc) batch = atoi(argv[++a]);
		else if (!strcmp(argv[a], "--kv") && a + 1 < argc) kvq8 = !strcmp(argv[++a], "q8_0");
	}
	if (batch < 1 || batch > 64)
		return 2;
	llama_log_set(quiet, NULL);
	ggml_backend_load_all_from_path(argv[1]);
	llama_backend_init();
	mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	mp.progress_callback = no_progress;
	model = llama_model_load_from_file(argv[2], mp);
	if (!model) {
		fprintf(stderr, "llama-driver: cannot load %s\n", argv[2]);
		return 1;
	}
	vocab = llama_model_get_vocab(model);
	nv = llama_vocab_n_tokens(vocab);
	steps = ndec / 2 ? ndec / 2 : 1;
	cp = llama_context_default_params();
	cp.n_ctx = prompt + ndec + batch * steps + 64;
	cp.n_batch = cp.n_ubatch = prompt > batch ? prompt : batch;
	cp.n_seq_max = batch;
	cp.kv_unified = true;
	cp.n_threads = cp.n_threads_batch = threads;
	if (kvq8) {
		cp.type_k = cp.type_v = GGML_TYPE_Q8_0;
		cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
	}
	ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llama-driver: cannot create a context\n");
		return 1;
	}
	tok = malloc(sizeof(*tok) * prompt);
	for (i = 0; i < prompt; i++)
		tok[i] = (llama_token)((i * 7919u + 13) % (unsigned)nv);
	b = llama_batch_init(cp.n_batch, 0, 1);

	b.n_tokens = prompt;
	for (i = 0; i < prompt; i++) {
		b.token[i] = tok[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = i == prompt - 1;
	}
	/* best of PREFILL_REPS, as kve-bench */
	for (t_pre = 0, j = 0; j < PREFILL_REPS; j++) {
		llama_memory_seq_rm(llama_get_memory(ctx), 0, 0, -1);
		t = now();
		if (llama_decode(ctx, b))
			return 1;
		t = now() - t;
		if (!j || t < t_pre)
			t_pre = t;
	}
	next[0] = argmax(llama_get_logits_ith(ctx, prompt - 1), nv);
	printf("argmax=%d\n", next[0]);
	bench_print_runner_up(llama_get_logits_ith(ctx, prompt - 1), nv, next[0]);

	t = now();
	for (i = 0; i < ndec; i++) {
		b.n_tokens = 1;
		b.token[0] = next[0];
		b.pos[0] = prompt + i;
		b.n_seq_id[0] = 1;
		b.seq_id[0][0] = 0;
		b.logits[0] = 1;
		if (llama_decode(ctx, b))
			return 1;
		next[0] = argmax(llama_get_logits_ith(ctx, 0), nv);
	}
	t_dec = now() - t;

	/* batch: every sequence starts from the prompt's cached KV */
	llama_memory_seq_rm(llama_get_memory(ctx), 0, prompt, -1);
	for (j = 1; j < batch; j++)
		llama_memory_seq_cp(llama_get_memory(ctx), 0, j, 0, prompt);
	for (j = 0; j < batch; j++)
		next[j] = (tok[prompt - 1] + j) % nv;
	t = now();
	for (i = 0; i < steps; i++) {
		b.n_tokens = batch;
		for (j = 0; j < batch; j++) {
			b.token[j] = next[j];
			b.pos[j] = prompt + i;
			b.n_seq_id[j] = 1;
			b.seq_id[j][0] = j;
			b.logits[j] = 1;
		}
		if (llama_decode(ctx, b))
			return 1;
		for (j = 0; j < batch; j++)
			next[j] = argmax(llama_get_logits_ith(ctx, j), nv);
	}
	t_bat = (now() - t) / steps;
	printf("threads=%d\nprefill_tps=%.1f\ndecode_tps=%.1f\nbatch=%d\nbatch_tps=%.1f\n",
	       threads, prompt / t_pre, ndec / t_dec, batch, batch / t_bat);
	llama_batch_free(b);
	llama_free(ctx);
	llama_model_free(model);
	free(tok);
	return 0;
}
