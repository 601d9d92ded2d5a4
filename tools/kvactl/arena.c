// SPDX-License-Identifier: MIT
/*
 * kvactl arena list|show, and kvactl policy set: arenas as the module's
 * generic netlink family reports them, and their eviction policy.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

static void arena_text_header(void)
{
	printf("%-5s %-16s %-6s %-8s %-7s %-7s %-7s %-8s %-8s %-5s %-5s %s\n",
	       "ID", "NAME", "TENANT", "SIZE", "BLOCK", "BLOCKS", "FREE",
	       "SESSIONS", "POLICY", "LOW", "HIGH", "FD");
}

static int arena_text(const struct kva_nl_arena *a, void *ctx)
{
	const struct kva_arena_info *i = &a->info;
	char sz[32], bs[32];

	(void)ctx;
	if (!a->fd_open) {	/* only the dma-buf holds it: no bookkeeping */
		printf("%-5u %-16s %-6u %-8s %-7s %-7s %-7s %-8s %-8s %-5s %-5s %s\n",
		       i->arena_id, i->name[0] ? i->name : "-", i->tenant_id,
		       kvactl_size(i->bytes, sz, sizeof(sz)),
		       kvactl_size(i->block_size, bs, sizeof(bs)), "-", "-",
		       "-", "-", "-", "-", "closed");
		return 0;
	}
	printf("%-5u %-16s %-6u %-8s %-7s %-7u %-7u %-8u %-8s %-5u %-5u %s\n",
	       i->arena_id, i->name[0] ? i->name : "-", i->tenant_id,
	       kvactl_size(i->bytes, sz, sizeof(sz)),
	       kvactl_size(i->block_size, bs, sizeof(bs)), i->blocks_total,
	       i->blocks_free, i->sessions, kva_policy_name(i->policy),
	       i->low_wm, i->high_wm, "open");
	return 0;
}

static void arena_json(const struct kva_nl_arena *a)
{
	const struct kva_arena_info *i = &a->info;

	printf("{\"id\": %u, \"name\": ", i->arena_id);
	kvactl_json_str(i->name);
	printf(", \"tenant\": %u, \"bytes\": %llu, \"block_size\": %u"
	       ", \"numa_node\": %d, \"blocks\": %u, \"blocks_free\": %u"
	       ", \"sessions\": %u, \"sessions_ended\": %llu"
	       ", \"policy\": \"%s\", \"low_wm\": %u, \"high_wm\": %u"
	       ", \"ttl_ms\": %u, \"dmabuf_attachments\": %u"
	       ", \"events_posted\": %llu, \"events_dropped\": %llu"
	       ", \"fd_open\": %s}",
	       i->tenant_id, i->bytes, i->block_size, i->numa_node,
	       i->blocks_total, i->blocks_free, i->sessions, i->sessions_ended,
	       kva_policy_name(i->policy), i->low_wm, i->high_wm, i->ttl_ms,
	       i->dmabuf_attachments, i->events_posted, i->events_dropped,
	       a->fd_open ? "true" : "false");
}

struct json_list {
	int n;
};

static int arena_json_item(const struct kva_nl_arena *a, void *ctx)
{
	struct json_list *l = ctx;

	printf("%s", l->n++ ? ",\n " : "");
	arena_json(a);
	return 0;
}

static int arena_list(struct kvactl *k)
{
	struct json_list l = { 0 };
	int ret;

	if (k->json) {
		printf("[");
		ret = kva_nl_arenas(k->nl, arena_json_item, &l);
		printf("]\n");
	} else {
		arena_text_header();
		ret = kva_nl_arenas(k->nl, arena_text, NULL);
	}
	return ret ? kvactl_fail(k, "arena list", ret) : 0;
}

static int arena_show(struct kvactl *k, const char *id_s)
{
	struct kva_nl_arena a = { .size = sizeof(a) };
	struct kva_arena_info *i = &a.info;
	char sz[32], bs[32];
	uint32_t id;
	int ret;

	if (kvactl_parse_u32(id_s, &id)) {
		fprintf(stderr, "kvactl: arena show: bad id '%s'\n", id_s);
		return 2;
	}
	ret = kva_nl_arena_get(k->nl, id, &a);
	if (ret)
		return kvactl_fail(k, "arena show", ret);
	if (k->json) {
		arena_json(&a);
		printf("\n");
		return 0;
	}
	printf("arena %u \"%s\"  tenant %u  numa %d  fd %s\n", i->arena_id,
	       i->name, i->tenant_id, i->numa_node,
	       a.fd_open ? "open" : "closed (dma-buf alive)");
	printf("  size %s in 2MiB pages, %u blocks of %s, %u free\n",
	       kvactl_size(i->bytes, sz, sizeof(sz)), i->blocks_total,
	       kvactl_size(i->block_size, bs, sizeof(bs)), i->blocks_free);
	printf("  sessions %u live, %llu ended\n", i->sessions,
	       i->sessions_ended);
	printf("  policy %s  low_wm %u  high_wm %u  ttl %ums\n",
	       kva_policy_name(i->policy), i->low_wm, i->high_wm, i->ttl_ms);
	printf("  dma-buf attachments %u  events %llu posted, %llu"
	       " dropped\n", i->dmabuf_attachments, i->events_posted,
	       i->events_dropped);
	return 0;
}

int kvactl_arena(struct kvactl *k, int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "list"))
		return arena_list(k);
	if (!strcmp(argv[1], "show") && argc == 3)
		return arena_show(k, argv[2]);
	fprintf(stderr, "usage: kvactl arena list | kvactl arena show ID\n");
	return 2;
}

/* kvactl policy set ID POLICY [low N] [high N] [ttl MS] */
int kvactl_policy(struct kvactl *k, int argc, char **argv)
{
	uint32_t id, low = 0, high = 0, ttl = 0, *dst;
	int policy, i, ret;

	if (argc < 4 || strcmp(argv[1], "set"))
		goto usage;
	policy = kva_policy_parse(argv[3]);
	if (kvactl_parse_u32(argv[2], &id) || policy < 0)
		goto usage;
	for (i = 4; i + 1 < argc; i += 2) {
		dst = !strcmp(argv[i], "low") ? &low :
		      !strcmp(argv[i], "high") ? &high :
		      !strcmp(argv[i], "ttl") ? &ttl : NULL;
		if (!dst || kvactl_parse_u32(argv[i + 1], dst))
			goto usage;
	}
	if (i != argc)
		goto usage;
	ret = kva_nl_policy_set(k->nl, id, (uint32_t)policy, low, high, ttl);
	return ret ? kvactl_fail(k, "policy set", ret) : 0;
usage:
	fprintf(stderr, "usage: kvactl policy set ID toolwait|lru|ttl [low N] [high N] [ttl MS]\n");
	return 2;
}
