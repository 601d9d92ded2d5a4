// SPDX-License-Identifier: MIT
/*
 * constrain.c - constrained decoding over a tokenizer's vocabulary: the
 * token trie (struct kvc_vocab), the per-state token sets computed once
 * when a grammar is compiled, the content-addressed grammar cache, and the
 * per-request matcher (mask, advance, the lazy start-tag trigger).
 *
 * A token set of a state is found by walking the vocabulary trie, stored
 * in preorder, from that state: a subtree is skipped at the first byte the
 * automaton refuses. Inside a called sub-automaton (free-form JSON, a tool
 * call) a token may run past the callee's end; where it continues then
 * depends on the caller's stack, so such tokens are kept apart ("maybe")
 * and checked against the real stack at each step: a few per state.
 */
#define _GNU_SOURCE
#include "constrain_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TOKEN_BYTES 1024	/* longer tokens are never allowed */
#define CACHE_ENTRIES 32

/* ---- vocabulary ----------------------------------------------------- */

struct cache_ent {
	char *key;
	struct kvc_grammar *g;
	uint64_t used;
};

/* A trie node: the end of its subtree (index of the next node that is
 * not below it), the tokens ending here (tok[tfirst .. tfirst + tn)),
 * its depth (1: a first byte) and its byte. */
struct tnode {
	uint32_t skip, tfirst;
	uint16_t tn, depth;
	uint8_t byte;
};

struct kvc_vocab {
	uint32_t n_vocab, words;
	int32_t eos;
	uint32_t *off;		/* token i: bytes[off[i] .. off[i+1]) */
	uint8_t *bytes;
	/* trie in preorder, one 16-byte record per node (the walk reads them
	 * in order) */
	uint32_t n_nodes, max_len;
	struct tnode *node;
	int32_t *tok;
	pthread_mutex_t lock;	/* the cache and grammar reference counts */
	struct cache_ent cache[CACHE_ENTRIES];
	uint64_t tick;
};

static int by_bytes(const void *a, const void *b, void *ctx)
{
	const struct kvc_vocab *v = ctx;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
	int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);

	if (c)
		return c;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return (x > y) - (x < y);
}

void kvc_vocab_free(struct kvc_vocab *v)
{
	uint32_t i;

	if (!v)
		return;
	for (i = 0; i < CACHE_ENTRIES; i++) {
		if (!v->cache[i].g)
			continue;
		free(v->cache[i].key);
		kvc_grammar_release(v->cache[i].g);
	}
	pthread_mutex_destroy(&v->lock);
	free(v->off);
	free(v->bytes);
	free(v->node);
	free(v->tok);
	free(v);
}

static int build_trie(struct kvc_vocab *v)
{
	uint32_t n = 0, i, cap = 0, nt = 0;
	uint32_t path[MAX_TOKEN_BYTES];
	int32_t prev = -1;

	v->tok = malloc(v->n_vocab * sizeof(int32_t));
	if (!v->tok)
		return -ENOMEM;
	for (i = 0; i < v->n_vocab; i++)
		if (v->off[i + 1] > v->off[i] && (int32_t)i != v->eos)
			v->tok[nt++] = (int32_t)i;
	qsort_r(v->tok, nt, sizeof(int32_t), by_bytes, v);
	/* nodes <= total bytes */
	cap = v->off[v->n_vocab] + 1;
	v->node = calloc(cap, sizeof(*v->node));
	if (!v->node)
		return -ENOMEM;
	for (i = 0; i < nt; i++) {
		int32_t id = v->tok[i];
		const uint8_t *p = v->bytes + v->off[id];
		uint32_t len = v->off[id + 1] - v->off[id], lcp = 0, d;

		if (prev >= 0) {
			const uint8_t *q = v->bytes + v->off[prev];
			uint32_t lq = v->off[prev + 1] - v->off[prev];
			while (lcp < len && lcp < lq && p[lcp] == q[lcp])
				lcp++;
			/* close the previous path's nodes below the common prefix */
			for (d = lcp; d < lq; d++)
				v->node[path[d]].skip = n;
		}
		for (d = lcp; d < len; d++) {
			v->node[n].byte = p[d];
			v->node[n].depth = (uint16_t)(d + 1);
			v->node[n].tn = 0;
			path[d] = n++;
		}
		if (!v->node[path[len - 1]].tn)
			v->node[path[len - 1]].tfirst = i;
		v->node[path[len - 1]].tn++;
		if (len > v->max_len)
			v->max_len = len;
		prev = id;
	}
	if (prev >= 0) {
		uint32_t d, lq = v->off[prev + 1] - v->off[prev];
		for (d = 0; d < lq; d++)
			v->node[path[d]].skip = n;
	}
	v->n_nodes = n;
	return 0;
}

