// SPDX-License-Identifier: MIT
/*
 * test_gguf.c - the GGUF reader and model loader on hand-made corrupt
 * files: each must fail with an error naming the bad field, and a valid
 * file must parse. Also model-level checks (missing tensor, bad shape,
 * missing metadata) on a real model file edited in memory, and the qwen2
 * architecture's (qwen2.* keys, required Q/K/V biases, NEOX rope; a llama
 * file may carry the biases too).
 *
 * usage: test_gguf LLAMA_MODEL [QWEN2_MODEL]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_internal.h"
#include <fcntl.h>

#include "tcheck.h"

struct w {
	uint8_t b[4096];
	size_t n;
};

static void p8(struct w *w, const void *d, size_t n) { memcpy(w->b + w->n, d, n); w->n += n; }
static void u32(struct w *w, uint32_t v) { p8(w, &v, 4); }
static void u64(struct w *w, uint64_t v) { p8(w, &v, 8); }
static void str(struct w *w, const char *s) { u64(w, strlen(s)); p8(w, s, strlen(s)); }

/* A small valid file: two keys, one F32 tensor [8,2] at offset 0. Field
 * offsets are recorded so tests can corrupt them. */
struct layout {
	size_t version, n_tensors, n_kv, key_len, val_type, arr_type, arr_n, ndims, dim0, ttype,
	       toff;
};

static void build(struct w *w, struct layout *L, uint32_t ttype, uint64_t ne0)
{
	w->n = 0;
	p8(w, "GGUF", 4);
	L->version = w->n; u32(w, 3);
	L->n_tensors = w->n; u64(w, 1);
	L->n_kv = w->n; u64(w, 2);
	L->key_len = w->n; str(w, "general.architecture");
	L->val_type = w->n; u32(w, GGUF_STR); str(w, "llama");
	str(w, "x.list"); u32(w, GGUF_ARR);
	L->arr_type = w->n; u32(w, GGUF_U32);
	L->arr_n = w->n; u64(w, 3);
	u32(w, 1); u32(w, 2); u32(w, 3);
	str(w, "t0");
	L->ndims = w->n; u32(w, 2);
	L->dim0 = w->n; u64(w, ne0); u64(w, 2);
	L->ttype = w->n; u32(w, ttype);
	L->toff = w->n; u64(w, 0);
	while (w->n % 32)
		w->b[w->n++] = 0;
	memset(w->b + w->n, 0, 8 * 2 * 4);
	w->n += ttype == GGML_Q8_0 ? ne0 / 32 * 34 * 2 : ne0 * 2 * 4;
}

static void expect(const struct w *w, size_t len, const char *want, const char *what)
{
	struct gguf g;
	char err[256] = "";
	uint8_t *copy = malloc(len ? len : 1);
	int rc;

	memcpy(copy, w->b, len);	/* exact-size buffer: ASan sees overreads */
	rc = gguf_open_mem(&g, copy, len, err, sizeof(err));
	if (!rc)
		gguf_close(&g);
	CHECK(rc < 0 && strstr(err, want), "%s -> \"%s\"", what, err);
	free(copy);
}

static void set64(struct w *w, size_t off, uint64_t v) { memcpy(w->b + off, &v, 8); }
static void set32(struct w *w, size_t off, uint32_t v) { memcpy(w->b + off, &v, 4); }

