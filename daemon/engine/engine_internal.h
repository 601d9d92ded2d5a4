/* SPDX-License-Identifier: MIT */
/*
 * engine_internal.h - structures shared by the engine's source files:
 * the loaded model, the kernel table and small fp16 helpers. Not installed.
 */
#ifndef KVE_ENGINE_INTERNAL_H
#define KVE_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf.h"
#include "kvengine.h"

/*
 * A weight matrix: rows of `cols` elements, row_bytes each, either as GGUF
 * stores it (panel 0: row after row) or packed in panels (pack.c): groups
 * of 4 consecutive rows interleaved so that a tile reading those rows
 * side by side reads one linear stream, and consecutive tiles continue
 * it. F32/F16 panels are stored as 8-column chunks [chunk][row 0..3][8
 * values]; Q8_0 panels per block as the 4 fp16 scales then the 4 rows'
 * 32 quants [block][4 scales | 4 x 32 quants]. A panel holds 4 * row_bytes
 * bytes, so panel p starts where row 4p would. Kernels address elements
 * only through the helpers below, which serve both layouts.
 */
struct kve_mat {
	const uint8_t *data;
	uint32_t type;		/* enum ggml_type */
	uint32_t rows, cols;
	size_t row_bytes;
	uint32_t panel;		/* 0 (row-major), or rows per panel */
};

#define KVE_PANEL_F	4	/* F32/F16/BF16 rows per panel; chunks of 8 columns */
#define KVE_PANEL_Q8	4	/* Q8_0 rows per panel (a 4-row group of the kernels) */
#define KVE_PANEL_Q	4	/* rows per panel of the other quantised types */

/* F32/F16/BF16: columns [8c, 8c + 8) of row r, as consecutive values. */
static inline const uint8_t *kve_mat_chunk(const struct kve_mat *w, uint32_t r, uint32_t c)
{
	size_t es = w->type == GGML_F32 ? 4 : 2;

	if (!w->panel)
		return w->data + (size_t)r * w->row_bytes + (size_t)c * 8 * es;
	return w->data + (size_t)(r - r % KVE_PANEL_F) * w->row_bytes +
	       ((size_t)c * KVE_PANEL_F + r % KVE_PANEL_F) * 8 * es;
}

/* F32/F16/BF16: bytes from one chunk of a row to its next */
static inline size_t kve_mat_cstep(const struct kve_mat *w)
{
	return (w->panel ? KVE_PANEL_F : 1) * 8 * (size_t)(w->type == GGML_F32 ? 4 : 2);
}

/* Q8_0: the fp16 scale of block b of row r */
static inline const uint8_t *kve_q8_scale(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	if (!w->panel)
		return w->data + (size_t)r * w->row_bytes + (size_t)b * Q8_0_BYTES;
	return w->data + (size_t)(r - r % KVE_PANEL_Q8) * w->row_bytes +
	       (size_t)b * KVE_PANEL_Q8 * Q8_0_BYTES + 2 * (r % KVE_PANEL_Q8);
}

/* Q8_0: the 32 quants of block b of row r */
static inline const uint8_t *kve_q8_quants(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	if (!w->panel)
		return kve_q8_scale(w, r, b) + 2;
	return w->data + (size_t)(r - r % KVE_PANEL_Q8) * w->row_bytes +
	       (size_t)b * KVE_PANEL_Q8 * Q8_0_BYTES + 2 * KVE_PANEL_Q8 + QK8_0 * (r % KVE_PANEL_Q8);
}

/*
 * Q8_0 packed for the AVX-512 VNNI set's product (panel == KVE_PANEL_Q8X16,
 * when the set asks for it: k->q8_x16; rows a multiple of 16): per block b
 * of a 16-row panel 544 bytes, the 16 rows' fp16 scales (row i at 2i) then
 * the quants in 8 groups of 64 bytes, group k holding quants 4k..4k+3 of
 * every row (row i at 4i), as Q4_0 x16. One vpdpbusd adds 4 products to
 * all 16 rows, and the block's scaling runs once for the 16 rows, where
 * the 4-row tile ran three float operations per vpdpbusd. Its results are
 * the portable product's bits (kve_mm_q8_c), which serves this layout for
 * every other set. The kernels of the 4-row layout (kve_q8_scale,
 * kve_q8_quants) must not see it.
 */
#define KVE_PANEL_Q8X16	16
#define KVE_Q8X16_BLK	(KVE_PANEL_Q8X16 * Q8_0_BYTES)	/* bytes per block of a panel */

/* Q8_0 x16: block b of the panel holding row r */
static inline const uint8_t *kve_q8x16_blk(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	return w->data + (size_t)(r - r % KVE_PANEL_Q8X16) * w->row_bytes +
	       (size_t)b * KVE_Q8X16_BLK;
}

/*
 * Q4_0 and Q8_0 x16 share a block layout: the 16 rows' fp16 scales (row i
 * at 2i), then `groups` 64-byte groups, group k holding bytes 4k..4k+3 of
 * each row's quant bytes (row i at 4i). Row i's GGUF block (scale, then
 * 4 * groups quant bytes) from or into the panel's block p.
 */
