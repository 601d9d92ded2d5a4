// SPDX-License-Identifier: MIT
/*
 * kvactl: the kvarena operator CLI, in the manner of ip(8) and bpftool:
 * terse aligned text by default, -j for JSON, -p for indented JSON.
 * Everything but `toolwait` speaks the module's generic netlink family, so
 * no arena fd is needed.  Help and usage errors are answered before
 * anything is opened, so they work without the module.
 */
#include <errno.h>
#include <string.h>

#include "kvactl.h"
#include "toolwait.h"

static const char kvactl_usage[] =
	"usage: kvactl [OPTIONS] OBJECT [COMMAND [ARGS]]\n"
	"       kvactl help | OBJECT help | help json\n"
	"objects:\n"
	"  arena list | show ID                arenas\n"
	"  session list [--arena ID]           sessions\n"
	"  policy set ID toolwait|lru|ttl [low N] [high N] [ttl MS]\n"
	"  monitor [--arena ID] [--count N] [--timeout S]   live events\n"
	"  toolwait [-p DIR] [--arena ID] [-T] [interval [count]]   tool waits (eBPF)\n"
	"options:\n"
	"  -j, --json      JSON output (one line per object)\n"
	"  -p, --pretty    indented JSON (implies -j)\n"
	"  -V, --version   versions of kvactl and libkvarena\n"
	"  -h, --help      this text\n"
	"`kvactl help json` prints the JSON schema.  See kvactl(8).\n";

struct kvactl_object {
	const char *name;
	const char *usage;
	int (*run)(struct kvactl *k, int argc, char **argv);
};

static int kvactl_toolwait_run(struct kvactl *k, int argc, char **argv)
{
	return kvactl_toolwait(argc, argv, k->json);
}

static const struct kvactl_object kvactl_objects[] = {
	{ "arena", kvactl_arena_usage, kvactl_arena },
	{ "session", kvactl_session_usage, kvactl_session },
	{ "policy", kvactl_policy_usage, kvactl_policy },
	{ "monitor", kvactl_monitor_usage, kvactl_monitor },
	{ "toolwait", kvactl_toolwait_usage, kvactl_toolwait_run },
};

static int kvactl_version(void)
{
	printf("kvactl %s, libkvarena %s\n", KVACTL_VERSION,
	       kva_lib_version_string());
	return 0;
}

int main(int argc, char **argv)
{
	struct kvactl k = { 0 };
	size_t i;
	int ret;

	while (argc > 1 && argv[1][0] == '-') {
		if (!strcmp(argv[1], "-j") || !strcmp(argv[1], "--json")) {
			if (k.json == KVACTL_TEXT)
				k.json = KVACTL_JSON;
		} else if (!strcmp(argv[1], "-p") ||
			   !strcmp(argv[1], "--pretty")) {
			k.json = KVACTL_PRETTY;
		} else if (!strcmp(argv[1], "-V") ||
			   !strcmp(argv[1], "--version")) {
			return kvactl_version();
		} else if (!strcmp(argv[1], "-h") ||
			   !strcmp(argv[1], "--help")) {
			fputs(kvactl_usage, stdout);
			return 0;
		} else {
			fprintf(stderr, "kvactl: unknown option '%s'\n",
				argv[1]);
			return kvactl_usage_error(kvactl_usage);
		}
		argc--;
		argv++;
	}
	if (argc < 2)
		return kvactl_usage_error(kvactl_usage);
	if (!strcmp(argv[1], "help")) {
		if (argc == 2) {
			fputs(kvactl_usage, stdout);
			return 0;
		}
		if (argc == 3 && !strcmp(argv[2], "json")) {
			fputs(kvactl_json_schema, stdout);
			return 0;
		}
		for (i = 0; i < sizeof(kvactl_objects) / sizeof(kvactl_objects[0]); i++)
			if (argc == 3 && !strcmp(argv[2], kvactl_objects[i].name)) {
				fputs(kvactl_objects[i].usage, stdout);
				return 0;
			}
		return kvactl_usage_error(kvactl_usage);
	}
	for (i = 0; i < sizeof(kvactl_objects) / sizeof(kvactl_objects[0]); i++) {
		const struct kvactl_object *o = &kvactl_objects[i];

		if (strcmp(argv[1], o->name))
			continue;
		if (kvactl_wants_help(argc - 1, argv + 1)) {
			fputs(o->usage, stdout);
			return 0;
		}
		ret = o->run(&k, argc - 1, argv + 1);
		kva_nl_close(k.nl);
		return ret;
	}
	fprintf(stderr, "kvactl: unknown object '%s'\n", argv[1]);
	return kvactl_usage_error(kvactl_usage);
}
