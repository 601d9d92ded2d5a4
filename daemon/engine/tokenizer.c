// SPDX-License-Identifier: MIT
/*
 * tokenizer.c - text <-> token ids from the GGUF tokenizer metadata:
 *  - "llama": SentencePiece-style. Spaces become U+2581, a space is
 *    prepended, UTF-8 characters are merged pairwise, highest-scoring
 *    result first; pieces not in the vocabulary fall back to <0xXX> byte
 *    tokens.
 *  - "gpt2": byte-level BPE. A pre-tokenizer splits the text into words
 *    with the regular expression named by tokenizer.ggml.pre (GPT-2's,
 *    llama-3's or qwen2's, Unicode classes, matched by PCRE2); each word's
 *    bytes map to printable code points (GPT-2's table) and merges apply
 *    in rank order.
 * Special tokens (control and user-defined: a chat template's markers)
 * are their text only where the caller says the text may hold them
 * (kve_tokenize_spans); everywhere else no special token is produced.
 * Token strings are not copied: they point into the model's mapping, so the
 * tokenizer must not outlive the model. Owns no model weights.
 */
#include "engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

struct merge_ent {
	uint64_t key;		/* left id << 32 | right id; 0 = empty slot */
	uint32_t rank;
	int32_t result;
};

struct kve_tokenizer {
	enum kve_tok_kind kind;
	uint32_t n;
	struct gguf_str *tok;
	float *score;
	int32_t *type;
	int32_t *hash;		/* open addressing, -1 empty */
	uint32_t hmask;
	struct merge_ent *merges;
	uint32_t mmask;
	int32_t byte_tok[256];	/* SPM <0xXX> or BPE single byte-char token */
	uint16_t byte_cp[256];	/* BPE: byte -> code point */
	int16_t cp_byte[512];	/* BPE: code point -> byte, -1 none */
	int32_t bos, eos, unk;
	int add_bos;		/* BOS where the caller allows it (llama.cpp's add_special) */
	int add_space_prefix;	/* SPM: the dummy-prefix space (false: never) */
	int ignore_merges;	/* BPE: a word that is a token is that token */
	struct kve_pretok *pre;	/* BPE only */
	int32_t *spec;		/* special tokens with text, longest first */
	uint32_t n_spec;
	uint8_t spec_first[32];	/* bitmap: first bytes of their texts */
	uint8_t *shown;		/* control tokens whose text is shown */
};

/* A token that is a marker: never produced for plain text. */
static int is_special(const struct kve_tokenizer *t, int32_t id)
{
	return id >= 0 && (t->type[id] == TT_CONTROL || t->type[id] == TT_USER);
}

static uint32_t fnv(const char *p, size_t n)
{
	uint32_t h = 2166136261u;

	while (n--)
		h = (h ^ (unsigned char)*p++) * 16777619u;
	return h;
}

static int32_t lookup(const struct kve_tokenizer *t, const char *p, size_t n)
{
	uint32_t i = fnv(p, n) & t->hmask;

	for (;; i = (i + 1) & t->hmask) {
		int32_t id = t->hash[i];
		if (id < 0)
			return -1;
		if (t->tok[id].n == n && !memcmp(t->tok[id].p, p, n))
			return id;
	}
}

static uint64_t mix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

static const struct merge_ent *merge_find(const struct kve_tokenizer *t,
					  int32_t a, int32_t b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint32_t i;

	if (!t->merges)
		return NULL;
	for (i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
		if (!t->merges[i].key)
			return NULL;
		if (t->merges[i].key == key)
			return &t->merges[i];
	}
}

static size_t utf8_len(unsigned char c)
{
	if (c < 0x80) return 1;
	if ((c & 0xe0) == 0xc0) return 2;
	if ((c & 0xf0) == 0xe0) return 3;
	if ((c & 0xf8) == 0xf0) return 4;
	return 1;	/* stray continuation or invalid: one byte */
}

/* Length of the UTF-8 character at p (at most n), 1 when malformed. */
static size_t char_len(const char *p, size_t n)
{
	size_t l = utf8_len((unsigned char)p[0]), i;

	if (l > n)
		return 1;
	for (i = 1; i < l; i++)
		if (((unsigned char)p[i] & 0xc0) != 0x80)
			return 1;
	return l;
}

/* UTF-8 of a byte-level alphabet's code point: all are below U+0144 (the
 * bytes 0-255 and at most 68 more), so one or two bytes */
