// SPDX-License-Identifier: MIT
/*
 * test_engine.c - properties of the forward pass over paged KV, each
 * checked bit for bit: scattered blocks vs one contiguous block, a shared
 * prefix vs a private one, prefill-then-decode vs recomputing the whole
 * sequence, a decode batch vs each session alone, 2 threads vs 1, prompt
 * chunking; plus API error paths and sampling.
 *
 * usage: test_engine MODEL...   (KVE_TEST_KV=arena: blocks in a kvarena arena)
 */
#include <errno.h>
#include <math.h>
#include <sys/resource.h>

#include "tcheck.h"

#define NTOK 40
/* a Q8_0 KV's logits against an F16 one's, as a share of their range */
#define Q8_KV_BOUND 0.05

struct rig {
	struct kve_model *m;
	struct tpool tp;
	struct kve_kv_pool kp;
	struct kve_engine *e;
	uint32_t vocab, bt;
};

static int rig_init(struct rig *r, struct kve_model *m, uint32_t bt,
		    enum kve_kv_dtype dt, uint32_t nblocks, uint32_t threads,
		    uint32_t chunk)
{
	struct kve_engine_params p = { threads, 8, chunk, 256 };
	char err[256];

	memset(r, 0, sizeof(*r));
	r->m = m;
	r->bt = bt;
	r->vocab = kve_model_info(m)->vocab;
	if (tpool_init(&r->tp, m, bt, dt, nblocks, &r->kp))
		return -1;
	r->e = kve_engine_create(m, &r->kp, &p, err, sizeof(err));
	if (!r->e) {
		printf("engine: %s\n", err);
		return -1;
	}
	return 0;
}

static void rig_free(struct rig *r)
{
	kve_engine_free(r->e);
	tpool_free(&r->tp);
}

/* Runs prefill(n_pre) then decodes the rest one by one, logging logits of
 * every step into out ((1 + n - n_pre) x vocab). */
static int run_seq(struct rig *r, struct kve_session *s, const int32_t *tok,
		   uint32_t n, uint32_t n_pre, float *out)
{
	uint32_t i;
	int rc = kve_prefill(r->e, s, tok, n_pre, out);

	for (i = n_pre; i < n && !rc; i++) {
		struct kve_session *sp = s;
		out += r->vocab;
		rc = kve_decode(r->e, &sp, &tok[i], 1, out);
	}
	return rc;
}

/* Three decode steps of n sessions as one batch in rb against each alone
 * in r1 (greedy, from the batch's logits): 1 when every step's logits are
 * the same bits and every call succeeded. */
static int batch_vs_alone(struct rig *rb, struct rig *r1, struct kve_session **ps,
			  struct kve_session *s1, int32_t *next, uint32_t n, float *a, float *b)
{
	uint32_t i, v = rb->vocab;
	int ok = 1, same = 1, step;

	for (step = 0; ok && step < 3; step++) {
		ok &= !kve_decode(rb->e, ps, next, n, a);
		for (i = 0; i < n; i++) {
			struct kve_session *p1 = &s1[i];

			ok &= !kve_decode(r1->e, &p1, &next[i], 1, b + (size_t)i * v);
		}
		same &= !memcmp(a, b, (size_t)n * v * 4);
		for (i = 0; i < n; i++)
			next[i] = kve_sample(&(struct kve_sampler){ 0 }, a + (size_t)i * v, v, NULL);
	}
	return ok && same;
}

/* A Q8_0 KV against the F16 one on the same steps: what 8 bits a
 * value cost the logits (llama.cpp's -ctk/-ctv q8_0 trade) */
static void check_q8_kv(const char *path, const float *f16, const float *q8, uint32_t steps,
			uint32_t v)
{
	double worst = 0;
	uint32_t st, i, agree = 0;

	for (st = 0; st < steps; st++) {
		const float *x = f16 + (size_t)st * v, *y = q8 + (size_t)st * v;
		float lo = x[0], hi = x[0];
		uint32_t ax = 0, ay = 0;
		double dmax = 0;

		for (i = 0; i < v; i++) {
			lo = x[i] < lo ? x[i] : lo;
			hi = x[i] > hi ? x[i] : hi;
			dmax = fabs((double)x[i] - y[i]) > dmax ? fabs((double)x[i] - y[i]) : dmax;
			ax = x[i] > x[ax] ? i : ax;
			ay = y[i] > y[ay] ? i : ay;
		}
		if (hi > lo && dmax / (hi - lo) > worst)
			worst = dmax / (hi - lo);
		agree += ax == ay;
	}
	printf("  (%s: q8_0 KV against f16: worst logit error %.4f of the range, argmax %u/%u)\n",
	       path, worst, agree, steps);
	CHECK(worst < Q8_KV_BOUND && agree * 10 >= steps * 9,
	      "%s kv q8_0: logits within %.2f of the range of the f16 KV's, argmax agrees on "
	      ">= 90%% of %u steps (worst %.4f, %u agree)", path, Q8_KV_BOUND, steps, worst,
	      agree);
}

