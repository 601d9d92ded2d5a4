// SPDX-License-Identifier: MIT
/*
 * config.c - defaults and the INI file (libinih) for kvarenad. Unknown
 * sections or keys are errors: a typo must not silently fall back to a
 * default (a tenant budget that is not applied is a security bug).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ini.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"

const char *const kvd_stool_names[KVD_N_TOOLS] = {
	"sh", "c_compile_run", "read_file", "write_file", "list_dir", "calc",
};

/* "sh, read_file" -> a mask and the order named (the declarations'
 * order); "" or "none": 0. -1 names an unknown tool. */
static int parse_tools(const char *v, uint32_t *out, uint8_t *order, uint32_t *n_order)
{
	char buf[256], *save = NULL, *t;
	uint32_t m = 0, n = 0;
	int i;

	if (strlen(v) >= sizeof(buf))
		return -1;
	memcpy(buf, v, strlen(v) + 1);
	for (t = strtok_r(buf, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
		if (!strcmp(t, "none"))
			continue;
		for (i = 0; i < KVD_N_TOOLS; i++)
			if (!strcmp(t, kvd_stool_names[i]))
				break;
		if (i == KVD_N_TOOLS)
			return -1;
		if (!(m & (1u << i)))
			order[n++] = (uint8_t)i;
		m |= 1u << i;
	}
	*out = m;
	*n_order = n;
	return 0;
}

void kvd_config_defaults(struct kvd_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen_host, sizeof(c->listen_host), "127.0.0.1");
	c->listen_port = 8080;
	c->max_body_kb = 4096;
	c->max_connections = 1024;
	c->max_connections_per_ip = 256;
	c->conn_timeout_s = 30;
	c->responses_max = 1000;
	c->responses_max_mb = 64;
	c->max_tokens_cap = 1024;
	snprintf(c->tool_open, sizeof(c->tool_open), "<tool_call>");
	snprintf(c->tool_close, sizeof(c->tool_close), "</tool_call>");
	snprintf(c->chat_template, sizeof(c->chat_template), "auto");
	snprintf(c->backend, sizeof(c->backend), "auto");
	c->kv_blocks = 1024;
	c->block_tokens = 16;
	snprintf(c->kv_dtype, sizeof(c->kv_dtype), "f16");
	snprintf(c->policy, sizeof(c->policy), "toolwait");
	c->prefix_cache = 1;
	c->retention = 1;
	c->idle_retention_s = 300;
	c->toolwait_min_s = 10;
	c->toolwait_max_s = 600;
	c->toolwait_bpf = 1;
	snprintf(c->tier_direct, sizeof(c->tier_direct), "auto");
	snprintf(c->tier_fixed, sizeof(c->tier_fixed), "auto");
	c->tier_queue_depth = 32;
	c->tier_decisions = 1;
	c->tier_prefetch = 1;
	c->tier_prefetch_slack = 1;
	c->tier_margin_ms = 100;
	c->prefill_workers = KVD_WORKERS_AUTO;
	c->decode_workers = KVD_WORKERS_AUTO;
	c->threads_per_worker = 0;	/* auto */
	c->max_batch = 64;
	c->step_tokens = 256;
	c->chunk_tokens = 128;
	c->steps_in_flight = 2;
	c->share_stages = 1;
	c->decode_reserve = 128;
	c->prefill_ahead = 4096;
	snprintf(c->prefill_backend, sizeof(c->prefill_backend), "cpu");
	snprintf(c->decode_backend, sizeof(c->decode_backend), "cpu");
	c->lease_ms = 30000;
	c->lease_per_token_ms = 50;
	c->restart_backoff_max_ms = 5000;
	c->prefill_load_scale = 1.0;
	c->max_queue = 256;
	c->max_sessions = 4096;
	c->log_level = 2;
	c->tools_max_rounds = 4;
	snprintf(c->tools_workdir_root, sizeof(c->tools_workdir_root),
		 "/var/lib/kvarenad/tools");
	c->tools_result_bytes = 16384;
	c->tools_threads = 4;
	c->tools_concurrency = 2;
	c->tools_disk_mb = 1024;
	c->remote_heartbeat_ms = 1000;
	c->remote_timeout_ms = 5000;
	c->remote_join_grace_s = 30;
}

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long long x;

	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static int parse_bool(const char *v, int *out)
{
	if (!strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcmp(v, "1") ||
	    !strcasecmp(v, "on"))
		*out = 1;
	else if (!strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcmp(v, "0") ||
		 !strcasecmp(v, "off"))
		*out = 0;
	else
		return -1;
	return 0;
}

