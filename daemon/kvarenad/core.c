// SPDX-License-Identifier: MIT
/*
 * core.c - the orchestrator's life and its job API (kvd.h): loading the
 * model and tokenizer, creating the arena, starting the workers and the
 * scheduler thread; then jobs: admission checks at submit, and each job's
 * event queue from the scheduler thread to the HTTP connection's thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "callsyntax.h"
#include "hooks.h"
#include "internal.h"
#include "log.h"

struct kvd_qev {
	struct kvd_event ev;
	struct kvd_qev *next;
	char *text;
	struct kvd_top_logprob *top;
	char *top_text;
	char session_id[40];
	struct kvd_tool_run tool_run;
	char *tool_strings;		/* name, arguments, output */
};

uint64_t kvd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kvd_wake(struct kvd *d)
{
	uint64_t one = 1;

	if (write(d->wake_fd, &one, sizeof(one)) < 0)
		return;		/* the counter is saturated: a wake-up is pending */
}

/* ---- event queue -------------------------------------------------------- */

static void qev_free(struct kvd_qev *q)
{
	if (!q)
		return;
	free(q->text);
	free(q->top);
	free(q->top_text);
	free(q->tool_strings);
	free(q);
}

/* kvd_job_next_any's: rung by a push to any of its jobs. */
struct kvd_waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int rung;
};

/*
 * The scheduler thread, while its turn holds d->lock: a consumer woken
 * there (an HTTP thread, by an eventfd write) preempted the lock's holder
 * and then waited for the lock (woken per token, 7% of the scheduler's
 * CPU in a 100-agent pilot). The turn lists the jobs instead, each once,
 * referenced, and wakes their consumers once it has let go.
 */
static __thread struct kvd *wakes_of;

void kvd_wakes_defer(struct kvd *d, int on)
{
	wakes_of = on ? d : NULL;
}

/* 1: j's consumer is woken at the turn's end (qlock and d->lock held) */
static int wake_later(struct kvd_job *j)
{
	struct kvd *d = wakes_of;

	if (!d || d != j->d)
		return 0;
	if (j->wake_queued)
		return 1;
	if (d->n_wakes == d->cap_wakes) {
		uint32_t cap = d->cap_wakes ? d->cap_wakes * 2 : 64;
		struct kvd_job **w = realloc(d->wakes, cap * sizeof(*w));

		if (!w)
			return 0;	/* woken now, then */
		d->wakes = w;
		d->cap_wakes = cap;
	}
	d->wakes[d->n_wakes++] = j;
	j->refs++;
	j->wake_queued = 1;
	return 1;
}

/* d->lock not held: the list is the scheduler thread's alone */
void kvd_wakes_flush(struct kvd *d)
{
	uint32_t i;

	for (i = 0; i < d->n_wakes; i++) {
		struct kvd_job *j = d->wakes[i];

		pthread_mutex_lock(&j->qlock);
		j->wake_queued = 0;
		/* nothing left: its consumer drained the queue meanwhile */
		if (j->notify && j->q_head)
			j->notify(j->notify_arg);
		pthread_mutex_unlock(&j->qlock);
	}
}

/* d->lock held again: the list's references go */
void kvd_wakes_done(struct kvd *d)
{
	uint32_t i;

	for (i = 0; i < d->n_wakes; i++)
		kvd_job_put(d->wakes[i]);
	d->n_wakes = 0;
}

static void job_push(struct kvd_job *j, struct kvd_qev *q)
{
	int was_empty;

	pthread_mutex_lock(&j->qlock);
	if (j->q_closed) {
		pthread_mutex_unlock(&j->qlock);
		qev_free(q);
		return;
	}
	if (q->ev.type == KVD_EV_DONE || q->ev.type == KVD_EV_ERROR)
		j->q_closed = 1;
	was_empty = !j->q_head;
	if (j->q_tail)
		j->q_tail->next = q;
	else
		j->q_head = q;
	j->q_tail = q;
	pthread_cond_signal(&j->qcond);
	if (j->waiter) {
		pthread_mutex_lock(&j->waiter->lock);
		j->waiter->rung = 1;
		pthread_cond_signal(&j->waiter->cond);
		pthread_mutex_unlock(&j->waiter->lock);
	}
	/* an event loop's consumer drains the queue before it sleeps: only
	 * the first event of a batch has to wake it */
	if (was_empty && j->notify && !wake_later(j))
		j->notify(j->notify_arg);
	pthread_mutex_unlock(&j->qlock);
}

void kvd_job_set_notify(struct kvd_job *j, void (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&j->qlock);
	j->notify = fn;
	j->notify_arg = arg;
	if (fn && j->q_head)
		fn(arg);
	pthread_mutex_unlock(&j->qlock);
}

/* The job's last event: allocated at submit, so a request always ends
 * with DONE or ERROR, whatever memory is left then. */
static struct kvd_qev *end_event(struct kvd_job *j)
{
	struct kvd_qev *q = j->end_ev;

	j->end_ev = NULL;
	return q ? q : calloc(1, sizeof(*q));
}

/* An event that could not be made: the reply is not whole, and its end
 * says so (kvd_job_emit_done) instead of a DONE over a reply with a hole. */
static void event_lost(struct kvd_job *j, struct kvd_qev *q)
{
	qev_free(q);
	j->lost_event = 1;
}

