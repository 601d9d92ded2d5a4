// SPDX-License-Identifier: MIT
/*
 * kva-mkmodel - writes a llama-, qwen2- or qwen3-architecture GGUF v3 file
 * with random weights of any shape (qwen2: with Q/K/V biases; qwen3: with
 * per-head Q/K norms) in any tensor type the engine reads, or in the
 * mixes llama.cpp's quantiser makes (Q4_K_M, Q5_K_M), and a tokenizer
 * vocabulary (SentencePiece-style "llama" or byte-level BPE "gpt2") learnt
 * from a built-in corpus. The output is a pure function of the arguments
 * (same seed, same bytes), so tests and benchmarks can regenerate their
 * models instead of storing them.
 *
 * Owns the GGUF writer, its quantisers (its own, simple ones: any valid
 * encoding of a random weight will do) and the vocabulary learner;
 * nothing in the engine depends on it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/engine/engine_internal.h"
#include "corpus.h"

#define ALIGN 32

static const char usage[] =
"usage: kva-mkmodel -o FILE [options]\n"
"  --arch A         llama | qwen2 | qwen3 (llama); qwen2 adds Q/K/V\n"
"                   biases, qwen3 per-head Q/K RMS norms; their keys are\n"
"                   <arch>.*, their tokenizer bpe/qwen2\n"
"  --head-dim N     attention head size (dim / heads); writes\n"
"                   attention.key_length and value_length\n"
"  --dim N          embedding length (288)\n"
"  --layers N       transformer blocks (6)\n"
"  --heads N        attention heads (6)\n"
"  --kv-heads N     key/value heads, divides heads (= heads)\n"
"  --ffn N          feed-forward length (768)\n"
"  --vocab N        vocabulary size (512, at least ~400)\n"
"  --ctx N          context length (256)\n"
"  --type T         the matrices' type (f32): f32 | f16 | bf16 | q8_0 |\n"
"                   q4_0 | q4_1 | q5_0 | q5_1 | iq4_nl | iq4_xs | q3_k | q4_k |\n"
"                   q5_k | q6_k, or the mixes q2_k | q3_k_m | q4_k_m | q5_k_m\n"
"                   (types per tensor as llama.cpp's quantiser gives them; its\n"
"                   Q2_K is a mix too). A matrix whose rows a type's block\n"
"                   does not divide falls back as llama.cpp's does (q2_k,\n"
"                   q3_k -> q4_0, q4_k -> q5_0, q5_k ->\n"
"                   q5_1, q6_k -> q8_0, iq4_xs -> iq4_nl, then f16)\n"
"  --tokenizer K    spm | bpe (spm; qwen2: bpe)\n"
"  --pre NAME       bpe: tokenizer.ggml.pre, gpt2 | llama-bpe | qwen2\n"
"                   (gpt2; qwen2: qwen2)\n"
"  --rope-base F    RoPE frequency base (10000)\n"
"  --rope-dims N    rotate only the first N dims of each head (partial\n"
"                   rope; even, <= head dim; default: the head dim)\n"
"  --rope-scale F   linear rope scaling: rope.scaling.type linear,\n"
"                   rope.scaling.factor F\n"
"  --rope-freqs     llama 3.1's long-context rope: rope_freqs.weight from\n"
"                   factor 8, low/high frequency factors 1 and 4, original\n"
"                   context 8192\n"
"  --tied           no output.weight: the head reuses token_embd\n"
"  --unk-id N       tokenizer.ggml.unknown_token_id (spm: 0; bpe: none,\n"
"                   as byte-level vocabularies have no unknown token)\n"
"  --token S        spm: S is a vocabulary piece besides the learnt ones\n"
"                   (repeatable, up to 16; e.g. \"]]\" for tests of tokens\n"
"                   that span two closing brackets)\n"
"  --meta K=T:V     one more metadata key K of type T (u32, f32, bool, str)\n"
"                   and value V, e.g. llama.expert_count=u32:8 (repeatable,\n"
"                   up to 16; for tests of what the loader refuses)\n"
"  --seed N         weights and filler tokens derive from it (1)\n"
"  --chat-template F  tokenizer.chat_template: the text of file F (a\n"
"                   model family's template, for the daemon's tests)\n"
"example: kva-mkmodel --dim 768 --layers 12 --heads 12 --ffn 2048 \\\n"
"           --vocab 32000 --ctx 1024 --type q8_0 -o build/models/110m-q8.gguf\n";

/* ---- growable byte buffer ------------------------------------------ */

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fprintf(stderr, "kva-mkmodel: out of memory\n");
		exit(1);
	}
	return p;
}

static void put(struct buf *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 1024;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s, size_t n)
{
	put_u64(b, n);
	put(b, s, n);
}

/* ---- metadata ------------------------------------------------------- */

static struct buf meta;
static uint64_t n_meta;

static void kv_key(const char *k, uint32_t type)
{
	put_str(&meta, k, strlen(k));
	put_u32(&meta, type);
	n_meta++;
}

static void kv_u32(const char *k, uint32_t v) { kv_key(k, GGUF_U32); put_u32(&meta, v); }
static void kv_f32(const char *k, float v) { kv_key(k, GGUF_F32); put(&meta, &v, 4); }
static void kv_bool(const char *k, int v) { uint8_t b = !!v; kv_key(k, GGUF_BOOL); put(&meta, &b, 1); }
static void kv_str(const char *k, const char *s) { kv_key(k, GGUF_STR); put_str(&meta, s, strlen(s)); }

/* ---- vocabulary ----------------------------------------------------- */

struct vocab {
	char **tok;
	float *score;
	int32_t *type;
	uint32_t n, cap;
	char **merge;
	uint32_t n_merge;
	/* string set for uniqueness */
	int32_t *set;
	uint32_t set_mask;
};

static uint32_t hstr(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h;
}

static int vocab_has(const struct vocab *v, const char *s)
{
	uint32_t i;

	for (i = hstr(s) & v->set_mask; v->set[i] >= 0; i = (i + 1) & v->set_mask)
		if (!strcmp(v->tok[v->set[i]], s))
			return 1;
	return 0;
}

static int vocab_add(struct vocab *v, const char *s, float score, int32_t type)
{
	uint32_t i;

	if (vocab_has(v, s))
		return 0;
	if (v->n == v->cap) {
		v->cap = v->cap * 2 + 64;
		v->tok = xrealloc(v->tok, v->cap * sizeof(*v->tok));
		v->score = xrealloc(v->score, v->cap * sizeof(*v->score));
		v->type = xrealloc(v->type, v->cap * sizeof(*v->type));
	}
	v->tok[v->n] = strdup(s);
	v->score[v->n] = score;
	v->type[v->n] = type;
	for (i = hstr(s) & v->set_mask; v->set[i] >= 0; i = (i + 1) & v->set_mask)
		;
	v->set[i] = (int32_t)v->n++;
	return 1;
}

/* A word of the corpus as a list of symbol strings, with its count. */
struct word {
	char **sym;
	int n;
	int count;
};

