/* SPDX-License-Identifier: MIT */
/*
 * gguf.h - GGUF v2/v3 container reader (internal to the engine).
 *
 * Owns parsing and validation of the file: header, metadata key/values,
 * tensor directory and the data section. It knows nothing about models;
 * model.c interprets the keys and tensors.
 */
#ifndef KVE_GGUF_H
#define KVE_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
	GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3,
	GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7,
	GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11,
	GGUF_F64 = 12,
	GGUF_NTYPES
};

/* The tensor types the engine reads (ggml's numbering, as GGUF stores it);
 * their block layouts are in quant.c and Documentation/engine.md */
enum ggml_type {
	GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3,
	GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12,
	GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_IQ4_NL = 20, GGML_IQ4_XS = 23, GGML_BF16 = 30,
};

#define QK8_0 32
#define Q8_0_BYTES 34	/* fp16 scale + 32 int8 */
#define QK_K 256	/* values per K-quant super-block */

/*
 * Values per block and bytes per block of a tensor type (F32/F16/BF16: one
 * value per "block"); 0 for a type the engine does not read.
 */
static inline uint32_t ggml_blck_size(uint32_t type)
{
	switch (type) {
	case GGML_F32: case GGML_F16: case GGML_BF16: return 1;
	case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1:
	case GGML_Q8_0: case GGML_IQ4_NL: return 32;
	case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
	case GGML_IQ4_XS: return QK_K;
	default: return 0;
	}
}

static inline uint32_t ggml_blck_bytes(uint32_t type)
{
	switch (type) {
	case GGML_F32: return 4;
	case GGML_F16: case GGML_BF16: return 2;
	case GGML_Q4_0: return 18;	/* fp16 d, 16 bytes of nibbles */
	case GGML_Q4_1: return 20;	/* fp16 d, m, 16 bytes of nibbles */
	case GGML_Q5_0: return 22;	/* fp16 d, 4 bytes of high bits, 16 of nibbles */
	case GGML_Q5_1: return 24;	/* fp16 d, m, high bits, nibbles */
	case GGML_Q8_0: return Q8_0_BYTES;
	case GGML_IQ4_NL: return 18;	/* fp16 d, 16 bytes of nibbles indexing ggml_iq4nl_value */
	case GGML_Q2_K: return 84;	/* 16 scale|min bytes, 64 of 2-bit quants, fp16 d, dmin */
	case GGML_Q3_K: return 110;	/* 32 bytes of 3rd bits, 64 of 2-bit lows, 12 scale bytes, fp16 d */
	case GGML_Q4_K: return 144;	/* fp16 d, dmin, 12 scale bytes, 128 of nibbles */
	case GGML_Q5_K: return 176;	/* as Q4_K and 32 bytes of high bits */
	case GGML_Q6_K: return 210;	/* 128 low nibbles, 64 of 2-bit highs, 16 scales, fp16 d */
	case GGML_IQ4_XS: return 136;	/* fp16 d, 6 bytes of 6-bit scales, 128 of nibbles */
	default: return 0;
	}
}

/* IQ4_NL's 16 values, which its nibbles index (the format's table) */
static inline const int8_t *ggml_iq4nl_table(void)
{
	static const int8_t v[16] = {
		-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
	};

	return v;
}

static inline int8_t ggml_iq4nl_value(unsigned q)
{
	return ggml_iq4nl_table()[q & 15];
}

/* Guards against absurd headers before any allocation. */
#define GGUF_MAX_KV		65536u
#define GGUF_MAX_TENSORS	65536u
#define GGUF_MAX_DIMS		4u
#define GGUF_MAX_ALIGN		(1u << 16)

struct gguf_str {
	const char *p;		/* not NUL-terminated, points into the file */
	uint64_t n;
};

struct gguf_kv {
	struct gguf_str key;
	uint32_t type;
	uint32_t arr_type;	/* element type when type == GGUF_ARR */
	uint64_t arr_n;
	const uint8_t *val;	/* scalar value or first array element */
	uint64_t *str_off;	/* string arrays: offset of element i from val */
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];	/* ne[0] is the contiguous dimension */
	uint32_t type;
	uint64_t offset;	/* from the data section */
	uint64_t size;		/* bytes */
	const uint8_t *data;
};

struct gguf {
	const uint8_t *base;
	size_t len;
	int mapped;		/* base came from gguf_open_file: unmap map_base */
	int writable;		/* base is a private copy, writable until gguf_seal */
	void *map_base;
	size_t map_len;
	uint32_t version;
	uint64_t n_kv, n_tensors;
	struct gguf_kv *kv;
	struct gguf_tensor *t;
	uint64_t alignment;
	uint64_t data_off;
};

int gguf_open_mem(struct gguf *g, const void *buf, size_t len,
		  char *err, size_t errlen);
/* copy_huge: read the file into private anonymous memory in 2 MiB
 * transparent huge pages instead of mapping the page cache (falls back to
 * mapping when that memory cannot be had). */
int gguf_open_file(struct gguf *g, const char *path, int copy_huge,
		   char *err, size_t errlen);
/* Makes a writable copy read-only (after the model repacked its weights). */
void gguf_seal(struct gguf *g);
void gguf_close(struct gguf *g);

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g,
					   const char *name);
/* Typed getters: 0, -ENOENT (missing) or -EINVAL (wrong type / range). */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, int *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
/* Element i of an array kv (already bounds-checked at open). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
int gguf_str_eq(struct gguf_str s, const char *c);
const char *ggml_type_name(uint32_t type);

#endif
