// SPDX-License-Identifier: MIT
/*
 * test_sched_oom.c - allocation failures in the scheduler's own
 * allocations that a test of the whole daemon never meets: text tokenized
 * for a conversation (conv.c, kvd_piece_make: both tokenizer kinds, with
 * markup and without, a conversation's first piece and a later one), a
 * piece, a token and text appended to a conversation, the
 * conversations' indexes (their sizes too), and the radix index
 * (radix.c: its tables and a node). Each run has its k-th
 * allocation fail, for k = 0, 1, ... until a run makes fewer than k + 1
 * (the tokenizer's own, PCRE2's match data among them, count too): a
 * failing run returns -ENOMEM (NULL for a node) and leaves what it was
 * given as it was (an empty piece; the conversation's tokens and text; the
 * index's nodes), a run that succeeds equals the run without failures,
 * and nothing leaks (ASan's leak check at exit).
 *
 * Then a running daemon (workers, arena, prefix cache, the audit of
 * audit.c every turn): each allocation of its scheduler thread fails in
 * turn while a request is served; the request either answers as without
 * failures or ends in an error (never a reply cut short without one, never
 * a hang), and the next request, nothing failing, answers as before.
 *
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (daemon-tests.mk),
 * so the daemon's and the engine's calls come here; libc and the shared
 * libraries allocate on their own.
 *
 * usage: test_sched_oom BPE_MODEL SPM_MODEL
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "test_worker.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long fail_at = -1, calls;
static int pass, failed;
/* the live daemon's part: only this thread's allocations count and fail */
static pthread_t only_thread;
static int only_set;

#define CHECK(cond, ...) do { \
	if (cond) { \
		pass++; \
	} else { \
		failed++; \
		printf("FAIL %s:%d ", __FILE__, __LINE__); \
		printf(__VA_ARGS__); \
		printf("\n"); \
	} \
} while (0)

static int failing(void)
{
	if (__atomic_load_n(&fail_at, __ATOMIC_ACQUIRE) < 0 ||
	    (__atomic_load_n(&only_set, __ATOMIC_ACQUIRE) && !pthread_equal(pthread_self(), only_thread)))
		return 0;
	return __atomic_fetch_add(&calls, 1, __ATOMIC_ACQ_REL) == fail_at;
}

void *__wrap_malloc(size_t n)
{
	return failing() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return failing() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return failing() ? NULL : __real_realloc(p, n);
}

/* Counting starts: the k-th allocation from here fails (k < 0: none). */
static void fail_from(long k)
{
	__atomic_store_n(&calls, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&fail_at, k, __ATOMIC_RELEASE);
}

/* Counting stops: 1 when the k-th allocation was reached (it failed). */
static int failed_one(long k)
{
	__atomic_store_n(&fail_at, -1, __ATOMIC_RELEASE);
	return __atomic_load_n(&calls, __ATOMIC_ACQUIRE) > k;
}

/* memcmp of n bytes, n == 0 equal (the pointers may be NULL then) */
static int same_bytes(const void *a, const void *b, size_t n)
{
	return !n || !memcmp(a, b, n);
}

static int same_piece(const struct kvd_piece *a, const struct kvd_piece *b)
{
	return a->n == b->n && a->len == b->len &&
	       same_bytes(a->ids, b->ids, a->n * sizeof(*a->ids)) &&
	       same_bytes(a->ends, b->ends, a->n * sizeof(*a->ends)) &&
	       same_bytes(a->text, b->text, a->len) && same_bytes(a->cls, b->cls, a->len);
}

static int empty_piece(const struct kvd_piece *pc)
{
	return !pc->ids && !pc->ends && !pc->text && !pc->cls && !pc->n && !pc->len;
}