static void learn(struct vocab *v, struct word *w, int nw, uint32_t target,
		  int bpe)
{
	while (v->n < target) {
		char *best = NULL, *bl = NULL, *br = NULL;
		int best_count = 1, i, j, k;

		/* count pairs (quadratic, fine for a corpus this size) */
		for (i = 0; i < nw; i++) {
			for (j = 0; j + 1 < w[i].n; j++) {
				int cnt = 0;
				size_t la = strlen(w[i].sym[j]), lb = strlen(w[i].sym[j + 1]);
				char *cat = xrealloc(NULL, la + lb + 1);

				memcpy(cat, w[i].sym[j], la);
				memcpy(cat + la, w[i].sym[j + 1], lb + 1);
				if (vocab_has(v, cat)) {
					free(cat);
					continue;
				}
				for (k = 0; k < nw; k++) {
					int m;
					for (m = 0; m + 1 < w[k].n; m++)
						if (!strcmp(w[k].sym[m], w[i].sym[j]) &&
						    !strcmp(w[k].sym[m + 1], w[i].sym[j + 1]))
							cnt += w[k].count;
				}
				if (cnt > best_count ||
				    (cnt == best_count && best && strcmp(cat, best) < 0)) {
					free(best);
					best = cat;
					best_count = cnt;
					bl = w[i].sym[j];
					br = w[i].sym[j + 1];
				} else {
					free(cat);
				}
			}
		}
		if (!best)
			break;
		if (bpe) {
			size_t n = strlen(bl) + strlen(br) + 2;
			v->merge = xrealloc(v->merge, (v->n_merge + 1) * sizeof(char *));
			v->merge[v->n_merge] = xrealloc(NULL, n);
			snprintf(v->merge[v->n_merge], n, "%s %s", bl, br);
			v->n_merge++;
		}
		vocab_add(v, best, -(float)v->n, 1);
		/* apply the merge everywhere (bl/br may be freed below: copy) */
		{
			char *l = strdup(bl), *r = strdup(br);
			for (i = 0; i < nw; i++) {
				for (j = 0; j + 1 < w[i].n; j++) {
					if (strcmp(w[i].sym[j], l) || strcmp(w[i].sym[j + 1], r))
						continue;
					free(w[i].sym[j]);
					free(w[i].sym[j + 1]);
					w[i].sym[j] = strdup(best);
					memmove(w[i].sym + j + 1, w[i].sym + j + 2,
						(w[i].n - j - 2) * sizeof(char *));
					w[i].n--;
				}
			}
			free(l);
			free(r);
		}
		free(best);
	}
}

static size_t u8len(unsigned char c)
{
	if (c < 0x80) return 1;
	if ((c & 0xe0) == 0xc0) return 2;
	if ((c & 0xf0) == 0xe0) return 3;
	if ((c & 0xf8) == 0xf0) return 4;
	return 1;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void add_word(struct word **w, int *nw, char **syms, int n)
{
	int i, j;

	for (i = 0; i < *nw; i++) {
		if ((*w)[i].n != n)
			continue;
		for (j = 0; j < n && !strcmp((*w)[i].sym[j], syms[j]); j++)
			;
		if (j == n) {
			(*w)[i].count++;
			for (j = 0; j < n; j++)
				free(syms[j]);
			free(syms);
			return;
		}
	}
	*w = xrealloc(*w, (*nw + 1) * sizeof(**w));
	(*w)[*nw].sym = syms;
	(*w)[*nw].n = n;
	(*w)[*nw].count = 1;
	(*nw)++;
}

static void free_words(struct word *w, int nw)
{
	int i, j;

	for (i = 0; i < nw; i++) {
		for (j = 0; j < w[i].n; j++)
			free(w[i].sym[j]);
		free(w[i].sym);
	}
	free(w);
}

static void filler(struct vocab *v, uint32_t target, uint64_t seed, int bpe)
{
	uint64_t s = seed ^ 0x5eedf111ull;
	char t[32];

	while (v->n < target) {
		if (bpe) {
			snprintf(t, sizeof(t), "<|reserved_%u|>", v->n);
			vocab_add(v, t, 0, 5);
		} else {
			int len = 2 + (int)(rng_next(&s) % 7), i;
			memcpy(t, "\xe2\x96\x81", 3);
			for (i = 0; i < len; i++)
				t[3 + i] = (char)('a' + rng_next(&s) % 26);
			t[3 + len] = 0;
			vocab_add(v, t, -1e6f - (float)v->n, 1);
		}
	}
}

#define MAX_EXTRA 16
static const char *extra_tokens[MAX_EXTRA];
static int n_extra;
static const char *extra_meta[MAX_EXTRA];
static int n_meta_extra;

/* --meta K=T:V: 0, or -1 (and a message) when it does not parse */
static int put_meta(const char *arg)
{
	const char *eq = strchr(arg, '='), *v;
	char key[128], *end;

	if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(key) || !strchr(eq, ':'))
		goto bad;
	memcpy(key, arg, (size_t)(eq - arg));
	key[eq - arg] = 0;
	v = strchr(eq, ':') + 1;
	if (!strncmp(eq + 1, "u32:", 4)) {
		unsigned long n = strtoul(v, &end, 0);

		if (*end || !*v || n > 0xffffffffu)
			goto bad;
		kv_u32(key, (uint32_t)n);
	} else if (!strncmp(eq + 1, "f32:", 4)) {
		float f = strtof(v, &end);

		if (*end || !*v)
			goto bad;
		kv_f32(key, f);
	} else if (!strncmp(eq + 1, "bool:", 5) && (!strcmp(v, "0") || !strcmp(v, "1"))) {
		kv_bool(key, *v == '1');
	} else if (!strncmp(eq + 1, "str:", 4)) {
		kv_str(key, v);
	} else {
		goto bad;
	}
	return 0;
bad:
	fprintf(stderr, "kva-mkmodel: --meta %s: want KEY=u32:N, f32:F, bool:0|1 or str:S\n", arg);
	return -1;
}

