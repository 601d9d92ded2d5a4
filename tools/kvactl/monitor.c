// SPDX-License-Identifier: MIT
/*
 * kvactl monitor [--count N] [--timeout SECONDS]: the module's multicast
 * events as they happen, one line (or one JSON object) each.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

static const char *event_name(const struct kva_nl_event *e)
{
	if (e->kind == KVA_NL_EV_ARENA_NEW)
		return "arena-created";
	if (e->kind == KVA_NL_EV_ARENA_DEL)
		return "arena-destroyed";
	switch (e->ev.type) {
	case KVA_EVENT_PRESSURE:
		return "pressure";
	case KVA_EVENT_QUOTA:
		return "quota";
	case KVA_EVENT_SESSION_ENDED:
		return "session-ended";
	}
	return "unknown";
}

static void event_json(const struct kva_nl_event *e)
{
	const struct kva_event *v = &e->ev;
	uint32_t i;

	printf("{\"event\": \"%s\", \"arena\": %u", event_name(e), v->arena_id);
	if (e->kind != KVA_NL_EV_EVENT) {
		printf(", \"name\": ");
		kvactl_json_str(e->name);
		printf(", \"tenant\": %u, \"bytes\": %llu}\n",
		       v->tenant_id, (unsigned long long)e->bytes);
		return;
	}
	printf(", \"seq\": %llu, \"time_ns\": %llu"
	       ", \"session\": %u, \"tenant\": %u, \"blocks_free\": %u"
	       ", \"low_wm\": %u, \"requested\": %u, \"pid\": %u, \"victims\": [",
	       v->seq, v->time_ns, v->session_id, v->tenant_id, v->blocks_free,
	       v->low_wm, v->requested, v->pid);
	for (i = 0; i < v->nvictims; i++)
		printf("%s{\"session\": %u, \"state\": \"%s\", \"blocks\": %u"
		       ", \"tool_class\": %u, \"score\": %llu"
		       ", \"idle_ns\": %llu}", i ? ", " : "",
		       v->victims[i].session_id,
		       kva_state_name(v->victims[i].state),
		       v->victims[i].blocks_held, v->victims[i].tool_class,
		       v->victims[i].score, v->victims[i].idle_ns);
	printf("]}\n");
}

static void event_text(const struct kva_nl_event *e)
{
	const struct kva_event *v = &e->ev;
	char sz[32];
	uint32_t i;

	switch (e->kind == KVA_NL_EV_EVENT ? v->type : 0) {
	case KVA_EVENT_PRESSURE:
		printf("arena %u seq %llu pressure: %u free < low %u; victims",
		       v->arena_id, v->seq, v->blocks_free, v->low_wm);
		for (i = 0; i < v->nvictims; i++)
			printf(" %u(%s,%u blk)", v->victims[i].session_id,
			       kva_state_name(v->victims[i].state),
			       v->victims[i].blocks_held);
		printf("%s\n", v->nvictims ? "" : " none");
		break;
	case KVA_EVENT_QUOTA:
		printf("arena %u seq %llu quota: tenant %u session %u requested %u\n",
		       v->arena_id, v->seq, v->tenant_id, v->session_id,
		       v->requested);
		break;
	case KVA_EVENT_SESSION_ENDED:
		printf("arena %u seq %llu session-ended: %u by pid %u\n",
		       v->arena_id, v->seq, v->session_id, v->pid);
		break;
	default:
		printf("arena %u %s \"%s\" tenant %u %s\n", v->arena_id,
		       event_name(e), e->name, v->tenant_id,
		       kvactl_size(e->bytes, sz, sizeof(sz)));
	}
}

int kvactl_monitor(struct kvactl *k, int argc, char **argv)
{
	uint32_t count = 0, timeout = 0, seen = 0;
	struct kva_nl_event e = { .size = sizeof(e) };
	int i, ret;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--count") &&
		    !kvactl_parse_u32(argv[i + 1], &count))
			continue;
		if (!strcmp(argv[i], "--timeout") &&
		    !kvactl_parse_u32(argv[i + 1], &timeout))
			continue;
		goto usage;
	}
	if (i != argc)
		goto usage;
	ret = kva_nl_subscribe(k->nl);
	if (ret)
		return kvactl_fail(k, "monitor", ret);
	/* On stderr in JSON mode too: scripts can wait for this line. */
	fprintf(stderr, "kvactl: monitoring kvarena events (Ctrl-C to stop)\n");
	fflush(stderr);
	while (!count || seen < count) {
		ret = kva_nl_next_event(k->nl, &e,
					timeout ? (int)timeout * 1000 : -1);
		if (ret == -EAGAIN)
			continue;		/* not an event */
		if (ret < 0)
			return kvactl_fail(k, "monitor", ret);
		if (!ret)
			break;			/* timed out */
		if (k->json)
			event_json(&e);
		else
			event_text(&e);
		fflush(stdout);
		seen++;
	}
	return 0;
usage:
	fprintf(stderr, "usage: kvactl monitor [--count N] [--timeout SECONDS]\n");
	return 2;
}
