// SPDX-License-Identifier: MIT
/*
 * log.c - kvarenad's log lines (see log.h). Each line is formatted into one
 * buffer and written with one write(2), so lines from concurrent threads and
 * worker processes never interleave. Under systemd the <N> prefix gives
 * journald the priority; elsewhere a UTC timestamp leads.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int log_level = KVD_LOG_INFO;

void kvd_log_set_level(enum kvd_log_level level)
{
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

void kvd_log(enum kvd_log_level level, const char *component,
	     const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	static const int syslog_prio[] = { 3, 4, 6, 7 };
	char line[2048];
	size_t n = 0;
	va_list ap;
	int r;

	if ((int)level > __atomic_load_n(&log_level, __ATOMIC_RELAXED))
		return;
	if (getenv("JOURNAL_STREAM")) {
		r = snprintf(line, sizeof(line), "<%d>", syslog_prio[level]);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		r = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ",
			     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			     tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
	}
	n = r > 0 ? (size_t)r : 0;
	r = snprintf(line + n, sizeof(line) - n, "%s %s: ", names[level], component);
	n += r > 0 ? (size_t)r : 0;
	if (n < sizeof(line)) {
		va_start(ap, fmt);
		r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
		va_end(ap);
		n += r > 0 ? (size_t)r : 0;
	}
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}
