// SPDX-License-Identifier: MIT
/*
 * pack.c - repacks a weight matrix into panels (layout in
 * engine_internal.h, reasons in Documentation/engine.md "Weight layout").
 *
 * A one-token tile reads several rows side by side. Row after row, those
 * are short streams (1 KiB per row for a 512-wide F16 matrix) that the
 * hardware prefetcher barely ramps up on before they end. Packed, a tile
 * of one panel reads one linear stream, and the next tile continues it.
 * Every row keeps its values and every kernel its summation order, so
 * results are bit-identical in both layouts.
 *
 * The layout is written through the same helpers the kernels read it
 * with, so it is defined in one place. The 4- to 6-bit types keep each
 * block's bytes as GGUF has them and put the 4 rows' blocks side by side.
 *
 * A Q8_0 matrix holding a quant of -128 stays row-major: the packed
 * kernels move the activation's sign onto the weight, which -128 cannot
 * take (kernels_q8_avx2.h, q8_row). ggml's quantiser never writes -128.
 */
#include "engine_internal.h"

#include <errno.h>
#include <stdlib.h>

static int q8_has_m128(const struct kve_mat *w)
{
	uint32_t r, b;

	for (r = 0; r < w->rows; r++)
		for (b = 0; b < w->cols / QK8_0; b++)
			if (memchr(kve_q8_quants(w, r, b), 0x80, QK8_0))
				return 1;
	return 0;
}

int kve_mat_pack(struct kve_mat *w)
{
	uint32_t P, r0, i, c;
	struct kve_mat pk = *w;
	uint8_t *tmp;

	if (w->panel)
		return 0;
	if (w->type == GGML_F32 || w->type == GGML_F16 || w->type == GGML_BF16) {
		if (w->rows % KVE_PANEL_F || w->cols % 8)
			return 1;
		P = KVE_PANEL_F;
	} else if (w->type == GGML_Q8_0) {
		if (w->rows % KVE_PANEL_Q8 || q8_has_m128(w))
			return 1;
		P = KVE_PANEL_Q8;
	} else if (ggml_blck_size(w->type) > 1) {	/* the other quantised types */
		if (w->rows % KVE_PANEL_Q)
			return 1;
		P = KVE_PANEL_Q;
	} else {
		return 1;
	}
	tmp = malloc(P * w->row_bytes);
	if (!tmp)
		return -ENOMEM;
	pk.panel = P;
	for (r0 = 0; r0 < w->rows; r0 += P) {
		/* a panel occupies the bytes its rows did: copy them out first */
		memcpy(tmp, w->data + (size_t)r0 * w->row_bytes, P * w->row_bytes);
		for (i = 0; i < P; i++) {
			const uint8_t *row = tmp + (size_t)i * w->row_bytes;

			if (w->type == GGML_Q8_0) {
				for (c = 0; c < w->cols / QK8_0; c++) {
					const uint8_t *blk = row + (size_t)c * Q8_0_BYTES;

					memcpy((uint8_t *)kve_q8_scale(&pk, r0 + i, c), blk, 2);
					memcpy((uint8_t *)kve_q8_quants(&pk, r0 + i, c), blk + 2, QK8_0);
				}
			} else if (ggml_blck_size(w->type) > 1) {
				size_t bb = ggml_blck_bytes(w->type);

				for (c = 0; c < w->cols / ggml_blck_size(w->type); c++)
					memcpy((uint8_t *)kve_mat_blk(&pk, r0 + i, c),
					       row + (size_t)c * bb, bb);
			} else {
				size_t chunk = w->row_bytes / (w->cols / 8);

				for (c = 0; c < w->cols / 8; c++)
					memcpy((uint8_t *)kve_mat_chunk(&pk, r0 + i, c),
					       row + c * chunk, chunk);
			}
		}
	}
	free(tmp);
	w->panel = P;
	return 0;
}

/*
 * Q4_0 and IQ4_NL (4 groups, KVE_PANEL_Q4X16) and Q8_0 (8 groups, KVE_PANEL_Q8X16)
 * in 16-row panels, kve_x16_put's layout (engine_internal.h). A Q8_0
 * quant of -128 is fine there (the VNNI tile offsets the weights, not
 * the sign).
 */
static int pack_x16(struct kve_mat *w, uint32_t groups)
{
	const size_t bb = 2 + 4 * (size_t)groups;	/* GGUF's block */
	uint32_t r0, i, b, nb = w->cols / 32;	/* 32 values a block, both types */
	uint8_t *tmp = malloc(16 * w->row_bytes);

	if (!tmp)
		return -ENOMEM;
	for (r0 = 0; r0 < w->rows; r0 += 16) {
		uint8_t *panel = (uint8_t *)w->data + (size_t)r0 * w->row_bytes;

		memcpy(tmp, panel, 16 * w->row_bytes);
		for (i = 0; i < 16; i++)
			for (b = 0; b < nb; b++)
				kve_x16_put(panel + (size_t)b * 16 * bb, i, groups,
					    tmp + (size_t)i * w->row_bytes + (size_t)b * bb);
	}
	free(tmp);
	w->panel = 16;
	return 0;
}

_Static_assert(KVE_PANEL_Q4X16 == 16 && KVE_PANEL_Q8X16 == 16 && KVE_Q4X16_BLK == 16 * 18 &&
	       KVE_Q8X16_BLK == 16 * 34, "pack_x16's layouts");

/* the K-quants and IQ4_XS in 16-row panels (engine_internal.h, KVE_PANEL_QKX16) */
static int pack_qkx16(struct kve_mat *w)
{
	uint32_t r0, i, b, n, g, x, len, nb = w->cols / QK_K;
	size_t bb = ggml_blck_bytes(w->type);
	uint8_t *tmp = malloc(KVE_PANEL_QKX16 * w->row_bytes);

	if (!tmp)
		return -ENOMEM;
	w->panel = KVE_PANEL_QKX16;	/* for kve_qkx16_blk */
	for (r0 = 0; r0 < w->rows; r0 += KVE_PANEL_QKX16) {
		memcpy(tmp, w->data + (size_t)r0 * w->row_bytes, KVE_PANEL_QKX16 * w->row_bytes);
		for (b = 0; b < nb; b++) {
			uint8_t *dst = (uint8_t *)kve_qkx16_blk(w, r0, b);

			for (i = 0; i < KVE_PANEL_QKX16; i++) {
				const uint8_t *blk = tmp + (size_t)i * w->row_bytes + b * bb;

				for (n = 0; (len = kve_qkx16_piece(w->type, i, n, &g, &x)); n++)
					memcpy(dst + x, blk + g, len);
			}
		}
	}
	free(tmp);
	return 0;
}

int kve_mat_pack_for(struct kve_mat *w, const struct kve_kernels *k)
{
	if (k && k->q4_0_x16 && !w->panel && (w->type == GGML_Q4_0 || w->type == GGML_IQ4_NL) &&
	    w->rows % KVE_PANEL_Q4X16 == 0)
		return pack_x16(w, 4);
	if (k && k->q8_x16 && !w->panel && w->type == GGML_Q8_0 &&
	    w->rows % KVE_PANEL_Q8X16 == 0)
		return pack_x16(w, QK8_0 / 4);
	if (k && k->qk_x16 && !w->panel && ggml_blck_size(w->type) == QK_K &&
	    w->rows % KVE_PANEL_QKX16 == 0)
		return pack_qkx16(w);
	return kve_mat_pack(w);
}