static int build_spm(struct vocab *v, uint32_t target, uint64_t seed)
{
	const char *c = mkmodel_corpus;
	struct word *w = NULL;
	int nw = 0;
	char piece[8];
	uint32_t i;

	vocab_add(v, "<unk>", 0, 2);
	vocab_add(v, "<s>", 0, 3);
	vocab_add(v, "</s>", 0, 3);
	for (i = 0; i < 256; i++) {
		snprintf(piece, sizeof(piece), "<0x%02X>", i);
		vocab_add(v, piece, 0, 6);
	}
	/* words: split at spaces, each with its U+2581 prefix, as characters */
	while (*c) {
		char **syms = NULL;
		int n = 0;

		while (*c == ' ')
			c++;
		if (!*c)
			break;
		syms = xrealloc(syms, sizeof(char *));
		syms[n++] = strdup("\xe2\x96\x81");
		while (*c && *c != ' ') {
			size_t l = u8len((unsigned char)*c);
			char *s = xrealloc(NULL, l + 1);
			memcpy(s, c, l);
			s[l] = 0;
			c += l;
			syms = xrealloc(syms, (n + 1) * sizeof(char *));
			syms[n++] = s;
		}
		add_word(&w, &nw, syms, n);
	}
	/* every character of the corpus is a piece, except a few held back
	 * so that byte fallback is exercised on text the corpus contains */
	for (i = 0; i < (uint32_t)nw; i++) {
		int j;
		for (j = 0; j < w[i].n; j++)
			if (strcmp(w[i].sym[j], "\xc3\x9f") && strcmp(w[i].sym[j], "\t"))
				vocab_add(v, w[i].sym[j], -1e5f, 1);
	}
	/* above every learnt merge: the pieces always form where they can */
	for (i = 0; i < (uint32_t)n_extra; i++)
		vocab_add(v, extra_tokens[i], 1.0f, 1);
	if (v->n > target) {
		fprintf(stderr, "kva-mkmodel: vocab %u too small for the %u base pieces\n",
			target, v->n);
		free_words(w, nw);
		return -1;
	}
	learn(v, w, nw, target, 0);
	free_words(w, nw);
	filler(v, target, seed, 0);
	return 0;
}

static int bpe_cls(unsigned char c)
{
	if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return 0;
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
	if (c >= 0x80) return 1;
	if (c >= '0' && c <= '9') return 2;
	return 3;
}

static size_t byte_str(unsigned char b, char *out)
{
	static int init;
	static uint16_t cp[256];
	uint32_t x;

	if (!init) {
		uint32_t i, extra = 0;
		for (i = 0; i < 256; i++) {
			int pr = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
			cp[i] = (uint16_t)(pr ? i : 256 + extra++);
		}
		init = 1;
	}
	x = cp[b];
	if (x < 0x80) {
		out[0] = (char)x;
		out[1] = 0;
		return 1;
	}
	out[0] = (char)(0xc0 | (x >> 6));
	out[1] = (char)(0x80 | (x & 0x3f));
	out[2] = 0;
	return 2;
}

static int build_bpe(struct vocab *v, uint32_t target, uint64_t seed)
{
	const unsigned char *c = (const unsigned char *)mkmodel_corpus;
	struct word *w = NULL;
	int nw = 0;
	char s[4];
	uint32_t i;

	for (i = 0; i < 256; i++) {
		byte_str((unsigned char)i, s);
		vocab_add(v, s, 0, 1);
	}
	/* words: optional leading space + a run of one character class */
	while (*c) {
		const unsigned char *st = c;
		char **syms = NULL;
		int n = 0, k;

		if (*c == ' ' && c[1] && bpe_cls(c[1]))
			c++;
		k = bpe_cls(*c);
		c++;
		while (*c && k && bpe_cls(*c) == k)
			c++;
		for (; st < c; st++) {
			byte_str(*st, s);
			syms = xrealloc(syms, (n + 1) * sizeof(char *));
			syms[n++] = strdup(s);
		}
		add_word(&w, &nw, syms, n);
	}
	if (target < 258 + 8) {
		fprintf(stderr, "kva-mkmodel: vocab %u too small for byte-level BPE\n", target);
		free_words(w, nw);
		return -1;
	}
	learn(v, w, nw, target - 2, 1);
	free_words(w, nw);
	vocab_add(v, "<|begin_of_text|>", 0, 3);
	vocab_add(v, "<|end_of_text|>", 0, 3);
	filler(v, target, seed, 1);
	return 0;
}

/* ---- quantisers -----------------------------------------------------
 * Each writes one block of its type (GGUF's layout; quant.c and
 * Documentation/engine.md describe them) from x: a plain rounding to the
 * block's grid, not llama.cpp's search for the best scales (any valid
 * encoding of a random weight serves the tests and the benchmark). */

static void put_f16(uint8_t *p, float v)
{
	uint16_t h = kve_f32_to_f16(v);

	memcpy(p, &h, 2);
}

static float got_f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return kve_f16_to_f32(h);
}

static int clampi(float v, int lo, int hi)
{
	int q = (int)lrintf(v);

	return q < lo ? lo : q > hi ? hi : q;
}

/* the value of largest magnitude, sign kept */
static float signed_max(const float *x, int n)
{
	float m = 0;
	int i;

	for (i = 0; i < n; i++)
		if (fabsf(x[i]) > fabsf(m))
			m = x[i];
	return m;
}

/* Q4_0 / Q5_0: d maps the largest magnitude to the grid's end (-8 / -16),
 * q = round(x / d) + 8 (16); Q4_1 / Q5_1: m = min, d = (max - min) / 15
 * (31), q = round((x - m) / d) */
static void quant32(uint32_t type, const float *x, uint8_t *o)
{
	int five = type == GGML_Q5_0 || type == GGML_Q5_1;
	int affine = type == GGML_Q4_1 || type == GGML_Q5_1;
	int top = five ? 31 : 15, q[32], i;
	float d, m = 0, id;
	uint32_t qh = 0;

	if (affine) {
		float mx = x[0];

		m = x[0];
		for (i = 1; i < 32; i++) {
			m = fminf(m, x[i]);
			mx = fmaxf(mx, x[i]);
		}
		d = (mx - m) / (float)top;
		put_f16(o, d);
		put_f16(o + 2, m);
		d = got_f16(o);
		m = got_f16(o + 2);
		id = d ? 1.0f / d : 0.0f;
		for (i = 0; i < 32; i++)
			q[i] = clampi((x[i] - m) * id, 0, top);
	} else {
		d = signed_max(x, 32) / (five ? -16.0f : -8.0f);
		put_f16(o, d);
		d = got_f16(o);
		id = d ? 1.0f / d : 0.0f;
		for (i = 0; i < 32; i++)
			q[i] = clampi(x[i] * id + (five ? 16.0f : 8.0f), 0, top);
	}
	o += affine ? 4 : 2;
	if (five) {
		for (i = 0; i < 32; i++)
			qh |= (uint32_t)(q[i] >> 4) << i;
		memcpy(o, &qh, 4);
		o += 4;
	}
	for (i = 0; i < 16; i++)
		o[i] = (uint8_t)((q[i] & 0xF) | (q[i + 16] & 0xF) << 4);
}

/* Q4_K / Q5_K: per sub-block of 32 a scale (max - min) / 15 (31) and a
 * minimum -min (min <= 0), both as 6-bit multiples of the block's d and
 * dmin; q = round((x + dmin * m) / (d * sc)) */