struct kvc_vocab *kvc_vocab_create(const struct kve_tokenizer *t,
				   uint32_t n_vocab, char *err, size_t errlen)
{
	struct kvc_vocab *v;
	uint32_t i, total = 0;
	char buf[MAX_TOKEN_BYTES];

	if (!t || !n_vocab || n_vocab > (1u << 24)) {
		snprintf(err, errlen, "constrain: no tokenizer or a bad vocabulary size");
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v)
		goto oom;
	pthread_mutex_init(&v->lock, NULL);
	v->n_vocab = n_vocab;
	v->words = (n_vocab + 31) / 32;
	v->eos = kve_tokenizer_eos(t);
	if (v->eos >= (int32_t)n_vocab)
		v->eos = -1;
	v->off = malloc((n_vocab + 1) * sizeof(uint32_t));
	if (!v->off)
		goto oom;
	for (i = 0; i < n_vocab; i++) {
		int k = kve_token_bytes(t, (int32_t)i, NULL, 0);
		v->off[i] = total;
		if (k > 0 && k <= MAX_TOKEN_BYTES)
			total += (uint32_t)k;
	}
	v->off[n_vocab] = total;
	v->bytes = malloc(total ? total : 1);
	if (!v->bytes)
		goto oom;
	for (i = 0; i < n_vocab; i++)
		if (v->off[i + 1] > v->off[i]) {
			kve_token_bytes(t, (int32_t)i, buf, sizeof(buf));
			memcpy(v->bytes + v->off[i], buf, v->off[i + 1] - v->off[i]);
		}
	if (build_trie(v))
		goto oom;
	return v;
oom:
	kvc_vocab_free(v);
	snprintf(err, errlen, "constrain: out of memory building the vocabulary trie");
	return NULL;
}

uint32_t kvc_mask_words(const struct kvc_vocab *v)
{
	return v->words;
}

/* ---- token sets ----------------------------------------------------- */

struct tset {
	uint32_t n;		/* allowed tokens (bits set or list length) */
	uint32_t *bits;		/* dense: a bitset of words */
	int32_t *list;		/* sparse: ids */
	uint32_t n_maybe;
	int32_t *maybe;		/* ids that depend on the caller's stack */
	uint32_t max_push;	/* deepest call nesting an allowed token makes */
};

struct kvc_grammar {
	struct kvc_vocab *v;
	int refs;		/* under v->lock */
	struct kvc_dfa d;
	struct tset *sets;	/* one per class of equivalent states */
	uint32_t n_sets;
	uint32_t *set_of;	/* state -> its set */
	uint8_t *has_out;	/* a state with some byte or call to go on */
	uint32_t *dist;		/* fewest bytes to the end of the state's frame */
	/* lazy trigger (TOOL_CALLS) */
	char *tag;
	int anchored;		/* the tag counts only at the output's start */
	char *skip_open, *skip_close;	/* a leading block the tag is not
					 * looked for in (NULL: none) */
	uint32_t tag_len, *kmp;
	int32_t trig_state;
	uint32_t trig_depth;
	int32_t trig_stack[KVC_MAX_DEPTH];
	uint32_t *forb_off;	/* per tag prefix k: tokens that would complete */
	int32_t *forb;		/* the tag and then break the grammar */
	struct kvc_grammar_stats stats;
};

struct ivec32 {
	int32_t *p;
	uint32_t n, cap;
};

static int push32(struct ivec32 *v, int32_t x)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? v->cap * 2 : 64;
		int32_t *p = realloc(v->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = x;
	return 0;
}

struct pnode {
	int32_t val, parent;
};

struct walker {
	const struct kvc_vocab *v;
	const struct kvc_dfa *d;
	int32_t *st, *top;
	uint32_t *len;
	struct pnode *pool;
	uint32_t pool_cap;
};

/* One byte with a persistent (shared-tail) stack. *maybe is set when the
 * byte needs to pop below the walk's own stack. */
static int32_t pstep(struct walker *w, int32_t s, int32_t *top, uint32_t *len,
		     uint32_t *np, uint8_t b, int *maybe)
{
	const struct kvc_dfa *d = w->d;
	uint32_t c = d->cls[b], k;

	for (;;) {
		int32_t t = d->next[(size_t)s * d->n_cls + c];

		if (t >= 0)
			return t;
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) {
			int32_t e = d->call_entry[k];

			if (e < 0 || d->next[(size_t)e * d->n_cls + c] < 0)
				continue;
			if (*len >= KVC_MAX_DEPTH || *np >= w->pool_cap)
				return -1;
			w->pool[*np] = (struct pnode){ d->call_ret[k], *top };
			*top = (int32_t)(*np)++;
			(*len)++;
			return d->next[(size_t)e * d->n_cls + c];
		}
		if (!(d->flags[s] & DF_RETURN))
			return -1;
		if (!*len) {
			*maybe = 1;
			return -1;
		}
		s = w->pool[*top].val;
		*top = w->pool[*top].parent;
		(*len)--;
	}
}

/* Tokens allowed from state s with the given stack (stack == NULL: the
 * stack is unknown, tokens that pop below it go to maybe). */
static int walk(struct walker *w, int32_t s, const int32_t *stack, uint32_t depth,
		struct ivec32 *acc, struct ivec32 *maybe, uint32_t *max_push)
{
	const struct kvc_vocab *v = w->v;
	uint32_t i, np = 0, k, mp = 0;

