// SPDX-License-Identifier: MIT
/*
 * kvd-demo - an agent client for `make demo`: a few conversations at once
 * against kvarenad's OpenAI-compatible API (libcurl, jansson), each several
 * turns, streamed. Tools are declared in every request; when the model
 * answers with tool calls (finish_reason "tool_calls"), the client runs
 * them for real (calc evaluates the expression, read_file and list_dir
 * read the file system) and sends the results back as tool messages, the
 * way an agent framework does: the KV of the conversation waits in the
 * arena meanwhile. Prints one line per request (TTFT, tokens, cached
 * tokens) and a summary.
 *
 * usage: kvd-demo --url http://127.0.0.1:8080 [--model ID] [--key KEY]
 *                 [--conversations N] [--dir DIR]
 * Exit status 0 when every request succeeded.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *url = "http://127.0.0.1:8080", *model = "", *key, *dir = "/tmp";
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- tools, run here for real ----------------------------------------- */

struct expr {
	const char *p;
	int err;
};

static long long expr_sum(struct expr *e);

static void skip_ws(struct expr *e)
{
	while (*e->p == ' ')
		e->p++;
}

static long long expr_atom(struct expr *e)
{
	long long v = 0;

	skip_ws(e);
	if (*e->p == '(') {
		e->p++;
		v = expr_sum(e);
		skip_ws(e);
		if (*e->p++ != ')')
			e->err = 1;
		return v;
	}
	if (*e->p == '-') {
		e->p++;
		return -expr_atom(e);
	}
	if (!isdigit((unsigned char)*e->p))
		e->err = 1;
	while (isdigit((unsigned char)*e->p))
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *e->p++ - '0', &v))
			e->err = 1;
	return v;
}

static long long expr_product(struct expr *e)
{
	long long v = expr_atom(e), r;

	for (skip_ws(e); *e->p == '*'; skip_ws(e)) {
		e->p++;
		if (__builtin_mul_overflow(v, expr_atom(e), &r))
			e->err = 1;
		v = r;
	}
	return v;
}

static long long expr_sum(struct expr *e)
{
	long long v = expr_product(e), r;

	for (skip_ws(e); *e->p == '+' || *e->p == '-'; skip_ws(e)) {
		char op = *e->p++;
		long long w = expr_product(e);

		if (op == '+' ? __builtin_add_overflow(v, w, &r) : __builtin_sub_overflow(v, w, &r))
			e->err = 1;
		v = r;
	}
	return v;
}

static char *run_tool(const char *name, const char *args_json)
{
	json_t *a = json_loads(args_json, 0, NULL);
	char *out = NULL;
	const char *s;

	if (!a || !json_is_object(a)) {
		json_decref(a);
		return strdup("error: arguments are not a JSON object");
	}
	if (!strcmp(name, "calc") && (s = json_string_value(json_object_get(a, "expression")))) {
		struct expr e = { s, 0 };
		long long v = expr_sum(&e);

		skip_ws(&e);
		if (e.err || *e.p)
			out = strdup("error: cannot evaluate the expression");
		else if (asprintf(&out, "%lld", v) < 0)
			out = NULL;
	} else if (!strcmp(name, "read_file") &&
		   (s = json_string_value(json_object_get(a, "path")))) {
		FILE *f = fopen(s, "r");
		char buf[2048];
		size_t n;

		if (!f) {
			if (asprintf(&out, "error: %s: %s", s, strerror(errno)) < 0)
				out = NULL;
		} else {
			n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = 0;
			while (n && buf[n - 1] == '\n')
				buf[--n] = 0;
			out = strdup(buf);
		}
	} else if (!strcmp(name, "list_dir") &&
		   (s = json_string_value(json_object_get(a, "path")))) {
		DIR *dp = opendir(s);
		struct dirent **names;
		size_t len = 0;
		FILE *m = NULL;
		int n, i;

		if (!dp) {
			if (asprintf(&out, "error: %s: %s", s, strerror(errno)) < 0)
				out = NULL;
		} else {
			closedir(dp);
			n = scandir(s, &names, NULL, alphasort);
			m = open_memstream(&out, &len);
			for (i = 0; i < n; i++) {
				if (names[i]->d_name[0] != '.' && m)
					fprintf(m, "%s%s", len || ftell(m) ? "\n" : "", names[i]->d_name);
				free(names[i]);
			}
			if (n >= 0)
				free(names);
			if (m)
				fclose(m);
		}
	} else {
		if (asprintf(&out, "error: tool %s is not available to this client", name) < 0)
			out = NULL;
	}
	json_decref(a);
	return out ? out : strdup("error: out of memory");
}

