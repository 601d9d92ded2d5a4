// SPDX-License-Identifier: MIT
/*
 * util.c - small helpers the launcher's files share: notes for people,
 * size parsing, a monotonic clock, and bounded reads and writes of the
 * one-line files cgroupfs is made of.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandbox_internal.h"

void kvs_note(char *note, size_t len, const char *fmt, ...)
{
	size_t used = strnlen(note, len);
	va_list ap;

	if (used + 3 >= len)
		return;
	if (used) {
		memcpy(note + used, "; ", 3);
		used += 2;
	}
	va_start(ap, fmt);
	vsnprintf(note + used, len - used, fmt, ap);
	va_end(ap);
}

/* "123", "64K", "256M", "2G" (powers of 1024); bounded to 1 TiB. */
int kvs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	if (v > (1ull << 40) / mul)
		return -ERANGE;
	*out = v * mul;
	return 0;
}

double kvs_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int kvs_write_file_str(int dirfd, const char *name, const char *val)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(val);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, len);
	if (n < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	close(fd);
	return (size_t)n == len ? 0 : -EIO;
}

ssize_t kvs_read_small(int dirfd, const char *name, char *buf, size_t len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		n = -errno;
	else
		buf[n] = 0;
	close(fd);
	return n;
}