static void test_container(void)
{
	struct w w;
	struct layout L;
	struct gguf g;
	char err[256];
	size_t cut;
	int bad = 0;

	build(&w, &L, GGML_F32, 8);
	CHECK(gguf_open_mem(&g, w.b, w.n, err, sizeof(err)) == 0, "valid file parses");
	{
		const struct gguf_tensor *t = gguf_find_tensor(&g, "t0");
		const struct gguf_kv *kv = gguf_find_kv(&g, "x.list");
		CHECK(t && t->ne[0] == 8 && t->ne[1] == 2 && t->size == 64, "tensor t0 [8,2] 64 bytes");
		CHECK(kv && kv->arr_n == 3, "array key with 3 elements");
		gguf_close(&g);
	}
	{	/* GGUF_MAX_DIMS dimensions: a [8,1,1,2] tensor */
		struct w k = { .n = 0 };
		const struct gguf_tensor *t;

		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 1); u64(&k, 0);
		str(&k, "t4"); u32(&k, 4); u64(&k, 8); u64(&k, 1); u64(&k, 1); u64(&k, 2);
		u32(&k, GGML_F32); u64(&k, 0);
		while (k.n % 32)
			k.b[k.n++] = 0;
		memset(k.b + k.n, 0, 64);
		k.n += 64;
		t = gguf_open_mem(&g, k.b, k.n, err, sizeof(err)) ? NULL : gguf_find_tensor(&g, "t4");
		CHECK(t && t->n_dims == 4 && t->ne[3] == 2 && t->size == 64,
		      "a tensor of 4 dimensions (the most) parses");
		if (t)
			gguf_close(&g);
	}
	/* every truncation fails cleanly */
	for (cut = 0; cut < w.n; cut++) {
		uint8_t *c = malloc(cut ? cut : 1);
		memcpy(c, w.b, cut);
		if (!gguf_open_mem(&g, c, cut, err, sizeof(err))) {
			gguf_close(&g);
			bad++;
		}
		free(c);
	}
	CHECK(bad == 0, "all %zu truncations rejected", w.n);
	expect(&w, 6, "truncated reading version", "cut inside version");
	expect(&w, w.n - 4, "exceeds the data section", "cut inside tensor data");

	build(&w, &L, GGML_F32, 8); memcpy(w.b, "GGUG", 4);
	expect(&w, w.n, "bad magic", "wrong magic");
	/* an error buffer of 0 bytes is never written, and none at all is fine */
	{
		char e[2] = { 'x', 'y' };

		CHECK(gguf_open_mem(&g, w.b, w.n, e, 0) < 0 && e[0] == 'x',
		      "a refused file with errlen 0 leaves the buffer alone");
		CHECK(gguf_open_mem(&g, w.b, w.n, NULL, 0) < 0, "a refused file with no buffer");
	}
	build(&w, &L, GGML_F32, 8); set32(&w, L.version, 4);
	expect(&w, w.n, "version 4", "version 4");
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_tensors, 1ull << 40);
	expect(&w, w.n, "tensor_count", "huge tensor_count");
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_kv, 60000);
	expect(&w, w.n, "metadata_kv_count", "kv count past the file");
	build(&w, &L, GGML_F32, 8); set64(&w, L.key_len, 1ull << 62);
	expect(&w, w.n, "string length", "huge key length");
	build(&w, &L, GGML_F32, 8); set32(&w, L.val_type, 77);
	expect(&w, w.n, "unknown value type 77", "unknown value type");
	/* the first type past the table: no read past scalar_size */
	build(&w, &L, GGML_F32, 8); set32(&w, L.val_type, GGUF_NTYPES);
	expect(&w, w.n, "unknown value type 13", "value type GGUF_NTYPES (13)");
	/* each count's limit itself passes its check (and the file then
	 * cannot hold that many); one more is refused by it */
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_tensors, GGUF_MAX_TENSORS);
	expect(&w, w.n, "tensor_count 65536 cannot fit", "tensor_count at the limit (65536)");
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_tensors, GGUF_MAX_TENSORS + 1);
	expect(&w, w.n, "tensor_count 65537 exceeds the limit", "tensor_count past the limit");
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_kv, GGUF_MAX_KV);
	expect(&w, w.n, "metadata_kv_count 65536 and", "kv count at the limit (65536)");
	build(&w, &L, GGML_F32, 8); set64(&w, L.n_kv, GGUF_MAX_KV + 1);
	expect(&w, w.n, "metadata_kv_count 65537 exceeds the limit", "kv count past the limit");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ndims, 5);
	expect(&w, w.n, "n_dims 5", "5 dimensions");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ndims, 0);
	expect(&w, w.n, "n_dims 0", "0 dimensions");
	/* 2^48 elements in all (2^47 x 2) pass the element limit and exceed
	 * the data; one row more is over the limit */
	build(&w, &L, GGML_F32, 8); set64(&w, L.dim0, 1ull << 47);
	expect(&w, w.n, "exceeds the data section", "2^48 elements");
	build(&w, &L, GGML_F32, 8); set64(&w, L.dim0, (1ull << 47) + 1);
	expect(&w, w.n, "zero or too large", "2^48 + 2 elements");
	/* 2^40 x 2^40: the product wraps to 0 in 64 bits */
	build(&w, &L, GGML_F32, 8); set64(&w, L.dim0, 1ull << 40); set64(&w, L.dim0 + 8, 1ull << 40);
	expect(&w, w.n, "zero or too large", "2^40 x 2^40 elements (2^80, 0 in 64 bits)");
	build(&w, &L, GGML_F32, 8); set64(&w, L.dim0, 0);
	expect(&w, w.n, "zero or too large", "zero dimension");
	build(&w, &L, GGML_F32, 8); set64(&w, L.dim0, 1ull << 60);
	expect(&w, w.n, "zero or too large", "2^60 dimension");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ttype, 16);
	expect(&w, w.n, "type 16 (IQ2_XXS) not supported", "unsupported tensor type");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ttype, 99);
	expect(&w, w.n, "type 99 (unknown) not supported", "unknown tensor type");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ttype, GGML_Q4_0);
	expect(&w, w.n, "ne[0]=8 is not a multiple of the Q4_0 block (32)", "Q4_0 row of 8");
	build(&w, &L, GGML_F32, 8); set32(&w, L.ttype, GGML_Q4_K);
	expect(&w, w.n, "ne[0]=8 is not a multiple of the Q4_K block (256)", "Q4_K row of 8");
	build(&w, &L, GGML_F32, 8); set64(&w, L.toff, 3);
	expect(&w, w.n, "not aligned", "misaligned tensor offset");
	build(&w, &L, GGML_F32, 8); set64(&w, L.toff, 1ull << 40);
	expect(&w, w.n, "exceeds the data section", "offset past the end");
	build(&w, &L, GGML_F32, 8); set64(&w, L.toff, UINT64_MAX - 31);
	expect(&w, w.n, "exceeds the data section", "offset near 2^64 (overflow)");
	build(&w, &L, GGML_Q8_0, 48);
	expect(&w, w.n, "not a multiple of the Q8_0 block", "Q8_0 row of 48");
	build(&w, &L, GGML_F32, 8); set64(&w, L.arr_n, 1ull << 62);
	expect(&w, w.n, "key 'x.list': array of 4611686018427387904 4-byte elements exceeds",
	       "an array longer than the file");
	build(&w, &L, GGML_F32, 8); set32(&w, L.arr_type, GGUF_ARR);
	expect(&w, w.n, "key 'x.list': nested arrays are not supported", "an array of arrays");
	build(&w, &L, GGML_F32, 8); set32(&w, L.arr_type, 77);
	expect(&w, w.n, "key 'x.list': unknown array element type 77", "an unknown element type");
	build(&w, &L, GGML_F32, 8); set32(&w, L.arr_type, GGUF_NTYPES);
	expect(&w, w.n, "key 'x.list': unknown array element type 13",
	       "element type GGUF_NTYPES (13)");
	{	/* a key's name in a message: at most 64 bytes, then "...";
		 * unprintable bytes and quotes escaped */
		struct w k = { .n = 0 };
		char name[80], want[128];

		memset(name, 'k', 70);
		name[0] = 1;
		name[1] = '\'';
		name[70] = 0;
		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 1);
		str(&k, name); u32(&k, 77);
		snprintf(want, sizeof(want), "key '\\x01\\x27%.62s...': unknown value type 77",
			 "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk");
		expect(&k, k.n, want, "a 70-byte key with an unknown value type");
	}
	{	/* a string array announcing one string more than 8 bytes each
		 * could fit: refused before reading any */
		struct w k = { .n = 0 };
		char want[96];
		uint64_t left;
		int rc7;

		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 1);
		str(&k, "s.list"); u32(&k, GGUF_ARR); u32(&k, GGUF_STR);
		left = 8 * 7;		/* the bytes after the count: 7 empty strings */
		u64(&k, left / 8 + 1);
		memset(k.b + k.n, 0, left);
		k.n += left;
		snprintf(want, sizeof(want), "key 's.list': array of %llu strings cannot fit in the "
			 "%llu bytes left", (unsigned long long)(left / 8 + 1), (unsigned long long)left);
		expect(&k, k.n, want, "8 strings announced, room for 7");
		/* as many as fit: 7 empty strings ending the file parse */
		k.n -= left + 8;
		u64(&k, left / 8);
		k.n += left;
		rc7 = gguf_open_mem(&g, k.b, k.n, err, sizeof(err));
		CHECK(rc7 == 0, "7 empty strings in the 56 bytes that end the file parse (%s)",
		      rc7 ? err : "");
		if (!rc7)
			gguf_close(&g);
	}
	{	/* a u32 array whose 5 elements exactly end the file parses; a
		 * sixth announced is refused */
		struct w k = { .n = 0 };
		int rc;

		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 1);
		str(&k, "u.list"); u32(&k, GGUF_ARR); u32(&k, GGUF_U32); u64(&k, 5);
		memset(k.b + k.n, 0, 20);
		k.n += 20;
		rc = gguf_open_mem(&g, k.b, k.n, err, sizeof(err));
		CHECK(rc == 0, "5 u32s in the 20 bytes that end the file parse (%s)", rc ? err : "");
		if (!rc)
			gguf_close(&g);
		k.b[k.n - 28] = 6;	/* the count's low byte */
		expect(&k, k.n, "key 'u.list': array of 6 4-byte elements exceeds the 20 bytes left",
		       "6 u32s announced, room for 5");
	}
	{	/* no tensors: the file may end right after its keys (no data
		 * section to align) */
		struct w k = { .n = 0 };
		int rc;

		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 1);
		str(&k, "general.architecture"); u32(&k, GGUF_STR); str(&k, "llama");
		rc = gguf_open_mem(&g, k.b, k.n, err, sizeof(err));
		CHECK(rc == 0 && k.n % 32, "a file with keys and no tensors, %zu bytes (not a "
		      "multiple of the alignment), parses (%s)", k.n, rc ? err : "");
		if (!rc)
			gguf_close(&g);
		k.b[8] = 1;	/* one tensor announced: its info is missing */
		expect(&k, k.n, "truncated", "a tensor announced, none there");
	}
}

/* One key, general.alignment (type atype, value a), and one F32 tensor
 * [8,2] at offset toff; the data section is padded to a. */
static void build_align(struct w *w, uint32_t atype, uint32_t a, uint64_t toff)
{
	uint64_t al = a && !(a & (a - 1)) && a <= 1024 ? a : 32;

	w->n = 0;
	p8(w, "GGUF", 4);
	u32(w, 3);
	u64(w, 1);
	u64(w, 1);
	str(w, "general.alignment");
	u32(w, atype);
	u32(w, a);
	str(w, "t0");
	u32(w, 2);
	u64(w, 8);
	u64(w, 2);
	u32(w, GGML_F32);
	u64(w, toff);
	while (w->n % al)
		w->b[w->n++] = 0;
	memset(w->b + w->n, 0, toff + 64);
	w->n += toff + 64;
}

/*
 * gguf_get_u32 on the integer types: a value that fits in a uint32 is
 * read, a negative one or one above UINT32_MAX is -EINVAL (never wrapped
 * into a huge count), and so are i8, i16 and non-integers.
 */
