// SPDX-License-Identifier: MIT
/*
 * test_radix.c - the radix index over token ids (daemon/kvarenad/radix.c)
 * against a brute-force model under random operations (ASan/UBSan):
 * inserts under random parents of several tenants (tokens from a small
 * alphabet, so prefixes are shared and differ late), lookups of prompts
 * made from stored prefixes with late changes, blocks taken and released,
 * and eviction. After every operation the model and the index agree on
 * the longest cached prefix (block by block), on which nodes exist and
 * which block each names, on the evictable leaves and on the order
 * eviction takes them (released leaves oldest first, a parent whose last
 * child went right after it). Also: a key collision (two nodes under one
 * 64-bit key) never returns the other prompt's block, tenants never see
 * each other's blocks, and matching is one probe per block (a 2000-block
 * prompt walks in linear time).
 *
 * usage: test_radix [SEED [OPS]]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static int pass, failed;

#define CHECK(cond, ...) do { \
	if (cond) { pass++; } \
	else { failed++; printf("FAIL %s:%d ", __FILE__, __LINE__); printf(__VA_ARGS__); \
	       printf("\n"); } } while (0)
#define OK(...) do { printf("ok   "); printf(__VA_ARGS__); printf("\n"); } while (0)

#define BT 4
#define NBLOCKS 512
#define MAXDEPTH 12
#define NTEN 3

/* the model: one entry per node, its whole prefix spelled out */
struct ment {
	int used;
	uint32_t tenant, depth, block;
	int parent;			/* entry index, -1: the tenant's root */
	int32_t prefix[MAXDEPTH * BT];
	int busy;
	int nchild;
	struct kvd_rnode *node;
};

static struct ment ents[NBLOCKS];
static int lru[NBLOCKS], n_lru;	/* the model's evictable leaves, head first */
static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

static int evictable(int e)
{
	return ents[e].used && !ents[e].busy && !ents[e].nchild;
}

static void lru_del(int e)
{
	int i;

	for (i = 0; i < n_lru; i++)
		if (lru[i] == e) {
			memmove(lru + i, lru + i + 1, (size_t)(n_lru - i - 1) * sizeof(*lru));
			n_lru--;
			return;
		}
}

static int on_lru(int e)
{
	int i;

	for (i = 0; i < n_lru; i++)
		if (lru[i] == e)
			return 1;
	return 0;
}

static void lru_add(int e, int head)
{
	if (!evictable(e) || on_lru(e))
		return;
	if (head) {
		memmove(lru + 1, lru, (size_t)n_lru * sizeof(*lru));
		lru[0] = e;
	} else {
		lru[n_lru] = e;
	}
	n_lru++;
}

/* The model's longest match of tokens (n_blocks full blocks). */
static uint32_t model_match(uint32_t tenant, const int32_t *tok, uint32_t n_blocks, int *path)
{
	uint32_t k;
	int parent = -1;

	for (k = 0; k < n_blocks; k++) {
		int i, found = -1;

		for (i = 0; i < NBLOCKS && found < 0; i++)
			if (ents[i].used && ents[i].tenant == tenant && ents[i].parent == parent &&
			    ents[i].depth == k &&
			    !memcmp(ents[i].prefix, tok, (size_t)(k + 1) * BT * sizeof(*tok)))
				found = i;
		if (found < 0)
			break;
		path[k] = found;
		parent = found;
	}
	return k;
}

static int free_block(void)
{
	int i, start = (int)rnd(NBLOCKS);

	for (i = 0; i < NBLOCKS; i++)
		if (!ents[(start + i) % NBLOCKS].used)
			return (start + i) % NBLOCKS;
	return -1;
}

static void random_block(int32_t *t)
{
	int i;

	for (i = 0; i < BT; i++)
		t[i] = (int32_t)rnd(3);		/* few symbols: many shared prefixes */
}

