// SPDX-License-Identifier: MIT
/* kvactl session list [--arena ID]: sessions from the netlink dump. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

struct walk {
	struct kvactl *k;
	uint64_t now;
	int n;
};

static int session_row(const struct kva_nl_session *s, void *ctx)
{
	const struct kva_session_info *i = &s->info;
	struct walk *w = ctx;
	unsigned long long in_state = w->now > i->state_since_ns ?
			    w->now - i->state_since_ns : 0;
	char d1[32], d2[32];

	if (w->k->json) {
		printf("%s{\"arena\": %u, \"session\": %u, \"state\": \"%s\""
		       ", \"tool_class\": %u, \"blocks\": %u"
		       ", \"expected_wait_us\": %llu, \"cookie\": %llu"
		       ", \"in_state_ns\": %llu, \"transitions\": %llu"
		       ", \"idle_block_us\": %llu"
		       ", \"idle_byte_sec\": %llu}",
		       w->n ? ",\n " : "", s->arena_id, i->session_id,
		       kva_state_name(i->state), i->tool_class, i->blocks_held,
		       i->expected_wait_us, i->cookie, in_state, i->transitions,
		       i->idle_block_us, i->idle_byte_sec);
	} else {
		printf("%-5u %-8u %-9s %-4u %-7u %-10llu %-9s %-9s %llu\n",
		       s->arena_id, i->session_id, kva_state_name(i->state),
		       i->tool_class, i->blocks_held, i->idle_byte_sec,
		       kvactl_dur(in_state, d1, sizeof(d1)),
		       i->state == KVA_STATE_TOOL_WAIT ?
		       kvactl_dur(i->expected_wait_us * 1000, d2, sizeof(d2)) : "-",
		       i->cookie);
	}
	w->n++;
	return 0;
}

int kvactl_session(struct kvactl *k, int argc, char **argv)
{
	struct walk w = { .k = k, .now = kvactl_now_ns() };
	uint32_t arena = 0;
	int ret;

	if (argc >= 2 && strcmp(argv[1], "list"))
		goto usage;
	if (argc == 4 && !strcmp(argv[2], "--arena")) {
		if (kvactl_parse_u32(argv[3], &arena))
			goto usage;
	} else if (argc > 2) {
		goto usage;
	}
	if (k->json)
		printf("[");
	else
		printf("%-5s %-8s %-9s %-4s %-7s %-10s %-9s %-9s %s\n", "ARENA",
		       "SESSION", "STATE", "TOOL", "BLOCKS", "IDLE_B*S",
		       "FOR", "EXPECTED", "COOKIE");
	ret = kva_nl_sessions(k->nl, arena, session_row, &w);
	if (k->json)
		printf("]\n");
	return ret ? kvactl_fail(k, "session list", ret) : 0;
usage:
	fprintf(stderr, "usage: kvactl session list [--arena ID]\n");
	return 2;
}
