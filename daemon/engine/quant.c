// SPDX-License-Identifier: MIT
/*
 * quant.c - the quantised block formats of GGUF files: what the bytes of
 * one block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_NL or IQ4_XS mean, as the public format description defines them
 * (Documentation/engine.md, "Tensor types"), written out as the values
 * ggml's reference dequantisation computes, bit for bit (the same float
 * operations in the same order: the peer test checks every type against
 * libggml on random blocks). The kernels compute with the integers and
 * scales directly; this is the statement of what those integers mean, and
 * what row lookups (the token embedding) and the tests use.
 *
 * Owns no memory and no layout beyond one block (panels: pack.c).
 */
#include "engine_internal.h"

static float f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return kve_f16_to_f32(h);
}

/*
 * Q4_K and Q5_K: eight sub-blocks of 32 values, each with a 6-bit scale
 * and a 6-bit minimum, packed in 12 bytes: bytes 0-3 hold the low 6 bits
 * of scales 0-3 (and in their top 2 bits the high bits of scales 4-7),
 * bytes 4-7 the same for minima 0-3 (and 4-7), bytes 8-11 the low 4 bits
 * of scales 4-7 (low nibble) and minima 4-7 (high nibble).
 */
void kve_q4k_scales(const uint8_t *blk, uint8_t out[16])
{
	const uint8_t *s = blk + 4;
	int j;

	for (j = 0; j < 4; j++) {
		out[j] = s[j] & 63;
		out[8 + j] = s[j + 4] & 63;
		out[4 + j] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
		out[12 + j] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
	}
}

/* The 32 5-bit values of a Q5_0/Q5_1 block (qh: bit i is value i's 5th
 * bit; qs: byte i holds value i in its low nibble, i + 16 in its high) */
static void q5_values(const uint8_t *qh4, const uint8_t *qs, int *v)
{
	uint32_t qh;
	int i;

	memcpy(&qh, qh4, 4);
	for (i = 0; i < 16; i++) {
		v[i] = (qs[i] & 0xF) | (int)(((qh >> i) & 1) << 4);
		v[i + 16] = (qs[i] >> 4) | (int)(((qh >> (i + 16)) & 1) << 4);
	}
}

