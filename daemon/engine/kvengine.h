/* SPDX-License-Identifier: MIT */
/*
 * kvengine.h - public API of kvarena's built-in CPU inference engine.
 *
 * The engine runs llama-family GGUF models (architectures llama, qwen2 and
 * qwen3; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, IQ4_NL
 * and IQ4_XS tensors) on the CPU. It does not own KV memory: the caller hands it a struct kve_kv_pool
 * (block id -> address, e.g. backed by a kvarena arena) and, per session, a
 * table of block ids. The block layout is documented in
 * Documentation/engine.md and by kve_kv_block_bytes().
 *
 * Conventions: functions returning int give 0 or a negative errno; functions
 * that can fail on user input take an error buffer and write a one-line
 * message naming what was wrong. Nothing here calls exit().
 */
#ifndef KVENGINE_H
#define KVENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model ---------------------------------------------------------- */

struct kve_model;

struct kve_model_info {
	uint32_t dim;		/* embedding length */
	uint32_t n_layers;
	uint32_t n_heads;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t ffn_dim;
	uint32_t vocab;
	uint32_t ctx_len;	/* trained context length from metadata */
	uint32_t rope_dims;	/* leading dims of each head that are rotated */
	float rope_base;
	float rms_eps;
	int tied_output;	/* 1 when the output head is token_embd */
	uint32_t weight_type;	/* type of layer 0's attn_q in the file (ggml
				 * numbering: 0 F32, 1 F16, 8 Q8_0, 11 Q3_K,
				 * 12 Q4_K...; mixes vary per matrix) */
	uint64_t weight_bytes;	/* bytes read per token for all matrices (a Q3_K
				 * matrix's as the Q6_K the engine reads) */
	const char *arch;	/* general.architecture: "llama", "qwen2" or "qwen3" */
	int rope_neox;		/* 1: rope rotates pairs (i, i + rope_dims/2)
				 * (NEOX, qwen2); 0: pairs (2i, 2i+1) (llama) */
	int qkv_bias;		/* 1 when the Q/K/V projections have biases */
	int qk_norm;		/* 1: per-head RMS norm of Q and K before rope (qwen3) */
	float rope_freq_scale;	/* linear rope scaling: positions times this (1: none) */
	int rope_freq_factors;	/* 1: rope_freqs.weight divides each pair's
				 * frequency (llama 3.1+'s long-context rope) */
	float attn_scale;	/* Q.K scale: attention.scale, else 1/sqrt(head_dim) */
};

/* Open and validate a GGUF file. The file is read into private memory in
 * 2 MiB transparent huge pages when THP is enabled (faster weight
 * streaming; each process holds its own copy), else mapped read-only;
 * KVE_WEIGHTS=copy|mmap chooses. On failure returns NULL and writes the
 * reason to err. */
struct kve_model *kve_model_load(const char *path, char *err, size_t errlen);
/* Same, from a caller-owned buffer that must outlive the model. */
struct kve_model *kve_model_load_mem(const void *buf, size_t len,
				     char *err, size_t errlen);
void kve_model_free(struct kve_model *m);
const struct kve_model_info *kve_model_info(const struct kve_model *m);
/* The n-th matrix a one-token pass reads, in the order it reads them
 * (each layer's q, k, v, o, gate, up, down, then the output head): its
 * bytes at *p, *len of them (their sum is weight_bytes). 0, or -ENOENT
 * past the last. For measuring how fast this memory reads (kve-bench's
 * roofline). */
int kve_model_matrix(const struct kve_model *m, uint32_t n, const void **p, size_t *len);
/* A string metadata value of the file ("tokenizer.chat_template"): its
 * bytes (not NUL-terminated, inside the model's mapping: valid while the
 * model is) and *len, or NULL when the key is absent or not a string. */
const char *kve_model_meta_str(const struct kve_model *m, const char *key,
			       size_t *len);

/* ---- paged KV ------------------------------------------------------- */

enum kve_kv_dtype {
	KVE_KV_F32 = 0,
	KVE_KV_F16 = 1,
	KVE_KV_Q8_0 = 2,	/* 8-bit, a fp16 scale per 32: head_dim % 32 == 0 */
};