/* kvd_piece_make with each allocation failing in turn: how many runs. */
static long piece_runs(const struct kvd *d, const char *what, const char *text, int add_bos,
		       const struct kvd_markup *m)
{
	struct kvd_piece ref, pc;
	size_t len = strlen(text);
	long k;
	int rc;

	rc = kvd_piece_make(d, text, len, add_bos, m, &ref);
	CHECK(rc == 0 && ref.n > 0, "%s: the piece without failures (%d)", what, rc);
	if (rc)
		return 0;
	for (k = 0;; k++) {
		int hit;

		fail_from(k);
		rc = kvd_piece_make(d, text, len, add_bos, m, &pc);
		hit = failed_one(k);
		if (!hit) {
			CHECK(rc == 0 && same_piece(&pc, &ref),
			      "%s: with %ld allocations, none failing, the same piece", what, k);
			kvd_piece_free(&pc);
			break;
		}
		CHECK(rc == -ENOMEM && empty_piece(&pc),
		      "%s: allocation %ld failing: -ENOMEM and an empty piece (%d)", what, k, rc);
		if (!rc)
			kvd_piece_free(&pc);
	}
	kvd_piece_free(&ref);
	return k + 1;
}

static void conv_release(struct kvd_conv *c)
{
	free(c->text);
	free(c->cls);
	free(c->tokens);
	free(c->tok_end);
	memset(c, 0, sizeof(*c));
}

/* A conversation holding `n` tokens and their text ("a" per token). */
static int conv_with(struct kvd_conv *c, uint32_t n)
{
	memset(c, 0, sizeof(*c));
	for (uint32_t i = 0; i < n; i++)
		if (kvd_conv_push_token(c, (int32_t)(i % 50), "a", 1, 1))
			return -1;
	return 0;
}

static int same_conv(const struct kvd_conv *a, const struct kvd_conv *b)
{
	return a->n_tokens == b->n_tokens && a->text_len == b->text_len &&
	       a->text_hash == b->text_hash &&
	       same_bytes(a->tokens, b->tokens, a->n_tokens * sizeof(*a->tokens)) &&
	       same_bytes(a->tok_end, b->tok_end, a->n_tokens * sizeof(*a->tok_end)) &&
	       same_bytes(a->text, b->text, a->text_len) &&
	       same_bytes(a->cls, b->cls, a->text_len) &&
	       (!a->text || !a->text[a->text_len]);
}

/*
 * op on a conversation of n0 tokens, each allocation failing in turn: a
 * failure leaves it as it was, success as the run without failures.
 */
enum conv_op { OP_PIECE, OP_TOKEN, OP_TEXT };

static void conv_runs(const char *what, uint32_t n0, enum conv_op op, const struct kvd_piece *pc)
{
	struct kvd_conv ref, before, c;
	static char big[5000];
	long k;
	int rc;

	memset(big, 'b', sizeof(big) - 1);
#define APPLY(cv) (op == OP_PIECE ? kvd_conv_append_piece(cv, pc) : \
		   op == OP_TOKEN ? kvd_conv_push_token(cv, 7, big, sizeof(big) - 1, 1) : \
		   kvd_conv_append_text(cv, big, sizeof(big) - 1))
	if (conv_with(&ref, n0) || APPLY(&ref)) {
		CHECK(0, "%s: the append without failures", what);
		conv_release(&ref);
		return;
	}
	for (k = 0;; k++) {
		int hit;

		if (conv_with(&c, n0) || conv_with(&before, n0)) {
			CHECK(0, "%s: a conversation of %u tokens", what, n0);
			conv_release(&c);
			conv_release(&before);
			break;
		}
		fail_from(k);
		rc = APPLY(&c);
		hit = failed_one(k);
		if (!hit) {
			CHECK(rc == 0 && same_conv(&c, &ref),
			      "%s: with %ld allocations, none failing, the same conversation",
			      what, k);
			conv_release(&c);
			conv_release(&before);
			break;
		}
		CHECK(rc == -ENOMEM && same_conv(&c, &before),
		      "%s: allocation %ld failing: -ENOMEM, the conversation as it was (%d)",
		      what, k, rc);
		conv_release(&c);
		conv_release(&before);
	}
