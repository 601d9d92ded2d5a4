// SPDX-License-Identifier: MIT
/*
 * kvactl arena list|show, and kvactl policy set: arenas as the module's
 * generic netlink family reports them, and their eviction policy.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

const char kvactl_arena_usage[] =
	"usage: kvactl [-j|-p] arena [list]\n"
	"       kvactl [-j|-p] arena show ID\n";
const char kvactl_policy_usage[] =
	"usage: kvactl policy set ID toolwait|lru|ttl [low N] [high N] [ttl MS]\n";

static void arena_text_header(void)
{
	printf("%-5s %-16s %-6s %-8s %-7s %-7s %-7s %-8s %-8s %-5s %-5s %s\n",
	       "ID", "NAME", "TENANT", "SIZE", "BLOCK", "BLOCKS", "FREE",
	       "SESSIONS", "POLICY", "LOW", "HIGH", "FD");
}

/*
 * A closed arena (only a dma-buf holds its memory) has no bookkeeping: the
 * module reports 0 for it, and so do the columns (kvactl(8)).
 */
static int arena_text(const struct kva_nl_arena *a, void *ctx)
{
	const struct kva_arena_info *i = &a->info;
	char sz[32], bs[32];

	(void)ctx;
	printf("%-5u %-16s %-6u %-8s %-7s %-7u %-7u %-8u %-8s %-5u %-5u %s\n",
	       i->arena_id, i->name[0] ? i->name : "-", i->tenant_id,
	       kvactl_size(i->bytes, sz, sizeof(sz)),
	       kvactl_size(i->block_size, bs, sizeof(bs)), i->blocks_total,
	       i->blocks_free, i->sessions, kva_policy_name(i->policy),
	       i->low_wm, i->high_wm, a->fd_open ? "open" : "closed");
	return 0;
}

/* The "arena" object of the JSON schema. */
static json_t *arena_json(const struct kva_nl_arena *a)
{
	const struct kva_arena_info *i = &a->info;

	return json_pack("{s:I, s:s, s:I, s:o, s:I, s:i, s:I, s:I, s:I, s:o,"
			 " s:s, s:I, s:I, s:I, s:I, s:o, s:o, s:b}",
			 "arena_id", (json_int_t)i->arena_id,
			 "name", i->name,
			 "tenant_id", (json_int_t)i->tenant_id,
			 "bytes", kvactl_ju64(i->bytes),
			 "block_size", (json_int_t)i->block_size,
			 "numa_node", (int)i->numa_node,
			 "blocks_total", (json_int_t)i->blocks_total,
			 "blocks_free", (json_int_t)i->blocks_free,
			 "sessions", (json_int_t)i->sessions,
			 "sessions_ended", kvactl_ju64(i->sessions_ended),
			 "policy", kva_policy_name(i->policy),
			 "low_wm", (json_int_t)i->low_wm,
			 "high_wm", (json_int_t)i->high_wm,
			 "ttl_ms", (json_int_t)i->ttl_ms,
			 "dmabuf_attachments", (json_int_t)i->dmabuf_attachments,
			 "events_posted", kvactl_ju64(i->events_posted),
			 "events_dropped", kvactl_ju64(i->events_dropped),
			 "fd_open", a->fd_open ? 1 : 0);
}

static int arena_json_item(const struct kva_nl_arena *a, void *ctx)
{
	json_t *obj = arena_json(a);

	if (!obj || json_array_append_new(ctx, obj))
		return -ENOMEM;
	return 0;
}

static int arena_list(struct kvactl *k)
{
	json_t *list = NULL;
	int ret;

	if (kvactl_nl(k))
		return 1;
	if (k->json) {
		list = json_array();
		if (!list)
			return kvactl_fail(k, "arena list", -ENOMEM);
		ret = kva_nl_arenas(k->nl, arena_json_item, list);
		if (!ret)
			kvactl_json_print(k, list);
		else
			json_decref(list);
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
		return kvactl_usage_error(kvactl_arena_usage);
	}
	if (kvactl_nl(k))
		return 1;
	ret = kva_nl_arena_get(k->nl, id, &a);
	if (ret)
		return kvactl_fail(k, "arena show", ret);
	if (k->json) {
		kvactl_json_print(k, arena_json(&a));
		return 0;
	}
	printf("arena %u \"%s\"  tenant %u  numa %d  fd %s\n", i->arena_id,
	       i->name, i->tenant_id, i->numa_node,
	       a.fd_open ? "open" : "closed (dma-buf alive)");
	printf("  size %s in 2MiB pages, %u blocks of %s, %u free\n",
	       kvactl_size(i->bytes, sz, sizeof(sz)), i->blocks_total,
	       kvactl_size(i->block_size, bs, sizeof(bs)), i->blocks_free);
	printf("  sessions %u live, %llu ended\n", i->sessions,
	       (unsigned long long)i->sessions_ended);
	printf("  policy %s  low_wm %u  high_wm %u  ttl %ums\n",
	       kva_policy_name(i->policy), i->low_wm, i->high_wm, i->ttl_ms);
	printf("  dma-buf attachments %u  events %llu posted, %llu"
	       " dropped\n", i->dmabuf_attachments,
	       (unsigned long long)i->events_posted,
	       (unsigned long long)i->events_dropped);
	return 0;
}

int kvactl_arena(struct kvactl *k, int argc, char **argv)
{
	if (argc == 1 || (argc == 2 && !strcmp(argv[1], "list")))
		return arena_list(k);
	if (argc == 3 && !strcmp(argv[1], "show"))
		return arena_show(k, argv[2]);
	return kvactl_usage_error(kvactl_arena_usage);
}

/* kvactl policy set ID POLICY [low N] [high N] [ttl MS] */
int kvactl_policy(struct kvactl *k, int argc, char **argv)
{
	uint32_t id, low = 0, high = 0, ttl = 0, *dst;
	int policy, i, ret;

	if (argc < 4 || strcmp(argv[1], "set"))
		return kvactl_usage_error(kvactl_policy_usage);
	policy = kva_policy_parse(argv[3]);
	if (kvactl_parse_u32(argv[2], &id) || policy < 0)
		return kvactl_usage_error(kvactl_policy_usage);
	for (i = 4; i + 1 < argc; i += 2) {
		dst = !strcmp(argv[i], "low") ? &low :
		      !strcmp(argv[i], "high") ? &high :
		      !strcmp(argv[i], "ttl") ? &ttl : NULL;
		if (!dst || kvactl_parse_u32(argv[i + 1], dst))
			return kvactl_usage_error(kvactl_policy_usage);
	}
	if (i != argc)
		return kvactl_usage_error(kvactl_policy_usage);
	if (kvactl_nl(k))
		return 1;
	ret = kva_nl_policy_set(k->nl, id, (uint32_t)policy, low, high, ttl);
	return ret ? kvactl_fail(k, "policy set", ret) : 0;
}