static void test_get_u32(void)
{
	static const struct {
		uint32_t type;
		int64_t v;
		int ok;
	} cases[] = {
		/* i8 and i16 are not taken for counts at all */
		{ GGUF_U8, 200, 1 }, { GGUF_I8, 100, 0 }, { GGUF_I8, -1, 0 },
		{ GGUF_U16, 60000, 1 }, { GGUF_I16, 2, 0 }, { GGUF_U32, 0xffffffffLL, 1 },
		{ GGUF_I32, 7, 1 }, { GGUF_I32, -1, 0 }, { GGUF_I32, INT32_MIN, 0 },
		{ GGUF_U64, 7, 1 }, { GGUF_U64, 0xffffffffLL, 1 }, { GGUF_U64, 0x100000000LL, 0 },
		{ GGUF_I64, 0xffffffffLL, 1 }, { GGUF_I64, 0x100000000LL, 0 },
		{ GGUF_I64, -1, 0 }, { GGUF_F32, 0, 0 },
	};
	size_t n = sizeof(cases) / sizeof(cases[0]), i, wid;
	static const size_t width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8 };
	struct gguf g;
	struct w w;
	char err[256] = "", key[16];
	int rc;

	w.n = 0;
	p8(&w, "GGUF", 4);
	u32(&w, 3);
	u64(&w, 0);	/* no tensors */
	u64(&w, n);
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "k%zu", i);
		str(&w, key);
		u32(&w, cases[i].type);
		wid = width[cases[i].type];
		p8(&w, &cases[i].v, wid);	/* little-endian: the low bytes */
	}
	while (w.n % 32)
		w.b[w.n++] = 0;
	rc = gguf_open_mem(&g, w.b, w.n, err, sizeof(err));
	CHECK(rc == 0, "a file of integer keys opens %s", err);
	if (rc)
		return;
	for (i = 0; i < n; i++) {
		uint32_t v = 12345;

		snprintf(key, sizeof(key), "k%zu", i);
		rc = gguf_get_u32(&g, key, &v);
		CHECK(cases[i].ok ? rc == 0 && v == (uint32_t)cases[i].v : rc == -EINVAL,
		      "gguf_get_u32 of type %u value %lld: %s (rc %d, %u)", cases[i].type,
		      (long long)cases[i].v, cases[i].ok ? "read" : "refused", rc, v);
	}
	gguf_close(&g);

	/* gguf_get_f32 writes a float and nothing past it, from an F32 or an
	 * F64 (narrowed); other types are refused */
	{
		float f32v = 1.5f;
		double f64v = -0.25;
		struct {
			float f;
			uint8_t canary[4];
		} out;
		int ok;

		w.n = 0;
		p8(&w, "GGUF", 4);
		u32(&w, 3);
		u64(&w, 0);
		u64(&w, 3);
		str(&w, "f");
		u32(&w, GGUF_F32);
		p8(&w, &f32v, 4);
		str(&w, "d");
		u32(&w, GGUF_F64);
		p8(&w, &f64v, 8);
		str(&w, "u");
		u32(&w, GGUF_U32);
		u32(&w, 7);
		while (w.n % 32)
			w.b[w.n++] = 0xee;	/* padding that is not 0 */
		rc = gguf_open_mem(&g, w.b, w.n, err, sizeof(err));
		ok = rc == 0;
		memset(out.canary, 0x5a, sizeof(out.canary));
		ok = ok && gguf_get_f32(&g, "f", &out.f) == 0 && out.f == 1.5f;
		ok = ok && gguf_get_f32(&g, "d", &out.f) == 0 && out.f == -0.25f;
		ok = ok && gguf_get_f32(&g, "u", &out.f) == -EINVAL && out.f == -0.25f &&
		     gguf_get_f32(&g, "none", &out.f) == -ENOENT;
		ok = ok && out.canary[0] == 0x5a && out.canary[1] == 0x5a && out.canary[2] == 0x5a &&
		     out.canary[3] == 0x5a;
		CHECK(ok, "gguf_get_f32: F32 and F64 read into 4 bytes, nothing written past them, "
		      "a U32 refused, a missing key -ENOENT %s", err);
		if (!rc)
			gguf_close(&g);
	}

	/* an error names a long key by its first 64 bytes and "..." */
	{
		char k70[71], want[96];

		memset(k70, 'x', 70);
		k70[70] = 0;
		w.n = 0;
		p8(&w, "GGUF", 4);
		u32(&w, 3);
		u64(&w, 0);
		u64(&w, 2);
		str(&w, k70);
		u32(&w, GGUF_U32);
		u32(&w, 1);
		str(&w, k70);
		u32(&w, GGUF_U32);
		u32(&w, 1);
		snprintf(want, sizeof(want), "duplicate key '%.64s...'", k70);
		expect(&w, w.n, want, "a duplicate 70-byte key, shown cut at 64 bytes");
	}
}

/* general.alignment: a power of two up to GGUF_MAX_ALIGN, as a uint32;
 * tensor offsets and the data section follow it. */
static void test_alignment(void)
{
	static const uint32_t bad[] = { 0, 3, 24, 48, 96, 1000, GGUF_MAX_ALIGN + 1,
					GGUF_MAX_ALIGN * 2, (1u << 31) + 1 };
	static const uint32_t fine[] = { 1, 2, 8, 64, 1024 };
	struct gguf g;
	struct w w;
	char err[256], what[64];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		build_align(&w, GGUF_U32, bad[i], 0);
		snprintf(what, sizeof(what), "alignment %u", bad[i]);
		expect(&w, w.n, "is not a power of two", what);
	}
	for (i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		int rc;

		build_align(&w, GGUF_U32, fine[i], 0);
		rc = gguf_open_mem(&g, w.b, w.n, err, sizeof(err));
		CHECK(rc == 0 && g.alignment == fine[i] && g.data_off % fine[i] == 0,
		      "alignment %u accepted, data section aligned to it %s", fine[i],
		      rc ? err : "");
		if (!rc)
			gguf_close(&g);
	}
	/* the largest: the data section at 64 KiB, past this small file */
	build_align(&w, GGUF_U32, GGUF_MAX_ALIGN, 0);
	expect(&w, w.n, "past the end", "alignment 2^16 on a small file");
	build_align(&w, GGUF_I32, 64, 0);
	expect(&w, w.n, "general.alignment must be a uint32", "alignment of type i32");
	/* offsets must be multiples of the file's alignment, not the default */
	build_align(&w, GGUF_U32, 64, 32);
	expect(&w, w.n, "not aligned to 64", "offset 32 with alignment 64");
	build_align(&w, GGUF_U32, 16, 16);
	i = (size_t)gguf_open_mem(&g, w.b, w.n, err, sizeof(err));
	CHECK(i == 0 && gguf_find_tensor(&g, "t0")->data == g.base + g.data_off + 16,
	      "offset 16 with alignment 16 accepted %s", i ? err : "");
	if (i == 0)
		gguf_close(&g);
}

static void edit_n(const uint8_t *orig, size_t len, const char *from,
		   const char *to, size_t n, const char *want)
{
	uint8_t *c = malloc(len);
	char err[256] = "";
	struct kve_model *m;
	size_t i;

	memcpy(c, orig, len);
	for (i = 0; i + n <= len; i++)
		if (!memcmp(c + i, from, n)) {
			memcpy(c + i, to, n);
			break;
		}
	m = kve_model_load_mem(c, len, err, sizeof(err));
	CHECK(!m && strstr(err, want), "model with '%s' -> '%s': \"%s\"", from, to, err);
	kve_model_free(m);
	free(c);
}

static void edit_and_expect(const uint8_t *orig, size_t len, const char *from,
			    const char *to, const char *want)
{
	edit_n(orig, len, from, to, strlen(from), want);
}

static void replace_all(uint8_t *b, size_t len, const char *from, const char *to, size_t n);

