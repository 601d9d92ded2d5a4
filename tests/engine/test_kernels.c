// SPDX-License-Identifier: MIT
/*
 * test_kernels.c - every kernel set the CPU can run (portable C, AVX2,
 * AVX-VNNI, AVX-512, AVX-512 VNNI) against a double-precision reference on
 * awkward shapes, and the batch-invariance contract: a token's result is
 * bit-identical whether it is computed alone, inside a batch, or inside a
 * partial row range. The VNNI Q8_0 products must equal their parent
 * sets' bit for bit; the set selection is run on made-up feature masks.
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include <float.h>

#include "engine_internal.h"
#include "tcheck.h"

static uint64_t rs = 12345;

static float frand(void)
{
	rs = rs * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rs >> 40) / 16777216.0 * 2.0 - 1.0);
}

struct tm {
	struct kve_mat m;
	uint8_t *buf;
	double *deq;	/* rows x cols */
};

/*
 * A row of BF16 (the values tmp) or of a 4- to 6-bit type: every quant
 * bit random (all of a type's values occur), the fp16 scales small and
 * positive, the minima of either sign, Q6_K's int8 scales any byte.
 */
static void fill_quant(uint32_t type, uint8_t *row, uint32_t cols, const float *tmp)
{
	size_t bb = ggml_blck_bytes(type), n = cols / ggml_blck_size(type) * bb, i;
	uint16_t h;

	if (type == GGML_BF16) {
		for (i = 0; i < cols; i++) {
			uint32_t b;

			memcpy(&b, &tmp[i], 4);
			h = (uint16_t)(b >> 16);
			memcpy(row + 2 * i, &h, 2);
		}
		return;
	}
	for (i = 0; i < n; i++)
		row[i] = (uint8_t)(frand() * 128 + 128);
	for (i = 0; i < n; i += bb) {
		size_t at = type == GGML_Q6_K ? 208 : type == GGML_Q2_K ? 80 :
			    type == GGML_Q3_K ? 108 : 0;

		h = kve_f32_to_f16(0.004f + 0.003f * frand());
		memcpy(row + i + at, &h, 2);
		if (type == GGML_Q4_1 || type == GGML_Q5_1 || type == GGML_Q4_K ||
		    type == GGML_Q5_K || type == GGML_Q2_K) {
			h = kve_f32_to_f16(0.01f * frand());
			memcpy(row + i + at + 2, &h, 2);
		}
	}
}

static void make_mat(struct tm *t, uint32_t type, uint32_t rows, uint32_t cols)
{
	uint32_t r, c;

	memset(t, 0, sizeof(*t));	/* row-major: panel 0 */
	t->m.type = type;
	t->m.rows = rows;
	t->m.cols = cols;
	t->m.row_bytes = cols / ggml_blck_size(type) * ggml_blck_bytes(type);
	t->buf = aligned_alloc(64, (t->m.row_bytes * rows + 63) & ~(size_t)63);
	t->deq = malloc(sizeof(double) * rows * cols);
	for (r = 0; r < rows; r++) {
		uint8_t *row = t->buf + r * t->m.row_bytes;
		float tmp[1024];
		for (c = 0; c < cols; c++)
			tmp[c] = frand();
		if (type != GGML_F32 && type != GGML_F16 && type != GGML_Q8_0)
			fill_quant(type, row, cols, tmp);
		for (c = 0; c < cols && (type == GGML_F32 || type == GGML_F16 ||
					 type == GGML_Q8_0); c++) {
			if (type == GGML_F32) {
				memcpy(row + 4 * c, &tmp[c], 4);
			} else if (type == GGML_F16) {
				uint16_t h = kve_f32_to_f16(tmp[c]);
				memcpy(row + 2 * c, &h, 2);
			} else if (c % QK8_0 == 0) {
				uint8_t *b = row + c / QK8_0 * Q8_0_BYTES;
				uint16_t h = kve_f32_to_f16(1.0f / 127);
				int j;
				memcpy(b, &h, 2);
				for (j = 0; j < QK8_0; j++)
					b[2 + j] = (uint8_t)(int8_t)lrintf(tmp[c + j] * 127);
			}
		}
		{
			float out[1024];
			t->m.data = t->buf;
			kve_mat_row_f32(&t->m, r, out);
			for (c = 0; c < cols; c++)
				t->deq[(size_t)r * cols + c] = out[c];
		}
	}
	t->m.data = t->buf;
}

/* xk: the Q8_K activations the K-quant products take (others: unused) */
static void run(const struct kve_kernels *k, const struct tm *t, const float *x,
		const struct kve_q8x *xq, const struct kve_q8k *xk, int T, float *y, int r0, int r1)
{
	switch (t->m.type) {
	case GGML_F32: k->mm_f32(&t->m, x, T, y, (int)t->m.rows, r0, r1); break;
	case GGML_F16: k->mm_f16(&t->m, x, T, y, (int)t->m.rows, r0, r1); break;
	case GGML_BF16: k->mm_bf16(&t->m, x, T, y, (int)t->m.rows, r0, r1); break;
	case GGML_Q8_0: k->mm_q8(&t->m, xq, T, y, (int)t->m.rows, r0, r1); break;
	case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
	case GGML_IQ4_XS:
		k->mm_qk(&t->m, xk, T, y, (int)t->m.rows, r0, r1);
		break;
	default: k->mm_q32(&t->m, xq, T, y, (int)t->m.rows, r0, r1); break;
	}
}

/* Each token alone, and the batch in row slices of 5 (which start and end
 * inside panels), give y's bits; y1 is scratch of T x rows. */
static int same_alone_sliced(const struct kve_kernels *k, const struct tm *t, const float *x,
			     const struct kve_q8x *xq, const struct kve_q8k *xk, int T,
			     const float *y, float *y1)
{
	int rows = (int)t->m.rows, cols = (int)t->m.cols, tt, r, same = 1;

	for (tt = 0; tt < T; tt++) {
		run(k, t, x + tt * cols, xq + tt * (cols / QK8_0), xk + tt * (cols / QK_K), 1, y1,
		    0, rows);
		same &= !memcmp(y1, y + tt * rows, rows * sizeof(float));
	}
	memset(y1, 0, sizeof(float) * T * rows);
	for (r = 0; r < rows; r += 5)
		run(k, t, x, xq, xk, T, y1, r, r + 5 < rows ? r + 5 : rows);
	return same && !memcmp(y1, y, sizeof(float) * T * rows);
}

/*
 * The same matrix packed into panels (as loaded models are) gives the
 * same bits as row-major y: the whole batch, each token alone and odd row
 * ranges (which start and end inside panels).
 */
static void check_packed(const struct kve_kernels *k, const struct tm *t, const float *x,
			 const struct kve_q8x *xq, const struct kve_q8k *xk, int T, const float *y)
{
	struct tm p = *t;
	size_t n = t->m.row_bytes * t->m.rows;
	uint32_t rows = t->m.rows, cols = t->m.cols;
	float *y1 = calloc((size_t)T * rows, sizeof(float));
	int rc, r, same;

	p.buf = malloc(n);
	memcpy(p.buf, t->buf, n);
	p.m.data = p.buf;
	rc = kve_mat_pack(&p.m);
	if (rc == 1) {	/* this shape stays row-major */
		CHECK(!p.m.panel && !memcmp(p.buf, t->buf, n),
		      "%s %s [%u x %u]: does not pack, left as it was", k->name,
		      ggml_type_name(t->m.type), rows, cols);
		goto out;
	}
	run(k, &p, x, xq, xk, T, y1, 0, (int)rows);
	/* (a panel of one block per row is the rows one after another) */
	same = rc == 0 && p.m.panel &&
	       (memcmp(p.buf, t->buf, n) || cols == ggml_blck_size(t->m.type)) &&
	       !memcmp(y1, y, sizeof(float) * T * rows) &&
	       same_alone_sliced(k, &p, x, xq, xk, T, y, y1);
	for (r = 0; r < (int)rows; r++) {	/* the row helper reads panels too */
		float a[1024], b[1024];

		kve_mat_row_f32(&t->m, (uint32_t)r, a);
		kve_mat_row_f32(&p.m, (uint32_t)r, b);
		same &= !memcmp(a, b, cols * sizeof(float));
	}
	CHECK(same, "%s %s [%u x %u] packed in panels of %u rows: same bits as row-major "
	      "(batch, alone, row slices, row helper)", k->name, ggml_type_name(t->m.type),
	      rows, cols, p.m.panel);
	{	/* packing a packed matrix is a no-op */
		uint8_t *again = malloc(n);
		uint32_t panel = p.m.panel;

		memcpy(again, p.buf, n);
		CHECK(kve_mat_pack(&p.m) == 0 && p.m.panel == panel && !memcmp(again, p.buf, n),
		      "%s %s [%u x %u]: packed again, nothing changes", k->name,
		      ggml_type_name(t->m.type), rows, cols);
		free(again);
	}
out:
	free(p.buf);
	free(y1);
}

/*
 * The 256-bit VNNI product's shared code (kernels_q8_avx2.h) compiled
 * for AVX-512 VNNI + VL, i.e. with the EVEX encoding of the same 256-bit
 * vpdpbusd. Bochs 2.7 (the emulation lane) has no CPU model with
 * AVX-VNNI, so kernels_avxvnni.c's VEX instruction runs nowhere here;
 * this runs everything else of it (the lanes are the same by the ISA's
 * definition) on an AVX-512 VNNI CPU or Bochs's tigerlake model.
 */
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
#define KVE_INLINE static inline __attribute__((always_inline))
KVE_INLINE __m256i q8_dot4(__m256i a, __m256i b)
{
	return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
}
#define Q8_MM_NAME	mm_q8_vnni256_evex
#define Q8_MM_LINKAGE	static
#include "kernels_q8_avx2.h"
#pragma GCC pop_options

typedef void (*mm_q8_fn)(const struct kve_mat *w, const struct kve_q8x *xq, int T,
			 float *y, int ldy, int r0, int r1);

/* mm (a VNNI product) == parent's mm_q8 bit for bit: shapes with row
 * tails, 1..13 tokens, row-major and packed, row slices; the row-major
 * weights include -128 (|w| = 128 in the unsigned operand) */