static int copy_str(char *dst, size_t n, const char *v)
{
	if (strlen(v) >= n)
		return -1;
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

/*
 * A tenant's keys from a file, one per line (blank lines and lines
 * starting with # skipped): key_file = PATH, or key_credential = NAME,
 * the file systemd's LoadCredential= put in $CREDENTIALS_DIRECTORY, so
 * that the configuration itself holds no secret and only the service can
 * read its keys. -1 if the file cannot be read or a key is bad.
 */
/* API keys, one per line (# comments), appended to keys[*n] (at most
 * KVD_MAX_KEYS_PER_TENANT, each at least 16 bytes). */
static int keys_from_file(char keys[][128], uint32_t *n_keys, const char *path)
{
	char line[256];
	FILE *f;
	int rc = 0, n = 0;

	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		size_t len = strcspn(line, "\r\n");

		if (line[len] == 0 && !feof(f)) {
			rc = -1;	/* longer than any key may be */
			break;
		}
		line[len] = 0;
		if (!len || line[0] == '#')
			continue;
		if (*n_keys == KVD_MAX_KEYS_PER_TENANT || len < 16 ||
		    copy_str(keys[*n_keys], sizeof(keys[0]), line)) {
			rc = -1;
			break;
		}
		(*n_keys)++;
		n++;
	}
	fclose(f);
	explicit_bzero(line, sizeof(line));
	return rc || !n ? -1 : 0;
}

/* A systemd credential's file ($CREDENTIALS_DIRECTORY/NAME, from the
 * unit's LoadCredential=) holding keys, one per line. */
static int keys_from_credential(char keys[][128], uint32_t *n_keys, const char *name)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	char path[512];

	if (!dir || !*dir || !name[0] || strchr(name, '/') ||
	    snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -1;
	return keys_from_file(keys, n_keys, path);
}

struct load_ctx {
	struct kvd_config *c;
	char *err;
	size_t errlen;
	int failed;
};

/* "a, b, c": at most KVD_MAX_LIST entries without blanks or commas. */
static int parse_list(const char *v, char out[][256], uint32_t *n)
{
	*n = 0;
	while (*v) {
		size_t len;

		while (*v == ' ' || *v == ',')
			v++;
		len = strcspn(v, " ,");
		if (!len)
			break;
		if (*n == KVD_MAX_LIST || len >= 256)
			return -1;
		memcpy(out[*n], v, len);
		out[(*n)++][len] = 0;
		v += len;
	}
	return 0;
}

uint32_t kvd_tenant_id(const char *name)
{
	uint32_t h = 2166136261u;

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	h &= KVD_TENANT_ID_MAX;
	return h ? h : 1;
}

static struct kvd_tenant_cfg *tenant_for(struct kvd_config *c, const char *name)
{
	uint32_t i;

	for (i = 0; i < c->n_tenants; i++)
		if (!strcmp(c->tenants[i].name, name))
			return &c->tenants[i];
	if (c->n_tenants == KVD_MAX_TENANTS || strlen(name) >= sizeof(c->tenants[0].name) ||
	    !*name)
		return NULL;
	c->tenants[c->n_tenants].id = 0;	/* kvd_config_check: from the name */
	snprintf(c->tenants[c->n_tenants].name, sizeof(c->tenants[0].name), "%s", name);
	return &c->tenants[c->n_tenants++];
}

static int name_ok(const char *s, size_t max)
{
	size_t i, n = strlen(s);

	if (!n || n >= max)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return 0;
	return 1;
}

static struct kvd_mcp_cfg *mcp_for(struct kvd_config *c, const char *name)
{
	struct kvd_mcp_cfg *m;
	uint32_t i;

	for (i = 0; i < c->n_mcp; i++)
		if (!strcmp(c->mcp[i].name, name))
			return &c->mcp[i];
	if (c->n_mcp == KVD_MAX_MCP || !name_ok(name, sizeof(c->mcp[0].name)))
		return NULL;
	m = &c->mcp[c->n_mcp++];
	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->timeout_ms = 10000;
	m->max_result_bytes = 1u << 20;
	return m;
}

