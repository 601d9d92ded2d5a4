// SPDX-License-Identifier: MIT
/*
 * main.c - kvarenad: command line and configuration, the orchestrator,
 * the HTTP API, signals (SIGTERM drains, SIGHUP reloads tenants and keys),
 * and systemd readiness. `kvarenad --worker ROLE ...` is a stage worker
 * (the orchestrator starts those itself).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "api.h"
#include "internal.h"
#include "log.h"
#include "remote.h"
#include "worker.h"

static const char usage[] =
	"usage: kvarenad [--config FILE] [--model FILE] [--listen HOST:PORT]\n"
	"                [--backend auto|kernel|memfd] [--kv-blocks N]\n"
	"                [--kv-handoff arena|copy] [--prefill-workers N]\n"
	"                [--decode-workers N] [--threads N] [--max-batch N]\n"
	"                [--prefill-backend cpu|FILE.so] [--decode-backend cpu|FILE.so]\n"
	"                [--no-prefix-cache] [--no-retention] [--allow-remote]\n"
	"                [--log-level error|warn|info|debug] [--version] [--help]\n"
	"\n"
	"Serves a GGUF model over an OpenAI-compatible HTTP API, prefill and\n"
	"decode in separate worker processes sharing KV in one kvarena arena.\n"
	"See kvarenad(8).\n";

/* Signals are blocked in every thread and taken here, synchronously. */
static int got_term, got_hup;

static void wait_signal(sigset_t *set, int timeout_ms)
{
	struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
	int sig = sigtimedwait(set, NULL, &ts);

	if (sig == SIGHUP)
		got_hup = 1;
	else if (sig == SIGTERM || sig == SIGINT)
		got_term = 1;
}

static int worker_mode(int argc, char **argv)
{
	struct kvd_worker_args a = { .backend = "cpu", .n_threads = 1, .max_batch = 16 };
	int i;

	for (i = 3; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];

		if (!strcmp(k, "--model"))
			a.model_path = v;
		else if (!strcmp(k, "--backend"))
			a.backend = v;
		else if (!strcmp(k, "--backend-options"))
			a.backend_options = *v ? v : NULL;
		else if (!strcmp(k, "--threads"))
			a.n_threads = (unsigned)atoi(v);
		else if (!strcmp(k, "--max-batch"))
			a.max_batch = (unsigned)atoi(v);
		else if (!strcmp(k, "--max-ctx"))
			a.max_ctx = (unsigned)atoi(v);
		else if (!strcmp(k, "--max-step-tokens"))
			a.max_step_tokens = (unsigned)atoi(v);
		else if (!strcmp(k, "--tool-open"))
			a.tool_open = v;
		else if (!strcmp(k, "--tool-close"))
			a.tool_close = v;
		else if (!strcmp(k, "--chat-template"))
			a.chat_template = v;
	}
	if (!a.model_path)
		return 2;
	return kvd_worker_main(KVD_WORKER_FD, &a);
}

enum {
	OPT_BACKEND = 256, OPT_BLOCKS, OPT_HANDOFF, OPT_PREFILL, OPT_DECODE, OPT_THREADS,
	OPT_BATCH, OPT_PBACKEND, OPT_DBACKEND, OPT_NOPREFIX, OPT_NORETAIN, OPT_REMOTE,
	OPT_LOGLEVEL, OPT_LEASE,
};

static const struct option opts[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "model", required_argument, NULL, 'm' },
	{ "listen", required_argument, NULL, 'l' },
	{ "backend", required_argument, NULL, OPT_BACKEND },
	{ "kv-blocks", required_argument, NULL, OPT_BLOCKS },
	{ "kv-handoff", required_argument, NULL, OPT_HANDOFF },
	{ "prefill-workers", required_argument, NULL, OPT_PREFILL },
	{ "decode-workers", required_argument, NULL, OPT_DECODE },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "max-batch", required_argument, NULL, OPT_BATCH },
	{ "prefill-backend", required_argument, NULL, OPT_PBACKEND },
	{ "decode-backend", required_argument, NULL, OPT_DBACKEND },
	{ "lease-ms", required_argument, NULL, OPT_LEASE },
	{ "no-prefix-cache", no_argument, NULL, OPT_NOPREFIX },
	{ "no-retention", no_argument, NULL, OPT_NORETAIN },
	{ "allow-remote", no_argument, NULL, OPT_REMOTE },
	{ "log-level", required_argument, NULL, OPT_LOGLEVEL },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Command-line settings, applied over the file's (also after SIGHUP). */