#define KVE_DEFAULT_BLOCK_TOKENS 16

/*
 * One KV block holds block_tokens consecutive positions of one session for
 * all layers. Layout, outermost first:
 *   [layer][K|V][kv_head][token][head_dim]   elements of dtype
 * so the byte size is
 *   n_layers * 2 * n_kv_heads * block_tokens * head_dim * sizeof(dtype),
 * or 0 without a model or for an unknown dtype. A KVE_KV_Q8_0 slab (one
 * [layer][K|V][kv_head], B = block_tokens rows) is Q8_0 blocks of 32
 * values split in two: first the fp16 scales, [head_dim / 32][B] (block
 * by block, a row a scale), then the quants: V's int8, [B][head_dim]
 * (row by row); K's [head_dim / 4][B][4] (four dimensions of every row,
 * then the next four), each stored + 128 as an unsigned byte. So
 * head_dim * 17 / 16 bytes a row; 0 for a head_dim not a multiple of 32.
 * With a head_dim that is a multiple of 64 the rows are rotated before
 * they are quantised (as llama.cpp's quantised cache does): K by the
 * orthonormal Walsh-Hadamard matrix of the largest power of two from 64
 * dividing head_dim, V by that of 64, each piece of the row on its own
 * (Documentation/engine.md, "Paged KV").
 */
size_t kve_kv_block_bytes(const struct kve_model *m, uint32_t block_tokens,
			  enum kve_kv_dtype dtype);

/* The engine's only view of KV storage. block_ptr must return the address
 * of a block of at least kve_kv_block_bytes() bytes, or NULL for an unknown
 * id. Blocks need 64-byte alignment for best speed (4 bytes minimum). */
struct kve_kv_pool {
	void *ctx;
	void *(*block_ptr)(void *ctx, uint32_t block_id);
	uint32_t block_tokens;
	enum kve_kv_dtype dtype;
};

/*
 * A session is owned by the caller. block_table[i] holds positions
 * [i*block_tokens, (i+1)*block_tokens). n_tokens counts positions already
 * holding K/V. To share a prefix, copy the donor's first k block ids and set
 * n_tokens = k*block_tokens: the engine only writes positions >= n_tokens,
 * so whole shared blocks are never written. n_blocks is the table capacity.
 */
struct kve_session {
	uint32_t *block_table;
	uint32_t n_blocks;
	uint32_t n_tokens;
};

/* ---- engine --------------------------------------------------------- */

struct kve_engine;

struct kve_engine_params {
	uint32_t n_threads;	/* 1 or 2 */
	uint32_t max_batch;	/* sessions per decode call */
	uint32_t max_chunk;	/* prompt tokens per prefill pass (0: 128) */
	uint32_t max_ctx;	/* longest session (0: model ctx_len) */
};

struct kve_engine *kve_engine_create(const struct kve_model *m,
				     const struct kve_kv_pool *pool,
				     const struct kve_engine_params *p,
				     char *err, size_t errlen);
void kve_engine_free(struct kve_engine *e);

/* Append tokens to the session, writing their K/V; logits (vocab floats) of
 * the last token go to logits. -EINVAL bad token/params, -ENOSPC block
 * table or max_ctx too small, -EFAULT pool returned NULL. */
int kve_prefill(struct kve_engine *e, struct kve_session *s,
		const int32_t *tokens, uint32_t n_tokens, float *logits);

/* One decode step for n sessions: session i consumes tokens[i]; logits of
 * session i go to logits + i*vocab. All weights are read once per step. */
int kve_decode(struct kve_engine *e, struct kve_session *const *sessions,
	       const int32_t *tokens, uint32_t n, float *logits);

/* A ragged batch, one pass per max(max_chunk, max_batch) tokens: session
 * i appends n_new[i] tokens (tokens holds them session by session); the
 * logits of each session's last token go to logits + i*vocab. Prompt
 * chunks of several sessions and single decode tokens of others share
 * each pass, so the weights are read once for all of them; every token's
 * result is the same as alone (the kernels' batch invariance). The
 * sessions must be distinct. Errors as kve_prefill, before anything is
 * written. */
