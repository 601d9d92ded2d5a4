// SPDX-License-Identifier: MIT
/*
 * test_arena.c - the engine with its KV in libkvarena arena blocks (memfd
 * backend on the host; KVE_TEST_BACKEND=kernel runs the same tests over
 * /dev/kvarena, in a guest) through daemon/engine/kv_arena.c, checked bit for bit against
 * the same model over one contiguous malloc'd block:
 *  - geometry: 4 KiB-multiple blocks, the UAPI address formula,
 *    block_tokens reduced when a block would pass 2 MiB;
 *  - sessions that grow block by block (kva_blocks_alloc) in a shared
 *    batch, so their blocks interleave in the arena: == contiguous, and
 *    prefill(n-1)+decode == prefill(n);
 *  - a prefix shared with kva_blocks_share: == private recompute, donor
 *    blocks untouched, the prefix survives the donor's end (its blocks are
 *    not handed out again), all blocks back after the last session ends;
 *  - a decode batch of 5 arena sessions == each alone;
 *  - errors: table too short, arena full (all or nothing), bad shares;
 *  - two processes: this process prefills into the arena and sends the
 *    arena's data fd (SCM_RIGHTS) and block tables over a Unix socket to a
 *    freshly exec'd copy of itself, which maps the fd (kva_map_fd) and
 *    decodes both sessions in place; its logits and the KV it appended
 *    must equal a single-process run.
 *
 * usage: test_arena MODEL...
 *        test_arena --decode-worker FD MODEL STEPS   (the decode process)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_internal.h"
#include "tcheck.h"

#define NTOK 40
#define HO_BT 4		/* hand-over test: block tokens */
#define HO_PRE 13	/* session A's prompt; B shares 3 blocks + 5 own */

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t i, b = 0;

	for (i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return (int32_t)b;
}

/* Reference: the sequence over one contiguous malloc'd block; prefill
 * n_pre then decode the rest, logits of each step to out. */
static int ref_seq(const struct kve_model *m, enum kve_kv_dtype dt,
		   const int32_t *tok, uint32_t n, uint32_t n_pre, float *out)
{
	struct kve_engine_params ep = { 1, 8, 0, 256 };
	uint32_t tab[1] = { 0 }, v = kve_model_info(m)->vocab, i;
	struct kve_session s = { tab, 1, 0 }, *sp = &s;
	struct kve_kv_pool kp;
	struct kve_engine *e;
	struct tpool tp;
	char err[256];
	int rc;

	if (tpool_init(&tp, m, 256, dt, 1, &kp))
		return -ENOMEM;
	e = kve_engine_create(m, &kp, &ep, err, sizeof(err));
	if (!e) {
		tpool_free(&tp);
		return -EINVAL;
	}
	rc = kve_prefill(e, &s, tok, n_pre, out);
	for (i = n_pre; i < n && !rc; i++) {
		out += v;
		rc = kve_decode(e, &sp, &tok[i], 1, out);
	}
	kve_engine_free(e);
	tpool_free(&tp);
	return rc;
}

static uint32_t blocks_free(struct kve_arena_kv *kv)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };

	return kva_arena_get_info(kve_arena_kv_arena(kv), &ai) ? 0 : ai.blocks_free;
}

static uint32_t blocks_held(struct kve_arena_kv *kv, const struct kve_arena_session *as)
{
	struct kva_session_info si = { .size = sizeof(si) };

	return kva_session_get_info(kve_arena_kv_arena(kv), as->sid, &si) ? 0 : si.blocks_held;
}

static enum kva_backend backend = KVA_BACKEND_MEMFD;

static struct kve_arena_kv *mk_kv(const struct kve_model *m, uint32_t n_blocks,
				  uint32_t bt, enum kve_kv_dtype dt)
{
	struct kve_arena_kv_params ap = { .backend = backend,
		.n_blocks = n_blocks, .block_tokens = bt, .dtype = dt, .name = "test-arena" };
	struct kve_arena_kv *kv = NULL;
	char err[256];

	if (kve_arena_kv_create(m, &ap, &kv, err, sizeof(err)))
		printf("FAIL kve_arena_kv_create: %s\n", err);
	return kv;
}

static void test_geometry(const char *path, const struct kve_model *m)
{
	size_t per_tok = kve_kv_block_bytes(m, 1, KVE_KV_F32);
	struct kve_arena_geom g;
	struct kve_arena_kv *kv;
	uint32_t want, id;
	int ok = 1;

	CHECK(per_tok && kve_kv_block_bytes(m, 16, KVE_KV_F32) == 16 * per_tok &&
	      kve_kv_block_bytes(m, 16, KVE_KV_F16) * 2 == 16 * per_tok &&
	      !kve_kv_block_bytes(m, 0, KVE_KV_F32) &&
	      !kve_kv_block_bytes(m, 16, (enum kve_kv_dtype)7) &&
	      !kve_kv_block_bytes(NULL, 16, KVE_KV_F32),
	      "%s: a KV block's bytes: 16 tokens of f32 twice f16; 0 for 0 tokens, an unknown "
	      "dtype or no model", path);
	kv = mk_kv(m, 10, 0, KVE_KV_F16);
	if (!kv)
		return;
	kve_arena_kv_geom(kv, &g);
	CHECK(g.block_tokens == KVE_DEFAULT_BLOCK_TOKENS &&
	      g.kv_block_bytes == kve_kv_block_bytes(m, 16, KVE_KV_F16) &&
	      g.block_size == ((g.kv_block_bytes + 4095) & ~4095u) &&
	      g.blocks_per_page == (2u << 20) / g.block_size &&
	      g.arena_bytes % (2u << 20) == 0 && g.blocks_total >= 10 &&
	      kve_arena_kv_pool(kv)->block_tokens == 16,
	      "%s: f16 x 16 tokens: KV %u bytes in %u-byte arena blocks, %u per 2 MiB page, %u blocks",
	      path, g.kv_block_bytes, g.block_size, g.blocks_per_page, g.blocks_total);
	for (id = 0; id < g.blocks_total; id++) {
		uint8_t *p = kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx, id);
		uint8_t *q = kva_arena_block_ptr(kve_arena_kv_arena(kv), 0);

		ok &= q != NULL && p == q + kva_block_offset(g.block_size, id);
		ok &= ((uintptr_t)p & 4095) == 0;
	}
	ok &= kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx, g.blocks_total) == NULL;
	CHECK(ok, "%s: the arena is mapped, pool addresses follow the UAPI formula, 4 KiB aligned, "
	      "NULL past the end", path);
	kve_arena_kv_destroy(kv);

	/* a whole number of pages' worth of blocks takes no page more */
	want = g.blocks_per_page;
	kv = mk_kv(m, want, 0, KVE_KV_F16);
	if (!kv)
		return;
	kve_arena_kv_geom(kv, &g);
	CHECK(g.arena_bytes == (2u << 20) && g.blocks_total == want,
	      "%s: %u blocks, one 2 MiB page's worth: an arena of %llu bytes, %u blocks", path,
	      want, (unsigned long long)g.arena_bytes, g.blocks_total);
	kve_arena_kv_destroy(kv);

	/* 4096 tokens per block: reduced when more than 2 MiB */
	want = per_tok * 4096 > (2u << 20) ? (uint32_t)((2u << 20) / per_tok) : 4096;
	kv = mk_kv(m, 1, 4096, KVE_KV_F32);
	if (!kv)
		return;
	kve_arena_kv_geom(kv, &g);
	CHECK(kve_arena_kv_pool(kv)->block_tokens == want && g.block_tokens == want &&
	      g.block_size <= (2u << 20) && g.kv_block_bytes <= g.block_size,
	      "%s: 4096 f32 tokens (%zu bytes) -> block_tokens %u, block %u bytes (<= 2 MiB)",
	      path, per_tok * 4096, g.block_tokens, g.block_size);
	kve_arena_kv_destroy(kv);
}

