// SPDX-License-Identifier: MIT
/*
 * mcp.c - kvarenad's MCP tool servers ([mcp.NAME]): each one is started
 * in the sandbox at daemon start (daemon/sandbox/kvsmcp.h), initialized,
 * its tools listed; agent.c offers them to the model and hands their calls
 * here. One server is used by one thread at a time (its lock). A call that
 * fails other than by the server's own JSON-RPC error (it died, timed out,
 * sent something over the cap or malformed) becomes a tool error and the
 * server is stopped; a later call starts it again, but not before its
 * back-off has passed (restart_backoff_ms, doubled per failure in a row
 * up to restart_backoff_max_ms, back to the first once an instance ran
 * healthy_ms): a server that crashes at once costs a refused call, not a
 * spawn per call. After each start and on notifications/tools/list_changed
 * the server's tools are listed again: the declarations offered to the
 * model stay those of the daemon's start (prompts render the same bytes),
 * a call to a tool the server no longer has is refused without reaching
 * it, and tools it added are logged. A server that cannot start at daemon
 * start is logged and its tools are not offered: the daemon serves
 * without them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
#include "kvsmcp.h"
#include "log.h"

struct kvd_mcpsrv {
	const struct kvd_mcp_cfg *cfg;
	struct kvs_policy *own;		/* built-in least privilege; or NULL */
	const struct kvs_policy *p;
	const char *tool;
	char *words;			/* argv's storage */
	const char *argv[KVD_MCP_MAX_ARGS + 1];
	struct kvs_mcp_limits lim;
	pthread_mutex_t lock;		/* one call at a time; all below */
	struct kvs_mcp *m;		/* NULL: stopped, started on the next call */
	json_t *offered;		/* names declared at daemon start */
	json_t *has;			/* names of its last tools/list */
	uint32_t fails;			/* failures in a row */
	uint64_t started_ns;		/* of the running instance */
	uint64_t next_start_ns;		/* no start before */
};

#define MCP_BACKOFF_MS 1000u
#define MCP_BACKOFF_MAX_MS 60000u
#define MCP_HEALTHY_MS 60000u

static uint32_t or_default(uint32_t v, uint32_t d)
{
	return v ? v : d;
}

/* The running instance failed (or a start did): stop it, and the next
 * start waits first * 2^(fails-1), at most max. A failure of an instance
 * that ran healthy_ms starts the count again. */
static void failed(struct kvd_mcpsrv *s)
{
	uint64_t now = kvd_now_ns(), d;
	uint32_t first = or_default(s->cfg->restart_backoff_ms, MCP_BACKOFF_MS);
	uint32_t max = or_default(s->cfg->restart_backoff_max_ms, MCP_BACKOFF_MAX_MS);
	uint32_t healthy = or_default(s->cfg->healthy_ms, MCP_HEALTHY_MS);

	if (s->m && now - s->started_ns >= (uint64_t)healthy * 1000000ull)
		s->fails = 0;
	kvs_mcp_close(s->m);
	s->m = NULL;
	if (s->fails < 32)
		s->fails++;
	d = (uint64_t)first << (s->fails - 1 < 20 ? s->fails - 1 : 20);
	if (d > max)
		d = max;
	s->next_start_ns = now + d * 1000000ull;
	kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] stopped after %u failure%s in a row; next start "
		"in %llu ms at the earliest", s->cfg->name, s->fails, s->fails > 1 ? "s" : "",
		(unsigned long long)d);
}

static int has_name(json_t *names, const char *n)
{
	json_t *v;
	size_t i;

	json_array_foreach(names, i, v)
		if (!strcmp(json_string_value(v), n))
			return 1;
	return 0;
}

static json_t *names_of(json_t *tools)
{
	json_t *out = json_array(), *t;
	size_t i;

	json_array_foreach(tools, i, t)
		json_array_append(out, json_object_get(t, "name"));
	return out;
}

