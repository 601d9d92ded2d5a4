/* SPDX-License-Identifier: MIT */
/*
 * turn_cache.h - replies that ended in tool calls, as generated, by their
 * first call's id (turn_cache.c): a conversation sent back renders the
 * bytes the model generated, so the session's KV is reused whatever the
 * spacing of the calls. Thread-safe.
 */
#ifndef KVD_API_TURN_CACHE_H
#define KVD_API_TURN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chat.h"

struct turn_cache;

struct turn_cache *turn_cache_new(void);
void turn_cache_free(struct turn_cache *c);
/* The text generated for a reply whose first call is call_id. */
void turn_cache_put(struct turn_cache *c, uint32_t tenant, const char *call_id,
		    const char *text, size_t len);
/* Every assistant message with calls whose reply is cached and says the
 * same (content, call names, arguments as JSON values) becomes that text
 * as its content, without calls (the text holds them); the strings live
 * in keep. Returns how many. */
int turn_cache_apply(struct turn_cache *c, const struct chat_template *tmpl, uint32_t tenant,
		     struct chat_msg *msgs, size_t n, json_t *keep);

#endif