static void test_sessions(const char *path, const struct kve_model *m, enum kve_kv_dtype dt)
{
	const char *dn = dt == KVE_KV_Q8_0 ? "q8_0" : dt == KVE_KV_F16 ? "f16" : "f32";
	uint32_t v = kve_model_info(m)->vocab, i, j, steps = NTOK - 20 + 1, total, scattered = 0;
	struct kve_engine_params ep = { 1, 8, 0, 256 };
	struct kve_arena_session A, B, C, D, E, F, *pair[2];
	struct kve_arena_kv *kv = mk_kv(m, 64, 4, dt);
	int32_t tok[NTOK], other[NTOK], tb[25], next[2];
	float *a = calloc((size_t)NTOK * v, 4), *r = calloc((size_t)NTOK * v, 4);
	float *c = calloc((size_t)2 * v, 4);
	struct kve_engine *e;
	uint8_t *snap = NULL;
	char err[256];
	int ok = 1, rc;

	if (!kv)
		goto out;
	total = blocks_free(kv);
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	CHECK(e != NULL, "%s kv %s: engine over an arena pool %s", path, dn, e ? "" : err);
	if (!e)
		goto out;
	for (i = 0; i < NTOK; i++) {
		tok[i] = (int32_t)((i * 7919u + 13) % v);
		other[i] = (int32_t)((i * 31u + 5) % v);
	}

	/* A: prefill 20, then 20 decode steps in a batch with C, both growing
	 * block by block so their blocks interleave */
	ok &= !kve_arena_session_open(kv, 1, 64, &A);
	ok &= !kve_arena_session_open(kv, 3, 64, &C);
	ok &= !kve_arena_prefill(e, kv, &A, tok, 20, a);
	ok &= !kve_arena_prefill(e, kv, &C, other, 1, c);
	pair[0] = &A;
	pair[1] = &C;
	for (i = 20; i < NTOK && ok; i++) {
		next[0] = tok[i];
		next[1] = other[i - 19];
		ok &= !kve_arena_decode(e, kv, pair, next, 2, c);
		memcpy(a + (size_t)(i - 19) * v, c, (size_t)v * 4);
	}
	for (i = 1; i < A.s.n_blocks; i++)
		scattered |= A.s.block_table[i] != A.s.block_table[i - 1] + 1;
	ok &= !ref_seq(m, dt, tok, NTOK, 20, r);
	CHECK(ok && !memcmp(a, r, (size_t)steps * v * 4),
	      "%s kv %s: arena session growing in a batch == contiguous malloc block (%u steps)",
	      path, dn, steps);
	CHECK(scattered && A.s.n_blocks == 10 && blocks_held(kv, &A) == 10,
	      "%s kv %s: A holds 10 arena blocks, not consecutive (ids %u %u %u ...)",
	      path, dn, A.s.block_table[0], A.s.block_table[1], A.s.block_table[2]);

	/* prefill(40) in one go == prefill(20) + 20 decodes */
	ok = !kve_arena_session_open(kv, 4, 64, &D);
	ok &= !kve_arena_prefill(e, kv, &D, tok, NTOK, c);
	CHECK(ok && !memcmp(c, a + (size_t)(steps - 1) * v, (size_t)v * 4),
	      "%s kv %s: prefill(40) == prefill(20)+decode(20) over arena blocks", path, dn);
	kve_arena_session_close(kv, &D);

	/* B shares A's first 3 blocks (12 tokens) and adds 12 of its own */
	for (i = 0; i < 25; i++)
		tb[i] = i < 12 ? tok[i] : (int32_t)((i * 131u + 7) % v);
	ok = !kve_arena_session_open(kv, 2, 64, &B);
	CHECK(kve_arena_session_share(kv, &B, &A, 11) == -EINVAL,
	      "%s kv %s: sharing a block that is not full -> EINVAL", path, dn);
	ok &= !kve_arena_session_share(kv, &B, &A, 3);
	CHECK(kve_arena_session_share(kv, &B, &A, 3) == -EBUSY,
	      "%s kv %s: sharing into a session that holds blocks -> EBUSY", path, dn);
	snap = malloc((size_t)3 * kve_kv_block_bytes(m, 4, dt));
	for (i = 0; i < 3; i++)
		memcpy(snap + i * kve_kv_block_bytes(m, 4, dt),
		       kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx, A.s.block_table[i]),
		       kve_kv_block_bytes(m, 4, dt));
	ok &= !kve_arena_prefill(e, kv, &B, tb + 12, 12, c);
	ok &= !ref_seq(m, dt, tb, 24, 24, r);
	CHECK(ok && !memcmp(c, r, (size_t)v * 4) && B.s.block_table[0] == A.s.block_table[0] &&
	      blocks_held(kv, &B) == 6,
	      "%s kv %s: B over A's 3 shared blocks (kva_blocks_share) + 3 own == private recompute",
	      path, dn);
	for (i = 0; i < 3; i++)
		ok &= !memcmp(snap + i * kve_kv_block_bytes(m, 4, dt),
			      kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx,
							       A.s.block_table[i]),
			      kve_kv_block_bytes(m, 4, dt));
	CHECK(ok, "%s kv %s: the shared blocks are untouched by B", path, dn);

	/* A and C end; the shared prefix stays B's: fill every free block
	 * with poison through a new session, then B decodes on */
	kve_arena_session_close(kv, &A);
	kve_arena_session_close(kv, &C);
	CHECK(blocks_free(kv) == total - 6, "%s kv %s: after A ends, B still holds its 6 blocks "
	      "(%u of %u free)", path, dn, blocks_free(kv), total);
	ok = !kve_arena_session_open(kv, 5, total * 4, &E);
	ok &= !kve_arena_session_reserve(kv, &E, (total - 7) * 4);	/* B needs 1 */
	for (i = 0; ok && i < E.s.n_blocks; i++)
		memset(kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx, E.s.block_table[i]),
		       0xff, kve_kv_block_bytes(m, 4, dt));
	pair[0] = &B;
	ok &= !kve_arena_decode(e, kv, pair, &tb[24], 1, c);
	ok &= !ref_seq(m, dt, tb, 25, 25, r);
	CHECK(ok && !memcmp(c, r, (size_t)v * 4) && blocks_free(kv) == 0,
	      "%s kv %s: B decodes correctly after the donor ended and every free block was "
	      "reused", path, dn);

	/* errors: arena full (all or nothing), table too short */
	ok = !kve_arena_session_open(kv, 6, 8, &F);
	rc = kve_arena_session_reserve(kv, &F, 8);
	CHECK(ok && rc == -ENOSPC && F.s.n_blocks == 0 && blocks_held(kv, &F) == 0,
	      "%s kv %s: arena full -> ENOSPC, nothing held (%d)", path, dn, rc);
	kve_arena_session_close(kv, &E);
	CHECK(kve_arena_session_reserve(kv, &F, 9) == -ENOSPC && F.s.n_blocks == 0,
	      "%s kv %s: more tokens than the table holds -> ENOSPC", path, dn);
	CHECK(kve_arena_prefill(e, kv, &F, tok, 8, c) == 0 && F.s.n_blocks == 2 &&
	      blocks_held(kv, &F) == 2, "%s kv %s: then 8 tokens fit in 2 blocks", path, dn);
	kve_arena_session_close(kv, &F);
	/* a limit that ends inside a block: 9 tokens are 2 whole blocks and
	 * one partial one, and the table has room for all 3 */
	ok = !kve_arena_session_open(kv, 7, 9, &F);
	rc = kve_arena_session_reserve(kv, &F, 9);
	CHECK(ok && rc == 0 && F.s.n_blocks == 3 && blocks_held(kv, &F) == 3 &&
	      kve_arena_session_reserve(kv, &F, 13) == -ENOSPC,
	      "%s kv %s: a 9-token session (blocks of 4) reserves its 9 tokens in 3 blocks (%d), "
	      "13 tokens -> ENOSPC", path, dn, rc);
	kve_arena_session_close(kv, &F);
	kve_arena_session_close(kv, &B);
	CHECK(blocks_free(kv) == total, "%s kv %s: every block back after the last session ends",
	      path, dn);

	/* a decode batch of 5 arena sessions of different lengths == alone */
	{
		struct kve_arena_session s5[5], *p5[5];
		int32_t seq[5][NTOK];
		float *b5 = calloc((size_t)5 * v, 4), *one = calloc((size_t)NTOK * v, 4);
		int same = 1, step;

		ok = 1;
		for (i = 0; i < 5; i++) {
			for (j = 0; j < 3 + 4 * i; j++)
				seq[i][j] = tok[i + j];
			ok &= !kve_arena_session_open(kv, 10 + i, 32, &s5[i]);
			ok &= !kve_arena_prefill(e, kv, &s5[i], seq[i], 3 + 4 * i, c);
			p5[i] = &s5[i];
		}
		for (step = 0; step < 3 && ok; step++) {
			int32_t nx[5];

			for (i = 0; i < 5; i++)
				nx[i] = seq[i][3 + 4 * i + step] = (int32_t)((i * 17u + step * 5u + 1) % v);
			ok &= !kve_arena_decode(e, kv, p5, nx, 5, b5);
			for (i = 0; i < 5 && ok; i++) {
				ok &= !ref_seq(m, dt, seq[i], 3 + 4 * i + step + 1, 3 + 4 * i + step + 1, one);
				same &= !memcmp(one, b5 + (size_t)i * v, (size_t)v * 4);
			}
		}
		CHECK(ok && same, "%s kv %s: decode batch of 5 arena sessions == each alone (3 steps)",
		      path, dn);
		for (i = 0; i < 5; i++)
			kve_arena_session_close(kv, &s5[i]);
		free(b5);
		free(one);
	}
	kve_engine_free(e);
