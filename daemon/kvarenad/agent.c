// SPDX-License-Identifier: MIT
/*
 * agent.c - server-side tools: the agent loop's tool half. The tools
 * ([tools] enable: sh, c_compile_run, read_file, write_file, list_dir,
 * calc)
 * are declared to the model through kvd_server_tools() (the HTTP layer
 * appends them to a request's tools for tenants allowed to use them).
 * When a reply's round ends in calls to such tools only, the scheduler
 * hands them here: the session goes TOOL_WAIT in the kernel (tool class =
 * the first call's tool, expected wait = the predictor's) for exactly the
 * run, the calls run in the sandbox (daemon/sandbox) on a small pool of
 * threads, outside the orchestrator's lock and concurrently, each run's
 * cgroup registered with the eBPF tool-wait programs when they are loaded;
 * then the scheduler appends the results as tool turns (the text the chat
 * template renders for them) and prefills only those tokens.
 *
 * Each conversation has a work directory WORKDIR_ROOT/SESSION_ID, kept
 * across its tool calls and removed when the conversation is forgotten.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "internal.h"
#include "kvsandbox.h"
#include "log.h"

#define KVD_MAX_TOOL_THREADS 64	/* [tools] threads: calls at once, all tenants */
#define KVD_MAX_ROUND_CALLS 16		/* more calls in one round: none run */
#define KVD_TOOL_WORKDIR "/home/tool"	/* the work directory inside the sandbox */
#define KVD_MAX_DECLS 32		/* kvd_request.server_tools has 32 bits */
#define KVD_MAX_DECL_BYTES 16384	/* one MCP tool's declaration, serialised */

/* The declarations the model sees, by enum kvd_stool. calc, read_file,
 * list_dir and c_compile_run are byte for byte those the shipped agent
 * model was trained on (tools/train/corpus.py, Documentation/model.md):
 * with [tools] enable = calc, read_file, list_dir, c_compile_run it sees
 * the system prompt it learned. c_compile_run also takes an undeclared
 * "stdin"; the file tools take paths in the work directory. */
static const char *const decls[KVD_N_TOOLS] = {
	"{\"name\": \"sh\", \"description\": \"Run one shell command (/bin/sh -c) in the "
	"session's work directory, which persists across calls. No network. Returns its "
	"output.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"command\": "
	"{\"type\": \"string\", \"description\": \"the shell command\"}}, \"required\": "
	"[\"command\"]}}",
	"{\"name\": \"c_compile_run\", \"description\": \"Compile a C program and run it; "
	"returns its output.\", \"parameters\": {\"type\": \"object\", \"properties\": "
	"{\"code\": {\"type\": \"string\", \"description\": \"C source\"}}, \"required\": "
	"[\"code\"]}}",
	"{\"name\": \"read_file\", \"description\": \"Read a text file.\", \"parameters\": "
	"{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", "
	"\"description\": \"absolute path\"}}, \"required\": [\"path\"]}}",
	"{\"name\": \"write_file\", \"description\": \"Write a text file in the work "
	"directory.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"path\": "
	"{\"type\": \"string\", \"description\": \"path in the work directory\"}, "
	"\"content\": {\"type\": \"string\"}}, \"required\": [\"path\", \"content\"]}}",
	"{\"name\": \"list_dir\", \"description\": \"List the entries of a directory.\", "
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": "
	"\"string\", \"description\": \"absolute path\"}}, \"required\": [\"path\"]}}",
	"{\"name\": \"calc\", \"description\": \"Evaluate an arithmetic expression.\", "
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"expression\": "
	"{\"type\": \"string\", \"description\": \"integers with + - *\"}}, \"required\": "
	"[\"expression\"]}}",
};

/* One declaration offered to the model: a built-in tool or an MCP
 * server's tool. */
struct kvd_decl {
	char name[96];
	int builtin;			/* enum kvd_stool, or -1: MCP */
	struct kvd_mcpsrv *srv;
	char *remote;			/* the name the server knows it by */
};

struct kvd_call {
	struct kvd_round *r;
	enum kvd_stool tool;		/* built-in; KVD_N_TOOLS for MCP */
	const struct kvd_decl *decl;
	int restarted;			/* its MCP server was started again */
	char *name, *args;
	size_t args_len;
	char id[TC_ID_LEN + 1];		/* the call's id (its result names it) */
	/* result, written by the pool thread */
	struct kvs_result res;
	int rc;
	char *output;			/* what the model gets */
	size_t output_len;
	struct kvd_call *next;		/* the pool's queue */
};

struct kvd_round {
	struct kvd *d;
	struct kvd_job *j;		/* holds a reference */
	uint32_t tslot;			/* its tenant's entry in agent->tt */
	char tenant[64];		/* the tenant's name ("": none) */
	uint64_t wd_size;		/* the work directory's cap (0: plain) */
	char refuse[160];		/* why none of its calls may run */
	char workdir[600];
	struct kva_toolwait_key key;
	int has_key;
	uint32_t round, n, n_done;
	uint32_t result_bytes;
	uint32_t concurrency;		/* its tenant's, as configured now */
	uint64_t disk_cap;		/* its tenant's tool disk (0: no cap) */
	struct kvd_round *next;		/* agent->done */
	struct kvd_call calls[];
};

struct rm_item {
	char *path;
	uint32_t tslot;			/* whose tool disk it frees */
	uint64_t bytes;
	struct rm_item *next;
};

/*
 * What the tool pool knows of a tenant, by its name (its identity in the
 * configuration, kept across reloads): its calls waiting, how many run,
 * and its sessions' work directories. The pool runs at most
 * tool_concurrency calls of a tenant at once and takes the next call from
 * the tenants in turn, so one tenant's many calls queue behind each
 * other, not in front of everyone's; work directories are capped in
 * bytes, their sum per tenant by tool_disk_mb.
 */
