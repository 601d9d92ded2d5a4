// SPDX-License-Identifier: MIT
/*
 * kvactl toolwait [-p DIR] [--arena ID] [-T] [interval [count]]
 *
 * Prints, per tool class, a log2 histogram of how long sessions waited on
 * that class of tool (runqlat style: low -> high : count |****|), the
 * predicted remaining wait, and a per-session table: waits, total and
 * max, idle KV byte-seconds, the tool process tree's CPU and wall time.
 * Reads the maps pinned by whoever runs the toolwait programs (kvarenad);
 * when none are pinned it loads and attaches them itself for as long as it
 * runs.  Without an interval it prints the totals once; with one it prints
 * what changed in each interval, `count` times (default: until killed).
 * -j/-p (kvactl's global flags) print JSON instead (jansson; the
 * "toolwait" object of kvactl's JSON schema).  An interval's deltas
 * survive a concurrent clear of the histograms (a class whose counts went
 * down starts again from zero), and every session the map holds is shown.
 *
 * Owns the presentation only; the numbers come from libkvarena's
 * kva_toolwait_* API.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvarena.h"
#include "kvarena_toolwait.h"
#include "toolwait.h"

#define KT_MAX_CLASSES	256
#define KT_STARS	40

const char kvactl_toolwait_usage[] =
	"usage: kvactl [-j|-p] toolwait [-p DIR] [--arena ID] [-T] [interval [count]]\n"
	"  -p DIR         pinned maps (default " KVA_TOOLWAIT_PIN_DIR ")\n"
	"  --arena ID     only this arena's sessions (also -a ID)\n"
	"  -T             no per-session table\n"
	"examples:\n"
	"  kvactl toolwait            totals since the programs were loaded\n"
	"  kvactl toolwait 5 3        what changed, every 5 s, 3 times\n"
	"  kvactl -j toolwait         the same as JSON\n";

struct kt_state {
	int json;			/* 0 text, 1 JSON, 2 indented */
	bool table;
	uint32_t arena;
	uint32_t nclass;
	uint32_t classes[KT_MAX_CLASSES];
	struct kva_toolwait_hist prev[KT_MAX_CLASSES];	/* for intervals */
	uint32_t prev_class[KT_MAX_CLASSES];
	uint32_t nprev;
};

static volatile sig_atomic_t kt_stop;

static void kt_on_signal(int sig)
{
	(void)sig;
	kt_stop = 1;
}

static void kt_stars(uint64_t v, uint64_t max)
{
	int n = max ? (int)(v * KT_STARS / max) : 0, i;

	if (v && !n)
		n = 1;
	putchar('|');
	for (i = 0; i < KT_STARS; i++)
		putchar(i < n ? '*' : ' ');
	putchar('|');
}

static uint64_t kt_lo(int i)
{
	return i ? 1ULL << i : 0;
}

static uint64_t kt_hi(int i)
{
	return (1ULL << (i + 1)) - 1;
}