out:
	free(snap);
	kve_arena_kv_destroy(kv);
	free(a);
	free(r);
	free(c);
}

/* ---- two processes ---------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The decode process: it has only the socket. Receives the pool and two
 * sessions, decodes STEPS greedy steps of both as one batch in place and
 * streams the logits back. Prints only on failure. */
static int decode_worker(int sock, const char *path, uint32_t steps)
{
	struct kve_session sa, sb, *ps[2] = { &sa, &sb };
	struct kve_engine_params ep = { 1, 2, 0, 256 };
	struct kve_arena_kv *kv = NULL;
	struct kve_engine *e;
	struct kve_model *m;
	char err[256];
	int32_t next[2];
	uint32_t v, i;
	float *lg;
	int rc;

	alarm(120);
	m = kve_model_load(path, err, sizeof(err));
	if (!m) {
		printf("FAIL decode worker: %s\n", err);
		return 1;
	}
	v = kve_model_info(m)->vocab;
	rc = kve_arena_recv_pool(sock, m, &kv, err, sizeof(err));
	if (rc) {
		printf("FAIL decode worker: %s\n", err);
		return 1;
	}
	if (kve_arena_recv_session(sock, kv, &sa) || kve_arena_recv_session(sock, kv, &sb)) {
		printf("FAIL decode worker: receiving the block tables\n");
		return 1;
	}
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	lg = malloc((size_t)2 * v * 4);
	if (!e || !lg) {
		printf("FAIL decode worker: engine: %s\n", e ? "oom" : err);
		return 1;
	}
	next[0] = (int32_t)(7 % v);
	next[1] = (int32_t)(11 % v);
	for (i = 0; i < steps; i++) {
		rc = kve_decode(e, ps, next, 2, lg);
		if (rc) {
			printf("FAIL decode worker: decode step %u: %s\n", i, strerror(-rc));
			return 1;
		}
		if (write_all(sock, lg, (size_t)2 * v * 4))
			return 1;
		next[0] = argmax(lg, v);
		next[1] = argmax(lg + v, v);
	}
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	free(sa.block_table);
	free(sb.block_table);
	free(lg);
	kve_model_free(m);
	close(sock);
	return 0;
}

/* Prefill of A (HO_PRE tokens) and of B (A's first 3 blocks shared + 5
 * tokens), with room reserved for `steps` more tokens each. */
static int ho_prefill(struct kve_engine *e, struct kve_arena_kv *kv, const int32_t *tok,
		      uint32_t steps, struct kve_arena_session *A, struct kve_arena_session *B,
		      float *lg)
{
	int rc = kve_arena_session_open(kv, 21, 64, A);

	rc = rc ? rc : kve_arena_session_open(kv, 22, 64, B);
	rc = rc ? rc : kve_arena_prefill(e, kv, A, tok, HO_PRE, lg);
	rc = rc ? rc : kve_arena_session_share(kv, B, A, 3);
	rc = rc ? rc : kve_arena_prefill(e, kv, B, tok + 20, 5, lg);
	rc = rc ? rc : kve_arena_session_reserve(kv, A, steps);
	rc = rc ? rc : kve_arena_session_reserve(kv, B, steps);
	return rc;
}

