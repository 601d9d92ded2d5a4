// SPDX-License-Identifier: MIT
/*
 * mcp.c - the MCP stdio client (kvsmcp.h): newline-delimited JSON-RPC 2.0
 * messages to and from a server running in the sandbox, with every size
 * and wait bounded. The bytes themselves (framing, parsing) are
 * mcp_wire.c's; this file does the I/O, the waiting and the protocol. What the
 * server's tools mean is kvarenad's business, not this file's.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvsmcp.h"
#include "mcp_wire.h"
#include "sandbox_internal.h"

#define MCP_PROTOCOL "2024-11-05"
#define MCP_MAX_PAGES 16

struct kvs_mcp {
	struct kvs_proc *proc;
	struct kvs_mcp_limits lim;
	struct kvs_lines in;		/* the server's stdout, framed */
	int dead;
	int tools_changed;		/* notifications/tools/list_changed seen */
	long long next_id;
	unsigned long malformed;
	char info[256];
};

static void say(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a, b);
}

static int send_all(struct kvs_mcp *m, const char *s, size_t n, double deadline)
{
	int fd = kvs_proc_stdin(m->proc);

	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0) {
			s += w;
			n -= w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR) {
			m->dead = 1;
			return -EPIPE;
		}
		{
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			double left = deadline - kvs_now();

			if (left <= 0)
				return -ETIMEDOUT;
			poll(&pf, 1, (int)(left * 1000) + 1);
		}
	}
	return 0;
}

static int send_json(struct kvs_mcp *m, json_t *msg, double deadline)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	int rc;

	if (!text)
		return -ENOMEM;
	rc = send_all(m, text, strlen(text), deadline);
	if (!rc)
		rc = send_all(m, "\n", 1, deadline);
	free(text);
	return rc;
}

static void drain_stderr(struct kvs_mcp *m)
{
	char junk[4096];
	int i;

	for (i = 0; i < 64; i++)
		if (read(kvs_proc_stderr(m->proc), junk, sizeof(junk)) <= 0)
			break;
}

/* What the server wrote on stdout, into the framer: 0 when nothing was
 * there, 1 when bytes came, and the server is dead at EOF. */
static int fill(struct kvs_mcp *m)
{
	size_t room;
	char *p = kvs_lines_space(&m->in, &room);
	ssize_t n;

	if (!room)
		return 0;	/* lines are waiting: take them first */
	n = read(kvs_proc_stdout(m->proc), p, room);
	if (n == 0)
		m->dead = 1;
	if (n <= 0)
		return 0;
	kvs_lines_commit(&m->in, (size_t)n);
	return 1;
}

/* The next message (a well-formed one: malformed lines are counted and
 * skipped), -ETIMEDOUT, -EPIPE (the server is gone), -ETIME (it outlived
 * its policy) or -EMSGSIZE (a message over the cap went by). */
static int read_msg(struct kvs_mcp *m, double deadline, struct kvs_rpc_msg *out)
{
	int last = 0;	/* the deadline passed: one look at what is there */

	memset(out, 0, sizeof(*out));
	for (;;) {
		struct pollfd pf[3];
		const char *line;
		size_t n;
		double left;
		int rc;

		while ((rc = kvs_lines_next(&m->in, &line, &n)) != 0) {
			if (rc < 0)
				return rc;
			kvs_rpc_parse(line, n, out);
			if (out->kind == KVS_RPC_MALFORMED)
				m->malformed++;
			if (out->kind != KVS_RPC_MALFORMED && out->kind != KVS_RPC_EMPTY)
				return 0;
			kvs_rpc_msg_free(out);
		}
		if (m->dead)
			return -EPIPE;
		if (kvs_now() > kvs_proc_deadline(m->proc)) {
			m->dead = 1;
			return -ETIME;
		}
		left = deadline - kvs_now();
		if (left <= 0) {
			if (last++)
				return -ETIMEDOUT;
			left = -0.001;	/* poll(0) */
		}
		pf[0] = (struct pollfd){ .fd = kvs_proc_stdout(m->proc), .events = POLLIN };
		pf[1] = (struct pollfd){ .fd = kvs_proc_stderr(m->proc), .events = POLLIN };
		pf[2] = (struct pollfd){ .fd = kvs_proc_pidfd(m->proc), .events = POLLIN };
		if (poll(pf, 3, (int)(left * 1000) + 1) < 0 && errno != EINTR)
			return -errno;
		if (pf[1].revents)
			drain_stderr(m);
		/* after it exited, what it wrote is still in the pipe, EOF
		 * next (its children died with it: it was their PID
		 * namespace's init) */
		if (pf[0].revents || pf[2].revents)
			fill(m);
	}
}

