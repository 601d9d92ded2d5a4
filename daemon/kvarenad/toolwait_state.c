// SPDX-License-Identifier: MIT
/*
 * toolwait_state.c - the tool-wait table kept across restarts ([kv]
 * toolwait_state): each tool class's histogram of measured waits
 * (toolwait.c) is written to a JSON file every KVD_TWS_EVERY_S while new
 * waits come in and at a clean stop, and read back at start, so that a
 * restarted daemon predicts its tools as the one before it had learnt
 * them, instead of from the 1 s cold start until 8 waits of each tool
 * came in again (the eviction benchmark's toolwait ranking evicted 1.5x
 * fewer than LRU warm, 1.1-1.2x cold: Documentation/replay.md).
 *
 * The file is what this daemon measured, no more: a tenant's classes
 * stay its own (classes of tenants no longer configured are not read
 * back), and a file that does not check out in every field is not used
 * at all (the start goes on, cold, and says why). Written beside itself
 * and renamed over (a reader or a crash sees the old table or the new),
 * mode 0600, by the scheduler thread with the lock dropped (the table
 * is copied under it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"
#include "log.h"

#define KVD_TWS_VERSION		1
#define KVD_TWS_EVERY_S		30
#define KVD_TWS_MAX_BYTES	(1 << 20)

static int tenant_known(const struct kvd *d, const char *name)
{
	uint32_t i;

	if (!name[0])
		return 1;
	for (i = 0; i < d->cfg.n_tenants; i++)
		if (!strcmp(d->cfg.tenants[i].name, name))
			return 1;
	return 0;
}

static int get_u64(json_t *o, const char *key, uint64_t max, uint64_t *v)
{
	json_t *x = json_object_get(o, key);

	if (!json_is_integer(x) || json_integer_value(x) < 0 ||
	    (uint64_t)json_integer_value(x) > max)
		return -1;
	*v = (uint64_t)json_integer_value(x);
	return 0;
}

static int get_name(json_t *o, const char *key, char *out, size_t len, int empty_ok)
{
	json_t *x = json_object_get(o, key);
	size_t n;

	if (!json_is_string(x))
		return -1;
	n = json_string_length(x);
	if (n >= len || (!n && !empty_ok) || strlen(json_string_value(x)) != n)
		return -1;
	memcpy(out, json_string_value(x), n + 1);
	return 0;
}

/* One class of the file into c: every field there and consistent. */
static int class_parse(json_t *o, struct kvd_toolclass *c)
{
	json_t *slots = json_object_get(o, "slots"), *x;
	uint64_t sum = 0, v;
	size_t k;

	memset(c, 0, sizeof(*c));
	if (!json_is_object(o) || get_name(o, "tool", c->name, sizeof(c->name), 0) ||
	    get_name(o, "tenant", c->tenant, sizeof(c->tenant), 1) ||
	    get_u64(o, "count", UINT32_MAX * (uint64_t)KVA_TOOLWAIT_SLOTS, &c->hist.count) ||
	    get_u64(o, "total_us", 1ull << 62, &c->hist.total_us) ||
	    get_u64(o, "max_us", 1ull << 62, &c->hist.max_us) ||
	    !json_is_array(slots) || json_array_size(slots) != KVA_TOOLWAIT_SLOTS)
		return -1;
	json_array_foreach(slots, k, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > UINT32_MAX)
			return -1;
		v = (uint64_t)json_integer_value(x);
		c->hist.slots[k] = (uint32_t)v;
		sum += v;
	}
	if (sum != c->hist.count || !sum || c->hist.max_us > c->hist.total_us)
		return -1;
	return 0;
}