static void test_handoff(const char *path, const struct kve_model *m)
{
	const uint32_t steps = 6;
	uint32_t v = kve_model_info(m)->vocab, i, nb;
	struct kve_engine_params ep = { 1, 2, 0, 256 };
	struct kve_arena_kv *kv = mk_kv(m, 64, HO_BT, KVE_KV_F16);
	struct kve_arena_session A, B, A2, B2, *pair[2] = { &A2, &B2 };
	float *got = NULL, *want = NULL;
	struct kve_engine *e = NULL;
	int32_t tok[NTOK], next[2];
	int sv[2], ok, status = -1, same_kv = 1;
	size_t bb;
	pid_t pid;
	char err[256], fdarg[16], stepsarg[16];

	if (!kv)
		return;
	bb = kve_kv_block_bytes(m, HO_BT, KVE_KV_F16);
	for (i = 0; i < NTOK; i++)
		tok[i] = (int32_t)((i * 7919u + 13) % v);
	got = calloc((size_t)steps * 2 * v, 4);
	want = calloc((size_t)steps * 2 * v, 4);
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	ok = e && got && want && !ho_prefill(e, kv, tok, steps, &A, &B, got) &&
	     !ho_prefill(e, kv, tok, steps, &A2, &B2, want);
	CHECK(ok, "%s: prefill process: A %u tokens, B 3 shared blocks + 5 tokens, %u-token "
	      "blocks reserved for %u more each", path, HO_PRE, HO_BT, steps);
	if (!ok)
		goto out;

	/* the decode process: a fresh exec of this binary, holding only the
	 * socket (the memfd is close-on-exec, nothing else is inherited) */
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		goto out;
	fcntl(sv[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	snprintf(stepsarg, sizeof(stepsarg), "%u", steps);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "test_arena", "--decode-worker", fdarg, path, stepsarg,
		      (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	ok = pid > 0 && !kve_arena_send_pool(sv[0], kv) && !kve_arena_send_session(sv[0], &A.s) &&
	     !kve_arena_send_session(sv[0], &B.s);
	CHECK(ok, "%s: arena data fd (SCM_RIGHTS) and 2 block tables sent", path);
	ok &= !read_all(sv[0], got, (size_t)steps * 2 * v * 4);
	close(sv[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	CHECK(ok && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "%s: decode process mapped the arena and ran %u batch steps (exit status %d)",
	      path, steps, status);

	/* the single-process run: the same steps over A2/B2 here */
	next[0] = (int32_t)(7 % v);
	next[1] = (int32_t)(11 % v);
	for (i = 0; i < steps && ok; i++) {
		ok &= !kve_arena_decode(e, kv, pair, next, 2, want + (size_t)i * 2 * v);
		next[0] = argmax(want + (size_t)i * 2 * v, v);
		next[1] = argmax(want + (size_t)i * 2 * v + v, v);
	}
	CHECK(ok && !memcmp(got, want, (size_t)steps * 2 * v * 4),
	      "%s: decode process logits == single-process run (2 sessions x %u steps)", path, steps);

	/* the KV the decode process appended is in the arena, here */
	nb = (HO_PRE + steps + HO_BT - 1) / HO_BT;
	for (i = 0; i < nb; i++)
		same_kv &= !memcmp(kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx,
								    A.s.block_table[i]),
				   kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx,
								    A2.s.block_table[i]), bb);
	for (i = 3; i < (12 + 5 + steps + HO_BT - 1) / HO_BT; i++)
		same_kv &= !memcmp(kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx,
								    B.s.block_table[i]),
				   kve_arena_kv_pool(kv)->block_ptr(kve_arena_kv_pool(kv)->ctx,
								    B2.s.block_table[i]), bb);
	CHECK(ok && same_kv, "%s: KV written in place by the decode process == KV of the "
	      "single-process run (%u + %u blocks)", path, nb,
	      (12 + 5 + steps + HO_BT - 1) / HO_BT - 3);
	kve_arena_session_close(kv, &A);
	kve_arena_session_close(kv, &B);
	kve_arena_session_close(kv, &A2);
	kve_arena_session_close(kv, &B2);
out:
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	free(got);
	free(want);
}

static void test_recv_errors(const struct kve_model *m)
{
	struct kve_arena_kv *kv = mk_kv(m, 4, 4, KVE_KV_F32), *view = NULL, *view2 = NULL;
	struct kve_arena_geom g, bad;
	struct kve_session s;
	uint32_t ids[2] = { 0, 0 };
	char err[256] = "";
	int sv[2], rc, fd;

	if (!kv)
		return;
	kve_arena_kv_geom(kv, &g);
	fd = kva_arena_data_fd(kve_arena_kv_arena(kv), KVA_EXPORT_CLOEXEC);
	{	/* each field of the KV shape off by one in turn */
		int f, refused = 0;

		for (f = 0; f < 4; f++) {
			bad = g;
			if (f == 0)
				bad.n_layers++;
			else if (f == 1)
				bad.n_kv_heads++;
			else if (f == 2)
				bad.head_dim++;
			else
				bad.kv_block_bytes++;
			rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
			refused += rc == -EINVAL && strstr(err, "does not match") && !view;
		}
		CHECK(refused == 4, "map: another model's shape refused (layers, kv heads, head "
		      "dim, block bytes: %d of 4) (%s)", refused, err);
	}
	bad = g;
	bad.blocks_total = g.blocks_per_page * (uint32_t)(g.arena_bytes >> 21) + 1;
	rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "inconsistent"), "map: more blocks than the arena refused (%s)", err);
	bad = g;
	bad.arena_bytes *= 2;
	rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "holds"), "map: arena larger than the fd refused (%s)", err);
	rc = kve_arena_kv_map(m, fd, &g, &view, err, sizeof(err));
	CHECK(rc == 0 && kve_arena_session_open(view, 1, 4, &(struct kve_arena_session){ 0 }) == -EOPNOTSUPP,
	      "map: a view maps, and cannot open sessions");
	if (!rc) {	/* nor reserve or share blocks, even for tables that would pass */
		uint32_t t1[1] = { 0 }, t2[1] = { 0 };
		struct kve_arena_session d1 = { .s = { t1, 0, 0 }, .cap = 1 };
		struct kve_arena_session d2 = { .s = { t2, 1, g.block_tokens }, .cap = 1 };

		CHECK(kve_arena_session_reserve(view, &d1, 1) == -EOPNOTSUPP &&
		      kve_arena_session_share(view, &d1, &d2, 1) == -EOPNOTSUPP && !d1.s.n_blocks,
		      "map: a view cannot reserve or share blocks (EOPNOTSUPP)");
	}
	if (!rc) {
		const struct kve_kv_pool *vp = kve_arena_kv_pool(view);
		uint8_t *last = vp->block_ptr(vp->ctx, g.blocks_total - 1);

		CHECK(vp->block_ptr(vp->ctx, g.blocks_total) == NULL && last &&
		      (uint64_t)(last - (uint8_t *)vp->block_ptr(vp->ctx, 0)) ==
		      g.arena_bytes - g.block_size,
		      "map: the view's last block (%u) is the arena's last, %u is outside",
		      g.blocks_total - 1, g.blocks_total);
		CHECK(kve_arena_recv_session(-1, NULL, &s) == -EINVAL &&
		      kve_arena_recv_session(-1, view, NULL) == -EINVAL,
		      "recv: no pool, or no session to fill: -EINVAL before reading");
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
			/* 8 tokens in 2 blocks of 4: only the block id is wrong */
			struct kve_session big = { ids, 2, 8 };
			ids[1] = g.blocks_total;
			kve_arena_send_session(sv[0], &big);
			CHECK(kve_arena_recv_session(sv[1], view, &s) == -EINVAL,
			      "recv: a block id outside the arena (%u) refused", ids[1]);
			ids[1] = g.blocks_total - 1;
			kve_arena_send_session(sv[0], &big);
			rc = kve_arena_recv_session(sv[1], view, &s);
			CHECK(rc == 0 && s.n_blocks == 2 && s.n_tokens == 8 &&
			      s.block_table[1] == g.blocks_total - 1,
			      "recv: the last block id (%u) accepted (%d)", ids[1], rc);
			if (!rc)
				free(s.block_table);
			big.n_tokens = 9;
			ids[1] = 1;
			kve_arena_send_session(sv[0], &big);
			CHECK(kve_arena_recv_session(sv[1], view, &s) == -EINVAL,
			      "recv: more tokens than the blocks hold refused");
			write_all(sv[0], "junkjunkjunkjunkjunkjunk", 24);
			CHECK(kve_arena_recv_session(sv[1], view, &s) == -EPROTO,
			      "recv: garbage refused");
			write_all(sv[0], "junkjunk", 8);	/* then the sender goes */
			close(sv[0]);
			CHECK(kve_arena_recv_session(sv[1], view, &s) == -EPIPE,
			      "recv: a message cut short by a closed socket -> EPIPE");
			CHECK(kve_arena_recv_pool(sv[1], m, &view2, err, sizeof(err)) == -EPIPE && !view2,
			      "recv: closed socket -> EPIPE (%s)", err);
			close(sv[1]);
		}
		/*
		 * A receiver whose stdin is closed gets the pool's fd as 0: the
		 * mapping is made and fd 0 is closed again like any other.
		 */
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
			int saved = dup(0), closed;

			err[0] = 0;

			close(0);
			rc = kve_arena_send_pool(sv[0], kv);
			rc = rc ? rc : kve_arena_recv_pool(sv[1], m, &view2, err, sizeof(err));
			closed = fcntl(0, F_GETFD) < 0 && errno == EBADF;
			if (saved >= 0) {
				dup2(saved, 0);
				close(saved);
			}
			CHECK(rc == 0 && view2 && closed,
			      "recv: a pool received as fd 0 (stdin closed) is mapped and fd 0 closed "
			      "(rc %d %s)", rc, err);
			kve_arena_kv_destroy(view2);
			close(sv[0]);
			close(sv[1]);
		}
		kve_arena_kv_destroy(view);
	}
	close(fd);
	kve_arena_kv_destroy(kv);
}