void kve_dequant_block(uint32_t type, const uint8_t *b, float *out)
{
	uint8_t sm[16];
	int v[32], i, j;
	float d, m;

	switch (type) {
	case GGML_F32:
		memcpy(out, b, 4);
		break;
	case GGML_F16:
		out[0] = f16(b);
		break;
	case GGML_BF16: {
		uint16_t h;

		memcpy(&h, b, 2);
		out[0] = kve_bf16_to_f32(h);
		break;
	}
	case GGML_Q8_0:	/* fp16 d, 32 int8: d * q */
		d = f16(b);
		for (i = 0; i < 32; i++)
			out[i] = (float)(int8_t)b[2 + i] * d;
		break;
	case GGML_Q4_0:	/* fp16 d, 16 bytes: d * (q - 8) */
		d = f16(b);
		for (i = 0; i < 16; i++) {
			out[i] = (float)((b[2 + i] & 0xF) - 8) * d;
			out[i + 16] = (float)((b[2 + i] >> 4) - 8) * d;
		}
		break;
	case GGML_Q4_1:	/* fp16 d, fp16 m, 16 bytes: d * q + m */
		d = f16(b);
		m = f16(b + 2);
		for (i = 0; i < 16; i++) {
			out[i] = (float)(b[4 + i] & 0xF) * d + m;
			out[i + 16] = (float)(b[4 + i] >> 4) * d + m;
		}
		break;
	case GGML_Q5_0:	/* fp16 d, 4 bytes qh, 16 bytes qs: d * (q - 16) */
		d = f16(b);
		q5_values(b + 2, b + 6, v);
		for (i = 0; i < 32; i++)
			out[i] = (float)(v[i] - 16) * d;
		break;
	case GGML_Q5_1:	/* fp16 d, fp16 m, qh, qs: d * q + m */
		d = f16(b);
		m = f16(b + 2);
		q5_values(b + 4, b + 8, v);
		for (i = 0; i < 32; i++)
			out[i] = (float)v[i] * d + m;
		break;
	case GGML_Q4_K:
	case GGML_Q5_K: {
		/* fp16 d, fp16 dmin, 12 scale bytes, [Q5_K: 32 bytes qh,] 128
		 * bytes qs. Values 64k..64k+31 are the low nibbles of qs[32k..
		 * 32k+31], 64k+32.. the high ones; Q5_K's 5th bit of value
		 * 64k + 32h + l is bit 2k + h of qh[l]. Sub-block s:
		 * (d * sc[s]) * q - dmin * m[s]. */
		const uint8_t *qh = b + 16;
		const uint8_t *qs = b + (type == GGML_Q5_K ? 48 : 16);

		d = f16(b);
		m = f16(b + 2);
		kve_q4k_scales(b, sm);
		for (j = 0; j < 8; j++) {
			float d1 = d * (float)sm[j], m1 = m * (float)sm[8 + j];

			for (i = 0; i < 32; i++) {
				int q = j & 1 ? qs[32 * (j / 2) + i] >> 4 : qs[32 * (j / 2) + i] & 0xF;

				if (type == GGML_Q5_K && (qh[i] >> j) & 1)
					q += 16;
				out[32 * j + i] = d1 * (float)q - m1;
			}
		}
		break;
	}
	case GGML_IQ4_NL:	/* fp16 d, qs[16] as Q4_0's: d * values[q] */
		d = f16(b);
		for (i = 0; i < 16; i++) {
			out[i] = d * (float)ggml_iq4nl_value(b[2 + i] & 0xF);
			out[i + 16] = d * (float)ggml_iq4nl_value(b[2 + i] >> 4);
		}
		break;
	case GGML_IQ4_XS:
		/* fp16 d, u16 scales_h, scales_l[4], qs[128]: sub-block s of
		 * 32 values is IQ4_NL's qs[16] (at 16 s) with the scale
		 * d * (ls - 32), ls 6 bits: nibble s % 2 of scales_l[s / 2]
		 * and bits 2s, 2s + 1 of scales_h above it (kve_qk_ints) */
	case GGML_Q3_K: {	/* (d * sc) * q, a scale per 16 (Q3_K) or 32 values */
		int8_t q[QK_K];
		int sc[16], mn[16], per = type == GGML_Q3_K ? 16 : 32;
		float dm;

		kve_qk_ints(type, b, q, sc, mn, &d, &dm);
		for (i = 0; i < QK_K; i++)
			out[i] = d * (float)sc[i / per] * (float)q[i];
		break;
	}
	case GGML_Q2_K: {
		/* 16 bytes scales (low nibble the scale, high the minimum of
		 * 16 values), 64 bytes qs, fp16 d, dmin: value 128n + 32j + l
		 * is bits 2j, 2j + 1 of qs[32n + l], (d * sc) * q - dmin * m
		 * (kve_qk_ints) */
		int8_t q[QK_K];
		int sc[16], mn[16];
		float dm;

		kve_qk_ints(type, b, q, sc, mn, &d, &dm);
		for (i = 0; i < QK_K; i++)
			out[i] = d * (float)sc[i / 16] * (float)q[i] - dm * (float)mn[i / 16];
		break;
	}
	case GGML_Q6_K: {
		/* 128 bytes ql, 64 bytes qh, 16 int8 scales, fp16 d. In each
		 * half of 128 values (ql 64 bytes, qh 32 bytes on): value l
		 * (l < 32) is ql[l] low nibble | qh[l] bits 0-1 << 4, value
		 * 32 + l ql[32 + l] low | qh[l] bits 2-3, value 64 + l ql[l]
		 * high | bits 4-5, value 96 + l ql[32 + l] high | bits 6-7;
		 * each minus 32, times d * scale of its 16 values. */
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		int n;

		d = f16(b + 208);
		for (n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8) {
			float *y = out + 128 * n;

			for (i = 0; i < 32; i++) {
				int is = i / 16;
				int q1 = ((ql[i] & 0xF) | ((qh[i] & 3) << 4)) - 32;
				int q2 = ((ql[i + 32] & 0xF) | (((qh[i] >> 2) & 3) << 4)) - 32;
				int q3 = ((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) - 32;
				int q4 = ((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) - 32;

				y[i] = d * (float)sc[is] * (float)q1;
				y[i + 32] = d * (float)sc[is + 2] * (float)q2;
				y[i + 64] = d * (float)sc[is + 4] * (float)q3;
				y[i + 96] = d * (float)sc[is + 6] * (float)q4;
			}
		}
		break;
	}
	}
}

/*
 * One block of Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL as integers: q[i] the 32
 * unsigned quants (0..15, 0..31 for the 5-bit types, IQ4_NL's table value
 * + 128: 1..241), *d the scale and *m the minimum (Q4_1, Q5_1; the
 * others' offset, kve_q32_off times d, is theirs to apply: value =
 * d * (q - off) or d * q + m).
 */
void kve_q32_ints(uint32_t type, const uint8_t *b, uint8_t q[32], float *d, float *m)
{
	int v[32], i;

	*d = f16(b);
	*m = 0;
	switch (type) {
	case GGML_Q4_0:
	case GGML_Q4_1:
		if (type == GGML_Q4_1)
			*m = f16(b + 2);
		b += type == GGML_Q4_1 ? 4 : 2;
		for (i = 0; i < 16; i++) {
			q[i] = b[i] & 0xF;
			q[i + 16] = b[i] >> 4;
		}
		break;
	case GGML_IQ4_NL:
		for (i = 0; i < 16; i++) {
			q[i] = (uint8_t)(ggml_iq4nl_value(b[2 + i] & 0xF) + 128);
			q[i + 16] = (uint8_t)(ggml_iq4nl_value(b[2 + i] >> 4) + 128);
		}
		break;
	default:	/* Q5_0, Q5_1 */
		if (type == GGML_Q5_1)
			*m = f16(b + 2);
		b += type == GGML_Q5_1 ? 4 : 2;
		q5_values(b, b + 4, v);
		for (i = 0; i < 32; i++)
			q[i] = (uint8_t)v[i];
		break;
	}
}

/*
 * Q3_K: 32 bytes hmask, 64 bytes qs, 12 scale bytes, fp16 d. In each half
 * n of 128 values, values 32j + l (j < 4, l < 32) are bits 2j, 2j + 1 of
 * qs[32n + l], less 4 unless bit 4n + j of hmask[l] is set: -4..3. The 16
 * scales (one per 16 values) are 6-bit, less 32: their low 4 bits are the
 * low nibbles of bytes 0-7 (scales 0-7) and the high nibbles (8-15), their
 * high 2 bits bits 2k, 2k + 1 of bytes 8-11 (byte 8 + i % 4, k = i / 4).
 */
static void q3k_ints(const uint8_t *b, int8_t q[QK_K], int sc[16], float *d)
{
	const uint8_t *hm = b, *qs = b + 32;
	uint8_t s[16];
	int i, n, j, l;

	*d = f16(b + 108);
	kve_q3k_scales(b + 96, s);
	for (i = 0; i < 16; i++)
		sc[i] = s[i] - 32;
	for (n = 0; n < 2; n++)
		for (j = 0; j < 4; j++)
			for (l = 0; l < 32; l++)
				q[128 * n + 32 * j + l] =
					(int8_t)(((qs[32 * n + l] >> (2 * j)) & 3) -
						 ((hm[l] >> (4 * n + j)) & 1 ? 0 : 4));
}

/*
 * One block of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS as integers: q[i]
 * the 256 quants (Q2_K 0..3, Q3_K -4..3, Q4_K 0..15, Q5_K 0..31, Q6_K
 * -32..31, IQ4_XS its table's values), sc[] the scales (Q4_K/Q5_K: 8, one
 * per 32 values; IQ4_XS: 8 signed, one per 32; Q2_K: 16, Q3_K/Q6_K: 16
 * signed, one per 16), mn[] the minima (Q4_K/Q5_K: 8, Q2_K: 16), *d and
 * *dmin the block's fp16 factors. Value i is d * sc[i / 32] * q[i] -
 * dmin * mn[i / 32] (Q4_K, Q5_K; no minimum for IQ4_XS), d * sc[i / 16] *
 * q[i] - dmin * mn[i / 16] (Q2_K) or d * sc[i / 16] * q[i] (Q3_K, Q6_K).
 */
void kve_qk_ints(uint32_t type, const uint8_t *b, int8_t q[QK_K], int sc[16], int mn[16],
		 float *d, float *dmin)
{
	uint8_t sm[16];
	int i, j, n;

	if (type == GGML_Q2_K) {	/* scales[16], qs[64], fp16 d, dmin */
		*d = f16(b + 80);
		*dmin = f16(b + 82);
		for (i = 0; i < 16; i++) {
			sc[i] = b[i] & 0xF;
			mn[i] = b[i] >> 4;
		}
		/* value 128n + 32j + l: bits 2j, 2j + 1 of qs[32n + l] */
		for (n = 0; n < 2; n++)
			for (j = 0; j < 4; j++)
				for (i = 0; i < 32; i++)
					q[128 * n + 32 * j + i] = (int8_t)((b[16 + 32 * n + i] >> 2 * j) & 3);
		return;
	}
	if (type == GGML_Q3_K) {
		*dmin = 0;
		q3k_ints(b, q, sc, d);
		return;
	}
	if (type == GGML_IQ4_XS) {
		uint16_t h;

		memcpy(&h, b + 2, 2);
		*d = f16(b);
		*dmin = 0;
		for (j = 0; j < 8; j++) {
			const uint8_t *qs = b + 8 + 16 * j;

			sc[j] = (((b[4 + j / 2] >> 4 * (j % 2)) & 0xF) | ((h >> 2 * j) & 3) << 4) - 32;
			for (i = 0; i < 16; i++) {
				q[32 * j + i] = ggml_iq4nl_value(qs[i] & 0xF);
				q[32 * j + i + 16] = ggml_iq4nl_value(qs[i] >> 4);
			}
		}
		return;
	}
	if (type == GGML_Q6_K) {
		const uint8_t *ql = b, *qh = b + 128;

		*d = f16(b + 208);
		*dmin = 0;
		for (i = 0; i < 16; i++)
			sc[i] = (int8_t)b[192 + i];
		for (n = 0; n < 2; n++, ql += 64, qh += 32) {
			for (i = 0; i < 32; i++) {
				q[128 * n + i] = (int8_t)(((ql[i] & 0xF) | ((qh[i] & 3) << 4)) - 32);
				q[128 * n + i + 32] = (int8_t)(((ql[i + 32] & 0xF) |
								(((qh[i] >> 2) & 3) << 4)) - 32);
				q[128 * n + i + 64] = (int8_t)(((ql[i] >> 4) |
								(((qh[i] >> 4) & 3) << 4)) - 32);
				q[128 * n + i + 96] = (int8_t)(((ql[i + 32] >> 4) |
								(((qh[i] >> 6) & 3) << 4)) - 32);
			}
		}
		return;
	}
	*d = f16(b);
	*dmin = f16(b + 2);
	kve_q4k_scales(b, sm);
	for (j = 0; j < 8; j++) {
		const uint8_t *qs = b + (type == GGML_Q5_K ? 48 : 16) + 32 * (j / 2);

		sc[j] = sm[j];
		mn[j] = sm[8 + j];
		for (i = 0; i < 32; i++) {
			int v = j & 1 ? qs[i] >> 4 : qs[i] & 0xF;

			if (type == GGML_Q5_K && (b[16 + i] >> j) & 1)
				v += 16;
			q[32 * j + i] = (int8_t)v;
		}
	}
}
