// SPDX-License-Identifier: MIT
/*
 * test_orch.c - kvarenad's orchestrator end to end without HTTP: real
 * worker processes (this binary re-executed with --worker), the real CPU
 * engine, a real arena (memfd on the host; kvarena.ko in a guest with
 * KVD_TEST_BACKEND=kernel). Checks: greedy output equal to the engine's
 * own; the next turn prefills only its new tokens; two conversations
 * share a system prompt's blocks; a second choice (n > 1) copies the
 * first one's partial block and computes only the last prompt token;
 * copy hand-off counts its bytes and the arena hand-off counts 0; an
 * arena too small for the conversations
 * evicts and recomputes with unchanged outputs; a decode worker killed
 * mid-stream (and one stopped past its KV lease) is replaced and the
 * request still completes; the CPU engine loaded as a plugin .so gives
 * the same tokens; DELETE releases a session; drain finishes running work.
 *
 * usage: test_orch MODEL [PLUGIN.so]
 * The scheduler (issue 34): every path's outputs equal the one-at-a-time
 * reference (chunked, mixed, several prompts per step, steps in flight,
 * shared stages); preemption then recompute; a worker killed 10 times in
 * a row recovers; a worker stuck mid-message freezes nothing; two
 * tenants' floods get their weights; 100 conversations with one system
 * prompt compute it once and prefill on two workers at once; session keys
 * are a routing hint only (36.2); a prompt that can never fit is a 400;
 * a failing batch charges only the sequence at fault (bisection); the
 * radix index's chains never name a node their conversation does not hold.
 *
 * KVD_TEST_ONLY=name,name runs some (greedy_and_turns, prefix_sharing, fork,
 * copy_mode, pressure, dropped_events, worker_death, plugin, paths,
 * preempt, preempt_cached, readmit_first, route_order, constrained_long,
 * admission, worker_storm, stall, fairness, shared_start, session_keys,
 * never_fits, index_chain, cache_batches, bisect, utf8_clean, stop_in_token, spm_turns,
 * program_fcfs, prefill_ahead, program_chunks, end_of_turn, worker_fd0, and
 * with the hooks reserve_fail, room_edge, reserve_in_flight, lost_in_turn, round_edges,
 * round_restore_waits, expire_claimed, queued_kv_line, queued_kv_tenants,
 * queued_kv_grow, agent_loop, escape, mcp_servers, mcp_restart).
 * KVD_TEST_FAIL_FAST=1 exits at the first failed check (the mutation lane).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"
#include "kvsandbox.h"
#include "log.h"
#include "test_hold.h"
#include "test_run.h"
#include "test_worker.h"

static int pass, failed;
static const char *model_path, *plugin_path;
static char self[PATH_MAX];

/* KVD_TEST_FAIL_FAST=1 (the mutation lane): exit at the first failure */
#define CHECK(cond, ...) do { \
	if (cond) { pass++; printf("ok   "); } \
	else { failed++; printf("FAIL %s:%d ", __FILE__, __LINE__); } \
	printf(__VA_ARGS__); printf("\n"); fflush(stdout); \
	if (failed && getenv("KVD_TEST_FAIL_FAST")) _exit(1); } while (0)

struct reply {
	char text[8192];
	size_t len;
	int32_t tokens[1024];
	uint32_t n_tokens;
	struct kvd_usage usage;
	enum kvd_finish finish;
	int error, done;
	enum kvd_err_kind err_kind;
	char err[256];
	char session[40];
};

static void base_config(struct kvd_config *c)
{
	kvd_config_defaults(c);
	snprintf(c->model_path, sizeof(c->model_path), "%s", model_path);
	snprintf(c->model_id, sizeof(c->model_id), "test");
	snprintf(c->backend, sizeof(c->backend), "%s",
		 getenv("KVD_TEST_BACKEND") ? getenv("KVD_TEST_BACKEND") : "memfd");
	c->kv_blocks = 256;
	c->toolwait_bpf = 0;
	c->log_level = KVD_LOG_WARN;
	if (getenv("KVD_TEST_LEASE_MS"))
		c->lease_ms = (uint32_t)atoi(getenv("KVD_TEST_LEASE_MS"));
}

/* Two tenants, ids 1 and 2. */
static void two_tenants(struct kvd_config *c, const char *a, const char *b)
{
	c->n_tenants = 2;
	snprintf(c->tenants[0].name, sizeof(c->tenants[0].name), "%s", a);
	snprintf(c->tenants[1].name, sizeof(c->tenants[1].name), "%s", b);
	c->tenants[0].id = 1;
	c->tenants[1].id = 2;
}

static struct kvd *start(const struct kvd_config *c)
{
	char err[256] = "";
	struct kvd *d = NULL;
	int i;

	if (kvd_create(c, self, &d, err, sizeof(err))) {
		printf("kvd_create: %s\n", err);
		return NULL;
	}
	for (i = 0; i < 3000 && !kvd_ready(d); i++) {
		struct timespec ts = { 0, 10000000 };

		nanosleep(&ts, NULL);	/* workers load the model */
	}
	return d;
}

/* One request: tenant, session key (a routing hint) and sampling. */
struct rq {
	const char *prompt;
	float temp;
	uint64_t seed;
	uint32_t max_tokens;
	uint32_t tenant;
	const char *key;
	const char *stop;		/* one stop sequence, or NULL */
};

/* A request for the test model: greedy, seed 1, top_p off. */
static void request_init(struct kvd_request *rq, const char *prompt, uint32_t max_tokens)
{
	memset(rq, 0, sizeof(*rq));
	rq->model = "test";
	rq->prompt = prompt;
	rq->prompt_len = strlen(prompt);
	rq->s.top_p = 1;
	rq->s.seed = 1;
	rq->s.has_seed = 1;
	rq->s.max_tokens = max_tokens;
}

static struct kvd_job *submit(struct kvd *d, const struct rq *q, struct kvd_error *err)
{
	struct kvd_request rq;
	struct kvd_job *j = NULL;

	request_init(&rq, q->prompt, q->max_tokens);
	rq.s.temperature = q->temp;
	rq.s.seed = q->seed;
	rq.tenant = q->tenant;
	rq.session_key = q->key;
	if (q->stop) {
		rq.s.n_stop = 1;
		rq.s.stop[0] = q->stop;
	}
	if (kvd_job_submit(d, &rq, &j, err))
		return NULL;
	return j;
}

/* Events to the end; frees the job. */
static int collect_reply(struct kvd *d, struct kvd_job *j, struct reply *r,
			 void (*mid)(struct kvd *, int))
{
	struct kvd_event ev;
	int n = 0;

	while (kvd_job_next(j, &ev, 120000) == 1) {
		if (ev.type == KVD_EV_TOKEN) {
			if (ev.token >= 0 && r->n_tokens < 1024)
				r->tokens[r->n_tokens++] = ev.token;
			if (r->len + ev.text_len < sizeof(r->text)) {
				memcpy(r->text + r->len, ev.text, ev.text_len);
				r->len += ev.text_len;
			}
			if (mid)
				mid(d, ++n);
		} else if (ev.type == KVD_EV_DONE) {
			r->usage = ev.usage;
			r->finish = ev.finish;
			snprintf(r->session, sizeof(r->session), "%s", ev.session_id);
			r->done = 1;
			break;
		} else {
			snprintf(r->err, sizeof(r->err), "%s", ev.err.message);
			r->err_kind = ev.err.kind;
			r->error = 1;
			break;
		}
	}
	if (!r->done && !r->error) {
		snprintf(r->err, sizeof(r->err), "no answer in 120 s");
		r->error = 1;
	}
	kvd_job_free(j);
	return r->error ? -1 : 0;
}

static int ask_rq(struct kvd *d, const struct rq *q, struct reply *r,
		  void (*mid)(struct kvd *, int))
{
	struct kvd_error err;
	struct kvd_job *j;

	memset(r, 0, sizeof(*r));
	j = submit(d, q, &err);
	if (!j) {
		printf("submit: %s\n", err.message);
		snprintf(r->err, sizeof(r->err), "%s", err.message);
		r->error = 1;
		r->err_kind = err.kind;
		return -1;
	}
	return collect_reply(d, j, r, mid);
}

static int ask(struct kvd *d, const char *prompt, float temp, uint64_t seed,
	       uint32_t max_tokens, struct reply *r, void (*mid)(struct kvd *, int))
{
	struct rq q = { prompt, temp, seed, max_tokens, 0, NULL, NULL };

	return ask_rq(d, &q, r, mid);
}

static int same_tokens(const struct reply *a, const struct reply *b)
{
	return !a->error && !b->error && a->n_tokens == b->n_tokens &&
	       !memcmp(a->tokens, b->tokens, a->n_tokens * sizeof(a->tokens[0]));
}

/* The engine alone over token ids (the prompt's, or a conversation's
 * own): prefill, greedy decode of up to n tokens into out. */
static int engine_greedy_ids(const int32_t *ids, uint32_t n_ids, uint32_t n, int32_t *out)
{
	char err[256];
	struct kve_model *m = kve_model_load(model_path, err, sizeof(err));
	struct kve_tokenizer *t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	struct kve_arena_kv_params p = { .backend = KVA_BACKEND_MEMFD, .n_blocks = 64,
					  .dtype = KVE_KV_F16 };
	struct kve_arena_kv *kv = NULL;
	struct kve_arena_session as;
	struct kve_engine_params ep = { .n_threads = 1, .max_batch = 1 };
	struct kve_engine *e = NULL;
	int32_t next;
	float *lg = NULL;
	uint32_t i, vocab;
	int got = 0;

	if (!t || !n_ids || kve_arena_kv_create(m, &p, &kv, err, sizeof(err)))
		goto out;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	vocab = kve_model_info(m)->vocab;
	lg = malloc(vocab * sizeof(float));
	if (!e || !lg || kve_arena_session_open(kv, 1, 1024, &as))
		goto out;
	if (kve_arena_prefill(e, kv, &as, ids, n_ids, lg))
		goto close;
	for (i = 0; i < n; i++) {
		struct kve_sampler sm = { 0, 0, 1, 0, 0 };
		struct kve_arena_session *ap = &as;

		next = kve_sample(&sm, lg, vocab, NULL);
		out[got++] = next;
		if (next == kve_tokenizer_eos(t))
			break;
		if (i + 1 < n && kve_arena_decode(e, kv, &ap, &next, 1, lg))
			break;
	}
close:
	kve_arena_session_close(kv, &as);
out:
	free(lg);
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	kve_tokenizer_free(t);
	kve_model_free(m);
	return got;
}

/* The engine alone: tokenize with BOS, prefill, greedy decode. */
static int engine_greedy(const char *prompt, uint32_t n, int32_t *out)
{
	char err[256];
	struct kve_model *m = kve_model_load(model_path, err, sizeof(err));
	struct kve_tokenizer *t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	int32_t ids[2048];
	int nt = t ? kve_tokenize(t, prompt, strlen(prompt), 1, ids, 2048) : -1;

	kve_tokenizer_free(t);
	kve_model_free(m);
	return nt > 0 ? engine_greedy_ids(ids, (uint32_t)nt, n, out) : 0;
}

static uint64_t metric(struct kvd *d, const char *name)
{
	char *txt = kvd_metrics_text(d), *p;
	uint64_t v = UINT64_MAX;
	size_t n = strlen(name);

	for (p = txt; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ') {
			v = strtoull(p + n + 1, NULL, 10);
			break;
		}
	free(txt);
	return v;
}

static const char *sys_prompt;
static const char *sys_prompt_long =
	"<|im_start|>system\nYou are a careful assistant that runs tools for "
	"the user. You may call calc for arithmetic, read_file to read a file "
	"and list_dir to list a directory. Answer briefly and use tool results "
	"exactly as given. Never invent a file's contents.<|im_end|>\n";
/* TCG guests are slow: a shorter one there (still two full blocks) */
static const char *sys_prompt_short =
	"<|im_start|>system\nYou run tools: calc, read_file, list_dir.<|im_end|>\n";

static void test_greedy_and_turns(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply r1, r2;
	int32_t want[64];
	char prompt[4096], next[8192];
	int n, same = 1;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts with 1 prefill + 1 decode worker (%s backend)", d && d->backend == KVA_BACKEND_KERNEL ? "kernel" : "memfd");
	if (!d)
		return;
	snprintf(prompt, sizeof(prompt), "%s<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	CHECK(ask(d, prompt, 0, 1, 24, &r1, NULL) == 0, "greedy completion: %u tokens",
	      r1.n_tokens);
	n = engine_greedy(prompt, 24, want);
	for (int i = 0; i < n && i < (int)r1.n_tokens; i++)
		same &= want[i] == r1.tokens[i];
	CHECK(same && n > 0 && (uint32_t)n >= r1.n_tokens,
	      "daemon's greedy tokens equal the engine's own (%d)", n);
	CHECK(r1.usage.cached_tokens == 0, "first request: no cached tokens");
	/* the next turn repeats the history byte for byte */
	snprintf(next, sizeof(next), "%s%.*s<|im_end|>\n<|im_start|>user\nAnd 9 * 9?<|im_end|>\n"
		 "<|im_start|>assistant\n", prompt, (int)r1.len, r1.text);
	CHECK(ask(d, next, 0, 1, 8, &r2, NULL) == 0, "second turn completes");
	CHECK(r2.usage.cached_tokens + 1 >= r1.usage.prompt_tokens + r1.usage.completion_tokens - 1,
	      "second turn reuses the first's KV: %u cached of %u (turn 1: %u + %u)",
	      r2.usage.cached_tokens, r2.usage.prompt_tokens, r1.usage.prompt_tokens,
	      r1.usage.completion_tokens);
	{
		const char *suffix = next + strlen(prompt) + r1.len;
		int n_suffix = kve_tokenize(d->tok, suffix, strlen(suffix), 0, NULL, 0);
		uint32_t pending = r1.finish == KVD_FINISH_LENGTH ? 1 : 0;

		CHECK(r2.usage.prompt_tokens - r2.usage.cached_tokens == (uint32_t)n_suffix + pending,
		      "second turn prefills only the appended tokens: %u = %d appended + %u "
		      "sampled without KV", r2.usage.prompt_tokens - r2.usage.cached_tokens,
		      n_suffix, pending);
	}
	CHECK(!strcmp(r1.session, r2.session), "same session id across turns (%s)", r2.session);
	/* 96 random bits: a session id names a conversation to DELETE
	 * (/v1/sessions/{id}): unguessable */
	CHECK(strlen(r1.session) == 29 && !strncmp(r1.session, "sess_", 5) &&
	      strspn(r1.session + 5, "0123456789abcdef") == 24,
	      "the session id is sess_ and 24 hex digits (12 random bytes)");
	CHECK(metric(d, "kvarenad_kv_bytes_copied_total") == 0,
	      "arena hand-off: 0 KV bytes copied between stages");
	CHECK(metric(d, "kvarenad_handoffs_total") == 2, "two prefill->decode hand-offs");
	CHECK(kvd_session_delete(d, r2.session, 0) == 0, "DELETE session");
	CHECK(kvd_session_delete(d, r2.session, 0) == -ENOENT, "DELETE again: unknown");
	kvd_destroy(d);
}

static void test_prefix_sharing(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply a, b;
	char p1[4096], p2[4096];

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nlist /tmp<|im_end|>\n<|im_start|>assistant\n",
		 sys_prompt);
	snprintf(p2, sizeof(p2), "%s<|im_start|>user\nread /etc/motd please<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	ask(d, p1, 0, 1, 4, &a, NULL);
	ask(d, p2, 0, 1, 4, &b, NULL);
	CHECK(strcmp(a.session, b.session) != 0, "two conversations, two sessions");
	CHECK(b.usage.cached_tokens >= 16,
	      "the second shares the system prompt's blocks: %u of %u prompt tokens cached",
	      b.usage.cached_tokens, b.usage.prompt_tokens);
	CHECK(metric(d, "kvarenad_prefix_hit_tokens_total") == b.usage.cached_tokens,
	      "prefix-cache hits counted");
	kvd_destroy(d);
}

/* n > 1 (kvd_request.fork_of): the second choice computes only the
 * prompt's last token, the rest shared (full blocks) or copied (the
 * partial last block) from the first choice's KV in the arena (memfd or
 * kvarena.ko's), and samples what a request of its own with its seed
 * samples. */
static void test_fork(void)
{
	struct kvd_request rq = { 0 };
	struct kvd_config c;
	struct kvd_error err;
	struct kvd_job *a = NULL, *b = NULL;
	struct kvd *d;
	struct reply ra, rb, rc;
	uint64_t copied;
	uint32_t bt;
	char p[4096];

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	bt = d->geom.block_tokens;
	/* a prompt whose last block is partial (something to copy) */
	for (int extra = 0; extra < 64; extra++) {
		struct kvd_piece pc = { 0 };
		int partial;

		snprintf(p, sizeof(p), "%s<|im_start|>user\nfork %.*s<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt, extra,
			 "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz");
		if (kvd_piece_make(d, p, strlen(p), 1, NULL, &pc))
			break;
		partial = (pc.n - 1) % bt > 1;
		kvd_piece_free(&pc);
		if (partial)
			break;
	}
	request_init(&rq, p, 8);
	rq.s.temperature = 1;
	rq.s.seed = 5;
	memset(&ra, 0, sizeof(ra));
	memset(&rb, 0, sizeof(rb));
	if (kvd_job_submit(d, &rq, &a, &err) == 0) {
		rq.fork_of = a;
		rq.s.seed = 6;
		if (kvd_job_submit(d, &rq, &b, &err))
			b = NULL;
	}
	CHECK(a && b, "two choices submitted");
	if (!a || !b) {
		if (a)
			kvd_job_free(a);
		kvd_destroy(d);
		return;
	}
	collect_reply(d, a, &ra, NULL);
	collect_reply(d, b, &rb, NULL);
	copied = metric(d, "kvarenad_prompt_copied_tokens_total");
	CHECK(!ra.error && !rb.error && rb.usage.cached_tokens == rb.usage.prompt_tokens - 1 &&
	      copied > 0 && copied < bt,
	      "the second choice computes only the last prompt token: %u of %u cached, %llu copied (%s backend)",
	      rb.usage.cached_tokens, rb.usage.prompt_tokens, (unsigned long long)copied,
	      d->backend == KVA_BACKEND_KERNEL ? "kernel" : "memfd");
	ask(d, p, 1, 6, 8, &rc, NULL);
	CHECK(same_tokens(&rb, &rc), "the second choice samples what a request of its own with its seed does (%u tokens)",
	      rc.n_tokens);
	kvd_destroy(d);
}

static void test_copy_mode(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply r, ref, r2, ref2, rr[4], fa, fb;
	char p[4096], p2[8192], pr[4][4096];
	uint64_t copied, copied2;
	int i, same;

	snprintf(p, sizeof(p), "%s<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
		 sys_prompt);
	base_config(&c);
	c.handoff = KVD_HANDOFF_COPY;
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 12, &r, NULL);
	copied = metric(d, "kvarenad_kv_bytes_copied_total");
	CHECK(copied > 0 && copied % (uint64_t)d->geom.kv_block_bytes == 0,
	      "copy hand-off: %llu KV bytes copied between stages",
	      (unsigned long long)copied);
	/* one token more: two positions to compute (the reply's last token
	 * and it), prompt work, so the prefill stage's, copied again */
	snprintf(p2, sizeof(p2), "%s%.*sx", p, (int)r.len, r.text);
	ask(d, p2, 0, 1, 4, &r2, NULL);
	copied2 = metric(d, "kvarenad_kv_bytes_copied_total");
	CHECK(r2.usage.prompt_tokens == r2.usage.cached_tokens + 2 && copied2 > copied,
	      "two positions to compute (%u of %u cached) are the prefill stage's: %llu more KV "
	      "bytes copied", r2.usage.cached_tokens, r2.usage.prompt_tokens,
	      (unsigned long long)(copied2 - copied));
	/* replies of 3 to 6 tokens in a row: the decode worker's queue is at
	 * each place of its ring when a copy of KV is loaded into it */
	for (i = 0; i < 4; i++) {
		snprintf(pr[i], sizeof(pr[i]), "%s<|im_start|>user\nreply %d<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt, i);
		ask(d, pr[i], 0, 1, 3 + (uint32_t)i, &rr[i], NULL);
	}
	/* two choices of one prompt: the second computes its own prompt (a
	 * prefill worker's KV is private until copied: nothing to copy from) */
	{
		struct kvd_request rq;
		struct kvd_error err;
		struct kvd_job *a = NULL, *b = NULL;

		request_init(&rq, p, 6);
		rq.s.temperature = 1;
		rq.s.seed = 5;
		memset(&fa, 0, sizeof(fa));
		memset(&fb, 0, sizeof(fb));
		if (kvd_job_submit(d, &rq, &a, &err) == 0) {
			rq.fork_of = a;
			rq.s.seed = 6;
			if (kvd_job_submit(d, &rq, &b, &err))
				b = NULL;
		}
		if (a)
			collect_reply(d, a, &fa, NULL);
		if (b)
			collect_reply(d, b, &fb, NULL);
		CHECK(a && b && fa.done && fb.done && fb.usage.completion_tokens == 6,
		      "copy hand-off: two choices of one prompt both complete (%s%s)", fa.err,
		      fb.err);
	}
	kvd_destroy(d);
	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 12, &ref, NULL);
	ask(d, p2, 0, 1, 4, &ref2, NULL);
	CHECK(same_tokens(&ref, &r) && same_tokens(&ref2, &r2),
	      "copy and arena hand-off give the same tokens");
	for (i = 0, same = 0; i < 4; i++) {
		struct reply x;

		ask(d, pr[i], 0, 1, 3 + (uint32_t)i, &x, NULL);
		same += same_tokens(&x, &rr[i]);
	}
	CHECK(same == 4, "and the same for replies of 3 to 6 tokens in a row (%d of 4)", same);
	kvd_destroy(d);
}

static void test_pressure(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref[6], r;
	char p[6][4096];
	int i, round, same = 1;

	for (i = 0; i < 6; i++)
		snprintf(p[i], sizeof(p[i]), "conversation %d\n%s<|im_start|>user\nsay something "
			 "about the number %d<|im_end|>\n<|im_start|>assistant\n",
			 i, sys_prompt, i * 7919);
	/* reference: plenty of room */
	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < 6; i++)
		ask(d, p[i], 0, 1, 16, &ref[i], NULL);
	kvd_destroy(d);
	/* too small for six conversations to stay: two rounds */
	base_config(&c);
	c.kv_blocks = 24;	/* one 2 MiB page: 64 blocks of 16 tokens here */
	c.prefix_cache = 1;
	if (getenv("KVD_TEST_SMALL")) {
		/* a tiny model's blocks are many per page: pressure from a
		 * high low watermark instead (the kernel's PRESSURE events) */
		c.low_wm = (uint32_t)atoi(getenv("KVD_TEST_SMALL"));
		c.high_wm = c.low_wm + 16;
	}
	d = start(&c);
	if (!d)
		return;
	for (round = 0; round < 2; round++)
		for (i = 0; i < 6; i++) {
			if (ask(d, p[i], 0, 1, 16, &r, NULL)) {
				same = 0;
				continue;
			}
			same &= r.n_tokens == ref[i].n_tokens &&
				!memcmp(r.tokens, ref[i].tokens, r.n_tokens * 4);
		}
	CHECK(metric(d, "kvarenad_evictions_total") > 0 ||
	      metric(d, "kvarenad_cache_evictions_total") > 0,
	      "a small arena evicts (%llu sessions, %llu cached blocks)",
	      (unsigned long long)metric(d, "kvarenad_evictions_total"),
	      (unsigned long long)metric(d, "kvarenad_cache_evictions_total"));
	CHECK(same, "evicted conversations are recomputed: every reply equals the unpressured run");
	if (d->backend == KVA_BACKEND_KERNEL)
		CHECK(metric(d, "kvarenad_pressure_events_total") > 0,
		      "kvarena.ko sent pressure events through io_uring (%llu)",
		      (unsigned long long)metric(d, "kvarenad_pressure_events_total"));
	kvd_destroy(d);
}

/*
 * Issue 35.6: kvarena.ko drops events when its queue (KVA_EVENT_QUEUE) is
 * full while the daemon is not waiting. With the scheduler held (its lock),
 * this test ends one of the daemon's sessions behind its back, posts more
 * SESSION_ENDED events than the queue holds (sessions of its own), then
 * takes blocks in a session of its own until the arena is below the low
 * watermark: that PRESSURE event is dropped. The daemon must see `dropped`
 * on the next event it reads and resync: forget the session ended outside,
 * and make room from its idle KV back above the low watermark. Then each
 * conversation's next turn equals a run without any of it. Kernel only.
 */
static void nap_ms(int ms);

static void test_dropped_events(void)
{
	enum { N = 3, LOW = 64, HIGH = 96 };
	struct kvd_config c;
	struct kvd *d;
	struct reply r1[N], ref[N], r2;
	char p[N][1024], next[N][4096];
	struct kva_arena_info ai = { .size = sizeof(ai) };
	uint32_t *ids = NULL, used = 0, take = 0, i, bad = 0, same = 0;
	uint64_t sid = 0, ended_sid = 0, dropped;
	int k, waited, ok = 1;

	if (getenv("KVD_TEST_BACKEND") == NULL || strcmp(getenv("KVD_TEST_BACKEND"), "kernel")) {
		printf("skip dropped_events: kvarena.ko's events (KVD_TEST_BACKEND=kernel)\n");
		return;
	}
	for (i = 0; i < N; i++)
		snprintf(p[i], sizeof(p[i]), "%s<|im_start|>user\ncount to %u for me<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt, 3 + 4 * i);
	/* reference: two turns each, undisturbed */
	base_config(&c);
	c.low_wm = LOW;
	c.high_wm = HIGH;
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < N; i++) {
		ok &= ask(d, p[i], 0, 1, 12, &r1[i], NULL) == 0;
		snprintf(next[i], sizeof(next[i]), "%s%.*s<|im_end|>\n<|im_start|>user\nagain"
			 "<|im_end|>\n<|im_start|>assistant\n", p[i], (int)r1[i].len, r1[i].text);
		ok &= ask(d, next[i], 0, 1, 8, &ref[i], NULL) == 0;
	}
	kvd_destroy(d);
	CHECK(ok, "reference: %u conversations, two turns each", N);
	if (!ok)
		return;

	base_config(&c);
	c.low_wm = LOW;
	c.high_wm = HIGH;
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < N; i++)
		ok &= ask(d, p[i], 0, 1, 12, &r2, NULL) == 0 && same_tokens(&r2, &r1[i]);
	CHECK(ok, "first turns as in the reference (their KV stays, idle)");
	pthread_mutex_lock(&d->lock);	/* the scheduler reads no event meanwhile */
#ifdef KVD_TEST_HOOKS
	d->test_arena_shared = 1;	/* blocks taken and ended behind its back */
#endif
	{
		struct kvd_conv *cv;

		for (cv = d->convs; cv && !cv->has_kv; cv = cv->next)
			;
		if (cv && kva_session_close(d->arena, cv->as.sid) == 0)
			ended_sid = cv->as.sid;	/* ended behind the daemon's back */
	}
	/* one event completes the daemon's parked wait, KVA_EVENT_QUEUE wait
	 * in the kernel's queue, the rest are dropped */
	for (k = 0; k < KVA_EVENT_QUEUE + 8; k++) {
		uint64_t s;

		if (kva_session_open(d->arena, 0, &s) || kva_session_close(d->arena, s))
			bad++;
	}
	/* below the low watermark: the PRESSURE event is dropped too */
	if (kva_arena_get_info(d->arena, &ai) == 0 && ai.blocks_total > HIGH + 16 &&
	    kva_session_open(d->arena, 0, &sid) == 0) {
		/* down to LOW - used / 2: the daemon's idle KV covers the rest */
		used = ai.blocks_total - ai.blocks_free;
		take = used >= 4 && used / 2 < LOW && ai.blocks_free > LOW - used / 2 ?
		       ai.blocks_free - (LOW - used / 2) : 0;
		ids = calloc(take + 1, sizeof(*ids));
		if (!ids || (take && kva_blocks_alloc(d->arena, sid, take, ids, 0) != (int)take))
			bad++;
	} else {
		bad++;
	}
	kva_arena_get_info(d->arena, &ai);
	dropped = ai.events_dropped;
	pthread_mutex_unlock(&d->lock);
	CHECK(!bad && take && ended_sid && dropped > 0 && ai.blocks_free < LOW,
	      "the kernel dropped %llu events; %u blocks free, below the low watermark %u "
	      "(daemon's idle KV: %u blocks)", (unsigned long long)dropped, ai.blocks_free,
	      LOW, used);
	for (waited = 0; waited < 200 && (metric(d, "kvarenad_kernel_resyncs_total") == 0 ||
					  metric(d, "kvarenad_kernel_resyncs_total") == UINT64_MAX);
	     waited++)
		nap_ms(50);
	nap_ms(200);
	CHECK(metric(d, "kvarenad_kernel_resyncs_total") >= 1 &&
	      metric(d, "kvarenad_kernel_events_dropped_total") >= 1 &&
	      metric(d, "kvarenad_kernel_events_dropped_total") != UINT64_MAX,
	      "the daemon saw the drop and resynced (%llu resyncs, %llu events dropped)",
	      (unsigned long long)metric(d, "kvarenad_kernel_resyncs_total"),
	      (unsigned long long)metric(d, "kvarenad_kernel_events_dropped_total"));
	ai.size = sizeof(ai);
	kva_arena_get_info(d->arena, &ai);
	CHECK(ai.blocks_free >= LOW, "room made from idle KV: %u blocks free (low watermark %u)",
	      ai.blocks_free, LOW);
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv;
		uint32_t mirrored = 0, right = 0;

		for (cv = d->convs; cv; cv = cv->next) {
			struct kva_session_info si = { .size = sizeof(si) };

			if (!cv->has_kv)
				continue;
			mirrored++;
			right += kva_session_get_info(d->arena, cv->as.sid, &si) == 0 &&
				 si.state == cv->kstate && si.blocks_held == cv->as.s.n_blocks;
		}
		CHECK(!kvd_conv_by_sid(d, ended_sid) && right == mirrored,
		      "the session ended outside is forgotten; %u of %u mirrored sessions "
		      "agree with the kernel (state, blocks)", right, mirrored);
	}
	pthread_mutex_unlock(&d->lock);
	if (ids && sid) {
		kva_blocks_free(d->arena, sid, take, ids);
		kva_session_close(d->arena, sid);
	}
	free(ids);
	for (i = 0; i < N; i++)
		same += ask(d, next[i], 0, 1, 8, &r2, NULL) == 0 && same_tokens(&r2, &ref[i]);
	CHECK(same == N, "%u of %u next turns equal the undisturbed run (recomputed where the "
	      "KV went)", same, N);
	kvd_destroy(d);
}

static pid_t decode_pid(struct kvd *d)
{
	pid_t pid = 0;
	uint32_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].role == KVD_ROLE_DECODE)
			pid = d->workers[i].pid;
	pthread_mutex_unlock(&d->lock);
	return pid;
}

static void kill_at_5(struct kvd *d, int n)
{
	if (n == 5)
		kill(decode_pid(d), SIGKILL);
}

static void stop_at_5(struct kvd *d, int n)
{
	if (n == 5)
		kill(decode_pid(d), SIGSTOP);
}

static void test_worker_death(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	char p[4096];
	uint32_t used_before;

	snprintf(p, sizeof(p), "<|im_start|>user\ncount to ten<|im_end|>\n<|im_start|>assistant\n");
	base_config(&c);
	c.lease_ms = getenv("KVD_TEST_SMALL") ? 20000 : 3000;
	c.lease_per_token_ms = 0;
	c.prefix_cache = 0;
	c.retention = 0;
	c.share_stages = 0;	/* the decode worker holds every decode step */
	d = start(&c);
	if (!d)
		return;
	used_before = (uint32_t)metric(d, "kvarenad_kv_blocks_used");
	ask(d, p, 0, 1, 32, &ref, NULL);
	CHECK(ask(d, p, 0, 1, 32, &r, kill_at_5) == 0 && r.n_tokens == ref.n_tokens &&
	      !memcmp(r.tokens, ref.tokens, r.n_tokens * 4),
	      "decode worker SIGKILLed mid-stream: the request completes with the same tokens");
	CHECK(metric(d, "kvarenad_worker_restarts_total") >= 1, "the worker was restarted");
	CHECK(ask(d, p, 0, 1, 8, &r, NULL) == 0, "the next request succeeds");
	CHECK(ask(d, p, 0, 1, 32, &r, stop_at_5) == 0 && r.n_tokens == ref.n_tokens &&
	      !memcmp(r.tokens, ref.tokens, r.n_tokens * 4),
	      "decode worker stopped past its KV lease: killed, replaced, request completes");
	CHECK(metric(d, "kvarenad_lease_expiries_total") >= 1, "the lease expiry was counted");
	CHECK((uint32_t)metric(d, "kvarenad_kv_blocks_used") == used_before,
	      "no blocks leak (%u used, as before)",
	      (uint32_t)metric(d, "kvarenad_kv_blocks_used"));
	kvd_destroy(d);
}

#ifdef KVD_TEST_HOOKS
/*
 * A reservation of the prompt's KV that fails for a reason other than
 * room (the kernel backend's ioctl, say: here -EIO by a test hook) fails
 * that request with a clear error, before any step: it holds no block
 * after, and the next request is served as before.
 */
static void test_reserve_fail(void)
{
	const char *p = "<|im_start|>user\ncount the blocks<|im_end|>\n<|im_start|>assistant\n";
	struct kvd_config c;
	struct reply ref, r;
	uint32_t used;
	struct kvd *d;

	base_config(&c);
	c.prefix_cache = 0;
	c.retention = 0;
	d = start(&c);
	if (!d)
		return;
	used = (uint32_t)metric(d, "kvarenad_kv_blocks_used");
	ask(d, p, 0, 1, 16, &ref, NULL);
	pthread_mutex_lock(&d->lock);
	d->test_reserve_fail = -EIO;
	pthread_mutex_unlock(&d->lock);
	ask(d, p, 0, 1, 16, &r, NULL);
	CHECK(r.error && r.err_kind == KVD_ERR_INTERNAL && strstr(r.err, "cannot reserve KV") &&
	      !r.n_tokens, "the reservation fails (EIO): the request fails so, no token (%s)",
	      r.err);
	CHECK((uint32_t)metric(d, "kvarenad_kv_blocks_used") == used,
	      "it holds no block after (%u used, %u before)",
	      (uint32_t)metric(d, "kvarenad_kv_blocks_used"), used);
	CHECK(ask(d, p, 0, 1, 16, &r, NULL) == 0 && same_tokens(&r, &ref),
	      "the next request is served as before (%u tokens)", r.n_tokens);
	kvd_destroy(d);
}
#endif

/*
 * A worker's socket may be descriptor 0 (a daemon started with its stdin
 * closed): it is polled like any other (sched.c: a negative descriptor is
 * a worker without one). With descriptor 0 free, the decode worker is
 * killed; its replacement's socket takes 0, and the next reply is the
 * same as before.
 */
static void test_worker_fd0(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	const char *p = "<|im_start|>user\ncount to ten<|im_end|>\n<|im_start|>assistant\n";
	uint64_t restarts;
	int saved, w, on0 = 0;
	uint32_t i;

	base_config(&c);
	c.prefix_cache = 0;
	c.retention = 0;
	c.share_stages = 0;	/* the decode worker decodes */
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 8, &ref, NULL);
	restarts = metric(d, "kvarenad_worker_restarts_total");
	saved = fcntl(0, F_DUPFD_CLOEXEC, 3);
	close(0);
	kill(decode_pid(d), SIGKILL);
	for (w = 0; w < 2000 && !on0; w++) {
		usleep(5000);
		pthread_mutex_lock(&d->lock);
		for (i = 0; i < d->n_workers; i++)
			on0 |= d->workers[i].sock == 0 && d->workers[i].role == KVD_ROLE_DECODE;
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(on0 && metric(d, "kvarenad_worker_restarts_total") > restarts,
	      "the decode worker's replacement talks on descriptor 0");
	CHECK(ask(d, p, 0, 1, 8, &r, NULL) == 0 && same_tokens(&r, &ref),
	      "its steps are answered: the same reply (%u tokens)", r.n_tokens);
	kvd_destroy(d);
	if (saved >= 0) {
		dup2(saved, 0);
		close(saved);
	}
}

