// SPDX-License-Identifier: MIT
/*
 * test_tokenizer.c - the tokenizers on vocabularies kva-mkmodel writes:
 * encode/decode round trips, byte fallback, streaming detokenisation that
 * never splits a UTF-8 character, BOS handling, and BPE merge order (the
 * lower-ranked of two overlapping merges wins). ref.py compares full
 * encodings with an independent implementation.
 *
 * usage: test_tokenizer SPM_MODEL BPE_MODEL
 */
#include "engine_internal.h"
#include "tcheck.h"

static const char *const texts[] = {
	"Hello, world!", "  leading and  double  spaces ", "it's they've we'll",
	"tabs\tand\nnewlines\n", "Caf\xc3\xa9 Stra\xc3\x9f" "e \xc3\xbc",
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80", "\xff\xfe\xc3", "x", "",
	"The decode worker reads them in place, without a copy.",
};

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

static void round_trips(struct kve_tokenizer *t, const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		int32_t ids[512];
		char out[2048];
		size_t len = strlen(texts[i]), o = 0;
		struct kve_detok d;
		int n = kve_tokenize(t, texts[i], len, 1, ids, 512), k, chunks_ok = 1;

		kve_detok_init(&d, t);
		for (k = 0; k < n; k++) {
			int w = kve_detok_push(&d, ids[k], out + o, sizeof(out) - o);
			if (w < 0)
				break;
			/* valid input: every chunk is whole characters */
			if (valid_utf8(texts[i], len) && !valid_utf8(out + o, (size_t)w))
				chunks_ok = 0;
			o += (size_t)w;
		}
		o += (size_t)kve_detok_flush(&d, out + o, sizeof(out) - o);
		CHECK(n > 0 && ids[0] == kve_tokenizer_bos(t) && o == len &&
		      !memcmp(out, texts[i], len) && chunks_ok,
		      "%s round trip (%d tokens, streamed) of \"%.20s\"", name, n, texts[i]);
	}
}

int main(int argc, char **argv)
{
	char err[256];
	struct kve_model *ms, *mb;
	struct kve_tokenizer *ts, *tb;

	if (argc < 3) {
		fprintf(stderr, "usage: test_tokenizer SPM_MODEL BPE_MODEL\n");
		return 2;
	}
	ms = kve_model_load(argv[1], err, sizeof(err));
	mb = kve_model_load(argv[2], err, sizeof(err));
	if (!ms || !mb) {
		CHECK(0, "load models: %s", err);
		return tc_done();
	}
	ts = kve_tokenizer_create(ms, err, sizeof(err));
	CHECK(ts && kve_tokenizer_kind(ts) == KVE_TOK_SPM, "SPM tokenizer from metadata %s", ts ? "" : err);
	tb = kve_tokenizer_create(mb, err, sizeof(err));
	CHECK(tb && kve_tokenizer_kind(tb) == KVE_TOK_BPE, "BPE tokenizer from metadata %s", tb ? "" : err);
	if (!ts || !tb)
		return tc_done();
	round_trips(ts, "spm");
	round_trips(tb, "bpe");

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
	{	/* streaming: a 4-byte emoji arrives as 4 byte tokens */
		int32_t ids[32];
		char out[64];
		struct kve_detok d;
		int n = kve_tokenize(ts, "\xf0\x9f\x98\x80", 4, 0, ids, 32), k, w, held = 1;
		kve_detok_init(&d, ts);
		for (k = 0; k < n - 1; k++) {
			w = kve_detok_push(&d, ids[k], out, sizeof(out));
			/* only the dummy-prefix token may produce output, and it is
			 * dropped at the start of a stream */
			held &= w == 0;
		}
		w = kve_detok_push(&d, ids[n - 1], out, sizeof(out));
		CHECK(held && w == 4 && !memcmp(out, "\xf0\x9f\x98\x80", 4),
		      "streaming holds a split character until it is complete");
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
	kve_tokenizer_free(ts);
	kve_tokenizer_free(tb);
	kve_model_free(ms);
	kve_model_free(mb);
	return tc_done();
}
