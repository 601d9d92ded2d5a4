// SPDX-License-Identifier: MIT
/*
 * kvactl toolwait [-p DIR] [-a ARENA] [-T] [interval [count]]
 *
 * Prints, per tool class, a log2 histogram of how long sessions waited on
 * that class of tool (runqlat style: low -> high : count |****|), the
 * predicted remaining wait, and a per-session table: waits, total and
 * max, idle KV byte-seconds, the tool process tree's CPU and wall time.
 * Reads the maps pinned by whoever runs the toolwait programs (kvarenad);
 * when none are pinned it loads and attaches them itself for as long as it
 * runs.  Without an interval it prints the totals once; with one it prints
 * what changed in each interval, `count` times (default: until killed).
 * -j (kvactl's global flag) prints JSON instead.
 *
 * Owns the presentation only; the numbers come from libkvarena's
 * kva_toolwait_* API.
 */
#include <errno.h>
#include <getopt.h>
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
#define KT_MAX_SESSIONS	4096
#define KT_STARS	40

static const char *const kt_usage =
	"usage: kvactl [-j] toolwait [-p DIR] [-a ARENA] [-T] [interval [count]]\n"
	"  -p DIR     pinned maps (default " KVA_TOOLWAIT_PIN_DIR ")\n"
	"  -a ARENA   only this arena's sessions\n"
	"  -T         no per-session table\n"
	"examples:\n"
	"  kvactl toolwait            totals since the programs were loaded\n"
	"  kvactl toolwait 5 3        what changed, every 5 s, 3 times\n"
	"  kvactl -j toolwait         the same as JSON\n";

struct kt_state {
	bool json, table;
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

static void kt_hist_json(const struct kva_toolwait_hist *h)
{
	int i, first = 1;

	printf("\"slots\": [");
	for (i = 0; i < KVA_TOOLWAIT_SLOTS; i++) {
		if (!h->slots[i])
			continue;
		printf("%s{\"low\": %" PRIu64 ", \"high\": %" PRIu64
		       ", \"count\": %u}", first ? "" : ", ", kt_lo(i),
		       kt_hi(i), h->slots[i]);
		first = 0;
	}
	printf("]");
}

/* h minus the previous interval's snapshot of the same class. */
static void kt_delta(struct kt_state *st, uint32_t cls,
		     struct kva_toolwait_hist *h)
{
	struct kva_toolwait_hist cur = *h;
	uint32_t i, j;