static void op_insert(struct kvd_radix *r)
{
	uint32_t tenant = rnd(NTEN);
	int parent = -1, b, i, busy = (int)rnd(2);
	int32_t tok[BT];
	struct kvd_rnode *pn = NULL, *n;
	uint32_t depth = 0;

	/* a random existing node of this tenant, or its root */
	if (rnd(4)) {
		int start = (int)rnd(NBLOCKS);

		for (i = 0; i < NBLOCKS; i++) {
			int e = (start + i) % NBLOCKS;

			if (ents[e].used && ents[e].tenant == tenant && ents[e].depth + 1 < MAXDEPTH) {
				parent = e;
				break;
			}
		}
	}
	if (parent >= 0) {
		pn = ents[parent].node;
		depth = ents[parent].depth + 1;
	}
	random_block(tok);
	/* an equal child exists: the index must find it, not add one */
	for (i = 0; i < NBLOCKS; i++)
		if (ents[i].used && ents[i].tenant == tenant && ents[i].parent == parent &&
		    !memcmp(ents[i].prefix + depth * BT, tok, sizeof(tok))) {
			CHECK(kvd_radix_child(r, tenant, pn, tok) == ents[i].node,
			      "an existing child is found by its tokens");
			return;
		}
	CHECK(!kvd_radix_child(r, tenant, pn, tok), "no child before insert");
	b = free_block();
	if (b < 0)
		return;
	n = kvd_radix_insert(r, tenant, pn, tok, (uint32_t)b, busy);
	CHECK(n != NULL, "insert");
	if (!n)
		return;
	ents[b].used = 1;
	ents[b].tenant = tenant;
	ents[b].depth = depth;
	ents[b].block = (uint32_t)b;
	ents[b].parent = parent;
	ents[b].busy = busy;
	ents[b].nchild = 0;
	ents[b].node = n;
	if (parent >= 0)
		ents[parent].nchild++;
	if (parent >= 0)
		memcpy(ents[b].prefix, ents[parent].prefix, (size_t)depth * BT * sizeof(int32_t));
	memcpy(ents[b].prefix + depth * BT, tok, sizeof(tok));
	if (parent >= 0)
		lru_del(parent);
	lru_add(b, 0);
}

static void op_match(struct kvd_radix *r)
{
	int32_t tok[(MAXDEPTH + 2) * BT];
	struct kvd_rnode *path[MAXDEPTH + 2];
	int mpath[MAXDEPTH + 2];
	uint32_t tenant = rnd(NTEN), nb = 1 + rnd(MAXDEPTH + 1), i, k, km;
	int src = -1, start = (int)rnd(NBLOCKS);

	for (i = 0; i < NBLOCKS; i++)
		if (ents[(start + i) % NBLOCKS].used) {
			src = (start + (int)i) % NBLOCKS;
			break;
		}
	for (i = 0; i < nb; i++)
		random_block(tok + i * BT);
	if (src >= 0 && rnd(4)) {
		/* a stored prefix (maybe another tenant's), cut or changed late */
		uint32_t have = ents[src].depth + 1;

		memcpy(tok, ents[src].prefix, (size_t)(have < nb ? have : nb) * BT * sizeof(int32_t));
		if (rnd(2))
			tok[rnd(nb * BT)] ^= 1;
	}
	k = kvd_radix_match(r, tenant, tok, nb, path);
	km = model_match(tenant, tok, nb, mpath);
	CHECK(k == km, "match: %u blocks, the model %u", k, km);
	for (i = 0; i < k && i < km; i++)
		CHECK(path[i] == ents[mpath[i]].node && path[i]->block == ents[mpath[i]].block &&
		      path[i]->tenant == tenant, "match: block %u is the model's", i);
}

/* Sequences looked up again and again, as queued turns are, through
 * their last match (kvd_radix_match_from) while the index changes under
 * them: the same blocks as the model's match every time. */
#define NSEQ 8
static struct {
	int32_t tok[(MAXDEPTH + 2) * BT];
	struct kvd_rmatch m;
	uint32_t tenant;
	int used;
} seqs[NSEQ];

static void op_memo(struct kvd_radix *r)
{
	struct kvd_rnode *path[MAXDEPTH + 2];
	int mpath[MAXDEPTH + 2];
	uint32_t s = rnd(NSEQ), nb = 1 + rnd(MAXDEPTH + 1), i, k, km;

	if (!seqs[s].used || !rnd(8)) {
		/* new tokens (a stored prefix, maybe changed late): a new
		 * match, as kvd_conv_truncate starts one */
		int src = (int)rnd(NBLOCKS);

		for (i = 0; i < MAXDEPTH + 2; i++)
			random_block(seqs[s].tok + i * BT);
		if (ents[src].used && rnd(4)) {
			memcpy(seqs[s].tok, ents[src].prefix,
			       (size_t)(ents[src].depth + 1) * BT * sizeof(int32_t));
			if (rnd(2))
				seqs[s].tok[rnd((ents[src].depth + 1) * BT)] ^= 1;
		}
		memset(&seqs[s].m, 0, sizeof(seqs[s].m));
		seqs[s].tenant = rnd(NTEN);
		seqs[s].used = 1;
	}
	memset(path, 0, sizeof(path));
	k = kvd_radix_match_from(r, &seqs[s].m, seqs[s].tenant, seqs[s].tok, nb, path);
	km = model_match(seqs[s].tenant, seqs[s].tok, nb, mpath);
	CHECK(k == km, "match from the last: %u blocks, the model %u", k, km);
	CHECK(k ? seqs[s].m.last == path[k - 1] : !seqs[s].m.last,
	      "the match kept is its deepest node");
	for (i = 0; i < k && i < km; i++)
		CHECK(path[i] == ents[mpath[i]].node && path[i]->tenant == seqs[s].tenant,
		      "match from the last: block %u is the model's", i);
}