static inline void kve_x16_get(const uint8_t *p, uint32_t i, uint32_t groups, uint8_t *blk)
{
	uint32_t k;

	memcpy(blk, p + 2 * i, 2);
	for (k = 0; k < groups; k++)
		memcpy(blk + 2 + 4 * k, p + 32 + 64 * k + 4 * i, 4);
}

static inline void kve_x16_put(uint8_t *p, uint32_t i, uint32_t groups, const uint8_t *blk)
{
	uint32_t k;

	memcpy(p + 2 * i, blk, 2);
	for (k = 0; k < groups; k++)
		memcpy(p + 32 + 64 * k + 4 * i, blk + 2 + 4 * k, 4);
}

/* Q8_0, any layout: block b of row r as GGUF has it (the fp16 scale, 32
 * quants), a pointer into the matrix when it holds them so, else buf
 * (Q8_0_BYTES) filled with them */
static inline const uint8_t *kve_q8_blk_get(const struct kve_mat *w, uint32_t r, uint32_t b,
					    uint8_t *buf)
{
	if (!w->panel)
		return kve_q8_scale(w, r, b);
	if (w->panel != KVE_PANEL_Q8X16) {
		memcpy(buf, kve_q8_scale(w, r, b), 2);
		memcpy(buf + 2, kve_q8_quants(w, r, b), QK8_0);
	} else {
		kve_x16_get(kve_q8x16_blk(w, r, b), r % KVE_PANEL_Q8X16, QK8_0 / 4, buf);
	}
	return buf;
}

/* Q8_0: bytes from one block of a row to its next (scales and quants) */
static inline size_t kve_q8_bstep(const struct kve_mat *w)
{
	return (w->panel ? KVE_PANEL_Q8 : 1) * (size_t)Q8_0_BYTES;
}

/*
 * Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: block b of row r, in GGUF's own
 * block layout (quant.c). Packed, the 4 rows' blocks b are adjacent,
 * [block][row 0..3][block bytes], so a 4-row tile reads one stream.
 */
static inline const uint8_t *kve_mat_blk(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	size_t bb = ggml_blck_bytes(w->type);

	if (!w->panel)
		return w->data + (size_t)r * w->row_bytes + (size_t)b * bb;
	return w->data + (size_t)(r - r % KVE_PANEL_Q) * w->row_bytes +
	       ((size_t)b * KVE_PANEL_Q + r % KVE_PANEL_Q) * bb;
}

/* bytes from one block of a row to its next */
static inline size_t kve_mat_bstep(const struct kve_mat *w)
{
	return (w->panel ? KVE_PANEL_Q : 1) * (size_t)ggml_blck_bytes(w->type);
}

/*
 * Q4_0 and IQ4_NL (the same block layout) packed for the AVX-512 sets'
 * product (panel == KVE_PANEL_Q4X16, only when the selected set asks for
 * it: kve_mat_pack_for): 16 rows per panel, and per block b of the
 * panel 288 bytes, the 16 rows' fp16
 * scales (32 bytes, row i at 2i) then four 64-byte groups, group k
 * holding bytes 4k..4k+3 of each row's 16 nibble bytes (row i at 4i).
 * One 512-bit load of a group is then 16 rows by 4 quants (low nibbles:
 * values 4k..4k+3; high: 16+4k..16+4k+3), so one vpdpbusd against a
 * token's 4 activations broadcast sums 16 rows at once and a block's sum
 * ends whole in one lane per row: one float step per 16 (row, token)
 * pairs instead of one per pair. kve_mat_blk does not serve this
 * layout; kve_mat_blk_get does (a copy of the block in GGUF's layout).
 */
#define KVE_PANEL_Q4X16	16
#define KVE_Q4X16_BLK	(KVE_PANEL_Q4X16 * 18)	/* bytes per block of a panel */

/* Q4_0 / IQ4_NL x16: block b of the panel holding row r */
static inline const uint8_t *kve_q4x16_blk(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	return w->data + (size_t)(r - r % KVE_PANEL_Q4X16) * w->row_bytes +
	       (size_t)b * KVE_Q4X16_BLK;
}

