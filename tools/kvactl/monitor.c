// SPDX-License-Identifier: MIT
/*
 * kvactl monitor [--arena ID] [--count N] [--timeout SECONDS]: the
 * module's multicast events as they happen, one line (or one JSON object)
 * each.  Events can be lost on the way (the socket's queue overran, or an
 * arena posted more than the module multicasts per second): then the
 * monitor reads every arena back with a dump and reports each one whose
 * free blocks are below its low watermark as a pressure event with seq 0,
 * so that no arena under pressure goes unreported.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "kvactl.h"

const char kvactl_monitor_usage[] =
	"usage: kvactl [-j|-p] monitor [--arena ID] [--count N] [--timeout SECONDS]\n";

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

/*
 * The "event" object of the JSON schema: every key in every event (0, ""
 * or [] where it does not apply), so that one schema describes them all.
 */
static json_t *event_json(const char *name, const struct kva_nl_event *e)
{
	const struct kva_event *v = &e->ev;
	json_t *victims = json_array();
	uint32_t i;

	for (i = 0; victims && i < v->nvictims && i < KVA_EVENT_MAX_VICTIMS; i++)
		json_array_append_new(victims, json_pack(
			"{s:I, s:s, s:I, s:I, s:o, s:o}",
			"session_id", (json_int_t)v->victims[i].session_id,
			"state", kva_state_name(v->victims[i].state),
			"blocks_held", (json_int_t)v->victims[i].blocks_held,
			"tool_class", (json_int_t)v->victims[i].tool_class,
			"score", kvactl_ju64(v->victims[i].score),
			"idle_ns", kvactl_ju64(v->victims[i].idle_ns)));
	return json_pack("{s:s, s:I, s:I, s:s, s:o, s:o, s:o, s:I, s:I, s:I,"
			 " s:I, s:I, s:o}",
			 "event", name,
			 "arena_id", (json_int_t)v->arena_id,
			 "tenant_id", (json_int_t)v->tenant_id,
			 "name", e->name,
			 "bytes", kvactl_ju64(e->bytes),
			 "seq", kvactl_ju64(v->seq),
			 "time_ns", kvactl_ju64(v->time_ns),
			 "session_id", (json_int_t)v->session_id,
			 "blocks_free", (json_int_t)v->blocks_free,
			 "low_wm", (json_int_t)v->low_wm,
			 "requested", (json_int_t)v->requested,
			 "pid", (json_int_t)v->pid,
			 "victims", victims);
}

static void event_text(const struct kva_nl_event *e)
{
	const struct kva_event *v = &e->ev;
	char sz[32];
	uint32_t i;

	switch (e->kind == KVA_NL_EV_EVENT ? v->type : 0) {
	case KVA_EVENT_PRESSURE:
		printf("arena %u seq %llu pressure: %u free < low %u; victims",
		       v->arena_id, (unsigned long long)v->seq, v->blocks_free,
		       v->low_wm);
		for (i = 0; i < v->nvictims && i < KVA_EVENT_MAX_VICTIMS; i++)
			printf(" %llu(%s,%u blk)",
			       (unsigned long long)v->victims[i].session_id,
			       kva_state_name(v->victims[i].state),
			       v->victims[i].blocks_held);
		printf("%s\n", v->nvictims ? "" : " none");
		break;
	case KVA_EVENT_QUOTA:
		printf("arena %u seq %llu quota: tenant %u session %llu requested %u\n",
		       v->arena_id, (unsigned long long)v->seq, v->tenant_id,
		       (unsigned long long)v->session_id, v->requested);
		break;
	case KVA_EVENT_SESSION_ENDED:
		printf("arena %u seq %llu session-ended: %llu by pid %u\n",
		       v->arena_id, (unsigned long long)v->seq,
		       (unsigned long long)v->session_id, v->pid);
		break;
	default:
		printf("arena %u %s \"%s\" tenant %u %s\n", v->arena_id,
		       event_name(e), e->name, v->tenant_id,
		       kvactl_size(e->bytes, sz, sizeof(sz)));
	}
}