/* The model with the u32 metadata key `key` set to v: loads, or the error. */
static int with_u32(const uint8_t *orig, size_t len, const char *key, uint32_t v,
		    char *err, size_t errlen)
{
	size_t kl = strlen(key), i;
	uint8_t *c = malloc(len);
	struct kve_model *m;
	uint32_t t;

	memcpy(c, orig, len);
	for (i = 0; i + kl + 8 <= len; i++) {
		memcpy(&t, c + i + kl, 4);
		if (!memcmp(c + i, key, kl) && t == GGUF_U32) {
			memcpy(c + i + kl + 4, &v, 4);
			break;
		}
	}
	if (i + kl + 8 > len)
		snprintf(err, errlen, "key %s not found", key);
	m = i + kl + 8 <= len ? kve_model_load_mem(c, len, err, errlen) : NULL;
	kve_model_free(m);
	free(c);
	return m != NULL;
}

/* Each hyper-parameter's range: 0 and one past the limit are "out of
 * range"; the limit itself is not (it may fail later, on shapes). */
static void hyper_ranges(const uint8_t *b, size_t len)
{
	static const struct { const char *key; uint32_t max; } hp[] = {
		{ "llama.embedding_length", 65536 }, { "llama.block_count", 1024 },
		{ "llama.feed_forward_length", 1u << 20 },
		{ "llama.attention.head_count", 1024 }, { "llama.context_length", 1u << 24 },
	};
	char err[256];
	size_t i;

	for (i = 0; i < sizeof(hp) / sizeof(hp[0]); i++) {
		int ok = 1, loaded;

		err[0] = 0;
		ok &= !with_u32(b, len, hp[i].key, 0, err, sizeof(err)) &&
		      strstr(err, "out of range");
		err[0] = 0;
		ok &= !with_u32(b, len, hp[i].key, hp[i].max + 1, err, sizeof(err)) &&
		      strstr(err, "out of range");
		err[0] = 0;
		loaded = with_u32(b, len, hp[i].key, hp[i].max, err, sizeof(err));
		ok &= loaded || (err[0] && !strstr(err, "out of range") && !strstr(err, "not found"));
		CHECK(ok, "%s: 0 and %u out of range, %u not (%s)", hp[i].key, hp[i].max + 1,
		      hp[i].max, loaded ? "loads" : err);
	}
}

static void test_model(const char *path)
{
	size_t len;
	uint8_t *b = tc_slurp(path, &len);
	char err[256];
	struct kve_model *m;

	CHECK(b != NULL, "read %s", path);
	if (!b)
		return;
	m = kve_model_load_mem(b, len, err, sizeof(err));
	CHECK(m != NULL, "model loads from memory");
	kve_model_free(m);
	hyper_ranges(b, len);
	edit_and_expect(b, len, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight",
			"'blk.1.ffn_up.weight' is missing");
	edit_and_expect(b, len, "llama.block_count", "llama.block_counx",
			"llama.block_count is missing");
	/* the first "llama" in the file is general.architecture's value */
	edit_and_expect(b, len, "llama", "llamb",
			"architecture 'llamb' not supported (llama, qwen2, qwen3)");
	/* head_count_kv must divide head_count (4): 3 and 0 do not */
	edit_n(b, len, "head_count_kv\x04\0\0\0\x02", "head_count_kv\x04\0\0\0\x03", 18,
	       "head_count_kv 3 does not divide head_count 4");
	edit_n(b, len, "head_count_kv\x04\0\0\0\x02", "head_count_kv\x04\0\0\0\x00", 18,
	       "head_count_kv 0 does not divide head_count 4");
	/* rope over at most the head (16 dims), an even count */
	edit_n(b, len, "dimension_count\x04\0\0\0\x10", "dimension_count\x04\0\0\0\x12", 20,
	       "rope.dimension_count 18 must be even and <= head dim 16");
	edit_n(b, len, "dimension_count\x04\0\0\0\x10", "dimension_count\x04\0\0\0\x0f", 20,
	       "rope.dimension_count 15 must be even and <= head dim 16");
	edit_n(b, len, "dimension_count\x04\0\0\0\x10", "dimension_count\x04\0\0\0\x00\x01", 21,
	       "rope.dimension_count 256 must be even and <= head dim 16");
	{	/* 14 of 16: partial rope loads */
		uint8_t *c = malloc(len);

		memcpy(c, b, len);
		replace_all(c, len, "dimension_count\x04\0\0\0\x10",
			    "dimension_count\x04\0\0\0\x0e", 20);
		m = kve_model_load_mem(c, len, err, sizeof(err));
		CHECK(m && kve_model_info(m)->rope_dims == 14 && kve_model_info(m)->head_dim == 16,
		      "rope.dimension_count 14 of head dim 16 loads (partial rope) %s", m ? "" : err);
		kve_model_free(m);
		free(c);
	}
	/* the architecture key, a count of another type, the head count
	 * (64 dims: 6 heads do not divide them; 64 heads are 1 dim each, odd),
	 * rope base and epsilon (0, NaN, negative), the embedding tensor */
	edit_and_expect(b, len, "general.architecture", "general.architecturx",
			"general.architecture is missing or not a string");
	edit_n(b, len, "block_count\x04\0\0\0", "block_count\x06\0\0\0", 15,
	       "metadata llama.block_count has the wrong type or range");
	edit_n(b, len, "head_count\x04\0\0\0\x04", "head_count\x04\0\0\0\x06", 15,
	       "embedding_length 64 not divisible by head_count 6");
	edit_n(b, len, "head_count\x04\0\0\0\x04", "head_count\x04\0\0\0\x40", 15,
	       "head dimension 1 must be even and <= 1024");
	edit_n(b, len, "head_count\x04\0\0\0\x04", "head_count\x04\0\0\0\x20", 15,
	       "rope.dimension_count 16 must be even and <= head dim 2");
	/* the head's limit, 1024 dims, from both sides: 4 heads of an
	 * embedding of 4104 are 1026 each (refused), of 4096 1024 each
	 * (accepted here, refused later as the tensors do not match) */
	edit_n(b, len, "embedding_length\x04\0\0\0\x40\0\0\0",
	       "embedding_length\x04\0\0\0\x08\x10\0\0", 24,
	       "head dimension 1026 must be even and <= 1024");
	edit_n(b, len, "embedding_length\x04\0\0\0\x40\0\0\0",
	       "embedding_length\x04\0\0\0\x00\x10\0\0", 24, "has shape");
	edit_n(b, len, "freq_base\x06\0\0\0\x00\x40\x1c\x46", "freq_base\x06\0\0\0\0\0\0\0", 17,
	       "rope.freq_base and layer_norm_rms_epsilon must be > 0");
	edit_n(b, len, "freq_base\x06\0\0\0\x00\x40\x1c\x46", "freq_base\x06\0\0\0\0\0\xc0\x7f", 17,
	       "metadata llama.rope.freq_base is not a finite float");
	edit_n(b, len, "rms_epsilon\x06\0\0\0\xac\xc5\x27\x37", "rms_epsilon\x06\0\0\0\0\0\x80\xbf", 19,
	       "rope.freq_base and layer_norm_rms_epsilon must be > 0");
	edit_n(b, len, "rms_epsilon\x06\0\0\0\xac\xc5\x27\x37", "rms_epsilon\x06\0\0\0\0\0\x80\x7f", 19,
	       "layer_norm_rms_epsilon is not a finite float");
	/* the same 4 bytes typed u32: not a float at all */
	edit_n(b, len, "freq_base\x06\0\0\0", "freq_base\x04\0\0\0", 13,
	       "metadata llama.rope.freq_base is not a finite float");
	{	/* optional floats absent: their defaults, no error */
		static const char *const keys[2][2] = {
			{ "rope.freq_base", "rope.freq_basx" },
			{ "layer_norm_rms_epsilon", "layer_norm_rms_epsilox" },
		};
		int k;

		for (k = 0; k < 2; k++) {
			uint8_t *c = malloc(len);

			memcpy(c, b, len);
			replace_all(c, len, keys[k][0], keys[k][1], strlen(keys[k][0]));
			m = kve_model_load_mem(c, len, err, sizeof(err));
			CHECK(m && (k ? kve_model_info(m)->rms_eps == 1e-5f :
				    kve_model_info(m)->rope_base == 10000.0f),
			      "%s missing: the model loads with the default %s %s", keys[k][0],
			      k ? "1e-5" : "10000", m ? "" : err);
			kve_model_free(m);
			free(c);
		}
	}
	edit_and_expect(b, len, "token_embd.weight", "token_embd.weighx",
			"tensor 'token_embd.weight' is missing");
	/* optional counts of another type than u32 */
	edit_n(b, len, "head_count_kv\x04\0\0\0", "head_count_kv\x06\0\0\0", 17,
	       "metadata llama.attention.head_count_kv has the wrong type or range");
	edit_n(b, len, "dimension_count\x04\0\0\0", "dimension_count\x06\0\0\0", 19,
	       "metadata llama.rope.dimension_count has the wrong type or range");
	/* a norm tensor (type F32 = 0 after its one dim of 64) stored as F16,
	 * or 32 long; the embedding's vocabulary (its second dim, 512) 0 (the
	 * reader refuses it first) or 256 (the output head no longer matches) */
	edit_n(b, len, "output_norm.weight\x01\0\0\0\x40\0\0\0\0\0\0\0\0\0\0\0",
	       "output_norm.weight\x01\0\0\0\x40\0\0\0\0\0\0\0\x01\0\0\0", 34,
	       "norm tensor 'output_norm.weight' must be F32 [64] (is F16 [64])");
	edit_n(b, len, "output_norm.weight\x01\0\0\0\x40\0\0\0\0\0\0\0\0\0\0\0",
	       "output_norm.weight\x01\0\0\0\x20\0\0\0\0\0\0\0\0\0\0\0", 34,
	       "norm tensor 'output_norm.weight' must be F32 [64] (is F32 [32])");
	edit_n(b, len, "token_embd.weight\x02\0\0\0\x40\0\0\0\0\0\0\0\0\x02\0\0\0\0\0\0",
	       "token_embd.weight\x02\0\0\0\x40\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 37,
	       "'token_embd.weight': dimensions are zero");
	edit_n(b, len, "token_embd.weight\x02\0\0\0\x40\0\0\0\0\0\0\0\0\x02\0\0\0\0\0\0",
	       "token_embd.weight\x02\0\0\0\x40\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0", 37,
	       "has shape [64, 512], expected [64, 256]");
	/* head_count_kv 2 -> 4: attn_k no longer matches the metadata */
	edit_n(b, len, "head_count_kv\x04\0\0\0\x02", "head_count_kv\x04\0\0\0\x04", 18,
	       "'blk.0.attn_k.weight' has shape");
	m = kve_model_load("/nonexistent/model.gguf", err, sizeof(err));
	CHECK(!m && strstr(err, "cannot open"), "missing file: \"%s\"", err);
	{	/* a directory: open and fstat work, reading fails; the copy's
		 * read error is the one reported (not a fallback to mapping) */
		setenv("KVE_WEIGHTS", "copy", 1);
		m = kve_model_load("/tmp", err, sizeof(err));
		unsetenv("KVE_WEIGHTS");
		CHECK(!m && strstr(err, "read /tmp") && strstr(err, "directory"),
		      "a directory as the model, copied: \"%s\"", err);
		kve_model_free(m);
	}
	{	/* an empty file on disk */
		char tmp[] = "/tmp/kve-empty-XXXXXX";
		int fd = mkstemp(tmp);

		if (fd >= 0) {
			m = kve_model_load(tmp, err, sizeof(err));
			CHECK(!m && strstr(err, "empty"), "empty file on disk: \"%s\"", err);
			kve_model_free(m);
			close(fd);
			unlink(tmp);
		}
	}
	{	/* a truncated file on disk */
		char tmp[] = "/tmp/kve-trunc-XXXXXX";
		int fd = mkstemp(tmp);
		if (fd >= 0 && write(fd, b, len / 2) == (ssize_t)(len / 2)) {
			m = kve_model_load(tmp, err, sizeof(err));
			CHECK(!m && strstr(err, "exceeds"), "half a file on disk: \"%s\"", err);
		}
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
	}
	free(b);
}