static size_t put_cp(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	o[0] = (char)(0xc0 | (cp >> 6));
	o[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

static void gpt2_byte_table(struct kve_tokenizer *t)
{
	uint32_t b, extra = 0;

	for (b = 0; b < 512; b++)
		t->cp_byte[b] = -1;
	for (b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
				(b >= 174);
		t->byte_cp[b] = (uint16_t)(printable ? b : 256 + extra++);
		t->cp_byte[t->byte_cp[b]] = (int16_t)b;
	}
}

/* ---- BPE pre-tokenizers ---------------------------------------------- */

/*
 * The word-splitting regular expressions of the HF tokenizers, by the name
 * GGUF gives them in tokenizer.ggml.pre. Matched with PCRE2 in UTF + UCP
 * mode, so \p{L}, \p{N} and \s are Unicode classes.
 */
#define PRE_CONTRACTIONS_CI \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
static const char pre_gpt2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
	"|\\s+(?!\\S)|\\s+";
static const char pre_llama3[] =
	PRE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Mistral's Tekken (Nemo, Ministral, Small 3): cased words kept whole */
static const char pre_tekken[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
	"|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
	"|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pre_qwen2[] =
	PRE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
	const char *name, *canon, *pattern;
} pre_table[] = {
	{ "gpt2", "gpt2", pre_gpt2 },
	{ "default", "gpt2", pre_gpt2 },
	{ "llama-bpe", "llama-bpe", pre_llama3 },
	{ "llama3", "llama-bpe", pre_llama3 },
	{ "llama-v3", "llama-bpe", pre_llama3 },
	{ "qwen2", "qwen2", pre_qwen2 },
	{ "tekken", "tekken", pre_tekken },
};

struct kve_pretok {
	const char *canon;
	pcre2_code *re;		/* shared by concurrent callers: read-only */
	pcre2_general_context *gc;	/* the match data's allocator: read-only */
};

/* A split's match data, and the interpreter's frames in it, come from the
 * engine's allocator, so they fail where the engine's allocations do
 * (test_oom reaches them) */
static void *pcre_alloc(size_t n, void *data)
{
	(void)data;
	return malloc(n);
}

static void pcre_free(void *q, void *data)
{
	(void)data;
	free(q);
}

void kve_pretok_free(struct kve_pretok *p)
{
	if (!p)
		return;
	pcre2_code_free(p->re);
	pcre2_general_context_free(p->gc);
	free(p);
}

struct kve_pretok *kve_pretok_create(const char *name, size_t len, char *err,
				     size_t errlen)
{
	struct kve_pretok *p;
	size_t i;
	int ec;
	PCRE2_SIZE eo;

	for (i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++)
		if (strlen(pre_table[i].name) == len &&
		    !memcmp(pre_table[i].name, name, len))
			break;
	if (i == sizeof(pre_table) / sizeof(pre_table[0])) {
		char shown[41];
		size_t k;

		/* the value comes from the file: show it printable */
		for (k = 0; k < len && k < sizeof(shown) - 1; k++)
			shown[k] = name[k] >= 0x20 && name[k] < 0x7f ? name[k] : '?';
		shown[k] = 0;
		snprintf(err, errlen,
			 "tokenizer: tokenizer.ggml.pre '%s'%s is not a supported pre-tokenizer "
			 "(gpt2, default, llama-bpe, llama3, llama-v3, qwen2, tekken)",
			 shown, len > k ? "..." : "");
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (p)
		p->gc = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
	if (!p || !p->gc) {
		snprintf(err, errlen, "tokenizer: out of memory");
		free(p);
		return NULL;
	}
	p->canon = pre_table[i].canon;
	p->re = pcre2_compile((PCRE2_SPTR)pre_table[i].pattern, PCRE2_ZERO_TERMINATED,
			      PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
	if (!p->re) {
		PCRE2_UCHAR msg[120];

		pcre2_get_error_message(ec, msg, sizeof(msg));
		snprintf(err, errlen, "tokenizer: pre-tokenizer %s: PCRE2 compile: %s at %zu",
			 p->canon, (const char *)msg, (size_t)eo);
		kve_pretok_free(p);
		return NULL;
	}
	/* without JIT support (or where executable memory is refused) the
	 * interpreter matches the same way, only slower */
	(void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);
	return p;
}

const char *kve_pretok_name(const struct kve_pretok *p)
{
	return p->canon;
}

int kve_pretok_jit(const struct kve_pretok *p)
{
	size_t sz = 0;

	return !pcre2_pattern_info(p->re, PCRE2_INFO_JITSIZE, &sz) && sz > 0;
}

/*
 * Length of the well-formed UTF-8 character at p (n > 0 bytes left), 0 if
 * ill-formed: RFC 3629, as PCRE2 checks it (no overlong forms, no
 * surrogates, nothing above U+10FFFF).
 */
static size_t utf8_strict_len(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;

	if (c < 0x80)
		return 1;
	if (c < 0xc2 || c > 0xf4)
		return 0;
	if (c < 0xe0)
		return n >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < 2 || p[1] < lo || p[1] > hi)
		return 0;
	if (c < 0xf0)
		return n >= 3 && (p[2] & 0xc0) == 0x80 ? 3 : 0;
	return n >= 4 && (p[2] & 0xc0) == 0x80 && (p[3] & 0xc0) == 0x80 ? 4 : 0;
}

/*
 * Ill-formed UTF-8. PCRE2 must not see it (with PCRE2_NO_UTF_CHECK that is
 * undefined behaviour; without, every match fails), so the regex runs on a
 * copy in which each byte that is not part of a well-formed character is
 * replaced by U+FFFD - as llama.cpp does before its pre-tokenizer, so the
 * byte splits like a symbol - and the words are cut from the original
 * text, keeping the bytes (a byte-level vocabulary encodes any byte).
 * Matched offsets are mapped back by walking both texts character by
 * character; matches end on character boundaries of the copy.
 */
struct pretok_map {
	const unsigned char *orig;
	size_t olen;
	size_t c_at, o_at;	/* a pair of corresponding offsets */
};

static size_t map_offset(struct pretok_map *m, size_t c_off)
{
	while (m->c_at < c_off && m->o_at < m->olen) {
		size_t l = utf8_strict_len(m->orig + m->o_at, m->olen - m->o_at);

		m->c_at += l ? l : 3;
		m->o_at += l ? l : 1;
	}
	return m->o_at;
}

int kve_pretok_split(const struct kve_pretok *p, const char *text, size_t len,
		     kve_word_fn fn, void *ctx)
{
	const unsigned char *u = (const unsigned char *)text;
	struct pretok_map map = { u, len, 0, 0 };
	pcre2_match_data *md;
	unsigned char *copy = NULL;
	const unsigned char *subj = u;
	size_t slen = len, i, l, gap = 0, from = 0, o_gap = 0;
	uint32_t opts = 0;
	int rc = 0;

	if (!len)
		return 0;
	for (i = 0; i < len && (l = utf8_strict_len(u + i, len - i)); i += l)
		;
	if (i < len) {
		size_t bad = 0;

		for (i = 0; i < len; i += l ? l : 1)
			if (!(l = utf8_strict_len(u + i, len - i)))
				bad++;
		if (bad > (SIZE_MAX - len) / 2)
			return -E2BIG;
		copy = malloc(len + 2 * bad);
		if (!copy)
			return -ENOMEM;
		for (i = 0, slen = 0; i < len; i += l ? l : 1) {
			l = utf8_strict_len(u + i, len - i);
			if (l) {
				memcpy(copy + slen, u + i, l);
				slen += l;
			} else {
				memcpy(copy + slen, "\xef\xbf\xbd", 3);
				slen += 3;
			}
		}
		subj = copy;
	}
	md = pcre2_match_data_create_from_pattern(p->re, p->gc);
	if (!md) {
		free(copy);
		return -ENOMEM;
	}
	/* gap: start of text not yet emitted; from: where to search next.
	 * The first match lets PCRE2 check the whole subject itself; later
	 * ones skip that (it would make the loop quadratic) */
	while (!rc && from < slen) {
		PCRE2_SIZE *ov;
		size_t s, e, os, oe;
		int m = pcre2_match(p->re, subj, slen, from, opts, md, NULL);

		if (m == PCRE2_ERROR_JIT_STACKLIMIT)	/* deep backtracking */
			m = pcre2_match(p->re, subj, slen, from, opts | PCRE2_NO_JIT, md, NULL);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			rc = m == PCRE2_ERROR_NOMEMORY || m == PCRE2_ERROR_HEAPLIMIT ? -ENOMEM :
			     m <= PCRE2_ERROR_UTF8_ERR1 && m >= PCRE2_ERROR_UTF8_ERR21 ? -EILSEQ :
			     -E2BIG;
			break;
		}
		opts = PCRE2_NO_UTF_CHECK;
		ov = pcre2_get_ovector_pointer(md);
		s = ov[0];
		e = ov[1];
		if (e <= s) {	/* empty match: step one character; it joins the gap */
			from = s + 1;
			while (from < slen && (subj[from] & 0xc0) == 0x80)
				from++;
			continue;
		}
		os = copy ? map_offset(&map, s) : s;
		oe = copy ? map_offset(&map, e) : e;
		if (s > gap)	/* text no alternative matched: a word of its own */
			rc = fn(ctx, text + o_gap, os - o_gap);
		if (!rc)
			rc = fn(ctx, text + os, oe - os);
		gap = from = e;
		o_gap = oe;
	}
	if (!rc && gap < slen)
		rc = fn(ctx, text + o_gap, len - o_gap);
	pcre2_match_data_free(md);
	free(copy);
	return rc;
}

void kve_tokenizer_free(struct kve_tokenizer *t)
{
	if (!t)
		return;
	free(t->tok);
	free(t->score);
	free(t->type);
	free(t->hash);
	free(t->merges);
	kve_pretok_free(t->pre);
	free(t->spec);
	free(t->shown);
	free(t);
}

struct spec_ent {
	uint64_t len;
	int32_t id;
};

static int spec_longer(const void *a, const void *b)
{
	const struct spec_ent *x = a, *y = b;

	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return x->id < y->id ? -1 : 1;
}

/* The special tokens with text, longest first (the order llama.cpp
 * partitions text in), and the shown-control bitmap. */
static int build_specials(struct kve_tokenizer *t)
{
	struct spec_ent *e;
	uint32_t i, n = 0;

	for (i = 0; i < t->n; i++)
		if (is_special(t, (int32_t)i) && t->tok[i].n)
			n++;
	e = malloc((n ? n : 1) * sizeof(*e));
	t->spec = malloc((n ? n : 1) * sizeof(*t->spec));
	t->shown = calloc((t->n + 7) / 8, 1);
	if (!e || !t->spec || !t->shown) {
		free(e);
		return -ENOMEM;
	}
	for (i = 0; i < t->n; i++)
		if (is_special(t, (int32_t)i) && t->tok[i].n) {
			unsigned char c = (unsigned char)t->tok[i].p[0];

			e[t->n_spec].len = t->tok[i].n;
			e[t->n_spec++].id = (int32_t)i;
			t->spec_first[c / 8] |= (uint8_t)(1u << (c % 8));
		}
	qsort(e, t->n_spec, sizeof(*e), spec_longer);
	for (i = 0; i < t->n_spec; i++)
		t->spec[i] = e[i].id;
	free(e);
	return 0;
}

#define TERR(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

static int build_merges(struct kve_tokenizer *t, const struct gguf_kv *kv,
			char *err, size_t errlen)
{
	uint64_t i;
	uint32_t size = 16;
	char buf[1024];

	if (kv->type != GGUF_ARR || kv->arr_type != GGUF_STR)
		TERR("tokenizer: tokenizer.ggml.merges must be a string array");
	if (kv->arr_n > 4 * (uint64_t)t->n + 1024)
		TERR("tokenizer: %llu merges for %u tokens is implausible",
		     (unsigned long long)kv->arr_n, t->n);
	while (size < 2 * kv->arr_n)
		size <<= 1;
	t->merges = calloc(size, sizeof(*t->merges));
	if (!t->merges)
		TERR("tokenizer: out of memory");
	t->mmask = size - 1;
	for (i = 0; i < kv->arr_n; i++) {
		struct gguf_str s = gguf_arr_str(kv, i);
		const char *sp = memchr(s.p, ' ', s.n);
		int32_t a, b, r;
		uint64_t key;
		uint32_t h;

		if (!sp || sp == s.p || sp == s.p + s.n - 1 || s.n >= sizeof(buf))
			TERR("tokenizer: merge %llu is not 'left right'",
			     (unsigned long long)i);
		a = lookup(t, s.p, sp - s.p);
		b = lookup(t, sp + 1, s.n - (sp - s.p) - 1);
		memcpy(buf, s.p, sp - s.p);
		memcpy(buf + (sp - s.p), sp + 1, s.n - (sp - s.p) - 1);
		r = lookup(t, buf, s.n - 1);
		if (a < 0 || b < 0 || r < 0)
			TERR("tokenizer: merge %llu ('%.*s'): %s is not in the vocabulary",
			     (unsigned long long)i, (int)(s.n > 60 ? 60 : s.n), s.p,
			     a < 0 ? "left side" : b < 0 ? "right side" : "result");
		key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
		for (h = mix64(key) & t->mmask; t->merges[h].key; h = (h + 1) & t->mmask)
			if (t->merges[h].key == key)
				break;
		if (t->merges[h].key)	/* duplicate pair: first rank wins */
			continue;
		t->merges[h].key = key;
		t->merges[h].rank = (uint32_t)i;
		t->merges[h].result = r;
	}
	return 0;
fail:
	return -EINVAL;
}

struct kve_tokenizer *kve_tokenizer_create(const struct kve_model *m,
					   char *err, size_t errlen)
{
	const struct gguf *g = &m->g;
	const struct gguf_kv *kv;
	struct kve_tokenizer *t;
	struct gguf_str model;
	uint32_t i, size = 16, v;
	char piece[8];
	int add_bos_set;

	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "tokenizer: out of memory");
		return NULL;
	}
	if (gguf_get_str(g, "tokenizer.ggml.model", &model))
		TERR("tokenizer: tokenizer.ggml.model is missing or not a string");
	if (gguf_str_eq(model, "llama"))
		t->kind = KVE_TOK_SPM;
	else if (gguf_str_eq(model, "gpt2"))
		t->kind = KVE_TOK_BPE;
	else
		TERR("tokenizer: model '%.*s' not supported (llama, gpt2)",
		     (int)(model.n > 40 ? 40 : model.n), model.p);

	kv = gguf_find_kv(g, "tokenizer.ggml.tokens");
	if (!kv || kv->type != GGUF_ARR || kv->arr_type != GGUF_STR)
		TERR("tokenizer: tokenizer.ggml.tokens is missing or not a string array");
	if (kv->arr_n == 0 || kv->arr_n != m->info.vocab)
		TERR("tokenizer: %llu tokens but the model has a vocabulary of %u",
		     (unsigned long long)kv->arr_n, m->info.vocab);
	t->n = (uint32_t)kv->arr_n;
	t->tok = calloc(t->n, sizeof(*t->tok));
	t->score = calloc(t->n, sizeof(*t->score));
	t->type = calloc(t->n, sizeof(*t->type));
	while (size < 2 * t->n)
		size <<= 1;
	t->hash = malloc(size * sizeof(*t->hash));
	if (!t->tok || !t->score || !t->type || !t->hash)
		TERR("tokenizer: out of memory");
	t->hmask = size - 1;
	memset(t->hash, 0xff, size * sizeof(*t->hash));
	for (i = 0; i < t->n; i++) {
		uint32_t h;

		t->tok[i] = gguf_arr_str(kv, i);
		t->type[i] = TT_NORMAL;
		for (h = fnv(t->tok[i].p, t->tok[i].n) & t->hmask; t->hash[h] >= 0;
		     h = (h + 1) & t->hmask)
			if (t->tok[t->hash[h]].n == t->tok[i].n &&
			    !memcmp(t->tok[t->hash[h]].p, t->tok[i].p, t->tok[i].n))
				break;
		if (t->hash[h] < 0)	/* duplicates: the first id wins */
			t->hash[h] = (int32_t)i;
	}
	kv = gguf_find_kv(g, "tokenizer.ggml.scores");
	if (kv) {
		if (kv->type != GGUF_ARR || kv->arr_type != GGUF_F32 || kv->arr_n != t->n)
			TERR("tokenizer: tokenizer.ggml.scores must be %u floats", t->n);
		memcpy(t->score, kv->val, (size_t)t->n * 4);
	}
	kv = gguf_find_kv(g, "tokenizer.ggml.token_type");
	if (kv) {
		if (kv->type != GGUF_ARR || kv->arr_type != GGUF_I32 || kv->arr_n != t->n)
			TERR("tokenizer: tokenizer.ggml.token_type must be %u int32s", t->n);
		memcpy(t->type, kv->val, (size_t)t->n * 4);
	}
	t->bos = t->eos = t->unk = -1;
	if (!gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) && v < t->n)
		t->bos = (int32_t)v;
	if (!gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) && v < t->n)
		t->eos = (int32_t)v;
	if (!gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &v) && v < t->n)
		t->unk = (int32_t)v;
	t->add_bos = t->kind == KVE_TOK_SPM;
	add_bos_set = !gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
	/* as llama.cpp reads it: SentencePiece vocabularies prepend a space
	 * unless the file says not to */
	t->add_space_prefix = 1;
	gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);

	for (i = 0; i < 256; i++) {
		if (t->kind == KVE_TOK_SPM) {
			snprintf(piece, sizeof(piece), "<0x%02X>", i);
			t->byte_tok[i] = lookup(t, piece, 6);
		}
	}
	if (t->kind == KVE_TOK_BPE) {
		gpt2_byte_table(t);
		for (i = 0; i < 256; i++)
			t->byte_tok[i] = lookup(t, piece, put_cp(piece, t->byte_cp[i]));
		kv = gguf_find_kv(g, "tokenizer.ggml.merges");
		if (!kv)
			TERR("tokenizer: gpt2 tokenizer without tokenizer.ggml.merges");
		if (build_merges(t, kv, err, errlen))
			goto fail;
		/* absent: GPT-2's pattern, as llama.cpp assumes for old files */
		switch (gguf_get_str(g, "tokenizer.ggml.pre", &model)) {
		case 0:
			break;
		case -ENOENT:
			model.p = "gpt2";
			model.n = 4;
			break;
		default:
			TERR("tokenizer: tokenizer.ggml.pre is not a string");
		}
		t->pre = kve_pretok_create(model.p, model.n, err, errlen);
		if (!t->pre)
			goto fail;
		/* as llama.cpp treats these vocabularies (and HF's tokenizer.json
		 * says, ignore_merges): a word in the vocabulary is one token
		 * even where the merges would not build it; BOS unless the file
		 * says otherwise */
		if (!strcmp(t->pre->canon, "llama-bpe") || !strcmp(t->pre->canon, "tekken")) {
			t->ignore_merges = 1;
			if (!add_bos_set)
				t->add_bos = 1;
		}
	}
	if (build_specials(t))
		TERR("tokenizer: out of memory");
	return t;