static void test_model(const char *path)
{
	char err[256];
	struct kve_model *m = kve_model_load(path, err, sizeof(err));
	const struct kve_model_info *in;
	int32_t tok[NTOK];
	uint32_t i, v, steps = NTOK - 20 + 1;
	float *a, *b, *f16ref;
	int d, cfg;

	CHECK(m != NULL, "load %s %s", path, m ? "" : err);
	if (!m)
		return;
	in = kve_model_info(m);
	v = in->vocab;
	for (i = 0; i < NTOK; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % v);
	a = calloc((size_t)NTOK * v * 8, sizeof(float));
	b = calloc((size_t)NTOK * v * 8, sizeof(float));

	CHECK(kve_kv_block_bytes(m, 16, KVE_KV_F16) ==
	      (size_t)in->n_layers * 2 * in->n_kv_heads * 16 * in->head_dim * 2,
	      "block bytes = layers*2*kv_heads*tokens*head_dim*2 (%zu)",
	      kve_kv_block_bytes(m, 16, KVE_KV_F16));
	{	/* the matrices a decode step reads: weight_bytes in all */
		const void *p;
		size_t len, sum = 0, n = 0;

		while (!kve_model_matrix(m, (uint32_t)n, &p, &len) && p && len) {
			sum += len;
			n++;
		}
		CHECK(n == 7 * (size_t)in->n_layers + 1 && sum == in->weight_bytes,
		      "kve_model_matrix: %zu matrices, %zu bytes (weight_bytes %llu)", n, sum,
		      (unsigned long long)in->weight_bytes);
	}

	if (in->head_dim % 32) {
		struct tpool tq;
		struct kve_kv_pool kq;

		CHECK(!kve_kv_block_bytes(m, 16, KVE_KV_Q8_0),
		      "%s: no Q8_0 KV block at head_dim %u (not a multiple of 32)", path,
		      in->head_dim);
		if (!tpool_init(&tq, m, 4, KVE_KV_F16, 4, &kq)) {
			struct kve_engine_params p = { 1, 8, 0, 256 };

			kq.dtype = KVE_KV_Q8_0;
			CHECK(!kve_engine_create(m, &kq, &p, err, sizeof(err)) &&
			      strstr(err, "multiple of 32"),
			      "%s: a Q8_0 KV pool refused at head_dim %u: %s", path, in->head_dim,
			      err);
			tpool_free(&tq);
		}
	} else {
		CHECK(kve_kv_block_bytes(m, 16, KVE_KV_Q8_0) ==
		      (size_t)in->n_layers * 2 * in->n_kv_heads * 16 * in->head_dim * 17 / 16,
		      "Q8_0 block bytes = layers*2*kv_heads*tokens*head_dim*17/16 (%zu)",
		      kve_kv_block_bytes(m, 16, KVE_KV_Q8_0));
	}
	f16ref = calloc((size_t)steps * v, sizeof(float));
	for (d = 0; d < 3 && f16ref; d++) {
		enum kve_kv_dtype dt = d == 2 ? KVE_KV_Q8_0 : d ? KVE_KV_F16 : KVE_KV_F32;
		const char *dn = d == 2 ? "q8_0" : d ? "f16" : "f32";
		struct rig rc, rp;
		uint32_t tab_c[1] = { 0 }, tab_p[16];
		struct kve_session sc = { tab_c, 1, 0 }, sp = { tab_p, 16, 0 };
		int ok = 1;

		if (d == 2 && in->head_dim % 32)
			break;
		/* contiguous: one 64-token block; paged: 4-token blocks in a
		 * scrambled order */
		if (rig_init(&rc, m, 64, dt, 1, 1, 0) || rig_init(&rp, m, 4, dt, 16, 1, 0))
			return;
		for (i = 0; i < 16; i++)
			tab_p[i] = (i * 5 + 3) % 16;
		ok &= !run_seq(&rc, &sc, tok, NTOK, 20, a);
		ok &= !run_seq(&rp, &sp, tok, NTOK, 20, b);
		CHECK(ok && !memcmp(a, b, (size_t)steps * v * 4),
		      "%s kv %s: scattered 4-token blocks == one contiguous block (%u steps)",
		      path, dn, steps);
		for (i = 0; i < steps * v && isfinite(a[i]); i++)
			;
		CHECK(i == steps * v, "%s kv %s: all logits finite", path, dn);
		if (d == 1)
			memcpy(f16ref, a, (size_t)steps * v * sizeof(float));
		if (d == 2)
			check_q8_kv(path, f16ref, a, steps, v);

		/* prefill-then-decode == full recompute */
		{
			uint32_t t2[16];
			struct kve_session s2 = { t2, 16, 0 };
			for (i = 0; i < 16; i++)
				t2[i] = i;
			rig_free(&rp);
			rig_init(&rp, m, 4, dt, 16, 1, 0);
			ok = !kve_prefill(rp.e, &s2, tok, NTOK, b);
			CHECK(ok && !memcmp(a + (size_t)(steps - 1) * v, b, (size_t)v * 4),
			      "%s kv %s: prefill(39)+decode(1) == prefill(40)", path, dn);
		}

		/* shared prefix: B takes A's first 3 blocks (12 tokens) */
		{
			uint32_t ta[16], tb[16], tcopy[16];
			struct kve_session sa = { ta, 16, 0 }, sb = { tb, 16, 0 },
					   sx = { tcopy, 16, 0 };
			int32_t tb_tok[24];
			uint8_t *snap;
			size_t bb = rp.tp.block_bytes;
			struct rig rx;

			rig_free(&rp);
			rig_init(&rp, m, 4, dt, 16, 1, 0);
			for (i = 0; i < 16; i++)
				ta[i] = i;
			ok = !kve_prefill(rp.e, &sa, tok, 20, a);
			memcpy(tb, ta, 3 * sizeof(uint32_t));
			for (i = 3; i < 16; i++)
				tb[i] = 5 + i - 3;	/* A used blocks 0..4 */
			sb.n_tokens = 12;
			for (i = 0; i < 24; i++)
				tb_tok[i] = i < 12 ? tok[i] : (int32_t)((i * 31u + 5) % v);
			snap = malloc(5 * bb);
			tpool_snap(&rp.tp, 0, 5, snap);
			ok &= !kve_prefill(rp.e, &sb, tb_tok + 12, 12, b);
			CHECK(ok && tpool_same(&rp.tp, 0, 5, snap),
			      "%s kv %s: session sharing A's prefix blocks leaves them untouched",
			      path, dn);
			rig_init(&rx, m, 4, dt, 16, 1, 0);
			for (i = 0; i < 16; i++)
				tcopy[i] = 15 - i;
			ok &= !kve_prefill(rx.e, &sx, tb_tok, 24, a);
			CHECK(ok && !memcmp(a, b, (size_t)v * 4),
			      "%s kv %s: shared-prefix session == private recompute", path, dn);
			/* and A continues unaffected by B */
			{
				struct kve_session *sap = &sa;
				float *c = a + v;
				ok = !kve_decode(rp.e, &sap, &tok[20], 1, c);
				rig_free(&rx);
				rig_init(&rx, m, 4, dt, 16, 1, 0);
				sx.n_tokens = 0;
				ok &= !kve_prefill(rx.e, &sx, tok, 21, b);
				CHECK(ok && !memcmp(c, b, (size_t)v * 4),
				      "%s kv %s: donor session decodes as if alone", path, dn);
			}
			free(snap);
			rig_free(&rx);
		}
		rig_free(&rc);
		rig_free(&rp);
	}
	free(f16ref);

	/* batch of 5 sessions with different lengths == each alone */
	{
		struct rig rb, r1;
		uint32_t tabs[5][8], tabs1[5][8];
		struct kve_session sb[5], s1[5], *ps[5];
		int32_t next[5];
		int ok = 1, same = 1;

		rig_init(&rb, m, 4, KVE_KV_F16, 40, 1, 0);
		rig_init(&r1, m, 4, KVE_KV_F16, 40, 1, 0);
		for (i = 0; i < 5; i++) {
			uint32_t j;
			for (j = 0; j < 8; j++)
				tabs[i][j] = tabs1[i][j] = i * 8 + j;
			sb[i] = (struct kve_session){ tabs[i], 8, 0 };
			s1[i] = (struct kve_session){ tabs1[i], 8, 0 };
			ok &= !kve_prefill(rb.e, &sb[i], tok + i, 3 + 4 * i, a);
			ok &= !kve_prefill(r1.e, &s1[i], tok + i, 3 + 4 * i, a);
			ps[i] = &sb[i];
			next[i] = tok[20 + i];
		}
		same = ok && batch_vs_alone(&rb, &r1, ps, s1, next, 5, a, b);
		CHECK(ok && same, "%s: decode batch of 5 == each session alone (3 steps)", path);
		rig_free(&rb);
		rig_free(&r1);
	}

	/* a decode batch of sessions that share their first blocks (one
	 * prompt, then a few tokens of each session's own) == each session
	 * alone with private blocks, at 1 and 2 threads: the batch reads the
	 * shared blocks once for all of them (attn_plan); then the same with
	 * more tokens of their own than a group takes (each reads alone),
	 * positions past the shared blocks */
	for (cfg = 0; cfg < 6; cfg++) {
		static const uint32_t owns[2][5] = { { 1, 0, 1, 0, 1 }, { 12, 12, 13, 12, 13 } };
		const uint32_t *own = owns[cfg / 2 % 2], pre = cfg / 2 % 2 ? 8 : 16;
		int th = 1 + cfg % 2;
		/* the last two: the same groups over a Q8_0 KV */
		enum kve_kv_dtype dt = cfg < 4 ? KVE_KV_F16 : KVE_KV_Q8_0;
		struct rig rb, r1;
		uint32_t tabs[5][8], tabs1[5][8], j;
		struct kve_session sb[5], s1[5], *ps[5];
		int32_t next[5], seq[32];
		int ok = 1, same = 1;

		if (dt == KVE_KV_Q8_0 && in->head_dim % 32)
			break;
		ok &= !rig_init(&rb, m, 4, dt, 48, (uint32_t)th, 0);
		ok &= !rig_init(&r1, m, 4, dt, 48, 1, 0);
		for (i = 0; ok && i < 5; i++) {
			for (j = 0; j < 8; j++) {
				tabs[i][j] = j < pre / 4 ? j : i * 8 + j;
				tabs1[i][j] = 8 + i * 8 + j;
			}
			sb[i] = (struct kve_session){ tabs[i], 8, i ? pre : 0 };
			s1[i] = (struct kve_session){ tabs1[i], 8, 0 };
			/* session i: the prompt, then own[i] tokens of its own */
			for (j = 0; j < pre + own[i]; j++)
				seq[j] = j < pre ? tok[j] : tok[(20 + 3 * i + j) % NTOK];
			if (i && own[i])
				ok &= !kve_prefill(rb.e, &sb[i], seq + pre, own[i], a);
			else if (!i)
				ok &= !kve_prefill(rb.e, &sb[i], seq, pre + own[i], a);
			ok &= !kve_prefill(r1.e, &s1[i], seq, pre + own[i], b);
			ps[i] = &sb[i];
			next[i] = tok[30 + i];
		}
		same = ok && batch_vs_alone(&rb, &r1, ps, s1, next, 5, a, b);
		CHECK(ok && same, "%s: decode batch of 5 sessions sharing %u prompt blocks, %s of "
		      "their own, == each alone (3 steps, %d thread%s, kv %s)", path, pre / 4,
		      cfg / 2 % 2 ? "12-13 tokens" : "0-1 token", th, th > 1 ? "s" : "",
		      cfg < 4 ? "f16" : "q8_0");
		/* then one mixed pass: a chunk of 4 for session 0 (a group of
		 * its own history), one token for each of the others */
		if (ok && same) {
			uint32_t nn[5] = { 4, 1, 1, 1, 1 }, off = 0;
			int32_t feed[8];

			for (i = 0; i < 8; i++)
				feed[i] = tok[(33 + 5 * i) % NTOK];
			ok &= !kve_batch(rb.e, ps, nn, feed, 5, a);
			for (i = 0; ok && i < 5; off += nn[i], i++) {
				ok &= !kve_prefill(r1.e, &s1[i], feed + off, nn[i], b);
				same &= !memcmp(a + (size_t)i * v, b, (size_t)v * 4);
			}
			CHECK(ok && same, "%s: then a pass of a 4-token chunk and 4 decode tokens "
			      "== each alone (%u shared blocks, %d thread%s, kv %s)", path, pre / 4,
			      th, th > 1 ? "s" : "", cfg < 4 ? "f16" : "q8_0");
		}
		rig_free(&rb);
		rig_free(&r1);
	}

	/* a ragged batch (kve_batch): prompt chunks of fresh and continuing
	 * sessions and single decode tokens in one call, passes of 8 tokens
	 * splitting sessions across them, == each session alone */
	{
		struct rig rb, r1;
		uint32_t tabs[4][8], tabs1[4][8], pre[4] = { 0, 7, 6, 9 };
		uint32_t nn[4] = { 11, 1, 5, 1 }, off = 0;
		struct kve_session sb[4], s1[4], *ps[4];
		int32_t feed[32];
		int ok = 1, same = 1;

		ok &= !rig_init(&rb, m, 4, KVE_KV_F16, 32, 1, 8);
		ok &= !rig_init(&r1, m, 4, KVE_KV_F16, 32, 1, 0);
		for (i = 0; ok && i < 4; i++) {
			uint32_t j;

			for (j = 0; j < 8; j++)
				tabs[i][j] = tabs1[i][j] = i * 8 + j;
			sb[i] = (struct kve_session){ tabs[i], 8, 0 };
			s1[i] = (struct kve_session){ tabs1[i], 8, 0 };
			if (pre[i]) {
				ok &= !kve_prefill(rb.e, &sb[i], tok + i, pre[i], b);
				ok &= !kve_prefill(r1.e, &s1[i], tok + i, pre[i], b);
			}
			for (j = 0; j < nn[i]; j++)
				feed[off + j] = tok[i + pre[i] + j];
			ps[i] = &sb[i];
			off += nn[i];
		}
		ok &= !kve_batch(rb.e, ps, nn, feed, 4, a);
		for (i = 0, off = 0; ok && i < 4; off += nn[i], i++) {
			ok &= !kve_prefill(r1.e, &s1[i], feed + off, nn[i], b);
			same &= !memcmp(a + (size_t)i * v, b, (size_t)v * 4) &&
				sb[i].n_tokens == pre[i] + nn[i];
		}
		CHECK(ok && same, "%s: ragged batch (chunks of 11 and 5 tokens, 2 decode "
		      "tokens, 8-token passes) == each session alone", path);
		ps[1] = ps[0];
		CHECK(kve_batch(rb.e, ps, nn, feed, 2, a) == -EINVAL,
		      "%s: ragged batch naming a session twice: -EINVAL", path);
		rig_free(&rb);
		rig_free(&r1);
	}

	/* two threads and small prefill chunks change nothing */
	{
		struct rig r1, r2, r3;
		uint32_t t1[16], t2[16], t3[16];
		struct kve_session s1 = { t1, 16, 0 }, s2 = { t2, 16, 0 }, s3 = { t3, 16, 0 };
		float *c = a + (size_t)NTOK * v;
		int ok;

		for (i = 0; i < 16; i++)
			t1[i] = t2[i] = t3[i] = i;
		rig_init(&r1, m, 4, KVE_KV_F32, 16, 1, 0);
		rig_init(&r2, m, 4, KVE_KV_F32, 16, 2, 0);
		rig_init(&r3, m, 4, KVE_KV_F32, 16, 1, 7);
		ok = !run_seq(&r1, &s1, tok, NTOK, 30, a);
		ok &= !run_seq(&r2, &s2, tok, NTOK, 30, b);
		ok &= !run_seq(&r3, &s3, tok, NTOK, 30, c);
		CHECK(ok && !memcmp(a, b, (size_t)11 * v * 4), "%s: 2 threads == 1 thread", path);
		CHECK(ok && !memcmp(a, c, (size_t)11 * v * 4),
		      "%s: prefill in 7-token chunks == one pass", path);
		{	/* chunks of 8 = max_batch: every pass fills the
			 * engine's per-token buffers to their last row */
			struct rig r4;
			uint32_t t4[16];
			struct kve_session s4 = { t4, 16, 0 };

			for (i = 0; i < 16; i++)
				t4[i] = i;
			ok = !rig_init(&r4, m, 4, KVE_KV_F32, 16, 1, 8) &&
			     !run_seq(&r4, &s4, tok, NTOK, 30, c);
			CHECK(ok && !memcmp(a, c, (size_t)11 * v * 4),
			      "%s: prefill in 8-token chunks (as wide as the batch) == one pass", path);
			rig_free(&r4);
		}

		/* error paths */
		{
			int32_t bad = (int32_t)v;
			uint32_t small[1] = { 0 }, unknown[2] = { 0, 999 }, first[2] = { 999, 0 };
			struct kve_session ss = { small, 1, 0 }, su = { unknown, 2, 0 };
			struct kve_session sf = { first, 2, 0 };
			struct kve_session *dup[2] = { &s1, &s1 };
			int32_t two[2] = { 1, 2 };

			CHECK(kve_prefill(r1.e, &s1, &bad, 1, a) == -EINVAL, "token >= vocab -> EINVAL");
			CHECK(kve_prefill(r1.e, &ss, tok, 5, a) == -ENOSPC, "block table too short -> ENOSPC");
			CHECK(ss.n_tokens == 0, "failed prefill leaves the session as it was");
			CHECK(kve_prefill(r1.e, &su, tok, 5, a) == -EFAULT, "unknown block id -> EFAULT");
			CHECK(kve_prefill(r1.e, &sf, tok, 5, a) == -EFAULT && sf.n_tokens == 0,
			      "unknown id in the first block -> EFAULT, the session as it was");
			CHECK(kve_decode(r1.e, dup, two, 2, a) == -EINVAL, "same session twice in a batch -> EINVAL");
			CHECK(kve_decode(r1.e, dup, two, 9, a) == -EINVAL, "batch above max_batch -> EINVAL");
			{	/* each argument alone missing or empty */
				struct kve_session *one[1] = { &ss };
				int32_t neg = -1;

				CHECK(kve_prefill(NULL, &ss, two, 1, a) == -EINVAL &&
				      kve_prefill(r1.e, NULL, two, 1, a) == -EINVAL &&
				      kve_prefill(r1.e, &ss, NULL, 1, a) == -EINVAL &&
				      kve_prefill(r1.e, &ss, two, 0, a) == -EINVAL &&
				      kve_prefill(r1.e, &ss, two, 1, NULL) == -EINVAL &&
				      kve_prefill(r1.e, &ss, &neg, 1, a) == -EINVAL && ss.n_tokens == 0,
				      "prefill: no engine, session, tokens or logits, 0 tokens, token -1 "
				      "-> EINVAL, the session untouched");
				CHECK(kve_decode(NULL, one, two, 1, a) == -EINVAL &&
				      kve_decode(r1.e, NULL, two, 1, a) == -EINVAL &&
				      kve_decode(r1.e, one, NULL, 1, a) == -EINVAL &&
				      kve_decode(r1.e, one, two, 0, a) == -EINVAL &&
				      kve_decode(r1.e, one, two, 1, NULL) == -EINVAL &&
				      kve_decode(r1.e, one, &neg, 1, a) == -EINVAL &&
				      kve_decode(r1.e, one, &bad, 1, a) == -EINVAL && ss.n_tokens == 0,
				      "decode: no engine, sessions, tokens or logits, batch 0, token -1 or "
				      ">= vocab -> EINVAL, the session untouched");
			}
			/* the lowest id is a token like any other (last: it writes
			 * ss's block 0) */
			two[0] = 0;
			CHECK(kve_prefill(r1.e, &ss, two, 1, a) == 0 && ss.n_tokens == 1,
			      "token 0 (the lowest id) prefilled");
		}
		{	/* the engine's parameters: the pool's block size and
			 * type, the thread count (each refused, with a message) */
			struct kve_kv_pool kp = r1.kp;
			struct kve_engine_params ep = { 1, 8, 0, 256 };
			char e2[256];
			int ok = 1, k;

			for (k = 0; k < 5; k++) {
				kp = r1.kp;
				ep.n_threads = 1;
				if (k == 0)
					kp.block_tokens = 0;
				else if (k == 1)
					kp.block_tokens = 4097;
				else if (k == 2)
					kp.dtype = (enum kve_kv_dtype)7;
				else
					ep.n_threads = k == 3 ? 0 : 3;
				e2[0] = 0;
				ok &= kve_engine_create(r1.m, &kp, &ep, e2, sizeof(e2)) == NULL && e2[0];
			}
			kp = r1.kp;
			kp.block_tokens = 4096;	/* the limit itself */
			ep.n_threads = 1;
			{
				struct kve_engine *e4 = kve_engine_create(r1.m, &kp, &ep, e2,
									  sizeof(e2));

				ok &= e4 != NULL;
				kve_engine_free(e4);
			}
			CHECK(ok, "engine: block_tokens 0 and 4097, an unknown KV type, 0 and 3 "
			      "threads refused with a message; block_tokens 4096 taken");
		}
		{	/* the other arguments, each alone; the limits themselves
			 * accepted (max_batch 1024, max_chunk 4096) */
			struct kve_kv_pool kp = r1.kp, nop = r1.kp;
			struct kve_engine_params ep = { 1, 8, 0, 256 }, bad;
			struct kve_engine *e2 = NULL;
			char e3[256];
			int ok = 1, k;

			nop.block_ptr = NULL;
			e3[0] = 0;
			ok &= !kve_engine_create(NULL, &kp, &ep, e3, sizeof(e3)) && strstr(e3, "required");
			e3[0] = 0;
			ok &= !kve_engine_create(r1.m, NULL, &ep, e3, sizeof(e3)) && strstr(e3, "required");
			e3[0] = 0;
			ok &= !kve_engine_create(r1.m, &kp, NULL, e3, sizeof(e3)) && strstr(e3, "required");
			e3[0] = 0;
			ok &= !kve_engine_create(r1.m, &nop, &ep, e3, sizeof(e3)) && strstr(e3, "required");
			for (k = 0; k < 4; k++) {
				bad = ep;
				if (k == 0)
					bad.max_batch = 0;
				else if (k == 1)
					bad.max_batch = 1025;
				else if (k == 2)
					bad.max_chunk = 4097;
				else
					bad.max_ctx = (1u << 24) + 1;
				e3[0] = 0;
				ok &= !kve_engine_create(r1.m, &kp, &bad, e3, sizeof(e3)) &&
				      strstr(e3, "out of range");
			}
			bad = ep;
			bad.max_batch = 1024;
			bad.max_chunk = 4096;
			e2 = kve_engine_create(r1.m, &kp, &bad, e3, sizeof(e3));
			ok &= e2 != NULL;
			kve_engine_free(e2);
			bad = ep;
			bad.max_ctx = 1u << 24;	/* 64 MB of attention scores */
			e2 = kve_engine_create(r1.m, &kp, &bad, e3, sizeof(e3));
			ok &= e2 != NULL;
			kve_engine_free(e2);
			CHECK(ok, "engine: no model, pool, params or pool address function; max_batch "
			      "0 and 1025, max_chunk 4097, max_ctx 2^24 + 1 refused with a message; "
			      "max_batch 1024 with max_chunk 4096, and max_ctx 2^24, accepted (%s)", e3);
		}
		{	/* sessions the engine cannot write: no block table, a
			 * length that would wrap, past the engine's max_ctx (256)
			 * with blocks enough */
			static uint32_t many[65];
			struct kve_session nt = { NULL, 1, 0 }, wrap = { many, 65, UINT32_MAX },
					   full = { many, 65, 254 };
			int32_t three[3] = { 1, 2, 3 };

			CHECK(kve_prefill(r1.e, &nt, three, 1, a) == -EINVAL &&
			      kve_prefill(r1.e, &wrap, three, 1, a) == -ENOSPC &&
			      kve_prefill(r1.e, &full, three, 3, a) == -ENOSPC &&
			      wrap.n_tokens == UINT32_MAX && full.n_tokens == 254,
			      "prefill: no block table -> EINVAL; n_tokens + new wrapping, or past "
			      "max_ctx 256 with blocks enough -> ENOSPC, the session untouched");
			CHECK(kve_prefill(r1.e, &full, three, 2, a) == 0 && full.n_tokens == 256,
			      "prefill up to max_ctx (256) exactly is fine");
			{	/* decode checks each session as prefill does */
				uint32_t unk2[2] = { 0, 999 };
				struct kve_session dn = { NULL, 1, 0 }, dfull = { many, 2, 8 },
						   dbad = { unk2, 2, 5 }, *b1[1];
				int32_t t1 = 1;
				int okd;

				b1[0] = &dn;
				okd = kve_decode(r1.e, b1, &t1, 1, a) == -EINVAL;
				b1[0] = &dfull;
				okd &= kve_decode(r1.e, b1, &t1, 1, a) == -ENOSPC && dfull.n_tokens == 8;
				b1[0] = &dbad;
				okd &= kve_decode(r1.e, b1, &t1, 1, a) == -EFAULT && dbad.n_tokens == 5;
				CHECK(okd, "decode: a session without a block table -> EINVAL, one whose "
				      "table is full -> ENOSPC, one whose next block is unknown -> "
				      "EFAULT, each untouched");
			}
		}
		rig_free(&r1);
		rig_free(&r2);
		rig_free(&r3);
	}
	free(a);
	free(b);
	kve_model_free(m);
}

