/* SPDX-License-Identifier: MIT */
/*
 * jconv.h - the model families' tests' conversations: OpenAI-shaped JSON
 * ({"messages": [...], "tools": [...]}) turned into the room's normalized
 * conversation, as a front end would (without its validation).
 */
#ifndef KVD_TEST_JCONV_H
#define KVD_TEST_JCONV_H

#include <jansson.h>

#include "chat.h"

/* strings point into root */
struct jconv {
	json_t *root;
	struct chat_msg *msgs;
	struct chat_tool *tools;
	struct chat_conv c;
};

/* 0, or -1 (not JSON, out of memory); j needs jconv_free either way */
int jconv_parse(struct jconv *j, const char *text);
void jconv_free(struct jconv *j);
/* The prompt for a JSON conversation, malloc'd; NULL when rendering
 * fails (its message on stderr). */
char *render_json(const struct chat_template *t, const char *text);

#endif