int kvd_toolwait_state_load(struct kvd *d)
{
	const char *path = d->cfg.toolwait_state;
	struct kvd_toolclass *cls;
	uint32_t n = 0, gone = 0, i;
	uint64_t waits = 0;
	json_error_t je;
	json_t *root, *arr, *o;
	struct stat st;
	size_t k;
	int fd;

	if (!path[0])
		return 0;
	d->tws_snap = calloc(KVD_MAX_TOOL_CLASSES, sizeof(*d->tws_snap));
	if (!d->tws_snap)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		kvd_log(errno == ENOENT ? KVD_LOG_INFO : KVD_LOG_WARN, "toolwait",
			"%s: %s: tool waits are predicted from a cold start", path,
			errno == ENOENT ? "none yet" : strerror(errno));
		return 0;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > KVD_TWS_MAX_BYTES) {
		kvd_log(KVD_LOG_WARN, "toolwait", "%s: not a regular file of at most %d bytes: "
			"not read; tool waits are predicted from a cold start", path,
			KVD_TWS_MAX_BYTES);
		close(fd);
		return 0;
	}
	root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	close(fd);
	arr = root ? json_object_get(root, "classes") : NULL;
	if (!root || !json_is_integer(json_object_get(root, "version")) ||
	    json_integer_value(json_object_get(root, "version")) != KVD_TWS_VERSION ||
	    !json_is_array(arr) || json_array_size(arr) >= KVD_MAX_TOOL_CLASSES) {
		kvd_log(KVD_LOG_WARN, "toolwait", "%s: %s: not read; tool waits are predicted "
			"from a cold start", path, root ? "not a version 1 table of at most 255 "
			"classes" : je.text);
		json_decref(root);
		return 0;
	}
	/* all or nothing: a table with one bad class is not what we wrote */
	cls = calloc(json_array_size(arr) + 1, sizeof(*cls));
	if (!cls) {
		json_decref(root);
		return -ENOMEM;
	}
	json_array_foreach(arr, k, o) {
		if (class_parse(o, &cls[k])) {
			kvd_log(KVD_LOG_WARN, "toolwait", "%s: class %zu is malformed: not read; "
				"tool waits are predicted from a cold start", path, k);
			free(cls);
			json_decref(root);
			return 0;
		}
	}
	for (i = 0; i < json_array_size(arr); i++) {
		uint32_t mine;

		if (!tenant_known(d, cls[i].tenant) ||
		    kvd_toolclass_find(d, cls[i].tenant, cls[i].name, strlen(cls[i].name), &mine)) {
			gone++;
			continue;
		}
		d->classes[d->n_classes++] = cls[i];
		waits += cls[i].hist.count;
		n++;
	}
	free(cls);
	json_decref(root);
	kvd_log(KVD_LOG_INFO, "toolwait", "%s: %u tool classes, %" PRIu64 " waits%s", path, n,
		waits, gone ? " (classes of tenants no longer configured, or twice, left out)" : "");
	return 0;
}

void kvd_toolwait_state_snap(struct kvd *d, uint64_t now, int force)
{
	if (!d->tws_snap || d->m.tool_waits == d->tws_waits || (!force && now < d->tws_next_ns))
		return;
	memcpy(d->tws_snap, d->classes, d->n_classes * sizeof(*d->classes));
	d->tws_n = d->n_classes;
	d->tws_waits = d->m.tool_waits;
	d->tws_next_ns = now + KVD_TWS_EVERY_S * 1000000000ull;
#ifdef KVD_TEST_HOOKS
	if (getenv("KVD_TEST_TWS_EVERY_MS"))	/* the periodic write, seen in a test */
		d->tws_next_ns = now + strtoull(getenv("KVD_TEST_TWS_EVERY_MS"), NULL, 10) * 1000000ull;
#endif
	d->tws_pending = 1;
}

static json_t *table_json(const struct kvd_toolclass *cls, uint32_t n)
{
	json_t *root = json_object(), *arr = json_array();
	uint32_t i, k;

	if (!root || !arr)
		goto fail;
	json_object_set_new(root, "version", json_integer(KVD_TWS_VERSION));
	json_object_set(root, "classes", arr);
	for (i = 0; i < n; i++) {
		const struct kva_toolwait_hist *h = &cls[i].hist;
		json_t *o, *slots;

		if (!h->count)	/* a class registered, no wait of it measured yet */
			continue;
		slots = json_array();
		o = json_pack("{s:s, s:s, s:I, s:I, s:I}", "tool", cls[i].name, "tenant",
			      cls[i].tenant, "count", (json_int_t)h->count, "total_us",
			      (json_int_t)h->total_us, "max_us", (json_int_t)h->max_us);
		if (!o || !slots) {
			json_decref(o);
			json_decref(slots);
			goto fail;
		}
		for (k = 0; k < KVA_TOOLWAIT_SLOTS; k++)
			json_array_append_new(slots, json_integer(h->slots[k]));
		json_object_set_new(o, "slots", slots);
		json_array_append_new(arr, o);
	}
	json_decref(arr);
	return root;
fail:
	json_decref(arr);
	json_decref(root);
	return NULL;
}

void kvd_toolwait_state_flush(struct kvd *d)
{
	const char *path = d->cfg.toolwait_state;
	char tmp[sizeof(d->cfg.toolwait_state) + 8];
	json_t *root;
	int fd, rc = -ENOMEM;

	if (!d->tws_pending)
		return;
	d->tws_pending = 0;
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	root = table_json(d->tws_snap, d->tws_n);
	if (root) {
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		rc = fd < 0 ? -errno : 0;
		if (!rc && json_dumpfd(root, fd, JSON_COMPACT))
			rc = -EIO;
		if (fd >= 0 && close(fd) && !rc)
			rc = -errno;
		if (!rc && rename(tmp, path))
			rc = -errno;
		if (rc && fd >= 0)
			unlink(tmp);
		json_decref(root);
	}
	if (rc && !d->tws_failing)
		kvd_log(KVD_LOG_WARN, "toolwait", "%s: not written (%s): a restart will predict "
			"tool waits from what the file held before", path, strerror(-rc));
	else if (!rc && d->tws_failing)
		kvd_log(KVD_LOG_INFO, "toolwait", "%s: written again", path);
	d->tws_failing = rc != 0;
}
