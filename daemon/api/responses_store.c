// SPDX-License-Identifier: MIT
/*
 * responses_store.c - the responses /v1/responses keeps (store: true) so
 * that a request naming one as previous_response_id continues its
 * conversation without sending it again, and GET/DELETE
 * /v1/responses/{id} and its input_items can read or drop it. Each entry
 * holds its own input items and output items, and the id of the response
 * it continued: a continuation walks the chain back. Scoped by tenant (an
 * entry is invisible to every other tenant) and bounded per tenant, in
 * count and in bytes; the oldest go first (a continuation of one that
 * went is a 400 saying so). Entries are immutable JSON shared by
 * reference; one mutex guards the table.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "responses_store.h"

#define BUCKETS 4096

struct stored {
	char id[RS_ID_MAX + 1];
	uint32_t tenant;
	char *prev;			/* previous_response_id, or NULL */
	json_t *input;			/* this request's input items */
	json_t *output;			/* its output items */
	json_t *response;		/* the response object (GET) */
	size_t bytes;
	struct stored *hnext;		/* bucket chain */
	struct stored *older, *newer;	/* age list, all tenants */
};

struct tenant_use {
	uint32_t tenant;
	size_t count, bytes;
};

struct responses_store {
	pthread_mutex_t lock;
	size_t max_count, max_bytes;	/* per tenant */
	struct stored *b[BUCKETS];
	struct stored *oldest, *newest;
	struct tenant_use *use;
	size_t n_use, cap_use;
};

static unsigned hash_id(const char *s)
{
	unsigned h = 2166136261u;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h % BUCKETS;
}

struct responses_store *responses_store_new(size_t max_per_tenant, size_t max_bytes_per_tenant)
{
	struct responses_store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	s->max_count = max_per_tenant;
	s->max_bytes = max_bytes_per_tenant;
	return s;
}

static void entry_free(struct stored *e)
{
	free(e->prev);
	json_decref(e->input);
	json_decref(e->output);
	json_decref(e->response);
	free(e);
}

static struct tenant_use *use_of(struct responses_store *s, uint32_t tenant, int make)
{
	for (size_t i = 0; i < s->n_use; i++)
		if (s->use[i].tenant == tenant)
			return &s->use[i];
	if (!make)
		return NULL;
	if (s->n_use == s->cap_use) {
		size_t cap = s->cap_use ? s->cap_use * 2 : 8;
		struct tenant_use *u = realloc(s->use, cap * sizeof(*u));

		if (!u)
			return NULL;
		s->use = u;
		s->cap_use = cap;
	}
	s->use[s->n_use] = (struct tenant_use){ .tenant = tenant };
	return &s->use[s->n_use++];
}

/* Unlinks e from its bucket and the age list; counts it off. */
static void unlink_entry(struct responses_store *s, struct stored *e)
{
	struct stored **pp = &s->b[hash_id(e->id)];
	struct tenant_use *u = use_of(s, e->tenant, 0);

	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	if (e->older)
		e->older->newer = e->newer;
	else
		s->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		s->newest = e->older;
	if (u) {
		u->count--;
		u->bytes -= e->bytes;
	}
}