/* Every occurrence of from (n bytes) in b becomes to. */
static void replace_all(uint8_t *b, size_t len, const char *from, const char *to, size_t n)
{
	size_t i;

	for (i = 0; i + n <= len; i++)
		if (!memcmp(b + i, from, n))
			memcpy(b + i, to, n);
}

static void test_qwen2(const char *path)
{
	size_t len;
	uint8_t *b = tc_slurp(path, &len);
	char err[256] = "";
	struct kve_model *m;
	const struct kve_model_info *in;

	CHECK(b != NULL, "read %s", path);
	if (!b)
		return;
	m = kve_model_load_mem(b, len, err, sizeof(err));
	in = m ? kve_model_info(m) : NULL;
	CHECK(in && !strcmp(in->arch, "qwen2") && in->rope_neox && in->qkv_bias &&
	      m->layers[1].bk && in->rms_eps == 1e-6f,
	      "qwen2 model loads: qwen2.* keys, NEOX rope, Q/K/V biases %s", m ? "" : err);
	kve_model_free(m);
	edit_and_expect(b, len, "qwen2.block_count", "qwen2.block_counx",
			"qwen2.block_count is missing");
	edit_and_expect(b, len, "blk.1.attn_k.bias", "blk.1.attn_k.biax",
			"'blk.1.attn_k.bias' is missing");
	/* the tensor directory: name, n_dims 1, ne[0] = 32 (kv dim) -> 16 */
	edit_n(b, len, "blk.0.attn_v.bias\x01\0\0\0\x20", "blk.0.attn_v.bias\x01\0\0\0\x10", 22,
	       "bias tensor 'blk.0.attn_v.bias' must be F32 [32] (is F32 [16])");
	/* the same file as a llama one: llama.* keys, biases optional but
	 * used when present, normal rope */
	replace_all(b, len, "qwen2.", "llama.", 6);
	replace_all(b, len, "\x05\0\0\0\0\0\0\0qwen2", "\x05\0\0\0\0\0\0\0llama", 13);
	m = kve_model_load_mem(b, len, err, sizeof(err));
	in = m ? kve_model_info(m) : NULL;
	CHECK(in && !strcmp(in->arch, "llama") && !in->rope_neox && in->qkv_bias,
	      "llama file with Q/K/V biases loads with them, normal rope %s", m ? "" : err);
	kve_model_free(m);
	edit_and_expect(b, len, "blk.1.attn_q.bias", "blk.1.attn_q.biax",
			"layer 1 has some of attn_q/k/v.bias but not all three");
	/* each one missing alone: the V bias, the K bias */
	edit_and_expect(b, len, "blk.1.attn_v.bias", "blk.1.attn_v.biax",
			"layer 1 has some of attn_q/k/v.bias but not all three");
	edit_and_expect(b, len, "blk.1.attn_k.bias", "blk.1.attn_k.biax",
			"layer 1 has some of attn_q/k/v.bias but not all three");
	{	/* layer 0 without its biases, layer 1 with them */
		uint8_t *c = malloc(len);

		memcpy(c, b, len);
		replace_all(c, len, "blk.0.attn_q.bias", "blk.0.attn_q.biax", 17);
		replace_all(c, len, "blk.0.attn_k.bias", "blk.0.attn_k.biax", 17);
		replace_all(c, len, "blk.0.attn_v.bias", "blk.0.attn_v.biax", 17);
		m = kve_model_load_mem(c, len, err, sizeof(err));
		CHECK(!m && strstr(err, "layer 1 has Q/K/V biases, layer 0 lacks them"),
		      "biases in layer 1 only: \"%s\"", err);
		kve_model_free(m);
		free(c);
	}
	free(b);
}

/*
 * The weights copied into huge pages (the default where THP is on; the
 * matrices packed into panels), the copy left row-major
 * (KVE_PACK=0) and the file mapped as it is give the same logits, bit for
 * bit; only the packed copy's bytes differ from the file's.
 */
/* the permissions ("r--p", ...) of the mapping holding addr, from
 * /proc/self/maps; "none" if no mapping holds it */