	w->top[0] = -1;
	w->len[0] = 0;
	for (k = 0; stack && k < depth; k++) {
		w->pool[np] = (struct pnode){ stack[k], w->top[0] };
		w->top[0] = (int32_t)np++;
		w->len[0]++;
	}
	w->st[0] = s;
	/* room for every token: the loop below appends without checks */
	if (acc->cap < v->n_vocab) {
		int32_t *p = realloc(acc->p, v->n_vocab * sizeof(int32_t));
		if (!p)
			return -ENOMEM;
		acc->p = p;
		acc->cap = v->n_vocab;
	}
	for (i = 0; i < v->n_nodes;) {
		const struct tnode *nd = &v->node[i];
		uint32_t dd = nd->depth, ln = w->len[dd - 1];
		int32_t tp = w->top[dd - 1], ps = w->st[dd - 1], t;
		int mb = 0;

		/* the common case, a plain edge, inline; calls and returns in pstep */
		t = w->d->next[(size_t)ps * w->d->n_cls + w->d->cls[nd->byte]];
		if (t < 0)
			t = pstep(w, ps, &tp, &ln, &np, nd->byte, &mb);
		if (t < 0) {
			if (mb && maybe) {
				uint32_t j, q;
				for (j = i; j < nd->skip; j++)
					for (q = 0; q < v->node[j].tn; q++)
						if (push32(maybe, v->tok[v->node[j].tfirst + q]))
							return -ENOMEM;
			}
			i = nd->skip;
			continue;
		}
		w->st[dd] = t;
		w->top[dd] = tp;
		w->len[dd] = ln;
		if (nd->tn) {
			for (k = 0; k < nd->tn; k++)
				acc->p[acc->n++] = v->tok[nd->tfirst + k];
			if (ln > mp)
				mp = ln;
		}
		i++;
	}
	if (max_push)
		*max_push = stack ? 0 : mp;
	return 0;
}

static int walker_init(struct walker *w, const struct kvc_vocab *v, const struct kvc_dfa *d)
{
	memset(w, 0, sizeof(*w));
	w->v = v;
	w->d = d;
	w->st = malloc((v->max_len + 1) * sizeof(int32_t));
	w->top = malloc((v->max_len + 1) * sizeof(int32_t));
	w->len = malloc((v->max_len + 1) * sizeof(uint32_t));
	w->pool_cap = v->n_nodes + KVC_MAX_DEPTH + 1;
	w->pool = malloc(w->pool_cap * sizeof(*w->pool));
	return w->st && w->top && w->len && w->pool ? 0 : -ENOMEM;
}

static void walker_free(struct walker *w)
{
	free(w->st);
	free(w->top);
	free(w->len);
	free(w->pool);
}

static void tset_free(struct tset *t)
{
	free(t->bits);
	free(t->list);
	free(t->maybe);
}

/* Simulates bytes from (s, stack) on copies; 1 if all are taken. */
static int sim(const struct kvc_dfa *d, int32_t *s, int32_t *stack, uint32_t *depth,
	       const uint8_t *p, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		*s = dfa_step(d, *s, stack, depth, KVC_MAX_DEPTH, p[i]);
		if (*s < 0)
			return 0;
	}
	return 1;
}

/* Fewest bytes from each state to where its frame may end (ACCEPT or
 * RETURN); a call costs its callee's distance plus its return state's.
 * A worklist over reverse edges (Bellman-Ford in queue order): a state
 * is offered a new distance when a successor, callee entry or return
 * state got closer. */
static int build_dist(struct kvc_grammar *g)
{
	const struct kvc_dfa *d = &g->d;
	uint32_t s, c, k, n = d->n, ne = 0, *off, *fill, *q, qh = 0, qn = 0;
	int64_t *pred = NULL;	/* pred state << 32 | (call index + 1, 0: byte) */
	uint8_t *inq;
	int rc = -ENOMEM;

	g->dist = malloc(n * sizeof(uint32_t));
	off = calloc(n + 1, sizeof(uint32_t));
	fill = malloc((n + 1) * sizeof(uint32_t));
	q = malloc(n * sizeof(uint32_t));
	inq = calloc(n, 1);
	if (!g->dist || !off || !fill || !q || !inq)
		goto out;
#define EACH_SUCC(body) \
	for (s = 0; s < n; s++) { \
		int32_t last = -1; \
		for (c = 0; c < d->n_cls; c++) { \
			int32_t t = d->next[(size_t)s * d->n_cls + c]; \
			int64_t tag = 0; \
			if (t >= 0 && t != last) { last = t; body; } \
		} \
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) { \
			int32_t t = d->call_entry[k]; \
			int64_t tag = k + 1; \
			if (t < 0) continue; \
			{ body; } \
			t = d->call_ret[k]; \
			{ body; } \
		} \
	}
	EACH_SUCC((void)tag; off[t + 1]++; ne++);
	for (s = 0; s < n; s++)
		off[s + 1] += off[s];
	pred = malloc((ne ? ne : 1) * sizeof(*pred));
	if (!pred)
		goto out;
	memcpy(fill, off, (n + 1) * sizeof(uint32_t));
	EACH_SUCC(pred[fill[t]++] = (int64_t)s << 32 | tag);
#undef EACH_SUCC
	for (s = 0; s < n; s++) {
		g->dist[s] = (d->flags[s] & (DF_ACCEPT | DF_RETURN)) ? 0 : UINT32_MAX / 4;
		if (!g->dist[s]) {
			q[qn++ % n] = s;
			inq[s] = 1;
		}
	}
	while (qh != qn) {
		uint32_t t = q[qh++ % n];

		inq[t] = 0;
		for (k = off[t]; k < off[t + 1]; k++) {
			uint32_t p = (uint32_t)(pred[k] >> 32), j = (uint32_t)pred[k], nd;

			nd = j ? g->dist[d->call_entry[j - 1]] + g->dist[d->call_ret[j - 1]]
			       : g->dist[t] + 1;
			if (nd < g->dist[p]) {
				g->dist[p] = nd;
				if (!inq[p]) {
					inq[p] = 1;
					q[qn++ % n] = p;
				}
			}
		}
	}
	rc = 0;