/* A message that is not the answer awaited: the server's own requests
 * are answered (ping with {}, the rest, sampling and roots, with "method
 * not found"); tools/list_changed is noted; other notifications and stale
 * answers are dropped. Frees msg. */
static void other_msg(struct kvs_mcp *m, struct kvs_rpc_msg *msg, double deadline)
{
	if (msg->kind == KVS_RPC_REQUEST) {
		json_t *ans = kvs_rpc_reply_to(msg);

		if (ans)
			send_json(m, ans, deadline);
		json_decref(ans);
	} else if (msg->kind == KVS_RPC_NOTIFICATION &&
		   !strcmp(msg->method, "notifications/tools/list_changed")) {
		m->tools_changed = 1;
	}
	kvs_rpc_msg_free(msg);
}

/* Send method(params) and wait for its answer; params is stolen. */
static int request(struct kvs_mcp *m, const char *method, json_t *params, uint32_t timeout_ms,
		   json_t **result, char *err, size_t errlen)
{
	double deadline = kvs_now() + timeout_ms / 1000.0;
	long long id = ++m->next_id;
	json_t *msg;
	int rc, oversized = 0;

	*result = NULL;
	if (m->dead) {
		json_decref(params);
		say(err, errlen, "%s: the server is gone%s", method, "");
		return -EPIPE;
	}
	msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id,
			"method", method, "params", params ? params : json_object());
	if (!msg)
		return -ENOMEM;
	rc = send_json(m, msg, deadline);
	json_decref(msg);
	if (rc) {
		/* a server that exited before reading its request: the same
		 * failure as one that exits before answering */
		say(err, errlen, "%s: sending: %s", method,
		    rc == -EPIPE ? "the server exited" : strerror(-rc));
		return rc;
	}
	for (;;) {
		struct kvs_rpc_msg in;

		rc = read_msg(m, deadline, &in);
		if (rc == -EMSGSIZE) {
			oversized = 1;	/* most likely our answer: keep waiting a little */
			continue;
		}
		if (rc) {
			if (oversized)
				rc = -EMSGSIZE;
			say(err, errlen, "%s: %s", method,
			    rc == -ETIMEDOUT ? (oversized ? "the answer was over the size cap" :
						"no answer in time") :
			    rc == -EPIPE ? "the server exited" :
			    rc == -ETIME ? "the server outlived its policy's timeout" :
			    rc == -EMSGSIZE ? "the answer was over the size cap" : strerror(-rc));
			return rc;
		}
		if (in.kind != KVS_RPC_RESPONSE) {
			other_msg(m, &in, deadline);
			continue;
		}
		if (!kvs_rpc_answers(&in, id)) {
			kvs_rpc_msg_free(&in);	/* a stale answer: nothing to do */
			continue;
		}
		if (in.is_error) {
			say(err, errlen, "%s: the server answered an error: %.400s", method,
			    in.error_message ? in.error_message : "(no message)");
			kvs_rpc_msg_free(&in);
			return -EREMOTEIO;
		}
		if (!in.result) {
			m->malformed++;
			kvs_rpc_msg_free(&in);
			say(err, errlen, "%s: %s", method, "an answer without a result object");
			return -EBADMSG;
		}
		*result = json_incref(in.result);
		kvs_rpc_msg_free(&in);
		return 0;
	}
}

int kvs_mcp_poll(struct kvs_mcp *m)
{
	int i;

	/* bounded: a server that floods is read again on the next call */
	for (i = 0; i < 64 && !m->dead; i++) {
		struct kvs_rpc_msg in;
		int rc = read_msg(m, kvs_now(), &in);

		if (rc == -ETIMEDOUT)
			break;
		if (rc == -EMSGSIZE)
			continue;
		if (rc)
			return rc;
		other_msg(m, &in, kvs_now() + 1);	/* an answer nobody waits for: dropped */
	}
	return m->dead ? -EPIPE : 0;
}

int kvs_mcp_tools_changed(struct kvs_mcp *m)
{
	int c = m->tools_changed;

	m->tools_changed = 0;
	return c;
}