fail:
	kve_tokenizer_free(t);
	return NULL;
}

enum kve_tok_kind kve_tokenizer_kind(const struct kve_tokenizer *t)
{
	return t->kind;
}

const struct kve_pretok *kve_tokenizer_pretok(const struct kve_tokenizer *t)
{
	return t->pre;
}

int32_t kve_tokenizer_bos(const struct kve_tokenizer *t)
{
	return t->bos;
}

int32_t kve_tokenizer_eos(const struct kve_tokenizer *t)
{
	return t->eos;
}

/* ---- encoding ------------------------------------------------------- */

struct outbuf {
	int32_t *ids;
	size_t max, n;
};

static void emit(struct outbuf *o, int32_t id)
{
	if (o->n < o->max)
		o->ids[o->n] = id;
	o->n++;
}

static void emit_bytes(const struct kve_tokenizer *t, struct outbuf *o,
		       const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int32_t id = t->byte_tok[(unsigned char)p[i]];
		emit(o, id >= 0 ? id : t->unk >= 0 ? t->unk : 0);
	}
}

struct sym {
	size_t off, len;	/* into the working text */
	int prev, next;
	int32_t id;		/* BPE only */
};

struct cand_heap {
	struct { float score; int left, right; size_t len; } *a;
	size_t n, cap;
};