static int set_mcp(struct kvd_config *c, const char *name, const char *k, const char *v)
{
	struct kvd_mcp_cfg *m = mcp_for(c, name);
	uint32_t u;

	if (!m)
		return -1;
	if (!strcmp(k, "command"))
		return copy_str(m->command, sizeof(m->command), v);
	if (!strcmp(k, "tool"))
		return copy_str(m->tool, sizeof(m->tool), v);
	if (!strcmp(k, "prefix")) {
		if (v[0] && !name_ok(v, sizeof(m->prefix)))
			return -1;
		m->has_prefix = 1;
		return copy_str(m->prefix, sizeof(m->prefix), v);
	}
	if (!strcmp(k, "workdir"))
		return v[0] != '/' ? -1 : copy_str(m->workdir, sizeof(m->workdir), v);
	if (!strcmp(k, "allow"))
		return copy_str(m->allow, sizeof(m->allow), v);
	if (!strcmp(k, "timeout_ms"))
		return parse_u32(v, 100, 3600000, &u) ? -1 : (m->timeout_ms = u, 0);
	if (!strcmp(k, "max_result_bytes"))
		return parse_u32(v, 4096, 64u << 20, &u) ? -1 : (m->max_result_bytes = u, 0);
	if (!strcmp(k, "restart_backoff_ms"))
		return parse_u32(v, 10, 3600000, &u) ? -1 : (m->restart_backoff_ms = u, 0);
	if (!strcmp(k, "restart_backoff_max_ms"))
		return parse_u32(v, 10, 3600000, &u) ? -1 : (m->restart_backoff_max_ms = u, 0);
	if (!strcmp(k, "healthy_ms"))
		return parse_u32(v, 10, 86400000, &u) ? -1 : (m->healthy_ms = u, 0);
	if (!strcmp(k, "per_tenant"))
		return parse_bool(v, &m->per_tenant);
	return -2;
}

