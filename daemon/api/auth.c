// SPDX-License-Identifier: MIT
/*
 * auth.c - API keys to tenants (see auth.h). Keys are compared in
 * constant time: the comparison of a presented key against a configured
 * one takes the same time whatever their contents, and every configured
 * key is compared, so response times reveal neither a key's prefix nor
 * which key matched.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"

struct auth_key {
	unsigned char *key;
	size_t len;
	size_t tenant;
};

struct auth_table {
	int refs;
	struct auth_tenant *tenants;
	size_t n_tenants;
	struct auth_key *keys;
	size_t n_keys;
};

static int valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > KVD_API_MAX_TENANT_NAME)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("_.-", s[i])))
			return 0;
	return 1;
}

static int valid_key(const char *k)
{
	size_t n = k ? strlen(k) : 0;

	if (n < KVD_API_MIN_KEY_LEN || n > KVD_API_MAX_KEY_LEN)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (k[i] < 0x21 || k[i] > 0x7e)
			return 0;
	return 1;
}

struct auth_table *auth_table_new(const struct kvd_api_tenant *t, size_t n,
				  char *err, size_t errlen)
{
	struct auth_table *a;
	size_t total = 0, k = 0;

	if (n > KVD_API_MAX_TENANTS) {
		snprintf(err, errlen, "%zu tenants; at most %d", n, KVD_API_MAX_TENANTS);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (!valid_name(t[i].name)) {
			snprintf(err, errlen, "tenant %zu: a name is 1 to %d of A-Z a-z 0-9 _ . -",
				 i, KVD_API_MAX_TENANT_NAME);
			return NULL;
		}
		if (t[i].id == 0) {
			snprintf(err, errlen, "tenant %s: id 0 is reserved (no keys configured)",
				 t[i].name);
			return NULL;
		}
		for (size_t j = 0; j < i; j++)
			if (t[j].id == t[i].id || !strcmp(t[j].name, t[i].name)) {
				snprintf(err, errlen, "tenants %s and %s share a name or id",
					 t[j].name, t[i].name);
				return NULL;
			}
		if (t[i].n_keys == 0) {
			snprintf(err, errlen, "tenant %s has no API key", t[i].name);
			return NULL;
		}
		if (t[i].n_keys > KVD_API_MAX_KEYS - total) {
			snprintf(err, errlen, "more than %d API keys", KVD_API_MAX_KEYS);
			return NULL;
		}
		total += t[i].n_keys;
		for (size_t j = 0; j < t[i].n_keys; j++)
			if (!valid_key(t[i].keys[j])) {
				snprintf(err, errlen, "tenant %s: key %zu must be %d to %d printable non-space ASCII characters",
					 t[i].name, j, KVD_API_MIN_KEY_LEN, KVD_API_MAX_KEY_LEN);
				return NULL;
			}
	}
	a = calloc(1, sizeof(*a));
	if (!a || !(a->tenants = calloc(n ? n : 1, sizeof(*a->tenants))) ||
	    !(a->keys = calloc(total ? total : 1, sizeof(*a->keys)))) {
		if (a)
			free(a->tenants);
		free(a);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->refs = 1;
	a->n_tenants = n;
	for (size_t i = 0; i < n; i++) {
		snprintf(a->tenants[i].name, sizeof(a->tenants[i].name), "%s", t[i].name);
		a->tenants[i].id = t[i].id;
		for (size_t j = 0; j < t[i].n_keys; j++, k++) {
			for (size_t m = 0; m < k; m++)
				if (!strcmp((char *)a->keys[m].key, t[i].keys[j])) {
					snprintf(err, errlen, "the same API key is configured twice (tenant %s)",
						 t[i].name);
					a->n_keys = k;
					auth_table_put(a);
					return NULL;
				}
			a->keys[k].key = (unsigned char *)strdup(t[i].keys[j]);
			a->keys[k].len = strlen(t[i].keys[j]);
			a->keys[k].tenant = i;
			if (!a->keys[k].key) {
				snprintf(err, errlen, "out of memory");
				a->n_keys = k;
				auth_table_put(a);
				return NULL;
			}
		}
	}
	a->n_keys = total;
	return a;
}

void auth_table_get(struct auth_table *t)
{
	__atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
}

void auth_table_put(struct auth_table *t)
{
	if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL))
		return;
	for (size_t i = 0; i < t->n_keys; i++) {
		/* keys are secrets: do not leave them in freed memory */
		explicit_bzero(t->keys[i].key, t->keys[i].len);
		free(t->keys[i].key);
	}
	free(t->keys);
	free(t->tenants);
	free(t);
}

size_t auth_table_keys(const struct auth_table *t)
{
	return t ? t->n_keys : 0;
}

const char *auth_table_key(const struct auth_table *t, size_t i)
{
	return (const char *)t->keys[i].key;
}

/* 1 when equal; time depends on alen only (blen > 0). */
static unsigned ct_equal(const unsigned char *a, size_t alen,
			 const unsigned char *b, size_t blen)
{
	volatile unsigned diff = (unsigned)(alen ^ blen);

	for (size_t i = 0, j = 0; i < alen; i++) {
		diff |= a[i] ^ b[j];
		j = (j + 1 == blen) ? 0 : j + 1;
	}
	return (unsigned)((diff | (0u - diff)) >> (sizeof(diff) * 8 - 1)) ^ 1u;
}

const struct auth_tenant *auth_lookup(const struct auth_table *t,
				      const char *key, size_t len)
{
	size_t match = 0;

	if (!t || len == 0 || len > KVD_API_MAX_KEY_LEN)
		return NULL;
	for (size_t i = 0; i < t->n_keys; i++) {
		size_t eq = ct_equal((const unsigned char *)key, len,
				     t->keys[i].key, t->keys[i].len);

		/* match is 1 + the matching key's index, 0 for none */
		match |= (0 - eq) & (i + 1);
	}
	return match ? &t->tenants[t->keys[match - 1].tenant] : NULL;
}
