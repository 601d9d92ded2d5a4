/* SPDX-License-Identifier: MIT */
/*
 * nojit.h - refuse executable memory to the calling process from now on,
 * as a hardened service's MemoryDenyWriteExecute does: a seccomp filter
 * fails every mmap, mprotect and pkey_mprotect asking for PROT_EXEC with
 * EPERM. PCRE2 then cannot JIT-compile and its interpreter runs the
 * patterns. For a forked child (the filter cannot be taken back).
 * Link with -lseccomp.
 */
#ifndef KVE_NOJIT_H
#define KVE_NOJIT_H

#include <errno.h>
#include <seccomp.h>
#include <sys/mman.h>

/* 0, or -1 where no filter could be loaded */
static int refuse_exec_memory(void)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	int rc;

	if (!f)
		return -1;
	rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mmap), 1,
			      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)) ||
	     seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mprotect), 1,
			      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)) ||
	     seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(pkey_mprotect), 1,
			      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC)) ||
	     seccomp_load(f);
	seccomp_release(f);
	return rc ? -1 : 0;
}

#endif