static void check_same_q8(const char *name, mm_q8_fn mm, const struct kve_kernels *parent)
{
	static const uint32_t shapes[][2] = { { 37, 64 }, { 40, 96 }, { 8, 256 }, { 13, 32 },
					      { 16, 1024 }, { 6, 160 } };
	static const int Ts[] = { 1, 2, 3, 4, 5, 13 };
	int si, ti, packed, r, same = 1, n = 0;

	for (si = 0; si < (int)(sizeof(shapes) / sizeof(shapes[0])); si++) {
		uint32_t rows = shapes[si][0], cols = shapes[si][1], nb = cols / QK8_0;
		struct tm t;
		struct kve_q8x *xq = malloc(sizeof(*xq) * 13 * nb);
		float *x = malloc(sizeof(float) * 13 * cols);
		float *ya = malloc(sizeof(float) * 13 * rows), *yb = malloc(sizeof(float) * 13 * rows);
		int c;

		make_mat(&t, GGML_Q8_0, rows, cols);
		for (r = 0; r < (int)rows; r++)	/* -128 somewhere in every row */
			t.buf[(size_t)r * t.m.row_bytes + ((size_t)r % nb) * Q8_0_BYTES + 2 + r % QK8_0] = 0x80;
		for (c = 0; c < 13 * (int)cols; c++)
			x[c] = frand();
		for (c = 0; c < 13; c++)
			kve_quantize_q8x(x + (size_t)c * cols, (int)cols, xq + (size_t)c * nb);
		for (packed = 0; packed < 2; packed++) {
			if (packed) {	/* -128 stays row-major (check_q8_m128): -127 */
				for (r = 0; r < (int)rows; r++)
					t.buf[(size_t)r * t.m.row_bytes + ((size_t)r % nb) * Q8_0_BYTES + 2 +
					      r % QK8_0] = 0x81;
				if (kve_mat_pack(&t.m))
					break;
			}
			for (ti = 0; ti < (int)(sizeof(Ts) / sizeof(Ts[0])); ti++) {
				int T = Ts[ti];

				memset(ya, 0, sizeof(float) * 13 * rows);
				memset(yb, 0xff, sizeof(float) * 13 * rows);
				parent->mm_q8(&t.m, xq, T, ya, (int)rows, 0, (int)rows);
				mm(&t.m, xq, T, yb, (int)rows, 0, (int)rows);
				same &= !memcmp(ya, yb, sizeof(float) * T * rows);
				memset(yb, 0xff, sizeof(float) * 13 * rows);
				for (r = 0; r < (int)rows; r += 5)
					mm(&t.m, xq, T, yb, (int)rows, r, r + 5 < (int)rows ? r + 5 : (int)rows);
				same &= !memcmp(ya, yb, sizeof(float) * T * rows);
				n++;
			}
		}
		free(xq);
		free(x);
		free(ya);
		free(yb);
		free(t.buf);
		free(t.deq);
	}
	CHECK(same, "%s mm_q8 == %s mm_q8 bit for bit (%d shape/T/layout cases, row slices, "
	      "weights of -128)", name, parent->name, n);
}

/* kve_mat_pack finds a -128 wherever it is: alone in a middle row's
 * first block, or the last row's last quant (set-independent: runs once) */
static void check_q8_m128_found(void)
{
	static const uint32_t at[2][2] = { { 17, 3 }, { 39, 95 } };
	int i;

	for (i = 0; i < 2; i++) {
		struct tm one;
		uint32_t rr = at[i][0], cc = at[i][1];

		make_mat(&one, GGML_Q8_0, 40, 96);	/* quants within +-127 */
		one.buf[(size_t)rr * one.m.row_bytes + (size_t)(cc / QK8_0) * Q8_0_BYTES + 2 +
			cc % QK8_0] = 0x80;
		CHECK(kve_mat_pack(&one.m) == 1 && !one.m.panel,
		      "a Q8_0 matrix whose only -128 is at row %u, column %u stays row-major", rr, cc);
		free(one.buf);
		free(one.deq);
	}
}

/*
 * A quant of -128 (which ggml's quantiser never writes, but a file may
 * hold): kve_mat_pack leaves the matrix row-major, as the packed kernels
 * move the activation's sign onto the weight and -(-128) wraps; the
 * product over it is still right where x is negative at those columns
 * (1, 2 and 13 tokens; a wrapped product would be off by ~2).
 */
static void check_q8_m128(const struct kve_kernels *k)
{
	const uint32_t rows = 40, cols = 96, nb = cols / QK8_0;
	struct tm t;
	struct kve_q8x xq[13 * 3];
	float x[13 * 96], y[13 * 40], out[96];
	double err = 0;
	int r, c, tt, Ts[] = { 1, 2, 13 }, ti, kept;
	uint8_t *copy;

	make_mat(&t, GGML_Q8_0, rows, cols);
	for (r = 0; r < (int)rows; r++) {
		c = (r * 7) % (int)cols;
		t.buf[(size_t)r * t.m.row_bytes + (size_t)(c / QK8_0) * Q8_0_BYTES + 2 + c % QK8_0] = 0x80;
		kve_mat_row_f32(&t.m, (uint32_t)r, out);
		for (c = 0; c < (int)cols; c++)
			t.deq[(size_t)r * cols + c] = out[c];
	}
	for (c = 0; c < 13 * (int)cols; c++)
		x[c] = -fabsf(frand()) - 0.01f;	/* negative everywhere */
	for (tt = 0; tt < 13; tt++)
		kve_quantize_q8x(x + tt * cols, (int)cols, xq + tt * nb);
	copy = malloc(t.m.row_bytes * rows);
	memcpy(copy, t.buf, t.m.row_bytes * rows);
	kept = kve_mat_pack(&t.m) == 1 && !t.m.panel && !memcmp(copy, t.buf, t.m.row_bytes * rows);
	for (ti = 0; ti < 3; ti++) {
		run(k, &t, x, xq, NULL, Ts[ti], y, 0, (int)rows);
		for (tt = 0; tt < Ts[ti]; tt++)
			for (r = 0; r < (int)rows; r++) {
				double s = 0;

				for (c = 0; c < (int)cols; c++)
					s += t.deq[(size_t)r * cols + c] * xq[tt * nb + c / QK8_0].d *
					     xq[tt * nb + c / QK8_0].q[c % QK8_0];
				err = fmax(err, fabs(s - y[tt * rows + r]));
			}
	}
	CHECK(kept && err < 2e-5 * sqrt(cols) * 4, "%s Q8_0 weights of -128: the matrix stays "
	      "row-major (%s) and the product is right against negative activations (max error "
	      "%.2g)", k->name, kept ? "yes" : "no", err);
	{	/* a type the engine does not read (IQ2_XXS) is left alone */
		struct kve_mat q4 = { NULL, 16, 4, 256, 66, 0 };

		CHECK(kve_mat_pack(&q4) == 1 && !q4.panel, "an IQ2_XXS matrix is not packed");
	}
	free(copy);
	free(t.buf);
	free(t.deq);
}

/* q8_only: the Q8_0 product alone (a VNNI set, whose other kernels are
 * its parent's, checked already: the set-structure check proves it) */
static void check_set_part(const struct kve_kernels *k, int q8_only)
{
	static const uint32_t types[3] = { GGML_F32, GGML_F16, GGML_Q8_0 };
	static const uint32_t shapes[][2] = { { 37, 64 }, { 19, 72 }, { 9, 70 },
					      { 40, 96 }, { 8, 256 }, { 3, 13 },
					      { 16, 72 }, { 12, 96 } };
	int ti, si;

	for (ti = q8_only ? 2 : 0; ti < 3; ti++) {
		for (si = 0; si < (int)(sizeof(shapes) / sizeof(shapes[0])); si++) {
			uint32_t rows = shapes[si][0], cols = shapes[si][1];
			const int T = 13;
			struct tm t;
			float *x, *y, *y1;
			struct kve_q8x *xq;
			double err = 0;
			int tt, r, c, inv = 1;

			if (types[ti] == GGML_Q8_0 && cols % QK8_0)
				continue;
			make_mat(&t, types[ti], rows, cols);
			x = malloc(sizeof(float) * T * cols);
			y = malloc(sizeof(float) * T * rows);
			y1 = malloc(sizeof(float) * T * rows);
			xq = malloc(sizeof(*xq) * T * (cols / QK8_0 + 1));
			for (c = 0; c < T * (int)cols; c++)
				x[c] = frand();
			if (types[ti] == GGML_Q8_0)
				for (tt = 0; tt < T; tt++)
					kve_quantize_q8x(x + tt * cols, (int)cols, xq + tt * (cols / QK8_0));
			run(k, &t, x, xq, NULL, T, y, 0, (int)rows);
			for (tt = 0; tt < T; tt++) {
				float xd[1024];
				if (types[ti] == GGML_Q8_0) {	/* the quantised activations */
					for (c = 0; c < (int)cols; c++)
						xd[c] = xq[tt * (cols / QK8_0) + c / QK8_0].d *
							xq[tt * (cols / QK8_0) + c / QK8_0].q[c % QK8_0];
				} else {
					memcpy(xd, x + tt * cols, cols * 4);
				}
				for (r = 0; r < (int)rows; r++) {
					double s = 0;
					for (c = 0; c < (int)cols; c++)
						s += t.deq[(size_t)r * cols + c] * xd[c];
					err = fmax(err, fabs(s - y[tt * rows + r]));
				}
			}
			CHECK(err < 2e-5 * sqrt(cols) * 4, "%s %s [%u x %u] x 13 tokens: max error %.2g",
			      k->name, ggml_type_name(types[ti]), rows, cols, err);
			inv = same_alone_sliced(k, &t, x, xq, NULL, T, y, y1);
			for (tt = 1; tt <= T; tt++) {	/* batches of every size */
				memset(y1, 0xff, sizeof(float) * T * rows);	/* NaN */
				run(k, &t, x, xq, NULL, tt, y1, 0, (int)rows);
				inv &= !memcmp(y1, y, sizeof(float) * tt * rows);
			}
			CHECK(inv, "%s %s [%u x %u]: alone == in batch == in row slices",
			      k->name, ggml_type_name(types[ti]), rows, cols);
			check_packed(k, &t, x, xq, NULL, T, y);
			free(x);
			free(y);
			free(y1);
			free(xq);
			free(t.buf);
			free(t.deq);
		}
	}
	check_q8_m128(k);
	if (q8_only)
		return;
	{	/* attention helpers */
		float a[70], b[70], y[70], yr[70];
		uint16_t h[70];
		double s = 0, s16 = 0, e = 0;
		int i;
		for (i = 0; i < 70; i++) {
			a[i] = frand();
			b[i] = frand();
			h[i] = kve_f32_to_f16(b[i]);
			s += (double)a[i] * b[i];
			s16 += (double)a[i] * kve_f16_to_f32(h[i]);
			y[i] = yr[i] = a[i];
		}
		k->axpy_f32(y, 0.5f, b, 70);
		for (i = 0; i < 70; i++)
			e = fmax(e, fabs(y[i] - (yr[i] + 0.5 * b[i])));
		CHECK(fabs(k->dot_f32(a, b, 70) - s) < 1e-5 && fabs(k->dot_f16(a, h, 70) - s16) < 1e-5 &&
		      e < 1e-6, "%s dot/axpy f32/f16 on 70 values", k->name);
	}
}

