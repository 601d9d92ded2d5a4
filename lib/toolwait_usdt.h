/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The memfd backend's USDT probe: kvarena:session_state, the user-space
 * twin of the module's kvarena:kvarena_session_state tracepoint (the same
 * fields, in a record it points to), read by bpf/toolwait.bpf.c when there
 * is no module.
 *
 * Stock <sys/sdt.h> marks the probe site with a one-byte `nop`; a uprobe
 * there costs 6-10 us per hit on our hosts, while a 5-byte nop
 * (0f 1f 44 00 00) lets the kernel take its cheaper path (~1.6-2 us).  So
 * the site is a 5-byte nop.  Detached, the probe costs that nop and
 * filling a 48-byte record on the stack.
 */
#ifndef KVA_TOOLWAIT_USDT_H
#define KVA_TOOLWAIT_USDT_H

#include <stdint.h>

/* bpf/toolwait.h's struct tw_usdt_state, which the probe points at. */
struct kva_usdt_state {
	uint32_t arena_id;
	uint32_t old_state;
	uint64_t session_id;
	uint32_t new_state;
	uint32_t tool_class;
	uint32_t blocks_held;
	uint32_t block_size;
	uint64_t expected_wait_us;
	uint64_t cookie;
};

#ifdef KVA_NO_USDT
#define KVA_USDT_SESSION_STATE(a_, s_, old_, new_, tool_, wait_, held_,	\
			       bsize_, cookie_)				\
	do { } while (0)
#else
#include <sys/sdt.h>
#ifndef KVA_USDT_STOCK_NOP	/* defined: measure the 1-byte nop */
#undef _SDT_NOP
#define _SDT_NOP .nops 5
#endif
/*
 * One argument, a pointer to the record: the BPF side reads it with one
 * bpf_probe_read_user() instead of fetching nine arguments (measured:
 * the nine fetches took ~875 ns of a 1.3 us program).
 */
#define KVA_USDT_SESSION_STATE(a_, s_, old_, new_, tool_, wait_, held_,	\
			       bsize_, cookie_)				\
	do {								\
		struct kva_usdt_state _r = {				\
			.arena_id = (a_), .session_id = (s_),		\
			.old_state = (old_), .new_state = (new_),	\
			.tool_class = (tool_), .blocks_held = (held_),	\
			.expected_wait_us = (wait_), .cookie = (cookie_), \
			.block_size = (bsize_),				\
		};							\
		DTRACE_PROBE1(kvarena, session_state, &_r);		\
	} while (0)
#endif

#endif /* KVA_TOOLWAIT_USDT_H */
