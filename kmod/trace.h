/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvarena tracepoints: the anchors for BPF tool-wait accounting and for
 * tracing block traffic.  Fields are plain integers so they read the same
 * through tracefs, perf and BPF (tracepoint/ and raw_tp/).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM kvarena

#if !defined(_KVA_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _KVA_TRACE_H

#include <linux/tracepoint.h>

TRACE_EVENT(kvarena_session_state,
	    TP_PROTO(u32 arena_id, u64 session_id, u32 old_state,
		     u32 new_state, u32 tool_class, u64 expected_wait_us,
		     u32 blocks_held, u32 block_size, u64 cookie),
	    TP_ARGS(arena_id, session_id, old_state, new_state, tool_class,
		    expected_wait_us, blocks_held, block_size, cookie),
	    TP_STRUCT__entry(__field(u32, arena_id)
			     __field(u32, old_state)
			     __field(u64, session_id)
			     __field(u32, new_state)
			     __field(u32, tool_class)
			     __field(u32, blocks_held)
			     __field(u32, block_size)
			     __field(u64, expected_wait_us)
			     __field(u64, cookie)),
	    TP_fast_assign(__entry->arena_id = arena_id;
			   __entry->session_id = session_id;
			   __entry->old_state = old_state;
			   __entry->new_state = new_state;
			   __entry->tool_class = tool_class;
			   __entry->blocks_held = blocks_held;
			   __entry->expected_wait_us = expected_wait_us;
			   __entry->cookie = cookie;
			   __entry->block_size = block_size;),
	    TP_printk("arena=%u session=%llu %u->%u tool=%u wait_us=%llu blocks=%u bs=%u cookie=%llu",
		      __entry->arena_id, __entry->session_id,
		      __entry->old_state, __entry->new_state,
		      __entry->tool_class, __entry->expected_wait_us,
		      __entry->blocks_held, __entry->block_size,
		      __entry->cookie)
);

/* op: 0 alloc, 1 free, 2 share, 3 release at session end */
TRACE_EVENT(kvarena_blocks,
	    TP_PROTO(u32 arena_id, u64 session_id, u32 op, u32 count,
		     u32 released, u32 blocks_free),
	    TP_ARGS(arena_id, session_id, op, count, released, blocks_free),
	    TP_STRUCT__entry(__field(u32, arena_id)
			     __field(u32, op)
			     __field(u64, session_id)
			     __field(u32, count)
			     __field(u32, released)
			     __field(u32, blocks_free)),
	    TP_fast_assign(__entry->arena_id = arena_id;
			   __entry->session_id = session_id;
			   __entry->op = op;
			   __entry->count = count;
			   __entry->released = released;
			   __entry->blocks_free = blocks_free;),
	    TP_printk("arena=%u session=%llu op=%u count=%u released=%u free=%u",
		      __entry->arena_id, __entry->session_id, __entry->op,
		      __entry->count, __entry->released, __entry->blocks_free)
);

TRACE_EVENT(kvarena_arena,
	    TP_PROTO(u32 arena_id, u32 tenant_id, u64 bytes, u32 block_size,
		     bool created),
	    TP_ARGS(arena_id, tenant_id, bytes, block_size, created),
	    TP_STRUCT__entry(__field(u32, arena_id)
			     __field(u32, tenant_id)
			     __field(u64, bytes)
			     __field(u32, block_size)
			     __field(u32, created)),
	    TP_fast_assign(__entry->arena_id = arena_id;
			   __entry->tenant_id = tenant_id;
			   __entry->bytes = bytes;
			   __entry->block_size = block_size;
			   __entry->created = created;),
	    TP_printk("arena=%u tenant=%u bytes=%llu bs=%u %s",
		      __entry->arena_id, __entry->tenant_id, __entry->bytes,
		      __entry->block_size,
		      __entry->created ? "created" : "freed")
);

#endif /* _KVA_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE trace
#include <trace/define_trace.h>