/*
 * Q4_K, Q5_K and Q6_K packed for the AVX-512 sets' product (panel ==
 * KVE_PANEL_QKX16, when the selected set asks for it: k->qk_x16): 16 rows
 * per panel and per 256-value block b of the panel the 16 rows' blocks
 * with each field "transposed" in 4-byte groups: 64-byte group k of a
 * field holds bytes 4k..4k+3 of that field of every row (row i at 4i),
 * so one 512-bit load is 16 rows by 4 bytes, as in Q4_0 x16 above.
 *   Q4_K (2304 bytes): d of rows 0-15 (fp16, row i at 2i), dmin likewise,
 *     the 12 scale bytes in 3 groups, the 128 nibble bytes in 32 groups.
 *   Q5_K (2816 bytes): as Q4_K, with the 32 bytes of 5th bits (qh) in 8
 *     groups between the scales and the nibbles (GGUF's order).
 *   Q6_K (3360 bytes): d (32 bytes), the 16 int8 scales in 4 groups, then
 *     the 32 groups of the 128 bytes of low nibbles (ql) and the 16 of the
 *     64 of high bits (qh) interleaved in the order the product reads
 *     them (kve_q6kx16_group), so that it reads each panel straight up.
 *   IQ4_XS (2176 bytes): d (32 bytes), scales_h likewise, scales_l in 1
 *     group, the 128 nibble bytes in 32 groups (as Q4_K, dmin's place
 *     taken by scales_h).
 *   Q2_K (1344 bytes): d (32 bytes), dmin likewise, the 16 scale bytes
 *     in 4 groups, the 64 bytes of 2-bit quants in 16 groups.
 *   Q3_K (1760 bytes): d (32 bytes), the 12 scale bytes in 3 groups,
 *     hmask in 8 groups, the 64 bytes of 2-bit quants in 16 groups.
 * The product then sums each 32- (16-) value sub-block of 16 rows in 16
 * int32 lanes, scales them by the rows' sub-block scales, and runs the
 * float step per block for 16 rows at once: the portable C product's
 * operations in its order, so the same bits as kve_mm_qk_c (where the
 * 4-row panels sum 16 partial lanes per row and add them at the end).
 */
#define KVE_PANEL_QKX16	16
_Static_assert(KVE_PANEL_QKX16 == KVE_PANEL_Q4X16, "one panel value: the type tells the layout");
#define KVE_Q4KX16_BLK	(KVE_PANEL_QKX16 * 144)	/* bytes per block of a panel */
#define KVE_Q5KX16_BLK	(KVE_PANEL_QKX16 * 176)
#define KVE_Q6KX16_BLK	(KVE_PANEL_QKX16 * 210)
#define KVE_IQ4XSX16_BLK	(KVE_PANEL_QKX16 * 136)
#define KVE_Q2KX16_BLK	(KVE_PANEL_QKX16 * 84)
#define KVE_Q3KX16_BLK	(KVE_PANEL_QKX16 * 110)

/* K-quant x16: block b of the panel holding row r */
static inline const uint8_t *kve_qkx16_blk(const struct kve_mat *w, uint32_t r, uint32_t b)
{
	return w->data + (size_t)(r - r % KVE_PANEL_QKX16) * w->row_bytes +
	       (size_t)b * (w->type == GGML_Q6_K ? KVE_Q6KX16_BLK :
			    w->type == GGML_Q5_K ? KVE_Q5KX16_BLK :
			    w->type == GGML_IQ4_XS ? KVE_IQ4XSX16_BLK :
			    w->type == GGML_Q2_K ? KVE_Q2KX16_BLK :
			    w->type == GGML_Q3_K ? KVE_Q3KX16_BLK : KVE_Q4KX16_BLK);
}

/*
 * Q6_K x16: the 64-byte group (after d) that holds 4-byte group n of the
 * rows' scales (n 0-3), ql (4-35) or qh (36-51). The scales first; then,
 * for each half m of the block and j = 0..7, ql groups 16m + j and
 * 16m + 8 + j and qh group 8m + j, three by three: the tile's order. In
 * GGUF's order (ql, then qh) the tile read three streams at once, and the
 * hardware prefetcher of a Zen 4 followed none of them (a 110M Q4_K_M
 * file's Q6_K matrices read at 8 GB/s from memory, 34 after).
 */
static inline uint32_t kve_q6kx16_group(uint32_t n)
{
	uint32_t q;

	if (n < 4)
		return n;
	if (n < 36) {
		q = n - 4;
		return 4 + 24 * (q / 16) + 3 * (q % 8) + q % 16 / 8;
	}
	q = n - 36;
	return 4 + 24 * (q / 8) + 3 * (q % 8) + 2;
}

/* K-quant x16: piece n of row i's block, the bytes [g, g + len) of its
 * GGUF layout, sits at x in the panel's block; returns len (2 or 4), 0
 * past the last piece (Q4_K 37 pieces, Q5_K 45, Q6_K 53, IQ4_XS 35, Q2_K
 * 22, Q3_K 28) */
static inline uint32_t kve_qkx16_piece(uint32_t type, uint32_t i, uint32_t n,
				       uint32_t *g, uint32_t *x)
{
	if (type == GGML_Q2_K || type == GGML_Q3_K) {
		int three = type == GGML_Q3_K;

		if (n < (three ? 1u : 2u)) {	/* d, dmin */
			*g = (three ? 108 : 80) + 2 * n;
			*x = 32 * n + 2 * i;
			return 2;
		}
		n -= three ? 1 : 2;
		if (n >= (three ? 27u : 20u))
			return 0;
		if (three && n < 3) {	/* the scales, then hmask and qs (bytes 0-95) */
			*g = 96 + 4 * n;
			*x = 32 + 64 * n + 4 * i;
			return 4;
		}
		*g = 4 * (n - (three ? 3 : 0));	/* Q2_K: the scales, then qs (0-79) */
		*x = (three ? 32 : 64) + 64 * n + 4 * i;
		return 4;
	}
	if (type == GGML_Q6_K) {	/* d, scales, ql, qh */
		if (n == 0) {
			*g = 208;
			*x = 2 * i;
			return 2;
		}
		n--;
		if (n >= 52)
			return 0;
		*g = n < 4 ? 192 + 4 * n : 4 * (n - 4);	/* ql and qh are adjacent */
		*x = 32 + 64 * kve_q6kx16_group(n) + 4 * i;
		return 4;
	}
	if (n < 2) {	/* d, dmin (IQ4_XS: d, scales_h) */
		*g = 2 * n;
		*x = 32 * n + 2 * i;
		return 2;
	}
	n -= 2;
	if (n >= (type == GGML_Q5_K ? 43u : type == GGML_IQ4_XS ? 33u : 35u))
		return 0;
	*g = 4 + 4 * n;		/* the scales, (Q5_K: qh,) the nibbles */
	*x = 64 + 64 * n + 4 * i;
	return 4;
}