static void maps_perms(const void *addr, char perms[8])
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo, hi, a = (unsigned long)(uintptr_t)addr;
	char line[512], pm[8];

	snprintf(perms, 8, "none");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pm) == 3 && a >= lo && a < hi) {
			snprintf(perms, 8, "%s", pm);
			break;
		}
	if (f)
		fclose(f);
}

/* a within 1e-3 of b's largest magnitude everywhere, and the same argmax */
static int logits_close(const float *a, const float *b, uint32_t n)
{
	float mx = 0;
	uint32_t i, ia = 0, ib = 0;

	for (i = 0; i < n; i++) {
		mx = fabsf(b[i]) > mx ? fabsf(b[i]) : mx;
		ia = a[i] > a[ia] ? i : ia;
		ib = b[i] > b[ib] ? i : ib;
	}
	for (i = 0; i < n; i++)
		if (!(fabsf(a[i] - b[i]) <= 1e-3f * mx))
			return 0;
	return ia == ib;
}

static void test_load_modes(const char *path)
{
	static const char *const weights[3] = { "copy", "copy", "mmap" };
	struct kve_model *m[3];
	float *lg[3];
	char err[256];
	int i, ok = 1, packed, x16;

	for (i = 0; i < 3; i++) {
		struct kve_engine_params ep = { 1, 1, 0, 64 };
		uint32_t tab[1] = { 0 };
		struct kve_session s = { tab, 1, 0 };
		int32_t tok[5] = { 1, 2, 3, 4, 5 };
		struct kve_kv_pool kp;
		struct kve_engine *e;
		struct tpool tp;

		setenv("KVE_WEIGHTS", weights[i], 1);
		setenv("KVE_PACK", i == 1 ? "0" : "1", 1);
		m[i] = kve_model_load(path, err, sizeof(err));
		lg[i] = NULL;
		if (!m[i] || tpool_init(&tp, m[i], 64, KVE_KV_F32, 1, &kp)) {
			ok = 0;
			continue;
		}
		lg[i] = calloc(kve_model_info(m[i])->vocab, sizeof(float));
		e = kve_engine_create(m[i], &kp, &ep, err, sizeof(err));
		ok &= e && !kve_prefill(e, &s, tok, 5, lg[i]);
		kve_engine_free(e);
		tpool_free(&tp);
	}
	unsetenv("KVE_WEIGHTS");
	unsetenv("KVE_PACK");
	if (!ok) {
		CHECK(0, "%s: loads in three modes (%s)", path, err);
		goto out;
	}
	packed = m[0]->layers[0].wq.panel != 0;
	/* Q4_0, Q4_K and Q6_K in the AVX-512 sets' 16-row panels sum in
	 * their own order (Q4_0) or the portable C product's (the K-quants;
	 * Documentation/engine.md, Weight layout), not that of the 4-row
	 * panels: close, not the same bits */
	x16 = m[0]->output.panel == KVE_PANEL_Q4X16;	/* (== KVE_PANEL_QKX16) */
	for (i = 0; i < (int)kve_model_info(m[0])->n_layers; i++) {
		const struct kve_layer *L = &m[0]->layers[i];

		x16 |= L->wq.panel == KVE_PANEL_Q4X16 || L->wk.panel == KVE_PANEL_Q4X16 ||
		       L->wv.panel == KVE_PANEL_Q4X16 || L->wo.panel == KVE_PANEL_Q4X16 ||
		       L->gate.panel == KVE_PANEL_Q4X16 || L->up.panel == KVE_PANEL_Q4X16 ||
		       L->down.panel == KVE_PANEL_Q4X16;
	}
	CHECK(m[0]->g.map_base != m[2]->g.map_base &&
	      ((uintptr_t)m[0]->g.base & ((2u << 20) - 1)) == 0 &&
	      packed && !m[1]->layers[0].wq.panel && !m[2]->layers[0].wq.panel &&
	      !memcmp(m[1]->g.base, m[2]->g.base, m[1]->g.len) &&
	      memcmp(m[0]->g.base, m[2]->g.base, m[0]->g.len) &&
	      (x16 ? logits_close(lg[0], lg[2], kve_model_info(m[0])->vocab) :
	       !memcmp(lg[0], lg[2], kve_model_info(m[0])->vocab * sizeof(float))) &&
	      !memcmp(lg[1], lg[2], kve_model_info(m[0])->vocab * sizeof(float)),
	      "%s %s: KVE_WEIGHTS=copy (2 MiB-aligned, %s), copy with KVE_PACK=0 and mmap: "
	      "same logits %s", path, ggml_type_name(kve_model_info(m[0])->weight_type),
	      x16 ? "packed in 16-row panels" : packed ? "packed in panels" : "row-major",
	      x16 ? "(within 1e-3 of the largest, same argmax)" : "bit for bit");
	/* the copies were written (packed) and then sealed: the weights,
	 * first page to last, are read-only like the mapped file */
	for (i = 0; i < 3; i++) {
		const uint8_t *b = m[i]->g.map_base;
		char first[8], last[8];

		maps_perms(b, first);
		maps_perms(b + m[i]->g.map_len - 1, last);
		CHECK(!strcmp(first, "r--p") && !strcmp(last, "r--p") && !m[i]->g.writable,
		      "%s KVE_WEIGHTS=%s%s: the weights are read-only once loaded (%s .. %s)",
		      path, weights[i], i == 1 ? " KVE_PACK=0" : "", first, last);
	}
out:
	for (i = 0; i < 3; i++) {
		kve_model_free(m[i]);
		free(lg[i]);
	}
}

/*
 * The default with KVE_WEIGHTS unset follows the kernel's transparent
 * huge pages: copied into 2 MiB pages when THP is "always" or "madvise",
 * mapped from the file when "never" or when the kernel has no THP at all
 * (no sysfs file). Each setting is shown to the loader in a child with
 * its own mount namespace, a tmpfs over /sys/kernel/mm/transparent_hugepage
 * (as root, or else in a user namespace of its own). A copy's weights
 * start 2 MiB-aligned; a mapped file's after its header, never.
 */
#define THP_DIR "/sys/kernel/mm/transparent_hugepage"

static int write_file(const char *path, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int write_file(const char *path, const char *fmt, ...)
{
	FILE *f = fopen(path, "w");
	va_list ap;
	int rc;

	if (!f)
		return -1;
	va_start(ap, fmt);
	rc = vfprintf(f, fmt, ap) < 0;
	va_end(ap);
	return fclose(f) || rc ? -1 : 0;
}

static int thp_child(const char *path)
{
	static const struct {
		const char *enabled;	/* NULL: no file, as without THP */
		int copy;
	} cases[] = {
		{ NULL, 0 }, { "always madvise [never]\n", 0 },
		{ "always [madvise] never\n", 1 }, { "[always] madvise never\n", 1 },
	};
	char err[256];
	unsigned c;
	int bad = 0, thp;

	if (unshare(CLONE_NEWNS)) {
		uid_t uid = getuid();
		gid_t gid = getgid();

		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) ||
		    write_file("/proc/self/setgroups", "deny") ||
		    write_file("/proc/self/uid_map", "0 %u 1", (unsigned)uid) ||
		    write_file("/proc/self/gid_map", "0 %u 1", (unsigned)gid))
			return 64;
	}
	/* a kernel without THP has no directory: only the first case holds */
	thp = !access(THP_DIR, F_OK);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    (thp && mount("tmpfs", THP_DIR, "tmpfs", 0, "size=64k")))
		return 65;
	unsetenv("KVE_WEIGHTS");
	for (c = 0; c < (thp ? sizeof(cases) / sizeof(cases[0]) : 1); c++) {
		struct kve_model *m;

		unlink(THP_DIR "/enabled");
		if (cases[c].enabled && write_file(THP_DIR "/enabled", "%s", cases[c].enabled))
			return 66;
		m = kve_model_load(path, err, sizeof(err));
		if (!m || (((uintptr_t)m->g.base & ((2u << 20) - 1)) == 0) != cases[c].copy)
			bad |= 1 << c;
		kve_model_free(m);
	}
	return bad;
}