/*
 * The 4- to 6-bit types and BF16 against double precision over the same
 * integers and scales (Q4_1/Q5_1's minimum term with the activations'
 * fp16 s, as defined), then alone == in a batch == in row slices, and
 * packed == row-major, bit for bit. Shapes with row tails, K-quants of
 * 1-3 blocks per row.
 */
static void check_quant_set(const struct kve_kernels *k)
{
	static const uint32_t types[] = { GGML_BF16, GGML_Q4_0, GGML_Q4_1, GGML_Q5_0,
					  GGML_Q5_1, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K,
					  GGML_IQ4_NL, GGML_IQ4_XS, GGML_Q2_K, GGML_Q3_K };
	static const uint32_t shapes[][2] = { { 37, 64 }, { 19, 96 }, { 9, 72 }, { 40, 32 },
					      { 8, 256 }, { 21, 512 }, { 3, 768 }, { 12, 256 } };
	unsigned ti, si;

	for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
			uint32_t rows = shapes[si][0], cols = shapes[si][1], type = types[ti];
			const int T = 13;
			int nb = (int)cols / 32, nbk = (int)cols / QK_K, tt, r, c, inv;
			struct tm t;
			float *x, *y, *y1;
			struct kve_q8x *xq;
			struct kve_q8k *xk;
			double err = 0;

			if (cols % ggml_blck_size(type) ||
			    (type != GGML_BF16 && type != GGML_Q4_K && cols % 256 == 0 && si != 4))
				continue;	/* (the 32-value types: 256 once) */
			make_mat(&t, type, rows, cols);
			x = malloc(sizeof(float) * T * cols);
			y = malloc(sizeof(float) * T * rows);
			y1 = malloc(sizeof(float) * T * rows);
			xq = malloc(sizeof(*xq) * T * (size_t)(nb + 1));
			xk = malloc(sizeof(*xk) * T * (size_t)(nbk + 1));
			for (c = 0; c < T * (int)cols; c++)
				x[c] = frand();
			for (tt = 0; tt < T; tt++) {
				kve_quantize_q8x(x + tt * cols, (int)cols, xq + tt * nb);
				kve_quantize_q8k(x + tt * cols, (int)cols, xk + tt * nbk);
			}
			run(k, &t, x, xq, xk, T, y, 0, (int)rows);
			for (tt = 0; tt < T; tt++) {
				for (r = 0; r < (int)rows; r++) {
					double sum = 0, mag = 0;

					for (c = 0; c < (int)cols; c++) {
						double xd = type == GGML_BF16 ? x[tt * cols + c] :
							    ggml_blck_size(type) == QK_K ?
							    (double)xk[tt * nbk + c / QK_K].d *
							    xk[tt * nbk + c / QK_K].q[c % QK_K] :
							    (double)xq[tt * nb + c / 32].d *
							    xq[tt * nb + c / 32].q[c % 32];
						double wv = t.deq[(size_t)r * cols + c];

						if (type == GGML_Q4_1 || type == GGML_Q5_1) {
							/* d q x here, m s per block below */
							uint8_t q[32];
							float d, m;

							kve_q32_ints(type, kve_mat_blk(&t.m, (uint32_t)r,
										      (uint32_t)c / 32), q,
								     &d, &m);
							wv = (double)d * q[c % 32];
							if (c % 32 == 0)
								sum += (double)m * xq[tt * nb + c / 32].s;
						}
						sum += wv * xd;
						mag += fabs(t.deq[(size_t)r * cols + c] * xd);
					}
					err = fmax(err, fabs(sum - y[tt * rows + r]) / (mag + 1e-30));
				}
			}
			CHECK(err < 1e-5, "%s %s [%u x %u] x 13 tokens: relative error %.2g", k->name,
			      ggml_type_name(type), rows, cols, err);
			inv = same_alone_sliced(k, &t, x, xq, xk, T, y, y1);
			for (tt = 1; tt <= T; tt++) {	/* batches of every size */
				memset(y1, 0xff, sizeof(float) * T * rows);	/* NaN */
				run(k, &t, x, xq, xk, tt, y1, 0, (int)rows);
				inv &= !memcmp(y1, y, sizeof(float) * tt * rows);
			}
			CHECK(inv, "%s %s [%u x %u]: alone == in batch == in row slices",
			      k->name, ggml_type_name(type), rows, cols);
			check_packed(k, &t, x, xq, xk, T, y);
			free(x);
			free(y);
			free(y1);
			free(xq);
			free(xk);
			free(t.buf);
			free(t.deq);
		}
	}
}

/* a VNNI set's products of the 4- to 6-bit types == its parent's, bit
 * for bit: every type, 1, 2, 5 and 13 tokens, row-major and packed */
static void check_same_quant(const struct kve_kernels *v, const struct kve_kernels *parent)
{
	static const uint32_t types[] = { GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1,
					  GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_IQ4_NL,
					  GGML_IQ4_XS, GGML_Q2_K, GGML_Q3_K };
	static const int Ts[] = { 1, 2, 5, 13 };
	enum { ROWS = 21, COLS = 512 };
	static float x[13 * COLS], ya[13 * ROWS], yb[13 * ROWS];
	static struct kve_q8x xq[13 * COLS / 32];
	static struct kve_q8k xk[13 * COLS / QK_K];
	unsigned ti, n = 0, same = 0;
	int i, packed;

	for (i = 0; i < 13 * COLS; i++)
		x[i] = frand();
	for (i = 0; i < 13; i++) {
		kve_quantize_q8x(x + i * COLS, COLS, xq + i * (COLS / 32));
		kve_quantize_q8k(x + i * COLS, COLS, xk + i * (COLS / QK_K));
	}
	for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		struct tm t;

		make_mat(&t, types[ti], 20, COLS);	/* 20 rows: packs */
		for (packed = 0; packed < 2; packed++) {
			if (packed && kve_mat_pack(&t.m))
				continue;
			for (i = 0; i < 4; i++, n++) {
				run(v, &t, x, xq, xk, Ts[i], ya, 0, 20);
				run(parent, &t, x, xq, xk, Ts[i], yb, 0, 20);
				same += !memcmp(ya, yb, sizeof(float) * 20 * (size_t)Ts[i]);
			}
		}
		free(t.buf);
		free(t.deq);
	}
	CHECK(same == n, "%s mm_q32/mm_qk == %s's bit for bit (11 types, 1-13 tokens, "
	      "row-major and packed: %u of %u)", v->name, parent->name, same, n);
}

/*
 * The K-quants and IQ4_XS in a set's 16-row panels (k->qk_x16, engine_internal.h):
 * the portable C product's bits on the row-major matrix, for batches of
 * 1-13 tokens, each token alone, row slices of 5 (partial panels) and
 * the row helper; the other sets (the C set, and AVX2 where the CPU has
 * it) serve the layout with the same bits.
 */
/* the x16 layouts: the 16 rows' pieces of a K-quant block fill the
 * panel's block once each, every byte of the row's block copied once */
static void check_qkx16_layout(void)
{
	static const uint32_t types[] = { GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_IQ4_XS,
					  GGML_Q2_K, GGML_Q3_K };
	static const uint32_t blk[] = { KVE_Q4KX16_BLK, KVE_Q5KX16_BLK, KVE_Q6KX16_BLK,
					KVE_IQ4XSX16_BLK, KVE_Q2KX16_BLK, KVE_Q3KX16_BLK };
	unsigned ti, i, n, b, ok = 1;

	for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		uint8_t panel[KVE_Q6KX16_BLK], row[16][210];

		memset(panel, 0, sizeof(panel));
		memset(row, 0, sizeof(row));
		for (i = 0; i < 16; i++) {
			uint32_t g, x, len;

			for (n = 0; (len = kve_qkx16_piece(types[ti], i, n, &g, &x)); n++)
				for (b = 0; b < len; b++) {
					ok &= x + b < blk[ti] && g + b < ggml_blck_bytes(types[ti]);
					if (x + b < blk[ti] && g + b < 210) {
						panel[x + b]++;
						row[i][g + b]++;
					}
				}
		}
		for (b = 0; b < blk[ti]; b++)
			ok &= panel[b] == 1;
		for (i = 0; i < 16; i++)
			for (b = 0; b < ggml_blck_bytes(types[ti]); b++)
				ok &= row[i][b] == 1;
	}
	CHECK(ok, "Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K x16: each row's block bytes land once, filling the panel's "
	      "block (Q6_K's groups in the tile's order)");
}