/* Returns 0 ok, -1 bad value, -2 unknown key. */
static int set_key(struct kvd_config *c, const char *sec, const char *k, const char *v)
{
	uint32_t u;
	int b;

#define U32(S, K, F, LO, HI) \
	if (!strcmp(sec, S) && !strcmp(k, K)) \
		return parse_u32(v, LO, HI, &u) ? -1 : (c->F = u, 0)
#define BOOL(S, K, F) \
	if (!strcmp(sec, S) && !strcmp(k, K)) \
		return parse_bool(v, &b) ? -1 : (c->F = b, 0)
#define STR(S, K, F) \
	if (!strcmp(sec, S) && !strcmp(k, K)) \
		return copy_str(c->F, sizeof(c->F), v)

	if (!strcmp(sec, "server") && !strcmp(k, "listen")) {
		const char *colon = strrchr(v, ':');

		if (!colon || colon == v || (size_t)(colon - v) >= sizeof(c->listen_host) ||
		    parse_u32(colon + 1, 1, 65535, &u))
			return -1;
		memcpy(c->listen_host, v, (size_t)(colon - v));
		c->listen_host[colon - v] = 0;
		c->listen_port = (uint16_t)u;
		return 0;
	}
	if (!strcmp(sec, "server") &&
	    (!strcmp(k, "cors_origins") || !strcmp(k, "allowed_hosts")))
		return parse_list(v, !strcmp(k, "cors_origins") ? c->cors_origins : c->allowed_hosts,
				  !strcmp(k, "cors_origins") ? &c->n_cors_origins : &c->n_allowed_hosts);
	U32("server", "responses_max", responses_max, 1, 1 << 20);
	U32("server", "responses_max_mb", responses_max_mb, 1, 1 << 16);
	BOOL("server", "allow_remote", allow_remote);
	U32("server", "max_body_kb", max_body_kb, 1, 1 << 20);
	U32("server", "max_connections", max_connections, 1, 65536);
	U32("server", "max_connections_per_ip", max_connections_per_ip, 0, 65536);
	U32("server", "http_threads", http_threads, 0, 64);
	if (!strcmp(sec, "server") && !strcmp(k, "metrics_key")) {
		if (c->n_metrics_keys == KVD_MAX_KEYS_PER_TENANT || strlen(v) < 16 ||
		    copy_str(c->metrics_keys[c->n_metrics_keys], sizeof(c->metrics_keys[0]), v))
			return -1;
		c->n_metrics_keys++;
		return 0;
	}
	if (!strcmp(sec, "server") && !strcmp(k, "metrics_key_file"))
		return v[0] == '/' ? keys_from_file(c->metrics_keys, &c->n_metrics_keys, v) : -1;
	if (!strcmp(sec, "server") && !strcmp(k, "metrics_key_credential"))
		return keys_from_credential(c->metrics_keys, &c->n_metrics_keys, v);
	U32("server", "connection_timeout_s", conn_timeout_s, 1, 3600);
	STR("model", "path", model_path);
	STR("model", "id", model_id);
	U32("model", "max_tokens", max_tokens_cap, 1, 1 << 20);
	STR("model", "tool_call_open", tool_open);
	STR("model", "tool_call_close", tool_close);
	STR("model", "chat_template", chat_template);
	STR("kv", "backend", backend);
	U32("kv", "blocks", kv_blocks, 8, 1 << 20);
	U32("kv", "block_tokens", block_tokens, 1, 4096);
	STR("kv", "dtype", kv_dtype);
	if (!strcmp(sec, "kv") && !strcmp(k, "handoff")) {
		if (!strcmp(v, "arena"))
			c->handoff = KVD_HANDOFF_ARENA;
		else if (!strcmp(v, "copy"))
			c->handoff = KVD_HANDOFF_COPY;
		else
			return -1;
		return 0;
	}
	STR("kv", "policy", policy);
	U32("kv", "low_watermark", low_wm, 0, 1 << 20);
	U32("kv", "high_watermark", high_wm, 0, 1 << 20);
	BOOL("kv", "prefix_cache", prefix_cache);
	BOOL("kv", "retention", retention);
	U32("kv", "idle_retention_s", idle_retention_s, 0, 86400 * 7);
	U32("kv", "toolwait_min_s", toolwait_min_s, 0, 86400);
	U32("kv", "toolwait_max_s", toolwait_max_s, 1, 86400 * 7);
	BOOL("kv", "toolwait_bpf", toolwait_bpf);
	if (!strcmp(sec, "kv") && !strcmp(k, "toolwait_state"))
		return v[0] && v[0] != '/' ? -1 :
		       copy_str(c->toolwait_state, sizeof(c->toolwait_state), v);
	U32("kv", "ttl_ms", ttl_ms, 0, 86400000);
	if (!strcmp(sec, "tier") && !strcmp(k, "dir"))
		return v[0] && v[0] != '/' ? -1 : copy_str(c->tier_dir, sizeof(c->tier_dir), v);
	if (!strcmp(sec, "tier") && !strcmp(k, "cap_mb")) {
		char *end;
		unsigned long long x;

		errno = 0;
		x = strtoull(v, &end, 10);
		if (errno || end == v || *end || v[0] == '-' || x > (1ull << 40))
			return -1;
		c->tier_cap_mb = x;
		return 0;
	}
	if (!strcmp(sec, "tier") && (!strcmp(k, "direct") || !strcmp(k, "fixed"))) {
		if (strcmp(v, "auto") && strcmp(v, "on") && strcmp(v, "off"))
			return -1;
		return copy_str(!strcmp(k, "direct") ? c->tier_direct : c->tier_fixed, 8, v);
	}
	U32("tier", "queue_depth", tier_queue_depth, 1, 1024);
	BOOL("tier", "decisions", tier_decisions);
	BOOL("tier", "prefetch", tier_prefetch);
	BOOL("tier", "prefetch_slack", tier_prefetch_slack);
	U32("tier", "prefetch_margin_ms", tier_margin_ms, 0, 600000);
	/* auto: from the CPUs; 0 when remote hosts take the stage ([remote]
	 * prefill / decode) */
	if (!strcmp(sec, "workers") && (!strcmp(k, "prefill") || !strcmp(k, "decode") ||
					 !strcmp(k, "threads"))) {
		int th = !strcmp(k, "threads");
		uint32_t *f = !strcmp(k, "prefill") ? &c->prefill_workers :
			      !strcmp(k, "decode") ? &c->decode_workers : &c->threads_per_worker;

		if (!strcmp(v, "auto"))
			return *f = th ? 0 : KVD_WORKERS_AUTO, 0;
		return parse_u32(v, th ? 1 : 0, th ? 2 : 64, &u) ? -1 : (*f = u, 0);
	}
	U32("workers", "max_batch", max_batch, 1, 256);
	STR("workers", "prefill_backend", prefill_backend);
	STR("workers", "decode_backend", decode_backend);
	STR("workers", "backend_options", backend_options);
	U32("workers", "lease_ms", lease_ms, 100, 3600000);
	U32("workers", "lease_per_token_ms", lease_per_token_ms, 0, 60000);
	U32("workers", "restart_backoff_max_ms", restart_backoff_max_ms, 0, 3600000);
	if (!strcmp(sec, "workers") && !strcmp(k, "prefill_load_scale")) {
		char *end;
		double x = strtod(v, &end);

		if (end == v || *end || !(x >= 0 && x <= 1000))
			return -1;
		c->prefill_load_scale = x;
		return 0;
	}
	U32("sched", "step_tokens", step_tokens, 1, 4096);
	U32("sched", "chunk_tokens", chunk_tokens, 1, 4096);
	U32("sched", "steps_in_flight", steps_in_flight, 1, 2);
	BOOL("sched", "share_stages", share_stages);
	U32("sched", "decode_reserve", decode_reserve, 0, 1 << 20);
	U32("sched", "prefill_ahead", prefill_ahead, 0, 1 << 24);
	U32("limits", "max_queue", max_queue, 1, 1 << 20);
	U32("limits", "max_sessions", max_sessions, 1, 1 << 22);
	STR("tools", "policy", tools_policy);
	if (!strcmp(sec, "tools") && !strcmp(k, "enable"))
		return parse_tools(v, &c->tools_enabled, c->tools_order,
				   &c->n_tools_order);
	U32("tools", "max_rounds", tools_max_rounds, 0, 64);
	if (!strcmp(sec, "tools") && !strcmp(k, "workdir_root"))
		return v[0] != '/' ? -1 : copy_str(c->tools_workdir_root,
						    sizeof(c->tools_workdir_root), v);
	U32("tools", "result_bytes", tools_result_bytes, 256, 1 << 20);
	U32("tools", "threads", tools_threads, 1, 64);
	U32("tools", "tool_concurrency", tools_concurrency, 1, 64);
	U32("tools", "tool_disk_mb", tools_disk_mb, 0, 1u << 30);
	STR("remote", "listen", remote_listen);
	if (!strcmp(sec, "remote") && !strcmp(k, "secret_file"))
		return v[0] != '/' ? -1 : copy_str(c->remote_secret_file,
						    sizeof(c->remote_secret_file), v);
	U32("remote", "prefill", remote_prefill, 0, 64);
	U32("remote", "decode", remote_decode, 0, 64);
	STR("remote", "ucx_tls", remote_ucx_tls);
	STR("remote", "ucx_devices", remote_ucx_devices);
	U32("remote", "heartbeat_ms", remote_heartbeat_ms, 50, 600000);
	U32("remote", "timeout_ms", remote_timeout_ms, 100, 3600000);
	U32("remote", "join_grace_s", remote_join_grace_s, 0, 86400 * 7);
	STR("events", "endpoint", events_endpoint);
	STR("events", "replay_endpoint", events_replay);
	STR("events", "topic", events_topic);
	BOOL("events", "allow_remote", events_allow_remote);
	if (!strcmp(sec, "log") && !strcmp(k, "level")) {
		static const char *const lv[] = { "error", "warn", "info", "debug" };

		for (b = 0; b < 4; b++)
			if (!strcmp(v, lv[b]))
				return c->log_level = b, 0;
		return -1;
	}
	if (!strncmp(sec, "mcp.", 4))
		return set_mcp(c, sec + 4, k, v);
	if (!strncmp(sec, "tenant.", 7)) {
		struct kvd_tenant_cfg *t = tenant_for(c, sec + 7);

		if (!t)
			return -1;
		if (!strcmp(k, "key")) {
			/* at least 16 bytes: the HTTP layer refuses shorter keys */
			if (t->n_keys == KVD_MAX_KEYS_PER_TENANT || strlen(v) < 16 ||
			    copy_str(t->keys[t->n_keys], sizeof(t->keys[0]), v))
				return -1;
			t->n_keys++;
			return 0;
		}
		if (!strcmp(k, "key_file"))
			return v[0] == '/' ? keys_from_file(t->keys, &t->n_keys, v) : -1;
		if (!strcmp(k, "key_credential"))
			return keys_from_credential(t->keys, &t->n_keys, v);
		if (!strcmp(k, "tokens_per_min")) {
			if (parse_u32(v, 0, UINT32_MAX, &u))
				return -1;
			t->tokens_per_min = u;
			return 0;
		}
		if (!strcmp(k, "kv_blocks"))
			return parse_u32(v, 0, 1 << 20, &t->kv_blocks);
		if (!strcmp(k, "server_tools"))
			return parse_bool(v, &t->server_tools);
		if (!strcmp(k, "weight"))
			return parse_u32(v, 1, 1000, &t->weight);
		if (!strcmp(k, "id"))
			return parse_u32(v, 1, KVD_TENANT_ID_MAX, &t->id);
		if (!strcmp(k, "tool_concurrency"))
			return parse_u32(v, 1, 64, &t->tool_concurrency);
		if (!strcmp(k, "tool_disk_mb")) {
			t->has_tool_disk = 1;
			return parse_u32(v, 0, 1u << 30, &t->tool_disk_mb);
		}
	}
	return -2;
#undef U32
#undef BOOL
#undef STR
}