/* block b of row r in GGUF's layout, for the 4- to 6-bit types in any
 * layout: a pointer into the matrix, or (the x16 layouts) buf filled
 * with the block's bytes (buf: ggml_blck_bytes(type) bytes) */
static inline const uint8_t *kve_mat_blk_get(const struct kve_mat *w, uint32_t r, uint32_t b,
					     uint8_t *buf)
{
	const uint8_t *p;
	uint32_t i = r % KVE_PANEL_Q4X16, k;

	if (w->panel != KVE_PANEL_Q4X16)
		return kve_mat_blk(w, r, b);
	if (w->type == GGML_Q4_K || w->type == GGML_Q5_K || w->type == GGML_Q6_K ||
	    w->type == GGML_IQ4_XS || w->type == GGML_Q2_K || w->type == GGML_Q3_K) {
		uint32_t g, x, len;

		p = kve_qkx16_blk(w, r, b);
		for (k = 0; (len = kve_qkx16_piece(w->type, i, k, &g, &x)); k++)
			memcpy(buf + g, p + x, len);
		return buf;
	}
	kve_x16_get(kve_q4x16_blk(w, r, b), i, 4, buf);
	return buf;
}

/*
 * Packs a row-major matrix into panels in place (its memory must be
 * writable). 0 when packed, 1 when the shape does not allow it (rows must
 * be a multiple of 4, F32/F16/BF16 cols a multiple of 8) and the matrix
 * is left untouched, -ENOMEM.
 * pack.c.
 */
int kve_mat_pack(struct kve_mat *w);
/*
 * The same for the set k that will run the matrix: Q4_0 with rows a
 * multiple of 16 (and IQ4_NL) goes in KVE_PANEL_Q4X16 panels when k->q4_0_x16 says
 * its mm_q32 takes them, the K-quants and IQ4_XS in KVE_PANEL_QKX16 panels when
 * k->qk_x16 says its mm_qk does, Q8_0 in KVE_PANEL_Q8X16 panels when
 * k->q8_x16 says its mm_q8 does; everything else as kve_mat_pack. pack.c.
 */
struct kve_kernels;
int kve_mat_pack_for(struct kve_mat *w, const struct kve_kernels *k);

struct kve_layer {
	const float *attn_norm, *ffn_norm;
	const float *bq, *bk, *bv;	/* Q/K/V biases, all NULL when absent */
	const float *q_norm, *k_norm;	/* per-head RMS norm weights (qwen3), or NULL */
	struct kve_mat wq, wk, wv, wo, gate, up, down;
};

struct kve_model {
	struct gguf g;
	void *owned_buf;
	struct kve_model_info info;
	struct kve_mat tok_embd, output;
	const float *out_norm;
	const float *rope_freqs;	/* rope_dims / 2 frequency divisors, or NULL */
	struct kve_layer *layers;
};

/* Activations quantised for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 dot products:
 * one block per 32 values; the sum of its quants (Q4_0's and Q5_0's
 * offsets) and that sum times the block's unrounded scale, rounded to
 * fp16 as llama.cpp's Q8_1 blocks hold it (Q4_1's and Q5_1's minima). */
struct kve_q8x {
	float d;
	int8_t q[QK8_0];
	int32_t sum;
	float s;
};

/* Activations quantised for the K-quant dot products (Q4_K, Q5_K, Q6_K):
 * one block per 256 values, one scale, and the sums of each 16 quants
 * (the minimum and offset terms). */
struct kve_q8k {
	float d;
	int8_t q[QK_K];
	int16_t bsums[QK_K / 16];
};

/*
 * Kernel set. mm_* compute, for rows r in [r0, r1) and tokens t in [0, T):
 *   y[t*ldy + r] = dot(W row r, x row t)
 * Every (r, t) is summed in the same order whatever T, r0, r1 or the tile
 * the kernel picks, so batching never changes a result within one set.
 */
