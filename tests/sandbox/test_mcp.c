// SPDX-License-Identifier: MIT
/*
 * test_mcp - the MCP stdio client (kvsmcp.h) against kvs-mcp-fake in the
 * sandbox, well-behaved and hostile (garbage lines, a 100 MB message, a
 * 100 MB answer, silence, a server that exits, server-to-client requests,
 * 100000-deep nesting), under ASan/UBSan: every case ends in bounded time
 * with a clear error or the right answer, and this process lives on.
 * First the transport's pieces themselves (mcp_wire.h): what each kind of
 * line is read as, what a server's request is answered, a commit past the
 * room.
 *   test_mcp FAKE-SERVER
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvsmcp.h"
#include "mcp_wire.h"
#include "sandbox_internal.h"

static int failures, checks;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		checks++;                                                     \
		if (!(cond)) {                                                \
			failures++;                                           \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
		}                                                             \
	} while (0)

static const char *fake;

static void parse(const char *line, struct kvs_rpc_msg *m)
{
	kvs_rpc_parse(line, strlen(line), m);
}

/* What kvs_rpc_parse() makes of one line of a server's. */
static void wire_parse(void)
{
	static const struct {
		const char *line;
		enum kvs_rpc_kind kind;
	} cases[] = {
		{ "", KVS_RPC_EMPTY },
		{ " \t\r", KVS_RPC_EMPTY },
		{ "not json", KVS_RPC_MALFORMED },
		{ "[1, 2]", KVS_RPC_MALFORMED },
		{ "{\"jsonrpc\": \"2.0\", \"result\": {}}", KVS_RPC_MALFORMED },	/* no id */
		{ "{\"id\": null, \"result\": {}}", KVS_RPC_MALFORMED },
		{ "{\"id\": 1.5, \"result\": {}}", KVS_RPC_MALFORMED },
		{ "{\"id\": 1, \"method\": 7}", KVS_RPC_MALFORMED },
		{ "{\"id\": 1, \"id\": 2, \"result\": {}}", KVS_RPC_MALFORMED },
		{ "{\"id\": 1, \"method\": \"ping\"}", KVS_RPC_REQUEST },
		{ "{\"id\": \"s1\", \"method\": \"roots/list\"}\r", KVS_RPC_REQUEST },
		{ "{\"method\": \"notifications/tools/list_changed\"}", KVS_RPC_NOTIFICATION },
		{ "{\"id\": null, \"method\": \"x\"}", KVS_RPC_NOTIFICATION },
		{ "{\"id\": 3, \"result\": {\"a\": 1}}", KVS_RPC_RESPONSE },
	};
	struct kvs_rpc_msg m;
	json_t *r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		parse(cases[i].line, &m);
		CHECK(m.kind == cases[i].kind, "wire: '%s' read as kind %d, want %d", cases[i].line,
		      m.kind, cases[i].kind);
		kvs_rpc_msg_free(&m);
	}
	parse("{\"id\": 3, \"result\": {\"a\": 1}}", &m);
	CHECK(m.kind == KVS_RPC_RESPONSE && json_is_object(m.result) && !m.is_error &&
	      kvs_rpc_answers(&m, 3) && !kvs_rpc_answers(&m, 4), "wire: an answer to 3");
	kvs_rpc_msg_free(&m);
	parse("{\"id\": \"3\", \"result\": {}}", &m);
	CHECK(m.kind == KVS_RPC_RESPONSE && !kvs_rpc_answers(&m, 3),
	      "wire: a string id \"3\" answers no request of ours");
	kvs_rpc_msg_free(&m);
	parse("{\"id\": 4, \"error\": {\"code\": 1, \"message\": \"no\"}}", &m);
	CHECK(m.kind == KVS_RPC_RESPONSE && m.is_error && m.error_message &&
	      !strcmp(m.error_message, "no") && !m.result, "wire: an error answer");
	kvs_rpc_msg_free(&m);
	parse("{\"id\": 5, \"result\": [1]}", &m);
	CHECK(m.kind == KVS_RPC_RESPONSE && !m.result && !m.is_error,
	      "wire: a result that is not an object is none");
	kvs_rpc_msg_free(&m);

	/* the server's requests: ping gets {}, the rest "method not found" */
	parse("{\"id\": 9, \"method\": \"ping\"}", &m);
	r = kvs_rpc_reply_to(&m);
	CHECK(r && json_is_object(json_object_get(r, "result")) && !json_object_get(r, "error") &&
	      json_integer_value(json_object_get(r, "id")) == 9, "wire: ping answered with {}");
	json_decref(r);
	kvs_rpc_msg_free(&m);
	parse("{\"id\": \"s\", \"method\": \"sampling/createMessage\"}", &m);
	r = kvs_rpc_reply_to(&m);
	CHECK(r && json_integer_value(json_object_get(json_object_get(r, "error"), "code")) ==
	      -32601 && !strcmp(json_string_value(json_object_get(r, "id")), "s"),
	      "wire: sampling refused with -32601");
	json_decref(r);
	kvs_rpc_msg_free(&m);
	parse("{\"method\": \"ping\"}", &m);
	r = kvs_rpc_reply_to(&m);
	CHECK(!r, "wire: a notification gets no answer");
	json_decref(r);
	kvs_rpc_msg_free(&m);
	parse("{\"id\": 9, \"result\": {}}", &m);
	r = kvs_rpc_reply_to(&m);
	CHECK(!r, "wire: an answer gets no answer");
	json_decref(r);
	kvs_rpc_msg_free(&m);
}