int kvd_config_set(struct kvd_config *c, const char *sec, const char *key,
		   const char *val, char *err, size_t errlen)
{
	int r = set_key(c, sec, key, val);

	if (r)
		snprintf(err, errlen, "%s: %s", key, r == -2 ? "unknown setting" : "bad value");
	return r ? -1 : 0;
}

static int on_key(void *user, const char *sec, const char *k, const char *v)
{
	struct load_ctx *lc = user;
	int r;

	if (lc->failed)
		return 0;
	r = set_key(lc->c, sec, k, v);
	if (r) {
		snprintf(lc->err, lc->errlen, "[%s] %s = %s: %s", sec, k, v,
			 r == -2 ? "unknown key" : "bad value");
		lc->failed = 1;
		return 0;
	}
	return 1;
}

int kvd_config_load(struct kvd_config *c, const char *path, char *err, size_t errlen)
{
	struct load_ctx lc = { c, err, errlen, 0 };
	int r = ini_parse(path, on_key, &lc);

	if (r == -1) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (lc.failed) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", err);
		snprintf(err, errlen, "%s: %s", path, tmp);
		return -1;
	}
	if (r) {
		snprintf(err, errlen, "%s:%d: syntax error", path, r);
		return -1;
	}
	snprintf(c->config_path, sizeof(c->config_path), "%s", path);
	return 0;
}