struct kvd_tool_tenant {
	char name[64];			/* "": requests without a tenant */
	struct kvd_call *q_head, *q_tail;
	uint32_t running;
	uint32_t limit;			/* tool_concurrency as of its last round */
	uint64_t disk;			/* bytes its work directories may hold */
	uint32_t n_workdirs;
	int used;
};

struct kvd_agent {
	struct kvs_policy *policy;
	char *decls;			/* JSON array of the enabled tools */
	uint32_t enabled;
	struct kvd_decl decl[KVD_MAX_DECLS];
	uint32_t n_decl;
	struct kvd_mcpsrv *mcp[KVD_MAX_MCP];
	uint32_t n_mcp;
	uint64_t wd_size;		/* the policy's work directory cap (0: plain) */
	/* the queues: taken after d->lock, never the other way round */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvd_tool_tenant tt[KVD_MAX_TENANTS + 1];
	uint32_t n_tt, rr;		/* entries; the next to serve */
	struct rm_item *rm;
	int stop;
	pthread_t threads[KVD_MAX_TOOL_THREADS];
	unsigned n_threads;
	struct kvd_round *done;		/* guarded by d->lock */
};

/* The tenant's entry (a->lock held): found by name, else a new one, else
 * one no longer in use. */
static uint32_t tt_slot(struct kvd_agent *a, const char *name)
{
	uint32_t i, free_i = UINT32_MAX;

	for (i = 0; i < a->n_tt; i++) {
		if (a->tt[i].used && !strcmp(a->tt[i].name, name))
			return i;
		if (free_i == UINT32_MAX && (!a->tt[i].used ||
		    (!a->tt[i].q_head && !a->tt[i].running && !a->tt[i].n_workdirs)))
			free_i = i;
	}
	if (a->n_tt < KVD_MAX_TENANTS + 1)
		free_i = a->n_tt++;
	else if (free_i == UINT32_MAX)
		return 0;	/* every entry busy: share the first */
	memset(&a->tt[free_i], 0, sizeof(a->tt[0]));
	snprintf(a->tt[free_i].name, sizeof(a->tt[0].name), "%s", name);
	a->tt[free_i].used = 1;
	a->tt[free_i].limit = 1;
	return free_i;
}

/* The next call to run (a->lock held): the tenants in turn, each below
 * its concurrency. */
static struct kvd_call *next_call(struct kvd_agent *a)
{
	uint32_t k;

	for (k = 0; k < a->n_tt; k++) {
		uint32_t i = (a->rr + k) % a->n_tt;
		struct kvd_tool_tenant *t = &a->tt[i];
		struct kvd_call *c = t->q_head;

		if (!c || t->running >= t->limit)
			continue;
		t->q_head = c->next;
		if (!t->q_head)
			t->q_tail = NULL;
		t->running++;
		a->rr = i + 1;
		return c;
	}
	return NULL;
}

/* A call taken but not run (the pool stops): back where it was. */
static void tt_requeue(struct kvd_agent *a, struct kvd_call *c)
{
	struct kvd_tool_tenant *t = &a->tt[c->r->tslot];

	c->next = t->q_head;
	t->q_head = c;
	if (!t->q_tail)
		t->q_tail = c;
	t->running--;
}

/* ---- declarations ------------------------------------------------------ */

const char *kvd_server_tools(const struct kvd *d)
{
	return d->agent ? d->agent->decls : NULL;
}

uint32_t kvd_agent_decl_mask(const struct kvd *d)
{
	uint32_t n = d->agent ? d->agent->n_decl : 0;

	return n >= 32 ? ~0u : (1u << n) - 1;
}

int kvd_server_tools_allowed(struct kvd *d, uint32_t tenant)
{
	int ok;

	if (!d->agent)
		return 0;
	pthread_mutex_lock(&d->lock);
	if (!d->cfg.n_tenants)
		ok = 1;
	else
		ok = kvd_tenant_slot(d, tenant) &&
		     d->cfg.tenants[kvd_tenant_slot(d, tenant) - 1].server_tools;
	pthread_mutex_unlock(&d->lock);
	return ok;
}

/* ---- running one call (pool threads, no orchestrator lock) ---------------- */

static int on_cgroup(void *ctx, uint64_t cgroup_id, pid_t pid)
{
	struct kvd_round *r = ctx;
	int rc;

	(void)pid;
	if (!r->has_key || !cgroup_id)
		return 0;
	rc = kva_toolwait_register_cgroup(r->d->tw, cgroup_id, &r->key);
	if (rc)
		kvd_log(KVD_LOG_WARN, "tools", "eBPF: cannot register cgroup %llu: %s",
			(unsigned long long)cgroup_id, strerror(-rc));
	return 0;	/* the tool runs unattributed rather than not at all */
}

