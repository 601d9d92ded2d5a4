// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The library's one way of saying things: a caller-set logger (none by
 * default: the library never prints).  libbpf's messages are routed here
 * while the tool-wait loader calls libbpf (lib/toolwait.c), and the AUTO
 * backend says here why it fell back to memfd.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static kva_log_fn kva_logger;
static void *kva_logger_ctx;
static pthread_mutex_t kva_log_lock = PTHREAD_MUTEX_INITIALIZER;

KVA_EXPORT void kva_set_logger(kva_log_fn fn, void *ctx)
{
	pthread_mutex_lock(&kva_log_lock);
	kva_logger = fn;
	kva_logger_ctx = ctx;
	pthread_mutex_unlock(&kva_log_lock);
}

bool kva_log_enabled(void)
{
	bool on;

	pthread_mutex_lock(&kva_log_lock);
	on = kva_logger != NULL;
	pthread_mutex_unlock(&kva_log_lock);
	return on;
}

void kva_vlog(int level, const char *fmt, va_list ap)
{
	char msg[512];
	kva_log_fn fn;
	void *ctx;
	size_t n;

	pthread_mutex_lock(&kva_log_lock);
	fn = kva_logger;
	ctx = kva_logger_ctx;
	pthread_mutex_unlock(&kva_log_lock);
	if (!fn)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')		/* one message, no newline */
		msg[--n] = 0;
	fn(level, msg, ctx);
}

void kva_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kva_vlog(level, fmt, ap);
	va_end(ap);
}
