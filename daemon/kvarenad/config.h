/* SPDX-License-Identifier: MIT */
/*
 * config.h - kvarenad's configuration: defaults, the INI file (libinih)
 * and command-line overrides. Documentation/daemon.md lists every key.
 */
#ifndef KVD_CONFIG_H
#define KVD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define KVD_MAX_TENANTS 64
#define KVD_WORKERS_AUTO UINT32_MAX
#define KVD_MAX_LIST 16		/* entries of a comma-separated list */
#define KVD_MAX_KEYS_PER_TENANT 8

/* A tenant's identity: its id, from its section name (kvd_tenant_id) or
 * its "id" key, never its place in the file, so a reload that adds,
 * removes or reorders tenants hands nobody another's sessions, cache or
 * budget. */
#define KVD_TENANT_ID_MAX 0x7fffffffu
struct kvd_tenant_cfg {
	char name[64];
	uint32_t id;			/* 1..KVD_TENANT_ID_MAX */
	uint32_t n_keys;
	char keys[KVD_MAX_KEYS_PER_TENANT][128];
	uint64_t tokens_per_min;	/* prompt + completion; 0: unlimited */
	uint32_t kv_blocks;		/* blocks held at once; 0: unlimited */
	int server_tools;		/* may use server-side tools */
	uint32_t weight;		/* fair share of prefill tokens and decode slots */
	uint32_t tool_concurrency;	/* its tool calls at once; 0: [tools]' */
	uint32_t tool_disk_mb;		/* its work directories' bytes; 0: no cap */
	int has_tool_disk;		/* tool_disk_mb set here, else [tools]' */
};

/* [mcp.NAME]: an MCP tool server (stdio) started in the sandbox; its
 * tools are offered beside the built-in ones (agent.c, mcp.c). */
#define KVD_MAX_MCP 8
#define KVD_MCP_MAX_ARGS 32
struct kvd_mcp_cfg {
	char name[32];			/* [A-Za-z0-9_-] */
	char command[1024];		/* argv: blank-separated, "quoted" words */
	char tool[64];			/* policy tool; "": built-in least privilege */
	char prefix[32];		/* before each tool name; default NAME_ */
	int has_prefix;
	char workdir[512];		/* its /home/tool; "": a fresh one per start */
	char allow[1024];		/* server tool names offered; "": all */
	uint32_t timeout_ms;		/* initialize, tools/list, each tools/call */
	uint32_t max_result_bytes;	/* largest message accepted from it */
	/* a server that failed is started again after a back-off: first
	 * restart_backoff_ms, doubling per failure up to restart_backoff_max_ms;
	 * back to the first after it ran healthy_ms. 0: the defaults (1 s,
	 * 60 s, 60 s) */
	uint32_t restart_backoff_ms;
	uint32_t restart_backoff_max_ms;
	uint32_t healthy_ms;
	/* an instance per tenant (its own process, state and back-off),
	 * started on that tenant's first call; else one shared by all */
	int per_tenant;
};

enum kvd_handoff { KVD_HANDOFF_ARENA = 0, KVD_HANDOFF_COPY = 1 };

/* Server-side tools the orchestrator can run ([tools] enable). Their
 * declarations (kvd_server_tools()) come in the order enable names them
 * (tools_order), else in this order. */
enum kvd_stool {
	KVD_TOOL_SH = 0,
	KVD_TOOL_C_COMPILE_RUN,
	KVD_TOOL_READ_FILE,
	KVD_TOOL_WRITE_FILE,
	KVD_TOOL_LIST_DIR,
	KVD_TOOL_CALC,
	KVD_N_TOOLS,
};
extern const char *const kvd_stool_names[KVD_N_TOOLS];