static void test_plugin(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	char p[4096];

	if (!plugin_path) {
		printf("skip plugin test (no plugin path)\n");
		return;
	}
	snprintf(p, sizeof(p), "%s<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
		 sys_prompt);
	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0.8f, 42, 16, &ref, NULL);
	kvd_destroy(d);
	base_config(&c);
	snprintf(c.prefill_backend, sizeof(c.prefill_backend), "%s", plugin_path);
	snprintf(c.decode_backend, sizeof(c.decode_backend), "%s", plugin_path);
	d = start(&c);
	CHECK(d && kvd_ready(d), "workers run the CPU engine loaded from %s", plugin_path);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	CHECK(!strcmp(d->workers[0].backend, "cpu"), "the plugin reports its name");
	pthread_mutex_unlock(&d->lock);
	CHECK(ask(d, p, 0.8f, 42, 16, &r, NULL) == 0 && r.n_tokens == ref.n_tokens &&
	      !memcmp(r.tokens, ref.tokens, r.n_tokens * 4),
	      "sampled (T=0.8, seed 42) tokens through the plugin equal the built-in's");
	kvd_destroy(d);
	base_config(&c);
	snprintf(c.decode_backend, sizeof(c.decode_backend), "/nonexistent/backend.so");
	{
		char err[256] = "";
		struct kvd *bad = NULL;

		if (kvd_create(&c, self, &bad, err, sizeof(err)) == 0) {
			struct kvd_request rq = { .model = "test", .prompt = p,
						  .prompt_len = strlen(p) };
			struct kvd_error e;
			struct kvd_job *j;

			/* the workers fail to start: never ready, submissions refused */
			CHECK(kvd_job_submit(bad, &rq, &j, &e) != 0 && e.kind == KVD_ERR_UNAVAILABLE,
			      "a missing backend plugin: not ready, requests get 503 (%s)", e.message);
			kvd_destroy(bad);
		}
	}
}

/* ---- the scheduler (issue 34) ------------------------------------------- */

static int set_env(const char *k, const char *v)
{
	return v ? setenv(k, v, 1) : unsetenv(k);
}

/* n requests submitted at once, then collected (each reply's tokens). */
static int ask_all(struct kvd *d, const struct rq *q, uint32_t n, struct reply *r)
{
	struct kvd_job **jobs = calloc(n, sizeof(*jobs));
	struct kvd_error err;
	uint32_t i;
	int bad = 0;

	if (!jobs)
		return -1;
	for (i = 0; i < n; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		jobs[i] = submit(d, &q[i], &err);
		if (!jobs[i]) {
			snprintf(r[i].err, sizeof(r[i].err), "%s", err.message);
			r[i].error = 1;
			r[i].err_kind = err.kind;
			bad = 1;
		}
	}
	for (i = 0; i < n; i++)
		if (jobs[i] && collect_reply(d, jobs[i], &r[i], NULL))
			bad = 1;
	free(jobs);
	return bad ? -1 : 0;
}

static void sched_prompts(char p[][2048], uint32_t n)
{
	uint32_t i, k;

	for (i = 0; i < n; i++) {
		int o = snprintf(p[i], 2048, "<|im_start|>user\nrequest %u:", i);

		/* from a few tokens to a few hundred: several chunks each */
		for (k = 0; k < i * i * 3 && o < 1900; k++)
			o += snprintf(p[i] + o, 2048 - (size_t)o, " word%u", (k * 7 + i) % 97);
		snprintf(p[i] + o, 2048 - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
	}
}

/*
 * Every path gives the engine's own outputs: the same requests, sampled
 * with seeds (and one greedy, checked against the engine alone), run
 * one at a time through whole-prompt prefills on strict stages, then all
 * at once through tiny token budgets (16-token steps, 5-token chunks:
 * every prompt in several chunks, several prompts per step, decode tokens
 * mixed with chunks, idle workers taking the other stage's work, second
 * steps in flight).
 */
static void test_paths(void)
{
	enum { N = 8 };
	struct kvd_config c;
	struct kvd *d;
	struct reply *ref = calloc(N, sizeof(*ref)), *r = calloc(N, sizeof(*r));
	char (*p)[2048] = calloc(N, sizeof(*p));
	struct rq q[N];
	int32_t want[32];
	uint32_t i, same = 0;
	int n;

	if (!ref || !r || !p)
		goto out;
	sched_prompts(p, N);
	for (i = 0; i < N; i++)
		q[i] = (struct rq){ p[i], i ? 0.9f : 0, 100 + i, 20, 0, NULL, NULL };
	base_config(&c);
	c.step_tokens = 4096;
	c.chunk_tokens = 4096;
	c.steps_in_flight = 1;
	c.share_stages = 0;
	c.max_batch = 1;
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < N; i++)
		ask_rq(d, &q[i], &ref[i], NULL);
	CHECK(metric(d, "kvarenad_steps_total{stage=\"mixed\"}") == 0 &&
	      metric(d, "kvarenad_prefill_chunks_total") == N,
	      "reference run: one whole-prompt prefill per request, no mixed steps");
	kvd_destroy(d);
	n = engine_greedy(p[0], 20, want);
	CHECK(n > 0 && (uint32_t)n >= ref[0].n_tokens &&
	      !memcmp(want, ref[0].tokens, ref[0].n_tokens * sizeof(want[0])),
	      "the greedy one equals the engine's own tokens (%u)", ref[0].n_tokens);

	base_config(&c);
	c.step_tokens = 16;
	c.chunk_tokens = 5;
	d = start(&c);
	if (!d)
		goto out;
	ask_all(d, q, N, r);
	for (i = 0; i < N; i++)
		same += same_tokens(&r[i], &ref[i]);
	CHECK(same == N, "%u of %u replies through chunked, mixed, shared, pipelined steps "
	      "equal the one-at-a-time reference (sampled, seeded)", same, N);
	CHECK(metric(d, "kvarenad_prefill_chunks_total") > 3 * N,
	      "prompts went in chunks (%llu chunks for %u prompts)",
	      (unsigned long long)metric(d, "kvarenad_prefill_chunks_total"), N);
	CHECK(metric(d, "kvarenad_multi_prefill_steps_total") > 0,
	      "several prompts' chunks shared steps (%llu steps)",
	      (unsigned long long)metric(d, "kvarenad_multi_prefill_steps_total"));
	CHECK(metric(d, "kvarenad_steps_total{stage=\"mixed\"}") > 0,
	      "decode tokens and prompt chunks shared steps (%llu mixed steps)",
	      (unsigned long long)metric(d, "kvarenad_steps_total{stage=\"mixed\"}"));
	kvd_destroy(d);
out:
	free(ref);
	free(r);
	free(p);
}

/*
 * An arena too small for four long replies at once: the newest running
 * request gives its KV back (preempted, not cut with "length"), is
 * readmitted and recomputed, and every reply equals its run alone.
 */
static void test_preempt(void)
{
	enum { N = 8 };
	struct kvd_config c;
	struct kvd *d;
	struct reply *ref = calloc(N, sizeof(*ref)), *r = calloc(N, sizeof(*r));
	char (*p)[2048] = calloc(N, sizeof(*p));
	struct rq q[N];
	uint32_t i, same = 0, full = 0, tries;

	if (!ref || !r || !p || getenv("KVD_TEST_SMALL"))
		goto out;	/* the guests' tiny model: pages hold thousands */
	for (i = 0; i < N; i++) {
		snprintf(p[i], 2048, "<|im_start|>user\nstory %u: tell it long<|im_end|>\n"
			 "<|im_start|>assistant\n", i);
		q[i] = (struct rq){ p[i], 0.7f, 7 + i, 360, 0, NULL, NULL };
	}
	base_config(&c);
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < N; i++)
		ask_rq(d, &q[i], &ref[i], NULL);
	kvd_destroy(d);
	/* Whether the replies overlap enough to fill the arena depends on
	 * timing (a quiet machine may finish early ones before the last is
	 * admitted): up to three tries for the pressure to show. */
	for (tries = 0; tries < 3; tries++) {
		base_config(&c);
		c.kv_blocks = 8;	/* one 2 MiB page: 1024 tokens for 8 x up to 410 */
		c.prefix_cache = 0;
		/* admit whatever fits: room kept for the running replies would
		 * pace these few long ones so that none is preempted (test
		 * "admission"); here preemption itself is tested */
		c.decode_reserve = 0;
		d = start(&c);
		if (!d)
			goto out;
		ask_all(d, q, N, r);
		if (metric(d, "kvarenad_preemptions_total") > 0 || tries == 2)
			break;
		kvd_destroy(d);
	}
	for (i = 0; i < N; i++) {
		same += same_tokens(&r[i], &ref[i]);
		full += r[i].finish == ref[i].finish;
	}
	CHECK(metric(d, "kvarenad_preemptions_total") > 0,
	      "a full arena preempts running requests (%llu preemptions, %llu KV positions "
	      "recomputed)", (unsigned long long)metric(d, "kvarenad_preemptions_total"),
	      (unsigned long long)metric(d, "kvarenad_preempted_tokens_total"));
	CHECK(same == N && full == N, "preempted, readmitted, recomputed: %u of %u replies equal "
	      "their runs alone, none cut short", same, N);
	kvd_destroy(d);
out:
	free(ref);
	free(r);
	free(p);
}

/* buf = base, then words (seeded) until it tokenizes to at least
 * `tokens`; 0, or -1 when buf is too small. */
static int grow_text(struct kvd *d, char *buf, size_t len, const char *base, uint32_t seed,
		     uint32_t tokens)
{
	int o = snprintf(buf, len, "%s", base);
	uint32_t k;

	for (k = 0; o > 0 && (size_t)o + 16 < len; k++) {
		o += snprintf(buf + o, len - (size_t)o, " w%u", (k * 13 + seed * 7) % 89);
		if (kve_tokenize(d->tok, buf, (size_t)o, 1, NULL, 0) >= (int)tokens)
			return 0;
	}
	return -1;
}

static struct kvd_job *submit_long(struct kvd *d, const char *prompt, uint32_t max_tokens,
				   struct kvd_error *err)
{
	struct kvd_request rq = { 0 };
	struct kvd_job *j = NULL;

	request_init(&rq, prompt, max_tokens);
	rq.s.ignore_eos = 1;	/* the reply must grow into the blocks it lacks */
	if (kvd_job_submit(d, &rq, &j, err))
		return NULL;
	return j;
}

/* A daemon that admits whatever fits (decode_reserve 0, test "admission"),
 * on one 2 MiB page of arena when tight (else the default room). */
static struct kvd *start_admit_all(int prefix_cache, int tight)
{
	struct kvd_config c;

	base_config(&c);
	c.prefix_cache = prefix_cache;
	c.decode_reserve = 0;
	if (tight)
		c.kv_blocks = 8;
	return start(&c);
}

/* One event of a reply read with kvd_job_next_any: 1 when it ended. */
static int take_event(struct reply *o, const struct kvd_event *ev)
{
	if (ev->type == KVD_EV_TOKEN) {
		if (ev->token >= 0 && o->n_tokens < 1024)
			o->tokens[o->n_tokens++] = ev->token;
		return 0;
	}
	o->finish = ev->type == KVD_EV_DONE ? ev->finish : 0;
	if (ev->type == KVD_EV_DONE)
		o->usage = ev->usage;
	o->done = ev->type == KVD_EV_DONE;
	o->error = !o->done;
	return 1;
}

/*
 * A waiting job holds no blocks (admit.c, wait_empty()): with the prefix
 * cache on, admission shares a job's cached prefix before reserving the
 * rest; a job that then found no room kept what it had shared. Built
 * here, not left to timing, in an arena of B blocks: two earlier
 * conversations leave prompts PA and PB cached (3B/8 blocks each, B/4
 * free); A (PA + B/4) is admitted into the free blocks; B (PB + B/4)
 * shares PB's blocks and finds no room; A's reply grows by B/16. If B
 * kept PB's blocks, nothing idle is left to evict: A is preempted,
 * readmitted with its cached blocks and waits for more, which B holds,
 * while B waits for the ones A holds, and neither runs again (the
 * livelock seen in the eviction bench at the arena's floor; both replies
 * then time out). Waiting empty, PB's blocks are only cached and A takes
 * them. Both replies must come, equal to their runs on an arena with room.
 */
static void test_preempt_cached(void)
{
	struct kvd *d;
	struct kvd_error err;
	struct kvd_event ev;
	struct kvd_job *jobs[2];
	struct reply warm, ref[2], r[2];
	char *p = calloc(4, 8192), *pa = p, *pb = p + 8192, *qa = p + 16384, *qb = p + 24576;
	uint32_t bt, nb, i, n, which, idx[2], same = 0, mx = 0;
	int pass_no, ok = 1;

	if (!p || getenv("KVD_TEST_SMALL"))
		goto out;	/* the guests' tiny model: pages hold thousands */
	for (pass_no = 0; pass_no < 2 && ok; pass_no++) {
		struct reply *out = pass_no ? ref : r;

		d = start_admit_all(1, !pass_no);
		if (!d)
			goto out;
		if (!pass_no) {
			bt = d->geom.block_tokens;
			nb = d->geom.blocks_total;
			/* half a block over, so that the cached blocks hold
			 * the same tokens whatever the join tokenizes to */
			ok = nb >= 16 && nb % 16 == 0 &&
			     !grow_text(d, pa, 8192, "A: the build log", 1, 3 * nb / 8 * bt + bt / 2) &&
			     !grow_text(d, pb, 8192, "B: the test log", 2, 3 * nb / 8 * bt + bt / 2) &&
			     !grow_text(d, qa, 8192, pa, 3, 5 * nb / 8 * bt - bt / 2) &&
			     !grow_text(d, qb, 8192, pb, 4, 5 * nb / 8 * bt - bt / 2);
			mx = nb / 16 * bt;
			CHECK(ok, "an arena of %u blocks of %u tokens, prompts of %u and %u "
			      "blocks", nb, bt, 3 * nb / 8, 5 * nb / 8);
		}
		/* PA and PB cached, their conversations gone */
		for (i = 0; i < 2 && ok; i++) {
			ok = !ask(d, i ? pb : pa, 0, 1, 1, &warm, NULL) &&
			     !kvd_session_delete(d, warm.session, 0);
		}
		if (!pass_no)
			CHECK(ok && metric(d, "kvarenad_kv_blocks_cached") == 3 * nb / 4,
			      "PA and PB cached: %llu blocks (want %u)",
			      (unsigned long long)metric(d, "kvarenad_kv_blocks_cached"), 3 * nb / 4);
		n = 0;
		for (i = 0; i < 2 && ok; i++) {
			memset(&out[i], 0, sizeof(out[i]));
			jobs[n] = submit_long(d, i ? qb : qa, mx, &err);
			ok = jobs[n] != NULL;
			idx[n] = i;
			n += ok;
		}
		while (n && kvd_job_next_any(jobs, n, &ev, &which, 120000) == 1) {
			if (!take_event(&out[idx[which]], &ev))
				continue;
			kvd_job_free(jobs[which]);
			jobs[which] = jobs[n - 1];
			idx[which] = idx[n - 1];
			n--;
		}
		for (i = 0; i < n; i++)	/* no answer in 120 s: the livelock */
			kvd_job_free(jobs[i]);
		if (!pass_no)
			CHECK(metric(d, "kvarenad_cache_evictions_total") > 0,
			      "A's growth took cached blocks (%llu cache evictions, %llu "
			      "preemptions)",
			      (unsigned long long)metric(d, "kvarenad_cache_evictions_total"),
			      (unsigned long long)metric(d, "kvarenad_preemptions_total"));
		kvd_destroy(d);
	}
	for (i = 0; i < 2; i++)
		same += same_tokens(&r[i], &ref[i]) && r[i].n_tokens == mx;
	CHECK(same == 2, "both replies came, %u tokens each, equal to their runs with room: "
	      "%u of 2 (a waiting job holds no blocks)", mx, same);
out:
	free(p);
}

/* Worker w carries a prompt chunk of `chunk` tokens (the prompt's last
 * when `last`: it samples) and `dec` decode tokens in flight, one step
 * (seqs: room for dec + 1). */
static void load_worker(struct kvd_worker *w, struct kvd_sent *seqs, int index, uint32_t role,
			uint32_t chunk, int last, uint32_t dec)
{
	struct kvd_wstep *st = &w->q[0];
	uint32_t k;

	memset(w, 0, sizeof(*w));
	st->seqs = seqs;
	w->index = index;
	w->role = role;
	w->n_q = chunk || dec;
	if (chunk) {
		st->seqs[st->n_seq].n_new = chunk;
		st->seqs[st->n_seq++].flags = last ? KVD_SEQ_SAMPLE : 0;
	}
	for (k = 0; k < dec; k++) {
		st->seqs[st->n_seq].n_new = 1;
		st->seqs[st->n_seq++].flags = KVD_SEQ_SAMPLE;
	}
}

/*
 * The order workers are offered steps (router.c, kvd_route_order): the
 * prefill stage's first whatever their load (a decode worker mixes in
 * only the prompt chunks they leave: the steps queued behind the ones in
 * flight are built in this order), then least cost (prefill_load_scale
 * x prompt tokens in flight + decode tokens in flight), then index.
 */
static void test_route_order(void)
{
	enum { P = KVD_ROLE_PREFILL, D = KVD_ROLE_DECODE, N = 6 };
	/* a prompt's last chunk, two decode tokens, a one-token chunk that
	 * does not sample (a prompt token all the same) */
	static const struct { uint32_t role, chunk; int last; uint32_t dec; } load[N] = {
		{ P, 300, 1, 0 }, { P, 0, 0, 2 }, { P, 1, 0, 0 },
		{ D, 0, 0, 3 }, { D, 0, 0, 0 }, { D, 0, 0, 0 },
	};
	static const struct { double scale; int want[N]; } cases[] = {
		{ 1.0, { 2, 1, 0, 4, 5, 3 } },		/* costs 300 2 1 | 3 0 0 */
		{ 0.001, { 2, 0, 1, 4, 5, 3 } },	/* 0.3 2 0.001 | 3 0 0 */
	};
	struct kvd *d = calloc(1, sizeof(*d));
	struct kvd_worker *w = calloc(N, sizeof(*w)), *order[N];
	struct kvd_sent seqs[N][4];
	uint32_t i, k;
	char got[64];

	if (!d || !w)
		goto out;
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int o = 0, right = 1;

		d->cfg.prefill_load_scale = cases[k].scale;
		for (i = 0; i < N; i++) {
			/* given in reverse: the order is the sort's, not the input's */
			load_worker(&w[i], seqs[i], (int)i, load[i].role, load[i].chunk, load[i].last,
				    load[i].dec);
			order[N - 1 - i] = &w[i];
		}
		kvd_route_order(d, order, N);
		for (i = 0; i < N; i++) {
			o += snprintf(got + o, sizeof(got) - (size_t)o, " %d", order[i]->index);
			right &= order[i]->index == cases[k].want[i];
		}
		CHECK(right, "workers offered steps in the order%s at prefill_load_scale %g "
		      "(prefill stage first, then least cost, then index)", got, cases[k].scale);
	}
out:
	free(w);
	free(d);
}

/*
 * Structured decoding through the scheduler (sched.c keeps each reply's
 * constrained tokens and sends them with every sampling step, so that a
 * worker's matcher follows the reply): JSON-object replies longer than
 * that history's first allocation (64 tokens), steered to close within
 * max_tokens (close_in_budget), parse whole as one JSON object each, and
 * batched they equal their runs alone. (Under UBSan it found the step's
 * bytes copied from a NULL history of no tokens: workers.c, put_bytes.)
 */
static void test_constrained_long(void)
{
	enum { N = 3 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq;
	struct kvd_error err;
	struct kvd_job *j;
	struct reply r[2][N];
	const char *prompt = "<|im_start|>user\nList the build steps as JSON.<|im_end|>\n"
			     "<|im_start|>assistant\n";
	uint32_t i, k, objects = 0, longest = 0, same = 0;

	if (getenv("KVD_TEST_SMALL"))
		return;		/* TCG: 720 constrained tokens cost minutes */
	base_config(&c);
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	for (k = 0; k < 2; k++) {
		struct kvd_job *jobs[N];

		/* k 0: one at a time; k 1: all at once (batched) */
		for (i = 0; i < N; i++) {
			request_init(&rq, prompt, 120);
			rq.s.temperature = 1.0f;
			rq.s.seed = 11 + i;
			rq.c.kind = KVD_CONSTRAIN_JSON_OBJECT;
			rq.s.close_in_budget = 1;
			memset(&r[k][i], 0, sizeof(r[k][i]));
			jobs[i] = kvd_job_submit(d, &rq, &j, &err) ? NULL : j;
			if (!k && jobs[i])
				collect_reply(d, jobs[i], &r[k][i], NULL);
		}
		for (i = 0; k && i < N; i++)
			if (jobs[i])
				collect_reply(d, jobs[i], &r[k][i], NULL);
	}
	for (i = 0; i < N; i++) {
		json_error_t je;
		json_t *o = json_loadb(r[0][i].text, r[0][i].len, 0, &je);

		objects += json_is_object(o);
		json_decref(o);
		if (r[0][i].n_tokens > longest)
			longest = r[0][i].n_tokens;
		same += same_tokens(&r[0][i], &r[1][i]);
	}
	CHECK(objects == N && longest > 64, "%u of %u constrained replies parse as JSON objects, "
	      "closed within max_tokens (close_in_budget), the longest %u tokens", objects, N,
	      longest);
	CHECK(same == N, "batched: %u of %u equal their runs alone", same, N);
	kvd_destroy(d);
}

/*
 * A preempted job goes back before any queued one (admit.c, kvd_admit):
 * one that finds no room stops admission as a queued one does, so that
 * newcomers do not take the blocks it waits for. In an arena of B
 * blocks, A and B (prompts of 3B/8 blocks, replies of B/2 blocks) grow
 * until B, the newer, is preempted; it needs the blocks A keeps growing
 * into, so it waits for A's end. C, a short prompt that fits the room
 * left, arrives while B waits: C starts after A's end (A's last events
 * are queued before C's first), not beside A. The three replies equal
 * their runs on an arena with room.
 */
static void test_readmit_first(void)
{
	struct kvd *d;
	struct kvd_error err;
	struct kvd_event ev;
	struct kvd_job *jobs[3];
	struct reply ref[3], r[3];
	char *p = calloc(2, 8192), *pa = p, *pb = p + 8192;
	const char *pc = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
	uint32_t bt, nb, i, n = 0, which, idx[3], mx[3] = { 0, 0, 4 }, same = 0;
	uint32_t a_at_c = 0;		/* A's tokens read when C's first came */
	int pass_no, ok = 1, c_sent = 0, c_started = 0, a_ended_first = 0;

	if (!p || getenv("KVD_TEST_SMALL"))
		goto out;	/* the guests' tiny model: pages hold thousands */
	for (pass_no = 0; pass_no < 2 && ok; pass_no++) {
		struct reply *out = pass_no ? ref : r;

		d = start_admit_all(0, !pass_no);
		if (!d)
			goto out;
		if (!pass_no) {
			bt = d->geom.block_tokens;
			nb = d->geom.blocks_total;
			ok = nb >= 16 && nb % 16 == 0 &&
			     !grow_text(d, pa, 8192, "A: the build log", 1, 3 * nb / 8 * bt - bt / 2) &&
			     !grow_text(d, pb, 8192, "B: the test log", 2, 3 * nb / 8 * bt - bt / 2);
			mx[0] = mx[1] = nb / 2 * bt;
			CHECK(ok && 3 * nb / 8 * bt + mx[0] < d->ctx_len,
			      "an arena of %u blocks of %u tokens, prompts of %u blocks, "
			      "replies of %u", nb, bt, 3 * nb / 8, nb / 2);
			ok = ok && 3 * nb / 8 * bt + mx[0] < d->ctx_len;
		}
		memset(out, 0, 3 * sizeof(*out));
		for (n = 0; n < 3 && ok; n++) {
			if (n == 2 && !pass_no)
				break;	/* C: once B waits */
			jobs[n] = submit_long(d, n == 2 ? pc : n ? pb : pa, mx[n], &err);
			ok = jobs[n] != NULL;
			idx[n] = n;
		}
		c_sent = pass_no;
		while (ok && n && kvd_job_next_any(jobs, n, &ev, &which, 120000) == 1) {
			uint32_t k = idx[which];
			int ended = take_event(&out[k], &ev);

			if (!pass_no && k == 2 && !c_started) {
				/* C's first event: A's end is queued before it */
				c_started = 1;
				for (i = 0; i < n; i++)
					if (idx[i] == 0)
						break;
				a_ended_first = i == n;
				if (i < n && i != which) {
					while (kvd_job_next(jobs[i], &ev, 0) == 1)
						if (take_event(&out[0], &ev)) {
							a_ended_first = 1;
							kvd_job_free(jobs[i]);
							jobs[i] = jobs[n - 1];
							idx[i] = idx[n - 1];
							n--;
							which = which == n ? i : which;
							break;
						}
				}
				a_at_c = r[0].n_tokens;
			}
			if (ended) {
				kvd_job_free(jobs[which]);
				jobs[which] = jobs[n - 1];
				idx[which] = idx[n - 1];
				n--;
			}
			if (!c_sent && metric(d, "kvarenad_preemptions_total") > 0) {
				c_sent = 1;
				jobs[n] = submit_long(d, pc, mx[2], &err);
				idx[n] = 2;
				n += jobs[n] != NULL;
			}
		}
		for (i = 0; i < n; i++)	/* no answer in 120 s */
			kvd_job_free(jobs[i]);
		if (!pass_no) {
			CHECK(c_sent, "B preempted while A grows (%llu preemptions)",
			      (unsigned long long)metric(d, "kvarenad_preemptions_total"));
			CHECK(c_started && a_ended_first,
			      "C, arriving while the preempted B waits for room, started after "
			      "A's end (%u of A's %u tokens out before C's first)", a_at_c, mx[0]);
		}
		kvd_destroy(d);
	}
	for (i = 0; i < 3; i++)
		same += same_tokens(&r[i], &ref[i]) && r[i].n_tokens == mx[i];
	CHECK(same == 3, "A, B and C whole, equal to their runs with room: %u of 3", same);
out:
	free(p);
}

/*
 * Admission does not take what it would soon preempt: 24 prompts of ~115
 * tokens, each replying 100, queued at once on an arena of 1024 tokens
 * (5 times too small for all of them). Every reply equals its run alone,
 * and what preemptions made readmission compute again stays under 10% of
 * the prompt tokens (admitting whatever fits now, as before, recomputed
 * 65%: the replies' next blocks push the newest prompts out, again and
 * again). The bound is on KV positions computed twice, not on timing.
 * KVD_TEST_DECODE_RESERVE sets [sched] decode_reserve (0: the old way).
 */
static void test_admission(void)
{
	enum { N = 24 };
	struct kvd_config c;
	struct kvd *d;
	struct reply *ref = calloc(N, sizeof(*ref)), *r = calloc(N, sizeof(*r));
	char (*p)[2048] = calloc(N, sizeof(*p));
	struct rq q[N];
	uint32_t i, k, same = 0, full = 0;
	uint64_t prompt = 0, again;

	if (!ref || !r || !p || getenv("KVD_TEST_SMALL"))
		goto out;	/* the guests' tiny model: pages hold thousands */
	for (i = 0; i < N; i++) {
		int o = snprintf(p[i], 2048, "<|im_start|>user\nnote %u:", i);

		for (k = 0; k < 25 && o < 1900; k++)
			o += snprintf(p[i] + o, 2048 - (size_t)o, " w%u", (k * 13 + i * 7) % 89);
		snprintf(p[i] + o, 2048 - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
		q[i] = (struct rq){ p[i], 0.8f, 31 + i, 100, 0, NULL, NULL };
	}
	base_config(&c);
	c.prefix_cache = 0;
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < N; i++) {
		ask_rq(d, &q[i], &ref[i], NULL);
		prompt += ref[i].usage.prompt_tokens;
	}
	kvd_destroy(d);
	base_config(&c);
	c.kv_blocks = 8;	/* one 2 MiB page: 1024 tokens */
	c.prefix_cache = 0;
	if (getenv("KVD_TEST_DECODE_RESERVE"))
		c.decode_reserve = (uint32_t)atoi(getenv("KVD_TEST_DECODE_RESERVE"));
	d = start(&c);
	if (!d)
		goto out;
	ask_all(d, q, N, r);
	for (i = 0; i < N; i++) {
		same += same_tokens(&r[i], &ref[i]);
		full += r[i].finish == ref[i].finish;
	}
	again = metric(d, "kvarenad_preempt_recomputed_tokens_total");
	CHECK(same == N && full == N, "%u of %u replies of a queue 5x the arena equal their "
	      "runs alone", same, N);
	CHECK(again * 10 <= prompt, "preemptions recomputed %llu KV positions, under 10%% of "
	      "the %llu prompt tokens (%llu preemptions, %llu positions given back)",
	      (unsigned long long)again, (unsigned long long)prompt,
	      (unsigned long long)metric(d, "kvarenad_preemptions_total"),
	      (unsigned long long)metric(d, "kvarenad_preempted_tokens_total"));
	kvd_destroy(d);
out:
	free(ref);
	free(r);
	free(p);
}

/* A first turn of ~400 tokens, told apart by i; returns its tokens. */
static int first_turn_400(struct kvd *d, char *p, size_t size, unsigned i)
{
	int o = snprintf(p, size, "<|im_start|>user\n%u: log", i), tok = 0;
	unsigned k;

	for (k = 0; o < 3900; k++) {
		o += snprintf(p + o, size - (size_t)o, " w%u", (k * 13 + i * 7) % 89);
		if (k % 16 == 15 && (tok = kve_tokenize(d->tok, p, (size_t)o, 1, NULL, 0)) >= 400)
			break;
	}
	snprintf(p + o, size - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
	return tok;
}

/* Runs the n jobs to their ends and frees them: how many ended before
 * target did; *all: each of them ended done, target too. */
static unsigned ended_before(struct kvd_job **jobs, unsigned n, const struct kvd_job *target,
			     int *all)
{
	unsigned which, done = 0, before = 0, n0 = n;
	int ok = 1, seen = 0;
	struct kvd_event ev;

	while (n && kvd_job_next_any(jobs, n, &ev, &which, 120000) == 1) {
		if (ev.type == KVD_EV_TOKEN)
			continue;
		ok &= ev.type == KVD_EV_DONE;
		if (jobs[which] == target) {
			seen = 1;
			before = done;
		}
		kvd_job_free(jobs[which]);
		memmove(&jobs[which], &jobs[which + 1], (n - which - 1) * sizeof(jobs[0]));
		n--;
		done++;
	}
	*all = ok && seen && done == n0;
	return before;
}

/*
 * Program-level first come, first served (admit.c, queued_key()): a
 * conversation's next turn (a tool's result, a user's reply) goes before
 * the first turns of conversations that began after it. Six long first
 * turns fill an arena that holds two at a time; then an earlier
 * conversation sends its second turn. In arrival order it would wait for
 * all six to be admitted (four of them finished); it is admitted next.
 */
/* X's first turn ("run the tests"), answered; into x2 its second. 0 or -1. */
static int earlier_turn(struct kvd *d, char *x2, size_t size)
{
	static const char x1[] = "<|im_start|>user\nrun the tests<|im_end|>\n"
				 "<|im_start|>assistant\n";
	struct reply rx;

	if (ask(d, x1, 0, 1, 4, &rx, NULL)) {
		CHECK(0, "first conversation's first turn: %s", rx.err);
		return -1;
	}
	snprintf(x2, size, "%s%.*s<|im_end|>\n<|im_start|>user\nall passed<|im_end|>\n"
		 "<|im_start|>assistant\n", x1, (int)rx.len, rx.text);
	return 0;
}

/* Submits the first turns y[0..ny) (replies of up to max_tokens), then x2
 * (4 tokens) into jobs; returns how many went in (ny + 1: all). */
static unsigned submit_then(struct kvd *d, char (*y)[4096], unsigned ny, uint32_t max_tokens,
			    const char *x2, struct kvd_job **jobs)
{
	struct kvd_error err;
	unsigned n = 0, i;

	for (i = 0; i < ny + 1; i++) {
		struct rq q = { i < ny ? y[i] : x2, 0, 1, i < ny ? max_tokens : 4, 0, NULL, NULL };

		jobs[n] = submit(d, &q, &err);
		if (!jobs[n])
			break;
		n++;
	}
	return n;
}

static void test_program_fcfs(void)
{
	enum { NY = 6 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[NY + 1], *xj;
	char x2[1024], y[NY][4096];
	unsigned n, i, before_x;
	int tok = 0, ok, all;

	base_config(&c);
	c.kv_blocks = 8;	/* one 2 MiB page: 1024 tokens */
	d = start(&c);
	if (!d)
		return;
	if (earlier_turn(d, x2, sizeof(x2))) {
		kvd_destroy(d);
		return;
	}
	/* first turns of ~400 tokens each: two fit in the arena at once */
	for (i = 0; i < NY; i++)
		tok = first_turn_400(d, y[i], sizeof(y[i]), i);
	n = submit_then(d, y, NY, 24, x2, jobs);
	ok = n == NY + 1;
	xj = ok ? jobs[NY] : NULL;
	CHECK(ok, "six first turns of %d tokens queued, then the earlier conversation's "
	      "second turn (arena %u blocks of %u tokens)", tok, d->geom.blocks_total,
	      d->geom.block_tokens);
	/* the order replies end in */
	before_x = ended_before(jobs, n, xj, &all);
	CHECK(ok && all && before_x < 4,
	      "the second turn ended after %u of the six later conversations' first turns "
	      "(in arrival order: 4 at least)", before_x);
	kvd_destroy(d);
}

/*
 * Admission keeps a few steps ahead of the prefill stage (admit.c,
 * [sched] prefill_ahead): twelve first turns of ~400 tokens queued at once
 * into an arena that holds them all, then an earlier conversation's
 * second turn. With the bound at 600 tokens no more than one first turn
 * waits admitted and uncomputed at any admission turn (the gauge), the
 * second turn is admitted ahead of the first turns behind it and ends
 * before most of them, and every reply ends; without a bound all twelve
 * are admitted at once (4800 tokens), which the check must tell apart.
 */
static unsigned prefill_ahead_run(uint32_t ahead, uint64_t *pending_max, int *all)
{
	enum { NY = 12 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[NY + 1], *xj;
	char x2[1024], (*y)[4096] = calloc(NY, sizeof(*y));
	unsigned n, i, before_x = NY;
	int ok;

	*all = 0;
	*pending_max = 0;
	if (!y)
		return NY;
	base_config(&c);
	c.prefill_ahead = ahead;
	d = start(&c);
	if (!d || earlier_turn(d, x2, sizeof(x2))) {
		if (d)
			kvd_destroy(d);
		free(y);
		return NY;
	}
	for (i = 0; i < NY; i++)
		first_turn_400(d, y[i], sizeof(y[i]), i);
	n = submit_then(d, y, NY, 16, x2, jobs);
	ok = n == NY + 1;
	xj = ok ? jobs[NY] : NULL;
	if (ok)
		before_x = ended_before(jobs, n, xj, all);
	else
		while (n)
			kvd_job_free(jobs[--n]);
	*pending_max = metric(d, "kvarenad_admit_prefill_pending_max");
	kvd_destroy(d);
	free(y);
	return before_x;
}

static void test_prefill_ahead(void)
{
	uint64_t bound, unbound;
	unsigned before;
	int all, all0;

	before = prefill_ahead_run(600, &bound, &all);
	prefill_ahead_run(0, &unbound, &all0);
	CHECK(all && all0 && bound <= 600 && bound >= 300 && unbound > 1200,
	      "prompt tokens admitted and not yet computed at most: %llu with prefill_ahead 600, "
	      "%llu without a bound (twelve first turns of ~400 tokens at once)",
	      (unsigned long long)bound, (unsigned long long)unbound);
	CHECK(all && before < 6,
	      "the earlier conversation's second turn ended after %u of the twelve later first "
	      "turns", before);
}

/*
 * The template's end of turn (ChatML's <|im_end|>: d->eot, apart from the
 * vocabulary's EOS) ends the reply: "stop", and the token is not text.
 * The test model's vocabulary has no ChatML markers, so the test names
 * its third greedy token the end of turn: the reply is then the two
 * tokens before it; with ignore_eos it is never sampled (8 tokens).
 */
static void test_end_of_turn(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	const char *p = "<|im_start|>user\nsay little<|im_end|>\n<|im_start|>assistant\n";
	struct rq q = { p, 0, 1, 8, 0, NULL, NULL };
	struct kvd_request rq;
	struct kvd_error err;
	struct kvd_job *j = NULL;
	uint32_t i;
	int32_t eot;

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	if (ask_rq(d, &q, &ref, NULL) || ref.n_tokens < 3 || ref.tokens[2] == ref.tokens[0] ||
	    ref.tokens[2] == ref.tokens[1] || ref.tokens[2] == d->eos) {
		CHECK(0, "end_of_turn: a reference reply whose third token is new (%u tokens)",
		      ref.n_tokens);
		kvd_destroy(d);
		return;
	}
	eot = ref.tokens[2];
	pthread_mutex_lock(&d->lock);
	d->eot = eot;
	pthread_mutex_unlock(&d->lock);
	/* a new conversation (no session key): the same greedy tokens */
	CHECK(ask_rq(d, &q, &r, NULL) == 0 && r.finish == KVD_FINISH_STOP && r.n_tokens == 2 &&
	      r.tokens[0] == ref.tokens[0] && r.tokens[1] == ref.tokens[1],
	      "the end of turn (token %d) ends the reply: stop after %u tokens (finish %d)",
	      eot, r.n_tokens, (int)r.finish);
	request_init(&rq, p, 8);
	rq.s.ignore_eos = 1;
	memset(&r, 0, sizeof(r));
	if (kvd_job_submit(d, &rq, &j, &err) == 0 && collect_reply(d, j, &r, NULL) == 0) {
		int seen = 0;

		for (i = 0; i < r.n_tokens; i++)
			seen |= r.tokens[i] == eot;
		CHECK(r.finish == KVD_FINISH_LENGTH && r.n_tokens == 8 && !seen,
		      "ignore_eos: the end of turn is never sampled: %u tokens, finish %d",
		      r.n_tokens, (int)r.finish);
	} else {
		CHECK(0, "end_of_turn: ignore_eos request: %s", r.err);
	}
	kvd_destroy(d);
}

/*
 * The same order among running jobs (step.c, job->place): prompt chunks
 * go to conversations in the order they began, so a conversation back
 * from a tool computes its few new tokens before the rest of the long
 * first turns admitted before it (all of them fit in the arena here).
 * Steps of 32 tokens, chunks of 16: six 400-token first turns take 75
 * steps; in admission order the second turn would wait for them all.
 */
static void test_program_chunks(void)
{
	enum { NY = 6 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_job *jobs[NY + 1], *xj;
	char x2[1024], y[NY][4096];
	unsigned n = 0, i, before_x;
	int tok = 0, ok = 1, all;
	uint64_t chunks0, chunks = 0;

	base_config(&c);
	c.step_tokens = 32;
	c.chunk_tokens = 16;
	d = start(&c);
	if (!d)
		return;
	if (earlier_turn(d, x2, sizeof(x2))) {
		kvd_destroy(d);
		return;
	}
	for (i = 0; i < NY; i++)
		tok = first_turn_400(d, y[i], sizeof(y[i]), i);
	pthread_mutex_lock(&d->lock);
	chunks0 = d->m.prefill_chunks;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < NY + 1 && ok; i++) {
		struct rq q = { i < NY ? y[i] : x2, 0, 1, 2, 0, NULL, NULL };
		int w;

		/* the six admitted and prefilling before the second turn */
		for (w = 0; i == NY && w < 20000; w++) {
			pthread_mutex_lock(&d->lock);
			chunks = d->m.prefill_chunks - chunks0;
			pthread_mutex_unlock(&d->lock);
			if (chunks >= 2 * NY)
				break;
			usleep(500);
		}
		jobs[n] = submit(d, &q, &err);
		ok = jobs[n] != NULL;
		n += ok;
	}
	xj = ok ? jobs[NY] : NULL;
	CHECK(ok && chunks >= 2 * NY, "six first turns of %d tokens running (%llu chunks "
	      "computed), then the earlier conversation's second turn", tok,
	      (unsigned long long)chunks);
	before_x = ended_before(jobs, n, xj, &all);
	CHECK(ok && all && before_x < 3,
	      "the second turn ended after %u of the six later conversations' first turns "
	      "(in admission order: 4)", before_x);
	kvd_destroy(d);
}

/* A raw prompt of exactly n tokens (as the daemon encodes it, with BOS),
 * or "" when no filler reaches n exactly */
static void prompt_of_tokens(struct kvd *d, char *p, size_t size, const char *start, int n)
{
	static const char fill[] = "abcdefghijklmnopqrstuvwxyz";
	size_t o = (size_t)snprintf(p, size, "%s", start);
	int k = 0;

	while (o + 2 < size && k < 26) {
		int got;

		p[o] = fill[k];
		p[o + 1] = 0;
		got = kve_tokenize(d->tok, p, o + 1, 1, NULL, 0);
		if (got == n)
			return;
		if (got < n) {
			o++;
			k = 0;
		} else {
			k++;	/* one token too many: another letter may merge */
		}
	}
	p[0] = 0;
}

/*
 * A job never waits for the block that holds its last token (admit.c,
 * prefix.c kvd_prefix_pending_wait): it computes that block itself
 * whatever another prefill brings (the last token must be computed for
 * its logits). A's prompt is one block and more; B's is exactly A's first
 * block, submitted while A computes it: B does not wait for it, and its
 * reply is its reply alone.
 */
static void test_last_block(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_job *ja, *jb;
	struct reply ra, rb, ref;
	char pb[512], pa[1024];
	struct rq qa = { pa, 0, 1, 2, 0, NULL, NULL }, qb = { pb, 0, 1, 4, 0, NULL, NULL };
	uint32_t bt;

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	bt = d->geom.block_tokens;
	prompt_of_tokens(d, pb, sizeof(pb), "the first block of a prompt: ", (int)bt);
	CHECK(pb[0], "a prompt of exactly one block (%u tokens)", bt);
	if (!pb[0]) {
		kvd_destroy(d);
		return;
	}
	ask_rq(d, &qb, &ref, NULL);
	kvd_destroy(d);
	snprintf(pa, sizeof(pa), "%s, and a long rest after it that A computes in the same "
		 "chunk as its first block", pb);
	d = start(&c);
	if (!d)
		return;
	memset(&ra, 0, sizeof(ra));
	memset(&rb, 0, sizeof(rb));
	ja = submit(d, &qa, &err);
	jb = submit(d, &qb, &err);
	if (ja)
		collect_reply(d, ja, &ra, NULL);
	if (jb)
		collect_reply(d, jb, &rb, NULL);
	CHECK(!ra.error && rb.usage.prompt_tokens == bt && same_tokens(&rb, &ref),
	      "B (%u tokens) replies as alone", rb.usage.prompt_tokens);
	CHECK(metric(d, "kvarenad_prefix_waits_total") == 0,
	      "B did not wait for A's block: it holds B's last token (%llu waits)",
	      (unsigned long long)metric(d, "kvarenad_prefix_waits_total"));
	kvd_destroy(d);
}

/*
 * Admission between tenants (admit.c, cand_cmp): when room frees, the
 * waiting job of the tenant with the least virtual time goes first, not
 * the oldest. Tenant A queues six first turns of ~400 tokens in an arena
 * holding two, then tenant B one: B's is admitted at the next free room,
 * not after A's six (it ends before at most four of them).
 */
static void test_admit_fair(void)
{
	enum { NA = 6 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_job *jobs[NA + 1], *bj;
	char y[NA + 1][4096];
	unsigned n = 0, i, before_b;
	int ok = 1, all;

	base_config(&c);
	c.kv_blocks = 8;	/* one 2 MiB page: 1024 tokens */
	two_tenants(&c, "a", "b");
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < NA + 1; i++)
		first_turn_400(d, y[i], sizeof(y[i]), i);
	for (i = 0; i < NA + 1 && ok; i++) {
		struct rq q = { y[i], 0, 1, 24, i < NA ? 1 : 2, NULL, NULL };

		jobs[n] = submit(d, &q, &err);
		ok = jobs[n] != NULL;
		n += ok;
	}
	bj = ok ? jobs[NA] : NULL;
	CHECK(ok, "tenant a's six first turns queued, then tenant b's one (arena %u blocks)",
	      d->geom.blocks_total);
	before_b = ended_before(jobs, n, bj, &all);
	CHECK(ok && all && before_b <= 4,
	      "tenant b's turn ended after %u of tenant a's six (in arrival order: 6)", before_b);
	kvd_destroy(d);
}

static pid_t worker_pid(struct kvd *d, uint32_t role, int ready)
{
	pid_t pid = 0;
	uint32_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].role == role && (!ready || d->workers[i].state == W_READY))
			pid = d->workers[i].pid;
	pthread_mutex_unlock(&d->lock);
	return pid;
}

static void nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * A decode worker killed 10 times in a row (each time it is up again) is
 * restarted after a growing back-off, never given up: meanwhile /health
 * says degraded and the prefill worker serves the decode work; after the
 * tenth, the worker comes back, is probed with a step and serves.
 */
static void test_worker_storm(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	char p[256];
	int k, degraded = 0, served = 0, t;

	snprintf(p, sizeof(p), "<|im_start|>user\ncount to ten<|im_end|>\n<|im_start|>assistant\n");
	base_config(&c);
	c.retention = 0;
	c.restart_backoff_max_ms = 400;
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 16, &ref, NULL);
	for (k = 0; k < 10; k++) {
		pid_t pid = 0;

		for (t = 0; t < 3000 && !(pid = worker_pid(d, KVD_ROLE_DECODE, 1)); t++)
			nap_ms(10);
		if (!pid)
			break;
		kill(pid, SIGKILL);
		for (t = 0; t < 500 && worker_pid(d, KVD_ROLE_DECODE, 1) == pid; t++)
			nap_ms(10);
		nap_ms(20);
		degraded |= kvd_health(d) == KVD_HEALTH_DEGRADED;
		if (k == 6 && ask(d, p, 0, 1, 16, &r, NULL) == 0 && same_tokens(&r, &ref))
			served = 1;
	}
	CHECK(k == 10, "the decode worker came back after each of %d kills", k);
	CHECK(degraded, "/health said degraded while the decode stage had no worker");
	CHECK(served, "during the storm the prefill worker served a request (same tokens)");
	for (t = 0; t < 1500 && !worker_pid(d, KVD_ROLE_DECODE, 1); t++)
		nap_ms(10);
	CHECK(ask(d, p, 0, 1, 16, &r, NULL) == 0 && same_tokens(&r, &ref),
	      "after 10 kills in a row the worker is back and the request is served");
	CHECK(kvd_health(d) == KVD_HEALTH_OK, "/health says ok again");
	CHECK(metric(d, "kvarenad_worker_failures_total{stage=\"decode\"}") >= 10 &&
	      metric(d, "kvarenad_workers_up{stage=\"decode\"}") == 1,
	      "metrics: %llu decode worker failures, the worker up",
	      (unsigned long long)metric(d, "kvarenad_worker_failures_total{stage=\"decode\"}"));
	kvd_destroy(d);
}

/*
 * The kernel sees a request's stages: its session spends time in PREFILL
 * while the prompt is computed and in DECODE while tokens come (the
 * kernel's eviction ranks by them), and is IDLE once the reply is done.
 */
static void test_kstate_stages(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply r;
	struct kvd_conv *cv;
	struct kva_session_info si = { .size = sizeof(si) };
	int got = 0;

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	CHECK(ask(d, "<|im_start|>user\nname three stages<|im_end|>\n<|im_start|>assistant\n",
		  0, 1, 12, &r, NULL) == 0 && r.n_tokens > 2, "a reply of %u tokens", r.n_tokens);
	pthread_mutex_lock(&d->lock);
	for (cv = d->convs; cv && !got; cv = cv->next)
		got = cv->has_kv && kva_session_get_info(d->arena, cv->as.sid, &si) == 0;
	pthread_mutex_unlock(&d->lock);
	CHECK(got && si.state_ns[KVA_STATE_PREFILL] > 0 && si.state_ns[KVA_STATE_DECODE] > 0 &&
	      si.state == KVA_STATE_IDLE,
	      "its session was in PREFILL %llu ns and DECODE %llu ns, IDLE now (state %u)",
	      (unsigned long long)si.state_ns[KVA_STATE_PREFILL],
	      (unsigned long long)si.state_ns[KVA_STATE_DECODE], si.state);
	kvd_destroy(d);
}

/* stage_down: mid-reply, every worker's backend made one that cannot
 * load and the workers killed (a broken driver: each restart fails) */
static char stage_down_saved[2][256];

static void stage_down_break(struct kvd *d, int n)
{
	pid_t pp, dp;

	if (n != 2)
		return;
	pthread_mutex_lock(&d->lock);
	memcpy(stage_down_saved[0], d->cfg.prefill_backend, sizeof(stage_down_saved[0]));
	memcpy(stage_down_saved[1], d->cfg.decode_backend, sizeof(stage_down_saved[1]));
	snprintf(d->cfg.prefill_backend, sizeof(d->cfg.prefill_backend), "/nonexistent/b.so");
	snprintf(d->cfg.decode_backend, sizeof(d->cfg.decode_backend), "/nonexistent/b.so");
	pthread_mutex_unlock(&d->lock);
	pp = worker_pid(d, KVD_ROLE_PREFILL, 0);
	dp = worker_pid(d, KVD_ROLE_DECODE, 0);
	if (pp > 0)
		kill(pp, SIGKILL);
	if (dp > 0)
		kill(dp, SIGKILL);
}

/*
 * Workers that keep failing: a request whose stage has had no worker up
 * for a KV lease fails with 503 ("no worker able to run this request")
 * instead of waiting for good, and once the workers load again the next
 * request is served as before.
 */
static void test_stage_down(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	char p[256];
	uint64_t t0;
	int t;

	snprintf(p, sizeof(p), "<|im_start|>user\nsay a lot<|im_end|>\n<|im_start|>assistant\n");
	base_config(&c);
	c.retention = 0;
	c.restart_backoff_max_ms = 200;
	if (!getenv("KVD_TEST_LEASE_MS"))
		c.lease_ms = 1500;
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 8, &ref, NULL);
	t0 = kvd_now_ns();
	ask(d, p, 0, 1, 400, &r, stage_down_break);
	CHECK(r.error && strstr(r.err, "no worker able to run this request") && r.n_tokens >= 2,
	      "workers down mid-reply for a lease: the request fails after %u tokens in %.0f ms "
	      "(%s)", r.n_tokens, (double)(kvd_now_ns() - t0) / 1e6, r.err);
	CHECK(kvd_health(d) != KVD_HEALTH_OK, "/health is not ok meanwhile");
	pthread_mutex_lock(&d->lock);
	memcpy(d->cfg.prefill_backend, stage_down_saved[0], sizeof(stage_down_saved[0]));
	memcpy(d->cfg.decode_backend, stage_down_saved[1], sizeof(stage_down_saved[1]));
	pthread_mutex_unlock(&d->lock);
	for (t = 0; t < 3000 && kvd_health(d) != KVD_HEALTH_OK; t++)
		nap_ms(10);
	CHECK(ask(d, p, 0, 1, 8, &r, NULL) == 0 && same_tokens(&r, &ref),
	      "the workers load again: the next request is served, same tokens");
	kvd_destroy(d);
}

