// SPDX-License-Identifier: GPL-2.0
/*
 * kvactl against the module's own state: arena and session listings in
 * text and JSON (well-formed, and carrying the values the ioctls report),
 * policy set, monitor, and bad input.  kvactl runs as a separate process,
 * as an operator would run it.  Tests tools/kvactl/.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kt.h"

/* Run a command; its stdout (up to len) and exit status. */
static int run(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0, r;
	int st;

	if (!p)
		return -1;
	while (n + 1 < len && (r = fread(out + n, 1, len - 1 - n, p)) > 0)
		n += r;
	out[n] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * kvactl's JSON against the schema it prints (`kvactl help json`): every
 * object carries exactly the keys of its schema object, with their types.
 */
static json_t *schema;

static bool valid(json_t *v, const char *type);

static bool valid_obj(json_t *o, const char *name)
{
	json_t *def = json_object_get(json_object_get(schema, "objects"), name);
	const char *key;
	json_t *t;

	if (!json_is_object(o) || !def || json_object_size(o) != json_object_size(def)) {
		fprintf(stderr, "kvactl JSON: not a %s object (%zu keys)\n", name,
			json_object_size(o));
		return false;
	}
	json_object_foreach(def, key, t)
		if (!valid(json_object_get(o, key), json_string_value(t))) {
			fprintf(stderr, "kvactl JSON: %s.%s is not %s\n", name, key,
				json_string_value(t));
			return false;
		}
	return true;
}

static bool valid(json_t *v, const char *type)
{
	char name[64];
	size_t i;
	json_t *e;

	if (!v || !type)
		return false;
	if (!strcmp(type, "integer"))
		return json_is_integer(v);
	if (!strcmp(type, "string"))
		return json_is_string(v);
	if (!strcmp(type, "boolean"))
		return json_is_boolean(v);
	if (!strcmp(type, "u64"))
		return (json_is_integer(v) && json_integer_value(v) >= 0) ||
		       (json_is_string(v) && strspn(json_string_value(v),
						    "0123456789") ==
		        strlen(json_string_value(v)));
	if (type[0] == '[') {
		snprintf(name, sizeof(name), "%.*s", (int)strlen(type) - 2, type + 1);
		if (!json_is_array(v))
			return false;
		json_array_foreach(v, i, e)
			if (!valid_obj(e, name))
				return false;
		return true;
	}
	return valid_obj(v, type);
}

/* Text printed for `command` is valid JSON of the schema's type. */
static bool json_valid(const char *text, const char *command)
{
	json_t *v = json_loads(text, 0, NULL);
	bool ok = v && valid(v, json_string_value(json_object_get(
			json_object_get(schema, "commands"), command)));

	if (!ok)
		fprintf(stderr, "kvactl JSON for %s invalid:\n%s\n", command, text);
	json_decref(v);
	return ok;
}

static int kvactl_init(void)
{
	static char out[16384];

	if (run("kvactl help json", out, sizeof(out)))
		return 1;
	schema = json_loads(out, 0, NULL);
	return !schema;
}

static int kvactl_clean(void)
{
	json_decref(schema);
	return 0;
}

static void test_arena_listing(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 4 * KT_MIB, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 44, .name = "ctl \"q\"",
	};
	char out[16384], want[512], size[32], bsz[32], pol[32], fd[16];
	int64_t sid;
	int dev = kt_dev_open(), arena, found = 0;
	unsigned int id, ten, blocks, nfree, sess, low, high;
	struct kva_arena_info ai;
	uint32_t ids[5];
	char *line;

	CU_ASSERT_FATAL(dev >= 0);
	arena = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	CU_ASSERT_FATAL(arena >= 0);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 5, ids, 0), 5);
	CU_ASSERT_EQUAL(kt_arena_info(arena, &ai), 0);

	CU_ASSERT_EQUAL(run("kvactl -j arena list", out, sizeof(out)), 0);
	CU_ASSERT(json_valid(out, "arena list"));
	snprintf(want, sizeof(want), "{\"arena_id\": %u, \"name\": \"ctl \\\"q\\\"\", "
		 "\"tenant_id\": 44, \"bytes\": 4194304, \"block_size\": 65536, "
		 "\"numa_node\": -1, \"blocks_total\": 64, \"blocks_free\": %u, "
		 "\"sessions\": 1, ", ai.arena_id, ai.blocks_free);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	if (!strstr(out, want))
		fprintf(stderr, "want %s\ngot %s\n", want, out);

	CU_ASSERT_EQUAL(run("kvactl arena list", out, sizeof(out)), 0);
	for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		/* The name has a space: take the fields after it. */
		char *after = strstr(line, "\"q\"");

		if (sscanf(line, "%u", &id) != 1 || id != ai.arena_id || !after)
			continue;
		found = sscanf(after + 3, "%u %31s %31s %u %u %u %31s %u %u %15s",
			       &ten, size, bsz, &blocks, &nfree, &sess, pol,
			       &low, &high, fd) == 10;
	}
	CU_ASSERT_FATAL(found);
	CU_ASSERT_EQUAL(ten, 44);
	CU_ASSERT_STRING_EQUAL(size, "4MiB");
	CU_ASSERT_STRING_EQUAL(bsz, "64KiB");
	CU_ASSERT_EQUAL(blocks, ai.blocks_total);
	CU_ASSERT_EQUAL(nfree, ai.blocks_free);
	CU_ASSERT_EQUAL(sess, 1);
	CU_ASSERT_STRING_EQUAL(pol, "toolwait");
	CU_ASSERT_EQUAL(low, ai.low_wm);
	CU_ASSERT_EQUAL(high, ai.high_wm);
	CU_ASSERT_STRING_EQUAL(fd, "open");

	snprintf(want, sizeof(want), "kvactl arena show %u", ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "64 blocks of 64KiB, %u free", ai.blocks_free);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	snprintf(want, sizeof(want), "kvactl -j arena show %u", ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	CU_ASSERT(json_valid(out, "arena show"));
	snprintf(want, sizeof(want), "kvactl -p arena show %u", ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	CU_ASSERT(json_valid(out, "arena show"));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\n  \"arena_id\": "));	/* indented */

	/* policy set by id, checked through the ioctl view */
	snprintf(want, sizeof(want), "kvactl policy set %u lru low 3 high 6 ttl 500",
		 ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	CU_ASSERT_EQUAL(kt_arena_info(arena, &ai), 0);
	CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_LRU);
	CU_ASSERT_EQUAL(ai.low_wm, 3);
	CU_ASSERT_EQUAL(ai.high_wm, 6);
	CU_ASSERT_EQUAL(ai.ttl_ms, 500);
	/* bad input: usage (2) or a refusal with the kernel's reason (1) */
	snprintf(want, sizeof(want), "kvactl policy set %u lru low 9 high 6 2>&1",
		 ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "watermarks"));
	CU_ASSERT_EQUAL(run("kvactl policy set 1 fifo 2>&1", out, sizeof(out)), 2);
	CU_ASSERT_EQUAL(run("kvactl arena show 99999 2>&1", out, sizeof(out)), 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "no arena"));
	CU_ASSERT_EQUAL(run("kvactl bogus 2>&1", out, sizeof(out)), 2);

	/* Closed (only a dma-buf holds the memory): zeros, not dashes. */
	{
		struct kva_export e = { .size = sizeof(e) };
		int buf = kt_ioctl(arena, KVA_IOC_EXPORT_DMABUF, &e);

		CU_ASSERT_FATAL(buf >= 0);
		close(arena);
		arena = -1;
		found = 0;
		CU_ASSERT_EQUAL(run("kvactl arena list", out, sizeof(out)), 0);
		for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
			char *after = strstr(line, "\"q\"");

			if (sscanf(line, "%u", &id) != 1 || id != ai.arena_id || !after)
				continue;
			found = sscanf(after + 3, "%u %31s %31s %u %u %u %31s %u %u %15s",
				       &ten, size, bsz, &blocks, &nfree, &sess, pol,
				       &low, &high, fd) == 10;
		}
		CU_ASSERT(found);
		CU_ASSERT_STRING_EQUAL(fd, "closed");
		CU_ASSERT_EQUAL(blocks + nfree + sess + low + high, 0);
		CU_ASSERT_EQUAL(run("kvactl -j arena list", out, sizeof(out)), 0);
		CU_ASSERT(json_valid(out, "arena list"));
		close(buf);
	}
	close(dev);
}