void kvd_job_emit_token(struct kvd_job *j, const char *text, size_t n, int32_t tok,
			float lp, const struct kvd_top *top, uint32_t n_top)
{
	struct kvd_qev *q = calloc(1, sizeof(*q));
	uint32_t i;
	size_t off = 0;

	if (!q) {
		j->lost_event = 1;
		return;
	}
	q->ev.type = KVD_EV_TOKEN;
	q->text = malloc(n + 1);
	if (!q->text)
		goto fail;
	memcpy(q->text, text, n);
	q->text[n] = 0;
	q->ev.text = q->text;
	q->ev.text_len = n;
	q->ev.token = tok;
	q->ev.logprob = lp;
	if (n_top) {
		q->top = calloc(n_top, sizeof(*q->top));
		q->top_text = malloc((size_t)n_top * 64);
		if (!q->top || !q->top_text)
			goto fail;
		for (i = 0; i < n_top; i++) {
			int r = kve_token_bytes(j->d->tok, top[i].token, q->top_text + off, 64);

			if (r < 0)
				r = 0;
			if (r > 64)
				r = 64;
			q->top[i].token = top[i].token;
			q->top[i].logprob = top[i].logprob;
			q->top[i].text = q->top_text + off;
			q->top[i].text_len = (size_t)r;
			off += 64;
		}
		q->ev.top = q->top;
		q->ev.n_top = n_top;
	}
	job_push(j, q);
	return;
fail:
	event_lost(j, q);
}

void kvd_job_emit_done(struct kvd_job *j, enum kvd_finish f)
{
	struct kvd_qev *q;
	uint64_t now = kvd_now_ns();

	if (j->lost_event) {
		kvd_job_emit_error(j, KVD_ERR_INTERNAL,
				   "out of memory: part of the reply could not be sent");
		return;
	}
	q = end_event(j);
	if (!q)
		return;
	q->ev.type = KVD_EV_DONE;
	q->ev.finish = f;
	q->ev.usage.prompt_tokens = j->n_prompt;
	q->ev.usage.cached_tokens = j->n_cached;
	q->ev.usage.completion_tokens = j->n_gen;
	q->ev.usage.restored_tokens = j->n_restored;
	q->ev.usage.restore_stall_ms = j->stall_ms;
	snprintf(q->session_id, sizeof(q->session_id), "%s", j->sid);
	q->ev.session_id = q->session_id;
	q->ev.stop_seq = j->stop_seq;
	q->ev.ttft_ms = j->t_first ? (double)(j->t_first - j->t_submit) / 1e6 : 0;
	q->ev.total_ms = (double)(now - j->t_submit) / 1e6;
	job_push(j, q);
}

void kvd_job_emit_tool_run(struct kvd_job *j, const struct kvd_tool_run *tr)
{
	struct kvd_qev *q = calloc(1, sizeof(*q));
	size_t nl = strlen(tr->name), off = 0;
	char *s;

	if (!q) {
		j->lost_event = 1;
		return;
	}
	s = malloc(nl + tr->arguments_len + tr->output_len + 3);
	if (!s) {
		event_lost(j, q);
		return;
	}
	q->tool_strings = s;
	q->tool_run = *tr;
	memcpy(s, tr->name, nl + 1);
	q->tool_run.name = s;
	off = nl + 1;
	memcpy(s + off, tr->arguments, tr->arguments_len);
	s[off + tr->arguments_len] = 0;
	q->tool_run.arguments = s + off;
	off += tr->arguments_len + 1;
	memcpy(s + off, tr->output, tr->output_len);
	s[off + tr->output_len] = 0;
	q->tool_run.output = s + off;
	q->ev.type = KVD_EV_TOOL_RUN;
	q->ev.tool_run = &q->tool_run;
	job_push(j, q);
}

void kvd_job_emit_error(struct kvd_job *j, enum kvd_err_kind kind, const char *msg)
{
	struct kvd_qev *q = end_event(j);

	if (!q)
		return;
	q->ev.type = KVD_EV_ERROR;
	q->ev.err.kind = kind;
	snprintf(q->ev.err.message, sizeof(q->ev.err.message), "%s", msg);
	q->ev.total_ms = (double)(kvd_now_ns() - j->t_submit) / 1e6;
	job_push(j, q);
}

int kvd_job_next(struct kvd_job *j, struct kvd_event *ev, int timeout_ms)
{
	struct timespec dl;
	int rc = 0;

	pthread_mutex_lock(&j->qlock);
	qev_free(j->cur);
	j->cur = NULL;
	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	while (!j->q_head && timeout_ms != 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&j->qcond, &j->qlock);
		else if (pthread_cond_timedwait(&j->qcond, &j->qlock, &dl) == ETIMEDOUT)
			break;
	}
	if (j->q_head) {
		j->cur = j->q_head;
		j->q_head = j->cur->next;
		if (!j->q_head)
			j->q_tail = NULL;
		*ev = j->cur->ev;
		rc = 1;
	}
	pthread_mutex_unlock(&j->qlock);
	return rc;
}

/* Takes the next event of j when there is one (never waits). */
static int job_take(struct kvd_job *j, struct kvd_event *ev)
{
	int rc = 0;

	pthread_mutex_lock(&j->qlock);
	qev_free(j->cur);
	j->cur = NULL;
	if (j->q_head) {
		j->cur = j->q_head;
		j->q_head = j->cur->next;
		if (!j->q_head)
			j->q_tail = NULL;
		*ev = j->cur->ev;
		rc = 1;
	}
	pthread_mutex_unlock(&j->qlock);
	return rc;
}

static void set_waiter(struct kvd_job *const *jobs, unsigned n, struct kvd_waiter *w)
{
	for (unsigned i = 0; i < n; i++) {
		pthread_mutex_lock(&jobs[i]->qlock);
		jobs[i]->waiter = w;
		pthread_mutex_unlock(&jobs[i]->qlock);
	}
}

