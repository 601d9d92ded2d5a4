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
 *
 * Instances: one shared by every tenant (default), or with per_tenant =
 * yes one per tenant, started on that tenant's first call, with its own
 * process, state, work directory and back-off: one tenant can neither
 * read what another left in the server nor keep it restarting for all.
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

/* One running (or stopped) copy of the server. */
struct kvd_mcpinst {
	char tenant[64];		/* per_tenant: whose */
	char workdir[600];		/* its /home/tool; "": a fresh one per start */
	pthread_mutex_t lock;		/* one call at a time; all below */
	struct kvs_mcp *m;		/* NULL: stopped, started on the next call */
	json_t *has;			/* names of its last tools/list */
	uint32_t fails;			/* failures in a row */
	uint64_t started_ns;		/* of the running process */
	uint64_t next_start_ns;		/* no start before */
};

struct kvd_mcpsrv {
	const struct kvd_mcp_cfg *cfg;
	struct kvs_policy *own;		/* built-in least privilege; or NULL */
	const struct kvs_policy *p;
	const char *tool;
	char *words;			/* argv's storage */
	const char *argv[KVD_MCP_MAX_ARGS + 1];
	struct kvs_mcp_limits lim;
	json_t *offered;		/* names declared at daemon start */
	pthread_mutex_t lock;		/* the table below */
	struct kvd_mcpinst *inst[KVD_MAX_TENANTS + 1];	/* [0]: the shared one */
	uint32_t n_inst;
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
static void failed(struct kvd_mcpsrv *s, struct kvd_mcpinst *in)
{
	uint64_t now = kvd_now_ns(), d;
	uint32_t first = or_default(s->cfg->restart_backoff_ms, MCP_BACKOFF_MS);
	uint32_t max = or_default(s->cfg->restart_backoff_max_ms, MCP_BACKOFF_MAX_MS);
	uint32_t healthy = or_default(s->cfg->healthy_ms, MCP_HEALTHY_MS);

	if (in->m && now - in->started_ns >= (uint64_t)healthy * 1000000ull)
		in->fails = 0;
	kvs_mcp_close(in->m);
	in->m = NULL;
	if (in->fails < 32)
		in->fails++;
	d = (uint64_t)first << (in->fails - 1 < 20 ? in->fails - 1 : 20);
	if (d > max)
		d = max;
	in->next_start_ns = now + d * 1000000ull;
	kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s]%s%s stopped after %u failure%s in a row; next "
		"start in %llu ms at the earliest", s->cfg->name, s->cfg->per_tenant ?
		" tenant " : "", s->cfg->per_tenant ? in->tenant : "", in->fails,
		in->fails > 1 ? "s" : "", (unsigned long long)d);
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
static int relist(struct kvd_mcpsrv *s, struct kvd_mcpinst *in, const char *why, char *err,
		  size_t errlen)
{
	json_t *tools = NULL, *names, *v;
	size_t i, gone = 0, added = 0;
	int rc = kvs_mcp_list_tools(in->m, &tools, err, errlen);

	if (rc)
		return rc;
	names = names_of(tools);
	json_decref(tools);
	if (!names)
		return -ENOMEM;
	json_array_foreach(s->offered, i, v)
		gone += !has_name(names, json_string_value(v));
	json_array_foreach(names, i, v)
		added += !has_name(in->has ? in->has : s->offered, json_string_value(v));
	json_decref(in->has);
	in->has = names;
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

static int start(struct kvd_mcpsrv *s, struct kvd_mcpinst *in, char *err, size_t errlen)
{
	int rc = kvs_mcp_open(s->p, s->tool, in->workdir[0] ? in->workdir : NULL, s->argv,
			      &s->lim, &in->m, err, errlen);

	in->started_ns = kvd_now_ns();
	return rc;
}

static struct kvd_mcpinst *inst_new(struct kvd_mcpsrv *s, const char *tenant)
{
	struct kvd_mcpinst *in = calloc(1, sizeof(*in));

	if (!in)
		return NULL;
	snprintf(in->tenant, sizeof(in->tenant), "%s", tenant);
	/* a tenant's own copy gets a work directory of its own beside the
	 * configured one's name, never the shared directory */
	if (s->cfg->workdir[0])
		snprintf(in->workdir, sizeof(in->workdir), s->cfg->per_tenant ? "%s/tenant-%s" :
			 "%s", s->cfg->workdir, tenant);
	pthread_mutex_init(&in->lock, NULL);
	return in;
}

static void inst_free(struct kvd_mcpinst *in)
{
	if (!in)
		return;
	kvs_mcp_close(in->m);
	json_decref(in->has);
	pthread_mutex_destroy(&in->lock);
	free(in);
}

/* The instance that serves tenant: the shared one, or its own (made on
 * its first call), or NULL when every slot is another tenant's. */
static struct kvd_mcpinst *inst_for(struct kvd_mcpsrv *s, const char *tenant)
{
	struct kvd_mcpinst *in = NULL;
	uint32_t i;

	if (!s->cfg->per_tenant)
		return s->inst[0];
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->n_inst; i++)
		if (!strcmp(s->inst[i]->tenant, tenant)) {
			in = s->inst[i];
			break;
		}
	if (!in && s->n_inst < KVD_MAX_TENANTS + 1 && (in = inst_new(s, tenant)))
		s->inst[s->n_inst++] = in;
	pthread_mutex_unlock(&s->lock);
	return in;
}

