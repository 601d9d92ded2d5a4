// SPDX-License-Identifier: MIT
/*
 * fuzz_mcp - libFuzzer harness over everything a hostile MCP server's
 * bytes reach in the client (daemon/sandbox/mcp_wire.c): the line framer,
 * fed the input split into reads of sizes the input itself picks, under a
 * cap it picks (as small as 1 byte); each line it yields read as a
 * JSON-RPC message; answers' results read as tools/list pages; requests
 * answered. Built with clang -fsanitize=fuzzer,address,undefined (make
 * fuzz-mcp); ASan/UBSan report any out-of-bounds access or leak, and the
 * framer's output is checked against a reference framing of the whole
 * input: the same lines, the same drops, in the same order.
 *
 * Input: byte 0-1 the cap (1 + value % 8192), byte 2-3 a seed for the
 * read sizes, the rest the stream.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_wire.h"

static uint32_t next_rand(uint32_t *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

/* What the framer must say: each newline-terminated segment of at most
 * cap - 1 bytes is a line, a longer one a drop; an unterminated tail is a
 * drop when it is over the cap, else nothing. */
struct ref {
	const uint8_t *data;
	size_t n, pos;
	size_t max_line;
};

/* 1 and the line, -EMSGSIZE, or 0 at the end. */
static int ref_next(struct ref *r, const uint8_t **line, size_t *len)
{
	const uint8_t *nl;
	size_t seg;

	if (r->pos >= r->n)
		return 0;
	nl = memchr(r->data + r->pos, '\n', r->n - r->pos);
	seg = nl ? (size_t)(nl - (r->data + r->pos)) : r->n - r->pos;
	if (!nl && seg <= r->max_line) {
		r->pos = r->n;
		return 0;
	}
	*line = r->data + r->pos;
	*len = seg;
	r->pos += seg + (nl ? 1 : 0);
	if (!nl)
		r->pos = r->n;
	return seg > r->max_line ? -EMSGSIZE : 1;
}

static void use_line(const char *line, size_t n)
{
	struct kvs_rpc_msg msg;
	unsigned long malformed = 0;

	kvs_rpc_parse(line, n, &msg);
	if (msg.kind == KVS_RPC_REQUEST) {
		json_t *ans = kvs_rpc_reply_to(&msg);
		char *text = ans ? json_dumps(ans, JSON_COMPACT) : NULL;

		assert(ans && text && !strchr(text, '\n'));
		free(text);
		json_decref(ans);
	} else if (msg.kind == KVS_RPC_RESPONSE) {
		(void)kvs_rpc_answers(&msg, 1);
		if (msg.result) {
			json_t *all = json_array(), *cursor = NULL;

			kvs_mcp_tools_page(msg.result, all, 8, &malformed, &cursor);
			assert(json_array_size(all) <= 8);
			json_decref(cursor);
			json_decref(all);
		}
	} else if (msg.kind == KVS_RPC_NOTIFICATION) {
		assert(msg.method);
	}
	kvs_rpc_msg_free(&msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvs_lines l;
	struct ref ref;
	uint32_t seed;
	size_t max_line, pos = 0;

	if (size < 4)
		return 0;
	max_line = 1 + ((size_t)data[0] << 8 | data[1]) % 8192;
	seed = (uint32_t)data[2] << 8 | data[3];
	data += 4;
	size -= 4;
	if (kvs_lines_init(&l, max_line))
		return 0;
	ref = (struct ref){ .data = data, .n = size, .max_line = max_line };
	for (;;) {
		const char *line;
		const uint8_t *want;
		size_t n, wn, room, take;
		char *p;
		int rc;

		while ((rc = kvs_lines_next(&l, &line, &n)) != 0) {
			int wrc = ref_next(&ref, &want, &wn);

			assert(rc == wrc);
			if (rc == 1) {
				assert(n <= max_line && n == wn && !memcmp(line, want, n));
				assert(!memchr(line, '\n', n));
				use_line(line, n);
			}
		}
		if (pos == size)
			break;
		p = kvs_lines_space(&l, &room);
		assert(room >= 1 && room <= max_line + 1);
		/* a read of 1 byte .. room, often the whole room */
		take = next_rand(&seed) % 4 ? 1 + next_rand(&seed) % room : room;
		if (take > size - pos)
			take = size - pos;
		memcpy(p, data + pos, take);
		pos += take;
		kvs_lines_commit(&l, take);
	}
	/* what is left is an unterminated tail within the cap */
	{
		const uint8_t *want;
		size_t wn;

		assert(ref_next(&ref, &want, &wn) == 0);
	}
	kvs_lines_free(&l);
	return 0;
}
