/* SPDX-License-Identifier: MIT */
/*
 * chat_template.h - a validated chat request to prompt text (ChatML, tools
 * declared the Hermes/Qwen way). The rendering is append-only: when a
 * client appends messages to a conversation, the previous prompt plus the
 * text the model generated for it is a byte prefix of the new prompt,
 * which is what the orchestrator's prefix cache keys on.
 */
#ifndef KVD_API_CHAT_TEMPLATE_H
#define KVD_API_CHAT_TEMPLATE_H

#include "chat_request.h"
#include "strbuf.h"
#include "tool_call.h"

/* 1 when name is a template this file renders ("chatml"). */
int chat_template_known(const char *name);
/* Appends the prompt to out; 0, or -ENOMEM. */
int chat_render(const struct chat_request *r, const struct tc_tags *tags,
		struct strbuf *out);

#endif