struct kvd_mcpsrv *kvd_mcp_start(const struct kvd_mcp_cfg *cfg, const struct kvs_policy *p,
				 json_t **tools, char *err, size_t errlen)
{
	struct kvd_mcpsrv *s = calloc(1, sizeof(*s));
	struct kvd_mcpinst *lister;
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
	/* shared: the instance that lists the tools serves them; per
	 * tenant: it only lists them, in a fresh directory, and stops */
	lister = inst_new(s, "");
	if (!lister) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (cfg->per_tenant)
		lister->workdir[0] = 0;
	else
		s->inst[s->n_inst++] = lister;
	rc = start(s, lister, why, sizeof(why));
	if (!rc)
		rc = kvs_mcp_list_tools(lister->m, tools, why, sizeof(why));
	if (rc) {
		kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] %s: %s; its tools are not offered",
			cfg->name, s->argv[0], why);
		kvs_mcp_close(lister->m);
		lister->m = NULL;
		if (cfg->per_tenant)
			inst_free(lister);
		json_decref(*tools);
		*tools = NULL;
		return s;
	}
	s->offered = names_of(*tools);
	if (!s->offered) {
		snprintf(err, errlen, "out of memory");
		if (cfg->per_tenant)
			inst_free(lister);
		goto fail;
	}
	kvd_log(KVD_LOG_INFO, "mcp", "[mcp.%s] %s: %zu tools; policy tool %s; %s", cfg->name,
		kvs_mcp_server_info(lister->m), json_array_size(*tools),
		cfg->tool[0] ? cfg->tool : "built-in least privilege",
		cfg->per_tenant ? "an instance per tenant, each started on its first call" :
		"one instance shared by every tenant");
	if (cfg->per_tenant)
		inst_free(lister);
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
	while (s->n_inst)
		inst_free(s->inst[--s->n_inst]);
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

int kvd_mcp_call(struct kvd_mcpsrv *s, const char *tenant, const char *name, const char *args,
		 size_t args_len, struct kva_toolwait *tw, const struct kva_toolwait_key *key,
		 struct kvs_result *res, int *restarted)
{
	json_error_t je;
	json_t *a = json_loadb(args, args_len, 0, &je), *result = NULL;
	struct kvd_mcpinst *in;
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
	in = inst_for(s, tenant ? tenant : "");
	if (!in) {
		json_decref(a);
		fail_res(res, KVS_EXIT_SETUP, "MCP server %s: no instance left for another tenant",
			 s->cfg->name, "");
		return -EUSERS;
	}
	pthread_mutex_lock(&in->lock);
	if (!in->m && t0 < in->next_start_ns) {
		char wait[160];

		snprintf(wait, sizeof(wait), "%s is restarting: %u failure%s in a row, next start "
			 "in %llu ms", s->cfg->name, in->fails, in->fails > 1 ? "s" : "",
			 (unsigned long long)((in->next_start_ns - t0 + 999999) / 1000000));
		pthread_mutex_unlock(&in->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_SETUP, "MCP server %s%s", wait, "");
		return -EAGAIN;
	}
	if (!in->m) {
		*restarted = 1;
		rc = start(s, in, why, sizeof(why));
		if (!rc)
			rc = relist(s, in, "restarted", why, sizeof(why));
		if (rc) {
			failed(s, in);
			pthread_mutex_unlock(&in->lock);
			json_decref(a);
			fail_res(res, KVS_EXIT_SETUP, "MCP server %s does not start: %s",
				 s->cfg->name, why);
			return rc;
		}
	}
	/* what it said while idle: list_changed, or that it is gone */
	rc = kvs_mcp_poll(in->m);
	if (!rc && kvs_mcp_tools_changed(in->m))
		rc = relist(s, in, "tools/list_changed", why, sizeof(why));
	if (rc) {
		failed(s, in);
		pthread_mutex_unlock(&in->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_CODE, "MCP error: the server failed while idle: %s",
			 rc == -EPIPE ? "it exited" : why, "");
		return rc;
	}
	if (!has_name(in->has ? in->has : s->offered, name)) {
		pthread_mutex_unlock(&in->lock);
		json_decref(a);
		fail_res(res, KVS_EXIT_REFUSED, "MCP server %s no longer offers tool %s",
			 s->cfg->name, name);
		return -ENOENT;
	}
	cg = kvs_mcp_cgroup_id(in->m);
	if (tw && key && cg &&
	    kva_toolwait_register_cgroup(tw, cg, key))
		cg = 0;
	rc = kvs_mcp_call(in->m, name, a, &result, why, sizeof(why));
	if (tw && cg)
		kva_toolwait_unregister_cgroup(tw, cg);
	res->cgroup_id = kvs_mcp_cgroup_id(in->m);
	if (rc && rc != -EREMOTEIO && rc != -EINVAL) {
		/* the stream cannot be trusted any more: the server goes */
		kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] %s: %s (malformed %lu, oversized %lu); "
			"stopped", s->cfg->name, name, why,
			kvs_mcp_malformed(in->m), kvs_mcp_oversized(in->m));
		failed(s, in);
	} else if (kvs_mcp_tools_changed(in->m)) {
		char why2[512];

		/* it said so while answering: list now, for the next call */
		if (relist(s, in, "tools/list_changed", why2, sizeof(why2)))
			failed(s, in);
	} else if (!rc && in->fails &&
		   t0 - in->started_ns >= (uint64_t)or_default(s->cfg->healthy_ms,
							      MCP_HEALTHY_MS) * 1000000ull) {
		in->fails = 0;	/* healthy long enough: the back-off starts over */
	}
	pthread_mutex_unlock(&in->lock);
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
