// SPDX-License-Identifier: MIT
/*
 * mcp.c - the MCP stdio client (kvsmcp.h): framing of newline-delimited
 * JSON-RPC 2.0 messages to and from a server running in the sandbox,
 * with every size and wait bounded. JSON through jansson. What the
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
#include "sandbox_internal.h"

#define MCP_PROTOCOL "2024-11-05"
#define MCP_MAX_PAGES 16

struct kvs_mcp {
	struct kvs_proc *proc;
	struct kvs_mcp_limits lim;
	char *buf;			/* the line being assembled */
	size_t len, cap;
	int skipping;			/* discarding an oversized line */
	int dead;
	int tools_changed;		/* notifications/tools/list_changed seen */
	long long next_id;
	unsigned long malformed, oversized;
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
	size_t n;
	int rc;

	if (!text)
		return -ENOMEM;
	n = strlen(text);
	text[n] = 0;
	rc = send_all(m, text, n, deadline);
	if (!rc)
		rc = send_all(m, "\n", 1, deadline);
	free(text);
	return rc;
}

/* One complete line from the buffer into a JSON object, or NULL. */
static json_t *take_line(struct kvs_mcp *m, int *got)
{
	char *nl = memchr(m->buf, '\n', m->len);
	size_t n;
	json_t *v;
	json_error_t je;

	*got = 0;
	if (!nl)
		return NULL;
	*got = 1;
	n = nl - m->buf;
	v = n ? json_loadb(m->buf, n, 0, &je) : NULL;
	memmove(m->buf, nl + 1, m->len - n - 1);
	m->len -= n + 1;
	if (!n)
		return NULL;	/* an empty line: nothing */
	if (!v || !json_is_object(v)) {
		m->malformed++;
		json_decref(v);
		return NULL;
	}
	return v;
}

static void drain_stderr(struct kvs_mcp *m)
{
	char junk[4096];
	int i;

	for (i = 0; i < 64; i++)
		if (read(kvs_proc_stderr(m->proc), junk, sizeof(junk)) <= 0)
			break;
}

/* The next message, -ETIMEDOUT, -EPIPE (the server is gone) or -EMSGSIZE
 * (a message over the cap went by). */
static int read_msg(struct kvs_mcp *m, double deadline, json_t **out)
{
	int last = 0;	/* the deadline passed: one look at what is there */

	*out = NULL;
	for (;;) {
		struct pollfd pf[3];
		double left;
		int got;
		json_t *v;

		while (!m->skipping && (v = take_line(m, &got), got)) {
			if (v) {
				*out = v;
				return 0;
			}
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
		if (pf[0].revents) {
			ssize_t n;

			if (m->skipping) {
				char junk[65536];
				char *nl;

				n = read(pf[0].fd, junk, sizeof(junk));
				if (n == 0) {
					m->dead = 1;
					continue;
				}
				if (n < 0)
					continue;
				nl = memchr(junk, '\n', n);
				if (nl) {
					m->skipping = 0;
					m->len = junk + n - nl - 1;
					memcpy(m->buf, nl + 1, m->len);
				}
				continue;
			}
			n = read(pf[0].fd, m->buf + m->len, m->cap - m->len);
			if (n == 0) {
				m->dead = 1;
				continue;
			}
			if (n > 0) {
				m->len += n;
				if (m->len == m->cap && !memchr(m->buf, '\n', m->len)) {
					/* over the cap: drop it up to its newline */
					m->oversized++;
					m->skipping = 1;
					m->len = 0;
					return -EMSGSIZE;
				}
			}
		} else if (pf[2].revents && !pf[0].revents) {
			/* exited: what it wrote is in the pipe; EOF comes next */
			char probe;
			ssize_t n = read(kvs_proc_stdout(m->proc), &probe, 1);

			if (n == 0)
				m->dead = 1;
			else if (n == 1 && m->len < m->cap)
				m->buf[m->len++] = probe;
		}
	}
}

static int is_id(json_t *id, long long want)
{
	return json_is_integer(id) && json_integer_value(id) == want;
}

/* A message that is not the answer awaited: the server's own requests
 * are answered (ping with {}, the rest, sampling and roots, with "method
 * not found"); tools/list_changed is noted; other notifications and stale
 * answers are dropped. Consumes in. */
static void other_msg(struct kvs_mcp *m, json_t *in, double deadline)
{
	json_t *rid = json_object_get(in, "id");
	const char *meth = json_string_value(json_object_get(in, "method"));

	if (meth && rid) {
		json_t *ans = !strcmp(meth, "ping") ?
			json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", rid, "result") :
			json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", rid,
				  "error", "code", -32601, "message", "method not found");

		if (ans)
			send_json(m, ans, deadline);
		json_decref(ans);
	} else if (meth && !strcmp(meth, "notifications/tools/list_changed")) {
		m->tools_changed = 1;
	}
	json_decref(in);
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
		json_t *in = NULL, *rid, *meth;

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
		rid = json_object_get(in, "id");
		meth = json_object_get(in, "method");
		if (json_is_string(meth)) {
			other_msg(m, in, deadline);
			continue;
		} else if (is_id(rid, id)) {
			json_t *res = json_object_get(in, "result");
			json_t *jerr = json_object_get(in, "error");

			if (json_is_object(jerr)) {
				const char *text = json_string_value(json_object_get(jerr, "message"));

				say(err, errlen, "%s: the server answered an error: %.400s", method,
				    text ? text : "(no message)");
				json_decref(in);
				return -EREMOTEIO;
			}
			if (!json_is_object(res)) {
				m->malformed++;
				json_decref(in);
				say(err, errlen, "%s: %s", method, "an answer without a result object");
				return -EBADMSG;
			}
			*result = json_incref(res);
			json_decref(in);
			return 0;
		}
		/* stale answers: nothing to do */
		json_decref(in);
	}
}