/*
 * A worker that stops mid-message (header and half an answer written)
 * freezes nothing: another request is served by the other worker
 * meanwhile, the stalled one is killed when its lease runs out, and its
 * request completes with the same tokens.
 */
static void test_stall(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, rb, ra;
	struct kvd_job *ja;
	struct kvd_error err;
	char pa[256], pb[256], flag[64];
	struct rq qa = { pa, 0, 1, 16, 0, NULL, NULL }, qb = { pb, 0, 1, 8, 0, NULL, NULL };
	uint64_t t0, tb;
	int fd;

	snprintf(pa, sizeof(pa), "<|im_start|>user\nfirst one<|im_end|>\n<|im_start|>assistant\n");
	snprintf(pb, sizeof(pb), "<|im_start|>user\nsecond one<|im_end|>\n<|im_start|>assistant\n");
	snprintf(flag, sizeof(flag), "/tmp/kvd-stall-%d", (int)getpid());
	base_config(&c);
	c.lease_ms = 4000;
	c.lease_per_token_ms = 0;
	set_env("KVD_TEST_STALL_FILE", flag);
	d = start(&c);
	if (!d)
		goto out;
	ask(d, pa, 0, 1, 16, &ref, NULL);
	fd = open(flag, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	memset(&ra, 0, sizeof(ra));
	t0 = kvd_now_ns();
	ja = submit(d, &qa, &err);
	while (access(flag, F_OK) == 0 && kvd_now_ns() - t0 < 3000000000ull)
		nap_ms(5);	/* the stalled answer is on its way */
	CHECK(ask_rq(d, &qb, &rb, NULL) == 0, "another request is served while a worker "
	      "is stuck mid-message");
	tb = kvd_now_ns() - t0;
	CHECK(tb < 3500000000ull, "... in %.0f ms, before the stuck worker's lease ends",
	      (double)tb / 1e6);
	CHECK(ja && collect_reply(d, ja, &ra, NULL) == 0 && same_tokens(&ra, &ref),
	      "the stuck worker's request completes, same tokens, after %.0f ms",
	      (double)(kvd_now_ns() - t0) / 1e6);
	CHECK(metric(d, "kvarenad_lease_expiries_total") >= 1,
	      "its lease expired and the worker was replaced");
	kvd_destroy(d);
out:
	unlink(flag);
	set_env("KVD_TEST_STALL_FILE", NULL);
}

static uint64_t tenant_tokens(struct kvd *d, const char *name)
{
	char m[128];

	snprintf(m, sizeof(m), "kvarenad_tenant_scheduled_tokens_total{tenant=\"%s\"}", name);
	return metric(d, m);
}

/*
 * Two tenants flood at once, weights 1 and 3: while both have prompts
 * waiting, the steps' prompt tokens go 1 : 3 (one-token replies: the
 * prompts are all the work, whatever the random model says).
 */
static void test_fairness(void)
{
	enum { PER = 12 };
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[2 * PER];
	struct kvd_error err;
	struct reply *r = calloc(2 * PER, sizeof(*r));
	char (*p)[2048] = calloc(2 * PER, sizeof(*p));
	uint64_t a0 = 0, b0 = 0, a1, b1;
	uint32_t i, k;
	int t, o;

	if (!r || !p)
		goto out;
	base_config(&c);
	two_tenants(&c, "light", "heavy");
	c.tenants[0].weight = 1;
	c.tenants[1].weight = 3;
	c.kv_blocks = 1024;
	/* two 64-token chunks a step: a tenant's share is fine-grained, and
	 * the heavy one has more prompts than chunks in flight */
	c.chunk_tokens = 64;
	c.step_tokens = 128;
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < 2 * PER; i++) {
		struct rq q = { p[i], 0, 1, 1, 1 + i % 2, NULL, NULL };

		o = snprintf(p[i], sizeof(p[i]), "<|im_start|>user\nflood %u:", i);
		for (k = 0; k < 150; k++)
			o += snprintf(p[i] + o, sizeof(p[i]) - (size_t)o, " w%u", (k * 31 + i) % 89);
		snprintf(p[i] + o, sizeof(p[i]) - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
		jobs[i] = submit(d, &q, &err);
	}
	/* a window while both are backlogged: each has 12 prompts of ~300
	 * tokens; at 1:3 the heavy one's run out past 4500 in all. It starts
	 * late enough that the first arrival's head start is caught up
	 * (the requests go in one by one while steps already run) */
	for (t = 0; t < 12000; t++) {
		a0 = tenant_tokens(d, "light");
		b0 = tenant_tokens(d, "heavy");
		if (a0 + b0 >= 1000)
			break;
		nap_ms(5);
	}
	for (; t < 24000; t++) {
		a1 = tenant_tokens(d, "light");
		b1 = tenant_tokens(d, "heavy");
		if (a1 + b1 >= a0 + b0 + 2800)
			break;
		nap_ms(5);
	}
	a1 = tenant_tokens(d, "light") - a0;
	b1 = tenant_tokens(d, "heavy") - b0;
	CHECK(a1 && (double)b1 / (double)a1 > 2.4 && (double)b1 / (double)a1 < 3.6,
	      "weights 1:3 while both flood: %llu and %llu prompt tokens scheduled (%.2f)",
	      (unsigned long long)a1, (unsigned long long)b1, a1 ? (double)b1 / (double)a1 : 0);
	for (i = 0; i < 2 * PER; i++)
		if (jobs[i])
			collect_reply(d, jobs[i], &r[i], NULL);
	for (i = 0; i < 2 * PER && !r[i].error; i++)
		;
	CHECK(i == 2 * PER, "every request of both floods completes");
	kvd_destroy(d);
out:
	free(r);
	free(p);
}

/*
 * 100 conversations that start at once with one system prompt: it is
 * computed once (the others wait for its blocks, then share them), and
 * their own parts prefill on both prefill workers at once.
 */
static void test_shared_start(void)
{
	enum { N = 100 };
	struct kvd_config c;
	struct kvd *d;
	struct reply *r = calloc(N, sizeof(*r));
	char (*p)[1024] = calloc(N, sizeof(*p));
	struct rq *q = calloc(N, sizeof(*q));
	uint32_t i, ok = 0, sys_tok;
	uint64_t cached;

	if (!r || !p || !q)
		goto out;
	base_config(&c);
	c.prefill_workers = 2;
	c.decode_workers = 1;
	c.chunk_tokens = 32;
	c.step_tokens = 128;
	c.kv_blocks = 2048;
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < N; i++) {
		snprintf(p[i], sizeof(p[i]), "%s<|im_start|>user\nagent %u: plan step %u of the "
			 "build, then report<|im_end|>\n<|im_start|>assistant\n", sys_prompt, i,
			 i * 13 % 7);
		q[i] = (struct rq){ p[i], 0, 1, 4, 0, NULL, NULL };
	}
	sys_tok = (uint32_t)kve_tokenize(d->tok, sys_prompt, strlen(sys_prompt), 1, NULL, 0);
	ask_all(d, q, N, r);
	for (i = 0; i < N; i++)
		ok += !r[i].error && r[i].done;
	cached = metric(d, "kvarenad_prompt_cached_tokens_total");
	CHECK(ok == N, "%u of %u conversations completed", ok, N);
	CHECK(cached >= (uint64_t)(N - 1) * (sys_tok / d->geom.block_tokens) * d->geom.block_tokens,
	      "the system prompt (%u tokens) was computed once: %llu prompt tokens shared",
	      sys_tok, (unsigned long long)cached);
	CHECK(metric(d, "kvarenad_prefix_waits_total") > 0,
	      "conversations waited for the shared blocks being computed (%llu)",
	      (unsigned long long)metric(d, "kvarenad_prefix_waits_total"));
	CHECK(metric(d, "kvarenad_prefill_workers_busy_max") == 2 &&
	      metric(d, "kvarenad_multi_prefill_steps_total") > 0,
	      "both prefill workers computed prompt chunks at once, several prompts per step "
	      "(%llu such steps)",
	      (unsigned long long)metric(d, "kvarenad_multi_prefill_steps_total"));
	kvd_destroy(d);
out:
	free(r);
	free(p);
	free(q);
}

/*
 * prompt_cache_key / user are a routing hint (issue 36.2): naming alice's
 * key neither continues, cuts, reads nor deletes her conversation, from
 * another tenant or from her own.
 */
static void test_session_keys(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply a1, a2, b, o;
	char p1[2048], p2[4096], po[2048];
	struct rq q;

	base_config(&c);
	two_tenants(&c, "alice", "bob");
	d = start(&c);
	if (!d)
		return;
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nmy secret plan<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	q = (struct rq){ p1, 0, 1, 12, 1, "alice", NULL };
	ask_rq(d, &q, &a1, NULL);
	snprintf(p2, sizeof(p2), "%s%.*s<|im_end|>\n<|im_start|>user\nand then?<|im_end|>\n"
		 "<|im_start|>assistant\n", p1, (int)a1.len, a1.text);
	/* bob repeats alice's whole conversation and names her key */
	q = (struct rq){ p2, 0, 1, 4, 2, "alice", NULL };
	CHECK(ask_rq(d, &q, &b, NULL) == 0 && strcmp(b.session, a1.session) &&
	      b.usage.cached_tokens == 0,
	      "another tenant naming alice's key gets a session of its own and none of her "
	      "cached tokens (%u)", b.usage.cached_tokens);
	CHECK(kvd_session_delete(d, a1.session, 2) == -ENOENT,
	      "... and cannot delete her session");
	/* a client of alice's own tenant naming her key, with another turn */
	snprintf(po, sizeof(po), "%s<|im_start|>user\nsomething else<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	q = (struct rq){ po, 0, 1, 4, 1, "alice", NULL };
	CHECK(ask_rq(d, &q, &o, NULL) == 0 && strcmp(o.session, a1.session),
	      "a request naming alice's key with other text starts its own conversation");
	q = (struct rq){ p2, 0, 1, 4, 1, "alice", NULL };
	CHECK(ask_rq(d, &q, &a2, NULL) == 0 && !strcmp(a2.session, a1.session) &&
	      a2.usage.cached_tokens + 1 >= a1.usage.prompt_tokens + a1.usage.completion_tokens - 1,
	      "alice's next turn continues her conversation whole: %u cached (turn 1: %u + %u)",
	      a2.usage.cached_tokens, a1.usage.prompt_tokens, a1.usage.completion_tokens);
	kvd_destroy(d);
}

/* A prompt its tenant's KV budget can never hold: a 400 naming the limit. */
static void test_never_fits(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply r;
	char p[4096];
	struct rq q = { p, 0, 1, 4, 1, NULL, NULL };

	base_config(&c);
	c.n_tenants = 1;
	snprintf(c.tenants[0].name, sizeof(c.tenants[0].name), "small");
	c.tenants[0].id = 1;
	c.tenants[0].kv_blocks = 4;
	d = start(&c);
	if (!d)
		return;
	snprintf(p, sizeof(p), "%s<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
		 sys_prompt_long);
	CHECK(ask_rq(d, &q, &r, NULL) < 0 && r.err_kind == KVD_ERR_TOO_LONG &&
	      strstr(r.err, "kv_blocks = 4"),
	      "over the tenant's kv_blocks: 400 naming it, not a 429 (%s)", r.err);
	CHECK(d->ctx_len <= d->geom.blocks_total * d->geom.block_tokens,
	      "the context (%u) is bounded by the arena (%u blocks of %u)", d->ctx_len,
	      d->geom.blocks_total, d->geom.block_tokens);
	kvd_destroy(d);
}

/*
 * The radix index's chains name only blocks their conversation holds. B
 * computed the same blocks as A alongside it (nothing to share when it
 * started); A goes and the cache evicts A's blocks, which B never held:
 * B's next offer must not walk a freed node (a use after free under
 * ASan), and B's own blocks are indexed from the root instead.
 */
static void test_index_chain(void)
{
	struct kvd_config c;
	struct kvd_rnode *path[4] = { NULL };
	struct kvd_conv *a, *b;
	struct kvd *d;
	uint32_t bt, i, n;
	int ok;

	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	bt = d->geom.block_tokens;
	a = kvd_conv_new(d, 0);
	b = kvd_conv_new(d, 0);
	ok = a && b && d->has_cache_sid;
	for (i = 0; ok && i < 3 * bt; i++)
		ok = !kvd_conv_push_token(a, 7 + (int32_t)(i % 50), NULL, 0, 0) &&
		     !kvd_conv_push_token(b, 7 + (int32_t)(i % 50), NULL, 0, 0);
	ok = ok && !kvd_conv_open_kv(d, a) && !kvd_conv_open_kv(d, b) &&
	     !kvd_conv_reserve_to(d, a, 3 * bt) && !kvd_conv_reserve_to(d, b, 2 * bt);
	CHECK(ok, "two conversations of one tenant with the same tokens, KV reserved");
	if (ok) {
		a->as.s.n_tokens = 3 * bt;	/* as if computed: only the index is tested */
		kvd_prefix_offer(d, a);
		b->as.s.n_tokens = 2 * bt;	/* computed alongside, in blocks of its own */
		kvd_prefix_offer(d, b);
		CHECK(a->n_offered == 3 && b->n_offered == 0,
		      "A's 3 blocks indexed; B's equal blocks are its own copies: none indexed (%u, %u)",
		      a->n_offered, b->n_offered);
		kvd_conv_free(d, a);
		n = kvd_prefix_evict(d, d->geom.blocks_total);
		CHECK(n == 3, "A gone, its 3 cached blocks evicted (%u): B held none of them", n);
		ok = !kvd_conv_reserve_to(d, b, 3 * bt);
		b->as.s.n_tokens = ok ? 3 * bt : b->as.s.n_tokens;
		kvd_prefix_offer(d, b);
		n = kvd_prefix_lookup(d, b, 3 * bt, path);
		CHECK(ok && n == 3 && path[0]->block == b->as.s.block_table[0] &&
		      path[2]->block == b->as.s.block_table[2],
		      "B's next offer indexes its own 3 blocks from the root (%u)", n);
		kvd_conv_free(d, b);
	}
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/* Blocks the cache session holds (its kvarena reference on each). */
static uint32_t cache_held(struct kvd *d)
{
	struct kva_session_info si = { .size = sizeof(si) };

	return kva_session_get_info(d->arena, d->cache_sid, &si) ? UINT32_MAX : si.blocks_held;
}

/*
 * The cache session's references go many blocks a call (prefix.c,
 * cache_let_go): more cached blocks than one call's batch (256) are all
 * evicted by one kvd_prefix_evict, and the cache session holds exactly
 * the blocks the index names, before and after, also when an offer's
 * blocks lose to equal ones indexed before (their references go back).
 */
static void test_cache_batches(void)
{
	struct kvd_config c;
	struct kvd_conv *cv[48], *twin = NULL;
	struct kvd *d;
	uint32_t bt, per, i, n, nc = 0, total = 0;
	int ok = 1;

	base_config(&c);
	c.kv_blocks = 1024;
	d = start(&c);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	bt = d->geom.block_tokens;
	per = d->ctx_len / bt;
	/* conversations of distinct tokens, full blocks computed (as if:
	 * only the index is tested), until over a batch and a half */
	while (ok && d->has_cache_sid && nc < 48 && total < 400 &&
	       kvd_blocks_free(d) >= 2 * per) {
		struct kvd_conv *x = kvd_conv_new(d, 0);

		ok = x != NULL;
		for (i = 0; ok && i < per * bt; i++)
			ok = !kvd_conv_push_token(x, 7 + (int32_t)((nc * 5 + i) % 400), NULL, 0, 0);
		ok = ok && !kvd_conv_open_kv(d, x) && !kvd_conv_reserve_to(d, x, per * bt);
		if (x)
			cv[nc++] = x;
		if (ok) {
			x->as.s.n_tokens = per * bt;
			kvd_prefix_offer(d, x);
			total += x->n_offered;
		}
	}
	CHECK(ok && total > 256 && total == d->radix.n && cache_held(d) == total,
	      "%u conversations offered %u blocks; indexed %u, the cache session holds %u",
	      nc, total, d->radix.n, cache_held(d));
	/* the first one's twin, computed in blocks of its own */
	twin = ok ? kvd_conv_new(d, 0) : NULL;
	ok = twin != NULL;
	for (i = 0; ok && i < per * bt; i++)
		ok = !kvd_conv_push_token(twin, 7 + (int32_t)(i % 400), NULL, 0, 0);
	ok = ok && !kvd_conv_open_kv(d, twin) && !kvd_conv_reserve_to(d, twin, per * bt);
	if (ok) {
		twin->as.s.n_tokens = per * bt;
		kvd_prefix_offer(d, twin);
	}
	CHECK(ok && twin->n_offered == 0 && d->radix.n == total && cache_held(d) == total,
	      "a twin's equal blocks are not indexed and hold no cache reference "
	      "(offered %u; indexed %u, held %u of %u)", ok ? twin->n_offered : 0, d->radix.n,
	      cache_held(d), total);
	if (twin)
		kvd_conv_free(d, twin);
	for (i = 0; i < nc; i++)
		kvd_conv_free(d, cv[i]);
	n = kvd_prefix_evict(d, d->geom.blocks_total);
	CHECK(n == total && d->radix.n == 0 && cache_held(d) == 0,
	      "one eviction lets go of all %u cached blocks (%u; %u indexed, %u held)", total,
	      n, d->radix.n, cache_held(d));
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/*
 * A step that fails because of one sequence's input charges that one
 * only: the batch is split (bisection) until it fails alone, and fails;
 * the others complete with their own tokens.
 */
/* Does a member other than `self` read (its prompt) or write (its
 * reply) token t, or `self` write it? */
static int carried(struct kvd *d, char p[][256], const struct reply *ref, uint32_t n,
		   uint32_t self, int32_t t)
{
	int used = 0;

	for (uint32_t i = 0; i < n && !used; i++) {
		int32_t o[64];
		int m = i == self ? 0 : kve_tokenize(d->tok, p[i], strlen(p[i]), 1, o, 64);

		for (int x = 0; x < m; x++)
			used |= o[x] == t;
		for (uint32_t x = 0; i != self && x < ref[i].n_tokens; x++)
			used |= ref[i].tokens[x] == t;
	}
	return used;
}

static int in_prompt(struct kvd *d, const char *prompt, int32_t t)
{
	int32_t o[64];
	int m = kve_tokenize(d->tok, prompt, strlen(prompt), 1, o, 64);

	for (int x = 0; x < m; x++)
		if (o[x] == t)
			return 1;
	return 0;
}

static void test_bisect(void)
{
	enum { N = 4 };
	struct kvd_config c;
	struct kvd *d;
	struct reply ref[N], r[N];
	char p[N][256], num[16];
	struct rq q[N];
	int32_t ids[64];
	int n, k;
	uint32_t i, ok = 0, poison = 0, poison_out = 0;

	for (i = 0; i < N; i++) {
		snprintf(p[i], sizeof(p[i]), "<|im_start|>user\nbatch member %u%s<|im_end|>\n"
			 "<|im_start|>assistant\n", i, i == 2 ? " xyzzyq" : "");
		q[i] = (struct rq){ p[i], 0, 1, 12, 0, NULL, NULL };
	}
	base_config(&c);
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < N; i++)
		ask_rq(d, &q[i], &ref[i], NULL);
	/* a token of member 2's prompt nobody else reads or writes */
	n = kve_tokenize(d->tok, p[2], strlen(p[2]), 1, ids, 64);
	for (k = 0; k < n && !poison; k++)
		if (!carried(d, p, ref, N, 2, ids[k]))
			poison = (uint32_t)ids[k];
	/* and one member 2 only writes, not as its last token: read back as
	 * the input of its next decode step, beside the others' */
	for (k = 0; k + 1 < (int)ref[2].n_tokens && !poison_out; k++)
		if (!carried(d, p, ref, N, 2, ref[2].tokens[k]) && !in_prompt(d, p[2],
									     ref[2].tokens[k]))
			poison_out = (uint32_t)ref[2].tokens[k];
	kvd_destroy(d);
	CHECK(poison, "a token only member 2 carries: %u", poison);
	if (!poison)
		return;
	/* a decode step that fails: the groups are decode tokens */
	if (poison_out) {
		snprintf(num, sizeof(num), "%u", poison_out);
		set_env("KVD_TEST_POISON", num);
		base_config(&c);
		d = start(&c);
		set_env("KVD_TEST_POISON", NULL);
		if (d) {
			ask_all(d, q, N, r);
			for (ok = 0, i = 0; i < N; i++)
				ok += i == 2 ? r[i].error : same_tokens(&r[i], &ref[i]);
			CHECK(ok == N && metric(d, "kvarenad_step_bisections_total") >= 1,
			      "a decode step failing on member 2's own output token: it fails "
			      "alone, the others complete with their own tokens (%llu bisections)",
			      (unsigned long long)metric(d, "kvarenad_step_bisections_total"));
			kvd_destroy(d);
		}
	}
	snprintf(num, sizeof(num), "%u", poison);
	/* stages apart, then shared (a group's steps go to any idle worker) */
	for (int share = 0; share < 2; share++) {
		set_env("KVD_TEST_POISON", num);
		base_config(&c);
		c.share_stages = share;
		d = start(&c);
		set_env("KVD_TEST_POISON", NULL);
		if (!d)
			return;
		ask_all(d, q, N, r);
		for (ok = 0, i = 0; i < N; i++)
			ok += i == 2 ? r[i].error : same_tokens(&r[i], &ref[i]);
		CHECK(ok == N, "stages %s: the member whose step fails fails alone (%s); the %u "
		      "others complete with their own tokens", share ? "shared" : "apart",
		      r[2].err, N - 1);
		CHECK(metric(d, "kvarenad_requests_failed_worker_total") == 1 &&
		      metric(d, "kvarenad_step_failures_total") >= 4,
		      "metrics: %llu failed steps, %llu bisections, 1 request charged",
		      (unsigned long long)metric(d, "kvarenad_step_failures_total"),
		      (unsigned long long)metric(d, "kvarenad_step_bisections_total"));
		if (!share)
			kvd_destroy(d);
	}
	/* what the failed steps may have left in its KV is not trusted
	 * (sched.c, kvd_job_let_go): its conversation keeps no block */
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv;
		uint32_t kept = 0, seen = 0;

		for (cv = d->convs; cv; cv = cv->next)
			if (cv->text && !strncmp(cv->text, p[2], strlen(p[2]))) {
				seen++;
				kept += kvd_conv_blocks(cv);
			}
		CHECK(!kept, "the failed member's conversation (%u) keeps none of its KV (%u "
		      "blocks)", seen, kept);
	}
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/*
 * A prompt that continues more idle conversations than the candidates
 * kept (KVD_MAX_CANDS, 32): 40 conversations whose texts are each the
 * next one's prefix, and a prompt extending the longest. The longest
 * candidates are the ones kept: it continues the longest conversation,
 * and the same prompt at once (the longest taken) the next longest.
 */
/*
 * A start that fails (here the workers' program cannot be run) says why
 * and leaves nothing behind: no worker, no queue, no memory (the leak
 * checker at exit).
 */
static void test_start_fails(void)
{
	struct kvd_config c;
	struct kvd *d = NULL;
	char err[256] = "";
	int rc;

	base_config(&c);
	rc = kvd_create(&c, "/nonexistent/kvarenad", &d, err, sizeof(err));
	CHECK(rc && !d && strstr(err, "workers"), "a start whose workers cannot run fails: %s",
	      err);
}

static int j_ok(const struct reply *r)
{
	return r->done && !r->error;
}

static void test_many_candidates(void)
{
	enum { N = 40 };
	struct kvd_config c;
	struct kvd *d;
	struct reply *a = calloc(N + 1, sizeof(*a)), *b = calloc(N + 1, sizeof(*b));
	struct kvd_job *jobs[N] = { 0 };
	struct kvd_error err;
	char (*p)[2048] = calloc(N + 1, sizeof(*p));
	uint32_t i, same = 0;

	if (!a || !b || !p)
		goto out;
	base_config(&c);
	c.kv_blocks = 1024;
	/* the chain's replies, one token each, each prompt tokenized whole
	 * (no conversation continued) as the conversations below are */
	c.retention = 0;
	d = start(&c);
	if (!d)
		goto out;
	snprintf(p[0], sizeof(p[0]), "a chain of turns: t0");
	for (i = 0; i < N; i++) {
		if (ask(d, p[i], 0, 1, 1, &a[i], NULL))
			break;
		snprintf(p[i + 1], sizeof(p[i + 1]), "%s%.*s t%u", p[i], (int)a[i].len,
			 a[i].text, i + 1);
	}
	kvd_destroy(d);
	CHECK(i == N, "the chain of %u one-token replies", i);
	if (i < N)
		goto out;
	/* each turn as a conversation of its own: longest first, so none is
	 * taken by a shorter prompt submitted after it */
	c.retention = 1;
	d = start(&c);
	if (!d)
		goto out;
	for (i = N; i-- > 0;) {
		struct rq q = { p[i], 0, 1, 1, 0, NULL, NULL };

		jobs[i] = submit(d, &q, &err);
	}
	for (i = 0; i < N; i++)
		if (jobs[i] && !collect_reply(d, jobs[i], &b[i], NULL) &&
		    b[i].len == a[i].len && !memcmp(b[i].text, a[i].text, a[i].len))
			same++;
	CHECK(same == N, "%u conversations whose texts are each the next one's prefix "
	      "(%u replies as in the chain)", N, same);
	/* twice at once: the second finds the longest taken by the first */
	{
		struct rq q = { p[N], 0, 1, 1, 0, NULL, NULL };
		struct kvd_job *j1 = submit(d, &q, &err), *j2 = submit(d, &q, &err);

		if (j1)
			collect_reply(d, j1, &b[N], NULL);
		if (j2)
			collect_reply(d, j2, &a[N], NULL);
	}
	CHECK(j_ok(&b[N]) && !strcmp(b[N].session, b[N - 1].session) && j_ok(&a[N]) &&
	      !strcmp(a[N].session, b[N - 2].session), "a prompt with %u candidates continues "
	      "the longest conversation, the same prompt at once the next longest (%s %s: "
	      "%s %s)", N, b[N].session, a[N].session, b[N - 1].session, b[N - 2].session);
	kvd_destroy(d);
out:
	free(p);
	free(b);
	free(a);
}

/*
 * A step that fails once (a passing fault: its retry succeeds) voids the
 * step queued behind it on the same worker, which read KV the failed one
 * never wrote: a prompt of two chunks whose first fails is answered with
 * the tokens of its run alone, not with a token sampled over that KV.
 * Stages shared (the default) and apart: apart, the prefill worker's own
 * second step takes the prompt's next chunk (step.c's depth loop), and
 * the decode worker's takes none.
 */
static void void_behind(int share)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply ref, r;
	char p[1024], flag[64];
	uint64_t chunks;
	int o, k, fd;

	o = snprintf(p, sizeof(p), "<|im_start|>user\nvoided:");
	for (k = 0; k < 40; k++)
		o += snprintf(p + o, sizeof(p) - (size_t)o, " v%d", (k * 7) % 23);
	snprintf(p + o, sizeof(p) - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
	snprintf(flag, sizeof(flag), "/tmp/kvd-fail-%d", (int)getpid());
	memset(&ref, 0, sizeof(ref));
	memset(&r, 0, sizeof(r));
	base_config(&c);
	c.steps_in_flight = 2;
	c.share_stages = share;
	d = start(&c);
	if (!d)
		return;
	/* two chunks: the first, then the last, sampled */
	c.chunk_tokens = (uint32_t)(kve_tokenize(d->tok, p, strlen(p), 1, NULL, 0) + 1) / 2;
	kvd_destroy(d);
	d = start(&c);
	if (!d)
		return;
	ask(d, p, 0, 1, 12, &ref, NULL);
	CHECK(metric(d, "kvarenad_prefill_chunks_total") == 2, "alone: the prompt is two "
	      "chunks of %u tokens", c.chunk_tokens);
	kvd_destroy(d);
	set_env("KVD_TEST_FAIL_FILE", flag);
	d = start(&c);
	if (!d)
		goto out;
	fd = open(flag, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	ask(d, p, 0, 1, 12, &r, NULL);
	chunks = metric(d, "kvarenad_prefill_chunks_total");
	CHECK(access(flag, F_OK) && metric(d, "kvarenad_step_failures_total") == 1 &&
	      chunks == 4, "stages %s: the first chunk failed once with the last queued "
	      "behind it (%llu chunks sent: 4)", share ? "shared" : "apart",
	      (unsigned long long)chunks);
	CHECK(same_tokens(&r, &ref), "the voided chunk's answer is not taken: the tokens "
	      "of the run alone (%s)", r.error ? r.err : "");
	kvd_destroy(d);
out:
	unlink(flag);
	set_env("KVD_TEST_FAIL_FILE", NULL);
}

static void test_void_behind(void)
{
	void_behind(1);
	void_behind(0);
}

#ifdef KVD_TEST_HOOKS
/*
 * The agent loop, driven honestly: a random-weight model never calls a
 * tool by itself, so the test hook (KVD_TEST_HOOKS, sched.c, compiled into
 * this binary only) feeds fixed reply texts in place of a round's first
 * sampled token; everything after that is the daemon's: parsing the calls,
 * TOOL_WAIT, running them in the sandbox, appending the results, prefilling
 * them and decoding the next round with the real model.
 */
struct trun {
	uint32_t round, index;
	char name[32], reason[16], output[1024];
	int code;
};

struct treply {
	struct reply r;
	struct trun runs[8];
	uint32_t n_runs;
};

static void script(struct kvd *d, const char *const *replies, uint32_t n)
{
	uint32_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->n_test_replies; i++)
		free(d->test_replies[i]);
	for (i = 0; i < n && i < 8; i++)
		d->test_replies[i] = strdup(replies[i]);
	d->n_test_replies = i;
	pthread_mutex_unlock(&d->lock);
}

/* gate: a FIFO in the session's work dir the first tool blocks on; the
 * session's kernel state is sampled while it does, then it is opened. */
static struct kvd_job *submit_tools(struct kvd *d, const char *prompt, uint32_t tenant,
				    uint32_t max_tokens)
{
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_job *j = NULL;

	request_init(&rq, prompt, max_tokens);
	rq.tenant = tenant;
	rq.server_tools = ~0u;
	if (kvd_job_submit(d, &rq, &j, &err))
		printf("submit: %s\n", err.message);
	return j;
}

static int collect(struct kvd_job *j, struct treply *t, int (*tick)(void *), void *arg)
{
	struct kvd_event ev;
	int rc;

	memset(t, 0, sizeof(*t));
	for (;;) {
		rc = kvd_job_next(j, &ev, tick ? 50 : 60000);
		if (rc == 0) {
			if (!tick || tick(arg) < 0)
				break;
			continue;
		}
		if (ev.type == KVD_EV_TOKEN) {
			if (t->r.len + ev.text_len < sizeof(t->r.text)) {
				memcpy(t->r.text + t->r.len, ev.text, ev.text_len);
				t->r.len += ev.text_len;
			}
		} else if (ev.type == KVD_EV_TOOL_RUN) {
			struct trun *x = &t->runs[t->n_runs < 8 ? t->n_runs++ : 7];

			x->round = ev.tool_run->round;
			x->index = ev.tool_run->index;
			x->code = ev.tool_run->exit_code;
			snprintf(x->name, sizeof(x->name), "%s", ev.tool_run->name);
			snprintf(x->reason, sizeof(x->reason), "%s", ev.tool_run->exit_reason);
			snprintf(x->output, sizeof(x->output), "%.*s",
				 (int)ev.tool_run->output_len, ev.tool_run->output);
		} else if (ev.type == KVD_EV_DONE) {
			t->r.usage = ev.usage;
			t->r.finish = ev.finish;
			snprintf(t->r.session, sizeof(t->r.session), "%s", ev.session_id);
			break;
		} else {
			printf("error event: %s\n", ev.err.message);
			t->r.error = 1;
			break;
		}
	}
	kvd_job_free(j);
	return t->r.error ? -1 : 0;
}

struct gate {
	struct kvd *d;
	struct kvd_job *j;
	char root[512];
	int opened, saw_wait, tool_class, ticks;
	int arena_wait;			/* the arena's own record said TOOL_WAIT */
	uint32_t arena_class;
	uint64_t arena_expected_us;
	uint64_t seq1;			/* the job's sequence id in round 1 */
	int renewed;			/* a later round's id was another */
};

/* After the gate: a later round names its sequence anew to the workers
 * (sched.c, kvd_resume_round), whose per-sequence state (the matcher
 * cache) is keyed by it, so that no round meets the last one's. */
static void gate_rounds(struct gate *g)
{
	struct kvd_conv *c;

	pthread_mutex_lock(&g->d->lock);
	for (c = g->d->convs; c && c->job != g->j; c = c->next)
		;
	if (c && c->job->seq_id != g->seq1)
		g->renewed = 1;
	pthread_mutex_unlock(&g->d->lock);
}

static int gate_tick(void *arg)
{
	struct gate *g = arg;
	struct kvd_conv *c;
	char path[700], view[640];
	int fd;

	if (g->opened) {
		gate_rounds(g);
		return 0;
	}
	if (++g->ticks > 1200)	/* 60 s */
		return -1;
	pthread_mutex_lock(&g->d->lock);
	for (c = g->d->convs; c && c->job != g->j; c = c->next)
		;
	if (c) {
		/* the work directory is the sandbox spawner's mount */
		kvd_agent_workdir_view(g->d, c->id, view, sizeof(view));
		snprintf(path, sizeof(path), "%s/gate", view);
		if (c->kstate == KVA_STATE_TOOL_WAIT && c->job->state == JOB_TOOL_RUNNING) {
			struct kva_session_info si = { .size = sizeof(si) };

			g->saw_wait = 1;
			g->seq1 = c->job->seq_id;
			g->tool_class = (int)c->tool_class;
			/* what the arena (kvarena.ko, or the memfd backend) holds */
			if (c->has_kv && kva_session_get_info(g->d->arena, c->as.sid, &si) == 0 &&
			    si.state == KVA_STATE_TOOL_WAIT) {
				g->arena_wait = 1;
				g->arena_class = si.tool_class;
				g->arena_expected_us = si.expected_wait_us;
			}
		}
	}
	pthread_mutex_unlock(&g->d->lock);
	if (!c || !g->saw_wait)
		return 0;
	/* ENXIO until the tool has it open for reading */
	fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "go\n", 3) == 3)
			g->opened = 1;
		close(fd);
	}
	return 0;
}