int kve_batch(struct kve_engine *e, struct kve_session *const *sessions,
	      const uint32_t *n_new, const int32_t *tokens, uint32_t n, float *logits);

/* Name of the kernel set chosen at run time ("avx512vnni", "avx512",
 * "avxvnni", "avx2", "c"). The environment variable
 * KVE_ISA=c|avx2|avxvnni|avx512|avx512vnni forces a lower one. The
 * AVX-512 and VNNI sets are used only if they pass a self-check against
 * the portable C kernels at selection (KVE_SELFCHECK=1: any SIMD set);
 * otherwise the next lower set is used and kve_isa_note() says why (""
 * when nothing happened; the same line goes to stderr once). A self-check
 * that could not run for want of memory chooses nothing: the engine's
 * creation fails ("out of memory") and the next call tries again;
 * meanwhile kve_isa_name() is "none (out of memory)". */
const char *kve_isa_name(void);
const char *kve_isa_note(void);
/* The engine's numerics revision: a new one whenever any kernel set's
 * results change by a bit, so that what names a configuration's numbers
 * (kvarenad's system_fingerprint) changes with them. */
#define KVE_NUMERICS "2026-12-06"	/* the Q8_0 KV rotated */

/* 1 when decode asks memory ahead for its weights and K/V (software
 * prefetch: on where it was measured to pay, an AMD Zen 5; off elsewhere;
 * KVE_PREFETCH=0|1 decides instead). Results are the same either way. */
int kve_isa_prefetch(void);

/* ---- sampling ------------------------------------------------------- */

struct kve_sampler {
	float temperature;	/* <= 0: greedy */
	uint32_t top_k;		/* 0: off */
	float top_p;		/* >= 1 or <= 0: off */
	uint64_t rng;		/* per-request state; seed it with kve_rng_seed */
	float min_p;		/* keep p >= min_p * p(best); <= 0: off */
};

uint64_t kve_rng_seed(uint64_t seed);
/* Returns the chosen token id, or a negative errno. scratch must hold
 * KVE_SAMPLE_SCRATCH(vocab) bytes; it may be NULL for greedy. Ties and
 * equal probabilities resolve to the lower token id, so a given rng state
 * always gives the same token. */
#define KVE_SAMPLE_SCRATCH(vocab) ((size_t)(vocab) * 8)
int32_t kve_sample(struct kve_sampler *s, const float *logits, uint32_t vocab,
		   void *scratch);
/* Same, over the tokens whose bit is set in mask ((vocab + 31) / 32 words,
 * bit i % 32 of word i / 32; kvc_mask in kvconstrain.h fills it). mask
 * NULL: kve_sample. -ENOENT when no token is allowed. */
int32_t kve_sample_masked(struct kve_sampler *s, const float *logits, uint32_t vocab,
			  const uint32_t *mask, void *scratch);

/* What changes the logits before sampling, as OpenAI, vLLM and llama.cpp's
 * server name it. kve_logits_adjust applies, in this order: repetition
 * penalty to every token of the context (a positive logit divided by it,
 * a negative one multiplied), frequency and presence penalties to the
 * generated tokens (logit -= count * frequency + presence), then the
 * biases (logit += bias; -INFINITY bans a token). Arrays may be in any
 * order; ids outside the vocabulary are ignored. */
struct kve_token_count {
	int32_t token;
	uint32_t count;
};
struct kve_token_bias {
	int32_t token;
	float bias;
};
struct kve_logit_adjust {
	float repetition_penalty;	/* 1 (or <= 0): off */
	float frequency_penalty;	/* 0: off */
	float presence_penalty;		/* 0: off */
	const int32_t *context;		/* distinct tokens of the context */
	uint32_t n_context;
	const struct kve_token_count *generated;	/* distinct generated tokens */
	uint32_t n_generated;
	const struct kve_token_bias *bias;
	uint32_t n_bias;
};
/* 1 when a changes nothing. */
int kve_logit_adjust_none(const struct kve_logit_adjust *a);
/* In place; 0, or -EINVAL on bad arguments. */
int kve_logits_adjust(float *logits, uint32_t vocab, const struct kve_logit_adjust *a);

/* ---- tokenizer ------------------------------------------------------ */

struct kve_tokenizer;