static void test_session_listing(void)
{
	int64_t a, b;
	int dev = kt_dev_open(), arena;
	char out[65536], want[512], state[32], tier[16];
	struct kva_arena_info ai;
	struct kva_session_info si;
	uint64_t sess;
	unsigned int ar, tool, blocks, rows = 0;
	uint32_t ids[7];
	char *line;

	arena = kt_arena(dev, 4 * KT_MIB, 64 << 10, 45);
	CU_ASSERT_FATAL(arena >= 0);
	a = kt_session(arena);
	b = kt_session(arena);
	CU_ASSERT_EQUAL(kt_alloc(arena, a, 7, ids, 0), 7);
	CU_ASSERT_EQUAL(kt_set_state(arena, a, KVA_STATE_TOOL_WAIT, 4, 2500000), 0);
	CU_ASSERT_EQUAL(kt_set_state(arena, b, KVA_STATE_DECODE, 0, 0), 0);
	{	/* b's KV on disk, by its runtime's word (no transition) */
		struct kva_session_state st = { .size = sizeof(st),
			.flags = KVA_SESSION_STATE_KEEP | KVA_SESSION_STATE_TIER,
			.session_id = b, .state = KVA_STATE_DECODE,
			.tier = KVA_TIER_DISK };

		CU_ASSERT_EQUAL(kt_ioctl(arena, KVA_IOC_SESSION_SET_STATE, &st), 0);
	}
	kt_arena_info(arena, &ai);
	kt_session_info(arena, a, &si);

	snprintf(want, sizeof(want), "kvactl -j session list --arena %u", ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	CU_ASSERT(json_valid(out, "session list"));
	snprintf(want, sizeof(want), "{\"arena_id\": %u, \"session_id\": %" PRId64 ", \"state\": "
		 "\"tool_wait\", \"tier\": \"arena\", \"tool_class\": 4, \"blocks_held\": 7, "
		 "\"expected_wait_us\": 2500000, \"cookie\": 42, ", ai.arena_id, a);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	snprintf(want, sizeof(want), "\"session_id\": %" PRId64 ", \"state\": \"decode\", "
		 "\"tier\": \"disk\"", b);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));

	snprintf(want, sizeof(want), "kvactl session list --arena %u", ai.arena_id);
	CU_ASSERT_EQUAL(run(want, out, sizeof(out)), 0);
	for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (sscanf(line, "%u %" SCNu64 " %31s %15s %u %u", &ar, &sess, state, tier,
			   &tool, &blocks) != 6)
			continue;
		rows++;
		CU_ASSERT_EQUAL(ar, ai.arena_id);
		CU_ASSERT_STRING_EQUAL(tier, sess == (uint64_t)b ? "disk" : "arena");
		if (sess == (uint64_t)a) {
			CU_ASSERT_STRING_EQUAL(state, "tool_wait");
			CU_ASSERT_EQUAL(tool, 4);
			CU_ASSERT_EQUAL(blocks, si.blocks_held);
		}
	}
	CU_ASSERT_EQUAL(rows, 2);
	CU_ASSERT_EQUAL(run("kvactl session list --arena x 2>&1", out, sizeof(out)), 2);
	close(arena);
	close(dev);
}

