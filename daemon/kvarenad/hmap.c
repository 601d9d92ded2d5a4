// SPDX-License-Identifier: MIT
/*
 * hmap.c - the orchestrator's one hash table: intrusive, chained, keyed
 * by a 64-bit hash the caller computes (and verifies: equal keys are
 * candidates, not matches). Conversations by id, by kvarena session and
 * by text, the radix index's children and the prefills in flight all
 * live in one of these, so each lookup is O(1) expected instead of a walk
 * over every conversation or cache slot. The table doubles when it holds
 * twice as many entries as buckets; callers size it up front for their
 * bound so that this happens rarely, if ever.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

static uint32_t bucket(const struct kvd_hmap *m, uint64_t key)
{
	/* the keys are hashes already; fold the high bits in anyway */
	return (uint32_t)(key ^ (key >> 29) ^ (key >> 47)) & m->mask;
}

int kvd_hmap_init(struct kvd_hmap *m, uint32_t expect)
{
	uint32_t n = 16;

	while (n < expect && n < (1u << 30))
		n *= 2;
	m->b = calloc(n, sizeof(*m->b));
	if (!m->b)
		return -ENOMEM;
	m->mask = n - 1;
	m->n = 0;
	return 0;
}

void kvd_hmap_fini(struct kvd_hmap *m)
{
	free(m->b);
	m->b = NULL;
	m->mask = 0;
	m->n = 0;
}

static void grow(struct kvd_hmap *m)
{
	uint32_t n = (m->mask + 1) * 2, i;
	struct kvd_hnode **nb;
	struct kvd_hmap nm;

	if (n > (1u << 30) || !(nb = calloc(n, sizeof(*nb))))
		return;		/* longer chains, still correct */
	nm.b = nb;
	nm.mask = n - 1;
	for (i = 0; i <= m->mask; i++) {
		struct kvd_hnode *e = m->b[i], *next;

		for (; e; e = next) {
			uint32_t k = bucket(&nm, e->key);

			next = e->next;
			e->next = nb[k];
			nb[k] = e;
		}
	}
	free(m->b);
	m->b = nb;
	m->mask = nm.mask;
}

void kvd_hmap_add(struct kvd_hmap *m, struct kvd_hnode *e, uint64_t key)
{
	uint32_t k;

	if (m->n >= 2 * (m->mask + 1))
		grow(m);
	k = bucket(m, key);
	e->key = key;
	e->next = m->b[k];
	m->b[k] = e;
	m->n++;
}

void kvd_hmap_del(struct kvd_hmap *m, struct kvd_hnode *e)
{
	struct kvd_hnode **pp = &m->b[bucket(m, e->key)];

	for (; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			e->next = NULL;
			m->n--;
			return;
		}
}

struct kvd_hnode *kvd_hmap_first(const struct kvd_hmap *m, uint64_t key)
{
	struct kvd_hnode *e;

	if (!m->b)
		return NULL;
	for (e = m->b[bucket(m, key)]; e && e->key != key; e = e->next)
		;
	return e;
}

struct kvd_hnode *kvd_hmap_next(const struct kvd_hnode *e)
{
	uint64_t key = e->key;

	for (e = e->next; e && e->key != key; e = e->next)
		;
	return (struct kvd_hnode *)e;
}

/* SplitMix64's finaliser: a 64-bit mix for keys built from parts. */
uint64_t kvd_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}
