/* SPDX-License-Identifier: MIT */
/*
 * kvsmcp.h - a client for MCP tool servers over the stdio transport
 * (JSON-RPC 2.0, one message per line): the server runs inside the
 * sandbox under its own tool policy (kvs_spawn()); the client speaks
 * initialize, tools/list and tools/call to it.
 *
 * A hostile or broken server cannot harm the caller: every message is
 * bounded (larger ones are skipped and fail the request they were meant
 * to answer), malformed lines are counted and skipped, every request has
 * a deadline, the server's requests to us are answered "method not found",
 * its stderr is drained and dropped, and a server that dies or outlives its
 * policy's timeout is gone with its cgroup.
 *
 * Threads: one kvs_mcp is used by one thread at a time (kvarenad keeps one
 * per server and serialises calls, or opens several).
 */
#ifndef KVSMCP_H
#define KVSMCP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kvsandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvs_mcp;

struct kvs_mcp_limits {
	uint32_t init_timeout_ms;	/* initialize and tools/list (10000) */
	uint32_t call_timeout_ms;	/* tools/call (30000) */
	size_t max_message;		/* bytes per message (4 MiB, at most 64 MiB) */
	uint32_t max_tools;		/* tools/list entries kept (256) */
};

/* Start argv under the policy's tool, in workdir (NULL: a fresh one), and
 * initialize it. lim may be NULL. err gets a line on failure. */
int kvs_mcp_open(const struct kvs_policy *p, const char *tool, const char *workdir,
		 const char *const *argv, const struct kvs_mcp_limits *lim,
		 struct kvs_mcp **out, char *err, size_t errlen);

/* The server's tools (a JSON array of {name, description, inputSchema});
 * *tools is a new reference. Pages through nextCursor, bounded. */
int kvs_mcp_list_tools(struct kvs_mcp *m, json_t **tools, char *err, size_t errlen);

/* Call a tool; arguments: a JSON object (NULL: {}). *result is the
 * server's result object (content[], isError) as a new reference. A
 * JSON-RPC error becomes -EREMOTEIO with the message in err. */
int kvs_mcp_call(struct kvs_mcp *m, const char *name, json_t *arguments,
		 json_t **result, char *err, size_t errlen);

/* Reads what the server sent since the last request, without waiting:
 * its requests are answered, notifications noted. 0, or -EPIPE/-ETIME
 * when it is gone. */
int kvs_mcp_poll(struct kvs_mcp *m);
/* 1 when the server sent notifications/tools/list_changed since the last
 * call of this (during a request or kvs_mcp_poll()); clears it. */
int kvs_mcp_tools_changed(struct kvs_mcp *m);

/* "name version" from the server's initialize answer. */
const char *kvs_mcp_server_info(const struct kvs_mcp *m);
uint64_t kvs_mcp_cgroup_id(const struct kvs_mcp *m);
/* Lines that were not JSON-RPC, messages over the cap, since open. */
unsigned long kvs_mcp_malformed(const struct kvs_mcp *m);
unsigned long kvs_mcp_oversized(const struct kvs_mcp *m);

/* Stop the server (EOF on its stdin, then its cgroup killed) and free m. */
void kvs_mcp_close(struct kvs_mcp *m);

#ifdef __cplusplus
}
#endif
#endif