int kvs_mcp_poll(struct kvs_mcp *m)
{
	int i;

	/* bounded: a server that floods is read again on the next call */
	for (i = 0; i < 64 && !m->dead; i++) {
		json_t *in = NULL;
		int rc = read_msg(m, kvs_now(), &in);

		if (rc == -ETIMEDOUT)
			break;
		if (rc == -EMSGSIZE)
			continue;
		if (rc)
			return rc;
		if (!json_is_string(json_object_get(in, "method"))) {
			json_decref(in);	/* an answer nobody waits for */
			continue;
		}
		other_msg(m, in, kvs_now() + 1);
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
	m->cap = m->lim.max_message + 1;	/* room for the newline */
	m->buf = malloc(m->cap);
	if (!m->buf) {
		free(m);
		return -ENOMEM;
	}
	rc = kvs_spawn(p, &req, &m->proc, &res);
	if (rc) {
		say(err, errlen, "starting the server: %s%s", res.note[0] ? res.note :
		    strerror(-rc), "");
		kvs_result_free(&res);
		free(m->buf);
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
		json_t *result = NULL, *list, *t, *next;
		size_t i;

		json_decref(cursor);
		cursor = NULL;
		rc = request(m, "tools/list", params, m->lim.init_timeout_ms, &result, err, errlen);
		if (rc)
			break;
		list = json_object_get(result, "tools");
		json_array_foreach(list, i, t) {
			json_t *name = json_object_get(t, "name");
			json_t *desc = json_object_get(t, "description");
			json_t *schema = json_object_get(t, "inputSchema");
			json_t *kept;

			if (json_array_size(all) >= m->lim.max_tools)
				break;
			if (!json_is_string(name) || !json_string_length(name) ||
			    json_string_length(name) > 128 || (schema && !json_is_object(schema)) ||
			    (desc && !json_is_string(desc))) {
				m->malformed++;
				continue;
			}
			kept = json_pack("{s:O, s:o, s:o}", "name", name, "description",
					 desc ? json_incref(desc) : json_string(""), "inputSchema",
					 schema ? json_incref(schema) :
					 json_pack("{s:s}", "type", "object"));
			if (kept)
				json_array_append_new(all, kept);
		}
		next = json_object_get(result, "nextCursor");
		if (json_is_string(next) && json_array_size(all) < m->lim.max_tools)
			cursor = json_incref(next);
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
	return m->oversized;
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
	free(m->buf);
	free(m);
}