int kvd_config_check(struct kvd_config *c, char *err, size_t errlen)
{
	uint32_t i, j;

	if (!c->model_path[0]) {
		snprintf(err, errlen, "no model: give --model FILE or [model] path");
		return -1;
	}
	if (strcmp(c->backend, "auto") && strcmp(c->backend, "kernel") &&
	    strcmp(c->backend, "memfd")) {
		snprintf(err, errlen, "[kv] backend must be auto, kernel or memfd");
		return -1;
	}
	if (strcmp(c->kv_dtype, "f16") && strcmp(c->kv_dtype, "f32") &&
	    strcmp(c->kv_dtype, "q8_0")) {
		snprintf(err, errlen, "[kv] dtype must be f16, f32 or q8_0");
		return -1;
	}
	if (strcmp(c->policy, "toolwait") && strcmp(c->policy, "lru") &&
	    strcmp(c->policy, "ttl")) {
		snprintf(err, errlen, "[kv] policy must be toolwait, lru or ttl");
		return -1;
	}
	if (!c->tool_open[0] || !c->tool_close[0] || !strcmp(c->tool_open, c->tool_close)) {
		snprintf(err, errlen, "[model] tool_call_open and tool_call_close must differ and be set");
		return -1;
	}
	if (c->high_wm && c->low_wm > c->high_wm) {
		snprintf(err, errlen, "[kv] low_watermark > high_watermark");
		return -1;
	}
	if (c->toolwait_min_s > c->toolwait_max_s) {
		snprintf(err, errlen, "[kv] toolwait_min_s > toolwait_max_s");
		return -1;
	}
	for (i = 0; i < c->n_tenants; i++) {
		if (!c->tenants[i].id)
			c->tenants[i].id = kvd_tenant_id(c->tenants[i].name);
		for (j = 0; j < i; j++)
			if (c->tenants[i].id == c->tenants[j].id) {
				snprintf(err, errlen, "tenants %s and %s have the same id %u; give one of them another (id = N in its section)",
					 c->tenants[j].name, c->tenants[i].name, c->tenants[i].id);
				return -1;
			}
		if (!c->tenants[i].n_keys) {
			snprintf(err, errlen, "[tenant.%s] has no key", c->tenants[i].name);
			return -1;
		}
		for (j = 0; j < i; j++)
			for (uint32_t a = 0; a < c->tenants[i].n_keys; a++)
				for (uint32_t b = 0; b < c->tenants[j].n_keys; b++)
					if (!strcmp(c->tenants[i].keys[a], c->tenants[j].keys[b])) {
						snprintf(err, errlen, "tenants %s and %s share a key",
							 c->tenants[i].name, c->tenants[j].name);
						return -1;
					}
	}
	for (i = 0; i < c->n_metrics_keys; i++)
		for (j = 0; j < c->n_tenants; j++)
			for (uint32_t a = 0; a < c->tenants[j].n_keys; a++)
				if (!strcmp(c->metrics_keys[i], c->tenants[j].keys[a])) {
					snprintf(err, errlen, "[server] a metrics key is also tenant %s's key",
						 c->tenants[j].name);
					return -1;
				}
	if (!c->prefill_workers && !c->remote_prefill) {
		snprintf(err, errlen, "no prefill worker: [workers] prefill or [remote] prefill "
			 "must be at least 1");
		return -1;
	}
	if (!c->decode_workers && !c->remote_decode) {
		snprintf(err, errlen, "no decode worker: [workers] decode or [remote] decode "
			 "must be at least 1");
		return -1;
	}
	if (c->remote_prefill + c->remote_decode &&
	    (!c->remote_listen[0] || !c->remote_secret_file[0])) {
		snprintf(err, errlen, "[remote] slots need listen and secret_file");
		return -1;
	}
	if (c->remote_prefill + c->remote_decode && c->handoff == KVD_HANDOFF_COPY) {
		snprintf(err, errlen, "[remote] workers need [kv] handoff = arena");
		return -1;
	}
	if (c->remote_timeout_ms < 2 * c->remote_heartbeat_ms) {
		snprintf(err, errlen, "[remote] timeout_ms must be at least twice heartbeat_ms");
		return -1;
	}
	for (i = 0; i < c->n_mcp; i++)
		if (!c->mcp[i].command[0]) {
			snprintf(err, errlen, "[mcp.%s] has no command", c->mcp[i].name);
			return -1;
		}
	if (!c->model_id[0]) {
		const char *base = strrchr(c->model_path, '/');
		size_t n;

		base = base ? base + 1 : c->model_path;
		n = strlen(base);
		if (n > 5 && !strcmp(base + n - 5, ".gguf"))
			n -= 5;
		if (n >= sizeof(c->model_id))
			n = sizeof(c->model_id) - 1;
		memcpy(c->model_id, base, n);
		c->model_id[n] = 0;
	}
	return 0;
}

