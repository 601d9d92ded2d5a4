// SPDX-License-Identifier: MIT
/*
 * scripted_kvd.c - a deterministic orchestrator behind kvd.h, for testing
 * the HTTP layer without a model. The reply is chosen by the last user
 * message of the rendered prompt (the chat template's text, so the
 * template is exercised end to end):
 *
 *   say TEXT          reply TEXT verbatim
 *   call NAME ARGS    reply one canonical tool-call block
 *   calls N NAME ARGS N blocks, joined as the template joins them
 *   whoami            "tenant=ID" (the tenant the API key mapped to)
 *   slow MS TEXT      TEXT, one token every MS milliseconds
 *   hold              no token until cancelled
 *   fail              two tokens, then an ERROR event
 *   busy              submission refused (429, Retry-After 2)
 *   long N            N tokens "x "
 *   srv ARGS          a call to the server-side tool srv_echo; when the
 *                     request offered it (--server-tools), a TOOL_RUN event
 *                     ("echo: ARGS") after the call's text, then "Done."
 *   srvmix ARGS       srv_echo and the client's calc in one reply: nothing
 *                     runs (a mixed round is the client's)
 *   anything else     "You said: " + the message
 * After a tool result (the prompt ends with a tool turn) the reply is
 * "Tool said: " + the result. A prompt that ends with "</think>\n\n" (a
 * reply continued past its think budget) gets the part of its reply
 * after the reply's own "</think>\n\n". A prompt without chat turns (/v1/completions)
 * is taken as the message whole.
 *
 * A token is at most 3 bytes of the reply (never splitting a UTF-8
 * character), so tags and multi-byte characters arrive split. Token
 * counts are bytes for the prompt: prompt_tokens is the prompt's length
 * and cached_tokens the longest byte prefix it shares with an earlier
 * prompt + reply of the same tenant - so a test can check from usage
 * alone that a conversation's rendering is byte-stable across turns.
 * max_tokens, stop sequences, logprobs and the context length are
 * honoured. Not a model and not a scheduler: no batching, no KV.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "kvd.h"
#include "scripted_kvd.h"

#define HISTORY 256

struct hist {
	char *text;
	size_t len;
	uint32_t tenant;
	char session[32];
	int live;
};

struct kvd {
	char model[128];
	uint32_t context;
	int ready;
	pthread_mutex_t lock;
	struct hist hist[HISTORY];
	unsigned next_hist;
	unsigned next_session;
	unsigned long jobs, cancelled, deleted;
	int server_tools;
	struct chat_template *tmpl;	/* ChatML, as the test models' */
	/* kvd_job_set_notify: the jobs watched, and the thread that calls
	 * their notify when a scheduled token is due (under lock) */
	struct kvd_job *watch;
	pthread_t ticker;
	pthread_cond_t tick;
	int ticker_on, ticker_stop;
};

struct kvd_job {
	struct kvd *d;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *prompt;
	size_t prompt_len;
	char *reply;
	size_t len, pos;
	uint32_t tenant;
	int step_ms;
	int hold;
	int fail;
	int cancelled;
	int ended;
	enum kvd_finish finish;
	uint32_t stop_seq;		/* 1 + the stop sequence that cut the reply */
	struct kvd_sampling s;
	uint32_t tokens;
	uint32_t cached;
	char session[32];
	struct timespec t0, next_at;
	double ttft_ms;
	struct kvd_top_logprob top[2];
	char tok[8];
	/* srv: a TOOL_RUN event when pos reaches tool_at */
	int offered;
	size_t tool_at;
	int tool_sent;
	char *tool_args, *tool_out;
	struct kvd_tool_run run;
	/* kvd_job_set_notify's (d->lock): what the ticker reads */
	void (*notify)(void *arg);
	void *notify_arg;
	int notified;			/* since the consumer last looked */
	int w_ended;
	struct timespec due_at;
	struct kvd_job *w_next, **w_prev;
};