#undef APPLY
	CHECK(k >= 2, "%s: %ld allocations to fail", what, k);
	conv_release(&ref);
}

/*
 * The conversations' indexes (kvd_conv_init), each allocation failing in
 * turn, for several max_sessions: a failure is -ENOMEM and kvd_conv_fini
 * releases what was made; the text filter has KVD_TEXT_FILTER_PER_CONV
 * counters per conversation, a power of two within [2^16, 2^22]
 * (daemon.md: its memory is documented by that rule).
 */
static void conv_init_runs(void)
{
	static const uint32_t sessions[] = { 10, 1000, 5000, 70000 };

	for (size_t s = 0; s < sizeof(sessions) / sizeof(sessions[0]); s++) {
		uint64_t want = 1ull << KVD_TEXT_FILTER_MIN_BITS;
		long k;

		while (want < (uint64_t)sessions[s] * KVD_TEXT_FILTER_PER_CONV &&
		       want < 1ull << KVD_TEXT_FILTER_MAX_BITS)
			want <<= 1;
		for (k = 0;; k++) {
			struct kvd *d = calloc(1, sizeof(*d));
			int rc, hit;

			if (!d)
				return;
			d->cfg.max_sessions = sessions[s];
			fail_from(k);
			rc = kvd_conv_init(d);
			hit = failed_one(k);
			if (!hit)
				CHECK(rc == 0 && (uint64_t)d->text_filter_mask + 1 == want,
				      "conv init, %u sessions: %ld allocations, a text filter of %llu "
				      "counters (%llu)", sessions[s], k,
				      (unsigned long long)d->text_filter_mask + 1,
				      (unsigned long long)want);
			else
				CHECK(rc == -ENOMEM, "conv init, %u sessions: allocation %ld failing: "
				      "-ENOMEM (%d)", sessions[s], k, rc);
			kvd_conv_fini(d);
			free(d);
			if (!hit)
				break;
		}
	}
}

/* The radix index: init, and an insert, each allocation failing in turn. */
static void radix_runs(void)
{
	int32_t toks[2][16];
	struct kvd_radix r;
	struct kvd_rnode *a, *b;
	long k;
	int rc;

	for (int i = 0; i < 16; i++) {
		toks[0][i] = i;
		toks[1][i] = 100 + i;
	}
	for (k = 0;; k++) {
		int hit;

		fail_from(k);
		rc = kvd_radix_init(&r, 16, 64, 5);
		hit = failed_one(k);
		if (!hit) {
			CHECK(rc == 0, "radix init: with %ld allocations, none failing", k);
			if (!rc)
				kvd_radix_fini(&r);
			break;
		}
		CHECK(rc == -ENOMEM && !r.by_block, "radix init: allocation %ld failing: -ENOMEM, "
		      "nothing held (%d)", k, rc);
		if (!rc)
			kvd_radix_fini(&r);
	}
	CHECK(k >= 2, "radix init: %ld allocations to fail", k);
	if (kvd_radix_init(&r, 16, 64, 5))
		return;
	a = kvd_radix_insert(&r, 0, NULL, toks[0], 3, 0);
	fail_from(0);
	b = kvd_radix_insert(&r, 0, a, toks[1], 4, 0);
	failed_one(0);
	CHECK(a && !b && r.n == 1 && !kvd_radix_by_block(&r, 4) && r.n_evictable == 1 &&
	      !a->n_children && kvd_radix_match(&r, 0, toks[0], 2, NULL) == 1,
	      "radix insert: its allocation failing, NULL and the index as it was "
	      "(%u nodes, %u evictable)", r.n, r.n_evictable);
	b = kvd_radix_insert(&r, 0, a, toks[1], 4, 0);
	CHECK(b && r.n == 2 && kvd_radix_match(&r, 0, toks[0], 2, NULL) == 2,
	      "radix insert: then it inserts");
	kvd_radix_fini(&r);
}

static struct kvd *daemon_of(const char *path, struct kve_model **m)
{
	char err[256] = "";
	struct kvd *d = calloc(1, sizeof(*d));