struct kve_kernels {
	const char *name;
	void (*mm_f32)(const struct kve_mat *w, const float *x, int T,
		       float *y, int ldy, int r0, int r1);
	void (*mm_f16)(const struct kve_mat *w, const float *x, int T,
		       float *y, int ldy, int r0, int r1);
	void (*mm_q8)(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		      float *y, int ldy, int r0, int r1);
	/* BF16 weights by F32 activations */
	void (*mm_bf16)(const struct kve_mat *w, const float *x, int T,
			float *y, int ldy, int r0, int r1);
	/* Q4_0, Q4_1, Q5_0, Q5_1 (w->type says which) by Q8_0 activations */
	void (*mm_q32)(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		       float *y, int ldy, int r0, int r1);
	/* Q4_K, Q5_K, Q6_K (w->type says which) by Q8_K activations */
	void (*mm_qk)(const struct kve_mat *w, const struct kve_q8k *xk, int T,
		      float *y, int ldy, int r0, int r1);
	/* attention helpers over one K or V row of head_dim elements */
	float (*dot_f32)(const float *a, const float *b, int n);
	float (*dot_f16)(const float *a, const uint16_t *b, int n);
	void (*axpy_f32)(float *y, float a, const float *x, int n);
	void (*axpy_f16)(float *y, float a, const uint16_t *x, int n);
	/* Q8_0 activation quantiser: bit-identical to kve_quantize_q8x in
	 * every set, so Q8_0 results differ between sets only by summation
	 * order */
	void (*quantize_q8x)(const float *x, int n, struct kve_q8x *out);
	/* the same per 256 values, with the sums of each 16 quants; bit
	 * for bit kve_quantize_q8k in every set */
	void (*quantize_q8k)(const float *x, int n, struct kve_q8k *out);
	/* n floats -> fp16, round to nearest even (K/V stores); identical to
	 * kve_f32_to_f16 except for NaN payloads */
	void (*f32_to_f16)(uint16_t *dst, const float *src, int n);
	/* SwiGLU gate: g[i] = silu(g[i]) * u[i], silu(v) = v / (1 + e^-v);
	 * SIMD sets use their own exp (within a few ulp of expf) */
	void (*silu_mul)(float *g, const float *u, int n);
	/* attention over one block for nh (1..KVE_ATTN_HEADS) query heads
	 * of one KV group, q's rows hd apart: sc[h * ss + j] = dot(q_h, K
	 * row j) * scale for j < n (rows hd elements apart, fp16 when f16),
	 * bit-identical to dot_* then the multiply; each K row is read (and
	 * converted) once for all nh heads */
	void (*attn_scores)(const float *q, int nh, const void *k, int f16, int n, int hd,
			    float scale, float *sc, size_t ss);
	/* sc[j] = e^(sc[j] - mx) for j < n, returning their sum; */
	float (*softmax_exp)(float *sc, int n, float mx);
	/* out_h += p[h * ps + j] * V row j for j = 0..n-1 in that order, for
	 * nh (1..KVE_ATTN_HEADS) heads whose out rows are hd apart,
	 * bit-identical to axpy_* row by row; each V row read once */
	void (*attn_values)(float *out, int nh, const float *p, size_t ps, const void *v,
			    int f16, int n, int hd);
	/* attn_scores over a KVE_KV_Q8_0 slab of bt rows (kvengine.h: the
	 * scales, then the quants; rows 0..n-1 read) with nh query heads
	 * quantised as Q8_0 activations (hd / 32 blocks a head): per row the
	 * exact integer dot of each block, times (its scale * the query
	 * block's), summed over the blocks in order from the first, times
	 * scale; bit-identical in every set (kve_attn_scores_q8_c) */
	void (*attn_scores_q8)(const struct kve_q8x *q, int nh, const uint8_t *k, int bt,
			       int n, int hd, float scale, float *sc, size_t ss);
	/* attn_values over a KVE_KV_Q8_0 slab: out_h += (p_h[j] * the row's
	 * block scale) * quant, rows in order (kve_attn_values_q8_c; sets
	 * differ by fused multiply-adds) */
	void (*attn_values_q8)(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			       int bt, int n, int hd);
	/* x -> H x for each piece of n values of len (n a power of two from
	 * 16, len a multiple of n): the orthonormal Walsh-Hadamard matrix in
	 * Sylvester's order, as log2 n passes of sums and differences, then
	 * times 1/sqrt(n) (the Q8_0 KV's rotation); bit-identical in every
	 * set (kve_hadamard_c: the same sums, each on its own) */
	void (*hadamard)(float *x, int len, int n);
	/* out = x / sqrt(mean(x^2) + eps) * w */
	void (*rmsnorm)(float *out, const float *x, const float *w, int n, float eps);
	/* 1: mm_q32 takes Q4_0 and IQ4_NL in KVE_PANEL_Q4X16 panels (and
	 * loaded models pack them so); its results there are its own (the whole-block
	 * order above), not those of the 4-row panels. Every set's mm_q32
	 * serves that layout. */
	int q4_0_x16;
	/* 1: mm_qk takes Q4_K, Q5_K and Q6_K in KVE_PANEL_QKX16 panels (loaded
	 * models pack them so); the same bits as the portable C product.
	 * Every set's mm_qk serves that layout. */
	int qk_x16;
	/* 1: mm_q8 takes Q8_0 in KVE_PANEL_Q8X16 panels (loaded models pack
	 * it so); the same bits as the portable C product. Every set's mm_q8
	 * serves that layout. */
	int q8_x16;
};

