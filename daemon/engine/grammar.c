// SPDX-License-Identifier: MIT
/*
 * grammar.c - the byte automaton of constrained decoding: an NFA builder
 * (states, byte-range, epsilon and call edges), its determinisation by
 * subset construction into a DFA over byte classes, the trimming of
 * states that cannot reach an end, and the one-byte step with the call
 * stack. Knows nothing about JSON or tokens.
 */
#include "constrain_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- NFA ------------------------------------------------------------ */

void nfa_init(struct nfa *n, uint32_t limit)
{
	memset(n, 0, sizeof(*n));
	n->limit = limit;
}

void nfa_free(struct nfa *n)
{
	free(n->flags);
	free(n->e);
	memset(n, 0, sizeof(*n));
}

int32_t nfa_state(struct nfa *n)
{
	if (n->failed)
		return -1;
	if (n->n >= n->limit) {
		n->failed = -E2BIG;
		return -1;
	}
	if (n->n == n->cap) {
		uint32_t cap = n->cap ? n->cap * 2 : 256;
		uint8_t *f = realloc(n->flags, cap);

		if (!f) {
			n->failed = -ENOMEM;
			return -1;
		}
		n->flags = f;
		n->cap = cap;
	}
	n->flags[n->n] = 0;
	return (int32_t)n->n++;
}

static void add_edge(struct nfa *n, int32_t from, int32_t to, int32_t entry,
		     uint8_t kind, uint8_t lo, uint8_t hi)
{
	if (n->failed || from < 0 || to < 0)
		return;
	if (n->ne == n->ecap) {
		uint32_t cap = n->ecap ? n->ecap * 2 : 512;
		struct nfa_edge *e = realloc(n->e, cap * sizeof(*e));

		if (!e) {
			n->failed = -ENOMEM;
			return;
		}
		n->e = e;
		n->ecap = cap;
	}
	n->e[n->ne++] = (struct nfa_edge){ .from = from, .to = to, .entry = entry,
					   .kind = kind, .lo = lo, .hi = hi };
}

void nfa_byte(struct nfa *n, int32_t from, uint8_t lo, uint8_t hi, int32_t to)
{
	add_edge(n, from, to, -1, NE_BYTE, lo, hi);
}

void nfa_eps(struct nfa *n, int32_t from, int32_t to)
{
	add_edge(n, from, to, -1, NE_EPS, 0, 0);
}

void nfa_call(struct nfa *n, int32_t from, int32_t entry, int32_t to)
{
	if (entry >= 0)
		add_edge(n, from, to, entry, NE_CALL, 0, 0);
}

int32_t nfa_lit(struct nfa *n, int32_t from, const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len && from >= 0; i++) {
		int32_t t = nfa_state(n);

		nfa_byte(n, from, (uint8_t)s[i], (uint8_t)s[i], t);
		from = t;
	}
	return from;
}

int32_t nfa_ws(struct nfa *n, int32_t from, uint32_t max)
{
	int32_t end = nfa_state(n), cur = from;
	uint32_t i;

	nfa_eps(n, from, end);
	for (i = 0; i < max; i++) {
		int32_t t = nfa_state(n);

		nfa_byte(n, cur, '\t', '\n', t);
		nfa_byte(n, cur, '\r', '\r', t);
		nfa_byte(n, cur, ' ', ' ', t);
		nfa_eps(n, t, end);
		cur = t;
	}
	return end;
}

/* ---- subset construction ------------------------------------------- */

struct ivec {
	int32_t *p;
	uint32_t n, cap;
};