static int heap_better(const struct cand_heap *h, size_t i, size_t j)
{
	if (h->a[i].score != h->a[j].score)
		return h->a[i].score > h->a[j].score;
	return h->a[i].left < h->a[j].left;
}

static void heap_swap(struct cand_heap *h, size_t i, size_t j)
{
	__typeof__(h->a[0]) tmp = h->a[i];

	h->a[i] = h->a[j];
	h->a[j] = tmp;
}

static int heap_push(struct cand_heap *h, float score, int left, int right,
		     size_t len)
{
	size_t i;

	if (h->n == h->cap) {
		size_t nc = h->cap ? h->cap * 2 : 64;
		void *p = realloc(h->a, nc * sizeof(*h->a));
		if (!p)
			return -ENOMEM;
		h->a = p;
		h->cap = nc;
	}
	i = h->n++;
	h->a[i].score = score;
	h->a[i].left = left;
	h->a[i].right = right;
	h->a[i].len = len;
	while (i && heap_better(h, i, (i - 1) / 2)) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	return 0;
}

static void heap_pop(struct cand_heap *h)
{
	size_t i = 0;

	h->a[0] = h->a[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, b = i;
		if (l < h->n && heap_better(h, l, b))
			b = l;
		if (r < h->n && heap_better(h, r, b))
			b = r;
		if (b == i)
			break;
		heap_swap(h, i, b);
		i = b;
	}
}