static uint32_t ntok(struct kvd *d, const char *s)
{
	int n = kve_tokenize(d->tok, s, strlen(s), 0, NULL, 0);

	return n > 0 ? (uint32_t)n : 0;
}

static uint32_t ntok_result(struct kvd *d, const char *output)
{
	char t[4096];

	snprintf(t, sizeof(t), "<|im_end|>\n<|im_start|>tool\n<tool_response>\n%s\n"
		 "</tool_response><|im_end|>\n<|im_start|>assistant\n", output);
	return ntok(d, t);
}

static int dir_exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A scratch directory /tmp/NAME-XXXXXX for a tool test, opened to other
 * users when the tools run as nobody (shared), with the paths of its
 * policy file and work directory. -1 (a failed check) when it cannot be
 * made. */
static int tool_scratch(const char *name, int shared, char root[256], char policy[300],
			char work[300])
{
	snprintf(root, 256, "/tmp/%s-XXXXXX", name);
	if (!mkdtemp(root)) {
		CHECK(0, "mkdtemp");
		return -1;
	}
	if (shared)
		chmod(root, 0755);
	snprintf(policy, 300, "%s/policy.ini", root);
	snprintf(work, 300, "%s/work", root);
	return 0;
}

/* A daemon config with server-side sh for tenant a (id 1): a scratch
 * root, its policy (sh with the given timeout) and work root; the caller
 * adds to it. 0, or -1 (nothing to clean). */
static int sh_tools_config(struct kvd_config *c, const char *name, const char *timeout,
			   char root[256], char work[300])
{
	char policy[300];
	FILE *f;

	if (tool_scratch(name, 0, root, policy, work))
		return -1;
	f = fopen(policy, "w");
	if (!f)
		return -1;
	fprintf(f, "[sh]\nexec = /usr/bin\ntimeout = %s\npids = 32\n", timeout);
	fclose(f);
	base_config(c);
	snprintf(c->tools_policy, sizeof(c->tools_policy), "%s", policy);
	snprintf(c->tools_workdir_root, sizeof(c->tools_workdir_root), "%s", work);
	c->tools_enabled = 1u << KVD_TOOL_SH;
	c->tools_max_rounds = 2;
	c->n_tenants = 1;
	snprintf(c->tenants[0].name, sizeof(c->tenants[0].name), "a");
	c->tenants[0].id = 1;
	c->tenants[0].server_tools = 1;
	return 0;
}

/*
 * A server-side tool round at the edges (sched.c, tools_apply and
 * kvd_resume_round). Tool results that leave no room for a token end the
 * reply with "length" before the round is counted or run: its context is
 * not a prompt that was prefilled. A round whose KV was discarded while
 * its tool ran (the tier's discard keeps the session with no block, here
 * done as tiering.c does it) is readmitted like a preempted job and
 * shares the prefix cache's blocks of its context: only the tail and the
 * tool results are computed, and the reply is the one with its KV kept.
 */
static void test_round_edges(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct treply t, ref;
	struct gate g = { 0 };
	char root[256], work[300], p1[4096];
	uint32_t bt, nq = 0, ctx2, bound;
	uint64_t tok0 = 0, tok1;
	int i, freed = 0;

	if (sh_tools_config(&c, "kvd-edges", "10s", root, work))
		return;
	d = start(&c);
	if (!d)
		return;
	bt = d->geom.block_tokens;
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nlist the numbers<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);

	/* results past the context: "length", the round neither run nor counted */
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"seq 1 3000\"}}\n"
			"</tool_call>",
			"done",
		};

		script(d, r, 2);
		CHECK(collect(submit_tools(d, p1, 1, 64), &t, NULL, NULL) == 0 &&
		      t.r.finish == KVD_FINISH_LENGTH && t.n_runs == 1 &&
		      t.r.usage.prompt_tokens < d->ctx_len,
		      "tool results past the context (%u): the reply ends \"length\" with round "
		      "1's prompt only in its usage (%u prompt tokens)", d->ctx_len,
		      t.r.usage.prompt_tokens);
	}

	/* the same two rounds, KV kept, then discarded while the tool runs */
	for (i = 0; i < 2; i++) {
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"mkfifo gate && "
			"read x < gate && echo ok\"}}\n</tool_call>",
			"checked",
		};
		char q[4200];

		/* a conversation of its own each time: another user turn */
		snprintf(q, sizeof(q), "%s<|im_start|>user\ncheck it, run %d<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt, i);
		nq = ntok(d, q);
		script(d, r, 2);
		memset(&g, 0, sizeof(g));
		g.d = d;
		g.j = submit_tools(d, q, 1, 64);
		snprintf(g.root, sizeof(g.root), "%s", work);
		for (int k = 0; i && k < 1200 && !freed && g.j; k++) {
			struct kvd_conv *cv;

			pthread_mutex_lock(&d->lock);
			for (cv = d->convs; cv && cv->job != g.j; cv = cv->next)
				;
			if (cv && cv->job->state == JOB_TOOL_RUNNING && cv->has_kv &&
			    cv->as.s.n_blocks) {
				tok0 = d->m.step_tokens;
				kvd_conv_free_blocks(d, cv);	/* as the tier's discard */
				freed = cv->has_kv && !cv->as.s.n_blocks;
			}
			pthread_mutex_unlock(&d->lock);
			if (!freed)
				usleep(50000);
		}
		collect(g.j, i ? &t : &ref, gate_tick, &g);
	}
	tok1 = metric(d, "kvarenad_step_tokens_total");
	/* round 2's context is the usage's prompt less round 1's; the cache
	 * keeps at least round 1's prompt's full blocks (the scripted reply's
	 * KV is computed in round 2: a hook's text, not decoded) */
	ctx2 = t.r.usage.prompt_tokens > nq ? t.r.usage.prompt_tokens - nq : 0;
	bound = ctx2 - nq / bt * bt + bt;
	CHECK(freed && !t.r.error && t.r.len == ref.r.len && !memcmp(t.r.text, ref.r.text, t.r.len) &&
	      ctx2 > nq && tok1 - tok0 < bound,
	      "a round whose KV was discarded while its tool ran replies as with it kept, "
	      "computing %llu tokens of its %u (its prompt's %u full blocks shared: under %u)",
	      (unsigned long long)(tok1 - tok0), ctx2, nq / bt, bound);
	kvd_destroy(d);
	snprintf(p1, sizeof(p1), "rm -rf '%s'", root);
	if (system(p1))
		CHECK(0, "cleanup");
}

/*
 * A server-side tool round whose KV went to disk while its tool ran, and
 * whose restore finds no room when the results come, holds admission as
 * a job first in line does (admit.c, kvd_admit's JOB_KV_WAIT): a request
 * that arrives meanwhile and would fit in the room left waits behind it
 * instead of taking that room, and the round goes on first once the room
 * is back. The conversation is spilled as the tier does under pressure;
 * the test holds the rest of the arena.
 */
static void test_round_restore_waits(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct treply t;
	struct gate g = { 0 };
	struct kvd_conv *cv;
	struct kve_arena_session blk = { 0 };
	struct kvd_job *q = NULL;
	struct kvd_error err;
	struct reply rq;
	char root[256], work[300], p1[4096], spill[320];
	const char *pq = "<|im_start|>user\nshort<|im_end|>\n<|im_start|>assistant\n";
	uint32_t bt, need_q, hold = 0;
	uint64_t turn0, turns = 0;
	int i, state = 0, opened = 0, q_waited = 0, kv_wait = 0;

	if (sh_tools_config(&c, "kvd-rwait", "20s", root, work))
		return;
	snprintf(spill, sizeof(spill), "%s/spill", root);
	snprintf(c.tier_dir, sizeof(c.tier_dir), "%s", spill);
	c.tier_prefetch = 0;
	c.prefix_cache = 0;
	d = start(&c);
	if (!d)
		goto out;
	bt = d->geom.block_tokens;
	need_q = (ntok(d, pq) + bt - 1) / bt;
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nwait for the gate<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"mkfifo gate && "
			"read x < gate && echo ok\"}}\n</tool_call>",
			"ok",
		};

		script(d, r, 2);
	}
	g.d = d;
	g.j = submit_tools(d, p1, 1, 64);
	snprintf(g.root, sizeof(g.root), "%s", work);
	/* its tool runs: its KV to disk, then the arena held but for room
	 * for the short request */
	for (i = 0; g.j && i < 2000 && state < 2; i++) {
		pthread_mutex_lock(&d->lock);
		for (cv = d->convs; cv && cv->job != g.j; cv = cv->next)
			;
		if (cv && state == 0 && cv->job->state == JOB_TOOL_RUNNING && cv->has_kv &&
		    cv->as.s.n_blocks) {
			kvd_tiering_evict(d, cv);
			state = 1;
		}
		if (cv && state == 1 && cv->tier_file && !cv->tier_op && !cv->as.s.n_blocks) {
			uint32_t free_now = kvd_blocks_free(d);

			hold = free_now > need_q + 1 ? free_now - need_q - 1 : 0;
			if (hold && !hold_blocks(d, hold, &blk, &opened))
				state = 2;
			else
				state = 3;
		}
		pthread_mutex_unlock(&d->lock);
		usleep(10000);
	}
	CHECK(state == 2, "the round's KV spilled while its tool runs; the arena held but for %u "
	      "blocks (%u held)", need_q + 1, hold);
	if (state != 2)
		goto collect;
	/* the tool returns: the round waits for room to restore its KV */
	while (g.j && !g.opened && !gate_tick(&g))
		usleep(20000);
	for (i = 0; i < 2000 && !kv_wait; i++) {
		pthread_mutex_lock(&d->lock);
		kv_wait = g.j->state == JOB_KV_WAIT;
		pthread_mutex_unlock(&d->lock);
		usleep(5000);
	}
	{
		struct kvd_request r0;

		request_init(&r0, pq, 4);
		if (kvd_job_submit(d, &r0, &q, &err))
			q = NULL;
	}
	pthread_mutex_lock(&d->lock);
	turn0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; q && i < 3000 && turns < 10; i++) {
		usleep(10000);
		pthread_mutex_lock(&d->lock);
		turns = d->n_step_us - turn0;
		q_waited = q->state == JOB_QUEUED && g.j->state == JOB_KV_WAIT;
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(kv_wait && q && turns >= 10 && q_waited,
	      "the round waits to restore its KV; a short request that would fit the room left "
	      "waits behind it (%llu turns)", (unsigned long long)turns);
collect:
	if (opened) {
		pthread_mutex_lock(&d->lock);
		kve_arena_session_close(d->kv, &blk);
		pthread_mutex_unlock(&d->lock);
		kvd_wake(d);
	}
	CHECK(g.j && collect(g.j, &t, gate_tick, &g) == 0 && t.n_runs == 1,
	      "with the room back the round restores and completes");
	memset(&rq, 0, sizeof(rq));
	if (q)
		CHECK(collect_reply(d, q, &rq, NULL) == 0, "the short request completes after it");
	kvd_destroy(d);
out:
	snprintf(p1, sizeof(p1), "rm -rf '%s'", root);
	if (system(p1))
		CHECK(0, "cleanup");
}

static void test_agent_loop(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct treply t;
	struct gate g = { 0 };
	char root[256], work[300], p1[4096], path[700], view[640];
	const char *decl;
	FILE *f;
	int i;

	/* a short timeout so the hostile cases end quickly */
	if (sh_tools_config(&c, "kvd-tools", "3s", root, work))
		return;
	c.tools_enabled = 1u << KVD_TOOL_SH | 1u << KVD_TOOL_C_COMPILE_RUN |
			  1u << KVD_TOOL_READ_FILE | 1u << KVD_TOOL_WRITE_FILE;
	c.n_tenants = 2;
	snprintf(c.tenants[1].name, sizeof(c.tenants[1].name), "b");
	c.tenants[1].id = 2;
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts with server-side tools (sandbox policy %s)",
	      c.tools_policy);
	if (!d)
		return;
	decl = kvd_server_tools(d);
	CHECK(decl && strstr(decl, "\"name\": \"sh\"") && strstr(decl, "\"c_compile_run\"") &&
	      strstr(decl, "\"write_file\"") && !strstr(decl, "list_dir"),
	      "declarations of the enabled tools only");
	CHECK(kvd_server_tools_allowed(d, 1) && !kvd_server_tools_allowed(d, 2),
	      "server_tools = yes for tenant a, not for b");

	/* two rounds: the first writes a file (after the gate), the second
	 * reads it back: the work dir persists across the session's calls */
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nwrite a note, then read it<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	{
		const char *r[] = {
			"I will write it.\n<tool_call>\n{\"name\": \"sh\", \"arguments\": "
			"{\"command\": \"mkfifo gate && read x < gate && echo hello > note.txt "
			"&& echo wrote\"}}\n</tool_call>",
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"cat "
			"note.txt; ls\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", "
			"\"arguments\": {\"path\": \"/home/tool/note.txt\"}}\n</tool_call>",
		};
		uint64_t waits0 = metric(d, "kvarenad_tool_waits_total");

		script(d, r, 2);
		g.d = d;
		g.j = submit_tools(d, p1, 1, 6);
		snprintf(g.root, sizeof(g.root), "%s", work);
		CHECK(g.j && collect(g.j, &t, gate_tick, &g) == 0, "a two-round tool request completes");
		CHECK(g.saw_wait && g.opened,
		      "while the tool ran, the job was JOB_TOOL_RUNNING and its session TOOL_WAIT (class %d)",
		      g.tool_class);
		CHECK(g.renewed, "round 2 names its sequence anew to the workers (round 1: %llu)",
		      (unsigned long long)g.seq1);
		pthread_mutex_lock(&d->lock);
		CHECK(g.tool_class == (int)kvd_toolclass(d, 1, "sh", 2),
		      "its tool class is sh's (of tenant a)");
		CHECK(g.arena_wait && g.arena_class == (uint32_t)g.tool_class &&
		      g.arena_expected_us > 0,
		      "the arena's session info says TOOL_WAIT, class %u, expected wait %llu us",
		      g.arena_class, (unsigned long long)g.arena_expected_us);
		pthread_mutex_unlock(&d->lock);
		CHECK(t.n_runs == 3 && t.runs[0].round == 1 && t.runs[1].round == 2 &&
		      t.runs[2].round == 2 && t.runs[2].index == 1,
		      "3 tool runs reported: round 1 sh, round 2 sh + read_file in parallel (%u)",
		      t.n_runs);
		CHECK(!strcmp(t.runs[0].reason, "exit") && t.runs[0].code == 0 &&
		      !strcmp(t.runs[0].output, "wrote"), "round 1: sh ran in the sandbox: \"%s\"",
		      t.runs[0].output);
		CHECK(strstr(t.runs[1].output, "hello\n") && strstr(t.runs[1].output, "note.txt"),
		      "round 2: the file written in round 1 is there: \"%s\"", t.runs[1].output);
		CHECK(!strcmp(t.runs[2].output, "hello"),
		      "round 2: read_file of /home/tool/note.txt reads it: \"%s\"", t.runs[2].output);
		CHECK(metric(d, "kvarenad_tool_waits_total") == waits0 + 2,
		      "both tool waits measured");
		CHECK(metric(d, "kvarenad_tool_runs_total{tool=\"sh\",reason=\"exit\"}") == 2 &&
		      metric(d, "kvarenad_tool_runs_total{tool=\"read_file\",reason=\"exit\"}") == 1,
		      "tool runs counted by tool and exit reason");
		{
			char r2res[3072];
			uint32_t p0 = (uint32_t)kve_tokenize(d->tok, p1, strlen(p1), 1, NULL, 0);
			uint32_t a1 = ntok_result(d, t.runs[0].output), a2;
			uint32_t want;

			/* round 2's results are two tool turns in one piece */
			snprintf(r2res, sizeof(r2res), "%s\n</tool_response><|im_end|>\n"
				 "<|im_start|>tool\n<tool_response>\n%s", t.runs[1].output,
				 t.runs[2].output);
			a2 = ntok_result(d, r2res);
			want = p0 + ntok(d, r[0]) + a1 + ntok(d, r[1]) + a2;
			CHECK(t.r.usage.prompt_tokens - t.r.usage.cached_tokens == want,
			      "only new tokens were prefilled: %u = prompt %u + replies + results "
			      "(%u, %u)", t.r.usage.prompt_tokens - t.r.usage.cached_tokens, p0, a1, a2);
			CHECK(metric(d, "kvarenad_tool_result_tokens_total") == a1 + a2,
			      "tool-result tokens counted: %u", a1 + a2);
		}
		CHECK(metric(d, "kvarenad_handoffs_total") == 3,
		      "three prefills: the prompt and each round's appended text (hand-offs "
		      "to decoding)");
		CHECK(t.r.usage.completion_tokens >= 1 && t.r.len > strlen(r[0]) + strlen(r[1]),
		      "the model decoded after the tool results (%u tokens)",
		      t.r.usage.completion_tokens);
		{
			struct kva_session_info si = { .size = sizeof(si) };
			struct kvd_conv *cv;
			int got = 0;

			pthread_mutex_lock(&d->lock);
			cv = kvd_conv_find_id(d, t.r.session);
			if (cv && cv->has_kv)
				got = kva_session_get_info(d->arena, cv->as.sid, &si) == 0;
			pthread_mutex_unlock(&d->lock);
			CHECK(got && si.state_ns[KVA_STATE_TOOL_WAIT] > 0 &&
			      si.state != KVA_STATE_TOOL_WAIT,
			      "the session spent %llu ns in TOOL_WAIT, and left it",
			      (unsigned long long)si.state_ns[KVA_STATE_TOOL_WAIT]);
		}
		snprintf(path, sizeof(path), "%s/%s", work, t.r.session);
		CHECK(dir_exists(path), "the session's work dir exists: %s", path);
		CHECK(kvd_session_delete(d, t.r.session, 1) == 0, "DELETE the session");
		for (i = 0; i < 200 && dir_exists(path); i++) {
			struct timespec ts = { 0, 50000000 };

			nanosleep(&ts, NULL);	/* removal runs on a tool thread */
		}
		CHECK(!dir_exists(path), "a forgotten session's work dir is removed");
	}

	/* max_rounds stops a loop */
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"echo 1\"}}\n</tool_call>",
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"echo 2\"}}\n</tool_call>",
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"echo 3\"}}\n</tool_call>",
		};

		snprintf(p1, sizeof(p1), "%s<|im_start|>user\ncount<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		script(d, r, 3);
		CHECK(collect(submit_tools(d, p1, 1, 6), &t, NULL, NULL) == 0 && t.n_runs == 2 &&
		      strstr(t.r.text, "echo 3") && t.r.finish == KVD_FINISH_STOP,
		      "max_rounds = 2: two rounds run, the third reply's call is returned (%u runs)",
		      t.n_runs);
		CHECK(metric(d, "kvarenad_tool_rounds_exhausted_total") == 1,
		      "counted in tool_rounds_exhausted_total");
	}

	/* a tenant without server_tools never runs one */
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"touch owned\"}}\n</tool_call>",
		};

		snprintf(p1, sizeof(p1), "%s<|im_start|>user\ntouch it<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 2, 4), &t, NULL, NULL) == 0 && t.n_runs == 0 &&
		      strstr(t.r.text, "touch owned"),
		      "tenant b (server_tools = no): the call is returned, nothing runs");
		snprintf(path, sizeof(path), "%s/%s", work, t.r.session);
		CHECK(!dir_exists(path), "and no work dir was made for it");
	}

	/* c_compile_run (gcc, then the program, each in the sandbox, stdin fed)
	 * beside write_file, in one round */
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"c_compile_run\", \"arguments\": {\"code\": \"#include <stdio.h>\\nint main(void) { int x; if (scanf(\\\"%d\\\", &x) != 1) return 1; printf(\\\"%d\\\\n\\\", 2 * x); return 0; }\", \"stdin\": \"21\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"/home/tool/w.txt\", \"content\": \"data\"}}\n</tool_call>",
		};
		char buf[64] = "";

		snprintf(p1, sizeof(p1), "%s<|im_start|>user\ndouble 21 in C<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 1, 4), &t, NULL, NULL) == 0 && t.n_runs == 2,
		      "c_compile_run and write_file run as one round");
		CHECK(!strcmp(t.runs[0].name, "c_compile_run") && !strcmp(t.runs[0].reason, "exit") &&
		      !strcmp(t.runs[0].output, "42"),
		      "c_compile_run compiled and ran the program on its stdin: \"%s\" (%s)",
		      t.runs[0].output, t.runs[0].reason);
		kvd_agent_workdir_view(d, t.r.session, view, sizeof(view));
		snprintf(path, sizeof(path), "%s/w.txt", view);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = 0;
			fclose(f);
		}
		CHECK(!strcmp(t.runs[1].reason, "exit") && !strcmp(buf, "data"),
		      "write_file wrote /home/tool/w.txt into the session's work dir");
	}

	/* hostile tools, in parallel: a fork bomb and a spin past the timeout */
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"b() { b | b & }; while :; do b; done\"}}\n</tool_call>\n"
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"while :; do :; done\"}}\n</tool_call>\n"
			"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"cat /etc/shadow\"}}\n</tool_call>\n"
			"<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"../../../../etc/passwd\"}}\n</tool_call>",
		};
		struct reply ok;

		snprintf(p1, sizeof(p1), "%s<|im_start|>user\nbreak things<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 1, 4), &t, NULL, NULL) == 0 && t.n_runs == 4,
		      "a fork bomb, a CPU spin and two escapes run as one round of four calls");
		CHECK(!strcmp(t.runs[2].reason, "exit") && t.runs[2].code != 0 &&
		      !strstr(t.runs[2].output, "root:"),
		      "sh: cat /etc/shadow fails inside the sandbox: \"%s\"", t.runs[2].output);
		CHECK(!strcmp(t.runs[3].reason, "refused") && !strstr(t.runs[3].output, "root:"),
		      "read_file ../../../../etc/passwd is refused: \"%s\"", t.runs[3].output);
		CHECK(!strcmp(t.runs[1].reason, "timeout"),
		      "the spin is killed at the policy's timeout (%s)", t.runs[1].reason);
		CHECK(strcmp(t.runs[0].reason, "exit") || t.runs[0].code != 0,
		      "the fork bomb (forking until stopped) ends without success (%s %d)", t.runs[0].reason,
		      t.runs[0].code);
		CHECK(ask(d, p1, 0, 1, 4, &ok, NULL) == 0 && kvd_ready(d),
		      "the daemon still serves afterwards");
	}
	kvd_destroy(d);
	CHECK(!dir_exists(work) || rmdir(work) == 0,
	      "every session's work dir is gone after shutdown");
	unlink(c.tools_policy);
	rmdir(root);
}

/*
 * The escape suite through the daemon: each attempt of tests/sandbox/
 * escape.sh made by the model's own tool calls (sh running kvs-probe, and
 * c_compile_run), run by the orchestrator in the sandbox: each tool result
 * must report the refusal or the limit (the probe's BLOCKED line with the
 * kernel's reason, or the launcher's exit reason), nothing on the host may
 * change, and the daemon keeps serving, another session's request included
 * while hostile tools run. On this host the cgroup v2 limits are not
 * enforceable: the fork and memory bombs meet the rlimit stand-ins, as in
 * escape.sh; the cgroup limits themselves are the guest lane's
 * (guest-limits.sh). Needs root (a setuid-root binary, a host listener)
 * and KVD_TEST_PROBE (make check-orch sets it).
 */
struct probe_env {
	struct kvd *d;
	char root[256], probe[300], suid[300], secret[300], work[300];
	int port;
};

static int blocked_ok(const struct trun *r)
{
	return strstr(r->output, "BLOCKED") && !strstr(r->output, "ESCAPED") &&
	       !strstr(r->output, "SUCCEEDED");
}

