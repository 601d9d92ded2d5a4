/* SPDX-License-Identifier: MIT */
/*
 * callsyntax.h - the model family's tool-call shape (daemon/chat) as the
 * structured decoder's spec (daemon/engine/kvconstrain.h), for the
 * orchestrator's check at submit and the workers' compile: both build the
 * same grammar from the same family.
 */
#ifndef KVD_CALLSYNTAX_H
#define KVD_CALLSYNTAX_H

#include "chat.h"
#include "kvconstrain.h"

/* Fills sp's tags or syntax (y is its storage) and bounds max_calls by
 * the syntax's own limit. */
static inline void kvd_call_syntax(const struct chat_template *t, struct kvc_spec *sp,
				   struct kvc_call_syntax *y)
{
	struct chat_call_grammar g;

	chat_template_grammar(t, &g);
	if (g.hermes) {
		sp->start_tag = g.open;
		sp->end_tag = g.close;
		sp->syntax = NULL;
	} else {
		*y = (struct kvc_call_syntax){
			.list_open = g.list_open, .list_sep = g.list_sep,
			.list_close = g.list_close, .call_open = g.call_open,
			.call_close = g.call_close, .name_args = g.name_args,
			.args_key = g.args_key, .id = g.id, .id_mark = g.id_mark,
			.args_mark = g.args_mark, .trigger = g.trigger, .anchored = g.anchored,
		};
		sp->syntax = y;
	}
	if (g.max_calls && (!sp->max_calls || sp->max_calls > g.max_calls))
		sp->max_calls = g.max_calls;
	sp->skip_open = g.skip_open;
	sp->skip_close = g.skip_close;
}

#endif