static int spm_try(const struct kve_tokenizer *t, const char *w, struct sym *s,
		   int left, struct cand_heap *h, int plain)
{
	int right;
	int32_t id;

	if (left < 0 || (right = s[left].next) < 0)
		return 0;
	id = lookup(t, w + s[left].off, s[left].len + s[right].len);
	if (id < 0 || (plain && is_special(t, id)))
		return 0;
	return heap_push(h, t->score[id], left, right,
			 s[left].len + s[right].len);
}

/* plain: no special token is made; dummy: the dummy-prefix space first
 * (never when the file's tokenizer.ggml.add_space_prefix is false) */
static int spm_encode(const struct kve_tokenizer *t, const char *text,
		      size_t len, struct outbuf *o, int plain, int dummy)
{
	struct cand_heap h = { 0 };
	struct sym *s = NULL;
	char *w;
	size_t i, n, wl;
	int ns = 0, k, rc = -ENOMEM;

	if (len > (SIZE_MAX - 3) / 3)
		return -EINVAL;
	w = malloc(3 * (len + 1));
	if (!w)
		return -ENOMEM;
	/* dummy prefix, then ' ' -> U+2581 */
	memcpy(w, "\xe2\x96\x81", 3);
	wl = dummy && t->add_space_prefix ? 3 : 0;
	for (i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(w + wl, "\xe2\x96\x81", 3);
			wl += 3;
		} else {
			w[wl++] = text[i];
		}
	}
	s = malloc(wl * sizeof(*s));
	if (!s)
		goto out;
	for (i = 0; i < wl; i += n) {
		n = char_len(w + i, wl - i);
		s[ns].off = i;
		s[ns].len = n;
		s[ns].prev = ns - 1;
		s[ns].next = i + n < wl ? ns + 1 : -1;
		ns++;
	}
	for (k = 0; k < ns; k++)
		if (spm_try(t, w, s, k, &h, plain))
			goto out;
	while (h.n) {
		int l = h.a[0].left, r = h.a[0].right;
		size_t cl = h.a[0].len;

		heap_pop(&h);
		/* stale: either side merged since this was queued */
		if (!s[l].len || !s[r].len || s[l].next != r ||
		    s[l].len + s[r].len != cl)
			continue;
		s[l].len += s[r].len;
		s[r].len = 0;
		s[l].next = s[r].next;
		if (s[r].next >= 0)
			s[s[r].next].prev = l;
		if (spm_try(t, w, s, s[l].prev, &h, plain) || spm_try(t, w, s, l, &h, plain))
			goto out;
	}
	for (k = 0; k >= 0 && ns; k = s[k].next) {
		int32_t id = lookup(t, w + s[k].off, s[k].len);
		if (id >= 0 && !(plain && is_special(t, id)))
			emit(o, id);
		else
			emit_bytes(t, o, w + s[k].off, s[k].len);
	}
	rc = 0;
