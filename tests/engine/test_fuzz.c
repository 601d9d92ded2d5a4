// SPDX-License-Identifier: MIT
/*
 * test_fuzz.c - mutates valid GGUF models a few thousand times (bit flips,
 * bytes set to boundary values, 64-bit fields overwritten, truncations;
 * mostly in the header, where the counts and offsets live) and feeds each
 * to the loader, the tokenizer and, when it loads, one prefill and decode.
 * Built with ASan+UBSan: any overread or UB aborts the run. A rejected
 * file must come with an error message; an accepted one must keep the
 * loader's promises (alignment, tensors inside the data section, a model
 * shape the forward pass can run).
 *
 * usage: test_fuzz ITERATIONS MODEL...
 */
#include "engine_internal.h"
#include "tcheck.h"

static uint64_t st = 0x1234567;

static uint64_t rnd(void)
{
	st ^= st << 13;
	st ^= st >> 7;
	st ^= st << 17;
	return st;
}

static void exercise(struct kve_model *m)
{
	const struct kve_model_info *in = kve_model_info(m);
	struct kve_tokenizer *t;
	char err[256], out[64];
	int32_t ids[64];
	struct tpool tp;
	struct kve_kv_pool kp;
	struct kve_engine_params ep = { 1, 2, 0, 8 };
	struct kve_engine *e;
	uint32_t tab[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	struct kve_session s = { tab, 8, 0 }, *sp = &s;
	float *lg;
	int n, i;

	t = kve_tokenizer_create(m, err, sizeof(err));
	if (t) {
		struct kve_detok d;
		n = kve_tokenize(t, "Hello, w\xc3\xb6rld \xff!", 15, 1, ids, 64);
		kve_detok_init(&d, t);
		for (i = 0; i < n && i < 64; i++)
			kve_detok_push(&d, ids[i], out, sizeof(out));
		kve_tokenizer_free(t);
	}
	if (in->dim > 512 || in->n_layers > 4 || in->ffn_dim > 2048 ||
	    (uint64_t)in->vocab * in->dim > (1u << 22) ||
	    in->n_kv_heads * in->head_dim > 1024)
		return;	/* valid but large after mutation: loading was the test */
	if (tpool_init(&tp, m, 2, KVE_KV_F16, 8, &kp))
		return;
	e = kve_engine_create(m, &kp, &ep, err, sizeof(err));
	lg = malloc(sizeof(float) * in->vocab);
	if (e && lg) {
		int32_t tk[3] = { 0, (int32_t)(in->vocab / 2), (int32_t)in->vocab - 1 };
		if (!kve_prefill(e, &s, tk, 3, lg))
			kve_decode(e, &sp, &tk[1], 1, lg);
	}
	free(lg);
	kve_engine_free(e);
	tpool_free(&tp);
}

/*
 * A file the loader accepts must be a valid one: what it promises about
 * the container and the model holds. Returns a description of the first
 * broken promise, or NULL.
 */
static const char *invalid(const struct kve_model *m)
{
	const struct kve_model_info *in = kve_model_info(m);
	const struct gguf *g = &m->g;
	uint64_t i;

	if (!g->alignment || (g->alignment & (g->alignment - 1)) ||
	    g->alignment > GGUF_MAX_ALIGN || g->data_off % g->alignment ||
	    g->data_off > g->len)
		return "alignment or data section";
	for (i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->t[i];

		if (t->offset % g->alignment || t->data < g->base + g->data_off ||
		    t->size > g->len || t->data + t->size > g->base + g->len)
			return "a tensor's offset or size";
	}
	if (!in->n_heads || !in->n_kv_heads || in->n_heads % in->n_kv_heads ||
	    !in->head_dim || in->head_dim % 2 || in->rope_dims > in->head_dim ||
	    in->rope_dims % 2 || !in->vocab || !in->n_layers || !in->dim)
		return "the model's shape";
	return NULL;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 3000, mi;

	for (mi = 2; mi < argc; mi++) {
		size_t len, hdr;
		uint8_t *orig = tc_slurp(argv[mi], &len);
		int it, loaded = 0, rejected = 0, silent = 0, bad = 0, nmodels = argc - 2;
		struct gguf g;
		char err[256];

		if (!orig || gguf_open_mem(&g, orig, len, err, sizeof(err))) {
			CHECK(0, "fuzz seed %s: %s", argv[mi], err);
			continue;
		}
		hdr = g.data_off;
		gguf_close(&g);
		for (it = 0; it < iters / nmodels; it++) {
			size_t n = len, k, muts = 1 + rnd() % 4;
			uint8_t *c;
			struct kve_model *m;

			if (rnd() % 8 == 0)
				n = rnd() % len;
			c = malloc(n ? n : 1);
			memcpy(c, orig, n);
			for (k = 0; k < muts && n; k++) {
				size_t at = rnd() % 4 ? rnd() % (hdr < n ? hdr : n) : rnd() % n;
				switch (rnd() % 5) {
				case 0: c[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
				case 1: c[at] = (uint8_t)rnd(); break;
				case 2: c[at] = (uint8_t[]){ 0, 0xff, 0x7f, 0x80, 1 }[rnd() % 5]; break;
				case 3: if (at + 8 <= n) {
						uint64_t v = (uint64_t[]){ 0, 1, UINT64_MAX, 1ull << 63,
							UINT32_MAX, (uint64_t)n, rnd() }[rnd() % 7];
						memcpy(c + at, &v, 8);
					}
					break;
				case 4: if (at + 4 <= n) {
						uint32_t v = (uint32_t)(rnd() % 16);
						memcpy(c + at, &v, 4);
					}
					break;
				}
			}
			err[0] = 0;
			m = kve_model_load_mem(c, n, err, sizeof(err));
			if (m) {
				const char *why = invalid(m);

				loaded++;
				if (why && bad++ < 3)
					printf("# fuzz: mutation %d of %s loaded with invalid %s\n",
					       it, argv[mi], why);
				exercise(m);
				kve_model_free(m);
			} else {
				rejected++;
				silent += !err[0];
			}
			free(c);
		}
		CHECK(silent == 0 && bad == 0, "fuzz %s: %d mutations, %d loaded and ran, "
		      "%d rejected, %d without a message, %d loaded but invalid; no crash",
		      argv[mi], iters / nmodels, loaded, rejected, silent, bad);
		free(orig);
	}
	return tc_done();
}