struct resync {
	struct kvactl *k;
	uint32_t arena;			/* 0: every arena */
	uint32_t reported;
};

static void report(struct kvactl *k, const struct kva_nl_event *e)
{
	if (k->json)
		kvactl_json_print(k, event_json(event_name(e), e));
	else
		event_text(e);
	fflush(stdout);
}

static int resync_arena(const struct kva_nl_arena *a, void *ctx)
{
	struct resync *r = ctx;
	struct kva_nl_event e = { .size = sizeof(e), .kind = KVA_NL_EV_EVENT };

	if (!a->fd_open || (r->arena && a->info.arena_id != r->arena) ||
	    a->info.blocks_free >= a->info.low_wm)
		return 0;
	e.ev.type = KVA_EVENT_PRESSURE;		/* seq 0: from the dump */
	e.ev.arena_id = a->info.arena_id;
	e.ev.tenant_id = a->info.tenant_id;
	e.ev.blocks_free = a->info.blocks_free;
	e.ev.low_wm = a->info.low_wm;
	e.bytes = a->info.bytes;
	memcpy(e.name, a->info.name, sizeof(e.name));
	report(r->k, &e);
	r->reported++;
	return 0;
}

/* Events were lost: report the arenas under pressure now, from a dump. */
static uint32_t resync(struct kvactl *k, uint32_t arena, const char *why)
{
	struct resync r = { .k = k, .arena = arena };
	int ret;

	fprintf(stderr, "kvactl: monitor: events lost (%s); resyncing\n", why);
	/* Requests go out on the request socket, not the subscribed one. */
	ret = kva_nl_arenas(k->nl, resync_arena, &r);
	if (ret)
		fprintf(stderr, "kvactl: monitor: resync: %s\n", strerror(-ret));
	return r.reported;
}

int kvactl_monitor(struct kvactl *k, int argc, char **argv)
{
	uint32_t count = 0, timeout = 0, arena = 0, seen = 0, *dst;
	struct kva_nl_event e = { .size = sizeof(e) };
	int i, ret;

	for (i = 1; i + 1 < argc; i += 2) {
		dst = !strcmp(argv[i], "--count") ? &count :
		      !strcmp(argv[i], "--timeout") ? &timeout :
		      !strcmp(argv[i], "--arena") || !strcmp(argv[i], "-a") ?
		      &arena : NULL;
		if (!dst || kvactl_parse_u32(argv[i + 1], dst))
			return kvactl_usage_error(kvactl_monitor_usage);
	}
	if (i != argc || timeout > 2000000)	/* ms fit an int */
		return kvactl_usage_error(kvactl_monitor_usage);
	if (kvactl_nl(k))
		return 1;
	ret = kva_nl_subscribe(k->nl);
	if (ret)
		return kvactl_fail(k, "monitor", ret);
	/*
	 * Scripts wait for this before causing events: on stderr as text,
	 * or, with -j, a first "subscribed" object on stdout (nothing on
	 * stderr).
	 */
	if (k->json) {
		memset(&e.ev, 0, sizeof(e.ev));
		kvactl_json_print(k, event_json("subscribed", &e));
	} else {
		fprintf(stderr, "kvactl: monitoring kvarena events (Ctrl-C to stop)\n");
	}
	fflush(stdout);
	fflush(stderr);
	while (!count || seen < count) {
		e.size = sizeof(e);
		ret = kva_nl_next_event(k->nl, &e,
					timeout ? (int)timeout * 1000 : -1);
		if (ret == -EAGAIN)
			continue;		/* not an event */
		if (ret == -ENOBUFS) {		/* overran */
			seen += resync(k, arena, "receive queue overran");
			continue;
		}
		if (ret < 0)
			return kvactl_fail(k, "monitor", ret);
		if (!ret)
			break;			/* timed out */
		if (arena && e.ev.arena_id != arena)
			continue;
		if (e.kind == KVA_NL_EV_EVENT && e.ev.dropped) {
			seen += resync(k, arena, "rate limit");
			e.ev.dropped = 0;
		}
		report(k, &e);
		seen++;
	}
	return 0;
}