static const char *jstr(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A path the model saw inside the sandbox (/home/tool/x) names the same
 * file for the in-process tools; anything else absolute is refused by
 * their RESOLVE_BENEATH. */
static const char *inner_path(const char *p)
{
	size_t n = strlen(KVD_TOOL_WORKDIR);

	if (p && !strncmp(p, KVD_TOOL_WORKDIR, n) && (p[n] == '/' || !p[n])) {
		p += n;
		while (*p == '/')
			p++;
		return *p ? p : ".";
	}
	return p;
}

/*
 * calc's expression, checked and normalised for the shell's arithmetic
 * ($((...)), 64-bit): digits, + - * ( ) and blanks only, so nothing but
 * arithmetic reaches the shell; leading zeros dropped (the shell would
 * read 010 as octal). The shell runs in the sandbox under the policy's
 * calc tool. 0, or -1 when the expression is not one.
 */
#define KVD_CALC_MAX 256
static int calc_expr(const char *in, char *out)
{
	size_t i, n = 0, digits = 0;

	if (!in || !*in || strlen(in) > KVD_CALC_MAX)
		return -1;
	for (i = 0; in[i]; i++) {
		char ch = in[i];

		if (ch >= '0' && ch <= '9') {
			/* a zero with more digits of the same number after it */
			if (ch == '0' && !digits && in[i + 1] >= '0' && in[i + 1] <= '9')
				continue;
			digits++;
		} else if (strchr("+-*() \t", ch)) {
			digits = 0;
		} else {
			return -1;
		}
		out[n++] = ch;
	}
	out[n] = 0;
	return 0;
}

static void refuse(struct kvs_result *res, const char *why)
{
	memset(res, 0, sizeof(*res));
	res->reason = KVS_EXIT_REFUSED;
	snprintf(res->note, sizeof(res->note), "%s", why);
}

static void run_call(struct kvd_agent *a, struct kvd_call *c)
{
	struct kvd_round *r = c->r;
	json_error_t je;
	json_t *o;
	const char *s;
	char why[KVS_NOTE_LEN];

	if (r->refuse[0]) {
		refuse(&c->res, r->refuse);
		c->rc = -EDQUOT;
		return;
	}
	/* the session's work directory, capped at what its tenant had left
	 * when it was first needed (made once; then it exists) */
	if (!c->decl->srv && (c->rc = kvs_workdir_setup(a->policy, r->workdir, r->wd_size, why,
							 sizeof(why)))) {
		refuse(&c->res, why[0] ? why : "the session's work directory cannot be made");
		return;
	}
	o = json_loadb(c->args, c->args_len, 0, &je);

	if (!json_is_object(o)) {
		refuse(&c->res, "the arguments are not a JSON object");
		c->rc = -EINVAL;
		json_decref(o);
		return;
	}
	if (c->decl->srv) {
		json_decref(o);
		c->rc = kvd_mcp_call(c->decl->srv, r->tenant, c->decl->remote, c->args, c->args_len,
				     r->has_key ? r->d->tw : NULL, r->has_key ? &r->key : NULL,
				     &c->res, &c->restarted);
		return;
	}
	switch (c->tool) {
	case KVD_TOOL_SH: {
		const char *argv[] = { "/bin/sh", "-c", jstr(o, "command"), NULL };
		struct kvs_request req = {
			.tool = "sh", .workdir = r->workdir, .argv = argv,
			.on_cgroup = on_cgroup, .ctx = r,
		};

		if (!argv[2]) {
			refuse(&c->res, "sh: wants a string \"command\"");
			c->rc = -EINVAL;
			break;
		}
		c->rc = kvs_run(a->policy, &req, &c->res);
		break;
	}
	case KVD_TOOL_C_COMPILE_RUN: {
		const char *in = jstr(o, "stdin");

		s = jstr(o, "code");
		if (!s)
			s = jstr(o, "source");
		if (!s) {
			refuse(&c->res, "c_compile_run: wants a string \"code\"");
			c->rc = -EINVAL;
			break;
		}
		c->rc = kvs_tool_c_compile_run_hook(a->policy, r->workdir, s, strlen(s), in,
						    in ? strlen(in) : 0, NULL, on_cgroup, r,
						    &c->res);
		break;
	}
	case KVD_TOOL_CALC: {
		char expr[KVD_CALC_MAX + 1];
		const char *argv[] = { "/bin/sh", "-c", "echo $(($1))", "calc", expr, NULL };
		struct kvs_request req = {
			.tool = "calc", .workdir = r->workdir, .argv = argv,
			.on_cgroup = on_cgroup, .ctx = r,
		};

		if (calc_expr(jstr(o, "expression"), expr)) {
			refuse(&c->res, "calc: wants an \"expression\" of integers, + - * and "
			       "parentheses (at most 256 characters)");
			c->rc = -EINVAL;
			break;
		}
		c->rc = kvs_run(a->policy, &req, &c->res);
		break;
	}
	case KVD_TOOL_READ_FILE:
	case KVD_TOOL_WRITE_FILE:
	case KVD_TOOL_LIST_DIR:
		s = inner_path(jstr(o, "path"));
		if (c->tool == KVD_TOOL_READ_FILE) {
			c->rc = kvs_read_file(a->policy, r->workdir, s, &c->res);
		} else if (c->tool == KVD_TOOL_LIST_DIR) {
			c->rc = kvs_list_dir(a->policy, r->workdir, s ? s : ".", &c->res);
		} else {
			const char *data = jstr(o, "content");

			if (!data) {
				refuse(&c->res, "write_file: wants a string \"content\"");
				c->rc = -EINVAL;
				break;
			}
			c->rc = kvs_write_file(a->policy, r->workdir, s, data, strlen(data),
					       &c->res);
		}
		break;
	default:
		refuse(&c->res, "unknown tool");
		c->rc = -EINVAL;
	}
	json_decref(o);
	if (r->has_key && c->res.cgroup_id)
		kva_toolwait_unregister_cgroup(r->d->tw, c->res.cgroup_id);
}

/* Appends s to b (cap bytes at most), as it is: the output is plain text
 * in the prompt (its markers never become tokens that end its turn:
 * daemon/chat, "Plain text"). */
static void out_add(char *b, size_t *len, size_t cap, const char *s, size_t n)
{
	if (n > cap - *len)
		n = cap - *len;
	memcpy(b + *len, s, n);
	*len += n;
}

/* The tool result as the model reads it: stdout, stderr, and a bracketed
 * line when it did not exit 0; at most result_bytes, valid UTF-8. Trailing
 * newlines are dropped: the chat template puts one before the closing tag,
 * and a model trained on results without them reads "7006652\n\n" as a
 * different, unfamiliar turn. */
static void format_output(struct kvd_call *c, uint32_t cap)
{
	const struct kvs_result *res = &c->res;
	char tail[KVS_NOTE_LEN + 96];
	size_t room = (size_t)cap + sizeof(tail), len = 0, clean;
	char *b = malloc(room), *u;
	int n = 0;

	if (!b)
		return;
	if (res->out_len)
		out_add(b, &len, cap, res->out, res->out_len);
	if (res->err_len) {
		if (len && b[len - 1] != '\n')
			out_add(b, &len, cap, "\n", 1);
		out_add(b, &len, cap, res->err, res->err_len);
	}
	if (len == cap)
		n = snprintf(tail, sizeof(tail), "\n[output cut at %u bytes]", cap);
	while (len && b[len - 1] == '\n')
		len--;
	if (res->reason != KVS_EXIT_CODE || res->status)
		n += snprintf(tail + n, sizeof(tail) - (size_t)n, "%s[%s %d%s%s]",
			      len ? "\n" : "", res->reason == KVS_EXIT_CODE ? "exit status" :
			      kvs_exit_name(res->reason), res->status,
			      res->note[0] && res->reason != KVS_EXIT_CODE ? ": " : "",
			      res->reason != KVS_EXIT_CODE ? res->note : "");
	if (n > 0) {
		if ((size_t)n > sizeof(tail) - 1)
			n = sizeof(tail) - 1;
		memcpy(b + len, tail, (size_t)n);	/* room has sizeof(tail) spare */
		len += (size_t)n;
	}
	u = malloc(len * 3 + 1);
	if (!u) {
		free(b);
		return;
	}
	clean = kvd_utf8_clean(b, len, u);
	u[clean] = 0;
	free(b);
	c->output = u;
	c->output_len = clean;
}

static void *pool_main(void *arg)
{
	struct kvd *d = arg;
	struct kvd_agent *a = d->agent;

	pthread_mutex_lock(&a->lock);
	for (;;) {
		struct kvd_call *c = NULL;
		struct rm_item *rm;
		uint32_t slot;

		while (!a->stop && !a->rm && !(c = next_call(a)))
			pthread_cond_wait(&a->cond, &a->lock);
		if (a->stop) {
			if (c)
				tt_requeue(a, c);
			break;
		}
		if (!c && (rm = a->rm)) {
			a->rm = rm->next;
			pthread_mutex_unlock(&a->lock);
			kvs_workdir_remove(a->policy, rm->path);
			pthread_mutex_lock(&a->lock);
			/* gone: its bytes are the tenant's again */
			a->tt[rm->tslot].disk -= rm->bytes;
			a->tt[rm->tslot].n_workdirs--;
			free(rm->path);
			free(rm);
			continue;
		}
		slot = c->r->tslot;
		pthread_mutex_unlock(&a->lock);
		run_call(a, c);
		format_output(c, c->r->result_bytes);
		pthread_mutex_lock(&d->lock);
		if (++c->r->n_done == c->r->n) {
			c->r->next = a->done;
			a->done = c->r;
		}
		pthread_mutex_unlock(&d->lock);
		kvd_wake(d);
		pthread_mutex_lock(&a->lock);
		a->tt[slot].running--;
		pthread_cond_broadcast(&a->cond);	/* its tenant may go on */
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* ---- life ---------------------------------------------------------------- */

static int mkdir_p(const char *path)
{
	char tmp[600];
	size_t i, n = strlen(path);

	if (n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (i = 1; i <= n; i++)
		if (tmp[i] == '/' || !tmp[i]) {
			char c = tmp[i];

			tmp[i] = 0;
			if (mkdir(tmp, 0700) && errno != EEXIST)
				return -errno;
			tmp[i] = c;
		}
	return 0;
}

static int decl_add(struct kvd_agent *a, json_t *arr, const char *name, json_t *f,
		    int builtin, struct kvd_mcpsrv *srv, const char *remote)
{
	struct kvd_decl *dc = &a->decl[a->n_decl];

	if (json_array_append(arr, f))
		return -ENOMEM;
	snprintf(dc->name, sizeof(dc->name), "%s", name);
	dc->builtin = builtin;
	dc->srv = srv;
	if (remote && !(dc->remote = strdup(remote)))
		return -ENOMEM;
	a->n_decl++;
	return 0;
}

static int tool_name_ok(const char *s)
{
	size_t i, n = strlen(s);

	if (!n || n > 64)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

static int allowed(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	if (!n)
		return 0;
	if (!list[0])
		return 1;
	while ((p = strstr(p, name))) {
		if ((p == list || strchr(", \t", p[-1])) && (!p[n] || strchr(", \t", p[n])))
			return 1;
		p += n;
	}
	return 0;
}

/* One MCP server's tools, as declarations: PREFIX + its name, its
 * description, its inputSchema as the parameters. A name that collides
 * with a built-in tool or another declaration is a configuration error. */
static int mcp_decls(struct kvd *d, struct kvd_agent *a, const struct kvd_mcp_cfg *mc,
		     struct kvd_mcpsrv *srv, json_t *tools, json_t *arr, char *err,
		     size_t errlen)
{
	char prefix[40], name[160];
	json_t *t;
	size_t i;
	uint32_t k;

	(void)d;
	if (mc->has_prefix)
		snprintf(prefix, sizeof(prefix), "%s", mc->prefix);
	else
		snprintf(prefix, sizeof(prefix), "%s_", mc->name);
	json_array_foreach(tools, i, t) {
		const char *rn = json_string_value(json_object_get(t, "name"));
		const char *desc = json_string_value(json_object_get(t, "description"));
		json_t *schema = json_object_get(t, "inputSchema"), *f;
		char *dump;
		size_t dl, dn = desc ? strnlen(desc, 2048) : 0;

		if (!rn || !allowed(mc->allow, rn))
			continue;
		snprintf(name, sizeof(name), "%s%s", prefix, rn);
		if (!tool_name_ok(name)) {
			/* not logged as it is: a server's bytes stay out of the log */
			kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] a tool name of %zu bytes is not a "
				"valid tool name ([A-Za-z0-9_-], at most 64); not offered",
				mc->name, strlen(prefix) + strlen(rn));
			continue;
		}
		for (k = 0; k < KVD_N_TOOLS; k++)
			if (!strcmp(name, kvd_stool_names[k])) {
				snprintf(err, errlen, "[mcp.%s] tool %s has a built-in tool's name; "
					 "set a prefix", mc->name, name);
				return -EINVAL;
			}
		for (k = 0; k < a->n_decl; k++)
			if (!strcmp(name, a->decl[k].name)) {
				snprintf(err, errlen, "[mcp.%s] tool %s is declared twice; set a "
					 "prefix", mc->name, name);
				return -EINVAL;
			}
		if (a->n_decl == KVD_MAX_DECLS) {
			kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] tool %s: %d tools are offered at "
				"most; not offered (narrow with allow =)", mc->name, name,
				KVD_MAX_DECLS);
			continue;
		}
		/* at most 2 KiB of description, cut between UTF-8 characters */
		while (dn && desc[dn] && ((unsigned char)desc[dn] & 0xc0) == 0x80)
			dn--;
		/* "o" steals: a reference of its own either way */
		f = json_pack("{s:s, s:s%, s:o}", "name", name, "description",
			      desc ? desc : "", dn,
			      "parameters", json_is_object(schema) ? json_incref(schema) :
			      json_pack("{s:s}", "type", "object"));
		if (!f)
			return -ENOMEM;
		dump = json_dumps(f, JSON_COMPACT);
		dl = dump ? strlen(dump) : SIZE_MAX;
		free(dump);
		{
			/* arguments are an object in every family's syntax (a
			 * chat marker in a declaration is plain text: harmless) */
			struct chat_tool ct = { name, f };
			char why[200];

			if (chat_tool_check(&ct, why, sizeof(why))) {
				kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] tool %s: not offered: %s",
					mc->name, name, why);
				json_decref(f);
				continue;
			}
		}
		if (dl > KVD_MAX_DECL_BYTES) {
			kvd_log(KVD_LOG_WARN, "mcp", "[mcp.%s] tool %s: its declaration is over "
				"%d bytes; not offered", mc->name, name, KVD_MAX_DECL_BYTES);
			json_decref(f);
			continue;
		}
		if (decl_add(a, arr, name, f, -1, srv, rn)) {
			json_decref(f);
			return -ENOMEM;
		}
		json_decref(f);
	}
	return 0;
}