static void test_sampling(void)
{
	float lg[6] = { 0.5f, 2.0f, 1.0f, -1.0f, 2.0f, 0.0f };
	float three[3] = { 0, logf(2.0f), logf(7.0f) };	/* p = 0.1 0.2 0.7 */
	void *scr = malloc(KVE_SAMPLE_SCRATCH(6));
	struct kve_sampler g = { 0 }, s1 = { 1.0f, 0, 1.0f, kve_rng_seed(42), 0 },
			   s2 = { 1.0f, 0, 1.0f, kve_rng_seed(42), 0 },
			   s3 = { 1.0f, 0, 1.0f, kve_rng_seed(43), 0 };
	int i, same = 1, diff = 0, cnt[3] = { 0 }, topk_ok = 1, topp_ok = 1;

	CHECK(kve_sample(&g, lg, 6, NULL) == 1, "greedy picks the first maximum");
	for (i = 0; i < 200; i++) {
		int32_t x = kve_sample(&s1, lg, 6, scr), y = kve_sample(&s2, lg, 6, scr);
		same &= x == y;
		diff |= x != kve_sample(&s3, lg, 6, scr);
	}
	CHECK(same, "same seed -> same token sequence");
	CHECK(diff, "different seed -> different sequence");
	{
		struct kve_sampler st = { 1.0f, 0, 1.0f, kve_rng_seed(7), 0 };
		for (i = 0; i < 30000; i++)
			cnt[kve_sample(&st, three, 3, scr)]++;
	}
	CHECK(fabs(cnt[0] / 30000.0 - 0.1) < 0.01 && fabs(cnt[1] / 30000.0 - 0.2) < 0.012 &&
	      fabs(cnt[2] / 30000.0 - 0.7) < 0.012,
	      "temperature 1 frequencies %.3f %.3f %.3f ~ 0.1 0.2 0.7",
	      cnt[0] / 30000.0, cnt[1] / 30000.0, cnt[2] / 30000.0);
	{
		struct kve_sampler k2 = { 1.0f, 2, 1.0f, kve_rng_seed(9), 0 },
				   p5 = { 1.0f, 0, 0.5f, kve_rng_seed(9), 0 };
		for (i = 0; i < 2000; i++) {
			int32_t x = kve_sample(&k2, three, 3, scr);
			topk_ok &= x == 1 || x == 2;
			topp_ok &= kve_sample(&p5, three, 3, scr) == 2;
		}
	}
	/* the logits are divided by the temperature: p ~ exp(l / T) */
	{
		static const struct { float t, p[3]; } tc[] = {
			{ 0.5f, { 1 / 54.0f, 4 / 54.0f, 49 / 54.0f } },	/* 1 : 2^2 : 7^2 */
			{ 2.0f, { 0.19760f, 0.27945f, 0.52295f } },	/* 1 : 2^.5 : 7^.5 */
		};
		for (size_t k = 0; k < 2; k++) {
			struct kve_sampler st = { tc[k].t, 0, 1.0f, kve_rng_seed(11), 0 };
			int c3[3] = { 0 };

			for (i = 0; i < 20000; i++)
				c3[kve_sample(&st, three, 3, scr)]++;
			CHECK(fabs(c3[0] / 20000.0 - tc[k].p[0]) < 0.012 &&
			      fabs(c3[1] / 20000.0 - tc[k].p[1]) < 0.012 &&
			      fabs(c3[2] / 20000.0 - tc[k].p[2]) < 0.012,
			      "temperature %.1f frequencies %.3f %.3f %.3f ~ %.3f %.3f %.3f", tc[k].t,
			      c3[0] / 20000.0, c3[1] / 20000.0, c3[2] / 20000.0,
			      tc[k].p[0], tc[k].p[1], tc[k].p[2]);
		}
	}
	{	/* top-p 0.8 keeps 0.7 and 0.2, renormalised: 7/9 and 2/9 */
		struct kve_sampler p8 = { 1.0f, 0, 0.8f, kve_rng_seed(13), 0 };
		int c3[3] = { 0 };

		for (i = 0; i < 20000; i++)
			c3[kve_sample(&p8, three, 3, scr)]++;
		CHECK(c3[0] == 0 && fabs(c3[1] / 20000.0 - 2 / 9.0) < 0.012 &&
		      fabs(c3[2] / 20000.0 - 7 / 9.0) < 0.012,
		      "top-p 0.8 frequencies %.3f %.3f %.3f ~ 0 0.222 0.778",
		      c3[0] / 20000.0, c3[1] / 20000.0, c3[2] / 20000.0);
	}
	/* the generator is splitmix64: its known first output for seed 0, so
	 * a replayed request draws the same numbers after an upgrade */
	CHECK(kve_rng_seed(0) == 0xe220a8397b1dcdafULL, "kve_rng_seed(0) = splitmix64(0)");
	CHECK(topk_ok, "top-k 2 never leaves the two most likely tokens");
	CHECK(topp_ok, "top-p 0.5 keeps only the 0.7 token");
	{	/* top-p reached exactly: two tokens of 0.5 and top-p 0.5 keep
		 * one, the lower id (the smallest set whose mass is >= p) */
		float two[2] = { 1.0f, 1.0f };
		struct kve_sampler p5 = { 1.0f, 0, 0.5f, kve_rng_seed(17), 0 };
		int first = 1;

		for (i = 0; i < 400; i++)
			first &= kve_sample(&p5, two, 2, scr) == 0;
		CHECK(first, "top-p 0.5 over two tokens of 0.5 each keeps only the first");
	}
	{	/* no-op settings draw exactly what none does: top-k of the
		 * vocabulary or more, top-p 0 or 1 */
		struct kve_sampler base = { 1.0f, 0, 1.0f, kve_rng_seed(21), 0 }, v[4];
		int same4 = 1, k;

		for (k = 0; k < 4; k++)
			v[k] = base;
		v[0].top_k = 3;
		v[1].top_k = 10;
		v[2].top_p = 0.0f;
		v[3].top_p = 1.0f;
		for (i = 0; i < 500; i++) {
			int32_t x = kve_sample(&base, three, 3, scr);

			for (k = 0; k < 4; k++)
				same4 &= kve_sample(&v[k], three, 3, scr) == x;
		}
		CHECK(same4, "top-k 3 (the vocabulary) and 10, top-p 0 and 1 draw what neither does");
	}
	{	/* equal probabilities rank by id: top-k 2 of three equal keeps 0, 1 */
		float flat[3] = { 2.0f, 2.0f, 2.0f };
		struct kve_sampler k2 = { 1.0f, 2, 1.0f, kve_rng_seed(5), 0 };
		int seen[3] = { 0 };

		for (i = 0; i < 400; i++)
			seen[kve_sample(&k2, flat, 3, scr)]++;
		CHECK(seen[0] > 100 && seen[1] > 100 && !seen[2],
		      "top-k 2 over three equal logits keeps ids 0 and 1 (%d %d %d)", seen[0], seen[1],
		      seen[2]);
	}
	{	/* greedy without scratch: temperature 0, NaN or negative, top-k 1;
		 * the arguments */
		struct kve_sampler t0 = { 0.0f, 0, 1.0f, 1, 0 }, tn = { NAN, 0, 1.0f, 1, 0 },
				   tm = { -1.0f, 0, 1.0f, 1, 0 }, k1 = { 1.0f, 1, 1.0f, 1, 0 },
				   t1 = { 1.0f, 0, 1.0f, 1, 0 };

		CHECK(kve_sample(&t0, lg, 6, NULL) == 1 && kve_sample(&tn, lg, 6, NULL) == 1 &&
		      kve_sample(&tm, lg, 6, NULL) == 1 && kve_sample(&k1, lg, 6, NULL) == 1,
		      "temperature 0, NaN or -1, or top-k 1: greedy, no scratch needed");
		CHECK(kve_sample(NULL, lg, 6, scr) == -EINVAL && kve_sample(&t1, NULL, 6, scr) == -EINVAL &&
		      kve_sample(&t1, lg, 0, scr) == -EINVAL &&
		      kve_sample(&t1, lg, (uint32_t)INT32_MAX + 1, scr) == -EINVAL &&
		      kve_sample(&t1, lg, 6, NULL) == -EINVAL,
		      "sample: no sampler or logits, vocabulary 0 or past INT32_MAX, no scratch when "
		      "drawing -> EINVAL");
	}
	free(scr);
}