struct kvd_config {
	/* [server] */
	char listen_host[64];
	uint16_t listen_port;
	int allow_remote;		/* listen beyond loopback without keys */
	uint32_t max_body_kb;
	uint32_t max_connections;
	uint32_t max_connections_per_ip;	/* from one address; 0: no limit */
	uint32_t http_threads;		/* event-loop threads; 0: auto */
	uint32_t conn_timeout_s;
	/* keys that read every tenant's series on /metrics (metrics_key,
	 * metrics_key_file, metrics_key_credential) */
	char metrics_keys[KVD_MAX_KEYS_PER_TENANT][128];
	uint32_t n_metrics_keys;
	/* pages of these origins may call the API (CORS; "*": any) */
	char cors_origins[KVD_MAX_LIST][256];
	uint32_t n_cors_origins;
	/* Host names accepted besides the listen address (DNS rebinding) */
	char allowed_hosts[KVD_MAX_LIST][256];
	uint32_t n_allowed_hosts;
	/* /v1/responses kept per tenant for previous_response_id */
	uint32_t responses_max;
	uint32_t responses_max_mb;
	/* [model] */
	char model_path[512];
	char model_id[128];		/* default: file name without .gguf */
	uint32_t max_tokens_cap;	/* completion tokens when unset */
	char tool_open[32], tool_close[32];	/* tool-call tags in generated text */
	char chat_template[32];		/* "auto" or a family (daemon/chat) */
	/* [kv] */
	char backend[16];		/* auto, kernel, memfd */
	uint32_t kv_blocks;		/* arena capacity in blocks */
	uint32_t block_tokens;
	char kv_dtype[8];		/* f16, f32, q8_0 */
	enum kvd_handoff handoff;
	char policy[16];		/* toolwait, lru, ttl */
	uint32_t low_wm, high_wm;	/* free-block watermarks (0: the kernel's) */
	int prefix_cache;		/* 1: keep full blocks for reuse */
	int retention;			/* 1: keep session KV between requests */
	uint32_t idle_retention_s;	/* an idle session's KV lives this long */
	uint32_t toolwait_min_s, toolwait_max_s;	/* bounds of a TOOL_WAIT deadline */
	int toolwait_bpf;		/* 1: load the eBPF tool-wait programs if possible */
	char toolwait_state[512];	/* the tool-wait table kept across restarts ("": not) */
	uint32_t ttl_ms;		/* the ttl policy's inactivity bound (0: the kernel's) */
	/* [tier] the disk tier and the keep/spill/discard logic (tiering.c) */
	char tier_dir[512];		/* spill directory; "": no disk tier */
	uint64_t tier_cap_mb;		/* disk the spill files may take; 0: no cap */
	char tier_direct[8];		/* O_DIRECT: auto, on, off */
	char tier_fixed[8];		/* registered buffers: auto, on, off */
	uint32_t tier_queue_depth;	/* block I/Os in flight */
	int tier_decisions;		/* 1: keep/spill/discard at each tool wait */
	int tier_prefetch;		/* 1: restore before the predicted return */
	int tier_prefetch_slack;	/* 1: only with room for the turns meanwhile */
	uint32_t tier_margin_ms;	/* prefetch safety margin */
	/* [workers]; KVD_WORKERS_AUTO (threads: 0): from the CPUs present
	 * (kvd_config_auto); 0 workers: remote hosts take the stage */
	uint32_t prefill_workers;
	uint32_t decode_workers;
	uint32_t threads_per_worker;
	uint32_t max_batch;
	char prefill_backend[256];	/* cpu or a plugin .so path */
	char decode_backend[256];
	char backend_options[256];
	uint32_t lease_ms;		/* a step may take this long, then its worker dies */
	uint32_t lease_per_token_ms;	/* ... plus this per prompt token it prefills */
	uint32_t restart_backoff_max_ms;	/* a failing worker's restart back-off bound */
	double prefill_load_scale;	/* router cost weight */
	/* [sched] */
	uint32_t step_tokens;		/* a step's token budget */
	uint32_t chunk_tokens;		/* prompt tokens of one sequence per step */
	uint32_t steps_in_flight;	/* per worker (1: no pipelining) */
	int share_stages;		/* an idle worker takes the other stage's work */
	uint32_t decode_reserve;	/* admission keeps room for this many more
					 * tokens of each running reply (admit.c) */
	uint32_t prefill_ahead;		/* prompt tokens admitted and not yet
					 * computed, at most (admit.c; 0: no bound) */
	/* [limits] */
	uint32_t max_queue;		/* jobs waiting for admission */
	uint32_t max_sessions;		/* conversations remembered */
	/* [tools] */
	char tools_policy[512];		/* kva-sandbox policy file; "": built-in */
	uint32_t tools_enabled;		/* 1 << KVD_TOOL_*; 0: no server tools */
	uint8_t tools_order[KVD_N_TOOLS];	/* enum kvd_stool, as enable names them */
	uint32_t n_tools_order;		/* 0: enum order */
	uint32_t tools_max_rounds;	/* tool rounds per request */
	char tools_workdir_root[512];	/* per-session work directories */
	uint32_t tools_result_bytes;	/* tool output given to the model, per call */
	uint32_t tools_threads;		/* calls running at once, all tenants */
	uint32_t tools_concurrency;	/* per tenant, unless its section says */
	uint32_t tools_disk_mb;		/* per tenant, unless its section says; 0: no cap */
	/* [mcp.NAME] sections */
	uint32_t n_mcp;
	struct kvd_mcp_cfg mcp[KVD_MAX_MCP];
	/* [tenant.NAME] sections */
	uint32_t n_tenants;
	struct kvd_tenant_cfg tenants[KVD_MAX_TENANTS];
	/* [remote]: worker hosts on other machines (Documentation/remote.md) */
	char remote_listen[128];	/* HOST:PORT they join; "": none */
	char remote_secret_file[512];	/* the pre-shared key */
	uint32_t remote_prefill, remote_decode;	/* remote worker slots */
	char remote_ucx_tls[64];	/* UCX_TLS for the transfers; "": UCX's choice */
	char remote_ucx_devices[128];	/* UCX_NET_DEVICES; "": all */
	uint32_t remote_heartbeat_ms, remote_timeout_ms;
	uint32_t remote_join_grace_s;	/* requests wait this long for a host */
	/* [events]: the prefix cache's block events for KV-aware routers */
	char events_endpoint[256];	/* ZeroMQ PUB endpoint; "": off */
	char events_replay[256];	/* ROUTER endpoint for replays; "": none */
	char events_topic[256];		/* "": kv@HOSTNAME@MODEL */
	int events_allow_remote;	/* tcp beyond loopback */
	/* [log] */
	int log_level;
	char config_path[512];
};

