// SPDX-License-Identifier: MIT
/*
 * mcp_wire.c - the MCP stdio transport's bytes (mcp_wire.h): a line
 * framer that holds at most one line of the cap and drops longer lines up
 * to their newline without ever growing, and the reading of one line as a
 * JSON-RPC 2.0 message (jansson). No I/O here: mcp.c reads and writes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_wire.h"

int kvs_lines_init(struct kvs_lines *l, size_t max_line)
{
	memset(l, 0, sizeof(*l));
	if (!max_line || max_line >= SIZE_MAX)	/* cap must not wrap */
		return -EINVAL;
	l->cap = max_line + 1;
	l->buf = malloc(l->cap);
	return l->buf ? 0 : -ENOMEM;
}

void kvs_lines_free(struct kvs_lines *l)
{
	free(l->buf);
	l->buf = NULL;
}

char *kvs_lines_space(struct kvs_lines *l, size_t *room)
{
	if (l->skipping) {
		/* what is read while dropping lands at the start, a whole
		 * buffer at most, and only what follows the newline is kept
		 * (start, len and scanned are 0 while skipping) */
		*room = l->cap;
		return l->buf;
	}
	if (l->start) {
		memmove(l->buf, l->buf + l->start, l->len - l->start);
		l->len -= l->start;
		l->scanned -= l->start;
		l->start = 0;
	}
	*room = l->cap - l->len;
	return l->buf + l->len;
}

void kvs_lines_commit(struct kvs_lines *l, size_t n)
{
	char *nl;

	if (l->skipping) {
		if (n > l->cap)
			n = l->cap;
		nl = memchr(l->buf, '\n', n);
		if (!nl)
			return;		/* all of it belongs to the dropped line */
		l->skipping = 0;
		/* the rest is shorter than the buffer: n <= cap */
		l->len = (size_t)(l->buf + n - (nl + 1));
		memmove(l->buf, nl + 1, l->len);
		l->start = l->scanned = 0;
		return;
	}
	if (n > l->cap - l->len)
		n = l->cap - l->len;
	l->len += n;
	if (memchr(l->buf + l->scanned, '\n', l->len - l->scanned))
		return;		/* next() hands it out */
	l->scanned = l->len;
	if (l->len - l->start >= l->cap) {
		/* a full buffer and no newline: over the cap */
		l->oversized++;
		l->dropped = 1;
		l->skipping = 1;
		l->start = l->len = l->scanned = 0;
	}
}

int kvs_lines_next(struct kvs_lines *l, const char **line, size_t *n)
{
	char *nl;

	if (l->dropped) {
		l->dropped = 0;
		return -EMSGSIZE;
	}
	if (l->skipping || l->start == l->len)
		return 0;
	nl = memchr(l->buf + l->start, '\n', l->len - l->start);
	if (!nl) {
		l->scanned = l->len;
		return 0;
	}
	*line = l->buf + l->start;
	*n = (size_t)(nl - (l->buf + l->start));
	l->start += *n + 1;
	if (l->scanned < l->start)
		l->scanned = l->start;
	return 1;
}

void kvs_rpc_parse(const char *line, size_t n, struct kvs_rpc_msg *msg)
{
	json_error_t je;
	json_t *v, *meth, *err;

	memset(msg, 0, sizeof(*msg));
	while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	if (!n) {
		msg->kind = KVS_RPC_EMPTY;
		return;
	}
	v = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(v)) {
		json_decref(v);
		msg->kind = KVS_RPC_MALFORMED;
		return;
	}
	msg->root = v;
	meth = json_object_get(v, "method");
	msg->id = json_object_get(v, "id");
	if (msg->id && !json_is_integer(msg->id) && !json_is_string(msg->id))
		msg->id = NULL;		/* null or an odd type: no one to answer */
	if (json_is_string(meth)) {
		msg->method = json_string_value(meth);
		msg->kind = msg->id ? KVS_RPC_REQUEST : KVS_RPC_NOTIFICATION;
		return;
	}
	if (meth || !msg->id) {
		msg->kind = KVS_RPC_MALFORMED;
		return;
	}
	msg->kind = KVS_RPC_RESPONSE;
	err = json_object_get(v, "error");
	if (json_is_object(err)) {
		msg->is_error = 1;
		msg->error_message = json_string_value(json_object_get(err, "message"));
		return;
	}
	msg->result = json_object_get(v, "result");
	if (!json_is_object(msg->result))
		msg->result = NULL;
}

void kvs_rpc_msg_free(struct kvs_rpc_msg *msg)
{
	json_decref(msg->root);
	memset(msg, 0, sizeof(*msg));
}

int kvs_rpc_answers(const struct kvs_rpc_msg *msg, long long want)
{
	return msg->kind == KVS_RPC_RESPONSE && json_is_integer(msg->id) &&
	       json_integer_value(msg->id) == want;
}

json_t *kvs_rpc_reply_to(const struct kvs_rpc_msg *msg)
{
	if (msg->kind != KVS_RPC_REQUEST)
		return NULL;
	if (!strcmp(msg->method, "ping"))
		return json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", msg->id, "result");
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", msg->id,
			 "error", "code", -32601, "message", "method not found");
}

void kvs_mcp_tools_page(json_t *result, json_t *all, uint32_t max_tools,
			unsigned long *malformed, json_t **cursor)
{
	json_t *list = json_object_get(result, "tools"), *t, *next;
	size_t i;

	*cursor = NULL;
	if (!json_is_array(list)) {
		(*malformed)++;
		return;
	}
	json_array_foreach(list, i, t) {
		json_t *name = json_object_get(t, "name");
		json_t *desc = json_object_get(t, "description");
		json_t *schema = json_object_get(t, "inputSchema");
		json_t *kept;

		if (json_array_size(all) >= max_tools)
			break;
		if (!json_is_string(name) || !json_string_length(name) ||
		    json_string_length(name) > 128 || (schema && !json_is_object(schema)) ||
		    (desc && !json_is_string(desc))) {
			(*malformed)++;
			continue;
		}
		kept = json_pack("{s:O, s:o, s:o}", "name", name, "description",
				 desc ? json_incref(desc) : json_string(""), "inputSchema",
				 schema ? json_incref(schema) : json_pack("{s:s}", "type", "object"));
		if (kept)
			json_array_append_new(all, kept);
	}
	next = json_object_get(result, "nextCursor");
	if (json_is_string(next) && json_array_size(all) < max_tools)
		*cursor = json_incref(next);
}
