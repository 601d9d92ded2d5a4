// SPDX-License-Identifier: MIT
/*
 * test_tokenizer.c - the tokenizers on vocabularies kva-mkmodel writes:
 * encode/decode round trips (per BPE pre-tokenizer), byte fallback,
 * streaming detokenisation that never splits a UTF-8 character, BOS
 * handling, BPE merge order (the lower-ranked of two overlapping merges
 * wins), the pre-tokenizers' word splits on strings where they differ,
 * and tokenizer.ggml.pre errors. ref.py compares full encodings and the
 * pre-tokenizers' splits of many more strings with an independent
 * implementation (Python's regex module).
 *
 * usage: test_tokenizer SPM_MODEL BPE_MODEL...  (the first BPE model's
 *        tokenizer.ggml.pre must be gpt2)
 */
#define _GNU_SOURCE	/* MAP_ANONYMOUS, memmem */
#include <errno.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"
#include "nojit.h"
#include "tcheck.h"

static const char *const texts[] = {
	"Hello, world!", "  leading and  double  spaces ", "it's they've we'll",
	"tabs\tand\nnewlines\n", "Caf\xc3\xa9 Stra\xc3\x9f" "e \xc3\xbc",
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80", "\xff\xfe\xc3", "x", "",
	"The decode worker reads them in place, without a copy.",
	"I'M 12345 h\xc3\xa9llo\xe2\x80\x94world \xce\xa9mega", "\n\n  x...!!?\n\r\n",
	"\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80 ab\xe6\x97 12\xff" "34",
};

/* s for a one-line message: control and non-ASCII bytes as \xNN (at most
 * max bytes of s shown) */
static const char *esc(const char *s, size_t max, char *out, size_t outlen)
{
	size_t i, o = 0;

	for (i = 0; s[i] && i < max && o + 5 < outlen; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f)
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
	}
	out[o] = 0;
	return out;
}

static int valid_utf8(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		size_t l = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			   (c & 0xf8) == 0xf0 ? 4 : 0, k;
		if (!l || i + l > n)
			return 0;
		for (k = 1; k < l; k++)
			if (((unsigned char)s[i + k] & 0xc0) != 0x80)
				return 0;
		i += l;
	}
	return 1;
}

/* Bytes of b[0..n) that are whole characters (b is valid UTF-8 cut
 * anywhere): what a stream may have shown after them. */
static size_t whole_chars(const char *b, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = (unsigned char)b[i];
		size_t l = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;

		if (i + l > n)
			break;
		i += l;
	}
	return i;
}

/*
 * Encode, then decode token by token: the text comes back, every chunk of
 * a valid text is whole characters, and each character comes out with the
 * token that completes it, not later (an SPM stream drops one leading
 * space, the dummy prefix).
 */
static void round_trips(struct kve_tokenizer *t, const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		int32_t ids[512];
		char out[2048];
		size_t len = strlen(texts[i]), o = 0;
		struct kve_detok d;
		int n = kve_tokenize(t, texts[i], len, 1, ids, 512), k, chunks_ok = 1;
		char shown[128];

		char raw[2048];
		size_t nraw = 0;

		kve_detok_init(&d, t);
		for (k = 0; k < n; k++) {
			int nb = kve_token_bytes(t, ids[k], raw + nraw, sizeof(raw) - nraw);
			int w = kve_detok_push(&d, ids[k], out + o, sizeof(out) - o);
			if (w < 0 || nb < 0)
				break;
			nraw += (size_t)nb;
			/* valid input: every chunk is whole characters, and
			 * all of them so far */
			if (valid_utf8(texts[i], len)) {
				size_t want = whole_chars(raw, nraw);

				if (kve_tokenizer_kind(t) == KVE_TOK_SPM && want && raw[0] == ' ')
					want--;
				if (!valid_utf8(out + o, (size_t)w) || o + (size_t)w != want)
					chunks_ok = 0;
			}
			o += (size_t)w;
		}
		o += (size_t)kve_detok_flush(&d, out + o, sizeof(out) - o);
		CHECK(n > 0 && ids[0] == kve_tokenizer_bos(t) && o == len &&
		      !memcmp(out, texts[i], len) && chunks_ok,
		      "%s round trip (%d tokens, streamed) of \"%s\"", name, n,
		      esc(texts[i], 20, shown, sizeof(shown)));
	}
}

/* ---- pre-tokenizers ------------------------------------------------ */

struct words {
	char buf[256];
	size_t n;
};

static int join_word(void *ctx, const char *w, size_t n)
{
	struct words *ws = ctx;

	if (ws->n + n + 2 > sizeof(ws->buf))
		return -ENOSPC;
	memcpy(ws->buf + ws->n, w, n);
	ws->n += n;
	ws->buf[ws->n++] = '|';
	ws->buf[ws->n] = 0;
	return 0;
}

/* Word splits that tell the three patterns (and ASCII classes) apart;
 * words joined with '|'. ref.py checks many more against Python's regex. */
static const struct {
	const char *pre, *text, *want;
} split_cases[] = {
	{ "gpt2", "12345", "12345|" },
	{ "llama-bpe", "12345", "123|45|" },
	{ "qwen2", "12345", "1|2|3|4|5|" },
	{ "gpt2", "I'M I'm", "I|'|M| I|'m|" },
	{ "llama-bpe", "I'M I'm", "I|'M| I|'m|" },
	{ "qwen2", "I'M I'm", "I|'M| I|'m|" },
	/* an em dash is punctuation, U+0663.. are digits, U+3000 space */
	{ "gpt2", "h\xc3\xa9llo\xe2\x80\x94w\xc3\xb6rld \xd9\xa3\xd9\xa4\xe3\x80\x80x",
	  "h\xc3\xa9llo|\xe2\x80\x94|w\xc3\xb6rld| \xd9\xa3\xd9\xa4|\xe3\x80\x80|x|" },
	{ "llama-bpe", "h\xc3\xa9llo\xe2\x80\x94w\xc3\xb6rld \xd9\xa3\xd9\xa4\xe3\x80\x80x",
	  "h\xc3\xa9llo|\xe2\x80\x94w\xc3\xb6rld| |\xd9\xa3\xd9\xa4|\xe3\x80\x80x|" },
	{ "gpt2", "\n\n  x...!!?\n", "\n\n | x|...!!?|\n|" },
	{ "llama-bpe", "\n\n  x...!!?\n", "\n\n| | x|...!!?\n|" },
	/* a 4-byte letter (U+20000) is a letter, last in the text too */
	{ "gpt2", "\xf0\xa0\x80\x80x x\xf0\xa0\x80\x80",
	  "\xf0\xa0\x80\x80x| x\xf0\xa0\x80\x80|" },
	/* ill-formed bytes split like a symbol (U+FFFD) and are kept */
	{ "gpt2", "ab\xff\xfe cd\xc3", "ab|\xff\xfe| cd|\xc3|" },
	{ "qwen2", "ab\xff\xfe cd\xc3", "ab|\xff\xfe| cd|\xc3|" },
	/* a 3- and a 4-byte character cut short by the end of the text
	 * (which split_case_ok passes in a buffer of its exact size) */
	{ "gpt2", "ab\xe2\x82", "ab|\xe2\x82|" },
	{ "gpt2", "ab\xf0\x9f\x98", "ab|\xf0\x9f\x98|" },
};
/* split_cases[i] split as it wants; p gives whether PCRE2 JIT-compiled
 * the pattern (-1 when it could not be created) */
static int split_case_ok(size_t i, int *jit, char *msg, size_t msglen)
{
	char err[256], e1[256], e2[512], e3[512];
	struct kve_pretok *p = kve_pretok_create(split_cases[i].pre, strlen(split_cases[i].pre),
						 err, sizeof(err));
	struct words ws = { "", 0 };
	size_t n = strlen(split_cases[i].text);
	char *text = malloc(n ? n : 1);	/* no NUL after it: ASan sees a read past the end */
	int rc = p && text ? kve_pretok_split(p, memcpy(text, split_cases[i].text, n), n,
					      join_word, &ws) : -1;

	*jit = p ? kve_pretok_jit(p) : -1;
	snprintf(msg, msglen, "%s splits \"%s\" as \"%s\" (got \"%s\"%s)", split_cases[i].pre,
		 esc(split_cases[i].text, 60, e1, sizeof(e1)), esc(split_cases[i].want, 80, e2, sizeof(e2)),
		 esc(ws.buf, 80, e3, sizeof(e3)), p ? "" : err);
	kve_pretok_free(p);
	free(text);
	return !rc && !strcmp(ws.buf, split_cases[i].want);
}