static long minor_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/*
 * kve_engine_create faults its scratch in, so that the first request does
 * not take the page faults: a second engine's first prefill (a full
 * chunk) and decode, on KV blocks and logits the first engine touched,
 * take next to none (0 here), against 3-5 with any one of the scratch
 * buffers left to fault in (the small ones share pages the heap had
 * touched).
 */
static void test_prefault(const char *path)
{
	char err[256];
	struct kve_model *m = kve_model_load(path, err, sizeof(err));
	struct rig r1, r2;
	uint32_t tab[16], i, v;
	struct kve_session s = { tab, 16, 0 }, *sp = &s;
	int32_t tok[64];
	float *lg;
	long f = -1, scratch;
	const struct kve_model_info *in;

	if (!m)
		return;
	in = kve_model_info(m);
	v = in->vocab;
	lg = calloc((size_t)64 * v, sizeof(float));
	for (i = 0; i < 16; i++)
		tab[i] = i;
	for (i = 0; i < 64; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % v);
	/* the scratch of 64 tokens, in pages: x, xb, q, kk, vv, att, hb, hb2 */
	scratch = (long)(64 * (2 * in->dim + 3 * in->n_heads * in->head_dim +
			       2 * in->n_kv_heads * in->head_dim + 2 * in->ffn_dim) * 4 / 4096);
	if (!rig_init(&r1, m, 16, KVE_KV_F16, 16, 1, 64)) {
		int ok = !kve_prefill(r1.e, &s, tok, 64, lg) && !kve_decode(r1.e, &sp, tok, 1, lg);

		s.n_tokens = 0;
		r2 = r1;	/* the same pool and blocks, a new engine */
		r2.e = kve_engine_create(m, &r1.kp, &(struct kve_engine_params){ 1, 8, 64, 256 },
					 err, sizeof(err));
		if (ok && r2.e) {
			f = minor_faults();
			ok = !kve_prefill(r2.e, &s, tok, 64, lg) && !kve_decode(r2.e, &sp, tok, 1, lg);
			f = ok ? minor_faults() - f : -1;
		}
		kve_engine_free(r2.e);
		rig_free(&r1);
	}
	CHECK(f >= 0 && f <= 1, "%s: a new engine's first 64-token prefill and decode take %ld "
	      "page faults, at most 1 (its scratch is %ld pages)", path, f, scratch);
	free(lg);
	kve_model_free(m);
}

int main(int argc, char **argv)
{
	int i;

	printf("# kernels: %s, KV blocks: %s\n", kve_isa_name(),
	       tpool_arena_mode() ? "libkvarena arena (memfd backend)" : "malloc");
	for (i = 1; i < argc; i++)
		test_model(argv[i]);
	if (argc > 1)
		test_prefault(argv[1]);
	test_sampling();
	return tc_done();
}