/* query heads one attention call takes (a GQA group larger than this is
 * taken in slices): 4 x 4 keys' accumulators fill half the AVX-512
 * registers */
#define KVE_ATTN_HEADS 4

/* a KVE_KV_Q8_0 slab of bt rows: the fp16 scales (V: hd / 32 a row, row
 * by row; K: bt a block, block by block), then the quants (V: int8, hd a
 * row; K: in fours, each four the bt rows' four quants of those
 * dimensions, offset by 128) */
static inline const int8_t *kve_kvq8_quants(const uint8_t *slab, int bt, int hd)
{
	return (const int8_t *)(slab + (size_t)bt * (size_t)(hd / 16));
}

/* quant d of row j of a K slab's quants kq (kvengine.h) */
static inline int kve_kvq8_k(const uint8_t *kq, int bt, int j, int d)
{
	return (int)kq[((size_t)(d / 4) * bt + j) * 4 + d % 4] - 128;
}

void kve_attn_scores_q8_c(const struct kve_q8x *q, int nh, const uint8_t *k, int bt, int n,
			  int hd, float scale, float *sc, size_t ss);
void kve_hadamard_c(float *x, int len, int n);
void kve_attn_values_q8_c(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			  int bt, int n, int hd);

void kve_attn_scores_q8_avx512vnni(const struct kve_q8x *q, int nh, const uint8_t *k, int bt,
				   int n, int hd, float scale, float *sc, size_t ss);

extern const struct kve_kernels kve_kernels_c;
extern const struct kve_kernels kve_kernels_avx2;
extern const struct kve_kernels kve_kernels_avx512;
/* The set this process uses, picked once (kve_kernels_pick_sets); NULL,
 * and nothing kept, when memory for a self-check was short. */
const struct kve_kernels *kve_kernels_select(void);

/*
 * Whether decode asks memory for what it will read next: the AVX-512
 * sets' one-token products their weights (prefetch_ahead,
 * kernels_q8_avx512.h) and the attention its K and V (forward.c). Set by
 * kve_kernels_select before any product runs, as kve_prefetch_for says
 * for $KVE_PREFETCH and this CPU. It changes no result, only the time.
 */
extern int kve_prefetch;
/*
 * want ("0" or "1", else ignored; may be NULL) decides; otherwise the CPU
 * does, by CPUID leaf 0's vendor (ebx, edx, ecx) and leaf 1's eax: on for
 * AMD family 0x1A (Zen 5), where it was measured to pay (a pass over a
 * Q4_K_M file's matrices 1.15-1.2x faster, the attention about 10%); off
 * elsewhere: on family 0x19 (Zen 4) decode was 1.0-1.25x faster without
 * it, the hardware's prefetchers following the ascending panels and KV
 * slabs (engine.md), and elsewhere it was never measured. kernels.c.
 */
int kve_prefetch_for(const char *want, unsigned ebx0, unsigned edx0, unsigned ecx0,
		     unsigned eax1);

/*
 * Compares every kernel of cand with ref (the portable C set) on small
 * random inputs: results within a summation-order bound, and cand's own
 * batch invariance bit for bit. 0 if all pass, else -1 and why names the
 * kernel, shape and values; -ENOMEM if it could not run for want of
 * memory (no verdict). selfcheck.c.
 */
int kve_kernels_selfcheck(const struct kve_kernels *cand,
			  const struct kve_kernels *ref, char *why, size_t len);

/*
 * The VNNI sets: the AVX2 set with kve_mm_q8_avxvnni ("avxvnni") and the
 * AVX-512 set with kve_mm_q8_avx512vnni ("avx512vnni"), built on first
 * call. Their integer lanes equal their parents', so are their results.
 * kernels.c; the products are in kernels_avxvnni.c, kernels_avx512vnni.c.
 */
const struct kve_kernels *kve_kernels_avxvnni(void);
const struct kve_kernels *kve_kernels_avx512vnni(void);
void kve_mm_q8_avxvnni(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		       float *y, int ldy, int r0, int r1);
void kve_mm_q8_avx512vnni(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			  float *y, int ldy, int r0, int r1);
/* their products of the 4- to 6-bit types (kernels_quant_avx2.h,
 * kernels_quant_avx512.h with vpdpbusd / vpdpwssd) */
void kve_mm_q32_avxvnni(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			float *y, int ldy, int r0, int r1);
void kve_mm_qk_avxvnni(const struct kve_mat *w, const struct kve_q8k *xk, int T,
		       float *y, int ldy, int r0, int r1);
void kve_mm_q32_avx512vnni(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			   float *y, int ldy, int r0, int r1);
void kve_mm_qk_avx512vnni(const struct kve_mat *w, const struct kve_q8k *xk, int T,
			  float *y, int ldy, int r0, int r1);