out:
	free(off);
	free(fill);
	free(pred);
	free(q);
	free(inq);
	return rc;
}

/*
 * States whose token sets must be equal: the same answer, ACCEPT and
 * RETURN alike, for every byte string up to the longest token (Moore's
 * refinement stopped after that many rounds, or once stable). A state
 * with calls is its own class. Long strings with maxLength, for example,
 * have one class for all counts more than a token away from the bound.
 * Returns the class of each state in *out.
 */
static int token_classes(const struct kvc_grammar *g, uint32_t rounds, uint32_t **out)
{
	const struct kvc_dfa *d = &g->d;
	uint32_t n = d->n, w = d->n_cls + 1, s, c, it, ncl = 0, hm = 1;
	uint32_t *cls = malloc(n * sizeof(uint32_t)), *nc = malloc(n * sizeof(uint32_t));
	int32_t *sig = malloc((size_t)n * w * sizeof(int32_t)), *ht;

	while (hm < 2 * n)
		hm <<= 1;
	ht = malloc(hm * sizeof(int32_t));
	if (!cls || !nc || !sig || !ht) {
		free(cls);
		free(nc);
		free(sig);
		free(ht);
		return -ENOMEM;
	}
	for (s = 0; s < n; s++)
		cls[s] = d->call_off[s + 1] > d->call_off[s] ? 3 + s : (d->flags[s] & 3);
	for (it = 0; it <= rounds; it++) {
		uint32_t prev = ncl;

		memset(ht, 0xff, hm * sizeof(int32_t));
		ncl = 0;
		for (s = 0; s < n; s++) {
			int32_t *sg = sig + (size_t)s * w;
			uint64_t h = 0x9e3779b97f4a7c15ull;
			uint32_t i;

			sg[0] = (int32_t)cls[s];
			for (c = 0; c < d->n_cls; c++) {
				int32_t t = d->next[(size_t)s * d->n_cls + c];
				sg[c + 1] = it ? (t >= 0 ? (int32_t)cls[t] : -1) : 0;
			}
			for (c = 0; c < w; c++)	/* xor-rotate: no multiply chain */
				h = ((h << 7) | (h >> 57)) ^ (uint32_t)sg[c];
			h *= 0xff51afd7ed558ccdull;
			for (i = (uint32_t)(h ^ (h >> 31)) & (hm - 1);; i = (i + 1) & (hm - 1)) {
				if (ht[i] < 0) {
					ht[i] = (int32_t)s;
					nc[s] = ncl++;
					break;
				}
				if (!memcmp(sig + (size_t)ht[i] * w, sg, w * sizeof(int32_t))) {
					nc[s] = nc[ht[i]];
					break;
				}
			}
		}
		memcpy(cls, nc, n * sizeof(uint32_t));
		if (it > 0 && ncl == prev)
			break;	/* stable: this is the full equivalence */
	}
	free(nc);
	free(sig);
	free(ht);
	*out = cls;
	return 0;
}

static int build_sets(struct kvc_grammar *g)
{
	const struct kvc_vocab *v = g->v;
	const struct kvc_dfa *d = &g->d;
	struct ivec32 acc = { 0 }, maybe = { 0 }, q = { 0 };
	uint8_t *seen = calloc(d->n, 1);
	uint32_t *cls = NULL, *rep = NULL, i, k;
	struct walker w;
	int rc = -ENOMEM;

	memset(&w, 0, sizeof(w));
	g->set_of = malloc(d->n * sizeof(uint32_t));
	g->sets = calloc(d->n, sizeof(*g->sets));
	g->has_out = calloc(d->n, 1);
	rep = malloc(d->n * sizeof(uint32_t));
	if (!seen || !g->set_of || !g->sets || !g->has_out || !rep ||
	    walker_init(&w, v, d) || token_classes(g, v->max_len, &cls))
		goto out;
	memset(rep, 0xff, d->n * sizeof(uint32_t));
	for (i = 0; i < d->n; i++) {
		for (k = 0; k < d->n_cls && !g->has_out[i]; k++)
			g->has_out[i] = d->next[(size_t)i * d->n_cls + k] >= 0;
		for (k = d->call_off[i]; k < d->call_off[i + 1]; k++)
			g->has_out[i] |= d->call_entry[k] >= 0;
	}
	/* reachable states only; one walk per class */
	seen[d->start] = 1;
	if (push32(&q, d->start))
		goto out;
	while (q.n) {
		int32_t s = q.p[--q.n], t;
		struct tset *ts;

		if (rep[cls[s]] != UINT32_MAX) {
			g->set_of[s] = rep[cls[s]];
			goto next;
		}
		rep[cls[s]] = g->set_of[s] = g->n_sets;
		ts = &g->sets[g->n_sets++];
		acc.n = maybe.n = 0;
		if (walk(&w, s, NULL, 0, &acc, &maybe, &ts->max_push))
			goto out;
		ts->n = acc.n;
		if ((uint64_t)acc.n * 32 > v->n_vocab) {
			ts->bits = calloc(v->words, sizeof(uint32_t));
			if (!ts->bits)
				goto out;
			for (k = 0; k < acc.n; k++)
				ts->bits[acc.p[k] >> 5] |= 1u << (acc.p[k] & 31);
			g->stats.bitset_sets++;
			g->stats.table_bytes += v->words * 4;
		} else if (acc.n) {
			ts->list = malloc(acc.n * sizeof(int32_t));
			if (!ts->list)
				goto out;
			memcpy(ts->list, acc.p, acc.n * sizeof(int32_t));
			g->stats.listed_ids += acc.n;
			g->stats.table_bytes += acc.n * 4;
		}
		if (maybe.n) {
			ts->maybe = malloc(maybe.n * sizeof(int32_t));
			if (!ts->maybe)
				goto out;
			memcpy(ts->maybe, maybe.p, maybe.n * sizeof(int32_t));
			ts->n_maybe = maybe.n;
			g->stats.maybe_ids += maybe.n;
			g->stats.table_bytes += maybe.n * 4;
		}
		g->stats.token_sets++;
next:
		for (k = 0; k < d->n_cls; k++) {
			t = d->next[(size_t)s * d->n_cls + k];
			if (t >= 0 && !seen[t]) {
				seen[t] = 1;
				if (push32(&q, t))
					goto out;
			}
		}
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) {
			int32_t e = d->call_entry[k], r = d->call_ret[k];
			if (e < 0)
				continue;
			if (!seen[e]) {
				seen[e] = 1;
				if (push32(&q, e))
					goto out;
			}
			if (!seen[r]) {
				seen[r] = 1;
				if (push32(&q, r))
					goto out;
			}
		}
	}
	g->stats.byte_classes = d->n_cls;
	g->stats.table_bytes += (uint64_t)d->n * (d->n_cls + 1) * 4;
	rc = 0;