#define N16 "abcdefghijklmnop"
#define N128 N16 N16 N16 N16 N16 N16 N16 N16

/* A tools/list page: the well-formed entries up to max_tools, the rest
 * counted; the cursor only while there is room. */
static void wire_tools_page(void)
{
	json_t *res = json_loads("{\"tools\": [{\"name\": \"a\"}, {\"name\": \"b\", "
				 "\"description\": 5}, {\"name\": \"c\", \"inputSchema\": [1]}, "
				 "{\"name\": \"\"}, {\"name\": \"d\", \"description\": \"dd\"}, "
				 "{\"name\": \"e\"}], \"nextCursor\": \"p2\"}", 0, NULL);
	json_t *names = json_loads("{\"tools\": [{\"name\": \"" N128 "\"}, {\"name\": \"" N128
				   "x\"}]}", 0, NULL);
	json_t *all = json_array(), *cursor = NULL;
	unsigned long bad = 0;

	kvs_mcp_tools_page(res, all, 8, &bad, &cursor);
	CHECK(json_array_size(all) == 3 && bad == 3 && json_is_string(cursor) &&
	      !strcmp(json_string_value(json_object_get(json_array_get(all, 1), "name")), "d") &&
	      !strcmp(json_string_value(json_object_get(json_array_get(all, 1), "description")),
		      "dd"), "wire: a page keeps a, d, e (%zu kept, %lu bad)", json_array_size(all),
	      bad);
	json_decref(cursor);
	json_array_clear(all);
	bad = 0;
	kvs_mcp_tools_page(res, all, 2, &bad, &cursor);
	CHECK(json_array_size(all) == 2 && !cursor, "wire: max_tools 2 keeps 2 (%zu), no cursor",
	      json_array_size(all));
	json_decref(cursor);
	json_array_clear(all);
	bad = 0;
	kvs_mcp_tools_page(names, all, 8, &bad, &cursor);
	CHECK(json_array_size(all) == 1 && bad == 1 && !cursor &&
	      json_string_length(json_object_get(json_array_get(all, 0), "name")) == 128,
	      "wire: a name of 128 bytes kept, one of 129 not (%zu kept)", json_array_size(all));
	json_decref(all);
	json_decref(names);
	json_decref(res);
}

/* The framer never counts more than the room it gave, whatever the
 * caller says it put there. */
