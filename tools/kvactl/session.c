// SPDX-License-Identifier: MIT
/* kvactl session list [--arena ID]: sessions from the netlink dump. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

const char kvactl_session_usage[] =
	"usage: kvactl [-j|-p] session [list] [--arena ID]\n";

struct walk {
	struct kvactl *k;
	uint64_t now;
	json_t *list;
};

/* Where the runtime keeps the session's KV (its word: KVA_SESSION_STATE_TIER). */
static const char *tier_name(uint32_t tier)
{
	static const char *const names[] = {
		[KVA_TIER_ARENA] = "arena",
		[KVA_TIER_DISK] = "disk",
		[KVA_TIER_NONE] = "none",
	};

	return tier <= KVA_TIER_MAX ? names[tier] : "?";
}

/* The "session" object of the JSON schema. */
static json_t *session_json(const struct kva_nl_session *s, uint64_t in_state)
{
	const struct kva_session_info *i = &s->info;

	return json_pack("{s:I, s:I, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o,"
			 " s:o, s:o}",
			 "arena_id", (json_int_t)s->arena_id,
			 "session_id", (json_int_t)i->session_id,
			 "state", kva_state_name(i->state),
			 "tier", tier_name(i->tier),
			 "tool_class", (json_int_t)i->tool_class,
			 "blocks_held", (json_int_t)i->blocks_held,
			 "expected_wait_us", kvactl_ju64(i->expected_wait_us),
			 "cookie", kvactl_ju64(i->cookie),
			 "in_state_ns", kvactl_ju64(in_state),
			 "transitions", kvactl_ju64(i->transitions),
			 "idle_block_us", kvactl_ju64(i->idle_block_us),
			 "idle_byte_sec", kvactl_ju64(i->idle_byte_sec));
}

static int session_row(const struct kva_nl_session *s, void *ctx)
{
	const struct kva_session_info *i = &s->info;
	struct walk *w = ctx;
	uint64_t in_state = w->now > i->state_since_ns ?
			    w->now - i->state_since_ns : 0;
	char d1[32], d2[32];

	if (w->list) {
		json_t *obj = session_json(s, in_state);

		if (!obj || json_array_append_new(w->list, obj))
			return -ENOMEM;
		return 0;
	}
	printf("%-5u %-12llu %-9s %-5s %-4u %-7u %-10llu %-9s %-9s %llu\n",
	       s->arena_id, (unsigned long long)i->session_id,
	       kva_state_name(i->state), tier_name(i->tier),
	       i->tool_class, i->blocks_held,
	       (unsigned long long)i->idle_byte_sec,
	       kvactl_dur(in_state, d1, sizeof(d1)),
	       i->state == KVA_STATE_TOOL_WAIT ?
	       kvactl_dur(i->expected_wait_us * 1000, d2, sizeof(d2)) : "-",
	       (unsigned long long)i->cookie);
	return 0;
}

int kvactl_session(struct kvactl *k, int argc, char **argv)
{
	struct walk w = { .k = k };
	uint32_t arena = 0;
	int i = 1, ret;

	if (i < argc && !strcmp(argv[i], "list"))
		i++;
	if (i + 1 < argc && (!strcmp(argv[i], "--arena") ||
			     !strcmp(argv[i], "-a"))) {
		if (kvactl_parse_u32(argv[i + 1], &arena))
			return kvactl_usage_error(kvactl_session_usage);
		i += 2;
	}
	if (i != argc)
		return kvactl_usage_error(kvactl_session_usage);
	if (kvactl_nl(k))
		return 1;
	w.now = kvactl_now_ns();
	if (k->json) {
		w.list = json_array();
		if (!w.list)
			return kvactl_fail(k, "session list", -ENOMEM);
	} else {
		printf("%-5s %-12s %-9s %-5s %-4s %-7s %-10s %-9s %-9s %s\n",
		       "ARENA", "SESSION", "STATE", "TIER", "TOOL", "BLOCKS", "IDLE_B*S",
		       "FOR", "EXPECTED", "COOKIE");
	}
	ret = kva_nl_sessions(k->nl, arena, session_row, &w);
	if (w.list) {
		if (!ret)
			kvactl_json_print(k, w.list);
		else
			json_decref(w.list);
	}
	return ret ? kvactl_fail(k, "session list", ret) : 0;
}