void responses_store_free(struct responses_store *s)
{
	struct stored *e, *n;

	if (!s)
		return;
	for (e = s->oldest; e; e = n) {
		n = e->newer;
		entry_free(e);
	}
	free(s->use);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static size_t size_of(json_t *j)
{
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	size_t n = t ? strlen(t) : 0;

	free(t);
	return n;
}

int responses_store_put(struct responses_store *s, uint32_t tenant, const char *id,
			const char *prev, json_t *input, json_t *output, json_t *response)
{
	struct stored *e = calloc(1, sizeof(*e)), *o, *next;
	struct tenant_use *u;
	size_t bytes;

	if (!e || strlen(id) > RS_ID_MAX) {
		free(e);
		return -ENOMEM;
	}
	bytes = sizeof(*e) + size_of(input) + size_of(output) + size_of(response);
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->tenant = tenant;
	e->prev = prev ? strdup(prev) : NULL;
	e->input = json_incref(input);
	e->output = json_incref(output);
	e->response = json_incref(response);
	e->bytes = bytes;
	if (prev && !e->prev) {
		entry_free(e);
		return -ENOMEM;
	}
	pthread_mutex_lock(&s->lock);
	u = use_of(s, tenant, 1);
	if (!u || bytes > s->max_bytes) {
		pthread_mutex_unlock(&s->lock);
		entry_free(e);
		return u ? -E2BIG : -ENOMEM;
	}
	/* the tenant's oldest make room */
	for (o = s->oldest; o && (u->count + 1 > s->max_count || u->bytes + bytes > s->max_bytes);
	     o = next) {
		next = o->newer;
		if (o->tenant != tenant)
			continue;
		unlink_entry(s, o);
		entry_free(o);
	}
	e->hnext = s->b[hash_id(id)];
	s->b[hash_id(id)] = e;
	e->older = s->newest;
	if (s->newest)
		s->newest->newer = e;
	else
		s->oldest = e;
	s->newest = e;
	u->count++;
	u->bytes += bytes;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static struct stored *find(struct responses_store *s, uint32_t tenant, const char *id)
{
	struct stored *e = s->b[hash_id(id)];

	while (e && (strcmp(e->id, id) || e->tenant != tenant))
		e = e->hnext;
	return e;
}

json_t *responses_store_get(struct responses_store *s, uint32_t tenant, const char *id,
			    int what)
{
	struct stored *e;
	json_t *j = NULL;

	pthread_mutex_lock(&s->lock);
	e = find(s, tenant, id);
	if (e)
		j = json_incref(what == RS_RESPONSE ? e->response :
				what == RS_INPUT ? e->input : e->output);
	pthread_mutex_unlock(&s->lock);
	return j;
}

int responses_store_delete(struct responses_store *s, uint32_t tenant, const char *id)
{
	struct stored *e;

	pthread_mutex_lock(&s->lock);
	e = find(s, tenant, id);
	if (e)
		unlink_entry(s, e);
	pthread_mutex_unlock(&s->lock);
	if (!e)
		return -ENOENT;
	entry_free(e);
	return 0;
}

int responses_store_chain(struct responses_store *s, uint32_t tenant, const char *id,
			  json_t *items, char *missing, size_t missing_len)
{
	json_t *parts = json_array(), *x;
	const char *at = id;
	size_t depth = 0, i;
	int rc = 0;

	if (!parts)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	while (at) {
		struct stored *e = find(s, tenant, at);

		if (!e) {
			snprintf(missing, missing_len, "%s", at);
			rc = -ENOENT;
			break;
		}
		if (++depth > RS_MAX_CHAIN) {
			rc = -ELOOP;
			break;
		}
		/* newest first here; reversed below */
		if (json_array_append(parts, e->output) || json_array_append(parts, e->input)) {
			rc = -ENOMEM;
			break;
		}
		at = e->prev;
	}
	pthread_mutex_unlock(&s->lock);
	for (i = json_array_size(parts); !rc && i-- > 0;) {
		x = json_array_get(parts, i);
		if (json_array_extend(items, x))
			rc = -ENOMEM;
	}
	json_decref(parts);
	return rc;
}

void responses_store_keep_tenants(struct responses_store *s, const uint32_t *ids, size_t n)
{
	struct stored *e, *next;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	for (e = s->oldest; e; e = next) {
		size_t i;

		next = e->newer;
		for (i = 0; i < n && ids[i] != e->tenant; i++)
			;
		/* tenant 0 (no keys) survives only a table with no keys */
		if (i < n || (!n && !e->tenant))
			continue;
		unlink_entry(s, e);
		entry_free(e);
	}
	pthread_mutex_unlock(&s->lock);
}
