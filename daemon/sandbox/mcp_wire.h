/* SPDX-License-Identifier: MIT */
/*
 * mcp_wire.h - the MCP stdio transport without its I/O: framing a byte
 * stream into lines of at most a cap (longer ones dropped up to their
 * newline, in bounded memory) and reading one line as a JSON-RPC 2.0
 * message. Pure functions over buffers, so that the whole of what a
 * hostile server's bytes reach can be fuzzed (tests/sandbox/fuzz_mcp.c).
 * Internal to daemon/sandbox (mcp.c); not installed.
 */
#ifndef KVS_MCP_WIRE_H
#define KVS_MCP_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Line framing. The buffer holds at most cap = max_line + 1 bytes (a line
 * and its newline). Use:
 *
 *	while ((rc = kvs_lines_next(l, &line, &n)) != 0) { ...one line or -EMSGSIZE... }
 *	p = kvs_lines_space(l, &room);      room >= 1 once next() said 0
 *	got = read(fd, p, room);
 *	kvs_lines_commit(l, got);
 *
 * No call ever writes outside the buffer, whatever the bytes and however
 * they are split across reads.
 */
struct kvs_lines {
	char *buf;
	size_t cap;			/* max_line + 1 */
	size_t start;			/* first byte not yet handed out */
	size_t len;			/* bytes held: [start, len) */
	size_t scanned;			/* [start, scanned) has no newline */
	int skipping;			/* dropping a line over the cap */
	int dropped;			/* a drop not yet reported by next() */
	unsigned long oversized;	/* lines dropped since init */
};

int kvs_lines_init(struct kvs_lines *l, size_t max_line);
void kvs_lines_free(struct kvs_lines *l);
/* Where the next read may put bytes, and how many (0 only while complete
 * lines are waiting for kvs_lines_next()). */
char *kvs_lines_space(struct kvs_lines *l, size_t *room);
/* n (<= room) bytes were put there. */
void kvs_lines_commit(struct kvs_lines *l, size_t n);
/* 1: the line and its length n are the next complete line without its newline (valid until
 * the next call of any kvs_lines_*); 0: none complete yet; -EMSGSIZE: a
 * line over the cap went by (once per such line, in stream order). */
int kvs_lines_next(struct kvs_lines *l, const char **line, size_t *n);

/* One line as a JSON-RPC message. */
enum kvs_rpc_kind {
	KVS_RPC_EMPTY,			/* a blank line: nothing */
	KVS_RPC_MALFORMED,		/* not JSON, not an object, or no role */
	KVS_RPC_REQUEST,		/* method and id: the server asks us */
	KVS_RPC_NOTIFICATION,		/* method, no id */
	KVS_RPC_RESPONSE,		/* id, no method: an answer */
};

struct kvs_rpc_msg {
	enum kvs_rpc_kind kind;
	json_t *root;			/* owned; NULL unless parsed */
	const char *method;		/* REQUEST, NOTIFICATION */
	json_t *id;			/* REQUEST, RESPONSE (borrowed from root) */
	json_t *result;			/* RESPONSE: an object, or NULL */
	int is_error;			/* RESPONSE: an "error" object came */
	const char *error_message;	/* its message, or NULL */
};

/* Parses line[0..n) (bounded nesting: jansson's depth limit). Always sets
 * msg->kind; free with kvs_rpc_msg_free(). */
void kvs_rpc_parse(const char *line, size_t n, struct kvs_rpc_msg *msg);
void kvs_rpc_msg_free(struct kvs_rpc_msg *msg);
/* 1 when msg answers request id want (an integer id equal to it). */
int kvs_rpc_answers(const struct kvs_rpc_msg *msg, long long want);
/* Our answer to a server's request: ping gets {}, anything else (sampling,
 * roots, ...) "method not found". A new reference, or NULL. */
json_t *kvs_rpc_reply_to(const struct kvs_rpc_msg *msg);

/*
 * One page of a tools/list result: well-formed entries (a string name of
 * 1..128 bytes, an optional string description, an optional object
 * inputSchema) are appended to all as {name, description, inputSchema}
 * until it holds max_tools; the rest count in *malformed. *cursor gets
 * nextCursor (a new reference) when there is one and room for more.
 */
void kvs_mcp_tools_page(json_t *result, json_t *all, uint32_t max_tools,
			unsigned long *malformed, json_t **cursor);

#endif