/* The built-in tools enabled, then each MCP server's (started here). */
static int build_decls(struct kvd *d, struct kvd_agent *a, char *err, size_t errlen)
{
	json_t *arr = json_array(), *f;
	json_error_t je;
	uint32_t i;
	int rc = 0;

	if (!arr)
		return -ENOMEM;
	/* in the order [tools] enable names them (the prompt's order) */
	for (i = 0; i < KVD_N_TOOLS && !rc; i++) {
		uint32_t t = d->cfg.n_tools_order ? (i < d->cfg.n_tools_order ?
						     d->cfg.tools_order[i] : KVD_N_TOOLS) : i;

		if (t >= KVD_N_TOOLS || !(a->enabled & (1u << t)))
			continue;
		f = json_loads(decls[t], 0, &je);
		rc = f ? decl_add(a, arr, kvd_stool_names[t], f, (int)t, NULL, NULL) : -ENOMEM;
		json_decref(f);
	}
	for (i = 0; i < d->cfg.n_mcp && !rc; i++) {
		const struct kvd_mcp_cfg *mc = &d->cfg.mcp[i];
		json_t *tools = NULL;
		struct kvd_mcpsrv *srv = kvd_mcp_start(mc, a->policy, &tools, err, errlen);

		if (!srv) {
			rc = -EINVAL;
			break;
		}
		a->mcp[a->n_mcp++] = srv;
		if (tools)
			rc = mcp_decls(d, a, mc, srv, tools, arr, err, errlen);
		json_decref(tools);
	}
	if (!rc) {
		a->decls = json_dumps(arr, JSON_PRESERVE_ORDER);
		if (!a->decls)
			rc = -ENOMEM;
	}
	json_decref(arr);
	if (rc == -ENOMEM)
		snprintf(err, errlen, "server-side tool declarations: out of memory");
	return rc;
}