/*
 * The selection, as a pure function (kve_kernels_select calls it with
 * kve_cpu_features(), $KVE_ISA, $KVE_SELFCHECK == "1" and the real sets;
 * tests call it with stand-ins and made-up feature masks). Sets, best
 * first: avx512vnni, avx512, avxvnni, avx2, c; a set is a candidate only
 * when cpu has every feature it needs (avx512vnni: AVX2 | AVX512 |
 * AVX512VNNI; avx512: AVX2 | AVX512; avxvnni: AVX2 | AVXVNNI; avx2:
 * AVX2) and it is not NULL. want (a set's name) caps the choice at that
 * set; unknown names are ignored. The sets never run where the engine
 * was developed (avx512vnni, avx512, avxvnni; any SIMD set when
 * force_check) must pass the self-check against c, or the next lower
 * candidate is taken, with a line in log per failure (log may be NULL:
 * then loglen is not looked at). NULL when a
 * self-check could not run for want of memory: no verdict, so no set is
 * given up for it (log says so); the caller fails and may try again.
 */
#define KVE_CPU_AVX2		1u	/* AVX2, FMA, F16C */
#define KVE_CPU_AVX512		2u	/* AVX-512 F, BW, VL */
#define KVE_CPU_AVXVNNI		4u	/* AVX-VNNI (VEX vpdpbusd) */
#define KVE_CPU_AVX512VNNI	8u	/* AVX-512 VNNI */
struct kve_kernel_sets {
	const struct kve_kernels *avx512vnni, *avx512, *avxvnni, *avx2, *c;
};
const struct kve_kernels *kve_kernels_pick_sets(unsigned cpu, const char *want,
						int force_check,
						const struct kve_kernel_sets *s,
						char *log, size_t loglen);
/* the same without the VNNI sets (the three-set form tests use) */
const struct kve_kernels *kve_kernels_pick(unsigned cpu, const char *want,
					   int force_check,
					   const struct kve_kernels *set512,
					   const struct kve_kernels *set2,
					   const struct kve_kernels *setc,
					   char *log, size_t loglen);
/* This CPU's KVE_CPU_* features (each also needing the OS to save the
 * registers it uses, as __builtin_cpu_supports checks):
 * kve_cpu_features_from(kve_cpu_probe()). */
unsigned kve_cpu_features(void);
/* What the CPU reports, one KVE_HAS_* bit per instruction set. */
#define KVE_HAS_AVX2		(1u << 0)
#define KVE_HAS_FMA		(1u << 1)
#define KVE_HAS_F16C		(1u << 2)
#define KVE_HAS_AVXVNNI		(1u << 3)
#define KVE_HAS_AVX512F		(1u << 4)
#define KVE_HAS_AVX512BW	(1u << 5)
#define KVE_HAS_AVX512VL	(1u << 6)
#define KVE_HAS_AVX512VNNI	(1u << 7)
unsigned kve_cpu_probe(void);
/* The decision, pure: KVE_CPU_AVX2 needs AVX2, FMA and F16C (every SIMD
 * set uses all three) and every other feature needs it too; AVX512 needs
 * F, BW and VL; the VNNI ones their own bit besides (AVX512VNNI also
 * AVX512). Tests call it with CPUs the host is not. */
unsigned kve_cpu_features_from(unsigned has);

/* The portable products of the types without SIMD ones in a set */
void kve_mm_bf16_c(const struct kve_mat *w, const float *x, int T, float *y, int ldy,
		   int r0, int r1);
void kve_mm_q32_c(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
		  int ldy, int r0, int r1);
void kve_mm_qk_c(const struct kve_mat *w, const struct kve_q8k *xk, int T, float *y,
		 int ldy, int r0, int r1);
/* the portable Q8_0 product, every layout (the Q8_0 x16 one's bits) */
void kve_mm_q8_c(const struct kve_mat *w, const struct kve_q8x *xq, int T, float *y,
		 int ldy, int r0, int r1);

/* Portable activation quantiser: the definition the SIMD ones match bit
 * for bit (d = amax/127, round half to even, NaN -> 0, clamp to +-127;
 * sum: the sum of the block's quants). */
void kve_quantize_q8x(const float *x, int n, struct kve_q8x *out);
void kve_quantize_q8x_avx2(const float *x, int n, struct kve_q8x *out);
/* The same over blocks of 256 (n a multiple of 256), bsums[i] the sum of
 * quants 16i..16i+15. */
void kve_quantize_q8k(const float *x, int n, struct kve_q8k *out);
void kve_quantize_q8k_avx2(const float *x, int n, struct kve_q8k *out);
void kve_f32_to_f16_avx2(uint16_t *dst, const float *src, int n);
void kve_silu_mul_avx2(float *g, const float *u, int n);
float kve_softmax_exp_avx2(float *sc, int n, float mx);
void kve_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
/*
 * BPE pre-tokenizer (tokenizer.c): splits text into the words merges apply
 * within, by the regular expression tokenizer.ggml.pre names ("gpt2" or
 * "default", "llama-bpe" (also "llama3", "llama-v3"), "qwen2"). name is
 * not NUL-terminated. Unknown names fail with a message naming the value.
 * kve_pretok_split calls fn for each word in order (the words concatenate
 * to the text; any bytes, ill-formed UTF-8 included); a non-zero return
 * from fn stops it and is returned. Safe to call concurrently.
 */