/* The arena filter: digits (or 0x hex) within u32, as kvactl elsewhere. */
static int kvactl_toolwait_arena(const char *s, uint32_t *out)
{
	unsigned long long v;
	int base = 10;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || *end || end == s || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static void kt_hist_text(const struct kva_toolwait_hist *h)
{
	int i, first = -1, last = -1;
	uint64_t max = 0;

	for (i = 0; i < KVA_TOOLWAIT_SLOTS; i++)
		if (h->slots[i]) {
			if (first < 0)
				first = i;
			last = i;
			if (h->slots[i] > max)
				max = h->slots[i];
		}
	if (first < 0)
		return;
	printf("%24s : count    distribution\n", "usecs");
	for (i = first; i <= last; i++) {
		printf("%10" PRIu64 " -> %-10" PRIu64 " : %-8u ", kt_lo(i),
		       kt_hi(i), h->slots[i]);
		kt_stars(h->slots[i], max);
		putchar('\n');
	}
}

static json_t *kt_ju64(uint64_t v)
{
	char buf[24];

	if (v <= (uint64_t)INT64_MAX)
		return json_integer((json_int_t)v);
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return json_string(buf);
}

static json_t *kt_hist_json(const struct kva_toolwait_hist *h)
{
	json_t *slots = json_array();
	int i;

	for (i = 0; slots && i < KVA_TOOLWAIT_SLOTS; i++)
		if (h->slots[i])
			json_array_append_new(slots, json_pack(
				"{s:o, s:o, s:I}", "low", kt_ju64(kt_lo(i)),
				"high", kt_ju64(kt_hi(i)),
				"count", (json_int_t)h->slots[i]));
	return slots;
}

/* Whether any count of h went down since p: the histograms were cleared. */
static bool kt_went_down(const struct kva_toolwait_hist *h,
			 const struct kva_toolwait_hist *p)
{
	int j;

	if (h->count < p->count || h->total_us < p->total_us ||
	    h->tool_cpu_ns < p->tool_cpu_ns || h->tool_wall_ns < p->tool_wall_ns)
		return true;
	for (j = 0; j < KVA_TOOLWAIT_SLOTS; j++)
		if (h->slots[j] < p->slots[j])
			return true;
	return false;
}

int kvactl_toolwait_delta(struct kva_toolwait_hist *h,
			  const struct kva_toolwait_hist *prev)
{
	int j;

	if (kt_went_down(h, prev))
		return 1;		/* cleared meanwhile: h is the delta */
	h->count -= prev->count;
	h->total_us -= prev->total_us;
	h->tool_cpu_ns -= prev->tool_cpu_ns;
	h->tool_wall_ns -= prev->tool_wall_ns;
	for (j = 0; j < KVA_TOOLWAIT_SLOTS; j++)
		h->slots[j] -= prev->slots[j];
	return 0;
}

/*
 * h minus the previous interval's snapshot of the same class.  After a
 * clear (kva_toolwait_clear_classes() by anyone) the counts restart: the
 * delta is then what accumulated since, h itself.
 */
static void kt_delta(struct kt_state *st, uint32_t cls,
		     struct kva_toolwait_hist *h)
{
	struct kva_toolwait_hist cur = *h;
	uint32_t i;

	for (i = 0; i < st->nprev; i++)
		if (st->prev_class[i] == cls)
			break;
	if (i < st->nprev) {
		kvactl_toolwait_delta(h, &st->prev[i]);
	} else if (st->nprev < KT_MAX_CLASSES) {
		i = st->nprev++;
		st->prev_class[i] = cls;
	} else {
		return;
	}
	st->prev[i] = cur;
}

static json_t *kt_classes(struct kva_toolwait *tw, struct kt_state *st,
			  bool delta)
{
	json_t *list = st->json ? json_array() : NULL;
	struct kva_toolwait_hist h;
	int n, i, shown = 0;

	n = kva_toolwait_classes(tw, st->classes, KT_MAX_CLASSES);
	if (n > KT_MAX_CLASSES)
		n = KT_MAX_CLASSES;
	for (i = 0; i < n; i++) {
		uint32_t cls = st->classes[i];
		uint64_t pred;

		if (kva_toolwait_class_hist(tw, cls, &h, sizeof(h)))
			continue;
		/* Predict from the cumulative histogram, show the delta. */
		pred = kva_toolwait_predict(&h, 0, 0);
		if (delta)
			kt_delta(st, cls, &h);
		if (list) {
			json_array_append_new(list, json_pack(
				"{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
				"tool_class", (json_int_t)cls,
				"count", kt_ju64(h.count),
				"total_us", kt_ju64(h.total_us),
				"max_us", kt_ju64(h.max_us),
				"tool_cpu_ns", kt_ju64(h.tool_cpu_ns),
				"tool_wall_ns", kt_ju64(h.tool_wall_ns),
				"predicted_wait_us", kt_ju64(pred),
				"slots", kt_hist_json(&h)));
		} else {
			printf("\ntool_class = %u: %" PRIu64 " waits, total %.3f s"
			       ", max %.3f s, tool cpu %.1f ms, tool wall %.1f ms"
			       ", predicted wait %.1f ms\n", cls, h.count,
			       h.total_us / 1e6, h.max_us / 1e6,
			       h.tool_cpu_ns / 1e6, h.tool_wall_ns / 1e6,
			       pred / 1e3);
			kt_hist_text(&h);
		}
		shown++;
	}
	if (!list && !shown)
		printf("no tool waits recorded\n");
	return list;
}

/* Every key the map holds, however many: grown until they fit. */
static int kt_keys(struct kva_toolwait *tw, struct kva_toolwait_key **keys)
{
	int cap = 256, n;

	for (;;) {
		struct kva_toolwait_key *k = realloc(*keys, (size_t)cap *
						     sizeof(*k));

		if (!k)
			return -ENOMEM;
		*keys = k;
		n = kva_toolwait_sessions(tw, k, cap);
		if (n <= cap)
			return n;
		cap = n + 64;		/* more arrived meanwhile: margin */
	}
}

static json_t *kt_sessions(struct kva_toolwait *tw, struct kt_state *st)
{
	json_t *list = st->json ? json_array() : NULL;
	struct kva_toolwait_key *keys = NULL;
	struct kva_toolwait_session s;
	int n, i;

	n = kt_keys(tw, &keys);
	if (!list)
		printf("\n%-6s %-12s %-7s %-9s %5s %6s %10s %9s %12s %5s %8s %9s\n",
		       "ARENA", "SESSION", "PID", "STATE", "CLASS", "WAITS",
		       "TOTAL_MS", "MAX_MS", "IDLE_BYTE_S", "PROCS", "CPU_MS",
		       "WALL_MS");
	for (i = 0; i < n; i++) {
		const struct kva_toolwait_key *k = &keys[i];

		if ((st->arena && k->arena_id != st->arena) ||
		    kva_toolwait_get_session(tw, k, &s, sizeof(s)))
			continue;
		if (list)
			json_array_append_new(list, json_pack(
				"{s:I, s:I, s:I, s:s, s:I, s:o, s:o, s:o, s:o,"
				" s:I, s:I, s:o, s:o, s:o, s:o}",
				"arena_id", (json_int_t)k->arena_id,
				"session_id", (json_int_t)k->session_id,
				"pid", (json_int_t)k->pid,
				"state", kva_state_name(s.state),
				"tool_class", (json_int_t)s.tool_class,
				"waits", kt_ju64(s.waits),
				"total_us", kt_ju64(s.total_us),
				"max_us", kt_ju64(s.max_us),
				"idle_byte_sec", kt_ju64(s.idle_byte_sec),
				"blocks_held", (json_int_t)s.blocks_held,
				"block_size", (json_int_t)s.block_size,
				"tool_procs", kt_ju64(s.tool_procs),
				"tool_cpu_ns", kt_ju64(s.tool_cpu_ns),
				"tool_wall_ns", kt_ju64(s.tool_wall_ns),
				"cookie", kt_ju64(s.cookie)));
		else
			printf("%-6u %-12" PRIu64 " %-7u %-9s %5u %6" PRIu64 " %10.1f %9.1f"
			       " %12" PRIu64 " %5" PRIu64 " %8.1f %9.1f\n",
			       k->arena_id, k->session_id, k->pid,
			       kva_state_name(s.state), s.tool_class, s.waits,
			       s.total_us / 1e3, s.max_us / 1e3,
			       s.idle_byte_sec, s.tool_procs,
			       s.tool_cpu_ns / 1e6, s.tool_wall_ns / 1e6);
	}
	free(keys);
	return list;
}

static void kt_print(struct kva_toolwait *tw, struct kt_state *st,
		     bool delta)
{
	struct kva_toolwait_stats s = { 0 };

	kva_toolwait_get_stats(tw, &s, sizeof(s));
	if (st->json) {
		size_t flags = JSON_PRESERVE_ORDER;
		json_t *sessions = st->table ? kt_sessions(tw, st) : json_array();
		json_t *o = json_pack(
			"{s:s, s:o, s:o, s:{s:o, s:o, s:o, s:o}}",
			"source", kva_toolwait_describe(tw),
			"classes", kt_classes(tw, st, delta),
			"sessions", sessions,
			"stats", "transitions", kt_ju64(s.transitions),
			"waits", kt_ju64(s.waits), "events", kt_ju64(s.events),
			"events_lost", kt_ju64(s.events_lost));

		if (st->json == 2)
			flags |= JSON_INDENT(2);
		if (o)
			json_dumpf(o, stdout, flags);
		putchar('\n');
		json_decref(o);
	} else {
		char ts[32];
		time_t t = time(NULL);
		struct tm tm;

		strftime(ts, sizeof(ts), "%H:%M:%S", localtime_r(&t, &tm));
		printf("%s  tool waits (%s; %" PRIu64 " transitions, %" PRIu64
		       " waits)\n", ts, kva_toolwait_describe(tw),
		       s.transitions, s.waits);
		kt_classes(tw, st, delta);
		if (st->table)
			kt_sessions(tw, st);
		putchar('\n');
	}
	fflush(stdout);
}

static void kt_baseline(struct kva_toolwait *tw, struct kt_state *st)
{
	struct kva_toolwait_hist h;
	int n, k;

	n = kva_toolwait_classes(tw, st->classes, KT_MAX_CLASSES);
	for (k = 0; k < n && k < KT_MAX_CLASSES; k++)
		if (!kva_toolwait_class_hist(tw, st->classes[k], &h, sizeof(h)))
			kt_delta(st, st->classes[k], &h);
}

/* A count argument: digits only, within [0, max]. */
static int kt_parse(const char *s, long max, long *out)
{
	char *end;
	long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int kvactl_toolwait(int argc, char **argv, int json)
{
	static const struct option longopts[] = {
		{ "arena", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kt_state *st = calloc(1, sizeof(*st));
	const char *dir = KVA_TOOLWAIT_PIN_DIR;
	struct kva_toolwait *tw = NULL;
	long interval = 0, count = -1, i;
	int c, ret;

	if (!st) {
		fprintf(stderr, "kvactl toolwait: out of memory\n");
		return 1;
	}
	st->json = json;
	st->table = true;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+p:a:Th", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			dir = optarg;
			break;
		case 'a':
			if (kvactl_toolwait_arena(optarg, &st->arena))
				goto usage;
			break;
		case 'T':
			st->table = false;
			break;
		case 'h':
			fputs(kvactl_toolwait_usage, stdout);
			free(st);
			return 0;
		default:
			goto usage;
		}
	}
	if (optind < argc && kt_parse(argv[optind++], 86400, &interval))
		goto usage;
	if (optind < argc && kt_parse(argv[optind++], 1000000000L, &count))
		goto usage;
	if (optind < argc)
		goto usage;

	ret = kva_toolwait_open_pinned(dir, &tw);
	if (ret == -ENOENT && interval) {
		struct kva_toolwait_opts o = { .size = sizeof(o),
					       .arena_filter = st->arena,
					       .pin_dir = "",
					       .flags = KVA_TOOLWAIT_MOUNT };

		ret = kva_toolwait_open(&o, &tw);
	}
	if (ret) {
		fprintf(stderr, "kvactl toolwait: %s: %s%s\n", dir,
			strerror(-ret), ret == -ENOENT ?
			" (nothing pinned; give an interval to load the "
			"programs here)" : "");
		free(st);
		return 1;
	}
	if (!interval) {
		kt_print(tw, st, false);
	} else {
		signal(SIGINT, kt_on_signal);
		signal(SIGTERM, kt_on_signal);
		/* Baseline, so the first interval shows only itself. */
		kt_baseline(tw, st);
		for (i = 0; count < 0 || i < count; i++) {
			sleep((unsigned int)interval);
			if (kt_stop)
				break;
			kt_print(tw, st, true);
		}
	}
	kva_toolwait_close(tw);
	free(st);
	return 0;
usage:
	fputs(kvactl_toolwait_usage, stderr);
	free(st);
	return 2;
}