/* ---- one streamed request --------------------------------------------- */

struct call {
	char id[64], name[64];
	char *args;
	size_t args_len;
};

struct stream {
	char *line;
	size_t line_len;
	char *content;
	size_t content_len;
	struct call calls[8];
	int n_calls;
	char finish[32];
	long prompt, cached, completion;
	char session[64];
	double t0, t_first;
	int done, error;
};

static void append(char **buf, size_t *len, const char *s, size_t n)
{
	char *p = realloc(*buf, *len + n + 1);

	if (!p)
		return;
	memcpy(p + *len, s, n);
	*len += n;
	p[*len] = 0;
	*buf = p;
}

static void on_event(struct stream *st, const char *data)
{
	json_t *ev, *choices, *usage, *ext;
	size_t i;

	if (!strcmp(data, "[DONE]")) {
		st->done = 1;
		return;
	}
	ev = json_loads(data, 0, NULL);
	if (!ev)
		return;
	if (json_object_get(ev, "error"))
		st->error = 1;
	choices = json_object_get(ev, "choices");
	for (i = 0; i < json_array_size(choices); i++) {
		json_t *c = json_array_get(choices, i), *d = json_object_get(c, "delta"), *tcs;
		const char *s;
		size_t k;

		if ((s = json_string_value(json_object_get(d, "content"))) && *s) {
			if (!st->t_first)
				st->t_first = now_ms();
			append(&st->content, &st->content_len, s, strlen(s));
		}
		tcs = json_object_get(d, "tool_calls");
		for (k = 0; k < json_array_size(tcs); k++) {
			json_t *tc = json_array_get(tcs, k), *fn = json_object_get(tc, "function");
			int idx = (int)json_integer_value(json_object_get(tc, "index"));

			if (!st->t_first)
				st->t_first = now_ms();
			if (idx < 0 || idx >= 8)
				continue;
			if (idx >= st->n_calls)
				st->n_calls = idx + 1;
			if ((s = json_string_value(json_object_get(tc, "id"))))
				snprintf(st->calls[idx].id, sizeof(st->calls[idx].id), "%s", s);
			if ((s = json_string_value(json_object_get(fn, "name"))))
				snprintf(st->calls[idx].name, sizeof(st->calls[idx].name), "%s", s);
			if ((s = json_string_value(json_object_get(fn, "arguments"))))
				append(&st->calls[idx].args, &st->calls[idx].args_len, s, strlen(s));
		}
		if ((s = json_string_value(json_object_get(c, "finish_reason"))))
			snprintf(st->finish, sizeof(st->finish), "%s", s);
	}
	usage = json_object_get(ev, "usage");
	if (json_is_object(usage)) {
		st->prompt = (long)json_integer_value(json_object_get(usage, "prompt_tokens"));
		st->completion = (long)json_integer_value(json_object_get(usage, "completion_tokens"));
		st->cached = (long)json_integer_value(json_object_get(
			json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
	}
	ext = json_object_get(ev, "kvarena");
	if (json_string_value(json_object_get(ext, "session_id")))
		snprintf(st->session, sizeof(st->session), "%s",
			 json_string_value(json_object_get(ext, "session_id")));
	json_decref(ev);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ctx)
{
	struct stream *st = ctx;
	size_t i, len = sz * n;

	for (i = 0; i < len; i++) {
		if (p[i] != '\n') {
			append(&st->line, &st->line_len, p + i, 1);
			continue;
		}
		if (st->line && !strncmp(st->line, "data: ", 6))
			on_event(st, st->line + 6);
		else if (st->line && st->line[0] == '{') {
			st->error = 1;	/* a JSON error body instead of a stream */
			pthread_mutex_lock(&out_lock);
			fprintf(stderr, "kvd-demo: %s\n", st->line);
			pthread_mutex_unlock(&out_lock);
		}
		free(st->line);
		st->line = NULL;
		st->line_len = 0;
	}
	return len;
}

static json_t *tools_json(void)
{
	static const char *const decl =
		"[{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": "
		"\"Evaluate an arithmetic expression.\", \"parameters\": {\"type\": \"object\", "
		"\"properties\": {\"expression\": {\"type\": \"string\", \"description\": "
		"\"integers with + - *\"}}, \"required\": [\"expression\"]}}},"
		"{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"description\": "
		"\"Read a text file.\", \"parameters\": {\"type\": \"object\", \"properties\": "
		"{\"path\": {\"type\": \"string\", \"description\": \"absolute path\"}}, "
		"\"required\": [\"path\"]}}},"
		"{\"type\": \"function\", \"function\": {\"name\": \"list_dir\", \"description\": "
		"\"List the entries of a directory.\", \"parameters\": {\"type\": \"object\", "
		"\"properties\": {\"path\": {\"type\": \"string\", \"description\": "
		"\"absolute path\"}}, \"required\": [\"path\"]}}},"
		"{\"type\": \"function\", \"function\": {\"name\": \"c_compile_run\", "
		"\"description\": \"Compile a C program and run it; returns its output.\", "
		"\"parameters\": {\"type\": \"object\", \"properties\": {\"code\": {\"type\": "
		"\"string\", \"description\": \"C source\"}}, \"required\": [\"code\"]}}}]";

	return json_loads(decl, JSON_DECODE_ANY, NULL);
}

static int post(json_t *messages, struct stream *st)
{
	json_t *body = json_object();
	struct curl_slist *h = NULL;
	char *text, auth[300];
	CURL *c = curl_easy_init();
	CURLcode rc;
	long status = 0;

	memset(st, 0, sizeof(*st));
	json_object_set_new(body, "model", json_string(model));
	json_object_set(body, "messages", messages);
	json_object_set_new(body, "tools", tools_json());
	json_object_set_new(body, "temperature", json_real(0));
	json_object_set_new(body, "max_tokens", json_integer(96));
	json_object_set_new(body, "stream", json_true());
	json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
	text = json_dumps(body, 0);
	json_decref(body);
	h = curl_slist_append(h, "Content-Type: application/json");
	if (key) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
		h = curl_slist_append(h, auth);
	}
	{
		char u[512];

		snprintf(u, sizeof(u), "%s/v1/chat/completions", url);
		curl_easy_setopt(c, CURLOPT_URL, u);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, st);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 600L);
		st->t0 = now_ms();
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(text);
	if (status != 200) {
		pthread_mutex_lock(&out_lock);
		fprintf(stderr, "kvd-demo: HTTP %ld %s %s\n", status,
			rc == CURLE_OK ? "" : curl_easy_strerror(rc), st->line ? st->line : "");
		pthread_mutex_unlock(&out_lock);
	}
	free(st->line);
	st->line = NULL;
	return rc == CURLE_OK && status == 200 && st->done && !st->error ? 0 : -1;
}