out:
	walker_free(&w);
	free(seen);
	free(cls);
	free(rep);
	free(acc.p);
	free(maybe.p);
	free(q.p);
	return rc;
}

/* The tag's KMP table, the state right after it, and per matched prefix
 * the tokens that would complete it with bytes the grammar refuses. */
static int build_trigger(struct kvc_grammar *g, char *err, size_t errlen)
{
	const struct kvc_vocab *v = g->v;
	uint32_t L = g->tag_len, i, k, j;
	struct ivec32 forb = { 0 };
	int32_t s = g->d.start;
	uint32_t depth = 0;

	g->kmp = calloc(L + 1, sizeof(uint32_t));
	g->forb_off = calloc(L + 1, sizeof(uint32_t));
	if (!g->kmp || !g->forb_off)
		return -ENOMEM;
	for (i = 1, k = 0; i < L; i++) {
		while (k && g->tag[i] != g->tag[k])
			k = g->kmp[k];
		if (g->tag[i] == g->tag[k])
			k++;
		g->kmp[i + 1] = k;
	}
	if (!sim(&g->d, &s, g->trig_stack, &depth, (const uint8_t *)g->tag, L)) {
		snprintf(err, errlen, "constrain: the start tag does not open the grammar");
		return -EINVAL;
	}
	g->trig_state = s;
	g->trig_depth = depth;
	for (k = 0; k < L; k++) {
		g->forb_off[k] = forb.n;
		for (i = 0; i < v->n_vocab; i++) {
			const uint8_t *p = v->bytes + v->off[i];
			uint32_t n = v->off[i + 1] - v->off[i], m = k;

			if (!n || !memchr(p, (uint8_t)g->tag[L - 1], n))
				continue;
			for (j = 0; j < n; j++) {
				while (m && p[j] != (uint8_t)g->tag[m])
					m = g->kmp[m];
				if (p[j] == (uint8_t)g->tag[m])
					m++;
				if (m == L)
					break;
			}
			if (m == L) {
				int32_t st2 = g->trig_state, stack[KVC_MAX_DEPTH];
				uint32_t dp = g->trig_depth;

				memcpy(stack, g->trig_stack, dp * sizeof(int32_t));
				if (!sim(&g->d, &st2, stack, &dp, p + j + 1, n - j - 1) &&
				    push32(&forb, (int32_t)i))
					return -ENOMEM;
			}
		}
	}
	g->forb_off[L] = forb.n;
	g->forb = forb.p ? forb.p : malloc(sizeof(int32_t));
	return g->forb ? 0 : -ENOMEM;
}