	*m = kve_model_load(path, err, sizeof(err));
	if (d && *m)
		d->tok = kve_tokenizer_create(*m, err, sizeof(err));
	if (!d || !*m || !d->tok) {
		printf("%s: %s\n", path, err);
		if (*m)
			kve_model_free(*m);
		free(d);
		return NULL;
	}
	return d;
}

/* ---- a running daemon ------------------------------------------------------ */

struct live_reply {
	int32_t tokens[64];
	uint32_t n;
	int done, error;
	char err[256];
};

/* One greedy request to its end (an error event, the reply, or 30 s). */
static void live_ask(struct kvd *d, const char *prompt, struct live_reply *r)
{
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_event ev;
	struct kvd_job *j = NULL;

	memset(r, 0, sizeof(*r));
	rq.model = "test";
	rq.prompt = prompt;
	rq.prompt_len = strlen(prompt);
	rq.s.top_p = 1;
	rq.s.seed = 1;
	rq.s.has_seed = 1;
	rq.s.max_tokens = 6;
	if (kvd_job_submit(d, &rq, &j, &err)) {
		r->error = 1;
		snprintf(r->err, sizeof(r->err), "refused: %.200s", err.message);
		return;
	}
	while (kvd_job_next(j, &ev, 30000) == 1) {
		if (ev.type == KVD_EV_TOKEN) {
			if (ev.token >= 0 && r->n < 64)
				r->tokens[r->n++] = ev.token;
		} else {
			r->done = ev.type == KVD_EV_DONE;
			r->error = !r->done;
			if (r->error)
				snprintf(r->err, sizeof(r->err), "%s", ev.err.message);
			break;
		}
	}
	if (!r->done && !r->error)
		snprintf(r->err, sizeof(r->err), "no answer in 30 s");
	kvd_job_free(j);
}

static int live_same(const struct live_reply *a, const struct live_reply *b)
{
	return a->done && b->done && a->n == b->n && !memcmp(a->tokens, b->tokens, a->n * 4);
}

/*
 * Each allocation of the scheduler thread failing in turn while one
 * request is served, for k = 0, 1, ... until a request makes fewer
 * than k + 1 (or 600: the count a request makes is in the output).
 * Conversations are kept: later requests continue the same prompt's
 * cached blocks, so the prefix cache's paths are taken too.
 */
static void live_runs(const char *model, const char *self)
{
	static const char prompt[] = "<|im_start|>user\ncount the files in the tree, "
				     "then build it<|im_end|>\n<|im_start|>assistant\n";
	struct kvd_config c;
	struct live_reply ref, r, after;
	char err[256] = "";
	struct kvd *d = NULL;
	long k;
	int i, bad = 0, errors = 0, same = 0, hit;

	kvd_config_defaults(&c);
	snprintf(c.model_path, sizeof(c.model_path), "%s", model);
	snprintf(c.model_id, sizeof(c.model_id), "test");
	snprintf(c.backend, sizeof(c.backend), "memfd");
	c.kv_blocks = 256;
	c.toolwait_bpf = 0;
	c.log_level = KVD_LOG_ERR;
	if (kvd_create(&c, self, &d, err, sizeof(err))) {
		CHECK(0, "live: kvd_create: %s", err);
		return;
	}
	for (i = 0; i < 3000 && !kvd_ready(d); i++)
		usleep(10000);	/* workers load the model */
	live_ask(d, prompt, &ref);
	CHECK(ref.done && ref.n > 0, "live: the request without failures (%s)", ref.err);
	only_thread = d->sched;
	__atomic_store_n(&only_set, 1, __ATOMIC_RELEASE);
	for (k = 0; k < 600 && ref.done; k++) {
		fail_from(k);
		live_ask(d, prompt, &r);
		hit = failed_one(k);
		live_ask(d, prompt, &after);
		if (!hit) {
			CHECK(live_same(&r, &ref), "live: %ld scheduler allocations, none failing: "
			      "the same reply", k);
			break;
		}
		if (r.error && strcmp(r.err, "no answer in 30 s"))
			errors++;
		else if (live_same(&r, &ref))
			same++;
		else if (bad++ < 40)
			CHECK(0, "live: allocation %ld failing: neither the reply nor an error "
			      "(%u tokens, %s)", k, r.n, r.err);
		if (!live_same(&after, &ref) && bad++ < 40)
			CHECK(0, "live: after allocation %ld failed, the next request answers as "
			      "before (%u tokens, %s)", k, after.n, after.err);
	}
	__atomic_store_n(&only_set, 0, __ATOMIC_RELEASE);
	printf("live daemon: %ld runs with a scheduler allocation failing: %d errors, %d replies "
	       "as without failures\n", k, errors, same);
	CHECK(!bad, "live: %ld runs, each allocation of the scheduler thread failing in turn: "
	      "%d ended in an error, %d answered as without failures, %d otherwise", k, errors,
	      same, bad);
	kvd_destroy(d);
}

