// SPDX-License-Identifier: MIT
/* kvactl shared helpers (see kvactl.h). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvactl.h"

int kvactl_nl(struct kvactl *k)
{
	int ret = kva_nl_open(&k->nl);

	if (!ret)
		return 0;
	k->nl = NULL;
	fprintf(stderr, "kvactl: %s\n", ret == -ENOENT ?
		"no kvarena netlink family: is kvarena.ko loaded?" :
		strerror(-ret));
	return 1;
}

bool kvactl_is_help(const char *arg)
{
	return !strcmp(arg, "help") || !strcmp(arg, "-h") ||
	       !strcmp(arg, "--help");
}

/*
 * `OBJECT help`, `OBJECT COMMAND help`, or -h/--help anywhere: the object's
 * usage, before anything is opened.
 */
bool kvactl_wants_help(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return (argc > 1 && !strcmp(argv[1], "help")) ||
	       (argc > 2 && !strcmp(argv[2], "help"));
}

int kvactl_usage_error(const char *usage)
{
	fputs(usage, stderr);
	return 2;
}

void kvactl_json_print(const struct kvactl *k, json_t *v)
{
	size_t flags = JSON_PRESERVE_ORDER;

	if (!v) {
		fprintf(stderr, "kvactl: out of memory building JSON\n");
		return;
	}
	if (k->json == KVACTL_PRETTY)
		flags |= JSON_INDENT(2);
	json_dumpf(v, stdout, flags);
	putchar('\n');
	json_decref(v);
}

json_t *kvactl_ju64(uint64_t v)
{
	char buf[24];

	if (v <= (uint64_t)INT64_MAX)
		return json_integer((json_int_t)v);
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return json_string(buf);
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
	int base = 10;
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!isxdigit((unsigned char)s[0]))
			return -EINVAL;
	}
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}