void kvd_config_auto(struct kvd_config *c, char *note, size_t notelen)
{
	cpu_set_t set;
	uint32_t cpus = 0, threads, workers;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set))
		cpus = (uint32_t)CPU_COUNT(&set);
	if (!cpus && (n = sysconf(_SC_NPROCESSORS_ONLN)) > 0)
		cpus = (uint32_t)n;
	if (!cpus)
		cpus = 1;
	/* one process per core, one thread each: a worker's step is one
	 * pass over the weights, and two workers that take each other's
	 * work when idle (share_stages) keep both cores busy without the
	 * threads of one pass waiting on each other; from 8 cores up, two
	 * threads per worker halve the processes' weight reads per token
	 * served */
	threads = c->threads_per_worker ? c->threads_per_worker : cpus >= 8 ? 2 : 1;
	workers = cpus / threads;
	if (workers < 2)
		workers = 2;
	if (workers > 64)
		workers = 64;
	if (c->prefill_workers == KVD_WORKERS_AUTO && c->decode_workers == KVD_WORKERS_AUTO) {
		c->prefill_workers = workers / 2;
		c->decode_workers = workers - workers / 2;
	} else if (c->prefill_workers == KVD_WORKERS_AUTO) {
		c->prefill_workers = workers > c->decode_workers ? workers - c->decode_workers : 1;
	} else if (c->decode_workers == KVD_WORKERS_AUTO) {
		c->decode_workers = workers > c->prefill_workers ? workers - c->prefill_workers : 1;
	}
	c->threads_per_worker = threads;
	snprintf(note, notelen, "%u CPUs: %u prefill + %u decode workers, %u thread%s each",
		 cpus, c->prefill_workers, c->decode_workers, threads, threads > 1 ? "s" : "");
}

/*
 * The settings read at start only, where struct kvd_config keeps them. A
 * reload applies the rest: [tenant.*], the [server] metrics keys, [log]
 * level, [kv] policy, low_watermark, high_watermark and ttl_ms, [tier]
 * decisions, prefetch and prefetch_margin_ms (Documentation/daemon.md,
 * "SIGHUP"). str: compared as a C string (a key set twice in one file
 * leaves bytes after the NUL).
 */
struct start_only {
	const char *name;
	size_t off, len;
	int str;
};

#define SO_(N, F, S) { N, offsetof(struct kvd_config, F), \
		       sizeof(((struct kvd_config *)0)->F), S }