int kvs_mcp_open(const struct kvs_policy *p, const char *tool, const char *workdir,
		 const char *const *argv, const struct kvs_mcp_limits *lim,
		 struct kvs_mcp **out, char *err, size_t errlen)
{
	struct kvs_request req = { .tool = tool, .workdir = workdir, .argv = argv };
	struct kvs_result res;
	struct kvs_mcp *m;
	json_t *params, *result = NULL, *note;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->lim.init_timeout_ms = 10000;
	m->lim.call_timeout_ms = 30000;
	m->lim.max_message = 4u << 20;
	m->lim.max_tools = 256;
	if (lim) {
		if (lim->init_timeout_ms)
			m->lim.init_timeout_ms = lim->init_timeout_ms;
		if (lim->call_timeout_ms)
			m->lim.call_timeout_ms = lim->call_timeout_ms;
		if (lim->max_message)
			m->lim.max_message = lim->max_message;
		if (lim->max_tools)
			m->lim.max_tools = lim->max_tools;
	}
	if (m->lim.max_message > (64u << 20))
		m->lim.max_message = 64u << 20;
	rc = kvs_lines_init(&m->in, m->lim.max_message);
	if (rc) {
		free(m);
		return rc;
	}
	rc = kvs_spawn(p, &req, &m->proc, &res);
	if (rc) {
		say(err, errlen, "starting the server: %s%s", res.note[0] ? res.note :
		    strerror(-rc), "");
		kvs_result_free(&res);
		kvs_lines_free(&m->in);
		free(m);
		return rc;
	}
	kvs_result_free(&res);
	params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL,
			   "capabilities", "clientInfo", "name", "kvarenad", "version", "0.1.0");
	rc = request(m, "initialize", params, m->lim.init_timeout_ms, &result, err, errlen);
	if (!rc) {
		json_t *si = json_object_get(result, "serverInfo");
		const char *name = json_string_value(json_object_get(si, "name"));
		const char *ver = json_string_value(json_object_get(si, "version"));

		snprintf(m->info, sizeof(m->info), "%.120s %.60s", name ? name : "?",
			 ver ? ver : "?");
		json_decref(result);
		note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
				 "notifications/initialized");
		rc = note ? send_json(m, note, kvs_now() + m->lim.init_timeout_ms / 1000.0) : -ENOMEM;
		json_decref(note);
	}
	if (rc) {
		kvs_mcp_close(m);
		return rc;
	}
	*out = m;
	return 0;
}

int kvs_mcp_list_tools(struct kvs_mcp *m, json_t **tools, char *err, size_t errlen)
{
	json_t *all = json_array(), *cursor = NULL;
	int page, rc = 0;

	*tools = NULL;
	if (!all)
		return -ENOMEM;
	for (page = 0; page < MCP_MAX_PAGES; page++) {
		json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : json_object();
		json_t *result = NULL;

		json_decref(cursor);
		cursor = NULL;
		rc = request(m, "tools/list", params, m->lim.init_timeout_ms, &result, err, errlen);
		if (rc)
			break;
		kvs_mcp_tools_page(result, all, m->lim.max_tools, &m->malformed, &cursor);
		json_decref(result);
		if (!cursor)
			break;
	}
	json_decref(cursor);
	if (rc) {
		json_decref(all);
		return rc;
	}
	*tools = all;
	return 0;
}

int kvs_mcp_call(struct kvs_mcp *m, const char *name, json_t *arguments, json_t **result,
		 char *err, size_t errlen)
{
	json_t *params;

	*result = NULL;
	if (!name || !*name || (arguments && !json_is_object(arguments))) {
		say(err, errlen, "tools/call: %s%s", "want a tool name and an object of arguments",
		    "");
		return -EINVAL;
	}
	params = json_pack("{s:s, s:O}", "name", name, "arguments",
			   arguments ? arguments : json_object());
	if (!params)
		return -ENOMEM;
	return request(m, "tools/call", params, m->lim.call_timeout_ms, result, err, errlen);
}

const char *kvs_mcp_server_info(const struct kvs_mcp *m)
{
	return m->info;
}

uint64_t kvs_mcp_cgroup_id(const struct kvs_mcp *m)
{
	return kvs_proc_cgroup_id(m->proc);
}

unsigned long kvs_mcp_malformed(const struct kvs_mcp *m)
{
	return m->malformed;
}

unsigned long kvs_mcp_oversized(const struct kvs_mcp *m)
{
	return m->in.oversized;
}

void kvs_mcp_close(struct kvs_mcp *m)
{
	struct kvs_result res;

	if (!m)
		return;
	if (m->proc) {
		kvs_proc_finish(m->proc, 500, &res);
		kvs_result_free(&res);
	}
	kvs_lines_free(&m->in);
	free(m);
}