/* a process of this test's probe (its path is unique to the test) */
static int probe_alive(const char *probe, const char *what)
{
	char path[300], buf[512];
	struct dirent *e;
	DIR *dir = opendir("/proc");
	int found = 0;

	if (!dir)
		return 0;
	while (!found && (e = readdir(dir))) {
		ssize_t n, i;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		for (i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n] = 0;
		found = strstr(buf, probe) && strstr(buf, what);
	}
	closedir(dir);
	return found;
}

static long file_size(const char *p)
{
	struct stat st;

	return stat(p, &st) ? -1 : (long)st.st_size;
}

/* one round of sh calls, "PROBE ARGS" each; returns the reply */
static int probe_round(struct probe_env *e, const char *const *cmds, uint32_t n,
		       struct treply *t, int ask_meanwhile)
{
	char reply[8192], p1[4096];
	size_t len = 0;
	uint32_t i;
	const char *r[1] = { reply };
	struct kvd_job *j;
	int rc;

	for (i = 0; i < n; i++)
		len += (size_t)snprintf(reply + len, sizeof(reply) - len,
					"<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": "
					"\"%s\"}}\n</tool_call>\n", cmds[i]);
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\ntry to escape<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	script(e->d, r, 1);
	j = submit_tools(e->d, p1, 0, 4);
	if (ask_meanwhile) {
		struct reply ok;

		/* another session, served while the hostile round runs */
		snprintf(p1, sizeof(p1), "%s<|im_start|>user\nhello<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		CHECK(ask(e->d, p1, 0, 1, 4, &ok, NULL) == 0 && ok.usage.completion_tokens > 0,
		      "another session is served while the hostile round runs");
	}
	rc = j ? collect(j, t, NULL, NULL) : -1;
	return rc == 0 && t->n_runs == n ? 0 : -1;
}

static void test_escape(void)
{
	const char *probe_rel = getenv("KVD_TEST_PROBE");
	struct probe_env e = { 0 };
	struct kvd_config c;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct treply t;
	char path[700], view[640], policy[300], cmds[8][700], p1[4096];
	const char *cp[8];
	pid_t outside;
	int lfd, i, src, dst;
	FILE *f;

	if (geteuid() != 0 || !probe_rel || !realpath(probe_rel, path)) {
		printf("SKIP escape: needs root and KVD_TEST_PROBE (make check-orch sets it)\n");
		return;
	}
	snprintf(e.root, sizeof(e.root), "/tmp/kvd-escape-XXXXXX");
	if (!mkdtemp(e.root)) {
		CHECK(0, "mkdtemp");
		return;
	}
	chmod(e.root, 0755);
	/* the probe, a setuid-root copy of it, a secret beside the work dirs */
	snprintf(e.probe, sizeof(e.probe), "%s/kvs-probe", e.root);
	snprintf(e.suid, sizeof(e.suid), "%s/suid-kvs-probe", e.root);
	src = open(path, O_RDONLY | O_CLOEXEC);
	for (i = 0; i < 2; i++) {
		char buf[65536];
		ssize_t n;

		dst = open(i ? e.suid : e.probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
		lseek(src, 0, SEEK_SET);
		while (src >= 0 && dst >= 0 && (n = read(src, buf, sizeof(buf))) > 0)
			if (write(dst, buf, (size_t)n) != n)
				break;
		if (dst >= 0)
			close(dst);
	}
	if (src >= 0)
		close(src);
	if (chown(e.suid, 0, 0) || chmod(e.suid, 04755) || chmod(e.probe, 0755)) {
		CHECK(0, "the probe copies: %s", strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/secret", e.root);
	mkdir(path, 0755);
	snprintf(e.secret, sizeof(e.secret), "%s/secret/key", e.root);
	f = fopen(e.secret, "w");
	if (!f)
		return;
	fputs("secret\n", f);
	fclose(f);
	snprintf(e.work, sizeof(e.work), "%s/work", e.root);
	/* a real listener on the host's loopback */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 16) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl)) {
		CHECK(0, "listener: %s", strerror(errno));
		return;
	}
	e.port = ntohs(sa.sin_port);
	/* a process outside the sandbox, for the probe to try to kill */
	outside = fork();
	if (outside == 0) {
		pause();
		_exit(0);
	}
	snprintf(policy, sizeof(policy), "%s/policy.ini", e.root);
	f = fopen(policy, "w");
	if (!f)
		return;
	/* c_compile_run: the built-in section */
	/* 10 s: a memory bomb touching ~300 MiB (64 MiB + RLIMIT_AS's 256
	 * MiB of room) can take seconds on a loaded machine before RLIMIT_AS
	 * stops it (with 256M, ~500 MiB took more than 10 s at load 15) */
	fprintf(f, "[sh]\nexec = /usr/bin %s %s\ntimeout = 10s\npids = 32\nmemory = 64M\n",
		e.probe, e.suid);
	fclose(f);
	base_config(&c);
	snprintf(c.tools_policy, sizeof(c.tools_policy), "%s", policy);
	snprintf(c.tools_workdir_root, sizeof(c.tools_workdir_root), "%s", e.work);
	c.tools_enabled = 1u << KVD_TOOL_SH | 1u << KVD_TOOL_C_COMPILE_RUN |
			  1u << KVD_TOOL_READ_FILE | 1u << KVD_TOOL_LIST_DIR;
	c.tools_max_rounds = 1;
	e.d = start(&c);
	CHECK(e.d != NULL, "orchestrator starts with sh running kvs-probe (policy %s)", policy);
	if (!e.d)
		goto out;

	/* files: reads and writes outside, symlinks and .. out of the work dir */
	{
		static const char *const what[] = {
			"read /etc/shadow", "read a host file outside the work dir",
			"write /etc", "write a host path outside the work dir",
			"symlink to /etc/passwd", "symlink ../.. to a host file",
			"read ../.. out of the work dir", "control: write in the work dir",
		};

		snprintf(cmds[0], sizeof(cmds[0]), "%s read /etc/shadow", e.probe);
		snprintf(cmds[1], sizeof(cmds[1]), "%s read %s", e.probe, e.secret);
		snprintf(cmds[2], sizeof(cmds[2]), "%s write /etc/kvd-escape", e.probe);
		snprintf(cmds[3], sizeof(cmds[3]), "%s write %s/secret/planted", e.probe, e.root);
		snprintf(cmds[4], sizeof(cmds[4]), "%s symlink /etc/passwd", e.probe);
		snprintf(cmds[5], sizeof(cmds[5]), "%s symlink ../../../../../..%s", e.probe,
			 e.secret);
		snprintf(cmds[6], sizeof(cmds[6]), "%s read ../../../../../..%s", e.probe, e.secret);
		snprintf(cmds[7], sizeof(cmds[7]), "%s write ./control", e.probe);
		for (i = 0; i < 8; i++)
			cp[i] = cmds[i];
		CHECK(probe_round(&e, cp, 8, &t, 0) == 0, "a round of 8 file escapes through sh "
		      "(%u runs)", t.n_runs);
		for (i = 0; i < 7 && i < (int)t.n_runs; i++)
			CHECK(blocked_ok(&t.runs[i]) && !strstr(t.runs[i].output, "root:") &&
			      !strstr(t.runs[i].output, "secret\n"),
			      "daemon sh: %s: %.*s", what[i],
			      (int)strcspn(t.runs[i].output, "\n"), t.runs[i].output);
		snprintf(path, sizeof(path), "%s/secret/planted", e.root);
		CHECK(access(path, F_OK) != 0 && access("/etc/kvd-escape", F_OK) != 0,
		      "nothing was written on the host");
		kvd_agent_workdir_view(e.d, t.r.session, view, sizeof(view));
		snprintf(path, sizeof(path), "%s/control", view);
		CHECK(t.n_runs == 8 && strstr(t.runs[7].output, "ESCAPED write") &&
		      access(path, F_OK) == 0,
		      "control: the same probe may write in its work dir (the walls are real)");
	}
	/* network, processes, the kernel's privileged interfaces, the bombs */
	{
		static const char *const what[] = {
			"TCP to 127.0.0.1 (network denied)", "ptrace / process_vm_writev of a sibling",
			"mount, umount, pivot_root, unshare/setns, bpf, modules, kexec, ...",
			"kill a process outside", "write /proc/sys and /sys",
			"a setuid-root binary",
		};

		snprintf(cmds[0], sizeof(cmds[0]), "%s connect 127.0.0.1 %d", e.probe, e.port);
		snprintf(cmds[1], sizeof(cmds[1]), "%s ptrace", e.probe);
		snprintf(cmds[2], sizeof(cmds[2]), "%s syscalls", e.probe);
		snprintf(cmds[3], sizeof(cmds[3]), "%s kill %d", e.probe, (int)outside);
		snprintf(cmds[4], sizeof(cmds[4]), "%s procsys", e.probe);
		snprintf(cmds[5], sizeof(cmds[5]), "%s euid", e.suid);
		for (i = 0; i < 6; i++)
			cp[i] = cmds[i];
		CHECK(probe_round(&e, cp, 6, &t, 0) == 0, "a round of 6 kernel escapes through sh "
		      "(%u runs)", t.n_runs);
		for (i = 0; i < 6 && i < (int)t.n_runs; i++)
			CHECK(blocked_ok(&t.runs[i]), "daemon sh: %s: %.*s", what[i],
			      (int)strcspn(t.runs[i].output, "\n"), t.runs[i].output);
		CHECK(kill(outside, 0) == 0, "the process outside lives on");
	}
	/* the bombs, in a round of their own (the rlimit stand-ins count per
	 * user): stopped without harm to the host or the daemon */
	{
		snprintf(cmds[0], sizeof(cmds[0]), "%s forkbomb 5000", e.probe);
		snprintf(cmds[1], sizeof(cmds[1]), "%s membomb 4096", e.probe);
		cp[0] = cmds[0];
		cp[1] = cmds[1];
		CHECK(probe_round(&e, cp, 2, &t, 0) == 0, "a fork bomb and a memory bomb (%u runs)",
		      t.n_runs);
		for (i = 0; i < 2 && i < (int)t.n_runs; i++)
			CHECK(blocked_ok(&t.runs[i]) || !strcmp(t.runs[i].reason, "oom"),
			      "daemon sh: %s: %.*s (%s)",
			      i ? "memory bomb (RLIMIT_AS here; memory.max in the guest)" :
			      "fork bomb (RLIMIT_NPROC here; pids.max in the guest)",
			      (int)strcspn(t.runs[i].output, "\n"), t.runs[i].output, t.runs[i].reason);
	}
	/* a spin past the timeout and a daemon forked by the tool, while
	 * another session is served */
	{
		long s1, s2;
		int alive;

		snprintf(cmds[0], sizeof(cmds[0]), "%s spin", e.probe);
		snprintf(cmds[1], sizeof(cmds[1]), "%s daemon hb", e.probe);
		cp[0] = cmds[0];
		cp[1] = cmds[1];
		CHECK(probe_round(&e, cp, 2, &t, 1) == 0, "a spin and a forked daemon (%u runs)",
		      t.n_runs);
		CHECK(t.n_runs == 2 && !strcmp(t.runs[0].reason, "timeout") &&
		      strstr(t.runs[0].output, "[timeout"),
		      "daemon sh: CPU spin past the timeout: killed, the result says so: \"%.80s\"",
		      t.runs[0].output);
		kvd_agent_workdir_view(e.d, t.r.session, view, sizeof(view));
		snprintf(path, sizeof(path), "%s/hb", view);
		s1 = file_size(path);
		nanosleep(&(struct timespec){ 1, 0 }, NULL);
		s2 = file_size(path);
		alive = probe_alive(e.probe, "daemon");
		CHECK(t.n_runs == 2 && !strcmp(t.runs[1].reason, "exit") && s1 > 0 && s1 == s2 &&
		      !alive,
		      "daemon sh: a daemon forked by the tool died with the run (%s; heartbeat %ld "
		      "-> %ld bytes; %s)", t.runs[1].reason, s1, s2, alive ? "STILL ALIVE" : "gone");
	}
	/* c_compile_run: a program the model wrote tries the same, and the
	 * launcher's own file tools are asked out of the work dir */
	{
		char reply[8192];
		const char *r[1] = { reply };

		snprintf(reply, sizeof(reply),
			 "<tool_call>\n{\"name\": \"c_compile_run\", \"arguments\": {\"code\": "
			 "\"#include <stdio.h>\\n#include <errno.h>\\n#include <string.h>\\n"
			 "#include <fcntl.h>\\n#include <unistd.h>\\n#include <sys/mount.h>\\n"
			 "#include <sys/socket.h>\\n#include <netinet/in.h>\\n#include <arpa/inet.h>\\n"
			 "#include <signal.h>\\n"
			 "int main(void) { struct sockaddr_in a = { .sin_family = AF_INET, "
			 ".sin_port = htons(%d) }; int s = socket(AF_INET, SOCK_STREAM, 0); "
			 "a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); "
			 "if (open(\\\"/etc/shadow\\\", O_RDONLY) < 0) printf(\\\"BLOCKED shadow: %%s\\\\n\\\", strerror(errno)); "
			 "if (open(\\\"%s\\\", O_RDONLY) < 0) printf(\\\"BLOCKED secret: %%s\\\\n\\\", strerror(errno)); "
			 "if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) printf(\\\"BLOCKED tcp: %%s\\\\n\\\", strerror(errno)); "
			 "if (mount(\\\"none\\\", \\\"/tmp\\\", \\\"tmpfs\\\", 0, 0) < 0) printf(\\\"BLOCKED mount: %%s\\\\n\\\", strerror(errno)); "
			 "if (kill(%d, 9) < 0) printf(\\\"BLOCKED kill: %%s\\\\n\\\", strerror(errno)); "
			 "return 0; }\"}}\n</tool_call>\n"
			 "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": "
			 "\"../../secret/key\"}}\n</tool_call>\n"
			 "<tool_call>\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \"/\"}}\n"
			 "</tool_call>\n", e.port, e.secret, (int)outside);
		snprintf(p1, sizeof(p1), "%s<|im_start|>user\nescape in C<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		script(e.d, r, 1);
		CHECK(collect(submit_tools(e.d, p1, 0, 4), &t, NULL, NULL) == 0 && t.n_runs == 3,
		      "c_compile_run, read_file and list_dir escapes as one round (%u runs)",
		      t.n_runs);
		CHECK(t.n_runs == 3 && !strcmp(t.runs[0].reason, "exit") &&
		      strstr(t.runs[0].output, "BLOCKED shadow") &&
		      strstr(t.runs[0].output, "BLOCKED secret") &&
		      strstr(t.runs[0].output, "BLOCKED tcp") &&
		      strstr(t.runs[0].output, "BLOCKED mount") &&
		      strstr(t.runs[0].output, "BLOCKED kill"),
		      "daemon c_compile_run: /etc/shadow, a host file, TCP, mount, kill: all refused: "
		      "\"%.200s\"", t.runs[0].output);
		CHECK(t.n_runs == 3 && !strcmp(t.runs[1].reason, "refused") &&
		      !strstr(t.runs[1].output, "secret\n") &&
		      !strcmp(t.runs[2].reason, "refused"),
		      "daemon read_file ../../secret/key and list_dir /: refused (\"%.80s\", "
		      "\"%.80s\")", t.runs[1].output, t.runs[2].output);
		CHECK(kill(outside, 0) == 0, "the process outside still lives");
	}
	{
		struct reply ok;
		int left;

		snprintf(p1, sizeof(p1), "%s<|im_start|>user\nstill there?<|im_end|>\n"
			 "<|im_start|>assistant\n", sys_prompt);
		left = probe_alive(e.probe, "");

		CHECK(ask(e.d, p1, 0, 1, 4, &ok, NULL) == 0 && kvd_ready(e.d) && !left,
		      "after every attempt the daemon serves (%s), and no probe process is left (%s)",
		      kvd_ready(e.d) ? "ready" : "NOT READY", left ? "ONE IS" : "none");
	}
	kvd_destroy(e.d);
out:
	kill(outside, SIGKILL);
	waitpid(outside, NULL, 0);
	close(lfd);
	snprintf(path, sizeof(path), "rm -rf '%s'", e.root);
	if (system(path))
		CHECK(0, "cleanup of %s", e.root);
}

/*
 * MCP tool servers ([mcp.NAME]) through the orchestrator: the real npm
 * servers (server-everything's echo, server-filesystem in a directory it
 * was given) and the hostile fake (silent, oversized, malformed, exiting
 * on tools/call; one that never initializes): each hostile call is a tool
 * error, and the daemon keeps serving.
 */
static void mcp_cfg(struct kvd_config *c, const char *name, const char *cmd, const char *tool,
		    uint32_t timeout_ms)
{
	struct kvd_mcp_cfg *m = &c->mcp[c->n_mcp++];

	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", name);
	if (strlen(cmd) >= sizeof(m->command))
		CHECK(0, "command too long: %s", cmd);
	snprintf(m->command, sizeof(m->command), "%.1000s", cmd);
	snprintf(m->tool, sizeof(m->tool), "%s", tool);
	m->timeout_ms = timeout_ms;
	m->max_result_bytes = 1u << 20;
}

static int run_of(const struct treply *t, const char *name)
{
	uint32_t i;

	for (i = 0; i < t->n_runs; i++)
		if (!strcmp(t->runs[i].name, name))
			return (int)i;
	return 0;
}

static void test_mcp_servers(void)
{
	const char *fake_rel = getenv("KVD_TEST_MCP_FAKE"), *npm_rel = getenv("KVD_TEST_MCP_NPM");
	char root[256], policy[300], work[300], fsdir[300], path[700], node[PATH_MAX];
	char fake[PATH_MAX], npm[PATH_MAX];
	char cmd[2 * PATH_MAX + 128], p1[4096];

	struct kvd_config c;
	struct kvd *d;
	struct treply t;
	const char *decl;
	uint64_t ok0, err0;
	FILE *f;
	int i;

	if (!fake_rel || !npm_rel || !realpath(fake_rel, fake) || !realpath(npm_rel, npm) ||
	    (!realpath("/usr/bin/node", node) &&
			      !realpath("/usr/local/bin/node", node))) {
		printf("SKIP mcp_servers: KVD_TEST_MCP_FAKE, KVD_TEST_MCP_NPM or node missing "
		       "(make check-orch sets them)\n");
		return;
	}
	if (tool_scratch("kvd-mcp", 1, root, policy, work))
		return;
	snprintf(fsdir, sizeof(fsdir), "%s/fs", root);
	mkdir(fsdir, 0755);
	snprintf(path, sizeof(path), "%s/a.txt", fsdir);
	f = fopen(path, "w");
	if (!f)
		return;
	fputs("hello from an MCP server\n", f);
	fclose(f);
	if (geteuid() == 0 && (chown(fsdir, 65534, 65534) || chown(path, 65534, 65534)))
		CHECK(0, "chown %s", fsdir);
	f = fopen(policy, "w");
	if (!f)
		return;
	/* a server lives as long as its tool's timeout allows */
	fprintf(f, "[mcp-node]\nexec = %s\nro = %s/node_modules\nmemory = 1G\npids = 64\n"
		"nofile = 1024\ntimeout = 300\n[mcp-fake]\nexec = %s\ntimeout = 300\n", node, npm,
		fake);
	fclose(f);

	/* the [mcp.NAME] keys as the INI file gives them */
	{
		char e[256];

		base_config(&c);
		CHECK(!kvd_config_set(&c, "mcp.fs", "command", "/bin/x \"a b\" c", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "tool", "mcp-node", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "prefix", "", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "allow", "a, b", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "timeout_ms", "2000", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "max_result_bytes", "65536", e, sizeof(e)) &&
		      !kvd_config_set(&c, "mcp.fs", "workdir", "/srv/x", e, sizeof(e)) &&
		      c.n_mcp == 1 && c.mcp[0].has_prefix && !c.mcp[0].prefix[0] &&
		      c.mcp[0].timeout_ms == 2000 && !kvd_config_check(&c, e, sizeof(e)),
		      "[mcp.fs] keys parse (%s)", e);
		CHECK(kvd_config_set(&c, "mcp.fs", "prefix", "a b", e, sizeof(e)) &&
		      kvd_config_set(&c, "mcp.fs", "timeout_ms", "5", e, sizeof(e)) &&
		      kvd_config_set(&c, "mcp.fs", "workdir", "rel", e, sizeof(e)) &&
		      kvd_config_set(&c, "mcp.fs", "nope", "1", e, sizeof(e)) &&
		      kvd_config_set(&c, "mcp.a b", "command", "/bin/x", e, sizeof(e)),
		      "bad [mcp.*] values, keys and names are refused");
		CHECK(!kvd_config_set(&c, "mcp.other", "tool", "x", e, sizeof(e)) &&
		      kvd_config_check(&c, e, sizeof(e)) && strstr(e, "no command"),
		      "an [mcp.*] without a command is refused: %s", e);

		/* two servers whose tools would share a name: refused at start */
		base_config(&c);
		snprintf(cmd, sizeof(cmd), "%s good", fake);
		mcp_cfg(&c, "one", cmd, "mcp-fake", 5000);
		mcp_cfg(&c, "two", cmd, "mcp-fake", 5000);
		c.mcp[0].has_prefix = c.mcp[1].has_prefix = 1;
		snprintf(c.tools_policy, sizeof(c.tools_policy), "%s", policy);
		snprintf(c.tools_workdir_root, sizeof(c.tools_workdir_root), "%s", work);
		d = NULL;
		e[0] = 0;
		CHECK(kvd_create(&c, self, &d, e, sizeof(e)) != 0 && !d &&
		      strstr(e, "echo is declared twice"),
		      "two servers both declaring echo without a prefix: the start is refused: %s", e);
	}

	base_config(&c);
	snprintf(c.tools_policy, sizeof(c.tools_policy), "%s", policy);
	snprintf(c.tools_workdir_root, sizeof(c.tools_workdir_root), "%s", work);
	c.tools_enabled = 1u << KVD_TOOL_SH;
	c.tools_max_rounds = 2;
	snprintf(cmd, sizeof(cmd), "%s %s/node_modules/@modelcontextprotocol/server-everything/"
		 "dist/index.js stdio", node, npm);
	mcp_cfg(&c, "everything", cmd, "mcp-node", 30000);
	snprintf(c.mcp[0].allow, sizeof(c.mcp[0].allow), "echo, get-sum");
	snprintf(cmd, sizeof(cmd), "%s %s/node_modules/@modelcontextprotocol/server-filesystem/"
		 "dist/index.js /home/tool", node, npm);
	mcp_cfg(&c, "filesystem", cmd, "mcp-node", 30000);
	snprintf(c.mcp[1].prefix, sizeof(c.mcp[1].prefix), "fs_");
	c.mcp[1].has_prefix = 1;
	snprintf(c.mcp[1].workdir, sizeof(c.mcp[1].workdir), "%s", fsdir);
	snprintf(c.mcp[1].allow, sizeof(c.mcp[1].allow), "read_text_file list_directory");
	/* the hostile ones: misbehaving on tools/call only */
	snprintf(cmd, sizeof(cmd), "\"%s\" \"callsilent\"", fake);	/* quoted words */
	mcp_cfg(&c, "silent", cmd, "mcp-fake", 1500);
	snprintf(cmd, sizeof(cmd), "%s callhuge", fake);
	mcp_cfg(&c, "huge", cmd, "mcp-fake", 1500);
	c.mcp[3].max_result_bytes = 65536;
	snprintf(cmd, sizeof(cmd), "%s callgarbage", fake);
	mcp_cfg(&c, "garbage", cmd, "mcp-fake", 1500);
	snprintf(cmd, sizeof(cmd), "%s callexit", fake);
	mcp_cfg(&c, "exits", cmd, "mcp-fake", 5000);	/* its restart, on a loaded machine */
	c.mcp[5].restart_backoff_ms = 10;	/* restarted for the next round */
	/* odd tool names and descriptions */
	snprintf(cmd, sizeof(cmd), "%s odd", fake);
	mcp_cfg(&c, "odd", cmd, "mcp-fake", 5000);
	/* never initializes; under the built-in least privilege (no tool =) */
	snprintf(cmd, sizeof(cmd), "%s silent", fake);
	mcp_cfg(&c, "dead", cmd, "", 1000);

	d = start(&c);
	CHECK(d != NULL, "orchestrator starts with 8 MCP servers (one never answers)");
	if (!d)
		goto out;
	decl = kvd_server_tools(d);
	CHECK(decl && strstr(decl, "\"name\": \"sh\"") && strstr(decl, "\"everything_echo\"") &&
	      strstr(decl, "\"everything_get-sum\"") && strstr(decl, "\"fs_read_text_file\"") &&
	      strstr(decl, "\"fs_list_directory\"") && !strstr(decl, "fs_write_file") &&
	      strstr(decl, "\"silent_echo\"") && strstr(decl, "\"exits_echo\"") &&
	      !strstr(decl, "dead_"), "declarations: sh, the allowed npm tools (prefixed), the "
	      "fakes' echo; none of the server that never initialized");
	CHECK(decl && strstr(decl, "\"message\""),
	      "server-everything's echo is declared with its input schema");
	CHECK(decl && strstr(decl, "\"odd_echo\"") && strstr(decl, "\"odd_long\"") &&
	      strstr(decl, "\"odd_inject\"") && !strstr(decl, "has space") &&
	      !strstr(decl, "\"odd_\""),
	      "odd tools: a blank or an empty name are not offered; a chat marker in a "
	      "description is (plain text in the prompt: daemon/chat); a long UTF-8 "
	      "description is cut");

	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nuse the MCP tools<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	ok0 = metric(d, "kvarenad_mcp_calls_total{result=\"ok\"}");
	err0 = metric(d, "kvarenad_mcp_calls_total{result=\"error\"}");
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"everything_echo\", \"arguments\": {\"message\": "
			"\"hi from kvarena\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
			"\"fs_read_text_file\", \"arguments\": {\"path\": \"/home/tool/a.txt\"}}\n"
			"</tool_call>\n<tool_call>\n{\"name\": \"fs_list_directory\", \"arguments\": "
			"{\"path\": \"/home/tool\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
			"\"fs_read_text_file\", \"arguments\": {\"path\": \"/etc/passwd\"}}\n"
			"</tool_call>",
		};

		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 0, 4), &t, NULL, NULL) == 0 && t.n_runs == 4,
		      "one round of four MCP calls (two servers) completes (%u runs)", t.n_runs);
		CHECK(!strcmp(t.runs[0].reason, "exit") && t.runs[0].code == 0 &&
		      strstr(t.runs[0].output, "Echo: hi from kvarena"),
		      "server-everything echo: \"%s\"", t.runs[0].output);
		CHECK(t.runs[1].code == 0 && strstr(t.runs[1].output, "hello from an MCP server"),
		      "server-filesystem reads a.txt of the directory it was given: \"%s\"",
		      t.runs[1].output);
		CHECK(t.runs[2].code == 0 && strstr(t.runs[2].output, "a.txt"),
		      "server-filesystem lists it: \"%s\"", t.runs[2].output);
		CHECK(t.runs[3].code != 0 && !strstr(t.runs[3].output, "root:"),
		      "server-filesystem refuses /etc/passwd (isError): \"%.120s\"",
		      t.runs[3].output);
		CHECK(metric(d, "kvarenad_mcp_calls_total{result=\"ok\"}") == ok0 + 3 &&
		      metric(d, "kvarenad_mcp_calls_total{result=\"error\"}") == err0 + 1,
		      "MCP calls counted: 3 ok, 1 error");
	}
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"silent_echo\", \"arguments\": {\"text\": \"a\"}}\n"
			"</tool_call>\n<tool_call>\n{\"name\": \"huge_echo\", \"arguments\": {}}\n"
			"</tool_call>\n<tool_call>\n{\"name\": \"garbage_echo\", \"arguments\": {}}\n"
			"</tool_call>\n<tool_call>\n{\"name\": \"exits_echo\", \"arguments\": {}}\n"
			"</tool_call>",
		};

		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 0, 4), &t, NULL, NULL) == 0 && t.n_runs == 4,
		      "four hostile MCP calls run as one round (%u runs)", t.n_runs);
		i = run_of(&t, "silent_echo");
		CHECK(!strcmp(t.runs[i].reason, "timeout") &&
		      strstr(t.runs[i].output, "no answer in time"),
		      "a server that never answers: a timeout tool error: \"%s\"", t.runs[i].output);
		i = run_of(&t, "huge_echo");
		CHECK(!strcmp(t.runs[i].reason, "output-cap") &&
		      strstr(t.runs[i].output, "size cap"),
		      "a 100 MB answer: an output-cap tool error: \"%.200s\"", t.runs[i].output);
		i = run_of(&t, "garbage_echo");
		CHECK(t.runs[i].code != 0 && strstr(t.runs[i].output, "without a result object"),
		      "malformed answers: a tool error: \"%s\"", t.runs[i].output);
		i = run_of(&t, "exits_echo");
		CHECK(t.runs[i].code != 0 && strstr(t.runs[i].output, "the server exited"),
		      "a server that exits on the call: a tool error: \"%s\"", t.runs[i].output);
	}
	{
		const char *r[] = {
			"<tool_call>\n{\"name\": \"exits_echo\", \"arguments\": {}}\n</tool_call>\n"
			"<tool_call>\n{\"name\": \"everything_get-sum\", \"arguments\": {\"a\": 2, "
			"\"b\": 40}}\n</tool_call>",
		};
		uint64_t restarts = metric(d, "kvarenad_mcp_restarts_total");
		struct reply ok;

		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 0, 4), &t, NULL, NULL) == 0 && t.n_runs == 2,
		      "the next round runs (%u runs)", t.n_runs);
		CHECK(t.runs[0].code != 0 && strstr(t.runs[0].output, "the server exited") &&
		      metric(d, "kvarenad_mcp_restarts_total") > restarts,
		      "the server that exited is started again for the next call (and fails "
		      "again): \"%s\"", t.runs[0].output);
		CHECK(t.runs[1].code == 0 && strstr(t.runs[1].output, "42"),
		      "server-everything still answers: get-sum 2 + 40: \"%s\"", t.runs[1].output);
		CHECK(ask(d, p1, 0, 1, 4, &ok, NULL) == 0 && kvd_ready(d),
		      "the daemon still serves afterwards");
	}
	kvd_destroy(d);
out:
	unlink(path);
	rmdir(fsdir);
	unlink(policy);
	snprintf(cmd, sizeof(cmd), "%s", work);
	rmdir(cmd);
	rmdir(root);
}
/*
 * A crashing MCP server is restarted after a bounded exponential back-off
 * (refused calls meanwhile, not a spawn per call), reset after a healthy
 * period; its tools are listed again after each restart and on
 * notifications/tools/list_changed, and a tool it dropped is refused.
 * The timing is checked on kvd_mcp_call() itself (a request through the
 * model takes seconds on a loaded machine); then through the orchestrator.
 */
struct mcall {
	int rc, restarted, code;
	uint64_t cg;			/* the instance's cgroup */
	char out[512];
};

static void mcall_as(struct kvd_mcpsrv *s, const char *tenant, const char *tool, struct mcall *m)
{
	struct kvs_result res;

	m->rc = kvd_mcp_call(s, tenant, tool, "{}", 2, NULL, NULL, &res, &m->restarted);
	m->code = res.status;
	m->cg = res.cgroup_id;
	snprintf(m->out, sizeof(m->out), "%s%s", res.out ? res.out : "", res.err ? res.err : "");
	kvs_result_free(&res);
}

static void mcall(struct kvd_mcpsrv *s, const char *tool, struct mcall *m)
{
	mcall_as(s, "", tool, m);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);	/* the back-off is time: wait it out */
}

/* [tenant.NAME] key_credential = NAME: the keys systemd's LoadCredential=
 * put in $CREDENTIALS_DIRECTORY (issue 36.7), key_file = PATH likewise. */
static void test_config_keys(void)
{
	char dir[] = "/tmp/kvd-cred-XXXXXX", path[300], e[256];
	struct kvd_config c;
	FILE *f;

	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/team-a.keys", dir);
	f = fopen(path, "w");
	if (!f)
		return;
	fputs("# team a\nsk-aaaaaaaaaaaaaaaaaaaaaaaa\n\nsk-bbbbbbbbbbbbbbbbbbbbbbbb\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/short.keys", dir);
	f = fopen(path, "w");
	if (!f)
		return;
	fputs("tooshort\n", f);
	fclose(f);
	kvd_config_defaults(&c);
	unsetenv("CREDENTIALS_DIRECTORY");
	CHECK(kvd_config_set(&c, "tenant.a", "key_credential", "team-a.keys", e, sizeof(e)),
	      "key_credential outside a service with credentials: refused");
	setenv("CREDENTIALS_DIRECTORY", dir, 1);
	CHECK(!kvd_config_set(&c, "tenant.a", "key_credential", "team-a.keys", e, sizeof(e)) &&
	      c.n_tenants == 1 && c.tenants[0].n_keys == 2 &&
	      !strcmp(c.tenants[0].keys[1], "sk-bbbbbbbbbbbbbbbbbbbbbbbb"),
	      "key_credential reads the credential's keys, one per line (%s)", e);
	CHECK(kvd_config_set(&c, "tenant.b", "key_credential", "short.keys", e, sizeof(e)) &&
	      kvd_config_set(&c, "tenant.b", "key_credential", "missing", e, sizeof(e)) &&
	      kvd_config_set(&c, "tenant.b", "key_credential", "../team-a.keys", e, sizeof(e)),
	      "a key under 16 bytes, a missing credential, a path: refused");
	snprintf(path, sizeof(path), "%s/team-a.keys", dir);
	CHECK(!kvd_config_set(&c, "tenant.c", "key_file", path, e, sizeof(e)) &&
	      kvd_config_set(&c, "tenant.c", "key_file", "team-a.keys", e, sizeof(e)),
	      "key_file takes an absolute path");
	unsetenv("CREDENTIALS_DIRECTORY");
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path))
		printf("could not remove %s\n", dir);
}

/* [mcp.NAME] per_tenant = yes (issue 36.4): each tenant its own server
 * process, started on its first call; one tenant crashing its instance
 * puts only that instance in back-off. */
static void test_mcp_tenants(void)
{
	const char *fake_rel = getenv("KVD_TEST_MCP_FAKE");
	char root[256], policy[300], work[300], srv[300], fake[PATH_MAX], err[512] = "";
	struct kvs_policy *pol = NULL;
	struct kvd_mcpsrv *s = NULL;
	struct kvd_mcp_cfg mc;
	struct mcall ma, mb, m;
	json_t *tools = NULL;
	FILE *f;

	if (!fake_rel || !realpath(fake_rel, fake)) {
		printf("SKIP mcp_tenants: KVD_TEST_MCP_FAKE unset (make check-orch sets it)\n");
		return;
	}
	if (tool_scratch("kvd-mcpt", 1, root, policy, work))
		return;
	snprintf(srv, sizeof(srv), "%s/srv", root);
	mkdir(srv, 0755);
	f = fopen(policy, "w");
	if (!f)
		return;
	fprintf(f, "[mcp-fake]\nexec = %s\ntimeout = 300\n", fake);
	fclose(f);
	if (kvs_policy_load(policy, &pol, err, sizeof(err))) {
		CHECK(0, "policy: %s", err);
		return;
	}
	memset(&mc, 0, sizeof(mc));
	snprintf(mc.name, sizeof(mc.name), "pt");
	snprintf(mc.command, sizeof(mc.command), "%.900s crashy", fake);
	snprintf(mc.tool, sizeof(mc.tool), "mcp-fake");
	snprintf(mc.workdir, sizeof(mc.workdir), "%s", srv);
	mc.timeout_ms = 10000;
	mc.max_result_bytes = 1u << 20;
	mc.restart_backoff_ms = 5000;
	mc.per_tenant = 1;
	s = kvd_mcp_start(&mc, pol, &tools, err, sizeof(err));
	CHECK(s && json_array_size(tools) == 3, "per_tenant: the server lists its tools at start "
	      "(%s)", err);
	json_decref(tools);
	if (!s)
		goto out;
	mcall_as(s, "a", "echo", &ma);
	mcall_as(s, "b", "echo", &mb);
	CHECK(!ma.rc && !mb.rc && ma.restarted && mb.restarted && ma.cg && mb.cg && ma.cg != mb.cg,
	      "tenants a and b each get an instance of their own on their first call "
	      "(cgroups %llu, %llu)", (unsigned long long)ma.cg, (unsigned long long)mb.cg);
	mcall_as(s, "a", "echo", &m);
	CHECK(!m.rc && !m.restarted && m.cg == ma.cg, "a's next call goes to a's instance");
	CHECK(dir_exists(srv) && !access(srv, F_OK), "the configured directory stays");
	mcall_as(s, "a", "crash", &m);
	CHECK(m.rc && strstr(m.out, "the server exited"), "a crashes its instance");
	mcall_as(s, "a", "echo", &m);
	CHECK(m.rc == -EAGAIN && strstr(m.out, "is restarting"),
	      "a's instance is in its back-off: \"%.80s\"", m.out);
	mcall_as(s, "b", "echo", &m);
	CHECK(!m.rc && !m.restarted && m.cg == mb.cg && strstr(m.out, "echo from crashy"),
	      "b's instance is untouched: \"%.80s\"", m.out);
out:
	kvd_mcp_free(s);
	kvs_policy_free(pol);
}