static void grammar_free(struct kvc_grammar *g)
{
	uint32_t i;

	if (!g)
		return;
	for (i = 0; g->sets && i < g->n_sets; i++)
		tset_free(&g->sets[i]);
	free(g->sets);
	free(g->set_of);
	free(g->has_out);
	free(g->dist);
	free(g->tag);
	free(g->skip_open);
	free(g->skip_close);
	free(g->kmp);
	free(g->forb_off);
	free(g->forb);
	dfa_free(&g->d);
	free(g);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int compile_new(struct kvc_vocab *v, const struct kvc_spec *spec,
		       struct kvc_grammar **out, char **key, char *err, size_t errlen)
{
	struct nfa n;
	struct kvc_grammar *g = calloc(1, sizeof(*g));
	double t0 = now_ms();
	int rc;

	if (!g)
		return -ENOMEM;
	g->v = v;
	nfa_init(&n, 4 * KVC_MAX_STATES);
	rc = kvc_spec_nfa(spec, &n, key, &g->tag, err, errlen);
	if (!rc)
		rc = dfa_build(&n, 0, KVC_MAX_STATES, &g->d, err, errlen);
	g->stats.nfa_states = n.n;
	nfa_free(&n);
	if (!rc) {
		g->stats.dfa_states = g->d.n;
		rc = build_sets(g);
		if (!rc)	/* both fail only for memory: compile_err says so */
			rc = build_dist(g);
	}
	if (!rc && g->tag) {
		g->tag_len = (uint32_t)strlen(g->tag);
		g->anchored = spec->syntax && spec->syntax->anchored;
		rc = build_trigger(g, err, errlen);
		if (!rc && spec->skip_open && *spec->skip_open && spec->skip_close &&
		    *spec->skip_close) {
			g->skip_open = strdup(spec->skip_open);
			g->skip_close = strdup(spec->skip_close);
			if (!g->skip_open || !g->skip_close)
				rc = -ENOMEM;
		}
	}
	if (rc) {
		grammar_free(g);
		free(*key);
		*key = NULL;
		return rc;
	}
	g->stats.compile_ms = now_ms() - t0;
	g->refs = 1;
	*out = g;
	return 0;
}

/* Every failure names itself: the allocations that fail without writing
 * err (the cache key, the grammar, the tag's copy, ...) are out of memory. */
static int compile_err(int rc, char *err, size_t errlen)
{
	if (rc == -ENOMEM && errlen && !err[0])
		snprintf(err, errlen, "constrain: out of memory compiling the grammar");
	return rc;
}

int kvc_compile(struct kvc_vocab *v, const struct kvc_spec *spec,
		struct kvc_grammar **out, char *err, size_t errlen)
{
	struct kvc_grammar *g = NULL;
	char *key = NULL;
	uint32_t i, victim = 0;
	int rc;

	*out = NULL;
	if (!v || !spec) {
		snprintf(err, errlen, "constrain: no vocabulary or spec");
		return -EINVAL;
	}
	if (errlen)
		err[0] = '\0';
	rc = kvc_spec_key(spec, &key, err, errlen);
	if (rc)
		return compile_err(rc, err, errlen);
	pthread_mutex_lock(&v->lock);
	for (i = 0; i < CACHE_ENTRIES; i++) {
		struct cache_ent *c = &v->cache[i];
		if (c->g && !strcmp(c->key, key)) {
			c->used = ++v->tick;
			c->g->refs++;
			*out = c->g;
			pthread_mutex_unlock(&v->lock);
			free(key);
			return 0;
		}
	}
	pthread_mutex_unlock(&v->lock);
	free(key);
	key = NULL;
	rc = compile_new(v, spec, &g, &key, err, errlen);
	if (rc)
		return compile_err(rc, err, errlen);
	pthread_mutex_lock(&v->lock);
	for (i = 0; i < CACHE_ENTRIES; i++) {
		struct cache_ent *c = &v->cache[i];
		if (c->g && !strcmp(c->key, key)) {	/* compiled meanwhile */
			c->used = ++v->tick;
			c->g->refs++;
			*out = c->g;
			pthread_mutex_unlock(&v->lock);
			free(key);
			grammar_free(g);
			return 0;
		}
		/* an empty slot, else the least recently used */
		if (v->cache[victim].g && (!c->g || c->used < v->cache[victim].used))
			victim = i;
	}
	{
		struct cache_ent *c = &v->cache[victim];
		struct kvc_grammar *old = c->g;

		free(c->key);
		c->key = key;
		c->g = g;
		c->used = ++v->tick;
		g->refs++;	/* the cache's own */
		if (old && --old->refs == 0)
			grammar_free(old);
	}
	*out = g;
	pthread_mutex_unlock(&v->lock);
	return 0;
}

void kvc_grammar_release(struct kvc_grammar *g)
{
	struct kvc_vocab *v;
	int last;

	if (!g)
		return;
	v = g->v;
	pthread_mutex_lock(&v->lock);
	last = --g->refs == 0;
	pthread_mutex_unlock(&v->lock);
	if (last)
		grammar_free(g);
}

void kvc_grammar_stats(const struct kvc_grammar *g, struct kvc_grammar_stats *st)
{
	*st = g->stats;
}

/* ---- matcher -------------------------------------------------------- */

/* M_FREE: an anchored trigger can no longer come: free to the end */
enum { M_SCAN, M_ACTIVE, M_ENDED, M_FREE };

struct kvc_matcher {
	struct kvc_grammar *g;
	int mode;
	int was_active;		/* the constrained part was entered */
	/* M_SCAN with a skip block: 0 matching skip_open at the start
	 * (skip_k bytes so far), 1 inside it (skip_k bytes of skip_close
	 * matched), 2 past it or none */
	int skip;
	uint32_t skip_k;
	uint32_t kmp;		/* M_SCAN: bytes of the tag matched */
	int32_t state;
	uint32_t depth;
	int32_t stack[KVC_MAX_DEPTH];
	struct walker w;	/* the rare deep-stack mask */
	int w_ready;
	struct ivec32 scratch;
};

struct kvc_matcher *kvc_matcher_create(struct kvc_grammar *g, unsigned flags)
{
	struct kvc_matcher *m;

	if (!g || ((flags & KVC_LAZY) && !g->tag))
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	pthread_mutex_lock(&g->v->lock);
	g->refs++;
	pthread_mutex_unlock(&g->v->lock);
	m->g = g;
	m->mode = (flags & KVC_LAZY) ? M_SCAN : M_ACTIVE;
	m->skip = g->skip_open ? 0 : 2;
	m->state = g->d.start;
	return m;
}

struct kvc_matcher *kvc_matcher_clone(const struct kvc_matcher *m)
{
	struct kvc_matcher *c = kvc_matcher_create(m->g, m->mode == M_SCAN ? KVC_LAZY : 0);

	if (!c)
		return NULL;
	c->mode = m->mode;
	c->was_active = m->was_active;
	c->skip = m->skip;
	c->skip_k = m->skip_k;
	c->kmp = m->kmp;
	c->state = m->state;
	c->depth = m->depth;
	memcpy(c->stack, m->stack, sizeof(c->stack));
	return c;
}

void kvc_matcher_free(struct kvc_matcher *m)
{
	if (!m)
		return;
	if (m->w_ready)
		walker_free(&m->w);
	free(m->scratch.p);
	kvc_grammar_release(m->g);
	free(m);
}

/* Whether the output may end here: the called sub-automata may all
 * return (a return needs no byte) and the root accepts. *more: some state
 * on the way could still take a byte. */
static int can_end(const struct kvc_matcher *m, int *more)
{
	const struct kvc_grammar *g = m->g;
	int32_t s = m->state;
	uint32_t d = m->depth;

	*more = g->has_out[s];
	while (d && (g->d.flags[s] & DF_RETURN)) {
		s = m->stack[--d];
		*more |= g->has_out[s];
	}
	return !d && (g->d.flags[s] & DF_ACCEPT);
}

int kvc_accepting(const struct kvc_matcher *m)
{
	int more;

	if (m->mode == M_SCAN || m->mode == M_FREE)
		return 1;
	return m->mode == M_ACTIVE && can_end(m, &more);
}

int kvc_finished(const struct kvc_matcher *m)
{
	int more;

	if (m->mode == M_ENDED)
		return 1;
	return m->mode == M_ACTIVE && can_end(m, &more) && !more;
}

int kvc_triggered(const struct kvc_matcher *m)
{
	return m->mode == M_ACTIVE || m->was_active;
}

static inline void set_bit(uint32_t *mask, int32_t i)
{
	mask[i >> 5] |= 1u << (i & 31);
}

int kvc_mask(struct kvc_matcher *m, uint32_t *mask)
{
	const struct kvc_grammar *g = m->g;
	const struct kvc_vocab *v = g->v;
	const struct tset *ts;
	uint32_t i, n = 0;

	if (m->mode == M_ENDED) {
		memset(mask, 0, v->words * 4);
		return 0;
	}
	if (m->mode == M_SCAN || m->mode == M_FREE) {
		memset(mask, 0xff, v->words * 4);
		if (v->n_vocab & 31)
			mask[v->words - 1] = (1u << (v->n_vocab & 31)) - 1;
		n = v->n_vocab;
		for (i = g->forb_off[m->kmp]; m->mode == M_SCAN && i < g->forb_off[m->kmp + 1]; i++) {
			if (g->anchored || m->skip != 2) {	/* the list assumes the tag anywhere */
				struct kvc_matcher c = *m;

				c.w_ready = 0;
				c.scratch.p = NULL;
				if (!kvc_advance(&c, g->forb[i]))
					continue;
			}
			mask[g->forb[i] >> 5] &= ~(1u << (g->forb[i] & 31));
			n--;
		}
		return (int)n;
	}
	ts = &g->sets[g->set_of[m->state]];
	if (m->depth + ts->max_push > KVC_MAX_DEPTH) {
		/* near the nesting limit: walk with the real stack */
		memset(mask, 0, v->words * 4);
		if (!m->w_ready) {
			if (walker_init(&m->w, v, &g->d)) {
				walker_free(&m->w);
				return -ENOMEM;
			}
			m->w_ready = 1;
		}
		m->scratch.n = 0;
		if (walk(&m->w, m->state, m->stack, m->depth, &m->scratch, NULL, NULL))
			return -ENOMEM;
		for (i = 0; i < m->scratch.n; i++)
			set_bit(mask, m->scratch.p[i]);
		n = m->scratch.n;
	} else {
		if (ts->bits) {
			memcpy(mask, ts->bits, v->words * 4);
		} else {
			memset(mask, 0, v->words * 4);
			for (i = 0; i < ts->n; i++)
				set_bit(mask, ts->list[i]);
		}
		n = ts->n;
		for (i = 0; i < ts->n_maybe; i++) {
			int32_t id = ts->maybe[i], s = m->state, stack[KVC_MAX_DEPTH];
			uint32_t dp = m->depth;

			memcpy(stack, m->stack, dp * sizeof(int32_t));
			if (sim(&g->d, &s, stack, &dp, v->bytes + v->off[id],
				v->off[id + 1] - v->off[id])) {
				set_bit(mask, id);
				n++;
			}
		}
	}
	if (v->eos >= 0 && kvc_accepting(m)) {
		set_bit(mask, v->eos);
		n++;
	}
	return (int)n;
}

/* One byte of free text through the tag's KMP automaton. */
static uint32_t tag_step(const struct kvc_grammar *g, uint32_t k, uint8_t c)
{
	while (k && c != (uint8_t)g->tag[k])
		k = g->kmp[k];
	return c == (uint8_t)g->tag[k] ? k + 1 : k;
}

/* How much of pat the text ends with after c, q bytes of it before (the
 * skip block's close, a few bytes: checked directly). */
static uint32_t text_step(const char *pat, uint32_t q, uint8_t c)
{
	char buf[80];
	size_t pl = strlen(pat), len;

	if ((uint8_t)pat[q] == c)
		return q + 1;
	if (q + 1 > sizeof(buf))
		return 0;
	memcpy(buf, pat, q);
	buf[q] = (char)c;
	len = q + 1;
	for (size_t k = len < pl ? len : pl; k > 0; k--)
		if (!memcmp(buf + len - k, pat, k))
			return (uint32_t)k;
	return 0;
}

int kvc_advance(struct kvc_matcher *m, int32_t token)
{
	const struct kvc_grammar *g = m->g;
	const struct kvc_vocab *v = g->v;
	const uint8_t *p;
	uint32_t n, j = 0;
	int32_t s, stack[KVC_MAX_DEPTH];
	uint32_t depth;

	if ((uint32_t)token >= v->n_vocab)	/* negative ids convert far above */
		return -EINVAL;
	if (m->mode == M_ENDED)
		return -EPERM;
	if (token == v->eos) {
		if (!kvc_accepting(m))
			return -EPERM;
		m->was_active |= m->mode == M_ACTIVE;
		m->mode = M_ENDED;
		return 0;
	}
	p = v->bytes + v->off[token];
	n = v->off[token + 1] - v->off[token];
	if (m->mode == M_FREE)
		return 0;
	if (m->mode == M_SCAN) {
		uint32_t k = m->kmp, L = g->tag_len, sk = m->skip_k, after = n;
		int skip = m->skip;

		for (j = 0; j < n && after == n; j++) {
			uint8_t c = p[j];

			if (skip == 0) {	/* does the output open the skip block? */
				if (c == (uint8_t)g->skip_open[sk]) {
					if (!g->skip_open[++sk]) {
						skip = 1;
						sk = 0;
					}
					continue;
				}
				/* no: what matched of its opening is text to scan */
				skip = 2;
				for (uint32_t q = 0; q < sk && k < L; q++)
					k = tag_step(g, k, (uint8_t)g->skip_open[q]);
				sk = 0;
				if (k == L) {
					after = j;	/* this byte follows the tag */
					break;
				}
			}
			if (skip == 1) {	/* inside it: until its close */
				sk = text_step(g->skip_close, sk, c);
				if (!g->skip_close[sk]) {
					skip = 2;
					sk = 0;
				}
				continue;
			}
			if (g->anchored) {
				/* whitespace first, then the tag or nothing */
				if (!k && (c == ' ' || c == '\n' || c == '\t' || c == '\r'))
					continue;
				if (c != (uint8_t)g->tag[k]) {
					m->mode = M_FREE;
					return 0;
				}
			}
			k = tag_step(g, k, c);
			if (k == L)
				after = j + 1;
		}
		if (k < L) {	/* still free text */
			m->kmp = k;
			m->skip = skip;
			m->skip_k = sk;
			return 0;
		}
		s = g->trig_state;
		depth = g->trig_depth;
		memcpy(stack, g->trig_stack, depth * sizeof(int32_t));
		if (!sim(&g->d, &s, stack, &depth, p + after, n - after))
			return -EPERM;
		m->mode = M_ACTIVE;
		m->was_active = 1;
		m->skip = 2;
	} else {
		if (!n)
			return -EPERM;	/* control tokens are not output */
		s = m->state;
		depth = m->depth;
		memcpy(stack, m->stack, depth * sizeof(int32_t));
		if (!sim(&g->d, &s, stack, &depth, p, n))
			return -EPERM;
	}
	m->state = s;
	m->depth = depth;
	memcpy(m->stack, stack, depth * sizeof(int32_t));
	return 0;
}

static uint32_t remaining(const struct kvc_grammar *g, int32_t s, const int32_t *stack,
			  uint32_t depth)
{
	uint32_t r = g->dist[s], i;

	for (i = 0; i < depth; i++)
		r += g->dist[stack[i]];
	return r;
}

uint32_t kvc_remaining(const struct kvc_matcher *m)
{
	if (m->mode != M_ACTIVE)
		return 0;
	return remaining(m->g, m->state, m->stack, m->depth);
}

int kvc_mask_budget(struct kvc_matcher *m, uint32_t *mask, uint32_t tokens_left)
{
	const struct kvc_grammar *g = m->g;
	const struct kvc_vocab *v = g->v;
	uint32_t w;
	int n = kvc_mask(m, mask);

	if (n <= 0)
		return n;
	n = 0;
	for (w = 0; w < v->words; w++) {
		uint32_t bits = mask[w];

		while (bits) {
			int32_t id = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(bits)), s = m->state;
			int32_t stack[KVC_MAX_DEPTH];
			uint32_t dp = m->depth;
			int keep;

			bits &= bits - 1;
			if (id == v->eos) {
				keep = 1;
			} else if (!tokens_left) {
				keep = 0;
			} else if (m->mode == M_FREE) {
				keep = 1;
			} else if (m->mode == M_SCAN) {
				/* free text may stop anywhere; a token that opens
				 * the constrained part must leave room to close it */
				keep = 1;
				if (memmem(v->bytes + v->off[id], v->off[id + 1] - v->off[id],
					   g->tag, g->tag_len) || m->kmp) {
					struct kvc_matcher c = *m;
					c.w_ready = 0;
					c.scratch.p = NULL;
					keep = !kvc_advance(&c, id) &&
					       kvc_remaining(&c) <= tokens_left - 1;
				}
			} else {
				memcpy(stack, m->stack, dp * sizeof(int32_t));
				keep = sim(&g->d, &s, stack, &dp, v->bytes + v->off[id],
					   v->off[id + 1] - v->off[id]) &&
				       remaining(g, s, stack, dp) <= tokens_left - 1;
			}
			if (keep)
				n++;
			else
				mask[w] &= ~(1u << (id & 31));
		}
	}
	return n;
}