/*
 * A reservation larger than one kva_blocks_alloc batch (KVA_MAX_BATCH)
 * that fails in its second batch gives back what the first took: with
 * 1050 blocks free, 1100 fails (ENOSPC) and leaves 1050 free; 1050 fits.
 */
static void test_reserve_rollback(const struct kve_model *m)
{
	struct kve_arena_kv *kv = mk_kv(m, 1100, 4, KVE_KV_F32);
	struct kve_arena_session E, F;
	uint32_t total, hold;
	int rc, ok;

	if (!kv)
		return;
	total = blocks_free(kv);
	hold = total - 1050;
	ok = total > 1100 && !kve_arena_session_open(kv, 1, total * 4, &E) &&
	     !kve_arena_session_reserve(kv, &E, hold * 4) &&
	     !kve_arena_session_open(kv, 2, total * 4, &F);
	if (!ok) {
		CHECK(0, "rollback: setup (%u blocks)", total);
		kve_arena_kv_destroy(kv);
		return;
	}
	rc = kve_arena_session_reserve(kv, &F, 1100 * 4);
	CHECK(rc == -ENOSPC && F.s.n_blocks == 0 && blocks_held(kv, &F) == 0 &&
	      blocks_free(kv) == 1050,
	      "reserve 1100 blocks with 1050 free: ENOSPC after the first batch of %u, "
	      "which is given back (%d, %u held, %u free)", KVA_MAX_BATCH, rc,
	      blocks_held(kv, &F), blocks_free(kv));
	rc = kve_arena_session_reserve(kv, &F, 1050 * 4);
	CHECK(rc == 0 && F.s.n_blocks == 1050 && blocks_held(kv, &F) == 1050 &&
	      blocks_free(kv) == 0, "then 1050 blocks fit, in two batches (%d)", rc);
	kve_arena_session_close(kv, &F);
	/* sharing takes whole blocks the donor has written: E "wrote" 8
	 * tokens (2 blocks of 4), so 2 blocks may be shared and 3 not */
	E.s.n_tokens = 8;
	rc = kve_arena_session_open(kv, 3, 64, &F);
	CHECK(!rc && kve_arena_session_share(kv, &F, &E, 3) == -EINVAL && F.s.n_blocks == 0 &&
	      kve_arena_session_share(kv, &F, &E, 2) == 0 && F.s.n_blocks == 2 &&
	      F.s.n_tokens == 8 && blocks_held(kv, &F) == 2,
	      "share: 3 blocks of a donor that wrote 2 refused, 2 shared");
	if (!rc)
		kve_arena_session_close(kv, &F);
	{	/* a session that already holds blocks keeps exactly those when
		 * a reservation past the free blocks fails (only the new ones
		 * are given back) */
		uint32_t before[2], nfree;

		rc = kve_arena_session_open(kv, 4, total * 4, &F);
		rc = rc ? rc : kve_arena_session_reserve(kv, &F, 8);
		if (!rc)
			memcpy(before, F.s.block_table, sizeof(before));
		nfree = blocks_free(kv);
		CHECK(!rc && kve_arena_session_reserve(kv, &F, (2 + nfree + 1) * 4) == -ENOSPC &&
		      F.s.n_blocks == 2 && blocks_held(kv, &F) == 2 &&
		      !memcmp(before, F.s.block_table, sizeof(before)) && blocks_free(kv) == nfree,
		      "reserve past the free blocks for a session holding 2: ENOSPC, it holds the "
		      "same 2, %u free again", nfree);
		kve_arena_session_close(kv, &F);
	}
	kve_arena_session_close(kv, &E);
	kve_arena_kv_destroy(kv);
}

/*
 * A decode batch of 65 sessions, one more than kve_arena_decode keeps on
 * its stack: each row equals the same session decoded alone (sessions i
 * and i + 5 share a prompt, so their rows are equal too); a batch with a
 * missing session refused, nothing reserved for any.
 */