static void wire_commit_past_room(void)
{
	struct kvs_lines l;
	const char *line = NULL;
	size_t room = 0, n = 0;
	char *p;

	if (kvs_lines_init(&l, 8))
		return;
	p = kvs_lines_space(&l, &room);
	CHECK(room == 9, "wire: room %zu for a line of 8 and its newline", room);
	memcpy(p, "ab", 2);
	kvs_lines_commit(&l, 2);
	p = kvs_lines_space(&l, &room);
	CHECK(room == 7, "wire: room %zu after 2 bytes", room);
	memcpy(p, "cdefgh\n", 7);
	kvs_lines_commit(&l, 50);
	CHECK(kvs_lines_next(&l, &line, &n) == 1 && n == 8 && !memcmp(line, "abcdefgh", 8),
	      "wire: the line whole after a commit past the room");
	CHECK(kvs_lines_next(&l, &line, &n) == 0, "wire: nothing more");
	/* the same while dropping a line over the cap */
	p = kvs_lines_space(&l, &room);
	memcpy(p, "abcdefghi", 9);
	kvs_lines_commit(&l, 9);
	CHECK(kvs_lines_next(&l, &line, &n) == -EMSGSIZE, "wire: 9 bytes without a newline "
	      "are over the cap of 8");
	p = kvs_lines_space(&l, &room);
	CHECK(room == 9, "wire: room %zu while dropping", room);
	memcpy(p, "xx\nabcdef", 9);
	kvs_lines_commit(&l, 50);
	CHECK(kvs_lines_next(&l, &line, &n) == 0, "wire: no line yet after the drop's end");
	p = kvs_lines_space(&l, &room);
	CHECK(room == 3, "wire: room %zu behind the 6 bytes kept", room);
	memcpy(p, "\n", 1);
	kvs_lines_commit(&l, 1);
	CHECK(kvs_lines_next(&l, &line, &n) == 1 && n == 6 && !memcmp(line, "abcdef", 6),
	      "wire: what followed the dropped line's newline is the next line");
	kvs_lines_free(&l);
	CHECK(kvs_lines_init(&l, 0) == -EINVAL && kvs_lines_init(&l, SIZE_MAX) == -EINVAL,
	      "wire: a cap of 0 or one whose buffer size wraps refused");
}

static size_t max_message;	/* 0: the client's default */

static int open_mode(struct kvs_policy *p, const char *mode, uint32_t init_ms,
		     struct kvs_mcp **m, char *err, size_t errlen)
{
	const char *argv[] = { fake, mode, NULL };
	struct kvs_mcp_limits lim = { .init_timeout_ms = init_ms, .call_timeout_ms = 5000,
				      .max_message = max_message };

	return kvs_mcp_open(p, "mcp", NULL, argv, &lim, m, err, errlen);
}

static void well_behaved(struct kvs_policy *p, const char *mode, unsigned long min_malformed)
{
	struct kvs_mcp *m = NULL;
	json_t *tools = NULL, *res = NULL, *args;
	char err[512] = "", want[64];
	double t0 = kvs_now();
	int rc;

	rc = open_mode(p, mode, 30000, &m, err, sizeof(err));
	CHECK(rc == 0 && m, "%s: open: %d %s", mode, rc, err);
	if (!m)
		return;
	snprintf(want, sizeof(want), "fake-%s 1", mode);
	CHECK(!strcmp(kvs_mcp_server_info(m), want), "%s: info '%s'", mode, kvs_mcp_server_info(m));
	rc = kvs_mcp_list_tools(m, &tools, err, sizeof(err));
	CHECK(rc == 0 && json_array_size(tools) == 1, "%s: list: %d %s", mode, rc, err);
	CHECK(tools && !strcmp(json_string_value(json_object_get(json_array_get(tools, 0), "name")),
			       "echo"), "%s: tool name", mode);
	args = json_pack("{s:s}", "text", "hi");
	rc = kvs_mcp_call(m, "echo", args, &res, err, sizeof(err));
	json_decref(args);
	snprintf(want, sizeof(want), "echo from %s", mode);
	CHECK(rc == 0 && res && !strcmp(json_string_value(json_object_get(
			json_array_get(json_object_get(res, "content"), 0), "text")), want),
	      "%s: call: %d %s", mode, rc, err);
	json_decref(res);
	args = json_array();
	rc = kvs_mcp_call(m, "echo", args, &res, err, sizeof(err));
	json_decref(args);
	CHECK(rc == -EINVAL && !res, "%s: array arguments refused: %d", mode, rc);
	CHECK(kvs_mcp_malformed(m) >= min_malformed, "%s: malformed %lu < %lu", mode,
	      kvs_mcp_malformed(m), min_malformed);
	CHECK(strcmp(mode, "skipover") || kvs_mcp_oversized(m) == 2, "%s: oversized %lu, want 2",
	      mode, kvs_mcp_oversized(m));
	printf("test_mcp: %-10s ok in %.2f s (malformed %lu, oversized %lu)\n", mode,
	       kvs_now() - t0, kvs_mcp_malformed(m), kvs_mcp_oversized(m));
	json_decref(tools);
	json_decref(res);
	kvs_mcp_close(m);
}

