/* SPDX-License-Identifier: MIT */
/*
 * responses_store.h - stored /v1/responses (responses_store.c): per
 * tenant, bounded in count and bytes, oldest first out. Thread-safe.
 */
#ifndef KVD_API_RESPONSES_STORE_H
#define KVD_API_RESPONSES_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define RS_ID_MAX 64
#define RS_MAX_CHAIN 4096	/* responses one continuation may walk back */

struct responses_store;

/* Keeps a response (references taken): its input and output items, the
 * response object, the response it continued (NULL: none). The tenant's
 * oldest make room. 0, -E2BIG (alone over the byte bound), -ENOMEM. */
int responses_store_put(struct responses_store *s, uint32_t tenant, const char *id,
			const char *prev, json_t *input, json_t *output, json_t *response);

enum { RS_RESPONSE, RS_INPUT, RS_OUTPUT };
/* A new reference to what of the tenant's response id, or NULL. */
json_t *responses_store_get(struct responses_store *s, uint32_t tenant, const char *id,
			    int what);
/* 0 or -ENOENT (unknown, or another tenant's). */
int responses_store_delete(struct responses_store *s, uint32_t tenant, const char *id);
/* Appends the conversation response id ends (every input and output item
 * of it and of the responses it continued, oldest first) to items. 0;
 * -ENOENT with the id that is gone in missing; -ELOOP past RS_MAX_CHAIN;
 * -ENOMEM. */
int responses_store_chain(struct responses_store *s, uint32_t tenant, const char *id,
			  json_t *items, char *missing, size_t missing_len);

#endif