static void test_monitor(void)
{
	int64_t sid;
	int dev = kt_dev_open(), arena;
	char out[4096], want[256];
	struct kva_arena_info ai;
	FILE *p;
	size_t n;

	/* With -j, kvactl's first line says it has subscribed (and nothing
	 * goes to stderr): wait for that. */
	p = popen("kvactl -j monitor --count 2 --timeout 10 2>/tmp/kvactl.err", "r");
	CU_ASSERT_FATAL(p != NULL);
	CU_ASSERT_FATAL(fgets(out, sizeof(out), p) != NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "{\"event\": \"subscribed\""));
	CU_ASSERT(json_valid(out, "monitor"));
	arena = kt_arena(dev, 2 * KT_MIB, 1 << 20, 46);
	CU_ASSERT_FATAL(arena >= 0);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL(kt_end(arena, sid), 0);
	kt_arena_info(arena, &ai);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	CU_ASSERT_EQUAL(pclose(p), 0);
	snprintf(want, sizeof(want), "{\"event\": \"arena-created\", \"arena_id\": %u, "
		 "\"tenant_id\": 46, \"name\": \"kt\", \"bytes\": 2097152, ", ai.arena_id);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	snprintf(want, sizeof(want), "{\"event\": \"session-ended\", \"arena_id\": %u, "
		 "\"tenant_id\": 46, ", ai.arena_id);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	snprintf(want, sizeof(want), "\"session_id\": %" PRId64 ", ", sid);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	{
		FILE *err = fopen("/tmp/kvactl.err", "r");

		CU_ASSERT(err && fgetc(err) == EOF);	/* nothing on stderr */
		if (err)
			fclose(err);
	}
	/* each line one JSON object */
	{
		char *line;

		for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
			CU_ASSERT(json_valid(line, "monitor"));
	}
	close(arena);
	close(dev);
}