/* kve_prefetch_for: the environment first, then the CPU */
static void check_weight_prefetch(void)
{
	const unsigned amd[3] = { 0x68747541u, 0x69746e65u, 0x444d4163u };
	const unsigned intel[3] = { 0x756e6547u, 0x49656e69u, 0x6c65746eu };
	const unsigned zen5 = 0x00b40f00u, zen4 = 0x00a10f11u, icx = 0x000606a6u;

	CHECK(kve_prefetch_for(NULL, amd[0], amd[1], amd[2], zen5) == 1 &&
	      kve_prefetch_for(NULL, amd[0], amd[1], amd[2], zen4) == 0 &&
	      kve_prefetch_for(NULL, intel[0], intel[1], intel[2], icx) == 0 &&
	      kve_prefetch_for(NULL, intel[0], intel[1], intel[2], zen5) == 0,
	      "weight prefetch: on for AMD family 0x1A, off for 0x19 and for Intel");
	CHECK(kve_prefetch_for("1", amd[0], amd[1], amd[2], zen4) == 1 &&
	      kve_prefetch_for("0", amd[0], amd[1], amd[2], zen5) == 0 &&
	      kve_prefetch_for("yes", amd[0], amd[1], amd[2], zen4) == 0 &&
	      kve_prefetch_for("", amd[0], amd[1], amd[2], zen5) == 1,
	      "weight prefetch: KVE_PREFETCH=0|1 decides, anything else is ignored");
}

static void check_qk_x16(const struct kve_kernels *k, int has2)
{
	static const uint32_t types[] = { GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q8_0, GGML_IQ4_XS,
					  GGML_Q2_K, GGML_Q3_K };
	static const uint32_t shapes[][2] = { { 16, 256 }, { 48, 768 }, { 32, 512 } };
	unsigned ti, si;

	for (ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		if (types[ti] == GGML_Q8_0 && !k->q8_x16)	/* its own flag */
			continue;
		for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
			uint32_t rows = shapes[si][0], cols = shapes[si][1], type = types[ti];
			const int T = 13, nbk = (int)cols / QK_K;
			struct tm t, p;
			float *x = malloc(sizeof(float) * T * cols);
			float *y = malloc(sizeof(float) * T * rows);
			float *y1 = malloc(sizeof(float) * T * rows);
			struct kve_q8k *xk = malloc(sizeof(*xk) * T * (size_t)nbk);
			struct kve_q8x *xq = malloc(sizeof(*xq) * T * (size_t)(cols / 32));
			int tt, r, same, packed, served = 1;

			for (r = 0; r < T * (int)cols; r++)
				x[r] = frand();
			for (tt = 0; tt < T; tt++) {
				kve_quantize_q8k(x + tt * cols, (int)cols, xk + tt * nbk);
				kve_quantize_q8x(x + tt * cols, (int)cols, xq + tt * (cols / 32));
			}
			make_mat(&t, type, rows, cols);
			if (type == GGML_Q8_0)	/* -128 packs too (no sign trick) */
				t.buf[2] = 0x80;
			run(&kve_kernels_c, &t, x, xq, xk, T, y, 0, (int)rows);
			p = t;
			p.buf = malloc(t.m.row_bytes * rows);
			memcpy(p.buf, t.buf, t.m.row_bytes * rows);
			p.m.data = p.buf;
			packed = kve_mat_pack_for(&p.m, k) == 0 &&
				 p.m.panel == (type == GGML_Q8_0 ? KVE_PANEL_Q8X16 : KVE_PANEL_QKX16) &&
				 memcmp(p.buf, t.buf, t.m.row_bytes * rows);
			same = packed;
			for (tt = 1; tt <= T && packed; tt++) {
				memset(y1, 0xff, sizeof(float) * T * rows);	/* NaN */
				run(k, &p, x, xq, xk, tt, y1, 0, (int)rows);
				same &= !memcmp(y1, y, sizeof(float) * tt * rows);
			}
			same &= packed && same_alone_sliced(k, &p, x, xq, xk, T, y, y1);
			for (r = 0; r < (int)rows && packed; r++) {
				float a[1024], b[1024];

				kve_mat_row_f32(&t.m, (uint32_t)r, a);
				kve_mat_row_f32(&p.m, (uint32_t)r, b);
				same &= !memcmp(a, b, cols * sizeof(float));
			}
			CHECK(same, "%s %s [%u x %u] in 16-row panels: the portable C product's bits "
			      "(1-13 tokens, alone, row slices, row helper)", k->name,
			      ggml_type_name(type), rows, cols);
			if (packed) {
				run(&kve_kernels_c, &p, x, xq, xk, T, y1, 0, (int)rows);
				served &= !memcmp(y1, y, sizeof(float) * T * rows);
				if (has2) {
					run(&kve_kernels_avx2, &p, x, xq, xk, T, y1, 0, (int)rows);
					served &= !memcmp(y1, y, sizeof(float) * T * rows);
				}
			}
			CHECK(packed && served, "%s [%u x %u] in 16-row panels: served by the C%s set, "
			      "same bits", ggml_type_name(type), rows, cols, has2 ? " and AVX2" : "");
			free(x);
			free(y);
			free(y1);
			free(xk);
			free(xq);
			free(p.buf);
			free(t.buf);
			free(t.deq);
		}
	}
}

static void check_set(const struct kve_kernels *k)
{
	check_set_part(k, 0);
	check_quant_set(k);
}

/* ---- the run-time self-check, with portable C kernels standing in ---- */

static const struct kve_kernels *C = &kve_kernels_c;

/* drops the last column's contribution of the last row of the range (a
 * masked-tail bug) */
static void bad_mm_f32(const struct kve_mat *w, const float *x, int T, float *y,
		       int ldy, int r0, int r1)
{
	int t, c = (int)w->cols - 1;

	C->mm_f32(w, x, T, y, ldy, r0, r1);
	for (t = 0; t < T; t++)
		y[(size_t)t * ldy + r1 - 1] -=
			((const float *)(w->data + (size_t)(r1 - 1) * w->row_bytes))[c] *
			x[(size_t)t * w->cols + c];
}

/* accurate but for the first row of the range in token 1 of a batch,
 * 1.5 times the self-check's bound (cols x 4 x FLT_EPSILON x sum |w x|)
 * off: the accuracy check catches it (its bound is no looser than
 * documented) and names that row, token, both values and the bound;
 * off_got, off_ref and off_bound keep them from the full-range call */
static float off_got, off_ref;
static double off_bound;

static void off_mm_f32(const struct kve_mat *w, const float *x, int T, float *y,
		       int ldy, int r0, int r1)
{
	const float *wr = (const float *)(w->data + (size_t)r0 * w->row_bytes);
	double s = 0;
	int c;

	C->mm_f32(w, x, T, y, ldy, r0, r1);
	if (T < 2)
		return;
	for (c = 0; c < (int)w->cols; c++)
		s += fabs((double)wr[c] * x[w->cols + c]);
	if (r0 == 0) {
		off_ref = y[ldy];
		off_bound = (double)w->cols * 4 * FLT_EPSILON * s;
	}
	y[ldy + r0] += (float)(1.5 * w->cols * 4 * FLT_EPSILON * s);
	if (r0 == 0)
		off_got = y[ldy];
}

/* a nudge of one ulp on tokens after the first in a batch: accurate, but
 * a token's result depends on the batch (breaks the bit-for-bit contract) */
static void bad_mm_f16(const struct kve_mat *w, const float *x, int T, float *y,
		       int ldy, int r0, int r1)
{
	int t;

	C->mm_f16(w, x, T, y, ldy, r0, r1);
	for (t = 1; t < T; t++)
		y[(size_t)t * ldy + r0] = nextafterf(y[(size_t)t * ldy + r0], INFINITY);
}

/* every token reads token 0's activations (a wrong stride) */
static void bad_mm_q8(const struct kve_mat *w, const struct kve_q8x *xq, int T,
		      float *y, int ldy, int r0, int r1)
{
	int t;

	for (t = 0; t < T; t++)
		C->mm_q8(w, xq, 1, y + (size_t)t * ldy, ldy, r0, r1);
}

static float bad_dot_f32(const float *a, const float *b, int n)
{
	return C->dot_f32(a, b, n & ~7);	/* tail ignored */
}

static float bad_dot_f16(const float *a, const uint16_t *b, int n)
{
	return C->dot_f16(a, b, n) * 1.01f;
}

static void bad_axpy_f32(float *y, float a, const float *x, int n)
{
	C->axpy_f32(y, a, x, n > 64 ? 64 : n);	/* stops early */
}

static void bad_axpy_f16(float *y, float a, const uint16_t *x, int n)
{
	C->axpy_f16(y, -a, x, n);
}

static void bad_quantize(const float *x, int n, struct kve_q8x *out)
{
	C->quantize_q8x(x, n, out);
	out[n / QK8_0 - 1].q[3] ^= 1;
}

/* rounds ties away from zero (roundf) where the contract says to even
 * (lrintf): only inputs that land exactly on a half step tell them apart */
static void bad_quantize_ties(const float *x, int n, struct kve_q8x *out)
{
	int b, j;

	C->quantize_q8x(x, n, out);
	for (b = 0; b < n / QK8_0; b++) {
		float id = out[b].d > 0 ? 1.0f / out[b].d : 0.0f;

		for (j = 0; j < QK8_0; j++) {
			float v = x[b * QK8_0 + j] * id;

			if (v == v && fabsf(v) <= 127.0f && v - truncf(v) != 0 &&
			    fabsf(v - truncf(v)) == 0.5f)
				out[b].q[j] = (int8_t)roundf(v);
		}
	}
}

/* A quantiser that divides by a zero scale: an all-zero block's values
 * come out as garbage (here all 1) instead of 0. */
static void bad_quantize_zero(const float *x, int n, struct kve_q8x *out)
{
	int b;

	C->quantize_q8x(x, n, out);
	for (b = 0; b < n / QK8_0; b++)
		if (out[b].d == 0.0f)
			memset(out[b].q, 1, QK8_0);
}

/* one quant of the first block off by one, wherever it is called */
static void bad_quantize_first(const float *x, int n, struct kve_q8x *out)
{
	C->quantize_q8x(x, n, out);
	if (n >= QK8_0)
		out[0].q[QK8_0 - 1] ^= 1;
}