static void test_thp_default(const char *path)
{
	pid_t pid = fork();
	int st = 0;

	if (pid == 0)
		_exit(thp_child(path));
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
	      "%s: KVE_WEIGHTS unset: mapped with no THP file or THP never, copied with THP "
	      "madvise or always (child status %d: 64 no namespace, 65 no tmpfs, else a bit "
	      "a case)", path, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* With stdin closed the model file opens as fd 0: a descriptor like any
 * other (and closed again after) */
static void test_fd0(const char *path)
{
	char err[256] = "";
	struct kve_model *m;
	int saved = dup(0), closed;

	close(0);
	m = kve_model_load(path, err, sizeof(err));
	closed = fcntl(0, F_GETFD) < 0 && errno == EBADF;
	if (saved >= 0) {
		dup2(saved, 0);
		close(saved);
	}
	CHECK(m && closed, "a model opened as fd 0 (stdin closed) loads, fd 0 closed after %s",
	      m ? "" : err);
	kve_model_free(m);
}

/* A file that ends before its size says (as one that shrinks while it is
 * read): a sysfs attribute's size is 4096, its text a few bytes. The
 * copying load stops with EIO instead of reading at its end forever.
 * errno is left at EINTR before the load, as an interrupted call earlier
 * would leave it: a read that returns 0 sets no errno, so only a result
 * below 0 may be retried on EINTR */
static void test_short_read(void)
{
	static const char *const files[] = { "/sys/devices/system/cpu/online",
					      "/sys/kernel/mm/transparent_hugepage/enabled" };
	size_t i;

	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		struct stat st;
		struct gguf g;
		char err[256], buf[64];
		FILE *f = fopen(files[i], "r");
		size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
		int rc;

		if (f)
			fclose(f);
		if (stat(files[i], &st) || (size_t)st.st_size <= n)
			continue;
		errno = EINTR;
		rc = gguf_open_file(&g, files[i], 1, err, sizeof(err));
		CHECK(rc == -EIO && strstr(err, "read"),
		      "%s: size %lld, %zu bytes readable: the copying load fails with EIO (%d: %s)",
		      files[i], (long long)st.st_size, n, rc, err);
		return;
	}
	CHECK(0, "a sysfs attribute whose size is more than it reads (for the short read)");
}

/* gguf_get_bool and gguf_get_str: the value, absent keys (-ENOENT) and
 * keys of another type (-EINVAL, *out untouched) */
static void test_get_bool_str(void)
{
	struct w k = { .n = 0 };
	struct gguf g;
	struct gguf_str sv = { "unset", 5 };
	char err[256];
	int b1 = -1, b0 = -1, bx = 7, ok;

	p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 4);
	str(&k, "b.yes"); u32(&k, GGUF_BOOL); k.b[k.n++] = 2;	/* any non-zero byte */
	str(&k, "b.no"); u32(&k, GGUF_BOOL); k.b[k.n++] = 0;
	str(&k, "s.name"); u32(&k, GGUF_STR); str(&k, "arena");
	str(&k, "u.one"); u32(&k, GGUF_U32); u32(&k, 1);
	if (gguf_open_mem(&g, k.b, k.n, err, sizeof(err))) {
		CHECK(0, "bool/str file: %s", err);
		return;
	}
	ok = !gguf_get_bool(&g, "b.yes", &b1) && b1 == 1 && !gguf_get_bool(&g, "b.no", &b0) &&
	     b0 == 0 && gguf_get_bool(&g, "u.one", &bx) == -EINVAL &&
	     gguf_get_bool(&g, "s.name", &bx) == -EINVAL && gguf_get_bool(&g, "b.maybe", &bx) == -ENOENT &&
	     bx == 7;
	CHECK(ok, "gguf_get_bool: 2 is true, 0 false; a u32 or a string -> EINVAL, absent -> "
	      "ENOENT, the result untouched");
	ok = gguf_get_str(&g, "u.one", &sv) == -EINVAL && gguf_get_str(&g, "b.no", &sv) == -EINVAL &&
	     gguf_get_str(&g, "s.none", &sv) == -ENOENT && sv.n == 5 && !strcmp(sv.p, "unset") &&
	     !gguf_get_str(&g, "s.name", &sv) && sv.n == 5 && !memcmp(sv.p, "arena", 5);
	CHECK(ok, "gguf_get_str: the string; a u32 or a bool -> EINVAL, absent -> ENOENT, the "
	      "result untouched");
	gguf_close(&g);
}

/* The copying load's memory: the file rounded up to whole 2 MiB pages,
 * plus one page of slack to align the start. A file of exactly 2 MiB
 * takes one page, not two; one of 1.5 MiB takes one whole page (the
 * huge-page advice covers it to its end), one byte past 2 MiB two. */
static void test_copy_size(void)
{
	static const size_t sizes[] = { 2u << 20, 3u << 19, (2u << 20) + 1, (2u << 20) + 4096 };
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i], body = (n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
		char tmp[] = "/tmp/kve-copy-XXXXXX", err[256] = "";
		struct w k = { .n = 0 };
		struct gguf g = { 0 };
		int fd = mkstemp(tmp), rc = -1;

		p8(&k, "GGUF", 4); u32(&k, 3); u64(&k, 0); u64(&k, 0);
		if (fd >= 0 && write(fd, k.b, k.n) == (ssize_t)k.n && !ftruncate(fd, (off_t)n))
			rc = gguf_open_file(&g, tmp, 1, err, sizeof(err));
		CHECK(!rc && g.writable && g.map_len == body + (2u << 20) &&
		      ((uintptr_t)g.base & ((2u << 20) - 1)) == 0,
		      "a %zu-byte file copied: %zu bytes mapped (want %zu), base 2 MiB-aligned %s",
		      n, g.map_len, body + (2u << 20), err);
		if (!rc)
			gguf_close(&g);
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
	}
}

/*
 * A type's values read a second way (read2: what the engine computes
 * with): block b (n bytes, its fp16 d at d_off), then 999 random ones,
 * the first seven with an extreme d (0, +-65504, the least subnormal,
 * +-inf, NaN); the values that differ from kve_dequant_block's, bit for
 * bit (a NaN for a NaN).
 */
static int read2_differs(uint32_t type, uint8_t *b, size_t n, size_t d_off,
			 void (*read2)(const uint8_t *, float *))
{
	static const uint16_t extreme[] = { 0x0000, 0x7bff, 0xfbff, 0x0001, 0x7c00, 0xfc00,
					    0x7e00 };
	uint32_t vals = ggml_blck_size(type), i;
	uint64_t r = 0x9e3779b97f4a7c15ull;
	float x[QK_K], y[QK_K];
	int k, bad = 0;

	for (k = 0; k < 1000; k++) {
		if (k) {
			for (i = 0; i < n; i++) {
				r ^= r << 13;
				r ^= r >> 7;
				r ^= r << 17;
				b[i] = (uint8_t)r;
			}
			if (k < 8) {
				b[d_off] = (uint8_t)extreme[k - 1];
				b[d_off + 1] = (uint8_t)(extreme[k - 1] >> 8);
			}
		}
		kve_dequant_block(type, b, x);
		read2(b, y);
		for (i = 0; i < vals; i++)
			bad += memcmp(&x[i], &y[i], 4) && !(isnan(x[i]) && isnan(y[i]));
	}
	return bad;
}

/* a K-quant block's values from the integers mm_qk takes: (d * sc) * q -
 * dmin * m, a scale (and minimum) per 16 values (Q2_K, Q3_K) */
static void k16_ints(uint32_t type, const uint8_t *b, float *y)
{
	int8_t q[QK_K];
	int sc[16], mn[16] = { 0 }, i;
	float d, dmin;

	kve_qk_ints(type, b, q, sc, mn, &d, &dmin);
	for (i = 0; i < QK_K; i++)
		y[i] = d * (float)sc[i / 16] * (float)q[i] -
		       (type == GGML_Q2_K ? dmin * (float)mn[i / 16] : 0.0f);
}