int kvd_agent_init(struct kvd *d, char *err, size_t errlen)
{
	struct kvd_agent *a;
	const char *notes;
	int i, rc;

	if (!d->cfg.tools_enabled && !d->cfg.n_mcp)
		return 0;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	d->agent = a;
	a->enabled = d->cfg.tools_enabled;
	rc = d->cfg.tools_policy[0] ?
		kvs_policy_load(d->cfg.tools_policy, &a->policy, err, errlen) :
		kvs_policy_default(NULL, &a->policy, err, errlen);
	if (rc) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", err);
		snprintf(err, errlen, "[tools] policy %s: %s",
			 d->cfg.tools_policy[0] ? d->cfg.tools_policy : "(built-in)", tmp);
		return rc;
	}
	for (i = 0; i < KVD_N_TOOLS; i++)
		if ((a->enabled & (1u << i)) && !kvs_policy_has_tool(a->policy, kvd_stool_names[i])) {
			snprintf(err, errlen, "[tools] enable names %s, which the policy lacks",
				 kvd_stool_names[i]);
			return -EINVAL;
		}
	rc = mkdir_p(d->cfg.tools_workdir_root);
	if (rc) {
		snprintf(err, errlen, "[tools] workdir_root %s: %s", d->cfg.tools_workdir_root,
			 strerror(-rc));
		return rc;
	}
	/* only the daemon enters it: a tool's own directory (its chmod, its
	 * files) reaches no other user of the host */
	if (chmod(d->cfg.tools_workdir_root, 0700)) {
		rc = -errno;
		snprintf(err, errlen, "[tools] workdir_root %s: chmod 0700: %s",
			 d->cfg.tools_workdir_root, strerror(-rc));
		return rc;
	}
	/* before the model is loaded: each spawn then copies a small process */
	rc = kvs_policy_start_spawner(a->policy);
	if (rc)
		kvd_log(KVD_LOG_WARN, "tools", "sandbox spawner: %s; tools spawn from the daemon",
			strerror(-rc));
	/* MCP servers start after the spawner, before the model and workers */
	rc = build_decls(d, a, err, errlen);
	if (rc)
		return rc;
	a->wd_size = kvs_policy_workdir_size(a->policy);
	if (!a->wd_size)
		kvd_log(KVD_LOG_WARN, "tools", "work directories are plain directories (no "
			"spawner, an unprivileged launcher, or workdir_size = 0): their size is not "
			"capped and tool_disk_mb is not enforced");
	for (a->n_threads = 0; a->n_threads < d->cfg.tools_threads &&
	     a->n_threads < KVD_MAX_TOOL_THREADS; a->n_threads++)
		if (pthread_create(&a->threads[a->n_threads], NULL, pool_main, d)) {
			snprintf(err, errlen, "tool threads: cannot start");
			return -EAGAIN;
		}
	notes = kvs_policy_host_notes(a->policy);
	kvd_log(KVD_LOG_INFO, "tools", "server-side tools: %u (%u MCP servers); policy %s; "
		"work dirs under %s; at most %u rounds per request%s%s", a->n_decl, a->n_mcp,
		d->cfg.tools_policy[0] ? d->cfg.tools_policy : "built-in least privilege",
		d->cfg.tools_workdir_root, d->cfg.tools_max_rounds, notes[0] ? "; " : "", notes);
	return 0;
}