static void test_big_batch(const struct kve_model *m)
{
	enum { N = 65 };
	struct kve_arena_kv *kv = mk_kv(m, 2 * N + 8, 4, KVE_KV_F32);
	struct kve_engine_params ep = { 1, N, 0, 64 };
	struct kve_arena_session *as = calloc(N + 1, sizeof(*as)), *ptr[N + 1];
	uint32_t v = kve_model_info(m)->vocab, i;
	float *lb = malloc(sizeof(float) * v * N), *l1 = malloc(sizeof(float) * v);
	int32_t prompt[2], next[N];
	struct kve_engine *e = NULL;
	char err[256];
	int ok;

	if (!kv || !as || !lb || !l1)
		goto out;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	ok = e != NULL;
	for (i = 0; ok && i <= N; i++) {
		prompt[0] = (int32_t)(1 + i % 5);
		prompt[1] = (int32_t)(7 + i % 5);
		next[i % N] = 3;
		ptr[i] = &as[i];
		ok = !kve_arena_session_open(kv, i + 1, 8, &as[i]) &&
		     !kve_arena_prefill(e, kv, &as[i], prompt, 2, l1);
	}
	ok = ok && !kve_arena_decode(e, kv, ptr, next, N, lb);
	/* the spare session (prompt of i % 5 == 0) alone */
	ok = ok && !kve_arena_decode(e, kv, &ptr[N], next, 1, l1);
	for (i = 0; ok && i < N; i++)
		ok = !memcmp(lb + (size_t)v * i, lb + (size_t)v * (i % 5), sizeof(float) * v);
	ok = ok && !memcmp(lb, l1, sizeof(float) * v);
	CHECK(ok, "decode: a batch of %d arena sessions (past the 64 kept on the stack) equals "
	      "each decoded alone", N);
	ptr[N - 1] = NULL;
	CHECK(e && kve_arena_decode(e, kv, ptr, next, N, lb) == -EINVAL,
	      "decode: a batch of %d with one session missing -> EINVAL", N);
out:
	for (i = 0; as && i <= N; i++)
		kve_arena_session_close(kv, &as[i]);
	kve_engine_free(e);
	free(as);
	free(lb);
	free(l1);
	kve_arena_kv_destroy(kv);
}

/* a fresh socket pair per crafted message: what is left unread of one
 * message must not shift the next */
static int pair(int sv[2])
{
	return socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
}

static void close_pair(int sv[2])
{
	close(sv[0]);
	close(sv[1]);
}

/*
 * The hand-over's argument checks and wire checks, each on its own: the
 * caller's device handle; kve_arena_kv_map's arguments and each
 * geometry field made inconsistent with the others consistent; an fd that
 * is not a file or cannot be mapped; pool and session messages with one
 * header field wrong (the header is 4 u32: magic, type, payload length,
 * reserved; a session's payload starts with n_tokens, n_blocks).
 */