/*
 * Events lost on the way (here: past the module's multicast rate, issue
 * 35.6) are not lost to an operator: the next event that arrives says how
 * many were not sent, and the monitor then reads every arena back with a
 * dump and reports the ones under pressure now, with seq 0.
 */
static void test_monitor_resyncs(void)
{
	long long saved = kt_param("nl_events_per_sec");
	int dev = kt_dev_open(), arena, i;
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 2 * KT_MIB, .block_size = 64 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 47, .name = "resync",
		.low_wm = 8,
	};
	char cmd[128], out[8192], want[256];
	uint32_t ids[30];
	int64_t sid;
	FILE *p;
	size_t n;

	CU_ASSERT_FATAL(saved >= 0);
	CU_ASSERT_EQUAL_FATAL(kt_param_set("nl_events_per_sec", 2), 0);
	arena = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	CU_ASSERT_FATAL(arena >= 0);
	snprintf(cmd, sizeof(cmd), "kvactl -j monitor --arena %u --count 3 --timeout 10 "
		 "2>/tmp/kvactl.err", c.arena_id);
	p = popen(cmd, "r");
	CU_ASSERT_FATAL(p != NULL);
	CU_ASSERT_FATAL(fgets(out, sizeof(out), p) != NULL);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "{\"event\": \"subscribed\""));
	/* Two events go out, the rest of the burst, pressure included, not. */
	for (i = 0; i < 5; i++)
		CU_ASSERT_EQUAL(kt_end(arena, kt_session(arena)), 0);
	sid = kt_session(arena);
	CU_ASSERT_EQUAL(kt_alloc(arena, sid, 30, ids, 0), 30);	/* 2 free < 8 */
	usleep(1200000);
	CU_ASSERT_EQUAL(kt_end(arena, kt_session(arena)), 0);	/* dropped: 4 */
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	CU_ASSERT_EQUAL(pclose(p), 0);
	snprintf(want, sizeof(want), "{\"event\": \"pressure\", \"arena_id\": %u, "
		 "\"tenant_id\": 47, \"name\": \"resync\", \"bytes\": 2097152, \"seq\": 0, ",
		 c.arena_id);
	CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
	CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"blocks_free\": 2, \"low_wm\": 8, "));
	{
		FILE *err = fopen("/tmp/kvactl.err", "r");
		char line[256] = "";

		CU_ASSERT(err && fgets(line, sizeof(line), err));
		CU_ASSERT_PTR_NOT_NULL(strstr(line, "events lost (rate limit); resyncing"));
		if (err)
			fclose(err);
	}
	kt_param_set("nl_events_per_sec", saved);
	close(arena);
	close(dev);
}

void kt_register_kvactl(void)
{
	CU_pSuite s = CU_add_suite("kvactl", kvactl_init, kvactl_clean);

	KT_ADD(s, test_arena_listing);
	KT_ADD(s, test_session_listing);
	KT_ADD(s, test_monitor);
	KT_ADD(s, test_monitor_resyncs);
}