static int iv_push(struct ivec *v, int32_t x)
{
	if (v->n == v->cap) {
		uint32_t cap = v->cap ? v->cap * 2 : 16;
		int32_t *p = realloc(v->p, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = x;
	return 0;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

struct builder {
	const struct nfa *nfa;
	uint32_t *eoff;		/* CSR of edges by source state */
	struct nfa_edge *es;
	/* DFA states: their NFA sets in pool, hashed */
	struct ivec pool;
	uint32_t *set_off, *set_len;
	uint32_t n, cap, max;
	int32_t *hash;
	uint32_t hmask;
	/* closure scratch */
	uint32_t *mark, stamp;
	struct ivec stk;
};

static uint64_t hash_set(const int32_t *s, uint32_t n)
{
	uint64_t h = 1469598103934665603ull ^ n;
	uint32_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

/* Epsilon closure of set (in place, sorted, unique). */
static int closure(struct builder *b, struct ivec *set)
{
	uint32_t i, k;

	if (++b->stamp == 0) {
		memset(b->mark, 0, b->nfa->n * sizeof(*b->mark));
		b->stamp = 1;
	}
	b->stk.n = 0;
	for (i = 0; i < set->n; i++) {
		if (b->mark[set->p[i]] == b->stamp)
			continue;
		b->mark[set->p[i]] = b->stamp;
		if (iv_push(&b->stk, set->p[i]))
			return -ENOMEM;
	}
	set->n = 0;
	while (b->stk.n) {
		int32_t s = b->stk.p[--b->stk.n];

		if (iv_push(set, s))
			return -ENOMEM;
		for (k = b->eoff[s]; k < b->eoff[s + 1]; k++) {
			int32_t t = b->es[k].to;

			if (b->es[k].kind != NE_EPS || b->mark[t] == b->stamp)
				continue;
			b->mark[t] = b->stamp;
			if (iv_push(&b->stk, t))
				return -ENOMEM;
		}
	}
	qsort(set->p, set->n, sizeof(int32_t), cmp_i32);
	return 0;
}

/* The DFA state for a closed set: existing or new. Returns its id, -E2BIG
 * or -ENOMEM. */
static int32_t intern(struct builder *b, const struct ivec *set)
{
	uint64_t h = hash_set(set->p, set->n);
	uint32_t i, j;

	for (i = (uint32_t)h & b->hmask; b->hash[i] >= 0; i = (i + 1) & b->hmask) {
		int32_t id = b->hash[i];

		if (b->set_len[id] == set->n &&
		    !memcmp(b->pool.p + b->set_off[id], set->p, set->n * sizeof(int32_t)))
			return id;
	}
	if (b->n >= b->max)
		return -E2BIG;
	if (b->n == b->cap) {
		uint32_t cap = b->cap * 2;
		uint32_t *o = realloc(b->set_off, cap * sizeof(*o));

		if (!o)
			return -ENOMEM;
		b->set_off = o;
		o = realloc(b->set_len, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		b->set_len = o;
		b->cap = cap;
	}
	if ((b->n + 1) * 2 > b->hmask + 1) {	/* grow the table */
		uint32_t nm = b->hmask * 2 + 1, k;
		int32_t *nh = malloc((size_t)(nm + 1) * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		memset(nh, 0xff, (size_t)(nm + 1) * sizeof(*nh));
		for (k = 0; k < b->n; k++) {
			uint64_t hk = hash_set(b->pool.p + b->set_off[k], b->set_len[k]);

			for (j = (uint32_t)hk & nm; nh[j] >= 0; j = (j + 1) & nm)
				;
			nh[j] = (int32_t)k;
		}
		free(b->hash);
		b->hash = nh;
		b->hmask = nm;
		for (i = (uint32_t)h & b->hmask; b->hash[i] >= 0; i = (i + 1) & b->hmask)
			;
	}
	b->set_off[b->n] = b->pool.n;
	b->set_len[b->n] = set->n;
	for (j = 0; j < set->n; j++)
		if (iv_push(&b->pool, set->p[j]))
			return -ENOMEM;
	b->hash[i] = (int32_t)b->n;
	return (int32_t)b->n++;
}

static void make_classes(const struct nfa *n, struct kvc_dfa *d)
{
	uint8_t cut[257] = { 0 };
	uint32_t i, c = 0;

	for (i = 0; i < n->ne; i++) {
		if (n->e[i].kind != NE_BYTE)
			continue;
		cut[n->e[i].lo] = 1;
		cut[n->e[i].hi + 1] = 1;
	}
	for (i = 0; i < 256; i++) {
		if (i && cut[i])
			c++;
		d->cls[i] = (uint8_t)c;
	}
	d->n_cls = c + 1;
}

void dfa_free(struct kvc_dfa *d)
{
	free(d->next);
	free(d->flags);
	free(d->call_off);
	free(d->call_entry);
	free(d->call_ret);
	memset(d, 0, sizeof(*d));
}

struct pend_call {
	int32_t entry;
	struct ivec to;
};

static void builder_free(struct builder *b)
{
	free(b->eoff);
	free(b->es);
	free(b->pool.p);
	free(b->set_off);
	free(b->set_len);
	free(b->hash);
	free(b->mark);
	free(b->stk.p);
}

static int set_err(char *err, size_t errlen, int rc, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return rc;
}

/* Drop what cannot reach an end; check that calls are unambiguous.
 * Liveness spreads backwards from the ends over reverse edges; a call
 * makes its state live once both its entry and its return state are. */
static int trim(struct kvc_dfa *d, char *err, size_t errlen)
{
	uint32_t n = d->n, s, c, k, ne = 0, *off = calloc(n + 1, sizeof(uint32_t));
	uint32_t *pred = NULL, *fill = malloc((n + 1) * sizeof(uint32_t)), *q = malloc(n * sizeof(uint32_t));
	uint8_t *live = calloc(n ? n : 1, 1);
	uint32_t qn = 0, qh = 0;

	if (!off || !fill || !q || !live)
		goto oom;
#define EACH_SUCC(body) \
	for (s = 0; s < n; s++) { \
		for (c = 0; c < d->n_cls; c++) { \
			int32_t t = d->next[(size_t)s * d->n_cls + c]; \
			if (t >= 0) { body; } \
		} \
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) { \
			int32_t t = d->call_entry[k]; \
			{ body; } \
			t = d->call_ret[k]; \
			{ body; } \
		} \
	}
	EACH_SUCC(off[t + 1]++; ne++);
	for (s = 0; s < n; s++)
		off[s + 1] += off[s];
	pred = malloc((ne ? ne : 1) * sizeof(uint32_t));
	if (!pred)
		goto oom;
	memcpy(fill, off, (n + 1) * sizeof(uint32_t));
	EACH_SUCC(pred[fill[t]++] = s);
#undef EACH_SUCC
	for (s = 0; s < n; s++)
		if (d->flags[s] & (DF_ACCEPT | DF_RETURN)) {
			live[s] = 1;
			q[qn++] = s;
		}
	while (qh < qn) {
		uint32_t t = q[qh++];

		for (k = off[t]; k < off[t + 1]; k++) {
			uint32_t p = pred[k], j;
			int ok = 0;

			if (live[p])
				continue;
			for (c = 0; c < d->n_cls && !ok; c++)
				ok = d->next[(size_t)p * d->n_cls + c] == (int32_t)t;
			for (j = d->call_off[p]; j < d->call_off[p + 1] && !ok; j++)
				ok = live[d->call_entry[j]] && live[d->call_ret[j]];
			if (ok) {
				live[p] = 1;
				q[qn++] = p;
			}
		}
	}
	free(off);
	free(fill);
	free(pred);
	free(q);
	off = fill = pred = q = NULL;
	if (!live[d->start]) {
		free(live);
		return set_err(err, errlen, -EINVAL,
			       "the schema admits no value (e.g. minimum above maximum)");
	}
	for (s = 0; s < d->n; s++) {
		for (c = 0; c < d->n_cls; c++) {
			int32_t *t = &d->next[(size_t)s * d->n_cls + c];
			if (*t >= 0 && !live[*t])
				*t = -1;
		}
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++)
			if (!live[d->call_entry[k]] || !live[d->call_ret[k]])
				d->call_entry[k] = -1;	/* disabled */
	}
	/* a byte must select at most one of: an own edge, one callee */
	for (s = 0; s < d->n; s++) {
		for (c = 0; c < d->n_cls; c++) {
			int users = d->next[(size_t)s * d->n_cls + c] >= 0;
			for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) {
				int32_t e = d->call_entry[k];
				if (e >= 0 && d->next[(size_t)e * d->n_cls + c] >= 0)
					users++;
			}
			if (users > 1) {
				free(live);
				return set_err(err, errlen, -EINVAL,
					       "anyOf mixes a free-form object or array with an "
					       "alternative starting with the same character");
			}
		}
	}
	free(live);
	return 0;
oom:
	free(off);
	free(fill);
	free(pred);
	free(q);
	free(live);
	return set_err(err, errlen, -ENOMEM, "out of memory compiling the grammar");
}

int dfa_build(const struct nfa *n, int32_t start, uint32_t max_states,
	      struct kvc_dfa *d, char *err, size_t errlen)
{
	struct builder b = { .nfa = n, .max = max_states, .cap = 64, .hmask = 127 };
	struct ivec set = { 0 }, *bucket = NULL;
	struct ivec cnext = { 0 }, cflags = { 0 }, coff = { 0 }, centry = { 0 }, cret = { 0 };
	struct pend_call *pc = NULL;
	uint32_t npc = 0, pccap = 0, i, k, s, ncls = 0;
	int rc = -ENOMEM;
	int32_t id;

	memset(d, 0, sizeof(*d));
	if (n->failed)
		return set_err(err, errlen, n->failed,
			       n->failed == -E2BIG ? "schema too large: automaton over its state limit"
						   : "out of memory");
	make_classes(n, d);
	ncls = d->n_cls;
	b.eoff = calloc(n->n + 1, sizeof(*b.eoff));
	b.es = malloc((n->ne ? n->ne : 1) * sizeof(*b.es));
	b.set_off = malloc(b.cap * sizeof(*b.set_off));
	b.set_len = malloc(b.cap * sizeof(*b.set_len));
	b.hash = malloc((b.hmask + 1) * sizeof(*b.hash));
	b.mark = calloc(n->n ? n->n : 1, sizeof(*b.mark));
	bucket = calloc(d->n_cls, sizeof(*bucket));
	if (!b.eoff || !b.es || !b.set_off || !b.set_len || !b.hash || !b.mark || !bucket)
		goto out;
	memset(b.hash, 0xff, (b.hmask + 1) * sizeof(*b.hash));
	for (i = 0; i < n->ne; i++)
		b.eoff[n->e[i].from + 1]++;
	for (i = 0; i < n->n; i++)
		b.eoff[i + 1] += b.eoff[i];
	{
		uint32_t *fill = malloc((n->n + 1) * sizeof(*fill));
		if (!fill)
			goto out;
		memcpy(fill, b.eoff, (n->n + 1) * sizeof(*fill));
		for (i = 0; i < n->ne; i++)
			b.es[fill[n->e[i].from]++] = n->e[i];
		free(fill);
	}
	if (iv_push(&set, start) || closure(&b, &set))
		goto out;
	id = intern(&b, &set);
	if (id < 0) {
		rc = id;
		goto out;
	}
	d->start = id;
	if (iv_push(&coff, 0))
		goto out;
	for (s = 0; s < b.n; s++) {
		uint32_t off = b.set_off[s], len = b.set_len[s], c;
		uint8_t fl = 0;

		for (c = 0; c < d->n_cls; c++)
			bucket[c].n = 0;
		npc = 0;
		for (i = 0; i < len; i++) {
			int32_t q = b.pool.p[off + i];

			if (n->flags[q] & NF_ACCEPT)
				fl |= DF_ACCEPT;
			if (n->flags[q] & NF_RETURN)
				fl |= DF_RETURN;
			for (k = b.eoff[q]; k < b.eoff[q + 1]; k++) {
				const struct nfa_edge *e = &b.es[k];
				uint32_t x, last = UINT32_MAX;

				if (e->kind == NE_BYTE) {
					/* classes are numbered in byte order: an edge
					 * covers a contiguous run of them */
					for (x = d->cls[e->lo], last = d->cls[e->hi]; x <= last; x++)
						if (iv_push(&bucket[x], e->to))
							goto out;
				} else if (e->kind == NE_CALL) {
					uint32_t j;
					for (j = 0; j < npc && pc[j].entry != e->entry; j++)
						;
					if (j == npc) {
						if (npc == pccap) {
							struct pend_call *np = realloc(pc, (pccap + 4) * sizeof(*np));
							if (!np)
								goto out;
							memset(np + pccap, 0, 4 * sizeof(*np));
							pc = np;
							pccap += 4;
						}
						pc[npc].entry = e->entry;
						pc[npc].to.n = 0;
						npc++;
					}
					if (iv_push(&pc[j].to, e->to))
						goto out;
				}
			}
		}
		if (iv_push(&cflags, fl))
			goto out;
		for (c = 0; c < d->n_cls; c++) {
			int32_t t = -1;

			if (bucket[c].n) {
				set.n = 0;
				for (i = 0; i < bucket[c].n; i++)
					if (iv_push(&set, bucket[c].p[i]))
						goto out;
				if (closure(&b, &set))
					goto out;
				t = intern(&b, &set);
				if (t < 0) {
					rc = t;
					goto out;
				}
			}
			if (iv_push(&cnext, t))
				goto out;
		}
		for (i = 0; i < npc; i++) {
			int32_t ent, ret;

			set.n = 0;
			if (iv_push(&set, pc[i].entry) || closure(&b, &set))
				goto out;
			ent = intern(&b, &set);
			if (ent < 0) {
				rc = ent;
				goto out;
			}
			set.n = 0;
			for (k = 0; k < pc[i].to.n; k++)
				if (iv_push(&set, pc[i].to.p[k]))
					goto out;
			if (closure(&b, &set))
				goto out;
			ret = intern(&b, &set);
			if (ret < 0) {
				rc = ret;
				goto out;
			}
			if (iv_push(&centry, ent) || iv_push(&cret, ret))
				goto out;
		}
		if (iv_push(&coff, (int32_t)centry.n))
			goto out;
	}
	d->n = b.n;
	d->next = cnext.p;
	cnext.p = NULL;
	d->flags = malloc(d->n);
	d->call_off = malloc((d->n + 1) * sizeof(uint32_t));
	d->call_entry = centry.p;
	d->call_ret = cret.p;
	centry.p = cret.p = NULL;
	if (!d->flags || !d->call_off)
		goto out;
	if (!d->call_entry)
		d->call_entry = malloc(sizeof(int32_t));
	if (!d->call_ret)
		d->call_ret = malloc(sizeof(int32_t));
	if (!d->call_entry || !d->call_ret)
		goto out;
	for (s = 0; s < d->n; s++)
		d->flags[s] = (uint8_t)cflags.p[s];
	for (s = 0; s <= d->n; s++)
		d->call_off[s] = (uint32_t)coff.p[s];
	rc = trim(d, err, errlen);
	if (rc)
		goto out_dfa;
	goto done;
out:
	if (rc == -E2BIG)
		snprintf(err, errlen, "schema too large: over %u automaton states", max_states);
	else
		snprintf(err, errlen, "out of memory compiling the grammar");
out_dfa:
	dfa_free(d);
done:
	if (bucket)
		for (i = 0; i < ncls; i++)
			free(bucket[i].p);
	free(bucket);
	for (i = 0; i < pccap; i++)
		free(pc[i].to.p);
	free(pc);
	free(set.p);
	free(cnext.p);
	free(cflags.p);
	free(coff.p);
	free(centry.p);
	free(cret.p);
	builder_free(&b);
	return rc;
}

int32_t dfa_step(const struct kvc_dfa *d, int32_t s, int32_t *stack,
		 uint32_t *depth, uint32_t max, uint8_t b)
{
	uint32_t c = d->cls[b], k;

	for (;;) {
		int32_t t = d->next[(size_t)s * d->n_cls + c];

		if (t >= 0)
			return t;
		for (k = d->call_off[s]; k < d->call_off[s + 1]; k++) {
			int32_t e = d->call_entry[k];

			if (e < 0 || d->next[(size_t)e * d->n_cls + c] < 0)
				continue;
			if (*depth >= max)
				return -1;
			stack[(*depth)++] = d->call_ret[k];
			return d->next[(size_t)e * d->n_cls + c];
		}
		if (!(d->flags[s] & DF_RETURN) || !*depth)
			return -1;
		s = stack[--(*depth)];
	}
}