	for (i = 0; i < st->nprev; i++)
		if (st->prev_class[i] == cls)
			break;
	if (i < st->nprev) {
		const struct kva_toolwait_hist *p = &st->prev[i];

		h->count -= p->count;
		h->total_us -= p->total_us;
		h->tool_cpu_ns -= p->tool_cpu_ns;
		h->tool_wall_ns -= p->tool_wall_ns;
		for (j = 0; j < KVA_TOOLWAIT_SLOTS; j++)
			h->slots[j] -= p->slots[j];
	} else if (st->nprev < KT_MAX_CLASSES) {
		i = st->nprev++;
		st->prev_class[i] = cls;
	} else {
		return;
	}
	st->prev[i] = cur;
}

static const char *kt_state_name(uint32_t s)
{
	return kva_state_name(s);
}

static void kt_classes(struct kva_toolwait *tw, struct kt_state *st,
		       bool delta)
{
	struct kva_toolwait_hist h;
	int n, i, shown = 0;

	n = kva_toolwait_classes(tw, st->classes, KT_MAX_CLASSES);
	if (n > KT_MAX_CLASSES)
		n = KT_MAX_CLASSES;
	if (st->json)
		printf("\"classes\": [");
	for (i = 0; i < n; i++) {
		uint32_t cls = st->classes[i];
		uint64_t pred;

		if (kva_toolwait_class_hist(tw, cls, &h, sizeof(h)))
			continue;
		/* Predict from the cumulative histogram, show the delta. */
		pred = kva_toolwait_predict(&h, 0, 0);
		if (delta)
			kt_delta(st, cls, &h);
		if (st->json) {
			printf("%s{\"tool_class\": %u, \"count\": %" PRIu64
			       ", \"total_us\": %" PRIu64 ", \"max_us\": %" PRIu64
			       ", \"tool_cpu_ns\": %" PRIu64
			       ", \"tool_wall_ns\": %" PRIu64
			       ", \"predicted_wait_us\": %" PRIu64 ", ",
			       shown ? ", " : "", cls, h.count, h.total_us,
			       h.max_us, h.tool_cpu_ns, h.tool_wall_ns, pred);
			kt_hist_json(&h);
			printf("}");
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
	if (st->json)
		printf("]");
	else if (!shown)
		printf("no tool waits recorded\n");
}

static void kt_sessions(struct kva_toolwait *tw, struct kt_state *st)
{
	static struct kva_toolwait_key keys[KT_MAX_SESSIONS];
	struct kva_toolwait_session s;
	int n, i, shown = 0;

	n = kva_toolwait_sessions(tw, keys, KT_MAX_SESSIONS);
	if (n > KT_MAX_SESSIONS)
		n = KT_MAX_SESSIONS;
	if (st->json)
		printf(", \"sessions\": [");
	else
		printf("\n%-6s %-8s %-7s %-9s %5s %6s %10s %9s %12s %5s %8s %9s\n",
		       "ARENA", "SESSION", "PID", "STATE", "CLASS", "WAITS",
		       "TOTAL_MS", "MAX_MS", "IDLE_BYTE_S", "PROCS", "CPU_MS",
		       "WALL_MS");
	for (i = 0; i < n; i++) {
		const struct kva_toolwait_key *k = &keys[i];

		if ((st->arena && k->arena_id != st->arena) ||
		    kva_toolwait_get_session(tw, k, &s, sizeof(s)))
			continue;
		if (st->json)
			printf("%s{\"arena_id\": %u, \"session_id\": %u, "
			       "\"pid\": %u, \"state\": \"%s\", "
			       "\"tool_class\": %u, \"waits\": %" PRIu64
			       ", \"total_us\": %" PRIu64 ", \"max_us\": %" PRIu64
			       ", \"idle_byte_sec\": %" PRIu64
			       ", \"blocks_held\": %u, \"block_size\": %u"
			       ", \"tool_procs\": %" PRIu64
			       ", \"tool_cpu_ns\": %" PRIu64
			       ", \"tool_wall_ns\": %" PRIu64
			       ", \"cookie\": %" PRIu64 "}", shown ? ", " : "",
			       k->arena_id, k->session_id, k->pid,
			       kt_state_name(s.state), s.tool_class, s.waits,
			       s.total_us, s.max_us, s.idle_byte_sec,
			       s.blocks_held, s.block_size, s.tool_procs,
			       s.tool_cpu_ns, s.tool_wall_ns, s.cookie);
		else
			printf("%-6u %-8u %-7u %-9s %5u %6" PRIu64 " %10.1f %9.1f"
			       " %12" PRIu64 " %5" PRIu64 " %8.1f %9.1f\n",
			       k->arena_id, k->session_id, k->pid,
			       kt_state_name(s.state), s.tool_class, s.waits,
			       s.total_us / 1e3, s.max_us / 1e3,
			       s.idle_byte_sec, s.tool_procs,
			       s.tool_cpu_ns / 1e6, s.tool_wall_ns / 1e6);
		shown++;
	}
	if (st->json)
		printf("]");
}

static void kt_print(struct kva_toolwait *tw, struct kt_state *st,
		     bool delta)
{
	struct kva_toolwait_stats s = { 0 };

	kva_toolwait_get_stats(tw, &s, sizeof(s));
	if (st->json) {
		printf("{\"source\": \"%s\", ", kva_toolwait_describe(tw));
		kt_classes(tw, st, delta);
		if (st->table)
			kt_sessions(tw, st);
		printf(", \"stats\": {\"transitions\": %" PRIu64
		       ", \"waits\": %" PRIu64 ", \"events\": %" PRIu64
		       ", \"events_lost\": %" PRIu64 "}}\n", s.transitions,
		       s.waits, s.events, s.events_lost);
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

int kvactl_toolwait(int argc, char **argv, bool json)
{
	struct kt_state *st = calloc(1, sizeof(*st));
	const char *dir = KVA_TOOLWAIT_PIN_DIR;
	struct kva_toolwait *tw = NULL;
	long interval = 0, count = -1, i;
	int c, ret;

	if (!st)
		return -ENOMEM;
	st->json = json;
	st->table = true;
	optind = 1;
	while ((c = getopt(argc, argv, "+p:a:Th")) != -1) {
		switch (c) {
		case 'p':
			dir = optarg;
			break;
		case 'a':
			st->arena = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'T':
			st->table = false;
			break;
		case 'h':
			fputs(kt_usage, stdout);
			free(st);
			return 0;
		default:
			fputs(kt_usage, stderr);
			free(st);
			return -EINVAL;
		}
	}
	if (optind < argc)
		interval = strtol(argv[optind++], NULL, 0);
	if (optind < argc)
		count = strtol(argv[optind++], NULL, 0);
	if (optind < argc || interval < 0) {
		fputs(kt_usage, stderr);
		free(st);
		return -EINVAL;
	}

	ret = kva_toolwait_open_pinned(dir, &tw);
	if (ret == -ENOENT && interval) {
		struct kva_toolwait_opts o = { .size = sizeof(o),
					       .arena_filter = st->arena,
					       .pin_dir = "" };

		ret = kva_toolwait_open(&o, &tw);
	}
	if (ret) {
		fprintf(stderr, "kvactl toolwait: %s: %s%s\n", dir,
			strerror(-ret), ret == -ENOENT ?
			" (nothing pinned; give an interval to load the "
			"programs here)" : "");
		free(st);
		return ret;
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
}