/*
 * Tenants and the tool pool (issue 36.4): tenant a's tool_concurrency of 1
 * runs its five calls of one round one after the other, while tenant b's
 * call, submitted after them, runs at once beside them (before, the pool
 * took calls first come, first served, four at a time whoever's); tenant
 * c's work directories share its tool_disk_mb; each tenant's tool waits
 * are a class of their own, predicted from its own with everyone's as a
 * prior.
 */
static double call_started(const struct trun *r)
{
	return strtod(r->output, NULL);
}

static int job_running_tools(struct kvd *d, struct kvd_job *j)
{
	int yes;

	pthread_mutex_lock(&d->lock);
	yes = j->state == JOB_TOOL_RUNNING;
	pthread_mutex_unlock(&d->lock);
	return yes;
}

static void test_tool_tenants(void)
{
#define SH_CALL(cmd) "<tool_call>\n{\"name\": \"sh\", \"arguments\": {\"command\": \"" cmd \
	"\"}}\n</tool_call>"
	static const char *const ra[] = {
		SH_CALL("date +%s.%N; sleep 1") "\n" SH_CALL("date +%s.%N; sleep 1") "\n"
		SH_CALL("date +%s.%N; sleep 1") "\n" SH_CALL("date +%s.%N; sleep 1") "\n"
		SH_CALL("date +%s.%N; sleep 1"),
		SH_CALL("date +%s.%N"),
	};
	static const char *const fill[] = {
		SH_CALL("dd if=/dev/zero of=f bs=1M count=20 2>&1 | grep -o 'No space left'; "
			"du -sk . | cut -f1"),
	};
	static const char *const hi[] = { SH_CALL("echo hi") };
#undef SH_CALL
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *ja, *jb;
	struct treply ta, tb, t;
	char root[256], policy[300], work[300], p1[4096], p2[4096], s1[64], view[640];
	uint32_t i, ca, cb, cc;
	uint64_t pa, pb;
	int overlap = 0, k;
	FILE *f;

	if (geteuid() != 0) {
		printf("SKIP tool_tenants: needs root (session work directories)\n");
		return;
	}
	if (tool_scratch("kvd-tenants", 0, root, policy, work))
		return;
	f = fopen(policy, "w");
	if (!f)
		return;
	fprintf(f, "[sh]\nexec = /usr/bin\ntimeout = 20s\npids = 32\n");
	fclose(f);
	base_config(&c);
	snprintf(c.tools_policy, sizeof(c.tools_policy), "%s", policy);
	snprintf(c.tools_workdir_root, sizeof(c.tools_workdir_root), "%s", work);
	c.tools_enabled = 1u << KVD_TOOL_SH;
	c.tools_max_rounds = 1;
	c.n_tenants = 3;
	for (i = 0; i < 3; i++) {
		snprintf(c.tenants[i].name, sizeof(c.tenants[i].name), "%c", 'a' + i);
		c.tenants[i].id = i + 1;
		c.tenants[i].server_tools = 1;
	}
	c.tenants[0].tool_concurrency = 1;
	c.tenants[2].has_tool_disk = 1;
	c.tenants[2].tool_disk_mb = 10;
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts with three tenants' tool limits");
	if (!d)
		return;
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\nfive slow calls<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	snprintf(p2, sizeof(p2), "%s<|im_start|>user\none quick call<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	script(d, ra, 2);
	ja = submit_tools(d, p1, 1, 4);
	for (k = 0; ja && k < 6000 && !job_running_tools(d, ja); k++)
		sleep_ms(10);
	jb = submit_tools(d, p2, 2, 4);
	CHECK(jb && collect(jb, &tb, NULL, NULL) == 0 && tb.n_runs == 1,
	      "tenant b's request completes (%u runs)", tb.n_runs);
	CHECK(ja && collect(ja, &ta, NULL, NULL) == 0 && ta.n_runs == 5,
	      "tenant a's request completes (%u runs)", ta.n_runs);
	if (ta.n_runs == 5 && tb.n_runs == 1) {
		double st[5], b = call_started(&tb.runs[0]);

		for (i = 0; i < 5; i++)
			st[i] = call_started(&ta.runs[i]);
		/* sorted: the pool may take a round's calls in any order */
		for (i = 1; i < 5; i++)
			for (k = (int)i; k > 0 && st[k] < st[k - 1]; k--) {
				double x = st[k];

				st[k] = st[k - 1];
				st[k - 1] = x;
			}
		for (i = 1; i < 5; i++)
			overlap |= st[i] - st[i - 1] < 0.95;
		CHECK(!overlap && st[0] > 1e9,
		      "tool_concurrency = 1: tenant a's five calls ran one at a time (%.2f %.2f "
		      "%.2f %.2f %.2f)", st[0], st[1] - st[0], st[2] - st[0], st[3] - st[0],
		      st[4] - st[0]);
		CHECK(b < st[3], "tenant b's call, submitted after a's five, did not wait for "
		      "them: it started %.2f s after a's first, before a's fourth (%.2f s)",
		      b - st[0], st[3] - st[0]);
	}

	/* tenant c: 10 MiB of tool disk, work directories of 64 MiB */
	script(d, fill, 1);
	CHECK(collect(submit_tools(d, p1, 3, 4), &t, NULL, NULL) == 0 && t.n_runs == 1 &&
	      strstr(t.runs[0].output, "No space left") && atoi(strchr(t.runs[0].output, '\n') ?
	      strchr(t.runs[0].output, '\n') + 1 : "99999") <= 10240 + 64,
	      "tenant c's first work directory holds what its tool disk allows (10 MiB): "
	      "\"%.80s\"", t.n_runs ? t.runs[0].output : "");
	snprintf(s1, sizeof(s1), "%s", t.r.session);
	script(d, hi, 1);
	CHECK(collect(submit_tools(d, p2, 3, 4), &t, NULL, NULL) == 0 && t.n_runs == 1 &&
	      !strcmp(t.runs[0].reason, "refused") && strstr(t.runs[0].output, "tool_disk_mb = 10"),
	      "its second conversation gets no work directory while the first holds the "
	      "disk: \"%.160s\"", t.n_runs ? t.runs[0].output : "");
	CHECK(kvd_session_delete(d, s1, 3) == 0, "tenant c deletes its first conversation");
	kvd_agent_workdir_view(d, s1, view, sizeof(view));
	for (k = 0; k < 500 && dir_exists(view); k++)
		sleep_ms(10);
	script(d, hi, 1);
	CHECK(collect(submit_tools(d, p2, 3, 4), &t, NULL, NULL) == 0 && t.n_runs == 1 &&
	      !strcmp(t.runs[0].output, "hi"),
	      "then a new conversation gets one: \"%.100s\"", t.n_runs ? t.runs[0].output : "");

	/* tool waits: a class per tenant; b's own short waits are not drowned
	 * by a's long ones (with one class for both, b's prediction was a's) */
	pthread_mutex_lock(&d->lock);
	ca = kvd_toolclass(d, 1, "slow", 4);
	cb = kvd_toolclass(d, 2, "slow", 4);
	cc = kvd_toolclass(d, 3, "slow", 4);
	CHECK(ca && cb && cc && ca != cb && cb != cc && kvd_toolclass(d, 1, "slow", 4) == ca,
	      "the same tool is a class per tenant (%u %u %u)", ca, cb, cc);
	for (i = 0; i < 200; i++)
		kvd_toolwait_record(d, ca, 60000000);
	for (i = 0; i < 40; i++)
		kvd_toolwait_record(d, cb, 100000);
	pa = kvd_toolwait_predict_us(d, ca);
	pb = kvd_toolwait_predict_us(d, cb);
	CHECK(pa > 30000000 && pb < 15000000,
	      "a's prediction stays a's (%.1f s), b's is mostly b's own (%.1f s)", pa / 1e6,
	      pb / 1e6);
	CHECK(kvd_toolwait_predict_us(d, cc) > pb,
	      "c, with no waits of its own, is predicted from the others' (%.1f s)",
	      kvd_toolwait_predict_us(d, cc) / 1e6);
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/*
 * Tool classes come from the names the model writes, so a tenant's
 * requests can make up as many as they like: each tenant has its share of
 * the 256 classes (256 / (tenants + 1)), past which its new tools share
 * its class "*", and another tenant's new tool still gets a class of its
 * own (before, one tenant's made-up names took every class and everyone's
 * new tools shared the last).
 */
static void test_toolclass_share(void)
{
	struct kvd_config c;
	struct kvd *d;
	uint32_t i, first = 0, star = 0, mine = 0, other, none;
	char name[32];

	base_config(&c);
	two_tenants(&c, "a", "b");
	d = start(&c);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	for (i = 0; i < 300; i++) {
		uint32_t cls;

		snprintf(name, sizeof(name), "made_up_%u", i);
		cls = kvd_toolclass(d, 1, name, strlen(name));
		if (i == 0)
			first = cls;
		if (i == 299)
			star = cls;
	}
	for (i = 0; i < d->n_classes; i++)
		mine += !strcmp(d->classes[i].tenant, "a");
	other = kvd_toolclass(d, 2, "grep", 4);
	none = kvd_toolclass(d, 0, "grep", 4);
	CHECK(mine == 85 && star && !strcmp(d->classes[star - 1].name, "*") &&
	      kvd_toolclass(d, 1, "made_up_0", 9) == first &&
	      kvd_toolclass(d, 1, "made_up_83", 10) != star &&
	      kvd_toolclass(d, 1, "made_up_84", 10) == star,
	      "tenant a's 300 made-up tool names: %u classes, its share (84 named, then \"%s\" "
	      "for the rest)", mine, star ? d->classes[star - 1].name : "?");
	CHECK(other && none && other != star && none != star && other != none &&
	      other < KVD_MAX_TOOL_CLASSES && !strcmp(d->classes[other - 1].name, "grep"),
	      "tenant b's new tool, and one without a tenant, still get classes of their own "
	      "(%u, %u; a's rest: %u)", other, none, star);
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/* Starts a daemon on cfg and says how many tool classes it holds. */
static uint32_t tws_classes(const struct kvd_config *c, struct kvd **dp)
{
	uint32_t n;

	*dp = start(c);
	if (!*dp)
		return UINT32_MAX;
	pthread_mutex_lock(&(*dp)->lock);
	n = (*dp)->n_classes;
	pthread_mutex_unlock(&(*dp)->lock);
	return n;
}

static void tws_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/*
 * [kv] toolwait_state: the tool waits one daemon measured are read back by
 * the next, which predicts them as the first did (not from the 1 s cold
 * start); a tenant's classes stay its own (not read back once it is no
 * longer configured); a file that does not check out, or a symlink, is not
 * read at all, and the start goes on cold; a daemon that measured nothing
 * leaves the file as it was.
 */
static void test_toolwait_state(void)
{
	char dir[] = "/tmp/kvd-tws-XXXXXX", path[64], link[64], saved[8192] = "", now[8192] = "";
	struct kvd_config c;
	struct kvd *d;
	struct stat st;
	uint32_t ca, cb, i, n;
	uint64_t pa = 0, pb = 0, qa = 0, qb = 0, cold;
	FILE *f;

	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/toolwait.json", dir);
	snprintf(link, sizeof(link), "%s/link.json", dir);
	base_config(&c);
	c.n_tenants = 1;
	snprintf(c.tenants[0].name, sizeof(c.tenants[0].name), "a");
	c.tenants[0].id = 1;
	snprintf(c.toolwait_state, sizeof(c.toolwait_state), "%s", path);
	setenv("KVD_TEST_TWS_EVERY_MS", "100", 1);

	CHECK(tws_classes(&c, &d) == 0, "no table yet: the daemon starts with no tool class");
	if (!d)
		goto out;
	pthread_mutex_lock(&d->lock);
	ca = kvd_toolclass(d, 1, "build", 5);
	cb = kvd_toolclass(d, 0, "grep", 4);
	kvd_toolclass(d, 0, "never", 5);	/* no wait measured: not written */
	cold = kvd_toolwait_predict_us(d, ca);
	for (i = 0; i < 12; i++)
		kvd_toolwait_record(d, ca, 20000000 + i * 100000);
	for (i = 0; i < 10; i++)
		kvd_toolwait_record(d, cb, 300000 + i * 1000);
	pthread_mutex_unlock(&d->lock);
	/* written while it runs too (every 30 s; 100 ms here): a crash loses
	 * the waits since the last write, no more */
	kvd_wake(d);
	for (i = 0; i < 300 && stat(path, &st); i++)
		sleep_ms(10);
	CHECK(i < 300, "the running daemon wrote the table (%u ms)", i * 10);
	unlink(path);
	/* the last waits before the stop: written at the stop */
	pthread_mutex_lock(&d->lock);
	kvd_toolwait_record(d, ca, 30000000);
	kvd_toolwait_record(d, cb, 200000);
	pa = kvd_toolwait_predict_us(d, ca);
	pb = kvd_toolwait_predict_us(d, cb);
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
	CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
	      "a clean stop wrote the waits since, mode 0600 (%o)", (unsigned)st.st_mode & 0777);
	f = fopen(path, "r");
	if (f) {
		saved[fread(saved, 1, sizeof(saved) - 1, f)] = 0;
		fclose(f);
	}

	n = tws_classes(&c, &d);
	CHECK(n == 2, "the next start read two classes back (%u; the one with no wait left out)",
	      n);
	if (!d)
		goto out;
	pthread_mutex_lock(&d->lock);
	qa = kvd_toolwait_predict_us(d, kvd_toolclass(d, 1, "build", 5));
	qb = kvd_toolwait_predict_us(d, kvd_toolclass(d, 0, "grep", 4));
	pthread_mutex_unlock(&d->lock);
	CHECK(qa == pa && qb == pb && pa != cold,
	      "and predicts as the first did: build %.2f s (first %.2f s, cold %.2f s), grep "
	      "%.3f s (first %.3f s)", qa / 1e6, pa / 1e6, cold / 1e6, qb / 1e6, pb / 1e6);
	kvd_destroy(d);
	f = fopen(path, "r");
	if (f) {
		now[fread(now, 1, sizeof(now) - 1, f)] = 0;
		fclose(f);
	}
	CHECK(saved[0] && !strcmp(saved, now), "a daemon that measured no wait left the file as "
	      "it was");

	c.n_tenants = 0;
	CHECK(tws_classes(&c, &d) == 1, "tenant a no longer configured: its class is not read "
	      "back, the other is");
	kvd_destroy(d);
	c.n_tenants = 1;

	if (symlink(path, link) == 0) {
		snprintf(c.toolwait_state, sizeof(c.toolwait_state), "%s", link);
		CHECK(tws_classes(&c, &d) == 0, "a symlink in the table's place is not followed");
		kvd_destroy(d);
		snprintf(c.toolwait_state, sizeof(c.toolwait_state), "%s", path);
	}
	{
		static const char *const bad[] = {
			"not json",
			"{\"version\": 2, \"classes\": []}",
			/* the slots do not add up to the count */
			"{\"version\": 1, \"classes\": [{\"tool\": \"grep\", \"tenant\": \"\", "
			"\"count\": 9, \"total_us\": 100, \"max_us\": 50, \"slots\": [1,0,0,0,0,0,"
			"0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}",
			/* a good class, then one with a negative slot: all or nothing */
			"{\"version\": 1, \"classes\": [{\"tool\": \"grep\", \"tenant\": \"\", "
			"\"count\": 1, \"total_us\": 100, \"max_us\": 100, \"slots\": [0,0,0,0,0,0,"
			"1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}, {\"tool\": \"x\", "
			"\"tenant\": \"\", \"count\": 0, \"total_us\": 0, \"max_us\": 0, "
			"\"slots\": [-1,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}",
		};

		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			tws_write(path, bad[i]);
			n = tws_classes(&c, &d);
			CHECK(n == 0, "a table that does not check out (%.40s...) is not read; the "
			      "daemon starts, cold (%u classes)", bad[i], n);
			kvd_destroy(d);
		}
	}
out:
	unsetenv("KVD_TEST_TWS_EVERY_MS");
	unlink(link);
	unlink(path);
	rmdir(dir);
}

static void test_mcp_restart(void)
{
	const char *fake_rel = getenv("KVD_TEST_MCP_FAKE");
	char root[256], policy[300], work[300], srv[300], fake[PATH_MAX], cmd[PATH_MAX + 64];
	char err[512] = "", p1[4096];
	struct kvd_mcp_cfg mc[2];
	struct kvs_policy *pol = NULL;
	struct kvd_mcpsrv *s = NULL, *l = NULL;
	struct kvd_config c;
	struct kvd *d;
	struct treply t;
	struct mcall m;
	json_t *tools = NULL;
	uint64_t r0;
	FILE *f;

	if (!fake_rel || !realpath(fake_rel, fake)) {
		printf("SKIP mcp_restart: KVD_TEST_MCP_FAKE unset (make check-orch sets it)\n");
		return;
	}
	if (tool_scratch("kvd-mcpr", 1, root, policy, work))
		return;
	snprintf(srv, sizeof(srv), "%s/srv", root);
	mkdir(srv, 0755);
	if (geteuid() == 0 && chown(srv, 65534, 65534))
		CHECK(0, "chown %s", srv);
	f = fopen(policy, "w");
	if (!f)
		return;
	fprintf(f, "[mcp-fake]\nexec = %s\ntimeout = 300\n", fake);
	fclose(f);
	if (kvs_policy_load(policy, &pol, err, sizeof(err))) {
		CHECK(0, "policy: %s", err);
		goto out;
	}
	memset(mc, 0, sizeof(mc));
	snprintf(mc[0].name, sizeof(mc[0].name), "cr");
	snprintf(mc[0].command, sizeof(mc[0].command), "%.900s crashy", fake);
	snprintf(mc[0].tool, sizeof(mc[0].tool), "mcp-fake");
	snprintf(mc[0].workdir, sizeof(mc[0].workdir), "%s", srv);
	mc[0].timeout_ms = 10000;
	mc[0].max_result_bytes = 1u << 20;
	/* 1 s, then 1.5 s (the bound, not 2 s); wide margins for a loaded
	 * machine on the side that must still be refused */
	mc[0].restart_backoff_ms = 1000;
	mc[0].restart_backoff_max_ms = 1500;
	mc[0].healthy_ms = 2000;
	mc[1] = mc[0];
	snprintf(mc[1].name, sizeof(mc[1].name), "lc");
	snprintf(mc[1].command, sizeof(mc[1].command), "%.900s listchange", fake);
	mc[1].workdir[0] = 0;
	s = kvd_mcp_start(&mc[0], pol, &tools, err, sizeof(err));
	CHECK(s && json_array_size(tools) == 3, "the crashy fake starts: echo, crash, extra (%s)",
	      err);
	json_decref(tools);
	tools = NULL;
	if (!s)
		goto out;
	mcall(s, "crash", &m);
	CHECK(m.rc && strstr(m.out, "the server exited"),
	      "a call that crashes the server: an error: \"%.60s\"", m.out);
	mcall(s, "echo", &m);
	CHECK(m.rc == -EAGAIN && !m.restarted && strstr(m.out, "is restarting: 1 failure in a row"),
	      "at once after: refused during the back-off, nothing started: \"%.100s\"", m.out);
	sleep_ms(1100);
	mcall(s, "extra", &m);
	CHECK(m.restarted && m.rc == -ENOENT && strstr(m.out, "no longer offers tool extra"),
	      "after the back-off (1 s) it is started again and its tools listed again: "
	      "extra, which the restarted server lacks, is refused: \"%.100s\"", m.out);
	mcall(s, "crash", &m);
	CHECK(m.rc && !m.restarted && strstr(m.out, "the server exited"), "it crashes again");
	sleep_ms(700);
	mcall(s, "echo", &m);
	CHECK(m.rc == -EAGAIN && strstr(m.out, "2 failures in a row"),
	      "the second failure in a row: a longer back-off, still refused after 700 ms: "
	      "\"%.100s\"", m.out);
	sleep_ms(900);
	mcall(s, "echo", &m);
	CHECK(!m.rc && m.restarted && m.code == 0 && strstr(m.out, "echo from crashy"),
	      "after 1.5 s (the bound, not 2 s) it is back and answers: \"%.60s\"", m.out);
	sleep_ms(2100);
	mcall(s, "echo", &m);
	CHECK(!m.rc && !m.restarted, "it stays up past healthy_ms (2 s)");
	mcall(s, "crash", &m);
	mcall(s, "echo", &m);
	CHECK(m.rc == -EAGAIN && strstr(m.out, "1 failure in a row"),
	      "a crash after the healthy period starts the back-off over: \"%.100s\"", m.out);
	/* list_changed */
	l = kvd_mcp_start(&mc[1], pol, &tools, err, sizeof(err));
	CHECK(l && json_array_size(tools) == 2, "the listchange fake starts: echo, gone");
	json_decref(tools);
	tools = NULL;
	if (!l)
		goto out;
	mcall(l, "gone", &m);
	CHECK(!m.rc && m.code == 0, "gone answers before the list changes");
	mcall(l, "echo", &m);
	CHECK(!m.rc && m.code == 0, "echo answers (the server sends tools/list_changed first)");
	mcall(l, "gone", &m);
	CHECK(m.rc == -ENOENT && strstr(m.out, "no longer offers tool gone"),
	      "after list_changed the tools are listed again: gone is refused: \"%.80s\"", m.out);
	mcall(l, "echo", &m);
	CHECK(!m.rc && m.code == 0 && !m.restarted, "echo still answers, same instance");

	/* through the orchestrator: a crash, then the model's next call is
	 * refused while the server backs off (a long back-off here) */
	base_config(&c);
	snprintf(c.tools_policy, sizeof(c.tools_policy), "%s", policy);
	snprintf(c.tools_workdir_root, sizeof(c.tools_workdir_root), "%s", work);
	c.tools_max_rounds = 1;
	mcp_cfg(&c, "cr", mc[0].command, "mcp-fake", 10000);
	c.mcp[0].restart_backoff_ms = 60000;
	d = start(&c);
	CHECK(d != NULL, "orchestrator with the crashy fake (back-off 60 s)");
	if (!d)
		goto out;
	r0 = metric(d, "kvarenad_mcp_restarts_total");
	snprintf(p1, sizeof(p1), "%s<|im_start|>user\ncrash it<|im_end|>\n<|im_start|>assistant\n",
		 sys_prompt);
	{
		const char *r[] = { "<tool_call>\n{\"name\": \"cr_crash\", \"arguments\": {}}\n"
				    "</tool_call>" };

		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 0, 2), &t, NULL, NULL) == 0 && t.n_runs == 1 &&
		      strstr(t.runs[0].output, "the server exited"),
		      "the model's call crashes the server: \"%.60s\"", t.runs[0].output);
	}
	{
		const char *r[] = { "<tool_call>\n{\"name\": \"cr_echo\", \"arguments\": {}}\n"
				    "</tool_call>" };

		script(d, r, 1);
		CHECK(collect(submit_tools(d, p1, 0, 2), &t, NULL, NULL) == 0 && t.n_runs == 1 &&
		      !strcmp(t.runs[0].reason, "setup-failed") &&
		      strstr(t.runs[0].output, "is restarting") &&
		      metric(d, "kvarenad_mcp_restarts_total") == r0,
		      "its next call is refused at once, nothing started: \"%.100s\"",
		      t.runs[0].output);
	}
	kvd_destroy(d);
out:
	kvd_mcp_free(s);
	kvd_mcp_free(l);
	kvs_policy_free(pol);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd))
		CHECK(0, "cleanup");
}
#endif

#ifdef KVD_TEST_HOOKS
/* Turns submitted while admission is held meet in one admission turn
 * (admit.c, kvd_admit: test_hold_admit). */
static void hold_admission(struct kvd *d, int on)
{
	pthread_mutex_lock(&d->lock);
	d->test_hold_admit = on;
	pthread_mutex_unlock(&d->lock);
	if (!on)
		kvd_wake(d);
}

/*
 * Admission at the room's edge (admit.c, room_for and decode_need): while
 * A runs, B is admitted when the free blocks cover A's projected need
 * (its KV up to its max_tokens, within decode_reserve) and B's prompt and
 * reserve, and waits with one block less. A's prompt and max_tokens end
 * one token past a block, where a projection rounded down is one short.
 * The test holds the rest of the arena in a session of its own.
 */
static int room_edge_case(int short_by)
{
	char pa[512], pb[512];
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq;
	struct kvd_error err;
	struct kvd_job *a = NULL, *b = NULL;
	struct kve_arena_session blk = { 0 };
	struct reply ra, rb;
	uint32_t bt, na, ma, want_a, need_a, want_b, mb = 40, hold = 0, free_now;
	int rc = -1, opened = 0, b_early = 0, i;

	base_config(&c);
	c.prefix_cache = 0;
	d = start(&c);
	if (!d)
		return -1;
	bt = d->geom.block_tokens;
	snprintf(pa, sizeof(pa), "<|im_start|>user\nthe first of two at the edge<|im_end|>\n"
		 "<|im_start|>assistant\n");
	snprintf(pb, sizeof(pb), "<|im_start|>user\nthe second, admitted by the room "
		 "left<|im_end|>\n<|im_start|>assistant\n");
	na = (uint32_t)kve_tokenize(d->tok, pa, strlen(pa), 1, NULL, 0);
	ma = 100 + (bt + 1 - (na + 100) % bt) % bt;	/* (na + ma) % bt == 1 */
	request_init(&rq, pa, ma);
	rq.s.ignore_eos = 1;
	if (ma > d->cfg.decode_reserve || kvd_job_submit(d, &rq, &a, &err))
		goto out;
	for (i = 0; i < 2000; i++) {
		int run;

		pthread_mutex_lock(&d->lock);
		run = a->state == JOB_RUNNING && a->n_gen > 0;
		pthread_mutex_unlock(&d->lock);
		if (run)
			break;
		usleep(1000);
	}
	hold_admission(d, 1);
	request_init(&rq, pb, mb);
	rq.s.ignore_eos = 1;
	if (kvd_job_submit(d, &rq, &b, &err))
		goto out;
	pthread_mutex_lock(&d->lock);
	want_a = (na + ma + bt - 1) / bt;
	need_a = a->state == JOB_RUNNING ? want_a - a->conv->as.s.n_blocks : 0;
	/* B's text is tokenized at its admission: its length from here */
	want_b = ((uint32_t)kve_tokenize(d->tok, pb, strlen(pb), 1, NULL, 0) + mb + bt - 1) / bt;
	free_now = kvd_blocks_free(d);
	if (a->state == JOB_RUNNING && free_now > need_a + want_b - short_by) {
		hold = free_now - (need_a + want_b - short_by);
		if (!hold_blocks(d, hold, &blk, &opened))
			rc = 0;
	}
	d->test_hold_admit = 0;
	pthread_mutex_unlock(&d->lock);
	kvd_wake(d);
	for (i = 0; !rc && i < 5000; i++) {
		int done;

		pthread_mutex_lock(&d->lock);
		done = a->state == JOB_FINISHED;
		b_early |= !done && b->state == JOB_RUNNING;
		pthread_mutex_unlock(&d->lock);
		if (done || b_early)
			break;
		usleep(1000);
	}
	memset(&ra, 0, sizeof(ra));
	memset(&rb, 0, sizeof(rb));
	collect_reply(d, a, &ra, NULL);
	a = NULL;
	if (!rc && opened) {
		pthread_mutex_lock(&d->lock);
		kve_arena_session_close(d->kv, &blk);
		pthread_mutex_unlock(&d->lock);
		opened = 0;
		kvd_wake(d);
	}
	collect_reply(d, b, &rb, NULL);
	b = NULL;
	if (!rc)
		rc = ra.error || rb.error || rb.usage.completion_tokens != mb ? -1 : b_early;
	if (short_by)
		CHECK(rc == 0, "A (%u + %u tokens, %u blocks) runs; B (%u blocks) with one block "
		      "less free waits for A's end (%u held by the test)", na, ma, want_a, want_b,
		      hold);
	else
		CHECK(rc == 1, "A (%u + %u tokens, %u blocks) runs; B (%u blocks) is admitted "
		      "beside it with just its room free (%u held by the test)", na, ma, want_a,
		      want_b, hold);
out:
	if (a)
		collect_reply(d, a, &ra, NULL);
	if (b)
		collect_reply(d, b, &rb, NULL);
	if (opened) {
		pthread_mutex_lock(&d->lock);
		kve_arena_session_close(d->kv, &blk);
		pthread_mutex_unlock(&d->lock);
	}
	kvd_destroy(d);
	return rc;
}

static void test_room_edge(void)
{
	room_edge_case(0);
	room_edge_case(1);
}

/*
 * A running job's next block when every job holding blocks is in flight,
 * itself too (admit.c, kvd_reserve_or_preempt): none can be taken this
 * turn, so the answer is 1 (try the next turn) with the job running and
 * holding what it held, never 0 (reserved) with no block behind it. A's
 * step is in flight (the lock held, it cannot come back), the rest of
 * the arena is held by the test, and A's next block is asked for.
 */
static void test_reserve_in_flight(void)
{
	char pa[512];
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq;
	struct kvd_error err;
	struct kvd_job *a = NULL;
	struct kve_arena_session blk = { 0 };
	struct reply ra;
	uint32_t bt, blocks0 = 0, blocks1 = 0, hold = 0;
	int rc = -2, opened = 0, running = 0, i;

	base_config(&c);
	c.prefix_cache = 0;
	d = start(&c);
	if (!d)
		return;
	bt = d->geom.block_tokens;
	snprintf(pa, sizeof(pa), "<|im_start|>user\nthe one whose steps are all in flight"
		 "<|im_end|>\n<|im_start|>assistant\n");
	request_init(&rq, pa, 64);
	rq.s.ignore_eos = 1;
	if (kvd_job_submit(d, &rq, &a, &err)) {
		CHECK(0, "submit: %s", err.message);
		kvd_destroy(d);
		return;
	}
	for (i = 0; i < 5000; i++) {
		pthread_mutex_lock(&d->lock);
		if (a->state == JOB_RUNNING && a->inflight && a->n_gen < 32) {
			/* A's step cannot come back while the lock is held */
			blocks0 = a->conv->as.s.n_blocks;
			hold = kvd_blocks_free(d);
			if (!hold || !hold_blocks(d, hold, &blk, &opened)) {
				rc = kvd_reserve_or_preempt(d, a, blocks0 * bt + 1);
				running = a->state == JOB_RUNNING;
				blocks1 = a->conv->as.s.n_blocks;
			}
			if (opened)
				kve_arena_session_close(d->kv, &blk);
			opened = 0;
			pthread_mutex_unlock(&d->lock);
			break;
		}
		pthread_mutex_unlock(&d->lock);
		usleep(200);
	}
	kvd_wake(d);
	memset(&ra, 0, sizeof(ra));
	collect_reply(d, a, &ra, NULL);
	CHECK(rc == 1 && running && blocks1 == blocks0,
	      "A in flight, the arena full (%u blocks held by the test): its next block is "
	      "for the next turn (%d), A running (%d) with its %u blocks (%u)", hold, rc,
	      running, blocks0, blocks1);
	CHECK(!ra.error && ra.usage.completion_tokens == 64,
	      "A then replies whole (%u tokens%s%s)", ra.usage.completion_tokens,
	      ra.error ? ": " : "", ra.err);
	kvd_destroy(d);
}

/* out = the first turn p1, its reply, then a user turn of words grown
 * until the whole tokenizes to `tokens` (seeded): 0, or -1. */
static int next_turn(struct kvd *d, char *out, size_t size, const char *p1,
		     const struct reply *r1, uint32_t seed, uint32_t tokens)
{
	char *head = malloc(size);
	int rc = -1;

	if (head) {
		snprintf(head, size, "%s%.*s<|im_end|>\n<|im_start|>user\nlog", p1, (int)r1->len,
			 r1->text);
		rc = grow_text(d, out, size - 64, head, seed, tokens);
		strcat(out, "<|im_end|>\n<|im_start|>assistant\n");
	}
	free(head);
	return rc;
}

/* Each job's reply to its end, at most 30 s between two events: how many
 * ended done (a job that never answers is a scheduler that stopped). */
static unsigned replies_all(struct kvd_job **jobs, unsigned n, struct reply *r)
{
	struct kvd_job *left[8];
	unsigned idx[8], m = n, which, done = 0, i;
	struct kvd_event ev;

	for (i = 0; i < n && i < 8; i++) {
		left[i] = jobs[i];
		idx[i] = i;
		memset(&r[i], 0, sizeof(r[i]));
	}
	while (m && kvd_job_next_any(left, m, &ev, &which, 30000) == 1)
		if (take_event(&r[idx[which]], &ev)) {
			done += r[idx[which]].done;
			kvd_job_free(left[which]);
			left[which] = left[m - 1];
			idx[which] = idx[m - 1];
			m--;
		}
	for (i = 0; i < m; i++)
		kvd_job_free(left[i]);
	return done;
}

/*
 * A worker lost while a turn builds steps gets no other step in that
 * turn (step.c, build): its steps went back to their jobs, and a step
 * put in a down worker's queue was never sent, then forgotten when the
 * worker came back, its job counted in flight for good with positions
 * marked sent that no worker computed. Three prompts are admitted in one
 * turn with two chunks' budget a step: the prefill worker takes two, the
 * decode worker the third, and that send fails; the third must wait for
 * a worker that is up (the audit checks no down worker holds a step),
 * and all three reply as they do alone.
 */
static void test_lost_in_turn(void)
{
	static const char *const p[3] = {
		"<|im_start|>user\nthe first of three prompts in one turn, long enough for one "
		"chunk of thirty-two tokens at least<|im_end|>\n<|im_start|>assistant\n",
		"<|im_start|>user\nthe second of three prompts in one turn, long enough for one "
		"chunk of thirty-two tokens at least<|im_end|>\n<|im_start|>assistant\n",
		"<|im_start|>user\nthe third of three prompts in one turn, long enough for one "
		"chunk of thirty-two tokens at least<|im_end|>\n<|im_start|>assistant\n",
	};
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[3];
	struct kvd_error err;
	struct reply ref[3], got[3];
	unsigned i, n = 0, same = 0;
	uint64_t lost;

	base_config(&c);
	c.prefix_cache = 0;
	c.chunk_tokens = 32;
	c.step_tokens = 64;
	d = start(&c);
	if (!d)
		return;
	for (i = 0; i < 3; i++) {
		struct rq q = { p[i], 0, 1, 8, 0, NULL, NULL };

		memset(&ref[i], 0, sizeof(ref[i]));
		ask_rq(d, &q, &ref[i], NULL);
	}
	lost = metric(d, "kvarenad_worker_restarts_total");
	hold_admission(d, 1);
	for (i = 0; i < 3; i++) {
		struct rq q = { p[i], 0, 1, 8, 0, NULL, NULL };

		jobs[n] = submit(d, &q, &err);
		n += jobs[n] != NULL;
	}
	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->n_workers; i++)
		if (d->workers[i].role == KVD_ROLE_DECODE)
			d->test_send_fail = (int)i + 1;
	pthread_mutex_unlock(&d->lock);
	hold_admission(d, 0);
	memset(got, 0, sizeof(got));
	if (n == 3)
		replies_all(jobs, n, got);
	for (i = 0; i < 3; i++)
		same += got[i].done && got[i].n_tokens == ref[i].n_tokens &&
			!memcmp(got[i].tokens, ref[i].tokens, ref[i].n_tokens * sizeof(ref[i].tokens[0]));
	CHECK(n == 3 && metric(d, "kvarenad_worker_restarts_total") == lost + 1 && same == 3,
	      "the decode worker lost while it was sent a chunk (%llu restart): %u of 3 prompts "
	      "reply as they do alone", (unsigned long long)(metric(d,
	      "kvarenad_worker_restarts_total") - lost), same);
	kvd_destroy(d);
}

/* Turn 1 of conversations X (short: it begins first), Y and Z (~ty and
 * ~300 tokens, kept) on d, of tenants tn[3] (NULL: 0); prompts in p[3],
 * replies in r1[3]. */
