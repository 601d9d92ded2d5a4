// SPDX-License-Identifier: MIT
/*
 * kernels_c.c - portable C kernels: the fallback for CPUs without AVX2 and
 * the readable statement of what the SIMD sets in kernels_avx2.c and
 * kernels_avx512.c compute, for every tensor type. Also the activation
 * quantisers (Q8_0 blocks of 32, Q8_K blocks of 256) all sets match.
 */
#include "engine_internal.h"

#include <math.h>

#define LANES 8
#define CHUNK 256	/* rows are read CHUNK columns at a time */
#define TGROUP 16	/* tokens per pass over a row */

static inline float lanes_sum(const float *a)
{
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static void mm_rows(const struct kve_mat *w, const float *x, int T, float *y,
		    int ldy, int r0, int r1)
{
	float acc[TGROUP][LANES];
	float buf[CHUNK];
	int cols = (int)w->cols;
	int r, t0, t, c0, i;

	for (r = r0; r < r1; r++) {
		for (t0 = 0; t0 < T; t0 += TGROUP) {
			int t1 = t0 + TGROUP < T ? t0 + TGROUP : T;

			for (t = t0; t < t1; t++)
				for (i = 0; i < LANES; i++)
					acc[t - t0][i] = 0;
			for (c0 = 0; c0 < cols; c0 += CHUNK) {
				int n = cols - c0 < CHUNK ? cols - c0 : CHUNK;

				for (i = 0; i < n; i++)
					buf[i] = kve_mat_at(w, (uint32_t)r, (uint32_t)(c0 + i));
				for (t = t0; t < t1; t++) {
					const float *xp = x + (size_t)t * cols + c0;
					float *a = acc[t - t0];
					for (i = 0; i < n; i++)
						a[(c0 + i) % LANES] += buf[i] * xp[i];
				}
			}
			for (t = t0; t < t1; t++)
				y[(size_t)t * ldy + r] = lanes_sum(acc[t - t0]);
		}
	}
}

static void mm_f32_c(const struct kve_mat *w, const float *x, int T, float *y,
		     int ldy, int r0, int r1)
{
	mm_rows(w, x, T, y, ldy, r0, r1);
}

static void mm_f16_c(const struct kve_mat *w, const float *x, int T, float *y,
		     int ldy, int r0, int r1)
{
	mm_rows(w, x, T, y, ldy, r0, r1);
}

void kve_mm_q8_c(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		 float *y, int ldy, int r0, int r1)
{
	int nb = (int)w->cols / QK8_0;
	int r, t, b, j;

	for (r = r0; r < r1; r++) {
		for (t = 0; t < T; t++) {
			const struct kve_q8x *xb = xq + (size_t)t * nb;
			float s = 0;

			for (b = 0; b < nb; b++) {
				uint8_t buf[Q8_0_BYTES];
				const uint8_t *sc, *q;
				int32_t isum = 0;
				uint16_t h;

				if (w->panel == KVE_PANEL_Q8X16) {	/* gathered; the others in place */
					sc = kve_q8_blk_get(w, (uint32_t)r, (uint32_t)b, buf);
					q = sc + 2;
				} else {
					sc = kve_q8_scale(w, (uint32_t)r, (uint32_t)b);
					q = kve_q8_quants(w, (uint32_t)r, (uint32_t)b);
				}
				memcpy(&h, sc, 2);
				for (j = 0; j < QK8_0; j++)
					isum += (int32_t)(int8_t)q[j] * xb[b].q[j];
				s += (float)isum * (kve_f16_to_f32(h) * xb[b].d);
			}
			y[(size_t)t * ldy + r] = s;
		}
	}
}

void kve_mm_bf16_c(const struct kve_mat *w, const float *x, int T, float *y,
		      int ldy, int r0, int r1)
{
	mm_rows(w, x, T, y, ldy, r0, r1);
}

/*
 * Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL by Q8_0 activations: per block the
 * exact integer sum of the unsigned quants times the activation quants;
 * the offset (Q4_0 -8, Q5_0 -16, -128 from IQ4_NL's table + 128) comes
 * off through the activations' sum, the minimum (Q4_1, Q5_1) goes on
 * through it. Blocks are summed in order, each (row, token) on its own.
 */
void kve_mm_q32_c(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		     float *y, int ldy, int r0, int r1)
{
	int nb = (int)w->cols / 32, r, t, b, j;
	int off = kve_q32_off(w->type);
	uint8_t q[32], buf[32];
	float d, m;

	for (r = r0; r < r1; r++) {
		for (t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = 0;
		for (b = 0; b < nb; b++) {
			kve_q32_ints(w->type, kve_mat_blk_get(w, (uint32_t)r, (uint32_t)b, buf),
				     q, &d, &m);
			for (t = 0; t < T; t++) {
				const struct kve_q8x *x = xq + (size_t)t * nb + b;
				int32_t isum = 0;

				for (j = 0; j < 32; j++)
					isum += q[j] * x->q[j];
				if (off)
					y[(size_t)t * ldy + r] += (float)(isum - off * x->sum) * (d * x->d);
				else
					y[(size_t)t * ldy + r] += (float)isum * (d * x->d) + m * x->s;
			}
		}
	}
}

/*
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS by Q8_K activations: per 256-value
 * block the exact integer sum over its sub-blocks of scale times the sum
 * of quant times activation quant, and (Q2_K, Q4_K, Q5_K) of minimum
 * times the activations' sums; then one scale for each.
 */
void kve_mm_qk_c(const struct kve_mat *w, const struct kve_q8k *xk, int T,
		    float *y, int ldy, int r0, int r1)
{
	int nb = (int)w->cols / QK_K, r, t, b, i, sc[16], mn[16];
	int8_t q[QK_K];
	uint8_t buf[256];	/* a block of a 16-row panel, copied */
	float d, dmin;

	for (r = r0; r < r1; r++) {
		for (t = 0; t < T; t++)
			y[(size_t)t * ldy + r] = 0;
		for (b = 0; b < nb; b++) {
			kve_qk_ints(w->type, kve_mat_blk_get(w, (uint32_t)r, (uint32_t)b, buf), q,
				    sc, mn, &d, &dmin);
			for (t = 0; t < T; t++) {
				const struct kve_q8k *x = xk + (size_t)t * nb + b;
				int32_t isum = 0, msum = 0, part;
				int per = w->type == GGML_Q6_K || w->type == GGML_Q3_K ||
					  w->type == GGML_Q2_K ? 16 : 32;

				for (i = 0; i < QK_K; i += per) {
					int j;

					for (part = 0, j = 0; j < per; j++)
						part += q[i + j] * x->q[i + j];
					isum += sc[i / per] * part;
				}
				/* Q3_K, Q6_K, IQ4_XS: no minima */
				if (w->type == GGML_Q3_K || w->type == GGML_Q6_K ||
				    w->type == GGML_IQ4_XS) {
					y[(size_t)t * ldy + r] += (d * x->d) * (float)isum;
					continue;
				}
				if (w->type == GGML_Q2_K)	/* a minimum per 16 */
					for (i = 0; i < 16; i++)
						msum += mn[i] * x->bsums[i];
				else
					for (i = 0; i < 8; i++)
						msum += mn[i] * (x->bsums[2 * i] + x->bsums[2 * i + 1]);
				y[(size_t)t * ldy + r] += (d * x->d) * (float)isum -
							  (dmin * x->d) * (float)msum;
			}
		}
	}
}

static float dot_f32_c(const float *a, const float *b, int n)
{
	float acc[LANES] = { 0 };
	int i;

	for (i = 0; i < n; i++)
		acc[i % LANES] += a[i] * b[i];
	return lanes_sum(acc);
}

static float dot_f16_c(const float *a, const uint16_t *b, int n)
{
	float acc[LANES] = { 0 };
	int i;

	for (i = 0; i < n; i++)
		acc[i % LANES] += a[i] * kve_f16_to_f32(b[i]);
	return lanes_sum(acc);
}

static void axpy_f32_c(float *y, float a, const float *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void axpy_f16_c(float *y, float a, const uint16_t *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		y[i] += a * kve_f16_to_f32(x[i]);
}

/* x * id as a quant: round half to even, NaN -> 0, clamped to +-127 */
static int8_t quant_one(float x, float id)
{
	float v = x * id;

	/* NaN/inf inputs (corrupt weights) must not be UB */
	if (!(v > -127.5f))
		v = v == v && v < 0 ? -127.0f : 0.0f;
	if (v > 127.0f)
		v = 127.0f;
	return (int8_t)lrintf(v);
}

/*
 * Q8_0 activations as llama.cpp's CPU backend makes them (so the integer
 * dot products are the same): d = amax / 127 rounded to fp16 (held as a
 * float), q = round(x * 127 / amax), NaN ignored in amax; s as its Q8_1
 * blocks have it, (amax / 127) * sum(q) rounded to fp16.
 */
void kve_quantize_q8x(const float *x, int n, struct kve_q8x *out)
{
	int b, j;

	for (b = 0; b < n / QK8_0; b++) {
		const float *p = x + b * QK8_0;
		float amax = 0, id;

		for (j = 0; j < QK8_0; j++)
			amax = fmaxf(amax, fabsf(p[j]));
		out[b].d = kve_f16_to_f32(kve_f32_to_f16(amax / 127.0f));
		id = amax != 0 ? 127.0f / amax : 0.0f;
		out[b].sum = 0;
		for (j = 0; j < QK8_0; j++) {
			out[b].q[j] = quant_one(p[j], id);
			out[b].sum += out[b].q[j];
		}
		out[b].s = kve_f16_to_f32(kve_f32_to_f16(amax / 127.0f * (float)out[b].sum));
	}
}

/*
 * Q8_K activations as ggml's reference makes them: the first value of
 * largest magnitude, max (its sign kept), gives iscale = -127 / max,
 * q = round(iscale * x), d = 1 / iscale (so q and d have their signs
 * flipped when max > 0; the products are the same).
 */
void kve_quantize_q8k(const float *x, int n, struct kve_q8k *out)
{
	int b, j;

	for (b = 0; b < n / QK_K; b++) {
		const float *p = x + b * QK_K;
		float amax = 0, max = 0, iscale;

		for (j = 0; j < QK_K; j++) {
			if (fabsf(p[j]) > amax) {
				amax = fabsf(p[j]);
				max = p[j];
			}
		}
		iscale = amax != 0 ? -127.0f / max : 0.0f;
		out[b].d = amax != 0 ? 1.0f / iscale : 0.0f;
		for (j = 0; j < QK_K / 16; j++)
			out[b].bsums[j] = 0;
		for (j = 0; j < QK_K; j++) {
			out[b].q[j] = quant_one(p[j], iscale);
			out[b].bsums[j / 16] = (int16_t)(out[b].bsums[j / 16] + out[b].q[j]);
		}
	}
}

static void f32_to_f16_c(uint16_t *dst, const float *src, int n)
{
	int i;

	for (i = 0; i < n; i++)
		dst[i] = kve_f32_to_f16(src[i]);
}

static void silu_mul_c(float *g, const float *u, int n)
{
	int i;

	for (i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void attn_scores_c(const float *q, int nh, const void *k, int f16, int n, int hd,
			  float scale, float *sc, size_t ss)
{
	int h, j;

	for (h = 0; h < nh; h++) {
		const float *qh = q + (size_t)h * hd;

		for (j = 0; j < n; j++) {
			float v = f16 ? dot_f16_c(qh, (const uint16_t *)k + (size_t)j * hd, hd) :
					dot_f32_c(qh, (const float *)k + (size_t)j * hd, hd);
			sc[(size_t)h * ss + j] = v * scale;
		}
	}
}

static float softmax_exp_c(float *sc, int n, float mx)
{
	float sum = 0;
	int j;

	for (j = 0; j < n; j++) {
		sc[j] = expf(sc[j] - mx);
		sum += sc[j];
	}
	return sum;
}

static void attn_values_c(float *out, int nh, const float *p, size_t ps, const void *v,
			  int f16, int n, int hd)
{
	int h, j;

	for (h = 0; h < nh; h++) {
		float *oh = out + (size_t)h * hd;

		for (j = 0; j < n; j++) {
			if (f16)
				axpy_f16_c(oh, p[(size_t)h * ps + j],
					   (const uint16_t *)v + (size_t)j * hd, hd);
			else
				axpy_f32_c(oh, p[(size_t)h * ps + j],
					   (const float *)v + (size_t)j * hd, hd);
		}
	}
}

void kve_attn_scores_q8_c(const struct kve_q8x *q, int nh, const uint8_t *k, int bt, int n,
			  int hd, float scale, float *sc, size_t ss)
{
	const uint8_t *kq = (const uint8_t *)kve_kvq8_quants(k, bt, hd);
	int nb = hd / QK8_0, h, j, b, i;

	for (h = 0; h < nh; h++) {
		const struct kve_q8x *qh = q + (size_t)h * nb;

		for (j = 0; j < n; j++) {
			float s = 0;

			for (b = 0; b < nb; b++) {
				int32_t isum = 0;
				uint16_t d;
				float f;

				memcpy(&d, k + ((size_t)b * bt + j) * 2, 2);
				for (i = 0; i < QK8_0; i++)
					isum += (int32_t)qh[b].q[i] *
						kve_kvq8_k(kq, bt, j, b * QK8_0 + i);
				f = (float)isum * (kve_f16_to_f32(d) * qh[b].d);
				s = b ? s + f : f;
			}
			sc[(size_t)h * ss + j] = s * scale;
		}
	}
}

void kve_attn_values_q8_c(float *out, int nh, const float *p, size_t ps, const uint8_t *v,
			  int bt, int n, int hd)
{
	const int8_t *vq = kve_kvq8_quants(v, bt, hd);
	int nb = hd / QK8_0, h, j, b, i;

	for (h = 0; h < nh; h++) {
		float *oh = out + (size_t)h * hd;

		for (j = 0; j < n; j++) {
			for (b = 0; b < nb; b++) {
				const int8_t *r = vq + (size_t)j * hd + b * QK8_0;
				uint16_t d;
				float a;

				memcpy(&d, v + ((size_t)b * bt + j) * 2, 2);
				a = p[(size_t)h * ps + j] * kve_f16_to_f32(d);
				for (i = 0; i < QK8_0; i++)
					oh[b * QK8_0 + i] += a * (float)r[i];
			}
		}
	}
}

void kve_hadamard_c(float *x, int len, int n)
{
	float s = 1.0f / sqrtf((float)n);
	int o, w, i, j;

	for (o = 0; o < len; o += n) {
		float *p = x + o;

		for (w = 1; w < n; w *= 2)
			for (i = 0; i < n; i += 2 * w)
				for (j = i; j < i + w; j++) {
					float a = p[j], b = p[j + w];

					p[j] = a + b;
					p[j + w] = a - b;
				}
		for (i = 0; i < n; i++)
			p[i] *= s;
	}
}

static void rmsnorm_c(float *out, const float *x, const float *w, int n, float eps)
{
	float ss = 0, s;
	int i;

	for (i = 0; i < n; i++)
		ss += x[i] * x[i];
	s = 1.0f / sqrtf(ss / (float)n + eps);
	for (i = 0; i < n; i++)
		out[i] = x[i] * s * w[i];
}

const struct kve_kernels kve_kernels_c = {
	.name = "c",
	.mm_f32 = mm_f32_c,
	.mm_f16 = mm_f16_c,
	.mm_q8 = kve_mm_q8_c,
	.mm_bf16 = kve_mm_bf16_c,
	.mm_q32 = kve_mm_q32_c,
	.mm_qk = kve_mm_qk_c,
	.dot_f32 = dot_f32_c,
	.dot_f16 = dot_f16_c,
	.axpy_f32 = axpy_f32_c,
	.axpy_f16 = axpy_f16_c,
	.quantize_q8x = kve_quantize_q8x,
	.quantize_q8k = kve_quantize_q8k,
	.f32_to_f16 = f32_to_f16_c,
	.silu_mul = silu_mul_c,
	.attn_scores = attn_scores_c,
	.softmax_exp = softmax_exp_c,
	.attn_values = attn_values_c,
	.attn_scores_q8 = kve_attn_scores_q8_c,
	.attn_values_q8 = kve_attn_values_q8_c,
	.hadamard = kve_hadamard_c,
	.rmsnorm = rmsnorm_c,
};