struct kvd *scripted_kvd_new(const char *model, uint32_t context)
{
	struct kvd *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	snprintf(d->model, sizeof(d->model), "%s", model);
	d->context = context;
	d->ready = 1;
	if (chat_template_new(NULL, 0, NULL, &d->tmpl, NULL, 0)) {
		free(d);
		return NULL;
	}
	pthread_mutex_init(&d->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&d->tick, &ca);
		pthread_condattr_destroy(&ca);
	}
	return d;
}

int scripted_kvd_set_family(struct kvd *d, const char *family)
{
	struct chat_options o = { family, NULL, NULL };
	struct chat_template *t;
	int rc = chat_template_new(NULL, 0, &o, &t, NULL, 0);

	if (rc)
		return rc;
	chat_template_free(d->tmpl);
	d->tmpl = t;
	return 0;
}

void scripted_kvd_free(struct kvd *d)
{
	pthread_mutex_lock(&d->lock);
	d->ticker_stop = 1;
	pthread_cond_broadcast(&d->tick);
	pthread_mutex_unlock(&d->lock);
	if (d->ticker_on)
		pthread_join(d->ticker, NULL);
	pthread_cond_destroy(&d->tick);
	for (unsigned i = 0; i < HISTORY; i++)
		free(d->hist[i].text);
	chat_template_free(d->tmpl);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void scripted_kvd_set_server_tools(struct kvd *d, int on)
{
	d->server_tools = on;
}

void scripted_kvd_set_ready(struct kvd *d, int ready)
{
	__atomic_store_n(&d->ready, ready, __ATOMIC_RELAXED);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
		(double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static char *dupn(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

/* The last turn of the prompt before the generation prompt. */
static int last_turn(const char *p, size_t n, const char **role,
		     size_t *role_len, const char **text, size_t *len)
{
	static const char start[] = "<|im_start|>", end[] = "<|im_end|>";
	const char *gen = NULL, *s = NULL, *e;

	for (const char *q = p; (q = memmem(q, n - (size_t)(q - p), start, 12)); q++) {
		s = gen;
		gen = q;
	}
	if (!s)
		return -1;
	s += 12;
	e = memchr(s, '\n', (size_t)(gen - s));
	if (!e)
		return -1;
	*role = s;
	*role_len = (size_t)(e - s);
	*text = e + 1;
	e = memmem(*text, (size_t)(gen - *text), end, 10);
	*len = e ? (size_t)(e - *text) : 0;
	return 0;
}

#define THINK_END "</think>\n\n"

static char *make_reply(struct kvd_job *j, const char *p, size_t n,
			struct kvd_error *err)
{
	const char *role, *text;
	size_t rl, tl;
	char *msg, *reply = NULL;
	int k, count;
	char name[65];

	if (last_turn(p, n, &role, &rl, &text, &tl)) {
		/* no chat turn: a raw prompt (/v1/completions) is the message */
		role = "user";
		rl = 4;
		text = p;
		tl = n;
	}
	if (rl == 4 && !memcmp(role, "tool", 4)) {
		static const char open[] = "<tool_response>\n", close[] = "\n</tool_response>";

		if (tl >= sizeof(open) - 1 + sizeof(close) - 1) {
			text += sizeof(open) - 1;
			tl -= sizeof(open) - 1 + sizeof(close) - 1;
		}
		if (asprintf(&reply, "Tool said: %.*s", (int)tl, text) < 0)
			return NULL;
		return reply;
	}
	msg = dupn(text, tl);
	if (!msg)
		return NULL;
	if (!strncmp(msg, "say ", 4)) {
		reply = strdup(msg + 4);
	} else if (!strncmp(msg, "calls ", 6) &&
		   sscanf(msg, "calls %d %64s %n", &count, name, &k) == 2 &&
		   count > 0 && count <= 16) {
		size_t cap = (size_t)count * (strlen(msg) + 64), at = 0;

		reply = malloc(cap);
		for (int i = 0; reply && i < count; i++)
			at += (size_t)snprintf(reply + at, cap - at,
				"%s<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
				i ? "\n" : "", name, msg + k);
	} else if (!strncmp(msg, "call ", 5) && sscanf(msg, "call %64s %n", name, &k) == 1) {
		if (asprintf(&reply, "<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
			     name, msg + k) < 0)
			reply = NULL;
	} else if (!strncmp(msg, "srv ", 4) || !strncmp(msg, "srvmix ", 7)) {
		int mix = msg[3] == 'm';
		const char *args = msg + (mix ? 7 : 4);
		int n;

		n = asprintf(&reply, "<tool_call>\n{\"name\": \"srv_echo\", \"arguments\": %s}\n"
			     "</tool_call>%s%s", args,
			     mix ? "\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}\n"
				   "</tool_call>" : "",
			     !mix && j->offered ? "Done." : "");
		if (n < 0) {
			reply = NULL;
		} else if (!mix && j->offered) {
			j->tool_at = (size_t)n - 5;
			j->tool_args = strdup(args);
			if (asprintf(&j->tool_out, "echo: %s", args) < 0)
				j->tool_out = NULL;
		}
	} else if (!strcmp(msg, "whoami")) {
		if (asprintf(&reply, "tenant=%u", j->tenant) < 0)
			reply = NULL;
	} else if (sscanf(msg, "slow %d %n", &j->step_ms, &k) == 1) {
		reply = strdup(msg + k);
	} else if (!strcmp(msg, "hold")) {
		j->hold = 1;
		reply = strdup("");
	} else if (!strcmp(msg, "fail")) {
		j->fail = 1;
		reply = strdup("partial output that fails");
	} else if (!strcmp(msg, "busy")) {
		err->kind = KVD_ERR_BUSY;
		err->retry_after_s = 2;
		snprintf(err->message, sizeof(err->message), "scripted: busy");
	} else if (sscanf(msg, "long %d", &count) == 1 && count > 0 && count <= 100000) {
		reply = malloc((size_t)count * 2 + 1);
		for (int i = 0; reply && i < count; i++)
			memcpy(reply + 2 * i, i % 2 ? "y " : "x ", 3);
		if (reply)
			reply[count * 2] = '\0';
	} else {
		if (asprintf(&reply, "You said: %s", msg) < 0)
			reply = NULL;
	}
	free(msg);
	/* a reply continued after its think block was closed (the API's
	 * think budget): the part of the scripted reply after its own */
	if (reply && n >= sizeof(THINK_END) - 1 &&
	    !memcmp(p + n - (sizeof(THINK_END) - 1), THINK_END, sizeof(THINK_END) - 1)) {
		char *at = strstr(reply, THINK_END), *rest;

		if (at) {
			rest = strdup(at + sizeof(THINK_END) - 1);
			free(reply);
			reply = rest;
		}
	}
	return reply;
}

int kvd_job_submit(struct kvd *d, const struct kvd_request *req,
		   struct kvd_job **jobp, struct kvd_error *err)
{
	struct kvd_job *j;
	size_t best = 0;

	memset(err, 0, sizeof(*err));
	if (strcmp(req->model, d->model)) {
		err->kind = KVD_ERR_NOT_FOUND;
		snprintf(err->message, sizeof(err->message), "unknown model");
		return -ENOENT;
	}
	if (req->prompt_len > d->context) {
		err->kind = KVD_ERR_TOO_LONG;
		err->param = "messages";
		snprintf(err->message, sizeof(err->message),
			 "This model's maximum context length is %u tokens; your messages resulted in %zu tokens.",
			 d->context, req->prompt_len);
		return -E2BIG;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		goto nomem;
	j->d = d;
	j->tenant = req->tenant;
	j->s = req->s;
	for (uint32_t i = 0; i < j->s.n_stop; i++)
		j->s.stop[i] = NULL;	/* the request's strings are not kept */
	j->offered = d->server_tools && (req->server_tools & 1);
	j->prompt = dupn(req->prompt, req->prompt_len);
	j->prompt_len = req->prompt_len;
	if (!j->prompt)
		goto nomem;
	j->reply = make_reply(j, req->prompt, req->prompt_len, err);
	if (err->kind) {
		free(j->prompt);
		free(j);
		return -EBUSY;
	}
	if (!j->reply)
		goto nomem;
	j->len = strlen(j->reply);
	/* stop sequences cut the reply where the first one starts */
	for (uint32_t i = 0; i < req->s.n_stop; i++) {
		char *at = strstr(j->reply, req->s.stop[i]);

		if (at && (size_t)(at - j->reply) < j->len) {
			j->len = (size_t)(at - j->reply);
			j->stop_seq = i + 1;
		}
	}
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	clock_gettime(CLOCK_MONOTONIC, &j->t0);
	j->next_at = j->t0;

	pthread_mutex_lock(&d->lock);
	d->jobs++;
	for (unsigned i = 0; i < HISTORY; i++) {
		const struct hist *h = &d->hist[i];
		size_t k = 0, m;

		if (!h->text || h->tenant != req->tenant)
			continue;
		m = h->len < req->prompt_len ? h->len : req->prompt_len;
		while (k < m && h->text[k] == req->prompt[k])
			k++;
		if (k > best) {
			best = k;
			/* a continuation of that conversation: same session */
			if (h->live && k == h->len)
				snprintf(j->session, sizeof(j->session), "%s", h->session);
			else
				j->session[0] = '\0';
		}
	}
	if (!j->session[0])
		snprintf(j->session, sizeof(j->session), "sess-%u", ++d->next_session);
	pthread_mutex_unlock(&d->lock);
	j->cached = (uint32_t)best;
	*jobp = j;
	return 0;
nomem:
	if (j) {
		free(j->prompt);
		free(j);
	}
	err->kind = KVD_ERR_INTERNAL;
	snprintf(err->message, sizeof(err->message), "out of memory");
	return -ENOMEM;
}

/* Prompt + what was generated becomes history for prefix matching. */
static void remember(struct kvd_job *j)
{
	struct kvd *d = j->d;
	struct hist *h;
	char *t = malloc(j->prompt_len + j->pos + 1);

	if (!t)
		return;
	memcpy(t, j->prompt, j->prompt_len);
	memcpy(t + j->prompt_len, j->reply, j->pos);
	pthread_mutex_lock(&d->lock);
	h = &d->hist[d->next_hist++ % HISTORY];
	free(h->text);
	h->text = t;
	h->len = j->prompt_len + j->pos;
	h->tenant = j->tenant;
	h->live = 1;
	snprintf(h->session, sizeof(h->session), "%s", j->session);
	pthread_mutex_unlock(&d->lock);
}

static void done(struct kvd_job *j, struct kvd_event *ev, enum kvd_finish f)
{
	j->ended = 1;
	ev->type = KVD_EV_DONE;
	ev->finish = f;
	ev->usage.prompt_tokens = (uint32_t)j->prompt_len;
	ev->usage.cached_tokens = j->cached;
	ev->usage.completion_tokens = j->tokens;
	ev->session_id = j->session;
	ev->stop_seq = f == KVD_FINISH_STOP && j->pos >= j->len ? j->stop_seq : 0;
	ev->ttft_ms = j->ttft_ms;
	ev->total_ms = ms_since(&j->t0);
	remember(j);
}

/* n > 1 choices: the first job with an event. A test double: it checks
 * every job, then sleeps a millisecond (the replies are scheduled in
 * time, never pushed). */
int kvd_job_next_any(struct kvd_job *const *jobs, unsigned n, struct kvd_event *ev,
		     unsigned *which, int timeout_ms)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		for (unsigned i = 0; i < n; i++)
			if (!jobs[i]->ended && kvd_job_next(jobs[i], ev, 0)) {
				*which = i;
				return 1;
			}
		if (timeout_ms >= 0 && ms_since(&t0) >= timeout_ms)
			return 0;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
}

static int job_next(struct kvd_job *j, struct kvd_event *ev, int timeout_ms);

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* The ticker: a watched job whose next token is due (or that was
 * cancelled) gets its notify once, until its consumer looks again. */
static void *ticker_main(void *arg)
{
	struct kvd *d = arg;

	pthread_mutex_lock(&d->lock);
	while (!d->ticker_stop) {
		struct timespec now, next;

		clock_gettime(CLOCK_MONOTONIC, &now);
		next = now;
		next.tv_nsec += 100 * 1000000L;
		if (next.tv_nsec >= 1000000000L) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000L;
		}
		for (struct kvd_job *j = d->watch; j; j = j->w_next) {
			int cancelled = __atomic_load_n(&j->cancelled, __ATOMIC_RELAXED);

			if (j->w_ended || j->notified || (j->hold && !cancelled))
				continue;
			if (cancelled || !ts_before(&now, &j->due_at)) {
				j->notified = 1;
				j->notify(j->notify_arg);
			} else if (ts_before(&j->due_at, &next)) {
				next = j->due_at;
			}
		}
		pthread_cond_timedwait(&d->tick, &d->lock, &next);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

void kvd_job_set_notify(struct kvd_job *j, void (*fn)(void *arg), void *arg)
{
	struct kvd *d = j->d;

	pthread_mutex_lock(&d->lock);
	if (fn && !d->ticker_on && !d->ticker_stop &&
	    !pthread_create(&d->ticker, NULL, ticker_main, d))
		d->ticker_on = 1;
	if (fn && !j->w_prev) {
		j->w_next = d->watch;
		if (d->watch)
			d->watch->w_prev = &j->w_next;
		d->watch = j;
		j->w_prev = &d->watch;
	} else if (!fn && j->w_prev) {
		*j->w_prev = j->w_next;
		if (j->w_next)
			j->w_next->w_prev = j->w_prev;
		j->w_prev = NULL;
	}
	j->notify = fn;
	j->notify_arg = arg;
	j->notified = 0;
	pthread_cond_broadcast(&d->tick);
	pthread_mutex_unlock(&d->lock);
}

int kvd_job_next(struct kvd_job *j, struct kvd_event *ev, int timeout_ms)
{
	int r = job_next(j, ev, timeout_ms);
	struct kvd *d = j->d;

	/* what the ticker needs to know, after every look */
	pthread_mutex_lock(&d->lock);
	j->w_ended = j->ended;
	j->due_at = j->next_at;
	j->notified = 0;
	if (j->notify)
		pthread_cond_broadcast(&d->tick);
	pthread_mutex_unlock(&d->lock);
	return r;
}

static int job_next(struct kvd_job *j, struct kvd_event *ev, int timeout_ms)
{
	struct timespec deadline, wake;
	size_t n;

	memset(ev, 0, sizeof(*ev));
	if (j->ended)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	if (timeout_ms >= 0) {
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (deadline.tv_nsec >= 1000000000) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&j->lock);
	for (;;) {
		struct timespec now;

		if (__atomic_load_n(&j->cancelled, __ATOMIC_RELAXED)) {
			pthread_mutex_unlock(&j->lock);
			done(j, ev, KVD_FINISH_STOP);
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!j->hold && (now.tv_sec > j->next_at.tv_sec ||
		     (now.tv_sec == j->next_at.tv_sec && now.tv_nsec >= j->next_at.tv_nsec)))
			break;
		if (timeout_ms >= 0 && (now.tv_sec > deadline.tv_sec ||
		    (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))) {
			pthread_mutex_unlock(&j->lock);
			return 0;
		}
		wake = j->hold || (timeout_ms >= 0 &&
			(deadline.tv_sec < j->next_at.tv_sec ||
			 (deadline.tv_sec == j->next_at.tv_sec &&
			  deadline.tv_nsec < j->next_at.tv_nsec))) ? deadline : j->next_at;
		if (j->hold && timeout_ms < 0)
			pthread_cond_wait(&j->cond, &j->lock);
		else
			pthread_cond_timedwait(&j->cond, &j->lock, &wake);
	}
	pthread_mutex_unlock(&j->lock);

	if (j->fail && j->tokens == 2) {
		j->ended = 1;
		ev->type = KVD_EV_ERROR;
		ev->err.kind = KVD_ERR_INTERNAL;
		snprintf(ev->err.message, sizeof(ev->err.message),
			 "scripted: the decode worker failed");
		remember(j);
		return 1;
	}
	if (j->tool_at && j->pos == j->tool_at && !j->tool_sent) {
		j->tool_sent = 1;
		j->run = (struct kvd_tool_run){
			.round = 1, .name = "srv_echo",
			.arguments = j->tool_args ? j->tool_args : "",
			.arguments_len = j->tool_args ? strlen(j->tool_args) : 0,
			.exit_reason = "exit", .output = j->tool_out ? j->tool_out : "",
			.output_len = j->tool_out ? strlen(j->tool_out) : 0, .wall_ms = 1.5,
		};
		ev->type = KVD_EV_TOOL_RUN;
		ev->tool_run = &j->run;
		return 1;
	}
	if (j->pos >= j->len) {
		done(j, ev, KVD_FINISH_STOP);
		return 1;
	}
	if (j->s.max_tokens && j->tokens >= j->s.max_tokens) {
		done(j, ev, KVD_FINISH_LENGTH);
		return 1;
	}
	/* up to 3 bytes, whole UTF-8 characters */
	n = 0;
	while (j->pos + n < j->len && n < 3) {
		unsigned char c = (unsigned char)j->reply[j->pos + n];
		size_t cl = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;

		if (n && n + cl > 3)
			break;
		n += cl;
	}
	if (j->pos + n > j->len)
		n = j->len - j->pos;
	if (j->tool_at && j->pos < j->tool_at && j->pos + n > j->tool_at)
		n = j->tool_at - j->pos;
	memcpy(j->tok, j->reply + j->pos, n);
	ev->type = KVD_EV_TOKEN;
	ev->text = j->reply + j->pos;
	ev->text_len = n;
	ev->token = 1000 + (int32_t)j->tokens;
	if (j->s.logprobs) {
		ev->logprob = -0.25f;
		j->top[0] = (struct kvd_top_logprob){ ev->token, -0.25f, j->tok, n };
		j->top[1] = (struct kvd_top_logprob){ 7, -2.5f, "\xe2\x82", 2 };
		ev->n_top = j->s.top_logprobs < 2 ? j->s.top_logprobs : 2;
		ev->top = j->top;
	}
	j->pos += n;
	if (j->tokens++ == 0)
		j->ttft_ms = ms_since(&j->t0);
	if (j->step_ms > 0) {
		clock_gettime(CLOCK_MONOTONIC, &j->next_at);
		j->next_at.tv_nsec += (long)j->step_ms * 1000000;
		j->next_at.tv_sec += j->next_at.tv_nsec / 1000000000;
		j->next_at.tv_nsec %= 1000000000;
	}
	return 1;
}

void kvd_job_cancel(struct kvd_job *j)
{
	pthread_mutex_lock(&j->lock);
	if (!j->cancelled && !j->ended) {
		__atomic_store_n(&j->cancelled, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&j->d->lock);
		j->d->cancelled++;
		pthread_cond_broadcast(&j->d->tick);	/* the ticker notifies */
		pthread_mutex_unlock(&j->d->lock);
	}
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

void kvd_job_free(struct kvd_job *j)
{
	if (!j)
		return;
	kvd_job_set_notify(j, NULL, NULL);
	free(j->tool_args);
	free(j->tool_out);
	pthread_mutex_destroy(&j->lock);
	pthread_cond_destroy(&j->cond);
	free(j->prompt);
	free(j->reply);
	free(j);
}

int kvd_session_delete(struct kvd *d, const char *id, uint32_t tenant)
{
	int r = -ENOENT;

	pthread_mutex_lock(&d->lock);
	for (unsigned i = 0; i < HISTORY; i++) {
		struct hist *h = &d->hist[i];

		if (h->text && h->live && h->tenant == tenant && !strcmp(h->session, id)) {
			h->live = 0;
			r = 0;
		}
	}
	if (!r)
		d->deleted++;
	pthread_mutex_unlock(&d->lock);
	return r;
}

const char *kvd_model_id(const struct kvd *d)
{
	return d->model;
}

const struct chat_template *kvd_chat_template(const struct kvd *d)
{
	return d->tmpl;
}

uint32_t kvd_context_len(const struct kvd *d)
{
	return d->context;
}

/* Tokens are bytes here (prompt_tokens counts bytes too). */
uint32_t kvd_vocab_size(const struct kvd *d)
{
	(void)d;
	return 256;
}

const char *kvd_system_fingerprint(const struct kvd *d)
{
	(void)d;
	return "fp_scripted";
}

int kvd_tokenize(struct kvd *d, const char *text, size_t len, int add_special,
		 int32_t *ids, size_t max)
{
	(void)d;
	(void)add_special;
	for (size_t i = 0; i < len && i < max; i++)
		ids[i] = (unsigned char)text[i];
	return len > INT32_MAX ? -E2BIG : (int)len;
}

int kvd_count_prompt(struct kvd *d, const char *text, size_t len,
		     const struct kvd_span *markup, size_t n_markup)
{
	(void)markup;
	(void)n_markup;
	return kvd_tokenize(d, text, len, 1, NULL, 0);
}

int kvd_token_piece(struct kvd *d, int32_t id, char *buf, size_t len)
{
	(void)d;
	if (id < 0 || id > 255)
		return -EINVAL;
	if (len)
		buf[0] = (char)id;
	return 1;
}

int kvd_ready(const struct kvd *d)
{
	return __atomic_load_n(&d->ready, __ATOMIC_RELAXED);
}

/* The scripted orchestrator has no workers: ok once ready. */
int kvd_health(const struct kvd *d)
{
	return kvd_ready(d) ? KVD_HEALTH_OK : -1;
}

char *kvd_metrics_text(struct kvd *d)
{
	char *s;

	pthread_mutex_lock(&d->lock);
	if (asprintf(&s, "# HELP kvd_scripted_jobs_total Jobs submitted to the scripted orchestrator.\n"
		     "# TYPE kvd_scripted_jobs_total counter\n"
		     "kvd_scripted_jobs_total %lu\n"
		     "# HELP kvd_scripted_jobs_cancelled_total Jobs cancelled before their end.\n"
		     "# TYPE kvd_scripted_jobs_cancelled_total counter\n"
		     "kvd_scripted_jobs_cancelled_total %lu\n"
		     "# HELP kvd_scripted_sessions_deleted_total Sessions deleted.\n"
		     "# TYPE kvd_scripted_sessions_deleted_total counter\n"
		     "kvd_scripted_sessions_deleted_total %lu\n",
		     d->jobs, d->cancelled, d->deleted) < 0)
		s = NULL;
	pthread_mutex_unlock(&d->lock);
	return s;
}

const char *kvd_server_tools(const struct kvd *d)
{
	return d->server_tools ?
		"[{\"name\": \"srv_echo\", \"description\": \"Echo the arguments (scripted).\", "
		"\"parameters\": {\"type\": \"object\", \"properties\": {\"x\": "
		"{\"type\": \"integer\"}}}}]" : NULL;
}

int kvd_server_tools_allowed(struct kvd *d, uint32_t tenant)
{
	(void)tenant;
	return d->server_tools;
}