static int first_turns_of(struct kvd *d, char p[3][4096], struct reply r1[3], uint32_t ty,
			  const uint32_t *tn)
{
	snprintf(p[0], 4096, "<|im_start|>user\nrun the tests<|im_end|>\n<|im_start|>assistant\n");
	if (grow_text(d, p[1], 4000, "<|im_start|>user\nY: the build log", 5, ty) ||
	    grow_text(d, p[2], 4000, "<|im_start|>user\nZ: the test log", 6, 300))
		return -1;
	strcat(p[1], "<|im_end|>\n<|im_start|>assistant\n");
	strcat(p[2], "<|im_end|>\n<|im_start|>assistant\n");
	for (int i = 0; i < 3; i++) {
		struct rq q = { p[i], 0, 1, 4, tn ? tn[i] : 0, NULL, NULL };

		if (ask_rq(d, &q, &r1[i], NULL))
			return -1;
	}
	return 0;
}

static int three_first_turns(struct kvd *d, char p[3][4096], struct reply r1[3])
{
	return first_turns_of(d, p, r1, 300, NULL);
}

/* On d, an arena of 1024 tokens: the first turns (first_turns_of) and
 * the second turns p2[i] of ~t2[i] tokens (0: none). 0, or -1. */
static int turns_in_1024(struct kvd *d, char p[3][4096], struct reply r1[3], uint32_t ty,
			 const uint32_t *tn, char p2[3][4096], const uint32_t t2[3])
{
	if (d->geom.blocks_total * d->geom.block_tokens != 1024 ||
	    first_turns_of(d, p, r1, ty, tn))
		return -1;
	for (uint32_t i = 0; i < 3; i++)
		if (t2[i] && next_turn(d, p2[i], 4096, p[i], &r1[i], 7 + i, t2[i]))
			return -1;
	return 0;
}

/* Second turns p2[from..3) (8 tokens each, of tenants tn, NULL: 0)
 * submitted with admission held, so that they meet in one admission
 * turn, into jobs[from..]: how many were taken. */
static unsigned submit_held(struct kvd *d, char p2[3][4096], unsigned from, const uint32_t *tn,
			    struct kvd_job **jobs)
{
	struct kvd_error err;
	unsigned i, n = from;

	hold_admission(d, 1);
	for (i = from; n == i && i < 3; i++) {
		struct rq q = { p2[i], 0, 1, 8, tn ? tn[i] : 0, NULL, NULL };

		jobs[n] = submit(d, &q, &err);
		n += jobs[n] != NULL;
	}
	hold_admission(d, 0);
	return n;
}

/*
 * The job first in line lacks room and nothing runs: the KV that queued
 * turns behind it kept from their last turns goes (admit.c,
 * take_queued_kv), else nothing would ever give a block back. An arena
 * of 1024 tokens: X's short first turn, then Y's and Z's of ~300 tokens
 * (kept). X's second turn (~450 tokens, ~420 more than it holds) and Y's
 * and Z's short ones queue in one admission turn; X goes first (its
 * conversation began first) with ~380 tokens' blocks free. It waited
 * for good; now Z's KV goes (the last in line), X
 * runs, then Y and Z (recomputed), and the three replies equal their
 * runs with room.
 */
static void test_queued_kv_line(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[3];
	struct reply r1[3], r2[3], ref;
	char (*p)[4096] = calloc(6, 4096), (*p2)[4096] = p + 3;
	unsigned i, n = 0, same = 0, done;

	if (!p || getenv("KVD_TEST_SMALL"))
		goto out;	/* the guests' tiny model: pages hold thousands */
	base_config(&c);
	c.kv_blocks = 8;
	d = start(&c);
	if (!d)
		goto out;
	if (turns_in_1024(d, p, r1, 300, NULL, p2, (const uint32_t[3]){ 450, 310, 310 })) {
		CHECK(0, "three first turns on %u blocks of %u tokens", d->geom.blocks_total,
		      d->geom.block_tokens);
		kvd_destroy(d);
		goto out;
	}
	n = submit_held(d, p2, 0, NULL, jobs);
	done = replies_all(jobs, n, r2);
	CHECK(n == 3 && done == 3, "X's second turn first in line lacking room, Y's and Z's "
	      "queued holding the rest, nothing running: %u of 3 answered", done);
	CHECK(r2[1].usage.cached_tokens + 1 >= r1[1].usage.prompt_tokens + r1[1].n_tokens,
	      "Z's KV went (the last in line), Y's was kept: %u of %u tokens reused",
	      r2[1].usage.cached_tokens, r1[1].usage.prompt_tokens + r1[1].n_tokens);
	kvd_destroy(d);
	/* with room: the same turns, one at a time */
	base_config(&c);
	d = start(&c);
	if (d && !three_first_turns(d, p, r1))
		for (i = 0; i < 3; i++)
			same += !ask(d, p2[i], 0, 1, 8, &ref, NULL) && same_tokens(&r2[i], &ref);
	CHECK(same == 3, "%u of 3 equal their runs with room", same);
	if (d)
		kvd_destroy(d);
out:
	free(p);
}

/*
 * Whose kept KV goes first is the admission order's last (fair order
 * across tenants, then conversation start): tenants a and b, b served
 * more. X (a, first in line, lacking room), Y (b, begun before Z) and Z
 * (a): Y's turn goes after Z's, so Y's KV is taken, Z's is kept and its
 * turn continues it.
 */
static void test_queued_kv_tenants(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_job *jobs[3];
	struct reply r1[3], r2[3];
	char (*p)[4096] = calloc(6, 4096), (*p2)[4096] = p + 3;
	uint32_t tenant[3] = { 1, 2, 1 };
	unsigned n = 0, done;

	if (!p || getenv("KVD_TEST_SMALL"))
		goto out;
	base_config(&c);
	c.kv_blocks = 8;
	c.prefix_cache = 0;	/* a turn reuses its conversation's KV or none */
	two_tenants(&c, "a", "b");
	d = start(&c);
	if (!d)
		goto out;
	/* a's X and Z ~320 tokens in all, b's Y ~450: b is served more */
	if (turns_in_1024(d, p, r1, 450, tenant, p2, (const uint32_t[3]){ 450, 460, 310 })) {
		CHECK(0, "three first turns on %u blocks of %u tokens", d->geom.blocks_total,
		      d->geom.block_tokens);
		kvd_destroy(d);
		goto out;
	}
	n = submit_held(d, p2, 0, tenant, jobs);
	done = replies_all(jobs, n, r2);
	CHECK(n == 3 && done == 3, "X first in line lacking room, Y (b) and Z (a) queued "
	      "holding the rest: %u of 3 answered", done);
	CHECK(r2[1].usage.cached_tokens == 0 &&
	      r2[2].usage.cached_tokens + 1 >= r1[2].usage.prompt_tokens + r1[2].n_tokens,
	      "Y's KV (tenant b, last in line) was taken, Z's kept: %u and %u of %u tokens "
	      "reused", r2[1].usage.cached_tokens, r2[2].usage.cached_tokens,
	      r1[2].usage.prompt_tokens + r1[2].n_tokens);
	kvd_destroy(d);
out:
	free(p);
}

/*
 * A running job's next block comes from the KV queued turns kept before
 * any running job is preempted (admit.c, kvd_reserve_or_preempt): a
 * preempted job goes back before every queued one, so preempting it to
 * keep theirs inverts the order, and alone it preempted itself again at
 * every readmission. An arena of 1024 tokens: Y's and Z's first turns
 * (~300 tokens each) kept; P, a short prompt replying 480 tokens, runs;
 * Y's and Z's second turns (~610 tokens each) queue in one admission
 * turn and wait for room (P's decode reserve). When P's next block finds
 * none free, Z's KV goes, not P: no preemption, every reply equal to its
 * run with room.
 */
static void test_queued_kv_grow(void)
{
	const char *pp = "<|im_start|>user\nP: stream the log<|im_end|>\n<|im_start|>assistant\n";
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_job *jobs[3];
	struct kvd_event ev;
	struct reply r1[3], r2[3], ref;
	char (*p)[4096] = calloc(6, 4096), (*p2)[4096] = p + 3;
	unsigned i, n = 0, same = 0, done;
	uint64_t pre;

	if (!p || getenv("KVD_TEST_SMALL"))
		goto out;
	base_config(&c);
	c.kv_blocks = 8;
	d = start(&c);
	if (!d)
		goto out;
	if (turns_in_1024(d, p, r1, 300, NULL, p2, (const uint32_t[3]){ 0, 610, 610 })) {
		CHECK(0, "first turns on %u blocks of %u tokens", d->geom.blocks_total,
		      d->geom.block_tokens);
		kvd_destroy(d);
		goto out;
	}
	memset(&r2[0], 0, sizeof(r2[0]));
	jobs[0] = submit_long(d, pp, 480, &err);
	n = jobs[0] != NULL;
	/* P runs (its first token is out) */
	if (n && kvd_job_next(jobs[0], &ev, 30000) == 1 && ev.type == KVD_EV_TOKEN)
		take_event(&r2[0], &ev);
	if (n)
		n = submit_held(d, p2, 1, NULL, jobs);
	{
		struct reply first = r2[0];

		done = replies_all(jobs, n, r2);
		/* P's reply: its first token, then the rest */
		if (first.n_tokens == 1 && r2[0].n_tokens < 1024) {
			memmove(r2[0].tokens + 1, r2[0].tokens, r2[0].n_tokens * sizeof(int32_t));
			r2[0].tokens[0] = first.tokens[0];
			r2[0].n_tokens++;
		}
	}
	pre = metric(d, "kvarenad_preemptions_total");
	CHECK(n == 3 && done == 3 && pre == 0, "P growing past the free blocks while Y's and Z's "
	      "second turns wait holding their KV: %u of 3 answered, %llu preemptions", done,
	      (unsigned long long)pre);
	kvd_destroy(d);
	base_config(&c);
	d = start(&c);
	if (d && !three_first_turns(d, p, r1)) {
		struct kvd_job *j = submit_long(d, pp, 480, &err);

		memset(&ref, 0, sizeof(ref));
		same += j && !collect_reply(d, j, &ref, NULL) && same_tokens(&r2[0], &ref) &&
			ref.n_tokens == 480;
	}
	for (i = 1; d && i < 3; i++)
		same += !ask(d, p2[i], 0, 1, 8, &ref, NULL) && same_tokens(&r2[i], &ref);
	CHECK(same == 3, "%u of 3 equal their runs with room", same);
	if (d)
		kvd_destroy(d);
out:
	free(p);
}

#endif

#ifdef KVD_TEST_HOOKS
/*
 * How long a conversation's KV is kept after its reply (sched.c,
 * finishing): a reply ending in a tool call keeps it 4 x the tool class's
 * predicted wait, within [toolwait_min_s, toolwait_max_s]; any other
 * reply idle_retention_s. Three classes measured at 10 s, 0.5 s and 0.1 s
 * meet the upper bound, neither bound and the lower bound.
 */
static void test_retention(void)
{
	static const struct { const char *tool; uint64_t us; } cls[] = {
		{ "build", 10000000 }, { "grep", 500000 }, { "cat", 100000 },
	};
	struct kvd_config c;
	struct kvd *d;
	struct reply r;
	char prompt[256], call[160];
	uint32_t k, i;

	base_config(&c);
	c.toolwait_min_s = 1;
	c.toolwait_max_s = 3;
	c.idle_retention_s = 7;
	d = start(&c);
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	for (k = 0; k < 3; k++)
		for (i = 0; i < 16; i++)
			kvd_toolwait_record(d, kvd_toolclass(d, 0, cls[k].tool, strlen(cls[k].tool)),
					    cls[k].us);
	pthread_mutex_unlock(&d->lock);
	for (k = 0; k < 4; k++) {
		const char *reply = call;
		struct kvd_conv *cv;
		uint64_t want, got = 0, pred = 0;
		uint32_t tc = 0;

		if (k < 3)
			snprintf(call, sizeof(call), "<tool_call>\n{\"name\": \"%s\", \"arguments\": "
				 "{}}\n</tool_call>", cls[k].tool);
		else
			reply = "All done.";
		script(d, &reply, 1);
		snprintf(prompt, sizeof(prompt), "<|im_start|>user\nstep %u<|im_end|>\n"
			 "<|im_start|>assistant\n", k);
		if (ask(d, prompt, 0, 1, 48, &r, NULL)) {
			CHECK(0, "reply %u: %s", k, r.err);
			continue;
		}
		pthread_mutex_lock(&d->lock);
		cv = kvd_conv_find_id(d, r.session);
		if (cv && k < 3) {
			tc = kvd_toolclass(d, 0, cls[k].tool, strlen(cls[k].tool));
			pred = kvd_toolwait_predict_us(d, tc) * 4;
			want = pred < 1000000 ? 1000000 : pred > 3000000 ? 3000000 : pred;
			got = cv->deadline_ns - cv->wait_started_ns;
			CHECK(cv->tool_class == tc && cv->kstate == KVA_STATE_TOOL_WAIT &&
			      got == want * 1000,
			      "a call to %s (measured %.1f s): KV kept %.3f s (4 x %.3f s within [1, 3])",
			      cls[k].tool, cls[k].us / 1e6, got / 1e9, pred / 4e6);
		} else if (cv) {
			got = cv->deadline_ns - cv->last_used_ns;
			CHECK(cv->tool_class == 0 && cv->kstate == KVA_STATE_IDLE &&
			      got <= 7000000000ull && got > 6500000000ull,
			      "a reply without calls: KV kept %.3f s (idle_retention_s 7)", got / 1e9);
		} else {
			CHECK(0, "reply %u's conversation %s", k, r.session);
		}
		pthread_mutex_unlock(&d->lock);
	}
	/* time per output token is measured between tokens: a one-token
	 * reply has none to add (sched.c, job ended) */
	{
		uint64_t n0 = metric(d, "kvarenad_tpot_ms_count"), n1, n2;
		const char *one = "Yes.";

		script(d, &one, 1);
		ask(d, "<|im_start|>user\none token<|im_end|>\n<|im_start|>assistant\n", 0, 1, 1,
		    &r, NULL);
		n1 = metric(d, "kvarenad_tpot_ms_count");
		ask(d, "<|im_start|>user\nthree tokens<|im_end|>\n<|im_start|>assistant\n", 0, 1, 3,
		    &r, NULL);
		n2 = metric(d, "kvarenad_tpot_ms_count");
		CHECK(n1 == n0 && n2 == n0 + 1,
		      "TPOT counts replies of more than one token only (%llu, %llu, %llu)",
		      (unsigned long long)n0, (unsigned long long)n1, (unsigned long long)n2);
	}
	kvd_destroy(d);
}

#endif
/* The tokens of conversation id (idle), then those of text past its own
 * (no BOS): what a turn continuing it computes over; -1 when text does
 * not continue it. */
static int conv_then_text(struct kvd *d, const char *id, const char *text, int32_t *ids,
			  uint32_t max)
{
	struct kvd_conv *cv;
	int n = -1, k;

	pthread_mutex_lock(&d->lock);
	cv = kvd_conv_find_id(d, id);
	if (cv && cv->n_tokens < max && cv->text_len <= strlen(text) &&
	    !memcmp(cv->text, text, cv->text_len)) {
		memcpy(ids, cv->tokens, cv->n_tokens * sizeof(*ids));
		k = kve_tokenize(d->tok, text + cv->text_len, strlen(text + cv->text_len), 0,
				 ids + cv->n_tokens, max - cv->n_tokens);
		n = k >= 0 ? (int)cv->n_tokens + k : -1;
	}
	pthread_mutex_unlock(&d->lock);
	return n;
}

/*
 * A stop sequence cuts the reply, and the conversation with it
 * (kvd_conv_truncate): the tokens past the cut and their KV go, and a
 * block the prefix cache holds is never written again (the cut's kept
 * tokens are prefilled anew into a private block). The stop sequence is
 * 48 bytes of a reference reply (a first daemon), so the cut is found
 * some 20 tokens after it falls: its block is full and in the cache by
 * then. The next turn, repeating the reply as cut, computes what the
 * engine alone computes over the conversation's tokens; a new
 * conversation over the uncut reply reads the cache's blocks and computes
 * what the engine computes over its prompt. Without the cache, the block
 * the cut falls in is the conversation's alone: its KV is kept up to the
 * cut.
 */
static void test_stop_cut(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply r1, r2, r3, r4;
	char prompt[4096], stop[64], next[8192], other[8192];
	int32_t want[16], ids[1024];
	const struct kve_kv_pool *pool;
	uint32_t bt, n_before, cut_block = UINT32_MAX;
	size_t cut, kvb;
	char *held;
	uint32_t *ends1 = NULL, n_ends1 = 0;
	int n;

	snprintf(prompt, sizeof(prompt), "%s<|im_start|>user\nCount to twenty.<|im_end|>\n"
		 "<|im_start|>assistant\n", sys_prompt);
	base_config(&c);
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	bt = d->geom.block_tokens;
	n = ask(d, prompt, 0, 1, 4 * bt, &r1, NULL);
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv = n ? NULL : kvd_conv_find_id(d, r1.session);

		if (cv && (ends1 = malloc(cv->n_tokens * sizeof(*ends1)))) {
			memcpy(ends1, cv->tok_end, cv->n_tokens * sizeof(*ends1));
			n_ends1 = cv->n_tokens;
		}
	}
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
	if (n || r1.len < 3 * 48 || memchr(r1.text, 0, r1.len)) {
		CHECK(0, "a %u-token reply to cut: %s (%zu bytes)", 4 * bt, r1.err, r1.len);
		free(ends1);
		return;
	}
	memcpy(stop, r1.text + r1.len / 3, 48);
	stop[48] = 0;
	cut = (size_t)(strstr(r1.text, stop) - r1.text);
	n_before = r1.usage.prompt_tokens + r1.usage.completion_tokens;

	d = start(&c);
	CHECK(d != NULL, "a second orchestrator starts");
	if (!d) {
		free(ends1);
		return;
	}
	pool = kve_arena_kv_pool(d->kv);
	kvb = d->geom.kv_block_bytes;
	held = malloc(kvb);
	{
		struct rq q = { prompt, 0, 1, 4 * bt, 0, NULL, stop };

		CHECK(ask_rq(d, &q, &r2, NULL) == 0 && r2.finish == KVD_FINISH_STOP &&
		      r2.len == cut && !memcmp(r2.text, r1.text, cut),
		      "the stop sequence ends the reply at byte %zu of %zu", cut, r1.len);
	}
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv = kvd_conv_find_id(d, r2.session);

		CHECK(cv && cv->n_tokens < n_before && cv->text_len <= strlen(prompt) + cut &&
		      cv->text[cv->text_len] == 0 && cv->n_tokens &&
		      cv->tok_end[cv->n_tokens - 1] == cv->text_len,
		      "the conversation ends at the cut: %u tokens of %u, %zu bytes",
		      cv ? cv->n_tokens : 0, n_before, cv ? cv->text_len : 0);
		/* every token that ends within the cut, by the uncut run's ends */
		if (cv && ends1) {
			uint32_t k = n_ends1;

			while (k && (ends1[k - 1] == UINT32_MAX || ends1[k - 1] > strlen(prompt) + cut))
				k--;
			CHECK(cv->n_tokens == k, "it keeps every token that ends within the cut: "
			      "%u, the uncut run's ends say %u", cv->n_tokens, k);
		}
		CHECK(cv && cv->has_kv && cv->as.s.n_tokens % bt == 0 &&
		      cv->as.s.n_tokens + bt > cv->n_tokens &&
		      cv->as.s.n_blocks == cv->as.s.n_tokens / bt &&
		      cv->n_offered == cv->as.s.n_tokens / bt,
		      "its KV ends below the cut, at the cached block it fell in: %u positions "
		      "of %u in %u blocks, %u in the cache", cv ? cv->as.s.n_tokens : 0,
		      cv ? cv->n_tokens : 0, cv ? cv->as.s.n_blocks : 0, cv ? cv->n_offered : 0);
		/* the block the cut fell in (given back, its id still in the
		 * table) stays the cache's: its bytes now */
		if (cv && cv->as.s.n_blocks < cv->as.cap) {
			cut_block = cv->as.s.block_table[cv->as.s.n_blocks];
			if (kvd_prefix_cached(d, cut_block) && held)
				memcpy(held, pool->block_ptr(pool->ctx, cut_block), kvb);
			else
				cut_block = UINT32_MAX;
		}
	}
	pthread_mutex_unlock(&d->lock);
	/* the next turn repeats the reply as cut */
	snprintf(next, sizeof(next), "%s%.*s<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n"
		 "<|im_start|>assistant\n", prompt, (int)r2.len, r2.text);
	n = conv_then_text(d, r2.session, next, ids, sizeof(ids) / sizeof(ids[0]));
	n = n > 0 ? engine_greedy_ids(ids, (uint32_t)n, 8, want) : 0;
	CHECK(ask(d, next, 0, 1, 8, &r3, NULL) == 0 && r3.usage.cached_tokens > 0 &&
	      n >= (int)r3.n_tokens && r3.n_tokens &&
	      !memcmp(want, r3.tokens, r3.n_tokens * sizeof(want[0])),
	      "the next turn reuses the kept KV (%u cached) and computes the engine's tokens",
	      r3.usage.cached_tokens);
	/* a new conversation (no idle one's text begins its prompt now)
	 * over the uncut reply reads the cached blocks the cut fell in */
	snprintf(other, sizeof(other), "%s%.*s<|im_end|>\n<|im_start|>user\nAgain.<|im_end|>\n"
		 "<|im_start|>assistant\n", prompt, (int)r1.len, r1.text);
	n = engine_greedy(other, 8, want);
	CHECK(ask(d, other, 0, 1, 8, &r4, NULL) == 0 && r4.n_tokens && n >= (int)r4.n_tokens &&
	      r4.usage.cached_tokens > strlen(prompt) / 8 &&
	      !memcmp(want, r4.tokens, r4.n_tokens * sizeof(want[0])),
	      "a new conversation over the uncut reply (%u of %u cached) computes the "
	      "engine's tokens", r4.usage.cached_tokens, r4.usage.prompt_tokens);
	pthread_mutex_lock(&d->lock);
	CHECK(cut_block != UINT32_MAX && kvd_prefix_cached(d, cut_block) &&
	      !memcmp(held, pool->block_ptr(pool->ctx, cut_block), kvb),
	      "the cached block the cut fell in was never written again (block %u)", cut_block);
	pthread_mutex_unlock(&d->lock);
	free(held);
	kvd_destroy(d);
	/* no cache: the block the cut falls in is the conversation's alone,
	 * and its KV is kept up to the cut (nothing computed again) */
	c.prefix_cache = 0;
	d = start(&c);
	if (!d) {
		free(ends1);
		return;
	}
	{
		struct rq q = { prompt, 0, 1, 4 * bt, 0, NULL, stop };

		CHECK(ask_rq(d, &q, &r2, NULL) == 0 && r2.len == cut, "no cache: the same cut");
	}
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv = kvd_conv_find_id(d, r2.session);

		CHECK(cv && cv->has_kv && cv->n_tokens % bt && cv->as.s.n_tokens == cv->n_tokens &&
		      cv->as.s.n_blocks == (cv->n_tokens + bt - 1) / bt,
		      "no cache: the KV kept up to the cut inside its own block: %u positions of "
		      "%u", cv ? cv->as.s.n_tokens : 0, cv ? cv->n_tokens : 0);
	}
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
	free(ends1);
}

/*
 * What a worker answers is checked whole before anything changes
 * (step.c, kvd_step_result): a step of two sequences (the first sampled,
 * the second not) is put at the head of an idle worker's queue, and each
 * answer below, one field off, is refused with -EPROTO, leaving the
 * queue and the counters as they were. The step's sequences have no jobs:
 * an answer taken past the checks would reach them and crash the test.
 */
struct answer {
	uint16_t type;			/* KVD_MSG_RESULT or _KV_LOADED */
	uint64_t step_id;
	uint32_t n_seq, n_body;		/* sequences claimed, sequences sent */
	uint64_t seq_id2;		/* the second sequence's id */
	int32_t tok1, tok2;
	uint32_t n_top, tops_sent, n_kv;
	int len_delta;			/* bytes added (> 0) or cut (< 0) */
	uint32_t kind, step_seqs;	/* the step's kind and sequences */
	struct kvd_job *j0;		/* the first sequence's job, or NULL */
	uint32_t first_block, kv_sent;	/* copy mode: blocks' place, blocks sent */
};

static void worker_answer(struct kvd *d, const struct answer *a, const char *what)
{
	struct kvd_worker *w = &d->workers[0];
	struct kvd_wstep *st = &w->q[w->q_head], save = *st;
	struct kvd_sent sent_save[2];
	size_t cap = 4096 + (size_t)a->kv_sent * d->geom.kv_block_bytes;
	char *buf = calloc(1, cap);
	struct kvd_result r = { a->step_id, 0, a->n_seq, 1000, 0 };
	uint64_t copied = d->m.kv_bytes_copied;
	uint32_t head = w->q_head, n_q = w->n_q, i, t;
	size_t len = sizeof(r);
	int rc;

	memcpy(sent_save, st->seqs, sizeof(sent_save));
	st->id = 4242;
	st->kind = a->kind;
	st->void_ = 0;
	st->n_seq = a->step_seqs;
	if (!buf) {
		CHECK(0, "%s: a buffer", what);
		return;
	}
	st->seqs[0] = (struct kvd_sent){ a->j0, 7, 0, 1, KVD_SEQ_SAMPLE };
	st->seqs[1] = (struct kvd_sent){ NULL, 8, 0, 1, 0 };
	memcpy(buf, &r, sizeof(r));
	for (i = 0; i < a->n_body; i++) {
		struct kvd_result_seq rs = { i ? a->seq_id2 : 7, i ? a->tok2 : a->tok1, 0, 0,
					     i ? 0 : a->n_top, i ? 0 : a->first_block,
					     i ? 0 : a->n_kv, 0 };
		struct kvd_top top = { 1, -1 };

		memcpy(buf + len, &rs, sizeof(rs));
		len += sizeof(rs);
		for (t = 0; !i && t < a->tops_sent; t++, len += sizeof(top))
			memcpy(buf + len, &top, sizeof(top));
		if (!i)
			len += (size_t)a->kv_sent * d->geom.kv_block_bytes;	/* zeros */
	}
	len = (size_t)((ssize_t)len + a->len_delta);
	rc = kvd_step_result(d, w, a->type, buf, len);
	CHECK(rc == -EPROTO && w->q_head == head && w->n_q == n_q &&
	      d->m.kv_bytes_copied == copied,
	      "a worker's answer with %s: refused (%d), nothing changed", what, rc);
	memcpy(st->seqs, sent_save, sizeof(sent_save));
	*st = save;
	free(buf);
}

static void test_worker_answers(void)
{
	/* what a decode step of two sequences expects: its id, sequences 7
	 * (a token in the vocabulary) and 8 (-1: not sampled), no tops, no
	 * KV; each answer below changes one thing */
	static const struct answer ok = { KVD_MSG_RESULT, 4242, 2, 2, 8, 5, -1, 0, 0, 0, 0,
					  KVD_STEP_DECODE, 2, NULL, 0, 0 };
	static const struct answer loaded = { KVD_MSG_KV_LOADED, 4242, 1, 0, 8, 5, -1, 0, 0,
					      0, 0, 0, 1, NULL, 0, 0 };
	struct kvd_config c;
	struct answer a;
	struct kvd *d;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL && kvd_ready(d), "orchestrator starts");
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	CHECK(d->vocab == 512 && d->max_seqs >= 2 && d->workers[0].n_q == 0,
	      "an idle worker, a vocabulary of 512");
	a = ok, a.step_id = 4241;
	worker_answer(d, &a, "another step's id");
	a = ok, a.n_seq = 3;
	worker_answer(d, &a, "three sequences claimed, two sent");
	a = ok, a.n_seq = 1;
	worker_answer(d, &a, "one sequence claimed, two sent");
	a = ok, a.n_body = 1;
	worker_answer(d, &a, "one sequence of two sent");
	a = ok, a.seq_id2 = 9;
	worker_answer(d, &a, "a sequence of another step");
	a = ok, a.tok1 = -1;
	worker_answer(d, &a, "no token where one was sampled");
	a = ok, a.tok1 = 512;
	worker_answer(d, &a, "a token past the vocabulary");
	a = ok, a.tok2 = 3;
	worker_answer(d, &a, "a token where none was sampled");
	a = ok, a.n_top = a.tops_sent = KVD_MAX_TOP_LOGPROBS + 1;
	worker_answer(d, &a, "more top logprobs than allowed");
	a = ok, a.n_top = 3;
	worker_answer(d, &a, "top logprobs announced, not sent");
	a = ok, a.n_kv = 1;
	worker_answer(d, &a, "KV blocks announced, not sent");
	a = ok, a.len_delta = 1;
	worker_answer(d, &a, "a byte too many");
	a = ok, a.len_delta = -1;
	worker_answer(d, &a, "a byte too few");
	a = ok, a.n_body = 0, a.len_delta = -1;
	worker_answer(d, &a, "a result short of its header");
	a = ok, a.kind = 0;
	worker_answer(d, &a, "a step's result for a KV load");
	a = loaded, a.kind = KVD_STEP_DECODE;
	worker_answer(d, &a, "a KV load's answer for a decode step");
	a = loaded, a.step_seqs = 2;
	worker_answer(d, &a, "a KV load's answer for a load of two");
	a = loaded, a.step_id = 4243;
	worker_answer(d, &a, "a KV load's answer with another step's id");
	a = loaded, a.len_delta = 1;
	worker_answer(d, &a, "a KV load's answer a byte too long");
	/* copy mode's KV bytes: for blocks of the sequence's conversation
	 * only (a job whose conversation holds one block; an answer taken
	 * past the checks would reach the job and crash the test) */
	{
		struct kvd_conv *tc = kvd_conv_new(d, 0);
		struct kvd_job *tj = calloc(1, sizeof(*tj));

		if (tc && tj && !kvd_conv_open_kv(d, tc) && !kvd_conv_reserve_to(d, tc, 1)) {
			tj->conv = tc;
			a = ok, a.j0 = tj, a.n_kv = a.kv_sent = 2;
			worker_answer(d, &a, "KV of two blocks, its conversation holding one");
			a = ok, a.j0 = tj, a.n_kv = a.kv_sent = 1, a.first_block = 1;
			worker_answer(d, &a, "KV of a block past its conversation's");
			a = ok, a.j0 = tj, a.n_kv = a.kv_sent = 1, a.first_block = UINT32_MAX;
			worker_answer(d, &a, "KV at a block index that wraps around");
			a = ok, a.n_kv = a.kv_sent = 1;
			worker_answer(d, &a, "KV for a sequence without a conversation");
		} else {
			CHECK(0, "a conversation holding one block");
		}
		if (tc)
			kvd_conv_free(d, tc);
		free(tj);
	}
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

/* An idle orchestrator sleeps in poll (sched.c: a turn with nothing done
 * waits for the next deadline, at most 250 ms): a second of idleness
 * costs this process well under a tenth of a second of CPU. */
static void test_idle_sleeps(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct timespec a, b, pause = { 0, 300000000 }, second = { 1, 0 };
	double cpu;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL && kvd_ready(d), "orchestrator starts");
	if (!d)
		return;
	nanosleep(&pause, NULL);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	nanosleep(&second, NULL);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	cpu = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	CHECK(cpu < 0.1, "an idle second costs %.3f s of CPU", cpu);
	kvd_destroy(d);
}

/* The arena blocks conversation id holds now (-1: no such conversation). */
static int conv_blocks(struct kvd *d, const char *id)
{
	struct kvd_conv *cv;
	int n;

	pthread_mutex_lock(&d->lock);
	cv = kvd_conv_find_id(d, id);
	n = !cv ? -1 : cv->has_kv ? (int)cv->as.s.n_blocks : 0;
	pthread_mutex_unlock(&d->lock);
	return n;
}

/* When conversation id's retention ends (0: none, or no such conversation). */
static uint64_t conv_deadline(struct kvd *d, const char *id)
{
	struct kvd_conv *cv;
	uint64_t t;

	pthread_mutex_lock(&d->lock);
	cv = kvd_conv_find_id(d, id);
	t = cv ? cv->deadline_ns : 0;
	pthread_mutex_unlock(&d->lock);
	return t;
}

/*
 * Retention ends (conv.c, kvd_conv_expire): an idle conversation's KV is
 * released when its deadline passes, soonest first, and the scheduler
 * wakes for it (sched.c: the next deadline shortens its poll, which
 * otherwise sleeps up to 250 ms). With idle_retention_s 4 (8 or 16 on a
 * host too busy for eight replies in 4 s), eight
 * conversations reply 0.15 s apart: each one's KV goes at its deadline (4 s
 * after its reply, test_orch retention), within 125 ms, while the later
 * ones' stays, and the arena's blocks are all free again (no prefix cache
 * here). A scheduler that sleeps through a deadline wakes at a phase of
 * its 250 ms that the deadlines' spacing does not control (seed 7306's
 * sched.c:641 met five all under 150 ms late): eight under 125 ms is
 * about a chance in 250 for it, while the deadline-driven wake-up is
 * 7-11 ms late under load.
 */
static void test_expire(void)
{
	enum { N = 8 };
	struct kvd_config c;
	struct kvd *d;
	struct reply r[N];
	struct timespec tick = { 0, 10000000 }, gap = { 0, 150000000 };
	uint64_t due[N], gone[N] = { 0 }, now, late_max = 0;
	uint32_t free0, free1, k, left = N, in_order = 1, ret;
	char p[128];

	/* eight replies and their gaps must fit inside the retention: 4 s,
	 * longer where the host is too busy for that (a sanitized run beside
	 * two busy cores once took 6.5 s): the wait is the machine's, what
	 * is checked below is not */
	for (ret = 4;; ret *= 2) {
		base_config(&c);
		c.idle_retention_s = ret;
		c.prefix_cache = 0;
		d = start(&c);
		CHECK(d != NULL, "orchestrator starts");
		if (!d)
			return;
		pthread_mutex_lock(&d->lock);
		free0 = kvd_blocks_free(d);
		pthread_mutex_unlock(&d->lock);
		/* the workers' first step is slow (hundreds of ms): warm them */
		CHECK(ask(d, "<|im_start|>user\nwarm<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2,
			  &r[0], NULL) == 0, "a first request");
		for (k = 0; k < N; k++) {
			if (k)
				nanosleep(&gap, NULL);
			snprintf(p, sizeof(p), "<|im_start|>user\nnumber %u<|im_end|>\n"
				 "<|im_start|>assistant\n", k);
			CHECK(ask(d, p, 0, 1, 4, &r[k], NULL) == 0 &&
			      conv_blocks(d, r[k].session) > 0,
			      "conversation %u replies and idles with its KV", k);
			due[k] = conv_deadline(d, r[k].session);
		}
		now = kvd_now_ns();
		if (now < due[0] || ret >= 16)
			break;
		printf("note: eight replies outlasted a %u s retention here: again at %u s\n",
		       ret, 2 * ret);
		kvd_destroy(d);
	}
	CHECK(now < due[0], "the first deadline is %.3f s ahead (retention %u s)",
	      (due[0] - (double)now) / 1e9, ret);
	for (; left && now < due[N - 1] + 3000000000ull; now = kvd_now_ns()) {
		nanosleep(&tick, NULL);
		for (k = 0; k < N; k++)
			if (!gone[k] && conv_blocks(d, r[k].session) == 0) {
				gone[k] = kvd_now_ns();
				left--;
				/* the later ones still hold theirs */
				for (uint32_t l = k + 1; l < N; l++)
					in_order &= conv_blocks(d, r[l].session) > 0;
			}
	}
	for (k = 0; k < N; k++) {
		CHECK(due[k] && gone[k] >= due[k] && (!k || due[k] >= due[k - 1] + 100000000ull),
		      "conversation %u's KV released %.3f s after its deadline", k,
		      gone[k] ? (gone[k] - (double)due[k]) / 1e9 : -1.0);
		if (gone[k] > due[k] && gone[k] - due[k] > late_max)
			late_max = gone[k] - due[k];
	}
	CHECK(!left && in_order && late_max < 125000000ull,
	      "soonest first, each within %.0f ms of its deadline (125)", late_max / 1e6);
	pthread_mutex_lock(&d->lock);
	free1 = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	CHECK(free1 == free0, "every block free again: %u of %u", free1, free0);
	kvd_destroy(d);
}

