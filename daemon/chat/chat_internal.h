/* SPDX-License-Identifier: MIT */
/*
 * chat_internal.h - what the files of daemon/chat/ share: a family's
 * operations (one file per family renders its template) and the template
 * handle that binds a family to one model's parameters.
 */
#ifndef KVD_CHAT_INTERNAL_H
#define KVD_CHAT_INTERNAL_H

#include "chat.h"

struct chat_family {
	const char *name;
	/* the token text that ends an assistant turn */
	const char *eot;
	/* 1 when a template text is this family's (auto detection) */
	int (*detect)(const char *tmpl, size_t len);
	int (*render)(const struct chat_template *t, const struct chat_conv *c,
		      struct chat_prompt *p, char *err, size_t errlen);
	int (*render_round)(const struct chat_template *t,
			    const struct chat_tool_result *r, size_t n,
			    struct chat_prompt *p);
};

struct chat_template {
	const struct chat_family *f;
	struct tc_tags tags;		/* Hermes-syntax families */
	char why[160];			/* how the family was chosen */
};

extern const struct chat_family chat_family_chatml;

#endif