static void fails(struct kvs_policy *p, const char *mode, uint32_t init_ms, int want_rc,
		  const char *want_err, int at_list)
{
	struct kvs_mcp *m = NULL;
	json_t *tools = NULL;
	char err[512] = "";
	double t0 = kvs_now(), took;
	int rc;

	rc = open_mode(p, mode, init_ms, &m, err, sizeof(err));
	if (at_list) {
		CHECK(rc == 0, "%s: open: %d %s", mode, rc, err);
		if (rc)
			return;
		rc = kvs_mcp_list_tools(m, &tools, err, sizeof(err));
	}
	took = kvs_now() - t0;
	CHECK(rc == want_rc && strstr(err, want_err), "%s: rc %d (want %d) '%s'", mode, rc,
	      want_rc, err);
	CHECK(took < init_ms / 1000.0 * (at_list ? 2 : 1) + 5, "%s: took %.1f s", mode, took);
	printf("test_mcp: %-10s refused in %.2f s: %s\n", mode, took, err);
	json_decref(tools);
	kvs_mcp_close(m);
}

int main(int argc, char **argv)
{
	char path[] = "/tmp/kvs-mcp-XXXXXX", ini[64], err[512], text[512];
	struct kvs_policy *p = NULL;
	FILE *f;
	int fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2 || !(fake = realpath(argv[1], NULL))) {
		fprintf(stderr, "usage: test_mcp FAKE-SERVER\n");
		return 2;
	}
	fd = mkstemp(path);
	if (fd < 0)
		return 1;
	close(fd);
	snprintf(ini, sizeof(ini), "%s", path);
	f = fopen(ini, "w");
	snprintf(text, sizeof(text), "[mcp]\nexec = %s\ntimeout = 120\n", fake);
	fputs(text, f);
	fclose(f);
	if (kvs_policy_load(ini, &p, err, sizeof(err))) {
		fprintf(stderr, "test_mcp: %s\n", err);
		return 1;
	}
	wire_parse();
	wire_commit_past_room();
	wire_tools_page();
	well_behaved(p, "good", 2);	/* its list has two bad entries */
	well_behaved(p, "garbage", 6);
	well_behaved(p, "ask", 2);
	well_behaved(p, "deep", 4);
	well_behaved(p, "huge", 2);
	/* the smallest cap kvarenad allows (max_result_bytes = 4096): lines
	 * over it, the second read while skipping the first (issue 36.8:
	 * its bytes were copied past the 4097-byte buffer) */
	max_message = 4096;
	well_behaved(p, "skipover", 0);
	well_behaved(p, "garbage", 6);
	max_message = 0;
	fails(p, "hugeanswer", 5000, -EMSGSIZE, "over the size cap", 1);
	fails(p, "silent", 1500, -ETIMEDOUT, "no answer in time", 0);
	fails(p, "exit", 5000, -EPIPE, "the server exited", 0);
	kvs_policy_free(p);
	unlink(ini);
	free((char *)fake);
	printf("test_mcp: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
