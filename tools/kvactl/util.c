// SPDX-License-Identifier: MIT
/* kvactl output helpers (see kvactl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvactl.h"

void kvactl_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

const char *kvactl_size(uint64_t bytes, char *buf, size_t len)
{
	if (bytes && !(bytes % (1ULL << 30)))
		snprintf(buf, len, "%" PRIu64 "GiB", bytes >> 30);
	else if (bytes && !(bytes % (1ULL << 20)))
		snprintf(buf, len, "%" PRIu64 "MiB", bytes >> 20);
	else if (bytes && !(bytes % 1024))
		snprintf(buf, len, "%" PRIu64 "KiB", bytes >> 10);
	else
		snprintf(buf, len, "%" PRIu64 "B", bytes);
	return buf;
}

const char *kvactl_dur(uint64_t ns, char *buf, size_t len)
{
	if (ns >= 1000000000ULL)
		snprintf(buf, len, "%.3fs", (double)ns / 1e9);
	else if (ns >= 1000000ULL)
		snprintf(buf, len, "%" PRIu64 "ms", ns / 1000000);
	else
		snprintf(buf, len, "%" PRIu64 "us", ns / 1000);
	return buf;
}

uint64_t kvactl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int kvactl_fail(struct kvactl *k, const char *what, int err)
{
	const char *ext = k->nl ? kva_nl_error(k->nl) : "";

	fprintf(stderr, "kvactl: %s: %s%s%s\n", what, strerror(-err),
		*ext ? ": " : "", ext);
	return 1;
}

int kvactl_parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || !*s || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}