static void round_free(struct kvd_round *r)
{
	uint32_t i;

	for (i = 0; i < r->n; i++) {
		free(r->calls[i].name);
		free(r->calls[i].args);
		free(r->calls[i].output);
		kvs_result_free(&r->calls[i].res);
	}
	free(r);
}

void kvd_agent_stop(struct kvd *d)
{
	struct kvd_agent *a = d->agent;
	struct kvd_round *r, *rounds = NULL;
	unsigned i;

	if (!a || a->stop)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = 1;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	for (i = 0; i < a->n_threads; i++)
		pthread_join(a->threads[i], NULL);
	/* calls never started: their rounds never complete */
	for (i = 0; i < a->n_tt; i++) {
		while (a->tt[i].q_head) {
			struct kvd_call *c = a->tt[i].q_head;

			a->tt[i].q_head = c->next;
			if (c->r->n_done != UINT32_MAX) {
				c->r->n_done = UINT32_MAX;
				c->r->next = rounds;
				rounds = c->r;
			}
		}
		a->tt[i].q_tail = NULL;
	}
	pthread_mutex_lock(&d->lock);
	while ((r = a->done)) {
		a->done = r->next;
		r->next = rounds;
		rounds = r;
	}
	while ((r = rounds)) {
		rounds = r->next;
		kvd_job_put(r->j);
		round_free(r);
	}
	pthread_mutex_unlock(&d->lock);
	while (a->rm) {
		struct rm_item *rm = a->rm;

		a->rm = rm->next;
		kvs_workdir_remove(a->policy, rm->path);
		a->tt[rm->tslot].disk -= rm->bytes;
		a->tt[rm->tslot].n_workdirs--;
		free(rm->path);
		free(rm);
	}
}

void kvd_agent_fini(struct kvd *d)
{
	struct kvd_agent *a = d->agent;
	uint32_t i;

	if (!a)
		return;
	kvd_agent_stop(d);
	for (i = 0; i < a->n_mcp; i++)
		kvd_mcp_free(a->mcp[i]);
	for (i = 0; i < a->n_decl; i++)
		free(a->decl[i].remote);
	kvs_policy_free(a->policy);
	free(a->decls);
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->cond);
	free(a);
	d->agent = NULL;
}

static void workdir_of(const struct kvd *d, const struct kvd_conv *c, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", d->cfg.tools_workdir_root, c->id);
}

void kvd_agent_workdir_view(const struct kvd *d, const char *session, char *out, size_t n)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", d->cfg.tools_workdir_root, session);
	if (!d->agent || kvs_workdir_view(d->agent->policy, path, out, n))
		snprintf(out, n, "%s", path);
}