/* tools/list again (after a start, on list_changed): what the server has
 * now. A tool it dropped is refused from now on; one it added is logged
 * (offered from the daemon's next start). Its bytes stay out of the log. */
static int relist(struct kvd_mcpsrv *s, const char *why, char *err, size_t errlen)
{
	json_t *tools = NULL, *names, *v;
	size_t i, gone = 0, added = 0;
	int rc = kvs_mcp_list_tools(s->m, &tools, err, errlen);

	if (rc)
		return rc;
	names = names_of(tools);
	json_decref(tools);
	if (!names)
		return -ENOMEM;
	json_array_foreach(s->offered, i, v)
		gone += !has_name(names, json_string_value(v));
	json_array_foreach(names, i, v)
		added += !has_name(s->has, json_string_value(v));
	json_decref(s->has);
	s->has = names;
	kvd_log(gone || added ? KVD_LOG_WARN : KVD_LOG_INFO, "mcp",
		"[mcp.%s] tools listed again (%s): %zu tools; %zu of those offered are gone "
		"(refused), %zu new (offered after a restart of the daemon)", s->cfg->name, why,
		json_array_size(names), gone, added);
	return 0;
}

/* "a b \"c d\"" -> argv; no other expansion. */
static int split(struct kvd_mcpsrv *s, char *err, size_t errlen)
{
	char *w, *o;
	int n = 0;

	s->words = strdup(s->cfg->command);
	if (!s->words)
		return -ENOMEM;
	w = o = s->words;
	while (*w) {
		while (*w == ' ' || *w == '\t')
			w++;
		if (!*w)
			break;
		if (n == KVD_MCP_MAX_ARGS) {
			snprintf(err, errlen, "[mcp.%s] command: more than %d words",
				 s->cfg->name, KVD_MCP_MAX_ARGS);
			return -E2BIG;
		}
		s->argv[n++] = o;
		while (*w && *w != ' ' && *w != '\t') {
			if (*w == '"') {
				char *q = strchr(w + 1, '"');

				if (!q) {
					snprintf(err, errlen, "[mcp.%s] command: unbalanced quote",
						 s->cfg->name);
					return -EINVAL;
				}
				memmove(o, w + 1, (size_t)(q - w - 1));
				o += q - w - 1;
				w = q + 1;
			} else {
				*o++ = *w++;
			}
		}
		if (*w)
			w++;
		*o++ = 0;
	}
	s->argv[n] = NULL;
	if (!n || s->argv[0][0] != '/') {
		snprintf(err, errlen, "[mcp.%s] command: want an absolute path first",
			 s->cfg->name);
		return -EINVAL;
	}
	return 0;
}

static int start(struct kvd_mcpsrv *s, char *err, size_t errlen)
{
	int rc = kvs_mcp_open(s->p, s->tool, s->cfg->workdir[0] ? s->cfg->workdir : NULL,
			      s->argv, &s->lim, &s->m, err, errlen);

	s->started_ns = kvd_now_ns();
	return rc;
}

