/* SPDX-License-Identifier: MIT */
/*
 * rawsys.h - system calls for a spawn's child, which shares the caller's
 * memory: KVS_SYS() returns the result or -errno and writes no errno (the
 * child runs on the caller's thread-local storage, whose errno the calling
 * thread is using meanwhile), and kvs_clone3_vm() starts the child on a
 * stack of its own in a function (the parent's stack and frame are not the
 * child's to return into).
 *
 * On x86-64 these are the instructions themselves and KVS_CLONE_VM is 1.
 * Elsewhere (or built with -DKVS_NO_CLONE_VM, which tests that path here)
 * KVS_SYS() wraps syscall() and spawns copy the address space as before
 * (KVS_CLONE_VM 0): there the child's errno is its own.
 */
#ifndef KVS_RAWSYS_H
#define KVS_RAWSYS_H

#include <errno.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) && !defined(KVS_NO_CLONE_VM)
#define KVS_CLONE_VM 1

static inline long kvs_sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/*
 * clone3() whose child calls fn(arg) on the stack the arguments name (the
 * kernel sets the child's stack pointer to stack + stack_size) and exits
 * with 127 should fn return. The parent gets the child's pid or -errno.
 */
static inline long kvs_clone3_vm(void *args, size_t size, void (*fn)(void *), void *arg)
{
	register void *r8 __asm__("r8") = (void *)fn;
	register void *r9 __asm__("r9") = arg;
	long ret;

	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t"	/* the child's outermost frame */
			 "mov %%r9, %%rdi\n\t"
			 "call *%%r8\n\t"
			 "mov $231, %%eax\n\t"		/* exit_group(127) */
			 "mov $127, %%edi\n\t"
			 "syscall\n\t"
			 "hlt\n"
			 "1:"
			 : "=a"(ret)
			 : "0"((long)SYS_clone3), "D"(args), "S"(size), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
#define KVS_CLONE_VM 0

static inline long kvs_sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret = syscall(n, a, b, c, d, e, f);

	return ret < 0 ? -errno : ret;
}
#endif

/* KVS_SYS(SYS_x, args...): up to six arguments, the unused ones 0 */
#define KVS_SYS(...) KVS_SYS_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)
#define KVS_SYS_(n, a, b, c, d, e, f, ...) \
	kvs_sys6((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

#endif