struct kve_pretok;
typedef int (*kve_word_fn)(void *ctx, const char *word, size_t n);
struct kve_pretok *kve_pretok_create(const char *name, size_t len, char *err,
				     size_t errlen);
void kve_pretok_free(struct kve_pretok *p);
const char *kve_pretok_name(const struct kve_pretok *p);
/* 1 when PCRE2 JIT-compiled the pattern, 0 when the interpreter runs it
 * (no JIT support, or executable memory refused): the same words. */
int kve_pretok_jit(const struct kve_pretok *p);
int kve_pretok_split(const struct kve_pretok *p, const char *text, size_t len,
		     kve_word_fn fn, void *ctx);
/* A BPE tokenizer's pre-tokenizer; NULL for SentencePiece. */
const struct kve_pretok *kve_tokenizer_pretok(const struct kve_tokenizer *t);

/* Dequantises row `row` of a matrix into out (cols floats). */
void kve_mat_row_f32(const struct kve_mat *m, uint32_t row, float *out);

/*
 * quant.c: the block formats. kve_dequant_block writes the values of one
 * block of a quantised type (GGUF's layout, as ggml's reference
 * dequantisation computes them, bit for bit) to out; F32/F16/BF16 one
 * value. kve_q4k_scales unpacks a Q4_K/Q5_K block's eight 6-bit scales
 * and minima (sc[0..7], then m[0..7]).
 */
void kve_dequant_block(uint32_t type, const uint8_t *blk, float *out);
void kve_q4k_scales(const uint8_t *blk, uint8_t out[16]);
/* the same blocks as integers and factors (quant.c says how they combine) */
void kve_q32_ints(uint32_t type, const uint8_t *blk, uint8_t q[32], float *d, float *m);
void kve_qk_ints(uint32_t type, const uint8_t *blk, int8_t q[QK_K], int sc[16], int mn[16],
		 float *d, float *dmin);
/*
 * A Q3_K block's sixteen 6-bit scales (before their -32) from its 12
 * scale bytes s, four at a time: scale i's low 4 bits are the low nibble
 * of byte i (i < 8) or the high one of byte i - 8, its top 2 bits bits
 * 2(i / 4), 2(i / 4) + 1 of byte 8 + i % 4 (quant.c, the kernels)
 */
static inline void kve_q3k_scales(const uint8_t *s, uint8_t out[16])
{
	uint32_t a[3], v[4];

	memcpy(a, s, 12);
	v[0] = (a[0] & 0x0f0f0f0f) | (a[2] & 0x03030303) << 4;
	v[1] = (a[1] & 0x0f0f0f0f) | ((a[2] >> 2) & 0x03030303) << 4;
	v[2] = ((a[0] >> 4) & 0x0f0f0f0f) | ((a[2] >> 4) & 0x03030303) << 4;
	v[3] = ((a[1] >> 4) & 0x0f0f0f0f) | ((a[2] >> 6) & 0x03030303) << 4;
	memcpy(out, v, 16);
}

/* the offset kve_q32_ints' quants carry (0: the type has a minimum) */
static inline int kve_q32_off(uint32_t type)
{
	return type == GGML_Q4_0 ? 8 : type == GGML_Q5_0 ? 16 : type == GGML_IQ4_NL ? 128 : 0;
}

static inline float kve_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

static inline float kve_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else {	/* subnormal: renormalise */
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			man &= 0x3ff;
			bits = sign | (exp << 23) | (man << 13);
		}
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | (man << 13);
	} else {
		bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	memcpy(&f, &bits, 4);
	return f;
}

/* F32/F16/BF16: the value at row r, column c (either layout) */
static inline float kve_mat_at(const struct kve_mat *w, uint32_t r, uint32_t c)
{
	const uint8_t *p = kve_mat_chunk(w, r, c / 8);
	float f;
	uint16_t h;

	if (w->type == GGML_F32) {
		memcpy(&f, p + 4 * (c % 8), 4);
		return f;
	}
	memcpy(&h, p + 2 * (c % 8), 2);
	return w->type == GGML_BF16 ? kve_bf16_to_f32(h) : kve_f16_to_f32(h);
}

/* Round to nearest even, like F16C's _cvtps_ph with mode 0. */
static inline uint16_t kve_f32_to_f16(float f)
{
	uint32_t x, sign, mant;
	int32_t exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	exp = (int32_t)((x >> 23) & 0xff);
	mant = x & 0x7fffff;
	if (exp == 255)
		return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
	exp = exp - 127 + 15;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		uint32_t shift, half, rem, r;
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000;
		shift = (uint32_t)(14 - exp);
		r = mant >> shift;
		half = 1u << (shift - 1);
		rem = mant & ((1u << shift) - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (mant >> 13);
		uint32_t rem = mant & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
			r++;	/* may carry into the exponent: still correct */
		return (uint16_t)(sign | r);
	}
}

#endif
