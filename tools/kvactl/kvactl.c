// SPDX-License-Identifier: MIT
/*
 * kvactl: the kvarena operator CLI, in the manner of ip(8): terse aligned
 * text by default, -j for JSON.  Everything but `toolwait` speaks the
 * module's generic netlink family, so no arena fd is needed.
 */
#include <errno.h>
#include <string.h>

#include "kvactl.h"
#include "toolwait.h"

static int usage(int ret)
{
	fprintf(ret ? stderr : stdout,
		"usage: kvactl [-j] OBJECT COMMAND\n"
		"  arena list                      arenas, one per line\n"
		"  arena show ID                   one arena in detail\n"
		"  session list [--arena ID]       sessions (of one arena)\n"
		"  policy set ID toolwait|lru|ttl [low N] [high N] [ttl MS]\n"
		"  monitor [--count N] [--timeout S]   live events\n"
		"  toolwait [...]                  tool-wait histograms (eBPF)\n"
		"  -j: JSON output.  See kvactl(8).\n");
	return ret;
}

int main(int argc, char **argv)
{
	struct kvactl k = { 0 };
	int ret;

	while (argc > 1 && argv[1][0] == '-') {
		if (!strcmp(argv[1], "-j") || !strcmp(argv[1], "--json"))
			k.json = true;
		else if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
			return usage(0);
		else
			return usage(2);
		argc--;
		argv++;
	}
	if (argc < 2)
		return usage(2);
	if (!strcmp(argv[1], "toolwait"))
		return kvactl_toolwait(argc - 1, argv + 1, k.json) ? 1 : 0;
	ret = kva_nl_open(&k.nl);
	if (ret) {
		fprintf(stderr, "kvactl: %s\n", ret == -ENOENT ?
			"no kvarena netlink family: is kvarena.ko loaded?" :
			strerror(-ret));
		return 1;
	}
	if (!strcmp(argv[1], "arena"))
		ret = kvactl_arena(&k, argc - 1, argv + 1);
	else if (!strcmp(argv[1], "session"))
		ret = kvactl_session(&k, argc - 1, argv + 1);
	else if (!strcmp(argv[1], "policy"))
		ret = kvactl_policy(&k, argc - 1, argv + 1);
	else if (!strcmp(argv[1], "monitor"))
		ret = kvactl_monitor(&k, argc - 1, argv + 1);
	else
		ret = usage(2);
	kva_nl_close(k.nl);
	return ret;
}