enum kve_tok_kind { KVE_TOK_SPM = 1, KVE_TOK_BPE = 2 };

/* From the model's tokenizer.ggml.* metadata. BPE ("gpt2") vocabularies
 * split words by the pattern tokenizer.ggml.pre names: "gpt2" (also
 * "default", or no key), "llama-bpe" (llama-3) or "qwen2"; another value
 * fails, naming it in err. */
struct kve_tokenizer *kve_tokenizer_create(const struct kve_model *m,
					   char *err, size_t errlen);
void kve_tokenizer_free(struct kve_tokenizer *t);
enum kve_tok_kind kve_tokenizer_kind(const struct kve_tokenizer *t);
int32_t kve_tokenizer_bos(const struct kve_tokenizer *t);
int32_t kve_tokenizer_eos(const struct kve_tokenizer *t);

/* Encode text (len bytes, any bytes allowed). Writes at most max ids and
 * returns how many the full encoding needs (call again with more room if
 * larger than max), or a negative errno. add_bos prepends BOS where the
 * vocabulary has one and its file asks for it (tokenizer.ggml.add_bos_token,
 * true by default for SentencePiece: what llama.cpp's add_special does). */
int kve_tokenize(const struct kve_tokenizer *t, const char *text, size_t len,
		 int add_bos, int32_t *out, size_t max);

/* A byte range of a text. */
struct kve_span {
	size_t off, len;
};

#define KVE_TOKENIZE_BOS 1u	/* BOS first (where kve_tokenize's add_bos gives one) */
#define KVE_TOKENIZE_CONT 2u	/* the text continues another: no SentencePiece
				 * dummy-prefix space */

/*
 * Encode text in which special tokens (control and user-defined tokens: a
 * chat template's markers, tokenizer.ggml.token_type 3 and 4) are their
 * token only inside the given spans (sorted, not overlapping): there the
 * text is partitioned at them as llama.cpp's parse_special does (longest
 * token first). Everywhere else the text is plain and no special token is
 * ever produced for it, whatever it spells (a merge that would make one is
 * not taken). The text between special tokens is encoded as kve_tokenize
 * does, the SentencePiece dummy prefix only at its very start (not with
 * CONT). Returns as kve_tokenize; -EINVAL for spans out of the text.
 */
int kve_tokenize_spans(const struct kve_tokenizer *t, const char *text, size_t len,
		       const struct kve_span *special, size_t n_special, unsigned flags,
		       int32_t *out, size_t max);

/* A special token's text (control or user-defined: "<|im_start|>"):
 * its length (may exceed max, truncating); 0 for any other token;
 * -EINVAL for a bad id. */
int kve_token_special(const struct kve_tokenizer *t, int32_t id, char *out, size_t max);

/* Makes kve_token_bytes (and so detokenized text and the constrained
 * decoder's vocabulary) give the text of the control tokens spelled text
 * (a chat syntax's markers a parser must see: "[TOOL_CALLS]"). 0, or
 * -ENOENT when no control token has that text. Before the tokenizer is
 * shared between threads. */
int kve_tokenizer_show(struct kve_tokenizer *t, const char *text);

/* Raw bytes of one token (byte-fallback / byte-level decoded). Returns the
 * byte count (may exceed max, truncating), or a negative errno. */
int kve_token_bytes(const struct kve_tokenizer *t, int32_t id, char *out,
		    size_t max);

/* Streaming detokeniser: feeds tokens one at a time and emits only complete
 * UTF-8 sequences, holding back the partial tail (up to 3 bytes). */
struct kve_detok {
	const struct kve_tokenizer *tok;
	unsigned char pending[8];
	uint32_t n_pending;
	int at_start;		/* drop the SPM dummy-prefix space once */
};
void kve_detok_init(struct kve_detok *d, const struct kve_tokenizer *t);
/* Returns bytes written to out (needs room for token bytes + 8), or <0. */
int kve_detok_push(struct kve_detok *d, int32_t id, char *out, size_t max);
/* Flushes held bytes (incomplete UTF-8 at end of stream) as-is. */
int kve_detok_flush(struct kve_detok *d, char *out, size_t max);

#ifdef __cplusplus
}
#endif
#endif