static void test_map_and_wire(const struct kve_model *m)
{
	struct kve_arena_kv *kv = mk_kv(m, 4, 64, KVE_KV_F32), *view = NULL, *k2 = NULL;
	struct kve_arena_kv_params ap = { .n_blocks = 4, .block_tokens = 4, .dtype = KVE_KV_F32,
					  .name = "test-arena-dev" };
	struct kve_arena_geom g, bad;
	struct kve_session s;
	struct kva_dev *dev = NULL;
	uint32_t ids[2] = { 0, 1 };
	char err[256] = "", raw[16 + sizeof(struct kve_arena_geom)];
	int sv[2], fd, rc, ok, pipefd[2];
	unsigned int nfd;

	if (!kv)
		return;
	/* the caller's device: used whatever the backend field says, and not
	 * closed with the arena */
	rc = kva_open(backend, &dev);
	if (!rc) {
		ap.dev = dev;
		ap.backend = backend == KVA_BACKEND_MEMFD ? KVA_BACKEND_KERNEL : KVA_BACKEND_MEMFD;
		ok = kve_arena_kv_create(m, &ap, &k2, err, sizeof(err)) == 0 &&
		     kve_arena_kv_backend(k2) == backend;
		kve_arena_kv_destroy(k2);
		k2 = NULL;
		ok = ok && kve_arena_kv_create(m, &ap, &k2, err, sizeof(err)) == 0;
		kve_arena_kv_destroy(k2);
		kva_close(dev);
		CHECK(ok, "arena: a caller's device handle is used (its backend, not the params') "
		      "and stays open after the arena is destroyed (%s)", err);
	} else {
		CHECK(0, "kva_open for the device-handle check: %d", rc);
	}

	kve_arena_kv_geom(kv, &g);
	fd = kva_arena_data_fd(kve_arena_kv_arena(kv), KVA_EXPORT_CLOEXEC);
	err[0] = 0;
	ok = kve_arena_kv_map(NULL, fd, &g, &view, err, sizeof(err)) == -EINVAL &&
	     strstr(err, "required") && !view;
	err[0] = 0;
	ok &= kve_arena_kv_map(m, fd, NULL, &view, err, sizeof(err)) == -EINVAL &&
	      strstr(err, "required") && !view;
	err[0] = 0;
	ok &= kve_arena_kv_map(m, fd, &g, NULL, err, sizeof(err)) == -EINVAL && strstr(err, "required");
	CHECK(ok, "map: no model, geometry or result -> EINVAL (%s)", err);
	{
		static const char *what[3] = { "block_tokens 0", "block_tokens 4097", "dtype 7" };
		int i;

		for (i = 0; i < 3; i++) {
			bad = g;
			if (i < 2)
				bad.block_tokens = i ? 4097 : 0;
			else
				bad.dtype = 7;
			err[0] = 0;
			rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
			CHECK(rc == -EINVAL && strstr(err, "invalid") && !view,
			      "map: received %s refused (%s)", what[i], err);
		}
	}
	/* 4096 tokens, the limit itself, pass that check; this arena's
	 * blocks are not 4096 tokens, so its KV shape check refuses them */
	bad = g;
	bad.block_tokens = 4096;
	err[0] = 0;
	rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
	CHECK(g.block_tokens != 4096 && rc == -EINVAL && strstr(err, "does not match") && !view,
	      "map: received block_tokens 4096 (the limit) refused only as not this arena's "
	      "shape (%s)", err);
	/* each geometry field wrong, the rest consistent with it: only that
	 * field's check can refuse (a 64-token f32 block is bigger than 4 KiB) */
	{
		static const char *what[7] = {
			"block smaller than its KV", "block not a multiple of 4 KiB",
			"block larger than 2 MiB", "blocks per page off by one",
			"arena of 0 bytes", "arena not whole 2 MiB pages", "arena over 2^46 bytes"
		};
		int i;

		for (i = 0; i < 7; i++) {
			bad = g;
			switch (i) {
			case 0: bad.block_size = (g.kv_block_bytes - 1) & ~4095u; break;
			case 1: bad.block_size = g.block_size + 1; break;
			case 2: bad.block_size = 2 * KVA_PAGE_SIZE; bad.blocks_total = 0; break;
			case 3: bad.blocks_per_page = g.blocks_per_page + 1; break;
			case 4: bad.arena_bytes = 0; bad.blocks_total = 0; break;
			case 5: bad.arena_bytes = g.arena_bytes + 4096; break;
			case 6: bad.arena_bytes = ((uint64_t)1 << 46) + KVA_PAGE_SIZE; break;
			}
			if (i < 2)
				bad.blocks_per_page = KVA_PAGE_SIZE / bad.block_size;
			err[0] = 0;
			rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
			CHECK(g.kv_block_bytes > 4096 && rc == -EINVAL && strstr(err, "inconsistent") &&
			      !view, "map: %s refused (%s)", what[i], err);
		}
	}
	/* the limit itself is consistent: 2^46 bytes pass to the fd's check */
	bad = g;
	bad.arena_bytes = (uint64_t)1 << 46;
	err[0] = 0;
	rc = kve_arena_kv_map(m, fd, &bad, &view, err, sizeof(err));
	CHECK(rc == -EINVAL && strstr(err, "data fd holds") && !view,
	      "map: an arena of exactly 2^46 bytes is a consistent geometry, refused only for "
	      "the fd's size (%s)", err);
	err[0] = 0;
	rc = kve_arena_kv_map(m, -1, &g, &view, err, sizeof(err));
	CHECK(rc == -EBADF && strstr(err, "data fd") && !view, "map: fd -1 -> EBADF (%s)", err);
	if (pipe(pipefd) == 0) {	/* fstat gives size 0, as for a dma-buf; mmap fails */
		err[0] = 0;
		rc = kve_arena_kv_map(m, pipefd[0], &g, &view, err, sizeof(err));
		CHECK(rc < 0 && strstr(err, "kva_map_fd") && !view,
		      "map: a pipe passes the size check and fails to map (%d %s)", rc, err);
		close(pipefd[0]);
		close(pipefd[1]);
	}

	rc = kve_arena_kv_map(m, fd, &g, &view, err, sizeof(err));
	CHECK(rc == 0 && kve_arena_kv_backend(view) == KVA_BACKEND_AUTO &&
	      kve_arena_kv_backend(kv) == backend && kve_arena_send_pool(-1, NULL) == -EINVAL &&
	      kve_arena_send_pool(-1, view) == -EINVAL &&
	      kve_arena_recv_pool(-1, m, NULL, err, sizeof(err)) == -EINVAL,
	      "a view has no device (backend AUTO) and cannot send the pool; no pool or no "
	      "result -> EINVAL");
	if (!rc) {	/* a read error is returned, not taken for data */
		struct kve_session got = { 0 };

		CHECK(kve_arena_recv_session(-1, view, &got) == -EBADF && !got.block_table,
		      "recv: a session from fd -1 -> EBADF");
	}

	/* pool messages: one header field wrong, or no fd */
	{
		static const char *what[4] = { "magic", "type", "length", "no fd" };
		int i;

		for (i = 0; i < 4 && !rc; i++) {
			uint32_t *h = (uint32_t *)raw;
			int rfd = -1;

			if (pair(sv))
				break;
			nfd = 1;
			ok = !kve_arena_send_pool(sv[0], kv) &&
			     !kva_recv_fds(sv[1], raw, sizeof(raw), &rfd, &nfd) && nfd == 1;
			if (i < 3) {
				h[i]++;
				ok = ok && !kva_send_fds(sv[0], raw, sizeof(raw), &rfd, 1);
			} else {
				ok = ok && write_all(sv[0], raw, sizeof(raw)) == 0;
			}
			if (rfd >= 0)
				close(rfd);
			err[0] = 0;
			rc = kve_arena_recv_pool(sv[1], m, &k2, err, sizeof(err));
			CHECK(ok && rc == (i < 3 ? -EPROTO : -EBADMSG) && !k2 &&
			      strstr(err, "receiving the pool"),
			      "recv: a pool message with a wrong %s refused (%d %s)", what[i], rc, err);
			rc = 0;
			close_pair(sv);
		}
	}
	/* session messages */
	s = (struct kve_session){ ids, 2, 5 };
	ok = kve_arena_send_session(-1, NULL) == -EINVAL &&
	     kve_arena_send_session(-1, &(struct kve_session){ NULL, 1, 1 }) == -EINVAL &&
	     kve_arena_send_session(-1, &(struct kve_session){ ids, (1u << 22) + 1, 1 }) == -EINVAL;
	CHECK(ok, "send: no session, blocks without a table, more than 2^22 blocks -> EINVAL");
	{
		static const char *what[4] = { "magic", "type", "block count over 2^22",
					       "length" };
		int i;

		for (i = 0; i < 4 && view; i++) {
			uint32_t msg[8];
			struct kve_session got;

			if (pair(sv))
				break;
			ok = !kve_arena_send_session(sv[0], &s) && !read_all(sv[1], msg, sizeof(msg));
			if (i < 2) {
				msg[i]++;
			} else if (i == 2) {	/* consistent length, too many blocks */
				msg[5] = (1u << 22) + 1;
				msg[2] = 8 + msg[5] * 4;
			} else {
				msg[2] += 4;
			}
			ok = ok && !write_all(sv[0], msg, sizeof(msg));
			rc = kve_arena_recv_session(sv[1], view, &got);
			CHECK(ok && rc == -EPROTO && !got.block_table && !got.n_blocks,
			      "recv: a session message with a wrong %s refused (%d)", what[i], rc);
			close_pair(sv);
		}
	}
	if (!pair(sv)) {
		close(sv[1]);
		rc = kve_arena_send_session(sv[0], &s);
		CHECK(rc == -EPIPE, "send: to a closed peer -> EPIPE, no signal (%d)", rc);
		close(sv[0]);
	}
	kve_arena_kv_destroy(view);
	close(fd);
	kve_arena_kv_destroy(kv);
}

/* The adapter's argument checks: each refusal with its errno (and the
 * creation's with a message), the edges on the other side accepted. */
