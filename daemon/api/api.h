/* SPDX-License-Identifier: MIT */
/*
 * api.h - kvarenad's HTTP server: the OpenAI-compatible API over the
 * orchestrator's interface (daemon/kvarenad/kvd.h). See
 * Documentation/api.md for the endpoints.
 *
 * Lifecycle, from the daemon's main():
 *
 *	struct kvd_api_config c;
 *	kvd_api_config_defaults(&c);
 *	c.listen_addr = "127.0.0.1"; c.port = 8000; c.tenants = ...;
 *	if (kvd_api_start(d, &c, &api, err, sizeof(err)))  -> exit
 *	... on SIGHUP: kvd_api_set_tenants(api, t, n, err, sizeof(err));
 *	... on SIGTERM: kvd_api_stop(api);  (drains, then frees)
 *
 * The server copies everything it keeps from the config; the caller may
 * free it after kvd_api_start() returns. A few event-loop threads serve
 * every connection and never wait (a connection whose generation has no
 * news is suspended until a job's event wakes it: kvd_job_set_notify);
 * struct kvd must outlive kvd_api_stop().
 */
#ifndef KVD_API_H
#define KVD_API_H

#include <stddef.h>
#include <stdint.h>

#include "kvd.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvd_api;

#define KVD_API_MAX_TENANTS 1024
#define KVD_API_MAX_KEYS 4096		/* over all tenants */
#define KVD_API_MIN_KEY_LEN 16		/* bytes; shorter keys are refused */
#define KVD_API_MAX_KEY_LEN 256
#define KVD_API_MAX_TENANT_NAME 64
#define KVD_API_AUTO_THREADS_MAX 4

/* One tenant and the API keys that act as it. Requests carrying one of its
 * keys (Authorization: Bearer KEY) run as kvd_request.tenant = id. */
struct kvd_api_tenant {
	const char *name;		/* for logs; [A-Za-z0-9_.-]{1,64} */
	uint32_t id;			/* kvarena tenant id, > 0 */
	const char *const *keys;
	size_t n_keys;
};

struct kvd_api_config {
	const char *listen_addr;	/* numeric IPv4/IPv6 address */
	uint16_t port;			/* 0: any free port (kvd_api_port) */
	/* With no keys configured the server refuses a non-loopback
	 * listen_addr unless this is set. */
	int allow_remote;
	const struct kvd_api_tenant *tenants;	/* none: no authentication */
	size_t n_tenants;
	size_t max_body;		/* bytes; over it: 413 */
	unsigned max_connections;	/* concurrent connections */
	/* concurrent connections from one client address (libmicrohttpd's
	 * per-IP limit: more are closed at accept); 0: no per-address limit.
	 * kvd_api_config_defaults() sets KVD_API_DEFAULT_PER_IP. */
	unsigned max_connections_per_ip;
	unsigned conn_timeout_s;	/* idle connection closed after this */
	/* event-loop threads; 0: one per CPU, 2 to KVD_API_AUTO_THREADS_MAX */
	unsigned threads;
	unsigned drain_timeout_s;	/* kvd_api_stop() waits this long */
	/* Browsers (Documentation/api.md, "Browsers and other sites"): the
	 * Origins whose pages may call the API ("*": any; none: a request
	 * with an Origin header is refused unless it is this server's own),
	 * and the Host names accepted besides the listen address (and
	 * "localhost" on loopback): DNS rebinding. */
	const char *const *cors_origins;
	size_t n_cors_origins;
	const char *const *allowed_hosts;
	size_t n_allowed_hosts;
	/* /v1/responses kept for previous_response_id, per tenant: at most
	 * this many (0: the default, 1000) and bytes (0: 64 MiB); the
	 * oldest go first */
	size_t responses_max;
	size_t responses_max_bytes;
	/* Keys that read /metrics whole, every tenant's series included
	 * (an operator's scraper). A tenant's key reads the series of no
	 * other tenant; with no tenant keys and no metrics keys /metrics is
	 * open, as every route is. Same rules as API keys; none may be a
	 * tenant's key too. */
	const char *const *metrics_keys;
	size_t n_metrics_keys;
};

#define KVD_API_DEFAULT_PER_IP 256

/* Defaults: 127.0.0.1:8000, no keys, 4 MiB bodies, 1024 connections
 * (256 from one address), 60 s idle timeout, 30 s drain. The chat template and the tool-call
 * syntax are the served model's (kvd_chat_template()). */
void kvd_api_config_defaults(struct kvd_api_config *c);

/* Validate c, bind and start serving. 0 and *out, or a negative errno
 * with a sentence in err (bad config, address in use, ...). Logs the
 * address and whether keys are required. */
int kvd_api_start(struct kvd *d, const struct kvd_api_config *c,
		  struct kvd_api **out, char *err, size_t errlen);

/* The bound port (useful with port 0). */
uint16_t kvd_api_port(const struct kvd_api *a);

/* Replace the tenant/key table (SIGHUP). Requests already authenticated
 * keep their tenant. Refused (-EINVAL, table unchanged) when invalid, or
 * when it would remove every key from a server listening beyond loopback
 * without allow_remote. */
int kvd_api_set_tenants(struct kvd_api *a, const struct kvd_api_tenant *t,
			size_t n, char *err, size_t errlen);

/* Replace the metrics keys (SIGHUP); -EINVAL (unchanged) when one is
 * invalid or is also a tenant's key. */
int kvd_api_set_metrics_keys(struct kvd_api *a, const char *const *keys, size_t n,
			     char *err, size_t errlen);

/* Graceful stop (SIGTERM): stop accepting connections and new requests,
 * let requests in flight finish (up to drain_timeout_s; streams still
 * running then are cut), close everything and free a. */
void kvd_api_stop(struct kvd_api *a);

#ifdef __cplusplus
}
#endif
#endif