static void quant_k45(uint32_t type, const float *x, uint8_t *o)
{
	int five = type == GGML_Q5_K, top = five ? 31 : 15, j, i;
	float scale[8], mins[8], maxs = 0, maxm = 0, d, dmin;
	uint8_t sc[8], mn[8], *qs = o + (five ? 48 : 16), *qh = o + 16;

	for (j = 0; j < 8; j++) {
		float lo = 0, hi = x[32 * j];

		for (i = 0; i < 32; i++) {
			lo = fminf(lo, x[32 * j + i]);
			hi = fmaxf(hi, x[32 * j + i]);
		}
		scale[j] = (hi - lo) / (float)top;
		mins[j] = -lo;
		maxs = fmaxf(maxs, scale[j]);
		maxm = fmaxf(maxm, mins[j]);
	}
	put_f16(o, maxs / 63.0f);
	put_f16(o + 2, maxm / 63.0f);
	d = got_f16(o);
	dmin = got_f16(o + 2);
	for (j = 0; j < 8; j++) {
		sc[j] = (uint8_t)clampi(d ? scale[j] / d : 0, 0, 63);
		mn[j] = (uint8_t)clampi(dmin ? mins[j] / dmin : 0, 0, 63);
	}
	for (j = 0; j < 4; j++) {	/* the 12-byte packing (quant.c) */
		o[4 + j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
		o[8 + j] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
		o[12 + j] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
	}
	memset(qs, 0, 128);
	if (five)
		memset(qh, 0, 32);
	for (j = 0; j < 8; j++) {
		float ds = d * (float)sc[j], id = ds ? 1.0f / ds : 0.0f, mm = dmin * (float)mn[j];

		for (i = 0; i < 32; i++) {
			int q = clampi((x[32 * j + i] + mm) * id, 0, top);

			qs[32 * (j / 2) + i] |= (uint8_t)((q & 0xF) << (j & 1 ? 4 : 0));
			if (five)
				qh[i] |= (uint8_t)((q >> 4) << j);
		}
	}
}

/* 32 values to the nibbles of IQ4_NL's table at scale d (16 bytes, value
 * i low in byte i, i + 16 high): each to the nearest entry (the first of
 * two as near) */
static void nl_nibbles(const float *x, float d, uint8_t *qs)
{
	float id = d ? 1.0f / d : 0.0f;
	int i, k, q[32];

	for (i = 0; i < 32; i++) {
		float v = x[i] * id, best = INFINITY;

		for (q[i] = 0, k = 0; k < 16; k++) {
			float e = fabsf(v - (float)ggml_iq4nl_value((unsigned)k));

			if (e < best) {
				best = e;
				q[i] = k;
			}
		}
	}
	for (i = 0; i < 16; i++)
		qs[i] = (uint8_t)(q[i] | q[i + 16] << 4);
}

/* IQ4_NL: d maps the largest magnitude to the table's -127 */
static void quant_iq4nl(const float *x, uint8_t *o)
{
	put_f16(o, signed_max(x, 32) / -127.0f);
	nl_nibbles(x, got_f16(o), o + 2);
}

/* IQ4_XS: each 32 values' scale as IQ4_NL's, then as a 6-bit signed
 * multiple ls - 32 (-32..31) of the block's d, the largest scale to -32;
 * ls's low 4 bits in scales_l (two a byte), its top 2 in scales_h */
static void quant_iq4xs(const float *x, uint8_t *o)
{
	float s[8], smax = 0, d, id;
	uint16_t h = 0;
	int j;

	for (j = 0; j < 8; j++) {
		s[j] = signed_max(x + 32 * j, 32) / -127.0f;
		if (fabsf(s[j]) > fabsf(smax))
			smax = s[j];
	}
	put_f16(o, smax / -32.0f);
	d = got_f16(o);
	id = d ? 1.0f / d : 0.0f;
	memset(o + 2, 0, 6);
	for (j = 0; j < 8; j++) {
		int l = clampi(s[j] * id, -32, 31);

		o[4 + j / 2] |= (uint8_t)(((l + 32) & 0xF) << 4 * (j % 2));
		h |= (uint16_t)(((l + 32) >> 4) << 2 * j);
		nl_nibbles(x + 32 * j, d * (float)l, o + 8 + 16 * j);
	}
	memcpy(o + 2, &h, 2);
}

/* Q3_K: per 16 values a scale that maps the largest magnitude to -4, as
 * a 6-bit signed multiple (-32..31) of the block's d (the largest scale
 * to -32); q = round(x / (d * sc)), -4..3, stored as q + 4: its low 2
 * bits in qs, its third in hmask (quant.c's layout) */
static void quant_q3k(const float *x, uint8_t *o)
{
	float scale[16], big = 0, d;
	uint8_t *hm = o, *qs = o + 32, *s = o + 96;
	int g, i, sc[16];

	for (g = 0; g < 16; g++) {
		scale[g] = signed_max(x + 16 * g, 16) / -4.0f;
		if (fabsf(scale[g]) > fabsf(big))
			big = scale[g];
	}
	put_f16(o + 108, big / -32.0f);
	d = got_f16(o + 108);
	memset(o, 0, 108);
	for (g = 0; g < 16; g++) {
		float ds;

		sc[g] = clampi(d ? scale[g] / d : 0, -32, 31);
		ds = d * (float)sc[g];
		for (i = 0; i < 16; i++) {
			int v = 16 * g + i, q = clampi(ds ? x[v] / ds : 0, -4, 3) + 4;
			int n = v / 128, j = v % 128 / 32, l = v % 32;

			qs[32 * n + l] |= (uint8_t)((q & 3) << (2 * j));
			hm[l] |= (uint8_t)((q >> 2) << (4 * n + j));
		}
	}
	for (g = 0; g < 16; g++) {
		int u = sc[g] + 32;

		s[g % 8] |= (uint8_t)((u & 0xF) << (g < 8 ? 0 : 4));
		s[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
	}
}

/* Q2_K: per 16 values a scale (max - min) / 3 and a minimum -min (min <=
 * 0), both as 4-bit multiples of the block's d and dmin (scale in the low
 * nibble of its byte, minimum in the high); q = round((x + dmin * m) /
 * (d * sc)), value 128n + 32j + l in bits 2j, 2j + 1 of qs[32n + l] */
static void quant_q2k(const float *x, uint8_t *o)
{
	float scale[16], mins[16], maxs = 0, maxm = 0, d, dmin;
	uint8_t *qs = o + 16;
	int g, i, sc[16], mn[16];

	for (g = 0; g < 16; g++) {
		float lo = 0, hi = x[16 * g];

		for (i = 0; i < 16; i++) {
			lo = fminf(lo, x[16 * g + i]);
			hi = fmaxf(hi, x[16 * g + i]);
		}
		scale[g] = (hi - lo) / 3.0f;
		mins[g] = -lo;
		maxs = fmaxf(maxs, scale[g]);
		maxm = fmaxf(maxm, mins[g]);
	}
	put_f16(o + 80, maxs / 15.0f);
	put_f16(o + 82, maxm / 15.0f);
	d = got_f16(o + 80);
	dmin = got_f16(o + 82);
	memset(qs, 0, 64);
	for (g = 0; g < 16; g++) {
		float ds, mm;

		sc[g] = clampi(d ? scale[g] / d : 0, 0, 15);
		mn[g] = clampi(dmin ? mins[g] / dmin : 0, 0, 15);
		o[g] = (uint8_t)(sc[g] | mn[g] << 4);
		ds = d * (float)sc[g];
		mm = dmin * (float)mn[g];
		for (i = 0; i < 16; i++) {
			int v = 16 * g + i, q = clampi(ds ? (x[v] + mm) / ds : 0, 0, 3);

			qs[32 * (v / 128) + v % 32] |= (uint8_t)(q << (2 * (v % 128 / 32)));
		}
	}
}

/* Q6_K: per 16 values a scale amax / 31, as a signed 8-bit multiple of
 * the block's d; q = round(x / (d * sc)) + 32 */
static void quant_q6k(const float *x, uint8_t *o)
{
	float scale[16], amax = 0, d;
	int8_t sc[16];
	int g, i, n, l;
	uint8_t q[256];

	for (g = 0; g < 16; g++) {
		scale[g] = signed_max(x + 16 * g, 16) / -32.0f;
		amax = fmaxf(amax, fabsf(scale[g]));
	}
	put_f16(o + 208, amax / 127.0f);
	d = got_f16(o + 208);
	for (g = 0; g < 16; g++) {
		float ds;

		sc[g] = (int8_t)clampi(d ? scale[g] / d : 0, -128, 127);
		o[192 + g] = (uint8_t)sc[g];
		ds = d * (float)sc[g];
		for (i = 0; i < 16; i++)
			q[16 * g + i] = (uint8_t)clampi(ds ? x[16 * g + i] / ds + 32 : 32, 0, 63);
	}
	for (n = 0; n < 2; n++) {	/* the layout of quant.c's Q6_K */
		uint8_t *ql = o + 64 * n, *qh = o + 128 + 32 * n;
		const uint8_t *v = q + 128 * n;

		for (l = 0; l < 32; l++) {
			ql[l] = (uint8_t)((v[l] & 0xF) | (v[l + 64] & 0xF) << 4);
			ql[l + 32] = (uint8_t)((v[l + 32] & 0xF) | (v[l + 96] & 0xF) << 4);
			qh[l] = (uint8_t)((v[l] >> 4) | (v[l + 32] >> 4) << 2 |
					  (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
		}
	}
}

/* round to nearest even, NaN kept a NaN */
static uint16_t to_bf16(float f)
{
	uint32_t b;

	memcpy(&b, &f, 4);
	if ((b & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((b >> 16) | 0x40);
	return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

/* n values of x (a row, n a multiple of the block) as type into o;
 * returns the bytes written */
static size_t quant_row(uint32_t type, const float *x, uint64_t n, uint8_t *o)
{
	uint64_t i, bk = ggml_blck_size(type);
	size_t bb = ggml_blck_bytes(type), w = 0;

	for (i = 0; i < n; i += bk, w += bb) {
		uint8_t *p = o + w;

		switch (type) {
		case GGML_F32: memcpy(p, x + i, 4); break;
		case GGML_F16: put_f16(p, x[i]); break;
		case GGML_BF16: {
			uint16_t h = to_bf16(x[i]);
			memcpy(p, &h, 2);
			break;
		}
		case GGML_Q8_0: {
			float amax = 0, d, id;
			int j;

			for (j = 0; j < QK8_0; j++)
				amax = fmaxf(amax, fabsf(x[i + j]));
			d = amax / 127.0f;
			id = d ? 1.0f / d : 0.0f;
			put_f16(p, d);
			for (j = 0; j < QK8_0; j++)
				p[2 + j] = (uint8_t)(int8_t)roundf(x[i + j] * id);
			break;
		}
		case GGML_Q4_K: case GGML_Q5_K: quant_k45(type, x + i, p); break;
		case GGML_Q3_K: quant_q3k(x + i, p); break;
		case GGML_Q2_K: quant_q2k(x + i, p); break;
		case GGML_IQ4_NL: quant_iq4nl(x + i, p); break;
		case GGML_IQ4_XS: quant_iq4xs(x + i, p); break;
		case GGML_Q6_K: quant_q6k(x + i, p); break;
		default: quant32(type, x + i, p); break;
		}
	}
	return w;
}

/* ---- tensor types: --type and the mixes ------------------------------ */

enum mix { MIX_NONE, MIX_Q2_K, MIX_Q3_K_M, MIX_Q4_K_M, MIX_Q5_K_M };

/* The type a tensor of `cols` columns gets when `want` does not divide
 * them: llama.cpp's quantiser's fallbacks */
static uint32_t fallback(uint32_t want, uint64_t cols)
{
	if (cols % ggml_blck_size(want) == 0)
		return want;
	if (want == GGML_Q2_K || want == GGML_Q3_K)
		want = GGML_Q4_0;
	else if (want == GGML_Q4_K)
		want = GGML_Q5_0;
	else if (want == GGML_Q5_K)
		want = GGML_Q5_1;
	else if (want == GGML_Q6_K)
		want = GGML_Q8_0;
	else if (want == GGML_IQ4_XS)
		want = GGML_IQ4_NL;
	return cols % ggml_blck_size(want) ? GGML_F16 : want;
}

/* llama.cpp's "use more bits" layers of the K-mixes: the first and last
 * eighth, and every third between */
static int more_bits(uint32_t i, uint32_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || ((int)i - (int)(n / 8)) % 3 == 2;
}

enum role { R_EMBD, R_OUTPUT, R_ATTN_V, R_ATTN_OUT, R_FFN_DOWN, R_OTHER };

/* As llama.cpp assigns them for Q4_K_M / Q5_K_M (non-MoE models): the
 * output head (or a tied embedding) Q6_K (Q8_0 if 256 does not divide
 * it), attn_v and ffn_down of the more_bits layers Q6_K, every other
 * matrix the base type; for Q3_K_M (not Falcon) the same head, attn_v
 * Q5_K in layers 0-1 and Q4_K after, ffn_down Q5_K in the first sixteenth
 * of the layers and Q4_K after, attn_output Q4_K; for Q2_K the same head,
 * attn_v Q3_K (Q4_K where 4 or more query heads share a KV head),
 * attn_output and ffn_down Q3_K, the rest (the token embedding too) Q2_K;
 * then the fallbacks */
static uint32_t tensor_type(uint32_t base, enum mix mix, enum role role, uint32_t layer,
			    uint32_t layers, int tied, uint32_t gqa, uint64_t cols)
{
	if (mix == MIX_NONE)
		return fallback(base, cols);
	if (role == R_OUTPUT || (role == R_EMBD && tied))
		return cols % QK_K ? GGML_Q8_0 : GGML_Q6_K;
	if (mix == MIX_Q2_K) {	/* attn_v Q3_K (Q4_K at a GQA of 4 or more) */
		if (role == R_ATTN_V)
			return fallback(gqa >= 4 ? GGML_Q4_K : GGML_Q3_K, cols);
		if (role == R_FFN_DOWN || role == R_ATTN_OUT)
			return fallback(GGML_Q3_K, cols);
		return fallback(base, cols);
	}
	if (mix == MIX_Q3_K_M) {	/* attn_v Q5_K in 2 layers, ffn_down in n/16 */
		if (role == R_ATTN_V)
			return fallback(layer < 2 ? GGML_Q5_K : GGML_Q4_K, cols);
		if (role == R_FFN_DOWN)
			return fallback(layer < layers / 16 ? GGML_Q5_K : GGML_Q4_K, cols);
		if (role == R_ATTN_OUT)
			return fallback(GGML_Q4_K, cols);
		return fallback(base, cols);
	}
	if ((role == R_ATTN_V || role == R_FFN_DOWN) && more_bits(layer, layers))
		return fallback(GGML_Q6_K, cols);
	return fallback(base, cols);
}

/* ---- tensors -------------------------------------------------------- */

enum init { INIT_NORM, INIT_MAT, INIT_EMBD, INIT_BIAS, INIT_ROPE };

struct tensor {
	char name[64];
	uint64_t ne[2];
	uint32_t nd, type;
	enum init init;
	uint64_t size, offset;
};

static uint64_t tsize(uint32_t type, uint64_t n)
{
	return n / ggml_blck_size(type) * ggml_blck_bytes(type);
}

/* llama 3.1's rope frequency divisors for pair i of d rotated dims
 * (factor 8, low/high frequency factors 1 and 4, original context 8192):
 * 1 for short wavelengths, the factor for long ones, a blend between */
static float llama3_freq(uint32_t i, uint32_t d, float base)
{
	const double factor = 8, lo = 1, hi = 4, orig = 8192, pi = 3.14159265358979323846;
	double freq = pow(base, -2.0 * i / d), wavelen = 2 * pi / freq, smooth;

	if (wavelen < orig / hi)
		return 1.0f;
	if (wavelen > orig / lo)
		return (float)factor;
	smooth = (orig / wavelen - lo) / (hi - lo);
	return (float)(1.0 / ((1 - smooth) / factor + smooth));
}

static float rope_base_g = 10000.0f;
static uint32_t rope_dims_g;

static int write_tensor(FILE *f, const struct tensor *t, uint64_t seed, uint32_t idx)
{
	uint64_t s = seed * 0x100000001b3ull + idx * 0x9e3779b97f4a7c15ull + 1;
	uint64_t row, cols = t->ne[0], rows = t->nd > 1 ? t->ne[1] : 1;
	float scale = t->init == INIT_MAT ? sqrtf(3.0f / (float)cols) : 1.0f;
	float *x = xrealloc(NULL, cols * sizeof(float));
	uint8_t *o = xrealloc(NULL, cols * 4);

	for (row = 0; row < rows; row++) {
		uint64_t i;
		size_t n;

		for (i = 0; i < cols; i++) {
			float u = (float)(rng_next(&s) >> 40) / 16777216.0f * 2.0f - 1.0f;
			x[i] = t->init == INIT_NORM ? 1.0f + 0.2f * u :
			       t->init == INIT_ROPE ? llama3_freq((uint32_t)i, rope_dims_g,
								  rope_base_g) :
			       u * scale;
		}
		n = quant_row(t->type, x, cols, o);
		if (fwrite(o, 1, n, f) != n) {
			free(x);
			free(o);
			return -1;
		}
	}
	free(x);
	free(o);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dim", 1, 0, 'd' }, { "layers", 1, 0, 'l' }, { "heads", 1, 0, 'h' },
		{ "kv-heads", 1, 0, 'k' }, { "ffn", 1, 0, 'f' }, { "vocab", 1, 0, 'v' },
		{ "ctx", 1, 0, 'c' }, { "type", 1, 0, 't' }, { "tokenizer", 1, 0, 'z' },
		{ "rope-base", 1, 0, 'r' }, { "tied", 0, 0, 'T' }, { "seed", 1, 0, 's' },
		{ "out", 1, 0, 'o' }, { "help", 0, 0, 'H' }, { "pre", 1, 0, 'p' },
		{ "arch", 1, 0, 'A' }, { "rope-dims", 1, 0, 'R' }, { "unk-id", 1, 0, 'U' },
		{ "token", 1, 0, 'K' }, { "head-dim", 1, 0, 'D' },
		{ "rope-scale", 1, 0, 'S' }, { "rope-freqs", 0, 0, 'F' }, { "meta", 1, 0, 'M' },
		{ "chat-template", 1, 0, 'C' },
		{ 0, 0, 0, 0 },
	};
	uint32_t dim = 288, layers = 6, heads = 6, kvh = 0, ffn = 768, nvocab = 512;
	uint32_t ctx = 256, type = GGML_F32, rope_dims = 0, head_dim = 0, i, l, ftype = 0;
	enum mix mix = MIX_NONE;
	float rope_scale = 0;
	int rope_freqs = 0, qwen3 = 0;
	const char *type_name = "f32";
	long unk = -1;	/* -1: the tokenizer's default */
	uint64_t seed = 1, off = 0;
	float rope_base = 10000.0f;
	int tied = 0, bpe = 0, tok_set = 0, qwen2 = 0, c;
	const char *out = NULL, *pre = NULL, *arch, *tmpl_path = NULL;
	char key[96];
	struct vocab v = { 0 };
	struct tensor *ts;
	uint32_t nt = 0;
	struct buf hdr = { 0 };
	FILE *f;

	while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dim = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'l': layers = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'h': heads = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'k': kvh = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'f': ffn = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'v': nvocab = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'c': ctx = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'r': rope_base = strtof(optarg, NULL); break;
		case 'R': rope_dims = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'D': head_dim = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'S': rope_scale = strtof(optarg, NULL); break;
		case 'F': rope_freqs = 1; break;
		case 'M':
			if (n_meta_extra == MAX_EXTRA) {
				fprintf(stderr, "kva-mkmodel: --meta: at most %d\n", MAX_EXTRA);
				return 2;
			}
			extra_meta[n_meta_extra++] = optarg;
			break;
		case 'T': tied = 1; break;
		case 'U': unk = strtol(optarg, NULL, 0); break;
		case 'K':
			if (n_extra == MAX_EXTRA || !*optarg || strlen(optarg) > 64) {
				fprintf(stderr, "kva-mkmodel: --token: at most %d, each 1-64 bytes\n",
					MAX_EXTRA);
				return 2;
			}
			extra_tokens[n_extra++] = optarg;
			break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'C': tmpl_path = optarg; break;
		case 'o': out = optarg; break;
		case 't': {
			/* name, base type, mix, general.file_type (llama.cpp's) */
			static const struct { const char *n; uint32_t t; enum mix m; uint32_t ft; } tt[] = {
				{ "f32", GGML_F32, MIX_NONE, 0 }, { "f16", GGML_F16, MIX_NONE, 1 },
				{ "q4_0", GGML_Q4_0, MIX_NONE, 2 }, { "q4_1", GGML_Q4_1, MIX_NONE, 3 },
				{ "q8_0", GGML_Q8_0, MIX_NONE, 7 }, { "q5_0", GGML_Q5_0, MIX_NONE, 8 },
				{ "q5_1", GGML_Q5_1, MIX_NONE, 9 }, { "iq4_nl", GGML_IQ4_NL, MIX_NONE, 25 },
				{ "iq4_xs", GGML_IQ4_XS, MIX_NONE, 30 },
				{ "q2_k", GGML_Q2_K, MIX_Q2_K, 10 }, { "q3_k", GGML_Q3_K, MIX_NONE, 11 },
				{ "q3_k_m", GGML_Q3_K, MIX_Q3_K_M, 12 }, { "q4_k", GGML_Q4_K, MIX_NONE, 14 },
				{ "q4_k_m", GGML_Q4_K, MIX_Q4_K_M, 15 }, { "q5_k", GGML_Q5_K, MIX_NONE, 16 },
				{ "q5_k_m", GGML_Q5_K, MIX_Q5_K_M, 17 }, { "q6_k", GGML_Q6_K, MIX_NONE, 18 },
				{ "bf16", GGML_BF16, MIX_NONE, 32 },
			};
			unsigned k;

			for (k = 0; k < sizeof(tt) / sizeof(tt[0]) && strcmp(optarg, tt[k].n); k++)
				;
			if (k == sizeof(tt) / sizeof(tt[0])) {
				fprintf(stderr, "kva-mkmodel: unknown type %s\n", optarg);
				return 2;
			}
			type = tt[k].t;
			mix = tt[k].m;
			ftype = tt[k].ft;
			type_name = tt[k].n;
			break;
		}
		case 'z':
			if (!strcmp(optarg, "spm")) bpe = 0;
			else if (!strcmp(optarg, "bpe")) bpe = 1;
			else { fprintf(stderr, "kva-mkmodel: unknown tokenizer %s\n", optarg); return 2; }
			tok_set = 1;
			break;
		case 'A':
			if (!strcmp(optarg, "llama")) qwen2 = qwen3 = 0;
			else if (!strcmp(optarg, "qwen2")) qwen2 = 1, qwen3 = 0;
			else if (!strcmp(optarg, "qwen3")) qwen3 = 1, qwen2 = 0;
			else { fprintf(stderr, "kva-mkmodel: unknown architecture %s (llama, qwen2, qwen3)\n", optarg); return 2; }
			break;
		case 'p':
			if (strcmp(optarg, "gpt2") && strcmp(optarg, "default") &&
			    strcmp(optarg, "llama-bpe") && strcmp(optarg, "qwen2")) {
				fprintf(stderr, "kva-mkmodel: unknown pre-tokenizer %s "
					"(gpt2, default, llama-bpe, qwen2)\n", optarg);
				return 2;
			}
			pre = optarg;
			break;
		case 'H': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!kvh)
		kvh = heads;
	if (!head_dim && heads && dim % heads == 0)
		head_dim = dim / heads;
	if (!out || !dim || !layers || !heads || !ffn || !ctx || heads % kvh ||
	    !head_dim || head_dim % 2 || nvocab > (1u << 22) ||
	    (rope_dims && (rope_dims % 2 || rope_dims > head_dim)) ||
	    unk < -1 || unk >= (long)nvocab || rope_scale < 0) {
		fprintf(stderr, "kva-mkmodel: bad or missing arguments\n%s", usage);
		return 2;
	}
	arch = qwen2 ? "qwen2" : qwen3 ? "qwen3" : "llama";
	if ((qwen2 || qwen3) && !tok_set)
		bpe = 1;
	if (pre && !bpe) {
		fprintf(stderr, "kva-mkmodel: --pre needs --tokenizer bpe\n");
		return 2;
	}
	if (n_extra && bpe) {
		fprintf(stderr, "kva-mkmodel: --token needs --tokenizer spm\n");
		return 2;
	}
	if (bpe && !pre)
		pre = qwen2 || qwen3 ? "qwen2" : "gpt2";
	rope_base_g = rope_base;
	rope_dims_g = rope_dims ? rope_dims : head_dim;

	v.set_mask = 1;
	while (v.set_mask < 2 * nvocab + 2)
		v.set_mask <<= 1;
	v.set = xrealloc(NULL, v.set_mask * sizeof(int32_t));
	memset(v.set, 0xff, v.set_mask * sizeof(int32_t));
	v.set_mask--;
	if ((bpe ? build_bpe : build_spm)(&v, nvocab, seed))
		return 1;

	/* metadata */
	kv_str("general.architecture", arch);
	kv_str("general.name", "kvarena-random");
	kv_u32("general.alignment", ALIGN);
	kv_u32("general.file_type", ftype);
#define AK(k) (snprintf(key, sizeof(key), "%s.%s", arch, k), key)
	kv_u32(AK("context_length"), ctx);
	kv_u32(AK("embedding_length"), dim);
	kv_u32(AK("block_count"), layers);
	kv_u32(AK("feed_forward_length"), ffn);
	kv_u32(AK("attention.head_count"), heads);
	kv_u32(AK("attention.head_count_kv"), kvh);
	kv_f32(AK("attention.layer_norm_rms_epsilon"), qwen2 || qwen3 ? 1e-6f : 1e-5f);
	if (head_dim != dim / heads || dim % heads) {
		kv_u32(AK("attention.key_length"), head_dim);
		kv_u32(AK("attention.value_length"), head_dim);
	}
	kv_f32(AK("rope.freq_base"), rope_base);
	/* qwen2/3 files leave it to the default, the head dim, unless partial */
	if (!(qwen2 || qwen3) || rope_dims)
		kv_u32(AK("rope.dimension_count"), rope_dims ? rope_dims : head_dim);
	if (rope_scale > 0) {
		kv_str(AK("rope.scaling.type"), "linear");
		kv_f32(AK("rope.scaling.factor"), rope_scale);
	}
	kv_u32(AK("vocab_size"), nvocab);
#undef AK
	kv_str("tokenizer.ggml.model", bpe ? "gpt2" : "llama");
	if (bpe)
		kv_str("tokenizer.ggml.pre", pre);
	kv_key("tokenizer.ggml.tokens", GGUF_ARR);
	put_u32(&meta, GGUF_STR);
	put_u64(&meta, v.n);
	for (i = 0; i < v.n; i++)
		put_str(&meta, v.tok[i], strlen(v.tok[i]));
	kv_key("tokenizer.ggml.scores", GGUF_ARR);
	put_u32(&meta, GGUF_F32);
	put_u64(&meta, v.n);
	put(&meta, v.score, v.n * 4);
	kv_key("tokenizer.ggml.token_type", GGUF_ARR);
	put_u32(&meta, GGUF_I32);
	put_u64(&meta, v.n);
	put(&meta, v.type, v.n * 4);
	if (bpe) {
		kv_key("tokenizer.ggml.merges", GGUF_ARR);
		put_u32(&meta, GGUF_STR);
		put_u64(&meta, v.n_merge);
		for (i = 0; i < v.n_merge; i++)
			put_str(&meta, v.merge[i], strlen(v.merge[i]));
	}
	if (bpe) {
		/* ids of the two specials learnt last before the fillers */
		uint32_t b = 0, e = 0;
		for (i = 0; i < v.n; i++) {
			if (!strcmp(v.tok[i], "<|begin_of_text|>")) b = i;
			if (!strcmp(v.tok[i], "<|end_of_text|>")) e = i;
		}
		kv_u32("tokenizer.ggml.bos_token_id", b);
		kv_u32("tokenizer.ggml.eos_token_id", e);
		if (unk >= 0)
			kv_u32("tokenizer.ggml.unknown_token_id", (uint32_t)unk);
		kv_bool("tokenizer.ggml.add_bos_token", 1);
	} else {
		kv_u32("tokenizer.ggml.bos_token_id", 1);
		kv_u32("tokenizer.ggml.eos_token_id", 2);
		kv_u32("tokenizer.ggml.unknown_token_id", unk >= 0 ? (uint32_t)unk : 0);
		kv_bool("tokenizer.ggml.add_bos_token", 1);
		kv_bool("tokenizer.ggml.add_eos_token", 0);
	}
	if (tmpl_path) {
		/* a template is text: up to 1 MiB, no NUL */
		static char tmpl[1 << 20];
		FILE *tf = fopen(tmpl_path, "rb");
		size_t tn = tf ? fread(tmpl, 1, sizeof(tmpl) - 1, tf) : 0;

		if (!tf || ferror(tf) || !feof(tf) || !tn || memchr(tmpl, 0, tn)) {
			fprintf(stderr, "kva-mkmodel: --chat-template %s: a text file of 1 byte to 1 MiB\n",
				tmpl_path);
			if (tf)
				fclose(tf);
			return 2;
		}
		fclose(tf);
		tmpl[tn] = 0;
		kv_str("tokenizer.chat_template", tmpl);
	}

	for (i = 0; i < (uint32_t)n_meta_extra; i++)
		if (put_meta(extra_meta[i]))
			return 2;

	/* tensors */
	ts = xrealloc(NULL, (4 + 14 * (size_t)layers) * sizeof(*ts));
#define T2(nm, c0, c1, ty, in) do { struct tensor *t = &ts[nt++]; \
		memset(t, 0, sizeof(*t)); snprintf(t->name, sizeof(t->name), "%s", nm); \
		t->ne[0] = c0; t->ne[1] = c1; t->nd = (c1) != 0 ? 2 : 1; t->type = ty; \
		t->init = in; } while (0)
#define TY(role, c0) tensor_type(type, mix, role, l, layers, tied, heads / kvh, c0)
	l = 0;
	T2("token_embd.weight", dim, nvocab, TY(R_EMBD, dim), INIT_EMBD);
	T2("output_norm.weight", dim, 0, GGML_F32, INIT_NORM);
	if (!tied)
		T2("output.weight", dim, nvocab, TY(R_OUTPUT, dim), INIT_MAT);
	if (rope_freqs)
		T2("rope_freqs.weight", rope_dims_g / 2, 0, GGML_F32, INIT_ROPE);
	for (l = 0; l < layers; l++) {
		char nm[64];
		uint32_t hd = head_dim;
#define L2(sfx, c0, c1, ty, in) do { snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, sfx); \
		T2(nm, c0, c1, ty, in); } while (0)
		L2("attn_norm", dim, 0, GGML_F32, INIT_NORM);
		L2("attn_q", dim, heads * hd, TY(R_OTHER, dim), INIT_MAT);
		L2("attn_k", dim, kvh * hd, TY(R_OTHER, dim), INIT_MAT);
		L2("attn_v", dim, kvh * hd, TY(R_ATTN_V, dim), INIT_MAT);
		if (qwen3) {
			L2("attn_q_norm", hd, 0, GGML_F32, INIT_NORM);
			L2("attn_k_norm", hd, 0, GGML_F32, INIT_NORM);
		}
		if (qwen2) {
			static const char *const sfx[3] = { "attn_q", "attn_k", "attn_v" };
			int b;

			for (b = 0; b < 3; b++) {
				snprintf(nm, sizeof(nm), "blk.%u.%s.bias", l, sfx[b]);
				T2(nm, (b ? kvh : heads) * hd, 0, GGML_F32, INIT_BIAS);
			}
		}
		L2("attn_output", heads * hd, dim, TY(R_ATTN_OUT, heads * hd), INIT_MAT);
		L2("ffn_norm", dim, 0, GGML_F32, INIT_NORM);
		L2("ffn_gate", dim, ffn, TY(R_OTHER, dim), INIT_MAT);
		L2("ffn_up", dim, ffn, TY(R_OTHER, dim), INIT_MAT);
		L2("ffn_down", ffn, dim, TY(R_FFN_DOWN, ffn), INIT_MAT);
	}
#undef TY
	for (i = 0; i < nt; i++) {
		ts[i].size = tsize(ts[i].type, ts[i].ne[0] * (ts[i].nd > 1 ? ts[i].ne[1] : 1));
		ts[i].offset = off;
		off += (ts[i].size + ALIGN - 1) / ALIGN * ALIGN;
	}

	put(&hdr, "GGUF", 4);
	put_u32(&hdr, 3);
	put_u64(&hdr, nt);
	put_u64(&hdr, n_meta);
	put(&hdr, meta.p, meta.n);
	for (i = 0; i < nt; i++) {
		uint32_t d;
		put_str(&hdr, ts[i].name, strlen(ts[i].name));
		put_u32(&hdr, ts[i].nd);
		for (d = 0; d < ts[i].nd; d++)
			put_u64(&hdr, ts[i].ne[d]);
		put_u32(&hdr, ts[i].type);
		put_u64(&hdr, ts[i].offset);
	}
	while (hdr.n % ALIGN)
		put(&hdr, "", 1);

	f = fopen(out, "wb");
	if (!f) {
		fprintf(stderr, "kva-mkmodel: %s: %s\n", out, strerror(errno));
		return 1;
	}
	if (fwrite(hdr.p, 1, hdr.n, f) != hdr.n)
		goto werr;
	for (i = 0; i < nt; i++) {
		static const char zeros[ALIGN];
		uint64_t pad = (ALIGN - ts[i].size % ALIGN) % ALIGN;
		if (write_tensor(f, &ts[i], seed, i) || fwrite(zeros, 1, pad, f) != pad)
			goto werr;
	}
	if (fclose(f)) {
		f = NULL;
		goto werr;
	}
	printf("%s: %s dim %u layers %u heads %u/%u ffn %u vocab %u ctx %u %s %s%s%s, %.1f MB\n",
	       out, arch, dim, layers, heads, kvh, ffn, nvocab, ctx,
	       type_name,
	       bpe ? "bpe " : "spm", bpe ? pre : "", tied ? " tied" : "",
	       (double)(hdr.n + off) / 1e6);
	return 0;
werr:
	fprintf(stderr, "kva-mkmodel: writing %s failed\n", out);
	if (f)
		fclose(f);
	remove(out);
	return 1;
}