struct overrides {
	int n;
	struct {
		const char *sec, *key, *val;
	} kv[32];
};

static int add_override(struct overrides *o, const char *sec, const char *key,
			const char *val)
{
	if (o->n == 32)
		return -1;
	o->kv[o->n].sec = sec;
	o->kv[o->n].key = key;
	o->kv[o->n].val = val;
	o->n++;
	return 0;
}

static int apply_overrides(struct kvd_config *c, const struct overrides *o, char *err,
			   size_t errlen)
{
	int i;

	for (i = 0; i < o->n; i++)
		if (kvd_config_set(c, o->kv[i].sec, o->kv[i].key, o->kv[i].val, err, errlen))
			return -1;
	return 0;
}

static int load_config(struct kvd_config *c, const char *file, const struct overrides *o,
		       char *err, size_t errlen)
{
	kvd_config_defaults(c);
	if (file && kvd_config_load(c, file, err, errlen))
		return -1;
	if (o->n && apply_overrides(c, o, err, errlen))
		return -1;
	return kvd_config_check(c, err, errlen);
}

static int is_loopback(const char *host)
{
	return !strcmp(host, "127.0.0.1") || !strcmp(host, "::1") ||
	       !strcmp(host, "localhost") || !strncmp(host, "127.", 4);
}

/* The HTTP layer's view of the tenants: it copies what it keeps. */
struct api_tenants {
	struct kvd_api_tenant t[KVD_MAX_TENANTS];
	const char *keys[KVD_MAX_TENANTS][KVD_MAX_KEYS_PER_TENANT];
	size_t n;
	const char *cors[KVD_MAX_LIST], *hosts[KVD_MAX_LIST];	/* [server] lists */
	const char *metrics_keys[KVD_MAX_KEYS_PER_TENANT];
};

static void api_tenants(struct api_tenants *at, const struct kvd_config *c)
{
	uint32_t i, k;

	at->n = c->n_tenants;
	for (i = 0; i < c->n_metrics_keys; i++)
		at->metrics_keys[i] = c->metrics_keys[i];
	for (i = 0; i < c->n_tenants; i++) {
		for (k = 0; k < c->tenants[i].n_keys; k++)
			at->keys[i][k] = c->tenants[i].keys[k];
		at->t[i].name = c->tenants[i].name;
		at->t[i].id = c->tenants[i].id;
		at->t[i].keys = at->keys[i];
		at->t[i].n_keys = c->tenants[i].n_keys;
	}
}

static void fill_api_config(struct kvd_api_config *ac, struct api_tenants *at,
			    const struct kvd_config *c)
{
	kvd_api_config_defaults(ac);
	api_tenants(at, c);
	ac->listen_addr = c->listen_host;
	ac->port = c->listen_port;
	ac->allow_remote = c->allow_remote;
	ac->tenants = at->t;
	ac->n_tenants = at->n;
	ac->max_body = (size_t)c->max_body_kb * 1024;
	ac->max_connections = c->max_connections;
	ac->max_connections_per_ip = c->max_connections_per_ip;
	ac->threads = c->http_threads;
	ac->metrics_keys = at->metrics_keys;
	ac->n_metrics_keys = c->n_metrics_keys;
	ac->conn_timeout_s = c->conn_timeout_s;
	for (uint32_t i = 0; i < c->n_cors_origins; i++)
		at->cors[i] = c->cors_origins[i];
	for (uint32_t i = 0; i < c->n_allowed_hosts; i++)
		at->hosts[i] = c->allowed_hosts[i];
	ac->cors_origins = at->cors;
	ac->n_cors_origins = c->n_cors_origins;
	ac->allowed_hosts = at->hosts;
	ac->n_allowed_hosts = c->n_allowed_hosts;
	ac->responses_max = c->responses_max;
	ac->responses_max_bytes = (size_t)c->responses_max_mb << 20;
}

/*
 * Every connection is a socket, every conversation's spill file and
 * every worker's channels are descriptors: the soft RLIMIT_NOFILE (often
 * 1024) goes up to the hard limit the service manager gave us. Nothing
 * here uses select(), so a descriptor past 1024 is fine.
 */