int kvd_job_next_any(struct kvd_job *const *jobs, unsigned n, struct kvd_event *ev,
		     unsigned *which, int timeout_ms)
{
	struct kvd_waiter w = { .rung = 0 };
	pthread_condattr_t ca;
	struct timespec dl;
	int rc = 0;

	if (n == 1) {
		*which = 0;
		return kvd_job_next(jobs[0], ev, timeout_ms);
	}
	pthread_mutex_init(&w.lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cond, &ca);
	pthread_condattr_destroy(&ca);
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	/* the waiter first: a push after the checks below rings it */
	set_waiter(jobs, n, &w);
	for (;;) {
		for (unsigned i = 0; i < n && !rc; i++)
			if (job_take(jobs[i], ev)) {
				*which = i;
				rc = 1;
			}
		if (rc)
			break;
		pthread_mutex_lock(&w.lock);
		while (!w.rung && timeout_ms != 0) {
			if (timeout_ms < 0)
				pthread_cond_wait(&w.cond, &w.lock);
			else if (pthread_cond_timedwait(&w.cond, &w.lock, &dl) == ETIMEDOUT)
				break;
		}
		if (!w.rung) {
			pthread_mutex_unlock(&w.lock);
			break;
		}
		w.rung = 0;
		pthread_mutex_unlock(&w.lock);
	}
	set_waiter(jobs, n, NULL);
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

void kvd_job_cancel(struct kvd_job *j)
{
	struct kvd *d = j->d;

	pthread_mutex_lock(&d->lock);
	j->cancelled = 1;
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
}

static void job_destroy(struct kvd_job *j)
{
	struct kvd_qev *q, *n;
	uint32_t i;

	for (q = j->q_head; q; q = n) {
		n = q->next;
		qev_free(q);
	}
	qev_free(j->cur);
	qev_free(j->end_ev);
	for (i = 0; i < KVD_MAX_STOP; i++)
		free(j->stop[i]);
	kvd_piece_free(&j->piece);
	free(j->tool_text);
	free(j->tool_markup);
	free(j->session_key);
	kvd_sampling_free(j);
	free(j->c_json);
	free(j->c_name);
	free(j->hist);
	free(j->gen);
	free(j->kv_payload);
	if (j->fork_of)		/* with d->lock held, as every put */
		kvd_job_put(j->fork_of);
	pthread_mutex_destroy(&j->qlock);
	pthread_cond_destroy(&j->qcond);
	free(j);
}

/* Called with d->lock held. */
void kvd_job_put(struct kvd_job *j)
{
	if (--j->refs == 0)
		job_destroy(j);
}

void kvd_job_free(struct kvd_job *j)
{
	struct kvd *d = j->d;

	kvd_job_set_notify(j, NULL, NULL);	/* the scheduler may still push */
	pthread_mutex_lock(&d->lock);
	j->cancelled = 1;
	kvd_job_put(j);
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
}

/* ---- submission ---------------------------------------------------------- */

static void set_err(struct kvd_error *e, enum kvd_err_kind k, const char *param,
		    const char *code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void set_err(struct kvd_error *e, enum kvd_err_kind k, const char *param,
		    const char *code, const char *fmt, ...)
{
	va_list ap;

	memset(e, 0, sizeof(*e));
	e->kind = k;
	e->param = param;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

/* Token bucket per tenant: tokens_per_min refilled continuously. */
static int tenant_budget_ok(struct kvd *d, uint32_t id, uint32_t *retry_s)
{
	const struct kvd_tenant_cfg *t;
	uint32_t tenant = kvd_tenant_slot(d, id);	/* the arrays' index */
	uint64_t now = kvd_now_ns();
	double cap, rate;

	if (!tenant)
		return 1;
	t = &d->cfg.tenants[tenant - 1];
	if (!t->tokens_per_min)
		return 1;
	cap = (double)t->tokens_per_min;
	rate = cap / 60e9;
	if (!d->tenant_refill_ns[tenant]) {
		d->tenant_tokens[tenant] = cap;
	} else {
		d->tenant_tokens[tenant] += rate * (double)(now - d->tenant_refill_ns[tenant]);
		if (d->tenant_tokens[tenant] > cap)
			d->tenant_tokens[tenant] = cap;
	}
	d->tenant_refill_ns[tenant] = now;
	if (d->tenant_tokens[tenant] > 0)
		return 1;
	*retry_s = (uint32_t)(-d->tenant_tokens[tenant] / rate / 1e9) + 1;
	return 0;
}

/* Charges a finished request's tokens to its tenant's bucket (it may go
 * negative: the next request then waits for the refill). */
void kvd_tenant_charge(struct kvd *d, uint32_t id, uint32_t tokens)
{
	uint32_t tenant = kvd_tenant_slot(d, id);

	if (!tenant || !d->cfg.tenants[tenant - 1].tokens_per_min)
		return;
	if (!d->tenant_refill_ns[tenant]) {
		d->tenant_tokens[tenant] = (double)d->cfg.tenants[tenant - 1].tokens_per_min;
		d->tenant_refill_ns[tenant] = kvd_now_ns();
	}
	d->tenant_tokens[tenant] -= tokens;
}

/* FNV-1a of the spec, for the workers' matcher caches. */
static uint64_t spec_hash(const struct kvd_constraint *c)
{
	uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)c->kind ^ ((uint64_t)c->max_calls << 8) ^
		     ((uint64_t)!!c->lazy << 40);
	size_t i;

	for (i = 0; i < c->json_len; i++)
		h = (h ^ (uint8_t)c->json[i]) * 0x100000001b3ull;
	for (i = 0; c->tool_name && c->tool_name[i]; i++)
		h = (h ^ (uint8_t)c->tool_name[i]) * 0x100000001b3ull;
	return h;
}

/* Compiles the request's constraint once here, so that what the compiler
 * does not support is a 400 naming it, not a failed step later. */
static int check_constraint(struct kvd *d, const struct kvd_constraint *c,
			    struct kvd_job *j, struct kvd_error *err)
{
	static const enum kvc_kind kinds[] = { 0, KVC_TOOL_CALLS, KVC_JSON_OBJECT,
					       KVC_JSON_SCHEMA };
	struct kvc_spec sp = { 0 };
	struct kvc_call_syntax y;
	struct kvc_grammar *g = NULL;
	char msg[200] = "";
	int rc;

	if (c->kind == KVD_CONSTRAIN_NONE)
		return 0;
	if ((unsigned)c->kind > KVD_CONSTRAIN_JSON_SCHEMA || !d->cvocab ||
	    c->json_len > KVC_MAX_SPEC_BYTES) {
		set_err(err, KVD_ERR_INVALID, "response_format", NULL,
			"this constraint cannot be served");
		return -EINVAL;
	}
	sp.kind = kinds[c->kind];
	sp.json = c->json;
	sp.json_len = c->json_len;
	sp.tool_name = c->tool_name;
	sp.max_calls = c->max_calls;
	if (sp.kind == KVC_TOOL_CALLS)	/* the family's call syntax, as the workers' */
		kvd_call_syntax(d->chat, &sp, &y);
	rc = kvc_compile(d->cvocab, &sp, &g, msg, sizeof(msg));
	if (rc) {
		set_err(err, KVD_ERR_INVALID,
			c->kind == KVD_CONSTRAIN_TOOLS ? "tools" : "response_format",
			"unsupported_schema", "%s", msg[0] ? msg : strerror(-rc));
		return rc;
	}
	kvc_grammar_release(g);
	j->cw.kind = (uint32_t)c->kind;
	j->cw.flags = (c->lazy ? KVD_CONSTRAINT_LAZY : 0) |
		      (j->s.close_in_budget ? KVD_CONSTRAINT_BUDGET : 0);
	j->cw.max_calls = c->max_calls;
	j->cw.json_len = (uint32_t)c->json_len;
	j->cw.hash = spec_hash(c);
	j->c_json = malloc(c->json_len + 1);
	if (!j->c_json)
		return -ENOMEM;
	if (c->json_len)
		memcpy(j->c_json, c->json, c->json_len);
	j->c_json[c->json_len] = 0;
	if (c->tool_name) {
		j->c_name = strdup(c->tool_name);
		if (!j->c_name)
			return -ENOMEM;
		j->cw.name_len = (uint32_t)strlen(c->tool_name);
	}
	return 0;
}

/* The request gives up the conversation it claimed (or made) at submit. */
static void unclaim(struct kvd *d, struct kvd_job *j)
{
	struct kvd_conv *c = j->conv;

	j->conv = NULL;
	if (!c)
		return;
	if (!c->n_tokens)
		kvd_conv_free(d, c);
	else
		kvd_conv_release(d, c);
}

static uint64_t key_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (s && *s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
	return kvd_mix64(h);
}

/*
 * Submission, in the caller's thread: the conversation the prompt
 * continues is found and claimed under the lock (a hash probe per
 * candidate prefix, conv.c), the new text is tokenized with the lock
 * dropped, the limits are checked on the real token count, and the job
 * is queued. Nothing here scans other conversations or tokenizes while
 * holding the lock.
 */
int kvd_job_submit(struct kvd *d, const struct kvd_request *r, struct kvd_job **jobp,
		   struct kvd_error *err)
{
	struct kvd_cand cand[KVD_MAX_CANDS];
	struct kvd_markup pm = { r->markup, r->n_markup, 0 };
	struct kvd_job *j;
	struct kvd_conv *c;
	uint32_t i, retry = 1, n_cand, n0, total, bt = d->geom.block_tokens, slot;
	size_t l0;
	int rc, n;

	memset(err, 0, sizeof(*err));
	if (!r->model || strcmp(r->model, d->cfg.model_id)) {
		set_err(err, KVD_ERR_NOT_FOUND, "model", "model_not_found",
			"The model '%s' does not exist; this server serves '%s'",
			r->model ? r->model : "", d->cfg.model_id);
		return -ENOENT;
	}
	if (!r->prompt || !r->prompt_len) {
		set_err(err, KVD_ERR_INVALID, "messages", NULL, "empty prompt");
		return -EINVAL;
	}
	/* the markup spans, checked before they are used (the tokens are
	 * counted once, on the text the conversation does not hold yet) */
	for (i = 0; r->markup && i < r->n_markup; i++)
		if (r->markup[i].off > r->prompt_len ||
		    r->markup[i].len > r->prompt_len - r->markup[i].off ||
		    (i && r->markup[i].off < r->markup[i - 1].off + r->markup[i - 1].len)) {
			set_err(err, KVD_ERR_INVALID, "messages", NULL,
				"the prompt's markup spans are out of order or outside it");
			return -EINVAL;
		}
	j = calloc(1, sizeof(*j));
	if (!j)
		goto nomem;
	pthread_mutex_init(&j->qlock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&j->qcond, &ca);
		pthread_condattr_destroy(&ca);
	}
	j->d = d;
	j->end_ev = calloc(1, sizeof(*j->end_ev));
	if (!j->end_ev) {
		j->refs = 1;
		job_destroy(j);
		goto nomem;
	}
	j->seq_id = __atomic_add_fetch(&d->next_seq_id, 1, __ATOMIC_RELAXED);
	j->refs = 2;
	j->worker = -1;
	j->tenant = r->tenant;
	j->s = r->s;
	/* prompt_cache_key / user: a routing hint, never a conversation's
	 * name (issue 36.2): it selects nothing here */
	j->route_hint = r->session_key && *r->session_key ? key_hash(r->session_key) : 0;
	if (r->session_key && *r->session_key && !(j->session_key = strdup(r->session_key)))
		goto nomem_job;
	for (i = 0; i < r->s.n_stop && i < KVD_MAX_STOP; i++) {
		j->stop[i] = strdup(r->s.stop[i]);
		if (!j->stop[i])
			goto nomem_job;
		j->s.stop[i] = j->stop[i];
	}
	j->s.n_stop = i;
	if (r->s.has_seed) {
		j->rng = kve_rng_seed(r->s.seed);
	} else {
		uint64_t seed = 0;

		if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
			seed = kvd_now_ns();
		j->rng = kve_rng_seed(seed);
	}
	snprintf(j->request_id, sizeof(j->request_id), "%s",
		 r->request_id ? r->request_id : "-");
	j->s.logit_bias = NULL;		/* the request's; sampling.c keeps a copy */
	n = kvd_sampling_setup(d, j, &r->s, err);
	if (n == -ENOMEM)
		goto nomem_job;
	if (n || check_constraint(d, &r->c, j, err)) {
		j->refs = 1;
		job_destroy(j);
		return -EINVAL;
	}
	j->t_submit = kvd_now_ns();
	/* prefixes that may be a conversation's whole text; at least one
	 * byte of the prompt must be new (its last token gives the logits) */
	n_cand = kvd_conv_candidates(d, r->tenant, r->prompt, r->prompt_len - 1, cand,
				     KVD_MAX_CANDS);

	pthread_mutex_lock(&d->lock);
	if (d->stopping || !d->ready) {
		pthread_mutex_unlock(&d->lock);
		set_err(err, KVD_ERR_UNAVAILABLE, NULL, NULL,
			d->stopping ? "the server is shutting down" : "the server is starting");
		goto reject;
	}
	if (d->n_queued >= d->cfg.max_queue) {
		d->m.requests_rejected++;
		pthread_mutex_unlock(&d->lock);
		set_err(err, KVD_ERR_BUSY, NULL, "server_busy",
			"%u requests are already waiting; retry later", d->cfg.max_queue);
		err->retry_after_s = 1;
		goto reject;
	}
	if (!tenant_budget_ok(d, r->tenant, &retry)) {
		d->m.requests_rejected++;
		pthread_mutex_unlock(&d->lock);
		set_err(err, KVD_ERR_QUOTA, NULL, "rate_limit_exceeded",
			"tenant token budget (%llu tokens per minute) used up",
			(unsigned long long)d->cfg.tenants[kvd_tenant_slot(d, r->tenant) - 1].tokens_per_min);
		err->retry_after_s = retry;
		goto reject;
	}
	/* server-side tools: only those offered to a tenant allowed them */
	if (r->server_tools && d->agent &&
	    (!d->cfg.n_tenants || (kvd_tenant_slot(d, r->tenant) &&
				   d->cfg.tenants[kvd_tenant_slot(d, r->tenant) - 1].server_tools))) {
		/* bit k of the request: the k-th declaration (built-in tools
		 * enabled, then MCP servers' tools); the job keeps the same */
		j->server_tools = r->server_tools & kvd_agent_decl_mask(d);
	}
	c = kvd_conv_claim(d, j, r->prompt, r->markup ? &pm : NULL, cand, n_cand);
	if (!c) {
		c = kvd_conv_new(d, r->tenant);
		if (!c) {
			d->m.requests_rejected++;
			pthread_mutex_unlock(&d->lock);
			set_err(err, KVD_ERR_BUSY, NULL, "server_busy",
				"all %u conversations ([limits] max_sessions) have a request "
				"running; retry later", d->cfg.max_sessions);
			err->retry_after_s = 1;
			goto reject;
		}
		c->job = j;
	}
	j->conv = c;
	snprintf(j->sid, sizeof(j->sid), "%s", c->id);
	n0 = c->n_tokens;
	l0 = c->text_len;
	d->n_queued++;		/* its place in the queue, held while tokenizing */
	pthread_mutex_unlock(&d->lock);

	/* the new text, tokenized without the lock (the conversation is
	 * claimed: nobody else changes it meanwhile) */
	pm.off = l0;
	rc = kvd_piece_make(d, r->prompt + l0, r->prompt_len - l0, !n0, r->markup ? &pm : NULL,
			    &j->piece);
	total = n0 + j->piece.n;
	if (rc) {
		set_err(err, KVD_ERR_INVALID, "messages", NULL, "cannot tokenize the prompt: %s",
			strerror(-rc));
	} else if (total >= d->ctx_len) {
		rc = -E2BIG;
		set_err(err, KVD_ERR_TOO_LONG, "messages", "context_length_exceeded",
			"This model's maximum context length is %u tokens%s; the messages "
			"take %u", d->ctx_len, d->ctx_len < d->model_ctx ?
			" (bounded by the KV arena: [kv] blocks x block_tokens)" : "", total);
	} else if (r->s.max_tokens && (uint64_t)total + r->s.max_tokens > d->ctx_len) {
		rc = -E2BIG;
		set_err(err, KVD_ERR_TOO_LONG, "max_tokens", "context_length_exceeded",
			"This model's maximum context length is %u tokens%s; the messages "
			"take %u and max_tokens asks for %u more", d->ctx_len,
			d->ctx_len < d->model_ctx ?
			" (bounded by the KV arena: [kv] blocks x block_tokens)" : "", total,
			r->s.max_tokens);
	} else if ((slot = kvd_tenant_slot(d, r->tenant)) && d->cfg.tenants[slot - 1].kv_blocks &&
		   (total + 1 + bt - 1) / bt > d->cfg.tenants[slot - 1].kv_blocks) {
		/* never fits: a permanent error, not a 429 to retry */
		rc = -E2BIG;
		set_err(err, KVD_ERR_TOO_LONG, "messages", "context_length_exceeded",
			"The tenant's KV budget ([tenant.%s] kv_blocks = %u, %u tokens) cannot "
			"hold this conversation: the messages take %u tokens",
			d->cfg.tenants[slot - 1].name, d->cfg.tenants[slot - 1].kv_blocks,
			d->cfg.tenants[slot - 1].kv_blocks * bt, total);
	}

	pthread_mutex_lock(&d->lock);
	if (!rc && d->stopping) {
		rc = -ESHUTDOWN;
		set_err(err, KVD_ERR_UNAVAILABLE, NULL, NULL, "the server is shutting down");
	}
	if (rc) {
		d->n_queued--;
		unclaim(d, j);
		pthread_mutex_unlock(&d->lock);
		kvd_piece_free(&j->piece);
		j->refs = 1;
		job_destroy(j);
		return rc == -ENOMEM ? -ENOMEM : rc == -E2BIG ? -E2BIG : -EINVAL;
	}
	if (c->wait_started_ns)
		c->wait_ended_ns = kvd_now_ns();	/* a client's tool returned (admit.c) */
	if (d->jobs_tail)
		d->jobs_tail->next = j;
	else
		d->jobs = j;
	d->jobs_tail = j;
	d->m.requests++;
	/* n > 1: choice 0's job, of this server and tenant (admit.c copies
	 * its prompt KV) */
	if (r->fork_of && r->fork_of->d == d && r->fork_of->tenant == j->tenant) {
		j->fork_of = r->fork_of;
		j->fork_of->refs++;
	}
	kvd_fair_job_added(d, j->tenant);
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
	*jobp = j;
	return 0;
reject:
	j->refs = 1;
	job_destroy(j);
	return -EAGAIN;
nomem_job:
	j->refs = 1;
	job_destroy(j);
nomem:
	set_err(err, KVD_ERR_INTERNAL, NULL, NULL, "out of memory");
	return -ENOMEM;
}

int kvd_session_delete(struct kvd *d, const char *id, uint32_t tenant)
{
	struct kvd_conv *c;
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	c = kvd_conv_find_id(d, id);
	if (!c || c->tenant != tenant) {
		rc = -ENOENT;
	} else if (c->job) {
		/* a step may hold a lease on its blocks: free them when the
		 * step ends (or its worker is killed at lease expiry) */
		c->delete_pending = 1;
		c->job->cancelled = 1;
	} else {
		kvd_conv_free(d, c);
	}
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
	return rc;
}

const char *kvd_model_id(const struct kvd *d)
{
	return d->cfg.model_id;
}

const struct chat_template *kvd_chat_template(const struct kvd *d)
{
	return d->chat;
}

uint32_t kvd_context_len(const struct kvd *d)
{
	return d->ctx_len;
}

uint32_t kvd_vocab_size(const struct kvd *d)
{
	return d->vocab;
}

const char *kvd_system_fingerprint(const struct kvd *d)
{
	return d->fingerprint;
}

int kvd_tokenize(struct kvd *d, const char *text, size_t len, int add_special,
		 int32_t *ids, size_t max)
{
	return kve_tokenize(d->tok, text, len, add_special, ids, max);
}

int kvd_token_piece(struct kvd *d, int32_t id, char *buf, size_t len)
{
	if (id < 0 || (uint32_t)id >= d->vocab)
		return -EINVAL;
	return kve_token_bytes(d->tok, id, buf, len);
}

/* FNV-1a over what decides the numbers a request gets: the model (its id,
 * shape), the KV layout, the engine's kernel set and its numerics
 * revision, and this build's version. */
static void make_fingerprint(struct kvd *d)
{
	char in[512];
	uint64_t h = 0xcbf29ce484222325ull;
	int n = snprintf(in, sizeof(in), "%s|%u|%u|%u|%s|%s|%s|%s", d->cfg.model_id, d->vocab,
			 d->ctx_len, d->cfg.block_tokens, d->cfg.kv_dtype, kve_isa_name(),
			 KVE_NUMERICS, KVD_VERSION);

	for (int i = 0; i < n && i < (int)sizeof(in); i++)
		h = (h ^ (uint8_t)in[i]) * 0x100000001b3ull;
	snprintf(d->fingerprint, sizeof(d->fingerprint), "fp_%010llx",
		 (unsigned long long)(h & 0xffffffffffull));
}

int kvd_ready(const struct kvd *d)
{
	return __atomic_load_n(&d->ready, __ATOMIC_RELAXED) &&
	       !__atomic_load_n(&d->stopping, __ATOMIC_RELAXED);
}

int kvd_health(const struct kvd *d)
{
	if (!kvd_ready(d))
		return -1;
	return __atomic_load_n(&d->health, __ATOMIC_RELAXED);
}

/* ---- life ------------------------------------------------------------------ */

/* The one token s is, with special tokens parsed (-1: none, or several). */
static int32_t single_token(struct kvd *d, const char *s)
{
	struct kve_span all = { 0, s ? strlen(s) : 0 };
	int32_t ids[4];
	int n = s ? kve_tokenize_spans(d->tok, s, all.len, &all, 1, KVE_TOKENIZE_CONT, ids, 4) : 0;

	return n == 1 ? ids[0] : -1;
}

/* The model's family, from its GGUF chat template or [model] chat_template. */
static int open_chat(struct kvd *d, char *err, size_t errlen)
{
	struct chat_options o = { d->cfg.chat_template, d->cfg.tool_open, d->cfg.tool_close };
	size_t len;
	const char *t = kve_model_meta_str(d->model, "tokenizer.chat_template", &len);
	int rc = chat_template_new(t, len, &o, &d->chat, err, errlen);
	const char *const *mk;

	if (rc)
		return rc;
	kvd_log(KVD_LOG_INFO, "core", "chat template: %s (%s)",
		chat_template_family(d->chat), chat_template_why(d->chat));
	/* the family's markers that are control tokens show in the text the
	 * parser reads (the workers' constrained decoding shows the same) */
	for (mk = chat_template_markers(d->chat); *mk; mk++)
		kve_tokenizer_show(d->tok, *mk);
	return 0;
}

static int open_arena(struct kvd *d, char *err, size_t errlen)
{
	struct kve_arena_kv_params p = { 0 };
	int rc;

	if (!strcmp(d->cfg.backend, "kernel"))
		p.backend = KVA_BACKEND_KERNEL;
	else if (!strcmp(d->cfg.backend, "memfd"))
		p.backend = KVA_BACKEND_MEMFD;
	else
		p.backend = KVA_BACKEND_AUTO;
	p.n_blocks = d->cfg.kv_blocks;
	p.block_tokens = d->cfg.block_tokens;
	p.dtype = !strcmp(d->cfg.kv_dtype, "f32") ? KVE_KV_F32 :
		  !strcmp(d->cfg.kv_dtype, "q8_0") ? KVE_KV_Q8_0 : KVE_KV_F16;
	p.name = "kvarenad";
	rc = kve_arena_kv_create(d->model, &p, &d->kv, err, errlen);
	if (rc)
		return rc;
	d->arena = kve_arena_kv_arena(d->kv);
	d->backend = kve_arena_kv_backend(d->kv);
	kve_arena_kv_geom(d->kv, &d->geom);
	d->data_fd = kva_arena_data_fd(d->arena, KVA_EXPORT_CLOEXEC);
	if (d->data_fd < 0) {
		snprintf(err, errlen, "arena data fd: %s", strerror(-d->data_fd));
		return d->data_fd;
	}
	d->block_users = calloc(d->geom.blocks_total, sizeof(*d->block_users));
	if (!d->block_users)
		return -ENOMEM;
	/* a sequence can hold every block of the arena, no more: the context
	 * is bounded by it, so a request that fits the context fits the
	 * arena (alone, after eviction and preemption), and one that does not
	 * is a 400 naming the limit */
	if ((uint64_t)d->geom.blocks_total * d->geom.block_tokens < d->ctx_len)
		d->ctx_len = d->geom.blocks_total * d->geom.block_tokens;
	rc = kva_policy_parse(d->cfg.policy);
	if (rc >= 0)
		rc = kva_arena_set_policy(d->arena, (uint32_t)rc, d->cfg.low_wm, d->cfg.high_wm,
					  d->cfg.ttl_ms);
	if (rc < 0) {
		snprintf(err, errlen, "eviction policy %s: %s", d->cfg.policy, strerror(-rc));
		return rc;
	}
	return 0;
}

/* What kvd_create set up, undone in reverse; a failed create and
 * kvd_destroy end here alike. */
static void release(struct kvd *d)
{
	kvd_tiering_fini(d);	/* before the arena: I/O may still fill blocks */
	kvd_agent_fini(d);
	kvd_remote_fini(d);
	kvd_prefix_fini(d);
	kvd_kstate_fini(d);
	kvd_conv_fini(d);
	free(d->tws_snap);
	free(d->wakes);
	free(d->admit_buf);
	free(d->block_users);
	if (d->data_fd >= 0)
		close(d->data_fd);
	kve_arena_kv_destroy(d->kv);
	kvc_vocab_free(d->cvocab);
	chat_template_free(d->chat);
	kve_tokenizer_free(d->tok);
	kve_model_free(d->model);
	if (d->wake_fd >= 0)
		close(d->wake_fd);
	pthread_cond_destroy(&d->idle_cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

int kvd_create(const struct kvd_config *cfg, const char *self_exe, struct kvd **dp,
	       char *err, size_t errlen)
{
	const struct kve_model_info *mi;
	struct kvd *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	kvd_config_auto(&d->cfg, d->startup_note, sizeof(d->startup_note));
	d->self_exe = self_exe;
	d->data_fd = -1;
	d->remote_lfd = -1;
#ifdef KVD_TEST_HOOKS
	d->test_audit = getenv("KVD_AUDIT") && *getenv("KVD_AUDIT");
#endif
	pthread_mutex_init(&d->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&d->idle_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	d->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake_fd < 0) {
		rc = -errno;
		goto fail;
	}
	/* the sandbox's spawner forks now, while this process is small */
	rc = kvd_agent_init(d, err, errlen);
	if (rc)
		goto fail;
	/* the orchestrator only tokenizes and sizes KV: map the weights
	 * (page cache) instead of a private copy */
	setenv("KVE_WEIGHTS", "mmap", 0);
	d->model = kve_model_load(cfg->model_path, err, errlen);
	unsetenv("KVE_WEIGHTS");
	if (!d->model) {
		rc = -EINVAL;
		goto fail;
	}
	mi = kve_model_info(d->model);
	d->vocab = mi->vocab;
	d->ctx_len = mi->ctx_len;
	d->model_ctx = mi->ctx_len;
	d->tok = kve_tokenizer_create(d->model, err, errlen);
	if (!d->tok) {
		rc = -EINVAL;
		goto fail;
	}
	rc = open_chat(d, err, errlen);
	if (rc)
		goto fail;
	d->eos = kve_tokenizer_eos(d->tok);
	d->eot = single_token(d, chat_template_eog(d->chat)[0]);
	d->eom = chat_template_eog(d->chat)[0] ? single_token(d, chat_template_eog(d->chat)[1]) : -1;
	if (d->eom == d->eot || d->eom == d->eos)
		d->eom = -1;
	make_fingerprint(d);
	d->cvocab = kvc_vocab_create(d->tok, d->vocab, err, errlen);
	if (!d->cvocab) {
		kvd_log(KVD_LOG_WARN, "core", "structured decoding unavailable: %s", err);
		err[0] = 0;
	}
	rc = open_arena(d, err, errlen);
	if (rc)
		goto fail;
	rc = kvd_conv_init(d);
	if (!rc)
		rc = kvd_prefix_init(d);
	if (rc) {
		snprintf(err, errlen, "conversations and prefix cache: %s", strerror(-rc));
		goto fail;
	}
	rc = kvd_tiering_init(d, err, errlen);
	if (rc)
		goto fail;
	rc = kvd_toolwait_state_load(d);
	if (rc) {
		snprintf(err, errlen, "tool-wait table: %s", strerror(-rc));
		goto fail;
	}
	rc = kvd_kstate_init(d);
	if (rc) {
		snprintf(err, errlen, "kernel state path: %s", strerror(-rc));
		goto fail;
	}
	rc = kvd_remote_init(d, err, errlen);
	if (rc)
		goto fail;
	rc = kvd_workers_start(d);
	if (rc) {
		snprintf(err, errlen, "workers: %s", strerror(-rc));
		goto fail;
	}
	rc = pthread_create(&d->sched, NULL, kvd_sched_main, d);
	if (rc) {
		rc = -rc;
		snprintf(err, errlen, "scheduler thread: %s", strerror(-rc));
		kvd_workers_stop(d);
		goto fail;
	}
	*dp = d;
	return 0;
fail:
	if (!err[0])
		snprintf(err, errlen, "%s", strerror(-rc));
	release(d);
	return rc;
}

/*
 * SIGHUP: tenants are who their id (config.c: from the section name) says,
 * whatever their place in the file. A tenant no longer configured loses
 * what it kept here (its conversations, their KV and work directories;
 * its requests still running are cancelled); the others keep theirs, and
 * their budgets follow them to their new place in cfg.tenants.
 */
void kvd_set_tenants(struct kvd *d, const struct kvd_config *cfg)
{
	uint32_t blocks[KVD_MAX_TENANTS + 1] = { 0 }, jobs[KVD_MAX_TENANTS + 1] = { 0 };
	double tokens[KVD_MAX_TENANTS + 1] = { 0 }, vt[KVD_MAX_TENANTS + 1] = { 0 };
	uint64_t refill[KVD_MAX_TENANTS + 1] = { 0 }, served[KVD_MAX_TENANTS + 1] = { 0 };
	struct kvd_conv *c, *next;
	uint32_t i, dropped = 0;
	char err[256];

	pthread_mutex_lock(&d->lock);
	for (c = d->convs; c; c = next) {
		next = c->next;
		for (i = 0; i < cfg->n_tenants && cfg->tenants[i].id != c->tenant; i++)
			;
		if (!c->tenant || i < cfg->n_tenants)
			continue;
		dropped++;
		if (c->job) {
			c->delete_pending = 1;
			c->job->cancelled = 1;
		} else {
			kvd_conv_free(d, c);
		}
	}
	for (i = 0; i < cfg->n_tenants; i++) {
		uint32_t old = kvd_tenant_slot(d, cfg->tenants[i].id);

		if (!old)
			continue;
		blocks[i + 1] = d->tenant_blocks[old];
		tokens[i + 1] = d->tenant_tokens[old];
		refill[i + 1] = d->tenant_refill_ns[old];
		vt[i + 1] = d->tenant_vt[old];
		jobs[i + 1] = d->tenant_jobs[old];
		served[i + 1] = d->m.tenant_tokens[old];
	}
	vt[0] = d->tenant_vt[0];
	jobs[0] = d->tenant_jobs[0];
	served[0] = d->m.tenant_tokens[0];
	d->cfg.n_tenants = cfg->n_tenants;
	memcpy(d->cfg.tenants, cfg->tenants, sizeof(cfg->tenants));
	memcpy(d->tenant_blocks, blocks, sizeof(blocks));
	memcpy(d->tenant_tokens, tokens, sizeof(tokens));
	memcpy(d->tenant_refill_ns, refill, sizeof(refill));
	memcpy(d->tenant_vt, vt, sizeof(vt));
	memcpy(d->tenant_jobs, jobs, sizeof(jobs));
	memcpy(d->m.tenant_tokens, served, sizeof(served));
	/* the eviction policy and the tiers' switches change at run time too */
	if (kvd_tiering_reload(d, cfg, err, sizeof(err)))
		kvd_log(KVD_LOG_ERR, "core", "reload: %s; keeping the running policy", err);
	pthread_mutex_unlock(&d->lock);
	if (dropped)
		kvd_log(KVD_LOG_INFO, "core", "reload: %u conversation(s) of tenants no longer configured released",
			dropped);
	kvd_wake(d);
}

int kvd_drain(struct kvd *d, int timeout_ms)
{
	uint64_t end = kvd_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int busy;

	pthread_mutex_lock(&d->lock);
	d->stopping = 1;
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct kvd_job *j;
		struct timespec ts;

		busy = 0;
		for (j = d->jobs; j; j = j->next)
			if (j->state != JOB_FINISHED)
				busy++;
		if (!busy || kvd_now_ns() >= end)
			break;
		ts.tv_sec = (time_t)(end / 1000000000ull);
		ts.tv_nsec = (long)(end % 1000000000ull);
		pthread_cond_timedwait(&d->idle_cond, &d->lock, &ts);
	}
	pthread_mutex_unlock(&d->lock);
	return busy ? -ETIMEDOUT : 0;
}

void kvd_destroy(struct kvd *d)
{
	struct kvd_job *j;

	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stopping = 1;
	d->stop_now = 1;
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
	pthread_join(d->sched, NULL);
	kvd_agent_stop(d);	/* running tools finish; then no thread holds a job */
	kvd_workers_stop(d);
	kvd_toolwait_state_snap(d, kvd_now_ns(), 1);	/* the waits since the last copy */
	kvd_toolwait_state_flush(d);
	/* jobs still held by the scheduler: their API side is gone by now */
	while ((j = d->jobs)) {
		d->jobs = j->next;
		kvd_job_put(j);
	}
	while (d->convs)
		kvd_conv_free(d, d->convs);
	release(d);
}
