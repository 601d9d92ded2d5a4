/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The memfd backend's USDT probe: kvarena:session_state, the user-space
 * twin of the module's kvarena:kvarena_session_state tracepoint (same
 * arguments, same order), read by bpf/toolwait.bpf.c when there is no
 * module.
 *
 * Stock <sys/sdt.h> marks the probe site with a one-byte `nop`; a uprobe
 * there costs 6-10 us per hit on our hosts, while a 5-byte nop
 * (0f 1f 44 00 00) lets the kernel take its cheaper path (~1.6-2 us).  So
 * the site is a 5-byte nop.  Detached, the probe costs that nop and the
 * argument set-up.
 */
#ifndef KVA_TOOLWAIT_USDT_H
#define KVA_TOOLWAIT_USDT_H

#ifdef KVA_NO_USDT
#define KVA_USDT_SESSION_STATE(arena, session, old, new, tool, wait_us,	\
			       blocks, bsize, cookie)			\
	do { } while (0)
#else
#include <sys/sdt.h>
#undef _SDT_NOP
#define _SDT_NOP .nops 5
#define KVA_USDT_SESSION_STATE(arena, session, old, new, tool, wait_us,	\
			       blocks, bsize, cookie)			\
	DTRACE_PROBE9(kvarena, session_state, arena, session, old, new,	\
		      tool, wait_us, blocks, bsize, cookie)
#endif

#endif /* KVA_TOOLWAIT_USDT_H */