static void q2k_ints(const uint8_t *b, float *y)
{
	k16_ints(GGML_Q2_K, b, y);
}

static void q3k_ints(const uint8_t *b, float *y)
{
	k16_ints(GGML_Q3_K, b, y);
}

/* an IQ4_NL block's values from the integers mm_q32 takes: d * (q - 128) */
static void iq4nl_ints(const uint8_t *b, float *y)
{
	uint8_t q[32];
	float d, m;	/* (no minimum) */
	int i;

	kve_q32_ints(GGML_IQ4_NL, b, q, &d, &m);
	for (i = 0; i < 32; i++)
		y[i] = d * (float)(q[i] - kve_q32_off(GGML_IQ4_NL));
}

/*
 * Q3_K, the format (Documentation/engine.md, "Tensor types"), on a block
 * made by hand: scale i is i - 8 (6 bits, stored + 32) and value v's
 * quant (v % 8) - 4 (stored + 4: bits 0-1 in qs, bit 2 in hmask), d 1, so
 * value v is (v / 16 - 8) * (v % 8 - 4). Then the same values from the
 * integers the kernels take (kve_qk_ints).
 */
static void test_q3k(void)
{
	uint8_t b[110] = { 0 };
	float x[QK_K];
	int v, i, bad = 0;

	for (i = 0; i < 16; i++) {
		int u = i - 8 + 32;

		b[96 + i % 8] |= (uint8_t)((u & 0xF) << (i < 8 ? 0 : 4));
		b[96 + 8 + i % 4] |= (uint8_t)((u >> 4) << (2 * (i / 4)));
	}
	for (v = 0; v < QK_K; v++) {
		int n = v / 128, j = v % 128 / 32, l = v % 32, q = v % 8;

		b[32 + 32 * n + l] |= (uint8_t)((q & 3) << (2 * j));
		b[l] |= (uint8_t)((q >> 2) << (4 * n + j));
	}
	b[108] = 0x00;
	b[109] = 0x3c;
	kve_dequant_block(GGML_Q3_K, b, x);
	for (v = 0; v < QK_K; v++)
		bad += x[v] != (float)((v / 16 - 8) * (v % 8 - 4));
	CHECK(!bad, "Q3_K: a block made by hand reads back as (v / 16 - 8) * (v %% 8 - 4) "
	      "(%d of 256 values differ)", bad);
	bad = read2_differs(GGML_Q3_K, b, sizeof(b), 108, q3k_ints);
	CHECK(!bad, "Q3_K from kve_qk_ints: 1000 blocks (the one above, random ones, every extreme d) "
	      "the same values bit for bit (%d differ)", bad);
}

/*
 * IQ4_NL, the format: a block made by hand (d 1, nibble q of byte i at
 * value i, 15 - q at value i + 16) reads back as the table's values; then
 * the same values from the integers the kernels take (kve_q32_ints).
 */
static void test_iq4nl(void)
{
	static const int8_t table[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
					  1, 13, 25, 38, 53, 69, 89, 113 };
	uint8_t b[18] = { 0x00, 0x3c };
	float x[32];
	int i, bad = 0;

	for (i = 0; i < 16; i++)
		b[2 + i] = (uint8_t)(i | (15 - i) << 4);
	kve_dequant_block(GGML_IQ4_NL, b, x);
	for (i = 0; i < 16; i++)
		bad += x[i] != table[i] || x[i + 16] != table[15 - i];
	CHECK(!bad, "IQ4_NL: a block made by hand reads back as the table's values (%d differ)",
	      bad);
	bad = read2_differs(GGML_IQ4_NL, b, sizeof(b), 0, iq4nl_ints);
	CHECK(!bad, "IQ4_NL as d * (q - 128), q its table's value + 128: 1000 blocks (the one "
	      "above, random ones, every extreme d) the same values bit for bit (%d differ)", bad);
}

/*
 * IQ4_XS, the format, on a block made by hand: d 1, sub-block s's scale
 * ls = 7 s + 5 (low 4 bits in nibble s % 2 of scales_l[s / 2], top 2 in
 * bits 2s, 2s + 1 of scales_h), value v's nibble (v + s) % 16 where s =
 * v / 32 (low nibble of qs[16 s + v % 16] for v % 32 < 16, else high), so
 * value v is (ls - 32) * table[(v + s) % 16].
 */
static void test_iq4xs(void)
{
	uint8_t b[136] = { 0x00, 0x3c };
	uint16_t h = 0;
	float x[QK_K];
	int v, s, bad = 0;

	for (s = 0; s < 8; s++) {
		int ls = 7 * s + 5;

		b[4 + s / 2] |= (uint8_t)((ls & 0xF) << 4 * (s % 2));
		h |= (uint16_t)((ls >> 4) << 2 * s);
	}
	memcpy(b + 2, &h, 2);
	for (v = 0; v < QK_K; v++) {
		s = v / 32;
		b[8 + 16 * s + v % 16] |= (uint8_t)(((v + s) % 16) << (v % 32 < 16 ? 0 : 4));
	}
	kve_dequant_block(GGML_IQ4_XS, b, x);
	for (v = 0; v < QK_K; v++) {
		s = v / 32;
		bad += x[v] != (float)((7 * s + 5 - 32) * ggml_iq4nl_value((unsigned)(v + s) % 16));
	}
	CHECK(!bad, "IQ4_XS: a block made by hand reads back as (ls - 32) * table[q] "
	      "(%d of 256 values differ)", bad);
}

/*
 * Q2_K, the format, on a block made by hand: d 1, dmin 0.5, sub-block
 * g's scale g (low nibble of scales[g]) and minimum 15 - g (high nibble),
 * value v's quant v % 4 (bits 2j, 2j + 1 of qs[32n + l] for v = 128n +
 * 32j + l), so value v is (v / 16) * (v % 4) - 0.5 * (15 - v / 16). Then
 * the same values from the integers the kernels take (kve_qk_ints).
 */
static void test_q2k(void)
{
	uint8_t b[84] = { 0 };
	float x[QK_K];
	int v, g, bad = 0;

	for (g = 0; g < 16; g++)
		b[g] = (uint8_t)(g | (15 - g) << 4);
	for (v = 0; v < QK_K; v++)
		b[16 + 32 * (v / 128) + v % 32] |= (uint8_t)((v % 4) << (2 * (v % 128 / 32)));
	b[81] = 0x3c;	/* d 1.0 */
	b[83] = 0x38;	/* dmin 0.5 */
	kve_dequant_block(GGML_Q2_K, b, x);
	for (v = 0; v < QK_K; v++)
		bad += x[v] != (float)(v / 16 * (v % 4)) - 0.5f * (float)(15 - v / 16);
	CHECK(!bad, "Q2_K: a block made by hand reads back as sc * q - 0.5 * m "
	      "(%d of 256 values differ)", bad);
	bad = read2_differs(GGML_Q2_K, b, sizeof(b), 80, q2k_ints);
	CHECK(!bad, "Q2_K from kve_qk_ints: 1000 blocks (the one above, random ones, every "
	      "extreme d) the same values bit for bit (%d differ)", bad);
}

int main(int argc, char **argv)
{
	test_container();
	test_q2k();
	test_q3k();
	test_iq4nl();
	test_iq4xs();
	test_alignment();
	test_short_read();
	test_copy_size();
	test_get_u32();
	test_get_bool_str();
	if (argc > 1) {
		test_model(argv[1]);
		test_load_modes(argv[1]);
		test_thp_default(argv[1]);
		test_fd0(argv[1]);
	}
	if (argc > 2)
		test_qwen2(argv[2]);
	for (int i = 3; i < argc; i++)	/* more weight types */
		test_load_modes(argv[i]);
	return tc_done();
}