static void bad_f16(uint16_t *dst, const float *src, int n)
{
	int i;

	for (i = 0; i < n; i++)	/* truncates instead of rounding */
		dst[i] = kve_f32_to_f16(src[i]) & ~1;
}

/*
 * Bochs 2.7, the emulator of the AVX-512 lane (tests/engine/avx512-emu.sh),
 * rounds an F16C conversion that falls exactly halfway between two halves
 * away from zero; real CPUs round it to even. 1 + 2^-11 is such a value.
 */
__attribute__((target("f16c")))
static int f16c_ties_away(void)
{
	volatile float tie = 1.0f + 1.0f / 2048;

	return _cvtss_sh(tie, _MM_FROUND_TO_NEAREST_INT) == 0x3c01;
}

/* kve_f32_to_f16, but ties away from zero (what such a CPU computes) */
static uint16_t f16_ties_away(float f)
{
	uint16_t h = kve_f32_to_f16(f);
	double a = fabs((double)f), v = fabs((double)kve_f16_to_f32(h));

	if (a > v && (h & 0x7fff) < 0x7c00 &&
	    fabs((double)kve_f16_to_f32((uint16_t)(h + 1))) - a == a - v)
		return (uint16_t)(h + 1);
	return h;
}

/* Two fp16-rounded values equal, or (on a CPU whose F16C rounds ties
 * away from zero) a tie rounded the other way: one fp16 step apart. */
static int f16_rounded_same(float a, float b, int away)
{
	if (!memcmp(&a, &b, sizeof(a)))
		return 1;
	return away && a == a && b == b &&
	       fabsf(a - b) <= fmaxf(fabsf(a), fabsf(b)) * 0x1p-10f;
}

/* kve_q8x blocks equal bit for bit; d and s, stored through fp16, as
 * f16_rounded_same() says (the SIMD paths round them with F16C) */
static int q8x_same(const struct kve_q8x *a, const struct kve_q8x *b, int n, int away)
{
	int i;

	for (i = 0; i < n; i++)
		if (memcmp(a[i].q, b[i].q, sizeof(a[i].q)) || a[i].sum != b[i].sum ||
		    !f16_rounded_same(a[i].d, b[i].d, away) ||
		    !f16_rounded_same(a[i].s, b[i].s, away))
			return 0;
	return 1;
}

/* the SIMD quantiser and fp16 store against the portable ones, bit for
 * bit, on random blocks of every scale and on edge cases */
static void check_convert(const struct kve_kernels *k)
{
	static float x[64 * QK8_0];
	static struct kve_q8x qa[64], qb[64];
	static uint16_t ha[64 * QK8_0], hb[64 * QK8_0];
	int i, same = 1, same16 = 1, r, away = f16c_ties_away();

	for (r = 0; r < 20; r++) {
		for (i = 0; i < 64 * QK8_0; i++) {
			float s = ldexpf(1.0f, (int)((i / QK8_0) % 40) - 24 + r);
			x[i] = frand() * s;
			if (i % 97 == 5)
				x[i] = roundf(x[i]);
		}
		if (r == 1) {
			x[7] = NAN;
			x[40] = INFINITY;
			x[80] = -INFINITY;
			x[100] = -NAN;
			for (i = 128; i < 160; i++)	/* amax 254: d = 2, odd values on halves */
				x[i] = i == 128 ? 254.0f : (float)(2 * (i - 144) + 1);
			for (i = 160; i < 192; i++)
				x[i] = 0;
		}
		memset(qa, 0x55, sizeof(qa));
		memset(qb, 0x55, sizeof(qb));
		k->quantize_q8x(x, 64 * QK8_0, qa);
		kve_quantize_q8x(x, 64 * QK8_0, qb);
		same &= away ? q8x_same(qa, qb, 64, away) : !memcmp(qa, qb, sizeof(qa));
		k->f32_to_f16(ha, x, 64 * QK8_0 - 5);
		for (i = 0; i < 64 * QK8_0 - 5; i++) {
			hb[i] = away ? f16_ties_away(x[i]) : kve_f32_to_f16(x[i]);
			same16 &= ha[i] == hb[i] || x[i] != x[i];
		}
	}
	CHECK(same, "%s quantize_q8x == portable, bit for bit (20 x 64 blocks, scales 2^-24..2^35, "
	      "NaN, inf, ties to even, zero block)", k->name);
	if (away)
		printf("# this CPU's F16C rounds halfway cases away from zero (Bochs 2.7 does, "
		       "real CPUs do not): %s f32_to_f16 is held to that rounding\n", k->name);
	CHECK(same16, "%s f32_to_f16 == portable round-to-nearest-%s (NaN payloads aside)", k->name,
	      away ? "away" : "even");
}

static void bad_silu(float *g, const float *u, int n)
{
	C->silu_mul(g, u, n);
	g[n / 2] *= 1.0001f;
}

/* SwiGLU against double precision over the range activations take */
static void check_silu(const struct kve_kernels *k)
{
	static float g[4099], u[4099], g0[4099];
	double err = 0;
	int i;

	for (i = 0; i < 4099; i++) {
		g0[i] = g[i] = frand() * 30.0f;
		u[i] = frand() * 4.0f;
	}
	k->silu_mul(g, u, 4099);
	for (i = 0; i < 4099; i++) {
		double v = g0[i], want = v / (1.0 + exp(-v)) * u[i];
		err = fmax(err, fabs(g[i] - want) / (fabs(want) + 1e-30));
	}
	CHECK(err < 1e-6, "%s silu_mul over 4099 values in [-30, 30]: max relative error %.2g",
	      k->name, err);
}

static void bad_attn_scores(const float *q, int nh, const void *k, int f16, int n, int hd,
			    float scale, float *sc, size_t ss)
{
	C->attn_scores(q, nh, k, f16, n, hd, scale, sc, ss);
	sc[n - 1] = sc[0];	/* a row index bug */
}

static float bad_softmax(float *sc, int n, float mx)
{
	return C->softmax_exp(sc, n, mx * 0.99f);
}

/* wrong in its first element only, the sum it returns right */
static float bad_softmax_first(float *sc, int n, float mx)
{
	float sum = C->softmax_exp(sc, n, mx);

	sc[0] *= 1.5f;
	return sum;
}

static void bad_attn_values(float *out, int nh, const float *p, size_t ps, const void *v,
			    int f16, int n, int hd)
{
	C->attn_values(out, nh, p, ps, v, f16, n - 1, hd);	/* last row dropped */
}

/* off by near_factor times the self-check's bound for attn_values (2n
 * rows of 4 ulps of |out| + sum |p v|): 2.5 must be caught, 0.5 not */
static float near_factor;

static void near_attn_values(float *out, int nh, const float *p, size_t ps, const void *v,
			     int f16, int n, int hd)
{
	static float mag[KVE_ATTN_HEADS * 256];
	int h, i, j;

	for (h = 0; h < nh && h < KVE_ATTN_HEADS; h++)
		for (i = 0; i < hd && i < 256; i++) {
			mag[h * 256 + i] = fabsf(out[h * hd + i]);
			for (j = 0; j < n; j++)
				mag[h * 256 + i] +=
					fabsf(p[h * ps + j] *
					      (f16 ? kve_f16_to_f32(((const uint16_t *)v)[j * hd + i]) :
					       ((const float *)v)[j * hd + i]));
		}
	C->attn_values(out, nh, p, ps, v, f16, n, hd);
	for (h = 0; h < nh && h < KVE_ATTN_HEADS; h++)
		for (i = 0; i < hd && i < 256; i++)
			out[h * hd + i] += near_factor * (float)(2 * n) * 4 * FLT_EPSILON *
					   mag[h * 256 + i];
}

/* block attention helpers: bit-identical to the row helpers of the same
 * set (so switching between them changes nothing), for 1 to
 * KVE_ATTN_HEADS heads at once; softmax vs double */
static void check_block_attn(const struct kve_kernels *k)
{
	/* every count of vectors in a pass for every head count (AVX2: 8
	 * wide, up to 8 / 4 / 2 / 2 vectors for 1-4 heads; AVX-512: 16 wide,
	 * up to 8 / 8 / 4 / 4), tails, two passes (144, 160, 256) */
	static const int hds[] = { 12, 20, 24, 32, 36, 40, 48, 60, 64, 70, 80, 96, 100, 112,
				   128, 136, 144, 160, 256 };
	enum { N = 21, SS = N + 3 };	/* score rows apart, as the engine's are */
	static float q[KVE_ATTN_HEADS * 256], kf[N * 256], sc[N], ref[KVE_ATTN_HEADS * SS];
	static float o1[KVE_ATTN_HEADS * 256], o2[KVE_ATTN_HEADS * 256];
	static uint16_t kh[N * 256];
	int same = 1, hi, f16, h, i, j, nh, n = N;
	double err = 0, s = 0;
	float sum;

	for (i = 0; i < N * 256; i++) {
		kf[i] = frand();
		kh[i] = kve_f32_to_f16(frand());
	}
	for (i = 0; i < KVE_ATTN_HEADS * 256; i++)
		q[i] = frand();
	for (nh = 1; nh <= KVE_ATTN_HEADS; nh++) {
		for (hi = 0; hi < (int)(sizeof(hds) / sizeof(hds[0])); hi++) {
			int hd = hds[hi];

			for (f16 = 0; f16 < 2; f16++) {
				/* the block, queries, scores and output at their exact
				 * sizes: a read or write past them is ASan's to catch */
				size_t kb = (size_t)n * hd * (f16 ? 2 : 4), ns = (size_t)(nh - 1) * SS + n;
				void *kp = malloc(kb);
				float *qx = malloc(sizeof(float) * nh * hd), *sx = malloc(sizeof(float) * ns);
				float *ox = malloc(sizeof(float) * nh * hd);

				memcpy(kp, f16 ? (const void *)kh : (const void *)kf, kb);
				for (h = 0; h < nh; h++)
					memcpy(qx + h * hd, q + h * 256, sizeof(float) * hd);
				k->attn_scores(qx, nh, kp, f16, n, hd, 0.3f, sx, SS);
				for (h = 0; h < nh; h++)
					for (j = 0; j < n; j++) {
						float v = f16 ? k->dot_f16(q + h * 256, kh + (size_t)j * hd, hd) :
								k->dot_f32(q + h * 256, kf + (size_t)j * hd, hd);
						same &= sx[h * SS + j] == v * 0.3f;
						ref[h * SS + j] = frand();
					}
				for (i = 0; i < nh * hd; i++)
					ox[i] = o2[i] = frand();
				k->attn_values(ox, nh, ref, SS, kp, f16, n, hd);
				memcpy(o1, ox, sizeof(float) * nh * hd);
				free(ox);
				free(sx);
				free(qx);
				free(kp);
				for (h = 0; h < nh; h++)
					for (j = 0; j < n; j++) {
						if (f16)
							k->axpy_f16(o2 + h * hd, ref[h * SS + j],
								    kh + (size_t)j * hd, hd);
						else
							k->axpy_f32(o2 + h * hd, ref[h * SS + j],
								    kf + (size_t)j * hd, hd);
					}
				same &= !memcmp(o1, o2, sizeof(float) * nh * hd);
			}
		}
	}
	CHECK(same, "%s attn_scores / attn_values == dot / axpy row by row, bit for bit "
	      "(1..%d heads at once, head_dim 12..256, fp32 and fp16 KV)", k->name,
	      KVE_ATTN_HEADS);
	for (j = 0; j < n; j++)	/* as attention uses it: arguments <= 0 */
		ref[j] = sc[j] = frand() * 40.0f;
	sum = k->softmax_exp(sc, n, 40.0f);
	for (j = 0; j < n; j++) {
		double want = exp((double)(ref[j] - 40.0f));	/* the float difference */
		err = fmax(err, fabs(sc[j] - want) / want);
		s += want;
	}
	CHECK(err < 2e-6 && fabs(sum - s) / s < 2e-6,
	      "%s softmax_exp over 21 scores in [-80, 0]: max relative error %.2g, sum %.2g", k->name, err,
	      fabs(sum - s) / s);
}