/* ---- conversations ----------------------------------------------------- */

struct conv {
	int index;
	const char *const *turns;	/* user messages, NULL-terminated */
	int requests, failed, tool_calls, tools_ok;
	long prompt, cached, completion;
	double ttft_sum;
	char session[64];
};

static const char *system_prompt = "You are a helpful assistant.";

static void *converse(void *arg)
{
	struct conv *cv = arg;
	json_t *msgs = json_array();
	int t, rounds;

	json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content",
					      system_prompt));
	for (t = 0; cv->turns[t]; t++) {
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content",
						      cv->turns[t]));
		for (rounds = 0; rounds < 3; rounds++) {
			struct stream st;
			int ok = post(msgs, &st), i;
			double ttft = st.t_first ? st.t_first - st.t0 : 0;

			cv->requests++;
			cv->failed += ok != 0;
			cv->prompt += st.prompt;
			cv->cached += st.cached;
			cv->completion += st.completion;
			cv->ttft_sum += ttft;
			snprintf(cv->session, sizeof(cv->session), "%s", st.session);
			pthread_mutex_lock(&out_lock);
			printf("  [conv %d] turn %d%s: %-10s ttft %7.1f ms  prompt %4ld  cached %4ld"
			       "  completion %3ld  %s\n", cv->index, t + 1, rounds ? "+tool" : "     ",
			       ok ? "FAILED" : st.finish, ttft, st.prompt, st.cached, st.completion,
			       st.n_calls ? "" : "");
			if (st.content_len)
				printf("      assistant: %.*s\n", (int)(st.content_len > 160 ? 160 :
								  st.content_len), st.content);
			for (i = 0; i < st.n_calls; i++)
				printf("      tool call: %s(%s)\n", st.calls[i].name,
				       st.calls[i].args ? st.calls[i].args : "");
			fflush(stdout);
			pthread_mutex_unlock(&out_lock);
			if (ok || strcmp(st.finish, "tool_calls") || !st.n_calls) {
				json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "assistant",
								      "content", st.content ? st.content : "",
								      st.content_len));
				free(st.content);
				for (i = 0; i < st.n_calls; i++)
					free(st.calls[i].args);
				break;
			}
			/* the model called tools: run them, send the results back */
			{
				json_t *tcs = json_array(), *am;

				for (i = 0; i < st.n_calls; i++)
					json_array_append_new(tcs, json_pack(
						"{s:s,s:s,s:{s:s,s:s}}", "id", st.calls[i].id, "type",
						"function", "function", "name", st.calls[i].name,
						"arguments", st.calls[i].args ? st.calls[i].args : "{}"));
				am = json_pack("{s:s,s:n,s:o}", "role", "assistant", "content",
					       "tool_calls", tcs);
				json_array_append_new(msgs, am);
				for (i = 0; i < st.n_calls; i++) {
					char *res = run_tool(st.calls[i].name,
							     st.calls[i].args ? st.calls[i].args : "{}");

					cv->tool_calls++;
					cv->tools_ok += strncmp(res, "error:", 6) != 0;
					pthread_mutex_lock(&out_lock);
					printf("      tool result (run by the client): %.100s\n", res);
					pthread_mutex_unlock(&out_lock);
					json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool",
									      "tool_call_id", st.calls[i].id,
									      "content", res));
					free(res);
					free(st.calls[i].args);
				}
				free(st.content);
			}
		}
	}
	json_decref(msgs);
	return NULL;
}