struct kvd_mcpsrv *kvd_mcp_start(const struct kvd_mcp_cfg *cfg, const struct kvs_policy *p,
				 json_t **tools, char *err, size_t errlen)
{
	struct kvd_mcpsrv *s = calloc(1, sizeof(*s));
	char why[512];
	int rc;

	*tools = NULL;
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->cfg = cfg;
	pthread_mutex_init(&s->lock, NULL);
	s->lim.init_timeout_ms = cfg->timeout_ms;
	s->lim.call_timeout_ms = cfg->timeout_ms;
	s->lim.max_message = cfg->max_result_bytes;
	s->lim.max_tools = 256;
	if (split(s, err, errlen))
		goto fail;
	if (cfg->tool[0]) {
		if (!kvs_policy_has_tool(p, cfg->tool)) {
			snprintf(err, errlen, "[mcp.%s] tool = %s: the [tools] policy lacks it",
				 cfg->name, cfg->tool);
			goto fail;
		}
		s->p = p;
		s->tool = cfg->tool;
	} else {
		/* the built-in least privilege, its executable alone added */
		const char *exe[] = { s->argv[0], NULL };

		if (kvs_policy_default(exe, &s->own, why, sizeof(why))) {
			snprintf(err, errlen, "[mcp.%s] built-in policy: %s", cfg->name, why);
			goto fail;
		}
		s->p = s->own;
		s->tool = "default";
	}
	rc = start(s, why, sizeof(why));
	if (!rc)
		rc = kvs_mcp_list_tools(s->m, tools, why, sizeof(why));
	if (rc) {
		kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] %s: %s; its tools are not offered",
			cfg->name, s->argv[0], why);
		kvs_mcp_close(s->m);
		s->m = NULL;
		json_decref(*tools);
		*tools = NULL;
		return s;
	}
	s->has = names_of(*tools);
	s->offered = json_incref(s->has);
	if (!s->has) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	kvd_log(KVD_LOG_INFO, "mcp", "[mcp.%s] %s: %zu tools; policy tool %s", cfg->name,
		kvs_mcp_server_info(s->m), json_array_size(*tools),
		cfg->tool[0] ? cfg->tool : "built-in least privilege");
	return s;
fail:
	kvd_mcp_free(s);
	return NULL;
}

const char *kvd_mcp_name(const struct kvd_mcpsrv *s)
{
	return s->cfg->name;
}