#define SO(N, F) SO_(N, F, 0)
#define SOS(N, F) SO_(N, F, 1)
static const struct start_only start_only[] = {
	SOS("[server] listen", listen_host), SO("[server] listen", listen_port),
	SO("[server] allow_remote", allow_remote), SO("[server] max_body_kb", max_body_kb),
	SO("[server] max_connections", max_connections),
	SO("[server] max_connections_per_ip", max_connections_per_ip),
	SO("[server] http_threads", http_threads),
	SO("[server] connection_timeout_s", conn_timeout_s),
	SO("[server] cors_origins", n_cors_origins), SO("[server] cors_origins", cors_origins),
	SO("[server] allowed_hosts", n_allowed_hosts),
	SO("[server] allowed_hosts", allowed_hosts),
	SO("[server] responses_max", responses_max),
	SO("[server] responses_max_mb", responses_max_mb),
	SOS("[model] path", model_path), SOS("[model] id", model_id),
	SO("[model] max_tokens", max_tokens_cap), SOS("[model] tool_call_open", tool_open),
	SOS("[model] tool_call_close", tool_close), SOS("[model] chat_template", chat_template),
	SOS("[kv] backend", backend), SO("[kv] blocks", kv_blocks),
	SO("[kv] block_tokens", block_tokens), SOS("[kv] dtype", kv_dtype),
	SO("[kv] handoff", handoff), SO("[kv] prefix_cache", prefix_cache),
	SO("[kv] retention", retention), SO("[kv] idle_retention_s", idle_retention_s),
	SO("[kv] toolwait_min_s", toolwait_min_s), SO("[kv] toolwait_max_s", toolwait_max_s),
	SO("[kv] toolwait_bpf", toolwait_bpf), SOS("[kv] toolwait_state", toolwait_state),
	SOS("[tier] dir", tier_dir), SO("[tier] cap_mb", tier_cap_mb),
	SOS("[tier] direct", tier_direct), SOS("[tier] fixed", tier_fixed),
	SO("[tier] queue_depth", tier_queue_depth),
	SO("[workers] prefill", prefill_workers), SO("[workers] decode", decode_workers),
	SO("[workers] threads", threads_per_worker), SO("[workers] max_batch", max_batch),
	SOS("[workers] prefill_backend", prefill_backend),
	SOS("[workers] decode_backend", decode_backend),
	SOS("[workers] backend_options", backend_options),
	SO("[workers] lease_ms", lease_ms), SO("[workers] lease_per_token_ms", lease_per_token_ms),
	SO("[workers] restart_backoff_max_ms", restart_backoff_max_ms),
	SO("[workers] prefill_load_scale", prefill_load_scale),
	SO("[sched] step_tokens", step_tokens), SO("[sched] chunk_tokens", chunk_tokens),
	SO("[sched] steps_in_flight", steps_in_flight), SO("[sched] share_stages", share_stages),
	SO("[sched] decode_reserve", decode_reserve), SO("[sched] prefill_ahead", prefill_ahead),
	SO("[limits] max_queue", max_queue), SO("[limits] max_sessions", max_sessions),
	SOS("[tools] policy", tools_policy), SO("[tools] enable", tools_enabled),
	SO("[tools] enable", tools_order), SO("[tools] enable", n_tools_order),
	SO("[tools] max_rounds", tools_max_rounds), SOS("[tools] workdir_root", tools_workdir_root),
	SO("[tools] result_bytes", tools_result_bytes), SO("[tools] threads", tools_threads),
	SO("[tools] tool_concurrency", tools_concurrency),
	SO("[tools] tool_disk_mb", tools_disk_mb),
	SO("[mcp.*]", n_mcp), SO("[mcp.*]", mcp),
	SOS("[remote] listen", remote_listen), SOS("[remote] secret_file", remote_secret_file),
	SO("[remote] prefill", remote_prefill), SO("[remote] decode", remote_decode),
	SOS("[remote] ucx_tls", remote_ucx_tls), SOS("[remote] ucx_devices", remote_ucx_devices),
	SO("[remote] heartbeat_ms", remote_heartbeat_ms), SO("[remote] timeout_ms", remote_timeout_ms),
	SO("[remote] join_grace_s", remote_join_grace_s),
	SOS("[events] endpoint", events_endpoint), SOS("[events] replay_endpoint", events_replay),
	SOS("[events] topic", events_topic), SO("[events] allow_remote", events_allow_remote),
};

size_t kvd_config_start_only_changed(const struct kvd_config *was,
				     const struct kvd_config *now, char *out, size_t outlen)
{
	size_t i, n = 0, at = 0;
	const char *last = NULL;

	if (outlen)
		out[0] = 0;
	for (i = 0; i < sizeof(start_only) / sizeof(start_only[0]); i++) {
		const struct start_only *so = &start_only[i];
		const char *a = (const char *)was + so->off, *b = (const char *)now + so->off;
		int w;

		if (so->str ? !strncmp(a, b, so->len) : !memcmp(a, b, so->len))
			continue;
		if (last && !strcmp(last, so->name))
			continue;	/* one setting kept in two fields */
		last = so->name;
		n++;
		w = snprintf(out + at, outlen > at ? outlen - at : 0, "%s%s", at ? ", " : "",
			     so->name);
		if (w > 0)
			at += (size_t)w;
	}
	if (at >= outlen && outlen > 4)
		memcpy(out + outlen - 4, "...", 4);
	return n;
}
