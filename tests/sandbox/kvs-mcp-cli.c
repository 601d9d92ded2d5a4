// SPDX-License-Identifier: MIT
/*
 * kvs-mcp-cli - drive an MCP server through the sandbox and the client
 * library, as kvarenad would: start it under a policy's tool, initialize,
 * list its tools, make calls. Used by mcp-npm.sh against the real npm
 * servers.
 *   kvs-mcp-cli POLICY TOOL WORKDIR [--call NAME JSON]... -- ARGV...
 * Prints "server: NAME VERSION", "tools: N", one "tool: NAME" each, and
 * per call "call NAME: " and the result's text content, or "error: ...".
 */
#include <stdio.h>
#include <string.h>

#include "kvsmcp.h"

int main(int argc, char **argv)
{
	struct kvs_policy *p = NULL;
	struct kvs_mcp *m = NULL;
	json_t *tools = NULL;
	char err[1024];
	int i, dash, rc, bad = 0;
	size_t k;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (dash = 4; dash < argc && strcmp(argv[dash], "--"); dash++)
		;
	if (argc < 6 || dash >= argc - 1) {
		fprintf(stderr, "usage: kvs-mcp-cli POLICY TOOL WORKDIR [--call NAME JSON]... -- ARGV...\n");
		return 2;
	}
	if (kvs_policy_load(argv[1], &p, err, sizeof(err))) {
		printf("error: %s\n", err);
		return 1;
	}
	rc = kvs_mcp_open(p, argv[2], argv[3], (const char *const *)&argv[dash + 1], NULL, &m,
			  err, sizeof(err));
	if (rc) {
		printf("error: %s\n", err);
		kvs_policy_free(p);
		return 1;
	}
	printf("server: %s (cgroup %llu)\n", kvs_mcp_server_info(m),
	       (unsigned long long)kvs_mcp_cgroup_id(m));
	if (kvs_mcp_list_tools(m, &tools, err, sizeof(err))) {
		printf("error: %s\n", err);
		bad = 1;
	} else {
		printf("tools: %zu\n", json_array_size(tools));
		for (k = 0; k < json_array_size(tools); k++)
			printf("tool: %s\n", json_string_value(json_object_get(
				json_array_get(tools, k), "name")));
	}
	json_decref(tools);
	for (i = 4; i + 2 < dash; i += 3) {
		json_error_t je;
		json_t *args, *res = NULL, *c;

		if (strcmp(argv[i], "--call"))
			break;
		args = json_loads(argv[i + 2], 0, &je);
		rc = kvs_mcp_call(m, argv[i + 1], args, &res, err, sizeof(err));
		json_decref(args);
		if (rc) {
			printf("call %s: error: %s\n", argv[i + 1], err);
			bad = 1;
			continue;
		}
		printf("call %s:%s", argv[i + 1],
		       json_is_true(json_object_get(res, "isError")) ? " [isError]" : "");
		json_array_foreach(json_object_get(res, "content"), k, c)
			if (json_is_string(json_object_get(c, "text")))
				printf(" %.300s", json_string_value(json_object_get(c, "text")));
		printf("\n");
		json_decref(res);
	}
	kvs_mcp_close(m);
	kvs_policy_free(p);
	return bad;
}