static void bad_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	C->rmsnorm(out, x, w, n - 1, eps);	/* mean over one value too few */
	out[n - 1] = x[n - 1] * w[n - 1];
}

static void check_rmsnorm(const struct kve_kernels *k)
{
	static const int ns[] = { 7, 64, 72, 768, 4099 };
	static float x[4099], w[4099], o[4099];
	double err = 0;
	int ni, i;

	for (ni = 0; ni < 5; ni++) {
		int n = ns[ni];
		double ss = 0, s;

		for (i = 0; i < n; i++) {
			x[i] = frand() * 5.0f;
			w[i] = 1.0f + 0.2f * frand();
			ss += (double)x[i] * x[i];
		}
		k->rmsnorm(o, x, w, n, 1e-5f);
		s = 1.0 / sqrt(ss / n + 1e-5);
		for (i = 0; i < n; i++)
			err = fmax(err, fabs(o[i] - x[i] * s * w[i]) / (fabs(x[i] * s * w[i]) + 1e-30));
	}
	CHECK(err < 2e-6, "%s rmsnorm (7..4099 values) vs double: max relative error %.2g",
	      k->name, err);
}

static void check_selfcheck(int has2)
{
	struct kve_kernels stand = kve_kernels_c, bad;
	const struct kve_kernels *set2 = has2 ? &kve_kernels_avx2 : &kve_kernels_c, *k;
	static const char *names[14] = { "mm_f32", "mm_f16", "mm_q8", "dot_f32", "dot_f16",
					 "axpy_f32", "axpy_f16", "quantize_q8x", "f32_to_f16",
					 "silu_mul", "attn_scores", "softmax_exp", "attn_values",
					 "rmsnorm" };
	char why[512], log[600];
	int i, rc;

	stand.name = "avx512";	/* the C set standing in for AVX-512 */
	rc = kve_kernels_selfcheck(&stand, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == 0 && !why[0], "self-check: portable C against itself passes");
	if (has2) {
		rc = kve_kernels_selfcheck(&kve_kernels_avx2, &kve_kernels_c, why, sizeof(why));
		CHECK(rc == 0, "self-check: avx2 against portable C passes (the bound is not too "
		      "tight for a real SIMD set) %s", why);
	}
	for (i = 0; i < 14; i++) {
		bad = kve_kernels_c;
		bad.name = "avx512";
		switch (i) {
		case 0: bad.mm_f32 = bad_mm_f32; break;
		case 1: bad.mm_f16 = bad_mm_f16; break;
		case 2: bad.mm_q8 = bad_mm_q8; break;
		case 3: bad.dot_f32 = bad_dot_f32; break;
		case 4: bad.dot_f16 = bad_dot_f16; break;
		case 5: bad.axpy_f32 = bad_axpy_f32; break;
		case 6: bad.axpy_f16 = bad_axpy_f16; break;
		case 7: bad.quantize_q8x = bad_quantize; break;
		case 8: bad.f32_to_f16 = bad_f16; break;
		case 9: bad.silu_mul = bad_silu; break;
		case 10: bad.attn_scores = bad_attn_scores; break;
		case 11: bad.softmax_exp = bad_softmax; break;
		case 12: bad.attn_values = bad_attn_values; break;
		case 13: bad.rmsnorm = bad_rmsnorm; break;
		}
		rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
		CHECK(rc == -1 && !strncmp(why, names[i], strlen(names[i])),
		      "self-check: a broken %s is caught: %s", names[i], why);
	}
	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.mm_f32 = off_mm_f32;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	snprintf(log, sizeof(log), "row 0 token 1 gives %.9g, portable C %.9g (bound %.3g)",
		 (double)off_got, (double)off_ref, off_bound);
	CHECK(rc == -1 && !strncmp(why, "mm_f32 [", 8) && strstr(why, log),
	      "self-check: an mm_f32 1.5 times its bound off is caught: %s", why);

	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.softmax_exp = bad_softmax_first;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "softmax_exp: element 0 ", 23),
	      "self-check: a softmax_exp wrong in element 0 only (its sum right) is caught: %s", why);

	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.attn_values = near_attn_values;
	near_factor = 2.5f;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "attn_values", 11),
	      "self-check: attn_values off by 2.5 times its bound is caught: %s", why);
	near_factor = 1.2f;	/* the bound is 4 ulps a row: 5 would let this pass */
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "attn_values", 11),
	      "self-check: attn_values off by 1.2 times its bound is caught: %s", why);
	near_factor = 0.5f;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == 0, "self-check: attn_values off by half its bound passes, element by "
	      "element (the bound follows each element's magnitude) %s", why);

	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.quantize_q8x = bad_quantize_ties;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "quantize_q8x", 12),
	      "self-check: a quantiser rounding half steps away from zero is caught: %s", why);

	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.quantize_q8x = bad_quantize_zero;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "quantize_q8x", 12),
	      "self-check: a quantiser wrong on an all-zero block only is caught: %s", why);

	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.quantize_q8x = bad_quantize_first;
	rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
	CHECK(rc == -1 && !strncmp(why, "quantize_q8x: block 0", 21),
	      "self-check: a quantiser wrong in its first block only is caught: %s", why);

	{	/* each of the 21 kernels missing in turn */
		static const size_t kern[] = {
			offsetof(struct kve_kernels, mm_f32), offsetof(struct kve_kernels, mm_f16),
			offsetof(struct kve_kernels, mm_q8), offsetof(struct kve_kernels, mm_bf16),
			offsetof(struct kve_kernels, mm_q32), offsetof(struct kve_kernels, mm_qk),
			offsetof(struct kve_kernels, quantize_q8k), offsetof(struct kve_kernels, dot_f32),
			offsetof(struct kve_kernels, dot_f16), offsetof(struct kve_kernels, axpy_f32),
			offsetof(struct kve_kernels, axpy_f16),
			offsetof(struct kve_kernels, quantize_q8x),
			offsetof(struct kve_kernels, f32_to_f16), offsetof(struct kve_kernels, silu_mul),
			offsetof(struct kve_kernels, attn_scores),
			offsetof(struct kve_kernels, softmax_exp),
			offsetof(struct kve_kernels, attn_values),
			offsetof(struct kve_kernels, attn_scores_q8),
			offsetof(struct kve_kernels, attn_values_q8),
			offsetof(struct kve_kernels, hadamard), offsetof(struct kve_kernels, rmsnorm)
		};
		size_t ki;
		int caught = 0;

		for (ki = 0; ki < sizeof(kern) / sizeof(kern[0]); ki++) {
			bad = kve_kernels_c;
			memset((char *)&bad + kern[ki], 0, sizeof(bad.mm_f32));
			rc = kve_kernels_selfcheck(&bad, &kve_kernels_c, why, sizeof(why));
			caught += rc == -1 && strstr(why, "missing") != NULL;
		}
		/* every function pointer is listed: they run from the name to
		 * the layout flags, the members after them */
		CHECK(caught == (int)(sizeof(kern) / sizeof(kern[0])) &&
		      offsetof(struct kve_kernels, q4_0_x16) == sizeof(char *) +
		      sizeof(kern) / sizeof(kern[0]) * sizeof(bad.mm_f32) &&
		      sizeof(struct kve_kernels) <= offsetof(struct kve_kernels, q4_0_x16) +
		      4 * sizeof(int), "self-check: a set missing any one of its %zu kernels fails "
		      "(%d caught): %s", sizeof(kern) / sizeof(kern[0]), caught, why);
	}

	/* the selection path itself */
	k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, NULL, 0, &stand, set2,
			     &kve_kernels_c, log, sizeof(log));
	CHECK(k == &stand && !log[0], "pick: an AVX-512 set that passes the self-check is used");
	bad = kve_kernels_c;
	bad.name = "avx512";
	bad.mm_q8 = bad_mm_q8;
	k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, NULL, 0, &bad, set2,
			     &kve_kernels_c, log, sizeof(log));
	CHECK(k == set2 && strstr(log, "avx512 kernel self-check failed (mm_q8") &&
	      strstr(log, set2->name), "pick: a failing AVX-512 set falls back to %s, logged: %s",
	      set2->name, log);
	{	/* accurate but batch-dependent: only the candidate's own
		 * batch invariance shows it, so the candidate must be checked
		 * as the candidate (not as the reference) */
		struct kve_kernels bf = kve_kernels_c;

		bf.name = "avx512";
		bf.mm_f16 = bad_mm_f16;
		k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, NULL, 0, &bf, set2,
				     &kve_kernels_c, log, sizeof(log));
		CHECK(k == set2 && strstr(log, "avx512 kernel self-check failed (mm_f16"),
		      "pick: an AVX-512 set whose mm_f16 depends on the batch falls back: %s", log);
	}
	k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, "avx2", 0, &bad, set2,
			     &kve_kernels_c, log, sizeof(log));
	CHECK(k == set2 && !log[0], "pick: KVE_ISA=avx2 skips the AVX-512 set (and its check)");
	k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, "c", 0, &bad, set2,
			     &kve_kernels_c, log, sizeof(log));
	CHECK(k == &kve_kernels_c && !log[0], "pick: KVE_ISA=c gives the portable set");
	k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, "avx512", 0, &stand, set2,
			     &kve_kernels_c, log, sizeof(log));
	CHECK(k == &stand, "pick: KVE_ISA=avx512 on an AVX-512 CPU keeps the AVX-512 set");
	k = kve_kernels_pick(KVE_CPU_AVX2, NULL, 0, &bad, set2, &kve_kernels_c, log, sizeof(log));
	CHECK(k == set2 && !log[0], "pick: without AVX-512 the AVX-512 set is neither checked nor used");
	{	/* KVE_SELFCHECK=1: a failing AVX2 stand-in falls to C */
		struct kve_kernels bad2 = kve_kernels_c;
		bad2.name = "avx2";
		bad2.dot_f32 = bad_dot_f32;
		k = kve_kernels_pick(KVE_CPU_AVX2 | KVE_CPU_AVX512, NULL, 1, &bad, &bad2,
				     &kve_kernels_c, log, sizeof(log));
		CHECK(k == &kve_kernels_c && strstr(log, "avx2 kernel self-check failed (dot_f32"),
		      "pick with KVE_SELFCHECK=1: AVX-512 and AVX2 stand-ins both fail -> c: %s", log);
	}
	printf("# dispatch note: \"%s\"\n", kve_isa_note());
}