static void raise_nofile(unsigned max_connections)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl)) {
		kvd_log(KVD_LOG_WARN, "main", "open files: getrlimit: %s", strerror(errno));
		return;
	}
	was = rl.rlim_cur;
	if (rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl)) {
			kvd_log(KVD_LOG_WARN, "main", "open files: cannot raise the soft limit %llu to %llu: %s",
				(unsigned long long)was, (unsigned long long)rl.rlim_max,
				strerror(errno));
			rl.rlim_cur = was;
		}
	}
	if (rl.rlim_cur != was)
		kvd_log(KVD_LOG_INFO, "main", "open files: soft limit raised from %llu to the hard limit %llu",
			(unsigned long long)was, (unsigned long long)rl.rlim_cur);
	else
		kvd_log(KVD_LOG_INFO, "main", "open files: limit %llu", (unsigned long long)rl.rlim_cur);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)max_connections + 256)
		kvd_log(KVD_LOG_WARN, "main", "open files: %llu is short of max_connections %u + the daemon's own; raise LimitNOFILE",
			(unsigned long long)rl.rlim_cur, max_connections);
}

int main(int argc, char **argv)
{
	struct kvd_config cfg;
	/* as loaded at start, before kvd_config_auto: what a reload's
	 * start-only settings are compared with */
	static struct kvd_config loaded;
	struct kvd_api_config ac;
	static struct api_tenants at;
	struct overrides ov = { 0 };
	const char *config_file = NULL;
	char err[512] = "", exe[PATH_MAX];
	struct kvd_api *api = NULL;
	struct kvd *d = NULL;
	sigset_t sigs;
	ssize_t n;
	int opt, rc;

	if (argc >= 3 && !strcmp(argv[1], "--worker"))
		return worker_mode(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "--remote-link"))
		return kvr_link_main(argc, argv);
	for (int i = 1; i < argc; i++)	/* a remote worker host */
		if (!strcmp(argv[i], "--worker-of") || !strncmp(argv[i], "--worker-of=", 12))
			return kvr_rworker_main(argc, argv);
	while ((opt = getopt_long(argc, argv, "c:m:l:Vh", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': config_file = optarg; break;
		case 'm': add_override(&ov, "model", "path", optarg); break;
		case 'l': add_override(&ov, "server", "listen", optarg); break;
		case OPT_BACKEND: add_override(&ov, "kv", "backend", optarg); break;
		case OPT_BLOCKS: add_override(&ov, "kv", "blocks", optarg); break;
		case OPT_HANDOFF: add_override(&ov, "kv", "handoff", optarg); break;
		case OPT_PREFILL: add_override(&ov, "workers", "prefill", optarg); break;
		case OPT_DECODE: add_override(&ov, "workers", "decode", optarg); break;
		case OPT_THREADS: add_override(&ov, "workers", "threads", optarg); break;
		case OPT_BATCH: add_override(&ov, "workers", "max_batch", optarg); break;
		case OPT_PBACKEND: add_override(&ov, "workers", "prefill_backend", optarg); break;
		case OPT_DBACKEND: add_override(&ov, "workers", "decode_backend", optarg); break;
		case OPT_LEASE: add_override(&ov, "workers", "lease_ms", optarg); break;
		case OPT_NOPREFIX: add_override(&ov, "kv", "prefix_cache", "no"); break;
		case OPT_NORETAIN: add_override(&ov, "kv", "retention", "no"); break;
		case OPT_REMOTE: add_override(&ov, "server", "allow_remote", "yes"); break;
		case OPT_LOGLEVEL: add_override(&ov, "log", "level", optarg); break;
		case 'V': printf("kvarenad %s\n", KVD_VERSION); return 0;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "kvarenad: unexpected argument '%s'\n%s", argv[optind], usage);
		return 2;
	}
	if (load_config(&cfg, config_file, &ov, err, sizeof(err))) {
		fprintf(stderr, "kvarenad: %s\n", err);
		return 2;
	}
	kvd_log_set_level((enum kvd_log_level)cfg.log_level);
	loaded = cfg;
	{
		char note[256];

		kvd_config_auto(&cfg, note, sizeof(note));
		kvd_log(KVD_LOG_INFO, "main", "workers: %s; steps of up to %u tokens (prompt "
			"chunks of up to %u, decode batches of up to %u), %u in flight per "
			"worker, stages %s", note, cfg.step_tokens, cfg.chunk_tokens,
			cfg.max_batch, cfg.steps_in_flight,
			cfg.share_stages && cfg.handoff != KVD_HANDOFF_COPY && !cfg.remote_prefill &&
			!cfg.remote_decode ? "shared when idle" : "strict");
	}
	if (!cfg.n_tenants && !is_loopback(cfg.listen_host) && !cfg.allow_remote) {
		/* the HTTP layer refuses this too; say it before loading anything */
		kvd_log(KVD_LOG_ERR, "main",
			"refusing to listen on %s without API keys: configure [tenant.*] keys, "
			"or pass --allow-remote to serve anyone who can reach it",
			cfg.listen_host);
		return 2;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		kvd_log(KVD_LOG_ERR, "main", "cannot find my own executable");
		return 1;
	}
	exe[n] = 0;
	/* before any thread starts: they inherit the mask */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	raise_nofile(cfg.max_connections);
	rc = kvd_create(&cfg, exe, &d, err, sizeof(err));
	if (rc) {
		kvd_log(KVD_LOG_ERR, "main", "%s", err);
		return 1;
	}
	kvd_log(KVD_LOG_INFO, "main", "model %s (%s): context %u, vocab %u", cfg.model_id,
		cfg.model_path, d->ctx_len, d->vocab);
	kvd_log(KVD_LOG_INFO, "main",
		"KV arena: %s, %u blocks of %u tokens (%s, %u bytes each), "
		"hand-off %s, %u prefill + %u decode workers",
		d->backend == KVA_BACKEND_KERNEL ?
			"kernel backend (kvarena.ko: pinned 2 MiB pages, dma-buf)" :
			"memfd backend, kvarena.ko not used (no dma-buf export, no "
			"kernel-enforced isolation or quotas)",
		d->geom.blocks_total, d->geom.block_tokens, cfg.kv_dtype, d->geom.kv_block_bytes,
		cfg.handoff == KVD_HANDOFF_COPY ? "copy" : "arena (zero-copy)",
		cfg.prefill_workers, cfg.decode_workers);
	if (!cfg.n_tenants)
		kvd_log(KVD_LOG_WARN, "main",
			"no API keys configured: anyone who can reach %s:%u may use this server",
			cfg.listen_host, cfg.listen_port);
	fill_api_config(&ac, &at, &cfg);
	rc = kvd_api_start(d, &ac, &api, err, sizeof(err));
	if (rc) {
		kvd_log(KVD_LOG_ERR, "main", "HTTP: %s", err);
		kvd_destroy(d);
		return 1;
	}
	while (!kvd_ready(d) && !got_term)
		wait_signal(&sigs, 100);
	kvd_log(KVD_LOG_INFO, "main", "serving on http://%s:%u/v1", cfg.listen_host,
		cfg.listen_port);
	sd_notify(0, "READY=1\nSTATUS=serving");
	while (!got_term) {
		wait_signal(&sigs, 1000);
		if (got_hup) {
			struct kvd_config nc;

			got_hup = 0;
			sd_notify(0, "RELOADING=1");
			if (load_config(&nc, config_file, &ov, err, sizeof(err))) {
				kvd_log(KVD_LOG_ERR, "main", "reload: %s; keeping the old settings", err);
			} else {
				static struct api_tenants nat;

				api_tenants(&nat, &nc);
				if (kvd_api_set_tenants(api, nat.t, nat.n, err, sizeof(err))) {
					kvd_log(KVD_LOG_ERR, "main", "reload: %s; keeping the old keys",
						err);
				} else {
					if (kvd_api_set_metrics_keys(api, nat.metrics_keys,
								     nc.n_metrics_keys, err,
								     sizeof(err)))
						kvd_log(KVD_LOG_ERR, "main",
							"reload: %s; keeping the old metrics keys", err);
					kvd_set_tenants(d, &nc);
					kvd_log_set_level((enum kvd_log_level)nc.log_level);
					kvd_log(KVD_LOG_INFO, "main", "reloaded: %u tenants",
						nc.n_tenants);
					if (kvd_config_start_only_changed(&loaded, &nc, err,
									  sizeof(err)))
						kvd_log(KVD_LOG_WARN, "main",
							"reload: %s changed: read at start only, "
							"the running value stays until a restart",
							err);
				}
			}
			sd_notify(0, "READY=1");
		}
	}
	sd_notify(0, "STOPPING=1");
	kvd_log(KVD_LOG_INFO, "main", "draining in-flight requests");
	kvd_api_stop(api);	/* stops accepting, waits for open requests */
	if (kvd_drain(d, 30000))
		kvd_log(KVD_LOG_WARN, "main", "drain timed out");
	kvd_destroy(d);
	kvd_log(KVD_LOG_INFO, "main", "stopped");
	return 0;
}