void kvd_mcp_free(struct kvd_mcpsrv *s)
{
	if (!s)
		return;
	kvs_mcp_close(s->m);
	json_decref(s->has);
	json_decref(s->offered);
	kvs_policy_free(s->own);
	free(s->words);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* content[]'s text items, one after another; other kinds are named. */
static char *result_text(json_t *result, size_t *len)
{
	json_t *content = json_object_get(result, "content"), *it;
	size_t i, cap = 256, n = 0;
	char *b = malloc(cap);

	if (!b)
		return NULL;
	json_array_foreach(content, i, it) {
		const char *type = json_string_value(json_object_get(it, "type"));
		const char *t = json_string_value(json_object_get(it, "text"));
		char other[96];
		size_t tl;

		if (!type || strcmp(type, "text") || !t) {
			snprintf(other, sizeof(other), "[%.40s content omitted]",
				 type ? type : "untyped");
			t = other;
		}
		tl = strlen(t);
		if (n + tl + 2 > cap) {
			char *nb;

			cap = (n + tl + 2) * 2;
			nb = realloc(b, cap);
			if (!nb) {
				free(b);
				return NULL;
			}
			b = nb;
		}
		if (n)
			b[n++] = '\n';
		memcpy(b + n, t, tl);
		n += tl;
	}
	b[n] = 0;
	*len = n;
	return b;
}

static void fail_res(struct kvs_result *res, enum kvs_exit reason, const char *fmt,
		     const char *a, const char *b)
{
	char buf[KVS_NOTE_LEN];

	res->reason = reason;
	res->status = 1;
	snprintf(buf, sizeof(buf), fmt, a, b);
	res->err = strdup(buf);		/* the model reads it (note: empty) */
	res->err_len = res->err ? strlen(res->err) : 0;
}

int kvd_mcp_call(struct kvd_mcpsrv *s, const char *name, const char *args, size_t args_len,
		 struct kva_toolwait *tw, const struct kva_toolwait_key *key,
		 struct kvs_result *res, int *restarted)
{
	json_error_t je;
	json_t *a = json_loadb(args, args_len, 0, &je), *result = NULL;
	char why[512];
	uint64_t cg = 0;
	uint64_t t0 = kvd_now_ns();
	int rc;

	memset(res, 0, sizeof(*res));
	*restarted = 0;
	if (!json_is_object(a)) {
		json_decref(a);
		fail_res(res, KVS_EXIT_REFUSED, "%s%s", "the arguments are not a JSON object", "");
		return -EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	if (!s->m && t0 < s->next_start_ns) {
		char wait[160];

		snprintf(wait, sizeof(wait), "%s is restarting: %u failure%s in a row, next start "
			 "in %llu ms", s->cfg->name, s->fails, s->fails > 1 ? "s" : "",
			 (unsigned long long)((s->next_start_ns - t0 + 999999) / 1000000));
		pthread_mutex_unlock(&s->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_SETUP, "MCP server %s%s", wait, "");
		return -EAGAIN;
	}
	if (!s->m) {
		*restarted = 1;
		rc = start(s, why, sizeof(why));
		if (!rc)
			rc = relist(s, "restarted", why, sizeof(why));
		if (rc) {
			failed(s);
			pthread_mutex_unlock(&s->lock);
			json_decref(a);
			fail_res(res, KVS_EXIT_SETUP, "MCP server %s does not start: %s",
				 s->cfg->name, why);
			return rc;
		}
	}
	/* what it said while idle: list_changed, or that it is gone */
	rc = kvs_mcp_poll(s->m);
	if (!rc && kvs_mcp_tools_changed(s->m))
		rc = relist(s, "tools/list_changed", why, sizeof(why));
	if (rc) {
		failed(s);
		pthread_mutex_unlock(&s->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_CODE, "MCP error: the server failed while idle: %s",
			 rc == -EPIPE ? "it exited" : why, "");
		return rc;
	}
	if (!has_name(s->has, name)) {
		pthread_mutex_unlock(&s->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_REFUSED, "MCP server %s no longer offers tool %s",
			 s->cfg->name, name);
		return -ENOENT;
	}
	cg = kvs_mcp_cgroup_id(s->m);
	if (tw && key && cg &&
	    kva_toolwait_register_cgroup(tw, cg, key))
		cg = 0;
	rc = kvs_mcp_call(s->m, name, a, &result, why, sizeof(why));
	if (tw && cg)
		kva_toolwait_unregister_cgroup(tw, cg);
	res->cgroup_id = kvs_mcp_cgroup_id(s->m);
	if (rc && rc != -EREMOTEIO && rc != -EINVAL) {
		/* the stream cannot be trusted any more: the server goes */
		kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] %s: %s (malformed %lu, oversized %lu); "
			"stopped", s->cfg->name, name, why,
			kvs_mcp_malformed(s->m), kvs_mcp_oversized(s->m));
		failed(s);
	} else if (kvs_mcp_tools_changed(s->m)) {
		char why2[512];

		/* it said so while answering: list now, for the next call */
		if (relist(s, "tools/list_changed", why2, sizeof(why2)))
			failed(s);
	} else if (!rc && s->fails &&
		   t0 - s->started_ns >= (uint64_t)or_default(s->cfg->healthy_ms,
							      MCP_HEALTHY_MS) * 1000000ull) {
		s->fails = 0;	/* healthy long enough: the back-off starts over */
	}
	pthread_mutex_unlock(&s->lock);
	json_decref(a);
	res->wall_s = (double)(kvd_now_ns() - t0) / 1e9;
	if (rc) {
		fail_res(res, rc == -ETIMEDOUT || rc == -ETIME ? KVS_EXIT_TIMEOUT :
			 rc == -EMSGSIZE ? KVS_EXIT_OUTPUT_CAP : KVS_EXIT_CODE,
			 "MCP error: %s%s", why, "");
		return rc;
	}
	res->out = result_text(result, &res->out_len);
	if (json_is_true(json_object_get(result, "isError")))
		res->status = 1;
	json_decref(result);
	if (!res->out) {
		fail_res(res, KVS_EXIT_CODE, "%s%s", "out of memory", "");
		return -ENOMEM;
	}
	return 0;
}