static void op_busy(struct kvd_radix *r)
{
	int e = (int)rnd(NBLOCKS);

	if (!ents[e].used)
		return;
	ents[e].busy = !ents[e].busy;
	kvd_radix_set_busy(r, ents[e].node, ents[e].busy);
	if (ents[e].busy)
		lru_del(e);
	else
		lru_add(e, 0);
}

static void op_evict(struct kvd_radix *r)
{
	struct kvd_rnode *v = kvd_radix_victim(r);
	int e, p;

	CHECK((v == NULL) == (n_lru == 0), "a victim exactly when the model has one");
	if (!v || !n_lru)
		return;
	e = lru[0];
	CHECK(v == ents[e].node, "eviction order: block %u, the model's %u", v->block,
	      ents[e].block);
	e = (int)v->block;
	CHECK(evictable(e), "the victim is an unheld leaf");
	p = ents[e].parent;
	kvd_radix_remove(r, v);
	ents[e].used = 0;
	lru_del(e);
	if (p >= 0) {
		ents[p].nchild--;
		lru_add(p, 1);
	}
}

static void check_all(struct kvd_radix *r)
{
	uint32_t i, n = 0, ev = 0;

	for (i = 0; i < NBLOCKS; i++) {
		n += ents[i].used;
		ev += ents[i].used && evictable((int)i);
		if (ents[i].used != (kvd_radix_by_block(r, i) != NULL) ||
		    (ents[i].used && kvd_radix_by_block(r, i) != ents[i].node)) {
			CHECK(0, "block %u: index and model disagree", i);
			return;
		}
	}
	CHECK(r->n == n && r->n_evictable == ev && ev == (uint32_t)n_lru,
	      "counts: %u nodes (model %u), %u evictable (model %u, list %d)", r->n, n,
	      r->n_evictable, ev, n_lru);
}

/* An index of no block size or no blocks is refused, and holds nothing. */
static void bad_init(void)
{
	struct kvd_radix r;

	CHECK(kvd_radix_init(&r, 0, 16, 1) == -EINVAL && !r.by_block,
	      "an index of 0-token blocks is refused");
	CHECK(kvd_radix_init(&r, BT, 0, 1) == -EINVAL && !r.by_block,
	      "an index of 0 blocks is refused");
	OK("an index of no block size or no blocks is refused");
}

static void collision(void)
{
	struct kvd_radix r;
	int32_t a[BT] = { 1, 2, 3, 4 }, b[BT] = { 1, 2, 3, 5 };
	struct kvd_rnode *na, *nb;
	uint64_t ka;

	if (kvd_radix_init(&r, BT, 16, 42))
		return;
	na = kvd_radix_insert(&r, 0, NULL, a, 1, 0);
	nb = kvd_radix_insert(&r, 0, NULL, b, 2, 0);
	/* force b under a's key, ahead of a in its chain: a 64-bit collision */
	ka = kvd_radix_key(&r, 0, NULL, a);
	kvd_hmap_del(&r.map, &nb->h);
	kvd_hmap_add(&r.map, &nb->h, ka);
	CHECK(kvd_radix_child(&r, 0, NULL, a) == na,
	      "a key collision: the lookup compares tokens and finds a's own block");
	CHECK(kvd_radix_child(&r, 1, NULL, a) == NULL, "another tenant's equal prompt: no block");
	if (!failed)
		OK("a 64-bit key collision never serves another prompt's block; tenants apart");
	kvd_radix_fini(&r);
}

/* kvd_radix_insert refuses a block id past the arena's and one the index
 * holds already, and leaves the index as it was. */
