// SPDX-License-Identifier: MIT
/*
 * gguf.c - GGUF reader: maps the file and validates every count, length,
 * type, offset and size against the file length before anything uses it.
 *
 * All reads go through a bounds-checked cursor; a failure writes one line
 * naming the field (and key/tensor) that was wrong. Tensor data is not
 * copied. Owns no model semantics (see model.c).
 */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct cursor {
	const uint8_t *base;
	uint64_t off, len;
	char *err;
	size_t errlen;
};

static int fail(struct cursor *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct cursor *c, const char *fmt, ...)
{
	va_list ap;

	if (c->err && c->errlen) {
		int n = snprintf(c->err, c->errlen, "gguf: ");
		va_start(ap, fmt);
		if (n > 0 && (size_t)n < c->errlen)
			vsnprintf(c->err + n, c->errlen - n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int need(struct cursor *c, uint64_t n)
{
	return c->len - c->off >= n;
}

static int rd_u32(struct cursor *c, uint32_t *v, const char *field)
{
	if (!need(c, 4))
		return fail(c, "truncated reading %s at offset %llu (file %llu bytes)",
			    field, (unsigned long long)c->off,
			    (unsigned long long)c->len);
	memcpy(v, c->base + c->off, 4);
	c->off += 4;
	return 0;
}

static int rd_u64(struct cursor *c, uint64_t *v, const char *field)
{
	if (!need(c, 8))
		return fail(c, "truncated reading %s at offset %llu (file %llu bytes)",
			    field, (unsigned long long)c->off,
			    (unsigned long long)c->len);
	memcpy(v, c->base + c->off, 8);
	c->off += 8;
	return 0;
}

static int rd_str(struct cursor *c, struct gguf_str *s, const char *field)
{
	uint64_t n = 0;
	int rc = rd_u64(c, &n, field);

	if (rc)
		return rc;
	if (n > c->len - c->off)
		return fail(c, "%s: string length %llu exceeds the %llu bytes left in the file",
			    field, (unsigned long long)n,
			    (unsigned long long)(c->len - c->off));
	s->p = (const char *)c->base + c->off;
	s->n = n;
	c->off += n;
	return 0;
}

static const uint8_t scalar_size[GGUF_NTYPES] = {
	[GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2,
	[GGUF_U32] = 4, [GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1,
	[GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

const char *ggml_type_name(uint32_t type)
{
	switch (type) {
	case GGML_F32: return "F32";
	case GGML_F16: return "F16";
	case GGML_Q8_0: return "Q8_0";
	case GGML_Q4_0: return "Q4_0";
	case GGML_Q4_1: return "Q4_1";
	case GGML_Q5_0: return "Q5_0";
	case GGML_Q5_1: return "Q5_1";
	case GGML_Q4_K: return "Q4_K";
	case GGML_Q5_K: return "Q5_K";
	case GGML_Q6_K: return "Q6_K";
	case GGML_BF16: return "BF16";
	case 9: return "Q8_1";
	case GGML_Q2_K: return "Q2_K";
	case GGML_Q3_K: return "Q3_K";
	case 15: return "Q8_K";
	case 16: return "IQ2_XXS";
	case 17: return "IQ2_XS";
	case 18: return "IQ3_XXS";
	case 19: return "IQ1_S";
	case GGML_IQ4_NL: return "IQ4_NL";
	case 21: return "IQ3_S";
	case 22: return "IQ2_S";
	case GGML_IQ4_XS: return "IQ4_XS";
	case 29: return "IQ1_M";
	case 34: return "TQ1_0";
	case 35: return "TQ2_0";
	case 39: return "MXFP4";
	default: return "unknown";
	}
}

/* Prints at most 64 bytes of a key, escaping anything unprintable. */
static const char *keyname(struct gguf_str s, char *buf, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < s.n && i < 64 && o + 5 < n; i++) {
		unsigned char ch = (unsigned char)s.p[i];
		if (ch >= 32 && ch < 127 && ch != '\'')
			buf[o++] = (char)ch;
		else
			o += snprintf(buf + o, n - o, "\\x%02x", ch);
	}
	if (i < s.n && o + 4 < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = 0;
	return buf;
}

static int parse_value(struct cursor *c, struct gguf_kv *kv, const char *key)
{
	uint64_t i, n;
	int rc;

	kv->val = c->base + c->off;
	if (kv->type < GGUF_NTYPES && scalar_size[kv->type]) {
		if (!need(c, scalar_size[kv->type]))
			return fail(c, "key '%s': truncated value", key);
		c->off += scalar_size[kv->type];
		return 0;
	}
	if (kv->type == GGUF_STR) {
		struct gguf_str s;
		return rd_str(c, &s, key);
	}
	if (kv->type != GGUF_ARR)
		return fail(c, "key '%s': unknown value type %u", key, kv->type);

	if ((rc = rd_u32(c, &kv->arr_type, "array element type")))
		return rc;
	if ((rc = rd_u64(c, &kv->arr_n, "array length")))
		return rc;
	n = kv->arr_n;
	kv->val = c->base + c->off;
	if (kv->arr_type < GGUF_NTYPES && scalar_size[kv->arr_type]) {
		uint64_t sz = scalar_size[kv->arr_type];
		if (n > (c->len - c->off) / sz)
			return fail(c, "key '%s': array of %llu %u-byte elements exceeds the %llu bytes left",
				    key, (unsigned long long)n, (unsigned)sz,
				    (unsigned long long)(c->len - c->off));
		c->off += n * sz;
		return 0;
	}
	if (kv->arr_type == GGUF_ARR)
		return fail(c, "key '%s': nested arrays are not supported", key);
	if (kv->arr_type != GGUF_STR)
		return fail(c, "key '%s': unknown array element type %u", key,
			    kv->arr_type);
	/* every string takes at least its 8-byte length */
	if (n > (c->len - c->off) / 8)
		return fail(c, "key '%s': array of %llu strings cannot fit in the %llu bytes left",
			    key, (unsigned long long)n,
			    (unsigned long long)(c->len - c->off));
	kv->str_off = malloc((n ? n : 1) * sizeof(uint64_t));
	if (!kv->str_off)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		struct gguf_str s;
		kv->str_off[i] = c->off - (uint64_t)(kv->val - c->base);
		if ((rc = rd_str(c, &s, key)))
			return rc;
	}
	return 0;
}

static int tensor_size(uint32_t type, const uint64_t *ne, uint32_t nd,
		       uint64_t *size)
{
	uint64_t n = 1;
	uint32_t i;

	for (i = 0; i < nd; i++) {
		if (ne[i] == 0 || n > UINT64_MAX / ne[i] || n * ne[i] > (1ull << 48))
			return -1;
		n *= ne[i];
	}
	if (!ggml_blck_size(type))
		return -3;
	if (ne[0] % ggml_blck_size(type))
		return -2;
	*size = n / ggml_blck_size(type) * ggml_blck_bytes(type);
	return 0;
}

static int parse(struct gguf *g, char *err, size_t errlen)
{
	struct cursor c = { g->base, 0, g->len, err, errlen };
	char kb[300];
	uint32_t magic = 0;
	uint64_t i, j;
	int rc;

	if ((rc = rd_u32(&c, &magic, "magic")))
		return rc;
	if (memcmp(&magic, "GGUF", 4))
		return fail(&c, "bad magic (not a GGUF file)");
	if ((rc = rd_u32(&c, &g->version, "version")))
		return rc;
	if (g->version != 2 && g->version != 3)
		return fail(&c, "version %u not supported (need 2 or 3)",
			    g->version);
	if ((rc = rd_u64(&c, &g->n_tensors, "tensor_count")))
		return rc;
	if ((rc = rd_u64(&c, &g->n_kv, "metadata_kv_count")))
		return rc;
	if (g->n_tensors > GGUF_MAX_TENSORS)
		return fail(&c, "tensor_count %llu exceeds the limit %u",
			    (unsigned long long)g->n_tensors, GGUF_MAX_TENSORS);
	if (g->n_kv > GGUF_MAX_KV)
		return fail(&c, "metadata_kv_count %llu exceeds the limit %u",
			    (unsigned long long)g->n_kv, GGUF_MAX_KV);
	/* a kv takes >= 12 bytes, a tensor info >= 28 */
	if (g->n_kv * 12 + g->n_tensors * 28 > c.len - c.off)
		return fail(&c, "metadata_kv_count %llu and tensor_count %llu cannot fit in a %llu-byte file",
			    (unsigned long long)g->n_kv,
			    (unsigned long long)g->n_tensors,
			    (unsigned long long)c.len);
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->t = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->t));
	if (!g->kv || !g->t)
		return -ENOMEM;

	g->alignment = 32;
	for (i = 0; i < g->n_kv; i++) {
		struct gguf_kv *kv = &g->kv[i];
		char field[48];

		snprintf(field, sizeof(field), "key %llu name",
			 (unsigned long long)i);
		if ((rc = rd_str(&c, &kv->key, field)))
			return rc;
		keyname(kv->key, kb, sizeof(kb));
		for (j = 0; j < i; j++)
			if (g->kv[j].key.n == kv->key.n &&
			    !memcmp(g->kv[j].key.p, kv->key.p, kv->key.n))
				return fail(&c, "duplicate key '%s'", kb);
		if ((rc = rd_u32(&c, &kv->type, "value type")))
			return rc;
		if ((rc = parse_value(&c, kv, kb)))
			return rc;
		if (gguf_str_eq(kv->key, "general.alignment")) {
			uint32_t a;
			if (kv->type != GGUF_U32)
				return fail(&c, "general.alignment must be a uint32 (type %u)",
					    kv->type);
			memcpy(&a, kv->val, 4);
			if (!a || (a & (a - 1)) || a > GGUF_MAX_ALIGN)
				return fail(&c, "general.alignment %u is not a power of two <= %u",
					    a, GGUF_MAX_ALIGN);
			g->alignment = a;
		}
	}

	for (i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->t[i];
		char field[48];
		uint64_t sz;

		snprintf(field, sizeof(field), "tensor %llu name",
			 (unsigned long long)i);
		if ((rc = rd_str(&c, &t->name, field)))
			return rc;
		keyname(t->name, kb, sizeof(kb));
		for (j = 0; j < i; j++)
			if (g->t[j].name.n == t->name.n &&
			    !memcmp(g->t[j].name.p, t->name.p, t->name.n))
				return fail(&c, "duplicate tensor '%s'", kb);
		if ((rc = rd_u32(&c, &t->n_dims, "tensor n_dims")))
			return rc;
		if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
			return fail(&c, "tensor '%s': n_dims %u out of range 1..%u",
				    kb, t->n_dims, GGUF_MAX_DIMS);
		for (j = 0; j < GGUF_MAX_DIMS; j++)
			t->ne[j] = 1;
		for (j = 0; j < t->n_dims; j++)
			if ((rc = rd_u64(&c, &t->ne[j], "tensor dimension")))
				return rc;
		if ((rc = rd_u32(&c, &t->type, "tensor type")))
			return rc;
		if ((rc = rd_u64(&c, &t->offset, "tensor offset")))
			return rc;
		rc = tensor_size(t->type, t->ne, t->n_dims, &sz);
		if (rc == -1)
			return fail(&c, "tensor '%s': dimensions are zero or too large",
				    kb);
		if (rc == -2)
			return fail(&c, "tensor '%s': ne[0]=%llu is not a multiple of the %s block (%u)",
				    kb, (unsigned long long)t->ne[0], ggml_type_name(t->type),
				    ggml_blck_size(t->type));
		if (rc == -3)
			return fail(&c, "tensor '%s': type %u (%s) not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
				    kb, t->type, ggml_type_name(t->type));
		t->size = sz;
		if (t->offset % g->alignment)
			return fail(&c, "tensor '%s': offset %llu not aligned to %llu",
				    kb, (unsigned long long)t->offset,
				    (unsigned long long)g->alignment);
	}

	g->data_off = (c.off + g->alignment - 1) / g->alignment * g->alignment;
	if (g->data_off > g->len && g->n_tensors)
		return fail(&c, "data section starts at %llu, past the end of the %llu-byte file",
			    (unsigned long long)g->data_off,
			    (unsigned long long)g->len);
	for (i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->t[i];
		uint64_t avail = g->len - g->data_off;

		if (t->offset > avail || t->size > avail - t->offset)
			return fail(&c, "tensor '%s': offset %llu + size %llu exceeds the data section (%llu bytes)",
				    keyname(t->name, kb, sizeof(kb)),
				    (unsigned long long)t->offset,
				    (unsigned long long)t->size,
				    (unsigned long long)avail);
		t->data = g->base + g->data_off + t->offset;
	}
	return 0;
}

int gguf_open_mem(struct gguf *g, const void *buf, size_t len,
		  char *err, size_t errlen)
{
	int rc;

	memset(g, 0, sizeof(*g));
	if (err && errlen)
		err[0] = 0;
	g->base = buf;
	g->len = len;
	rc = parse(g, err, errlen);
	if (rc) {
		if (rc == -ENOMEM && err && errlen)
			snprintf(err, errlen, "gguf: out of memory");
		gguf_close(g);
	}
	return rc;
}

#define GGUF_HUGE (2u << 20)

/* The whole file in private anonymous memory, 2 MiB aligned, advised to
 * transparent huge pages, writable until gguf_seal (the model repacks its
 * weights in place first). Weights are streamed once
 * per token, and with 4 KiB pages every page is a TLB miss (a costly one
 * under virtualisation); 2 MiB pages take 512 times fewer. NULL if the
 * memory cannot be had (the caller maps the file instead). */
static void *copy_huge(int fd, size_t n, void **rawp, size_t *rawlen, int *rc)
{
	size_t body = (n + GGUF_HUGE - 1) & ~(size_t)(GGUF_HUGE - 1);
	size_t tot = body + GGUF_HUGE, off = 0;
	uint8_t *raw, *p;

	*rc = 0;
	raw = mmap(NULL, tot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	p = (uint8_t *)(((uintptr_t)raw + GGUF_HUGE - 1) & ~(uintptr_t)(GGUF_HUGE - 1));
	madvise(p, body, MADV_HUGEPAGE);
	while (off < n) {
		ssize_t r = pread(fd, p + off, n - off, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*rc = r < 0 ? -errno : -EIO;	/* the file shrank */
			munmap(raw, tot);
			return NULL;
		}
		off += (size_t)r;
	}
	*rawp = raw;
	*rawlen = tot;
	return p;
}

int gguf_open_file(struct gguf *g, const char *path, int huge, char *err, size_t errlen)
{
	void *raw = NULL, *p = NULL;
	size_t rawlen = 0;
	struct stat st;
	int fd, rc, copied = 0;

	memset(g, 0, sizeof(*g));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "gguf: cannot open %s: %s", path,
			 strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) || st.st_size <= 0) {
		snprintf(err, errlen, "gguf: %s: empty or unreadable", path);
		close(fd);
		return -EINVAL;
	}
	if (huge) {
		p = copy_huge(fd, (size_t)st.st_size, &raw, &rawlen, &rc);
		copied = p != NULL;
		if (!p && rc) {
			snprintf(err, errlen, "gguf: read %s: %s", path, strerror(-rc));
			close(fd);
			return rc;
		}
	}
	if (!p) {
		p = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			rc = -errno;
			close(fd);
			snprintf(err, errlen, "gguf: mmap %s: %s", path, strerror(-rc));
			return rc;
		}
		raw = p;
		rawlen = st.st_size;
	}
	close(fd);
	rc = gguf_open_mem(g, p, st.st_size, err, errlen);
	if (rc) {
		munmap(raw, rawlen);
		return rc;
	}
	g->mapped = 1;
	g->writable = copied;
	g->map_base = raw;
	g->map_len = rawlen;
	return 0;
}

void gguf_seal(struct gguf *g)
{
	if (g->writable)
		mprotect(g->map_base, g->map_len, PROT_READ);
	g->writable = 0;
}

void gguf_close(struct gguf *g)
{
	uint64_t i;

	if (g->kv)
		for (i = 0; i < g->n_kv; i++)
			free(g->kv[i].str_off);
	free(g->kv);
	free(g->t);
	if (g->mapped)
		munmap(g->map_base, g->map_len);
	memset(g, 0, sizeof(*g));
}

int gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.n == n && !memcmp(s.p, c, n);
}

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key)
{
	uint64_t i;

	for (i = 0; i < g->n_kv; i++)
		if (gguf_str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g,
					   const char *name)
{
	uint64_t i;

	for (i = 0; i < g->n_tensors; i++)
		if (gguf_str_eq(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);
	int64_t v;

	if (!kv)
		return -ENOENT;
	switch (kv->type) {
	case GGUF_U8: v = *kv->val; break;
	case GGUF_U16: { uint16_t x; memcpy(&x, kv->val, 2); v = x; break; }
	case GGUF_U32: { uint32_t x; memcpy(&x, kv->val, 4); v = x; break; }
	case GGUF_I32: { int32_t x; memcpy(&x, kv->val, 4); v = x; break; }
	case GGUF_U64: {
		uint64_t x;
		memcpy(&x, kv->val, 8);
		if (x > UINT32_MAX)
			return -EINVAL;
		v = (int64_t)x;
		break;
	}
	case GGUF_I64: { memcpy(&v, kv->val, 8); break; }
	default: return -EINVAL;
	}
	if (v < 0 || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return -ENOENT;
	if (kv->type == GGUF_F32) {
		memcpy(out, kv->val, 4);
	} else if (kv->type == GGUF_F64) {
		double d;
		memcpy(&d, kv->val, 8);
		*out = (float)d;
	} else {
		return -EINVAL;
	}
	return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, int *out)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_BOOL)
		return -EINVAL;
	*out = *kv->val != 0;
	return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_STR)
		return -EINVAL;
	memcpy(&out->n, kv->val, 8);
	out->p = (const char *)kv->val + 8;
	return 0;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
	struct gguf_str s;
	const uint8_t *p = kv->val + kv->str_off[i];

	memcpy(&s.n, p, 8);
	s.p = (const char *)p + 8;
	return s;
}