static void test_api_errors(const struct kve_model *m)
{
	struct kve_arena_kv_params ap = { .backend = backend, .n_blocks = 8, .block_tokens = 4,
					  .dtype = KVE_KV_F32, .name = "test-arena-args" };
	struct kve_arena_kv_params bad;
	struct kve_arena_kv *kv = NULL, *k2 = NULL;
	struct kve_arena_session A, B, C, none = { 0 }, *one[1] = { NULL };
	char err[256];
	uint32_t free0;
	int ok = 1;

	ok &= kve_arena_kv_create(NULL, &ap, &kv, err, sizeof(err)) == -EINVAL && err[0];
	err[0] = 0;
	ok &= kve_arena_kv_create(m, NULL, &kv, err, sizeof(err)) == -EINVAL && err[0];
	ok &= kve_arena_kv_create(m, &ap, NULL, err, sizeof(err)) == -EINVAL;
	bad = ap;
	bad.block_tokens = 4097;
	ok &= kve_arena_kv_create(m, &bad, &k2, err, sizeof(err)) == -EINVAL && !k2 &&
	      strstr(err, "block_tokens 4097");
	bad = ap;
	bad.dtype = (enum kve_kv_dtype)7;
	ok &= kve_arena_kv_create(m, &bad, &k2, err, sizeof(err)) == -EINVAL && !k2;
	bad = ap;
	bad.n_blocks = 0;
	ok &= kve_arena_kv_create(m, &bad, &k2, err, sizeof(err)) == -EINVAL && !k2 &&
	      strstr(err, "n_blocks 0");
	bad = ap;
	bad.dtype = KVE_KV_F16;
	ok &= kve_arena_kv_create(m, &bad, &k2, err, sizeof(err)) == 0 && k2;
	kve_arena_kv_destroy(k2);
	CHECK(ok, "arena: create refuses no model, params or result, block_tokens 4097, an unknown "
	      "dtype, 0 blocks (-EINVAL, a message); f16 is fine (%s)", err);
	{	/* one token's KV at most a block (2 MiB): a model with as many
		 * layers as fit is taken, one block per token; one more refused */
		struct kve_model big = *m;
		uint32_t unit = 2 * 4 * big.info.n_kv_heads * big.info.head_dim;
		uint32_t fit = unit ? (uint32_t)(KVA_PAGE_SIZE / unit) : 0;
		struct kve_arena_geom g = { 0 };

		bad = ap;
		bad.n_blocks = 2;
		big.info.n_layers = fit;
		ok = fit && kve_arena_kv_create(&big, &bad, &k2, err, sizeof(err)) == 0 && k2;
		if (k2)
			kve_arena_kv_geom(k2, &g);
		ok = ok && g.block_tokens == 1;
		kve_arena_kv_destroy(k2);
		k2 = NULL;
		big.info.n_layers = fit + 1;
		ok = ok && kve_arena_kv_create(&big, &bad, &k2, err, sizeof(err)) == -EINVAL && !k2 &&
		     strstr(err, "more than the 2 MiB");
		CHECK(ok, "arena: %u layers (a token's KV within 2 MiB) take one token a block, %u "
		      "are refused (%s)", fit, fit + 1, err);
	}
	if (kve_arena_kv_create(m, &ap, &kv, err, sizeof(err))) {
		CHECK(0, "arena for the argument checks: %s", err);
		return;
	}
	free0 = blocks_free(kv);
	ok = kve_arena_session_open(NULL, 1, 8, &A) == -EINVAL &&
	     kve_arena_session_open(kv, 1, 8, NULL) == -EINVAL &&
	     kve_arena_session_open(kv, 1, 0, &A) == -EINVAL &&
	     kve_arena_session_open(kv, 1, 1, &C) == 0 && C.cap == 1 &&
	     kve_arena_session_open(kv, 2, 8, &A) == 0 && kve_arena_session_open(kv, 3, 8, &B) == 0;
	ok &= kve_arena_session_reserve(NULL, &A, 1) == -EINVAL &&
	      kve_arena_session_reserve(kv, NULL, 1) == -EINVAL &&
	      kve_arena_session_reserve(kv, &none, 1) == -EINVAL;
	ok &= kve_arena_session_reserve(kv, &A, 8) == 0 && A.s.n_blocks == 2;
	A.s.n_tokens = 8;	/* as if prefilled: two whole blocks */
	ok &= kve_arena_session_share(NULL, &B, &A, 1) == -EINVAL &&
	      kve_arena_session_share(kv, NULL, &A, 1) == -EINVAL &&
	      kve_arena_session_share(kv, &B, NULL, 1) == -EINVAL &&
	      kve_arena_session_share(kv, &none, &A, 1) == -EINVAL &&
	      kve_arena_session_share(kv, &B, &none, 1) == -EINVAL &&
	      kve_arena_session_share(kv, &A, &A, 1) == -EBUSY &&
	      kve_arena_session_share(kv, &C, &C, 0) == -EBUSY &&	/* empty, itself */
	      kve_arena_session_share(kv, &C, &A, 2) == -ENOSPC && C.s.n_blocks == 0 &&
	      kve_arena_session_share(kv, &C, &A, 1) == 0 && C.s.n_blocks == 1 &&
	      kve_arena_session_share(kv, &B, &A, 2) == 0 && B.s.n_blocks == 2;
	ok &= kve_arena_prefill(NULL, kv, NULL, NULL, 1, NULL) == -EINVAL &&
	      kve_arena_decode(NULL, kv, NULL, NULL, 1, NULL) == -EINVAL &&
	      kve_arena_decode(NULL, kv, one, NULL, 0, NULL) == -EINVAL &&
	      kve_arena_decode(NULL, kv, one, NULL, 1, NULL) == -EINVAL;
	ok &= kve_arena_session_close(NULL, &A) == -EINVAL && kve_arena_session_close(kv, NULL) == -EINVAL &&
	      kve_arena_session_close(kv, &none) == 0;
	ok &= kve_arena_session_close(kv, &C) == 0 && kve_arena_session_close(kv, &B) == 0 &&
	      kve_arena_session_close(kv, &A) == 0 && kve_arena_session_close(kv, &A) == 0 &&
	      blocks_free(kv) == free0;
	CHECK(ok, "arena: sessions refuse missing arguments (-EINVAL), sharing into the donor "
	      "itself (-EBUSY) or past the table (-ENOSPC), close twice is fine, all blocks back");
	kve_arena_kv_destroy(kv);
}

int main(int argc, char **argv)
{
	const char *be = getenv("KVE_TEST_BACKEND");
	int i;

	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && !strcmp(argv[1], "--decode-worker"))
		return decode_worker(atoi(argv[2]), argv[3], (uint32_t)atoi(argv[4]));
	unsetenv("KVE_TEST_KV");	/* references run on malloc'd blocks */
	alarm(300);
	if (be && !strcmp(be, "kernel")) {
		backend = KVA_BACKEND_KERNEL;
	} else if (be && strcmp(be, "memfd")) {
		fprintf(stderr, "test_arena: KVE_TEST_BACKEND=%s: kernel or memfd\n", be);
		return 2;
	}
	printf("# kernels: %s, KV blocks: libkvarena arena (%s backend)\n", kve_isa_name(),
	       backend == KVA_BACKEND_KERNEL ? "kernel module" : "memfd");
	for (i = 1; i < argc; i++) {
		char err[256];
		struct kve_model *m = kve_model_load(argv[i], err, sizeof(err));

		CHECK(m != NULL, "load %s %s", argv[i], m ? "" : err);
		if (!m)
			continue;
		test_geometry(argv[i], m);
		test_sessions(argv[i], m, KVE_KV_F32);
		test_sessions(argv[i], m, KVE_KV_F16);
		if (kve_kv_block_bytes(m, 1, KVE_KV_Q8_0))	/* head_dim a multiple of 32 */
			test_sessions(argv[i], m, KVE_KV_Q8_0);
		test_handoff(argv[i], m);
		if (i == 1) {
			test_recv_errors(m);
			test_reserve_rollback(m);
			test_api_errors(m);
			test_map_and_wire(m);
			test_big_batch(m);
		}
		kve_model_free(m);
	}
	return tc_done();
}