void kvd_agent_forget(struct kvd *d, struct kvd_conv *c)
{
	struct kvd_agent *a = d->agent;
	struct rm_item *rm;
	char path[600];

	if (!a || !c->has_workdir)
		return;
	c->has_workdir = 0;
	workdir_of(d, c, path, sizeof(path));
	rm = calloc(1, sizeof(*rm));
	if (rm)
		rm->path = strdup(path);
	if (!rm || !rm->path || a->stop) {
		/* no thread to hand it to: remove it here */
		kvs_workdir_remove(a->policy, path);
		pthread_mutex_lock(&a->lock);
		a->tt[c->tool_tslot].disk -= c->tool_disk;
		a->tt[c->tool_tslot].n_workdirs--;
		pthread_mutex_unlock(&a->lock);
		if (rm)
			free(rm->path);
		free(rm);
		return;
	}
	/* its bytes stay its tenant's until it is gone */
	rm->tslot = c->tool_tslot;
	rm->bytes = c->tool_disk;
	pthread_mutex_lock(&a->lock);
	rm->next = a->rm;
	a->rm = rm;
	pthread_cond_signal(&a->cond);
	pthread_mutex_unlock(&a->lock);
}

/* ---- rounds (scheduler thread, d->lock held) ------------------------------ */

/* The declaration's index, or -1. */
static int tool_index(const struct kvd_agent *a, const char *name)
{
	uint32_t i;

	for (i = 0; i < a->n_decl; i++)
		if (!strcmp(name, a->decl[i].name))
			return (int)i;
	return -1;
}

/* The round's tenant, by name, and its limits as configured now (d->lock
 * held: a reload may have changed them). */
static void tenant_of(struct kvd *d, uint32_t tenant, struct kvd_round *r)
{
	uint32_t slot = kvd_tenant_slot(d, tenant);
	const struct kvd_tenant_cfg *t = slot ? &d->cfg.tenants[slot - 1] : NULL;

	snprintf(r->tenant, sizeof(r->tenant), "%s", t ? t->name : "");
	r->concurrency = t && t->tool_concurrency ? t->tool_concurrency :
			 d->cfg.tools_concurrency;
	r->disk_cap = (uint64_t)(t && t->has_tool_disk ? t->tool_disk_mb : d->cfg.tools_disk_mb)
		      << 20;
}

/* A conversation's first tool round: its work directory's bytes come out
 * of its tenant's tool_disk (a->lock held). What is left, if less than
 * the policy's cap; under 1 MiB left, the round is refused, and the next
 * tries again. */
static void reserve_disk(struct kvd_agent *a, struct kvd_conv *c, struct kvd_round *r)
{
	struct kvd_tool_tenant *t = &a->tt[r->tslot];
	uint64_t size = a->wd_size;

	if (size && r->disk_cap) {
		uint64_t left = t->disk < r->disk_cap ? r->disk_cap - t->disk : 0;

		if (left < size)
			size = left;
		if (size < (1u << 20)) {
			snprintf(r->refuse, sizeof(r->refuse), "the tenant's tool disk (tool_disk_mb "
				 "= %llu) is held by its %u work directories; ending conversations "
				 "frees theirs", (unsigned long long)(r->disk_cap >> 20),
				 t->n_workdirs);
			return;
		}
	}
	c->has_workdir = 1;
	c->tool_disk = size;
	c->tool_tslot = r->tslot;
	t->disk += size;
	t->n_workdirs++;
}

int kvd_agent_try(struct kvd *d, struct kvd_job *j)
{
	struct kvd_agent *a = d->agent;
	struct kvd_conv *c = j->conv;
	struct tc_result tr;
	struct kvd_round *r;
	uint64_t pred;
	uint32_t cls, i, mask;
	size_t k;

	if (!a || !c || j->cancelled || j->round_start > j->gen_len)
		return 0;
	mask = j->server_tools & kvd_agent_decl_mask(d);
	if (!mask)
		return 0;
	if (tc_parse(d->chat, j->gen + j->round_start, j->gen_len - j->round_start, &tr))
		return 0;
	if (!tr.n_calls)
		goto no;
	for (k = 0; k < tr.n_calls; k++) {
		int t = tool_index(a, tr.calls[k].name);

		/* a call to anything else (the client's own tools) ends the
		 * response with every call of the round: none runs here */
		if (t < 0 || !(mask & (1u << t)))
			goto no;
	}
	if (j->tool_rounds >= d->cfg.tools_max_rounds) {
		d->m.tool_rounds_exhausted++;
		kvd_log(KVD_LOG_INFO, "tools", "%s: %s: max_rounds (%u) reached; the calls are "
			"returned as they are", j->request_id, c->id, d->cfg.tools_max_rounds);
		goto no;
	}
	if (tr.n_calls > KVD_MAX_ROUND_CALLS) {
		kvd_log(KVD_LOG_WARN, "tools", "%s: %zu calls in one round (at most %d run); "
			"returned as they are", j->request_id, tr.n_calls, KVD_MAX_ROUND_CALLS);
		goto no;
	}
	r = calloc(1, sizeof(*r) + tr.n_calls * sizeof(r->calls[0]));
	if (!r)
		goto no;
	r->d = d;
	r->n = (uint32_t)tr.n_calls;
	r->round = j->tool_rounds + 1;
	r->result_bytes = d->cfg.tools_result_bytes;
	workdir_of(d, c, r->workdir, sizeof(r->workdir));
	for (i = 0; i < r->n; i++) {
		struct kvd_call *cl = &r->calls[i];

		cl->r = r;
		cl->decl = &a->decl[tool_index(a, tr.calls[i].name)];
		cl->tool = cl->decl->builtin >= 0 ? (enum kvd_stool)cl->decl->builtin :
			   KVD_N_TOOLS;
		memcpy(cl->id, tr.calls[i].id, sizeof(cl->id));
		cl->name = strdup(tr.calls[i].name);
		cl->args = malloc(tr.calls[i].arguments_len + 1);
		if (!cl->name || !cl->args) {
			round_free(r);
			goto no;
		}
		memcpy(cl->args, tr.calls[i].arguments, tr.calls[i].arguments_len);
		cl->args[tr.calls[i].arguments_len] = 0;
		cl->args_len = tr.calls[i].arguments_len;
	}
	if (d->tw && kva_toolwait_session_key(d->arena, c->as.sid, &r->key) == 0)
		r->has_key = 1;
	tc_result_free(&tr);
	tenant_of(d, j->tenant, r);
	/* the kernel sees TOOL_WAIT before the first tool's instruction */
	cls = kvd_toolclass(d, j->tenant, r->calls[0].name, strlen(r->calls[0].name));
	pred = kvd_toolwait_predict_us(d, cls);
	c->tool_class = cls;
	c->wait_started_ns = kvd_now_ns();
	kvd_kstate_set(d, c, KVA_STATE_TOOL_WAIT, cls, pred);
	kvd_kstate_flush(d);
	j->tool_rounds++;
	j->state = JOB_TOOL_RUNNING;
	/* keep, spill or discard its KV while the tools run */
	kvd_tiering_tool_wait(d, c, pred);
	j->refs++;
	r->j = j;
	d->m.tool_rounds++;
	pthread_mutex_lock(&a->lock);
	r->tslot = tt_slot(a, r->tenant);
	a->tt[r->tslot].limit = r->concurrency;
	for (i = 0; i < r->n && r->calls[i].decl->srv; i++)
		;
	if (!c->has_workdir && i < r->n)	/* a built-in tool: the work directory */
		reserve_disk(a, c, r);
	r->wd_size = c->tool_disk;
	for (i = 0; i < r->n; i++) {
		struct kvd_tool_tenant *t = &a->tt[r->tslot];

		r->calls[i].next = NULL;
		if (t->q_tail)
			t->q_tail->next = &r->calls[i];
		else
			t->q_head = &r->calls[i];
		t->q_tail = &r->calls[i];
	}
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	return 1;
no:
	tc_result_free(&tr);
	return 0;
}

