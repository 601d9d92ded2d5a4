/* SPDX-License-Identifier: MIT */
/*
 * auth.h - the API key table: which Bearer key acts as which tenant. A
 * table is immutable once built and reference-counted, so SIGHUP swaps in
 * a new one while requests finish their lookups in the old.
 */
#ifndef KVD_API_AUTH_H
#define KVD_API_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"

struct auth_tenant {
	char name[KVD_API_MAX_TENANT_NAME + 1];
	uint32_t id;
};

struct auth_table;

/* NULL with err filled when the table is invalid or out of memory. */
struct auth_table *auth_table_new(const struct kvd_api_tenant *t, size_t n,
				  char *err, size_t errlen);
void auth_table_get(struct auth_table *t);
void auth_table_put(struct auth_table *t);
size_t auth_table_keys(const struct auth_table *t);
/* Key i (< auth_table_keys), NUL-terminated. */
const char *auth_table_key(const struct auth_table *t, size_t i);
/* The tenant whose key is key[0..len), or NULL. Every configured key is
 * compared, each in time that depends only on len. */
const struct auth_tenant *auth_lookup(const struct auth_table *t,
				      const char *key, size_t len);

#endif