/* Linux's view of the CPU: is flag in /proc/cpuinfo? -1 if unreadable */
static int cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p;

		if (strncmp(line, "flags", 5))
			continue;
		found = 0;
		for (p = strtok(strchr(line, ':') ? strchr(line, ':') + 1 : line, " \n"); p;
		     p = strtok(NULL, " \n"))
			found |= !strcmp(p, flag);
		break;
	}
	fclose(f);
	return found;
}

/* The five-set selection on every made-up feature mask, with C stand-ins
 * named after the sets (they pass the self-check) and broken ones. */
static void check_pick_vnni(void)
{
	struct kve_kernels s512v = kve_kernels_c, s512 = kve_kernels_c, s2v = kve_kernels_c,
			   s2 = kve_kernels_c, bad, badv;
	struct kve_kernel_sets s = { &s512v, &s512, &s2v, &s2, &kve_kernels_c };
	const struct kve_kernels *k, *want;
	char log[800];
	unsigned cpu;
	int ok = 1, never = 1;

	s512v.name = "avx512vnni";
	s512.name = "avx512";
	s2v.name = "avxvnni";
	s2.name = "avx2";
	for (cpu = 0; cpu < 16; cpu++) {
		int a2 = cpu & KVE_CPU_AVX2;

		want = a2 && (cpu & KVE_CPU_AVX512) && (cpu & KVE_CPU_AVX512VNNI) ? &s512v :
		       a2 && (cpu & KVE_CPU_AVX512) ? &s512 :
		       a2 && (cpu & KVE_CPU_AVXVNNI) ? &s2v : a2 ? &s2 : &kve_kernels_c;
		k = kve_kernels_pick_sets(cpu, NULL, 0, &s, log, sizeof(log));
		ok &= k == want && !log[0];
		never &= k != &s2v || (cpu & (KVE_CPU_AVX2 | KVE_CPU_AVXVNNI)) ==
				      (KVE_CPU_AVX2 | KVE_CPU_AVXVNNI);
		never &= k != &s512v || (cpu & (KVE_CPU_AVX2 | KVE_CPU_AVX512 | KVE_CPU_AVX512VNNI)) ==
					(KVE_CPU_AVX2 | KVE_CPU_AVX512 | KVE_CPU_AVX512VNNI);
	}
	CHECK(ok, "pick: on all 16 feature masks the best set the mask allows is chosen");
	CHECK(never, "pick: a VNNI set is never chosen without its CPU flag (and AVX2, and "
	      "AVX-512 for avx512vnni)");
	{	/* the real VNNI sets: the parent with only the integer products replaced */
		struct kve_kernels a = *kve_kernels_avxvnni(), b = *kve_kernels_avx512vnni();
		int same;

		same = !strcmp(a.name, "avxvnni") && a.mm_q8 == kve_mm_q8_avxvnni &&
		       a.mm_q32 == kve_mm_q32_avxvnni && a.mm_qk == kve_mm_qk_avxvnni &&
		       !strcmp(b.name, "avx512vnni") && b.mm_q8 == kve_mm_q8_avx512vnni &&
		       b.mm_q32 == kve_mm_q32_avx512vnni && b.mm_qk == kve_mm_qk_avx512vnni &&
		       b.attn_scores_q8 == kve_attn_scores_q8_avx512vnni && !a.q8_x16 && b.q8_x16;
		a.name = kve_kernels_avx2.name;
		a.mm_q8 = kve_kernels_avx2.mm_q8;
		a.mm_q32 = kve_kernels_avx2.mm_q32;
		a.mm_qk = kve_kernels_avx2.mm_qk;
		b.name = kve_kernels_avx512.name;
		b.mm_q8 = kve_kernels_avx512.mm_q8;
		b.mm_q32 = kve_kernels_avx512.mm_q32;
		b.mm_qk = kve_kernels_avx512.mm_qk;
		b.attn_scores_q8 = kve_kernels_avx512.attn_scores_q8;
		b.q8_x16 = kve_kernels_avx512.q8_x16;
		same &= !memcmp(&a, &kve_kernels_avx2, sizeof(a)) &&
			!memcmp(&b, &kve_kernels_avx512, sizeof(b));
		CHECK(same, "the avxvnni/avx512vnni sets are avx2/avx512 with mm_q8, mm_q32 and "
		      "mm_qk replaced (and avx512vnni's Q8_0 in 16-row panels and Q8_0 KV "
		      "scores)");
	}
	k = kve_kernels_pick_sets(KVE_CPU_AVX2 | KVE_CPU_AVX512, "avx512vnni", 0, &s, log, sizeof(log));
	CHECK(k == &s512, "pick: KVE_ISA=avx512vnni without AVX-512 VNNI gives avx512");
	k = kve_kernels_pick_sets(15, "avx512", 0, &s, log, sizeof(log));
	CHECK(k == &s512, "pick: KVE_ISA=avx512 on a VNNI CPU skips the VNNI set");
	k = kve_kernels_pick_sets(15, "avxvnni", 0, &s, log, sizeof(log));
	CHECK(k == &s2v, "pick: KVE_ISA=avxvnni caps the choice at avxvnni");
	k = kve_kernels_pick_sets(15, "avx2", 0, &s, log, sizeof(log));
	CHECK(k == &s2 && !log[0], "pick: KVE_ISA=avx2 skips both VNNI sets and their checks");
	bad = kve_kernels_c;
	bad.name = "avx512vnni";
	bad.mm_q8 = bad_mm_q8;
	s.avx512vnni = &bad;
	k = kve_kernels_pick_sets(15, NULL, 0, &s, log, sizeof(log));
	CHECK(k == &s512 && strstr(log, "avx512vnni kernel self-check failed (mm_q8") &&
	      strstr(log, "using avx512 kernels"),
	      "pick: a failing avx512vnni set falls back to avx512: %s", log);
	s.avx512vnni = &s512v;
	badv = bad;
	badv.name = "avxvnni";
	s.avxvnni = &badv;
	k = kve_kernels_pick_sets(KVE_CPU_AVX2 | KVE_CPU_AVXVNNI, NULL, 0, &s, log, sizeof(log));
	CHECK(k == &s2 && strstr(log, "avxvnni kernel self-check failed (mm_q8") &&
	      strstr(log, "using avx2 kernels"),
	      "pick: a failing avxvnni set falls back to avx2: %s", log);
	{
		struct kve_kernels bad512 = kve_kernels_c;

		bad512.name = "avx512";
		bad512.dot_f32 = bad_dot_f32;
		s.avx512 = &bad512;
		k = kve_kernels_pick_sets(15, NULL, 0, &s, log, sizeof(log));
		CHECK(k == &s512v, "pick: a passing avx512vnni set is kept (the avx512 one is not checked)");
		s.avx512vnni = &bad;
		k = kve_kernels_pick_sets(15, NULL, 0, &s, log, sizeof(log));
		CHECK(k == &s2 && strstr(log, "avx512vnni kernel self-check failed") &&
		      strstr(log, "avx512 kernel self-check failed") &&
		      strstr(log, "avxvnni kernel self-check failed"),
		      "pick: avx512vnni, avx512 and avxvnni all failing -> avx2, each logged: %s", log);
		{	/* one line each; a short log cut, never overrun; none */
			char small[64];
			const char *p;
			int lines = 1, starts = !strncmp(log, "kvengine: ", 10);

			for (p = log; (p = strchr(p, '\n')); p++, lines++)
				starts &= !strncmp(p + 1, "kvengine: ", 10);
			CHECK(lines == 3 && starts, "pick: the three failures are three lines, each "
			      "starting \"kvengine: \"");
			memset(small, '#', sizeof(small));
			k = kve_kernels_pick_sets(15, NULL, 0, &s, small, 40);
			CHECK(k == &s2 && strlen(small) == 39 && !strncmp(small, log, 39) &&
			      small[40] == '#', "pick: a 40-byte log holds the first 39 bytes, "
			      "nothing written past it");
			p = strchr(log, '\n');	/* room for the first line and one byte */
			{
				char mid[1024];
				size_t l1 = p ? (size_t)(p - log) : sizeof(mid);

				memset(mid, '#', sizeof(mid));
				if (l1 + 2 <= sizeof(mid))
					k = kve_kernels_pick_sets(15, NULL, 0, &s, mid, l1 + 2);
				CHECK(l1 + 2 <= sizeof(mid) && k == &s2 && strlen(mid) == l1 + 1 &&
				      mid[l1] == '\n' && !strncmp(mid, log, l1), "pick: a log with room "
				      "for the first line and one byte holds the line and the newline");
			}
			small[0] = '#';
			k = kve_kernels_pick_sets(15, NULL, 0, &s, small, 0);
			CHECK(k == &s2 && small[0] == '#' &&
			      kve_kernels_pick_sets(15, NULL, 0, &s, NULL, 0) == &s2 &&
			      kve_kernels_pick_sets(15, NULL, 0, &s, NULL, 64) == &s2,
			      "pick: with no room for a log, or none, the same set, nothing written");
		}
	}
}