out:
	free(h.a);
	free(s);
	free(w);
	return rc;
}

/*
 * Byte-level BPE over one pre-tokenized word: the merge of lowest rank
 * among adjacent symbols first, the leftmost among equal ranks (the
 * reference algorithm's order). Candidates wait in a min-heap by (rank,
 * position) and symbols in a linked list, so a word of n bytes costs
 * O(n log n), not a rescan of every pair per merge; a candidate is stale
 * when either side has merged since it was queued (their ids changed or
 * they are no longer neighbours).
 */
struct bpe_sym {
	int32_t id;		/* -1: a byte without a token (never merges) */
	int prev, next;
};

struct bpe_cand {
	uint32_t rank;
	int left, right;
	int32_t lid, rid;
	int32_t result;
};

static int bpe_before(const struct bpe_cand *a, const struct bpe_cand *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void bpe_push(struct bpe_cand *h, size_t *n, const struct bpe_cand *c)
{
	size_t i = (*n)++;

	while (i && bpe_before(c, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = *c;
}

static void bpe_pop(struct bpe_cand *h, size_t *n)
{
	struct bpe_cand last = h[--*n];
	size_t i = 0;

	for (;;) {
		size_t l = 2 * i + 1, b = l;

		if (l >= *n)
			break;
		if (l + 1 < *n && bpe_before(&h[l + 1], &h[l]))
			b = l + 1;
		if (!bpe_before(&h[b], &last))
			break;
		h[i] = h[b];
		i = b;
	}
	if (*n)
		h[i] = last;
}

/* Queues the pair starting at symbol l, when it has a merge (for plain
 * text, not one that makes a special token). */
static void bpe_offer(const struct kve_tokenizer *t, const struct bpe_sym *s, int l,
		      struct bpe_cand *h, size_t *n, int plain)
{
	const struct merge_ent *me;
	struct bpe_cand c;
	int r;

	if (l < 0 || (r = s[l].next) < 0 || s[l].id < 0 || s[r].id < 0)
		return;
	me = merge_find(t, s[l].id, s[r].id);
	if (!me || (plain && is_special(t, me->result)))
		return;
	c.rank = me->rank;
	c.left = l;
	c.right = r;
	c.lid = s[l].id;
	c.rid = s[r].id;
	c.result = me->result;
	bpe_push(h, n, &c);
}

static int bpe_word(const struct kve_tokenizer *t, const char *p, size_t n,
		    struct outbuf *o, int plain)
{
	struct bpe_sym symbuf[64], *s = symbuf;
	struct bpe_cand candbuf[3 * 64], *h = candbuf;
	size_t i, nh = 0;
	int k;

	if (n > INT32_MAX / 4)
		return -EINVAL;
	if (n > 64) {
		/* n - 1 pairs at first, at most two more per merge */
		s = malloc(n * sizeof(*s));
		h = malloc(3 * n * sizeof(*h));
		if (!s || !h) {
			free(s);
			free(h);
			return -ENOMEM;
		}
	}
	if (t->ignore_merges && n <= 256) {
		char w[2 * 256];	/* byte code points are at most 2 UTF-8 bytes */
		size_t wl = 0;
		int32_t id;

		for (i = 0; i < n; i++)
			wl += put_cp(w + wl, t->byte_cp[(unsigned char)p[i]]);
		id = lookup(t, w, wl);
		if (id >= 0 && !(plain && is_special(t, id))) {
			emit(o, id);
			return 0;
		}
	}
	for (i = 0; i < n; i++) {
		s[i].id = t->byte_tok[(unsigned char)p[i]];
		s[i].prev = (int)i - 1;
		s[i].next = i + 1 < n ? (int)i + 1 : -1;
	}
	for (i = 0; i + 1 < n; i++)
		bpe_offer(t, s, (int)i, h, &nh, plain);
	while (nh) {
		struct bpe_cand c = h[0];

		bpe_pop(h, &nh);
		if (s[c.left].next != c.right || s[c.left].id != c.lid || s[c.right].id != c.rid)
			continue;	/* stale */
		s[c.left].id = c.result;
		s[c.left].next = s[c.right].next;
		if (s[c.right].next >= 0)
			s[s[c.right].next].prev = c.left;
		s[c.right].id = -2;	/* merged away: no queued pair matches it */
		s[c.right].next = -1;
		bpe_offer(t, s, s[c.left].prev, h, &nh, plain);
		bpe_offer(t, s, c.left, h, &nh, plain);
	}
	for (k = n ? 0 : -1; k >= 0; k = s[k].next) {
		if (plain && is_special(t, s[k].id))	/* a byte token that is one */
			emit(o, t->unk >= 0 ? t->unk : 0);
		else
			emit(o, s[k].id >= 0 ? s[k].id : (t->unk >= 0 ? t->unk : 0));
	}
	if (s != symbuf) {
		free(s);
		free(h);
	}
	return 0;
}

struct bpe_ctx {
	const struct kve_tokenizer *t;
	struct outbuf *o;
	int plain;
};

static int bpe_word_cb(void *ctx, const char *word, size_t n)
{
	struct bpe_ctx *c = ctx;

	return bpe_word(c->t, word, n, c->o, c->plain);
}

int kve_tokenize(const struct kve_tokenizer *t, const char *text, size_t len,
		 int add_bos, int32_t *out, size_t max)
{
	struct outbuf o = { out, max, 0 };
	int rc = 0;

	if (!t || (!text && len))
		return -EINVAL;
	if (add_bos && t->add_bos && t->bos >= 0)
		emit(&o, t->bos);
	if (t->kind == KVE_TOK_SPM) {
		if (len)
			rc = spm_encode(t, text, len, &o, 0, 1);
	} else {
		struct bpe_ctx c = { t, &o, 0 };

		rc = kve_pretok_split(t->pre, text, len, bpe_word_cb, &c);
	}
	if (rc)
		return rc;
	return o.n > INT32_MAX ? -E2BIG : (int)o.n;
}

/* ---- special tokens where the caller allows them -------------------- */

/* Text between special tokens: plain (no special token is made). */
static int encode_raw(const struct kve_tokenizer *t, const char *text, size_t len,
		      struct outbuf *o, int dummy)
{
	if (!len && !(dummy && t->add_space_prefix))
		return 0;
	if (t->kind == KVE_TOK_SPM)	/* the dummy prefix alone before a marker */
		return spm_encode(t, text, len, o, 1, dummy);
	{
		struct bpe_ctx c = { t, o, 1 };

		return kve_pretok_split(t->pre, text, len, bpe_word_cb, &c);
	}
}

struct frag {
	size_t off, len;
	int32_t id;		/* -1: raw text */
};

/* The first occurrence of needle (n bytes, n > 0) in hay, or NULL. */
static const char *find_bytes(const char *hay, size_t hn, const char *needle, size_t n)
{
	for (size_t i = 0; n <= hn && i <= hn - n; i++) {
		const char *p = memchr(hay + i, needle[0], hn - n + 1 - i);

		if (!p)
			return NULL;
		i = (size_t)(p - hay);
		if (!memcmp(p, needle, n))
			return p;
	}
	return NULL;
}

/* 1 when [off, off + n) lies inside one of the allowed spans (sorted). */
static int allowed(const struct kve_span *sp, size_t n_sp, size_t off, size_t n)
{
	size_t lo = 0, hi = n_sp;

	while (lo < hi) {		/* the last span starting at or before off */
		size_t mid = (lo + hi) / 2;

		if (sp[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && off + n <= sp[lo - 1].off + sp[lo - 1].len;
}

int kve_tokenize_spans(const struct kve_tokenizer *t, const char *text, size_t len,
		       const struct kve_span *special, size_t n_special, unsigned flags,
		       int32_t *out, size_t max)
{
	struct outbuf o = { out, max, 0 };
	struct frag *f = NULL, *nf;
	size_t nfr = 0, i, k;
	uint32_t si;
	uint8_t *present = NULL;
	int rc = 0;

	if (!t || (!text && len) || (!special && n_special))
		return -EINVAL;
	for (i = 0; i < n_special; i++)
		if (special[i].off > len || special[i].len > len - special[i].off ||
		    (i && special[i].off < special[i - 1].off + special[i - 1].len))
			return -EINVAL;
	if (flags & KVE_TOKENIZE_BOS && t->add_bos && t->bos >= 0)
		emit(&o, t->bos);
	f = malloc(sizeof(*f));
	present = calloc(t->n_spec ? t->n_spec : 1, 1);
	if (!f || !present) {
		rc = -ENOMEM;
		goto out;
	}
	f[0] = (struct frag){ 0, len, -1 };
	nfr = 1;
	/* which special texts occur where they are allowed at all */
	for (k = 0; k < n_special; k++)
		for (i = special[k].off; i < special[k].off + special[k].len; i++) {
			unsigned char c = (unsigned char)text[i];

			if (!(t->spec_first[c / 8] & (1u << (c % 8))))
				continue;
			for (si = 0; si < t->n_spec; si++) {
				const struct gguf_str *s = &t->tok[t->spec[si]];

				if (!present[si] && (unsigned char)s->p[0] == c &&
				    s->n <= special[k].off + special[k].len - i &&
				    !memcmp(text + i, s->p, s->n))
					present[si] = 1;
			}
		}
	/* longest first, as llama.cpp partitions: each occurrence that lies
	 * inside an allowed span splits the raw fragment holding it */
	for (si = 0; si < t->n_spec; si++) {
		const struct gguf_str *s = &t->tok[t->spec[si]];

		if (!present[si])
			continue;
		for (k = 0; k < nfr; k++) {
			const char *p;
			size_t at;

			if (f[k].id >= 0)
				continue;
			p = find_bytes(text + f[k].off, f[k].len, s->p, s->n);
			while (p && !allowed(special, n_special, (size_t)(p - text), s->n)) {
				size_t from = (size_t)(p - text) + 1;

				p = from + s->n <= f[k].off + f[k].len ?
				    find_bytes(text + from, f[k].off + f[k].len - from, s->p, s->n) : NULL;
			}
			if (!p)
				continue;
			at = (size_t)(p - text);
			nf = realloc(f, (nfr + 2) * sizeof(*f));
			if (!nf) {
				rc = -ENOMEM;
				goto out;
			}
			f = nf;
			memmove(f + k + 3, f + k + 1, (nfr - k - 1) * sizeof(*f));
			f[k + 2] = (struct frag){ at + s->n, f[k].off + f[k].len - at - s->n, -1 };
			f[k + 1] = (struct frag){ at, s->n, t->spec[si] };
			f[k].len = at - f[k].off;
			nfr += 2;
			k++;	/* the rest, f[k + 1], is looked at next */
		}
	}
	for (k = 0; k < nfr && !rc; k++) {
		if (f[k].id >= 0)
			emit(&o, f[k].id);
		else
			rc = encode_raw(t, text + f[k].off, f[k].len, &o,
					k == 0 && !(flags & KVE_TOKENIZE_CONT) && t->kind == KVE_TOK_SPM &&
					len);
	}
out:
	free(f);
	free(present);
	if (rc)
		return rc;
	return o.n > INT32_MAX ? -E2BIG : (int)o.n;
}

int kve_token_special(const struct kve_tokenizer *t, int32_t id, char *out, size_t max)
{
	if (!t || (uint32_t)id >= t->n)
		return -EINVAL;
	if (!is_special(t, id))
		return 0;
	if (max)
		memcpy(out, t->tok[id].p, t->tok[id].n < max ? t->tok[id].n : max);
	return t->tok[id].n > INT32_MAX ? -E2BIG : (int)t->tok[id].n;
}

int kve_tokenizer_show(struct kve_tokenizer *t, const char *text)
{
	size_t n = strlen(text);
	int found = 0;

	for (uint32_t i = 0; i < t->n; i++)
		if (t->type[i] == TT_CONTROL && t->tok[i].n == n && !memcmp(t->tok[i].p, text, n)) {
			t->shown[i / 8] |= (uint8_t)(1u << (i % 8));
			found = 1;
		}
	return found ? 0 : -ENOENT;
}

/* ---- decoding ------------------------------------------------------- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	return -1;
}

int kve_token_bytes(const struct kve_tokenizer *t, int32_t id, char *out,
		    size_t max)
{
	struct gguf_str s;
	size_t i, n = 0;

	if (!t || (uint32_t)id >= t->n)	/* negative ids convert far above */
		return -EINVAL;
	s = t->tok[id];
	if ((t->type[id] == TT_CONTROL && !(t->shown[id / 8] & (1u << (id % 8)))) ||
	    t->type[id] == TT_UNUSED)
		return 0;
	if (t->type[id] == TT_CONTROL) {	/* shown: its text as it is */
		if (max)
			memcpy(out, s.p, s.n < max ? s.n : max);
		return s.n > INT32_MAX ? -E2BIG : (int)s.n;
	}
	if (t->kind == KVE_TOK_SPM) {
		if (t->type[id] == TT_BYTE && s.n == 6 && !memcmp(s.p, "<0x", 3) &&
		    s.p[5] == '>' && hexval(s.p[3]) >= 0 && hexval(s.p[4]) >= 0) {
			if (max)
				out[0] = (char)(hexval(s.p[3]) * 16 + hexval(s.p[4]));
			return 1;
		}
		for (i = 0; i < s.n; i++) {
			if (i + 3 <= s.n && !memcmp(s.p + i, "\xe2\x96\x81", 3)) {
				if (n < max)
					out[n] = ' ';
				n++;
				i += 2;
			} else {
				if (n < max)
					out[n] = s.p[i];
				n++;
			}
		}
		return n > INT32_MAX ? -E2BIG : (int)n;
	}
	/*
	 * byte-level: each code point maps back to one byte. Anything else
	 * passes through as it is: text that is not byte-level, and each
	 * byte of ill-formed UTF-8 (RFC 3629, as the pre-tokenizer judges
	 * input), so an overlong form ("\xe0\x81\x81") never decodes as the
	 * character it imitates ('A').
	 */
	for (i = 0; i < s.n;) {
		size_t l = utf8_strict_len((const unsigned char *)s.p + i, s.n - i);
		uint32_t cp = (unsigned char)s.p[i];
		int b;

		if (!l) {
			if (n < max)
				out[n] = s.p[i];
			n++;
			i++;
			continue;
		}
		/* the byte-level alphabet is U+0021..U+0143: 1 or 2 bytes */
		if (l == 2)
			cp = ((cp & 0x1f) << 6) | ((unsigned char)s.p[i + 1] & 0x3f);
		b = cp < 512 && l <= 2 ? t->cp_byte[cp] : -1;
		if (b < 0) {	/* not byte-level text: pass it through */
			size_t j;
			for (j = 0; j < l; j++, n++)
				if (n < max)
					out[n] = s.p[i + j];
		} else {
			if (n < max)
				out[n] = (char)b;
			n++;
		}
		i += l;
	}
	return n > INT32_MAX ? -E2BIG : (int)n;
}

void kve_detok_init(struct kve_detok *d, const struct kve_tokenizer *t)
{
	memset(d, 0, sizeof(*d));
	d->tok = t;
	d->at_start = t && t->kind == KVE_TOK_SPM;
}

/* Bytes of buf[0..n) that form complete UTF-8 characters; the tail that
 * could still be completed stays pending. */
static size_t complete_prefix(const unsigned char *b, size_t n)
{
	size_t i = n, k;

	for (k = 0; k < 3 && i > 0; k++) {
		unsigned char c = b[i - 1];
		if ((c & 0xc0) == 0x80) {
			i--;
			continue;
		}
		if (c >= 0xc0) {	/* lead byte: complete? */
			size_t need = utf8_len(c);
			if (need > 1 && (n - (i - 1)) < need)
				return i - 1;
		}
		return n;
	}
	return n;
}

int kve_detok_push(struct kve_detok *d, int32_t id, char *out, size_t max)
{
	char tmp[512], *buf = tmp;
	int n = kve_token_bytes(d->tok, id, NULL, 0);
	size_t total, emit_n, start = 0;

	if (n < 0)
		return n;
	total = d->n_pending + (size_t)n;
	if (total > sizeof(tmp)) {
		buf = malloc(total);
		if (!buf)
			return -ENOMEM;
	}
	memcpy(buf, d->pending, d->n_pending);
	kve_token_bytes(d->tok, id, buf + d->n_pending, (size_t)n);
	emit_n = complete_prefix((unsigned char *)buf, total);
	if (total - emit_n > sizeof(d->pending))
		emit_n = total - sizeof(d->pending);
	if (d->at_start && emit_n) {
		if (buf[0] == ' ')
			start = 1;
		d->at_start = 0;
	}
	if (emit_n - start > max) {
		if (buf != tmp)
			free(buf);
		return -ENOSPC;
	}
	memcpy(out, buf + start, emit_n - start);
	d->n_pending = (uint32_t)(total - emit_n);
	memcpy(d->pending, buf + emit_n, d->n_pending);
	if (buf != tmp)
		free(buf);
	return (int)(emit_n - start);
}

int kve_detok_flush(struct kve_detok *d, char *out, size_t max)
{
	int n = (int)d->n_pending;

	if ((size_t)n > max)
		return -ENOSPC;
	memcpy(out, d->pending, n);
	d->n_pending = 0;
	return n;
}