#ifdef KVD_TEST_HOOKS
/*
 * Retention is for idle KV (conv.c, kvd_conv_expire): a conversation whose
 * deadline passes while its next turn waits for admission keeps its KV,
 * and the turn continues it. With idle_retention_s 1 and no prefix cache:
 * turn 2 is queued (admission held) before turn 1's deadline and admitted
 * 300 ms after it: all of turn 1 is reused (cached_tokens), and the reply
 * equals turn 2 sent at once.
 */
static void test_expire_claimed(void)
{
	const char *p1 = "<|im_start|>user\nlist the files<|im_end|>\n<|im_start|>assistant\n";
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_job *j;
	struct reply r1, r2, ref;
	char p2[1024];
	uint64_t due;
	int pass_no;

	for (pass_no = 0; pass_no < 2; pass_no++) {
		base_config(&c);
		c.idle_retention_s = 1;
		c.prefix_cache = 0;
		d = start(&c);
		if (!d)
			return;
		if (ask(d, p1, 0, 1, 6, &r1, NULL)) {
			CHECK(0, "turn 1: %s", r1.err);
			kvd_destroy(d);
			return;
		}
		snprintf(p2, sizeof(p2), "%s%.*s<|im_end|>\n<|im_start|>user\nnow build it"
			 "<|im_end|>\n<|im_start|>assistant\n", p1, (int)r1.len, r1.text);
		due = conv_deadline(d, r1.session);
		if (pass_no) {
			/* the reference: turn 2 at once */
			CHECK(ask(d, p2, 0, 1, 8, &ref, NULL) == 0, "turn 2 at once");
			kvd_destroy(d);
			break;
		}
		CHECK(due > kvd_now_ns(), "turn 1's KV kept until its deadline");
		hold_admission(d, 1);
		{
			struct rq q = { p2, 0, 1, 8, 0, NULL, NULL };

			j = submit(d, &q, &err);
		}
		while (kvd_now_ns() < due + 300000000ull)
			nap_ms(20);
		hold_admission(d, 0);
		memset(&r2, 0, sizeof(r2));
		CHECK(j && collect_reply(d, j, &r2, NULL) == 0 && !strcmp(r2.session, r1.session) &&
		      r2.usage.cached_tokens + 1 >= r1.usage.prompt_tokens + r1.n_tokens,
		      "turn 2, queued across turn 1's deadline, continues it: %u of %u tokens "
		      "reused", r2.usage.cached_tokens, r1.usage.prompt_tokens + r1.n_tokens);
		kvd_destroy(d);
	}
	CHECK(same_tokens(&r2, &ref), "the same reply as turn 2 at once");
}
#endif

/* A prompt of words, as long as it stays within max tokens with BOS,
 * ending in tail; its length in tokens. */
static int words_prompt(struct kvd *d, char *p, size_t size, int max, const char *tail)
{
	int o = snprintf(p, size, "<|im_start|>user\n"), k;
	size_t tl = strlen(tail);

	for (k = 0; (size_t)o + tl + 16 < size; k++) {
		int len = snprintf(p + o, size - (size_t)o, " w%d%s", (k * 37) % 997, tail);

		if (kve_tokenize(d->tok, p, (size_t)(o + len), 1, NULL, 0) > max)
			break;
		o += len - (int)tl;
	}
	snprintf(p + o, size - (size_t)o, "%s", tail);
	return kve_tokenize(d->tok, p, strlen(p), 1, NULL, 0);
}

/*
 * A reply that reaches the end of the context (admit.c caps max_new to
 * the context left; sched.c ends the reply there): a prompt some 20
 * tokens short of the model's 1024, with max_tokens unset (the server's
 * cap, 1024) and EOS ignored, gets exactly what is left, finish "length"
 * (a max_tokens past the context is refused at submission). The cap is
 * what structured decoding steers by: a JSON object asked for 40 tokens
 * before the context's end, max_tokens unset, that runs past the end
 * without close_in_budget is whole by the end with it.
 */
static void test_context_end(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_job *j = NULL;
	struct reply r;
	char *p = malloc(16384);
	const char *asst = "<|im_end|>\n<|im_start|>assistant\n";
	int n = 0, k;
	uint32_t seed = 0;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL && p, "orchestrator starts");
	if (!d || !p)
		goto out;
	n = words_prompt(d, p, 16384, 1004, "");
	request_init(&rq, p, 0);	/* max_tokens unset: the server's cap, 1024 */
	rq.s.ignore_eos = 1;
	memset(&r, 0, sizeof(r));
	err.message[0] = 0;
	CHECK(d->ctx_len == 1024 && n > 990 && n <= 1004 && kvd_job_submit(d, &rq, &j, &err) == 0 &&
	      collect_reply(d, j, &r, NULL) == 0,
	      "a prompt of %d tokens, max_tokens unset (%s%s)", n, err.message, r.err);
	CHECK(r.finish == KVD_FINISH_LENGTH && r.usage.prompt_tokens == (uint32_t)n &&
	      r.usage.completion_tokens == 1024 - (uint32_t)n,
	      "the reply ends at the context: %u + %u tokens, finish %d", r.usage.prompt_tokens,
	      r.usage.completion_tokens, (int)r.finish);
	n = words_prompt(d, p, 16384, 984, asst);
	for (k = 0; k < 2; k++) {
		/* k 0: a seed whose object runs past the end; k 1: steered */
		for (uint32_t s = seed ? seed : 1; s < (seed ? seed + 1 : 8); s++) {
			json_t *o;

			request_init(&rq, p, 0);
			rq.s.temperature = 1.0f;
			rq.s.seed = s;
			rq.c.kind = KVD_CONSTRAIN_JSON_OBJECT;
			rq.s.close_in_budget = k;
			memset(&r, 0, sizeof(r));
			if (kvd_job_submit(d, &rq, &j, &err) || collect_reply(d, j, &r, NULL))
				break;
			o = json_loadb(r.text, r.len, 0, NULL);
			if (!k && r.finish == KVD_FINISH_LENGTH && !json_is_object(o))
				seed = s;
			if (k)
				CHECK(json_is_object(o) &&
				      r.usage.prompt_tokens + r.usage.completion_tokens <= 1024,
				      "a JSON object asked %d tokens before the context's end, "
				      "max_tokens unset, is whole by then with close_in_budget "
				      "(%u tokens, finish %d)", 1024 - n, r.usage.completion_tokens,
				      (int)r.finish);
			json_decref(o);
			if (seed)
				break;
		}
		if (!k)
			CHECK(seed, "a seed whose object (prompt %d tokens) runs past the context", n);
		if (!seed)
			break;
	}
out:
	free(p);
	kvd_destroy(d);
}

/* The blocks a tenant's conversations hold (conv.c, kvd_blocks_hold). */
static uint32_t tenant_held(struct kvd *d, uint32_t id)
{
	uint32_t n;

	pthread_mutex_lock(&d->lock);
	n = d->tenant_blocks[kvd_tenant_slot(d, id)];
	pthread_mutex_unlock(&d->lock);
	return n;
}

/*
 * A tenant's KV budget while a reply grows (admit.c,
 * kvd_reserve_or_preempt on -EDQUOT): the tenant's own idle KV goes
 * first, and a reply alone over the budget ends there, finish "length"
 * (the budget is its context), never another tenant's running reply.
 * Budget 6 blocks; X's idle conversation holds 2; Y's reply (EOS ignored)
 * grows past X's blocks to the six while Z, another tenant's, runs.
 */
static void test_tenant_budget(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_job *j = NULL, *jz = NULL;
	struct reply x, y, z;
	struct rq qx = { "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", 0, 1, 4, 1,
			 NULL, NULL };
	uint32_t bt;

	base_config(&c);
	c.n_tenants = 2;
	snprintf(c.tenants[0].name, sizeof(c.tenants[0].name), "small");
	c.tenants[0].id = 1;
	c.tenants[0].kv_blocks = 6;
	snprintf(c.tenants[1].name, sizeof(c.tenants[1].name), "other");
	c.tenants[1].id = 2;
	c.prefix_cache = 0;
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	bt = d->geom.block_tokens;
	CHECK(ask_rq(d, &qx, &x, NULL) == 0 && conv_blocks(d, x.session) > 0,
	      "X's conversation idles with its KV (%d blocks)", conv_blocks(d, x.session));
	request_init(&rq, "<|im_start|>user\ny<|im_end|>\n<|im_start|>assistant\n", 8 * bt);
	rq.s.ignore_eos = 1;
	rq.tenant = 1;
	memset(&y, 0, sizeof(y));
	memset(&z, 0, sizeof(z));
	err.message[0] = 0;
	CHECK(kvd_job_submit(d, &rq, &j, &err) == 0, "Y asks for %u tokens (%s)", 8 * bt,
	      err.message);
	/* Z, another tenant's reply after Y's (so the lower priority of the
	 * two), runs alongside: never Y's victim */
	request_init(&rq, "<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n", 12 * bt);
	rq.s.ignore_eos = 1;
	rq.tenant = 2;
	CHECK(kvd_job_submit(d, &rq, &jz, &err) == 0, "Z runs for %u tokens", 12 * bt);
	CHECK(j && collect_reply(d, j, &y, NULL) == 0, "Y's reply (%s)", y.err);
	CHECK(jz && collect_reply(d, jz, &z, NULL) == 0 && z.usage.completion_tokens == 12 * bt &&
	      metric(d, "kvarenad_preemptions_total") == 0,
	      "Z's reply whole (%u tokens) and nothing preempted: a tenant over its budget "
	      "takes only its own", z.usage.completion_tokens);
	CHECK(y.finish == KVD_FINISH_LENGTH && y.usage.completion_tokens < 8 * bt &&
	      y.usage.prompt_tokens + y.usage.completion_tokens >= 6 * bt &&
	      y.usage.prompt_tokens + y.usage.completion_tokens <= 6 * bt + 1,
	      "Y's reply ends at the tenant's six blocks: %u + %u tokens, finish %d",
	      y.usage.prompt_tokens, y.usage.completion_tokens, (int)y.finish);
	CHECK(conv_blocks(d, x.session) == 0, "X's idle KV went to Y first (%d blocks left)",
	      conv_blocks(d, x.session));
	/* what the tenant holds goes back block for block as its
	 * conversations go (conv.c, kvd_blocks_hold) */
	kvd_session_delete(d, x.session, 1);
	kvd_session_delete(d, y.session, 1);
	CHECK(tenant_held(d, 1) == 0, "X and Y deleted: tenant small holds %u blocks",
	      tenant_held(d, 1));
	kvd_destroy(d);
}

/* A prompt of tokens in ((blocks - 1) * bt, blocks * bt - 1] (the text
 * before, then a user turn): it needs that many blocks, and its first
 * reply token fits in them. */
static void prompt_of_blocks(struct kvd *d, char *p, size_t size, const char *before,
			     const char *tag, uint32_t blocks)
{
	const char *end = "<|im_end|>\n<|im_start|>assistant\n";
	uint32_t bt = d->geom.block_tokens, k;
	int o = snprintf(p, size, "%s<|im_start|>user\n%s", before, tag);
	int e = kve_tokenize(d->tok, end, strlen(end), 0, NULL, 0);

	for (k = 0; k < 4096; k++) {
		int n = kve_tokenize(d->tok, p, (size_t)o, 1, NULL, 0);

		if ((uint32_t)(n + e) > (blocks - 1) * bt + 2) {
			snprintf(p + o, size - (size_t)o, "%s", end);
			return;
		}
		o += snprintf(p + o, size - (size_t)o, " w%u", k % 7);
	}
}

/*
 * A tenant's KV budget at admission (admit.c, on -EDQUOT): a prompt that
 * does not fit what the tenant holds takes the tenant's own idle KV,
 * least recently used first, and only what the budget lacks (it took
 * what the prompt needed, in all: more of the tenant's idle KV went than
 * had to); a prompt that the tenant's running reply leaves no room for
 * waits for it (never another tenant's, never preempting it).
 * Budget 11 blocks; X, U and W idle (3 each with the test model):
 * W's next turn needs 3 more (X goes, U stays), then Y, a new prompt of
 * 4 blocks (U goes, W stays); then Z runs and V, a prompt of 10 blocks
 * that fits only once Z is done, waits for it.
 */
static void test_budget_admit(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_job *jz = NULL, *jv = NULL;
	struct reply x, u, w, w2, y, z, v;
	struct rq q = { NULL, 0, 1, 4, 1, NULL, NULL };
	const char *px = "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n";
	const char *pu = "<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n";
	const char *pw = "<|im_start|>user\nw<|im_end|>\n<|im_start|>assistant\n";
	char pw2[2048], py[2048], pv[2048], wtext[512];
	uint32_t bt, zmax;

	base_config(&c);
	c.n_tenants = 1;
	snprintf(c.tenants[0].name, sizeof(c.tenants[0].name), "small");
	c.tenants[0].id = 1;
	c.tenants[0].kv_blocks = 11;
	c.prefix_cache = 0;
	d = start(&c);
	if (!d)
		return;
	bt = d->geom.block_tokens;
	q.prompt = px;
	ask_rq(d, &q, &x, NULL);
	q.prompt = pu;
	ask_rq(d, &q, &u, NULL);
	q.prompt = pw;
	ask_rq(d, &q, &w, NULL);
	CHECK(!x.error && !u.error && !w.error && conv_blocks(d, x.session) == 3 &&
	      conv_blocks(d, u.session) == 3 && conv_blocks(d, w.session) == 3,
	      "X, U and W idle with 3 blocks each of the 11");
	snprintf(wtext, sizeof(wtext), "%s%.*s<|im_end|>\n", pw, (int)w.len, w.text);
	prompt_of_blocks(d, pw2, sizeof(pw2), wtext, "more", 6);
	q.prompt = pw2;
	q.max_tokens = 1;
	CHECK(ask_rq(d, &q, &w2, NULL) == 0 && !strcmp(w2.session, w.session) &&
	      conv_blocks(d, w.session) == 6, "W's next turn grows it to 6 blocks (%d)",
	      conv_blocks(d, w.session));
	CHECK(conv_blocks(d, x.session) == 0 && conv_blocks(d, u.session) == 3,
	      "it took the 1 block the budget lacked from the least recently used: X's KV "
	      "went, U's stayed (%d blocks)", conv_blocks(d, u.session));
	prompt_of_blocks(d, py, sizeof(py), "", "y", 4);
	q.prompt = py;
	CHECK(ask_rq(d, &q, &y, NULL) == 0 && y.usage.prompt_tokens > 3 * bt,
	      "Y, a new prompt of %u tokens (4 blocks), is served", y.usage.prompt_tokens);
	CHECK(conv_blocks(d, u.session) == 0 && conv_blocks(d, w.session) == 6,
	      "it took the 2 blocks the budget lacked: U's KV went, W's stayed (%d blocks)",
	      conv_blocks(d, w.session));
	/* Z holds the budget while it runs; V fits only without it */
	kvd_session_delete(d, w.session, 1);
	kvd_session_delete(d, y.session, 1);
	zmax = 3 * bt;
	request_init(&rq, "<|im_start|>user\nz<|im_end|>\n<|im_start|>assistant\n", zmax);
	rq.s.ignore_eos = 1;
	rq.tenant = 1;
	memset(&z, 0, sizeof(z));
	memset(&v, 0, sizeof(v));
	CHECK(kvd_job_submit(d, &rq, &jz, &err) == 0, "Z runs for %u tokens", zmax);
	while (jz && tenant_held(d, 1) < 2)
		nap_ms(1);
	prompt_of_blocks(d, pv, sizeof(pv), "", "v", 10);
	q.prompt = pv;
	jv = submit(d, &q, &err);
	CHECK(jz && collect_reply(d, jz, &z, NULL) == 0 && z.usage.completion_tokens == zmax &&
	      jv && collect_reply(d, jv, &v, NULL) == 0,
	      "Z's reply whole (%u tokens), then V's (%u prompt tokens%s%s)",
	      z.usage.completion_tokens, v.usage.prompt_tokens, v.error ? ": " : "", v.err);
	CHECK(metric(d, "kvarenad_preemptions_total") == 0,
	      "V waited for the tenant's running reply: nothing preempted");
	kvd_destroy(d);
}

/*
 * [limits] max_sessions (conv.c, kvd_conv_new): past the cap the least
 * recently used idle conversation is forgotten; with every conversation
 * running, a new one is refused as busy (a 503 with Retry-After). Cap 2:
 * A, B, then C forgets A; B's next turn, then D forgets C, not B.
 */
static void test_session_cap(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct reply a, b, b2, cc, dd, e;
	struct kvd_error err;
	struct kvd_job *j1, *j2;
	char pb2[1024];

	base_config(&c);
	c.max_sessions = 2;
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	ask(d, "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2, &a, NULL);
	ask(d, "<|im_start|>user\nB<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2, &b, NULL);
	ask(d, "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2, &cc, NULL);
	CHECK(!a.error && !b.error && !cc.error && conv_blocks(d, a.session) == -1 &&
	      conv_blocks(d, b.session) >= 0 && conv_blocks(d, cc.session) >= 0,
	      "a third conversation forgets the least recently used (A)");
	snprintf(pb2, sizeof(pb2), "<|im_start|>user\nB<|im_end|>\n<|im_start|>assistant\n"
		 "%.*s<|im_end|>\n<|im_start|>user\nB2<|im_end|>\n<|im_start|>assistant\n",
		 (int)b.len, b.text);
	ask(d, pb2, 0, 1, 2, &b2, NULL);
	ask(d, "<|im_start|>user\nD<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2, &dd, NULL);
	CHECK(!b2.error && !strcmp(b2.session, b.session) && !dd.error &&
	      conv_blocks(d, cc.session) == -1 && conv_blocks(d, b.session) >= 0,
	      "after B's next turn, a fourth forgets C, not B");
	/* both conversations running: a third is refused, nothing forgotten */
	{
		struct rq q1 = { "<|im_start|>user\nE<|im_end|>\n<|im_start|>assistant\n", 0, 1, 200,
				 0, NULL, NULL };
		struct rq q2 = { "<|im_start|>user\nF<|im_end|>\n<|im_start|>assistant\n", 0, 1, 200,
				 0, NULL, NULL };
		struct rq q3 = { "<|im_start|>user\nG<|im_end|>\n<|im_start|>assistant\n", 0, 1, 2,
				 0, NULL, NULL };
		struct kvd_job *j3;

		/* microseconds apart: the first two run for many milliseconds */
		j1 = submit(d, &q1, &err);
		j2 = submit(d, &q2, &err);
		j3 = submit(d, &q3, &err);
		CHECK(j1 && j2 && !j3 && err.kind == KVD_ERR_BUSY && err.retry_after_s == 1,
		      "with both conversations running a third is refused as busy (%s)",
		      j3 ? "admitted" : err.message);
		if (j3)
			kvd_job_free(j3);
		memset(&e, 0, sizeof(e));
		if (j1)
			collect_reply(d, j1, &e, NULL);
		memset(&e, 0, sizeof(e));
		if (j2)
			collect_reply(d, j2, &e, NULL);
	}
	kvd_destroy(d);
}

/* A SentencePiece model beside the test model (make: orch-spm.gguf). */
static void spm_model_path(char *out, size_t len)
{
	const char *slash = strrchr(model_path, '/');

	if (getenv("KVD_TEST_SPM_MODEL"))
		snprintf(out, len, "%s", getenv("KVD_TEST_SPM_MODEL"));
	else
		snprintf(out, len, "%.*sorch-spm.gguf", slash ? (int)(slash - model_path + 1) : 0,
			 model_path);
}

/*
 * A SentencePiece model (llama's tokenizer: a dummy-prefix space before
 * the text it encodes): a conversation's next turn appends its new text
 * as a continuation, without that space (conv.c, kvd_piece_make). What a
 * turn prefills is the new text's tokens as the engine encodes a
 * continuation (KVE_TOKENIZE_CONT), found in the conversation where the
 * reply before it ends. New text starting with a word ("the": " the" is a
 * piece of the vocabulary, and dropping a lone space token, as before,
 * left it) and with a space.
 */
static void test_spm_turns(void)
{
	static const char *const add[] = { "the build log, please.\n", " and the tests?\n" };
	struct kvd_config c;
	struct kvd *d;
	struct reply r;
	char *prompt = malloc(16384);
	int32_t want[256];
	uint32_t t, k, pending;
	int n, right;

	if (getenv("KVD_TEST_SMALL") || !prompt)
		goto out;	/* the guests: one model */
	base_config(&c);
	spm_model_path(c.model_path, sizeof(c.model_path));
	d = start(&c);
	CHECK(d != NULL && kve_tokenizer_kind(d->tok) == KVE_TOK_SPM,
	      "orchestrator starts with a SentencePiece model (%s)", c.model_path);
	if (!d || kve_tokenizer_kind(d->tok) != KVE_TOK_SPM)
		goto done;
	snprintf(prompt, 16384, "<|im_start|>user\nWhat is the build?<|im_end|>\n"
		 "<|im_start|>assistant\n");
	CHECK(ask(d, prompt, 0, 1, 12, &r, NULL) == 0, "first turn: %u tokens", r.n_tokens);
	for (t = 0; t < 2 && !r.error; t++) {
		size_t o = strlen(prompt);

		pending = r.finish == KVD_FINISH_LENGTH;
		snprintf(prompt + o, 16384 - o, "%.*s%s", (int)r.len, r.text, add[t]);
		o += r.len;
		n = kve_tokenize_spans(d->tok, prompt + o, strlen(prompt + o), NULL, 0,
				       KVE_TOKENIZE_CONT, want, 256);
		if (ask(d, prompt, 0, 1, 12, &r, NULL) || n <= 0 || n > 256)
			break;
		right = r.usage.prompt_tokens - r.usage.cached_tokens == (uint32_t)n + pending;
		pthread_mutex_lock(&d->lock);
		{
			struct kvd_conv *cv = kvd_conv_find_id(d, r.session);

			right &= cv && r.usage.prompt_tokens >= (uint32_t)n &&
				 cv->n_tokens >= r.usage.prompt_tokens;
			for (k = 0; right && k < (uint32_t)n; k++)
				right &= cv->tokens[r.usage.prompt_tokens - n + k] == want[k];
		}
		pthread_mutex_unlock(&d->lock);
		CHECK(right, "turn %u appends \"%.12s...\" as a continuation: %u prefilled = %d "
		      "tokens + %u sampled without KV, the same ids", t + 2, add[t],
		      r.usage.prompt_tokens - r.usage.cached_tokens, n, pending);
	}
done:
	kvd_destroy(d);
out:
	free(prompt);
}

/* Printable ASCII only: a stop sequence that reads as one. */
static int ascii_text(const char *s, size_t n)
{
	while (n--)
		if (s[n] < 0x20 || s[n] > 0x7e)
			return 0;
	return 1;
}

/*
 * A stop sequence inside one token's text (sched.c, the token that
 * completes it also brings text before it): that text is sent, then the
 * reply ends, finish "stop". From a reference reply, the stop is a token's
 * text after its first byte (the first token of three ASCII bytes or more
 * whose tail occurs nowhere earlier); the reply with it equals the
 * reference up to that byte.
 */
static void test_stop_in_token(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_error err;
	struct kvd_event ev;
	struct kvd_job *j;
	struct rq q = { "<|im_start|>user\nDescribe the build.<|im_end|>\n<|im_start|>assistant\n",
			0, 1, 64, 0, NULL, NULL };
	struct reply r;
	char text[4096], stop[64] = "";
	size_t len = 0, at = 0;
	uint32_t stop_seq = 0;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	/* the reference, token by token */
	j = submit(d, &q, &err);
	while (j && kvd_job_next(j, &ev, 120000) == 1 && ev.type == KVD_EV_TOKEN) {
		if (len + ev.text_len >= sizeof(text))
			break;
		memcpy(text + len, ev.text, ev.text_len);
		text[len + ev.text_len] = 0;
		/* the token's tail, where it first occurs in the text */
		if (!at && ev.text_len >= 3 && ev.text_len < sizeof(stop) &&
		    ascii_text(ev.text, ev.text_len)) {
			memcpy(stop, ev.text + 1, ev.text_len - 1);
			stop[ev.text_len - 1] = 0;
			if ((size_t)(strstr(text, stop) - text) == len + 1)
				at = len + 1;
		}
		len += ev.text_len;
	}
	if (j)
		kvd_job_free(j);
	CHECK(at, "a stop sequence inside a token of the reference: \"%s\" at byte %zu",
	      at ? stop : "", at);
	if (!at)
		goto out;
	q.stop = stop;
	memset(&r, 0, sizeof(r));
	j = submit(d, &q, &err);
	while (j && kvd_job_next(j, &ev, 120000) == 1) {
		if (ev.type == KVD_EV_TOKEN) {
			if (r.len + ev.text_len < sizeof(r.text)) {
				memcpy(r.text + r.len, ev.text, ev.text_len);
				r.len += ev.text_len;
			}
			continue;
		}
		r.finish = ev.type == KVD_EV_DONE ? ev.finish : 0;
		stop_seq = ev.type == KVD_EV_DONE ? ev.stop_seq : 0;
		break;
	}
	if (j)
		kvd_job_free(j);
	CHECK(r.len == at && !memcmp(r.text, text, at) && r.finish == KVD_FINISH_STOP &&
	      stop_seq == 1, "the reply is the reference's first %zu bytes, the byte before "
	      "the stop in its token included (%zu bytes, finish %d, stop %u)", at, r.len,
	      (int)r.finish, stop_seq);
out:
	kvd_destroy(d);
}

/*
 * A reply ending inside a UTF-8 sequence (sched.c, round_end): the
 * detokenizer's held bytes go out as U+FFFD, and a next turn repeating
 * the reply keeps every token. The reply is forced to the byte 0xE2
 * three times (a logit bias on its token).
 */
static void test_utf8_tail(void)
{
	struct kvd_config c;
	struct kvd *d;
	struct kvd_request rq = { 0 };
	struct kvd_logit_bias bias;
	struct kvd_error err;
	struct kvd_job *j = NULL;
	struct reply r1, r2;
	static const char p[] = "<|im_start|>user\nbytes<|im_end|>\n<|im_start|>assistant\n";
	char next[512];
	int32_t e2;
	int n_suffix;

	base_config(&c);
	d = start(&c);
	CHECK(d != NULL, "orchestrator starts");
	if (!d)
		return;
	CHECK(kve_tokenize(d->tok, "\xe2", 1, 0, &e2, 1) == 1, "the byte 0xE2 is token %d", e2);
	bias = (struct kvd_logit_bias){ e2, 100 };
	request_init(&rq, p, 3);
	rq.s.n_logit_bias = 1;
	rq.s.logit_bias = &bias;
	memset(&r1, 0, sizeof(r1));
	CHECK(kvd_job_submit(d, &rq, &j, &err) == 0 && collect_reply(d, j, &r1, NULL) == 0 &&
	      r1.usage.completion_tokens == 3 && r1.len == 9 &&
	      !memcmp(r1.text, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9),
	      "three 0xE2 bytes come out as three U+FFFD (%zu bytes)", r1.len);
	snprintf(next, sizeof(next), "%s%.*s<|im_end|>\n<|im_start|>user\nok<|im_end|>\n"
		 "<|im_start|>assistant\n", p, (int)r1.len, r1.text);
	n_suffix = kve_tokenize(d->tok, next + strlen(p) + r1.len,
				strlen(next + strlen(p) + r1.len), 0, NULL, 0);
	CHECK(ask(d, next, 0, 1, 2, &r2, NULL) == 0 && !strcmp(r2.session, r1.session) &&
	      r2.usage.prompt_tokens - r2.usage.cached_tokens == (uint32_t)n_suffix + 1,
	      "the next turn keeps all three tokens: %u prefilled = %d appended + 1 sampled "
	      "without KV", r2.usage.prompt_tokens - r2.usage.cached_tokens, n_suffix);
	kvd_destroy(d);
}

/* The text a round ends with (kvd_utf8_clean): well-formed UTF-8 of every
 * length kept byte for byte; each byte of an ill-formed sequence (overlong,
 * surrogate, past U+10FFFF, cut short, a continuation missing, NUL) one U+FFFD. */
static void test_utf8_clean(void)
{
	static const struct {
		const char *in, *want;
		size_t n;
	} t[] = {
		{ "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", 11 },
		{ "\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf", 4 },
		{ "\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd", 2 },
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
		{ "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 4 },
		{ "\xf0\x9f\x98", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
		{ "x\0y", "x\xef\xbf\xbdy", 3 },
		/* overlong at each length, and the first and last code points
		 * each length and the surrogates' edges allow */
		{ "\xe0\x9f\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
		{ "\xf0\x8f\xbf\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 4 },
		{ "\xc2\x80\xdf\xbf", "\xc2\x80\xdf\xbf", 4 },
		{ "\xe0\xa0\x80\xef\xbf\xbf", "\xe0\xa0\x80\xef\xbf\xbf", 6 },
		{ "\xed\x9f\xbf\xee\x80\x80", "\xed\x9f\xbf\xee\x80\x80", 6 },
		{ "\xf0\x90\x80\x80", "\xf0\x90\x80\x80", 4 },
		{ "\xed\xbf\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 3 },
		/* a lead byte whose continuation is not one: its bytes up to
		 * the stranger replaced, the stranger kept */
		{ "\xc3(", "\xef\xbf\xbd(", 2 },
		{ "\xe2\x82" "A", "\xef\xbf\xbd\xef\xbf\xbd" "A", 3 },
	};
	char out[64];

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		size_t n = kvd_utf8_clean(t[i].in, t[i].n, out);

		CHECK(n == strlen(t[i].want) && !memcmp(out, t[i].want, n),
		      "utf8_clean case %zu: %zu bytes", i, n);
	}
}

/* fair.c's virtual times without workers: a tenant that comes in while
 * others have jobs starts at their smallest virtual time if it was below
 * (no banked idle time; never lowered), its second job does not move it,
 * an idle tenant is no floor, a weight divides what a tenant is charged,
 * and the order of two jobs. */
static void test_fair_join(void)
{
	struct kvd *d = calloc(1, sizeof(*d));
	struct kvd_job a = { .tenant = 11, .order = 2 }, b = { .tenant = 22, .order = 1 };

	if (!d) {
		CHECK(0, "fair_join: no memory");
		return;
	}
	d->cfg.n_tenants = 3;
	d->cfg.tenants[0].id = 11;
	d->cfg.tenants[1].id = 22;
	d->cfg.tenants[2].id = 33;
	d->cfg.tenants[2].weight = 4;
	kvd_fair_job_added(d, 11);
	kvd_fair_charge(d, 11, 100);
	CHECK(kvd_fair_vt(d, 11) == 100, "fair_join: 100 tokens charged (vt %g)", kvd_fair_vt(d, 11));
	kvd_fair_job_added(d, 22);
	CHECK(kvd_fair_vt(d, 22) == 100,
	      "fair_join: a tenant joining a running one starts at its virtual time (vt %g)",
	      kvd_fair_vt(d, 22));
	CHECK(kvd_fair_after(d, &a, &b) && !kvd_fair_after(d, &b, &a),
	      "fair_join: equal virtual times: the older job first");
	a.order = 1;
	b.order = 2;
	kvd_fair_charge(d, 11, 200);
	kvd_fair_job_added(d, 22);
	CHECK(kvd_fair_vt(d, 22) == 100, "fair_join: a second job keeps its tenant's virtual time (vt %g)",
	      kvd_fair_vt(d, 22));
	CHECK(kvd_fair_after(d, &a, &b) && !kvd_fair_after(d, &b, &a),
	      "fair_join: the tenant with less service goes first");
	kvd_fair_job_gone(d, 22);
	kvd_fair_job_gone(d, 22);
	kvd_fair_job_gone(d, 11);
	kvd_fair_job_added(d, 22);
	CHECK(kvd_fair_vt(d, 22) == 100, "fair_join: an idle tenant is no floor (vt %g)", kvd_fair_vt(d, 22));
	kvd_fair_job_added(d, 33);
	CHECK(kvd_fair_vt(d, 33) == 100, "fair_join: floored to the one tenant with jobs (vt %g)",
	      kvd_fair_vt(d, 33));
	kvd_fair_charge(d, 33, 100);
	CHECK(kvd_fair_vt(d, 33) == 125 && kvd_fair_weight(d, 33) == 4 && kvd_fair_weight(d, 22) == 1,
	      "fair_join: weight 4 is charged a quarter (vt %g)", kvd_fair_vt(d, 33));
	kvd_fair_job_gone(d, 22);
	kvd_fair_job_gone(d, 22);
	kvd_fair_charge(d, 33, 400);
	kvd_fair_job_added(d, 22);
	CHECK(kvd_fair_vt(d, 22) == 225, "fair_join: a tenant's count never goes below 0 (vt %g)",
	      kvd_fair_vt(d, 22));
	kvd_fair_charge(d, 22, 100);
	kvd_fair_job_added(d, 11);
	CHECK(kvd_fair_vt(d, 11) == 300,
	      "fair_join: a tenant ahead of the smallest running one (225, 325) keeps its virtual time (vt %g)",
	      kvd_fair_vt(d, 11));
	/* a floor of 0 is a floor: a tenant with a job not yet charged (0),
	 * then one at 100; a third joining starts at 0, the smallest */
	memset(d->tenant_jobs, 0, sizeof(d->tenant_jobs));
	memset(d->tenant_vt, 0, sizeof(d->tenant_vt));
	kvd_fair_job_added(d, 11);
	kvd_fair_job_added(d, 22);
	kvd_fair_charge(d, 22, 100);
	kvd_fair_job_added(d, 33);
	CHECK(kvd_fair_vt(d, 33) == 0,
	      "fair_join: the running ones at 0 and 100: a joining tenant starts at 0 (vt %g)",
	      kvd_fair_vt(d, 33));
	free(d);
}

int main(int argc, char **argv)
{
	ssize_t n;
	int rc;

	if (test_worker_main(argc, argv, &rc))
		return rc;
	if (argc < 2) {
		fprintf(stderr, "usage: %s MODEL [PLUGIN.so]\n", argv[0]);
		return 2;
	}
	model_path = argv[1];
	plugin_path = argc > 2 ? argv[2] : NULL;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 2;
	self[n] = 0;
	/* the scheduler's books checked every turn (audit.c); KVD_AUDIT= turns it off */
	setenv("KVD_AUDIT", "1", 0);
	signal(SIGPIPE, SIG_IGN);
	kvd_log_set_level(KVD_LOG_WARN);
	sys_prompt = getenv("KVD_TEST_SMALL") ? sys_prompt_short : sys_prompt_long;
	RUN(utf8_clean);
	RUN(stop_cut);
	RUN(worker_answers);
	RUN(idle_sleeps);
	RUN(expire);
	RUN(context_end);
	RUN(tenant_budget);
	RUN(session_cap);
	RUN(utf8_tail);
	RUN(stop_in_token);
	RUN(spm_turns);
	RUN(fair_join);
	RUN(greedy_and_turns);
	RUN(prefix_sharing);
	RUN(fork);
	RUN(copy_mode);
	RUN(pressure);
	RUN(dropped_events);
	RUN(worker_death);
	RUN(plugin);
	RUN(paths);
	RUN(preempt);
	RUN(preempt_cached);
	RUN(readmit_first);
	RUN(route_order);
	RUN(constrained_long);
	RUN(admission);
	RUN(program_fcfs);
	RUN(prefill_ahead);
	RUN(program_chunks);
	RUN(end_of_turn);
	RUN(worker_fd0);
	RUN(worker_storm);
	RUN(stage_down);
	RUN(kstate_stages);
	RUN(stall);
	RUN(fairness);
	RUN(shared_start);
	RUN(session_keys);
	RUN(never_fits);
	RUN(index_chain);
	RUN(cache_batches);
	RUN(bisect);
	RUN(void_behind);
	RUN(many_candidates);
	RUN(start_fails);
	RUN(budget_admit);
	RUN(admit_fair);
	RUN(last_block);
#ifdef KVD_TEST_HOOKS
	RUN(reserve_fail);
	RUN(room_edge);
	RUN(reserve_in_flight);
	RUN(lost_in_turn);
	RUN(round_edges);
	RUN(round_restore_waits);
	RUN(expire_claimed);
	RUN(queued_kv_line);
	RUN(queued_kv_tenants);
	RUN(queued_kv_grow);
	RUN(retention);
	RUN(config_keys);
	RUN(agent_loop);
	RUN(escape);
	RUN(mcp_servers);
	RUN(mcp_restart);
	RUN(tool_tenants);
	RUN(toolclass_share);
	RUN(toolwait_state);
	RUN(mcp_tenants);
#endif
	printf("%d passed, %d failed\n", pass, failed);
	return failed ? 1 : 0;
}