/* The feature decision on CPUs the host is not: a set's features come
 * only with every instruction set its kernels use. */
static void check_cpu_features(void)
{
	const unsigned all = KVE_HAS_AVX2 | KVE_HAS_FMA | KVE_HAS_F16C | KVE_HAS_AVXVNNI |
			     KVE_HAS_AVX512F | KVE_HAS_AVX512BW | KVE_HAS_AVX512VL |
			     KVE_HAS_AVX512VNNI;
	const unsigned trio = KVE_HAS_AVX2 | KVE_HAS_FMA | KVE_HAS_F16C;
	const unsigned everything = KVE_CPU_AVX2 | KVE_CPU_AVXVNNI | KVE_CPU_AVX512 |
				    KVE_CPU_AVX512VNNI;
	static const struct {
		unsigned drop;		/* from all */
		unsigned want;
		const char *what;
	} cases[] = {
		{ 0, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI | KVE_CPU_AVX512 | KVE_CPU_AVX512VNNI,
		  "every flag: every feature" },
		{ KVE_HAS_AVX2, 0, "no AVX2: nothing" },
		{ KVE_HAS_FMA, 0, "AVX2 without FMA: nothing" },
		{ KVE_HAS_F16C, 0, "AVX2 without F16C: nothing" },
		{ KVE_HAS_AVX512F, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI, "no AVX-512 F: no AVX-512" },
		{ KVE_HAS_AVX512BW, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI, "no AVX-512 BW: no AVX-512" },
		{ KVE_HAS_AVX512VL, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI, "no AVX-512 VL: no AVX-512" },
		{ KVE_HAS_AVXVNNI, KVE_CPU_AVX2 | KVE_CPU_AVX512 | KVE_CPU_AVX512VNNI,
		  "no AVX-VNNI: the rest" },
		{ KVE_HAS_AVX512VNNI, KVE_CPU_AVX2 | KVE_CPU_AVXVNNI | KVE_CPU_AVX512,
		  "no AVX-512 VNNI: the rest" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned got = kve_cpu_features_from(all & ~cases[i].drop);

		CHECK(got == cases[i].want, "cpu features, %s (0x%x, want 0x%x)", cases[i].what,
		      got, cases[i].want);
	}
	CHECK(kve_cpu_features_from(0) == 0, "cpu features: no flag, nothing");
	CHECK(kve_cpu_features_from(trio) == KVE_CPU_AVX2, "cpu features: AVX2, FMA, F16C: AVX2");
	CHECK(kve_cpu_features_from(all & ~trio) == 0,
	      "cpu features: every VNNI and AVX-512 flag without AVX2: nothing");
	CHECK(kve_cpu_features_from(trio | KVE_HAS_AVX512VNNI) == KVE_CPU_AVX2,
	      "cpu features: AVX-512 VNNI without AVX-512: AVX2 only");
	CHECK((kve_cpu_features_from(all) & ~everything) == 0, "cpu features: no unknown bit");
	CHECK(kve_cpu_features() == kve_cpu_features_from(kve_cpu_probe()),
	      "cpu features: this CPU's are its probe's (probe 0x%x)", kve_cpu_probe());
	{	/* the probe (F16C by hand, CPUID leaf 1) == what Linux reports */
		static const struct {
			unsigned bit;
			const char *flag;
		} fl[] = { { KVE_HAS_AVX2, "avx2" }, { KVE_HAS_FMA, "fma" }, { KVE_HAS_F16C, "f16c" },
			   { KVE_HAS_AVXVNNI, "avx_vnni" }, { KVE_HAS_AVX512F, "avx512f" },
			   { KVE_HAS_AVX512BW, "avx512bw" }, { KVE_HAS_AVX512VL, "avx512vl" },
			   { KVE_HAS_AVX512VNNI, "avx512_vnni" } };
		unsigned probe = kve_cpu_probe(), differ = 0;

		for (i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
			int has = cpuinfo_has(fl[i].flag);

			if (has >= 0 && has != !!(probe & fl[i].bit))
				differ |= fl[i].bit;
		}
		CHECK(!differ, "cpu probe 0x%x: each of its 8 flags as /proc/cpuinfo says "
		      "(differing: 0x%x)", probe, differ);
	}
}

int main(void)
{
	unsigned cpu = kve_cpu_features();
	int has2 = !!(cpu & KVE_CPU_AVX2), has512 = !!(cpu & KVE_CPU_AVX512);
	const char *best;

	check_cpu_features();
	{	/* fp16 conversion: all 65536 halves round-trip */
		uint32_t i, bad = 0;
		for (i = 0; i < 65536; i++) {
			float f = kve_f16_to_f32((uint16_t)i);
			if (f == f && kve_f32_to_f16(f) != i)
				bad++;
		}
		CHECK(bad == 0, "fp16 -> fp32 -> fp16 round trip of every half (%u bad)", bad);
	}
	check_set(&kve_kernels_c);
	check_q8_m128_found();
	check_silu(&kve_kernels_c);
	check_block_attn(&kve_kernels_c);
	check_rmsnorm(&kve_kernels_c);
	if (has2) {
		check_set(&kve_kernels_avx2);
		check_convert(&kve_kernels_avx2);
		check_silu(&kve_kernels_avx2);
		check_block_attn(&kve_kernels_avx2);
		check_rmsnorm(&kve_kernels_avx2);
	}
	else
		printf("# skip avx2: CPU lacks it\n");
	if (has512) {
		check_set(&kve_kernels_avx512);
		check_qk_x16(&kve_kernels_avx512, has2);
		check_convert(&kve_kernels_avx512);
		check_silu(&kve_kernels_avx512);
		check_block_attn(&kve_kernels_avx512);
		check_rmsnorm(&kve_kernels_avx512);
	}
	else
		printf("# skip avx512: CPU lacks it (those kernels are untested here)\n");
	if (cpu & KVE_CPU_AVXVNNI) {
		check_set_part(kve_kernels_avxvnni(), 1);
		check_same_q8("avxvnni", kve_mm_q8_avxvnni, &kve_kernels_avx2);
		check_quant_set(kve_kernels_avxvnni());
		check_same_quant(kve_kernels_avxvnni(), &kve_kernels_avx2);
	} else {
		printf("# skip avxvnni: CPU lacks AVX-VNNI (kve_mm_q8_avxvnni untested here)\n");
	}
	if (cpu & KVE_CPU_AVX512VNNI) {
		check_set_part(kve_kernels_avx512vnni(), 1);
		check_same_q8("avx512vnni", kve_mm_q8_avx512vnni, &kve_kernels_avx512);
		check_quant_set(kve_kernels_avx512vnni());
		check_same_quant(kve_kernels_avx512vnni(), &kve_kernels_avx512);
		check_qk_x16(kve_kernels_avx512vnni(), has2);
		kve_prefetch = !kve_prefetch;	/* the other way, same bits */
		check_qk_x16(kve_kernels_avx512vnni(), has2);
		kve_prefetch = !kve_prefetch;
		check_same_q8("avxvnni code with EVEX vpdpbusd", mm_q8_vnni256_evex,
			      &kve_kernels_avx2);
	} else {
		printf("# skip avx512vnni: CPU lacks AVX-512 VNNI (kve_mm_q8_avx512vnni untested "
		       "here)\n");
	}
	{	/* the features the dispatch sees == what Linux reports */
		int v = cpuinfo_has("avx_vnni"), v512 = cpuinfo_has("avx512_vnni");

		printf("# cpu features: avx2 %d avx512 %d avxvnni %d avx512vnni %d; "
		       "/proc/cpuinfo avx_vnni %d avx512_vnni %d\n", has2, has512,
		       !!(cpu & KVE_CPU_AVXVNNI), !!(cpu & KVE_CPU_AVX512VNNI), v, v512);
		if (v >= 0)
			CHECK(v == !!(cpu & KVE_CPU_AVXVNNI) &&
			      (!has512 || v512 == !!(cpu & KVE_CPU_AVX512VNNI)),
			      "kve_cpu_features: AVX-VNNI %s, AVX-512 VNNI %s, as /proc/cpuinfo says",
			      v ? "present" : "absent", v512 ? "present" : "absent");
	}
	check_pick_vnni();
	check_qkx16_layout();
	check_weight_prefetch();
	best = (cpu & KVE_CPU_AVX512VNNI) ? "avx512vnni" : has512 ? "avx512" :
	       (cpu & KVE_CPU_AVXVNNI) ? "avxvnni" : has2 ? "avx2" : "c";
	printf("# dispatch picked: %s\n", kve_isa_name());
	if (getenv("KVE_SELFCHECK") && !strcmp(getenv("KVE_SELFCHECK"), "1") && !getenv("KVE_ISA"))
		CHECK(!strcmp(kve_isa_name(), best) &&
		      !kve_isa_note()[0],
		      "KVE_SELFCHECK=1: the real dispatch self-checked %s and kept it", kve_isa_name());
	check_selfcheck(has2);
	return tc_done();
}