struct kvd_round *kvd_agent_next_done(struct kvd *d)
{
	struct kvd_round *r = d->agent ? d->agent->done : NULL;

	if (r)
		d->agent->done = r->next;
	return r;
}

struct kvd_job *kvd_agent_round_job(const struct kvd_round *r)
{
	return r->j;
}

char *kvd_agent_round_finish(struct kvd *d, struct kvd_round *r, size_t *len,
			     struct kvd_span **markup, size_t *n_markup)
{
	struct kvd_job *j = r->j;
	struct kvd_conv *c = j->conv;
	uint64_t now = kvd_now_ns();
	struct chat_tool_result res[KVD_MAX_ROUND_CALLS];
	struct chat_prompt p = { 0 };
	uint32_t i;

	if (c && c->wait_started_ns) {
		kvd_toolwait_record(d, c->tool_class, (now - c->wait_started_ns) / 1000);
		c->wait_started_ns = 0;
	}
	for (i = 0; i < r->n; i++) {
		struct kvd_call *cl = &r->calls[i];
		struct kvd_tool_run tr = { 0 };
		unsigned reason = cl->res.reason < 8 ? cl->res.reason : 7;

		if (cl->tool < KVD_N_TOOLS) {
			d->m.tool_runs[cl->tool][reason]++;
		} else {
			d->m.mcp_calls[cl->rc || cl->res.status ? 1 : 0]++;
			d->m.mcp_restarts += (uint64_t)cl->restarted;
		}
		tr.round = r->round;
		tr.index = i;
		tr.name = cl->name;
		tr.arguments = cl->args;
		tr.arguments_len = cl->args_len;
		tr.exit_reason = kvs_exit_name(cl->res.reason);
		tr.exit_code = cl->res.status;
		tr.output = cl->output ? cl->output : "";
		tr.output_len = cl->output ? cl->output_len : 0;
		tr.wall_ms = cl->res.wall_s * 1e3;
		kvd_log(KVD_LOG_INFO, "tools",
			"%s %s round=%u tool=%s exit_reason=%s status=%d wall_ms=%.1f "
			"cpu_ms=%.1f output_bytes=%zu cgroup=%llu%s%s", j->request_id,
			c ? c->id : "-", r->round, cl->name, tr.exit_reason, tr.exit_code,
			tr.wall_ms, (cl->res.cpu_user_s + cl->res.cpu_sys_s) * 1e3,
			tr.output_len, (unsigned long long)cl->res.cgroup_id,
			cl->res.note[0] ? " note=" : "", cl->res.note);
		kvd_job_emit_tool_run(j, &tr);
		res[i].call_id = cl->id;
		res[i].name = cl->name;
		res[i].output = tr.output;
		res[i].output_len = tr.output_len;
	}
	/* the results as the model's template renders them (daemon/chat),
	 * its markup apart from the tools' output */
	*markup = NULL;
	*n_markup = 0;
	if (chat_render_tool_round(d->chat, res, r->n, &p)) {
		chat_prompt_free(&p);
		return NULL;
	}
	{
		size_t n = chat_prompt_markup(&p, NULL, 0);
		struct chat_span *cs = malloc((n + 1) * sizeof(*cs));

		*markup = malloc((n + 1) * sizeof(**markup));
		if (!cs || !*markup) {
			free(cs);
			free(*markup);
			*markup = NULL;
			chat_prompt_free(&p);
			return NULL;
		}
		chat_prompt_markup(&p, cs, n);
		for (size_t i = 0; i < n; i++)
			(*markup)[i] = (struct kvd_span){ cs[i].off, cs[i].len };
		*n_markup = n;
		free(cs);
	}
	free(p.plain);
	return sb_steal(&p.text, len);
}

void kvd_agent_round_free(struct kvd *d, struct kvd_round *r)
{
	(void)d;
	kvd_job_put(r->j);
	round_free(r);
}