static void insert_refused(void)
{
	struct kvd_radix r;
	int32_t a[BT] = { 1, 2, 3, 4 }, b[BT] = { 5, 6, 7, 8 };

	if (kvd_radix_init(&r, BT, 16, 42))
		return;
	CHECK(kvd_radix_insert(&r, 0, NULL, a, 3, 0) != NULL, "block 3 indexed");
	CHECK(kvd_radix_insert(&r, 0, NULL, b, 16, 0) == NULL &&
	      kvd_radix_insert(&r, 0, NULL, b, UINT32_MAX, 0) == NULL,
	      "block ids 16 and 2^32-1 of an arena of 16: refused");
	CHECK(kvd_radix_insert(&r, 0, NULL, b, 3, 0) == NULL && r.n == 1 &&
	      kvd_radix_child(&r, 0, NULL, b) == NULL,
	      "block 3 again, under other tokens: refused, the index as it was");
	if (!failed)
		OK("block ids past the arena or already indexed are refused");
	kvd_radix_fini(&r);
}

static void long_prompt(void)
{
	struct kvd_radix r;
	uint32_t nb = 2000, i, k, k2 = 0;
	int32_t *tok = malloc((size_t)nb * BT * sizeof(*tok));
	struct kvd_rnode *p = NULL;
	struct kvd_rmatch m;
	struct timespec t0, t1;
	double ms, ms2;

	if (!tok || kvd_radix_init(&r, BT, nb + 1, 7)) {
		free(tok);
		return;
	}
	for (i = 0; i < nb * BT; i++)
		tok[i] = (int32_t)(i * 2654435761u % 50000);
	for (i = 0; i < nb; i++)
		p = kvd_radix_insert(&r, 0, p, tok + (size_t)i * BT, i, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < 100; i++)
		k = kvd_radix_match(&r, 0, tok, nb, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK(k == nb && ms < 2000, "a %u-block prompt matches whole (%u) in %.2f ms", nb, k,
	      ms / 100);
	OK("a 2000-block (8000-token) prompt matches whole, %.3f ms per lookup (no cap)",
	   ms / 100);
	/* looked up again from its last match: one probe past its end */
	memset(&m, 0, sizeof(m));
	k = kvd_radix_match_from(&r, &m, 0, tok, nb, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < 100; i++)
		k2 = kvd_radix_match_from(&r, &m, 0, tok, nb, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms2 = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK(k == nb && k2 == nb && m.last && m.last->depth == nb - 1,
	      "from its last match: %u and %u blocks of %u", k, k2, nb);
	OK("looked up again from its last match: %.2f us per lookup", ms2 * 10);
	kvd_radix_fini(&r);
	free(tok);
}

int main(int argc, char **argv)
{
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 0x5eed;
	uint32_t ops = argc > 2 ? (uint32_t)atoi(argv[2]) : 20000, i;
	struct kvd_radix r;
	uint32_t count[4] = { 0 };

	rng_state = seed | 1;
	printf("seed %#llx, %u operations\n", (unsigned long long)seed, ops);
	if (kvd_radix_init(&r, BT, NBLOCKS, seed)) {
		printf("FAIL init\n");
		return 1;
	}
	for (i = 0; i < ops; i++) {
		uint32_t op = rnd(10);

		if (op < 4) {
			op_insert(&r);
			count[0]++;
		} else if (op < 7) {
			if (op == 6)
				op_memo(&r);
			else
				op_match(&r);
			count[1]++;
		} else if (op < 9) {
			op_busy(&r);
			count[2]++;
		} else {
			op_evict(&r);
			count[3]++;
		}
		check_all(&r);
		if (failed > 10)
			break;
	}
	/* drain: every unheld node goes, leaves first */
	for (i = 0; i < NBLOCKS; i++)
		if (ents[i].used && ents[i].busy) {
			ents[i].busy = 0;
			kvd_radix_set_busy(&r, ents[i].node, 0);
			lru_add((int)i, 0);
		}
	while (kvd_radix_victim(&r))
		op_evict(&r);
	CHECK(r.n == 0 && n_lru == 0, "with nothing held, eviction empties the index (%u left)",
	      r.n);
	if (!failed)
		OK("radix index == brute-force model over %u random operations (seed %#llx: "
		   "%u inserts, %u lookups, %u take/release, %u evictions), then drained", ops,
		   (unsigned long long)seed, count[0], count[1], count[2], count[3]);
	kvd_radix_fini(&r);
	bad_init();
	collision();
	insert_refused();
	long_prompt();
	printf("%d checks passed, %d failed\n", pass, failed);
	return failed ? 1 : 0;
}