int main(int argc, char **argv)
{
	static const char *t0[] = { "What is 48213 + 9876?", "And what is 321 * 45?", NULL };
	static const char *t1[] = { NULL, "Thanks!", NULL };
	static const char *t2[] = { "Hello! How are you today?", "What is 1200 - 345?", NULL };
	static const char *t3[] = { NULL, "What is 77 * 88?", NULL };
	static const char *const *turns[] = { t0, t1, t2, t3 };
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "model", required_argument, NULL, 'm' },
		{ "key", required_argument, NULL, 'k' },
		{ "conversations", required_argument, NULL, 'n' },
		{ "dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	char q1[512], q3[512];
	struct conv cv[16] = { 0 };
	pthread_t th[16];
	int n = 4, i, opt, failed = 0, tools = 0, tools_ok = 0;
	long prompt = 0, cached = 0, completion = 0, requests = 0;
	double t_start;

	while ((opt = getopt_long(argc, argv, "u:m:k:n:d:", opts, NULL)) != -1) {
		switch (opt) {
		case 'u': url = optarg; break;
		case 'm': model = optarg; break;
		case 'k': key = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'd': dir = optarg; break;
		default:
			fprintf(stderr, "usage: kvd-demo --url URL [--model ID] [--key KEY] "
				"[--conversations N] [--dir DIR]\n");
			return 2;
		}
	}
	if (n < 1 || n > 16)
		n = 4;
	snprintf(q1, sizeof(q1), "Please read the file %s/notes.txt", dir);
	snprintf(q3, sizeof(q3), "List the directory %s", dir);
	t1[0] = q1;
	t3[0] = q3;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	t_start = now_ms();
	for (i = 0; i < n; i++) {
		cv[i].index = i;
		cv[i].turns = turns[i % 4];
		pthread_create(&th[i], NULL, converse, &cv[i]);
	}
	for (i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		failed += cv[i].failed;
		tools += cv[i].tool_calls;
		tools_ok += cv[i].tools_ok;
		prompt += cv[i].prompt;
		cached += cv[i].cached;
		completion += cv[i].completion;
		requests += cv[i].requests;
	}
	printf("\n  %d conversations, %ld requests in %.1f s: %ld prompt tokens (%ld reused "
	       "from KV kept in the arena, %.0f%%), %ld generated; %d tool calls run by the "
	       "client (%d succeeded); %d failed requests\n", n, requests,
	       (now_ms() - t_start) / 1e3, prompt, cached,
	       prompt ? 100.0 * (double)cached / (double)prompt : 0.0, completion, tools,
	       tools_ok, failed);
	curl_global_cleanup();
	return failed ? 1 : 0;
}