void kvd_config_defaults(struct kvd_config *c);
/* The id of [tenant.NAME] without an "id" key: FNV-1a of NAME, 31 bits,
 * never 0. */
uint32_t kvd_tenant_id(const char *name);
/* Reads an INI file over c. 0, or -1 with a message naming the line. */
int kvd_config_load(struct kvd_config *c, const char *path, char *err, size_t errlen);
/* One setting, as the file's [sec] key = val. 0 or -1 with a message. */
int kvd_config_set(struct kvd_config *c, const char *sec, const char *key,
		   const char *val, char *err, size_t errlen);
/* Checks the whole configuration; 0 or -1 with a message. */
int kvd_config_check(struct kvd_config *c, char *err, size_t errlen);
/* Fills the settings left to the machine (workers and threads from the
 * CPUs this process may run on); a line for the startup log in note. */
void kvd_config_auto(struct kvd_config *c, char *note, size_t notelen);
/* The settings read at start only ([model] path, [kv] blocks, ...) that
 * differ between two configurations, both as loaded (before
 * kvd_config_auto): their count, and "[sec] key, ..." in out (cut to
 * outlen with "..."). What a SIGHUP cannot apply. */
size_t kvd_config_start_only_changed(const struct kvd_config *was,
				     const struct kvd_config *now, char *out, size_t outlen);

#endif