int main(int argc, char **argv)
{
	static const char chat[] = "<|im_start|>user\nlist the files, then build: "
				   "make -j2 && ./run --all 'héllo' 12345<|im_end|>\n"
				   "<|im_start|>assistant\n";
	struct kvd_span spans[3];
	struct kvd_markup mk = { spans, 3, 0 };
	struct kvd_piece pc;
	char self[PATH_MAX];
	long runs = 0;
	ssize_t n;
	int rc;

	if (test_worker_main(argc, argv, &rc))
		return rc;
	if (argc < 3) {
		fprintf(stderr, "usage: test_sched_oom BPE_MODEL SPM_MODEL\n");
		return 2;
	}
	/* the markup: the three markers of the chat text */
	spans[0] = (struct kvd_span){ 0, strlen("<|im_start|>") };
	spans[1] = (struct kvd_span){ (size_t)(strstr(chat, "<|im_end|>") - chat),
				      strlen("<|im_end|>") };
	spans[2] = (struct kvd_span){ (size_t)(strstr(chat, "<|im_start|>assistant") - chat),
				      strlen("<|im_start|>") };
	for (int i = 1; i <= 2; i++) {
		struct kve_model *m;
		struct kvd *d = daemon_of(argv[i], &m);
		char what[64];

		CHECK(d != NULL, "%s loads", argv[i]);
		if (!d)
			continue;
		snprintf(what, sizeof(what), "%s, first piece", i == 1 ? "bpe" : "spm");
		runs += piece_runs(d, what, chat, 1, NULL);
		snprintf(what, sizeof(what), "%s, later piece", i == 1 ? "bpe" : "spm");
		runs += piece_runs(d, what, chat, 0, NULL);
		snprintf(what, sizeof(what), "%s, markup", i == 1 ? "bpe" : "spm");
		runs += piece_runs(d, what, chat, 1, &mk);
		if (i == 1 && !kvd_piece_make(d, chat, strlen(chat), 0, &mk, &pc)) {
			/* 250 tokens: the piece grows the token arrays (256) */
			conv_runs("append a piece", 250, OP_PIECE, &pc);
			conv_runs("append a piece to an empty conversation", 0, OP_PIECE, &pc);
			kvd_piece_free(&pc);
		}
		kve_tokenizer_free(d->tok);
		kve_model_free(m);
		free(d);
	}
	/* a token past 256 and text past 1024 bytes: both arrays grow */
	conv_runs("push a token", 256, OP_TOKEN, NULL);
	conv_runs("append text", 10, OP_TEXT, NULL);
	conv_init_runs();
	radix_runs();
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		signal(SIGPIPE, SIG_IGN);
		setenv("KVD_AUDIT", "1", 0);
		live_runs(argv[1], self);
	}
	printf("%ld runs of kvd_piece_make with an allocation failing\n", runs);
	printf("%s: %d passed, %d failed\n", failed ? "FAIL" : "PASS", pass, failed);
	return failed ? 1 : 0;
}