static void pretok_splits(void)
{
	size_t i;

	for (i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++) {
		char msg[1600];
		int jit, ok = split_case_ok(i, &jit, msg, sizeof(msg));

		CHECK(ok, "%s", msg);
	}
	{
		char err[256] = "";
		struct kve_pretok *p = kve_pretok_create("gpt3", 4, err, sizeof(err));

		CHECK(!p && strstr(err, "tokenizer.ggml.pre 'gpt3'"),
		      "unknown pre-tokenizer refused: \"%s\"", err);
		kve_pretok_free(p);
	}
}

/*
 * Without JIT: where executable memory is refused (here a seccomp filter
 * failing every PROT_EXEC mapping, as a hardened service's
 * MemoryDenyWriteExecute does), PCRE2 cannot JIT-compile the patterns and
 * its interpreter runs them: every split and every BPE encoding must come
 * out the same. Runs first, before this process JIT-compiles anything
 * (PCRE2 would reuse its executable memory in the child); the filtered
 * child reports by exit status and a shared page.
 */
enum { NT = sizeof(texts) / sizeof(texts[0]) };
struct nojit {
	int n[NT];
	int32_t ids[NT][512];
};

static void without_jit(const char *bpe_path)
{
	struct nojit *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct kve_tokenizer *t = NULL;
	struct kve_model *m;
	int st = -1, same = 1, jit;
	char err[256], msg[1600];
	size_t i;
	pid_t pid;

	if (r == MAP_FAILED) {
		CHECK(0, "without JIT: shared page: %s", strerror(errno));
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		if (refuse_exec_memory())
			_exit(77);
		for (i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++) {
			if (!split_case_ok(i, &jit, msg, sizeof(msg))) {
				printf("# without JIT: %s\n", msg);
				fflush(stdout);
				_exit(3);
			}
			if (jit)
				_exit(2);
		}
		m = kve_model_load(bpe_path, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		if (!t)
			_exit(4);
		if (kve_pretok_jit(kve_tokenizer_pretok(t)))
			_exit(2);
		for (i = 0; i < NT; i++)
			r->n[i] = kve_tokenize(t, texts[i], strlen(texts[i]), 0, r->ids[i], 512);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		printf("# no seccomp filter here: the interpreter fallback not checked\n");
		munmap(r, sizeof(*r));
		return;
	}
	m = kve_model_load(bpe_path, err, sizeof(err));
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	for (i = 0; t && i < NT; i++) {
		int32_t ids[512];
		int n = kve_tokenize(t, texts[i], strlen(texts[i]), 0, ids, 512);

		if (n < 0 || n != r->n[i] || memcmp(ids, r->ids[i], (size_t)n * sizeof(*ids))) {
			same = 0;
			printf("# text %zu: %d tokens with JIT, %d without\n", i, n, r->n[i]);
		}
	}
	if (t && !kve_pretok_jit(kve_tokenizer_pretok(t)))
		printf("# PCRE2 does not JIT here: both runs used the interpreter\n");
	CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && t && same,
	      "without JIT (executable memory refused) the interpreter splits all %zu cases "
	      "and encodes all %d texts as JIT does (child status %d: 2 JIT still on, "
	      "3 split, 4 load) %s", sizeof(split_cases) / sizeof(split_cases[0]), (int)NT,
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1, t ? "" : err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	munmap(r, sizeof(*r));
}

/* A merge that is not "left right" (the space first or last, so one
 * side is empty) is a load error naming it, the file otherwise valid:
 * the first merge respelled in place, its length kept. */
static void bad_merge(const char *path)
{
	static const char key[] = "tokenizer.ggml.merges";
	size_t len, i, kl = sizeof(key) - 1, at = 0;
	uint8_t *b = tc_slurp(path, &len);
	uint64_t n = 0;
	int pos, ok = 1;

	for (i = 0; b && i + kl + 32 < len && !at; i++)
		if (!memcmp(b + i, key, kl) && b[i + kl] == GGUF_ARR && b[i + kl + 4] == GGUF_STR) {
			at = i + kl + 16;	/* type, element type, count */
			memcpy(&n, b + at, 8);
			at += 8;
		}
	CHECK(at && n >= 3 && n < 64 && at + n <= len && memchr(b + at, ' ', n),
	      "found the first merge of %s", path);
	if (!at || n < 3 || n >= 64 || at + n > len || !memchr(b + at, ' ', n)) {
		free(b);
		return;
	}
	for (pos = 0; pos < 2; pos++) {
		char orig[64], bent[64], err[256] = "";
		char *sp;
		struct kve_model *m;
		struct kve_tokenizer *t;

		memcpy(orig, b + at, n);
		sp = memchr(orig, ' ', n);
		/* "l r" -> "lr " (pos 0) or " lr" (pos 1) */
		memcpy(bent + !!pos, orig, (size_t)(sp - orig));
		memcpy(bent + !!pos + (sp - orig), sp + 1, n - (size_t)(sp - orig) - 1);
		bent[pos ? 0 : n - 1] = ' ';
		memcpy(b + at, bent, n);
		m = kve_model_load_mem(b, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		ok &= m && !t && strstr(err, "merge 0 is not 'left right'");
		printf("# merge \"%.*s\" -> \"%.*s\": %s\n", (int)n, orig, (int)n, bent, err);
		kve_tokenizer_free(t);
		kve_model_free(m);
		memcpy(b + at, orig, n);
	}
	CHECK(ok, "a merge with its space last or first (an empty side) is a load error naming it");
	free(b);
}

/* tokenizer.ggml.pre in a model file: an unknown value is a load error
 * naming the key and value; without the key the pattern is GPT-2's. */
static void pre_metadata(const char *path)
{
	static const char key[] = "tokenizer.ggml.pre";
	size_t len, i, kl = sizeof(key) - 1;
	uint8_t *b = tc_slurp(path, &len);
	char err[256] = "", want[80];
	struct kve_model *m;
	struct kve_tokenizer *t;
	uint64_t vlen;

	for (i = 0; b && i + kl + 16 < len; i++)
		if (!memcmp(b + i, key, kl) && b[i + kl] == GGUF_STR)
			break;
	CHECK(b && i + kl + 16 < len, "found %s in %s", key, path);
	if (!b || i + kl + 16 >= len) {
		free(b);
		return;
	}
	/* the value's first letter in upper case: "gpt2" -> "Gpt2" */
	memcpy(&vlen, b + i + kl + 4, 8);
	b[i + kl + 12] ^= 0x20;
	snprintf(want, sizeof(want), "tokenizer.ggml.pre '%.*s'",
		 (int)(vlen < 40 ? vlen : 40), (const char *)b + i + kl + 12);
	m = kve_model_load_mem(b, len, err, sizeof(err));
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	CHECK(m && !t && strstr(err, want),
	      "unknown tokenizer.ggml.pre is a load error: \"%s\"", err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	b[i + kl + 12] ^= 0x20;
	{	/* unprintable bytes of the value are shown as '?': "\x01pt\x7f" */
		uint8_t first = b[i + kl + 12], last = b[i + kl + 12 + vlen - 1];

		b[i + kl + 12] = 0x01;
		b[i + kl + 12 + vlen - 1] = 0x7f;
		m = kve_model_load_mem(b, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		snprintf(want, sizeof(want), "tokenizer.ggml.pre '?%.*s?'", (int)(vlen - 2),
			 (const char *)b + i + kl + 13);
		CHECK(vlen >= 3 && vlen < 40 && m && !t && strstr(err, want),
		      "an unprintable tokenizer.ggml.pre is shown with '?': \"%s\"", err);
		kve_tokenizer_free(t);
		kve_model_free(m);
		b[i + kl + 12] = first;
		b[i + kl + 12 + vlen - 1] = last;
	}
	b[i + kl - 1] = 'x';	/* "tokenizer.ggml.prx": no pre key */
	m = kve_model_load_mem(b, len, err, sizeof(err));
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	CHECK(t && !strcmp(kve_pretok_name(kve_tokenizer_pretok(t)), "gpt2"),
	      "no tokenizer.ggml.pre: gpt2's pattern %s", t ? "" : err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

/* The tokens that decode to exactly want[0..wn) once the 6-byte spelling
 * from is respelled to (which must occur once in b; b keeps the edit);
 * -1 when it does not occur or the tokenizer cannot be built (err). */
static int respelled_decoding(uint8_t *b, size_t len, const char *from, const char *to,
			      const char *want, int wn, char *err, size_t errlen)
{
	size_t i, hits = 0;
	struct kve_model *m;
	struct kve_tokenizer *t;
	char piece[16];
	int32_t id;
	int n = 0;

	for (i = 0; b && i + 6 <= len; i++)
		if (!memcmp(b + i, from, 6)) {
			memcpy(b + i, to, 6);
			hits++;
		}
	m = hits == 1 ? kve_model_load_mem(b, len, err, errlen) : NULL;
	t = m ? kve_tokenizer_create(m, err, errlen) : NULL;
	for (id = 0; t && id < (int32_t)kve_model_info(m)->vocab; id++)
		n += kve_token_bytes(t, id, piece, sizeof(piece)) == wn && !memcmp(piece, want, (size_t)wn);
	if (!t)
		n = -1;
	kve_tokenizer_free(t);
	kve_model_free(m);
	return n;
}

/* Byte tokens spelled in lower-case hex ("<0xef>") decode like "<0xEF>";
 * "<0xeg>" is no byte and decodes to its own 6 characters. */
static void lower_hex(const char *path)
{
	size_t len;
	uint8_t *b = tc_slurp(path, &len);
	char err[256] = "";
	int n;

	n = respelled_decoding(b, len, "<0xEF>", "<0xef>", "\xef", 1, err, sizeof(err));
	CHECK(n == 1, "byte token <0xef> (lower-case hex) is the byte 0xef (%d tokens) %s", n,
	      n < 0 ? err : "");
	n = respelled_decoding(b, len, "<0xef>", "<0xeg>", "<0xeg>", 6, err, sizeof(err));
	CHECK(n == 1, "a byte token spelled <0xeg> (not hex) decodes to its 6 characters "
	      "(%d tokens) %s", n, n < 0 ? err : "");
	free(b);
}

/* Two entries with the same text: the first id wins, id 0 included. The
 * BPE test vocabulary's token 1 (the byte 0x01, "\xc4\x81") respelled as
 * token 0's text ("\xc4\x80", the byte 0x00): that byte still encodes as
 * token 0. */
static void duplicate_first_id(const char *path)
{
	size_t len, i, hits = 0;
	uint8_t *b = tc_slurp(path, &len);
	char err[256] = "";
	struct kve_model *m;
	struct kve_tokenizer *t;
	int32_t ids[4];
	int n;

	for (i = 0; b && i + 10 <= len; i++)
		if (!memcmp(b + i, "\x02\0\0\0\0\0\0\0\xc4\x81", 10)) {
			memcpy(b + i + 8, "\xc4\x80", 2);
			hits++;
			break;
		}
	m = hits ? kve_model_load_mem(b, len, err, sizeof(err)) : NULL;
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	n = t ? kve_tokenize(t, "\0", 1, 0, ids, 4) : -1;
	CHECK(t && n == 1 && ids[0] == 0, "a duplicate of token 0's text: the byte 0x00 is "
	      "still token 0 (%d tokens, first %d) %s", n, n > 0 ? ids[0] : -1, t ? "" : err);
	/* the byte 0x01 has no token now, and there is no unknown token:
	 * it becomes token 0 */
	n = t ? kve_tokenize(t, "\x01", 1, 0, ids, 4) : -1;
	CHECK(t && n == 1 && ids[0] == 0, "a byte with no token and no unknown token is token 0 "
	      "(%d tokens, first %d)", n, n > 0 ? ids[0] : -1);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

/*
 * A BPE vocabulary entry that is not byte-level text decodes to its own
 * bytes: the nth filler token "<|reserved_N|>" (type unused) becomes a
 * normal token whose first bytes are respelled (same length, so the file
 * stays valid), and kve_token_bytes must give back exactly its bytes.
 */
static void respelled(const char *path, int nth, const char *spell, const char *what)
{
	static const char tt[] = "tokenizer.ggml.token_type";
	size_t len, i, at = 0, tl = sizeof(tt) - 1, sl = strlen(spell);
	uint8_t *b = tc_slurp(path, &len);
	char err[256] = "", piece[32], want[32], shown[128];
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	unsigned int id = 0;
	int n = -1, wl = 0;

	for (i = 0; b && i + 16 < len && !at; i++)
		if (!memcmp(b + i, "<|reserved_", 11) && sscanf((char *)b + i + 11, "%u", &id) == 1 &&
		    nth-- == 0) {
			snprintf(want, sizeof(want), "%s%.20s", spell, (char *)b + i + sl);
			wl = (int)(strstr(want, "|>") + 2 - want);
			memcpy(b + i, spell, sl);
			at = i;
		}
	for (i = 0; at && i + tl + 16 < len; i++)
		if (!memcmp(b + i, tt, tl)) {	/* ARR, I32, count, then the types */
			size_t p = i + tl + 16 + (size_t)id * 4;
			int32_t normal = 1;

			if (p + 4 <= len)
				memcpy(b + p, &normal, 4);
			break;
		}
	m = at ? kve_model_load_mem(b, len, err, sizeof(err)) : NULL;
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	if (t)
		n = kve_token_bytes(t, (int32_t)id, piece, sizeof(piece));
	CHECK(n == wl && wl > 0 && !memcmp(piece, want, (size_t)wl),
	      "%s: \"%s\" decodes to its own %d bytes (got %d: \"%s\") %s", what,
	      esc(want, (size_t)wl, shown, sizeof(shown)), wl, n,
	      n > 0 ? esc(piece, (size_t)n < sizeof(piece) ? (size_t)n : sizeof(piece),
			  shown + 64, 64) : "", t ? "" : err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

static void non_byte_level(const char *path)
{
	/* U+0801 for "<|r": a code point outside GPT-2's byte table */
	respelled(path, 0, "\xe0\xa0\x81", "a non-byte-level BPE token (U+0801...)");
	/*
	 * Ill-formed UTF-8 is not byte-level text either: an overlong form
	 * must not decode as the character it imitates ("\xe0\x81\x81" is
	 * not 'A', "\xc0\xaf" not '/'); its bytes pass through as they are,
	 * as the pre-tokenizer keeps ill-formed input bytes.
	 */
	respelled(path, 1, "\xe0\x81\x81", "an overlong 3-byte 'A' in a BPE token");
	respelled(path, 2, "\xc0\xaf", "an overlong 2-byte '/' in a BPE token");
	respelled(path, 3, "\xc1\x81", "an overlong 2-byte 'A' in a BPE token");
	/* a surrogate, and a lead byte cut short by ASCII */
	respelled(path, 4, "\xed\xa0\x80", "a surrogate (U+D800) in a BPE token");
	respelled(path, 5, "\xc4", "a lead byte without its continuation in a BPE token");
	/* U+0200: one past the code point -> byte table's 512 entries */
	respelled(path, 6, "\xc8\x80", "U+0200 (past the byte table) in a BPE token");
}

/*
 * Typed arrays: tokenizer.ggml.token_type must hold int32s and
 * tokenizer.ggml.scores floats. Each retyped in place (a 4-byte type for
 * another, so the file stays well-formed) is a load error naming the key.
 */
static void array_types(const char *path)
{
	static const struct {
		const char *key, *want;
		uint32_t from, to;
	} cases[] = {
		{ "tokenizer.ggml.token_type", "token_type must be", GGUF_I32, GGUF_U32 },
		{ "tokenizer.ggml.token_type", "token_type must be", GGUF_I32, GGUF_F32 },
		{ "tokenizer.ggml.scores", "scores must be", GGUF_F32, GGUF_I32 },
	};
	size_t c;

	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t len, i, kl = strlen(cases[c].key), hit = 0;
		uint8_t *b = tc_slurp(path, &len);
		char err[256] = "";
		struct kve_model *m = NULL;
		struct kve_tokenizer *t = NULL;
		uint32_t at;

		for (i = 0; b && i + kl + 8 < len && !hit; i++)	/* key, ARR, type */
			if (!memcmp(b + i, cases[c].key, kl) && b[i + kl] == GGUF_ARR &&
			    (memcpy(&at, b + i + kl + 4, 4), at == cases[c].from)) {
				at = cases[c].to;
				memcpy(b + i + kl + 4, &at, 4);
				hit = 1;
			}
		m = hit ? kve_model_load_mem(b, len, err, sizeof(err)) : NULL;
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		CHECK(hit && m && !t && strstr(err, cases[c].want),
		      "%s as type %u instead of %u is a load error: \"%s\"", cases[c].key,
		      cases[c].to, cases[c].from, err);
		kve_tokenizer_free(t);
		kve_model_free(m);
		free(b);
	}
}


/* Changes the first n bytes equal to `from` in b to `to`: 1 if found. */
static int replace_first(uint8_t *b, size_t len, const char *from, const char *to, size_t n)
{
	size_t i;

	for (i = 0; b && i + n <= len; i++)
		if (!memcmp(b + i, from, n)) {
			memcpy(b + i, to, n);
			return 1;
		}
	return 0;
}

/* The data of array `key` (element type et) in a GGUF file's bytes, its
 * count in *n; 0 if absent. */
static size_t gguf_array_at(const uint8_t *b, size_t len, const char *key, uint32_t et,
			    uint64_t *n)
{
	size_t kl = strlen(key), i;
	uint32_t ty, aty;

	for (i = 8; b && i + kl + 16 < len; i++) {
		uint64_t sl;

		memcpy(&sl, b + i - 8, 8);
		memcpy(&ty, b + i + kl, 4);
		memcpy(&aty, b + i + kl + 4, 4);
		if (sl == kl && !memcmp(b + i, key, kl) && ty == GGUF_ARR && aty == et) {
			memcpy(n, b + i + kl + 8, 8);
			return i + kl + 16;
		}
	}
	return 0;
}

/*
 * tokenizer.ggml.scores with one float fewer than there are tokens: the
 * array's count lowered by one and its last float cut out (4 zero bytes
 * appended, so every tensor still lies inside the file; the weights are
 * misread, which the tokenizer does not care about). A load error, not a
 * read of the next key's bytes as the last score.
 */
static void scores_count(const char *path)
{
	static const char key[] = "tokenizer.ggml.scores";
	size_t len, at = 0;
	uint8_t *b = tc_slurp(path, &len), *c = NULL;
	char err[256] = "";
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	uint64_t n = 0;

	at = gguf_array_at(b, len, key, GGUF_F32, &n);
	if (at) {
		at -= 8;	/* the count */
		memcpy(&n, b + at, 8);
		c = calloc(1, len);
	}
	if (c && n && at + 8 + 4 * n <= len) {
		size_t last = at + 8 + 4 * (n - 1);	/* the last float */

		memcpy(c, b, last);
		memcpy(c + last, b + last + 4, len - last - 4);	/* 4 zero bytes at the end */
		n--;
		memcpy(c + at, &n, 8);
		m = kve_model_load_mem(c, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	}
	CHECK(m && !t && strstr(err, "scores must be"),
	      "tokenizer.ggml.scores with %llu floats for %llu tokens is a load error: \"%s\"",
	      (unsigned long long)n, (unsigned long long)n + 1, err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(c);
	free(b);
}

/*
 * A byte-level BPE vocabulary whose byte 0x00 is not id 0: the tokens of
 * ids 0 and 1 (U+0100 and U+0101, the bytes 0x00 and 0x01 in GPT-2's
 * table) swapped in place, same length. Each byte alone encodes to its own
 * token wherever it stands, 0x00 included.
 */
static void byte_ids_swapped(const char *path)
{
	static const char from[] = "\x02\0\0\0\0\0\0\0\xc4\x80\x02\0\0\0\0\0\0\0\xc4\x81";
	static const char to[] = "\x02\0\0\0\0\0\0\0\xc4\x81\x02\0\0\0\0\0\0\0\xc4\x80";
	size_t len;
	uint8_t *b = tc_slurp(path, &len);
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	char err[256] = "";
	int32_t id0 = -1, id1 = -1;
	int hit = replace_first(b, len, from, to, sizeof(from) - 1);

	m = hit ? kve_model_load_mem(b, len, err, sizeof(err)) : NULL;
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	if (t) {
		kve_tokenize(t, "\x00", 1, 0, &id0, 1);
		kve_tokenize(t, "\x01", 1, 0, &id1, 1);
	}
	CHECK(hit && t && id0 == 1 && id1 == 0, "%s with ids 0 and 1 swapped: byte 0x00 -> %d, "
	      "0x01 -> %d (want 1 and 0) %s", path, id0, id1, err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

/*
 * A byte-level BPE vocabulary whose id 0 takes part in merges: the tokens
 * of id 0 (U+0100, byte 0x00) and of a 2-byte token swapped in place, same
 * length. tok is that token's spelling in the vocabulary, plain the text
 * it stands for: the space's byte token "\xc4\xa0" (" "), the left side of
 * the merges "\xc4\xa0 t", ...; "he", the result of "h e" and the right
 * side of "\xc4\xa0t he". The file loads, and text tokenizes to the same
 * ids with the two exchanged.
 */
static void bpe_merge_id0(const char *path, const struct kve_tokenizer *orig, const char *tok,
			  const char *plain, const char *role)
{
	static const char text[] = "the cat, the theme; then these";
	/* vocabulary entries: a u64 length (2), then the bytes */
	char e0[10] = "\x02\0\0\0\0\0\0\0\xc4\x80", ek[10] = "\x02";
	size_t len;
	uint8_t *b = tc_slurp(path, &len), *p0 = NULL, *pk = NULL;
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	char err[256] = "", shown[16];
	int32_t want[64], got[64], k = -1;
	int nw = kve_tokenize(orig, text, sizeof(text) - 1, 0, want, 64), ng = -1, i, same;

	memcpy(ek + 8, tok, 2);
	if (kve_tokenize(orig, plain, strlen(plain), 0, got, 64) == 1)
		k = got[0];
	p0 = b ? memmem(b, len, e0, sizeof(e0)) : NULL;
	pk = b ? memmem(b, len, ek, sizeof(ek)) : NULL;
	if (p0 && pk) {
		memcpy(p0, ek, sizeof(ek));
		memcpy(pk, e0, sizeof(e0));
		m = kve_model_load_mem(b, len, err, sizeof(err));
	}
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	if (t)
		ng = kve_tokenize(t, text, sizeof(text) - 1, 0, got, 64);
	same = t && k > 0 && nw > 0 && ng == nw;
	for (i = 0; same && i < nw; i++)
		same = got[i] == (want[i] == 0 ? k : want[i] == k ? 0 : want[i]);
	CHECK(same, "%s with ids 0 and %d (\"%s\", %s) swapped: loads, and \"%s\" gives "
	      "the same %d tokens with the two exchanged (got %d) %s", path, k,
	      esc(tok, 2, shown, sizeof(shown)), role, text, nw, ng, t ? "" : err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

/* In a SentencePiece file: ids 0 and k exchange their types and scores
 * (tt, tsc: the arrays' first elements), and the unknown id becomes k */
static void swap_meta_0_k(uint8_t *b, size_t len, size_t tt, size_t tsc, uint64_t k)
{
	static const char key[] = "tokenizer.ggml.unknown_token_id\x04\0\0\0";	/* a u32 */
	uint32_t u = (uint32_t)k;
	uint8_t tmp[4];
	size_t o;

	memcpy(tmp, b + tt, 4);
	memcpy(b + tt, b + tt + 4 * k, 4);
	memcpy(b + tt + 4 * k, tmp, 4);
	memcpy(tmp, b + tsc, 4);
	memcpy(b + tsc, b + tsc + 4 * k, 4);
	memcpy(b + tsc + 4 * k, tmp, 4);
	for (o = 0; o + sizeof(key) + 4 < len; o++)
		if (!memcmp(b + o, key, sizeof(key) - 1)) {
			memcpy(b + o + sizeof(key) - 1, &u, 4);
			break;
		}
}

/*
 * A SentencePiece vocabulary whose id 0 is a piece that merges: ids 0
 * (<unk>) and k (the first 5-byte normal piece, which text merges into)
 * swapped in place with their types and scores, and the unknown id with
 * them (k now). Tokenizing the same text gives the same tokens with 0 and k
 * exchanged: id 0 is a token like any other.
 */
static void spm_ids_swapped(const char *path, const struct kve_tokenizer *orig)
{
	static const char text[] = "the quick brown fox jumps over the lazy dog; then others";
	size_t len, ts, tt, tsc, at0 = 0, atk = 0, o;
	uint64_t n = 0, nt = 0, nsc = 0, i, k = 0;
	uint8_t *b = tc_slurp(path, &len);
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	char err[256] = "";
	int32_t a[128], c[128];
	int na = -1, nc = -2, same = 0, j, hit0 = 0;

	ts = gguf_array_at(b, len, "tokenizer.ggml.tokens", GGUF_STR, &n);
	tt = gguf_array_at(b, len, "tokenizer.ggml.token_type", GGUF_I32, &nt);
	tsc = gguf_array_at(b, len, "tokenizer.ggml.scores", GGUF_F32, &nsc);
	for (i = 0, o = ts; ts && tt && i < n && o + 8 <= len; i++) {
		uint64_t sl;
		int32_t ty;

		memcpy(&sl, b + o, 8);
		memcpy(&ty, b + tt + 4 * i, 4);
		if (!i)
			at0 = o;
		else if (!k && sl == 5 && ty == 1 && at0 && !memcmp(b + at0, b + o, 8))
			k = i, atk = o;
		o += 8 + sl;
	}
	if (k && nt == n && nsc == n && tsc) {
		uint8_t tmp[8];
		char piece[16];
		int pn;

		memcpy(tmp, b + at0 + 8, 5);	/* the texts, then the rest */
		memcpy(b + at0 + 8, b + atk + 8, 5);
		memcpy(b + atk + 8, tmp, 5);
		swap_meta_0_k(b, len, tt, tsc, k);
		m = kve_model_load_mem(b, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		pn = kve_token_bytes(orig, (int32_t)k, piece, sizeof(piece));
		if (t && pn > 0) {
			char in[160];
			int w = snprintf(in, sizeof(in), "%s%.*s%s", text, pn, piece, text);

			na = kve_tokenize(orig, in, (size_t)w, 0, a, 128);
			nc = kve_tokenize(t, in, (size_t)w, 0, c, 128);
			same = na == nc && na > 0;
			for (j = 0; same && j < na; j++) {
				same = c[j] == (a[j] == (int32_t)k ? 0 : a[j] == 0 ? (int32_t)k : a[j]);
				hit0 |= c[j] == 0;
			}
		}
	}
	CHECK(k && t && same && hit0, "%s with ids 0 and %llu (a piece) swapped: the same %d "
	      "tokens, id 0 among them, as ids exchanged (%d before) %s", path,
	      (unsigned long long)k, nc, na, err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(b);
}

/*
 * A SentencePiece vocabulary whose byte fallback token for 0xC3 is id 0:
 * the entries of ids 0 (<unk>, 5 bytes) and k (<0xC3>, 6 bytes) exchanged
 * in the tokens array (the entries between move by a byte; the array keeps
 * its length), their types and scores with them, and the unknown id k
 * now. A character with no piece of its own falls back to its bytes: the
 * same tokens with 0 and k exchanged, id 0 among them. Then, in the file
 * as it was, <0xC3> respelled <0xc3> (no token for the byte) and the
 * unknown id's key renamed (none): the byte becomes id 0, the stated
 * fallback, and the next byte its own token.
 */
static void spm_byte_fallback_id0(const char *path, const struct kve_tokenizer *orig)
{
	static const char text[] = "a\xc3\xb6" "b";	/* ö: no piece of its own */
	static const char unk_key[] = "tokenizer.ggml.unknown_token_id";
	size_t len, ts, tt, tsc, at0 = 0, atk = 0, o;
	uint64_t n = 0, nt = 0, nsc = 0, i, k = 0;
	uint8_t *b = tc_slurp(path, &len), *c = b ? malloc(len) : NULL;
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	char err[256] = "";
	int32_t a[16], g[16], kb6 = -1;
	int na = -1, ng = -2, same = 0, j, hit0 = 0;

	ts = gguf_array_at(b, len, "tokenizer.ggml.tokens", GGUF_STR, &n);
	tt = gguf_array_at(b, len, "tokenizer.ggml.token_type", GGUF_I32, &nt);
	tsc = gguf_array_at(b, len, "tokenizer.ggml.scores", GGUF_F32, &nsc);
	for (i = 0, o = ts; ts && i < n && o + 8 <= len; i++) {
		uint64_t sl;

		memcpy(&sl, b + o, 8);
		if (!i && sl == 5)
			at0 = o;
		else if (sl == 6 && !memcmp(b + o + 8, "<0xC3>", 6))
			k = i, atk = o;
		o += 8 + sl;
	}
	if (c && at0 && k && tt && tsc && nt == n && nsc == n) {
		static const uint8_t ek[14] = "\x06\0\0\0\0\0\0\0<0xC3>";
		uint8_t e0[13];

		memcpy(c, b, len);
		memcpy(e0, b + at0, 13);
		memcpy(c + at0, ek, 14);	/* id 0 is the byte now */
		memcpy(c + at0 + 14, b + at0 + 13, atk - at0 - 13);
		memcpy(c + atk + 1, e0, 13);	/* and k <unk> */
		swap_meta_0_k(c, len, tt, tsc, k);
		m = kve_model_load_mem(c, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		na = kve_tokenize(orig, text, sizeof(text) - 1, 0, a, 16);
		ng = t ? kve_tokenize(t, text, sizeof(text) - 1, 0, g, 16) : -1;
		same = na > 0 && na == ng;
		for (j = 0; same && j < na; j++) {
			same = g[j] == (a[j] == (int32_t)k ? 0 : a[j] == 0 ? (int32_t)k : a[j]);
			hit0 |= g[j] == 0;
		}
	}
	CHECK(k && t && same && hit0, "%s with <unk> (id 0) and <0xC3> (id %llu) exchanged: "
	      "\"a\\xc3\\xb6b\" gives the same %d tokens, id 0 among them, as ids exchanged "
	      "(%d before) %s", path, (unsigned long long)k, ng, na, err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	t = NULL;
	m = NULL;
	same = 0;
	if (c && atk) {	/* no token for 0xC3, no unknown token */
		memcpy(c, b, len);
		memcpy(c + atk + 8, "<0xc3>", 6);
		for (o = 0; o + 40 < len; o++)
			if (!memcmp(c + o, unk_key, sizeof(unk_key) - 1)) {
				c[o + sizeof(unk_key) - 2] = 'X';
				break;
			}
		m = kve_model_load_mem(c, len, err, sizeof(err));
		t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
		for (j = 0; j + 1 < na; j++)	/* 0xB6's token: after 0xC3's */
			if (a[j] == (int32_t)k)
				kb6 = a[j + 1];
		ng = t ? kve_tokenize(t, text, sizeof(text) - 1, 0, g, 16) : -1;
		for (j = 0; j + 1 < ng; j++)
			same |= g[j] == 0 && g[j + 1] == kb6 && kb6 > 0;
	}
	CHECK(t && same, "%s with no token for byte 0xC3 and no unknown token: the byte "
	      "becomes id 0, 0xB6 its own token %d (%d tokens) %s", path, kb6, ng, err);
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(c);
	free(b);
}

/*
 * Every byte alone encodes to its own byte token in a byte-level BPE
 * vocabulary: never to the unknown token, even where the vocabulary names
 * one (tokenizer.ggml.unknown_token_id; bpe-qwen2.gguf has one) and the
 * byte's token is id 0. Returns whether the vocabulary has an unknown token.
 */
static int single_bytes(const struct kve_model *m, const struct kve_tokenizer *t,
			const char *label)
{
	int has_unk = gguf_find_kv(&m->g, "tokenizer.ggml.unknown_token_id") != NULL;
	char p0[16];
	/* id 0 is the byte 0x00's token (the model maker's byte tokens come first) */
	int c, bad = 0, zero = kve_token_bytes(t, 0, p0, sizeof(p0)) == 1 && !p0[0];

	for (c = 0; c < 256; c++) {
		char in = (char)c, piece[16];
		int32_t ids[4];
		int n = kve_tokenize(t, &in, 1, 0, ids, 4);

		if (n != 1 || kve_token_bytes(t, ids[0], piece, sizeof(piece)) != 1 ||
		    piece[0] != in) {
			if (bad++ < 3)
				printf("# byte 0x%02x -> %d tokens, the first %d\n", c, n,
				       n > 0 ? ids[0] : -1);
		}
	}
	CHECK(!bad, "%s: each of the 256 bytes alone is its own byte token (%d are not; "
	      "%s unknown token, id 0 %s)", label, bad,
	      has_unk ? "with an" : "no", zero ? "the byte 0x00" : "another token");
	return has_unk && zero;
}

/* A copy of the file with the first `n` bytes equal to `from` changed to
 * `to`: the tokenizer's load error ("" when it loads), the bos and eos
 * ids in *bos and *eos when it does. */
static int edited_load(const uint8_t *orig, size_t len, const char *from, const char *to,
		       size_t n, char *err, size_t errlen, int32_t *bos, int32_t *eos)
{
	uint8_t *c = malloc(len);
	struct kve_model *m = NULL;
	struct kve_tokenizer *t = NULL;
	int hit;

	err[0] = 0;
	if (!c)
		return 0;
	memcpy(c, orig, len);
	hit = replace_first(c, len, from, to, n);
	m = hit ? kve_model_load_mem(c, len, err, errlen) : NULL;
	t = m ? kve_tokenizer_create(m, err, errlen) : NULL;
	if (t) {
		err[0] = 0;
		*bos = kve_tokenizer_bos(t);
		*eos = kve_tokenizer_eos(t);
	}
	kve_tokenizer_free(t);
	kve_model_free(m);
	free(c);
	return hit && m;	/* the edit was made and the model loaded */
}

/*
 * The tokenizer's load errors, each from a file edited in place (same
 * length): the kind of tokenizer, the token list, a BPE file's merges,
 * each side of a merge and its result not in the vocabulary; and the
 * special ids' bound (an id past the vocabulary is none).
 */
static void load_errors(const char *spm_path, const char *bpe_path)
{
	/* the kind's value: the key, STR, length, bytes */
#define KIND(v) "tokenizer.ggml.model\x08\0\0\0" v
	static const struct {
		int bpe;
		const char *from, *to, *want;
		size_t n;
	} cases[] = {
		{ 0, "tokenizer.ggml.model", "tokenizer.ggml.modex",
		  "tokenizer.ggml.model is missing or not a string", 20 },
		{ 0, KIND("\x05\0\0\0\0\0\0\0llama"), KIND("\x05\0\0\0\0\0\0\0llamb"),
		  "model 'llamb' not supported (llama, gpt2)", 20 + 4 + 8 + 5 },
		{ 1, KIND("\x04\0\0\0\0\0\0\0gpt2"), KIND("\x04\0\0\0\0\0\0\0gpt3"),
		  "model 'gpt3' not supported", 20 + 4 + 8 + 4 },
		{ 0, "tokenizer.ggml.tokens", "tokenizer.ggml.tokenz",
		  "tokenizer.ggml.tokens is missing or not a string array", 21 },
		{ 1, "tokenizer.ggml.merges", "tokenizer.ggml.merger",
		  "gpt2 tokenizer without tokenizer.ggml.merges", 21 },
	};
#undef KIND
	size_t lens[2], c;
	uint8_t *b[2] = { tc_slurp(spm_path, &lens[0]), tc_slurp(bpe_path, &lens[1]) };
	char err[256];
	int32_t bos = -2, eos = -2;

	CHECK(b[0] && b[1], "read %s and %s", spm_path, bpe_path);
	if (!b[0] || !b[1])
		goto out;
	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		CHECK(edited_load(b[cases[c].bpe], lens[cases[c].bpe], cases[c].from, cases[c].to,
				  cases[c].n, err, sizeof(err), &bos, &eos) && strstr(err, cases[c].want),
		      "%s: edited file (%zu): refused, naming %s (\"%s\")", cases[c].bpe ? "bpe" : "spm",
		      c, cases[c].want, err);
	}
	{	/* the merge "Ġ t" (length 4, then its bytes): each part made unknown */
		static const struct {
			const char *to, *want;
		} m[] = {
			{ "\x04\0\0\0\0\0\0\0\x01\x01 t", "('\x01\x01 t'): left side is not in the vocabulary" },
			{ "\x04\0\0\0\0\0\0\0\xc4\xa0 \x01", "right side is not in the vocabulary" },
			{ "\x04\0\0\0\0\0\0\0t \xc4\xa0", "('t \xc4\xa0'): result is not in the vocabulary" },
		};
		for (c = 0; c < sizeof(m) / sizeof(m[0]); c++)
			CHECK(edited_load(b[1], lens[1], "\x04\0\0\0\0\0\0\0\xc4\xa0 t", m[c].to, 12, err,
					  sizeof(err), &bos, &eos) && strstr(err, m[c].want),
			      "bpe: a merge's %s (\"%s\")", m[c].want, err);
	}
	{	/* a right side that is no token while the result is one: a
		 * 3-letter token "xyz" whose "yz" is not a token, spelt "x yz" */
		char e2[256] = "";
		struct kve_model *bm = kve_model_load_mem(b[1], lens[1], e2, sizeof(e2));
		const struct gguf_kv *tk = bm ? gguf_find_kv(&bm->g, "tokenizer.ggml.tokens") : NULL;
		uint64_t i, j;
		char to[12] = "\x04\0\0\0\0\0\0\0";
		int found = 0;

		for (i = 0; tk && i < tk->arr_n && !found; i++) {
			struct gguf_str x = gguf_arr_str(tk, i);
			int known = 0;

			if (x.n != 3 || x.p[0] < 'a' || x.p[0] > 'z' || x.p[1] < 'a' || x.p[1] > 'z' ||
			    x.p[2] < 'a' || x.p[2] > 'z')
				continue;
			for (j = 0; j < tk->arr_n && !known; j++) {
				struct gguf_str y = gguf_arr_str(tk, j);
				known = y.n == 2 && !memcmp(y.p, x.p + 1, 2);
			}
			if (known)
				continue;
			to[8] = x.p[0];
			to[9] = ' ';
			memcpy(to + 10, x.p + 1, 2);
			found = 1;
		}
		CHECK(found && edited_load(b[1], lens[1], "\x04\0\0\0\0\0\0\0\xc4\xa0 t", to, 12, err,
					   sizeof(err), &bos, &eos) &&
		      strstr(err, "right side is not in the vocabulary"),
		      "bpe: a merge whose right side is no token but whose result is: refused (\"%s\")",
		      found ? err : "no such token found");
		kve_model_free(bm);
	}
	{	/* a token list one shorter than the embedding's rows (a file may
		 * say so: the parser takes any count): refused, not indexed past */
		char e2[256] = "";
		struct kve_model *sm = kve_model_load_mem(b[0], lens[0], e2, sizeof(e2));
		struct gguf_kv *tk = sm ? (struct gguf_kv *)gguf_find_kv(&sm->g,
									"tokenizer.ggml.tokens") : NULL;
		struct kve_tokenizer *st = NULL;

		if (tk)
			tk->arr_n--;
		st = tk ? kve_tokenizer_create(sm, err, sizeof(err)) : NULL;
		CHECK(tk && !st && strstr(err, "tokens but the model has a vocabulary of"),
		      "spm: %llu tokens for a vocabulary of %u: refused (\"%s\")",
		      tk ? (unsigned long long)tk->arr_n : 0ull,
		      sm ? kve_model_info(sm)->vocab : 0u, tk ? err : e2);
		kve_tokenizer_free(st);
		kve_model_free(sm);
	}
	{	/* special ids: the last token is one, one past the vocabulary none */
		uint32_t nv = 0, v;
		const uint8_t *p = NULL;
		char want[32], to[32];
		int32_t bos2 = -2, eos2 = -2;

		for (c = 0; !p && c + 21 + 12 <= lens[0]; c++)
			if (!memcmp(b[0] + c, "tokenizer.ggml.tokens", 21))
				p = b[0] + c;
		if (p)
			memcpy(&nv, p + 21 + 4 + 4, 4);	/* ARR, element type, count (low half) */
		for (v = nv - 1; nv && v <= nv; v++) {
			/* the key's end, U32, the value */
			memcpy(want, "bos_token_id\x04\0\0\0\x01\0\0\0", 20);
			memcpy(to, want, 16);
			memcpy(to + 16, &v, 4);
			edited_load(b[0], lens[0], want, to, 20, err, sizeof(err), &bos, &eos);
			memcpy(want, "eos_token_id\x04\0\0\0\x02\0\0\0", 20);
			memcpy(to, want, 16);
			memcpy(to + 16, &v, 4);
			edited_load(b[0], lens[0], want, to, 20, err, sizeof(err), &bos2, &eos2);
			CHECK(!err[0] && bos == (v < nv ? (int32_t)v : -1) && eos2 == (v < nv ? (int32_t)v : -1),
			      "spm: bos and eos ids %u of a vocabulary of %u: %d and %d %s", v, nv, bos, eos2, err);
		}
	}
	{	/* a BOS of id 0 is a BOS like any other: it starts the ids */
		static const char want[20] = "bos_token_id\x04\0\0\0\x01\0\0\0";
		char to[20];
		uint8_t *c0 = malloc(lens[0]);
		struct kve_model *m0 = NULL;
		struct kve_tokenizer *t0 = NULL;
		int32_t ids[8] = { -2 };
		int n = -1;

		memcpy(to, want, 16);
		memset(to + 16, 0, 4);
		if (c0 && replace_first(memcpy(c0, b[0], lens[0]), lens[0], want, to, 20))
			m0 = kve_model_load_mem(c0, lens[0], err, sizeof(err));
		t0 = m0 ? kve_tokenizer_create(m0, err, sizeof(err)) : NULL;
		if (t0)
			n = kve_tokenize(t0, "hi", 2, 1, ids, 8);
		CHECK(t0 && kve_tokenizer_bos(t0) == 0 && n >= 2 && ids[0] == 0,
		      "spm: bos id 0: tokenizing with BOS gives %d ids, the first %d", n, ids[0]);
		kve_tokenizer_free(t0);
		kve_model_free(m0);
		free(c0);
	}
out:
	free(b[0]);
	free(b[1]);
}

/*
 * The calls' argument checks and their edges: no tokenizer or no text,
 * ids outside the vocabulary, results longer than the room given (the
 * count is still the full one, nothing written past the room), a
 * streaming decode with too little room and a held-back byte flushed.
 */
static void api_edges(struct kve_tokenizer *t, const char *name)
{
	uint32_t nv = 0, id;
	int32_t ids[64], long_id = -1, e2_id = -1;
	char out[64];
	struct kve_detok d;
	int n, full, ok = 1;

	while (kve_token_bytes(t, (int32_t)nv, NULL, 0) >= 0 && nv < (1u << 24))
		nv++;
	ok &= kve_tokenize(NULL, "a", 1, 0, ids, 64) == -EINVAL &&
	      kve_tokenize(t, NULL, 1, 0, ids, 64) == -EINVAL &&
	      kve_tokenize(t, NULL, 0, 0, ids, 64) == 0 &&
	      kve_token_bytes(NULL, 0, out, sizeof(out)) == -EINVAL &&
	      kve_token_bytes(t, -1, out, sizeof(out)) == -EINVAL &&
	      kve_token_bytes(t, (int32_t)nv, out, sizeof(out)) == -EINVAL && nv > 256;
	CHECK(ok, "%s: tokenize without a tokenizer, or without text but a length -> EINVAL; no "
	      "text of length 0 -> 0 ids; token bytes of no tokenizer, id -1, id %u (the "
	      "vocabulary's size) -> EINVAL", name, nv);

	/* room for 3 ids of a text that needs more: the full count, 3 written */
	memset(ids, 0x7f, sizeof(ids));
	full = kve_tokenize(t, "hello world, hello arena", 24, 0, NULL, 0);
	n = kve_tokenize(t, "hello world, hello arena", 24, 0, ids, 3);
	CHECK(full > 3 && n == full && ids[2] != 0x7f7f7f7f && ids[3] == 0x7f7f7f7f,
	      "%s: tokenize with room for 3 of %d ids: returns %d, writes 3", name, full, n);

	for (id = 0; id < nv && (long_id < 0 || e2_id < 0); id++) {
		n = kve_token_bytes(t, (int32_t)id, out, sizeof(out));
		if (n >= 4 && n < 16 && long_id < 0)
			long_id = (int32_t)id;
		if (n == 1 && (unsigned char)out[0] == 0xe2 && e2_id < 0)
			e2_id = (int32_t)id;
	}
	if (long_id >= 0) {
		char want[64];

		n = kve_token_bytes(t, long_id, want, sizeof(want));
		memset(out, '#', sizeof(out));
		CHECK(kve_token_bytes(t, long_id, out, 2) == n && !memcmp(out, want, 2) &&
		      out[2] == '#', "%s: token %d's %d bytes with room for 2: the count, 2 written",
		      name, long_id, n);
		kve_detok_init(&d, t);
		CHECK(kve_detok_push(&d, long_id, out, 1) == -ENOSPC &&
		      kve_detok_push(&d, -1, out, sizeof(out)) == -EINVAL &&
		      kve_detok_push(&d, (int32_t)nv, out, sizeof(out)) == -EINVAL,
		      "%s: streaming decode: token %d with room for 1 byte -> ENOSPC, ids -1 and "
		      "%u -> EINVAL", name, long_id, nv);
	} else {
		CHECK(0, "%s: no token of 4 to 15 bytes", name);
	}
	if (e2_id >= 0) {
		kve_detok_init(&d, t);
		n = kve_detok_push(&d, e2_id, out, sizeof(out));
		CHECK(n == 0 && kve_detok_flush(&d, out, 0) == -ENOSPC &&
		      kve_detok_flush(&d, out, 1) == 1 && (unsigned char)out[0] == 0xe2 &&
		      kve_detok_flush(&d, out, 1) == 0,
		      "%s: the byte 0xe2 (a character's start) is held back, a flush with no room "
		      "-> ENOSPC, with room for it gives it, then nothing", name);
	} else {
		CHECK(0, "%s: no token for the byte 0xe2", name);
	}
}

/*
 * BPE merging is O(n log n) per word: one pre-tokenized word of 256 KiB
 * letters (the gpt2 split keeps a run of letters whole) encodes in well
 * under a second, where rescanning every pair per merge took minutes; its
 * ids still spell the word.
 */
static void long_word(struct kve_tokenizer *t)
{
	size_t n = 256 << 10, i, got = 0;
	char *w = malloc(n), piece[64];
	int32_t *ids = malloc(n * sizeof(*ids));
	uint32_t x = 12345;
	struct timespec a, b;
	double ms;
	int k, ok = 1;

	if (!w || !ids) {
		CHECK(0, "long word: out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		w[i] = (char)('a' + (x >> 16) % 6);	/* few letters: many merges */
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	k = kve_tokenize(t, w, n, 0, ids, n);
	clock_gettime(CLOCK_MONOTONIC, &b);
	ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	for (i = 0; k > 0 && i < (size_t)k && ok; i++) {
		int l = kve_token_bytes(t, ids[i], piece, sizeof(piece));

		ok = l > 0 && got + (size_t)l <= n && !memcmp(w + got, piece, (size_t)l);
		got += l > 0 ? (size_t)l : 0;
	}
	CHECK(k > 0 && (size_t)k < n && ok && got == n && ms < 2000,
	      "BPE: a 256 KiB word encodes in %.0f ms to %d tokens that spell it", ms, k);
out:
	free(w);
	free(ids);
}

int main(int argc, char **argv)
{
	char err[256];
	struct kve_model *ms, *mb, *mx[8];
	struct kve_tokenizer *ts, *tb;
	int i, nx = 0, unk_zero;

	if (argc < 3) {
		fprintf(stderr, "usage: test_tokenizer SPM_MODEL BPE_MODEL...\n");
		return 2;
	}
	without_jit(argv[2]);
	pretok_splits();
	ms = kve_model_load(argv[1], err, sizeof(err));
	mb = kve_model_load(argv[2], err, sizeof(err));
	if (!ms || !mb) {
		CHECK(0, "load models: %s", err);
		return tc_done();
	}
	ts = kve_tokenizer_create(ms, err, sizeof(err));
	CHECK(ts && kve_tokenizer_kind(ts) == KVE_TOK_SPM, "SPM tokenizer from metadata %s", ts ? "" : err);
	tb = kve_tokenizer_create(mb, err, sizeof(err));
	CHECK(tb && kve_tokenizer_kind(tb) == KVE_TOK_BPE &&
	      !strcmp(kve_pretok_name(kve_tokenizer_pretok(tb)), "gpt2"),
	      "BPE tokenizer (gpt2 pre-tokenizer) from metadata %s", tb ? "" : err);
	if (!ts || !tb)
		return tc_done();
	round_trips(ts, "spm");
	api_edges(ts, "spm");
	lower_hex(argv[1]);
	array_types(argv[1]);
	scores_count(argv[1]);
	spm_ids_swapped(argv[1], ts);
	spm_byte_fallback_id0(argv[1], ts);
	round_trips(tb, "bpe gpt2");
	api_edges(tb, "bpe gpt2");
	unk_zero = single_bytes(mb, tb, "bpe gpt2");
	pre_metadata(argv[2]);
	bad_merge(argv[2]);
	load_errors(argv[1], argv[2]);
	non_byte_level(argv[2]);
	byte_ids_swapped(argv[2]);
	bpe_merge_id0(argv[2], tb, "\xc4\xa0", " ", "a merge's left side");
	bpe_merge_id0(argv[2], tb, "he", "he", "a merge's result and another's right side");
	duplicate_first_id(argv[2]);
	long_word(tb);
	for (i = 3; i < argc && nx < 8; i++) {
		struct kve_tokenizer *tx;
		char label[64];

		mx[nx] = kve_model_load(argv[i], err, sizeof(err));
		tx = mx[nx] ? kve_tokenizer_create(mx[nx], err, sizeof(err)) : NULL;
		CHECK(tx && kve_tokenizer_kind(tx) == KVE_TOK_BPE, "BPE tokenizer of %s %s",
		      argv[i], tx ? "" : err);
		if (!tx)
			continue;
		snprintf(label, sizeof(label), "bpe %s", kve_pretok_name(kve_tokenizer_pretok(tx)));
		round_trips(tx, label);
		unk_zero |= single_bytes(mx[nx], tx, label);
		if (strcmp(kve_pretok_name(kve_tokenizer_pretok(tx)), "gpt2"))
			pre_metadata(argv[i]);
		kve_tokenizer_free(tx);
		nx++;
	}

	CHECK(unk_zero, "a BPE vocabulary with an unknown token and id 0 a byte token was tried");
	{	/* byte fallback: CJK is not in the SPM vocabulary, and the
		 * model maker holds back U+00DF */
		int32_t ids[32];
		char piece[16];
		int n = kve_tokenize(ts, "\xe6\x97\xa5\xc3\x9f", 5, 0, ids, 32), k, bytes = 0;
		for (k = 0; k < n; k++)
			if (kve_token_bytes(ts, ids[k], piece, sizeof(piece)) == 1 &&
			    (unsigned char)piece[0] >= 0x80)
				bytes++;
		CHECK(bytes == 5, "SPM byte fallback: 5 UTF-8 bytes -> 5 <0xXX> tokens (got %d of %d)",
		      bytes, n);
	}
	{	/* an ASCII letter before a stray continuation byte stays a
		 * character of its own: "a\x80" is "a"'s tokens, then <0x80> */
		int32_t a[8], ax[8];
		int na = kve_tokenize(ts, "a", 1, 0, a, 8), nx = kve_tokenize(ts, "a\x80", 2, 0, ax, 8);
		char piece[8];

		CHECK(na > 0 && nx == na + 1 && !memcmp(a, ax, (size_t)na * sizeof(*a)) &&
		      kve_token_bytes(ts, ax[na], piece, sizeof(piece)) == 1 &&
		      (unsigned char)piece[0] == 0x80,
		      "SPM: \"a\\x80\" is \"a\" (%d tokens) then the byte 0x80 (%d tokens)", na, nx);
	}
	{	/* streaming: a character arrives as byte tokens and is held
		 * until complete; the first and last lead byte of each length,
		 * 0xf1 and 0xf3 (U+50000, U+F0000) between */
		static const char *const chars[] = {
			"\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xef\xbf\xbf",
			"\xf0\x9f\x98\x80", "\xf1\x90\x80\x80", "\xf3\xb0\x80\x80",
			"\xf4\x8f\xbf\xbf",
		};
		size_t f;

		for (f = 0; f < sizeof(chars) / sizeof(chars[0]); f++) {
			int32_t ids[32];
			char out[64];
			struct kve_detok d;
			int len = (int)strlen(chars[f]);
			int n = kve_tokenize(ts, chars[f], (size_t)len, 0, ids, 32), k, w, held = 1;

			kve_detok_init(&d, ts);
			for (k = 0; k < n - 1; k++) {
				w = kve_detok_push(&d, ids[k], out, sizeof(out));
				/* only the dummy-prefix token may produce output,
				 * and it is dropped at the start of a stream */
				held &= w == 0;
			}
			w = kve_detok_push(&d, ids[n - 1], out, sizeof(out));
			CHECK(held && w == len && !memcmp(out, chars[f], (size_t)len),
			      "streaming holds a split character (lead 0x%02x, %d tokens) until it "
			      "is complete", (unsigned char)chars[f][0], n);
		}
	}
	{	/* asking with too little room returns the size needed */
		int32_t one[1];
		int need = kve_tokenize(tb, "Hello, world!", 13, 0, NULL, 0);
		int again = kve_tokenize(tb, "Hello, world!", 13, 0, one, 1);
		CHECK(need > 1 && again == need, "size query: %d tokens needed", need);
	}
	{	/* merge order: find merges "a b" and "b c" over single
		 * characters where neither "ab c" nor "a bc" exists; "abc" must
		 * become the lower-ranked pair plus the third character */
		const struct gguf_kv *mk = gguf_find_kv(&mb->g, "tokenizer.ggml.merges");
		uint64_t i, j;
		int found = 0;
		for (i = 0; mk && i < mk->arr_n && !found; i++) {
			struct gguf_str x = gguf_arr_str(mk, i);
			if (x.n != 3 || x.p[1] != ' ' || x.p[0] < 'a' || x.p[0] > 'z' ||
			    x.p[2] < 'a' || x.p[2] > 'z')
				continue;
			for (j = 0; j < mk->arr_n && !found; j++) {
				struct gguf_str y = gguf_arr_str(mk, j);
				char word[4], first[3], last[3];
				int32_t ids[8], want_a[2], want_b[2];
				int n, n1, n2, k, three = 0;
				if (j == i || y.n != 3 || y.p[1] != ' ' || y.p[0] != x.p[2] ||
				    y.p[2] < 'a' || y.p[2] > 'z')
					continue;
				/* skip if any merge builds the whole word */
				for (k = 0; k < (int)mk->arr_n; k++) {
					struct gguf_str z = gguf_arr_str(mk, (uint64_t)k);
					if (z.n == 4 && ((z.p[0] == x.p[0] && z.p[1] == x.p[2] && z.p[3] == y.p[2]) ||
							 (z.p[0] == x.p[0] && z.p[2] == x.p[2] && z.p[3] == y.p[2])))
						three = 1;
				}
				if (three)
					continue;
				word[0] = x.p[0]; word[1] = x.p[2]; word[2] = y.p[2]; word[3] = 0;
				first[0] = x.p[0]; first[1] = x.p[2]; first[2] = 0;
				last[0] = y.p[0]; last[1] = y.p[2]; last[2] = 0;
				/* "x" + word is one pre-token: no leading space */
				n = kve_tokenize(tb, word, 3, 0, ids, 8);
				n1 = kve_tokenize(tb, first, 2, 0, want_a, 2);
				n2 = kve_tokenize(tb, last, 2, 0, want_b, 2);
				if (n1 != 1 || n2 != 1 || n != 2)
					continue;
				found = 1;
				if (i < j)
					CHECK(ids[0] == want_a[0], "merge '%.*s' (rank %llu) beats '%.*s' (rank %llu) on \"%s\"",
					      3, x.p, (unsigned long long)i, 3, y.p, (unsigned long long)j, word);
				else
					CHECK(ids[1] == want_b[0], "merge '%.*s' (rank %llu) beats '%.*s' (rank %llu) on \"%s\"",
					      3, y.p, (unsigned long long)j, 3, x.p, (unsigned long long)i, word);
			}
		}
		CHECK(found, "found overlapping merges to test rank order");
	}
	{	/* equal ranks: "ccc" with a merge "c c" (and none making
		 * "ccc") is "cc" + "c", the leftmost pair merged first */
		const struct gguf_kv *mk = gguf_find_kv(&mb->g, "tokenizer.ggml.merges");
		uint64_t i, k;
		int tried = 0, ok = 1;

		for (i = 0; mk && i < mk->arr_n; i++) {
			struct gguf_str x = gguf_arr_str(mk, i);
			char word[4], two[3];
			int32_t ids[8], cc[2], c1[2];
			int n, three = 0;

			if (x.n != 3 || x.p[1] != ' ' || x.p[0] != x.p[2] ||
			    x.p[0] < 'a' || x.p[0] > 'z')
				continue;
			for (k = 0; k < mk->arr_n; k++) {
				struct gguf_str z = gguf_arr_str(mk, k);
				int q, cs = 0, sp = 0;

				for (q = 0; z.n == 4 && q < 4; q++) {
					cs += z.p[q] == x.p[0];
					sp += z.p[q] == ' ';
				}
				three |= cs == 3 && sp == 1;	/* "cc c" or "c cc" */
			}
			if (three)
				continue;
			memset(word, x.p[0], 3);
			word[3] = 0;
			memcpy(two, word, 2);
			two[2] = 0;
			n = kve_tokenize(tb, word, 3, 0, ids, 8);
			if (kve_tokenize(tb, two, 2, 0, cc, 2) != 1 ||
			    kve_tokenize(tb, word, 1, 0, c1, 2) != 1)
				continue;
			tried++;
			if (n != 2 || ids[0] != cc[0] || ids[1] != c1[0]) {
				ok = 0;
				printf("# \"%s\" -> %d tokens: %d %d, want %d %d\n", word, n,
				       ids[0], n > 1 ? ids[1] : -1, cc[0], c1[0]);
			}
		}
		CHECK(tried && ok, "equal-rank merges apply leftmost first (\"ccc\" = \"cc\" \"c\", "
		      "%d letters tried)", tried);
	}
	kve_tokenizer_free(ts);
	kve_tokenizer_free(tb);
	kve_model_free(ms);
	kve_model_free(mb);
	while (nx)
		kve_model_free(mx[--nx]);
	return tc_done();
}
